"""Record indexes: per TFRecord file, how many records it holds and where each one starts.

Two homes, one content (each record's data length, in file order):

* a converter's output carries them in its ``_manifest.json`` (field ``index``: per shard, the
  lengths as base64 of zlib of uint32 little-endian, :func:`encode_lengths`), committed exactly
  once with the manifest.  :func:`tfrecord_io.storage.output.write_shard` writes each shard's
  index beside it in the task attempt's directory, from the framing pass itself (the framing
  knows every record's length anyway), and the commit folds the winning attempts' indexes into
  the manifest; the output directory holds no more files than before.  Compressed, the lengths
  of the demo data take 0.39 bytes per record (40 MB of manifest for 100 million records);
* files that others wrote (TensorFlow, Beam, TFX, spark-tfrecord) get ``_index/<file name>.idx``
  beside them from ``tfrecord-io index PATH``, in one streamed read (:func:`build_index`), and
  DALI's text index with ``--format dali``.  Names starting with ``_`` are not data to any
  reader, so an index is never taken for records.

Readers use it to read a record range of a file without walking it (byte-range splits of a
file between input pipelines, a global shuffle reading records by offset), and the loader to
check each record's length field against it before TensorFlow allocates it.

Sidecar file format (``.idx``; every integer little-endian)::

    8 bytes        magic  b"TFRIDX\\x00\\x01"
    4 x n bytes    uint32 data length of each record, in file order
    40 bytes       footer:
        uint64     n, the records
        uint64     the uncompressed stream's size: sum(lengths) + 16 n
        uint64     the indexed file's size (for gzip / zlib: the compressed size)
        uint32     compression: 0 none, 1 gzip, 2 zlib
        uint32     masked CRC-32C of the lengths section (as TFRecord CRCs are masked)
        8 bytes    the magic again (a truncated index is refused)

Record ``i`` starts at byte ``offsets[i] = sum(lengths[:i]) + 16 i`` of the uncompressed
stream, its data at ``offsets[i] + 12``.  The footer comes last so that the index streams out
as the file is written or walked, in bounded memory.  Lengths of 4 GiB or more cannot be
indexed (a protobuf is at most 2 GiB).

What an offset means for a compressed file: a position in the *uncompressed* stream, which is
what TensorFlow's and our readers report in errors and what ``TFRecordDatasetV2``'s
``byte_offsets`` take (it reaches them by decompressing from the start).  A gzip or zlib
stream cannot be entered in the middle, so these offsets give no ranged reads of a compressed
file; they still give record counts, lengths and the stream's size (the checks), and every
record's start for readers that decompress anyway.  The loader therefore splits and globally
shuffles uncompressed files by byte ranges, and reads compressed ones from their start.

DALI's index (``tfrecord2idx``): one text line ``"<offset> <size>\\n"`` per record, ``size``
the framed size (``length + 16``); DALI reads uncompressed files only, so only those get one.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterable

import google_crc32c
import numpy as np

from tfrecord_io.core.framing import (RECORD_OVERHEAD, iter_record_lengths, mask_crc, masked_crc32c,
                                      normalize_compression)
from tfrecord_io.storage import fs

__all__ = ["DALI_DIR", "INDEX_DIR", "INDEX_SUFFIX", "MANIFEST_INDEX_VERSION", "DaliIndexWriter", "IndexWriter",
           "RecordIndex", "build_index", "dali_index_uri", "decode_lengths", "encode_lengths", "index_uri",
           "load_index", "manifest_index", "read_index"]

INDEX_DIR = "_index"
INDEX_SUFFIX = ".idx"
#: DALI's text indexes go to ``_index/dali/<file name>.idx`` by default.
DALI_DIR = "dali"
MAGIC = b"TFRIDX\x00\x01"
_FOOTER = struct.Struct("<QQQII8s")
_COMPRESSION_CODES = {"none": 0, "gzip": 1, "zlib": 2}
_MAX_LENGTH = (1 << 32) - 1
#: The manifest's ``index`` field: ``{"version": 1, "lengths": {shard path: encode_lengths(...)}}``.
MANIFEST_INDEX_VERSION = 1


def _split(uri: str) -> tuple[str, str]:
    parent, _, name = uri.rstrip("/").rpartition("/")
    return parent, name


def index_uri(file_uri: str) -> str:
    """Where the index of ``file_uri`` lives: ``<its directory>/_index/<its name>.idx``."""
    parent, name = _split(file_uri)
    return fs.join(parent, INDEX_DIR, name + INDEX_SUFFIX) if parent else f"{INDEX_DIR}/{name}{INDEX_SUFFIX}"


def dali_index_uri(file_uri: str, output_dir: str | None = None) -> str:
    """Where ``tfrecord-io index --format dali`` writes DALI's index of ``file_uri``:
    ``<output_dir>/<name>.idx``, by default ``<its directory>/_index/dali/<name>.idx``."""
    parent, name = _split(file_uri)
    if output_dir is None:
        output_dir = fs.join(parent, INDEX_DIR, DALI_DIR) if parent else f"{INDEX_DIR}/{DALI_DIR}"
    return fs.join(output_dir, name + INDEX_SUFFIX)


class IndexWriter:
    """Writes a record index onto a binary file object as the records go by (bounded memory).

    ``add(lengths)`` for each batch of records (data lengths, in file order), then
    ``finish(file_bytes, compression)`` once the indexed file is complete.  The file object is
    neither flushed nor closed here.
    """

    def __init__(self, fileobj: BinaryIO, name: str = "<index>"):
        self._f, self.name = fileobj, name
        self._f.write(MAGIC)
        self.records = 0
        self.data_bytes = 0
        self._crc = 0
        self.finished = False

    def add(self, lengths: Any) -> None:
        lengths = np.asarray(lengths, dtype=np.int64)
        if not lengths.size:
            return
        if self.finished:
            raise ValueError(f"{self.name}: add() after finish()")
        if int(lengths.max()) > _MAX_LENGTH:
            raise ValueError(f"{self.name}: a record of {int(lengths.max())} bytes: records of 4 GiB or more "
                             f"cannot be indexed")
        raw = lengths.astype("<u4").tobytes()
        self._crc = google_crc32c.extend(self._crc, raw)
        self._f.write(raw)
        self.records += int(lengths.size)
        self.data_bytes += int(lengths.sum())

    def finish(self, file_bytes: int, compression: str) -> None:
        comp = normalize_compression(compression)
        self._f.write(_FOOTER.pack(self.records, self.data_bytes + RECORD_OVERHEAD * self.records, int(file_bytes),
                                   _COMPRESSION_CODES[comp], mask_crc(self._crc), MAGIC))
        self.finished = True


class DaliIndexWriter:
    """Writes DALI's ``tfrecord2idx`` text index (``"<offset> <size>\\n"`` per record) as lengths go by."""

    def __init__(self, fileobj: BinaryIO):
        self._f = fileobj
        self._next = 0  # offset of the next record

    def add(self, lengths: Any) -> None:
        sizes = np.asarray(lengths, dtype=np.int64) + RECORD_OVERHEAD
        if not sizes.size:
            return
        ends = np.cumsum(sizes) + self._next
        starts = ends - sizes
        self._f.write("".join(f"{o} {s}\n" for o, s in zip(starts.tolist(), sizes.tolist())).encode("ascii"))
        self._next = int(ends[-1])


