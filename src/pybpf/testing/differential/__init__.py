"""Differential testing of the map subsystem: one operation sequence, two Systems, every byte.

Rules the harness keeps:
- A sequence is plain data: ops that name maps and sockets by *handle* (their creation slot),
  never by fd, so it runs unchanged on any ``System``, prints readably and can be shrunk.
- Every op records what came back: the bytes (per-CPU values in full, every slot), the errno
  (ENOTSUPP 524 kept apart from EOPNOTSUPP 95), for batches the keys, values, token and end
  flag, and the count a failing write batch reports. What differs between backends by nature
  is normalised, nothing else: map ids become the handle of the map they name (creation
  order), socket cookies become socket handles, fds never appear in a result.
- Order is compared exactly wherever the kernel's is deterministic: every type, and the hash
  family created with BPF_F_ZERO_SEED. Hash maps created without it get walks and dumps
  compared as sorted lists, and the generators issue no single step whose answer depends on
  the seed (get_next_key, partial batches) on them.
- A sequence runs inside ``on_cpu(0)`` (the kernel backend pins the thread), which makes LRU
  eviction and per-CPU placement deterministic; ``SetCpu`` moves it on purpose.
- The first differing op ends the comparison of a sequence (the states have diverged);
  ``shrink`` then cuts the sequence down to the ops the difference needs.

ops.py holds the ops and OpSequence, runner.py runs a sequence on one System, shrink.py
compares two runs and shrinks a mismatch, generators.py makes the sequences of each family,
command.py runs them all (``compare``) and is ``pybpf differential``.
"""

from __future__ import annotations

from .command import compare, differential_command
from .generators import (
    CREATE_TYPES,
    GENERATORS,
    Gen,
    gen_array,
    gen_bloom,
    gen_cpumap,
    gen_create,
    gen_devmap,
    gen_hash,
    gen_lpm,
    gen_lru,
    gen_map_in_map,
    gen_queue_stack,
    gen_sockmap,
    generate,
)
from .ops import (
    BAD_MAP,
    CURSOR,
    SOCKET_KINDS,
    BloomPeek,
    Close,
    CloseSocket,
    Create,
    Delete,
    DeleteBatch,
    Dump,
    Freeze,
    Info,
    Lookup,
    LookupAndDelete,
    LookupBatch,
    MapRef,
    NextKey,
    Op,
    OpenSocket,
    OpSequence,
    ProgDelete,
    ProgLookup,
    ProgUpdate,
    Result,
    SetCpu,
    SockRef,
    Update,
    UpdateBatch,
    Value,
    Walk,
)
from .runner import PROG_LOOKUP_TYPES, Runner, load_map_program, prog_ctx, programs_supported
from .shrink import Mismatch, Summary, first_mismatch, shrink

__all__ = [
    "BAD_MAP",
    "CURSOR",
    "Result",
    "MapRef",
    "SockRef",
    "Value",
    "Op",
    "Create",
    "Update",
    "Lookup",
    "Delete",
    "NextKey",
    "LookupAndDelete",
    "Freeze",
    "LookupBatch",
    "UpdateBatch",
    "DeleteBatch",
    "Walk",
    "Dump",
    "Info",
    "Close",
    "SetCpu",
    "ProgLookup",
    "ProgUpdate",
    "ProgDelete",
    "SOCKET_KINDS",
    "OpenSocket",
    "CloseSocket",
    "OpSequence",
    "BloomPeek",
    "Runner",
    "PROG_LOOKUP_TYPES",
    "prog_ctx",
    "load_map_program",
    "programs_supported",
    "Mismatch",
    "first_mismatch",
    "shrink",
    "Summary",
    "Gen",
    "gen_hash",
    "gen_lru",
    "gen_array",
    "gen_map_in_map",
    "gen_queue_stack",
    "gen_lpm",
    "gen_bloom",
    "gen_devmap",
    "gen_cpumap",
    "gen_sockmap",
    "CREATE_TYPES",
    "gen_create",
    "GENERATORS",
    "generate",
    "compare",
    "differential_command",
]
