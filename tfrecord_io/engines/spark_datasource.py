"""The ``tfrecord`` format for Spark 4 DataFrames: a Python data source on our encoder and output contract.

    import tfrecord_io.spark
    tfrecord_io.spark.register(spark)
    df.write.format("tfrecord").mode("overwrite").option("compression", "gzip").save("hdfs://nn/out/trips")
    spark.read.format("tfrecord").load("hdfs://nn/out/trips")

Reading gives one column per feature, typed by the output's ``_manifest.json``, an explicit
``schema`` option (YAML), or ``.schema(StructType)``; for files with neither (written by
TensorFlow, Beam, TFX or spark-tfrecord) the schema is inferred on the driver before any task
(:func:`tfrecord_io.core.record_schema.infer_schema`: the first records of every file, and on
while a feature has no value kind yet; a conflict of kinds fails naming both records).  One partition per file (TFRecord files do not split),
compression from the manifest or the file's extension, both CRCs checked: a corrupt file fails
the job naming its path and byte offset (``option("onCorrupt", "skip")`` keeps the intact
records before it).  SequenceExamples give their context columns and an array (of steps) column
per feature list.  Records are decoded by the vectorized decoder (:mod:`tfrecord_io.core.arrow_decode`),
with or without TensorFlow on the executors: a feature a record lacks is null (a list too), a
scalar holding another number of values than one is null; a record that is not an Example, or
whose feature has another kind than the schema's, or a ``string`` that is not UTF-8, fails the
task naming the file, the record and its byte offset.

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
    Without it the schema comes from the DataFrame's types, by the one table of how Spark's types
    become features (:mod:`tfrecord_io.engines.spark_columns`): integers and booleans to
    ``int64``, float, double and decimal to ``float``, dates (days) and timestamps (microseconds
    since the epoch) to ``int64``, strings, binary, arrays of those to ``[-1]`` lists, struct
    fields to dotted features (``s.a``), MLlib vectors to ``float`` lists, arrays of arrays to
    SequenceExample feature lists; a map, an array of structs or a null column fails before any
    task starts, naming the column and the cast to use; with a schema, a column whose type does
    not fit its feature fails the same way.  ``decimalAs`` (``float``, ``string``) and
    ``timestampUnit`` (``microseconds``, ``milliseconds``, ``seconds``) choose those conversions.
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

import re
import json
import uuid
import warnings
from collections import Counter
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition,
                                    WriterCommitMessage)

from tfrecord_io.conversion import columns
from tfrecord_io.conversion.failure import TaskFailed, cause_line, worker_error
from tfrecord_io.conversion.options import COMPRESSIONS, check_fraction, default_num_shards
from tfrecord_io.conversion.splits import Splits
from tfrecord_io.core import codec
from tfrecord_io.core.framing import DEFAULT_COMPRESSION_LEVEL, check_compression_level
from tfrecord_io.core.schema import Feature, Schema, SchemaError
from tfrecord_io.engines.reader_options import check_feature_names
from tfrecord_io.engines.spark_columns import (SPARK_TYPES, ColumnSource, WriteTypes, check_column_types,
                                               column_plan, gathered_reasons, leaf_columns, schema_from_spark)
from tfrecord_io.storage import fs, lease, output
from tfrecord_io.storage.permissions import Permissions, parse_umask
from tfrecord_io.storage.partitions import (check_partition_columns, parse_partition_path, partition_codes, prune,
                                            unusable_values)
from tfrecord_io.storage.schema_io import load_schema
from tfrecord_io.storage.sources import infer_files_schema

__all__ = ["SPARK_TYPES", "TFRecordDataSource", "WriterOptions", "convert_dataframe", "register",
           "schema_from_spark", "spark_struct", "spark_type"]

_CODECS = {"none": "none", "uncompressed": "none", "gzip": "gzip", "zlib": "zlib",
           "org.apache.hadoop.io.compress.gzipcodec": "gzip", "org.apache.hadoop.io.compress.defaultcodec": "zlib",
           "org.apache.hadoop.io.compress.deflatecodec": "zlib"}
#: Spark's switch for Python data sources' filter pushdown (Spark 4.1+, off by default): while it is
#: off, a source that takes filters fails at planning (DATA_SOURCE_PUSHDOWN_DISABLED).
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark) -> None:
    """Register the ``tfrecord`` format with ``spark`` (once per session), with Python data sources'
    filter pushdown on (Spark 4.1+): a ``where()`` on a partition column then opens only the files of
    the partitions that can match (the filter is still applied by Spark after the scan)."""
    spark.dataSource.register(AliasDataSource)
    try:
        spark.dataSource.register(TFRecordDataSource)
    except Exception as e:  # noqa: BLE001 - Spark's AnalysisException, named by its error class
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(e):
            raise
        warnings.warn(f"a data source named 'tfrecord' is already loaded in this session (spark-tfrecord's jar on "
                      f"the classpath?): format('tfrecord') is that one; tfrecord-io's is "
                      f"format('{AliasDataSource.name()}')", stacklevel=2)
    if tuple(int(p) for p in re.findall(r"\d+", spark.version)[:2]) >= (4, 1):
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")


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
    columns: tuple[ColumnSource, ...] = ()  # where each feature's values are (spark_columns.column_plan)
    level: int = 6  # zlib's level for gzip / zlib (option compressionLevel)
    partition_by: tuple[dict, ...] = ()  # option("partitionBy"): [{"name", "type"}] (storage.partitions)
    permissions: Permissions = Permissions()  # option("umask"): the modes of what is committed
    arrow: pa.Schema = field(init=False)

    def __post_init__(self):
        s = self.schema
        self.arrow = pa.schema([pa.field(f.name, f.arrow_type()) for f in s.features + s.context] +
                               [pa.field(f.name, pa.list_(f.arrow_type())) for f in s.sequence])

    # -- executors ---------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        try:
            return self._write(iterator)
        except TaskFailed:
            raise
        except Exception as e:  # noqa: BLE001 - a failed task says it in one line (conversion.failure)
            raise TaskFailed(cause_line(e)) from e

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
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
                for i, why in gathered_reasons(batch, self.columns).items():  # a null cell, naming its column
                    errors[i] = why
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
                if self.partition_by:  # a value no directory can be named after: a reject
                    names = [p["name"] for p in self.partition_by]
                    for i, why in unusable_values([batch.column(n) for n in names], names).items():
                        errors[i] = errors[i] or why
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
                    if self.partition_by:
                        kept = batch.filter(pa.array(~bad)) if bad.any() else batch
                        names = [p["name"] for p in self.partition_by]
                        codes, dirs, _ = partition_codes([kept.column(n) for n in names], names)
                        yield encode(typed, self.schema), codes, dirs
                    elif self.splits is None:  # a TFRecord file as it is: encoded straight into framed records
                        yield codec.encode_framed(typed, self.schema)
                    else:
                        yield encoded, which

        batches = records()
        if self.faults is not None:
            batches = self.faults.around_write(batches, output=self.path, shard=part, attempt=attempt)
        name = f"part-{part:05d}.tfrecord"
        if self.partition_by:
            shards = output.write_partition_shards(batches, self.path, attempt, f"{part:05d}", self.compression,
                                                   self.level)
        elif self.splits is None:
            shards = [output.write_shard(batches, self.path, attempt, name, self.compression, self.level)]
        else:
            shards = output.write_split_shards(batches, self.path, attempt,
                                               [f"{s}/{name}" for s in self.splits.names], self.compression,
                                               self.level)
        written = output.write_rejects(iter(rejects), self.path, attempt, f"part-{part:05d}.jsonl")
        return _Written(part, [output.written_file_dict(s) for s in shards],
                        output.written_file_dict(written) if written else None,
                        counts["input_rows"], counts["records"], len(rejects),
                        dict(present) if example and self.splits is None else None)

    def _typed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        sources = {c.feature: c for c in self.columns}
        cols = [sources.get(f.name, ColumnSource(f.name, (f.name,))).extract(batch, f.type) for f in self.arrow]
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
                if self.partition_by:  # named in each partition at the commit
                    files.append(shard)
                    continue
                split = shard.final_name.rpartition("/")[0]
                final = output.shard_name(k, n, self.compression)
                files.append(dataclasses.replace(shard, final_name=f"{split}/{final}" if split else final))
            if m.rejects:
                rejects.append(output.WrittenFile(**m.rejects))
            totals.input_rows += m.input_rows
            totals.records += m.records
            totals.rejected += m.rejected
        common = dict(schema=self.schema, compression=self.compression, engine="spark-datasource",
                      max_reject_fraction=self.max_reject_fraction, permissions=self.permissions)
        output.commit_output(self.path, files, rejects, totals, splits=self.splits,
                             partition_by=list(self.partition_by), **common)

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
    decided = None  # convert_dataframe's _Decided writer (its class of this source carries it)

    @classmethod
    def name(cls) -> str:
        return "tfrecord"

    def _options(self) -> dict:
        """The options, with case-insensitive names (as Spark treats them)."""
        return {k.lower(): v for k, v in self.options.items()}

    def _source(self):
        """(the source's files, the schema or None to infer it, the options)."""
        opts = self._options()
        path = opts.get("path")
        if not path:
            raise ValueError("spark.read.format('tfrecord') needs a path: .load(path)")
        files, manifest_schema, self._partition_values = _files_of(path.rstrip("/") or "/")
        return files, load_schema(opts["schema"]) if "schema" in opts else manifest_schema, opts

    def _path_columns(self, tf_schema: Schema) -> list[tuple[str, str]]:
        """Partition columns found in the files' paths (``cut=Ideal/...``, as Spark's file sources
        discover them) that are not features of the records: ``[(name, "bigint" | "string")]``;
        a column is bigint when every value is an integer (or null), as Spark infers it."""
        features = {f.name for f in tf_schema.input_features}
        values: dict[str, list] = {}
        for per_file in self._partition_values.values():
            for name, value in per_file.items():
                if name not in features:
                    values.setdefault(name, []).append(value)
        return [(name, "bigint" if all(v is None or re.fullmatch(r"-?\d{1,18}", v) for v in vs) else "string")
                for name, vs in values.items()]

    def _infer(self, files) -> Schema:
        """The schema of files without a manifest (:func:`tfrecord_io.storage.sources.infer_files_schema`:
        the first records of every file, and on while a feature has no kind), inferred once per data
        source (``schema()`` and ``reader()`` both need it), here on the driver, before any task."""
        cached = getattr(self, "_inferred", None)
        if cached is not None and cached[0] == files:
            return cached[1]
        inferred = infer_files_schema([(f.uri, f.compression) for f in files])
        self._inferred = (files, inferred)
        return inferred

    def _only(self, schema: Schema, opts: dict) -> Schema:
        """``option("features", "a,b")``: the columns read, in that order; the others are never
        decoded (Spark gives Python data sources no column pruning of its own)."""
        if "features" not in opts:
            return schema
        names = [n.strip() for n in str(opts["features"]).split(",") if n.strip()]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"option features must name distinct features, comma-separated, got {opts['features']!r}")
        check_feature_names(schema, names)
        if schema.record_type != "example":
            raise ValueError("option features selects the features of Example records; select the columns of "
                             "SequenceExamples with .select(...)")
        by_name = {f.name: f for f in schema.features}
        keep_label = schema.label in names
        return dataclasses.replace(schema, features=tuple(by_name[n] for n in names), ignore_columns=(),
                                   label=schema.label if keep_label else None,
                                   task=schema.task if keep_label else None,
                                   classes=schema.classes if keep_label else None)

    def schema(self):
        files, schema, opts = self._source()
        schema = self._only(schema if schema is not None else self._infer(files), opts)
        extra = ", ".join(f"`{n.replace('`', '``')}` {t}" for n, t in self._path_columns(schema))
        return spark_struct(schema) + (", " + extra if extra else "")

    def reader(self, schema) -> _Reader:
        from pyspark.sql.pandas.types import to_arrow_type

        files, tf_schema, opts = self._source()
        if tf_schema is None:  # the records' own layout (the columns' types are cast to `schema`'s)
            try:
                tf_schema = self._infer(files)
            except ValueError:  # no records to infer from: the user's .schema(StructType)
                tf_schema = schema_from_spark(schema)
        tf_schema = self._only(tf_schema, opts)
        path_columns = dict(self._path_columns(tf_schema))
        known = {f.name for f in tf_schema.input_features} | set(path_columns)
        unknown = [f.name for f in schema.fields if f.name not in known]
        if unknown:
            raise ValueError(f"column(s) {unknown} are not features of the records' schema "
                             f"{sorted(known)}")
        on_corrupt = opts.get("oncorrupt", "error").lower()
        if on_corrupt not in ("error", "skip"):
            raise ValueError(f"onCorrupt must be error or skip, got {opts['oncorrupt']!r}")
        cols = [(f.name, to_arrow_type(f.dataType)) for f in schema.fields]
        from_paths = {name: {uri: v.get(name) for uri, v in self._partition_values.items()}
                      for name in path_columns if name in {f.name for f in schema.fields}}
        return _Reader(files, tf_schema, cols, on_corrupt, path_values=from_paths,
                       file_partitions=dict(self._partition_values))

    def writer(self, schema, overwrite: bool) -> _Writer:
        decided = type(self).decided
        if decided is not None:  # convert_dataframe's: its plan decided everything, once
            return _Writer(decided.path, decided.schema, decided.compression, uuid.uuid4().hex[:12],
                           decided.max_reject_fraction, decided.splits, type(self).faults,
                           column_plan(schema, decided.schema, WriteTypes()), decided.level,
                           _partition_columns(decided.partition_by, schema), decided.permissions)
        w = WriterOptions.parse(self._options())
        partition_by = ()
        if w.partition_by:
            partition_by = _partition_columns(w.partition_by, schema)
            if w.split:
                raise ValueError("options partitionBy and split cannot be combined: partition, then split each "
                                 "partition's rows (or split by a feature)")
            if (w.record_type or (w.schema.record_type if w.schema else "example")) != "example":
                raise ValueError("option partitionBy writes Example records; partition SequenceExamples by "
                                 "their group key before writing, one output per partition")
        if w.schema is not None:
            tf_schema = w.schema
            if w.record_type is not None and tf_schema.record_type != w.record_type:
                raise SchemaError(f"recordType {w.given_record_type} does not match {w.schema_name}, whose "
                                  f"record_type is {tf_schema.record_type}")
            features = {f.name for f in tf_schema.input_features}
            in_frame = [name for name, _, _ in leaf_columns(schema) if name in features or name not in w.partition_by]
            tf_schema = columns.resolve_patterns(tf_schema, {"the DataFrame": in_frame}, input_format="table",
                                                 schema_name=w.schema_name)
            columns.check_columns(tf_schema, {"the DataFrame": in_frame},
                                  input_format="table",
                                  allow_missing=w.allow_missing_columns, ignore_extra=w.ignore_extra_columns,
                                  schema_name=w.schema_name)
            check_column_types(tf_schema, schema, "the DataFrame", w.schema_name)
        else:
            tf_schema = schema_from_spark(schema, w.record_type or "example", w.types)
        splits = None
        if w.split:
            if tf_schema.record_type != "example":
                raise ValueError("option split writes Example records; split SequenceExamples by their group key "
                                 "before writing")
            splits = Splits.parse(w.split, w.split_by, tf_schema)
        try:
            # (the writer runs in a short-lived Python worker, which holds the output's lease while it lives)
            output.prepare_output(w.path, overwrite=overwrite, permissions=Permissions(w.umask))
        except FileExistsError as e:
            if overwrite or not fs.isdir(w.path):
                raise
            raise FileExistsError(f"{w.path} is not empty: Spark's append mode would mix two outputs; write with "
                                  f".mode('overwrite') to replace a previous conversion's output, or choose another "
                                  f"path") from e
        return _Writer(w.path, tf_schema, w.compression, uuid.uuid4().hex[:12], w.max_reject_fraction, splits,
                       type(self).faults, column_plan(schema, tf_schema, w.types), w.level, partition_by,
                       Permissions(w.umask))


