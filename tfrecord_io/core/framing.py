"""TFRecord framing: records in and out of any binary file object.

A TFRecord file is a plain concatenation of records, each framed as::

    uint64  length                      little-endian, number of data bytes
    uint32  masked_crc32c(length)       CRC of the 8 length bytes above
    byte    data[length]
    uint32  masked_crc32c(data)

so every record costs ``len(data) + 16`` bytes on disk: 8 (length) + 4 (CRC of
the length) + 4 (CRC of the data).  All integers are little-endian.  There is
no file header, no index and no padding: an empty file holds zero records.

The checksum is CRC-32C (the Castagnoli polynomial, 0x1EDC6F41; 0x82F63B78 in
the bit-reversed form that byte-at-a-time table implementations use), the same
CRC that iSCSI, ext4 and SSE4.2's ``crc32`` instruction compute.  The stored
value is not the CRC itself but a *masked* CRC, a scheme TensorFlow inherited
from LevelDB::

    masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8     (mod 2**32)

i.e. rotate right by 15 bits, then add a constant.  The motivation (from
LevelDB's ``crc32c.h``) is that computing the CRC of a string that itself
contains embedded CRCs is problematic: the CRC of any message followed by its
own little-endian CRC is one fixed constant (0x48674bc7 for CRC-32C), so a CRC
taken over data plus stored CRCs would lose information.  Masking breaks that
algebraic relation.  0xa282ead8 is simply LevelDB's ``kMaskDelta``, an
arbitrary constant; there is nothing deeper to it.

Compression (``"gzip"`` / ``"zlib"``) applies to the whole stream of framed
records, exactly as TensorFlow's ``TFRecordOptions(compression_type=...)``
does: GZIP is a deflate stream in a gzip wrapper (RFC 1952), ZLIB one in a zlib
wrapper (RFC 1950).  Offsets reported by the readers are offsets in the
*uncompressed* stream.

Writing is the hot path (millions of small serialized Examples), so
:func:`frame_records` frames a whole batch at once: the 8-byte length CRCs are
computed in numpy with a slicing-by-8 table CRC (eight table lookups over the
whole batch; four when every length is under 4 GiB), the data CRCs with one ``google_crc32c`` call per record, and
headers, payloads and footers are assembled with numpy / Arrow buffer
operations instead of per-record Python byte juggling.  Reading streams record
by record with buffered reads and bounded memory.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfrecord_io.core import checksum, native

__all__ = [
    "DEFAULT_COMPRESSION_LEVEL",
    "CorruptRecordError",
    "FramedBatch",
    "chunk_records",
    "check_compression_level",
    "TFRecordWriter",
    "compression_from_path",
    "extension_for",
    "frame_records",
    "iter_record_chunks",
    "iter_record_lengths",
    "iter_records",
    "mask_crc",
    "masked_crc32c",
    "normalize_compression",
    "read_records",
    "record_chunks",
]

# --------------------------------------------------------------------------
# Format constants
# --------------------------------------------------------------------------

#: Bytes before the data: uint64 length + uint32 masked CRC of the length.
HEADER_SIZE = 12
#: Bytes after the data: uint32 masked CRC of the data.
FOOTER_SIZE = 4
#: Framing overhead of one record: 8 (length) + 4 (length CRC) + 4 (data CRC).
RECORD_OVERHEAD = HEADER_SIZE + FOOTER_SIZE

#: LevelDB's kMaskDelta, added after rotating the CRC right by 15 bits.
_MASK_DELTA = 0xA282EAD8
#: CRC-32C (Castagnoli) polynomial, bit-reversed ("reflected") form.
_CRC32C_POLY_REFLECTED = 0x82F63B78

_HEADER = struct.Struct("<QI")  # length, masked CRC of the length
_LENGTH = struct.Struct("<Q")
_U32 = struct.Struct("<I")

_crc32c_value = google_crc32c.value  # C implementation; only accepts bytes


def mask_crc(crc: int) -> int:
    """Rotate right by 15 bits and add LevelDB's mask delta, mod 2**32."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """Masked CRC-32C of ``data``, as stored in TFRecord headers and footers."""
    if type(data) is not bytes:  # google_crc32c rejects memoryview/bytearray
        data = memoryview(data).tobytes()
    return mask_crc(_crc32c_value(data))


def _check_length_crc(buf: bytes, pos: int, length: int, stored: int, cache: dict[int, int], name: str,
                      base: int) -> None:
    """Check the masked CRC of the length field at ``buf[pos:pos + 8]`` (``length``) against
    ``stored``; ``cache`` keeps the CRCs of lengths already seen (lengths repeat a lot)."""
    got = mask_crc(_crc32c_value(buf[pos:pos + 8]))
    if len(cache) < 4096:
        cache[length] = got
    if got != stored:
        raise _crc_error(name, base + pos, "length CRC", length, stored, got)


def _crc_error(name: str, offset: int, check: str, length: int, stored: int, got: int) -> "CorruptRecordError":
    """The error of a failed length or data CRC (one wording for the numpy and the compiled walk)."""
    what = f"for length field {length}" if check == "length CRC" else f"over {length} data bytes"
    return CorruptRecordError(name, offset, check,
                              f"expected masked CRC 0x{stored:08x} (stored), got 0x{got:08x} (computed) {what}")


# --------------------------------------------------------------------------
# Vectorized CRC of the 8-byte length fields
# --------------------------------------------------------------------------


def _make_slicing_by_8_tables() -> np.ndarray:
    """Tables ``T[k][b]``: CRC register after feeding byte ``b`` then ``k`` zero bytes.

    ``T[0]`` is the classic byte-at-a-time table of the reflected CRC-32C.
    ``T[k]`` extends ``T[k-1]`` by one zero byte.  Because the CRC register
    update is linear over GF(2), the CRC of an 8-byte block is the XOR of one
    lookup per byte: byte ``i`` of the block is followed by ``7 - i`` more
    bytes, so it is looked up in ``T[7 - i]`` (the "slicing-by-8" scheme).
    """
    t0 = np.empty(256, dtype=np.uint32)
    for b in range(256):
        crc = b
        for _ in range(8):
            crc = (crc >> 1) ^ (_CRC32C_POLY_REFLECTED if crc & 1 else 0)
        t0[b] = crc
    tables = np.empty((8, 256), dtype=np.uint32)
    tables[0] = t0
    for k in range(1, 8):
        prev = tables[k - 1]
        tables[k] = (prev >> np.uint32(8)) ^ t0[prev & np.uint32(0xFF)]
    return tables


_T8 = _make_slicing_by_8_tables()


def _mask_array(crc: np.ndarray) -> np.ndarray:
    """Vectorized :func:`mask_crc` over a uint32 array (uint32 arithmetic wraps)."""
    crc = crc.astype(np.uint32, copy=False)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)


