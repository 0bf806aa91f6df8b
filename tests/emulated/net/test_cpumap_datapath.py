"""The emulated cpumap data path: redirect to another CPU's kthread, bulk enqueue, the ring,
GRO, skb heads from the NAPI cache, entry replacement under traffic."""

from __future__ import annotations

import threading

import pytest

import pybpf
from pybpf.asm import FP, R0, R1, R2, R3, R6
from pybpf.asm import builder as b
from pybpf.uapi import AttachType, MapType
from xdp_lab import XDP_DROP, XDP_REDIRECT, Lab, cpu_recorder, redirect_prog, u32, xdp


def cpumap_threads(system) -> list[str]:
    """The kthreads of ``system``'s cpumap entries."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("cpumap/")
                  and any(t is entry.kthread for entry in _entries(system)))


def _entries(system) -> list:
    maps = [system.map_from_fd(fd) for fd in system.open_fds()
            if type(system.fd_get(fd)).__name__ == "MapFile"]
    return [entry for m in maps if hasattr(m, "cpu_map") for entry in m.cpu_map.values()]


def test_a_redirect_reaches_the_target_cpus_kthread_and_its_program_runs_there(make_lab):
    lab = make_lab(cpus=4)
    cm = lab.cpumap(4)
    seen = lab.system.map_create(MapType.ARRAY, 4, 4, 2)
    lab.set_entry(cm, 3, 256, cpu_recorder(lab.system, seen))
    map_id = lab.system.map_get_info(cm).id
    assert cpumap_threads(lab.system) == [f"cpumap/3/map:{map_id}"]
    lab.live(redirect_prog(lab.system, cm, 3), lab.frame(), 20)
    lab.entry(cm, 3).wait_idle()
    assert lab.system.map_lookup_elem(seen, u32(0)) == u32(3)  # smp_processor_id there
    assert lab.system.map_lookup_elem(seen, u32(1)) == u32(20)
    assert len(lab.drain()) == 20
    thread = lab.entry(cm, 3).kthread
    lab.system.close(cm)
    assert not thread.is_alive()


@pytest.mark.parametrize("gro,sock_gro", [(True, True), (True, False), (False, True)])
def test_frames_and_their_bytes_arrive_intact_and_in_order(make_lab, gro, sock_gro):
    lab = make_lab(gro=gro, sock_gro=sock_gro)
    cm = lab.cpumap()
    lab.set_entry(cm, 1, 2048)
    redirect = redirect_prog(lab.system, cm, 1)
    payloads = [bytes([i % 256]) * 40 + i.to_bytes(4, "big") for i in range(300)]
    received = []
    for i in range(0, len(payloads), 25):  # bursts the socket buffer holds
        for j, payload in enumerate(payloads[i:i + 25]):
            lab.live(redirect, lab.frame(payload, ident=i + j), 1, batch=1)
        lab.entry(cm, 1).wait_idle()
        received += lab.drain()
    assert received == payloads
    counters = lab.entry(cm, 1).counters()
    assert counters["enqueued"] == counters["polled"] == 300
    assert counters["gro"]["delivered_segs"] == 300
    assert (counters["gro"]["merged"] > 0) == (gro and sock_gro)


def test_drops_on_a_full_ring_are_counted_never_silent(make_lab):
    lab = make_lab()
    cm = lab.cpumap()
    lab.set_entry(cm, 1, 8)
    entry = lab.entry(cm, 1)
    entry.wait_idle()
    lab.live(redirect_prog(lab.system, cm, 1), lab.frame(), 64, batch=64)
    entry.wait_idle()
    counters = entry.counters()
    # the kthread sleeps until the batch's flush: the ring takes 8, the rest has no room
    assert (counters["enqueued"], counters["enqueue_drops"]) == (8, 56)
    assert counters["bulk_flushes"] == 8 and counters["polled"] == 8
    assert sum(len(d) // 18 for d in lab.drain()) == 8


def _udp_flow_in_bursts(lab: Lab, cm: int, bursts: int, size: int = 16) -> None:
    redirect = redirect_prog(lab.system, cm, 1)
    for _ in range(bursts):
        lab.live(redirect, lab.frame(), size, batch=size)
        lab.entry(cm, 1).wait_idle()
        lab.drain()  # the application reads: its skbs go back to the slab


def test_with_gro_on_fifteen_of_sixteen_heads_come_back_through_the_napi_cache(make_lab):
    lab = make_lab()
    cm = lab.cpumap()
    lab.set_entry(cm, 1, 2048)
    _udp_flow_in_bursts(lab, cm, 16)  # warm-up: the cache settles into its cycle
    before = lab.entry(cm, 1).counters()
    _udp_flow_in_bursts(lab, cm, 32)
    after = lab.entry(cm, 1).counters()
    heads = after["skb_heads"] - before["skb_heads"]
    recycled = after["heads_recycled"] - before["heads_recycled"]
    assert (heads, recycled) == (32 * 16, 32 * 15)
    assert after["gro"]["delivered_skbs"] - before["gro"]["delivered_skbs"] == 32


def test_with_gro_off_every_head_comes_from_the_allocator(make_lab):
    lab = make_lab(gro=False)
    cm = lab.cpumap()
    lab.set_entry(cm, 1, 2048)
    _udp_flow_in_bursts(lab, cm, 8)
    counters = lab.entry(cm, 1).counters()
    assert counters["skb_heads"] == counters["heads_new"] == 128
    assert counters["heads_recycled"] == 0
    assert counters["gro"]["delivered_skbs"] == 128


def test_before_the_bulk_cache_gro_returns_heads_cpumap_never_takes_back(make_lab):
    lab = make_lab(cpumap_skb_alloc="kmem_cache_alloc_bulk")
    cm = lab.cpumap()
    lab.set_entry(cm, 1, 2048)
    _udp_flow_in_bursts(lab, cm, 8)
    counters = lab.entry(cm, 1).counters()
    assert counters["heads_new"] == 128 and counters["heads_recycled"] == 0
    napi = lab.net.skb_cache.counters()["napi_cache"][1]
    assert napi["put"] == 8 * 15 and napi["get"] == 0 and napi["flushed"] > 0


def test_the_skb_head_path_is_one_of_two():
    with pytest.raises(ValueError, match="kmem_cache_alloc_bulk"):
        pybpf.system("emulated", cpumap_skb_alloc="slab")
    with pytest.raises(ValueError, match="netif_receive_skb_list"):
        pybpf.system("emulated", cpumap_rx="gro")


def test_before_6_15_each_pass_goes_up_as_one_list_without_a_gro_node(make_lab):
    lab = make_lab(cpumap_skb_alloc="kmem_cache_alloc_bulk", cpumap_rx="netif_receive_skb_list")
    assert lab.vB.gro  # the device's GRO is on, but the old kthread had no GRO node
    cm = lab.cpumap()
    lab.set_entry(cm, 1, 2048)
    _udp_flow_in_bursts(lab, cm, 4)
    counters = lab.entry(cm, 1).counters()
    assert counters["skbs_in"] == counters["heads_new"] == 64
    assert counters["gro"]["received"] == 0
    assert lab.net.stack.snmp["Udp"]["InDatagrams"] == 64  # one skb read per frame


def test_the_cpumap_program_may_drop_or_redirect_on_the_target_cpu(make_lab):
    lab = make_lab()
    eth = lab.net.add_device("eth9")
    dm = lab.system.map_create(MapType.DEVMAP, 4, 4, 1)
    lab.system.map_update_elem(dm, u32(0), u32(eth.ifindex))
    onward = xdp(lab.system, [  # even IP ids go on to eth9, odd ones are dropped
        b.ldx(4, R2, R1, 0), b.ldx(4, R3, R1, 4), b.mov64(R0, R2), b.add64(R0, 20),
        b.mov64(R6, XDP_DROP), b.jgt(R0, R3, "out"), b.ldx(1, R0, R2, 19), b.and64(R0, 1),
        b.jne(R0, 0, "out"), b.ld_map_fd(R1, "d"), b.mov64(R2, 0), b.mov64(R3, 0),
        b.call("redirect_map"), b.mov64(R6, R0),
        b.label("out"), b.mov64(R0, R6), b.exit_()], {"d": dm}, attach=AttachType.XDP_CPUMAP)
    cm = lab.cpumap()
    lab.set_entry(cm, 1, 64, onward)
    redirect = redirect_prog(lab.system, cm, 1)
    for i in range(10):
        lab.live(redirect, lab.frame(ident=i), 1)
    lab.entry(cm, 1).wait_idle()
    counters = lab.entry(cm, 1).counters()
    assert (counters["prog_redirect"], counters["prog_drop"], counters["prog_pass"]) == (5, 5, 0)
    assert len(eth.transmitted()) == 5 and lab.drain() == []


def test_generic_xdp_skbs_take_the_rings_skb_path(make_lab):
    lab = make_lab()
    cm = lab.cpumap()
    lab.set_entry(cm, 1, 256)
    lab.attach(lab.vB, redirect_prog(lab.system, cm, 1), flags=1 << 1)  # XDP_FLAGS_SKB_MODE
    gen = xdp(lab.system, [b.mov64(R0, 3), b.exit_()])  # XDP_TX on vA: frames into vB
    payloads = [bytes([i]) * 18 for i in range(10)]
    for i, payload in enumerate(payloads):
        lab.live(gen, lab.frame(payload, ident=i), 1, dev=lab.vA)
    lab.entry(cm, 1).wait_idle()
    counters = lab.entry(cm, 1).counters()
    assert counters["enqueued"] == counters["skbs_in"] == 10 and counters["skb_heads"] == 0
    assert lab.drain() == payloads


def test_entries_replaced_and_deleted_under_traffic_lose_no_frame_and_leave_no_thread(make_lab):
    lab = make_lab(rcvbuf=1 << 40)  # the socket never fills: every frame is accounted for
    cm = lab.cpumap()
    counts = lab.system.map_create(MapType.ARRAY, 4, 8, 2)
    counting = xdp(lab.system, [  # redirect, then count redirected (0) and not (1)
        b.ld_map_fd(R1, "c"), b.mov64(R2, 1), b.mov64(R3, XDP_DROP), b.call("redirect_map"),
        b.mov64(R6, R0), b.st(4, FP, -4, 0), b.jeq(R6, XDP_REDIRECT, "count"),
        b.st(4, FP, -4, 1), b.label("count"), b.mov64(R2, FP), b.add64(R2, -4),
        b.ld_map_fd(R1, "n"), b.call("map_lookup_elem"), b.jeq(R0, 0, "out"), b.mov64(R1, 1),
        b.atomic(8, 0, R0, 0, R1), b.label("out"), b.mov64(R0, R6), b.exit_()],
        {"c": cm, "n": counts})
    stop = threading.Event()
    errors: list[BaseException] = []
    threads_before = set(threading.enumerate())

    def traffic() -> None:
        try:
            while not stop.is_set():
                lab.live(counting, lab.frame(), 64, batch=32)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        for qsize in (16, 2048, 8, 512, 0, 64, 32):
            lab.set_entry(cm, 1, qsize)  # qsize 0 deletes
            threading.Event().wait(0.02)
        lab.system.map_delete_elem(cm, u32(1))
    finally:
        stop.set()
        sender.join()
    lab.system.machine.rcu.poll()
    assert errors == []
    assert not any(t.name.startswith("cpumap/1/") and t.is_alive() and t not in threads_before
                   for t in threading.enumerate())
    redirected = int.from_bytes(lab.system.map_lookup_elem(counts, u32(0)), "little")
    stats = lab.system.map_stats(cm)
    freed = stats["freed_entries"]
    assert stats["entries"] == {} and freed["entries"] == 6
    assert freed["enqueued"] + freed["enqueue_drops"] == redirected > 0
    assert freed["polled"] == freed["enqueued"] and freed["queued"] == 0
    assert freed["gro_delivered_segs"] == freed["polled"]
    assert len(lab.drain()) == freed["polled"]
