"""A Beam job server for Flink (or Spark) on 127.0.0.1, for tests and trying the Beam pipeline there.

The job server is Beam's own ``org.apache.beam.runners.flink.FlinkJobServerDriver`` from the
``beam-runners-flink-1.19`` 2.62.0 jars (Flink 1.19.0), which Maven resolves from Maven Central
into ``${TFRECORD_IO_CACHE:-~/.cache/tfrecord-io}/beam-flink-2.62.0/jars`` (see
:func:`fetch_jars`; about 150 MB).  With ``--flink-master=[local]`` it runs every submitted job on
a Flink MiniCluster inside its own JVM; the Python SDK (2.77) talks to it with the portable
runner.  Why the Java runner is 2.62.0 while the Python SDK is 2.77.0: docs/running-on-flink.md.
``runner="spark"`` does the same with ``org.apache.beam.runners.spark.SparkJobServerDriver``
(``beam-runners-spark-3`` 2.62.0 with Spark 3.5.1, ``local[2]``; about 300 MB, ``pom-spark.xml``).

:func:`fetch_jars` also writes ``beam-flink-job-server.jar`` (``beam-spark-job-server.jar``), a
jar with only a manifest that names the main class and the resolved jars (``Class-Path``):
Beam's own ``FlinkRunner`` (``SparkRunner``) starts it when given ``--flink_job_server_jar``
(``--spark_job_server_jar``), as it would the job-server jar Beam downloads itself.

Layout of a base dir::

    server.json   runner, pid + ports of the running job server (written once it is ready)
    conf/         a Flink conf dir for ``--flink_conf_dir``: failed tasks are retried
    artifacts/    artifacts the pipelines stage
    jobserver.log the JVM's output

:func:`start` returns a :class:`LocalFlinkJobServer`; :meth:`LocalFlinkJobServer.pipeline_args`
gives the Beam options that run a pipeline on it.  Beam's gRPC servers bind every interface
(``NettyServerBuilder.forPort``); the job server advertises and is used on 127.0.0.1.

One job per module, their public names all here: ``runners`` (the Beam runners, the jars Maven
fetches for them, the manifest-only job-server jar, :class:`FlinkLocalError`), ``handle``
(:class:`LocalFlinkJobServer` and what it asks the job server: readiness, its jobs, its stop) and
``job_server`` (the job server's start, status and stop).
"""

from __future__ import annotations

from tfrecord_io.clusters.flink.handle import LocalFlinkJobServer
from tfrecord_io.clusters.flink.job_server import default_base_dir, start, status, stop
from tfrecord_io.clusters.flink.runners import (
    BEAM_RUNNER_VERSION, FLINK_RUNNER_ARTIFACT, FLINK_VERSION, RUNNERS, SPARK_VERSION, FlinkLocalError, fetch_jars,
    job_server_jar,
)

__all__ = [
    "BEAM_RUNNER_VERSION", "FLINK_RUNNER_ARTIFACT", "FLINK_VERSION", "RUNNERS", "SPARK_VERSION", "FlinkLocalError",
    "LocalFlinkJobServer", "default_base_dir", "fetch_jars", "job_server_jar", "start", "status", "stop",
]
