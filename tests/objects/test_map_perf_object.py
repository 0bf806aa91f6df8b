"""``pybpf map-perf --object``: the C twin of the map_perf programs (tests/objects/map_perf.c)
gives the same per-test lines as the assembled programs, on both backends."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from pybpf.testing import KERNEL_SKIP_REASON, kernel_available

LINE = re.compile(r"^(?P<cpu>\d+):(?P<label>.+?) (?P<rate>\d+) (?P<unit>events|lookups) per sec")


def map_perf(*args: str) -> list[tuple[str, str, str]]:
    proc = subprocess.run([sys.executable, "-m", "pybpf.bench.map_perf", *args,
                           "--no-progress"], capture_output=True, text=True, timeout=300,
                          env=os.environ)
    assert proc.returncode == 0, proc.stderr
    lines = [LINE.match(line) for line in proc.stdout.splitlines()]
    return [(m["cpu"], m["label"], m["unit"]) for m in lines if m]


@pytest.mark.parametrize("backend", ["kernel", "emulated"])
def test_the_c_twin_prints_the_same_lines(build_object, backend):
    if backend == "kernel" and not kernel_available():
        pytest.skip(KERNEL_SKIP_REASON)
    obj = str(build_object("map_perf"))
    # Every test, one CPU, few events: the lines, not the rates, are compared.
    args = ("0", "1", "0", "20" if backend == "kernel" else "3", "--backend", backend)
    assembled = map_perf(*args)
    from_object = map_perf(*args, "--object", obj)
    assert len(assembled) == 11 and from_object == assembled


def test_an_object_without_the_programs_is_refused(build_object):
    proc = subprocess.run([sys.executable, "-m", "pybpf.bench.map_perf", "1", "1", "0", "1",
                           "--backend", "emulated", "--object",
                           str(build_object("subprogs"))], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "test HASH_PREALLOC needs a program stress_hmap in " \
           "SEC(\"tracepoint/syscalls/sys_enter_getuid\")" in proc.stderr
