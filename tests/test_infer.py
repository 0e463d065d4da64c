"""tfrecord-io infer-schema on local and HDFS input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import examples
from tfrecord_io.commands.infer import infer_columns, schema_yaml
from tfrecord_io.core.schema import CsvOptions, Schema

CSV = 'id,fare,name,empty,big\n1,2.5,"a, b",,1\n2,3,"say ""hi""",,99999999999999999999\n3,,c,,2\n'
JSONL = '{"id": 1, "score": 0.5, "tags": ["a", "b"], "vec": [1, 2], "meta": {"k": 1}, "nothing": null}\n' \
        '{"id": 2, "score": 1, "tags": [], "vec": [3.5], "meta": {"k": 2}, "nothing": null}\n'


def infer_text(path, fmt):
    return schema_yaml(infer_columns(str(path), fmt), fmt, CsvOptions(), 1000)


def test_csv(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text(CSV)
    text = infer_text(p, "csv")
    schema = Schema.from_yaml(text)
    types = {f.name: f.type for f in schema.features}
    assert types == {"id": "int64", "fare": "float", "name": "string", "empty": "string", "big": "float"}
    assert "always empty in the sample" in text.splitlines()[[l.strip().startswith('- {name: "empty"')
                                                              for l in text.splitlines()].index(True)]


def test_json_lines(tmp_path):
    p = tmp_path / "in.json"
    p.write_text(JSONL)
    schema = Schema.from_yaml(infer_text(p, "json"))
    f = {f.name: f for f in schema.features}
    assert (f["id"].type, f["score"].type) == ("int64", "float")
    assert f["tags"].type == "string" and f["tags"].shape == (-1,)
    assert f["vec"].type == "float" and f["vec"].shape == (-1,)
    assert "meta" not in f and schema.ignore_columns == ("meta",)  # nested: no feature type takes it


def test_directory_and_sample_limit(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.csv").write_text("x\n1\n2\n")
    (d / "_SUCCESS").write_text("")
    cols = infer_columns(str(d), "csv", sample_rows=1)
    assert [(c.name, c.type, c.non_null) for c in cols] == [("x", "int64", 1)]


def test_bad_json_names_line(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.json: line 2 is not JSON"):
        infer_columns(str(p), "json")


def test_cli(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text(CSV)
    exe = Path(sys.executable).parent / "tfrecord-io"
    out = subprocess.run([str(exe), "infer-schema", "--input", str(p), "--format", "csv"],
                         capture_output=True, text=True, check=True)
    assert Schema.from_yaml(out.stdout).feature("fare").type == "float"
    helptext = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=True).stdout
    assert "infer-schema" in helptext and "hdfs-local" in helptext


def test_hdfs_input(hdfs, tmp_path):
    from tfrecord_io.storage import fs

    uri = f"{hdfs.namenode_uri}/infer/in.csv"
    with fs.open(uri, "wb") as f:
        f.write(CSV.encode())
    schema = Schema.from_yaml(infer_text(uri, "csv"))
    assert schema.feature("fare").type == "float"


# ---------------------------------------------------------------------------------------
# The proposal converts the data it came from (issue #12 item 7, #15 item 2)
# ---------------------------------------------------------------------------------------
def test_na_tokens_are_nulls_with_defaults_and_null_values(tmp_path):
    p = tmp_path / "flights.csv.gz"
    import gzip

    rows = ["year,dep_delay,carrier,tailnum,n"] + [f"2013,{'NA' if i % 3 == 0 else i - 5},UA,{'' if i % 4 else 'N1'},"
                                                    f"{'NaN' if i % 5 == 0 else i}" for i in range(40)]
    p.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))  # compressed input is read as such
    text = infer_text(p, "csv")
    schema = Schema.from_yaml(text)
    f = {x.name: x for x in schema.features}
    assert (f["year"].type, f["dep_delay"].type, f["carrier"].type, f["n"].type) == ("int64", "int64", "string",
                                                                                      "int64")
    assert f["dep_delay"].default == 0 and f["n"].default == 0 and f["year"].default is None
    assert set(schema.csv.null_values) == {"", "NA", "NaN", "nan"}
    assert "14 null(s) in 40 sampled rows" in text  # dep_delay: i % 3 == 0
    custom = infer_columns(str(p), "csv", null_tokens=("",))
    assert {c.name: c.type for c in custom}["dep_delay"] == "string"  # --null-values "" : NA is text


def test_java_number_rules_as_the_converters(tmp_path):
    p = tmp_path / "n.csv"
    p.write_text("a,b,c,d\n 12,1_000,1.5f,7\n3,2,NaN,-8\n")
    f = {x.name: x.type for x in Schema.from_yaml(infer_text(p, "csv")).features}
    assert f == {"a": "float", "b": "string", "c": "float", "d": "int64"}  # " 12": Float.parseFloat only


_cells = {
    "int64": st.integers(-(2**63), 2**63 - 1).map(str),
    "float": st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    "string": st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"),
                      max_size=6),
}


