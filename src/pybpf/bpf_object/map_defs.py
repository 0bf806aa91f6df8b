"""The maps an object declares: BTF-defined ``.maps``, legacy ``maps``, and global data.

- BTF-defined maps (libbpf ``parse_btf_map_def``): each variable of the ``.maps`` DATASEC
  is a struct whose members say the attributes: ``__uint(name, N)`` is a pointer to an
  ``int[N]``, ``__type(key, T)`` a pointer to ``T``, ``__array(values, ...)`` a zero-length
  array of pointers to the inner map's definition (map-in-map) or to a function prototype
  (program array); initial slots come from the ``.rel.maps`` relocations.
- Legacy maps: ``struct bpf_map_def { u32 type, key_size, value_size, max_entries,
  map_flags; }`` records in a ``maps`` section, one per symbol (libbpf 1.0 dropped them;
  samples and older programs still use them, and cilium/ebpf reads them).
- Global data: each ``.data``, ``.rodata``, ``.bss``, ``.data.*``, ``.rodata.*`` and
  ``.bss.*`` section is a one-element ARRAY whose value is the section, named as libbpf
  names it (``data_map_name``; its kernel name ``internal_map_name``: ``<obj>.data``) and
  found by its section name too (``MapsByName``); ``.rodata`` is read-only for programs and
  is frozen after it is filled.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..btf import Array, Btf, BtfError, Datasec, Enum, FuncProto, Ptr, Struct, Var
from ..btf.codecs import btf_codec
from ..btf.types import BTF_VAR_GLOBAL_ALLOCATED, BTF_VAR_STATIC
from ..codecs import BytesCodec, Codec
from ..maps import MapSpec
from ..uapi import BPF_F_MMAPABLE, BPF_F_NUMA_NODE, BPF_F_RDONLY_PROG, MapType
from .elf import SHT_NOBITS, SHT_PROGBITS, STT_SECTION, ElfFile, Section
from .errors import ObjectError, UnsupportedError

BPF_OBJ_NAME_LEN = 16
LIBBPF_PIN_NONE, LIBBPF_PIN_BY_NAME = 0, 1
_LEGACY_DEF = struct.Struct("5I")  # struct bpf_map_def
_MAP_IN_MAP = (MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS)
U32_MAX = 2**32 - 1
_DATA_PREFIXES = (".data", ".rodata", ".bss")
_Map = TypeVar("_Map")


@dataclass(frozen=True)
class GlobalVariable:
    """A variable of a global data section: where it lies in its map's value."""

    name: str
    map: str          # its map's section (e.g. ".data"), which finds it in MapsByName
    offset: int
    size: int
    type_id: int      # its BTF type (0 without BTF)
    codec: Codec


@dataclass
class ObjectMap:
    """A map the object declares (libbpf ``struct bpf_map`` before creation).

    ``spec`` holds the BPF_MAP_CREATE attributes and typed key/value codecs; the BTF ids
    are those of the object's BTF. ``slots`` are initial map-in-map (map names) or program
    array (program names) entries by index; ``data`` the initial value of a global data
    map, ``variables`` its variables by name.
    """

    name: str
    section: str
    spec: MapSpec
    key_type_id: int = 0
    value_type_id: int = 0
    pinning: int = LIBBPF_PIN_NONE
    inner_key_type_id: int = 0            # a map of maps: its inner template's types
    inner_value_type_id: int = 0
    offset: int = 0                       # of its definition in ``section``
    values_offset: int | None = None      # of its ``values[]`` slots in the definition
    slots: dict[int, str] = field(default_factory=dict)
    data: bytearray | None = None
    variables: dict[str, GlobalVariable] = field(default_factory=dict)
    frozen: bool = False                  # .rodata: frozen once filled

    @property
    def kind(self) -> str:
        """"btf", "legacy", "data", "rodata", "bss" or "kconfig"."""
        if self.section == ".maps":
            return "btf"
        if self.section == "maps":
            return "legacy"
        if self.section == ".kconfig":  # the __kconfig externs' values (externs.py)
            return "kconfig"
        return _data_kind(self.section)[1:]


