"""One writer per output (#31 item 3): the lease a conversion holds on its output.

A second conversion is refused at its start naming the first; the staging of a live run is never
deleted, not even with ``--overwrite``; a killed run's staging, and a ``_temporary/`` we did not
write, are cleaned only with ``--overwrite``; a run that failed and ended its lease never blocks
the next.  Real processes throughout: conversions through the CLI, and as the first writer a
real process that took the output with the library and holds it (so that its lifetime is the
test's to choose), then a real concurrent Spark conversion.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import tfrecord_io_cli
from schemas import ID_SCORE
from tfrecord_io.storage import lease, output

SCHEMA = ID_SCORE


@pytest.fixture
def data(tmp_path) -> tuple[Path, Path]:
    csv = tmp_path / "in.csv"
    csv.write_text("id,score\n" + "".join(f"{i},{i / 4}\n" for i in range(500)))
    schema = tmp_path / "schema.yaml"
    schema.write_text(SCHEMA)
    return csv, schema


def convert(csv: Path, schema: Path, out: Path, *extra: str, engine: str = "beam") -> subprocess.CompletedProcess:
    return tfrecord_io_cli("convert", "--engine", engine, "--format", "csv", "--input", str(csv), "--schema",
                           str(schema), "--output", str(out), "--num-shards", "2", *extra, check=False)


def _holder(out: Path) -> subprocess.Popen:
    """A real process that takes ``out`` as a conversion does (prepare_output: staging + lease) and
    keeps it until killed."""
    code = ("import sys, time\nfrom tfrecord_io.storage import output\n"
            "output.prepare_output(sys.argv[1], overwrite=False)\nprint('held', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.slow  # a held conversion killed, and four CLI conversions after it
def test_a_second_conversion_is_refused_naming_the_first_then_a_dead_ones_staging_needs_overwrite(data, tmp_path):
    csv, schema = data
    out = tmp_path / "out"
    first = _holder(out)
    try:
        held = json.loads((out / "_temporary" / lease.LEASE).read_text())
        assert held["pid"] == first.pid and held["ended"] is None
        for extra in ((), ("--overwrite",)):  # a live run's staging: not even --overwrite
            proc = convert(csv, schema, out, *extra)
            assert proc.returncode == 2, proc.stderr
            assert f"is being written by another conversion" in proc.stderr and f"pid {first.pid}" in proc.stderr
            assert "Traceback" not in proc.stderr
            assert (out / "_temporary" / lease.LEASE).exists()  # untouched
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    proc = convert(csv, schema, out)  # killed: its pid is gone, its staging stays until --overwrite
    assert proc.returncode == 2 and "died without finishing" in proc.stderr and f"pid {first.pid}" in proc.stderr
    proc = convert(csv, schema, out, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert not (out / "_temporary").exists() and json.loads((out / "_manifest.json").read_text())["totals"][
        "records"] == 500


def test_a_temporary_we_did_not_write_is_deleted_only_with_overwrite(data, tmp_path):
    csv, schema = data
    out = tmp_path / "out"
    (out / "_temporary" / "0" / "task_0").mkdir(parents=True)  # Hadoop's FileOutputCommitter layout
    (out / "_temporary" / "0" / "task_0" / "part-00000").write_text("another tool's attempt")
    proc = convert(csv, schema, out)
    assert proc.returncode == 2 and "no tfrecord-io conversion holds a lease on" in proc.stderr, proc.stderr
    assert (out / "_temporary" / "0" / "task_0" / "part-00000").exists()
    assert convert(csv, schema, out, "--overwrite").returncode == 0


def test_a_heartbeat_from_another_host_is_live_until_stale(data, tmp_path):
    """Another host's run: no pid to look at, its heartbeat says whether it runs."""
    csv, schema = data
    out = tmp_path / "out"
    (out / "_temporary").mkdir(parents=True)

    def write(age: float) -> None:
        now = time.time()
        (out / "_temporary" / lease.LEASE).write_text(json.dumps(
            {"run": "r", "owner": "alice", "host": "elsewhere.example.com", "pid": 1, "started": now - 3600,
             "heartbeat": now - age, "ended": None}))

    write(age=2)
    proc = convert(csv, schema, out, "--overwrite")
    assert proc.returncode == 2 and "alice@elsewhere.example.com pid 1" in proc.stderr, proc.stderr
    write(age=lease.STALE_AFTER_S + 5)
    proc = convert(csv, schema, out)
    assert proc.returncode == 2 and "died without finishing" in proc.stderr
    assert convert(csv, schema, out, "--overwrite").returncode == 0


def test_a_run_that_failed_ends_its_lease_and_never_blocks_the_next(data, tmp_path):
    csv, schema = data
    bad = tmp_path / "bad.csv"
    bad.write_text("id,score\n" + "".join(f"{i},x\n" for i in range(50)))  # every row a reject
    out = tmp_path / "out"
    proc = convert(bad, schema, out)
    assert proc.returncode != 0 and "max-reject-fraction" in proc.stderr
    assert json.loads((out / "_temporary" / lease.LEASE).read_text())["ended"] is not None  # the rejects stay
    proc = convert(csv, schema, out)  # no --overwrite needed
    assert proc.returncode == 0, proc.stderr


@pytest.mark.spark
def test_two_real_concurrent_spark_conversions_one_refused_the_other_committed(tmp_path):
    csv = tmp_path / "big.csv"
    with open(csv, "w") as f:
        f.write("id,score\n")
        for start in range(0, 2_000_000, 100_000):
            f.write("".join(f"{i},{i / 4}\n" for i in range(start, start + 100_000)))
    schema = tmp_path / "schema.yaml"
    schema.write_text(SCHEMA)
    out = tmp_path / "out"
    args = [str(Path(sys.executable).parent / "tfrecord-io"), "convert", "--engine", "spark", "--format", "csv",
            "--input", str(csv), "--schema", str(schema), "--output", str(out), "--num-shards", "4"]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "_temporary" / lease.LEASE).exists():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the first conversion never took the output"
        time.sleep(0.05)
    second = subprocess.run(args + ["--overwrite"], capture_output=True, text=True, timeout=600)
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr
    assert second.returncode == 2, second.stderr
    assert f"being written by another conversion" in second.stderr and f"pid {first.pid}" in second.stderr
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["totals"]["records"] == 2_000_000 and not (out / "_temporary").exists()
    assert tfrecord_io_cli("verify", str(out), check=False).returncode == 0
    assert os.path.exists(out / output.SUCCESS)
