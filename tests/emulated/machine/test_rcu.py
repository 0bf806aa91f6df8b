"""Deterministic RCU: callbacks wait for the readers that could see the object."""

from __future__ import annotations

import threading

import pytest

from pybpf.emulated.machine.rcu import Rcu


def test_call_rcu_waits_for_a_reader_that_entered_before():
    rcu = Rcu()
    ran = []
    rcu.read_lock()
    rcu.call_rcu(lambda: ran.append("cb"))
    assert rcu.poll() == 0 and ran == [] and rcu.pending == 1
    rcu.read_unlock()
    assert rcu.poll() == 1 and ran == ["cb"] and rcu.pending == 0


def test_a_reader_entering_after_call_rcu_does_not_delay_it():
    rcu = Rcu()
    ran = []
    rcu.call_rcu(lambda: ran.append("cb"))
    with rcu.read_section():
        assert rcu.poll() == 1
    assert ran == ["cb"]


def test_read_sections_nest_and_only_the_outermost_counts():
    rcu = Rcu()
    rcu.read_lock()
    rcu.read_lock()
    assert rcu.readers == 1
    rcu.read_unlock()
    assert rcu.in_read_section()
    rcu.read_unlock()
    assert rcu.readers == 0 and not rcu.in_read_section()
    with pytest.raises(RuntimeError):
        rcu.read_unlock()


def test_a_reader_in_another_thread_holds_the_grace_period():
    rcu = Rcu()
    entered, release = threading.Event(), threading.Event()
    errors = []

    def reader():
        try:
            with rcu.read_section():
                entered.set()
                release.wait()
        except BaseException as exc:  # reported below instead of leaving the test waiting
            errors.append(exc)
            entered.set()

    thread = threading.Thread(target=reader)
    thread.start()
    entered.wait()
    assert errors == []
    ran = []
    rcu.call_rcu(lambda: ran.append(1))
    assert rcu.poll() == 0
    release.set()
    thread.join()
    assert rcu.poll() == 1 and ran == [1]


def test_synchronize_rcu_inside_a_read_section_raises():
    rcu = Rcu()
    with rcu.read_section(), pytest.raises(RuntimeError, match="deadlock"):
        rcu.synchronize_rcu()


def test_barrier_runs_everything_and_counts():
    rcu = Rcu()
    ran = []
    for i in range(5):
        rcu.call_rcu(lambda i=i: ran.append(i))
    rcu.barrier()
    assert ran == [0, 1, 2, 3, 4]
    stats = rcu.stats()
    assert stats["callbacks_queued"] == 5 and stats["callbacks_run"] == 5
    assert stats["max_pending"] == 5 and stats["callbacks_pending"] == 0


def test_more_than_qhimark_callbacks_force_a_grace_period():
    rcu = Rcu(qhimark=3)
    ran = []
    for i in range(4):
        rcu.call_rcu(lambda i=i: ran.append(i))
    assert ran == [0, 1, 2, 3]
