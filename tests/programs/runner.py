"""Run a corpus case on a System and collect what it did: retval, packet out, map contents."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any

from pybpf.errors import BPFError
from pybpf.programs import Program, ProgramSpec
from pybpf.system import System, iter_keys
from pybpf.uapi import MapType, map_traits, round_up

from .corpus import Case, MapDef, MapFdRef, PerCpu, ProgRef


@dataclass(frozen=True)
class Outcome:
    retval: int
    data_out: bytes
    maps: dict[str, Any]


def spec_of(case: Case) -> ProgramSpec:
    return ProgramSpec(case.prog_type, case.program, name=case.name[:15],
                       prog_flags=case.prog_flags)


def run_case(case: Case, system: System) -> Outcome:
    """Create the case's maps and programs on ``system``, run it on CPU 0, read the maps."""
    fds: dict[str, int] = {}
    progs: list[Program] = []
    try:
        for md in case.maps:
            fds[md.name] = system.map_create(
                md.type, md.key_size, md.value_size, md.max_entries, map_flags=md.flags,
                inner_map_fd=fds[md.inner] if md.inner else 0, map_name=md.name.encode())
        extra = {}
        for name, (prog_type, items) in case.progs.items():
            extra[name] = Program.load(ProgramSpec(prog_type, items, name=name), system,
                                       maps=fds)
            progs.append(extra[name])
        for md in case.maps:
            for key, value in md.init:
                if isinstance(value, ProgRef):
                    value = extra[value.name].fd.to_bytes(4, "little")
                elif isinstance(value, MapFdRef):
                    value = fds[value.name].to_bytes(4, "little")
                system.map_update_elem(fds[md.name], key, value)
        prog = Program.load(spec_of(case), system, maps=fds)
        progs.append(prog)
        with system.on_cpu(0):
            run = prog.test_run(case.data, ctx=case.ctx)
        contents = {md.name: snapshot(system, fds[md.name], md) for md in case.maps
                    if not map_traits(md.type).fd_values}
        return Outcome(run.retval, run.data_out, contents)
    finally:
        for prog in progs:
            prog.close()
        for fd in fds.values():
            system.close(fd)


def snapshot(system: System, fd: int, md: MapDef) -> Any:
    """A map's contents: {key: value} ({key: per-CPU tuple} for per-CPU maps), or the list of
    values a queue / stack pops, in order (popping empties it)."""
    if md.type in (MapType.QUEUE, MapType.STACK):
        values = []
        while True:
            try:
                values.append(system.map_lookup_and_delete_elem(fd, None))
            except BPFError as exc:
                if exc.errno != errno.ENOENT:
                    raise
                return values
    contents = {}
    for key in iter_keys(system, fd):
        value = system.map_lookup_elem(fd, key)
        if map_traits(md.type).percpu:
            step = round_up(md.value_size, 8)
            value = tuple(value[i:i + md.value_size] for i in range(0, len(value), step))
        contents[key] = value
    return contents


def expected_contents(expected: Any, ncpus: int) -> Any:
    """The corpus's expectation in ``snapshot``'s shape for a machine with ``ncpus``."""
    if isinstance(expected, dict):
        return {k: (v.cpu0, *[bytes(len(v.cpu0))] * (ncpus - 1)) if isinstance(v, PerCpu)
                else v for k, v in expected.items()}
    return expected


def check_expected(case: Case, outcome: Outcome, ncpus: int) -> None:
    """Assert the outcome is what the corpus says."""
    assert outcome.retval == case.retval, (
        f"{case.name}: retval {outcome.retval:#x}, corpus says {case.retval:#x}")
    if case.data_out is not None:
        assert outcome.data_out == case.data_out, (
            f"{case.name}: data_out {outcome.data_out.hex()}, corpus says "
            f"{case.data_out.hex()}")
    for name, expected in case.expect_maps.items():
        assert outcome.maps[name] == expected_contents(expected, ncpus), (
            f"{case.name}: map {name} holds {outcome.maps[name]}")
