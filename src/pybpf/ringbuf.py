"""The user-space side of BPF ring buffers (libbpf's tools/lib/bpf/ringbuf.c): the record
layout and ``RingBufReader``, the consumer ``System.ringbuf_reader(fd)`` hands out.

The layout is the kernel's (kernel/bpf/ringbuf.c, include/uapi/linux/bpf.h): a consumer page
holding ``consumer_pos`` (the one word user space writes), a producer page holding
``producer_pos``, then the data area, ``max_entries`` bytes (a power of two). A record is an
8-byte header, a u32 length whose top bits are BPF_RINGBUF_BUSY_BIT (still being written)
and BPF_RINGBUF_DISCARD_BIT (discarded) and a u32 page offset, then the length's bytes,
padded to 8. Positions only grow; a record lives at ``pos & (max_entries - 1)``.

Rules every reader keeps (libbpf's ringbuf_process_ring; the walk is written once, here, and
a backend gives only the loads, the store and the wait):
- records come out oldest first, each once; a BUSY record stops the walk (those after it
  wait for it, so the order is the order of reservation); a discarded one is skipped and
  counted (``records_discarded``), a read one counted (``records_read``);
- ``consumer_pos`` moves past a record only once its bytes are copied out, so the producer
  never reuses space still being read; positions are read with acquire and written with
  release ordering (the backend's ``_load_*`` and ``_store_consumer_pos``);
- ``poll(timeout)`` returns what is there at once, else waits up to ``timeout`` seconds for
  the producer's notification (``wait``) and reads again: [] when none came.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Iterator
from types import TracebackType

BPF_RINGBUF_BUSY_BIT = 1 << 31
BPF_RINGBUF_DISCARD_BIT = 1 << 30
BPF_RINGBUF_HDR_SZ = 8
_LENGTH_MASK = BPF_RINGBUF_DISCARD_BIT - 1


def record_span(header: int) -> int:
    """Bytes a record takes in the ring: its header and length (flag bits cleared), rounded
    up to 8 (libbpf's roundup_len)."""
    return (BPF_RINGBUF_HDR_SZ + (header & _LENGTH_MASK) + 7) & ~7


class RingBufReader(abc.ABC):
    """A consumer of one BPF_MAP_TYPE_RINGBUF map (libbpf's ``struct ring``).

    Iterating yields the committed records there now, without waiting; ``read`` makes a list
    of them, ``poll`` waits for some first. ``fileno()`` is a descriptor that is readable
    when records may be there, to wait on several readers with ``selectors``. A reader owns
    its mappings and descriptors: ``close`` (or a ``with`` block) releases them.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._mask = size - 1
        self.records_read = 0
        self.records_discarded = 0

    # -- what a backend gives ----------------------------------------------------------------
    @abc.abstractmethod
    def _load_producer_pos(self) -> int:
        """producer_pos, with acquire ordering (the records before it are visible)."""

    @abc.abstractmethod
    def _load_consumer_pos(self) -> int: ...

    @abc.abstractmethod
    def _store_consumer_pos(self, pos: int) -> None:
        """consumer_pos = ``pos``, with release ordering (after the record's bytes were read)."""

    @abc.abstractmethod
    def _load_header(self, offset: int) -> int:
        """The u32 length word of the record at data ``offset``, with acquire ordering."""

    @abc.abstractmethod
    def _payload(self, offset: int, length: int) -> bytes:
        """``length`` bytes from data ``offset`` on (past the end: from the start again)."""

    @abc.abstractmethod
    def wait(self, timeout: float | None) -> bool:
        """Wait until the producer says records may be there (True), or ``timeout`` seconds
        (None: no limit; 0: just ask) pass (False)."""

    @abc.abstractmethod
    def fileno(self) -> int: ...

    @abc.abstractmethod
    def close(self) -> None:
        """Release the mappings and descriptors (idempotent)."""

    # -- the walk (ringbuf_process_ring) -----------------------------------------------------
    def __iter__(self) -> Iterator[bytes]:
        consumer = self._load_consumer_pos()
        while True:
            producer = self._load_producer_pos()
            got_new_data = False
            while consumer < producer:
                offset = consumer & self._mask
                header = self._load_header(offset)
                if header & BPF_RINGBUF_BUSY_BIT:
                    return  # not committed yet: it and those after it wait
                got_new_data = True
                record = None
                if not header & BPF_RINGBUF_DISCARD_BIT:
                    record = self._payload(offset + BPF_RINGBUF_HDR_SZ, header & _LENGTH_MASK)
                consumer += record_span(header)
                self._store_consumer_pos(consumer)
                if record is None:
                    self.records_discarded += 1
                else:
                    self.records_read += 1
                    yield record
            if not got_new_data:
                return

    def read(self, limit: int | None = None) -> list[bytes]:
        """The committed records there now, oldest first (at most ``limit``)."""
        return list(itertools.islice(self, limit))

    def poll(self, timeout: float | None = None, limit: int | None = None) -> list[bytes]:
        """libbpf's ring_buffer__poll: the records there now, or, when there are none, those
        that come within ``timeout`` seconds (None: wait for some); [] on timeout."""
        records = self.read(limit)
        if records or not self.wait(timeout):
            return records
        return self.read(limit)

    @property
    def available(self) -> int:
        """Bytes between consumer and producer (records, discarded ones and headers)."""
        return self._load_producer_pos() - self._load_consumer_pos()

    def __enter__(self) -> RingBufReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
