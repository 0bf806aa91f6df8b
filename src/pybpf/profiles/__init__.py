"""Machine profiles: the topology and the cost table the emulated machine's timing model uses.

A profile is a small TOML file (read with ``tomllib``). Every value is a table
``{ value = ..., source = "..." }``: the number and where it comes from (a paper, a vendor
document, a review that measured it, "calibrated on <host> by pybpf calibrate on <date>", or
a derivation from other values of the same file). Top level::

    format = 1
    name = "haswell-ep-2s"
    description = "2 x Xeon E5-2660 v3 ..."

    [topology]
    cpus = { value = 20, source = "..." }
    ...

The sections and keys are exactly those of ``SCHEMA`` (below, with units and meanings); a
profile must give every one of them, and nothing else, except an optional ``[reference]``
section of measured figures the model does not use (``pybpf calibrate`` records the host's
map_perf_test costs there, in ns per event, to compare with). Errors name the file and the
key. Shipped profiles live beside this module
(``shipped_profiles()``); ``load_profile`` takes a shipped name or a path.

Rules this module keeps: loading validates everything (types, ranges, matrix shapes, a remote
access never cheaper than a local one), so the timing model can trust a ``Profile``; writing
(``dump_profile``) produces a file ``load_profile`` reads back to an equal ``Profile``.
"""

from __future__ import annotations

import functools
import math
import tomllib
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .net_cycles import NET_CYCLES, net_source
from .sched_cycles import SCHED_CYCLES

FORMAT = 1
PROFILE_DIR = Path(__file__).parent
SUFFIX = ".toml"


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Param:
    """One entry of the cost table: where it lives, its unit and what it means."""

    section: str
    key: str
    unit: str  # "count", "ns", "kib", "bytes", "ghz", "slit"
    doc: str
    integer: bool = False

    @property
    def path(self) -> str:
        return f"{self.section}.{self.key}"


def _p(section: str, key: str, unit: str, doc: str, integer: bool = False) -> Param:
    return Param(section, key, unit, doc, integer)


