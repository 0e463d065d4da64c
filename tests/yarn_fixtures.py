"""pytest plugin: one real local YARN (ResourceManager + NodeManager) for the whole test session.

Enabled from ``tests/conftest.py`` next to ``hdfs_fixtures``.  The ``yarn`` fixture starts
:func:`tfrecord_io.clusters.hdfs_local.start_yarn` on the session's HDFS (the ``hdfs`` fixture)
on first use, in a JVM of its own, so that a run without YARN tests never pays for it; it yields a
:class:`tfrecord_io.clusters.hdfs_local.LocalYarn` whose ``conf_dir`` is a complete
HADOOP_CONF_DIR (core-, hdfs- and yarn-site.xml), and stops YARN at the end of the session (the
JVM also exits on its own if pytest dies).  Tests that use it are marked ``yarn`` automatically
(``-m "not yarn"`` leaves them out).  If Java 17+ or Maven is missing the fixture FAILS, saying
what to install.
"""

from __future__ import annotations

import time

import pytest

from tfrecord_io.clusters import hdfs_local


@pytest.fixture(scope="session")
def yarn(hdfs, tmp_path_factory) -> hdfs_local.LocalYarn:
    base = tmp_path_factory.mktemp("yarn-local")
    started = time.monotonic()
    try:
        cluster = hdfs_local.start_yarn(hdfs, base, detach=False)
    except (hdfs_local.HdfsLocalError, TimeoutError) as e:
        pytest.fail(f"the YARN tests need a local YARN and it could not be started: {e}", pytrace=False)
    print(f"\nlocal YARN up in {time.monotonic() - started:.1f}s, ResourceManager {cluster.rm_address} "
          f"(HADOOP_CONF_DIR {cluster.conf_dir}, log {cluster.log_path})")
    try:
        yield cluster
    finally:
        cluster.stop()


def pytest_collection_modifyitems(items):
    for item in items:
        if "yarn" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.yarn)
