"""tfrecord_io.conversion.parsing: CSV / JSON Lines -> typed Arrow batches, with a reject for every bad row.

The rules are the Spark job's (Spark's CSV/JSON readers); these tests pin them down engine-free.
"""

from __future__ import annotations

import base64
import io
import json
import math

import numpy as np
import pyarrow as pa
import pytest

from tfrecord_io.conversion import parsing, small_files
from tfrecord_io.core.codec import encode_examples
from tfrecord_io.conversion.parsing import read_batches
from tfrecord_io.core.schema import Schema

SCHEMA = Schema.from_dict({"features": [
    {"name": "id", "type": "int64", "required": True},
    {"name": "x", "type": "float", "default": 0.0},
    {"name": "name", "type": "string", "default": ""},
    {"name": "blob", "type": "bytes", "default": ""},
    {"name": "tags", "type": "string", "shape": [-1], "separator": "|"},
    {"name": "pair", "type": "int64", "shape": [2], "separator": ";"},
]})
HEADER = b"id,x,name,blob,tags,pair\n"


def parse(data: bytes, schema: Schema = SCHEMA, fmt: str = "csv", **kw):
    """(good rows as dicts, their lines, rejects, input rows) of all batches of ``data``."""
    rows, lines, rejects, total = [], [], [], 0
    for pb in read_batches(io.BytesIO(data), schema, fmt, "mem://in", **kw):
        assert pb.rows.num_rows == len(pb.lines)
        rows += pb.rows.to_pylist()
        lines += pb.lines.tolist()
        rejects += pb.rejects
        total += pb.input_rows
    assert total == len(rows) + len(rejects)
    return rows, lines, rejects, total


def by_line(rejects):
    return {r["line"]: r for r in rejects}


# ------------------------------------------------------------------------------- CSV
def test_quoted_fields_hold_delimiters_and_quotes():
    data = (HEADER +
            b'1,1.5,"a,b",raw,t1|t2,1;2\n'
            b'2,-2e3,"say ""hi""",,"x|y,z",3;4\n'
            b'3,.5,"",b,,5;6\n'
            b'4,NaN,plain,b,"",7;8\n')
    rows, lines, rejects, total = parse(data)
    assert rejects == [] and total == 4 and lines == [2, 3, 4, 5]
    assert [r["name"] for r in rows] == ["a,b", 'say "hi"', None, "plain"]  # "" is a null text
    assert rows[1]["x"] == -2000.0 and rows[2]["x"] == 0.5 and math.isnan(rows[3]["x"])
    assert rows[1]["tags"] == ["x", "y,z"]
    assert rows[2]["tags"] is None and rows[3]["tags"] is None  # empty cells, quoted or not: null
    assert rows[1]["blob"] is None and rows[0]["blob"] == b"raw"
    assert [r["pair"] for r in rows] == [[1, 2], [3, 4], [5, 6], [7, 8]]


def test_line_breaks_in_quoted_fields_need_multiline():
    data = HEADER + b'1,1,"two\nlines",b,t,1;2\n2,1,plain,b,t,1;2\n\n3,1,"three\nline\r\nvalue",b,t,1;2\n'
    rows, lines, rejects, total = parse(data)  # records are lines, as in Spark without multiLine
    assert [r["id"] for r in rows] == [2] and lines == [4] and total == 6
    reasons = {r["line"]: r["reason"] for r in rejects}
    assert sorted(reasons) == [2, 3, 6, 7, 8]
    assert all("unbalanced quote" in reasons[i] and "--multiline" in reasons[i] for i in (2, 3, 6, 8))
    assert reasons[7] == "wrong number of columns: expected 6, got 1"  # "line", between the quotes
    assert by_line(rejects)[2]["raw"] == '1,1,"two'
    rows, lines, rejects, total = parse(data, multiline=True)
    assert rejects == [] and total == 3 and lines == [2, 4, 5]  # the blank line 5 is not counted
    assert [r["name"] for r in rows] == ["two\nlines", "plain", "three\nline\r\nvalue"]


