"""libbpf's extern variables (``externs``): ``__kconfig`` ones in the ``.kconfig`` map,
filled at load as libbpf fills them (laid out, named, flagged and frozen as libbpf's map,
checked byte for byte against libbpf 1.x on 6.18), and ``__ksym`` kernel variables, typed
and typeless, a missing weak one loading 0 and a missing strong one stopping the load with
libbpf's errno. Both backends run the same programs; the emulated one models this host's
kernel release and config, has no kernel symbols and lacks bpf_get_attach_cookie."""

from __future__ import annotations

import errno
import re
import struct

import pytest

from pybpf import hostinfo
from pybpf.bpf_object import ObjectError, ObjectSpec, RelocKind
from pybpf.bpf_object.externs import (
    KcfgType,
    KconfigExtern,
    _KcfgError,
    parse_u64,
    process_kconfig_line,
)
from pybpf.bpf_object.loader import program_code
from pybpf.btf import Datasec, Var
from pybpf.btf.types import BTF_VAR_GLOBAL_ALLOCATED
from pybpf.errors import BPFError
from pybpf.uapi import BPF_F_MMAPABLE, BPF_F_RDONLY_PROG, BPF_PSEUDO_BTF_ID, MapType

INSN = struct.Struct("<BBhi")
PACKET = bytes(range(64))
XDP_PASS = 2
GPL = "char LICENSE[] SEC(\"license\") = \"GPL\";\n"
# Every CONFIG_* extern of externs.c, so the load reads no kernel config.
KCONFIG = ("CONFIG_HZ=300\nCONFIG_BPF_SYSCALL=y\nCONFIG_PYBPF_TRI=m\n"
           "CONFIG_PYBPF_STR=\"toolongstr\"\nCONFIG_PYBPF_CHAR=y\nCONFIG_PYBPF_NEG=-5\n"
           "CONFIG_PYBPF_U64=0xffffffffffffffff\n")
# libbpf's order: alignment (largest first), size, name; each at its alignment.
LAYOUT = [("CONFIG_PYBPF_U64", 0, 8), ("CONFIG_HZ", 8, 4), ("CONFIG_PYBPF_TRI", 12, 4),
          ("LINUX_KERNEL_VERSION", 16, 4), ("CONFIG_PYBPF_NEG", 20, 2),
          ("CONFIG_BPF_SYSCALL", 22, 1), ("CONFIG_PYBPF_CHAR", 23, 1),
          ("LINUX_HAS_BPF_COOKIE", 24, 1), ("LINUX_HAS_SYSCALL_WRAPPER", 25, 1),
          ("CONFIG_PYBPF_STR", 26, 8)]


@pytest.fixture
def opened():
    objects = []
    yield objects
    for obj in objects:
        obj.close()


def has_kernel_config(system) -> bool:
    try:
        system.kernel_config()
    except BPFError:
        return False
    return True


# -- the kernel version, as libbpf's get_kernel_version() computes it -------------------------

@pytest.mark.parametrize("release,version,signature,expected", [
    ("6.18.44-fc-v1272", "#1 SMP PREEMPT_DYNAMIC", "", (6, 18, 44)),
    ("5.10.0-28-amd64", "#1 SMP Debian 5.10.209-2 (2024-01-31)", "", (5, 10, 209)),
    ("5.15.0-91-generic", "#101-Ubuntu SMP", "Ubuntu 5.15.0-91.101-generic 5.15.131\n",
     (5, 15, 131)),
    ("4.19.300", "", "", (4, 19, 255)),             # the patch level saturates at 255
    ("6.8-rc1", "", "", None),                      # two numbers: libbpf cannot tell
    ("6.1.0", "Debian 6.1", "", (6, 1, 0)),         # Debian's without three numbers: uname
    ("6.1.0", "", "Ubuntu 6.1.0-1", (6, 1, 0)),     # a signature without a third word
])
def test_kernel_version_is_computed_as_libbpf_does(release, version, signature, expected):
    code = hostinfo.kernel_version_code(release, version, signature)
    assert code == (hostinfo.kernel_version(*expected) if expected else 0)


def test_kernel_version_macro():
    assert hostinfo.kernel_version(6, 18, 44) == 0x06122C
    assert hostinfo.kernel_version(5, 4, 1000) == 0x0504FF


def test_both_backends_report_this_hosts_kernel_version(backend):
    uname = hostinfo.os.uname()
    assert backend.kernel_version() == hostinfo.host_kernel_version()
    assert backend.kernel_version() >> 16 == int(uname.release.split(".")[0])


