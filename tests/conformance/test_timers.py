"""struct bpf_timer in map values: bpf_timer_init / set_callback / start / cancel on the kernel
and on both engines of the emulated backend. The callback runs once its time has passed: on
the kernel after a real sleep, on the emulated machine when its CPUs' clocks move on to it
(``Machine.step``). Every expected errno was read from the running kernel (6.18)."""

from __future__ import annotations

import errno
import struct
import time

import pytest

from pybpf.asm import FP, R0, R1, R2, R3, R4, R6, R7, R8, R9
from pybpf.asm import builder as b
from pybpf.btf import BTF_FUNC_STATIC, Btf, Int, Member, Struct
from pybpf.errors import VerifierError
from pybpf.uapi import MapType

from .conftest import load_with_func_info as load

U32, U64, TIMER, VALUE = range(1, 5)
TYPES = [Int("unsigned int", 4, 0, 0, 32), Int("unsigned long long", 8, 0, 0, 64),
         Struct("bpf_timer", 16, (Member("a", U64, 0), Member("b", U64, 64))),
         # struct value { u64 fired; struct bpf_timer timer; }
         Struct("value", 24, (Member("fired", U64, 0), Member("timer", TIMER, 64)))]
TIMER_OFF = 8
CLOCK_MONOTONIC = 1
ETH_FRAME = bytes.fromhex("ffffffffffff" "020000000001" "0800") + bytes(range(50))


def u32(n: int) -> bytes:
    return n.to_bytes(4, "little")


@pytest.fixture
def timer_map(sys):
    btf = sys.btf_load(Btf(TYPES).to_bytes())
    fd = sys.map_create(MapType.ARRAY, 4, 24, 2, btf_fd=btf, btf_key_type_id=U32,
                        btf_value_type_id=VALUE, map_name="timers")
    sys.close(btf)
    yield fd
    sys.close(fd)


def value_0() -> list:
    """R6 = &m[0] (an array and a constant key: never NULL)."""
    return [b.st(4, FP, -4, 0), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4),
            b.call("map_lookup_elem"), b.mov64(R6, R0)]


def timer_call(helper: str, *args: list, into: object = R7) -> list:
    """R1 = &v->timer, R2.. as ``args`` give them; ``into`` = the result."""
    return [b.mov64(R1, R6), b.add64(R1, TIMER_OFF), *[item for arg in args for item in arg],
            b.call(helper), b.mov64(into, R0)]


INIT = timer_call("timer_init", [b.ld_map_fd(R2, "m")], [b.mov64(R3, CLOCK_MONOTONIC)], into=R7)
SET_CALLBACK = timer_call("timer_set_callback", [b.ld_func(R2, "cb")], into=R8)


def start(nsecs: int, flags: int = 0, into: object = R9) -> list:
    return timer_call("timer_start", [b.mov64(R2, nsecs)], [b.mov64(R3, flags)], into=into)


# The callback: value->fired += 1; return 0
COUNTING_CALLBACK = [b.label("cb"), b.ldx(8, R1, R3, 0), b.add64(R1, 1), b.stx(8, R3, 0, R1),
                     b.mov64(R0, 0), b.exit_()]


def results(*regs) -> list:
    """R0 = the low bytes of ``regs``, R7's lowest."""
    items = [b.mov64(R0, 0)]
    for i, reg in enumerate(regs):
        items += [b.mov64(R1, reg), b.and64(R1, 0xFF), b.lsh64(R1, 8 * i), b.or64(R0, R1)]
    return items + [b.exit_()]


def byte(err: int) -> int:
    return -err & 0xFF


def let_time_pass(sys) -> None:
    machine = getattr(sys, "machine", None)
    if machine is not None:
        machine.step()
    else:
        time.sleep(0.05)


def run_once(sys, fd: int, items: list, with_callback: bool = True) -> int:
    prog_fd = load(sys, items, maps={"m": fd},
                   callbacks={"cb": BTF_FUNC_STATIC} if with_callback else {})
    try:
        return sys.prog_test_run(prog_fd, ETH_FRAME).retval
    finally:
        sys.close(prog_fd)


def fired(sys, fd: int) -> int:
    return struct.unpack_from("<Q", sys.map_lookup_elem(fd, u32(0)))[0]


