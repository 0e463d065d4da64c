"""Serialized ``tf.train.Example`` / ``SequenceExample`` records straight into Arrow columns, vectorized.

The mirror of :mod:`tfrecord_io.core.codec` for reading: a batch of records is scanned by the wire
scanner (:mod:`tfrecord_io.core.wire_scan`: numpy over the concatenated record bytes, or its
compiled equivalent -- no Python object per record, feature or value) and :func:`decode_batch`
turns what it finds into one Arrow column per schema feature.  The records the scanner leaves out,
those not in the canonical layout every protobuf serializer writes, are decoded instead by
:func:`tfrecord_io.core.decode.decode_record`, which applies protobuf's rules (merging, the last
entry for a key winning) and refuses what is not an Example.  So a record decodes here to exactly
what ``decode_record`` gives, or fails as it does: the two readers cannot disagree, and the slow
one only ever runs on the records the fast one cannot take.  Every feature of a record is checked,
also those not asked for (``features=``): their wire structure only, their values never read, so
decoding costs a structural check per feature stored and a full parse per feature read (column
pruning) -- and a record that is not a valid Example is refused whatever is asked.

What TensorFlow's parser does differently (``tests/test_arrow_decode.py`` pins each case): it
skips fields these messages do not have and garbage in features it is not asked for (we refuse
both, as ``decode_record`` does: that is how bytes that are not an Example are told apart), and
keys that are not UTF-8; for a ``Feature`` set twice it keeps the first list or refuses, where
protobuf merges the lists (two of the same kind) or keeps the last (two kinds); it refuses a list
with packed and unpacked numbers, which protobuf concatenates.  Everything else -- packed or
unpacked numbers, entries in any order, the last of two entries for a key, a ``Feature`` with
no kind (no values) -- it reads as we do.

:func:`decode_batch` (Arrow, the schema's types) gives, per feature: a scalar's value, or null
when the record lacks the feature or holds another number of values than one (TensorFlow's
``RaggedFeature`` read of a scalar, as ``spark.read.format("tfrecord")`` has always done); a
list's values (any number), or null when the record lacks it; for SequenceExamples a list of
steps per sequence feature (a scalar step with another number of values than one is a null
step), or null when the record has no ``FeatureList`` for it.  A record whose feature has another
kind than the schema's, or whose ``string`` feature is not UTF-8, is an error naming the source,
the record and the feature (TensorFlow's parser refuses a kind mismatch too).

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa

from tfrecord_io.core.decode import RecordDecodeError, decode_record
from tfrecord_io.core.schema import Feature, Schema
from tfrecord_io.core.wire_scan import (
    KIND_CODE, KIND_FLOAT, KIND_INT64, KIND_NONE, ScannedList, Values, Wire, binary_parts, exclusive_cumsum, is_utf8,
    scan_wire,
)

__all__ = ["Origin", "column_type", "decode_batch"]

_KIND_NAME = {KIND_NONE: "a feature with no kind set", **{c: n for n, c in KIND_CODE.items()}}


@dataclass(frozen=True)
class Origin:
    """Where a batch's records come from, to name a bad one: ``source`` (a file), the number in it
    of the batch's first record (or of each record: ``numbers``, when they are not consecutive), and
    each record's byte offset in the (uncompressed) stream."""

    source: str = "<records>"
    first: int = 0
    offsets: Sequence[int] | np.ndarray | None = None
    numbers: Sequence[int] | np.ndarray | None = None

    def where(self, i: int) -> str:
        number = self.first + i if self.numbers is None else int(self.numbers[i])
        at = f" at byte offset {int(self.offsets[i])}" if self.offsets is not None else ""
        return f"{self.source}: record {number}{at}"


_ARROW = {"int64": pa.int64(), "float": pa.float32(), "bytes": pa.binary(), "string": pa.string()}


def column_type(f: Feature, steps: bool = False) -> pa.DataType:
    """The Arrow type :func:`decode_batch` gives a feature (``steps``: a sequence feature)."""
    t = pa.list_(_ARROW[f.type]) if f.is_list else _ARROW[f.type]
    return pa.list_(t) if steps else t


class _Failures:
    """The first bad record of a batch, whichever check finds it (errors name the first one)."""

    def __init__(self, origin: Origin):
        self.origin, self.first = origin, None

    def add(self, record: int, error: Exception) -> None:
        if self.first is None or record < self.first[0]:
            self.first = (record, error)

    def kind(self, record: int, f: Feature, got: int, step: int | None = None) -> None:
        at = "" if step is None else f", step {step}"
        self.add(record, ValueError(f"{self.origin.where(record)}: feature {f.name!r}{at} is {_KIND_NAME[got]}, "
                                    f"the schema says {f.type} ({f.kind})"))

    def utf8(self, record: int, f: Feature, value: bytes) -> None:
        self.add(record, ValueError(f"{self.origin.where(record)}: feature {f.name!r} (type string) holds bytes "
                                    f"that are not UTF-8: {value[:40]!r}; read it as type bytes"))

    def raise_first(self) -> None:
        if self.first is not None:
            raise self.first[1]


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _strings(items: pa.Array, f: Feature, record_of_item: np.ndarray, fail: _Failures) -> pa.Array:
    """``items`` (large_binary, no nulls) as the feature's type: UTF-8 checked for ``string``."""
    if f.type == "bytes":
        return items
    _, data = binary_parts(items)
    if not data.size or data.max() < 0x80:  # ASCII: valid UTF-8
        return items.view(pa.large_string())
    try:
        return items.cast(pa.large_string())
    except pa.ArrowInvalid:
        for i, v in enumerate(items.to_pylist()):
            try:
                v.decode("utf-8")
            except UnicodeDecodeError:
                fail.utf8(int(record_of_item[i]), f, v)
                break
        return pa.nulls(len(items), pa.large_string())


