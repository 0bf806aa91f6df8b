"""The program engine: the verifier, the execution engines, helpers, kfuncs, BTF.

The verifier follows verifier.c's parts (verifier.py drives; verifier_state.py, verifier_alu.py,
verifier_mem.py and verifier_helpers.py are its state, ALU, memory-access and call checks;
tnum.py is tnum.c); filter.py is net/core/filter.c: the context layouts (``struct __sk_buff``,
``xdp_md``, ...), their access rules and the network programs' helpers; log.py is
kernel/bpf/log.c. helpers.py is kernel/bpf/helpers.c's helpers and the one helper table, which
also takes bpf_trace.py's (kernel/trace/bpf_trace.c), filter.py's and bpf_iter.py's. memory.py
is the engines' memory model (regions, ``RunEnv``, ``RunState``), semantics.py the rare
operations the engines share, interpreter.py, jit.py and native.py (machine code through LLVM,
where llvmlite is installed) the engines, executable.py a loaded program as the engines read it,
and core.py (kernel/bpf/core.c) ``run_prog``, the one entry every caller uses, and the engines'
entries.

Rules this package keeps:
- Imports from ``machine`` and ``maps`` only (never from ``net`` or the front).
- The engine sees a ``RunEnv`` (machine, instruction budget, engine choice), never a System.
"""
