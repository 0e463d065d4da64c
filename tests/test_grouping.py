"""The SequenceExample grouping rules (tfrecord_io.conversion.grouping), engine-neutral and
table-driven: sorted rows in, decoded records and rejects out.  Both engines call this module;
tests/test_beam_pipeline.py and tests/test_spark_job.py check the engines end to end."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from tfrecord_io.conversion import grouping, parsing
from tfrecord_io.core.decode import decode_record
from tfrecord_io.core.schema import Schema
from tfrecord_io.storage.schema_io import load_schema

SCHEMA = load_schema(str(Path(__file__).resolve().parent.parent / "conf" / "sessions.yaml"))
NAMES = [f.name for f in SCHEMA.input_features]


def batch(rows: list[dict]) -> pa.RecordBatch:
    arrow = parsing.input_schema(SCHEMA)
    return pa.RecordBatch.from_arrays([pa.array([r.get(f.name) for r in rows], type=f.type) for f in arrow],
                                      schema=arrow)


def row(session, ts, country="de", item="x", price=1.0, tags=("a",)):
    return {"session_id": session, "ts": ts, "country": country, "item": item, "price": price,
            "tags": list(tags) if tags is not None else None}


def records_of(out: grouping.Grouped) -> list[dict]:
    result = []
    for data in out.records.to_pylist():
        rec = decode_record(data)
        result.append({"session": rec.features["session_id"][1][0].decode(),
                       "ts": [step[1][0] for step in rec.feature_lists["ts"]],
                       "country": rec.features["country"][1][0].decode()})
    return result


CASES = [
    # (name, rows, max_steps, reasons, expected records (session, ts), expected rejected rows -> reason part)
    ("one group per session", [row("a", 1), row("a", 2), row("b", 1)], 10, None,
     [("a", [1, 2]), ("b", [1])], {}),
    ("huge group split into max_steps pieces, each with the context",
     [row("a", t) for t in range(5)], 2, None, [("a", [0, 1]), ("a", [2, 3]), ("a", [4])], {}),
    ("context that differs rejects the whole record",
     [row("a", 1), row("a", 2, country="fr"), row("b", 1)], 10, None,
     [("b", [1])], {0: "context feature 'country' differs within the group: 'fr' at line 2, 'de' in its first row",
                    1: "context feature 'country' differs"}),
    ("a row rejected when read rejects its record, keeping its own reason",
     [row("a", 1), row("a", 2), row("b", 1)], 10, [None, "bad price", None],
     [("b", [1])], {0: "rejected with its group (session_id='a'), which holds a bad row: bad price (line 2)",
                    1: "bad price"}),
    ("the unit of rejection is the max_steps piece",
     [row("a", t) for t in range(4)], 2, [None, None, "bad", None],
     [("a", [0, 1])], {2: "bad", 3: "bad row: bad (line 3)"}),
    ("a null required step rejects the record (row_errors)",
     [row("a", 1), row("a", None)], 10, None, [], {0: "ts", 1: "ts"}),
]


@pytest.mark.parametrize("name,rows,max_steps,reasons,expected,rejected", CASES, ids=[c[0] for c in CASES])
def test_rules(name, rows, max_steps, reasons, expected, rejected):
    out = grouping.build_sequence_examples(batch(rows), SCHEMA, max_steps, reasons=reasons,
                                           lines=list(range(1, len(rows) + 1)))
    assert [(r["session"], r["ts"]) for r in records_of(out)] == expected
    assert set(out.rejected) == set(rejected)
    for i, part in rejected.items():
        assert part in out.rejected[i]
    # every row is in a record or rejected, once
    assert out.rows_in_records + len(out.rejected) == len(rows)
    assert [rows[int(i)]["session_id"] for i in out.record_rows] == [s for s, _ in expected]


def test_nan_context_equals_nan():
    rows = [row("a", 1, price=math.nan), row("a", 2, price=math.nan)]
    ctx = Schema.from_dict({**SCHEMA.to_dict(), "context": SCHEMA.to_dict()["context"] + [
        {"name": "price", "type": "float"}], "sequence": [f for f in SCHEMA.to_dict()["sequence"]
                                                       if f["name"] != "price"]})
    arrow = parsing.input_schema(ctx)
    b = pa.RecordBatch.from_arrays([pa.array([r.get(f.name) for r in rows], type=f.type) for f in arrow],
                                   schema=arrow)
    out = grouping.build_sequence_examples(b, ctx, 10)
    assert len(out.records) == 1 and not out.rejected


def test_split_open_record_keeps_the_last_record_back():
    b = batch([row("a", 1), row("a", 2), row("b", 1), row("b", 2)])
    done, tail = grouping.split_open_record(b, SCHEMA, 10)
    assert done.num_rows == 2 and tail.num_rows == 2
    assert tail.to_pydict()["session_id"] == ["b", "b"]
    done, tail = grouping.split_open_record(batch([row("a", 1)]), SCHEMA, 10)
    assert done is None and tail.num_rows == 1
