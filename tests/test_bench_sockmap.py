"""pybpf bench sockmap: arguments checked first, every mode moves checked bytes, the namespace
is gone after a failure, and bytes that arrive before the sockets enter the map still arrive."""

from __future__ import annotations

import dataclasses
import json
import os
import select
import socket
import threading
import time

import pytest

from pybpf import cli, netns
from pybpf.bench import sockmap, sockmap_paths
from pybpf.bench.sockmap_paths import COOKIE_LEN, PATTERN, BuiltinReceiver, SockmapPath
from pybpf.cli import main

NETNS_SKIP = pytest.mark.skipif(netns.unavailable() is not None,
                                reason=str(netns.unavailable()))
QUICK = ["--traffic", "builtin", "--rounds", "1", "--duration", "0.3", "--timeout", "10",
         "--no-progress"]


def run_json(capsys, *args: str) -> dict:
    assert main(["bench", "sockmap", "--json", *QUICK, *args]) == 0
    return json.loads(capsys.readouterr().out)


def net_namespace_fds() -> set[str]:
    """The network namespaces this process holds open by fd (one of its own is not one)."""
    own = os.readlink("/proc/self/ns/net")
    links = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("net:[") and target != own:
            links.add(target)
    return links


@pytest.mark.parametrize("args, message", [
    (["--client-cpu", str(os.cpu_count())], "--client-cpu must be <="),
    (["--proxy-cpu", "-1"], "--proxy-cpu must be >= 0"),
    (["--duration", "nan"], "finite"),
    (["--duration", "inf"], "finite"),
    (["--duration", "0"], "--duration must be > 0"),
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--modes", "direct,bogus"], "unknown mode 'bogus'"),
    (["--plot", "/no/such/dir/out.png"], "there is no directory"),
    (["--plot", "out.jpg"], "--plot writes .png, .svg, .pdf"),
    (["--traffic", "carrier-pigeon"], "--traffic: choose"),
    (["--rcvbuf", "-1"], "--rcvbuf must be >= 0"),
    (["--model-profile", "nosuch"], "no profile 'nosuch'"),
])
def test_bad_arguments_are_one_usage_error_before_any_work(args, message, capsys,
                                                          monkeypatch):
    never_run = dataclasses.replace(cli.BENCHMARKS["sockmap"],
                                    run=lambda ns: pytest.fail("work started"))
    monkeypatch.setitem(cli.BENCHMARKS, "sockmap", never_run)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "sockmap", *args])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], errors


@NETNS_SKIP
def test_direct_user_space_and_kernel_sockmap_move_checked_bytes(kernel, capsys, tmp_path):
    plot = tmp_path / "sockmap.png"
    doc = run_json(capsys, "--modes", "direct,user-copy,user-splice,kernel-egress",
                   "--plot", str(plot))
    rows = {row["mode"]: row for row in doc["rows"]}
    assert list(rows) == ["direct", "user-copy", "user-splice", "kernel-egress"]
    for row in rows.values():
        assert row["status"] == "ok" and not row["failures"], row
        (only,) = row["runs"]
        assert only["complete"] and only["bytes"] > COOKIE_LEN  # every byte, checked
        assert row["gbps"]["median"] > 0 and set(row["cpu_busy"]) == {
            str(c) for c in range(os.cpu_count())}
    assert rows["direct"]["ratio_to_direct"]["value"] == 1.0
    # the kernel's redirect runs in a kworker (the psock backlog): its time shows per CPU
    assert sum(cpu["kworker"] for cpu in rows["kernel-egress"]["cpu_busy"].values()) > 0
    assert plot.stat().st_size > 0


def test_json_schema(capsys, monkeypatch):
    monkeypatch.setattr("pybpf.backends.bpf_allowed", lambda: False)
    doc = run_json(capsys, "--modes", "direct,kernel-egress")
    assert set(doc) == {"config", "machine", "rows", "notes", "modeled"}
    assert doc["config"]["model_profile"] == "sapphire-rapids-2s"
    assert set(doc["modeled"]["paths"]) == {"direct", "unbound", "bound"}
    assert doc["config"]["modes"] == ["direct", "kernel-egress"]
    assert doc["config"]["traffic"] == "builtin"
    direct, kernel_row = doc["rows"]
    assert set(direct) == {"mode", "about", "traffic", "status", "error", "failures", "gbps",
                           "ratio_to_direct", "sent_gbps", "complete", "cpu_busy", "workers",
                           "runs"}
    assert set(direct["gbps"]) == {"median", "spread", "min", "max", "runs"}
    assert set(direct["runs"][0]) == {"gbps", "bytes", "sent_gbps", "complete", "seconds",
                                      "cpu", "workers"}
    # without bpf(2) the kernel modes are refused in one line, and the rest still ran
    assert kernel_row["status"] == "refused" and "bpf(2)" in kernel_row["error"]
    assert kernel_row["gbps"] == {} and direct["status"] == "ok"
    assert sum("refused" in note for note in doc["notes"]) == 1


