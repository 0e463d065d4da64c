"""TFRecord sources: what every reader of TFRecords (the loader, ``inspect``, ``verify``,
``stats``, ``spark.read.format("tfrecord")``) is given, resolved one way.

A SOURCE is one of

* an output directory of ours (it has ``_manifest.json``): the files the manifest lists, with
  its compression, schema, record counts and per-feature present counts (:class:`Manifest`);
* any other directory: its files, except names starting with ``_`` or ``.`` (the same rule as
  input listing, :func:`tfrecord_io.storage.inputs.hidden`; subdirectories are not entered);
* a glob (``*``, ``?``, ``[...]``), a single file, or (from Python) a list of files.

Local paths, ``file://`` and ``hdfs://`` work alike.  A file's compression is the caller's
``compression`` when given, else the manifest's, else implied by its extension (``.gz``/``.gzip``,
``.zlib``/``.deflate``), else -- with ``sniff=True`` -- read from its first bytes: a valid
TFRecord header (length + its masked CRC) means uncompressed, the gzip magic ``1f 8b`` gzip,
a zlib header zlib.

Readers differ only in how strict they are, which :func:`resolve_source` takes as arguments:
the loader wants a *committed* output (``_SUCCESS`` present, every listed file there) and
resolves cheaply; the diagnostic commands look at anything, uncommitted or damaged, and report
what they find (missing files have ``size=None``; files beside a manifest that it does not list
are ``extra_entries``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from tfrecord_io.core.checksum import ChecksumReader, format_crc, parse_crc
from tfrecord_io.core.framing import compression_from_path, iter_record_chunks, iter_records, masked_crc32c, normalize_compression
from tfrecord_io.core.record_schema import INFER_SAMPLE_RECORDS, Inference, read_sample
from tfrecord_io.core.schema import Schema, SchemaError
from tfrecord_io.storage import fs
from tfrecord_io.storage.inputs import hidden, is_glob
from tfrecord_io.storage.output import MANIFEST, SUCCESS, read_manifest
from tfrecord_io.storage.schema_io import load_schema

log = logging.getLogger(__name__)

__all__ = ["Manifest", "ManifestFile", "ShardMismatchError", "ShardReader", "Source", "SourceFile", "infer_files",
           "infer_files_schema", "iter_file_chunks", "iter_file_records", "resolve_source", "shard_mismatch",
           "sniff_compression"]


@dataclass(frozen=True)
class ManifestFile:
    path: str            # relative to the output directory
    records: int
    bytes: int | None
    crc32c: int | None = None  # of the file's bytes (None: written before manifests held it)


@dataclass(frozen=True)
class Manifest:
    """A ``_manifest.json``, read and checked once (the writers' side is :mod:`~tfrecord_io.storage.output`).

    ``present`` maps each feature to how many records hold it (None for outputs written before
    present counts were recorded); ``raw`` is the JSON object itself.
    """

    uri: str
    schema: Schema
    record_type: str
    compression: str
    files: tuple[ManifestFile, ...]
    present: Mapping[str, int] | None
    raw: Mapping[str, Any]

    @classmethod
    def read(cls, directory: str) -> "Manifest":
        """The manifest of ``directory`` (FileNotFoundError when it has none; ValueError naming it
        and the bad entry when it is not a valid manifest)."""
        path = fs.join(directory, MANIFEST)
        raw = read_manifest(directory)
        try:
            schema = Schema.from_dict(raw["schema"])
        except (KeyError, TypeError, SchemaError) as e:
            raise ValueError(f"{path}: no valid schema: {e}") from e
        try:
            compression = normalize_compression(raw.get("compression"))
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from e
        files = []
        for entry in raw.get("files") or ():
            try:
                nbytes, crc = entry.get("bytes"), entry.get("crc32c")
                files.append(ManifestFile(str(entry["path"]), int(entry["records"]),
                                          int(nbytes) if nbytes is not None else None,
                                          parse_crc(crc, "crc32c") if crc is not None else None))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise ValueError(f"{path}: bad files entry {str(entry)[:200]}: {e}") from e
        present = raw.get("present")
        return cls(path, schema, raw.get("record_type") or schema.record_type, compression, tuple(files),
                   present if isinstance(present, Mapping) else None, raw)

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)


@dataclass(frozen=True)
class SourceFile:
    """One record file of a source.

    ``name`` is its path relative to the source; ``compression_from`` says where its
    compression came from ("manifest" | "option" | "extension" | "sniffed"); ``size`` is its
    size now (None when it does not exist, or when sizes were not asked for); ``records``,
    ``bytes`` and ``crc32c`` (of the file's bytes) what the manifest says (None without a manifest).
    """

    uri: str
    name: str
    compression: str
    compression_from: str = "extension"
    size: int | None = None
    records: int | None = None
    bytes: int | None = None
    crc32c: int | None = None


@dataclass(frozen=True)
class Source:
    """A resolved source: its files in a stable order, and what its manifest says."""

    uri: str                                  # what was asked for (a list: "N files (first, ...)")
    files: tuple[SourceFile, ...]
    is_dir: bool = False
    manifest: Manifest | None = None
    success: bool | None = None               # _SUCCESS present (directories only)
    extra_entries: tuple[str, ...] = ()       # files beside a manifest that it does not list
    schema: Schema | None = None              # the manifest's, or the caller's
    schema_from: str | None = None            # "manifest" | "option"
    splits: tuple[str, ...] = ()              # a --split output's root: its splits (their files are ``files``)

    @property
    def record_type(self) -> str | None:
        if self.manifest is not None:
            return self.manifest.record_type
        return self.schema.record_type if self.schema is not None else None

    @property
    def total_records(self) -> int | None:
        """The manifest's record count (None unless every file has one)."""
        if any(f.records is None for f in self.files):
            return None
        return sum(f.records for f in self.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files)


def _relative(base: str, uri: str) -> str:
    base = base.rstrip("/") + "/"
    return uri[len(base):] if uri.startswith(base) else uri.rstrip("/").rsplit("/", 1)[-1]


def sniff_compression(uri: str) -> str:
    """``"none"``, ``"gzip"`` or ``"zlib"`` from a file's first bytes (see the module doc)."""
    with fs.open(uri, "rb") as f:
        head = f.read(12)
    if len(head) == 12:
        (length_crc,) = struct.unpack_from("<I", head, 8)
        if masked_crc32c(head[:8]) == length_crc:
            return "none"
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] >> 4) <= 7 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib"
    return "none"