def test_every_bad_row_is_a_reject_with_source_line_raw_and_reason():
    data = (HEADER +
            b'1,1.0,ok,b,a,1;2\n'                # 2 good
            b'2,abc,n,b,a,1;2\n'                 # 3 float that does not parse
            b'3,1.0,n,b,a,1;2,extra\n'           # 4 one field too many
            b'4,1.0,"\xff\xfebad",b,a,1;2\n'     # 5 invalid UTF-8
            b',1.0,n,b,a,1;2\n'                  # 6 required id is null
            b'6,1.0,n,b,a,1;2;3\n'               # 7 [2] list with 3 values
            b'0x1f,1.0,n,b,a,1;2\n'              # 8 hex is not int64 text
            b'8,1.0,n,b,a,1;q\n'                 # 9 list item that does not parse
            b'99999999999999999999,1,n,b,a,1;2\n'  # 10 int64 overflow
            b'10,1.0,n,b,a\n'                    # 11 one field short
            b' 11,1.0,n,b,a,1;2\n'               # 12 spaces are not part of an int64
            b'12,1.0,fine,b,a|\xff,1;2\n'        # 13 invalid UTF-8 in a list item
            b'13,1.0,fine,b,a,1;2\n')            # 14 good
    rows, lines, rejects, total = parse(data)
    assert total == 13 and [r["id"] for r in rows] == [1, 13] and lines == [2, 14]
    got = by_line(rejects)
    assert sorted(got) == list(range(3, 14))
    assert all(r["source"] == "mem://in" for r in rejects)
    assert got[3]["reason"] == "feature 'x': 'abc' is not a valid float" and got[3]["raw"] == "2,abc,n,b,a,1;2"
    assert got[4]["reason"] == "wrong number of columns: expected 6, got 7"
    assert got[4]["raw"] == "3,1.0,n,b,a,1;2,extra"
    assert got[5]["reason"] == "feature 'name': '\\xff\\xfebad' is not valid UTF-8" and "\\xff\\xfe" in got[5]["raw"]
    assert got[6]["reason"] == "feature 'id': required, got null"
    assert got[7]["reason"] == "feature 'pair': expected 2 values (shape [2])"
    assert got[8]["reason"] == "feature 'id': '0x1f' is not a valid int64"
    assert got[9]["reason"] == "feature 'pair': list item 'q' is not a valid int64"
    assert got[10]["reason"] == "feature 'id': '99999999999999999999' is not a valid int64"
    assert got[11]["reason"] == "wrong number of columns: expected 6, got 5"
    assert got[12]["reason"] == "feature 'id': ' 11' is not a valid int64"
    assert got[13]["reason"] == "feature 'tags': list item '\\xff' is not valid UTF-8"
    json.dumps(rejects)  # reject rows are JSON-serializable as they are


@pytest.mark.parametrize("text,value", [
    ("1.5", 1.5), (" 1.5 ", 1.5), ("+2", 2.0), ("-.5", -0.5), ("5.", 5.0), ("1e3", 1000.0), ("1.5f", 1.5),
    ("2D", 2.0), ("NaN", math.nan), ("Infinity", math.inf), ("-Infinity", -math.inf), ("Inf", math.inf),
    ("-Inf", -math.inf), ("0x1p3", 8.0), ("1e50", math.inf), ("16777217", 16777216.0),
    ("nan", None), ("inf", None), ("INF", None), ("infinity", None), ("1_0", None), ("abc", None), ("1e", None),
    # ASCII digits only, as Java's grammar (Python's float() takes any Unicode digit)
    ("\u0663.\u0665", None), ("\uff11.5", None), ("1.\u0665", None), ("1e\u0663", None),
])
def test_floats_as_java_reads_them(text, value):
    schema = Schema.from_dict({"features": [{"name": "v", "type": "float"}], "csv": {"header": False}})
    rows, _, rejects, _ = parse(text.encode() + b"\n", schema)
    if value is None:
        assert rows == [] and rejects[0]["reason"] == f"feature 'v': {text!r} is not a valid float"
    elif math.isnan(value):
        assert math.isnan(rows[0]["v"])
    else:
        assert rows == [{"v": value}]


