"""The Spark job: CSV or JSON (local paths, ``file://``, ``hdfs://``) to TFRecord files, exactly once.

Entry point: :func:`run_conversion(spark, ConversionOptions(...)) <run_conversion>` returns the
committed ``_manifest.json`` as a dict.  ``jobs/to_tfrecord.py`` (spark-submit) and
``tfrecord-io convert --engine spark`` both call it.

Pipeline (one Spark job, two stages)::

    Spark CSV/JSON reader, schema's StructType, PERMISSIVE + corrupt-record column   (JVM)
      -> + input_file_name(), input_file_block_start(), the line (row position in its
         read task, which reads exactly one file split), JVM checks (CSV list items)  (JVM)
      -> repartition(N): N = number of shards                                         (shuffle)
         Examples: hash of (file, split, line), unique per row, so shards are even;
         SequenceExamples: the group_by column, then sorted by group, order_by
      -> mapInArrow "write": per Arrow batch, find the rejects (vectorized checks), encode
         the rest (codec.encode_examples / encode_sequence_examples), frame and write
         shard i with output.write_shard into _temporary/<attempt>/, the rejects with
         output.write_rejects; yield one small report row per file            (Python)
    driver: collect() the reports -> output.commit(): shards into place, _manifest.json, _SUCCESS

Parsed rows cross from the JVM to Python once, as Arrow batches, after the shuffle: no
per-row Python objects on the hot path (only rejects are looked at row by row).

Input rows, records and rejects
    Every row Spark's reader produces is one *input row*: input rows = rows in records +
    rejected rows, always (the write stage counts both; the driver checks the sum).  Empty
    files and header-only CSV files give 0 rows; blank lines are skipped by Spark's readers.
    JSON Lines input is read line by line; ``multiline=True`` reads whole files as JSON
    documents (one object, or an array of objects, per file).

Rejects (``<output>/_rejects/part-NNNNN.jsonl``, one JSON object per rejected input row)
    ``source``  the file (Spark's ``input_file_name()``),
    ``offset``  the byte offset where Spark's split of that file began (``input_file_block_start()``;
                0 unless a large file was split across tasks),
    ``line``    the record's line: records are counted as Spark's reader delivers them, from 1
                at the start of the split, plus 1 for a CSV header line when the split starts
                the file.  For a file without blank lines (which Spark skips) and without
                quoted line breaks (a ``multiline`` record counts once) read from ``offset``
                0, this is the physical line number, as the Beam pipeline reports it,
    ``raw``     the input text: for rows Spark could not parse, its corrupt-record text
                (``columnNameOfCorruptRecord``); for rows that parsed but break a rule, the
                parsed values written back in the input format,
    ``reason``  why, naming the field: malformed CSV/JSON, wrong column count, a value that
                does not parse, null in a required field, a fixed-length list of the wrong
                length, a null list item, invalid UTF-8 (CSV: Spark decodes bad bytes as
                U+FFFD; a CSV string or bytes value containing U+FFFD is rejected).
    When rejected / input rows > ``max_reject_fraction`` (default
    ``output.DEFAULT_MAX_REJECT_FRACTION`` = 0.01, i.e. 1%) the job raises
    :class:`~tfrecord_io.output.RejectLimitExceeded`: nothing is committed, there is no
    ``_SUCCESS``, and the rejects stay under ``<output>/_temporary/*/_rejects/`` to look at.

CSV
    Read with Spark's CSV reader under the schema's types (no inference): ``csv.delimiter``,
    ``csv.quote`` (a doubled quote inside a quoted field is a quote), and the first
    ``csv.null_values`` entry as Spark's ``nullValue`` (Spark also reads an empty unquoted
    cell as null).  Further null values are applied after reading (numeric columns are then
    read as text and cast with ``try_cast``; a value that does not cast is a reject).  List
    features are split on their ``separator`` and each item cast in the JVM; a bad item
    rejects the row.  With ``csv.header: true`` the columns are matched to features *by name*:
    the driver reads each file's first record, and files whose header is not the schema's
    order are read under their own column order (unknown columns are dropped, features
    missing from a file are null); a header naming no feature at all fails the job.
    Line breaks inside quoted fields: by default records are lines (files are split across
    tasks, and an unbalanced quote damages only its own line; a record with a quoted line
    break becomes two rejects whose reason says to use ``multiline``).  ``multiline=True``
    sets Spark's ``multiLine``: quoted fields may hold line breaks, each file is read by one
    task, and an unbalanced quote runs on to the next quote (possibly the end of the file).

SequenceExamples
    Rows are grouped by ``group_by`` (hash-partitioned, so a group never spans shards) and
    ordered by ``order_by`` (ties, and no ``order_by``: input file, split, line).  Context
    features are taken from the group's first row; a group whose rows disagree on a context
    value is rejected whole (each row a reject naming the feature).  Any rejected row rejects
    its whole record (a sequence is never written with a step missing), and a row with a
    null ``group_by`` value is rejected on its own.  Huge groups: a group longer than
    ``max_steps`` (default 10,000) rows is split into consecutive SequenceExamples of at most
    ``max_steps`` steps, in order, each carrying the group's context; the write stage holds at
    most ``max_steps`` rows plus one Arrow batch of a group in memory.  The unit of rejection
    is the record: one bad row rejects only its ``max_steps`` piece.

Shards
    ``num_shards`` files, ``part-00000-of-0000N.tfrecord[.gz|.zlib]``.  By default N =
    ceil(input bytes / ``bytes_per_shard``) (128 MiB), at least 1, input bytes being the size
    of the input files as Spark's file index lists them.  Examples are hash-partitioned on a
    per-row key (a hash of file, split and line), so shards hold the same number of records
    to within a few percent; SequenceExample shards are as even as the groups allow.

Exactly once
    A write-stage task attempt writes only under ``<output>/_temporary/<attempt>/`` with
    ``attempt = <job uuid>-s<stage>-p<partition>-a<attempt number>-t<task attempt id>``, and
    returns its files in its (small) output rows.  The driver ``collect()``s them -- Spark
    returns the rows of exactly one successful attempt per partition -- waits (up to 30 s)
    for killed speculative attempts to stop, and ``output.commit()`` moves exactly those
    files into place and deletes ``_temporary`` with whatever failed or losing attempts left
    there.  A task refuses to start writing once ``_temporary`` is gone (the job was
    committed or aborted).  A shard whose partition reported nothing is written empty by the
    driver.  Existing non-empty output is refused unless ``overwrite``.  If the job fails for
    any other reason than the reject limit, ``_temporary`` is deleted and the output holds
    nothing.

Fault injection (tests): ``TFRECORD_IO_FAIL_FIRST_ATTEMPT=0,3`` (or ``*``) in the driver's
environment, or ``--conf spark.tfrecordio.failFirstAttempt=0,3``, makes the first attempt of
those write-stage partitions die (``os._exit``) after writing their first batch (Spark retries
them).  ``TFRECORD_IO_STALL_FIRST_ATTEMPT=0,3`` (or ``*``), or ``--conf
spark.tfrecordio.stallFirstAttempt=0,3``, makes it a straggler instead: after writing its first
batch it sleeps (up to 120 s) holding its partly written file under ``_temporary/<attempt>/``,
for speculation to copy it (with ``spark.speculation=true`` on a cluster: Spark never speculates
in local mode, nor on the host where the task already runs); Spark kills it when the copy wins.
A stalled attempt that wakes to find ``_temporary`` gone fails without writing more.  Both are
read in the driver and travel to the executors inside the :class:`WriteStage`; only attempt 0
is affected, so retries and speculative copies run normally.

The function shipped to executors is an instance of a module-level class (:class:`WriteStage`,
holding a :class:`RowChecker`), picklable with plain ``pickle`` as well as cloudpickle; executors
must be able to import ``tfrecord_io`` (ship it with ``--py-files``; see :func:`package_zip`).

Read tasks: to number lines without a second pass, each read task reads exactly one file split
(Spark's split size, but no packing of small files into one task; see ``_OneSplitPerTask``):
an input of very many small files runs one (cheap, JVM-only) read task per file.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import os
import sys
import tempfile
import time
import uuid
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfrecord_io import codec, fs, output
from tfrecord_io.framing import normalize_compression
from tfrecord_io.schema import Feature, Schema, SchemaError

__all__ = [
    "ConversionError", "ConversionOptions", "DEFAULT_BYTES_PER_SHARD", "DEFAULT_MAX_STEPS",
    "FAIL_FIRST_ATTEMPT_CONF", "FAIL_FIRST_ATTEMPT_ENV", "RowChecker", "STALL_FIRST_ATTEMPT_CONF",
    "STALL_FIRST_ATTEMPT_ENV", "WriteStage", "default_num_shards", "package_zip", "run_conversion",
]

DEFAULT_BYTES_PER_SHARD = 128 * 1024 * 1024
DEFAULT_MAX_STEPS = 10_000
FORMATS = ("csv", "json")
FAIL_FIRST_ATTEMPT_ENV = "TFRECORD_IO_FAIL_FIRST_ATTEMPT"
FAIL_FIRST_ATTEMPT_CONF = "spark.tfrecordio.failFirstAttempt"
STALL_FIRST_ATTEMPT_ENV = "TFRECORD_IO_STALL_FIRST_ATTEMPT"
STALL_FIRST_ATTEMPT_CONF = "spark.tfrecordio.stallFirstAttempt"
STALL_S = 120.0
STRAGGLER_WAIT_S = 30.0

# Internal columns (feature names may not start with the prefix).
_PREFIX = "__tfio_"
CORRUPT = _PREFIX + "corrupt"    # Spark's columnNameOfCorruptRecord
SOURCE = _PREFIX + "source"      # input_file_name()
OFFSET = _PREFIX + "offset"      # input_file_block_start()
CHECK = _PREFIX + "check"        # reasons found in the JVM (CSV list items, extra null values)
LINE = _PREFIX + "line"
RAW = _PREFIX + "raw"
REASON = _PREFIX + "reason"
_REJECT_COLUMNS = (SOURCE, LINE, OFFSET, RAW, REASON)
_NUMERIC_SQL = {"int64": "bigint", "float": "float"}

REPORT_DDL = ("kind string, partition bigint, attempt string, temp_path string, final_name string, "
              "records bigint, bytes bigint, input_rows bigint, rejected bigint, rows_in_records bigint")


class ConversionError(RuntimeError):
    """The conversion could not run (bad input paths, unreadable headers, a failed Spark job)."""


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConversionOptions:
    """What to convert and how.  Defaults are the job's documented defaults.

    inputs: input URIs (local paths, ``file://``, ``hdfs://``; files, directories or globs);
        a single string may hold several separated by commas.
    input_format: ``"csv"`` or ``"json"`` (JSON Lines; whole-file JSON with ``multiline``).
    schema: path or URI of the YAML schema.
    output: output directory URI.
    record_type: ``"example"`` / ``"sequence_example"``; None (default) takes the schema's.
        When given it must match the schema's ``record_type``.
    compression: ``"none"`` (default), ``"gzip"`` or ``"zlib"``.
    num_shards: number of TFRecord files; None (default): one per ``bytes_per_shard`` of input.
    overwrite: replace an existing non-empty output (default False: refuse).
    max_reject_fraction: most rejected/input rows tolerated (default 0.01 = 1%).
    multiline: records may span lines: multi-line JSON documents, or CSV with line breaks
        in quoted fields (default False; files are then read whole, one task per file).
    max_steps: longest SequenceExample; longer groups are split (default 10,000).
    bytes_per_shard: input bytes per shard when ``num_shards`` is None (default 128 MiB).
    """

    inputs: tuple[str, ...]
    input_format: str
    schema: str
    output: str
    record_type: str | None = None
    compression: str = "none"
    num_shards: int | None = None
    overwrite: bool = False
    max_reject_fraction: float = output.DEFAULT_MAX_REJECT_FRACTION
    multiline: bool = False
    max_steps: int = DEFAULT_MAX_STEPS
    bytes_per_shard: int = DEFAULT_BYTES_PER_SHARD

    def __post_init__(self) -> None:
        raw = (self.inputs,) if isinstance(self.inputs, str) else tuple(self.inputs)
        inputs = tuple(_absolute(p.strip()) for item in raw for p in str(item).split(",") if p.strip())
        if not inputs:
            raise ValueError("no input given (--input URI[,URI...])")
        object.__setattr__(self, "inputs", inputs)
        if self.input_format not in FORMATS:
            raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {self.input_format!r}")
        if not self.output or not str(self.output).strip():
            raise ValueError("no output given (--output URI)")
        object.__setattr__(self, "output", _absolute(str(self.output).strip().rstrip("/") or "/"))
        if self.record_type is not None and self.record_type not in ("example", "sequence_example"):
            raise ValueError(f"--record-type must be example or sequence_example, got {self.record_type!r}")
        object.__setattr__(self, "compression", normalize_compression(self.compression))
        if self.num_shards is not None and (not isinstance(self.num_shards, int) or self.num_shards < 1):
            raise ValueError(f"--num-shards must be a positive integer, got {self.num_shards!r}")
        f = self.max_reject_fraction
        if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0.0 <= f <= 1.0:
            raise ValueError(f"--max-reject-fraction must be a number from 0 to 1, got {f!r}")
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"--max-steps must be a positive integer, got {self.max_steps!r}")
        if not isinstance(self.bytes_per_shard, int) or self.bytes_per_shard < 1:
            raise ValueError(f"bytes_per_shard must be a positive integer, got {self.bytes_per_shard!r}")


def _absolute(uri: str) -> str:
    """Local paths made absolute (executors do not share the driver's working directory)."""
    if "://" in uri or uri.startswith("file:"):
        return uri
    return os.path.abspath(uri)


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------
def run_conversion(spark, options: ConversionOptions) -> dict:
    """Convert ``options.inputs`` to TFRecords under ``options.output``; return the manifest.

    Raises ``FileExistsError`` for existing output (without ``overwrite``),
    ``RejectLimitExceeded`` when too much was rejected, ``SchemaError`` for a bad schema and
    ``ConversionError`` for anything else that stops the job; nothing is committed then.
    """
    started = time.monotonic()
    schema = Schema.load(options.schema)
    _check_schema(schema, options)
    out = options.output
    job_id = uuid.uuid4().hex[:12]
    output.prepare_output(out, overwrite=options.overwrite)
    fs.makedirs(fs.join(out, output.TEMPORARY))
    sc = spark.sparkContext
    try:
        read = _read_input(spark, schema, options)
        num_shards = options.num_shards or default_num_shards(read.size, options.bytes_per_shard)
        staged, write = _plan(read, schema, options, job_id, num_shards,
                              fail=_fault_switch(spark, FAIL_FIRST_ATTEMPT_ENV, FAIL_FIRST_ATTEMPT_CONF),
                              stall=_fault_switch(spark, STALL_FIRST_ATTEMPT_ENV, STALL_FIRST_ATTEMPT_CONF))
        sc.setJobGroup(job_id, f"tfrecord-io: {','.join(options.inputs)} -> {out} ({num_shards} shards)",
                       interruptOnCancel=True)
        try:
            with _OneSplitPerTask(spark, read.size, read.files):
                reports = staged.mapInArrow(write, REPORT_DDL).collect()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)
        _wait_for_stragglers(sc, job_id)
        files, rejects, totals = _merge_reports(reports, out, job_id, num_shards, options.compression,
                                                schema.record_type)
    except (output.RejectLimitExceeded, FileExistsError, SchemaError, ConversionError):
        _abort(out)
        raise
    except Exception as e:
        _abort(out)
        raise ConversionError(f"conversion of {','.join(options.inputs)} to {out} failed: "
                              f"{_spark_message(e)}") from e
    # Too many rejects: raise before committing anything, keeping _temporary (and the
    # rejects in it) for inspection, as the message says.
    output.check_reject_fraction(totals, options.max_reject_fraction)
    manifest = output.commit(out, files, rejects, totals, schema=schema, compression=options.compression,
                             engine="spark", max_reject_fraction=options.max_reject_fraction)
    manifest = dict(manifest)
    manifest["job"] = {"id": job_id, "num_shards": num_shards, "input_bytes": read.size,
                       "seconds": round(time.monotonic() - started, 3)}
    return manifest


def _check_schema(schema: Schema, options: ConversionOptions) -> None:
    if options.record_type is not None and options.record_type != schema.record_type:
        raise SchemaError(f"--record-type {options.record_type} does not match the schema "
                          f"{options.schema}, whose record_type is {schema.record_type}")
    for f in schema.input_features:
        if f.name.startswith(_PREFIX):
            raise SchemaError(f"{options.schema}: feature name {f.name!r} uses the reserved prefix {_PREFIX!r}")


def _abort(out: str) -> None:
    """Best effort: remove what task attempts wrote (the output then holds nothing)."""
    try:
        tmp = fs.join(out, output.TEMPORARY)
        if fs.exists(tmp):
            fs.delete(tmp, recursive=True)
    except OSError:
        pass


def _spark_message(e: BaseException) -> str:
    """The useful first lines of a (Py4J / PySpark) exception."""
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("at ")]
    return "\n".join(lines[:12]) or type(e).__name__


