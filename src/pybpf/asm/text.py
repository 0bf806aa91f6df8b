"""Text assembler: bpftool / kernel-disassembler syntax back to instructions.

Accepts what ``disasm.format_insn`` prints (with or without the ``12: (b7)`` prefix), plus:
labels (``loop:`` on a line of its own), jump targets by label (``goto loop``,
``if r1 < 10 goto loop``) or as ``+3`` / ``pc+3``, helpers by name (``call map_lookup_elem``),
maps by name (``r1 = map[counts]``) and kfuncs by name (``call kernel-function
bpf_sk_skb_set_redirect_cpu``), both resolved at load, comments after ``//`` or ``;``.
Immediates are decimal or hex; ``rN = <hex>`` and ``rN = <n> ll`` are the 64-bit ``lddw``
(as the disassembler prints it), ``rN = <decimal>`` is ``mov64``.
"""

from __future__ import annotations

import re

from . import builder as b
from .builder import AssemblyError, Item
from .disasm import ALU_OP_TEXT, ATOMIC_OP_TEXT, JMP_OP_TEXT, helper_name
from .opcodes import AluOp, AtomicOp, Class, JmpOp, Reg, Size

_SIZES = {"8": Size.B, "16": Size.H, "32": Size.W, "64": Size.DW}
_NUM = r"[+-]?(?:0x[0-9a-fA-F]+|\d+)"
_REG = r"([rw])(\d+)"
_MEM = rf"\(u(8|16|32|64) \*\)\(r(\d+)\s*({_NUM})?\)"
_TARGET = r"(?:pc)?([+-]\d+|[A-Za-z_]\w*)"


def _num(text: str) -> int:
    return int(text.replace(" ", ""), 0)


def _imm32(text: str) -> int:
    """A 32-bit immediate: values 2**31..2**32-1 (as 0x%x prints them) wrap to negative."""
    value = _num(text)
    return value - (1 << 32) if (1 << 31) <= value < (1 << 32) else value


def _reg(text: str) -> Reg:
    n = int(text)
    if n > 10:
        raise AssemblyError(f"r{n}: only r0-r10 exist")
    return Reg(n)


def _same(what: str, *texts: str) -> str:
    """The one value ``texts`` all spell: the disassembler prints some operands twice (a
    register both read and written, a width in the name and in the type); text that spells
    them differently describes no instruction."""
    if len(set(texts)) > 1:
        raise AssemblyError(f"{what} must be the same in each place ({', '.join(texts)}): "
                            "the instruction has only one")
    return texts[0]


def _target(text: str) -> str | int:
    return int(text) if text[0] in "+-" else text


def _alu(width: str, op_text: str, dst: str, operand: str, operand_reg: str | None,
         operand_width: str | None) -> Item:
    op, signed = _ALU_BY_TEXT[op_text]
    if operand_reg is not None:
        _same("the register width (r: 64 bits, w: 32 bits)", width, operand_width)
    bits = "64" if width == "r" else "32"
    name = f"{'s' if signed else ''}{op.name.lower()}{bits}"
    value = _reg(operand_reg) if operand_reg is not None else _imm32(operand)
    return b.MNEMONICS[name](_reg(dst), value)


_ALU_BY_TEXT = {t: (op, False) for op, t in ALU_OP_TEXT.items()}
_ALU_BY_TEXT.update({"s/=": (AluOp.DIV, True), "s%=": (AluOp.MOD, True)})
_ALU_OPS = "|".join(re.escape(t) for t in sorted(_ALU_BY_TEXT, key=len, reverse=True))
_JMP_OPS = "|".join(re.escape(t) for t in sorted(JMP_OP_TEXT.values(), key=len, reverse=True))
_ATOMIC_OPS = "|".join(re.escape(t) for t in ATOMIC_OP_TEXT.values())
_JMP_BY_TEXT = {t: op for op, t in JMP_OP_TEXT.items()}
_ATOMIC_BY_TEXT = {t: op for op, t in ATOMIC_OP_TEXT.items()}

# (pattern, builder(match) -> Item); the first matching pattern wins
_FORMS: list[tuple[re.Pattern, object]] = []


def _form(pattern: str):
    def register(make):
        _FORMS.append((re.compile(pattern + r"$"), make))
        return make
    return register


@_form(r"exit")
def _exit(m):
    return b.exit_()


@_form(rf"{_REG} = -{_REG}")
def _neg(m):
    reg = _same("neg's register", m[1] + m[2], m[3] + m[4])
    return (b.neg64 if reg[0] == "r" else b.neg32)(_reg(reg[1:]))


