"""The System-level differential fuzz (issue 9): seeded random calls over the whole public
contract, bad arguments included, on the kernel and the emulated backend, call by call.

The kernel is the oracle: every errno (and, on success, every comparable byte) must agree,
but for the deliberate differences of ``fuzz.ALLOWED`` (each one stated in
docs/emulated-differences.md). On either backend no call may raise anything but
BPFError/TypeError/ValueError, hang or grow the process without bound. The emulated backend is
fuzzed against itself where bpf(2) is not allowed (its crashes, hangs and runaway memory).
The session summary prints each run's figures.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from pybpf.testing.differential import fuzz as f
from pybpf.testing.differential.fuzz_calls import FuzzGen

SEEDS = (9, 10, 11)
SEQUENCES = 400  # per seed, CALLS calls each: ~70k calls, about 15 s on a 2-CPU machine
CALLS = 60


@pytest.fixture
def bpffs(kernel):
    """The kernel's pins go to the bpffs at /sys/fs/bpf: mounted here if it is not yet."""
    if not os.path.ismount(f.BPFFS):
        mounted = subprocess.run(["mount", "-t", "bpf", "bpf", f.BPFFS], capture_output=True)
        if mounted.returncode:
            pytest.skip(f"bpffs is not mounted at {f.BPFFS} and mount -t bpf failed: "
                        f"{mounted.stderr.decode().strip()}")


def _check(summary: f.FuzzSummary, a: str, b: str, differential_tally) -> None:
    report = summary.report(a, b)
    differential_tally.fuzz_report(report.splitlines()[0])
    differential_tally.add(a, b, "system_fuzz", summary.sequences, summary.calls,
                           len(summary.disagreements))
    if not summary.ok:
        pytest.fail(report, pytrace=False)


@pytest.mark.kernel
@pytest.mark.parametrize("seed", SEEDS)
def test_random_calls_give_the_kernels_errnos(seed, kernel, emulated, bpffs,
                                              differential_tally):
    summary = f.fuzz(kernel, emulated, seed, SEQUENCES, CALLS)
    assert summary.calls > SEQUENCES * CALLS // 2  # (an allowed one-sided success ends one)
    assert len(summary.classes) > 1000  # the inputs really vary
    _check(summary, "kernel", "emulated", differential_tally)


@pytest.mark.kernel
def test_harness_two_kernel_runs_agree(kernel, bpffs, differential_tally):
    """The harness's own check: calls are data and the kernel answers them alike twice (so
    a kernel-vs-emulated disagreement is never the harness's noise: fds, ids, pin paths)."""
    summary = f.fuzz(kernel, type(kernel)(), SEEDS[0], 100, CALLS, "kernel", "kernel")
    assert not summary.allowed
    _check(summary, "kernel", "kernel", differential_tally)


def test_emulated_runs_agree_and_never_crash_hang_or_run_away(emulated, differential_tally):
    """Without bpf(2) too: two emulated systems answer alike, and no call escapes as another
    exception, takes seconds (counts like 2**32-1) or allocates what no map needs."""
    other = type(emulated)(cpus=emulated.num_possible_cpus)
    summary = f.fuzz(emulated, other, SEEDS[0], 200, CALLS, "emulated", "emulated")
    _check(summary, "emulated", "emulated", differential_tally)


def test_calls_are_the_same_for_the_same_seed():
    def labels(seed: int) -> list[str]:
        return [c.label for c in FuzzGen(seed, 3, 2).sequence(CALLS)]

    assert labels(7) == labels(7)
    assert labels(7) != labels(8)


class _Broken:
    """A System answering as the one it wraps but for one command, which misbehaves."""

    def __init__(self, inner, command: str, behaviour) -> None:
        self._inner = inner
        self._command = command
        self._behaviour = behaviour

    def __getattr__(self, name):
        if name == self._command:
            return self._behaviour
        return getattr(self._inner, name)


def _raise_runtime_error(*args, **kwargs):
    raise RuntimeError("a traceback, not an errno")


def test_an_exception_other_than_bpf_type_or_value_error_is_a_failure(emulated):
    broken = _Broken(emulated, "map_get_info", _raise_runtime_error)
    summary = f.fuzz(type(emulated)(cpus=emulated.num_possible_cpus), broken, 1, 30, CALLS,
                     "emulated", "broken")
    assert any("broken: map_get_info" in line and "RuntimeError" in line
               for line in summary.failures), summary.report("emulated", "broken")


def test_a_slow_call_is_a_failure(emulated):
    def slow_freeze(*args, **kwargs):
        time.sleep(0.02)
        return emulated.map_freeze(*args, **kwargs)

    broken = _Broken(emulated, "map_freeze", slow_freeze)
    summary = f.fuzz(type(emulated)(cpus=emulated.num_possible_cpus), broken, 1, 30, CALLS,
                     "emulated", "broken", call_seconds=0.01)
    assert any("broken: map_freeze" in line and " took " in line for line in summary.failures)


def test_a_different_errno_is_a_disagreement_and_ends_its_sequence(emulated):
    def eperm_lookup(*args, **kwargs):
        from pybpf.errors import bpf_error
        raise bpf_error(1, "map_lookup_elem")

    broken = _Broken(emulated, "map_lookup_elem", eperm_lookup)
    summary = f.fuzz(type(emulated)(cpus=emulated.num_possible_cpus), broken, 1, 30, CALLS,
                     "emulated", "broken")
    assert summary.disagreements and not summary.ok
    assert all(d.label.startswith("map_lookup_elem") and d.b == ("err", "EPERM")
               for d in summary.disagreements.values())


def test_every_allowed_difference_is_stated_in_the_docs():
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2].joinpath("docs", "emulated-differences.md")
    words = " ".join(doc.read_text().split())
    for reason in set(f.ALLOWED.values()):
        assert reason in words, f"docs/emulated-differences.md does not state: {reason}"


def test_the_fuzz_knows_which_map_types_the_emulated_backend_has():
    """EMULATED_MAP_TYPES (what the "refused there" rule leaves out) is bpf_types.MAP_OPS: a
    map type the emulated backend gains is compared with the kernel's from then on."""
    from pybpf.emulated.bpf_types import MAP_OPS
    assert f.EMULATED_MAP_TYPES == set(MAP_OPS)
