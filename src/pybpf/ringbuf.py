"""The user-space side of BPF ring buffers (libbpf's tools/lib/bpf/ringbuf.c): the record
layout, ``RingBufReader``, the consumer of a RINGBUF that ``System.ringbuf_reader(fd)`` hands
out, and ``UserRingBufProducer``, the producer of a USER_RINGBUF that
``System.user_ringbuf_producer(fd)`` hands out (programs drain it with
bpf_user_ringbuf_drain).

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

Rules every user-space producer keeps (libbpf's user_ring_buffer__reserve / __submit; the
kernel's side is __bpf_user_ringbuf_peek, which trusts nothing it reads):
- a record takes its length plus the 8-byte header, rounded up to 8, and may fill the ring
  to the last byte (the kernel producer keeps one byte free; this one does not): bigger
  than the ring -> E2BIG, a length using the BUSY or DISCARD bit -> E2BIG, not enough room
  now -> ENOSPC; ``reserve_blocking`` waits for room and answers ETIMEDOUT past its timeout;
- reserving writes the header (length | BUSY, page offset 0) and then moves
  ``producer_pos`` with release ordering; submitting (or discarding) clears BUSY (sets
  DISCARD) with one release store of the length word, after the record's bytes. Records
  are drained in the order they were reserved: one still BUSY holds back those after it.
"""

from __future__ import annotations

import abc
import errno
import itertools
import math
import time
from collections.abc import Iterator
from types import TracebackType

from .errors import BPFError

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


