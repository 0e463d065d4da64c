"""One writer per output: the lease a conversion holds on its output while it runs.

A conversion's driver writes ``<output>/_temporary/_lease.json`` when it prepares the output --
who holds it (``owner``, ``host``, ``pid``), when it ``started``, a ``heartbeat`` it rewrites every
:data:`HEARTBEAT_S` seconds, and ``ended`` once it commits or fails -- and every other
conversion reads it before touching the output (:func:`tfrecord_io.storage.output.check_output`):

* a **live** lease (not ended, a heartbeat younger than :data:`STALE_AFTER_S`, and on this host
  a pid still running) refuses the second conversion at its start, naming the first, even with
  ``--overwrite``: its staging is never deleted;
* an **ended** lease (a run that failed and cleaned what it could) lets the next run clear it;
* a **dead** lease (a run killed before it could end it: stale heartbeat, or its pid gone on this
  host) and a ``_temporary/`` with no lease of ours (another tool's committer, an older version)
  are deleted only with ``--overwrite``, and the refusal says which it is.

``df.write.format("tfrecord")`` builds its writer in one of Spark's short-lived Python workers,
which takes the lease; its heartbeat lasts while that worker lives (``convert`` of a table or
Parquet input holds it in its driver for the whole job, and hands the writer the run's id).

Local disk and HDFS alike (the lease is a small file written through :mod:`~tfrecord_io.storage.fs`).
Times are seconds since the epoch, compared with the reader's clock: hosts whose clocks differ by
more than a minute see a live run as dead (and then need ``--overwrite`` to break it).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from tfrecord_io.storage import fs

log = logging.getLogger(__name__)

__all__ = ["HEARTBEAT_S", "LEASE", "STAGING", "STALE_AFTER_S", "Lease", "held", "held_here", "hold", "read_lease", "release"]

STAGING = "_temporary"  # an output's staging (output.TEMPORARY): task attempts, and the lease
LEASE = "_lease.json"
HEARTBEAT_S = 10.0
STALE_AFTER_S = 60.0  # six missed heartbeats
_MAX_LEASE_BYTES = 1 << 16


@dataclass(frozen=True)
class Lease:
    run: str          # a random id: which run this is
    owner: str
    host: str
    pid: int
    started: float
    heartbeat: float
    ended: float | None = None

    def state(self, now: float | None = None) -> str:
        """``"live"``, ``"ended"`` or ``"dead"`` (see the module doc)."""
        if self.ended is not None:
            return "ended"
        now = time.time() if now is None else now
        if now - self.heartbeat >= STALE_AFTER_S:
            return "dead"
        if self.host == socket.gethostname() and not _running(self.pid):
            return "dead"
        return "live"

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        return (f"{self.owner}@{self.host} pid {self.pid}, started {_when(self.started)}, last heartbeat "
                f"{max(0.0, now - self.heartbeat):.0f} s ago")


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True


def _uri(output: str) -> str:
    return fs.join(output, STAGING, LEASE)


def read_lease(output: str) -> Lease | None:
    """The lease on ``output`` (None: there is none, or what is there is not a lease of ours)."""
    try:
        with fs.open(_uri(output), "rb") as f:
            data = json.loads(f.read(_MAX_LEASE_BYTES).decode("utf-8"))
        return Lease(str(data["run"]), str(data["owner"]), str(data["host"]), int(data["pid"]),
                     float(data["started"]), float(data["heartbeat"]),
                     None if data.get("ended") is None else float(data["ended"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        log.warning("%s is not a tfrecord-io lease (%s)", _uri(output), e)
        return None


def _write(output: str, lease: Lease) -> None:
    with fs.open(_uri(output), "wb") as f:
        f.write(json.dumps(asdict(lease)).encode("utf-8"))


class _Holder:
    def __init__(self, output: str, lease: Lease):
        self.output, self.lease = output, lease
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=f"tfrecord-io lease {output}", daemon=True)
        self.lock = threading.Lock()

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            with self.lock:
                if self.stop.is_set():
                    return
                self.lease = Lease(**{**asdict(self.lease), "heartbeat": time.time()})
                try:
                    if not fs.exists(_uri(self.output)):  # committed (or cleaned) meanwhile: never recreate it
                        return
                    _write(self.output, self.lease)
                except OSError as e:  # the next beat tries again; the run itself reports its own errors
                    log.warning("could not renew the lease on %s: %s", self.output, e)


_held: dict[str, _Holder] = {}  # output -> the lease this process holds on it


def _key(output: str) -> str:
    return output.rstrip("/") or "/"


_held_lock = threading.Lock()


def hold(output: str) -> Lease:
    """Take the lease on ``output`` (its ``_temporary/`` exists) and keep it alive until :func:`release`."""
    now = time.time()
    try:
        owner = getpass.getuser()
    except (KeyError, OSError):
        owner = str(os.getuid())
    lease = Lease(uuid.uuid4().hex, owner, socket.gethostname(), os.getpid(), now, now)
    _write(output, lease)
    holder = _Holder(output, lease)
    with _held_lock:
        old = _held.pop(_key(output), None)
        _held[_key(output)] = holder
    if old is not None:
        old.stop.set()
    holder.thread.start()
    return lease


def held_here(output: str) -> str | None:
    """The run id of the lease this process holds on ``output`` (None: none).  Its own lease is
    no other writer: taking the output again (Spark may build a data source's writer twice) replaces it."""
    with _held_lock:
        holder = _held.get(_key(output))
    return holder.lease.run if holder is not None else None


def held() -> list[str]:
    """The outputs whose leases this process holds (and renews)."""
    with _held_lock:
        return list(_held)


def release(output: str, *, ended: bool) -> None:
    """Stop renewing the lease on ``output``; with ``ended`` mark it ended (a failed run whose
    ``_temporary/`` stays: the next run may clear it).  The commit, which deletes ``_temporary/``
    and the lease with it, releases without."""
    with _held_lock:
        holder = _held.pop(_key(output), None)
    if holder is None:
        return
    with holder.lock:
        holder.stop.set()
        if ended and fs.exists(_uri(output)):  # (committed: gone with _temporary, never recreated)
            try:
                _write(output, Lease(**{**asdict(holder.lease), "ended": time.time()}))
            except OSError as e:
                log.warning("could not end the lease on %s: %s", output, e)
