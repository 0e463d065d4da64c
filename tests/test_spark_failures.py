"""How the Spark job fails (issue #31 item 7): every failure -- a full disk, an HDFS space or
namespace quota, a task's error from bad input, a JVM that does not start, a Kerberos ticket that has
run out when Spark starts -- ends in one error line that names the cause and the file, with no Python
or Java traceback and none of Spark's log of the failing task; ``--debug`` shows the traceback.  A
partition value no directory can be named after (a NUL byte, a name too long) is a reject naming the
column, and the rest of the input converts.

Real failures only: a tmpfs too small for the output, quotas set on the real local HDFS (WebHDFS's
SETQUOTA, the NameNode's own admin operation), a truncated gzip file, an expired ticket from the
local KDC.  The command-line runs (``tfrecord-io convert``, ``spark-submit``) check what a user sees;
the in-process runs (the session's ``spark``) check the line and the exit status where a JVM of
their own would cost more than it shows.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

import tfrecord_io.spark
from helpers import JOB
from tfrecord_io.commands import exits
from tfrecord_io.conversion.failure import ConversionError
from tfrecord_io.engines.spark import ConversionOptions, run_conversion
from tfrecord_io.storage import fs, output

pytestmark = pytest.mark.spark

SCHEMA = """\
record_type: example
features:
  - {name: id, type: int64, required: true}
  - {name: name, type: string, default: ""}
  - {name: day, type: string, default: ""}
csv: {header: true, delimiter: ","}
"""


def write_input(d: Path, rows: int, *, day=lambda i: f"d{i % 2}") -> tuple[Path, Path]:
    """(a CSV of ``rows`` rows, its schema)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "schema.yaml").write_text(SCHEMA)
    lines = "".join(f"{i},{'name-' * 8}{i},{day(i)}\n" for i in range(rows))
    (d / "in.csv").write_text("id,name,day\n" + lines)
    return d / "in.csv", d / "schema.yaml"


def assert_one_clean_line(text: str, *, starts: str, says: tuple[str, ...]) -> str:
    """``text`` (what a user saw) holds no traceback, no Py4J and no Java stack, and its last line is the
    error line: it starts with ``starts`` and holds each of ``says``.  Returns that line."""
    assert "Traceback" not in text and "py4j" not in text.lower() and "\tat " not in text, text[-6000:]
    assert "Exception in task" not in text and "Lost task" not in text, text[-6000:]  # Spark's task log
    last = text.rstrip("\n").splitlines()[-1]
    assert last.startswith(starts) and all(s in last for s in says), text[-3000:]
    assert [ln for ln in text.splitlines() if ": error: " in ln] == [last], text[-3000:]
    return last


def set_quota(hdfs, path: str, *, names: int | None = None, space: int | None = None) -> None:
    """An HDFS quota on ``path``, as ``hdfs dfsadmin -setQuota / -setSpaceQuota`` sets it (the NameNode's
    SETQUOTA operation, through WebHDFS as the superuser)."""
    keep = 9223372036854775807  # HdfsConstants.QUOTA_DONT_SET
    url = (f"{hdfs.webhdfs_url}/webhdfs/v1{path}?op=SETQUOTA&namespacequota={names or keep}"
           f"&storagespacequota={space or keep}&user.name={hdfs.user}")
    with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=30) as r:
        assert r.status == 200, r.read()


