"""Bob Jenkins' lookup3 hash exactly as include/linux/jhash.h computes it.

All arithmetic is on u32 with rotations; words are read in little-endian (x86-64, arm64)
byte order. ``jhash`` hashes bytes, ``jhash2`` hashes u32 words; the hash map uses
``jhash2`` when the key size is a multiple of 4 (``htab_map_hash``).
"""

from __future__ import annotations

import struct

JHASH_INITVAL = 0xDEADBEEF
_M = 0xFFFFFFFF


def _rol(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = (a - c) & _M; a ^= _rol(c, 4); c = (c + b) & _M          # noqa: E702
    b = (b - a) & _M; b ^= _rol(a, 6); a = (a + c) & _M          # noqa: E702
    c = (c - b) & _M; c ^= _rol(b, 8); b = (b + a) & _M          # noqa: E702
    a = (a - c) & _M; a ^= _rol(c, 16); c = (c + b) & _M         # noqa: E702
    b = (b - a) & _M; b ^= _rol(a, 19); a = (a + c) & _M         # noqa: E702
    c = (c - b) & _M; c ^= _rol(b, 4); b = (b + a) & _M          # noqa: E702
    return a, b, c


def _final(a: int, b: int, c: int) -> int:
    c ^= b; c = (c - _rol(b, 14)) & _M                           # noqa: E702
    a ^= c; a = (a - _rol(c, 11)) & _M                           # noqa: E702
    b ^= a; b = (b - _rol(a, 25)) & _M                           # noqa: E702
    c ^= b; c = (c - _rol(b, 16)) & _M                           # noqa: E702
    a ^= c; a = (a - _rol(c, 4)) & _M                            # noqa: E702
    b ^= a; b = (b - _rol(a, 14)) & _M                           # noqa: E702
    c ^= b; c = (c - _rol(b, 24)) & _M                           # noqa: E702
    return c


def jhash(key: bytes, initval: int = 0) -> int:
    """jhash(key, length, initval) over the bytes of ``key``."""
    length = len(key)
    a = b = c = (JHASH_INITVAL + length + initval) & _M
    pos = 0
    while length > 12:
        wa, wb, wc = struct.unpack_from("<III", key, pos)
        a, b, c = _mix((a + wa) & _M, (b + wb) & _M, (c + wc) & _M)
        pos += 12
        length -= 12
    if length == 0:
        return c
    # The last 1..12 bytes: byte j of the tail goes into word j // 4 at bit 8 * (j % 4).
    tail = key[pos:] + bytes(12 - length)
    wa, wb, wc = struct.unpack("<III", tail)
    return _final((a + wa) & _M, (b + wb) & _M, (c + wc) & _M)


def jhash2(words: tuple[int, ...] | list[int], initval: int = 0) -> int:
    """jhash2(k, length, initval) over u32 ``words``."""
    n = len(words)
    a = b = c = (JHASH_INITVAL + (n << 2) + initval) & _M
    i = 0
    while n > 3:
        a, b, c = _mix((a + words[i]) & _M, (b + words[i + 1]) & _M, (c + words[i + 2]) & _M)
        i += 3
        n -= 3
    if n == 0:
        return c
    if n == 3:
        c = (c + words[i + 2]) & _M
    if n >= 2:
        b = (b + words[i + 1]) & _M
    a = (a + words[i]) & _M
    return _final(a, b, c)


def htab_map_hash(key: bytes, hashrnd: int) -> int:
    """hashtab.c's htab_map_hash: jhash2 over u32 words when key_size % 4 == 0, else jhash."""
    if len(key) % 4 == 0:
        return jhash2(struct.unpack(f"<{len(key) // 4}I", key), hashrnd)
    return jhash(key, hashrnd)
