"""Kfunc calls from C objects (``extern ... __ksym``), resolved at load as libbpf does: by
name in the System's kernel BTF, the prototype checked, a strong one that is missing or
incompatible refused naming it, a weak one left unresolved (``bpf_ksym_exists`` is 0, its
calls poisoned), so a guarded call loads and runs its fallback on either backend."""

from __future__ import annotations

import errno
import struct

import pytest

from helpers import u32
from pybpf.bpf_object import ObjectSpec, RelocKind
from pybpf.bpf_object.loader import POISON_CALL_KFUNC_BASE, program_code
from pybpf.btf import Btf, Datasec, Func, Var
from pybpf.btf.types import BTF_FUNC_GLOBAL
from pybpf.emulated import psock_table
from pybpf.errors import BPFError, VerifierError
from pybpf.kernel.sockmap import UNMERGED_KFUNCS
from pybpf.uapi import (
    BPF_PSEUDO_BTF_ID,
    BPF_PSEUDO_KFUNC_CALL,
    AttachType,
    MapType,
    ProgType,
)
from sockmap_lab import tcp_pair

INSN = struct.Struct("<BBhi")
PACKET = bytes(range(64))
REDIRECT_CPU = "bpf_sk_skb_set_redirect_cpu"
# A kfunc each backend has and its program type may call, declared with one parameter too many.
WRONG_ARITY = {
    "kernel": ("extern void bpf_rcu_read_lock(int x) __ksym{weak};\n"
               "SEC(\"tc\") int prog(struct __sk_buff *skb)\n"
               "{ if (bpf_ksym_exists(bpf_rcu_read_lock)) bpf_rcu_read_lock(1); return 7; }\n",
               "bpf_rcu_read_lock"),
    "emulated": ("extern int bpf_sk_skb_set_redirect_cpu(int x) __ksym{weak};\n"
                 "SEC(\"tc\") int prog(struct __sk_buff *skb)\n"
                 "{ if (bpf_ksym_exists(bpf_sk_skb_set_redirect_cpu))\n"
                 "  return bpf_sk_skb_set_redirect_cpu(1); return 7; }\n",
                 REDIRECT_CPU),
}
KSYM_EXISTS = "#ifndef bpf_ksym_exists\n#define bpf_ksym_exists(sym) (!!(sym))\n#endif\n"
GPL = "char LICENSE[] SEC(\"license\") = \"GPL\";\n"


@pytest.fixture
def opened():
    """Objects a test loads, closed after it."""
    objects = []
    yield objects
    for obj in objects:
        obj.close()


def load(opened, path, system):
    obj = ObjectSpec.from_file(path).load(system)
    opened.append(obj)
    return obj


def insn_at(code: bytes, index: int) -> tuple[int, int, int, int]:
    """(opcode, src_reg, off, imm) of instruction ``index``."""
    opcode, regs, off, imm = INSN.unpack_from(code, index * 8)
    return opcode, regs >> 4, off, imm


def relocations(spec: ObjectSpec, prog: str, kind: RelocKind) -> list:
    return [r for r in spec.programs[prog].relocations if r.kind == kind]


# -- parsing --------------------------------------------------------------------------------
def test_kfunc_externs_are_read_with_their_prototype_and_weakness(build_object):
    spec = ObjectSpec.from_file(build_object("kfuncs"))
    assert {k.name: k.weak for k in spec.kfuncs.values()} == {
        "bpf_rcu_read_lock": False, "bpf_rcu_read_unlock": False,
        "bpf_pybpf_no_such_kfunc": True, "bpf_rcu_read_lock___maybe": True}
    assert [len(spec.btf[k.proto_id].params) for k in spec.kfuncs.values()] == [0, 0, 1, 0]
    assert [r.target for r in relocations(spec, "rcu_section", RelocKind.KFUNC_CALL)] == [
        "bpf_rcu_read_lock", "bpf_rcu_read_unlock", "bpf_pybpf_no_such_kfunc"]
    assert [r.target for r in relocations(spec, "rcu_section", RelocKind.KFUNC_ADDR)] == [
        "bpf_pybpf_no_such_kfunc"]
    assert spec.programs["rcu_section"].unsupported == []