class UserRingBufProducer(abc.ABC):
    """The producer of one BPF_MAP_TYPE_USER_RINGBUF map (libbpf's ``struct user_ring_buffer``).

    ``reserve(size)`` gives a writable ``memoryview`` of ``size`` bytes in the ring (or raises
    ``BPFError``: E2BIG, ENOSPC), ``reserve_blocking(size, timeout)`` waits for room
    (ETIMEDOUT), ``submit(sample)`` hands a filled sample to the programs that drain the map
    and ``discard(sample)`` gives it up; either releases the view. ``fileno()`` is a
    descriptor to wait on with ``selectors`` (``wait`` says what it waits for). A producer owns its
    mappings and descriptors: ``close`` (or a ``with`` block) releases them, and with them
    the samples not yet submitted. One thread at a time may use a producer (libbpf: the
    caller serialises reservations).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._mask = size - 1
        # id(view) -> (its record's data offset, view) until submitted; None once closed
        self._reserved: dict[int, tuple[int, memoryview]] | None = {}

    # -- what a backend gives ----------------------------------------------------------------
    @abc.abstractmethod
    def _load_consumer_pos(self) -> int:
        """consumer_pos (the kernel's drain moves it), with acquire ordering."""

    @abc.abstractmethod
    def _load_producer_pos(self) -> int: ...

    @abc.abstractmethod
    def _store_producer_pos(self, pos: int) -> None:
        """producer_pos = ``pos``, with release ordering (after the record's header)."""

    @abc.abstractmethod
    def _store_header(self, offset: int, length: int) -> None:
        """The header at data ``offset``: its length word ``length`` and its page offset 0
        (plain stores: the producer_pos store after them publishes them)."""

    @abc.abstractmethod
    def _sample(self, offset: int, size: int) -> memoryview:
        """A writable view of the ``size`` bytes at data ``offset`` (past the end: from the
        start again)."""

    @abc.abstractmethod
    def _commit(self, offset: int, sample: memoryview, length: int) -> None:
        """The record at data ``offset`` is ``sample``'s bytes: make them the ring's, then set
        its length word to ``length`` with release ordering (libbpf's atomic exchange)."""

    @abc.abstractmethod
    def wait(self, timeout: float | None) -> bool:
        """Wait until the map polls writable (True: a byte free, as epoll reports it: once
        a look found the ring full, only a drain's wake-up makes it look again), or
        ``timeout`` seconds (None: no limit; 0: just ask) pass (False)."""

    @abc.abstractmethod
    def fileno(self) -> int: ...

    @abc.abstractmethod
    def _close(self) -> None:
        """Release the mappings and descriptors (called once)."""

    # -- the protocol (user_ring_buffer__reserve, user_ringbuf_commit) -----------------------
    def reserve(self, size: int) -> memoryview:
        """user_ring_buffer__reserve: room for a sample of ``size`` bytes, not yet visible to
        programs. E2BIG: more than the ring holds (or than a header says); ENOSPC: not
        enough room now."""
        self._check_open()
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise BPFError(errno.EINVAL, f"sample size {size!r}: a size in bytes (u32)",
                           command="user_ringbuf_reserve")
        if size > 0xFFFFFFFF or size & (BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT):
            raise BPFError(errno.E2BIG, f"sample size {size} does not fit a record header's "
                           f"30 bits", command="user_ringbuf_reserve")
        consumer = self._load_consumer_pos()
        producer = self._load_producer_pos()
        total = record_span(size)
        if total > self.size:
            raise BPFError(errno.E2BIG, f"a sample of {size} bytes takes {total} with its "
                           f"header: over the ring's {self.size}", command="user_ringbuf_reserve")
        if self.size - (producer - consumer) < total:
            raise BPFError(errno.ENOSPC, f"no room for {total} bytes: "
                           f"{self.size - (producer - consumer)} of {self.size} free",
                           command="user_ringbuf_reserve")
        offset = producer & self._mask
        self._store_header(offset, size | BPF_RINGBUF_BUSY_BIT)
        self._store_producer_pos(producer + total)
        sample = self._sample((offset + BPF_RINGBUF_HDR_SZ) & self._mask, size)
        self._reserved[id(sample)] = (offset, sample)
        return sample

    def reserve_blocking(self, size: int, timeout: float | None = None) -> memoryview:
        """user_ring_buffer__reserve_blocking: ``reserve``, waiting up to ``timeout`` seconds
        (None: without limit) for a drain to make room; ETIMEDOUT when none did. Errors other
        than ENOSPC come at once."""
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float))):
            raise TypeError(f"timeout {timeout!r}: seconds (an int or a float), or None")
        if timeout is not None and not timeout >= 0:
            raise BPFError(errno.EINVAL, f"timeout {timeout!r}: seconds >= 0, or None",
                           command="user_ringbuf_reserve_blocking")
        deadline = None if timeout is None or math.isinf(timeout) else \
            time.monotonic() + timeout
        while True:
            try:
                return self.reserve(size)
            except BPFError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            self.wait(remaining)
        try:  # once more after the timeout, as libbpf
            return self.reserve(size)
        except BPFError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise BPFError(errno.ETIMEDOUT, f"no room for a sample of {size} bytes within "
                           f"{timeout} s", command="user_ringbuf_reserve_blocking") from None

    def submit(self, sample: memoryview) -> None:
        """user_ring_buffer__submit: the sample (from ``reserve``) may be drained now."""
        self._finish(sample, 0, "user_ringbuf_submit")

    def discard(self, sample: memoryview) -> None:
        """user_ring_buffer__discard: the sample is skipped by the drain."""
        self._finish(sample, BPF_RINGBUF_DISCARD_BIT, "user_ringbuf_discard")

    def _finish(self, sample: memoryview, flag: int, command: str) -> None:
        self._check_open()
        offset, reserved = self._reserved.get(id(sample), (0, None))
        if reserved is not sample:
            raise BPFError(errno.EINVAL, "not a sample this producer reserved and has not "
                           "submitted or discarded", command=command)
        del self._reserved[id(sample)]
        self._commit(offset, sample, len(sample) | flag)
        sample.release()

    def _check_open(self) -> None:
        if self._reserved is None:
            raise ValueError("the user ring buffer producer is closed")

    def close(self) -> None:
        """Release the mappings and descriptors (idempotent); samples not submitted stay
        BUSY in the ring, holding back the drain as an unfinished libbpf producer does."""
        if self._reserved is None:
            return
        for _, sample in self._reserved.values():
            sample.release()
        self._reserved = None
        self._close()

    def __enter__(self) -> UserRingBufProducer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