# -- results ---------------------------------------------------------------------------------
def test_a_started_timer_fires_once_per_start(sys, timer_map):
    items = [*value_0(), *INIT, *SET_CALLBACK, *start(1000), *results(R7, R8, R9),
             *COUNTING_CALLBACK]
    assert run_once(sys, timer_map, items) == 0
    let_time_pass(sys)
    assert fired(sys, timer_map) == 1
    let_time_pass(sys)
    assert fired(sys, timer_map) == 1  # not again: HRTIMER_NORESTART
    # a second init is EBUSY; the timer starts again with the callback it has
    assert run_once(sys, timer_map, items) == byte(errno.EBUSY)
    let_time_pass(sys)
    assert fired(sys, timer_map) == 2


def test_cancel_says_whether_the_timer_was_armed(sys, timer_map):
    items = [*value_0(), *INIT, *SET_CALLBACK, *start(10**9),
             *timer_call("timer_cancel", into=R8), *timer_call("timer_cancel", into=R9),
             *results(R7, R8, R9), *COUNTING_CALLBACK]
    assert run_once(sys, timer_map, items) == 0 | 1 << 8 | 0 << 16
    let_time_pass(sys)
    assert fired(sys, timer_map) == 0


@pytest.mark.parametrize("label,calls,expected", [
    ("start before init", [*start(1000, into=R7)], [errno.EINVAL]),
    ("set_callback before init", [*timer_call("timer_set_callback", [b.ld_func(R2, "cb")])],
     [errno.EINVAL]),
    ("cancel before init", [*timer_call("timer_cancel")], [errno.EINVAL]),
    ("a clock that is not one", [*timer_call("timer_init", [b.ld_map_fd(R2, "m")],
                                             [b.mov64(R3, 2)])], [errno.EINVAL]),
    ("start before set_callback", [*INIT, *start(1000, into=R8)], [0, errno.EINVAL]),
    ("start with unknown flags", [*INIT, *SET_CALLBACK, *start(1000, flags=4)],
     [0, 0, errno.EINVAL]),
])
def test_timer_helper_errors(sys, timer_map, label, calls, expected):
    regs = (R7, R8, R9)[:len(expected)]
    with_callback = any(getattr(item, "target", None) == "cb" for item in calls)
    items = [*value_0(), *calls, *results(*regs)]
    items += COUNTING_CALLBACK if with_callback else []
    want = sum(byte(err) << 8 * i for i, err in enumerate(expected))
    assert run_once(sys, timer_map, items, with_callback) == want, label


def test_an_update_from_user_space_cancels_the_timer(sys, timer_map):
    items = [*value_0(), *INIT, *SET_CALLBACK, *start(10**7), *results(R7, R8, R9),
             *COUNTING_CALLBACK]
    assert run_once(sys, timer_map, items) == 0
    sys.map_update_elem(timer_map, u32(0), struct.pack("<Q", 5) + bytes(16))
    time.sleep(0.05)
    let_time_pass(sys)
    assert fired(sys, timer_map) == 5


# -- the verifier ----------------------------------------------------------------------------
REFUSALS = [
    ("the timer at the wrong offset", [*value_0(), b.mov64(R1, R6), b.ld_map_fd(R2, "m"),
                                       b.mov64(R3, CLOCK_MONOTONIC), b.call("timer_init"),
                                       *results()],
     errno.EINVAL, "off 0 doesn't point to 'struct bpf_timer' that is at 8"),
    ("a load of the timer", [*value_0(), b.ldx(8, R0, R6, 16), b.exit_()],
     errno.EACCES, "bpf_timer cannot be accessed directly by load/store"),
    ("a callback returning 1", [*value_0(), *INIT, *SET_CALLBACK, *results(),
                                b.label("cb"), b.mov64(R0, 1), b.exit_()],
     errno.EINVAL, "At async callback return the register R0 has smin=1 smax=1 should "
     "have been in [0, 0]"),
    ("a callback reading R4", [*value_0(), *INIT, *SET_CALLBACK, *results(),
                               b.label("cb"), b.mov64(R0, R4), b.exit_()],
     errno.EACCES, "R4 !read_ok"),
]


@pytest.mark.parametrize("label,items,expected,message", REFUSALS,
                         ids=[case[0] for case in REFUSALS])
