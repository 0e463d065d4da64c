"""What ``make_dataset`` takes (:class:`LoaderOptions`, one frozen dataclass whose fields are the
keyword options) and the loader's constants.  No TensorFlow.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
import struct
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfrecord_io.engines.reader_options import check_common


__all__ = ["LoaderOptions"]


DEFAULT_SHUFFLE_BUFFER = 10_000
#: Records per chunk read from one file before the interleave moves on to the next file.
CHUNK_RECORDS = 1024
#: A segment's first byte range, in records (the first batch waits for its check only), and
#: the most records and bytes of any later one.
FIRST_RANGE_RECORDS = 1024
MAX_RANGE_RECORDS = 1 << 16
MAX_RANGE_BYTES = 64 << 20
#: Small files are read in packs (one TensorFlow reader, one check before and after, for many
#: files: see "Small files" in the package doc): whole files of at most PACK_FILE_BYTES, up to
#: PACK_BYTES and PACK_FILES in a pack.
PACK_FILE_BYTES = 4 << 20
PACK_BYTES = 32 << 20
PACK_FILES = 1024
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


@dataclass(frozen=True)
class LoaderOptions:
    """Everything ``make_dataset`` takes besides ``source``, ``schema`` and ``input_context``.

    batch_size: records per batch; with an ``input_context`` the GLOBAL batch size (each
        pipeline batches ``input_context.get_per_replica_batch_size(batch_size)``).
    shuffle: ``True`` (default): shuffle the file order (each epoch) and the records in windows;
        ``"global"``: each epoch a seeded permutation of all the records, read by offset (see the
        package doc; uncompressed files); ``False``: file order, records in order.
    shuffle_buffer: records are shuffled in windows of this many (uniform permutation of each
        window; bounds memory to one window). Default 10,000.
    seed: makes file and record order reproducible (and, by default, the interleave
        deterministic). Default None: a different order for each dataset (and each iterator).
    num_epochs: passes over the data per iterator; None repeats forever. Default 1.  Each epoch
        yields exactly ``steps_per_epoch(source, batch_size)`` batches.
    compression: ``"auto"`` (the manifest's, else from each file's extension: ``.gz`` gzip,
        ``.zlib`` zlib), or ``"none"`` / ``"gzip"`` / ``"zlib"`` for every file.
    on_corrupt: ``"error"`` (default) or ``"skip"`` (see the package doc).
    deterministic: the interleave and parse keep a fixed order.  Default None: True unless
        ``shuffle=True`` with no ``seed`` (then order does not matter and False is faster).
    prefetch_to_device: ``"auto"`` (default): ``prefetch_to_device('/gpu:0')`` as the last step
        when a GPU is present, there is no ``input_context`` (a distribution strategy places
        batches itself) and every tensor is dense; ``True`` to require it; ``False`` never; or
        a device name.  It must be the pipeline's last step: to add your own transformations
        (e.g. ``map(to_model_inputs)``), pass ``False`` and end with :func:`prefetch_to_gpu`.
        Iterators with it cannot be checkpointed (see the package doc).
    drop_remainder: drop each epoch's last partial batch (static batch shapes). Default False.
    remainder: with an ``input_context``, the last ``records % global batch`` records of each
        epoch: ``"drop"`` (default) or ``"pad"`` (read again from the epoch's start); see the
        package doc.
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
        least = _SHARDS_PER_CYCLE * (self.cycle_length or 1)
        if self.cache_files is not None and self.cache_files < least:
            warnings.warn(
                f"cache_files={self.cache_files} is below its least, {least}: each shard being read stays on disk "
                f"until read and the interleave opens two more ahead of it (per file read at once, cycle_length="
                f"{self.cycle_length or 1}); using cache_files={least}", stacklevel=4)
            object.__setattr__(self, "cache_files", least)

    @classmethod
    def from_options(cls, caller: str, others: set[str] = frozenset(), **options) -> "LoaderOptions":
        """The options of a call like ``make_dataset(**options)``: TypeError naming an unknown one
        (and the closest option) rather than Python's bare "unexpected keyword"; ``others`` are the
        caller's own arguments, taken out before."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names - set(others))
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(names | set(others)), n=1)
            raise TypeError(f"{caller}() got unknown option {unknown[0]!r}"
                            + (f" (did you mean {close[0]!r}?)" if close else "")
                            + f"; its options: {', '.join(sorted(names | set(others)))}")
        return cls(**{k: v for k, v in options.items() if k in names})

    @classmethod
    def signature(cls, fn) -> inspect.Signature:
        """``fn``'s signature with its ``**options`` spelled out as these fields (each with its default)."""
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        taken = {p.name for p in params}
        for f in dataclasses.fields(cls):
            if f.name not in taken:
                params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                                annotation=f.type))
        return sig.replace(parameters=params)

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


def _usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _autotune_on(option: bool | None) -> bool:
    return option if option is not None else _usable_cpus() >= AUTOTUNE_MIN_CPUS
