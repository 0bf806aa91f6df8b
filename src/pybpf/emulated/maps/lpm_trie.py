"""LPM_TRIE: longest-prefix-match trie (kernel/bpf/lpm_trie.c, the >= 6.13 form).

Rules this module keeps:
- Keys are ``struct bpf_lpm_trie_key_u8 { u32 prefixlen (host order); u8 data[] }``; data is
  big endian (bit 0 is the MSB of data[0]); max_prefixlen = 8 * (key_size - 4).
- Create (``trie_alloc``): max_entries 0, BPF_F_NO_PREALLOC missing, a flag outside
  NO_PREALLOC|NUMA_NODE|ACCESS, RDONLY_PROG+WRONLY_PROG, key_size outside 5..260, value_size
  outside 1..KMALLOC_MAX_SIZE-256-24 -> EINVAL.
- The trie has the kernel's exact shape: real nodes and intermediate (IM) nodes that only
  split the walk, children chosen by the first bit after a node's prefix. That shape fixes
  get_next_key's order: post-order (more specific prefixes first, child[0] before child[1]);
  a missing or invalid key gives the leftmost node.
- LOOKUP is longest-prefix match (prefixlen > max -> ENOENT). UPDATE: flags > BPF_EXIST or
  prefixlen > max -> EINVAL; a new element with BPF_EXIST -> ENOENT, into a full trie -> ENOSPC;
  an existing one with BPF_NOEXIST -> EEXIST; replacing works even when full. Bits past the
  prefix are stored as given and come back from get_next_key. DELETE: prefixlen > max ->
  EINVAL; no exact element -> ENOENT. LOOKUP_AND_DELETE -> ENOTSUPP; batches: generic
  lookup, update and delete.
- Nodes come from the current CPU's allocator cache, so a node lives on the node of the CPU
  that inserted it; lookups count their access against the node they return.
"""

from __future__ import annotations

import errno
import threading
from typing import TYPE_CHECKING

from ...accelerator import LPM_TRIE_WALK
from ...errors import KernelError
from ...uapi import (
    BPF_EXIST,
    BPF_F_ACCESS_MASK,
    BPF_F_NO_PREALLOC,
    BPF_F_NUMA_NODE,
    BPF_NOEXIST,
    KMALLOC_MAX_SIZE,
    MapType,
)
from .batch import generic_map_delete_batch, generic_map_lookup_batch, generic_map_update_batch
from .bpf_map import BpfMap, MapAttr, bpf_map_flags_access_ok, map_ops

if TYPE_CHECKING:
    from ..machine.machine import Machine

LPM_DATA_SIZE_MAX = 256
LPM_DATA_SIZE_MIN = 1
LPM_NODE_HEADER = 24  # sizeof(struct lpm_trie_node): two child pointers, prefixlen, flags
LPM_VAL_SIZE_MAX = KMALLOC_MAX_SIZE - LPM_DATA_SIZE_MAX - LPM_NODE_HEADER
LPM_VAL_SIZE_MIN = 1
LPM_KEY_SIZE_MIN = 4 + LPM_DATA_SIZE_MIN
LPM_KEY_SIZE_MAX = 4 + LPM_DATA_SIZE_MAX
LPM_CREATE_FLAG_MASK = BPF_F_NO_PREALLOC | BPF_F_NUMA_NODE | BPF_F_ACCESS_MASK


class LpmTrieNode:
    """struct lpm_trie_node. ``bits`` is ``data`` as a big-endian integer."""

    __slots__ = ("child", "prefixlen", "intermediate", "data", "bits", "value", "node")

    def __init__(self, prefixlen: int, data: bytes, bits: int, value: bytearray | None,
                 node: int) -> None:
        self.child: list[LpmTrieNode | None] = [None, None]
        self.prefixlen = prefixlen
        self.intermediate = value is None
        self.data = data
        self.bits = bits
        self.value = value
        self.node = node  # NUMA node of the memory


def trie_walk(root: LpmTrieNode | None, key: bytes, data_size: int) -> LpmTrieNode | None:
    """trie_lookup_elem's walk from ``root``: the node of the longest prefix matching
    ``key`` (prefixlen past 8 * ``data_size``: none). The C twin (_lpm_trie.c) runs instead
    where it is built; this is its reference."""
    prefixlen = int.from_bytes(key[:4], "little")
    max_prefixlen = 8 * data_size
    if prefixlen > max_prefixlen:
        return None
    bits = int.from_bytes(key[4:4 + data_size], "big")
    found = None
    node = root
    while node is not None:
        node_prefixlen = node.prefixlen
        # __longest_prefix_match: common leading bits, capped by both prefix lengths
        matchlen = min(max_prefixlen - (node.bits ^ bits).bit_length(), node_prefixlen,
                       prefixlen)
        if matchlen == max_prefixlen:
            found = node
            break
        if matchlen < node_prefixlen:
            break
        if not node.intermediate:
            found = node
        node = node.child[(bits >> (max_prefixlen - 1 - node_prefixlen)) & 1]
    return found


