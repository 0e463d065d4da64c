"""Record indexes (issue #21 item 2): committed in the manifest with every shard, written by
``tfrecord-io index`` for files others wrote (ours and DALI's format), checked by ``tfrecord-io verify``.

Every index is compared with offsets computed here by walking the file's framing by hand, and
DALI's with what its ``tfrecord2idx`` writes (its algorithm, restated below).  Library only: no
cluster (the HDFS side is in tests/test_tfdata.py and tests/test_loader_resume.py).
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tfrecord_io.commands import cli
from tfrecord_io.commands.reading import resolve_source
from tfrecord_io.commands.verify import verify_source
from tfrecord_io.conversion.splits import Splits
from tfrecord_io.core.codec import encode_examples
from tfrecord_io.core.framing import TFRecordWriter, frame_records, iter_record_lengths
from tfrecord_io.core.schema import Schema
from tfrecord_io.storage import index as record_index
from tfrecord_io.storage import output

SCHEMA = Schema.from_dict({"features": [{"name": "id", "type": "int64"}, {"name": "s", "type": "string",
                                                                          "default": ""}]})


def batch(start: int, n: int) -> pa.Array:
    return encode_examples(pa.RecordBatch.from_pydict(
        {"id": list(range(start, start + n)), "s": ["x" * (i % 37) for i in range(start, start + n)]},
        schema=SCHEMA.arrow_schema()), SCHEMA)


def framed_offsets(stream: bytes) -> list[tuple[int, int]]:
    """(offset, data length) of every record of an uncompressed TFRecord stream, walked by hand."""
    out, pos = [], 0
    while pos < len(stream):
        (length,) = struct.unpack_from("<Q", stream, pos)
        out.append((pos, length))
        pos += length + 16
    return out


def dali_tfrecord2idx(path: Path) -> str:
    """DALI's tools/tfrecord2idx, restated: '<offset> <size>' per record, size = 8 + 4 + length + 4."""
    lines, data, pos = [], path.read_bytes(), 0
    while pos < len(data):
        (length,) = struct.unpack_from("<q", data, pos)
        lines.append(f"{pos} {length + 16}\n")
        pos += length + 16
    return "".join(lines)


def decompress(path: Path, compression: str) -> bytes:
    return {"none": lambda b: b, "gzip": gzip.decompress, "zlib": zlib.decompress}[compression](path.read_bytes())


def committed_index(out: Path, name: str) -> record_index.RecordIndex:
    manifest = output.read_manifest(str(out))
    entry = next(f for f in manifest["files"] if f["path"] == name)
    return record_index.manifest_index(manifest, name, entry["bytes"], manifest["compression"], "m")


def assert_index_of(path: Path, compression: str, index: record_index.RecordIndex | None = None):
    index = index or record_index.read_index(record_index.index_uri(str(path)))
    stream = decompress(path, compression)
    want = framed_offsets(stream)
    assert index.offsets.tolist() == [o for o, _ in want] and index.lengths.tolist() == [n for _, n in want]
    assert (index.records, index.stream_bytes, index.file_bytes, index.compression) == (
        len(want), len(stream), path.stat().st_size, compression)
    return index


# ---------------------------------------------------------------------------------------
# Written at commit
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_every_committed_shard_has_its_index_in_the_manifest(tmp_path, compression):
    out = tmp_path / "out"
    manifest = output.write_output(str(out), [[batch(0, 300), batch(300, 5)], [], [batch(305, 40)]],
                                   schema=SCHEMA, compression=compression, engine="test")
    names = [f["path"] for f in manifest["files"]]
    assert manifest["index"]["version"] == 1 and sorted(manifest["index"]["lengths"]) == names
    counts = [assert_index_of(out / n, compression, committed_index(out, n)).records for n in names]
    assert counts == [f["records"] for f in manifest["files"]] == [305, 0, 40]
    # Nothing more in the directory: the attempts' index files went with _temporary.
    assert sorted(p.name for p in out.iterdir()) == sorted(["_SUCCESS", "_manifest.json", *names])
    assert verify_source(resolve_source(str(out))).ok