def _partition_columns(names: Sequence[str], schema) -> tuple[dict, ...]:
    """The partition columns of a DataFrame (its Spark ``schema``), checked, as the writer records them."""
    if not names:
        return ()
    from pyspark.sql.pandas.types import to_arrow_type

    types = {f.name: to_arrow_type(f.dataType) for f in schema.fields}
    check_partition_columns(names, types, "the DataFrame")
    return tuple({"name": c, "type": str(types[c])} for c in names)


@dataclass(frozen=True)
class _Decided:
    """The writer of a conversion's checked :class:`~tfrecord_io.conversion.plan.Plan`
    (:func:`convert_dataframe`): what its options decided, handed to the data source as they are --
    not turned back into option strings for :class:`WriterOptions` to parse and check again.  The
    plan prepared the output; the schema's columns were matched and checked against the DataFrame."""

    path: str
    schema: Schema
    compression: str
    level: int
    max_reject_fraction: float
    splits: Splits | None
    partition_by: tuple[str, ...]
    permissions: Permissions

    @classmethod
    def of(cls, plan, schema: Schema) -> "_Decided":
        o = plan.options
        return cls(plan.output, schema, o.compression, o.level, o.max_reject_fraction, plan.splits,
                   tuple(o.partition_by), plan.permissions)


