"""The tf.data loader: TFRecords written by tfrecord-io (or anyone) back into training.

One call builds the whole input pipeline::

    from tfrecord_io import make_dataset, input_fn, steps_per_epoch

    ds = make_dataset("hdfs://nn:8020/data/trips", batch_size=1024)   # an output directory
    model.fit(ds, epochs=3)

    strategy.distribute_datasets_from_function(input_fn("/data/trips", batch_size=4096))

``source`` is one of

* an output directory of our jobs: its ``_manifest.json`` gives the files, the schema, the
  compression and the record counts.  A directory without ``_SUCCESS`` (a job still running,
  or one that failed) is refused;
* a glob (``"/data/part-*.tfrecord.gz"``); names starting with ``_`` or ``.`` are left out;
* a single file, or a list of files;

on local disk, ``file://`` or ``hdfs://``.  Without a manifest, ``schema=`` is required.

The pipeline, per input pipeline (``input_context``)::

    files (this pipeline's share: files[id::num_pipelines])
      -> shuffle files (each epoch, seeded)                       [shuffle=True]
      -> parallel interleave over files (cycle_length files read in parallel, deterministic
         option; through the HDFS shard cache, each file waits for its download first)
             per file: TFRecordDataset (CRC-checked) -> chunks of 1024 records
                       -> end-of-file check (corruption names the file and offset; skip mode)
      -> shuffle records in windows of shuffle_buffer (seeded)     [shuffle=True]
      -> batch (per-replica batch size) BEFORE parsing
      -> tf.io.parse_example / parse_sequence_example (vectorized, parallel)
      -> repeat(num_epochs)  (each epoch yields exactly ceil(records / batch) batches)
      -> prefetch, and prefetch_to_device('/gpu:0') when a GPU is present

``hdfs://`` on a TensorFlow without an HDFS filesystem (TF 2.21) goes through
:class:`tfrecord_io.storage.shard_cache.ShardCache`: shards are copied ahead of the reader into a bounded
local directory (at most ``cache_files`` shards on disk, default ``3 x cycle_length``) and
deleted once read.  The parallel interleave (``cycle_length`` default 2) is given the pass's
shard list at once; each of its workers waits for its shard's download as it starts reading
it, so a late download holds up one file, not the pipeline.  The wait sits inside the element
(tf.data makes interleave elements one at a time, so a wait while making one would hold up the
others), and the pipeline gets a private thread pool of CPUs + ``3 x cycle_length`` threads
(tf.data's default has one per CPU, and a waiting worker would take one from the parsing).
tf.data's parallel interleave opens ``2 x cycle_length`` files ahead of those it reads: those
are the look-ahead, and the reason for the ``3 x cycle_length`` bound.  Each epoch copies the
shards again; disk use never grows with the dataset.

What a batch holds
------------------
Examples: a dict ``{feature: tensor}``, or ``(features, label)`` when the schema names a label.
Scalars are ``[batch]``, ``[k]`` lists ``[batch, k]`` (missing ones take the schema default),
``[-1]`` lists are ``tf.RaggedTensor`` ``[batch, (n)]`` (missing or empty: an empty row).

SequenceExamples: the context features as above, plus each sequence feature padded to the
longest sequence in the batch, ``[batch, steps]`` (``[batch, steps, k]`` for ``[k]`` steps;
padding is 0 / ``b""``), with its length per example in ``features["<name>_length"]``
(int64 ``[batch]``).  ``[-1]`` step features stay ragged, ``[batch, (steps), (values)]``, with
``<name>_length`` their step counts.  With ``ragged=True`` every sequence feature is a
``tf.RaggedTensor`` ``[batch, (steps), ...]`` and there are no ``_length`` entries.  A label
that is a sequence feature keeps its ``<label>_length`` in the features.

Corrupt files
-------------
Every record's two CRCs are checked by ``TFRecordDataset`` as it reads.  Its own error
("corrupted record at 597") does not say which file, so each file's stream ends at its first
bad record and an end-of-file check (record and byte counts against the file size or the
manifest; our own framing reader only when those do not settle it) finds where and why:

* ``on_corrupt="error"`` (default): iteration fails with an error whose message names the file
  and the byte offset of the bad record (``CorruptRecordError: hdfs://.../part-00003-of-00008
  .tfrecord: corrupt TFRecord at byte offset 585: data CRC: ...``).  TensorFlow raises it as
  ``tf.errors.UnknownError`` (an error raised in Python inside the pipeline).
* ``on_corrupt="skip"``: the rest of that file is dropped (every record before the bad one is
  kept), a warning is logged and ``dataset.loader_stats`` counts it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import secrets
import struct
import threading
from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import urlsplit

import numpy as np

from tfrecord_io.core.framing import (HEADER_SIZE, RECORD_OVERHEAD, CorruptRecordError, frame_records,
                                 normalize_compression, read_records)
from tfrecord_io.storage import sources
from tfrecord_io.storage.shard_cache import CacheStats, ShardCache, scheme_of
from tfrecord_io.storage.sources import Source, SourceFile
from tfrecord_io.core.schema import Feature, Schema

__all__ = [
    "DEFAULT_SHUFFLE_BUFFER", "LoaderOptions", "LoaderStats", "SourceFile", "Source",
    "input_fn", "make_dataset", "parse_spec", "prefetch_to_gpu", "resolve_source", "steps_per_epoch", "tf_dtype",
]

log = logging.getLogger(__name__)

DEFAULT_SHUFFLE_BUFFER = 10_000
#: Records per chunk read from one file before the interleave moves on to the next file.
CHUNK_RECORDS = 1024
#: Files read at once by default: local / TF-native files, and files streamed through the cache.
DEFAULT_CYCLE_LENGTH = 8
DEFAULT_CACHED_CYCLE_LENGTH = 2
#: Shards a parallel interleave holds per file it reads: the open one, and two it opens ahead
#: (measured on TF 2.21: cycle_length 1 holds 3 shards, 2 holds 6).  The cache's default bound.
_SHARDS_PER_CYCLE = 3
#: With fewer CPUs than this, autotune=None turns tf.data's autotuner off (see LoaderOptions).
AUTOTUNE_MIN_CPUS = 5
_TF_COMPRESSION = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}
_ON_CORRUPT = ("error", "skip")


# ---------------------------------------------------------------------------------------
# Options and counters
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoaderOptions:
    """Everything ``make_dataset`` takes besides ``source``, ``schema`` and ``input_context``.

    batch_size: records per batch; with an ``input_context`` the GLOBAL batch size (each
        pipeline batches ``input_context.get_per_replica_batch_size(batch_size)``).
    shuffle: shuffle the file order (each epoch) and the records. Default True.
    shuffle_buffer: records are shuffled in windows of this many (uniform permutation of each
        window; bounds memory to one window). Default 10,000.
    seed: makes file and record order reproducible (and, by default, the interleave
        deterministic). Default None: a different order each run.
    num_epochs: passes over the data; None repeats forever. Default 1.  Each epoch yields
        exactly ``steps_per_epoch(source, batch_size)`` batches.
    compression: ``"auto"`` (the manifest's, else from each file's extension: ``.gz`` gzip,
        ``.zlib`` zlib), or ``"none"`` / ``"gzip"`` / ``"zlib"`` for every file.
    on_corrupt: ``"error"`` (default) or ``"skip"`` (see the module doc).
    deterministic: the interleave and parse keep a fixed order.  Default None: True unless
        ``shuffle=True`` with no ``seed`` (then order does not matter and False is faster).
    prefetch_to_device: ``"auto"`` (default): ``prefetch_to_device('/gpu:0')`` as the last step
        when a GPU is present, there is no ``input_context`` (a distribution strategy places
        batches itself) and every tensor is dense; ``True`` to require it; ``False`` never; or
        a device name.  It must be the pipeline's last step: to add your own transformations
        (e.g. ``map(to_model_inputs)``), pass ``False`` and end with :func:`prefetch_to_gpu`.
    drop_remainder: drop each epoch's last partial batch (static batch shapes). Default False.
    ragged: SequenceExample features as ``tf.RaggedTensor`` instead of padded + lengths.
    cycle_length: files read at once. Default: min(files, 8); min(files, 2) through the cache.
    cache_dir: where the HDFS shard cache lives (default: the system temp dir).
    cache_files: the most shards on local disk at once through the cache: the ``cycle_length``
        being read plus those the interleave opens ahead (two per file it reads) and those
        downloaded ahead.  Default and least ``3 x cycle_length``; given alone it can lower the
        default ``cycle_length`` (to ``cache_files // 3``).
    download_threads: shards copied into the cache in parallel. Default 2.
    autotune: tf.data's autotuner (``tf.data.Options().autotune.enabled``).  Default None: off
        when this process may use at most ``AUTOTUNE_MIN_CPUS - 1`` (4) CPUs, on otherwise.  On
        2 CPUs it now and then ran the whole pipeline at about one CPU (1M rows in 5.2 s instead
        of 2.6 s; 5 runs in 20), never with it off (0 in 13, and 10% faster on average):
        AUTOTUNE stages then run one call per CPU.  The option is applied to the returned dataset.
    """

    batch_size: int
    shuffle: bool = True
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    seed: int | None = None
    num_epochs: int | None = 1
    compression: str = "auto"
    on_corrupt: str = "error"
    deterministic: bool | None = None
    prefetch_to_device: bool | str = "auto"
    drop_remainder: bool = False
    ragged: bool = False
    cycle_length: int | None = None
    cache_dir: str | None = None
    cache_files: int | None = None
    download_threads: int = 2
    autotune: bool | None = None

    def __post_init__(self) -> None:
        def positive_int(name: str, value: Any, allow_none: bool = False) -> None:
            if value is None and allow_none:
                return
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer{' or None' if allow_none else ''}, "
                                 f"got {value!r}")

        positive_int("batch_size", self.batch_size)
        positive_int("shuffle_buffer", self.shuffle_buffer)
        positive_int("num_epochs", self.num_epochs, allow_none=True)
        positive_int("cycle_length", self.cycle_length, allow_none=True)
        positive_int("cache_files", self.cache_files, allow_none=True)
        positive_int("download_threads", self.download_threads)
        if self.autotune not in (None, True, False):
            raise ValueError(f"autotune must be True, False or None, got {self.autotune!r}")
        for name in ("shuffle", "drop_remainder", "ragged"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.deterministic is not None and not isinstance(self.deterministic, bool):
            raise TypeError(f"deterministic must be True, False or None, got {self.deterministic!r}")
        if self.seed is not None and (not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool)):
            raise TypeError(f"seed must be an integer or None, got {self.seed!r}")
        if self.on_corrupt not in _ON_CORRUPT:
            raise ValueError(f"on_corrupt must be 'error' or 'skip', got {self.on_corrupt!r}")
        if self.compression != "auto":
            try:
                object.__setattr__(self, "compression", normalize_compression(self.compression))
            except ValueError as e:
                raise ValueError(f"compression: {e}; or 'auto'") from e
        ptd = self.prefetch_to_device
        if not (ptd in ("auto", True, False) or (isinstance(ptd, str) and ptd)):
            raise ValueError(f"prefetch_to_device must be 'auto', True, False or a device name, got {ptd!r}")
        if self.cache_files is not None and self.cache_files < _SHARDS_PER_CYCLE:
            raise ValueError(f"cache_files must be at least {_SHARDS_PER_CYCLE} (one shard read, two opened "
                             f"ahead by the interleave), got {self.cache_files}")
        if self.cycle_length is not None and self.cache_files is not None \
                and self.cache_files < _SHARDS_PER_CYCLE * self.cycle_length:
            raise ValueError(
                f"cache_files={self.cache_files} is too small for cycle_length={self.cycle_length}: each "
                f"shard being read stays on disk until read and the interleave opens two more ahead of it, "
                f"so cache_files must be at least {_SHARDS_PER_CYCLE * self.cycle_length}")

    @property
    def is_deterministic(self) -> bool:
        if self.deterministic is not None:
            return self.deterministic
        return not self.shuffle or self.seed is not None


@dataclass(frozen=True)
class CorruptFile:
    """One file the loader could not read to its end."""

    uri: str
    offset: int | None       # byte offset of the bad record (uncompressed stream), if known
    check: str               # "data CRC", "length CRC", "truncated data", ..., or "record count"
    records_kept: int        # records read from it before the problem
    message: str


class LoaderStats:
    """Counters a dataset updates as it is read (thread-safe; read them at any time).

    ``files_read``: files read to their end (or to their first bad record), summed over epochs;
    ``records_read``: records read from them; ``corrupt_files``: files that ended early
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

    def as_dict(self) -> dict:
        with self._lock:
            return {"files_read": self.files_read, "records_read": self.records_read,
                    "corrupt_files": self.corrupt_files,
                    "skipped": [dataclasses.asdict(p) for p in self.skipped],
                    "cache": self.cache.as_dict() if self.cache else None}

    def __repr__(self) -> str:
        return f"LoaderStats({self.as_dict()})"


# ---------------------------------------------------------------------------------------
# Sources (resolved by tfrecord_io.storage.sources, as for every reader)
# ---------------------------------------------------------------------------------------
def resolve_source(source: Any, compression: str = "auto") -> Source:
    """Turn ``source`` (a committed output directory, glob, file, or list of files) into a
    :class:`~tfrecord_io.storage.sources.Source`.  Reads only metadata: ``_SUCCESS`` and
    ``_manifest.json`` of an output directory, a listing for a glob, an existence check per listed file."""
    return sources.resolve_source(source, compression=compression, committed=True)


def _resolve_schema(schema: Any, src: Source) -> Schema:
    if schema is None:
        if src.schema is None:
            raise ValueError(f"schema= is required: source {src.uri} is not an output directory "
                             f"with a _manifest.json to take the schema from")
        return src.schema
    return sources.resolve_source(src, schema=schema).schema


def _pipeline_files(files: Sequence[SourceFile], input_context) -> tuple[list[SourceFile], tuple[int, int] | None]:
    """This input pipeline's files -- every ``num_input_pipelines``-th, from ``input_pipeline_id`` --
    and None; or, with fewer files than pipelines, all files and ``(pipelines, id)``: the pipeline
    then takes every n-th record (each pipeline reads every file: slower, with a warning)."""
    if input_context is None:
        return list(files), None
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(files) < n:
        log.warning("%d file(s) for %d input pipelines: each pipeline reads every file and keeps every %d-th "
                    "record (write at least %d shards to give each pipeline its own files)", len(files), n, n, n)
        return list(files), (n, i)
    return list(files[i::n]), None


def _check_present(schema: Schema, src: Source) -> None:
    """Refuse, before the first batch, a feature that TensorFlow would require (a scalar or ``[k]``
    feature without a default) but that the manifest says some records lack: parsing would stop
    at the first such batch with TF's "Feature: NAME ... is required but could not be found"."""
    present = src.manifest.present if src.manifest is not None else None
    total = src.total_records
    if schema.record_type != "example" or not present or total is None:
        return
    for f in schema.features:
        if f.is_varlen or f.default is not None or f.name not in present:
            continue
        missing = total - int(present[f.name])
        if missing > 0:
            raise ValueError(
                f"feature {f.name!r} is missing from {missing:,} of {total:,} records of {src.uri} and has "
                f"no default, so parsing would fail at the first batch holding one: give it a default "
                f"(make_dataset(schema=...) with 'default:' set, or in the schema before converting), or leave "
                f"it out with features=[...]")


def select_features(schema: Schema, names: Sequence[str] | None) -> Schema:
    """``schema`` narrowed to the features ``names`` (and its label): what ``make_dataset(features=)``
    parses.  ValueError naming an unknown feature and the closest one."""
    if names is None:
        return schema
    if isinstance(names, str):
        raise TypeError("features= takes a list of feature names, not a string")
    known = {f.name for f in schema.input_features}
    for name in names:
        if name not in known:
            import difflib

            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; features: {sorted(known)}"
            raise ValueError(f"features=: no feature named {name!r} in the schema{hint}")
    keep = set(names) | ({schema.label} if schema.label else set())
    if schema.record_type == "example":
        return dataclasses.replace(schema, features=tuple(f for f in schema.features if f.name in keep),
                                   ignore_columns=())
    keep |= {schema.group_by}
    return dataclasses.replace(schema, context=tuple(f for f in schema.context if f.name in keep),
                               sequence=tuple(f for f in schema.sequence if f.name in keep) or schema.sequence[:1],
                               order_by=schema.order_by if schema.order_by in keep else None, ignore_columns=())


# ---------------------------------------------------------------------------------------
# The end-of-file check
# ---------------------------------------------------------------------------------------
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


def _local_path(uri: str) -> str:
    return urlsplit(uri).path if uri.startswith("file:") else uri


def _gzip_isize(f) -> int | None:
    """ISIZE of a gzip stream's last member (uncompressed size mod 2**32)."""
    try:
        f.seek(-4, os.SEEK_END)
    except OSError:
        return None
    data = f.read(4)
    return struct.unpack("<I", data)[0] if len(data) == 4 else None


class _FileChecker:
    """Called once per file, when TF's reader of it stops: did it read the whole file?

    TF reports ``n`` records of ``nbytes`` payload.  The file was read to its end iff the framed
    stream they make (``nbytes + 16 n``) is the file (uncompressed: its size; gzip: its ISIZE
    trailer) or ``n`` is the manifest's count.  When that does not settle it, our own framing
    reader reads the file to find the bad record (file, offset, which check).
    """

    def __init__(self, files: Sequence[SourceFile], on_corrupt: str, stats: LoaderStats,
                 cache: ShardCache | None):
        self.files, self.on_corrupt, self.stats, self.cache = files, on_corrupt, stats, cache

    def __call__(self, path_t, index_t, n_t, nbytes_t):
        path = path_t.numpy().decode("utf-8")
        f = self.files[int(index_t.numpy())]
        n, nbytes = int(n_t.numpy()), int(nbytes_t.numpy())
        try:
            problem, error, recovered = self._check(path, f, n, nbytes)
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
        return np.array(recovered, dtype=object) if recovered else np.zeros([0], dtype=object)

    def _open(self, path: str):
        if "://" in path and not path.startswith("file:"):
            import tensorflow as tf

            return tf.io.gfile.GFile(path, "rb")
        return open(_local_path(path), "rb")

    def _check(self, path: str, f: SourceFile, n: int,
               nbytes: int) -> tuple[CorruptFile | None, Exception | None, list[bytes]]:
        """``(problem, error, recovered)``: ``(None, None, [])`` when TF read the whole file.

        TF's stream of a file ends at its first bad record and drops the chunk it was filling,
        so ``recovered`` holds the intact records after the ``n`` TF delivered (fewer than
        CHUNK_RECORDS): in skip mode they are handed on, and every record before the bad one is kept.
        """
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
        intact = 0
        tail: list[bytes] = []
        try:
            with self._open(path) as fh:
                for record in read_records(fh, name=f.uri, compression=f.compression, verify=True):
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
        if f.records is not None and intact != f.records:
            message = f"{f.uri}: holds {intact} records, but _manifest.json says {f.records}"
        elif intact != n:
            message = f"{f.uri}: TensorFlow stopped reading after {n} records, but the file holds {intact} intact records"
        else:
            return None, None, []
        return (CorruptFile(uri=f.uri, offset=None, check="record count", records_kept=n, message=message),
                ValueError(message), [])


class _LengthGuard:
    """Checked before TensorFlow opens a file: no record claims more bytes than the file holds.

    TensorFlow's reader allocates a record's length before reading it; a length field of 2**40
    with a valid length CRC (a crafted or mis-written file) kills the process.  So each file's
    record headers are walked first -- uncompressed: 8-byte lengths through ``mmap``, about 0.3 s
    per million records; compressed: our own framing reader over the decompressed stream -- once
    per file per process (keyed by URI, size and mtime).  A bad length is a
    :class:`~tfrecord_io.core.framing.CorruptRecordError` naming the file and the offset; with
    ``on_corrupt="skip"`` TensorFlow is given a copy of the records before it instead.
    """

    def __init__(self, files: Sequence[SourceFile], on_corrupt: str):
        self.files, self.on_corrupt = files, on_corrupt
        self._ok: set = set()
        self._lock = threading.Lock()

    def __call__(self, path_b, index) -> tuple:
        path = path_b.decode("utf-8") if isinstance(path_b, bytes) else str(path_b)
        f = self.files[int(index)]
        local = _local_path(path)
        st = os.stat(local)
        key = (f.uri, st.st_size, st.st_mtime_ns if local == _local_path(f.uri) else None)
        with self._lock:
            if key in self._ok:
                return path_b, _TF_COMPRESSION[f.compression]
        bad = self._first_bad(local, f, st.st_size)
        if bad is None:
            with self._lock:
                self._ok.add(key)
            return path_b, _TF_COMPRESSION[f.compression]
        if self.on_corrupt != "skip":
            raise bad
        log.warning("on_corrupt='skip': %s; reading the records before it", bad)
        return self._records_before(local, f, bad.offset).encode("utf-8"), _TF_COMPRESSION[f.compression]

    @staticmethod
    def _first_bad(local: str, f: SourceFile, size: int) -> CorruptRecordError | None:
        if f.compression == "none":
            import mmap

            if size == 0:
                return None
            unpack = struct.Struct("<Q").unpack_from
            with open(local, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                pos = 0
                while pos < size:
                    if size - pos < RECORD_OVERHEAD:
                        return None  # a truncated tail: TF's reader reports it without harm
                    (length,) = unpack(mm, pos)
                    if length > size - pos - RECORD_OVERHEAD:
                        left = max(0, size - pos - HEADER_SIZE)
                        return CorruptRecordError(f.uri, pos, "truncated data", f"expected {length} data bytes, "
                                                  f"got {left} before end of stream")
                    pos += length + RECORD_OVERHEAD
            return None
        try:
            with open(local, "rb") as fh:
                for _ in read_records(fh, name=f.uri, compression=f.compression, verify=False):
                    pass
        except CorruptRecordError as e:
            return e if e.check in ("truncated data", "length CRC") else None
        return None

    @staticmethod
    def _records_before(local: str, f: SourceFile, offset: int) -> str:
        """A temporary copy (compressed as the file is) of the records before byte ``offset``."""
        import gzip
        import tempfile
        import zlib

        intact = bytearray()
        with open(local, "rb") as fh:
            if f.compression == "none":
                intact += fh.read(offset)
            else:
                try:
                    for record in read_records(fh, name=f.uri, compression=f.compression, verify=False):
                        if len(intact) + len(record) + RECORD_OVERHEAD > offset:
                            break
                        intact += frame_records([record])
                except CorruptRecordError:
                    pass  # the bad record itself: everything before it is in `intact`
        data = {"none": bytes, "gzip": gzip.compress, "zlib": zlib.compress}[f.compression](bytes(intact))
        with tempfile.NamedTemporaryFile(prefix="tfrecord-io-intact-", suffix=".tfrecord", delete=False) as out:
            out.write(data)
        return out.name


# ---------------------------------------------------------------------------------------
# Building the pipeline
# ---------------------------------------------------------------------------------------
class _FileOrder:
    """Per-pass file order for the cache path (shuffled with (seed, pass) when asked)."""

    def __init__(self, n: int, shuffle: bool, seed: int | None):
        self.n, self.shuffle = n, shuffle
        self.seed = seed if seed is not None else secrets.randbits(63)
        self.passes = 0
        self._lock = threading.Lock()

    def next(self) -> list[int]:
        with self._lock:
            p = self.passes
            self.passes += 1
        if not self.shuffle:
            return list(range(self.n))
        return np.random.default_rng([self.seed & (2**63 - 1), p]).permutation(self.n).tolist()


def _reader(files: list[SourceFile], opts: LoaderOptions, stats: LoaderStats):
    """The records of ``files`` as a dataset of string vectors (chunks of up to CHUNK_RECORDS records)."""
    import tensorflow as tf

    n = len(files)
    direct = all(tf_can_open(f.uri) for f in files)
    cycle = opts.cycle_length
    cache = None
    if direct:
        cycle = min(n, cycle or DEFAULT_CYCLE_LENGTH)
    else:
        if cycle is None:
            cycle = DEFAULT_CACHED_CYCLE_LENGTH
            if opts.cache_files is not None:
                cycle = max(1, min(cycle, opts.cache_files // _SHARDS_PER_CYCLE))
        cycle = min(n, cycle)
        max_files = opts.cache_files or _SHARDS_PER_CYCLE * cycle
        cache = ShardCache(max_files, cache_dir=opts.cache_dir, download_threads=opts.download_threads)
        stats.caches.append(cache.stats)
    cycle = max(cycle, 1)

    comps = [_TF_COMPRESSION[f.compression] for f in files]
    checker = _FileChecker(files, opts.on_corrupt, stats, cache)
    if cache is None:
        paths = [_local_path(f.uri) for f in files]
        file_ds = tf.data.Dataset.from_tensor_slices((tf.constant(paths, tf.string),
                                                      tf.range(n, dtype=tf.int64),
                                                      tf.constant(comps, tf.string)))
        if opts.shuffle and n > 1:
            file_ds = file_ds.shuffle(n, seed=opts.seed, reshuffle_each_iteration=True)

    guard = _LengthGuard(files, opts.on_corrupt)

    def guarded(path, index):
        # Inside the file's element (see read_shard below): the walk of one file holds up no other.
        out_path, out_comp = tf.numpy_function(guard, [path, index], [tf.string, tf.string], stateful=False)
        out_path.set_shape([])
        out_comp.set_shape([])
        return out_path, out_comp

    def read_file(path, index, compression):
        return (tf.data.Dataset.from_tensors((path, index)).map(guarded)
                .flat_map(lambda p, c: read_checked(p, index, c)))

    def read_checked(path, index, compression):
        records = tf.data.TFRecordDataset(path, compression_type=compression)
        # A read error (bad CRC, truncation) ends this file's stream, dropping the chunk it was
        # filling; the end-of-file check below says which file, where and why, and raises or
        # (skip mode) hands back the intact records of that chunk.  ignore_errors after batch,
        # not per record: one tf.data stage fewer per record (~0.5 CPU-s per 1M records).
        chunks = records.batch(CHUNK_RECORDS).ignore_errors().map(lambda c: (c, False))
        last = tf.data.Dataset.from_tensors((tf.zeros([0], tf.string), True))

        def step(state, element):
            chunk, is_last = element
            count = state[0] + tf.size(chunk, out_type=tf.int64)
            nbytes = state[1] + tf.reduce_sum(tf.cast(tf.strings.length(chunk), tf.int64))

            def at_end():
                out = tf.py_function(checker, [path, index, count, nbytes], tf.string)
                out.set_shape([None])
                return out

            out = tf.cond(is_last, at_end, lambda: chunk)
            return (count, nbytes), out

        return chunks.concatenate(last).scan((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), step)

    if cache is None:
        return file_ds.interleave(read_file, cycle_length=cycle, block_length=1,
                                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=opts.is_deterministic)

    # Through the cache: one pass (epoch) at a time, opened and closed by cache.owner.  plan()
    # gives the cache the pass's shards in reading order and returns at once (downloads start
    # ahead); each interleave worker then waits in fetch() for its own shard's download as it
    # starts reading it.  Nothing waits for the reader (see tfrecord_io.storage.shard_cache).
    order = _FileOrder(n, opts.shuffle, opts.seed)
    uris = [f.uri for f in files]

    def plan(pass_id):
        indices = order.next()
        cache.plan(int(pass_id), [uris[i] for i in indices])
        return np.array(indices, dtype=np.int64)

    def fetch(pass_id, pos):
        return cache.fetch(int(pass_id), int(pos)).encode("utf-8")

    def read_pass(pass_id):
        indices = tf.numpy_function(plan, [pass_id], tf.int64, stateful=True)
        indices.set_shape([n])
        shards = tf.data.Dataset.from_tensor_slices((tf.range(n, dtype=tf.int64), indices))

        def local_copy(pos):
            path = tf.numpy_function(fetch, [pass_id, pos], tf.string, stateful=True)
            path.set_shape([])
            return path

        def read_shard(pos, index):
            # Wait for the download while the element is read, not while the interleave makes
            # it: tf.data makes interleave elements one at a time, so a wait there would hold up
            # every other file, the one being read included.
            compression = tf.gather(tf.constant(comps, tf.string), index)
            return (tf.data.Dataset.from_tensors(pos).map(local_copy)
                    .flat_map(lambda path: read_file(path, index, compression)))

        return shards.interleave(read_shard, cycle_length=cycle, block_length=1,
                                 num_parallel_calls=cycle, deterministic=opts.is_deterministic)

    passes = tf.data.Dataset.from_generator(cache.owner, output_signature=tf.TensorSpec([], tf.int64))
    # Up to 3 x cycle workers may be waiting in fetch() at once: give them threads of their own,
    # beyond one per CPU for the work (see the module doc).
    threads = tf.data.Options()
    threads.threading.private_threadpool_size = _usable_cpus() + _SHARDS_PER_CYCLE * cycle
    return passes.flat_map(read_pass).with_options(threads)


def _shuffle_records(chunks, opts: LoaderOptions):
    """Shuffle records in windows of ``shuffle_buffer``: each window is permuted uniformly.

    Vectorized: one ``stateless_shuffle`` (a gather) per window instead of ``Dataset.shuffle``'s
    per-record work, which would halve the loader's throughput.  Each window holds records read
    consecutively from ``cycle_length`` interleaved files in shuffled file order, so a batch
    samples ``shuffle_buffer`` records around it, as ``Dataset.shuffle(shuffle_buffer)`` does (without
    its long tail).  The permutations come from ``Dataset.random(seed)``: reproducible with a
    seed, different in each epoch.
    """
    import tensorflow as tf

    windows = chunks.rebatch(opts.shuffle_buffer)
    randoms = tf.data.Dataset.random(seed=opts.seed, rerandomize_each_iteration=True)

    def permute(window, r):
        return tf.random.experimental.stateless_shuffle(window, seed=tf.stack([r, tf.constant(0, tf.int64)]))

    return tf.data.Dataset.zip((windows, randoms)).map(
        permute, num_parallel_calls=tf.data.AUTOTUNE, deterministic=opts.is_deterministic)


def tf_dtype(f: Feature):
    """The TensorFlow dtype of a feature's values (bytes and string are both ``tf.string``)."""
    import tensorflow as tf

    return {"int64": tf.int64, "float": tf.float32}.get(f.type, tf.string)


def parse_spec(schema: Schema):
    """The ``tf.io.parse_example`` spec of ``schema``, or ``(context, sequence)`` specs for
    SequenceExamples (``tf.io.parse_sequence_example``).

    Scalars are ``FixedLenFeature([])`` (with the schema default when given: a record missing a
    scalar with no default fails to parse, naming the feature); ``[k]`` lists are
    ``FixedLenFeature([k])``; ``[-1]`` lists are ``RaggedFeature``.  Sequence features are
    ``FixedLenSequenceFeature`` (scalar/[k] steps) or ``RaggedFeature``.
    """
    import tensorflow as tf

    def spec(f: Feature, in_sequence: bool = False):
        dtype = tf_dtype(f)
        if f.is_varlen:
            return tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
        shape = [] if f.shape is None else list(f.shape)
        if in_sequence:
            return tf.io.FixedLenSequenceFeature(shape, dtype, allow_missing=True)
        default = f.default
        if isinstance(default, tuple):
            default = list(default)
        return tf.io.FixedLenFeature(shape, dtype, default_value=default)

    if schema.record_type == "example":
        return {f.name: spec(f) for f in schema.features}
    return ({f.name: spec(f) for f in schema.context},
            {f.name: spec(f, in_sequence=True) for f in schema.sequence})


def _parser(schema: Schema, ragged: bool):
    """The batch -> features (or (features, label)) function."""
    import tensorflow as tf

    label = schema.label
    if schema.record_type == "example":
        spec = parse_spec(schema)

        def parse(serialized):
            return tf.io.parse_example(serialized, spec)
    else:
        context_spec, sequence_spec = parse_spec(schema)
        names = {f.name for f in schema.input_features}
        if not ragged:
            clash = sorted(f"{s}_length" for s in sequence_spec if f"{s}_length" in names)
            if clash:
                raise ValueError(f"the schema has feature(s) {clash}, which clash with the sequence lengths "
                                 f"the loader adds; rename them or pass ragged=True")

        def parse(serialized):
            context, sequences, lengths = tf.io.parse_sequence_example(
                serialized, context_features=context_spec or None, sequence_features=sequence_spec)
            out = dict(context)
            for name, value in sequences.items():
                is_ragged = isinstance(value, tf.RaggedTensor)
                if ragged:
                    out[name] = value if is_ragged else tf.RaggedTensor.from_tensor(value, lengths=lengths[name])
                else:
                    out[name] = value
                    out[f"{name}_length"] = value.row_lengths() if is_ragged else lengths[name]
            return out

    if label is None:
        return parse

    def parse_with_label(serialized):
        features = parse(serialized)
        target = features.pop(label)
        return features, target

    return parse_with_label


def _target_device(option, input_context, element_spec) -> str | None:
    import tensorflow as tf

    if option is False:
        return None
    if input_context is not None:
        if option == "auto":
            return None
        raise ValueError("prefetch_to_device cannot be combined with input_context: the distribution "
                         "strategy copies batches to its devices; leave prefetch_to_device='auto'")
    gpus = tf.config.list_logical_devices("GPU")
    if option == "auto":
        # dense numbers only: strings stay in host memory (a Keras StringLookup runs on the CPU)
        dense = all(isinstance(s, tf.TensorSpec) and s.dtype != tf.string for s in tf.nest.flatten(element_spec))
        return "/gpu:0" if gpus and dense else None
    if option is True:
        if not gpus:
            raise ValueError("prefetch_to_device=True but TensorFlow sees no GPU")
        return "/gpu:0"
    return option


def _usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _autotune_on(option: bool | None) -> bool:
    return option if option is not None else _usable_cpus() >= AUTOTUNE_MIN_CPUS


def prefetch_to_gpu(dataset, device: bool | str = "auto"):
    """``dataset`` followed by ``tf.data.experimental.prefetch_to_device`` (``"auto"``: onto
    ``/gpu:0`` when TensorFlow sees a GPU and every tensor is dense and numeric; else ``dataset``
    unchanged).

    For pipelines that transform :func:`make_dataset`'s batches further: build it with
    ``prefetch_to_device=False``, add the transformations, then end with this (tf.data needs the
    copy to the device to be the last step).  ``device``: as ``make_dataset``'s ``prefetch_to_device``.
    """
    import tensorflow as tf

    target = _target_device(device, None, dataset.element_spec)
    return dataset if target is None else dataset.apply(tf.data.experimental.prefetch_to_device(target))


def make_dataset(source, *, schema=None, batch_size: int, shuffle: bool = True,
                 shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, seed: int | None = None,
                 num_epochs: int | None = 1, input_context=None, compression: str = "auto",
                 on_corrupt: str = "error", deterministic: bool | None = None,
                 prefetch_to_device: bool | str = "auto", drop_remainder: bool = False,
                 ragged: bool = False, cycle_length: int | None = None, cache_dir: str | None = None,
                 cache_files: int | None = None, download_threads: int = 2, autotune: bool | None = None,
                 stats: LoaderStats | None = None, features: Sequence[str] | None = None):
    """A ``tf.data.Dataset`` of parsed batches from ``source`` (see the module doc and :class:`LoaderOptions`).

    Yields a features dict, or ``(features, label)`` when the schema names a label.
    ``features``: parse and yield only these (and the label), e.g. the named inputs of a Keras
    model (Keras matches a dict by name, but only when it holds exactly the model's inputs).  The
    returned dataset carries ``loader_stats`` (a :class:`LoaderStats`; pass ``stats=`` to share
    one, e.g. across the pipelines of an :func:`input_fn`).
    """
    import tensorflow as tf

    opts = LoaderOptions(batch_size=batch_size, shuffle=shuffle, shuffle_buffer=shuffle_buffer, seed=seed,
                         num_epochs=num_epochs, compression=compression, on_corrupt=on_corrupt,
                         deterministic=deterministic, prefetch_to_device=prefetch_to_device,
                         drop_remainder=drop_remainder, ragged=ragged, cycle_length=cycle_length,
                         cache_dir=cache_dir, cache_files=cache_files, download_threads=download_threads,
                         autotune=autotune)
    if stats is not None and not isinstance(stats, LoaderStats):
        raise TypeError(f"stats must be a LoaderStats, got {type(stats).__name__}")
    stats = stats if stats is not None else LoaderStats()
    src = resolve_source(source, opts.compression)
    resolved_schema = select_features(_resolve_schema(schema, src), features)
    _check_present(resolved_schema, src)
    parse = _parser(resolved_schema, opts.ragged)
    files, record_shard = _pipeline_files(src.files, input_context)
    if record_shard is not None:  # every pipeline must read the records in one order
        opts = dataclasses.replace(opts, deterministic=True,
                                   seed=0 if opts.shuffle and opts.seed is None else opts.seed)
    batch = opts.batch_size
    if input_context is not None:
        batch = input_context.get_per_replica_batch_size(opts.batch_size)

    if files:
        ds = _reader(files, opts, stats)
    else:
        ds = tf.data.Dataset.from_tensor_slices(tf.zeros([0, 0], tf.string))
    if record_shard is not None:  # fewer files than pipelines: each takes every n-th record
        ds = ds.unbatch().shard(*record_shard).batch(CHUNK_RECORDS)
    if opts.shuffle:
        ds = _shuffle_records(ds, opts)
    ds = ds.rebatch(batch, drop_remainder=opts.drop_remainder)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=opts.is_deterministic)
    if opts.num_epochs != 1:
        ds = ds.repeat(opts.num_epochs)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    tuning = tf.data.Options()
    tuning.autotune.enabled = _autotune_on(opts.autotune)
    ds = ds.with_options(tuning)
    if input_context is None:
        ds = prefetch_to_gpu(ds, opts.prefetch_to_device)
    else:
        _target_device(opts.prefetch_to_device, input_context, ds.element_spec)  # rejects True / a device
    ds.loader_stats = stats
    return ds


def input_fn(source, **options):
    """A ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``.

    ``options`` are :func:`make_dataset`'s (``batch_size`` is the global batch size); each input
    pipeline reads its own share of the files with the per-replica batch size.  The source is
    resolved (manifest read) once, here; ``dataset_fn.loader_stats`` counts for all pipelines.
    """
    if "input_context" in options:
        raise TypeError("input_fn() passes input_context itself; do not give it")
    if "batch_size" not in options:
        raise TypeError("input_fn() needs batch_size= (the global batch size)")
    option_names = {f.name for f in dataclasses.fields(LoaderOptions)}
    unknown = set(options) - option_names - {"schema", "stats"}
    if unknown:
        raise TypeError(f"input_fn() got unknown option(s) {sorted(unknown)}")
    LoaderOptions(**{k: v for k, v in options.items() if k in option_names})  # fail here, not per worker
    src = resolve_source(source, options.get("compression", "auto"))
    _resolve_schema(options.get("schema"), src)
    stats = options.pop("stats", None) or LoaderStats()

    def dataset_fn(input_context):
        return make_dataset(src, input_context=input_context, stats=stats, **options)

    dataset_fn.loader_stats = stats
    dataset_fn.source = src
    return dataset_fn


def steps_per_epoch(source, batch_size: int, input_context=None, *, drop_remainder: bool = False) -> int:
    """Batches per epoch, from the manifest's record counts (no data is read).

    Without ``input_context``: exactly the batches one epoch of ``make_dataset(source,
    batch_size=batch_size, drop_remainder=...)`` yields: ``ceil(records / batch_size)``
    (``floor`` with ``drop_remainder``).  With one: the global steps every input pipeline can
    fill with full per-replica batches for all its replicas, ``min over pipelines of
    floor(records_p / (per_replica_batch * replicas_per_pipeline))``.
    """
    LoaderOptions(batch_size=batch_size)
    src = resolve_source(source)
    if src.total_records is None:
        raise ValueError(f"steps_per_epoch needs record counts from a _manifest.json; {src.uri} "
                         f"is not an output directory of tfrecord-io (count the records, or use "
                         f"num_epochs=None with your own steps)")
    if input_context is None:
        total = src.total_records
        return total // batch_size if drop_remainder else math.ceil(total / batch_size)
    per_replica = input_context.get_per_replica_batch_size(batch_size)
    pipelines = input_context.num_input_pipelines
    replicas_per_pipeline = max(1, input_context.num_replicas_in_sync // pipelines)
    steps = []
    for p in range(pipelines):
        if len(src.files) < pipelines:  # each pipeline keeps every n-th record (see _pipeline_files)
            records = (src.total_records - p + pipelines - 1) // pipelines
        else:
            records = sum(f.records for f in src.files[p::pipelines])
        steps.append(records // (per_replica * replicas_per_pipeline))
    return min(steps)
