"""Tests for tfrecord_io.core.framing against real TensorFlow (no mocks)."""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import pickle
import struct
import zlib
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_io.core import framing
from tfrecord_io.core.framing import (
    CorruptRecordError,
    TFRecordWriter,
    compression_from_path,
    extension_for,
    frame_records,
    iter_records,
    masked_crc32c,
    normalize_compression,
    read_records,
)
from helpers import TF_COMPRESSION

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
_spec = importlib.util.spec_from_file_location("make_golden", GOLDEN_DIR / "make_golden.py")
_make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_make_golden)
GOLDEN_RECORDS: list[bytes] = _make_golden.GOLDEN_RECORDS

GOLDEN = {  # our compression name -> (golden file, TF compression_type)
    "none": (GOLDEN_DIR / "records.tfrecord", ""),
    "gzip": (GOLDEN_DIR / "records.tfrecord.gz", "GZIP"),
    "zlib": (GOLDEN_DIR / "records.tfrecord.zlib", "ZLIB"),
}


# --------------------------------------------------------------------------
# An independent reference framing (straight from the format description)
# --------------------------------------------------------------------------

def ref_mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) % 2**32


def ref_frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return (length + struct.pack("<I", ref_mask(google_crc32c.value(length)))
            + record + struct.pack("<I", ref_mask(google_crc32c.value(record))))


def tf_read(path: Path | str, compression: str = "none") -> list[bytes]:
    ds = tf.data.TFRecordDataset(str(path), compression_type=TF_COMPRESSION[compression])
    return [r.numpy() for r in ds]


def tf_write(path: Path, records: list[bytes], compression: str = "none") -> None:
    options = tf.io.TFRecordOptions(compression_type=TF_COMPRESSION[compression])
    with tf.io.TFRecordWriter(str(path), options) as w:
        for r in records:
            w.write(r)


def arrow_variants(records: list[bytes]) -> dict[str, object]:
    """The same records as every input type frame_records accepts."""
    padded = [b"pad"] + list(records) + [b"pad"]
    return {
        "list": list(records),
        "tuple": tuple(records),
        "binary": pa.array(records, type=pa.binary()),
        "large_binary": pa.array(records, type=pa.large_binary()),
        "sliced": pa.array(padded, type=pa.binary()).slice(1, len(records)),
        "chunked": pa.chunked_array([pa.array(records[:1], pa.binary()),
                                     pa.array(records[1:], pa.binary())], type=pa.binary()),
    }


# --------------------------------------------------------------------------
# CRC and masking
# --------------------------------------------------------------------------

def test_crc32c_check_value_and_mask():
    # 0xE3069283 is the standard CRC-32C check value of b"123456789".
    assert google_crc32c.value(b"123456789") == 0xE3069283
    assert masked_crc32c(b"123456789") == ref_mask(0xE3069283)
    assert masked_crc32c(b"") == ref_mask(0) == 0xA282EAD8
    assert masked_crc32c(bytearray(b"abc")) == masked_crc32c(memoryview(b"abc")) == masked_crc32c(b"abc")


@pytest.mark.parametrize("length", [0, 1, 12, 255, 256, 65535, 65536, 2**31 - 1, 2**32 - 1, 2**32,
                                    2**32 + 12345, 2**40 + 7, 2**63, 2**64 - 1])
def test_vectorized_length_crc_matches_scalar(length):
    lengths = np.array([length, 0, length], dtype=np.uint64)
    got = framing._masked_length_crcs(lengths)
    assert got.dtype == np.uint32
    assert got.tolist() == [masked_crc32c(struct.pack("<Q", n)) for n in lengths.tolist()]


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_vectorized_length_crc_random(lengths):
    got = framing._masked_length_crcs(np.array(lengths, dtype=np.uint64))
    assert got.tolist() == [masked_crc32c(struct.pack("<Q", n)) for n in lengths]


# --------------------------------------------------------------------------
# Golden files written by TensorFlow
# --------------------------------------------------------------------------

@pytest.mark.parametrize("compression", sorted(GOLDEN))
def test_read_golden(compression):
    path, _ = GOLDEN[compression]
    assert list(read_records(path, compression=compression)) == GOLDEN_RECORDS
    with open(path, "rb") as f:
        assert list(read_records(f, compression=compression_from_path(path))) == GOLDEN_RECORDS