@st.composite
def _table(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(_cells)), min_size=1, max_size=4))
    n = draw(st.integers(1, 12))
    cols = [[draw(st.one_of(st.just("NA"), _cells[k])) if draw(st.booleans()) else draw(_cells[k])
             for _ in range(n)] for k in kinds]
    return [f"c{i}" for i in range(len(kinds))], kinds, [list(r) for r in zip(*cols)]


def _write_csv(path: Path, names, kinds, rows) -> None:
    import csv as pycsv

    with open(path, "w", newline="") as fh:
        w = pycsv.writer(fh, lineterminator="\n")
        w.writerow(names)
        w.writerows(rows)


def _write_jsonl(path: Path, names, kinds, rows) -> None:
    """JSON values of each column's kind; "NA" leaves the key out."""
    with open(path, "w") as fh:
        for r in rows:
            obj = {n: (int(c) if k == "int64" else float(c) if k == "float" else c)
                   for n, k, c in zip(names, kinds, r) if c != "NA"}
            fh.write(json.dumps(obj) + "\n")


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(table=_table(), fmt=st.sampled_from(["csv", "json"]))
def test_inferred_schema_converts_its_own_data_with_zero_rejects_on_beam(tmp_path_factory, table, fmt):
    _infer_then_convert("beam", None, tmp_path_factory.mktemp("p"), table, fmt)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(table=_table(), fmt=st.sampled_from(["csv", "json"]))
def test_inferred_schema_converts_its_own_data_with_zero_rejects_on_spark(spark, tmp_path_factory, table, fmt):
    _infer_then_convert("spark", spark, tmp_path_factory.mktemp("p"), table, fmt)


def _infer_then_convert(engine, session, tmp_path, table, fmt):
    from helpers import convert

    names, kinds, rows = table
    data = tmp_path / f"in.{'csv' if fmt == 'csv' else 'jsonl'}"
    (_write_csv if fmt == "csv" else _write_jsonl)(data, names, kinds, rows)
    text = infer_text(data, fmt)
    (tmp_path / "s.yaml").write_text(text)
    manifest = convert(engine, session, str(data), fmt, str(tmp_path / "s.yaml"), str(tmp_path / "out"),
                       allow_missing_columns=fmt == "json")  # a JSON column may be absent from every row
    assert manifest["totals"]["rejected"] == 0, (text, rows)
    assert manifest["totals"]["records"] == len(rows)