SCHEMA: tuple[Param, ...] = (
    # -- topology ----------------------------------------------------------------------------
    _p("topology", "cpus", "count", "CPUs of the machine (logical CPUs the kernel sees)", True),
    _p("topology", "nodes", "count", "NUMA nodes; CPUs are spread over them contiguously "
       "(CPUs 0..cpus/nodes-1 on node 0, ...)", True),
    _p("topology", "distances", "slit", "node x node SLIT distances as "
       "/sys/devices/system/node/node*/distance print them (10 = local)"),
    # -- cpu work ----------------------------------------------------------------------------
    _p("cpu", "clock_ghz", "ghz", "core clock under load; used to convert cycle counts of "
       "the sources into ns"),
    _p("cpu", "syscall_entry", "ns", "one cheap syscall (getppid) from user space and back, "
       "as a glibc syscall() loop issues it, nothing attached"),
    _p("cpu", "syscall_connect", "ns", "connect(-1, sockaddr_in6, 28) from user space and "
       "back through glibc's wrapper, failing with EBADF, nothing attached (the LRU tests' "
       "trigger)"),
    _p("cpu", "tracepoint_entry", "ns", "what a syscall entry probe with one BPF program "
       "attached adds to the syscall, beyond the program's own instructions and calls"),
    _p("cpu", "prog_test_run", "ns", "BPF_PROG_TEST_RUN: per repetition, beyond the program"),
    _p("cpu", "bpf_insn", "ns", "one instruction of a JITed BPF program (a mix of ALU, "
       "stack loads and stores)"),
    _p("cpu", "helper_call", "ns", "a call of a BPF helper that does almost nothing "
       "(bpf_get_numa_node_id): the call and return"),
    _p("cpu", "probe_read_user", "ns", "bpf_probe_read_user of 16 bytes: the call and "
       "copy_from_user_nofault"),
    _p("cpu", "jhash_byte", "ns", "jhash of the key, per key byte"),
    _p("cpu", "atomic", "ns", "a locked read-modify-write (lock xadd/cmpxchg) on a line this "
       "CPU already holds"),
    _p("cpu", "spin_lock", "ns", "an uncontended raw_spin_lock_irqsave + unlock pair on a line "
       "this CPU already holds"),
    _p("cpu", "irq_work", "ns", "raising and running one irq_work (self-IPI) on this CPU"),
    # -- memory ------------------------------------------------------------------------------
    _p("memory", "line_bytes", "bytes", "cache line size", True),
    _p("memory", "private_kib", "kib", "private cache per CPU (L2): lines a CPU reaches "
       "without a stall the work costs above do not already include", True),
    _p("memory", "shared_kib", "kib", "last-level cache per NUMA node", True),
    _p("memory", "shared_hit", "ns", "load that misses the private cache and hits the node's "
       "last-level cache"),
    _p("memory", "dram_local", "ns", "load from DRAM of the CPU's own node (idle latency)"),
    _p("memory", "dram_remote", "ns", "load from DRAM of another node at the largest distance "
       "of the matrix (nearer nodes are interpolated by SLIT distance)"),
    _p("memory", "transfer_local", "ns", "load of a line another CPU of the same node has "
       "modified (core-to-core transfer)"),
    _p("memory", "transfer_remote", "ns", "load of a line a CPU of another node has modified "
       "(cross-socket transfer)"),
    # -- map operations: CPU work beyond what is modeled separately --------------------------
    _p("ops", "array_map_lookup_elem", "ns", "array lookup from a program (the JIT inlines "
       "it), beyond the program's own instructions"),
    _p("ops", "htab_map_lookup_elem", "ns", "hash lookup from a program: call and bucket "
       "walk, beyond jhash and memory stalls"),
    _p("ops", "htab_map_update_elem", "ns", "hash update of a new key from a program, beyond "
       "jhash, the bucket lock, the element allocation and memory stalls"),
    _p("ops", "htab_map_delete_elem", "ns", "hash delete from a program, beyond jhash, the "
       "bucket lock, freeing the element and memory stalls"),
    _p("ops", "htab_lru_map_update_elem", "ns", "LRU hash update from a program while free "
       "nodes remain, beyond jhash, locks and memory stalls"),
    _p("ops", "bpf_lru_evict", "ns", "per node the LRU takes back from the lists when none is "
       "free (shrink, htab_lru_map_delete_node), beyond locks and memory stalls"),
    _p("ops", "trie_lookup_elem", "ns", "LPM trie lookup from a program, beyond memory stalls"),
    # -- element allocation ------------------------------------------------------------------
    _p("alloc", "bpf_mem_cache", "ns", "bpf_mem_alloc's unit_alloc or unit_free: the per-CPU "
       "free list with interrupts off"),
    _p("alloc", "kmalloc", "ns", "slab allocation fast path (per-CPU slab)"),
    _p("alloc", "kfree", "ns", "slab free fast path"),
    _p("alloc", "memcg_charge", "ns", "memcg accounting of one object allocated with "
       "__GFP_ACCOUNT (map memory, 5.11+): the objcg lookup, obj_cgroup_charge from the "
       "per-CPU stock, the slab's objcg slot and the vmstat delta"),
    _p("alloc", "memcg_uncharge", "ns", "memcg accounting of one accounted object freed: "
       "the stock refilled, the vmstat delta, the objcg reference dropped"),
    _p("alloc", "slab_refill", "ns", "SLUB's ___slab_alloc taking a partial slab when the "
       "CPU's slab is used up, beyond its cmpxchg and memory stalls"),
    _p("alloc", "slab_free_remote", "ns", "SLUB's __slab_free of an object whose slab is not "
       "the CPU's, beyond its cmpxchg and memory stalls"),
    _p("alloc", "page_alloc", "ns", "a new slab's order-0 page from the page allocator's "
       "per-CPU lists"),
    _p("alloc", "page_free", "ns", "an empty slab's page given back to the page allocator"),
    _p("alloc", "call_rcu", "ns", "queueing one RCU callback"),
    _p("alloc", "rcu_callback", "ns", "invoking one RCU callback from rcu_do_batch, beyond "
       "what the callback does"),
    _p("alloc", "rcu_core", "ns", "one RCU_SOFTIRQ round beyond its callbacks: the vector's "
       "dispatch, rcu_core's checks and rcu_do_batch taking the ready callbacks off the list "
       "and putting back what it leaves"),
    # -- rcu ---------------------------------------------------------------------------------
    _p("rcu", "grace_period", "ns", "length of an RCU grace period on a busy machine"),
    _p("rcu", "tick", "ns", "scheduling-clock tick period, 1 / CONFIG_HZ: RCU's quiescent "
       "states are reported and its callbacks invoked from it"),
    # -- the XDP / cpumap / GRO receive path: CPU work beyond the memory stalls --------------
    _p("net", "xdp_do_redirect", "ns", "per frame an XDP program redirects to a cpumap entry, "
       "on the receiving CPU: xdp_do_redirect, xdp_convert_buff_to_frame, bq_enqueue"),
    _p("net", "ptr_ring_produce", "ns", "per frame bq_flush_to_queue puts in the entry's "
       "ptr_ring (beyond its producer lock)"),
    _p("net", "cpu_map_kthread_frame", "ns", "per frame the cpumap kthread takes off its ring "
       "(__ptr_ring_consume_batched, the frame's prefetch and the loop's bookkeeping)"),
    _p("net", "napi_skb_cache_get", "ns", "per skb head napi_skb_cache_get_bulk hands out of "
       "the per-CPU NAPI cache (the head's zeroing is charged as memory)"),
    _p("net", "napi_skb_cache_put", "ns", "per skb head given back to the NAPI cache"),
    _p("net", "kmem_cache_alloc_bulk", "ns", "per object of a kmem_cache_alloc_bulk from "
       "skbuff_head_cache"),
    _p("net", "kmem_cache_free_bulk", "ns", "per object of a kmem_cache_free_bulk"),
    _p("net", "build_skb", "ns", "__xdp_build_skb_from_frame per skb: build_skb_around, the "
       "shared info, eth_type_trans (the lines it touches are charged as memory)"),
    _p("net", "gro_receive", "ns", "per skb GRO looks at (dev_gro_receive, inet/ipv6 and UDP "
       "gro_receive with the software checksum check and the socket lookup)"),
    _p("net", "gro_receive_skb", "ns", "per skb a GRO node takes, whether the device elides "
       "GRO or not: gro_receive_skb's entry and exit, the netif_elide_gro test, "
       "gro_skb_finish"),
    _p("net", "gro_normal_one", "ns", "per skb a GRO node queues on its rx_list for the stack "
       "(gro_normal_one: the list add and the gro_normal_batch test)"),
    _p("net", "gro_flush", "ns", "per flush of a GRO node (cpu_map_gro_flush, a NAPI poll's "
       "end): gro_flush and gro_normal_list, beyond completing and delivering skbs"),
    _p("net", "gro_merge", "ns", "per skb merged into a held one: the frag append "
       "(skb_gro_receive) and freeing the stolen head"),
    _p("net", "gro_complete", "ns", "per merged skb GRO completes (the headers rewritten)"),
    _p("net", "netif_receive_skb", "ns", "per skb up the stack to a UDP socket: "
       "__netif_receive_skb_core, ip_rcv, the route lookup, ip_local_deliver, udp_rcv, the "
       "socket lookup, __udp_enqueue_schedule_skb and the reader's wake-up"),
    # -- TCP over loopback and the sockmap psock path (bench/sockmap_model.py) ---------------
    _p("net", "copy_user_line", "ns", "per 64-byte line tcp_sendmsg copies from user memory "
       "into the skb's pages, or tcp_recvmsg copies out to user memory"),
    _p("net", "tcp_sendmsg_skb", "ns", "per skb tcp_sendmsg_locked builds and queues (the "
       "copy or splice of its data charged apart)"),
    _p("net", "skb_send_sock_frag", "ns", "per 32 KiB page frag skb_send_sock splices into "
       "a socket (MSG_SPLICE_PAGES: a page reference, no copy)"),
    _p("net", "tcp_write_xmit_skb", "ns", "per skb from tcp_write_xmit through ip_output to "
       "loopback_xmit and the backlog queue"),
    _p("net", "tcp_v4_rcv_skb", "ns", "per skb of the receive softirq into a TCP socket: "
       "process_backlog, ip_rcv, tcp_v4_rcv, tcp_rcv_established, the queueing, data_ready"),
    _p("net", "tcp_ack", "ns", "per skb read: the ACK the reader's TCP sends and the "
       "sender's processing of it, both on the reader's CPU over loopback"),
    _p("net", "tcp_recvmsg_skb", "ns", "per skb tcp_recvmsg takes (the copy charged apart): "
       "the queue walk, the skb's free, the receive-space bookkeeping"),
    _p("net", "tcp_read_skb", "ns", "per skb a psock's verdict takes off its socket "
       "(tcp_read_skb: unlink, ownership, tcp_cleanup_rbuf)"),
    _p("net", "sk_psock_skb_redirect", "ns", "per skb redirected: the target psock's lookup, "
       "skb_queue_tail on its ingress_skb, schedule_delayed_work and the kworker's wake-up "
       "call"),
    _p("net", "kworker_wakeup", "ns", "per run of a psock's backlog work: the kworker "
       "scheduled in and out (two context switches) and process_one_work"),
    _p("net", "sk_psock_ingress_msg", "ns", "per skb put on a psock's ingress_msg "
       "(sk_psock_skb_ingress: the sk_msg, the scatterlist, data_ready)"),
    # -- the scheduler (emulated/machine/sched.py) -------------------------------------------
    _p("sched", "context_switch", "ns", "one switch between two contexts on a CPU "
       "(__schedule: the pick, switch_mm, switch_to), its direct cost"),
    _p("sched", "wakeup_latency", "ns", "from try_to_wake_up of a task on an idle CPU until "
       "that CPU can switch to it: the IPI and the idle state's exit"),
)

