"""Corpus objects loaded on both backends: the same test runs give the same return values
and the same map contents (the kernel is the oracle), globals read and write by name,
pinned maps are reused, refusals read like libbpf's."""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import struct
import uuid

import pytest

from pybpf.bpf_object import Object, ObjectError, ObjectSpec, UnsupportedError
from pybpf.bpf_object.map_defs import adjust_ringbuf_sz
from pybpf.errors import BPFError, VerifierError
from pybpf.maps import Map
from pybpf.uapi import BPF_F_NUMA_NODE, MapType

PACKET = bytes(range(64))  # an Ethernet frame is all a test run needs


@pytest.fixture
def pin_root(backend):
    """A bpffs directory for pins: the emulated bpffs root, or a fresh directory on the
    kernel's bpffs removed (with what was pinned in it) afterwards."""
    if backend.name == "emulated":
        yield "/sys/fs/bpf"
        return
    path = f"/sys/fs/bpf/pybpf-test-{uuid.uuid4().hex[:8]}"
    os.mkdir(path)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def load(build_object, backend, pin_root):
    """``load(name, **globals)``: the corpus object on this test's backend (closed after)."""
    objects: list[Object] = []

    def make(name: str, autoload_off: tuple[str, ...] = (), **globals_) -> Object:
        spec = ObjectSpec.from_file(build_object(name))
        for prog in autoload_off:
            spec.set_autoload(prog, False)
        for var, value in globals_.items():
            spec.globals[var] = value
        obj = spec.load(backend, pin_root_path=pin_root)
        objects.append(obj)
        return obj

    yield make
    for obj in objects:
        obj.close()


def contents(m: Map) -> dict:
    """A map's contents as a dict (per-CPU values summed: which CPU a test run uses is the
    scheduler's choice)."""
    out = {}
    for key, value in m.items():
        out[key] = value.sum() if hasattr(value, "sum") else value
    return out


def test_btf_maps_record_a_packet(load):
    obj = load("btf_maps")
    prog = obj.programs["record_packet"]
    assert prog.test_run(PACKET).retval == 2  # XDP_PASS: no route yet
    obj.maps["routes"][(32, (10, 0, 0, 1))] = 7
    assert prog.test_run(PACKET).retval == 7
    point = obj.maps["points"][0]
    assert (point.x, point.y, point.weight) == (64, -64, 7)
    assert contents(obj.maps["percpu_counts"]) == {0: 2, 1: 0, 2: 0, 3: 0}
    assert obj.maps["sized"][(1).to_bytes(4, "little")] == (128).to_bytes(8, "little")
    assert contents(obj.maps["lru"]) == {64: 1}
    assert contents(obj.maps["pinned_counts"]) == {1: 64}
    assert [obj.maps["queue"].pop() for _ in range(2)] == [64, 64]
    assert 64 in obj.maps["bloom"] and 65 not in obj.maps["bloom"]


def test_legacy_maps_count_sizes(load):
    obj = load("legacy_maps")
    prog = obj.programs["count_sizes"]
    for size in (60, 150, 151):
        prog.test_run(bytes(size))
    # A socket filter sees the packet after its Ethernet header: 46, 136 and 137 bytes.
    sizes = obj.maps["packet_sizes"]
    assert sizes[0] == (46).to_bytes(8, "little")
    assert sizes[1] == (136 + 137).to_bytes(8, "little")
    assert len(obj.maps["seen"]) == 3


def test_map_in_map_initial_contents_and_tail_call(load):
    obj = load("map_in_map")
    outer = obj.maps["outer_array"]
    assert outer[0] == obj.maps["inner_a"].id and outer[3] == obj.maps["inner_b"].id
    assert obj.maps["outer_hash"][1] == obj.maps["inner_h"].id
    assert obj.maps["jump_table"][1] == obj.programs["tail_target"].id
    assert obj.programs["use_inner_maps"].test_run(PACKET).retval == 3  # the tail call: TX
    assert obj.maps["inner_b"][1] == 1 and obj.maps["inner_a"][1] == 0
    assert obj.maps["inner_h"][3] == 1


