"""Running a conversion from a command line, for every engine and entry point.

Entry points, all with the flags of :func:`tfrecord_io.conversion.options.add_arguments`:

* ``tfrecord-io convert --engine spark|beam ...`` (:func:`configure` / :func:`run`);
* ``spark-submit jobs/to_tfrecord.py ...`` (:func:`spark_job_main`);
* ``python -m tfrecord_io.beam ...`` and ``python -m pipelines.to_tfrecord ...``
  (:func:`beam_main`); flags it does not know are Beam pipeline options.

:func:`execute` is the one place that turns an outcome into an exit status:

====  ===========================================================================================
0     done: ``_SUCCESS`` written; a summary line on stderr and ``{"event": "tfrecord-io-done",
      ...}`` on stdout
1     the conversion started and failed (a task or worker error, the commit)
2     bad usage: arguments, the schema (or its features against the input's columns), an input
      that cannot be found or read, an output that exists or overlaps an input
3     more rows were rejected than ``--max-reject-fraction`` allows (nothing committed)
====  ===========================================================================================

Errors are one line (``tfrecord-io: error: ...``) naming the file and what to do; ``--debug``
adds the traceback.  Arguments, the schema and the inputs are checked before an engine starts
(no JVM for a misspelled path).

``--engine spark`` runs the job *in this process*: a SparkSession (``--master``; without it
``spark.master`` from spark-defaults.conf, else ``local[*]``; plus any ``--conf KEY=VALUE``),
then :func:`tfrecord_io.engines.spark.run_conversion`.  For a non-local master the ``tfrecord_io``
package is zipped and shipped to the executors with ``SparkContext.addPyFile``.  Use
``spark-submit jobs/to_tfrecord.py`` when a cluster needs spark-submit's own options.
``--engine beam`` runs :func:`tfrecord_io.engines.beam.run_conversion` with the Beam options given
after ``--engine-arg``.

This module stays import-light: ``configure`` touches neither Spark, Beam nor TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from typing import Callable

from tfrecord_io.conversion import options as opts

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REJECTS = 0, 1, 2, 3
DEFAULT_MAX_REJECT_FRACTION = opts.DEFAULT_MAX_REJECT_FRACTION


def summary(manifest: dict) -> str:
    t = manifest["totals"]
    rows = t.get("rows_in_records", t["records"])
    return (f"tfrecord-io: wrote {t['records']} {manifest['record_type']} records ({rows} input rows) in "
            f"{len(manifest['files'])} files; {t['rejected']} of {t['input_rows']} input rows rejected")


def exit_status(e: BaseException) -> int:
    """The exit status for an exception raised by a conversion (see the module doc)."""
    from tfrecord_io.storage.output import RejectLimitExceeded

    if isinstance(e, RejectLimitExceeded):
        return EXIT_REJECTS
    if isinstance(e, opts.ConversionError):
        return EXIT_FAILED
    if isinstance(e, (ValueError, TypeError, FileExistsError, FileNotFoundError, PermissionError,
                      IsADirectoryError, NotADirectoryError)):
        return EXIT_USAGE  # SchemaError and ColumnMismatch are ValueErrors
    return EXIT_FAILED


def execute(work: Callable[[], dict], *, debug: bool = False, done: Callable[[dict], dict] | None = None) -> int:
    """Run ``work`` (a conversion returning its manifest), report the outcome, return the exit status."""
    try:
        manifest = work()
    except KeyboardInterrupt:
        print("tfrecord-io: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - every outcome is reported as one line and an exit status
        return _report(e, debug)
    print(summary(manifest), file=sys.stderr)
    print(json.dumps({"event": "tfrecord-io-done", **(done(manifest) if done else {}),
                      "totals": manifest["totals"], "files": len(manifest["files"])}))
    return EXIT_OK


def preflight(options: opts.ConversionOptions) -> None:
    """What can be checked before an engine starts: the schema and that the inputs exist."""
    from tfrecord_io.storage import inputs

    options.load_schema()
    if options.input_format != "table":  # a table is looked up in Spark's catalog
        inputs.list_inputs(options.inputs)


# ------------------------------------------------------------------------------------ Spark
def run_spark(spark, options: opts.ConversionOptions, *, debug: bool = False) -> int:
    """The Spark job on an existing session (what spark-submit and ``convert`` run)."""
    from tfrecord_io.engines.spark import run_conversion

    return execute(lambda: run_conversion(spark, options), debug=debug,
                   done=lambda m: {"engine": "spark", "output": options.output, "seconds": m["job"]["seconds"]})


def spark_job_main(argv: list[str] | None = None) -> int:
    """``spark-submit jobs/to_tfrecord.py``: parse, check, then start the session and run."""
    parser = argparse.ArgumentParser(prog="to_tfrecord.py",
                                     description="Convert CSV or JSON (local or HDFS) into TFRecords with Spark.")
    opts.add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)
    code = execute_checked(args)
    if code is not None:
        return code
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("tfrecord-io to_tfrecord")
    if not sys.stderr.isatty():  # in logs, Spark's progress bar runs into our summary line
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    try:
        return run_spark(spark, opts.from_args(args), debug=args.debug)
    finally:
        spark.stop()


def execute_checked(args: argparse.Namespace) -> int | None:
    """None when the arguments, schema and inputs are fine; else the exit status (reported)."""
    try:
        preflight(opts.from_args(args))
    except Exception as e:  # noqa: BLE001 - reported like any outcome
        return _report(e, getattr(args, "debug", False))
    return None


def _report(e: Exception, debug: bool) -> int:
    """One error line (the traceback too with ``--debug``); the exit status for ``e``."""
    if debug:
        traceback.print_exc()
    print(f"tfrecord-io: error: {e}", file=sys.stderr)
    return exit_status(e)


# ------------------------------------------------------------------------------------- Beam
def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("tfrecord_io").setLevel(logging.INFO)


def run_beam(options: opts.ConversionOptions, beam_args: list[str], *, debug: bool = False) -> int:
    """The Beam pipeline with ``beam_args`` as pipeline options (``--runner=...``, ``--hdfs_host=...``)."""
    _configure_logging()
    if not debug:  # a failed bundle is reported once, as our one line; Beam's runner would add its traceback
        logging.getLogger("apache_beam.runners").setLevel(logging.CRITICAL)
    from tfrecord_io.engines import beam as tbeam

    ran = {}

    def work():
        result = tbeam.run_conversion(options, tbeam.pipeline_options(beam_args))
        ran.update(runner=result.runner, seconds=result.seconds)
        return result.manifest

    return execute(work, debug=debug, done=lambda m: {"engine": "beam", "output": options.output, **ran})


def beam_main(argv: list[str] | None = None) -> int:
    """``python -m tfrecord_io.beam`` (and ``pipelines/to_tfrecord.py``): unknown flags go to Beam."""
    parser = argparse.ArgumentParser(
        prog="python -m tfrecord_io.beam", allow_abbrev=False,
        description="Convert CSV or JSON Lines (local, file:// or hdfs://) into TFRecords with Apache Beam. "
                    "Beam's pipeline options (--runner, ...) may follow; any other argument is an error.")
    opts.add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    try:
        args, beam_args = parser.parse_known_args(argv)
    except SystemExit as e:  # argparse exits on --help (0) and on bad arguments (2)
        return int(e.code or 0)
    code = _refused_by_beam(args) or _unknown_to_beam(beam_args) or execute_checked(args)
    if code is not None:
        return code
    return run_beam(opts.from_args(args), beam_args, debug=args.debug)


def _unknown_to_beam(beam_args: list[str]) -> int | None:
    """Exit 2 (before anything runs) for an argument that is no Beam pipeline option; else None."""
    from tfrecord_io.engines import beam as tbeam

    try:
        tbeam.pipeline_options(beam_args)
    except ValueError as e:
        return _usage(str(e))
    return None


# ------------------------------------------------------------------------ tfrecord-io convert
def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=("spark", "beam"), default="spark",
                        help="spark (default; runs in this process) or beam")
    opts.add_arguments(parser)
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark.master from spark-defaults.conf, else local[*])")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark configuration setting (repeatable)")
    parser.add_argument("--engine-arg", action="append", default=[], metavar="ARG",
                        help="a Beam pipeline option, e.g. --engine-arg=--runner=FnApiRunner (repeatable)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")


def _refused_by_beam(args: argparse.Namespace) -> int | None:
    """Exit 2 (before anything is listed) for options that only the Spark job has; else None."""
    try:
        why = opts.from_args(args).needs_spark()
    except ValueError:
        return None  # a bad value: execute_checked reports it
    if why is None:
        return None
    return _usage(f"{why}: use the Spark job (tfrecord-io convert --engine spark, or spark-submit "
                  f"jobs/to_tfrecord.py)")


def _usage(message: str) -> int:
    print(f"tfrecord-io: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    if args.engine == "beam":
        if args.master or args.conf:
            return _usage("--master/--conf are Spark options; pass Beam options with --engine-arg")
        code = _refused_by_beam(args) or _unknown_to_beam(list(args.engine_arg))
        if code is not None:
            return code
    elif args.engine_arg:
        return _usage("--engine-arg is for --engine beam; use --conf for Spark")
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            return _usage(f"--conf expects KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    code = execute_checked(args)
    if code is not None:
        return code
    options = opts.from_args(args)
    if args.engine == "beam":
        return run_beam(options, list(args.engine_arg), debug=args.debug)
    # Executors in local mode start this interpreter (which has pyarrow, numpy, ...).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    spark_conf = SparkConf()
    if not sys.stderr.isatty():  # in logs, Spark's progress bar runs into our summary line
        spark_conf.set("spark.ui.showConsoleProgress", "false")
    for k, v in conf.items():
        spark_conf.set(k, v)
    builder = SparkSession.builder.appName("tfrecord-io convert").config(conf=spark_conf)
    if args.master:
        builder = builder.master(args.master)
    spark = builder.getOrCreate()  # no --master: spark-defaults.conf's, else local[*]
    try:
        if not spark.sparkContext.master.startswith("local"):
            import tempfile

            from tfrecord_io.engines.spark import package_zip
            spark.sparkContext.addPyFile(package_zip(tempfile.mkdtemp(prefix="tfrecord-io-")))
        return run_spark(spark, options, debug=args.debug)
    finally:
        spark.stop()
