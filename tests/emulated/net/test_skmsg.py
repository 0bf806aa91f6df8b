"""The emulated psock data path (emulated/net/skmsg.py, tcp_bpf.py): the backlog's EAGAIN retry,
faults under load, thread lifetimes, target_cpu in both designs and where the work runs."""

from __future__ import annotations

import errno
import itertools
import os
import random
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import err_of, u32
from pybpf.emulated.net.skmsg import BACKLOG_MAX_BYTES, RX_MAX_READ, MsgQueue, psock_table
from pybpf.uapi import BPF_F_SOCKMAP_TARGET_CPU, SK_PASS, AttachType, MapType
from sockmap_lab import Proxy, pattern, psock_threads, returning, wait_for


def test_a_full_send_buffer_is_retried_without_loss_or_duplication(emulated, proxies):
    proxy = proxies(emulated, insert=False)
    for sock in (proxy.p2,):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    proxy.c2.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    proxy.insert()
    data = pattern(512 << 10, seed=5)
    sender = proxy.send_in_thread(data, 200_000)
    got = bytearray()
    while len(got) < len(data):
        got += emulated.sock_recv(proxy.c2, 8192, timeout=10)
        if len(got) % 20 == 0:
            time.sleep(0.001)  # a slow reader
    sender.join(10)
    assert got == data
    assert wait_for(lambda: sum(s.bytes for s in emulated.sockmap_stats().values())
                    == len(data))
    assert sum(s.eagain_retries for s in emulated.sockmap_stats().values()) > 0


FAULTS = ("close p1", "close p2", "delete p1", "delete p2", "detach", "close map")


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("seed", range(3))
def test_faults_under_load_lose_and_duplicate_nothing(emulated, fault, seed):
    """Whatever goes at whatever moment, c2 receives a prefix of what c1 sent, no call
    hangs, and the psock threads end."""
    rng = random.Random(seed * 31 + FAULTS.index(fault))
    proxy = Proxy(emulated, map_type=rng.choice([MapType.SOCKMAP, MapType.SOCKHASH]))
    data = pattern(4 << 20, seed=seed)
    stop = threading.Event()

    def send() -> None:
        view = memoryview(data)
        proxy.c1.settimeout(0.2)
        while view and not stop.is_set():
            try:
                view = view[proxy.c1.send(view[:65536]):]
            except (TimeoutError, OSError):
                continue

    sender = threading.Thread(target=send, daemon=True)
    got = bytearray()

    def receive() -> None:
        while True:
            try:
                chunk = emulated.sock_recv(proxy.c2, 1 << 20, timeout=0.3)
            except OSError:
                return
            if not chunk:
                return
            got.extend(chunk)

    receiver = threading.Thread(target=receive, daemon=True)
    sender.start()
    receiver.start()
    time.sleep(rng.uniform(0.005, 0.1))
    if fault == "close p1":
        proxy.p1.close()
    elif fault == "close p2":
        proxy.p2.close()
    elif fault == "delete p1":
        emulated.map_delete_elem(proxy.map, u32(0))
    elif fault == "delete p2":
        emulated.map_delete_elem(proxy.map, u32(1))
    elif fault == "detach":
        emulated.prog_detach(proxy.map, AttachType.SK_SKB_VERDICT, proxy.verdict)
    else:
        emulated.close(proxy.fds.pop(0))
    sender.join(5 if fault == "detach" else 0.3)
    stop.set()
    sender.join(2)
    receiver.join(5)
    assert not receiver.is_alive(), "sock_recv hung"
    assert bytes(got) == data[:len(got)]
    if fault == "detach":  # the inserted sockets keep their verdict
        assert bytes(got) == data
    proxy.close()
    assert wait_for(lambda: not psock_threads()), "psock threads outlived their sockets"


def test_threads_run_while_sockets_are_in_the_map_and_end_with_them(emulated):
    baseline = threading.active_count()
    proxy = Proxy(emulated)
    data = pattern(100_000)
    proxy.send_in_thread(data, 4096).join(5)
    assert proxy.receive(len(data)) == data
    names = {t.name.split("-")[1] for t in psock_threads()}
    assert names == {"rx", "work"}  # p1 and p2 receive; p2's work sends
    emulated.map_delete_elem(proxy.map, u32(0))
    emulated.map_delete_elem(proxy.map, u32(1))
    assert wait_for(lambda: threading.active_count() == baseline)
    proxy.close()