def _size_or_none(uri: str) -> int | None:
    try:
        return fs.size(uri)
    except FileNotFoundError:
        return None


class _Resolver:
    def __init__(self, compression: str, sniff: bool, sizes: bool):
        self.compression = "auto" if compression in (None, "auto") else normalize_compression(compression)
        self.sniff, self.sizes = sniff, sizes

    def file(self, uri: str, name: str, manifest: Manifest | None = None,
             entry: ManifestFile | None = None) -> SourceFile:
        size = _size_or_none(uri) if self.sizes else None
        if self.compression != "auto":
            comp, comp_from = self.compression, "option"
        elif manifest is not None:
            comp, comp_from = manifest.compression, "manifest"
        else:
            comp, comp_from = compression_from_path(uri), "extension"
            if comp == "none" and uri.endswith(".deflate"):
                comp = "zlib"  # Hadoop's DefaultCodec (spark-tfrecord's "deflate")
            if comp == "none" and self.sniff and (size is not None or not self.sizes):  # (missing: nothing to sniff)
                comp, comp_from = sniff_compression(uri), "sniffed"
        return SourceFile(uri, name, comp, comp_from, size, entry.records if entry else None,
                          entry.bytes if entry else None, entry.crc32c if entry else None)


def resolve_source(source: Any, *, compression: str | None = "auto", schema: Any = None,
                   committed: bool = False, sniff: bool = False, sizes: bool = False) -> Source:
    """Turn ``source`` (output directory, directory, glob, file, or list of files) into a :class:`Source`.

    ``committed=True`` (the loader): a directory must be a committed output of ours (``_SUCCESS``
    and ``_manifest.json``) and every file it lists must exist.  Otherwise anything is resolved
    and missing listed files show as ``size=None`` (with ``sizes=True``).  ``sniff`` reads the
    first bytes of files whose name implies no compression; ``sizes`` looks up every file's size.
    ``schema`` (a :class:`Schema`, a dict or a YAML path) overrides the manifest's.

    Raises FileNotFoundError when nothing is there, ValueError for an unreadable manifest or
    schema, TypeError for a source that is not a path or a list of paths.
    """
    how = _Resolver(compression, sniff, sizes)
    if isinstance(source, Source):
        resolved = source
        if how.compression != "auto":
            resolved = dataclasses.replace(source, files=tuple(
                dataclasses.replace(f, compression=how.compression, compression_from="option") for f in source.files))
    elif isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if not isinstance(text, str) or not text:
            raise TypeError(f"source must be a non-empty path, URI or list of them, got {source!r}")
        resolved = _resolve_path(text.rstrip("/") or text, how, committed)
    elif isinstance(source, Iterable) and not isinstance(source, (bytes, Mapping)):
        resolved = _resolve_list(source, how)
    else:
        raise TypeError(f"source must be an output directory, a glob, a file or a list of files; "
                        f"got {type(source).__name__}")
    if schema is not None:
        resolved = _with_schema(resolved, schema)
    return resolved


