"""The vectorized encoder against TensorFlow: encode -> (file) -> parse, and against protos built the slow way."""

import math
import pickle
import struct

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import examples
from record_strategies import I64_MAX, I64_MIN, batch_of, schema_and_rows, schema_of
from tfrecord_io.core.codec import encode_examples, encode_sequence_examples, row_errors
from tfrecord_io.core.schema import Feature, Schema
from tfrecord_io.engines.loader import parse_spec


# ---------------------------------------------------------------------------------------
# The slow way: tf.train.Example / SequenceExample objects, one per row
# ---------------------------------------------------------------------------------------
def slow_feature(f: Feature, value) -> tf.train.Feature:
    values = value if f.is_list else [value]
    if f.type == "int64":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if f.type == "float":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[v.encode("utf-8") if isinstance(v, str) else v for v in values]))


def slow_example(schema: Schema, row: dict) -> tf.train.Example:
    ex = tf.train.Example()
    for f in schema.features:
        if row[f.name] is not None:
            ex.features.feature[f.name].CopyFrom(slow_feature(f, row[f.name]))
    return ex


def canonical(msg) -> dict:
    """Proto -> comparable dict (floats by their float32 bits, so NaN == NaN)."""
    def feat(ft):
        kind = ft.WhichOneof("kind")
        if kind is None:
            return None
        vals = list(getattr(ft, kind).value)
        if kind == "float_list":
            vals = [struct.pack("<f", v) for v in vals]
        return kind, vals

    if isinstance(msg, tf.train.Example):
        return {k: feat(v) for k, v in msg.features.feature.items()}
    return ({k: feat(v) for k, v in msg.context.feature.items()},
            {k: [feat(s) for s in v.feature] for k, v in msg.feature_lists.feature_list.items()})


