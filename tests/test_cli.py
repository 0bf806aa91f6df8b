"""The ``pybpf`` command line: usage errors, ``pybpf maps`` on both backends, and its output
checked against the real bpftool on the kernel where bpftool is installed."""

from __future__ import annotations

import argparse
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
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == list(cli.COMMANDS)
    (bench,) = [a for a in sub.choices["bench"]._actions
                if isinstance(a, argparse._SubParsersAction)]
    assert list(bench.choices) == list(cli.BENCHMARKS)
    for command in [*cli.COMMANDS.values(), *cli.BENCHMARKS.values()]:
        assert command.help and callable(command.configure_parser) and callable(command.run)


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


def test_differential_fuzz_runs_random_system_calls_and_prints_the_figures():
    result = run_cli("differential", "--a", "emulated", "--b", "emulated", "--fuzz", "5",
                     "--calls", "20", "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert "system fuzz emulated vs emulated: 5 sequences, 100 calls" in result.stdout
    assert "0 disagreements" in result.stdout and "0 failures" in result.stdout


# -- bad input on every command: found up front, one line, exit 2 (usage) or 1 (refused) ---------

def bench_commands() -> list[list[str]]:
    """Every command and benchmark, as the argv prefix that reaches it."""
    return ([[name] for name in cli.COMMANDS if name != "bench"]
            + [["bench", name] for name in cli.BENCHMARKS])


def assert_usage_error(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err
    command = argv[:2] if argv[0] == "bench" else argv[:1]
    assert err.startswith(f"usage: pybpf {' '.join(command)} "), err
    last = err.rstrip("\n").splitlines()[-1]
    assert "error: " in last and message in last, last


BAD_VALUES = [
    # map-perf: the sample's arguments, each bounded by what it feeds
    (["map-perf", "abc"], "TEST_FLAGS must be an integer"),
    (["map-perf", "4097"], "bits outside the 11 tests (0x1000)"),
    (["map-perf", "-2"], "TEST_FLAGS -2 is negative"),
    (["map-perf", "1", "-1"], "NUM_PROCS must be >= 0"),
    (["map-perf", "1", "1025"], "NUM_PROCS must be <= 1024"),
    (["map-perf", "1", "1", "-1"], "NUM_ENTRIES must be >= 0"),
    (["map-perf", "1", "1", "4294967296"], "NUM_ENTRIES must be <= 4294967295"),
    (["map-perf", "1", "1", "0", "0"], "MAX_CNT must be >= 1"),
    (["map-perf", "1", "1", "0", "nan"], "MAX_CNT must be an integer"),
    (["map-perf", "1", "1", "0", "4294967296"], "MAX_CNT must be <= 4294967295"),
    (["map-perf", "1", "--cpus", "0"], "--cpus must be >= 1"),
    (["map-perf", "1", "--cpus", "100000"], "--cpus must be <= 1024"),
    (["map-perf", "1", "--cpus", "inf"], "--cpus must be an integer"),
    (["map-perf", "1", "--nodes", "0"], "--nodes must be >= 1"),
    (["map-perf", "1", "--cpus", "2", "--nodes", "5"], "--nodes 5 exceeds --cpus 2"),
    (["map-perf", "1", "--nodes", "1000"], "every node needs a CPU"),
    (["map-perf", "4", "3", "--backend", "emulated", "--cpus", "2"],
     "NUM_PROCS 3 exceeds the emulated machine's 2 CPUs"),
    (["map-perf", "1", "--numa-node", "-1"], "--numa-node takes"),
    (["map-perf", "1", "--numa-node", "99999999999999999999"], "node number 0-1023"),
    (["map-perf", "1", "--parent-cpu", "-1"], "--parent-cpu must be >= 0"),
    (["map-perf", "1", "--backend", "emulated", "--cpus", "2", "--parent-cpu", "2"],
     "--parent-cpu 2: the machine has CPUs 0-1"),
    (["map-perf", "1", "--cpus", "2", "--baseline"], "--baseline and --c-trigger"),
    (["map-perf", "1", "--trigger", "fast"], "invalid choice"),
    (["map-perf", "1", "--htab-mem", "slab"], "invalid choice"),
    (["map-perf", "1", "--backend", "kernel", "--c-trigger", "/nonexistent"],
     "not an executable"),
    (["map-perf", "1", "--backend", "kernel", "--c-trigger", "/bin/true"],
     "printed no map-perf rate line"),
    # bench htab-mem
    (["bench", "htab-mem", "-d", "nan"], "--duration takes a finite number of seconds"),
    (["bench", "htab-mem", "-d", "inf"], "--duration takes a finite number of seconds"),
    (["bench", "htab-mem", "-d", "-1"], "--duration must be > 0 seconds"),
    (["bench", "htab-mem", "-d", "3601"], "--duration must be <= 3600 seconds"),
    (["bench", "htab-mem", "-d", "two"], "--duration takes seconds, got 'two'"),
    (["bench", "htab-mem", "-w", "nan"], "--warmup takes a finite number of seconds"),
    (["bench", "htab-mem", "--warmup=-inf"], "--warmup takes a finite number of seconds"),
    (["bench", "htab-mem", "--warmup=-0.5"], "--warmup must be >= 0 seconds"),
    (["bench", "htab-mem", "-p", "0"], "--producers must be >= 1"),
    (["bench", "htab-mem", "-p", "4096"], "--producers must be <= 1024"),
    (["bench", "htab-mem", "--value-size", "0"], "--value-size must be >= 1"),
    (["bench", "htab-mem", "--value-size", "5000"], "too big value size"),
    (["bench", "htab-mem", "--cpus", "2", "--nodes", "5", "--backend", "emulated"],
     "--nodes 5 exceeds --cpus 2"),
    (["bench", "htab-mem", "--cpus", "100000"], "--cpus must be <= 1024"),
    (["bench", "htab-mem", "--nodes", "1000", "--backend", "emulated"],
     "every node needs a CPU"),
    (["bench", "htab-mem", "--preallocated", "--flavour", "bpf_ma"],
     "--preallocated runs only the prealloc flavour"),
    (["bench", "htab-mem", "--use-case", "nope"], "invalid choice"),
    # bench ops
    (["bench", "ops", "--entries", "0"], "--entries must be >= 1"),
    (["bench", "ops", "--entries", "4294967296"], "--entries must be <= 1048576"),
    (["bench", "ops", "--chunk", "4294967296"], "--chunk must be <= 1048576"),
    (["bench", "ops", "--chunk", "-1"], "--chunk must be >= 1"),
    (["bench", "ops", "--n", "0"], "--n must be >= 1"),
    (["bench", "ops", "--n", "1e9"], "--n must be an integer"),
    (["bench", "ops", "--n", "1000000000"], "--n must be <= 100000000"),
    (["bench", "ops", "--repeat", "1000"], "--repeat must be <= 100"),
    (["bench", "ops", "--backend", "all"], "invalid choice"),
    # bench interp
    (["bench", "interp", "--iterations", "0"], "--iterations must be >= 1"),
    (["bench", "interp", "--iterations", "5000000000"],
     "--iterations must be <= 2147483647 (the loop bound is an imm32)"),
    (["bench", "interp", "--jit-repeat", "4294967296"], "--jit-repeat must be <= 4294967295"),
    (["bench", "interp", "--kernel-repeat", "0"], "--kernel-repeat must be >= 1"),
    (["bench", "interp", "--programs", "nope"], "invalid choice"),
    # reproduce
    (["reproduce", "--events", "0"], "--events must be >= 1"),
    (["reproduce", "--events", "4294967296"], "--events must be <= 4294967295"),
    (["reproduce", "--kernel-events", "x"], "--kernel-events must be an integer"),
    (["reproduce", "--backend", "both"], "invalid choice"),
    (["maps", "--backend", "both"], "invalid choice"),
    # differential
    (["differential", "--sequences", "0"], "--sequences must be >= 1"),
    (["differential", "--sequences", "10000000"], "--sequences must be <= 1000000"),
    (["differential", "--shrink", "-5"], "--shrink must be >= 0"),
    (["differential", "--seed", "1e3"], "invalid int value"),
    (["differential", "--family", "nope"], "invalid choice"),
    (["differential", "--fuzz", "0"], "--fuzz must be >= 1"),
    (["differential", "--fuzz", "2", "--calls", "0"], "--calls must be >= 1"),
]


def argv_id(value) -> str:
    return " ".join(value) if isinstance(value, list) else ""


@pytest.mark.parametrize("argv, message", BAD_VALUES, ids=argv_id)
def test_bad_values_are_one_usage_line_before_any_work(argv, message, capsys):
    assert_usage_error(argv, message, capsys)


@pytest.mark.parametrize("argv", [["map-perf", "1"], ["bench", "htab-mem"]])
@pytest.mark.parametrize("plot, message", [("/nonexistent/rates.png", "no directory"),
                                           ("rates.txt", "a format matplotlib writes"),
                                           (".", "is a directory")])
def test_a_plot_that_cannot_be_written_is_refused_before_the_run(argv, plot, message, capsys):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    assert_usage_error([*argv, "--plot", plot], message, capsys)


def test_reproduce_refuses_a_plot_directory_that_is_a_file_before_the_run(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    (tmp_path / "f").write_text("")
    assert_usage_error(["reproduce", "--plot", str(tmp_path / "f")], "is not a directory",
                       capsys)


@pytest.mark.parametrize("argv", bench_commands(), ids=argv_id)
def test_every_command_refuses_an_unknown_pybpf_backend(argv, monkeypatch, capsys):
    monkeypatch.setenv("PYBPF_BACKEND", "foo")
    assert_usage_error(argv, "PYBPF_BACKEND='foo' is not a backend", capsys)


@pytest.mark.parametrize("argv", bench_commands(), ids=argv_id)
def test_every_command_names_an_unknown_option(argv, capsys):
    assert_usage_error([*argv, "--bogus"], "unrecognized arguments: --bogus", capsys)


def test_version_comes_from_the_package(capsys):
    import pybpf

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"pybpf {pybpf.__version__}\n"


def failing_run(args):
    raise cli.CommandError("the run failed: do this instead")


def test_a_refused_operation_is_one_error_line_and_exit_1(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "failing", cli.Command("fails", lambda parser: None,
                                                              failing_run))
    assert cli.main(["failing"]) == 1
    assert capsys.readouterr().err == "Error: the run failed: do this instead\n"


@pytest.mark.kernel
def test_a_c_trigger_failing_mid_run_is_an_error_line_not_a_traceback(kernel, tmp_path):
    # Passes the trial run (MAX_CNT 1), fails the real ones.
    fake = tmp_path / "trigger"
    fake.write_text('#!/bin/sh\n[ "$3" = 1 ] && echo "0:x 5 events per sec (C trigger; 5 per '
                    'CPU-second)" && exit 0\necho "broken" >&2; exit 3\n')
    fake.chmod(0o755)
    result = run_cli("map-perf", "4", "1", "0", "10", "--backend", "kernel", "--no-progress",
                     "--c-trigger", str(fake))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "Error: map-perf: the children for CPUs [0] failed (their errors are above)")


def test_kernel_num_procs_over_the_online_cpus_run_unpinned_with_a_note(kernel):
    online = os.sysconf("SC_NPROCESSORS_ONLN")
    result = run_cli("map-perf", "4", str(online + 1), "0", "5", "--backend", "kernel",
                     "--no-progress")
    assert result.returncode == 0, result.stderr
    assert f"NUM_PROCS {online + 1} exceeds the {online} online CPUs: child {online} runs " \
           "unpinned, as in the sample" in result.stderr
    assert re.search(rf"^{online}:hash_map_perf kmalloc \d+ events per sec$", result.stdout,
                     re.M)


# -- without bpf(2): every command says so, once ------------------------------------------------

def run_unprivileged(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYBPF_BACKEND", None)
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-m", "pybpf", *args], capture_output=True,
                          text=True, env=env, cwd="/", timeout=300)


needs_setpriv = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                   reason="needs root and setpriv to drop to uid 65534")


@needs_setpriv
@pytest.mark.parametrize("argv", [["maps", "--backend", "kernel"],
                                  ["differential", "--sequences", "1", "--family", "hash"],
                                  ["bench", "ops", "--backend", "kernel", "--n", "10"],
                                  ["bench", "htab-mem", "--backend", "kernel", "-d", "0.1"],
                                  ["bench", "interp", "--iterations", "10"],
                                  ["map-perf", "4", "1", "0", "5", "--backend", "kernel"]],
                         ids=argv_id)
def test_unprivileged_kernel_commands_exit_1_with_the_reason(argv):
    result = run_unprivileged(*argv)
    if argv[1] == "interp":  # the kernel is optional there: skipped with the reason
        assert result.returncode == 0, result.stderr
        assert "bpf(2) is not allowed here: kernel figures skipped" in result.stdout
        return
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("Error: ")
    assert "EPERM" in result.stderr


@needs_setpriv
def test_unprivileged_reproduce_says_once_why_the_kernel_figures_are_left_out():
    result = run_unprivileged("reproduce", "--events", "3", "--scale", "40000")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("the kernel figures are left out (bpf(2) is not allowed "
                               "here)") == 1
    assert "== 000. NUMA node selection" in result.stdout


@pytest.mark.parametrize("backend", ["emulated", pytest.param("kernel", marks=pytest.mark.kernel)])
def test_map_perf_into_a_closed_pipe_stops_quietly(backend, request):
    if backend == "kernel":
        request.getfixturevalue("kernel")  # skips where bpf(2) is not allowed
    proc = subprocess.Popen([sys.executable, "-m", "pybpf", "map-perf", "0", "2", "0", "50",
                             "--backend", backend, "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, err
    assert err == ""


def _subcommands() -> list[list[str]]:
    return ([[name] for name in cli.COMMANDS if name != "bench"]
            + [["bench", name] for name in cli.BENCHMARKS])


@pytest.mark.parametrize("command", _subcommands(), ids=" ".join)
def test_every_subcommand_prints_its_help(command, capsys):
    # argparse formats help with %: a literal percent sign must be written %%
    with pytest.raises(SystemExit) as exit_:
        cli.main([*command, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: pybpf " + " ".join(command))


# -- the table: cli.py registers every command, the command modules never import it --------------

@pytest.mark.parametrize("module, command", [("pybpf.bench.map_perf", "map-perf"),
                                             ("pybpf.bench.ops", "bench ops"),
                                             ("pybpf.bench.interp", "bench interp")])
def test_python_m_entry_points_are_the_same_command(module, command):
    # README and the tests run these; each is the command's own functions, not the cli.
    alone = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                           text=True, env=dict(os.environ, COLUMNS="100"))
    via_cli = run_cli(*command.split(), "--help", COLUMNS="100")
    assert alone.returncode == via_cli.returncode == 0, alone.stderr
    assert alone.stdout == via_cli.stdout


COMMAND_PACKAGES = ["pybpf.bench", "pybpf.calibrate", "pybpf.testing", "pybpf.reproduce"]


def imports_in(package: str) -> dict[str, set[str]]:
    """What each module of ``package`` imports (read with ast, lazy imports included)."""
    from test_layering import import_graph, in_package

    return {name: targets for name, targets in import_graph().items()
            if in_package(name, package)}


@pytest.mark.parametrize("package", COMMAND_PACKAGES)
def test_command_modules_never_import_the_cli(package):
    from test_layering import in_package

    graph = imports_in(package)
    assert graph, f"no modules found under {package}"
    upward = sorted(f"{name} imports {target}" for name, targets in graph.items()
                    for target in targets if in_package(target, "pybpf.cli"))
    assert not upward, "; ".join(upward)


def test_testing_imports_nothing_from_bench():
    from test_layering import in_package

    upward = sorted(f"{name} imports {target}"
                    for name, targets in imports_in("pybpf.testing").items()
                    for target in targets if in_package(target, "pybpf.bench"))
    assert not upward, "; ".join(upward)