# -- kconfig lines, as bpf_object__process_kconfig_line() reads them --------------------------

def _ext(kind: KcfgType, size: int, signed: bool = False) -> KconfigExtern:
    return KconfigExtern("CONFIG_X", 0, kind, size, min(size, 8), signed, False, 0)


@pytest.mark.parametrize("kind,size,signed,line,expected", [
    (KcfgType.BOOL, 1, False, "CONFIG_X=y", b"\x01"),
    (KcfgType.BOOL, 1, False, "CONFIG_X=n", b"\x00"),
    (KcfgType.TRISTATE, 4, False, "CONFIG_X=m", b"\x02\0\0\0"),
    (KcfgType.TRISTATE, 4, False, "CONFIG_X=y", b"\x01\0\0\0"),
    (KcfgType.CHAR, 1, True, "CONFIG_X=m", b"m"),
    (KcfgType.CHAR_ARR, 4, False, 'CONFIG_X="ab"', b"ab\0\0"),
    (KcfgType.CHAR_ARR, 4, False, 'CONFIG_X="abcdef"', b"abc\0"),   # cut, NUL-ended
    (KcfgType.INT, 4, False, "CONFIG_X=0x10", b"\x10\0\0\0"),
    (KcfgType.INT, 4, False, "CONFIG_X=010", b"\x08\0\0\0"),        # strtoull base 0
    (KcfgType.INT, 2, True, "CONFIG_X=-2", b"\xfe\xff"),
    (KcfgType.INT, 8, False, "CONFIG_X=-1", b"\xff" * 8),
    (KcfgType.CHAR, 1, True, "CONFIG_X=65", b"A"),
    (KcfgType.INT, 4, False, "# CONFIG_X is not set", b"\0\0\0\0"),
])
def test_kconfig_values_are_read_as_libbpf_reads_them(kind, size, signed, line, expected):
    ext = _ext(kind, size, signed)
    data = bytearray(size)
    process_kconfig_line({"CONFIG_X": ext}, data, set(), line)
    assert bytes(data) == expected


@pytest.mark.parametrize("kind,size,signed,line,err,message", [
    (KcfgType.BOOL, 1, False, "CONFIG_X=m", errno.EINVAL, "implies tristate or char type"),
    (KcfgType.INT, 4, False, "CONFIG_X=y", errno.EINVAL, "implies bool, tristate, or char"),
    (KcfgType.BOOL, 1, False, "CONFIG_X=1", errno.EINVAL, "implies integer type"),
    (KcfgType.INT, 4, False, 'CONFIG_X="s"', errno.EINVAL, "implies char array type"),
    (KcfgType.CHAR_ARR, 4, False, 'CONFIG_X="s', errno.EINVAL, "invalid string config"),
    (KcfgType.INT, 1, False, "CONFIG_X=256", errno.ERANGE, "doesn't fit in 1 bytes"),
    (KcfgType.INT, 2, True, "CONFIG_X=40000", errno.ERANGE, "doesn't fit in 2 bytes"),
    (KcfgType.INT, 4, False, "CONFIG_X=12ab", errno.EINVAL, "isn't a valid integer"),
    (KcfgType.INT, 4, False, "CONFIG_X", errno.EINVAL, "no separator"),
    (KcfgType.INT, 4, False, "CONFIG_X=", errno.EINVAL, "no value"),
])
def test_kconfig_values_libbpf_refuses_are_refused(kind, size, signed, line, err, message):
    with pytest.raises(_KcfgError, match=re.escape(message)) as info:
        process_kconfig_line({"CONFIG_X": _ext(kind, size, signed)}, bytearray(size), set(),
                             line)
    assert info.value.errno == err


def test_the_first_value_of_a_name_wins():
    ext, data, done = _ext(KcfgType.INT, 4), bytearray(4), set()
    process_kconfig_line({"CONFIG_X": ext}, data, done, "CONFIG_X=1")
    process_kconfig_line({"CONFIG_X": ext}, data, done, "CONFIG_X=2")
    assert data == b"\x01\0\0\0"


def test_strtoull():
    assert parse_u64("18446744073709551615") == (1 << 64) - 1
    assert parse_u64("18446744073709551616") is None
    assert parse_u64("0x") is None and parse_u64("") is None and parse_u64("1 ") is None


# -- open: the externs, the .kconfig map and the fixed-up BTF ---------------------------------

