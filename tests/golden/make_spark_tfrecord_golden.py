"""Regenerate the spark-tfrecord golden outputs with LinkedIn's spark-tfrecord 0.7.0 itself.

Run from the repository root (the jar is not served by the package registries here; see
``../shared/peers/README.md`` for how it was built):

    SPARK_HOME=$(.venv/bin/python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))') \\
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master 'local[1]' \\
        --jars ../shared/peers/spark-tfrecord_2.13-0.7.0.jar tests/golden/make_spark_tfrecord_golden.py

It writes ``spark-tfrecord/example``, ``spark-tfrecord/example-gzip`` and
``spark-tfrecord/sequence`` next to this script: the DataFrames :func:`example_rows` and
:func:`sequence_rows` (which ``tests/test_spark_datasource.py`` imports to know what the files
hold) written with ``df.write.format("com.linkedin.spark.datasources.tfrecord")`` in one
partition.  This module must stay importable without Spark (Spark is imported in ``main`` only).
"""

from __future__ import annotations

import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent / "spark-tfrecord"


def example_rows() -> list[dict]:
    """id, a float, a nullable string, a float array, a string array and binary, per row."""
    return [{"id": i, "x": i / 4, "name": None if i % 5 == 0 else f"n{i}", "vec": [float(i), 0.5],
             "tags": ["t"] * (i % 3), "blob": bytes([i, 255 - i])} for i in range(20)]


def sequence_rows() -> list[dict]:
    """A session per row: context (session, country) and feature lists (ts, items, prices)."""
    return [{"session": f"s{k}", "country": "fr" if k % 2 else "de",
             "ts": [[t] for t in range(k + 1)], "items": [[f"i{t}", "x"] for t in range(k + 1)],
             "prices": [[t * 1.5] for t in range(k + 1)]} for k in range(6)]


def structs():
    """(the Spark types of :func:`example_rows`, of :func:`sequence_rows`)."""
    from pyspark.sql import types as T

    example = T.StructType([
        T.StructField("id", T.LongType()), T.StructField("x", T.DoubleType()),
        T.StructField("name", T.StringType()), T.StructField("vec", T.ArrayType(T.FloatType())),
        T.StructField("tags", T.ArrayType(T.StringType())), T.StructField("blob", T.BinaryType())])
    sequence = T.StructType([
        T.StructField("session", T.StringType()), T.StructField("country", T.StringType()),
        T.StructField("ts", T.ArrayType(T.ArrayType(T.LongType()))),
        T.StructField("items", T.ArrayType(T.ArrayType(T.StringType()))),
        T.StructField("prices", T.ArrayType(T.ArrayType(T.FloatType())))])
    return example, sequence


def main() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("spark-tfrecord golden").getOrCreate()
    fmt = "com.linkedin.spark.datasources.tfrecord"
    example, sequence = structs()
    shutil.rmtree(HERE, ignore_errors=True)
    df = spark.createDataFrame(example_rows(), example).coalesce(1)
    df.write.format(fmt).option("recordType", "Example").save(str(HERE / "example"))
    df.write.format(fmt).option("recordType", "Example").option(
        "codec", "org.apache.hadoop.io.compress.GzipCodec").save(str(HERE / "example-gzip"))
    spark.createDataFrame(sequence_rows(), sequence).coalesce(1).write.format(fmt).option(
        "recordType", "SequenceExample").save(str(HERE / "sequence"))
    for crc in HERE.rglob(".*.crc"):  # Hadoop's checksum side files: not part of the output
        crc.unlink()
    spark.stop()


if __name__ == "__main__":
    main()
