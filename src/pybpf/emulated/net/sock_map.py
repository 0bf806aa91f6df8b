"""SOCKMAP and SOCKHASH (net/core/sock_map.c): creation and element rules.

Rules this module keeps:
- Create: max_entries 0, value_size not 4 or 8, a flag outside NUMA_NODE|RDONLY|WRONLY ->
  EINVAL; SOCKMAP key_size != 4 -> EINVAL; SOCKHASH key_size 0 -> EINVAL, over 512 -> E2BIG,
  a bucket array too big (max_entries over 2^28) -> EINVAL.
- Values on update are *socket fds of this process* (u32 or u64 by value_size), checked in
  ``sock_map_update_elem_sys``'s order: fd > INT_MAX -> EINVAL; not open -> EBADF; not a socket
  -> ENOTSOCK; a protocol without sockmap support (raw, ICMP, SCTP, netlink, packet...) ->
  EOPNOTSUPP; a TCP socket neither ESTABLISHED nor LISTEN, an unbound UDP socket, or a unix
  or vsock stream socket that is not connected -> EOPNOTSUPP (unix datagram sockets: any
  state; unix seqpacket sockets are not supported, as measured on 6.18); then flags >
  BPF_EXIST -> EINVAL; SOCKMAP index >= max_entries -> E2BIG; present + BPF_NOEXIST -> EEXIST;
  absent + BPF_EXIST -> ENOENT; SOCKHASH new key beyond max_entries -> E2BIG.
- LOOKUP from user space: value_size != 8 -> ENOSPC; absent -> ENOENT; else the socket's
  cookie (SO_COOKIE, u64). DELETE: SOCKMAP index >= max_entries or empty slot -> EINVAL;
  SOCKHASH absent -> ENOENT. get_next_key: SOCKMAP every index; SOCKHASH in bucket order with
  ``jhash(key, 0)`` over ``roundup_pow_of_two(max_entries)`` buckets, newest first in a bucket.
- Closing a socket removes it from every map. Here a map remembers each socket's fd and inode
  and drops the entry when that fd no longer holds the same socket (checked on access), so a
  socket closed by its last fd disappears as in the kernel. Batches and LOOKUP_AND_DELETE ->
  ENOTSUPP.
- Programs (sock_map_prog_update): SK_MSG_VERDICT, STREAM_PARSER, STREAM_VERDICT and
  SKB_VERDICT slots; the two verdicts exclude each other (EBUSY); a slot held by a link
  refuses attach, detach and another link (EBUSY); a detach of a program the slot does not
  hold is ENOENT; other attach types EOPNOTSUPP. Sockets take the map's programs when
  inserted (``sock_map_link``, skmsg.py's psock): a socket whose psock already has a program
  of a kind the map would give it is EBUSY; a map's later attach or detach leaves inserted
  sockets as they are. Leaving a map whose verdict (parser) runs on the socket stops it
  (sock_map_del_link).
- target_cpu (the unmerged sockmap CPU-affinity patch, both designs): flags with
  ``BPF_F_SOCKMAP_TARGET_CPU`` carry the CPU in their upper 32 bits (0 is a CPU), or the
  separate ``target_cpu`` value of the 2024 patch; both at once, or a CPU the machine lacks,
  is EINVAL; the psock's backlog work then runs on that CPU. An update without one leaves
  the psock's CPU as it was (a new psock is unbound).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
import threading
from typing import TYPE_CHECKING

from ...errors import KernelError
from ...uapi import (
    BPF_EXIST,
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY,
    BPF_F_SOCKMAP_TARGET_CPU,
    BPF_F_WRONLY,
    BPF_NOEXIST,
    MAX_BPF_STACK,
    AttachType,
    MapType,
)
from ..maps.arraymap import index_get_next_key
from ..maps.bpf_map import INT_MAX, U32_MAX, BpfMap, MapAttr, map_ops, roundup_pow_of_two, u32_key
from ..maps.jhash import jhash
from ..prog.memory import SOCK_REGION
from .devmap import HashBuckets
from .skmsg import SkPsock, SkPsockProgs, psock_table, sk_psock_init

if TYPE_CHECKING:
    from ..machine.machine import Machine

SOCK_CREATE_FLAG_MASK = BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY
SO_COOKIE = 57
TCP_ESTABLISHED = 1
TCP_LISTEN = 10
SHTAB_BUCKET_SIZE = 16  # sizeof(struct bpf_shtab_bucket)

# (family, type, protocol) whose struct proto has psock_update_sk_prot; None: any value.
_SUITABLE = (
    (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP),
    (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP),
    (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP),
    (socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_UDP),
    (socket.AF_UNIX, socket.SOCK_STREAM, None),
    (socket.AF_UNIX, socket.SOCK_DGRAM, None),
    (getattr(socket, "AF_VSOCK", 40), None, None),
)


class SockRef:
    """A socket held by a map: the fd it came in on, its inode and its cookie."""

    __slots__ = ("fd", "ino", "cookie", "listening", "psock")

    def __init__(self, fd: int, ino: int, cookie: int, listening: bool = False) -> None:
        self.fd = fd
        self.ino = ino
        self.cookie = cookie
        self.listening = listening  # sock_map_redirect_allowed refuses listening TCP
        self.psock: SkPsock | None = None

    def alive(self) -> bool:
        try:
            return os.fstat(self.fd).st_ino == self.ino
        except OSError:
            return False


def _suitable(family: int, sock_type: int, proto: int) -> bool:
    for want_family, want_type, want_proto in _SUITABLE:
        if (family == want_family and want_type in (None, sock_type)
                and want_proto in (None, proto)):
            return True
    return False


def _state_allowed(sock: socket.socket) -> bool:
    """sock_map_sk_state_allowed: TCP established or listening; UDP bound (hashed); unix and
    vsock streams connected."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        if sock.type == socket.SOCK_STREAM:
            state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
            return state in (TCP_ESTABLISHED, TCP_LISTEN)
        return sock.getsockname()[1] != 0
    if sock.type == socket.SOCK_STREAM:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            return False
        try:
            sock.getpeername()
        except OSError:
            return False
    return True


