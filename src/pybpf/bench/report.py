"""What every benchmark shares: JSON output, a per-CPU bar chart, per-CPU timelines and RCU's
queue over virtual time (``pybpf reproduce --plot``), progress on stderr
(``Progress``, from ``commands``), and the rule for reading a ratio of two measured figures.

Rules this module keeps:
- Figures are printed as measured; nothing here scales or fills in a number.
- Progress goes to stderr only, at most a few times a second and at least every few seconds
  while a command runs, so stdout stays the benchmark's own output (human lines, or one JSON
  document with ``--json``).
- A ratio is printed with the spread of the rounds it rests on, and no verdict or speed-up
  is claimed beyond what that spread allows (``Ratio``).
- matplotlib is an optional extra (``pip install 'pybpf[plot]'``); asking for a plot without
  it is a clear error, never a silent skip.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

# Progress lines on stderr are every command's (testing/ uses them too): they live below.
from ..commands import Progress as Progress

PLOT_EXTRA_HINT = "install the plot extra: pip install 'pybpf[plot]' (it brings matplotlib)"


def spread(rounds: Sequence[float]) -> float:
    """How far a figure's typical round is from its best: (median - best) / best, 0 for a
    single round (one disturbed round among several does not widen it)."""
    best = min(rounds)
    return (statistics.median(rounds) - best) / best if best > 0 else 0.0


@dataclass(frozen=True)
class Ratio:
    """Two figures (lower is better, e.g. ns per op) measured in alternating rounds: ``value``
    is best(mine) / best(ref), ``noise`` the larger spread of the two figures' rounds.

    The rule: rounds taken under the same conditions disagree by up to ``noise``, so the ratio
    is only known within [value / (1 + noise), value * (1 + noise)]. A verdict against a
    target is given only when that whole band is on one side of it ("within noise"
    otherwise). Where ``mine`` does the reference's work and more (``floor`` 1: a binding
    around the same syscall, a map around a dict), a ratio under 1 is a disturbed reference
    round: within the noise it reads as parity, beyond it as no result.
    """

    value: float
    noise: float

    @classmethod
    def of(cls, mine: Sequence[float], ref: Sequence[float]) -> Ratio:
        return cls(min(mine) / min(ref), max(spread(mine), spread(ref)))

    @property
    def low(self) -> float:
        return self.value / (1 + self.noise)

    @property
    def high(self) -> float:
        return self.value * (1 + self.noise)

    def below_floor(self, floor: float | None) -> bool:
        """Under ``floor`` by more than the noise: the reference was disturbed."""
        return floor is not None and self.high < floor

    def verdict(self, target: float, floor: float | None = None) -> str:
        """"meets", "misses", "within noise of", or "no verdict on" the ``target``."""
        if self.below_floor(floor):
            return "no verdict on"
        if self.high <= target:
            return "meets"
        if self.low > target:
            return "misses"
        return "within noise of"

    def describe(self, floor: float | None = None) -> str:
        """The ratio with its noise, e.g. ``1.12x \u00b16%``; see the class for ``floor``."""
        noise = f"\u00b1{100 * self.noise:.0f}%"
        if self.below_floor(floor):
            return (f"{self.value:.2f}x {noise}: below {floor:g}x beyond the noise, a "
                    "disturbed reference round, not a result")
        if floor is not None and self.value < floor:
            return f"{floor:g}x within noise ({self.value:.2f}x {noise})"
        return f"{self.value:.2f}x {noise}"


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


# A colour per CPU state of the scheduler (emulated/machine/sched.py CPU_STATES).
STATE_COLORS = {"user": "tab:blue", "kthread": "tab:purple", "kworker": "tab:orange",
                "ksoftirqd": "tab:red", "softirq": "tab:green", "hardirq": "tab:brown",
                "switch": "black", "wakeup": "tab:gray", "idle": "whitesmoke"}


def plot_cpu_timelines(path: str, title: str,
                       panels: Mapping[str, Mapping[str, Sequence[tuple[float, float, str]]]]
                       ) -> None:
    """One panel per label of ``panels`` (a path), one row per CPU in it: its (start, end,
    state) intervals in ns, drawn in us, coloured by state."""
    plt = require_matplotlib()
    rows_in_all = sum(len(rows) for rows in panels.values())
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.2 + 0.9 * rows_in_all),
                             squeeze=False, sharex=True)
    seen: set[str] = set()
    for ax, (label, rows) in zip(axes[:, 0], panels.items(), strict=True):
        for y, intervals in enumerate(rows.values()):
            by_state: dict[str, list[tuple[float, float]]] = {}
            for t0, t1, state in intervals:
                by_state.setdefault(state, []).append((t0 / 1e3, (t1 - t0) / 1e3))
            for state, spans in by_state.items():
                ax.broken_barh(spans, (y - 0.4, 0.8), color=STATE_COLORS.get(state, "pink"),
                               label=None if state in seen else state)
                seen.add(state)
        ax.set_yticks(range(len(rows)), list(rows))
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_title(label, fontsize="medium")
    axes[-1, 0].set_xlabel("virtual time (us)")
    fig.suptitle(title)
    handles, names = [], []
    for ax in axes[:, 0]:
        h, n = ax.get_legend_handles_labels()
        handles, names = handles + h, names + n
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize="small",
               frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def plot_rcu_queue(path: str, title: str,
                   runs: Mapping[str, tuple[Sequence[tuple[float, int, int, int]],
                                            Sequence[tuple[float, float]]]]) -> None:
    """RCU over virtual time, per label of ``runs`` (samples, grace periods): callbacks
    queued on each CPU at its ticks (top), memory the queued callbacks hold (bottom); the
    first label's grace periods shaded in both."""
    plt = require_matplotlib()
    fig, (queue_ax, held_ax) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for i, (label, (samples, gps)) in enumerate(runs.items()):
        style = "-" if i == 0 else "--"
        if not samples:  # no callback was ever queued: say so rather than draw nothing
            queue_ax.plot([], [], style, label=f"{label}: no callback queued")
        for cpu in sorted({cpu for _, cpu, _, _ in samples}):
            points = [(t / 1e6, queued) for t, c, queued, _ in samples if c == cpu]
            queue_ax.plot(*zip(*points, strict=True), style, drawstyle="steps-post",
                          label=f"{label}: CPU {cpu}")
        held = {t / 1e6: held / 1024 for t, _, _, held in samples}  # a time's last sample
        if held:
            held_ax.plot(*zip(*sorted(held.items()), strict=True), style,
                         drawstyle="steps-post", label=label)
        if i == 0:
            for k, (start, end) in enumerate(gps):
                for ax in (queue_ax, held_ax):
                    ax.axvspan(start / 1e6, end / 1e6, color="tab:gray",
                               alpha=0.08 if k % 2 else 0.16, lw=0)
    queue_ax.set_ylabel("callbacks queued on the CPU")
    held_ax.set_ylabel("memory held by callbacks (KiB)")
    held_ax.set_xlabel(f"virtual time (ms); shaded: grace periods of {next(iter(runs))}")
    queue_ax.legend(fontsize="small", frameon=False)
    held_ax.legend(fontsize="small", frameon=False)
    fig.suptitle(title)
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
