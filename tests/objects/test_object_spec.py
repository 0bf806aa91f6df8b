"""ObjectSpec of every corpus object: maps, programs, globals, relocations and linking,
checked against what the C says and against llvm-objdump's instructions."""

from __future__ import annotations

import re
import struct
import subprocess

import pytest

from conftest import CORPUS, need_tool
from pybpf.bpf_object import (
    LIBBPF_PIN_BY_NAME,
    ObjectError,
    ObjectSpec,
    RelocationError,
    RelocKind,
    UnsupportedError,
    check_loadable,
    find_section_def,
)
from pybpf.bpf_object.elf import STT_FUNC, ElfFile
from pybpf.uapi import (
    BPF_F_MMAPABLE,
    BPF_F_NO_COMMON_LRU,
    BPF_F_NO_PREALLOC,
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY_PROG,
    BPF_F_SLEEPABLE,
    BPF_F_XDP_HAS_FRAGS,
    BPF_PSEUDO_CALL,
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_VALUE,
    AttachType,
    MapType,
    ProgType,
)

INSN = struct.Struct("<BBhi")


@pytest.fixture(scope="module")
def spec(build_object):
    return lambda name: ObjectSpec.from_file(build_object(name))


# -- maps ---------------------------------------------------------------------------------

def test_btf_defined_maps(spec):
    s = spec("btf_maps")
    attrs = {name: (m.spec.type, m.spec.key_size, m.spec.value_size, m.spec.max_entries,
                    m.spec.map_flags, m.spec.map_extra) for name, m in s.maps.items()}
    assert attrs == {
        "points": (MapType.HASH, 4, 16, 64, 0, 0),
        "sized": (MapType.ARRAY, 4, 8, 8, 0, 0),
        "percpu_counts": (MapType.PERCPU_ARRAY, 4, 8, 4, 0, 0),
        "lru": (MapType.LRU_HASH, 8, 4, 128, BPF_F_NO_COMMON_LRU, 0),
        "queue": (MapType.QUEUE, 0, 4, 16, 0, 0),
        "bloom": (MapType.BLOOM_FILTER, 0, 4, 100, 0, 3),
        "routes": (MapType.LPM_TRIE, 8, 4, 32, BPF_F_NO_PREALLOC, 0),
        "pinned_counts": (MapType.HASH, 4, 8, 8, BPF_F_NUMA_NODE, 0),
    }
    assert s.maps["pinned_counts"].spec.numa_node == 0
    assert s.maps["pinned_counts"].pinning == LIBBPF_PIN_BY_NAME
    assert all(m.pinning == 0 for n, m in s.maps.items() if n != "pinned_counts")
    assert all(m.kind == "btf" for m in s.maps.values())


def test_btf_maps_carry_their_key_and_value_types(spec):
    s = spec("btf_maps")
    points = s.maps["points"]
    assert s.btf.describe(points.key_type_id) == "__u32"
    assert s.btf.describe(points.value_type_id) == "struct point"
    value = points.spec.value.decode(struct.pack("<Iiq", 3, -4, 5))
    assert value == (3, -4, 5) and value.weight == 5
    assert points.spec.value.encode({"x": 1, "y": -1, "weight": 2}) == struct.pack("<Iiq", 1,
                                                                                   -1, 2)
    route = s.maps["routes"].spec.key.decode(struct.pack("<I4B", 24, 10, 1, 2, 0))
    assert route.prefixlen == 24 and route.addr == (10, 1, 2, 0)
    # Given as sizes only: no BTF types, raw bytes.
    assert s.maps["sized"].key_type_id == s.maps["sized"].value_type_id == 0
    assert s.maps["sized"].spec.value is None


def test_legacy_maps(spec):
    s = spec("legacy_maps")
    assert {n: (m.kind, m.spec.type, m.spec.key_size, m.spec.value_size, m.spec.max_entries,
                m.spec.flags) for n, m in s.maps.items()} == {
        "packet_sizes": ("legacy", MapType.ARRAY, 4, 8, 4, 0),
        "seen": ("legacy", MapType.HASH, 4, 4, 32, BPF_F_NO_PREALLOC),
    }
    assert s.programs["count_sizes"].maps == ["packet_sizes", "seen"]