@dataclass(frozen=True)
class WriterOptions:
    """The writer's options (``df.write.format("tfrecord").option(...)``), checked before any task.

    path: the output directory (``.save(path)``).
    record_type: ``"example"`` / ``"sequence_example"`` from ``recordType`` (``Example``,
        ``SequenceExample``); None when not given (Example, or the schema's).
    compression: ``none``, ``gzip`` or ``zlib``, from ``compression`` or spark-tfrecord's ``codec``
        (Hadoop class names: ``GzipCodec``, ``DefaultCodec``, ``DeflateCodec``).
    level: ``compressionLevel``, zlib's level from 1 (fastest) to 9 (smallest); default 6.
    schema: the ``schema`` (YAML path or URI) or ``schemaJson`` option, loaded; None: from the types.
    allow_missing_columns / ignore_extra_columns: ``allowMissingColumns`` / ``ignoreExtraColumns``
        (``true`` / ``false``), as the job's ``--allow-missing-columns`` / ``--ignore-extra-columns``.
    max_reject_fraction: ``maxRejectFraction``, from 0 to 1 (default 0.01).
    split / split_by: ``split`` (``train=8,eval=1``) and ``splitBy``, as the job's ``--split``.
    partition_by: ``partitionBy`` (``cut`` or ``date,country``): Hive-style directories per value,
        as the job's ``--partition-by`` (:mod:`tfrecord_io.storage.partitions`).
    types: ``decimalAs`` (``float``, ``string``) and ``timestampUnit`` (``microseconds``,
        ``milliseconds``, ``seconds``): :class:`~tfrecord_io.engines.spark_columns.WriteTypes`.
    umask: ``umask`` (octal, ``027``), as the job's ``--umask``; None: the process's (local) or
        Hadoop's ``022`` (HDFS).
    """

    path: str
    record_type: str | None = None
    given_record_type: str | None = None
    compression: str = "none"
    level: int = 6
    schema: Schema | None = None
    schema_name: str = "the schema"
    allow_missing_columns: bool = False
    ignore_extra_columns: bool = False
    max_reject_fraction: float = output.DEFAULT_MAX_REJECT_FRACTION
    split: str | None = None
    split_by: str | None = None
    partition_by: tuple[str, ...] = ()
    types: WriteTypes = WriteTypes()
    umask: int | None = None

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
        level = DEFAULT_COMPRESSION_LEVEL
        if "compressionlevel" in opts:
            if _CODECS[codec_name] == "none":
                raise ValueError("option compressionLevel needs option compression gzip or zlib")
            level = check_compression_level(opts["compressionlevel"], "option compressionLevel")
        if opts.get("splitby") and not opts.get("split"):
            raise ValueError("option splitBy needs option split (e.g. 'train=8,eval=1,test=1')")
        return cls(path=path or "/", record_type=record_type, given_record_type=given,
                   compression=_CODECS[codec_name], level=level, schema=schema, schema_name=schema_name,
                   allow_missing_columns=_flag(opts, "allowmissingcolumns", "allowMissingColumns"),
                   ignore_extra_columns=_flag(opts, "ignoreextracolumns", "ignoreExtraColumns"),
                   max_reject_fraction=check_fraction(
                       opts.get("maxrejectfraction", output.DEFAULT_MAX_REJECT_FRACTION), "maxRejectFraction"),
                   split=opts.get("split") or None, split_by=opts.get("splitby") or None,
                   partition_by=tuple(c.strip() for c in (opts.get("partitionby") or "").split(",") if c.strip()),
                   types=WriteTypes(decimal_as=opts.get("decimalas", "float").lower(),
                                    timestamp_unit=opts.get("timestampunit", "microseconds").lower()),
                   umask=parse_umask(opts["umask"], "option umask") if opts.get("umask") else None)


