"""The checks around TensorFlow's reader: the length check of a segment's byte ranges
(:class:`_RangeGuard`) and the end-of-segment check that names a corrupt file and offset
(:class:`_SegmentChecker`).  No TensorFlow: plain functions of their arguments, called by the
pipeline as ``numpy_function`` calls.
"""

from __future__ import annotations

import logging
import mmap
import os

import numpy as np

from tfrecord_io.core.framing import HEADER_SIZE, RECORD_OVERHEAD, CorruptRecordError, read_records
from tfrecord_io.storage import fs
from tfrecord_io.storage.index import RecordIndex
from tfrecord_io.storage.shard_cache import ShardCache
from tfrecord_io.storage.sources import SourceFile, shard_mismatch
from tfrecord_io.core import checksum
from tfrecord_io.core.checksum import file_crc32c
from tfrecord_io.engines.loader.files import _FileTable, _gzip_isize
from tfrecord_io.storage.fs import local_path
from tfrecord_io.engines.loader.options import (CHUNK_RECORDS, FIRST_RANGE_RECORDS, MAX_RANGE_BYTES,
    MAX_RANGE_RECORDS, _LENGTH)
from tfrecord_io.engines.loader.state import CorruptFile, LoaderStats

log = logging.getLogger(__name__)


class _RangeGuard:
    """Where TensorFlow reads next in a segment, and how far: the length check (see the package doc).

    Called by :meth:`segment` for each byte range of a segment in turn (pure: the same answer
    for the same arguments): ``(path, file, offset, record, remaining, step)`` ->
    ``(start, skip, n, next_offset, last)``: TensorFlow reads ``n`` records (-1: to the end) from
    byte ``start`` after skipping ``skip`` records.  ``offset`` is -1 for a segment's first range
    (found from ``record``), ``remaining`` the segment's records left (-1: to the end of the file).
    Uncompressed files: every length in the range is checked against what remains of the file
    (and the index's lengths, by :meth:`verify`) before TensorFlow allocates it.  Compressed files need no check
    (TensorFlow's reader does not allocate a record's length up front there): one range.
    Through the shard cache it also tells the cache the shard is still being read.
    """

    def __init__(self, table: _FileTable, on_corrupt: str, stats: LoaderStats, cache: ShardCache | None):
        self.table, self.on_corrupt, self.stats, self.cache = table, on_corrupt, stats, cache

    def segment(self, path_b, i, first, remaining):
        """All the byte ranges of one segment at once: ``(starts, skips, ns, lasts, records)``
        (``records``: each range's first record).

        Called once, as the segment opens (a numpy_function: pure, the same answer for the same
        file and arguments), so that the pipeline reads a plain list of ranges: one tf.data
        function per segment instead of a range ``scan`` and ``take_while`` (fewer functions
        to trace and instantiate before the first batch).  An indexed file's ranges come from its
        index, and each range's length fields are checked by :meth:`verify` just before
        TensorFlow opens it (the first batch waits for one range's check, not the file's: a
        segment's whole check reads every page of the file); an unindexed file's ranges come from
        walking its headers here (remembered, so later epochs walk nothing); a compressed file
        is one range.  A bad length met by the walk raises here in error mode; in skip mode the
        ranges end before it.
        """
        offset, record, left, step = -1, int(first), int(remaining), 0
        out = []
        while True:
            start, skip, n, nxt, last = self(path_b, i, offset, record, left, step)
            out.append((int(start), int(skip), int(n), bool(last), record))
            if last or n <= 0:  # (n <= 0 and not last: nothing more can be read; ends it rather than looping)
                break
            record += int(n)
            left = left - int(n) if left >= 0 else left
            offset, step = int(nxt), step + 1
        starts, skips, ns, lasts, records = (
            np.array(column, dtype=dtype)
            for column, dtype in zip(zip(*out), (np.int64, np.int64, np.int64, np.bool_, np.int64)))
        lasts[-1] = True
        return starts, skips, ns, lasts, records

    def element(self, paths_b, files, first, remaining):
        """The byte ranges of an interleave element, as :meth:`segment`'s with each range's width
        (files read) last: a segment (one file: its ranges, width 1), or a pack of whole small
        files (one range over all of them, checked here: :meth:`pack`)."""
        if len(files) == 1:
            ranges = self.segment(paths_b[0], files[0], first, remaining)
            return (*ranges, np.ones(len(ranges[0]), np.int64))
        self.pack(paths_b, files)
        one = np.zeros(1, np.int64)
        return one, one, np.full(1, -1, np.int64), np.ones(1, np.bool_), one, np.full(1, len(files), np.int64)

    def pack(self, paths_b, files) -> None:
        """The checks of a pack of whole small files before TensorFlow opens any of them (error
        mode only: the loader packs no file in skip mode), on one read of each file: its size
        against its manifest; uncompressed, every length field against the file (with its index:
        the index's lengths; without: a walk of its headers, remembered); and, once per process,
        its bytes against the manifest's CRC-32C (a segment's end check does that after the read;
        here nothing of a file that is not the manifest's is read).  A bad one raises, naming it."""
        for path_b, i in zip(paths_b, files):
            local = local_path(path_b.decode("utf-8"))
            i = int(i)
            f = self.table.files[i]
            with open(local, "rb") as fh:
                st = os.fstat(fh.fileno())
                if f.bytes is not None and st.st_size != f.bytes:
                    raise shard_mismatch(f, nbytes=st.st_size)
                data = fh.read()
            if f.compression == "none":
                index = self.table.index(i, st.st_size)
                if index is not None:
                    self._check_lengths(local, f, index, 0, index.records, st.st_size, data)
                else:  # the whole file in one walk (step -1: a pack's, apart from a segment's first range)
                    self._walk(local, f, -1, 0, 1 << 62, -1, st, -1)
            if f.crc32c is not None:
                key = (i, st.st_size, st.st_mtime_ns)
                if not self.table.content_checked(key):
                    problem = shard_mismatch(f, nbytes=len(data), crc32c=checksum.extend(0, data))
                    if problem is not None:
                        raise problem
                    self.table.content_checked(key, True)

    def verify(self, path_b, i, record, n):
        """How many of the ``n`` records from ``record`` TensorFlow may read: called just before
        it opens the range.  An indexed uncompressed file's length fields are compared with the
        index's (vectorized); a bad one raises in error mode, and in skip mode cuts the range
        before it (the end-of-segment check then names it).  Other files were checked by
        :meth:`segment`.  Through the shard cache it tells the cache the shard is still being read."""
        local = local_path(path_b.decode("utf-8") if isinstance(path_b, bytes) else str(path_b))
        if self.cache is not None:
            self.cache.touch(local)  # still being read: copied again if it was evicted
        i, record, n = int(i), int(record), int(n)
        f = self.table.files[i]
        if f.compression != "none" or n <= 0:
            return np.int64(n)
        size = os.stat(local).st_size
        index = self.table.index(i, size)
        if index is None:
            return np.int64(n)
        return np.int64(self._check_lengths(local, f, index, record, n, size))

    def __call__(self, path_b, i, offset, record, remaining, step):
        local = local_path(path_b.decode("utf-8") if isinstance(path_b, bytes) else str(path_b))
        if self.cache is not None:
            self.cache.touch(local)  # still being read: copied again if it was evicted
        i, offset, record, remaining, step = int(i), int(offset), int(record), int(remaining), int(step)
        f = self.table.files[i]
        st = os.stat(local)
        if f.bytes is not None and st.st_size != f.bytes:  # before TF reads a record of someone else's file
            raise shard_mismatch(f, nbytes=st.st_size)
        index = self.table.index(i, st.st_size)
        if f.compression != "none":
            if record == 0:
                start, skip = 0, 0
            elif index is not None:
                start, skip = int(index.offsets[record]) if record < index.records else index.stream_bytes, 0
            else:
                start, skip = 0, record
            return _answer(start, skip, remaining, -1, True)
        want = min(FIRST_RANGE_RECORDS << (2 * step), MAX_RANGE_RECORDS)
        if remaining >= 0:
            want = min(want, remaining)
        if index is not None:
            return self._indexed(index, record, want, remaining, st.st_size)
        return self._walk(local, f, offset, record, want, remaining, st, step)

    def _bad(self, f: SourceFile, error: CorruptRecordError, start: int, n: int, size: int):
        """Error mode: raise; skip mode: TensorFlow reads the ``n`` records before the bad one, then stops."""
        if self.on_corrupt != "skip":
            self.stats._file_done(0, CorruptFile(f.uri, error.offset, error.check, 0, str(error)), False)
            raise error
        return _answer(start, 0, n, size, True)

    @staticmethod
    def _indexed(index: RecordIndex, record: int, want: int, remaining: int, size: int):
        """The next range from the index alone (its lengths are checked by :meth:`verify`)."""
        offsets = index.offsets
        start = int(offsets[record]) if record < index.records else size
        n = max(0, min(want, index.records - record))
        if n:  # at most MAX_RANGE_BYTES, but at least one record (checked by verify())
            limit = start + MAX_RANGE_BYTES
            n = max(1, min(n, int(np.searchsorted(offsets[record:record + n], limit, side="left"))))
        end = record + n
        nxt = int(offsets[end]) if end < index.records else size
        return _answer(start, 0, n, nxt, end >= index.records or n == remaining)

    def _check_lengths(self, local: str, f: SourceFile, index: RecordIndex, record: int, n: int, size: int,
                       data: bytes | None = None) -> int:
        """``n``, or in skip mode the records before the first length field that is not the index's
        (``data``: the file's bytes, when they were read already)."""
        offsets, lengths = index.offsets, index.lengths
        fields = _length_fields(local, offsets[record:record + n], data)
        differ = np.flatnonzero(fields != lengths[record:record + n])
        if not differ.size:
            return n
        j = int(differ[0])
        at = int(offsets[record + j])
        left = size - at - RECORD_OVERHEAD
        if int(fields[j]) > left:
            return int(self._bad(f, CorruptRecordError(
                f.uri, at, "truncated data", f"expected {int(fields[j])} data bytes, got {max(0, left + 4)} "
                f"before end of stream"), int(offsets[record]), j, size)[2])
        raise ValueError(f"{f.uri}: the length field at byte offset {at} says {int(fields[j])}, its index "
                         f"{index.uri} {int(lengths[record + j])}: the index is not this file's")

    def _walk(self, local: str, f: SourceFile, offset: int, record: int, want: int, remaining: int, st, step: int):
        # A walk's answer depends on the file and the arguments only: remembered, later epochs walk nothing.
        key = (f.uri, st.st_size, st.st_mtime_ns if local == local_path(f.uri) else None, offset, record,
               remaining, step)
        known = self.table.walked(key)
        if known is not None:
            return known
        size = st.st_size
        with open(local, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
            try:
                if offset < 0:  # a segment's first range: find its first record
                    pos, skipped, bad = _walk_headers(mm, size, 0, record, None)
                    if bad is None and skipped < record:
                        bad = (pos, f"the file ends after {skipped} records, before record {record}")
                    if bad is not None:
                        return self._bad(f, CorruptRecordError(f.uri, bad[0], "truncated data", bad[1]), pos, 0, size)
                    offset = pos
                end, n, bad = _walk_headers(mm, size, offset, want, offset + MAX_RANGE_BYTES)
            finally:
                if mm is not None:
                    mm.close()
        if bad is not None:
            return self._bad(f, CorruptRecordError(f.uri, bad[0], "truncated data", bad[1]), offset, n, size)
        answer = _answer(offset, 0, n, end, end >= size or n == remaining or size - end < RECORD_OVERHEAD)
        self.table.remember_walk(key, answer)
        return answer


def _answer(start: int, skip: int, n: int, nxt: int, last: bool) -> tuple:
    return (np.int64(start), np.int64(skip), np.int64(n), np.int64(nxt), np.bool_(last))


def _length_fields(local: str, offsets: np.ndarray, data: bytes | None = None) -> np.ndarray:
    """The 8-byte length fields of the records at ``offsets`` of a local file (or of its bytes,
    ``data``), as uint64.

    One gather from a view of the file as a little-endian uint64 at every byte position (an
    unaligned array with a stride of one byte): 10x faster than gathering 8 bytes per record
    (~1 ms per 100,000 records), which matters because a segment's whole check comes before its
    first record.  An offset without 8 bytes after it is an IndexError, as a read past the end."""
    if data is not None:
        return _words(data)[offsets]
    with open(local, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        words = _words(mm)
        try:
            fields = words[offsets]  # a copy: nothing of the mapping outlives it
        finally:
            del words
    return fields


def _words(buf) -> np.ndarray:
    """``buf`` as a little-endian uint64 at every byte position."""
    return np.ndarray(shape=(max(0, len(buf) - 7),), dtype="<u8", buffer=buf, offset=0, strides=(1,))


def _walk_headers(mm, size: int, pos: int, count: int, byte_limit: int | None):
    """Walk up to ``count`` record headers from ``pos`` (stopping past ``byte_limit``): ``(end,
    records, bad)``; ``bad`` is ``(offset, detail)`` for a length that runs past the end of the file.
    A tail too short to be a record stops the walk (TensorFlow reports it without harm)."""
    unpack = _LENGTH.unpack_from
    n = 0
    while n < count and size - pos >= RECORD_OVERHEAD:
        (length,) = unpack(mm, pos)
        if length > size - pos - RECORD_OVERHEAD:
            return pos, n, (pos, f"expected {length} data bytes, got {max(0, size - pos - HEADER_SIZE)} before "
                                 f"end of stream")
        pos += length + RECORD_OVERHEAD
        n += 1
        if byte_limit is not None and pos >= byte_limit:
            break
    return pos, n, None


_NOTHING = np.zeros([0], dtype=object)


class _SegmentChecker:
    """Called when TensorFlow's reading of a segment stops (the pipeline calls it at the segment's
    end only): did it read all of it?

    TF reports ``n`` records of ``nbytes`` payload.  A whole file was read to its end iff the
    framed stream they make (``nbytes + 16 n``) is the file (uncompressed: its size; gzip: its
    ISIZE trailer) or ``n`` is the manifest's count; a part of a file iff ``n`` is its count.
    When that does not settle it, our own framing reader reads the file to find the bad record
    (file, offset, which check).  Releases the segment's shard in the cache either way.
    """

    def __init__(self, table: _FileTable, on_corrupt: str, stats: LoaderStats, cache: ShardCache | None):
        self.table, self.on_corrupt, self.stats, self.cache = table, on_corrupt, stats, cache

    def element(self, paths_b, files, first, count, whole, n, nbytes):
        """The end-of-element check: :meth:`__call__` for a segment, :meth:`pack` for a pack."""
        if len(files) == 1:
            return self(paths_b[0], files[0], first, count, whole, n, nbytes)
        return self.pack(paths_b, files, int(n), int(nbytes))

    def pack(self, paths_b, files, n: int, nbytes: int):
        """A pack of whole small files read to its end: did TensorFlow read every record of every
        file?  It did iff the framed streams its records make are the files (uncompressed: the
        sum of their sizes; gzip: of their ISIZE trailers) and, with a manifest, ``n`` is the sum
        of their counts.  When that does not hold, our own framing reader reads the files in
        turn to name the first bad one (file, offset, which check) and raises (packs are read in
        error mode only).  (Each file's bytes were checked against its manifest's CRC-32C by the
        guard, before the read: :meth:`_RangeGuard.pack`.)"""
        paths = [p.decode("utf-8") for p in paths_b]
        fs_ = [self.table.files[int(i)] for i in files]
        stream_bytes = nbytes + RECORD_OVERHEAD * n
        counts = [f.records for f in fs_]
        complete = None not in counts and n == sum(counts)
        kinds = {f.compression for f in fs_}
        if kinds == {"none"}:
            sizes = [f.bytes if f.bytes is not None else os.stat(local_path(p)).st_size for p, f in zip(paths, fs_)]
            complete = (complete or None in counts) and stream_bytes == sum(sizes)
        elif not complete and kinds == {"gzip"}:
            sizes = []
            for p in paths:
                with self._open(p) as fh:
                    sizes.append(_gzip_isize(fh))
            complete = None not in sizes and stream_bytes % (1 << 32) == sum(sizes) % (1 << 32)
        if not complete:
            total = 0
            for p, f in zip(paths, fs_):
                intact = 0
                try:
                    with self._open(p) as fh:
                        for _ in read_records(fh, name=f.uri, compression=f.compression, verify=True):
                            intact += 1
                except CorruptRecordError as e:
                    self.stats._file_done(0, CorruptFile(f.uri, e.offset, e.check, 0, str(e)), False)
                    raise
                if f.records is not None and intact != f.records:
                    message = f"{f.uri}: holds {intact} records, but _manifest.json says {f.records}"
                    self.stats._file_done(0, CorruptFile(f.uri, None, "record count", 0, message), False)
                    raise ValueError(message)
                total += intact
            complete = total == n
        if not complete:
            raise ValueError(f"{paths[0]} and the {len(paths) - 1} files read after it: TensorFlow stopped after {n} "
                             f"records, but the files hold intact records past them")
        self.stats._files_done(len(paths), n)
        return _NOTHING

    def __call__(self, path_b, index, first, count, whole, n, nbytes):
        path = path_b.decode("utf-8")
        f = self.table.files[int(index)]
        first, count, whole, n, nbytes = int(first), int(count), bool(whole), int(n), int(nbytes)
        try:
            problem, error, recovered = self._check(path, f, first, count, whole, n, nbytes)
            if problem is None:
                self._check_content(path, int(index), f)
        finally:
            if self.cache is not None:
                self.cache.release(path)  # the next shard can be fetched into its slot
        skip = self.on_corrupt == "skip"
        if problem is not None and not skip:
            self.stats._file_done(n, problem, skip)
            raise error
        self.stats._file_done(n + len(recovered), problem, skip)
        if problem is not None:
            log.warning("on_corrupt='skip': %s; kept the %d records before it and skipped the rest of the file",
                        problem.message, problem.records_kept)
        return np.array(recovered, dtype=object) if recovered else _NOTHING

    def _check_content(self, path: str, i: int, f: SourceFile) -> None:
        """The file's bytes against its manifest's CRC-32C, once per process per file and size
        (later epochs and segments read nothing more): ShardMismatchError naming the file when they
        are not the bytes the conversion wrote.  One more read of the file, from the page cache
        (or the shard cache's local copy) where TensorFlow just read it; ~10 GB/s of CRC."""
        if f.crc32c is None:
            return
        with self._open(path) as fh:
            fh.seek(0, os.SEEK_END)
            key = (i, fh.tell(), os.stat(local_path(path)).st_mtime_ns if "://" not in path else None)
            if self.table.content_checked(key):
                return
            fh.seek(0)
            crc, nread = file_crc32c(fh)
        problem = shard_mismatch(f, nbytes=nread, crc32c=crc)
        if problem is not None:
            raise problem
        self.table.content_checked(key, True)

    def _open(self, path: str):
        if "://" in path and not path.startswith("file:"):
            return fs.open(path, "rb")
        return open(local_path(path), "rb")

    def _check(self, path: str, f: SourceFile, first: int, count: int, whole: bool, n: int,
               nbytes: int) -> tuple[CorruptFile | None, Exception | None, list[bytes]]:
        """``(problem, error, recovered)``: ``(None, None, [])`` when TF read the whole segment.

        TF's stream ends at its first bad record and drops the chunk it was filling, so
        ``recovered`` holds the intact records after the ``n`` TF delivered (fewer than
        CHUNK_RECORDS): in skip mode they are handed on, and every record before the bad one is kept.
        """
        if whole:
            stream_bytes = nbytes + RECORD_OVERHEAD * n
            with self._open(path) as fh:
                if f.compression == "none":
                    fh.seek(0, os.SEEK_END)
                    complete = fh.tell() == stream_bytes
                elif f.records is not None:
                    complete = n == f.records
                elif f.compression == "gzip":
                    complete = _gzip_isize(fh) == stream_bytes % (1 << 32)
                else:
                    complete = False  # zlib has no size trailer: read it to know
            if complete and (f.records is None or n == f.records):
                return None, None, []
        elif n == count:
            return None, None, []
        intact = 0
        tail: list[bytes] = []
        try:
            with self._open(path) as fh:
                for k, record in enumerate(read_records(fh, name=f.uri, compression=f.compression, verify=True)):
                    if k < first:
                        continue
                    if not whole and k >= first + count:
                        break
                    if intact >= n and len(tail) < CHUNK_RECORDS:
                        tail.append(record)
                    intact += 1
        except CorruptRecordError as e:
            recovered = tail if intact - n == len(tail) else []
            kept = n + len(recovered)
            if intact != kept:
                e = CorruptRecordError(e.path, e.offset, e.check,
                                       f"{e.detail} (TensorFlow stopped after {n} records, {intact} read intact)")
            return (CorruptFile(uri=f.uri, offset=e.offset, check=e.check, records_kept=kept, message=str(e)),
                    e, recovered)
        if whole and f.records is not None and intact != f.records:
            message = f"{f.uri}: holds {intact} records, but _manifest.json says {f.records}"
        elif not whole and intact != count:
            message = f"{f.uri}: holds {first + intact} records, fewer than the {first + count} its count says"
        elif intact != n:
            message = f"{f.uri}: TensorFlow stopped reading after {n} records, but the file holds {intact} intact records"
        else:
            return None, None, []
        return (CorruptFile(uri=f.uri, offset=None, check="record count", records_kept=n, message=message),
                ValueError(message), [])