# ---------------------------------------------------------------------------------------
# Table-driven: every case parses with tf.io.parse_example to exactly the input values
# ---------------------------------------------------------------------------------------
F32 = pa.float32()
CASES = [
    # (id, feature, arrow values, expected parsed values per row)
    ("int64 extremes", Feature("x", "int64"), pa.array([0, 1, -1, I64_MIN, I64_MAX, 127, 128, 2**35], pa.int64()),
     [0, 1, -1, I64_MIN, I64_MAX, 127, 128, 2**35]),
    ("float specials", Feature("x", "float"),
     pa.array([0.0, -0.0, 1.5, float("nan"), float("inf"), -float("inf"), 3.4e38, 1e-45], F32),
     [0.0, -0.0, 1.5, float("nan"), float("inf"), -float("inf"), 3.4e38, 1e-45]),
    ("bytes", Feature("x", "bytes"), pa.array([b"", b"\x00\xff\xfe", b"a" * 300, b"\x80"], pa.binary()),
     [b"", b"\x00\xff\xfe", b"a" * 300, b"\x80"]),
    ("unicode", Feature("x", "string"), pa.array(["", "héllo", "日本語", "🙂" * 50]),
     [s.encode() for s in ["", "héllo", "日本語", "🙂" * 50]]),
    ("null -> default", Feature("x", "float", default=-1.0), pa.array([1.0, None, 2.0], F32), [1.0, -1.0, 2.0]),
    ("null string -> default", Feature("x", "string", default="?"), pa.array(["a", None], pa.string()),
     [b"a", b"?"]),
    ("varlen lists", Feature("x", "int64", shape=(-1,)),
     pa.array([[1, -2, I64_MAX], [], None, [I64_MIN]], pa.list_(pa.int64())),
     [[1, -2, I64_MAX], [], [], [I64_MIN]]),
    ("varlen float lists", Feature("x", "float", shape=(-1,)),
     pa.array([[], [float("nan")], [1.0, 2.0, 3.0]], pa.list_(F32)), [[], [float("nan")], [1.0, 2.0, 3.0]]),
    ("varlen string lists", Feature("x", "string", shape=(-1,)),
     pa.array([["a", ""], [], None, ["ü" * 200]], pa.list_(pa.string())),
     [[b"a", b""], [], [], ["ü".encode() * 200]]),
    ("fixed lists + default", Feature("x", "float", shape=(2,), default=[9.0, 8.0]),
     pa.array([[1.0, 2.0], None, [3.0, 4.0]], pa.list_(F32)), [[1.0, 2.0], [9.0, 8.0], [3.0, 4.0]]),
]


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):  # compared as float32, NaN == NaN, -0.0 != 0.0
        return np.float32(a).tobytes() == np.float32(b).tobytes() or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def to_py(t):
    if isinstance(t, tf.RaggedTensor):
        return t.to_list()
    return t.numpy().tolist()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_encode_file_parse(case, tmp_path):
    _, feature, values, expected = case
    schema = schema_of(feature)
    records = encode_examples(pa.record_batch({"x": values}), schema)
    assert len(records) == len(values)
    path = str(tmp_path / "x.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for r in records.to_pylist():
            w.write(r)
    got = [to_py(tf.io.parse_example(batch, parse_spec(schema))["x"])
           for batch in tf.data.TFRecordDataset(path).batch(100)]
    got = [v for b in got for v in b]
    assert same(got, expected), (got, expected)
    # ... and the same bytes describe the same proto the slow way builds
    for i, r in enumerate(records.to_pylist()):
        assert canonical(tf.train.Example.FromString(r)) == canonical(
            slow_example(schema, {"x": values[i].as_py()}))


def test_zero_row_batch():
    schema = schema_of(Feature("x", "float"), Feature("y", "string", shape=(-1,)))
    out = encode_examples(pa.record_batch({"x": pa.array([], F32), "y": pa.array([], pa.list_(pa.string()))}), schema)
    assert len(out) == 0 and out.type in (pa.binary(), pa.large_binary())


def test_sliced_batch_and_chunked_input():
    schema = schema_of(Feature("s", "string"), Feature("l", "int64", shape=(-1,)))
    batch = pa.record_batch({"s": pa.array(["a", None, "ccc", "dd"]),
                             "l": pa.array([[1], [2, 3], None, [4, 5, 6]], pa.list_(pa.int64()))})
    whole = encode_examples(batch, schema).to_pylist()
    assert encode_examples(batch.slice(1, 3), schema).to_pylist() == whole[1:4]


def test_input_types_are_cast():
    schema = schema_of(Feature("f", "float"), Feature("i", "int64"), Feature("b", "bytes"))
    a = encode_examples(pa.record_batch({"f": pa.array([1.5], pa.float64()), "i": pa.array([7], pa.int32()),
                                         "b": pa.array(["x"], pa.string())}), schema)
    b = encode_examples(pa.record_batch({"f": pa.array([1.5], F32), "i": pa.array([7], pa.int64()),
                                         "b": pa.array([b"x"], pa.binary())}), schema)
    assert a.to_pylist() == b.to_pylist()


@pytest.mark.parametrize("feature, values, message", [
    (Feature("x", "float", required=True), pa.array([1.0, None], F32), "feature 'x', row 1: required, got null"),
    (Feature("x", "int64", shape=(2,)), pa.array([[1, 2], [3]], pa.list_(pa.int64())),
     "row 1: expected 2 values (shape [2])"),
    (Feature("x", "int64", shape=(-1,)), pa.array([[1, None]], pa.list_(pa.int64())), "row 0: a list holds a null"),
    (Feature("x", "int64"), pa.array([[1]], pa.list_(pa.int64())), "expected a scalar column"),
    (Feature("x", "int64"), pa.array(["a"]), "cannot encode string values as int64"),
])
def test_bad_rows_raise_naming_feature_and_row(feature, values, message):
    schema = schema_of(feature)
    batch = pa.record_batch({"x": values})
    with pytest.raises((ValueError, TypeError)) as e:
        encode_examples(batch, schema)
    assert message in str(e.value)


def test_row_errors_route_bad_rows():
    schema = schema_of(Feature("a", "float", required=True), Feature("b", "int64", shape=(2,)))
    batch = pa.record_batch({"a": pa.array([1.0, None, 3.0, 4.0], F32),
                             "b": pa.array([[1, 2], [1, 2], [1], None], pa.list_(pa.int64()))})
    reasons = row_errors(batch, schema)
    assert reasons[0] is None and reasons[3] is None
    assert "feature 'a': required" in reasons[1]
    assert "feature 'b': expected 2 values" in reasons[2]
    good = batch.filter(pa.array([r is None for r in reasons]))
    assert len(encode_examples(good, schema)) == 2


def test_missing_column():
    with pytest.raises(ValueError, match="feature 'y': no such column"):
        encode_examples(pa.record_batch({"x": pa.array([1.0])}), schema_of(Feature("y", "float")))


def test_encoder_pickles():
    # Spark and Beam ship these functions to workers.
    assert pickle.loads(pickle.dumps(encode_examples)) is encode_examples
    schema = schema_of(Feature("x", "float"))
    assert pickle.loads(pickle.dumps(schema)) == schema


# ---------------------------------------------------------------------------------------
# Property-based: random schemas and batches against the slow way
# ---------------------------------------------------------------------------------------
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_rows())
def test_matches_slow_path(data):
    schema, rows = data
    records = encode_examples(batch_of(schema, rows), schema).to_pylist()
    assert len(records) == len(rows)
    for r, row in zip(records, rows):
        assert canonical(tf.train.Example.FromString(r)) == canonical(slow_example(schema, row))


