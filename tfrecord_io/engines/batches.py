"""Batches of TFRecords for any framework: dicts of numpy arrays (or Arrow RecordBatches), no TensorFlow.

The framework-free "engine": what :func:`tfrecord_io.make_dataset` does for ``tf.data``, for PyTorch,
JAX / Grain or plain numpy, with the vectorized decoder (:mod:`tfrecord_io.core.arrow_decode`)::

    from tfrecord_io import read_batches

    for batch in read_batches("hdfs://nn:8020/tfrecords/trips", batch_size=1024, shuffle=True, seed=0):
        batch["fare"]          # numpy float32, shape [1024]

``source`` is what every reader takes (:func:`tfrecord_io.storage.sources.resolve_source`): a
committed output directory (its ``_manifest.json`` gives the files, schema and compression), a
glob, a file or a list of files, local or ``hdfs://``.  The schema is the manifest's, ``schema=``
(a Schema, a dict or a YAML path), or else inferred from the first records, as
``spark.read.format("tfrecord")`` does.

The pipeline, per call (one per worker)::

    the source's files, in order
      -> this shard's share (shard=(index, count)): files[index::count]; with fewer files than
         shards, every file and the records with (file position + record number) % count == index
      -> file order shuffled each epoch (seeded)                          [shuffle=True]
      -> per file: records streamed a chunk at a time (both CRCs checked), each chunk decoded on
         one of decode_threads threads (the chunks' order kept)
      -> records shuffled in windows of shuffle_buffer (a uniform permutation of each window)
      -> batches of batch_size; each epoch ends with its partial batch (unless drop_remainder)

Memory is bounded: a file is streamed, never held; at most ``decode_threads`` + 1 chunks (of at
most 4,096 records), one shuffle window and one batch are in memory at once.  Shards are disjoint and together hold every record exactly
once, whatever the file order or seed, so ``shard=(worker, workers)`` splits an epoch among data
loader workers or hosts.

What a batch holds (``format="numpy"``, the default), as :func:`~tfrecord_io.make_dataset` does:
scalars ``[batch]``, ``[k]`` lists ``[batch, k]`` (a missing one takes the schema ``default``; with
no default it is an error naming the file, the record and the feature, as TensorFlow's "required
but could not be found"), ``[-1]`` lists a :class:`Ragged` (missing: an empty row).  Numbers are
int64 / float32 arrays, ``string`` features object arrays of ``str``, ``bytes`` ones of ``bytes``.
SequenceExample features are padded to the longest sequence in the batch, ``[batch, steps]``
(``[batch, steps, k]`` for ``[k]`` steps; padding 0, ``""`` or ``b""``), with their step counts in
``<name>_length``; ``[-1]`` steps are a :class:`Ragged` of :class:`Ragged` rows.  With
``format="arrow"`` a batch is the decoder's RecordBatch as it is: nulls where a feature is missing.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfrecord_io.core.arrow_decode import Origin, decode_batch
from tfrecord_io.core.framing import CorruptRecordError, until_corrupt
from tfrecord_io.engines.reader_options import check_common, check_feature_names
from tfrecord_io.core.schema import Feature, Schema
from tfrecord_io.storage import sources
from tfrecord_io.storage.partitions import select_partitions
from tfrecord_io.storage.sources import Source, SourceFile, iter_file_chunks

__all__ = ["BatchOptions", "Ragged", "read_batches"]

log = logging.getLogger(__name__)

DEFAULT_SHUFFLE_BUFFER = 10_000
_CHUNK_RECORDS = 4096  # records decoded at once, at most (a chunk is about one 1 MiB read, or a few of
                       # large records: iter_file_chunks; the decoder's working set stays in the CPU cache)
_FORMATS = ("numpy", "arrow")


@dataclass(frozen=True)
class BatchOptions:
    """Everything :func:`read_batches` takes besides ``source`` and ``schema``.

    batch_size: records per batch.
    features: the features to read, in order (default: all of the schema's).
    shard: ``(index, count)``: read only this worker's share (module doc). Default: everything.
    shuffle: shuffle the file order (each epoch) and the records (in windows). Default False.
    shuffle_buffer: records per shuffle window (bounds memory). Default 10,000.
    seed: makes the order reproducible; None: a different one each run.
    num_epochs: passes over the data; None repeats forever. Default 1.
    drop_remainder: drop each epoch's last partial batch.
    format: ``"numpy"`` (dicts of arrays, module doc) or ``"arrow"`` (RecordBatches).
    compression: ``"auto"`` (the manifest's, else from each file's extension), or ``"none"`` /
        ``"gzip"`` / ``"zlib"`` for every file.
    on_corrupt: ``"error"`` (a damaged file fails, naming it and the byte offset) or ``"skip"``
        (the rest of that file is dropped, with a warning).
    decode_threads: chunks of records decoded at once, on threads of the reader's own (the
        batches are the same, in the same order, whatever the number).  Default None: the CPUs
        this process may use, at most 4 (``_default_threads``), as pyarrow's ``use_threads``;
        1 decodes on the caller's thread (where one process per core already runs, e.g. many
        DataLoader workers).
    """

    batch_size: int
    features: tuple[str, ...] | None = None
    shard: tuple[int, int] | None = None
    shuffle: bool = False
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    seed: int | None = None
    num_epochs: int | None = 1
    drop_remainder: bool = False
    format: str = "numpy"
    compression: str = "auto"
    on_corrupt: str = "error"
    decode_threads: int | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "shuffle_buffer", "num_epochs", "decode_threads"):
            value = getattr(self, name)
            if value is None and name in ("num_epochs", "decode_threads"):
                continue
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer{' or None' if name in ('num_epochs', 'decode_threads') else ''}, "
                                 f"got {value!r}")
        if self.features is not None:
            if isinstance(self.features, str):
                raise TypeError("features= takes a list of feature names, not a string")
            object.__setattr__(self, "features", tuple(self.features))
        if self.shard is not None:
            shard = tuple(self.shard)
            if len(shard) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in shard) \
                    or not 0 <= shard[0] < shard[1]:
                raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {self.shard!r}")
            object.__setattr__(self, "shard", (int(shard[0]), int(shard[1])))
        for name in ("shuffle", "drop_remainder"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.format not in _FORMATS:
            raise ValueError(f"format must be 'numpy' or 'arrow', got {self.format!r}")
        check_common(self)


@dataclass(frozen=True)
class Ragged:
    """A batch of variable-length lists: row ``i`` is ``values[row_splits[i]:row_splits[i + 1]]``.
    ``values`` is a numpy array, or a :class:`Ragged` itself (lists of lists: ``[-1]`` steps)."""

    values: Any
    row_splits: np.ndarray

    def __len__(self) -> int:
        return len(self.row_splits) - 1

    def row(self, i: int):
        a, b = int(self.row_splits[i]), int(self.row_splits[i + 1])
        if isinstance(self.values, Ragged):  # rows a..b of the inner lists
            return Ragged(self.values.values, self.values.row_splits[a:b + 1])
        return self.values[a:b]

    def to_list(self) -> list:
        def rows(r: Ragged) -> list:
            return [r.row(i).to_list() if isinstance(r.values, Ragged) else r.row(i).tolist() for i in range(len(r))]
        return rows(self)


def read_batches(source: Any, *, batch_size: int, features: Sequence[str] | None = None, schema: Any = None,
                 shard: tuple[int, int] | None = None, shuffle: bool = False, seed: int | None = None,
                 num_epochs: int | None = 1, drop_remainder: bool = False,
                 shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, format: str = "numpy", compression: str = "auto",
                 on_corrupt: str = "error", partitions: dict | None = None,
                 decode_threads: int | None = None) -> Iterator:
    """Batches of a TFRecord source: dicts of numpy arrays, or RecordBatches (module doc).

    The source, its schema and the options are checked now (ValueError / FileNotFoundError);
    reading starts at the first ``next()``.  See :class:`BatchOptions` for the arguments;
    ``partitions``: of a partitioned output, read only these, as ``make_dataset(partitions=)``
    (``{"cut": "Ideal"}``, ``{"cut": ["Ideal", "Good"]}``): the other partitions' files are never opened.
    """
    options = BatchOptions(batch_size=batch_size, features=features, shard=shard, shuffle=shuffle, seed=seed,
                           num_epochs=num_epochs, drop_remainder=drop_remainder, shuffle_buffer=shuffle_buffer,
                           format=format, compression=compression, on_corrupt=on_corrupt,
                           decode_threads=decode_threads)
    src = select_partitions(sources.resolve_source(source, compression=options.compression, committed=True,
                                                   schema=schema), partitions)
    resolved = src.schema if src.schema is not None else _infer(src)
    chosen = _chosen(resolved, options.features)
    return _batches(src, resolved, chosen, options)


def _infer(src: Source) -> Schema:
    """The schema of a source without one (the inference of ``spark.read`` too)."""
    try:
        return sources.infer_files_schema([(f.uri, f.compression) for f in src.files])
    except ValueError as e:
        raise ValueError(f"{src.uri}: {e} (read_batches(schema=...))") from e


def _chosen(schema: Schema, names: tuple[str, ...] | None) -> list[Feature]:
    if names is None:
        return list(schema.input_features)
    check_feature_names(schema, names)
    return [schema.feature(name) for name in names]


# ---------------------------------------------------------------------------------------
# Records of this shard, decoded
# ---------------------------------------------------------------------------------------
def _shard_files(files: Sequence[SourceFile], shard: tuple[int, int] | None):
    """[(file position in the source, file)] of this shard, and the record stride (None: every record)."""
    indexed = list(enumerate(files))
    if shard is None:
        return indexed, None
    index, count = shard
    if len(files) >= count:
        return indexed[index::count], None
    log.info("%d file(s) for %d shards: each shard reads every file and keeps every %d-th record", len(files),
             count, count)
    return indexed, shard


def _file_jobs(position: int, file: SourceFile, schema: Schema, chosen: list[Feature], options: BatchOptions,
               stride: tuple[int, int] | None) -> Iterator[Callable[[], pa.RecordBatch | None]]:
    """One file's work, in order: a decode of each chunk of its records (this shard's), then, when
    the file is damaged, its end (the error, or the warning of ``on_corrupt="skip"``).  The records
    are read here, as the jobs are made; a job runs on any thread (:func:`_in_order`)."""
    names = [f.name for f in chosen]
    broken: list[CorruptRecordError] = []
    done = 0  # records of the file before the chunk
    chunks = iter_file_chunks(file, max_records=_CHUNK_RECORDS)
    for offsets, records in until_corrupt(chunks, broken):
        origin = Origin(file.uri, first=done, offsets=offsets)
        done += len(records)
        if stride is not None:  # record j is this shard's when (position + j) % count == index
            numbers = np.arange(origin.first, done)
            mine = np.flatnonzero((position + numbers) % stride[1] == stride[0])
            if not mine.size:
                continue
            records = records.take(pa.array(mine))
            origin = Origin(file.uri, offsets=offsets[mine], numbers=numbers[mine])
        yield functools.partial(_decode_chunk, records, origin, schema, chosen, names, options.format)
    if broken:
        yield functools.partial(_damaged, file.uri, broken[0], options.on_corrupt)


def _decode_chunk(chunk: Any, origin: Origin, schema: Schema, chosen: list[Feature], names: list[str],
                  format: str) -> pa.RecordBatch:
    """A chunk's records decoded; dense-ready for numpy."""
    decoded = decode_batch(chunk, schema, features=names, origin=origin)
    return decoded if format == "arrow" else _dense_ready(decoded, schema, chosen, origin)


