"""Helpers the tests share. tests/conftest.py puts tests/ on ``sys.path``, so a test in any
directory imports them as ``from helpers import u32, err_of``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from pybpf.asm import R0
from pybpf.asm import builder as b
from pybpf.emulated.machine.memalloc import BpfMemAlloc
from pybpf.emulated.prog.native import native_missing
from pybpf.errors import BPFError
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import MapType

# The emulated backend's engines, for tests run on each (native only where llvmlite is).
ENGINES = ["jit", "interp", pytest.param("native", marks=pytest.mark.skipif(
    native_missing() is not None, reason=str(native_missing())))]


def u32(i: int) -> bytes:
    """``i`` as a 4-byte little-endian key or value (an index, an fd, a CPU's qsize)."""
    return i.to_bytes(4, "little")


def err_of(fn: Callable, *args, **kwargs) -> int:
    """The errno ``fn`` fails with (the test fails if it succeeds)."""
    with pytest.raises(OSError) as info:
        fn(*args, **kwargs)
    return info.value.errno


def errno_of(fn: Callable, *args, **kwargs) -> int:
    """0 when ``fn`` succeeds, else the errno it raised."""
    try:
        fn(*args, **kwargs)
    except OSError as exc:
        return exc.errno
    return 0


def op_errno(op: Callable, *args) -> int:
    """0 when an emulated map op succeeds, else the errno of the KernelError it raised: the
    negated return value a program's helper call gets."""
    from pybpf.errors import KernelError

    try:
        op(*args)
    except KernelError as exc:
        return exc.errno
    return 0


def verdict(system, prog_type: int, insns: bytes, **kwargs) -> str:
    """A program load's verdict: "ok", or the name of the errno it failed with."""
    import errno

    try:
        fd = system.prog_load(prog_type, insns, **kwargs)
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    system.close(fd)
    return "ok"


def load(system, prog_type: int, items, maps=None, license: str = "GPL") -> Program:
    """``items`` (pybpf.asm) loaded on ``system`` as a ``prog_type`` program, its maps by
    name."""
    return Program.load(ProgramSpec(prog_type, items, license=license), system,
                        maps=maps or {})


def retvals_on_cpu(systems, progs, cpu: int, engine: str) -> list[int]:
    """R0 of one run of each of ``progs`` (one per system, in order) on ``cpu`` of its
    system's machine, with a 64-byte context, on ``engine``."""
    r0s = []
    for system, prog in zip(systems, progs, strict=True):
        with system.machine.on_cpu(cpu):
            r0s.append(prog.run(bytearray(64), engine=engine).retval)
    return r0s


@contextlib.contextmanager
def loaded_on_each(systems, value_size: int, programs: dict) -> Iterator[dict]:
    """key -> [(system, map fd, program)]: on each of ``systems``, an array "m" of one
    ``value_size``-byte value and the ``programs`` (key -> (program type, items)) using it;
    all closed afterwards."""
    loaded: dict = {}
    fds = []
    try:
        for system in systems:
            fd = system.map_create(MapType.ARRAY, 4, value_size, 1)
            fds.append((system, fd))
            for key, (prog_type, items) in programs.items():
                loaded.setdefault(key, []).append(
                    (system, fd, load(system, prog_type, items, {"m": fd})))
        yield loaded
    finally:
        for runs in loaded.values():
            for _, _, prog in runs:
                prog.close()
        for system, fd in fds:
            system.close(fd)


def load_error(system, prog_type: int, items, license: str = "GPL") -> tuple[int, str]:
    """(errno, message) of loading ``items`` then ``r0 = 0; exit``; (0, "") where it loads."""
    try:
        load(system, prog_type, [*items, b.mov64(R0, 0), b.exit_()], license=license).close()
    except BPFError as exc:
        return exc.errno, str(exc)
    return 0, ""


def hash_map_state(e, fd: int) -> dict:
    """What a hash map holds and where: its keys in iteration order (bucket order), each
    element's address and value (every CPU's slot), the free lists' and spares' addresses,
    its LRU's lists and its allocator's caches, its counters."""
    bpf_map = e.map_from_fd(fd)
    keys, key = [], None
    while True:
        try:
            key = e.map_get_next_key(fd, key)
        except BPFError:
            break
        keys.append(key)
    freelist = bpf_map.freelist
    return {"keys": keys, "addrs": {k: elem.addr for k, elem in bpf_map.table.items()},
            "refs": {k: elem.ref for k, elem in bpf_map.table.items()},
            # every bucket's list, emptied ones included (made once, kept)
            "buckets": {i: [elem.addr for elem in bucket]
                        for i, bucket in sorted(bpf_map.buckets.items())},
            "values": {k: bytes(v) if bpf_map.values is not None else [bytes(s) for s in v]
                       for k, v in ((k, elem.value) for k, elem in bpf_map.table.items())},
            "free": None if freelist is None else [[elem.addr for elem in lst]
                                                   for lst in freelist.lists],
            "spares": [[elem.addr for elem in lst] for lst in bpf_map.extra_elems],
            "lru": None if bpf_map.lru_list is None else (
                {name: [(node.addr, node.cpu, node.ref) for node in nodes]
                 for name, nodes in bpf_map.lru_list.lists().items()},
                bpf_map.lru_list.stats(), [loc.next_steal for loc in bpf_map.lru_list.local]
                if not bpf_map.lru_list.percpu else None,
                None if bpf_map.lru_list.percpu else
                bpf_map.lru_list.common.next_inactive_rotation.addr),
            "mem_caches": None if not isinstance(bpf_map.ma, BpfMemAlloc) else [
                [[elem.addr for elem in objects] for objects in (
                    cache.free, cache.free_by_rcu_ttrace, cache.waiting_for_gp_ttrace)]
                for cache in bpf_map.ma.caches],
            "stats": e.map_stats(fd),
            "problems": bpf_map.storage.problems(bpf_map._hash)}


def forked_results(target: Callable, args_each: list[tuple], timeout: float = 300) -> list:
    """Run ``target(*args, queue)`` in a forked process for each ``args`` of ``args_each``,
    all at once; what each put on the queue (in the order they put it), after every process
    exited 0 (bench.shm's run_processes, which raises where one did not)."""
    import multiprocessing

    from pybpf.bench.shm import run_processes

    return run_processes(multiprocessing.get_context("fork"), target, args_each,
                         "test", timeout)
