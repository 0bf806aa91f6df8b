"""DEVMAP and DEVMAP_HASH (kernel/bpf/devmap.c): creation and element rules.

Rules this module keeps:
- Values are ``struct bpf_devmap_val { u32 ifindex; union { int fd; u32 id; } bpf_prog; }``
  cut to value_size (4: ifindex only, 8: with an XDP program fd on update, its id on lookup).
- Create (``dev_map_init_map``): max_entries 0, key_size != 4, value_size not 4 or 8, a flag
  outside NUMA_NODE|RDONLY|WRONLY -> EINVAL; DEVMAP_HASH with max_entries over 2^31 (its
  bucket count overflows) -> EINVAL. The kernel then adds BPF_F_RDONLY_PROG to map_flags
  (programs get a pointer into the device entry and must not write it).
- Devices: an ifindex must name a network device of the machine (``net_of(machine)``), else
  EINVAL (the kernel's ``dev_get_by_index`` failure). A program fd > 0 must be an XDP program
  loaded with expected_attach_type XDP_DEVMAP, else EINVAL. An entry holds a reference on its
  program; a replaced or deleted entry lets it go after an RCU grace period.
- DEVMAP: update flags > BPF_EXIST -> EINVAL, index >= max_entries -> E2BIG, BPF_NOEXIST ->
  EEXIST; ifindex 0 clears the slot (a prog fd with it -> EINVAL). Lookup of an empty slot or
  an index >= max_entries -> ENOENT. Delete of index >= max_entries -> EINVAL, else 0 even when
  empty. get_next_key walks every index.
- DEVMAP_HASH: flags > BPF_EXIST or ifindex 0 -> EINVAL; present + BPF_NOEXIST -> EEXIST;
  device/program checks (EINVAL) come before the capacity check (a new key beyond
  max_entries -> E2BIG); BPF_EXIST on an absent key inserts it. Buckets are indexed by the key
  itself (``key & (n_buckets - 1)``, no hash), new and replaced entries go to the front, and
  get_next_key walks buckets in order (a missing key restarts at the first).
- LOOKUP_AND_DELETE and batches -> ENOTSUPP.
- Data path (``dev_map_enqueue``, ``dev_xdp_enqueue``): a device without ``ndo_xdp_xmit`` is
  EOPNOTSUPP, one that is down ENETDOWN, a frame over MTU + Ethernet + VLAN header EMSGSIZE;
  otherwise the frame waits in the device's per-CPU bulk queue (16 frames; a full queue is
  sent first) until ``xdp_do_flush``. Sending runs the entry's program on each frame first
  (``egress_ifindex`` set; anything but PASS drops it), then ``ndo_xdp_xmit``; frames it did
  not take are freed and counted on the device (``xdp_xmit_err``). Broadcasts
  (``BPF_F_BROADCAST``) send a copy to every device of the map, the ingress device skipped
  with ``BPF_F_EXCLUDE_INGRESS``.
"""

from __future__ import annotations

import errno
import struct
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ...errors import KernelError
from ...uapi import (
    BPF_EXIST,
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY,
    BPF_F_XDP_HAS_FRAGS,
    BPF_NOEXIST,
    XDP_PASS,
    AttachType,
    MapType,
    ProgType,
)
from ..maps.arraymap import index_get_next_key
from ..maps.bpf_map import (
    BpfMap,
    MapAttr,
    bpf_prog_map_compatible,
    map_ops,
    roundup_pow_of_two,
    u32_key,
)
from .netdev import net_of
from .skbuff import SkBuff
from .xdp import (
    XdpBuff,
    _xdp_enqueue,
    bpf_prog_run_xdp,
    bq_enqueue,
    is_valid_dst,
    xdp_ok_fwd_dev,
)

if TYPE_CHECKING:
    from ..machine.machine import Machine

DEV_CREATE_FLAG_MASK = BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY


def resolve_xdp_prog(bpf_map: BpfMap, fd: int, attach_type: int) -> object:
    """The XDP program of fd ``fd``, stored with an entry of ``bpf_map`` (a devmap or cpumap):
    loaded with expected_attach_type ``attach_type``, then bpf_prog_map_compatible (the first
    one stored, or a program using the map, makes the map's owner; later ones need its
    xdp_has_frags). KernelError(EINVAL, why) when a check fails; the caller says it as its
    kernel function returns it."""
    try:
        prog = bpf_map.system.prog_from_fd(fd)
    except KernelError:
        raise KernelError(errno.EINVAL, f"fd {fd} is not a BPF program") from None
    if prog.prog_type != ProgType.XDP or prog.expected_attach_type != attach_type:
        raise KernelError(errno.EINVAL, f"fd {fd} is not an XDP program loaded with "
                          f"expected_attach_type BPF_{AttachType(attach_type).name}")
    if not bpf_prog_map_compatible(bpf_map, prog):
        frags = "with" if prog.prog_flags & BPF_F_XDP_HAS_FRAGS else "without"
        raise KernelError(errno.EINVAL, f"the program of fd {fd} ({frags} "
                          "BPF_F_XDP_HAS_FRAGS) is not compatible with the map's owner, the "
                          "first program stored in it or using it: load both with the same "
                          "BPF_F_XDP_HAS_FRAGS")
    return prog