@pytest.mark.parametrize("text,value", [("7", 7), ("+7", 7), ("-7", -7), ("-9223372036854775808", -2**63),
                                        ("9223372036854775808", None), ("0x7", None), ("7.0", None), ("7 ", None),
                                        ("\uff17", None), ("\u0663", None)])
def test_int64_as_java_reads_it(text, value):
    schema = Schema.from_dict({"features": [{"name": "v", "type": "int64"}], "csv": {"header": False}})
    rows, _, rejects, _ = parse(text.encode() + b"\n", schema)
    assert rows == ([{"v": value}] if value is not None else []) and len(rejects) == (value is None)


def test_null_values_quoted_or_not_and_empty_cells():
    schema = Schema.from_dict({
        "features": [{"name": "a", "type": "int64"}, {"name": "b", "type": "string"},
                     {"name": "c", "type": "string", "shape": [-1], "separator": "|"}],
        "csv": {"header": False, "delimiter": ";", "quote": "'", "null_values": ["NA"]},
    })
    rows, lines, rejects, _ = parse(b"1;'x;y';a|b\nNA;NA;NA\n'NA';'NA';''\n;;\n3;'';a||\n", schema)
    assert rejects == [] and lines == [1, 2, 3, 4, 5]
    assert rows == [{"a": 1, "b": "x;y", "c": ["a", "b"]},
                    {"a": None, "b": None, "c": None},   # a null text, unquoted
                    {"a": None, "b": None, "c": [""]},   # ... or quoted; '' is an empty string here
                    {"a": None, "b": None, "c": None},   # unquoted empty cells are null
                    {"a": 3, "b": "", "c": ["a", "", ""]}]


def test_header_matches_columns_by_name_missing_ones_are_null():
    data = b'\xef\xbb\xbfpair,extra,id,name,x,id\r\n1;2,zzz,7,n,2.5,99\r\n'
    rows, lines, rejects, _ = parse(data)
    assert rejects == [] and lines == [2]
    assert rows == [{"id": 7, "x": 2.5, "name": "n", "blob": None, "tags": None, "pair": [1, 2]}]


def test_header_naming_no_feature_is_an_error_naming_the_file():
    with pytest.raises(ValueError, match=r"mem://in: line 1: the CSV header \['a;b'\] names none of the schema"):
        parse(b"a;b\n1;2\n")


def test_empty_file_and_header_only_file_have_no_rows():
    assert parse(b"")[3] == 0
    assert parse(HEADER)[3] == 0
    assert parse(b"\n\n" + HEADER + b"\n")[3] == 0


def test_a_list_feature_without_separator_cannot_be_read_from_csv():
    schema = Schema.from_dict({"features": [{"name": "v", "type": "int64", "shape": [-1]}]})
    with pytest.raises(ValueError, match="'v' is a list .* needs a 'separator'"):
        parse(b"v\n1\n", schema)


@pytest.mark.parametrize("multiline", [False, True])
def test_unterminated_quote_at_the_end_is_a_reject_not_a_crash(multiline):
    rows, _, rejects, total = parse(HEADER + b'1,1,a,b,c,1;2\n2,1,"open,b,c,1;2\n', multiline=multiline)
    assert total == 2 and [r["id"] for r in rows] == [1]
    assert rejects[0]["line"] == 3 and rejects[0]["raw"].startswith('2,1,"open')


