"""The BPF LRU (kernel/bpf/bpf_lru_list.c, Linux 6.16+ form), knowing nothing of hash tables.

Rules this module keeps:
- Nodes live on circular doubly linked lists with sentinels, exactly as ``list_head``:
  ``next`` goes from the front (newest) toward the back (oldest); ``list_add`` inserts at the
  front; walks "from the back" follow ``prev``.
- A node's list is its ``type``; which moves are legal is the data table ``LEGAL_MOVES``,
  checked on every move (a wrong move marks the LRU broken and raises).
- Common LRU (default): one global ACTIVE/INACTIVE/FREE set plus, per CPU, a local FREE and a
  local PENDING list; an insert takes a node from the local FREE list, refilling it from the
  global lists (flush pending, rotate, take up to ``target_free`` free nodes, shrink for the
  rest) and stealing from other CPUs when everything is elsewhere.
- Per-CPU LRU (BPF_F_NO_COMMON_LRU): each CPU owns a full list set; nodes never migrate.
- Eviction goes through the ``del_from_htab(node) -> bool`` callback the owner gives.
- ``check_invariants()`` verifies list membership, counters, the rotation cursor and that every
  node is on exactly one list.
- Modeled time (``timing``, when given): each list lock taken is a spinlock on its own line
  (the global lists' on the map's node, a CPU's local lists on that CPU's node); every node
  moved writes its line (its list_head); every node taken back from the lists for an insert
  costs ``bpf_lru_evict``.
- Where pybpf._cache_model is built, an LRU_HASH map's common LRU pops, refills and pushes in C
  (src/pybpf/_bpf_lru_list.c, for its HtabCore) on these same lists and nodes; the methods
  here are that code's reference, and do what it hands back (steals, making nodes, checks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ...accelerator import HostLock
from ..machine.counters import Counter, counter_array

if TYPE_CHECKING:
    from ..machine.timing import SpinLock, Timing

# enum bpf_lru_list_type
ACTIVE, INACTIVE, FREE, LOCAL_FREE, LOCAL_PENDING = range(5)
TYPE_NAMES = ("ACTIVE", "INACTIVE", "FREE", "LOCAL_FREE", "LOCAL_PENDING")
NR_LIST_COUNT = 2  # ACTIVE and INACTIVE are counted

LOCAL_FREE_TARGET = 128
LOCAL_NR_SCANS = LOCAL_FREE_TARGET
PERCPU_FREE_TARGET = 4
PERCPU_NR_SCANS = PERCPU_FREE_TARGET

# primitive -> {(from type, to type)} it may perform (bpf_lru_list.c's WARN_ON_ONCE checks).
_LRU = (ACTIVE, INACTIVE, FREE)
LEGAL_MOVES: dict[str, frozenset[tuple[int, int]]] = {
    # __bpf_lru_node_move: within the ACTIVE/INACTIVE/FREE set
    "move": frozenset((a, b) for a in _LRU for b in _LRU),
    # __bpf_lru_node_move_in: a flushed pending node enters ACTIVE or INACTIVE
    "move_in": frozenset({(LOCAL_PENDING, ACTIVE), (LOCAL_PENDING, INACTIVE)}),
    # __bpf_lru_node_move_to_free: an LRU node (or a shrunk one) onto a free list
    "move_to_free": frozenset((a, b) for a in _LRU for b in (FREE, LOCAL_FREE)),
    # __local_list_add_pending: a node handed to an insert (stolen ones may be pending)
    "add_pending": frozenset({(LOCAL_FREE, LOCAL_PENDING), (LOCAL_PENDING, LOCAL_PENDING)}),
    # bpf_lru_push_free of a pending node: back to its CPU's local free list
    "pending_to_free": frozenset({(LOCAL_PENDING, LOCAL_FREE)}),
}


def lru_target_free(max_entries: int, ncpus: int) -> int:
    """6.16+: clamp((max_entries / ncpu) / 2, 1, LOCAL_FREE_TARGET)."""
    return max(1, min(max_entries // ncpus // 2, LOCAL_FREE_TARGET))


class LruNode:
    """struct bpf_lru_node; hash elements embed it (subclass) as the kernel's do."""

    __slots__ = ("prev", "next", "type", "ref", "cpu", "addr")

    def __init__(self) -> None:
        self.prev: LruNode = self
        self.next: LruNode = self
        self.type = FREE
        self.ref = 0
        self.cpu = 0
        self.addr = 0  # where the node's memory is, for the timing model (0: not placed)


