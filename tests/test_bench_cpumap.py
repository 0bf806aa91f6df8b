"""pybpf bench cpumap: the same measurement on both backends, reported with its spread."""

from __future__ import annotations

import json

import pytest

from pybpf import netns
from pybpf.cli import main


def run(capsys, *args: str) -> dict:
    assert main(["bench", "cpumap", "--json", "--no-progress", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_emulated_rows_show_the_mechanism(capsys):
    doc = run(capsys, "--backend", "emulated", "--runs", "2", "--emulated-frames", "256")
    rows = {row["gro"]: row for row in doc["rows"]}
    assert set(rows) == {True, False} and all(r["backend"] == "emulated" for r in doc["rows"])
    on, off = rows[True], rows[False]
    assert len(on["kthread_mpps"]["runs"]) == 2 and on["kthread_mpps"]["median"] > 0
    assert on["frames_per_skb"]["median"] > 8 and off["frames_per_skb"]["median"] == 1
    assert off["counters"]["heads_recycled"] == 0  # a fresh machine, nothing merged
    assert on["counters"]["heads_recycled"] > on["counters"]["skb_heads"] // 2
    assert all(run["kthread"] == 256 for run in on["runs"])
    # the modeled kthread rate of the declared machine (default: the host profile)
    assert on["modeled"]["profile"] == off["modeled"]["profile"] == "host"
    assert on["modeled"]["mpps"] > off["modeled"]["mpps"] > 0
    assert on["modeled"]["frames_per_skb"] == 64 and off["modeled"]["heads_recycled"] == 0


def test_the_modeled_column_is_for_the_declared_profile(capsys):
    assert main(["bench", "cpumap", "--backend", "emulated", "--runs", "1",
                 "--emulated-frames", "64", "--no-progress", "--profile",
                 "sapphire-rapids-2s"]) == 0
    out = capsys.readouterr().out
    assert "modeled Mpps (sapphire-rapids-2s)" in out
    assert "a saturated cpumap kthread on profile sapphire-rapids-2s" in out


def test_an_unknown_profile_is_one_error_line(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "cpumap", "--backend", "emulated", "--profile", "/no/such.toml"])
    assert "no profile '/no/such.toml'" in capsys.readouterr().err


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
def test_kernel_rows_count_every_frame(kernel, capsys):
    doc = run(capsys, "--backend", "kernel", "--runs", "1", "--frames", "20000",
              "--no-reference")
    for row in doc["rows"]:
        (only,) = row["runs"]
        # vB's stack may add its own frames (IPv6 neighbour discovery, MLD), and one of those
        # can be enqueued before the counting window opens and taken after: a frame or two
        # either way, never the traffic's
        assert only["enqueued"] >= 20000
        assert abs(only["kthread"] + only["ring_drops"] - only["enqueued"]) <= 2
        assert row["kthread_mpps"]["median"] > 0


def test_a_cpu_the_machine_lacks_is_one_error_line(capsys):
    assert main(["bench", "cpumap", "--backend", "emulated", "--cpu", "4000"]) == 1
    assert "CPU 4000 does not exist" in capsys.readouterr().err
