"""Typed maps of sockets: ``SockMap`` and ``SockHash`` (net/core/sock_map.c), and the
programs that run on their sockets.

Rules this module keeps:
- Keys: a u32 index (SockMap) or any key (SockHash: an int of ``key_size`` bytes by
  default, or a codec). Values are sockets on update (a ``socket.socket``, anything with
  ``fileno()``, or an int fd), sent as the fd in a 4- or 8-byte value; lookups give the
  socket's cookie (SO_COOKIE), which only 8-byte maps (the default) return.
- ``update(key, sock, target_cpu=N)`` sends the CPU of the socket's psock backlog work as the
  unmerged 2024 patch's attr field; ``flags=target_cpu_flags(N)`` is the reviewers' design
  (the CPU in the upper 32 bits of flags). Only the emulated backend has either; the kernel
  answers EINVAL, with a detail naming the missing feature. The 2025 design, a verdict that
  calls the kfunc ``bpf_sk_skb_set_redirect_cpu``, is ``redirect_verdict(...,
  redirect_cpu=N)``: the emulated backend has it; on the kernel ``Program.load`` refuses it
  (ENOENT: no such function in the kernel's BTF), saying it was never merged.
- ``m.attach(program, "stream_verdict")`` / ``m.detach(...)`` are BPF_PROG_ATTACH / DETACH
  with the map as target; ``program.attach_sockmap(m, ...)`` is the link form. A psock takes
  the map's programs when its socket is inserted: attach first, then insert.
- ``redirect_verdict`` and ``len_parser`` build the usual programs as assembler items.
"""

from __future__ import annotations

from typing import Any

from .asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    R6,
    R10,
    Item,
    Size,
    add64,
    call,
    call_kfunc,
    exit_,
    ld_map_fd,
    ldx,
    mov64,
    st,
)
from .codecs import CodecSpec, SocketCodec
from .maps import UpdateFlags, _TypedMap, register_typed_class, update_flags
from .programs import sockmap_attach_type
from .system import System
from .uapi import BPF_F_SOCKMAP_TARGET_CPU, AttachType, MapType

__all__ = ["SockHash", "SockMap", "len_parser", "redirect_verdict", "target_cpu_flags"]


def target_cpu_flags(cpu: int, flags: UpdateFlags | int | str = UpdateFlags.ANY) -> int:
    """Update flags that bind the socket's psock backlog work to ``cpu`` as the reviewers
    asked (2024): ``BPF_F_SOCKMAP_TARGET_CPU`` with the CPU in the upper 32 bits (0 is a
    CPU). No kernel has the flag: the kernel backend refuses it with EINVAL."""
    if not isinstance(cpu, int) or isinstance(cpu, bool) or not 0 <= cpu < 1 << 32:
        raise ValueError(f"target CPU must be an int 0..2**32-1, got {cpu!r}")
    return update_flags(flags) | BPF_F_SOCKMAP_TARGET_CPU | cpu << 32


def _prog_fd(program: Any) -> int:
    fd = getattr(program, "fd", program)
    if not isinstance(fd, int) or isinstance(fd, bool):
        raise TypeError(f"a program is a Program or its fd, got {type(program).__name__}")
    return fd


class _SockMapBase(_TypedMap):
    """What SOCKMAP and SOCKHASH share: socket values, target_cpu, program attachment."""

    def update(self, *args: Any, flags: UpdateFlags | int | str = UpdateFlags.ANY,
               target_cpu: int | None = None, **kwargs: Any) -> None:
        """``update(key, sock, flags=..., target_cpu=None)``; ``target_cpu`` is the unmerged
        patch's attr field (None: unset), ``flags=target_cpu_flags(cpu)`` the reviewers'
        design. Dict-style ``update(mapping)`` as for any Map."""
        bound = isinstance(flags, int) and flags & BPF_F_SOCKMAP_TARGET_CPU
        if target_cpu is None and not bound:
            super().update(*args, flags=flags, **kwargs)
            return
        if len(args) != 2 or kwargs:
            raise TypeError("a target CPU only goes with update(key, sock, ...)")
        if target_cpu is not None and (not isinstance(target_cpu, int)
                                       or isinstance(target_cpu, bool)):
            raise TypeError(f"target_cpu must be an int (a CPU number) or None, got "
                            f"{target_cpu!r}")
        key, sock = args
        # Through the command, not the element fast path: its refusal says what is missing.
        self.system.map_update_elem(self.fd, self.key_codec.encode(key),
                                    self.value_codec.encode(sock), update_flags(flags),
                                    target_cpu=target_cpu)

    def attach(self, program: Any, attach_type: AttachType | int | str) -> None:
        """BPF_PROG_ATTACH of an SK_SKB / SK_MSG program (a Program or fd) to this map as
        ``attach_type`` ("stream_parser", "stream_verdict", "skb_verdict", "msg_verdict"
        or an AttachType). A program already in that slot is replaced."""
        self.system.prog_attach(_prog_fd(program), self.fd, sockmap_attach_type(attach_type))

    def detach(self, program: Any, attach_type: AttachType | int | str) -> None:
        """BPF_PROG_DETACH of ``program`` from this map's ``attach_type`` slot (ENOENT when
        another program, or none, is there). Sockets already in the map keep running it."""
        self.system.prog_detach(self.fd, sockmap_attach_type(attach_type), _prog_fd(program))


