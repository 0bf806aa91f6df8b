"""The page allocator under the slab (emulated/machine/page_alloc.py, mm/page_alloc.c)."""

from __future__ import annotations

from pybpf.emulated.machine.page_alloc import PAGE, PCP_BATCH, PCP_HIGH, addr_node
from pybpf.emulated.machine.timing import Timing
from pybpf.profiles import load_profile


def test_a_freed_slab_page_is_the_next_one_allocated_and_overflows_to_the_node():
    """The page allocator's per-CPU lists are last freed, first allocated: a slab given
    back is the next new slab on that CPU, hot. Past PCP_HIGH pages a batch of the oldest
    goes to the node's buddy lists, where another CPU's empty list takes them from."""
    allocator = Timing(load_profile("haswell-ep-2s")).slub.pages  # 2 nodes
    starts = [allocator.alloc_pages(0, 0, PAGE) for _ in range(PCP_HIGH + 1)]
    assert len(set(starts)) == len(starts)
    for start in starts:
        allocator.free_pages(0, start, PAGE)
    assert allocator.alloc_pages(0, 0, PAGE) == starts[-1]
    assert allocator.pcp_pages[0] == PCP_HIGH + 1 - PCP_BATCH - 1
    # CPU 1's list is empty: it takes a batch from the node, the oldest freed pages, the
    # last of them first.
    assert allocator.alloc_pages(1, 0, PAGE) == starts[PCP_BATCH - 1]
    assert allocator.pcp_pages[1] == PCP_BATCH - 1
    assert addr_node(allocator.alloc_pages(2, 1, PAGE)) == 1  # nothing free on node 1: fresh