class _Head(LruNode):
    """A list_head sentinel."""

    __slots__ = ("list_type",)

    def __init__(self, list_type: int) -> None:
        super().__init__()
        self.list_type = list_type
        self.type = -1


def _unlink(node: LruNode) -> None:
    node.prev.next = node.next
    node.next.prev = node.prev


def _add_front(node: LruNode, head: LruNode) -> None:
    first = head.next
    node.prev = head
    node.next = first
    first.prev = node
    head.next = node


def _iter_back(head: LruNode) -> Iterator[LruNode]:
    """Back to front, safe against moving the yielded node (list_for_each_entry_safe_reverse)."""
    node = head.prev
    while node is not head:
        prev = node.prev
        yield node
        node = prev


def _iter_front(head: LruNode) -> Iterator[LruNode]:
    node = head.next
    while node is not head:
        nxt = node.next
        yield node
        node = nxt


class LruList:
    """struct bpf_lru_list: ACTIVE, INACTIVE and FREE lists with their lock."""

    # slots: the C lists (pybpf._cache_model) read them at their offsets
    __slots__ = ("heads", "counts", "next_inactive_rotation", "lock", "tlock", "unmade")

    def __init__(self, tlock: SpinLock | None = None) -> None:
        self.heads = [_Head(t) for t in (ACTIVE, INACTIVE, FREE)]
        self.counts = [0, 0]
        self.next_inactive_rotation: LruNode = self.heads[INACTIVE]
        self.lock = HostLock()
        self.tlock = tlock  # the lock as the timing model sees it
        # Free nodes not created yet (they count as the back of FREE; see populate_lazy).
        self.unmade = 0


class LocalList:
    """struct bpf_lru_locallist: one CPU's FREE and PENDING lists."""

    __slots__ = ("free", "pending", "next_steal", "lock", "tlock")

    def __init__(self, cpu: int, tlock: SpinLock | None = None) -> None:
        self.free = _Head(LOCAL_FREE)
        self.pending = _Head(LOCAL_PENDING)
        self.next_steal = cpu
        self.lock = HostLock()
        self.tlock = tlock