def test_map_in_map_and_prog_array_initial_slots(spec):
    s = spec("map_in_map")
    outer = s.maps["outer_array"]
    assert outer.spec.type == MapType.ARRAY_OF_MAPS and outer.spec.value_size == 4
    assert outer.slots == {0: "inner_a", 3: "inner_b"}
    inner = outer.spec.inner_map
    assert (inner.type, inner.key_size, inner.value_size, inner.max_entries) == \
        (MapType.ARRAY, 4, 8, 2)
    assert s.maps["outer_hash"].slots == {1: "inner_h"}
    assert s.maps["outer_hash"].spec.inner_map.type == MapType.HASH
    assert s.maps["jump_table"].slots == {1: "tail_target"}
    assert s.maps["jump_table"].spec.inner_map is None


def test_global_data_maps(spec):
    s = spec("globals")
    data = {n: (m.kind, m.spec.name, m.spec.value_size, m.spec.flags, m.frozen)
            for n, m in s.maps.items()}
    mmap = BPF_F_MMAPABLE
    assert data == {  # by libbpf's bpf_map__name(): the kernel name, or the custom section
        "globals.rodata": ("rodata", "globals.rodata", 24, BPF_F_RDONLY_PROG | mmap, True),
        "globals.data": ("data", "globals.data", 12, mmap, False),
        ".data.tuning": ("data", ".data.tuning", 4, mmap, False),
        ".rodata.table": ("rodata", ".rodata.table", 8, BPF_F_RDONLY_PROG | mmap, True),
        "globals.bss": ("bss", "globals.bss", 40, mmap, False),
    }
    for m in s.maps.values():
        assert (m.spec.type, m.spec.key_size, m.spec.max_entries) == (MapType.ARRAY, 4, 1)
        assert s.btf.describe(m.value_type_id).endswith(m.name) or m.value_type_id
    assert s.maps[".bss"].data == bytes(40)


def test_globals_read_and_write_by_name_before_load(spec):
    s = spec("globals")
    assert s.globals["limit"] == 100
    assert s.globals["counter"] == 7
    assert s.globals["hidden_step"] == 2  # static: found through BTF, not a symbol
    assert s.globals["table"] == (1, 2, 3, 4)
    settings = s.globals["settings"]
    assert (settings.scale, settings.label.rstrip(b"\0"), settings.enabled, settings.mode,
            settings.offsets) == (3, b"start", 1, 5, (-1, 0, 1))
    s.globals["limit"] = 250
    s.globals["settings"] = {"mode": 2, "label": b"go"}
    assert s.globals["limit"] == 250
    assert s.maps[".rodata"].data[s.globals.variables["limit"].offset:][:4] == \
        (250).to_bytes(4, "little")
    assert s.globals["settings"].mode == 2 and s.globals["settings"].scale == 3
    assert s.globals["settings"].label == b"go".ljust(8, b"\0")
    with pytest.raises(KeyError, match="no global variable 'nope'"):
        s.globals["nope"]
    with pytest.raises(ValueError):
        s.globals["limit"] = -1
    assert set(s.globals) == {"limit", "settings", "counter", "hidden_step", "results",
                              "calls", "tuned", "table"}


def test_internal_map_names_follow_libbpf():
    from pybpf.bpf_object.map_defs import internal_map_name
    assert internal_map_name("my_object_name", ".rodata") == "my_objec.rodata"
    assert internal_map_name("my_object_name", ".bss") == "my_objec.bss"
    assert internal_map_name("my_object_name", ".kconfig") == "my_obje.kconfig"
    assert internal_map_name("obj", ".rodata.abracadabra") == ".rodata.abracad"
    assert internal_map_name("a-b", ".data") == "a_b.data"


@pytest.mark.parametrize("section, name", [
    (".data", "my_objec.data"), (".kconfig", "my_obje.kconfig"),
    (".data.abracadabra_long", ".data.abracadabra_long"), (".rodata.x-y", ".rodata.x-y"),
    (".bss.verylongname_x", ".bss.verylongna"),
])
def test_data_map_names_follow_libbpf(section, name):
    """bpf_map__name() as libbpf 1.1 gives it: a custom .data.*/.rodata.* map keeps its
    section name (map_uses_real_name), the others have their kernel name."""
    from pybpf.bpf_object.map_defs import data_map_name
    assert data_map_name("my_object_name_long", section) == name


# -- programs -----------------------------------------------------------------------------