def default_num_shards(input_bytes: int, bytes_per_shard: int = DEFAULT_BYTES_PER_SHARD) -> int:
    """Shards when ``--num-shards`` is not given: one per ``bytes_per_shard`` of input, at least 1."""
    return max(1, math.ceil(input_bytes / bytes_per_shard))


def _fault_switch(spark, env: str, conf: str) -> str:
    """A fault-injection switch (partitions, or ``*``): the conf ``conf``, else the driver's ``$env``."""
    value = os.environ.get(env, "")
    try:
        value = spark.conf.get(conf, value) or value
    except Exception:  # noqa: BLE001 - an unset conf on some deployments
        pass
    return value.strip()


def _wait_for_stragglers(sc, job_group: str, timeout: float = STRAGGLER_WAIT_S) -> None:
    """After the job: wait until no task of it still runs (speculative losers being killed)."""
    tracker = sc.statusTracker()
    deadline = time.monotonic() + timeout
    while True:
        active = 0
        for job in tracker.getJobIdsForGroup(job_group):
            info = tracker.getJobInfo(job)
            for stage in (info.stageIds if info else ()):
                sinfo = tracker.getStageInfo(stage)
                active += sinfo.numActiveTasks if sinfo else 0
        if active == 0 or time.monotonic() > deadline:
            return
        time.sleep(0.2)


