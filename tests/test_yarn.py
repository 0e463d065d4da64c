"""Spark on a real YARN (issue #14 sections 1-3): the job and the DataFrame writer under
``spark-submit --master yarn``, client and cluster deploy mode, on the session's local YARN and HDFS.

The local YARN is Hadoop 3.5.0's MiniYARNCluster (``tfrecord-io hdfs-local start --yarn``; the
``yarn`` fixture of tests/yarn_fixtures.py starts it once per session next to the ``hdfs`` one).
Executors are YARN containers started by the NodeManager: their Python is one that can NOT import
the repository's editable ``tfrecord_io`` (the package reaches them only through ``--py-files``, as
on a real cluster), or, for section 3, the slim environment that ``tfrecord-io pack-env`` builds,
shipped with ``--archives`` (no TensorFlow in it).  Output is checked with TensorFlow's own reader
against a ``local[2]`` run of the same conversion on the same input.  No mocks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from helpers import (CORPUS_SCHEMA, JOB, QUICK_JVM, REPO, VENV_BIN, corpus_rows, expected_values, make_executor_python,
                     read_back, serialized_records, write_corpus_csv)
from tfrecord_io.spark import package_zip
from tfrecord_io.storage import fs, output

SHARDS = 3
ROWS = 3000
BAD_LINE = "oops,1.0,bad,,1;2"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


# ---------------------------------------------------------------------------------------------
# spark-submit --master yarn, as a user runs it
# ---------------------------------------------------------------------------------------------
def yarn_conf(mode: str, python: str) -> dict[str, str]:
    """What a submission to the local YARN needs (docs/running-on-yarn.md says why each)."""
    home = spark_home()
    conf = {
        # PySpark's own jars, already on every node (the same machine): nothing uploaded per app.
        "spark.yarn.jars": f"local:{home}/jars/*",
        "spark.executor.instances": "2",
        "spark.executor.cores": "1",
        "spark.executor.memory": "1g",
        "spark.driver.memory": "1g",     # the application master's container in cluster mode
        "spark.yarn.am.memory": "512m",  # the (driverless) application master in client mode
        "spark.yarn.maxAppAttempts": "1",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.pyspark.python": python,  # executors (and, in cluster mode, the driver)
        "spark.yarn.appMasterEnv.PYSPARK_PYTHON": python,
        "spark.yarn.appMasterEnv.SPARK_LOCAL_IP": "127.0.0.1",
        # Not a need of YARN's: the suite's quick JIT (helpers.QUICK_JVM) for the containers' JVMs.
        "spark.executor.extraJavaOptions": QUICK_JVM,
    }
    if mode == "client":
        conf["spark.pyspark.driver.python"] = sys.executable  # the driver runs here, in the venv
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.yarn.am.extraJavaOptions"] = QUICK_JVM
    else:
        conf["spark.driver.extraJavaOptions"] = QUICK_JVM  # the driver is the application master
    return conf


class Submitted:
    def __init__(self, proc: subprocess.CompletedProcess, app_id: str | None, seconds: float, yarn):
        self.proc, self.app_id, self.seconds, self._yarn = proc, app_id, seconds, yarn

    @property
    def logs(self) -> str:
        """Every container's logs of this application (the NodeManager keeps them)."""
        return self._yarn.app_logs(self.app_id) if self.app_id else ""

    def containers(self) -> dict[str, Path]:
        return {d.name: d for d in sorted((self._yarn.container_logs / self.app_id).glob("container_*"))}

    def executors(self) -> set[str]:
        """The containers that ran a Spark executor."""
        return {name for name, d in self.containers().items()
                if "YarnCoarseGrainedExecutorBackend" in (d / "launch_container.sh").read_text(errors="replace")}

    def master_stdout(self) -> str:
        """The application master's stdout (in cluster mode: the driver's)."""
        first = [d for name, d in self.containers().items() if name.endswith("_01_000001")]
        return (first[0] / "stdout").read_text(errors="replace") if first else ""


