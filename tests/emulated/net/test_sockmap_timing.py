"""Modeled time on the emulated sockmap path: the psock charges its CPUs where its work runs
(emulated/net/skmsg.py), the modeled proxy throughput (bench/sockmap_model.py) is deterministic
and keeps the model's order (a bound psock never slower than an unbound one), and seed 001's
row in ``pybpf reproduce``."""

from __future__ import annotations

import argparse

import pytest

from pybpf import reproduce
from pybpf.bench import sockmap
from pybpf.bench.sockmap_model import model_sockmap, modeled_text
from pybpf.emulated.net.skmsg import SKB_FRAG
from pybpf.profiles import load_profile
from sockmap_lab import Proxy, pattern, wait_for

QUICK = {"skbs": 3, "warmup": 1}


VERDICT_SIDE = ("tcp_read_skb", "tcp_ack", "sk_psock_skb_redirect", "bpf_insn")
WORK_SIDE = ("kworker_wakeup", "tcp_sendmsg_skb", "skb_send_sock_frag", "tcp_write_xmit_skb",
             "tcp_v4_rcv_skb")


def test_two_runs_give_identical_figures():
    first, second = (model_sockmap("host", **QUICK).as_dict() for _ in range(2))
    assert first == second
    assert all(p["gbps"] > 0 and p["skbs"] == 3 for p in first["paths"].values())


@pytest.mark.parametrize("profile", ["host", "haswell-ep-2s", "sapphire-rapids-2s"])
def test_a_bound_psock_is_faster_than_an_unbound_one_and_both_slower_than_direct(profile):
    model = model_sockmap(profile, **QUICK)
    direct, unbound, bound = (model.paths[p] for p in ("direct", "unbound", "bound"))
    assert unbound.gbps < bound.gbps < direct.gbps
    # unbound, the work lands on the client's CPU, which the flow then waits for
    assert unbound.busiest_cpu == model.client_cpu
    assert set(unbound.cpu_ns) == {model.client_cpu, model.server_cpu}