def _merge_reports(reports, out: str, job_id: str, num_shards: int, compression: str, record_type: str):
    files: list[output.WrittenFile] = []
    rejects: list[output.WrittenFile] = []
    totals = output.ConversionTotals(rows_in_records=0 if record_type == "sequence_example" else None)
    seen: set[int] = set()
    for r in reports:
        wf = output.WrittenFile(r["temp_path"], r["final_name"], int(r["records"]), int(r["bytes"]))
        if r["kind"] == "rejects":
            rejects.append(wf)
            continue
        if r["partition"] in seen:  # cannot happen: Spark returns one attempt per partition
            raise RuntimeError(f"two reports for partition {r['partition']}")
        seen.add(r["partition"])
        files.append(wf)
        totals.input_rows += int(r["input_rows"])
        totals.records += int(r["records"])
        totals.rejected += int(r["rejected"])
        if totals.rows_in_records is not None:
            totals.rows_in_records += int(r["rows_in_records"])
    for p in sorted(set(range(num_shards)) - seen):  # a partition that ran no task: an empty shard
        files.append(output.write_shard([], out, f"{job_id}-driver", output.shard_name(p, num_shards, compression),
                                        compression))
    return files, rejects, totals


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------
@dataclass
class _Read:
    parts: list  # DataFrames with the prepared columns, unioned by _plan
    size: int  # input bytes
    files: int  # input files
    layouts: dict  # CSV file URI -> its header's column order (files not in schema order only)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _read_types(schema: Schema, fmt: str, extra_nulls: tuple) -> dict:
    """Spark type each feature is *read* as (before the JVM-side conversions)."""
    from pyspark.sql import types as T

    types = {f.name: f.dataType for f in schema.spark_schema(fmt).fields}
    if extra_nulls:  # numeric scalars are read as text, then null values removed and try_cast
        for f in schema.input_features:
            if not f.is_list and f.type in _NUMERIC_SQL:
                types[f.name] = T.StringType()
    return types