def sock_from_fd(value: bytes, value_size: int) -> SockRef:
    """The checks of sock_map_update_elem_sys up to the socket state; the socket's SockRef."""
    ufd = int.from_bytes(value[:value_size], "little")
    if ufd > INT_MAX:
        raise KernelError(errno.EINVAL, f"socket fd {ufd} is over INT_MAX")
    try:
        st = os.fstat(ufd)
    except OSError:
        raise KernelError(errno.EBADF, f"fd {ufd} is not open in this process") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise KernelError(errno.ENOTSOCK, f"fd {ufd} is not a socket")
    sock = socket.socket(fileno=ufd)
    try:
        if not _suitable(sock.family, sock.type, sock.proto):
            raise KernelError(errno.EOPNOTSUPP, f"fd {ufd}: sockmaps take TCP, UDP, unix and "
                                                f"vsock sockets, not {sock.family!r}/"
                                                f"{sock.type!r}/proto {sock.proto}")
        if not _state_allowed(sock):
            raise KernelError(errno.EOPNOTSUPP, f"fd {ufd}: stream sockets must be connected "
                                                f"(TCP also listening) and UDP sockets bound "
                                                f"to enter a sockmap")
        cookie = struct.unpack("=Q", sock.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8))[0]
        listening = sock.type == socket.SOCK_STREAM and bool(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
    finally:
        sock.detach()  # the fd stays the caller's
    return SockRef(ufd, st.st_ino, cookie, listening)


class SockMapBase(BpfMap):
    """What SOCKMAP and SOCKHASH share: creation checks, socket values, cookie lookups."""

    @staticmethod
    def sock_common_alloc_check(attr: MapAttr, machine: Machine) -> None:
        """The checks sock_map_alloc and sock_hash_alloc share. Neither type's ops has a
        map_alloc_check: their checks come after map_create's own (a BPF token's among
        them), as each constructor makes them before it allocates."""
        if attr.max_entries == 0:
            raise KernelError(errno.EINVAL, "max_entries must be at least 1")
        if attr.value_size not in (4, 8):
            raise KernelError(errno.EINVAL, f"value_size {attr.value_size}: a sockmap value is a "
                                            f"socket fd, 4 or 8 bytes")
        if attr.map_flags & ~SOCK_CREATE_FLAG_MASK:
            raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x}: sockmaps accept only "
                                            f"NUMA_NODE, RDONLY and WRONLY")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        # stab->lock, or the shtab bucket locks (one for the whole map here): writers take
        # it. Reentrant: a closed socket that lookup_sock finds inside an update or delete
        # is dropped under it too.
        self.lock = threading.RLock()
        self.progs = SkPsockProgs()
        self.psocks = psock_table(machine)

    # -- programs ----------------------------------------------------------------------------
    def sock_map_prog_link_lookup(self, which: int) -> str:
        """The slot of attach type ``which``; EBUSY for a verdict beside the other kind."""
        progs = self.progs
        if which == AttachType.SK_MSG_VERDICT:
            return "msg_parser"
        if which == AttachType.SK_SKB_STREAM_PARSER:
            return "stream_parser"
        if which == AttachType.SK_SKB_STREAM_VERDICT:
            if progs.skb_verdict is not None:
                raise KernelError(errno.EBUSY, "an SKB_VERDICT program is attached: stream "
                                               "and skb verdicts exclude each other")
            return "stream_verdict"
        if which == AttachType.SK_SKB_VERDICT:
            if progs.stream_verdict is not None:
                raise KernelError(errno.EBUSY, "a STREAM_VERDICT program is attached: stream "
                                               "and skb verdicts exclude each other")
            return "skb_verdict"
        raise KernelError(errno.EOPNOTSUPP, f"attach type {which} is not a sockmap program "
                                            "slot")

    def sock_map_prog_update(self, prog: object, old: object, link: object,
                             which: int) -> None:
        """prog_attach (prog), prog_detach (old), link attach (prog, link), link detach
        (old, link)."""
        with self.lock:
            slot = self.sock_map_prog_link_lookup(which)
            progs = self.progs
            if (link is None or prog is not None) and progs.links[slot] is not None:
                raise KernelError(errno.EBUSY, f"a link holds the map's {slot} program")
            if old is not None:
                if getattr(progs, slot) is not old:  # psock_replace_prog
                    raise KernelError(errno.ENOENT, f"that program is not the map's {slot}")
                setattr(progs, slot, prog)
                progs.links[slot] = None
            else:
                setattr(progs, slot, prog)
                if link is not None:
                    progs.links[slot] = link

    # -- psocks (sock_map_link, sock_map_unref) ----------------------------------------------
    def sock_map_link(self, ref: SockRef) -> SkPsock:
        """The socket's psock, made or taking this map's programs (EBUSY when it already
        has a program of a kind this map gives)."""
        new = {slot: getattr(self.progs, slot) for slot in SkPsockProgs.SLOTS}
        psock = self.psocks.by_ino.get(ref.ino)
        if psock is not None:
            have = psock.progs
            verdict = have.stream_verdict is not None or have.skb_verdict is not None
            if ((new["msg_parser"] and have.msg_parser) or
                    (new["stream_parser"] and have.stream_parser) or
                    ((new["skb_verdict"] or new["stream_verdict"]) and verdict)):
                raise KernelError(errno.EBUSY, "the socket already has a program of this kind "
                                               "from another map (or this one)")
        else:
            psock = sk_psock_init(self.psocks, ref)
        for slot, prog in new.items():
            if prog is not None:
                setattr(psock.progs, slot, prog)
        with psock.lock:
            psock.refcnt += 1
        if new["stream_verdict"] is not None or new["skb_verdict"] is not None:
            psock.sk_psock_start_verdict()
        ref.psock = psock
        return psock

    def sock_map_add_link(self, psock: SkPsock, link_raw: object,
                          target_cpu: int | None) -> None:
        psock.links.append((self, link_raw))
        if target_cpu is not None:
            psock.target_cpu = target_cpu

    def sock_map_unref(self, ref: SockRef, link_raw: object) -> None:
        """sock_map_unref + sock_map_del_link: the entry's link goes; leaving a map whose
        parser / verdict runs on the socket stops them."""
        psock = ref.psock
        if psock is None:
            return
        try:
            psock.links.remove((self, link_raw))
        except ValueError:
            return
        if psock.receiver is not None:
            if self.progs.stream_parser is not None:
                psock.progs.stream_parser = None
            if self.progs.stream_verdict is not None or self.progs.skb_verdict is not None:
                psock.sk_psock_stop_verdict()
        psock.sk_psock_put()

    def sock_map_delete_from_link(self, ref: SockRef, link_raw: object) -> None:
        raise NotImplementedError

    def sock_map_target_cpu(self, flags: int, target_cpu: int | None
                            ) -> tuple[int, int | None]:
        """(the update flags, the target CPU or None) from either design."""
        if flags & BPF_F_SOCKMAP_TARGET_CPU:
            if target_cpu is not None:
                raise KernelError(errno.EINVAL, "target_cpu given twice: in flags "
                                  "(BPF_F_SOCKMAP_TARGET_CPU) and as target_cpu")
            target_cpu = flags >> 32
            flags &= 0xFFFF_FFFF & ~BPF_F_SOCKMAP_TARGET_CPU
        if target_cpu is not None and target_cpu >= self.machine.num_cpus:
            raise KernelError(errno.EINVAL, f"target CPU {target_cpu}: the machine has CPUs "
                                            f"0-{self.machine.num_cpus - 1}")
        return flags, target_cpu

    def lookup_sock(self, key: bytes) -> SockRef | None:
        """The socket under ``key`` (__sock_map_lookup_elem / __sock_hash_lookup_elem), used by
        the syscall lookups and by bpf_sk_redirect_map / bpf_sk_redirect_hash."""
        raise NotImplementedError

    def sock_map_lookup(self, key: bytes) -> bytearray | None:
        """sock_map_lookup / sock_hash_lookup: programs get no socket pointer here (sockets
        are not memory the emulated engine can point into)."""
        return None

    def sock_map_lookup_sys(self, key: bytes, flags: int = 0) -> bytes:
        """sock_map_lookup_sys / sock_hash_lookup_sys: the socket's cookie."""
        if self.value_size != 8:
            raise KernelError(errno.ENOSPC, "user space reads socket cookies (u64): create the "
                                            "map with value_size 8 to look elements up")
        ref = self.lookup_sock(key)
        if ref is None:
            raise KernelError(errno.ENOENT, "no socket under this key")
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        return ref.cookie.to_bytes(8, "little")

    def sock_map_update_elem_sys(self, key: bytes, value: bytes, flags: int,
                                 target_cpu: int | None = None) -> None:
        ref = sock_from_fd(value, self.value_size)
        flags, target_cpu = self.sock_map_target_cpu(flags, target_cpu)
        if flags > BPF_EXIST:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: use BPF_ANY, BPF_NOEXIST or "
                                            f"BPF_EXIST (and BPF_F_SOCKMAP_TARGET_CPU)")
        with self.lock:
            self.update_common(key, ref, flags, target_cpu)
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)

    def update_common(self, key: bytes, ref: SockRef, flags: int,
                      target_cpu: int | None) -> None:
        raise NotImplementedError

    value_is_socket = True

    def sock_map_update_elem(self, key: bytes, sk: int, flags: int) -> None:
        """sock_map_update_elem, from a program: ``sk`` is the socket pointer the program
        passed as the value. The one socket a program holds here is a test run's skb->sk,
        the kernel's dummy (bpf_prog_test_run_skb: sk_alloc(AF_UNSPEC) with bpf_dummy_proto):
        a full socket (sk_fullsock), of no protocol a sockmap takes, so EOPNOTSUPP
        (sock_map_sk_is_suitable) before the key or the flags are looked at. Other sockets
        are not emulated in programs."""
        if not sk:
            raise KernelError(errno.EINVAL, "no socket (NULL)")
        if sk >> 32 == SOCK_REGION:
            raise KernelError(errno.EOPNOTSUPP, "a test run's socket is of no protocol a "
                                                "sockmap takes (sock_map_sk_is_suitable)")
        raise KernelError(errno.EINVAL, "programs cannot store sockets other than a test "
                                        "run's in the emulated backend")

    map_lookup_elem = sock_map_lookup
    map_update_elem = sock_map_update_elem
    bpf_map_copy_value = sock_map_lookup_sys
    bpf_map_update_value = sock_map_update_elem_sys


