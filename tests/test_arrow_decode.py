"""The vectorized Arrow decoder (``tfrecord_io.core.arrow_decode``, over the wire scanner
``tfrecord_io.core.wire_scan``) against TensorFlow's parser, against the rows our encoder was given, and
against ``decode_record`` (the slow reader it defers to).

TensorFlow reads every feature as ``tf.io.RaggedFeature`` here (``parse_example`` /
``parse_sequence_example``), which gives each record's values whatever their number: a decoded
scalar is then TF's one value (or null: no value, or several), a decoded list TF's values (or
null: TF's empty row for a missing feature).
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import examples
from record_strategies import (
    ANY_NAMES, I64_MAX, I64_MIN, TYPES, batch_of, damaged_reads, feature_messages, ld, schema_and_rows, schema_of,
    sequence_batch, sequence_schema_and_groups, varint,
)
from tfrecord_io.core import wire_scan
from tfrecord_io.core.arrow_decode import Origin, column_type, decode_batch
from tfrecord_io.core.codec import encode_examples, encode_sequence_examples, row_errors
from tfrecord_io.core.decode import RecordDecodeError, decode_record
from tfrecord_io.core.framing import compression_from_path, read_records
from tfrecord_io.core.schema import Feature, Schema
from tfrecord_io.core.wire_scan import scan_batch

GOLDEN = Path(__file__).parent / "golden" / "spark-tfrecord"
TF_DTYPE = {"int64": tf.int64, "float": tf.float32, "bytes": tf.string, "string": tf.string}


# ---------------------------------------------------------------------------------------
# Helpers: comparable values, TensorFlow's reading, protobuf bytes by hand
# ---------------------------------------------------------------------------------------
def bits(value):
    """A decoded value with floats as their float32 bits (NaN == NaN, -0.0 != 0.0)."""
    if isinstance(value, list):
        return [bits(v) for v in value]
    if isinstance(value, float):
        return struct.pack("<f", value)
    return value


def column_bits(column: pa.Array) -> list:
    """A column as Python values, floats as their bits read from the Arrow buffer (every NaN payload)."""
    t = column.type
    while pa.types.is_list(t):
        t = t.value_type
    if t != pa.float32():
        return column.to_pylist()
    as_bits = column.view(_with_leaf(column.type, pa.uint32()))
    return _bytes_leaves(as_bits.to_pylist())


def _with_leaf(t: pa.DataType, leaf: pa.DataType) -> pa.DataType:
    return pa.list_(_with_leaf(t.value_type, leaf)) if pa.types.is_list(t) else leaf


def _bytes_leaves(v):
    if isinstance(v, list):
        return [_bytes_leaves(x) for x in v]
    return None if v is None else struct.pack("<I", v)


def expected_column(f: Feature, values: list, steps: bool = False) -> list:
    """Input values as the decoder gives them back (floats as bits, through float32 like the encoder)."""
    return column_bits(pa.array(values, column_type(f, steps)))


def tf_examples(records: list[bytes], features: list[Feature]) -> dict[str, list]:
    spec = {f.name: tf.io.RaggedFeature(TF_DTYPE[f.type], row_splits_dtype=tf.int64) for f in features}
    parsed = tf.io.parse_example(tf.constant(records, tf.string), spec) if records else {}
    return {f.name: _tf_list(parsed[f.name], f) for f in features} if records else {f.name: [] for f in features}


def tf_sequences(records: list[bytes], schema: Schema) -> tuple[dict, dict]:
    r = lambda f: tf.io.RaggedFeature(TF_DTYPE[f.type], row_splits_dtype=tf.int64)  # noqa: E731
    ctx, seq, _ = tf.io.parse_sequence_example(tf.constant(records, tf.string),
                                               context_features={f.name: r(f) for f in schema.context} or None,
                                               sequence_features={f.name: r(f) for f in schema.sequence})
    return ({f.name: _tf_list(ctx[f.name], f) for f in schema.context},
            {f.name: _tf_list(seq[f.name], f) for f in schema.sequence})


def _tf_list(ragged, f: Feature) -> list:
    flat = ragged.flat_values.numpy()
    if f.type == "float":
        flat = [struct.pack("<I", b) for b in flat.view(np.uint32).tolist()]
    elif f.type == "string":
        flat = [v.decode("utf-8") for v in flat.tolist()]
    else:
        flat = flat.tolist()
    out = flat
    for splits in reversed(ragged.nested_row_splits):
        s = splits.numpy().tolist()
        out = [out[a:b] for a, b in zip(s, s[1:])]
    return out


def as_tf_reads(f: Feature, column: list, steps: bool = False) -> list:
    """Our decoded column as TF's ragged reading of it: a scalar v as [v], a null as []."""
    def one(v):
        if v is None:
            return []
        return v if f.is_list else [v]
    if steps:
        return [[] if v is None else [one(s) for s in v] for v in column]
    return [one(v) for v in column]


def entry(name: bytes, feature: bytes) -> bytes:
    return ld(0x0A, ld(0x0A, name) + ld(0x12, feature))


def example(*entries: bytes) -> bytes:
    return ld(0x0A, b"".join(entries))


def floats(*xs: float) -> bytes:
    return ld(0x12, ld(0x0A, struct.pack(f"<{len(xs)}f", *xs)))


def ints(*xs: int) -> bytes:
    return ld(0x1A, ld(0x0A, b"".join(varint(x) for x in xs)))


