"""The global shuffle's reader: records read one by one at the offsets their record indexes
give (``pread``, CRCs checked), from local copies of ``hdfs://`` shards.  No TensorFlow.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import google_crc32c
import numpy as np

from tfrecord_io.core.framing import HEADER_SIZE, RECORD_OVERHEAD, CorruptRecordError, mask_crc, masked_crc32c
from tfrecord_io.storage import fs
from tfrecord_io.storage.index import RecordIndex
from tfrecord_io.storage.sources import SourceFile, shard_mismatch
from tfrecord_io.core.checksum import file_crc32c
from tfrecord_io.engines.loader.files import _FileTable
from tfrecord_io.storage.fs import local_path
from tfrecord_io.engines.loader.options import _HEADER, _U32
from tfrecord_io.engines.loader.state import CorruptFile, LoaderStats

log = logging.getLogger(__name__)


class _Staged:
    """Local copies of every file of a source TensorFlow cannot open, for reading by offset.

    Downloads start at the first read (all files, ``threads`` at a time) into one directory of
    ``cache_dir``, kept for the dataset's lifetime (removed by :meth:`close`, see :class:`_Lifetime`,
    or at exit): a global shuffle reads every file in every batch.
    """

    def __init__(self, files: Sequence[SourceFile], cache_dir: str | None, threads: int):
        import shutil
        import tempfile

        self.files, self.cache_dir, self.threads = files, cache_dir, threads
        self._futures: list | None = None
        self._lock = threading.Lock()
        if cache_dir is not None:
            os.makedirs(cache_dir, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="tfrecord-io-staged-", dir=cache_dir)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="tfrecord-io-stage")
        self.close = weakref.finalize(self, lambda root, pool: (pool.shutdown(wait=False, cancel_futures=True),
                                                                shutil.rmtree(root, ignore_errors=True)),
                                      self.root, self._pool)

    def path(self, i: int) -> str:
        with self._lock:
            if self._futures is None:
                self._futures = [self._pool.submit(fs.get_file, f.uri, os.path.join(self.root, f"{k:06d}"))
                                 for k, f in enumerate(self.files)]
        self._futures[i].result()
        return os.path.join(self.root, f"{i:06d}")


class _Lifetime:
    """Deletes what a dataset staged on local disk once the dataset -- and every dataset made from it,
    every iterator of them, all of which hold it -- is garbage collected.

    TensorFlow keeps the Python functions of a pipeline built eagerly (and so the shard cache they
    use) for the life of the process, and says nothing when a pipeline or an iterator goes; this
    object, held by the dataset alone, is what goes with it.
    """

    def __init__(self, closables: Sequence[Any]):
        weakref.finalize(self, _close_all, [c.close for c in closables])


def _close_all(closers: Sequence[Any]) -> None:
    for close in closers:
        close()


def _check_content(fd: int, f) -> None:
    """A file about to be read at its offsets against its manifest entry (size, CRC-32C of its bytes),
    once, when first opened: ShardMismatchError naming it when it is not the file the conversion wrote."""
    if f.bytes is None and f.crc32c is None:
        return
    size = os.fstat(fd).st_size
    crc = None
    if f.crc32c is not None and (f.bytes is None or size == f.bytes):
        with open(fd, "rb", closefd=False) as fh:  # (the reads after are preads: the offset is no matter)
            crc, _ = file_crc32c(fh)
    problem = shard_mismatch(f, nbytes=size, crc32c=crc)
    if problem is not None:
        raise problem


class _RecordReader:
    """Records by global number, read at their offsets (a numpy_function; pure: same ids, same records).

    Global numbers run over the files in order.  Each record is read with one ``pread`` of its
    framed bytes, its length field checked against the index and both CRCs checked; a bad one is
    a CorruptRecordError naming the file and offset (``on_corrupt="skip"``: dropped, counted).
    """

    def __init__(self, table: _FileTable, indexes: Sequence[RecordIndex], staged: _Staged | None,
                 on_corrupt: str, stats: LoaderStats):
        self.table, self.indexes, self.staged = table, list(indexes), staged
        self.on_corrupt, self.stats = on_corrupt, stats
        self.starts = np.concatenate([[0], np.cumsum([ix.records for ix in indexes])]).astype(np.int64)
        self._fds: dict[int, int] = {}
        self._length_crcs: dict[int, int] = {}  # masked CRC of each length field seen (lengths repeat)
        self._lock = threading.Lock()
        weakref.finalize(self, _close_fds, self._fds)

    def _fd(self, i: int) -> int:
        with self._lock:
            fd = self._fds.get(i)
        if fd is None:
            path = self.staged.path(i) if self.staged is not None else local_path(self.table.files[i].uri)
            fd = os.open(path, os.O_RDONLY)
            try:
                _check_content(fd, self.table.files[i])
            except BaseException:
                os.close(fd)
                raise
            with self._lock:
                if i in self._fds:
                    os.close(fd)
                    fd = self._fds[i]
                else:
                    self._fds[i] = fd
        return fd

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        files = np.searchsorted(self.starts, ids, side="right") - 1
        local = ids - self.starts[files]
        order = np.lexsort((local, files))  # file by file, in file order: kinder to the disk
        groups = np.split(order, np.flatnonzero(np.diff(files[order])) + 1) if ids.size else []
        out = np.empty(ids.size, dtype=object)
        keep = np.ones(ids.size, dtype=bool)
        problems = []
        header, u32, value, pread = _HEADER.unpack_from, _U32.unpack_from, google_crc32c.value, os.pread
        length_crcs = self._length_crcs
        for group in groups:
            i = int(files[group[0]])
            index, fd = self.indexes[i], self._fd(i)
            ks = local[group]
            for j, offset, length in zip(group.tolist(), index.offsets[ks].tolist(), index.lengths[ks].tolist()):
                framed = pread(fd, length + RECORD_OVERHEAD, offset)
                good = len(framed) == length + RECORD_OVERHEAD
                if good:
                    stored, stored_crc = header(framed, 0)
                    crc = length_crcs.get(stored)
                    if crc is None:
                        crc = length_crcs.setdefault(stored, masked_crc32c(framed[:8]))
                    data = framed[HEADER_SIZE:HEADER_SIZE + length]
                    good = (stored == length and crc == stored_crc
                            and mask_crc(value(data)) == u32(framed, HEADER_SIZE + length)[0])
                if good:
                    out[j] = data
                    continue
                error = CorruptRecordError(self.table.files[i].uri, offset, *_frame_problem(framed, length))
                if self.on_corrupt != "skip":
                    raise error
                problems.append(CorruptFile(error.path, offset, error.check, 0, str(error)))
                keep[j] = False
        if problems:
            for p in problems:
                log.warning("on_corrupt='skip': %s; dropped that record", p.message)
            out = out[keep]
        self.stats._records_done(int(out.size), problems)
        return out


def _close_fds(fds: dict) -> None:
    for fd in fds.values():
        os.close(fd)


def _frame_problem(framed: bytes, length: int) -> tuple[str, str]:
    """(check, detail): why ``framed`` is not one intact record of ``length`` data bytes."""
    if len(framed) < length + RECORD_OVERHEAD:
        return "truncated data", f"expected {length + RECORD_OVERHEAD} bytes, got {len(framed)} before end of stream"
    stored, stored_crc = _HEADER.unpack_from(framed, 0)
    if stored != length:
        return "index", f"the length field says {stored}, the record index {length}"
    if masked_crc32c(framed[:8]) != stored_crc:
        return "length CRC", "the length field's CRC does not match"
    return "data CRC", f"the data CRC does not match over {length} data bytes"
