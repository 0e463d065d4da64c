"""The Beam Java runners a local job server runs (:data:`RUNNERS`: Flink 1.19 and Spark 3.5 in Beam
2.62.0's job servers, with the JVM options of each), the jars Maven resolves for them into the cache
once (:func:`fetch_jars`), the manifest-only jar Beam's own ``FlinkRunner`` / ``SparkRunner`` start
(:func:`job_server_jar`), and the error every part of :mod:`tfrecord_io.clusters.flink` raises."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from tfrecord_io.clusters import jvm

__all__ = [
    "BEAM_RUNNER_VERSION", "FLINK_RUNNER_ARTIFACT", "FLINK_VERSION", "RUNNERS", "SPARK_VERSION", "FlinkLocalError",
    "fetch_jars", "job_server_jar",
]

BEAM_RUNNER_VERSION = "2.62.0"          # Beam's Java runners, resolved by Maven (docs/running-on-flink.md)
FLINK_RUNNER_ARTIFACT = "beam-runners-flink-1.19"
FLINK_VERSION = "1.19.0"                # what beam-runners-flink-1.19:2.62.0 depends on
SPARK_VERSION = "3.5.1"                 # named in pom-spark.xml (the runner has Spark as "provided")
LAUNCHERS = Path(__file__).resolve().parent  # BeamJobServer.java, pom.xml, pom-spark.xml
JOB_SERVER_PROCESS = b"BeamJobServer"  # our launcher, in the JVM's command line
NEEDED_BY = "the local Beam job server"


class FlinkLocalError(RuntimeError):
    """The local Flink (or Spark) job server could not be set up, started or stopped (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Runner:
    name: str
    artifact: str
    pom: str
    main_class: str
    master_args: tuple[str, ...]
    jvm_opts: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


RUNNERS = {
    "flink": Runner(
        "flink", FLINK_RUNNER_ARTIFACT, "pom.xml", "org.apache.beam.runners.flink.FlinkJobServerDriver",
        ("--flink-master=[local]",),
        # Flink's MiniCluster says ~2,000 lines a job at INFO; keep the job's states and restarts.
        ("-Dorg.slf4j.simpleLogger.log.org.apache.flink=warn",
         "-Dorg.slf4j.simpleLogger.log.org.apache.pekko=warn",
         "-Dorg.slf4j.simpleLogger.log.org.apache.flink.runtime.executiongraph.ExecutionGraph=info",
         "-Dorg.slf4j.simpleLogger.log.org.apache.flink.runtime.jobmaster.JobMaster=info")),
    "spark": Runner(
        "spark", "beam-runners-spark-3", "pom-spark.xml", "org.apache.beam.runners.spark.SparkJobServerDriver",
        ("--spark-master-url=local[2]",),
        # Spark 3.5 on Java 17 needs these (as spark-submit's launcher adds them).
        (*(f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in (
            "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
            "java.util.concurrent", "java.util.concurrent.atomic", "sun.nio.ch", "sun.nio.cs", "sun.security.action",
            "sun.util.calendar")),
         "-Dorg.slf4j.simpleLogger.log.org.apache.spark=warn",
         "-Dorg.slf4j.simpleLogger.log.org.sparkproject=warn",
         "-Dspark.ui.enabled=false"),
        env=(("SPARK_LOCAL_IP", "127.0.0.1"),)),
}


def runner_of(name: str) -> Runner:
    try:
        return RUNNERS[name]
    except KeyError:
        raise ValueError(f"unknown Beam runner {name!r}: one of {', '.join(RUNNERS)}") from None


def _home(runner: str) -> Path:
    return jvm.cache_root() / f"beam-{runner_of(runner).name}-{BEAM_RUNNER_VERSION}"


def _jars_dir(runner: str) -> Path:
    return _home(runner) / "jars"


def job_server_jar(runner: str = "flink") -> Path:
    """The manifest-only jar for ``--flink_job_server_jar`` / ``--spark_job_server_jar`` (after
    :func:`fetch_jars`)."""
    return _home(runner) / f"beam-{runner_of(runner).name}-job-server.jar"


def _manifest(main_class: str, jars: list[str]) -> bytes:
    """A jar manifest naming ``main_class`` and ``jars`` (relative URLs), lines wrapped at 72 bytes."""
    def wrap(line: str) -> str:
        data = line.encode("utf-8")
        out, first = [], True
        while data:
            n = 72 if first else 71
            out.append((b"" if first else b" ") + data[:n])
            data, first = data[n:], False
        return "".join(part.decode("utf-8") + "\r\n" for part in out)

    return (wrap("Manifest-Version: 1.0") + wrap("Created-By: tfrecord-io") + wrap(f"Main-Class: {main_class}")
            + wrap("Class-Path: " + " ".join(jars)) + "\r\n").encode("utf-8")


def _write_job_server_jar(main_class: str, jars_dir: Path, target: Path) -> None:
    names = sorted(p.name for p in jars_dir.glob("*.jar"))
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/MANIFEST.MF", _manifest(main_class, [f"{jars_dir.name}/{n}" for n in names]))
    os.replace(tmp, target)


def fetch_jars(runner: str = "flink") -> Path:
    """Resolve the job server's jars with Maven into the cache (once) and return their directory.

    Also writes :func:`job_server_jar`.  Idempotent and safe to call from several processes at
    once.  Needs ``mvn`` and access to Maven Central (or a mirror in ``~/.m2/settings.xml``).
    """
    spec = runner_of(runner)
    target = _jars_dir(runner)
    done = target / ".complete"
    if done.is_file() and job_server_jar(runner).is_file():
        return target
    with jvm.locked(target.parent / ".fetch.lock"):
        if not done.is_file():
            mvn = jvm.require("mvn", "Apache Maven 3 (e.g. `apt-get install maven`)", NEEDED_BY, FlinkLocalError)
            import tempfile

            with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
                pom = Path(tmp) / "pom.xml"  # a copy, so Maven never writes next to the package
                shutil.copyfile(LAUNCHERS / spec.pom, pom)
                out = Path(tmp) / "jars"
                try:
                    run = subprocess.run(
                        [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={out}"],
                        capture_output=True, text=True, timeout=1800, cwd=tmp)
                except subprocess.TimeoutExpired as e:
                    raise FlinkLocalError(f"Maven did not resolve the Beam {runner} runner's jars within 30 "
                                          f"minutes") from e
                if run.returncode != 0 or not any(out.glob(f"{spec.artifact}-{BEAM_RUNNER_VERSION}.jar")):
                    tail = "\n".join((run.stdout + run.stderr).splitlines()[-30:])
                    raise FlinkLocalError(
                        f"Maven could not resolve org.apache.beam:{spec.artifact}:{BEAM_RUNNER_VERSION} "
                        f"and its dependencies (is Maven Central reachable?); `mvn dependency:copy-dependencies` "
                        f"said:\n{tail}")
                (out / ".complete").write_text(f"{spec.artifact} {BEAM_RUNNER_VERSION}\n")
                if target.exists():
                    shutil.rmtree(target)
                os.replace(out, target)
        _write_job_server_jar(spec.main_class, target, job_server_jar(runner))
    return target