def test_kconfig_externs_are_laid_out_as_libbpf_lays_them_out(build_object):
    spec = ObjectSpec.from_file(build_object("externs"))
    assert [(e.name, e.offset, e.size) for e in spec.kconfig.values()] == LAYOUT
    assert {e.name: e.kcfg_type for e in spec.kconfig.values()}["CONFIG_PYBPF_TRI"] == \
        KcfgType.TRISTATE
    m = spec.maps[".kconfig"]
    assert list(spec.maps)[-1] == "externs.kconfig" and m.kind == "kconfig" and m.frozen
    assert (m.spec.type, m.spec.key_size, m.spec.value_size, m.spec.max_entries) == \
        (MapType.ARRAY, 4, 34, 1)
    assert m.spec.flags == BPF_F_RDONLY_PROG | BPF_F_MMAPABLE == 0x480
    assert m.spec.name == "externs.kconfig"
    datasec = spec.btf[m.value_type_id]
    assert isinstance(datasec, Datasec) and datasec.size == 34
    assert [(spec.btf[v.type_id].name, v.offset) for v in datasec.vars] == \
        [(name, off) for name, off, _ in LAYOUT]
    assert all(spec.btf[v.type_id].linkage == BTF_VAR_GLOBAL_ALLOCATED for v in datasec.vars)
    assert set(spec.ksyms) == {"pybpf_no_such_sym", "pybpf_no_such_task"}
    assert spec.ksyms["pybpf_no_such_sym"].type_id == 0 and spec.ksyms["pybpf_no_such_task"]


def test_kconfig_loads_are_map_value_loads_at_the_extern_offset(build_object):
    spec = ObjectSpec.from_file(build_object("externs"))
    prog = spec.programs["kconfig_values"]
    offsets = {r.offset for r in prog.relocations if r.target == ".kconfig"}
    assert offsets == {off for _, off, _ in LAYOUT} - {0} | {0}
    assert all(r.kind == RelocKind.MAP_VALUE for r in prog.relocations
               if r.target == ".kconfig")
    assert [r.kind for r in spec.programs["weak_ksyms"].relocations] == [RelocKind.KSYM] * 2
    assert prog.unsupported == [] and spec.programs["weak_ksyms"].unsupported == []


@pytest.mark.parametrize("decl,use,message", [
    ("struct pybpf_s { int a; }; extern struct pybpf_s CONFIG_PYBPF_S __kconfig;",
     "CONFIG_PYBPF_S.a", "extern (kcfg) 'CONFIG_PYBPF_S': type is unsupported"),
    ("extern long *CONFIG_PYBPF_P __kconfig;", "CONFIG_PYBPF_P != 0",
     "extern (kcfg) 'CONFIG_PYBPF_P': type is unsupported"),
    ("extern int CONFIG_PYBPF_A[2] __kconfig;", "CONFIG_PYBPF_A[1]",
     "extern (kcfg) 'CONFIG_PYBPF_A': type is unsupported"),
])
def test_kconfig_externs_of_types_libbpf_cannot_fill_are_refused_at_open(compile_source,
                                                                         decl, use, message):
    path = compile_source("kcfg_bad", f"{decl}\nSEC(\"xdp\") int prog(void *ctx)\n"
                          f"{{ return {use}; }}\n{GPL}")
    with pytest.raises(ObjectError, match=re.escape(message)):
        ObjectSpec.from_file(path)


# -- load -----------------------------------------------------------------------------------

def expected_kconfig(system) -> bytes:
    data = bytearray(34)
    cookie = system.name == "kernel"  # the emulated backend lacks bpf_get_attach_cookie
    values = {"CONFIG_PYBPF_U64": (1 << 64) - 1, "CONFIG_HZ": 300, "CONFIG_PYBPF_TRI": 2,
              "LINUX_KERNEL_VERSION": system.kernel_version(), "CONFIG_PYBPF_NEG": 0xfffb,
              "CONFIG_BPF_SYSCALL": 1, "CONFIG_PYBPF_CHAR": ord("y"),
              "LINUX_HAS_BPF_COOKIE": cookie,
              "LINUX_HAS_SYSCALL_WRAPPER": system.has_syscall_wrapper()}
    for name, off, size in LAYOUT:
        if name in values:
            data[off:off + size] = int(values[name]).to_bytes(size, "little")
    data[26:34] = b"toolong\0"
    return bytes(data)


