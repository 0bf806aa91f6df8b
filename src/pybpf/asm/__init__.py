"""pybpf.asm: the eBPF instruction set, an assembler, a disassembler.

``opcodes`` holds the one opcode table and the Instruction record with encode/decode;
``builder`` the mnemonic functions, labels and ``assemble``; ``disasm`` the bpftool-like text.
"""

# The package exports what its modules do (their __all__), gathered as asyncio's __init__ does;
# builder's include every mnemonic (add64, jeq32, ...).
from . import builder as _builder
from . import disasm as _disasm
from . import opcodes as _opcodes
from . import text as _text
from .builder import *  # noqa: F403
from .disasm import *  # noqa: F403
from .opcodes import *  # noqa: F403
from .text import *  # noqa: F403

__all__ = [*_builder.__all__, *_disasm.__all__, *_opcodes.__all__, *_text.__all__]