def test_a_split_output_has_an_index_beside_each_split_shard(tmp_path):
    out = str(tmp_path / "out")
    output.prepare_output(out, overwrite=False)
    splits = Splits.parse("train=1,eval=1")
    names = [f"{s}/{output.shard_name(0, 1)}" for s in splits.names]
    which = np.arange(100) % 2
    written = output.write_split_shards([(batch(0, 100), which)], out, "a0", names, "none")
    output.commit_splits(out, splits, written, [], output.ConversionTotals(100, 100, 0), schema=SCHEMA,
                         compression="none", engine="test")
    top = output.read_manifest(out)
    assert "index" not in top and "files" not in top
    for name in splits.names:
        shard = output.shard_name(0, 1)
        assert assert_index_of(Path(out, name, shard), "none", committed_index(Path(out, name), shard)).records == 50
    assert sorted(p.name for p in Path(out).iterdir()) == ["_SUCCESS", "_manifest.json", "eval", "train"]


def test_overwrite_removes_indexes_that_tfrecord_io_index_added(tmp_path):
    out = str(tmp_path / "out")
    output.write_output(out, [[batch(0, 10)], [batch(10, 10)]], schema=SCHEMA, engine="test")
    assert cli.main(["index", out, "--format", "dali"]) == 0  # _index/dali/ for DALI users
    output.prepare_output(out, overwrite=True)  # _index is tfrecord-io's own, never "foreign"; kept until the commit
    assert (Path(out) / "_index" / "dali").is_dir() and (Path(out) / output.SUCCESS).exists()
    output.write_output(out, [[batch(0, 5)]], schema=SCHEMA, engine="test")  # the commit replaces it all
    assert sorted(p.name for p in Path(out).iterdir()) == ["_SUCCESS", "_manifest.json", output.shard_name(0, 1)]


def test_the_writer_hands_every_length_to_the_index_in_order():
    rng = np.random.default_rng(3)
    records = [rng.bytes(int(n)) for n in rng.integers(0, 5000, 20_000)] + [b"y" * (9 << 20)]

    class Lengths(list):
        def add(self, lengths):
            self.extend(np.asarray(lengths).tolist())

    got, sink = Lengths(), io.BytesIO()
    with TFRecordWriter(sink, index=got) as w:  # batches and single records, in both framing paths
        w.write_batch(pa.array(records[:7000], pa.binary()))
        for r in records[7000:7010]:
            w.write(r)
        w.write_batch(records[7010:])
    assert got == [len(r) for r in records]
    assert sink.getvalue() == frame_records(records)


# ---------------------------------------------------------------------------------------
# The format
# ---------------------------------------------------------------------------------------
def test_a_damaged_or_foreign_index_is_refused_naming_it(tmp_path):
    path = tmp_path / "x.idx"
    sink = io.BytesIO()
    w = record_index.IndexWriter(sink)
    w.add([3, 0, 70000])
    w.finish(file_bytes=70051, compression="none")
    good = sink.getvalue()
    assert len(good) == 8 + 3 * 4 + 40
    index = record_index.parse_index(good, "x.idx")
    assert index.offsets.tolist() == [0, 19, 35] and index.stream_bytes == 70051
    for damaged, what in ((good[:-1], "not a tfrecord-io record index"), (good[:12] + good[20:], "truncated"),
                          (good[:9] + bytes([good[9] ^ 1]) + good[10:], "CRC mismatch"),
                          (b"TFRecord" + good[8:], "not a tfrecord-io record index")):
        path.write_bytes(damaged)
        with pytest.raises(ValueError, match=f"x.idx: .*{what}"):
            record_index.read_index(str(path))
    with pytest.raises(ValueError, match="records of 4 GiB or more"):
        record_index.IndexWriter(io.BytesIO()).add([1 << 32])