@_form(r"r(\d+) = (le|be|bswap)(16|32|64) r(\d+)")
def _end(m):
    reg = _same("the swapped register", f"r{m[1]}", f"r{m[4]}")
    return {"le": b.le, "be": b.be, "bswap": b.bswap}[m[2]](_reg(reg[1:]), int(m[3]))


@_form(rf"{_REG} = \(s(8|16|32)\){_REG}")
def _movsx(m):
    _same("the register width (r: 64 bits, w: 32 bits)", m[1], m[4])
    return (b.movsx64 if m[1] == "r" else b.movsx32)(_reg(m[2]), _reg(m[5]), int(m[3]))


@_form(rf"r(\d+) = \*\(([us])(8|16|32|64) \*\)\(r(\d+)\s*({_NUM})?\)")
def _ldx(m):
    make = b.ldxs if m[2] == "s" else b.ldx
    return make(_SIZES[m[3]], _reg(m[1]), _reg(m[4]), _num(m[5] or "0"))


@_form(rf"\*{_MEM} = (?:r(\d+)|({_NUM}))")
def _store(m):
    size, dst, off = _SIZES[m[1]], _reg(m[2]), _num(m[3] or "0")
    if m[4] is not None:
        return b.stx(size, dst, off, _reg(m[4]))
    return b.st(size, dst, off, _imm32(m[5]))


@_form(rf"r0 = \*\(u(8|16|32) \*\)skb\[({_NUM})\]")
def _ld_abs(m):
    return b.ld_abs(_SIZES[m[1]], _num(m[2]))


@_form(rf"r0 = \*\(u(8|16|32) \*\)skb\[r(\d+) \+ ({_NUM})\]")
def _ld_ind(m):
    return b.ld_ind(_SIZES[m[1]], _reg(m[2]), _num(m[3]))


@_form(rf"lock \*{_MEM} ({_ATOMIC_OPS}) r(\d+)")
def _atomic_rmw(m):
    return b.atomic(_SIZES[m[1]], _ATOMIC_BY_TEXT[m[4]], _reg(m[2]), _num(m[3] or "0"),
                    _reg(m[5]))


def _atomic_size(suffix: str | None, bits: str) -> Size:
    """atomic64_* names a u64 operand, atomic_* a u32 one (as the disassembler prints)."""
    named = "64" if suffix else "32"
    if bits != named:
        raise AssemblyError(f"atomic{suffix or ''}_ takes a (u{named} *) operand, not "
                            f"(u{bits} *)")
    return _SIZES[bits]


@_form(rf"r(\d+) = atomic(64)?_(fetch_add|fetch_and|fetch_or|fetch_xor|xchg)\({_MEM}, "
       r"r(\d+)\)")
def _atomic_fetch(m):
    op = AtomicOp.XCHG if m[3] == "xchg" else AtomicOp[m[3][6:].upper()] | 0x01
    src = _same("the register that gives the operand and gets the old value", f"r{m[1]}",
                f"r{m[7]}")
    return b.atomic(_atomic_size(m[2], m[4]), op, _reg(m[5]), _num(m[6] or "0"), _reg(src[1:]))


@_form(rf"r0 = atomic(64)?_cmpxchg\({_MEM}, r0, r(\d+)\)")
def _cmpxchg(m):
    return b.atomic(_atomic_size(m[1], m[2]), AtomicOp.CMPXCHG, _reg(m[3]), _num(m[4] or "0"),
                    _reg(m[5]))


@_form(rf"r(\d+) = load_acquire\({_MEM}\)")
def _load_acquire(m):
    return b.load_acquire(_SIZES[m[2]], _reg(m[1]), _reg(m[3]), _num(m[4] or "0"))


@_form(rf"store_release\({_MEM}, r(\d+)\)")
def _store_release(m):
    return b.store_release(_SIZES[m[1]], _reg(m[2]), _num(m[3] or "0"), _reg(m[4]))


@_form(r"r(\d+) = map\[fd:(\d+)\](?:\[0\]\+(\d+))?")
def _map_fd(m):
    if m[3] is not None:
        return b.ld_map_value(_reg(m[1]), int(m[2]), int(m[3]))
    return b.ld_map_fd(_reg(m[1]), int(m[2]))


@_form(r"r(\d+) = map\[idx:(\d+)\](?:\+(\d+))?")
def _map_idx(m):
    if m[3] is not None:
        return b.ld_map_idx_value(_reg(m[1]), int(m[2]), int(m[3]))
    return b.ld_map_idx(_reg(m[1]), int(m[2]))