def test_the_ksyms_datasec_is_fixed_up_for_the_kernel_as_libbpf_does(build_object):
    """The kernel takes no extern FUNC and only VARs in a DATASEC (libbpf's
    bpf_object__collect_externs rewrites them the same way)."""
    btf = ObjectSpec.from_file(build_object("kfuncs")).btf
    ksyms = btf[btf.find(".ksyms", Datasec.kind)]
    assert [(i.offset, i.size) for i in ksyms.vars] == [(0, 4), (4, 4), (8, 4), (12, 4)]
    assert ksyms.size == 16
    assert {btf[i.type_id].name for i in ksyms.vars} == {"dummy_ksym"}
    assert isinstance(btf[ksyms.vars[0].type_id], Var)
    lock = btf[btf.find("bpf_rcu_read_lock", Func.kind)]
    assert lock.linkage == BTF_FUNC_GLOBAL
    # clang names no parameter of an extern declaration; the kernel wants names
    weak = btf[btf.find("bpf_pybpf_no_such_kfunc", Func.kind)]
    assert [p.name for p in btf[weak.type_id].params] == ["dummy_ksym"]


def test_a_call_of_an_extern_no_btf_declares_a_kfunc_is_refused(compile_source):
    path = compile_source("undeclared", "int helper_like(int);\n"
                          "SEC(\"tc\") int prog(struct __sk_buff *skb) "
                          "{ return helper_like(1); }\n" + GPL)
    with pytest.raises(ValueError, match="relo for insn #1 against 'helper_like': a call of "
                                         "an extern the object's BTF does not declare as a "
                                         "kernel function"):
        ObjectSpec.from_file(path)


# -- the kernel backend ---------------------------------------------------------------------
def test_kfunc_calls_load_and_run_on_the_kernel(build_object, kernel, opened, recwarn):
    """bpf_rcu_read_lock/unlock (6.18's common kfunc set: every program type) in
    SCHED_CLS programs, run with BPF_PROG_TEST_RUN: the weak kfunc no kernel has is
    unresolved and its guarded call dead code; the weak flavor of one it has resolves, and
    the kernel takes bpf_ksym_exists()'s BPF_PSEUDO_BTF_ID load of it."""
    obj = load(opened, build_object("kfuncs"), kernel)
    lock = kernel.kfunc_btf_id("bpf_rcu_read_lock")
    assert obj.kfuncs == {"bpf_rcu_read_lock": lock,
                          "bpf_rcu_read_unlock": kernel.kfunc_btf_id("bpf_rcu_read_unlock"),
                          "bpf_pybpf_no_such_kfunc": None, "bpf_rcu_read_lock___maybe": lock}
    assert obj.programs["rcu_section"].test_run(PACKET).retval == len(PACKET) + 1
    assert obj.programs["rcu_if_there"].test_run(PACKET).retval == 2
    assert obj.btf_fd is not None and not recwarn.list  # the fixed-up BTF loaded


def test_the_kernel_refuses_the_unmerged_kfunc_saying_why(compile_source, kernel, opened):
    path = compile_source("redirect_cpu", f"extern int {REDIRECT_CPU}(struct __sk_buff *s, "
                          "int redir_cpu) __ksym;\nSEC(\"sk_skb/stream_verdict\") int "
                          f"prog(struct __sk_buff *skb) {{ return {REDIRECT_CPU}(skb, 0); }}\n"
                          + GPL)
    with pytest.raises(BPFError) as info:
        load(opened, path, kernel)
    assert info.value.errno == errno.ESRCH
    assert str(info.value).startswith(f"[Errno 3] extern (func ksym) '{REDIRECT_CPU}': not "
                                      "found in the kernel backend's kernel BTF (vmlinux; "
                                      "module BTFs are not searched): ")
    assert UNMERGED_KFUNCS[REDIRECT_CPU] in str(info.value)
    assert "bpf_ksym_exists" in info.value.hint


# -- the emulated backend -------------------------------------------------------------------
def test_a_strong_kfunc_the_backend_lacks_stops_the_load_naming_it(build_object, emulated):
    with pytest.raises(BPFError) as info:
        ObjectSpec.from_file(build_object("kfuncs")).load(emulated)
    assert info.value.errno == errno.ESRCH
    assert "extern (func ksym) 'bpf_rcu_read_lock': not found in the emulated backend's " \
           "kernel BTF (vmlinux; module BTFs are not searched): the emulated kernel has no " \
           "kernel function 'bpf_rcu_read_lock'" in str(info.value)
    assert "module" in info.value.hint


