"""Shared fixtures: one test suite runs against every backend that can run here."""

from __future__ import annotations

import gc
import os
import threading

import pytest
from hypothesis import HealthCheck, settings

from pybpf.testing import KERNEL_SKIP_REASON, kernel_available

# Tests never time anything: no hypothesis deadline, no "too slow" health check (a loaded
# 2-CPU machine must not turn a correct property into a failure). Tests that pass their own
# suppress_health_check list repeat too_slow there, since such a list replaces this one.
settings.register_profile("pybpf", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# CI (.ci/run sets PYBPF_HYPOTHESIS=ci) draws the same examples on every run, so whether work
# lands never hangs on a draw; every other run draws new ones, which is how the property and
# random differential tests go on finding what the fixed draw does not.
settings.register_profile("pybpf-ci", parent=settings.get_profile("pybpf"), derandomize=True)
settings.load_profile("pybpf-ci" if os.environ.get("PYBPF_HYPOTHESIS") == "ci" else "pybpf")


@pytest.fixture
def kernel():
    if not kernel_available():
        pytest.skip(KERNEL_SKIP_REASON)
    from pybpf import system

    return system("kernel")


@pytest.fixture
def emulated():
    from pybpf import system

    return system("emulated")


@pytest.fixture(params=["kernel", "emulated"])
def backend(request):
    """Each backend in turn: the conformance suite runs against both."""
    if request.param == "kernel":
        return request.getfixturevalue("kernel")
    return request.getfixturevalue("emulated")


@pytest.fixture
def no_gc():
    """For tests that expect the lowest free fd number back: garbage left by earlier tests is
    collected first, and no collection runs during the test (its finalizers close fds)."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.fixture
def four_cpus():
    """An emulated machine of 4 CPUs (where work runs: more CPUs than the host's 2)."""
    from pybpf import system

    return system("emulated", cpus=4)


@pytest.fixture
def proxies():
    """``proxies(sys, ...)`` builds a ``sockmap_lab.Proxy``; every proxy is closed after the
    test, and the test fails if a psock thread outlives its sockets."""
    from sockmap_lab import Proxy, psock_threads, wait_for

    made = []

    def make(sys, **kw):
        made.append(Proxy(sys, **kw))
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()
    assert wait_for(lambda: not psock_threads()), "psock threads outlived their sockets"


@pytest.fixture
def make_lab():
    """``make_lab(...)`` builds an ``xdp_lab.Lab``; every lab is closed after the test, and
    the test fails if a cpumap kthread it started is still running then."""
    from xdp_lab import Lab  # tests/xdp_lab.py: the emulated XDP data path's lab

    before = set(threading.enumerate())
    labs = []

    def make(*args, **kwargs):
        labs.append(Lab(*args, **kwargs))
        return labs[-1]

    yield make
    for lab in labs:
        lab.close()
    left = [t.name for t in threading.enumerate()
            if t.name.startswith("cpumap/") and t not in before]
    assert left == [], f"cpumap kthreads left running: {left}"
