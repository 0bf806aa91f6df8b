"""BPF objects built by clang: ELF, libbpf conventions, linking (libbpf's ``bpf_object``).

``ObjectSpec.from_file("prog.bpf.o")`` reads a ``clang -O2 -g -target bpf -c`` object:
its maps (BTF-defined, legacy, global data), programs (typed by section name, linked with
their subprograms), global variables, BTF and CO-RE records, with no libbpf, bpftool or
clang at run time.

- ``elf``: the ELF reader; ``section_defs``: libbpf's section name table;
  ``map_defs``: map definitions; ``linker``: relocations and subprogram linking;
  ``relo_core``: CO-RE relocation resolution; ``spec``: ``ObjectSpec``.
"""

from .errors import ElfError, ObjectError, RelocationError, UnsupportedError
from .linker import Reloc, RelocKind
from .map_defs import LIBBPF_PIN_BY_NAME, LIBBPF_PIN_NONE, GlobalVariable, ObjectMap
from .section_defs import SECTION_DEFS, SectionDef, find_section_def
from .spec import Globals, ObjectProgram, ObjectSpec

__all__ = [
    "LIBBPF_PIN_BY_NAME", "LIBBPF_PIN_NONE", "SECTION_DEFS", "ElfError", "GlobalVariable",
    "Globals", "ObjectError", "ObjectMap", "ObjectProgram", "ObjectSpec", "Reloc",
    "RelocKind", "RelocationError", "SectionDef", "UnsupportedError", "find_section_def",
]