def strings(*xs: bytes) -> bytes:
    return ld(0x0A, b"".join(ld(0x0A, x) for x in xs))


def decoded(records, schema: Schema, **kw) -> dict[str, list]:
    batch = decode_batch(records, schema, **kw)
    return {name: column_bits(batch.column(name)) for name in batch.schema.names}


# ---------------------------------------------------------------------------------------
# Files spark-tfrecord wrote
# ---------------------------------------------------------------------------------------
def golden_records(name: str) -> list[bytes]:
    (part,) = sorted((GOLDEN / name).glob("part-*"))
    return list(read_records(str(part), compression=compression_from_path(str(part))))


GOLDEN_EXAMPLE = schema_of(Feature("id", "int64"), Feature("x", "float"), Feature("name", "string"),
                           Feature("vec", "float", shape=(-1,)), Feature("tags", "string", shape=(-1,)),
                           Feature("blob", "bytes"))
GOLDEN_SEQUENCE = Schema.from_dict({
    "record_type": "sequence_example", "group_by": "session",
    "context": [{"name": "session", "type": "string"}, {"name": "country", "type": "string"}],
    "sequence": [{"name": "ts", "type": "int64"}, {"name": "items", "type": "string", "shape": [-1]},
                 {"name": "prices", "type": "float"}]})


@pytest.mark.parametrize("name", ["example", "example-gzip"])
def test_spark_tfrecord_examples_equal_tensorflow_and_the_rows_written(name):
    import sys

    sys.path.insert(0, str(GOLDEN.parent))
    from make_spark_tfrecord_golden import example_rows

    records = golden_records(name)
    got = decoded(records, GOLDEN_EXAMPLE)
    assert not scan_batch(records).odd.any()  # Java's protobuf writes the canonical layout too
    want = tf_examples(records, list(GOLDEN_EXAMPLE.features))
    for f in GOLDEN_EXAMPLE.features:
        assert as_tf_reads(f, got[f.name]) == want[f.name], f.name
    rows = sorted(zip(*(got[f.name] for f in GOLDEN_EXAMPLE.features)))
    written = sorted(tuple(bits(r[f.name]) if f.type == "float" else r[f.name] for f in GOLDEN_EXAMPLE.features)
                     for r in example_rows())
    assert rows == written


def test_spark_tfrecord_sequence_examples_equal_tensorflow():
    records = golden_records("sequence")
    got = decoded(records, GOLDEN_SEQUENCE)
    assert not scan_batch(records).odd.any()
    ctx, seq = tf_sequences(records, GOLDEN_SEQUENCE)
    for f in GOLDEN_SEQUENCE.context:
        assert as_tf_reads(f, got[f.name]) == ctx[f.name]
    for f in GOLDEN_SEQUENCE.sequence:
        assert as_tf_reads(f, got[f.name], steps=True) == seq[f.name], f.name
    assert got["ts"][2] == [0, 1, 2] and got["items"][1] == [["i0", "x"], ["i1", "x"]]


# ---------------------------------------------------------------------------------------
# Our encoder's output, every type and shape
# ---------------------------------------------------------------------------------------
EVERY = schema_of(
    Feature("i", "int64"), Feature("f", "float"), Feature("b", "bytes"), Feature("s", "string"),
    Feature("ik", "int64", shape=(2,)), Feature("fk", "float", shape=(3,)), Feature("bk", "bytes", shape=(2,)),
    Feature("sk", "string", shape=(1,)), Feature("iv", "int64", shape=(-1,)), Feature("fv", "float", shape=(-1,)),
    Feature("bv", "bytes", shape=(-1,)), Feature("a_longer_feature_name_than_eight", "string", shape=(-1,)))
EVERY_ROWS = [
    {"i": I64_MIN, "f": float("nan"), "b": b"\xff\xfe\x00", "s": "héllo wörld ☃", "ik": [I64_MAX, -1],
     "fk": [float("inf"), float("-inf"), -0.0], "bk": [b"", b"\x80"], "sk": ["∑"], "iv": [0, 1, -1, 2**40],
     "fv": [1.5, float("nan")], "bv": [b"x" * 300, b""], "a_longer_feature_name_than_eight": ["a", "ü"]},
    {"i": None, "f": None, "b": None, "s": None, "ik": None, "fk": None, "bk": None, "sk": None, "iv": None,
     "fv": None, "bv": None, "a_longer_feature_name_than_eight": None},
    {"i": I64_MAX, "f": -0.0, "b": b"", "s": "", "ik": [0, 0], "fk": [0.0, 1e-45, 3.4028234663852886e38],
     "bk": [b"a", b"b"], "sk": [""], "iv": [], "fv": [], "bv": [], "a_longer_feature_name_than_eight": []},
    {"i": 0, "f": 1.0, "b": bytes(range(256)), "s": "x" * 200, "ik": [-(2**62), 2**62], "fk": [1.0, 2.0, 3.0],
     "bk": [b"\x00" * 130, b"q"], "sk": ["\U0001f600"], "iv": list(range(-70, 70)), "fv": [0.5] * 50,
     "bv": [b"ab"] * 40, "a_longer_feature_name_than_eight": ["long" * 40]},
]


@pytest.mark.parametrize("rows", [EVERY_ROWS, EVERY_ROWS * 300, EVERY_ROWS[:1] * 50 + EVERY_ROWS[2:3] * 50],
                         ids=["mixed", "many", "two-layouts"])