def test_program_types_by_section_name(spec):
    s = spec("prog_types")
    got = {n: (p.prog_type, p.expected_attach_type, p.prog_flags, p.attach_target, p.autoload)
           for n, p in s.programs.items()}
    A = AttachType  # noqa: N806
    assert got == {
        "on_xdp": (ProgType.XDP, A.XDP, 0, "", True),
        "on_xdp_frags": (ProgType.XDP, A.XDP, BPF_F_XDP_HAS_FRAGS, "", True),
        "on_socket": (ProgType.SOCKET_FILTER, 0, 0, "", True),
        "on_tc": (ProgType.SCHED_CLS, 0, 0, "", True),
        "on_classifier": (ProgType.SCHED_CLS, 0, 0, "", True),
        "on_tracepoint": (ProgType.TRACEPOINT, 0, 0, "syscalls/sys_enter_getppid", True),
        "on_tp": (ProgType.TRACEPOINT, 0, 0, "syscalls/sys_enter_getpgid", True),
        "on_raw_tp": (ProgType.RAW_TRACEPOINT, 0, 0, "sys_enter", True),
        "on_raw_tracepoint": (ProgType.RAW_TRACEPOINT, 0, 0, "sys_exit", True),
        "on_tp_btf": (ProgType.TRACING, A.TRACE_RAW_TP, 0, "sys_enter", True),
        "on_stream_parser": (ProgType.SK_SKB, A.SK_SKB_STREAM_PARSER, 0, "", True),
        "on_stream_verdict": (ProgType.SK_SKB, A.SK_SKB_STREAM_VERDICT, 0, "", True),
        "on_sk_skb": (ProgType.SK_SKB, 0, 0, "", True),
        "on_sk_msg": (ProgType.SK_MSG, A.SK_MSG_VERDICT, 0, "", True),
        "on_syscall": (ProgType.SYSCALL, 0, BPF_F_SLEEPABLE, "", True),
        "not_autoloaded": (ProgType.SOCKET_FILTER, 0, 0, "", False),
    }
    assert s.license == "Dual BSD/GPL" and s.kern_version == 0x060C00
    assert s.programs["on_tracepoint"].sec_def.attach == "tp"
    assert s.programs["on_xdp"].sec_def.attach is None


@pytest.mark.parametrize("section,expected", [
    ("xdp/devmap", (ProgType.XDP, AttachType.XDP_DEVMAP)),
    ("xdp.frags/cpumap", (ProgType.XDP, AttachType.XDP_CPUMAP)),
    ("kprobe/do_sys_open", (ProgType.KPROBE, 0)),
    ("fentry/tcp_v4_connect", (ProgType.TRACING, AttachType.TRACE_FENTRY)),
    ("lsm.s/file_open", (ProgType.LSM, AttachType.LSM_MAC)),
    ("cgroup_skb/egress", (ProgType.CGROUP_SKB, AttachType.CGROUP_INET_EGRESS)),
    ("cgroup/connect6", (ProgType.CGROUP_SOCK_ADDR, AttachType.CGROUP_INET6_CONNECT)),
    ("sk_lookup", (ProgType.SK_LOOKUP, AttachType.SK_LOOKUP)),
    ("tcx/ingress", (ProgType.SCHED_CLS, AttachType.TCX_INGRESS)),
    ("netfilter", (ProgType.NETFILTER, AttachType.NETFILTER)),
])
def test_section_defs_table(section, expected):
    sec_def = find_section_def(section)
    assert (sec_def.prog_type, sec_def.expected_attach_type) == expected


@pytest.mark.parametrize("section", ["xdpfoo", "socket/1", "tracepointx/a", "sk_skb/other", ""])
def test_unknown_section_names_match_nothing(section):
    assert find_section_def(section) is None


def _objdump(path) -> dict[str, dict[int, bytes]]:
    """{section: {instruction index: its bytes}} from llvm-objdump -d."""
    out: dict[str, dict[int, bytes]] = {}
    current: dict[int, bytes] = {}
    text = subprocess.run([need_tool("llvm-objdump"), "-d", str(path)], check=True,
                          capture_output=True, text=True).stdout
    for line in text.splitlines():
        section = re.match(r"Disassembly of section (\S+):", line)
        insn = re.match(r"\s+(\d+):\t([0-9a-f ]+)\t", line)
        if section:
            current = out.setdefault(section[1], {})
        elif insn:
            current[int(insn[1])] = bytes.fromhex(insn[2])
    return out