def _read_input(spark, schema: Schema, opts: ConversionOptions) -> _Read:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fmt = opts.input_format
    extra_nulls = tuple(schema.csv.null_values[1:]) if fmt == "csv" else ()
    types = _read_types(schema, fmt, extra_nulls)
    names = [f.name for f in schema.input_features]

    def struct(columns):
        return T.StructType([T.StructField(n, t, True) for n, t in columns] + [T.StructField(CORRUPT, T.StringType())])

    def reader(columns):
        r = (spark.read.schema(struct(columns)).option("mode", "PERMISSIVE")
             .option("columnNameOfCorruptRecord", CORRUPT).option("multiLine", str(opts.multiline).lower()))
        if fmt == "csv":
            c = schema.csv
            r = (r.option("header", str(c.header).lower()).option("enforceSchema", "true")
                 .option("sep", c.delimiter).option("quote", c.quote).option("escape", c.quote)
                 .option("encoding", "UTF-8"))
            if c.null_values:
                r = r.option("nullValue", c.null_values[0])
        return r

    def load(columns, paths):
        try:
            r = reader(columns)
            return r.csv(paths) if fmt == "csv" else r.json(paths)
        except Exception as e:  # AnalysisException: PATH_NOT_FOUND and friends
            raise ConversionError(f"cannot read input {','.join(paths)}: {_spark_message(e)}") from e

    schema_order = [(n, types[n]) for n in names]
    df = load(schema_order, list(opts.inputs))
    size = _input_size(df)
    files = df.inputFiles()
    if fmt != "csv" or not schema.csv.header:
        return _Read([_prepare(df, schema, fmt, extra_nulls)], size, len(files), {})

    headers = _peek_headers(files, schema, opts.multiline)
    groups: dict[tuple | None, list[str]] = {}
    layouts: dict[str, tuple] = {}
    for uri, header in sorted(headers.items()):
        if header is None or list(header) == names:
            groups.setdefault(None, []).append(uri)
            continue
        if not set(header) & set(names):
            raise ConversionError(
                f"{uri}: the CSV header {list(header)} names none of the schema's features {names}; "
                f"check csv.delimiter ({schema.csv.delimiter!r}) and csv.header in {opts.schema}")
        groups.setdefault(tuple(header), []).append(uri)
        layouts[uri] = tuple(header)
    if list(groups) in ([None], []):
        return _Read([_prepare(df, schema, fmt, extra_nulls)], size, len(files), {})
    parts = []
    for layout, uris in groups.items():
        if layout is None:
            parts.append(_prepare(load(schema_order, uris), schema, fmt, extra_nulls))
            continue
        columns, present = [], set()
        for i, name in enumerate(layout):
            if name in types and name not in present:
                columns.append((name, types[name]))
                present.add(name)
            else:  # a column the schema does not know (or a repeated name): read and dropped
                columns.append((f"{_PREFIX}extra_{i}", T.StringType()))
        part = load(columns, uris)
        part = part.select(*[F.col(_q(n)) if n in present else F.lit(None).cast(types[n]).alias(n) for n in names],
                           F.col(CORRUPT))
        parts.append(_prepare(part, schema, fmt, extra_nulls))
    return _Read(parts, size, len(files), layouts)


def _input_size(df) -> int:
    """Bytes of input, from Spark's file index (the plan statistics), else by listing."""
    try:
        return int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes().toString())
    except Exception:  # noqa: BLE001 - e.g. Spark Connect; fall back to listing
        return sum(fs.size(u) for u in df.inputFiles())


def _peek_headers(files: list[str], schema: Schema, multiline: bool) -> dict[str, tuple | None]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(files, pool.map(lambda u: _peek_header(u, schema, multiline), files)))


def _peek_header(uri: str, schema: Schema, multiline: bool) -> tuple | None:
    """The column names in a CSV file's first record (None for a file with no lines)."""
    try:
        with fs.open(uri, "rb") as f:
            head = f.read(1 << 16)
    except OSError as e:
        raise ConversionError(f"{uri}: cannot read the CSV header: {e}") from e
    if uri.endswith(".gz"):
        head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head)
    text = head.decode("utf-8", "replace").lstrip("\ufeff")
    if not multiline:
        text = next((ln for ln in text.splitlines() if ln.strip()), "")
    c = schema.csv
    try:
        for row in csv.reader(io.StringIO(text, newline=""), delimiter=c.delimiter, quotechar=c.quote):
            if row and any(cell.strip() for cell in row):
                return tuple(row)
    except csv.Error as e:
        raise ConversionError(f"{uri}: line 1: cannot parse the CSV header: {e}") from e
    return None


def _regex_literal(text: str) -> str:
    """A Java regex matching ``text`` literally (for Spark's split)."""
    return "".join(ch if ch.isalnum() or ch == "_" else "\\" + ch for ch in text)


def _cast_to(sql_type: str):
    return lambda x: x.try_cast(sql_type)


def _fails_cast_to(sql_type: str):
    return lambda x: x.try_cast(sql_type).isNull()


def _prepare(df, schema: Schema, fmt: str, extra_nulls: tuple):
    """Feature columns in their encoder types (CSV lists split and cast), plus the internal columns:
    CORRUPT, SOURCE (file), OFFSET (split start), LINE, CHECK (JVM-found reasons).  Must sit right
    on the read: ``input_file_name()`` and the row positions are those of the read task."""
    header_lines = 1 if fmt == "csv" and schema.csv.header else 0
    from pyspark.sql import functions as F

    columns, checks = [], []
    for f in schema.input_features:
        col = F.col(_q(f.name))
        if fmt == "csv":
            cell = F.when(col.isin(*extra_nulls), F.lit(None)).otherwise(col) if extra_nulls else col
            if f.is_list:
                items = F.split(cell, _regex_literal(f.separator or ","), -1)
                if f.type in _NUMERIC_SQL:
                    sql_type = _NUMERIC_SQL[f.type]
                    col = F.transform(items, _cast_to(sql_type))
                    bad = F.filter(items, _fails_cast_to(sql_type))
                    checks.append(F.when(F.size(bad) > 0, F.concat(
                        F.lit(f"feature {f.name!r}: list item '"), F.element_at(bad, 1),
                        F.lit(f"' is not a valid {f.type} (list items are separated by {f.separator!r})"))))
                else:
                    col = items
            elif extra_nulls and f.type in _NUMERIC_SQL:
                col = cell.try_cast(_NUMERIC_SQL[f.type])
                checks.append(F.when(cell.isNotNull() & col.isNull(), F.concat(
                    F.lit(f"feature {f.name!r}: '"), cell, F.lit(f"' is not a valid {f.type}"))))
            else:
                col = cell
        columns.append(col.alias(f.name))
    check = checks[0] if len(checks) == 1 else (F.coalesce(*checks) if checks else F.lit(None))
    offset = F.expr("input_file_block_start()")
    # The row's position in its read task, which reads one file split (see _OneSplitPerTask).
    position = F.monotonically_increasing_id().bitwiseAND(F.lit((1 << 33) - 1))
    line = position + 1 + F.when(offset == 0, F.lit(header_lines)).otherwise(F.lit(0))
    return df.select(*columns, F.col(CORRUPT), F.input_file_name().alias(SOURCE), offset.alias(OFFSET),
                     line.alias(LINE), check.cast("string").alias(CHECK))


# ---------------------------------------------------------------------------------------------
# Plan
# ---------------------------------------------------------------------------------------------
def _plan(read: _Read, schema: Schema, opts: ConversionOptions, job_id: str, num_shards: int, fail: str = "",
          stall: str = ""):
    """The DataFrame the write stage runs on, and the write stage."""
    from functools import reduce

    from pyspark.sql import functions as F

    prepared = reduce(lambda a, b: a.union(b), read.parts)
    if schema.record_type == "example":
        # Every row has a distinct (file, split, line): hashing it spreads rows evenly over shards,
        # and deterministically, so a recomputed map task sends each row where it went before.
        staged = prepared.repartition(num_shards, F.col(SOURCE), F.col(OFFSET), F.col(LINE))
    else:
        order = [F.col(_q(schema.group_by))]
        if schema.order_by and schema.order_by != schema.group_by:
            order.append(F.col(_q(schema.order_by)))
        order += [F.col(SOURCE), F.col(OFFSET), F.col(LINE)]
        staged = prepared.repartition(num_shards, F.col(_q(schema.group_by))).sortWithinPartitions(*order)
    checker = RowChecker(schema, opts.input_format, opts.multiline, read.layouts)
    write = WriteStage(output=opts.output, job_id=job_id, num_shards=num_shards, compression=opts.compression,
                       checker=checker, max_steps=opts.max_steps, fail_first_attempt=fail,
                       stall_first_attempt=stall)
    return staged, write