def cli_convert(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``tfrecord-io convert --engine spark`` as a user runs it, in ``local[2]``, without the UI."""
    from helpers import VENV_BIN

    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    return subprocess.run([str(VENV_BIN / "tfrecord-io"), "convert", "--engine", "spark", "--master", "local[2]",
                           "--conf", "spark.ui.enabled=false", *args], capture_output=True, text=True, env=full_env,
                          timeout=600)


# ---------------------------------------------------------------------------------------------
# What a user sees: tfrecord-io convert and spark-submit
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: any output bigger than that fails with ENOSPC mid-write."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}); the HDFS quota tests "
                    f"fill a destination instead")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_cli_full_disk_is_one_line_naming_the_file(spark_cli, small_disk, tmp_path):
    inp, schema = write_input(tmp_path / "in", 20_000)  # ~1.3 MB of records for 256 KiB
    out = small_disk / "out"
    proc = cli_convert("--input", str(inp), "--format", "csv", "--schema", str(schema), "--output", str(out))
    assert proc.returncode == exits.FAILED, proc.stderr[-3000:]
    assert_one_clean_line(proc.stderr, starts=f"tfrecord-io convert: error: conversion of {inp} to {out} failed: ",
                          says=(f"no space left on device writing {out}/{output.TEMPORARY}/",))
    assert not (out / "_SUCCESS").exists() and not (out / output.TEMPORARY).exists()  # nothing committed, all aborted


def test_submit_hdfs_space_quota_is_one_line_naming_the_directory(submit, hdfs, tmp_path):
    inp, schema = write_input(tmp_path / "in", 50)
    top = f"/failures/space-{uuid.uuid4().hex[:8]}"
    fs.makedirs(hdfs.uri(top))
    set_quota(hdfs, top, space=3 * (1 << 20) // 2)  # 1.5 blocks: a task's shard and index files need a block each
    out = hdfs.uri(f"{top}/out")
    proc = submit([JOB, "--input", str(inp), "--format", "csv", "--schema", str(schema), "--output", out],
                  env={"HADOOP_CONF_DIR": str(hdfs.conf_dir)}, check=False)
    assert proc.returncode == exits.FAILED, (proc.stdout + proc.stderr)[-3000:]
    # spark-submit's driver runs Python with its stderr joined to the JVM's stdout
    assert "Traceback" not in proc.stderr and "\tat " not in proc.stderr, proc.stderr[-3000:]
    assert_one_clean_line(proc.stdout, starts=f"to_tfrecord.py: error: conversion of {inp} to {out} failed: ",
                          says=(f"quota exceeded writing {out}/{output.TEMPORARY}/",
                                f"The DiskSpace quota of {top} is exceeded", "DSQuotaExceededException"))
    assert not fs.exists(f"{out}/_SUCCESS")


def test_cli_expired_ticket_when_spark_starts_is_one_line(spark_cli, secure_hdfs, tmp_path):
    """The ticket was good for planning (the input and output are local) and has run out when the JVM
    logs in: here at its first HDFS call, the event log on the secure HDFS."""
    inp, schema = write_input(tmp_path / "in", 10)
    env = {**secure_hdfs.env(), "KRB5CCNAME": f"FILE:{secure_hdfs.kerberos.expired_ticket_cache}"}
    proc = cli_convert("--input", str(inp), "--format", "csv", "--schema", str(schema), "--output",
                       str(tmp_path / "out"), "--conf", "spark.eventLog.enabled=true", "--conf",
                       f"spark.eventLog.dir={secure_hdfs.uri('/spark-events')}", env=env)
    assert proc.returncode == exits.USAGE, proc.stderr[-3000:]  # as the same ticket refused while planning
    assert_one_clean_line(proc.stderr, starts="tfrecord-io convert: error: Spark did not start: Kerberos refused the "
                                              "driver at localhost:",
                          says=("Client cannot authenticate via:[TOKEN, KERBEROS]", "run kinit again",
                                "spark.kerberos.keytab"))
    assert "ERROR SparkContext" not in proc.stderr and "WARN Client" not in proc.stderr, proc.stderr[-3000:]


def test_cli_jvm_that_does_not_start_is_one_line_and_debug_adds_the_traceback(spark_cli, tmp_path):
    inp, schema = write_input(tmp_path / "in", 10)
    args = ["--input", str(inp), "--format", "csv", "--schema", str(schema), "--output", str(tmp_path / "out")]
    env = {"JAVA_HOME": str(tmp_path / "no-java-here")}
    proc = cli_convert(*args, env=env)
    assert proc.returncode == exits.FAILED, proc.stderr[-3000:]
    line = assert_one_clean_line(proc.stderr, starts="tfrecord-io convert: error: Spark did not start: its JVM "
                                                     "exited before it was up", says=("JAVA_HOME",))
    debug = cli_convert(*args, "--debug", env=env)
    assert debug.returncode == exits.FAILED and debug.stderr.rstrip("\n").splitlines()[-1] == line, debug.stderr
    assert "Traceback (most recent call last)" in debug.stderr and "JAVA_GATEWAY_EXITED" in debug.stderr


# ---------------------------------------------------------------------------------------------
# The line and the status, in this process's session
# ---------------------------------------------------------------------------------------------
def failed_conversion(spark, **kw) -> ConversionError:
    with pytest.raises(ConversionError) as info:
        run_conversion(spark, ConversionOptions(**kw))
    e = info.value
    assert exits.status_of(e) == exits.FAILED and "\n" not in str(e) and "Traceback" not in str(e), str(e)
    return e


def test_a_tasks_error_from_bad_input_is_its_own_line(spark, tmp_path):
    inp, schema = write_input(tmp_path / "in", 5000)
    bad = tmp_path / "in" / "cut.csv.gz"
    packed = gzip.compress(inp.read_bytes())
    bad.write_bytes(packed[:len(packed) // 2])
    e = failed_conversion(spark, inputs=f"{inp},{bad}", input_format="csv", schema=str(schema),
                          output=str(tmp_path / "out"))
    assert str(e).startswith(f"conversion of {inp},{bad} to {tmp_path / 'out'} failed: {bad}: "), str(e)
    assert "ends early" in str(e) and "compressed byte" in str(e), str(e)
    assert not (tmp_path / "out" / output.TEMPORARY).exists()


def test_hdfs_namespace_quota_is_one_line_naming_the_directory(spark, hdfs, tmp_path):
    inp, schema = write_input(tmp_path / "in", 50)
    top = f"/failures/names-{uuid.uuid4().hex[:8]}"
    fs.makedirs(hdfs.uri(top))
    set_quota(hdfs, top, names=5)  # itself, out/, _temporary/, the lease: the tasks' files are refused
    out = hdfs.uri(f"{top}/out")
    e = failed_conversion(spark, inputs=str(inp), input_format="csv", schema=str(schema), output=out, num_shards=1)
    assert f"failed: quota exceeded writing {out}/{output.TEMPORARY}" in str(e), str(e)
    assert f"The NameSpace quota (directories and files) of directory {top} is exceeded" in str(e), str(e)
    assert "NSQuotaExceededException" in str(e) and not fs.exists(f"{out}/_SUCCESS")


# ---------------------------------------------------------------------------------------------
# Partition values no directory can be named after: rejects naming the column
# ---------------------------------------------------------------------------------------------
NUL_ROWS = {3, 10, 17}
LONG_ROW = 5


def day_of(i: int) -> str:
    if i in NUL_ROWS:
        return "bad\x00day"
    return "x" * 300 if i == LONG_ROW else f"d{i % 2}"


def test_partition_values_no_directory_can_hold_are_rejects_naming_the_column(spark, tmp_path):
    inp, schema = write_input(tmp_path / "in", 20, day=day_of)
    out = tmp_path / "out"
    manifest = run_conversion(spark, ConversionOptions(inputs=str(inp), input_format="csv", schema=str(schema),
                                                       output=str(out), partition_by="day", max_reject_fraction=0.5))
    assert manifest["totals"] == {"input_rows": 20, "records": 16, "rejected": 4}, manifest["totals"]
    assert sorted(manifest["partitions"]) == ["day=d0", "day=d1"]
    assert sum(p["records"] for p in manifest["partitions"].values()) == 16
    rejects = [json.loads(line) for f in sorted((out / "_rejects").iterdir()) for line in f.read_text().splitlines()]
    by_line = {r["line"]: r["reason"] for r in rejects}
    assert sorted(by_line) == sorted(i + 2 for i in NUL_ROWS | {LONG_ROW}), rejects  # line 1 is the header
    for i in NUL_ROWS:
        assert by_line[i + 2] == "partition column 'day': its value holds a NUL byte, which no directory name can hold"
    assert by_line[LONG_ROW + 2].startswith("partition column 'day': its value makes a directory name of 304 bytes")
    assert all(r["source"] == str(inp) for r in rejects)


def test_the_data_source_rejects_them_too(spark, tmp_path):
    tfrecord_io.spark.register(spark)
    rows = [(i, day_of(i)) for i in range(20)]
    out = str(tmp_path / "out")
    (spark.createDataFrame(rows, "id long, day string").write.format("tfrecord").option("partitionBy", "day")
     .option("maxRejectFraction", "0.5").mode("overwrite").save(out))
    top = output.read_manifest(out)
    assert top["totals"] == {"input_rows": 20, "records": 16, "rejected": 4}, top["totals"]
    assert sorted(top["partitions"]) == ["day=d0", "day=d1"]
    reasons = [json.loads(line)["reason"] for f in sorted(Path(out, "_rejects").iterdir())
               for line in f.read_text().splitlines()]
    assert sorted(r.split(":")[0] for r in reasons) == ["partition column 'day'"] * 4 and sum(
        "NUL byte" in r for r in reasons) == 3, reasons
