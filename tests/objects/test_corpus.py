"""The C corpus (tests/objects/corpus/*.c): small programs written the way selftests progs
and libbpf-bootstrap examples are, each compiled once, loaded on each backend and run with
given inputs. Each case states what a run must leave behind (return values, map contents,
.bss/.data globals, a data_out frame) or, for a program the verifier refuses, the errno;
the expected values are the kernel's (measured on 6.18), so a backend that matches them
matches the kernel. Cases the emulated backend does not run as the kernel does are xfail
there, each with the exact difference as its reason."""

from __future__ import annotations

import ctypes
import errno
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pybpf.bpf_object import Object, ObjectSpec
from pybpf.codecs import PerCpuValue
from pybpf.errors import BPFError
from pybpf.maps import Map
from pybpf.packet import (
    ETH_P_IP,
    IPPROTO_TCP,
    IPPROTO_UDP,
    TCP_ACK,
    TCP_SYN,
    ethhdr,
    iphdr,
    tcp_frame,
    udp_frame,
)
from pybpf.testing.clang import CLANG_SKIP_REASON, clang_available, compile_bpf
from pybpf.uapi import BPF_F_TEST_RUN_ON_CPU

CORPUS_DIR = Path(__file__).parent / "corpus"
XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX = range(4)
MAC_A, MAC_B = "02:00:00:00:00:01", "02:00:00:00:00:02"
ETH_P_ARP, ETH_P_8021Q = 0x0806, 0x8100
SK_BUFF_SIZE = 192  # sizeof(struct __sk_buff): a tc run's ctx_out must hold all of it


# Why a case does not give the kernel's results yet.


# -- reading results -------------------------------------------------------------------------

def plain(value: Any) -> Any:
    """A map value or global as plain Python: per-CPU values a list, structs tuples."""
    if isinstance(value, PerCpuValue):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


def contents(m: Map) -> dict:
    return {plain(key): plain(value) for key, value in m.items()}


def signed(retval: int) -> int:
    """A test run's return value as the program's C int (the kernel hands back a u32)."""
    return ctypes.c_int32(retval).value


def ip4(text: str) -> int:
    """An IPv4 address as the program reads it: network-order bytes as a host u32."""
    return int.from_bytes(bytes(int(part) for part in text.split(".")), "little")


def udp(dport: int, saddr: str = "10.0.0.1", sport: int = 1000, payload: bytes = b"") -> bytes:
    return udp_frame(MAC_B, MAC_A, saddr, "10.0.0.2", sport, dport, payload)


def vlan_tagged(frame: bytes, *tcis: int) -> bytes:
    """``frame`` with 802.1Q tags after its MAC addresses, outermost first."""
    tags = b"".join(struct.pack("!HH", ETH_P_8021Q, tci) for tci in tcis)
    return frame[:12] + tags + frame[12:]


def ipv6_tcp(dport: int, flags: int, vlans: int = 0) -> bytes:
    tcp = tcp_frame(MAC_B, MAC_A, "fd00::1", "fd00::2", 40000, dport, flags=flags)
    return vlan_tagged(tcp, *range(100, 100 + vlans))


# -- the cases -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One corpus program: ``run(obj)`` drives it and returns what it observed, which must
    equal ``expected`` (a callable takes the number of possible CPUs). ``refused``: the
    errno of the load instead, whose verifier log must hold ``refusal`` (so that a load
    refused for another reason does not pass). ``before_load``: globals set in the spec
    before loading. ``emulated_xfail`` / ``kernel_xfail``: why that backend does not give
    the kernel's results yet."""

    id: str
    source: str
    expected: dict | Callable[[int], dict] | None = None
    run: Callable[[Object], dict] | None = None
    before_load: dict = field(default_factory=dict)
    refused: int | None = None
    refusal: str = ""
    emulated_xfail: str | None = None
    kernel_xfail: str | None = None


def run_loop_bounded_sum(obj: Object) -> dict:
    prog, g = obj.programs["sum_bytes"], obj.globals
    runs = []
    for frame in (bytes(range(64)), bytes([3]) * 21):
        runs.append((prog.test_run(frame).retval, g["byte_sum"], g["bytes_seen"]))
    return {"runs": runs}


def ip_csum_fold(frame: bytes) -> int:
    """What verify_ip_csum folds: the ten header words as the program loads them (host
    order), summed with end-around carries."""
    total = sum(struct.unpack("<10H", frame[14:34]))
    total = (total & 0xFFFF) + (total >> 16)
    return (total & 0xFFFF) + (total >> 16)


GOOD_IP = udp(53)
BAD_IP = GOOD_IP[:24] + bytes([GOOD_IP[24] ^ 0xFF]) + GOOD_IP[25:]  # the checksum broken


