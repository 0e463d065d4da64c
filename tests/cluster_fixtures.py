"""pytest plugin: the real local clusters, each started once per session on first use.

Enabled from ``tests/conftest.py`` (``pytest_plugins``).  Every fixture here comes from one factory,
:func:`session_cluster`: it starts its cluster under the session's tmp dir with ``detach=False``
(the JVM also exits on its own if pytest dies), prints how long the start took, yields the handle
and stops the cluster at the end of the session.  If the cluster cannot be started -- Java 17+ or
Maven missing, jars that do not resolve -- the fixture FAILS (it never skips) with what to install.

* ``hdfs``: a NameNode + DataNode (:class:`tfrecord_io.clusters.hdfs_local.LocalHdfs`);
* ``yarn``: a ResourceManager + NodeManager on that HDFS (:class:`~tfrecord_io.clusters.hdfs_local.LocalYarn`);
* ``flink``: Beam's Flink job server, Flink master ``[local]`` (:mod:`tfrecord_io.clusters.flink`);
* ``beam_spark``: Beam's Spark job server (Spark 3.5.1 in ``local[2]``).

Nothing here touches ``os.environ``: tests pass ``hdfs.conf_dir`` / ``hdfs.namenode_uri`` explicitly.
Markers follow the fixtures a test uses (``conftest.MARKERS``): ``-m "not hdfs"`` leaves out every
test that needs the HDFS.
"""

from __future__ import annotations

import time
from typing import Callable

import pytest

from tfrecord_io.clusters import flink as flink_local
from tfrecord_io.clusters import hdfs_local


def session_cluster(name: str, start: Callable, failure: tuple[type[BaseException], ...], needs: str,
                    describe: Callable[[object], str], requires: tuple[str, ...] = ()):
    """A session-scoped fixture ``name``: ``start(base_dir, *required fixtures)`` -> a handle with
    ``stop()``; ``failure`` the start's errors, ``needs`` what the tests need it for (and what to
    install), ``describe(handle)`` the line printed once it is up."""

    def fixture(tmp_path_factory, request):
        base = tmp_path_factory.mktemp(name)
        started = time.monotonic()
        try:
            handle = start(base, *(request.getfixturevalue(r) for r in requires))
        except failure as e:
            pytest.fail(f"{needs}, and it could not be started: {e}", pytrace=False)
        print(f"\n{describe(handle)} up in {time.monotonic() - started:.1f}s")
        try:
            yield handle
        finally:
            handle.stop()

    fixture.__name__ = name.replace("-", "_")
    return pytest.fixture(scope="session", name=name.replace("-", "_"))(fixture)


_LOCAL_ERRORS = (hdfs_local.HdfsLocalError, TimeoutError)
_FLINK_ERRORS = (flink_local.FlinkLocalError, TimeoutError)

hdfs = session_cluster(
    "hdfs", lambda base: hdfs_local.start(base, detach=False), _LOCAL_ERRORS,
    "the tests need a local HDFS (Java 17+ and Maven: `tfrecord-io hdfs-local fetch`)",
    lambda h: f"local HDFS at {h.namenode_uri} (WebHDFS {h.webhdfs_url}, log {h.log_path})")

yarn = session_cluster(
    "yarn", lambda base, hdfs: hdfs_local.start_yarn(hdfs, base, detach=False), _LOCAL_ERRORS,
    "the YARN tests need a local YARN (Java 17+ and Maven)",
    lambda y: f"local YARN, ResourceManager {y.rm_address} (HADOOP_CONF_DIR {y.conf_dir}, log {y.log_path})",
    requires=("hdfs",))

flink = session_cluster(
    "flink", lambda base: flink_local.start(base, detach=False), _FLINK_ERRORS,
    "the Flink tests need Beam's Flink job server (Java 17 and Maven; `tfrecord-io flink-local fetch` "
    "resolves the jars)",
    lambda s: f"Flink job server at {s.job_endpoint} (log {s.log_path})")

beam_spark = session_cluster(
    "beam_spark", lambda base: flink_local.start(base, detach=False, runner="spark"), _FLINK_ERRORS,
    "the Beam-on-Spark test needs Beam's Spark job server (Java 17 and Maven; `tfrecord-io flink-local fetch "
    "--runner spark` resolves the jars)",
    lambda s: f"Beam Spark job server at {s.job_endpoint} (log {s.log_path})")