@_form(r"r(\d+) = map\[([A-Za-z_]\w*)\](?:\[0\]\+(\d+))?")
def _map_name(m):
    if m[3] is not None:
        return b.ld_map_value(_reg(m[1]), m[2], int(m[3]))
    return b.ld_map_fd(_reg(m[1]), m[2])


@_form(r"r(\d+) = btf_id\[(\d+)\](?:\[btf_fd:(\d+)\])?")
def _btf_id(m):
    return b.ld_btf_id(_reg(m[1]), int(m[2]), int(m[3] or 0))


@_form(rf"r(\d+) = func\[{_TARGET}\]")
def _func(m):
    return b.ld_func(_reg(m[1]), _target(m[2]))


@_form(rf"r(\d+) = (0x[0-9a-fA-F]+|{_NUM} ll)")
def _lddw(m):
    return b.lddw(_reg(m[1]), _num(m[2].removesuffix(" ll")))


@_form(rf"{_REG} ({_ALU_OPS}) (?:([rw])(\d+)|({_NUM}))")
def _alu_form(m):
    return _alu(m[1], m[3], m[2], m[6], m[5], m[4])


@_form(rf"if {_REG} ({_JMP_OPS}) (?:([rw])(\d+)|({_NUM})) goto {_TARGET}")
def _cond(m):
    op: JmpOp = _JMP_BY_TEXT[m[3]]
    cls = Class.JMP if m[1] == "r" else Class.JMP32
    name = op.name.lower() + ("" if cls is Class.JMP else "32")
    if m[5] is not None:
        _same("the register width (r: 64 bits, w: 32 bits)", m[1], m[4])
    operand = _reg(m[5]) if m[5] is not None else _imm32(m[6])
    return b.MNEMONICS[name](_reg(m[2]), operand, _target(m[7]))


@_form(rf"(goto|gotol|may_goto) {_TARGET}")
def _goto(m):
    return {"goto": b.ja, "gotol": b.gotol, "may_goto": b.may_goto}[m[1]](_target(m[2]))


@_form(rf"call pc({_NUM})")
def _call_local(m):
    return b.call_local(_num(m[1]))


@_form(r"call kernel-function(?:#(-?\d+)| ([A-Za-z_]\w*))(?:@(-?\d+))?")
def _call_kfunc(m):
    return b.call_kfunc(int(m[1]) if m[1] is not None else m[2], int(m[3] or 0))


@_form(r"call (?:([A-Za-z_]\w*)#)?(-?\d+)")
def _call_id(m):
    func_id = int(m[2])
    if m[1] is not None:
        _same("the helper", m[1], helper_name(func_id))
    return b.call(func_id)


@_form(r"call ([A-Za-z_]\w*)")
def _call_name(m):
    return b.call(m[1])


@_form(r"call_local ([A-Za-z_]\w*)")
def _call_label(m):
    return b.call_local(m[1])


_PREFIX = re.compile(r"^\s*(?:\d+:\s*)?(?:\(([0-9a-fA-F]{2})\)\s*)?")
_LABEL = re.compile(r"^([A-Za-z_]\w*):$")


def _opcode(item: Item) -> int:
    return (item.insn if isinstance(item, b.Ref) else item).opcode


def parse(source: str) -> list[Item]:
    """Items (instructions, refs, labels) from assembly text, one statement a line."""
    items: list[Item] = []
    for lineno, raw in enumerate(source.splitlines(), 1):
        line = re.split(r"//|;", raw, maxsplit=1)[0].strip()
        prefix = _PREFIX.match(line)
        line = line[prefix.end():].strip()
        if not line:
            continue
        label = _LABEL.match(line)
        if label:
            items.append(b.label(label[1]))
            continue
        line = re.sub(r"\s+", " ", line)
        for pattern, make in _FORMS:
            m = pattern.match(line)
            if m:
                try:
                    item = make(m)
                    if prefix[1] is not None:  # the opcode the disassembler printed
                        _same("the opcode", f"{int(prefix[1], 16):#04x}",
                              f"{_opcode(item):#04x}")
                    items.append(item)
                except (AssemblyError, KeyError, ValueError) as exc:
                    raise AssemblyError(f"line {lineno}: {raw.strip()!r}: {exc}") from None
                break
        else:
            raise AssemblyError(f"line {lineno}: cannot parse {raw.strip()!r}")
    return items


def assemble_text(source: str) -> b.Assembly:
    """Parse and assemble text in one step."""
    return b.assemble(parse(source))


__all__ = ["assemble_text", "parse"]