class HashBuckets:
    """hlist buckets as devmap_hash and sockhash keep them: front insertion, per-bucket order.

    ``roundup_pow_of_two(max_entries)`` buckets; a key goes to bucket ``key_hash(key) &
    (n_buckets - 1)``; entries are ``[key, obj]``. Writers hold the owning map's lock;
    readers take none (RCU in the kernel), so they read buckets through copies.
    """

    def __init__(self, max_entries: int, key_hash: Callable[[bytes], int]) -> None:
        mask = roundup_pow_of_two(max_entries) - 1
        self.bucket_of = lambda key: key_hash(key) & mask
        self.buckets: dict[int, list[list]] = {}  # only non-empty buckets
        self.count = 0

    def find(self, key: bytes) -> list | None:
        for entry in tuple(self.buckets.get(self.bucket_of(key), ())):
            if entry[0] == key:
                return entry
        return None

    def add_head(self, key: bytes, obj: object) -> None:
        self.buckets.setdefault(self.bucket_of(key), []).insert(0, [key, obj])
        self.count += 1

    def remove(self, entry: list) -> None:
        index = self.bucket_of(entry[0])
        bucket = self.buckets[index]
        del bucket[next(pos for pos, e in enumerate(bucket) if e is entry)]
        if not bucket:
            del self.buckets[index]
        self.count -= 1

    def entries(self) -> Iterator[list]:
        for index in sorted(self.buckets):
            yield from tuple(self.buckets.get(index, ()))

    def _first_from(self, start: int) -> bytes:
        while True:
            later = [index for index in list(self.buckets) if index >= start]
            if not later:
                raise KernelError(errno.ENOENT, "no more keys")
            index = min(later)
            bucket = tuple(self.buckets.get(index, ()))
            if bucket:
                return bucket[0][0]
            start = index + 1  # emptied meanwhile

    def get_next_key(self, key: bytes | None) -> bytes:
        """The hash maps' get_next_key: next in the bucket, then the next non-empty bucket."""
        if key is None:
            return self._first_from(0)
        index = self.bucket_of(key)
        bucket = tuple(self.buckets.get(index, ()))
        for pos, entry in enumerate(bucket):
            if entry[0] == key:
                if pos + 1 < len(bucket):
                    return bucket[pos + 1][0]
                return self._first_from(index + 1)
        return self._first_from(0)


# -- the data path --------------------------------------------------------------------------------
class BpfDtabNetdev:
    """struct bpf_dtab_netdev: one entry: the device, its program, its live value."""

    __slots__ = ("system", "dev", "xdp_prog", "val", "idx")

    def __init__(self, system: Any, dev: Any, xdp_prog: Any, idx: int) -> None:
        self.system = system  # the holder of the program reference
        self.dev = dev
        self.xdp_prog = xdp_prog
        self.idx = idx
        self.val = bytearray(struct.pack("<II", dev.ifindex, xdp_prog.id if xdp_prog else 0))

    def xdp_enqueue(self, xdpf: XdpBuff, dev_rx: Any) -> int:
        """dev_map_enqueue: a redirect through the map."""
        return _xdp_enqueue(self.dev, xdpf, dev_rx, self.xdp_prog)

    def generic_redirect(self, skb: SkBuff) -> int:
        """dev_map_generic_redirect: the entry's program on the skb, then out of the device."""
        err = xdp_ok_fwd_dev(self.dev, skb.len)
        if err:
            return err
        if self.xdp_prog is not None:
            xdp = XdpBuff.from_bytes(skb.linearize(), skb.dev, skb.rx_queue)
            act, _ = bpf_prog_run_xdp(self.xdp_prog, xdp, self.dev.ifindex)
            if act != XDP_PASS:
                self.dev.net.stack.free_skb(skb)
                return 0  # the redirect succeeded; the program dropped it
            skb.data, skb.frags = bytearray(xdp.frame_bytes()), []
        skb.dev = self.dev
        self.dev.xmit_skb(skb)
        return 0

    def free(self) -> None:
        """__dev_map_entry_free: the program reference goes."""
        prog, self.xdp_prog = self.xdp_prog, None
        if prog is not None:
            self.system.bpf_prog_put(prog)


