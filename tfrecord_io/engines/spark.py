"""The Spark job: CSV or JSON (local paths, ``file://``, ``hdfs://``) to TFRecord files, exactly once.

Entry point: :func:`run_conversion(spark, ConversionOptions(...)) <run_conversion>` returns the
committed ``_manifest.json`` as a dict.  ``jobs/to_tfrecord.py`` (spark-submit) and
``tfrecord-io convert --engine spark`` both call it.

Pipeline (two stages; for Examples in even shards on a local filesystem, two Spark jobs of one each)::

    driver: list the input files (tfrecord_io.storage.inputs), read each CSV header, plan splits
      -> "read": each task reads one split -- a line range of an uncompressed file (Hadoop's rule:
         the lines that start in it), or a whole compressed / multiline file -- and parses it with
         tfrecord_io.conversion.parsing, the Beam pipeline's parser: typed rows plus rejected rows,
         each with its file, split, line, raw text, reason                             (Python)
      -> to the N shards (N = number of shards)                                        (shuffle)
         Examples: the read task deals its rows to the shards in slices, as Arrow IPC pieces
         (tfrecord_io.conversion.dealing, the Beam pipeline's rule too).  Output on a local or
         mounted filesystem: the task appends them to a spill file of its attempt under
         _temporary/ (tfrecord_io.conversion.spill, Beam's too) and returns their references
         (path, offset, length); the driver collects them, and write task i gets shard i's, in
         order -- the pieces never pass through the JVM, where Spark's shuffle would pickle,
         compress and hand them back (0.3 s of a 2.1 s job at 1M rows, BENCHMARKS.md).  Output on
         HDFS: an RDD partitioned by shard carries them through Spark's shuffle (spills()).  No
         row becomes a Spark row either way; shards are even whatever the splits;
         SequenceExamples: the rows as Spark rows, partitioned by the group_by column, sorted by
         group, order_by
      -> "write": task i takes shard i's rows (Examples: in a random order seeded by the shard,
         ``record_order="shuffled"``, the default, so that sorted input does not give sorted
         shards), encodes them (codec.encode_examples / encode_sequence_examples), frames and
         writes shard i with output.write_shard into _temporary/<attempt>/, the rejects with
         output.write_rejects; one small report row per file                         (Python)
    driver: collect() the reports -> make reject lines the file's (below) -> output.commit():
         shards into place, _manifest.json, _SUCCESS

One parser, one set of value rules: both engines read input with :mod:`tfrecord_io.conversion.parsing`
and :mod:`tfrecord_io.storage.inputs`, so they give the same records and the same rejects, with the
same reasons, for any input (``tests/test_hostile_input.py`` runs both on one corpus).

Input rows, records and rejects
    Every row the parser delivers is one *input row*: input rows = rows in records + rejected
    rows, always (the write stage counts both; the driver checks the sum).  Empty files and
    header-only CSV files give 0 rows; blank lines are not rows.  JSON Lines input is read line
    by line; ``multiline=True`` reads whole files as JSON documents (one object, or an array of
    objects, per file).  A compressed file that is truncated or corrupt fails the job, naming
    the file (``tfrecord_io.storage.inputs``).

Rejects (``<output>/_rejects/part-NNNNN.jsonl``, one JSON object per rejected input row)
    ``source`` the file, ``line`` the line in that file where the record starts, ``raw`` the
    input's own text of the record, ``reason`` why, naming the field (the wording is
    parsing's).  A split after a file's first counts lines from its own start; each read task
    reports its split's line count (an accumulator, idempotent under retries) and the driver
    adds the lines before each split while it moves the reject files into place.
    When rejected / input rows > ``max_reject_fraction`` (default
    ``output.DEFAULT_MAX_REJECT_FRACTION`` = 0.01, i.e. 1%) the job raises
    :class:`~tfrecord_io.storage.output.RejectLimitExceeded`: nothing is committed, there is no
    ``_SUCCESS``, and the rejects stay under ``<output>/_temporary/*/_rejects/`` to look at
    (there, lines of later splits still count from the split).

CSV
    As :mod:`tfrecord_io.conversion.parsing` reads it.  With ``csv.header: true`` the driver reads each
    file's header, for the splits that do not start the file.  Records are lines by default
    (files are split across tasks; an unbalanced quote damages only its own line);
    ``multiline=True`` lets quoted fields hold line breaks, and each file is read by one task.

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
    of the input files as Spark's file index lists them.  Examples are dealt to the shards in
    slices of each parsed batch, so shards hold the same number of records to within a few
    percent, and the same input gives the same shards, byte for byte (a recomputed read task
    deals the same pieces); SequenceExample shards are as even as the groups allow.
    ``shards="input"`` (``--shards input``, Examples): one shard per read split, written by the
    task that parsed it (:class:`ReadAndWrite`) -- no shuffle and no trip back to the JVM, as
    spark-tfrecord writes Spark's partitions; shards are as uneven as the splits, records in
    input order.

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

Failures
    Each ends as one line naming its cause and the file (:func:`failure_line`): every function shipped
    to the executors runs under :func:`tfrecord_io.conversion.failure.task_errors`, so a task's error
    leaves it as ``TaskFailed`` carrying that line (``no space left on device writing <file>``, an HDFS
    quota naming its directory, an input's ``<file>: ... at compressed byte N``), which the driver takes
    out of Spark's ``PythonException``; a Java failure is named by the root of its chain of causes, by
    class.  :func:`job_session` starts the session of a command-line job (``tfrecord-io convert``,
    spark-submit): a start that fails is one line too (:func:`start_failure`: a JVM that exited, a
    Kerberos refusal), and Spark's own log of a failed start and of failing tasks stays quiet unless
    ``--debug``.

Fault injection (tests) is a parameter: ``run_conversion(spark, plan, faults=...)`` hands each
write task's batches to ``faults.around_write`` (:mod:`tfrecord_io.testing.faults`), which the
:class:`WriteStage` carries to the executors; nothing in the environment or the options turns it on.

The functions shipped to executors are instances of module-level classes (:class:`ReadStage`,
:class:`WriteStage`, :class:`DealRows`, :class:`WriteDealt`, :class:`ReadAndWrite`), picklable with
plain ``pickle`` as well as cloudpickle; executors must be able to import ``tfrecord_io`` (ship it
with ``--py-files``; see :func:`package_zip`).

Read tasks are sized and packed as Spark packs file splits (``FilePartition``): the split size is
``min(spark.sql.files.maxPartitionBytes, max(openCostInBytes, (input bytes + files x openCostInBytes)
/ default parallelism))``; a compressed file (it cannot be split) or ``multiline`` input is one split
per file; splits, largest first, fill tasks of up to the split size, each costing its bytes plus
``openCostInBytes``.  So 10,000 small files are a few hundred tasks, not 10,000 (and, with
``--shards input``, as many shards).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import tempfile
import time
import zipfile
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

from tfrecord_io.conversion import dealing, grouping, parsing, small_files, spill
from tfrecord_io.conversion.failure import ConversionError, cause_line, task_errors, worker_line
from tfrecord_io.conversion.options import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_STEPS, TEXT_FORMATS, ConversionOptions
from tfrecord_io.conversion.plan import RESERVED_PREFIX, Plan, plan_conversion
from tfrecord_io.core import codec
from tfrecord_io.core.framing import FramedBatch
from tfrecord_io.core.schema import Schema, SchemaError
from tfrecord_io.storage.partitions import partition_codes, unusable_values
from tfrecord_io.storage import fs, inputs, output
from tfrecord_io.storage.replace import CommitError

__all__ = ["ConversionOptions", "Plan", "ReadStage", "WriteStage", "failure_line", "job_session", "package_zip",
           "run_conversion", "start_failure"]

STRAGGLER_WAIT_S = 30.0

# Internal columns (feature names may not start with the prefix: conversion.plan refuses them).
_PREFIX = RESERVED_PREFIX
SOURCE = _PREFIX + "source"      # the input file
START = _PREFIX + "start"        # where the row's split of that file starts (byte offset)
LINE = _PREFIX + "line"          # the row's line, counted from the split's first line
RAW = _PREFIX + "raw"            # the input's own text (rejects; every row for SequenceExamples)
REASON = _PREFIX + "reason"      # why the row is a reject (None: converted)
_REJECT_COLUMNS = (SOURCE, START, LINE, RAW, REASON)

REPORT_DDL = ("kind string, partition bigint, attempt string, temp_path string, final_name string, "
              "records bigint, bytes bigint, crc32c bigint, input_rows bigint, job_records bigint, rejected bigint, "
              "rows_in_records bigint, present string")


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------
def run_conversion(spark, plan: Plan | ConversionOptions, *, faults=None) -> dict:
    """Run ``plan`` (or plan ``options`` first: :func:`~tfrecord_io.conversion.plan.plan_conversion`) on
    ``spark``; return the committed manifest.

    Raises, before any task: what planning raises (``SchemaError``, ``FileNotFoundError``,
    ``FileExistsError``); then ``RejectLimitExceeded`` when too much was rejected and
    ``ConversionError`` for anything else that stops the job -- nothing is committed then.
    ``faults``: test fault injection (:mod:`tfrecord_io.testing.faults`), None in real runs.
    """
    started = time.monotonic()
    if isinstance(plan, ConversionOptions):
        plan = plan_conversion(plan)
    _local_workers_take_the_keytab(spark.sparkContext)
    if plan.options.input_format not in TEXT_FORMATS:
        from tfrecord_io.engines.spark_datasource import convert_dataframe

        try:
            return convert_dataframe(spark, plan, faults=faults, started=started)
        except (output.RejectLimitExceeded, OSError, ValueError, ConversionError):  # ours, and their exit status
            raise
        except Exception as e:
            raise ConversionError(f"conversion of {','.join(plan.options.inputs)} to {plan.output} failed: "
                                  f"{failure_line(e)}") from e
    options, out, job_id = plan.options, plan.output, plan.job_id
    try:
        plan.prepare_output()
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise  # an output that exists, overlaps the input, may not be written: bad usage
        raise ConversionError(f"conversion of {','.join(options.inputs)} to {out} failed: {cause_line(e)}") from e
    sc = spark.sparkContext
    try:
        run, parts, counts, num_shards = _stages(spark, plan, faults)
        sc.setJobGroup(job_id, f"tfrecord-io: {','.join(options.inputs)} -> {out} ({num_shards} shards)",
                       interruptOnCancel=True)
        try:
            reports = run()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)
        _wait_for_stragglers(sc, job_id)
        files, rejects, totals = _merge_reports(reports, out, job_id, num_shards, options.compression,
                                                plan.schema.record_type, plan.splits, bool(options.partition_by))
        rejects = _fix_reject_lines(rejects, _line_offsets(parts, counts.value))
    except (output.RejectLimitExceeded, FileExistsError, SchemaError, ConversionError):
        output.abort(out)
        raise
    except Exception as e:
        output.abort(out)
        raise ConversionError(f"conversion of {','.join(options.inputs)} to {out} failed: {failure_line(e)}") from e
    # Too many rejects: raise before committing anything, keeping _temporary (and the
    # rejects in it) for inspection, as the message says.
    output.check_reject_fraction(totals, options.max_reject_fraction, out)
    common = dict(schema=plan.schema, compression=options.compression, engine="spark",
                  max_reject_fraction=options.max_reject_fraction, permissions=plan.permissions)
    try:
        by_name = {f.name: f for f in plan.schema.features}
        manifest = output.commit_output(out, files, rejects, totals, splits=plan.splits,
                                        partition_by=[{"name": c, "type": by_name[c].type}
                                                      for c in options.partition_by], **common)
    except output.RejectLimitExceeded:
        raise
    except Exception as e:
        raise ConversionError(str(e) if isinstance(e, CommitError) else f"the commit of {out} failed: {e}") from e
    manifest = dict(manifest)
    manifest["job"] = {"id": job_id, "num_shards": num_shards, "input_bytes": plan.input_bytes,
                       "seconds": round(time.monotonic() - started, 3)}
    return manifest


# ---------------------------------------------------------------------------------------------
# Failures, as one line
# ---------------------------------------------------------------------------------------------
_PYTHON_EXCEPTION = "org.apache.spark.api.python.PythonException"  # a Python worker's error, as its text
#: Java exceptions that mean HDFS (or the KDC) did not let the driver in.
_REFUSALS = ("org.apache.hadoop.security.AccessControlException", "org.apache.hadoop.security.KerberosAuthException",
             "javax.security.auth.login.LoginException", "org.ietf.jgss.GSSException",
             "javax.security.sasl.SaslException")
_KERBEROS_FIX = ("run kinit again (or point KRB5CCNAME at a valid ticket cache), or log Spark in from a keytab: "
                 "--conf spark.kerberos.principal=... --conf spark.kerberos.keytab=... (spark-submit: --principal, "
                 "--keytab)")


def _java_exception(e: BaseException):
    """The Java exception (a Py4J object) behind a Py4J or pyspark error, or None."""
    from py4j.protocol import Py4JJavaError

    if isinstance(e, Py4JJavaError):
        return e.java_exception
    return getattr(e, "_origin", None)  # pyspark.errors' CapturedException keeps the Java exception there


def _java_chain(throwable) -> list[tuple[str, str]]:
    """``(class name, message)`` of a Java exception and its causes, outermost first."""
    chain = []
    while throwable is not None and len(chain) < 64:
        chain.append((str(throwable.getClass().getName()), str(throwable.getMessage() or "")))
        throwable = throwable.getCause()
    return chain


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _realm_fix() -> str:
    """What to do when Spark's JVM finds no Kerberos realm: Java reads ``java.security.krb5.conf``
    (default /etc/krb5.conf), not ``KRB5_CONFIG``, which Python's Kerberos library and hdfs-native read."""
    conf = os.environ.get("KRB5_CONFIG")
    option = f"-Djava.security.krb5.conf={conf}" if conf else "-Djava.security.krb5.conf=/path/to/krb5.conf"
    where = (f"KRB5_CONFIG is {conf}, which Java does not read" if conf else
             "Java reads /etc/krb5.conf unless told otherwise")
    return (f"{where}; give Spark's JVMs the realm's krb5.conf: spark-submit --driver-java-options {option} "
            f"--conf spark.executor.extraJavaOptions={option} (or the same in spark-defaults.conf)")


