"""bench.xdp_tools: reading xdp-bench's statistics; a tool that cannot run says why."""

from __future__ import annotations

import stat

import pytest

from pybpf import netns
from pybpf.bench.xdp_tools import (
    ReferenceUnavailable,
    find_tools,
    full_rate_kthread,
    parse_rates,
    run_reference,
)
from pybpf.testing.veth import KernelVethPair

# xdp-bench redirect-cpu -e output, three intervals (shortened from a run on this machine)
SAMPLE = """\
vB->?                           2 rx/s                  0 err,drop/s
  receive total                 2 pkt/s                 0 drop/s                0 error/s
  kthread total                 2 pkt/s                 0 drop/s                2 sched
vB->?                   1,787,255 rx/s                  0 err,drop/s
  receive total         1,787,255 pkt/s                 0 drop/s                0 error/s
    cpu:0               1,787,255 pkt/s                 0 drop/s                0 error/s
  enqueue to cpu 1      1,787,256 pkt/s         1,446,065 drop/s             8.00 bulk-avg
  kthread total           339,138 pkt/s                 0 drop/s              151 sched
    cpu:1                 339,138 pkt/s                 0 drop/s              151 sched
vB->?                     223,358 rx/s                  0 err,drop/s
  receive total           223,358 pkt/s                 0 drop/s                0 error/s
  kthread total            43,816 pkt/s                 0 drop/s               22 sched
vB->?                           0 rx/s                  0 err,drop/s
  receive                       0 pkt/s                 0 drop/s                0 error/s
  kthread                       0 pkt/s                 0 drop/s                0 sched
"""


def test_rates_are_read_per_interval_and_only_full_rate_seconds_count():
    receive, kthread = parse_rates(SAMPLE)
    assert receive == [2, 1787255, 223358, 0] and kthread == [2, 339138, 43816, 0]
    assert full_rate_kthread(receive, kthread) == (339138, 1787255, 1)


def test_no_traffic_is_no_figure():
    with pytest.raises(ReferenceUnavailable, match="no traffic"):
        full_rate_kthread([0, 0], [0, 0])


def test_a_missing_tool_names_itself(tmp_path):
    with pytest.raises(ReferenceUnavailable, match="xdp-bench is not installed"):
        find_tools(str(tmp_path / "nope"), None)


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
def test_a_tool_that_fails_to_start_is_reported_in_its_own_words(tmp_path):
    fake = tmp_path / "xdp-bench"
    fake.write_text("#!/bin/sh\necho \"libbpf: prog 'tp_xdp_redirect_map_err': failed to "
                    "find kernel BTF type ID\"\necho 'Failed to attach XDP program'\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with KernelVethPair("vA", "vB", "fd00::1", "fd00::2") as pair:
        receiver = pair.udp_receiver(9000, v6=True)
        with pytest.raises(ReferenceUnavailable, match="Failed to attach XDP program"):
            run_reference(pair, (str(fake), "/bin/true"), cpu=1, gen_cpu=0, qsize=64,
                          frames=1, frame_len=80, receiver=receiver)
