"""The inference's scan of a batch of records (``Inference.add_records``) against its reference, a
record at a time (``Inference.add``: ``decode_record`` in Python): the same state, feature by
feature and feature list by list -- kinds and their counts, presence, values and steps per
record, the first record of each kind (what a conflict names), UTF-8 or not -- on both record
cores, for Examples and SequenceExamples of every kind, empty ``Feature`` messages, ragged and
empty lists, non-UTF-8 bytes, kinds that conflict or widen, and batches holding a record the scan
leaves to ``decode_record`` (not in the canonical layout) or one that is no record at all.
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import examples
from record_strategies import I64_MAX, I64_MIN, feature_messages, ld, varint
from tfrecord_io.core import native
from tfrecord_io.core.decode import RecordDecodeError
from tfrecord_io.core.record_schema import Inference, read_sample

KEYS = ["a", "b", "é", "long-key-" * 3]


@st.composite
def features(draw) -> bytes:
    """A ``Feature`` as a serializer writes it: a bytes_list (UTF-8 or not), float_list or
    int64_list of 0 to 3 values, or no kind."""
    kind = draw(st.sampled_from(["bytes", "float", "int64", None]))
    n = draw(st.sampled_from([0, 1, 1, 1, 2, 3]))
    if kind == "bytes":
        values = draw(st.lists(st.sampled_from([b"x", "é".encode(), b"\xff\xfe", b""]), min_size=n, max_size=n))
        return ld(0x0A, b"".join(ld(0x0A, v) for v in values))
    if kind == "float":
        return ld(0x12, ld(0x0A, struct.pack(f"<{n}f", *range(n))) if n else b"")
    if kind == "int64":
        values = draw(st.lists(st.integers(I64_MIN, I64_MAX) | st.integers(0, 127), min_size=n, max_size=n))
        return ld(0x1A, ld(0x0A, b"".join(varint(v % 2**64) for v in values)) if n else b"")
    return b""


def entries(draw, value) -> bytes:
    keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=len(KEYS)))
    return b"".join(ld(0x0A, ld(0x0A, k.encode()) + ld(0x12, value())) for k in keys)


@st.composite
def records(draw) -> bytes:
    """An Example, or a SequenceExample (a context and feature lists of 0 to 3 steps)."""
    context = ld(0x0A, entries(draw, lambda: draw(features())))
    if not draw(st.booleans()):
        return context
    steps = lambda: b"".join(ld(0x0A, draw(features())) for _ in range(draw(st.integers(0, 3))))  # noqa: E731
    return context + ld(0x12, entries(draw, steps))


@st.composite
def odd_records(draw) -> bytes:
    """A record the scan leaves to decode_record, or one that is not a record: an Example of a
    feature message changed in one place (feature_messages), or bytes."""
    if draw(st.booleans()):
        return ld(0x0A, ld(0x0A, ld(0x0A, b"a") + ld(0x12, draw(feature_messages()))))
    return draw(st.binary(max_size=12))


def state(inference: Inference) -> tuple:
    return (inference.records, inference.undecodable, inference.sequence, inference.feats, inference.lists)


def both_ways(batch: list[bytes]) -> Inference:
    """The batch added a record at a time and at once: the same state (and the same error)."""
    offsets = [7 + 100 * k for k in range(len(batch))]
    one, many = Inference(skip_undecodable=True), Inference(skip_undecodable=True)
    for k, (r, o) in enumerate(zip(batch, offsets)):
        one.add(r, "f.tfrecord", 3 + k, o)
    many.add_records(batch, "f.tfrecord", 3, offsets)
    assert state(many) == state(one)
    assert many.describe() == one.describe()
    return many


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "numpy"])
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records(), max_size=12), st.lists(odd_records(), max_size=1))
def test_a_scanned_batch_is_what_records_one_at_a_time_make(pure, batch, odd):
    if not pure and native.active() is None:
        pytest.skip("the compiled core does not run here (tests/test_native_core.py says why)")
    with native.pure() if pure else contextlib.nullcontext():
        both_ways(batch)
        both_ways(batch + odd)  # the batch added a record at a time, the same


def test_the_scan_path_is_taken_and_conflicts_name_the_first_records():
    """A feature that is int64 in record 3 and bytes in record 5 (the first of each), after an empty
    Feature: the error names both records; no record is left to decode_record."""
    def example(feature: bytes) -> bytes:
        return ld(0x0A, ld(0x0A, ld(0x0A, b"a") + ld(0x12, feature)))
    batch = [example(b""), example(ld(0x1A, ld(0x0A, b"\x05"))), example(ld(0x1A, ld(0x0A, b"\x06"))),
             example(ld(0x0A, ld(0x0A, b"x")))]
    inference = Inference()
    scanned = []
    inference.add = lambda *a: scanned.append(a)  # would be called for a record the scan leaves
    inference.add_records(batch, "f.tfrecord", 2, [0, 10, 20, 30])
    assert not scanned and inference.feats["a"].kinds == {"None": 1, "int64_list": 2, "bytes_list": 1}
    with pytest.raises(ValueError, match=r"'a' is int64_list in f.tfrecord \(record 3 at byte offset 10\) and "
                                         r"bytes_list in f.tfrecord \(record 5 at byte offset 30\)"):
        inference.schema()


def test_bytes_that_are_no_record_fail_the_inference_where_they_are():
    good = ld(0x0A, ld(0x0A, ld(0x0A, b"a") + ld(0x12, ld(0x12, b""))))
    inference = Inference()
    with pytest.raises(RecordDecodeError):
        inference.add_records([good, b"\x0a\x05"], "f.tfrecord", 0, [0, 20])
    assert inference.records == 1  # the record before it was added


def test_read_sample_scans_the_first_records_and_reads_on_one_at_a_time():
    """The sample is scanned in batches; a feature still without a kind after it makes the
    inference read on, record by record, to the first record that gives it one, and no further."""
    def example(feature: bytes) -> bytes:
        return ld(0x0A, ld(0x0A, ld(0x0A, b"a") + ld(0x12, feature)))
    empty, int64, two = example(b""), example(ld(0x1A, ld(0x0A, b"\x01"))), example(ld(0x12, ld(0x0A, b"\0" * 8)))
    files = {"x": [empty] * 9000, "y": [empty] * 5000 + [int64] + [two] * 10}
    read = read_sample(list(files), lambda uri: ((9 * k, r) for k, r in enumerate(files[uri])), sample=10_000)
    assert read.records == 9000 + 5000 + 1 and read.feats["a"].kinds == {"None": 14_000, "int64_list": 1}
    schema, notes = read.schema()
    assert schema.feature("a").type == "int64" and not notes  # (not widened to float: the rest is not read)