@pytest.mark.parametrize("multiline", [False, True])
def test_large_file_streams_in_blocks_with_exact_lines_and_accounting(multiline):
    rng = np.random.default_rng(1)
    n = 20_000
    bad = set(rng.choice(n, 300, replace=False).tolist()) - set(range(0, n, 997))
    out = [HEADER]
    expected_lines, line = {}, 2
    for i in range(n):
        if i % 997 == 0:
            text = f'{i},1.0,"multi\nline {i}",b,t,1;2\n' if multiline else f'{i},1.0,"q ""{i}""",b,t,1;2\n'
        elif i in bad:
            text = f"{i},oops,n,b,t,1;2\n" if i % 2 else f"{i},1.0,n,b\n"
        else:
            text = f"{i},{i / 7:.6f},n{i},b,t1|t2,{i};{-i}\n"
        expected_lines[i] = line
        line += text.count("\n")
        out.append(text.encode())
    data = b"".join(out)

    class Stream(io.BytesIO):
        reads: list[int] = []

        def read(self, size=-1):
            chunk = super().read(size)
            self.reads.append(len(chunk))
            return chunk

    batches = list(read_batches(Stream(data), SCHEMA, "csv", "big.csv", block_size=64 * 1024, multiline=multiline))
    assert len(batches) > 10  # streamed, never one batch for the file
    assert max(Stream.reads) <= 64 * 1024 * 2
    good = [r for b in batches for r in b.rows.to_pylist()]
    lines = [ln for b in batches for ln in b.lines.tolist()]
    rejects = [r for b in batches for r in b.rejects]
    assert sum(b.input_rows for b in batches) == n
    assert len(good) == n - len(bad) and len(rejects) == len(bad)
    assert {r["line"] for r in rejects} == {expected_lines[i] for i in bad}
    assert lines == [expected_lines[r["id"]] for r in good]
    assert all(r["x"] == pytest.approx(r["id"] / 7, rel=1e-5, abs=1e-6) for r in good if r["id"] % 997)


def test_parsed_rows_feed_the_encoder():
    rows = next(read_batches(io.BytesIO(HEADER + b"1,2.5,n,b,t,1;2\n"), SCHEMA, "csv", "x")).rows
    assert rows.schema == parsing.input_schema(SCHEMA)
    assert len(encode_examples(rows, SCHEMA)) == 1


def test_keep_raw_and_reject_values():
    data = HEADER + b'1,1,"a,b",b,t,1;2\n2,bad,n,b,t,1;2\n3,1,"q""q",,t,1;2\n4,1,n,b,t\n'
    pb = next(read_batches(io.BytesIO(data), SCHEMA, "csv", "x", keep_raw=True, reject_values=("id", "x")))
    assert pb.raw.to_pylist() == [b'1,1,"a,b",b,t,1;2', b'3,1,"q""q",,t,1;2']
    rest = list(read_batches(io.BytesIO(data), SCHEMA, "csv", "x", reject_values=("id", "x")))
    values = {r["line"]: v for b in rest for r, v in zip(b.rejects, b.reject_values)}
    assert values == {3: {"id": 2, "x": None}, 5: {"id": 4, "x": 1.0}}  # a short row: the fields it has


def test_sequence_rows_need_a_group_key_and_steps_follow_the_row_rules():
    schema = Schema.from_dict({
        "record_type": "sequence_example", "group_by": "g", "order_by": "t",
        "context": [{"name": "g", "type": "string"}],
        "sequence": [{"name": "t", "type": "int64"}, {"name": "v", "type": "float", "shape": [2], "separator": "|"}],
    })
    rows, _, rejects, _ = parse(b"g,t,v\na,1,1|2\n,2,1|2\na,,1|2\na,3,1|2|3\na,4,\n", schema)
    assert [(r["g"], r["t"]) for r in rows] == [("a", 1)]
    assert sorted(r["reason"] for r in rejects) == [
        "feature 'v': expected 2 values (shape [2])",
        "group_by feature 'g' is null",
        "sequence feature 't': null step, and the feature has no default",
        "sequence feature 'v': null step, and the feature has no default"]