@pytest.mark.parametrize("compression", sorted(GOLDEN))
def test_golden_offsets_are_uncompressed_offsets(compression):
    path, _ = GOLDEN[compression]
    expected, pos = [], 0
    for r in GOLDEN_RECORDS:
        expected.append((pos, r))
        pos += len(r) + 16
    assert list(iter_records(path, compression=compression)) == expected


def test_frame_records_matches_golden_bytes():
    golden = GOLDEN["none"][0].read_bytes()
    assert b"".join(ref_frame(r) for r in GOLDEN_RECORDS) == golden  # the reference agrees with TF
    for label, records in arrow_variants(GOLDEN_RECORDS).items():
        assert frame_records(records) == golden, label


@pytest.mark.parametrize("how", ["write", "write_batch_list", "write_batch_arrow", "mixed"])
def test_writer_uncompressed_is_byte_identical_to_tf(how, tmp_path):
    golden = GOLDEN["none"][0].read_bytes()
    buf = io.BytesIO()
    with TFRecordWriter(buf) as w:
        if how == "write":
            for r in GOLDEN_RECORDS:
                w.write(r)
        elif how == "write_batch_list":
            assert w.write_batch(GOLDEN_RECORDS) == len(GOLDEN_RECORDS)
        elif how == "write_batch_arrow":
            w.write_batch(pa.array(GOLDEN_RECORDS, type=pa.large_binary()))
        else:
            w.write(GOLDEN_RECORDS[0])
            w.write_batch(GOLDEN_RECORDS[1:5])
            for r in GOLDEN_RECORDS[5:]:
                w.write(bytearray(r))
        assert w.records_written == len(GOLDEN_RECORDS)
        assert w.bytes_written == len(golden)
    assert not buf.closed  # we did not open it, so we do not close it
    assert buf.getvalue() == golden


def test_writer_matches_tf_writer_on_fresh_records(tmp_path):
    rng = np.random.default_rng(7)
    records = [rng.bytes(int(n)) for n in rng.integers(0, 3000, 200)]
    tf_write(tmp_path / "tf.tfrecord", records)
    with TFRecordWriter(tmp_path / "ours.tfrecord") as w:
        w.write_batch(records)
    assert (tmp_path / "ours.tfrecord").read_bytes() == (tmp_path / "tf.tfrecord").read_bytes()


@pytest.mark.parametrize("compression", ["gzip", "zlib", "GZIP", "ZLIB"])
@pytest.mark.parametrize("how", ["write", "write_batch"])
def test_compressed_output_readable_by_tf(compression, how, tmp_path):
    comp = normalize_compression(compression)
    path = tmp_path / ("out.tfrecord" + extension_for(comp))
    with TFRecordWriter(path, compression=compression) as w:
        if how == "write":
            for r in GOLDEN_RECORDS:
                w.write(r)
        else:
            w.write_batch(pa.array(GOLDEN_RECORDS, type=pa.binary()))
            w.flush()  # a sync flush in the middle must not break the stream
            w.write_batch(GOLDEN_RECORDS)
    expected = GOLDEN_RECORDS if how == "write" else GOLDEN_RECORDS * 2
    assert w.bytes_written == path.stat().st_size
    assert w.records_written == len(expected)
    assert tf_read(path, comp) == expected
    assert list(read_records(path, compression=comp)) == expected
    # The stream really is compressed in the right container.
    raw = path.read_bytes()
    decoded = gzip.decompress(raw) if comp == "gzip" else zlib.decompress(raw)
    assert decoded == b"".join(ref_frame(r) for r in expected)


