"""Programs on the emulated backend: load, test run, info, ids, tracepoint attachment.

``ProgramsMixin`` is the part of ``EmulatedSystem`` that translates BPF_PROG_LOAD,
BPF_PROG_TEST_RUN, prog info / get_fd_by_id and tracepoint attachment (``pybpf.system.System``
normalised the arguments and owns the error boundary); it relies on the system's fd table,
id allocator and map references (``fd_install``, ``info_fd_get``, ``map_from_fd``,
``bpf_map_inc`` / ``bpf_map_put``, ``prog_idr_alloc``, ``bpf_prog_inc`` / ``bpf_prog_put``).

Rules this module keeps:
- Load checks follow kernel/bpf/syscall.c ``bpf_prog_load`` then the verifier: unknown flags
  and types -> EINVAL, 0 or > 1M insns -> E2BIG, a bad name -> EINVAL, then
  ``verifier.bpf_check`` (the kernel's messages, in a ``VerifierError`` with the log).
- A program holds a reference on every map it uses until it is released; each fd and each
  PROG_ARRAY slot holds a reference on the program.
- Test runs follow net/bpf/test_run.c per program type (skb, xdp, raw_tp, syscall): the same
  EINVAL / ENOSPC / E2BIG rules, the same data_out (a socket filter's Ethernet header comes
  back zeroed) and ctx_out. ``duration`` is modeled time: the mean per run over ``repeat`` of
  what the run cost on the machine's profile (``prog_test_run`` per repetition, the program's
  instructions and calls, its map operations). Types without a test_run answer ENOTSUPP.
- Tracepoints: ``trigger_tracepoint`` runs the attached programs on the current CPU (each run
  costs ``tracepoint_entry``); ``enter_syscall`` is a task on the current CPU making a syscall:
  its entry cost, then its sys_enter tracepoint.
- The tag is the kernel's: the first 8 bytes of SHA-256 over the instructions with the
  immediates of map-referencing lddw zeroed.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

from ..attrs import ProgAttr, TestRunRequest
from ..errors import KernelError, prog_description
from ..system import ProgInfo, TestRun
from ..uapi import (
    BPF_F_TEST_RUN_ON_CPU,
    BPF_F_TEST_SKB_CHECKSUM_COMPLETE,
    BPF_F_TEST_XDP_LIVE_FRAMES,
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_VALUE,
    ENOTSUPP,
    AttachType,
    ProgType,
)
from .maps.bpf_map import bpf_prog_map_compatible
from .net.netdev import NAPI_POLL_WEIGHT, net_of
from .net.xdp import XDP_FRAME_SIZE, XDP_PACKET_HEADROOM, XdpBuff
from .prog.btf import check_btf_func, vmlinux_kfuncs
from .prog.executable import Executable, run
from .prog.filter import (
    SK_BUFF_SIZE,
    SKB_CB,
    SKB_DATA,
    SKB_DATA_END,
    SKB_DATA_META,
    SKB_FAMILY,
    SKB_GSO_SEGS,
    SKB_GSO_SIZE,
    SKB_HWTSTAMP,
    SKB_IFINDEX,
    SKB_INGRESS_IFINDEX,
    SKB_LEN,
    SKB_LOCAL_IP4,
    SKB_LOCAL_IP6,
    SKB_MARK,
    SKB_PKT_TYPE,
    SKB_PRIORITY,
    SKB_PROTOCOL,
    SKB_REMOTE_IP4,
    SKB_REMOTE_IP6,
    SKB_SK,
    SKB_TSTAMP,
    SKB_WIRE_LEN,
    XDP_MD_DATA,
    XDP_MD_DATA_END,
    XDP_MD_DATA_META,
    XDP_MD_SIZE,
    writable_fields,
)
from .prog.helpers import helper_funcs
from .prog.kfuncs import kfunc_funcs
from .prog.log import bpf_vlog_init
from .prog.memory import (
    CTX_REGION,
    DEFAULT_BUDGET,
    M32,
    PACKET_REGION,
    SOCK_REGION,
    CtxRegion,
    RunState,
)
from .prog.verifier import bpf_check
from .syscall import (
    bpf_obj_name_cpy,
    bpf_prog_load_check_attach,
    check_sleepable,
    sleepable_map_from_fd,
)
from .test_run import TEST_XDP_MAX_BATCH, bpf_test_run_xdp_live

BPF_F_SLEEPABLE = 1 << 4
BPF_F_TOKEN_FD = 1 << 16
# prog_flags bpf_prog_load accepts: BPF_F_STRICT_ALIGNMENT .. BPF_F_TEST_REG_INVARIANTS (1 << 7)
# and BPF_F_TOKEN_FD.
_PROG_FLAGS = (1 << 8) - 1 | BPF_F_TOKEN_FD
BPF_COMPLEXITY_LIMIT_INSNS = 1_000_000

ETH_HLEN = 14
PAGE_SIZE = 4096
NET_SKB_PAD = 64  # max(32, L1_CACHE_BYTES) on x86-64; NET_IP_ALIGN is 0 there
SKB_SHINFO_SIZE = 320  # SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) on 6.18 x86-64
XDP_METADATA_MAX = 255  # xdp_metalen_invalid: skb_shared_info.meta_len is a u8
LOOPBACK_IFINDEX = 1
# sizeof(struct xdp_page_head) on x86-64: two struct xdp_buff (56 bytes each) and the
# struct xdp_frame (40) a live-frames run keeps at the start of each page
XDP_PAGE_HEAD_SIZE = 2 * 56 + 40
GSO_MAX_SEGS = 65535
GSO_LEGACY_MAX_SIZE = 65536
# eth_type_trans: EtherType values from 0x600 up name a protocol; below, the frame is 802.3
ETH_P_802_3_MIN, ETH_P_802_3, ETH_P_802_2, ETH_P_IP, ETH_P_IPV6 = 0x600, 1, 4, 0x800, 0x86DD
IPV4_HLEN, IPV6_HLEN = 20, 40
PACKET_HOST, PACKET_MULTICAST, PACKET_OTHERHOST = 0, 2, 3
AF_INET, AF_INET6 = 2, 10
MAX_BPF_FUNC_ARGS = 12
U16_MAX = 0xFFFF

# Program types the emulated backend loads, and which of them have a test run.
SKB_PROG_TYPES = frozenset({ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT,
                            ProgType.CGROUP_SKB, ProgType.LWT_IN, ProgType.LWT_OUT,
                            ProgType.LWT_XMIT})
L2_PROG_TYPES = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT})
DIRECT_PACKET_PROG_TYPES = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.LWT_IN,
                                      ProgType.LWT_OUT, ProgType.LWT_XMIT,
                                      ProgType.CGROUP_SKB})
LOADABLE_PROG_TYPES = SKB_PROG_TYPES | {ProgType.XDP, ProgType.TRACEPOINT,
                                        ProgType.RAW_TRACEPOINT, ProgType.SYSCALL,
                                        ProgType.SK_SKB, ProgType.SK_MSG, ProgType.KPROBE,
                                        ProgType.PERF_EVENT}
TRACEPOINT_PROG_TYPES = frozenset({ProgType.TRACEPOINT})

_GPL_COMPATIBLE = (b"GPL", b"GPL v2", b"GPL and additional rights", b"Dual BSD/GPL",
                   b"Dual MIT/GPL", b"Dual MPL/GPL")

# The __sk_buff fields a test run's ctx_in may set (convert___skb_to_skb).
_SKB_CTX_IN_FIELDS = ((SKB_MARK, 4), (SKB_PRIORITY, 4), (SKB_INGRESS_IFINDEX, 4),
                      (SKB_IFINDEX, 4), (SKB_CB, 20), (SKB_TSTAMP, 8), (SKB_WIRE_LEN, 4),
                      (SKB_GSO_SEGS, 4), (SKB_GSO_SIZE, 4), (SKB_HWTSTAMP, 8))
XDP_FRAME_SZ = PAGE_SIZE  # xdp_buff.frame_sz of a test run
_XDP_MD = struct.Struct("<6I")


def bpf_prog_calc_tag(insns: bytes) -> bytes:
    """The program tag: SHA-256 (6.18) over the insns, map lddw immediates zeroed."""
    data = bytearray(insns)
    pc = 0
    while pc < len(data) // 8:
        code, regs = data[8 * pc], data[8 * pc + 1]
        if code == 0x18 and (regs >> 4) in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE) \
                and pc + 1 < len(data) // 8:
            data[8 * pc + 4:8 * pc + 8] = bytes(4)
            data[8 * pc + 12:8 * pc + 16] = bytes(4)
            pc += 2
            continue
        pc += 1
    return hashlib.sha256(bytes(data)).digest()[:8]


class BpfProg:
    """struct bpf_prog: the loaded program, its maps, its compiled form."""

    def __init__(self, system: Any, prog_type: int, insns: bytes, verified, name: str,
                 expected_attach_type: int, prog_flags: int, gpl: bool) -> None:
        self.system = system
        self.prog_type = prog_type
        self.expected_attach_type = expected_attach_type
        self.prog_flags = prog_flags
        self.gpl_compatible = gpl
        self.insns = insns
        self.name = name
        self.tag = bpf_prog_calc_tag(insns)
        self.used_maps = list(verified.maps)
        self.max_ctx_offset = verified.max_ctx_offset
        self.executable = Executable(verified.insns, helper_funcs(), verified.pseudo, owner=self,
                                     kfuncs=kfunc_funcs(vmlinux_kfuncs()))
        self.refcnt = 0
        self.id = 0
        self.run_cnt = 0
        self.run_time_ns = 0

    def fd_release(self) -> None:
        """Closing one fd drops that fd's reference."""
        self.system.bpf_prog_put(self)

    def release(self) -> None:
        """The last reference is gone (bpf_prog_put -> __bpf_prog_put_noref): drop the maps."""
        maps, self.used_maps = self.used_maps, []
        for bpf_map in maps:
            self.system.bpf_map_put(bpf_map)

    def describe(self) -> str:
        return prog_description(self.prog_type, self.name, self.id)

    def run(self, ctx: Any, *, packet: Any = b"", engine: str | None = None) -> RunState:
        """Run once with ``ctx`` (a ``CtxRegion``, bytes (read-only) or a bytearray) as R1;
        the returned RunState has ``retval`` (R0, 64 bits) and what helpers recorded."""
        system = self.system
        rs = RunState(system, getattr(system, "insn_budget", DEFAULT_BUDGET), packet)
        rs.mem[CTX_REGION] = ctx
        if isinstance(packet, (bytearray, memoryview)):
            rs.mem[PACKET_REGION] = packet
        rs.retval = run(self.executable, rs, CTX_REGION << 32,
                        engine or getattr(system, "bpf_engine", "jit"))
        return rs