def test_the_emulated_kfunc_is_called_from_c_and_runs(build_object, emulated, opened):
    """A weak flavor (``___maybe``) resolves by its essential name; the verdict's call sets
    the psock's redirect CPU (-1 until a program sets it)."""
    obj = load(opened, build_object("kfuncs_sk_skb"), emulated)
    assert obj.kfuncs == {f"{REDIRECT_CPU}___maybe": emulated.kfunc_btf_id(REDIRECT_CPU),
                          "bpf_pybpf_no_such_kfunc": None}
    sock_map = emulated.map_create(MapType.SOCKMAP, 4, 4, 1)
    cli, srv = tcp_pair()
    try:
        emulated.prog_attach(obj.programs["maybe_redirect_cpu"].fd, sock_map,
                             AttachType.SK_SKB_VERDICT)
        emulated.map_update_elem(sock_map, u32(0), u32(srv.fileno()))
        cli.sendall(b"kfunc")
        assert emulated.sock_recv(srv, 100, timeout=5) == b"kfunc"
        assert psock_table(emulated.machine).lookup_fd(srv.fileno()).redir_cpu == 0
    finally:
        cli.close()
        srv.close()
        emulated.close(sock_map)


def test_kfunc_instructions_are_rewritten_as_the_kernel_expects(build_object, emulated):
    spec = ObjectSpec.from_file(build_object("kfuncs_sk_skb"))
    kfunc_id = emulated.kfunc_btf_id(REDIRECT_CPU)
    ids = {f"{REDIRECT_CPU}___maybe": kfunc_id, "bpf_pybpf_no_such_kfunc": None}
    code, _ = program_code(spec.programs["maybe_redirect_cpu"], {}, kfunc_ids=ids)
    (call,) = relocations(spec, "maybe_redirect_cpu", RelocKind.KFUNC_CALL)
    (addr,) = relocations(spec, "maybe_redirect_cpu", RelocKind.KFUNC_ADDR)
    assert insn_at(code, call.insn) == (0x85, BPF_PSEUDO_KFUNC_CALL, 0, kfunc_id)
    assert insn_at(code, addr.insn) == (0x18, BPF_PSEUDO_BTF_ID, 0, kfunc_id)
    assert insn_at(code, addr.insn + 1)[3] == 0  # vmlinux: no module BTF fd
    code, _ = program_code(spec.programs["fallback"], {}, kfunc_ids=ids)
    (call,) = relocations(spec, "fallback", RelocKind.KFUNC_CALL)
    (addr,) = relocations(spec, "fallback", RelocKind.KFUNC_ADDR)
    # unresolved: the address is 0, the call one of an invalid helper naming extern #1
    assert insn_at(code, addr.insn)[1:] == (0, 0, 0) and insn_at(code, addr.insn + 1)[3] == 0
    assert insn_at(code, call.insn) == (0x85, 0, 0, POISON_CALL_KFUNC_BASE + 1)


# -- both backends --------------------------------------------------------------------------
def test_a_guarded_weak_kfunc_loads_and_runs_its_fallback(build_object, backend, opened):
    """The kernel has neither weak kfunc (the sockmap one was never merged); the emulated
    kernel has the sockmap one: the same object loads on both."""
    obj = load(opened, build_object("kfuncs_sk_skb"), backend)
    assert obj.kfuncs["bpf_pybpf_no_such_kfunc"] is None
    assert (obj.kfuncs[f"{REDIRECT_CPU}___maybe"] is None) == (backend.name == "kernel")
    assert obj.programs["fallback"].test_run(PACKET).retval == 7
    assert set(obj.programs) == {"maybe_redirect_cpu", "fallback"}


def test_an_unguarded_call_of_a_missing_weak_kfunc_is_reported_as_libbpf_does(
        compile_source, backend, opened):
    path = compile_source("unguarded", "extern int bpf_pybpf_no_such_kfunc(int x) __ksym "
                          "__weak;\nSEC(\"tc\") int prog(struct __sk_buff *skb) "
                          "{ return bpf_pybpf_no_such_kfunc(1); }\n" + GPL)
    with pytest.raises(VerifierError) as info:
        load(opened, path, backend)
    assert f"invalid func unknown#{POISON_CALL_KFUNC_BASE}" in info.value.log
    assert ("prog 'prog': kfunc 'bpf_pybpf_no_such_kfunc' is referenced but wasn't resolved: "
            "the kernel lacks it; guard its calls with bpf_ksym_exists("
            "bpf_pybpf_no_such_kfunc)") in str(info.value)


def test_a_strong_kfunc_of_another_prototype_is_refused(compile_source, backend, opened):
    source, name = WRONG_ARITY[backend.name]
    path = compile_source(f"arity_{backend.name}", KSYM_EXISTS + source.replace("{weak}", "") + GPL)
    spec = ObjectSpec.from_file(path)
    with pytest.raises(BPFError) as info:
        spec.load(backend)
    local = spec.kfuncs[name].proto_id
    assert info.value.errno == errno.EINVAL
    kernel_proto = Btf.from_bytes(backend.vmlinux_btf())[backend.kfunc_btf_id(name)].type_id
    assert str(info.value) == (f"[Errno 22] extern (func ksym) '{name}': func_proto "
                               f"[{local}] incompatible with vmlinux [{kernel_proto}]")
    assert "the object declares 1 parameter" in info.value.detail


