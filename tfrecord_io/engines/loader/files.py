"""The files one loader reads: the source and schema resolved, the types read as, the record
indexes learnt in this process (:class:`_FileTable`).  No TensorFlow.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence


from tfrecord_io.core.schema import Feature, Schema
from tfrecord_io.storage import fs, sources
from tfrecord_io.storage.index import RecordIndex, load_index, manifest_index
from tfrecord_io.engines.reader_options import check_feature_names
from tfrecord_io.storage.sources import Source, SourceFile, shard_mismatch


__all__ = ["resolve_source", "select_features"]

log = logging.getLogger(__name__)


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
        self._checked: set[tuple] = set()  # (file, size, mtime) whose bytes matched the manifest's CRC-32C
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
            now = size if size is not None else fs.size(f.uri) if f.bytes is not None else None
            problem = shard_mismatch(f, nbytes=now)
            if problem is not None:  # not the manifest's file: its records would be someone else's
                raise problem from e
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

    def content_checked(self, key: tuple, done: bool = False) -> bool:
        """Whether file ``key`` (index, size, mtime) was found to hold its manifest's bytes; ``done``: it was."""
        with self._lock:
            if done:
                self._checked.add(key)
            return key in self._checked

    def walked(self, key: tuple) -> tuple | None:
        with self._lock:
            return self._walks.get(key)

    def remember_walk(self, key: tuple, answer: tuple) -> None:
        with self._lock:
            if len(self._walks) >= self.MAX_WALKS:
                self._walks.clear()
            self._walks[key] = answer


def _counts_from_indexes(table: _FileTable) -> None:
    """Files without a manifest count: take it from their record index, where they have one."""
    missing = [k for k, f in enumerate(table.files) if f.records is None]
    if not missing:
        return
    found = table.load_indexes()
    table.files = tuple(dataclasses.replace(f, records=found[k].records) if f.records is None and found[k] is not None
                        else f for k, f in enumerate(table.files))
