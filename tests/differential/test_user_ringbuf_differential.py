"""USER_RINGBUF on the emulated backend against the kernel (6.18): random sequences of the
producer's calls (reserve of any size, submit and discard in any order, reserve_blocking on
a full ring with no time to wait) and of drains (any flags), run on both; every call's
errno, every sample's length and every drain's result (the samples taken, the first bytes
its callback read) must agree, on every emulated engine."""

from __future__ import annotations

import errno

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conformance.conftest import load_with_func_info
from helpers import ENGINES
from pybpf.asm import FP, R0, R1, R2, R3, R4, R5, R6
from pybpf.asm import builder as b
from pybpf.errors import BPFError
from pybpf.uapi import MapType

RING = 4096
STOP = 0xFF  # a sample starting with it stops the drain (its callback returns 1)

def drain_program(flags: int) -> list:
    """main: *fp-8 = 0; R0 = (bpf_user_ringbuf_drain(m, cb, fp-8, flags) << 16) + *fp-8. The
    callback adds each sample's first byte (bpf_dynptr_read of 1 byte; 0x80 when that fails,
    for an empty sample) to *ctx and returns 1 at a STOP byte."""
    return [b.st(8, FP, -8, 0), b.ld_map_fd(R1, "m"), b.ld_func(R2, "cb"), b.mov64(R3, FP),
            b.add64(R3, -8), b.mov64(R4, flags), b.call("user_ringbuf_drain"),
            b.lsh64(R0, 16), b.ldx(8, R1, FP, -8), b.add64(R0, R1), b.exit_(),
            b.label("cb"), b.mov64(R6, R2), b.mov64(R3, R1), b.st(8, FP, -8, 0),
            b.mov64(R1, FP), b.add64(R1, -8), b.mov64(R2, 1), b.mov64(R4, 0),
            b.mov64(R5, 0), b.call("dynptr_read"), b.ldx(1, R1, FP, -8), b.jeq(R0, 0, "add"),
            b.mov64(R1, 0x80), b.label("add"), b.ldx(8, R2, R6, 0), b.add64(R2, R1),
            b.stx(8, R6, 0, R2), b.mov64(R0, 0), b.jne(R1, STOP, "out"), b.mov64(R0, 1),
            b.label("out"), b.exit_()]


class Side:
    """One backend's user ring buffer, its producer, and a drain program per flags."""

    def __init__(self, system) -> None:
        self.system = system
        self.fd = system.map_create(MapType.USER_RINGBUF, 0, 0, RING)
        self.producer = system.user_ringbuf_producer(self.fd)
        self.programs: dict[int, int] = {}
        self.pending: list = []

    def drain(self, flags: int) -> tuple[int, int]:
        prog = self.programs.get(flags)
        if prog is None:
            prog = self.programs[flags] = load_with_func_info(
                self.system, drain_program(flags), maps={"m": self.fd})
        retval = self.system.prog_test_run(prog, bytes(64)).retval
        high = retval >> 16
        return (high - 0x10000 if high & 0x8000 else high), retval & 0xFFFF

    def apply(self, op: tuple) -> object:
        kind, arg, fill = op
        try:
            if kind == "reserve":
                sample = self.producer.reserve(arg)
                sample[:] = bytes([fill]) * arg
                self.pending.append(sample)
                return len(sample)
            if kind == "blocking":
                self.pending.append(self.producer.reserve_blocking(arg, 0))
                return "reserved"
            if kind in ("submit", "discard"):
                if not self.pending:
                    return "none"
                sample = self.pending.pop(arg % len(self.pending))
                getattr(self.producer, kind)(sample)
                return "ok"
            return self.drain(arg)
        except BPFError as exc:
            return errno.errorcode[exc.errno]

    def close(self) -> None:
        self.producer.close()
        for prog in self.programs.values():
            self.system.close(prog)
        self.system.close(self.fd)


SIZES = st.one_of(st.integers(0, 64), st.integers(0, RING), st.sampled_from(
    [RING - 8, RING - 7, 1 << 30, (1 << 30) - 1]))
OPS = st.one_of(
    st.tuples(st.just("reserve"), SIZES, st.sampled_from([1, 2, 3, 40, STOP])),
    st.tuples(st.just("blocking"), st.integers(0, 600), st.just(0)),
    st.tuples(st.sampled_from(["submit", "discard"]), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("drain"), st.sampled_from([0, 0, 1, 2, 3, 4]), st.just(0)),
)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, max_size=40))
# a reserved sample is the ring's memory: unwritten, it holds what an earlier record left there
# (here the drained 0xFF bytes, which stop the next drain's callback), not zeros
@example(ops=[("reserve", RING - 8, STOP), ("submit", 0, 0), ("drain", 0, 0),
              ("blocking", 122, 0), ("submit", 0, 0)])
def test_producer_and_drain_sequences_agree(kernel, emulated, engine, ops, differential_tally):
    emulated.bpf_engine = engine
    sides = Side(kernel), Side(emulated)
    try:
        outcomes = [[side.apply(op) for op in ops] for side in sides]
        outcomes = [[*out, side.drain(0)] for out, side in zip(outcomes, sides, strict=True)]
    finally:
        for side in sides:
            side.close()
    differential_tally.add("kernel", "emulated", "user_ringbuf: calls", 1, len(ops) + 1,
                           int(outcomes[0] != outcomes[1]))
    assert outcomes[0] == outcomes[1], ops