def test_globals_before_and_after_load(load, backend):
    obj = load("globals", limit=7, settings={"scale": 10})
    prog = obj.programs["fold_globals"]
    assert prog.test_run().retval == 1
    assert prog.test_run().retval == 2
    g = obj.globals
    assert g["calls"] == 2 and g["counter"] == 7 + 2 + 3
    assert g["results"] == (12, 70, 5 - 1 + ord("s"), 11 + 4)
    g["counter"] = 100
    g["tuned"] = 1
    prog.test_run()
    assert g["results"][0] == 104 and g["results"][3] == 5
    assert g["limit"] == 7 and g["settings"].scale == 10
    with pytest.raises(BPFError) as info:
        g["limit"] = 8  # .rodata is frozen once loaded
    assert info.value.errno == errno.EPERM
    assert obj.maps[".rodata"].info().map_flags & 0x80  # BPF_F_RDONLY_PROG


def test_subprograms_run_in_both_programs(load):
    obj = load("subprogs")
    assert obj.programs["squares_first"].test_run(PACKET).retval == 2
    assert obj.programs["totals_first"].test_run(PACKET).retval == 2
    assert obj.maps["totals"][0] == 64 * 64 + 4 and obj.maps["totals"][1] == 64


def test_program_types_load_and_run(load):
    obj = load("prog_types", autoload_off=("on_tp_btf",))
    assert "not_autoloaded" not in obj.programs and "on_tp_btf" not in obj.programs
    runs = {"on_xdp": PACKET, "on_socket": PACKET, "on_tc": PACKET, "on_classifier": PACKET}
    retvals = {name: obj.programs[name].test_run(data).retval for name, data in runs.items()}
    assert retvals == {"on_xdp": 2, "on_socket": 50, "on_tc": 0, "on_classifier": 0}
    assert obj.programs["on_syscall"].test_run().retval == 42
    obj.programs["on_raw_tp"].test_run(ctx=bytes(16))
    assert {k: v for k, v in obj.maps["hits"].items() if v} == {0: 1, 2: 1, 3: 1, 4: 1,
                                                                 7: 1, 10: 1}


def test_core_context_access_is_relocated(load):
    obj = load("core", autoload_off=("task_facts",))
    assert obj.programs["packet_length"].test_run(PACKET).retval == 64


def test_core_against_the_kernels_types(build_object, kernel):
    from pybpf.btf import Btf

    spec = ObjectSpec.from_file(build_object("core"))
    with spec.load(kernel) as obj:
        obj.programs["task_facts"].test_run(ctx=bytes(16))
        vmlinux = Btf.from_bytes(kernel.vmlinux_btf())
        task = vmlinux.find("task_struct")
        facts = obj.globals["facts"]
        assert facts[0] == vmlinux.flat_members(task)["tgid"].offset
        assert facts[1:5] == (4, 0, 1, vmlinux.size_of(task))
        assert facts[5] == 11  # BPF_MAP_TYPE_LPM_TRIE


def test_core_relocation_the_emulated_backend_lacks_reads_like_libbpf(build_object,
                                                                      emulated):
    spec = ObjectSpec.from_file(build_object("core"))
    with pytest.raises(VerifierError) as info:
        spec.load(emulated)
    text = str(info.value)
    assert "prog 'task_facts': BPF program load failed: Invalid argument" in text
    assert ("prog 'task_facts': relo #0: insn #0: failed to resolve CO-RE relocation "
            "<byte_off> [5] struct task_struct.tgid (0:1 @ offset 4)") in text


def test_map_perf_twin_loads(load):
    obj = load("map_perf")
    assert obj.maps["array_of_lru_hashs"][0] == obj.maps["inner_lru_hash_map"].id
    assert len(obj.programs) == 8


