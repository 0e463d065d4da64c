"""``tfrecord-io convert``: CSV/JSON to TFRecords with Spark (default) or Beam.

``--engine spark`` runs the Spark job *in this process*: it starts a SparkSession (``--master``;
without it ``spark.master`` from spark-defaults.conf, else ``local[*]``; plus any ``--conf
KEY=VALUE``) and calls :func:`tfrecord_io.spark.run_conversion`, the same function
``spark-submit jobs/to_tfrecord.py`` runs.  For a non-local master the ``tfrecord_io`` package
is zipped and shipped to the executors with ``SparkContext.addPyFile``.  Use ``spark-submit jobs/to_tfrecord.py`` instead when a cluster
needs spark-submit's own options (deploy mode, YARN queues, ...).

``--engine beam`` hands the same arguments to the Beam pipeline's ``main(argv)``
(``pipelines/to_tfrecord.py``; Beam options go after ``--engine-arg``).

Exit status: 0 done; 1 the conversion failed; 2 bad arguments or schema, or an existing output
without ``--overwrite``; 3 more rows were rejected than ``--max-reject-fraction`` allows (nothing
committed, no ``_SUCCESS``).

This module stays import-light: ``configure`` touches neither Spark nor TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REJECTS = 0, 1, 2, 3
# For --help only (configure must not import the engine modules); the value used is
# tfrecord_io.output.DEFAULT_MAX_REJECT_FRACTION, and a test checks the two agree.
DEFAULT_MAX_REJECT_FRACTION = 0.01


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options, shared by ``jobs/to_tfrecord.py`` and ``tfrecord-io convert``."""
    parser.add_argument("--input", required=True, metavar="URI[,URI...]",
                        help="input files, directories or globs: local paths, file:// or hdfs://")
    parser.add_argument("--format", required=True, choices=("csv", "json"), dest="input_format",
                        help="csv, or json (JSON Lines; whole-file JSON with --multiline)")
    parser.add_argument("--schema", required=True, metavar="PATH_OR_URI", help="the YAML schema")
    parser.add_argument("--output", required=True, metavar="URI", help="output directory")
    parser.add_argument("--record-type", choices=("example", "sequence_example"), default=None,
                        help="must match the schema's record_type (default: the schema's)")
    parser.add_argument("--compression", choices=("none", "gzip", "zlib"), default="none",
                        help="TFRecord compression (default: none)")
    parser.add_argument("--num-shards", type=int, default=None, metavar="N",
                        help="number of output files (default: one per 128 MiB of input, at least 1)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing non-empty output")
    parser.add_argument("--max-reject-fraction", type=float, default=None, metavar="F",
                        help=f"fail (nothing committed) when rejected/input rows exceeds F "
                             f"(default: {DEFAULT_MAX_REJECT_FRACTION}, i.e. 1%%)")
    parser.add_argument("--multiline", action="store_true",
                        help="records may span lines: whole-file JSON documents, or CSV with line breaks "
                             "inside quoted fields (each file is then read by one task)")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N",
                        help="sequence_example: split groups longer than N rows into consecutive records "
                             "(default: 10000)")


def options_from_args(args: argparse.Namespace):
    """A :class:`tfrecord_io.spark.ConversionOptions` from parsed arguments."""
    from tfrecord_io.spark import ConversionOptions

    optional = {"max_reject_fraction": args.max_reject_fraction, "max_steps": args.max_steps}
    return ConversionOptions(
        inputs=args.input, input_format=args.input_format, schema=args.schema, output=args.output,
        record_type=args.record_type, compression=args.compression, num_shards=args.num_shards,
        overwrite=args.overwrite, multiline=args.multiline,
        **{k: v for k, v in optional.items() if v is not None})


def summary(manifest: dict) -> str:
    t = manifest["totals"]
    rows = t.get("rows_in_records", t["records"])
    return (f"tfrecord-io: wrote {t['records']} {manifest['record_type']} records ({rows} input rows) in "
            f"{len(manifest['files'])} files; {t['rejected']} of {t['input_rows']} input rows rejected")


