"""bench/report.py: the rule for reading a ratio of two measured figures, and progress lines.
Pure functions and a fake clock-free stream: nothing here times anything."""

from __future__ import annotations

import io
import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybpf.bench.report import Progress, Ratio, spread


def test_spread_is_the_median_rounds_distance_from_the_best():
    assert spread([100.0]) == 0.0
    assert spread([100.0, 110.0, 300.0]) == pytest.approx(0.10)  # one disturbed round
    assert spread([100.0, 150.0]) == pytest.approx(0.25)  # the median of two is their mean


def test_ratio_is_best_over_best_with_the_noisier_figures_spread():
    ratio = Ratio.of([120.0, 126.0, 200.0], [100.0, 102.0, 104.0])
    assert ratio.value == pytest.approx(1.2)
    assert ratio.noise == pytest.approx(0.05)


@pytest.mark.parametrize("value, noise, target, floor, verdict", [
    (1.10, 0.05, 1.3, 1.0, "meets"),             # 1.155 at worst: under the target
    (1.25, 0.05, 1.3, 1.0, "within noise of"),   # 1.3125 at worst: the band holds the target
    (1.40, 0.05, 1.3, 1.0, "misses"),            # 1.333 at best: over it
    (1.36, 0.05, 1.3, 1.0, "within noise of"),   # 1.295 at best
    (0.65, 0.10, 1.3, 1.0, "no verdict on"),     # faster than C beyond the noise: disturbed C
    (0.95, 0.10, 1.3, 1.0, "meets"),             # parity within the noise
    (0.05, 0.10, 1.0, None, "meets"),            # no floor: a real speed-up
])
def test_a_verdict_needs_the_whole_noise_band_on_one_side(value, noise, target, floor,
                                                          verdict):
    assert Ratio(value, noise).verdict(target, floor) == verdict


def test_a_ratio_below_its_floor_is_parity_within_noise_or_no_result():
    assert Ratio(1.12, 0.06).describe(1.0) == "1.12x \u00b16%"
    assert Ratio(0.95, 0.10).describe(1.0) == "1x within noise (0.95x \u00b110%)"
    assert Ratio(0.65, 0.10).describe(1.0).startswith(
        "0.65x \u00b110%: below 1x beyond the noise, a disturbed reference round")
    assert Ratio(0.65, 0.10).describe(None) == "0.65x \u00b110%"


@given(st.lists(st.floats(1.0, 1e6), min_size=1, max_size=8),
       st.lists(st.floats(1.0, 1e6), min_size=1, max_size=8), st.floats(0.1, 10.0))
def test_a_claimed_verdict_holds_for_every_pairing_of_rounds_within_the_noise(mine, ref,
                                                                             target):
    ratio = Ratio.of(mine, ref)
    assert ratio.low <= ratio.value <= ratio.high
    verdict = ratio.verdict(target)
    if verdict == "meets":
        assert ratio.high <= target
    elif verdict == "misses":
        assert ratio.low > target
    else:
        assert ratio.low <= target < ratio.high


def test_progress_is_silent_for_a_short_run():
    out = io.StringIO()
    with Progress("short", 3, stream=out, interval=3600) as progress:
        progress.advance()
    assert out.getvalue() == ""


def test_progress_heartbeat_writes_while_a_step_runs():
    wrote = threading.Event()

    class Stream(io.StringIO):
        def flush(self) -> None:
            wrote.set()

    stream = Stream()
    with Progress("long", 2, stream=stream, interval=0.01) as progress:
        progress.update(0, "step 1")
        assert wrote.wait(timeout=60)  # nothing advanced: the heartbeat wrote anyway
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("long: 0/2 (") and lines[0].endswith(") step 1")
    assert lines[-1].startswith("long: 0/2 (")


def test_ops_summary_gives_a_verdict_only_where_the_noise_allows(monkeypatch):
    from pybpf import maps
    from pybpf.bench import ops

    monkeypatch.setattr(maps, "accelerated", lambda: True)
    rounds = {"C libbpf": {"lookup": [1000.0, 1010.0, 1400.0]},   # spread 1%
              "Map (C accel)": {"lookup": [650.0, 660.0, 700.0]}}  # faster than C: disturbed
    rows = ops._rows("kernel", list(rounds.items()), "C libbpf")
    assert [r["path"] for r in rows] == ["C libbpf", "Map (C accel)"]
    assert rows[1]["ratio"] == 0.65 and rows[1]["spread"] == pytest.approx(0.015, abs=1e-3)
    line, = ops.summary(rows)
    assert line.startswith("  kernel m[k] vs C bpf_map_lookup_elem: 0.65x \u00b12%: below 1x "
                           "beyond the noise")
    assert line.endswith("(no verdict on the 1.3x target)")


def test_ops_runs_every_emulated_path_and_reports_rounds(capsys):
    from pybpf import cli
    from pybpf.bench import ops as ops_mod

    assert cli.main(["bench", "ops", "--backend", "emulated", "--n", "20", "--entries", "10",
                     "--repeat", "2", "--json", "--no-progress"]) == 0
    rows = json.loads(capsys.readouterr().out)
    lookups = {r["path"]: r for r in rows if r["op"] == "lookup"}
    assert "dict" in lookups and "System call" in lookups
    assert all(len(r["rounds"]) == 2 and r["ns"] == min(r["rounds"]) for r in lookups.values())
    assert lookups["System call"]["ref"] == "dict"
    # the emulated machine with and without modeled time, side by side
    assert lookups[ops_mod.UNMODELED_SYSTEM]["ref"] == "dict" and "Map (model off)" in lookups