class _Tracepoint:
    """An attachment of a TRACEPOINT program (the perf event fd the kernel would give)."""

    def __init__(self, system: Any, prog: BpfProg, category: str, name: str) -> None:
        self.system = system
        self.prog = prog
        self.key = (category, name)

    def fd_release(self) -> None:
        self.system._detach_tracepoint(self)


class ProgramsMixin:
    """BPF_PROG_* commands of the emulated system (see the module docstring)."""

    bpf_engine = "jit"  # "jit" or "interp" (the reference interpreter)
    insn_budget = DEFAULT_BUDGET  # instructions one run may execute

    # -- load --------------------------------------------------------------------------------
    def _prog_load(self, attr: ProgAttr) -> int:
        """bpf_prog_load's checks, then the verifier; a refusal with a log is the verifier's."""
        if attr.prog_flags & ~_PROG_FLAGS:
            raise KernelError(errno.EINVAL, f"prog_flags {attr.prog_flags:#x} has unknown bits")
        if attr.prog_flags & BPF_F_TOKEN_FD:  # bpf_token_get_from_fd: no BPF tokens here
            raise KernelError(errno.EINVAL, "BPF_F_TOKEN_FD: prog_token_fd is not a BPF token "
                              "(the emulated backend has none)")
        count = len(attr.insns) // 8
        if count == 0 or count > BPF_COMPLEXITY_LIMIT_INSNS:
            raise KernelError(errno.E2BIG, f"{count} instructions: a program has 1 to "
                                           f"{BPF_COMPLEXITY_LIMIT_INSNS}")
        prog_type = attr.prog_type
        if prog_type not in LOADABLE_PROG_TYPES:
            raise KernelError(errno.EINVAL, f"program type {prog_type} cannot be loaded by the "
                              "emulated backend (it loads: " + ", ".join(
                                  sorted(ProgType(t).name for t in LOADABLE_PROG_TYPES)) + ")")
        bpf_prog_load_check_attach(prog_type, attr.expected_attach_type)
        name = bpf_obj_name_cpy(attr.prog_name, "prog_name")
        gpl = attr.license.split(b"\0", 1)[0] in _GPL_COMPATIBLE
        bpf_vlog_init(attr.log_level)
        func_linkage = None  # without func_info, no callbacks
        if attr.prog_btf_fd or attr.func_info:
            btf = self.btf_get_by_fd(attr.prog_btf_fd)
            self.btf_put(btf)
            if attr.func_info:
                func_linkage = check_btf_func(attr.insns, btf.btf, attr.func_info,
                                              attr.func_info_rec_size)
        map_from_fd = self.map_from_fd
        if attr.prog_flags & BPF_F_SLEEPABLE:
            map_from_fd = functools.partial(sleepable_map_from_fd, self.map_from_fd)
        verified = bpf_check(attr.insns, prog_type, map_from_fd, gpl,
                             attr.expected_attach_type,
                             functools.partial(check_sleepable, prog_type, attr.prog_flags),
                             func_linkage)
        prog = BpfProg(self, prog_type, attr.insns, verified, name, attr.expected_attach_type,
                       attr.prog_flags, gpl)
        # bpf_prog_select_runtime -> bpf_check_tail_call: after the verifier, no log
        if not all(bpf_prog_map_compatible(bpf_map, prog) for bpf_map in prog.used_maps):
            raise KernelError(errno.EINVAL, "a map of the program holds programs of another "
                              "type (its owner: the first program that used it)")
        for bpf_map in prog.used_maps:
            self.bpf_map_inc(bpf_map)
        prog.executable.prepare(self.bpf_engine)  # translate at load: runs time only the run
        prog.refcnt = 1
        prog.id = self.prog_idr_alloc(prog)
        return self.fd_install(prog)

    # -- info and ids ------------------------------------------------------------------------
    def _prog_get_info(self, fd: int) -> ProgInfo:
        obj = self.info_fd_get(fd)
        if not isinstance(obj, BpfProg):
            raise KernelError(errno.EINVAL, f"fd {fd} is not a program")
        return ProgInfo(type=obj.prog_type, id=obj.id, tag=obj.tag, name=obj.name,
                        xlated_prog_len=len(obj.insns), jited_prog_len=0,
                        map_ids=tuple(m.id for m in obj.used_maps),
                        run_time_ns=obj.run_time_ns, run_cnt=obj.run_cnt)

    def _prog_get_fd_by_id(self, prog_id: int) -> int:
        prog = self.prog_from_id(prog_id)
        self.bpf_prog_inc(prog)
        return self.fd_install(prog)

    # -- test run ----------------------------------------------------------------------------
    def _prog_test_run(self, prog_fd: int, req: TestRunRequest) -> TestRun:
        """BPF_PROG_TEST_RUN, per program type as net/bpf/test_run.c."""
        prog = self.prog_from_fd(prog_fd)
        prog_type = prog.prog_type
        if prog_type in SKB_PROG_TYPES:
            return self._test_run_skb(prog, req)
        if prog_type == ProgType.XDP:
            return self._test_run_xdp(prog, req)
        if prog_type == ProgType.RAW_TRACEPOINT:
            return self._test_run_raw_tp(prog, req)
        if prog_type == ProgType.SYSCALL:
            return self._test_run_syscall(prog, req)
        raise KernelError(ENOTSUPP, f"{ProgType(prog_type).name} programs have no test run")

    def _timed_runs(self, prog: BpfProg, repeat: int, run_once) -> tuple[int, int]:
        """Run ``repeat`` times (0 means 1); (retval of the last run, mean modeled ns per
        run on the current CPU)."""
        repeat = repeat or 1
        timing = self.machine.timing
        cpu = self.machine.current.cpu
        start = timing.clock[cpu]
        for _ in range(repeat):
            timing.charge(cpu, "prog_test_run")
            retval = run_once()
        elapsed = timing.clock[cpu] - start
        return retval & M32, min(int(elapsed // repeat), M32)

    def _test_run_skb(self, prog: BpfProg, req: TestRunRequest) -> TestRun:
        """bpf_prog_test_run_skb, its checks in the kernel's order."""
        if req.flags & ~BPF_F_TEST_SKB_CHECKSUM_COMPLETE or req.cpu or req.batch_size:
            raise KernelError(errno.EINVAL, "skb test runs take no cpu, no batch_size and no "
                                            "flags but BPF_F_TEST_SKB_CHECKSUM_COMPLETE")
        size = len(req.data_in)
        if size < ETH_HLEN:
            raise KernelError(errno.EINVAL, f"data_in is {size} bytes, less than an Ethernet "
                                            f"header ({ETH_HLEN})")
        if size > PAGE_SIZE - NET_SKB_PAD - SKB_SHINFO_SIZE:
            raise KernelError(errno.EINVAL, f"data_in is {size} bytes, over the "
                              f"{PAGE_SIZE - NET_SKB_PAD - SKB_SHINFO_SIZE} an skb test run takes")
        ctx = _ctx_init(req, SK_BUFF_SIZE)
        if ctx is not None:
            ifindex = struct.unpack_from("<I", ctx, SKB_IFINDEX)[0]
            net = net_of(self.machine)
            if ifindex > LOOPBACK_IFINDEX and net.dev_get_by_index(ifindex) is None:
                raise KernelError(errno.ENODEV, f"no device with ifindex {ifindex}")
        packet = bytearray(req.data_in)
        protocol = eth_type_trans(packet)
        headlen = size - ETH_HLEN
        for proto, hlen, name in ((ETH_P_IP, IPV4_HLEN, "IPv4"), (ETH_P_IPV6, IPV6_HLEN, "IPv6")):
            if protocol == proto and headlen < hlen:
                raise KernelError(errno.EINVAL, f"an {name} frame of {size} bytes has no room "
                                  f"for its {hlen}-byte header (at least {ETH_HLEN + hlen})")
        l2 = prog.prog_type in L2_PROG_TYPES
        start = 0 if l2 else ETH_HLEN
        skb = bytearray(SK_BUFF_SIZE)
        _fill_sk_buff(skb, packet, start, protocol)
        if ctx is not None:
            _convert___skb_to_skb(ctx, skb, size - start)
        checksum = req.flags & BPF_F_TEST_SKB_CHECKSUM_COMPLETE
        csum = _csum(packet[ETH_HLEN:]) if checksum else 0
        writable = writable_fields(prog.prog_type, SK_BUFF_SIZE)
        pointers = {}
        if prog.prog_type in DIRECT_PACKET_PROG_TYPES:
            base = PACKET_REGION << 32
            pointers = {SKB_DATA: base | start, SKB_DATA_END: base | len(packet),
                        SKB_DATA_META: base | start}
        ctx_region = CtxRegion("__sk_buff", skb, pointers, writable)
        view = memoryview(packet)
        data = view[start:]
        retval, duration = self._timed_runs(
            prog, req.repeat, lambda: self._run_skb(prog, ctx_region, view, data))
        if not l2:
            packet[:ETH_HLEN] = bytes(ETH_HLEN)
        if checksum and _csum(packet[ETH_HLEN:]) != csum:
            raise KernelError(errno.EBADMSG, "the program changed the packet without updating "
                                             "its CHECKSUM_COMPLETE checksum")
        ctx_out = None
        if ctx is not None:  # convert_skb_to___skb
            ctx_out = bytearray(ctx)
            for off, length in ((SKB_MARK, 4), (SKB_PRIORITY, 4), (SKB_INGRESS_IFINDEX, 4),
                                (SKB_IFINDEX, 4), (SKB_CB, 20), (SKB_TSTAMP, 8),
                                (SKB_WIRE_LEN, 4), (SKB_GSO_SEGS, 4), (SKB_HWTSTAMP, 8)):
                ctx_out[off:off + length] = skb[off:off + length]
        return _test_finish(req, bytes(packet), retval, duration, ctx_out)

    def _run_skb(self, prog: BpfProg, ctx_region: CtxRegion, packet: memoryview,
                 data: memoryview) -> int:
        rs = RunState(self, self.insn_budget, data)
        rs.mem[CTX_REGION] = ctx_region
        rs.mem[PACKET_REGION] = packet
        return run(prog.executable, rs, CTX_REGION << 32, self.bpf_engine)

    def _test_run_xdp(self, prog: BpfProg, req: TestRunRequest) -> TestRun:
        """bpf_prog_test_run_xdp, its checks in the kernel's order."""
        if prog.expected_attach_type in (AttachType.XDP_DEVMAP, AttachType.XDP_CPUMAP):
            raise KernelError(errno.EINVAL, "XDP programs for devmap/cpumap entries have no "
                                            "test run")
        if req.flags & ~BPF_F_TEST_XDP_LIVE_FRAMES:
            raise KernelError(errno.EINVAL, f"flags {req.flags:#x}: XDP test runs take only "
                                            "BPF_F_TEST_XDP_LIVE_FRAMES")
        live = bool(req.flags & BPF_F_TEST_XDP_LIVE_FRAMES)
        batch_size = req.batch_size
        if live:
            batch_size = batch_size or NAPI_POLL_WEIGHT
            if batch_size > TEST_XDP_MAX_BATCH:
                raise KernelError(errno.E2BIG, f"batch_size {batch_size} is over "
                                               f"{TEST_XDP_MAX_BATCH}")
        elif batch_size:
            raise KernelError(errno.EINVAL, "batch_size is for live-frames runs only "
                                            "(flags BPF_F_TEST_XDP_LIVE_FRAMES)")
        size = len(req.data_in)
        ctx = _ctx_init(req, XDP_MD_SIZE)
        headroom = XDP_PACKET_HEADROOM
        meta = 0
        linear = size
        ingress = rx_queue = 0
        if ctx is not None:
            data, data_end, data_meta, ingress, rx_queue, egress = _XDP_MD.unpack_from(ctx)
            if data_meta or data_end > size or data > data_end or (
                    live and (req.data_size_out or req.ctx_size_out)):
                raise KernelError(errno.EINVAL, "xdp_md: data_meta must be 0, data <= "
                                  "data_end <= data size; a live-frames run returns no "
                                  "data_out or ctx_out")
            if data % 4 or data > XDP_METADATA_MAX \
                    or data > XDP_PACKET_HEADROOM - XDP_FRAME_SIZE:
                raise KernelError(errno.EINVAL, "xdp_md: metadata a multiple of 4 up to "
                                  f"{XDP_PACKET_HEADROOM - XDP_FRAME_SIZE} bytes (the "
                                  "headroom less struct xdp_frame)")
            headroom -= data
            meta, linear = data, data_end
        max_linear = PAGE_SIZE - headroom - (XDP_PAGE_HEAD_SIZE if live else 0) \
            - SKB_SHINFO_SIZE
        linear = min(linear, max_linear)
        if live and size > linear:
            raise KernelError(errno.EINVAL, f"data_in is {size} bytes: a live-frames run "
                                            f"takes no frame over {linear} bytes")
        if size - meta < ETH_HLEN:
            raise KernelError(errno.EINVAL, f"data_in is {size - meta} bytes after the metadata, "
                                            f"less than an Ethernet header ({ETH_HLEN})")
        if ctx is not None:  # xdp_convert_md_to_buff
            if egress:
                raise KernelError(errno.EINVAL, "xdp_md.egress_ifindex must be 0")
            if not ingress and rx_queue:
                raise KernelError(errno.EINVAL, "xdp_md.rx_queue_index needs an "
                                                "ingress_ifindex")
        dev = net_of(self.machine).dev_get_by_index(ingress or LOOPBACK_IFINDEX)
        if dev is None:
            raise KernelError(errno.ENODEV, f"no device with ifindex {ingress}")
        if rx_queue >= dev.real_num_rx_queues:
            raise KernelError(errno.EINVAL, f"rx_queue_index {rx_queue}: {dev.name} has "
                                            f"{dev.real_num_rx_queues} rx queue(s)")
        if live:
            template = XdpBuff.from_bytes(req.data_in, dev, rx_queue, metasize=meta,
                                          headroom=headroom)
            duration = bpf_test_run_xdp_live(prog, template, req.repeat, batch_size)
            ctx_out = bytearray(ctx) if ctx is not None else None
            return _test_finish(req, req.data_in, 0, min(duration, M32), ctx_out)
        # The page: data_hard_start at 0, the packet (metadata first) after the headroom,
        # room to grow up to the frame's end less the shared info (xdp_data_hard_end).
        buf = bytearray(XDP_FRAME_SZ - SKB_SHINFO_SIZE)
        buf[headroom:headroom + linear] = req.data_in[:linear]
        frags = req.data_in[linear:]
        base = PACKET_REGION << 32
        pointers = {XDP_MD_DATA: base | (headroom + meta),
                    XDP_MD_DATA_END: base | (headroom + linear),
                    XDP_MD_DATA_META: base | headroom}
        md = bytearray(XDP_MD_SIZE)
        struct.pack_into("<III", md, 12, dev.ifindex, rx_queue, 0)
        ctx_region = CtxRegion("xdp_md", md, pointers)
        view = memoryview(buf)

        def once() -> int:  # repeated runs share the buffer, head adjustments included
            start = pointers[XDP_MD_DATA] & M32
            rs = RunState(self, self.insn_budget, view[start:pointers[XDP_MD_DATA_END] & M32])
            rs.mem[CTX_REGION] = ctx_region
            rs.mem[PACKET_REGION] = view
            return run(prog.executable, rs, CTX_REGION << 32, self.bpf_engine)

        retval, duration = self._timed_runs(prog, req.repeat, once)
        data_meta, data, data_end = (pointers[f] & M32 for f in (
            XDP_MD_DATA_META, XDP_MD_DATA, XDP_MD_DATA_END))
        data_out = bytes(buf[data_meta:data_end]) + frags
        ctx_out = None
        if ctx is not None:
            ctx_out = bytearray(_XDP_MD.pack(data - data_meta, data_end - data_meta, 0, ingress,
                                             rx_queue, 0))
        return _test_finish(req, data_out, retval, duration, ctx_out)

    def _test_run_raw_tp(self, prog: BpfProg, req: TestRunRequest) -> TestRun:
        if req.data_in or req.data_size_out or req.ctx_size_out or req.repeat \
                or req.batch_size:
            raise KernelError(errno.EINVAL, "raw tracepoint test runs take only ctx_in (no "
                              "data, no ctx_out, repeat 0, no batch_size)")
        ctx_size = len(req.ctx_in)
        if ctx_size < prog.max_ctx_offset or ctx_size > MAX_BPF_FUNC_ARGS * 8:
            raise KernelError(errno.EINVAL, f"ctx_in is {ctx_size} bytes: the program reads "
                              f"{prog.max_ctx_offset}, at most {MAX_BPF_FUNC_ARGS * 8} allowed")
        if not req.flags & BPF_F_TEST_RUN_ON_CPU and req.cpu:
            raise KernelError(errno.EINVAL, "cpu needs flags=BPF_F_TEST_RUN_ON_CPU")
        cpu = req.cpu if req.flags & BPF_F_TEST_RUN_ON_CPU else self.machine.current_cpu()
        if not 0 <= cpu < self.machine.num_cpus:
            raise KernelError(errno.ENXIO, f"CPU {cpu} is not online")
        with self.machine.on_cpu(cpu):
            rs = prog.run(bytes(req.ctx_in))
        return TestRun(retval=rs.retval & M32, duration=0)

    def _test_run_syscall(self, prog: BpfProg, req: TestRunRequest) -> TestRun:
        # bpf_prog_test_run_syscall reads no cpu (it runs where the caller does)
        if req.flags or req.batch_size:
            raise KernelError(errno.EINVAL, "syscall program test runs take no flags and no "
                              "batch_size")
        ctx_size = len(req.ctx_in)
        if ctx_size > U16_MAX:
            raise KernelError(errno.EINVAL, f"ctx_in is {ctx_size} bytes, over {U16_MAX}")
        if req.data_in or req.data_size_out or req.ctx_size_out or req.repeat:
            raise KernelError(errno.EINVAL, "syscall program test runs take only ctx_in (no "
                              "data, no ctx_out, repeat 0)")
        if ctx_size < prog.max_ctx_offset:
            raise KernelError(errno.EINVAL, f"ctx_in is {ctx_size} bytes, the program reads "
                                            f"{prog.max_ctx_offset}")
        rs = prog.run(bytearray(req.ctx_in))
        return TestRun(retval=rs.retval & M32, duration=0)

    # -- tracepoints -------------------------------------------------------------------------
    def _attach_tracepoint(self, prog_fd: int, category: str, name: str) -> int:
        # The tracepoint's id is read (tracefs) and its perf event opened before the program
        # is set on it (PERF_EVENT_IOC_SET_BPF), as the kernel backend does.
        events = "/sys/kernel/tracing/events"
        if os.path.isdir(events) and not os.path.isdir(os.path.join(events, category, name)):
            raise KernelError(errno.ENOENT, f"no tracepoint {category}/{name} in {events}")
        prog = self.prog_from_fd(prog_fd)
        if prog.prog_type not in TRACEPOINT_PROG_TYPES:
            raise KernelError(errno.EINVAL, f"{prog.describe()} is not a TRACEPOINT program")
        return self._attach(prog, (category, name))

    def _raw_tracepoint_open(self, prog_fd: int, name: str) -> int:
        """BPF_RAW_TRACEPOINT_OPEN: a RAW_TRACEPOINT program on tracepoint ``name`` (any
        category: raw tracepoints are named without one)."""
        prog = self.prog_from_fd(prog_fd)
        if prog.prog_type not in (ProgType.RAW_TRACEPOINT, ProgType.RAW_TRACEPOINT_WRITABLE):
            raise KernelError(errno.EINVAL, "not a raw tracepoint program "
                              "(ProgType.RAW_TRACEPOINT)")
        events = "/sys/kernel/tracing/events"
        if os.path.isdir(events) and not any(
                os.path.isdir(os.path.join(events, category, name))
                for category in os.listdir(events)):
            raise KernelError(errno.ENOENT, f"no tracepoint named {name} in {events}")
        net_of(self.machine).add_trace_sink(self.trigger_raw_tracepoint)  # the data path's events
        return self._attach(prog, ("raw", name))

    def _attach(self, prog: BpfProg, key: tuple[str, str]) -> int:
        self.bpf_prog_inc(prog)
        link = _Tracepoint(self, prog, *key)
        with _tracepoint_lock:
            self._tracepoint_links().setdefault(link.key, []).append(link)
        return self.fd_install(link)

    def _tracepoint_links(self) -> dict[tuple[str, str], list[_Tracepoint]]:
        """(category, name) -> attached links, kept on the system (the mixin has no __init__)."""
        return self.__dict__.setdefault("_tracepoints", {})

    def _detach_tracepoint(self, link: _Tracepoint) -> None:
        with _tracepoint_lock:
            links = self._tracepoint_links().get(link.key, [])
            if link in links:
                links.remove(link)
        self.bpf_prog_put(link.prog)

    def trigger_raw_tracepoint(self, name: str, args: Sequence[int] = ()) -> list[int]:
        """Fire raw tracepoint ``name`` with ``args`` (struct bpf_raw_tracepoint_args, one
        u64 each): every attached program runs once; their return values in order."""
        return self.trigger_tracepoint("raw", name, struct.pack(f"<{len(args)}Q", *args))

    def trigger_tracepoint(self, category: str, name: str, ctx: bytes = b"") -> list[int]:
        """Fire tracepoint ``category/name`` with the raw record ``ctx``: every attached
        program runs once on the current CPU; returns their return values (R0) in order."""
        with _tracepoint_lock:
            links = list(self._tracepoint_links().get((category, name), ()))
        record = bytes(ctx)
        timing = self.machine.timing
        cpu = self.machine.current.cpu
        retvals = []
        for link in links:
            timing.charge(cpu, "tracepoint_entry")
            retvals.append(link.prog.run(record).retval)
        return retvals

    def enter_syscall(self, syscall: str, ctx: bytes = b"") -> list[int]:
        """A task on the current CPU makes ``syscall``: a modeled operation begins, the entry
        costs ``syscall_entry`` (``syscall_connect`` for connect), and tracepoint
        syscalls/sys_enter_<syscall> fires with the record ``ctx``."""
        self.machine.bpf_syscall("syscall_connect" if syscall == "connect" else "syscall_entry")
        return self.trigger_tracepoint("syscalls", f"sys_enter_{syscall}", ctx)


_tracepoint_lock = threading.Lock()


def _verifier_reject(message: str) -> KernelError:
    return KernelError(errno.EINVAL, message, log=message + "\n")


def _ctx_init(req: TestRunRequest, max_size: int) -> bytes | None:
    """bpf_ctx_init: None without ctx_in and ctx_out; a tail past the struct must be zero."""
    if not req.ctx_in and not req.ctx_size_out:
        return None
    ctx_in = req.ctx_in
    if len(ctx_in) > max_size and any(ctx_in[max_size:]):
        raise KernelError(errno.E2BIG, f"ctx_in has non-zero bytes past the {max_size}-byte "
                                       "context")
    return ctx_in[:max_size].ljust(max_size, b"\0")


def _convert___skb_to_skb(ctx: bytes, skb: bytearray, skb_len: int) -> None:
    """convert___skb_to_skb: only some __sk_buff fields may be set; copy them into ``skb``
    (the program's view), with the kernel's limits and its u16 gso_size."""
    allowed = bytearray(SK_BUFF_SIZE)
    for off, length in _SKB_CTX_IN_FIELDS:
        allowed[off:off + length] = b"\1" * length
    for i, byte in enumerate(ctx):
        if byte and not allowed[i]:
            raise KernelError(errno.EINVAL, f"ctx_in sets __sk_buff byte {i}: a test run takes "
                              "only mark, priority, ingress_ifindex, ifindex, cb, tstamp, "
                              "wire_len, gso_segs, gso_size and hwtstamp")
    for off, length in ((SKB_MARK, 4), (SKB_PRIORITY, 4), (SKB_INGRESS_IFINDEX, 4),
                        (SKB_CB, 20), (SKB_TSTAMP, 8), (SKB_HWTSTAMP, 8)):
        skb[off:off + length] = ctx[off:off + length]
    wire_len, gso_segs, gso_size = (struct.unpack_from("<I", ctx, off)[0]
                                    for off in (SKB_WIRE_LEN, SKB_GSO_SEGS, SKB_GSO_SIZE))
    if wire_len and not skb_len <= wire_len <= GSO_LEGACY_MAX_SIZE:
        raise KernelError(errno.EINVAL, f"wire_len {wire_len}: 0, or from the skb's length "
                                        f"({skb_len}) to {GSO_LEGACY_MAX_SIZE}")
    if gso_segs > GSO_MAX_SEGS:
        raise KernelError(errno.EINVAL, f"gso_segs {gso_segs} is over {GSO_MAX_SEGS}")
    for off, value in ((SKB_WIRE_LEN, wire_len or skb_len), (SKB_GSO_SEGS, gso_segs),
                       (SKB_GSO_SIZE, gso_size & U16_MAX)):  # shinfo's gso_size is a u16
        struct.pack_into("<I", skb, off, value)


def eth_type_trans(frame: bytes | bytearray) -> int:
    """The frame's skb->protocol on the loopback device (host byte order): its EtherType,
    or 802.3 (raw IPX, 0xFFFF after the header) / 802.2 LLC for a length field."""
    proto = int.from_bytes(frame[12:14], "big")
    if proto >= ETH_P_802_3_MIN:
        return proto
    return ETH_P_802_3 if frame[14:16] == b"\xff\xff" else ETH_P_802_2


def _fill_sk_buff(skb: bytearray, packet: bytearray, start: int, protocol: int) -> None:
    """The __sk_buff fields a program reads, as the kernel's test-run skb has them."""
    dst = packet[:6]
    if dst == bytes(6):  # the loopback device's address
        pkt_type = PACKET_HOST
    elif dst[0] & 1:  # lo's broadcast address is all zeros: ff:ff:.. is multicast to it
        pkt_type = PACKET_MULTICAST
    else:
        pkt_type = PACKET_OTHERHOST
    struct.pack_into("<I", skb, SKB_LEN, len(packet) - start)
    struct.pack_into("<I", skb, SKB_PKT_TYPE, pkt_type)
    skb[SKB_PROTOCOL:SKB_PROTOCOL + 2] = protocol.to_bytes(2, "big")  # __be16
    struct.pack_into("<I", skb, SKB_IFINDEX, LOOPBACK_IFINDEX)
    struct.pack_into("<I", skb, SKB_WIRE_LEN, len(packet) - start)
    struct.pack_into("<Q", skb, SKB_SK, SOCK_REGION << 32)
    # the test run's socket takes the family and addresses of an IP frame (raw, big-endian)
    if protocol == ETH_P_IP:
        struct.pack_into("<I", skb, SKB_FAMILY, AF_INET)
        skb[SKB_REMOTE_IP4:SKB_REMOTE_IP4 + 4] = packet[30:34]  # daddr
        skb[SKB_LOCAL_IP4:SKB_LOCAL_IP4 + 4] = packet[26:30]  # saddr
    elif protocol == ETH_P_IPV6:
        struct.pack_into("<I", skb, SKB_FAMILY, AF_INET6)
        skb[SKB_REMOTE_IP6:SKB_REMOTE_IP6 + 16] = packet[38:54]
        skb[SKB_LOCAL_IP6:SKB_LOCAL_IP6 + 16] = packet[22:38]


def _csum(data: bytes | bytearray) -> int:
    """The folded ones' complement sum the kernel compares for CHECKSUM_COMPLETE."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    total = sum(struct.unpack(f"<{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _test_finish(req: TestRunRequest, data: bytes, retval: int, duration: int,
                 ctx: bytes | bytearray | None) -> TestRun:
    """bpf_test_finish + bpf_ctx_finish: clamp to the output sizes; ENOSPC when clamped."""
    data_out = data[:req.data_size_out] if req.data_size_out else b""
    if req.data_size_out and len(data) > req.data_size_out:
        raise KernelError(errno.ENOSPC, f"data_out needs {len(data)} bytes, data_size_out is "
                                        f"{req.data_size_out}")
    ctx_out = b""
    if ctx is not None and req.ctx_size_out:
        if len(ctx) > req.ctx_size_out:
            raise KernelError(errno.ENOSPC, f"ctx_out needs {len(ctx)} bytes, ctx_size_out is "
                                            f"{req.ctx_size_out}")
        ctx_out = bytes(ctx)
    return TestRun(retval=retval, duration=duration, data_out=data_out, ctx_out=ctx_out)
