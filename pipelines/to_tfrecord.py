"""CSV / JSON Lines -> TFRecords with Apache Beam (GitHub issue #5).

    python -m pipelines.to_tfrecord --input URI[,URI...] --format csv|json --schema PATH_OR_URI \\
        --output URI [--record-type example|sequence_example] [--compression none|gzip|zlib] \\
        [--num-shards N] [--overwrite] [--max-reject-fraction F] [--multiline] [--max-steps N] \\
        [--block-size BYTES] \\
        [Beam pipeline options: --runner, --direct_num_workers, --direct_running_mode,
         --hdfs_host, --hdfs_port, --hdfs_user, ...]

The job's options are the Spark job's (``jobs/to_tfrecord.py``), with the same meaning and the
same exit status: 0 done (``_SUCCESS`` written); 1 the conversion failed; 2 bad arguments or
schema, or an existing output without ``--overwrite``; 3 more rows were rejected than
``--max-reject-fraction`` allows (nothing committed, no ``_SUCCESS``).  On success a summary goes
to the log and one JSON line (``{"event": "tfrecord-io-done", ...}``) to stdout.

Beam's default ``DirectRunner`` tries Prism first (downloading it); ``--runner=FnApiRunner``
runs in-process straight away.  The last log line names the runner that actually ran.
All logic is in :mod:`tfrecord_io.beam`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from tfrecord_io import csv_arrow, output
from tfrecord_io.convert import EXIT_FAILED, EXIT_OK, EXIT_REJECTS, EXIT_USAGE, add_job_arguments

log = logging.getLogger("tfrecord_io.beam")



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pipelines.to_tfrecord",
        description="Convert CSV or JSON Lines (local, file:// or hdfs://) into TFRecords with Apache Beam. "
                    "Options it does not know are passed to Beam as pipeline options.")
    add_job_arguments(p)  # the Spark job's options, defined once
    p.add_argument("--block-size", type=int, default=csv_arrow.DEFAULT_BLOCK_SIZE, metavar="BYTES",
                   help="bytes parsed at a time per file (a CSV record must fit in one block)")
    return p


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("tfrecord_io").setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Run the conversion; returns the exit status (see the module doc)."""
    parser = build_parser()
    try:
        args, beam_args = parser.parse_known_args(argv)
    except SystemExit as e:  # argparse exits on --help (0) and on bad arguments (2)
        return int(e.code or 0)
    _configure_logging()
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io import beam as tbeam
    from tfrecord_io.schema import Schema, SchemaError

    try:
        schema = Schema.load(args.schema)
        if args.record_type and args.record_type != schema.record_type:
            raise SchemaError(f"--record-type {args.record_type} does not match the schema {args.schema}, "
                              f"whose record_type is {schema.record_type}")
        conv = tbeam.Conversion(
            input=args.input, input_format=args.input_format, schema=schema, output=args.output,
            compression=args.compression, num_shards=args.num_shards, overwrite=args.overwrite,
            max_reject_fraction=(output.DEFAULT_MAX_REJECT_FRACTION if args.max_reject_fraction is None
                                 else args.max_reject_fraction), multiline=args.multiline,
            max_steps=args.max_steps or tbeam.DEFAULT_MAX_STEPS, block_size=args.block_size)
        options = PipelineOptions(beam_args)
    except (SchemaError, ValueError) as e:
        log.error("%s", e)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - e.g. the schema file cannot be read
        log.error("cannot start the conversion: %s: %s", type(e).__name__, e)
        return EXIT_FAILED
    try:
        result = tbeam.run_conversion(conv, options)
    except output.RejectLimitExceeded as e:
        log.error("%s", e)
        return EXIT_REJECTS
    except FileExistsError as e:
        log.error("%s", e)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - reported, with its cause, as the conversion's failure
        log.error("conversion of %s to %s failed: %s: %s", conv.input, conv.output, type(e).__name__, e)
        return EXIT_FAILED
    print(json.dumps({"event": "tfrecord-io-done", "engine": "beam", "runner": result.runner,
                      "output": conv.output, "totals": result.manifest["totals"],
                      "files": len(result.manifest["files"]), "seconds": result.seconds}))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
