"""Streaming shards from a filesystem TensorFlow cannot open (``hdfs://`` on TF 2.21) into tf.data.

TensorFlow 2.21 has no ``hdfs`` filesystem (``UnimplementedError: File system scheme 'hdfs' not
implemented``) and tensorflow-io does not load on it.  :class:`ShardCache` bridges the gap: a
small local staging directory that copies shards ahead of the reader with
:func:`tfrecord_io.storage.fs.get_file` (hdfs-native, one streamed read per shard: no JVM, no libhdfs)
and deletes each one as soon as the reader has finished it, so ``tf.data.TFRecordDataset``
reads plain local files at native speed while disk use stays bounded whatever the size of the
dataset.

Bounds (per :class:`ShardCache`, i.e. per ``make_dataset`` call)::

    local disk   <= max_files shards (downloaded, downloading or being read)
    memory       <= download_threads x the packets of one streamed read (fs.get_file)

A pass (one epoch of one iterator) is opened and closed by :meth:`ShardCache.owner`.  The reader
gives the pass its shards in reading order with :meth:`ShardCache.plan` (which returns at once
and starts downloading ahead), asks for each shard's local copy with :meth:`ShardCache.fetch`
(from any thread: the loader calls it from a parallel interleave's workers, as each one starts
reading its next file) and hands it back with :meth:`ShardCache.release` when it reaches the
shard's end.  Free slots go to downloading the next shards of the pass ahead of the reader.
tf.data closes the owner when the pipeline is torn down, so an early stop (``take``, an error,
a deleted iterator) leaves nothing behind.  Rules that keep this deadlock-free:

* nothing ever waits for a *release*, i.e. for the reader's progress: py_functions run on the
  same few threads as the rest of the pipeline, so such a wait could hang it.  ``fetch`` only
  waits for a download, which progresses on the cache's own threads;
* so a shard the reader asks for is always fetched, even when the cache is full (``over_bound``
  counts it; it cannot happen while ``max_files`` is at least the number of shards the reader
  holds: a parallel interleave holds its ``cycle_length`` open files plus ``2 x cycle_length``
  it opens ahead, and the loader defaults ``max_files`` to ``3 x cycle_length``).

The loader (:func:`tfrecord_io.engines.tfdata.tf_can_open`) reads a scheme that TensorFlow has a
working filesystem for directly, with no cache.  This module imports no TensorFlow.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import weakref
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Sequence

from tfrecord_io.storage import fs

__all__ = ["CacheStats", "ShardCache", "scheme_of"]

log = logging.getLogger(__name__)

def scheme_of(uri: str) -> str:
    """``"hdfs"`` for ``hdfs://...``; ``""`` for a plain local path."""
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


@dataclass
class CacheStats:
    """What a :class:`ShardCache` did (read at any time; updated under the cache's lock)."""

    downloaded_files: int = 0
    downloaded_bytes: int = 0
    files_on_disk: int = 0       # shards holding a slot right now
    max_files_on_disk: int = 0   # the most at any one time
    over_bound: int = 0          # shards fetched beyond max_files because the reader asked for them

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class _Aborted(Exception):
    """A download stopped because its pass was closed."""


class _Session:
    """One pass of a reader over an ordered list of shards (one epoch of one iterator)."""

    def __init__(self, sid: int, directory: str):
        self.sid = sid
        self.dir = directory
        self.uris: list[str] | None = None  # set by plan()
        self.futures: dict[int, Future] = {}
        self.slots: set[int] = set()      # indices holding a slot: downloading, on disk or being read
        self.local: dict[str, int] = {}   # local path -> index, from the download's start to release
        self.next_start = 0               # lowest index whose download has not started
        self.aborted = False

    def done(self) -> bool:
        """Closed, or every shard's download started and every slot handed back."""
        started_all = self.uris is not None and self.next_start >= len(self.uris)
        return (self.aborted or started_all) and not self.slots

    def local_path(self, index: int) -> str:
        base = self.uris[index].rstrip("/").rsplit("/", 1)[-1]
        return os.path.join(self.dir, f"{index:06d}-{base}")