def test_parquet_and_orc_are_typed_by_their_own_schema(tmp_path):
    import pyarrow as pa
    import pyarrow.orc as orc
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array([1, 2], pa.int32()), "x": pa.array([0.5, None], pa.float64()),
                      "name": ["a", "b"], "tags": pa.array([["t"], []], pa.list_(pa.string())),
                      "when": pa.array([1, 2], pa.timestamp("s")), "ok": [True, False]})
    (tmp_path / "pq").mkdir()
    pq.write_table(table, tmp_path / "pq" / "part-0.parquet")
    orc.write_table(table, str(tmp_path / "t.orc"))
    for fmt, path in (("parquet", tmp_path / "pq"), ("orc", tmp_path / "t.orc")):
        text = schema_yaml(infer_columns(str(path), fmt), fmt, CsvOptions(), 0)
        schema = Schema.from_yaml(text)
        f = {x.name: x for x in schema.features}
        assert {n: (x.type, x.shape) for n, x in f.items()} == {
            "id": ("int64", None), "x": ("float", None), "name": ("string", None), "tags": ("string", (-1,)),
            "ok": ("int64", None)}, fmt
        assert f["x"].default == 0.0 and schema.ignore_columns == ("when",), fmt
        assert "when: timestamp[" in text and "from the " + fmt + " file's own schema" in text


@pytest.mark.parametrize("bom", [False, True], ids=["no-bom", "bom"])
@pytest.mark.parametrize("quoted", [False, True], ids=["bare", "quoted"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("multiline", [False, True], ids=["lines", "multiline"])
def test_one_header_reader_for_infer_schema_and_the_converter(tmp_path, bom, quoted, newline, multiline):
    """R's write.csv(fileEncoding="UTF-8-BOM") and Excel: a byte-order mark, then quoted names.
    infer-schema names the columns as the converter reads them, and its schema converts the file."""
    from tfrecord_io.conversion import parsing
    from helpers import convert

    q = '"' if quoted else ""
    header = ",".join(f"{q}{n}{q}" for n in ("season", "cnt", "note"))
    body = newline.join(["1,10,a", '2,20,"b, c"', "3,30,d"])
    data = tmp_path / "day.csv"
    data.write_bytes((b"\xef\xbb\xbf" if bom else b"") + (header + newline + body + newline).encode())
    cols = infer_columns(str(data), "csv", multiline=multiline)
    assert [c.name for c in cols] == ["season", "cnt", "note"]
    with open(data, "rb") as f:
        names, _, _ = parsing.read_csv_header(f, CsvOptions(), str(data), multiline)
    assert names == ["season", "cnt", "note"]
    if not (bom and quoted):
        return  # the names agree; the conversion runs for the case users met (R's and Excel's files)
    (tmp_path / "s.yaml").write_text(infer_text(data, "csv"))
    manifest = convert("beam", None, str(data), "csv", str(tmp_path / "s.yaml"), str(tmp_path / "out"),
                       multiline=multiline)
    assert manifest["totals"] == dict(manifest["totals"], records=3, rejected=0)


def test_nulls_past_a_sample_are_seen_by_default_and_the_summary_names_what_the_loader_would_refuse(tmp_path):
    """A column whose only nulls come after row 1,500: infer-schema reads the whole (small, local)
    input and gives it a default; with --sample-rows 1000 it says it sampled, and the conversion's
    summary line names the feature some records lack, with the count."""
    from helpers import tfrecord_io_cli

    data = tmp_path / "day.csv"
    data.write_text("season,cnt\n" + "".join(f"{i % 4},{'' if i >= 1500 and i % 10 == 0 else i}\n"
                                             for i in range(4361)))
    whole = tfrecord_io_cli("infer-schema", "--input", str(data), "--format", "csv").stdout
    assert "from all 4,361 csv rows" in whole
    assert Schema.from_yaml(whole).feature("cnt").default == 0
    sampled = tfrecord_io_cli("infer-schema", "--input", str(data), "--format", "csv", "--sample-rows", "1000").stdout
    assert "from the first 1,000 csv rows (a sample" in sampled
    assert Schema.from_yaml(sampled).feature("cnt").default is None
    (tmp_path / "s.yaml").write_text(sampled)
    run = tfrecord_io_cli("convert", "--engine", "beam", "--input", str(data), "--format", "csv", "--schema",
                          str(tmp_path / "s.yaml"), "--output", str(tmp_path / "out"))
    last = run.stderr.strip().splitlines()[-1]
    assert "0 of 4361 input rows rejected" in last and "make_dataset will refuse: 'cnt' (287)" in last, last