def run_loop_unrolled_csum(obj: Object) -> dict:
    prog = obj.programs["verify_ip_csum"]
    out = {}
    for name, frame in (("good", GOOD_IP), ("bad", BAD_IP), ("arp", bytes(42))):
        out[name] = (prog.test_run(frame).retval, obj.globals["folded"])
    out["checked"] = obj.globals["checked"]
    return out


def run_collatz(obj: Object) -> dict:
    retval = obj.programs["collatz"].test_run().retval
    return {"retval": retval, "steps": obj.globals["steps"], "peak": obj.globals["peak"]}


def run_iter_num_sum(obj: Object) -> dict:
    retval = obj.programs["iterate_squares"].test_run().retval
    return {"retval": retval, "sum": obj.globals["sum_of_squares"],
            "visited": obj.globals["visited"]}


def run_iter_num_nested(obj: Object) -> dict:
    obj.programs["fill_cells"].test_run()
    return {"cells": contents(obj.maps["cells"]), "err": obj.globals["bad_range_err"],
            "items": obj.globals["bad_range_items"]}


def run_global_funcs(obj: Object) -> dict:
    retval = obj.programs["use_globals"].test_run(bytes(64)).retval
    return {"retval": retval, "results": obj.globals["results"]}


def run_static_subprogs(obj: Object) -> dict:
    prog, g = obj.programs["number_theory"], obj.globals
    out = {"first": (prog.test_run().retval, g["gcd_out"], g["lcm_out"], g["mix_out"])}
    g["a"], g["b"] = 21, 6  # .data is writable after load
    out["second"] = (prog.test_run().retval, g["gcd_out"], g["lcm_out"], g["mix_out"])
    return out


def run_hash_struct_values(obj: Object) -> dict:
    prog = obj.programs["count_flows"]
    frames = (udp(53, payload=bytes(18)), udp(53, payload=bytes(38)),
              udp(123, saddr="10.0.0.3", sport=2000, payload=bytes(28)),
              tcp_frame(MAC_B, MAC_A, "10.0.0.1", "10.0.0.2", 1000, 53))
    return {"retvals": [prog.test_run(f).retval for f in frames],
            "flows": contents(obj.maps["flows"])}


def run_array_struct_values(obj: Object) -> dict:
    prog = obj.programs["record_sample"]
    samples = ((0, 5), (0, 50), (0, 5000), (1, 500), (0, 7))
    retvals = [prog.test_run(ctx=struct.pack("<II", *s)).retval for s in samples]
    return {"retvals": retvals, "histograms": contents(obj.maps["histograms"])}


def raw_tp_ctx(*args: int) -> bytes:
    return struct.pack(f"<{len(args)}Q", *args)


def run_percpu_array(obj: Object) -> dict:
    prog = obj.programs["count_on_cpu"]
    for cpu in range(obj.system.num_possible_cpus):
        for _ in range(cpu + 1):
            prog.test_run(ctx=raw_tp_ctx(0), flags=BPF_F_TEST_RUN_ON_CPU, cpu=cpu)
    return {"per_cpu": contents(obj.maps["per_cpu"])}


def expect_percpu_array(cpus: int) -> dict:
    return {"per_cpu": {0: [cpu + 1 for cpu in range(cpus)],
                        1: [100 + cpu for cpu in range(cpus)]}}


def run_percpu_hash(obj: Object) -> dict:
    prog = obj.programs["add_on_cpu"]
    runs = ((0, 1, 5), (1, 1, 7), (0, 2, 3), (0, 1, 1))  # (cpu, key, amount)
    retvals = [prog.test_run(ctx=raw_tp_ctx(key, amount), flags=BPF_F_TEST_RUN_ON_CPU,
                             cpu=cpu).retval for cpu, key, amount in runs]
    return {"retvals": retvals, "sums": contents(obj.maps["sums"])}


def expect_percpu_hash(cpus: int) -> dict:
    return {"retvals": [0, 1, 0, 1],
            "sums": {1: [6, 7] + [0] * (cpus - 2), 2: [3] + [0] * (cpus - 1)}}


def skb_ctx(mark: int = 0, priority: int = 0) -> bytes:
    """A struct __sk_buff for a tc run's ctx_in: mark and priority, the rest zero."""
    ctx = bytearray(36)
    struct.pack_into("<I", ctx, 8, mark)
    struct.pack_into("<I", ctx, 32, priority)
    return bytes(ctx)