def _java_cause(chain: list[tuple[str, str]]) -> str:
    """The line for a Java failure: a Python worker's (its TaskFailed line, or its last exception line),
    else the root cause, ``Class: first line of its message``."""
    for name, message in chain:
        if name == _PYTHON_EXCEPTION:
            return worker_line(message)
    for _, message in chain:  # a worker's text in a message (its exception object left on an executor)
        if "Traceback (most recent call last)" in message:
            return worker_line(message)
    name, message = chain[-1]
    return f"{name.rsplit('.', 1)[-1]}: {_first_line(message)}" if message else name.rsplit(".", 1)[-1]


def failure_line(e: BaseException) -> str:
    """One line for anything that stopped a Spark job: the cause and the file.

    A task of ours failed: its :class:`~tfrecord_io.conversion.failure.TaskFailed` line (``no space left
    on device writing <file>``, an input's ``<file>: truncated at byte N``); any other failure in a
    Python worker: its last exception line; a Java failure (a ``Py4JJavaError``, or one of
    ``pyspark.errors``' exceptions over it): the root cause of its chain of causes, by class; a JVM that
    went away: that."""
    from py4j.protocol import Py4JError

    java = _java_exception(e)
    if java is not None:
        try:
            return _java_cause(_java_chain(java))
        except Py4JError:  # the JVM is gone: the text is all there is
            pass
    text = str(e)
    if "Traceback (most recent call last)" in text:
        return worker_line(text)
    if isinstance(e, Py4JError):
        return f"the Spark JVM went away ({_first_line(text) or type(e).__name__})"
    return cause_line(e)