class MapsByName(dict[str, _Map]):
    """Maps by name (libbpf's bpf_map__name: ``<obj>.data``, ``.data.custom``, ``counts``),
    also found as bpf_object__find_map_by_name finds them: a name that starts with a dot is
    a global data map's ELF section (``.data``, ``.rodata``, ``.bss``, ``.kconfig``).
    ``sections`` maps those sections to the maps' names."""

    def __init__(self, maps: Mapping[str, _Map] | None = None, *,
                 sections: Mapping[str, str]) -> None:
        super().__init__(maps or {})
        self.sections = dict(sections)

    def _name(self, name: str) -> str:
        return self.sections.get(name, name)

    def __getitem__(self, name: str) -> _Map:
        return super().__getitem__(self._name(name))

    def __contains__(self, name: object) -> bool:
        return super().__contains__(self._name(name) if isinstance(name, str) else name)

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(self._name(name), default)


class Globals(MutableMapping[str, Any]):
    """Global variables by name, over the values of the global data maps: ``read(map)`` and
    ``write(map, value)`` move a whole map value (the initial bytes before load, the map
    itself after). Writing one variable rewrites its map's value around it, so a write races
    with a program that writes the same map at the same time."""

    def __init__(self, maps: dict[str, ObjectMap], read: Callable[[str], bytes],
                 write: Callable[[str, bytes], None]) -> None:
        self._maps = maps
        self._read, self._write = read, write

    @property
    def variables(self) -> dict[str, GlobalVariable]:
        out: dict[str, GlobalVariable] = {}
        for m in self._maps.values():
            for name, var in m.variables.items():
                out.setdefault(name, var)
        return out

    def _variable(self, name: str) -> GlobalVariable:
        var = self.variables.get(name)
        if var is None:
            raise KeyError(f"no global variable {name!r}; the object has "
                           f"{', '.join(sorted(self.variables)) or 'none'}")
        return var

    def __getitem__(self, name: str) -> Any:
        var = self._variable(name)
        return var.codec.decode(self._read(var.map)[var.offset:var.offset + var.size])

    def __setitem__(self, name: str, value: Any) -> None:
        """Set a variable; a dict for a struct changes only the fields it names."""
        var = self._variable(name)
        if isinstance(value, Mapping) and not getattr(var.codec, "union", True):
            value = self[name]._replace(**value)
        data = bytearray(self._read(var.map))
        data[var.offset:var.offset + var.size] = var.codec.encode(value).ljust(var.size, b"\0")
        self._write(var.map, bytes(data))

    def __delitem__(self, name: str) -> None:
        raise TypeError("global variables cannot be deleted; assign a new value instead")

    def __iter__(self) -> Iterator[str]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)

    def __repr__(self) -> str:
        return f"Globals({dict(self.items())!r})"


def _data_kind(section: str) -> str:
    for prefix in _DATA_PREFIXES:
        if section == prefix or section.startswith(prefix + "."):
            return prefix
    raise KeyError(section)


def is_data_section(section: Section) -> bool:
    """A global data section libbpf turns into a map (bpf_object__elf_collect)."""
    kind = next((p for p in _DATA_PREFIXES
                 if section.name == p or section.name.startswith(p + ".")), None)
    if kind is None or section.executable or section.size == 0:
        return False
    return section.type == (SHT_NOBITS if kind == ".bss" else SHT_PROGBITS)


def data_map_name(obj_name: str, section: str) -> str:
    """libbpf's bpf_map__name() of a global data map: a custom ``.data.*`` or ``.rodata.*``
    map is called by its section (map_uses_real_name), the others by their kernel name."""
    if section.startswith((".data.", ".rodata.")):
        return section
    return internal_map_name(obj_name, section)