# ------------------------------------------------------------------------------- JSON
def test_json_lines_every_problem_named():
    data = (b'{"id": 1, "x": 2, "name": "a", "blob": "YmxvYg==", "tags": ["t"], "pair": [1, 2]}\n'
            b'\n'
            b'{"id": 1.0}\n'
            b'{"id": true}\n'
            b'{"id": "3"}\n'
            b'{"id": 4, "x": "1.5"}\n'
            b'{"id": 5, "name": 5}\n'
            b'{"id": 6, "tags": "t"}\n'
            b'{"id": 7, "name": ["a"]}\n'
            b'not json\n'
            b'[1, 2]\n'
            b'{"id": 10, "name": "\xff"}\n'
            b'{"id": 11} {"id": 12}\n'
            b'{"id": 12, "tags": ["a", null]}\n'
            b'{"id": 13, "pair": [1]}\n'
            b'{"x": 1}\n'
            b'{"id": 99999999999999999999}\n'
            b'  {"id": 17, "unknown": {"deep": [1]}, "pair": null, "x": "-Infinity"}  \r\n'
            b'{"id": 18, "blob": "not base64!"}\n'
            b'{"id": 19, "x": NaN}')  # last line without newline
    rows, lines, rejects, total = parse(data, fmt="json")
    # A JSON boolean is an int64 1/0 (tf.train.Example has no booleans): line 4's true is id 1.
    assert total == 19 and [r["id"] for r in rows] == [1, 1, 17, 19] and lines == [1, 4, 18, 20]
    assert rows[0] == {"id": 1, "x": 2.0, "name": "a", "blob": b"blob", "tags": ["t"], "pair": [1, 2]}
    assert rows[2]["x"] == -math.inf and math.isnan(rows[3]["x"])
    reasons = {r["line"]: r["reason"] for r in rejects}
    assert reasons == {
        3: "feature 'id': expected an integer, got 1.0",
        5: "feature 'id': expected an integer, got '3'",
        6: "feature 'x': expected a number, got '1.5'",
        7: "feature 'name': expected a string, got 5",
        8: "feature 'tags': expected a JSON array, got 't'",
        9: "feature 'name': expected a single value, got ['a']",
        10: "malformed JSON: Expecting value: line 1 column 1 (char 0)",
        11: "not a JSON object: [1, 2]",
        12: reasons[12],
        13: "malformed JSON: Extra data: line 1 column 12 (char 11)",
        14: "feature 'tags': a list holds a null item (lists may be null or empty, their items may not be null)",
        15: "feature 'pair': expected 2 values (shape [2])",
        16: "feature 'id': required, got null",
        17: "feature 'id': 99999999999999999999 is out of the int64 range",
        19: "feature 'blob': bytes are base64 in JSON, and 'not base64!' is not",
    }
    assert reasons[12].startswith("not valid UTF-8")
    assert by_line(rejects)[11]["raw"] == "[1, 2]"


def test_json_fast_path_and_line_by_line_path_agree():
    blob = base64.b64encode(b"\x00\xff").decode()
    lines = [b'{"id": %d, "x": %r, "name": "n\\u00e9%d", "blob": "%s", "tags": ["a", "b"], "pair": [%d, 2]}'
             % (i, v, i, blob.encode(), i)
             for i, v in enumerate([0.1, 1e-45, 3.4028235e38, 16777217, -0.0, 1e300, 123456789])]
    chunk = parsing._JsonConverter(SCHEMA, parsing.input_schema(SCHEMA))
    fast = chunk.fast(lines)
    assert fast is not None and fast.column("blob").to_pylist()[0] == b"\x00\xff"
    values = [parsing._json_line_values(line, SCHEMA.input_features)[0] for line in lines]
    slow = pa.RecordBatch.from_arrays([pa.array([v[j] for v in values], f.arrow_type())
                                       for j, f in enumerate(SCHEMA.input_features)],
                                      schema=parsing.input_schema(SCHEMA))
    assert fast.equals(slow)
    # And one bad line in the chunk does not change how the good ones convert.
    rows, _, rejects, _ = parse(b"\n".join(lines[:3] + [b"bad"] + lines[3:]) + b"\n", fmt="json")
    assert len(rejects) == 1 and pa.RecordBatch.from_pylist(rows, schema=fast.schema).equals(fast)