def start_failure(e: BaseException) -> Exception:
    """What to raise when a SparkSession does not start: PermissionError (exit 2, as a refusal found
    while planning) when HDFS or the KDC did not let the driver in -- an expired Kerberos ticket, say,
    with what to do; else :class:`ConversionError` naming the cause (a JVM that did not start: its own
    error is on stderr above)."""
    from pyspark.errors import PySparkException

    if isinstance(e, PySparkException) and e.getCondition() == "JAVA_GATEWAY_EXITED":
        return ConversionError("Spark did not start: its JVM exited before it was up (its own error is above: "
                               "java, JAVA_HOME, SPARK_HOME, --conf)")
    java = _java_exception(e)
    chain = []
    if java is not None:
        try:
            chain = _java_chain(java)
        except Exception:  # noqa: BLE001 - the JVM is gone: the cause below is the text
            chain = []
    realm = next((message for _, message in chain
                  if "Cannot locate default realm" in message or "Can't get Kerberos realm" in message), None)
    if realm is not None:
        return ValueError(f"Spark did not start: its JVM finds no Kerberos realm ({_first_line(realm)}): "
                          f"{_realm_fix()}")
    refusals = [(name, message) for name, message in chain if name in _REFUSALS]
    if refusals:
        name, message = refusals[-1]
        where = next((m.split("DestHost:destPort ", 1)[1].split(" ", 1)[0] for _, m in chain
                      if "DestHost:destPort " in m), None)
        kerberos = any(word in message for word in ("KERBEROS", "Kerberos", "GSS", "TGT", "ticket", "login"))
        return PermissionError(f"Spark did not start: {'Kerberos' if kerberos else 'HDFS'} refused the driver"
                               f"{f' at {where}' if where else ''} ({name.rsplit('.', 1)[-1]}: "
                               f"{_first_line(message)})" + (f": {_KERBEROS_FIX}" if kerberos else ""))
    return ConversionError(f"Spark did not start: {_java_cause(chain) if chain else failure_line(e)}")


# ---------------------------------------------------------------------------------------------
# A job's own session: started, quiet, stopped
# ---------------------------------------------------------------------------------------------
#: Spark's log lines of a start that fails (the Java stack of "Error initializing SparkContext", the
#: Hadoop client's retries): the error line says it once.  Quiet while the session starts only.
_START_LOGGERS = ("org.apache.spark.SparkContext", "org.apache.hadoop.ipc.Client",
                  "org.apache.hadoop.security.UserGroupInformation")
#: Spark's log lines of a failing task (each with the worker's whole traceback), and of its retries:
#: the error line says it once.  Quiet for the job.
#: Its one INFO line of a start, "Submitted application application_...", names where a YARN job's logs are.
_YARN_SUBMIT = "org.apache.hadoop.yarn.client.api.impl.YarnClientImpl"
_TASK_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                 "org.apache.spark.api.python.PythonRunner")


def _log_levels(jvm, levels: dict[str, Any]) -> dict[str, Any]:
    """Set the driver JVM's log4j2 level of each named logger (a level's name, or None: as its parent's);
    return what they were, for this function to put back."""
    ctx = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    config = ctx.getConfiguration()
    before = {}
    for name, level in levels.items():
        own = config.getLoggerConfig(name)
        before[name] = str(own.getLevel().name()) if own.getName() == name and own.getLevel() is not None else None
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            name, jvm.org.apache.logging.log4j.Level.toLevel(level or "OFF"))
        if level is None:  # back to inheriting the parent's level
            config.getLoggerConfig(name).setLevel(None)
    ctx.updateLoggers()
    return before


#: The log4j2 configuration of the driver JVMs our commands start (not spark-submit's).
LOG4J2_PROPERTIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark_log4j2.properties")


def driver_java_options(given: str | None = None) -> str:
    """``spark.driver.extraJavaOptions`` for a driver JVM this process starts: ``given`` (the user's,
    or the Kerberos realm's), with our log4j2 configuration (:data:`LOG4J2_PROPERTIES`: Spark's
    defaults at WARN, without the start-up notices a user cannot act on) unless ``given`` names one."""
    given = (given or "").strip()
    if "log4j2.configurationFile" in given or "log4j.configurationFile" in given:
        return given
    return f"{given} -Dlog4j2.configurationFile=file:{LOG4J2_PROPERTIES}".strip()


def _spark_logging_ready(jvm) -> None:
    """Have Spark set its logging up now, before any level is set: spark-submit drops its own set-up
    before it runs the application, and the application's first log line would load Spark's defaults
    again over the levels set here (silently: no second "Using Spark's default log4j profile")."""
    from py4j.protocol import Py4JError

    try:
        getattr(getattr(jvm.org.apache.spark.util, "Utils$"), "MODULE$").initializeLogIfNecessary(False, True)
    except Py4JError:  # another Spark: its lines of a failed start may show
        pass


