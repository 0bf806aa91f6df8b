"""The calls of the System-level fuzz (fuzz.py runs them): seeded random calls over the whole
public contract, bad inputs included, as plain data.

Rules the calls keep:
- A call is plain data (``Call``): fds are symbolic (``Fd``: a map, program or link the
  sequence made, kept per backend since fd numbers and ids differ; or a host fd both backends
  see alike: /dev/null, a socket, a closed number), ids are ``IdOf`` a handle, pin paths are
  ``Pin`` names under a prefix of this run, instructions that name a map are ``Insns``.
- Every call has an input class (``Call.label``): the command, what its target is and which
  kind of each argument was drawn; ``Call.compare`` says what of a success both backends
  must give alike.
- Nothing the fuzz does reaches the host's network or other processes' objects: link and
  attach targets that are ifindexes are numbers no device has, ids are the sequence's own or
  ones no object has, pins are names under this run's prefix, removed at the end.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from ...uapi import (
    AttachType,
    MapFlags,
    MapType,
    ProgType,
    map_traits,
    syscall_value_size,
)

# -- symbolic arguments ----------------------------------------------------------------------


@dataclass(frozen=True)
class Fd:
    """An fd: ``kind`` "map"/"prog"/"link" with a handle (per backend), or a host fd both
    backends share: "devnull", "socket", "closed"."""

    kind: str
    handle: int = 0


@dataclass(frozen=True)
class IdOf:
    """The id of map or program handle ``fd`` (0 if it is not open)."""

    fd: Fd


@dataclass(frozen=True)
class Pin:
    """A pin path: ``template`` with ``{p}`` for this run's name prefix (given as bytes when
    ``as_bytes``)."""

    template: str
    as_bytes: bool = False


@dataclass(frozen=True)
class FdBytes:
    """A 4-byte value holding an fd (map-in-map and prog-array updates)."""

    fd: Fd


@dataclass(frozen=True)
class Insns:
    """Instructions: ``head`` + ``lddw r1, map fd`` + ``tail``, the map a symbolic fd."""

    head: bytes
    map_fd: Fd
    tail: bytes


@dataclass(frozen=True)
class Call:
    """One System call: ``command`` with ``args``/``kwargs`` (symbolic), its input class
    ``label``; ``creates`` names the handle its new fd becomes; ``compare`` says what of a
    success is compared ("ok": only that it succeeded; "bytes", "info", "prog_info",
    "batch", "sorted_batch", "test_run", "ok_or_enoent")."""

    command: str
    args: tuple
    kwargs: tuple = ()
    label: str = ""
    creates: Fd | None = None
    compare: str = "ok"


# -- instructions ----------------------------------------------------------------------------

def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


EXIT = _insn(0x95)


def _ret(value: int) -> bytes:
    return _insn(0xB7, 0, imm=value) + EXIT  # mov64 r0, value; exit


def _lddw_map(fd: int) -> bytes:
    return _insn(0x18, 1, 1, imm=fd) + _insn(0)


def _btf(types: bytes, strings: bytes, magic: int = 0xEB9F, version: int = 1) -> bytes:
    """A BTF blob: header (bpf_btf_header), types, strings."""
    return struct.pack("<HBBIIIII", magic, version, 0, 24, 0, len(types), len(types),
                       len(strings)) + types + strings


_BTF_INT = struct.pack("<IIII", 1, 1 << 24, 4, 32)  # [1] int, 4 bytes, 32 bits
_BTF_STRINGS = b"\0int\0"

# -- the generator ---------------------------------------------------------------------------

_U64_EDGES = {"2**32": 1 << 32, "2**64": 1 << 64, "2**64+1": (1 << 64) + 1, "neg": -8,
              "-1": -1}
_NOT_INTS = {"bool": True, "float": 1.0, "none": None, "str": "1"}
_FD_LITERALS = {"-1": -1, "huge": 1 << 40, "bool": True, "float": 3.0, "none": None,
                "str": "3", "2**31": 1 << 31}
# Map types the pool makes, with (key_size, value_size) that create them.
_POOL_TYPES = {
    MapType.HASH: (4, 8), MapType.ARRAY: (4, 8), MapType.PERCPU_HASH: (4, 8),
    MapType.PERCPU_ARRAY: (4, 8), MapType.LRU_HASH: (4, 8), MapType.LRU_PERCPU_HASH: (8, 4),
    MapType.LPM_TRIE: (8, 4), MapType.QUEUE: (0, 4), MapType.STACK: (0, 4),
    MapType.BLOOM_FILTER: (0, 4), MapType.PROG_ARRAY: (4, 4), MapType.ARRAY_OF_MAPS: (4, 4),
    MapType.HASH_OF_MAPS: (4, 4), MapType.DEVMAP: (4, 4), MapType.DEVMAP_HASH: (4, 4),
    MapType.CPUMAP: (4, 4), MapType.SOCKMAP: (4, 4), MapType.SOCKHASH: (4, 4),
    MapType.RINGBUF: (0, 0), MapType.PERF_EVENT_ARRAY: (4, 4),
}
# Program types with an attach type and a return value that load as "return N".
_POOL_PROGS = {
    ProgType.SOCKET_FILTER: (0, 0), ProgType.XDP: (0, 1), ProgType.SCHED_CLS: (0, 0),
    ProgType.RAW_TRACEPOINT: (0, 0), ProgType.TRACEPOINT: (0, 0), ProgType.SK_SKB: (0, 1),
    ProgType.SK_MSG: (0, 1), ProgType.CGROUP_SKB: (0, 1), ProgType.SYSCALL: (0, 0),
    ProgType.KPROBE: (0, 0),
}
# Never loaded: a flow dissector attaches to the host's network namespace.
_UNSAFE_PROG_TYPES = frozenset({ProgType.FLOW_DISSECTOR})
# Attach types whose target is an ifindex or the current netns: the fuzz gives them only
# targets no device has, and never through PROG_ATTACH/DETACH (tcx reads target_ifindex).
_IFINDEX_ATTACH = frozenset({AttachType.XDP, AttachType.TCX_INGRESS, AttachType.TCX_EGRESS,
                             AttachType.NETKIT_PRIMARY, AttachType.NETKIT_PEER,
                             AttachType.FLOW_DISSECTOR, AttachType.SK_LOOKUP,
                             AttachType.NETFILTER})
_NO_DEVICE = (0, 99_999, (1 << 31) - 1, (1 << 32) - 1)
# Left to the sockmap work (psock programs are being written): attach/detach on sockmaps.
SOCKMAP_TYPES = frozenset({MapType.SOCKMAP, MapType.SOCKHASH})


@dataclass
class _MapModel:
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int

    @property
    def ordered(self) -> bool:
        return not (map_traits(self.map_type).htab_batch and not self.flags & MapFlags.ZERO_SEED)


class FuzzGen:
    """Random calls for one sequence; keeps what it meant to create, to aim some calls."""

    def __init__(self, seed: int, index: int, ncpu: int, tracefs: bool = True) -> None:
        self.rng = random.Random(f"pybpf-fuzz/{seed}/{index}")
        self.ncpu = ncpu
        # Tracepoints by name only where tracefs lists them (the emulated backend reads it).
        self.tracefs = tracefs
        self.maps: dict[int, _MapModel] = {}
        self.progs: dict[int, int] = {}
        self.links: list[int] = []
        self.btfs: list[int] = []
        self.pins: list[str] = []
        self._next = 0

    # choices
    def pick(self, weighted: dict):
        keys = list(weighted)
        return keys[self.rng.choices(range(len(keys)), weights=list(weighted.values()))[0]]

    def choose(self, table: dict) -> tuple[str, object]:
        name = self.rng.choice(list(table))
        return name, table[name]

    def handle(self) -> int:
        self._next += 1
        return self._next

    def fd(self, want: str = "map") -> tuple[str, object, _MapModel | None]:
        """(tag, fd, the map's model if it is one): mostly a ``want`` handle."""
        r = self.rng.random()
        if want == "map" and self.maps and r < 0.8:
            h = self.rng.choice(list(self.maps))
            return MapType(self.maps[h].map_type).name.lower(), Fd("map", h), self.maps[h]
        if want == "prog" and self.progs and r < 0.8:
            h = self.rng.choice(list(self.progs))
            return "prog:" + ProgType(self.progs[h]).name.lower(), Fd("prog", h), None
        r = self.rng.random()
        if r < 0.15 and self.progs and want != "prog":
            return "a prog", Fd("prog", self.rng.choice(list(self.progs))), None
        if r < 0.3 and self.maps and want != "map":
            return "a map", Fd("map", self.rng.choice(list(self.maps))), None
        if r < 0.4 and self.links:
            return "link", Fd("link", self.rng.choice(self.links)), None
        if r < 0.7:
            kind = self.rng.choice(["devnull", "socket", "closed"])
            return kind, Fd(kind), None
        tag, value = self.choose(_FD_LITERALS)
        return tag, value, None

    def u64_flags(self, valid: dict[str, int]) -> tuple[str, object]:
        r = self.rng.random()
        if r < 0.6:
            return self.choose(valid)
        if r < 0.8:
            return self.choose(_U64_EDGES)
        if r < 0.9:
            bit = self.rng.randrange(64)
            return f"bit{bit}", 1 << bit
        return self.choose(_NOT_INTS)

    def blob(self, size: int | None, what: str) -> tuple[str, object]:
        """A key or value: right-sized mostly, else short, long, empty, None or not bytes."""
        r = self.rng.random()
        if size is not None and r < 0.65:
            data = self.rng.randbytes(size) if self.rng.random() < 0.7 else \
                bytes([self.rng.randrange(4)]) + bytes(max(size - 1, 0))
            data = data[:size]
            if self.rng.random() < 0.05:
                return f"{what}:bytearray", bytearray(data)
            return f"{what}:right", data
        tag, value = self.choose({
            "short": self.rng.randbytes(max((size or 4) - 1, 0)),
            "long": self.rng.randbytes((size or 4) + 1), "empty": b"", "none": None,
            "str": "abcd", "int": 4, "list": [1, 2],
            "memoryview": memoryview(self.rng.randbytes(size or 4))})
        return f"{what}:{tag}", value

    # sequences
    def sequence(self, calls: int) -> list[Call]:
        out = [self.pool_map() for _ in range(self.rng.randrange(2, 5))]
        out += [self.pool_prog() for _ in range(self.rng.randrange(0, 3))]
        commands = [(self.element_op, 30), (self.map_create, 10), (self.batch_op, 10),
                    (self.misc_map_op, 10), (self.id_op, 6), (self.pin_op, 8),
                    (self.prog_load, 8), (self.test_run, 6), (self.attach_op, 5),
                    (self.close, 3), (self.pool_map, 4), (self.btf_load, 2)]
        fns = [fn for fn, _ in commands]
        weights = [w for _, w in commands]
        while len(out) < calls:
            out.append(self.rng.choices(fns, weights)[0]())
        return out

    def pool_map(self) -> Call:
        map_type = self.rng.choice(list(_POOL_TYPES))
        key_size, value_size = _POOL_TYPES[map_type]
        max_entries = self.rng.choice([1, 2, 4, 8])
        flags = MapFlags.ZERO_SEED if map_traits(map_type).htab_batch else 0
        if map_type in (MapType.LPM_TRIE, MapType.DEVMAP_HASH) or (
                map_type == MapType.HASH and self.rng.random() < 0.3):
            flags |= MapFlags.NO_PREALLOC
        if map_type == MapType.RINGBUF:
            max_entries = 4096
        if map_type == MapType.CPUMAP:
            max_entries = min(max_entries, self.ncpu)
        kwargs: tuple = ()
        if map_traits(map_type).map_in_map:
            inner = [h for h, m in self.maps.items() if m.map_type == MapType.ARRAY]
            kwargs = (("inner_map_fd", Fd("map", inner[0]) if inner else Fd("closed")),)
        if self.rng.random() < 0.2:
            flags |= self.rng.choice([MapFlags.RDONLY, MapFlags.WRONLY, MapFlags.RDONLY_PROG])
        h = self.handle()
        self.maps[h] = _MapModel(map_type, key_size, value_size, max_entries, flags)
        return Call("map_create", (map_type, key_size, value_size, max_entries, flags),
                    kwargs, f"map_create[pool {MapType(map_type).name.lower()}]",
                    creates=Fd("map", h))

    def pool_prog(self) -> Call:
        prog_type = self.rng.choice(list(_POOL_PROGS))
        attach, ret = _POOL_PROGS[prog_type]
        h = self.handle()
        self.progs[h] = prog_type
        flags = 1 << 4 if prog_type == ProgType.SYSCALL else 0  # BPF_F_SLEEPABLE
        return Call("prog_load", (prog_type, _ret(ret), "GPL", attach, b"fz", flags), (),
                    f"prog_load[pool {ProgType(prog_type).name.lower()}]",
                    creates=Fd("prog", h))

    def element_op(self) -> Call:
        tag, fd, model = self.fd("map")
        key_size = model.key_size if model else 4
        value_size = syscall_value_size(model.map_type, model.value_size, self.ncpu) \
            if model else 8
        keyless = model is not None and map_traits(model.map_type).keyless
        if keyless and self.rng.random() < 0.6:
            ktag, key = "key:none", None
        else:
            ktag, key = self.blob(key_size, "key")
        command = self.pick({"map_update_elem": 4, "map_lookup_elem": 3, "map_delete_elem": 2,
                             "map_lookup_and_delete_elem": 1, "map_get_next_key": 1})
        fd_values = model is not None and map_traits(model.map_type).fd_values
        compare = "ok" if (model is None or fd_values or map_traits(model.map_type).sockets
                           ) else "bytes"
        if command == "map_update_elem":
            if fd_values and self.rng.random() < 0.7:
                vtag, value = "value:fd", FdBytes(self.fd("prog" if model.map_type ==
                                                          MapType.PROG_ARRAY else "map")[1]
                                                  if self.rng.random() < 0.8 else Fd("closed"))
            elif model is not None and map_traits(model.map_type).sockets \
                    and self.rng.random() < 0.7:
                vtag, value = "value:sockfd", FdBytes(Fd("socket"))
            else:
                vtag, value = self.blob(value_size, "value")
            ftag, flags = self.u64_flags({"any": 0, "noexist": 1, "exist": 2, "lock": 4})
            return Call(command, (fd, key, value, flags), (),
                        f"{command}[{tag}]({ktag},{vtag},flags:{ftag})")
        if command in ("map_lookup_elem", "map_lookup_and_delete_elem"):
            ftag, flags = self.u64_flags({"0": 0, "lock": 4})
            return Call(command, (fd, key, flags), (), f"{command}[{tag}]({ktag},flags:{ftag})",
                        compare=compare)
        if command == "map_get_next_key":
            if model is not None and not model.ordered:
                compare = "ok"
            if self.rng.random() < 0.3:
                ktag, key = "key:none", None
            return Call(command, (fd, key), (), f"{command}[{tag}]({ktag})", compare=compare)
        return Call(command, (fd, key), (), f"{command}[{tag}]({ktag})")

    def map_create(self) -> Call:
        map_type = self.pick({"pool": 6, "any": 3, "bad": 1})
        if map_type == "pool":
            map_type = self.rng.choice(list(_POOL_TYPES))
            ttag = MapType(map_type).name.lower()
        elif map_type == "any":
            map_type = self.rng.randrange(0, 40)
            ttag = f"type{map_type}"
        else:
            ttag, map_type = self.choose({**_U64_EDGES, **_NOT_INTS})
        sizes = {"0": 0, "1": 1, "4": 4, "8": 8, "13": 13, "64": 64, "4096": 4096,
                 "2**32-1": (1 << 32) - 1}
        ktag, key_size = self.choose(sizes) if self.rng.random() < 0.9 else \
            self.choose(_U64_EDGES | _NOT_INTS)
        vtag, value_size = self.choose(sizes | {"2**20": 1 << 20}) \
            if self.rng.random() < 0.9 else self.choose(_U64_EDGES | _NOT_INTS)
        etag, max_entries = self.choose({"0": 0, "1": 1, "4": 4, "64": 64, "4096": 4096}) \
            if self.rng.random() < 0.9 else self.choose(_U64_EDGES | _NOT_INTS)
        if isinstance(value_size, int) and value_size >= 1 << 20 and isinstance(
                max_entries, int) and max_entries > 4:
            max_entries, etag = 4, "4"
        if isinstance(max_entries, int) and max_entries >= 4096 and isinstance(
                value_size, int) and value_size > 64:
            value_size, vtag = 64, "64"
        r = self.rng.random()
        if r < 0.5:
            ftag, flags = "0", 0
        elif r < 0.85:
            bits = self.rng.sample(list(MapFlags), self.rng.randrange(1, 3))
            flags = sum(bits)
            ftag = "|".join(b.name.lower() for b in bits)
        else:
            ftag, flags = self.u64_flags({"bit": 1 << self.rng.randrange(32)})
        kwargs = []
        label = f"map_create[{ttag}](key:{ktag},value:{vtag},entries:{etag},flags:{ftag}"
        if self.rng.random() < 0.3:
            itag, inner, _ = self.fd("map")
            kwargs.append(("inner_map_fd", inner))
            label += f",inner:{itag}"
        if self.rng.random() < 0.15:
            ntag, numa = self.choose({"0": 0, "1": 1, "-1": -1, "7": 7, "2**32": 1 << 32,
                                      "float": 0.0})
            kwargs.append(("numa_node", numa))
            label += f",numa:{ntag}"
        if self.rng.random() < 0.2:
            ntag, name = self.choose({"ok": "fz_ok", "dot": "a.b", "bad": "a-b", "16": "x" * 16,
                                      "15": "y" * 15, "latin1": b"\xe9t\xe9", "nul": b"a\0b",
                                      "int": 5, "none": None})
            kwargs.append(("map_name", name))
            label += f",name:{ntag}"
        if self.rng.random() < 0.1:
            btag, btf = self.fd("other")[:2]
            if self.btfs and self.rng.random() < 0.6:
                btag, btf = "btf", Fd("btf", self.rng.choice(self.btfs))
            kwargs.append(("btf_fd", btf))
            kwargs.append(("btf_key_type_id", self.rng.choice([0, 1, 2])))
            kwargs.append(("btf_value_type_id", self.rng.choice([0, 1, 1, 7])))
            label += f",btf:{btag}"
        if self.rng.random() < 0.1:
            xtag, extra = self.choose({"0": 0, "5": 5, "2**32": 1 << 32, "neg": -1,
                                       "2**64": 1 << 64})
            kwargs.append(("map_extra", extra))
            label += f",extra:{xtag}"
        h = self.handle()
        if isinstance(map_type, int) and map_type in MapType._value2member_map_ and all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 21
                for v in (key_size, value_size, max_entries, flags)):
            self.maps[h] = _MapModel(map_type, key_size, value_size, max_entries, flags)
        return Call("map_create", (map_type, key_size, value_size, max_entries, flags),
                    tuple(kwargs), label + ")", creates=Fd("map", h))

    def batch_op(self) -> Call:
        tag, fd, model = self.fd("map")
        command = self.pick({"map_lookup_batch": 3, "map_lookup_and_delete_batch": 1,
                             "map_update_batch": 3, "map_delete_batch": 2})
        etag, elem_flags = self.u64_flags({"0": 0, "lock": 4, "noexist": 1})
        ftag, flags = self.u64_flags({"0": 0})
        if command in ("map_lookup_batch", "map_lookup_and_delete_batch"):
            max_entries = model.max_entries if model else 4
            counts = {"0": 0, "1": 1, "entries": max_entries, "2**32-1": (1 << 32) - 1,
                      "2**28": 1 << 28}
            if model is None or model.ordered:
                counts["2"] = 2
            ctag, count = self.choose(counts) if self.rng.random() < 0.9 else \
                self.choose(_U64_EDGES | _NOT_INTS)
            token_size = 4 if model is None or map_traits(model.map_type).htab_batch \
                else model.key_size
            btag, token = ("token:none", None) if self.rng.random() < 0.6 else \
                self.blob(token_size, "token")
            compare = "ok" if model is None or map_traits(model.map_type).fd_values or \
                map_traits(model.map_type).sockets else (
                    "batch" if model.ordered else "sorted_batch")
            if model is not None and not model.ordered and token is not None:
                compare = "ok"
            return Call(command, (fd, token, count, elem_flags, flags), (),
                        f"{command}[{tag}]({btag},count:{ctag},elem:{etag},flags:{ftag})",
                        compare=compare)
        n = self.rng.choice([0, 1, 2, 3])
        key_size = model.key_size if model else 4
        keys = [self.blob(key_size, "key") for _ in range(n)]
        ktags = ",".join(sorted({t for t, _ in keys})) or "nokeys"
        key_list: object = [k for _, k in keys]
        if self.rng.random() < 0.05:
            ktags, key_list = "keys:notalist", 5
        if command == "map_delete_batch":
            return Call(command, (fd, key_list, elem_flags, flags), (),
                        f"{command}[{tag}]({ktags},elem:{etag},flags:{ftag})")
        value_size = syscall_value_size(model.map_type, model.value_size, self.ncpu) \
            if model else 8
        values = [self.blob(value_size, "value") for _ in range(n + (self.rng.random() < 0.1))]
        vtags = ",".join(sorted({t for t, _ in values})) or "novalues"
        return Call(command, (fd, key_list, [v for _, v in values], elem_flags, flags), (),
                    f"{command}[{tag}]({ktags},{vtags},elem:{etag},flags:{ftag})")

    def misc_map_op(self) -> Call:
        command = self.pick({"map_freeze": 2, "map_get_info": 3, "prog_get_info": 1})
        tag, fd, _ = self.fd("prog" if command == "prog_get_info" else "map")
        compare = {"map_get_info": "info", "prog_get_info": "prog_info"}.get(command, "ok")
        return Call(command, (fd,), (), f"{command}[{tag}]", compare=compare)

    def id_op(self) -> Call:
        command = self.pick({"map_get_fd_by_id": 3, "prog_get_fd_by_id": 2,
                             "map_get_next_id": 2})
        want = "prog" if command == "prog_get_fd_by_id" else "map"
        tag, fd, _ = self.fd(want)
        # Only an id of the command's own kind: the kernel's other id space (and other
        # processes' objects in it) would answer a program's id given as a map's.
        if isinstance(fd, Fd) and fd.kind == want and self.rng.random() < 0.6:
            itag, ident = f"id of {tag}", IdOf(fd)
        else:
            itag, ident = self.choose({"0": 0, "INT_MAX": (1 << 31) - 1, "2**31": 1 << 31,
                                       "U32_MAX": (1 << 32) - 1, "2**32": 1 << 32, "-1": -1,
                                       "float": 1.0, "str": "1", "none": None})
        if command == "map_get_next_id":
            # Other processes' maps are on the kernel's list: past a valid id, ENOENT or an
            # id are the same answer.
            return Call(command, (ident,), (), f"{command}({itag})", compare="ok_or_enoent")
        kwargs: tuple = ()
        label = f"{command}({itag}"
        if command == "map_get_fd_by_id" and self.rng.random() < 0.4:
            ftag, flags = self.u64_flags({"rdonly": 8, "wronly": 16, "both": 24})
            kwargs = (("open_flags", flags),)
            label += f",flags:{ftag}"
        h = self.handle()
        if command == "map_get_fd_by_id" and isinstance(ident, IdOf) and \
                ident.fd.handle in self.maps:
            self.maps[h] = self.maps[ident.fd.handle]
        return Call(command, (ident,), kwargs, label + ")",
                    creates=Fd("prog" if want == "prog" else "map", h))

    def pin_op(self) -> Call:
        name = f"n{self.rng.randrange(4)}"
        root = "/sys/fs/bpf/{p}"
        paths = {"fresh": Pin(root + name), "dot": Pin("/sys/fs/bpf/./{p}" + name),
                 "dotdot": Pin("/sys/fs/bpf/../bpf/{p}" + name),
                 "slashes": Pin("/sys/fs/bpf//{p}" + name),
                 "nul": Pin(root + name + "\0zz"), "long": Pin(root + "a" * 256),
                 "missing_dir": Pin(root + "nodir/" + name),
                 "trailing_slash": Pin(root + name + "/"), "root": "/sys/fs/bpf",
                 "not_bpffs": Pin("/tmp/{p}" + name), "empty": "", "int": 5,
                 "bytes": Pin(root + name, as_bytes=True), "none": None,
                 "devnull": "/dev/null"}
        ptag, path = self.choose(paths)
        if self.rng.random() < 0.5:
            tag, fd, _ = self.fd(self.rng.choice(["map", "prog"]))
            return Call("obj_pin", (fd, path), (), f"obj_pin[{tag}]({ptag})")
        kwargs: tuple = ()
        label = f"obj_get({ptag}"
        if self.rng.random() < 0.3:
            ftag, flags = self.u64_flags({"rdonly": 8, "wronly": 16, "both": 24})
            kwargs = (("file_flags", flags),)
            label += f",flags:{ftag}"
        return Call("obj_get", (path,), kwargs, label + ")", creates=Fd("map", self.handle()))

    def prog_load(self) -> Call:
        r = self.rng.random()
        if r < 0.6:
            ttag, prog_type = self.choose({t.name.lower(): t for t in ProgType
                                           if t not in _UNSAFE_PROG_TYPES})
        elif r < 0.8:
            prog_type = self.rng.choice([40, 1000])
            ttag = "unknown"
        else:
            ttag, prog_type = self.choose(_U64_EDGES | _NOT_INTS)
        code = self.pick({"ret": 5, "ret_map": 2, "lookup": 3, "junk": 2, "empty": 1,
                          "odd": 1, "noexit": 1, "str": 1})
        ret = _ret(self.rng.choice([0, 1, 2]))  # drawn in this order, whichever is used
        ret_map_fd = self.fd("map")[1] if self.maps else Fd("closed")
        lookup_tag, lookup_fd, _ = self.fd("map") if self.maps else ("closed", Fd("closed"), None)
        insns: object = {
            "ret": ret,
            "ret_map": Insns(b"", ret_map_fd, _ret(0)),
            "lookup": Insns(_insn(0x7A, 10, off=-8, imm=0),  # *(u64 *)(r10 - 8) = 0
                            lookup_fd,
                            _insn(0xBF, 2, 10) + _insn(0x07, 2, imm=-8)  # r2 = r10 - 8
                            + _insn(0x85, imm=1)  # call bpf_map_lookup_elem
                            + (_ret(0) if self.rng.random() < 0.5 else  # or read the value:
                               _insn(0x15, 0, off=1) + _insn(0x61, 0, 0) + EXIT)),
            "junk": self.rng.randbytes(8 * self.rng.randrange(1, 6)),
            "empty": b"", "odd": _ret(0)[:13], "noexit": _insn(0xB7, 0, imm=0),
            "str": "insns"}[code]
        if isinstance(insns, Insns) and not isinstance(insns.map_fd, Fd):
            insns = Insns(b"", Fd("closed"), _ret(0))
        ltag, license = self.choose({"GPL": "GPL", "none": None, "int": 5, "latin1": b"\xe9",
                                     "proprietary": "Proprietary", "bytes": b"GPL",
                                     "nul": "GPL\0x"}) if self.rng.random() < 0.3 \
            else ("GPL", "GPL")
        ntag, name = self.choose({"ok": "fz", "latin1": b"\xe9", "bad": "a-b", "16": "x" * 16,
                                  "int": 3}) if self.rng.random() < 0.2 else ("none", b"")
        ftag, flags = self.choose({"0": 0, "sleepable": 16, "128": 128, "frags": 32,
                                   "bit": 1 << self.rng.randrange(32), "neg": -1,
                                   "2**32": 1 << 32}) if self.rng.random() < 0.3 else ("0", 0)
        atag, attach = self.choose({"0": 0, "xdp": AttachType.XDP, "raw_tp": 23,
                                    "2**32": 1 << 32, "99": 99}) \
            if self.rng.random() < 0.2 else ("0", 0)
        h = self.handle()
        if isinstance(prog_type, int) and prog_type in ProgType._value2member_map_:
            self.progs[h] = prog_type
        kwargs: tuple = ()
        if code == "lookup":  # the map it looks up in: a map of maps' value is a map
            code = f"lookup:{lookup_tag}"
        label = (f"prog_load[{ttag}]({code},license:{ltag},name:{ntag},flags:{ftag},"
                 f"attach:{atag}")
        if self.rng.random() < 0.1:
            gtag, level = self.choose({"1": 1, "2": 2, "4": 4, "8": 8, "16": 16, "32": 32,
                                       "2**32": 1 << 32})
            kwargs = (("log_level", level),)
            label += f",log_level:{gtag}"
        return Call("prog_load", (prog_type, insns, license, attach, name, flags), kwargs,
                    label + ")", creates=Fd("prog", h))

    def test_run(self) -> Call:
        tag, fd, _ = self.fd("prog")
        dtag, data = self.choose({"0": b"", "14": bytes(14), "64": self.rng.randbytes(64),
                                  "1500": bytes(1500), "str": "data", "none": None})
        kwargs = []
        label = f"prog_test_run[{tag}](data:{dtag}"
        for name, table in (
                ("data_size_out", {"0": 0, "1": 1, "4096": 4096, "neg": -1, "2**32": 1 << 32}),
                ("ctx_in", {"none": None, "8": bytes(8), "200": bytes(200), "str": "c"}),
                ("ctx_size_out", {"0": 0, "8": 8, "2**32": 1 << 32}),
                ("repeat", {"0": 0, "1": 1, "3": 3, "neg": -1, "2**32": 1 << 32,
                            "float": 1.0}),
                ("flags", {"0": 0, "on_cpu": 1, "live": 2, "csum": 4, "8": 8,
                           "2**32": 1 << 32}),
                ("cpu", {"0": 0, "1": 1, "ncpu": self.ncpu, "2**32": 1 << 32, "neg": -1}),
                ("batch_size", {"0": 0, "1": 1, "65": 65, "2**32": 1 << 32})):
            if self.rng.random() < 0.25:
                vtag, value = self.choose(table)
                kwargs.append((name, value))
                label += f",{name}:{vtag}"
        return Call("prog_test_run", (fd, data), tuple(kwargs), label + ")",
                    compare="test_run")

    def attach_op(self) -> Call:
        command = self.pick({"link_create": 3, "raw_tracepoint_open": 2 * self.tracefs,
                             "prog_attach": 2, "prog_detach": 1,
                             "attach_tracepoint": 1 * self.tracefs})
        ptag, prog, _ = self.fd("prog")
        if command == "attach_tracepoint":
            ctag, where = self.choose({
                "getpid": ("syscalls", "sys_enter_getpid"), "none_such": ("syscalls", "nope"),
                "no_category": ("pybpf_none", "x"), "empty": ("", "x"),
                "slash": ("sys/calls", "x"), "nul": ("syscalls", "sys\0x"), "int": (1, "x")})
            h = self.handle()
            self.links.append(h)
            return Call(command, (prog, *where), (), f"{command}[{ptag}]({ctag})",
                        creates=Fd("link", h))
        if command == "raw_tracepoint_open":
            ntag, name = self.choose({"sys_enter": "sys_enter", "none_such": "pybpf_none",
                                      "empty": "", "nul": "sys\0enter", "int": 1,
                                      "long": "x" * 200})
            h = self.handle()
            self.links.append(h)
            return Call(command, (prog, name), (), f"{command}[{ptag}]({ntag})",
                        creates=Fd("link", h))
        attach = self.rng.choice([t for t in AttachType] + [60, 1 << 32, -1])
        atag = attach.name.lower() if isinstance(attach, AttachType) else str(attach)
        if command == "link_create":
            if attach in _IFINDEX_ATTACH:
                ttag, target = "no_device", self.rng.choice(_NO_DEVICE)
            else:
                ttag, target, _ = self.fd("other")
            ftag, flags = self.choose({"0": 0, "1": 1, "neg": -1, "2**32": 1 << 32}) \
                if self.rng.random() < 0.2 else ("0", 0)
            h = self.handle()
            self.links.append(h)
            return Call(command, (prog, target, attach, flags), (),
                        f"{command}[{ptag}](target:{ttag},attach:{atag},flags:{ftag})",
                        creates=Fd("link", h))
        # prog_attach/detach: never on a sockmap (the psock work owns those) and never to
        # a target an ifindex or netns attach type would read as the host's.
        if attach in _IFINDEX_ATTACH:
            attach, atag = AttachType.CGROUP_INET_INGRESS, "cgroup_inet_ingress"
        others = {h: m for h, m in self.maps.items() if m.map_type not in SOCKMAP_TYPES}
        kind = self.rng.choice(["devnull", "socket", "closed"])
        ttag, target = kind, Fd(kind)
        if others and self.rng.random() < 0.5:
            h = self.rng.choice(list(others))
            ttag, target = MapType(others[h].map_type).name.lower(), Fd("map", h)
        if command == "prog_attach":
            return Call(command, (prog, target, attach), (),
                        f"{command}[{ptag}](target:{ttag},attach:{atag})")
        return Call(command, (target, attach, prog), (),
                    f"{command}(target:{ttag},attach:{atag},prog:{ptag})")

    def btf_load(self) -> Call:
        btag, blob = self.choose({
            "int": _btf(_BTF_INT, _BTF_STRINGS), "empty": b"", "header": _btf(b"", b"\0"),
            "magic": _btf(_BTF_INT, _BTF_STRINGS, magic=0x1234),
            "version": _btf(_BTF_INT, _BTF_STRINGS, version=2),
            "truncated": _btf(_BTF_INT, _BTF_STRINGS)[:30],
            "junk": self.rng.randbytes(self.rng.randrange(1, 64)),
            "badstr": _btf(_BTF_INT, b"int\0"), "str": "btf", "none": None})
        ltag, level = self.choose({"0": 0, "1": 1, "8": 8, "16": 16, "2**32": 1 << 32,
                                   "neg": -1}) \
            if self.rng.random() < 0.2 else ("0", 0)
        h = self.handle()
        self.btfs.append(h)
        return Call("btf_load", (blob, level), (), f"btf_load({btag},level:{ltag})",
                    creates=Fd("btf", h))

    def close(self) -> Call:
        # Not the shared host fds: the kernel backend's close(2) closes any fd, the emulated
        # one only its own (System.close is for fds the System gave out).
        tag, fd, _ = self.fd(self.rng.choice(["map", "prog", "other"]))
        if isinstance(fd, Fd) and fd.kind in ("devnull", "socket"):
            tag, fd = "closed", Fd("closed")
        return Call("close", (fd,), (), f"close[{tag}]")
