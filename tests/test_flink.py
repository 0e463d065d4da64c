"""The Beam pipeline on a real Flink: Beam's Flink job server (Java runner 2.62.0, Flink 1.19.0
MiniCluster, started once per session by ``flink_fixtures``) with the PortableRunner, 2-way
parallelism and ``--environment_type=LOOPBACK`` (the SDK workers run in the submitting process).

Every run here is checked to have gone through that job server and ended DONE there (Beam's
DirectRunner falls back silently; the PortableRunner with ``--job_endpoint`` cannot), and its
output is compared with the in-process FnApiRunner's on the same input: the same records as a
multiset, the same rejects, the same manifest counts.  The last test does the same on Beam's
Spark runner (its job server, Spark 3.5.1 in ``local[2]``).
"""

from __future__ import annotations

import collections
import json
import re
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tfrecord_io.core.schema import Schema
from tfrecord_io.engines import beam as tbeam
from tfrecord_io.storage import fs, output
from tfrecord_io.testing.faults import FirstAttempt

from helpers import (EXAMPLE_SCHEMA, SESSIONS_SCHEMA, example_rows, output_records, rejects_of, session_lines,
                     write_example_csv)

# The LOOPBACK workers are threads of this process; when Flink closes a task's connections (at the
# end of each task, and on a restart) their gRPC readers end with CANCELLED, which Beam leaves
# unhandled in those threads.  That is Beam's normal shutdown, not a failure of the test.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")

REPO = Path(__file__).resolve().parent.parent
FLINK_RUNNER = "org.apache.beam.runners.flink.FlinkPipelineRunner"


# ------------------------------------------------------------------------------- helpers
def flink_args(flink, job_name: str, environment: str = "LOOPBACK") -> list[str]:
    """Beam options for the session's job server (``flink`` or ``beam_spark``), naming the job."""
    args = [a for a in flink.pipeline_args(parallelism=2) if not a.startswith("--environment_type=")]
    return [*args, f"--environment_type={environment}", f"--job_name={job_name}"]


def assert_ran_on_flink(flink, job_name: str, before: set[str], environment: str = "LOOPBACK") -> dict:
    """The job server ran exactly one new job, named ``job_name``, on Flink, and it is DONE."""
    new = [j for j in flink.jobs() if j["job_id"] not in before]
    assert [j["options"].get("job_name") for j in new] == [job_name], new
    job = new[0]
    assert job["state"] == "DONE", job
    assert job["options"]["environment_type"] == environment
    log = flink.log_path.read_text(errors="replace")
    if flink.runner == "spark":  # Beam's Spark job server (same checks, Spark's words)
        assert f"SparkJobInvoker - Invoking job {job['job_id']}" in log
        assert f"SparkPipelineRunner - Job {job['job_id']} finished." in log
        return job
    assert job["options"]["flink_master"] == "[local]" and job["options"]["parallelism"] in ("2", 2)
    assert f"Invoking job {job['job_id']} with pipeline runner {FLINK_RUNNER}" in log
    assert f"Job {job_name} (" in log and "switched from state RUNNING to FINISHED" in log
    return job


def job_ids(flink) -> set[str]:
    return {j["job_id"] for j in flink.jobs()}


def reject_set(out: str, inputs: str = "") -> collections.Counter:
    """The rejects of an output as a multiset, each ``source`` relative to ``inputs``."""
    rows = rejects_of(out)
    for r in rows:
        if inputs and r["source"].startswith(inputs):
            r["source"] = r["source"][len(inputs):]
    return collections.Counter(json.dumps(r, sort_keys=True) for r in rows)


def assert_same_output(got: str, want: str, inputs: tuple[str, str] = ("", "")) -> dict:
    """``got`` (Flink) holds what ``want`` (FnApiRunner) holds: records, rejects, manifest counts.
    ``inputs``: the two runs' input directories, when they differ (the rejects name their files)."""
    for out in (got, want):
        assert fs.exists(fs.join(out, output.SUCCESS)) and not fs.exists(fs.join(out, output.TEMPORARY))
    a, b = output.read_manifest(got), output.read_manifest(want)
    assert a["engine"] == b["engine"] == "beam"
    assert a["totals"] == b["totals"]
    assert a.get("present") == b.get("present")
    assert a["schema"] == b["schema"] and a["compression"] == b["compression"]
    assert sorted(f["path"] for f in a["files"]) == sorted(f["path"] for f in b["files"])
    assert sum(f["records"] for f in a["files"]) == a["totals"]["records"]
    got_records = output_records(got)
    assert got_records == output_records(want)
    assert sum(got_records.values()) == a["totals"]["records"]
    assert reject_set(got, inputs[0]) == reject_set(want, inputs[1])
    assert sum(reject_set(got).values()) == a["totals"]["rejected"]
    # Nothing but the committed files: no attempt of a failed task, no _temporary, in local and HDFS output.
    expected = ({output.SUCCESS, output.MANIFEST} | {f["path"] for f in a["files"]}
                | {f["path"] for f in a["rejects"]})
    assert tree(got) == expected
    return a


