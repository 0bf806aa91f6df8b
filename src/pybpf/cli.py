"""The ``pybpf`` command line (also ``python -m pybpf``): one table of its commands.

Adding a command: write ``configure_parser(parser)`` (adds its arguments) and a function that
runs it on the parsed arguments (returns the exit status) in the module that does the work, and
add one ``Command`` line to ``COMMANDS`` (or ``BENCHMARKS`` for ``pybpf bench NAME``). Those
modules never import this one.

Every command keeps the rules in ``commands`` (``run_command`` enforces them): a usage error
exits 2 with one ``error:`` line, a refused operation exits 1 with one ``Error:`` line, never a
traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import __version__, calibrate, doctor, reproduce
from .backends import BACKENDS
from .bench import cpumap, htab_mem, interp, map_perf, map_perf_scaling, ops, shm, sockmap
from .commands import CommandError as CommandError  # what a refused run raises, as before
from .commands import run_command
from .testing.differential import command as differential
from .uapi import MapType, map_traits, round_up


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, the function that adds its arguments to its parser,
    and the one that runs it on the parsed arguments (returning the exit status)."""

    help: str
    configure_parser: Callable[[argparse.ArgumentParser], object]
    run: Callable[[argparse.Namespace], int]


def add_commands(sub: argparse._SubParsersAction, table: dict[str, Command]) -> None:
    """One subcommand per line of ``table`` (COMMANDS, BENCHMARKS)."""
    for name, command in table.items():
        parser = sub.add_parser(name, help=command.help, description=command.help)
        parser.set_defaults(subparser=parser)  # the innermost one wins: it reports errors
        command.configure_parser(parser)


# -- pybpf bench NAME ---------------------------------------------------------------------------

BENCHMARKS: dict[str, Command] = {
    "cpumap": Command("XDP redirect to another CPU: kthread Mpps and frames per skb at UDP with "
                      "GRO on and off, on both backends, beside xdp-bench redirect-cpu",
                      cpumap.configure_parser, cpumap.run_from_args),
    "sockmap": Command("client <-> proxy <-> server on loopback: direct, user-space proxies, the "
                       "kernel's sockmap (egress, ingress, RPS off and on) and the emulated one "
                       "(unbound, target_cpu); Gbit/s and per-CPU busy time, beside iperf3",
                       sockmap.configure_parser, sockmap.run_from_args),
    "htab-mem": Command("hash map update throughput and memory: preallocated vs bpf_mem_alloc "
                        "(and, emulated, the old call_rcu design); the selftests' htab-mem",
                        htab_mem.configure_parser, htab_mem.run_from_args),
    "ops": Command(ops.ABOUT, ops.configure_parser, ops.run),
    "interp": Command(interp.ABOUT, interp.configure_parser, interp.run_from_args),
    "shm": Command(shm.ABOUT, shm.configure_parser, shm.run),
    "map-perf-scaling": Command(map_perf_scaling.ABOUT, map_perf_scaling.configure_parser,
                                map_perf_scaling.run_from_args),
}


def add_benchmarks(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    add_commands(sub, BENCHMARKS)


def run_benchmark(args: argparse.Namespace) -> int:
    return BENCHMARKS[args.benchmark].run(args)


# -- pybpf maps, then the table of commands --------------------------------------------------------

def add_maps_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="backend (default: kernel when bpf(2) is allowed, else emulated; "
                             "PYBPF_BACKEND overrides)")
    parser.add_argument("--json", action="store_true",
                        help="print each map as `bpftool -j map show` / `map dump` would, in "
                             "one JSON list of {\"map\", \"show\", \"dump\"}")