def test_every_type_and_shape_round_trips_and_equals_tensorflow(rows):
    records = encode_examples(batch_of(EVERY, rows), EVERY)
    got = decoded(records, EVERY)
    want_tf = tf_examples(records.to_pylist(), list(EVERY.features))
    for f in EVERY.features:
        assert got[f.name] == expected_column(f, [r[f.name] for r in rows]), f.name
        assert as_tf_reads(f, got[f.name]) == want_tf[f.name], f.name
    assert decoded(records.to_pylist(), EVERY) == got
    assert not scan_batch(records).odd.any()  # what serializers write never takes the slow path


def test_columns_are_the_requested_ones_in_order_with_the_schemas_types():
    records = encode_examples(batch_of(EVERY, EVERY_ROWS), EVERY)
    batch = decode_batch(records, EVERY, features=["sk", "i", "bv"])
    assert batch.schema.names == ["sk", "i", "bv"]
    assert [batch.column(n).type for n in batch.schema.names] == [pa.list_(pa.string()), pa.int64(),
                                                                 pa.list_(pa.binary())]
    assert decode_batch([], EVERY).num_rows == 0


# ---------------------------------------------------------------------------------------
# Property: random schemas and rows -> encode -> decode == the rows == TensorFlow's parse
# ---------------------------------------------------------------------------------------
@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_rows(names=ANY_NAMES, max_rows=30))
def test_random_examples_decode_to_their_rows_and_to_tensorflows_parse(data):
    schema, rows = data
    records = encode_examples(batch_of(schema, rows), schema).to_pylist()
    got = decoded(records, schema)
    assert not scan_batch(records).odd.any()
    want_tf = tf_examples(records, list(schema.features))
    for f in schema.features:
        assert got[f.name] == expected_column(f, [r[f.name] for r in rows]), f.name
        assert as_tf_reads(f, got[f.name]) == want_tf[f.name], f.name


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence_schema_and_groups())
def test_random_sequence_examples_decode_to_their_groups_and_to_tensorflows_parse(data):
    schema, groups = data
    batch = sequence_batch(schema, groups)
    keep = [e is None for e in row_errors(batch, schema)]
    groups = [g for g, k in zip(groups, keep) if k]
    records = encode_sequence_examples(batch.filter(pa.array(keep, pa.bool_())), schema).to_pylist()
    got = decoded(records, schema)
    assert not scan_batch(records).odd.any()
    for f in schema.context:
        assert got[f.name] == expected_column(f, [g[f.name] for g in groups]), f.name
    for f in schema.sequence:
        assert got[f.name] == expected_column(f, [g[f.name] for g in groups], steps=True), f.name
    if records:
        ctx, seq = tf_sequences(records, schema)
        for f in schema.context:
            assert as_tf_reads(f, got[f.name]) == ctx[f.name]
        for f in schema.sequence:
            assert as_tf_reads(f, got[f.name], steps=True) == seq[f.name]


# ---------------------------------------------------------------------------------------
# Protobuf as TensorFlow reads it, beyond what serializers write
# ---------------------------------------------------------------------------------------
X_FLOAT = schema_of(Feature("x", "float", shape=(-1,)))


def tf_x(record: bytes, dtype=tf.float32) -> list:
    return tf_examples([record], [Feature("x", {tf.float32: "float", tf.int64: "int64"}[dtype], shape=(-1,))])["x"][0]


@pytest.mark.parametrize("record, want", [
    (example(entry(b"x", ld(0x12, b"\x0d" + struct.pack("<f", 2.5) + b"\x0d" + struct.pack("<f", 3.5)))), [2.5, 3.5]),
    (example(ld(0x0A, ld(0x12, floats(1.5)) + ld(0x0A, b"x"))), [1.5]),         # value before key
    (example(entry(b"x", floats(1.5)), entry(b"x", floats(2.5))), [2.5]),        # a key twice: the last wins
    (example(entry(b"y", floats(9.0)), entry(b"x", floats(1.5, 2.5))), [1.5, 2.5]),
    (ld(0x0A, entry(b"x", floats(1.5))) + ld(0x0A, entry(b"y", floats(2.5))), [1.5]),  # features twice: merged
    (example(entry(b"x", b"")), []),                                              # a Feature with no kind
    (example(entry(b"x", ld(0x12, b""))), []),                                    # an empty FloatList
    (example(ld(0x0A, ld(0x0A, b"x") + b"\x12\x80\x00" + floats(7.0)[0:0])), []),  # a 2-byte length of 0
    (example(entry(b"\xc3\xa9t\xc3\xa9", floats(1.0)), entry(b"x", floats(0.5))), [0.5]),  # a UTF-8 key
    (b"", None), (b"\x0a\x00", None),                                              # no x: null (TF: [])
], ids=["unpacked", "value-first", "key-twice", "other-feature-first", "features-twice", "no-kind",
        "empty-list", "long-length", "utf8-key", "empty-record", "empty-features"])
def test_what_tensorflow_accepts_reads_the_same(record, want):
    got = decoded([record] * 3, X_FLOAT)["x"]
    assert got == [bits(want)] * 3
    assert as_tf_reads(X_FLOAT.features[0], [bits(want)]) == [tf_x(record)]
    batch = [example(entry(b"x", floats(0.25)))] * 5 + [record] + [example(entry(b"x", floats(0.75)))] * 5
    assert decoded(batch, X_FLOAT)["x"] == [bits([0.25])] * 5 + [bits(want)] + [bits([0.75])] * 5


