"""Kfuncs on the emulated backend (emulated/prog/kfuncs.py): the emulated kernel's BTF names them,
the verifier checks a call as check_kfunc_call does, both engines run them, and the 2025
sockmap series' bpf_sk_skb_set_redirect_cpu puts the redirect target's backlog work on the
CPU a verdict program chose; the kernel backend, which has no such kfunc, refuses the
program before it loads, saying so."""

from __future__ import annotations

import errno

import pytest

from helpers import ENGINES, u32
from pybpf import system
from pybpf.asm import FP, R0, R1, R2, R3, R4, R6, R7, assemble, encode
from pybpf.asm import builder as b
from pybpf.btf import Btf, Kind
from pybpf.emulated.net.skmsg import psock_table
from pybpf.emulated.prog.kfuncs import KFUNCS
from pybpf.emulated.prog.memory import CtxRegion
from pybpf.errors import BPFError, VerifierError
from pybpf.programs import Program, ProgramSpec
from pybpf.sock_maps import SockMap, redirect_verdict
from pybpf.uapi import BPF_F_INGRESS, MapType, ProgType
from sockmap_lab import pattern, psock_threads, tcp_pair, wait_for

KFUNC = "bpf_sk_skb_set_redirect_cpu"
EINVAL, ENOENT = -errno.EINVAL, -errno.ENOENT


def set_redirect_cpu(cpu_operand) -> list:
    """R0 = bpf_sk_skb_set_redirect_cpu(ctx, cpu); the context stays in R6."""
    return [b.mov64(R6, R1), b.mov64(R1, R6), b.mov64(R2, cpu_operand), b.call_kfunc(KFUNC)]


def load(sys, prog_type, items, **spec) -> Program:
    return Program.load(ProgramSpec(prog_type, items, **spec), sys)


