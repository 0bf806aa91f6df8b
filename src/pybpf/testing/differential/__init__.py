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

# The package exports what its modules do (their __all__), gathered as asyncio's __init__ does.
from . import command as _command
from . import generators as _generators
from . import ops as _ops
from . import runner as _runner
from . import shrink as _shrink
from .command import *  # noqa: F403
from .generators import *  # noqa: F403
from .ops import *  # noqa: F403
from .runner import *  # noqa: F403
from .shrink import *  # noqa: F403

__all__ = [*_command.__all__, *_generators.__all__, *_ops.__all__, *_runner.__all__,
           *_shrink.__all__]
