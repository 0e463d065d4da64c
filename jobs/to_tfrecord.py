"""spark-submit entry point: CSV/JSON to TFRecords (all the logic is in tfrecord_io.spark).

    spark-submit [--master URL] [--py-files tfrecord_io.zip] jobs/to_tfrecord.py \\
        --input URI[,URI...] --format csv|json --schema PATH_OR_URI --output URI \\
        [--record-type example|sequence_example] [--compression none|gzip|zlib] [--num-shards N] \\
        [--overwrite] [--max-reject-fraction F] [--multiline] [--max-steps N]

Executors must be able to import tfrecord_io: ship it with ``--py-files`` (a zip of the package,
e.g. from ``tfrecord_io.spark.package_zip``, or a wheel) unless it is installed on the cluster.
Exit status: 0 done, 1 failed, 2 bad arguments/schema/existing output, 3 too many rejects.
"""

import argparse
import sys

from tfrecord_io.convert import add_job_arguments, run_job


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="to_tfrecord.py", description=__doc__.split("\n\n")[0])
    add_job_arguments(parser)
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("tfrecord-io to_tfrecord").getOrCreate()
    try:
        return run_job(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
