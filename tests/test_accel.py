"""The optional C accelerator: the same bytes and errno as the pure-Python path.

- Its batch wrappers against the kernel backend's System calls (same results, same errno).
- The Map core (C) against the pure-Python core (PYBPF_NO_ACCEL=1, in a child process), on a
  transcript of element, batch and error operations on both backends.
- Its table mode (a backend's FastOps.table) on whichever core this process runs.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import sys
import textwrap

import pytest

from pybpf import maps as M
from pybpf.codecs import KIND_INT, KIND_UINT
from pybpf.errors import KeyNotFoundError
from pybpf.uapi import BPF_F_NO_PREALLOC, MapType

accel = pytest.importorskip("pybpf._accel", reason="the C accelerator was not built here "
                                                  "(no C compiler or Python headers)")


def test_no_accel_env_var_forces_the_pure_python_core():
    code = ("import pybpf.maps as M; "
            "print(M.accelerated(), M.Map.__mro__[1].__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYBPF_NO_ACCEL="1"), check=True).stdout
    assert out.split() == ["False", "PyMapCore"]


def test_accelerated_core_is_the_c_one_here():
    assert M.accelerated() == (not os.environ.get("PYBPF_NO_ACCEL"))


def test_batch_wrappers_match_the_kernel_backend(kernel):
    fd = kernel.map_create(MapType.HASH, 4, 4, 64)
    try:
        keys = b"".join(i.to_bytes(4, "little") for i in range(40))
        values = b"".join((i * 7).to_bytes(4, "little") for i in range(40))
        assert accel.update_batch(fd, 4, 4, keys, values, 40, 0, 0) == (0, 40)
        kbuf, vbuf = bytearray(64 * 4), bytearray(64 * 4)
        err, count, _token, keys_out, values_out = accel.lookup_batch(
            fd, False, None, 4, 4, kbuf, vbuf, 64, 0, 0)
        assert (err, count, keys_out, values_out) == (errno.ENOENT, 40, None, None)
        mine = {bytes(kbuf[i * 4:i * 4 + 4]): bytes(vbuf[i * 4:i * 4 + 4]) for i in range(40)}
        theirs = kernel.map_lookup_batch(fd, None, 64)
        assert mine == dict(zip(theirs.keys, theirs.values, strict=True))
        # With int codec kinds it hands back the decoded lists, in the same order.
        _, _, _, keys_out, values_out = accel.lookup_batch(
            fd, False, None, 4, 4, kbuf, vbuf, 64, 0, 0, KIND_UINT, KIND_INT)
        assert keys_out == [int.from_bytes(k, "little") for k in theirs.keys]
        assert values_out == [int.from_bytes(v, "little", signed=True) for v in theirs.values]
        missing = b"".join(i.to_bytes(4, "little") for i in (1, 2, 99, 3))
        assert accel.delete_batch(fd, 4, missing, 4, 0, 0) == (errno.ENOENT, 2)
    finally:
        kernel.close(fd)


def test_batch_wrapper_refuses_buffers_too_small_for_count(kernel):
    fd = kernel.map_create(MapType.HASH, 4, 4, 8)
    try:
        with pytest.raises(ValueError, match="keys buffer is 8 bytes, 16 needed"):
            accel.lookup_batch(fd, False, None, 4, 4, bytearray(8), bytearray(16), 4, 0, 0)
        with pytest.raises(ValueError, match="values buffer"):
            accel.update_batch(fd, 4, 4, bytes(16), bytes(4), 4, 0, 0)
        with pytest.raises(ValueError, match="batch token must be 4 bytes"):
            accel.lookup_batch(fd, False, b"x", 4, 4, bytearray(16), bytearray(16), 4, 0, 0)
    finally:
        kernel.close(fd)


def test_core_used_before_setup_is_a_clear_error():
    core = accel.MapCore()
    with pytest.raises(RuntimeError, match="before _core_setup"):
        core[1]


# A transcript of Map operations on the backend named by argv[1]; run once with the C core and
# once with the pure-Python core, the outputs must be identical.
TRANSCRIPT = textwrap.dedent("""
    import errno, sys
    from pybpf import maps as M, system

    def attempt(f):
        try:
            return repr(f())
        except Exception as exc:
            return f"{type(exc).__name__}:{getattr(exc, 'errno', None)}"

    for name in sys.argv[1:]:
        s = system(name)
        h = M.HashMap(4, int, "<q", key_size=4, system=s)
        b = M.HashMap(4, bytes, bytes, key_size=3, value_size=5, system=s)
        p = M.PercpuArrayMap(2, value="<I", system=s)
        q = M.QueueMap(2, int, value_size=2, system=s)
        a = M.ArrayMap(2, value="<I", system=s)
        ops = [
            lambda: h.__setitem__(1, -5), lambda: h[1], lambda: h[2], lambda: 1 in h,
            lambda: 2 in h, lambda: h.update(1, 7, flags="noexist"),
            lambda: h.update(2, 7, flags="exist"), lambda: h.__setitem__(2, 2 ** 63 - 1),
            lambda: h.__setitem__(3, -2 ** 63), lambda: h.__setitem__(4, 0),
            lambda: h.__setitem__(5, 0), lambda: h.__setitem__("x", 0),
            lambda: h.__setitem__(1 << 33, 0), lambda: h.__setitem__(-1, 0),
            lambda: sorted(h.items()), lambda: h.__delitem__(4), lambda: h.__delitem__(4),
            lambda: sorted(k for ks, _ in h.batch_lookup(chunk=1) for k in ks),
            lambda: h.batch_update([7], [1]), lambda: h.batch_delete([1, 9]),
            lambda: b.__setitem__(b"abc", b"12345"), lambda: b[b"abc"],
            lambda: b.__setitem__(b"ab", b"12345"), lambda: b.__setitem__(0x616263, b"x"),
            lambda: b[0x636261], lambda: p.__setitem__(0, 3), lambda: p[0],
            lambda: p.__setitem__(1, [1] * s.num_possible_cpus), lambda: p[1].sum(),
            lambda: p.__setitem__(2, 1), lambda: q.push(1), lambda: q.push(2),
            lambda: q.push(3), lambda: q.peek(), lambda: q.pop(), lambda: q[None],
            lambda: q[5], lambda: a.__setitem__(0, 1), lambda: a.__delitem__(0),
            lambda: a.lookup_and_delete(0), lambda: a[0], lambda: a[2],
        ]
        print(name, [attempt(op) for op in ops])
        h.close()
        print(name, attempt(lambda: h[1]), attempt(lambda: h.__setitem__(1, 1)))
