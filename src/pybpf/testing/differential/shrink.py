"""Comparing two runs of a sequence: the first mismatch, shrinking it, the tally."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...system import System
from .ops import CloseSocket, Op, OpenSocket, OpSequence, Result, SetCpu
from .runner import Runner

__all__ = ["Mismatch", "Summary", "first_mismatch", "shrink"]


@dataclass
class Mismatch:
    """The first op of a sequence whose results differ between the two backends."""

    seq: OpSequence
    index: int
    a_name: str
    b_name: str
    a: Result
    b: Result

    def format(self, context: int = 12) -> str:
        op = self.seq.ops[self.index]
        handles = set(op.maps())
        lines = [f"MISMATCH in {self.seq.label} at op {self.index} of {len(self.seq.ops)}:"]
        earlier = [(i, o) for i, o in enumerate(self.seq.ops[:self.index])
                   if len(self.seq.ops) <= 2 * context or not handles
                   or set(o.maps()) & handles or isinstance(o, SetCpu | OpenSocket | CloseSocket)]
        if len(earlier) > context:
            lines.append(f"  ... {len(earlier) - context} earlier ops on these maps")
        for i, o in earlier[-context:]:
            lines.append(f"  [{i}] {_show(o, 400)}")
        lines.append(f"  [{self.index}] {_show(op, 400)}   <-- here")
        lines.append(f"    {self.a_name:>9}: {_show(self.a)}")
        lines.append(f"    {self.b_name:>9}: {_show(self.b)}")
        return "\n".join(lines)


def _show(thing: object, limit: int = 600) -> str:
    text = repr(thing)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def first_mismatch(seq: OpSequence, a: System, b: System, a_name: str = "A",
                   b_name: str = "B") -> tuple[Mismatch | None, int]:
    """Run ``seq`` on both; the first mismatch (or None) and the number of ops compared."""
    ra = Runner(a).run(seq)
    rb = Runner(b).run(seq)
    for i, (x, y) in enumerate(zip(ra, rb, strict=True)):
        if x != y:
            return Mismatch(seq, i, a_name, b_name, x, y), i + 1
    return None, len(ra)


def _signature(m: Mismatch) -> tuple:
    """What makes two mismatches the same finding: the kind of op and of both results
    (ok, or which errno), not the exact bytes."""
    def kind(r: Result) -> tuple:
        return r[:2] if r[0] in ("err", "crash") else r[:1]

    return type(m.seq.ops[m.index]), kind(m.a), kind(m.b)


def shrink(mismatch: Mismatch, a: System, b: System, budget: int = 400) -> Mismatch:
    """A shorter sequence with the same mismatch (same op kind, same kinds of results): drop
    ops greedily, halves first, then smaller chunks, down to single ops."""
    best = mismatch
    ops = list(mismatch.seq.ops[:mismatch.index + 1])
    tries = 0
    want = _signature(mismatch)

    def attempt(candidate: list[Op]) -> Mismatch | None:
        nonlocal tries
        tries += 1
        seq = replace(mismatch.seq, ops=candidate, label=mismatch.seq.label + " (shrunk)")
        found, _ = first_mismatch(seq, a, b, mismatch.a_name, mismatch.b_name)
        return found if found is not None and _signature(found) == want else None

    chunk = max(1, len(ops) // 2)
    while chunk >= 1 and tries < budget:
        i = 0
        changed = False
        while i < len(ops) and tries < budget:
            candidate = ops[:i] + ops[i + chunk:]
            found = attempt(candidate) if candidate else None
            if found is not None:
                ops = candidate[:found.index + 1]
                best = found
                changed = True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return best


@dataclass
class Summary:
    sequences: int = 0
    ops: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    per_family: dict[str, list[int]] = field(default_factory=dict)
    programs_off: str | None = None  # why program-side lookups were left out, if they were

    def add(self, family: str, found: Mismatch | None, ops: int) -> None:
        self.sequences += 1
        self.ops += ops
        fam = self.per_family.setdefault(family, [0, 0, 0])
        fam[0] += 1
        fam[1] += ops
        if found is not None:
            fam[2] += 1
            self.mismatches.append(found)

    def report(self, a_name: str, b_name: str) -> str:
        lines = [f"differential {a_name} vs {b_name}: compared {self.sequences} sequences, "
                 f"{self.ops} operations, {len(self.mismatches)} mismatching sequences"]
        for fam, (n, ops, bad) in sorted(self.per_family.items()):
            lines.append(f"  {fam:<14} {n:>5} sequences {ops:>7} ops {bad:>4} mismatches")
        if self.programs_off:
            lines.append(f"  program-side lookups left out: {self.programs_off}")
        return "\n".join(lines)