def _damaged(uri: str, error: CorruptRecordError, on_corrupt: str) -> None:
    """The end of a damaged file, after its intact records: the error, or with ``on_corrupt="skip"``
    a warning."""
    if on_corrupt != "skip":
        raise error
    log.warning("on_corrupt='skip': %s: dropped the rest of the file after the intact records (%s)", uri, error)


def _default_threads() -> int:
    """Decode threads when none are asked: the CPUs this process may use (its affinity), at most
    4 -- past that the reads and the Python side of a decode, one thread's work, are the limit."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def _in_order(jobs: Iterator[Callable[[], Any]], threads: int) -> Iterator:
    """The jobs' results (None left out) in the jobs' order, an error at its job's place (one of
    making the next job after the results of the jobs made before it).

    With ``threads`` > 1 up to that many jobs run at once on a pool of this generator's own while
    the next job is made here (its records read): the compiled decoder leaves the GIL while it
    scans a chunk.  The pool is made at the first ``next()``, in the process that iterates (a
    ``fork`` after ``read_batches()`` and before it, as PyTorch's DataLoader workers do, is safe),
    and ends with the generator; at most ``threads`` + 1 chunks are in hand.
    """
    if threads == 1:
        for job in jobs:
            result = job()
            if result is not None:
                yield result
        return
    pending: collections.deque[Future] = collections.deque()
    failed: Exception | None = None
    with ThreadPoolExecutor(threads, thread_name_prefix="tfrecord-io-decode") as pool:
        try:
            while True:
                try:
                    job = next(jobs)
                except StopIteration:
                    break
                except Exception as e:  # reading failed (a file not its manifest's, I/O): the
                    failed = e          # chunks read before it come first, as on one thread
                    break
                pending.append(pool.submit(job))
                while len(pending) > threads or (pending and pending[0].done()):
                    result = pending.popleft().result()
                    if result is not None:
                        yield result
            while pending:
                result = pending.popleft().result()
                if result is not None:
                    yield result
            if failed is not None:
                raise failed
        finally:  # the consumer stopped early, or a job failed: the queued jobs do not run
            for future in pending:
                future.cancel()


def _dense_ready(batch: pa.RecordBatch, schema: Schema, chosen: list[Feature], origin: Origin) -> pa.RecordBatch:
    """Fill what the numpy layout cannot hold as null (module doc): defaults for missing scalars and
    ``[k]`` lists, empty rows for ``[-1]`` lists and sequences; an error naming the record for a
    missing feature without a default, a ``[k]`` list of another length, or a step that does not
    hold its shape."""
    sequence = {f.name for f in schema.sequence}
    columns = []
    for f, col in zip(chosen, batch.columns):
        if f.name in sequence:
            col = pc.fill_null(col, pa.scalar([], col.type)) if col.null_count else col
            steps = col.flatten()
            bad = _not_shaped(f, steps)
            if bad is not None:
                starts = _splits(col)
                record = int(np.searchsorted(starts[1:], bad, side="right"))
                raise ValueError(f"{origin.where(record)}: feature {f.name!r}, step {bad - starts[record]}: "
                                 f"{_shape_text(f)}")
        elif f.is_varlen:
            col = pc.fill_null(col, pa.scalar([], col.type)) if col.null_count else col
        else:
            if col.null_count:
                if f.default is None:
                    i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                    raise ValueError(f"{origin.where(i)}: feature {f.name!r} is missing (or holds another number "
                                     f"of values than {f.fixed_length or 1}) and has no default: give it a default "
                                     f"in the schema, or leave it out with features=[...]")
                default = list(f.default) if f.is_list else f.default
                col = pc.fill_null(col, pa.scalar(default, col.type))
            bad = _not_shaped(f, col)
            if bad is not None:
                raise ValueError(f"{origin.where(bad)}: feature {f.name!r}: {_shape_text(f)}")
        columns.append(col)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _not_shaped(f: Feature, values: pa.Array) -> int | None:
    """The first value that does not hold the feature's shape (scalar: one value; [k]: k values)."""
    if f.is_varlen:
        return None
    if not f.is_list:
        return int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0]) if values.null_count else None
    lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
    wrong = np.flatnonzero(lengths != f.fixed_length)
    return int(wrong[0]) if wrong.size else None


