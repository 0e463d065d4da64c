"""The ``tfrecord`` format for Spark 4 DataFrames: a Python data source on our encoder and output contract.

    import tfrecord_io.engines.spark_datasource as tfds
    tfds.register(spark)
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
    Without it the schema comes from the DataFrame's types: byte/short/int/long and boolean to
    ``int64``, float and double to ``float``, string to ``string``, binary to ``bytes``, arrays of
    those to ``[-1]`` lists (arrays of arrays: SequenceExample feature lists).  Any other type
    (map, struct, timestamp, date, decimal) fails before any task starts, naming the column and
    the cast to use.
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

from tfrecord_io.core import codec
from tfrecord_io.conversion.splits import Splits

from tfrecord_io.conversion import columns

from tfrecord_io.storage import fs, output
from tfrecord_io.core.schema import Feature, Schema, SchemaError

__all__ = ["TFRecordDataSource", "register", "schema_from_records", "schema_from_spark", "spark_struct",
           "spark_type"]

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


def schema_from_spark(struct, record_type: str = "example") -> Schema:
    """The schema a DataFrame's types give (module doc); TypeError naming a column we cannot write.

    For ``sequence_example`` (spark-tfrecord's layout: one row per record) an array of arrays is a
    feature list whose steps are lists, and every other column a context feature."""
    from pyspark.sql import types as T

    features, sequence = [], []
    for f in struct.fields:
        dt = f.dataType
        kind, shape, steps = _scalar_type(dt), None, False
        if kind is None and isinstance(dt, T.ArrayType):
            kind, shape = _scalar_type(dt.elementType), (-1,)
            if kind is None and record_type == "sequence_example" and isinstance(dt.elementType, T.ArrayType):
                kind, steps = _scalar_type(dt.elementType.elementType), True
        if kind is None:
            what = type(dt).__name__
            fix = _CASTS.get(what, "cast it to a number, string or binary column (or an array of one)")
            record = "tf.train.SequenceExample" if record_type == "sequence_example" else "tf.train.Example"
            raise TypeError(f"column {f.name!r} has type {dt.simpleString()}, which a {record} cannot hold: "
                            f"{fix}, or drop it")
        (sequence if steps else features).append(Feature(name=f.name, type=kind, shape=shape))
    if not features and not sequence:
        raise TypeError("the DataFrame has no columns")
    if record_type == "example":
        return Schema(record_type="example", features=tuple(features))
    if not sequence:
        raise TypeError("recordType SequenceExample needs at least one array-of-arrays column (a feature list: "
                        "one array per step); the DataFrame has none")
    return Schema(record_type="sequence_example", context=tuple(features), sequence=tuple(sequence))


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
    fail_first_attempt: str = ""  # fault injection (tests): as the job's TFRECORD_IO_FAIL_FIRST_ATTEMPT
    stall_first_attempt: str = ""  # and TFRECORD_IO_STALL_FIRST_ATTEMPT (a straggler, for speculation)
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

        from tfrecord_io.engines.spark import _after_first_batch, _die, _first_attempt_of, _stall

        batches = records()
        if _first_attempt_of(self.fail_first_attempt, part, ctx.attemptNumber()):
            batches = _after_first_batch(batches, lambda: _die(attempt))
        elif _first_attempt_of(self.stall_first_attempt, part, ctx.attemptNumber()):
            temporary = fs.join(self.path, output.TEMPORARY)
            batches = _after_first_batch(batches, lambda: _stall(attempt, temporary))
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
        return files, Schema.load(opts["schema"]) if "schema" in opts else manifest_schema, opts

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
        opts = self._options()
        path = opts.get("path")
        if not path:
            raise ValueError("df.write.format('tfrecord') needs a path: .save(path)")
        path = path.rstrip("/") or "/"
        record_type = {"example": "example", "sequenceexample": "sequence_example"}.get(
            opts.get("recordtype", "Example").lower())
        if record_type is None:
            raise ValueError(f"recordType must be Example or SequenceExample, got {opts['recordtype']!r}")
        codec_name = opts.get("compression", opts.get("codec", "none")).lower()
        if codec_name not in _CODECS:
            raise ValueError(f"compression/codec {codec_name!r} is not supported; use none, gzip or zlib "
                             f"(or Hadoop's GzipCodec / DefaultCodec)")
        if "schema" in opts or "schemajson" in opts:
            tf_schema = Schema.load(opts["schema"]) if "schema" in opts else \
                Schema.from_dict(json.loads(opts["schemajson"]))
            opts.setdefault("schema", "the schema")
            if "recordtype" in opts and tf_schema.record_type != record_type:
                raise SchemaError(f"recordType {opts['recordtype']} does not match {opts['schema']}, whose "
                                  f"record_type is {tf_schema.record_type}")
            columns.check_columns(tf_schema, {"the DataFrame": [f.name for f in schema.fields]}, input_format="table",
                                  allow_missing=_true(opts.get("allowmissingcolumns")),
                                  ignore_extra=_true(opts.get("ignoreextracolumns")), schema_name=opts["schema"])
        else:
            tf_schema = schema_from_spark(schema, record_type)
        splits = None
        if opts.get("split"):
            if tf_schema.record_type != "example":
                raise ValueError("option split writes Example records; split SequenceExamples by their group key "
                                 "before writing")
            splits = Splits.parse(opts["split"], opts.get("splitby"), tf_schema)
        elif opts.get("splitby"):
            raise ValueError("option splitBy needs option split (e.g. 'train=8,eval=1,test=1')")
        if not overwrite and fs.exists(path) and fs.isdir(path) and fs.ls(path):
            raise FileExistsError(f"{path} is not empty: Spark's append mode would mix two outputs; write with "
                                  f".mode('overwrite') to replace a previous conversion's output, or choose another path")
        output.prepare_output(path, overwrite=overwrite)
        fs.makedirs(fs.join(path, output.TEMPORARY))
        import os

        from tfrecord_io.engines.spark import FAIL_FIRST_ATTEMPT_ENV, STALL_FIRST_ATTEMPT_ENV

        fraction = float(opts.get("maxrejectfraction", output.DEFAULT_MAX_REJECT_FRACTION))
        # Fault injection (tests): the job's switches, from the environment or as options.
        return _Writer(path, tf_schema, _CODECS[codec_name], uuid.uuid4().hex[:12], fraction, splits,
                       opts.get("failfirstattempt", os.environ.get(FAIL_FIRST_ATTEMPT_ENV, "")),
                       opts.get("stallfirstattempt", os.environ.get(STALL_FIRST_ATTEMPT_ENV, "")))


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


# ---------------------------------------------------------------------------------------------
# Reading: spark.read.format("tfrecord").load(path)
# ---------------------------------------------------------------------------------------------
INFER_SAMPLE_RECORDS = 1000
_SPARK_TYPES = {"int64": "bigint", "float": "float", "string": "string", "bytes": "binary"}


def spark_type(f: Feature, steps: bool = False) -> str:
    """The Spark SQL type of a feature's column (``steps``: an array of it, a sequence feature)."""
    t = _SPARK_TYPES[f.type]
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


def schema_from_records(records) -> Schema:
    """A schema inferred from decoded records (as spark-tfrecord infers): int64_list -> int64,
    float_list -> float, bytes_list -> string (bytes when not UTF-8); a list when any record holds
    more or fewer than one value; feature lists make a SequenceExample."""
    from tfrecord_io.core.decode import decode_record

    kinds: dict[str, str] = {}
    listy: dict[str, bool] = {}
    binary: set[str] = set()
    seq_kinds: dict[str, str] = {}
    seq_listy: dict[str, bool] = {}
    for data in records:
        rec = decode_record(data)
        for name, (kind, values) in rec.features.items():
            if kind is not None:
                kinds.setdefault(name, kind)
            listy[name] = listy.get(name, False) or len(values) != 1
            if kind == "bytes_list" and any(not _utf8(v) for v in values):
                binary.add(name)
        for name, steps in (rec.feature_lists or {}).items():
            for kind, values in steps:
                if kind is not None:
                    seq_kinds.setdefault(name, kind)
                seq_listy[name] = seq_listy.get(name, False) or len(values) != 1
    if not kinds and not seq_kinds:
        raise ValueError("no records to infer a schema from: pass option('schema', ...) or .schema(...)")

    def feature(name, kind, is_list) -> Feature:
        t = {"int64_list": "int64", "float_list": "float"}.get(kind, "bytes" if name in binary else "string")
        return Feature(name=name, type=t, shape=(-1,) if is_list else None)

    if not seq_kinds:
        return Schema(features=tuple(feature(n, k, listy[n]) for n, k in sorted(kinds.items())))
    context = tuple(feature(n, k, listy[n]) for n, k in sorted(kinds.items()))
    sequence = tuple(feature(n, k, seq_listy[n]) for n, k in sorted(seq_kinds.items()))
    key = context[0].name if context else None
    if key is None:
        raise ValueError("SequenceExamples without context features: pass option('schema', ...)")
    return Schema(record_type="sequence_example", context=context, sequence=sequence, group_by=key)


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


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
        tf = _tensorflow()
        spec = {name: tf.io.RaggedFeature(self.schema.feature(name).tf_dtype(), row_splits_dtype=tf.int64)
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