def yarn_submit(yarn, args: list[str], *, mode: str, cwd: Path, python: str,
                conf: dict[str, str] | None = None, extra: list[str] = (), check: bool = True,
                timeout: float = 600) -> Submitted:
    cmd = [str(VENV_BIN / "spark-submit"), "--master", "yarn", "--deploy-mode", mode]
    for k, v in {**yarn_conf(mode, python), **(conf or {})}.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd += [*extra, *args]
    # Nothing of this test process leaks into the containers: no PYTHONPATH naming the repository.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")}
    env.update(HADOOP_CONF_DIR=str(yarn.conf_dir), SPARK_HOME=str(spark_home()))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    m = re.search(r"Submitted application (application_\d+_\d+)", proc.stderr)
    result = Submitted(proc, m.group(1) if m else None, time.monotonic() - t0, yarn)
    if check and proc.returncode != 0:
        raise AssertionError(f"spark-submit --master yarn ({mode}) exited {proc.returncode}: {' '.join(cmd)}\n"
                             f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}\n"
                             f"--- containers of {result.app_id}\n{result.logs[-12000:]}")
    if result.app_id is None:
        raise AssertionError(f"spark-submit did not submit to YARN:\n{proc.stderr[-4000:]}")
    return result


# ---------------------------------------------------------------------------------------------
# Input on HDFS, the local-mode reference, and how outputs are compared
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hdfs_input(hdfs, tmp_path_factory):
    """3 CSV files (3,000 good rows, one bad line) and the schema, on HDFS; (base URI, rows)."""
    d = tmp_path_factory.mktemp("yarn-input")
    rows = corpus_rows(ROWS, start=50_000)
    base = hdfs.uri("/yarn-tests")
    for k in range(3):
        local = d / f"part-{k}.csv"
        write_corpus_csv(local, rows[k * 1000:(k + 1) * 1000], extra_lines=(BAD_LINE,) if k == 1 else ())
        with fs.open(f"{base}/in/part-{k}.csv", "wb") as f:
            f.write(local.read_bytes())
    with fs.open(f"{base}/schema.yaml", "wb") as f:
        f.write(CORPUS_SCHEMA.read_bytes())
    return base, rows


def job_args(base: str, out: str) -> list[str]:
    return [JOB, "--input", f"{base}/in/*.csv", "--format", "csv", "--schema", f"{base}/schema.yaml",
            "--output", out, "--compression", "gzip", "--num-shards", str(SHARDS)]


@pytest.fixture(scope="module")
def local_run(spark, hdfs_input):
    """The same conversion in local[2] mode (the session's SparkSession, HDFS in and out): the
    reference output."""
    from tfrecord_io.engines.spark import ConversionOptions, run_conversion

    base, _ = hdfs_input
    out = f"{base}/local-out"
    run_conversion(spark, ConversionOptions(inputs=[f"{base}/in/*.csv"], input_format="csv",
                                            schema=f"{base}/schema.yaml", output=out, compression="gzip",
                                            num_shards=SHARDS))
    return out


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory):
    """A Python with the venv's libraries but not the editable tfrecord_io (see test_spark_job)."""
    return make_executor_python(tmp_path_factory.mktemp("yarn-exec-python"))


@pytest.fixture(scope="module")
def py_files(tmp_path_factory):
    """The package zip for ``--py-files``, built as users build it."""
    return package_zip(str(tmp_path_factory.mktemp("yarn-py-files")))


def names(uri: str) -> set[str]:
    return {u.rstrip("/").rsplit("/", 1)[-1] for u in fs.ls(uri)}


def download(uri: str, into: Path) -> list[Path]:
    into.mkdir(parents=True, exist_ok=True)
    files = []
    for u in sorted(fs.ls(uri)):
        name = u.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith("part-"):
            with fs.open(u, "rb") as f:
                (into / name).write_bytes(f.read())
            files.append(into / name)
    return files


def rejects(out: str) -> list[dict]:
    rows = []
    for u in fs.ls(f"{out}/{output.REJECTS}"):
        with fs.open(u, "rb") as f:
            rows += [json.loads(line) for line in f.read().decode().splitlines()]
    return sorted(rows, key=lambda r: (r["source"], r["line"]))