def _resolve_path(uri: str, how: _Resolver, committed: bool) -> Source:
    if is_glob(uri):
        try:
            matches = fs.glob(uri)
        except ValueError as e:
            raise ValueError(f"source {uri}: {e}") from e
        base = uri.rsplit("/", 1)[0]
        files = [how.file(m, _relative(base, m)) for m in matches if not hidden(m) and not fs.isdir(m)]
        if not files:
            raise FileNotFoundError(f"no files match {uri}" + (
                f" (only {len(matches)} hidden files or directories)" if matches else ""))
        return Source(uri, tuple(files))
    try:
        is_dir = fs.isdir(uri)
    except ValueError as e:
        raise ValueError(f"source {uri}: {e}") from e
    if is_dir:
        return _resolve_dir(uri, how, committed)
    if not fs.exists(uri):
        raise FileNotFoundError(f"{uri}: no such file or directory: the source does not exist "
                                f"(expected an output directory, a glob or a TFRecord file)")
    return Source(uri, (how.file(uri, uri.rsplit("/", 1)[-1]),))


def _resolve_dir(uri: str, how: _Resolver, committed: bool) -> Source:
    entries = fs.ls(uri)
    names = {e.rstrip("/").rsplit("/", 1)[-1] for e in entries}
    success = SUCCESS in names
    if committed and not success:
        raise ValueError(
            f"{uri} is not a committed tfrecord-io output: it has no {SUCCESS} marker (the job is "
            f"still running or failed, or this is not an output directory). Refusing to read a possibly "
            f"partial output; for plain TFRecord files pass a glob such as "
            f"{fs.join(uri, '*.tfrecord*')!r} and schema=")
    if MANIFEST not in names:
        if committed:
            raise FileNotFoundError(f"{uri} has {SUCCESS} but no {MANIFEST}: it was not written by "
                                    f"tfrecord-io; pass a glob of its files and schema= instead")
        files = _partition_files(entries)
        if not files:
            raise FileNotFoundError(f"{uri}: a directory with no record files (and no {MANIFEST})")
        return Source(uri, tuple(how.file(f, _relative(uri, f)) for f in sorted(files)), is_dir=True,
                      success=success)
    manifest = Manifest.read(uri)
    if manifest.raw.get("splits"):
        return _resolve_split_root(uri, manifest, how, committed, success)
    present = set(entries)
    listed, files = set(), []
    for entry in manifest.files:
        file_uri = fs.join(uri, entry.path)
        listed.add(file_uri)
        if committed and file_uri not in present and not fs.exists(file_uri):
            missing = [fs.join(uri, e.path) for e in manifest.files
                       if fs.join(uri, e.path) not in present and not fs.exists(fs.join(uri, e.path))]
            raise FileNotFoundError(f"{uri}: {len(missing)} files listed in {MANIFEST} are missing: "
                                    f"{', '.join(missing[:5])}")
        files.append(how.file(file_uri, entry.path, manifest, entry))
    extra = tuple(_relative(uri, e) for e in entries if not hidden(e) and e not in listed and not fs.isdir(e))
    return Source(uri, tuple(sorted(files, key=lambda f: f.uri)), is_dir=True, manifest=manifest,
                  success=success, extra_entries=extra, schema=manifest.schema, schema_from="manifest")


