"""Dealt pieces spilled to files: Beam's runners whose shuffle would hold them whole in memory,
and the Spark job writing to a local or mounted filesystem, whose shuffle would take them through
the JVM.

Beam's in-process runner (the ``FnApiRunner`` that ``DirectRunner`` falls back to) runs one stage
at a time and holds a stage's whole output in memory, across a ``GroupByKey``: every dealt piece
of the input -- the whole data set, as Arrow IPC bytes -- until the shards are written (979 MB of
resident memory for 1M rows, 7.9 GB for 16M).  On that runner a read task instead appends its
pieces to one file of its own under the output's ``_temporary/`` (:class:`SpillWriter`) and sends
only a reference ``(path, offset, length)`` through the shuffle; the writers read their pieces back
(:func:`read_pieces`) in key order.  The shuffle then holds a few hundred small tuples, and the peak
memory is a read task's buffers plus a writer's window (:data:`~tfrecord_io.conversion.dealing.HOLD_BYTES`),
whatever the number of rows.  The portable runners (Flink's and Spark's job servers) spill too: a
key's grouped values reach the SDK worker as one element, built whole in the job server's heap
(:func:`tfrecord_io.engines.beam.spills` says which runners).  The Spark job spills when its
output is not on HDFS (:func:`tfrecord_io.engines.spark.spills`): its driver collects the
references and hands each write task its shard's, so the pieces skip Spark's shuffle -- pickled
into the JVM, compressed, written, read and handed back to Python, a third of the time the whole
job takes beyond parsing and writing (BENCHMARKS.md).

The files are written and read through :mod:`tfrecord_io.storage.fs` (the output's filesystem,
which every worker can reach), and they go with ``_temporary``: deleted by the commit, or by the
abort of a failed run.  A retried read task writes a new file (a fresh attempt directory); only
the references of the attempt whose outputs the runner kept are ever read.  The disk they take,
until the commit, is about the size of the typed rows (roughly the input's size).
"""

from __future__ import annotations

from typing import BinaryIO, Hashable, Iterable, Iterator

from tfrecord_io.storage import fs

__all__ = ["SpillWriter", "is_spilled", "read_pieces"]

SPILL_NAME = "_spill.arrows"


def is_spilled(data) -> bool:
    """Is a piece's payload a reference to a spill file (rather than the IPC bytes themselves)?"""
    return isinstance(data, tuple)


class _Piece:
    """What pyarrow writes one piece's IPC stream to: the spill file, its bytes counted (its
    positions are the piece's own, as in :func:`~tfrecord_io.conversion.dealing.to_ipc`'s bytes,
    whatever the file's position and whether the filesystem's writer can tell it)."""

    closed = False

    def __init__(self, f: BinaryIO):
        self._f, self.length = f, 0

    def write(self, data) -> int:
        self._f.write(data)
        self.length += len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        return self.length

    def tell(self) -> int:
        return self.length

    def flush(self) -> None:
        pass


class SpillWriter:
    """A read task's spill file ``<directory>/_spill.arrows``, created at the first :meth:`put_batches`."""

    def __init__(self, directory: str):
        self.path = fs.join(directory, SPILL_NAME)
        self._f: BinaryIO | None = None
        self._offset = 0

    def put_batches(self, batches: list) -> tuple[str, int, int]:
        """Append batches of one schema as one Arrow IPC stream (the bytes
        :func:`~tfrecord_io.conversion.dealing.to_ipc` gives, written straight into the file
        rather than built in memory and copied to ``bytes`` first); its reference."""
        import pyarrow as pa

        if self._f is None:
            self._f = fs.open(self.path, "wb")
        piece = _Piece(self._f)
        with pa.ipc.new_stream(pa.PythonFile(piece, mode="w"), batches[0].schema) as writer:
            for b in batches:
                writer.write_batch(b)
        ref = (self.path, self._offset, piece.length)
        self._offset += piece.length
        return ref

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> "SpillWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_exactly(f: BinaryIO, length: int) -> bytes:
    parts, left = [], length
    while left:
        part = f.read(left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def read_pieces(pieces: Iterable[tuple[Hashable, object]]) -> Iterator[tuple[Hashable, bytes]]:
    """``(key, bytes)`` of ``(key, bytes or spill reference)`` pieces, in the order given, reading
    each reference from its spill file (one file open at a time; pieces of one file in key order
    read it front to back)."""
    path, f = None, None
    try:
        for key, data in pieces:
            if not is_spilled(data):
                yield key, data
                continue
            where, offset, length = data
            if where != path:
                if f is not None:
                    f.close()
                path, f = where, fs.open(where, "rb")
            f.seek(offset)
            got = _read_exactly(f, length)
            if len(got) != length:
                raise ValueError(f"{where}: spilled piece at offset {offset} of {length} bytes is cut short "
                                 f"({len(got)} bytes read); was _temporary removed while the job ran?")
            yield key, got
    finally:
        if f is not None:
            f.close()
