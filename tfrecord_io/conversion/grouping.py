"""SequenceExample grouping: rows of one group become records, the same way in every engine.

An engine brings the rows of a SequenceExample schema **sorted**: by ``group_by``, then
``order_by`` (nulls first), then source file, then line; and it brings each group's rows
together (Spark: hash-partitioned by ``group_by`` and sorted within partitions; Beam: a
``GroupByKey`` on the ``group_by`` value, each group's steps sorted).  This module turns such
a batch into encoded records and rejects, with these rules:

* a *record* is a group, or -- for a group longer than ``max_steps`` (the huge-group policy) --
  each consecutive piece of at most ``max_steps`` steps, every piece carrying the context;
* a record's context values come from its first step; a record whose steps disagree on a
  context value (NaN equal to NaN, null to null) is rejected whole;
* a record holding a row rejected when it was read (its ``reasons`` entry is set) is rejected
  whole: a sequence is never written with a step missing;
* a record the encoder's checks refuse (:func:`tfrecord_io.core.codec.row_errors`: null steps,
  list lengths, required values) is rejected whole;
* the unit of rejection is the record: a bad row rejects its ``max_steps`` piece, not the
  other pieces of its group.  A row rejected with its record keeps its own reason if it has
  one; the others get :func:`group_reason`.

A batch may end in the middle of a record; :func:`split_open_record` keeps that last record
back so that it can be completed by the next batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfrecord_io.core import codec
from tfrecord_io.core.schema import Schema

__all__ = ["Grouped", "build_sequence_examples", "group_reason", "record_starts", "rows_equal",
           "split_open_record"]


def _describe(value: Any, limit: int = 60) -> str:
    r = repr(value)
    return r if len(r) <= limit else r[:limit] + "..."


def group_reason(schema: Schema, key: Any, why: str) -> str:
    """The reject reason of a good row rejected with its record."""
    return f"rejected with its group ({schema.group_by}={_describe(key)}), which holds a bad row: {why}"


def rows_equal(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Row-wise equality of two same-typed arrays, nulls equal to nulls, NaN equal to NaN."""
    a_null = a.is_null().to_numpy(zero_copy_only=False)
    b_null = b.is_null().to_numpy(zero_copy_only=False)
    same = a_null & b_null
    both = ~a_null & ~b_null
    if not both.any():
        return same
    if pa.types.is_list(a.type) or pa.types.is_large_list(a.type):
        la = pc.fill_null(pc.list_value_length(a), -1).to_numpy(zero_copy_only=False)
        lb = pc.fill_null(pc.list_value_length(b), -1).to_numpy(zero_copy_only=False)
        cand = both & (la == lb)
        if cand.any():
            mask = pa.array(cand)
            item_ok = rows_equal(pc.list_flatten(a.filter(mask)), pc.list_flatten(b.filter(mask)))
            bad = np.zeros(len(item_ok) + 1, dtype=np.int64)
            np.cumsum(~item_ok, out=bad[1:])
            ends = np.cumsum(la[cand].astype(np.int64))
            starts = ends - la[cand]
            same[np.flatnonzero(cand)] = (bad[ends] - bad[starts]) == 0
        return same
    eq = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(a.type):
        eq |= pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False).to_numpy(zero_copy_only=False)
    return same | (both & eq)


