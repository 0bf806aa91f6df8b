"""Argument types and checks the commands share (argparse ``type=`` callables).

Rules this module keeps:
- Every bound is checked while the command line is parsed, before any work starts: a value out
  of range is a usage error (exit status 2) whose message names the argument, the bound and
  where the bound comes from.
- Bounds are what the kernel or the sample accepts (a u32 field, an imm32), or what fits here in
  memory and time; each is stated where it is defined, never silently clamped.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

# The integer type every command uses lives below them all (testing/ uses it too).
from ..commands import int_arg as int_arg

U32_MAX = 2**32 - 1
S32_MAX = 2**31 - 1
# The largest emulated machine a benchmark declares: map_perf_test's MAX_NR_CPUS (the slots of
# its outer map); each emulated CPU gets a worker thread.
MAX_EMULATED_CPUS = 1024
MAX_SECONDS = 3600.0  # a measured phase (duration, warm-up) of at most an hour


def seconds_arg(name: str, zero_ok: bool) -> Callable[[str], float]:
    """An argparse ``type=`` for a finite number of seconds: positive (or, ``zero_ok``, at
    least 0) and at most ``MAX_SECONDS``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes seconds, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} takes a finite number of seconds, "
                                             f"got {text!r}")
        if value < 0 or (value == 0 and not zero_ok):
            bound = ">= 0" if zero_ok else "> 0"
            raise argparse.ArgumentTypeError(f"{name} must be {bound} seconds, got {value:g}")
        if value > MAX_SECONDS:
            raise argparse.ArgumentTypeError(
                f"{name} must be <= {MAX_SECONDS:g} seconds, got {value:g}")
        return value

    parse.__name__ = name
    return parse


def _check_writable(text: str, make_parents: bool) -> None:
    """``text`` names a file that can be written: not empty, not a directory, in a writable
    directory that exists (or, with ``make_parents``, under one: the writer makes the rest)."""
    if not text:
        raise argparse.ArgumentTypeError("the file name is empty")
    path = os.path.expanduser(text)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; give a file name")
    directory = os.path.dirname(path) or "."
    while make_parents and not os.path.exists(directory):
        directory = os.path.dirname(directory) or "."
    if not os.path.isdir(directory):
        raise argparse.ArgumentTypeError(f"{text!r}: there is no directory {directory!r}")
    if not os.access(directory, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: directory {directory!r} is not writable")


def output_file_arg(text: str) -> str:
    """A file to write whose missing directories the writer makes (``calibrate -o``)."""
    _check_writable(text, make_parents=True)
    return text


def plot_arg(text: str) -> str:
    """``--plot FILE``: matplotlib is installed, the file name ends in a format it writes, and
    its directory exists and is writable (checked now, not after the run)."""
    from .report import require_matplotlib

    try:
        require_matplotlib()
    except RuntimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    from matplotlib.backend_bases import FigureCanvasBase

    _check_writable(text, make_parents=False)
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = os.path.splitext(text)[1].lower().lstrip(".")
    if suffix not in formats:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the file name must end in a format matplotlib writes "
            f"(.{', .'.join(formats)}), e.g. rates.png")
    return text


def plot_dir_arg(text: str) -> str:
    """``--plot DIR``: matplotlib is installed and DIR is, or can be made, a writable
    directory (checked now, not after the run)."""
    from .report import require_matplotlib

    try:
        require_matplotlib()
    except RuntimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not text:
        raise argparse.ArgumentTypeError("the directory name is empty")
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    _check_writable(os.path.join(text, "x.png"), make_parents=True)
    return text


PROFILE_HELP = ("emulated: the machine profile whose costs the modeled time uses, a shipped "
                "one ({}) or a TOML file (pybpf calibrate writes one); without --cpus/--nodes "
                "the machine has the profile's CPUs and nodes. Default: host")


def profile_help() -> str:
    from ..profiles import shipped_profiles

    return PROFILE_HELP.format(", ".join(shipped_profiles()))


def profile_arg(text: str) -> str:
    """``--profile NAME|FILE``: a shipped profile or a file that loads (checked now)."""
    from ..profiles import ProfileError, load_profile

    try:
        load_profile(text)
    except ProfileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def emulated_machine(cpus: int | None, nodes: int | None, profile: str | None = None):
    """The emulated System of ``--cpus``/``--nodes``/``--profile`` (the host's shape where
    none is given); ValueError naming the arguments where the emulated backend refuses that
    machine."""
    import pybpf

    if cpus is not None and nodes is not None and nodes > cpus:
        raise ValueError(f"--nodes {nodes} exceeds --cpus {cpus}: every node needs a CPU")
    declared = {k: v for k, v in (("cpus", cpus), ("nodes", nodes), ("profile", profile))
                if v is not None}
    try:
        return pybpf.system("emulated", **declared)
    except (TypeError, ValueError) as exc:
        given = " ".join(f"--{k} {v}" for k, v in declared.items())
        raise ValueError(f"{given}: {exc}") from None