def _lists(counts: np.ndarray, values: pa.Array, valid: np.ndarray) -> pa.Array:
    """A list array: row i holds the next ``counts[i]`` of ``values``, null where not ``valid``."""
    offsets = exclusive_cumsum(counts)
    if offsets[-1] >= 2**31:
        raise ValueError(f"{offsets[-1]} values in one batch of one feature: more than an Arrow list holds; "
                         f"decode fewer records at a time")
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values, mask=pa.array(~valid))


def _widened(values: Values) -> Values:
    """``values`` with its ``int64_list`` slots read as ``float_list`` (a float feature's int64
    values widen to float32, docs/wire-contract.md), every slot's values kept in slot order."""
    is_float, is_int = values.kind == KIND_FLOAT, values.kind == KIND_INT64
    starts = exclusive_cumsum(np.where(is_float | is_int, values.counts, 0))
    merged = np.empty(int(starts[-1]), dtype=values.floats.dtype)
    for mask, source in ((is_float, values.floats), (is_int, values.ints.astype(np.float32))):
        counts = values.counts[mask]
        within = np.arange(int(counts.sum())) - np.repeat(exclusive_cumsum(counts)[:-1], counts)
        merged[np.repeat(starts[:-1][mask], counts) + within] = source
    return Values(np.where(is_int, KIND_FLOAT, values.kind).astype(values.kind.dtype), values.counts, merged,
                  values.ints[:0], values.data, bad=values.bad)


def _column(f: Feature, values: Values, rows: np.ndarray, n: int, record_of_row: np.ndarray,
            fail: _Failures) -> pa.Array:
    """One feature's column over ``n`` rows, ``values`` holding the slots of ``rows`` (ascending;
    the other rows lack the feature): scalars are null unless their slot has one value, lists are
    null where there is no slot.  ``record_of_row`` names the record of a row in errors."""
    kind = KIND_CODE[f.kind]
    if kind == KIND_FLOAT and values.any_of_kind(KIND_INT64):
        values = _widened(values)
    if not f.is_list and len(rows) == n and values.one_each_of_kind(kind):
        # every row holds one value (the usual scalar): the values are the column
        if f.type in ("bytes", "string"):
            return _strings(values.data, f, record_of_row, fail).cast(_ARROW[f.type])
        return pa.Array.from_buffers(_ARROW[f.type], n, [None, pa.py_buffer(
            values.floats.view(np.uint32) if f.type == "float" else values.ints)])
    of_kind = values.kind == kind
    wrong = ~of_kind & (values.kind != KIND_NONE)
    if wrong.any():
        j = int(np.flatnonzero(wrong)[0])
        fail.kind(int(record_of_row[rows[j]]), f, int(values.kind[j]))
        return pa.nulls(n, column_type(f))
    counts = np.where(of_kind, values.counts, 0)
    starts = exclusive_cumsum(counts)[:-1]
    if f.type in ("bytes", "string"):
        flat = values.data
    else:
        flat = pa.array(values.floats if f.type == "float" else values.ints)
    if f.is_list:
        row_counts = np.zeros(n, dtype=np.int64)
        row_counts[rows] = counts
        valid = np.zeros(n, dtype=bool)
        valid[rows] = True
        if f.type in ("bytes", "string"):
            flat = _strings(flat, f, np.repeat(record_of_row[rows], counts), fail)
        return _lists(row_counts, flat.cast(_ARROW[f.type]), valid)
    one = counts == 1
    at = rows[one]
    valid = np.zeros(n, dtype=bool)
    valid[at] = True
    if f.type in ("bytes", "string"):
        items = flat if one.all() else flat.take(pa.array(starts[one]))
        items = _strings(items, f, record_of_row[at], fail)
        if len(at) == n:
            return items.cast(_ARROW[f.type])
        item_off, _ = binary_parts(items.view(pa.large_binary()))
        lengths = np.zeros(n, dtype=np.int64)
        lengths[at] = np.diff(item_off)
        offsets = exclusive_cumsum(lengths) + item_off[0]
        large = pa.large_string() if f.type == "string" else pa.large_binary()
        out = pa.Array.from_buffers(large, n, [_validity(valid), pa.py_buffer(offsets), items.buffers()[2]])
        return out.cast(_ARROW[f.type])
    # floats as their bits: every NaN payload survives the copies
    source = values.floats.view(np.uint32) if f.type == "float" else values.ints
    picked = source if one.all() else source[starts[one]]
    if len(at) == n:
        dense = picked
    else:
        dense = np.zeros(n, dtype=source.dtype)
        dense[at] = picked
    return pa.Array.from_buffers(_ARROW[f.type], n, [_validity(valid), pa.py_buffer(dense)])