def test_unpacked_and_mixed_int64_lists():
    unpacked = example(entry(b"x", ld(0x1A, b"\x08\x05\x08\x07")))
    assert decoded([unpacked], schema_of(Feature("x", "int64", shape=(-1,))))["x"] == [[5, 7]]
    assert tf_x(unpacked, tf.int64) == [5, 7]
    mixed = example(entry(b"x", ld(0x1A, b"\x08\x05" + ld(0x0A, b"\x01\x02"))))
    # protobuf: unpacked and packed values of one field concatenate; TensorFlow refuses this one
    assert decoded([mixed], schema_of(Feature("x", "int64", shape=(-1,))))["x"] == [[5, 1, 2]]
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf_x(mixed, tf.int64)


@pytest.mark.parametrize("record", [
    example(entry(b"x", floats(1.5))) + b"\x18\x01",                         # a field Example does not have
    example(entry(b"x", floats(1.5) + b"\x20\x01")),                          # ... Feature does not have
    example(entry(b"x", ld(0x12, ld(0x0A, struct.pack("<f", 1.5)) + b"\x10\x01"))),  # ... FloatList
    example(entry(b"y", b"\xff\xff\xff"), entry(b"x", floats(1.5))),          # garbage in a feature not asked for
    example(entry(b"\xff", floats(1.0)), entry(b"x", floats(0.5))),           # a key that is not UTF-8
], ids=["example", "feature", "float-list", "other-feature", "key"])
def test_what_tensorflow_skips_we_refuse_as_decode_record_does(record):
    tf_x(record)  # TensorFlow reads x
    with pytest.raises(RecordDecodeError):
        decode_record(record)
    with pytest.raises(RecordDecodeError, match=r"part-7\.tfrecord: record 12 at byte offset 340: not a valid"):
        decode_batch([example(entry(b"x", floats(0.5)))] * 2 + [record], X_FLOAT,
                     origin=Origin("part-7.tfrecord", first=10, offsets=[300, 320, 340]))


def test_a_feature_set_twice_merges_as_protobuf_does_where_tensorflow_keeps_the_first():
    two_lists = example(entry(b"x", floats(1.5) + floats(2.5)))
    assert tf_x(two_lists) == bits([1.5])
    assert decoded([two_lists], X_FLOAT)["x"] == [bits([1.5, 2.5])]
    float_then_int = example(entry(b"x", floats(2.5) + ints(3)))
    assert tf_x(float_then_int) == bits([2.5])
    # protobuf keeps the last kind set (int64 3), which a float feature reads widened to 3.0
    assert decoded([float_then_int], X_FLOAT)["x"] == [bits([3.0])]
    with pytest.raises(ValueError, match=r"feature 'x' is float_list, the schema says int64"):
        decode_batch([example(entry(b"x", ints(3) + floats(2.5)))], schema_of(Feature("x", "int64")))


@pytest.mark.parametrize("record, message", [
    (example(entry(b"x", floats(1.5)))[:-2], "claims"),                       # truncated
    (example(entry(b"x", ld(0x1A, ld(0x0A, b"\xff" * 10 + b"\x01")))), "longer than 10 bytes"),
    (example(entry(b"x", ld(0x12, ld(0x0A, b"\x00" * 5)))), "not a multiple of 4"),
    (example(entry(b"x", ld(0x1A, ld(0x0A, b"\x81")))), "truncated varint"),
    (example(entry(b"x", ld(0x0A, b"\x12\x01a"))), "unexpected field"),
    (example(ld(0x0A, ld(0x0A, b"x"))) + b"\x1b", "unsupported wire type"),
    (b"\x0a\x05\x0a\x03\x0a\x01", "claims"),
], ids=["truncated", "long-varint", "float-bytes", "cut-varint", "bytes-list-tag", "group", "inner-truncated"])
def test_records_that_are_not_examples_fail_naming_file_and_record(record, message):
    with pytest.raises(RecordDecodeError, match=rf"f\.tfrecord: record 1 at byte offset 99: .*{message}"):
        decode_batch([example(), record, example()], X_FLOAT, origin=Origin("f.tfrecord", offsets=[0, 99, 200]))


def test_schema_mismatches_name_the_record_and_feature():
    with pytest.raises(ValueError, match=r"<records>: record 1: feature 'x' is float_list, the schema says int64"):
        decode_batch([example(), example(entry(b"x", floats(1.0)))], schema_of(Feature("x", "int64")))
    with pytest.raises(ValueError, match=r"record 0: feature 's' \(type string\) holds bytes that are not UTF-8"):
        decode_batch([example(entry(b"s", strings(b"\xff")))], schema_of(Feature("s", "string")))
    assert decoded([example(entry(b"s", strings(b"\xff")))], schema_of(Feature("s", "bytes")))["s"] == [b"\xff"]
    seq = Schema(record_type="sequence_example", sequence=(Feature("v", "int64"),))
    bad_step = ld(0x12, ld(0x0A, ld(0x0A, b"v") + ld(0x12, ld(0x0A, ints(1)) + ld(0x0A, floats(2.0)))))
    with pytest.raises(ValueError, match=r"record 0: feature 'v' is float_list, the schema says int64"):
        decode_batch([bad_step], seq)