def run_maps(args: argparse.Namespace) -> int:
    from .backends import system

    try:
        sys_ = system(args.backend)
    except OSError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if not args.json:
        print(f"# pybpf maps on the {sys_.name} backend ({sys_.num_possible_cpus} possible "
              "CPUs)\n")
    failures = 0
    shown = []
    for title, build in demo_maps():
        try:
            with build(sys_) as m:
                if args.json:
                    shown.append({"map": title, "show": bpftool_show_json(m),
                                  "dump": bpftool_dump_json(m)})
                    continue
                print(f"$ bpftool map show id {m.id}   # {title}")
                print(bpftool_show(m), end="")
                print(f"$ bpftool map dump id {m.id}")
                print(bpftool_dump(m), end="")
                if m.key_size == 0 and m.type != MapType.BLOOM_FILTER:
                    print(f"$ bpftool map peek id {m.id}")
                    print(bpftool_peek(m), end="")
                print()
        except BrokenPipeError:
            raise
        except OSError as exc:
            failures += 1
            print(f"Error: {title}: {exc}\n", file=sys.stderr)
    if args.json:
        print(json.dumps(shown))
    return 1 if failures else 0


COMMANDS: dict[str, Command] = {
    "maps": Command("create one map of each supported type, fill a few elements and print them "
                    "as `bpftool map show` and `bpftool map dump` do",
                    add_maps_arguments, run_maps),
    "map-perf": Command("the kernel's samples/bpf/map_perf_test: per-CPU events/s of map work "
                        "on syscall tracepoints",
                        map_perf.configure_parser, map_perf.run_from_args),
    "bench": Command("benchmarks: htab-mem, ops, interp, cpumap, sockmap, shm, "
                     "map-perf-scaling",
                     add_benchmarks, run_benchmark),
    "reproduce": Command("the seed patches' published results beside the emulated machine's "
                         "predictions on a profile of their era (about two minutes), and why",
                         reproduce.configure_parser, reproduce.run),
    "calibrate": Command("measure this host's costs on the kernel backend and write a machine "
                         "profile for the emulated machine's timing model",
                         calibrate.configure_parser, calibrate.run),
    "differential": Command("run random map-operation sequences on two backends and compare "
                            "every returned byte and errno (the kernel is the oracle)",
                            differential.configure_parser, differential.run),
    "doctor": Command("which tiers and features are active here: the kernel backend, bpffs "
                      "and tracefs, the C accelerator, the engines, plots, modeled time",
                      doctor.configure_parser, doctor.run),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pybpf", description="The Linux BPF map subsystem in Python: kernel and "
                                  "emulated backends behind one bpf(2)-shaped interface.")
    parser.add_argument("--version", action="version", version=f"pybpf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_commands(sub, COMMANDS)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), lambda args: COMMANDS[args.command].run(args), argv)


# -- pybpf maps: the demo maps ---------------------------------------------------------------------

def demo_maps() -> list[tuple[str, Callable]]:
    """(title, build(system) -> open Map with a few elements) for each supported type."""
    from . import maps as M

    def hash_(s):
        m = M.HashMap(16, int, int, key_size=4, value_size=8, name="demo_hash", system=s)
        for k in (1, 2, 3):
            m[k] = k * 100
        return m

    def array(s):
        m = M.ArrayMap(4, value=int, value_size=8, name="demo_array", system=s)
        m[1] = 0x1111
        m[3] = 0x3333
        return m

    def percpu(cls, name):
        def build(s):
            m = cls(8, int, int, key_size=4, value_size=4, name=name, system=s)
            m[1] = 7
            m[2] = [10 + cpu for cpu in range(s.num_possible_cpus)]
            return m
        return build

    def percpu_array(s):
        m = M.PercpuArrayMap(2, value=int, value_size=4, name="demo_pcpu_arr", system=s)
        m[0] = [cpu + 1 for cpu in range(s.num_possible_cpus)]
        return m

    def lru(s):
        m = M.LruHashMap(16, int, int, key_size=4, value_size=8, name="demo_lru", system=s)
        for k in (5, 6):
            m[k] = k
        return m

    def lpm(s):
        m = M.LpmTrieMap(8, 4, int, value_size=4, name="demo_lpm", system=s)
        m[(8, bytes([10, 0, 0, 0]))] = 1
        m[(16, bytes([192, 168, 0, 0]))] = 2
        return m

    def of_maps(cls, name, key):
        def build(s):
            inner = M.MapSpec(MapType.ARRAY, 4, 4, 2)
            m = cls(4, inner_map=inner, key=int, key_size=4, name=name, system=s)
            for i, k in enumerate(key):
                with M.ArrayMap(2, value=int, value_size=4, system=s) as a:
                    a[0] = i
                    m[k] = a
            return m
        return build

    def queue_stack(cls, name):
        def build(s):
            m = cls(4, int, value_size=4, name=name, system=s)
            for v in (1, 2, 3):
                m.push(v)
            return m
        return build

    def bloom(s):
        m = M.BloomFilterMap(16, int, value_size=4, name="demo_bloom", system=s)
        for v in (1, 2, 3):
            m.add(v)
        return m

    return [
        ("hash", hash_), ("array", array),
        ("percpu_hash", percpu(M.PercpuHashMap, "demo_pcpu_hash")),
        ("percpu_array", percpu_array), ("lru_hash", lru),
        ("lru_percpu_hash", percpu(M.LruPercpuHashMap, "demo_lru_pcpu")),
        ("lpm_trie", lpm),
        ("array_of_maps", of_maps(M.ArrayOfMaps, "demo_aom", (0, 2))),
        ("hash_of_maps", of_maps(M.HashOfMaps, "demo_hom", (7,))),
        ("queue", queue_stack(M.QueueMap, "demo_queue")),
        ("stack", queue_stack(M.StackMap, "demo_stack")),
        ("bloom_filter", bloom),
    ]


# -- bpftool's plain output (src/map.c, src/common.c of bpftool) --------------------------------

def hex_bytes(data: bytes) -> str:
    """fprint_hex: "%02x" bytes, one space apart, two spaces every 8, a newline every 16."""
    out = []
    for i, byte in enumerate(data):
        if i:
            out.append("\n" if i % 16 == 0 else "  " if i % 8 == 0 else " ")
        out.append(f"{byte:02x}")
    return "".join(out)


def type_name(map_type: int) -> str:
    """libbpf_bpf_map_type_str."""
    if map_type in MapType._value2member_map_:
        return MapType(map_type).name.lower()
    return f"type {map_type}"


def _fdinfo(m) -> dict[str, str]:
    """/proc/self/fdinfo of a kernel map fd (memlock, frozen); nothing for other backends."""
    if m.system.name != "kernel":
        return {}
    try:
        with open(f"/proc/self/fdinfo/{m.fd}") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def bpftool_show(m) -> str:
    """`bpftool map show`: header line, sizes line, then `frozen` if it is."""
    info = m.info()
    head = f"{info.id}: {type_name(info.type)}  "
    if info.name:
        head += f"name {info.name}  "
    head += f"flags {info.map_flags:#x}"
    sizes = f"\tkey {info.key_size}B  value {info.value_size}B  max_entries {info.max_entries}"
    fdinfo = _fdinfo(m)
    if "memlock" in fdinfo:
        sizes += f"  memlock {fdinfo['memlock']}B"
    text = f"{head}\n{sizes}"
    if fdinfo.get("frozen", "0") != "0":
        text += "\n\tfrozen"
    return text + "\n"


def _entry_plain(info, key: bytes, value: bytes, ncpus: int) -> str:
    """print_entry_plain."""
    if not map_traits(info.type).percpu:
        break_names = info.key_size > 16 or info.value_size > 16
        single_line = info.key_size + info.value_size <= 24 and not break_names
        text = ""
        if info.key_size:
            text += "key:" + ("\n" if break_names else " ") + hex_bytes(key)
            text += "  " if single_line else "\n"
        if info.value_size:
            text += "value:" + ("\n" if break_names else " ") + hex_bytes(value)
        return text + "\n"
    step = round_up(info.value_size, 8)
    text = f"key:\n{hex_bytes(key)}\n" if info.key_size else ""
    if info.value_size:
        for cpu in range(ncpus):
            slot = value[cpu * step:cpu * step + info.value_size]
            text += (f"value (CPU {cpu:02d}):" + ("\n" if info.value_size > 16 else " ") +
                     hex_bytes(slot) + "\n")
    return text


def _entry_error(info, key: bytes, err: int) -> str | None:
    """print_entry_error: fd maps skip ENOENT silently."""
    if map_traits(info.type).fd_values and err == errno.ENOENT:
        return None
    msg = "<no entry>" if err == errno.ENOENT else os.strerror(err)
    break_names = info.key_size > 16 or len(msg) > 16
    single_line = info.key_size + len(msg) <= 24 and not break_names
    return ("key:" + ("\n" if break_names else " ") + hex_bytes(key) +
            ("  " if single_line else "\n") + "value:" + ("\n" if break_names else " ") +
            msg + "\n")


def bpftool_dump(m) -> str:
    """`bpftool map dump`: GET_NEXT_KEY from NULL, LOOKUP each key, `Found N elements`."""
    info = m.info()
    system, fd = m.system, m.fd
    ncpus = system.num_possible_cpus
    out, found, key = [], 0, None
    while True:
        try:
            key = system.map_get_next_key(fd, key)
        except OSError:
            break  # ENOENT at the end; other errors end the walk as in bpftool
        try:
            value = system.map_lookup_elem(fd, key)
        except OSError as exc:
            line = _entry_error(info, key, exc.errno)
            if line:
                out.append(line)
            continue
        out.append(_entry_plain(info, key, value, ncpus))
        found += 1
    out.append(f"Found {found} element{'s' if found != 1 else ''}\n")
    return "".join(out)


def bpftool_peek(m) -> str:
    """`bpftool map peek` of a queue or stack."""
    info = m.info()
    try:
        value = m.system.map_lookup_elem(m.fd, None)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return "Error: empty map\n"
        return f"Error: peek failed: {os.strerror(exc.errno)}\n"
    return _entry_plain(info, b"", value, m.system.num_possible_cpus)


# -- bpftool's JSON output (-j) -----------------------------------------------------------------

def hex_json(data: bytes) -> list[str]:
    """print_hex_data_json: each byte as "0x%02x"."""
    return [f"0x{byte:02x}" for byte in data]


def bpftool_show_json(m) -> dict:
    """`bpftool -j map show` of one map (without "pids", which depends on who holds it)."""
    info = m.info()
    out: dict = {"id": info.id, "type": type_name(info.type)}
    if info.name:
        out["name"] = info.name
    out.update(flags=info.map_flags, bytes_key=info.key_size, bytes_value=info.value_size,
               max_entries=info.max_entries)
    fdinfo = _fdinfo(m)  # none on the emulated backend: memlock and frozen are left out
    if "memlock" in fdinfo:
        out["bytes_memlock"] = int(fdinfo["memlock"])
    if "frozen" in fdinfo:
        out["frozen"] = int(fdinfo["frozen"])
    return out


def bpftool_dump_json(m) -> list[dict]:
    """`bpftool -j map dump`: one object per element (per-CPU: "values" by CPU)."""

    info = m.info()
    system, fd = m.system, m.fd
    step = round_up(info.value_size, 8)
    out, key = [], None
    while True:
        try:
            key = system.map_get_next_key(fd, key)
        except OSError:
            break
        try:
            value = system.map_lookup_elem(fd, key)
        except OSError as exc:
            if not (map_traits(info.type).fd_values and exc.errno == errno.ENOENT):
                out.append({"key": hex_json(key), "value": {"error": os.strerror(exc.errno)}})
            continue
        if map_traits(info.type).percpu:
            out.append({"key": hex_json(key), "values": [
                {"cpu": cpu, "value": hex_json(value[cpu * step:cpu * step + info.value_size])}
                for cpu in range(system.num_possible_cpus)]})
        else:
            out.append({"key": hex_json(key), "value": hex_json(value)})
    return out