def s64(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


# -- naming: the emulated kernel's BTF -----------------------------------------------------------
def test_each_kfunc_is_a_func_of_the_emulated_kernel_btf_after_every_other_type(emulated):
    btf = Btf.from_bytes(emulated.vmlinux_btf())
    btf_id = emulated.kfunc_btf_id(KFUNC)
    func = btf[btf_id]
    assert func.kind == Kind.FUNC and func.name == KFUNC
    proto = btf[func.type_id]
    assert btf[proto.return_type_id].name == "int"
    ctx, cpu = proto.params
    assert (ctx.name, btf[btf[ctx.type_id].type_id].name) == ("s", "__sk_buff")
    assert (cpu.name, btf[cpu.type_id].name) == ("redir_cpu", "int")
    # the program contexts keep the ids they had before the kfuncs were added
    assert btf.find("__sk_buff") < btf.find("xdp_action", Kind.ENUM) < btf_id
    assert [btf[i].name for i in range(1, len(btf)) if btf[i].kind == Kind.FUNC] == list(KFUNCS)


def test_an_unknown_kfunc_name_is_enoent_naming_the_ones_there_are(emulated):
    with pytest.raises(BPFError) as info:
        load(emulated, ProgType.SK_SKB, [b.call_kfunc("bpf_no_such_kfunc"), b.exit_()])
    assert info.value.errno == errno.ENOENT
    assert KFUNC in str(info.value)


def test_a_kfunc_named_by_its_btf_id_loads_as_one_named_by_name(emulated):
    items = [*set_redirect_cpu(1), b.exit_()]
    by_name = load(emulated, ProgType.SK_SKB, items)
    by_id = emulated.prog_load(ProgType.SK_SKB, encode(
        assemble(items).with_kfunc_ids(emulated.kfunc_btf_id)))
    try:
        assert emulated.prog_from_fd(by_id).insns == emulated.prog_from_fd(by_name.fd).insns
    finally:
        emulated.close(by_id)


def test_call_kfunc_refuses_what_is_not_a_name_or_an_id():
    with pytest.raises(ValueError, match="C identifier"):
        b.call_kfunc("bpf sk")
    with pytest.raises(ValueError, match="name or a BTF id"):
        b.call_kfunc(1.5)


# -- the verifier --------------------------------------------------------------------------------
ACCEPTED = [
    ("constant_cpu", [*set_redirect_cpu(1), b.exit_()]),
    ("cpu_in_a_register", [b.mov64(R6, R1), b.ldxw(R7, R1, 0), b.mov64(R1, R6),
                           b.mov64(R2, R7), b.call_kfunc(KFUNC), b.exit_()]),
    ("r0_a_scalar_after", [*set_redirect_cpu(1), b.jeq(R0, 0, "out"), b.mov64(R0, 1),
                           b.label("out"), b.add64(R0, 5), b.exit_()]),
]


@pytest.mark.parametrize("items", [pytest.param(i, id=n) for n, i in ACCEPTED])
def test_the_verifier_accepts_the_kfunc_in_sk_skb_programs(emulated, items):
    prog = load(emulated, ProgType.SK_SKB, items)
    assert emulated.prog_get_info(prog.fd).type == ProgType.SK_SKB


# (name, program type, items, license, errno, the kernel's message)
REJECTIONS = [
    ("sk_msg", ProgType.SK_MSG, [*set_redirect_cpu(1), b.exit_()], "GPL", errno.EACCES,
     f"calling kernel function {KFUNC} is not allowed"),
    ("socket_filter", ProgType.SOCKET_FILTER, [*set_redirect_cpu(1), b.exit_()], "GPL",
     errno.EACCES, f"calling kernel function {KFUNC} is not allowed"),
    ("r1_clobbered_after", ProgType.SK_SKB, [b.mov64(R2, 1), b.call_kfunc(KFUNC),
                                             b.mov64(R0, R1), b.exit_()], "GPL", errno.EACCES,
     "R1 !read_ok"),
    ("r0_not_a_pointer", ProgType.SK_SKB, [*set_redirect_cpu(1), b.ldxw(R0, R0, 0), b.exit_()],
     "GPL", errno.EACCES, "R0 invalid mem access 'scalar'"),
]


@pytest.mark.parametrize("prog_type,items,license,err,message", [
    pytest.param(t, i, lic, e, m, id=n) for n, t, i, lic, e, m in REJECTIONS])
def test_the_verifier_rejects_bad_kfunc_calls_as_the_kernel_does(emulated, prog_type, items,
                                                                  license, err, message):
    with pytest.raises(VerifierError) as info:
        load(emulated, prog_type, items, license=license)
    assert info.value.errno == err
    assert message in info.value.log


# Checked against the running kernel with a kfunc it has whose parameters are of the same
# kinds (the context, then a scalar): bpf_dynptr_from_skb(struct __sk_buff *, u64, dynptr *),
# allowed in SCHED_CLS programs, not in XDP ones.
# (name, program type, R1/R2 set-up, license, errno, message with {kfunc} for its name)
ARGUMENT_CASES = [
    ("not_for_xdp", ProgType.XDP, [b.mov64(R2, 0)], "GPL", errno.EACCES,
     "calling kernel function {kfunc} is not allowed"),
    ("arg1_null", None, [b.mov64(R1, 0), b.mov64(R2, 0)], "GPL", errno.EACCES,
     "Possibly NULL pointer passed to trusted arg0"),
    ("arg1_a_scalar", None, [b.mov64(R1, 5), b.mov64(R2, 0)], "GPL", errno.EINVAL,
     "arg#0 expected pointer to ctx, but got scalar"),
    ("arg1_the_stack", None, [b.mov64(R1, FP), b.mov64(R2, 0)], "GPL", errno.EINVAL,
     "arg#0 expected pointer to ctx, but got fp"),
    ("arg1_a_moved_ctx", None, [b.add64(R1, 8), b.mov64(R2, 0)], "GPL", errno.EACCES,
     "dereference of modified ctx ptr R1 off=8 disallowed"),
    ("arg2_a_pointer", None, [b.mov64(R2, FP)], "GPL", errno.EINVAL, "R2 is not a scalar"),
    ("arg2_unset", None, [], "GPL", errno.EINVAL, "R2 is not a scalar"),
    ("non_gpl", None, [b.mov64(R2, 0)], "MIT", errno.EINVAL,
     "cannot call kernel function from non-GPL compatible program"),
]
DYNPTR_KFUNC = "bpf_dynptr_from_skb"


@pytest.mark.parametrize("on", ["emulated", "kernel"])
@pytest.mark.parametrize("prog_type,setup,license,err,message", [
    pytest.param(t, i, lic, e, m, id=n) for n, t, i, lic, e, m in ARGUMENT_CASES])
def test_kfunc_arguments_are_checked_as_the_kernel_checks_them(request, on, prog_type, setup,
                                                               license, err, message):
    sys = request.getfixturevalue(on)
    if on == "kernel":
        kfunc, items = DYNPTR_KFUNC, [*setup, b.mov64(R3, FP), b.add64(R3, -16),
                                      b.call_kfunc(DYNPTR_KFUNC), b.mov64(R0, 0), b.exit_()]
        prog_type = prog_type or ProgType.SCHED_CLS
    else:
        kfunc, items = KFUNC, [*setup, b.call_kfunc(KFUNC), b.exit_()]
        prog_type = prog_type or ProgType.SK_SKB
    with pytest.raises(VerifierError) as info:
        load(sys, prog_type, items, license=license)
    assert info.value.errno == err
    assert message.format(kfunc=kfunc) in info.value.log


def test_a_btf_id_that_is_no_function_is_einval_on_both(backend):
    with pytest.raises(VerifierError) as info:
        load(backend, ProgType.SCHED_CLS, [b.mov64(R2, 1), b.call_kfunc(1), b.exit_()])
    assert info.value.errno == errno.EINVAL
    assert "kernel btf_id 1 is not a function" in info.value.log


# -- what the program gets back ----------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("cpu,expected", [(1, ENOENT), (4, EINVAL), (-2, EINVAL),
                                          (-(1 << 31), EINVAL)])