# ---------------------------------------------------------------------------------------
# SequenceExample
# ---------------------------------------------------------------------------------------
SEQ = Schema.from_dict({
    "record_type": "sequence_example", "group_by": "session", "order_by": "ts",
    "context": [{"name": "session", "type": "string"}, {"name": "user", "type": "int64", "default": -1}],
    "sequence": [{"name": "ts", "type": "int64"}, {"name": "price", "type": "float", "default": 0.0},
                 {"name": "words", "type": "string", "shape": [-1]}],
})


def seq_batch(groups):
    return pa.record_batch({
        "session": pa.array([g["session"] for g in groups]),
        "user": pa.array([g["user"] for g in groups], pa.int64()),
        "ts": pa.array([g["ts"] for g in groups], pa.list_(pa.int64())),
        "price": pa.array([g["price"] for g in groups], pa.list_(F32)),
        "words": pa.array([g["words"] for g in groups], pa.list_(pa.list_(pa.string()))),
    })


def test_sequence_examples_parse():
    groups = [
        {"session": "s1", "user": 7, "ts": [1, 2, 3], "price": [1.5, None, 2.5], "words": [["a"], [], ["b", "c"]]},
        {"session": "s2", "user": None, "ts": [9], "price": [0.25], "words": [["z"]]},
        {"session": "s3", "user": 3, "ts": [], "price": [], "words": []},
    ]
    records = encode_sequence_examples(seq_batch(groups), SEQ).to_pylist()
    ctx_spec, seq_spec = parse_spec(SEQ)
    ctx, seq, lengths = tf.io.parse_sequence_example(records, context_features=ctx_spec, sequence_features=seq_spec)
    assert ctx["session"].numpy().tolist() == [b"s1", b"s2", b"s3"]
    assert ctx["user"].numpy().tolist() == [7, -1, 3]
    assert seq["ts"].numpy().tolist() == [[1, 2, 3], [9, 0, 0], [0, 0, 0]]
    assert lengths["ts"].numpy().tolist() == [3, 1, 0]
    assert seq["price"].numpy().tolist() == [[1.5, 0.0, 2.5], [0.25, 0, 0], [0, 0, 0]]  # null step -> default
    assert seq["words"].to_list() == [[[b"a"], [], [b"b", b"c"]], [[b"z"]], []]


def test_sequence_examples_match_slow_path():
    groups = [{"session": "s1", "user": 7, "ts": [1, 2], "price": [1.5, 2.5], "words": [["a"], []]}]
    (record,) = encode_sequence_examples(seq_batch(groups), SEQ).to_pylist()
    slow = tf.train.SequenceExample()
    slow.context.feature["session"].bytes_list.value.append(b"s1")
    slow.context.feature["user"].int64_list.value.append(7)
    for t in (1, 2):
        slow.feature_lists.feature_list["ts"].feature.add().int64_list.value.append(t)
    for p in (1.5, 2.5):
        slow.feature_lists.feature_list["price"].feature.add().float_list.value.append(p)
    slow.feature_lists.feature_list["words"].feature.add().bytes_list.value.append(b"a")
    slow.feature_lists.feature_list["words"].feature.add().bytes_list.SetInParent()
    assert canonical(tf.train.SequenceExample.FromString(record)) == canonical(slow)