def internal_map_name(obj_name: str, section: str) -> str:
    """libbpf's internal_map_name(): the kernel name of a global data map."""
    sfx_len = min(max(7, len(section)), BPF_OBJ_NAME_LEN - 1)
    pfx_len = 0 if "." in section[1:] else min(BPF_OBJ_NAME_LEN - sfx_len - 1, len(obj_name))
    name = obj_name[:pfx_len] + section[:sfx_len]
    return "".join(c if c.isalnum() or c in "_." else "_" for c in name)


# -- BTF-defined maps ---------------------------------------------------------------------

@dataclass
class _MapDef:
    map_type: int = 0
    key_size: int = 0
    value_size: int = 0
    max_entries: int = 0
    map_flags: int = 0
    numa_node: int | None = None
    map_extra: int = 0
    pinning: int = LIBBPF_PIN_NONE
    key_type_id: int = 0
    value_type_id: int = 0
    inner: _MapDef | None = None
    values_offset: int | None = None      # byte offset of ``values[]`` in the definition


def parse_btf_map_def(btf: Btf, map_name: str, def_type_id: int,
                      inner: bool = False) -> _MapDef:
    """One BTF map definition (parse_btf_map_def); errors name the map and the field."""
    record = btf[btf.resolve(def_type_id)]
    if not isinstance(record, Struct):
        raise ObjectError(f"map '{map_name}': its definition is not a struct but "
                          f"{btf.describe(def_type_id)}")
    out = _MapDef()
    for index, member in enumerate(record.members):
        name = member.name
        if name in ("type", "max_entries", "map_flags", "numa_node", "pinning", "key_size",
                    "value_size", "map_extra"):
            value = _field_int(btf, map_name, member.type_id, name)
            if name == "type":
                out.map_type = value
            elif name == "max_entries":
                out.max_entries = value
            elif name == "map_flags":
                out.map_flags = value
            elif name == "numa_node":
                out.numa_node = value
            elif name == "map_extra":
                out.map_extra = value
            elif name == "pinning":
                if inner:
                    raise ObjectError(f"map '{map_name}': inner def can't be pinned")
                if value not in (LIBBPF_PIN_NONE, LIBBPF_PIN_BY_NAME):
                    raise ObjectError(f"map '{map_name}': invalid pinning value {value} "
                                      "(LIBBPF_PIN_NONE 0 or LIBBPF_PIN_BY_NAME 1)")
                out.pinning = value
            else:
                setattr(out, name, _check_size(map_name, name, getattr(out, name), value))
        elif name in ("key", "value"):
            target = btf[member.type_id]
            if not isinstance(target, Ptr):
                raise ObjectError(f"map '{map_name}': {name} spec is not a pointer "
                                  f"(__type({name}, T)) but {btf.describe(member.type_id)}")
            try:
                size = btf.size_of(target.type_id)
            except BtfError as exc:
                raise ObjectError(f"map '{map_name}': can't determine {name} size for type "
                                  f"[{target.type_id}]: {exc}") from None
            setattr(out, f"{name}_size",
                    _check_size(map_name, f"{name}_size", getattr(out, f"{name}_size"), size))
            setattr(out, f"{name}_type_id", target.type_id)
        elif name == "values":
            _parse_values(btf, map_name, record, index, inner, out)
        else:
            raise UnsupportedError(f"map '{map_name}': unknown field '{name}' (pybpf reads "
                                   "type, key, value, key_size, value_size, max_entries, "
                                   "map_flags, numa_node, pinning, map_extra, values)")
    if out.map_type == 0:
        raise ObjectError(f"map '{map_name}': map type isn't specified (__uint(type, ...))")
    return out


