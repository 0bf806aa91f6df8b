"""A program reads its maps' struct bpf_map fields through the map pointer (``struct bpf_map
*m = (void *)&map; m->max_entries``: the kernel's check_ptr_to_map_access), its local struct
relocated by CO-RE against each backend's kernel BTF: the same offsets, the same values on
both backends (the id each map got from its own backend)."""

from __future__ import annotations

import errno

import pytest

from pybpf.bpf_object import ObjectSpec
from pybpf.errors import BPFError
from pybpf.uapi import BPF_F_NO_PREALLOC, MapType

READ_FIELDS = """
#include <bpf/bpf_core_read.h>
char LICENSE[] SEC("license") = "GPL";

struct bpf_map {
    enum bpf_map_type map_type; __u32 key_size; __u32 value_size; __u32 max_entries;
    __u64 map_extra; __u32 map_flags; __u32 id; int numa_node; char name[16];
} __attribute__((preserve_access_index));

struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 7); __type(key, __u32);
         __type(value, __u64); __uint(map_flags, BPF_F_NO_PREALLOC); } flows SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 3); __type(key, __u32);
         __type(value, __u32); } slots SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_BLOOM_FILTER); __uint(max_entries, 16);
         __type(value, __u32); __uint(map_extra, 3); } seen SEC(".maps");

__u64 fields[3][8];

static __always_inline void read_fields(struct bpf_map *m, __u64 *out)
{
    out[0] = m->map_type;
    out[1] = m->key_size;
    out[2] = m->value_size;
    out[3] = m->max_entries;
    out[4] = m->map_extra;
    out[5] = m->map_flags;
    out[6] = m->id;
    out[7] = (__u32)m->numa_node | (__u64)m->name[0] << 32;
}

SEC("xdp")
int read_maps(struct xdp_md *ctx)
{
    read_fields((struct bpf_map *)&flows, fields[0]);
    read_fields((struct bpf_map *)&slots, fields[1]);
    read_fields((struct bpf_map *)&seen, fields[2]);
    return XDP_PASS;
}
"""


def test_struct_bpf_map_fields_read_through_a_map_pointer(compile_source, kernel, emulated):
    path = compile_source("map_ptr_fields", READ_FIELDS)
    for system in (kernel, emulated):
        with ObjectSpec.from_file(path).load(system) as obj:
            assert obj.programs["read_maps"].test_run(bytes(64)).retval == 2  # XDP_PASS
            ids = [obj.maps[name].id for name in ("flows", "slots", "seen")]
            fields = [list(row) for row in obj.globals["fields"]]
        no_node = (1 << 32) - 1  # NUMA_NO_NODE (-1): created without BPF_F_NUMA_NODE
        assert fields == [
            [MapType.HASH, 4, 8, 7, 0, BPF_F_NO_PREALLOC, ids[0], no_node | ord("f") << 32],
            [MapType.ARRAY, 4, 4, 3, 0, 0, ids[1], no_node | ord("s") << 32],
            [MapType.BLOOM_FILTER, 0, 4, 16, 3, 0, ids[2], no_node | ord("s") << 32],
        ], system


WRITE_FIELD = """
char LICENSE[] SEC("license") = "GPL";
struct bpf_map { __u32 max_entries; } __attribute__((preserve_access_index));
struct { __uint(type, BPF_MAP_TYPE_%s); __uint(max_entries, 7); __type(key, __u32);
         __type(value, __u64); } target SEC(".maps");

SEC("xdp")
int shrink(struct xdp_md *ctx)
{
    ((volatile struct bpf_map *)&target)->max_entries = 1;
    return XDP_PASS;
}
"""


@pytest.mark.parametrize(("map_type", "kernel_struct"),
                         [("HASH", "bpf_htab"), ("ARRAY", "bpf_array")])
@pytest.mark.parametrize("backend_name", ["kernel", "emulated"])
def test_a_store_through_a_map_pointer_is_refused(map_type, kernel_struct, backend_name,
                                                   compile_source, request):
    system = request.getfixturevalue(backend_name)
    path = compile_source(f"map_ptr_store_{map_type}", WRITE_FIELD % map_type)
    with pytest.raises(BPFError) as info:
        ObjectSpec.from_file(path).load(system).close()
    assert info.value.errno == errno.EACCES
    assert f"only read from {kernel_struct} is supported" in str(info.value)


READ_OPS = """
char LICENSE[] SEC("license") = "GPL";
struct bpf_map { void *ops; } __attribute__((preserve_access_index));
struct raw_bpf_map { char before[40]; void *ops; };  /* 6.18's offset, no CO-RE */
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 7); __type(key, __u32);
         __type(value, __u64); } target SEC(".maps");

SEC("xdp")
int read_ops(struct xdp_md *ctx)
{
    return %s->ops != 0;
}
"""


@pytest.mark.parametrize(("how", "pointer", "err", "message"), [
    ("core", "((struct bpf_map *)&target)", errno.EINVAL,
     "failed to resolve CO-RE relocation <byte_off>"),
    ("raw", "((struct raw_bpf_map *)&target)", 524,  # ENOTSUPP
     "the emulated map has no value for struct bpf_htab at off=40 size=8"),
])
def test_a_field_the_emulated_map_has_no_value_for(how, pointer, err, message, compile_source,
                                                   kernel, emulated):
    """struct bpf_map's ops (a kernel pointer), which the kernel lets a program read: the
    emulated kernel's BTF has no such field (a CO-RE relocation fails, as on a kernel without
    it), and a read at its offset is refused, naming the fields the emulated map keeps."""
    path = compile_source(f"map_ptr_ops_{how}", READ_OPS % pointer)
    with ObjectSpec.from_file(path).load(kernel) as obj:
        assert obj.programs["read_ops"].test_run(bytes(64)).retval == 1
    with pytest.raises(BPFError) as info:
        ObjectSpec.from_file(path).load(emulated).close()
    assert info.value.errno == err
    assert message in str(info.value)