class _OneSplitPerTask:
    """Session settings (restored after) under which each read task reads exactly one file split.

    Spark packs small files into one task (``FilePartition``: a file costs its length plus
    ``spark.sql.files.openCostInBytes``, a task holds up to ``maxSplitBytes``).  With the open
    cost above the split size no task takes a second file, and then a row's position in its task
    (``monotonically_increasing_id()``) is its position in its split: its line.  The split size
    is what Spark would pick, ``min(maxPartitionBytes, max(openCostInBytes, bytes / cores))``.
    The price: one read task per input file, however small.
    """

    KEYS = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes", "spark.sql.files.maxPartitionNum")

    def __init__(self, spark, input_bytes: int, input_files: int):
        self.spark = spark
        conf = spark.conf
        max_pb = _conf_bytes(conf.get(self.KEYS[0], "128m"))
        open_cost = _conf_bytes(conf.get(self.KEYS[1], "4m"))
        min_parts = int(conf.get("spark.sql.files.minPartitionNum", None) or spark.sparkContext.defaultParallelism)
        per_core = (input_bytes + input_files * open_cost) // max(1, min_parts)
        self.split = max(1, min(max_pb, max(open_cost, per_core)))

    def __enter__(self):
        conf = self.spark.conf
        self.saved = {k: conf.get(k, None) for k in self.KEYS}
        conf.set(self.KEYS[0], str(self.split))
        conf.set(self.KEYS[1], str(self.split + 1))
        conf.unset(self.KEYS[2])  # it would re-pack splits into fewer tasks
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                self.spark.conf.unset(k)
            else:
                self.spark.conf.set(k, v)


def _conf_bytes(value) -> int:
    text = str(value).strip().lower().rstrip("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)


# ---------------------------------------------------------------------------------------------
# Executor side: reasons, raw text
# ---------------------------------------------------------------------------------------------
def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "backslashreplace")


def _binary_list(arr: pa.Array) -> list:
    """Python values of a string array as bytes (Spark may hand over invalid UTF-8)."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.binary() if pa.types.is_string(arr.type) else pa.large_binary())
    return arr.to_pylist()


_INVALID_UTF8 = "invalid UTF-8 in the input"


def _value_ok(f: Feature, v: Any, *, from_csv: bool) -> bool:
    """Would Spark's reader take ``v`` (a CSV cell's text, or a JSON value) for feature ``f``?"""
    if v is None:
        return True
    if from_csv:
        if f.is_list or f.type not in _NUMERIC_SQL:
            return True
        text = v.strip() if f.type == "float" else v
        if f.type == "int64":
            try:
                return -(2**63) <= int(text, 10) < 2**63 and text.lstrip("+-").isdigit()
            except ValueError:
                return False
        try:
            float(text.rstrip("fFdD") if text[-1:] in "fFdD" and text[:-1].strip() else text)
            return True
        except ValueError:
            return text in ("Inf", "-Inf", "NaN")
    if f.is_list:
        return isinstance(v, list) and all(_json_scalar_ok(f, x) for x in v if x is not None)
    return _json_scalar_ok(f, v)


def _json_scalar_ok(f: Feature, v: Any) -> bool:
    if f.type == "int64":
        return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63
    if f.type == "float":
        return (isinstance(v, (int, float)) and not isinstance(v, bool)) or \
            (isinstance(v, str) and v in ("NaN", "Infinity", "-Infinity", "+Infinity", "INF", "-INF", "+INF"))
    if f.type == "bytes":
        if not isinstance(v, str):
            return False
        try:
            base64.b64decode(v, validate=True)
            return True
        except ValueError:
            return False
    return True  # Spark reads any JSON value into a string column (numbers and objects as their text)


def _describe(v: Any, limit: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= limit else r[:limit] + "..."


@dataclass(frozen=True)
class _Diagnoser:
    """Why Spark's reader rejected a record (it does not say): re-check its raw text."""

    schema: Schema
    input_format: str
    multiline: bool
    layouts: dict

    def reason(self, raw: bytes, source: str) -> str:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _INVALID_UTF8
        if "\ufffd" in text:
            return _INVALID_UTF8
        return self._csv(text, source) if self.input_format == "csv" else self._json(text)

    def _csv(self, text: str, source: str) -> str:
        c = self.schema.csv
        layout = self.layouts.get(source) or tuple(f.name for f in self.schema.input_features)
        if text.count(c.quote) % 2:
            hint = "" if self.multiline else "; a quoted field holding a line break needs --multiline"
            return f"malformed CSV: unbalanced quote ({c.quote}){hint}"
        try:
            rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=c.delimiter, quotechar=c.quote,
                                   doublequote=True, strict=True))
        except csv.Error as e:
            return f"malformed CSV: {e}"
        cells = rows[0] if rows else []
        if len(rows) > 1 or len(cells) != len(layout):
            got = sum(len(r) for r in rows)
            return f"wrong number of columns: expected {len(layout)}, got {got}"
        features = {f.name: f for f in self.schema.input_features}
        for name, cell in zip(layout, cells):
            f = features.get(name)
            if f is None or cell in c.null_values or cell == "":
                continue
            if not _value_ok(f, cell, from_csv=True):
                return f"feature {name!r}: {_describe(cell)} is not a valid {f.type}"
        return "malformed CSV record (Spark's CSV parser rejected it)"

    def _json(self, text: str) -> str:
        try:
            value = json.loads(text)
        except ValueError as e:
            return f"malformed JSON: {e}"
        objects = value if isinstance(value, list) else [value]
        for obj in objects:
            if not isinstance(obj, dict):
                return f"expected a JSON object, got {type(obj).__name__} {_describe(obj)}"
            for f in self.schema.input_features:
                if f.name in obj and not _value_ok(f, obj[f.name], from_csv=False):
                    want = f"a list of {f.type}" if f.is_list else f.type
                    return f"feature {f.name!r}: expected {want}, got {_describe(obj[f.name])}"
        return "malformed JSON record (Spark's JSON parser rejected it)"


def _raw_from_values(values: dict, schema: Schema, fmt: str, layout: tuple | None) -> str:
    """A parsed row written back in the input format (rows Spark parsed carry no raw text)."""
    if fmt == "json":
        def conv(v):
            if isinstance(v, bytes):
                return base64.b64encode(v).decode("ascii")
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            return v
        return json.dumps({f.name: conv(values.get(f.name)) for f in schema.input_features
                           if values.get(f.name) is not None}, ensure_ascii=False)
    c = schema.csv
    features = {f.name: f for f in schema.input_features}
    cells = []
    for name in layout or tuple(features):
        v = values.get(name)
        f = features.get(name)
        if v is None:
            cells.append(c.null_values[0] if c.null_values else "")
        elif isinstance(v, list):
            cells.append((f.separator or ",").join("" if x is None else _cell(x) for x in v))
        else:
            cells.append(_cell(v))
    buf = io.StringIO()
    csv.writer(buf, delimiter=c.delimiter, quotechar=c.quote, lineterminator="").writerow(cells)
    return buf.getvalue()