def test_outside_a_psock_the_kfunc_returns_enoent_or_einval_for_a_bad_cpu(four_cpus, engine,
                                                                          cpu, expected):
    """A run outside a psock (no socket in a sockmap) is a socket without a psock; the CPU's
    range is checked first, as the series did."""
    four_cpus.bpf_engine = engine
    prog = load(four_cpus, ProgType.SK_SKB, [*set_redirect_cpu(cpu), b.exit_()])
    rs = four_cpus.prog_from_fd(prog.fd).run(CtxRegion("__sk_buff", bytearray(192)),
                                             engine=engine)
    assert s64(rs.retval) == expected


def test_on_a_psock_the_kfunc_sets_its_cpu_and_on_one_being_dropped_it_is_enoent(four_cpus,
                                                                                 proxies):
    proxy = proxies(four_cpus)
    psock = psock_table(four_cpus.machine).lookup_fd(proxy.p1.fileno())
    loaded = load(four_cpus, ProgType.SK_SKB, [*set_redirect_cpu(2), b.exit_()])
    prog = four_cpus.prog_from_fd(loaded.fd)
    assert s64(psock._run_skb(prog, bytearray(b"x"))[0]) == 0 and psock.redir_cpu == 2
    four_cpus.map_delete_elem(proxy.map, u32(0))  # its last link: sk_psock_drop
    assert psock.stopped
    assert s64(psock._run_skb(prog, bytearray(b"x"))[0]) == ENOENT


def test_the_cpu_is_a_c_int_the_low_32_bits_of_r2(four_cpus):
    prog = load(four_cpus, ProgType.SK_SKB, [
        b.mov64(R6, R1), b.lddw(R2, 1 << 32 | 1), b.call_kfunc(KFUNC), b.exit_()])
    rs = four_cpus.prog_from_fd(prog.fd).run(CtxRegion("__sk_buff", bytearray(192)))
    assert s64(rs.retval) == ENOENT  # CPU 1: in range, so the psock is looked for


