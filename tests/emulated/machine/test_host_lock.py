"""HostLock (pybpf._cache_model), the emulated maps' host lock, against threading.Lock: the same
answers to the same calls, and a thread that wants it held waits, without the GIL, until it is
released."""

import threading

import pytest

from pybpf.accelerator import CACHE_MODEL, HostLock

pytestmark = pytest.mark.skipif(
    CACHE_MODEL is None, reason="pybpf._cache_model is not built (setup.py build_ext "
                                "--inplace) or PYBPF_NO_ACCEL is set: the maps use threading.Lock")


def test_the_maps_lock_is_the_c_one():
    assert HostLock is CACHE_MODEL.HostLock


@pytest.mark.parametrize("make", [HostLock, threading.Lock], ids=["HostLock", "threading"])
def test_it_answers_as_threading_lock_does(make):
    lock = make()
    assert not lock.locked()
    assert lock.acquire() is True and lock.locked()
    assert lock.acquire(False) is False and lock.acquire(blocking=False) is False
    lock.release()
    assert not lock.locked()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    with lock as entered:
        assert entered is True and lock.locked()
    assert not lock.locked()
    with pytest.raises(KeyError), lock:
        raise KeyError("released on the way out")
    assert not lock.locked()
    with pytest.raises(TypeError):
        make(1)


def test_a_timeout_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="takes no timeout"):
        HostLock().acquire(timeout=1.0)


def test_a_waiting_thread_gets_it_once_released():
    lock = HostLock()
    lock.acquire()
    order = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        with lock:  # blocks, without the GIL, until the main thread releases
            order.append("waiter")

    thread = threading.Thread(target=waiter)
    thread.start()
    started.wait()
    thread.join(0.2)
    assert thread.is_alive() and order == []  # still waiting; this thread ran meanwhile
    order.append("main")
    lock.release()
    thread.join(10)
    assert order == ["main", "waiter"]