def assert_same_output(out: str, reference: str, rows: list[dict], tmp: Path) -> None:
    """``out`` holds exactly what the local run wrote: the same files, manifest totals, records and
    rejects; every input row once."""
    shards = {f"part-{i:05d}-of-{SHARDS:05d}.tfrecord.gz" for i in range(SHARDS)}
    assert names(out) == names(reference) == shards | {"_manifest.json", "_SUCCESS", output.REJECTS}
    manifest, ref_manifest = output.read_manifest(out), output.read_manifest(reference)
    assert manifest["engine"] == "spark" and manifest["compression"] == "gzip"
    assert manifest["totals"] == ref_manifest["totals"] == {"input_rows": ROWS + 1, "records": ROWS, "rejected": 1}
    assert sum(f["records"] for f in manifest["files"]) == ROWS
    files, ref_files = download(out, tmp / "out"), download(reference, tmp / "reference")
    assert serialized_records(files) == serialized_records(ref_files)
    assert read_back(files) == expected_values(rows)  # each id once, values as written
    (reject,) = rejects(out)
    assert rejects(reference) == [reject]
    assert reject["source"].endswith("/in/part-1.csv") and reject["raw"] == BAD_LINE


# ---------------------------------------------------------------------------------------------
# Section 1: the cluster itself
# ---------------------------------------------------------------------------------------------
def test_local_yarn_conf_dir(yarn, hdfs):
    """The fixture's HADOOP_CONF_DIR is complete: the session HDFS's core-site.xml and a yarn-site.xml
    naming the running ResourceManager; yarn_status finds it from its base dir."""
    import xml.etree.ElementTree as ET

    def props(name):
        root = ET.parse(yarn.conf_dir / name).getroot()
        return {p.findtext("name"): p.findtext("value") for p in root.iter("property")}

    assert props("core-site.xml")["fs.defaultFS"] == hdfs.namenode_uri
    site = props("yarn-site.xml")
    assert site["yarn.resourcemanager.address"] == yarn.rm_address and yarn.rm_address.startswith("localhost:")
    assert site["yarn.resourcemanager.scheduler.address"] == yarn.scheduler_address
    assert (yarn.nm_memory_mb, yarn.nm_vcores) == (6144, 4)
    assert yarn.is_ready()
    from tfrecord_io.clusters import hdfs_local

    assert hdfs_local.yarn_status(yarn.base_dir) == yarn


def test_yarn_options_are_checked_before_anything_starts(hdfs, tmp_path):
    from tfrecord_io.clusters import hdfs_local

    for kw, match in (({"nm_memory_mb": 512}, "nm_memory_mb must be"), ({"nm_vcores": 0}, "nm_vcores must be"),
                      ({"nm_memory_mb": 2048, "min_allocation_mb": 4096}, "more than the NodeManager")):
        with pytest.raises(ValueError, match=match):
            hdfs_local.start_yarn(hdfs, tmp_path / "yarn", **kw)
    assert not (tmp_path / "yarn").exists()


def test_cli_start_yarn_status_stop(tmp_path, own_yarn):
    """``tfrecord-io hdfs-local start --yarn``: HDFS and YARN outlive the command, the printed
    HADOOP_CONF_DIR holds all three site files, ``status`` shows both, ``stop`` stops both."""
    import socket

    from helpers import tfrecord_io_cli

    base = str(tmp_path / "cli")
    try:
        out = tfrecord_io_cli("hdfs-local", "start", "--yarn", "--dir", base, timeout=600).stdout
        assert "local HDFS and YARN are ready" in out, out
        rm = re.search(r"YARN ResourceManager: (localhost:\d+) \(NodeManager 6144 MiB, 4 vcores\)", out).group(1)
        conf = Path(re.search(r"export HADOOP_CONF_DIR=(\S+)", out).group(1))
        assert {"core-site.xml", "hdfs-site.xml", "yarn-site.xml"} <= {p.name for p in conf.iterdir()}
        assert f"<value>{rm}</value>" in (conf / "yarn-site.xml").read_text()
        socket.create_connection(("127.0.0.1", int(rm.rsplit(":", 1)[1])), timeout=10).close()
        status = tfrecord_io_cli("hdfs-local", "status", "--dir", base).stdout
        assert "is ready, with YARN" in status and rm in status
        assert "stopped" in tfrecord_io_cli("hdfs-local", "stop", "--dir", base).stdout
        assert tfrecord_io_cli("hdfs-local", "status", "--dir", base, check=False).returncode == 1
        with pytest.raises(ConnectionRefusedError):  # the ResourceManager is gone too
            socket.create_connection(("127.0.0.1", int(rm.rsplit(":", 1)[1])), timeout=5)
    finally:
        from tfrecord_io.clusters import hdfs_local

        hdfs_local.stop(base)


