"""The ``pybpf`` command line: usage errors, ``pybpf maps`` on both backends, and its output
checked against the real bpftool on the kernel where bpftool is installed."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from pybpf import cli


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybpf", *args], capture_output=True,
                          text=True, env=dict(os.environ, **env))


@pytest.mark.parametrize("args", [[], ["nosuch"], ["maps", "--backend", "nope"],
                                  ["maps", "--unknown"]])
def test_bad_arguments_print_usage_and_exit_2(args):
    result = run_cli(*args)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: pybpf")


@pytest.mark.parametrize("args, usage", [
    (["map-perf", "1", "1", "0", "10", "5"], "usage: pybpf map-perf"),
    (["bench", "ops", "--bogus"], "usage: pybpf bench ops"),
    (["bench", "htab-mem", "--bogus"], "usage: pybpf bench htab-mem"),
])
def test_unrecognized_arguments_show_the_subcommands_usage(args, usage):
    result = run_cli(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(usage)
    assert "unrecognized arguments" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["bench", "interp", "--iterations", "-5"], "--iterations must be >= 1, got -5"),
    (["bench", "ops", "--chunk", "x"], "--chunk must be an integer, got 'x'"),
    (["bench", "htab-mem", "-p", "0"], "--producers must be >= 1, got 0"),
    (["reproduce", "--events", "-3"], "--events must be >= 1, got -3"),
    (["map-perf", "512", "--backend", "emulated", "--cpus", "4", "--parent-cpu", "4"],
     "--parent-cpu 4: the machine has CPUs 0-3"),
])
def test_out_of_range_numbers_are_usage_errors_naming_the_argument(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: pybpf") and message in err


def test_help_lists_the_commands():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "maps" in result.stdout


def test_every_registered_command_resolves():
    parser, runners = cli.build_parser()
    assert set(runners) == set(cli.COMMANDS)
    assert all(callable(r) for r in runners.values())


def test_maps_on_the_emulated_backend_shows_and_dumps_every_type():
    result = run_cli("maps", "--backend", "emulated")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for kind in ("hash", "array", "percpu_hash", "percpu_array", "lru_hash", "lru_percpu_hash",
                 "lpm_trie", "array_of_maps", "hash_of_maps", "queue", "stack",
                 "bloom_filter"):
        assert re.search(rf"^\d+: {kind}  name demo_\w+  flags 0x[0-9a-f]+$", out, re.M), kind
    assert "key: 01 00 00 00  value: 64 00 00 00 00 00 00 00\n" in out
    assert "value (CPU 01): 0b 00 00 00\n" in out
    assert out.count("Found 3 elements") == 1
    assert "$ bpftool map peek" in out and "value: 03 00 00 00\n" in out  # the stack's top


def test_hex_bytes_groups_like_fprint_hex():
    data = bytes(range(20))
    assert cli.hex_bytes(data) == ("00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f\n"
                                   "10 11 12 13")
    assert cli.hex_bytes(b"") == ""


def test_type_names_are_libbpfs():
    assert cli.type_name(1) == "hash" and cli.type_name(30) == "bloom_filter"
    assert cli.type_name(999) == "type 999"


@pytest.mark.skipif(shutil.which("bpftool") is None, reason="bpftool is not installed")
def test_show_and_dump_match_the_real_bpftool(kernel, tmp_path):
    if not os.path.ismount("/sys/fs/bpf"):
        pytest.skip("bpffs is not mounted at /sys/fs/bpf")
    for title, build in cli.demo_maps():
        with build(kernel) as m:
            path = f"/sys/fs/bpf/pybpf_cli_{os.getpid()}_{title}"
            m.pin(path)
            try:
                show = subprocess.run(["bpftool", "map", "show", "pinned", path],
                                      capture_output=True, text=True, check=True).stdout
                dump = subprocess.run(["bpftool", "map", "dump", "pinned", path],
                                      capture_output=True, text=True).stdout
            finally:
                os.unlink(path)
            # bpftool adds "pids" lines for processes holding the map (this one).
            show = re.sub(r"\n\tpids [^\n]*", "", show)
            assert cli.bpftool_show(m) == show, title
            assert cli.bpftool_dump(m) == dump, title


@pytest.mark.skipif(shutil.which("bpftool") is None, reason="bpftool is not installed")
def test_json_show_and_dump_match_bpftool_j(kernel):
    if not os.path.ismount("/sys/fs/bpf"):
        pytest.skip("bpffs is not mounted at /sys/fs/bpf")
    for title, build in cli.demo_maps():
        with build(kernel) as m:
            path = f"/sys/fs/bpf/pybpf_cli_json_{os.getpid()}_{title}"
            m.pin(path)
            try:
                show = json.loads(subprocess.run(["bpftool", "-j", "map", "show", "pinned", path],
                                                 capture_output=True, text=True,
                                                 check=True).stdout)
                dump = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "pinned",
                                                  path], capture_output=True, text=True).stdout)
            finally:
                os.unlink(path)
            show.pop("pids", None)
            assert cli.bpftool_show_json(m) == show, title
            assert cli.bpftool_dump_json(m) == dump, title


def test_maps_json_on_the_emulated_backend():
    result = run_cli("maps", "--backend", "emulated", "--json")
    assert result.returncode == 0, result.stderr
    shown = {entry["map"]: entry for entry in json.loads(result.stdout)}
    assert shown["hash"]["show"]["type"] == "hash"
    assert {"key": ["0x01", "0x00", "0x00", "0x00"],
            "value": ["0x64"] + ["0x00"] * 7} in shown["hash"]["dump"]
    assert shown["percpu_hash"]["dump"][0]["values"][0]["cpu"] == 0
    assert shown["queue"]["dump"] == []


def test_maps_on_the_kernel_backend_succeeds(kernel):  # kernel: skips where bpf(2) is denied
    result = run_cli("maps", "--backend", "kernel")
    assert result.returncode == 0, result.stderr
    assert "memlock" in result.stdout


@pytest.mark.parametrize("args", [["maps", "--backend", "kernel"],
                                  ["map-perf", "0", "2", "0", "10", "--backend", "kernel"],
                                  ["reproduce", "--backend", "kernel", "--events", "5"]])
def test_bpf_denied_is_one_error_line_with_the_way_out(args, monkeypatch, capsys):
    from pybpf.errors import PERMISSION_HINT, bpf_error
    from pybpf.kernel import system as kernel_system

    def denied(self):
        raise bpf_error(errno.EPERM, "map_create", map="array map (probing bpf(2))",
                        detail="this process may not use bpf(2)")

    monkeypatch.setattr(kernel_system.KernelSystem, "__init__", denied)
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "Traceback" not in err
    assert "EPERM" in err and PERMISSION_HINT in err


def test_any_bpf_error_is_one_error_line_not_a_traceback(monkeypatch, capsys):
    from pybpf.errors import bpf_error
    from pybpf.kernel import system as kernel_system

    def no_tracefs(self):
        raise bpf_error(errno.ENOENT, "attach_tracepoint", map="tracepoint syscalls/x",
                        detail="is tracefs mounted?")

    monkeypatch.setattr(kernel_system.KernelSystem, "__init__", no_tracefs)
    assert cli.main(["maps", "--backend", "kernel"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "ENOENT" in err and "tracefs" in err


def test_differential_compares_two_backends_and_prints_the_tally():
    result = run_cli("differential", "--a", "emulated", "--b", "emulated", "--sequences", "1",
                     "--family", "hash")
    assert result.returncode == 0, result.stderr
    assert "hash: 1 sequences" in result.stdout
    assert "0 mismatching sequences" in result.stdout