def _masked_length_crcs(lengths: np.ndarray) -> np.ndarray:
    """Masked CRC-32C of each length encoded as 8 little-endian bytes.

    CRC-32C starts with the register at 0xFFFFFFFF and inverts it at the end.
    Pre-loading the register is the same as XOR-ing 0xFF into the first four
    input bytes, hence the ``^ 0xFF`` on bytes 0..3 below.
    """
    b = np.ascontiguousarray(lengths, dtype="<u8").view(np.uint8).reshape(-1, 8)
    t = _T8
    ff = np.uint8(0xFF)
    crc = t[7][b[:, 0] ^ ff]
    crc ^= t[6][b[:, 1] ^ ff]
    crc ^= t[5][b[:, 2] ^ ff]
    crc ^= t[4][b[:, 3] ^ ff]
    # Bytes 4..7 are zero for any length below 4 GiB, and T[k][0] == 0 (the
    # tables hold the register contribution of a byte, which is linear), so
    # their four lookups only matter for larger lengths.
    if b.shape[0] and int(lengths.max()) >> 32:
        crc ^= t[3][b[:, 4]]
        crc ^= t[2][b[:, 5]]
        crc ^= t[1][b[:, 6]]
        crc ^= t[0][b[:, 7]]
    crc ^= np.uint32(0xFFFFFFFF)
    return _mask_array(crc)


def _frame_one(data: bytes) -> tuple[bytes, bytes]:
    """(header, footer) of one record; ``data`` must be ``bytes``."""
    length = _LENGTH.pack(len(data))
    header = length + _U32.pack(mask_crc(_crc32c_value(length)))
    return header, _U32.pack(mask_crc(_crc32c_value(data)))


# --------------------------------------------------------------------------
# Batch framing (the write hot path)
# --------------------------------------------------------------------------

# Records framed per step.  Keeps the temporary per-record ``bytes`` objects
# and the numpy scratch arrays cache-sized, lets the allocator recycle them
# between steps, and bounds the extra memory a batch needs.
_CHUNK_RECORDS = 1 << 14
# ... and payload bytes per step, so that steps of large records stay bounded.
_CHUNK_BYTES = 8 << 20
_INT32_MAX = 2**31 - 1

_HEADER_DTYPE = np.dtype([("length", "<u8"), ("crc", "<u4")])  # 12 bytes, packed


