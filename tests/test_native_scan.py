"""The compiled wire scanner (``native/src/scan.rs``) against the numpy one (``tfrecord_io.core.wire_scan``).

The same scan is run twice, once as it runs (the compiled core, in this checkout) and once inside
:func:`tfrecord_io.core.native.pure` (the numpy reference): the same records odd, the same
SequenceExamples, the same features and feature lists -- each one's records, steps, kinds, counts
and values, floats bit for bit -- asked for all or some (column pruning), and ``decode_batch`` gives
the same columns or the same error.  On records TensorFlow and spark-tfrecord wrote, the damage
table of ``test_arrow_decode.py`` (every way a feature or map entry can be wrong, in each layout the
numpy scanner treats apart), and Hypothesis' records: both record types, every kind, empty
``Feature`` messages, ragged lists, non-UTF-8 bytes and keys, huge and cut varints, unpacked
numbers, duplicate keys, truncated and damaged records.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import examples
from record_strategies import (WIRE_BYTES, damaged, damaged_reads, feature_messages, ld, schema_of, sequence_batch,
                               varint)
from test_arrow_decode import (BAD_FEATURES, DAMAGED, GOLDEN_EXAMPLE, GOLDEN_SEQUENCE, GOOD_Y, column_bits, entry,
                               example, floats, golden_records, ints, scanned, strings)
from tfrecord_io.core import native
from tfrecord_io.core.arrow_decode import Origin, decode_batch
from tfrecord_io.core.codec import encode_examples, encode_sequence_examples
from tfrecord_io.core.schema import Feature, Schema
from tfrecord_io.core.wire_scan import Wire, scan_batch

HOW_TO_BUILD = "the compiled record core is not built in this checkout (tests/test_native_core.py says how)"


def _require_compiled():
    """Skip unless the compiled core runs (test_this_checkout_runs_the_compiled_core fails where it is not built)."""
    if native.available() is None:
        pytest.skip(HOW_TO_BUILD)
    if native.active() is None:
        pytest.skip(f"{native.PURE_ENV}=1: the suite runs the numpy core")


@pytest.fixture
def compiled():
    _require_compiled()
    return native.active()


def plain(scan) -> tuple:
    """A scan as plain values: odd, has_lists, and each feature (feature list) by name."""
    return (scan.n, scan.odd.tolist(), scan.has_lists.tolist(),
            {name: scanned(f) for name, f in scan.features.items()},
            {name: scanned(f) for name, f in scan.feature_lists.items()})


def same_scan(records, features=None, feature_lists=None) -> tuple:
    """The compiled scan of ``records`` equals numpy's (the dicts' order aside: numpy's follows its
    key table, the compiled one's the keys' first appearance); returns it as plain values."""
    got = scan_batch(records, features, feature_lists)
    with native.pure():
        want = scan_batch(records, features, feature_lists)
    assert got.odd.dtype == want.odd.dtype == np.bool_ and got.has_lists.dtype == np.bool_
    for found in (*got.features.values(), *got.feature_lists.values()):
        v = found.values
        assert (found.records.dtype, v.kind.dtype, v.counts.dtype, v.floats.dtype, v.ints.dtype, v.data.type) == \
            (np.int64, np.uint8, np.int64, np.float32, np.int64, pa.large_binary())
        assert len(v.kind) == len(v.counts) == len(v.bad) and not v.bad.any()
    assert plain(got) == plain(want)
    return plain(got)


def decode_outcome(records, schema, **kw):
    try:
        batch = decode_batch(records, schema, origin=Origin("p.tfrecord", first=5, offsets=np.arange(len(records)) * 9),
                             **kw)
    except ValueError as e:
        return type(e).__name__, str(e)
    return {name: column_bits(batch.column(name)) for name in batch.schema.names}


def same_decode(records, schema, **kw):
    got = decode_outcome(records, schema, **kw)
    with native.pure():
        want = decode_outcome(records, schema, **kw)
    assert got == want
    return got


def same_everything(records, schema: Schema, asked: list[str] | None = None) -> None:
    """The full scan, the pruned scan of ``asked``, the full and the pruned decode: each the same in both cores."""
    same_scan(records)
    same_decode(records, schema)
    if asked is not None:
        sequence = {f.name for f in schema.sequence}
        same_scan(records, [n for n in asked if n not in sequence], [n for n in asked if n in sequence])
        same_decode(records, schema, features=asked)


# ---------------------------------------------------------------------------------------
# What writers write
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, schema", [("example", GOLDEN_EXAMPLE), ("example-gzip", GOLDEN_EXAMPLE),
                                          ("sequence", GOLDEN_SEQUENCE)])
def test_records_spark_tfrecord_wrote(name, schema, compiled):
    records = golden_records(name)
    scan = same_scan(records)
    assert not any(scan[1]) and scan[3]
    same_everything(records, schema, [schema.input_features[-1].name])
    same_scan(pa.array(records, pa.binary()).slice(1))  # an Arrow array whose offsets do not start at 0


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary()])
def test_records_borrowed_from_an_arrow_array_decode_as_a_list_does(arrow_type, compiled):
    """The compiled scan reads an Arrow array's bytes where they lie (no copy, offsets not from 0);
    the slow path takes an odd record (a key twice) from there too."""
    good = [example(entry(b"x", ints(i)), entry(b"s", strings(b"v%d" % i))) for i in range(6)]
    twice = example(entry(b"x", ints(1)), entry(b"x", ints(7)), entry(b"s", strings(b"w")))
    records = [b"skipped", *good[:3], twice, *good[3:]]
    schema = schema_of(Feature("x", "int64"), Feature("s", "string"))
    want = same_decode(records[1:], schema)
    assert want["x"] == column_bits(pa.array([0, 1, 2, 7, 3, 4, 5]))
    for kw in ({}, {"features": ["s"]}):
        assert same_decode(pa.array(records, arrow_type).slice(1), schema, **kw) == same_decode(records[1:], schema, **kw)
        assert same_decode(pa.chunked_array([pa.array(records[:4], arrow_type).slice(1),
                                             pa.array(records[4:], arrow_type)]), schema, **kw) == \
            same_decode(records[1:], schema, **kw)


def test_records_tensorflow_serializes(compiled):
    tf = pytest.importorskip("tensorflow")
    records = []
    for i in range(40):
        ex = tf.train.Example()
        ex.features.feature["id"].int64_list.value.append(-i * 2**40)
        ex.features.feature["w"].float_list.value.extend([i / 2, float("nan")] * (i % 4))
        ex.features.feature["name"].bytes_list.value.extend([b"n\xff" * i] * (i % 3))
        if i % 5:
            ex.features.feature["sometimes"].float_list.value.append(1.0)
        if i % 7 == 0:
            ex.features.feature["empty"].SetInParent()  # a Feature with no kind
        records.append(ex.SerializeToString())
    scan = same_scan(records)
    assert not any(scan[1]) and set(scan[3]) == {"id", "w", "name", "sometimes", "empty"}
    schema = schema_of(Feature("id", "int64"), Feature("w", "float", shape=(-1,)),
                       Feature("name", "bytes", shape=(-1,)), Feature("sometimes", "float"),
                       Feature("empty", "string", shape=(-1,)))
    same_everything(records, schema, ["name"])
    seqs = []
    for n in (0, 1, 3, 300):
        seq = tf.train.SequenceExample()
        seq.context.feature["id"].int64_list.value.append(n)
        for t in range(n):
            seq.feature_lists.feature_list["v"].feature.add().float_list.value.append(t)
            seq.feature_lists.feature_list["s"].feature.add().bytes_list.value.extend([b"ab"] * (t % 3))
        seqs.append(seq.SerializeToString())
    scan = same_scan(seqs + records[:3])
    assert not any(scan[1]) and scan[2] == [False, True, True, True, False, False, False]
    seq_schema = Schema(record_type="sequence_example", context=(Feature("id", "int64"),),
                        sequence=(Feature("v", "float"), Feature("s", "bytes", shape=(-1,))))
    same_everything(seqs, seq_schema, ["s"])


def test_long_sequences_and_many_values(compiled):
    seq = Schema(record_type="sequence_example", sequence=(Feature("v", "int64"), Feature("w", "string", shape=(-1,))))
    groups = [{"v": list(range(n)), "w": [["x" * (n % 200)] * (n % 3) for _ in range(n)]} for n in (0, 1, 3, 700, 5000)]
    records = encode_sequence_examples(sequence_batch(seq, groups), seq).to_pylist()
    same_everything(records, seq, ["w"])
    cut = records[:3] + [records[3][:-1]] + records[4:]  # the numpy scan's tail loop meets the damage
    assert same_scan(cut)[1] == [False, False, False, True, False]


def test_empty_batches_and_records(compiled):
    assert same_scan([]) == (0, [], [], {}, {})
    assert same_scan([b"", example(), ld(0x12, b""), ld(0x0A, b"") + ld(0x12, b"")])[1:3] == \
        ([False] * 4, [False, False, True, True])


# ---------------------------------------------------------------------------------------
# Damage: the table of test_arrow_decode.py, then records made by hand
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["same", "mixed", "every"])
@pytest.mark.parametrize("y_type, bad", [(t, b) for t, b, _ in DAMAGED], ids=[name for _, _, name in DAMAGED])
def test_the_damage_table(y_type, bad, layout, compiled):
    schema = schema_of(Feature("x", "float"), Feature("y", y_type, shape=(-1,)))
    good = [[entry(b"x", floats(i / 4)), entry(b"y", GOOD_Y[y_type])] for i in range(6)]
    if layout == "mixed":
        for g in good[::2]:
            g.reverse()
    records = [example(*g) for g in good]
    records.insert(3, example(entry(b"x", floats(9.0)), bad))
    if layout == "every":
        records = [example(entry(b"x", floats(9.0)), bad)] * 7
    odd = same_scan(records)[1]
    assert odd == ([True] * 7 if layout == "every" else [False] * 3 + [True] + [False] * 3)
    same_scan(records, ["x"])
    same_scan(records, [])
    outcome = same_decode(records, schema, features=["x"])
    assert outcome[0] == "RecordDecodeError" and outcome == same_decode(records, schema)


@pytest.mark.parametrize("bad", [f for _, f, _ in BAD_FEATURES] + [b"\x12\x00"],
                         ids=[name for _, _, name in BAD_FEATURES] + ["step-field-2"])
def test_the_damage_table_in_feature_lists(bad, compiled):
    schema = Schema(record_type="sequence_example", context=(Feature("x", "float"),),
                    sequence=(Feature("s", "float", shape=(-1,)),))

    def sequence(x: float, steps: bytes) -> bytes:
        return ld(0x0A, entry(b"x", floats(x))) + ld(0x12, ld(0x0A, ld(0x0A, b"s") + ld(0x12, steps)))

    good = ld(0x0A, floats(1.0)) * 2
    records = [sequence(0.5, good), sequence(1.5, good + (bad if bad == b"\x12\x00" else ld(0x0A, bad))),
               sequence(2.5, good)]
    assert same_scan(records)[1] == [False, True, False]
    assert same_scan(records, ["x"], [])[1] == [False, True, False]
    assert same_decode(records, schema)[0] == "RecordDecodeError"
    same_decode(records, schema, features=["x"])


NINE_BYTE_ZERO = b"\x80" * 8 + b"\x00"  # a length of 0 in 9 bytes: protobuf reads it, the scanners leave it to it


@pytest.mark.parametrize("record", [
    example(entry(b"x", floats(1.5))) + b"\x18\x01",                              # a field Example does not have
    example(entry(b"x", floats(1.5))) * 2,                                         # features twice
    ld(0x12, b"") + example(entry(b"x", floats(1.5))),                             # feature_lists first
    example(entry(b"x", floats(1.5)), entry(b"x", floats(2.5))),                   # a key twice
    example(entry(b"x", floats(1.5)), entry(b"\xff\xfe", floats(2.5))),            # a key that is not UTF-8
    example(ld(0x0A, ld(0x12, floats(1.5)) + ld(0x0A, b"x"))),                     # value before key
    example(ld(0x0A, ld(0x0A, b"x"))),                                             # a key and no value
    example(entry(b"x", ld(0x12, b"\x0d" + struct.pack("<f", 2.5)))),             # an unpacked float
    example(entry(b"x", ld(0x1A, b"\x08\x05\x08\x07"))),                           # unpacked int64s
    example(entry(b"x", ints(-1, 2**63 - 1, 0, 1))),                               # 10-byte varints
    example(entry(b"x", ld(0x1A, ld(0x0A, b"\xff" * 9 + b"\x7f")))),              # a 10th byte past bit 63
    example(entry(b"x", ld(0x1A, ld(0x0A, b"\xff" * 10 + b"\x01")))),             # an 11-byte varint
    b"\x0a" + NINE_BYTE_ZERO,                                                      # a 9-byte length
    b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",                           # a length cut after 10 bytes
    b"\x0a" + varint(2**60) + b"\x00" * 20,                                        # a huge length
    example(entry(b"x", floats(1.5)))[:-1],                                        # truncated
    example(entry(b"x", b"")),                                                     # no kind
    example(entry(b"", strings(b"a"))),                                            # an empty key
    example(entry(b"x", strings(b"", b"\xff\x00", b"z" * 300))),                   # long and empty values
    example(entry(b"x" * 300, floats(1.0))),                                       # a key past the one-byte lengths
], ids=["example-field-3", "features-twice", "lists-first", "key-twice", "key-not-utf8", "value-first", "no-value",
        "unpacked-float", "unpacked-ints", "10-byte-varints", "10th-byte", "11-byte-varint", "9-byte-length",
        "cut-length", "huge-length", "truncated", "no-kind", "empty-key", "long-values", "long-key"])
def test_records_made_by_hand(record, compiled):
    good = example(entry(b"x", floats(0.5)), entry(b"y", ints(3)))
    schema = schema_of(Feature("x", "float", shape=(-1,)), Feature("y", "int64"))
    for records in ([record], [good, record, good], [record] * 3):
        same_everything(records, schema, ["y"])
        same_scan(records, ["x"])


def test_the_compiled_scan_refuses_bounds_outside_the_buffer(compiled):
    with pytest.raises(ValueError, match="last offset 9 is past the 4 data bytes"):
        compiled.scan_examples(np.zeros(4, np.uint8), np.array([0, 9], np.int64))
    with pytest.raises(ValueError, match="offset 1 .* is below"):
        compiled.scan_examples(np.zeros(4, np.uint8), np.array([2, 1], np.int64))
    with pytest.raises(ValueError, match="offsets are empty"):
        compiled.scan_examples(np.zeros(4, np.uint8), np.array([], np.int64))
    wire = Wire([example(entry(b"x", floats(0.5)))])
    odd, has_lists, found, lists = compiled.scan_examples(wire.buf, wire.bounds, ["x"], None)
    assert (bytes(odd), bytes(has_lists), [f[0] for f in found], lists) == (b"\x00", b"\x00", ["x"], [])


# ---------------------------------------------------------------------------------------
# Hypothesis
# ---------------------------------------------------------------------------------------
KEYS = st.sampled_from([b"a", b"b", b"long-key-" * 3, b"\xff", b"\xc3\xa9", b""])


@st.composite
def hand_records(draw) -> bytes:
    """An Example or SequenceExample made field by field: random Features (most of them damaged,
    :func:`feature_messages`) under a few keys, a key twice now and then, and the record cut or
    changed in a byte sometimes."""
    entries = draw(st.lists(st.tuples(KEYS, feature_messages()), max_size=5))
    record = ld(0x0A, b"".join(entry(k, f) for k, f in entries)) if entries or draw(st.booleans()) else b""
    if draw(st.booleans()):
        lists = draw(st.lists(st.tuples(KEYS, st.lists(feature_messages(), max_size=4)), max_size=3))
        record += ld(0x12, b"".join(ld(0x0A, ld(0x0A, k) + ld(0x12, b"".join(ld(0x0A, f) for f in steps)))
                                    for k, steps in lists))
    how = draw(st.sampled_from(["keep", "keep", "cut", "byte", "append"]))
    if how == "cut" and record:
        record = record[:draw(st.integers(0, len(record) - 1))]
    elif how == "byte" and record:
        at = draw(st.integers(0, len(record) - 1))
        record = record[:at] + bytes([draw(WIRE_BYTES)]) + record[at + 1:]
    elif how == "append":
        record += bytes([draw(WIRE_BYTES)])
    return record


ASKED = st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "é", "long-key-" * 3, "", "zz"]), max_size=3))


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hand_records(), max_size=8), ASKED, ASKED)
def test_records_made_field_by_field(records, features, feature_lists):
    _require_compiled()
    same_scan(records)
    same_scan(records, features, feature_lists)
    schema = Schema(record_type="sequence_example", context=(Feature("a", "float", shape=(-1,)),),
                    sequence=(Feature("b", "bytes", shape=(-1,)),))
    same_decode(records, schema)
    same_decode(records, schema, features=["b"])
    same_decode(records, schema_of(Feature("a", "int64"), Feature("é", "string", shape=(-1,))), features=["é"])


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_reads())
def test_random_examples_damaged_or_not(read):
    _require_compiled()
    same_everything(*read)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_reads(sequences=True))
def test_random_sequences_damaged_or_not(read):
    _require_compiled()
    same_everything(*read)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=40), max_size=6))
def test_bytes_that_are_not_records(records):
    _require_compiled()
    same_scan(records)
    same_scan(records, [], [])


def test_keys_that_differ_in_one_byte_take_the_fast_path_in_both_cores():
    """Long keys are known by a hash of all their bytes in the numpy scanner (once only its first and
    last 8 bytes: keys differing in the middle shared a code, and all but the first went the slow way)."""
    names = [b"user_embedding_%d_of_the_vector" % i for i in range(3)] + [b"long-ke\x00-long-key-long-key-",
                                                                  b"long-key-long-key-long-key-"]
    records = [example(*(entry(k, ints(i)) for k in (names if i % 2 else names[::-1]))) for i in range(6)]
    with native.pure():
        scan = scan_batch(records)
    assert not scan.odd.any() and sorted(scan.features) == sorted(n.decode() for n in names)
    if native.active() is not None:
        same_scan(records)


@pytest.mark.parametrize("records", [1, 20])
def test_a_long_length_far_into_a_long_list_is_odd_however_many_records_are_that_long(records):
    """The numpy scan walks a few long lists to their end one unit at a time: it reads lengths as
    its lock-step walk does (8 bytes at most; once 10), so the record is odd in both walks -- and
    in the compiled scan -- whatever else the batch holds."""
    step = ld(0x0A, floats(1.0))
    long_step = b"\x0a" + b"\x88" + b"\x80" * 7 + b"\x00" + floats(1.0)  # a length of 8 in 9 bytes
    assert len(long_step) == len(step) + 8

    def sequence(steps: list[bytes]) -> bytes:
        return ld(0x12, ld(0x0A, ld(0x0A, b"s") + ld(0x12, b"".join(steps))))

    batch = [sequence([step] * 100)] * (records - 1) + [sequence([step] * 80 + [long_step] + [step] * 19)]
    with native.pure():
        assert scan_batch(batch).odd.tolist() == [False] * (records - 1) + [True]
    if native.active() is not None:
        assert same_scan(batch)[1][-1]


def test_the_runs_kept_from_batch_to_batch_stay_small(compiled):
    """The compiled scan's usual columns (0, 1, 2...; one kind; one value) are shared read-only
    arrays kept for the next batch: never one of a huge batch, never more than 64 of them."""
    from tfrecord_io.core import wire_scan

    schema = schema_of(Feature("x", "int64"), Feature("w", "float"))
    record = example(entry(b"x", ints(1)), entry(b"w", floats(0.5)))
    for n in (70_000, *range(100, 180)):
        batch = decode_batch([record] * n, schema)
        assert batch.column("x").to_pylist() == [1] * n and batch.column("w").to_pylist() == [0.5] * n
    kept = list(wire_scan._RUNS.values())
    assert kept and len(kept) <= 64 and all(len(a) <= 1 << 16 and not a.flags.writeable for a in kept)