def test_scalars_with_another_number_of_values_are_null():
    records = [example(entry(b"x", floats(1.0, 2.0))), example(entry(b"x", ld(0x12, b""))), example(),
               example(entry(b"x", floats(3.0)))]
    assert decoded(records, schema_of(Feature("x", "float")))["x"] == [None, None, None, bits(3.0)]
    seq = Schema(record_type="sequence_example", sequence=(Feature("v", "int64"),))
    steps = ld(0x12, ld(0x0A, ld(0x0A, b"v") + ld(0x12, ld(0x0A, ints(1)) + ld(0x0A, ints(2, 3)) + ld(0x0A, b""))))
    assert decoded([steps, b""], seq)["v"] == [[1, None, None], None]


def test_example_schema_ignores_feature_lists_and_sequence_schema_reads_examples():
    records = encode_sequence_examples(sequence_batch(GOLDEN_SEQUENCE, [
        {"session": "a", "country": "fr", "ts": [1, 2], "items": [["p"], []], "prices": [0.5, 1.5]}]), GOLDEN_SEQUENCE)
    assert decoded(records, schema_of(Feature("session", "string")))["session"] == ["a"]
    examples = [example(entry(b"session", strings(b"b")))]
    assert decoded(examples, GOLDEN_SEQUENCE) == {"session": ["b"], "country": [None], "ts": [None], "items": [None],
                                                  "prices": [None]}


# ---------------------------------------------------------------------------------------
# Layouts the fast paths treat apart
# ---------------------------------------------------------------------------------------
def test_records_with_keys_in_other_orders_and_features_missing():
    rows = [{"a": i, "b": float(i), "c": f"c{i}"} for i in range(40)]
    schema = schema_of(Feature("a", "int64"), Feature("b", "float"), Feature("c", "string"))
    records = []
    for i, r in enumerate(rows):
        parts = [entry(b"a", ints(r["a"])), entry(b"b", floats(r["b"])), entry(b"c", strings(r["c"].encode()))]
        if i % 3 == 0:
            parts.reverse()
        if i % 7 == 0:
            parts.pop(1)
            r["b" if i % 3 else "b"] = None
        records.append(example(*parts))
    got = decoded(records, schema)
    assert got["a"] == [r["a"] for r in rows] and got["c"] == [r["c"] for r in rows]
    assert got["b"] == [None if r["b"] is None else bits(r["b"]) for r in rows]


def test_long_sequences_and_many_values():
    seq = Schema(record_type="sequence_example", sequence=(Feature("v", "int64"), Feature("w", "string", shape=(-1,))))
    groups = [{"v": list(range(n)), "w": [["x" * (n % 200)] * (n % 3) for _ in range(n)]} for n in (0, 1, 3, 700, 5000)]
    records = encode_sequence_examples(sequence_batch(seq, groups), seq)
    got = decoded(records, seq)
    assert got["v"] == [g["v"] for g in groups] and got["w"] == [g["w"] for g in groups]
    assert not scan_batch(records).odd.any()


def test_scan_gives_every_key_and_kind_without_a_schema():
    records = [example(entry(b"a", ints(1, 2)), entry(b"b", strings(b"x", b"yy"))), example(entry(b"a", floats(0.5))),
               example(entry(b"\xc3\xa9", b"")), b"\x0a\x03garbage"]
    scan = scan_batch(records)
    assert scan.odd.tolist() == [False, False, False, True] and not scan.has_lists.any()
    a = scan.features["a"]
    assert a.records.tolist() == [0, 1] and a.values.kind.tolist() == [wire_scan.KIND_INT64, wire_scan.KIND_FLOAT]
    assert a.values.counts.tolist() == [2, 1] and a.values.ints.tolist() == [1, 2] and a.values.floats.tolist() == [0.5]
    assert scan.features["b"].values.data.to_pylist() == [b"x", b"yy"]
    assert scan.features["é"].values.kind.tolist() == [wire_scan.KIND_NONE]


def test_float_bits_survive_nan_payloads():
    payloads = [0x7FC00001, 0x7F800001, 0xFFFFFFFF, 0x80000000, 0x00000001]
    records = [example(entry(b"x", ld(0x12, ld(0x0A, struct.pack("<I", p))))) for p in payloads]
    column = decode_batch(records, schema_of(Feature("x", "float"))).column("x")
    assert np.frombuffer(column.buffers()[1], np.uint32).tolist() == payloads
    assert math.isnan(column[0].as_py())


