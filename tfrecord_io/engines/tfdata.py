"""The tf.data loader: TFRecords written by tfrecord-io (or anyone) back into training.

One call builds the whole input pipeline::

    from tfrecord_io import make_dataset, input_fn, steps_per_epoch

    ds = make_dataset("hdfs://nn:8020/data/trips", batch_size=1024)   # an output directory
    model.fit(ds, epochs=3)

    strategy.distribute_datasets_from_function(input_fn("/data/trips", batch_size=4096))

``source`` is one of

* an output directory of our jobs: its ``_manifest.json`` gives the files, the schema, the
  compression, the record counts and each shard's record index.  A directory without
  ``_SUCCESS`` (a job still running, or one that failed) is refused;
* a glob (``"/data/part-*.tfrecord.gz"``); names starting with ``_`` or ``.`` are left out;
* a single file, or a list of files;

on local disk, ``file://`` or ``hdfs://``.  Without a manifest, ``schema=`` is required.  Files
that others wrote get a record index from ``tfrecord-io index`` (:mod:`tfrecord_io.storage.index`);
the loader uses one wherever it finds it.

The pipeline, per input pipeline (``input_context``)::

    epochs: (key, epoch) for each epoch of each iterator     key = seed, or drawn once per dataset
      -> this pipeline's segments of the epoch               pure function of (key, epoch): the file
         (file, first record, count), in file order          order (seeded permutation when
                                                             shuffling); with an input_context an
                                                             equal share of the records (below)
      -> parallel interleave over segments (cycle_length files read at once; deterministic
         option; through the HDFS shard cache, each waits for its shard's download first)
             per segment: byte ranges, each checked before TensorFlow reads it (below)
                          -> TFRecordDatasetV2 from the range's offset (CRC-checked), chunks of
                             1024 records -> end-of-segment check (corruption names the file and
                             offset; skip mode)
      -> shuffle records in windows of shuffle_buffer (seeded by key, epoch, window) [shuffle=True]
      -> batch (per-replica batch size) BEFORE parsing, per epoch: each epoch yields exactly
         ceil(records / batch) batches
      -> tf.io.parse_example / parse_sequence_example (vectorized, parallel)
      -> prefetch, and prefetch_to_device('/gpu:0') when a GPU is present

``shuffle="global"`` replaces everything before the batching: each epoch is a seeded
permutation of all the records (``tf.random.experimental.index_shuffle`` over positions, so
nothing of size N is held but the index), read record by record at the offsets the record
indexes give (a py_function of ``pread``; CRCs checked).  Uncompressed files only (a gzip
stream cannot be read from the middle); on ``hdfs://`` the files are first copied to local
disk, whole (``cache_dir``): ranged HDFS reads of single records run at ~3,000 records/s.

Checkpointing
-------------
Every iterator of ``make_dataset`` and of each ``input_fn`` pipeline can be saved with
``tf.train.Checkpoint(iterator=it)`` and restored in a new process, where it yields exactly the
batches the first one would have yielded next (with a ``seed``: the same order; without, the
order drawn for this dataset is part of the checkpoint).  Everything that decides what is read
is tf.data state -- the epochs are a ``Dataset.range``, file orders and shuffles stateless
functions of (key, epoch, position), byte offsets scan state -- and the Python steps
(``numpy_function`` / ``py_function``: the range checks, the end-of-segment checks, the shard
cache's fetches) are pure functions of their inputs or keep their state outside the graph, so
the dataset sets ``experimental_external_state_policy = IGNORE`` and a restored pipeline re-runs
them (the shard cache downloads the shards the restored iterator asks for, from where it is).
``prefetch_to_device`` (added only when TensorFlow sees a GPU) wraps the dataset in a
multi-device iterator whose state tf.data cannot save: checkpoint the iterator of a dataset
built with ``prefetch_to_device=False``.  Keras' own ``BackupAndRestore(save_freq=N)`` restarts
an interrupted epoch from its first batch; :class:`tfrecord_io.engines.resume.BackupAndRestore`
resumes it at the next batch (each dataset has a ``loader_resume`` it steers).

Equal work per input pipeline
-----------------------------
With an ``input_context`` of N pipelines, each epoch's records (in the epoch's file order, or
its global permutation) are cut into N equal runs of ``steps x replicas_per_pipeline x
per-replica batch`` records, one per pipeline, with ``steps = records // global batch``
(``remainder="drop"``: the last ``records % global batch`` records of the epoch's order are not
read) or ``ceil(records / global batch)`` (``remainder="pad"``: the missing records are taken
again from the start of the epoch's order).  Every pipeline yields the same number of full
batches, every record is read once per epoch across them (but the remainder), and a pipeline
reads only its own byte ranges: a file shared by two pipelines is entered at the offset its
index gives (or, without one, at an offset found by walking its headers; compressed files are
read from their start).  All pipelines must agree on the order, so without a ``seed`` they
use seed 0.  :func:`steps_per_epoch` with the same ``input_context`` and ``remainder`` agrees.

The length check
----------------
TensorFlow's reader allocates a record's length before reading it: a length field of 2**40
with a valid length CRC (a crafted or mis-written file) kills the process (uncompressed files
only: for gzip and zlib its reader grows the record as data comes and ends with "truncated
record").  So TensorFlow never reads an uncompressed record whose length has not been checked
against what remains of the file: each file is read in byte ranges (the first of 1,024 records,
then growing to 65,536 records / 64 MiB), and a range is checked just before TensorFlow opens
it -- with the file's index, its length fields against the index's lengths (vectorized);
without, by walking its headers (once per file per process: later epochs reuse the ranges).
The first batch waits for one range's check, not the file's.  A bad length is a
:class:`~tfrecord_io.core.framing.CorruptRecordError` naming the file and the offset; with
``on_corrupt="skip"`` TensorFlow reads the records before it.

``hdfs://`` on a TensorFlow without an HDFS filesystem (TF 2.21) goes through
:class:`tfrecord_io.storage.shard_cache.ShardCache`: shards are copied ahead of the reader into a bounded
local directory (at most ``cache_files`` shards on disk, default ``3 x cycle_length``) and
deleted once read.  The parallel interleave (``cycle_length`` default 2) is given the epoch's
segments at once; each of its workers waits for its shard's download as it starts reading it,
so a late download holds up one file, not the pipeline.  The wait sits inside the element
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
bad record and an end-of-segment check (record and byte counts against the file size, the
segment or the manifest; our own framing reader only when those do not settle it) finds where
and why:

* ``on_corrupt="error"`` (default): iteration fails with an error whose message names the file
  and the byte offset of the bad record (``CorruptRecordError: hdfs://.../part-00003-of-00008
  .tfrecord: corrupt TFRecord at byte offset 585: data CRC: ...``) and what to do.  Iterating
  the dataset raises it with that line first: an error that is both a ``CorruptRecordError``
  and TensorFlow's op error (:mod:`tfrecord_io.engines.tfdata_errors`); inside ``model.fit``
  TensorFlow's own error carries it, right after its ``{{function_node}}`` tag.
* ``on_corrupt="skip"``: the rest of that file is dropped (every record before the bad one is
  kept), a warning is logged and ``dataset.loader_stats`` counts it.  With
  ``shuffle="global"`` each bad record is dropped on its own.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import mmap
import os
import secrets
import struct
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import urlsplit

import google_crc32c
import numpy as np

from tfrecord_io.core.framing import HEADER_SIZE, RECORD_OVERHEAD, CorruptRecordError, masked_crc32c, read_records
from tfrecord_io.core.schema import Feature, Schema
from tfrecord_io.storage import fs, source_identity, sources
from tfrecord_io.storage.index import RecordIndex, load_index, manifest_index
from tfrecord_io.storage.partitions import select_partitions
from tfrecord_io.engines.reader_options import check_common, check_feature_names
from tfrecord_io.storage.shard_cache import CacheStats, ShardCache, scheme_of
from tfrecord_io.storage.sources import Source, SourceFile

__all__ = [
    "DEFAULT_SHUFFLE_BUFFER", "LoaderOptions", "LoaderResume", "LoaderStats", "SourceFile", "Source",
    "input_fn", "make_dataset", "parse_spec", "prefetch_to_gpu", "resolve_source", "steps_per_epoch", "tf_dtype",
]

log = logging.getLogger(__name__)

DEFAULT_SHUFFLE_BUFFER = 10_000
#: Records per chunk read from one file before the interleave moves on to the next file.
CHUNK_RECORDS = 1024
#: A segment's first byte range, in records (the first batch waits for its check only), and
#: the most records and bytes of any later one.
FIRST_RANGE_RECORDS = 1024
MAX_RANGE_RECORDS = 1 << 16
MAX_RANGE_BYTES = 64 << 20
#: Records read by one call of the global shuffle's reader.
GLOBAL_READ_RECORDS = 1024
#: Files read at once by default: local / TF-native files, and files streamed through the cache.
DEFAULT_CYCLE_LENGTH = 8
DEFAULT_CACHED_CYCLE_LENGTH = 2
#: Shards a parallel interleave holds per file it reads: the open one, and two it opens ahead
#: (measured on TF 2.21: cycle_length 1 holds 3 shards, 2 holds 6).  The cache's default bound.
_SHARDS_PER_CYCLE = 3
#: With fewer CPUs than this, autotune=None turns tf.data's autotuner off (see LoaderOptions).
AUTOTUNE_MIN_CPUS = 5
#: Epochs of one iterator of a dataset with num_epochs=None (forever, for any practical purpose).
_FOREVER = 1 << 40
_TF_COMPRESSION = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}
_REMAINDER = ("drop", "pad")
_READ_BUFFER = 256 << 10  # TFRecordDataset's own default
_LENGTH = struct.Struct("<Q")
_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")


# ---------------------------------------------------------------------------------------
# Options and counters
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoaderOptions:
    """Everything ``make_dataset`` takes besides ``source``, ``schema`` and ``input_context``.

    batch_size: records per batch; with an ``input_context`` the GLOBAL batch size (each
        pipeline batches ``input_context.get_per_replica_batch_size(batch_size)``).
    shuffle: ``True`` (default): shuffle the file order (each epoch) and the records in windows;
        ``"global"``: each epoch a seeded permutation of all the records, read by offset (see the
        module doc; uncompressed files); ``False``: file order, records in order.
    shuffle_buffer: records are shuffled in windows of this many (uniform permutation of each
        window; bounds memory to one window). Default 10,000.
    seed: makes file and record order reproducible (and, by default, the interleave
        deterministic). Default None: a different order for each dataset (and each iterator).
    num_epochs: passes over the data per iterator; None repeats forever. Default 1.  Each epoch
        yields exactly ``steps_per_epoch(source, batch_size)`` batches.
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
        Iterators with it cannot be checkpointed (see the module doc).
    drop_remainder: drop each epoch's last partial batch (static batch shapes). Default False.
    remainder: with an ``input_context``, the last ``records % global batch`` records of each
        epoch: ``"drop"`` (default) or ``"pad"`` (read again from the epoch's start); see the
        module doc.
    ragged: SequenceExample features as ``tf.RaggedTensor`` instead of padded + lengths.
    cycle_length: files read at once. Default: min(files, 8); min(files, 2) through the cache.
    cache_dir: where the HDFS shard cache lives (default: the system temp dir).
    cache_files: the most shards on local disk at once through the cache: the ``cycle_length``
        being read plus those the interleave opens ahead (two per file it reads) and those
        downloaded ahead.  Default and least ``3 x cycle_length``; given alone it can lower the
        default ``cycle_length`` (to ``cache_files // 3``).
    download_threads: shards copied into the cache in parallel.  Default None: 1 when this process
        may use at most ``AUTOTUNE_MIN_CPUS - 1`` (4) CPUs, 2 otherwise.  On 2 CPUs shared with the
        DataNode, one download at a time keeps ahead of the reader and leaves the CPUs to it: HDFS
        ran at 0.91x local disk with 1 against 0.86x with 2 (median of 6 paired rounds, BENCHMARKS.md).
    autotune: tf.data's autotuner (``tf.data.Options().autotune.enabled``).  Default None: off
        when this process may use at most ``AUTOTUNE_MIN_CPUS - 1`` (4) CPUs, on otherwise.  On
        2 CPUs it now and then ran the whole pipeline at about one CPU (1M rows in 5.2 s instead
        of 2.6 s; 5 runs in 20), never with it off (0 in 13, and 10% faster on average):
        AUTOTUNE stages then run one call per CPU.  The option is applied to the returned dataset.
    """

    batch_size: int
    shuffle: bool | str = True
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    seed: int | None = None
    num_epochs: int | None = 1
    compression: str = "auto"
    on_corrupt: str = "error"
    deterministic: bool | None = None
    prefetch_to_device: bool | str = "auto"
    drop_remainder: bool = False
    remainder: str = "drop"
    ragged: bool = False
    cycle_length: int | None = None
    cache_dir: str | None = None
    cache_files: int | None = None
    download_threads: int | None = None
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
        positive_int("download_threads", self.download_threads, allow_none=True)
        if self.autotune not in (None, True, False):
            raise ValueError(f"autotune must be True, False or None, got {self.autotune!r}")
        if self.shuffle not in (True, False, "global") or isinstance(self.shuffle, (int, float)) \
                and not isinstance(self.shuffle, bool):
            raise ValueError(f"shuffle must be True (windows), 'global' or False, got {self.shuffle!r}")
        for name in ("drop_remainder", "ragged"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.deterministic is not None and not isinstance(self.deterministic, bool):
            raise TypeError(f"deterministic must be True, False or None, got {self.deterministic!r}")
        check_common(self)
        if self.remainder not in _REMAINDER:
            raise ValueError(f"remainder must be 'drop' or 'pad', got {self.remainder!r}")
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
    def downloads(self) -> int:
        """Shards copied at once (``download_threads``, or its default for this machine)."""
        if self.download_threads is not None:
            return self.download_threads
        return 1 if _usable_cpus() < AUTOTUNE_MIN_CPUS else 2

    @property
    def global_shuffle(self) -> bool:
        return self.shuffle == "global"

    @property
    def is_deterministic(self) -> bool:
        if self.deterministic is not None:
            return self.deterministic
        return self.shuffle is not True or self.seed is not None


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

    ``files_read``: file segments read to their end (or to their first bad record), summed over
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


def _read_as(schema: Schema, src: Source) -> tuple[Schema, tuple[str, ...]]:
    """The schema to parse ``src``'s records with, and the features to cast to float after parsing.

    A schema given to ``make_dataset`` may read an int64 feature of the records as ``float`` (a
    count as a regression target, say) without converting the data again: it is parsed as the
    int64 the manifest says the records hold, then cast to float32.  Any other difference from
    the manifest's types fails here, naming the feature, instead of at the first batch.
    """
    stored = src.manifest.schema if src.manifest is not None else None
    if stored is None or stored == schema:
        return schema, ()
    stored_types = {f.name: f for f in stored.input_features}
    casts = []

    def retype(f: Feature) -> Feature:
        held = stored_types.get(f.name)
        if held is None or held.type == f.type or {held.type, f.type} <= {"string", "bytes"}:
            return f
        if held.type == "int64" and f.type == "float":
            casts.append(f.name)
            default = f.default
            if default is not None:
                values = default if isinstance(default, tuple) else (default,)
                if any(float(v) != int(v) for v in values):
                    raise ValueError(f"feature {f.name!r}: read as float from int64 records, its default must be a "
                                     f"whole number (it fills records that lack it before the cast), got {default!r}")
                default = tuple(int(v) for v in values) if isinstance(default, tuple) else int(default)
            return dataclasses.replace(f, type="int64", default=default)
        raise ValueError(f"feature {f.name!r}: the records of {src.uri} hold {held.type} ({held.kind}), the schema "
                         f"given asks for {f.type}; only int64 can be read as another type (float) here: cast it "
                         f"after make_dataset, or convert again")

    if schema.record_type == "example":
        parsed = dataclasses.replace(schema, features=tuple(retype(f) for f in schema.features))
    else:
        parsed = dataclasses.replace(schema, context=tuple(retype(f) for f in schema.context),
                                     sequence=tuple(retype(f) for f in schema.sequence))
    return parsed, tuple(casts)


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
    check_feature_names(schema, names)
    keep = set(names) | ({schema.label} if schema.label else set())
    if schema.record_type == "example":
        return dataclasses.replace(schema, features=tuple(f for f in schema.features if f.name in keep),
                                   ignore_columns=())
    keep |= {schema.group_by}
    return dataclasses.replace(schema, context=tuple(f for f in schema.context if f.name in keep),
                               sequence=tuple(f for f in schema.sequence if f.name in keep) or schema.sequence[:1],
                               order_by=schema.order_by if schema.order_by in keep else None, ignore_columns=())


# ---------------------------------------------------------------------------------------
# Files, their indexes, and where each one is read
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


class _FileTable:
    """The files one loader reads, and what it learns of them in this process (thread-safe).

    ``index(i, size)``: file i's record index (:mod:`tfrecord_io.storage.index`: from the
    manifest of a tfrecord-io output, else a ``tfrecord-io index`` sidecar), loaded once and kept
    while the file keeps its size, or None.  ``walked(key)`` / ``remember_walk(key, answer)``:
    the :class:`_RangeGuard`'s answers for files without an index, per file (URI, size and
    mtime) and arguments, so that each range is walked once per process.
    """

    #: Walk answers kept; more and all are forgotten (an answer is a few numbers).
    MAX_WALKS = 1 << 16

    def __init__(self, files: Sequence[SourceFile], manifest=None):
        self.files = tuple(files)
        self.manifest = manifest  # a tfrecord-io output's: its shards' indexes are in it
        self._indexes: dict[int, RecordIndex | None] = {}
        self._walks: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    def counts(self) -> list[int | None]:
        """Each file's record count: the manifest's, else its index's, else None."""
        return [f.records for f in self.files]

    def index(self, i: int, size: int | None = None, *, strict: bool = False) -> RecordIndex | None:
        """File i's index, or None.  An index that is not the file's as it is now (its size or
        record count differ) is an error with ``strict`` (reading needs it), else a warning and
        None: the file is read without it (and its end-of-segment check says what is wrong)."""
        with self._lock:
            cached = self._indexes.get(i, False)
        if cached is not False and (cached is None or size is None or cached.file_bytes == size):
            return cached
        f = self.files[i]
        try:
            embedded = None
            if self.manifest is not None:
                embedded = manifest_index(self.manifest.raw, f.name, f.bytes, self.manifest.compression,
                                          self.manifest.uri)
            index = load_index(f.uri, f.compression, size, manifest=embedded)
            if index is not None and f.records is not None and index.records != f.records:
                raise ValueError(f"{f.uri}: _manifest.json says {f.records} records, its index {index.uri} "
                                 f"{index.records}")
        except ValueError as e:
            if strict:
                raise
            log.warning("%s; reading the file without its index", e)
            index = None
        with self._lock:
            self._indexes[i] = index
        return index

    def load_indexes(self, threads: int = 8) -> list[RecordIndex | None]:
        """Every file's index, strictly (read in parallel: on HDFS each is a small remote read)."""
        with ThreadPoolExecutor(max(1, min(threads, len(self.files)))) as pool:
            return list(pool.map(lambda i: self.index(i, strict=True), range(len(self.files))))

    def walked(self, key: tuple) -> tuple | None:
        with self._lock:
            return self._walks.get(key)

    def remember_walk(self, key: tuple, answer: tuple) -> None:
        with self._lock:
            if len(self._walks) >= self.MAX_WALKS:
                self._walks.clear()
            self._walks[key] = answer


