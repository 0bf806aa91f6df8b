"""Helpers that call back into the program (bpf_loop), on the kernel and on both engines of
the emulated backend: the same results, and the same errno (with the emulated message in the
kernel's log) when the verifier refuses. Callbacks need func_info, so every program here is
loaded with BTF: main (global), callbacks (static unless a case says otherwise)."""

from __future__ import annotations

import errno
import struct
from collections.abc import Sequence

import pytest

from pybpf.asm import FP, R0, R1, R2, R3, R4, R5, R6, assemble, encode
from pybpf.asm import builder as b
from pybpf.btf import BTF_FUNC_GLOBAL, BTF_FUNC_STATIC, Btf, Func, FuncProto, Int, Param
from pybpf.errors import VerifierError
from pybpf.uapi import MapType, ProgType

U32 = 0xFFFF_FFFF
ETH_FRAME = bytes.fromhex("ffffffffffff" "020000000001" "0800") + bytes(range(50))
LONG, MAIN_PROTO, CB_PROTO = 1, 2, 3
BTF_TYPES = [Int("long", 8, 1, 0, 64), FuncProto("", LONG, (Param("ctx", LONG),)),
             FuncProto("", LONG, (Param("index", LONG), Param("ctx", LONG)))]


@pytest.fixture(params=["kernel", "emulated-jit", "emulated-interp"])
def sys(request):
    """Each backend, the emulated one on each of its engines."""
    if request.param == "kernel":
        return request.getfixturevalue("kernel")
    system = request.getfixturevalue("emulated")
    system.bpf_engine = request.param.split("-")[1]
    return system


def load(sys, items: Sequence, callbacks: dict[str, int] | None = None, maps=None,
         func_info: bool = True) -> int:
    """Load ``items`` as a SCHED_CLS program whose subprograms at the labels of
    ``callbacks`` have the BTF linkage given there (each other label is a plain label)."""
    callbacks = {"cb": BTF_FUNC_STATIC} if callbacks is None else callbacks
    assembly = assemble(items)
    insns = assembly.with_map_fds(lambda name: maps[name])
    funcs = [Func("main", MAIN_PROTO, BTF_FUNC_GLOBAL)]
    funcs += [Func(name, CB_PROTO, linkage) for name, linkage in callbacks.items()]
    btf_fd = sys.btf_load(Btf(BTF_TYPES + funcs).to_bytes())
    starts = [0] + [assembly.labels[name] for name in callbacks]
    records = sorted(zip(starts, range(len(BTF_TYPES) + 1, len(BTF_TYPES) + 1 + len(funcs)),
                         strict=True))
    info = b"".join(struct.pack("<II", start, type_id) for start, type_id in records)
    try:
        return sys.prog_load(ProgType.SCHED_CLS, encode(insns), prog_btf_fd=btf_fd,
                             func_info=info if func_info else b"")
    finally:
        sys.close(btf_fd)


def run(sys, items: Sequence, **kw) -> int:
    fd = load(sys, items, **kw)
    try:
        return sys.prog_test_run(fd, ETH_FRAME).retval
    finally:
        sys.close(fd)


def refusal(sys, items: Sequence, **kw) -> tuple[int, str]:
    """The errno and log of the verifier's refusal of ``items``."""
    with pytest.raises(VerifierError) as info:
        load(sys, items, **kw)
    return info.value.errno, info.value.log


def loop(nr_loops: int, flags: int = 0, ctx: Sequence = (b.mov64(R3, FP), b.add64(R3, -8)),
         callback: str = "cb") -> list:
    """bpf_loop(nr_loops, callback, ctx (default: fp-8), flags), R0 its result."""
    nr = b.lddw(R1, nr_loops) if nr_loops >> 31 else b.mov64(R1, nr_loops)
    return [nr, b.ld_func(R2, callback), *ctx, b.mov64(R4, flags), b.call("loop")]


def summing(stop: int = -1, ret: int = 1) -> list:
    """The callback: *ctx += index; returns ``ret`` at index ``stop``, else 0."""
    return [b.label("cb"), b.ldx(8, R3, R2, 0), b.add64(R3, R1), b.stx(8, R2, 0, R3),
            b.mov64(R0, 0), b.jne(R1, stop, "out"), b.mov64(R0, ret), b.label("out"), b.exit_()]


def sum_and_count(nr_loops: int, flags: int = 0, stop: int = -1) -> list:
    """main: *fp-8 = 0; R0 = bpf_loop(...) + 100 * (the sum the callback made)."""
    return [b.st(8, FP, -8, 0), *loop(nr_loops, flags), b.ldx(8, R1, FP, -8), b.mul64(R1, 100),
            b.add64(R0, R1), b.exit_(), *summing(stop)]


# -- bpf_loop: results -----------------------------------------------------------------------
@pytest.mark.parametrize("label,nr_loops,flags,stop,expected", [
    ("five calls", 5, 0, -1, 100 * (0 + 1 + 2 + 3 + 4) + 5),
    ("no call", 0, 0, -1, 0),
    ("stop at index 0", 5, 0, 0, 1),
    ("stop at index 3", 10, 0, 3, 100 * (0 + 1 + 2 + 3) + 4),
    ("flags are reserved", 5, 1, -1, -errno.EINVAL & U32),
    ("over BPF_MAX_LOOPS", (1 << 23) + 1, 0, -1, -errno.E2BIG & U32),
    ("nr_loops is compared in 64 bits", (1 << 32) + 3, 0, -1, -errno.E2BIG & U32),
])
def test_bpf_loop_calls_back_until_the_callback_stops(sys, label, nr_loops, flags, stop,
                                                      expected):
    assert run(sys, sum_and_count(nr_loops, flags, stop)) == expected, label