class BpfLru:
    """struct bpf_lru: a common LRU or a per-CPU one."""

    __slots__ = ("ncpus", "percpu", "del_from_htab", "current_cpu", "timing", "broken",
                 "factory", "nr_scans", "target_free", "percpu_lists", "common", "local",
                 "tally")
    # in ``tally``, where the C LRU (pybpf._cache_model) counts: nodes handed out, given
    # back, evicted, stolen from other CPUs, refills
    pops, pushes, evictions, steals, refills = (Counter(i) for i in range(5))

    def __init__(self, ncpus: int, percpu: bool, del_from_htab: Callable[[LruNode], bool],
                 target_free: int = LOCAL_FREE_TARGET,
                 current_cpu: Callable[[], int] = lambda: 0, timing: Timing | None = None,
                 node: int = 0) -> None:
        self.ncpus = ncpus
        self.percpu = percpu
        self.del_from_htab = del_from_htab
        self.current_cpu = current_cpu
        self.timing = timing
        self.broken = ""
        self.factory: Callable[[], LruNode] = LruNode

        def tlock(on_node: int) -> SpinLock | None:
            return None if timing is None else timing.new_lock(
                timing.alloc_region(64, on_node))

        def cpu_node(cpu: int) -> int:
            return 0 if timing is None else timing.cpu_node[cpu]

        if percpu:
            self.nr_scans = PERCPU_NR_SCANS
            self.target_free = PERCPU_FREE_TARGET
            self.percpu_lists = [LruList(tlock(cpu_node(cpu))) for cpu in range(ncpus)]
        else:
            self.nr_scans = LOCAL_NR_SCANS
            self.target_free = target_free
            self.common = LruList(tlock(node))
            self.local = [LocalList(cpu, tlock(cpu_node(cpu))) for cpu in range(ncpus)]
        self.tally = counter_array(5)

    # -- modeled time ------------------------------------------------------------------------
    def _touch(self, node: LruNode) -> None:
        """A list move writes the node's list_head."""
        if self.timing is not None:
            self.timing.access(self.current_cpu(), node.addr, write=True)

    def _lock(self, owner: LruList | LocalList) -> None:
        if self.timing is not None:
            self.timing.spin_lock(self.current_cpu(), owner.tlock)

    def _unlock(self, owner: LruList | LocalList) -> None:
        if self.timing is not None:
            self.timing.spin_unlock(self.current_cpu(), owner.tlock)

    def _evicted(self) -> None:
        self.evictions += 1
        if self.timing is not None:
            self.timing.charge(self.current_cpu(), "bpf_lru_evict")

    # -- primitive moves -------------------------------------------------------------------------
    def _check(self, primitive: str, node: LruNode, to_type: int) -> None:
        if (node.type, to_type) not in LEGAL_MOVES[primitive]:
            self.broken = (f"illegal LRU move {primitive}: {TYPE_NAMES[node.type]} -> "
                           f"{TYPE_NAMES[to_type]}")
            raise RuntimeError(self.broken)

    def _move(self, lst: LruList, node: LruNode, to_type: int) -> None:
        """__bpf_lru_node_move: to the front of ACTIVE/INACTIVE/FREE, ref cleared."""
        self._check("move", node, to_type)
        if node.type != to_type:
            if node.type < NR_LIST_COUNT:
                lst.counts[node.type] -= 1
            if to_type < NR_LIST_COUNT:
                lst.counts[to_type] += 1
            node.type = to_type
        node.ref = 0
        if node is lst.next_inactive_rotation:
            lst.next_inactive_rotation = node.prev
        _unlink(node)
        _add_front(node, lst.heads[to_type])
        self._touch(node)

    def _move_in(self, lst: LruList, node: LruNode, to_type: int) -> None:
        """__bpf_lru_node_move_in: a local node enters ACTIVE or INACTIVE."""
        self._check("move_in", node, to_type)
        lst.counts[to_type] += 1
        node.type = to_type
        node.ref = 0
        _unlink(node)
        _add_front(node, lst.heads[to_type])
        self._touch(node)

    def _move_to_free(self, lst: LruList, node: LruNode, free_head: LruNode,
                      free_type: int) -> None:
        """__bpf_lru_node_move_to_free (keeps the ref bit, as the kernel does)."""
        self._check("move_to_free", node, free_type)
        if node is lst.next_inactive_rotation:
            lst.next_inactive_rotation = node.prev
        if node.type < NR_LIST_COUNT:
            lst.counts[node.type] -= 1
        node.type = free_type
        _unlink(node)
        _add_front(node, free_head)
        self._touch(node)

    # -- rotation and shrinking --------------------------------------------------------------
    def _rotate_active(self, lst: LruList) -> None:
        head = lst.heads[ACTIVE]
        first = head.next
        i = 0
        for node in _iter_back(head):
            self._move(lst, node, ACTIVE if node.ref else INACTIVE)
            i += 1
            if i == self.nr_scans or node is first:
                break

    def _rotate_inactive(self, lst: LruList) -> None:
        inactive = lst.heads[INACTIVE]
        if inactive.next is inactive:
            return
        last = lst.next_inactive_rotation.next
        if last is inactive:
            last = last.next
        cur = lst.next_inactive_rotation
        nxt = inactive
        i = 0
        while i < self.nr_scans:
            if cur is inactive:
                cur = cur.prev
                continue
            nxt = cur.prev
            if cur.ref:
                self._move(lst, cur, ACTIVE)
            if cur is last:
                break
            cur = nxt
            i += 1
        lst.next_inactive_rotation = nxt

    def _rotate(self, lst: LruList) -> None:
        if lst.counts[INACTIVE] < lst.counts[ACTIVE]:
            self._rotate_active(lst)
        self._rotate_inactive(lst)

    def _shrink_inactive(self, lst: LruList, want: int, free_head: LruNode,
                         free_type: int) -> int:
        done = 0
        i = 0
        for node in _iter_back(lst.heads[INACTIVE]):
            if node.ref:
                self._move(lst, node, ACTIVE)
            elif self.del_from_htab(node):
                self._move_to_free(lst, node, free_head, free_type)
                self._evicted()
                done += 1
                if done == want:
                    break
            i += 1
            if i == self.nr_scans:
                break
        return done

    def _shrink(self, lst: LruList, want: int, free_head: LruNode, free_type: int) -> int:
        done = self._shrink_inactive(lst, want, free_head, free_type)
        if done:
            return done
        inactive = lst.heads[INACTIVE]
        victims = inactive if inactive.next is not inactive else lst.heads[ACTIVE]
        for node in _iter_back(victims):
            if self.del_from_htab(node):
                self._move_to_free(lst, node, free_head, free_type)
                self._evicted()
                return 1
        return 0

    # -- common LRU --------------------------------------------------------------------------
    def _flush_pending(self, lst: LruList, loc: LocalList) -> None:
        for node in _iter_back(loc.pending):
            self._move_in(lst, node, ACTIVE if node.ref else INACTIVE)

    def _pop_free_to_local(self, loc: LocalList) -> None:
        lst = self.common
        with lst.lock:
            self._lock(lst)
            try:
                self.refills += 1
                self._flush_pending(lst, loc)
                self._rotate(lst)
                self._make_free(lst, self.target_free)
                taken = 0
                for node in _iter_front(lst.heads[FREE]):
                    self._move_to_free(lst, node, loc.free, LOCAL_FREE)
                    taken += 1
                    if taken == self.target_free:
                        break
                if taken < self.target_free:
                    self._shrink(lst, self.target_free - taken, loc.free, LOCAL_FREE)
            finally:
                self._unlock(lst)

    @staticmethod
    def _local_pop_free(loc: LocalList) -> LruNode | None:
        node = loc.free.next
        if node is loc.free:
            return None
        _unlink(node)
        return node

    def _local_pop_pending(self, loc: LocalList) -> LruNode | None:
        for force in (False, True):
            for node in _iter_back(loc.pending):
                if (force or not node.ref) and self.del_from_htab(node):
                    _unlink(node)
                    self._evicted()
                    self._touch(node)
                    return node
        return None

    def _add_pending(self, loc: LocalList, cpu: int, node: LruNode) -> None:
        self._check("add_pending", node, LOCAL_PENDING)
        node.cpu = cpu
        node.type = LOCAL_PENDING
        node.ref = 0
        _add_front(node, loc.pending)
        self._touch(node)

    def _common_pop_free(self, cpu: int) -> LruNode | None:
        loc = self.local[cpu]
        with loc.lock:
            self._lock(loc)
            try:
                node = self._local_pop_free(loc)
                if node is None:
                    self._pop_free_to_local(loc)
                    node = self._local_pop_free(loc)
                if node is not None:
                    self._add_pending(loc, cpu, node)
                    return node
            finally:
                self._unlock(loc)
        return self._steal(loc, cpu)

    def _steal(self, loc: LocalList, cpu: int) -> LruNode | None:
        """The CPU's own lists had no node: one from the CPUs after it in turn (a free one,
        else a pending one evicted), put on its pending list."""
        first = steal = loc.next_steal
        while True:
            victim = self.local[steal]
            with victim.lock:
                self._lock(victim)
                try:
                    node = self._local_pop_free(victim)
                    if node is None:
                        node = self._local_pop_pending(victim)
                finally:
                    self._unlock(victim)
            steal = (steal + 1) % self.ncpus
            if node is not None or steal == first:
                break
        loc.next_steal = steal
        if node is not None:
            self.steals += 1
            with loc.lock:
                self._lock(loc)
                self._add_pending(loc, cpu, node)
                self._unlock(loc)
        return node

    def _common_push_free(self, node: LruNode) -> None:
        if node.type == LOCAL_PENDING:
            loc = self.local[node.cpu]
            with loc.lock:
                if node.type == LOCAL_PENDING:
                    self._lock(loc)
                    self._check("pending_to_free", node, LOCAL_FREE)
                    node.type = LOCAL_FREE
                    node.ref = 0
                    _unlink(node)
                    _add_front(node, loc.free)
                    self._touch(node)
                    self._unlock(loc)
                    return
        with self.common.lock:
            self._lock(self.common)
            self._move(self.common, node, FREE)
            self._unlock(self.common)

    # -- per-CPU LRU -------------------------------------------------------------------------
    def _percpu_pop_free(self, cpu: int) -> LruNode | None:
        lst = self.percpu_lists[cpu]
        with lst.lock:
            self._lock(lst)
            try:
                self._rotate(lst)
                free = lst.heads[FREE]
                if free.next is free:
                    self._make_free(lst, 1, cpu)
                if free.next is free:
                    self._shrink(lst, PERCPU_FREE_TARGET, free, FREE)
                node = free.next
                if node is free:
                    return None
                node.ref = 0
                self._move(lst, node, INACTIVE)
                return node
            finally:
                self._unlock(lst)

    def _percpu_push_free(self, node: LruNode) -> None:
        lst = self.percpu_lists[node.cpu]
        with lst.lock:
            self._lock(lst)
            self._move(lst, node, FREE)
            self._unlock(lst)

    def _make_free(self, lst: LruList, count: int, cpu: int = 0) -> None:
        """Create up to ``count`` of the list's unmade free nodes at the back of FREE."""
        count = min(count, lst.unmade)
        lst.unmade -= count
        head = lst.heads[FREE]
        for _ in range(count):
            node = self.factory()
            node.type = FREE
            node.ref = 0
            node.cpu = cpu
            _add_front(node, head.prev)  # list_add_tail

    # -- the interface the hash table uses ---------------------------------------------------
    def populate_lazy(self, count: int, factory: Callable[[], LruNode]) -> None:
        """bpf_lru_populate of ``count`` nodes made by ``factory`` when first needed.

        The order of free nodes is unobservable, so nodes never used need not exist: each list
        set keeps a count of them at the back of its FREE list.
        """
        self.factory = factory
        if self.percpu:
            per_cpu = count // self.ncpus
            for cpu, lst in enumerate(self.percpu_lists):
                lst.unmade = per_cpu if cpu < self.ncpus - 1 else count - per_cpu * cpu
        else:
            self.common.unmade = count

    def populate(self, nodes: list[LruNode]) -> None:
        """bpf_lru_populate: every node onto FREE (per-CPU: split evenly over the CPUs)."""
        if self.percpu:
            per_cpu = len(nodes) // self.ncpus
            for i, node in enumerate(nodes):
                cpu = min(i // per_cpu, self.ncpus - 1) if per_cpu else 0
                node.cpu = cpu
                node.type = FREE
                node.ref = 0
                _add_front(node, self.percpu_lists[cpu].heads[FREE])
        else:
            for node in nodes:
                node.type = FREE
                node.ref = 0
                _add_front(node, self.common.heads[FREE])

    def pop_free(self) -> LruNode | None:
        """bpf_lru_pop_free: a node for an insert on the current CPU, or None (ENOMEM)."""
        cpu = self.current_cpu()
        node = self._percpu_pop_free(cpu) if self.percpu else self._common_pop_free(cpu)
        if node is not None:
            self.pops += 1
        return node

    def push_free(self, node: LruNode) -> None:
        """bpf_lru_push_free: give a node back (delete, replace, failed update)."""
        if node.type in (FREE, LOCAL_FREE):
            self.broken = f"LRU node pushed free twice (it is on {TYPE_NAMES[node.type]})"
            raise RuntimeError(self.broken)
        self.pushes += 1
        if self.percpu:
            self._percpu_push_free(node)
        else:
            self._common_push_free(node)

    # -- inspection --------------------------------------------------------------------------
    def lists(self) -> dict[str, list[LruNode]]:
        """Every list, front to back, by name ('ACTIVE', 'cpu0.LOCAL_FREE', 'cpu1.FREE', ...)."""
        out: dict[str, list[LruNode]] = {}
        if self.percpu:
            for cpu, lst in enumerate(self.percpu_lists):
                for t in (ACTIVE, INACTIVE, FREE):
                    out[f"cpu{cpu}.{TYPE_NAMES[t]}"] = list(_iter_front(lst.heads[t]))
        else:
            for t in (ACTIVE, INACTIVE, FREE):
                out[TYPE_NAMES[t]] = list(_iter_front(self.common.heads[t]))
            for cpu, loc in enumerate(self.local):
                out[f"cpu{cpu}.LOCAL_FREE"] = list(_iter_front(loc.free))
                out[f"cpu{cpu}.LOCAL_PENDING"] = list(_iter_front(loc.pending))
        return out

    def counts(self) -> dict[str, int]:
        """Nodes per list (FREE lists include the nodes not created yet)."""
        out = {name: len(nodes) for name, nodes in self.lists().items()}
        if self.percpu:
            for cpu, lst in enumerate(self.percpu_lists):
                out[f"cpu{cpu}.FREE"] += lst.unmade
        else:
            out["FREE"] += self.common.unmade
        return out

    def in_use(self) -> int:
        """Nodes holding keys: ACTIVE, INACTIVE and the CPUs' PENDING lists."""
        return sum(n for name, n in self.counts().items()
                   if name.endswith(("ACTIVE", "INACTIVE", "PENDING")))

    def check_invariants(self, nodes: list[LruNode] | None = None) -> None:
        """Raise RuntimeError (and mark the LRU broken) when the lists are inconsistent.

        Checks: links are consistent both ways; each node's type matches its list; ACTIVE and
        INACTIVE counters match; the rotation cursor is the INACTIVE sentinel or an INACTIVE
        node; no node is on two lists; with ``nodes``, every node is on some list.
        """
        problems: list[str] = []
        seen: set[int] = set()
        list_sets = self.percpu_lists if self.percpu else [self.common]
        heads: list[tuple[str, _Head, int]] = []
        for i, lst in enumerate(list_sets):
            prefix = f"cpu{i}." if self.percpu else ""
            for t in (ACTIVE, INACTIVE, FREE):
                heads.append((prefix + TYPE_NAMES[t], lst.heads[t], t))
        if not self.percpu:
            for cpu, loc in enumerate(self.local):
                heads.append((f"cpu{cpu}.LOCAL_FREE", loc.free, LOCAL_FREE))
                heads.append((f"cpu{cpu}.LOCAL_PENDING", loc.pending, LOCAL_PENDING))
        for name, head, t in heads:
            node = head.next
            steps = 0
            while node is not head:
                if node.next.prev is not node or node.prev.next is not node:
                    problems.append(f"{name}: broken links")
                    break
                if node.type != t:
                    problems.append(f"{name}: node of type {TYPE_NAMES[node.type]}")
                if id(node) in seen:
                    problems.append(f"{name}: node on two lists")
                seen.add(id(node))
                if self.percpu and t != -1 and node.cpu != int(name[3:name.index(".")]):
                    problems.append(f"{name}: node of cpu {node.cpu}")
                node = node.next
                steps += 1
                if steps > 1 << 26:
                    problems.append(f"{name}: cycle")
                    break
        for i, lst in enumerate(list_sets):
            for t in (ACTIVE, INACTIVE):
                real = sum(1 for _ in _iter_front(lst.heads[t]))
                if real != lst.counts[t]:
                    problems.append(f"list {i}: {TYPE_NAMES[t]} counter {lst.counts[t]} but "
                                    f"{real} nodes")
            cursor = lst.next_inactive_rotation
            if cursor is not lst.heads[INACTIVE] and cursor.type != INACTIVE:
                problems.append(f"list {i}: rotation cursor on a {TYPE_NAMES[cursor.type]} "
                                "node")
        if nodes is not None:
            missing = sum(1 for node in nodes if id(node) not in seen)
            if missing:
                problems.append(f"{missing} node(s) on no list")
        if problems:
            self.broken = "; ".join(problems)
            raise RuntimeError(f"LRU invariants broken: {self.broken}")

    def stats(self) -> dict[str, int]:
        return {"lru_pops": self.pops, "lru_pushes": self.pushes,
                "lru_evictions": self.evictions, "lru_steals": self.steals,
                "lru_refills": self.refills}