def test_tf_reads_frame_records_output(tmp_path):
    rng = np.random.default_rng(3)
    records = [b"", b"\x00", rng.bytes(70_000)] + [rng.bytes(int(n)) for n in rng.integers(0, 500, 300)]
    uniform = [rng.bytes(250) for _ in range(300)]
    for name, recs in [("mixed", records), ("uniform", uniform)]:
        for label, variant in arrow_variants(recs).items():
            path = tmp_path / f"{name}-{label}.tfrecord"
            path.write_bytes(frame_records(variant))
            assert tf_read(path) == recs, (name, label)


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_empty_stream_is_zero_records(compression, tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert list(read_records(path, compression=compression)) == []
    assert tf_read(path, compression) == []  # TensorFlow agrees
    with TFRecordWriter(tmp_path / "w", compression=compression):
        pass
    assert list(read_records(tmp_path / "w", compression=compression)) == []
    assert tf_read(tmp_path / "w", compression) == []
    assert frame_records([]) == b""
    assert frame_records(pa.array([], type=pa.binary())) == b""


# --------------------------------------------------------------------------
# Corruption: flipped bytes
# --------------------------------------------------------------------------

RECORDS3 = [b"first record", b"the second record, the one we damage", b"third"]
OFFSETS3 = [0, len(RECORDS3[0]) + 16, len(RECORDS3[0]) + len(RECORDS3[1]) + 32]

# (field, position of the flipped byte relative to the damaged record, expected check)
FLIPS = [
    ("length low byte", 0, "length CRC"),
    ("length high byte", 7, "length CRC"),
    ("length CRC", 8, "length CRC"),
    ("length CRC last byte", 11, "length CRC"),
    ("first data byte", 12, "data CRC"),
    ("last data byte", 12 + len(RECORDS3[1]) - 1, "data CRC"),
    ("data CRC", 12 + len(RECORDS3[1]), "data CRC"),
    ("data CRC last byte", 12 + len(RECORDS3[1]) + 3, "data CRC"),
]


@pytest.mark.parametrize("field,rel,check", FLIPS, ids=[f[0] for f in FLIPS])
def test_flipped_byte_is_reported(field, rel, check, tmp_path):
    data = bytearray(frame_records(RECORDS3))
    data[OFFSETS3[1] + rel] ^= 0x40
    path = tmp_path / "flipped.tfrecord"
    path.write_bytes(bytes(data))
    got = []
    with pytest.raises(CorruptRecordError) as info:
        for r in read_records(path):
            got.append(r)
    err = info.value
    assert got == RECORDS3[:1]  # everything before the damage is still delivered
    assert err.path == str(path)
    assert err.offset == OFFSETS3[1]
    assert err.check == check
    message = str(err)
    assert str(path) in message and f"offset {OFFSETS3[1]}" in message and check in message
    assert "expected" in message and "got" in message
    assert isinstance(err, ValueError)
    # TensorFlow rejects the same file.
    with pytest.raises(tf.errors.DataLossError):
        tf_read(path)


@pytest.mark.parametrize("rel", [12, 12 + len(RECORDS3[1]) - 1, 12 + len(RECORDS3[1]) + 2])
def test_verify_false_reads_past_data_crc_damage(rel):
    data = bytearray(frame_records(RECORDS3))
    data[OFFSETS3[1] + rel] ^= 0x01
    expected = list(RECORDS3)
    if rel < 12 + len(RECORDS3[1]):
        damaged = bytearray(RECORDS3[1])
        damaged[rel - 12] ^= 0x01
        expected[1] = bytes(damaged)
    assert list(read_records(io.BytesIO(bytes(data)), verify=False)) == expected
    with pytest.raises(CorruptRecordError, match="data CRC"):
        list(read_records(io.BytesIO(bytes(data)), name="mem"))


def test_verify_false_still_checks_the_length_crc():
    data = bytearray(frame_records(RECORDS3))
    data[OFFSETS3[1]] ^= 0x01  # the length field itself
    with pytest.raises(CorruptRecordError, match="length CRC") as info:
        list(read_records(io.BytesIO(bytes(data)), name="mem", verify=False))
    assert info.value.offset == OFFSETS3[1]


def test_error_names_stream_and_file_object_name(tmp_path):
    data = bytearray(frame_records(RECORDS3))
    data[OFFSETS3[2] + 12] ^= 0xFF
    with pytest.raises(CorruptRecordError) as info:
        list(read_records(io.BytesIO(bytes(data))))
    assert info.value.path == "<stream>" and info.value.offset == OFFSETS3[2]
    with pytest.raises(CorruptRecordError) as info:
        list(read_records(io.BytesIO(bytes(data)), name="hdfs://nn/x.tfrecord"))
    assert str(info.value).startswith("hdfs://nn/x.tfrecord: ")
    path = tmp_path / "named.tfrecord"
    path.write_bytes(bytes(data))
    with open(path, "rb") as f, pytest.raises(CorruptRecordError) as info:
        list(read_records(f))
    assert info.value.path == str(path)


def test_corrupt_record_error_pickles():
    err = CorruptRecordError("/x/y.tfrecord", 1234, "data CRC", "expected 0x1, got 0x2")
    back = pickle.loads(pickle.dumps(err))
    assert (back.path, back.offset, back.check, str(back)) == (err.path, err.offset, err.check, str(err))


# --------------------------------------------------------------------------
# Corruption: truncation
# --------------------------------------------------------------------------

TRUNC_RECORDS = [b"complete record", b"last record: header, data and footer"]


def test_truncation_at_every_byte_of_the_last_record():
    data = frame_records(TRUNC_RECORDS)
    last = len(TRUNC_RECORDS[0]) + 16
    assert list(read_records(io.BytesIO(data[:last]))) == TRUNC_RECORDS[:1]  # clean boundary
    for cut in range(last + 1, len(data)):
        for verify in (True, False):
            got = []
            with pytest.raises(CorruptRecordError) as info:
                for r in read_records(io.BytesIO(data[:cut]), name="trunc", verify=verify):
                    got.append(r)
            err = info.value
            assert got == TRUNC_RECORDS[:1], cut
            assert err.offset == last, cut
            assert err.check == ("truncated header" if cut - last < 12 else "truncated data"), cut
            assert "trunc" in str(err) and f"offset {last}" in str(err)


@pytest.mark.parametrize("chunk", [1, 5, 13, 4096])
def test_short_reads_are_handled(chunk):
    """File objects may return fewer bytes than asked for."""

    class Trickle(io.RawIOBase):
        def __init__(self, data):
            self._src = io.BytesIO(data)

        def readable(self):
            return True

        def read(self, n=-1):
            return self._src.read(min(n, chunk) if n is not None and n >= 0 else chunk)

    for compression in ("none", "gzip", "zlib"):
        data = GOLDEN[compression][0].read_bytes()
        assert list(read_records(Trickle(data), compression=compression)) == GOLDEN_RECORDS


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_truncated_compressed_stream(compression):
    data = GOLDEN[compression][0].read_bytes()
    for cut in list(range(1, 40)) + list(range(len(data) - 40, len(data))):
        with pytest.raises(CorruptRecordError) as info:
            list(read_records(io.BytesIO(data[:cut]), compression=compression, name="cut.gz"))
        assert info.value.path == "cut.gz", cut
        assert info.value.check in ("decompression", "truncated header", "truncated data"), cut


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_bad_compressed_stream_is_corrupt_record_error(compression):
    garbage = b"this is not a compressed stream at all" * 10
    with pytest.raises(CorruptRecordError) as info:
        list(read_records(io.BytesIO(garbage), compression=compression, name="bad.gz"))
    err = info.value
    assert err.path == "bad.gz" and err.check == "decompression"
    assert "bad.gz" in str(err) and compression in str(err)
    assert isinstance(err.__cause__, zlib.error)
    # Damage in the middle of a real stream.
    data = bytearray(GOLDEN[compression][0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        list(read_records(io.BytesIO(bytes(data)), compression=compression))


def test_gzip_members_concatenate_and_zlib_rejects_trailing_data():
    gz = GOLDEN["gzip"][0].read_bytes()
    assert list(read_records(io.BytesIO(gz + gz), compression="gzip")) == GOLDEN_RECORDS * 2
    zl = GOLDEN["zlib"][0].read_bytes()
    with pytest.raises(CorruptRecordError, match="trailing"):
        list(read_records(io.BytesIO(zl + b"junk"), compression="zlib"))


# --------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------

def test_reader_streams_with_bounded_reads():
    records = [bytes([i % 256]) * 100_000 for i in range(60)]  # ~6 MB
    data = frame_records(records)

    class Counting(io.BytesIO):
        requested = 0
        largest = 0

        def read(self, n=-1):
            assert n is not None and n > 0, "reader asked for the whole file"
            out = super().read(n)
            Counting.requested += len(out)
            Counting.largest = max(Counting.largest, n)
            return out

    f = Counting(data)
    it = read_records(f)
    assert next(it) == records[0]
    assert Counting.requested < 2 * 2**20 < len(data)  # read lazily, not the whole file
    assert list(it) == records[1:]
    assert Counting.largest <= 2**20


def test_large_record_spanning_many_reads():
    big = np.random.default_rng(1).bytes(5 * 2**20 + 3)
    for compression in ("none", "gzip"):
        buf = io.BytesIO()
        with TFRecordWriter(buf, compression=compression) as w:
            w.write(b"x")
            w.write(big)
            w.write(b"y")
        buf.seek(0)
        assert list(read_records(buf, compression=compression)) == [b"x", big, b"y"]


# --------------------------------------------------------------------------
# frame_records: property tests and chunking
# --------------------------------------------------------------------------

record_lists = st.one_of(
    st.lists(st.binary(max_size=300), max_size=40),
    # all the same length: exercises the uniform-length fast path
    st.integers(0, 40).flatmap(lambda n: st.lists(st.binary(min_size=n, max_size=n), max_size=40)),
)


@settings(max_examples=150, deadline=None)
@given(record_lists)
def test_round_trip_and_matches_per_record_framing(records):
    expected = b"".join(ref_frame(r) for r in records)
    for label, variant in arrow_variants(records).items():
        if label == "chunked" and not records:
            continue
        assert frame_records(variant) == expected, label
    assert list(read_records(io.BytesIO(expected))) == records
    offsets = [off for off, _ in iter_records(io.BytesIO(expected))]
    assert offsets == [sum(len(r) + 16 for r in records[:i]) for i in range(len(records))]


@settings(max_examples=30, deadline=None)
@given(record_lists, st.sampled_from(["gzip", "zlib"]))
def test_compressed_round_trip(records, compression):
    buf = io.BytesIO()
    with TFRecordWriter(buf, compression=compression) as w:
        w.write_batch(records[: len(records) // 2])
        for r in records[len(records) // 2:]:
            w.write(r)
    assert w.bytes_written == len(buf.getvalue())
    assert list(read_records(io.BytesIO(buf.getvalue()), compression=compression)) == records


def test_frame_records_across_chunk_boundaries():
    rng = np.random.default_rng(5)
    many = [rng.bytes(int(n)) for n in rng.integers(0, 20, framing._CHUNK_RECORDS * 2 + 17)]
    uniform = [bytes([i % 256]) * 3 for i in range(framing._CHUNK_RECORDS + 5)]
    big = [rng.bytes(framing._CHUNK_BYTES // 3 + 1) for _ in range(5)]  # byte-bounded chunks
    for records in (many, uniform, big):
        expected = b"".join(ref_frame(r) for r in records)
        assert frame_records(records) == expected
        assert frame_records(pa.array(records, type=pa.binary())) == expected
        buf = io.BytesIO()
        with TFRecordWriter(buf) as w:
            assert w.write_batch(pa.array(records, type=pa.large_binary())) == len(records)
        assert buf.getvalue() == expected


def test_frame_records_accepts_generators_and_bytes_likes():
    records = [b"a", b"bc", b""]
    expected = b"".join(ref_frame(r) for r in records)
    assert frame_records(r for r in records) == expected
    assert frame_records([bytearray(b"a"), memoryview(b"bc"), np.frombuffer(b"", np.uint8)]) == expected
    assert frame_records([np.array([0x61], np.uint8), b"bc", b""]) == expected


@pytest.mark.parametrize("records,index", [
    (pa.array([b"a", None, b"c"], type=pa.binary()), 1),
    (pa.array([None], type=pa.large_binary()), 0),
    (pa.array([b"x", b"y", None, None], type=pa.binary()).slice(1), 1),
    (pa.chunked_array([[b"a", b"b"], [b"c", None]], type=pa.binary()), 3),
    ([b"a", b"b", None], 2),
])
def test_null_records_are_rejected_with_index(records, index):
    with pytest.raises(ValueError, match=rf"record {index} is (null|None)"):
        frame_records(records)
    buf = io.BytesIO()
    w = TFRecordWriter(buf)
    with pytest.raises(ValueError, match=rf"record {index}"):
        w.write_batch(records)
    assert buf.getvalue() == b"" and w.records_written == 0  # nothing half-written


@pytest.mark.parametrize("records", [
    [b"a", "text"],
    [b"a", 3],
    pa.array(["text"], type=pa.string()),
    pa.array([1, 2]),
    b"just bytes",
])
def test_non_binary_records_are_type_errors(records):
    with pytest.raises(TypeError):
        frame_records(records)


# --------------------------------------------------------------------------
# Writer behaviour
# --------------------------------------------------------------------------

def test_writer_owns_only_files_it_opened(tmp_path):
    path = tmp_path / "owned.tfrecord"
    w = TFRecordWriter(str(path))
    w.write(b"abc")
    w.close()
    assert w._file.closed
    w.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        w.write(b"more")
    assert list(read_records(path)) == [b"abc"]

    f = open(tmp_path / "borrowed.tfrecord", "wb")
    with TFRecordWriter(f, compression="gzip") as w:
        w.write(b"abc")
    assert not f.closed
    f.write(b"")  # still usable
    f.close()
    assert tf_read(tmp_path / "borrowed.tfrecord", "gzip") == [b"abc"]


def test_flush_makes_records_visible(tmp_path):
    for compression in ("none", "gzip", "zlib"):
        path = tmp_path / f"flushed-{compression}"
        with open(path, "wb") as f:
            w = TFRecordWriter(f, compression=compression)
            w.write_batch([b"one", b"two"])
            w.flush()
            on_disk = path.read_bytes()
            assert len(on_disk) == w.bytes_written
            if compression == "none":
                assert list(read_records(io.BytesIO(on_disk))) == [b"one", b"two"]
            else:  # a sync-flushed stream decodes, though its end marker is missing
                d = zlib.decompressobj(31 if compression == "gzip" else 15)
                assert d.decompress(on_disk) == frame_records([b"one", b"two"])
            w.close()
        assert list(read_records(path, compression=compression)) == [b"one", b"two"]


def test_writer_rejects_bad_records():
    w = TFRecordWriter(io.BytesIO())
    with pytest.raises(ValueError):
        w.write(None)
    with pytest.raises(TypeError):
        w.write("text")
    assert w.records_written == 0 and w.bytes_written == 0


# --------------------------------------------------------------------------
# Compression names
# --------------------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [
    (None, "none"), ("", "none"), ("none", "none"), ("NONE", "none"),
    ("gzip", "gzip"), ("GZIP", "gzip"), ("Gzip", "gzip"),
    ("zlib", "zlib"), ("ZLIB", "zlib"),
])
def test_normalize_compression(value, expected):
    assert normalize_compression(value) == expected


@pytest.mark.parametrize("value", ["snappy", "gz", "bz2", "zip", 0, True, b"gzip"])
def test_normalize_compression_rejects(value):
    with pytest.raises(ValueError, match="compression"):
        normalize_compression(value)
    with pytest.raises(ValueError):
        TFRecordWriter(io.BytesIO(), compression=value)
    with pytest.raises(ValueError):
        read_records(io.BytesIO(), compression=value)  # raised at the call, before iterating
    with pytest.raises(ValueError):
        extension_for(value)


@pytest.mark.parametrize("path,expected", [
    ("part-00000.tfrecord", "none"),
    ("part-00000.tfrecord.gz", "gzip"),
    ("PART.TFRECORD.GZ", "gzip"),
    ("x.gzip", "gzip"),
    ("hdfs://nn:8020/data/x.tfrecord.zlib", "zlib"),
    (Path("/tmp/a.tfrecords"), "none"),
    ("gz", "none"),
    ("x.tgz", "none"),
])
def test_compression_from_path(path, expected):
    assert compression_from_path(path) == expected


@pytest.mark.parametrize("compression,ext", [(None, ""), ("none", ""), ("gzip", ".gz"),
                                             ("GZIP", ".gz"), ("zlib", ".zlib")])
def test_extension_for(compression, ext):
    assert extension_for(compression) == ext
    assert compression_from_path("f.tfrecord" + ext) == normalize_compression(compression)


def test_writer_handles_partial_writes_of_raw_files():
    class Dribble(io.RawIOBase):
        """A raw file that takes at most 5 bytes per write, as raw files may."""

        def __init__(self):
            self.data = bytearray()

        def writable(self):
            return True

        def write(self, b):
            chunk = bytes(memoryview(b)[:5])
            self.data += chunk
            return len(chunk)

    f = Dribble()
    with TFRecordWriter(f) as w:
        w.write(GOLDEN_RECORDS[2])
        w.write_batch(GOLDEN_RECORDS)
    assert bytes(f.data) == frame_records([GOLDEN_RECORDS[2]] + GOLDEN_RECORDS)
    assert w.bytes_written == len(f.data)


# Block-parallel gzip (core/gzip_blocks): one gzip stream whatever the threads, read by every reader.

def _beam_read(path: Path) -> list[bytes]:
    """Beam's own TFRecord reading: its CompressedFile (gzip) and _TFRecordUtil.read_record."""
    from apache_beam.io.filesystem import CompressedFile, CompressionTypes
    from apache_beam.io.tfrecordio import _TFRecordUtil

    out = []
    with open(path, "rb") as raw:
        f = CompressedFile(raw, CompressionTypes.GZIP)
        while (record := _TFRecordUtil.read_record(f)) is not None:
            out.append(record)
    return out


@pytest.mark.parametrize("core", ["compiled", "numpy"])
@pytest.mark.parametrize("threads,level,flush_at", [(2, 6, None), (4, 1, 7), (3, 9, 0), (2, 6, -1), (1, 6, 3)])
def test_parallel_gzip_is_one_stream_every_reader_reads(tmp_path, threads, level, flush_at, core):
    """Records of up to 3 MiB (spanning the 1 MiB blocks: 5 MiB in all, a block for each thread and
    more) and many small ones, a flush() in the middle (or none); the file is one gzip member that
    TensorFlow, Beam, Python's gzip and the gzip command read to the same records; the level is
    honoured (9 is smaller than 1).  Blocks deflated by the compiled core's zlib-rs and by Python's
    zlib (the numpy core) alike."""
    import contextlib

    from tfrecord_io.core import native

    if core == "compiled" and native.available() is None:
        pytest.fail("the compiled record core is not built in this checkout: run `make setup` (needs cargo)")
    if core == "compiled" and native.active() is None:
        pytest.skip(f"{native.PURE_ENV}=1: the suite runs the numpy core")
    with native.pure() if core == "numpy" else contextlib.nullcontext():
        _parallel_gzip_case(tmp_path, threads, level, flush_at)


def _parallel_gzip_case(tmp_path, threads, level, flush_at):
    import subprocess

    rng = np.random.default_rng(threads * 10 + level)
    records = [bytes(rng.integers(0, 4, size=int(n), dtype=np.uint8)) for n in
               [(3 << 20) - 7, (1 << 20) + 1, (1 << 20) - 1, *rng.integers(0, 300, size=2000)]]
    path = tmp_path / "p.tfrecord.gz"
    with TFRecordWriter(path, "gzip", compression_level=level, compression_threads=threads) as w:
        for i, r in enumerate(records):
            w.write(r)
            if i == flush_at:
                w.flush()
        if flush_at == -1:
            w.flush()
    data = path.read_bytes()
    assert data[:2] == b"\x1f\x8b" and w.bytes_written == len(data)
    assert gzip.decompress(data) == frame_records(records)  # one member: gzip reads it whole
    assert subprocess.run(["gzip", "-t", str(path)], capture_output=True).returncode == 0
    assert tf_read(path, "gzip") == records
    assert _beam_read(path) == records
    assert list(read_records(path, compression="gzip")) == records


def test_parallel_gzip_level_and_empty_streams(tmp_path):
    payload = [bytes(range(256)) * 400] * 40
    sizes = {}
    for level in (1, 9):
        path = tmp_path / f"l{level}.gz"
        with TFRecordWriter(path, "gzip", compression_level=level, compression_threads=2) as w:
            w.write_batch(payload)
        sizes[level] = path.stat().st_size
        assert tf_read(path, "gzip") == payload
    assert sizes[9] < sizes[1]
    empty = tmp_path / "empty.gz"
    with TFRecordWriter(empty, "gzip", compression_threads=2):
        pass
    assert gzip.decompress(empty.read_bytes()) == b"" and tf_read(empty, "gzip") == []
    with pytest.raises(ValueError, match="compression level must be -1 to 9"):
        TFRecordWriter(tmp_path / "bad.gz", "gzip", compression_level=12)
