"""What every benchmark shares: JSON output, a per-CPU bar chart, progress on stderr.

Rules this module keeps:
- Figures are printed as measured; nothing here scales or fills in a number.
- Progress goes to stderr only, at most a few times a second, so stdout stays the benchmark's
  own output (human lines, or one JSON document with ``--json``).
- matplotlib is an optional extra (``pip install 'pybpf[plot]'``); asking for a plot without
  it is a clear error, never a silent skip.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

PLOT_EXTRA_HINT = "install the plot extra: pip install 'pybpf[plot]' (it brings matplotlib)"


class Progress:
    """A one-line progress report on stderr: ``label: done/total``, throttled.

    On a terminal the line is rewritten in place; otherwise a line is written at most every
    ``interval`` seconds (plus the final one), so logs stay short.
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
        self._last = 0.0
        self._started = time.monotonic()

    def update(self, done: int, note: str = "") -> None:
        self.done = done
        now = time.monotonic()
        if not self.enabled or now - self._last < self.interval:
            return
        self._last = now
        self._write(note)

    def advance(self, n: int = 1, note: str = "") -> None:
        self.update(self.done + n, note)

    def finish(self, note: str = "") -> None:
        if not self.enabled:
            return
        self._write(note)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _write(self, note: str) -> None:
        elapsed = time.monotonic() - self._started
        text = f"{self.label}: {self.done}/{self.total} ({elapsed:.1f}s)"
        if note:
            text += f" {note}"
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def dump_json(document: Mapping[str, Any], stream: TextIO | None = None) -> None:
    """Write one benchmark's results as a JSON document (sorted keys, one trailing newline)."""
    out = stream if stream is not None else sys.stdout
    json.dump(document, out, indent=2, sort_keys=True)
    out.write("\n")
    out.flush()


def require_matplotlib():
    """Import matplotlib with a non-interactive backend, or raise with the install hint."""
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError(f"--plot needs matplotlib: {PLOT_EXTRA_HINT}") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_per_cpu(path: str, title: str, series: Mapping[str, Mapping[int, float]], *,
                 unit: str = "events/s",
                 remote_share: Mapping[str, Mapping[int, float]] | None = None) -> None:
    """Bar chart of a per-CPU figure: one group of bars per CPU, one bar per series.

    ``series`` maps a label (a test) to {cpu: value}. ``remote_share`` (same labels, values in
    0..1), where known, is drawn as a line on a second axis so the NUMA effect sits beside
    the rate it explains.
    """
    plt = require_matplotlib()
    cpus = sorted({cpu for values in series.values() for cpu in values})
    labels = list(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(cpus) * max(1, len(labels))), 4.5))
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        xs = [c + (i - (len(labels) - 1) / 2) * width for c in cpus]
        ax.bar(xs, [series[label].get(c, 0) for c in cpus], width=width, label=label)
    ax.set_xlabel("CPU")
    ax.set_ylabel(unit)
    ax.set_xticks(cpus)
    ax.set_title(title)
    handles, names = ax.get_legend_handles_labels()
    if remote_share:
        ax2 = ax.twinx()
        for label, shares in remote_share.items():
            known = sorted(shares)
            ax2.plot(known, [100.0 * shares[c] for c in known], "D", color="black",
                     linestyle="none", label=f"{label}: remote accesses (right axis)")
        ax2.set_ylabel("remote-node accesses (%)")
        ax2.set_ylim(0, 105)
        more_handles, more_names = ax2.get_legend_handles_labels()
        handles, names = handles + more_handles, names + more_names
    ax.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, -0.12),
              fontsize="small", ncol=1, frameon=False)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table (right-aligned numbers, left-aligned text)."""
    cells = [[str(c) for c in header]] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(_is_number(row[i]) for row in rows) if rows else False
               for i in range(len(header))]
    lines = []
    for r in cells:
        lines.append("  ".join(c.rjust(w) if num else c.ljust(w)
                               for c, w, num in zip(r, widths, numeric, strict=True)).rstrip())
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