# ---------------------------------------------------------------------------------------
# tfrecord-io index: files others wrote
# ---------------------------------------------------------------------------------------
def tf_write(path: Path, records: list[bytes], compression: str = "none") -> Path:
    import tensorflow as tf

    options = tf.io.TFRecordOptions(compression_type={"none": "", "gzip": "GZIP", "zlib": "ZLIB"}[compression])
    with tf.io.TFRecordWriter(str(path), options=options) as w:
        for r in records:
            w.write(r)
    return path


def test_index_command_for_files_tensorflow_wrote_and_dali_format(tmp_path, capsys):
    records = batch(0, 500).to_pylist()
    (tmp_path / "data").mkdir()
    files = {c: tf_write(tmp_path / "data" / f"part-{c}.tfrecord{ext}", records[k::3], c)
             for k, (c, ext) in enumerate((("none", ""), ("gzip", ".gz"), ("zlib", ".zlib")))}
    assert cli.main(["index", str(tmp_path / "data"), "--json"]) == 0
    done = {Path(b["file"]).name: b["records"] for b in json.loads(capsys.readouterr().out)}
    assert done == {p.name: len(records[k::3]) for k, p in enumerate(files.values())}
    for compression, path in files.items():
        assert_index_of(path, compression)
    assert cli.main(["index", str(files["none"])]) == 2  # an index exists
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert cli.main(["index", str(files["none"]), "--overwrite", "--format", "both"]) == 0
    dali = Path(record_index.dali_index_uri(str(files["none"])))
    assert dali == tmp_path / "data" / "_index" / "dali" / "part-none.tfrecord.idx"
    assert dali.read_text() == dali_tfrecord2idx(files["none"])
    assert cli.main(["index", str(files["none"]), "--format", "dali", "--output", str(tmp_path / "idx"),
                     "--overwrite"]) == 0
    assert (tmp_path / "idx" / "part-none.tfrecord.idx").read_text() == dali_tfrecord2idx(files["none"])
    capsys.readouterr()
    assert cli.main(["index", str(files["gzip"]), "--format", "dali"]) == 2
    assert "DALI reads uncompressed TFRecord files only" in capsys.readouterr().err
    # The index hides from every reader: a glob of the directory, a directory listing.
    assert sorted(Path(f.uri).name for f in resolve_source(str(tmp_path / "data" / "*")).files) == sorted(
        p.name for p in files.values())
    assert verify_source(resolve_source(str(tmp_path / "data"))).ok


def test_index_command_names_a_damaged_file_and_writes_nothing(tmp_path, capsys):
    path = tf_write(tmp_path / "bad.tfrecord", batch(0, 50).to_pylist())
    data = bytearray(path.read_bytes())
    offset = framed_offsets(bytes(data))[20][0]
    data[offset + 9] ^= 0xFF  # the length CRC of record 20
    path.write_bytes(bytes(data))
    assert cli.main(["index", str(path)]) == 1
    assert f"bad.tfrecord: corrupt TFRecord at byte offset {offset}: length CRC" in capsys.readouterr().err
    assert not list((tmp_path / "_index").iterdir())


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_indexing_streams_a_file_larger_than_any_buffer_in_bounded_memory(tmp_path, compression):
    """DALI's indexer reads a whole shard (NVIDIA/DALI#4002): ours holds one read buffer, whatever
    the file and its records -- here 40 MiB with records of 6 MiB, larger than any buffer it uses."""
    rng = np.random.default_rng(0)
    sizes = [6 << 20, 17, 0, 6 << 20] + rng.integers(0, 64 << 10, 600).tolist() + [6 << 20, 5]
    path = tmp_path / f"big.tfrecord{'.gz' if compression == 'gzip' else ''}"
    with open(path, "wb") as f, TFRecordWriter(f, compression=compression, compression_level=1) as w:
        for n in sizes:
            w.write(bytes(n))  # zeros: cheap to make and to gzip
    assert path.stat().st_size > 2 * 6 << 20 or compression == "gzip"
    tracemalloc.start()
    try:
        built = record_index.build_index(str(path), compression)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert built.records == len(sizes)
    assert record_index.read_index(record_index.index_uri(str(path))).lengths.tolist() == sizes
    # Plain: a 1 MiB read and the walk's buffer.  Gzip adds zlib's unconsumed input (a copy of up to
    # a read) and the inflated chunk (up to 1 MiB); how much of a read stays unconsumed depends on
    # the compressor that wrote the file (zlib-rs packs these zeros half as tightly as zlib: 4.1
    # MiB at peak against 3.6).  Either way less than one of the file's 6 MiB records.
    bound = (4 if compression == "none" else 5) << 20
    assert peak < bound, f"{peak / 2**20:.1f} MiB at peak: more than the read buffers"


