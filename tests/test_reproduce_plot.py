"""``pybpf reproduce --plot DIR``: seed 001's per-CPU timelines of the modeled sockmap proxy
(the scheduler's recorded intervals) and seed 003's RCU queue and memory held, as PNGs."""

from __future__ import annotations

import argparse

import pytest

from pybpf import reproduce
from pybpf.bench.args import plot_dir_arg
from pybpf.bench.sockmap_model import model_sockmap
from pybpf.emulated.machine.sched import CPU_STATES

QUICK = {"skbs": 3, "warmup": 1}
PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == PNG


def test_the_proxy_timelines_add_up_to_the_window_on_every_cpu_and_are_off_by_default():
    window = reproduce.SOCKMAP_TIMELINE_NS
    model = model_sockmap("sapphire-rapids-2s", timeline_ns=window, **QUICK)
    for name in ("direct", "unbound", "bound"):
        simulated = model.paths[name].simulated
        assert simulated.ns > window  # the window ends inside the measured skbs
        assert set(simulated.timeline) == set(simulated.cpus)
        for intervals in simulated.timeline.values():
            assert intervals[0][0] == 0 and intervals[-1][1] == pytest.approx(window)
            assert sum(t1 - t0 for t0, t1, _ in intervals) == pytest.approx(window)
            assert {state for _, _, state in intervals} <= set(CPU_STATES)
    unbound = model.paths["unbound"].simulated.timeline[model.client_cpu]
    assert {"user", "softirq", "kworker"} <= {state for _, _, state in unbound}
    plain = model_sockmap("sapphire-rapids-2s", **QUICK)
    assert all(p.simulated.timeline == {} for p in plain.paths.values())
    assert plain.paths["unbound"].gbps == model.paths["unbound"].gbps  # recording is free


def test_seed_001_and_003_write_their_pngs(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    model = model_sockmap("sapphire-rapids-2s", timeline_ns=reproduce.SOCKMAP_TIMELINE_NS,
                          **QUICK)
    timelines = reproduce.sockmap_timelines_plot(str(tmp_path), model)
    assert timelines == str(tmp_path / "seed-001-cpu-timelines.png") and _is_png(timelines)
    run = reproduce.seed_003(argparse.Namespace(profile=None, kernel=False, events=300,
                                                plot=str(tmp_path)))
    (rcu,) = run.plot(str(tmp_path))
    assert rcu == str(tmp_path / "seed-003-rcu-queue.png") and _is_png(rcu)


def test_seed_003_keeps_the_rcu_samples_the_plot_draws():
    runs = reproduce.alloc_runs(argparse.Namespace(profile=None, events=300))
    before, after = (runs[d] for d in reproduce.ALLOC_DESIGNS)
    assert before.rcu_samples and before.grace_periods
    assert max(queued for _, _, queued, _ in before.rcu_samples) > 0
    assert all(start <= end for start, end in before.grace_periods)
    assert not any(queued for _, _, queued, _ in after.rcu_samples)  # no call_rcu after


def test_a_plot_directory_is_checked_before_the_run(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    assert plot_dir_arg(str(tmp_path / "new" / "dir")) == str(tmp_path / "new" / "dir")
    (tmp_path / "file").write_text("")
    with pytest.raises(argparse.ArgumentTypeError, match="is not a directory"):
        plot_dir_arg(str(tmp_path / "file"))
    with pytest.raises(argparse.ArgumentTypeError, match="empty"):
        plot_dir_arg("")
