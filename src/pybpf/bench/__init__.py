"""Benchmarks: programs that print figures side by side with a reference.

``pybpf bench NAME``: each benchmark is one line in ``BENCHMARKS`` naming its
``*_command(parser) -> runner`` (the same shape as ``cli.COMMANDS``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..cli import add_commands

# name -> (help, "module:function")
BENCHMARKS: dict[str, tuple[str, str]] = {
    "cpumap": ("XDP redirect to another CPU: kthread Mpps and frames per skb at UDP with GRO "
               "on and off, on both backends, beside xdp-bench redirect-cpu",
               "pybpf.bench.cpumap:cpumap_command"),
    "sockmap": ("client <-> proxy <-> server on loopback: direct, user-space proxies, the "
                "kernel's sockmap (egress, ingress, RPS off and on) and the emulated one "
                "(unbound, target_cpu); Gbit/s and per-CPU busy time, beside iperf3",
                "pybpf.bench.sockmap:sockmap_command"),
    "htab-mem": ("hash map update throughput and memory: preallocated vs bpf_mem_alloc "
                 "(and, emulated, the old call_rcu design); the selftests' htab-mem",
                 "pybpf.bench.htab_mem:htab_mem_command"),
    "ops": ("per-operation cost of lookup, update, delete and batches through Map, the "
            "System call and bare ctypes, beside C libbpf and a dict",
            "pybpf.bench.ops:ops_command"),
    "interp": ("eBPF execution speed: the emulator's interpreter and JIT beside the "
               "kernel's BPF_PROG_TEST_RUN on loop-heavy programs",
               "pybpf.bench.interp:interp_command"),
}


def bench_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """``pybpf bench NAME ...``: one subcommand per benchmark."""
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    runners = add_commands(sub, BENCHMARKS)
    return lambda ns: runners[ns.benchmark](ns)
