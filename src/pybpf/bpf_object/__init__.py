"""BPF objects built by clang: ELF, libbpf conventions, linking (libbpf's ``bpf_object``).

``ObjectSpec.from_file("prog.bpf.o")`` reads a ``clang -O2 -g -target bpf -c`` object:
its maps (BTF-defined, legacy, global data), programs (typed by section name, linked with
their subprograms), global variables, BTF and CO-RE records, with no libbpf, bpftool or
clang at run time.

- ``elf``: the ELF reader; ``section_defs``: libbpf's section name table;
  ``map_defs``: map definitions; ``linker``: relocations and subprogram linking;
  ``relo_core``: CO-RE relocation resolution; ``spec``: ``ObjectSpec``; ``loader``:
  ``ObjectSpec.load`` -> ``Object`` (maps, programs, globals, links on a System).
"""

from .errors import ElfError, ObjectError, RelocationError, UnsupportedError
from .linker import Reloc, RelocKind
from .loader import Object, check_loadable, load_object
from .map_defs import LIBBPF_PIN_BY_NAME, LIBBPF_PIN_NONE, Globals, GlobalVariable, ObjectMap
from .section_defs import SECTION_DEFS, SectionDef, find_section_def
from .spec import ObjectProgram, ObjectSpec

__all__ = [
    "LIBBPF_PIN_BY_NAME", "LIBBPF_PIN_NONE", "SECTION_DEFS", "ElfError", "GlobalVariable",
    "Globals", "Object", "ObjectError", "ObjectMap", "ObjectProgram", "ObjectSpec", "Reloc",
    "RelocKind", "RelocationError", "SectionDef", "UnsupportedError", "check_loadable",
    "find_section_def", "load_object",
]
