"""QUEUE and STACK (kernel/bpf/queue_stack_maps.c).

Rules this module keeps:
- Create (``queue_stack_map_alloc_check``): max_entries 0, key_size != 0, value_size 0, a flag
  outside NUMA_NODE|ACCESS, or RDONLY_PROG+WRONLY_PROG -> EINVAL; value_size over
  KMALLOC_MAX_SIZE -> E2BIG.
- Keyless: the syscall layer passes no key. UPDATE is push: BPF_NOEXIST or an unknown flag ->
  EINVAL; full -> E2BIG unless BPF_EXIST, which first drops the *oldest* element (the bottom of
  a stack too). LOOKUP is peek and LOOKUP_AND_DELETE is pop (any flag -> EINVAL): empty ->
  ENOENT; a queue gives its oldest element, a stack its newest. DELETE and GET_NEXT_KEY ->
  EINVAL; batches -> ENOTSUPP (no handler).
- Programs use bpf_map_push_elem / pop / peek; their map_lookup_elem finds nothing and their
  update/delete give -EINVAL, as in the kernel (BpfMap's defaults).
- The kernel's ring of max_entries + 1 slots is a deque here: the order of elements is the
  same, and memory follows what is stored, not max_entries.
"""

from __future__ import annotations

import errno
import threading
from collections import deque
from typing import TYPE_CHECKING

from ...errors import KernelError
from ...uapi import (
    BPF_EXIST,
    BPF_F_ACCESS_MASK,
    BPF_F_NUMA_NODE,
    BPF_NOEXIST,
    KMALLOC_MAX_SIZE,
    MapType,
)
from .bpf_map import BpfMap, MapAttr, bpf_map_flags_access_ok, map_ops

if TYPE_CHECKING:
    from ..machine.machine import Machine

QUEUE_STACK_CREATE_FLAG_MASK = BPF_F_NUMA_NODE | BPF_F_ACCESS_MASK


class QueueStackBase(BpfMap):
    """struct bpf_queue_stack: what QUEUE and STACK share (creation, push)."""

    @staticmethod
    def queue_stack_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
        if attr.max_entries == 0:
            raise KernelError(errno.EINVAL, "max_entries must be at least 1")
        if attr.key_size != 0:
            raise KernelError(errno.EINVAL, f"queues and stacks have no keys: key_size must be "
                                            f"0, got {attr.key_size}")
        if attr.value_size == 0:
            raise KernelError(errno.EINVAL, "value_size must be at least 1")
        if attr.map_flags & ~QUEUE_STACK_CREATE_FLAG_MASK:
            raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x}: queues and stacks "
                                            f"accept only NUMA_NODE and the access flags")
        if not bpf_map_flags_access_ok(attr.map_flags):
            raise KernelError(errno.EINVAL, "BPF_F_RDONLY_PROG and BPF_F_WRONLY_PROG exclude "
                                            "each other")
        if attr.value_size > KMALLOC_MAX_SIZE:
            raise KernelError(errno.E2BIG, f"value_size {attr.value_size} is over "
                                           f"KMALLOC_MAX_SIZE ({KMALLOC_MAX_SIZE})")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        """queue_stack_map_alloc."""
        super().__init__(attr, machine, node)
        # Oldest element on the left, newest on the right.
        self.elements: deque[bytes] = deque()
        self.lock = threading.Lock()  # qs->lock: push and pop are atomic across threads

    def _take(self) -> bytes:
        raise NotImplementedError

    def _peek(self) -> bytes:
        raise NotImplementedError

    def _count(self) -> None:
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)

    def queue_stack_map_push_elem(self, value: bytes, flags: int) -> None:
        if flags & BPF_NOEXIST or flags > BPF_EXIST:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: push takes BPF_ANY, or "
                              "BPF_EXIST to drop the oldest element when full")
        value = bytes(value[:self.value_size])
        with self.lock:
            if len(self.elements) >= self.max_entries:
                if not flags & BPF_EXIST:
                    raise KernelError(errno.E2BIG, f"the {self.kind} is full "
                                      f"({self.max_entries} elements); pass BPF_EXIST to drop "
                                      "the oldest")
                self.elements.popleft()  # make room: the oldest element goes
            self.elements.append(value)
        self._count()

    def _pop_or_peek(self, take: bool) -> bytes:
        """__queue_map_get / __stack_map_get: ``take`` pops, else peeks."""
        with self.lock:
            if not self.elements:
                raise KernelError(errno.ENOENT, f"the {self.kind} is empty")
            value = self._take() if take else self._peek()
        self._count()
        return value

    def queue_stack_map_pop_elem(self) -> bytes:
        return self._pop_or_peek(take=True)

    def queue_stack_map_peek_elem(self) -> bytes:
        return self._pop_or_peek(take=False)

    def queue_stack_map_lookup_elem(self, key: bytes | None) -> bytearray | None:
        return None

    def queue_stack_map_update_elem(self, key: bytes | None, value: bytes, flags: int) -> None:
        raise KernelError(errno.EINVAL, f"a {self.kind} takes pushes, not keyed updates")

    def queue_stack_map_copy_value(self, key: bytes | None, flags: int = 0) -> bytes:
        """bpf_map_copy_value of a queue or stack: map_peek_elem."""
        return self.map_peek_elem()

    def queue_stack_map_update_value(self, key: bytes | None, value: bytes,
                                     flags: int) -> None:
        """bpf_map_update_value of a queue or stack: map_push_elem."""
        self.map_push_elem(value, flags)

    def queue_stack_map_lookup_and_delete_elem(self, key: bytes | None, flags: int) -> bytes:
        """syscall.c's map_lookup_and_delete_elem of a queue or stack: map_pop_elem."""
        if flags:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: pop takes no flags")
        return self.map_pop_elem()

    def queue_stack_map_delete_elem(self, key: bytes | None) -> None:
        raise KernelError(errno.EINVAL, f"a {self.kind} has no keys to delete: pop with "
                                        f"map_lookup_and_delete_elem")

    def queue_stack_map_get_next_key(self, key: bytes | None) -> bytes:
        raise KernelError(errno.EINVAL, f"a {self.kind} has no keys to iterate")

    @property
    def kind(self) -> str:
        return "stack" if self.map_type == MapType.STACK else "queue"

    # struct bpf_map_ops queue_map_ops / stack_map_ops
    map_alloc_check = queue_stack_map_alloc_check
    map_lookup_elem = queue_stack_map_lookup_elem
    map_update_elem = queue_stack_map_update_elem
    map_delete_elem = queue_stack_map_delete_elem
    map_get_next_key = queue_stack_map_get_next_key
    map_push_elem = queue_stack_map_push_elem
    map_pop_elem = queue_stack_map_pop_elem
    map_peek_elem = queue_stack_map_peek_elem
    map_lookup_and_delete_elem = queue_stack_map_lookup_and_delete_elem
    bpf_map_copy_value = queue_stack_map_copy_value
    bpf_map_update_value = queue_stack_map_update_value


@map_ops(MapType.QUEUE)
class BpfQueue(QueueStackBase):
    """FIFO: peek and pop give the oldest element."""

    def _take(self) -> bytes:
        return self.elements.popleft()

    def _peek(self) -> bytes:
        return self.elements[0]


@map_ops(MapType.STACK)
class BpfStack(QueueStackBase):
    """LIFO: peek and pop give the newest element."""

    def _take(self) -> bytes:
        return self.elements.pop()

    def _peek(self) -> bytes:
        return self.elements[-1]