def _cleanup(root: str, pool: ThreadPoolExecutor) -> None:
    pool.shutdown(wait=False, cancel_futures=True)
    shutil.rmtree(root, ignore_errors=True)


class ShardCache:
    """A bounded local staging area that copies shards ahead of a tf.data reader (see module doc).

    ``max_files``: the most shards on local disk at once.  ``cache_dir``: where the staging
    directory is made (default: the system temp dir); it is removed by :meth:`close`, at
    garbage collection or when the interpreter exits.  ``download_threads``: shards copied in
    parallel.

    The reader's side, per pass: :meth:`owner` opens and closes the pass, :meth:`plan` sets its
    shards, :meth:`fetch` hands out each one's local copy, :meth:`release` deletes it once read.
    """

    def __init__(self, max_files: int, *, cache_dir: str | None = None, download_threads: int = 2):
        if not isinstance(max_files, int) or max_files < 1:
            raise ValueError(f"max_files must be a positive integer, got {max_files!r}")
        if not isinstance(download_threads, int) or download_threads < 1:
            raise ValueError(f"download_threads must be a positive integer, got {download_threads!r}")
        self.max_files = max_files
        if cache_dir is not None:
            os.makedirs(cache_dir, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="tfrecord-io-cache-", dir=cache_dir)
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._sessions: dict[int, _Session] = {}
        self._by_path: dict[str, _Session] = {}
        self._next_sid = 0
        self._warned = False
        self._pool = ThreadPoolExecutor(download_threads, thread_name_prefix="tfrecord-io-download")
        self._finalizer = weakref.finalize(self, _cleanup, self.root, self._pool)

    def close(self) -> None:
        """Stop all downloads and delete the staging directory."""
        with self._lock:
            for session in list(self._sessions.values()):
                self._abort_locked(session)
        self._finalizer()

    # -- the reader's side ------------------------------------------------------------------

    def owner(self) -> Iterator[int]:
        """A one-element generator that opens a pass, yields its id, and closes it when finished.

        The loader reads each pass as ``from_generator(cache.owner).flat_map(lambda pass_id:
        <plan(pass_id, uris), then an interleave over fetch(pass_id, i)>)``.  flat_map asks the
        owner for its next element only once the pass has been read to its end, and tf.data
        closes the owner when the pipeline is torn down mid-pass (iterator deleted, ``take``,
        an error).  Either way every shard of the pass still on disk is deleted then, including
        shards handed to the interleave that it had not opened yet.
        """
        session = self._open_session()
        try:
            yield session.sid
        finally:
            with self._lock:
                self._abort_locked(session)

    def plan(self, pass_id: int, uris: Sequence[str]) -> None:
        """Set the pass's shards (in reading order) and start downloading ahead.

        ``pass_id`` comes from :meth:`owner`.  The reader then asks for each shard with
        :meth:`fetch`, from any thread.
        """
        with self._lock:
            session = self._sessions.get(int(pass_id))
            if session is None or session.aborted or session.uris is not None:
                raise RuntimeError(f"shard cache pass {int(pass_id)} is not open (or already planned)")
            session.uris = [u.decode("utf-8") if isinstance(u, bytes) else str(u) for u in uris]
            self._fill_locked()

    def fetch(self, pass_id: int, index: int) -> str:
        """The local copy of shard ``index`` of a :meth:`plan`-ned pass, once fully copied.

        Starts its download if it has not started (even over the bound: see the module doc),
        then waits for it -- never for the reader.  Re-raises a failed download's error, which
        names the remote URI.  Hand the path back with :meth:`release` once read.
        """
        with self._lock:
            session = self._sessions.get(int(pass_id))
            if session is None or session.aborted or session.uris is None:
                raise RuntimeError(f"shard cache pass {int(pass_id)} is not open")
        future = self._request(session, int(index))
        try:
            return future.result()
        except CancelledError as e:
            raise RuntimeError(f"the shard cache pass was closed while {session.uris[index]} "
                               f"was being copied") from e

    def release(self, local_path: str) -> None:
        """The reader is done with ``local_path``: delete it and use its slot for the next shard."""
        with self._lock:
            session = self._by_path.pop(local_path, None)
            if session is None:
                return  # already released, or its pass was closed
            index = session.local.pop(local_path)
            future = session.futures.get(index)
            if future is not None and not future.done():
                future.cancel()  # released unread (e.g. its reader failed): the download cleans up
            if future is None or future.done():
                _remove(local_path)
                self._free_slot_locked(session, index)
            self._maybe_finish_locked(session)
            self._fill_locked()

    # -- internals (the caller holds self._lock where the name says so) ------------------------

    def _open_session(self) -> _Session:
        with self._lock:
            sid = self._next_sid
            self._next_sid += 1
            directory = os.path.join(self.root, f"pass-{sid:06d}")
            os.makedirs(directory)
            session = _Session(sid, directory)
            self._sessions[sid] = session
            return session

    def _request(self, session: _Session, index: int) -> Future:
        with self._lock:
            future = session.futures.get(index)
            if future is None:
                if self.stats.files_on_disk >= self.max_files:
                    self.stats.over_bound += 1
                    if not self._warned:
                        self._warned = True
                        log.warning("the reader holds more shards than the cache bound (%d); fetching %s "
                                    "anyway (raise cache_files)", self.max_files, session.uris[index])
                future = self._start_locked(session, index)
            return future

    def _start_locked(self, session: _Session, index: int) -> Future:
        # Downloads start in order; asking for index i also starts every earlier one not started.
        while session.next_start <= index:
            i = session.next_start
            session.next_start += 1
            session.slots.add(i)
            path = session.local_path(i)
            session.local[path] = i
            self._by_path[path] = session
            self.stats.files_on_disk += 1
            self.stats.max_files_on_disk = max(self.stats.max_files_on_disk, self.stats.files_on_disk)
            session.futures[i] = self._pool.submit(self._download, session, i)
        return session.futures[index]

    def _fill_locked(self) -> None:
        """Start look-ahead downloads while there are free slots (oldest pass first)."""
        for session in sorted(self._sessions.values(), key=lambda s: s.sid):
            while (self.stats.files_on_disk < self.max_files and not session.aborted
                   and session.uris is not None and session.next_start < len(session.uris)):
                self._start_locked(session, session.next_start)

    def _free_slot_locked(self, session: _Session, index: int) -> None:
        if index in session.slots:
            session.slots.discard(index)
            self.stats.files_on_disk -= 1

    def _maybe_finish_locked(self, session: _Session) -> None:
        """Forget a pass, and remove its directory, once it holds no slot and will take no more."""
        if session.done() and session.sid in self._sessions:
            del self._sessions[session.sid]
            shutil.rmtree(session.dir, ignore_errors=True)

    def _abort_locked(self, session: _Session) -> None:
        """Close a pass: cancel what has not started, delete what is on disk.

        A download still running finds ``aborted`` set, deletes its file and frees its slot
        itself, so the count of files on disk never drops below what is there.
        """
        session.aborted = True
        for path, index in list(session.local.items()):
            future = session.futures[index]
            if future.cancel() or future.done():
                self._by_path.pop(path, None)
                del session.local[path]
                _remove(path)
                self._free_slot_locked(session, index)
        self._maybe_finish_locked(session)

    def _download(self, session: _Session, index: int) -> str:
        uri = session.uris[index]
        local = session.local_path(index)
        part = local + ".part"
        try:
            try:
                copied = fs.get_file(uri, part, cancelled=lambda: session.aborted)
            except InterruptedError as e:
                raise _Aborted(uri) from e
            os.rename(part, local)
        except BaseException:
            _remove(part)
            with self._lock:
                self._forget_locked(session, index, local)
            raise
        with self._lock:
            if session.aborted or local not in session.local:  # closed or released meanwhile
                _remove(local)
                self._forget_locked(session, index, local)
                raise _Aborted(uri)
            self.stats.downloaded_files += 1
            self.stats.downloaded_bytes += copied
        return local

    def _forget_locked(self, session: _Session, index: int, local: str) -> None:
        """A download that will not be read: drop its slot (its file is already gone)."""
        if session.aborted:
            self._by_path.pop(local, None)
            session.local.pop(local, None)
        self._free_slot_locked(session, index)
        self._maybe_finish_locked(session)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