def _cell(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _rows_as_dicts(batch: pa.RecordBatch, names: list[str]) -> list[dict]:
    """Python rows of some columns (strings decoded leniently)."""
    cols = {}
    for n in names:
        arr = batch.column(batch.schema.get_field_index(n))
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            cols[n] = [_text(b) for b in _binary_list(arr)]
        else:
            cols[n] = arr.to_pylist()
    return [dict(zip(names, vals)) for vals in zip(*(cols[n] for n in names))] if names else \
        [{} for _ in range(batch.num_rows)]


# ---------------------------------------------------------------------------------------------
# Executor side: the scan stage
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RowChecker:
    """Why each input row of a batch is a reject (None for good rows), and the raw text.

    Works on the prepared columns (features, CORRUPT, SOURCE, OFFSET, LINE, CHECK).  The most
    basic problem wins: Spark could not parse the record > a CSV list item or extra null value
    did not cast (JVM checks) > invalid UTF-8 > the schema's row rules (``codec.row_errors``;
    for SequenceExamples on the row's context + step, plus null steps without a default).
    """

    schema: Schema
    input_format: str
    multiline: bool
    layouts: dict = field(default_factory=dict)

    @property
    def row_schema(self) -> Schema:
        """The per-row view the row rules run on (a SequenceExample row is context + one step)."""
        if self.schema.record_type == "example":
            return self.schema
        return Schema(record_type="example", features=self.schema.context + self.schema.sequence,
                      csv=self.schema.csv)

    def reasons(self, batch: pa.RecordBatch) -> tuple[list, dict]:
        """(reason per row or None, {row: raw text} for the rows Spark could not parse)."""
        n = batch.num_rows
        reasons: list = codec.row_errors(batch, self.row_schema)
        if self.schema.record_type == "sequence_example":
            for f in self.schema.sequence:
                col = batch.column(batch.schema.get_field_index(f.name))
                if f.default is None and col.null_count:
                    for i in np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False)):
                        reasons[i] = reasons[i] or \
                            f"sequence feature {f.name!r}: null step, and the feature has no default"
        if self.input_format == "csv":
            for f in self.schema.input_features:
                if f.type not in ("string", "bytes"):
                    continue
                col = batch.column(batch.schema.get_field_index(f.name))
                hit = pc.fill_null(pc.match_substring(pc.list_flatten(col) if f.is_list else col, "\ufffd"), False)
                hit = hit.to_numpy(zero_copy_only=False)
                if not hit.any():
                    continue
                if f.is_list:
                    rows = np.unique(pc.list_parent_indices(col).to_numpy(zero_copy_only=False)[hit])
                else:
                    rows = np.flatnonzero(hit)
                for i in rows:
                    reasons[i] = f"feature {f.name!r}: {_INVALID_UTF8} (Spark read the bad bytes as U+FFFD)"
        check = batch.column(batch.schema.get_field_index(CHECK))
        if check.null_count < n:
            idx = np.flatnonzero(check.is_valid().to_numpy(zero_copy_only=False))
            for i, text in zip(idx, _binary_list(check.take(pa.array(idx, pa.int64())))):
                reasons[i] = _text(text)
        raw: dict[int, str] = {}
        corrupt = batch.column(batch.schema.get_field_index(CORRUPT))
        if corrupt.null_count < n:
            diagnoser = _Diagnoser(self.schema, self.input_format, self.multiline, self.layouts)
            idx = np.flatnonzero(corrupt.is_valid().to_numpy(zero_copy_only=False))
            take = pa.array(idx, pa.int64())
            texts = _binary_list(corrupt.take(take))
            sources = _binary_list(batch.column(batch.schema.get_field_index(SOURCE)).take(take))
            for i, text, src in zip(idx, texts, sources):
                raw[int(i)] = _text(text)
                reasons[i] = diagnoser.reason(text, _text(src))
        return reasons, raw

    def raw_text(self, values: dict, source: str | None) -> str:
        return _raw_from_values(values, self.schema, self.input_format, self.layouts.get(source))

    def rejects(self, batch: pa.RecordBatch, idx: np.ndarray, reasons: list, raw: dict) -> Iterator[dict]:
        """Reject dicts (the ``_rejects/`` contract) for rows ``idx`` of ``batch``."""
        if len(idx) == 0:
            return
        sub = batch.take(pa.array(idx, pa.int64()))
        meta = _rows_as_dicts(sub, [SOURCE, LINE, OFFSET])
        need = [j for j, i in enumerate(idx) if int(i) not in raw]
        values = dict(zip(need, _rows_as_dicts(sub.take(pa.array(need, pa.int64())),
                                                [f.name for f in self.schema.input_features]))) if need else {}
        for j, i in enumerate(idx):
            text = raw.get(int(i))
            if text is None:
                text = self.raw_text(values[j], meta[j][SOURCE])
            yield {"source": meta[j][SOURCE], "line": meta[j][LINE], "offset": meta[j][OFFSET], "raw": text,
                   "reason": reasons[i]}


def _as_binary(arr: pa.Array) -> pa.Array:
    return arr if arr.type == pa.binary() else arr.cast(pa.binary())


# ---------------------------------------------------------------------------------------------
# Executor side: the write stage
# ---------------------------------------------------------------------------------------------
class _RejectSpool:
    """Reject rows kept as JSON lines in a spooled temp file (memory-bounded) until written."""

    def __init__(self):
        self._file = tempfile.SpooledTemporaryFile(max_size=8 << 20, mode="w+b")
        self.count = 0

    def add(self, row: dict) -> None:
        self._file.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
        self.count += 1

    def rows(self) -> Iterator[dict]:
        self._file.seek(0)
        for line in self._file:
            yield json.loads(line)

    def close(self) -> None:
        self._file.close()


