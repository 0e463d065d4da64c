"""Each epoch's work: which records each input pipeline reads (equal shares under an
``input_context``), in which file order.  No TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tfrecord_io.storage.shard_cache import ShardCache
from tfrecord_io.engines.loader.files import _FileTable
from tfrecord_io.engines.loader.options import PACK_BYTES, PACK_FILE_BYTES, PACK_FILES


@dataclass(frozen=True)
class _Share:
    """This pipeline's records of each epoch: positions ``[first, first + records)`` of the epoch's
    order of all ``total`` records (taken modulo ``total``: with ``remainder="pad"`` the last
    pipeline's run goes on at the epoch's start).  ``total`` None: whole files, no split."""

    first: int = 0
    records: int | None = None
    total: int | None = None

    @property
    def split(self) -> bool:
        return self.total is not None


def _share(counts: Sequence[int | None], input_context, batch: int, remainder: str) -> _Share | None:
    """The equal share of ``input_context``'s pipeline (see the package doc); None without one."""
    if input_context is None:
        return None
    if any(c is None for c in counts):
        return None
    total = int(sum(counts))
    pipelines = input_context.num_input_pipelines
    per_step = batch * max(1, input_context.num_replicas_in_sync // pipelines)  # this pipeline, one step
    global_batch = per_step * pipelines
    steps = total // global_batch if remainder == "drop" else -(-total // global_batch)
    if steps == 0:
        raise ValueError(f"{total} records make no full global batch of {global_batch} ({pipelines} pipelines x "
                         f"{per_step}): remainder='drop' would read nothing; pass remainder='pad' or a smaller batch")
    records = steps * per_step
    return _Share(first=input_context.input_pipeline_id * records, records=records, total=total)


class _EpochPlan:
    """One epoch's segments for one pipeline: a pure function of (key, epoch) (a numpy_function).

    Returns ``(files, firsts, counts, wholes, bounds, pass_id)``: segment j reads ``counts[j]``
    records of file ``files[j]`` from record ``firsts[j]`` (``wholes[j]``: all of it, to its
    end).  The file order is a permutation seeded by (key, epoch) when shuffling, the same in
    every pipeline.  ``bounds`` groups the segments into what the interleave reads as one
    element: segments ``bounds[e]`` to ``bounds[e + 1]``: one segment, or a *pack* of whole small
    files read one after another by one TensorFlow reader (``pack_sizes``: each file's bytes,
    -1 for a file never packed; None: no packs).  Through the shard cache, the epoch's pass
    (``pass_id``, from the iterator's token) is planned.
    """

    def __init__(self, table: _FileTable, share: _Share | None, shuffle: bool, cache: ShardCache | None,
                 pipeline_files: Sequence[int] | None = None, pack_sizes: np.ndarray | None = None):
        self.table, self.share, self.shuffle, self.cache = table, share, shuffle, cache
        self.pipeline_files = pipeline_files  # without counts: this pipeline's files (files[id::n])
        self.counts = np.array([c if c is not None else -1 for c in table.counts()], dtype=np.int64)
        self.pack_sizes = pack_sizes
        self.compression = [f.compression for f in table.files]

    def __call__(self, key, epoch, token):
        key, epoch = int(key), int(epoch)
        files = np.array(self.pipeline_files if self.pipeline_files is not None else range(len(self.counts)),
                         dtype=np.int64)
        if self.shuffle and files.size > 1:
            files = files[np.random.default_rng([key & (2**63 - 1), epoch]).permutation(files.size)]
        if self.share is None or not self.share.split:
            firsts = np.zeros(files.size, np.int64)
            counts = self.counts[files]
            wholes = np.ones(files.size, np.int64)
        else:
            files, firsts, counts = self._cut(files)
            wholes = ((firsts == 0) & (counts == self.counts[files])).astype(np.int64)
        pass_id = np.int64((int(token) * 1_000_003 + epoch) & (2**62 - 1))
        if self.cache is not None:
            self.cache.plan(int(pass_id), [self.table.files[i].uri for i in files])
        return files, firsts, counts, wholes, self._packs(files, wholes), pass_id

    def _packs(self, files: np.ndarray, wholes: np.ndarray) -> np.ndarray:
        """The element bounds: runs of whole small files of one compression, consecutive in the
        epoch's order, become packs of up to PACK_FILES files and PACK_BYTES bytes."""
        if self.pack_sizes is None:
            return np.arange(files.size + 1, dtype=np.int64)
        sizes = self.pack_sizes[files]
        small = (wholes > 0) & (sizes >= 0) & (sizes <= PACK_FILE_BYTES)
        bounds = [0]
        held, held_bytes, kind = 0, 0, None  # the open pack: its files, bytes, compression
        for j in range(files.size):
            if small[j]:
                c = self.compression[files[j]]
                if held and (c != kind or held >= PACK_FILES or held_bytes + sizes[j] > PACK_BYTES):
                    bounds.append(j)
                    held, held_bytes = 0, 0
                held, held_bytes, kind = held + 1, held_bytes + int(sizes[j]), c
            else:
                if held:
                    bounds.append(j)
                    held, held_bytes = 0, 0
                bounds.append(j + 1)
        if held:
            bounds.append(files.size)
        return np.array(bounds, dtype=np.int64)

    def _cut(self, order: np.ndarray):
        """Segments of positions [first, first + records) of ``order``'s records, laps modulo total."""
        share = self.share
        sizes = self.counts[order]
        ends = np.cumsum(sizes)
        starts = ends - sizes
        out_files, out_firsts, out_counts = [], [], []
        lo, hi = share.first, share.first + share.records
        lap = (lo // share.total) * share.total
        while lo < hi:
            a, b = lo - lap, min(hi - lap, share.total)
            keep = (ends > a) & (starts < b) & (sizes > 0)
            seg_lo = np.maximum(starts[keep], a)
            seg_hi = np.minimum(ends[keep], b)
            out_files.append(order[keep])
            out_firsts.append(seg_lo - starts[keep])
            out_counts.append(seg_hi - seg_lo)
            lo = lap + b
            lap += share.total
        return (np.concatenate(out_files).astype(np.int64), np.concatenate(out_firsts).astype(np.int64),
                np.concatenate(out_counts).astype(np.int64))


def _batches_per_epoch(counts, share: _Share | None, batch: int, drop_remainder: bool) -> int | None:
    records = share.records if share is not None else (sum(counts) if None not in counts else None)
    if records is None:
        return None
    return records // batch if drop_remainder else -(-records // batch)