# ---------------------------------------------------------------------------------------
# Column pruning: the features not asked for are checked (their wire structure), not read
# ---------------------------------------------------------------------------------------
GOOD_Y = {"float": floats(1.0, 2.0), "int64": ints(1, 300), "bytes": strings(b"ab")}
LONG_INTS = b"\x01" * 200  # a list past the one-byte lengths: the Feature is walked, not known from its head
#: Features that are not a valid ``tf.train.Feature``, one per way the wire structure can be wrong.
BAD_FEATURES = [
    ("float", ld(0x22, ld(0x0A, struct.pack("<f", 1.0))), "kind-field-4"),
    ("int64", b"\x18\x01", "kind-as-varint"),
    ("float", b"\xff\xff\xff", "garbage"),
    ("float", b"\x12\x09" + ld(0x0A, struct.pack("<f", 1.0)), "list-overruns"),
    ("int64", b"\x1a\x80", "list-length-cut"),
    ("float", ld(0x12, ld(0x0A, bytes(5))), "float-5-bytes"),
    ("float", ld(0x12, ld(0x0A, bytes(201))), "float-201-bytes"),
    ("float", ld(0x12, ld(0x0A, struct.pack("<f", 1.0)) + b"\x10\x01"), "float-list-field-2"),
    ("float", ld(0x12, b"\x0a\x08" + struct.pack("<f", 1.0)), "float-packed-overruns"),
    ("float", ld(0x12, b"\x0b"), "float-list-group"),
    ("int64", ld(0x1A, ld(0x0A, b"\x81")), "int-varint-cut"),
    ("int64", ld(0x1A, ld(0x0A, b"\xff" * 10 + b"\x01")), "int-11-byte-varint"),
    ("int64", ld(0x1A, ld(0x0A, b"\x01" * 40 + b"\xff" * 10 + b"\x01" + b"\x01" * 40)), "int-11-byte-varint-in-list"),
    ("int64", ld(0x1A, ld(0x0A, LONG_INTS + b"\xff" * 12 + b"\x01")), "int-11-byte-varint-long-list"),
    ("int64", ld(0x1A, ld(0x0A, LONG_INTS + b"\x81")), "int-varint-cut-long-list"),
    ("int64", ld(0x1A, ld(0x12, b"\x01")), "int-list-field-2"),
    ("int64", ld(0x1A, b"\x0a\x05\x01"), "int-packed-overruns"),
    ("bytes", ld(0x0A, b"\x12\x01a"), "bytes-list-field-2"),
    ("bytes", ld(0x0A, b"\x0a\x05ab"), "bytes-value-overruns"),
    ("bytes", ld(0x0A, ld(0x0A, b"ab") + b"\x0a\x09cd"), "bytes-second-value-overruns"),
    ("bytes", ld(0x0A, ld(0x0A, b"x" * 200) + b"\xff"), "bytes-long-list-garbage"),
    ("bytes", ld(0x0A, b"\x0a\xff"), "bytes-value-length-cut"),
]
#: Map entries of ``Features`` that are not valid.
BAD_ENTRIES = [
    ("float", ld(0x0A, ld(0x1A, b"y") + ld(0x12, floats(1.0))), "entry-field-3"),
    ("float", ld(0x0A, ld(0x0A, b"y") + b"\x10\x01"), "entry-value-as-varint"),
    ("float", b"\x0a\x30" + ld(0x0A, b"y") + ld(0x12, floats(1.0)), "entry-overruns"),
    ("float", ld(0x0A, ld(0x0A, b"y") + b"\x12\x20" + floats(1.0)), "entry-value-overruns"),
    ("float", entry(b"\xff", floats(1.0)), "entry-key-not-utf8"),
]
DAMAGED = [(t, entry(b"y", f), name) for t, f, name in BAD_FEATURES] + BAD_ENTRIES


def scanned(found) -> tuple:
    """A feature (or feature list) of a scan as plain values, floats as their bits."""
    v = found.values
    return (found.records.tolist(), getattr(found, "steps", np.empty(0)).tolist(), v.kind.tolist(), v.counts.tolist(),
            v.floats.view(np.uint32).tolist(), v.ints.tolist(), v.data.to_pylist())


def assert_pruned_read_is_the_full_read(records: list[bytes], schema: Schema, asked: list[str]) -> None:
    """Reading ``asked`` only gives what reading every feature gives, restricted to ``asked``: the same
    odd records and values in the scan; the same columns, or the same refusal of a record that is not
    an Example.  (A full read that fails on a feature's kind or UTF-8 may fail where the pruned
    read, not asked for that feature, does not.)"""
    sequence = {f.name for f in schema.sequence}
    full_scan = scan_batch(records)
    pruned_scan = scan_batch(records, features=[n for n in asked if n not in sequence],
                             feature_lists=[n for n in asked if n in sequence])
    assert pruned_scan.odd.tolist() == full_scan.odd.tolist()
    assert pruned_scan.has_lists.tolist() == full_scan.has_lists.tolist()
    for n in asked:
        group, full_group = ((pruned_scan.feature_lists, full_scan.feature_lists) if n in sequence
                             else (pruned_scan.features, full_scan.features))
        assert (n in group) == (n in full_group), n
        if n in group:
            assert scanned(group[n]) == scanned(full_group[n]), n
    origin = Origin("part-5.tfrecord", first=7, offsets=np.arange(len(records)) * 100)
    try:
        full = decoded(records, schema, origin=origin)
    except RecordDecodeError as e:
        with pytest.raises(RecordDecodeError) as pruned:
            decode_batch(records, schema, features=asked, origin=origin)
        assert str(pruned.value) == str(e)
        return
    except ValueError:
        return
    assert decoded(records, schema, features=asked, origin=origin) == {n: full[n] for n in asked}


@pytest.mark.parametrize("layout", ["same", "mixed", "every"])
@pytest.mark.parametrize("y_type, bad", [(t, b) for t, b, _ in DAMAGED], ids=[name for _, _, name in DAMAGED])
def test_a_record_damaged_in_a_feature_not_asked_for_is_refused_as_the_full_read_refuses_it(y_type, bad, layout):
    schema = schema_of(Feature("x", "float"), Feature("y", y_type, shape=(-1,)))
    good = [[entry(b"x", floats(i / 4)), entry(b"y", GOOD_Y[y_type])] for i in range(6)]
    if layout == "mixed":  # keys in other orders: the general path finds the entries
        for g in good[::2]:
            g.reverse()
    records = [example(*g) for g in good]
    records.insert(3, example(entry(b"x", floats(9.0)), bad))
    first = 3
    if layout == "every":  # every record damaged alike: the Features are checked once for all
        records, first = [example(entry(b"x", floats(9.0)), bad)] * 7, 0
    with pytest.raises(RecordDecodeError):
        decode_record(records[first])  # not an Example: protobuf refuses it
    origin = Origin("part-3.tfrecord", first=100, offsets=[40 * i for i in range(7)])
    with pytest.raises(RecordDecodeError) as full:
        decode_batch(records, schema, origin=origin)
    with pytest.raises(RecordDecodeError) as pruned:
        decode_batch(records, schema, features=["x"], origin=origin)
    assert str(pruned.value) == str(full.value)
    assert str(full.value).startswith(f"part-3.tfrecord: record {100 + first} at byte offset {40 * first}: ")
    odd = scan_batch(records).odd.tolist()
    assert scan_batch(records, features=["x"]).odd.tolist() == odd
    assert odd == ([True] * 7 if layout == "every" else [False] * 3 + [True] + [False] * 3)
    if layout != "every":
        assert decoded(records[:3] + records[4:], schema, features=["x"])["x"] == [bits(i / 4) for i in range(6)]


