"""ProgramSpec (what to load) and Program (a loaded program on one System).

Rules this module keeps:
- ``ProgramSpec`` knows nothing of backends: instructions (assembler items, Instructions,
  assembly text or encoded bytes), the program type and load attributes. Map references in
  it are map objects, raw fds, or names resolved by ``Program.load(..., maps={name: map})``.
- ``Program.load`` resolves every map reference to an fd *of the system it loads on* (a map
  of another system is an error) and every kfunc named in a call to its BTF id in that
  system's kernel BTF (``System.kfunc_btf_id``: a kernel without it fails here, before the
  load), calls ``system.prog_load`` and keeps the referenced map objects alive for as long
  as the Program, as the kernel keeps a loaded program's maps.
- A rejected program raises ``errors.VerifierError`` with the verifier's log.
- A Program owns its fd: ``close()`` (idempotent), ``with``, or garbage collection closes it.
"""

from __future__ import annotations

import errno
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .asm import Assembly, Item, assemble, assemble_text, decode, encode
from .backends import resolve_system
from .errors import bpf_error
from .handles import FdHandle
from .system import ProgInfo, System, TestRun
from .uapi import BPF_F_TEST_XDP_LIVE_FRAMES, AttachType, ProgType, member_named

# The attach types of programs on a SOCKMAP / SOCKHASH, by the names users write.
SOCKMAP_ATTACH_TYPES: dict[str, AttachType] = {
    "stream_parser": AttachType.SK_SKB_STREAM_PARSER,
    "stream_verdict": AttachType.SK_SKB_STREAM_VERDICT,
    "skb_verdict": AttachType.SK_SKB_VERDICT,
    "msg_verdict": AttachType.SK_MSG_VERDICT,
}


def sockmap_attach_type(attach_type: AttachType | int | str) -> int:
    """An attach type for a sockmap program: a uapi ``AttachType`` or int (passed on as it
    is: the kernel judges it), or a name: "stream_parser", "stream_verdict",
    "skb_verdict", "msg_verdict" (also with the uapi prefix, "sk_skb_stream_verdict")."""
    if isinstance(attach_type, str):
        name = attach_type.lower().removeprefix("bpf_")
        found = SOCKMAP_ATTACH_TYPES.get(name)
        if found is None:  # the uapi spelling: sk_skb_stream_verdict, sk_skb_verdict, ...
            found = {t.name.lower(): t for t in SOCKMAP_ATTACH_TYPES.values()}.get(name)
        if found is None:
            raise ValueError(f"unknown sockmap attach type {attach_type!r}: one of "
                             f"{', '.join(SOCKMAP_ATTACH_TYPES)}")
        return found
    if isinstance(attach_type, int) and not isinstance(attach_type, bool):
        return int(attach_type)
    raise TypeError(f"attach type must be an AttachType, an int or a name like "
                    f"'stream_verdict', got {attach_type!r}")


# Program types whose BPF_PROG_TEST_RUN refuses ``repeat`` (and data): they run once on ctx.
_RUN_ONCE_TYPES = frozenset({ProgType.RAW_TRACEPOINT, ProgType.SYSCALL})


@dataclass(frozen=True)
class ProgramSpec:
    """A program to load: type, instructions and load attributes (plain, deterministic)."""

    prog_type: ProgType | int
    instructions: Sequence[Item] | str | bytes  # items, assembly text, or encoded bytes
    license: str = "GPL"
    expected_attach_type: int = 0
    name: str = ""
    prog_flags: int = 0
    maps: Mapping[str, Any] = field(default_factory=dict)  # default map bindings by name

    def __post_init__(self) -> None:
        if isinstance(self.prog_type, str):
            object.__setattr__(self, "prog_type",
                               member_named(ProgType, self.prog_type, "program type"))
        elif isinstance(self.prog_type, int) and not isinstance(self.prog_type, bool):
            if self.prog_type in ProgType._value2member_map_:
                object.__setattr__(self, "prog_type", ProgType(self.prog_type))
        else:
            raise TypeError(f"prog_type must be a ProgType, an int or a name like 'xdp', got "
                            f"{self.prog_type!r}")
        if not isinstance(self.instructions, str | bytes | bytearray | Sequence):
            raise TypeError("instructions must be a list of instructions and labels, assembly "
                            f"text or encoded bytes, got {type(self.instructions).__name__}")
        for attr in ("license", "name"):
            if not isinstance(getattr(self, attr), str):
                raise TypeError(f"ProgramSpec.{attr} must be a str, got "
                                f"{getattr(self, attr)!r}")
        for attr in ("expected_attach_type", "prog_flags"):
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 32:
                raise ValueError(f"ProgramSpec.{attr} must be an unsigned 32-bit int, got "
                                 f"{value!r}")

    def assembly(self) -> Assembly:
        """The assembled instructions (labels resolved, map references listed)."""
        if isinstance(self.instructions, str):
            return assemble_text(self.instructions)
        if isinstance(self.instructions, (bytes, bytearray)):
            return assemble(decode(bytes(self.instructions)))
        return assemble(self.instructions)