def _parse_values(btf: Btf, map_name: str, record: Struct, index: int, inner: bool,
                  out: _MapDef) -> None:
    is_map_in_map = out.map_type in _MAP_IN_MAP
    if inner:
        raise UnsupportedError(f"map '{map_name}': multi-level inner maps not supported")
    if index != len(record.members) - 1:
        raise ObjectError(f"map '{map_name}': 'values' member should be last")
    if not is_map_in_map and out.map_type != MapType.PROG_ARRAY:
        raise ObjectError(f"map '{map_name}': 'values' needs a map-in-map or prog-array "
                          f"type, not {_type_name(out.map_type)}")
    out.value_size = _check_size(map_name, "value_size", out.value_size, 4)
    member = record.members[index]
    array = btf[member.type_id]
    desc = "map-in-map inner" if is_map_in_map else "prog-array value"
    if not isinstance(array, Array) or array.nelems:
        raise ObjectError(f"map '{map_name}': {desc} spec is not a zero-sized array")
    pointer = btf[btf.resolve(array.type_id)]
    if not isinstance(pointer, Ptr):
        raise ObjectError(f"map '{map_name}': {desc} def is not a pointer")
    target_id = btf.resolve(pointer.type_id)
    target = btf[target_id]
    out.values_offset = member.bit_offset // 8
    if not is_map_in_map:
        if not isinstance(target, FuncProto):
            raise ObjectError(f"map '{map_name}': prog-array value def is "
                              f"{btf.describe(target_id)}, not a function prototype")
        return
    if not isinstance(target, Struct):
        raise ObjectError(f"map '{map_name}': map-in-map inner def is "
                          f"{btf.describe(target_id)}, not a struct")
    out.inner = parse_btf_map_def(btf, f"{map_name}.inner", target_id, inner=True)


def _field_int(btf: Btf, map_name: str, type_id: int, field_name: str) -> int:
    """The N of ``__uint(name, N)`` (pointer to int[N]) or of ``__ulong`` (a 1-value enum)."""
    record = btf[btf.resolve(type_id)]
    if isinstance(record, Ptr):
        array = btf[btf.resolve(record.type_id)]
        if isinstance(array, Array):
            return array.nelems
        raise ObjectError(f"map '{map_name}': attr '{field_name}': expected a pointer to an "
                          f"array (__uint), got a pointer to {btf.describe(record.type_id)}")
    if isinstance(record, Enum) and len(record.values) == 1:
        return record.values[0].value
    raise ObjectError(f"map '{map_name}': attr '{field_name}': expected __uint(...) or "
                      f"__ulong(...), got {btf.describe(type_id)}")


def _check_size(map_name: str, what: str, old: int, new: int) -> int:
    if old and old != new:
        raise ObjectError(f"map '{map_name}': conflicting {what.replace('_', ' ')} "
                          f"{old} != {new}")
    return new


def _type_name(map_type: int) -> str:
    try:
        return MapType(map_type).name
    except ValueError:
        return f"map type {map_type}"


def _spec(name: str, d: _MapDef, btf: Btf | None, inner: MapSpec | None = None) -> MapSpec:
    key: Codec | None = btf_codec(btf, d.key_type_id, "key") if btf and d.key_type_id else None
    value: Codec | None = (btf_codec(btf, d.value_type_id, "value")
                           if btf and d.value_type_id else None)
    flags = d.map_flags & ~BPF_F_NUMA_NODE
    # libbpf passes numa_node (0 when not given) as is: the kernel reads it only with
    # BPF_F_NUMA_NODE in map_flags
    numa = (d.numa_node or 0) if d.map_flags & BPF_F_NUMA_NODE else None
    max_entries = d.max_entries
    if d.map_type in (MapType.RINGBUF, MapType.USER_RINGBUF):
        max_entries = adjust_ringbuf_sz(max_entries)
    return MapSpec(d.map_type, d.key_size, d.value_size, max_entries, flags=flags,
                   numa_node=numa, inner_map=inner, name=name[:BPF_OBJ_NAME_LEN - 1],
                   map_extra=d.map_extra, key=key, value=value)