def _flag(opts: dict, key: str, name: str) -> bool:
    value = str(opts.get(key, "false")).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, got {opts[key]!r}")
    return value == "true"


# ---------------------------------------------------------------------------------------------
# Reading: spark.read.format("tfrecord").load(path)
# ---------------------------------------------------------------------------------------------


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


def _files_of(path: str) -> tuple[list, Schema | None, dict[str, dict]]:
    """The files (:class:`~tfrecord_io.storage.sources.SourceFile`) of a source (:mod:`tfrecord_io.storage.sources`: an output directory
    by its manifest, any other directory, glob or file by listing), the manifest's schema, and
    each file's partition values from its path (``{uri: {"cut": "Ideal"}}``)."""
    from tfrecord_io.storage import sources

    src = sources.resolve_source(path)
    return (list(src.files), src.manifest.schema if src.manifest else None,
            {f.uri: parse_partition_path(f.name) for f in src.files})


@dataclass(frozen=True)
class _File(InputPartition):
    file: Any  # a SourceFile: its URI, compression and what its manifest says of it


@dataclass
class _Reader(DataSourceReader):
    """Reads one file per partition, decoding its records in batches with the vectorized decoder
    (:func:`tfrecord_io.core.arrow_decode.decode_batch`; no TensorFlow): a feature a record lacks
    is null, a scalar with another number of values than one is null, a record that is not an
    Example / SequenceExample or whose feature has another kind than the schema's fails the task,
    naming the file, the record and its byte offset."""

    files: list
    schema: Schema
    columns: list  # the requested DataFrame columns, in order
    on_corrupt: str = "error"
    path_values: dict = field(default_factory=dict)  # column -> {file: value}: partition columns from paths
    batch_records: int = 8192  # records per batch at most; a batch is about one 1 MiB read of the file (the
                               # decoder's working set stays in the CPU cache)

    file_partitions: dict = field(default_factory=dict)  # file -> its partition values from its path

    def pushFilters(self, filters):  # noqa: N802 - Spark's name
        """Partition pruning: the files of partitions that no row of can match the filters on
        partition columns (=, IN, <, <=, >, >=, IS [NOT] NULL, and AND of them) are left out, never
        opened.  Every filter is still handed back for Spark to apply to the rows."""
        from pyspark.sql import datasource as ds

        ops = {ds.EqualTo: "=", ds.In: "in", ds.LessThan: "<", ds.LessThanOrEqual: "<=", ds.GreaterThan: ">",
               ds.GreaterThanOrEqual: ">=", ds.IsNull: "is_null", ds.IsNotNull: "is_not_null"}
        columns = {name for values in self.file_partitions.values() for name in values}
        conditions = []
        for f in filters:
            op = ops.get(type(f))
            if op is not None and len(f.attribute) == 1 and f.attribute[0] in columns:
                conditions.append((f.attribute[0], op, getattr(f, "value", None)))
        if conditions:
            kept = set(prune(((f.uri, self.file_partitions.get(f.uri, {})) for f in self.files), conditions))
            self.files = [f for f in self.files if f.uri in kept]
        return list(filters)

    def partitions(self):
        return [_File(f) for f in self.files]  # one per file: TFRecords do not split

    def read(self, partition: _File) -> Iterator[pa.RecordBatch]:
        from tfrecord_io.core.framing import CorruptRecordError, until_corrupt
        from tfrecord_io.storage.sources import iter_file_chunks

        if not isinstance(partition, _File):  # no file left (every one pruned): Spark's one empty partition
            return

        broken: list[CorruptRecordError] = []

        uri = partition.file.uri
        # a chunk of records at a time, no Python object per record (a file its manifest lists is
        # checked against its entry: count, size, CRC-32C of its bytes)
        stream = until_corrupt(iter_file_chunks(partition.file, max_records=self.batch_records), broken)
        first = 0
        for offsets, records in stream:
            yield self._batch(records, uri, first, offsets)
            first += len(records)
        if broken:
            if self.on_corrupt != "skip":
                raise broken[0]
            import sys

            print(f"tfrecord-io: onCorrupt=skip: {uri}: dropped the rest of the file after "
                  f"the intact records", file=sys.stderr)

    def _batch(self, records: pa.Array, uri: str, first: int, offsets) -> pa.RecordBatch:
        from tfrecord_io.core.arrow_decode import Origin, decode_batch

        features = [n for n, _ in self.columns if n not in self.path_values]
        decoded = decode_batch(records, self.schema, features=features, origin=Origin(uri, first, offsets))
        by_name = dict(zip(features, decoded.columns))
        columns = []
        for name, typ in self.columns:
            col = by_name[name] if name in by_name else pa.array([self.path_values[name][uri]] * len(records),
                                                                pa.string())
            columns.append(col if col.type == typ else col.cast(typ))
        return pa.RecordBatch.from_arrays(columns, names=[n for n, _ in self.columns])


