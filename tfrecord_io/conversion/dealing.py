"""How Example rows reach their shards in the default layout (even shards, records mixed), for every engine.

Rows are *dealt*, not hashed one by one: each parsed batch is cut into up to N nearly equal slices
(:func:`slices`), handed to the N shards in turn, so shards stay even to within a slice whatever
the splits.  A read task keeps a bucket per shard and sends a bucket on when it holds
:func:`piece_bytes` (:class:`Dealer`): the engine's shuffle moves a few large Arrow IPC byte
strings per task (:func:`to_ipc`), not a row per record -- no per-row work in the shuffle, and no
conversion of rows into the engine's own row format and back.

Each piece carries a key, (the task that dealt it, its sequence number there), and the dealing
depends only on the task's input, so a recomputed read task sends the same pieces to the same
shards.  A shard's writer puts its rows in a random order seeded by the shard (:func:`shuffled`):
all of them when they fit in :data:`HOLD_BYTES` of pieces, which are sorted by key first (the same
input gives the same bytes), else window by window of that size (``record_order="shuffled"``,
the default; date-sorted input trains on mixed batches).
"""

from __future__ import annotations

from typing import Hashable, Iterable, Iterator

import numpy as np
import pyarrow as pa

#: Rows of one shard held to be put in a random order together (larger shards: window by window).
#: The default shard (128 MiB of input) fits whole unless its rows are much larger in Arrow than as
#: text.  A write task's Python worker holds this much of pieces and a permuted copy
#: (docs/running-on-yarn.md, "Memory").
HOLD_BYTES = 256 << 20
#: A read task's buckets together hold about this much before pieces leave it.
DEAL_BUFFER_BYTES = 64 << 20
MIN_PIECE_BYTES = 256 << 10
MAX_PIECE_BYTES = 8 << 20


def to_ipc(batches: pa.RecordBatch | list[pa.RecordBatch]) -> bytes:
    """Arrow IPC stream bytes of one batch or of batches with one schema (pickling a slice would copy
    its whole buffers)."""
    batches = [batches] if isinstance(batches, pa.RecordBatch) else batches
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for b in batches:
            writer.write_batch(b)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> list[pa.RecordBatch]:
    """The batches of :func:`to_ipc` bytes (zero-copy: they point into ``data``)."""
    return list(pa.ipc.open_stream(data))


def slices(num_rows: int, pieces: int) -> Iterator[tuple[int, int]]:
    """(start, length) of up to ``pieces`` nearly equal, non-empty slices of ``num_rows`` rows."""
    pieces = max(1, min(pieces, num_rows))
    bounds = np.linspace(0, num_rows, pieces + 1).astype(np.int64)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            yield int(a), int(b - a)


def piece_bytes(num_shards: int) -> int:
    """How full a shard's bucket gets before it leaves the read task: :data:`DEAL_BUFFER_BYTES`
    shared by the shards, within [:data:`MIN_PIECE_BYTES`, :data:`MAX_PIECE_BYTES`]."""
    return max(MIN_PIECE_BYTES, min(MAX_PIECE_BYTES, DEAL_BUFFER_BYTES // max(1, num_shards)))


class Dealer:
    """A read task's dealing: :meth:`deal` each batch, then :meth:`finish`; both yield
    ``(shard, (key, ipc bytes))`` pieces, the key ``(origin, n)`` for the task's n-th piece.
    ``origin``: what names the task (its index, or its first input's path); ``first``: the shard
    the task's first slice goes to (spread tasks over shards, deterministically: the task's index or
    a hash of its input)."""

    def __init__(self, num_shards: int, first: int = 0, origin: Hashable = 0):
        self.num_shards = max(1, num_shards)
        self._next = first % self.num_shards
        self._limit = piece_bytes(self.num_shards)
        self._origin = origin
        self._sent = 0
        self._buckets: dict[int, list[pa.RecordBatch]] = {}
        self._sizes: dict[int, int] = {}

    def deal(self, batch: pa.RecordBatch) -> Iterator[tuple[int, tuple[Hashable, bytes]]]:
        for start, length in slices(batch.num_rows, self.num_shards):
            shard = self._next
            self._next = (self._next + 1) % self.num_shards
            part = batch.slice(start, length)
            self._buckets.setdefault(shard, []).append(part)
            self._sizes[shard] = self._sizes.get(shard, 0) + part.nbytes
            if self._sizes[shard] >= self._limit:
                yield self._take(shard)

    def finish(self) -> Iterator[tuple[int, tuple[Hashable, bytes]]]:
        for shard in sorted(self._buckets):
            yield self._take(shard)

    def _take(self, shard: int) -> tuple[int, tuple[Hashable, bytes]]:
        del self._sizes[shard]
        key = (self._origin, self._sent)
        self._sent += 1
        return shard, (key, to_ipc(self._buckets.pop(shard)))


def shuffled(pieces: Iterable[tuple[Hashable, bytes]], rng: np.random.Generator,
             hold_bytes: int = HOLD_BYTES) -> Iterator[pa.RecordBatch]:
    """The rows of ``(key, ipc bytes)`` pieces in a random order: all of them when they fit in
    ``hold_bytes``, else window by window; each window's pieces sorted by key first, so that the
    order does not depend on the order the shuffle delivered them in."""
    held: list[tuple[Hashable, bytes]] = []
    size = 0

    def permute():
        held.sort(key=lambda kv: kv[0])
        table = pa.Table.from_batches([b for _, data in held for b in from_ipc(data)])
        yield from table.take(pa.array(rng.permutation(table.num_rows))).to_batches(max_chunksize=65_536)

    for key, data in pieces:
        held.append((key, data))
        size += len(data)
        if size >= hold_bytes:
            yield from permute()
            held, size = [], 0
    if held:
        yield from permute()


def in_order(pieces: Iterable[tuple[Hashable, bytes]]) -> Iterator[pa.RecordBatch]:
    """The rows of the pieces as they came (``record_order="input"``)."""
    for _, data in pieces:
        yield from from_ipc(data)