def _shape_text(f: Feature) -> str:
    return f"expected {f.fixed_length} values (shape [{f.fixed_length}])" if f.is_list else \
        "expected one value (a scalar)"


# ---------------------------------------------------------------------------------------
# Epochs, shuffling, batching
# ---------------------------------------------------------------------------------------
def _batches(src: Source, schema: Schema, chosen: list[Feature], options: BatchOptions) -> Iterator:
    files, stride = _shard_files(src.files, options.shard)
    convert = (lambda b: b) if options.format == "arrow" else (lambda b: _to_numpy(b, schema, chosen))
    threads = options.decode_threads if options.decode_threads is not None else _default_threads()
    epoch = 0
    while options.num_epochs is None or epoch < options.num_epochs:
        rng = np.random.default_rng(None if options.seed is None else [options.seed, epoch])
        order = rng.permutation(len(files)) if options.shuffle else range(len(files))
        jobs = (job for k in order for job in _file_jobs(*files[k], schema, chosen, options, stride))
        chunks = _in_order(jobs, threads)
        if options.shuffle:
            chunks = _windows(chunks, options.shuffle_buffer, options.batch_size, rng)
        for batch in _rebatch(chunks, options.batch_size, options.drop_remainder):
            yield convert(batch)
        epoch += 1


