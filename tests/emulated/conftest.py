"""Fixtures of the emulated-only tests."""

from __future__ import annotations

import threading

import pytest


@pytest.fixture
def make_lab():
    """``make_lab(...)`` builds an ``xdp_lab.Lab``; every lab is closed after the test, and
    the test fails if a cpumap kthread it started is still running then."""
    from xdp_lab import Lab

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
