"""``bpftool btf dump ... format raw``, rewritten over pybpf.btf records for cross-checks."""

from __future__ import annotations

from pybpf.btf import (
    Array,
    Btf,
    Datasec,
    DeclTag,
    Enum,
    Enum64,
    Float,
    Func,
    FuncProto,
    Fwd,
    Int,
    Kind,
    Ptr,
    Struct,
    TypeTag,
    Var,
)

_INT_ENCODING = {0: "(none)", 1: "SIGNED", 2: "CHAR", 4: "BOOL"}
_LINKAGE = {0: "static", 1: "global", 2: "extern"}


def _name(text: str) -> str:
    return f"'{text or '(anon)'}'"


def raw_lines(btf: Btf, type_id: int) -> list[str]:
    t = btf[type_id]
    head = f"[{type_id}] {t.kind.name} {_name(t.name)}"
    if isinstance(t, Int):
        return [f"{head} size={t.size} bits_offset={t.bits_offset} nr_bits={t.nr_bits} "
                f"encoding={_INT_ENCODING.get(t.encoding, t.encoding)}"]
    if isinstance(t, Array):
        return [f"{head} type_id={t.type_id} index_type_id={t.index_type_id} "
                f"nr_elems={t.nelems}"]
    if isinstance(t, Struct):
        lines = [f"{head} size={t.size} vlen={len(t.members)}"]
        for m in t.members:
            line = f"\t{_name(m.name)} type_id={m.type_id} bits_offset={m.bit_offset}"
            if m.bitfield_size:
                line += f" bitfield_size={m.bitfield_size}"
            lines.append(line)
        return lines
    if isinstance(t, Enum):
        sign = "SIGNED" if t.signed else "UNSIGNED"
        lines = [f"{head} encoding={sign} size={t.size} vlen={len(t.values)}"]
        suffix = ("LL" if t.signed else "ULL") if isinstance(t, Enum64) else ""
        lines += [f"\t{_name(v.name)} val={v.value}{suffix}" for v in t.values]
        return lines
    if isinstance(t, Fwd):
        return [f"{head} fwd_kind={'union' if t.union else 'struct'}"]
    if isinstance(t, Func):
        return [f"{head} type_id={t.type_id} linkage={_LINKAGE[t.linkage]}"]
    if isinstance(t, FuncProto):
        lines = [f"{head} ret_type_id={t.return_type_id} vlen={len(t.params)}"]
        lines += [f"\t{_name(p.name)} type_id={p.type_id}" for p in t.params]
        return lines
    if isinstance(t, Var):
        return [f"{head} type_id={t.type_id}, linkage={_LINKAGE[t.linkage]}"]
    if isinstance(t, Datasec):
        lines = [f"{head} size={t.size} vlen={len(t.vars)}"]
        lines += [f"\ttype_id={v.type_id} offset={v.offset} size={v.size} "
                  f"({btf[v.type_id].kind.name} {_name(btf[v.type_id].name)})" for v in t.vars]
        return lines
    if isinstance(t, Float):
        return [f"{head} size={t.size}"]
    if isinstance(t, DeclTag):
        return [f"{head} type_id={t.type_id} component_idx={t.component_idx}"]
    if isinstance(t, TypeTag):
        return [f"{head} type_id={t.type_id}"]
    assert isinstance(t, Ptr) or t.kind in (Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST,
                                            Kind.RESTRICT), t
    return [f"{head} type_id={t.type_id}"]  # type: ignore[attr-defined]


def raw_dump(btf: Btf) -> list[str]:
    return [line for type_id in range(1, len(btf)) for line in raw_lines(btf, type_id)]