def _rows_equal(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Row-wise equality of two same-typed arrays, nulls equal to nulls, NaN equal to NaN."""
    a_null = a.is_null().to_numpy(zero_copy_only=False)
    b_null = b.is_null().to_numpy(zero_copy_only=False)
    same = a_null & b_null
    both = ~a_null & ~b_null
    if not both.any():
        return same
    if pa.types.is_list(a.type) or pa.types.is_large_list(a.type):
        la = pc.fill_null(pc.list_value_length(a), -1).to_numpy(zero_copy_only=False)
        lb = pc.fill_null(pc.list_value_length(b), -1).to_numpy(zero_copy_only=False)
        cand = both & (la == lb)
        if cand.any():
            mask = pa.array(cand)
            item_ok = _rows_equal(pc.list_flatten(a.filter(mask)), pc.list_flatten(b.filter(mask)))
            bad = np.zeros(len(item_ok) + 1, dtype=np.int64)
            np.cumsum(~item_ok, out=bad[1:])
            ends = np.cumsum(la[cand].astype(np.int64))
            starts = ends - la[cand]
            same[np.flatnonzero(cand)] = (bad[ends] - bad[starts]) == 0
        return same
    eq = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(a.type):
        eq |= pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False).to_numpy(zero_copy_only=False)
    return same | (both & eq)


@dataclass(frozen=True)
class WriteStage:
    """mapInArrow function over the N shard partitions: write shard i and its rejects; report them."""

    output: str
    job_id: str
    num_shards: int
    compression: str
    checker: RowChecker
    max_steps: int = DEFAULT_MAX_STEPS
    fail_first_attempt: str = ""  # fault injection (tests), see the module docstring
    stall_first_attempt: str = ""

    @property
    def schema(self) -> Schema:
        return self.checker.schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part, attempt_number = ctx.partitionId(), ctx.attemptNumber()
        attempt = f"{self.job_id}-s{ctx.stageId()}-p{part:05d}-a{attempt_number}-t{ctx.taskAttemptId()}"
        if not fs.exists(fs.join(self.output, output.TEMPORARY)):
            raise RuntimeError(f"{self.output}/{output.TEMPORARY} is gone (the job was committed or aborted); "
                               f"task attempt {attempt} writes nothing")
        spool = _RejectSpool()
        stats = {"input_rows": 0, "records": 0, "rows_in_records": 0}
        die = _first_attempt_of(self.fail_first_attempt, part, attempt_number)
        stall = _first_attempt_of(self.stall_first_attempt, part, attempt_number)
        if self.schema.record_type == "example":
            records = self._example_records(batches, spool, stats)
        else:
            records = self._sequence_records(batches, spool, stats)
        if die:
            records = _after_first_batch(records, lambda: _die(attempt))
        elif stall:
            temporary = fs.join(self.output, output.TEMPORARY)
            records = _after_first_batch(records, lambda: _stall(attempt, temporary))
        try:
            final = output.shard_name(part, self.num_shards, self.compression)
            shard = output.write_shard(records, self.output, attempt, final, self.compression)
            rejects = output.write_rejects(spool.rows(), self.output, attempt, f"part-{part:05d}.jsonl")
        finally:
            spool.close()
        if shard.records != stats["records"]:
            raise RuntimeError(f"{shard.temp_path}: wrote {shard.records} records, counted {stats['records']}")
        converted = stats["records"] if self.schema.record_type == "example" else stats["rows_in_records"]
        if stats["input_rows"] != converted + spool.count:
            raise RuntimeError(f"task attempt {attempt}: {stats['input_rows']} input rows != {converted} converted "
                               f"+ {spool.count} rejected")
        rows = [("shard", shard)] + ([("rejects", rejects)] if rejects is not None else [])
        yield pa.RecordBatch.from_pydict({
            "kind": [k for k, _ in rows],
            "partition": [part] * len(rows),
            "attempt": [attempt] * len(rows),
            "temp_path": [w.temp_path for _, w in rows],
            "final_name": [w.final_name for _, w in rows],
            "records": [w.records for _, w in rows],
            "bytes": [w.bytes for _, w in rows],
            "input_rows": [stats["input_rows"]] * len(rows),
            "rejected": [spool.count] * len(rows),
            "rows_in_records": [stats["rows_in_records"]] * len(rows),
        }, schema=_REPORT_SCHEMA)

    # -- Examples -----------------------------------------------------------------------------
    def _example_records(self, batches, spool: _RejectSpool, stats: dict) -> Iterator[pa.Array]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            stats["input_rows"] += batch.num_rows
            reasons, raw = self.checker.reasons(batch)
            bad = pa.array(reasons, pa.string()).is_valid().to_numpy(zero_copy_only=False)
            good_idx = np.flatnonzero(~bad)
            records, refused = self._encode(batch, good_idx)
            for i, why in refused.items():
                reasons[i] = why
                bad[i] = True
            for row in self.checker.rejects(batch, np.flatnonzero(bad), reasons, raw):
                spool.add(row)
            if len(records):
                stats["records"] += len(records)
                yield records

    def _encode(self, batch: pa.RecordBatch, good_idx: np.ndarray) -> tuple[pa.Array, dict]:
        """Encode the good rows; a row the encoder still refuses becomes a reject (row by row)."""
        if len(good_idx) == 0:
            return pa.array([], pa.binary()), {}
        good = batch if len(good_idx) == batch.num_rows else batch.take(pa.array(good_idx, pa.int64()))
        try:
            return codec.encode_examples(good, self.schema), {}
        except (ValueError, TypeError, pa.ArrowException):
            pass
        parts, refused = [], {}
        for j, i in enumerate(good_idx):
            try:
                parts.append(_as_binary(codec.encode_examples(good.slice(j, 1), self.schema)))
            except (ValueError, TypeError, pa.ArrowException) as e:
                refused[int(i)] = f"cannot encode: {e}"
        return (pa.concat_arrays(parts) if parts else pa.array([], pa.binary())), refused

    # -- SequenceExamples ---------------------------------------------------------------------
    def _sequence_records(self, batches, spool: _RejectSpool, stats: dict) -> Iterator[pa.Array]:
        tail: pa.RecordBatch | None = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            stats["input_rows"] += batch.num_rows
            batch = self._with_reasons(batch)
            buf = batch if tail is None or tail.num_rows == 0 else pa.concat_batches([tail, batch])
            done, tail = self._split_open_group(buf)
            if done is not None and done.num_rows:
                out = self._encode_units(done, spool, stats)
                if out is not None:
                    yield out
        if tail is not None and tail.num_rows:
            out = self._encode_units(tail, spool, stats)
            if out is not None:
                yield out

    def _with_reasons(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch's feature and position columns plus REASON and RAW (row-level problems)."""
        reasons, raw = self.checker.reasons(batch)
        names = [f.name for f in self.schema.input_features] + [SOURCE, LINE, OFFSET]
        cols = [batch.column(batch.schema.get_field_index(n)) for n in names]
        raw_col = pa.array([raw.get(i) for i in range(batch.num_rows)], pa.string()) if raw else \
            pa.nulls(batch.num_rows, pa.string())
        return pa.RecordBatch.from_arrays(cols + [raw_col, pa.array(reasons, pa.string())],
                                          names=names + [RAW, REASON])

    def _unit_starts(self, batch: pa.RecordBatch) -> np.ndarray:
        """Row indices where a record (a group, or a max_steps piece of one) starts."""
        n = batch.num_rows
        key = batch.column(batch.schema.get_field_index(self.schema.group_by))
        new_group = np.ones(n, dtype=bool)
        if n > 1:
            same = pc.fill_null(pc.equal(key.slice(1), key.slice(0, n - 1)), False)
            new_group[1:] = ~same.to_numpy(zero_copy_only=False)
        group_start = np.flatnonzero(new_group)
        pos = np.arange(n) - group_start[np.cumsum(new_group) - 1]
        return np.flatnonzero(new_group | (pos % self.max_steps == 0))

    def _split_open_group(self, buf: pa.RecordBatch) -> tuple[pa.RecordBatch | None, pa.RecordBatch]:
        """(complete records, the last record, which may continue in the next batch)."""
        starts = self._unit_starts(buf)
        cut = int(starts[-1])
        if cut == 0:
            return None, buf
        return buf.slice(0, cut), buf.slice(cut)

    def _encode_units(self, batch: pa.RecordBatch, spool: _RejectSpool, stats: dict) -> pa.Array | None:
        """Encode the complete records in ``batch``; spool the rows of rejected ones."""
        s = self.schema
        n = batch.num_rows
        starts = self._unit_starts(batch)
        sizes = np.diff(np.append(starts, n))
        unit_of = np.repeat(np.arange(len(starts)), sizes)
        why: dict[int, str] = {}  # unit -> why it is rejected
        reason = batch.column(batch.schema.get_field_index(REASON))
        if reason.null_count < n:
            idx = np.flatnonzero(reason.is_valid().to_numpy(zero_copy_only=False))
            for i, text in zip(idx, _binary_list(reason.take(pa.array(idx, pa.int64())))):
                why.setdefault(int(unit_of[i]), f"{_text(text)} (line {self._line(batch, i)})")
        key = batch.column(batch.schema.get_field_index(s.group_by))
        for i in np.flatnonzero(key.is_null().to_numpy(zero_copy_only=False)):
            why.setdefault(int(unit_of[i]), f"group_by feature {s.group_by!r} is null")
        first = pa.array(starts[unit_of], pa.int64())
        for f in s.context:
            if f.name == s.group_by:
                continue
            col = batch.column(batch.schema.get_field_index(f.name))
            for i in np.flatnonzero(~_rows_equal(col, col.take(first))):
                u = int(unit_of[i])
                if u not in why:
                    why[u] = (f"context feature {f.name!r} differs within the group: "
                              f"{_describe(col[int(i)].as_py())} at line {self._line(batch, i)}, "
                              f"{_describe(col[int(starts[u])].as_py())} in its first row")
        good_units = np.ones(len(starts), dtype=bool)
        good_units[list(why)] = False
        grouped = self._group(batch, unit_of, sizes, good_units)
        if grouped is not None:
            errors = codec.row_errors(grouped, s)  # per record: null steps, lengths, required
            if any(e is not None for e in errors):
                good_ids = np.flatnonzero(good_units)
                keep = np.array([e is None for e in errors], dtype=bool)
                for u, e in zip(good_ids[~keep], (e for e in errors if e is not None)):
                    why[int(u)] = e
                good_units[good_ids[~keep]] = False
                grouped = grouped.filter(pa.array(keep))
        self._spool_rejects(batch, unit_of, why, spool)
        if grouped is None or grouped.num_rows == 0:
            return None
        stats["records"] += grouped.num_rows
        stats["rows_in_records"] += int(sizes[good_units].sum())
        return _as_binary(codec.encode_sequence_examples(grouped, s))

    def _group(self, batch, unit_of, sizes, good_units) -> pa.RecordBatch | None:
        """One row per good unit: context from its first row, each sequence column as list of steps."""
        if not good_units.any():
            return None
        sub = batch.filter(pa.array(good_units[unit_of]))
        offsets = np.concatenate([[0], np.cumsum(sizes[good_units])])
        first = pa.array(offsets[:-1], pa.int64())
        cols, names = [], []
        for f in self.schema.context:
            cols.append(sub.column(sub.schema.get_field_index(f.name)).take(first))
            names.append(f.name)
        for f in self.schema.sequence:
            steps = sub.column(sub.schema.get_field_index(f.name))
            cols.append(pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), steps))
            names.append(f.name)
        return pa.RecordBatch.from_arrays(cols, names=names)

    def _spool_rejects(self, batch, unit_of, why: dict, spool: _RejectSpool) -> None:
        if not why:
            return
        s = self.schema
        bad_unit = np.zeros(int(unit_of[-1]) + 1, dtype=bool)
        bad_unit[list(why)] = True
        rows = np.flatnonzero(bad_unit[unit_of])
        sub = batch.take(pa.array(rows, pa.int64()))
        meta = _rows_as_dicts(sub, list(_REJECT_COLUMNS))
        values = _rows_as_dicts(sub, [f.name for f in s.input_features])
        for m, v, u in zip(meta, values, unit_of[rows]):
            if m[RAW] is None:
                m[RAW] = self.checker.raw_text(v, m[SOURCE])
            if m[REASON] is None:
                m[REASON] = (f"rejected with its group ({s.group_by}={_describe(v[s.group_by])}), "
                             f"which holds a bad row: {why[int(u)]}")
            spool.add(_reject_json(m))

    @staticmethod
    def _line(batch: pa.RecordBatch, i: int) -> Any:
        return batch.column(batch.schema.get_field_index(LINE))[int(i)].as_py()


