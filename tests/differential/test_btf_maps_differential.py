"""Maps with BTF-typed values, kernel against emulated: cases a random differential of BTF maps
(spin locks and timers in values, BPF_F_LOCK element ops) found and shrank, each once a
difference. The kernel is the oracle: every step's errno (0: success) must agree."""

from __future__ import annotations

import pytest

from helpers import errno_of
from pybpf.btf import Array, Btf, Const, Int, Member, Struct, Typedef, Union, Var
from pybpf.uapi import MapFlags, MapType

U32, U64, LOCK, TIMER, WITH_LOCK, WITH_TIMER, PLAIN = range(1, 8)
(CONST_LOCK, NESTED_LOCK, NESTED_TIMER, UNION_LOCK, CONST_LOCK_MEMBER, LOCKS_1, LOCKS_2,
 ONE_NESTED, TWO_NESTED, TIMER_AT_4, LOCK8, VAR_U32, VAR_WITH_LOCK, LOCK_T) = range(8, 22)
TYPES = [Int("unsigned int", 4, 0, 0, 32), Int("unsigned long long", 8, 0, 0, 64),
         Struct("bpf_spin_lock", 4, (Member("val", U32, 0),)),
         Struct("bpf_timer", 16, (Member("a", U64, 0), Member("b", U64, 64))),
         # struct { struct bpf_spin_lock lock; u32 cnt; u64 x; }
         Struct("with_lock", 16, (Member("lock", LOCK, 0), Member("cnt", U32, 32),
                                  Member("x", U64, 64))),
         # struct { struct bpf_timer t; }
         Struct("with_timer", 16, (Member("t", TIMER, 0),)),
         Struct("plain", 16, (Member("a", U32, 0), Member("cnt", U32, 32),
                              Member("x", U64, 64))),
         Const("", LOCK),
         # struct { u64 x; struct with_lock in; }: a lock in a nested struct
         Struct("nested_lock", 24, (Member("x", U64, 0), Member("in", WITH_LOCK, 64))),
         Struct("nested_timer", 24, (Member("x", U64, 0), Member("in", WITH_TIMER, 64))),
         # a union is not searched, nor a member of a const lock type
         Union("union_lock", 16, (Member("lock", LOCK, 0), Member("x", U64, 0))),
         Struct("const_lock", 16, (Member("lock", CONST_LOCK, 0), Member("x", U64, 64))),
         Array("", WITH_LOCK, U32, 1),
         Array("", WITH_LOCK, U32, 2),
         # an array of one struct with a lock holds it; of two, repeats it (no field at all)
         Struct("one_nested", 16, (Member("a", LOCKS_1, 0),)),
         Struct("two_nested", 32, (Member("a", LOCKS_2, 0),)),
         # a timer off its 8-byte alignment is ignored, the lock beside it is not
         Struct("timer_at_4", 20, (Member("lock", LOCK, 0), Member("t", TIMER, 32))),
         Struct("lock8", 8, (Member("lock", LOCK, 0), Member("x", U32, 32))),
         Var("k", U32), Var("v", WITH_LOCK), Typedef("lock_t", LOCK)]
HASHES = (MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH)


def _steps(sys, scenario) -> list[tuple[str, int]]:
    btf = sys.btf_load(Btf(TYPES).to_bytes())
    fds = [btf]
    log: list[tuple[str, int]] = []

    def create(label: str, map_type: int, flags: int, key_id: int, value_id: int,
               value_size: int = 16, **kw):
        made = []
        log.append((label, errno_of(lambda: made.append(sys.map_create(
            map_type, 4, value_size, 2, flags, btf_fd=btf, btf_key_type_id=key_id,
            btf_value_type_id=value_id, **kw)))))
        fds.extend(made)
        return made[0] if made else None

    def step(label: str, fn, *args) -> None:
        log.append((label, errno_of(fn, *args)))

    try:
        scenario(sys, create, step)
    finally:
        for fd in reversed(fds):
            sys.close(fd)
    return log


def freeze_refuses_special_fields(sys, create, step) -> None:
    """map_freeze: ENOTSUPP for a value with a btf_record (a lock, a timer), checked before
    the fd's write permission; a plain value freezes once, then EPERM."""
    for map_type in (MapType.HASH, MapType.ARRAY, MapType.LRU_HASH):
        for value_id in (WITH_LOCK, WITH_TIMER, PLAIN):
            for flags in (0, int(MapFlags.RDONLY)):
                label = f"{map_type.name} value [{value_id}] flags {flags:#x}"
                fd = create(label, map_type, flags, U32, value_id)
                if fd is not None:
                    step(f"{label}: freeze", sys.map_freeze, fd)
                    step(f"{label}: freeze again", sys.map_freeze, fd)


def keyless_hash_checks_special_fields_first(sys, create, step) -> None:
    """A hash map with a value type but no key type: the special fields' checks (EACCES for
    a program-access flag, EOPNOTSUPP for a lock where the type takes none) come before the
    hash maps' own refusal of a keyless BTF (EINVAL)."""
    for map_type in HASHES:
        for value_id in (WITH_LOCK, WITH_TIMER, PLAIN):
            for flags in (0, int(MapFlags.NO_PREALLOC), int(MapFlags.WRONLY_PROG),
                          int(MapFlags.RDONLY_PROG)):
                create(f"{map_type.name} keyless value [{value_id}] flags {flags:#x}",
                       map_type, flags, 0, value_id)


