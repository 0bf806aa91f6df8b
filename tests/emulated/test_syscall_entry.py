"""Every emulated backend command is a syscall: it enters the machine before anything else,
and without modeled time that entry still runs the deferred work that is due."""

from __future__ import annotations

import inspect

import pytest

from pybpf import system
from pybpf.emulated.system import SYSCALL_COMMANDS
from pybpf.uapi import MapType


class Entered(Exception):
    """Raised by the stand-in for Machine.bpf_syscall."""


@pytest.mark.parametrize("modeled_time", [True, False])
@pytest.mark.parametrize("command", SYSCALL_COMMANDS)
def test_each_command_enters_the_machine_before_it_reads_an_argument(command, modeled_time,
                                                                     monkeypatch):
    s = system("emulated", cpus=2, modeled_time=modeled_time)
    entries = []

    def bpf_syscall(entry: str = "syscall_entry") -> None:
        entries.append(entry)
        raise Entered

    monkeypatch.setattr(s.machine, "bpf_syscall", bpf_syscall)
    method = getattr(s, command)
    required = [p for p in inspect.signature(method).parameters.values()
                if p.default is inspect.Parameter.empty]
    # Arguments no command accepts: anything it did before entering would fail on them.
    with pytest.raises(Entered):
        method(*[object()] * len(required))
    assert entries == ["syscall_entry"]


def test_without_modeled_time_a_syscall_runs_the_deferred_work_that_is_due():
    s = system("emulated", cpus=2, modeled_time=False)
    fd = s.map_create(MapType.HASH, 4, 8, 4)
    timing = s.machine.timing
    ran = []
    timing.defer(1, timing.now(1), lambda: ran.append("cpu 1"))
    s.map_update_elem(fd, bytes(4), bytes(8))  # on CPU 0: not CPU 1's work
    assert ran == []
    with s.on_cpu(1):
        s.map_delete_elem(fd, bytes(4))
    assert ran == ["cpu 1"]


def test_with_modeled_time_each_element_command_is_one_syscall_entry():
    s = system("emulated", cpus=2, modeled_time=True)
    fd = s.map_create(MapType.HASH, 4, 8, 4)
    counts = s.machine.timing.counts[0]
    before = counts.get("syscall_entry", 0)
    s.map_update_elem(fd, bytes(4), bytes(8))
    s.map_lookup_elem(fd, bytes(4))
    s.map_delete_elem(fd, bytes(4))
    assert counts["syscall_entry"] - before == 3