def test_json_streams_in_chunks_with_exact_lines():
    n = 5000
    text = b"".join(b'{"id": %d, "pair": [1, 2]}\n' % i if i % 50 else b"{broken\n" for i in range(n))
    rows, lines, rejects, total = parse(text, fmt="json", block_size=4096)
    assert total == n and len(rejects) == n // 50
    assert lines == [r["id"] + 1 for r in rows]
    assert {r["line"] for r in rejects} == {i + 1 for i in range(0, n, 50)}


def test_multiline_json_documents():
    doc = json.dumps([{"id": 1, "pair": [1, 2]}, {"id": "two"}, {"id": 3}], indent=2).encode()
    rows, lines, rejects, total = parse(doc, fmt="json", multiline=True)
    assert total == 3 and [r["id"] for r in rows] == [1, 3] and lines == [1, 3]
    assert rejects[0]["line"] == 2 and "expected an integer" in rejects[0]["reason"]
    assert parse(json.dumps({"id": 5}).encode(), fmt="json", multiline=True)[0][0]["id"] == 5
    rows, _, rejects, total = parse(b'{"id": 1,', fmt="json", multiline=True)
    assert total == 1 and rejects[0]["reason"].startswith("malformed JSON")


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown input format 'xml'"):
        read_batches(io.BytesIO(b""), SCHEMA, "xml", "x")


def test_json_invalid_utf8_inside_a_string_is_a_reject():
    rows, _, rejects, total = parse(b'{"id": 1, "name": "ok"}\n{"id": 2, "name": "bad \xff"}\n', fmt="json")
    assert total == 2 and [r["id"] for r in rows] == [1]
    assert rejects[0]["line"] == 2 and rejects[0]["reason"].startswith("not valid UTF-8")


def test_short_reads_lose_no_rows():
    """pyarrow's streaming CSV reader dropped every block after a 1-byte read (the demo's second file
    lost its last 16,145 rows): whatever the stream's read sizes, every row comes out."""
    import io

    class Trickle(io.RawIOBase):
        """Reads of 1 byte every third call, else what was asked."""

        def __init__(self, data: bytes):
            self.data, self.pos, self.calls = data, 0, 0

        def readable(self):
            return True

        def readinto(self, buffer):
            self.calls += 1
            n = 1 if self.calls % 3 == 0 else len(buffer)
            chunk = self.data[self.pos:self.pos + n]
            buffer[:len(chunk)] = chunk
            self.pos += len(chunk)
            return len(chunk)

    schema = Schema.from_dict({"features": [{"name": "a", "type": "int64"}, {"name": "b", "type": "string"}]})
    data = b"a,b\n" + b"".join(b"%d,%s\n" % (i, b"x" * (i % 50)) for i in range(60_000))
    for multiline in (False, True):
        rows = sum(pb.input_rows for pb in read_batches(Trickle(data), schema, "csv", "t.csv", block_size=64 * 1024,
                                                        multiline=multiline))
        assert rows == 60_000, (multiline, rows)


# ----------------------------------------------------------------------------- small files parsed together
def _per_file(batches) -> dict:
    """{source: (row dicts, lines, rejects, raw texts)} of parsed batches."""
    out: dict = {}
    for pb in batches:
        rows, lines, rejects, raw = out.setdefault(pb.source, ([], [], [], []))
        rows += pb.rows.to_pylist()
        lines += [int(x) for x in pb.lines]
        rejects += pb.rejects
        raw += [] if pb.raw is None else pb.raw.to_pylist()
    return {k: v for k, v in out.items() if any(v)}


def _alone(files, schema, fmt, **kw) -> dict:
    return _per_file(b for source, data in files
                     for b in read_batches(io.BytesIO(data), schema, fmt, source, **kw))


def _header(data: bytes, schema) -> list[str] | None:
    return parsing.read_header(io.BytesIO(data), schema, "h", False)[0] if schema.csv.header else None


