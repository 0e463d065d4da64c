"""spark-submit entry point for the tests: ``jobs/to_tfrecord.py`` with a fault injected.

    spark-submit tests/jobs/faulty_to_tfrecord.py die:0,2 --input ... (the job's options)

The first argument is a :meth:`tfrecord_io.testing.faults.FirstAttempt.parse` spec (``die:0,2``,
``stall:0``, ``die:*``); the rest are the job's.
"""

import sys

from tfrecord_io.commands.convert import spark_job_main
from tfrecord_io.testing.faults import FirstAttempt

if __name__ == "__main__":
    spec, *job_args = sys.argv[1:]
    sys.exit(spark_job_main(job_args, faults=FirstAttempt.parse(spec)))