def _system_of(map_obj: Any) -> System | None:
    return getattr(map_obj, "system", None)


def _resolve_maps(assembly: Assembly, system: System,
                  bindings: Mapping[str, Any]) -> tuple[list, list[Any]]:
    """(instructions with fds in, map objects to keep alive)."""
    keep: list[Any] = []

    def fd_of(ref: Any) -> int:
        target = ref
        if isinstance(ref, str):
            if ref not in bindings:
                raise bpf_error(errno.EINVAL, "prog_load", detail=(
                    f"the program refers to map {ref!r}, which is not bound: pass "
                    f"maps={{{ref!r}: <Map>}} to Program.load"))
            target = bindings[ref]
        if isinstance(target, int) and not isinstance(target, bool):
            return target
        if not hasattr(target, "fd"):
            raise TypeError(f"map {ref!r} must be a Map (or an open map fd), got "
                            f"{type(target).__name__}")
        owner = _system_of(target)
        if owner is not None and owner is not system:
            raise bpf_error(errno.EINVAL, "prog_load", detail=(
                f"map {ref!r} belongs to the {owner.name} system, the program is loaded on "
                f"the {system.name} one: create the map on the same System"))
        fd = getattr(target, "fd", None)
        if not isinstance(fd, int) or fd < 0:
            raise bpf_error(errno.EBADF, "prog_load",
                            detail=f"map {ref!r} has no open fd (closed?)")
        keep.append(target)
        return fd

    return assembly.with_map_fds(fd_of), keep


