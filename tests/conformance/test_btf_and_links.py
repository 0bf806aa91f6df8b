"""BTF objects, typed maps, programs with func_info, raw tracepoint and XDP links, on both
backends. Every expected errno here was read from the running kernel (6.18)."""

from __future__ import annotations

import errno
import struct

import pytest

from helpers import err_of
from pybpf.btf import (
    Btf,
    Datasec,
    Func,
    FuncProto,
    Int,
    Member,
    Struct,
    Var,
    VarSecinfo,
)
from pybpf.errors import VerifierError
from pybpf.uapi import ENOTSUPP, AttachType, MapType, ProgType

INT, U64, KEY, VAR, DATASEC, FUNC_MAIN, FUNC_SUB, PROTO = range(1, 9)
BTF = Btf([Int("int", 4, 1, 0, 32), Int("unsigned long long", 8, 0, 0, 64),
           Struct("key", 8, (Member("a", INT, 0), Member("b", INT, 32))),
           Var("x", INT, 1), Datasec(".data", 4, (VarSecinfo(VAR, 0, 4),)),
           Func("main", PROTO, 1), Func("sub", PROTO, 0), FuncProto("", INT, ())])


def insn(code: int, regs: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, regs, off, imm)


RETURN_0 = insn(0xB7) + insn(0x95)
# main: call sub; exit. sub: r0 = 2; exit.
WITH_CALL = insn(0x85, 0x10, 0, 1) + insn(0x95) + insn(0xB7, 0, 0, 2) + insn(0x95)


def func_info(*records: tuple[int, int]) -> bytes:
    return b"".join(struct.pack("<II", off, type_id) for off, type_id in records)


@pytest.fixture
def btf_fd(maps):
    fd = maps.sys.btf_load(BTF.to_bytes())
    maps.fds.append(fd)
    return fd


@pytest.mark.parametrize("label,map_type,key_size,value_size,key_id,value_id,expected", [
    ("hash", MapType.HASH, 4, 8, INT, U64, 0),
    ("hash without a key type", MapType.HASH, 4, 8, 0, U64, errno.EINVAL),
    ("key type of another size", MapType.HASH, 8, 8, INT, U64, errno.EINVAL),
    ("a key type only", MapType.HASH, 4, 8, INT, 0, errno.EINVAL),
    ("value of a variable's size", MapType.HASH, 4, 4, INT, VAR, 0),
    ("value is a function", MapType.HASH, 4, 4, INT, FUNC_MAIN, errno.EINVAL),
    ("array of a 32-bit key", MapType.ARRAY, 4, 8, INT, U64, 0),
    ("array of a 64-bit key", MapType.ARRAY, 8, 8, U64, U64, errno.EINVAL),
    ("global data array", MapType.ARRAY, 4, 4, 0, DATASEC, 0),
    ("keyless per-CPU array", MapType.PERCPU_ARRAY, 4, 8, 0, U64, errno.EINVAL),
    ("LPM trie of an int key", MapType.LPM_TRIE, 4, 8, INT, U64, errno.EINVAL),
    ("LPM trie of a struct key", MapType.LPM_TRIE, 8, 8, KEY, U64, 0),
    ("bloom filter with a key type", MapType.BLOOM_FILTER, 0, 8, INT, U64, errno.EINVAL),
    ("bloom filter", MapType.BLOOM_FILTER, 0, 8, 0, U64, 0),
    ("queue", MapType.QUEUE, 0, 8, 0, U64, errno.EINVAL),
    ("prog array", MapType.PROG_ARRAY, 4, 4, INT, INT, 0),
    ("devmap", MapType.DEVMAP, 4, 4, INT, INT, ENOTSUPP),
    ("sockmap", MapType.SOCKMAP, 4, 4, 0, INT, ENOTSUPP),
    ("devmap of a wrong key size", MapType.DEVMAP, 4, 4, U64, INT, errno.EINVAL),
])
def test_map_check_btf(maps, btf_fd, label, map_type, key_size, value_size, key_id, value_id,
                       expected):
    flags = 1 if map_type == MapType.LPM_TRIE else 0  # BPF_F_NO_PREALLOC
    args = (map_type, key_size, value_size, 1)
    kw = dict(map_flags=flags, btf_fd=btf_fd, btf_key_type_id=key_id,
              btf_value_type_id=value_id)
    if expected:
        assert maps.create_errno(*args, **kw) == expected, label
        return
    info = maps.sys.map_get_info(maps.create(*args, **kw))
    assert (info.btf_key_type_id, info.btf_value_type_id) == (key_id, value_id)
    assert info.btf_id