def skb_clone(skb: SkBuff, net: Any) -> SkBuff:
    """A copy of ``skb`` with its own head from the slab."""
    copy = net.skb_cache.kmem_cache_alloc_bulk(1)[0]
    copy.data, copy.frags = bytearray(skb.data), list(skb.frags)
    copy.dev, copy.protocol, copy.pkt_type = skb.dev, skb.protocol, skb.pkt_type
    copy.truesize, copy.rx_queue = skb.truesize, skb.rx_queue
    return copy


class DevMapBase(BpfMap):
    """What DEVMAP and DEVMAP_HASH share: creation, value parsing, the device check."""

    @staticmethod
    def dev_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
        """dev_map_alloc's checks, made before it allocates."""
        if attr.max_entries == 0:
            raise KernelError(errno.EINVAL, "max_entries must be at least 1")
        if attr.key_size != 4:
            raise KernelError(errno.EINVAL, f"devmap keys are u32: key_size must be 4, got "
                                            f"{attr.key_size}")
        if attr.value_size not in (4, 8):
            raise KernelError(errno.EINVAL, f"value_size {attr.value_size}: a devmap value is a "
                                            f"u32 ifindex (4) or ifindex + XDP prog fd (8)")
        if attr.map_flags & ~DEV_CREATE_FLAG_MASK:
            raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x}: devmaps accept only "
                                            f"NUMA_NODE, RDONLY and WRONLY")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        """dev_map_alloc."""
        super().__init__(attr, machine, node)
        self.map_flags |= BPF_F_RDONLY_PROG

    def _parse_value(self, value: bytes) -> tuple[int, int]:
        ifindex = int.from_bytes(value[:4], "little")
        prog_fd = struct.unpack("<i", value[4:8])[0] if self.value_size == 8 else 0
        return ifindex, prog_fd

    def dev_map_alloc_node(self, ifindex: int, prog_fd: int, key: int) -> BpfDtabNetdev:
        """__dev_map_alloc_node: the device, the program (a reference taken) and the
        entry's live ``bpf_devmap_val`` (ifindex, prog id)."""
        dev = net_of(self.machine).dev_get_by_index(ifindex)
        if dev is None:
            raise KernelError(errno.EINVAL, f"no network device has ifindex {ifindex}")
        prog = None
        if prog_fd > 0:
            prog = resolve_xdp_prog(self, prog_fd, AttachType.XDP_DEVMAP)
            self.system.bpf_prog_inc(prog)
        return BpfDtabNetdev(self.system, dev, prog, key)

    def _free_entry(self, entry: BpfDtabNetdev | None) -> None:
        """A replaced or deleted entry goes after a grace period (__dev_map_entry_free)."""
        if entry is not None:
            rcu = self.machine.rcu
            rcu.call_rcu(entry.free)
            rcu.poll()

    def dev_map_enqueue_multi(self, xdpf: XdpBuff, dev_rx: Any, exclude_ingress: bool) -> int:
        """A broadcast: a copy to each device of the map, the original to the last."""
        targets = [dst for dst in self.entries() if is_valid_dst(dst.dev, xdpf.len)
                   and not (exclude_ingress and dst.dev is dev_rx)]
        for dst in targets[:-1]:
            bq_enqueue(dst.dev, xdpf.clone(), dev_rx, dst.xdp_prog)
        if targets:
            bq_enqueue(targets[-1].dev, xdpf, dev_rx, targets[-1].xdp_prog)
        return 0

    def dev_map_redirect_multi(self, skb: SkBuff, exclude_ingress: bool) -> int:
        """A generic-XDP broadcast: a copy of the skb out of each device of the map."""
        targets = [dst for dst in self.entries() if not xdp_ok_fwd_dev(dst.dev, skb.len)
                   and not (exclude_ingress and dst.dev is skb.dev)]
        if not targets:
            return -errno.ENOENT
        for dst in targets[:-1]:
            dst.generic_redirect(skb_clone(skb, dst.dev.net))
        return targets[-1].generic_redirect(skb)

    def dev_map_free(self) -> None:
        """Every entry's program reference goes."""
        for entry in self.entries():
            entry.free()

    def _count(self) -> None:
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)


