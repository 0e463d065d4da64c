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

Many small shards (Beam): a piece may hold the rows of several shards -- a *writer group* of
``shards_per_piece`` consecutive shards (:func:`shards_per_writer`), with each row's shard in the
column :data:`SHARD_COLUMN` -- so that ten thousand shards of a hundred rows cost a few hundred
pieces and shuffle keys, not a million, and one writer encodes and writes a group's shards
together (:func:`windows`, :func:`split_window`).  The rows each shard gets, and their order, do not
change: a row goes to the shard its slice is dealt to, and a shard's rows are in piece-key order,
permuted by the shard's own generator, exactly as when its pieces held it alone.
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
#: The column of a piece of several shards that names each row's shard (its values: shard indexes).
SHARD_COLUMN = "__tfio_shard"
#: A writer group holds shards of about this much input together (:func:`shards_per_writer`); a
#: shard of more input is its own group.
GROUP_INPUT_BYTES = 32 << 20
#: At most this many shards in one writer group.
MAX_SHARDS_PER_WRITER = 1024


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


def shards_per_writer(num_shards: int, input_bytes: int) -> int:
    """How many consecutive shards one piece (and one writer) takes together: as many as hold about
    :data:`GROUP_INPUT_BYTES` of input between them, at most :data:`MAX_SHARDS_PER_WRITER`; 1 for
    shards of that much input or more."""
    per_shard = max(1, input_bytes // max(1, num_shards))
    return int(max(1, min(num_shards, MAX_SHARDS_PER_WRITER, GROUP_INPUT_BYTES // per_shard)))


def writer_groups(num_shards: int, shards_per_piece: int) -> int:
    """The number of writer groups (pieces' keys) of ``num_shards`` shards in groups of ``shards_per_piece``."""
    return -(-max(1, num_shards) // max(1, shards_per_piece))


class Dealer:
    """A read task's dealing: :meth:`deal` each batch, then :meth:`finish`; both yield
    ``(shard, (key, ipc bytes or spill reference))`` pieces, the key ``(origin, n)`` for the task's n-th piece.
    ``origin``: what names the task (its index, or its first input's path); ``first``: the shard
    the task's first slice goes to (spread tasks over shards, deterministically: the task's index or
    a hash of its input).

    ``shards_per_piece`` > 1: pieces are keyed by writer group (shard // shards_per_piece) instead,
    and carry each row's shard in :data:`SHARD_COLUMN`; the same rows go to the same shards.

    ``spill``: a :class:`~tfrecord_io.conversion.spill.SpillWriter` that each piece's IPC stream is
    written into as it leaves, its ``(path, offset, length)`` reference sent in place of the bytes
    (the same bytes, never built in memory)."""

    def __init__(self, num_shards: int, first: int = 0, origin: Hashable = 0, shards_per_piece: int = 1,
                 spill=None):
        self._spill = spill
        self.num_shards = max(1, num_shards)
        self._per = max(1, min(shards_per_piece, self.num_shards))
        self._next = first % self.num_shards
        self._limit = piece_bytes(writer_groups(self.num_shards, self._per))
        self._origin = origin
        self._sent = 0
        self._buckets: dict[int, list[pa.RecordBatch]] = {}
        self._sizes: dict[int, int] = {}

    def deal(self, batch: pa.RecordBatch) -> Iterator[tuple[int, tuple[Hashable, bytes]]]:
        if self._per > 1:
            yield from self._deal_grouped(batch)
            return
        for start, length in slices(batch.num_rows, self.num_shards):
            shard = self._next
            self._next = (self._next + 1) % self.num_shards
            part = batch.slice(start, length)
            self._buckets.setdefault(shard, []).append(part)
            self._sizes[shard] = self._sizes.get(shard, 0) + part.nbytes
            if self._sizes[shard] >= self._limit:
                yield self._take(shard)

    def _deal_grouped(self, batch: pa.RecordBatch) -> Iterator[tuple[int, tuple[Hashable, bytes]]]:
        """:meth:`deal` with writer groups: the same slices to the same shards, cut only where the
        group changes (consecutive slices go to consecutive shards), each run with its shard column."""
        if not batch.num_rows:
            return
        pieces = max(1, min(self.num_shards, batch.num_rows))  # slices(), vectorized
        edges = np.linspace(0, batch.num_rows, pieces + 1).astype(np.int64)
        keep = edges[1:] > edges[:-1]
        starts, lengths = edges[:-1][keep], (edges[1:] - edges[:-1])[keep]
        shards = (self._next + np.arange(len(starts), dtype=np.int64)) % self.num_shards
        self._next = int((self._next + len(starts)) % self.num_shards)
        row_shard = np.repeat(shards.astype(np.int32), lengths)
        groups = shards // self._per
        cuts = np.flatnonzero(np.diff(groups)) + 1
        per_row = batch.nbytes / max(1, batch.num_rows)
        names = [*batch.schema.names, SHARD_COLUMN]
        for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(starts)]])):
            group = int(groups[a])
            lo, hi = int(starts[a]), int(starts[b - 1] + lengths[b - 1])
            part = batch.slice(lo, hi - lo)
            part = pa.RecordBatch.from_arrays([*part.columns, pa.array(row_shard[lo:hi])], names=names)
            self._buckets.setdefault(group, []).append(part)
            self._sizes[group] = self._sizes.get(group, 0) + int(per_row * (hi - lo))
            if self._sizes[group] >= self._limit:
                yield self._take(group)

    def finish(self) -> Iterator[tuple[int, tuple[Hashable, bytes]]]:
        for shard in sorted(self._buckets):
            yield self._take(shard)

    def _take(self, shard: int) -> tuple[int, tuple[Hashable, bytes]]:
        del self._sizes[shard]
        key = (self._origin, self._sent)
        self._sent += 1
        batches = self._buckets.pop(shard)
        return shard, (key, to_ipc(batches) if self._spill is None else self._spill.put_batches(batches))


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


def windows(pieces: Iterable[tuple[Hashable, bytes]], hold_bytes: int = HOLD_BYTES,
            by_key: bool = True) -> Iterator[pa.Table]:
    """The rows of ``(key, ipc bytes)`` pieces as tables of up to about ``hold_bytes`` of pieces each,
    the pieces of each window sorted by key (``by_key``; else as they came): the windows that
    :func:`shuffled` permutes."""
    held: list[tuple[Hashable, bytes]] = []
    size = 0

    def table() -> pa.Table:
        if by_key:
            held.sort(key=lambda kv: kv[0])
        return pa.Table.from_batches([b for _, data in held for b in from_ipc(data)])

    for key, data in pieces:
        held.append((key, data))
        size += len(data)
        if size >= hold_bytes:
            yield table()
            held, size = [], 0
    if held:
        yield table()


def split_window(window: pa.Table, shard: int, rngs: dict | None) -> tuple[pa.Table, list[tuple[int, int, int]]]:
    """A window's rows by shard: ``(rows, [(shard, start, length), ...])``, the rows grouped by shard in
    shard order.  ``window`` holds one shard's rows (``shard``), or several with :data:`SHARD_COLUMN`
    (dropped here); each shard's rows keep their order in the window, permuted by ``rngs[shard]``
    (``default_rng(shard)``, created when missing; ``rngs=None``: not permuted) -- per shard, what
    :func:`shuffled` and :func:`in_order` give."""
    if SHARD_COLUMN not in window.column_names:
        n = window.num_rows
        if rngs is not None and n:
            rng = rngs.get(shard)
            if rng is None:
                rng = rngs[shard] = np.random.default_rng(shard)
            window = window.take(pa.array(rng.permutation(n)))
        return window, [(shard, 0, n)] if n else []
    of_row = window.column(SHARD_COLUMN).to_numpy()
    window = window.drop_columns([SHARD_COLUMN])
    order = np.argsort(of_row, kind="stable")
    present, starts = np.unique(of_row[order], return_index=True)
    ends = np.append(starts[1:], len(order))
    spans = [(s, a, b - a) for s, a, b in zip(present.tolist(), starts.tolist(), ends.tolist())]
    if rngs is not None:
        for s, a, n in spans:
            rng = rngs.get(s)
            if rng is None:
                rng = rngs[s] = np.random.default_rng(s)
            order[a:a + n] = order[a:a + n][rng.permutation(n)]
    return window.take(pa.array(order)), spans
