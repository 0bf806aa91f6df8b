"""The System contract at its edges (issue 9), on both backends: an argument outside its attr
field is refused, never wrapped or cut; everything else gets the kernel's errno, in the
kernel's order of checks. Every expected errno here was read from the running kernel.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid

import pytest

from helpers import err_of, u32
from pybpf.asm import R0, assemble, encode, exit_, mov64
from pybpf.errors import BPFError
from pybpf.uapi import (
    BPF_EXIST,
    BPF_F_LOCK,
    BPF_F_RDONLY,
    BPF_F_SLEEPABLE,
    BPF_F_WRONLY,
    BPF_F_XDP_HAS_FRAGS,
    BPF_NOEXIST,
    ENOTSUPP,
    AttachType,
    MapFlags,
    MapType,
    ProgType,
)

RETURN_0 = encode(assemble([mov64(R0, 0), exit_()]).instructions)
BEYOND_U64 = [1 << 64, (1 << 64) + BPF_NOEXIST, (1 << 64) + BPF_EXIST, -8, -1]


def test_element_flags_outside_u64_are_refused_not_wrapped(maps):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    sys.map_update_elem(fd, u32(1), b"a" * 8)
    for flags in BEYOND_U64:
        assert err_of(sys.map_update_elem, fd, u32(1), b"b" * 8, flags) == errno.EINVAL
        assert err_of(sys.map_update_elem, fd, u32(2), b"b" * 8, flags) == errno.EINVAL
        assert err_of(sys.map_lookup_elem, fd, u32(1), flags) == errno.EINVAL
        assert err_of(sys.map_lookup_and_delete_elem, fd, u32(1), flags) == errno.EINVAL
    assert sys.map_lookup_elem(fd, u32(1)) == b"a" * 8  # nothing written, nothing deleted
    assert err_of(sys.map_lookup_elem, fd, u32(2)) == errno.ENOENT


@pytest.mark.parametrize("field", ["elem_flags", "flags"])
def test_batch_flags_outside_u64_are_refused_not_wrapped(maps, field):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    for flags in BEYOND_U64:
        with pytest.raises(BPFError) as info:
            sys.map_update_batch(fd, [u32(1)], [b"a" * 8], **{field: flags})
        assert info.value.errno == errno.EINVAL and info.value.count == 0
        assert err_of(sys.map_delete_batch, fd, [u32(1)], **{field: flags}) == errno.EINVAL
        assert err_of(sys.map_lookup_batch, fd, None, 4, **{field: flags}) == errno.EINVAL
    assert err_of(sys.map_lookup_elem, fd, u32(1)) == errno.ENOENT


def test_open_and_file_flags_outside_u32_are_refused(maps):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    map_id = sys.map_get_info(fd).id
    for flags in (1 << 32, (1 << 32) + BPF_F_RDONLY, -1):
        assert err_of(sys.map_get_fd_by_id, map_id, flags) == errno.EINVAL
        assert err_of(sys.obj_get, "/sys/fs/bpf/pybpf_never_pinned", flags) == errno.EINVAL


def test_next_id_start_outside_its_field_or_past_int_max_is_einval(maps):
    sys = maps.sys
    maps.create(MapType.HASH, 4, 8, 4)
    for start in (-1, 1 << 32, (1 << 31) - 1, 3.0):
        assert err_of(sys.map_get_next_id, start) == errno.EINVAL
    assert sys.map_get_next_id(0) > 0


@pytest.mark.parametrize("args", [
    dict(prog_type=(1 << 32) + ProgType.SOCKET_FILTER),
    dict(prog_type=-1),
    dict(prog_type=ProgType.SOCKET_FILTER, expected_attach_type=1 << 32),
    dict(prog_type=ProgType.SOCKET_FILTER, prog_flags=(1 << 32) + 1),
    dict(prog_type=ProgType.SOCKET_FILTER, prog_flags=-1),
])
def test_prog_load_fields_outside_u32_are_refused_not_wrapped(backend, args):
    with pytest.raises(BPFError, match="is not an unsigned 32-bit integer") as info:
        backend.prog_load(insns=RETURN_0, **args)
    assert info.value.errno == errno.EINVAL


@pytest.mark.parametrize("license", [None, 5, ["GPL"]])
def test_prog_load_license_that_is_not_a_string_is_einval(backend, license):
    with pytest.raises(BPFError, match="license must be a str") as info:
        backend.prog_load(ProgType.SOCKET_FILTER, RETURN_0, license=license)
    assert info.value.errno == errno.EINVAL


def test_prog_load_takes_a_bytes_license(maps):
    fd = maps.sys.prog_load(ProgType.SOCKET_FILTER, RETURN_0, license=b"GPL")
    maps.fds.append(fd)


def test_prog_flags_the_kernel_knows_load_on_both(maps):
    # BPF_F_TEST_REG_INVARIANTS (1 << 7) is a 6.18 prog flag; 1 << 8 is not one.
    fd = maps.sys.prog_load(ProgType.SOCKET_FILTER, RETURN_0, prog_flags=1 << 7)
    maps.fds.append(fd)
    assert err_of(maps.sys.prog_load, ProgType.SOCKET_FILTER, RETURN_0,
                  prog_flags=1 << 8) == errno.EINVAL


def test_latin1_program_name_loads_and_reads_back_the_same(maps):
    fd = maps.sys.prog_load(ProgType.SOCKET_FILTER, RETURN_0, prog_name=b"caf\xe9")
    maps.fds.append(fd)
    assert maps.sys.prog_get_info(fd).name == "caf\ufffd"


@pytest.mark.parametrize("flags, errno_", [(4, 0), (1, errno.EINVAL), (2, errno.EINVAL),
                                           (8, errno.EINVAL), (1 << 32, errno.EINVAL)])
def test_skb_test_run_flags(maps, flags, errno_):
    # BPF_F_TEST_SKB_CHECKSUM_COMPLETE (1 << 2) is the one flag an skb test run takes.
    fd = maps.sys.prog_load(ProgType.SOCKET_FILTER, RETURN_0)
    maps.fds.append(fd)
    try:
        maps.sys.prog_test_run(fd, bytes(64), flags=flags)
    except OSError as exc:
        assert exc.errno == errno_
    else:
        assert errno_ == 0


@pytest.mark.parametrize("fd", [3.0, "3", True, None, 1 << 32, -(1 << 31) - 1])
def test_an_fd_that_is_not_an_int_of_the_fd_range_is_ebadf(maps, fd):
    sys = maps.sys
    maps.create(MapType.HASH, 4, 8, 4)
    assert err_of(sys.map_freeze, fd) == errno.EBADF
    assert err_of(sys.map_lookup_elem, fd, u32(0)) == errno.EBADF
    assert err_of(sys.map_update_elem, fd, u32(0), bytes(8)) == errno.EBADF
    assert err_of(sys.close, fd) == errno.EBADF
    assert err_of(sys.map_get_info, fd) == errno.EBADFD


def test_a_float_fd_does_not_freeze_the_map_of_its_integer(maps):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    assert err_of(sys.map_freeze, float(fd)) == errno.EBADF
    sys.map_update_elem(fd, u32(1), bytes(8))  # not frozen


def test_obj_get_info_on_an_fd_not_open_is_ebadfd(maps):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    prog = sys.prog_load(ProgType.SOCKET_FILTER, RETURN_0)
    maps.fds.append(prog)
    for closed in (999_999, -1):
        assert err_of(sys.map_get_info, closed) == errno.EBADFD
        assert err_of(sys.prog_get_info, closed) == errno.EBADFD
    read_end, write_end = os.pipe()
    try:
        assert err_of(sys.map_get_info, read_end) == errno.EINVAL  # open, not a BPF object
        assert err_of(sys.map_get_info, prog) == errno.EINVAL
        assert err_of(sys.prog_get_info, fd) == errno.EINVAL
    finally:
        os.close(read_end)
        os.close(write_end)


# -- keys on keyless maps, and the order of the checks -----------------------------------------

@pytest.mark.parametrize("map_type", [MapType.QUEUE, MapType.STACK])
def test_a_key_on_a_keyless_map_is_einval_and_pops_nothing(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 0, 4, 4)
    sys.map_update_elem(fd, None, u32(7))
    for key in (b"", b"k", bytearray()):
        assert err_of(sys.map_lookup_and_delete_elem, fd, key) == errno.EINVAL
        assert err_of(sys.map_lookup_elem, fd, key) == errno.EINVAL
        assert err_of(sys.map_update_elem, fd, key, u32(8)) == errno.EINVAL
        assert err_of(sys.map_delete_elem, fd, key) == errno.EINVAL
        assert err_of(sys.map_get_next_key, fd, key) == errno.EINVAL
    assert sys.map_lookup_and_delete_elem(fd, None) == u32(7)
    assert err_of(sys.map_lookup_and_delete_elem, fd, None) == errno.ENOENT


def test_a_key_on_a_keyless_bloom_filter_is_einval(maps):
    sys = maps.sys
    fd = maps.create(MapType.BLOOM_FILTER, 0, 4, 4)
    assert err_of(sys.map_update_elem, fd, b"", u32(1)) == errno.EINVAL
    assert err_of(sys.map_lookup_elem, fd, b"", value=u32(1)) == errno.EINVAL


@pytest.mark.parametrize("key", [b"", b"abc", b"abcdefgh"])
def test_wrong_size_key_on_a_read_only_fd_is_eperm_as_the_kernel_checks_first(maps, key):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4, map_flags=BPF_F_RDONLY)
    assert err_of(sys.map_update_elem, fd, key, bytes(8)) == errno.EPERM
    assert err_of(sys.map_update_elem, fd, u32(1), b"short") == errno.EPERM
    assert err_of(sys.map_delete_elem, fd, key) == errno.EPERM
    assert err_of(sys.map_lookup_and_delete_elem, fd, key) == errno.EPERM
    assert err_of(sys.map_lookup_elem, fd, key) == errno.EINVAL  # reading is allowed


@pytest.mark.parametrize("key", [b"", b"abc"])
def test_wrong_size_key_on_a_write_only_fd_is_eperm_for_reads(maps, key):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4, map_flags=BPF_F_WRONLY)
    assert err_of(sys.map_lookup_elem, fd, key) == errno.EPERM
    assert err_of(sys.map_get_next_key, fd, key) == errno.EPERM
    assert err_of(sys.map_update_elem, fd, key, bytes(8)) == errno.EINVAL


def test_wrong_size_key_or_value_on_a_frozen_map_is_eperm(maps):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    sys.map_freeze(fd)
    assert err_of(sys.map_update_elem, fd, b"abc", bytes(8)) == errno.EPERM
    assert err_of(sys.map_update_elem, fd, u32(1), bytes(3)) == errno.EPERM
    assert err_of(sys.map_delete_elem, fd, b"abcdef") == errno.EPERM
    assert err_of(sys.map_lookup_and_delete_elem, fd, b"ab") == errno.EPERM


def test_a_key_on_a_keyless_map_behind_a_read_only_fd_is_eperm(maps):
    sys = maps.sys
    fd = maps.create(MapType.QUEUE, 0, 4, 4, map_flags=BPF_F_RDONLY)
    assert err_of(sys.map_update_elem, fd, b"", u32(1)) == errno.EPERM
    fd = maps.create(MapType.QUEUE, 0, 4, 4, map_flags=BPF_F_WRONLY)
    assert err_of(sys.map_lookup_elem, fd, b"") == errno.EPERM


@pytest.mark.parametrize("key, value, says", [
    (b"abc", bytes(8), "key is 3 bytes"),
    (u32(1), bytes(9), "value is 9 bytes"),
])
def test_wrong_length_on_a_writable_map_is_einval_saying_the_sizes(maps, key, value, says):
    fd = maps.create(MapType.HASH, 4, 8, 4)
    with pytest.raises(BPFError, match=says) as info:
        maps.sys.map_update_elem(fd, key, value)
    assert info.value.errno == errno.EINVAL


def test_a_wrong_length_batch_element_fails_after_the_ones_before_it(maps):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 8)
    with pytest.raises(BPFError, match=r"keys\[2\] is 3 bytes") as info:
        sys.map_update_batch(fd, [u32(1), u32(2), b"abc", u32(4)], [bytes(8)] * 4)
    assert (info.value.errno, info.value.count) == (errno.EINVAL, 2)
    with pytest.raises(BPFError, match=r"values\[1\] is 2 bytes") as info:
        sys.map_update_batch(fd, [u32(5), u32(6)], [bytes(8), bytes(2)])
    assert (info.value.errno, info.value.count) == (errno.EINVAL, 1)
    assert sorted(sys.map_lookup_batch(fd, None, 8).keys) == [u32(1), u32(2), u32(5)]
    with pytest.raises(BPFError) as info:
        sys.map_delete_batch(fd, [u32(1), b"toolong"])
    assert (info.value.errno, info.value.count) == (errno.EINVAL, 1)


def test_a_wrong_length_batch_on_a_read_only_map_is_eperm(maps):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 8, map_flags=BPF_F_RDONLY)
    with pytest.raises(BPFError) as info:
        sys.map_update_batch(fd, [b"abc"], [bytes(8)])
    assert (info.value.errno, info.value.count) == (errno.EPERM, 0)


@pytest.mark.parametrize("map_type, token", [(MapType.HASH, b"abc"), (MapType.ARRAY, b"ab")])
def test_a_batch_token_of_the_wrong_length_is_einval(maps, map_type, token):
    fd = maps.create(map_type, 4, 8, 8)
    with pytest.raises(BPFError, match="in_batch is") as info:
        maps.sys.map_lookup_batch(fd, token, 4)
    assert info.value.errno == errno.EINVAL


# What the kernel leaves in attr.count (6.18): the count given when the command is refused
# before the map's handler writes 0 (fd, permissions, flags, no handler), 0 when refused after
# it (an unreadable in_batch: EFAULT, here a wrong-length one; ENOSPC, whose count 0
# test_element_ops checks). Either way no element came back, so both backends report count 0,
# as for a write batch refused before its first element. The count given is over the map's
# capacity, which the kernel backend clamps before it calls the kernel.
@pytest.mark.parametrize("delete", [False, True], ids=["lookup", "lookup_and_delete"])
@pytest.mark.parametrize("case, expected", [
    ("closed fd", errno.EBADF),
    ("not a map", errno.EINVAL),
    ("elem_flags", errno.EINVAL),
    ("BPF_F_LOCK without a spin lock", errno.EINVAL),
    ("htab flags", errno.EINVAL),
    ("write-only fd", errno.EPERM),
    ("no batch handler", ENOTSUPP),
    ("wrong-length in_batch", errno.EINVAL),
])
def test_a_refused_lookup_batch_reports_count_zero(maps, delete, case, expected):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    sys.map_update_elem(fd, u32(1), bytes(8))
    args = dict(fd=fd, in_batch=None, count=1000, elem_flags=0, flags=0)
    if case == "closed fd":
        args["fd"] = 999_999
    elif case == "not a map":
        args["fd"] = os.open("/", os.O_RDONLY)
    elif case == "elem_flags":
        args["elem_flags"] = 8
    elif case == "BPF_F_LOCK without a spin lock":
        args["elem_flags"] = BPF_F_LOCK
    elif case == "htab flags":
        args["flags"] = 1
    elif case == "write-only fd":
        args["fd"] = sys.map_get_fd_by_id(sys.map_get_info(fd).id, BPF_F_WRONLY)
        maps.fds.append(args["fd"])
    elif case == "no batch handler":
        args["fd"] = maps.create(MapType.QUEUE, 0, 8, 4)
    elif case == "wrong-length in_batch":
        args["in_batch"] = b"abc"
    lookup = sys.map_lookup_and_delete_batch if delete else sys.map_lookup_batch
    try:
        with pytest.raises(BPFError) as info:
            lookup(args["fd"], args["in_batch"], args["count"], args["elem_flags"],
                   args["flags"])
    finally:
        if case == "not a map":
            os.close(args["fd"])
    assert (info.value.errno, info.value.count) == (expected, 0)


def test_a_huge_batch_count_takes_no_more_memory_than_the_map_holds(maps):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 16)
    sys.map_update_elem(fd, u32(1), bytes(8))
    result = sys.map_lookup_batch(fd, None, (1 << 32) - 1)
    assert result.keys == [u32(1)] and result.end


# -- pin paths --------------------------------------------------------------------------------

@pytest.fixture
def pin_name(backend):
    """A fresh name under /sys/fs/bpf, unpinned (if pinned) when the test ends."""
    name = f"pybpf_{uuid.uuid4().hex[:12]}"
    yield name
    path = f"/sys/fs/bpf/{name}"
    if backend.name == "kernel":
        if os.path.lexists(path):
            os.unlink(path)
    else:
        try:
            backend.obj_unpin(path)
        except BPFError:
            pass


def test_a_pin_path_with_a_nul_byte_is_refused_not_cut(maps, pin_name):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    with pytest.raises(BPFError, match="NUL byte") as info:
        sys.obj_pin(fd, f"/sys/fs/bpf/{pin_name}\0zz")
    assert info.value.errno == errno.EINVAL
    assert err_of(sys.obj_get, f"/sys/fs/bpf/{pin_name}") == errno.ENOENT
    sys.obj_pin(fd, f"/sys/fs/bpf/{pin_name}")
    assert err_of(sys.obj_get, f"/sys/fs/bpf/{pin_name}\0zz") == errno.EINVAL


@pytest.mark.parametrize("spelling", ["/sys/fs/bpf/./{}", "/sys/fs/bpf//{}", "//sys/fs/bpf/{}",
                                      "/sys/fs/../fs/bpf/{}", "/sys/fs/bpf/../bpf/{}"])
def test_pin_paths_resolve_as_the_vfs_resolves_them(maps, pin_name, spelling):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    sys.obj_pin(fd, spelling.format(pin_name))
    got = sys.obj_get(f"/sys/fs/bpf/{pin_name}")
    maps.fds.append(got)
    assert sys.map_get_info(got).id == sys.map_get_info(fd).id
    got = sys.obj_get(spelling.format(pin_name).encode())  # bytes paths, as os.fsencode
    maps.fds.append(got)


@pytest.mark.parametrize("path, pin_errno, get_errno", [
    ("/sys/fs/bpf/{}/", errno.ENOENT, errno.ENOENT),
    ("/sys/fs/bpf/{}/x", errno.ENOENT, errno.ENOENT),
    ("/sys/fs/bpf/" + "n" * 256, errno.ENAMETOOLONG, errno.ENAMETOOLONG),
    ("/sys/fs/bpf/" + "d" * 256 + "/x", errno.ENAMETOOLONG, errno.ENAMETOOLONG),
    ("/sys/fs/bpf/" + "./" * 2100 + "x", errno.ENAMETOOLONG, errno.ENAMETOOLONG),
    ("/sys/fs/bpf", errno.EEXIST, errno.EACCES),
    ("/sys/fs/bpf/", errno.EEXIST, errno.EACCES),
    ("/sys/fs/bpf/..", errno.EEXIST, errno.EACCES),
    ("/", errno.EEXIST, errno.EACCES),
    ("/sys/fs/bpf/../{}", errno.EPERM, errno.ENOENT),
    ("/pybpf_no_such_dir/{}", errno.ENOENT, errno.ENOENT),
    ("", errno.ENOENT, errno.ENOENT),
])
def test_pin_path_errors_are_the_kernels(maps, pin_name, path, pin_errno, get_errno):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    assert err_of(sys.obj_pin, fd, path.format(pin_name)) == pin_errno
    assert err_of(sys.obj_get, path.format(pin_name)) == get_errno


def test_pinning_over_a_pin_and_reading_one_as_a_directory(maps, pin_name):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    sys.obj_pin(fd, f"/sys/fs/bpf/{pin_name}")
    assert err_of(sys.obj_pin, fd, f"/sys/fs/bpf/{pin_name}") == errno.EEXIST
    assert err_of(sys.obj_pin, fd, f"/sys/fs/bpf/{pin_name}/") == errno.EEXIST
    assert err_of(sys.obj_get, f"/sys/fs/bpf/{pin_name}/") == errno.ENOTDIR
    assert err_of(sys.obj_pin, fd, f"/sys/fs/bpf/{pin_name}/x") == errno.ENOTDIR
    assert err_of(sys.obj_pin, fd, f"/sys/fs/bpf/{pin_name}/../y") == errno.ENOTDIR


def test_a_pin_path_is_resolved_from_the_working_directory(maps, pin_name, monkeypatch):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    monkeypatch.chdir("/sys/fs/bpf")
    sys.obj_pin(fd, pin_name)
    maps.fds.append(sys.obj_get(f"/sys/fs/bpf/{pin_name}"))


# -- bpffs directories ------------------------------------------------------------------------

@pytest.fixture
def pin_dir(backend):
    """A fresh directory name under /sys/fs/bpf (not made yet); on the kernel's bpffs it is
    removed afterwards with what it holds (the emulated bpffs goes with its system)."""
    path = f"/sys/fs/bpf/pybpf_{uuid.uuid4().hex[:12]}"
    yield path
    if backend.name == "kernel" and os.path.lexists(path):
        shutil.rmtree(path)


def test_pins_go_into_directories_made_on_bpffs(maps, pin_dir):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    sys.mkdir(pin_dir)
    sys.mkdir(f"{pin_dir}/nested/")  # mkdir takes a trailing slash
    sys.obj_pin(fd, f"{pin_dir}/nested/m")
    sys.obj_pin(fd, f"{pin_dir}/nested/../m")
    for path in (f"{pin_dir}/m", f"{pin_dir}/nested/m", f"{pin_dir}/./nested//m"):
        got = sys.obj_get(path)
        maps.fds.append(got)
        assert sys.map_get_info(got).type == MapType.HASH
    assert err_of(sys.rmdir, f"{pin_dir}/nested") == errno.ENOTEMPTY
    sys.obj_unpin(f"{pin_dir}/nested/m")
    sys.rmdir(f"{pin_dir}/nested/")
    assert err_of(sys.obj_get, f"{pin_dir}/nested/m") == errno.ENOENT
    sys.obj_unpin(f"{pin_dir}/m")
    sys.rmdir(f"{pin_dir}/../{os.path.basename(pin_dir)}")
    assert err_of(sys.obj_pin, fd, f"{pin_dir}/m") == errno.ENOENT


# In {d}: a pin p, an empty directory t, a directory full holding a pin.
@pytest.mark.parametrize("call, path, expected", [
    ("mkdir", "{d}", errno.EEXIST),
    ("mkdir", "{d}/p", errno.EEXIST),
    ("mkdir", "{d}/p/x", errno.ENOTDIR),
    ("mkdir", "{d}/no/x", errno.ENOENT),
    ("mkdir", "{d}/.", errno.EEXIST),
    ("mkdir", "{d}/t/..", errno.EEXIST),
    ("mkdir", "{d}/" + "n" * 256, errno.ENAMETOOLONG),
    ("mkdir", "/sys/fs/bpf", errno.EEXIST),
    ("mkdir", "/", errno.EEXIST),
    ("mkdir", "", errno.ENOENT),
    ("obj_pin", "{d}/t", errno.EEXIST),
    ("obj_pin", "{d}/t/", errno.EEXIST),
    ("obj_pin", "{d}/no/x", errno.ENOENT),
    ("obj_pin", "{d}/p/x", errno.ENOTDIR),
    ("obj_get", "{d}/t", errno.EACCES),
    ("obj_get", "{d}/t/", errno.EACCES),
    ("obj_get", "{d}/full/q/", errno.ENOTDIR),
    ("rmdir", "{d}/full", errno.ENOTEMPTY),
    ("rmdir", "{d}", errno.ENOTEMPTY),
    ("rmdir", "{d}/p", errno.ENOTDIR),
    ("rmdir", "{d}/p/", errno.ENOTDIR),
    ("rmdir", "{d}/nope", errno.ENOENT),
    ("rmdir", "{d}/nope/x", errno.ENOENT),
    ("rmdir", "{d}/t/.", errno.EINVAL),
    ("rmdir", "{d}/t/..", errno.ENOTEMPTY),
    ("rmdir", "/sys/fs/bpf", errno.EBUSY),
    ("rmdir", "/sys/fs/bpf/", errno.EBUSY),
    ("rmdir", "/", errno.EBUSY),
    ("rmdir", "", errno.ENOENT),
    ("obj_unpin", "{d}/t", errno.EISDIR),
    ("obj_unpin", "{d}/t/", errno.EISDIR),
    ("obj_unpin", "{d}/.", errno.EISDIR),
    ("obj_unpin", "{d}/..", errno.EISDIR),
    ("obj_unpin", "{d}/p/", errno.ENOTDIR),
    ("obj_unpin", "{d}/nope", errno.ENOENT),
    ("obj_unpin", "{d}/nope/", errno.ENOENT),
])
def test_bpffs_directory_errors_are_the_kernels(maps, pin_dir, call, path, expected):
    sys = maps.sys
    fd = maps.create(MapType.HASH, 4, 8, 4)
    sys.mkdir(pin_dir)
    sys.mkdir(f"{pin_dir}/t")
    sys.mkdir(f"{pin_dir}/full")
    sys.obj_pin(fd, f"{pin_dir}/p")
    sys.obj_pin(fd, f"{pin_dir}/full/q")
    args = (fd,) if call == "obj_pin" else ()
    assert err_of(getattr(sys, call), *args, path.format(d=pin_dir)) == expected


def test_the_pin_fd_is_checked_before_the_path(maps):
    # bpf_fd_probe_obj tries a map, a program and a link: anything else is EINVAL.
    assert err_of(maps.sys.obj_pin, 999_999, "/tmp/not/bpffs") == errno.EINVAL
    read_end, write_end = os.pipe()
    try:
        assert err_of(maps.sys.obj_pin, read_end, "/tmp/not/bpffs") == errno.EINVAL
    finally:
        os.close(read_end)
        os.close(write_end)


# -- found by the System-level fuzz (tests/differential/test_system_fuzz.py) -----------------

def _lddw_map(fd: int) -> bytes:
    """``lddw r1, map fd`` (the map the program uses), raw."""
    return bytes([0x18, 0x11, 0, 0]) + fd.to_bytes(4, "little") + bytes(8)


def _load(maps, prog_type, insns=RETURN_0, **kw) -> int:
    fd = maps.sys.prog_load(prog_type, insns, **kw)
    maps.fds.append(fd)
    return fd


def test_an_element_command_on_a_closed_or_foreign_fd(maps):
    sys = maps.sys
    read_end, write_end = os.pipe()
    try:
        for command in (sys.map_delete_elem, sys.map_lookup_elem, sys.map_get_next_key):
            assert err_of(command, 999_999, u32(1)) == errno.EBADF
            assert err_of(command, read_end, u32(1)) == errno.EINVAL
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_ARRAY])
def test_a_null_key_faults_before_a_wrong_sized_value_is_read(maps, map_type):
    fd = maps.create(map_type, 4, 8, 2)
    assert err_of(maps.sys.map_update_elem, fd, None, b"short") == errno.EFAULT


def test_a_map_without_values_reads_none_of_a_given_value(maps):
    ringbuf = maps.create(MapType.RINGBUF, 0, 0, 4096)
    for value in (b"", b"abc"):
        assert err_of(maps.sys.map_update_elem, ringbuf, None, value) == ENOTSUPP


@pytest.mark.parametrize("prog_type, attach_type, loads", [
    (ProgType.XDP, AttachType.TRACE_RAW_TP, True), (ProgType.XDP, 99, True),
    (ProgType.SOCKET_FILTER, 99, True), (ProgType.CGROUP_SKB, AttachType.CGROUP_INET_EGRESS, True),
    (ProgType.CGROUP_SKB, AttachType.CGROUP_INET_SOCK_CREATE, False),
    (ProgType.SYSCALL, 0, True), (ProgType.SYSCALL, AttachType.SK_SKB_STREAM_VERDICT, False)])
def test_expected_attach_type_is_checked_where_the_kernel_checks_it(maps, prog_type,
                                                                    attach_type, loads):
    flags = BPF_F_SLEEPABLE if prog_type == ProgType.SYSCALL else 0
    if loads:
        _load(maps, prog_type, expected_attach_type=attach_type, prog_flags=flags)
    else:
        assert err_of(_load, maps, prog_type, expected_attach_type=attach_type,
                      prog_flags=flags) == errno.EINVAL


def test_only_syscall_and_kprobe_programs_are_sleepable(maps):
    for prog_type in (ProgType.XDP, ProgType.SOCKET_FILTER, ProgType.SK_SKB):
        assert err_of(_load, maps, prog_type, prog_flags=BPF_F_SLEEPABLE) == errno.EINVAL
    _load(maps, ProgType.KPROBE, prog_flags=BPF_F_SLEEPABLE)
    assert err_of(_load, maps, ProgType.SYSCALL) == errno.EINVAL


def test_the_sleepable_checks_come_after_the_map_fds_and_the_cfg(maps):
    assert err_of(_load, maps, ProgType.SYSCALL, _lddw_map(999_999) + RETURN_0) == errno.EBADF
    with pytest.raises(BPFError, match="unreachable insn"):
        _load(maps, ProgType.XDP, RETURN_0 + RETURN_0, prog_flags=BPF_F_SLEEPABLE)


def test_a_sleepable_program_uses_array_hash_ringbuf_and_storage_maps_only(maps):
    allowed = [maps.create(MapType.ARRAY, 4, 4, 2), maps.create(MapType.HASH, 4, 4, 2),
               maps.create(MapType.QUEUE, 0, 4, 2)]
    refused = [maps.create(MapType.LPM_TRIE, 8, 4, 2, map_flags=MapFlags.NO_PREALLOC),
               maps.create(MapType.BLOOM_FILTER, 0, 4, 2),
               maps.create(MapType.PROG_ARRAY, 4, 4, 2)]
    for fd in allowed:
        _load(maps, ProgType.SYSCALL, _lddw_map(fd) + RETURN_0, prog_flags=BPF_F_SLEEPABLE)
    for fd in refused:
        assert err_of(_load, maps, ProgType.SYSCALL, _lddw_map(fd) + RETURN_0,
                      prog_flags=BPF_F_SLEEPABLE) == errno.EINVAL


@pytest.mark.parametrize("map_type", [MapType.PROG_ARRAY, MapType.DEVMAP, MapType.CPUMAP])
def test_a_map_holding_programs_takes_programs_of_its_first_ones_kind(maps, map_type):
    """bpf_prog_map_compatible: the first program that uses the map fixes its owner."""
    fd = maps.create(map_type, 4, 4, 1)
    uses = _lddw_map(fd) + RETURN_0
    _load(maps, ProgType.XDP, uses)
    _load(maps, ProgType.XDP, uses)
    assert err_of(_load, maps, ProgType.SOCKET_FILTER, uses) == errno.EINVAL
    assert err_of(_load, maps, ProgType.XDP, uses,
                  prog_flags=BPF_F_XDP_HAS_FRAGS) == errno.EINVAL
    other_attach = AttachType.XDP if map_type == MapType.PROG_ARRAY else AttachType.XDP_DEVMAP
    if map_type == MapType.PROG_ARRAY:  # a tail call also keeps the attach type
        assert err_of(_load, maps, ProgType.XDP, uses,
                      expected_attach_type=other_attach) == errno.EINVAL
    other = maps.create(MapType.HASH, 4, 4, 1)  # other maps take any program
    _load(maps, ProgType.XDP, _lddw_map(other) + RETURN_0)
    _load(maps, ProgType.SOCKET_FILTER, _lddw_map(other) + RETURN_0)


def test_a_program_stored_in_a_prog_array_is_its_owner(maps):
    fd = maps.create(MapType.PROG_ARRAY, 4, 4, 1)
    maps.sys.map_update_elem(fd, u32(0), u32(_load(maps, ProgType.XDP)))
    assert err_of(_load, maps, ProgType.SOCKET_FILTER, _lddw_map(fd) + RETURN_0) == \
        errno.EINVAL


def test_a_pinned_program_opens_with_any_access_flag(maps, pin_name):
    sys = maps.sys
    path = f"/sys/fs/bpf/{pin_name}"
    sys.obj_pin(_load(maps, ProgType.SOCKET_FILTER), path)
    for flags in (0, BPF_F_RDONLY, BPF_F_WRONLY):
        sys.close(sys.obj_get(path, flags))
    assert err_of(sys.obj_get, path, BPF_F_RDONLY | BPF_F_WRONLY) == errno.EINVAL


def test_obj_get_takes_bpf_f_path_fd(maps, pin_name):
    sys = maps.sys
    path = f"/sys/fs/bpf/{pin_name}"
    sys.obj_pin(maps.create(MapType.HASH, 4, 8, 4), path)
    sys.close(sys.obj_get(path, MapFlags.PATH_FD))
    assert err_of(sys.obj_get, path, 1 << 21) == errno.EINVAL


def test_a_perf_event_array_refuses_every_fd_that_is_not_a_perf_event(maps):
    sys = maps.sys
    fd = maps.create(MapType.PERF_EVENT_ARRAY, 4, 4, 2)
    read_end, write_end = os.pipe()
    try:
        for value in (999_999, read_end, fd):
            assert err_of(sys.map_update_elem, fd, u32(0), u32(value)) == errno.EBADF
    finally:
        os.close(read_end)
        os.close(write_end)


def test_the_token_flag_is_checked_before_the_instruction_count(maps):
    # prog_token_fd 0 is this process's stdin: open, and no BPF token
    assert err_of(maps.sys.prog_load, ProgType.SOCKET_FILTER, b"",
                  prog_flags=MapFlags.TOKEN_FD) == errno.EINVAL


@pytest.mark.skipif(not os.path.isdir("/sys/kernel/tracing/events"),
                    reason="tracefs is not mounted at /sys/kernel/tracing")
def test_a_missing_tracepoint_is_enoent_before_the_program_is_looked_at(maps):
    for prog in (999_999, _load(maps, ProgType.SOCKET_FILTER)):
        assert err_of(maps.sys.attach_tracepoint, prog, "syscalls", "pybpf_none") == \
            errno.ENOENT
    assert err_of(maps.sys.attach_tracepoint, 999_999, "syscalls", "sys_enter_getpid") == \
        errno.EBADF


def test_a_syscall_program_test_run_ignores_cpu_and_checks_the_ctx_size(maps):
    reads_ctx_8 = bytes.fromhex("6110080000000000") + RETURN_0  # r0 = *(u32 *)(r1 + 8)
    prog = _load(maps, ProgType.SYSCALL, reads_ctx_8, prog_flags=BPF_F_SLEEPABLE)
    run = maps.sys.prog_test_run
    assert run(prog, ctx_in=bytes(12), ctx_size_out=0, repeat=0, cpu=1).retval == 0
    assert err_of(run, prog, ctx_in=bytes(4), ctx_size_out=0, repeat=0) == errno.EINVAL
    for extra in ({"flags": 1, "cpu": 1}, {"batch_size": 5}, {"repeat": 1}):
        kwargs = {"ctx_size_out": 0, "repeat": 0, **extra}
        assert err_of(run, prog, ctx_in=bytes(12), **kwargs) == errno.EINVAL


@pytest.mark.parametrize("prog_type", [ProgType.SOCKET_FILTER, ProgType.SCHED_CLS,
                                       ProgType.CGROUP_SKB, ProgType.RAW_TRACEPOINT])
def test_batch_size_is_for_xdp_test_runs_only(maps, prog_type):
    prog = _load(maps, prog_type)
    if prog_type == ProgType.RAW_TRACEPOINT:
        kwargs = {"ctx_in": bytes(8), "ctx_size_out": 0, "repeat": 0}
    else:
        kwargs = {"data_in": bytes(64)}
    maps.sys.prog_test_run(prog, **kwargs)
    assert err_of(maps.sys.prog_test_run, prog, batch_size=1, **kwargs) == errno.EINVAL


def test_log_level_takes_the_known_bits_only(maps):
    """bpf_vlog_init: LEVEL1 | LEVEL2 | STATS | FIXED (15); the BTF checker's log too."""
    from pybpf.btf import Btf, Int

    sys = maps.sys
    btf = Btf([Int("int", 4, 1, 0, 32)]).to_bytes()
    for level in (1, 2, 4, 8, 15):
        _load(maps, ProgType.SOCKET_FILTER, log_level=level)
        sys.close(sys.btf_load(btf, level))
    for level in (16, 32):
        assert err_of(_load, maps, ProgType.SOCKET_FILTER, log_level=level) == errno.EINVAL
        assert err_of(sys.btf_load, btf, level) == errno.EINVAL
