"""The program engine: the verifier, the execution engines, helpers, kfuncs, BTF.

The verifier follows verifier.c's parts (verifier.py drives; verifier_state.py, verifier_alu.py,
verifier_mem.py and verifier_helpers.py are its state, ALU, memory-access and call checks;
tnum.py is tnum.c); filter.py holds the context layouts (``struct __sk_buff``, ``xdp_md``, ...)
and their access rules as net/core/filter.c; log.py is kernel/bpf/log.c. memory.py is the
engines' memory model, semantics.py the instruction semantics the engines share,
interpreter.py, jit.py and native.py (machine code through LLVM, where llvmlite is installed)
the engines, executable.py a loaded program and core.py ``run_prog``, the one entry every
caller uses with a ``RunEnv``.

Rules this package keeps:
- Imports from ``machine`` and ``maps`` only (never from ``net`` or the front).
- The engine sees a ``RunEnv`` (machine, instruction budget, engine choice), never a System.
"""