class _RangeGuard:
    """Where TensorFlow reads next in a segment, and how far: the length check (see the module doc).

    Called (a numpy_function, pure: the same answer for the same arguments) before each byte
    range of a segment: ``(path, file, offset, record, remaining, step, done)`` ->
    ``(start, skip, n, next_offset, last)``: TensorFlow reads ``n`` records (-1: to the end) from
    byte ``start`` after skipping ``skip`` records.  ``offset`` is -1 for a segment's first range
    (found from ``record``), ``remaining`` the segment's records left (-1: to the end of the file);
    once ``done`` (the segment has ended) the answer is: nothing.
    Uncompressed files: every length in the range is checked against what remains of the file
    (and the index's lengths) before TensorFlow allocates it.  Compressed files need no check
    (TensorFlow's reader does not allocate a record's length up front there): one range.
    Through the shard cache it also tells the cache the shard is still being read.
    """

    def __init__(self, table: _FileTable, on_corrupt: str, stats: LoaderStats, cache: ShardCache | None):
        self.table, self.on_corrupt, self.stats, self.cache = table, on_corrupt, stats, cache

    def __call__(self, path_b, i, offset, record, remaining, step, done=False):
        if done:
            return _answer(0, 0, 0, 0, True)
        local = _local_path(path_b.decode("utf-8") if isinstance(path_b, bytes) else str(path_b))
        if self.cache is not None:
            self.cache.touch(local)  # still being read: copied again if it was evicted
        i, offset, record, remaining, step = int(i), int(offset), int(record), int(remaining), int(step)
        f = self.table.files[i]
        st = os.stat(local)
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
            return self._indexed(local, f, index, record, want, remaining, st.st_size)
        return self._walk(local, f, offset, record, want, remaining, st, step)

    def _bad(self, f: SourceFile, error: CorruptRecordError, start: int, n: int, size: int):
        """Error mode: raise; skip mode: TensorFlow reads the ``n`` records before the bad one, then stops."""
        if self.on_corrupt != "skip":
            self.stats._file_done(0, CorruptFile(f.uri, error.offset, error.check, 0, str(error)), False)
            raise error
        return _answer(start, 0, n, size, True)

    def _indexed(self, local: str, f: SourceFile, index: RecordIndex, record: int, want: int, remaining: int,
                 size: int):
        offsets, lengths = index.offsets, index.lengths
        start = int(offsets[record]) if record < index.records else size
        n = max(0, min(want, index.records - record))
        if n:  # at most MAX_RANGE_BYTES, but at least one record
            limit = start + MAX_RANGE_BYTES
            n = max(1, min(n, int(np.searchsorted(offsets[record:record + n], limit, side="left"))))
            fields = _length_fields(local, offsets[record:record + n])
            differ = np.flatnonzero(fields != lengths[record:record + n])
            if differ.size:
                j = int(differ[0])
                at = int(offsets[record + j])
                left = size - at - RECORD_OVERHEAD
                if int(fields[j]) > left:
                    return self._bad(f, CorruptRecordError(
                        f.uri, at, "truncated data", f"expected {int(fields[j])} data bytes, got {max(0, left + 4)} "
                        f"before end of stream"), start, j, size)
                raise ValueError(f"{f.uri}: the length field at byte offset {at} says {int(fields[j])}, its index "
                                 f"{index.uri} {int(lengths[record + j])}: the index is not this file's")
        end = record + n
        nxt = int(offsets[end]) if end < index.records else size
        return _answer(start, 0, n, nxt, end >= index.records or n == remaining)

    def _walk(self, local: str, f: SourceFile, offset: int, record: int, want: int, remaining: int, st, step: int):
        # A walk's answer depends on the file and the arguments only: remembered, later epochs walk nothing.
        key = (f.uri, st.st_size, st.st_mtime_ns if local == _local_path(f.uri) else None, offset, record,
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


def _length_fields(local: str, offsets: np.ndarray) -> np.ndarray:
    """The 8-byte length fields of the records at ``offsets`` of a local file, as uint64."""
    with open(local, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = np.frombuffer(mm, dtype=np.uint8)
        try:
            fields = view[offsets[:, None] + np.arange(8)].copy()
        finally:
            del view
    return fields.view("<u8").ravel()


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
    """Called at each chunk of a segment; at its end (``ends``), when TensorFlow's reading of it
    stops: did it read all of it?

    TF reports ``n`` records of ``nbytes`` payload.  A whole file was read to its end iff the
    framed stream they make (``nbytes + 16 n``) is the file (uncompressed: its size; gzip: its
    ISIZE trailer) or ``n`` is the manifest's count; a part of a file iff ``n`` is its count.
    When that does not settle it, our own framing reader reads the file to find the bad record
    (file, offset, which check).  Releases the segment's shard in the cache either way.
    """

    def __init__(self, table: _FileTable, on_corrupt: str, stats: LoaderStats, cache: ShardCache | None):
        self.table, self.on_corrupt, self.stats, self.cache = table, on_corrupt, stats, cache

    def __call__(self, ends, path_b, index, first, count, whole, n, nbytes):
        if not ends:
            return _NOTHING
        path = path_b.decode("utf-8")
        f = self.table.files[int(index)]
        first, count, whole, n, nbytes = int(first), int(count), bool(whole), int(n), int(nbytes)
        try:
            problem, error, recovered = self._check(path, f, first, count, whole, n, nbytes)
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

    def _open(self, path: str):
        if "://" in path and not path.startswith("file:"):
            return fs.open(path, "rb")
        return open(_local_path(path), "rb")

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


# ---------------------------------------------------------------------------------------
# Each epoch's work: which records this pipeline reads
# ---------------------------------------------------------------------------------------
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
    """The equal share of ``input_context``'s pipeline (see the module doc); None without one."""
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

    Returns ``(files, firsts, counts, wholes, pass_id)``: segment j reads ``counts[j]`` records of
    file ``files[j]`` from record ``firsts[j]`` (``wholes[j]``: all of it, to its end).  The file
    order is a permutation seeded by (key, epoch) when shuffling, the same in every pipeline.
    Through the shard cache, the epoch's pass (``pass_id``, from the iterator's token) is planned.
    """

    def __init__(self, table: _FileTable, share: _Share | None, shuffle: bool, cache: ShardCache | None,
                 pipeline_files: Sequence[int] | None = None):
        self.table, self.share, self.shuffle, self.cache = table, share, shuffle, cache
        self.pipeline_files = pipeline_files  # without counts: this pipeline's files (files[id::n])
        self.counts = np.array([c if c is not None else -1 for c in table.counts()], dtype=np.int64)

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
        return files, firsts, counts, wholes, pass_id

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


# ---------------------------------------------------------------------------------------
# The global shuffle's reader
# ---------------------------------------------------------------------------------------
class _Staged:
    """Local copies of every file of a source TensorFlow cannot open, for reading by offset.

    Downloads start at the first read (all files, ``threads`` at a time) into one directory of
    ``cache_dir``, kept for the dataset's lifetime (removed by :meth:`close`, see :class:`_Lifetime`,
    or at exit): a global shuffle reads every file in every batch.
    """

    def __init__(self, files: Sequence[SourceFile], cache_dir: str | None, threads: int):
        import shutil
        import tempfile

        self.files, self.cache_dir, self.threads = files, cache_dir, threads
        self._futures: list | None = None
        self._lock = threading.Lock()
        if cache_dir is not None:
            os.makedirs(cache_dir, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="tfrecord-io-staged-", dir=cache_dir)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="tfrecord-io-stage")
        self.close = weakref.finalize(self, lambda root, pool: (pool.shutdown(wait=False, cancel_futures=True),
                                                                shutil.rmtree(root, ignore_errors=True)),
                                      self.root, self._pool)

    def path(self, i: int) -> str:
        with self._lock:
            if self._futures is None:
                self._futures = [self._pool.submit(fs.get_file, f.uri, os.path.join(self.root, f"{k:06d}"))
                                 for k, f in enumerate(self.files)]
        self._futures[i].result()
        return os.path.join(self.root, f"{i:06d}")


class _Lifetime:
    """Deletes what a dataset staged on local disk once the dataset -- and every dataset made from it,
    every iterator of them, all of which hold it -- is garbage collected.

    TensorFlow keeps the Python functions of a pipeline built eagerly (and so the shard cache they
    use) for the life of the process, and says nothing when a pipeline or an iterator goes; this
    object, held by the dataset alone, is what goes with it.
    """

    def __init__(self, closables: Sequence[Any]):
        weakref.finalize(self, _close_all, [c.close for c in closables])


def _close_all(closers: Sequence[Any]) -> None:
    for close in closers:
        close()


class _RecordReader:
    """Records by global number, read at their offsets (a numpy_function; pure: same ids, same records).

    Global numbers run over the files in order.  Each record is read with one ``pread`` of its
    framed bytes, its length field checked against the index and both CRCs checked; a bad one is
    a CorruptRecordError naming the file and offset (``on_corrupt="skip"``: dropped, counted).
    """

    def __init__(self, table: _FileTable, indexes: Sequence[RecordIndex], staged: _Staged | None,
                 on_corrupt: str, stats: LoaderStats):
        self.table, self.indexes, self.staged = table, list(indexes), staged
        self.on_corrupt, self.stats = on_corrupt, stats
        self.starts = np.concatenate([[0], np.cumsum([ix.records for ix in indexes])]).astype(np.int64)
        self._fds: dict[int, int] = {}
        self._length_crcs: dict[int, int] = {}  # masked CRC of each length field seen (lengths repeat)
        self._lock = threading.Lock()
        weakref.finalize(self, _close_fds, self._fds)

    def _fd(self, i: int) -> int:
        with self._lock:
            fd = self._fds.get(i)
        if fd is None:
            path = self.staged.path(i) if self.staged is not None else _local_path(self.table.files[i].uri)
            fd = os.open(path, os.O_RDONLY)
            with self._lock:
                if i in self._fds:
                    os.close(fd)
                    fd = self._fds[i]
                else:
                    self._fds[i] = fd
        return fd

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        files = np.searchsorted(self.starts, ids, side="right") - 1
        local = ids - self.starts[files]
        order = np.lexsort((local, files))  # file by file, in file order: kinder to the disk
        groups = np.split(order, np.flatnonzero(np.diff(files[order])) + 1) if ids.size else []
        out = np.empty(ids.size, dtype=object)
        keep = np.ones(ids.size, dtype=bool)
        problems = []
        header, u32, value, pread = _HEADER.unpack_from, _U32.unpack_from, google_crc32c.value, os.pread
        length_crcs = self._length_crcs
        for group in groups:
            i = int(files[group[0]])
            index, fd = self.indexes[i], self._fd(i)
            ks = local[group]
            for j, offset, length in zip(group.tolist(), index.offsets[ks].tolist(), index.lengths[ks].tolist()):
                framed = pread(fd, length + RECORD_OVERHEAD, offset)
                good = len(framed) == length + RECORD_OVERHEAD
                if good:
                    stored, stored_crc = header(framed, 0)
                    crc = length_crcs.get(stored)
                    if crc is None:
                        crc = length_crcs.setdefault(stored, masked_crc32c(framed[:8]))
                    data = framed[HEADER_SIZE:HEADER_SIZE + length]
                    c = value(data)
                    good = (stored == length and crc == stored_crc
                            and (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF == u32(framed, HEADER_SIZE + length)[0])
                if good:
                    out[j] = data
                    continue
                error = CorruptRecordError(self.table.files[i].uri, offset, *_frame_problem(framed, length))
                if self.on_corrupt != "skip":
                    raise error
                problems.append(CorruptFile(error.path, offset, error.check, 0, str(error)))
                keep[j] = False
        if problems:
            for p in problems:
                log.warning("on_corrupt='skip': %s; dropped that record", p.message)
            out = out[keep]
        self.stats._records_done(int(out.size), problems)
        return out


def _close_fds(fds: dict) -> None:
    for fd in fds.values():
        os.close(fd)


def _frame_problem(framed: bytes, length: int) -> tuple[str, str]:
    """(check, detail): why ``framed`` is not one intact record of ``length`` data bytes."""
    if len(framed) < length + RECORD_OVERHEAD:
        return "truncated data", f"expected {length + RECORD_OVERHEAD} bytes, got {len(framed)} before end of stream"
    stored, stored_crc = _HEADER.unpack_from(framed, 0)
    if stored != length:
        return "index", f"the length field says {stored}, the record index {length}"
    if masked_crc32c(framed[:8]) != stored_crc:
        return "length CRC", "the length field's CRC does not match"
    return "data CRC", f"the data CRC does not match over {length} data bytes"


# ---------------------------------------------------------------------------------------
# Building the pipeline
# ---------------------------------------------------------------------------------------
def _byte_range(path, compression, start, skip, n):
    """The records of one byte range: ``n`` (-1: all) from byte ``start`` of ``path``, after ``skip``.

    ``TFRecordDatasetV2``'s ``byte_offsets`` (what ``tf.data.TFRecordDataset`` does not expose):
    TensorFlow seeks there (in a compressed file: by decompressing from the start) and reads,
    checking both CRCs, as ``TFRecordDataset`` does.
    """
    import tensorflow as tf

    variant = tf.raw_ops.TFRecordDatasetV2(filenames=tf.reshape(path, [1]), compression_type=compression,
                                           buffer_size=tf.constant(_READ_BUFFER, tf.int64),
                                           byte_offsets=tf.reshape(start, [1]))
    records = tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))
    return records.skip(skip).take(n)


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
        self.plan = _EpochPlan(table, share, opts.shuffle is True, self.cache, pipeline_files)
        self.guard = _RangeGuard(table, opts.on_corrupt, stats, self.cache)
        self.checker = _SegmentChecker(table, opts.on_corrupt, stats, self.cache)
        self.paths = tf.constant([_local_path(f.uri) for f in files] or [""], tf.string)
        self.comps = tf.constant([_TF_COMPRESSION[f.compression] for f in files] or [""], tf.string)

    def epoch(self, key, epoch, token):
        """The chunks of records (string vectors of up to CHUNK_RECORDS) of one epoch, in reading order."""
        import tensorflow as tf

        files, firsts, counts, wholes, pass_id = tf.numpy_function(
            self.plan, [key, epoch, token], [tf.int64] * 5, stateful=True)
        for t in (files, firsts, counts, wholes):
            t.set_shape([None])
        pass_id.set_shape([])
        segments = tf.data.Dataset.from_tensor_slices(
            (tf.range(tf.size(files, out_type=tf.int64)), files, firsts, counts, wholes))
        if self.cache is not None:
            # As the interleave takes each segment in (in order, before it opens it): its download
            # starts, in reading order, however the interleave's workers then race to open them.
            def want(pos, *rest):
                wanted = tf.numpy_function(lambda p, k: (self.cache.want(int(p), int(k)), k)[1], [pass_id, pos],
                                           tf.int64, stateful=True)
                return (tf.reshape(wanted, []), *rest)

            segments = segments.map(want)

        if self.cache is not None:
            def segment(pos, i, first, count, whole):
                # Made as this element is first read, not when the interleave makes it (one at a
                # time): the wait for a shard's download holds up this file only.
                return tf.data.Dataset.from_tensors((pos, i, first, count, whole)).flat_map(
                    lambda *args: self._segment(pass_id, *args))
            parallel = self.cycle
        else:
            def segment(pos, i, first, count, whole):
                return self._segment(pass_id, pos, i, first, count, whole)
            parallel = tf.data.AUTOTUNE
        return segments.interleave(segment, cycle_length=self.cycle, block_length=1, num_parallel_calls=parallel,
                                   deterministic=self.opts.is_deterministic)

    def _segment(self, pass_id, pos, i, first, count, whole):
        """One segment's chunks of records: its byte ranges, each checked (the guard) just before
        TensorFlow reads it, then the end-of-segment check.  Every tf.data function here is one
        more to instantiate before the first record (5 to 20 ms each on 2 CPUs), so there are
        few: a scan for the ranges (and a take_while to end them), a flat_map over them, a scan
        for the check."""
        import tensorflow as tf

        if self.cache is not None:
            path = tf.numpy_function(lambda p, k: self.cache.fetch(int(p), int(k)).encode("utf-8"),
                                     [pass_id, pos], tf.string, stateful=True)
            path.set_shape([])
        else:
            path = tf.gather(self.paths, i)
        compression = tf.gather(self.comps, i)
        remaining = tf.where(whole > 0, tf.constant(-1, tf.int64), count)
        i64 = tf.int64

        def next_range(state, _):
            offset, record, left, step, done = state
            # The guard answers "nothing" itself once the segment is done: a tf.cond here would be
            # two more functions to instantiate.
            out = tf.numpy_function(self.guard, [path, i, offset, record, left, step, done],
                                    [i64, i64, i64, i64, tf.bool], stateful=False)
            for t in out:
                t.set_shape([])
            start, skip, n, nxt, last = out
            left2 = tf.where(left >= 0, left - tf.maximum(n, 0), left)
            return (nxt, record + tf.maximum(n, 0), left2, step + 1, done | last), (start, skip, n, last, done)

        ranges = (tf.data.Dataset.counter()
                  .scan((tf.constant(-1, i64), first, remaining, tf.constant(0, i64), tf.constant(False)), next_range)
                  .take_while(lambda start, skip, n, last, done: tf.logical_not(done)))
        empty = tf.zeros([0], tf.string)
        data_tag = tf.data.Dataset.from_tensors((tf.constant(0, i64), tf.constant(-1, i64), tf.constant(False))).repeat()

        def read_range(start, skip, n, last, done):
            # A read error (bad CRC, truncation) ends the range's stream, dropping the chunk it was
            # filling; the end-of-segment check says which file, where and why.  ignore_errors after
            # batch, not per record: one tf.data stage fewer per record.  Chunks are tagged
            # (kind 0) by a zip, a marker (kind 1) with the range's records follows them.
            chunks = _byte_range(path, compression, start, skip, n).batch(CHUNK_RECORDS).ignore_errors()
            marker = tf.data.Dataset.from_tensors((empty, (tf.constant(1, i64), n, last)))
            return tf.data.Dataset.zip((chunks, data_tag)).concatenate(marker)

        def check(state, element):
            got, nbytes, in_range, stopped = state
            chunk, (kind, expected, last) = element
            # Once the segment has ended early (a corrupt record), the rest of the file is dropped.
            chunk = chunk[:tf.where(stopped, tf.constant(0, tf.int32), tf.size(chunk))]
            size = tf.size(chunk, out_type=i64)
            got, in_range = got + size, in_range + size
            nbytes = nbytes + tf.reduce_sum(tf.cast(tf.strings.length(chunk), i64))
            ends = tf.logical_not(stopped) & tf.equal(kind, 1) & (last | ((expected >= 0) & (in_range < expected)))
            # Called for every chunk (a numpy_function: ~30 us per 1,024 records) rather than in a
            # tf.cond: it checks at the segment's end only and otherwise returns nothing at once.
            tail = tf.numpy_function(self.checker, [ends, path, i, first, count, whole, got, nbytes], tf.string,
                                     stateful=True)
            tail.set_shape([None])
            in_range = tf.where(tf.equal(kind, 1), tf.constant(0, i64), in_range)
            return (got, nbytes, in_range, stopped | ends), tf.concat([chunk, tail], 0)

        zero = tf.constant(0, i64)
        return ranges.flat_map(read_range).scan((zero, zero, zero, tf.constant(False)), check)


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
        permute, num_parallel_calls=tf.data.AUTOTUNE, deterministic=opts.is_deterministic)


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

    return positions.map(read, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


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


def _parser(schema: Schema, casts: Sequence[str] = (), *, ragged: bool):
    """The batch -> features (or (features, label)) function; ``casts``: features parsed as int64
    and yielded as float32 (:func:`_read_as`)."""
    import tensorflow as tf

    label = schema.label
    if schema.record_type == "example":
        spec = parse_spec(schema)

        def parse(serialized):
            parsed = tf.io.parse_example(serialized, spec)
            for name in casts:
                parsed[name] = tf.cast(parsed[name], tf.float32)
            return parsed
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
            for name in casts:
                if name in out:
                    out[name] = tf.cast(out[name], tf.float32)
                elif name in sequences:
                    sequences[name] = tf.cast(sequences[name], tf.float32)
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
    if target is None:
        return dataset
    length = int(dataset.cardinality())
    prefetched = dataset.apply(tf.data.experimental.prefetch_to_device(target))
    if length == tf.data.UNKNOWN_CARDINALITY or int(prefetched.cardinality()) != tf.data.UNKNOWN_CARDINALITY:
        return prefetched
    from tfrecord_io.engines.tfdata_errors import LeadingErrorsDataset

    return LeadingErrorsDataset(prefetched, length=length)  # the copy to the device hides the length


def make_dataset(source, *, schema=None, batch_size: int, shuffle: bool | str = True,
                 shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, seed: int | None = None,
                 num_epochs: int | None = 1, input_context=None, compression: str = "auto",
                 on_corrupt: str = "error", deterministic: bool | None = None,
                 prefetch_to_device: bool | str = "auto", drop_remainder: bool = False, remainder: str = "drop",
                 ragged: bool = False, cycle_length: int | None = None, cache_dir: str | None = None,
                 cache_files: int | None = None, download_threads: int | None = None, autotune: bool | None = None,
                 stats: LoaderStats | None = None, features: Sequence[str] | None = None,
                 resume: LoaderResume | None = None, partitions: dict | None = None):
    """A ``tf.data.Dataset`` of parsed batches from ``source`` (see the module doc and :class:`LoaderOptions`).

    Yields a features dict, or ``(features, label)`` when the schema names a label.
    ``features``: parse and yield only these (and the label), e.g. the named inputs of a Keras
    model (Keras matches a dict by name, but only when it holds exactly the model's inputs).  The
    returned dataset carries ``loader_stats`` (a :class:`LoaderStats`; pass ``stats=`` to share
    one, e.g. across the pipelines of an :func:`input_fn`) and ``loader_resume`` (a
    :class:`LoaderResume`; ``resume=`` to share one).  ``partitions``: of a partitioned output
    (``--partition-by``), read only these, e.g. ``{"cut": "Ideal"}`` or ``{"cut": ["Ideal", "Good"]}``
    (:func:`tfrecord_io.storage.partitions.select_partitions`); the partition columns are features
    of the records like any other.
    """
    import tensorflow as tf

    opts = LoaderOptions(batch_size=batch_size, shuffle=shuffle, shuffle_buffer=shuffle_buffer, seed=seed,
                         num_epochs=num_epochs, compression=compression, on_corrupt=on_corrupt,
                         deterministic=deterministic, prefetch_to_device=prefetch_to_device,
                         drop_remainder=drop_remainder, remainder=remainder, ragged=ragged,
                         cycle_length=cycle_length, cache_dir=cache_dir, cache_files=cache_files,
                         download_threads=download_threads, autotune=autotune)
    if stats is not None and not isinstance(stats, LoaderStats):
        raise TypeError(f"stats must be a LoaderStats, got {type(stats).__name__}")
    if resume is not None and not isinstance(resume, LoaderResume):
        raise TypeError(f"resume must be a LoaderResume, got {type(resume).__name__}")
    stats = stats if stats is not None else LoaderStats()
    resume = resume if resume is not None else LoaderResume()
    src = select_partitions(resolve_source(source, opts.compression), partitions)
    resolved_schema = select_features(_resolve_schema(schema, src), features)
    _check_present(resolved_schema, src)
    parse = _parser(*_read_as(resolved_schema, src), ragged=opts.ragged)
    batch = opts.batch_size
    if input_context is not None:
        batch = input_context.get_per_replica_batch_size(opts.batch_size)
    table = _FileTable(src.files, src.manifest)
    if opts.global_shuffle or (input_context is not None and any(f.records is None for f in src.files)):
        _counts_from_indexes(table)
    counts = table.counts()
    share = _share(counts, input_context, batch, opts.remainder)
    pipeline_files = None
    if input_context is not None and share is None:
        n, p = input_context.num_input_pipelines, input_context.input_pipeline_id
        log.warning("%s: record counts unknown (no _manifest.json, no record indexes): each of the %d input "
                    "pipelines reads every %d-th file, so they may yield different numbers of batches (give "
                    "the files an index with `tfrecord-io index`)", src.uri, n, n)
        pipeline_files = list(range(p, len(src.files), n))
    common_key = input_context is not None and input_context.num_input_pipelines > 1
    if common_key and opts.seed is None:  # every pipeline must cut the same order
        opts = dataclasses.replace(opts, seed=0)
    key = opts.seed if opts.seed is not None else secrets.randbits(62)
    start = _Start(int(key) & (2**63 - 1), opts.num_epochs or _FOREVER)
    per_epoch = _batches_per_epoch(counts, share, batch, opts.drop_remainder)
    data_identity = source_identity.identity(src)
    resume._add(start, per_epoch, data_identity, src.uri)
    same_data = _SameData(data_identity, src.uri)

    threads = None
    if opts.global_shuffle:
        epoch_fn, staged = _global_pipeline(table, src, opts, stats, share, batch)
    else:
        epoch_fn, threads, staged = _window_pipeline(table, opts, stats, share, batch, pipeline_files)
    # The head's element is what a checkpoint of the iterator keeps of its start: the epoch
    # arguments and the identity of the data they index.  Restored, epochs() runs again on the
    # saved element, and refuses one saved over other data (_SameData).
    identity_text = tf.constant(same_data.text)
    head = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).map(
        lambda _: tuple(tf.numpy_function(start, [], [tf.int64] * 4, stateful=True)) + (identity_text,))
    epochs_per_iteration = opts.num_epochs or _FOREVER

    def epochs(key_, first, skip, token, saved_identity):
        key_, first, skip, token = (tf.reshape(t, []) for t in (key_, first, skip, token))
        first += tf.reshape(tf.numpy_function(same_data, [saved_identity], tf.int64, stateful=False), [])
        return tf.data.Dataset.range(first, first + epochs_per_iteration).map(
            lambda e: (key_, e, tf.where(tf.equal(e, first), skip, tf.constant(0, tf.int64)), token))

    ds = _declare_length(head.flat_map(epochs).flat_map(epoch_fn), per_epoch, opts.num_epochs)
    if threads is not None:
        ds = ds.with_options(threads)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=opts.is_deterministic)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    tuning = tf.data.Options()
    tuning.autotune.enabled = _autotune_on(opts.autotune)
    # The Python steps are pure functions of their inputs or keep their state outside the graph
    # (see "Checkpointing" in the module doc): an iterator's checkpoint is its tf.data state.
    tuning.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    # tf.data's static rewrites of the pipeline's graph take ~50 ms of each new iterator's start on
    # 2 CPUs (its many small functions) and gain nothing here: parallelism and prefetching are
    # placed by hand (same throughput with and without them, BENCHMARKS.md).  with_options() turns
    # them back on.
    tuning.experimental_optimization.apply_default_optimizations = False
    ds = ds.with_options(tuning)
    if input_context is None:
        ds = prefetch_to_gpu(ds, opts.prefetch_to_device)
    else:
        _target_device(opts.prefetch_to_device, input_context, ds.element_spec)  # rejects True / a device
    from tfrecord_io.engines.tfdata_errors import LeadingErrorsDataset

    ds = LeadingErrorsDataset(ds, length=getattr(ds, "_length", None))  # our errors lead; the length kept
    ds.loader_stats = stats
    ds.loader_resume = resume
    if staged is not None:
        ds._tfrecord_io_lifetime = _Lifetime([staged])
    return ds


class _SameData:
    """The identity of the data a dataset reads, and the check a restored iterator makes of the
    identity it was saved with (a numpy_function: 0, or ValueError naming what changed)."""

    def __init__(self, identity: dict, uri: str):
        self.text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
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


def _declare_length(ds, per_epoch: int | None, num_epochs: int | None):
    """``ds`` with its length declared: ``per_epoch x num_epochs`` batches (infinite for num_epochs=None).

    Keras takes an epoch's length from the dataset's cardinality, and without one from the first
    epoch it sees end -- after a resume, the shortened resumed epoch, which then cuts every later
    epoch short.  ``flat_map`` hides the count; ``assert_cardinality`` would restore it but fails an
    iterator started mid-epoch (``LoaderResume.start_epoch(skip_batches=k)`` yields k fewer).  So
    the count is declared without being asserted: ``ds`` followed by a dataset whose static
    cardinality is infinite but that yields nothing (an empty ``filter``, repeated: tf.data's
    ``repeat`` ends when a pass yields nothing) is infinite, and ``take`` makes it the count.  An
    iterator still ends where its data ends.
    """
    if per_epoch is None:
        return ds
    import tensorflow as tf

    nothing = tf.nest.map_structure(lambda spec: tf.zeros([d if d is not None else 0 for d in spec.shape],
                                                          spec.dtype), ds.element_spec)
    ds = ds.concatenate(tf.data.Dataset.from_tensors(nothing).filter(lambda *_: False).repeat())
    return ds if num_epochs is None else ds.take(per_epoch * num_epochs)


def _counts_from_indexes(table: _FileTable) -> None:
    """Files without a manifest count: take it from their record index, where they have one."""
    missing = [k for k, f in enumerate(table.files) if f.records is None]
    if not missing:
        return
    found = table.load_indexes()
    table.files = tuple(dataclasses.replace(f, records=found[k].records) if f.records is None and found[k] is not None
                        else f for k, f in enumerate(table.files))


def _batches_per_epoch(counts, share: _Share | None, batch: int, drop_remainder: bool) -> int | None:
    records = share.records if share is not None else (sum(counts) if None not in counts else None)
    if records is None:
        return None
    return records // batch if drop_remainder else -(-records // batch)


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
        # own, beyond one per CPU for the work (see the module doc).
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


def input_fn(source, **options):
    """A ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``.

    ``options`` are :func:`make_dataset`'s (``batch_size`` is the global batch size); each input
    pipeline reads its equal share of each epoch's records (see "Equal work per input pipeline"
    in the module doc) with the per-replica batch size.  The source is resolved (manifest read)
    once, here; ``dataset_fn.loader_stats`` counts for all pipelines, ``dataset_fn.loader_resume``
    steers them all (:class:`tfrecord_io.engines.resume.BackupAndRestore`).
    """
    if "input_context" in options:
        raise TypeError("input_fn() passes input_context itself; do not give it")
    if "batch_size" not in options:
        raise TypeError("input_fn() needs batch_size= (the global batch size)")
    option_names = {f.name for f in dataclasses.fields(LoaderOptions)}
    unknown = set(options) - option_names - {"schema", "stats", "features", "resume", "partitions"}
    if unknown:
        raise TypeError(f"input_fn() got unknown option(s) {sorted(unknown)}")
    LoaderOptions(**{k: v for k, v in options.items() if k in option_names})  # fail here, not per worker
    src = select_partitions(resolve_source(source, options.get("compression", "auto")), options.pop("partitions", None))
    _resolve_schema(options.get("schema"), src)
    stats = options.pop("stats", None) or LoaderStats()
    resume = options.pop("resume", None) or LoaderResume()

    def dataset_fn(input_context):
        return make_dataset(src, input_context=input_context, stats=stats, resume=resume, **options)

    dataset_fn.loader_stats = stats
    dataset_fn.loader_resume = resume
    dataset_fn.source = src
    return dataset_fn


def steps_per_epoch(source, batch_size: int, input_context=None, *, drop_remainder: bool = False,
                    remainder: str = "drop", partitions: dict | None = None) -> int:
    """Batches per epoch, from the manifest's record counts (no data is read).

    Without ``input_context``: exactly the batches one epoch of ``make_dataset(source,
    batch_size=batch_size, drop_remainder=...)`` yields: ``ceil(records / batch_size)``
    (``floor`` with ``drop_remainder``).  With one: the global steps of an epoch, which every
    input pipeline of ``input_fn(source, batch_size=batch_size, remainder=...)`` fills with full
    per-replica batches for all its replicas: ``records // batch_size`` (``remainder="drop"``) or
    ``ceil(records / batch_size)`` (``"pad"``), ``batch_size`` being the global batch.
    """
    LoaderOptions(batch_size=batch_size, remainder=remainder)
    src = select_partitions(resolve_source(source), partitions)
    if src.total_records is None:
        raise ValueError(f"steps_per_epoch needs record counts from a _manifest.json; {src.uri} "
                         f"is not an output directory of tfrecord-io (count the records, or use "
                         f"num_epochs=None with your own steps)")
    total = src.total_records
    if input_context is None:
        return total // batch_size if drop_remainder else math.ceil(total / batch_size)
    per_replica = input_context.get_per_replica_batch_size(batch_size)
    share = _share([total], input_context, per_replica, remainder)
    pipelines = input_context.num_input_pipelines
    return share.records // (per_replica * max(1, input_context.num_replicas_in_sync // pipelines))