def test_the_kconfig_map_is_filled_frozen_and_read_by_the_program(build_object, backend,
                                                                  opened):
    spec = ObjectSpec.from_file(build_object("externs"))
    obj = spec.load(backend, kconfig=KCONFIG)
    opened.append(obj)
    kconfig = obj.maps[".kconfig"]
    info = kconfig.info()
    assert (info.name, info.map_flags, info.value_size) == ("externs.kconfig", 0x480, 34)
    assert backend.map_lookup_elem(kconfig.fd, bytes(4)) == expected_kconfig(backend)
    with pytest.raises(BPFError) as refused:  # frozen after the fill, as libbpf leaves it
        backend.map_update_elem(kconfig.fd, bytes(4), bytes(34))
    assert refused.value.errno == errno.EPERM
    assert obj.programs["kconfig_values"].test_run(PACKET).retval == XDP_PASS
    out = obj.globals["out"]
    assert (out.version, out.hz, out.bpf_syscall, out.tri, out.str, out.chr, out.neg,
            out.u64) == (backend.kernel_version(), 300, True, 2, b"toolong\0", ord("y"), -5,
                         (1 << 64) - 1)
    assert out.cookie == (backend.name == "kernel")
    assert obj.globals["CONFIG_HZ"] == 300


def test_missing_weak_ksyms_load_zero_typed_or_typeless(build_object, backend, opened):
    obj = ObjectSpec.from_file(build_object("externs")).load(backend, kconfig=KCONFIG)
    opened.append(obj)
    assert obj.ksyms == {}
    assert obj.programs["weak_ksyms"].test_run(PACKET).retval == 7


def test_kconfig_from_the_kernel_config(compile_source, backend, opened):
    """CONFIG_* from the System's config (the host's on both backends), unknown weak ones 0."""
    if not has_kernel_config(backend):
        pytest.skip("this kernel publishes no config (/boot/config-*, /proc/config.gz)")
    config = backend.kernel_config()
    hz = int(re.search(r"^CONFIG_HZ=(\d+)$", config, re.MULTILINE).group(1))
    bpf = re.search(r"^CONFIG_BPF_SYSCALL=y$", config, re.MULTILINE) is not None
    path = compile_source("kcfg_host", (
        "#include <stdbool.h>\n"
        "extern unsigned int CONFIG_HZ __kconfig;\n"
        "extern bool CONFIG_BPF_SYSCALL __kconfig __weak;\n"
        "extern bool CONFIG_PYBPF_NOT_THERE __kconfig __weak;\n"
        "extern int LINUX_PYBPF_UNKNOWN __kconfig __weak;\n"
        "SEC(\"xdp\") int prog(void *ctx)\n"
        "{ return CONFIG_HZ + CONFIG_BPF_SYSCALL * 10000 + CONFIG_PYBPF_NOT_THERE * 100000\n"
        "  + LINUX_PYBPF_UNKNOWN; }\n" + GPL))
    obj = ObjectSpec.from_file(path).load(backend)
    opened.append(obj)
    assert obj.programs["prog"].test_run(PACKET).retval == hz + bpf * 10000


@pytest.mark.parametrize("decl,kconfig,err,message", [
    ("extern int CONFIG_PYBPF_MISSING __kconfig;", "CONFIG_PYBPF_MISSING=y\n", errno.EINVAL,
     "error parsing in-memory Kconfig line 'CONFIG_PYBPF_MISSING=y'"),
    ("extern int PYBPF_VIRTUAL __kconfig __weak;", None, errno.EINVAL,
     "extern (kcfg) 'PYBPF_VIRTUAL': unrecognized virtual extern"),
    ("extern int LINUX_PYBPF_STRONG __kconfig;", None, errno.EINVAL,
     "unrecognized virtual extern"),
])
def test_kconfig_externs_libbpf_cannot_fill_stop_the_load(compile_source, backend, decl,
                                                          kconfig, err, message):
    name = re.search(r"(\w+) __kconfig", decl).group(1)
    path = compile_source("kcfg_fail", f"{decl}\nSEC(\"xdp\") int prog(void *ctx)\n"
                          f"{{ return {name}; }}\n{GPL}")
    with pytest.raises(BPFError, match=re.escape(message)) as info:
        ObjectSpec.from_file(path).load(backend, kconfig=kconfig)
    assert info.value.errno == err


def test_a_strong_kconfig_extern_the_config_lacks_is_esrch(compile_source, backend):
    if not has_kernel_config(backend):
        pytest.skip("this kernel publishes no config (/boot/config-*, /proc/config.gz)")
    path = compile_source("kcfg_strong", "extern int CONFIG_PYBPF_MISSING __kconfig;\n"
                          "SEC(\"xdp\") int prog(void *ctx) { return CONFIG_PYBPF_MISSING; }\n"
                          + GPL)
    with pytest.raises(BPFError, match="extern 'CONFIG_PYBPF_MISSING' \\(strong\\): not "
                                       "resolved") as info:
        ObjectSpec.from_file(path).load(backend)
    assert info.value.errno == errno.ESRCH