@map_ops(MapType.SOCKMAP)
class SockMap(SockMapBase):
    """struct bpf_stab: an array of sockets."""

    @staticmethod
    def sock_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
        SockMapBase.sock_common_alloc_check(attr, machine)
        if attr.key_size != 4:
            raise KernelError(errno.EINVAL, f"sockmap keys are u32 indices: key_size must be 4, "
                                            f"got {attr.key_size}")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        self.sock_map_alloc_check(attr, machine)
        super().__init__(attr, machine, node)
        self.sks: dict[int, SockRef] = {}

    def lookup_sock(self, key: bytes) -> SockRef | None:
        index = u32_key(key)
        ref = self.sks.get(index)
        if ref is not None and not ref.alive():
            self.sock_map_delete_from_link(ref, index)  # sock_map_close: the socket went
            return None
        return ref

    def sock_map_delete_from_link(self, ref: SockRef, link_raw: object) -> None:
        with self.lock:
            if self.sks.get(link_raw) is not ref:
                return
            del self.sks[link_raw]
            self.sock_map_unref(ref, link_raw)

    def sock_map_update_common(self, key: bytes, ref: SockRef, flags: int,
                               target_cpu: int | None) -> None:
        index = u32_key(key)
        if index >= self.max_entries:
            raise KernelError(errno.E2BIG, f"index {index} is out of range (max_entries "
                                           f"{self.max_entries})")
        psock = self.sock_map_link(ref)
        old = self.lookup_sock(key)
        if (old is not None and flags == BPF_NOEXIST) or (old is None and flags == BPF_EXIST):
            psock.sk_psock_put()
            if old is not None:
                raise KernelError(errno.EEXIST, f"slot {index} holds a socket and BPF_NOEXIST "
                                                f"was given")
            raise KernelError(errno.ENOENT, f"slot {index} is empty and BPF_EXIST was given")
        self.sock_map_add_link(psock, index, target_cpu)
        self.sks[index] = ref
        if old is not None:
            self.sock_map_unref(old, index)

    def sock_map_delete_elem(self, key: bytes) -> None:
        index = u32_key(key)
        if index >= self.max_entries:
            raise KernelError(errno.EINVAL, f"index {index} is out of range (max_entries "
                                            f"{self.max_entries})")
        with self.lock:
            ref = self.lookup_sock(key)
            if ref is None:
                raise KernelError(errno.EINVAL, f"slot {index} holds no socket")
            del self.sks[index]
            self.sock_map_unref(ref, index)

    def sock_map_free(self) -> None:
        with self.lock:
            for index, ref in list(self.sks.items()):
                del self.sks[index]
                self.sock_map_unref(ref, index)

    def sock_map_get_next_key(self, key: bytes | None) -> bytes:
        return index_get_next_key(self.max_entries, key)

    # struct bpf_map_ops sock_map_ops
    map_free = sock_map_free
    map_delete_elem = sock_map_delete_elem
    map_get_next_key = sock_map_get_next_key
    update_common = sock_map_update_common


