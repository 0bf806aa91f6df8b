"""Comparing every family on two Systems, and the ``pybpf differential`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

from ...commands import Progress, int_arg
from ...system import System
from .generators import GENERATORS, generate
from .runner import programs_supported
from .shrink import Summary, first_mismatch, shrink

__all__ = ["compare"]


def compare(families: Iterable[str], sequences: int, seed: int, a: System, b: System,
            a_name: str = "A", b_name: str = "B", *, shrink_budget: int = 0,
            shrink_first: int = 1 << 30, programs_off: str | None | bool = True,
            progress: Callable[[str], None] | None = None) -> Summary:
    """Run ``sequences`` generated sequences of each family on ``a`` and ``b``.

    ``shrink_budget`` re-runs are spent shrinking each of the first ``shrink_first``
    mismatches. ``programs_off``: why program-side lookups are left out (None: they are
    included); the default, True, probes both backends for it."""
    if a.num_possible_cpus != b.num_possible_cpus:
        raise ValueError(f"the backends disagree on the CPU count ({a.num_possible_cpus} vs "
                         f"{b.num_possible_cpus}); give the emulated one cpus= to match")
    summary = Summary()
    if programs_off is True:
        programs_off = "; ".join(f"{name}: {why}" for name, why in (
            (a_name, programs_supported(a)), (b_name, programs_supported(b))) if why) or None
    summary.programs_off = programs_off
    for family in families:
        for i in range(sequences):
            seq = generate(family, seed, i, a.num_possible_cpus, programs=not programs_off)
            found, nops = first_mismatch(seq, a, b, a_name, b_name)
            if found is not None and shrink_budget and len(summary.mismatches) < shrink_first:
                found = shrink(found, a, b, shrink_budget)
            summary.add(family, found, nops)
        if progress is not None:
            fam = summary.per_family[family]
            progress(f"{family}: {fam[0]} sequences, {fam[1]} ops, {fam[2]} mismatches")
    return summary


MAX_SEQUENCES = 10**6  # per family: hours of work at most


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``pybpf differential``'s arguments."""
    parser.add_argument("--sequences", type=int_arg("--sequences", 1, MAX_SEQUENCES),
                        default=20, help="sequences per family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", action="append", choices=sorted(GENERATORS),
                        help="map family to test (repeatable; default: all)")
    parser.add_argument("--a", default="kernel", choices=["kernel", "emulated"])
    parser.add_argument("--b", default="emulated", choices=["kernel", "emulated"])
    parser.add_argument("--shrink", type=int_arg("--shrink", 0, MAX_SEQUENCES), default=200,
                        metavar="TRIES",
                        help="re-runs spent shrinking each mismatch (0: report as found)")
    parser.add_argument("--fuzz", type=int_arg("--fuzz", 1, MAX_SEQUENCES), metavar="N",
                        help="instead of the map families: N sequences of random System "
                             "calls, bad arguments included (the System-level fuzz)")
    parser.add_argument("--calls", type=int_arg("--calls", 1, 10_000), default=40,
                        help="calls per --fuzz sequence")


def run(args: argparse.Namespace) -> int:
    """``pybpf differential``: exit 1 on a mismatch (or when a backend cannot run here)."""
    from ...backends import system

    try:
        a, b = system(args.a), system(args.b)
    except OSError as exc:  # bpf(2) not allowed here: nothing to compare against
        print(f"Error: cannot compare {args.a} with {args.b}: {exc}", file=sys.stderr)
        return 1
    if args.fuzz:
        return run_fuzz(args, a, b)
    families = args.family or list(GENERATORS)
    with Progress("differential families", len(families)) as heartbeat:
        def done(line: str) -> None:
            print(line, flush=True)
            heartbeat.advance()

        summary = compare(families, args.sequences, args.seed, a, b, args.a, args.b,
                          shrink_budget=args.shrink, progress=done)
    for m in summary.mismatches:
        print(m.format())
        print()
    print(summary.report(args.a, args.b))
    return 1 if summary.mismatches else 0


def run_fuzz(args: argparse.Namespace, a: System, b: System) -> int:
    """``pybpf differential --fuzz N``: exit 1 on a disagreement outside the allow-list, a
    crash, a hang or a runaway allocation."""
    from .fuzz import fuzz

    if a.num_possible_cpus != b.num_possible_cpus:
        print(f"Error: {args.a} has {a.num_possible_cpus} CPUs, {args.b} "
              f"{b.num_possible_cpus}: nothing to compare", file=sys.stderr)
        return 1
    summary = fuzz(a, b, args.seed, args.fuzz, args.calls, args.a, args.b,
                   progress=lambda line: print(line, flush=True))
    print(summary.report(args.a, args.b))
    return 0 if summary.ok else 1