@pytest.mark.parametrize("bad", [f for _, f, _ in BAD_FEATURES] + [b"\x12\x00"],
                         ids=[name for _, _, name in BAD_FEATURES] + ["step-field-2"])
def test_a_sequence_damaged_in_a_feature_list_not_asked_for_is_refused_as_the_full_read_refuses_it(bad):
    schema = Schema(record_type="sequence_example", context=(Feature("x", "float"),),
                    sequence=(Feature("s", "float", shape=(-1,)),))

    def sequence(x: float, steps: bytes) -> bytes:
        return ld(0x0A, entry(b"x", floats(x))) + ld(0x12, ld(0x0A, ld(0x0A, b"s") + ld(0x12, steps)))

    good = ld(0x0A, floats(1.0)) * 2
    steps = good + (bad if bad == b"\x12\x00" else ld(0x0A, bad))
    records = [sequence(0.5, good), sequence(1.5, steps), sequence(2.5, good)]
    with pytest.raises(RecordDecodeError):
        decode_record(records[1])
    origin = Origin("seq.tfrecord", offsets=[0, 50, 150])
    with pytest.raises(RecordDecodeError, match=r"^seq\.tfrecord: record 1 at byte offset 50: ") as full:
        decode_batch(records, schema, origin=origin)
    for read in (schema, schema_of(Feature("x", "float"))):  # x of the context, or of an Example schema
        with pytest.raises(RecordDecodeError) as pruned:
            decode_batch(records, read, features=["x"], origin=origin)
        assert str(pruned.value) == str(full.value)
    assert scan_batch(records, features=["x"], feature_lists=[]).odd.tolist() == [False, True, False]


@pytest.mark.parametrize("y", [
    entry(b"y", ld(0x12, b"\x0d" + struct.pack("<f", 2.5) + b"\x0d" + struct.pack("<f", 3.5))),  # unpacked
    entry(b"y", ld(0x1A, b"\x08\x05\x08\x07")),                                   # unpacked int64s
    entry(b"y", floats(1.5) + ints(3)),                                            # a Feature with two lists
    entry(b"y", floats(1.5)) + entry(b"y", strings(b"q")),                         # y twice
    ld(0x0A, ld(0x12, floats(1.5)) + ld(0x0A, b"y")),                               # value before key
    entry(b"y", b""), entry(b"y", ld(0x12, b"")),                                  # no kind, an empty list
    ld(0x0A, ld(0x0A, b"y") + b"\x12\x80\x00"),                                     # a 2-byte length of 0
    entry(b"y", ld(0x1A, ld(0x0A, b"\xff" * 9 + b"\x01" + LONG_INTS))),             # 10-byte varints, long
], ids=["unpacked-floats", "unpacked-ints", "two-lists", "key-twice", "value-first", "no-kind", "empty-list",
        "long-length", "long-int-list"])
def test_what_protobuf_accepts_in_a_feature_not_asked_for_leaves_the_asked_ones_as_the_full_read_gives_them(y):
    schema = schema_of(Feature("x", "float"), Feature("y", "float", shape=(-1,)))
    records = [example(entry(b"x", floats(0.25)), entry(b"y", floats(1.0)))] * 3
    records.append(example(entry(b"x", floats(0.5)), y))
    decode_record(records[3])  # protobuf reads it
    assert_pruned_read_is_the_full_read(records, schema, ["x"])
    assert decoded(records, schema, features=["x"])["x"] == [bits(0.25)] * 3 + [bits(0.5)]


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(feature_messages(), st.booleans()), min_size=1, max_size=8), TYPES)
def test_a_pruned_read_refuses_the_random_features_not_asked_for_that_the_full_read_refuses(ys, y_type):
    schema = schema_of(Feature("x", "float"), Feature("y", y_type, shape=(-1,)))
    records = []
    for i, (y, y_first) in enumerate(ys):
        entries = [entry(b"x", floats(i / 2)), entry(b"y", y)]
        records.append(example(*(entries[::-1] if y_first else entries)))
    assert_pruned_read_is_the_full_read(records, schema, ["x"])


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_reads())
def test_a_pruned_read_of_random_records_is_the_full_read_restricted(read):
    assert_pruned_read_is_the_full_read(*read)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_reads(sequences=True))
def test_a_pruned_read_of_random_sequences_is_the_full_read_restricted(read):
    assert_pruned_read_is_the_full_read(*read)


