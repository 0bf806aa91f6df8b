"""``pybpf doctor``: one line per tier or feature, each kind of line with what is there and
with what is missing (made missing by monkeypatching what the check looks at)."""

from __future__ import annotations

import errno
import sys

import pytest

from pybpf import accelerator, cli, doctor
from pybpf.emulated.prog import native
from pybpf.kernel import syscall


def test_doctor_prints_a_line_per_check_and_exits_0(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("pybpf ") and "Python" in out[0]
    names = [check().name for check in doctor.CHECKS]
    assert len(out) == 1 + len(names)
    for name, line in zip(names, out[1:], strict=True):
        assert line.startswith(name) and line[22:25] in ("yes", "no ")


def test_kernel_backend_line_gives_the_errno_of_a_refusal(monkeypatch):
    monkeypatch.setattr(syscall, "UNAVAILABLE", None)
    monkeypatch.setattr(syscall, "probe_map_create", lambda: errno.EPERM)
    finding = doctor.check_kernel_backend()
    assert not finding.active and "EPERM (Operation not permitted)" in finding.detail
    assert "CAP_BPF" in finding.detail


def test_kernel_backend_line_when_bpf_cannot_be_called(monkeypatch):
    monkeypatch.setattr(syscall, "UNAVAILABLE", OSError(errno.ENOSYS, "bpf(2) needs Linux"))
    finding = doctor.check_kernel_backend()
    assert not finding.active and "bpf(2) needs Linux" in finding.detail


def test_kernel_backend_line_when_bpf_is_allowed(monkeypatch):
    monkeypatch.setattr(syscall, "UNAVAILABLE", None)
    monkeypatch.setattr(syscall, "probe_map_create", lambda: 0)
    assert doctor.check_kernel_backend() == doctor.Finding("kernel backend", True,
                                                           "bpf(2) allowed")


def test_mount_lines_read_proc_mounts(monkeypatch, tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("bpf /sys/fs/bpf bpf rw 0 0\ntracefs /sys/kernel/tracing tracefs rw 0 0\n")
    monkeypatch.setattr(doctor, "PROC_MOUNTS", str(mounts))
    assert doctor.check_bpffs().active and "/sys/fs/bpf" in doctor.check_bpffs().detail
    assert doctor.check_tracefs().active
    mounts.write_text("proc /proc proc rw 0 0\n")
    bpffs, tracefs = doctor.check_bpffs(), doctor.check_tracefs()
    assert not bpffs.active and "mount -t bpf bpf /sys/fs/bpf" in bpffs.detail
    assert not tracefs.active and "mount -t tracefs" in tracefs.detail


def test_mount_lines_without_proc_mounts(monkeypatch, tmp_path):
    monkeypatch.setattr(doctor, "PROC_MOUNTS", str(tmp_path / "absent"))
    assert not doctor.check_bpffs().active and not doctor.check_tracefs().active


@pytest.mark.parametrize("attr, check", [("ACCEL", doctor.check_accelerator),
                                          ("CACHE_MODEL", doctor.check_cache_model)])
def test_c_extension_lines_built_off_and_missing(monkeypatch, attr, check):
    if getattr(accelerator, attr) is not None:
        built = check()
        assert built.active and getattr(accelerator, attr).__file__ in built.detail
    monkeypatch.setattr(accelerator, attr, None)
    monkeypatch.setenv("PYBPF_NO_ACCEL", "1")
    assert "PYBPF_NO_ACCEL" in check().detail
    monkeypatch.delenv("PYBPF_NO_ACCEL")
    missing = check()
    assert not missing.active and "not built" in missing.detail


def test_an_extension_built_from_older_source_is_not_used(monkeypatch):
    """A build that lacks what the source calls (the C cache model before swap_dicts, say)
    would fail at the first call: it is treated as not built, and the Python twins run."""
    monkeypatch.delenv("PYBPF_NO_ACCEL", raising=False)
    older = type(sys)("pybpf._cache_model")
    older.CacheModel = object
    monkeypatch.setattr(accelerator.importlib, "import_module", lambda name: older)
    assert accelerator._load("_cache_model", needs=("CacheModel", "swap_dicts")) is None
    older.swap_dicts = len
    assert accelerator._load("_cache_model", needs=("CacheModel", "swap_dicts")) is older


def test_shared_maps_line_built_and_missing(monkeypatch):
    from pybpf import shared

    if shared.SHM is not None:
        assert doctor.check_shared_maps().active
    monkeypatch.setattr(shared, "SHM", None)
    missing = doctor.check_shared_maps()
    assert not missing.active and "apt-get install gcc python3-dev" in missing.detail


def test_the_reference_engines_are_always_there():
    assert doctor.check_interpreter().active and doctor.check_jit().active


def test_native_engine_line_names_llvmlite_or_what_to_install(monkeypatch):
    if native.llvm is not None:
        assert "llvmlite " in doctor.check_native().detail
        assert native.native_reach() in doctor.check_native().detail
        monkeypatch.setattr(native, "NATIVE_VALUES", False)
        assert "the C accelerator is not built" in doctor.check_native().detail
        monkeypatch.undo()
    monkeypatch.setattr(native, "llvm", None)
    finding = doctor.check_native()
    assert not finding.active and "pip install llvmlite" in finding.detail


def test_matplotlib_line_gives_its_version_or_the_extra(monkeypatch):
    monkeypatch.setattr(doctor, "package_version", lambda package: "9.9")
    assert doctor.check_matplotlib() == doctor.Finding("plots (--plot)", True, "matplotlib 9.9")
    monkeypatch.setattr(doctor, "package_version", lambda package: None)
    finding = doctor.check_matplotlib()
    assert not finding.active and "pybpf[plot]" in finding.detail


def test_package_version_of_a_missing_package():
    assert doctor.package_version("pybpf_no_such_package") is None


@pytest.mark.parametrize("value,active", [(None, True), ("1", False)])
def test_modeled_time_line_follows_the_switch(monkeypatch, value, active):
    if value is None:
        monkeypatch.delenv("PYBPF_NO_MODELED_TIME", raising=False)
    else:
        monkeypatch.setenv("PYBPF_NO_MODELED_TIME", value)
    finding = doctor.check_modeled_time()
    assert finding.active is active and "PYBPF_NO_MODELED_TIME" in finding.detail


def test_greenlet_line_says_how_emulated_cpus_run(monkeypatch):
    monkeypatch.setattr(doctor, "package_version", lambda package: None)
    missing = doctor.check_greenlet()
    assert not missing.active and "host threads" in missing.detail and "greenlet" in missing.detail
    monkeypatch.setattr(doctor, "package_version", lambda package: "3.5.6")
    present = doctor.check_greenlet()
    assert present.active and "greenlet 3.5.6" in present.detail


def test_an_extension_older_than_the_source_is_not_loaded():
    """A build that lacks a name the Python side calls (an older build: a module-level
    sync_idle, count_schedulers) is not loaded, so its Python twins run instead of failing
    on the missing name."""
    if accelerator.CACHE_MODEL is None:
        pytest.skip("the C extension (pybpf._cache_model) is not built")
    for name in ("sync_idle", "count_schedulers"):
        assert hasattr(accelerator.CACHE_MODEL, name)
    assert accelerator._load("_cache_model", needs=("CacheModel", "no_such_name")) is None
    assert accelerator._load("_cache_model", needs=("CacheModel",)) is accelerator.CACHE_MODEL
