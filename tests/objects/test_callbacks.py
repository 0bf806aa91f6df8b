"""Callbacks in C objects (tests/objects/callbacks.c): the loader turns a function's address
into a BPF_PSEUDO_FUNC load of a subprogram linked in once, with its func_info, as libbpf
does; bpf_loop, bpf_for_each_map_elem (hash and array) and bpf_timer callbacks then run on
the kernel. The emulated backend does not implement these helpers yet (issue 21): it must
refuse such a program with a BPFError, and these tests turn green when it lands."""

from __future__ import annotations

import struct
import time

import pytest

from pybpf.bpf_object import ObjectError, ObjectSpec, RelocKind
from pybpf.btf.types import BTF_FUNC_STATIC
from pybpf.uapi import BPF_PSEUDO_FUNC

INSN = struct.Struct("<BBhi")
PACKET = bytes(range(64))
EBUSY = 16
CALLBACKS = {"sum_indices": ("add_index",), "sum_twice": ("add_index", "sum_below"),
             "walk_maps": ("add_elem", "double_until_3"), "arm_timer": ("on_timer",)}


@pytest.fixture(params=["kernel", "emulated"])
def backend(request):
    return request.getfixturevalue(request.param)


@pytest.fixture
def spec(build_object):
    return ObjectSpec.from_file(build_object("callbacks"))


@pytest.fixture
def callbacks(spec, backend):
    with spec.load(backend) as obj:
        yield obj


def _func_loads(prog) -> list[int]:
    """The instruction each BPF_PSEUDO_FUNC load of ``prog`` points to."""
    return [i + imm + 1 for i, (code, regs, _off, imm) in enumerate(INSN.iter_unpack(prog.insns))
            if code == 0x18 and regs >> 4 == BPF_PSEUDO_FUNC]


def test_callback_addresses_become_pseudo_func_loads_of_subprograms_linked_once(spec):
    for name, subprograms in CALLBACKS.items():
        prog = spec.programs[name]
        assert prog.subprograms == subprograms
        starts = {spec.btf[rec.type_id].name: i for i, rec in prog.func_info}
        assert list(starts) == [name, *subprograms]
        relos = [r.insn for r in prog.relocations if r.kind == RelocKind.SUBPROG_ADDR]
        targets = _func_loads(prog)
        assert len(targets) == len(relos) and targets
        # Each load points at the first instruction of a static function func_info names
        # (the verifier takes only static functions as callbacks).
        for target in targets:
            func = spec.btf[dict(prog.func_info)[target].type_id]
            assert func.linkage == BTF_FUNC_STATIC and starts[func.name] == target
        assert [i for i, _ in prog.line_info] == sorted(i for i, _ in prog.line_info)
        assert {i for i, _ in prog.line_info} >= set(starts.values())
    # add_index is reached from sum_twice itself and from sum_below: one copy, two loads.
    twice = spec.programs["sum_twice"]
    add_index = next(i for i, rec in twice.func_info if spec.btf[rec.type_id].name == "add_index")
    assert _func_loads(twice) == [add_index, add_index]


def test_bpf_loop_callback_from_the_program_and_from_a_subprogram(callbacks):
    sum_indices, sum_twice = callbacks.programs["sum_indices"], callbacks.programs["sum_twice"]
    assert sum_indices.test_run(PACKET).retval == 2  # XDP_PASS
    g = callbacks.globals
    # Indices 0..63 are added; index 64 stops the loop, which counts it.
    assert (g["loop_count"], g["loop_sum"]) == (65, sum(range(64)))
    assert sum_twice.test_run(bytes(20)).retval == 2
    assert g["nested_sum"] == sum(range(10)) + sum(range(20))


def test_for_each_map_elem_walks_a_hash_and_an_array(callbacks):
    callbacks.maps["weights"].update({1: 10, 5: 50, 7: 70})
    slots = callbacks.maps["slots"]
    for i in range(8):
        slots[i] = i + 1
    assert callbacks.programs["walk_maps"].test_run(PACKET).retval == 2
    g = callbacks.globals
    assert (g["hash_walked"], g["hash_seen"], g["hash_keys"], g["hash_values"]) == \
        (3, 3, 13, 130)
    assert (g["array_walked"], g["array_seen"]) == (8, 8)
    # double_until_3 stops after key 3: four elements doubled, the walk counts four.
    assert (g["doubled_walked"], g["doubled_seen"]) == (4, 4)
    assert dict(slots.items()) == {0: 2, 1: 4, 2: 6, 3: 8, 4: 5, 5: 6, 6: 7, 7: 8}


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    """Until ``predicate()`` holds or ``timeout`` seconds pass (the kernel runs a timer's
    callback in softirq context, after the test run has returned)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def test_timer_in_a_map_value_fires_its_callback_in_the_kernel(spec, kernel):
    with spec.load(kernel) as obj:
        arm, g = obj.programs["arm_timer"], obj.globals
        assert arm.test_run(PACKET).retval == 2
        assert (g["timer_init_ret"], g["timer_callback_ret"], g["timer_start_ret"]) == (0, 0, 0)
        assert _wait_for(lambda: g["timer_runs"] == 1)
        assert obj.maps["timers"][0].fired == 1
        # Armed again: the timer exists already (EBUSY), the callback is replaced, it fires.
        arm.test_run(PACKET)
        assert (g["timer_init_ret"], g["timer_callback_ret"], g["timer_start_ret"]) == \
            (-EBUSY, 0, 0)
        assert _wait_for(lambda: g["timer_runs"] == 2)
        assert obj.maps["timers"][0].fired == 2


def test_same_callbacks_give_the_same_results_on_both_backends(build_object, kernel,
                                                               emulated):
    runs = [("sum_indices", PACKET), ("sum_twice", bytes(33)), ("walk_maps", PACKET),
            ("walk_maps", bytes(20))]
    results = []
    for system in (kernel, emulated):
        with ObjectSpec.from_file(build_object("callbacks")).load(system) as obj:
            obj.maps["weights"].update({2: 20, 3: 30})
            obj.maps["slots"].update({i: 3 * i for i in range(8)})
            retvals = [obj.programs[name].test_run(data).retval for name, data in runs]
            variables = {name: obj.globals[name] for name in obj.globals.variables
                         if not name.startswith("timer_")}
            results.append((retvals, variables, dict(obj.maps["slots"].items())))
    assert results[0] == results[1]


def test_a_static_callback_in_the_programs_own_section_is_refused_as_libbpf_does(
        compile_source):
    # libbpf takes static functions from .text only (bpf_object__add_programs); one placed
    # in a program's section is refused before any relocation, naming it.
    path = compile_source("callback_in_section", """
static __attribute__((section("xdp"), used)) int in_section(__u32 index, void *ctx)
{
	return 0;
}

SEC("xdp")
int loops(struct xdp_md *xdp)
{
	bpf_loop(4, in_section, 0, 0);
	return XDP_PASS;
}
""")
    with pytest.raises(ObjectError, match="section 'xdp': program 'in_section' is static and "
                                          "not supported"):
        ObjectSpec.from_file(path)