def run_core_ctx_fields(obj: Object) -> dict:
    run = obj.programs["read_skb"].test_run(udp(53, payload=bytes(22)),
                                            ctx=skb_ctx(mark=9, priority=3),
                                            ctx_size_out=SK_BUFF_SIZE)
    return {"retval": run.retval, "seen": obj.globals["seen"]}


def run_core_ctx_types(obj: Object) -> dict:
    obj.programs["ask"].test_run(bytes(64))
    return {"answers": obj.globals["answers"]}


def run_core_kernel_types(obj: Object) -> dict:
    obj.programs["kernel_facts"].test_run(ctx=raw_tp_ctx(0))
    return {"facts": obj.globals["facts"]}


def run_rodata_config(obj: Object) -> dict:
    prog, g = obj.programs["filter"], obj.globals
    frames = (udp(53), udp(80), udp(80, payload=bytes(200)))
    retvals = [prog.test_run(f).retval for f in frames]
    return {"retvals": retvals,
            "counts": (g["dropped_port"], g["dropped_len"], g["passed"])}


def run_rodata_dead_code(obj: Object) -> dict:
    return {"retval": obj.programs["maybe_unsafe"].test_run(bytes(64)).retval}


def run_tail_calls(obj: Object) -> dict:
    prog = obj.programs["entry"]
    retvals = [prog.test_run(bytes([first]) + bytes(63)).retval for first in (1, 2, 3, 9)]
    return {"retvals": retvals, "visits": obj.globals["visits"],
            "slots": {k: v == obj.programs[name].id for k, v, name in
                      ((1, obj.maps["stages"][1], "stage_one"),
                       (2, obj.maps["stages"][2], "stage_two"))}}


def run_tail_call_limit(obj: Object) -> dict:
    retval = obj.programs["recurse"].test_run(bytes(64)).retval
    return {"retval": retval, "depth": obj.globals["depth"],
            "fell_through": obj.globals["fell_through"],
            "self": obj.maps["self"][0] == obj.programs["recurse"].id}


def run_lru_eviction(obj: Object) -> dict:
    prog = obj.programs["insert_keys"]
    prog.test_run(ctx=raw_tp_ctx(0, 20, 0), flags=BPF_F_TEST_RUN_ON_CPU, cpu=0)
    return {"keys": sorted(contents(obj.maps["recent"])),
            "inserted": obj.globals["inserted"], "failed": obj.globals["failed"]}


def run_hash_full(obj: Object) -> dict:
    obj.programs["fill_up"].test_run()
    return {"codes": obj.globals["codes"], "small": contents(obj.maps["small"])}


def run_array_of_maps(obj: Object) -> dict:
    prog = obj.programs["bump"]
    picks = ((0, 1), (0, 1), (2, 3), (1, 0), (2, 9))
    retvals = [signed(prog.test_run(ctx=struct.pack("<II", *p)).retval) for p in picks]
    ids = {obj.maps[name].id: name for name in ("tenant_a", "tenant_b")}
    return {"retvals": retvals, "misses": obj.globals["misses"],
            "a": contents(obj.maps["tenant_a"]), "b": contents(obj.maps["tenant_b"]),
            "outer": {k: ids.get(v) for k, v in contents(obj.maps["tenants"]).items()}}


def run_hash_of_maps(obj: Object) -> dict:
    prog = obj.programs["count_sources"]
    frames = (udp(53), udp(53), udp(53, saddr="10.0.0.7"), udp(123), udp(9999))
    return {"retvals": [prog.test_run(f).retval for f in frames],
            "dns": contents(obj.maps["dns_sources"]), "ntp": contents(obj.maps["ntp_sources"])}