def test_a_parameter_of_another_kind_is_another_prototype(compile_source, emulated):
    path = compile_source("kind", f"extern int {REDIRECT_CPU}(struct __sk_buff *s, "
                          "struct __sk_buff *cpu) __ksym;\nSEC(\"sk_skb\") int prog(struct "
                          f"__sk_buff *skb) {{ return {REDIRECT_CPU}(skb, skb); }}\n" + GPL)
    with pytest.raises(BPFError) as info:
        ObjectSpec.from_file(path).load(emulated)
    assert info.value.errno == errno.EINVAL
    assert "incompatible with vmlinux" in str(info.value)
    assert info.value.detail.startswith("both take 2 parameters; the return type or a "
                                        "parameter's differs in kind")


def test_a_weak_kfunc_of_another_prototype_is_left_unresolved(compile_source, backend,
                                                              opened):
    source, name = WRONG_ARITY[backend.name]
    path = compile_source(f"arity_weak_{backend.name}",
                          KSYM_EXISTS + source.replace("{weak}", " __weak") + GPL)
    obj = load(opened, path, backend)
    assert obj.kfuncs == {name: None}
    assert obj.programs["prog"].test_run(PACKET).retval == 7


# -- a kfunc's address (BPF_PSEUDO_BTF_ID of a FUNC), the same checks on both backends ---------
def known_kfunc(system) -> int:
    """A kfunc of each backend's kernel BTF."""
    return system.kfunc_btf_id("bpf_rcu_read_lock" if system.name == "kernel" else REDIRECT_CPU)


def btf_id_load(dst: int, btf_id: int, btf_fd: int = 0) -> bytes:
    return INSN.pack(0x18, BPF_PSEUDO_BTF_ID << 4 | dst, 0, btf_id) + INSN.pack(0, 0, 0, btf_fd)


EXIT = INSN.pack(0x95, 0, 0, 0)
# (name, the program after r1 = the address, errno, the kernel's message)
ADDRESS_USES = [
    ("read_through", INSN.pack(0x71, 0x10, 0, 0) + EXIT, errno.EACCES,
     "invalid access to memory, mem_size=0 off=0 size=1"),
    ("write_through", INSN.pack(0x72, 0x01, 0, 0) + EXIT, errno.EACCES,
     "R1 cannot write into rdonly_mem"),
]


@pytest.mark.parametrize("tail,err,message", [
    pytest.param(t, e, m, id=n) for n, t, e, m in ADDRESS_USES])
def test_a_kfunc_address_is_memory_of_size_0(backend, tail, err, message):
    with pytest.raises(VerifierError) as info:
        backend.prog_load(ProgType.SCHED_CLS, btf_id_load(1, known_kfunc(backend)) + tail,
                          license="GPL")
    assert info.value.errno == err
    assert message in info.value.log


def test_a_kfunc_address_is_never_null_so_the_check_decides_the_branch(backend):
    """The branch behind ``if r1 == 0`` is dead code: its invalid helper call never checked."""
    code = (btf_id_load(1, known_kfunc(backend)) + INSN.pack(0x15, 0x01, 2, 0) +
            INSN.pack(0xB7, 0x00, 0, 7) + EXIT + INSN.pack(0x85, 0, 0, 0x7FFFFFFF) + EXIT)
    fd = backend.prog_load(ProgType.SCHED_CLS, code, license="GPL")
    try:
        assert backend.prog_test_run(fd, PACKET).retval == 7
    finally:
        backend.close(fd)


def test_bad_btf_id_loads_are_refused_as_the_kernel_does(backend):
    sk_buff = Btf.from_bytes(backend.vmlinux_btf()).find("__sk_buff")
    cases = [(btf_id_load(1, 0x7FFFFFF0), errno.ENOENT,
              f"ldimm64 insn specifies invalid btf_id {0x7FFFFFF0}."),
             (btf_id_load(1, known_kfunc(backend), btf_fd=9999), errno.EINVAL,
              "invalid module BTF object FD specified."),
             (btf_id_load(1, sk_buff), errno.EINVAL,
              f"pseudo btf_id {sk_buff} in ldimm64 isn't KIND_VAR or KIND_FUNC")]
    for code, err, message in cases:
        with pytest.raises(BPFError) as info:
            backend.prog_load(ProgType.SCHED_CLS, code + EXIT, license="GPL")
        assert info.value.errno == err, message
        if isinstance(info.value, VerifierError):  # 6.18 gives ENOENT without its log
            assert message in info.value.log
