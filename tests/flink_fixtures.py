"""pytest plugin: one Beam job server for Flink (Flink master ``[local]``) for the whole session.

Enabled from ``tests/conftest.py`` (``pytest_plugins``).  The ``flink`` fixture starts Beam's
``FlinkJobServerDriver`` (Beam Java runner 2.62.0, Flink 1.19.0; see
:mod:`tfrecord_io.clusters.flink`) on first use under the session's tmp dir, yields a
:class:`tfrecord_io.clusters.flink.LocalFlinkJobServer` and stops it at the end of the session;
the JVM also exits on its own if pytest dies.  Tests that use it are marked ``flink``
automatically (``-m "not flink"`` leaves them out), as are those that use ``beam_spark``,
Beam's Spark job server (the same, with Beam's Spark runner and Spark 3.5.1 in ``local[2]``).  If Java or Maven is missing, or the jars
cannot be resolved, the fixture FAILS (it never skips) and says what to install.
"""

from __future__ import annotations

import time

import pytest

from tfrecord_io.clusters import flink as flink_local


@pytest.fixture(scope="session")
def flink(tmp_path_factory) -> flink_local.LocalFlinkJobServer:
    base = tmp_path_factory.mktemp("flink-local")
    started = time.monotonic()
    try:
        server = flink_local.start(base, detach=False)
    except (flink_local.FlinkLocalError, TimeoutError) as e:
        pytest.fail(f"the Flink tests need Beam's Flink job server and it could not be started (needs Java 17 "
                    f"and Maven; `tfrecord-io flink-local fetch` resolves the jars): {e}", pytrace=False)
    print(f"\nFlink job server up in {time.monotonic() - started:.1f}s at {server.job_endpoint} "
          f"(log {server.log_path})")
    try:
        yield server
    finally:
        server.stop()


def pytest_collection_modifyitems(items):
    for item in items:
        if {"flink", "beam_spark"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.flink)


@pytest.fixture(scope="session")
def beam_spark(tmp_path_factory) -> flink_local.LocalFlinkJobServer:
    """Beam's Spark job server (runner 2.62.0, Spark 3.5.1 in ``local[2]``), once per session."""
    base = tmp_path_factory.mktemp("beam-spark-local")
    started = time.monotonic()
    try:
        server = flink_local.start(base, detach=False, runner="spark")
    except (flink_local.FlinkLocalError, TimeoutError) as e:
        pytest.fail(f"the Beam-on-Spark test needs Beam's Spark job server and it could not be started (needs "
                    f"Java 17 and Maven; `tfrecord-io flink-local fetch --runner spark` resolves the jars): {e}",
                    pytrace=False)
    print(f"\nBeam Spark job server up in {time.monotonic() - started:.1f}s at {server.job_endpoint} "
          f"(log {server.log_path})")
    try:
        yield server
    finally:
        server.stop()