@contextlib.contextmanager
def job_session(builder, conf=None, *, debug: bool = False):
    """The SparkSession of a job run from a command line (``tfrecord-io convert --engine spark``, and
    spark-submit's driver): ``builder.getOrCreate()`` -- on ``conf`` (a SparkConf) when this process
    starts the JVM -- stopped at the end.  A start that fails raises :func:`start_failure` (one line).
    Unless ``debug``, Spark's log of a failed start and of failing tasks is quiet (``_START_LOGGERS``,
    ``_TASK_LOGGERS``): the error line names the cause once; ``--debug`` shows all of it, with the
    traceback.  Spark's INFO lines (a few per task) are off unless ``spark.log.level`` is set."""
    from pyspark import SparkConf, SparkContext

    quiet = not debug
    before: dict = {}
    try:
        if quiet:
            SparkContext._ensure_initialized(conf=conf)  # the JVM (or spark-submit's), with no SparkContext yet
            _spark_logging_ready(SparkContext._jvm)
            levels = dict.fromkeys(_START_LOGGERS, "OFF")
            if not (SparkConf().get("spark.log.level", None) or conf is not None and conf.get("spark.log.level", None)):
                levels[""] = "WARN"  # the root logger: spark-submit's INFO lines of a start, as after it (below)
                levels[_YARN_SUBMIT] = "INFO"  # but YARN's "Submitted application application_...": the id of its logs
            before = _log_levels(SparkContext._jvm, levels)
            before.pop("", None)
        spark = builder.getOrCreate()
    except Exception as e:  # noqa: BLE001 - a start that fails is one line
        raise start_failure(e) from e
    try:
        if before:
            _log_levels(SparkContext._jvm, before)
        if not spark.sparkContext.getConf().get("spark.log.level", None):
            spark.sparkContext.setLogLevel("WARN")
        if quiet:
            _log_levels(SparkContext._jvm, dict.fromkeys(_TASK_LOGGERS, "OFF"))
        yield spark
    finally:
        spark.stop()


def _local_workers_take_the_keytab(sc) -> None:
    """In local mode the Python workers (this machine's processes, started by the JVM) log in from the
    driver's keytab too; on a cluster they never get it: they use the delegation tokens the cluster
    manager gives them (:mod:`tfrecord_io.storage.credentials`)."""
    from tfrecord_io.storage import credentials

    if sc.master.startswith("local"):
        for name in (credentials.PRINCIPAL_ENV, credentials.KEYTAB_ENV):
            if os.environ.get(name):
                sc.environment[name] = os.environ[name]


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


def _merge_reports(reports, out: str, job_id: str, num_shards: int, compression: str, record_type: str,
                   split_config=None, partitioned: bool = False):
    files: list[output.WrittenFile] = []
    rejects: list[output.WrittenFile] = []
    totals = output.ConversionTotals(rows_in_records=0 if record_type == "sequence_example" else None)
    seen: set[int] = set()
    presents: list = []
    for r in reports:
        wf = output.WrittenFile(r["temp_path"], r["final_name"], int(r["records"]), int(r["bytes"]),
                                None if r["crc32c"] is None else int(r["crc32c"]))
        if r["kind"] == "rejects":
            rejects.append(wf)
            continue
        if wf.final_name:  # (a partitioned task with no records reports its counts in a row of no file)
            files.append(wf)
        if r["kind"] == "split-shard" and r["partition"] in seen:
            continue  # one partition's other splits: counted with its first
        if r["partition"] in seen:  # cannot happen: Spark returns one attempt per partition
            raise RuntimeError(f"two reports for partition {r['partition']}")
        seen.add(r["partition"])
        presents.append(json.loads(r["present"]) if r["present"] else ({} if not int(r["job_records"]) else None))
        totals.input_rows += int(r["input_rows"])
        totals.records += int(r["job_records"])
        totals.rejected += int(r["rejected"])
        if totals.rows_in_records is not None:
            totals.rows_in_records += int(r["rows_in_records"])
    for p in sorted(set(range(num_shards)) - seen) if not partitioned else ():  # no task ran: empty shards
        names = [output.shard_name(p, num_shards, compression)] if split_config is None else \
            [f"{name}/{output.shard_name(p, num_shards, compression)}" for name in split_config.names]
        for name in names:
            files.append(output.write_shard([], out, f"{job_id}-driver", name, compression))
    totals.present = output.sum_present(presents) if record_type == "example" and split_config is None else None
    return files, rejects, totals


# ---------------------------------------------------------------------------------------------
# Reading: input files in splits, parsed by parsing on the executors (the Beam pipeline's parser)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Split:
    source: str
    start: int
    end: int
    whole: bool  # the whole file, read (and decompressed) by open_input; else a line range


