"""String tables (ELF .strtab/.shstrtab, the BTF string section): NUL-terminated strings
addressed by byte offset."""

from __future__ import annotations


def string_at(table: bytes | bytearray, offset: int) -> str:
    """The UTF-8 string that starts at ``offset``; ValueError says why there is none."""
    end = table.find(b"\0", offset) if 0 <= offset < len(table) else -1
    if end < 0:
        raise ValueError(f"string offset {offset} is outside the string table "
                         f"({len(table)} bytes) or has no terminating NUL")
    try:
        return bytes(table[offset:end]).decode()
    except UnicodeDecodeError:
        raise ValueError(f"the string at offset {offset} is not UTF-8") from None
