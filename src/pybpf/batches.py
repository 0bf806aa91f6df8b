"""``BatchCursor``: a walk over a map with the batch commands, keeping the token between
calls (``Map.batch_lookup`` and friends use it)."""

from __future__ import annotations

import errno
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .errors import BPFError

if TYPE_CHECKING:
    from .maps import Map


class BatchCursor:
    """A walk over a map with BPF_MAP_LOOKUP_BATCH (``delete=True``: LOOKUP_AND_DELETE_BATCH).

    It keeps the in/out token between calls (``max(key_size, 4)`` bytes: a bucket index for
    hash maps, a key for the others), treats ENOENT as the end (with the elements that came
    with it), and on ENOSPC (a hash bucket larger than the chunk) doubles the chunk and
    retries. ``next()`` gives one chunk; iterating gives chunks until the end. Keys and
    values come as lists, or with ``arrays=True`` as ``Codec.decode_array`` gives them
    (``array.array`` for int codecs).
    """

    def __init__(self, m: Map, *, delete: bool = False, chunk: int = 256,
                 arrays: bool = False) -> None:
        if not isinstance(chunk, int) or isinstance(chunk, bool):
            raise TypeError(f"chunk must be an int (elements per batch call), got {chunk!r}")
        if chunk <= 0:
            raise ValueError(f"chunk must be positive, got {chunk}")
        self.map = m
        self.delete = delete
        self.arrays = arrays
        self.chunk = chunk
        self.token: bytes | None = None
        self.done = False
        self._command = "map_lookup_and_delete_batch" if delete else "map_lookup_batch"
        self._bufs: tuple[bytearray, bytearray] | None = None

    def __iter__(self) -> Iterator[tuple[Sequence, Sequence]]:
        while not self.done:
            keys, values = self.next()
            if keys:
                yield keys, values

    def next(self, chunk: int | None = None) -> tuple[Sequence, Sequence]:
        """One batch of up to ``chunk`` elements: (keys, values), decoded."""
        if chunk is not None:
            self.chunk = chunk
        if self.done:
            return [], []
        m = self.map
        while True:
            try:
                return self._batch()
            except BPFError as exc:
                if exc.errno != errno.ENOSPC or self.chunk >= max(m.max_entries, 1):
                    raise
                self.chunk = min(self.chunk * 2, max(m.max_entries, 1))

    def _batch(self) -> tuple[Sequence, Sequence]:
        m = self.map
        chunk = self.chunk
        kc, vc = m.key_codec, m.value_codec
        if self.arrays:
            kdec, vdec, kkind, vkind = kc.decode_array, vc.decode_array, 0, 0
        else:
            kdec, vdec, kkind, vkind = kc.decode_many, vc.decode_many, kc.kind, vc.kind
        lookup_batch = m._ops.lookup_batch
        if lookup_batch is not None:
            chunk = min(chunk, max(m.max_entries, 1))  # what one call can return at most
            bufs = self._bufs
            if bufs is None or len(bufs[0]) < chunk * m.key_size or \
                    len(bufs[1]) < chunk * m._vsize:
                bufs = self._bufs = (bytearray(chunk * m.key_size), bytearray(chunk * m._vsize))
            # The accelerator decodes int keys and values into lists itself (None: decode
            # here).
            err, count, token, keys, values = lookup_batch(
                self.delete, self.token, m.key_size, m._vsize, bufs[0], bufs[1], chunk, 0, 0,
                kkind, vkind)
            if err and err != errno.ENOENT:
                raise m._error(err, self._command, count=count)
            self.done = err == errno.ENOENT
            if token is not None:
                self.token = token
            return (kdec(bufs[0], count) if keys is None else keys,
                    vdec(bufs[1], count) if values is None else values)
        batch = (m.system.map_lookup_and_delete_batch if self.delete
                 else m.system.map_lookup_batch)
        result = batch(m.fd, self.token, chunk)
        self.done = result.end
        if result.out_batch is not None:
            self.token = result.out_batch
        count = len(result.keys)
        return kdec(b"".join(result.keys), count), vdec(b"".join(result.values), count)