_REPORT_SCHEMA = pa.schema([("kind", pa.string()), ("partition", pa.int64()), ("attempt", pa.string()),
                            ("temp_path", pa.string()), ("final_name", pa.string()), ("records", pa.int64()),
                            ("bytes", pa.int64()), ("input_rows", pa.int64()), ("rejected", pa.int64()),
                            ("rows_in_records", pa.int64())])


def _reject_json(row: dict) -> dict:
    return {"source": row[SOURCE], "line": row[LINE], "offset": row[OFFSET], "raw": row[RAW],
            "reason": row[REASON]}


def _first_attempt_of(spec: str, part: int, attempt_number: int) -> bool:
    """Does a fault-injection switch (``0,3``, ``*`` or ``all``) pick this task attempt?"""
    if not spec or attempt_number != 0:
        return False
    if spec.strip() in ("*", "all"):
        return True
    return str(part) in {p.strip() for p in spec.split(",")}


def _after_first_batch(records: Iterator[pa.Array], fault) -> Iterator[pa.Array]:
    """Fault injection: pass the batches to the writer, calling ``fault()`` right after the first
    (an empty partition has nothing to fail in the middle of)."""
    records = iter(records)
    for batch in records:
        yield batch
        fault()
        break
    yield from records


def _die(attempt: str) -> None:
    """Kill this Python worker (the attempt fails mid-write)."""
    sys.stderr.write(f"tfrecord-io: {FAIL_FIRST_ATTEMPT_ENV}: killing task attempt {attempt} mid-write\n")
    sys.stderr.flush()
    os._exit(86)


def _stall(attempt: str, temporary: str, seconds: float = STALL_S) -> None:
    """Sleep (a straggler) until Spark kills this Python worker, for up to ``seconds``; fail if
    ``temporary`` is gone by then."""
    sys.stderr.write(f"tfrecord-io: {STALL_FIRST_ATTEMPT_ENV}: stalling task attempt {attempt} mid-write "
                     f"(python pid {os.getpid()})\n")
    sys.stderr.flush()
    started = time.monotonic()
    gone = False
    while not gone and time.monotonic() - started < seconds:
        time.sleep(0.5)
        gone = not fs.exists(temporary)
    sys.stderr.write(f"tfrecord-io: {STALL_FIRST_ATTEMPT_ENV}: task attempt {attempt} woke after "
                     f"{time.monotonic() - started:.1f}s\n")
    sys.stderr.flush()
    if gone:
        raise RuntimeError(f"{temporary} is gone (the job was committed or aborted); stalled task attempt "
                           f"{attempt} writes nothing more")


# ---------------------------------------------------------------------------------------------
# Shipping the package to executors
# ---------------------------------------------------------------------------------------------
def package_zip(directory: str) -> str:
    """Zip the ``tfrecord_io`` package (for ``--py-files`` / ``SparkContext.addPyFile``); return its path."""
    import tfrecord_io

    root = os.path.dirname(os.path.abspath(tfrecord_io.__file__))
    path = os.path.join(directory, "tfrecord_io.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for base, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith((".pyc", ".pyo")):
                    continue
                full = os.path.join(base, name)
                z.write(full, os.path.join("tfrecord_io", os.path.relpath(full, root)))
    return path