@map_ops(MapType.DEVMAP)
class DevMap(DevMapBase):
    """BPF_MAP_TYPE_DEVMAP: an array of devices."""

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        self.netdev_map: dict[int, BpfDtabNetdev] = {}

    def dev_map_lookup_elem(self, key: bytes) -> bytearray | None:
        self._count()
        entry = self.netdev_map.get(u32_key(key))
        return None if entry is None else entry.val

    def redirect_target(self, index: int) -> BpfDtabNetdev | None:
        return self.netdev_map.get(index)

    def entries(self) -> list[BpfDtabNetdev]:
        return [self.netdev_map[k] for k in sorted(self.netdev_map)]

    def dev_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        index = u32_key(key)
        if flags > BPF_EXIST:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: use BPF_ANY or BPF_EXIST")
        if index >= self.max_entries:
            raise KernelError(errno.E2BIG, f"index {index} is out of range (max_entries "
                                           f"{self.max_entries})")
        if flags == BPF_NOEXIST:
            raise KernelError(errno.EEXIST, "every devmap slot exists, so BPF_NOEXIST always "
                                            "fails")
        ifindex, prog_fd = self._parse_value(value)
        if not ifindex:
            if prog_fd > 0:
                raise KernelError(errno.EINVAL, "a program fd needs a device: ifindex is 0")
            self._free_entry(self.netdev_map.pop(index, None))
            return
        entry = self.dev_map_alloc_node(ifindex, prog_fd, index)
        old = self.netdev_map.get(index)
        self.netdev_map[index] = entry
        self._free_entry(old)
        self._count()

    def dev_map_delete_elem(self, key: bytes) -> None:
        index = u32_key(key)
        if index >= self.max_entries:
            raise KernelError(errno.EINVAL, f"index {index} is out of range (max_entries "
                                            f"{self.max_entries})")
        self._free_entry(self.netdev_map.pop(index, None))

    def dev_map_get_next_key(self, key: bytes | None) -> bytes:
        return index_get_next_key(self.max_entries, key)

    # struct bpf_map_ops dev_map_ops
    map_alloc_check = DevMapBase.dev_map_alloc_check
    map_lookup_elem = dev_map_lookup_elem
    map_update_elem = dev_map_update_elem
    map_delete_elem = dev_map_delete_elem
    map_get_next_key = dev_map_get_next_key
    map_free = DevMapBase.dev_map_free


@map_ops(MapType.DEVMAP_HASH)
class DevMapHash(DevMapBase):
    """BPF_MAP_TYPE_DEVMAP_HASH: devices keyed by any u32 (usually the ifindex)."""

    @staticmethod
    def dev_map_hash_alloc_check(attr: MapAttr, machine: Machine) -> None:
        DevMapBase.dev_map_alloc_check(attr, machine)
        if attr.max_entries > 1 << 31:
            raise KernelError(errno.EINVAL, f"max_entries {attr.max_entries}: the bucket count "
                                            f"(next power of two) would overflow u32")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        self.index = HashBuckets(attr.max_entries, u32_key)
        self.index_lock = threading.Lock()  # dtab->index_lock: updates and deletes

    def dev_map_hash_lookup_elem(self, key: bytes) -> bytearray | None:
        self._count()
        entry = self.index.find(key)
        return None if entry is None else entry[1].val

    def redirect_target(self, index: int) -> BpfDtabNetdev | None:
        entry = self.index.find(index.to_bytes(4, "little"))
        return None if entry is None else entry[1]

    def entries(self) -> list[BpfDtabNetdev]:
        return [entry[1] for entry in self.index.entries()]

    def dev_map_hash_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        ifindex, prog_fd = self._parse_value(value)
        if flags > BPF_EXIST or not ifindex:
            raise KernelError(errno.EINVAL, f"flags {flags:#x} / ifindex {ifindex}: use BPF_ANY, "
                                            f"BPF_NOEXIST or BPF_EXIST and a non-zero ifindex")
        with self.index_lock:
            old = self.index.find(key)
            if old is not None and flags & BPF_NOEXIST:
                raise KernelError(errno.EEXIST, f"key {u32_key(key)} is present and "
                                                f"BPF_NOEXIST was given")
            dev = self.dev_map_alloc_node(ifindex, prog_fd, u32_key(key))
            if old is not None:
                self.index.remove(old)
            elif self.index.count >= self.max_entries:
                dev.free()
                raise KernelError(errno.E2BIG, f"the map is full ({self.max_entries} devices)")
            self.index.add_head(key, dev)
        self._free_entry(old[1] if old is not None else None)
        self._count()

    def dev_map_hash_delete_elem(self, key: bytes) -> None:
        with self.index_lock:
            entry = self.index.find(key)
            if entry is None:
                raise KernelError(errno.ENOENT, f"no device under key {u32_key(key)}")
            self.index.remove(entry)
        self._free_entry(entry[1])

    def dev_map_hash_get_next_key(self, key: bytes | None) -> bytes:
        return self.index.get_next_key(key)

    # struct bpf_map_ops dev_map_hash_ops
    map_alloc_check = dev_map_hash_alloc_check
    map_lookup_elem = dev_map_hash_lookup_elem
    map_update_elem = dev_map_hash_update_elem
    map_delete_elem = dev_map_hash_delete_elem
    map_get_next_key = dev_map_hash_get_next_key
    map_free = DevMapBase.dev_map_free