def split_size(files: list, *, parallelism: int, max_split_bytes: int, open_cost: int) -> int:
    """Spark's ``maxSplitBytes``: ``min(maxPartitionBytes, max(openCostInBytes, (bytes + files x
    openCostInBytes) / parallelism))``."""
    total = sum(f.size for f in files) + len(files) * open_cost
    return max(1, min(max_split_bytes, max(open_cost, -(-total // max(1, parallelism)))))


def _plan_splits(files: list, *, splittable: bool, size: int) -> list[_Split]:
    """The read splits of ``files``, of at most ``size`` bytes (:func:`split_size`).  Compressed files
    and ``multiline`` input are read whole, one split per file."""
    splits = []
    for f in files:
        if not splittable or inputs.compression_of(f.path) != "none" or f.size <= size:
            splits.append(_Split(f.path, 0, f.size, True))
            continue
        for start in range(0, f.size, size):
            splits.append(_Split(f.path, start, min(f.size, start + size), False))
    return splits


def _pack_splits(splits: list[_Split], *, max_split_bytes: int, open_cost: int) -> list[list[_Split]]:
    """Read tasks: the splits, largest first, packed into tasks of up to ``max_split_bytes``, each
    split costing its bytes + ``open_cost`` (Spark's ``FilePartition.getFilePartitions``); each
    task reads its splits in input order."""
    tasks: list[list[_Split]] = []
    current: list[_Split] = []
    used = 0
    for sp in sorted(splits, key=lambda sp: sp.end - sp.start, reverse=True):
        length = sp.end - sp.start
        if current and used + length > max_split_bytes:
            tasks.append(current)
            current, used = [], 0
        current.append(sp)
        used += length + open_cost
    if current:
        tasks.append(current)
    return [sorted(task, key=lambda sp: (sp.source, sp.start)) for task in tasks]  # input order within a task


def _conf_bytes(value) -> int:
    text = str(value).strip().lower().rstrip("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)


def _line_counts(sc):
    """An accumulator of {(file, split start): lines in that split} (idempotent: a recomputed split
    reports the same count)."""
    from pyspark.accumulators import AccumulatorParam

    class Param(AccumulatorParam):
        def zero(self, value):
            return {}

        def addInPlace(self, a, b):
            a.update(b)
            return a

    return sc.accumulator({}, Param())


def _line_offsets(splits: list[_Split], counts: dict) -> dict:
    """{(file, split start): lines before the split} for every part of a file read in parts."""
    offsets: dict = {}
    by_file: dict[str, list[_Split]] = {}
    for sp in splits:
        if not sp.whole:
            by_file.setdefault(sp.source, []).append(sp)
    for source, parts in by_file.items():
        before = 0
        for sp in sorted(parts, key=lambda x: x.start):
            offsets[(source, sp.start)] = before
            if (source, sp.start) not in counts:
                raise RuntimeError(f"no line count was reported for {source} from byte {sp.start}")
            before += counts[(source, sp.start)]
    return offsets


def _read_schema(schema: Schema):
    """Spark DDL of the read stage's rows: the features (as parsing types them) and the
    internal columns that place each row (SOURCE, START, LINE) and carry rejects (RAW, REASON)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import LongType, StringType, BinaryType, StructField, StructType

    fields = list(from_arrow_schema(parsing.input_schema(schema)).fields)
    return StructType(fields + [StructField(SOURCE, StringType()), StructField(START, LongType()),
                                StructField(LINE, LongType()), StructField(RAW, BinaryType()),
                                StructField(REASON, StringType())])


@dataclass(frozen=True)
class ReadStage:
    """mapInArrow function over splits (rows of source, start, end, whole): parse each with
    :func:`tfrecord_io.conversion.parsing.read_batches` and yield its rows, converted and rejected alike."""

    schema: Schema
    input_format: str
    multiline: bool
    headers: dict  # CSV with a header: file -> its column names (for splits after the first)
    line_counts: Any = None  # the _line_counts accumulator
    block_size: int = DEFAULT_BLOCK_SIZE
    max_record_bytes: int = parsing.DEFAULT_MAX_RECORD_BYTES

    @property
    def target(self) -> pa.Schema:
        return parsing.input_schema(self.schema)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return task_errors(self._parsed(batches))

    def _parsed(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # A task of many small files parses many small batches: they leave the task merged, up to
        # COALESCE_ROWS rows or block_size bytes, so that what follows (the JVM's Arrow reader, the
        # write stage's encoder) pays its per-batch cost per thousands of rows, not per file.
        held: list[pa.RecordBatch] = []
        rows = size = 0
        for batch in batches:
            d = batch.to_pydict()
            splits = [_Split(source, int(start), int(end), bool(whole))
                      for source, start, end, whole in zip(d["source"], d["start"], d["end"], d["whole"])]
            for group in self._groups(splits):
                for out in self._read_group(group):
                    if out.num_rows >= COALESCE_ROWS and not held:
                        yield out
                        continue
                    held.append(out)
                    rows, size = rows + out.num_rows, size + out.nbytes
                    if rows >= COALESCE_ROWS or size >= self.block_size:
                        yield _merged(held)
                        held, rows, size = [], 0, 0
        if held:
            yield _merged(held)

    def _groups(self, splits: list[_Split]) -> Iterator[list[_Split]]:
        """Runs of small whole files to parse together (:func:`tfrecord_io.conversion.small_files.groups`);
        any other split on its own."""
        run: list[_Split] = []

        def whole_groups():
            by_path = {sp.source: sp for sp in run}
            for paths in small_files.groups([(sp.source, sp.end - sp.start) for sp in run], schema=self.schema,
                                            input_format=self.input_format, multiline=self.multiline,
                                            headers=self.headers, block_size=self.block_size):
                yield [by_path[p] for p in paths]

        for sp in splits:
            if sp.whole:
                run.append(sp)
                continue
            yield from whole_groups()
            run = []
            yield [sp]
        yield from whole_groups()

    def _parse_options(self) -> dict:
        """What the parser keeps besides rows: for SequenceExamples each row's text and each reject's group."""
        s = self.schema
        sequence = s.record_type == "sequence_example"
        return dict(block_size=self.block_size, keep_raw=sequence, max_record_bytes=self.max_record_bytes,
                    reject_values=(s.group_by, s.order_by or s.group_by) if sequence else ())

    def _batches(self, pb: parsing.ParsedBatch, start: int) -> Iterator[pa.RecordBatch]:
        if pb.rows.num_rows:
            yield self._rows(pb, start)
        if pb.rejects:
            yield self._rejects(pb, start)

    def _read_group(self, group: list[_Split]) -> Iterator[pa.RecordBatch]:
        if len(group) == 1:
            yield from self._read(group[0])
            return
        for pb in small_files.read_group([sp.source for sp in group], self.schema, self.input_format,
                                         headers=self.headers, **self._parse_options()):
            yield from self._batches(pb, 0)

    def _read(self, split: _Split) -> Iterator[pa.RecordBatch]:
        s = self.schema
        kw: dict = self._parse_options()
        if split.whole:
            stream, rng = inputs.open_input(split.source), None
        else:
            stream, rng = inputs.open_line_range(split.source, split.start, split.end)
            kw["byte_offset"] = rng.first  # errors in a later split name the file's byte, not a line
            if self.input_format == "csv" and s.csv.header and split.start > 0:
                kw["header_names"] = self.headers[split.source]
        with stream:
            for pb in parsing.read_batches(stream, s, self.input_format, split.source, multiline=self.multiline,
                                           **kw):
                yield from self._batches(pb, split.start)
        if rng is not None and self.line_counts is not None:
            self.line_counts.add({(split.source, split.start): rng.lines})

    def _internal(self, n: int, source: str, start: int, lines, raw, reasons) -> list:
        return [pa.repeat(pa.scalar(source, pa.string()), n), pa.array(np.full(n, start, np.int64)),
                pa.array(np.asarray(lines, np.int64)), raw if raw is not None else pa.nulls(n, pa.binary()),
                reasons if reasons is not None else pa.nulls(n, pa.string())]

    def _rows(self, pb: parsing.ParsedBatch, start: int) -> pa.RecordBatch:
        n = pb.rows.num_rows
        raw = None if pb.raw is None else pb.raw.cast(pa.binary())
        cols = list(pb.rows.columns) + self._internal(n, pb.source, start, pb.lines, raw, None)
        return pa.RecordBatch.from_arrays(cols, names=_read_names(self.schema))

    def _rejects(self, pb: parsing.ParsedBatch, start: int) -> pa.RecordBatch:
        n = len(pb.rejects)
        values = pb.reject_values or [None] * n
        cols = []
        for f in self.target:
            if f.name in (self.schema.group_by, self.schema.order_by):
                cols.append(pa.array([None if v is None else v.get(f.name) for v in values], f.type))
            else:
                cols.append(pa.nulls(n, f.type))
        raw = pa.array([None if r["raw"] is None else r["raw"].encode("utf-8") for r in pb.rejects], pa.binary())
        reasons = pa.array([r["reason"] for r in pb.rejects], pa.string())
        cols += self._internal(n, pb.source, start, [r["line"] or 0 for r in pb.rejects], raw, reasons)
        return pa.RecordBatch.from_arrays(cols, names=_read_names(self.schema))


COALESCE_ROWS = 8192


def _merged(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _read_names(schema: Schema) -> list[str]:
    """The read stage's columns: the input features, then the internal ones."""
    return [f.name for f in schema.input_features] + [SOURCE, START, LINE, RAW, REASON]


def _read_stage(spark, plan: Plan):
    """(an RDD of the read splits, a task's splits per partition, as (source, start, end, whole); the
    ReadStage over it; the splits; the line-count accumulator; the number of read tasks)."""
    sc, conf, opts = spark.sparkContext, spark.conf, plan.options
    max_split = _conf_bytes(conf.get("spark.sql.files.maxPartitionBytes", "128m"))
    open_cost = _conf_bytes(conf.get("spark.sql.files.openCostInBytes", "4m"))
    size = split_size(list(plan.inputs), parallelism=sc.defaultParallelism, max_split_bytes=max_split,
                      open_cost=open_cost)
    splits = _plan_splits(list(plan.inputs), splittable=not opts.multiline, size=size)
    tasks = _pack_splits(splits, max_split_bytes=size, open_cost=open_cost) or [[]]
    counts = _line_counts(sc)
    # One element (a task's splits) per slice: partition i reads exactly tasks[i].
    rows = sc.parallelize([[(sp.source, sp.start, sp.end, sp.whole) for sp in task] for task in tasks],
                          len(tasks)).flatMap(lambda task: task)
    stage = ReadStage(plan.schema, opts.input_format, opts.multiline, dict(plan.headers), counts, opts.block_size,
                      opts.max_record_bytes)
    return rows, stage, splits, counts, len(tasks)


# ---------------------------------------------------------------------------------------------
# The stages of a plan
# ---------------------------------------------------------------------------------------------
def _stages(spark, plan: Plan, faults=None):
    """(a function that runs the job and returns the write tasks' reports, the splits and line counts
    of the read, the number of shards).

    * Examples, even shards (the default): read tasks deal their rows to the shards as Arrow IPC
      pieces (:class:`DealRows`, :mod:`tfrecord_io.conversion.dealing`), and write task i puts
      shard i's rows in a random order (:class:`WriteDealt`) and writes them (:class:`WriteStage`).
      The pieces reach the write tasks through spill files under ``_temporary/``
      (:mod:`tfrecord_io.conversion.spill`; the driver collects their references: two Spark jobs,
      no shuffle) when the output is on a local or mounted filesystem, and through Spark's shuffle
      (an RDD partitioned by shard) when it is on HDFS (:func:`spills`).
    * ``shards="input"``: the write stage reads its split itself (:class:`ReadAndWrite`): one shard per
      split and no shuffle.
    * SequenceExamples: the read stage's rows, partitioned by ``group_by`` and sorted by Spark.
    """
    from pyspark.sql import functions as F

    opts, schema = plan.options, plan.schema
    rows, read, splits, counts, tasks = _read_stage(spark, plan)
    df = spark.createDataFrame(rows, "source string, start bigint, end bigint, whole boolean")

    def write_stage(num_shards: int) -> WriteStage:
        return WriteStage(output=opts.output, job_id=plan.job_id, num_shards=num_shards, compression=opts.compression,
                          level=opts.level, partition_by=opts.partition_by,
                          schema=schema, max_steps=opts.max_steps, faults=faults, splits=plan.splits)

    def through(staged, write):
        return lambda: staged.mapInArrow(write, REPORT_DDL).collect()

    if opts.shards == "input":
        return through(df, ReadAndWrite(read, write_stage(tasks))), splits, counts, tasks
    num_shards = plan.num_shards
    if schema.record_type == "example":
        spilled = spills(opts.output)
        dealt = rows.mapPartitionsWithIndex(DealRows(read, num_shards, opts.output, plan.job_id, spill=spilled))
        write = WriteDealt(write_stage(num_shards), shuffled=opts.record_order == "shuffled")
        if not spilled:
            return (lambda: dealt.partitionBy(num_shards, _shard_of_piece).mapPartitions(write).collect(),
                    splits, counts, num_shards)

        def run() -> list:
            # The pieces' references, collected: shard i's (in key order) are write task i's input.
            refs: list[list] = [[] for _ in range(num_shards)]
            for shard, piece in dealt.collect():
                refs[shard].append((shard, piece))
            for pieces in refs:
                pieces.sort(key=lambda item: item[1][0])
            return spark.sparkContext.parallelize(refs, num_shards).flatMap(_pieces).mapPartitions(write).collect()

        return run, splits, counts, num_shards
    order = [F.col(_q(schema.group_by))]
    if schema.order_by and schema.order_by != schema.group_by:
        order.append(F.col(_q(schema.order_by)))
    order += [F.col(SOURCE), F.col(START), F.col(LINE)]
    prepared = df.mapInArrow(read, _read_schema(schema))
    staged = prepared.repartition(num_shards, F.col(_q(schema.group_by))).sortWithinPartitions(*order)
    return through(staged, write_stage(num_shards)), splits, counts, num_shards


def spills(out: str) -> bool:
    """Do the dealt pieces of a job writing to ``out`` go through spill files rather than Spark's
    shuffle?  On a local or mounted filesystem, yes: there the shuffle only costs (pickled into
    the JVM, LZ4-compressed, written, read and handed back: 0.3 s of a 2.1 s job at 1M rows,
    BENCHMARKS.md), and the spill files are plain files on the same disks.  On HDFS, no: there a
    spill file is written to three DataNodes and counted three times against the output's space
    quota, where Spark's shuffle keeps map outputs on the executors' local disks and recomputes
    them if a node is lost."""
    return not fs.is_hdfs(out)


def _shard_of_piece(shard: int) -> int:
    """partitionBy's function: a dealt piece's key is its shard, the write task's partition."""
    return shard


def _task_attempt(out: str, job_id: str) -> str:
    """The running task attempt's directory name under ``<out>/_temporary/`` (module doc, "Exactly
    once"); RuntimeError once ``_temporary`` is gone -- the job was committed or aborted, and a late
    attempt must not bring it back."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = f"{job_id}-s{ctx.stageId()}-p{ctx.partitionId():05d}-a{ctx.attemptNumber()}-t{ctx.taskAttemptId()}"
    if not fs.exists(fs.join(out, output.TEMPORARY)):
        raise RuntimeError(f"{out}/{output.TEMPORARY} is gone (the job was committed or aborted); "
                           f"task attempt {attempt} writes nothing")
    return attempt


def _pieces(pieces: list) -> list:
    """flatMap's function: a write task's one element, its shard's ``(shard, piece)`` items, as its
    elements (what Spark's shuffle would give it)."""
    return pieces


_SPLITS_SCHEMA = pa.schema([("source", pa.string()), ("start", pa.int64()), ("end", pa.int64()),
                           ("whole", pa.bool_())])


@dataclass(frozen=True)
class DealRows:
    """RDD ``mapPartitionsWithIndex`` function over the read splits (Examples, even shards): parse
    them (:class:`ReadStage`) and deal the rows, converted and rejected alike, to the shards
    (:class:`tfrecord_io.conversion.dealing.Dealer`): ``(shard, ((task, n), ipc bytes))`` for
    Spark's shuffle, or with ``spill`` the pieces appended to this attempt's spill file under
    ``<output>/_temporary/<attempt>/`` and ``(shard, ((task, n), (path, offset, length)))``
    returned (a retried or speculative attempt writes its own file; the driver reads the
    references of the one attempt Spark keeps)."""

    read: Any
    num_shards: int
    output: str
    job_id: str
    spill: bool = True  # pieces into spill files (:func:`spills`); else their bytes into Spark's shuffle

    def __call__(self, index: int, rows: Iterable) -> Iterator[tuple]:
        return task_errors(self._dealt(index, rows))

    def _dealt(self, index: int, rows: Iterable) -> Iterator[tuple]:
        splits = list(rows)
        batch = pa.RecordBatch.from_pydict({name: [sp[i] for sp in splits] for i, name in
                                            enumerate(_SPLITS_SCHEMA.names)}, schema=_SPLITS_SCHEMA)
        with (spill.SpillWriter(output.attempt_dir(self.output, _task_attempt(self.output, self.job_id)))
              if self.spill else contextlib.nullcontext()) as spilled:
            dealer = dealing.Dealer(self.num_shards, first=index, origin=index, spill=spilled)
            for parsed in self.read([batch]):
                # The file's name, the same in every row of a split: sent once per piece, not per row.
                at = parsed.schema.get_field_index(SOURCE)
                yield from dealer.deal(parsed.set_column(at, SOURCE, parsed.column(at).dictionary_encode()))
            yield from dealer.finish()


@dataclass(frozen=True)
class WriteDealt:
    """RDD ``mapPartitions`` function over one shard's dealt pieces (spill references in key order,
    or IPC bytes as Spark's shuffle delivers them): their rows, in a random order seeded by the
    shard (``shuffled``) or as they came, written by :class:`WriteStage`; yields its report rows
    as dicts."""

    write: Any
    shuffled: bool = True

    def __call__(self, items: Iterable[tuple]) -> Iterator[dict]:
        return task_errors(self._written(items))

    def _written(self, items: Iterable[tuple]) -> Iterator[dict]:
        from pyspark import TaskContext

        pieces = spill.read_pieces(piece for _, piece in items)
        if self.shuffled:
            batches = dealing.shuffled(pieces, np.random.default_rng(TaskContext.get().partitionId()))
        else:
            batches = dealing.in_order(pieces)
        for report in self.write(batches):
            yield from report.to_pylist()


@dataclass(frozen=True)
class ReadAndWrite:
    """mapInArrow function over the read splits for ``--shards input``: each task parses its split
    (:class:`ReadStage`) and writes what it parsed as shard ``partition`` (:class:`WriteStage`) in
    the same Python worker -- the rows never go back to the JVM, and there is no shuffle."""

    read: Any
    write: Any

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return task_errors(self.write(self.read(batches)))


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _fix_reject_lines(rejects: list, offsets: dict) -> list:
    """Rejects of files read in parts count lines from their split: add the lines before it
    (each reject file is rewritten, a line at a time, before the commit moves it)."""
    if not offsets:
        return rejects
    fixed = []
    for wf in rejects:
        path = wf.temp_path + ".lines"
        size = 0
        with fs.open(wf.temp_path, "rb") as raw, fs.open(path, "wb") as dst:
            src = raw if isinstance(raw, io.BufferedIOBase) else io.BufferedReader(raw)
            for line in src:
                row = json.loads(line)
                start = row.pop("_start", 0)
                if start and row.get("line"):
                    row["line"] += offsets[(row["source"], start)]
                data = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
                dst.write(data)
                size += len(data)
        fs.delete(wf.temp_path)
        fixed.append(output.WrittenFile(path, wf.final_name, wf.records, size))
    return fixed


# ---------------------------------------------------------------------------------------------
# Executor side: helpers
# ---------------------------------------------------------------------------------------------
def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "backslashreplace")


def _binary_list(arr: pa.Array) -> list:
    """Python values of a string array as bytes (Spark may hand over invalid UTF-8)."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.binary() if pa.types.is_string(arr.type) else pa.large_binary())
    return arr.to_pylist()


def _rows_as_dicts(batch: pa.RecordBatch, names: list[str]) -> list[dict]:
    """Python rows of some columns (strings and raw text decoded leniently)."""
    cols = {}
    for n in names:
        arr = batch.column(batch.schema.get_field_index(n))
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or (
                pa.types.is_binary(arr.type) and n == RAW):
            cols[n] = [_text(b) for b in _binary_list(arr)]
        else:
            cols[n] = arr.to_pylist()
    return [dict(zip(names, vals)) for vals in zip(*(cols[n] for n in names))] if names else \
        [{} for _ in range(batch.num_rows)]


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


@dataclass(frozen=True)
class WriteStage:
    """mapInArrow function over the N shard partitions: write shard i and its rejects; report them."""

    output: str
    job_id: str
    num_shards: int
    compression: str
    schema: Schema
    max_steps: int = DEFAULT_MAX_STEPS
    level: int = 6  # zlib's, for gzip / zlib (ConversionOptions.level)
    partition_by: tuple[str, ...] = ()  # --partition-by: a file per partition per shard (storage.partitions)
    faults: Any = None  # fault injection (tests): tfrecord_io.testing.faults
    splits: Any = None  # tfrecord_io.conversion.splits.Splits: one file per split per shard

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return task_errors(self._written(batches))

    def _written(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        attempt = _task_attempt(self.output, self.job_id)
        spool = _RejectSpool()
        stats = {"input_rows": 0, "records": 0, "rows_in_records": 0}
        if self.schema.record_type == "example":
            records = self._example_records(batches, spool, stats)
        else:
            records = self._sequence_records(batches, spool, stats)
        if self.faults is not None:
            records = self.faults.around_write(records, output=self.output, shard=part, attempt=attempt)
        try:
            final = output.shard_name(part, self.num_shards, self.compression)
            if self.partition_by:
                shards = output.write_partition_shards(records, self.output, attempt, f"{part:05d}",
                                                       self.compression, self.level)
            elif self.splits is None:
                shards = [output.write_shard(records, self.output, attempt, final, self.compression, self.level)]
            else:
                shards = output.write_split_shards(records, self.output, attempt,
                                                   [f"{name}/{final}" for name in self.splits.names], self.compression,
                                                   self.level)
            rejects = output.write_rejects(spool.rows(), self.output, attempt, f"part-{part:05d}.jsonl")
        finally:
            spool.close()
        if sum(w.records for w in shards) != stats["records"]:
            raise RuntimeError(f"task attempt {attempt}: wrote {sum(w.records for w in shards)} records, counted "
                               f"{stats['records']}")
        converted = stats["records"] if self.schema.record_type == "example" else stats["rows_in_records"]
        if stats["input_rows"] != converted + spool.count:
            raise RuntimeError(f"task attempt {attempt}: {stats['input_rows']} input rows != {converted} converted "
                               f"+ {spool.count} rejected")
        kind = "shard" if self.splits is None and not self.partition_by else "split-shard"
        if self.partition_by and not shards:  # no records: a row that carries the task's counts
            shards = [output.WrittenFile("", "", 0, 0)]
        rows = [(kind, w) for w in shards] + ([("rejects", rejects)] if rejects is not None else [])
        yield pa.RecordBatch.from_pydict({
            "kind": [k for k, _ in rows],
            "partition": [part] * len(rows),
            "attempt": [attempt] * len(rows),
            "temp_path": [w.temp_path for _, w in rows],
            "final_name": [w.final_name for _, w in rows],
            "records": [w.records for _, w in rows],
            "bytes": [w.bytes for _, w in rows],
            "crc32c": [w.crc32c for _, w in rows],
            "input_rows": [stats["input_rows"]] * len(rows),
            "job_records": [stats["records"]] * len(rows),
            "rejected": [spool.count] * len(rows),
            "rows_in_records": [stats["rows_in_records"]] * len(rows),
            "present": [json.dumps(stats["present"]) if "present" in stats else None] * len(rows),
        }, schema=_REPORT_SCHEMA)

    # -- Examples -----------------------------------------------------------------------------
    def _example_records(self, batches, spool: _RejectSpool, stats: dict) -> Iterator[pa.Array]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            stats["input_rows"] += batch.num_rows
            reason = batch.column(batch.schema.get_field_index(REASON))
            bad = reason.is_valid().to_numpy(zero_copy_only=False)
            good_idx = np.flatnonzero(~bad)
            unusable = {}
            if self.partition_by and len(good_idx):  # a value no directory can be named after: a reject
                good = batch.take(pa.array(good_idx, pa.int64()))
                unusable = {int(good_idx[j]): why for j, why in
                            unusable_values([good.column(c) for c in self.partition_by], self.partition_by).items()}
                if unusable:
                    good_idx = np.array([i for i in good_idx if int(i) not in unusable], dtype=np.int64)
            records, refused = self._encode(batch, good_idx)
            refused.update(unusable)
            which = None
            if self.splits is not None and len(records):
                encoded_idx = [int(i) for i in good_idx if int(i) not in refused]  # the rows of `records`
                which, why = self.splits.assign(records.to_pylist())
                lost = [j for j, w in enumerate(which) if w is None]
                if lost:  # no value to split by: a reject naming the feature
                    for j in lost:
                        refused[encoded_idx[j]] = why[j]
                    keep = np.ones(len(which), dtype=bool)
                    keep[lost] = False
                    records = records.filter(pa.array(keep))
                    which = [w for w in which if w is not None]
            if self.splits is None:  # records holding each feature (split outputs do not keep them)
                kept = ~bad
                kept[list(refused)] = False
                stats.setdefault("present", Counter()).update(codec.present_counts(batch, self.schema,
                                                                                   pa.array(kept)))
            if refused or bad.any():
                reasons = reason.to_pylist()
                for i, why in refused.items():
                    reasons[i] = why
                    bad[i] = True
                bad_idx = np.flatnonzero(bad)
                rows = _rows_as_dicts(batch.take(pa.array(bad_idx, pa.int64())), list(_REJECT_COLUMNS))
                for m, i in zip(rows, bad_idx):
                    m[REASON] = reasons[i]
                    spool.add(_reject_json(m))
            if len(records):
                stats["records"] += len(records)
                if self.partition_by:
                    kept = [int(i) for i in good_idx if int(i) not in refused]
                    rows_of = batch.take(pa.array(kept, pa.int64()))
                    codes, dirs, _ = partition_codes([rows_of.column(c) for c in self.partition_by],
                                                     self.partition_by)
                    yield records, codes, dirs
                else:
                    yield records if self.splits is None else (records, which)

    def _encode(self, batch: pa.RecordBatch, good_idx: np.ndarray) -> tuple[pa.Array | FramedBatch, dict]:
        """Encode the good rows; a row the encoder still refuses becomes a reject (row by row).  When
        the records go to one file as they are (no partitions, no splits) they come framed
        (:func:`codec.encode_framed`: each record encoded straight into its framed place)."""
        framed = not self.partition_by and self.splits is None
        if len(good_idx) == 0:
            return pa.array([], pa.binary()), {}
        good = batch if len(good_idx) == batch.num_rows else batch.take(pa.array(good_idx, pa.int64()))
        try:
            return (codec.encode_framed if framed else codec.encode_examples)(good, self.schema), {}
        except (ValueError, TypeError, pa.ArrowException):
            pass
        parts, refused = [], {}
        for j, i in enumerate(good_idx):
            try:
                parts.append(_as_binary(codec.encode_examples(good.slice(j, 1), self.schema)))
            except (ValueError, TypeError, pa.ArrowException) as e:
                refused[int(i)] = f"cannot encode: {e}"
        records = pa.concat_arrays(parts) if parts else pa.array([], pa.binary())
        return (FramedBatch.of(records) if framed and len(records) else records), refused

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
        """The batch's feature, position, RAW and REASON columns (row-level problems found when read)."""
        names = [f.name for f in self.schema.input_features] + [SOURCE, START, LINE, RAW, REASON]
        return pa.RecordBatch.from_arrays([batch.column(batch.schema.get_field_index(n)) for n in names], names=names)

    def _split_open_group(self, buf: pa.RecordBatch) -> tuple[pa.RecordBatch | None, pa.RecordBatch]:
        return grouping.split_open_record(buf, self.schema, self.max_steps)

    def _encode_units(self, batch: pa.RecordBatch, spool: _RejectSpool, stats: dict) -> pa.Array | None:
        """Encode the complete records in ``batch`` (:mod:`tfrecord_io.conversion.grouping`); spool
        the rows of rejected ones."""
        reason = batch.column(batch.schema.get_field_index(REASON))
        reasons = None if reason.null_count == len(reason) else [_text(b) for b in _binary_list(reason)]
        lines = batch.column(batch.schema.get_field_index(LINE))
        out = grouping.build_sequence_examples(batch, self.schema, self.max_steps, reasons=reasons, lines=lines)
        if out.rejected:
            rows = np.array(sorted(out.rejected), dtype=np.int64)
            sub = batch.take(pa.array(rows, pa.int64()))
            for m, i in zip(_rows_as_dicts(sub, list(_REJECT_COLUMNS)), rows):
                m[REASON] = out.rejected[int(i)]
                spool.add(_reject_json(m))
        if not len(out.records):
            return None
        stats["records"] += len(out.records)
        stats["rows_in_records"] += out.rows_in_records
        return _as_binary(out.records)


_REPORT_SCHEMA = pa.schema([("kind", pa.string()), ("partition", pa.int64()), ("attempt", pa.string()),
                            ("temp_path", pa.string()), ("final_name", pa.string()), ("records", pa.int64()),
                            ("bytes", pa.int64()), ("crc32c", pa.int64()), ("input_rows", pa.int64()), ("job_records", pa.int64()),
                            ("rejected", pa.int64()), ("rows_in_records", pa.int64()), ("present", pa.string())])


def _reject_json(row: dict) -> dict:
    """A reject of the output contract; ``_start`` (split start, for the driver to make ``line`` the
    file's line) is removed before the commit."""
    out = {"source": row[SOURCE], "line": row[LINE] or None, "raw": row[RAW], "reason": row[REASON]}
    if row[START]:
        out["_start"] = row[START]
    return out


# ---------------------------------------------------------------------------------------------
# Shipping the package to executors
# ---------------------------------------------------------------------------------------------
def package_zip(directory: str) -> str:
    """Zip the ``tfrecord_io`` package (for ``--py-files`` / ``SparkContext.addPyFile``); return its path."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the tfrecord_io package
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