def special_fields_are_found_as_btf_find_field_finds_them(sys, create, step) -> None:
    """btf_parse_fields: a lock or timer in a nested struct (or an array of one) counts, one
    in a union, of a const type, repeated by an array or off its alignment does not. Seen
    through what depends on it: an LRU hash refuses a lock (EOPNOTSUPP), a per-CPU hash a
    lock or timer, and freeze a map with either (ENOTSUPP)."""
    sizes = {NESTED_LOCK: 24, NESTED_TIMER: 24, UNION_LOCK: 16, CONST_LOCK_MEMBER: 16,
             ONE_NESTED: 16, TWO_NESTED: 32, TIMER_AT_4: 20}
    for value_id, size in sizes.items():
        for map_type in (MapType.HASH, MapType.LRU_HASH, MapType.PERCPU_HASH):
            label = f"{map_type.name} value [{value_id}]"
            fd = create(label, map_type, 0, U32, value_id, size)
            if fd is not None:
                step(f"{label}: freeze", sys.map_freeze, fd)


def devmaps_are_read_only_for_programs_when_btf_is_checked(sys, create, step) -> None:
    """dev_map_init_map sets BPF_F_RDONLY_PROG before map_check_btf runs: a value type with
    a lock is EACCES there (a cpumap's is map_check_no_btf's ENOTSUPP)."""
    for map_type in (MapType.DEVMAP, MapType.DEVMAP_HASH, MapType.CPUMAP):
        for key_id in (U32, 0):
            create(f"{map_type.name} key [{key_id}] lock8", map_type, 0, key_id, LOCK8, 8)


def a_var_is_typed_as_its_type(sys, create, step) -> None:
    """btf_type_id_size resolves a VAR to its type: an ARRAY keyed by a VAR of u32 is made;
    a VAR of a struct with a lock holds the lock."""
    for map_type in (MapType.ARRAY, MapType.HASH, MapType.LRU_HASH):
        label = f"{map_type.name} VAR key, VAR value"
        fd = create(label, map_type, 0, VAR_U32, VAR_WITH_LOCK)
        if fd is not None:
            step(f"{label}: freeze", sys.map_freeze, fd)


def inner_maps_match_the_templates_special_fields(sys, create, step) -> None:
    """bpf_map_meta_equal compares the value's btf_record too: an inner map must have the
    template's lock and timer, at the same offsets, or none when the template has none."""
    u32 = (0).to_bytes(4, "little")
    for template_value in (WITH_LOCK, WITH_TIMER, PLAIN, 0):
        template = create(f"template [{template_value}]", MapType.HASH, 0,
                          U32 if template_value else 0, template_value)
        for outer_type in (MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS):
            outer = create(f"{outer_type.name} of [{template_value}]", outer_type, 0, 0, 0, 4,
                           inner_map_fd=template)
            if outer is None:
                continue
            for value_id in (WITH_LOCK, WITH_TIMER, PLAIN, 0):
                inner = create(f"inner [{value_id}]", MapType.HASH, 0,
                               U32 if value_id else 0, value_id)
                step(f"{outer_type.name} of [{template_value}] takes [{value_id}]",
                     sys.map_update_elem, outer, u32, inner.to_bytes(4, "little"), 0)


# One more type after TYPES, for BTF load: which structs it parses for their locks.
LOAD_CASES = {
    "two locks": Struct("s", 16, (Member("a", LOCK, 0), Member("b", LOCK, 32))),
    "a lock at byte 2": Struct("s", 16, (Member("a", U32, 0), Member("b", LOCK, 16))),
    "two const locks": Struct("s", 16, (Member("a", CONST_LOCK, 0),
                                        Member("b", CONST_LOCK, 32))),
    "a lock and a typedef of one": Struct("s", 16, (Member("a", LOCK, 0),
                                                    Member("b", LOCK_T, 32))),
    "a typedef lock at byte 2": Struct("s", 16, (Member("a", U32, 0),
                                                 Member("b", LOCK_T, 16))),
    "a union of two locks": Union("u", 4, (Member("a", LOCK, 0), Member("b", LOCK, 0))),
}


def btf_load_parses_structs_with_a_lock_member(sys, create, step) -> None:
    """btf_parse_struct_metas parses a struct (not a union) whose member's own type is
    struct bpf_spin_lock: two such locks are E2BIG, one off 4 bytes EFAULT; a const or
    typedef of the lock does not make a struct parsed."""
    for label, record in LOAD_CASES.items():
        blob = Btf([*TYPES, record]).to_bytes()
        step(f"load: {label}", lambda blob=blob: sys.close(sys.btf_load(blob)))


SCENARIOS = [freeze_refuses_special_fields, keyless_hash_checks_special_fields_first,
             special_fields_are_found_as_btf_find_field_finds_them,
             devmaps_are_read_only_for_programs_when_btf_is_checked,
             a_var_is_typed_as_its_type, inner_maps_match_the_templates_special_fields,
             btf_load_parses_structs_with_a_lock_member]


@pytest.mark.kernel
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_btf_map_scenario_matches_the_kernel(kernel, emulated, scenario):
    assert _steps(emulated, scenario) == _steps(kernel, scenario)
