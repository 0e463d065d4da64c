"""Wide tables (#29 item 4): a schema feature that gathers N numeric columns into one [N] list.

The schema forms and their errors, CSV parsing (the rule both engines run), end to end through
Beam, the Spark job and the DataFrame writer, infer-schema's proposal, and keras_inputs.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from helpers import convert, rejects_of

from tfrecord_io.commands.infer import GATHER_MIN_COLUMNS, infer_columns, schema_yaml
from tfrecord_io.conversion import columns, parsing
from tfrecord_io.core.schema import CsvOptions, Schema, SchemaError
from tfrecord_io.storage import output

N = 24  # gathered columns in the end-to-end table (>= GATHER_MIN_COLUMNS)
ROWS = 60


def schema_of(*features, **top) -> Schema:
    return Schema.from_dict({"features": list(features), **top})


ID = {"name": "id", "type": "int64"}
LABEL = {"name": "label", "type": "int64"}


# -- the schema's forms ----------------------------------------------------------------------
@pytest.mark.parametrize("columns_form, shape, names", [
    (["a", "b", "c"], None, ("a", "b", "c")),
    (["a", "b", "c"], [3], ("a", "b", "c")),
    ({"from": "px_0", "to": "px_3"}, None, ("px_0", "px_1", "px_2", "px_3")),
    ({"from": "V1", "to": "V12"}, [12], tuple(f"V{i}" for i in range(1, 13))),
    ({"from": "f08", "to": "f11"}, None, ("f08", "f09", "f10", "f11")),
])
def test_the_gathered_forms_parse_and_write_back(columns_form, shape, names):
    f = {"name": "x", "type": "float", "columns": columns_form}
    if shape:
        f["shape"] = shape
    schema = schema_of(ID, f)
    x = schema.feature("x")
    assert x.gathered and x.columns == names and x.shape == (len(names),) and x.fixed_length == len(names)
    assert schema.source_columns == ("id",) + names
    assert Schema.from_yaml(schema.to_yaml()) == schema


def test_a_pattern_is_matched_against_the_input_in_natural_order():
    schema = schema_of(ID, {"name": "x", "type": "int64", "shape": [3], "columns": {"pattern": "x_*"}})
    assert schema.feature("x").column_pattern == "x_*" and schema.feature("x").source_columns == ()
    assert Schema.from_yaml(schema.to_yaml()) == schema
    resolved = schema.resolve_columns(["id", "x_10", "x_2", "x_1", "other"])
    assert resolved.feature("x").columns == ("x_1", "x_2", "x_10")
    found = {"a.csv": ["id", "x_1", "x_2", "x_10"]}
    assert columns.resolve_patterns(schema, found, input_format="csv").feature("x").columns == ("x_1", "x_2", "x_10")


def test_a_scalar_default_fills_every_place():
    schema = schema_of({"name": "x", "type": "float", "default": -1, "columns": ["a", "b"]})
    assert schema.feature("x").default == (-1.0, -1.0)
    assert schema.to_dict()["features"][0]["default"] == -1.0


def test_a_sequence_key_is_one_value():
    with pytest.raises(SchemaError, match="group_by 'k' gathers columns"):
        Schema.from_dict({"record_type": "sequence_example", "group_by": "k",
                          "context": [{"name": "k", "type": "int64", "columns": ["a", "b"]}],
                          "sequence": [{"name": "s", "type": "float", "columns": ["c", "d"]}]})
    steps = Schema.from_dict({"record_type": "sequence_example", "group_by": "k",
                              "context": [{"name": "k", "type": "int64"}],
                              "sequence": [{"name": "s", "type": "float", "columns": ["c", "d"]}]})
    assert steps.source_columns == ("k", "c", "d")


@pytest.mark.parametrize("features, top, says", [
    ([{"name": "x", "type": "string", "columns": ["a", "b"]}], {}, ["'x'", "int64 or float"]),
    ([{"name": "x", "type": "bytes", "columns": ["a", "b"]}], {}, ["'x'", "int64 or float"]),
    ([{"name": "x", "type": "float", "shape": [3], "columns": ["a", "b"]}], {}, ["'x'", "shape [3]", "2 columns"]),
    ([{"name": "x", "type": "float", "shape": [-1], "columns": ["a", "b"]}], {}, ["'x'", "fixed shape"]),
    ([{"name": "x", "type": "float", "columns": ["a", "b"], "separator": "|"}], {}, ["'x'", "separator"]),
    ([{"name": "x", "type": "float", "columns": ["a", "a"]}], {}, ["'x'", "'a'", "twice"]),
    ([{"name": "x", "type": "float", "columns": []}], {}, ["'x'", "non-empty list"]),
    ([{"name": "x", "type": "float", "columns": "a,b"}], {}, ["'x'", "list of column names"]),
    ([{"name": "x", "type": "float", "columns": {"from": "a_1", "to": "b_3"}}], {}, ["'x'", "'a_1'", "same stem"]),
    ([{"name": "x", "type": "float", "columns": {"from": "a_3", "to": "a_1"}}], {}, ["'x'", "'a_1'", "before"]),
    ([{"name": "x", "type": "float", "columns": {"from": "a_1"}}], {}, ["'x'", "from"]),
    ([{"name": "x", "type": "float", "columns": {"pattern": "a_*"}}], {}, ["'x'", "needs shape"]),
    ([{"name": "x", "type": "float", "columns": ["a", "b"], "default": [1.0]}], {}, ["'x'", "2 values"]),
    ([{"name": "x", "type": "float", "columns": ["a", "b"]}, {"name": "y", "type": "float", "columns": ["b", "c"]}],
     {}, ["'b'", "'x'", "'y'"]),
    ([{"name": "x", "type": "float", "columns": ["a", "b"]}, {"name": "b", "type": "float"}], {}, ["'b'", "'x'"]),
    ([{"name": "x", "type": "float", "columns": ["a", "b"]}], {"ignore_columns": ["b"]}, ["'b'", "ignore"]),
])
def test_schema_errors_name_the_feature_and_column(features, top, says):
    with pytest.raises(ValueError) as e:
        schema_of(*features, **top)
    assert isinstance(e.value, SchemaError)
    for s in says:
        assert s in str(e.value), (s, str(e.value))


@pytest.mark.parametrize("names, says", [
    (["id", "x_1", "x_2"], ["'x'", "'x_*'", "2 column(s)", "[3]"]),
    (["id", "y_1"], ["'x'", "0 column(s)"]),
])
def test_a_pattern_that_matches_another_number_of_columns_is_refused(names, says):
    schema = schema_of(ID, {"name": "x", "type": "float", "shape": [3], "columns": {"pattern": "x_*"}})
    with pytest.raises(ValueError) as e:
        columns.resolve_patterns(schema, {"a.csv": names}, input_format="csv")
    for s in says:
        assert s in str(e.value)


def test_a_pattern_matching_a_column_another_feature_reads_is_refused():
    schema = schema_of({"name": "x_0", "type": "float"},
                       {"name": "x", "type": "float", "shape": [2], "columns": {"pattern": "x_*"}})
    with pytest.raises(ValueError, match="'x'.*'x_0'.*feature 'x_0'"):
        schema.resolve_columns(["x_0", "x_1"])


def test_header_checks_name_the_missing_column_and_its_feature():
    schema = schema_of(ID, {"name": "x", "type": "float", "columns": {"from": "x_0", "to": "x_3"}})
    with pytest.raises(ValueError, match="column 'x_2' of feature 'x' is not a column of a.csv"):
        columns.check_columns(schema, {"a.csv": ["id", "x_0", "x_1", "x_3"]}, input_format="csv")
    with pytest.raises(ValueError, match="column 'extra' of a.csv is read by no feature"):
        columns.check_columns(schema, {"a.csv": ["id", "x_0", "x_1", "x_2", "x_3", "extra"]}, input_format="csv")
    columns.check_columns(schema, {"a.csv": ["x_3", "id", "x_0", "x_1", "x_2"]}, input_format="csv")


# -- CSV parsing: the rule both engines run --------------------------------------------------------
def parse(text: str, schema: Schema):
    batches = list(parsing.read_batches(io.BytesIO(text.encode()), schema, "csv", "w.csv"))
    rows = [r for b in batches for r in b.rows.to_pylist()]
    rejects = [r for b in batches for r in b.rejects]
    assert sum(b.input_rows for b in batches) == len(rows) + len(rejects)
    return rows, rejects


def test_cells_convert_per_column_with_rejects_naming_the_column():
    schema = schema_of(ID, {"name": "x", "type": "float", "columns": ["b", "a", "c"]}, LABEL)
    text = "id,a,b,c,label\n1,1.5,2,3,0\n2,abc,2,3,1\n3,,2,3,1\n4,,,,1\n5,1,2,3e2,0\n"
    rows, rejects = parse(text, schema)
    assert rows == [{"id": 1, "x": [2.0, 1.5, 3.0], "label": 0},  # the schema's order, matched by name
                    {"id": 4, "x": None, "label": 1},  # all null: a null list
                    {"id": 5, "x": [2.0, 1.0, 300.0], "label": 0}]
    assert [(r["line"], r["reason"]) for r in rejects] == [
        (3, "feature 'x': column 'a': 'abc' is not a valid float"),
        (4, "feature 'x': column 'a' is null, and the feature has no default")]


def test_a_default_fills_a_null_cell_in_its_place_and_a_pattern_matches_the_header():
    schema = schema_of(ID, {"name": "x", "type": "int64", "shape": [3], "default": [7, 8, 9],
                            "columns": {"pattern": "x*"}})
    rows, rejects = parse("id,x2,x1,x10\n1,,1,\n2,2,,10\n", schema)
    assert rows == [{"id": 1, "x": [1, 8, 9]}, {"id": 2, "x": [7, 2, 10]}] and rejects == []


def test_without_a_header_a_gathered_feature_takes_its_fields_in_order():
    schema = Schema.from_dict({"features": [ID, {"name": "x", "type": "float", "columns": ["a", "b"]}, LABEL],
                               "csv": {"header": False}})
    rows, rejects = parse("1,0.5,2,1\n2,3,4\n", schema)
    assert rows == [{"id": 1, "x": [0.5, 2.0], "label": 1}]
    assert rejects[0]["reason"] == "wrong number of columns: expected 4, got 3"
    patterned = Schema.from_dict({"features": [{"name": "x", "type": "float", "shape": [2],
                                                "columns": {"pattern": "x*"}}], "csv": {"header": False}})
    with pytest.raises(ValueError, match="'x'.*without a header"):
        parse("1,2\n", patterned)


# -- end to end ------------------------------------------------------------------------------------
def wide_csv(path, rows: int = ROWS, bad: dict | None = None) -> np.ndarray:
    """id, f_0 .. f_{N-1}, label; returns the float32 values by id. ``bad``: {(row, column): cell text}."""
    rng = np.random.default_rng(1)
    values = rng.normal(size=(rows, N)).astype(np.float32)
    lines = [",".join(["id"] + [f"f_{j}" for j in range(N)] + ["label"])]
    for i in range(rows):
        cells = [repr(float(v)) for v in values[i]]
        for (r, j), text in (bad or {}).items():
            if r == i:
                cells[j] = text
        lines.append(",".join([str(i)] + cells + [str(i % 2)]))
    path.write_text("\n".join(lines) + "\n")
    return values


WIDE = {"features": [ID, {"name": "f", "type": "float", "shape": [N], "columns": {"pattern": "f_*"}}, LABEL],
        "label": "label"}


def records_by_id(out: str) -> dict[int, np.ndarray]:
    from tfrecord_io import make_dataset

    got = {}
    for batch in make_dataset(out, batch_size=16, shuffle=False):
        features = batch[0] if isinstance(batch, tuple) else batch
        assert features["f"].shape[1:] == (N,)
        for i, row in zip(features["id"].numpy(), features["f"].numpy()):
            got[int(i)] = row
    return got


def check_output(out: str, values: np.ndarray, bad_rows: dict[int, str]) -> None:
    manifest = output.read_manifest(out)
    totals = manifest["totals"]
    assert totals["input_rows"] == len(values) == totals["records"] + totals["rejected"]
    assert totals["rejected"] == len(bad_rows)
    got = records_by_id(out)
    assert sorted(got) == sorted(set(range(len(values))) - set(bad_rows))
    for i, row in got.items():
        np.testing.assert_array_equal(row, values[i])
    reasons = sorted(r["reason"] for r in rejects_of(out))
    assert reasons == sorted(bad_rows.values())
    written = manifest["schema"]["features"][1]
    assert written["columns"] == {"from": "f_0", "to": f"f_{N - 1}"} and written["shape"] == [N]


BAD = {(3, 5): "oops", (7, 0): ""}
BAD_REASONS = {3: "feature 'f': column 'f_5': 'oops' is not a valid float",
               7: "feature 'f': column 'f_0' is null, and the feature has no default"}


@pytest.fixture
def wide(tmp_path):
    (tmp_path / "schema.yaml").write_text(json.dumps(WIDE))
    values = wide_csv(tmp_path / "wide.csv", bad=BAD)
    return tmp_path, values


def test_beam_writes_one_packed_list_per_record(wide):
    tmp, values = wide
    out = str(tmp / "out")
    convert("beam", None, str(tmp / "wide.csv"), "csv", str(tmp / "schema.yaml"), out)
    check_output(out, values, BAD_REASONS)


def test_the_spark_job_writes_the_same(spark, wide):
    tmp, values = wide
    out = str(tmp / "out")
    convert("spark", spark, str(tmp / "wide.csv"), "csv", str(tmp / "schema.yaml"), out)
    check_output(out, values, BAD_REASONS)


def test_the_dataframe_writer_and_the_jobs_table_formats_gather_columns(spark, tmp_path):
    import tfrecord_io.spark

    tfrecord_io.spark.register(spark)
    values = wide_csv(tmp_path / "wide.csv")
    df = spark.read.option("header", True).option("inferSchema", True).csv(str(tmp_path / "wide.csv"))
    df = df.withColumn("f_3", df["f_3"].cast("double"))  # a double column among the floats: one feature still
    null_at = 4
    from pyspark.sql import functions as F

    df = df.withColumn("f_2", F.when(F.col("id") == null_at, F.lit(None)).otherwise(F.col("f_2")))
    (tmp_path / "schema.yaml").write_text(json.dumps(WIDE))
    out = str(tmp_path / "df")
    df.write.format("tfrecord").mode("overwrite").option("schema", str(tmp_path / "schema.yaml")) \
        .option("maxRejectFraction", "0.5").save(out)
    check_output(out, values, {null_at: "feature 'f': column 'f_2' is null, and the feature has no default"})

    parquet = str(tmp_path / "wide.parquet")
    df.write.parquet(parquet)
    job_out = str(tmp_path / "job")
    convert("spark", spark, parquet, "parquet", str(tmp_path / "schema.yaml"), job_out)
    check_output(job_out, values, {null_at: "feature 'f': column 'f_2' is null, and the feature has no default"})

    bad = schema_of(ID, {"name": "f", "type": "int64", "shape": [N], "columns": {"pattern": "f_*"}}, LABEL)
    (tmp_path / "int.yaml").write_text(bad.to_yaml())
    with pytest.raises(Exception, match="column 'f_0'.*feature 'f' gathers int64"):
        df.write.format("tfrecord").mode("overwrite").option("schema", str(tmp_path / "int.yaml")).save(out + "2")


def test_infer_schema_proposes_the_gathered_feature_and_its_output_loads(tmp_path):
    values = wide_csv(tmp_path / "wide.csv")
    cols = infer_columns(str(tmp_path / "wide.csv"), "csv")
    proposed = schema_yaml(cols, "csv", CsvOptions(), 1000)
    assert f"{N} csv columns f_0 .. f_{N - 1} gathered into one [{N}] feature" in proposed
    schema = Schema.from_yaml(proposed)
    assert [f.name for f in schema.features] == ["id", "f", "label"]
    assert schema.feature("f").columns == tuple(f"f_{j}" for j in range(N)) and schema.feature("f").type == "float"
    plain = Schema.from_yaml(schema_yaml(cols, "csv", CsvOptions(), 1000, gather=False))
    assert len(plain.features) == N + 2
    (tmp_path / "schema.yaml").write_text(proposed)
    out = str(tmp_path / "out")
    convert("beam", None, str(tmp_path / "wide.csv"), "csv", str(tmp_path / "schema.yaml"), out)
    got = records_by_id(out)
    assert len(got) == ROWS
    for i, row in got.items():
        np.testing.assert_array_equal(row, values[i])


def test_infer_schema_gathers_only_runs_long_enough_and_numbered_in_order(tmp_path):
    short = GATHER_MIN_COLUMNS - 1
    header = [f"a{i}" for i in range(short)] + [f"b_{i}" for i in range(GATHER_MIN_COLUMNS)] + ["c_1", "c_3"]
    header += [f"d{i}" for i in range(GATHER_MIN_COLUMNS)]
    cells = ["1"] * (short + GATHER_MIN_COLUMNS + 2) + ["x"] + ["2.5"] * (GATHER_MIN_COLUMNS - 1)
    (tmp_path / "t.csv").write_text(",".join(header) + "\n" + ",".join(cells) + "\n")
    proposed = Schema.from_yaml(schema_yaml(infer_columns(str(tmp_path / "t.csv"), "csv"), "csv", CsvOptions(), 10))
    gathered = [f for f in proposed.features if f.gathered]
    assert [(f.name, f.type, f.shape) for f in gathered] == [("b", "int64", (GATHER_MIN_COLUMNS,))]


def test_infer_schema_cli_no_gather(tmp_path):
    from helpers import tfrecord_io_cli

    wide_csv(tmp_path / "wide.csv", rows=5)
    gathered = tfrecord_io_cli("infer-schema", "--input", str(tmp_path / "wide.csv"), "--format", "csv").stdout
    assert "columns: {from:" in gathered
    plain = tfrecord_io_cli("infer-schema", "--input", str(tmp_path / "wide.csv"), "--format", "csv",
                            "--no-gather").stdout
    assert "columns:" not in plain and '"f_23"' in plain


def test_keras_inputs_makes_one_input_for_a_gathered_feature(wide):
    from tfrecord_io.engines.keras_inputs import keras_inputs

    tmp, _ = wide
    out = str(tmp / "out")
    convert("beam", None, str(tmp / "wide.csv"), "csv", str(tmp / "schema.yaml"), out)
    prep = keras_inputs(out, task="binary")
    assert sorted(prep.inputs) == ["f", "id"]
    assert tuple(prep.inputs["f"].shape) == (None, N)


def test_keras_inputs_normalizes_each_gathered_column_and_trains(wide):
    import keras

    from tfrecord_io.engines.keras_inputs import keras_inputs

    tmp, values = wide
    out = str(tmp / "out")
    convert("beam", None, str(tmp / "wide.csv"), "csv", str(tmp / "schema.yaml"), out)
    prep = keras_inputs(out, features=["f"], task="binary")
    model = keras.Model(prep.inputs, prep.encoded)
    kept = np.delete(values, list(BAD_REASONS), axis=0)
    encoded = model.predict({"f": kept}, verbose=0)
    assert encoded.shape == (len(kept), N)
    np.testing.assert_allclose(encoded.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(encoded.std(axis=0), 1, atol=1e-3)
    head = keras.Model(prep.inputs, prep.output_layer()(keras.layers.Dense(4)(prep.encoded)))
    head.compile("adam", loss=prep.loss)
    head.fit(prep.dataset(batch_size=16), epochs=1, verbose=0)


def test_json_keys_gather_as_csv_columns_do(tmp_path):
    schema = schema_of(ID, {"name": "x", "type": "float", "shape": [3], "columns": {"pattern": "x_*"}})
    lines = [{"id": 1, "x_0": 1, "x_1": 2, "x_2": 3}, {"id": 2, "x_0": "abc", "x_1": 2, "x_2": 3},
             {"id": 3, "x_1": 2, "x_2": 3}, {"id": 4}, {"id": 5, "x_0": [1], "x_1": 2, "x_2": 3},
             {"id": 6, "x_2": 0.5, "x_0": 1e3, "x_1": "NaN"}]
    path = tmp_path / "wide.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "schema.yaml").write_text(schema.to_yaml())
    out = str(tmp_path / "out")
    convert("beam", None, str(path), "json", str(tmp_path / "schema.yaml"), out)
    assert output.read_manifest(out)["totals"] == {"input_rows": 6, "records": 3, "rejected": 3}
    assert sorted((r["line"], r["reason"]) for r in rejects_of(out)) == [
        (2, "feature 'x': expected a number in column 'x_0', got 'abc'"),
        (3, "feature 'x': column 'x_0' is null, and the feature has no default"),
        (5, "feature 'x': column 'x_0': expected a single value, got [1]")]
    from tfrecord_io import make_dataset

    assert output.read_manifest(out)["present"] == {"id": 3, "x": 2}  # id 4: all null, left out
    with_default = schema_of(ID, {"name": "x", "type": "float", "default": -1, "columns": ["x_0", "x_1", "x_2"]})
    got = {int(i): list(x) for b in make_dataset(out, schema=with_default, batch_size=8, shuffle=False)
           for i, x in zip(b["id"].numpy(), b["x"].numpy())}
    assert got[1] == [1, 2, 3] and got[6][0] == 1000 and np.isnan(got[6][1]) and got[6][2] == 0.5
    assert got[4] == [-1, -1, -1]


def test_infer_schema_proposes_it_for_json_keys_too(tmp_path):
    path = tmp_path / "wide.jsonl"
    path.write_text("".join(json.dumps({"id": i, **{f"k{j}": i * j * 0.5 for j in range(N)}}) + "\n"
                            for i in range(5)))
    schema = Schema.from_yaml(schema_yaml(infer_columns(str(path), "json"), "json", CsvOptions(), 1000))
    assert [(f.name, f.type, f.shape) for f in schema.features] == [("id", "int64", None), ("k", "float", (N,))]
    (tmp_path / "schema.yaml").write_text(schema.to_yaml())
    out = str(tmp_path / "out")
    convert("beam", None, str(path), "json", str(tmp_path / "schema.yaml"), out)
    assert output.read_manifest(out)["totals"]["records"] == 5