def tree(out: str) -> set[str]:
    """Every file under ``out``, relative to it (local or hdfs://)."""
    found, todo = set(), [out]
    while todo:
        d = todo.pop()
        for p in fs.ls(d):
            if fs.isdir(p):
                todo.append(p)
            else:
                found.add(p[len(out):].lstrip("/"))
    return found


def fnapi(inp: str, fmt: str, schema: Schema, out: str, faults=None, **kw) -> tbeam.ConversionResult:
    from apache_beam.options.pipeline_options import PipelineOptions

    conv = tbeam.ConversionOptions(inputs=inp, input_format=fmt, schema=schema, output=out, **kw)
    result = tbeam.run_conversion(conv, PipelineOptions(["--runner=FnApiRunner"]), faults=faults)
    assert result.runner == "FnApiRunner", result.runner
    return result


def on_flink(flink, inp: str, fmt: str, schema: Schema, out: str, beam_args=(), environment="LOOPBACK", faults=None,
             **kw):
    """Run in this process on Flink; returns (result, the job server's job)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    job_name = f"tfrecord-io-test-{uuid.uuid4().hex[:10]}"
    before = job_ids(flink)
    conv = tbeam.ConversionOptions(inputs=inp, input_format=fmt, schema=schema, output=out, **kw)
    result = tbeam.run_conversion(conv, PipelineOptions([*flink_args(flink, job_name, environment), *beam_args]),
                                  faults=faults)
    assert result.requested_runner == "PortableRunner" and result.runner.startswith("PortableRunner"), result.runner
    return result, assert_ran_on_flink(flink, job_name, before, environment)


# ------------------------------------------------------------------------------- (a) local files
@pytest.mark.parametrize("record_type", ["example", "sequence_example"])
def test_local_csv_on_flink_equals_fnapi_runner(flink, tmp_path, record_type):
    """The command line (``python -m tfrecord_io.beam``) on Flink writes what FnApiRunner writes."""
    inp = tmp_path / "in"
    inp.mkdir()
    if record_type == "example":
        lines = example_rows(3000, seed=11, bad_every=97)
        write_example_csv(inp / "a.csv", lines[:1800])
        write_example_csv(inp / "b.csv", lines[1800:])
        schema, fmt, extra = EXAMPLE_SCHEMA, "csv", ["--num-shards", "3", "--compression", "gzip"]
    else:
        rows = session_lines(300, seed=5)
        rows[17] = '{"session_id": "s0001", "ts": "not a time"}'   # rejects its group
        rows[40] = '{"ts": 3, "item": "i1"}'                        # no group: rejected alone
        (inp / "a.jsonl").write_text("\n".join(rows[:500]) + "\n")
        (inp / "b.jsonl").write_text("\n".join(rows[500:]) + "\n")
        schema, fmt, extra = SESSIONS_SCHEMA, "json", ["--num-shards", "2", "--max-steps", "3"]
    schema_path = tmp_path / "schema.yaml"
    schema_path.write_text(schema.to_yaml())
    want = str(tmp_path / "fnapi")
    fnapi(str(inp), fmt, schema, want, max_reject_fraction=0.5, num_shards=int(extra[1]),
          **({"compression": "gzip"} if record_type == "example" else {"max_steps": 3}))

    got = str(tmp_path / "flink")
    job_name = f"tfrecord-io-cli-{uuid.uuid4().hex[:10]}"
    before = job_ids(flink)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "tfrecord_io.beam", "--input", str(inp), "--format", fmt,
         "--schema", str(schema_path), "--output", got, "--max-reject-fraction", "0.5", *extra,
         *flink_args(flink, job_name)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    done = json.loads([ln for ln in proc.stdout.splitlines() if '"tfrecord-io-done"' in ln][-1])
    assert done["engine"] == "beam" and done["runner"].startswith("PortableRunner")
    assert_ran_on_flink(flink, job_name, before)
    manifest = assert_same_output(got, want)
    totals = manifest["totals"]
    assert totals["rejected"] > 0 and totals["records"] > 0
    assert done["totals"]["records"] == totals["records"] and done["totals"]["rejected"] == totals["rejected"]
    if record_type == "example":
        assert totals == {"input_rows": 3000, "records": 3000 - 3000 // 97, "rejected": 3000 // 97}


# ------------------------------------------------------------------------------- (b) HDFS
def test_hdfs_in_and_out_through_flink_workers(flink, hdfs, tmp_path, monkeypatch):
    """Input read and shards, rejects and the report written by the Flink job's workers through
    tfrecord_io.storage.fs (hdfs-native); the same records as FnApiRunner on local copies."""
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    base = hdfs.uri(f"/flink-test/{tmp_path.name}")
    lines = example_rows(1200, seed=13, bad_every=50)
    local = tmp_path / "in"
    local.mkdir()
    for k, chunk in enumerate((lines[:700], lines[700:])):
        write_example_csv(local / f"part-{k}.csv", chunk)
        with fs.open(f"{base}/in/part-{k}.csv", "wb") as f:
            f.write((local / f"part-{k}.csv").read_bytes())
    hdfs_args = [f"--hdfs_user={hdfs.user}"]
    out = f"{base}/out"
    result, _ = on_flink(flink, f"{base}/in", "csv", EXAMPLE_SCHEMA, out, beam_args=hdfs_args,
                         num_shards=2, compression="gzip", max_reject_fraction=0.1)
    assert result.totals.input_rows == 1200 and result.totals.rejected == 1200 // 50
    want = str(tmp_path / "fnapi")
    fnapi(str(local), "csv", EXAMPLE_SCHEMA, want, num_shards=2, compression="gzip", max_reject_fraction=0.1)
    manifest = assert_same_output(out, want, inputs=(f"{base}/in", str(local)))
    assert {r["source"] for r in rejects_of(out)} == {f"{base}/in/part-0.csv", f"{base}/in/part-1.csv"}
    assert len(manifest["files"]) == 2


# ------------------------------------------------------------------------------- (c) a failed attempt
def test_worker_failure_mid_write_is_retried_and_output_stays_exactly_once(flink, tmp_path):
    """Shard 1's first write attempt fails after its first batch went to the file
    (tfrecord_io.testing.faults; a LOOPBACK worker is a thread of this process, so it raises
    rather than exits); Flink restarts the job's failed region from its conf dir's restart strategy, and the
    committed output is exactly FnApiRunner's: the partial file of the failed attempt is gone."""
    lines = example_rows(2000, seed=17, bad_every=61)
    inp = tmp_path / "in.csv"
    write_example_csv(inp, lines)
    want = str(tmp_path / "fnapi")
    fnapi(str(inp), "csv", EXAMPLE_SCHEMA, want, num_shards=3, max_reject_fraction=0.1)

    got = str(tmp_path / "flink")
    result, job = on_flink(flink, str(inp), "csv", EXAMPLE_SCHEMA, got, num_shards=3, max_reject_fraction=0.1,
                           faults=FirstAttempt("die", {1}))
    log = flink.log_path.read_text(errors="replace")
    name = job["options"]["job_name"]
    restarts = [ln for ln in log.splitlines() if f"Job {name} (" in ln and "RUNNING to RESTARTING" in ln]
    assert len(restarts) == 1, f"expected one restart of {name}, the job server logged: {restarts}"
    assert any(re.search(r"fault injection: killing task attempt \S+ mid-write \(shard 1,", ln)
               for ln in log.splitlines()), "the failure was not the injected one"
    assert_same_output(got, want)
    assert result.totals.records == 2000 - 2000 // 61
    # The same fault on a runner that does not retry fails the conversion and commits nothing.
    with pytest.raises(Exception, match=r"killing task attempt \S+ mid-write \(shard 1,"):
        fnapi(str(inp), "csv", EXAMPLE_SCHEMA, str(tmp_path / "fnapi-fails"), num_shards=3, max_reject_fraction=0.1,
              faults=FirstAttempt("die", {1}))
    assert not (tmp_path / "fnapi-fails" / output.SUCCESS).exists()