class AliasDataSource(TFRecordDataSource):
    """The same source as ``format("tfrecord_io")``: the name to use where another ``tfrecord``
    source (spark-tfrecord's jar) is loaded too."""

    @classmethod
    def name(cls) -> str:
        return "tfrecord_io"


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
    leaves = {name: path for name, path, _ in leaf_columns(df.schema)}
    schema = columns.resolve_patterns(schema, {where: list(leaves)}, input_format="table",
                                      schema_name=options.schema_name)
    columns.check_columns(schema, {where: list(leaves)}, input_format="table",
                          allow_missing=options.allow_missing_columns, ignore_extra=options.ignore_extra_columns,
                          schema_name=options.schema_name)
    check_column_types(schema, df.schema, where, options.schema_name)
    selected = df.select(*[F.col(".".join(_quoted(p) for p in leaves[c])).alias(c) if c in leaves
                           else F.lit(None).cast(spark_type(f)).alias(f.name)
                           for f in schema.features for c in f.source_columns if c in leaves or not f.gathered])
    files = df.inputFiles()
    input_bytes = sum(fs.size(u) for u in files) if files else 0
    plan.prepare_output(input_paths=files)
    if options.shards == "input":  # a shard per partition of Spark's read: no shuffle
        num_shards = selected.rdd.getNumPartitions()
    else:
        num_shards = options.num_shards or default_num_shards(input_bytes, options.bytes_per_shard)
        selected = selected.repartition(num_shards)
    # The plan's decisions travel with the source's class (pickled to the writer's Python worker), as
    # they are: no option strings parsed and checked again there.
    spark.dataSource.register(type("PlannedJobDataSource", (JobDataSource,),
                                   {"decided": _Decided.of(plan, schema), "faults": faults}))
    try:
        selected.write.format(JobDataSource.name()).mode("append").save(out)
    finally:
        lease.release(out, ended=True)  # (committed: the commit removed _temporary and the lease with it)
    manifest = dict(output.read_manifest(out))
    manifest["job"] = {"num_shards": num_shards, "input_bytes": input_bytes,
                       "seconds": round(time.monotonic() - started, 3)}
    return manifest


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