_TRIE_WALK = trie_walk if LPM_TRIE_WALK is None else LPM_TRIE_WALK


@map_ops(MapType.LPM_TRIE)
class LpmTrie(BpfMap):
    """struct lpm_trie."""

    @staticmethod
    def trie_alloc_check(attr: MapAttr, machine: Machine) -> None:
        """trie_alloc's checks, made before it allocates."""
        # trie_alloc does these checks itself (there is no map_alloc_check); none allocates.
        if attr.max_entries == 0:
            raise KernelError(errno.EINVAL, "max_entries must be at least 1")
        if not attr.map_flags & BPF_F_NO_PREALLOC:
            raise KernelError(errno.EINVAL, "LPM tries must be created with BPF_F_NO_PREALLOC")
        if attr.map_flags & ~LPM_CREATE_FLAG_MASK:
            raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x}: LPM tries accept "
                                            f"only NO_PREALLOC, NUMA_NODE and the access flags")
        if not bpf_map_flags_access_ok(attr.map_flags):
            raise KernelError(errno.EINVAL, "BPF_F_RDONLY_PROG and BPF_F_WRONLY_PROG exclude "
                                            "each other")
        if not LPM_KEY_SIZE_MIN <= attr.key_size <= LPM_KEY_SIZE_MAX:
            raise KernelError(errno.EINVAL, f"key_size {attr.key_size}: an LPM key is a u32 "
                                            f"prefixlen plus 1..256 data bytes (5..260)")
        if not LPM_VAL_SIZE_MIN <= attr.value_size <= LPM_VAL_SIZE_MAX:
            raise KernelError(errno.EINVAL, f"value_size {attr.value_size} is outside "
                                            f"{LPM_VAL_SIZE_MIN}..{LPM_VAL_SIZE_MAX}")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        self.data_size = attr.key_size - 4
        self.max_prefixlen = 8 * self.data_size
        self.root: LpmTrieNode | None = None
        self.n_entries = 0
        # trie->lock: updates and deletes are serialised; lookups walk without it (RCU).
        self.lock = threading.Lock()
        lpm_core = getattr(self.timing.c_extension, "LpmCore", None)
        if lpm_core is not None:
            # A program's lookup in C (_lpm_trie.c), charged to the C model (or to nothing
            # without modeled time); trie_lookup_elem is its reference.
            self.c_helpers = {"lookup": lpm_core(self).helper_lookup}

    # -- helpers --------------------------------------------------------------------------------
    def _split_key(self, key: bytes) -> tuple[int, bytes, int]:
        prefixlen = int.from_bytes(key[:4], "little")
        data = bytes(key[4:4 + self.data_size])
        return prefixlen, data, int.from_bytes(data, "big")

    def _extract_bit(self, bits: int, index: int) -> int:
        return (bits >> (self.max_prefixlen - 1 - index)) & 1

    def _longest_prefix_match(self, node: LpmTrieNode, prefixlen: int, bits: int) -> int:
        limit = min(node.prefixlen, prefixlen)
        common = self.max_prefixlen - (node.bits ^ bits).bit_length()
        return min(common, limit)

    def _new_node(self, prefixlen: int, data: bytes, bits: int,
                  value: bytes | None) -> LpmTrieNode:
        stored = None if value is None else bytearray(value[:self.value_size])
        return LpmTrieNode(prefixlen, data, bits, stored, self.machine.numa_node_id())

    def _key_of(self, node: LpmTrieNode) -> bytes:
        return node.prefixlen.to_bytes(4, "little") + node.data

    # -- lookup ---------------------------------------------------------------------------------
    def _trie_lookup(self, key: bytes) -> LpmTrieNode | None:
        """trie_lookup_elem's walk, and the access to the node it finds."""
        found = _TRIE_WALK(self.root, key, self.data_size)
        if found is not None:
            self.access_stats.access(self.machine.current_cpu(), found.node)
        return found

    def trie_lookup_elem(self, key: bytes) -> bytearray | None:
        self.timing.charge(self.machine.current.cpu, "trie_lookup_elem")  # nodes not placed
        found = self._trie_lookup(key)
        return None if found is None else found.value

    # -- update -----------------------------------------------------------------------------
    def _check_add_elem(self, flags: int) -> int:
        if flags == BPF_EXIST:
            return -errno.ENOENT
        if self.n_entries == self.max_entries:
            return -errno.ENOSPC
        self.n_entries += 1
        return 0

    def _trie_update_elem(self, key: bytes, value: bytes, flags: int) -> int:
        """trie_update_elem under the trie's lock; 0 or a negative errno."""
        if flags > BPF_EXIST:
            return -errno.EINVAL
        prefixlen, data, bits = self._split_key(key)
        if prefixlen > self.max_prefixlen:
            return -errno.EINVAL
        new_node = self._new_node(prefixlen, data, bits, value)

        parent: LpmTrieNode | None = None  # owner of the slot; None means the root slot
        slot_bit = 0
        node = self.root
        matchlen = 0
        while node is not None:
            matchlen = self._longest_prefix_match(node, prefixlen, bits)
            if node.prefixlen != matchlen or node.prefixlen == prefixlen:
                break
            parent, slot_bit = node, self._extract_bit(bits, node.prefixlen)
            node = node.child[slot_bit]

        def assign(target: LpmTrieNode) -> None:
            if parent is None:
                self.root = target
            else:
                parent.child[slot_bit] = target

        if node is None:
            err = self._check_add_elem(flags)
            if err:
                return err
            assign(new_node)
            return 0

        if node.prefixlen == matchlen:
            # Same prefix: replace the element (or fill in an intermediate node).
            if not node.intermediate:
                if flags == BPF_NOEXIST:
                    return -errno.EEXIST
            else:
                err = self._check_add_elem(flags)
                if err:
                    return err
            new_node.child = node.child
            assign(new_node)
            return 0

        err = self._check_add_elem(flags)
        if err:
            return err

        if matchlen == prefixlen:
            # The new prefix contains the node's: insert it above.
            new_node.child[self._extract_bit(node.bits, matchlen)] = node
            assign(new_node)
            return 0

        im_node = LpmTrieNode(matchlen, node.data, node.bits, None,
                              self.machine.numa_node_id())
        if self._extract_bit(bits, matchlen):
            im_node.child = [node, new_node]
        else:
            im_node.child = [new_node, node]
        assign(im_node)
        return 0

    def trie_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        with self.lock:
            err = self._trie_update_elem(key, value, flags)
        if not err:
            return
        prefixlen = int.from_bytes(key[:4], "little")
        if err == -errno.EINVAL:
            if flags > BPF_EXIST:
                raise KernelError(errno.EINVAL, f"flags {flags:#x}: use BPF_ANY, BPF_NOEXIST or "
                                                f"BPF_EXIST")
            raise KernelError(errno.EINVAL, f"prefixlen {prefixlen} is over the trie's maximum "
                                            f"{self.max_prefixlen}")
        detail = {
            errno.ENOENT: "no element with this prefix exists and BPF_EXIST was given",
            errno.ENOSPC: f"the trie is full ({self.max_entries} elements)",
            errno.EEXIST: "an element with this prefix exists and BPF_NOEXIST was given",
        }[-err]
        raise KernelError(-err, detail)

    # -- delete -------------------------------------------------------------------------------
    def _trie_delete_elem(self, key: bytes) -> int:
        """trie_delete_elem under the trie's lock; 0 or a negative errno."""
        prefixlen, _data, bits = self._split_key(key)
        if prefixlen > self.max_prefixlen:
            return -errno.EINVAL
        # trim: (owner, bit) of the slot pointing to node; trim2: the slot pointing to parent.
        trim: tuple[LpmTrieNode | None, int] = (None, 0)
        trim2 = trim
        parent: LpmTrieNode | None = None
        node = self.root
        matchlen = 0
        while node is not None:
            matchlen = self._longest_prefix_match(node, prefixlen, bits)
            if node.prefixlen != matchlen or node.prefixlen == prefixlen:
                break
            parent = node
            trim2 = trim
            trim = (node, self._extract_bit(bits, node.prefixlen))
            node = node.child[trim[1]]

        if (node is None or node.prefixlen != prefixlen or node.prefixlen != matchlen
                or node.intermediate):
            return -errno.ENOENT

        def assign(slot: tuple[LpmTrieNode | None, int], target: LpmTrieNode | None) -> None:
            owner, bit = slot
            if owner is None:
                self.root = target
            else:
                owner.child[bit] = target

        self.n_entries -= 1
        if node.child[0] is not None and node.child[1] is not None:
            node.intermediate = True
            node.value = None
            return 0
        if (parent is not None and parent.intermediate
                and node.child[0] is None and node.child[1] is None):
            sibling = parent.child[1] if parent.child[0] is node else parent.child[0]
            assign(trim2, sibling)
            return 0
        assign(trim, node.child[0] if node.child[0] is not None else node.child[1])
        return 0

    def trie_delete_elem(self, key: bytes) -> None:
        with self.lock:
            err = self._trie_delete_elem(key)
        if err == -errno.EINVAL:
            raise KernelError(errno.EINVAL, f"prefixlen {int.from_bytes(key[:4], 'little')} is "
                                            f"over the trie's maximum {self.max_prefixlen}")
        if err:
            raise KernelError(errno.ENOENT, "no element with exactly this prefix")

    # -- iteration ----------------------------------------------------------------------------
    @staticmethod
    def _leftmost(search_root: LpmTrieNode) -> LpmTrieNode:
        """The first non-intermediate node in post-order under ``search_root``."""
        next_node = search_root
        node: LpmTrieNode | None = search_root
        while node is not None:
            if node.intermediate:
                node = node.child[0]
            else:
                next_node = node
                node = node.child[0]
                if node is None:
                    node = next_node.child[1]
        return next_node

    def trie_get_next_key(self, key: bytes | None) -> bytes:
        """trie_get_next_key: post-order; a missing or invalid key gives the leftmost node."""
        search_root = self.root
        if search_root is None:
            raise KernelError(errno.ENOENT, "the trie is empty")
        if key is None:
            return self._key_of(self._leftmost(search_root))
        prefixlen, _data, bits = self._split_key(key)
        if prefixlen > self.max_prefixlen:
            return self._key_of(self._leftmost(search_root))

        stack: list[LpmTrieNode] = []
        node = search_root
        matchlen = 0
        while node is not None:
            stack.append(node)
            matchlen = self._longest_prefix_match(node, prefixlen, bits)
            if node.prefixlen != matchlen or node.prefixlen == prefixlen:
                break
            node = node.child[self._extract_bit(bits, node.prefixlen)]
        if node is None or node.prefixlen != matchlen or node.intermediate:
            return self._key_of(self._leftmost(search_root))

        node = stack[-1]
        for depth in range(len(stack) - 1, 0, -1):
            parent = stack[depth - 1]
            if parent.child[0] is node and parent.child[1] is not None:
                return self._key_of(self._leftmost(parent.child[1]))
            if not parent.intermediate:
                return self._key_of(parent)
            node = parent
        raise KernelError(errno.ENOENT, "the key is the last one in the trie's order")

    # -- bookkeeping --------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """The trie's shape is the kernel's; raises RuntimeError if not.

        Every intermediate node has two children; a child extends its parent's prefix and
        sits under the bit that follows it; n_entries counts the real nodes.
        """
        problems = []
        real = 0
        stack = [(self.root, None, 0)]
        while stack:
            node, parent, bit = stack.pop()
            if node is None:
                continue
            if node.intermediate:
                if node.child[0] is None or node.child[1] is None:
                    problems.append(f"intermediate node /{node.prefixlen} lacks a child")
            else:
                real += 1
            if parent is not None:
                if node.prefixlen <= parent.prefixlen:
                    problems.append(f"/{node.prefixlen} under /{parent.prefixlen}")
                elif self._longest_prefix_match(parent, node.prefixlen, node.bits) \
                        != parent.prefixlen:
                    problems.append(f"/{node.prefixlen} does not extend its parent's prefix")
                elif self._extract_bit(node.bits, parent.prefixlen) != bit:
                    problems.append(f"/{node.prefixlen} hangs under the wrong child")
            stack.extend((child, node, b) for b, child in enumerate(node.child))
        if real != self.n_entries:
            problems.append(f"{real} elements but n_entries {self.n_entries}")
        if problems:
            raise RuntimeError(f"{self.describe()}: " + "; ".join(problems))

    # struct bpf_map_ops trie_map_ops
    map_alloc_check = trie_alloc_check
    map_lookup_elem = trie_lookup_elem
    map_update_elem = trie_update_elem
    map_delete_elem = trie_delete_elem
    map_get_next_key = trie_get_next_key
    map_lookup_batch = generic_map_lookup_batch
    map_update_batch = generic_map_update_batch
    map_delete_batch = generic_map_delete_batch