def test_a_socket_closed_by_its_application_leaves_the_map_and_closes(emulated, proxies):
    proxy = proxies(emulated)
    proxy.p1.close()
    assert proxy.c1.recv(1) == b""  # the psock's reference went: the peer sees the FIN
    assert err_of(emulated.map_delete_elem, proxy.map, u32(0)) == errno.EINVAL


def test_a_psock_without_programs_runs_no_thread_and_keeps_the_socket_plain(emulated):
    a, b = socket.socketpair()
    fd = emulated.map_create(MapType.SOCKMAP, 4, 4, 1)
    emulated.map_update_elem(fd, u32(0), u32(a.fileno()))
    assert not psock_threads()
    b.sendall(b"plain")
    assert emulated.sock_recv(a, 10, timeout=2) == b"plain"
    assert emulated.sock_send(a, b"back") == 4
    assert b.recv(10) == b"back"
    a.close()
    b.close()
    emulated.close(fd)


# -- target_cpu ------------------------------------------------------------------------------
def flags_for(cpu: int) -> int:
    return BPF_F_SOCKMAP_TARGET_CPU | cpu << 32


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH], ids=["map", "hash"])
@pytest.mark.parametrize("design", ["flag", "value"])
def test_target_cpu_puts_the_backlog_work_on_that_cpu(four_cpus, proxies, map_type, design):
    update = {"flags": flags_for(3)} if design == "flag" else {"target_cpu": 3}
    proxy = proxies(four_cpus, map_type=map_type, **update)
    data = pattern(1 << 20)
    sender = proxy.send_in_thread(data, 65536)
    assert proxy.receive(len(data)) == data
    sender.join(5)
    # the work counts a run when it ends, after the reader may have its last bytes
    assert wait_for(lambda: four_cpus.sockmap_stats()[3].bytes == len(data))
    stats = four_cpus.sockmap_stats()
    assert {cpu for cpu, s in stats.items() if s.backlog_runs} == {3}
    assert stats[3].bytes == len(data)
    assert stats[3].busy_ns > 0
    workers = [t for t in psock_threads() if t.name.startswith("psock-work")]
    host_cpus = sorted(os.sched_getaffinity(0))
    assert workers and all(os.sched_getaffinity(t.native_id) == {host_cpus[3 % len(host_cpus)]}
                           for t in workers)


def test_cpu_0_is_a_target_cpu(four_cpus, proxies):
    proxy = proxies(four_cpus, flags=flags_for(0))
    data = pattern(200_000)
    proxy.send_in_thread(data, 65536).join(5)
    assert proxy.receive(len(data)) == data
    assert wait_for(lambda: four_cpus.sockmap_stats()[0].bytes == len(data))
    assert {c for c, s in four_cpus.sockmap_stats().items() if s.backlog_runs} == {0}


def test_unbound_work_runs_on_the_cpu_that_queued_it(four_cpus, proxies):
    proxy = proxies(four_cpus)
    data = pattern(1 << 20)
    proxy.send_in_thread(data, 65536).join(5)
    assert proxy.receive(len(data)) == data
    assert wait_for(lambda: sum(s.bytes for s in four_cpus.sockmap_stats().values())
                    == len(data))
    stats = four_cpus.sockmap_stats()
    work_cpus = {c for c, s in stats.items() if s.backlog_runs}
    verdict_cpus = {c for c, s in stats.items() if s.verdicts}
    assert work_cpus and work_cpus <= verdict_cpus


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH], ids=["map", "hash"])
def test_target_cpu_refusals(four_cpus, map_type):
    sys = four_cpus
    fd = sys.map_create(map_type, 4, 4, 2)
    array = sys.map_create(MapType.ARRAY, 4, 4, 1)
    a, b = socket.socketpair()
    value = u32(a.fileno())
    try:
        assert err_of(sys.map_update_elem, fd, u32(0), value, flags_for(4)) == errno.EINVAL
        assert err_of(sys.map_update_elem, fd, u32(0), value, target_cpu=4) == errno.EINVAL
        assert err_of(sys.map_update_elem, fd, u32(0), value, flags_for(1),
                      target_cpu=1) == errno.EINVAL
        assert err_of(sys.map_update_elem, fd, u32(0), value, flags_for(1) | 8) == errno.EINVAL
        assert err_of(sys.map_update_elem, fd, u32(0), value, 1 << 32) == errno.EINVAL
        assert err_of(sys.map_update_elem, array, u32(0), u32(0), target_cpu=0) == errno.EINVAL
        assert err_of(sys.map_update_elem, array, u32(0), u32(0), flags_for(0)) == errno.EINVAL
        sys.map_update_elem(fd, u32(0), value, flags_for(3) | 1)  # with BPF_NOEXIST
        assert err_of(sys.map_update_elem, fd, u32(0), value, flags_for(3) | 1) == errno.EEXIST
    finally:
        a.close()
        b.close()
        sys.close(fd)
        sys.close(array)


