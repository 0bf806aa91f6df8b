"""Helpers that call back into the program (bpf_loop), on the kernel and on both engines of
the emulated backend: the same results, and the same errno (with the emulated message in the
kernel's log) when the verifier refuses. Callbacks need func_info, so every program here is
loaded with BTF: main (global), callbacks (static unless a case says otherwise)."""

from __future__ import annotations

import errno
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybpf.asm import FP, R0, R1, R2, R3, R4, R5, R6, R7
from pybpf.asm import builder as b
from pybpf.btf import BTF_FUNC_GLOBAL, BTF_FUNC_STATIC
from pybpf.errors import VerifierError
from pybpf.uapi import ENOTSUPP, MapFlags, MapType

from .conftest import load_with_func_info as load

U32 = 0xFFFF_FFFF
ETH_FRAME = bytes.fromhex("ffffffffffff" "020000000001" "0800") + bytes(range(50))
def run(sys, items: Sequence, **kw) -> int:
    fd = load(sys, items, **kw)
    try:
        return sys.prog_test_run(fd, ETH_FRAME).retval
    finally:
        sys.close(fd)


def refusal(sys, items: Sequence, **kw) -> tuple[int, str]:
    """The errno and log of the verifier's refusal of ``items`` (the message where the
    refusal has no log: an errno other than EACCES and EINVAL)."""
    with pytest.raises(OSError) as info:
        load(sys, items, **kw)
    if isinstance(info.value, VerifierError):
        return info.value.errno, info.value.log
    return info.value.errno, str(info.value)


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


@pytest.mark.parametrize("nr_loops, expected", [
    (3, 100 * (0 + 1 + 2) + 3),
    ((1 << 32) + 3, 100 * (0 + 1 + 2) + 3),  # the helper's nr_loops is a u32
    ((1 << 23) + 1, -errno.E2BIG & U32),
])
def test_bpf_loop_called_with_flags_the_verifier_does_not_know_is_the_helper(sys, nr_loops,
                                                                            expected):
    """flags 0 at run time but not known to be 0 (ktime >> 63): the verifier cannot inline
    the loop (update_loop_inline_state), so the helper runs it, nr_loops truncated to 32
    bits; with a known 0 the inlined loop compares all 64 (the case above)."""
    items = [b.st(8, FP, -8, 0), b.call("ktime_get_ns"), b.mov64(R6, R0), b.rsh64(R6, 63),
             *loop(nr_loops)[:-2], b.mov64(R4, R6), b.call("loop"), b.ldx(8, R1, FP, -8),
             b.mul64(R1, 100), b.add64(R0, R1), b.exit_(), *summing()]
    assert run(sys, items) == expected


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


# -- bpf_for_each_map_elem -------------------------------------------------------------------
PERCPU = {MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH, MapType.PERCPU_ARRAY}
ARRAYS = {MapType.ARRAY, MapType.PERCPU_ARRAY}
FOR_EACH_MAPS = [MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH,
                 MapType.ARRAY, MapType.PERCPU_ARRAY]


def filled(sys, map_type: int, max_entries: int = 8) -> int:
    """A map of u32 keys 1..5 holding u64 key * 10 (on every CPU, for a per-CPU map)."""
    fd = sys.map_create(map_type, 4, 8, max_entries)
    copies = sys.num_possible_cpus if map_type in PERCPU else 1
    for key in range(1, 6):
        sys.map_update_elem(fd, key.to_bytes(4, "little"), (key * 10).to_bytes(8, "little")
                            * copies)
    return fd


def summing_elements() -> list:
    """The callback: ctx[0] += key + 1000 * value, ctx[1] += 1, value += 1; returns 0. (No
    branch on what it counts: the kernel's verifier would walk every count to its limit.)"""
    return [b.label("cb"), b.ldx(4, R5, R2, 0), b.ldx(8, R0, R3, 0), b.mov64(R6, R0),
            b.add64(R6, 1), b.stx(8, R3, 0, R6), b.mul64(R0, 1000), b.add64(R0, R5),
            b.ldx(8, R5, R4, 0), b.add64(R5, R0), b.stx(8, R4, 0, R5),
            b.ldx(8, R5, R4, 8), b.add64(R5, 1), b.stx(8, R4, 8, R5), b.mov64(R0, 0),
            b.exit_()]


