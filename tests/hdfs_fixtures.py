"""pytest plugin: one real single-node HDFS for the whole test session.

Enable it from ``tests/conftest.py`` with ``pytest_plugins = ["hdfs_fixtures"]`` (pytest puts
``tests/`` on ``sys.path`` for that conftest).  The ``hdfs`` fixture starts the cluster on first
use under the session's tmp dir, yields a :class:`tfrecord_io.clusters.hdfs_local.LocalHdfs` and stops it
at the end of the session; the JVM also exits on its own if pytest dies.  Tests that use it are
marked ``hdfs`` automatically (``-m "not hdfs"`` leaves them out).

Nothing here touches ``os.environ``: pass ``hdfs.conf_dir`` / ``hdfs.namenode_uri`` explicitly.
If Java 17+ or Maven is missing the fixture FAILS (it never skips) and says what to install.
"""

from __future__ import annotations

import time

import pytest

from tfrecord_io.clusters import hdfs_local


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory) -> hdfs_local.LocalHdfs:
    base = tmp_path_factory.mktemp("hdfs-local")
    started = time.monotonic()
    try:
        cluster = hdfs_local.start(base, detach=False)
    except (hdfs_local.HdfsLocalError, TimeoutError) as e:
        pytest.fail(f"the tests need a local HDFS and it could not be started: {e}", pytrace=False)
    print(f"\nlocal HDFS up in {time.monotonic() - started:.1f}s at {cluster.namenode_uri} "
          f"(WebHDFS {cluster.webhdfs_url}, log {cluster.log_path})")
    try:
        yield cluster
    finally:
        cluster.stop()


def pytest_collection_modifyitems(items):
    for item in items:
        if "hdfs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.hdfs)