def test_btf_fd_errors(maps, btf_fd):
    hash_args = (MapType.HASH, 4, 8, 1)
    ids = dict(btf_key_type_id=INT, btf_value_type_id=U64)
    array = maps.create(MapType.ARRAY, 4, 4, 1)
    assert maps.create_errno(*hash_args, btf_fd=9999, **ids) == errno.EBADF
    assert maps.create_errno(*hash_args, btf_fd=array, **ids) == errno.EINVAL
    # The map's own attributes are checked before its BTF: max_entries 0 wins.
    assert maps.create_errno(MapType.HASH, 4, 8, 0, btf_fd=9999, **ids) == errno.EINVAL
    assert maps.create_errno(*hash_args, btf_fd=btf_fd, btf_key_type_id=INT,
                             btf_value_type_id=99) == errno.EINVAL


def test_malformed_btf_is_refused_with_a_log(maps):
    with pytest.raises(VerifierError) as info:
        maps.sys.btf_load(b"not BTF at all, just bytes")
    assert info.value.errno == errno.EINVAL and info.value.log
    dangling = Btf([Struct("s", 4, (Member("a", 9, 0),))])
    assert err_of(maps.sys.btf_load, dangling.to_bytes()) == errno.EINVAL
    no_proto = Btf([Int("int", 4, 1, 0, 32), Func("f", 1, 0)])
    assert err_of(maps.sys.btf_load, no_proto.to_bytes()) == errno.EINVAL


def test_the_btf_header_is_checked_as_btf_parse_hdr_does(maps):
    sys = maps.sys
    good = Btf([Int("int", 4, 1, 0, 32)]).to_bytes()
    sys.close(sys.btf_load(good))
    assert err_of(sys.btf_load, good[:2] + bytes([2]) + good[3:]) == ENOTSUPP  # version 2
    assert err_of(sys.btf_load, good[:3] + bytes([1]) + good[4:]) == ENOTSUPP  # flags
    assert err_of(sys.btf_load, Btf([]).to_bytes()) == errno.EINVAL  # no type found


@pytest.mark.parametrize("label,records,expected", [
    ("one record per subprogram", ((0, FUNC_MAIN), (2, FUNC_SUB)), 0),
    ("a record missing", ((0, FUNC_MAIN),), errno.EINVAL),
    ("the first not at 0", ((1, FUNC_MAIN), (2, FUNC_SUB)), errno.EINVAL),
    ("a record off the subprogram", ((0, FUNC_MAIN), (3, FUNC_SUB)), errno.EINVAL),
    ("a record of a non-FUNC type", ((0, INT), (2, FUNC_SUB)), errno.EINVAL),
])
def test_func_info_must_describe_the_subprograms(maps, btf_fd, label, records, expected):
    load = maps.sys.prog_load
    args = (ProgType.SOCKET_FILTER, WITH_CALL)
    kw = dict(prog_btf_fd=btf_fd, func_info=func_info(*records), kern_version=0x60C00)
    if expected:
        assert err_of(load, *args, **kw) == expected, label
    else:
        maps.fds.append(load(*args, **kw))