def test_unsupported_features_stop_the_load_naming_them(load):
    with pytest.raises(UnsupportedError, match=r"prog 'uses_arena': unsupported: extern "
                                               r"'arena global data \(__arena\)' at insn #0"):
        load("unsupported")
    obj = load("unsupported", autoload_off=("uses_arena",))
    assert list(obj.programs) == ["plain"]


def test_closing_the_object_closes_everything(build_object, backend, pin_root):
    spec = ObjectSpec.from_file(build_object("subprogs"))
    with spec.load(backend, pin_root_path=pin_root) as obj:
        fds = [m.fd for m in obj.maps.values()] + [p.fd for p in obj.programs.values()]
        btf_fd = obj.btf_fd
        assert btf_fd is not None
    assert all(m.closed for m in obj.maps.values())
    assert all(p.closed for p in obj.programs.values())
    for fd in [*fds, btf_fd]:
        with pytest.raises(OSError):
            backend.map_get_info(fd) if fd in fds[:1] else backend.close(fd)


def test_pinned_maps_are_reused(build_object, backend, pin_root):
    spec = ObjectSpec.from_file(build_object("btf_maps"))
    with spec.load(backend, pin_root_path=pin_root) as first:
        first.maps["pinned_counts"][5] = 55
        with spec.load(backend, pin_root_path=pin_root) as second:
            assert second.maps["pinned_counts"][5] == 55
            assert second.maps["pinned_counts"].id == first.maps["pinned_counts"].id
            assert second.maps["points"].id != first.maps["points"].id


def test_a_pinned_map_that_does_not_match_is_refused(compile_source, backend, pin_root):
    backend.obj_pin(backend.map_create(1, 4, 4, 3), os.path.join(pin_root, "shared"))
    path = compile_source("pin_mismatch", """
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 8); __type(key, __u32);
         __type(value, __u32); __uint(pinning, LIBBPF_PIN_BY_NAME); } shared SEC(".maps");
""")
    with pytest.raises(Exception, match="map 'shared': couldn't reuse pinned map at .*: "
                                        "parameter mismatch"):
        ObjectSpec.from_file(path).load(backend, pin_root_path=pin_root)


def test_typed_maps_carry_their_btf_ids(load, backend):
    obj = load("btf_maps")
    spec = obj.spec
    for name in ("points", "routes", "lru"):
        info = obj.maps[name].info()
        assert (info.btf_key_type_id, info.btf_value_type_id) == \
            (spec.maps[name].key_type_id, spec.maps[name].value_type_id)
        assert info.btf_id
    assert obj.maps["queue"].info().btf_value_type_id == 0  # libbpf leaves queues untyped


def test_bpftool_prints_typed_values(build_object, kernel):
    import json
    import subprocess

    from conftest import need_tool

    bpftool = need_tool("bpftool")
    spec = ObjectSpec.from_file(build_object("btf_maps"))
    spec.set_autoload("record_packet", True)
    root = f"/sys/fs/bpf/pybpf-test-{uuid.uuid4().hex[:8]}"
    os.mkdir(root)
    try:
        with spec.load(kernel, pin_root_path=root) as obj:
            obj.maps["points"][3] = {"x": 1, "y": -2, "weight": 3}
            out = subprocess.run([bpftool, "-j", "map", "dump", "id",
                                  str(obj.maps["points"].id)], check=True,
                                 capture_output=True, text=True).stdout
            assert json.loads(out)[0]["formatted"] == {
                "key": 3, "value": {"x": 1, "y": -2, "weight": 3}}
    finally:
        for name in os.listdir(root):
            os.unlink(os.path.join(root, name))
        os.rmdir(root)


# libbpf 1.1 on globals.c: bpf_map__name() of each map in its order, and its kernel name.
LIBBPF_DATA_MAP_NAMES = {"globals.rodata": "globals.rodata", "globals.data": "globals.data",
                         ".data.tuning": ".data.tuning", ".rodata.table": ".rodata.table",
                         "globals.bss": "globals.bss"}


