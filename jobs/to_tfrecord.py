"""spark-submit entry point: CSV/JSON to TFRecords (all the logic is in tfrecord_io).

    spark-submit [--master URL] [--py-files tfrecord_io.zip] jobs/to_tfrecord.py \
        --input URI[,URI...] --format csv|json --schema PATH_OR_URI --output URI \
        [--record-type example|sequence_example] [--compression none|gzip|zlib] [--num-shards N] \
        [--overwrite] [--max-reject-fraction F] [--multiline] [--max-steps N] \
        [--allow-missing-columns] [--ignore-extra-columns] [--debug]

Executors must be able to import tfrecord_io: ship it with ``--py-files`` (a zip of the package,
e.g. from ``tfrecord_io.spark.package_zip``, or a wheel) unless it is installed on the cluster.
Exit status: 0 done, 1 failed, 2 bad arguments/schema/input/output, 3 too many rejects
(``tfrecord_io.commands.convert``).
"""

import sys

from tfrecord_io.commands.convert import spark_job_main

if __name__ == "__main__":
    sys.exit(spark_job_main())