class _Scratch:
    """A uint8 buffer reused from one chunk to the next (no fresh pages per chunk)."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = np.empty(0, dtype=np.uint8)

    def take(self, nbytes: int) -> np.ndarray:
        if self.buf.size < nbytes:
            self.buf = np.empty(nbytes, dtype=np.uint8)
        return self.buf[:nbytes]


def _frame_chunk(lengths: np.ndarray, data_crcs: np.ndarray, payload: np.ndarray,
                 arrow: pa.Array | None, scratch: _Scratch) -> Any:
    """Frame one chunk of ``n >= 1`` records; returns a C-contiguous buffer.

    ``lengths`` (int64) and ``data_crcs`` (unmasked uint32) describe the
    records, ``payload`` (uint8) is their data concatenated.  ``arrow``, if
    given, is the same records as a Binary/LargeBinary array without nulls.
    The result may live in ``scratch`` and is only valid until its next use.
    """
    n = lengths.size
    footer = _mask_array(data_crcs).astype("<u4", copy=False)
    length0 = int(lengths[0])

    if n == 1 or not (lengths != length0).any():
        # All records the same length: the output is an n x (length + 16)
        # matrix whose header columns are one repeated row, so three strided
        # 2-D copies place everything.
        header = np.empty(1, dtype=_HEADER_DTYPE)
        header["length"] = length0
        header["crc"] = _masked_length_crcs(lengths[:1])
        width = length0 + RECORD_OVERHEAD
        out = scratch.take(n * width).reshape(n, width)
        out[:, :HEADER_SIZE] = header.view(np.uint8)
        out[:, HEADER_SIZE:HEADER_SIZE + length0] = payload.reshape(n, length0)
        out[:, HEADER_SIZE + length0:] = footer.view(np.uint8).reshape(n, FOOTER_SIZE)
        return out

    # Headers: a packed (uint64 length, uint32 masked CRC) struct per record;
    # their raw bytes are exactly the 12-byte headers, back to back.
    header = np.empty(n, dtype=_HEADER_DTYPE)
    header["length"] = lengths
    header["crc"] = _masked_length_crcs(lengths)

    # Mixed lengths: Arrow's element-wise binary join writes, for every i,
    # header[i] + data[i] + footer[i] into one values buffer (one C++ pass over
    # the offsets), and that buffer is exactly the framed stream.  Offsets
    # are 32-bit unless the input is large_binary or the chunk could overflow.
    total = int(payload.size) + RECORD_OVERHEAD * n
    large = total > _INT32_MAX or (arrow is not None and pa.types.is_large_binary(arrow.type))
    typ = pa.large_binary() if large else pa.binary()
    odt = np.int64 if large else np.int32
    if arrow is None:
        offsets = np.zeros(n + 1, dtype=odt)
        np.cumsum(lengths, out=offsets[1:])
        arrow = pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(payload)])
    elif arrow.type != typ:
        arrow = arrow.cast(typ)  # binary -> large_binary: widens the offsets only

    def fixed_width(values: np.ndarray, width: int) -> pa.Array:
        offsets = np.arange(0, width * n + 1, width, dtype=odt)
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(values)])

    joined = pc.binary_join_element_wise(fixed_width(header, HEADER_SIZE), arrow,
                                         fixed_width(footer, FOOTER_SIZE), pa.scalar(b"", typ))
    joff = np.frombuffer(joined.buffers()[1], dtype=odt, count=n + 1,
                         offset=joined.offset * np.dtype(odt).itemsize)
    start, end = int(joff[0]), int(joff[-1])
    if end - start != total:  # pragma: no cover - would be an Arrow bug
        raise AssertionError(f"framed {end - start} bytes, expected {total}")
    return joined.buffers()[2][start:end]


def _chunk_bounds(offsets: np.ndarray) -> Iterator[tuple[int, int]]:
    """Split records [0, n) into chunks of bounded record count and byte size."""
    n = offsets.size - 1
    i = 0
    while i < n:
        j = min(n, i + _CHUNK_RECORDS)
        if offsets[j] - offsets[i] > _CHUNK_BYTES:
            j = int(np.searchsorted(offsets, offsets[i] + _CHUNK_BYTES, side="right")) - 1
            j = max(j, i + 1)
        yield i, j
        i = j


def _first_null(arr: pa.Array) -> int:
    return int(np.argmax(arr.is_null().to_numpy(zero_copy_only=False)))


def _null_error(index: int) -> ValueError:
    return ValueError(f"frame_records: record {index} is null; TFRecords cannot hold nulls")


def _frame_arrow(arr: pa.Array, scratch: _Scratch) -> Iterator[Any]:
    n = len(arr)
    large = pa.types.is_large_binary(arr.type)
    odt = np.int64 if large else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=odt, count=n + 1,
                            offset=arr.offset * np.dtype(odt).itemsize).astype(np.int64)
    values = arr.buffers()[2]
    data = (np.frombuffer(values, dtype=np.uint8) if values is not None and values.size
            else np.empty(0, dtype=np.uint8))
    core = native.active()
    for i, j in _chunk_bounds(offsets):
        if core is not None:  # the compiled core: lengths, CRCs and the framed bytes in one pass
            yield np.diff(offsets[i:j + 1]), core.frame(offsets[i:j + 1], data)
            continue
        chunk = arr.slice(i, j - i)
        # One C call per record, on a ``bytes`` object (google_crc32c accepts
        # nothing else); to_pylist makes those objects in C++.
        crcs = np.fromiter(map(_crc32c_value, chunk.to_pylist()), dtype=np.uint32, count=j - i)
        lengths = np.diff(offsets[i:j + 1])
        yield lengths, _frame_chunk(lengths, crcs, data[offsets[i]:offsets[j]], chunk, scratch)


def _as_bytes_list(records: list) -> list[bytes]:
    """Convert arbitrary bytes-like items to ``bytes``, naming the first bad one."""
    out = []
    for i, rec in enumerate(records):
        if type(rec) is bytes:
            out.append(rec)
            continue
        if rec is None:
            raise ValueError(f"frame_records: record {i} is None; TFRecords cannot hold nulls")
        if isinstance(rec, str):
            raise TypeError(f"frame_records: record {i} is a str; encode it to bytes first")
        try:
            out.append(memoryview(rec).tobytes())
        except TypeError:
            raise TypeError(f"frame_records: record {i} is a {type(rec).__name__}, "
                            "not a bytes-like object") from None
    return out


def _frame_sequence(records: list | tuple, scratch: _Scratch) -> Iterator[Any]:
    n = len(records)
    lengths = np.fromiter(map(len, records), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    core = native.active()
    for i, j in _chunk_bounds(offsets):
        chunk = records[i:j]
        if core is not None:
            yield lengths[i:j], core.frame_list(chunk)
            continue
        crcs = np.fromiter(map(_crc32c_value, chunk), dtype=np.uint32, count=j - i)
        payload = np.frombuffer(b"".join(chunk), dtype=np.uint8)
        yield lengths[i:j], _frame_chunk(lengths[i:j], crcs, payload, None, scratch)


def _prepare(records: Any) -> tuple[int, Iterator[tuple[np.ndarray, Any]]]:
    """Validate ``records`` and return (count, iterator of (lengths, framed buffer) per chunk).

    Every check (types, nulls) happens here, before anything is framed, so a
    writer never writes part of a bad batch.  Each buffer the iterator yields
    is valid only until the next one is requested; ``lengths`` are the data
    lengths of the chunk's records (int64), in order.
    """
    scratch = _Scratch()
    if isinstance(records, (pa.Array, pa.ChunkedArray)):
        chunks = records.chunks if isinstance(records, pa.ChunkedArray) else [records]
        done = 0
        for chunk in chunks:
            if not (pa.types.is_binary(chunk.type) or pa.types.is_large_binary(chunk.type)):
                raise TypeError("frame_records: expected a pyarrow binary or large_binary array, "
                                f"got {chunk.type}")
            if chunk.null_count:
                raise _null_error(done + _first_null(chunk))
            done += len(chunk)
        parts = (part for chunk in chunks if len(chunk) for part in _frame_arrow(chunk, scratch))
        return done, parts
    if isinstance(records, (bytes, bytearray, memoryview, str)):
        raise TypeError("frame_records: expected a sequence of records, got a single "
                        f"{type(records).__name__}; wrap it in a list")
    if not isinstance(records, (list, tuple)):
        records = list(records)
    if not records:
        return 0, iter(())
    if set(map(type, records)) != {bytes}:
        records = _as_bytes_list(records)
    return len(records), _frame_sequence(records, scratch)


class FramedBatch:
    """A batch of records already framed: what :meth:`TFRecordWriter.write_batch` writes as it is.

    ``count`` records; :meth:`parts` yields ``(lengths, buffer)`` per chunk (the records' data
    lengths, int64, and their framed bytes) once.  :func:`tfrecord_io.core.codec.encode_framed`
    makes one straight from an Arrow batch (the compiled core encodes each record into its place
    in the framed stream); :meth:`of` frames records that are already encoded.
    """

    __slots__ = ("count", "_parts")

    def __init__(self, count: int, parts: Iterable[tuple[np.ndarray, Any]]):
        self.count = count
        self._parts: Iterable[tuple[np.ndarray, Any]] | None = parts

    @classmethod
    def of(cls, records: pa.Array | pa.ChunkedArray | Iterable[bytes]) -> "FramedBatch":
        """``records`` framed (checked now, framed a chunk at a time as :meth:`parts` is read)."""
        return cls(*_prepare(records))

    def __len__(self) -> int:
        return self.count

    def parts(self) -> Iterator[tuple[np.ndarray, Any]]:
        """``(lengths, framed bytes)`` per chunk, in order; each buffer is valid until the next is
        asked for.  Once only: a second call raises ValueError."""
        if self._parts is None:
            raise ValueError("FramedBatch.parts: the batch was already written (its parts are read once)")
        parts, self._parts = self._parts, None
        return iter(parts)

    def tobytes(self) -> bytes:
        """The framed stream of the batch (reads :meth:`parts`)."""
        return b"".join(bytes(part) for _, part in self.parts())


def frame_records(records: pa.Array | pa.ChunkedArray | Iterable[bytes]) -> bytes:
    """Frame many records at once; returns the bytes of a TFRecord stream.

    ``records`` is a ``pyarrow`` ``binary`` / ``large_binary`` array (or chunked
    array) without nulls, or a sequence of ``bytes`` (other bytes-like objects
    are accepted, and copied).  The result equals
    ``b"".join(frame(r) for r in records)`` and is byte-identical to what
    ``tf.io.TFRecordWriter`` writes for the same records.

    Raises ValueError naming the index of the first null / None record, and
    TypeError for anything that is not binary.
    """
    _, parts = _prepare(records)
    out = io.BytesIO()  # getvalue() hands over its buffer without a copy
    for _, part in parts:
        out.write(part)
    return out.getvalue()


# --------------------------------------------------------------------------
# Compression helpers
# --------------------------------------------------------------------------

_COMPRESSIONS = {"none": "", "gzip": ".gz", "zlib": ".zlib"}
# zlib ``wbits`` for each container: 16 + 15 = gzip wrapper, 15 = zlib wrapper.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}
#: zlib's level when none is given: 6, as TensorFlow's and Hadoop's gzip writers use.
DEFAULT_COMPRESSION_LEVEL = 6


def check_compression_level(level, what: str = "compression level") -> int:
    """``level`` as an int from 1 (fastest) to 9 (smallest); ValueError naming ``what`` otherwise."""
    try:
        value = int(level)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} must be an integer from 1 to 9, got {level!r}") from e
    if isinstance(level, bool) or not 1 <= value <= 9 or str(value) != str(level).strip():
        raise ValueError(f"{what} must be an integer from 1 (fastest) to 9 (smallest), got {level!r}")
    return value


def normalize_compression(value: str | None) -> str:
    """Canonical compression name: ``"none"``, ``"gzip"`` or ``"zlib"``.

    Accepts None, ``""`` and any capitalization of ``none`` / ``gzip`` / ``zlib``
    (TensorFlow spells them ``""``, ``"GZIP"``, ``"ZLIB"``).
    """
    if value is None:
        return "none"
    if isinstance(value, str):
        key = value.strip().lower() or "none"
        if key in _COMPRESSIONS:
            return key
    raise ValueError(f"unknown TFRecord compression {value!r}: expected None, 'none', 'gzip' or 'zlib'")


def compression_from_path(path: str | os.PathLike) -> str:
    """Compression implied by a file name: ``.gz``/``.gzip`` -> gzip, ``.zlib`` -> zlib, else none."""
    name = os.fspath(path)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    name = name.lower()
    if name.endswith((".gz", ".gzip")):
        return "gzip"
    if name.endswith(".zlib"):
        return "zlib"
    return "none"


def extension_for(compression: str | None) -> str:
    """File-name suffix for a compression: ``""``, ``".gz"`` or ``".zlib"``."""
    return _COMPRESSIONS[normalize_compression(compression)]


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class CorruptRecordError(ValueError):
    """A TFRecord stream failed a check.

    Attributes:
      path: the file (or stream name) being read.
      offset: byte offset of the bad record in the uncompressed stream (for a
        decompression failure, the uncompressed bytes produced before it).
      check: which check failed: ``"length CRC"``, ``"data CRC"``,
        ``"truncated header"``, ``"truncated data"`` or ``"decompression"``.
    """

    def __init__(self, path: str, offset: int, check: str, detail: str):
        self.path = path
        self.offset = offset
        self.check = check
        self.detail = detail
        super().__init__(f"{path}: corrupt TFRecord at byte offset {offset}: {check}: {detail}")

    def __reduce__(self):  # picklable across Spark / Beam worker boundaries
        return (type(self), (self.path, self.offset, self.check, self.detail))


def until_corrupt(records: Iterable, broken: list) -> Iterator:
    """The records of ``records`` before the first corrupt one; its :class:`CorruptRecordError`
    is appended to ``broken`` instead of raised (``yield from``: no Python step per record)."""
    try:
        yield from records
    except CorruptRecordError as e:
        broken.append(e)


def record_chunks(records: Iterable[tuple[int, bytes]], *, max_records: int,
                  max_bytes: int) -> Iterator[tuple[list[int], list[bytes]]]:
    """``records`` (``(offset, data)`` pairs, as the readers give them) in consecutive chunks
    ``(offsets, datas)``, for readers that decode a chunk of records at a time; no chunk is empty.

    A chunk ends at its ``max_records``-th record or at the record that brings it to ``max_bytes``
    bytes, whichever comes first: it holds at most ``max_bytes`` and one record."""
    offsets: list[int] = []
    datas: list[bytes] = []
    size = 0
    for offset, data in records:
        offsets.append(offset)
        datas.append(data)
        size += len(data)
        if len(datas) >= max_records or size >= max_bytes:
            yield offsets, datas
            offsets, datas, size = [], [], 0
    if datas:
        yield offsets, datas


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


class TFRecordWriter:
    """Writes TFRecords to a binary file object (or a path it opens itself).

    ``compression`` is None / ``"none"`` / ``"gzip"`` / ``"zlib"`` (any case);
    it is never guessed from a path (use :func:`compression_from_path` for
    that).  Uncompressed output is byte-identical to ``tf.io.TFRecordWriter``;
    compressed output is readable by ``tf.data.TFRecordDataset`` with
    ``compression_type="GZIP"`` / ``"ZLIB"`` (``compression_level`` is zlib's,
    6 like TensorFlow's default).  Gzip is compressed in 1 MiB blocks on
    ``compression_threads`` threads (:mod:`tfrecord_io.core.gzip_blocks`: still
    one gzip stream); ``compression_threads=1`` compresses serially, on the
    calling thread, as zlib always is.  ``close()`` finishes the compression stream
    and closes the file only if the writer opened it.

    ``records_written`` counts records; ``bytes_written`` counts bytes handed
    to the file, i.e. the compressed size when compressing; ``crc32c`` is the
    CRC-32C of those bytes (:mod:`tfrecord_io.core.checksum`: the content
    checksum a manifest keeps per shard).

    ``index``: an object with ``add(lengths)``, handed the data length of every
    record written (a numpy int64 array per framed chunk, in file order) -- what
    a record index needs (:class:`tfrecord_io.storage.index.IndexWriter`): the
    framing computes the lengths anyway, so recording them costs nothing.
    """

    def __init__(self, fileobj: BinaryIO | str | os.PathLike, compression: str | None = None,
                 *, compression_level: int = DEFAULT_COMPRESSION_LEVEL, compression_threads: int = 2,
                 index: Any = None):
        self.compression = normalize_compression(compression)
        if isinstance(fileobj, (str, bytes, os.PathLike)):
            self.name = os.fsdecode(os.fspath(fileobj))
            self._file = open(fileobj, "wb")
            self._owns_file = True
        else:
            fname = getattr(fileobj, "name", None)
            self.name = fname if isinstance(fname, str) else "<stream>"
            self._file = fileobj
            self._owns_file = False
        self.records_written = 0
        self.bytes_written = 0
        self.crc32c = 0
        self._z = self._pz = None
        if self.compression == "gzip" and compression_threads > 1:
            from tfrecord_io.core.gzip_blocks import ParallelGzip

            self._pz = ParallelGzip(self._write, level=compression_level, threads=compression_threads)
        elif self.compression != "none":
            self._z = zlib.compressobj(compression_level, zlib.DEFLATED, _WBITS[self.compression])
        self.closed = False
        self._index = index
        self._pending_lengths: list[int] = []  # of single write()s, handed to the index in bulk

    # -- internals ---------------------------------------------------------
    def _write(self, data: Any) -> None:
        """Write all of ``data`` to the file (raw files may write only part)."""
        view = memoryview(data).cast("B")
        n = self._file.write(view)
        while n is not None and n < len(view):  # None: a buffered file took it all
            if n <= 0:
                raise OSError(f"{self.name}: file object accepted no bytes (non-blocking file?)")
            view = view[n:]
            n = self._file.write(view)
        self.bytes_written += memoryview(data).nbytes
        self.crc32c = checksum.extend(self.crc32c, data)

    def _emit(self, data: Any) -> None:
        if self._pz is not None:
            self._pz.compress(data)
            return
        if self._z is not None:
            data = self._z.compress(data)
            if not data:
                return
        self._write(data)

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("write to a closed TFRecordWriter")

    # -- public API --------------------------------------------------------
    def write(self, record: bytes) -> None:
        """Append one record."""
        self._check_open()
        if type(record) is not bytes:
            if record is None:
                raise ValueError("TFRecordWriter.write: record is None")
            if isinstance(record, str):
                raise TypeError("TFRecordWriter.write: record is a str; encode it to bytes first")
            record = memoryview(record).tobytes()
        header, footer = _frame_one(record)
        if len(record) < (1 << 16):
            self._emit(b"".join((header, record, footer)))
        else:  # avoid copying large payloads just to concatenate them
            self._emit(header)
            self._emit(record)
            self._emit(footer)
        self.records_written += 1
        if self._index is not None:
            self._pending_lengths.append(len(record))
            if len(self._pending_lengths) >= _CHUNK_RECORDS:
                self._flush_lengths()

    def write_batch(self, records: pa.Array | pa.ChunkedArray | Iterable[bytes] | FramedBatch) -> int:
        """Append many records (see :func:`frame_records`), or a :class:`FramedBatch` as it is;
        returns how many."""
        self._check_open()
        if isinstance(records, FramedBatch):  # checked and encoded already
            count, parts = records.count, records.parts()
        else:
            count, parts = _prepare(records)  # validates everything before writing anything
        if self._index is not None:
            self._flush_lengths()
        for lengths, part in parts:  # chunk by chunk: no batch-sized temporary
            self._emit(part)
            if self._index is not None:
                self._index.add(lengths)
        self.records_written += count
        return count

    def _flush_lengths(self) -> None:
        if self._pending_lengths:
            self._index.add(np.array(self._pending_lengths, dtype=np.int64))
            self._pending_lengths = []

    def flush(self) -> None:
        """Push everything written so far to the file (a sync flush when compressing)."""
        self._check_open()
        if self._pz is not None:
            self._pz.flush()
        if self._z is not None:
            data = self._z.flush(zlib.Z_SYNC_FLUSH)
            if data:
                self._write(data)
        flush = getattr(self._file, "flush", None)
        if flush is not None:
            flush()

    def close(self) -> None:
        """Finish the compression stream, flush, and close the file if we opened it."""
        if self.closed:
            return
        self.closed = True
        try:
            if self._index is not None:
                self._flush_lengths()
            if self._pz is not None:
                self._pz.finish()
            if self._z is not None:
                data = self._z.flush(zlib.Z_FINISH)
                self._z = None
                if data:
                    self._write(data)
            flush = getattr(self._file, "flush", None)
            if flush is not None:
                flush()
        finally:
            if self._owns_file:
                self._file.close()

    def __enter__(self) -> "TFRecordWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------

_READ_SIZE = 1 << 20  # raw bytes per read() call; also the max decompressed chunk


def _raw_chunks(f: Any, name: str) -> Iterator[bytes]:
    read = f.read
    while True:
        chunk = read(_READ_SIZE)
        if not chunk:
            return
        if type(chunk) is not bytes:
            if isinstance(chunk, str):
                raise TypeError(f"{name}: file object is open in text mode; open it with 'rb'")
            chunk = bytes(chunk)
        yield chunk


class _Reads:
    """The raw reads of a file into one buffer used again and again, for the compiled chunk walk,
    which copies out what it keeps (``scan_chunk``'s offsets, lengths and gathered data).  Each
    read lands in the same memory, still in the CPU's cache, instead of a fresh 1 MiB ``bytes``:
    the walk of small records, bound by moving the bytes through the cache, runs 1.1-1.2x faster.

    A chunk (a ``memoryview`` of the buffer) is valid until the next read, unless :meth:`keep` is
    called: then it is the caller's and the next read goes into a new buffer.
    """

    __slots__ = ("_f", "_readinto", "_buf", "_view", "_kept")

    def __init__(self, f: Any):
        self._f, self._readinto = f, f.readinto
        self._buf, self._view, self._kept = None, None, True

    def __iter__(self) -> "_Reads":
        return self

    def _fill(self, view: memoryview) -> int:
        try:
            return self._readinto(view) or 0
        except (NotImplementedError, io.UnsupportedOperation):
            # A raw file object that defines read() alone (io.RawIOBase's readinto is abstract).
            def readinto(v: memoryview, read=self._f.read) -> int:
                data = read(len(v))
                v[:len(data)] = data
                return len(data)

            self._readinto = readinto
            return readinto(view)

    def _own_buffer(self) -> None:
        """A new buffer when the caller kept the last chunk's."""
        if self._kept:
            self._buf = bytearray(_READ_SIZE)
            self._view, self._kept = memoryview(self._buf), False

    def __next__(self) -> memoryview:
        self._own_buffer()
        n = self._fill(self._view)
        if not n:
            raise StopIteration
        return self._view[:n]

    def keep(self) -> None:
        """The chunk last returned stays the caller's: the next read goes into a new buffer."""
        self._kept = True

    def refill(self, chunk: memoryview, pos: int) -> tuple[memoryview, int]:
        """``chunk[pos:]`` moved to the front of the buffer and the next read put after it:
        ``(the new chunk, bytes read)`` -- a record cut by the end of a read is whole again, with
        no Python work per record (0 bytes read at the end of the file: the chunk is then the
        bytes not walked alone)."""
        tail = len(chunk) - pos
        self._own_buffer()
        self._view[:tail] = chunk[pos:]  # overlapping within one buffer: a memmove
        n = self._fill(self._view[tail:])
        return self._view[:tail + n], n


def _inflate(chunks: Iterator[bytes], compression: str, name: str) -> Iterator[bytes]:
    """Decompress a gzip (possibly multi-member) or zlib stream, in bounded chunks."""
    wbits = _WBITS[compression]
    d = zlib.decompressobj(wbits)
    produced = 0  # uncompressed bytes so far
    consumed = 0  # compressed bytes read so far
    started = False

    def fail(detail: str, exc: Exception | None = None) -> CorruptRecordError:
        return CorruptRecordError(name, produced, "decompression",
                                  f"{compression} stream invalid after {consumed} compressed bytes: {detail}")

    for chunk in chunks:
        consumed += len(chunk)
        data = chunk
        while True:
            if d.eof:
                leftover = d.unused_data + data
                if not leftover:
                    break
                if compression != "gzip":
                    raise fail(f"{len(leftover)} bytes of trailing data after the end of the stream")
                d = zlib.decompressobj(wbits)  # gzip allows concatenated members
                data = leftover
            started = True
            try:
                out = d.decompress(data, _READ_SIZE)
            except zlib.error as e:
                raise fail(str(e)) from e
            if out:
                produced += len(out)
                yield out
            if d.eof:
                data = b""
                continue  # loop back: handles unused_data (next gzip member)
            data = d.unconsumed_tail
            if not data and len(out) < _READ_SIZE:
                break  # input used up and output buffer was not full: nothing pending
    if started and not d.eof:
        try:
            out = d.flush()
        except zlib.error as e:  # pragma: no cover - flush rarely raises
            raise fail(str(e)) from e
        if out:
            produced += len(out)
            yield out
        raise fail("stream is truncated (no end-of-stream marker)")


def _fill(chunks: Iterator[bytes], keep: bytes, need: int) -> tuple[bytes, int]:
    """``keep`` plus as many further chunks as it takes to hold ``need`` bytes (fewer at the end)."""
    pieces, avail = [keep], len(keep)
    for chunk in chunks:
        pieces.append(chunk)
        avail += len(chunk)
        if avail >= need:
            break
    return b"".join(pieces), avail


def _record_stream(chunks: Iterator[bytes], name: str, verify: bool,
                   with_offsets: bool) -> Iterator[Any]:
    """Parse framed records out of a stream of byte chunks.

    Yields ``(offset, data)`` if ``with_offsets`` else ``data``.  Works on a
    buffer of whole chunks and only joins bytes when a record straddles chunks,
    so memory stays at about one chunk plus the largest record.
    """
    unpack_header = _HEADER.unpack_from
    unpack_u32 = _U32.unpack_from
    crc = _crc32c_value
    delta = _MASK_DELTA
    # Masked CRC of the length field, by length: lengths repeat a lot.
    length_crcs: dict[int, int] = {}
    core = native.active()
    buf = b""
    pos = 0    # parse position in buf
    base = 0   # stream offset of buf[0]
    while True:
        if core is not None:  # the compiled core reads every record that is whole in buf
            offsets, datas, pos, bad = core.scan_records(buf, pos, verify, base)
            yield from zip(offsets, datas) if with_offsets else datas
            if bad is not None:
                which, offset, length, stored, got = bad
                raise _crc_error(name, offset, ("length CRC", "data CRC")[which], length, stored, got)
        avail = len(buf) - pos
        if avail < HEADER_SIZE:
            base += pos
            buf, avail = _fill(chunks, buf[pos:], HEADER_SIZE)
            pos = 0
            if avail < HEADER_SIZE:
                if avail == 0:
                    return
                raise CorruptRecordError(name, base, "truncated header",
                                         f"expected {HEADER_SIZE} header bytes, got {avail} before end of stream")
        length, length_crc = unpack_header(buf, pos)
        # The length CRC is always checked, even with verify=False: a damaged length
        # would otherwise be trusted and the reader would swallow the rest of the stream.
        if length_crcs.get(length) != length_crc:
            _check_length_crc(buf, pos, length, length_crc, length_crcs, name, base)
        need = HEADER_SIZE + length + FOOTER_SIZE
        if avail < need:
            base += pos
            buf, avail = _fill(chunks, buf[pos:], need)
            pos = 0
            if avail < need:
                if avail < HEADER_SIZE + length:
                    what = f"{length} data bytes, got {avail - HEADER_SIZE}"
                else:
                    what = (f"{FOOTER_SIZE}-byte data CRC after {length} data bytes, "
                            f"got {avail - HEADER_SIZE - length}")
                raise CorruptRecordError(name, base, "truncated data",
                                         f"expected {what} before end of stream")
        start = pos + HEADER_SIZE
        data = buf[start:start + length]
        if verify:
            c = crc(data)
            got = (((c >> 15) | (c << 17)) + delta) & 0xFFFFFFFF
            (data_crc,) = unpack_u32(buf, start + length)
            if got != data_crc:
                raise _crc_error(name, base + pos, "data CRC", length, data_crc, got)
        if with_offsets:
            yield base + pos, data
        else:
            yield data
        pos += need


def _open_stream(fileobj: Any, name: str | None, compression: str, verify: bool,
                 with_offsets: bool) -> Iterator[Any]:
    if isinstance(fileobj, (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(fileobj))
        with open(path, "rb") as f:
            yield from _open_stream(f, name or path, compression, verify, with_offsets)
        return
    if name is None:
        fname = getattr(fileobj, "name", None)
        name = fname if isinstance(fname, str) else "<stream>"
    chunks = _raw_chunks(fileobj, name)
    if compression != "none":
        chunks = _inflate(chunks, compression, name)
    yield from _record_stream(chunks, name, verify, with_offsets)


def iter_records(fileobj: BinaryIO | str | os.PathLike, *, name: str | None = None,
                 compression: str | None = None, verify: bool = True) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, data)`` for each record of a TFRecord stream.

    ``offset`` is the byte offset of the record's header in the uncompressed
    stream.  ``fileobj`` is a binary file object (read with ``read(n)``), or a
    path, which is opened and closed here.  ``name`` labels errors; it
    defaults to the path / the file object's ``name`` / ``"<stream>"``.
    With ``verify`` (the default) both CRCs of every record are checked;
    ``verify=False`` skips the data CRC only; the length CRC is always checked (a damaged
    length would otherwise swallow the rest of the stream), and truncation is an error.
    Raises :class:`CorruptRecordError` on any corruption or truncation.
    """
    compression = normalize_compression(compression)  # fail now, not at the first next()
    return _open_stream(fileobj, name, compression, verify, with_offsets=True)


def read_records(fileobj: BinaryIO | str | os.PathLike, *, name: str | None = None,
                 compression: str | None = None, verify: bool = True) -> Iterator[bytes]:
    """Yield the data of each record of a TFRecord stream (see :func:`iter_records`)."""
    compression = normalize_compression(compression)  # fail now, not at the first next()
    return _open_stream(fileobj, name, compression, verify, with_offsets=False)


def _walk_lengths(chunks: Iterator[bytes], name: str, per: int) -> Iterator[np.ndarray]:
    """The data lengths of the framed records in a stream of byte chunks, ``per`` at a time.

    Only headers are looked at: the data of each record is passed over as the chunks go by,
    never joined or kept, so memory is one chunk whatever the record sizes.
    """
    unpack_header = _HEADER.unpack_from
    length_crcs: dict[int, int] = {}
    core = native.active()
    it = iter(chunks)
    buf, pos, base = b"", 0, 0  # the chunk, the parse position in it, its stream offset
    lengths: list[int] = []
    walked: list[np.ndarray] = []  # the compiled walk's lengths not yet yielded
    count = 0  # of walked
    while True:
        if len(buf) - pos < HEADER_SIZE:
            base += pos
            keep, buf = buf[pos:], b""  # let the old chunk go before the next one is read
            buf, avail = _fill(it, keep, HEADER_SIZE)
            pos = 0
            if avail < HEADER_SIZE:
                if avail:
                    raise CorruptRecordError(name, base, "truncated header",
                                             f"expected {HEADER_SIZE} header bytes, got {avail} before end of stream")
                break
        if core is not None:  # the compiled walk: every header that is whole in buf, up to `per` lengths
            raw, pos, straddles, bad = core.scan_lengths(buf, pos, per - count)
            if raw:
                walked.append(np.frombuffer(raw, dtype="<i8").astype(np.int64, copy=False))
                count += len(walked[-1])
            if bad is not None:
                _, at, length, stored, got = bad
                raise _crc_error(name, base + at, "length CRC", length, stored, got)
            if not straddles:
                if count == per:
                    yield walked[0] if len(walked) == 1 else np.concatenate(walked)
                    walked, count = [], 0
                continue
            (length,) = _LENGTH.unpack_from(buf, pos)  # the record at pos runs past buf: skipped below
        else:
            length, length_crc = unpack_header(buf, pos)
            if length_crcs.get(length) != length_crc:
                _check_length_crc(buf, pos, length, length_crc, length_crcs, name, base)
            lengths.append(length)
        start = base + pos
        pos += HEADER_SIZE
        skip = length + FOOTER_SIZE  # the data and its CRC, passed over
        while skip > len(buf) - pos:
            skip -= len(buf) - pos
            base += len(buf)
            buf = b""
            buf, pos = next(it, b""), 0
            if not buf:
                seen = length + FOOTER_SIZE - skip
                raise CorruptRecordError(name, start, "truncated data",
                                         f"expected {length} data bytes and a {FOOTER_SIZE}-byte data CRC, "
                                         f"got {seen} bytes before end of stream")
        pos += skip
        # Yielded once the record's data is passed over: a length is never handed on for a record the
        # stream cuts short (nor one of 2**63 bytes or more, which no int64 holds and no stream has).
        if len(lengths) == per:
            yield np.array(lengths, dtype=np.int64)
            lengths = []
        if count == per:
            yield walked[0] if len(walked) == 1 else np.concatenate(walked)
            walked, count = [], 0
    if lengths:
        yield np.array(lengths, dtype=np.int64)
    if walked:
        yield walked[0] if len(walked) == 1 else np.concatenate(walked)


def iter_record_lengths(fileobj: BinaryIO | str | os.PathLike, *, name: str | None = None,
                        compression: str | None = None, per: int = 1 << 16) -> Iterator[np.ndarray]:
    """Yield the data length of every record of a TFRecord stream, in int64 arrays of up to ``per``.

    What an index of the file needs, in one streamed read: headers are parsed and each record's
    data passed over without being kept, so memory stays at one read (1 MiB; plus one
    decompressed chunk for gzip/zlib) however large the file or its records -- a multi-GB shard
    or a multi-GB record.  Record ``i`` starts at ``sum(lengths[:i]) + 16 i`` in the
    uncompressed stream.  Length CRCs are checked, data CRCs are not (that is
    :func:`iter_records`' job); a bad length CRC or a truncated stream raises
    :class:`CorruptRecordError`.  ``fileobj`` and ``name`` as for :func:`iter_records`.
    """
    compression = normalize_compression(compression)
    if not isinstance(per, int) or per < 1:
        raise ValueError(f"per must be a positive integer, got {per!r}")

    def stream(f: Any, label: str) -> Iterator[np.ndarray]:
        chunks = _raw_chunks(f, label)
        if compression != "none":
            chunks = _inflate(chunks, compression, label)
        yield from _walk_lengths(chunks, label, per)

    if isinstance(fileobj, (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(fileobj))

        def from_path() -> Iterator[np.ndarray]:
            with open(path, "rb") as f:
                yield from stream(f, name or path)

        return from_path()
    label = name if name is not None else getattr(fileobj, "name", None)
    return stream(fileobj, label if isinstance(label, str) else "<stream>")


def _pieces_crc(pieces: list[bytes], length: int) -> tuple[int, int]:
    """(stored, computed) masked data CRC of the record framed in ``pieces`` (its header, its data
    and its data CRC across them), without joining them."""
    crc, at, tail = 0, 0, []
    end = HEADER_SIZE + length
    for p in pieces:
        lo, hi = max(at, HEADER_SIZE), min(at + len(p), end)
        if lo < hi:
            crc = checksum.extend(crc, memoryview(p)[lo - at:hi - at])
        if at + len(p) > end:
            tail.append(memoryview(p)[max(end - at, 0):])
        at += len(p)
    (stored,) = _U32.unpack(b"".join(tail))
    return stored, mask_crc(crc)


_ALONE = 1 << 16  # a record that straddles reads and has this many bytes or more is a chunk of its own


class _Cursor:
    """A stream of byte chunks read from a position on, for the record that straddles two reads:
    :meth:`take` joins only the bytes asked for (never the rest of a chunk)."""

    __slots__ = ("it", "buf", "pos", "base", "reads")

    def __init__(self, chunks: Iterator[bytes] | _Reads):
        self.it = iter(chunks)
        self.buf, self.pos, self.base = b"", 0, 0  # the chunk, the position in it, its stream offset
        # Chunks in a reused buffer: a piece taken is copied out, or its whole chunk kept.
        self.reads = chunks if isinstance(chunks, _Reads) else None

    def offset(self) -> int:
        return self.base + self.pos

    def take(self, n: int, pieces: list[bytes]) -> int:
        """Append up to ``n`` bytes from the position on to ``pieces`` (fewer only at the end of the
        stream); returns how many."""
        want = n
        while n > 0:
            if self.pos == len(self.buf):
                self.base += len(self.buf)
                self.buf, self.pos = b"", 0  # let the old chunk go before the next one is read
                self.buf = next(self.it, b"")
                if not self.buf:
                    break
            k = min(n, len(self.buf) - self.pos)
            if k == len(self.buf):
                if self.reads is None:
                    pieces.append(self.buf)
                else:  # the whole chunk: kept, read-only like the bytes pieces
                    pieces.append(self.buf.toreadonly())
                    self.reads.keep()
            else:
                piece = self.buf[self.pos:self.pos + k]
                pieces.append(piece if self.reads is None else bytes(piece))
            self.pos += k
            n -= k
        return want - n


def _chunk_stream(chunks: Iterator[bytes] | _Reads, name: str, verify: bool, max_records: int,
                  gather: bool) -> Iterator[tuple[np.ndarray, np.ndarray, Any]]:
    """The compiled chunk walk: ``core.scan_chunk`` over the whole records of each read; a record
    that straddles two reads is taken apart (:class:`_Cursor`), checked, and put before the next
    chunk's records (``lead``).  Errors are those of :func:`_record_stream`, raised after the
    records before the damaged one are yielded."""
    core = native.active()
    cur = _Cursor(chunks)
    reads = cur.reads
    lead_pos: list[int] = []
    lead_len: list[int] = []
    lead_data: list[bytes] = []

    def merged(positions: bytes, lengths: bytes, data: bytes | None):
        pos = np.frombuffer(positions, dtype="<i8").astype(np.int64, copy=False)
        lens = np.frombuffer(lengths, dtype="<i8").astype(np.int64, copy=False)
        if lead_pos:
            pos = np.concatenate([np.array(lead_pos, dtype=np.int64), pos])
            lens = np.concatenate([np.array(lead_len, dtype=np.int64), lens])
            if gather and data is None:
                data = b"".join(lead_data)
            lead_pos.clear(), lead_len.clear(), lead_data.clear()
        return pos, lens, data

    while True:
        lead = b"".join(lead_data) if gather and lead_data else None
        limit = max_records - len(lead_pos)
        positions, lengths, data, cur.pos, bad = core.scan_chunk(cur.buf, cur.pos, verify, cur.base, limit, gather,
                                                                 lead)
        if positions:  # the lead went into data
            lead_data.clear()
            yield merged(positions, lengths, data)
        if bad is not None:
            if lead_pos:
                yield merged(b"", b"", None)
            which, offset, length, stored, got = bad
            raise _crc_error(name, offset, ("length CRC", "data CRC")[which], length, stored, got)
        if len(positions) // 8 == limit:
            continue  # the chunk is full: more whole records may follow in this read
        if reads is not None and len(cur.buf) - cur.pos < _READ_SIZE // 2:
            # The bytes not walked (part of a record, or none) go to the front of the buffer and
            # the next read follows them.  A record too large for that (the buffer is still
            # half full of it after a read) is taken apart below.
            start = cur.offset()
            cur.buf, got = reads.refill(cur.buf, cur.pos)
            cur.base, cur.pos = start, 0
            if got:
                continue
        # At the position: the end of the read, with part of a record (or none) before the next.
        start = cur.offset()
        pieces: list[bytes] = []
        cur.take(HEADER_SIZE, pieces)
        head = pieces[0] if len(pieces) == 1 and type(pieces[0]) is bytes else b"".join(pieces)
        if len(head) < HEADER_SIZE:
            if lead_pos:
                yield merged(b"", b"", None)
            if not head:
                return
            raise CorruptRecordError(name, start, "truncated header",
                                     f"expected {HEADER_SIZE} header bytes, got {len(head)} before end of stream")
        length, length_crc = _HEADER.unpack_from(head, 0)
        if mask_crc(_crc32c_value(head[:8])) != length_crc:
            if lead_pos:
                yield merged(b"", b"", None)
            _check_length_crc(head, 0, length, length_crc, {}, name, start)
        pieces = [head]
        got = cur.take(length + FOOTER_SIZE, pieces)
        if got < length + FOOTER_SIZE:
            if lead_pos:
                yield merged(b"", b"", None)
            avail = HEADER_SIZE + got
            if avail < HEADER_SIZE + length:
                what = f"{length} data bytes, got {avail - HEADER_SIZE}"
            else:
                what = f"{FOOTER_SIZE}-byte data CRC after {length} data bytes, got {avail - HEADER_SIZE - length}"
            raise CorruptRecordError(name, start, "truncated data", f"expected {what} before end of stream")
        if verify:
            stored, got = _pieces_crc(pieces, length)
            if got != stored:
                if lead_pos:
                    yield merged(b"", b"", None)
                raise _crc_error(name, start, "data CRC", length, stored, got)
        if not gather:
            lead_pos.append(start)
            lead_len.append(length)
            if len(lead_pos) == max_records:
                yield merged(b"", b"", None)
            continue
        record = b"".join(pieces)  # the one copy of a record that straddles reads
        data = memoryview(record)[HEADER_SIZE:HEADER_SIZE + length]
        if length >= _ALONE:  # a large record: a chunk of its own, its data not copied again
            if lead_pos:
                yield merged(b"", b"", None)
            yield np.array([start], dtype=np.int64), np.array([length], dtype=np.int64), data
            continue
        lead_pos.append(start)
        lead_len.append(length)
        lead_data.append(data)
        if len(lead_pos) == max_records:
            yield merged(b"", b"", None)


def _pure_chunk_stream(chunks: Iterator[bytes], name: str, verify: bool, max_records: int,
                       gather: bool) -> Iterator[tuple[np.ndarray, np.ndarray, Any]]:
    """The numpy core's chunk walk: :func:`_record_stream`'s records, grouped."""
    broken: list[CorruptRecordError] = []
    records = until_corrupt(_record_stream(chunks, name, verify, True), broken)
    for offsets, datas in record_chunks(records, max_records=max_records, max_bytes=_READ_SIZE):
        yield (np.array(offsets, dtype=np.int64), np.fromiter(map(len, datas), dtype=np.int64, count=len(datas)),
               b"".join(datas) if gather else None)
    if broken:
        raise broken[0]


def iter_record_chunks(fileobj: BinaryIO | str | os.PathLike, *, name: str | None = None,
                       compression: str | None = None, verify: bool = True, max_records: int = 4096,
                       gather: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray, Any]]:
    """The records of a TFRecord stream a chunk at a time, without a Python object per record:
    ``(offsets, lengths, data)`` per chunk of at most ``max_records`` (and about one read, 1 MiB,
    of records, or one record), none empty.

    ``offsets``: each record's header offset in the uncompressed stream, ``lengths`` its data
    length (int64 arrays); ``data``: the records' data back to back (record i starts at
    ``lengths[:i].sum()``; ``bytes``, or a ``memoryview`` for a large record that straddled reads),
    or None without ``gather`` (a walk that only checks and counts).
    :func:`chunk_records` makes ``data`` an Arrow array.  Checks and errors are those of
    :func:`iter_records` (``verify``: the data CRCs too); on a damaged record the chunk of the
    records before it is yielded, then :class:`CorruptRecordError` raised.  With the compiled
    core the whole records of each read are walked, both CRCs checked, in one call.
    """
    compression = normalize_compression(compression)
    if not isinstance(max_records, int) or max_records < 1:
        raise ValueError(f"max_records must be a positive integer, got {max_records!r}")
    walk = _chunk_stream if native.active() is not None else _pure_chunk_stream

    def stream(f: Any, label: str) -> Iterator[tuple[np.ndarray, np.ndarray, Any]]:
        if compression != "none":
            chunks = _inflate(_raw_chunks(f, label), compression, label)
        elif walk is _chunk_stream and hasattr(f, "readinto"):
            chunks = _Reads(f)  # the compiled walk copies out what it keeps
        else:
            chunks = _raw_chunks(f, label)
        yield from walk(chunks, label, verify, max_records, gather)

    if isinstance(fileobj, (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(fileobj))

        def from_path() -> Iterator[tuple[np.ndarray, np.ndarray, Any]]:
            with open(path, "rb") as f:
                yield from stream(f, name or path)

        return from_path()
    label = name if name is not None else getattr(fileobj, "name", None)
    return stream(fileobj, label if isinstance(label, str) else "<stream>")


def chunk_records(lengths: np.ndarray, data: Any) -> pa.Array:
    """A chunk's records (:func:`iter_record_chunks`) as an Arrow ``large_binary`` array over ``data`` (no copy)."""
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), lengths.size, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