# ---------------------------------------------------------------------------------------------
# Section 2: the job and the DataFrame writer on YARN
# ---------------------------------------------------------------------------------------------
def test_job_client_mode_equals_local_run(yarn, hdfs_input, local_run, executor_python, py_files, tmp_path):
    """Client mode: the driver here, two executors in YARN containers that get tfrecord_io only from
    --py-files; HDFS in and out; the output is the local run's."""
    base, rows = hdfs_input
    out = f"{base}/client-out"
    run = yarn_submit(yarn, job_args(base, out), mode="client", cwd=tmp_path, python=executor_python,
                      extra=["--py-files", py_files])
    done = json.loads([ln for ln in run.proc.stdout.splitlines() if '"tfrecord-io-done"' in ln][-1])
    assert done["totals"] == {"input_rows": ROWS + 1, "records": ROWS, "rejected": 1}
    assert len(run.executors()) == 2, run.logs[-4000:]
    assert_same_output(out, local_run, rows, tmp_path)
    print(f"client mode on YARN: {run.seconds:.1f}s")


def test_job_cluster_mode_equals_local_run(yarn, hdfs_input, local_run, executor_python, py_files, tmp_path):
    """Cluster mode: the driver too runs in a YARN container (the application master), on loopback,
    with the job script and the package shipped by spark-submit."""
    base, rows = hdfs_input
    out = f"{base}/cluster-out"
    run = yarn_submit(yarn, job_args(base, out), mode="cluster", cwd=tmp_path, python=executor_python,
                      extra=["--py-files", py_files])
    assert "final status: SUCCEEDED" in run.proc.stderr
    # The driver printed its summary in the application master's container, not here.
    assert '"tfrecord-io-done"' not in run.proc.stdout
    done = json.loads([ln for ln in run.master_stdout().splitlines() if '"tfrecord-io-done"' in ln][-1])
    assert done["totals"] == {"input_rows": ROWS + 1, "records": ROWS, "rejected": 1}
    assert len(run.executors()) == 2, run.logs[-4000:]
    assert_same_output(out, local_run, rows, tmp_path)
    print(f"cluster mode on YARN: {run.seconds:.1f}s")


def test_killed_python_worker_mid_write_is_exactly_once(yarn, hdfs_input, local_run, executor_python, py_files,
                                                       tmp_path):
    """The first attempts of write partitions 0 and 2 kill their executor's Python worker after
    writing a batch (tests/jobs/faulty_to_tfrecord.py); YARN's executors retry them; the output is still
    exactly the local run's."""
    base, rows = hdfs_input
    out = f"{base}/fault-out"
    faulty = [str(REPO / "tests" / "jobs" / "faulty_to_tfrecord.py"), "die:0,2", *job_args(base, out)[1:]]
    run = yarn_submit(yarn, faulty, mode="client", cwd=tmp_path, python=executor_python,
                      extra=["--py-files", py_files])
    killed = re.findall(r"killing task attempt \S+-p(\d+)-a0-", run.logs)
    assert sorted(set(killed)) == ["00000", "00002"], run.logs[-4000:]
    # The retries are the job's business: Spark's log of the lost attempts stays quiet (#31 item 7); the
    # attempts that died are in the containers' logs (above), and the output is whole (below).
    assert not re.search(r"Lost task|TaskSetManager|Traceback", run.proc.stderr), run.proc.stderr[-3000:]
    assert not fs.exists(f"{out}/{output.TEMPORARY}")
    assert_same_output(out, local_run, rows, tmp_path)


DF_SCRIPT = '''\
import sys
import tarfile
from pyspark.sql import SparkSession
import tfrecord_io.spark

spark = SparkSession.builder.appName("tfrecord-io DataFrame writer on YARN").getOrCreate()
tfrecord_io.spark.register(spark)
df = spark.range(0, {n}, numPartitions=4).selectExpr(
    "id", "cast(id * 0.5 as double) as score", "concat('n', cast(id as string)) as name",
    "array(id, id + 1) as pair")
df.write.format("tfrecord").mode("overwrite").option("compression", "gzip").save(sys.argv[1])
print("DF-WRITTEN", spark.sparkContext.master, spark.sparkContext.applicationId)
spark.stop()
'''