def ipv4_frame(proto: int, l4: bytes, options: bytes = b"", ihl: int | None = None) -> bytes:
    """Ethernet + IPv4 with ``options`` (ihl from their length unless given) + ``l4``."""
    header = bytearray(iphdr(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), proto,
                             len(options) + len(l4)))
    header[0] = 0x40 | (ihl if ihl is not None else 5 + len(options) // 4)
    return ethhdr(MAC_B, MAC_A, ETH_P_IP) + bytes(header) + options + l4


def run_xdp_parse_udp(obj: Object) -> dict:
    prog = obj.programs["parse_udp"]
    udp_header = struct.pack("!HHHH", 1000, 4789, 8, 0)
    frames = (
        ethhdr(MAC_B, MAC_A, ETH_P_ARP) + bytes(28),                 # NOT_IP
        ipv4_frame(IPPROTO_UDP, b"")[:24],                            # TRUNCATED_IP
        ipv4_frame(IPPROTO_UDP, udp_header, ihl=4),                   # BAD_IHL
        ipv4_frame(IPPROTO_UDP, udp_header, options=bytes(4)),        # UDP_OK, dport 4789
        ipv4_frame(IPPROTO_TCP, bytes(20)),                           # NOT_UDP
        ipv4_frame(IPPROTO_UDP, udp_header[:4]),                      # TRUNCATED_UDP
        ipv4_frame(IPPROTO_UDP, udp_header, ihl=15),                  # TRUNCATED_IP
    )
    return {"retvals": [prog.test_run(f).retval for f in frames],
            "reasons": obj.globals["reasons"], "last_dport": obj.globals["last_dport"]}


def run_xdp_parse_ipv6_vlan(obj: Object) -> dict:
    prog = obj.programs["count_syns"]
    frames = (ipv6_tcp(443, TCP_SYN), ipv6_tcp(443, TCP_SYN, vlans=1),
              ipv6_tcp(22, TCP_SYN, vlans=2), ipv6_tcp(443, TCP_SYN | TCP_ACK),
              udp(443), ipv6_tcp(22, TCP_SYN, vlans=3))
    return {"retvals": [prog.test_run(f).retval for f in frames],
            "syns": contents(obj.maps["syns"]), "vlan_depth": obj.globals["vlan_depth"]}


UNTAGGED = udp(53, payload=bytes(32))


def run_xdp_adjust_head(obj: Object) -> dict:
    prog = obj.programs["toggle_vlan"]
    pushed = prog.test_run(UNTAGGED)
    popped = prog.test_run(vlan_tagged(UNTAGGED, 7))
    return {"pushed": (pushed.retval, pushed.data_out), "popped": (popped.retval,
                                                                   popped.data_out)}


def run_tc_load_bytes(obj: Object) -> dict:
    frame = udp_frame(MAC_B, MAC_A, "10.0.0.1", "10.0.0.2", 1, 2, bytes(22))
    frame = frame[:15] + bytes([0x10]) + frame[16:]  # a TOS byte the program makes the mark
    run = obj.programs["classify"].test_run(frame, ctx=bytes(36), ctx_size_out=SK_BUFF_SIZE)
    g = obj.globals
    return {"retval": run.retval, "first_bytes": g["first_bytes"],
            "past_end_err": g["past_end_err"], "len": g["skb_len"],
            "protocol": g["skb_protocol"], "mark": struct.unpack_from("<I", run.ctx_out, 8)[0]}


def run_socket_filter_trunc(obj: Object) -> dict:
    prog = obj.programs["snap"]
    frames = (udp(53, payload=bytes(22)), ethhdr(MAC_B, MAC_A, ETH_P_ARP) + bytes(28), udp(53))
    return {"retvals": [prog.test_run(f).retval for f in frames],
            "kept": contents(obj.maps["kept"])}


def run_atomics(obj: Object) -> dict:
    retval = obj.programs["atomic_ops"].test_run().retval
    g = obj.globals
    return {"retval": retval, "counter": g["counter"], "bits": g["bits"],
            "old": g["old_values"]}


def run_queue_stack(obj: Object) -> dict:
    obj.programs["shuffle"].test_run()
    g = obj.globals
    return {name: g[name] for name in ("push_codes", "peeked", "overwrite", "popped_fifo",
                                       "popped_lifo", "empty_pop")}


def run_lpm_route(obj: Object) -> dict:
    routes = obj.maps["routes"]
    routes[(8, (10, 0, 0, 0))] = 1
    routes[(24, (10, 0, 0, 0))] = 2
    routes[(32, (10, 0, 0, 2))] = 3
    prog = obj.programs["route"]
    retvals = [prog.test_run(udp_frame(MAC_B, MAC_A, "10.9.9.9", daddr, 1, 2)).retval
               for daddr in ("10.0.0.2", "10.0.0.9", "10.1.2.3", "192.168.1.1")]
    return {"retvals": retvals, "hops": obj.globals["hops"],
            "no_route": obj.globals["no_route"]}


def run_bpf_loop_sum(obj: Object) -> dict:
    obj.programs["loops"].test_run()
    return {"results": obj.globals["results"]}


def run_bpf_loop_map(obj: Object) -> dict:
    retval = obj.programs["fill_squares"].test_run(ctx=struct.pack("<I", 10)).retval
    return {"retval": retval, "squares": contents(obj.maps["squares"])}


def run_for_each_array(obj: Object) -> dict:
    for key, value in enumerate((3, 4, 5, 0, 9)):
        obj.maps["values"][key] = value
    obj.programs["walk_array"].test_run()
    g = obj.globals
    return {"visited": g["visited"], "sum": g["sum"], "last_key": g["last_key"]}


def run_for_each_hash(obj: Object) -> dict:
    for key, value in ((1, 1), (2, 2), (3, 3), (4, 4), (5, 6)):
        obj.maps["table"][key] = value
    obj.programs["prune_odd"].test_run()
    g = obj.globals
    return {"visited": g["visited"], "deleted": g["deleted"], "doubled": g["doubled"],
            "table": contents(obj.maps["table"])}


SPIN_THREADS, SPIN_REPEAT = 4, 2500


def run_spin_lock_counter(obj: Object) -> dict:
    """Several threads run the program at once (the kernel: on both CPUs, each run under
    migrate_disable); the lock must make every increment count."""
    prog = obj.programs["count_locked"]
    errors: list[BaseException] = []

    def runs() -> None:
        try:
            prog.test_run(bytes(64), repeat=SPIN_REPEAT)
        except BaseException as exc:  # reported below: a thread's failure fails the test
            errors.append(exc)

    threads = [threading.Thread(target=runs) for _ in range(SPIN_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    value = obj.maps["totals"][0]
    return {"count": value.count, "bytes": value.bytes}


def let_time_pass(system: Any) -> None:
    """The kernel's timers fire on their own time; the emulated machine's when its CPUs'
    clocks move on (``Machine.step``)."""
    machine = getattr(system, "machine", None)
    if machine is not None:
        machine.step()
    else:
        time.sleep(0.01)


def run_timer_fire(obj: Object) -> dict:
    obj.programs["arm"].test_run(bytes(64))
    deadline = time.monotonic() + 5
    while obj.maps["timers"][7].fired == 0 and time.monotonic() < deadline:
        let_time_pass(obj.system)
    return {"codes": obj.globals["codes"], "fired": obj.maps["timers"][7].fired,
            "fired_key": obj.globals["fired_key"]}


def run_timer_cancel(obj: Object) -> dict:
    obj.programs["arm_and_cancel"].test_run(bytes(64))
    return {"codes": obj.globals["codes"],
            "fired": [value.fired for value in obj.maps["slots"].values()]}


def run_ringbuf_output(obj: Object) -> dict:
    prog = obj.programs["emit"]
    for _ in range(3):
        prog.test_run(bytes(range(64)))
    g = obj.globals
    return {"seq": g["seq"], "last_err": g["last_err"],
            "query": (g["avail"], g["prod_pos"], g["cons_pos"], g["ring_size"])}


def run_ringbuf_reserve(obj: Object) -> dict:
    prog = obj.programs["produce"]
    avail = []
    for value in (2, 3, 4):
        prog.test_run(ctx=struct.pack("<Q", value))
        avail.append(obj.globals["avail_after"])
    g = obj.globals
    return {"avail": avail, "counts": (g["submitted"], g["discarded"], g["too_big"])}


def run_user_ringbuf_drain(obj: Object) -> dict:
    """Requests written through the map's producer (struct request: op, key, value), drained
    in three runs, then a run with flags the helper refuses."""
    requests, prog, g = obj.maps["requests"], obj.programs["drain"], obj.globals
    add, stop = 1, 2
    for op, key, value in ((add, 1, 10), (add, 2, 5)):
        requests.write(struct.pack("<IIQ", op, key, value))
    requests.discard(requests.reserve(16))
    requests.write(b"tiny")  # shorter than a request: bpf_dynptr_read fails
    for op, key, value in ((add, 1, 7), (stop, 0, 0), (add, 3, 1)):
        requests.write(struct.pack("<IIQ", op, key, value))
    rets = []
    for flags in (0, 0, 0, 4):
        g["drain_flags"] = flags
        prog.test_run()
        rets.append(g["last_ret"])
    return {"rets": rets, "totals": contents(obj.maps["totals"]),
            "counts": (g["handled"], g["short_samples"], g["stops"])}


CASES = [
    Case("loop_bounded_sum", "loop_bounded_sum", run=run_loop_bounded_sum,
         expected={"runs": [(XDP_PASS, 496, 32), (XDP_DROP, 63, 21)]}),
    Case("loop_unrolled_csum", "loop_unrolled_csum", run=run_loop_unrolled_csum,
         expected={"good": (XDP_PASS, 0xFFFF), "bad": (XDP_DROP, ip_csum_fold(BAD_IP)),
                   "arp": (XDP_PASS, ip_csum_fold(BAD_IP)), "checked": 2}),
    Case("loop_collatz", "loop_collatz", run=run_collatz,
         expected={"retval": 1, "steps": 111, "peak": 9232}),
    Case("loop_collatz_7", "loop_collatz", run=run_collatz, before_load={"start": 7},
         expected={"retval": 1, "steps": 16, "peak": 52}),
    Case("iter_num_sum", "iter_num_sum", run=run_iter_num_sum,
         expected={"retval": 10, "sum": sum(v * v for v in range(3, 13)), "visited": 10}),
    Case("iter_num_nested", "iter_num_nested", run=run_iter_num_nested,
         expected={"cells": {i: i * (i * (i - 1) // 2) for i in range(8)},
                   "err": -errno.EINVAL, "items": 0}),
    Case("global_funcs", "global_funcs", run=run_global_funcs,
         expected={"retval": XDP_PASS, "results": (64, 48, 0, 163)}),
    Case("global_func_unchecked", "global_func_unchecked", refused=errno.EACCES,
         refusal="R1 invalid mem access 'mem_or_null'"),
    Case("static_subprogs", "static_subprogs", run=run_static_subprogs,
         expected={"first": (6, 6, 36, 12346), "second": (3, 3, 42, 12343)}),
    Case("hash_struct_values", "hash_struct_values", run=run_hash_struct_values,
         expected={"retvals": [XDP_PASS] * 4, "flows": {
             (ip4("10.0.0.1"), ip4("10.0.0.2"), 1000, 53, IPPROTO_UDP): (2, 60 + 80, 60, 80),
             (ip4("10.0.0.3"), ip4("10.0.0.2"), 2000, 123, IPPROTO_UDP): (1, 70, 70, 70)}}),
    Case("array_struct_values", "array_struct_values", run=run_array_struct_values,
         expected={"retvals": [0, 0, 1, 0, 1], "histograms": {
             0: ((5, 5000), (2, 1, 0, 1), 5062), 1: ((500, 500), (0, 0, 1, 0), 500)}}),
    Case("percpu_array", "percpu_array", run=run_percpu_array, expected=expect_percpu_array),
    Case("percpu_hash", "percpu_hash", run=run_percpu_hash, expected=expect_percpu_hash),
    Case("core_ctx_fields", "core_ctx_fields", run=run_core_ctx_fields,
         expected={"retval": 1, "seen": (64, 0x0008, 9, 3, 1, 0)}),
    Case("core_ctx_types", "core_ctx_types", run=run_core_ctx_types,
         expected={"answers": (1, 0, 24, 1, 0, 16, 76, 8, 8)}),
    Case("core_kernel_types", "core_kernel_types", run=run_core_kernel_types,
         expected={"facts": (1, 0, 1, 0, 4, 0, 27)}),
    Case("rodata_config_default", "rodata_config", run=run_rodata_config,
         expected={"retvals": [XDP_DROP, XDP_PASS, XDP_PASS], "counts": (1, 0, 0)}),
    Case("rodata_config_set", "rodata_config", run=run_rodata_config,
         before_load={"blocked_port": 80, "max_len": 100, "count_passed": 1},
         expected={"retvals": [XDP_PASS, XDP_DROP, XDP_DROP], "counts": (1, 1, 1)}),
    Case("rodata_dead_code_off", "rodata_dead_code", run=run_rodata_dead_code,
         expected={"retval": XDP_PASS}),
    Case("rodata_dead_code_on", "rodata_dead_code", before_load={"unsafe_read": 1},
         refused=errno.EACCES, refusal="invalid access to packet"),
    Case("tail_calls", "tail_calls", run=run_tail_calls,
         expected={"retvals": [XDP_TX, XDP_TX, XDP_PASS, XDP_PASS], "visits": (4, 1, 2, 2),
                   "slots": {1: True, 2: True}}),
    Case("tail_call_limit", "tail_call_limit", run=run_tail_call_limit,
         expected={"retval": 34, "depth": 34, "fell_through": 1, "self": True}),
    Case("lru_eviction", "lru_eviction", run=run_lru_eviction,
         expected={"keys": [0, *range(13, 20)], "inserted": 20, "failed": 0}),
    Case("hash_full", "hash_full", run=run_hash_full,
         expected={"codes": (0, 0, 0, 0, -errno.E2BIG, -errno.E2BIG, -errno.EEXIST,
                             -errno.ENOENT, -errno.ENOENT, 0),
                   "small": {0: 7, 1: 7, 3: 7}}),
    Case("array_of_maps", "array_of_maps", run=run_array_of_maps,
         expected={"retvals": [1, 2, 1, -1, -2], "misses": 1,
                   "a": {0: 0, 1: 2, 2: 0, 3: 0}, "b": {0: 0, 1: 0, 2: 0, 3: 1},
                   "outer": {0: "tenant_a", 2: "tenant_b"}}),
    Case("hash_of_maps", "hash_of_maps", run=run_hash_of_maps,
         expected={"retvals": [XDP_PASS] * 4 + [XDP_DROP],
                   "dns": {ip4("10.0.0.1"): 2, ip4("10.0.0.7"): 1},
                   "ntp": {ip4("10.0.0.1"): 1}}),
    Case("xdp_parse_udp", "xdp_parse_udp", run=run_xdp_parse_udp,
         expected={"retvals": [XDP_DROP] * 3 + [XDP_PASS] + [XDP_DROP] * 3,
                   "reasons": (0, 1, 2, 1, 1, 1, 1), "last_dport": 4789}),
    Case("xdp_parse_ipv6_vlan", "xdp_parse_ipv6_vlan", run=run_xdp_parse_ipv6_vlan,
         expected={"retvals": [XDP_TX] * 3 + [XDP_PASS] * 3, "syns": {443: 2, 22: 1},
                   "vlan_depth": 2}),
    Case("xdp_adjust_head", "xdp_adjust_head", run=run_xdp_adjust_head,
         expected={"pushed": (XDP_TX, vlan_tagged(UNTAGGED, 42)),
                   "popped": (XDP_TX, UNTAGGED)}),
    Case("tc_load_bytes", "tc_load_bytes", run=run_tc_load_bytes,
         expected={"retval": 0, "first_bytes": (0x08, 0x00, 0x45, 0x10),
                   "past_end_err": -errno.EFAULT, "len": 64, "protocol": 0x0008,
                   "mark": 0x10}),
    Case("socket_filter_trunc", "socket_filter_trunc", run=run_socket_filter_trunc,
         before_load={"snap_len": 40},
         expected={"retvals": [40, 0, 28], "kept": {0: 1, 1: 2}}),
    Case("xdp_unchecked_read", "xdp_unchecked_read", refused=errno.EACCES,
         refusal="invalid access to packet"),
    Case("atomics", "atomics", run=run_atomics,
         expected={"retval": 200, "counter": 200, "bits": 0x3D,
                   "old": (15, 0xF0, 16, 100, 200)}),
    Case("queue_stack", "queue_stack", run=run_queue_stack,
         expected={"push_codes": (0, 0, 0, -errno.E2BIG), "peeked": 10, "overwrite": 0,
                   "popped_fifo": (11, 12, 99), "popped_lifo": (12, 11, 10),
                   "empty_pop": -errno.ENOENT}),
    Case("lpm_route", "lpm_route", run=run_lpm_route,
         expected={"retvals": [XDP_TX] * 3 + [XDP_DROP], "hops": (0, 1, 1, 1),
                   "no_route": 1}),
    Case("loop_endless", "loop_endless", refused=errno.EINVAL,
         refusal="infinite loop detected"),
    Case("rodata_write", "rodata_write", refused=errno.EACCES,
         refusal="write into map forbidden"),
    Case("helper_wrong_type", "helper_wrong_type", refused=errno.EINVAL,
         refusal="program of this type cannot use helper bpf_xdp_adjust_head#44"),
    # The kernel's "the call stack of 9 frames is too deep" is in its log, but System.prog_load
    # keeps the log only for EACCES and EINVAL refusals: the errno alone is compared.
    Case("subprog_recursion", "subprog_recursion", refused=errno.E2BIG),
    Case("bpf_loop_sum", "bpf_loop_sum", run=run_bpf_loop_sum,
         # -E2BIG zero-extended: with flags 0 the verifier inlines bpf_loop, and the inlined
         # code sets it with a 32-bit move (inline_bpf_loop's BPF_MOV32_IMM)
         expected={"results": (100, 4950, 8, 8, -errno.EINVAL, (1 << 32) - errno.E2BIG)}),
    Case("bpf_loop_map", "bpf_loop_map", run=run_bpf_loop_map,
         expected={"retval": 10025, "squares": {i: i * i for i in range(10)}}),
    Case("for_each_array", "for_each_array", run=run_for_each_array,
         expected={"visited": 4, "sum": 12, "last_key": 2}),
    Case("for_each_hash", "for_each_hash", run=run_for_each_hash,
         expected={"visited": 5, "deleted": 2, "doubled": 3, "table": {2: 4, 4: 8, 5: 12}}),
    Case("spin_lock_counter", "spin_lock_counter", run=run_spin_lock_counter,
         expected={"count": SPIN_THREADS * SPIN_REPEAT,
                   "bytes": SPIN_THREADS * SPIN_REPEAT * 64}),
    Case("spin_lock_held_call", "spin_lock_held_call", refused=errno.EINVAL,
         refusal="function calls are not allowed while holding a lock"),
    Case("timer_fire", "timer_fire", run=run_timer_fire,
         expected={"codes": (0, -errno.EBUSY, 0, 0), "fired": 1, "fired_key": 7}),
    Case("timer_cancel", "timer_cancel", run=run_timer_cancel,
         expected={"codes": (-errno.EINVAL, 0, 0, 0, 10), "fired": [0, 0]}),
    Case("ringbuf_output", "ringbuf_output", run=run_ringbuf_output,
         expected={"seq": 3, "last_err": 0, "query": (72, 72, 0, 4096)}),
    Case("ringbuf_reserve", "ringbuf_reserve", run=run_ringbuf_reserve,
         expected={"avail": [24, 48, 72], "counts": (2, 1, 3)}),
    # the first drain: 6 turns (add, add, discarded, tiny, add, stop) less the discarded one
    Case("user_ringbuf_drain", "user_ringbuf_drain", run=run_user_ringbuf_drain,
         expected={"rets": [5, 1, 0, -errno.EINVAL], "totals": {1: 17, 2: 5, 3: 1},
                   "counts": (5, 1, 1)}),
    Case("ringbuf_leak", "ringbuf_leak", refused=errno.EINVAL,
         refusal="would lead to reference leak"),
]


def params() -> list:
    out = []
    for case in CASES:
        for backend in ("kernel", "emulated"):
            reason = case.emulated_xfail if backend == "emulated" else case.kernel_xfail
            marks = [pytest.mark.xfail(strict=False, reason=reason)] if reason else []
            out.append(pytest.param(case, backend, marks=marks, id=f"{case.id}-{backend}"))
    return out


@pytest.fixture(scope="session")
def corpus_object(tmp_path_factory) -> Callable[[str], Path]:
    """``corpus_object(source)``: the object file of corpus/<source>.c, built once."""
    if not clang_available():
        pytest.skip(CLANG_SKIP_REASON)
    out = tmp_path_factory.mktemp("bpf-corpus")
    return lambda source: compile_bpf(CORPUS_DIR / f"{source}.c", out)


def load_corpus(system: Any, path: Path, before_load: dict | None = None) -> Object:
    """The object at ``path`` loaded on ``system``, ``before_load``'s globals set first."""
    spec = ObjectSpec.from_file(path)
    for name, value in (before_load or {}).items():
        spec.globals[name] = value
    return spec.load(system)


def test_every_source_has_a_case():
    assert {path.stem for path in CORPUS_DIR.glob("*.c")} == {c.source for c in CASES}


@pytest.mark.parametrize(("case", "backend_name"), params())
def test_corpus(case: Case, backend_name: str, corpus_object, request):
    system = request.getfixturevalue(backend_name)
    if case.refused is not None:
        with pytest.raises(BPFError) as info:
            load_corpus(system, corpus_object(case.source), case.before_load).close()
        assert info.value.errno == case.refused, str(info.value)
        assert case.refusal in str(info.value)
        return
    with load_corpus(system, corpus_object(case.source), case.before_load) as obj:
        observed = case.run(obj)
    expected = case.expected
    if callable(expected):
        expected = expected(system.num_possible_cpus)
    assert observed == expected


@pytest.mark.parametrize("backend_name", ["kernel", "emulated"])
def test_ringbuf_records_read_in_python(backend_name: str, corpus_object, request):
    """The records ringbuf_output and ringbuf_reserve commit, read back through
    System.ringbuf_reader: payloads in order, the discarded one skipped and counted, and the
    consumer position the program then queries moved past what was read."""
    system = request.getfixturevalue(backend_name)
    if not hasattr(system, "ringbuf_reader"):
        pytest.skip("this tree's System has no ring buffer consumer yet (issue 21)")
    with load_corpus(system, corpus_object("ringbuf_output")) as obj:
        prog = obj.programs["emit"]
        for _ in range(3):
            prog.test_run(bytes(range(64)))
        with system.ringbuf_reader(obj.maps["events"].fd) as reader:
            records = reader.read()
        prog.test_run(bytes(range(64)))
        g = obj.globals
        assert records == [struct.pack("<II4s", seq, 64, bytes(range(4))) for seq in (1, 2, 3)]
        assert (g["avail"], g["prod_pos"], g["cons_pos"]) == (24, 96, 72)
    with load_corpus(system, corpus_object("ringbuf_reserve")) as obj:
        prog = obj.programs["produce"]
        for value in (2, 3, 4):
            prog.test_run(ctx=struct.pack("<Q", value))
        with system.ringbuf_reader(obj.maps["samples"].fd) as reader:
            records = reader.read()
            discarded = reader.records_discarded
        # a record's 4 bytes of padding are whatever the ring held: left out
        assert [r[:12] for r in records] == [struct.pack("<QI", v, 1) for v in (2, 4)]
        assert discarded == 1