def test_a_kfunc_call_is_charged_as_a_helper_call():
    sys = system("emulated", cpus=1)
    prog = load(sys, ProgType.SK_SKB, [*set_redirect_cpu(0), b.mov64(R1, R6), b.mov64(R2, 0),
                                       b.call_kfunc(KFUNC), b.exit_()])
    sys.prog_from_fd(prog.fd).run(CtxRegion("__sk_buff", bytearray(192)))
    assert sys.machine.timing.breakdown(0)["helper_call"][0] == 2


def verdict_recording(sys, sock_map: int, results: int, cpu: int, flags: int = 0) -> bytes:
    """A verdict that calls the kfunc with ``cpu``, keeps its return in results[0], and
    redirects everything to key 1 of ``sock_map``."""
    items = [
        *set_redirect_cpu(cpu), b.mov64(R7, R0),
        b.stw(FP, -4, 0), b.stxw(FP, -8, R7),
        b.ld_map_fd(R1, results), b.mov64(R2, FP), b.add64(R2, -4), b.mov64(R3, FP),
        b.add64(R3, -8), b.mov64(R4, 0), b.call("map_update_elem"),
        b.mov64(R1, R6), b.ld_map_fd(R2, sock_map), b.mov64(R3, 1), b.mov64(R4, flags),
        b.call("sk_redirect_map"), b.exit_()]
    return encode(assemble(items).with_kfunc_ids(sys.kfunc_btf_id))


def kfunc_proxy(proxies, sys, cpu: int, mode: str = "egress", **update_kw):
    """The lab's proxy with the recording verdict, and a function giving what the kfunc
    returned."""
    results = sys.map_create(MapType.ARRAY, 4, 4, 1)
    flags = BPF_F_INGRESS if mode == "ingress" else 0
    proxy = proxies(sys, mode=mode, verdict=lambda sock_map: verdict_recording(
        sys, sock_map, results, cpu, flags), **update_kw)
    proxy.fds.insert(0, results)  # closed with the proxy, last

    def result() -> int:
        raw = int.from_bytes(sys.map_lookup_elem(results, u32(0)), "little")
        return raw - (1 << 32) if raw >> 31 else raw

    return proxy, result


def work_cpus(sys) -> set[int]:
    return {cpu for cpu, s in sys.sockmap_stats().items() if s.backlog_runs}


@pytest.mark.parametrize("mode", ["egress", "ingress"])
def test_the_redirect_target_runs_its_backlog_work_on_the_cpu_the_verdict_set(
        four_cpus, proxies, mode):
    proxy, result = kfunc_proxy(proxies, four_cpus, 3, mode=mode)
    data = pattern(1 << 20, seed=3)
    sender = proxy.send_in_thread(data, 65536)
    assert proxy.receive(len(data)) == data
    sender.join(5)
    assert result() == 0
    assert wait_for(lambda: four_cpus.sockmap_stats()[3].bytes == len(data))
    assert work_cpus(four_cpus) == {3}
    table = psock_table(four_cpus.machine)
    target = proxy.c2 if mode == "ingress" else proxy.p2
    # the verdict's psock holds the CPU; the redirect copied it onto the target's
    assert table.lookup_fd(proxy.p1.fileno()).redir_cpu == 3
    assert table.lookup_fd(target.fileno()).redir_cpu == 3


def test_cpu_0_is_a_redirect_cpu(four_cpus, proxies):
    proxy, _ = kfunc_proxy(proxies, four_cpus, 0)
    data = pattern(200_000)
    proxy.send_in_thread(data, 65536).join(5)
    assert proxy.receive(len(data)) == data
    assert wait_for(lambda: four_cpus.sockmap_stats()[0].bytes == len(data))
    assert work_cpus(four_cpus) == {0}