def sock_hash_bucket_hash(key: bytes) -> int:
    return jhash(key, 0)


@map_ops(MapType.SOCKHASH)
class SockHash(SockMapBase):
    """struct bpf_shtab: sockets under arbitrary keys."""

    @staticmethod
    def sock_hash_alloc_check(attr: MapAttr, machine: Machine) -> None:
        SockMapBase.sock_common_alloc_check(attr, machine)
        if attr.key_size == 0:
            raise KernelError(errno.EINVAL, "key_size must be at least 1")
        if attr.key_size > MAX_BPF_STACK:
            raise KernelError(errno.E2BIG, f"key_size {attr.key_size} is over {MAX_BPF_STACK}")
        buckets = roundup_pow_of_two(attr.max_entries)
        if buckets > U32_MAX or buckets > U32_MAX // SHTAB_BUCKET_SIZE:
            raise KernelError(errno.EINVAL, f"max_entries {attr.max_entries} needs too many "
                                            f"buckets")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        self.sock_hash_alloc_check(attr, machine)
        super().__init__(attr, machine, node)
        self.table = HashBuckets(attr.max_entries, sock_hash_bucket_hash)

    def _prune(self) -> None:
        """Drop entries whose socket was closed (sock_map_close removes them in the kernel)."""
        with self.lock:
            for entry in [e for e in self.table.entries() if not e[1].alive()]:
                self.sock_map_delete_from_link(entry[1], entry)

    def sock_map_delete_from_link(self, ref: SockRef, link_raw: object) -> None:
        """sock_hash_delete_from_link: the element ``link_raw`` goes if still there."""
        with self.lock:
            if self.table.find(link_raw[0]) is not link_raw:  # type: ignore[index]
                return
            self.table.remove(link_raw)  # type: ignore[arg-type]
            self.sock_map_unref(ref, link_raw)

    def lookup_sock(self, key: bytes) -> SockRef | None:
        entry = self.table.find(key)
        if entry is not None and not entry[1].alive():
            self.sock_map_delete_from_link(entry[1], entry)
            return None
        return None if entry is None else entry[1]

    def sock_hash_update_common(self, key: bytes, ref: SockRef, flags: int,
                                target_cpu: int | None) -> None:
        self._prune()
        psock = self.sock_map_link(ref)
        old = self.table.find(key)
        try:
            if old is not None and flags == BPF_NOEXIST:
                raise KernelError(errno.EEXIST, "the key holds a socket and BPF_NOEXIST was "
                                                "given")
            if old is None and flags == BPF_EXIST:
                raise KernelError(errno.ENOENT, "the key is absent and BPF_EXIST was given")
            if old is None and self.table.count >= self.max_entries:
                raise KernelError(errno.E2BIG, f"the map is full ({self.max_entries} sockets)")
        except KernelError:
            psock.sk_psock_put()
            raise
        # The new element goes to the head of its bucket; a replaced one leaves.
        self.table.add_head(key, ref)
        self.sock_map_add_link(psock, self.table.find(key), target_cpu)
        if old is not None:
            self.table.remove(old)
            self.sock_map_unref(old[1], old)

    def sock_hash_delete_elem(self, key: bytes) -> None:
        with self.lock:
            entry = self.table.find(key)
            if entry is None or not entry[1].alive():
                if entry is not None:
                    self.sock_map_delete_from_link(entry[1], entry)
                raise KernelError(errno.ENOENT, "no socket under this key")
            self.table.remove(entry)
            self.sock_map_unref(entry[1], entry)

    def sock_hash_free(self) -> None:
        with self.lock:
            for entry in list(self.table.entries()):
                self.table.remove(entry)
                self.sock_map_unref(entry[1], entry)

    def sock_hash_get_next_key(self, key: bytes | None) -> bytes:
        self._prune()
        return self.table.get_next_key(key)

    # struct bpf_map_ops sock_hash_ops
    map_free = sock_hash_free
    map_delete_elem = sock_hash_delete_elem
    map_get_next_key = sock_hash_get_next_key
    update_common = sock_hash_update_common