def test_lengths_walk_checks_length_crcs_and_truncation():
    stream = frame_records([b"a" * 10, b"b" * 2000, b""])
    assert np.concatenate(list(iter_record_lengths(io.BytesIO(stream), per=2))).tolist() == [10, 2000, 0]
    from tfrecord_io.core.framing import CorruptRecordError

    with pytest.raises(CorruptRecordError, match="byte offset 26: truncated data"):
        list(iter_record_lengths(io.BytesIO(stream[:100])))
    with pytest.raises(CorruptRecordError, match="truncated header"):
        list(iter_record_lengths(io.BytesIO(stream + b"xyz")))


# ---------------------------------------------------------------------------------------
# tfrecord-io verify
# ---------------------------------------------------------------------------------------
def swapped(path: Path) -> list[int]:
    """The file's record lengths with those of records 5 and 6 swapped: the same sum and size, so
    only a walk of the file tells that the index is wrong."""
    lengths = [n for _, n in framed_offsets(path.read_bytes())]
    assert lengths[5] != lengths[6]
    lengths[5], lengths[6] = lengths[6], lengths[5]
    return lengths


def test_verify_checks_each_index_against_its_file(tmp_path, capsys):
    out = tmp_path / "out"
    output.write_output(str(out), [[batch(0, 40)], [batch(40, 40)]], schema=SCHEMA, engine="test")
    assert verify_source(resolve_source(str(out))).ok
    shard = out / output.shard_name(1, 2)
    lengths, offset = swapped(shard), framed_offsets(shard.read_bytes())[5][0]
    manifest = json.loads((out / "_manifest.json").read_text())
    manifest["index"]["lengths"][shard.name] = record_index.encode_lengths(lengths)
    manifest["index"]["lengths"][output.shard_name(0, 2)] = "not base64!"
    (out / "_manifest.json").write_text(json.dumps(manifest))
    result = verify_source(resolve_source(str(out)))
    assert result.problem_count == 2 and result.by_check == {"index": 2}
    assert str(result.problems[1]) == (f"{shard.name} at byte offset {offset}: record 5 has {lengths[6]} data "
                                       f"bytes, its index says {lengths[5]}")
    assert "not an encoded record index" in str(result.problems[0])
    assert cli.main(["verify", str(out)]) == 3
    assert "indexes:  2 problems" in capsys.readouterr().out


def test_verify_checks_tfrecord_io_index_files(tmp_path, capsys):
    path = tf_write(tmp_path / "a.tfrecord", batch(0, 30).to_pylist())
    sink = io.BytesIO()
    w = record_index.IndexWriter(sink)
    w.add(swapped(path))
    w.finish(path.stat().st_size, "none")
    (tmp_path / "_index").mkdir()
    Path(record_index.index_uri(str(path))).write_bytes(sink.getvalue())
    result = verify_source(resolve_source(str(path)))
    assert result.by_check == {"index": 1} and "record 5 has" in str(result.problems[0])
    Path(record_index.index_uri(str(path))).write_bytes(b"TFRIDX\x00\x01 damaged")
    assert cli.main(["verify", str(path)]) == 3
    assert "not a tfrecord-io record index" in capsys.readouterr().out