def test_func_info_needs_a_btf_object(maps):
    assert err_of(maps.sys.prog_load, ProgType.SOCKET_FILTER, WITH_CALL, prog_btf_fd=9999,
                  func_info=func_info((0, FUNC_MAIN), (2, FUNC_SUB))) == errno.EBADF
    assert err_of(maps.sys.prog_load, ProgType.SOCKET_FILTER, RETURN_0,
                  func_info=b"\0" * 12) == errno.EINVAL  # not whole 8-byte records


def test_raw_tracepoint_open(maps):
    sys = maps.sys
    raw = sys.prog_load(ProgType.RAW_TRACEPOINT, RETURN_0)
    sock = sys.prog_load(ProgType.SOCKET_FILTER, RETURN_0)
    maps.fds += [raw, sock]
    link = sys.raw_tracepoint_open(raw, "sys_enter")
    sys.close(link)
    assert err_of(sys.raw_tracepoint_open, raw, "no_such_tracepoint_here") == errno.ENOENT
    assert err_of(sys.raw_tracepoint_open, sock, "sys_enter") == errno.EINVAL
    assert err_of(sys.raw_tracepoint_open, raw, "") == errno.EINVAL


def test_a_tracepoint_takes_a_program_once_a_raw_tracepoint_as_often_as_asked(maps):
    """bpf_prog_array_copy refuses a program a perf event's tracepoint already runs (EEXIST)
    until that attachment goes; each raw tracepoint link is a probe of its own."""
    sys = maps.sys
    tracepoint, other = (sys.prog_load(ProgType.TRACEPOINT, RETURN_0) for _ in range(2))
    raw = sys.prog_load(ProgType.RAW_TRACEPOINT, RETURN_0)
    maps.fds += [tracepoint, other, raw]
    first = sys.attach_tracepoint(tracepoint, "syscalls", "sys_enter_getpid")
    assert err_of(sys.attach_tracepoint, tracepoint, "syscalls",
                  "sys_enter_getpid") == errno.EEXIST
    links = [sys.attach_tracepoint(other, "syscalls", "sys_enter_getpid"),
             sys.attach_tracepoint(tracepoint, "syscalls", "sys_enter_getppid"),
             sys.raw_tracepoint_open(raw, "sys_enter"), sys.raw_tracepoint_open(raw, "sys_enter")]
    sys.close(first)
    links.append(sys.attach_tracepoint(tracepoint, "syscalls", "sys_enter_getpid"))
    for link in links:
        sys.close(link)


def test_xdp_link_create_refusals(maps):
    sys = maps.sys
    xdp = sys.prog_load(ProgType.XDP, insn(0xB7, 0, 0, 2) + insn(0x95),
                        expected_attach_type=AttachType.XDP)
    sock = sys.prog_load(ProgType.SOCKET_FILTER, RETURN_0)
    maps.fds += [xdp, sock]
    assert err_of(sys.link_create, xdp, 99999, AttachType.XDP) == errno.EINVAL  # no device
    assert err_of(sys.link_create, sock, 1, AttachType.XDP) == errno.EINVAL
    assert err_of(sys.link_create, xdp, 1, AttachType.CGROUP_INET_INGRESS) == errno.EINVAL
    assert err_of(sys.link_create, xdp, 1 << 32, AttachType.XDP) == errno.EINVAL


def test_vmlinux_btf_describes_the_program_contexts(backend):
    btf = Btf.from_bytes(backend.vmlinux_btf())
    xdp_md = btf.flat_members(btf.find("xdp_md"))
    assert {name: m.offset for name, m in xdp_md.items()} == {
        "data": 0, "data_end": 4, "data_meta": 8, "ingress_ifindex": 12,
        "rx_queue_index": 16, "egress_ifindex": 20}
    skb = btf.flat_members(btf.find("__sk_buff"))
    assert (skb["len"].offset, skb["cb"].offset, skb["cb"].size, skb["hwtstamp"].offset) == \
        (0, 48, 20, 184)
    assert btf.size_of(btf.find("__sk_buff")) == 192
    assert btf.size_of(btf.find("sk_msg_md")) == 80
