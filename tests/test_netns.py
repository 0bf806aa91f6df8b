"""pybpf.netns: anonymous network namespaces, veth pairs, and their teardown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from pybpf import netns

REASON = netns.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def _running(marker: str) -> bool:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return bool(out.strip())


def test_namespace_has_only_loopback_up():
    with netns.NetNamespace() as ns:
        links = ns.ip("-o", "link").splitlines()
        assert len(links) == 1 and "lo:" in links[0] and "UP" in links[0]


def test_veth_pair_gets_ifindexes_and_macs_inside_the_namespace_only():
    with netns.NetNamespace() as ns:
        a, b = ns.add_veth("pbA", "pbB")
        assert a != b and a > 0 and b > 0
        assert len(ns.mac("pbA")) == 6 and ns.mac("pbA") != ns.mac("pbB")
        names = socket.if_nameindex()
        assert ("pbA" not in [n for _, n in names]), "the veth leaked into the host namespace"


def test_sockets_made_in_entered_block_talk_over_the_namespace_loopback():
    with netns.NetNamespace() as ns:
        with ns.entered():
            server = socket.create_server(("127.0.0.1", 0))
            client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        client.sendall(b"through the namespace")
        assert peer.recv(64) == b"through the namespace"
        for s in (server, client, peer):
            s.close()


def test_entered_restores_the_thread_namespace():
    before = os.readlink(f"/proc/self/task/{os.getpid()}/ns/net")
    with netns.NetNamespace() as ns:
        with ns.entered():
            inside = os.readlink(f"/proc/self/task/{os.getpid()}/ns/net")
        after = os.readlink(f"/proc/self/task/{os.getpid()}/ns/net")
    assert inside != before and after == before


def test_gro_toggles_on_a_veth():
    with netns.NetNamespace() as ns:
        ns.add_veth("pbA", "pbB")
        ns.set_gro("pbB", True)
        assert ns.gro("pbB") is True
        ns.set_gro("pbB", False)
        assert ns.gro("pbB") is False


def test_rps_is_written_in_the_namespace_not_the_host():
    host = open("/sys/class/net/lo/queues/rx-0/rps_cpus").read()
    with netns.NetNamespace() as ns:
        ns.set_rps("lo", [0])
        assert int(ns.read_sysfs("class/net/lo/queues/rx-0/rps_cpus"), 16) == 1
    assert open("/sys/class/net/lo/queues/rx-0/rps_cpus").read() == host


def test_close_kills_processes_started_inside():
    ns = netns.NetNamespace()
    proc = ns.popen(["sleep", "1000"])
    ns.close()
    assert proc.returncode is not None
    assert ns.closed
    ns.close()  # idempotent


def test_bad_names_are_value_errors():
    with netns.NetNamespace() as ns:
        for bad in ("", "x" * 16, "a/b", "a b", "..", "a:b"):
            with pytest.raises(ValueError):
                ns.add_veth(bad, "ok")
        with pytest.raises(ValueError):
            ns.write_sysfs("class/../../etc/passwd", "1")
        with pytest.raises(ValueError):
            ns.write_sysfs("class/net/lo/queues/rx-0/rps_cpus", "1'; reboot '")
    with pytest.raises(ValueError, match="closed"):
        ns.ip("link")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_nothing_survives_a_process_killed_mid_run(sig):
    marker = f"{os.getpid()}.{sig.value}{int(time.time() * 1000) % 100000}"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import signal, sys, time
        # Ctrl-C's default, whatever the test runner inherited (see test_veth_fixture.py)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from pybpf.netns import NetNamespace
        ns = NetNamespace()
        ns.add_veth("pbA", "pbB")
        ns.popen(["sleep", "{marker}"])
        print("ready", flush=True)
        time.sleep(1000)
    """)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert child.stdout.readline().strip() == "ready"
    assert _running(f"sleep {marker}")
    child.send_signal(sig)
    child.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _running(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(f"sleep {marker}"), "a process started in the namespace outlived it"