# -- ksyms ----------------------------------------------------------------------------------

KSYM_SOURCES = {
    "typeless": ("extern const void {name} __ksym;\n"
                 "SEC(\"xdp\") int prog(void *ctx)\n"
                 "{{ return (unsigned long)&{name} >> 32; }}\n"),
    "typed": ("extern const int {name} __ksym;\n"
              "SEC(\"raw_tp/sys_enter\") int prog(void *ctx)\n"
              "{{ const int *p = bpf_this_cpu_ptr(&{name}); return *p; }}\n"),
}


def test_a_strong_typeless_ksym_not_found_is_esrch(compile_source, backend):
    path = compile_source("ksym_strong", KSYM_SOURCES["typeless"].format(
        name="pybpf_no_such_sym") + GPL)
    with pytest.raises(BPFError, match="extern 'pybpf_no_such_sym' \\(strong\\): not "
                                       "resolved") as info:
        ObjectSpec.from_file(path).load(backend)
    assert info.value.errno == errno.ESRCH


def test_a_strong_typed_ksym_missing_from_the_kernel_btf_is_einval(compile_source, backend):
    path = compile_source("ksym_typed_strong", KSYM_SOURCES["typed"].format(
        name="pybpf_no_such_var") + GPL)
    with pytest.raises(BPFError, match="extern \\(var ksym\\) 'pybpf_no_such_var': not "
                                       "found in kernel BTF") as info:
        ObjectSpec.from_file(path).load(backend)
    assert info.value.errno == errno.EINVAL


def test_a_typeless_ksym_is_its_kallsyms_address(compile_source, kernel, opened):
    symbol = "_stext"
    addresses = {a for a, _t, n in hostinfo.parse_kallsyms(kernel.kallsyms()) if n == symbol}
    if len(addresses) != 1:
        pytest.skip(f"/proc/kallsyms has no single '{symbol}'")
    address = addresses.pop()
    spec = ObjectSpec.from_file(compile_source("ksym_typeless", KSYM_SOURCES["typeless"]
                                               .format(name=symbol) + GPL))
    obj = spec.load(kernel)
    opened.append(obj)
    assert obj.ksyms[symbol].addr == address
    prog = spec.programs["prog"]
    code, _ = program_code(prog, {}, ksyms=obj.ksyms)
    (insn,) = [r.insn for r in prog.relocations if r.kind == RelocKind.KSYM]
    lo, hi = INSN.unpack_from(code, insn * 8)[3], INSN.unpack_from(code, insn * 8 + 8)[3]
    assert (lo & 0xFFFFFFFF) | (hi & 0xFFFFFFFF) << 32 == address
    assert obj.programs["prog"].test_run(PACKET).retval == address >> 32


def test_a_typed_ksym_is_a_btf_id_load_of_the_kernels_var(compile_source, kernel):
    """A per-CPU variable vmlinux's BTF has; whether the kernel then finds its address
    depends on CONFIG_KALLSYMS_ALL (6.18 here has none: ENOENT, as with libbpf)."""
    spec = ObjectSpec.from_file(compile_source("ksym_typed", KSYM_SOURCES["typed"].format(
        name="bpf_prog_active") + GPL))
    from pybpf.btf import Btf
    vmlinux = Btf.from_bytes(kernel.vmlinux_btf())
    (var_id,) = [i for i in vmlinux.ids_named("bpf_prog_active") if isinstance(vmlinux[i], Var)]
    try:
        obj = spec.load(kernel)
    except BPFError as exc:  # the kernel's check_pseudo_btf_id, not the loader, refused it
        assert exc.errno == errno.ENOENT and "BPF program load failed" in str(exc)
        from pybpf.bpf_object.externs import ResolvedKsym
        resolved = {"bpf_prog_active": ResolvedKsym(btf_id=var_id)}
    else:
        resolved = obj.ksyms
        obj.close()
    assert resolved["bpf_prog_active"].btf_id == var_id
    prog = spec.programs["prog"]
    code, _ = program_code(prog, {}, ksyms=resolved)
    (insn,) = [r.insn for r in prog.relocations if r.kind == RelocKind.KSYM]
    opcode, regs, _off, imm = INSN.unpack_from(code, insn * 8)
    assert (regs >> 4, imm, INSN.unpack_from(code, insn * 8 + 8)[3]) == \
        (BPF_PSEUDO_BTF_ID, var_id, 0)
