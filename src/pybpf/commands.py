"""What every command shares, below all of them: ``cli.py`` (the table of commands) and the
modules that do the work (bench/, calibrate/, reproduce.py, testing/differential/) import this
module, and it imports none of them.

Rules every command keeps (``run_command`` enforces them):
- Bad input (arguments, PYBPF_BACKEND) is found before any long work starts and ends with the
  usage and one ``error:`` line, exit status 2 (argparse's convention). What argparse checks
  alone is an argument ``type=`` (``int_arg``); a rule across arguments is a ``UsageError``
  raised by the command before it starts its work.
- A refused operation (bpf(2) denied, a failed run) ends with one ``Error:`` line, exit
  status 1: raise ``BPFError`` or ``CommandError``. Never a traceback.
- Progress goes to stderr (``Progress``), so stdout stays the command's own output.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from .backends import BACKENDS
from .errors import BPFError


class CommandError(Exception):
    """A command that cannot do what was asked: ``run_command`` prints ``Error: <message>``
    and returns exit status 1. The message says what failed and what to do."""


class UsageError(Exception):
    """Arguments that argparse accepted one by one but that do not go together (or name a
    machine the backend refuses): ``run_command`` prints the command's usage and
    ``error: <message>`` and exits with status 2."""


def backend_env_problem() -> str | None:
    """What is wrong with ``PYBPF_BACKEND`` (which picks the default backend), or None."""
    value = os.environ.get("PYBPF_BACKEND")
    if value and value not in BACKENDS:
        return (f"PYBPF_BACKEND={value!r} is not a backend: set it to "
                f"{' or '.join(BACKENDS)}, or unset it")
    return None


def run_command(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], int],
                argv: list[str] | None = None) -> int:
    """Parse ``argv`` with ``parser``, then ``run`` the parsed arguments under the rules above;
    returns the exit status (usage errors exit 2 through ``parser.error``). A subcommand's
    parser that sets the default ``subparser`` to itself reports the usage errors, so they
    show that subcommand's usage."""
    args, extra = parser.parse_known_args(argv)
    reporter = getattr(args, "subparser", parser)
    if extra:
        reporter.error(f"unrecognized arguments: {' '.join(extra)}")
    problem = backend_env_problem()
    if problem:
        reporter.error(problem)
    try:
        return run(args) or 0
    except UsageError as exc:
        reporter.error(str(exc))
    except BrokenPipeError:  # `pybpf maps | head`: stop quietly
        sys.stderr.close()
        return 0
    except (BPFError, CommandError) as exc:  # bpf(2) denied, tracefs missing, a failed run
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def run_standalone(prog: str, configure_parser: Callable[[argparse.ArgumentParser], object],
                   run: Callable[[argparse.Namespace], int],
                   argv: list[str] | None = None) -> int:
    """``python -m pybpf.bench.MODULE``: one command on its own, its usage named ``prog`` (the
    ``pybpf`` subcommand it is), under the same rules."""
    parser = argparse.ArgumentParser(prog=prog)
    configure_parser(parser)
    return run_command(parser, run, argv)


def int_arg(name: str, minimum: int, maximum: int | None = None,
            why: str = "") -> Callable[[str], int]:
    """An argparse ``type=`` for an integer in ``[minimum, maximum]``; ``why`` says where the
    maximum comes from (it ends the message of a value over it)."""
    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(
                f"{name} must be <= {maximum}{reason}, got {value}")
        return value

    parse.__name__ = name
    return parse



class Progress:
    """A one-line progress report on stderr: ``label: done/total (elapsed) note``, throttled.

    On a terminal the line is rewritten in place; otherwise a line is written at most every
    ``interval`` seconds (plus the final one), so logs stay short. A run shorter than the
    interval writes nothing. Used as a context manager
    it also keeps a heartbeat: while one step runs longer than ``interval`` (one long figure,
    a child process), the line is written again every ``interval`` seconds, so a long run is
    never silent. (Start it after any fork: its thread must not be running at a fork.)
    """

    def __init__(self, label: str, total: int, *, stream: TextIO | None = None,
                 interval: float | None = None, enabled: bool = True) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if interval is not None else (0.2 if self.tty else 2.0)
        self.enabled = enabled
        self.done = 0
        self.note = ""
        self._started = time.monotonic()
        self._last = self._started
        self._written = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self.enabled:
            self._heartbeat = threading.Thread(target=self._beat, daemon=True,
                                               name=f"progress: {self.label}")
            self._heartbeat.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._heartbeat is not None:
            self._stop.set()
            self._heartbeat.join()
            self._heartbeat = None
        if exc_info[0] is None:
            self.finish()

    def update(self, done: int, note: str = "") -> None:
        self.done = done
        self.note = note
        if self.enabled:
            self._write_if_due()

    def advance(self, n: int = 1, note: str = "") -> None:
        self.update(self.done + n, note)

    def finish(self, note: str = "") -> None:
        if not self.enabled or not self._written:
            return
        with self._lock:
            self._write(note)
            if self.tty:
                self.stream.write("\n")
                self.stream.flush()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval / 2):
            self._write_if_due()

    def _write_if_due(self) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last >= self.interval:
                self._last = now
                self._write(self.note)

    def _write(self, note: str) -> None:
        self._written = True
        elapsed = time.monotonic() - self._started
        text = f"{self.label}: {self.done}/{self.total} ({elapsed:.1f}s)"
        if note:
            text += f" {note}"
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