@dataclass(frozen=True, eq=False)
class RecordIndex:
    """A file's record index, read back (:func:`read_index`).

    ``lengths``: each record's data length (read-only uint32 array); ``file_bytes``: the size of
    the file it was made for; ``compression``: that file's.  ``offsets`` (int64, one per record)
    are positions in the uncompressed stream (see the module doc).
    """

    uri: str
    lengths: np.ndarray
    file_bytes: int
    compression: str
    crc: int = field(repr=False, default=0)

    @property
    def records(self) -> int:
        return int(self.lengths.size)

    @property
    def stream_bytes(self) -> int:
        return int(self.lengths.sum(dtype=np.int64)) + RECORD_OVERHEAD * self.records

    @functools.cached_property
    def offsets(self) -> np.ndarray:
        out = np.empty(self.records, dtype=np.int64)
        if self.records:
            out[0] = 0
            np.cumsum(self.lengths[:-1].astype(np.int64) + RECORD_OVERHEAD, out=out[1:])
        out.setflags(write=False)
        return out

    def matches(self, file_bytes: int, compression: str) -> str | None:
        """None when this index fits a file of ``file_bytes`` bytes and ``compression``; else why not."""
        if normalize_compression(compression) != self.compression:
            return f"it indexes a {self.compression} file, the file is {normalize_compression(compression)}"
        if file_bytes != self.file_bytes:
            return f"it indexes a file of {self.file_bytes} bytes, the file has {file_bytes}"
        if self.compression == "none" and self.stream_bytes != file_bytes:
            return f"its records add up to {self.stream_bytes} bytes, the file has {file_bytes}"
        return None


