"""The bprintf formatting of bpf_trace_printk: kernel/bpf/helpers.c's bpf_bprintf_prepare
(which conversions a format may hold, how its arguments are copied) and lib/vsprintf.c's
bstr_printf (how they are printed).

Rules this module keeps:
- The format must end (NUL) within its size, hold no control character but white space
  (bytes from 0x80 on pass, as 6.18 measured here lets them), and have at most as many
  conversions as arguments; ``%%`` is a percent sign.
- A conversion is ``%`` [flags ``0+- ``] [width] then: ``d i u x X`` (``l`` or ``ll`` before
  them: 64 bits, else 32), ``c``, ``s`` (a string the argument points at), ``pks`` / ``pus``
  (the same), ``p`` alone or before ``K x s S`` or white space or punctuation (a pointer),
  ``pB``, or ``pI4 pi4 pI6 pi6`` (an address the argument points at). A string conversion
  must be followed by white space, punctuation or the end. Anything else is EINVAL.
- Strings and addresses are copied into a 512-byte argument buffer as the kernel copies
  them: a string longer than what is left is cut there, one that cannot be read is empty,
  an address that cannot be read is zeros; a full buffer is ENOSPC.
- Printing follows vsnprintf: flags and width as C's printf (``-`` left, ``0`` zeros for
  numbers only, ``+`` and space the sign of signed numbers), but the strings made while
  the arguments were copied (``%pks``, ``%pus``, ``%pB`` and the addresses) come out as
  they are, without the width; ``%px`` prints the value in hex, zero-padded to
  16 digits when no width is given, a program's pointer (a region number in the high half)
  with all 16 digits as a kernel address has them; ``%p`` and ``%pK`` print a hash of the
  value in the kernel, here the value itself with 16 digits (0 for NULL); ``%pI4``
  ``1.2.3.4``, ``%pi4`` ``001.002.003.004``, ``%pI6`` eight colon-separated groups of
  four hex digits, ``%pi6`` the same without colons. The emulated kernel has no symbols:
  ``%ps``, ``%pS`` and ``%pB`` print ``0x`` and the address, as the kernel does for one no
  symbol covers. The result is the whole text; the trace keeps its first
  MAX_BPRINTF_BUF - 1 bytes.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

MAX_BPRINTF_BUF = 1024  # the output buffer (include/linux/bpf.h)
MAX_BPRINTF_BIN_ARGS = 512  # the buffer arguments are copied into

_FLAGS = b"0+- "
# The kernel's ctype (lib/ctype.c), Latin-1 above 0x7F
_SPACE = frozenset(b" \t\n\v\f\r\xa0")
_PUNCT = frozenset(range(0x21, 0x30)) | frozenset(range(0x3A, 0x41)) | \
    frozenset(range(0x5B, 0x61)) | frozenset(range(0x7B, 0x7F)) | \
    frozenset(range(0xA1, 0xC0)) | {0xD7, 0xF7}
_ALNUM = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") | \
    (frozenset(range(0xC0, 0x100)) - {0xD7, 0xF7})


class BprintfError(Exception):
    """The kernel refuses the format: ``errno`` (EINVAL or ENOSPC) and why."""

    def __init__(self, err: int, why: str) -> None:
        super().__init__(why)
        self.errno = err


def _ends_string(char: int) -> bool:
    """What may follow a string conversion: the end, white space or punctuation."""
    return char == 0 or char in _SPACE or char in _PUNCT


def _pad(text: str, width: int, left: bool) -> str:
    """widen_string: spaces to ``width``, after the text when ``left``."""
    return text.ljust(width) if left else text.rjust(width)


def _address(value: int) -> str:
    """A value's hex digits as the kernel prints an address: a program's pointer (a region
    number above 32 bits) stands for a kernel address, all 16 digits; a smaller value as it
    is."""
    return f"{value:016x}" if value >> 32 else f"{value:x}"


def _pointer(digits: str, flags: bytes, width: int) -> str:
    """pointer_string: without a width, zero-padded to 16 digits; with one, padded to it as
    number() pads (zeros only with the 0 flag, on the right with -)."""
    if not width:
        return digits.rjust(16, "0")
    if b"-" in flags:
        return digits.ljust(width)
    return digits.rjust(width, "0" if b"0" in flags else " ")


def _ip(raw: bytes, kind: bytes) -> str:
    if kind == b"I4":
        return ".".join(str(b) for b in raw)
    if kind == b"i4":
        return ".".join(f"{b:03d}" for b in raw)
    groups = [raw[k:k + 2].hex() for k in range(0, 16, 2)]
    return ":".join(groups) if kind == b"I6" else "".join(groups)


def bprintf(fmt: bytes, args: list[int], read: Callable[[int, int], bytes | None],
            read_string: Callable[[int, int], bytes | None]) -> bytes:
    """The text bpf_trace_printk prints for ``fmt`` (the helper's whole buffer) and its
    arguments (u64 each); ``read(ptr, size)`` gives program memory (None: not readable),
    ``read_string(ptr, limit)`` a string there without its NUL, at most ``limit`` bytes
    (None: not readable). Raises BprintfError where bpf_bprintf_prepare fails."""
    end = fmt.find(b"\0")
    if end < 0:
        raise BprintfError(errno.EINVAL, "the format has no NUL within its size")
    fmt = fmt[:end] + b"\0"
    out: list[str] = []
    room = MAX_BPRINTF_BIN_ARGS  # what is left of the argument buffer
    spec = 0
    i = 0
    while i < end:
        char = fmt[i]
        if char < 0x20 and char not in _SPACE or char == 0x7F:  # bytes from 0x80 pass (6.18)
            raise BprintfError(errno.EINVAL, f"byte {char:#x} at {i} is a control character")
        if char != ord("%"):
            out.append(chr(char))
            i += 1
            continue
        if fmt[i + 1] == ord("%"):
            out.append("%")
            i += 2
            continue
        if spec >= len(args):
            raise BprintfError(errno.EINVAL, f"more conversions than the {len(args)} "
                                             "arguments")
        arg = args[spec]
        spec += 1
        i += 1
        flags = b""
        while fmt[i] in _FLAGS:
            flags += fmt[i:i + 1]
            i += 1
        width_start = i
        if 0x31 <= fmt[i] <= 0x39:
            i += 1
            while 0x30 <= fmt[i] <= 0x39:
                i += 1
        width = int(fmt[width_start:i] or b"0")
        left = b"-" in flags
        conv = fmt[i:i + 1]
        if conv == b"p":
            i, text, room = _pointer_conversion(fmt, i, arg, flags, width, room, read,
                                                read_string)
            out.append(text)
            while fmt[i] in _ALNUM:  # bstr_printf's pointer() takes them as its extension
                i += 1
            continue
        if conv == b"s":
            i += 1
            text, room = _copy_string(arg, room, fmt[i], read_string)
            out.append(_pad(text, width, left))
            continue
        if conv == b"c":
            if room == 0:
                raise BprintfError(errno.ENOSPC, "the arguments fill the 512-byte buffer")
            room -= 1
            out.append(_pad(chr(arg & 0xFF), width, left))
            i += 1
            continue
        bits = 32
        for _ in range(2):
            if fmt[i] == ord("l"):
                bits = 64
                i += 1
        conv = fmt[i:i + 1]
        if conv not in (b"d", b"i", b"u", b"x", b"X"):
            raise BprintfError(errno.EINVAL, f"%{fmt[width_start - len(flags):i + 1].decode()}"
                               " is not a conversion bpf_trace_printk takes (d i u x X c s p, "
                               "l or ll before d i u x X, flags 0+- and a width)")
        room = _take(room, bits // 8)
        value = arg & ((1 << bits) - 1)
        if conv in (b"d", b"i") and value >> (bits - 1):
            value -= 1 << bits
        if conv not in (b"d", b"i"):  # number(): a sign (+ or space) for signed ones only
            flags = flags.replace(b"+", b"").replace(b" ", b"")
        py_conv = {b"i": "d", b"u": "d"}.get(conv, conv.decode())
        out.append(f"%{flags.decode()}{width or ''}{py_conv}" % value)
        i += 1
    return "".join(out).encode("latin-1")


def _pointer_conversion(fmt: bytes, i: int, arg: int, flags: bytes, width: int, room: int,
                        read: Callable[[int, int], bytes | None],
                        read_string: Callable[[int, int], bytes | None]
                        ) -> tuple[int, str, int]:
    """A ``%p`` conversion at ``fmt[i]`` (its flags and width parsed): (where the format
    goes on, the text, what is left of the argument buffer)."""
    ext = fmt[i + 1:i + 2]
    if fmt[i + 1:i + 3] in (b"ks", b"us"):
        # a user string: program memory is the kernel's, which a user copy faults on
        text, room = _copy_string(arg, room, fmt[i + 3], read_string if ext == b"k"
                                  else lambda ptr, limit: None)
        return i + 3, text, room  # bstr_printf copies a string done before as it is
    named = ext in (b"K", b"x", b"s", b"S")
    if named or fmt[i + 1] == 0 or fmt[i + 1] in _SPACE or fmt[i + 1] in _PUNCT:
        room = _take(room, 8)
        if ext in (b"s", b"S"):  # no symbol covers it
            text = _pad("0x" + _address(arg), width, b"-" in flags)
        else:  # %px the value; %p and %pK its hash, which has the digits of one
            text = _pointer(_address(arg) if ext == b"x" else f"{arg:016x}" if arg else "0",
                            flags, width)
        return i + (2 if named else 1), text, room
    if ext == b"B":
        text = "0x" + _address(arg)
        return i + 2, text, room - len(text) - 1
    kind = fmt[i + 1:i + 3]
    if kind not in (b"I4", b"i4", b"I6", b"i6"):
        raise BprintfError(errno.EINVAL, f"%p{kind.decode(errors='replace')}: of the pointer "
                           "formats, only %pI4 %pi4 %pI6 %pi6 %pks %pus %pB %px %pK %ps %pS "
                           "and plain %p are taken")
    size = 4 if kind[1:] == b"4" else 16
    if room < size:
        raise BprintfError(errno.ENOSPC, "the arguments fill the 512-byte buffer")
    text = _ip(read(arg, size) or bytes(size), kind)
    return i + 3, text, room - len(text) - 1


def _take(room: int, size: int) -> int:
    """An integer's slot in the argument buffer: 4-byte aligned, ENOSPC when it is full."""
    used = MAX_BPRINTF_BIN_ARGS - room
    used += -used % 4
    if MAX_BPRINTF_BIN_ARGS - used < size:
        raise BprintfError(errno.ENOSPC, "the arguments fill the 512-byte buffer")
    return MAX_BPRINTF_BIN_ARGS - used - size


def _copy_string(arg: int, room: int, after: int,
                 read_string: Callable[[int, int], bytes | None]) -> tuple[str, int]:
    """bpf_trace_copy_string into what is left of the argument buffer: (the text, what is
    left then)."""
    if not _ends_string(after):
        raise BprintfError(errno.EINVAL, "a string conversion must be followed by white "
                                         "space, punctuation or the end of the format")
    if room == 0:
        raise BprintfError(errno.ENOSPC, "the arguments fill the 512-byte buffer")
    text = read_string(arg, room - 1)
    if text is None:  # a fault copies an empty string
        return "", room - 1
    return text.decode("latin-1"), room - len(text) - 1
