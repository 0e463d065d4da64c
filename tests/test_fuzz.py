"""Fuzzing the two parsers that read files we did not write: the TFRecord framing reader and the
schema loader (issue #16).  Each must, for any input, either succeed or raise its one documented
error -- never crash, hang or raise something else.

Bounded in the suite (``TFRECORD_IO_FUZZ_EXAMPLES`` examples per target, default 300); run longer
on demand: ``make fuzz`` (or ``TFRECORD_IO_FUZZ_EXAMPLES=20000 pytest tests/test_fuzz.py``).
"""

from __future__ import annotations

import io
import os
import zlib

import pyarrow as pa
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_io.core.framing import CorruptRecordError, frame_records, read_records
from tfrecord_io.core.schema import Schema, SchemaError

EXAMPLES = int(os.environ.get("TFRECORD_IO_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=2000, suppress_health_check=[HealthCheck.too_slow],
                derandomize=EXAMPLES <= 300)  # the suite's run is reproducible; long runs explore

VALID = frame_records(pa.array([b"", b"a", b"hello world" * 20, bytes(range(256))], pa.binary()))


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for pos, value in edits:
        if buf:
            buf[pos % len(buf)] = value
    return bytes(buf[:cut] if cut is not None else buf)


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
       cut=st.one_of(st.none(), st.integers(0, len(VALID))), verify=st.booleans())
def test_framing_reader_yields_records_or_a_corrupt_record_error(edits, cut, verify):
    data = _mutate(VALID, edits, cut)
    try:
        records = list(read_records(io.BytesIO(data), name="fuzz", verify=verify))
    except CorruptRecordError as e:
        assert e.path == "fuzz" and 0 <= e.offset <= len(data)
        return
    # Accepted: nothing skipped or invented -- the records fill the stream exactly, and with the
    # data CRCs checked they frame back to the very bytes.
    assert sum(len(r) + 16 for r in records) == len(data)
    if verify:
        assert frame_records(pa.array(records, pa.binary())) == data


@FUZZ
@given(data=st.binary(max_size=600), compression=st.sampled_from(["gzip", "zlib"]))
def test_framing_reader_on_arbitrary_compressed_bytes(data, compression):
    packed = zlib.compress(data) if compression == "zlib" else _gzip(data)
    for blob in (packed, packed[: len(packed) // 2], data):
        try:
            list(read_records(io.BytesIO(blob), name="fuzz", compression=compression))
        except CorruptRecordError:
            pass


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data)


SCHEMA_TEXT = yaml.safe_dump({
    "record_type": "example",
    "features": [{"name": "a", "type": "int64", "default": 0}, {"name": "b", "type": "string", "shape": [-1]},
                 {"name": "c", "type": "float", "shape": [2], "default": [0.0, 1.0]}],
    "label": "a", "csv": {"header": True, "delimiter": ",", "null_values": ["", "NA"]}})

_yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8))
_yaml_values = st.recursive(_yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
_keys = st.sampled_from(["record_type", "features", "label", "csv", "group_by", "order_by", "context", "sequence",
                         "ignore_columns", "name", "type", "shape", "default", "required", "separator"])


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(list(":-[]{}&*!|>'\"# \n\tab0"))),
                      max_size=5))
def test_schema_loader_on_mutated_yaml(edits):
    text = list(SCHEMA_TEXT)
    for pos, ch in edits:
        text[pos % len(text)] = ch
    _load_or_schema_error("".join(text))


@FUZZ
@given(doc=st.dictionaries(_keys, _yaml_values, max_size=6))
def test_schema_loader_on_arbitrary_documents(doc):
    _load_or_schema_error(yaml.safe_dump(doc))
    try:
        Schema.from_dict(doc)
    except SchemaError:
        pass


def test_schema_loader_refuses_an_alias_bomb_quickly():
    import time

    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]" for i in range(9)]
    bomb = "\n".join(levels) + "\nrecord_type: *j\n"
    started = time.monotonic()
    try:
        Schema.from_yaml(bomb)
    except SchemaError as e:
        assert len(str(e)) < 2000
    assert time.monotonic() - started < 2


def _load_or_schema_error(text: str) -> None:
    try:
        schema = Schema.from_yaml(text)
    except SchemaError as e:
        assert len(str(e)) < 5000  # bounded, whatever the input
        return
    assert Schema.from_dict(schema.to_dict()) == schema  # what loads, round-trips