def test_bpf_loop_with_a_null_context(sys):
    items = [*loop(7, ctx=[b.mov64(R3, 0)]), b.exit_(),
             b.label("cb"), b.mov64(R0, 0), b.exit_()]
    assert run(sys, items) == 7


def test_bpf_loop_callback_updates_a_map(sys):
    """The callback calls a helper from its own frame: m[i] = i * i for i < 6."""
    fd = sys.map_create(MapType.ARRAY, 4, 8, 8)
    try:
        items = [*loop(6, ctx=[b.mov64(R3, 0)]), b.exit_(),
                 b.label("cb"), b.stx(4, FP, -4, R1), b.mul64(R1, R1), b.stx(8, FP, -16, R1),
                 b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4), b.mov64(R3, FP),
                 b.add64(R3, -16), b.mov64(R4, 0), b.call("map_update_elem"),
                 b.mov64(R0, 0), b.exit_()]
        assert run(sys, items, maps={"m": fd}) == 6
        values = [int.from_bytes(sys.map_lookup_elem(fd, i.to_bytes(4, "little")), "little")
                  for i in range(8)]
        assert values == [0, 1, 4, 9, 16, 25, 0, 0]
    finally:
        sys.close(fd)


def test_nested_bpf_loop(sys):
    """The callback calls bpf_loop itself: 4 outer x 3 inner calls of the inner callback,
    each adding 1 to the counter the main program passed down."""
    items = [b.st(8, FP, -8, 0), *loop(4, callback="outer"), b.ldx(8, R0, FP, -8), b.exit_(),
             b.label("outer"), b.mov64(R3, R2), *loop(3, ctx=[], callback="inner")[:2],
             b.mov64(R4, 0), b.call("loop"), b.mov64(R0, 0), b.exit_(),
             b.label("inner"), b.ldx(8, R3, R2, 0), b.add64(R3, 1), b.stx(8, R2, 0, R3),
             b.mov64(R0, 0), b.exit_()]
    callbacks = {"outer": BTF_FUNC_STATIC, "inner": BTF_FUNC_STATIC}
    assert run(sys, items, callbacks=callbacks) == 12


# -- bpf_loop: the verifier's refusals ---------------------------------------------------------
def _with_map_return() -> list:
    return [b.st(8, FP, -8, 0), *loop(2), b.exit_(), b.label("cb"), b.ld_map_fd(R0, "m"),
            b.exit_()]


REFUSALS = [
    ("callbacks need func_info", sum_and_count(3), dict(func_info=False), errno.EINVAL,
     "missing btf func_info"),
    ("a global callback", sum_and_count(3), dict(callbacks={"cb": BTF_FUNC_GLOBAL}),
     errno.EINVAL, "callback function not static"),
    ("callback_fn a scalar", [b.ld_func(R5, "cb"), b.mov64(R1, 2), b.mov64(R2, 0),
                              b.mov64(R3, 0), b.mov64(R4, 0), b.call("loop"), b.exit_(),
                              *summing()], {}, errno.EACCES, "R2 type=scalar expected=func"),
    ("callback_ctx the context", [b.mov64(R6, R1), *loop(2, ctx=[b.mov64(R3, R6)]), b.exit_(),
                                  *summing()], {},
     errno.EACCES, "R3 type=ctx expected=fp"),
    ("callback returns 2", [b.st(8, FP, -8, 0), *loop(2), b.exit_(), *summing(0, ret=2)], {},
     errno.EINVAL, "At callback return the register R0 has smin=2 smax=2 should have been "
     "in [0, 1]"),
    ("callback returns a map", _with_map_return(), dict(maps="array"), errno.EACCES,
     "R0 not a scalar value"),
    ("callback reads R3", [*loop(2, ctx=[b.mov64(R3, 0)]), b.exit_(), b.label("cb"),
                           b.mov64(R0, R3), b.exit_()], {}, errno.EACCES, "R3 !read_ok"),
    ("main reads R6 the callback set", [b.mov64(R6, 1), *loop(2, ctx=[b.mov64(R3, 0)]),
                                        b.exit_(), b.label("cb"), b.mov64(R0, 0), b.exit_()],
     {}, None, None),
]


@pytest.mark.parametrize("label,items,kw,expected,message", REFUSALS,
                         ids=[case[0] for case in REFUSALS])
def test_bpf_loop_refusals(sys, label, items, kw, expected, message):
    maps = {}
    if kw.get("maps") == "array":
        maps = {"m": sys.map_create(MapType.ARRAY, 4, 8, 1)}
        kw = dict(kw, maps=maps)
    try:
        if expected is None:
            assert run(sys, items, **kw) == 2, label
            return
        err, log = refusal(sys, items, **kw)
        assert (err, message in log) == (expected, True), (label, log)
    finally:
        for fd in maps.values():
            sys.close(fd)