def adjust_ringbuf_sz(size: int) -> int:
    """libbpf's adjust_ringbuf_sz(): a ring buffer's max_entries raised to the next power-of-2
    multiple of the page size, as the kernel needs it (0, and a size with none below 2**32,
    pass unchanged for the kernel to refuse)."""
    page = mmap.PAGESIZE
    if size == 0 or (size % page == 0 and (size // page).bit_count() == 1):
        return size
    multiple = 1
    while multiple * page <= U32_MAX:
        if multiple * page > size:
            return multiple * page
        multiple <<= 1
    return size


def btf_maps(elf: ElfFile, btf: Btf, section: Section) -> list[ObjectMap]:
    """The maps of the ``.maps`` section, each at its symbol's offset."""
    datasec_id = _datasec_id(btf, section.name)
    if datasec_id is None:
        raise ObjectError(f"section '{section.name}': no DATASEC '{section.name}' in BTF: "
                          "compile with -g so clang describes BTF-defined maps")
    datasec = btf[datasec_id]
    symbols = {s.name: s for s in elf.symbols if s.shndx == section.index and s.name}
    maps = []
    for info in datasec.vars:  # type: ignore[attr-defined]
        var = btf[info.type_id]
        if not isinstance(var, Var):
            raise ObjectError(f"section '{section.name}': DATASEC entry [{info.type_id}] is "
                              "not a variable")
        if var.linkage != BTF_VAR_GLOBAL_ALLOCATED:  # bpf_object__init_user_btf_map
            raise UnsupportedError(f"map '{var.name}': unsupported map linkage "
                                   f"{'static' if var.linkage == BTF_VAR_STATIC else 'extern'}"
                                   " (libbpf creates only global maps: drop static or "
                                   "__hidden)")
        symbol = symbols.get(var.name)
        if symbol is None:
            raise ObjectError(f"map '{var.name}': no ELF symbol in section "
                              f"'{section.name}' (is it static?)")
        d = parse_btf_map_def(btf, var.name, var.type_id)
        inner = _spec(f"{var.name}.inner", d.inner, btf) if d.inner else None
        maps.append(ObjectMap(var.name, section.name, _spec(var.name, d, btf, inner),
                              d.key_type_id, d.value_type_id, d.pinning,
                              d.inner.key_type_id if d.inner else 0,
                              d.inner.value_type_id if d.inner else 0, symbol.value,
                              d.values_offset))
    return maps


def map_slots(elf: ElfFile, section: Section, maps: list[ObjectMap],
              name_of: Callable[[int, int], str | None]) -> None:
    """Fill ``slots`` of map-in-map and program-array maps from ``.rel.maps``:
    ``name_of(shndx, offset)`` names the map or program a relocation points at."""
    for rel in elf.relocations(section):
        owner = next((m for m in maps if m.offset <= rel.offset < m.offset +
                      _def_size(elf, section, m)), None)
        if owner is None:
            raise ObjectError(f"section '{section.name}': relocation #{rel.index} at offset "
                              f"{rel.offset} lies in no map definition")
        start = owner.values_offset
        if start is None or rel.offset - owner.offset < start or \
                (rel.offset - owner.offset - start) % 8:
            raise ObjectError(f"map '{owner.name}': relocation at offset {rel.offset} is not "
                              "a slot of its 'values' array")
        slot = (rel.offset - owner.offset - start) // 8
        if slot >= owner.spec.max_entries:
            raise ObjectError(f"map '{owner.name}': initial value #{slot} is beyond "
                              f"max_entries {owner.spec.max_entries}")
        target = name_of(rel.symbol.shndx, rel.symbol.value)
        if target is None:
            raise ObjectError(f"map '{owner.name}': slot {slot} points at "
                              f"'{elf.symbol_name(rel.symbol)}', which is neither a map nor a "
                              "program of this object")
        owner.slots[slot] = target


def _def_size(elf: ElfFile, section: Section, m: ObjectMap) -> int:
    return next((s.size for s in elf.symbols
                 if s.shndx == section.index and s.value == m.offset and s.size), 0)


# -- legacy maps --------------------------------------------------------------------------

def legacy_maps(elf: ElfFile, section: Section) -> list[ObjectMap]:
    """The ``struct bpf_map_def`` records of a ``maps`` section, one per symbol."""
    symbols = sorted((s for s in elf.symbols if s.shndx == section.index and s.name and
                      s.type != STT_SECTION), key=lambda s: s.value)
    if not symbols:
        raise ObjectError(f"section '{section.name}': no map symbols in a legacy maps section")
    maps = []
    for symbol in symbols:
        size = symbol.size or section.size // len(symbols)
        raw = section.data[symbol.value:symbol.value + size]
        if size < _LEGACY_DEF.size or len(raw) < size:
            raise ObjectError(f"map '{symbol.name}': its bpf_map_def in section "
                              f"'{section.name}' is {len(raw)} bytes, less than the "
                              f"{_LEGACY_DEF.size} of type, key_size, value_size, "
                              "max_entries, map_flags")
        if any(raw[_LEGACY_DEF.size:]):
            raise UnsupportedError(f"map '{symbol.name}': its legacy definition has "
                                   f"unrecognized, non-zero fields after map_flags")
        fmt = struct.Struct(("<" if elf.byteorder == "little" else ">") + _LEGACY_DEF.format)
        map_type, key_size, value_size, max_entries, map_flags = fmt.unpack_from(raw)
        d = _MapDef(map_type, key_size, value_size, max_entries, map_flags)
        maps.append(ObjectMap(symbol.name, section.name, _spec(symbol.name, d, None),
                              offset=symbol.value))
    return maps


# -- global data --------------------------------------------------------------------------

def data_map(elf: ElfFile, btf: Btf | None, section: Section, obj_name: str) -> ObjectMap:
    """The ARRAY map of a global data section, its initial bytes and its variables."""
    kind = _data_kind(section.name)
    datasec_id = _datasec_id(btf, section.name) if btf else None
    variables: dict[str, GlobalVariable] = {}
    mmapable = False
    if datasec_id is not None:
        for info in btf[datasec_id].vars:  # type: ignore[union-attr, attr-defined]
            var = btf[info.type_id]
            if not isinstance(var, Var):
                continue
            mmapable |= var.linkage != BTF_VAR_STATIC
            variables[var.name] = GlobalVariable(var.name, section.name, info.offset,
                                                 info.size, var.type_id,
                                                 btf_codec(btf, var.type_id, var.name))
    else:
        for symbol in elf.symbols:
            if symbol.shndx == section.index and symbol.name and symbol.type != STT_SECTION \
                    and symbol.size:
                variables[symbol.name] = GlobalVariable(
                    symbol.name, section.name, symbol.value, symbol.size, 0,
                    BytesCodec(symbol.size, symbol.name))
    flags = (BPF_F_RDONLY_PROG if kind == ".rodata" else 0) | \
        (BPF_F_MMAPABLE if mmapable else 0)
    value = btf_codec(btf, datasec_id, section.name) if datasec_id is not None else None
    spec = MapSpec(MapType.ARRAY, 4, section.size, 1, flags=flags,
                   name=internal_map_name(obj_name, section.name), value=value)
    data = bytearray(section.size) if section.type == SHT_NOBITS else bytearray(section.data)
    return ObjectMap(data_map_name(obj_name, section.name), section.name, spec, 0,
                     datasec_id or 0, data=data,
                     variables=variables, frozen=kind == ".rodata")


def _datasec_id(btf: Btf | None, name: str) -> int | None:
    if btf is None:
        return None
    for type_id in btf.ids_named(name):
        if isinstance(btf[type_id], Datasec):
            return type_id
    return None