def _partition_files(entries: list[str]) -> list[str]:
    """The record files of a directory without a manifest: its own, and those of its Hive-style
    partition directories (``cut=Ideal/``, spark-tfrecord's ``partitionBy``), at any depth."""
    files = []
    for e in entries:
        if hidden(e):
            continue
        if not fs.isdir(e):
            files.append(e)
        elif "=" in e.rstrip("/").rsplit("/", 1)[-1]:
            files += _partition_files(fs.ls(e))
    return files


def _resolve_split_root(uri: str, manifest: Manifest, how: _Resolver, committed: bool, success: bool) -> Source:
    """The root of a ``--split`` output: its manifest describes the whole, each split is an output of
    its own.  A reader of one output (the loader) is told to pick a split; the others get every
    split's files (``train/part-...``), with the records each split's manifest counts."""
    names = tuple(manifest.raw["splits"])
    if committed:
        shown = ", ".join(fs.join(uri, n) for n in names)
        raise ValueError(f"{uri} is the root of a split output: its records are in its splits ({shown}); "
                         f"read one of them, e.g. {fs.join(uri, names[0])!r}")
    files = []
    for name in names:
        part = _resolve_dir(fs.join(uri, name), how, committed)
        files += [dataclasses.replace(f, name=f"{name}/{f.name}") for f in part.files]
    return Source(uri, tuple(files), is_dir=True, manifest=manifest, success=success, schema=manifest.schema,
                  schema_from="manifest", splits=names)


