"""Fault injection for tests: write attempts that die or stall mid-write, on every engine.

The engines take a ``faults`` object as a parameter -- never from the environment or from a
public option: :func:`tfrecord_io.engines.spark.run_conversion`, :func:`tfrecord_io.engines.beam.run_conversion`,
and the ``tfrecord`` data source registered with :func:`data_source`.  A write task hands the
batches it is about to write to ``faults.around_write(records, output=..., shard=..., attempt=...)``
and writes what comes back, so a fault strikes after the first batch has reached the file: a
partly written attempt, as a killed executor leaves.

:class:`FirstAttempt` picks the *first* attempt at each chosen shard -- the one that creates the
marker ``_temporary/faults/<shard>`` as it starts writing (an exclusive create, so exactly one
attempt wins on any engine, including Beam's, whose retries carry no attempt number) -- and

* ``die``: ends its process with ``os._exit`` (a Spark Python worker, a Flink SDK harness), or
  raises where the attempt runs in the driver's own process (Beam's in-process runners, a
  LOOPBACK worker), whose death would end the test;
* ``stall``: makes it a straggler -- it sleeps, holding its partly written file, until its
  engine kills it (Spark's speculation runs a copy that wins) or ``_temporary`` is gone (the job
  was committed or aborted), then fails without writing more.

Retries and speculative copies find the marker and run normally.  The spark-submit entry point
for tests is ``tests/jobs/faulty_to_tfrecord.py`` (``jobs/to_tfrecord.py`` with a fault).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from tfrecord_io.storage import fs
from tfrecord_io.storage.output import TEMPORARY

__all__ = ["FirstAttempt", "data_source"]

EXIT_STATUS = 86  # a killed attempt's exit status, recognizable in logs


@dataclass(frozen=True)
class FirstAttempt:
    """The first attempt at writing each of ``shards`` (None: every shard) dies or stalls (module doc).

    action: ``"die"`` or ``"stall"``.
    shards: shard (partition) indexes, or None for all.
    stall_s: the longest a stalled attempt sleeps (default 120 s).
    driver_pid: the process that made this object: an attempt running there raises instead of dying.
    """

    action: str
    shards: frozenset[int] | None = None
    stall_s: float = 120.0
    driver_pid: int = field(default_factory=os.getpid)

    def __post_init__(self):
        if self.action not in ("die", "stall"):
            raise ValueError(f"a fault is 'die' or 'stall', got {self.action!r}")
        if self.shards is not None:
            object.__setattr__(self, "shards", frozenset(int(s) for s in self.shards))

    @classmethod
    def parse(cls, spec: str) -> "FirstAttempt":
        """``die:0,2``, ``stall:1``, ``die:*`` (every shard)."""
        action, _, which = spec.partition(":")
        which = which.strip()
        return cls(action.strip(), None if which in ("", "*") else frozenset(int(s) for s in which.split(",")))

    def around_write(self, records: Iterable, *, output: str, shard: int, attempt: str) -> Iterator:
        if self.shards is not None and shard not in self.shards:
            yield from records
            return
        first = self._claim(output, shard)  # as the attempt starts writing
        records = iter(records)
        for batch in records:
            yield batch
            if first:
                self._strike(output, shard, attempt)
            break
        yield from records

    def _claim(self, output: str, shard: int) -> bool:
        """Is this the first attempt at ``shard``?  (Never once ``_temporary`` is gone: a late attempt
        must not bring it back into a committed output.)"""
        if not fs.exists(fs.join(output, TEMPORARY)):
            return False
        try:
            with fs.open(fs.join(output, TEMPORARY, "faults", str(shard)), "xb"):
                return True
        except FileExistsError:
            return False

    def _strike(self, output: str, shard: int, attempt: str) -> None:
        say = (f"tfrecord-io: fault injection: {'killing' if self.action == 'die' else 'stalling'} task attempt "
               f"{attempt} mid-write (shard {shard}, python pid {os.getpid()})")
        sys.stderr.write(say + "\n")
        sys.stderr.flush()
        if self.action == "die":
            if os.getpid() == self.driver_pid:
                raise RuntimeError(say)
            os._exit(EXIT_STATUS)
        temporary = fs.join(output, TEMPORARY)
        started = time.monotonic()
        while time.monotonic() - started < self.stall_s:
            time.sleep(0.5)
            if not fs.exists(temporary):
                raise RuntimeError(f"{temporary} is gone (the job was committed or aborted); stalled task "
                                   f"attempt {attempt} writes nothing more")
        sys.stderr.write(f"tfrecord-io: fault injection: task attempt {attempt} woke after {self.stall_s:g}s\n")


def data_source(faults) -> type:
    """The ``tfrecord`` data source with ``faults`` in its writer: ``spark.dataSource.register(data_source(f))``."""
    from tfrecord_io.engines.spark_datasource import TFRecordDataSource

    return type("FaultyTFRecordDataSource", (TFRecordDataSource,), {"faults": faults})
