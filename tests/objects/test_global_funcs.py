"""Global (non-static) functions, as the kernel verifies them: each on its own from its BTF
signature (a scalar, the program's context, or memory of the pointed-to type's size that
may be NULL unless tagged ``arg:nonnull``), each call checked against that signature
("Caller passes invalid args into func#N ('name')"), only those a walked call reaches.
Every case's outcome (return value, or errno and log lines) was measured on Linux 6.18;
both backends must give it, and the emulated backend's log lines must appear, in order,
in the kernel's (which adds its instruction trace)."""

from __future__ import annotations

import errno
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybpf.bpf_object import ObjectSpec
from pybpf.errors import BPFError

TAGS = """
#define __arg_ctx __attribute__((btf_decl_tag("arg:ctx")))
#define __arg_nonnull __attribute__((btf_decl_tag("arg:nonnull")))
#define __arg_nullable __attribute__((btf_decl_tag("arg:nullable")))
char LICENSE[] SEC("license") = "GPL";
"""
U64_ARRAY = """
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1); __type(key, __u32);
         __type(value, __u64); } values SEC(".maps");
"""
U32_ARRAY = U64_ARRAY.replace("__u64", "__u32")
U64_HASH = U64_ARRAY.replace("BPF_MAP_TYPE_ARRAY", "BPF_MAP_TYPE_HASH")
CALLER_PASSES = "Caller passes invalid args into func#1 ('f')"


@dataclass(frozen=True)
class GlobalCase:
    """``source`` defines ``f`` (global) and the XDP program ``m``, run once on 64 zero
    bytes: ``retval`` when it loads, else ``refused`` (errno) with ``log`` lines."""

    id: str
    source: str
    retval: int | None = None
    refused: int | None = None
    log: tuple[str, ...] = ()