def _windows(chunks: Iterator[pa.RecordBatch], size: int, batch_size: int,
             rng: np.random.Generator) -> Iterator[pa.RecordBatch]:
    """Windows of about ``size`` records, each shuffled (a uniform permutation of the window)."""
    window: list[pa.RecordBatch] = []
    held = 0
    for chunk in chunks:
        window.append(chunk)
        held += chunk.num_rows
        if held >= max(size, batch_size):
            yield _shuffled(window, rng)
            window, held = [], 0
    if held:
        yield _shuffled(window, rng)


def _shuffled(window: list[pa.RecordBatch], rng: np.random.Generator) -> pa.RecordBatch:
    table = pa.Table.from_batches(window)
    return pa.concat_batches(table.take(pa.array(rng.permutation(table.num_rows))).to_batches())


def _rebatch(chunks: Iterator[pa.RecordBatch], batch_size: int, drop_remainder: bool) -> Iterator[pa.RecordBatch]:
    """RecordBatches of exactly ``batch_size`` rows from chunks of any size (the last smaller)."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for chunk in chunks:
        start = 0
        while chunk.num_rows - start + held >= batch_size:
            take = batch_size - held
            pending.append(chunk.slice(start, take))
            yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]
            pending, held, start = [], 0, start + take
        if start < chunk.num_rows:
            pending.append(chunk.slice(start))
            held += chunk.num_rows - start
    if held and not drop_remainder:
        yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]


# ---------------------------------------------------------------------------------------
# numpy
# ---------------------------------------------------------------------------------------
def _to_numpy(batch: pa.RecordBatch, schema: Schema, chosen: list[Feature]) -> dict[str, Any]:
    sequence = {f.name for f in schema.sequence}
    out: dict[str, Any] = {}
    for f, col in zip(chosen, batch.columns):
        if f.name in sequence:
            out[f.name], out[f"{f.name}_length"] = _steps(f, col)
        elif f.is_varlen:
            out[f.name] = _ragged(col)
        elif f.is_list:
            out[f.name] = _values(col.flatten()).reshape(len(col), f.fixed_length)
        else:
            out[f.name] = _values(col)
    return out


def _values(arr: pa.Array) -> np.ndarray:
    return arr.to_numpy(zero_copy_only=False)


def _splits(col: pa.Array) -> np.ndarray:
    offsets = np.asarray(col.offsets, dtype=np.int64)
    return offsets - offsets[0]


def _ragged(col: pa.Array) -> Ragged:
    return Ragged(_values(col.flatten()), _splits(col))


def _steps(f: Feature, col: pa.Array) -> tuple[Any, np.ndarray]:
    """A sequence feature: padded to the longest in the batch (or ragged, for [-1] steps), and its lengths."""
    lengths = np.diff(_splits(col))
    if f.is_varlen:
        return Ragged(_ragged(col.flatten()), _splits(col)), lengths
    values = _values(col.flatten().flatten() if f.is_list else col.flatten())
    width = int(lengths.max()) if len(lengths) else 0
    shape = (len(col), width) + ((f.fixed_length,) if f.is_list else ())
    pad = {"string": "", "bytes": b""}.get(f.type, 0)
    padded = np.full(shape, pad, dtype=values.dtype if values.dtype != object else object)
    padded[np.arange(width) < lengths[:, None]] = values.reshape((-1,) + shape[2:])
    return padded, lengths