def _sequence_column(f: Feature, sl: ScannedList | None, n: int, fail: _Failures) -> pa.Array:
    """A sequence feature: per record the list of its steps (null where the record has none)."""
    if sl is None:
        return pa.nulls(n, column_type(f, steps=True))
    total = int(sl.steps.sum())
    record_of_step = np.repeat(sl.records, sl.steps)
    steps = _column(f, sl.values, np.arange(total), total, record_of_step, fail)
    row_steps = np.zeros(n, dtype=np.int64)
    row_steps[sl.records] = sl.steps
    valid = np.zeros(n, dtype=bool)
    valid[sl.records] = True
    return _lists(row_steps, steps, valid)


def _py_value(f: Feature, feature: tuple | None, fail: _Failures, record: int, step: int | None = None):
    """The slow path's value of one feature (or step): the same rules as :func:`_column`."""
    if feature is None:
        return None
    kind, values = feature
    if kind == "int64_list" and f.type == "float":  # widened (docs/wire-contract.md)
        kind, values = "float_list", [float(np.float32(v)) for v in values]
    if kind is not None and kind != f.kind:
        fail.kind(record, f, KIND_CODE[kind], step)
        return None
    if f.type == "string":
        try:
            values = [v.decode("utf-8") for v in values]
        except UnicodeDecodeError:
            fail.utf8(record, f, next(v for v in values if not is_utf8(v)))
            return None
    if f.is_list:
        return list(values)
    return values[0] if len(values) == 1 else None


def _slow_rows(wire: Wire, odd: np.ndarray, schema: Schema, features: list[Feature],
               fail: _Failures) -> list[pa.Array]:
    """The odd records' rows, decoded by :func:`~tfrecord_io.core.decode.decode_record`."""
    sequence = {f.name for f in schema.sequence}
    columns: list[list] = [[] for _ in features]
    for i in odd.tolist():
        try:
            rec = decode_record(wire.record(i))
        except RecordDecodeError as e:
            fail.add(i, RecordDecodeError(f"{fail.origin.where(i)}: {e}"))
            for col in columns:
                col.append(None)
            continue
        for col, f in zip(columns, features):
            if f.name in sequence:
                steps = (rec.feature_lists or {}).get(f.name)
                col.append(None if steps is None else
                           [_py_value(f, s, fail, i, j) for j, s in enumerate(steps)])
            else:
                col.append(_py_value(f, rec.features.get(f.name), fail, i))
    return [pa.array(col, column_type(f, f.name in sequence)) for col, f in zip(columns, features)]


def decode_batch(records, schema: Schema, *, features: Sequence[str] | None = None,
                 origin: Origin | None = None) -> pa.RecordBatch:
    """Decode serialized records into a RecordBatch of the schema's features (module doc).

    ``records``: a binary / large_binary Arrow array or a sequence of ``bytes``, read as the schema's
    ``record_type`` (a SequenceExample's ``feature_lists`` are ignored for an example schema).
    ``features``: the columns, in order (default: every feature of the schema); the other features
    of the records are checked by their wire structure only, their values never read.  Types:
    :func:`column_type`.  ``origin`` names the records in errors: a record that is not a valid
    Example / SequenceExample raises :class:`~tfrecord_io.core.decode.RecordDecodeError`, a feature
    of another kind than the schema's or a ``string`` that is not UTF-8 a ValueError.
    """
    fail = _Failures(origin or Origin())
    chosen = [schema.feature(name) for name in features] if features is not None else list(schema.input_features)
    wire = Wire(records)
    sequence = {f.name for f in schema.sequence}
    scan = scan_wire(wire, features=[f.name for f in chosen if f.name not in sequence],
                     feature_lists=[f.name for f in chosen if f.name in sequence])
    columns = []
    rows_of = np.arange(scan.n)
    for f in chosen:
        if f.name in sequence:
            columns.append(_sequence_column(f, scan.feature_lists.get(f.name), scan.n, fail))
            continue
        sf = scan.features.get(f.name)
        columns.append(pa.nulls(scan.n, column_type(f)) if sf is None else
                       _column(f, sf.values, sf.records, scan.n, rows_of, fail))
    if scan.odd.any():
        odd = np.flatnonzero(scan.odd)
        index = np.arange(scan.n)
        index[odd] = scan.n + np.arange(len(odd))
        take = pa.array(index)
        slow = _slow_rows(wire, odd, schema, chosen, fail)
        columns = [pa.concat_arrays([c, s]).take(take) for c, s in zip(columns, slow)]
    fail.raise_first()
    return pa.RecordBatch.from_arrays(columns, names=[f.name for f in chosen])