@pytest.fixture
def worker_pool(tmp_path):
    """Beam's worker pool (``worker_pool_main``) in its own process: each SDK worker Flink asks
    for is a separate Python process (``--environment_type=EXTERNAL``), one that can really die."""
    import socket
    import time

    from tfrecord_io.clusters.flink.job_server import free_ports

    port = free_ports(1)[0]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = open(tmp_path / "worker-pool.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                             f"--service_port={port}"], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Beam's worker pool exited with {proc.returncode}: "
                                   f"{(tmp_path / 'worker-pool.log').read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Beam's worker pool did not listen on 127.0.0.1:{port} within 60s")
                time.sleep(0.2)
        yield f"127.0.0.1:{port}", tmp_path / "worker-pool.log"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        log.close()


def test_worker_process_crash_mid_write_is_retried_and_output_stays_exactly_once(flink, worker_pool, tmp_path):
    """The same on SDK workers in their own processes (EXTERNAL environment): the worker writing
    shard 0 dies (``os._exit``) after its first batch; Flink restarts the failed region on a
    fresh worker process and the committed output is exactly FnApiRunner's."""
    endpoint, pool_log = worker_pool
    lines = example_rows(1500, seed=19, bad_every=53)
    inp = tmp_path / "in.csv"
    write_example_csv(inp, lines)
    want = str(tmp_path / "fnapi")
    fnapi(str(inp), "csv", EXAMPLE_SCHEMA, want, num_shards=2, max_reject_fraction=0.1)

    got = str(tmp_path / "flink")
    result, job = on_flink(flink, str(inp), "csv", EXAMPLE_SCHEMA, got, beam_args=[f"--environment_config={endpoint}"],
                           environment="EXTERNAL", num_shards=2, max_reject_fraction=0.1,
                           faults=FirstAttempt("die", {0}))
    died = [ln for ln in pool_log.read_text(errors="replace").splitlines()
            if re.search(r"killing task attempt \S+ mid-write \(shard 0, python pid", ln)]
    assert len(died) == 1, pool_log.read_text(errors="replace")[-3000:]
    assert f"python pid {os.getpid()})" not in died[0]  # a worker process died, not this one
    name = job["options"]["job_name"]
    log = flink.log_path.read_text(errors="replace")
    assert len([ln for ln in log.splitlines() if f"Job {name} (" in ln and "RUNNING to RESTARTING" in ln]) == 1
    assert_same_output(got, want)
    assert result.totals.records == 1500 - 1500 // 53


