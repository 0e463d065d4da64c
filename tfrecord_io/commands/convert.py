"""Running a conversion from a command line, for every engine and entry point.

Entry points, all with the flags of :func:`tfrecord_io.conversion.options.add_arguments`:

* ``tfrecord-io convert --engine spark|beam ...`` (:func:`configure` / :func:`run`);
* ``spark-submit jobs/to_tfrecord.py ...`` (:func:`spark_job_main`);
* ``python -m tfrecord_io.beam ...`` and ``python -m pipelines.to_tfrecord ...`` (:func:`beam_main`),
  which also take Beam's pipeline options -- and no other argument: one the conversion and Beam
  do not know (a second file from a glob the shell expanded) stops the run before it starts.

Each builds the conversion's :class:`~tfrecord_io.conversion.plan.Plan` once, *before* its engine
starts (no JVM for a misspelled path, a missing column or an existing output), and hands it to
the engine.  Exit status and error lines are :mod:`tfrecord_io.commands.exits`' (0 done, 1 failed,
2 bad usage, 3 too many rejects); when done, a summary line goes to stderr and ``{"event":
"tfrecord-io-done", ...}`` to stdout.  A failure is one error line naming its cause and file -- a task's
error, no space left on a device, an HDFS quota, a Spark that does not start, a Kerberos ticket that
ran out -- with no traceback and none of Spark's log of the failing tasks; ``--debug`` (the one flag
for more; there is no ``--verbose``) shows them too.

``--engine spark`` runs the job *in this process*: a SparkSession (``--master``; without it
``spark.master`` from spark-defaults.conf, else ``local[*]``; plus any ``--conf KEY=VALUE``),
then :func:`tfrecord_io.engines.spark.run_conversion`.  For a non-local master the ``tfrecord_io``
package is zipped and shipped to the executors with ``SparkContext.addPyFile``.  Use
``spark-submit jobs/to_tfrecord.py`` when a cluster needs spark-submit's own options.
``--engine beam`` runs :func:`tfrecord_io.engines.beam.run_conversion` with the Beam options given
after ``--engine-arg``.

``faults`` (:func:`spark_job_main`, :func:`run_beam`) is the tests' fault injection
(:mod:`tfrecord_io.testing.faults`); no flag turns it on.

This module stays import-light: ``configure`` touches neither Spark, Beam nor TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Callable

from tfrecord_io.commands import exits
from tfrecord_io.conversion import options as opts

COMMAND = "convert"  # the error lines of `tfrecord-io convert`: "tfrecord-io convert: error: ..."
# ... and of the entry points of their own, which begin as their usage errors do
BEAM_PROG = exits.Program("python -m tfrecord_io.beam")
SPARK_JOB_PROG = exits.Program("to_tfrecord.py")


def _who(args: argparse.Namespace) -> str:
    """The name the error lines of this run begin with (set by each entry point's parser)."""
    return getattr(args, "who", COMMAND)


#: A failure is one error line; --debug (the one flag for more: there is no --verbose) adds the rest.
DEBUG_HELP = ("on failure, also show the traceback and the engine's own log of it (Spark's lines of the failing "
              "tasks, Beam's runner); without it a failure is one error line")


def summary(manifest: dict) -> str:
    """The one line a finished conversion prints: records, files (in every split), rejects."""
    t = manifest["totals"]
    files = _files(manifest)
    where = "" if "splits" not in manifest else " in splits " + ", ".join(
        f"{name} ({s['records']})" for name, s in manifest["splits"].items())
    if "partitions" in manifest:
        by = ",".join(p["name"] for p in manifest["partition_by"])
        where = f" in {len(manifest['partitions'])} partitions by {by}"
    rows = ""
    if "rows_in_records" in t:  # SequenceExamples: records hold groups of rows
        rows = f" from {t['rows_in_records']} input rows"
    return (f"tfrecord-io: wrote {t['records']} {manifest['record_type']} records{rows} in {files} files{where}; "
            f"{t['rejected']} of {t['input_rows']} input rows rejected" + _missing_without_default(manifest))


def _missing_without_default(manifest: dict) -> str:
    """The features the loader would refuse: some records lack them and they have no default
    (the manifest's ``present`` counts), named with their counts -- said now, not at training."""
    from tfrecord_io.core.schema import Schema

    present, records = manifest.get("present"), manifest["totals"].get("records")
    if not isinstance(present, dict) or not records or manifest.get("record_type") != "example":
        return ""
    try:
        schema = Schema.from_dict(manifest["schema"])
    except Exception:  # noqa: BLE001 - a summary never fails a finished conversion
        return ""
    lacking = [(f.name, records - int(present[f.name])) for f in schema.features
               if not f.is_varlen and f.default is None and f.name in present and int(present[f.name]) < records]
    if not lacking:
        return ""
    named = ", ".join(f"{name!r} ({n:,})" for name, n in lacking)
    return (f"; records lacking a feature with no default, which make_dataset will refuse: {named} (give each a "
            f"default in the schema, or leave it out with features=[...])")


def _files(manifest: dict) -> int:
    return len(manifest["files"]) if "files" in manifest else sum(s["files"] for s in manifest["splits"].values())


def execute(work: Callable[[], dict], *, debug: bool = False, done: Callable[[dict], dict] | None = None,
            who: str = COMMAND) -> int:
    """Run ``work`` (a conversion returning its manifest), report the outcome, return the exit status."""
    try:
        manifest = work()
    except KeyboardInterrupt:
        exits.error(who, "interrupted")
        return exits.INTERRUPTED
    except Exception as e:  # noqa: BLE001 - every outcome is reported as one line and an exit status
        return exits.report(who, e, debug=debug)
    print(summary(manifest), file=sys.stderr)
    print(json.dumps({"event": "tfrecord-io-done", **(done(manifest) if done else {}),
                      "totals": manifest["totals"], "files": _files(manifest)}))
    return exits.OK


def _options(args: argparse.Namespace):
    """(the conversion's options, read once from the parsed arguments, None) or (None, the exit status, reported)."""
    try:
        return opts.from_args(args), None
    except Exception as e:  # noqa: BLE001 - reported like any outcome
        return None, exits.report(_who(args), e, debug=getattr(args, "debug", False))


def _plan(args: argparse.Namespace, options: opts.ConversionOptions | None = None):
    """(the plan of ``options``, else of the parsed arguments, None) or (None, the exit status, reported)."""
    from tfrecord_io.conversion.plan import plan_conversion

    if options is None:
        options, code = _options(args)
        if options is None:
            return None, code
    try:
        return plan_conversion(options), None
    except Exception as e:  # noqa: BLE001 - reported like any outcome
        return None, exits.report(_who(args), e, debug=getattr(args, "debug", False))


def _parser(prog: exits.Program, description: str) -> argparse.ArgumentParser:
    from tfrecord_io.commands.cli import add_credential_arguments

    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    parser.set_defaults(who=prog)
    opts.add_arguments(parser)
    add_credential_arguments(parser)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return parser


def _credentials(args: argparse.Namespace) -> int | None:
    """Apply ``--principal``/``--keytab``; the exit status (reported) when they are wrong, else None."""
    from tfrecord_io.commands.cli import apply_credentials

    try:
        apply_credentials(args)
    except ValueError as e:
        return exits.fail(_who(args), exits.message_of(e))
    return None


# ------------------------------------------------------------------------------------ Spark
def run_spark(builder, plan, *, conf=None, debug: bool = False, faults=None, ship_package: bool = False,
              who: str = COMMAND) -> int:
    """The Spark job in a session of its own, from ``builder`` (what spark-submit and ``convert`` run):
    :func:`tfrecord_io.engines.spark.job_session` starts it (a start that fails is one error line),
    keeps Spark's log of failing tasks quiet unless ``debug`` and stops it; a failed job is one line too
    (:func:`tfrecord_io.engines.spark.failure_line`).  ``ship_package``: zip ``tfrecord_io`` for the
    executors of a non-local master."""
    from tfrecord_io.engines.spark import job_session, package_zip, run_conversion

    def work() -> dict:
        with job_session(builder, conf, debug=debug) as spark:
            if ship_package and not spark.sparkContext.master.startswith("local"):
                import tempfile

                spark.sparkContext.addPyFile(package_zip(tempfile.mkdtemp(prefix="tfrecord-io-")))
            return run_conversion(spark, plan, faults=faults)

    return execute(work, debug=debug, who=who,
                   done=lambda m: {"engine": "spark", "output": plan.output, "seconds": m["job"]["seconds"]})


def spark_job_main(argv: list[str] | None = None, *, faults=None) -> int:
    """``spark-submit jobs/to_tfrecord.py``: parse and plan, then start the session and run."""
    args = _parser(SPARK_JOB_PROG, "Convert CSV or JSON (local or HDFS) into TFRecords with Spark.").parse_args(argv)
    if not args.principal and not args.keytab:
        args.principal, args.keytab = _spark_submit_keytab()
    code = _credentials(args)
    if code is not None:
        return code
    plan, code = _plan(args)
    if plan is None:
        return code
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("tfrecord-io to_tfrecord")
    if not sys.stderr.isatty():  # in logs, Spark's progress bar runs into our summary line
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    return run_spark(builder, plan, debug=args.debug, faults=faults, who=SPARK_JOB_PROG)


def _spark_submit_keytab() -> tuple[str | None, str | None]:
    """spark-submit's ``--principal``/``--keytab`` (``spark.kerberos.principal/keytab``), when this is
    its driver and the keytab is here (in YARN's cluster mode the driver has delegation tokens instead)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit: start no JVM for this
        return None, None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # the gateway spark-submit started; no SparkContext yet
    conf = SparkConf()
    principal, keytab = conf.get("spark.kerberos.principal", None), conf.get("spark.kerberos.keytab", None)
    if principal and keytab and os.path.isfile(keytab):
        return principal, keytab
    return None, None


# ------------------------------------------------------------------------------------- Beam
def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("tfrecord_io").setLevel(logging.INFO)


def run_beam(args: argparse.Namespace, beam_args: list[str], *, faults=None) -> int:
    """The Beam pipeline with ``beam_args`` as pipeline options (``--runner=...``): refuse what Beam
    does not take, plan (as Beam's ``--hdfs_user``), run.  The options are read once, here."""
    options, code = _options(args)
    if options is None:
        return code
    why = options.needs_spark()
    if why is not None:  # exit 2 before anything is listed: only the Spark job has it
        return exits.fail(_who(args), f"{why}: use the Spark job (tfrecord-io convert --engine spark, or "
                                      f"spark-submit jobs/to_tfrecord.py)")
    from tfrecord_io.engines import beam as tbeam

    try:
        pipeline = tbeam.pipeline_options(beam_args)
    except ValueError as e:
        return exits.fail(_who(args), exits.message_of(e))
    _configure_logging()
    if not args.debug:  # a failed bundle is reported once, as our one line; Beam's runner would add its traceback
        logging.getLogger("apache_beam.runners").setLevel(logging.CRITICAL)
    from apache_beam.options.pipeline_options import HadoopFileSystemOptions

    with tbeam.as_hdfs_user(pipeline.view_as(HadoopFileSystemOptions).hdfs_user):
        plan, code = _plan(args, options)
        if plan is None:
            return code
        ran = {}

        def work():
            result = tbeam.run_conversion(plan, pipeline, faults=faults)
            ran.update(runner=result.runner, seconds=result.seconds)
            return result.manifest

        return execute(work, debug=args.debug, who=_who(args),
                       done=lambda m: {"engine": "beam", "output": plan.output, **ran})


def beam_main(argv: list[str] | None = None, *, faults=None) -> int:
    """``python -m tfrecord_io.beam`` (and ``pipelines/to_tfrecord.py``): Beam's own options may follow."""
    parser = _parser(BEAM_PROG,
                     "Convert CSV or JSON Lines (local, file:// or hdfs://) into TFRecords with Apache Beam. "
                     "Beam's pipeline options (--runner, ...) may follow; any other argument is an error.")
    try:
        args, beam_args = parser.parse_known_args(argv)
    except SystemExit as e:  # argparse exits on --help (0) and on bad arguments (2)
        return int(e.code or 0)
    code = _credentials(args)
    if code is not None:
        return code
    return run_beam(args, beam_args, faults=faults)


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
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def run(args: argparse.Namespace) -> int:
    if args.engine == "beam":
        if args.master or args.conf:
            return exits.fail(COMMAND, "--master/--conf are Spark options; pass Beam options with --engine-arg")
        return run_beam(args, list(args.engine_arg))
    if args.engine_arg:
        return exits.fail(COMMAND, "--engine-arg is for --engine beam; use --conf for Spark")
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            return exits.fail(COMMAND, f"--conf expects KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    plan, code = _plan(args)
    if plan is None:
        return code
    # Executors in local mode start this interpreter (which has pyarrow, numpy, ...).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from tfrecord_io.engines.spark import driver_java_options
    from tfrecord_io.storage import credentials

    spark_conf = SparkConf()
    if not sys.stderr.isatty():  # in logs, Spark's progress bar runs into our summary line
        spark_conf.set("spark.ui.showConsoleProgress", "false")
    if credentials.java_options():  # the driver JVM finds KRB5_CONFIG's realm too
        spark_conf.set("spark.driver.extraJavaOptions", credentials.java_options())
    for k, v in conf.items():
        spark_conf.set(k, v)
    # (after the user's --conf: their own log4j2 configuration, if they give one, wins)
    spark_conf.set("spark.driver.extraJavaOptions",
                   driver_java_options(spark_conf.get("spark.driver.extraJavaOptions", None)))
    if args.master:
        spark_conf.setMaster(args.master)  # no --master: spark-defaults.conf's, else local[*]
    builder = SparkSession.builder.appName("tfrecord-io convert").config(conf=spark_conf)
    return run_spark(builder, plan, conf=spark_conf, debug=args.debug, ship_package=True)
