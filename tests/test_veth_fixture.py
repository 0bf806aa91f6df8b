"""pybpf.testing.veth: the same veth pair on both backends, and nothing left after a failure."""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from pybpf import netns
from pybpf.emulated import XdpBuff
from pybpf.packet import udp_frame
from pybpf.testing.veth import KernelVethPair, veth_pair

NETNS_SKIP = netns.unavailable()
needs_netns = pytest.mark.skipif(NETNS_SKIP is not None, reason=str(NETNS_SKIP))


def _send_raw(pair, frames: list[bytes]) -> None:
    """Frames into ``a`` as if from a wire (AF_PACKET), so ``b`` receives them."""
    with pair.entered():
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    with tx:
        tx.bind((pair.a, 0))
        for frame in frames:
            tx.send(frame)


@needs_netns
def test_the_kernel_pair_receives_udp_and_counts_it(kernel):
    with veth_pair(kernel) as pair:
        assert isinstance(pair, KernelVethPair) and pair.ifindex("vB") != pair.ifindex("vA")
        receiver = pair.udp_receiver(9000, keep=True)
        frames = [udp_frame(pair.mac("vB"), pair.mac("vA"), pair.a_addr, pair.b_addr, 1, 9000,
                            bytes([i]) * 10, ident=i) for i in range(5)]
        _send_raw(pair, frames)
        deadline = time.monotonic() + 10
        while receiver.datagrams < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        receiver.stop()
        assert receiver.payloads == [bytes([i]) * 10 for i in range(5)]
        assert pair.snmp()["Udp"]["InDatagrams"] == 5
        pair.set_gro("vB", True)
        assert pair.ns.gro("vB")
    assert pair.ns.closed


def test_the_emulated_pair_has_the_same_shape(emulated):
    with veth_pair(emulated) as pair:
        assert (pair.ifindex("vB"), pair.ifindex("vA")) == (2, 3)  # as in a fresh namespace
        receiver = pair.udp_receiver(9000, keep=True)
        dev = pair.devs["vB"]
        dev.set_gro(True)  # NAPI on, so frames can be handed to it
        frame = udp_frame(pair.mac("vB"), pair.mac("vA"), pair.a_addr, pair.b_addr, 1, 9000,
                          b"emulated")
        pair.devs["vA"].ndo_xdp_xmit([XdpBuff.from_bytes(frame, pair.devs["vA"])], 1)
        pair.net.do_softirq()
        receiver.stop()
        assert receiver.payloads == [b"emulated"]
        assert pair.snmp()["Udp"]["InDatagrams"] == 1
    assert pair.net.dev_get_by_name("vB") is None


CHILD = textwrap.dedent("""
    import os, signal, sys, time
    # Ctrl-C's default, whatever the test runner inherited (a shell's background job starts
    # with SIGINT ignored, which a child would keep)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import pybpf
    from pybpf.testing.veth import veth_pair
    pair = veth_pair(pybpf.system("kernel"))
    pair.udp_receiver(9000)
    ino = os.stat(f"/proc/self/fd/{pair.ns.fd}").st_ino
    print(ino, flush=True)
    mode = sys.argv[1]
    if mode == "fail":
        sys.stdin.readline()  # the parent has seen the namespace
        with pair:
            assert False, "a test failing inside the pair"
    time.sleep(60)  # waits for SIGINT or SIGKILL
""")


def _netns_inodes() -> set[int]:
    """Every network namespace some task is in or some process holds an fd on."""
    inodes = set()
    for path in glob.glob("/proc/[0-9]*/task/*/ns/net") + glob.glob("/proc/[0-9]*/fd/*"):
        try:
            link = os.readlink(path)
        except OSError:
            continue
        if link.startswith("net:["):
            inodes.add(int(link[5:-1]))
    return inodes


@needs_netns
@pytest.mark.parametrize("mode", ["fail", "sigint", "sigkill"])
def test_nothing_is_left_after_a_failure_ctrl_c_or_kill(kernel, mode):
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    ino = int(child.stdout.readline())
    assert ino in _netns_inodes()
    if mode != "fail":
        child.send_signal(signal.SIGINT if mode == "sigint" else signal.SIGKILL)
    # the failing child goes on once the namespace was seen (else it could be gone already)
    _, err = child.communicate("go\n" if mode == "fail" else None, timeout=30)
    assert child.returncode != 0
    if mode == "fail":
        assert "a test failing inside the pair" in err
    assert ino not in _netns_inodes()