def test_the_kernel_refuses_the_target_cpu_flag(kernel):
    fd = kernel.map_create(MapType.SOCKMAP, 4, 4, 1)
    a, b = socket.socketpair()
    try:
        assert err_of(kernel.map_update_elem, fd, u32(0), u32(a.fileno()),
                      flags_for(0)) == errno.EINVAL
    finally:
        a.close()
        b.close()
        kernel.close(fd)


# -- bounds: a reader that stops stops the sender, not the memory ------------------------------
def blocked_sender(sock: socket.socket, data: bytes) -> tuple[threading.Thread, list[int]]:
    """Send ``data`` on ``sock`` in a thread; the list holds the bytes sent so far."""
    sent = [0]

    def send() -> None:
        view = memoryview(data)
        while view:
            n = sock.send(view[:1 << 20])
            sent[0] += n
            view = view[n:]

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread, sent


def settled(sent: list[int]) -> int:
    """The sender's count once it has stopped moving (its peer's buffers are full)."""
    last = -1
    while sent[0] != last:
        last = sent[0]
        time.sleep(0.3)
    return last


def test_a_target_that_cannot_send_stops_the_receive_thread_at_the_backlog_bound(
        emulated, proxies):
    proxy = proxies(emulated)
    psock = psock_table(emulated.machine).lookup_fd(proxy.p2.fileno())
    data = random.Random(1).randbytes(64 << 20)  # more than every buffer on the way
    sender, sent = blocked_sender(proxy.c1, data)
    settled(sent)
    assert sender.is_alive(), "the sender should block: c2 reads nothing"
    assert BACKLOG_MAX_BYTES <= psock.backlog_bytes <= BACKLOG_MAX_BYTES + RX_MAX_READ
    assert proxy.receive(len(data)) == data
    sender.join(5)
    assert wait_for(lambda: psock.backlog_bytes == 0)


@pytest.mark.parametrize("path", ["sk_pass", "ingress redirect"])
def test_data_the_application_leaves_is_bounded_by_its_receive_buffer(emulated, proxies, path):
    """SK_PASS data stays charged to the socket in the kernel, and an ingress redirect gets
    -EAGAIN (retried a jiffy later) once the target holds its rcvbuf: either way the sender
    stops, not the memory."""
    if path == "sk_pass":
        proxy = proxies(emulated, verdict=returning(SK_PASS))
        reader = proxy.p1
    else:
        proxy = proxies(emulated, mode="ingress")
        reader = proxy.c2
    psock = psock_table(emulated.machine).lookup_fd(reader.fileno())
    data = random.Random(2).randbytes(32 << 20)
    sender, sent = blocked_sender(proxy.c1, data)
    settled(sent)
    assert sender.is_alive()
    rcvbuf = reader.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    assert rcvbuf <= psock.ingress_msg.nbytes <= rcvbuf + RX_MAX_READ
    if path == "ingress redirect":
        assert sum(s.eagain_retries for s in emulated.sockmap_stats().values()) > 0
    assert proxy.receive(len(data), sock=reader) == data
    sender.join(5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20), st.lists(st.integers(1, 500), min_size=1))
def test_msg_queue_reads_give_back_every_byte_in_order(chunks, reads):
    queue = MsgQueue()
    for chunk in chunks:
        queue.append(chunk)
    out = bytearray()
    for i in itertools.count():
        if not queue:
            break
        before = queue.nbytes
        got = queue.take(reads[i % len(reads)])
        assert 0 < len(got) <= reads[i % len(reads)] or not before
        assert queue.nbytes == before - len(got)
        out += got
    assert out == b"".join(chunks) and queue.nbytes == 0