def test_flink_runner_starts_the_job_server_from_the_manifest_jar(flink, tmp_path, caplog):
    """What docs/running-on-flink.md tells users: ``--runner=FlinkRunner`` with
    ``--flink_job_server_jar`` (the manifest-only jar ``flink-local fetch`` writes) starts the
    job server itself, runs on Flink, and stops it.  (``flink`` only for the jars and the marker.)"""
    import logging

    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.clusters.flink import job_server_jar

    lines = example_rows(600, seed=23, bad_every=31)
    inp = tmp_path / "in.csv"
    write_example_csv(inp, lines)
    want = str(tmp_path / "fnapi")
    fnapi(str(inp), "csv", EXAMPLE_SCHEMA, want, num_shards=2, max_reject_fraction=0.1)
    got = str(tmp_path / "flink")
    caplog.set_level(logging.INFO)  # Beam logs the job server's own output at INFO
    conv = tbeam.ConversionOptions(inputs=str(inp), input_format="csv", schema=EXAMPLE_SCHEMA, output=got,
                                   num_shards=2, max_reject_fraction=0.1)
    result = tbeam.run_conversion(conv, PipelineOptions([
        "--runner=FlinkRunner", "--flink_master=[local]", f"--flink_job_server_jar={job_server_jar()}",
        "--environment_type=LOOPBACK", "--parallelism=2"]))
    assert result.requested_runner == "FlinkRunner" and result.runner.startswith("PortableRunner"), result.runner
    # Beam started (and stopped) our jar, and the job server it started ran the job on Flink.
    assert f"'-jar', '{job_server_jar()}'" in caplog.text or str(job_server_jar()) in caplog.text, caplog.text[-3000:]
    assert f"pipeline runner {FLINK_RUNNER}" in caplog.text, caplog.text[-3000:]
    assert "switched from state RUNNING to FINISHED" in caplog.text
    assert_same_output(got, want)


# ------------------------------------------------------------------------------- Beam's Spark runner
def test_local_csv_on_beams_spark_runner_equals_fnapi_runner(beam_spark, tmp_path):
    """The same pipeline on Beam's Spark runner (job server 2.62.0, Spark 3.5.1 ``local[2]``,
    LOOPBACK workers): the records, rejects and counts of FnApiRunner."""
    lines = example_rows(2500, seed=29, bad_every=71)
    inp = tmp_path / "in"
    inp.mkdir()
    write_example_csv(inp / "a.csv", lines[:1000])
    write_example_csv(inp / "b.csv", lines[1000:])
    want = str(tmp_path / "fnapi")
    fnapi(str(inp), "csv", EXAMPLE_SCHEMA, want, num_shards=3, compression="gzip", max_reject_fraction=0.1)
    got = str(tmp_path / "spark")
    result, _ = on_flink(beam_spark, str(inp), "csv", EXAMPLE_SCHEMA, got, num_shards=3, compression="gzip",
                         max_reject_fraction=0.1)
    assert_same_output(got, want)
    assert result.totals.records == 2500 - 2500 // 71 and result.totals.rejected == 2500 // 71