def test_global_data_maps_are_named_as_libbpf_names_them(load):
    obj = load("globals")
    assert {name: m.info().name for name, m in obj.maps.items()} == LIBBPF_DATA_MAP_NAMES
    assert list(obj.maps) == list(LIBBPF_DATA_MAP_NAMES)
    # bpf_object__find_map_by_name: a name with a leading dot is the map's ELF section.
    for section in (".data", ".rodata", ".bss", ".data.tuning", ".rodata.table"):
        assert section in obj.maps
        assert obj.maps[section] is obj.maps.get(section) is obj.maps[
            section if section.count(".") > 1 else f"globals{section}"]
    assert ".rodata.tab" not in obj.maps and obj.maps.get("globals") is None


def test_map_names_are_libbpfs_on_the_same_object(build_object, kernel):
    """bpftool loads the object with libbpf and pins its maps by bpf_map__name(), its dots
    made underscores (libbpf's sanitize_pin_path)."""
    import subprocess

    from conftest import need_tool

    bpftool = need_tool("bpftool")
    path = build_object("globals")
    root = f"/sys/fs/bpf/pybpf-test-{uuid.uuid4().hex[:8]}"
    os.mkdir(root)
    try:
        subprocess.run([bpftool, "prog", "loadall", str(path), f"{root}/progs", "pinmaps",
                        f"{root}/maps"], check=True, capture_output=True, text=True)
        libbpf_names = {}
        for name in os.listdir(f"{root}/maps"):
            fd = kernel.obj_get(f"{root}/maps/{name}")
            libbpf_names[name] = kernel.map_get_info(fd).name
            kernel.close(fd)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    with ObjectSpec.from_file(path).load(kernel) as obj:
        assert {name.replace(".", "_"): m.info().name for name, m in obj.maps.items()} == \
            libbpf_names


def test_loading_a_big_endian_object_on_this_host_is_refused(build_object, emulated):
    spec = ObjectSpec.from_file(build_object("subprogs", "bpfeb"))
    with pytest.raises(Exception, match="big-endian; this machine is not"):
        spec.load(emulated)


def test_struct_values_pack_as_the_c_does(load):
    obj = load("btf_maps")
    obj.maps["points"][9] = (1, -1, 2)
    raw = obj.system.map_lookup_elem(obj.maps["points"].fd, (9).to_bytes(4, "little"))
    assert raw == struct.pack("<Iiq", 1, -1, 2)