def test_an_out_of_range_cpu_gives_einval_and_leaves_the_work_unbound(four_cpus, proxies):
    proxy, result = kfunc_proxy(proxies, four_cpus, 4)
    data = pattern(300_000)
    proxy.send_in_thread(data, 65536).join(5)
    assert proxy.receive(len(data)) == data
    assert result() == EINVAL
    assert wait_for(lambda: sum(s.bytes for s in four_cpus.sockmap_stats().values())
                    == len(data))
    stats = four_cpus.sockmap_stats()
    assert work_cpus(four_cpus) <= {cpu for cpu, s in stats.items() if s.verdicts}
    assert psock_table(four_cpus.machine).lookup_fd(proxy.p2.fileno()).redir_cpu == -1


def test_the_map_update_target_cpu_wins_over_the_redirect_cpu(four_cpus, proxies):
    """The two designs are alternatives; the binding the user made at the map update is the
    explicit one."""
    proxy, result = kfunc_proxy(proxies, four_cpus, 3, target_cpu=2)
    data = pattern(300_000)
    proxy.send_in_thread(data, 65536).join(5)
    assert proxy.receive(len(data)) == data
    assert result() == 0
    assert wait_for(lambda: four_cpus.sockmap_stats()[2].bytes == len(data))
    assert work_cpus(four_cpus) == {2}


def test_redirect_verdict_with_redirect_cpu_puts_the_work_there(four_cpus):
    socks = SockMap(2, system=four_cpus)
    verdict = Program.load(ProgramSpec(ProgType.SK_SKB, redirect_verdict(
        socks, 1, redirect_cpu=2)), four_cpus)
    socks.attach(verdict, "skb_verdict")
    (c1, p1), (c2, p2) = tcp_pair(), tcp_pair()
    try:
        socks[0], socks[1] = p1, p2
        data = pattern(100_000, seed=7)
        four_cpus.sock_send(c1, data, timeout=5)
        got = bytearray()
        while len(got) < len(data):
            got += four_cpus.sock_recv(c2, 1 << 20, timeout=10)
        assert got == data
        assert wait_for(lambda: four_cpus.sockmap_stats()[2].bytes == len(data))
        assert work_cpus(four_cpus) == {2}
    finally:
        for sock in (c1, p1, c2, p2):
            sock.close()
        socks.close()
        verdict.close()
    assert wait_for(lambda: not psock_threads())


def test_redirect_cpu_is_for_sk_skb_verdicts_only():
    with pytest.raises(ValueError, match="SK_MSG"):
        redirect_verdict(3, 1, msg=True, hash=False, redirect_cpu=1)
    with pytest.raises(TypeError, match="CPU number"):
        redirect_verdict(3, 1, hash=False, redirect_cpu="1")


# -- the kernel backend --------------------------------------------------------------------------
def test_the_kernel_refuses_the_never_merged_kfunc_before_the_load(kernel):
    with pytest.raises(BPFError) as info:
        load(kernel, ProgType.SK_SKB, [*set_redirect_cpu(1), b.exit_()])
    assert info.value.errno == errno.ENOENT
    text = str(info.value)
    for words in (KFUNC, "April 2025", "never merged", "pybpf.testing.rps.rps_cpus",
                  "emulated backend"):
        assert words in text


def test_the_kernel_refuses_redirect_verdict_with_a_redirect_cpu(kernel):
    socks = SockMap(2, system=kernel)
    try:
        with pytest.raises(BPFError) as info:
            Program.load(ProgramSpec(ProgType.SK_SKB, redirect_verdict(socks, 1,
                                                                       redirect_cpu=0)), kernel)
        assert info.value.errno == errno.ENOENT and "never merged" in str(info.value)
    finally:
        socks.close()


def test_the_kernel_resolves_a_kfunc_its_btf_has(kernel):
    btf = Btf.from_bytes(kernel.vmlinux_btf())
    btf_id = kernel.kfunc_btf_id("bpf_rcu_read_lock")
    assert btf[btf_id].kind == Kind.FUNC and btf[btf_id].name == "bpf_rcu_read_lock"