CASES = [
    # what each kind of argument is inside the function
    GlobalCase("scalar_args", """
__noinline int f(int value, long low) { return value < low ? low : value; }
SEC("xdp") int m(struct xdp_md *ctx) { return f(ctx->ingress_ifindex, 3); }""", retval=3),
    GlobalCase("ctx_arg", """
__noinline int f(struct xdp_md *c) { return c->data_end - c->data; }
SEC("xdp") int m(struct xdp_md *ctx) { return f(ctx); }""", retval=64),
    GlobalCase("ctx_tagged_void_pointer", """
__noinline int f(void *c __arg_ctx) { return ((struct xdp_md *)c)->ingress_ifindex + 1; }
SEC("xdp") int m(struct xdp_md *ctx) { return f(ctx); }""", retval=2),  # test runs: lo
    GlobalCase("null_checked_pointer_loads", """
__noinline int f(__u64 *p) { if (!p) return 0; return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 5; return f(&s); }""", retval=5),
    GlobalCase("null_passed", """
__noinline int f(__u64 *p) { if (!p) return 7; return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { return f(0); }""", retval=7),
    GlobalCase("write_through_pointer", """
__noinline int f(__u64 *p) { if (!p) return 0; *p = 5; return 1; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 1; f(&s); return s; }""", retval=5),
    GlobalCase("pointer_into_the_stack", """
__noinline int f(__u64 *p) { if (!p) return 0; return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s[2] = {1, 2}; return f(&s[1]); }""", retval=2),
    GlobalCase("map_value", U64_ARRAY + """
__noinline int f(__u64 *p) { if (!p) return 0; *p += 1; return *p; }
SEC("xdp") int m(struct xdp_md *ctx) {
    __u32 k = 0; return f(bpf_map_lookup_elem(&values, &k)); }""", retval=1),
    GlobalCase("maybe_null_map_value", U64_HASH + """
__noinline int f(__u64 *p) { if (!p) return 9; return *p; }
SEC("xdp") int m(struct xdp_md *ctx) {
    __u32 k = 0; return f(bpf_map_lookup_elem(&values, &k)); }""", retval=9),
    GlobalCase("nonnull_tag_needs_no_check", """
__noinline int f(__u64 *p __arg_nonnull) { return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 3; return f(&s); }""", retval=3),
    GlobalCase("static_function_ignores_tags", """
static __noinline int f(__u64 *p __arg_nonnull) { return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 3; return f(&s); }""", retval=3),
    GlobalCase("not_reached_not_verified", """
__noinline int f(__u64 *p) { return *p; }
SEC("xdp") int m(struct xdp_md *ctx) {
    __u64 s = 1; int on = 0;
    asm volatile("" : "+r"(on));  /* clang cannot fold it; the verifier knows it is 0 */
    if (on) return f(&s);
    return 2; }""", retval=2),
    # refused inside the function, verified on its own
    GlobalCase("unchecked_deref", """
__noinline int f(__u64 *p) { return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 5; return f(&s); }""",
               refused=errno.EACCES,
               log=("Validating f() func#1...", "R1 invalid mem access 'mem_or_null'")),
    GlobalCase("read_past_the_type", """
__noinline int f(__u64 *p) { if (!p) return 0; return p[1]; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s[2] = {1, 2}; return f(s); }""",
               refused=errno.EACCES,
               log=("Validating f() func#1...",
                    "invalid access to memory, mem_size=8 off=8 size=8",
                    "R1 min value is outside of the allowed memory range")),
    GlobalCase("chained_globals", """
__noinline int g(__u64 *p) { return *p; }
__noinline int f(int x) { __u64 s = x; return g(&s); }
SEC("xdp") int m(struct xdp_md *ctx) { return f(4); }""",
               refused=errno.EACCES,
               log=("Validating g() func#2...", "R1 invalid mem access 'mem_or_null'")),
    # refused at the call site
    GlobalCase("too_small_buffer", """
struct big { __u64 a[4]; };
__noinline int f(struct big *p) { if (!p) return 0; return p->a[0]; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 5; return f((void *)&s); }""",
               refused=errno.EINVAL,
               log=("invalid read from stack R1 off=-8 size=32", CALLER_PASSES)),
    GlobalCase("too_small_map_value", U32_ARRAY + """
__noinline int f(__u64 *p) { if (!p) return 0; return *p; }
SEC("xdp") int m(struct xdp_md *ctx) {
    __u32 k = 0; return f((__u64 *)bpf_map_lookup_elem(&values, &k)); }""",
               refused=errno.EINVAL,
               log=("invalid access to map value, value_size=4 off=0 size=8",
                    "R1 min value is outside of the allowed memory range", CALLER_PASSES)),
    GlobalCase("pointer_for_a_scalar", """
__noinline int f(long x) { return x + 1; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 1; return f((long)&s); }""",
               refused=errno.EINVAL, log=("R1 is not a scalar", CALLER_PASSES)),
    GlobalCase("stack_for_the_ctx", """
__noinline int f(struct xdp_md *c) { return c->ingress_ifindex; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s[3] = {}; return f((void *)s); }""",
               refused=errno.EINVAL, log=("arg#0 expects pointer to ctx", CALLER_PASSES)),
    GlobalCase("modified_ctx", """
__noinline int f(struct xdp_md *c) { return c->data_end - c->data; }
SEC("xdp") int m(struct xdp_md *ctx) { return f((void *)((char *)ctx + 4)); }""",
               refused=errno.EACCES,
               log=("dereference of modified ctx ptr R1 off=4 disallowed", CALLER_PASSES)),
    GlobalCase("ctx_for_memory", """
__noinline int f(__u64 *p) { if (!p) return 0; return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { return f((void *)ctx); }""",
               refused=errno.EINVAL, log=("R1 type=ctx expected=fp", CALLER_PASSES)),
    GlobalCase("packet_end_for_memory", """
__noinline int f(__u64 *p) { if (!p) return 0; return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { return f((__u64 *)(long)ctx->data_end); }""",
               refused=errno.EINVAL, log=("R1 type=pkt_end expected=fp", CALLER_PASSES)),
    GlobalCase("nonnull_tag_given_null", """
__noinline int f(__u64 *p __arg_nonnull) { return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { return f(0); }""",
               refused=errno.EINVAL, log=("arg#0 is expected to be non-NULL", CALLER_PASSES)),
    GlobalCase("nonnull_tag_given_maybe_null", U64_HASH + """
__noinline int f(__u64 *p __arg_nonnull) { return *p; }
SEC("xdp") int m(struct xdp_md *ctx) {
    __u32 k = 0; return f(bpf_map_lookup_elem(&values, &k)); }""",
               refused=errno.EINVAL, log=("arg#0 is expected to be non-NULL", CALLER_PASSES)),
    GlobalCase("nullable_tag_on_memory", """
__noinline int f(__u64 *p __arg_nullable) { return *p; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 3; return f(&s); }""",
               refused=errno.EINVAL,
               log=("arg#0 has invalid combination of tags", CALLER_PASSES)),
    GlobalCase("unknown_tag", """
__noinline int f(__u64 *p __attribute__((btf_decl_tag("arg:bogus")))) { return p ? *p : 0; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 3; return f(&s); }""",
               refused=errno.EOPNOTSUPP),
    GlobalCase("void_pointer", """
__noinline int f(void *p) { return p != 0; }
SEC("xdp") int m(struct xdp_md *ctx) { __u64 s = 3; return f(&s); }""",
               refused=errno.EINVAL,
               log=("arg#0 reference type('UNKNOWN ') size cannot be determined: -22",
                    CALLER_PASSES)),
    GlobalCase("void_return", """
__u64 out;
__noinline void f(int x) { out = x; }
SEC("xdp") int m(struct xdp_md *ctx) { f(3); return out; }""",
               refused=errno.EINVAL,
               log=("Global function f() doesn't return scalar. Only those are supported.",
                    CALLER_PASSES)),
]