# The same runs on both backends, then every map compared (fd-holding maps hold ids, which
# differ between backends; the other tests check those).
SCENARIOS = {
    "btf_maps": [("record_packet", {"data": PACKET}), ("record_packet", {"data": bytes(90)})],
    "legacy_maps": [("count_sizes", {"data": bytes(n)}) for n in (60, 150, 151)],
    "map_in_map": [("use_inner_maps", {"data": PACKET})] * 2,
    "globals": [("fold_globals", {})] * 3,
    "subprogs": [("squares_first", {"data": PACKET}), ("totals_first", {"data": bytes(80)})],
    "map_perf": [],
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_runs_give_the_same_maps_on_both_backends(build_object, kernel, emulated, name):
    from pybpf.uapi import map_traits

    results = []
    for system in (kernel, emulated):
        spec = ObjectSpec.from_file(build_object(name))
        for m in spec.maps.values():
            m.pinning = 0
        with spec.load(system) as obj:
            retvals = [obj.programs[prog].test_run(**run).retval
                       for prog, run in SCENARIOS[name]]
            maps = {m: contents(obj.maps[m]) for m in obj.maps
                    if not map_traits(obj.maps[m].spec.type).fd_values
                    and obj.maps[m].spec.key_size}
            queues = {m: obj.maps[m].info().max_entries for m in obj.maps
                      if not obj.maps[m].spec.key_size}
        results.append((retvals, maps, queues))
    assert results[0] == results[1]


def test_readme_c_example_loops_and_locks_the_same_on_both_backends(build_object, kernel,
                                                                    capsys):
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("## Programs written in C"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    # 3 runs of 64 bytes under the lock; bpf_loop summed 2 x (0 + ... + 9)
    assert capsys.readouterr().out.splitlines() == ["kernel 192 3 90", "emulated 192 3 90"]


@pytest.mark.parametrize("name", ["globals", "subprogs", "map_in_map", "btf_maps"])
def test_the_emulated_engines_agree(build_object, name):
    from pybpf import system
    from pybpf.emulated.prog.native import native_missing
    from pybpf.uapi import map_traits

    results = []
    for engine in ("jit", "interp") if native_missing() else ("jit", "interp", "native"):
        emulated = system("emulated")
        emulated.bpf_engine = engine
        spec = ObjectSpec.from_file(build_object(name))
        with spec.load(emulated) as obj:
            retvals = [obj.programs[prog].test_run(**run).retval
                       for prog, run in SCENARIOS[name]]
            maps = {m: contents(obj.maps[m]) for m in obj.maps
                    if not map_traits(obj.maps[m].spec.type).fd_values
                    and obj.maps[m].spec.key_size}
        results.append((retvals, maps))
    assert all(result == results[0] for result in results)


def test_tracing_programs_find_their_target_in_the_kernels_btf(build_object, kernel,
                                                                emulated):
    spec = ObjectSpec.from_file(build_object("prog_types"))
    with spec.load(kernel) as obj:
        assert "on_tp_btf" in obj.programs  # attach_btf_id: typedef btf_trace_sys_enter
    with pytest.raises(Exception, match="prog 'on_tp_btf': failed to find kernel BTF type ID "
                                        "of 'sys_enter'"):
        spec.load(emulated)


# -- map definitions and pins as libbpf handles them ------------------------------------------

@pytest.mark.parametrize("size, want", [
    (0, 0), (1, mmap.PAGESIZE), (mmap.PAGESIZE, mmap.PAGESIZE),
    (mmap.PAGESIZE + 1, 2 * mmap.PAGESIZE), (3 * mmap.PAGESIZE, 4 * mmap.PAGESIZE),
    (10000, 16384 if mmap.PAGESIZE == 4096 else mmap.PAGESIZE),
    (2**32 - 1, 2**32 - 1)])
def test_ringbuf_sizes_round_up_to_a_power_of_two_of_pages(size, want):
    assert adjust_ringbuf_sz(size) == want


def test_ring_buffers_are_made_with_libbpfs_rounded_size(compile_source, backend):
    path = compile_source("ringbuf_sizes", """
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 10000); } rb SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_USER_RINGBUF); __uint(max_entries, 5000); } urb
    SEC(".maps");
SEC("xdp") int prog(struct xdp_md *ctx) { return 2; }
char LICENSE[] SEC("license") = "GPL";
""")
    with ObjectSpec.from_file(path).load(backend) as obj:
        assert obj.maps["rb"].info().max_entries == adjust_ringbuf_sz(10000)
        assert obj.maps["urb"].info().max_entries == adjust_ringbuf_sz(5000)


def test_numa_node_counts_only_with_bpf_f_numa_node(compile_source, backend):
    """libbpf passes numa_node as given (0 by default) and the map_flags as given: a node
    without BPF_F_NUMA_NODE is ignored, the flag without a node is node 0."""
    path = compile_source("numa_fields", """
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 1); __uint(numa_node, 7); } no_flag SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 1); __uint(map_flags, BPF_F_NUMA_NODE); } no_node SEC(".maps");
SEC("xdp") int prog(struct xdp_md *ctx) { return 2; }
char LICENSE[] SEC("license") = "GPL";
""")
    with ObjectSpec.from_file(path).load(backend) as obj:
        assert obj.maps["no_flag"].info().map_flags == 0
        assert obj.maps["no_node"].info().map_flags == BPF_F_NUMA_NODE


@pytest.mark.parametrize("linkage", ["static", "__hidden"])
def test_maps_that_are_not_global_are_refused(compile_source, linkage):
    path = compile_source(f"{linkage.strip('_')}_map", f"""
{linkage} struct {{ __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 1); }} local_map SEC(".maps");
SEC("xdp") int prog(struct xdp_md *ctx) {{
    __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&local_map, &k); return v ? 2 : 1; }}
char LICENSE[] SEC("license") = "GPL";
""")
    with pytest.raises(UnsupportedError, match="map 'local_map': unsupported map linkage"):
        ObjectSpec.from_file(path)


def test_a_pinned_map_with_another_map_extra_is_refused(compile_source, backend, pin_root):
    backend.obj_pin(backend.map_create(MapType.BLOOM_FILTER, 0, 8, 16, map_extra=3),
                    os.path.join(pin_root, "bloom"))
    path = compile_source("pin_extra", """
struct { __uint(type, BPF_MAP_TYPE_BLOOM_FILTER); __type(value, __u64); __uint(max_entries, 16);
         __uint(map_extra, 5); __uint(pinning, LIBBPF_PIN_BY_NAME); } bloom SEC(".maps");
""")
    with pytest.raises(Exception, match="map 'bloom': couldn't reuse pinned map at .*: "
                                        "parameter mismatch"):
        ObjectSpec.from_file(path).load(backend, pin_root_path=pin_root)


def test_a_reused_pinned_map_of_maps_keeps_its_slots(compile_source, backend, pin_root):
    """libbpf fills a map's initial contents only when it creates the map: a pinned outer map
    found again keeps the inner maps it holds."""
    path = compile_source("pin_outer", """
struct inner { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u32);
               __uint(max_entries, 1); };
struct inner in1 SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS); __uint(max_entries, 2); __type(key, __u32);
         __uint(pinning, LIBBPF_PIN_BY_NAME); __array(values, struct inner); } pouter
    SEC(".maps") = { .values = { [0] = &in1 } };
""")
    spec = ObjectSpec.from_file(path)
    with spec.load(backend, pin_root_path=pin_root) as first:
        outer = first.maps["pouter"].fd
        assert backend.map_lookup_elem(outer, bytes(4))
        backend.map_delete_elem(outer, bytes(4))
        with spec.load(backend, pin_root_path=pin_root) as second:
            assert second.maps["pouter"].id == first.maps["pouter"].id
            with pytest.raises(BPFError) as missing:
                backend.map_lookup_elem(second.maps["pouter"].fd, bytes(4))
            assert missing.value.errno == errno.ENOENT


def test_a_prog_array_slot_of_a_program_not_loaded_fails_the_load(compile_source, backend):
    path = compile_source("slot_autoload_off", """
SEC("xdp") int tail0(struct xdp_md *ctx) { return 2; }
SEC("?xdp") int tail1(struct xdp_md *ctx) { return 1; }
struct { __uint(type, BPF_MAP_TYPE_PROG_ARRAY); __uint(max_entries, 4); __type(key, __u32);
         __array(values, int (void *)); } jmp SEC(".maps")
    = { .values = { [1] = (void *)&tail0, [3] = (void *)&tail1 } };
SEC("xdp") int entry(struct xdp_md *ctx) { bpf_tail_call(ctx, &jmp, 3); return 1; }
char LICENSE[] SEC("license") = "GPL";
""")
    spec = ObjectSpec.from_file(path)
    with pytest.raises(ObjectError, match=r"map 'jmp': failed to initialize slot \[3\] to "
                                          "prog 'tail1': it is not loaded"):
        spec.load(backend)
    spec.set_autoload("tail1", True)
    with spec.load(backend) as obj:
        assert backend.map_lookup_elem(obj.maps["jmp"].fd, struct.pack("<I", 3))


def test_a_failed_load_unpins_the_maps_it_pinned(compile_source, backend, pin_root):
    path = compile_source("pin_then_fail", """
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 8); __uint(pinning, LIBBPF_PIN_BY_NAME); } pin_then_fail
    SEC(".maps");
SEC("xdp") int bad(struct xdp_md *ctx) {
    __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&pin_then_fail, &k); return *v; }
char LICENSE[] SEC("license") = "GPL";
""")
    with pytest.raises(VerifierError):
        ObjectSpec.from_file(path).load(backend, pin_root_path=pin_root)
    with pytest.raises(BPFError) as gone:
        backend.obj_get(os.path.join(pin_root, "pin_then_fail"))
    assert gone.value.errno == errno.ENOENT


def test_a_missing_pin_directory_is_made_as_libbpf_makes_it(compile_source, backend,
                                                            pin_root):
    """libbpf's make_parent_dir: the pin's own directory is made if missing, not the ones
    above it (ENOENT, as libbpf 1.1 fails on 6.18)."""
    path = compile_source("pin_in_subdir", """
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 8); __uint(pinning, LIBBPF_PIN_BY_NAME); } pin_in_subdir
    SEC(".maps");
char LICENSE[] SEC("license") = "GPL";
""")
    spec = ObjectSpec.from_file(path)
    subdir = os.path.join(pin_root, f"sub-{uuid.uuid4().hex[:8]}")
    with spec.load(backend, pin_root_path=subdir) as obj:
        obj.maps["pin_in_subdir"][1] = 11
        with spec.load(backend, pin_root_path=subdir + "/") as again:  # there now: reused
            assert again.maps["pin_in_subdir"][1] == 11
    backend.obj_unpin(os.path.join(subdir, "pin_in_subdir"))
    backend.rmdir(subdir)
    with pytest.raises(BPFError, match=r"map 'pin_in_subdir': failed to pin at") as refused:
        spec.load(backend, pin_root_path=os.path.join(subdir, "deeper"))
    assert refused.value.errno == errno.ENOENT


def test_an_inner_map_template_has_the_objects_btf_types(compile_source, backend):
    """libbpf makes the inner-map template with its BTF types: an inner map whose value holds
    a bpf_spin_lock fits it, and a program locks the element found through the outer map."""
    path = compile_source("inner_spin_lock", """
struct foo { struct bpf_spin_lock lock; int data; };
struct array_map { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, int); __type(value, struct foo);
                   __uint(max_entries, 1); } array_map SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS); __uint(max_entries, 1); __type(key, int);
         __array(values, struct array_map); } map_of_maps SEC(".maps")
    = { .values = { [0] = &array_map } };
SEC("tc") int inc(struct __sk_buff *skb) {
    int k = 0; struct foo *f; void *inner = bpf_map_lookup_elem(&map_of_maps, &k);
    if (!inner) return 1;
    f = bpf_map_lookup_elem(inner, &k);
    if (!f) return 2;
    bpf_spin_lock(&f->lock); f->data++; bpf_spin_unlock(&f->lock);
    return 0; }
char LICENSE[] SEC("license") = "GPL";
""")
    with ObjectSpec.from_file(path).load(backend) as obj:
        assert [obj.programs["inc"].test_run(PACKET).retval for _ in range(3)] == [0, 0, 0]
        assert backend.map_lookup_elem(obj.maps["array_map"].fd, bytes(4))[4:] == \
            struct.pack("<I", 3)


def test_an_inner_perf_event_array_gets_a_slot_per_cpu(compile_source, backend):
    path = compile_source("inner_perf", """
struct events { __uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY); __uint(key_size, 4);
                __uint(value_size, 4); } events SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS); __uint(max_entries, 1); __type(key, int);
         __array(values, struct events); } outer SEC(".maps") = { .values = { [0] = &events } };
""")
    with ObjectSpec.from_file(path).load(backend) as obj:
        assert obj.maps["events"].info().max_entries == backend.num_possible_cpus
        assert backend.map_lookup_elem(obj.maps["outer"].fd, bytes(4))
