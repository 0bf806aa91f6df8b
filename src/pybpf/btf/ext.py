"""The .BTF.ext section: func_info, line_info and CO-RE relocation records, by ELF section.

Layout (libbpf btf.c, struct btf_ext_header): a header (magic, version, flags, hdr_len,
then offset/length pairs of the func_info, line_info and, when hdr_len is 32 or more,
core_relo subsections); each subsection is a u32 record size followed by blocks of
{u32 section name offset, u32 record count, records...}. Names are offsets into the
.BTF string section, so parsing takes the object's ``Btf``. Instruction offsets are in
bytes from the start of the ELF section, as clang writes them.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from .spec import BTF_MAGIC, Btf, BtfError

__all__ = ["BtfExt", "CoreRelo", "CoreReloKind", "FuncInfo", "LineInfo"]

_HEADER = struct.Struct("HBBIIIII")  # magic, version, flags, hdr_len, func/line off+len
_CORE_SIZE = 8                        # core_relo_off, core_relo_len
_MIN_RECORD = {"func_info": 8, "line_info": 16, "core_relo": 16}


class CoreReloKind(enum.IntEnum):
    """enum bpf_core_relo_kind; ``label`` is libbpf's short name for messages."""

    FIELD_BYTE_OFFSET = 0
    FIELD_BYTE_SIZE = 1
    FIELD_EXISTS = 2
    FIELD_SIGNED = 3
    FIELD_LSHIFT_U64 = 4
    FIELD_RSHIFT_U64 = 5
    TYPE_ID_LOCAL = 6
    TYPE_ID_TARGET = 7
    TYPE_EXISTS = 8
    TYPE_SIZE = 9
    ENUMVAL_EXISTS = 10
    ENUMVAL_VALUE = 11
    TYPE_MATCHES = 12

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = dict(zip(CoreReloKind, (
    "byte_off", "byte_sz", "field_exists", "signed", "lshift_u64", "rshift_u64",
    "local_type_id", "target_type_id", "type_exists", "type_size", "enumval_exists",
    "enumval_value", "type_matches"), strict=True))


@dataclass(frozen=True)
class FuncInfo:
    """A function starts at ``insn_off`` (bytes) with BTF FUNC ``type_id``."""

    insn_off: int
    type_id: int


@dataclass(frozen=True)
class LineInfo:
    """Source position of the instruction at ``insn_off`` (bytes)."""

    insn_off: int
    file_name_off: int
    line_off: int
    line_col: int
    file_name: str = ""
    line: str = ""

    @property
    def line_num(self) -> int:
        return self.line_col >> 10

    @property
    def column(self) -> int:
        return self.line_col & 0x3FF


@dataclass(frozen=True)
class CoreRelo:
    """struct bpf_core_relo: patch the instruction at ``insn_off`` (bytes) for the access
    ``access_str`` ("0:1:2") into local type ``type_id``."""

    insn_off: int
    type_id: int
    access_str_off: int
    kind: CoreReloKind
    access_str: str = ""
    index: int = 0     # its position among its section's records: libbpf's "relo #N"


@dataclass
class BtfExt:
    """Records by ELF section name."""

    func_info: dict[str, list[FuncInfo]]
    line_info: dict[str, list[LineInfo]]
    core_relos: dict[str, list[CoreRelo]]

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, btf: Btf) -> BtfExt:
        data = bytes(data)
        if len(data) < _HEADER.size:
            raise BtfError(f".BTF.ext is {len(data)} bytes, shorter than its header")
        e = btf.endian
        magic, version, _flags, hdr_len, func_off, func_len, line_off, line_len = \
            struct.unpack_from(e + _HEADER.format, data)
        if magic != BTF_MAGIC:
            raise BtfError(f".BTF.ext magic {magic:#x} is not {BTF_MAGIC:#x} in the byte "
                           "order of .BTF")
        if version != 1:
            raise BtfError(f".BTF.ext version {version} is not 1")
        if not _HEADER.size <= hdr_len <= len(data):
            raise BtfError(f".BTF.ext header length {hdr_len} is outside the section")
        core_off = core_len = 0
        if hdr_len >= _HEADER.size + _CORE_SIZE:
            core_off, core_len = struct.unpack_from(e + "II", data, _HEADER.size)
        body = data[hdr_len:]
        parsed = {what: _subsection(body, off, length, what, btf)
                  for what, off, length in (("func_info", func_off, func_len),
                                            ("line_info", line_off, line_len),
                                            ("core_relo", core_off, core_len))}
        strings = btf.strings
        func_info = {sec: [FuncInfo(*rec[:2]) for rec in recs]
                     for sec, recs in parsed["func_info"].items()}
        line_info = {sec: [LineInfo(*rec[:4],
                                    strings.get(rec[1], f".BTF.ext line_info in {sec!r}"),
                                    strings.get(rec[2], f".BTF.ext line_info in {sec!r}"))
                           for rec in recs]
                     for sec, recs in parsed["line_info"].items()}
        core_relos = {}
        for sec, recs in parsed["core_relo"].items():
            relos = []
            for index, (insn_off, type_id, access_off, kind) in enumerate(rec[:4]
                                                                          for rec in recs):
                if kind not in CoreReloKind._value2member_map_:
                    raise BtfError(f".BTF.ext CO-RE relocation in {sec!r} at insn "
                                   f"#{insn_off // 8} has unknown kind {kind}")
                relos.append(CoreRelo(insn_off, type_id, access_off, CoreReloKind(kind),
                                      strings.get(access_off, f"CO-RE access string in "
                                                              f"{sec!r}"), index))
            core_relos[sec] = relos
        return cls(func_info, line_info, core_relos)


def _subsection(body: bytes, off: int, length: int, what: str,
                btf: Btf) -> dict[str, list[tuple[int, ...]]]:
    """{section name: [records as u32 tuples]} of one .BTF.ext subsection."""
    if length == 0:
        return {}
    if off + length > len(body) or length < 4:
        raise BtfError(f".BTF.ext {what} (offset {off}, {length} bytes) runs past the "
                       "section")
    e = btf.endian
    data = body[off:off + length]
    rec_size = struct.unpack_from(e + "I", data)[0]
    if rec_size < _MIN_RECORD[what] or rec_size % 4:
        raise BtfError(f".BTF.ext {what} record size {rec_size} is below "
                       f"{_MIN_RECORD[what]} or not a multiple of 4")
    out: dict[str, list[tuple[int, ...]]] = {}
    pos = 4
    while pos < len(data):
        if pos + 8 > len(data):
            raise BtfError(f".BTF.ext {what}: a block header at {pos} is cut short")
        name_off, count = struct.unpack_from(e + "II", data, pos)
        section = btf.strings.get(name_off, f".BTF.ext {what} section name")
        pos += 8
        if count == 0 or pos + count * rec_size > len(data):
            raise BtfError(f".BTF.ext {what} for section {section!r}: {count} records of "
                           f"{rec_size} bytes do not fit")
        fmt = struct.Struct(f"{e}{rec_size // 4}I")
        out.setdefault(section, []).extend(fmt.iter_unpack(data[pos:pos + count * rec_size]))
        pos += count * rec_size
    return out
