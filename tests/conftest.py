"""Shared test rig: the real local clusters (cluster_fixtures), real Spark in local mode and via
spark-submit, and the markers that follow the fixtures a test uses.

Markers are set by fixture (:data:`MARKERS`), never by hand: a test that uses ``spark``, ``submit``,
``spark_cli`` or ``session`` with the Spark engine is marked ``spark``, one that uses ``hdfs``
``hdfs``, and so on, so ``-m "not spark"`` starts no Spark.  To keep it so, a test that is not
marked ``spark`` runs with ``SPARK_HOME`` pointing nowhere: starting Spark there fails at once,
saying that the test must take one of the Spark fixtures.
"""

from __future__ import annotations

import os
import sys

import pytest

from hypothesis import settings

from helpers import CHECK_PROFILE, QUICK_JVM, REPO, spark_conf, spark_submit, tfrecord_io_cli

pytest_plugins = ["cluster_fixtures"]


# Executors must start this interpreter (the venv's); any other Python fails with
# "No module named 'pyarrow'" the first time a task runs Python code.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Let TF be quiet in test logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Every Spark driver JVM (the session's, spark-submit's, the CLI's) with the quick compiler only
# (helpers.QUICK_JVM); a test that sets SPARK_SUBMIT_OPTS itself (Kerberos) replaces it.
os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM)

settings.register_profile(CHECK_PROFILE, max_examples=25)


def pytest_configure(config):
    """The fast tier (``-m "... not slow"``, as ``make check`` runs it) runs each Hypothesis property
    on a share of its examples (:func:`helpers.examples`), unless a profile is asked for."""
    if "not slow" in (config.getoption("markexpr") or "") and not config.getoption("--hypothesis-profile", None):
        settings.load_profile(CHECK_PROFILE)


@pytest.fixture(scope="session")
def spark():
    """A real SparkSession in local[2] mode, shared by the session."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("tfrecord-io-tests")
    for k, v in spark_conf().items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(params=["spark", "beam"])
def engine(request):
    """Each engine in turn (with ``session``: the SparkSession for Spark, None for Beam)."""
    return request.param


@pytest.fixture
def session(engine, request):
    return request.getfixturevalue("spark") if engine == "spark" else None


@pytest.fixture(scope="session")
def submit():
    """The spark-submit helper as a fixture (``submit([script, args...])``)."""
    return spark_submit


@pytest.fixture(scope="session")
def spark_cli():
    """:func:`tfrecord_io_cli` for commands that start Spark (``convert --engine spark``, ``demo``)."""
    return tfrecord_io_cli


# fixture -> the markers a test that uses it gets
MARKERS = {
    "spark": ("spark",), "submit": ("spark",), "spark_cli": ("spark",), "standalone": ("spark",),
    "standalone_two_hosts": ("spark",),
    "hdfs": ("hdfs",), "yarn": ("yarn", "hdfs", "spark"), "flink": ("flink",), "beam_spark": ("flink",),
    "secure_hdfs": ("hdfs",), "secure_ha_hdfs": ("hdfs",), "secure_yarn": ("yarn", "hdfs", "spark"),
    "faulty_hdfs": ("hdfs",), "lagging_hdfs": ("hdfs",),
    "own_hdfs": ("hdfs",), "own_yarn": ("yarn", "hdfs"),  # a test that starts clusters of its own
    "installed": ("spark",), "slim": ("spark",),  # tests/test_installed.py: the wheel's commands start Spark
}


def pytest_collection_modifyitems(items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        marks = {m for name in names & MARKERS.keys() for m in MARKERS[name]}
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "session" in names and params.get("engine") == "spark":
            marks.add("spark")
        for m in sorted(marks - {mark.name for mark in item.iter_markers()}):
            item.add_marker(getattr(pytest.mark, m))


_NO_SPARK_HOME = str(REPO / "tests" / "this-test-is-not-marked-spark--take-the-spark-submit-or-spark_cli-fixture")


@pytest.fixture(autouse=True)
def _spark_only_where_marked(request, monkeypatch):
    """Spark cannot start in a test that is not marked ``spark`` (module doc)."""
    if request.node.get_closest_marker("spark") is None:
        monkeypatch.setenv("SPARK_HOME", _NO_SPARK_HOME)


#: A ``java`` that refuses, first on PATH in tests that are marked for no JVM: a test that starts a
#: cluster without taking a fixture that marks it fails at once, naming this rule (its path).
_NO_JAVA = REPO / "tests" / "this-test-is-not-marked-hdfs-yarn-flink-or-spark--take-own_hdfs-or-own_yarn"
_JVM_MARKS = ("spark", "hdfs", "yarn", "flink")


@pytest.fixture(autouse=True)
def _jvm_only_where_marked(request, monkeypatch, tmp_path_factory):
    """No JVM (HDFS, YARN, Flink, Spark) in a test that is not marked for one: the fast tier
    (``make check``) needs no Java, and stays so."""
    if any(request.node.get_closest_marker(m) for m in _JVM_MARKS):
        return
    shim = tmp_path_factory.getbasetemp() / _NO_JAVA.name
    if not (shim / "java").exists():
        shim.mkdir(exist_ok=True)
        (shim / "java").write_text("#!/bin/sh\necho 'this test is not marked for a JVM: take the own_hdfs or own_yarn "
                                   "fixture (tests/conftest.py)' >&2\nexit 1\n")
        (shim / "java").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture(autouse=True)
def _leases_end_with_their_test():
    """A lease a test takes and leaves (``prepare_output`` without a commit) stops being renewed
    when the test ends: its heartbeat would outlive the test's HDFS and warn in later tests."""
    from tfrecord_io.storage import lease

    before = set(lease.held())
    yield
    for output in set(lease.held()) - before:
        lease.release(output, ended=False)


@pytest.fixture
def own_hdfs():
    """For a test that starts an HDFS of its own (``hdfs_local.start`` or ``hdfs-local start``):
    marks it ``hdfs`` (it needs Java and the Hadoop jars, which this fetches, failing with what to
    install)."""
    from tfrecord_io.clusters import hdfs_local

    hdfs_local.fetch_jars()


@pytest.fixture
def own_yarn(own_hdfs):
    """As :func:`own_hdfs`, for a test that starts a YARN of its own (marks it ``yarn`` and ``hdfs``)."""