# Sections a profile may leave out, and keys of them it may omit: each then gets its cycle
# estimate at the profile's clock (profiles written before the section existed).
CYCLE_ESTIMATES: dict[str, dict[str, tuple[int, str]]] = {"net": NET_CYCLES,
                                                          "sched": SCHED_CYCLES}


def cycle_estimates(ghz: float) -> dict[str, Value]:
    """Every cycle-estimated value ("section.key") at a clock of ``ghz``."""
    return {f"{section}.{key}": Value(round(cycles / ghz, 3), net_source(cycles, ghz, what))
            for section, table in CYCLE_ESTIMATES.items()
            for key, (cycles, what) in table.items()}

SCHEMA_BY_PATH: dict[str, Param] = {p.path: p for p in SCHEMA}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(p.section for p in SCHEMA))
REFERENCE = "reference"


@dataclass(frozen=True)
class Value:
    value: float | int | list[list[int]]
    source: str


@dataclass(frozen=True)
class Profile:
    """A validated profile: ``values["cpu.syscall_entry"]`` is a ``Value``."""

    name: str
    description: str
    values: Mapping[str, Value]  # read-only: profiles are shared (load_profile caches them)
    path: str = ""  # where it was read from ("" when built in memory)
    reference: Mapping[str, Value] = field(default_factory=dict)  # measured, unused by the model

    def __getitem__(self, path: str) -> float:
        """The number of parameter ``path`` (e.g. "memory.dram_local")."""
        return self.values[path].value  # type: ignore[return-value]

    def source(self, path: str) -> str:
        return self.values[path].source

    @property
    def num_cpus(self) -> int:
        return int(self["topology.cpus"])

    @property
    def num_nodes(self) -> int:
        return int(self["topology.nodes"])

    @property
    def cpu_node(self) -> list[int]:
        """Node of each CPU: contiguous, as the emulated machine declares topologies."""
        cpus, nodes = self.num_cpus, self.num_nodes
        return [cpu * nodes // cpus for cpu in range(cpus)]

    @property
    def distances(self) -> list[list[int]]:
        return self.values["topology.distances"].value  # type: ignore[return-value]

    def replace(self, changes: dict[str, Value], name: str | None = None,
                description: str | None = None) -> Profile:
        """A copy with some values replaced (keys "section.key"), validated again."""
        return validate(name or self.name, description or self.description,
                        {**self.values, **changes}, self.path, self.reference)


# -- reading -------------------------------------------------------------------------------

def shipped_profiles() -> list[str]:
    """Names of the profiles that come with pybpf."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*" + SUFFIX))


def profile_path(name_or_path: str | Path) -> Path:
    """A shipped profile's file, or the given path; ProfileError if neither exists."""
    text = str(name_or_path)
    shipped = PROFILE_DIR / (text + SUFFIX)
    if "/" not in text and not text.endswith(SUFFIX) and shipped.is_file():
        return shipped
    path = Path(text).expanduser()
    if path.is_file():
        return path
    raise ProfileError(
        f"no profile {text!r}: give a file or one of the shipped profiles "
        f"({', '.join(shipped_profiles())})")


def load_profile(name_or_path: str | Path) -> Profile:
    """Read and validate a profile (a shipped name such as "host", or a TOML file). A file
    read before and unchanged since comes from a cache (every emulated machine loads one)."""
    path = profile_path(name_or_path)
    stat = path.stat()
    return _load(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _load(path: str, mtime_ns: int, size: int) -> Profile:
    try:
        doc = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    return parse_profile(doc, path)


def parse_profile(doc: dict, where: str = "<profile>") -> Profile:
    """A ``Profile`` from a parsed TOML document; ProfileError names what is wrong."""
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise ProfileError(f"{where}: format must be {FORMAT}, got {fmt!r}")
    for key in ("name", "description"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise ProfileError(f"{where}: '{key}' must be a non-empty string")
    extra = sorted(set(doc) - {"format", "name", "description", REFERENCE, *SECTIONS})
    if extra:
        raise ProfileError(f"{where}: unknown top-level key(s) {extra}; sections are "
                           f"{list(SECTIONS)}")
    values: dict[str, Value] = {}
    for section in SECTIONS:
        table = doc.get(section)
        if table is None and section in CYCLE_ESTIMATES:
            continue  # a profile written before the section existed: the estimates, below
        if not isinstance(table, dict):
            raise ProfileError(f"{where}: missing section [{section}]")
        known = {p.key for p in SCHEMA if p.section == section}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ProfileError(f"{where}: unknown key(s) {[f'{section}.{k}' for k in unknown]}; "
                               f"[{section}] takes {sorted(known)}")
        for key, entry in table.items():
            path = f"{section}.{key}"
            if not isinstance(entry, dict) or set(entry) != {"value", "source"}:
                raise ProfileError(f"{where}: {path} must be a table "
                                   "{ value = ..., source = \"...\" }")
            values[path] = Value(entry["value"], entry["source"])
    if isinstance(values.get("cpu.clock_ghz"), Value):
        ghz = values["cpu.clock_ghz"].value
        if isinstance(ghz, int | float) and not isinstance(ghz, bool) and ghz > 0:
            for path, value in cycle_estimates(ghz).items():
                values.setdefault(path, value)
    reference = doc.get(REFERENCE, {})
    if not isinstance(reference, dict):
        raise ProfileError(f"{where}: [{REFERENCE}] must be a table")
    refs = {}
    for key, entry in reference.items():
        if (not isinstance(entry, dict) or set(entry) != {"value", "source"}
                or isinstance(entry["value"], bool)
                or not isinstance(entry["value"], int | float)
                or not isinstance(entry["source"], str) or not entry["source"].strip()):
            raise ProfileError(f"{where}: {REFERENCE}.{key} must be a table "
                               "{ value = <number>, source = \"...\" }")
        refs[key] = Value(entry["value"], entry["source"])
    return validate(doc["name"], doc["description"], values,
                    "" if where == "<profile>" else where, refs)


def validate(name: str, description: str, values: dict[str, Value], path: str = "",
             reference: dict[str, Value] | None = None) -> Profile:
    """Check every value against ``SCHEMA`` and the rules between values."""
    where = path or f"profile {name!r}"
    missing = [p.path for p in SCHEMA if p.path not in values]
    if missing:
        raise ProfileError(f"{where}: missing {', '.join(missing)}")
    for key, v in values.items():  # not ``path``: that is the file's, kept in the Profile
        param = SCHEMA_BY_PATH.get(key)
        if param is None:
            raise ProfileError(f"{where}: unknown key {key}")
        if not isinstance(v.source, str) or not v.source.strip():
            raise ProfileError(f"{where}: {key} needs a source (where the value comes from)")
        if param.unit == "slit":
            continue
        x = v.value
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
            raise ProfileError(f"{where}: {key} must be a finite number, got {x!r}")
        if param.integer and not isinstance(x, int):
            raise ProfileError(f"{where}: {key} must be an integer, got {x!r}")
        if x < 0:
            raise ProfileError(f"{where}: {key} must not be negative, got {x!r} {param.unit}")
    _check_topology(values, where)
    _check_memory(values, where)
    return Profile(name, description, types.MappingProxyType(dict(values)), path,
                   types.MappingProxyType(dict(reference or {})))


def _check_topology(values: dict[str, Value], where: str) -> None:
    cpus, nodes = values["topology.cpus"].value, values["topology.nodes"].value
    if cpus < 1:
        raise ProfileError(f"{where}: topology.cpus must be at least 1, got {cpus}")
    if not 1 <= nodes <= cpus:
        raise ProfileError(f"{where}: topology.nodes must be 1..cpus ({cpus}), got {nodes}")
    dist = values["topology.distances"].value
    if (not isinstance(dist, list) or len(dist) != nodes
            or any(not isinstance(row, list) or len(row) != nodes for row in dist)):
        raise ProfileError(f"{where}: topology.distances must be a {nodes} x {nodes} matrix "
                           f"(one row per node), got {dist!r}")
    for i, row in enumerate(dist):
        for j, d in enumerate(row):
            if isinstance(d, bool) or not isinstance(d, int):
                raise ProfileError(f"{where}: topology.distances[{i}][{j}] must be an "
                                   f"integer, got {d!r}")
            if i == j and d != 10:
                raise ProfileError(f"{where}: topology.distances[{i}][{i}] must be 10 "
                                   f"(local), got {d}")
            if i != j and d <= 10:
                raise ProfileError(f"{where}: topology.distances[{i}][{j}] must exceed 10 "
                                   f"(a remote node is farther than the local one), got {d}")


def _check_memory(values: dict[str, Value], where: str) -> None:
    def v(key: str) -> float:
        return values[f"memory.{key}"].value  # type: ignore[return-value]

    if v("line_bytes") < 8 or v("line_bytes") & (v("line_bytes") - 1):
        raise ProfileError(f"{where}: memory.line_bytes must be a power of two >= 8, "
                           f"got {v('line_bytes')}")
    for key in ("private_kib", "shared_kib"):
        if v(key) * 1024 < v("line_bytes"):
            raise ProfileError(f"{where}: memory.{key} must hold at least one line")
    order = ("shared_hit", "dram_local", "dram_remote")
    for near, far in zip(order, order[1:], strict=False):
        if v(near) > v(far):
            raise ProfileError(f"{where}: memory.{near} ({v(near)} ns) exceeds memory.{far} "
                               f"({v(far)} ns): a farther level is never faster")
    if v("transfer_local") > v("transfer_remote"):
        raise ProfileError(f"{where}: memory.transfer_local exceeds memory.transfer_remote: "
                           "a cross-node transfer is never faster")


# -- writing -------------------------------------------------------------------------------

def _toml_str(text: str) -> str:
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\t", "\\t"))
    return f'"{escaped}"'


def _toml_value(x: object) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, list):
        return "[" + ", ".join(_toml_value(e) for e in x) + "]"
    raise TypeError(f"cannot write {x!r} in a profile")


def dumps_profile(profile: Profile, header: str = "") -> str:
    """The TOML text of ``profile`` (``header`` lines become comments at the top)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f"format = {FORMAT}", f"name = {_toml_str(profile.name)}",
              f"description = {_toml_str(profile.description)}"]
    for section in SECTIONS:
        lines += ["", f"[{section}]"]
        for param in (p for p in SCHEMA if p.section == section):
            v = profile.values[param.path]
            lines.append(f"# {param.doc} ({param.unit})")
            lines.append(f"{param.key} = {{ value = {_toml_value(v.value)}, "
                         f"source = {_toml_str(v.source)} }}")
    if profile.reference:
        lines += ["", f"[{REFERENCE}]", "# measured figures, not used by the model"]
        lines += [f"{key} = {{ value = {_toml_value(v.value)}, source = {_toml_str(v.source)} }}"
                  for key, v in profile.reference.items()]
    return "\n".join(lines) + "\n"


def dump_profile(profile: Profile, path: str | Path, header: str = "") -> None:
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_profile(profile, header))