def record_starts(keys: pa.Array, max_steps: int) -> np.ndarray:
    """Row indices where a record (a group, or a ``max_steps`` piece of one) starts, for sorted keys."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    new_group = np.ones(n, dtype=bool)
    if n > 1:
        same = pc.fill_null(pc.equal(keys.slice(1), keys.slice(0, n - 1)), False)
        new_group[1:] = ~same.to_numpy(zero_copy_only=False)
    group_start = np.flatnonzero(new_group)
    pos = np.arange(n) - group_start[np.cumsum(new_group) - 1]
    return np.flatnonzero(new_group | (pos % max_steps == 0))


def split_open_record(batch: pa.RecordBatch, schema: Schema,
                      max_steps: int) -> tuple[pa.RecordBatch | None, pa.RecordBatch]:
    """(the complete records of a sorted batch, its last record, which may continue in the next batch)."""
    starts = record_starts(batch.column(batch.schema.get_field_index(schema.group_by)), max_steps)
    cut = int(starts[-1]) if len(starts) else 0
    if cut == 0:
        return None, batch
    return batch.slice(0, cut), batch.slice(cut)


@dataclass
class Grouped:
    """What :func:`build_sequence_examples` made of a batch.

    ``records``: the encoded SequenceExamples (binary), in batch order; ``record_rows``: the
    batch row where each of them starts; ``rows_in_records``: input rows they hold;
    ``rejected``: batch row -> reject reason, for every row of a rejected record.
    """

    records: pa.Array
    record_rows: np.ndarray
    rows_in_records: int
    rejected: dict[int, str] = field(default_factory=dict)


def build_sequence_examples(batch: pa.RecordBatch, schema: Schema, max_steps: int, *,
                            reasons: Sequence[str | None] | None = None,
                            lines: Sequence[Any] | pa.Array | None = None) -> Grouped:
    """Encode the complete records of a sorted batch (see the module doc for the rules).

    ``batch`` holds the schema's input features (other columns are ignored); ``reasons`` the
    read-time reject reason of each row (None for a good row; ``reasons=None``: no row was
    rejected); ``lines`` each row's input line (a list or an Arrow array), for messages.
    """
    n = batch.num_rows
    starts = record_starts(batch.column(batch.schema.get_field_index(schema.group_by)), max_steps)
    sizes = np.diff(np.append(starts, n))
    unit_of = np.repeat(np.arange(len(starts)), sizes)
    if lines is None:
        line = lambda i: int(i) + 1  # noqa: E731
    elif isinstance(lines, pa.Array):  # looked up only for the messages of rejected records
        line = lambda i: lines[int(i)].as_py()  # noqa: E731
    else:
        line = lambda i: lines[int(i)]  # noqa: E731
    why: dict[int, str] = {}  # record -> why it is rejected
    if reasons is not None:
        for i, text in enumerate(reasons):
            if text is not None:
                why.setdefault(int(unit_of[i]), f"{text} (line {line(i)})")
    key = batch.column(batch.schema.get_field_index(schema.group_by))
    for i in np.flatnonzero(key.is_null().to_numpy(zero_copy_only=False)):
        why.setdefault(int(unit_of[i]), f"group_by feature {schema.group_by!r} is null")
    first = pa.array(starts[unit_of], pa.int64())
    for f in schema.context:
        if f.name == schema.group_by:
            continue
        col = batch.column(batch.schema.get_field_index(f.name))
        for i in np.flatnonzero(~rows_equal(col, col.take(first))):
            u = int(unit_of[i])
            if u not in why:
                why[u] = (f"context feature {f.name!r} differs within the group: "
                          f"{_describe(col[int(i)].as_py())} at line {line(i)}, "
                          f"{_describe(col[int(starts[u])].as_py())} in its first row")
    good = np.ones(len(starts), dtype=bool)
    good[list(why)] = False
    grouped = _group(batch, schema, unit_of, sizes, good)
    if grouped is not None:
        errors = codec.row_errors(grouped, schema)  # per record: null steps, lengths, required
        if any(e is not None for e in errors):
            good_ids = np.flatnonzero(good)
            keep = np.array([e is None for e in errors], dtype=bool)
            for u, e in zip(good_ids[~keep], (e for e in errors if e is not None)):
                why[int(u)] = e
            good[good_ids[~keep]] = False
            grouped = grouped.filter(pa.array(keep))
    rejected: dict[int, str] = {}
    if why:
        keys = key.to_pylist() if key is not None else None
        for i in np.flatnonzero(~good[unit_of]):
            own = reasons[int(i)] if reasons is not None else None
            rejected[int(i)] = own if own is not None else group_reason(schema, keys[int(i)], why[int(unit_of[i])])
    if grouped is None or grouped.num_rows == 0:
        return Grouped(pa.array([], pa.binary()), np.zeros(0, dtype=np.int64), 0, rejected)
    records = codec.encode_sequence_examples(grouped, schema)
    return Grouped(records, starts[good], int(sizes[good].sum()), rejected)


def _group(batch: pa.RecordBatch, schema: Schema, unit_of, sizes, good) -> pa.RecordBatch | None:
    """One row per good record: context from its first step, each sequence column a list of steps."""
    if not good.any():
        return None
    sub = batch.filter(pa.array(good[unit_of]))
    offsets = np.concatenate([[0], np.cumsum(sizes[good])])
    first = pa.array(offsets[:-1], pa.int64())
    cols, names = [], []
    for f in schema.context:
        cols.append(sub.column(sub.schema.get_field_index(f.name)).take(first))
        names.append(f.name)
    for f in schema.sequence:
        steps = sub.column(sub.schema.get_field_index(f.name))
        cols.append(pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), steps))
        names.append(f.name)
    return pa.RecordBatch.from_arrays(cols, names=names)
