"""The Beam pipeline: CSV / JSON Lines -> TFRecords of tf.train.Example or SequenceExample.

Same contract as the Spark job (``tfrecord_io.storage.output``): the same schema, parser
(:mod:`tfrecord_io.conversion.parsing`), encoder (:mod:`tfrecord_io.core.codec`) and output layout
(``part-*``, ``_rejects/``, ``_manifest.json``, ``_SUCCESS`` last), the same reject threshold
and the same refusal to overwrite.  Entry points: :func:`run_conversion` (library, with
:class:`tfrecord_io.conversion.options.ConversionOptions`) and ``python -m tfrecord_io.beam`` (command line;
``pipelines/to_tfrecord.py`` is the same).

Pipeline (Example records)::

    Create(input files; small ones in groups) -> ReadFile: parsing batches -> rejects
                             | typed Arrow rows, dealt to the shards (conversion.dealing)
                             | in writer groups of small shards; spilled (not on Dataflow)
                             v
                GroupByKey(writer group) -> WriteShard: encode_examples + write_shard, per shard
                             -> {shard files} + {reject files} + {row counts} -> report

Writer groups: shards of little input are dealt and written together, ``shards_per_writer``
consecutive shards a group (:func:`tfrecord_io.conversion.dealing.shards_per_writer`: about 32 MB of
input a group, at most 1,024 shards; a shard of 32 MB or more is its own group).  A piece then
carries each row's shard; the writer permutes each shard's rows with the shard's own generator,
encodes the group in one pass and writes its shards into one attempt directory, each shard's
record index reported inline (no ``_index`` file).  The same rows reach the same shards in the same
order as with one shard a writer; 10,000 shards cost ten shuffle keys and ten writer elements,
not 10,000 (1M rows into 10,000 shards: 68 s -> ~10 s; one shard ~5 s).

Memory on the in-process runner: Beam's ``FnApiRunner`` (what ``DirectRunner`` falls back to, and
the default of ``tfrecord-io convert --engine beam``) runs one stage at a time and keeps a stage's
whole output in memory across a ``GroupByKey`` -- every dealt piece, the whole data set (979 MB of
resident memory for 1M rows, 7.9 GB for 16M).  So (:func:`spills`) each read task appends its pieces to a spill file of its own under the output's
``_temporary/`` and sends only ``(path, offset, length)`` through the shuffle
(:mod:`tfrecord_io.conversion.spill`); the writers read them back in key order.  The peak is then a
read task's buffers plus a writer's window (``dealing.HOLD_BYTES``), whatever the number of rows
(~0.6 GB at 1M, 4M and 16M rows), for a scratch disk about the size of the typed rows until the
commit removes ``_temporary``.  The portable runners (Flink, Spark job servers) spill too: their
shuffle is on disk, but a key's values reach the worker as one element, whole in the job
server's heap (:func:`spills`).  Only Dataflow's pieces go through the shuffle as bytes.

SequenceExample records add a ``GroupByKey`` on the ``group_by`` value before encoding:
``ReadFile`` emits each group's rows of a batch as one element keyed by the group (and each
rejected row whose key is known, so that it can reject its group), and
``BuildSequenceExamples`` sorts each group's steps by ``order_by`` (nulls first), ties by file,
then line, and builds the records with :mod:`tfrecord_io.conversion.grouping` -- the rules
the Spark job follows too: ``--max-steps`` pieces of huge groups, the context from a record's
first step, a record with a differing context value or a rejected row among its steps rejected
whole (a row without a ``group_by`` key is rejected on its own).  All records of a group go to
one shard (a stable hash of the key), consecutively, for the same ``GroupByKey(shard) ->
WriteShard`` tail.

Memory: Beam's Python SDK has no sorted-values ``GroupByKey``, so a group's rows are held by
one worker while its steps are sorted (as compact tuples, ~100 bytes per step); the records
built from them are at most ``--max-steps`` steps each.

Exactly-once: every write goes to ``<output>/_temporary/beam-<run>-<uuid>/`` with a fresh
uuid per shard write (a retried bundle writes a new attempt).  The last step writes a
*report* (``_temporary/beam-<run>.report.json``): the files that the committed bundles
wrote, and the row counts.  After the pipeline succeeds, the driver reads that report and
calls :func:`tfrecord_io.storage.output.commit`, which moves exactly those files into place, deletes
``_temporary`` (with any failed or duplicate attempts), checks the reject fraction and
writes ``_manifest.json`` and then ``_SUCCESS``.

Filesystems: workers and driver alike read and write through :mod:`tfrecord_io.storage.fs`
(local paths, ``file://``, and ``hdfs://`` over native RPC with hdfs-native), the code the Spark
job uses, so both engines read the same files, write the same bytes, commit identically and take
HDFS credentials the same way.  ``hdfs://`` URIs name their NameNode (or a nameservice of
``HADOOP_CONF_DIR``); Beam's WebHDFS options ``--hdfs_host``/``--hdfs_port`` are not used, and
``--hdfs_user`` acts as ``HADOOP_USER_NAME`` (simple authentication) on the driver and the workers
when that is not set.

Runner-agnostic: transforms carry everything they need (the plan, the HDFS user) and pickle; they read no driver state and use no local temp paths.  Beam 2.77's
``DirectRunner`` is a ``SwitchingDirectRunner`` that first tries Prism (downloading a binary)
and falls back to the in-process ``FnApiRunner``, saying so at INFO only; pass
``--runner=FnApiRunner`` to skip the Prism attempt.  :func:`runner_that_ran` tells from the
pipeline result which runner actually ran, and the final log line says it.

Counters (Beam metrics, namespace ``tfrecord_io``): ``rows_read``, ``rows_rejected``,
``records_written``, ``bytes_written``, ``files_read`` and ``sequence_examples``.  The driver
takes its totals from the report, checks them against the committed counters where the runner
reports those, and logs one final line: runner, rows read, records, files, rejects.

Parallelism: a file is read by one worker (CSV records cannot be found from an arbitrary
offset when quoted fields may hold line breaks); its rows are then spread over the shards, so
encoding and writing run in parallel even for a single large file.

CSV line breaks: as in the Spark job, records are lines unless ``--multiline``; then quoted
fields may hold line breaks (pyarrow streams them: unlike Spark's ``multiLine``, files are
still never read whole).  See :mod:`tfrecord_io.conversion.parsing` for every parsing rule.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
import uuid
import zlib
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

# Importing Beam logs "apitools not found, and bigquery client libraries are not available" at
# WARNING on the root logger: it concerns Google Cloud I/O, which this pipeline never uses.
logging.getLogger().addFilter(lambda record: "apitools not found" not in record.getMessage())

import apache_beam as beam  # noqa: E402 - after the filter above
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import HadoopFileSystemOptions, PipelineOptions, StandardOptions
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from tfrecord_io.conversion import dealing, grouping, parsing, small_files, spill
from tfrecord_io.conversion.failure import ConversionError, worker_error
from tfrecord_io.conversion.options import ConversionOptions
from tfrecord_io.conversion.plan import Plan, plan_conversion
from tfrecord_io.core.codec import encode_examples, encode_framed, present_counts
from tfrecord_io.core.schema import Schema
from tfrecord_io.storage import fs, output
from tfrecord_io.storage.replace import CommitError

__all__ = [
    "ConversionOptions", "ConversionResult", "JAVA_RUNNER_OPTIONS", "METRICS_NAMESPACE", "Plan",
    "build_pipeline", "pipeline_options", "run_conversion", "runner_that_ran",
]

log = logging.getLogger(__name__)

METRICS_NAMESPACE = "tfrecord_io"
_GROUP_FLUSH_ROWS = 65_536  # rows of whole groups buffered before one build (encode) call


# ---------------------------------------------------------------------------------------
# Pipeline options: Beam's own, by name, and nothing else
# ---------------------------------------------------------------------------------------
def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


# Options of Beam's Java runners (the Flink 1.19 and Spark 3 job servers of Beam 2.62, and Java's
# PortablePipelineOptions) that Beam's Python parser does not define: Python passes them on to the
# job server, which does (``--flink_conf_dir=...``).  Spelled as Python spells them (snake_case);
# the getters of FlinkPipelineOptions, SparkPipelineOptions, SparkCommonPipelineOptions and
# PortablePipelineOptions, as ``javap`` lists them from the jars ``flink-local fetch`` resolves.
JAVA_RUNNER_OPTIONS = frozenset(_snake(n) for n in """
    FlinkMaster Parallelism MaxParallelism CheckpointingInterval CheckpointingMode CheckpointTimeoutMillis
    MinPauseBetweenCheckpoints NumConcurrentCheckpoints FailOnCheckpointingErrors FinishBundleBeforeCheckpointing
    UnalignedCheckpointEnabled ForceUnalignedCheckpointEnabled ShutdownSourcesAfterIdleMs NumberOfExecutionRetries
    JobCheckIntervalInSecs AttachedMode ExecutionRetryDelay ObjectReuse OperatorChaining StateBackendFactory
    StateBackend StateBackendStoragePath DisableMetrics ExternalizedCheckpointsEnabled
    RetainExternalizedCheckpointsOnCancellation MaxBundleSize MaxBundleTimeMills LatencyTrackingInterval
    AutoWatermarkInterval ExecutionModeForBatch SavepointPath AllowNonRestoredState
    AutoBalanceWriteFilesShardingEnabled ReportCheckpointDuration ReIterableGroupByKeyResult FasterCopy
    FlinkConfDir FileInputSplitMaxSizeMB EnableStableInputDrain UseDataStreamForBatch
    BatchIntervalMillis MinReadTimeMillis MaxRecordsPerBatch ReadTimePercentage CheckpointDurationMillis BundleSize
    UsesProvidedSparkContext CacheDisabled SparkMaster CheckpointDir StorageLevel EnableSparkMetricSinks
    JobEndpoint JobServerTimeout DefaultEnvironmentType DefaultEnvironmentConfig SdkWorkerParallelism
    EnvironmentCacheMillis EnvironmentExpirationMillis LoadBalanceBundles OutputExecutablePath EnvironmentOptions
    EnableHeapDumps""".split())


def pipeline_options(args: Sequence[str]) -> PipelineOptions:
    """Beam's pipeline options from ``args``; ValueError naming every argument that is none.

    Beam itself only WARNs about an argument it does not know and runs without it, so a second
    input file that the shell expanded from an unquoted glob (``--input data/*.csv``) would be
    dropped: here it stops the run before anything starts.  Allowed: every option that Beam's
    Python SDK defines, and :data:`JAVA_RUNNER_OPTIONS`, which it hands to a job server.
    """
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)  # noqa: SLF001 - how Beam's own get_all_options builds it
    for name in sorted(JAVA_RUNNER_OPTIONS):
        if f"--{name}" not in parser._option_string_actions:  # noqa: SLF001
            parser.add_argument(f"--{name}", nargs="?")
    try:
        _, unknown = parser.parse_known_args(list(args))
    except SystemExit as e:  # a Beam option with a bad value: argparse has printed why
        raise ValueError("a Beam pipeline option has a bad value (see above)") from e
    if unknown:
        files = [a for a in unknown if not a.startswith("-")]
        hint = (f"; {', '.join(files)} looks like a file: a glob the shell expanded? quote it "
                f"(--input 'data/*.csv') or join files with commas (--input a.csv,b.csv)" if files else "")
        raise ValueError(f"unknown argument(s) {' '.join(unknown)}: neither an option of the conversion nor a "
                         f"Beam pipeline option{hint}")
    return PipelineOptions(list(args))


# ---------------------------------------------------------------------------------------
# What every transform carries
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Job:
    """What every transform needs (picklable): the plan, this run's id, the HDFS user, the faults."""

    plan: Plan
    run_id: str
    hdfs_user: str | None = None  # --hdfs_user: HADOOP_USER_NAME where that is not set
    faults: object = None  # fault injection (tests): tfrecord_io.testing.faults
    spill: bool = False  # pieces go through the shuffle as references to spill files (every runner but Dataflow)
    shards_per_writer: int = 1  # consecutive shards dealt and written together (dealing.shards_per_writer)

    @property
    def conv(self) -> ConversionOptions:
        return self.plan.options

    @property
    def schema(self) -> Schema:
        return self.plan.schema

    @property
    def num_shards(self) -> int:
        return self.plan.num_shards

    @property
    def splits(self):
        return self.plan.splits

    @property
    def writers(self) -> int:
        """The number of writer groups: the keys of the shuffle to the writers."""
        return dealing.writer_groups(self.num_shards, self.shards_per_writer)

    def group_shards(self, group: int) -> range:
        """The shards of writer group ``group``."""
        k = self.shards_per_writer
        return range(group * k, min(self.num_shards, (group + 1) * k))

    def spill_writer(self) -> spill.SpillWriter | None:
        """A fresh spill file for a task's pieces (None when this run does not spill)."""
        return spill.SpillWriter(output.attempt_dir(self.conv.output, self.attempt())) if self.spill else None

    def attempt(self) -> str:
        return f"beam-{self.run_id}-{uuid.uuid4().hex[:12]}"

    @property
    def report_path(self) -> str:
        return fs.join(self.conv.output, output.TEMPORARY, f"beam-{self.run_id}.report.json")


class _JobDoFn(beam.DoFn):
    """A DoFn of the conversion: it acts as the job's HDFS user in whatever process it runs."""

    def __init__(self, job: _Job):
        self.job = job

    def setup(self):
        if self.job.hdfs_user:
            os.environ.setdefault("HADOOP_USER_NAME", self.job.hdfs_user)


def _global(value) -> WindowedValue:
    """An output of ``finish_bundle`` (which has no input element to take a window from)."""
    return WindowedValue(value, GlobalWindow().max_timestamp(), (GlobalWindow(),))


# ---------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------
REJECTS_TAG, STATS_TAG = "rejects", "stats"


class ReadFile(_JobDoFn):
    """Input files (one, or small ones parsed together: :mod:`tfrecord_io.conversion.small_files`) ->
    parsed rows (see module doc), reject lists and each file's row count.

    Main output: Example records: ``(shard, ipc rows)`` slices; SequenceExample records:
    ``(group key, ("rows", source, lines, raws, columns))`` per group per batch, and
    ``(group key, ("bad", source, line, raw, reason, order))`` per rejected row of a known group.
    Tagged outputs: ``rejects`` (``(reject shard, [reject dicts])``), ``stats`` (rows per file).
    """

    def __init__(self, job: _Job):
        super().__init__(job)
        self.rows_read = Metrics.counter(METRICS_NAMESPACE, "rows_read")
        self.rows_rejected = Metrics.counter(METRICS_NAMESPACE, "rows_rejected")
        self.files_read = Metrics.counter(METRICS_NAMESPACE, "files_read")

    def setup(self):
        super().setup()
        self._next_shard = int.from_bytes(os.urandom(2), "little")

    def _shard(self) -> int:
        self._next_shard += 1
        return self._next_shard % self.job.num_shards

    def process(self, element):
        paths = list(element)
        spilled = self.job.spill_writer()
        dealer = dealing.Dealer(self.job.num_shards, first=zlib.crc32(paths[0].encode("utf-8", "backslashreplace")),
                                origin=paths[0], shards_per_piece=self.job.shards_per_writer, spill=spilled)
        try:
            yield from self._read(paths, dealer)
        finally:
            if spilled is not None:
                spilled.close()

    def _read(self, paths, dealer):
        conv, schema = self.job.conv, self.job.schema
        sequence = schema.record_type == "sequence_example"
        keys = (schema.group_by, schema.order_by or schema.group_by) if sequence else ()
        input_rows = dict.fromkeys(paths, 0)
        split_by = self.job.splits.feature if self.job.splits is not None else None

        for pb in small_files.read_group(paths, schema, conv.input_format, headers=self.job.plan.headers,
                                         multiline=conv.multiline, block_size=conv.block_size,
                                         max_record_bytes=conv.max_record_bytes,
                                         keep_raw=sequence or bool(split_by), reject_values=keys):
            input_rows[pb.source] += pb.input_rows
            self.rows_read.inc(pb.input_rows)
            if split_by:
                pb = _reject_unsplittable(pb, split_by)
            rejects = pb.rejects
            if sequence and rejects:
                # A rejected row whose group is known rejects its group's record: send it there.
                alone = []
                for reject, values in zip(rejects, pb.reject_values):
                    key = None if values is None else values.get(schema.group_by)
                    if key is None:
                        alone.append(reject)
                    else:
                        order = values.get(schema.order_by) if schema.order_by else None
                        yield key, ("bad", reject["source"], reject["line"], reject["raw"], reject["reason"],
                                    order)
                rejects = alone
            if rejects:
                self.rows_rejected.inc(len(rejects))
                yield beam.pvalue.TaggedOutput(REJECTS_TAG, (self._shard(), rejects))
            if not pb.rows.num_rows:
                continue
            if sequence:
                yield from _split_groups(pb, schema)
            else:
                yield from dealer.deal(pb.rows)
        yield from dealer.finish()
        for path, rows in input_rows.items():
            self.files_read.inc()
            yield beam.pvalue.TaggedOutput(STATS_TAG, {"kind": "input", "path": path, "rows": rows})


def _reject_unsplittable(pb: parsing.ParsedBatch, feature: str) -> parsing.ParsedBatch:
    """Rows with no value for the ``--split-by`` feature become rejects (they have no split)."""
    null = pb.rows.column(feature).is_null().to_numpy(zero_copy_only=False)
    if not null.any():
        return pb
    raw = pb.raw.to_pylist()
    why = f"feature {feature!r}: no value to split by (--split-by {feature})"
    extra = [parsing.make_reject(pb.source, int(pb.lines[i]), raw[i], why) for i in np.flatnonzero(null)]
    keep = pa.array(~null)
    return dataclasses.replace(pb, rows=pb.rows.filter(keep), lines=pb.lines[~null], raw=pb.raw.filter(keep),
                               rejects=pb.rejects + extra)


def _split_groups(pb: parsing.ParsedBatch, schema: Schema) -> Iterator[tuple]:
    """The rows of a batch, one element per ``group_by`` value: (key, ("rows", source, lines, raws, columns))."""
    import pyarrow.compute as pc

    rows = pb.rows
    order = pc.sort_indices(rows.column(schema.group_by))
    rows = rows.take(order)
    order_np = order.to_numpy()
    lines = pb.lines[order_np].tolist()
    raws = pb.raw.take(order).to_pylist() if pb.raw is not None else [None] * rows.num_rows
    columns = [rows.column(f.name).to_pylist() for f in schema.input_features]
    keys = columns[[f.name for f in schema.input_features].index(schema.group_by)]
    start = 0
    n = len(keys)
    for i in range(1, n + 1):
        if i == n or keys[i] != keys[start]:
            yield keys[start], ("rows", pb.source, lines[start:i], raws[start:i], [c[start:i] for c in columns])
            start = i


class _Step:
    """One input row of a group: a converted step, or a rejected row (``reason``) of that group."""

    __slots__ = ("order", "source", "line", "raw", "values", "reason")

    def __init__(self, order, source, line, raw, values, reason):
        self.order, self.source, self.line, self.raw, self.values, self.reason = (
            order, source, line, raw, values, reason)

    def sort_key(self):
        # Spark's order: order_by ascending with nulls first, then file, then line.
        return (self.order is not None, self.order if self.order is not None else 0, self.source, self.line or 0)


def _shard_of(key, num_shards: int) -> int:
    """A stable shard for a group key (Python's hash() of a str differs per process)."""
    return zlib.crc32(repr(key).encode("utf-8", "backslashreplace")) % num_shards


class BuildSequenceExamples(_JobDoFn):
    """(group key, its rows) -> encoded SequenceExamples, keyed by the group's shard.

    The steps of each group are sorted here (see the module doc); whole groups are buffered
    and built together by :func:`tfrecord_io.conversion.grouping.build_sequence_examples`, the
    rules the Spark job follows too (``max_steps`` pieces, context, rejected rows).
    """

    def __init__(self, job: _Job):
        super().__init__(job)
        self.rows_rejected = Metrics.counter(METRICS_NAMESPACE, "rows_rejected")
        self.records_built = Metrics.counter(METRICS_NAMESPACE, "sequence_examples")

    def setup(self):
        super().setup()
        schema = self.job.schema
        self._arrow = parsing.input_schema(schema)
        names = self._arrow.names
        self._order_at = names.index(schema.order_by) if schema.order_by else None
        self._key_at = names.index(schema.group_by)
        self._next_shard = int.from_bytes(os.urandom(2), "little")

    def start_bundle(self):
        self._steps: list[_Step] = []  # whole groups, each sorted, one after another

    def process(self, element):
        key, pieces = element
        steps = []
        for piece in pieces:
            if piece[0] == "bad":
                _, source, line, raw, reason, order = piece
                steps.append(_Step(order, source, line, raw, None, reason))
                continue
            _, source, lines, raws, columns = piece
            for j, (line, raw) in enumerate(zip(lines, raws)):
                values = [c[j] for c in columns]
                order = values[self._order_at] if self._order_at is not None else None
                steps.append(_Step(order, source, line, raw, values, None))
        steps.sort(key=_Step.sort_key)
        for step in steps:
            if step.values is None:  # a rejected row: its group (and order) known, nothing else
                step.values = [None] * len(self._arrow.names)
                step.values[self._key_at] = key
                if self._order_at is not None:
                    step.values[self._order_at] = step.order
        self._steps += steps
        if len(self._steps) >= _GROUP_FLUSH_ROWS:
            yield from self._flush(in_finish_bundle=False)

    def finish_bundle(self):
        yield from self._flush(in_finish_bundle=True)

    def _reject_shard(self) -> int:
        self._next_shard += 1
        return self._next_shard % self.job.num_shards

    def _flush(self, in_finish_bundle: bool):
        def emit(value, tag=None):
            value = _global(value) if in_finish_bundle else value
            return value if tag is None else beam.pvalue.TaggedOutput(tag, value)

        steps, self._steps = self._steps, []
        if not steps:
            return
        schema = self.job.schema
        batch = pa.RecordBatch.from_arrays(
            [pa.array([s.values[i] for s in steps], type=f.type) for i, f in enumerate(self._arrow)],
            schema=self._arrow)
        out = grouping.build_sequence_examples(batch, schema, self.job.conv.max_steps,
                                               reasons=[s.reason for s in steps], lines=[s.line for s in steps])
        if out.rejected:
            rejects = [parsing.make_reject(steps[i].source, steps[i].line, steps[i].raw, why)
                       for i, why in sorted(out.rejected.items())]
            self.rows_rejected.inc(len(rejects))
            yield emit((self._reject_shard(), rejects), REJECTS_TAG)
        if len(out.records):
            self.records_built.inc(len(out.records))
            shards = np.array([_shard_of(steps[int(i)].values[self._key_at], self.job.num_shards)
                               for i in out.record_rows], dtype=np.int64)
            per = self.job.shards_per_writer
            groups = shards // per
            spilled = self.job.spill_writer()
            try:
                for group in np.unique(groups):
                    rows = np.flatnonzero(groups == group)  # in order: a group's pieces stay consecutive
                    columns, names = [out.records.take(pa.array(rows))], ["record"]
                    if per > 1:
                        columns.append(pa.array(shards[rows].astype(np.int32)))
                        names.append(dealing.SHARD_COLUMN)
                    piece = pa.RecordBatch.from_arrays(columns, names=names)
                    yield emit((int(group), (None, dealing.to_ipc(piece) if spilled is None
                                             else spilled.put_batches([piece]))))
            finally:
                if spilled is not None:
                    spilled.close()
        yield emit({"kind": "groups", "records": len(out.records), "rows": out.rows_in_records}, STATS_TAG)


class WriteShard(_JobDoFn):
    """(writer group, pieces) -> one TFRecord file per shard of the group, all in one fresh attempt dir.

    Pieces are (key, IPC bytes or a spill reference: :mod:`tfrecord_io.conversion.spill`) of typed
    rows (Example: dealt by :mod:`tfrecord_io.conversion.dealing`, encoded here) or of encoded records
    (SequenceExample); a group of several shards has each row's shard in ``dealing.SHARD_COLUMN``.
    ``None`` pieces only make sure every group has an element.  The group's rows are taken in
    windows of ``dealing.HOLD_BYTES`` (:func:`~tfrecord_io.conversion.dealing.windows`), each split
    by shard and each shard's part permuted by the shard's own generator
    (:func:`~tfrecord_io.conversion.dealing.split_window`), then encoded in one pass: a shard gets
    the rows, in the order, it got when it was written alone.  When the group takes one window
    (the rule: groups are sized for it), each shard is written straight from it; a single shard is
    written window by window; several shards over several windows go through a scratch file under
    the attempt, shard parts in window order, and are then written one by one.
    """

    def __init__(self, job: _Job):
        super().__init__(job)
        self.records_written = Metrics.counter(METRICS_NAMESPACE, "records_written")
        self.bytes_written = Metrics.counter(METRICS_NAMESPACE, "bytes_written")

    def process(self, element):
        group, pieces = element
        job = self.job
        example = job.schema.record_type == "example"
        shuffled = example and job.conv.record_order == "shuffled"
        shards = job.group_shards(group)
        given = (piece for piece in pieces if piece is not None)
        if job.spill and shuffled:  # references are small: read the spill files in key order
            given = sorted(given, key=lambda kv: kv[0])
        rngs = {} if shuffled else None
        present: Counter = Counter()
        attempt = job.attempt()
        windows = dealing.windows(spill.read_pieces(given), dealing.HOLD_BYTES, by_key=shuffled)

        def encoded(rows: pa.Table, framed: bool = False) -> Iterator:
            """The records of typed rows (Example) or the record column (SequenceExample), in chunks;
            ``framed``: Examples encoded straight into framed records (a shard without splits)."""
            if not example:
                yield from rows.column(0).chunks
                return
            for batch in rows.to_batches(max_chunksize=65_536):
                present.update(present_counts(batch, job.schema))
                yield encode_framed(batch, job.schema) if framed else encode_examples(batch, job.schema)

        def by_shard(window) -> list[tuple[int, pa.ChunkedArray]]:
            """A window's encoded records, per shard of the group (in shard order), encoded in one pass."""
            rows, spans = dealing.split_window(window, shards[0], rngs)
            if not spans:
                return []
            records = pa.chunked_array(list(encoded(rows)))
            return [(shard, records.slice(start, n)) for shard, start, n in spans]

        written: list[output.WrittenFile] = []
        if len(shards) == 1:  # one shard: window by window, each encoded as it is written
            def streamed():
                for window in windows:
                    yield from encoded(dealing.split_window(window, shards[0], rngs)[0], framed=job.splits is None)

            written += self._write(shards[0], streamed(), attempt)
        else:
            first = next(windows, None)
            second = next(windows, None) if first is not None else None
            if second is None:  # one window (or none; groups are sized for one): every shard straight from it
                got = dict(by_shard(first)) if first is not None else {}
                for shard in shards:
                    written += self._write(shard, got[shard].chunks if shard in got else [], attempt)
            else:  # several windows: each shard's parts in a scratch file first, in window order
                refs: dict[int, list] = {shard: [] for shard in shards}
                scratch_dir = fs.join(output.attempt_dir(job.conv.output, attempt), "_scratch")
                with spill.SpillWriter(scratch_dir) as scratch:
                    for window in _chain(first, second, windows):
                        for shard, records in by_shard(window):
                            for chunk in records.chunks:
                                piece = pa.RecordBatch.from_arrays([chunk], names=["record"])
                                refs[shard].append((None, scratch.put_batches([piece])))
                for shard in shards:
                    parts = (b.column(0) for _, data in spill.read_pieces(refs[shard])
                             for b in dealing.from_ipc(data))
                    written += self._write(shard, parts, attempt)

        self.records_written.inc(sum(w.records for w in written))
        self.bytes_written.inc(sum(w.bytes for w in written))
        # One report item for the group's files (not one each: ten thousand shards are ten elements).
        yield {"kind": "records", "files": [output.written_file_dict(w) for w in written],
               "present": dict(present) if example and job.splits is None else None}

    def _write(self, shard: int, records, attempt: str) -> list[output.WrittenFile]:
        """Shard ``shard``'s file (or one per split) from its encoded record arrays."""
        job = self.job
        if job.faults is not None:
            records = job.faults.around_write(records, output=job.conv.output, shard=shard, attempt=attempt)
        name = output.shard_name(shard, job.num_shards, job.conv.compression)
        if job.splits is None:
            return [output.write_shard(records, job.conv.output, attempt, name, job.conv.compression, job.conv.level,
                                       inline_index=True)]  # the index in the report: no file of its own

        def assigned():
            for batch in records:
                which, _ = job.splits.assign(batch.to_pylist())  # null split features were rejected
                yield batch, which

        return output.write_split_shards(assigned(), job.conv.output, attempt,
                                         [f"{split}/{name}" for split in job.splits.names],
                                         job.conv.compression, job.conv.level)


def _chain(first, second, rest):
    yield first
    yield second
    yield from rest


class WriteRejects(_JobDoFn):
    """(reject shard index, lists of reject dicts) -> one ``_rejects`` JSON Lines file."""

    def process(self, element):
        index, lists = element
        rows = (row for rejects in lists for row in rejects)
        written = output.write_rejects(rows, self.job.conv.output, self.job.attempt(), f"part-{index:05d}.jsonl")
        if written is not None:
            yield {"kind": "rejects", **output.written_file_dict(written)}


class WriteReport(_JobDoFn):
    """The list of everything the pipeline produced -> the report file the driver commits from."""

    def process(self, items):
        items = sorted(items, key=lambda d: json.dumps(d, sort_keys=True))
        with fs.open(self.job.report_path, "wb") as f:
            f.write(json.dumps(items).encode("utf-8"))
        yield len(items)


def build_pipeline(p: beam.Pipeline, job: _Job, files: list[tuple[str, int]]) -> beam.PCollection:
    """Add the conversion to ``p``: returns the PCollection of the report's item count."""
    sequence = job.schema.record_type == "sequence_example"
    read = (p
            | "ListInputs" >> beam.Create([tuple(g) for g in small_files.groups(
                sorted(files), schema=job.schema, input_format=job.conv.input_format, multiline=job.conv.multiline,
                headers=job.plan.headers, block_size=job.conv.block_size)])
            | "ReadFiles" >> beam.ParDo(ReadFile(job)).with_outputs(REJECTS_TAG, STATS_TAG, main="rows"))
    stats = [read[STATS_TAG]]
    rejects = [read[REJECTS_TAG]]
    if sequence:
        built = (read.rows
                 | "GroupByKey" >> beam.GroupByKey()
                 | "BuildSequenceExamples" >> beam.ParDo(BuildSequenceExamples(job)).with_outputs(
                     REJECTS_TAG, STATS_TAG, main="records"))
        pieces = built.records
        stats.append(built[STATS_TAG])
        rejects.append(built[REJECTS_TAG])
    else:
        pieces = read.rows
    every_shard = p | "EveryShard" >> beam.Create([(g, None) for g in range(job.writers)])
    shard_files = ((pieces, every_shard)
                   | "WithEmptyShards" >> beam.Flatten()
                   | "GroupByShard" >> beam.GroupByKey()
                   | "WriteShards" >> beam.ParDo(WriteShard(job)))
    reject_files = (rejects
                    | "AllRejects" >> beam.Flatten()
                    | "GroupRejects" >> beam.GroupByKey()
                    | "WriteRejects" >> beam.ParDo(WriteRejects(job)))
    return ((shard_files, reject_files, *stats)
            | "Everything" >> beam.Flatten()
            | "ToList" >> beam.combiners.ToList()
            | "WriteReport" >> beam.ParDo(WriteReport(job)))


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------
@dataclass
class ConversionResult:
    """What :func:`run_conversion` did: the manifest it committed (None if it did not commit)."""

    output: str
    totals: output.ConversionTotals
    runner: str
    manifest: dict | None
    metrics: dict = field(default_factory=dict)
    requested_runner: str | None = None
    input_rows_by_file: dict = field(default_factory=dict)
    seconds: float | None = None

    @property
    def ok(self) -> bool:
        return self.manifest is not None


def runner_that_ran(result, requested: str | None = None) -> str:
    """The runner that actually executed a pipeline, from its result object and the ``--runner``
    asked for (a portable result is Prism's only when DirectRunner, the default, chose it)."""
    module, name = type(result).__module__, type(result).__name__
    if "fn_api_runner" in module:
        return "FnApiRunner"
    if "prism" in module:
        return "PrismRunner"
    if "portable_runner" in module:
        if requested in (None, "", "DirectRunner", "direct"):
            return "PortableRunner (Prism, which DirectRunner chose)"
        return f"PortableRunner ({requested})"
    if "direct" in module:
        return "BundleBasedDirectRunner"
    if "dataflow" in module:
        return "DataflowRunner"
    return f"{module}.{name}"


#: Runners whose shuffle hands a key's values to the worker as a stream: their pieces go through
#: the shuffle as bytes.
STREAMED_SHUFFLE_RUNNERS = frozenset({"DataflowRunner", "TestDataflowRunner"})


def spills(options: PipelineOptions) -> bool:
    """Does a run with these options spill its dealt pieces (:mod:`tfrecord_io.conversion.spill`)?

    Every runner but Dataflow.  The in-process runners (``DirectRunner``: Prism or, offline, the
    ``FnApiRunner``) keep a whole stage's output in memory.  The portable runners (Flink's and Spark's job servers) shuffle on
    disk, but hand a key's grouped values to the SDK worker as one element, built whole in the job
    server's heap and decoded whole in Python: a shard's pieces, about 120 MB at 900,000 rows of
    17 columns.  On the local Flink of ``tfrecord-io flink-local`` (1 GB of heap) 16M rows ran the
    job server out of memory (``bench_scaling.py --flink``, 2026-12-05), and the Python peak grew
    with the rows.  Spilled, the shuffle carries ``(path, offset, length)`` references; the spill
    files live under the output's ``_temporary/``, on the output's filesystem, which every
    worker already writes its shards to.  Dataflow's shuffle streams a key's values
    (:data:`STREAMED_SHUFFLE_RUNNERS`)."""
    runner = _requested_runner(options) or StandardOptions.DEFAULT_RUNNER
    return runner.rsplit(".", 1)[-1] not in STREAMED_SHUFFLE_RUNNERS


def _requested_runner(options) -> str | None:
    runner = options.view_as(StandardOptions).runner
    return runner if isinstance(runner, str) else (type(runner).__name__ if runner is not None else None)


def _counters(result) -> dict[str, int]:
    try:
        counters = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    except Exception:  # noqa: BLE001 - a runner without metrics support: log without them
        return {}
    out: dict[str, int] = {}
    for c in counters:
        value = c.committed if c.committed is not None else c.attempted
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(value or 0)
    return out


@contextmanager
def as_hdfs_user(user: str | None):
    """Act as the HDFS user ``user`` (Beam's ``--hdfs_user``) unless ``HADOOP_USER_NAME`` says otherwise."""
    if not user or os.environ.get("HADOOP_USER_NAME"):
        yield
        return
    os.environ["HADOOP_USER_NAME"] = user
    try:
        yield
    finally:
        os.environ.pop("HADOOP_USER_NAME", None)


def run_conversion(plan: Plan | ConversionOptions, options: PipelineOptions | None = None, *,
                   faults=None) -> ConversionResult:
    """Run ``plan`` (or plan ``options`` first: :func:`~tfrecord_io.conversion.plan.plan_conversion`) on
    the runner in the pipeline ``options``, and commit its output.

    Raises, before the pipeline starts: what planning raises (``SchemaError``, ``FileExistsError``,
    ``FileNotFoundError``, ``ValueError``), and ``ValueError`` for options only the Spark job has;
    then :class:`~tfrecord_io.conversion.failure.ConversionError` when the pipeline fails (a worker's
    error, e.g. a truncated input, in its message) and
    :class:`tfrecord_io.storage.output.RejectLimitExceeded` (nothing committed; the rejects stay under
    ``_temporary``).  ``faults``: test fault injection (:mod:`tfrecord_io.testing.faults`).
    """
    started = time.monotonic()
    options = options or PipelineOptions([])
    conv = plan.options if isinstance(plan, Plan) else plan
    why = conv.needs_spark()
    if why:
        raise ValueError(f"{why}: use the Spark job for it")
    hdfs = options.view_as(HadoopFileSystemOptions)
    if hdfs.hdfs_host or hdfs.hdfs_port:
        log.warning("--hdfs_host/--hdfs_port are not used: hdfs:// URIs name their NameNode, read over native RPC")
    with as_hdfs_user(hdfs.hdfs_user):
        if isinstance(plan, ConversionOptions):
            plan = plan_conversion(plan)
        plan.prepare_output()
        job = _Job(plan, uuid.uuid4().hex[:12], hdfs.hdfs_user, faults, spill=spills(options),
                   shards_per_writer=dealing.shards_per_writer(plan.num_shards, plan.input_bytes))
        p = beam.Pipeline(options=options)
        build_pipeline(p, job, [(f.path, f.size) for f in plan.inputs])
        where = ",".join(conv.inputs)
        log.info("converting %d input file(s) from %s into %d shard(s) at %s", len(plan.inputs), where,
                 plan.num_shards, conv.output)
        try:
            result = p.run()
            state = result.wait_until_finish()
            if str(state).rsplit(".", 1)[-1] != "DONE":
                raise ConversionError(f"the pipeline ended in state {state} on "
                                      f"{runner_that_ran(result, _requested_runner(options))}; nothing was committed")
        except Exception as e:
            output.abort(conv.output)  # partial attempts of a failed run are of no use
            if isinstance(e, ConversionError):
                raise
            raise ConversionError(f"conversion of {where} to {conv.output} failed: {worker_error(e)}") from e
        except BaseException:
            output.abort(conv.output)
            raise
        runner = runner_that_ran(result, _requested_runner(options))
        requested = options.view_as(StandardOptions).runner or StandardOptions.DEFAULT_RUNNER
        try:
            with fs.open(job.report_path, "rb") as f:
                report = json.loads(f.read().decode("utf-8"))
            result = _commit(job, report, runner, _counters(result), requested)
        except output.RejectLimitExceeded:
            raise  # _temporary stays, with the rejects to look at
        except Exception as e:
            output.abort(conv.output)
            raise ConversionError(str(e) if isinstance(e, CommitError)
                                  else f"the commit of {conv.output} failed: {e}") from e
        except BaseException:
            output.abort(conv.output)
            raise
        result.seconds = round(time.monotonic() - started, 3)
        return result


def _commit(job: _Job, report: list[dict], runner: str, counters: dict[str, int],
            requested: str | None = None) -> ConversionResult:
    conv = job.conv
    ran = runner if not requested or requested.rsplit(".", 1)[-1] == runner else f"{runner} (requested {requested})"
    fields_ = {f.name for f in dataclasses.fields(output.WrittenFile)}
    shard_files = [output.WrittenFile(**{k: v for k, v in f.items() if k in fields_})
                   for d in report if d["kind"] == "records" for f in d["files"]]
    reject_files = [output.WrittenFile(**{k: v for k, v in d.items() if k in fields_})
                    for d in report if d["kind"] == "rejects"]
    sequence = job.schema.record_type == "sequence_example"
    totals = output.ConversionTotals(
        input_rows=sum(d["rows"] for d in report if d["kind"] == "input"),
        records=sum(f.records for f in shard_files),
        rejected=sum(f.records for f in reject_files),
        rows_in_records=sum(d["rows"] for d in report if d["kind"] == "groups") if sequence else None)
    expected = job.num_shards * (1 if job.splits is None else len(job.splits.names))
    if len(shard_files) != expected:
        raise RuntimeError(f"the pipeline reported {len(shard_files)} shard files, expected {expected}; "
                           f"nothing was committed")
    for name, value in (("rows_read", totals.input_rows), ("records_written", totals.records),
                        ("rows_rejected", totals.rejected)):
        if name in counters and counters[name] != value:
            log.warning("metric %s = %d but the pipeline's report says %d (runner %s)", name, counters[name],
                        value, runner)
    summary = (f"{totals.input_rows} rows read, {totals.records} records written to {len(shard_files)} "
               f"file(s), {totals.rejected} rows rejected")
    if sequence:
        summary += f" ({totals.rows_in_records} rows in the {totals.records} sequence examples)"
    try:
        if job.splits is None and job.schema.record_type == "example":
            totals.present = output.sum_present(d.get("present") for d in report if d["kind"] == "records")
        manifest = output.commit_output(conv.output, shard_files, reject_files, totals, splits=job.splits,
                                        schema=job.schema, compression=conv.compression, engine="beam",
                                        max_reject_fraction=conv.max_reject_fraction, permissions=job.plan.permissions)
    except output.RejectLimitExceeded:
        log.error("beam conversion %s -> %s FAILED on %s: %s", ",".join(conv.inputs), conv.output, ran, summary)
        raise
    log.info("beam conversion %s -> %s done on %s: %s", ",".join(conv.inputs), conv.output, ran, summary)
    by_file = {d["path"]: d["rows"] for d in report if d["kind"] == "input"}
    return ConversionResult(conv.output, totals, runner, manifest, counters, requested, by_file)


if __name__ == "__main__":  # the command line moved, and an engine does not import the CLI
    import sys

    sys.exit("tfrecord-io: error: run the Beam pipeline with `python -m tfrecord_io.beam` (the same options)")
