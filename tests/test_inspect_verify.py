"""decode, inspect and verify against real TensorFlow-written files, our own outputs and a real HDFS."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import TF_COMPRESSION, tfrecord_io_cli, write_tfx_shards
from tfrecord_io.storage import fs, output
from tfrecord_io.core.codec import encode_examples, encode_sequence_examples
from tfrecord_io.core.decode import RecordDecodeError, decode_example, decode_record, decode_sequence_example
from tfrecord_io.core.framing import iter_records
from tfrecord_io.commands.inspect import inspect_source
from tfrecord_io.commands.reading import resolve_source
from tfrecord_io.storage.sources import sniff_compression
from tfrecord_io.core.schema import Schema
from tfrecord_io.commands.verify import verify_source
from tfrecord_io.storage.index import encode_lengths

EXE = Path(sys.executable).parent / "tfrecord-io"
GOLDEN = Path(__file__).resolve().parent / "golden"

SCHEMA = Schema.from_dict({"features": [
    {"name": "fare", "type": "float", "default": 0.0},
    {"name": "n", "type": "int64", "required": True},
    {"name": "tags", "type": "string", "shape": [-1]},
    {"name": "emb", "type": "float", "shape": [3]},
    {"name": "city", "type": "string", "default": ""},
]})

SEQ_SCHEMA = Schema.from_dict({
    "record_type": "sequence_example", "group_by": "user",
    "context": [{"name": "user", "type": "int64"}, {"name": "country", "type": "string", "default": ""}],
    "sequence": [{"name": "clicks", "type": "int64"}, {"name": "dwell", "type": "float", "shape": [2]}],
})


def cli(*args: str, check: bool = False, **kw) -> subprocess.CompletedProcess:
    return tfrecord_io_cli(*args, check=check, timeout=300, **kw)


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------
def example_rows(n: int, seed: int) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    return {
        "fare": [float(np.float32(v)) for v in rng.normal(10, 3, n)],
        "n": [int(v) for v in rng.integers(-50, 1000, n)],
        "tags": [[f"t{j}" for j in range(k)] for k in rng.integers(0, 4, n)],
        "emb": [[float(np.float32(v)) for v in rng.normal(size=3)] for _ in range(n)],
        "city": [["nyc", "sf", "zürich"][k] if k < 3 else None for k in rng.integers(0, 4, n)],
    }


def write_output(base: str, parts: list[dict], schema: Schema = SCHEMA, compression: str = "none",
                 encode=encode_examples) -> dict:
    """A committed output of ours: one shard per entry of ``parts`` (columns -> values)."""
    def batch(cols: dict) -> pa.RecordBatch:
        if schema.record_type == "example":
            return pa.RecordBatch.from_pydict(cols, schema=pa.schema(
                [schema.arrow_schema().field(name) for name in cols]))
        # one row per group: sequence columns hold the steps (types inferred, cast by the encoder)
        return pa.RecordBatch.from_pydict(cols)

    return output.write_output(base, [[encode(batch(cols), schema)] for cols in parts], schema=schema,
                               compression=compression, engine="test")


def tf_example(row: dict) -> tf.train.Example:
    ex = tf.train.Example()
    f = ex.features.feature
    f["fare"].float_list.value.append(row["fare"])
    f["n"].int64_list.value.append(row["n"])
    f["tags"].bytes_list.value.extend(t.encode() for t in row["tags"])
    f["emb"].float_list.value.extend(row["emb"])
    if row["city"] is not None:
        f["city"].bytes_list.value.append(row["city"].encode())
    return ex


def rows_of(cols: dict) -> list[dict]:
    return [dict(zip(cols, values)) for values in zip(*cols.values())]


def write_tf(path: Path, messages: list, compression: str = "none") -> Path:
    options = tf.io.TFRecordOptions(compression_type=TF_COMPRESSION[compression])
    with tf.io.TFRecordWriter(str(path), options) as w:
        for m in messages:
            w.write(m if isinstance(m, bytes) else m.SerializeToString())
    return path


def tf_sequence_example(user: int, clicks: list[int], dwell: list[list[float]], country: str | None):
    se = tf.train.SequenceExample()
    se.context.feature["user"].int64_list.value.append(user)
    if country is not None:
        se.context.feature["country"].bytes_list.value.append(country.encode())
    cl = se.feature_lists.feature_list["clicks"]
    for c in clicks:
        cl.feature.add().int64_list.value.append(c)
    dw = se.feature_lists.feature_list["dwell"]
    for d in dwell:
        dw.feature.add().float_list.value.extend(d)
    return se


def record_offsets(path: Path, compression: str = "none") -> list[int]:
    return [off for off, _ in iter_records(str(path), compression=compression)]


@pytest.fixture
def our_output(tmp_path) -> tuple[str, list[dict]]:
    parts = [example_rows(40, 1), example_rows(35, 2)]
    base = str(tmp_path / "out")
    write_output(base, parts)
    return base, parts


# ---------------------------------------------------------------------------------------
# decode
# ---------------------------------------------------------------------------------------
def canonical(msg) -> dict:
    def feat(ft):
        kind = ft.WhichOneof("kind")
        values = list(getattr(ft, kind).value) if kind else []
        if kind == "float_list":
            values = [struct.pack("<f", v) for v in values]
        return kind, values

    if isinstance(msg, tf.train.Example):
        return {k: feat(v) for k, v in msg.features.feature.items()}
    return ({k: feat(v) for k, v in msg.context.feature.items()},
            {k: [feat(s) for s in v.feature] for k, v in msg.feature_lists.feature_list.items()})


def ours(features: dict) -> dict:
    return {k: (kind, [struct.pack("<f", v) for v in vals] if kind == "float_list" else vals)
            for k, (kind, vals) in features.items()}


def edge_example() -> tf.train.Example:
    ex = tf.train.Example()
    f = ex.features.feature
    f["ints"].int64_list.value.extend([0, 1, -1, 127, 128, 2**63 - 1, -(2**63), 300, -300])
    f["floats"].float_list.value.extend([0.1, -0.0, float("nan"), float("inf"), float("-inf"), 3.4e38, 1e-45])
    f["bytes"].bytes_list.value.extend([b"", b"plain", b"\xff\xfe", "zürich ☃".encode(), b"x" * 300])
    f["no kind"].CopyFrom(tf.train.Feature())
    f["empty ints"].int64_list.SetInParent()
    f["ünïcode name"].float_list.value.append(2.5)
    f["big"].float_list.value.extend(np.arange(1000, dtype=np.float32).tolist())
    return ex


def test_decode_example_matches_tensorflow():
    ex = edge_example()
    got = decode_example(ex.SerializeToString())
    assert set(got) == set(ex.features.feature)
    assert ours(got) == canonical(ex)
    assert got["no kind"] == (None, [])
    assert got["empty ints"] == ("int64_list", [])
    assert decode_example(b"") == {}


_features = st.dictionaries(
    st.text(min_size=0, max_size=8),
    st.one_of(
        st.none(),
        st.tuples(st.just("int64_list"), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6)),
        st.tuples(st.just("float_list"), st.lists(st.floats(width=32, allow_nan=True), max_size=6)),
        st.tuples(st.just("bytes_list"), st.lists(st.binary(max_size=40), max_size=6)),
    ),
    max_size=6,
)


def _fill(features_proto, spec: dict) -> None:
    for name, value in spec.items():
        feature = features_proto.feature[name]
        if value is not None:
            kind, values = value
            getattr(feature, kind).value.extend(values)
            getattr(feature, kind).SetInParent()


@settings(max_examples=150, deadline=None)
@given(context=_features, lists=st.one_of(st.none(), st.dictionaries(st.text(max_size=6), st.lists(_features.map(
    lambda d: next(iter(d.values()), None)), max_size=4), max_size=4)))
def test_decode_random_records_match_tensorflow(context, lists):
    if lists is None:
        msg = tf.train.Example()
        _fill(msg.features, context)
        assert ours(decode_example(msg.SerializeToString())) == canonical(msg)
        return
    msg = tf.train.SequenceExample()
    _fill(msg.context, context)
    msg.feature_lists.SetInParent()
    for name, steps in lists.items():
        fl = msg.feature_lists.feature_list[name]
        for step in steps:
            f = fl.feature.add()
            if step is not None:
                getattr(f, step[0]).value.extend(step[1])
                getattr(f, step[0]).SetInParent()
    got_context, got_lists = decode_sequence_example(msg.SerializeToString())
    assert (ours(got_context), {k: [ours({0: s})[0] for s in v] for k, v in got_lists.items()}) == canonical(msg)


def test_decode_merges_like_protobuf():
    """Concatenated serializations are a protobuf merge; unpacked numbers are legal too."""
    a, b = edge_example(), tf.train.Example()
    b.features.feature["ints"].int64_list.value.extend([5, 6])     # same kind: the lists concatenate
    b.features.feature["floats"].int64_list.value.append(7)        # another kind: replaces (a oneof)
    b.features.feature["new"].bytes_list.value.append(b"n")
    data = a.SerializeToString() + b.SerializeToString()
    assert ours(decode_example(data)) == canonical(tf.train.Example.FromString(data))
    # Int64List / FloatList with unpacked values (field 1 as varint / fixed32), as old writers may emit.
    ints = b"\x08\x05\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"  # 5, -1
    floats = b"\x0d" + struct.pack("<f", 1.5)
    feature_i = b"\x1a" + bytes([len(ints)]) + ints
    feature_f = b"\x12" + bytes([len(floats)]) + floats

    def entry(name: bytes, feature: bytes) -> bytes:
        body = b"\x0a" + bytes([len(name)]) + name + b"\x12" + bytes([len(feature)]) + feature
        return b"\x0a" + bytes([len(body)]) + body

    features = entry(b"i", feature_i) + entry(b"f", feature_f)
    data = b"\x0a" + bytes([len(features)]) + features
    assert ours(decode_example(data)) == canonical(tf.train.Example.FromString(data))
    assert decode_example(data) == {"i": ("int64_list", [5, -1]), "f": ("float_list", [1.5])}


def test_decode_sequence_example_matches_tensorflow():
    se = tf_sequence_example(7, [1, 2, 3], [[0.5, 1.5], [2.5, 3.5]], "ch")
    se.feature_lists.feature_list["empty"].SetInParent()
    context, lists = decode_sequence_example(se.SerializeToString())
    assert (ours(context), {k: [ours({0: s})[0] for s in v] for k, v in lists.items()}) == canonical(se)
    assert lists["empty"] == []
    rec = decode_record(se.SerializeToString())
    assert rec.is_sequence
    with pytest.raises(RecordDecodeError, match="SequenceExample"):
        decode_example(se.SerializeToString())
    # An Example read as a SequenceExample: its features are the context, no feature_lists.
    assert decode_sequence_example(edge_example().SerializeToString())[1] == {}


def test_decode_errors_name_the_feature():
    bad_list = b"\x12\x05" + b"\x0a\x03abc"   # float_list holding 3 packed bytes
    body = b"\x0a\x04fare" + b"\x12" + bytes([len(bad_list)]) + bad_list
    features = b"\x0a" + bytes([len(body)]) + body
    data = b"\x0a" + bytes([len(features)]) + features
    with pytest.raises(RecordDecodeError, match=r"feature 'fare'.*not a multiple of 4"):
        decode_record(data)
    for garbage in (b"hello, tfrecord", b"\x00" * 12, b"\xff\xfe\x80\x81", bytes(range(256))):
        with pytest.raises(RecordDecodeError, match="not a valid tf.train.Example"):
            decode_record(garbage)
    with pytest.raises(TypeError):
        decode_record(12)


# ---------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------
def test_sniff_compression(tmp_path):
    msgs = [tf_example(r) for r in rows_of(example_rows(5, 3))]
    for compression in ("none", "gzip", "zlib"):
        path = write_tf(tmp_path / f"data-{compression}", msgs, compression)  # no telling extension
        assert sniff_compression(str(path)) == compression
    (tmp_path / "empty").write_bytes(b"")
    assert sniff_compression(str(tmp_path / "empty")) == "none"


def test_resolve_source_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        resolve_source(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="no files match"):
        resolve_source(str(tmp_path / "*.tfrecord"))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "_SUCCESS").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="no record files"):
        resolve_source(str(tmp_path / "d"))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "_manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="_manifest.json"):
        resolve_source(str(tmp_path / "m"))


# ---------------------------------------------------------------------------------------
# inspect
# ---------------------------------------------------------------------------------------
def expected_json(row: dict) -> dict:
    f32 = lambda v: float(str(np.float32(v)))  # noqa: E731 - the shortest float32 spelling
    out = {"fare": {"float_list": [f32(row["fare"])]}, "n": {"int64_list": [row["n"]]},
           "tags": {"bytes_list": list(row["tags"])}, "emb": {"float_list": [f32(v) for v in row["emb"]]}}
    if row["city"] is not None:
        out["city"] = {"bytes_list": [row["city"]]}
    return out


def test_inspect_our_output(our_output):
    base, parts = our_output
    info = inspect_source(resolve_source(base), head=3)
    assert info["records"] == 75 and info["records_from"] == "manifest"
    assert [f["records"] for f in info["files"]] == [40, 35]
    assert info["record_type"] == "example" and info["schema"]["from"] == "manifest"
    assert [f["name"] for f in info["schema"]["features"]] == [f.name for f in SCHEMA.features]
    assert [r["features"] for r in info["head"]] == [expected_json(r) for r in rows_of(parts[0])[:3]]
    assert [r["offset"] for r in info["head"]] == record_offsets(Path(base) / info["files"][0]["path"])[:3]
    assert list(info["head"][0]["features"]) == [f.name for f in SCHEMA.features if f.name in
                                                  info["head"][0]["features"]]  # schema order


@pytest.mark.parametrize("compression,name", [("none", "data.tfrecord"), ("gzip", "data.tfrecord.gz"),
                                              ("zlib", "data.tfrecord.zlib"), ("gzip", "data-sniffed")])
def test_inspect_tf_written_examples_cli(tmp_path, compression, name):
    cols = example_rows(30, 4)
    msgs = [tf_example(r) for r in rows_of(cols)]
    msgs[1].features.feature["blob"].bytes_list.value.append(b"\xff\x00\xfe")  # not UTF-8
    path = write_tf(tmp_path / name, msgs, compression)
    proc = cli("inspect", str(path), "--head", "2", "--json", check=True)
    info = json.loads(proc.stdout)
    assert info["records"] == 30 and info["records_from"] == "scan"
    assert info["files"][0]["compression"] == compression
    # .gz / .zlib say so; anything else is sniffed (a ".tfrecord" may well be gzipped)
    assert info["files"][0]["compression_from"] == ("extension" if compression != "none" and "." in name
                                                    else "sniffed")
    assert info["record_type"] == "example" and info["schema"]["from"] == "records"
    by_name = {f["name"]: f for f in info["schema"]["features"]}
    assert by_name["fare"]["kinds"] == {"float_list": 30} and by_name["fare"]["shape"] is None
    assert by_name["fare"]["type"] == "float"
    assert by_name["emb"]["values"] == [3, 3] and by_name["emb"]["shape"] == [3]
    assert by_name["tags"]["shape"] == [-1] and by_name["tags"]["type"] == "string"
    assert by_name["blob"]["present"] == 1 and by_name["blob"]["type"] == "bytes"
    assert by_name["city"]["present"] == sum(c is not None for c in cols["city"])
    rows = rows_of(cols)
    assert info["head"][0]["features"] == dict(sorted(expected_json(rows[0]).items()))
    assert info["head"][1]["features"]["blob"] == {"bytes_list": [{"base64": base64.b64encode(b"\xff\x00\xfe").decode()}]}
    # the text form
    text = cli("inspect", str(path), "--head", "1", check=True).stdout
    assert "records:     30 (counted)" in text and "first 1 records:" in text
    assert f"fare  float_list  [{np.float32(rows[0]['fare'])!s}]" in text


def test_inspect_sequence_examples(tmp_path):
    msgs = [tf_sequence_example(1, [1, 2, 3], [[0.5, 1.0], [1.5, 2.0], [2.5, 3.0]], "ch"),
            tf_sequence_example(2, [], [], None),
            tf_sequence_example(3, [9], [[float("nan"), float("inf")]], "de")]
    path = write_tf(tmp_path / "seq.tfrecord", msgs)
    info = json.loads(cli("inspect", str(path), "--json", check=True).stdout)
    assert info["record_type"] == "sequence_example" and info["records"] == 3
    assert info["head"][0]["context"] == {"country": {"bytes_list": ["ch"]}, "user": {"int64_list": [1]}}
    assert info["head"][0]["feature_lists"]["clicks"] == [{"int64_list": [1]}, {"int64_list": [2]},
                                                          {"int64_list": [3]}]
    assert info["head"][1]["feature_lists"] == {"clicks": [], "dwell": []}
    assert info["head"][2]["feature_lists"]["dwell"] == [{"float_list": ["NaN", "Infinity"]}]
    lists = {f["name"]: f for f in info["schema"]["feature_lists"]}
    assert lists["clicks"]["steps"] == [0, 3] and lists["dwell"]["values"] == [2, 2]
    text = cli("inspect", str(path), check=True).stdout
    assert "feature_lists:" in text and "clicks  3 steps" in text

    # our own SequenceExample output, with its manifest
    base = str(tmp_path / "seq-out")
    cols = {"user": [1, 2], "country": ["ch", None], "clicks": [[1, 2], [3]],
            "dwell": [[[0.5, 1.0], [1.5, 2.0]], [[2.5, 3.0]]]}
    write_output(base, [cols], SEQ_SCHEMA, "gzip", encode_sequence_examples)
    info = inspect_source(resolve_source(base))
    assert info["record_type"] == "sequence_example" and info["records_from"] == "manifest"
    assert info["head"][1]["context"] == {"user": {"int64_list": [2]}}
    assert info["head"][1]["feature_lists"]["dwell"] == [{"float_list": [2.5, 3.0]}]


def test_inspect_records_that_are_not_examples():
    info = inspect_source(resolve_source(str(GOLDEN / "records.tfrecord.zlib")), head=4)
    assert info["records"] == 9
    first = info["head"][0]  # the golden file starts with an empty record: an empty Example
    assert first["features"] == {}
    assert "error" in info["head"][2] and base64.b64decode(info["head"][2]["base64"]) == b"hello, tfrecord"
    assert info["schema"]["undecodable"] >= 1


def test_inspect_errors_exit_nonzero(tmp_path):
    proc = cli("inspect", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr  # unreadable source


def test_inspect_infers_what_read_batches_reads_on_shards_tensorflow_wrote(tmp_path):
    """#29: without a manifest, inspect shows the schema spark.read and read_batches infer, from the
    same records (the first of every file, and on while a feature has no kind), on TFX shards
    written by TensorFlow where the first records alone (inspect read the first 1,000) guess wrong:
    'tip' is an empty Feature all through the first file and a float in the second, 'late' is only
    in the second file, 'n' is int64 in the first and float in the second (widened to float)."""
    from tfrecord_io import read_batches

    first = [{"id": i, "tip": None, "n": i} for i in range(1500)]
    second = [{"id": 1500 + i, "tip": i / 4, "n": i + 0.5, "late": f"s{i}"} for i in range(1500)]
    src = write_tfx_shards(tmp_path / "tfx", [first, second])
    info = json.loads(cli("inspect", str(src / "*.gz"), "--json", check=True).stdout)
    shown = {f["name"]: f for f in info["schema"]["features"]}
    assert {n: (f["type"], f["shape"]) for n, f in shown.items()} == {
        "id": ("int64", None), "late": ("string", None), "n": ("float", None), "tip": ("float", [-1])}
    assert shown["tip"]["kinds"] == {"None": 1500, "float_list": 1500} and shown["late"]["present"] == 1500
    assert info["schema"]["sampled"] == 3000 and info["schema"]["files"] == 2 and "error" not in info["schema"]
    (batch,) = read_batches(str(src / "*.gz"), batch_size=4000, shuffle=False, format="arrow")
    arrow = {"int64": pa.int64(), "float": pa.float32(), "string": pa.string()}
    assert {f.name: f.type for f in batch.schema} == {
        n: arrow[f["type"]] if f["shape"] is None else pa.list_(arrow[f["type"]]) for n, f in shown.items()}
    text = cli("inspect", str(src / "*.gz"), "--head", "0", check=True).stdout
    assert "schema (inferred from 3000 records of 2 files, as spark.read and read_batches infer it)" in text
    assert "read as float [-1]" in text

    # a conflict past the first file's records: inspect shows the error read_batches raises, and exits 0
    clash = write_tfx_shards(tmp_path / "clash", [[{"v": i} for i in range(1500)], [{"v": "three"}]])
    proc = cli("inspect", str(clash / "*.gz"), "--json", check=True)
    schema = json.loads(proc.stdout)["schema"]
    with pytest.raises(ValueError) as refused:
        list(read_batches(str(clash / "*.gz"), batch_size=10))
    assert schema["error"].startswith("feature 'v' is int64_list in ") and schema["error"] in str(refused.value)
    assert schema["features"][0]["type"] is None and schema["features"][0]["conflict"] == schema["error"]
    assert "no schema reads these records: feature 'v'" in cli("inspect", str(clash), check=True).stdout


# ---------------------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------------------
def test_verify_clean_output_cli(our_output):
    base, _ = our_output
    proc = cli("verify", base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK: all checks hold" in proc.stdout and "75 records read" in proc.stdout
    assert proc.stderr == ""  # no progress bar without a terminal
    info = json.loads(cli("verify", base, "--json", check=True).stdout)
    assert info["ok"] and info["problem_count"] == 0 and info["checked"] == ["framing", "manifest", "schema"]


def test_verify_flipped_byte_names_file_and_offset(our_output):
    base, _ = our_output
    path = Path(base) / "part-00001-of-00002.tfrecord"
    offsets = record_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[7] + 12 + 3] ^= 0x40  # inside record 7's data
    path.write_bytes(bytes(data))
    proc = cli("verify", base)
    assert proc.returncode == 3
    assert (f"FAILED: 1 problem; the first: part-00001-of-00002.tfrecord at byte offset {offsets[7]}: data CRC"
            in proc.stdout), proc.stdout
    info = json.loads(cli("verify", base, "--json").stdout)
    assert info["first_problem"] == {"check": "framing", "file": "part-00001-of-00002.tfrecord",
                                     "offset": offsets[7], "message": info["first_problem"]["message"]}


def test_verify_flipped_byte_in_compressed_file(tmp_path):
    base = str(tmp_path / "out")
    write_output(base, [example_rows(200, 5)], compression="gzip")
    path = Path(base) / "part-00000-of-00001.tfrecord.gz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    result = verify_source(resolve_source(base))
    assert not result.ok and result.problems[0].file == "part-00000-of-00001.tfrecord.gz"
    assert result.problems[0].check == "framing" and result.problems[0].offset is not None


def test_verify_truncated_file(our_output):
    base, _ = our_output
    path = Path(base) / "part-00000-of-00002.tfrecord"
    offsets = record_offsets(path)
    path.write_bytes(path.read_bytes()[:-5])
    proc = cli("verify", base)
    assert proc.returncode == 3
    assert (f"the first: part-00000-of-00002.tfrecord at byte offset {offsets[-1]}: truncated data"
            in proc.stdout), proc.stdout
    info = json.loads(cli("verify", base, "--json").stdout)
    # the truncation, and the size the manifest lists; no count mismatch on top of a framing error
    assert info["problem_count"] == 2
    assert "manifest says" in info["problems"][1]["message"] and "bytes" in info["problems"][1]["message"]


def test_verify_manifest_that_lies(our_output):
    base, _ = our_output
    manifest_path = Path(base) / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][0]["records"] += 1
    manifest["files"][1]["bytes"] -= 7
    manifest_path.write_text(json.dumps(manifest))
    proc = cli("verify", base)
    assert proc.returncode == 3
    assert "FAILED: 3 problems" in proc.stdout, proc.stdout
    assert "part-00000-of-00002.tfrecord: the manifest says 41 records, the file has 40" in proc.stdout
    size = (Path(base) / "part-00001-of-00002.tfrecord").stat().st_size
    assert f"part-00001-of-00002.tfrecord: the manifest says {size - 7} bytes, the file has {size}" in proc.stdout
    assert "totals.records is 75, the files entries add up to 76" in proc.stdout


def test_verify_missing_success_and_stray_files(our_output):
    base, _ = our_output
    (Path(base) / "_SUCCESS").unlink()
    (Path(base) / "part-00009-of-00009.tfrecord").write_bytes(b"")
    (Path(base) / "part-00001-of-00002.tfrecord").unlink()
    result = verify_source(resolve_source(base))
    messages = [str(p) for p in result.problems]
    assert result.problem_count == 3, messages
    assert "part-00001-of-00002.tfrecord: listed in the manifest, missing" in messages
    assert any(m.startswith("_SUCCESS: ") for m in messages)
    assert any(m.startswith("part-00009-of-00009.tfrecord: a file beside") for m in messages)


def test_verify_records_against_the_schema(tmp_path):
    """A TF-written file with schema problems at known records, checked with --schema and with a manifest."""
    rows = rows_of(example_rows(20, 6))
    msgs = [tf_example(r) for r in rows]
    msgs[2].features.feature["n"].ClearField("int64_list")
    msgs[2].features.feature["n"].float_list.value.append(1.0)          # wrong kind
    msgs[5].features.feature["emb"].float_list.value.append(9.0)        # 4 values for shape [3]
    del msgs[9].features.feature["n"]                                   # required, missing
    msgs[11].features.feature["tags"].bytes_list.value.append(b"\xff")  # string, not UTF-8
    msgs[14].features.feature["fare"].float_list.value.append(2.0)      # scalar with 2 values
    del msgs[15].features.feature["fare"]                               # fine: fare has a default
    msgs[16].features.feature["unknown"].int64_list.value.append(1)     # fine: unknown features are allowed
    path = write_tf(tmp_path / "data.tfrecord", msgs)
    schema_file = tmp_path / "schema.yaml"
    schema_file.write_text(SCHEMA.to_yaml())
    offsets = record_offsets(path)

    assert cli("verify", str(path)).returncode == 0  # no schema: framing only
    proc = cli("verify", str(path), "--schema", str(schema_file), "--json")
    assert proc.returncode == 3
    info = json.loads(proc.stdout)
    assert info["problem_count"] == 5
    assert [(p["offset"], p["message"]) for p in info["problems"]] == [
        (offsets[2], "feature 'n': expected int64_list (int64), got float_list"),
        (offsets[5], "feature 'emb': expected 3 values (shape [3]), got 4"),
        (offsets[9], "feature 'n': required, missing"),
        (offsets[11], f"feature 'tags': value {len(rows[11]['tags'])} is not valid UTF-8 (type string): b'\\xff'"),
        (offsets[14], "feature 'fare': expected 1 value (scalar), got 2"),
    ]
    text = cli("verify", str(path), "--schema", str(schema_file)).stdout
    assert f"the first: data.tfrecord at byte offset {offsets[2]}: feature 'n'" in text
    assert "by kind:" in text


def test_verify_sequence_examples_against_manifest(tmp_path):
    base = str(tmp_path / "seq-out")
    cols = {"user": [1, 2, 3], "country": ["ch", None, "de"], "clicks": [[1, 2], [3], []],
            "dwell": [[[0.5, 1.0], [1.5, 2.0]], [[2.5, 3.0]], []]}
    write_output(base, [cols], SEQ_SCHEMA, "none", encode_sequence_examples)
    assert verify_source(resolve_source(base)).ok
    # Replace the shard with TF-written records, one of them with a bad step, keeping the manifest honest.
    path = Path(base) / "part-00000-of-00001.tfrecord"
    msgs = [tf_sequence_example(1, [1, 2], [[0.5, 1.0], [1.5, 2.0]], "ch"),
            tf_sequence_example(2, [3], [[2.5]], None)]  # dwell step 0 has 1 value, shape [2]
    write_tf(path, msgs)
    manifest = json.loads((Path(base) / "_manifest.json").read_text())
    manifest["files"][0].update(records=2, bytes=path.stat().st_size,
                                crc32c=f"{google_crc32c.value(path.read_bytes()):08x}")
    manifest["totals"].update(input_rows=2, records=2)
    manifest["index"]["lengths"][path.name] = encode_lengths([len(m.SerializeToString()) for m in msgs])
    (Path(base) / "_manifest.json").write_text(json.dumps(manifest))
    result = verify_source(resolve_source(base))
    assert result.problem_count == 1
    assert str(result.problems[0]) == (f"part-00000-of-00001.tfrecord at byte offset {record_offsets(path)[1]}: "
                                       f"sequence feature 'dwell', step 0: expected 2 values (shape [2]), got 1")


def test_verify_counts_every_problem_across_files_in_parallel(tmp_path):
    base = str(tmp_path / "out")
    write_output(base, [example_rows(30, s) for s in range(3)])
    for i in (0, 2):
        path = Path(base) / f"part-0000{i}-of-00003.tfrecord"
        data = bytearray(path.read_bytes())
        data[-2] ^= 0xFF  # the data CRC of the last record
        path.write_bytes(bytes(data))
    result = verify_source(resolve_source(base), workers=2)
    assert result.problem_count == 2
    assert [p.file for p in result.problems] == ["part-00000-of-00003.tfrecord", "part-00002-of-00003.tfrecord"]


def test_verify_cannot_read_source_exits_2(tmp_path):
    proc = cli("verify", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr


# ---------------------------------------------------------------------------------------
# Progress bar: on a terminal only
# ---------------------------------------------------------------------------------------
def test_progress_bar_only_on_a_terminal(tmp_path):
    import pty
    import select

    base = str(tmp_path / "out")
    write_output(base, [example_rows(3000, 7)])
    master, slave = pty.openpty()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TFRECORD_IO_PROGRESS", None)
    proc = subprocess.Popen([str(EXE), "verify", base], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    assert proc.returncode == 0, out
    assert b"verifying" in seen and b"100%" in seen and b"1/1 files" in seen, seen
    assert b"\r" in seen
    # and nothing at all when stderr is not a terminal
    assert cli("verify", base).stderr == ""
    assert cli("inspect", base).stderr == ""


# ---------------------------------------------------------------------------------------
# HDFS
# ---------------------------------------------------------------------------------------
def upload(local: Path, uri: str) -> None:
    with fs.open(uri, "wb") as f:
        f.write(local.read_bytes())


def test_inspect_and_verify_on_hdfs(hdfs, our_output, tmp_path):
    base, parts = our_output
    root = hdfs.uri(f"/inspect-verify/{tmp_path.name}")
    for p in sorted(Path(base).iterdir()):
        upload(p, f"{root}/out/{p.name}")
    seq = write_tf(tmp_path / "seq.tfrecord.gz",
                   [tf_sequence_example(1, [1, 2], [[0.5, 1.0], [1.5, 2.0]], "ch")], "gzip")
    upload(seq, f"{root}/tf/seq.tfrecord.gz")

    info = json.loads(cli("inspect", f"{root}/out", "--json", "--head", "2", check=True).stdout)
    assert info["records"] == 75 and info["records_from"] == "manifest"
    assert [r["features"] for r in info["head"]] == [expected_json(r) for r in rows_of(parts[0])[:2]]
    assert info["files"][0]["uri"].startswith("hdfs://")

    info = json.loads(cli("inspect", f"{root}/tf", "--json", check=True).stdout)
    assert info["record_type"] == "sequence_example" and info["records"] == 1
    assert info["files"][0]["compression"] == "gzip"

    proc = cli("verify", f"{root}/out")
    assert proc.returncode == 0 and "OK: all checks hold" in proc.stdout, proc.stdout + proc.stderr
    # a flipped byte, on HDFS
    local = Path(base) / "part-00000-of-00002.tfrecord"
    offsets = record_offsets(local)
    data = bytearray(local.read_bytes())
    data[offsets[3] + 20] ^= 0x01
    with fs.open(f"{root}/out/part-00000-of-00002.tfrecord", "wb") as f:
        f.write(bytes(data))
    proc = cli("verify", f"{root}/out")
    assert proc.returncode == 3
    assert f"part-00000-of-00002.tfrecord at byte offset {offsets[3]}: data CRC" in proc.stdout, proc.stdout