def for_each(callback: list, flags: int = 0) -> list:
    """main: ctx = {sum, seen} = {0, 0} at fp-16; R0 = bpf_for_each_map_elem(m, cb, &ctx,
    flags) + 100 * seen + 10000 * sum (under 2^32 for the maps here: a test run's retval is
    32 bits)."""
    return [b.st(8, FP, -8, 0), b.st(8, FP, -16, 0), b.ld_map_fd(R1, "m"), b.ld_func(R2, "cb"),
            b.mov64(R3, FP), b.add64(R3, -16), b.mov64(R4, flags),
            b.call("for_each_map_elem"), b.ldx(8, R1, FP, -8), b.mul64(R1, 100),
            b.add64(R0, R1), b.ldx(8, R1, FP, -16), b.mul64(R1, 10000), b.add64(R0, R1),
            b.exit_(),
            *callback]


def stopping_at_key(key: int) -> list:
    """The callback: ctx[1] += 1; returns 1 at ``key``, else 0."""
    return [b.label("cb"), b.ldx(8, R5, R4, 8), b.add64(R5, 1), b.stx(8, R4, 8, R5),
            b.ldx(4, R5, R2, 0), b.mov64(R0, 0), b.jne(R5, key, "out"), b.mov64(R0, 1),
            b.label("out"), b.exit_()]


@pytest.mark.parametrize("map_type", FOR_EACH_MAPS, ids=[t.name for t in FOR_EACH_MAPS])
def test_for_each_map_elem_visits_every_element(sys, map_type):
    """The callback sees each element once (key, value, ctx), may write the value; the
    helper returns the number of elements."""
    fd = filled(sys, map_type)
    try:
        elements = 8 if map_type in ARRAYS else 5
        keys = range(8) if map_type in ARRAYS else range(1, 6)
        total = sum(key + 1000 * (key * 10 if 1 <= key <= 5 else 0) for key in keys)
        retval = run(sys, for_each(summing_elements()), maps={"m": fd})
        assert retval == elements + 100 * elements + 10000 * total
        copies = sys.num_possible_cpus if map_type in PERCPU else 1
        value = sys.map_lookup_elem(fd, (3).to_bytes(4, "little"))
        per_cpu = [int.from_bytes(value[8 * i:8 * i + 8], "little") for i in range(copies)]
        assert sorted(per_cpu)[-1] == 31  # incremented once, on the CPU the program ran on
    finally:
        sys.close(fd)


@pytest.mark.parametrize("map_type,key,expected", [
    (MapType.ARRAY, 3, 4),  # indices 0..3
    (MapType.HASH, 3, None),  # bucket order: the same on both (a zero seed)
    (MapType.ARRAY, 99, 8),  # never: every element
])
def test_for_each_map_elem_stops_when_the_callback_returns_1(sys, map_type, key, expected):
    fd = sys.map_create(map_type, 4, 8, 8, map_flags=0 if map_type in ARRAYS else
                        MapFlags.ZERO_SEED)
    try:
        for k in range(1, 6):
            sys.map_update_elem(fd, k.to_bytes(4, "little"), bytes(8))
        order = []
        k = None
        while map_type not in ARRAYS:
            try:
                k = sys.map_get_next_key(fd, k)
            except OSError:
                break
            order.append(int.from_bytes(k, "little"))
        expected = expected if expected is not None else order.index(key) + 1
        assert run(sys, for_each(stopping_at_key(key)), maps={"m": fd}) == expected * 101
    finally:
        sys.close(fd)


def test_for_each_map_elem_flags_are_reserved(sys):
    fd = filled(sys, MapType.HASH)
    try:
        assert run(sys, for_each(summing_elements(), flags=1), maps={"m": fd}) == \
            -errno.EINVAL & U32
    finally:
        sys.close(fd)


FOR_EACH_REFUSALS = [
    ("an LPM trie has no for_each", MapType.LPM_TRIE, summing_elements(), ENOTSUPP, ""),
    ("a queue has no for_each", MapType.QUEUE, summing_elements(), ENOTSUPP, ""),
    ("the key is read-only", MapType.HASH, [b.label("cb"), b.st(4, R2, 0, 1), b.mov64(R0, 0),
                                            b.exit_()], errno.EACCES,
     "write to change key R2 not allowed"),
    ("a read past the key", MapType.HASH, [b.label("cb"), b.ldx(4, R0, R2, 4), b.mov64(R0, 0),
                                           b.exit_()], errno.EACCES,
     "invalid access to map key, key_size=4 off=4 size=4"),
    ("a helper writes the key", MapType.HASH,  # check_helper_mem_access, PTR_TO_MAP_KEY
     [b.label("cb"), b.mov64(R1, R2), b.mov64(R2, 4), b.mov64(R3, 0),
      b.call("probe_read_user"), b.mov64(R0, 0), b.exit_()], errno.EACCES,
     "R1 cannot write into map_key"),
    ("a helper reads past the key", MapType.HASH,
     [b.label("cb"), b.mov64(R1, R2), b.mov64(R2, 8), b.call("trace_printk"), b.mov64(R0, 0),
      b.exit_()], errno.EACCES, "invalid access to map key, key_size=4 off=0 size=8"),
    ("R5 is not an argument", MapType.ARRAY, [b.label("cb"), b.mov64(R0, R5), b.exit_()],
     errno.EACCES, "R5 !read_ok"),
]


