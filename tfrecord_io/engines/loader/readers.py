"""The tf.data side of reading: byte ranges through ``TFRecordDatasetV2``, the interleave over a
pipeline's segments, the window shuffle, the global shuffle's epochs, the declared length.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

import numpy as np


from tfrecord_io.storage.shard_cache import ShardCache, scheme_of
from tfrecord_io.storage.sources import Source
from tfrecord_io.engines.loader.checks import _RangeGuard, _SegmentChecker
from tfrecord_io.engines.loader.files import _FileTable
from tfrecord_io.storage.fs import local_path
from tfrecord_io.engines.loader.offsets import _RecordReader, _Staged
from tfrecord_io.engines.loader.options import (CHUNK_RECORDS, DEFAULT_CACHED_CYCLE_LENGTH, DEFAULT_CYCLE_LENGTH,
    GLOBAL_READ_RECORDS, LoaderOptions, _READ_BUFFER, _SHARDS_PER_CYCLE, _TF_COMPRESSION,
    _usable_cpus)
from tfrecord_io.engines.loader.plan import _EpochPlan, _Share
from tfrecord_io.engines.loader.state import LoaderStats


__all__ = ["tf_can_open"]

log = logging.getLogger(__name__)


_TF_SCHEMES: dict[str, bool] = {}


def tf_can_open(uri: str) -> bool:
    """True when TensorFlow's own filesystem layer can read ``uri`` (local paths always can).

    Probes ``tf.io.gfile.exists(uri)`` once per scheme: TF 2.21 raises ``UnimplementedError`` for
    ``hdfs://``; a TF built with HDFS support but without libhdfs raises another error.  Either
    way TF cannot read the scheme and the caller streams through :class:`ShardCache` instead.
    """
    scheme = scheme_of(uri)
    if scheme in ("", "file"):
        return True
    if scheme not in _TF_SCHEMES:
        import tensorflow as tf

        try:
            tf.io.gfile.exists(uri)
            _TF_SCHEMES[scheme] = True
        except tf.errors.OpError as e:
            log.info("TensorFlow cannot open %s:// (%s); streaming through a local shard cache",
                     scheme, e.message.splitlines()[0] if e.message else type(e).__name__)
            _TF_SCHEMES[scheme] = False
    return _TF_SCHEMES[scheme]


def _byte_range(paths, compression, start, skip, n):
    """The records of one byte range: ``n`` (-1: all) from byte ``start`` of ``paths`` (one file, or
    a pack's files read whole one after another, ``start`` 0), after ``skip``.

    ``TFRecordDatasetV2``'s ``byte_offsets`` (what ``tf.data.TFRecordDataset`` does not expose):
    TensorFlow seeks there (in a compressed file: by decompressing from the start) and reads,
    checking both CRCs, as ``TFRecordDataset`` does.  After a bad record it goes on with the
    next file of the list (its "so that it works with ignore_errors").
    """
    import tensorflow as tf

    variant = tf.raw_ops.TFRecordDatasetV2(filenames=paths, compression_type=compression,
                                           buffer_size=tf.constant(_READ_BUFFER, tf.int64),
                                           byte_offsets=tf.fill(tf.shape(paths), start))
    records = tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))
    return records.skip(skip).take(n)


def _pack_sizes(files) -> np.ndarray:
    """Each file's bytes (the manifest's, else its size now) for the packing of small files; -1
    for a file read on its own: one whose size is not known (not there: its error is said as it
    opens), or a zlib stream without a record count (its end check would read it again)."""
    sizes = np.full(len(files), -1, dtype=np.int64)
    for k, f in enumerate(files):
        if f.compression == "zlib" and f.records is None:
            continue
        if f.bytes is not None:
            sizes[k] = f.bytes
        else:
            try:
                sizes[k] = os.stat(local_path(f.uri)).st_size
            except OSError:
                pass
    return sizes


class _Reader:
    """The window-shuffle / in-order reading of one pipeline: segments -> checked chunks of records."""

    def __init__(self, table: _FileTable, opts: LoaderOptions, stats: LoaderStats, share: _Share | None,
                 pipeline_files: Sequence[int] | None):
        import tensorflow as tf

        files = table.files
        n = len(files)
        direct = all(tf_can_open(f.uri) for f in files)
        cycle = opts.cycle_length
        self.cache = None
        if direct:
            cycle = min(n, cycle or DEFAULT_CYCLE_LENGTH)
        else:
            if cycle is None:
                cycle = DEFAULT_CACHED_CYCLE_LENGTH
                if opts.cache_files is not None:
                    cycle = max(1, min(cycle, opts.cache_files // _SHARDS_PER_CYCLE))
            cycle = min(n, cycle)
            self.cache = ShardCache(opts.cache_files or _SHARDS_PER_CYCLE * cycle, cache_dir=opts.cache_dir,
                                    download_threads=opts.downloads)
            stats.caches.append(self.cache.stats)
        self.cycle = max(cycle, 1)
        self.opts = opts
        self.plan = _EpochPlan(table, share, opts.shuffle is True, self.cache, pipeline_files,
                               _pack_sizes(files) if direct and opts.on_corrupt == "error" else None)
        self.guard = _RangeGuard(table, opts.on_corrupt, stats, self.cache)
        self.checker = _SegmentChecker(table, opts.on_corrupt, stats, self.cache)
        self.paths = tf.constant([local_path(f.uri) for f in files] or [""], tf.string)
        self.comps = tf.constant([_TF_COMPRESSION[f.compression] for f in files] or [""], tf.string)

    def epoch(self, key, epoch, token):
        """The chunks of records (string vectors of up to CHUNK_RECORDS) of one epoch, in reading order."""
        import tensorflow as tf

        files, firsts, counts, wholes, bounds, pass_id = tf.numpy_function(
            self.plan, [key, epoch, token], [tf.int64] * 6, stateful=True)
        for t in (files, firsts, counts, wholes, bounds):
            t.set_shape([None])
        pass_id.set_shape([])
        # One element per segment, or per pack of small files (segments bounds[e] to bounds[e + 1]).
        elements = tf.data.Dataset.from_tensor_slices(
            (tf.range(tf.size(bounds, out_type=tf.int64) - 1), bounds[:-1], bounds[1:]))
        if self.cache is not None:
            # As the interleave takes each segment in (in order, before it opens it): its download
            # starts, in reading order, however the interleave's workers then race to open them.
            # (No packs through the cache: element e is segment e.)
            def want(pos, *rest):
                wanted = tf.numpy_function(lambda p, k: (self.cache.want(int(p), int(k)), k)[1], [pass_id, pos],
                                           tf.int64, stateful=True)
                return (tf.reshape(wanted, []), *rest)

            elements = elements.map(tf.autograph.experimental.do_not_convert(want))

        def element(pos, lo, hi):
            return self._segment(pass_id, pos, files[lo:hi], firsts[lo], counts[lo], wholes[lo])

        if self.cache is not None:
            def segment(pos, lo, hi):
                # Made as this element is first read, not when the interleave makes it (one at a
                # time): the wait for a shard's download holds up this file only.
                return tf.data.Dataset.from_tensors((pos, lo, hi)).flat_map(
                    tf.autograph.experimental.do_not_convert(element))
            parallel = self.cycle
        else:
            segment = element
            parallel = tf.data.AUTOTUNE
        return elements.interleave(tf.autograph.experimental.do_not_convert(segment), cycle_length=self.cycle,
                                   block_length=1, num_parallel_calls=parallel,
                                   deterministic=self.opts.is_deterministic)

    def _segment(self, pass_id, pos, seg_files, first, count, whole):
        """One element's chunks of records: a segment (``seg_files`` holds its one file) or a pack
        of whole small files.  A segment's byte ranges (all checked by the guard as it opens) are
        read one after another, then the end-of-segment check; a pack is one range over all its
        files (checked whole by the guard).  Every tf.data function here is one more to trace and
        instantiate before the first record (5 to 20 ms each on 2 CPUs) and every per-chunk step
        costs on each of ~1,000 chunks per million records, so there are few: the flat_map over
        the ranges and the checking scan."""
        import tensorflow as tf

        if self.cache is not None:
            path = tf.numpy_function(lambda p, k: self.cache.fetch(int(p), int(k)).encode("utf-8"),
                                     [pass_id, pos], tf.string, stateful=True)
            paths = tf.reshape(path, [1])
        else:
            paths = tf.gather(self.paths, seg_files)
        path, i = paths[0], seg_files[0]
        compression = tf.gather(self.comps, i)
        remaining = tf.where(whole > 0, tf.constant(-1, tf.int64), count)
        i64 = tf.int64
        ranges = tf.numpy_function(self.guard.element, [paths, seg_files, first, remaining],
                                   [i64, i64, i64, tf.bool, i64, i64], stateful=False)
        for t in ranges:
            t.set_shape([None])
        starts, skips, ns, lasts, records, widths = ranges
        marker = tf.data.Dataset.from_tensors(tf.zeros([0], tf.string))

        def read_range(start, skip, n, record, width):
            # The range's length check, just before TensorFlow opens it (in skip mode it may cut
            # the range short: the check below then ends the segment).  A read error (bad CRC,
            # truncation) ends the range's stream, dropping the chunk it was filling; the
            # end-of-segment check says which file, where and why.  ignore_errors after batch, not
            # per record: one tf.data stage fewer per record.  An empty chunk (batch never makes
            # one) marks the range's end.
            n = tf.numpy_function(self.guard.verify, [path, i, record, n], i64, stateful=False)
            n.set_shape([])
            chunks = _byte_range(paths[:width], compression, start, skip, n).batch(CHUNK_RECORDS).ignore_errors()
            return chunks.concatenate(marker)

        def check(state, chunk):
            got, nbytes, in_range, stopped, r = state
            size = tf.size(chunk, out_type=i64)
            is_marker = tf.equal(size, 0)
            at = tf.minimum(r, tf.size(ns, out_type=i64) - 1)
            expected, last = tf.gather(ns, at), tf.gather(lasts, at)
            # Once the segment has ended early (a corrupt record), the rest of the file is dropped.
            chunk = chunk[:tf.where(stopped, tf.constant(0, tf.int32), tf.size(chunk))]
            size = tf.where(stopped, tf.constant(0, i64), size)
            got, in_range = got + size, in_range + size
            nbytes = nbytes + tf.reduce_sum(tf.cast(tf.strings.length(chunk), i64))
            ends = tf.logical_not(stopped) & is_marker & (last | ((expected >= 0) & (in_range < expected)))
            # Python is called at the segment's end only: a numpy_function on every chunk costs
            # about 0.2 CPU-s per million records, and more in wall time (the GIL).
            def at_end():
                out = tf.numpy_function(self.checker.element, [paths, seg_files, first, count, whole, got, nbytes],
                                        tf.string, stateful=True)
                out.set_shape([None])
                return out

            tail = tf.cond(ends, at_end, lambda: tf.zeros([0], tf.string))
            in_range = tf.where(is_marker, tf.constant(0, i64), in_range)
            r = tf.where(is_marker, r + 1, r)
            return (got, nbytes, in_range, stopped | ends, r), tf.concat([chunk, tail], 0)

        zero = tf.constant(0, i64)
        # Chunks of CHUNK_RECORDS straight from TensorFlow's batch, so that files alternate every
        # 1,024 records.  Not read in larger chunks and split with ``rebatch``: a rebatch of
        # another rebatch's slices (the user's batch size, the shuffle's windows) prints "E0000
        # ... Tensor RefCount not reliable if buf_ points to a SubBuffer" for each (TF 2.21).
        plain = tf.autograph.experimental.do_not_convert  # (see make_dataset)
        return (tf.data.Dataset.from_tensor_slices((starts, skips, ns, records, widths)).flat_map(plain(read_range))
                .scan((zero, zero, zero, tf.constant(False), zero), plain(check)))


def _shuffle_windows(chunks, key, epoch, opts: LoaderOptions):
    """Shuffle records in windows of ``shuffle_buffer``: each window is permuted uniformly.

    Vectorized: one ``stateless_shuffle`` (a gather) per window instead of ``Dataset.shuffle``'s
    per-record work, which would halve the loader's throughput.  Each window holds records read
    consecutively from ``cycle_length`` interleaved files in shuffled file order, so a batch
    samples ``shuffle_buffer`` records around it, as ``Dataset.shuffle(shuffle_buffer)`` does (without
    its long tail).  Window w of an epoch is permuted with a seed of (key, epoch, w): the same
    after a restore, different in each epoch.
    """
    import tensorflow as tf

    base = tf.stack([key, epoch])

    def permute(w, window):
        return tf.random.experimental.stateless_shuffle(window, seed=tf.random.experimental.stateless_fold_in(base, w))

    return chunks.rebatch(opts.shuffle_buffer).enumerate().map(
        tf.autograph.experimental.do_not_convert(permute), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=opts.is_deterministic)


def _global_epoch(reader: _RecordReader, share: _Share, key, epoch, skip_records, opts: LoaderOptions):
    """One epoch of ``shuffle="global"``: this pipeline's positions of the epoch's permutation, read."""
    import tensorflow as tf

    total = int(reader.starts[-1])
    first, records = share.first, share.records
    positions = tf.data.Dataset.range(first + skip_records, first + records).batch(GLOBAL_READ_RECORDS)
    seed = tf.stack([key, epoch])

    def read(pos):
        ids = tf.random.experimental.index_shuffle(pos % total, seed=seed, max_index=tf.constant(total - 1, tf.int64))
        out = tf.numpy_function(reader, [ids], tf.string, stateful=False)
        out.set_shape([None])
        return out

    return positions.map(tf.autograph.experimental.do_not_convert(read), num_parallel_calls=tf.data.AUTOTUNE,
                         deterministic=True)


def _declare_length(ds, per_epoch: int | None, num_epochs: int | None):
    """``ds`` with its length declared: ``per_epoch x num_epochs`` batches (infinite for num_epochs=None).

    Keras takes an epoch's length from the dataset's cardinality, and without one from the first
    epoch it sees end -- after a resume, the shortened resumed epoch, which then cuts every later
    epoch short.  ``flat_map`` hides the count; ``assert_cardinality`` would restore it but fails an
    iterator started mid-epoch (``LoaderResume.start_epoch(skip_batches=k)`` yields k fewer).  So
    the count is declared without being asserted: ``ds`` followed by a dataset whose static
    cardinality is infinite but that yields nothing (``take(0)`` made of unknown cardinality by
    ``ignore_errors``, repeated: tf.data's ``repeat`` ends when a pass yields nothing; no function
    to trace) is infinite, and ``take`` makes it the count.  An iterator still ends where its
    data ends.
    """
    if per_epoch is None:
        return ds
    import tensorflow as tf

    nothing = tf.nest.map_structure(lambda spec: tf.zeros([d if d is not None else 0 for d in spec.shape],
                                                          spec.dtype), ds.element_spec)
    ds = ds.concatenate(tf.data.Dataset.from_tensors(nothing).take(0).ignore_errors().repeat())
    return ds if num_epochs is None else ds.take(per_epoch * num_epochs)


def _window_pipeline(table: _FileTable, opts: LoaderOptions, stats: LoaderStats, share: _Share | None, batch: int,
                     pipeline_files: Sequence[int] | None):
    """``(key, epoch, skip, token) -> the epoch's batches`` (unparsed) for ``shuffle=True`` or False,
    the tf.data options the pipeline needs and the shard cache it stages files in (None: none)."""
    import tensorflow as tf

    if not table.files:
        return (lambda key, epoch, skip, token: tf.data.Dataset.from_tensor_slices(tf.zeros([0, 0], tf.string)),
                None, None)
    reader = _Reader(table, opts, stats, share, pipeline_files)
    threads = None
    if reader.cache is not None:
        # Up to 3 x cycle workers may be waiting in fetch() at once: give them threads of their
        # own, beyond one per CPU for the work (see the package doc).
        threads = tf.data.Options()
        threads.threading.private_threadpool_size = _usable_cpus() + _SHARDS_PER_CYCLE * reader.cycle

    def epoch_batches(key, epoch, skip, token):
        chunks = reader.epoch(key, epoch, token)
        if opts.shuffle is True:
            chunks = _shuffle_windows(chunks, key, epoch, opts)
        return chunks.rebatch(batch, drop_remainder=opts.drop_remainder).skip(skip)

    return epoch_batches, threads, reader.cache


def _global_pipeline(table: _FileTable, src: Source, opts: LoaderOptions, stats: LoaderStats, share: _Share | None,
                     batch: int):
    """``(key, epoch, skip, token) -> the epoch's batches`` (unparsed) for ``shuffle="global"``, and
    the local copies it reads (None: none)."""
    import tensorflow as tf

    compressed = [f.uri for f in table.files if f.compression != "none"]
    if compressed:
        raise ValueError(f"shuffle='global' reads records at their offsets, which a gzip or zlib stream does not "
                         f"allow: {compressed[0]} is {table.files[0].compression}-compressed (use shuffle=True, "
                         f"or write uncompressed shards)")
    indexes = table.load_indexes()
    lacking = [f.uri for f, ix in zip(table.files, indexes) if ix is None]
    if lacking:
        raise ValueError(f"shuffle='global' needs every file's record index; {len(lacking)} of {len(table.files)} "
                         f"have none ({lacking[0]}, ...): a tfrecord-io output has them, `tfrecord-io index "
                         f"SOURCE` writes them for other files")
    staged = None
    if not all(tf_can_open(f.uri) for f in table.files):
        staged = _Staged(table.files, opts.cache_dir, opts.downloads)
    reader = _RecordReader(table, indexes, staged, opts.on_corrupt, stats)
    total = int(reader.starts[-1])
    if share is None:
        share = _Share(0, total, total)

    def epoch_batches(key, epoch, skip, token):
        if total == 0:
            return tf.data.Dataset.from_tensor_slices(tf.zeros([0, 0], tf.string))
        records = _global_epoch(reader, share, key, epoch, skip * batch, opts)
        return records.rebatch(batch, drop_remainder=opts.drop_remainder)

    return epoch_batches, staged