def test_timer_refusals(sys, timer_map, label, items, expected, message):
    callbacks = {"cb": BTF_FUNC_STATIC} if "callback" in label else {}
    with pytest.raises(VerifierError) as info:
        load(sys, items, maps={"m": timer_map}, callbacks=callbacks)
    assert (info.value.errno, message in info.value.log) == (expected, True), \
        (label, info.value.log)


def test_deleting_the_element_cancels_its_timer(sys):
    btf = sys.btf_load(Btf(TYPES).to_bytes())
    fd = sys.map_create(MapType.HASH, 4, 24, 2, btf_fd=btf, btf_key_type_id=U32,
                        btf_value_type_id=VALUE)
    sys.close(btf)
    try:
        sys.map_update_elem(fd, u32(0), bytes(24))
        lookup = [b.st(4, FP, -4, 0), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4),
                  b.call("map_lookup_elem"), b.mov64(R6, R0), b.mov64(R0, 99),
                  b.jeq(R6, 0, "out")]
        items = [*lookup, *INIT, *SET_CALLBACK, *start(10**7), *results(R7, R8, R9)[:-1],
                 b.label("out"), b.exit_(), *COUNTING_CALLBACK]
        assert run_once(sys, fd, items) == 0
        sys.map_delete_elem(fd, u32(0))
        sys.map_update_elem(fd, u32(0), bytes(24))
        time.sleep(0.05)
        let_time_pass(sys)
        assert fired(sys, fd) == 0
    finally:
        sys.close(fd)


def test_a_timer_fires_on_the_cpu_that_armed_it(four_cpus):
    """Emulated: the callback runs on the arming CPU (value->fired = its CPU + 1), once that
    CPU's clock has reached the expiry."""
    system = four_cpus
    btf = system.btf_load(Btf(TYPES).to_bytes())
    fd = system.map_create(MapType.ARRAY, 4, 24, 2, btf_fd=btf, btf_key_type_id=U32,
                           btf_value_type_id=VALUE)
    system.close(btf)
    callback = [b.label("cb"), b.mov64(R6, R3), b.call("get_smp_processor_id"),
                b.add64(R0, 1), b.stx(8, R6, 0, R0), b.mov64(R0, 0), b.exit_()]
    items = [*value_0(), *INIT, *SET_CALLBACK, *start(5000), *results(R7, R8, R9), *callback]
    prog_fd = load(system, items, maps={"m": fd}, callbacks={"cb": BTF_FUNC_STATIC})
    with system.on_cpu(2):
        assert system.prog_test_run(prog_fd, ETH_FRAME).retval == 0
    timing = system.machine.timing
    assert timing.deferred(2) == 1 and fired(system, fd) == 0  # armed, not due yet
    system.machine.step()
    assert fired(system, fd) == 3
    system.close(prog_fd)
    system.close(fd)


@pytest.mark.parametrize("label,members,map_type,expected", [
    ("a timer in an LRU hash", (Member("n", U64, 0), Member("t", TIMER, 64)),
     MapType.LRU_HASH, 0),
    ("a timer in a per-CPU array", (Member("n", U64, 0), Member("t", TIMER, 64)),
     MapType.PERCPU_ARRAY, errno.EOPNOTSUPP),
    ("a timer in a per-CPU hash", (Member("n", U64, 0), Member("t", TIMER, 64)),
     MapType.PERCPU_HASH, errno.EOPNOTSUPP),
    # no timer is found: the value has no special field, so any map may hold it
    ("two timers", (Member("t", TIMER, 0), Member("u", TIMER, 128)), MapType.PERCPU_ARRAY,
     0),
    ("a timer at byte 4", (Member("n", U32, 0), Member("t", TIMER, 32)),
     MapType.PERCPU_ARRAY, 0),
])
def test_which_maps_may_hold_a_timer(backend, label, members, map_type, expected):
    value = Struct("v", 40, members)
    btf = backend.btf_load(Btf(TYPES + [value]).to_bytes())
    try:
        fd = backend.map_create(map_type, 4, 40, 2, btf_fd=btf, btf_key_type_id=U32,
                                btf_value_type_id=len(TYPES) + 1)
    except OSError as exc:
        assert exc.errno == expected, label
    else:
        backend.close(fd)
        assert expected == 0, label
    finally:
        backend.close(btf)