class Program(FdHandle):
    """A loaded BPF program: owns one fd on one System."""

    def __init__(self, system: System, fd: int, spec: ProgramSpec | None = None,
                 maps: Iterable[Any] = ()) -> None:
        self.system = system
        self.fd = fd
        self.spec = spec
        self._maps = list(maps)  # kept alive while the program is
        self._finalizer = weakref.finalize(self, _close_quietly, system, fd)

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def load(cls, spec: ProgramSpec, system: System | None = None, *,
             maps: Mapping[str, Any] | None = None, log_level: int = 0) -> Program:
        """Assemble, resolve map references to this system's fds, and BPF_PROG_LOAD.

        ``maps`` binds map names used in the instructions (over ``spec.maps``); kfuncs
        called by name get their BTF id on ``system``.
        ``log_level`` > 0 asks for a verifier log even when the load succeeds.
        """
        system = resolve_system(system)
        bindings = {**spec.maps, **(maps or {})}
        assembly = spec.assembly()
        insns, keep = _resolve_maps(assembly, system, bindings)
        insns = assembly.with_kfunc_ids(system.kfunc_btf_id, insns)
        fd = system.prog_load(int(spec.prog_type), encode(insns), license=spec.license,
                              expected_attach_type=int(spec.expected_attach_type),
                              prog_name=spec.name.encode(), prog_flags=spec.prog_flags,
                              log_level=log_level)
        return cls(system, fd, spec, keep)

    @classmethod
    def from_fd(cls, fd: int, system: System | None = None) -> Program:
        """Wrap an open program fd; the Program takes ownership and closes it."""
        if not isinstance(fd, int) or isinstance(fd, bool):
            raise TypeError(f"Program.from_fd needs an open program fd (an int), got {fd!r}")
        system = resolve_system(system)
        return cls(system, fd)

    @classmethod
    def from_id(cls, prog_id: int, system: System | None = None) -> Program:
        """Open the program with this id (BPF_PROG_GET_FD_BY_ID)."""
        system = resolve_system(system)
        return cls(system, system.prog_get_fd_by_id(prog_id))

    # -- running ---------------------------------------------------------------------------
    def test_run(self, data: bytes = b"", ctx: bytes | None = None, repeat: int | None = None,
                 flags: int = 0, cpu: int = 0, data_size_out: int | None = None,
                 ctx_size_out: int | None = None, batch_size: int = 0) -> TestRun:
        """BPF_PROG_TEST_RUN. ``repeat=None`` runs once: 1 for packet programs, 0 for the
        types that refuse a repeat count (raw_tracepoint, syscall), which also refuse a
        ctx_out buffer (``ctx_size_out`` then defaults to 0). An XDP program run with
        ``flags=BPF_F_TEST_XDP_LIVE_FRAMES`` sends ``repeat`` real frames where it says
        (``batch_size`` a batch); such a run returns no data or context, so its
        ``data_size_out`` and ``ctx_size_out`` default to 0."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"data must be bytes (the packet or input), got "
                            f"{type(data).__name__}")
        if ctx is not None and not isinstance(ctx, bytes | bytearray | memoryview):
            raise TypeError(f"ctx must be bytes (the context struct) or None, got "
                            f"{type(ctx).__name__}")
        for what, value in (("repeat", repeat), ("flags", flags), ("cpu", cpu),
                            ("data_size_out", data_size_out), ("ctx_size_out", ctx_size_out),
                            ("batch_size", batch_size)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or not 0 <= value < 1 << 32):
                raise ValueError(f"test_run {what} must be an unsigned 32-bit int, got "
                                 f"{value!r}")
        prog_type = self.spec.prog_type if self.spec is not None else self.info().type
        if prog_type in _RUN_ONCE_TYPES:
            repeat = 0 if repeat is None else repeat
            ctx_size_out = 0 if ctx_size_out is None else ctx_size_out
        elif repeat is None:
            repeat = 1
        if prog_type == ProgType.XDP and flags & BPF_F_TEST_XDP_LIVE_FRAMES:
            data_size_out = 0 if data_size_out is None else data_size_out
            ctx_size_out = 0 if ctx_size_out is None else ctx_size_out
        return self.system.prog_test_run(self._open_fd(), data, data_size_out=data_size_out,
                                         ctx_in=ctx, ctx_size_out=ctx_size_out, repeat=repeat,
                                         flags=flags, cpu=cpu, batch_size=batch_size)

    def attach_tracepoint(self, category: str, name: str) -> Link:
        """Attach to tracepoint ``category/name``; the Link detaches when closed."""
        return Link(self.system, self.system.attach_tracepoint(self._open_fd(), category,
                                                               name), self)

    def attach_xdp(self, ifindex: int, flags: int = 0) -> Link:
        """Attach this XDP program to interface ``ifindex`` by a link (BPF_LINK_CREATE,
        BPF_XDP): native mode where the driver has it (veth), else generic;
        ``XDP_FLAGS_SKB_MODE`` / ``XDP_FLAGS_DRV_MODE`` in ``flags`` choose. The interface
        is looked up in the calling thread's network namespace; the Link detaches when
        closed."""
        fd = self.system.link_create(self._open_fd(), ifindex, AttachType.XDP, flags)
        return Link(self.system, fd, self)

    def attach_raw_tracepoint(self, name: str) -> Link:
        """Attach this RAW_TRACEPOINT program to tracepoint ``name`` (e.g.
        ``xdp_cpumap_kthread``); it gets the tracepoint's raw arguments as u64s."""
        return Link(self.system, self.system.raw_tracepoint_open(self._open_fd(), name), self)

    def attach_sockmap(self, sock_map: Any, attach_type: AttachType | int | str) -> Link:
        """Attach this SK_SKB / SK_MSG program to a SOCKMAP or SOCKHASH (a Map or its fd) by
        a link (BPF_LINK_CREATE, Linux 6.10+) as ``attach_type`` ("stream_parser",
        "stream_verdict", "skb_verdict", "msg_verdict" or an AttachType). Sockets inserted
        afterwards take the program; closing the Link detaches it."""
        map_fd = getattr(sock_map, "fd", sock_map)
        fd = self.system.link_create(self._open_fd(), map_fd, sockmap_attach_type(attach_type))
        return Link(self.system, fd, self)

    # -- objects ---------------------------------------------------------------------------
    def info(self) -> ProgInfo:
        return self.system.prog_get_info(self._open_fd())

    @property
    def id(self) -> int:
        return self.info().id

    def pin(self, path: str) -> None:
        self.system.obj_pin(self._open_fd(), path)

    def _open_fd(self) -> int:
        if self.fd < 0:
            raise bpf_error(errno.EBADF, "program", detail="the program was closed")
        return self.fd

    # -- lifetime --------------------------------------------------------------------------
    def close(self) -> None:
        """Close the fd (idempotent); the program lives on while attached, pinned or in a
        prog array."""
        if self._finalizer.detach():
            self.system.close(self.fd)
        self.fd = -1
        self._maps.clear()

    def __repr__(self) -> str:
        name = self.spec.name if self.spec is not None else ""
        return f"<Program {name!r} fd={self.fd} on {self.system.name}>"


class Link(FdHandle):
    """An attachment (e.g. a tracepoint's perf event); closing it detaches the program."""

    def __init__(self, system: System, fd: int, program: Program | None = None) -> None:
        self.system = system
        self.fd = fd
        self.program = program  # keeps the program alive while attached
        self._finalizer = weakref.finalize(self, _close_quietly, system, fd)

    def close(self) -> None:
        if self._finalizer.detach():
            self.system.close(self.fd)
        self.fd = -1
        self.program = None



def _close_quietly(system: System, fd: int) -> None:
    try:
        system.close(fd)
    except OSError:
        pass