@pytest.mark.parametrize("name", CORPUS)
def test_linked_programs_are_the_sections_instructions(build_object, name):
    """Each program is its own instructions, then its subprograms', as llvm-objdump shows
    them, except where relocation rewrote a map load or a call."""
    path = build_object(name)
    elf = ElfFile.from_file(str(path))
    code = _objdump(path)
    functions = {s.name: (elf.sections[s.shndx].name, s.value // 8, s.size // 8)
                 for s in elf.symbols if s.type == STT_FUNC}
    s = ObjectSpec.from_file(path)
    for prog in s.programs.values():
        expected = b""
        for function in (prog.name, *prog.subprograms):
            section, start, count = functions[function]
            insns = code[section]
            expected += b"".join(insns[i] for i in range(start, start + count) if i in insns)
        assert len(prog.insns) == len(expected)
        rewritten = {r.insn for r in prog.relocations} | \
            {r.insn + 1 for r in prog.relocations if r.kind == RelocKind.MAP_VALUE} | \
            {i for i in range(len(prog.insns) // 8) if prog.insns[i * 8] == 0x85 and
             prog.insns[i * 8 + 1] >> 4 == BPF_PSEUDO_CALL}
        for i in range(len(prog.insns) // 8):
            if i not in rewritten:
                assert prog.insns[i * 8:i * 8 + 8] == expected[i * 8:i * 8 + 8], (prog.name, i)


def _call_targets(prog) -> list[int]:
    out = []
    for i, (code, regs, _off, imm) in enumerate(INSN.iter_unpack(prog.insns)):
        if code == 0x85 and regs >> 4 == BPF_PSEUDO_CALL:
            out.append(i + imm + 1)
    return out


def test_subprograms_are_appended_in_first_call_order(spec):
    s = spec("subprogs")
    a, b = s.programs["squares_first"], s.programs["totals_first"]
    assert a.subprograms == ("sum_of_squares", "square", "add_to")
    assert b.subprograms == ("add_to", "square")
    for prog in (a, b):
        starts = {s.btf[rec.type_id].name: i for i, rec in prog.func_info}
        assert list(starts) == [prog.name, *prog.subprograms]
        # Every call lands on the first instruction of a subprogram func_info names.
        assert set(_call_targets(prog)) <= set(starts.values()) - {0}
        assert set(_call_targets(prog)) == {starts[n] for n in prog.subprograms}
        assert [i for i, _ in prog.line_info] == sorted(i for i, _ in prog.line_info)


def test_map_and_global_loads_are_pseudo_map_loads(spec):
    s = spec("globals")
    prog = s.programs["fold_globals"]
    for relo in prog.relocations:
        code, regs, _off, imm = INSN.unpack_from(prog.insns, relo.insn * 8)
        assert code == 0x18 and regs >> 4 == BPF_PSEUDO_MAP_VALUE and imm == 0
        offset = INSN.unpack_from(prog.insns, relo.insn * 8 + 8)[3]
        assert offset == relo.offset < s.maps[relo.target].spec.value_size
    offsets = {r.target: set() for r in prog.relocations}
    for r in prog.relocations:
        offsets[r.target].add(r.offset)
    variables = s.globals.variables
    assert variables["hidden_step"].offset in offsets[".data"]  # static: via the section
    maps_prog = spec("btf_maps").programs["record_packet"]
    for relo in maps_prog.relocations:
        code, regs, _off, _imm = INSN.unpack_from(maps_prog.insns, relo.insn * 8)
        assert relo.kind == RelocKind.MAP_FD and regs >> 4 == BPF_PSEUDO_MAP_FD


def test_unsupported_features_are_named_when_loading(spec):
    s = spec("unsupported")
    assert s.programs["uses_arena"].unsupported == [
        "extern 'arena global data (__arena)' at insn #0"]
    with pytest.raises(UnsupportedError, match="prog 'uses_arena': unsupported: extern "
                                               "'arena global data"):
        check_loadable(s, s.programs["uses_arena"])
    check_loadable(s, s.programs["plain"])


# -- errors read like libbpf's --------------------------------------------------------------

@pytest.mark.parametrize("source,error,message", [
    ("struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(colour, 3); } m SEC(\".maps\");",
     UnsupportedError, "map 'm': unknown field 'colour'"),
    ("struct { __uint(max_entries, 3); } m SEC(\".maps\");",
     ObjectError, "map 'm': map type isn't specified"),
    ("struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(key_size, 4); __type(key, __u64); }"
     " m SEC(\".maps\");", ObjectError, "map 'm': conflicting key size 4 != 8"),
    ("struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(pinning, 7); } m SEC(\".maps\");",
     ObjectError, "map 'm': invalid pinning value 7"),
    ("struct in { __uint(type, BPF_MAP_TYPE_ARRAY); } i SEC(\".maps\");\n"
     "struct { __uint(type, BPF_MAP_TYPE_HASH); __array(values, struct in); } m "
     "SEC(\".maps\");", ObjectError, "map 'm': 'values' needs a map-in-map or prog-array"),
    ("SEC(\"xdp\") static int hidden(void *ctx) { return 0; }\n"
     "int (*keep)(void *) = hidden;",
     ObjectError, "program 'hidden' is static and not supported"),
])
def test_bad_objects_fail_naming_the_map_or_program(compile_source, source, error, message):
    path = compile_source(f"bad_{abs(hash(source))}", source)
    with pytest.raises(error, match=re.escape(message)):
        ObjectSpec.from_file(path)


def test_a_program_with_no_known_section_type_fails_at_load(compile_source):
    path = compile_source("odd_section", 'SEC("mystery") int odd(void *ctx) { return 0; }\n'
                                         'char LICENSE[] SEC("license") = "GPL";')
    s = ObjectSpec.from_file(path)
    assert s.programs["odd"].prog_type == ProgType.UNSPEC
    with pytest.raises(ObjectError, match="missing BPF prog type, check ELF section name "
                                          "'mystery'"):
        check_loadable(s, s.programs["odd"])


def test_a_relocation_on_a_plain_instruction_is_a_relocation_error(build_object):
    data = bytearray(build_object("legacy_maps").read_bytes())
    elf = ElfFile(bytes(data))
    socket = elf.section("socket")
    rel = next(r for r in elf.relocations(socket))
    data[socket.offset + rel.offset] = 0xB7  # the map's lddw becomes a mov
    with pytest.raises(RelocationError, match="neither a call nor a 64-bit load"):
        ObjectSpec.from_bytes(bytes(data))


def test_map_perf_c_twin_declares_the_assembled_programs_maps(spec):
    from pybpf.bench.map_perf.config import LRU_PROG_MAPS, MAP_DEFS, TESTS

    s = spec("map_perf")
    for name, d in MAP_DEFS.items():
        m = s.maps[name].spec
        assert (m.type, m.key_size, m.value_size, m.max_entries, m.flags) == \
            (d.map_type, d.key_size, d.value_size, d.max_entries, d.map_flags), name
    assert s.maps["array_of_lru_hashs"].slots == {0: "inner_lru_hash_map"}
    for test in TESTS.values():
        prog = s.programs[test.prog]
        assert prog.prog_type == ProgType.TRACEPOINT
        assert prog.attach_target == f"syscalls/sys_enter_{test.syscall}"
        # The connect() program serves the four LRU tests; the inner map is reached through
        # array_of_lru_hashs, not referenced by the code.
        expected = set(LRU_PROG_MAPS) if test.syscall == "connect" else set(test.maps)
        assert set(prog.maps) == expected


def test_struct_ops_and_arena_maps_are_recorded_as_unsupported(compile_source):
    path = compile_source("struct_ops_arena", """
struct my_ops { int (*init)(void *ctx); };
SEC("struct_ops/my_init") int my_init(void *ctx) { return 0; }
SEC(".struct_ops") struct my_ops ops = { .init = (void *)my_init };
struct { __uint(type, 33); __uint(max_entries, 1); __uint(map_flags, 1024); } arena
    SEC(".maps");
SEC("socket") int plain(void *ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
""")
    s = ObjectSpec.from_file(path)
    assert s.unsupported == ["struct_ops (section '.struct_ops')", "arena maps (map 'arena')"]
    assert s.programs["my_init"].prog_type == ProgType.STRUCT_OPS
    with pytest.raises(UnsupportedError, match=r"prog 'my_init': unsupported: struct_ops "
                                               r"\(section '.struct_ops'\); arena maps .*; "
                                               "struct_ops program"):
        check_loadable(s, s.programs["my_init"])
