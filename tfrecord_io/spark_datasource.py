"""``df.write.format("tfrecord")`` for Spark 4: a Python data source on our encoder and output contract.

    import tfrecord_io.spark_datasource as tfds
    tfds.register(spark)
    df.write.format("tfrecord").mode("overwrite").option("compression", "gzip").save("hdfs://nn/out/trips")

What it writes is the job's output contract (:mod:`tfrecord_io.output`): ``part-NNNNN-of-MMMMM
.tfrecord[.gz|.zlib]`` (one per DataFrame partition), ``_rejects/``, ``_manifest.json`` with the
schema, and ``_SUCCESS`` last, exactly once: each task attempt writes under
``_temporary/<attempt>/`` and returns what it wrote in its commit message; Spark hands the driver
the messages of the successful attempts only, and ``commit`` moves exactly those files into place
(``abort`` deletes ``_temporary``).

Options
    ``schema``: a YAML schema (path or URI); its features must match the DataFrame's columns
    (:mod:`tfrecord_io.columns`; ``allowMissingColumns`` / ``ignoreExtraColumns`` opt out).
    Without it the schema comes from the DataFrame's types: byte/short/int/long and boolean to
    ``int64``, float and double to ``float``, string to ``string``, binary to ``bytes``, arrays of
    those to ``[-1]`` lists.  Any other type (map, struct, timestamp, date, decimal, nested
    arrays) fails before any task starts, naming the column and the cast to use.
    ``compression``: ``none`` (default), ``gzip``, ``zlib``; spark-tfrecord's ``codec`` with
    Hadoop class names (``org.apache.hadoop.io.compress.GzipCodec``, ``DefaultCodec``) too.
    ``recordType``: ``Example`` (default); ``SequenceExample`` is not written from DataFrames yet
    (an error says so).  ``maxRejectFraction``: as the job's ``--max-reject-fraction``.

Save modes
    Spark runs Python data sources in ``append`` and ``overwrite`` mode only (its default,
    ``errorifexists``, is refused by Spark itself).  ``overwrite`` replaces what a previous
    conversion wrote (and nothing else, as ``--overwrite``); ``append`` writes into an empty or
    new directory and refuses, before any task starts, a directory that already holds output --
    so ``append`` behaves as ``errorifexists``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from tfrecord_io import codec, columns, fs, output
from tfrecord_io.schema import Feature, Schema, SchemaError

__all__ = ["TFRecordDataSource", "register", "schema_from_spark"]

_CODECS = {"none": "none", "uncompressed": "none", "gzip": "gzip", "zlib": "zlib",
           "org.apache.hadoop.io.compress.gzipcodec": "gzip", "org.apache.hadoop.io.compress.defaultcodec": "zlib",
           "org.apache.hadoop.io.compress.deflatecodec": "zlib"}
_CASTS = {"TimestampType": "cast it to long (epoch seconds) or string", "TimestampNTZType": "cast it to string",
          "DateType": "cast it to string or to an integer day number", "DecimalType": "cast it to double",
          "MapType": "explode it, or turn it into a JSON string with to_json", "StructType": "flatten its fields "
          "into columns (col('s.field')), or to_json", "NullType": "cast it to the type it should have"}


def register(spark) -> None:
    """Register the ``tfrecord`` format with ``spark`` (once per session)."""
    spark.dataSource.register(TFRecordDataSource)


def _scalar_type(dt) -> str | None:
    from pyspark.sql import types as T

    if isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType)):
        return "int64"
    if isinstance(dt, (T.FloatType, T.DoubleType)):
        return "float"
    if isinstance(dt, T.StringType):
        return "string"
    if isinstance(dt, T.BinaryType):
        return "bytes"
    return None


def schema_from_spark(struct) -> Schema:
    """The Example schema a DataFrame's types give (module doc); TypeError naming a column we cannot write."""
    from pyspark.sql import types as T

    features = []
    for f in struct.fields:
        dt = f.dataType
        kind, shape = _scalar_type(dt), None
        if kind is None and isinstance(dt, T.ArrayType):
            kind, shape = _scalar_type(dt.elementType), (-1,)
        if kind is None:
            what = type(dt).__name__
            fix = _CASTS.get(what, "cast it to a number, string or binary column (or an array of one)")
            raise TypeError(f"column {f.name!r} has type {dt.simpleString()}, which a tf.train.Example cannot hold: "
                            f"{fix}, or drop it")
        features.append(Feature(name=f.name, type=kind, shape=shape))
    if not features:
        raise TypeError("the DataFrame has no columns")
    return Schema(record_type="example", features=tuple(features))


@dataclass
class _Written(WriterCommitMessage):
    """What one task attempt wrote (its shard and rejects) and counted."""

    partition: int
    shard: dict
    rejects: dict | None
    input_rows: int
    records: int
    rejected: int