""")


def run_transcript(backend: str, no_accel: bool) -> str:
    env = dict(os.environ)
    env.pop("PYBPF_NO_ACCEL", None)
    if no_accel:
        env["PYBPF_NO_ACCEL"] = "1"
    run = subprocess.run([sys.executable, "-c", TRANSCRIPT, backend], capture_output=True,
                         text=True, env=env)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_c_core_and_pure_python_core_give_identical_results(backend):
    accelerated = run_transcript(backend.name, no_accel=False)
    pure = run_transcript(backend.name, no_accel=True)
    assert accelerated.startswith(f"{backend.name} [")
    assert accelerated == pure


@pytest.mark.parametrize("stored", [bytes, bytearray])
def test_table_mode_reads_the_backends_dict(emulated, monkeypatch, stored):
    table = {(1).to_bytes(4, "little"): stored((5).to_bytes(8, "little"))}
    default = emulated.fast_ops
    monkeypatch.setattr(emulated, "fast_ops",
                        lambda fd: dataclasses.replace(default(fd), table=table))
    with M.HashMap(4, int, int, key_size=4, value_size=8, system=emulated) as m:
        assert m._core_mode == M.MODE_TABLE
        assert m[1] == 5 and 1 in m and 2 not in m
        table[(1).to_bytes(4, "little")] = stored((6).to_bytes(8, "little"))
        assert m[1] == 6  # read live, not remembered
        with pytest.raises(KeyNotFoundError):
            m[2]
        m[3] = 9  # writes go to the backend
        assert emulated.map_lookup_elem(m.fd, (3).to_bytes(4, "little")) == \
            (9).to_bytes(8, "little")


def test_table_mode_sees_a_value_changed_in_place(emulated):
    """The C core keeps the int it decoded last per key, and must notice new bytes."""
    with M.HashMap(4, int, int, key_size=4, value_size=8, system=emulated) as m:
        m[1] = 5
        live = emulated.fast_ops(m.fd).table[(1).to_bytes(4, "little")]
        assert m[1] == 5
        for value in (7, 5, 2**64 - 1, 0):
            live[:] = value.to_bytes(8, "little")  # as a program's store would
            assert m[1] == value


@pytest.mark.parametrize("map_flags", [0, BPF_F_NO_PREALLOC])  # an update replaces the value
def test_table_mode_follows_every_change_of_the_table(emulated, map_flags):
    """The C core keeps the value object it found per key while the table's dict is unchanged
    (its version): a value replaced, a key deleted and added again, another key's change and
    every key deleted each show at the next m[k]."""
    with M.HashMap(8, int, int, key_size=4, value_size=8, system=emulated,
                   flags=map_flags) as m:
        m[1], m[2] = 5, 6
        assert (m[1], m[2]) == (5, 6)
        emulated.map_update_elem(m.fd, (1).to_bytes(4, "little"), (7).to_bytes(8, "little"))
        assert m[1] == 7
        del m[1]
        with pytest.raises(KeyNotFoundError):
            m[1]
        assert 1 not in m and m[2] == 6
        m[1] = 8
        assert m[1] == 8
        m[3] = 1  # another key: the table changes, the answers do not
        assert (m[1], m[2], m[3]) == (8, 6, 1)
        for key in (1, 2, 3):
            emulated.map_delete_elem(m.fd, key.to_bytes(4, "little"))
        for key in (1, 2, 3):
            assert key not in m
            with pytest.raises(KeyNotFoundError):
                m[key]
