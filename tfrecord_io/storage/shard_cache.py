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

A *pass* is one reader's ordered walk over shards (the loader: one epoch of one iterator), named
by an integer the reader chooses.  :meth:`ShardCache.plan` gives it its shards in reading order;
:meth:`ShardCache.want` says, in order, which shard the reader takes up next (the loader: as its
parallel interleave takes each shard in, before it opens it) and starts its download;
:meth:`ShardCache.fetch` hands out a shard's local copy once downloaded (from any thread: the
loader calls it from the interleave's workers, as each one starts reading its shard);
:meth:`ShardCache.touch` says a shard is still being read (and copies it again if it had to make
room, see below); :meth:`ShardCache.release` hands it back, deleting it.  Free slots go to
downloading the next shards of the pass, after the last one wanted, ahead of the reader.

Nothing here lives in the reader's (tf.data's) state, so a reader restored from a checkpoint in
a new process just plans its pass again and asks for the shards it holds and then the next ones:
downloads start where it is, never at the pass's beginning.  Rules that keep this deadlock-free:

* nothing ever waits for a *release*, i.e. for the reader's progress: py_functions run on the
  same few threads as the rest of the pipeline, so such a wait could hang it.  ``fetch`` and
  ``touch`` only wait for a download, which progresses on the cache's own threads;
* so a shard the reader asks for is always fetched.  When the cache is full, room is made by
  deleting a copy downloaded ahead of this pass's reader, past the shard asked for, or else by
  evicting shards of *other* passes -- copies not yet handed out first, then the least recently
  touched -- which a pass still alive copies again on its next ``touch`` (a pass whose iterator
  was dropped mid-way never hands its shards back: tf.data tells Python nothing when it deletes
  an iterator, so this is how its shards go).  Only with nothing to evict does a fetch go over
  the bound (``over_bound`` counts it; it cannot happen while ``max_files`` is at least the
  shards one reader holds: a parallel interleave holds its ``cycle_length`` open files plus
  ``2 x cycle_length`` it opens ahead, and the loader defaults ``max_files`` to ``3 x cycle_length``).

The staging directory is removed by :meth:`ShardCache.close`, when the cache is garbage
collected (the dataset that holds it is gone) or at interpreter exit.  The loader
(:func:`tfrecord_io.engines.loader.tf_can_open`) reads a scheme that TensorFlow has a working
filesystem for directly, with no cache.  This module imports no TensorFlow.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

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
    evicted: int = 0             # shards of other passes deleted to make room
    over_bound: int = 0          # shards fetched beyond max_files because the reader asked for them

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class _Aborted(Exception):
    """A download stopped because its pass was closed or its copy evicted."""


