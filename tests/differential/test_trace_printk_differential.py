"""bpf_trace_printk on both backends: for random formats (conversions with flags and widths,
strings, pointers and addresses read from the stack, refused conversions, bytes that are not
printable, a format without its NUL) the same result: the printed text's length, or the
same -errno (bpf_bprintf_prepare and bstr_printf, kernel/bpf/helpers.c, lib/vsprintf.c)."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybpf.asm import (
    FP,
    R1,
    R2,
    R3,
    R4,
    R5,
    add64,
    assemble,
    call,
    encode,
    exit_,
    lddw,
    mov64,
    stx,
)
from pybpf.uapi import ProgType

STRING = b"hello, printk\0\0\0"  # at fp-16: what %s and friends read
ADDRESS = bytes([192, 168, 7, 1]) + bytes(range(12))  # at fp-32: %pI4 and %pI6 read it
NUMERIC = ["d", "i", "u", "x", "X", "ld", "li", "lu", "lx", "lld", "llu", "llx", "lX"]
MEMORY = ["s", "pks", "pus", "pI4", "pi4", "pI6", "pi6"]
POINTER = ["px", "ps", "pS", "pB"]
HASHED = ["p", "pK"]  # the kernel prints a hash: only widths of 16 and more are compared
REFUSED = ["q", "lq", "#x", ".2d", "hd", "zu", "pM", "pa", "llld", "n"]
TEXT = st.text(alphabet="abc XYZ,.:;()[]{}|!?-_=+\t\n", max_size=6)


@st.composite
def formats(draw) -> tuple[bytes, list[str]]:
    """(the format's bytes, the kind of argument each conversion takes)."""
    out, kinds = [], []
    for _ in range(draw(st.integers(0, 4))):
        out.append(draw(TEXT))
        choice = draw(st.sampled_from(["num", "mem", "ptr", "hash", "c", "%%", "refused"]))
        if choice == "%%":
            out.append("%%")
            continue
        flags = draw(st.text(alphabet="0+- ", max_size=2))
        conv = {"num": NUMERIC, "mem": MEMORY, "ptr": POINTER, "hash": HASHED, "c": ["c"],
                "refused": REFUSED}[choice]
        conv = draw(st.sampled_from(conv))
        if choice == "hash":
            width = draw(st.sampled_from(["", "16", "20"]))
        else:
            width = draw(st.sampled_from(["", "1", "5", "12", "30"]))
        out.append(f"%{flags}{width}{conv}")
        kinds.append(choice)
        if choice == "mem" and draw(st.booleans()):
            out.append(draw(st.sampled_from(["x", " ", "."])))  # a letter after: EINVAL
    out.append(draw(TEXT))
    fmt = "".join(out).encode()
    if draw(st.integers(0, 9)) == 0:
        fmt += draw(st.sampled_from([b"\x01", b"\x80", b"\x7f"]))
    if draw(st.integers(0, 19)) == 0:  # no NUL within the size: EINVAL
        return fmt or b"x", kinds
    return fmt + b"\0", kinds


def program(fmt: bytes, args: list[tuple[str, int]]) -> bytes:
    """The format on the stack under the string and the address; R3-R5 from ``args``
    (("stack", offset) for a pointer into the stack, else ("value", n))."""
    padded = fmt + bytes(-len(fmt) % 8)
    base = -32 - len(padded)
    items = []
    for k in range(0, len(STRING), 8):
        items += [lddw(R1, int.from_bytes(STRING[k:k + 8], "little")), stx(8, FP, -16 + k, R1)]
    for k in range(0, len(ADDRESS), 8):
        items += [lddw(R1, int.from_bytes(ADDRESS[k:k + 8], "little")),
                  stx(8, FP, -32 + k, R1)]
    for k in range(0, len(padded), 8):
        items += [lddw(R1, int.from_bytes(padded[k:k + 8], "little")),
                  stx(8, FP, base + k, R1)]
    for reg, (kind, value) in zip((R3, R4, R5), args, strict=True):
        items += [mov64(reg, FP), add64(reg, value)] if kind == "stack" else \
            [lddw(reg, value)]
    items += [mov64(R1, FP), add64(R1, base), mov64(R2, len(fmt)), call("trace_printk"),
              exit_()]
    return encode(assemble(items).instructions)


@st.composite
def cases(draw) -> tuple[bytes, list[tuple[str, int]]]:
    fmt, kinds = draw(formats())
    args = []
    for kind in (kinds + ["num"] * 3)[:3]:
        if kind == "mem":
            target = draw(st.sampled_from([("stack", -16), ("stack", -32), ("stack", -14),
                                           ("value", 0), ("value", 4096)]))
        elif kind in ("ptr", "hash"):
            target = draw(st.sampled_from([("stack", -16), ("value", 0), ("value", 42),
                                           ("value", 0x7FFF_0000)]))
        else:
            target = ("value", draw(st.integers(0, 2**64 - 1)))
        args.append(target)
    return fmt, args


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_trace_printk_gives_the_kernels_length_or_errno(kernel, emulated_engine, case,
                                                       differential_tally):
    fmt, args = case
    insns = program(fmt, args)
    results = []
    for system in (kernel, emulated_engine):
        fd = system.prog_load(ProgType.SOCKET_FILTER, insns, license="GPL")
        results.append(system.prog_test_run(fd, bytes(64)).retval)
        system.close(fd)
    differential_tally.add("kernel", "emulated", "trace_printk formats", 1, 1,
                           int(results[0] != results[1]))
    assert results[1] == results[0], (fmt, args, struct.pack("<I", results[0]))
