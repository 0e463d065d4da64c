"""A misspelled feature must not pass silently (issue #15, item 1): the schema's features against the
input's columns, checked on the driver before any task, on both engines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from helpers import convert, tfrecord_io_cli
from tfrecord_io.conversion import columns
from tfrecord_io.core.schema import Schema, SchemaError

FLIGHTS = {"features": [{"name": "year", "type": "int64"}, {"name": "dep_dealy", "type": "float", "default": 0.0},
                        {"name": "carrier", "type": "string", "default": ""}]}
HEADER = "year,dep_delay,carrier\n"


def _write(tmp_path: Path, schema: dict, files: dict[str, str]) -> tuple[str, str]:
    (tmp_path / "in").mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / "in" / name).write_text(text)
    (tmp_path / "schema.yaml").write_text(yaml.safe_dump(schema))
    return str(tmp_path / "in"), str(tmp_path / "schema.yaml")


def test_misspelled_feature_names_both_names_and_the_fix():
    schema = Schema.from_dict(FLIGHTS)
    with pytest.raises(columns.ColumnMismatch) as info:
        columns.check_columns(schema, {"a.csv": ["year", "dep_delay", "carrier"]}, input_format="csv")
    text = str(info.value)
    assert "feature 'dep_dealy' is not a column of a.csv (did you mean 'dep_delay'?)" in text
    assert "column 'dep_delay' of a.csv is read by no feature (did you mean 'dep_dealy'?)" in text
    assert "allow_missing: true" in text and "ignore_columns" in text
    assert isinstance(info.value, SchemaError)  # exit status 2


def test_opt_ins_per_feature_per_schema_and_per_job():
    base = {"features": [{"name": "a", "type": "int64"}, {"name": "new", "type": "int64", "allow_missing": True}]}
    schema = Schema.from_dict(base)
    columns.check_columns(schema, {"old.csv": ["a"], "new.csv": ["a", "new"]}, input_format="csv")
    with pytest.raises(columns.ColumnMismatch, match="column 'x' of old.csv is read by no feature"):
        columns.check_columns(schema, {"old.csv": ["a", "x"]}, input_format="csv")
    columns.check_columns(Schema.from_dict({**base, "ignore_columns": ["x"]}), {"old.csv": ["a", "x"]},
                          input_format="csv")
    columns.check_columns(schema, {"old.csv": ["a", "x"]}, input_format="csv", ignore_extra=True)
    strict = Schema.from_dict({"features": [{"name": "a", "type": "int64"}, {"name": "b", "type": "int64"}]})
    with pytest.raises(columns.ColumnMismatch, match="feature 'b' is not a column of old.csv"):
        columns.check_columns(strict, {"old.csv": ["a"], "new.csv": ["a", "b"]}, input_format="csv")
    columns.check_columns(strict, {"old.csv": ["a"]}, input_format="csv", allow_missing=True)
    with pytest.raises(SchemaError, match="a column is either read or ignored"):
        Schema.from_dict({**base, "ignore_columns": ["a"]})
    assert Schema.from_dict(Schema.from_dict({**base, "ignore_columns": ["x"]}).to_dict()).ignore_columns == ("x",)


def test_json_keys_are_taken_across_files_and_duplicate_headers_fail():
    schema = Schema.from_dict({"features": [{"name": "a", "type": "int64"}, {"name": "b", "type": "int64"}]})
    # A JSON writer may leave out a null key: b missing from one file is fine if another has it.
    columns.check_columns(schema, {"1.jsonl": {"a"}, "2.jsonl": {"a", "b"}}, input_format="json")
    with pytest.raises(columns.ColumnMismatch, match="feature 'b' is not a column of the sampled JSON objects"):
        columns.check_columns(schema, {"1.jsonl": {"a"}}, input_format="json")
    with pytest.raises(columns.ColumnMismatch, match=r"names column\(s\) \['a'\] more than once"):
        columns.check_columns(schema, {"d.csv": ["a", "b", "a"]}, input_format="csv")


def test_engines_refuse_a_misspelled_feature_before_any_task(engine, session, tmp_path):
    inp, schema = _write(tmp_path, FLIGHTS, {"flights.csv": HEADER + "2013,2.0,UA\n2013,-4.0,AA\n"})
    out = tmp_path / "out"
    with pytest.raises(columns.ColumnMismatch, match="did you mean 'dep_delay'"):
        convert(engine, session, inp, "csv", schema, str(out))
    assert not out.exists()  # refused before the output was touched


def test_engines_refuse_unknown_and_missing_json_keys_and_accept_the_opt_ins(engine, session, tmp_path):
    rows = [{"year": 2013, "dep_delay": 2.0, "carrier": "UA"}, {"year": 2013, "dep_delay": None, "carrier": "AA"}]
    inp, schema = _write(tmp_path, FLIGHTS, {"f.jsonl": "".join(json.dumps(r) + "\n" for r in rows)})
    with pytest.raises(columns.ColumnMismatch, match="feature 'dep_dealy'.*did you mean 'dep_delay'"):
        convert(engine, session, inp, "json", schema, str(tmp_path / "out"))
    manifest = convert(engine, session, inp, "json", schema, str(tmp_path / "out2"),
                       allow_missing_columns=True, ignore_extra_columns=True)
    assert manifest["totals"] == {"input_rows": 2, "records": 2, "rejected": 0}


def test_schema_evolution_with_allow_missing_converts_old_files_with_nulls(engine, session, tmp_path):
    schema = {"features": [{"name": "year", "type": "int64"},
                           {"name": "dep_delay", "type": "float", "default": 0.0},
                           {"name": "carrier", "type": "string", "default": "?", "allow_missing": True}]}
    inp, schema_path = _write(tmp_path, schema, {"old.csv": "year,dep_delay\n2012,1.5\n",
                                                 "new.csv": HEADER + "2013,2.0,UA\n"})
    manifest = convert(engine, session, inp, "csv", schema_path, str(tmp_path / "out"))
    assert manifest["totals"] == {"input_rows": 2, "records": 2, "rejected": 0}


@pytest.mark.parametrize("cli_engine", ["spark", "beam"])
def test_cli_exits_2_with_one_line_and_no_engine_output(cli_engine, tmp_path):
    inp, schema = _write(tmp_path, FLIGHTS, {"flights.csv": HEADER + "2013,2.0,UA\n"})
    args = ["convert", "--engine", cli_engine, "--input", inp, "--format", "csv", "--schema", schema,
            "--output", str(tmp_path / "out")]
    args += ["--engine-arg=--runner=FnApiRunner"] if cli_engine == "beam" else ["--master", "local[1]"]
    proc = tfrecord_io_cli(*args, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("tfrecord-io convert: error:")]
    assert len(errors) == 1 and "did you mean 'dep_delay'" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
