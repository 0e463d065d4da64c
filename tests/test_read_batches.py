"""``tfrecord_io.read_batches``: the framework-free reader (numpy / Arrow batches), local and on HDFS."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import tfrecord_io
from helpers import write_tfx_shards
from tfrecord_io.core.codec import encode_examples, encode_sequence_examples
from tfrecord_io.core.framing import CorruptRecordError, TFRecordWriter
from tfrecord_io.core.schema import Schema
from tfrecord_io.engines import batches as batches_module
from tfrecord_io.engines.batches import Ragged, read_batches
from tfrecord_io.storage import fs, output, sources

GOLDEN = Path(__file__).parent / "golden" / "spark-tfrecord"

SCHEMA = Schema.from_dict({"features": [
    {"name": "id", "type": "int64"}, {"name": "x", "type": "float", "default": -1.0},
    {"name": "city", "type": "string", "default": "?"}, {"name": "blob", "type": "bytes", "default": ""},
    {"name": "pair", "type": "int64", "shape": [2], "default": [0, 0]},
    {"name": "tags", "type": "string", "shape": [-1]}], "label": "id"})


def rows(start: int, n: int) -> dict[str, list]:
    ids = list(range(start, start + n))
    return {"id": ids, "x": [None if i % 7 == 0 else i / 4 for i in ids],
            "city": [None if i % 5 == 0 else f"c{i}é" for i in ids], "blob": [bytes([i % 256, 255]) for i in ids],
            "pair": [None if i % 11 == 0 else [i, -i] for i in ids], "tags": [None if i % 3 == 0 else ["t"] * (i % 4)
                                                                           for i in ids]}


def encoded(cols: dict) -> pa.Array:
    return encode_examples(pa.RecordBatch.from_pydict(cols, schema=SCHEMA.arrow_schema()), SCHEMA)


def write(base: str, shards: list[tuple[int, int]], compression: str = "none") -> str:
    output.write_output(base, [[encoded(rows(a, n))] for a, n in shards], schema=SCHEMA, compression=compression,
                        engine="test")
    return base


def ids_of(source, **kw) -> list[int]:
    return [i for b in read_batches(source, **kw) for i in b["id"].tolist()]


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> str:
    return write(str(tmp_path_factory.mktemp("rb") / "out"), [(0, 1000), (1000, 1500), (2500, 10), (2510, 490)],
                 compression="gzip")


def test_batches_hold_the_records_in_order_as_numpy(out):
    got = list(read_batches(out, batch_size=128))
    assert [len(b["id"]) for b in got] == [128] * 23 + [56]  # 3000 records; batches span files
    b = got[0]
    assert b["id"].dtype == np.int64 and b["x"].dtype == np.float32 and b["pair"].shape == (128, 2)
    assert b["city"].dtype == object and isinstance(b["city"][1], str) and isinstance(b["blob"][0], bytes)
    assert isinstance(b["tags"], Ragged) and len(b["tags"]) == 128
    want = rows(0, 3000)
    allx = np.concatenate([b["x"] for b in got])
    assert np.concatenate([b["id"] for b in got]).tolist() == want["id"]
    assert allx.tolist() == [-1.0 if v is None else np.float32(v) for v in want["x"]]  # defaults filled
    assert [c for b in got for c in b["city"].tolist()] == ["?" if v is None else v for v in want["city"]]
    assert [p for b in got for p in b["pair"].tolist()] == [[0, 0] if v is None else v for v in want["pair"]]
    assert [t for b in got for t in b["tags"].to_list()] == [v or [] for v in want["tags"]]
    assert tfrecord_io.read_batches is read_batches


def test_arrow_batches_keep_the_nulls(out):
    (batch,) = read_batches(out, batch_size=5000, features=["x", "tags"], format="arrow")
    assert isinstance(batch, pa.RecordBatch) and batch.schema.names == ["x", "tags"] and batch.num_rows == 3000
    assert batch.column("x").null_count == len([i for i in range(3000) if i % 7 == 0])
    assert batch.column("tags")[0].as_py() is None and batch.column("tags")[1].as_py() == ["t"]


@pytest.mark.parametrize("count", [2, 3, 4, 7])
@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_hold_every_record_exactly_once(out, count, shuffle):
    """4 files: 2 and 3 shards share out files, 7 shards (more than files) share out records."""
    seen = []
    for index in range(count):
        seen += ids_of(out, batch_size=100, shard=(index, count), shuffle=shuffle, seed=index, shuffle_buffer=300)
    assert sorted(seen) == list(range(3000))


def test_one_file_many_shards(tmp_path):
    base = write(str(tmp_path / "one"), [(0, 1001)])
    parts = [ids_of(base, batch_size=64, shard=(i, 4)) for i in range(4)]
    assert sorted(i for p in parts for i in p) == list(range(1001))
    assert [len(p) for p in parts] == [251, 250, 250, 250]


def test_shuffle_is_seeded_and_differs_by_epoch(out):
    a = ids_of(out, batch_size=100, shuffle=True, seed=3, num_epochs=2)
    b = ids_of(out, batch_size=100, shuffle=True, seed=3, num_epochs=2)
    assert a == b and sorted(a[:3000]) == sorted(a[3000:]) == list(range(3000))
    assert a[:3000] != a[3000:] and a[:3000] != list(range(3000))
    assert ids_of(out, batch_size=100, shuffle=True, seed=4) != a[:3000]


def test_epochs_and_drop_remainder(out):
    sizes = [len(b["id"]) for b in read_batches(out, batch_size=1000, num_epochs=3, drop_remainder=True)]
    assert sizes == [1000] * 9
    sizes = [len(b["id"]) for b in read_batches(out, batch_size=1024, num_epochs=2)]
    assert sizes == [1024, 1024, 952] * 2  # each epoch ends with its own partial batch
    forever = read_batches(out, batch_size=1000, num_epochs=None)
    assert sum(len(next(forever)["id"]) for _ in range(10)) == 10000


@pytest.mark.parametrize("threads", [1, 2])
def test_a_file_bigger_than_a_batch_is_streamed(tmp_path, monkeypatch, threads):
    big = write(str(tmp_path / "big"), [(0, 60_000)])
    read = {"n": 0}
    real = batches_module.iter_file_chunks

    def counted(file, **kw):
        for offsets, records in real(file, **kw):
            read["n"] += len(records)
            yield offsets, records

    monkeypatch.setattr(batches_module, "iter_file_chunks", counted)
    it = read_batches(big, batch_size=100, shuffle=True, seed=0, shuffle_buffer=1000, decode_threads=threads)
    ahead = (threads + 1) * batches_module._CHUNK_RECORDS  # chunks decoding, and the next one read
    first = next(it)
    assert len(first["id"]) == 100
    assert read["n"] <= ahead + 1000, read  # chunks and a window, not the file
    held = [read["n"] - 100]
    for k, b in enumerate(it, start=2):
        held.append(read["n"] - 100 * k)
    assert max(held) <= ahead + 1000 + 100 and read["n"] == 60_000


@pytest.fixture(scope="module")
def chunks(tmp_path_factory) -> str:
    """Three files, the first of several chunks (several decodes in flight in one file)."""
    return write(str(tmp_path_factory.mktemp("rbt") / "out"), [(0, 30_000), (30_000, 700), (30_700, 9_300)])


def _same_batches(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], Ragged):
                assert x[k].to_list() == y[k].to_list(), k
            else:
                assert np.array_equal(x[k], y[k]), k


@pytest.mark.parametrize("kw", [{}, {"shuffle": True, "seed": 5, "shuffle_buffer": 3000, "num_epochs": 2},
                                {"shard": (1, 2)}, {"shard": (2, 5), "shuffle": True, "seed": 1}])
def test_decode_threads_give_the_same_batches_in_the_same_order(chunks, kw):
    one = list(read_batches(chunks, batch_size=1000, decode_threads=1, **kw))
    for threads in (2, 3, None):
        _same_batches(one, list(read_batches(chunks, batch_size=1000, decode_threads=threads, **kw)))
    arrow = [list(read_batches(chunks, batch_size=1000, decode_threads=t, format="arrow", **kw)) for t in (1, 2)]
    assert arrow[0] == arrow[1]
    if not kw:
        assert np.concatenate([b["id"] for b in one]).tolist() == list(range(40_000))


@pytest.mark.parametrize("skip", [False, True])
def test_decode_threads_meet_a_damaged_file_where_one_thread_does(tmp_path, skip):
    base = write(str(tmp_path / "c"), [(0, 30_000), (30_000, 50)])
    first = sorted(p for p in Path(base).iterdir() if p.name.startswith("part-"))[0]
    data = bytearray(first.read_bytes())
    data[len(data) * 2 // 3] ^= 0xFF  # past a few chunks
    first.write_bytes(bytes(data))
    got = {}
    for threads in (1, 2):
        ids, error = [], None
        try:
            for b in read_batches(base, batch_size=500, decode_threads=threads,
                                  on_corrupt="skip" if skip else "error"):
                ids += b["id"].tolist()
        except CorruptRecordError as e:
            error = str(e)
        got[threads] = ids, error
    assert got[1] == got[2]
    ids, error = got[1]
    assert 10_000 < len(ids) < 30_050 and (error is None) == skip
    assert ids[:15_000] == list(range(15_000)) and (not skip or ids[-50:] == list(range(30_000, 30_050)))


def test_decode_threads_give_the_records_before_a_shard_that_is_not_the_manifests(tmp_path):
    """The first shard replaced by one of the same size and record lengths (other floats): the
    error comes after its last record (the CRC-32C of its bytes), and every one of its records
    comes before it, whatever the threads."""
    from tfrecord_io.storage.sources import ShardMismatchError

    base = write(str(tmp_path / "out"), [(0, 30_000), (30_000, 500)])
    cols = rows(0, 30_000)
    cols["x"] = [None if v is None else v * 2 for v in cols["x"]]
    output.write_output(str(tmp_path / "twin"), [[encoded(cols)]], schema=SCHEMA, engine="test")
    first = sorted(p.name for p in Path(base).iterdir() if p.name.startswith("part-"))[0]
    (tmp_path / "twin" / output.shard_name(0, 1)).replace(Path(base) / first)
    for threads in (1, 2):
        ids = []
        with pytest.raises(ShardMismatchError, match="CRC-32C"):
            for b in read_batches(base, batch_size=500, decode_threads=threads):
                ids += b["id"].tolist()
        assert ids == list(range(30_000)), threads


def test_an_abandoned_reader_ends_its_decode_threads(chunks):
    import threading

    def decoders():
        return [t for t in threading.enumerate() if t.name.startswith("tfrecord-io-decode")]

    it = read_batches(chunks, batch_size=100, decode_threads=2)
    next(it)
    assert decoders()
    it.close()
    for t in decoders():
        t.join(timeout=30)
    assert not decoders()


def test_a_reader_made_before_a_fork_reads_in_the_child(chunks):
    """PyTorch's DataLoader workers: the reader made in the parent (which has read with threads
    before), iterated in a forked child."""
    import os

    assert len(list(read_batches(chunks, batch_size=5000, decode_threads=2))) == 8  # threads in the parent
    it = read_batches(chunks, batch_size=5000, decode_threads=2)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, report the sum of the ids, leave without the parent's clean-ups
        code = 1
        try:
            os.write(w, str(sum(int(b["id"].sum()) for b in it)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        got = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and got == str(sum(range(40_000)))


def test_file_chunks_join_the_reads_of_large_records(tmp_path):
    """iter_file_chunks (read_batches' and spark.read's walk): the records and offsets of the record
    walk, at most max_records a chunk, the reads of large records joined; a damaged record: the
    records before it, then its error."""
    from tfrecord_io.core.framing import frame_records
    from tfrecord_io.storage.sources import iter_file_chunks, iter_file_records

    rng = np.random.default_rng(3)
    records = [rng.bytes(n) for n in [3000] * 2000 + [50] * 9000 + [3000] * 500]
    path = tmp_path / "mixed.tfrecord"
    path.write_bytes(frame_records(records))
    (file,) = sources.resolve_source(str(path)).files
    want = list(iter_file_records(file))
    firsts = {}
    for min_records, max_records in ((1, 4096), (1024, 4096), (1024, 1500), (5000, 4096)):
        chunks = list(iter_file_chunks(file, max_records=max_records, min_records=min_records))
        assert [(o, r) for offs, recs in chunks for o, r in zip(offs.tolist(), recs.to_pylist())] == want
        assert max(len(r) for _, r in chunks) <= max_records
        firsts[min_records, max_records] = len(chunks[0][1])
    # a 1 MiB read holds ~348 records of 3,000 bytes: alone, joined until 1,024 records, or 4 MiB
    per_read = firsts[1, 4096]
    assert 300 < per_read < 400 and 1024 <= firsts[1024, 4096] == firsts[1024, 1500] < 1024 + per_read
    assert (4 << 20) <= firsts[5000, 4096] * 3012 < (5 << 20) + (1 << 20)
    data = bytearray(path.read_bytes())
    data[want[1500][0] + 20] ^= 1
    path.write_bytes(bytes(data))
    got = []
    with pytest.raises(CorruptRecordError, match=f"byte offset {want[1500][0]}"):
        for offs, recs in iter_file_chunks(file, max_records=4096, min_records=1024):
            got += recs.to_pylist()
    assert got == records[:1500]


def test_sequence_examples_are_padded_with_lengths(tmp_path):
    schema = Schema.from_dict({"record_type": "sequence_example", "group_by": "s",
                               "context": [{"name": "s", "type": "string"}],
                               "sequence": [{"name": "v", "type": "float"},
                                            {"name": "k", "type": "int64", "shape": [2]},
                                            {"name": "w", "type": "bytes", "shape": [-1]}]})
    groups = pa.record_batch({"s": ["a", "b", "c"], "v": pa.array([[1.0, 2.0], [3.0], None], pa.list_(pa.float32())),
                              "k": pa.array([[[1, 2], [3, 4]], [[5, 6]], []], pa.list_(pa.list_(pa.int64()))),
                              "w": pa.array([[[b"x"], []], [[b"y", b"z"]], []], pa.list_(pa.list_(pa.binary())))})
    output.write_output(str(tmp_path / "seq"), [[encode_sequence_examples(groups, schema)]], schema=schema,
                        engine="test")
    (b,) = read_batches(str(tmp_path / "seq"), batch_size=10)
    assert b["s"].tolist() == ["a", "b", "c"]
    assert b["v"].tolist() == [[1.0, 2.0], [3.0, 0.0], [0.0, 0.0]] and b["v_length"].tolist() == [2, 1, 0]
    assert b["k"].shape == (3, 2, 2) and b["k"][1].tolist() == [[5, 6], [0, 0]] and b["k_length"].tolist() == [2, 1, 0]
    assert b["w"].to_list() == [[[b"x"], []], [[b"y", b"z"]], []] and b["w_length"].tolist() == [2, 1, 0]


def test_files_without_a_manifest_globs_lists_and_inferred_schemas(tmp_path):
    got = list(read_batches(str(GOLDEN / "example-gzip" / "part-*"), batch_size=8, format="arrow"))
    assert sum(b.num_rows for b in got) == 20 and got[0].schema.names == ["blob", "id", "name", "tags", "vec", "x"]
    plain = str(tmp_path / "a.tfrecord")
    with TFRecordWriter(plain) as w:
        w.write_batch(encoded(rows(0, 30)))
    assert ids_of([plain, plain], batch_size=7, schema=SCHEMA) == list(range(30)) * 2


def test_a_missing_feature_without_default_names_file_and_record(tmp_path):
    schema = Schema.from_dict({"features": [{"name": "id", "type": "int64"}, {"name": "x", "type": "float"}]})
    path = str(tmp_path / "f.tfrecord")
    with TFRecordWriter(path) as w:
        w.write_batch(encode_examples(pa.record_batch({"id": [0, 1, 2], "x": pa.array([1.0, None, 3.0], pa.float32())}),
                                      schema))
    with pytest.raises(ValueError, match=r"f\.tfrecord: record 1 at byte offset \d+: feature 'x' is missing .* no "
                                         r"default"):
        list(read_batches(path, batch_size=2, schema=schema))
    assert [b["id"].tolist() for b in read_batches(path, batch_size=2, schema=schema, features=["id"])] == [[0, 1], [2]]


def test_features_still_refuse_a_record_damaged_in_a_feature_not_read(tmp_path):
    from record_strategies import ld, varint

    from tfrecord_io.core.decode import RecordDecodeError

    def record(i: int, x: bytes) -> bytes:
        entries = [(b"id", ld(0x1A, ld(0x0A, varint(i)))), (b"x", x)]
        return ld(0x0A, b"".join(ld(0x0A, ld(0x0A, k) + ld(0x12, f)) for k, f in entries))

    schema = Schema.from_dict({"features": [{"name": "id", "type": "int64"}, {"name": "x", "type": "float"}]})
    records = [record(i, ld(0x12, ld(0x0A, struct.pack("<f", i)))) for i in range(6)]
    records[4] = record(4, ld(0x12, ld(0x0A, bytes(5))))  # 5 bytes of packed floats
    path = str(tmp_path / "f.tfrecord")
    with TFRecordWriter(path) as w:
        w.write_batch(records)
    offset = sum(len(r) + 16 for r in records[:4])
    for features in (None, ["id"]):
        with pytest.raises(RecordDecodeError, match=rf"f\.tfrecord: record 4 at byte offset {offset}: not a valid"):
            list(read_batches(path, batch_size=3, schema=schema, features=features))
    del records[4]
    with TFRecordWriter(path) as w:
        w.write_batch(records)
    assert [b["id"].tolist() for b in read_batches(path, batch_size=3, schema=schema, features=["id"])] == [
        [0, 1, 2], [3, 5]]


def test_corrupt_files_fail_naming_the_offset_or_are_skipped(tmp_path):
    base = write(str(tmp_path / "c"), [(0, 100)])
    (shard,) = [p for p in Path(base).iterdir() if p.name.startswith("part-")]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match=rf"{shard}: corrupt TFRecord at byte offset \d+"):
        list(read_batches(base, batch_size=10))
    kept = ids_of(base, batch_size=10, on_corrupt="skip")
    assert 0 < len(kept) < 100 and kept == list(range(len(kept)))


@pytest.mark.parametrize("kw, message", [
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"batch_size": 8, "shard": (3, 3)}, "shard must be"),
    ({"batch_size": 8, "features": ["idd"]}, "did you mean 'id'"),
    ({"batch_size": 8, "format": "torch"}, "format must be"),
    ({"batch_size": 8, "decode_threads": 0}, "decode_threads must be a positive integer or None"),
    ({"batch_size": 8, "compression": "lz4"}, "compression"),
])
def test_bad_options_fail_at_the_call(out, kw, message):
    with pytest.raises((ValueError, TypeError), match=message):
        read_batches(out, **kw)


def test_an_uncommitted_output_is_refused(tmp_path):
    base = write(str(tmp_path / "u"), [(0, 10)])
    (Path(base) / "_SUCCESS").unlink()
    with pytest.raises(ValueError, match="not a committed"):
        read_batches(base, batch_size=4)


def test_on_hdfs(hdfs, tmp_path):
    local = write(str(tmp_path / "o"), [(0, 700), (700, 300)], compression="zlib")
    root = hdfs.uri(f"/read_batches/{tmp_path.name}")
    for p in sorted(Path(local).iterdir()):
        if p.is_file():
            with fs.open(f"{root}/{p.name}", "wb") as f:
                f.write(p.read_bytes())
    assert ids_of(root, batch_size=64) == list(range(1000))
    parts = [ids_of(root, batch_size=64, shard=(i, 3), shuffle=True, seed=1) for i in range(3)]
    assert sorted(i for p in parts for i in p) == list(range(1000))
    (b,) = read_batches(f"{root}/part-*", batch_size=2000, schema=SCHEMA, features=["x"])
    assert struct.pack("<f", b["x"][1]) == struct.pack("<f", 0.25)


def test_a_feature_empty_in_the_first_records_is_typed_by_the_first_value_anywhere(tmp_path):
    """TFX's shards: 'tip' is an empty Feature in every record but one, deep in the third shard
    (past every file's first records): typed int64 from it, not guessed as a string."""
    shards = [[{"id": k * 3000 + i, "tip": None, "city": "a"} for i in range(3000)] for k in range(3)]
    shards[2][2500]["tip"] = 7
    src = write_tfx_shards(tmp_path / "tfx", shards)
    got = list(read_batches(str(src / "*.gz"), batch_size=4096, shuffle=False))
    tips = np.concatenate([b["tip"].values for b in got])
    assert tips.dtype == np.int64 and tips.tolist() == [7]
    assert sum(len(b["id"]) for b in got) == 9000


def test_int64_and_float_widen_to_float_and_other_kinds_conflict_naming_both_records(tmp_path, caplog):
    src = write_tfx_shards(tmp_path / "mixed", [[{"v": 1}, {"v": 2}], [{"v": 2.5}]])
    got = list(read_batches(str(src / "*.gz"), batch_size=10, shuffle=False))
    assert got[0]["v"].dtype == np.float32 and sorted(got[0]["v"].tolist()) == [1.0, 2.0, 2.5]
    clash = write_tfx_shards(tmp_path / "clash", [[{"v": 1}, {"v": 2}], [{"v": 3}, {"v": "three"}]])
    with pytest.raises(ValueError, match=r"feature 'v' is bytes_list in .*00001-of-00002\.gz \(record 1 at byte "
                                         r"offset \d+\) and int64_list in .*00000-of-00002\.gz \(record 0 .*give the "
                                         r"schema|feature 'v' is int64_list in .*00000-of-00002\.gz \(record 0 at byte "
                                         r"offset 0\) and bytes_list in .*00001-of-00002\.gz \(record 1 at byte offset "
                                         r"\d+\).*give the schema"):
        list(read_batches(str(clash / "*.gz"), batch_size=10))
    empty = write_tfx_shards(tmp_path / "empty", [[{"v": 1, "never": None}]])
    with caplog.at_level("WARNING"):
        got = list(read_batches(str(empty / "*.gz"), batch_size=10))
    assert got[0]["never"].values.tolist() == []
    assert any("feature 'never' has no value in the 1 records read" in r.getMessage() for r in caplog.records)