def load_and_run(system, path) -> int:
    with ObjectSpec.from_file(path).load(system) as obj:
        return obj.programs["m"].test_run(bytes(64)).retval


@pytest.mark.parametrize("backend_name", ["kernel", "emulated"])
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_global_function(case: GlobalCase, backend_name: str, compile_source, request):
    system = request.getfixturevalue(backend_name)
    path = compile_source(f"global_{case.id}", TAGS + case.source)
    if case.refused is None:
        assert load_and_run(system, path) == case.retval
        return
    with pytest.raises(BPFError) as info:
        load_and_run(system, path)
    assert info.value.errno == case.refused, str(info.value)
    log = str(info.value).splitlines()
    assert _in_order(case.log, log), str(info.value)


@pytest.mark.parametrize("case", [c for c in CASES if c.log], ids=[c.id for c in CASES if c.log])
def test_emulated_log_lines_appear_in_the_kernels(case: GlobalCase, compile_source, kernel,
                                                  emulated):
    path = compile_source(f"global_{case.id}", TAGS + case.source)
    logs = []
    for system in (kernel, emulated):
        with pytest.raises(BPFError) as info:
            load_and_run(system, path)
        logs.append(info.value.log.splitlines())
    kernel_log, emulated_log = logs
    assert _in_order(emulated_log, kernel_log), (emulated_log, kernel_log)


def _in_order(lines, log) -> bool:
    """Every one of ``lines`` is a line of ``log``, in that order."""
    rest = iter(log)
    return all(any(line == other for other in rest) for line in lines)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(buffer_words=st.integers(1, 6), struct_words=st.integers(1, 6))
def test_a_buffer_passes_for_a_struct_argument_iff_it_is_as_large(buffer_words, struct_words,
                                                                  compile_source, kernel,
                                                                  emulated):
    """The stack buffer a call passes must hold the whole struct the function's signature
    names, alike on both backends: else EINVAL, naming the bytes read."""
    path = compile_source(f"global_buffer_{buffer_words}_{struct_words}", TAGS + f"""
struct words {{ __u64 w[{struct_words}]; }};
__noinline int f(struct words *p) {{ if (!p) return 0; return p->w[0]; }}
SEC("xdp") int m(struct xdp_md *ctx) {{
    __u64 buffer[{buffer_words}] = {{7}};
    return f((void *)buffer); }}""")
    for system in (kernel, emulated):
        if buffer_words >= struct_words:
            assert load_and_run(system, path) == 7
            continue
        with pytest.raises(BPFError) as info:
            load_and_run(system, path)
        assert info.value.errno == errno.EINVAL
        assert (f"invalid read from stack R1 off={-8 * buffer_words} "
                f"size={8 * struct_words}") in str(info.value)