def parse_index(data: bytes, uri: str) -> RecordIndex:
    """A :class:`RecordIndex` from the bytes of an index file (ValueError naming ``uri`` if they are not one)."""
    n_lengths = len(data) - len(MAGIC) - _FOOTER.size
    if n_lengths < 0 or data[:len(MAGIC)] != MAGIC or n_lengths % 4:
        raise ValueError(f"{uri}: not a tfrecord-io record index (bad magic or size {len(data)})")
    records, stream_bytes, file_bytes, code, crc, magic = _FOOTER.unpack_from(data, len(data) - _FOOTER.size)
    if magic != MAGIC or records * 4 != n_lengths:
        raise ValueError(f"{uri}: a truncated or damaged record index ({len(data)} bytes for {records} records)")
    raw = data[len(MAGIC):len(MAGIC) + n_lengths]
    if masked_crc32c(raw) != crc:
        raise ValueError(f"{uri}: record index CRC mismatch (the index is damaged)")
    compression = {v: k for k, v in _COMPRESSION_CODES.items()}.get(code)
    if compression is None:
        raise ValueError(f"{uri}: unknown compression code {code} in the record index")
    lengths = np.frombuffer(raw, dtype="<u4")
    index = RecordIndex(uri, lengths, int(file_bytes), compression, crc)
    if index.stream_bytes != stream_bytes:
        raise ValueError(f"{uri}: the record index's lengths add up to {index.stream_bytes} bytes, its footer "
                         f"says {stream_bytes}")
    return index


def encode_lengths(lengths: Any) -> str:
    """Record lengths as the manifest holds them: base64 (ASCII) of zlib of uint32 little-endian.

    zlib at level 1: the commit encodes every shard's lengths in the driver, after the last task,
    so this is time the whole job waits.  On 500,000 lengths of ~300 bytes level 1 takes 11 ms
    for 405 KB, level 6 83 ms for 324 KB (2026-12-05); any level decodes the same."""
    import base64
    import zlib

    raw = np.asarray(lengths, dtype=np.int64)
    if raw.size and int(raw.max()) > _MAX_LENGTH:
        raise ValueError(f"a record of {int(raw.max())} bytes: records of 4 GiB or more cannot be indexed")
    return base64.b64encode(zlib.compress(raw.astype("<u4").tobytes(), 1)).decode("ascii")


def decode_lengths(text: str, name: str) -> np.ndarray:
    """The lengths :func:`encode_lengths` encoded (ValueError naming ``name`` for anything else)."""
    import base64
    import binascii
    import zlib

    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, zlib.error, UnicodeEncodeError, AttributeError) as e:
        raise ValueError(f"{name}: not an encoded record index ({e})") from e
    if len(raw) % 4:
        raise ValueError(f"{name}: an encoded record index of {len(raw)} bytes (not uint32 lengths)")
    return np.frombuffer(raw, dtype="<u4")


def manifest_index(raw_manifest: Any, path: str, file_bytes: int | None, compression: str,
                   name: str) -> RecordIndex | None:
    """The index of shard ``path`` that a manifest holds (None: the manifest has none for it).

    ``file_bytes``: the shard's size as the manifest records it; ``name`` labels errors (the
    manifest's URI).  ValueError for an index field that is not one.
    """
    field_ = raw_manifest.get("index") if hasattr(raw_manifest, "get") else None
    if not field_:
        return None
    if not isinstance(field_, dict) or field_.get("version") != MANIFEST_INDEX_VERSION \
            or not isinstance(field_.get("lengths"), dict):
        raise ValueError(f"{name}: its 'index' field is not a version-{MANIFEST_INDEX_VERSION} record index")
    text = field_["lengths"].get(path)
    if text is None:
        return None
    lengths = decode_lengths(text, f"{name} (index of {path})")
    lengths.setflags(write=False)
    return RecordIndex(f"{name}#index/{path}", lengths, -1 if file_bytes is None else int(file_bytes),
                       normalize_compression(compression))


