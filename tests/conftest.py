"""Shared test rig: real HDFS (hdfs_fixtures), real Spark in local mode and via spark-submit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["hdfs_fixtures", "yarn_fixtures"]
pytest_plugins += ["flink_fixtures"]  # Beam on Flink: tests/test_flink.py

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent

# Executors must start this interpreter (the venv's); any other Python fails with
# "No module named 'pyarrow'" the first time a task runs Python code.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Let TF be quiet in test logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _spark_conf() -> dict[str, str]:
    return {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.memory": "2g",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    }


@pytest.fixture(scope="session")
def spark():
    """A real SparkSession in local[2] mode, shared by the session."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("tfrecord-io-tests")
    for k, v in _spark_conf().items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


def spark_conf_args(conf: dict[str, str] | None = None) -> list[str]:
    """``--conf KEY=VALUE`` arguments for spark-submit: the suite's settings, then ``conf``."""
    return [a for k, v in {**_spark_conf(), **(conf or {})}.items() for a in ("--conf", f"{k}={v}")]


def spark_submit(args: list[str], *, master: str = "local[2]", conf: dict[str, str] | None = None,
                 env: dict[str, str] | None = None, timeout: float = 600, check: bool = True,
                 extra: list[str] = ()) -> subprocess.CompletedProcess:
    """Run ``spark-submit`` (pyspark's own) as a subprocess, as a user would, and return the result."""
    cmd = [str(VENV_BIN / "spark-submit"), "--master", master, *spark_conf_args(conf), *extra, *args]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"spark-submit failed ({proc.returncode}): {' '.join(cmd)}\n"
                             f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}")
    return proc


def tfrecord_io_cli(*args: str, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run the installed ``tfrecord-io`` command as a user would (TF quiet, no progress bar forced)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TFRECORD_IO_PROGRESS", None)
    proc = subprocess.run([str(VENV_BIN / "tfrecord-io"), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"tfrecord-io {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def convert(engine: str, spark, inp: str, fmt: str, schema: str, out: str, **kw) -> dict:
    """Run one engine in this process; return the manifest (raises what the engine raises)."""
    if engine == "spark":
        from tfrecord_io.engines.spark import ConversionOptions, run_conversion

        return run_conversion(spark, ConversionOptions(inputs=inp, input_format=fmt, schema=schema, output=out,
                                                       max_reject_fraction=1.0, **kw))
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.engines import beam as tbeam

    conv = tbeam.ConversionOptions(inputs=inp, input_format=fmt, schema=schema, output=out, max_reject_fraction=1.0,
                                   **kw)
    result = tbeam.run_conversion(conv, PipelineOptions(["--runner=FnApiRunner"]))
    assert result.runner == "FnApiRunner", result.runner
    return result.manifest


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