def _bad_corpus_groups():
    """(files, fmt, schema) groups of the bad corpus: its CSV files with the same header, its JSON Lines."""
    from helpers import CORPUS, CORPUS_SCHEMA
    from tfrecord_io.storage.schema_io import load_schema

    schema = load_schema(str(CORPUS_SCHEMA))
    csvs: dict = {}
    for p in sorted(CORPUS.glob("*.csv")):
        data = p.read_bytes()
        names = _header(data, schema)
        if names is not None:
            csvs.setdefault(tuple(names), []).append((str(p), data))
    jsonl = [(str(p), p.read_bytes()) for p in sorted(CORPUS.glob("*.jsonl"))]
    return [(files, "csv", schema) for files in csvs.values()] + [(jsonl, "json", schema)]


SIMPLE = Schema.from_dict({"features": [{"name": "id", "type": "int64", "required": True},
                                        {"name": "x", "type": "float", "default": 0.0},
                                        {"name": "s", "type": "string", "default": ""}]})
EDGE_FILES = [  # same header, every way a small file can begin and end
    ("a.csv", b"id,x,s\n1,1.5,a\n2,oops,b\n"),
    ("no-newline.csv", b"id,x,s\n3,1.5,c\n4,2.5,d"),
    ("header-only.csv", b"id,x,s\n"),
    ("header-no-newline.csv", b"id,x,s"),
    ("blank-lines.csv", b"\n\nid,x,s\n\n5,1.5,e\n\n6,2.5,\"x,y\"\n\n"),
    ("crlf.csv", b"id,x,s\r\n7,1.5,f\r\n8,2.5,g\r\n"),
    ("quotes.csv", b'id,x,s\n9,1.5,"two\nlines"\n10,2.5,"bad\n11,1,"ok ""q"""\n'),
    ("columns.csv", b"id,x,s\n12,1\n13,1,a,b\n14,1,h\n"),
    ("bom.csv", b"\xef\xbb\xbfid,x,s\n15,1,i\n"),  # the mark goes with the header
]


@pytest.mark.parametrize("keep_raw", [False, True])
def test_small_files_parsed_together_give_what_each_gives_alone(keep_raw):
    """conversion.small_files.read_together: the same rows, lines, rejects (source, line, raw, reason) and raw
    texts per file as read_batches over each file alone."""
    groups = _bad_corpus_groups() + [(EDGE_FILES, "csv", SIMPLE)]
    for files, fmt, schema in groups:
        names = _header(files[0][1], schema) if fmt == "csv" else None
        together = small_files.read_together(files, schema, fmt, header_names=names, keep_raw=keep_raw)
        assert together is not None, [f for f, _ in files]
        assert all(pb.source in {f for f, _ in files} for pb in together)
        assert _per_file(together) == _alone(files, schema, fmt, keep_raw=keep_raw), [f for f, _ in files]
    assert sum(len(r[2]) for r in _per_file(small_files.read_together(
        EDGE_FILES, SIMPLE, "csv", header_names=["id", "x", "s"])).values()) >= 5  # the rejects were there


def test_small_files_that_cannot_join_a_stream_are_read_alone():
    """A byte-order mark where the stream would not start (headerless), a lone carriage return, a
    whole-file error (here a header naming no feature, as the group reads it: the error must name its
    own file): None, and the caller reads each file alone."""
    headerless = Schema.from_dict({"features": SIMPLE.to_dict()["features"], "csv": {"header": False}})
    good = ("a.csv", b"id,x,s\n1,1,a\n")
    assert small_files.read_together([good, ("cr.csv", b"id,x,s\n1,1,a\r2,2,b\n")], SIMPLE, "csv",
                                       header_names=["id", "x", "s"]) is None
    assert small_files.read_together([("a.csv", b"1,1,a\n"), ("bom.csv", b"\xef\xbb\xbf2,2,b\n")], headerless,
                                       "csv") is None
    assert small_files.read_together([good, ("y.csv", b"a,b\n1,2\n")], SIMPLE, "csv", header_names=["a", "b"]) \
        is None
