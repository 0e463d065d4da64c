"""Spark column types a user writes without thinking (issue #24 item 3), written by the
``tfrecord`` data source and read back with TensorFlow's own parser: each row of the table in
``tfrecord_io/engines/spark_columns.py`` (and ``docs/wire-contract.md``, "Spark columns")."""

from __future__ import annotations

import datetime as dt
import decimal
import glob

import numpy as np
import pytest
import tensorflow as tf

import tfrecord_io.spark
from tfrecord_io.engines.loader import parse_spec
from tfrecord_io.storage import output

UTC = dt.timezone.utc


@pytest.fixture(scope="module")
def table(spark):
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql import types as T

    tfrecord_io.spark.register(spark)
    schema = T.StructType([
        T.StructField("b", T.ByteType()), T.StructField("s", T.ShortType()), T.StructField("flag", T.BooleanType()),
        T.StructField("price", T.DecimalType(10, 2)), T.StructField("day", T.DateType()),
        T.StructField("at", T.TimestampType()), T.StructField("days", T.ArrayType(T.DateType())),
        T.StructField("place", T.StructType([T.StructField("city", T.StringType()),
                                             T.StructField("geo", T.StructType([T.StructField("lat", T.DoubleType())]))])),
        T.StructField("v", VectorUDT()),
    ])
    rows = [
        (1, -300, True, decimal.Decimal("12.34"), dt.date(2024, 2, 29), dt.datetime(2024, 2, 29, 12, 0, 1, 500, UTC),
         [dt.date(1970, 1, 2), dt.date(1969, 12, 31)], ("Oslo", (59.9,)), Vectors.dense([1.0, 2.5])),
        (-128, 32767, False, decimal.Decimal("-0.01"), dt.date(1970, 1, 1), dt.datetime(1970, 1, 1, 0, 0, 0, 0, UTC),
         [], ("Lima", (-12.0,)), Vectors.sparse(4, [1, 3], [7.0, -1.0])),
        (None, None, None, None, None, None, None, None, None),
    ]
    return spark.createDataFrame(rows, schema)


def _parsed(path: str, schema) -> dict:
    files = sorted(glob.glob(f"{path}/part-*"))
    ds = tf.data.TFRecordDataset(files).batch(100)
    return {k: v for batch in ds for k, v in tf.io.parse_example(batch, parse_spec(schema)).items()}


def test_every_column_type_reaches_tensorflow(table, tmp_path):
    out = str(tmp_path / "out")
    table.coalesce(1).write.format("tfrecord").mode("overwrite").save(out)
    manifest = output.read_manifest(out)
    from tfrecord_io.core.schema import Schema

    schema = Schema.from_dict(manifest["schema"])
    kinds = {f.name: (f.type, f.shape) for f in schema.features}
    assert kinds == {"b": ("int64", None), "s": ("int64", None), "flag": ("int64", None), "price": ("float", None),
                     "day": ("int64", None), "at": ("int64", None), "days": ("int64", (-1,)),
                     "place.city": ("string", None), "place.geo.lat": ("float", None), "v": ("float", (-1,))}
    # A missing scalar has no default in an inferred schema: parse the present rows with defaults.
    spec_schema = Schema.from_dict({**manifest["schema"], "features": [
        {**f, "default": ("" if f["type"] == "string" else 0)} if "shape" not in f else f
        for f in manifest["schema"]["features"]]})
    p = _parsed(out, spec_schema)
    assert p["b"].numpy().tolist()[:2] == [1, -128] and p["s"].numpy().tolist()[:2] == [-300, 32767]
    assert p["flag"].numpy().tolist()[:2] == [1, 0]
    assert np.allclose(p["price"].numpy()[:2], [12.34, -0.01])
    assert p["day"].numpy().tolist()[:2] == [(dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days, 0]
    assert p["at"].numpy().tolist()[:2] == [int(dt.datetime(2024, 2, 29, 12, 0, 1, 500, UTC).timestamp() * 1e6), 0]
    assert p["days"].to_list()[:3] == [[1, -1], [], []]
    assert [c.decode() for c in p["place.city"].numpy()[:2]] == ["Oslo", "Lima"]
    assert np.allclose(p["place.geo.lat"].numpy()[:2], [59.9, -12.0])
    assert p["v"].to_list()[:3] == [[1.0, 2.5], [0.0, 7.0, 0.0, -1.0], []]
    assert manifest["present"]["day"] == 2 and manifest["totals"]["records"] == 3


def test_the_conversions_can_be_chosen(table, tmp_path):
    out = str(tmp_path / "out")
    (table.select("price", "at").coalesce(1).write.format("tfrecord").mode("overwrite")
     .option("decimalAs", "string").option("timestampUnit", "seconds").save(out))
    from tfrecord_io.core.schema import Schema

    schema = Schema.from_dict(output.read_manifest(out)["schema"])
    assert [(f.name, f.type) for f in schema.features] == [("price", "string"), ("at", "int64")]
    spec = Schema.from_dict({"features": [{"name": "price", "type": "string", "default": ""},
                                          {"name": "at", "type": "int64", "default": 0}]})
    p = _parsed(out, spec)
    assert [v.decode() for v in p["price"].numpy()[:2]] == ["12.34", "-0.01"]
    assert p["at"].numpy().tolist()[:2] == [int(dt.datetime(2024, 2, 29, 12, 0, 1, tzinfo=UTC).timestamp()), 0]
    with pytest.raises(Exception, match="timestampUnit must be one of"):
        table.select("at").write.format("tfrecord").mode("overwrite").option("timestampUnit", "days").save(out)


@pytest.mark.parametrize("column,says", [
    ("map('a', 1) as m", "to_json"),
    ("array(named_struct('x', 1)) as a", "explode the array"),
    ("array(array(1)) as aa", "F.flatten"),
    ("null as n", "cast it to the type it should have"),
])
def test_a_column_an_example_cannot_hold_is_refused_before_any_task(spark, tmp_path, column, says):
    tfrecord_io.spark.register(spark)
    df = spark.range(3).selectExpr("id", column)
    with pytest.raises(Exception) as e:
        df.write.format("tfrecord").mode("overwrite").save(str(tmp_path / "out"))
    assert "cannot hold" in str(e.value) and says in str(e.value), str(e.value)[-2000:]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_job_takes_dates_and_structs_from_parquet(spark, tmp_path):
    """``--format parquet`` with a schema: a date column for an int64 feature, a struct's field
    by its dotted name."""
    from tfrecord_io.engines.spark import ConversionOptions, run_conversion

    inp = str(tmp_path / "in.parquet")
    spark.createDataFrame([(dt.date(1970, 1, 11), ("x",)), (dt.date(1970, 1, 1), ("y",))],
                          "day date, s struct<tag: string>").write.parquet(inp)
    (tmp_path / "s.yaml").write_text("features:\n  - {name: day, type: int64}\n  - {name: s.tag, type: string}\n")
    out = str(tmp_path / "out")
    manifest = run_conversion(spark, ConversionOptions(inputs=inp, input_format="parquet",
                                                       schema=str(tmp_path / "s.yaml"), output=out, num_shards=1))
    assert manifest["totals"]["records"] == 2
    from tfrecord_io.core.schema import Schema

    p = _parsed(out, Schema.from_dict({"features": [{"name": "day", "type": "int64"},
                                                    {"name": "s.tag", "type": "string"}]}))
    assert sorted(zip(p["day"].numpy().tolist(), [t.decode() for t in p["s.tag"].numpy()])) == [(0, "y"), (10, "x")]