def test_the_breakdown_names_the_psock_costs_on_the_cpus_that_do_them():
    model = model_sockmap("sapphire-rapids-2s", **QUICK)
    profile = load_profile("sapphire-rapids-2s")
    client, proxy = model.client_cpu, model.proxy_cpu
    unbound, bound = model.paths["unbound"].breakdown, model.paths["bound"].breakdown
    # skmsg.py charged these: the verdict in the client's softirq, the work where it runs
    assert set(VERDICT_SIDE + WORK_SIDE) <= set(unbound[client])
    assert set(VERDICT_SIDE) <= set(bound[client]) and "kworker_wakeup" not in bound[client]
    assert set(WORK_SIDE) <= set(bound[proxy]) and "tcp_read_skb" not in bound[proxy]
    # one wake-up, one skb sent and one verdict per skb: one at a time
    assert bound[proxy]["kworker_wakeup"] == pytest.approx(profile["net.kworker_wakeup"])
    assert bound[client]["tcp_read_skb"] == pytest.approx(profile["net.tcp_read_skb"])
    # __skb_send_sock's sendmsg per page frag: an MSS-sized skb (two 32 KiB frags) goes
    # out as two transmissions, each with c2's receive softirq, where the client sent one
    frags = -(-model.paths["bound"].skb_bytes // SKB_FRAG)
    assert frags == 2
    for event in ("skb_send_sock_frag", "tcp_sendmsg_skb", "tcp_write_xmit_skb",
                  "tcp_v4_rcv_skb"):
        assert bound[proxy][event] == pytest.approx(frags * profile[f"net.{event}"])
    assert bound[client]["tcp_write_xmit_skb"] == pytest.approx(profile["net.tcp_write_xmit_skb"])
    assert "sk_psock_skb_redirect" not in model.paths["direct"].breakdown[client]


def test_the_proxy_cpu_must_not_be_the_clients():
    client = model_sockmap("haswell-ep-2s", **QUICK).client_cpu
    with pytest.raises(ValueError, match="the client's CPU"):
        model_sockmap("haswell-ep-2s", proxy_cpu=client, **QUICK)
    with pytest.raises(ValueError, match="does not exist"):
        model_sockmap("haswell-ep-2s", proxy_cpu=20, **QUICK)


def test_a_run_whose_psock_split_or_moved_the_skbs_is_refused():
    from pybpf.bench.sockmap_model import _check_one_skb_each
    from pybpf.emulated.net.skmsg import SockmapCpuStats

    before = {0: SockmapCpuStats(), 1: SockmapCpuStats()}
    whole = {0: SockmapCpuStats(verdicts=3, backlog_runs=3, bytes=300), 1: SockmapCpuStats()}
    _check_one_skb_each("unbound", before, whole, 3, 0, 0, 100)
    split = {0: SockmapCpuStats(verdicts=4, backlog_runs=3, bytes=300), 1: SockmapCpuStats()}
    moved = {0: SockmapCpuStats(verdicts=3), 1: SockmapCpuStats(backlog_runs=3, bytes=300)}
    for after in (split, moved):
        with pytest.raises(RuntimeError, match="one skb per verdict on CPU 0"):
            _check_one_skb_each("unbound", before, after, 3, 0, 0, 100)


def test_a_path_the_host_split_runs_again_on_a_fresh_machine(monkeypatch):
    """A loaded host can split an skb (a full-suite run once did); the path is run again,
    and a host that keeps splitting gets the refusal."""
    from pybpf.bench import sockmap_model as sm

    check, calls = sm._check_one_skb_each, []

    def split_once(*args):
        calls.append(args[0])
        if len(calls) == 1:
            raise sm.NotOneSkbEach("split")
        check(*args)

    monkeypatch.setattr(sm, "_check_one_skb_each", split_once)
    assert set(model_sockmap("host", **QUICK).paths) == set(sm.PATHS)
    assert calls == ["unbound", "unbound", "bound"]

    def split_always(*args):
        raise sm.NotOneSkbEach("split")

    monkeypatch.setattr(sm, "_check_one_skb_each", split_always)
    with pytest.raises(sm.NotOneSkbEach):
        model_sockmap("host", **QUICK)


def test_delivery_to_ingress_msg_is_charged(emulated):
    proxy = Proxy(emulated, mode="ingress")
    try:
        data = pattern(4096)
        proxy.c1.sendall(data)
        got = bytearray()
        while len(got) < len(data):
            got += emulated.sock_recv(proxy.c2, 8192, timeout=10)
        assert got == data
    finally:
        proxy.close()
    timing = emulated.machine.timing
    assert any(timing.counts[cpu].get("sk_psock_ingress_msg")
               for cpu in range(emulated.machine.num_cpus))


def test_a_batched_send_charges_every_frag_it_sent_and_each_work_run_one_wakeup(emulated):
    proxy = Proxy(emulated)
    try:
        data = pattern(4 << 20, seed=3)
        sender = proxy.send_in_thread(data, 256 << 10)
        got = bytearray()
        while len(got) < len(data):
            got += emulated.sock_recv(proxy.c2, 1 << 20, timeout=10)
        sender.join(10)
        assert got == data
        assert wait_for(lambda: sum(s.bytes for s in emulated.sockmap_stats().values())
                        == len(data))
    finally:
        proxy.close()
    stats = emulated.sockmap_stats().values()
    counts = emulated.machine.timing.counts
    charged = {event: sum(c.get(event, 0) for c in counts)
               for event in ("tcp_read_skb", "skb_send_sock_frag", "tcp_sendmsg_skb",
                             "tcp_write_xmit_skb", "kworker_wakeup")}
    verdicts = sum(s.verdicts for s in stats)
    assert charged["tcp_read_skb"] == verdicts
    # __skb_send_sock sends each page frag of each skb with a sendmsg of its own, which
    # transmits it: whatever the backlog batched into one host sendmsg, every skb the verdict
    # took costs between one such send and one per SKB_FRAG it holds (an skb started a frag)
    frags = charged["skb_send_sock_frag"]
    assert frags == charged["tcp_sendmsg_skb"] == charged["tcp_write_xmit_skb"]
    assert max(verdicts, -(-len(data) // SKB_FRAG)) <= frags <= verdicts + len(data) // SKB_FRAG
    assert charged["kworker_wakeup"] == sum(s.backlog_runs for s in stats) > 0


def test_bench_sockmap_has_the_modeled_block():
    doc = sockmap.modeled_block("haswell-ep-2s")
    assert doc["profile"] == "haswell-ep-2s" and set(doc["paths"]) == {"direct", "unbound",
                                                                       "bound"}
    assert doc["paths"]["direct"]["x_direct"] == 1.0
    for path in doc["paths"].values():
        assert {"gbps", "x_direct", "cpu_ns", "breakdown", "busiest_cpu", "skb_bytes"} <= set(path)
    text = modeled_text(doc)
    assert "modeled on haswell-ep-2s" in text and "unbound cpu" in text
    assert "error" in sockmap.modeled_block(str(__file__))  # not a profile: a reason, no crash


def test_reproduce_models_seed_001_within_its_target():
    run = reproduce.seed_001(argparse.Namespace(profile=None, kernel=False))
    assert run.modeled.profile == "sapphire-rapids-2s" and run.modeled.ratio > 1
    table = reproduce.seeds_table({"001": run.modeled})
    row = next(line for line in table.splitlines() if line.startswith("001 "))
    assert "Gbit/s" in row and "1.47-2.45x" in row and "within" in row
    assert "backlog kworker too" in run.section and "target 1.47-2.45x" in run.section