@dataclass
class _Writer(DataSourceArrowWriter):
    path: str
    schema: Schema
    compression: str
    job_id: str
    max_reject_fraction: float
    fail_first_attempt: str = ""  # fault injection (tests): as the job's TFRECORD_IO_FAIL_FIRST_ATTEMPT
    arrow: pa.Schema = field(init=False)

    def __post_init__(self):
        self.arrow = pa.schema([pa.field(f.name, f.arrow_type()) for f in self.schema.features])

    # -- executors ---------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId()
        attempt = f"{self.job_id}-p{part:05d}-a{ctx.attemptNumber()}-t{ctx.taskAttemptId()}"
        counts = {"input_rows": 0, "records": 0}
        rejects: list[dict] = []

        def records():
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                counts["input_rows"] += batch.num_rows
                typed = self._typed(batch)
                errors = codec.row_errors(typed, self.schema)
                bad = np.array([e is not None for e in errors], dtype=bool)
                if bad.any():
                    rows = batch.filter(pa.array(bad)).to_pylist()
                    for row, why in zip(rows, (e for e in errors if e is not None)):
                        rejects.append(output_reject(row, why))
                    typed = typed.filter(pa.array(~bad))
                if typed.num_rows:
                    counts["records"] += typed.num_rows
                    yield codec.encode_examples(typed, self.schema)

        from tfrecord_io.spark import _after_first_batch, _die, _first_attempt_of

        batches = records()
        if _first_attempt_of(self.fail_first_attempt, part, ctx.attemptNumber()):
            batches = _after_first_batch(batches, lambda: _die(attempt))
        name = f"part-{part:05d}.tfrecord"
        shard = output.write_shard(batches, self.path, attempt, name, self.compression)
        written = output.write_rejects(iter(rejects), self.path, attempt, f"part-{part:05d}.jsonl")
        return _Written(part, output.written_file_dict(shard),
                        output.written_file_dict(written) if written else None,
                        counts["input_rows"], counts["records"], len(rejects))

    def _typed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        cols = []
        for f in self.arrow:
            i = batch.schema.get_field_index(f.name)
            if i < 0:  # a feature the DataFrame lacks (allowMissingColumns): null in every row
                cols.append(pa.nulls(batch.num_rows, f.type))
                continue
            col = batch.column(i)
            cols.append(col if col.type == f.type else col.cast(f.type, safe=False))
        return pa.RecordBatch.from_arrays(cols, schema=self.arrow)

    # -- driver ------------------------------------------------------------------------------
    def commit(self, messages: list) -> None:
        messages = sorted((m for m in messages if m is not None), key=lambda m: m.partition)
        n = len(messages)
        files, rejects = [], []
        totals = output.ConversionTotals()
        for k, m in enumerate(messages):
            shard = output.WrittenFile(**m.shard)
            files.append(output.WrittenFile(shard.temp_path, output.shard_name(k, n, self.compression),
                                            shard.records, shard.bytes))
            if m.rejects:
                rejects.append(output.WrittenFile(**m.rejects))
            totals.input_rows += m.input_rows
            totals.records += m.records
            totals.rejected += m.rejected
        output.commit(self.path, files, rejects, totals, schema=self.schema, compression=self.compression,
                      engine="spark-datasource", max_reject_fraction=self.max_reject_fraction)

    def abort(self, messages: list) -> None:
        temporary = fs.join(self.path, output.TEMPORARY)
        if fs.exists(temporary):
            fs.delete(temporary, recursive=True)


def output_reject(row: dict, reason: str) -> dict:
    """A DataFrame row that did not convert, in the reject format (``raw`` is the row as JSON)."""
    def plain(v):
        if isinstance(v, bytes):
            return v.decode("utf-8", "backslashreplace")
        if isinstance(v, float) and not np.isfinite(v):
            return str(v)
        return v

    raw = json.dumps({k: [plain(x) for x in v] if isinstance(v, list) else plain(v) for k, v in row.items()},
                     ensure_ascii=False)
    return {"source": "dataframe", "line": None, "raw": raw, "reason": reason}


class TFRecordDataSource(DataSource):
    """The ``tfrecord`` format (see the module doc)."""

    @classmethod
    def name(cls) -> str:
        return "tfrecord"

    def writer(self, schema, overwrite: bool) -> _Writer:
        opts = {k.lower(): v for k, v in self.options.items()}
        path = opts.get("path")
        if not path:
            raise ValueError("df.write.format('tfrecord') needs a path: .save(path)")
        path = path.rstrip("/") or "/"
        record_type = opts.get("recordtype", "Example").lower()
        if record_type == "sequenceexample":
            raise ValueError("recordType SequenceExample is not written from DataFrames yet; write Examples, or "
                             "convert CSV/JSON with the job (tfrecord-io convert) and a sequence_example schema")
        if record_type != "example":
            raise ValueError(f"recordType must be Example or SequenceExample, got {opts['recordtype']!r}")
        codec_name = opts.get("compression", opts.get("codec", "none")).lower()
        if codec_name not in _CODECS:
            raise ValueError(f"compression/codec {codec_name!r} is not supported; use none, gzip or zlib "
                             f"(or Hadoop's GzipCodec / DefaultCodec)")
        if "schema" in opts:
            tf_schema = Schema.load(opts["schema"])
            if tf_schema.record_type != "example":
                raise SchemaError(f"{opts['schema']}: only example schemas are written from DataFrames yet")
            columns.check_columns(tf_schema, {"the DataFrame": [f.name for f in schema.fields]}, input_format="table",
                                  allow_missing=_true(opts.get("allowmissingcolumns")),
                                  ignore_extra=_true(opts.get("ignoreextracolumns")), schema_name=opts["schema"])
        else:
            tf_schema = schema_from_spark(schema)
        if not overwrite and fs.exists(path) and fs.isdir(path) and fs.ls(path):
            raise FileExistsError(f"{path} is not empty: Spark's append mode would mix two outputs; write with "
                                  f".mode('overwrite') to replace a previous conversion's output, or choose another path")
        output.prepare_output(path, overwrite=overwrite)
        fs.makedirs(fs.join(path, output.TEMPORARY))
        import os

        from tfrecord_io.spark import FAIL_FIRST_ATTEMPT_ENV

        fraction = float(opts.get("maxrejectfraction", output.DEFAULT_MAX_REJECT_FRACTION))
        return _Writer(path, tf_schema, _CODECS[codec_name], uuid.uuid4().hex[:12], fraction,
                       os.environ.get(FAIL_FIRST_ATTEMPT_ENV, ""))


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")