@pytest.mark.parametrize("label,map_type,callback,expected,message", FOR_EACH_REFUSALS,
                         ids=[case[0] for case in FOR_EACH_REFUSALS])
def test_for_each_map_elem_refusals(sys, label, map_type, callback, expected, message):
    if map_type == MapType.LPM_TRIE:
        fd = sys.map_create(map_type, 8, 8, 8, map_flags=MapFlags.NO_PREALLOC)
    elif map_type == MapType.QUEUE:
        fd = sys.map_create(map_type, 0, 8, 8)
    else:
        fd = sys.map_create(map_type, 4, 8, 8)
    try:
        err, log = refusal(sys, for_each(callback), maps={"m": fd})
        assert (err, message in log) == (expected, True), (label, log)
    finally:
        sys.close(fd)


@pytest.mark.parametrize("nr_loops,expected", [(3, 3), (4, errno.EACCES)])
def test_bpf_loop_callback_is_verified_as_often_as_a_known_nr_loops(sys, nr_loops, expected):
    """The callback writes ctx[i] for its i-th call (ctx: 3 u64 at fp-24): 3 calls stay in
    the stack; a 4th would write at fp+0, and the verifier walks it only when nr_loops says
    there is one."""
    items = [b.st(8, FP, -24, 0), *loop(nr_loops, ctx=[b.mov64(R3, FP), b.add64(R3, -24)]),
             b.ldx(8, R0, FP, -24), b.exit_(),
             b.label("cb"), b.ldx(8, R3, R2, 0), b.mov64(R4, R3), b.lsh64(R4, 3),
             b.mov64(R5, R2), b.add64(R5, R4), b.st(8, R5, 0, 7), b.add64(R3, 1),
             b.stx(8, R2, 0, R3), b.mov64(R0, 0), b.exit_()]
    if expected == errno.EACCES:
        assert refusal(sys, items)[0] == expected
    else:
        assert run(sys, items) == expected


def test_bpf_loop_runs_past_the_emulators_instruction_budget(sys):
    """200000 calls of a callback that runs 6 instructions: more than the emulated run's
    budget (1M), which bounds each call of the callback, not all of them together."""
    nr_loops = 200_000
    expected = (100 * sum(range(nr_loops)) + nr_loops) & U32
    assert run(sys, sum_and_count(nr_loops)) == expected


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow,
                                                  HealthCheck.function_scoped_fixture])
@given(nr_loops=st.integers(0, 40), stop=st.integers(-1, 45))
def test_bpf_loop_result_for_any_count_and_stop(sys, nr_loops, stop):
    """bpf_loop returns the calls made: nr_loops, or stop + 1 when the callback stopped at
    index stop; the callback saw indexes 0 up to there."""
    calls = stop + 1 if 0 <= stop < nr_loops else nr_loops
    assert run(sys, sum_and_count(nr_loops, stop=stop)) == 100 * sum(range(calls)) + calls


@pytest.mark.parametrize("func_info", [True, False])
@pytest.mark.parametrize("where", ["main", "subprog"])
def test_ld_abs_beside_bpf_to_bpf_calls(sys, where, func_info):
    """LD_ABS may sit beside bpf-to-bpf calls: in the main program always; in a subprogram
    only with func_info (check_abnormal_return: EINVAL without BTF), whose BTF says it
    returns an int (a long here)."""
    if where == "main":  # the byte at 13 and the subprogram's 40
        items = [b.mov64(R6, R1), b.ld_abs(1, 13), b.mov64(R7, R0), b.call_local("cb"),
                 b.add64(R0, R7), b.exit_(), b.label("cb"), b.mov64(R0, 40), b.exit_()]
        want = ETH_FRAME[13] + 40
    else:  # the byte at 12, loaded by the subprogram
        items = [b.call_local("cb"), b.exit_(), b.label("cb"), b.mov64(R6, R1), b.ld_abs(1, 12),
                 b.exit_()]
        want = ETH_FRAME[12]
    if where == "subprog" and not func_info:
        with pytest.raises(OSError) as refused:
            load(sys, items, func_info=False)
        assert refused.value.errno == errno.EINVAL
        return
    fd = load(sys, items, func_info=func_info)
    try:
        assert sys.prog_test_run(fd, ETH_FRAME).retval == want
    finally:
        sys.close(fd)