# ---------------------------------------------------------------------------------------
# verify and stats: the vectorized pass gives what a record-by-record pass gives
# ---------------------------------------------------------------------------------------
CHECKED = Schema.from_dict({"features": [
    {"name": "n", "type": "int64", "required": True}, {"name": "fare", "type": "float", "default": 0.0},
    {"name": "emb", "type": "float", "shape": [3]}, {"name": "tags", "type": "string", "shape": [-1]},
    {"name": "name", "type": "string"}]})


def checked_records() -> list[bytes]:
    good = [example(entry(b"n", ints(i)), entry(b"fare", floats(i / 2)), entry(b"emb", floats(1.0, 2.0, 3.0)),
                    entry(b"tags", strings(b"a", "é".encode())), entry(b"name", strings(b"x")))
            for i in range(50)]
    good[3] = example(entry(b"n", floats(1.0)))                                   # wrong kind, missing features
    good[7] = example(entry(b"n", ints(1)), entry(b"emb", floats(1.0)))          # [3] with 1 value
    good[11] = example(entry(b"n", ints(1)), entry(b"tags", strings(b"\xff")))   # not UTF-8
    good[12] = example(entry(b"fare", floats(1.0)))                              # required n missing
    good[20] = b"\x0a\x03\x0a\x01"                                                # not an Example
    good[21] = ld(0x0A, entry(b"n", ints(2))) + ld(0x12, b"")                   # a SequenceExample
    good[30] = example(ld(0x0A, ld(0x12, ints(5)) + ld(0x0A, b"n")))            # value first: fine
    good[31] = example(entry(b"n", ints(3)), entry(b"name", b""))               # no kind
    good[32] = example(entry(b"n", ints(3)), entry(b"name", strings(b"a", b"b")))  # scalar, 2 values
    return good


def test_verify_finds_what_a_record_by_record_check_finds(tmp_path):
    from collections import Counter

    from tfrecord_io.commands.reading import resolve_source
    from tfrecord_io.commands.verify import Problem, check_record, verify_source
    from tfrecord_io.core.framing import TFRecordWriter
    from tfrecord_io.storage.sources import SourceFile, iter_file_records

    records = checked_records()
    path = tmp_path / "part-0.tfrecord"
    with TFRecordWriter(str(path)) as w:
        w.write_batch(records)
    (tmp_path / "checked.yaml").write_text(CHECKED.to_yaml())
    got = verify_source(resolve_source(str(path), schema_uri=str(tmp_path / "checked.yaml")), workers=1,
                       max_listed=len(records))  # what `tfrecord-io verify FILE --schema checked.yaml` finds
    file = SourceFile(str(path), "part-0.tfrecord", "none", size=path.stat().st_size)
    problems, warnings = [], Counter()
    for offset, data in iter_file_records(file):
        try:
            found, warned = check_record(decode_record(data), CHECKED)
        except RecordDecodeError as e:
            problems.append(Problem("schema", str(e), file.name, offset))
            continue
        problems += [Problem("schema", message, file.name, offset) for _, message in found]
        warnings.update(warned)
    assert got.records == 50 and got.problems == problems and got.warnings == warnings
    assert len(problems) == 8 and warnings  # every case above but the value-first record


def test_stats_of_a_file_equal_a_record_by_record_count(tmp_path):
    from tfrecord_io.commands.stats import file_stats
    from tfrecord_io.core.framing import TFRecordWriter
    from tfrecord_io.storage.sources import SourceFile

    records = checked_records()
    path = tmp_path / "s.tfrecord"
    with TFRecordWriter(str(path)) as w:
        w.write_batch(records)
    stats = file_stats(SourceFile(str(path), "s.tfrecord", "none", size=path.stat().st_size), None, None)
    assert stats.records == 50 and stats.undecodable == 1 and stats.sequence_records == 1
    by_name = {name: st for (_, name), st in stats.features.items()}
    decodable = [decode_record(r) for i, r in enumerate(records) if i != 20]
    for name in ("n", "fare", "emb", "tags", "name"):
        held = [r.features[name] for r in decodable if name in r.features]
        assert by_name[name].present == len(held), name
        kinds = {}
        for kind, _ in held:
            kinds[kind or "none"] = kinds.get(kind or "none", 0) + 1
        assert dict(by_name[name].kinds) == kinds, name
        assert by_name[name].lengths.count == len(held)
    assert by_name["tags"].strings.count == sum(len(r.features["tags"][1]) for r in decodable if "tags" in r.features)


def test_records_tensorflow_serializes_take_the_fast_path():
    records = []
    for i in range(20):
        ex = tf.train.Example()
        ex.features.feature["id"].int64_list.value.append(-i)
        ex.features.feature["w"].float_list.value.extend([i / 2] * (i % 4))
        ex.features.feature["name"].bytes_list.value.extend([b"n" * i] * (i % 3))
        if i % 5:
            ex.features.feature["sometimes"].float_list.value.append(1.0)
        records.append(ex.SerializeToString())
    seq = tf.train.SequenceExample()
    seq.context.feature["id"].int64_list.value.append(1)
    for t in range(300):
        seq.feature_lists.feature_list["v"].feature.add().float_list.value.append(t)
    records.append(seq.SerializeToString())
    assert not scan_batch(records).odd.any()
    schema = schema_of(Feature("id", "int64"), Feature("w", "float", shape=(-1,)), Feature("name", "bytes", shape=(-1,)))
    got = decoded(records[:20], schema)
    assert got["id"] == [-i for i in range(20)] and got["name"][5] == [b"nnnnn"] * 2