def test_dataframe_writer_on_yarn(yarn, hdfs, executor_python, py_files, tmp_path):
    """``df.write.format("tfrecord")`` from a YARN application: the Arrow writer runs in the
    executors' Python workers; one shard per partition, manifest, _SUCCESS, every row once."""
    import tensorflow as tf

    n = 5000
    script = tmp_path / "df_to_tfrecord.py"
    script.write_text(DF_SCRIPT.format(n=n))
    out = hdfs.uri(f"/yarn-tests/df-out-{tmp_path.name}")
    run = yarn_submit(yarn, [str(script), out], mode="client", cwd=tmp_path, python=executor_python,
                      extra=["--py-files", py_files])
    assert re.search(r"DF-WRITTEN yarn application_\d+", run.proc.stdout), run.proc.stdout
    assert len(run.executors()) == 2, run.logs[-4000:]
    assert names(out) == {f"part-{i:05d}-of-00004.tfrecord.gz" for i in range(4)} | {"_manifest.json", "_SUCCESS"}
    manifest = output.read_manifest(out)
    assert manifest["totals"]["records"] == n and manifest["compression"] == "gzip"
    seen = {}
    for f in download(out, tmp_path / "df"):
        for rec in tf.data.TFRecordDataset(str(f), compression_type="GZIP"):
            ex = tf.train.Example.FromString(rec.numpy()).features.feature
            i = ex["id"].int64_list.value[0]
            assert i not in seen, f"id {i} twice"
            seen[i] = (ex["score"].float_list.value[0], ex["name"].bytes_list.value[0].decode(),
                       list(ex["pair"].int64_list.value))
    assert seen == {i: (i * 0.5, f"n{i}", [i, i + 1]) for i in range(n)}


# ---------------------------------------------------------------------------------------------
# Section 3: executors (and the driver) without TensorFlow, from a slim archive
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def slim_env(tmp_path_factory):
    """``tfrecord-io pack-env`` as a user runs it (pip fetches the pinned wheels; pip's cache makes
    a second build quick)."""
    from helpers import tfrecord_io_cli

    out = tmp_path_factory.mktemp("slim-env") / "tfrecord-io-env.tar.gz"
    proc = tfrecord_io_cli("pack-env", str(out), timeout=1800)
    print(proc.stdout.strip())
    return out


@pytest.mark.slow
def test_slim_env_has_the_converter_and_no_tensorflow(slim_env):
    with tarfile.open(slim_env) as tar:
        members = tar.getnames()
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages/"
    tops = {m.split("/")[3] for m in members if m.startswith(site) and m.count("/") >= 3}
    assert {"tfrecord_io", "numpy", "pyarrow", "yaml", "google_crc32c", "hdfs_native", "pandas"} <= tops, tops
    assert not tops & {"tensorflow", "pyspark", "apache_beam", "keras", "pip"}, tops
    assert "bin/python" in members and "pyvenv.cfg" in members
    assert site + "tfrecord_io/clusters/hdfs_local/MiniYarn.java" in members


def test_job_cluster_mode_from_slim_archive_equals_local_run(yarn, hdfs_input, local_run, slim_env, tmp_path):
    """Cluster mode with ``--archives env.tar.gz#env``: the driver (application master) and the
    executors run ``./env/bin/python`` from the unpacked archive, which holds tfrecord_io (no
    --py-files) and no TensorFlow or pyspark (pyspark.zip comes from spark-submit); same output."""
    base, rows = hdfs_input
    out = f"{base}/slim-out"
    run = yarn_submit(yarn, job_args(base, out), mode="cluster", cwd=tmp_path, python="./env/bin/python",
                      extra=["--archives", f"{slim_env}#env"])
    done = json.loads([ln for ln in run.master_stdout().splitlines() if '"tfrecord-io-done"' in ln][-1])
    assert done["totals"] == {"input_rows": ROWS + 1, "records": ROWS, "rejected": 1}
    executors = run.executors()
    assert len(executors) == 2
    for name, d in run.containers().items():  # every container: the archive unpacked as ./env
        assert re.search(r'ln -sf -- "[^"]*env\.tar\.gz" "env"', (d / "launch_container.sh").read_text()), name
    am = run.containers()[run.app_id.replace("application", "container") + "_01_000001"]
    assert 'export PYSPARK_PYTHON="./env/bin/python"' in (am / "launch_container.sh").read_text()
    assert_same_output(out, local_run, rows, tmp_path)
    print(f"cluster mode from the slim archive: {run.seconds:.1f}s")
