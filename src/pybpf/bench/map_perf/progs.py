"""The programs of samples/bpf/map_perf_test.bpf.c, written with pybpf.asm.

Each builder returns assembler items whose map references are map *names*; ``build_program``
assembles them and ``MapPerfProgram.load`` puts in the fds and loads the result as a
tracepoint program (the sample's ksyscall probes become syscalls/sys_enter_* tracepoints:
this kernel has no kprobes). Loops the sample runs (10 update/lookup/delete rounds, 32 or 64
lookups) are unrolled here, as clang unrolls them there, so the per-event map work is the
same and the program is straight-line for the verifier and the interpreter alike.

Stack layout (fp = R10) is noted per program. The tracepoint context of sys_enter_* is
struct trace_event_raw_sys_enter: common fields (8 bytes), __syscall_nr (int, offset 8),
args[6] (unsigned long, offset 16).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ...asm import (
    add64,
    assemble,
    call,
    encode,
    exit_,
    ja,
    jeq,
    jne,
    label,
    ld_map_fd,
    ldxdw,
    ldxh,
    ldxw,
    mov64,
    stb,
    stdw,
    stw,
    stxw,
)
from ...asm.builder import Item
from ...asm.opcodes import FP, R0, R1, R2, R3, R4, R6, R7, R8
from ...uapi import ProgType

SYS_ENTER_ARG0 = 16  # offsetof(struct trace_event_raw_sys_enter, args)
SIZEOF_SOCKADDR_IN6 = 28
OFFSETOF_SIN6_ADDR = 8
BPF_ANY = 0
HASH_ROUNDS = 10  # update/lookup/delete rounds per event since Sept 2022
LPM_LOOKUPS = 32
MAP_LOOKUPS = 64
LRU_LOOKUPS = 32


def _sys_enter_arg(n: int) -> int:
    return SYS_ENTER_ARG0 + 8 * n


def _stack_ptr(reg, off: int) -> list[Item]:
    return [mov64(reg, FP), add64(reg, off)]


def stress_hash(map_name: str) -> list[Item]:
    """key = (u32)bpf_get_current_pid_tgid(); 10 x {update(key, 1, ANY); if lookup(key):
    delete(key)}.  fp-4: key (u32), fp-16: init_val (long)."""
    items: list[Item] = [
        call("get_current_pid_tgid"),
        stxw(FP, -4, R0),
        stdw(FP, -16, 1),
    ]
    for i in range(HASH_ROUNDS):
        items += [
            ld_map_fd(R1, map_name), *_stack_ptr(R2, -4), *_stack_ptr(R3, -16),
            mov64(R4, BPF_ANY), call("map_update_elem"),
            ld_map_fd(R1, map_name), *_stack_ptr(R2, -4), call("map_lookup_elem"),
            jeq(R0, 0, f"next{i}"),
            ld_map_fd(R1, map_name), *_stack_ptr(R2, -4), call("map_delete_elem"),
            label(f"next{i}"),
        ]
    return items + [mov64(R0, 0), exit_()]


def stress_lru_hmap_alloc() -> list[Item]:
    """connect(fd, uservaddr, addrlen): the four LRU tests, picked by the magic address.

    Returns at once unless addrlen == sizeof(struct sockaddr_in6) and sin6_addr starts with
    the u16 words 0xdead, 0xbeef (host order). Then test case (third u16) 0/1: update a random
    key in lru_hash_map / nocommon_lru_hash_map; 2: the same in this CPU's inner map of
    array_of_lru_hashs; 3: look up 32 consecutive keys from the address's last u32 in
    lru_hash_lookup_map.  fp-16..-1: test_params (u16 magic0, magic1, tcase, unused; u32
    unused, key); fp-20: key; fp-32: val (long); fp-36: cpu.
    (The sample also bpf_trace_printk()s a failed update; that diagnostic is left out.)
    """
    update_random = []
    for tcase, target in ((0, "lru_hash_map"), (1, "nocommon_lru_hash_map")):
        update_random += [
            label(f"case{tcase}"),
            ld_map_fd(R1, target), *_stack_ptr(R2, -20), *_stack_ptr(R3, -32),
            mov64(R4, BPF_ANY), call("map_update_elem"), ja_out(),
        ]
    lookups = []
    for _ in range(LRU_LOOKUPS):
        lookups += [
            stxw(FP, -20, R8),
            ld_map_fd(R1, "lru_hash_lookup_map"), *_stack_ptr(R2, -20),
            call("map_lookup_elem"),
            add64(R8, 1),
        ]
    return [
        mov64(R6, R1),
        ldxdw(R2, R6, _sys_enter_arg(2)),  # addrlen
        jne(R2, SIZEOF_SOCKADDR_IN6, "out"),
        *_stack_ptr(R1, -16),
        mov64(R2, 16),
        ldxdw(R3, R6, _sys_enter_arg(1)),  # uservaddr
        add64(R3, OFFSETOF_SIN6_ADDR),
        call("probe_read_user"),
        jne(R0, 0, "out"),
        ldxh(R1, FP, -16),
        jne(R1, 0xDEAD, "out"),
        ldxh(R1, FP, -14),
        jne(R1, 0xBEEF, "out"),
        ldxh(R7, FP, -12),  # test case
        stdw(FP, -32, 1),
        jeq(R7, 3, "case3"),
        call("get_prandom_u32"),
        stxw(FP, -20, R0),
        jeq(R7, 0, "case0"),
        jeq(R7, 1, "case1"),
        jeq(R7, 2, "case2"),
        ja_out(),
        *update_random,
        label("case2"),
        call("get_smp_processor_id"),
        stxw(FP, -36, R0),
        ld_map_fd(R1, "array_of_lru_hashs"), *_stack_ptr(R2, -36),
        call("map_lookup_elem"),
        jeq(R0, 0, "out"),  # -ENOENT: no inner map for this CPU
        mov64(R1, R0), *_stack_ptr(R2, -20), *_stack_ptr(R3, -32),
        mov64(R4, BPF_ANY), call("map_update_elem"),
        ja_out(),
        label("case3"),
        ldxw(R8, FP, -4),  # test_params.key
        *lookups,
        label("out"),
        mov64(R0, 0),
        exit_(),
    ]


def ja_out() -> Item:
    return ja("out")


def repeated_lookup(map_name: str, count: int, key: list[Item], key_off: int) -> list[Item]:
    items = list(key)
    for _ in range(count):
        items += [ld_map_fd(R1, map_name), *_stack_ptr(R2, key_off), call("map_lookup_elem")]
    return items + [mov64(R0, 0), exit_()]


def stress_lpm_trie_map_alloc() -> list[Item]:
    """32 lookups of 192.168.0.1/32. fp-8: key {u32 prefixlen = 32; u8 data[4]}."""
    key = [stw(FP, -8, 32), stb(FP, -4, 192), stb(FP, -3, 168), stb(FP, -2, 0),
           stb(FP, -1, 1)]
    return repeated_lookup("lpm_trie_map_alloc", LPM_LOOKUPS, key, -8)


def stress_lookup(map_name: str) -> list[Item]:
    """64 lookups of key 1. fp-4: key."""
    return repeated_lookup(map_name, MAP_LOOKUPS, [stw(FP, -4, 1)], -4)


BUILDERS: dict[str, Callable[[], list[Item]]] = {
    "stress_hmap": lambda: stress_hash("hash_map"),
    "stress_percpu_hmap": lambda: stress_hash("percpu_hash_map"),
    "stress_hmap_alloc": lambda: stress_hash("hash_map_alloc"),
    "stress_percpu_hmap_alloc": lambda: stress_hash("percpu_hash_map_alloc"),
    "stress_lru_hmap_alloc": stress_lru_hmap_alloc,
    "stress_lpm_trie_map_alloc": stress_lpm_trie_map_alloc,
    "stress_hash_map_lookup": lambda: stress_lookup("hash_map"),
    "stress_array_map_lookup": lambda: stress_lookup("array_map"),
}


@dataclass
class MapPerfProgram:
    """An assembled program with its map fds filled in, ready for BPF_PROG_LOAD."""

    name: str
    insns: bytes

    def load(self, sys_) -> int:
        return sys_.prog_load(ProgType.TRACEPOINT, self.insns, license="GPL",
                              prog_name=self.name.encode()[:15])


def build_program(name: str, map_fds: Mapping[str, int]) -> MapPerfProgram:
    """Assemble program ``name`` with the fds of the maps it names."""
    assembly = assemble(BUILDERS[name]())
    missing = sorted({ref.map for ref in assembly.map_refs} - set(map_fds))
    if missing:
        raise KeyError(f"program {name} needs maps {missing}, which were not created")
    return MapPerfProgram(name, encode(assembly.with_map_fds(lambda m: map_fds[m])))


def object_program(spec, name: str, map_fds: Mapping[str, int]) -> MapPerfProgram:
    """Program ``name`` of a clang-built object (``pybpf.ObjectSpec``), with the fds of the
    maps it uses: the C twin of the assembled program."""
    from ...bpf_object.loader import program_code

    code, _poisoned = program_code(spec.programs[name], map_fds)
    return MapPerfProgram(name, code)