@register_typed_class
class SockMap(_SockMapBase):
    """SOCKMAP: ``m[i] = sock`` puts a socket at index ``i``; ``m[i]`` is its cookie.
    Programs redirect with ``bpf_sk_redirect_map`` / ``bpf_msg_redirect_map``."""

    map_type = MapType.SOCKMAP
    fixed_key_size = 4

    def __init__(self, max_entries: int, *, value_size: int = 8, flags: int = 0,
                 name: str = "", numa_node: int | str | None = None,
                 system: System | None = None) -> None:
        super().__init__(max_entries, int, SocketCodec(value_size), value_size=value_size,
                         flags=flags, name=name, numa_node=numa_node, system=system)


@register_typed_class
class SockHash(_SockMapBase):
    """SOCKHASH: sockets under any key (an int of ``key_size`` bytes by default, e.g. a
    port). Programs redirect with ``bpf_sk_redirect_hash`` / ``bpf_msg_redirect_hash``."""

    map_type = MapType.SOCKHASH

    def __init__(self, max_entries: int, key: CodecSpec = int, *, key_size: int = 4,
                 value_size: int = 8, flags: int = 0, name: str = "",
                 numa_node: int | str | None = None, system: System | None = None) -> None:
        super().__init__(max_entries, key, SocketCodec(value_size), key_size=key_size,
                         value_size=value_size, flags=flags, name=name, numa_node=numa_node,
                         system=system)


# -- programs ---------------------------------------------------------------------------------

def _is_hash(sock_map: Any, hash: bool | None) -> bool:
    if hash is not None:
        return hash
    map_type = getattr(sock_map, "type", None)
    if map_type not in (MapType.SOCKMAP, MapType.SOCKHASH):
        raise TypeError(f"cannot tell whether {sock_map!r} is a SOCKMAP or a SOCKHASH: pass "
                        "a SockMap / SockHash, or hash=True/False")
    return map_type == MapType.SOCKHASH


def redirect_verdict(sock_map: Any, key: int | bytes, flags: int = 0, *, msg: bool = False,
                     hash: bool | None = None, redirect_cpu: int | None = None) -> list[Item]:
    """A verdict program that redirects everything to the socket at ``key`` of
    ``sock_map`` (a SockMap / SockHash, a map fd or a name bound at load): an SK_SKB
    program calling ``bpf_sk_redirect_map`` / ``_hash``, or with ``msg=True`` an SK_MSG one
    calling ``bpf_msg_redirect_map`` / ``_hash``. ``flags=BPF_F_INGRESS`` redirects to the
    target's receive queue instead of its transmit path. The helper's result (SK_PASS when
    the target exists and may take it, else SK_DROP) is the verdict. A SOCKHASH key is an
    int (``key_size`` bytes from the map, else 4) or bytes, put on the stack.
    ``redirect_cpu`` (SK_SKB only): first call the kfunc ``bpf_sk_skb_set_redirect_cpu``
    with it, so the target's backlog work runs on that CPU (its result is not looked at: a
    CPU the machine lacks leaves the work unbound)."""
    helper = ("msg" if msg else "sk") + "_redirect_" + ("hash" if _is_hash(sock_map, hash)
                                                       else "map")
    items: list[Item] = []
    if redirect_cpu is not None:
        if msg:
            raise ValueError("redirect_cpu is for SK_SKB verdicts: the kfunc "
                             "bpf_sk_skb_set_redirect_cpu is not offered to SK_MSG programs")
        if not isinstance(redirect_cpu, int) or isinstance(redirect_cpu, bool):
            raise TypeError(f"redirect_cpu must be a CPU number (an int), got {redirect_cpu!r}")
        items += [mov64(R6, R1), mov64(R2, redirect_cpu),
                  call_kfunc("bpf_sk_skb_set_redirect_cpu"), mov64(R1, R6)]
    if helper.endswith("hash"):
        if isinstance(key, int):
            key = key.to_bytes(getattr(sock_map, "key_size", 4), "little")
        if not isinstance(key, bytes | bytearray) or not key:
            raise TypeError(f"a SOCKHASH key is an int or non-empty bytes, got {key!r}")
        slot = -((len(key) + 7) // 8 * 8)
        for at in range(0, len(key), 4):  # 4-byte stores, the tail byte by byte
            word = key[at:at + 4]
            if len(word) == 4:
                items.append(st(Size.W, R10, slot + at,
                                int.from_bytes(word, "little", signed=True)))
            else:
                items += [st(Size.B, R10, slot + at + i, b) for i, b in enumerate(word)]
        items += [mov64(R3, R10), add64(R3, slot)]
    else:
        if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key < 1 << 31:
            raise TypeError(f"a SOCKMAP key is an index (an int 0..2**31-1), got {key!r}")
        items.append(mov64(R3, key))
    items += [ld_map_fd(R2, sock_map), mov64(R4, flags), call(helper), exit_()]
    return items


def len_parser() -> list[Item]:
    """A stream parser that takes each skb whole: it returns ``skb->len`` (the first field
    of ``struct __sk_buff``), so every received chunk is one message for the verdict."""
    return [ldx(Size.W, R0, R1, 0), exit_()]
