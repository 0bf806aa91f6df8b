"""``pybpf doctor``: which tiers and features are active on this machine, one line each.

Rules this module keeps:
- Every check is a function that answers a ``Finding`` (active or not, and a detail that says
  what is there or why not and what to do); none raises, and the command always exits 0: it
  reports, it does not judge.
- A check looks at the same thing the code it stands for uses (``probe_map_create`` for
  bpf(2), ``accelerator.ACCEL`` and ``CACHE_MODEL``, ``shared.SHM``, ``native_missing``,
  ``modeled_time_default``), so what it says is what pybpf will do. Nothing is installed,
  mounted or built here.
"""

from __future__ import annotations

import argparse
import errno
import importlib.metadata
import importlib.util
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from . import __version__

PROC_MOUNTS = "/proc/mounts"
BPFFS_ROOT = "/sys/fs/bpf"


@dataclass(frozen=True)
class Finding:
    """One line of the report: ``name``, whether it is active, and what or why."""

    name: str
    active: bool
    detail: str

    def line(self) -> str:
        return f"{self.name:<22}{'yes' if self.active else 'no':<5}{self.detail}"


def _errno_text(err: int) -> str:
    return f"{errno.errorcode.get(err, str(err))} ({os.strerror(err)})"


def check_kernel_backend() -> Finding:
    """bpf(2): a tiny array map is created and closed, as ``backends.bpf_allowed`` does."""
    from .kernel import syscall

    name = "kernel backend"
    if syscall.UNAVAILABLE is not None:
        return Finding(name, False, f"bpf(2) cannot be called here: {syscall.UNAVAILABLE}")
    try:
        err = syscall.probe_map_create()
    except OSError as exc:
        return Finding(name, False, f"bpf(2) failed: {exc}")
    if err:
        return Finding(name, False, f"bpf(2) refused with {_errno_text(err)}: run as root or "
                                    "with CAP_BPF; the emulated backend works meanwhile")
    return Finding(name, True, "bpf(2) allowed")


def mounted_filesystems() -> dict[str, list[str]]:
    """{filesystem type: [mount points]} from /proc/mounts (empty where it cannot be read)."""
    found: dict[str, list[str]] = {}
    try:
        with open(PROC_MOUNTS) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3:
                    found.setdefault(fields[2], []).append(fields[1])
    except OSError:
        pass
    return found


def check_bpffs() -> Finding:
    points = mounted_filesystems().get("bpf", [])
    if points:
        return Finding("bpffs", True, f"mounted at {', '.join(points)} (kernel pins)")
    return Finding("bpffs", False, f"not mounted: kernel pins need mount -t bpf bpf "
                                   f"{BPFFS_ROOT} (the emulated backend has its own)")


def check_tracefs() -> Finding:
    from .kernel.perf_event import TRACEFS_ROOTS

    points = mounted_filesystems().get("tracefs", [])
    if points:
        return Finding("tracefs", True, f"mounted at {', '.join(points)} (tracepoint attach)")
    return Finding("tracefs", False, "not mounted: attaching to tracepoints on the kernel "
                                     f"needs mount -t tracefs tracefs {TRACEFS_ROOTS[0]}")


def _c_extension(name: str, module: ModuleType | None, what: str) -> Finding:
    """The line of an optional C extension (``accelerator``'s ACCEL, CACHE_MODEL)."""
    if module is not None:
        return Finding(name, True, f"built: {module.__file__} ({what})")
    if os.environ.get("PYBPF_NO_ACCEL"):
        return Finding(name, False, "switched off by PYBPF_NO_ACCEL (pure Python: same "
                                    "results, slower)")
    return Finding(name, False, "not built, or built from older source (pure Python: same "
                                "results, slower): pip install -e . with gcc and the Python "
                                "headers builds it")


def check_accelerator() -> Finding:
    from . import accelerator

    return _c_extension("C accelerator", accelerator.ACCEL, "Map's core and batches")


def check_cache_model() -> Finding:
    from . import accelerator

    return _c_extension("C cache model", accelerator.CACHE_MODEL,
                        "the emulated machine's caches: Timing.access, charge, "
                        "spin_lock, spin_unlock, locked_access; the scheduler's swap_dicts; "
                        "hash maps' lookup, update and delete with their charges")


def check_shared_maps() -> Finding:
    from . import shared

    name = "shared maps"
    if shared.SHM is not None:
        return Finding(name, True, f"built: {shared.SHM.__file__} (pybpf.shared: array and "
                                   "hash maps in shared memory; an emulated system's with "
                                   "shared=, so map-perf --processes)")
    return Finding(name, False, f"not built: {shared.INSTALL_HINT}")


def check_interpreter() -> Finding:
    return Finding("engine interp", True, "the reference interpreter (always there)")


def check_jit() -> Finding:
    return Finding("engine jit", True, "eBPF translated to Python (always there; the default)")


def check_native() -> Finding:
    from .emulated import native_missing, native_reach

    why = native_missing()
    if why:
        return Finding("engine native", False, why)
    return Finding("engine native", True,
                   f"eBPF -> LLVM IR -> machine code, llvmlite {package_version('llvmlite')}: "
                   f"{native_reach()}")


def package_version(package: str) -> str | None:
    """The installed version of ``package`` (None if it is not installed)."""
    if importlib.util.find_spec(package) is None:
        return None
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def check_matplotlib() -> Finding:
    from .bench.report import PLOT_EXTRA_HINT

    version = package_version("matplotlib")
    if version is None:
        return Finding("plots (--plot)", False, f"no matplotlib: {PLOT_EXTRA_HINT}")
    return Finding("plots (--plot)", True, f"matplotlib {version}")


def check_greenlet() -> Finding:
    """How the virtual-time scheduler runs several emulated CPUs' tasks (map-perf)."""
    name = "emulated CPU tasks"
    version = package_version("greenlet")
    if version is None:
        return Finding(name, False, "host threads, 20-25 us per hand-over: pip install "
                                    "'greenlet>=3' (in pybpf[native]) for ~3 us hand-overs")
    return Finding(name, True, f"greenlets of one host thread (greenlet {version})")


def check_modeled_time() -> Finding:
    from .emulated import NO_MODELED_TIME_ENV, modeled_time_default

    name = "emulated modeled time"
    if modeled_time_default():
        return Finding(name, True, f"on: every emulated operation is charged to a CPU clock "
                                   f"(set {NO_MODELED_TIME_ENV}=1 for speed without figures)")
    return Finding(name, False, f"off by default ({NO_MODELED_TIME_ENV} is set): same "
                                "results, no modeled time; figure makers (map-perf, reproduce, "
                                "the bench models) keep it on")


CHECKS: tuple[Callable[[], Finding], ...] = (
    check_kernel_backend, check_bpffs, check_tracefs, check_accelerator, check_cache_model,
    check_shared_maps, check_interpreter,
    check_jit, check_native, check_greenlet, check_matplotlib, check_modeled_time)


def findings() -> list[Finding]:
    return [check() for check in CHECKS]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``pybpf doctor`` takes no arguments."""


def run(args: argparse.Namespace) -> int:
    print(f"pybpf {__version__} on Python {platform.python_version()} "
          f"({sys.executable}), {platform.system()} {platform.release()}")
    for finding in findings():
        print(finding.line())
    return 0
