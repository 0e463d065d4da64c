"""The ``tfrecord`` format for Spark 4 DataFrames: a Python data source on our encoder and output contract.

    import tfrecord_io.spark
    tfrecord_io.spark.register(spark)
    df.write.format("tfrecord").mode("overwrite").option("compression", "gzip").save("hdfs://nn/out/trips")
    spark.read.format("tfrecord").load("hdfs://nn/out/trips")

Reading gives one column per feature, typed by the output's ``_manifest.json``, an explicit
``schema`` option (YAML), or ``.schema(StructType)``; for files with neither (written by
TensorFlow, Beam or spark-tfrecord) the schema is inferred from the first
:data:`INFER_SAMPLE_RECORDS` records.  One partition per file (TFRecord files do not split),
compression from the manifest or the file's extension, both CRCs checked: a corrupt file fails
the job naming its path and byte offset (``option("onCorrupt", "skip")`` keeps the intact
records before it).  SequenceExamples give their context columns and an array (of steps) column
per feature list.

What it writes is the job's output contract (:mod:`tfrecord_io.storage.output`): ``part-NNNNN-of-MMMMM
.tfrecord[.gz|.zlib]`` (one per DataFrame partition), ``_rejects/``, ``_manifest.json`` with the
schema, and ``_SUCCESS`` last, exactly once: each task attempt writes under
``_temporary/<attempt>/`` and returns what it wrote in its commit message; Spark hands the driver
the messages of the successful attempts only, and ``commit`` moves exactly those files into place
(``abort`` deletes ``_temporary``).

Options
    ``schema``: a YAML schema (path or URI; or ``schemaJson``, the schema as JSON); its features
    must match the DataFrame's columns
    (:mod:`tfrecord_io.conversion.columns`; ``allowMissingColumns`` / ``ignoreExtraColumns`` opt out).
    Without it the schema comes from the DataFrame's types (:data:`SPARK_TYPES`, the one table of
    how feature types and Spark types meet): byte/short/int/long and boolean to ``int64``, float
    and double to ``float``, string to ``string``, binary to ``bytes``, arrays of those to ``[-1]``
    lists (arrays of arrays: SequenceExample feature lists).  Any other type (map, struct,
    timestamp, date, decimal) fails before any task starts, naming the column and the cast to use;
    with a schema, a column whose type does not fit its feature fails the same way.
    ``compression``: ``none`` (default), ``gzip``, ``zlib``; spark-tfrecord's ``codec`` with
    Hadoop class names (``org.apache.hadoop.io.compress.GzipCodec``, ``DefaultCodec``) too.
    ``recordType``: ``Example`` (default) or ``SequenceExample``, spark-tfrecord's layout: one row
    per record, an array-of-arrays column is a feature list (one array per step), every other
    column a context feature.  ``maxRejectFraction``: as the job's ``--max-reject-fraction``.
    ``split`` (``"train=8,eval=1,test=1"``) and ``splitBy`` (a feature): TFX ExampleGen's
    assignment, as the job's ``--split`` / ``--split-by`` (:mod:`tfrecord_io.conversion.splits`):
    ``<path>/<split>/`` is a complete output per split, ``_SUCCESS`` at the top after all of them.

Save modes
    Spark runs Python data sources in ``append`` and ``overwrite`` mode only (its default,
    ``errorifexists``, is refused by Spark itself).  ``overwrite`` replaces what a previous
    conversion wrote (and nothing else, as ``--overwrite``); ``append`` writes into an empty or
    new directory and refuses, before any task starts, a directory that already holds output --
    so ``append`` behaves as ``errorifexists``.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition,
                                    WriterCommitMessage)

from tfrecord_io.conversion import columns
from tfrecord_io.conversion.failure import worker_error
from tfrecord_io.conversion.options import COMPRESSIONS, check_fraction, default_num_shards
from tfrecord_io.conversion.splits import Splits
from tfrecord_io.core import codec
from tfrecord_io.core.record_schema import schema_from_records
from tfrecord_io.core.schema import Feature, Schema, SchemaError
from tfrecord_io.storage import fs, output
from tfrecord_io.storage.schema_io import load_schema

__all__ = ["SPARK_TYPES", "TFRecordDataSource", "WriterOptions", "convert_dataframe", "register",
           "schema_from_spark", "spark_struct", "spark_type"]

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


@dataclass(frozen=True)
class SparkType:
    """How one feature type meets Spark's types.

    read_as: the SQL type of the column ``spark.read`` gives the feature's values.
    inferred_from: Spark types whose columns get this feature type when no schema is given.
    written_from: column types a schema's feature of this type accepts (value-preserving casts).
    """

    read_as: str
    inferred_from: tuple[str, ...]
    written_from: tuple[str, ...]


_INTEGERS = ("ByteType", "ShortType", "IntegerType", "LongType")
SPARK_TYPES = {
    "int64": SparkType("bigint", _INTEGERS + ("BooleanType",), _INTEGERS + ("BooleanType",)),
    "float": SparkType("float", ("FloatType", "DoubleType"), ("FloatType", "DoubleType", *_INTEGERS, "DecimalType")),
    "string": SparkType("string", ("StringType", "VarcharType", "CharType"), ("StringType", "VarcharType", "CharType")),
    "bytes": SparkType("binary", ("BinaryType",), ("BinaryType", "StringType")),
}


def _inferred_type(dt) -> str | None:
    """The feature type a Spark column type gives without a schema (None: it has none)."""
    name = type(dt).__name__
    return next((t for t, m in SPARK_TYPES.items() if name in m.inferred_from), None)


def _cannot_hold(name: str, dt, record_type: str) -> TypeError:
    fix = _CASTS.get(type(dt).__name__, "cast it to a number, string or binary column (or an array of one)")
    record = "tf.train.SequenceExample" if record_type == "sequence_example" else "tf.train.Example"
    return TypeError(f"column {name!r} has type {dt.simpleString()}, which a {record} cannot hold: {fix}, or drop it")


def schema_from_spark(struct, record_type: str = "example") -> Schema:
    """The schema a DataFrame's types give (module doc); TypeError naming a column we cannot write.

    For ``sequence_example`` (spark-tfrecord's layout: one row per record) an array of arrays is a
    feature list whose steps are lists, and every other column a context feature."""
    from pyspark.sql import types as T

    features, sequence = [], []
    for f in struct.fields:
        dt = f.dataType
        kind, shape, steps = _inferred_type(dt), None, False
        if kind is None and isinstance(dt, T.ArrayType):
            kind, shape = _inferred_type(dt.elementType), (-1,)
            if kind is None and record_type == "sequence_example" and isinstance(dt.elementType, T.ArrayType):
                kind, steps = _inferred_type(dt.elementType.elementType), True
        if kind is None:
            raise _cannot_hold(f.name, dt, record_type)
        (sequence if steps else features).append(Feature(name=f.name, type=kind, shape=shape))
    if not features and not sequence:
        raise TypeError("the DataFrame has no columns")
    if record_type == "example":
        return Schema(record_type="example", features=tuple(features))
    if not sequence:
        raise TypeError("recordType SequenceExample needs at least one array-of-arrays column (a feature list: "
                        "one array per step); the DataFrame has none")
    return Schema(record_type="sequence_example", context=tuple(features), sequence=tuple(sequence))


def check_column_types(schema: Schema, struct, where: str, schema_name: str = "the schema") -> None:
    """Refuse, before any task, a column whose Spark type its feature does not take
    (:data:`SPARK_TYPES`' ``written_from``), naming the column and what to do."""
    from pyspark.sql import types as T

    types = {f.name: f.dataType for f in struct.fields}
    steps = {f.name for f in schema.sequence}
    for f in schema.input_features:
        dt = types.get(f.name)
        if dt is None:  # allowed missing: null in every row
            continue
        inner, arrays = dt, 0
        while isinstance(inner, T.ArrayType):
            inner, arrays = inner.elementType, arrays + 1
        want_arrays = int(f.is_list) + int(f.name in steps)
        if type(inner).__name__ not in SPARK_TYPES[f.type].written_from or arrays != want_arrays:
            want = f"an array of {f.type}" if f.is_list else f.type
            shape = f" (shape {list(f.shape)})" if f.is_list else ""
            raise SchemaError(f"column {f.name!r} of {where} is {dt.simpleString()}, and feature {f.name!r} is "
                              f"{want}{shape} in {schema_name}: cast the column, or change the feature's type")


@dataclass
class _Written(WriterCommitMessage):
    """What one task attempt wrote (its shard and rejects) and counted."""

    partition: int
    shards: list            # one per split (one without splits)
    rejects: dict | None
    input_rows: int
    records: int
    rejected: int
    present: dict


@dataclass
class _Writer(DataSourceArrowWriter):
    path: str
    schema: Schema
    compression: str
    job_id: str
    max_reject_fraction: float
    splits: Splits | None = None  # option("split", "train=8,eval=1") (+ "splitBy"): TFX's assignment
    faults: object = None  # fault injection (tests): tfrecord_io.testing.faults
    arrow: pa.Schema = field(init=False)

    def __post_init__(self):
        s = self.schema
        self.arrow = pa.schema([pa.field(f.name, f.arrow_type()) for f in s.features + s.context] +
                               [pa.field(f.name, pa.list_(f.arrow_type())) for f in s.sequence])

    # -- executors ---------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId()
        attempt = f"{self.job_id}-p{part:05d}-a{ctx.attemptNumber()}-t{ctx.taskAttemptId()}"
        counts = {"input_rows": 0, "records": 0}
        present: Counter = Counter()
        rejects: list[dict] = []

        example = self.schema.record_type == "example"
        encode = codec.encode_examples if example else codec.encode_sequence_examples

        def records():
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                counts["input_rows"] += batch.num_rows
                typed = self._typed(batch)
                errors = codec.row_errors(typed, self.schema)
                encoded = None
                which = None
                if self.splits is not None:
                    keep = np.array([e is None for e in errors], dtype=bool)
                    encoded = encode(typed.filter(pa.array(keep)), self.schema)
                    assigned, why = self.splits.assign(encoded.to_pylist())
                    for j, i in enumerate(np.flatnonzero(keep)):
                        if assigned[j] is None:
                            errors[i] = why[j]
                    which = np.array([w for w in assigned if w is not None], dtype=np.int64)
                    encoded = encoded.filter(pa.array([w is not None for w in assigned]))
                bad = np.array([e is not None for e in errors], dtype=bool)
                if bad.any():
                    rows = batch.filter(pa.array(bad)).to_pylist()
                    for row, why in zip(rows, (e for e in errors if e is not None)):
                        rejects.append(output_reject(row, why))
                    typed = typed.filter(pa.array(~bad))
                if typed.num_rows:
                    counts["records"] += typed.num_rows
                    if example and self.splits is None:
                        present.update(codec.present_counts(typed, self.schema))
                    if self.splits is None:
                        yield encode(typed, self.schema)
                    else:
                        yield encoded, which

        batches = records()
        if self.faults is not None:
            batches = self.faults.around_write(batches, output=self.path, shard=part, attempt=attempt)
        name = f"part-{part:05d}.tfrecord"
        if self.splits is None:
            shards = [output.write_shard(batches, self.path, attempt, name, self.compression)]
        else:
            shards = output.write_split_shards(batches, self.path, attempt,
                                               [f"{s}/{name}" for s in self.splits.names], self.compression)
        written = output.write_rejects(iter(rejects), self.path, attempt, f"part-{part:05d}.jsonl")
        return _Written(part, [output.written_file_dict(s) for s in shards],
                        output.written_file_dict(written) if written else None,
                        counts["input_rows"], counts["records"], len(rejects),
                        dict(present) if example and self.splits is None else None)

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
        presents = [m.present for m in messages]
        totals = output.ConversionTotals(present=output.sum_present(presents) if None not in presents else None)
        for k, m in enumerate(messages):
            for shard in (output.WrittenFile(**s) for s in m.shards):
                split = shard.final_name.rpartition("/")[0]
                final = output.shard_name(k, n, self.compression)
                files.append(output.WrittenFile(shard.temp_path, f"{split}/{final}" if split else final,
                                                shard.records, shard.bytes))
            if m.rejects:
                rejects.append(output.WrittenFile(**m.rejects))
            totals.input_rows += m.input_rows
            totals.records += m.records
            totals.rejected += m.rejected
        common = dict(schema=self.schema, compression=self.compression, engine="spark-datasource",
                      max_reject_fraction=self.max_reject_fraction)
        if self.splits is None:
            output.commit(self.path, files, rejects, totals, **common)
        else:
            output.commit_splits(self.path, self.splits, files, rejects, totals, **common)

    def abort(self, messages: list) -> None:
        output.abort(self.path)


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

    faults = None  # fault injection in the writer (tests: tfrecord_io.testing.faults.data_source)

    @classmethod
    def name(cls) -> str:
        return "tfrecord"

    def _options(self) -> dict:
        """The options, with case-insensitive names (as Spark treats them)."""
        return {k.lower(): v for k, v in self.options.items()}

    def _source(self):
        """(files with their compression, the schema or None to infer it, the options)."""
        opts = self._options()
        path = opts.get("path")
        if not path:
            raise ValueError("spark.read.format('tfrecord') needs a path: .load(path)")
        files, manifest_schema = _files_of(path.rstrip("/") or "/")
        return files, load_schema(opts["schema"]) if "schema" in opts else manifest_schema, opts

    def _infer(self, files) -> Schema:
        """The schema of files without a manifest, from a bounded sample of their first records
        (read once per data source: ``schema()`` and ``reader()`` both need it)."""
        from tfrecord_io.core.framing import read_records

        cached = getattr(self, "_inferred", None)
        if cached is not None and cached[0] == files:
            return cached[1]

        def records():
            for uri, comp in files:
                with fs.open(uri, "rb") as f:
                    yield from read_records(f, name=uri, compression=comp)

        inferred = schema_from_records(itertools.islice(records(), INFER_SAMPLE_RECORDS))
        self._inferred = (files, inferred)
        return inferred

    def schema(self):
        files, schema, _ = self._source()
        return spark_struct(schema if schema is not None else self._infer(files))

    def reader(self, schema) -> _Reader:
        from pyspark.sql.pandas.types import to_arrow_type

        files, tf_schema, opts = self._source()
        if tf_schema is None:  # the records' own layout (the columns' types are cast to `schema`'s)
            try:
                tf_schema = self._infer(files)
            except ValueError:  # no records to infer from: the user's .schema(StructType)
                tf_schema = schema_from_spark(schema)
        known = {f.name for f in tf_schema.input_features}
        unknown = [f.name for f in schema.fields if f.name not in known]
        if unknown:
            raise ValueError(f"column(s) {unknown} are not features of the records' schema "
                             f"{sorted(known)}")
        on_corrupt = opts.get("oncorrupt", "error").lower()
        if on_corrupt not in ("error", "skip"):
            raise ValueError(f"onCorrupt must be error or skip, got {opts['oncorrupt']!r}")
        cols = [(f.name, to_arrow_type(f.dataType)) for f in schema.fields]
        return _Reader(files, tf_schema, cols, on_corrupt)

    def writer(self, schema, overwrite: bool) -> _Writer:
        w = WriterOptions.parse(self._options())
        if w.schema is not None:
            tf_schema = w.schema
            if w.record_type is not None and tf_schema.record_type != w.record_type:
                raise SchemaError(f"recordType {w.given_record_type} does not match {w.schema_name}, whose "
                                  f"record_type is {tf_schema.record_type}")
            columns.check_columns(tf_schema, {"the DataFrame": [f.name for f in schema.fields]}, input_format="table",
                                  allow_missing=w.allow_missing_columns, ignore_extra=w.ignore_extra_columns,
                                  schema_name=w.schema_name)
            check_column_types(tf_schema, schema, "the DataFrame", w.schema_name)
        else:
            tf_schema = schema_from_spark(schema, w.record_type or "example")
        splits = None
        if w.split:
            if tf_schema.record_type != "example":
                raise ValueError("option split writes Example records; split SequenceExamples by their group key "
                                 "before writing")
            splits = Splits.parse(w.split, w.split_by, tf_schema)
        try:
            output.prepare_output(w.path, overwrite=overwrite)
        except FileExistsError as e:
            if overwrite or not fs.isdir(w.path):
                raise
            raise FileExistsError(f"{w.path} is not empty: Spark's append mode would mix two outputs; write with "
                                  f".mode('overwrite') to replace a previous conversion's output, or choose another "
                                  f"path") from e
        return _Writer(w.path, tf_schema, w.compression, uuid.uuid4().hex[:12], w.max_reject_fraction, splits,
                       type(self).faults)


@dataclass(frozen=True)
class WriterOptions:
    """The writer's options (``df.write.format("tfrecord").option(...)``), checked before any task.

    path: the output directory (``.save(path)``).
    record_type: ``"example"`` / ``"sequence_example"`` from ``recordType`` (``Example``,
        ``SequenceExample``); None when not given (Example, or the schema's).
    compression: ``none``, ``gzip`` or ``zlib``, from ``compression`` or spark-tfrecord's ``codec``
        (Hadoop class names: ``GzipCodec``, ``DefaultCodec``, ``DeflateCodec``).
    schema: the ``schema`` (YAML path or URI) or ``schemaJson`` option, loaded; None: from the types.
    allow_missing_columns / ignore_extra_columns: ``allowMissingColumns`` / ``ignoreExtraColumns``
        (``true`` / ``false``), as the job's ``--allow-missing-columns`` / ``--ignore-extra-columns``.
    max_reject_fraction: ``maxRejectFraction``, from 0 to 1 (default 0.01).
    split / split_by: ``split`` (``train=8,eval=1``) and ``splitBy``, as the job's ``--split``.
    """

    path: str
    record_type: str | None = None
    given_record_type: str | None = None
    compression: str = "none"
    schema: Schema | None = None
    schema_name: str = "the schema"
    allow_missing_columns: bool = False
    ignore_extra_columns: bool = False
    max_reject_fraction: float = output.DEFAULT_MAX_REJECT_FRACTION
    split: str | None = None
    split_by: str | None = None

    @classmethod
    def parse(cls, opts: dict) -> "WriterOptions":
        """From Spark's options (names lower-cased); ValueError naming a bad one."""
        path = (opts.get("path") or "").rstrip("/")
        if not opts.get("path"):
            raise ValueError("df.write.format('tfrecord') needs a path: .save(path)")
        given = opts.get("recordtype")
        record_type = None
        if given is not None:
            record_type = {"example": "example", "sequenceexample": "sequence_example"}.get(given.lower())
            if record_type is None:
                raise ValueError(f"recordType must be Example or SequenceExample, got {given!r}")
        codec_name = opts.get("compression", opts.get("codec", "none")).lower()
        if codec_name not in _CODECS:
            raise ValueError(f"compression/codec {codec_name!r} is not supported; use {', '.join(COMPRESSIONS)} "
                             f"(or Hadoop's GzipCodec / DefaultCodec)")
        schema, schema_name = None, "the schema"
        if "schema" in opts:
            schema, schema_name = load_schema(opts["schema"]), opts["schema"]
        elif "schemajson" in opts:
            schema = Schema.from_dict(json.loads(opts["schemajson"]))
        if opts.get("splitby") and not opts.get("split"):
            raise ValueError("option splitBy needs option split (e.g. 'train=8,eval=1,test=1')")
        return cls(path=path or "/", record_type=record_type, given_record_type=given,
                   compression=_CODECS[codec_name], schema=schema, schema_name=schema_name,
                   allow_missing_columns=_flag(opts, "allowmissingcolumns", "allowMissingColumns"),
                   ignore_extra_columns=_flag(opts, "ignoreextracolumns", "ignoreExtraColumns"),
                   max_reject_fraction=check_fraction(
                       opts.get("maxrejectfraction", output.DEFAULT_MAX_REJECT_FRACTION), "maxRejectFraction"),
                   split=opts.get("split") or None, split_by=opts.get("splitby") or None)


def _flag(opts: dict, key: str, name: str) -> bool:
    value = str(opts.get(key, "false")).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, got {opts[key]!r}")
    return value == "true"


# ---------------------------------------------------------------------------------------------
# Reading: spark.read.format("tfrecord").load(path)
# ---------------------------------------------------------------------------------------------
INFER_SAMPLE_RECORDS = 1000


def spark_type(f: Feature, steps: bool = False) -> str:
    """The Spark SQL type of a feature's column (``steps``: an array of it, a sequence feature)."""
    t = SPARK_TYPES[f.type].read_as
    t = f"array<{t}>" if f.is_list else t
    return f"array<{t}>" if steps else t


def spark_struct(schema: Schema) -> str:
    """The DataFrame schema (DDL) of a TFRecord schema: a column per feature (Examples), or the
    context columns plus an array (of steps) column per sequence feature (SequenceExamples)."""
    def ddl(f: Feature, steps: bool = False) -> str:
        return f"`{f.name.replace('`', '``')}` {spark_type(f, steps)}"

    if schema.record_type == "example":
        return ", ".join(ddl(f) for f in schema.features)
    return ", ".join([ddl(f) for f in schema.context] + [ddl(f, steps=True) for f in schema.sequence])


def _files_of(path: str) -> tuple[list[tuple[str, str]], Schema | None]:
    """[(file, compression)] of a source (:mod:`tfrecord_io.storage.sources`: an output directory
    by its manifest, any other directory, glob or file by listing), and the manifest's schema."""
    from tfrecord_io.storage import sources

    src = sources.resolve_source(path)
    return [(f.uri, f.compression) for f in src.files], src.manifest.schema if src.manifest else None


@dataclass(frozen=True)
class _File(InputPartition):
    uri: str
    compression: str


@dataclass
class _Reader(DataSourceReader):
    files: list
    schema: Schema
    columns: list  # the requested DataFrame columns, in order
    on_corrupt: str = "error"
    batch_records: int = 8192

    def partitions(self):
        return [_File(uri, comp) for uri, comp in self.files]  # one per file: TFRecords do not split

    def read(self, partition: _File) -> Iterator[pa.RecordBatch]:
        from tfrecord_io.core.framing import CorruptRecordError, read_records

        pending: list[bytes] = []
        try:
            with fs.open(partition.uri, "rb") as f:
                for data in read_records(f, name=partition.uri, compression=partition.compression, verify=True):
                    pending.append(data)
                    if len(pending) >= self.batch_records:
                        yield self._batch(pending)
                        pending = []
        except CorruptRecordError:
            if self.on_corrupt != "skip":
                raise
            import sys

            print(f"tfrecord-io: onCorrupt=skip: {partition.uri}: dropped the rest of the file after "
                  f"the intact records", file=sys.stderr)
        if pending:
            yield self._batch(pending)

    def _batch(self, records: list[bytes]) -> pa.RecordBatch:
        if self.schema.record_type == "example" and _tensorflow() is not None:
            return self._batch_tf(records)
        from tfrecord_io.core.decode import decode_record

        s = self.schema
        decoded = [decode_record(r) for r in records]
        arrays = []
        for name, typ in self.columns:
            f = s.feature(name)
            in_sequence = s.record_type == "sequence_example" and f in s.sequence
            values = []
            for rec in decoded:
                if in_sequence:
                    steps = (rec.feature_lists or {}).get(name)
                    values.append(None if steps is None else [_value(f, v) for _, v in steps])
                else:
                    feat = rec.features.get(name)
                    values.append(None if feat is None else _value(f, feat[1]))
            arrays.append(pa.array(values, type=typ))
        return pa.RecordBatch.from_arrays(arrays, names=[n for n, _ in self.columns])


    def _batch_tf(self, records: list[bytes]) -> pa.RecordBatch:
        """Examples decoded by TensorFlow's vectorized parser (when the executor has TensorFlow):
        every feature as a ragged list, so that a missing one is null, not an error."""
        from tfrecord_io.engines.tfdata import tf_dtype

        tf = _tensorflow()
        spec = {name: tf.io.RaggedFeature(tf_dtype(self.schema.feature(name)), row_splits_dtype=tf.int64)
                for name, _ in self.columns}
        parsed = tf.io.parse_example(tf.constant(records), spec)
        arrays = []
        for name, typ in self.columns:
            f = self.schema.feature(name)
            ragged = parsed[name]
            values = ragged.flat_values.numpy()
            splits = ragged.row_splits.numpy()
            if f.type in ("string", "bytes"):
                values = pa.array(values.tolist(), pa.binary())
                if f.type == "string":
                    values = values.cast(pa.string())
            else:
                values = pa.array(values)
            if f.is_list:
                arr = pa.ListArray.from_arrays(pa.array(splits.astype(np.int32)), values)
                arrays.append(arr.cast(typ))
                continue
            present = np.diff(splits) == 1
            if not len(values):
                arrays.append(pa.nulls(len(present), typ))
                continue
            taken = values.take(pa.array(np.where(present, splits[:-1], 0)))
            arrays.append(pc.if_else(pa.array(present), taken, pa.scalar(None, taken.type)).cast(typ))
        return pa.RecordBatch.from_arrays(arrays, names=[n for n, _ in self.columns])


def _tensorflow():
    """TensorFlow, when this Python has it (its parser is ~50x ours); None otherwise."""
    try:
        import tensorflow as tf
    except ImportError:
        return None
    return tf


def _value(f: Feature, values: list):
    if f.type == "string":
        values = [v.decode("utf-8", "replace") for v in values]
    if f.is_list:
        return list(values)
    return values[0] if len(values) == 1 else None


class JobDataSource(TFRecordDataSource):
    """The same source under a name of its own, for the Spark job's ``--format parquet|orc|table``
    (a session may also have spark-tfrecord's ``tfrecord`` format loaded)."""

    @classmethod
    def name(cls) -> str:
        return "tfrecord_io_job"


# ---------------------------------------------------------------------------------------------
# The Spark job's --format parquet|orc|table: a DataFrame through this data source
# ---------------------------------------------------------------------------------------------
def convert_dataframe(spark, plan, *, faults=None, started: float | None = None) -> dict:
    """The Spark job for ``--format parquet|orc|table`` (a :class:`~tfrecord_io.conversion.plan.Plan`):
    Spark reads the input; its columns are matched to the features by name and their types checked
    (:func:`check_column_types`) on the driver before any task; the rows are written by this data
    source, under the job's name for it (:class:`JobDataSource`): the same contract, rejects and
    commit.  Returns the committed manifest."""
    import time

    from pyspark.sql import functions as F

    started = time.monotonic() if started is None else started
    options, schema, out = plan.options, plan.schema, plan.output
    fmt = options.input_format
    try:
        df = spark.table(options.inputs[0]) if fmt == "table" else spark.read.format(fmt).load(list(options.inputs))
    except Exception as e:  # AnalysisException: no such path or table
        raise FileNotFoundError(f"cannot read {fmt} input {','.join(options.inputs)}: {worker_error(e)}") from e
    where = f"the {fmt} input"
    columns.check_columns(schema, {where: df.columns}, input_format="table",
                          allow_missing=options.allow_missing_columns, ignore_extra=options.ignore_extra_columns,
                          schema_name=options.schema_name)
    check_column_types(schema, df.schema, where, options.schema_name)
    present = set(df.columns)
    selected = df.select(*[F.col(_quoted(f.name)) if f.name in present else
                           F.lit(None).cast(spark_type(f)).alias(f.name) for f in schema.features])
    files = df.inputFiles()
    input_bytes = sum(fs.size(u) for u in files) if files else 0
    plan.prepare_output(input_paths=files)
    if options.shards == "input":  # a shard per partition of Spark's read: no shuffle
        num_shards = selected.rdd.getNumPartitions()
    else:
        num_shards = options.num_shards or default_num_shards(input_bytes, options.bytes_per_shard)
        selected = selected.repartition(num_shards)
    source = JobDataSource if faults is None else type("FaultyJobDataSource", (JobDataSource,), {"faults": faults})
    spark.dataSource.register(source)
    writer = (selected.write.format(JobDataSource.name())
              .mode("append").option("schemaJson", json.dumps(schema.to_dict()))
              .option("compression", options.compression)
              .option("maxRejectFraction", str(options.max_reject_fraction)))
    if plan.splits is not None:
        writer = writer.option("split", options.split)
        if options.split_by:
            writer = writer.option("splitBy", options.split_by)
    writer.save(out)
    manifest = dict(output.read_manifest(out))
    manifest["job"] = {"num_shards": num_shards, "input_bytes": input_bytes,
                       "seconds": round(time.monotonic() - started, 3)}
    return manifest


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