def test_text_table_says_why_a_mode_did_not_run(capsys, monkeypatch):
    monkeypatch.setattr("pybpf.backends.bpf_allowed", lambda: False)
    assert main(["bench", "sockmap", *QUICK, "--modes", "direct,kernel-ingress-rps"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["mode", "traffic", "Gbit/s"]
    assert "kernel-ingress-rps (builtin): refused: bpf(2) is not allowed here" in out


def test_emulated_rows_run_and_show_where_the_backlog_work_ran(capsys):
    doc = run_json(capsys, "--modes", "direct,emulated,emulated-cpu,emulated-kfunc")
    direct, unbound, bound, kfunc = doc["rows"]
    assert direct["status"] == "ok"
    for row in (unbound, bound, kfunc):
        assert row["status"] == "ok", row
        assert all(run["complete"] for run in row["runs"]) and row["workers"]
    # with target_cpu, or the verdict's bpf_sk_skb_set_redirect_cpu, the psocks' backlog work
    # runs on that CPU (--proxy-cpu, default 1)
    for row in (bound, kfunc):
        runs_on = {cpu for cpu, w in row["workers"].items() if w["backlog_runs"]}
        assert runs_on == {"1"}, row["workers"]


def test_rcvbuf_is_the_receiving_sockets():
    receiver = BuiltinReceiver(None, None, time.monotonic() + 5, rcvbuf=1 << 20)
    try:
        with socket.create_connection(("127.0.0.1", receiver.port), timeout=5) as client:
            accepted = receiver.peer_socket(client.getsockname(), timeout=5)
            # the kernel doubles SO_RCVBUF, capped by net.core.rmem_max
            assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) > 256 * 1024
    finally:
        receiver.close()


@NETNS_SKIP
def test_the_namespace_is_gone_after_a_failure(capsys, monkeypatch):
    before = net_namespace_fds()

    def interrupted(*args, **kwargs):
        assert net_namespace_fds() - before  # the benchmark's namespace is open here
        raise KeyboardInterrupt

    monkeypatch.setattr(sockmap, "builtin_run", interrupted)
    threads = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        main(["bench", "sockmap", *QUICK, "--modes", "user-copy"])
    assert net_namespace_fds() == before
    deadline = time.monotonic() + 5
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads  # no proxy or receiver thread left behind


@NETNS_SKIP
def test_a_stalled_run_times_out_with_its_reason(kernel, capsys, monkeypatch):
    # without forwarding what arrived before the insertion, the cookie never arrives: the
    # iperf3 trap; the run fails at its deadline instead of hanging the benchmark
    monkeypatch.setattr(SockmapPath, "_forward_queued", lambda self, src, dst: None)
    start = time.monotonic()
    doc = run_json(capsys, "--modes", "kernel-egress", "--timeout", "2")
    (row,) = doc["rows"]
    assert row["gbps"] == {} and f"the first {COOKIE_LEN} bytes" in row["failures"][0]
    assert time.monotonic() - start < 10


def _wait_readable(sock: socket.socket) -> None:
    assert select.select([sock], [], [], 5)[0], "nothing arrived"


@NETNS_SKIP
@pytest.mark.parametrize("ingress", [False, True], ids=["egress", "ingress"])
def test_bytes_sent_before_insertion_arrive_first(kernel, ingress):
    with netns.NetNamespace() as ns:
        receiver = BuiltinReceiver(ns, None, time.monotonic() + 10)
        proxy_side = sockmap_paths.listener(ns)
        path = SockmapPath(kernel, ingress=ingress, target_cpu=None, receiver=receiver)
        with ns.entered():
            client = socket.create_connection(proxy_side.getsockname(), timeout=5)
            upstream = socket.create_connection(("127.0.0.1", receiver.port), timeout=5)
        p1, _ = proxy_side.accept()
        try:
            client.sendall(PATTERN[:COOKIE_LEN])  # before the proxy's sockets are in the map
            _wait_readable(p1)
            path.add_pair(p1, upstream)
            assert receiver.cookie_seen.wait(5)
            client.sendall(PATTERN[COOKIE_LEN:100_000])  # through the redirect, after it
            receiver.expected = 100_000
            receiver.worker.join(10)
            assert receiver.worker.error is None and receiver.received == 100_000
        finally:
            path.close()
            receiver.close()
            for sock in (client, upstream, p1, proxy_side):
                sock.close()


@NETNS_SKIP
def test_a_failing_proxy_ends_its_run_at_once(kernel, capsys, monkeypatch):
    def refused(self, key, sock):
        raise OSError(22, "map_update_elem refused")

    monkeypatch.setattr(SockmapPath, "_insert", refused)
    start = time.monotonic()
    doc = run_json(capsys, "--modes", "direct,kernel-egress", "--timeout", "30")
    direct, row = doc["rows"]
    assert direct["status"] == "ok" and row["gbps"] == {}
    assert "map_update_elem refused" in row["failures"][0]
    assert time.monotonic() - start < 15  # not the 30 s deadline
