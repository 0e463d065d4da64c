"""pytest plugin: the real local clusters, each started once per session on first use.

Enabled from ``tests/conftest.py`` (``pytest_plugins``).  Every fixture here comes from one factory,
:func:`session_cluster`: it starts its cluster under the session's tmp dir with ``detach=False``
(the JVM also exits on its own if pytest dies), prints how long the start took, yields the handle
and stops the cluster at the end of the session.  If the cluster cannot be started -- Java 17+ or
Maven missing, jars that do not resolve -- the fixture FAILS (it never skips) with what to install.

* ``hdfs``: a NameNode + DataNode (:class:`tfrecord_io.clusters.hdfs_local.LocalHdfs`);
* ``yarn``: a ResourceManager + NodeManager on that HDFS (:class:`~tfrecord_io.clusters.hdfs_local.LocalYarn`);
* ``flink``: Beam's Flink job server, Flink master ``[local]`` (:mod:`tfrecord_io.clusters.flink`);
* ``beam_spark``: Beam's Spark job server (Spark 3.5.1 in ``local[2]``);
* ``secure_hdfs``: the HDFS with Kerberos (a MiniKdc), one NameNode, one DataNode;
* ``secure_ha_hdfs``: Kerberos, two NameNodes in the nameservice ``minidfs-ns`` and three
  DataNodes, replication 3, for failover, stopped-DataNode and replica tests.  Tests that fail
  over change it for the tests after them: they must not assume which NameNode is active; stop
  DataNodes only on a cluster of your own;
* ``secure_yarn``: a secure ResourceManager + NodeManager next to ``secure_hdfs``;
* ``faulty_hdfs``: two NameNodes (``minidfs-ns``) and three DataNodes, no Kerberos, for the tests
  that fail over and stop DataNodes while clients run (each changes it for the tests after it);
* ``lagging_hdfs``: a DataNode that reports new blocks to the NameNode only every 800 ms, as a
  loaded NameNode sees them, so that ``addBlock`` answers ``NotReplicatedYetException``.

Nothing here touches ``os.environ`` either: clients of the secure clusters take ``handle.env()``.

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

secure_hdfs = session_cluster(
    "secure_hdfs", lambda base: hdfs_local.start(base, detach=False, kerberos=True), _LOCAL_ERRORS,
    "the tests need a local HDFS with Kerberos (Java 17+ and Maven: `tfrecord-io hdfs-local fetch`)",
    lambda h: f"local HDFS with Kerberos at {h.namenode_uri} (log {h.log_path})")

secure_ha_hdfs = session_cluster(
    "secure_ha_hdfs", lambda base: hdfs_local.start(base, detach=False, kerberos=True, ha=True, datanodes=3),
    _LOCAL_ERRORS, "the tests need a local HA HDFS with Kerberos and 3 DataNodes (Java 17+ and Maven)",
    lambda h: f"local HA HDFS with Kerberos at {h.namenode_uri}, 3 DataNodes (log {h.log_path})")

secure_yarn = session_cluster(
    "secure_yarn", lambda base, secure_hdfs: hdfs_local.start_yarn(secure_hdfs, base, detach=False), _LOCAL_ERRORS,
    "the tests need a local YARN with Kerberos (Java 17+ and Maven)",
    lambda y: f"local YARN with Kerberos, ResourceManager {y.rm_address} (log {y.log_path})",
    requires=("secure_hdfs",))

faulty_hdfs = session_cluster(
    "faulty_hdfs", lambda base: hdfs_local.start(base, detach=False, ha=True, datanodes=3), _LOCAL_ERRORS,
    "the fault tests need a local HA HDFS with 3 DataNodes (Java 17+ and Maven)",
    lambda h: f"local HA HDFS at {h.namenode_uri}, 3 DataNodes (log {h.log_path})")

lagging_hdfs = session_cluster(
    "lagging_hdfs", lambda base: hdfs_local.start(base, detach=False,
                                                  conf={"dfs.blockreport.incremental.intervalMsec": "800"}),
    _LOCAL_ERRORS, "the NotReplicatedYet tests need a local HDFS (Java 17+ and Maven)",
    lambda h: f"local HDFS whose DataNode reports blocks late, at {h.namenode_uri} (log {h.log_path})")
