"""Reading BPF ring buffers (pybpf.ringbuf, System.ringbuf_reader, maps.RingBuf).

The walk over the ring (libbpf's ringbuf_process_ring) is checked on an in-memory ring a model
producer fills, for every sequence of records; the kernel's reader on tests/objects/ringbuf.c,
whose program writes with bpf_ringbuf_output, reserve + submit and reserve + discard, on
each backend: the kernel's maps the ring's pages, the emulated one reads the map's own."""

from __future__ import annotations

import errno
import struct
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybpf.bpf_object import ObjectSpec
from pybpf.errors import BPFError
from pybpf.maps import HashMap, RingBuf
from pybpf.ringbuf import (
    BPF_RINGBUF_BUSY_BIT,
    BPF_RINGBUF_DISCARD_BIT,
    BPF_RINGBUF_HDR_SZ,
    RingBufReader,
    record_span,
)

EVENT = struct.Struct("<IIQ")  # struct event: seq, kind, len
OUTPUT, SUBMIT = 1, 2


class MemoryRing(RingBufReader):
    """A ring in a bytearray and a model producer that reserves, commits and discards as
    kernel/bpf/ringbuf.c does (a header, BUSY until committed)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.data = bytearray(size)
        self.producer = self.consumer = 0

    def reserve(self, payload: bytes) -> int:
        pos = self.producer
        span = record_span(len(payload))
        assert pos + span - self.consumer <= self.size, "the model never overfills"
        self._write(pos, struct.pack("<II", len(payload) | BPF_RINGBUF_BUSY_BIT, 0) + payload)
        self.producer += span
        return pos

    def commit(self, pos: int, discard: bool = False) -> None:
        header = struct.unpack_from("<I", self.data, pos & self._mask)[0] & ~BPF_RINGBUF_BUSY_BIT
        self._write(pos, struct.pack("<I", header | (BPF_RINGBUF_DISCARD_BIT if discard else 0)))

    def _write(self, pos: int, raw: bytes) -> None:
        for i, byte in enumerate(raw):
            self.data[(pos + i) & self._mask] = byte

    def _load_producer_pos(self) -> int:
        return self.producer

    def _load_consumer_pos(self) -> int:
        return self.consumer

    def _store_consumer_pos(self, pos: int) -> None:
        self.consumer = pos

    def _load_header(self, offset: int) -> int:
        return struct.unpack_from("<I", self.data, offset)[0]

    def _payload(self, offset: int, length: int) -> bytes:
        return bytes(self.data[(offset + i) & self._mask] for i in range(length))

    def wait(self, timeout: float | None) -> bool:
        return False

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


records = st.lists(st.tuples(st.binary(max_size=40), st.booleans()), max_size=60)


@given(records, st.integers(1, 5))
def test_the_walk_yields_committed_records_in_order_and_skips_discarded(recs, every):
    ring = MemoryRing(256)
    expected, got = [], []
    for i, (payload, discard) in enumerate(recs):
        if ring.producer + record_span(len(payload)) - ring.consumer > ring.size:
            got += ring.read()  # the producer would fail the reserve: make room first
        ring.commit(ring.reserve(payload), discard)
        if not discard:
            expected.append(payload)
        if i % every == 0:
            got += ring.read()
    got += ring.read()
    assert got == expected
    assert (ring.records_read, ring.records_discarded) == \
        (len(expected), sum(d for _, d in recs))
    assert ring.consumer == ring.producer and ring.available == 0


def test_a_busy_record_holds_back_those_after_it_until_committed():
    ring = MemoryRing(128)
    first = ring.reserve(b"first")
    ring.commit(ring.reserve(b"second"))
    assert ring.read() == [] and ring.consumer == 0
    ring.commit(first)
    assert ring.read() == [b"first", b"second"]


def test_read_with_a_limit_leaves_the_rest_for_later():
    ring = MemoryRing(128)
    for payload in (b"a", b"b", b"c"):
        ring.commit(ring.reserve(payload))
    assert ring.read(2) == [b"a", b"b"]
    assert ring.available == record_span(1) == BPF_RINGBUF_HDR_SZ + 8
    assert ring.read() == [b"c"]


# -- a ring buffer programs write, on each backend ------------------------------------------------

@pytest.fixture
def producer(build_object, backend):
    with ObjectSpec.from_file(build_object("ringbuf")).load(backend) as obj:
        yield obj


def _events(raw: list[bytes]) -> list[tuple]:
    return [EVENT.unpack(r) if len(r) == EVENT.size else r for r in raw]


def test_consumer_sees_the_submitted_records_in_order_and_none_discarded(producer):
    events = producer.maps["events"]
    assert isinstance(events, RingBuf)
    assert events.poll(0.05) == []  # nothing yet: the timeout passes
    producer.programs["produce"].test_run(bytes(64))
    assert _events(events.poll(0)) == [(0, OUTPUT, 64), (1, SUBMIT, 64), b"tail@"]
    reader = events.reader
    assert (reader.records_read, reader.records_discarded) == (3, 1)
    assert reader.available == 0 and events.poll(0.01) == []


def test_records_that_wrap_past_the_end_of_the_ring_read_whole(producer):
    events, produce = producer.maps["events"], producer.programs["produce"]
    for i in range(120):  # 88 bytes a run: the ring of 4096 wraps more than twice
        produce.test_run(bytes(60 + i))
        seq = 3 * i
        assert _events(events.read()) == [(seq, OUTPUT, 60 + i), (seq + 1, SUBMIT, 60 + i),
                                          b"tail" + bytes([(60 + i) & 0xFF])]
    assert events.reader.records_read == 360 and producer.globals["dropped"] == 0


def test_a_full_ring_drops_in_the_program_and_keeps_the_order(producer):
    events, produce = producer.maps["events"], producer.programs["produce"]
    runs = 80
    for _ in range(runs):
        produce.test_run(bytes(64))
    got = _events(events.read())
    dropped = producer.globals["dropped"]
    assert dropped > 0 and len(got) + dropped == 3 * runs
    seqs = [e[0] for e in got if isinstance(e, tuple)]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    produce.test_run(bytes(64))  # room again once read
    assert len(events.read()) == 3


def test_poll_wakes_up_when_a_program_commits_a_record(producer):
    events = producer.maps["events"]
    assert events.reader.available == 0  # the reader (and its epoll) exists before the run
    thread = threading.Thread(
        target=lambda: (time.sleep(0.05), producer.programs["produce"].test_run(bytes(64))))
    thread.start()
    try:
        assert len(events.poll(10)) == 3
    finally:
        thread.join()


def test_a_reader_outlives_the_maps_fd(producer, backend):
    reader = backend.ringbuf_reader(producer.maps["events"].fd)
    with reader:
        producer.maps["events"].close()  # the program still holds the map
        producer.programs["produce"].test_run(bytes(64))
        assert len(reader.read()) == 3


def test_a_ring_buffer_made_from_python_reads_nothing(backend):
    with RingBuf(4096, system=backend) as ring:
        assert ring.read() == [] and ring.poll(0) == []
        reader = ring.reader
    assert ring._reader is None
    with pytest.raises(ValueError):
        reader.read()  # closed with its map


def test_only_a_ring_buffer_has_a_reader(backend):
    with HashMap(4, "<I", "<I", system=backend) as other:
        with pytest.raises(BPFError) as info:
            backend.ringbuf_reader(other.fd)
    assert info.value.errno == errno.EINVAL and "not a ring buffer" in str(info.value.detail)


def test_a_reader_keeps_the_emulated_map_alive_and_lets_it_go_when_closed(emulated):
    ring = RingBuf(4096, system=emulated)
    map_id = emulated.map_get_info(ring.fd).id
    reader = emulated.ringbuf_reader(ring.fd)
    ring.close()
    emulated.close(emulated.map_get_fd_by_id(map_id))  # still there: the reader holds it
    reader.close()
    with pytest.raises(BPFError) as info:
        emulated.map_get_fd_by_id(map_id)
    assert info.value.errno == errno.ENOENT