def test_sequence_null_step_without_default_is_a_row_error():
    schema = Schema.from_dict({"record_type": "sequence_example", "group_by": "g",
                               "context": [{"name": "g", "type": "string"}],
                               "sequence": [{"name": "v", "type": "int64"}]})
    batch = pa.record_batch({"g": pa.array(["a", "b"]), "v": pa.array([[1, 2], [3, None]], pa.list_(pa.int64()))})
    reasons = row_errors(batch, schema)
    assert reasons[0] is None and "a step is null" in reasons[1]
    with pytest.raises(ValueError, match=r"sequence feature 'v', row 1: a step is null"):
        encode_sequence_examples(batch, schema)


# ---------------------------------------------------------------------------------------
# Property-based (issue #12 item 7): encode -> decode gives the input back; row_errors agrees
# with what encoding accepts; SequenceExamples round-trip
# ---------------------------------------------------------------------------------------
def _as_written(f: Feature, v):
    """What a value reads back as: float32-rounded floats, UTF-8 bytes for strings."""
    import numpy as np

    def one(x):
        if f.type == "float":
            return np.float32(x).tobytes()  # compare bit patterns: NaN and -0.0 included
        if f.type == "string":
            return x.encode("utf-8")
        return x

    return [one(x) for x in v] if isinstance(v, list) else [one(v)]


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_rows())
def test_encode_then_decode_gives_the_input_back(data):
    import numpy as np

    from tfrecord_io.core.decode import decode_example

    schema, rows = data
    batch = batch_of(schema, rows)
    errors = row_errors(batch, schema)
    good = [i for i, e in enumerate(errors) if e is None]
    if not good:
        return
    records = encode_examples(batch.take(pa.array(good, pa.int64())), schema).to_pylist()
    for i, rec in zip(good, records):
        decoded = decode_example(rec)
        for f in schema.features:
            value = rows[i][f.name]
            if value is None:
                assert f.name not in decoded, (f.name, decoded)
                continue
            kind, got = decoded[f.name]
            if f.type == "float":
                got = [np.float32(x).tobytes() for x in got]
            assert got == _as_written(f, value), (f.name, value, got)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_rows())
def test_row_errors_flag_exactly_the_rows_the_rules_refuse(data):
    schema, rows = data
    batch = batch_of(schema, rows)
    errors = row_errors(batch, schema)
    for row, error in zip(rows, errors):
        broken = [f.name for f in schema.features if isinstance(row[f.name], list) and (
            any(x is None for x in row[f.name]) or (f.fixed_length and len(row[f.name]) != f.fixed_length))]
        assert (error is not None) == bool(broken), (row, error)
        if error is not None:
            assert any(f"'{name}'" in error for name in broken)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({
    "session": st.text(max_size=6), "user": st.one_of(st.none(), st.integers(I64_MIN, I64_MAX)),
    "steps": st.lists(st.tuples(st.integers(I64_MIN, I64_MAX), st.floats(width=32, allow_nan=False),
                                st.lists(st.text(max_size=4), max_size=3)), max_size=6)}), max_size=8))
def test_sequence_examples_encode_then_decode_back(groups):
    import numpy as np

    from tfrecord_io.core.decode import decode_sequence_example

    batch = seq_batch([{"session": g["session"], "user": g["user"], "ts": [s[0] for s in g["steps"]],
                        "price": [s[1] for s in g["steps"]], "words": [s[2] for s in g["steps"]]} for g in groups])
    for g, rec in zip(groups, encode_sequence_examples(batch, SEQ).to_pylist()):
        context, lists = decode_sequence_example(rec)
        assert context["session"][1] == [g["session"].encode()]
        assert ("user" in context) == (g["user"] is not None)
        assert [v[0] for _, v in lists.get("ts", [])] == [s[0] for s in g["steps"]]
        assert [np.float32(v[0]) for _, v in lists.get("price", [])] == [np.float32(s[1]) for s in g["steps"]]
        assert [[w.decode() for w in v] for _, v in lists.get("words", [])] == [s[2] for s in g["steps"]]