def read_index(uri: str) -> RecordIndex:
    """The index file at ``uri`` (FileNotFoundError when absent, ValueError when it is not one)."""
    with fs.open(uri, "rb") as f:
        data = f.read()
    return parse_index(data, uri)


def load_index(file_uri: str, compression: str, size: int | None = None, *,
               manifest: RecordIndex | None = None) -> RecordIndex | None:
    """The index of a record file -- ``manifest`` (what its manifest holds, :func:`manifest_index`),
    else its ``_index/<name>.idx`` -- or None when it has none.

    ``size``: the file's size (looked up when not given).  ValueError when the index is not one,
    or is not for this file as it is now (its size or compression differ; a sidecar: rebuild it
    with ``tfrecord-io index --overwrite``).
    """
    index = manifest
    if index is None:
        try:
            index = read_index(index_uri(file_uri))
        except FileNotFoundError:
            return None
    size = fs.size(file_uri) if size is None else size
    if manifest is not None and index.file_bytes < 0:  # the manifest did not record the size
        index = RecordIndex(index.uri, index.lengths, size, index.compression)
    why = index.matches(size, compression)
    if why is not None:
        fix = "" if manifest is not None else " (rebuild it: tfrecord-io index --overwrite)"
        raise ValueError(f"{index.uri} is not the index of {file_uri} as it is now: {why}{fix}")
    return index


@dataclass(frozen=True)
class Built:
    """What :func:`build_index` wrote for one file."""

    file: str
    records: int
    written: tuple[str, ...]


def _replace(uri: str, overwrite: bool) -> None:
    if fs.exists(uri):
        if not overwrite:
            raise FileExistsError(f"{uri} exists; pass --overwrite to rebuild it")
        fs.delete(uri)


def build_index(file_uri: str, compression: str, *, formats: Iterable[str] = ("tfrecord-io",),
                dali_dir: str | None = None, overwrite: bool = False) -> Built:
    """Index one record file in one streamed read (headers only: memory stays at one read buffer
    whatever the file's size; length CRCs checked) and write its index files.

    ``formats``: ``"tfrecord-io"`` (``_index/<name>.idx``, what the loader reads) and/or ``"dali"``
    (DALI's text index, :func:`dali_index_uri`; uncompressed files only).  Each is written
    under a temporary name and renamed into place, so a failed run leaves no partial index.
    Raises CorruptRecordError (naming the file and offset) for a damaged file, FileExistsError
    for an existing index without ``overwrite``.
    """
    formats = tuple(formats)
    comp = normalize_compression(compression)
    unknown = set(formats) - {"tfrecord-io", "dali"}
    if unknown or not formats:
        raise ValueError(f"index formats are 'tfrecord-io' and 'dali', got {sorted(unknown) or 'none'}")
    if "dali" in formats and comp != "none":
        raise ValueError(f"{file_uri}: DALI reads uncompressed TFRecord files only; this one is {comp}")
    targets = []
    if "tfrecord-io" in formats:
        targets.append(("tfrecord-io", index_uri(file_uri)))
    if "dali" in formats:
        targets.append(("dali", dali_index_uri(file_uri, dali_dir)))
    for _, uri in targets:
        _replace(uri, overwrite)
    parts = [(kind, uri, uri + ".part") for kind, uri in targets]
    handles, writers = [], []
    try:
        for kind, _, part in parts:
            handles.append(fs.open(part, "wb"))
            writers.append(IndexWriter(handles[-1], part) if kind == "tfrecord-io" else DaliIndexWriter(handles[-1]))
        records = 0
        with fs.open(file_uri, "rb") as src:
            for lengths in iter_record_lengths(src, name=file_uri, compression=comp):
                records += int(lengths.size)
                for w in writers:
                    w.add(lengths)
            file_bytes = fs.size(file_uri)
        for w in writers:
            if isinstance(w, IndexWriter):
                w.finish(file_bytes, comp)
        for h in handles:
            h.close()
        for _, uri, part in parts:
            fs.rename(part, uri)
    except BaseException:
        for h in handles:
            h.close()
        for _, _, part in parts:
            if fs.exists(part):
                fs.delete(part)
        raise
    return Built(file_uri, records, tuple(uri for _, uri in targets))