def _resolve_list(source: Iterable, how: _Resolver) -> Source:
    items = [os.fspath(s) if isinstance(s, os.PathLike) else s for s in source]
    bad = [s for s in items if not isinstance(s, str) or not s]
    if bad or not items:
        raise TypeError(f"a list source must hold file paths or URIs, got {bad[0]!r}" if bad
                        else "a list source must name at least one file")
    missing, dirs = [], []
    for uri in items:
        if not fs.exists(uri):
            missing.append(uri)
        elif fs.isdir(uri):
            dirs.append(uri)
    if missing:
        raise FileNotFoundError(f"{len(missing)} of the {len(items)} source files do not exist: "
                                f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    if dirs:
        raise IsADirectoryError(f"a list source must name files, not directories: {', '.join(dirs[:5])} "
                                f"(pass an output directory on its own, or a glob)")
    desc = items[0] if len(items) == 1 else f"{len(items)} files ({items[0]}, ...)"
    return Source(desc, tuple(how.file(u, u.rsplit("/", 1)[-1]) for u in items))


def _with_schema(src: Source, schema: Any) -> Source:
    if isinstance(schema, Schema):
        resolved = schema
    elif isinstance(schema, Mapping):
        resolved = Schema.from_dict(schema)
    elif isinstance(schema, (str, os.PathLike)):
        try:
            resolved = load_schema(os.fspath(schema))
        except SchemaError as e:
            raise ValueError(f"schema {os.fspath(schema)}: {e}") from e
    else:
        raise TypeError(f"schema must be a Schema, a dict or a path to a YAML schema, got {type(schema).__name__}")
    if src.manifest is not None and resolved.record_type != src.manifest.record_type:
        raise ValueError(f"the schema is for {resolved.record_type} records but {src.uri} holds "
                         f"{src.manifest.record_type} records")
    return dataclasses.replace(src, schema=resolved, schema_from="option")


class ShardMismatchError(ValueError):
    """A file is not the one its manifest lists: another record count, size or content checksum.

    Raised by every reader of a manifest's files once it has read one to its end (and, for the
    size, before reading it); ``uri`` names the file, ``what`` says which of the three differs.
    """

    def __init__(self, uri: str, what: str, message: str):
        super().__init__(message)
        self.uri, self.what = uri, what

    def __reduce__(self):  # picklable across Spark / Beam worker boundaries
        return (type(self), (self.uri, self.what, str(self)))


def shard_mismatch(file: SourceFile, *, records: int | None = None, nbytes: int | None = None,
                   crc32c: int | None = None) -> ShardMismatchError | None:
    """What differs between ``file``'s manifest entry and what was found in it (None: nothing,
    or no manifest entry); each argument is skipped when None.  Count first (it says most), then
    size, then the content checksum."""
    said = "_manifest.json says"
    if records is not None and file.records is not None and records != file.records:
        return ShardMismatchError(file.uri, "records", f"{file.uri}: holds {records} records, but {said} "
                                  f"{file.records}: the file is not the one the conversion wrote")
    if nbytes is not None and file.bytes is not None and nbytes != file.bytes:
        held = f" ({file.records} records)" if file.records is not None else ""
        return ShardMismatchError(file.uri, "bytes", f"{file.uri}: is {nbytes} bytes, but {said} {file.bytes} bytes{held}: "
                                  f"the file is not the one the conversion wrote")
    if crc32c is not None and file.crc32c is not None and crc32c != file.crc32c:
        return ShardMismatchError(file.uri, "crc32c", f"{file.uri}: its bytes have CRC-32C {format_crc(crc32c)}, but "
                                  f"{said} {format_crc(file.crc32c)}: the file is not the one the conversion wrote "
                                  f"(replaced or altered since)")
    return None


class ShardReader:
    """Reads one file's records while counting them and checksumming its bytes: after
    :meth:`records` has run to its end, ``records_read``, ``bytes_read`` and ``crc32c`` say what
    the file holds, and :meth:`mismatch` how that differs from its manifest entry."""

    def __init__(self, file: SourceFile, *, verify: bool = True, report=None):
        self.file, self.verify, self.report = file, verify, report
        self.records_read = self.bytes_read = self.crc32c = 0
        self.complete = False

    def records(self) -> Iterator[tuple[int, bytes]]:
        """``(offset, data)`` for each record; raises CorruptRecordError naming the file."""
        with fs.open(self.file.uri, "rb") as f:
            reader = ChecksumReader(f, self.report)
            for item in iter_records(reader, name=self.file.uri, compression=self.file.compression,
                                     verify=self.verify):
                self.records_read += 1
                yield item
            reader.drain()  # bytes past the record stream (a gzip tail): in the checksum too
            self.bytes_read, self.crc32c, self.complete = reader.bytes_read, reader.crc32c, True

    def chunks(self, max_records: int, gather: bool = True):
        """The records a chunk at a time, ``(offsets, lengths, data)`` (:func:`iter_record_chunks`: no
        Python object per record); raises CorruptRecordError naming the file, after the chunk of the
        records before the damaged one."""
        with fs.open(self.file.uri, "rb") as f:
            reader = ChecksumReader(f, self.report)
            for chunk in iter_record_chunks(reader, name=self.file.uri, compression=self.file.compression,
                                            verify=self.verify, max_records=max_records, gather=gather):
                self.records_read += len(chunk[0])
                yield chunk
            reader.drain()  # bytes past the record stream (a gzip tail): in the checksum too
            self.bytes_read, self.crc32c, self.complete = reader.bytes_read, reader.crc32c, True

    def mismatch(self) -> ShardMismatchError | None:
        """How the file read differs from its manifest entry (None: it does not, or it was not read to its end)."""
        if not self.complete:
            return None
        return shard_mismatch(self.file, records=self.records_read, nbytes=self.bytes_read, crc32c=self.crc32c)


def iter_file_records(file: SourceFile, *, verify: bool = True, report=None,
                      check: bool = True) -> Iterator[tuple[int, bytes]]:
    """``(offset, data)`` for each record of one file; raises CorruptRecordError naming it.
    ``report(n)`` is called with the bytes read, for progress bars.

    ``check``: a file its manifest lists is checked against its entry -- its size before the
    first record, its record count and the CRC-32C of its bytes once the last record is read --
    and a difference raises :class:`ShardMismatchError` (never a warning: its records would be
    someone else's)."""
    yield from _checked(file, check, lambda reader: reader.records(), verify, report)


def iter_file_chunks(file: SourceFile, *, max_records: int, min_records: int = 1024, join_bytes: int = 4 << 20,
                     verify: bool = True, check: bool = True) -> Iterator[tuple[np.ndarray, pa.Array]]:
    """The records of one file a chunk at a time, no Python object per record: ``(offsets,
    records)``, each record's byte offset (int64) and the records as an Arrow ``large_binary``
    array (:func:`~tfrecord_io.core.framing.iter_record_chunks`: at most ``max_records``, about
    one 1 MiB read).  The chunks of consecutive reads are joined (one copy) while they hold fewer
    than ``min_records`` records and ``join_bytes`` bytes, up to ``max_records``: a decoder's work
    per call is spread over enough records, where large ones (SequenceExamples of a few KB) would
    come a few hundred a read.  Checks and errors are :func:`iter_file_records`'s; a damaged record
    raises CorruptRecordError after the chunk of the records before it."""
    from tfrecord_io.core.framing import chunk_records

    held: list[tuple[np.ndarray, pa.Array]] = []
    count = size = 0
    try:
        for offsets, lengths, data in _checked(file, check, lambda reader: reader.chunks(max_records), verify, None):
            if held and count + len(offsets) > max_records:
                yield _joined(held)
                held, count, size = [], 0, 0
            held.append((offsets, chunk_records(lengths, data)))
            count, size = count + len(offsets), size + len(data)
            if count >= min_records or size >= join_bytes:
                yield _joined(held)
                held, count, size = [], 0, 0
    except Exception:  # a damaged record, a file not its manifest's: the records before it first
        if held:
            yield _joined(held)
        raise
    if held:
        yield _joined(held)


def _joined(held: list[tuple[np.ndarray, pa.Array]]) -> tuple[np.ndarray, pa.Array]:
    if len(held) == 1:
        return held[0]
    return np.concatenate([o for o, _ in held]), pa.concat_arrays([r for _, r in held])


def _checked(file: SourceFile, check: bool, read, verify: bool, report) -> Iterator:
    """What ``read(ShardReader)`` yields, the file checked against its manifest entry before and
    after (:func:`iter_file_records`)."""
    if check and file.bytes is not None:
        problem = shard_mismatch(file, nbytes=file.size if file.size is not None else fs.size(file.uri))
        if problem is not None:
            raise problem
    reader = ShardReader(file, verify=verify, report=report)
    yield from read(reader)
    problem = reader.mismatch() if check else None
    if problem is not None:
        raise problem


def infer_files(files: Sequence[tuple[str, str]], *, sample: int = INFER_SAMPLE_RECORDS,
                skip_undecodable: bool = False) -> Inference:
    """What the inference of every reader reads of ``(uri, compression)`` files without a manifest
    (:func:`tfrecord_io.core.record_schema.read_sample`): ``.schema()`` is the schema ``spark.read``
    and ``read_batches`` read them with, ``.describe()`` what ``tfrecord-io inspect`` shows."""
    compressions = dict(files)

    def records_of(uri: str):
        with fs.open(uri, "rb") as f:
            yield from iter_records(f, name=uri, compression=compressions[uri])

    return read_sample([uri for uri, _ in files], records_of, sample=sample, skip_undecodable=skip_undecodable)


def infer_files_schema(files: Sequence[tuple[str, str]]) -> Schema:
    """The schema of ``(uri, compression)`` files without a manifest: the one inference of every
    reader (:func:`infer_files`); its notes are logged as warnings."""
    schema, notes = infer_files(files).schema()
    for note in notes:
        log.warning("inferring the schema of %s: %s", files[0][0] if len(files) == 1 else f"{len(files)} files", note)
    return schema