def run_job(spark, args: argparse.Namespace) -> int:
    """Run the Spark job for parsed arguments; print the outcome; return the exit status."""
    from tfrecord_io.output import RejectLimitExceeded
    from tfrecord_io.schema import SchemaError
    from tfrecord_io.spark import run_conversion

    try:
        options = options_from_args(args)
    except ValueError as e:
        print(f"tfrecord-io: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        manifest = run_conversion(spark, options)
    except RejectLimitExceeded as e:
        print(f"tfrecord-io: error: {e}", file=sys.stderr)
        return EXIT_REJECTS
    except (SchemaError, FileExistsError, FileNotFoundError, ValueError) as e:
        # Raised before the Spark job starts (failures inside it are ConversionErrors): bad
        # arguments, schema, input or output location.
        print(f"tfrecord-io: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - reported, with its cause, as the job's failure
        print(f"tfrecord-io: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(summary(manifest), file=sys.stderr)
    print(json.dumps({"event": "tfrecord-io-done", "output": options.output, "totals": manifest["totals"],
                      "files": len(manifest["files"]), "seconds": manifest["job"]["seconds"]}))
    return EXIT_OK


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=("spark", "beam"), default="spark",
                        help="spark (default; runs in this process) or beam (pipelines/to_tfrecord.py)")
    add_job_arguments(parser)
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark.master from spark-defaults.conf, else local[*])")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark configuration setting (repeatable)")
    parser.add_argument("--engine-arg", action="append", default=[], metavar="ARG",
                        help="an extra argument for the Beam pipeline, e.g. --engine-arg=--runner=DirectRunner "
                             "(repeatable)")


def beam_argv(args: argparse.Namespace) -> list[str]:
    """The job's arguments as a command line for the Beam pipeline."""
    argv = ["--input", args.input, "--format", args.input_format, "--schema", args.schema,
            "--output", args.output, "--compression", args.compression]
    if args.record_type:
        argv += ["--record-type", args.record_type]
    if args.num_shards is not None:
        argv += ["--num-shards", str(args.num_shards)]
    if args.overwrite:
        argv.append("--overwrite")
    if args.max_reject_fraction is not None:
        argv += ["--max-reject-fraction", repr(args.max_reject_fraction)]
    if args.multiline:
        argv.append("--multiline")
    if args.max_steps is not None:
        argv += ["--max-steps", str(args.max_steps)]
    return argv + list(args.engine_arg)


def _beam_main():
    """``pipelines.to_tfrecord.main``: importable from sys.path, or from the source checkout."""
    try:
        from pipelines.to_tfrecord import main
        return main
    except ImportError:
        pass
    import importlib.util

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(here, "pipelines", "to_tfrecord.py")
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location("pipelines.to_tfrecord", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "main", None)


def run(args: argparse.Namespace) -> int:
    if args.engine == "beam":
        if args.master or args.conf:
            print("tfrecord-io: error: --master/--conf are Spark options; pass Beam options with --engine-arg",
                  file=sys.stderr)
            return EXIT_USAGE
        main = _beam_main()
        if main is None:
            print("tfrecord-io: error: the Beam pipeline (pipelines/to_tfrecord.py with main(argv)) is not "
                  "importable; run from the source checkout or put it on PYTHONPATH", file=sys.stderr)
            return EXIT_USAGE
        return int(main(beam_argv(args)) or 0)
    if args.engine_arg:
        print("tfrecord-io: error: --engine-arg is for --engine beam; use --conf for Spark", file=sys.stderr)
        return EXIT_USAGE
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"tfrecord-io: error: --conf expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return EXIT_USAGE
        conf[key.strip()] = value
    # Executors in local mode start this interpreter (which has pyarrow, numpy, ...).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    spark_conf = SparkConf()
    for k, v in conf.items():
        spark_conf.set(k, v)
    builder = SparkSession.builder.appName("tfrecord-io convert").config(conf=spark_conf)
    if args.master:
        builder = builder.master(args.master)
    spark = builder.getOrCreate()  # no --master: spark-defaults.conf's, else local[*]
    try:
        if not spark.sparkContext.master.startswith("local"):
            import tempfile

            from tfrecord_io.spark import package_zip
            spark.sparkContext.addPyFile(package_zip(tempfile.mkdtemp(prefix="tfrecord-io-")))
        return run_job(spark, args)
    finally:
        spark.stop()
