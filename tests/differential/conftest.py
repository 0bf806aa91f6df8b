"""Differential tests: the tally of what was compared, printed at the end of every run.

Each test adds the sequences and operations it compared (kernel vs emulated, or kernel vs
kernel for the harness's own check) to ``differential_tally``; the terminal summary prints the
totals, so CI output shows how much was compared, not just that tests passed.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from helpers import ENGINES

# (a, b, family) -> [sequences, ops, mismatching sequences]
_TALLY: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])


# Summary lines of the System-level fuzz (calls, input classes, disagreements), in run order.
_FUZZ_REPORTS: list[str] = []


class Tally:
    def fuzz_report(self, line: str) -> None:
        _FUZZ_REPORTS.append(line)

    def add(self, a: str, b: str, family: str, sequences: int, ops: int,
            mismatches: int) -> None:
        row = _TALLY[(a, b, family)]
        row[0] += sequences
        row[1] += ops
        row[2] += mismatches


@pytest.fixture(scope="session")
def differential_tally() -> Tally:
    return Tally()


@pytest.fixture(params=ENGINES)
def emulated_engine(request, emulated):
    """The emulated backend on each of its engines (``bpf_engine``: the tally names it)."""
    emulated.bpf_engine = request.param
    return emulated


@pytest.fixture(scope="session")
def lookup_programs_off() -> str | None:
    """Why program-side lookups cannot be compared here (None when both backends run them)."""
    from pybpf import system
    from pybpf.testing import kernel_available
    from pybpf.testing.differential import programs_supported

    if not kernel_available():
        return "bpf(2) is not allowed here"
    reasons = [f"{name}: {why}" for name in ("kernel", "emulated")
               if (why := programs_supported(system(name)))]
    return "; ".join(reasons) or None


def pytest_terminal_summary(terminalreporter) -> None:
    tr = terminalreporter
    if _FUZZ_REPORTS:
        tr.section("system fuzz: what was compared")
        for line in _FUZZ_REPORTS:
            tr.write_line(line)
    if not _TALLY:
        return
    tr.section("differential map tests: what was compared")
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for (a, b, family), (n, ops, bad) in sorted(_TALLY.items()):
        tr.write_line(f"{a} vs {b:<9} {family:<20} {n:>5} sequences {ops:>7} operations "
                      f"{bad:>3} mismatching")
        t = totals[(a, b)]
        t[0] += n
        t[1] += ops
        t[2] += bad
    for (a, b), (n, ops, bad) in sorted(totals.items()):
        tr.write_line(f"TOTAL {a} vs {b}: {n} sequences, {ops} operations compared, "
                      f"{bad} mismatching sequences")