class _Session:
    """One pass of a reader over an ordered list of shards."""

    def __init__(self, sid: int, directory: str, uris: list[str]):
        self.sid = sid
        self.dir = directory
        self.uris = uris
        self.futures: dict[int, Future] = {}  # index -> its current download (absent: none, or evicted)
        self.slots: set[int] = set()          # indices holding a slot: downloading, on disk or being read
        self.handed: set[int] = set()         # indices handed to the reader and not released
        self.used: dict[int, float] = {}      # index -> when the reader last fetched or touched it
        self.next_start = 0                   # look-ahead: the next index after the last one wanted
        self.ahead: set[int] = set()          # indices whose download the look-ahead started
        self.copies = 0                       # downloads started (each has its own number)
        self.current: dict[int, int] = {}     # index -> the number of the download that is its copy
        self.aborted = False

    def done(self) -> bool:
        """Closed, or every shard's download started and every slot handed back."""
        return (self.aborted or self.next_start >= len(self.uris)) and not self.slots

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
        self._by_path: dict[str, tuple[_Session, int]] = {}
        self._warned = False
        self._closed = False
        self._pool = ThreadPoolExecutor(download_threads, thread_name_prefix="tfrecord-io-download")
        self._finalizer = weakref.finalize(self, _cleanup, self.root, self._pool)

    def close(self) -> None:
        """Stop all downloads and delete the staging directory."""
        with self._lock:
            self._closed = True
            for session in list(self._sessions.values()):
                self._abort_locked(session)
        self._finalizer()

    # -- the reader's side ------------------------------------------------------------------

    def plan(self, pass_id: int, uris: Sequence) -> None:
        """Open pass ``pass_id`` over ``uris`` (in reading order); again with the same shards: nothing.

        Starts no download: :meth:`want` and :meth:`fetch` start them from the shards asked for
        (a pass restored mid-way asks first for where it is).
        """
        uris = [u.decode("utf-8") if isinstance(u, bytes) else str(u) for u in uris]
        with self._lock:
            if self._closed:
                raise RuntimeError("the shard cache is closed")
            session = self._sessions.get(int(pass_id))
            if session is not None:
                if session.uris != uris:
                    raise RuntimeError(f"shard cache pass {int(pass_id)} was planned with other shards")
                return
            directory = os.path.join(self.root, f"pass-{int(pass_id) & 0xFFFFFFFFFFFF:012x}")
            os.makedirs(directory, exist_ok=True)
            self._sessions[int(pass_id)] = _Session(int(pass_id), directory, uris)

    def want(self, pass_id: int, index: int) -> None:
        """The reader takes up shard ``index`` of the pass next (called in reading order): start its
        download (making room if need be, see the module doc), and the look-ahead after it."""
        with self._lock:
            session = self._open_locked(pass_id)
            index = int(index)
            self._request_locked(session, index)
            session.next_start = max(session.next_start, index + 1)
            self._fill_locked()

    def fetch(self, pass_id: int, index: int) -> str:
        """The local copy of shard ``index`` of a :meth:`plan`-ned pass, once fully copied.

        Starts its download if it has not started, then waits for it -- never for the reader.
        Re-raises a failed download's error, which names the remote URI.  Hand the path back
        with :meth:`release` once read.
        """
        with self._lock:
            session = self._open_locked(pass_id)
            index = int(index)
            future = self._request_locked(session, index)
        path = self._wait(session, index, future)
        with self._lock:
            session.handed.add(index)
            session.used[index] = time.monotonic()
        return path

    def touch(self, local_path: str) -> None:
        """The reader is still reading ``local_path``: keep it, or copy it again if it was evicted."""
        with self._lock:
            found = self._by_path.get(local_path)
            if found is None:
                raise RuntimeError(f"{local_path} is not a shard handed out by this cache")
            session, index = found
            session.used[index] = time.monotonic()
            future = session.futures.get(index)
            if future is not None:
                return
            future = self._request_locked(session, index)
        self._wait(session, index, future)

    def release(self, local_path: str) -> None:
        """The reader is done with ``local_path``: delete it and use its slot for the next shard."""
        with self._lock:
            found = self._by_path.pop(local_path, None)
            if found is None:
                return  # already released, or its pass was closed
            session, index = found
            session.handed.discard(index)
            session.used.pop(index, None)
            future = session.futures.pop(index, None)
            session.current.pop(index, None)
            if future is not None and not future.done():
                future.cancel()  # released unread (e.g. its reader failed): the download cleans up
            if future is None or future.done():
                _remove(local_path)
                self._free_slot_locked(session, index)
            self._maybe_finish_locked(session)
            self._fill_locked()

    # -- internals (the caller holds self._lock where the name says so) ------------------------

    def _wait(self, session: _Session, index: int, future: Future) -> str:
        try:
            return future.result()
        except CancelledError as e:
            raise RuntimeError(f"the shard cache pass was closed while {session.uris[index]} "
                               f"was being copied") from e

    def _open_locked(self, pass_id: int) -> _Session:
        session = self._sessions.get(int(pass_id))
        if session is None or session.aborted:
            raise RuntimeError(f"shard cache pass {int(pass_id)} is not open")
        return session

    def _request_locked(self, session: _Session, index: int) -> Future:
        future = session.futures.get(index)
        session.ahead.discard(index)  # asked for: no longer a look-ahead copy
        if future is None:
            if self.stats.files_on_disk >= self.max_files and not self._evict_locked(session, index):
                self.stats.over_bound += 1
                if not self._warned:
                    self._warned = True
                    log.warning("the reader holds more shards than the cache bound (%d); fetching %s "
                                "anyway (raise cache_files)", self.max_files, session.uris[index])
            future = self._start_locked(session, index)
        return future

    def _start_locked(self, session: _Session, index: int) -> Future:
        path = session.local_path(index)
        session.slots.add(index)
        self._by_path[path] = (session, index)
        self.stats.files_on_disk += 1
        self.stats.max_files_on_disk = max(self.stats.max_files_on_disk, self.stats.files_on_disk)
        session.copies += 1
        session.current[index] = session.copies
        future = session.futures[index] = self._pool.submit(self._download, session, index, session.copies)
        return future

    def _fill_locked(self) -> None:
        """Start look-ahead downloads while there are free slots (oldest pass first)."""
        for session in sorted(self._sessions.values(), key=lambda s: s.sid):
            while (self.stats.files_on_disk < self.max_files and not session.aborted
                   and session.next_start < len(session.uris)):
                i = session.next_start
                session.next_start += 1
                if i not in session.futures and i not in session.handed:
                    self._start_locked(session, i)
                    session.ahead.add(i)

    def _evict_locked(self, requester: _Session, wanted: int) -> bool:
        """Make room for shard ``wanted`` of ``requester``: delete a copy the look-ahead made of one of
        its later shards (the furthest), else one copied shard of another pass -- one not handed
        out yet, else the least recently touched; False when there is none."""
        def copied(s: _Session, index: int) -> bool:
            future = s.futures.get(index)
            return future is not None and future.done() and not future.cancelled() and future.exception() is None

        ahead = [i for i in requester.ahead if i > wanted and copied(requester, i)]
        if ahead:  # the reader asks for it again when it gets there
            session, index = requester, max(ahead)
        else:
            candidates = [(index in s.handed, s.used.get(index, 0.0), s.sid, index, s)
                          for s in self._sessions.values() if s is not requester
                          for index in list(s.futures) if copied(s, index)]
            if not candidates:
                return False
            *_, index, session = min(candidates, key=lambda c: c[:4])
        session.ahead.discard(index)
        del session.futures[index]
        session.current.pop(index, None)
        _remove(session.local_path(index))
        self._free_slot_locked(session, index)
        if index not in session.handed:
            self._by_path.pop(session.local_path(index), None)
        self.stats.evicted += 1
        self._maybe_finish_locked(session)
        return True

    def _free_slot_locked(self, session: _Session, index: int) -> None:
        if index in session.slots:
            session.slots.discard(index)
            self.stats.files_on_disk -= 1

    def _maybe_finish_locked(self, session: _Session) -> None:
        """Forget a pass, and remove its directory, once it holds no slot and will take no more."""
        if session.done() and not session.handed and self._sessions.get(session.sid) is session:
            del self._sessions[session.sid]
            shutil.rmtree(session.dir, ignore_errors=True)

    def _abort_locked(self, session: _Session) -> None:
        """Close a pass: cancel what has not started, delete what is on disk.

        A download still running finds ``aborted`` set, deletes its file and frees its slot
        itself, so the count of files on disk never drops below what is there.
        """
        session.aborted = True
        session.handed.clear()
        for index, future in list(session.futures.items()):
            if future.cancel() or future.done():
                self._by_path.pop(session.local_path(index), None)
                del session.futures[index]
                _remove(session.local_path(index))
                self._free_slot_locked(session, index)
        self._maybe_finish_locked(session)

    def _download(self, session: _Session, index: int, copy: int) -> str:
        uri = session.uris[index]
        local = session.local_path(index)
        part = f"{local}.{copy}.part"
        try:
            try:
                copied = fs.get_file(uri, part, cancelled=lambda: session.aborted)
            except InterruptedError as e:
                raise _Aborted(uri) from e
            os.rename(part, local)
        except BaseException:
            _remove(part)
            with self._lock:
                self._forget_locked(session, index)
            raise
        with self._lock:
            if session.aborted or index not in session.futures or session.current.get(index) != copy:
                # closed, released or evicted meanwhile
                _remove(local)
                self._forget_locked(session, index)
                raise _Aborted(uri)
            self.stats.downloaded_files += 1
            self.stats.downloaded_bytes += copied
        return local

    def _forget_locked(self, session: _Session, index: int) -> None:
        """A download that will not be read: drop its slot (its file is already gone)."""
        if session.aborted or index not in session.handed:
            self._by_path.pop(session.local_path(index), None)
        self._free_slot_locked(session, index)
        self._maybe_finish_locked(session)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
