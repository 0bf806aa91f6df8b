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
  ENOTSUPP. Deliberate gap: no psock, verdict or redirect data path yet.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
import threading
from typing import TYPE_CHECKING

from ..errors import KernelError
from ..uapi import (
    BPF_EXIST,
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY,
    BPF_F_WRONLY,
    BPF_NOEXIST,
    MAX_BPF_STACK,
    MapType,
)
from .arraymap import index_get_next_key
from .bpf_map import INT_MAX, U32_MAX, BpfMap, MapAttr, map_ops, roundup_pow_of_two, u32_key
from .devmap import HashBuckets
from .jhash import jhash

if TYPE_CHECKING:
    from .machine import Machine

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

    __slots__ = ("fd", "ino", "cookie")

    def __init__(self, fd: int, ino: int, cookie: int) -> None:
        self.fd = fd
        self.ino = ino
        self.cookie = cookie

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
    finally:
        sock.detach()  # the fd stays the caller's
    return SockRef(ufd, st.st_ino, cookie)


class SockMapBase(BpfMap):
    """What SOCKMAP and SOCKHASH share: creation checks, socket values, cookie lookups."""

    @staticmethod
    def sock_common_alloc_check(attr: MapAttr, machine: Machine) -> None:
        """The checks sock_map_alloc and sock_hash_alloc share."""
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

    def lookup_sock(self, key: bytes) -> SockRef | None:
        """The socket under ``key`` (__sock_map_lookup_elem / __sock_hash_lookup_elem), used by
        the syscall lookups and by bpf_sk_redirect_map / bpf_sk_redirect_hash."""
        raise NotImplementedError

    def sock_map_lookup(self, key: bytes) -> bytearray | None:
        """sock_map_lookup / sock_hash_lookup: programs get no socket pointer here (the
        emulated backend does not run socket data paths)."""
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

    def sock_map_update_elem_sys(self, key: bytes, value: bytes, flags: int) -> None:
        ref = sock_from_fd(value, self.value_size)
        if flags > BPF_EXIST:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: use BPF_ANY, BPF_NOEXIST or "
                                            f"BPF_EXIST")
        with self.lock:
            self.update_common(key, ref, flags)
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)

    def update_common(self, key: bytes, ref: SockRef, flags: int) -> None:
        raise NotImplementedError

    def sock_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        """sock_map_update_elem, from a program: sockets are not emulated there."""
        raise KernelError(errno.EINVAL, "programs cannot store sockets in the emulated backend")

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
        super().__init__(attr, machine, node)
        self.sks: dict[int, SockRef] = {}

    def lookup_sock(self, key: bytes) -> SockRef | None:
        index = u32_key(key)
        ref = self.sks.get(index)
        if ref is not None and not ref.alive():
            with self.lock:  # sock_map_close: the socket went away
                if self.sks.get(index) is ref:
                    del self.sks[index]
            return None
        return ref

    def sock_map_update_common(self, key: bytes, ref: SockRef, flags: int) -> None:
        index = u32_key(key)
        if index >= self.max_entries:
            raise KernelError(errno.E2BIG, f"index {index} is out of range (max_entries "
                                           f"{self.max_entries})")
        old = self.lookup_sock(key)
        if old is not None and flags == BPF_NOEXIST:
            raise KernelError(errno.EEXIST, f"slot {index} holds a socket and BPF_NOEXIST was "
                                            f"given")
        if old is None and flags == BPF_EXIST:
            raise KernelError(errno.ENOENT, f"slot {index} is empty and BPF_EXIST was given")
        self.sks[index] = ref

    def sock_map_delete_elem(self, key: bytes) -> None:
        index = u32_key(key)
        if index >= self.max_entries:
            raise KernelError(errno.EINVAL, f"index {index} is out of range (max_entries "
                                            f"{self.max_entries})")
        with self.lock:
            if self.lookup_sock(key) is None:
                raise KernelError(errno.EINVAL, f"slot {index} holds no socket")
            del self.sks[index]

    def sock_map_get_next_key(self, key: bytes | None) -> bytes:
        return index_get_next_key(self.max_entries, key)

    # struct bpf_map_ops sock_map_ops
    map_alloc_check = sock_map_alloc_check
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
        super().__init__(attr, machine, node)
        self.table = HashBuckets(attr.max_entries, sock_hash_bucket_hash)

    def _prune(self) -> None:
        """Drop entries whose socket was closed (sock_map_close removes them in the kernel)."""
        with self.lock:
            for entry in [e for e in self.table.entries() if not e[1].alive()]:
                self.table.remove(entry)

    def _remove_dead(self, key: bytes, entry: list) -> None:
        with self.lock:
            if self.table.find(key) is entry:
                self.table.remove(entry)

    def lookup_sock(self, key: bytes) -> SockRef | None:
        entry = self.table.find(key)
        if entry is not None and not entry[1].alive():
            self._remove_dead(key, entry)
            return None
        return None if entry is None else entry[1]

    def sock_hash_update_common(self, key: bytes, ref: SockRef, flags: int) -> None:
        self._prune()
        old = self.table.find(key)
        if old is not None and flags == BPF_NOEXIST:
            raise KernelError(errno.EEXIST, "the key holds a socket and BPF_NOEXIST was given")
        if old is None and flags == BPF_EXIST:
            raise KernelError(errno.ENOENT, "the key is absent and BPF_EXIST was given")
        if old is None and self.table.count >= self.max_entries:
            raise KernelError(errno.E2BIG, f"the map is full ({self.max_entries} sockets)")
        # The new element goes to the head of its bucket; a replaced one leaves.
        self.table.add_head(key, ref)
        if old is not None:
            self.table.remove(old)

    def sock_hash_delete_elem(self, key: bytes) -> None:
        with self.lock:
            entry = self.table.find(key)
            if entry is None or not entry[1].alive():
                if entry is not None:
                    self.table.remove(entry)
                raise KernelError(errno.ENOENT, "no socket under this key")
            self.table.remove(entry)

    def sock_hash_get_next_key(self, key: bytes | None) -> bytes:
        self._prune()
        return self.table.get_next_key(key)

    # struct bpf_map_ops sock_hash_ops
    map_alloc_check = sock_hash_alloc_check
    map_delete_elem = sock_hash_delete_elem
    map_get_next_key = sock_hash_get_next_key
    update_common = sock_hash_update_common
