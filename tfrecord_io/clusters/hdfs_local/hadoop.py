"""The Hadoop the local clusters run: Apache Hadoop 3.5.0's jars, which Maven resolves from Maven
Central into the cache once (:func:`fetch_jars`), the launchers next to this file (``MiniHdfs.java``,
``MiniYarn.java``, run in Java's single-file source mode, and the ``pom.xml`` of their jars), the
JVM options they start with, and the error every part of :mod:`tfrecord_io.clusters.hdfs_local`
raises."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tfrecord_io.clusters import jvm

__all__ = ["HADOOP_VERSION", "HdfsLocalError", "fetch_jars"]

HADOOP_VERSION = "3.5.0"
LAUNCHERS = Path(__file__).resolve().parent  # MiniHdfs.java, MiniYarn.java and their pom.xml
HDFS_PROCESS, YARN_PROCESS = b"MiniHdfs", b"MiniYarn"  # our launchers, in their JVMs' command lines
NEEDED_BY = f"the local Hadoop {HADOOP_VERSION}"
JVM_OPTS = (
    "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
    "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
    # Chatty per-operation / per-subdir INFO lines; keep the log about the cluster itself.
    *(f"-Dorg.slf4j.simpleLogger.log.org.apache.hadoop.hdfs.server.{name}=warn" for name in (
        "datanode.fsdataset.impl.FsDatasetImpl", "namenode.FSNamesystem.audit",
        "datanode.DataNode.clienttrace")),
)
# With Kerberos the log shows the QOP each DataNode connection negotiated (SASL on data transfer).
SASL_LOG_OPT = ("-Dorg.slf4j.simpleLogger.log.org.apache.hadoop.hdfs.protocol.datatransfer"
                ".sasl.DataTransferSaslUtil=debug")
# The YARN JVM (ResourceManager + NodeManager; containers are processes of their own).
YARN_JVM_OPTS = ("-Xmx768m", *JVM_OPTS[1:])


class HdfsLocalError(RuntimeError):
    """The local HDFS could not be set up, started or stopped (the message says why)."""


def _jars_dir() -> Path:
    return jvm.cache_root() / f"hadoop-{HADOOP_VERSION}" / "jars"


def _jars_marker() -> str:
    """What ``.complete`` says once the jars of this ``pom.xml`` are all there (a pom that gains a
    dependency makes an older cache incomplete, so it is resolved again)."""
    digest = hashlib.sha256((LAUNCHERS / "pom.xml").read_bytes()).hexdigest()[:16]
    return f"hadoop {HADOOP_VERSION} pom {digest}\n"


def _jars_complete(target: Path) -> bool:
    try:
        return (target / ".complete").read_text() == _jars_marker()
    except FileNotFoundError:
        return False


def fetch_jars() -> Path:
    """Resolve the Hadoop jars with Maven into the cache (once) and return their directory.

    Idempotent and safe to call from several processes at once.  Needs ``mvn`` and access to Maven
    Central (or a mirror configured in ``~/.m2/settings.xml``).
    """
    target = _jars_dir()
    if _jars_complete(target):
        return target
    mvn = jvm.require("mvn", "Apache Maven 3 (e.g. `apt-get install maven`)", NEEDED_BY, HdfsLocalError)
    with jvm.locked(target.parent / ".fetch.lock"):
        if _jars_complete(target):
            return target
        import tempfile

        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
            pom = Path(tmp) / "pom.xml"  # a copy, so Maven never writes next to the package
            shutil.copyfile(LAUNCHERS / "pom.xml", pom)
            out = Path(tmp) / "jars"
            try:
                run = subprocess.run(
                    [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                     f"-DoutputDirectory={out}"],
                    capture_output=True, text=True, timeout=1800, cwd=tmp)
            except subprocess.TimeoutExpired as e:
                raise HdfsLocalError("Maven did not resolve the jars within 30 minutes") from e
            if run.returncode != 0 or not any(out.glob("hadoop-client-minicluster-*.jar")):
                tail = "\n".join((run.stdout + run.stderr).splitlines()[-30:])
                raise HdfsLocalError(
                    f"Maven could not resolve the Hadoop {HADOOP_VERSION} jars (is Maven Central "
                    f"reachable?); `mvn dependency:copy-dependencies` said:\n{tail}")
            (out / ".complete").write_text(_jars_marker())
            if target.exists():
                shutil.rmtree(target)
            os.replace(out, target)
    return target
