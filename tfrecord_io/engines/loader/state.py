"""What a loader keeps as it runs and across restarts: its counters (:class:`LoaderStats`), where
the next iterator starts (:class:`LoaderResume`), and the identity check a restored iterator
makes of its data (:class:`_SameData`).  No TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
import weakref
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tfrecord_io.storage import source_identity
from tfrecord_io.storage.shard_cache import CacheStats


__all__ = ["CorruptFile", "LoaderStats", "LoaderResume"]


@dataclass(frozen=True)
class CorruptFile:
    """One file the loader could not read to its end (or, with ``shuffle="global"``, one bad record)."""

    uri: str
    offset: int | None       # byte offset of the bad record (uncompressed stream), if known
    check: str               # "data CRC", "length CRC", "truncated data", ..., or "record count"
    records_kept: int        # records read from it before the problem
    message: str


class LoaderStats:
    """Counters a dataset updates as it is read (thread-safe; read them at any time).

    ``files_read``: files or file segments read to their end (or to their first bad record), summed over
    epochs (a segment is a whole file, but with an ``input_context`` a file may be cut between
    pipelines); ``records_read``: records read; ``corrupt_files``: segments that ended early
    (``skipped`` lists them, in skip mode); ``cache``: the HDFS shard cache's counters, if one is used.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.files_read = 0
        self.records_read = 0
        self.corrupt_files = 0
        self.skipped: list[CorruptFile] = []
        self.caches: list[CacheStats] = []

    @property
    def cache(self) -> CacheStats | None:
        return self.caches[-1] if self.caches else None

    def _file_done(self, records: int, problem: CorruptFile | None, skipped: bool) -> None:
        with self._lock:
            self.files_read += 1
            self.records_read += records
            if problem is not None:
                self.corrupt_files += 1
                if skipped:
                    self.skipped.append(problem)

    def _files_done(self, files: int, records: int) -> None:
        """A pack of ``files`` whole files read to their end."""
        with self._lock:
            self.files_read += files
            self.records_read += records

    def _records_done(self, records: int, problems: Sequence[CorruptFile] = ()) -> None:
        with self._lock:
            self.records_read += records
            self.corrupt_files += len(problems)
            self.skipped.extend(problems)

    def as_dict(self) -> dict:
        with self._lock:
            return {"files_read": self.files_read, "records_read": self.records_read,
                    "corrupt_files": self.corrupt_files,
                    "skipped": [dataclasses.asdict(p) for p in self.skipped],
                    "cache": self.cache.as_dict() if self.cache else None}

    def __repr__(self) -> str:
        return f"LoaderStats({self.as_dict()})"


class LoaderResume:
    """Where the next iterator of a dataset (or of each pipeline of an :func:`input_fn`) starts.

    Each new iterator starts at the epoch after the last one the previous iterator was given
    (epoch 0 first) and reads all of it.  :meth:`start_epoch` changes that for the next
    iterator(s): epoch ``epoch`` (its file order and shuffles are those of that epoch, whatever
    ran before in this process), leaving out its first ``skip_batches`` batches -- what
    :class:`tfrecord_io.engines.resume.BackupAndRestore` does to resume training mid-epoch.
    ``batches_per_epoch`` is an epoch's batches when the record counts are known (else None);
    ``identity`` what the data is (:mod:`tfrecord_io.storage.source_identity`), for a saved state
    to be checked against.
    """

    def __init__(self) -> None:
        self._starts: weakref.WeakSet = weakref.WeakSet()
        self.batches_per_epoch: int | None = None
        self.identity: dict | None = None
        self.source_uri: str | None = None

    def _add(self, start: "_Start", batches_per_epoch: int | None, identity: dict, source_uri: str) -> None:
        self._starts.add(start)
        self.batches_per_epoch = batches_per_epoch
        self.identity, self.source_uri = identity, source_uri

    def start_epoch(self, epoch: int, skip_batches: int = 0) -> None:
        if not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        if not isinstance(skip_batches, (int, np.integer)) or skip_batches < 0:
            raise ValueError(f"skip_batches must be a non-negative integer, got {skip_batches!r}")
        for start in list(self._starts):
            start.set(int(epoch), int(skip_batches))


class _Start:
    """The first element of each iterator of one pipeline: (key, first epoch, batches to skip, token).

    Called (a numpy_function) when an iterator yields its first element; the token tells the
    shard cache one iterator's passes from another's.  A restored iterator never calls it: its
    epochs' arguments are part of its saved state.
    """

    def __init__(self, key: int, per_iteration: int):
        self.key, self.per_iteration = key, per_iteration
        self._epoch, self._skip = 0, 0
        self._lock = threading.Lock()

    def set(self, epoch: int, skip: int) -> None:
        with self._lock:
            self._epoch, self._skip = epoch, skip

    def __call__(self) -> tuple:
        with self._lock:
            epoch, skip = self._epoch, self._skip
            self._epoch, self._skip = epoch + self.per_iteration, 0
        return (np.int64(self.key), np.int64(epoch), np.int64(skip), np.int64(secrets.randbits(62)))


class _SameData:
    """The identity of the data a dataset reads, and the check a restored iterator makes of the
    identity it was saved with (a numpy_function: 0, or ValueError naming what changed)."""

    def __init__(self, identity: dict, uri: str):
        self.text = source_identity.as_text(identity)
        self.identity, self.uri = identity, uri

    def __call__(self, saved) -> np.int64:
        saved = saved.decode() if isinstance(saved, bytes) else str(saved)
        if saved != self.text:
            try:
                change = source_identity.describe_changes(json.loads(saved), self.identity)
            except ValueError as e:
                change = f"its saved description of the data is not readable ({e})"
            if change:
                raise ValueError(f"{self.uri}: the data changed since this iterator was saved: {change}; "
                                 f"restore it against the data it was saved over, or start a new iterator "
                                 f"(its epoch and batch positions would name other records)")
        return np.int64(0)
