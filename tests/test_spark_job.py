"""The Spark job (tfrecord_io.engines.spark, jobs/to_tfrecord.py, ``tfrecord-io convert``) end to end.

Real Spark (in-process local[2] via the ``spark`` fixture, and ``spark-submit`` subprocesses,
including standalone clusters started from pyspark's own scripts: a master + one worker, and a
master + workers on two host addresses for speculative attempts), real HDFS (the ``hdfs``
fixture), TensorFlow's own reader to check the output.  No mocks.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from helpers import (CORPUS, CORPUS_SCHEMA, JOB, QUICK_JVM, REPO, corpus_rows, corpus_table, expected_values, listing,
                     make_executor_python, read_back, rejects_of, serialized_records, shard_names, spark_submit,
                     write_corpus_csv)
from tfrecord_io.storage import fs, output
from tfrecord_io.core.schema import Schema, SchemaError
from tfrecord_io.engines.spark import (LINE, RAW, REASON, SOURCE, START, ConversionOptions, DealRows, ReadAndWrite,
                                      ReadStage, WriteDealt, WriteStage, run_conversion, spills)
from tfrecord_io.engines.loader import parse_spec
from tfrecord_io.storage.schema_io import load_schema
from tfrecord_io.testing.faults import FirstAttempt

FAULTY_JOB = str(REPO / "tests" / "jobs" / "faulty_to_tfrecord.py")  # the job with a fault injected
SHARDS = 3


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def write_jsonl(path_or_file, rows: list[dict]) -> bytes:
    data = "".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in rows).encode()
    if isinstance(path_or_file, (str, Path)):
        Path(path_or_file).write_bytes(data)
    return data


@pytest.fixture(scope="module")
def example_input(tmp_path_factory):
    """Three CSV files (3,000 good rows) plus one bad row; the rows and the expected values."""
    d = tmp_path_factory.mktemp("example-input")
    rows = corpus_rows(3000)
    for k in range(3):
        write_corpus_csv(d / f"part-{k}.csv", rows[k * 1000:(k + 1) * 1000],
                         extra_lines=("oops,1.0,bad,,1;2",) if k == 1 else ())
    return d, rows


@pytest.fixture(scope="module")
def clean_run(submit, example_input, tmp_path_factory):
    """spark-submit local[2], local -> local, gzip, 3 shards: the reference output."""
    d, rows = example_input
    out = tmp_path_factory.mktemp("clean") / "out"
    t0 = time.monotonic()
    proc = submit([JOB, "--input", f"{d}/*.csv", "--format", "csv", "--schema", str(CORPUS_SCHEMA),
                   "--output", str(out), "--compression", "gzip", "--num-shards", str(SHARDS)])
    return out, proc, time.monotonic() - t0


# ---------------------------------------------------------------------------------------------
# Units: the functions shipped to executors
# ---------------------------------------------------------------------------------------------
def test_read_and_write_stages_pickle_and_a_file_read_in_parts_gives_each_row_once(tmp_path):
    from pyspark import cloudpickle  # the copy Spark itself pickles functions with

    from tfrecord_io.storage import inputs
    from tfrecord_io.engines.spark import _line_offsets, _Split

    schema = load_schema(str(CORPUS_SCHEMA))
    path = tmp_path / "a.csv"
    write_corpus_csv(path, corpus_rows(300), extra_lines=("x,1,a,,1;2", '5,1,"unbalanced,,1;2'))
    header = path.read_text().splitlines()[0].split(",")
    read = ReadStage(schema, "csv", False, {str(path): header})
    write = WriteStage(output="/tmp/x", job_id="j", num_shards=2, compression="gzip", schema=schema,
                       faults=FirstAttempt("stall", {1, 2}))
    for fn in (write, read, DealRows(read, 3, "/tmp/x", "j"), WriteDealt(write), ReadAndWrite(read, write)):
        assert pickle.loads(pickle.dumps(fn)) == fn
        assert cloudpickle.loads(cloudpickle.dumps(fn)) == fn
    read = cloudpickle.loads(cloudpickle.dumps(read))
    size = path.stat().st_size
    cuts = [0, 1, 2000, 2001, size // 2, size - 3, size]
    splits = [_Split(str(path), a, b, False) for a, b in zip(cuts, cuts[1:])]
    counts = {}
    batches = []
    for sp in splits:
        batches += list(read._read(sp))
        stream, rng = inputs.open_line_range(sp.source, sp.start, sp.end)
        with stream:
            stream.read()
        counts[(sp.source, sp.start)] = rng.lines
    table = pa.Table.from_batches(batches)
    offsets = _line_offsets(splits, counts)
    lines = (pa.compute.add(table[LINE], pa.array([offsets[(s, a)] for s, a in zip(table[SOURCE].to_pylist(),
                                                                                      table[START].to_pylist())]))
             ).to_pylist()
    assert sorted(lines) == list(range(2, 304))  # every line once (line 1 is the header)
    good = table.filter(pa.compute.is_null(table[REASON]))
    assert sorted(good["id"].to_pylist()) == list(range(300))
    bad = table.filter(pa.compute.is_valid(table[REASON])).to_pylist()
    assert sorted(r[RAW].decode() for r in bad) == sorted(["x,1,a,,1;2", '5,1,"unbalanced,,1;2'])
    assert any("'id'" in r[REASON] for r in bad) and any("unbalanced quote" in r[REASON] for r in bad)


def test_faults_pick_first_attempts_and_a_stall_stops_when_temporary_is_gone(tmp_path):
    """The test seam (tfrecord_io.testing.faults): the first attempt at a chosen shard strikes right
    after its first batch, later attempts and other shards pass everything through."""
    batches = [pa.array([b"a"]), pa.array([b"b", b"c"])]
    out = tmp_path / "out"
    temporary = out / output.TEMPORARY
    temporary.mkdir(parents=True)
    assert FirstAttempt.parse("die:0, 2").shards == {0, 2} and FirstAttempt.parse("stall:*").shards is None
    die = FirstAttempt("die", {0, 2})
    # In the driver's own process a dying attempt raises (an in-process runner's worker is a thread).
    first = die.around_write(iter(batches), output=str(out), shard=2, attempt="att")
    assert next(first) is batches[0]
    with pytest.raises(RuntimeError, match=r"killing task attempt att mid-write \(shard 2,"):
        next(first)
    retry = die.around_write(iter(batches), output=str(out), shard=2, attempt="att2")  # the marker is there
    assert list(retry) == batches
    assert list(die.around_write(iter(batches), output=str(out), shard=1, attempt="att3")) == batches
    stall_over = FirstAttempt("stall", stall_s=0.1).around_write(iter(batches), output=str(out), shard=0,
                                                                 attempt="att4")
    assert list(stall_over) == batches
    stalled = FirstAttempt("stall", stall_s=60).around_write(iter(batches), output=str(out), shard=1, attempt="att5")
    assert next(stalled) is batches[0]
    shutil.rmtree(temporary)  # the job committed while this attempt slept: it must not write on
    with pytest.raises(RuntimeError, match="stalled task attempt att5 writes nothing more"):
        next(stalled)
    for f in (die, FirstAttempt("stall", {1})):
        assert pickle.loads(pickle.dumps(f)) == f


# ---------------------------------------------------------------------------------------------
# spark-submit: local -> local, faults (retries, speculation), HDFS, standalone clusters, the CLI
# ---------------------------------------------------------------------------------------------
def test_submit_local_to_local(example_input, clean_run):
    _, rows = example_input
    out, proc, seconds = clean_run
    rest = listing(out) - shard_names(SHARDS, ".gz") - {"_manifest.json", "_SUCCESS"}
    assert len(rest) == 1 and re.fullmatch(r"_rejects/part-0000[0-2]\.jsonl", rest.pop())  # no _temporary
    done = json.loads([ln for ln in proc.stdout.splitlines() if '"tfrecord-io-done"' in ln][-1])
    manifest = output.read_manifest(str(out))
    assert manifest["engine"] == "spark" and manifest["compression"] == "gzip"
    assert manifest["totals"] == {"input_rows": 3001, "records": 3000, "rejected": 1} == done["totals"]
    counts = [f["records"] for f in manifest["files"]]
    assert sum(counts) == 3000 and max(counts) - min(counts) < 0.15 * 1000, counts  # even shards
    (reject,) = rejects_of(str(out))
    assert reject["source"].endswith("part-1.csv") and reject["line"] == 1002
    assert reject["raw"] == "oops,1.0,bad,,1;2" and "'oops' is not a valid int64" in reject["reason"]
    assert read_back(sorted(out.glob("part-*"))) == expected_values(rows)
    print(f"local->local spark-submit: {seconds:.1f}s")


def test_submit_fault_injection_is_exactly_once(submit, example_input, clean_run, tmp_path):
    """First attempts of partitions 0 and 2 die mid-write; retries give exactly the clean output."""
    d, rows = example_input
    out = tmp_path / "out"
    proc = submit([FAULTY_JOB, "die:0,2", "--input", f"{d}/*.csv", "--format", "csv", "--schema", str(CORPUS_SCHEMA),
                   "--output", str(out), "--compression", "gzip", "--num-shards", str(SHARDS)], master="local[2,4]")
    killed = re.findall(r"killing task attempt \S+-p(\d+)-a0-", proc.stderr)
    assert sorted(set(killed)) == ["00000", "00002"], proc.stderr[-3000:]
    clean_out = clean_run[0]
    assert listing(out) == listing(clean_out)  # no stray files, no _temporary
    assert serialized_records(sorted(out.glob("part-*"))) == serialized_records(sorted(clean_out.glob("part-*")))
    assert output.read_manifest(str(out))["totals"] == output.read_manifest(str(clean_out))["totals"]
    assert read_back(sorted(out.glob("part-*"))) == expected_values(rows)


def test_submit_hdfs_to_hdfs(submit, hdfs, tmp_path):
    rows = corpus_rows(1200, start=10_000)
    base = hdfs.uri(f"/spark-job/{tmp_path.name}")
    for k in range(2):
        with fs.open(f"{base}/in/part-{k}.jsonl", "wb") as f:
            f.write(write_jsonl(None, rows[k * 600:(k + 1) * 600]))
    out = f"{base}/out"
    submit([JOB, "--input", f"{base}/in/*.jsonl", "--format", "json", "--schema", str(CORPUS_SCHEMA),
            "--output", out, "--compression", "zlib"], env={"HADOOP_CONF_DIR": str(hdfs.conf_dir)})
    names = {u.rsplit("/", 1)[-1] for u in fs.ls(out)}
    assert names == {"part-00000-of-00001.tfrecord.zlib", "_manifest.json", "_SUCCESS"}  # default: 1 shard
    manifest = output.read_manifest(out)
    assert manifest["totals"] == {"input_rows": 1200, "records": 1200, "rejected": 0}
    local = tmp_path / "part-00000-of-00001.tfrecord.zlib"
    with fs.open(f"{out}/part-00000-of-00001.tfrecord.zlib", "rb") as f:
        local.write_bytes(f.read())
    assert read_back([local]) == expected_values(rows)


def _master_addresses(run: Path, deadline: float) -> tuple[str, int]:
    """The URL and web UI port the standalone master under ``run`` bound (it picks both: port 0), from
    its log."""
    found: dict[str, str] = {}
    while True:
        for log in (run / "logs").glob("*.deploy.master.Master-1-*.out"):
            text = log.read_text(errors="replace")
            for key, pattern in (("url", r"Starting Spark master at (spark://\S+)"),
                                 ("ui", r"Successfully started service 'MasterUI' on port (\d+)")):
                m = re.search(pattern, text)
                if m:
                    found[key] = m.group(1)
        if len(found) == 2:
            return found["url"], int(found["ui"])
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n" + p.read_text()[-3000:] for p in (run / "logs").glob("*.out"))
            raise AssertionError(f"the standalone master did not say where it listens ({found}):\n{logs}")
        time.sleep(0.2)


def _standalone_cluster(run: Path, hosts: list[str], cores: int):
    """Start a Spark standalone master (on 127.0.0.1) and one worker per entry of ``hosts`` (its
    ``--host``, and its SPARK_LOCAL_IP, so its executors live on that address too) with pyspark's
    sbin/spark-daemon.sh, which start-master.sh and start-worker.sh wrap (the pip package ships
    only the former), in a clean environment and a working directory outside the repository.
    Every daemon binds ports of its own choosing (0): a free port picked here could be taken by the
    time the JVM binds it (by another xdist worker's cluster), and Spark would move to the next one
    without a word, so the master's URL and web UI port are read back from its log.
    A generator: yields (master URL, run dir); the caller stops the daemons by closing it."""
    import pyspark

    home = Path(pyspark.__file__).parent
    run.mkdir(parents=True, exist_ok=True)
    for host in hosts:  # e.g. 127.0.0.2: any 127/8 address is loopback on Linux
        with socket.socket() as s:
            try:
                s.bind((host, 0))
            except OSError as e:
                raise AssertionError(f"cannot bind to {host} for a standalone worker: {e}") from e
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(run)), "SPARK_HOME": str(home),
           "SPARK_LOG_DIR": str(run / "logs"), "SPARK_PID_DIR": str(run / "pids"),
           "SPARK_IDENT_STRING": f"tfio{os.getpid()}", "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM}  # the master's and workers' JVMs (helpers.QUICK_JVM)
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    daemon = str(home / "sbin" / "spark-daemon.sh")
    master_cls, worker_cls = "org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker"
    started: list[tuple[str, int, dict]] = []  # (class, spark-daemon.sh instance number, env)

    def start(cls: str, instance: int, daemon_env: dict, *args: str) -> None:
        subprocess.run([daemon, "start", cls, str(instance), *args], env=daemon_env, cwd=run, check=True,
                       capture_output=True, timeout=120)
        started.append((cls, instance, daemon_env))

    try:
        deadline = time.monotonic() + 90
        # No REST submission server: it would take the fixed port 6066 (the suite submits over RPC).
        start(master_cls, 1, {**env, "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"},
              "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        master, ui = _master_addresses(run, deadline)
        deadline = time.monotonic() + 90
        for n, host in enumerate(hosts, start=1):
            work = run / f"work-{n}"
            work.mkdir(exist_ok=True)
            start(worker_cls, n, {**env, "SPARK_LOCAL_IP": host, "SPARK_WORKER_DIR": str(work)},
                  "--host", host, "--cores", str(cores), "--memory", "1g", "--webui-port", "0",
                  "--work-dir", str(work), master)
        while True:
            alive = []
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                    state = json.load(r)
                assert state.get("url") == master, f"the web UI on port {ui} is not {master}'s: {state}"
                alive = [w.get("host") for w in state.get("workers", []) if w.get("state") == "ALIVE"]
            except OSError:
                pass
            if sorted(alive) == sorted(hosts):
                break
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n" + p.read_text()[-3000:] for p in (run / "logs").glob("*.out"))
                raise AssertionError(f"standalone workers on {hosts} did not all register with {master} "
                                     f"(alive: {alive}):\n{logs}")
            time.sleep(0.5)
        yield master, run
    finally:
        for cls, instance, daemon_env in reversed(started):
            subprocess.run([daemon, "stop", cls, str(instance)], env=daemon_env, cwd=run, capture_output=True,
                           timeout=120)


@pytest.fixture
def standalone(tmp_path):
    """A Spark standalone master + 1 worker (2 cores) on 127.0.0.1."""
    yield from _standalone_cluster(tmp_path / "cluster", ["127.0.0.1"], cores=2)


@pytest.fixture
def standalone_two_hosts(tmp_path):
    """A Spark standalone master + 2 one-core workers on two host addresses, 127.0.0.1 and
    127.0.0.2: Spark never launches a speculative copy of a task on a host where an attempt of it
    already runs."""
    yield from _standalone_cluster(tmp_path / "cluster", ["127.0.0.1", "127.0.0.2"], cores=1)


def test_submit_standalone_cluster_with_py_files(standalone, example_input, tmp_path):
    master, _ = standalone
    d, rows = example_input
    exec_python = make_executor_python(tmp_path)
    # The package the way a user ships it: a zip of tfrecord_io for --py-files.
    zip_path = shutil.make_archive(str(tmp_path / "tfrecord_io"), "zip", root_dir=REPO, base_dir="tfrecord_io")
    conf = {"spark.pyspark.python": exec_python, "spark.executorEnv.PYSPARK_PYTHON": exec_python,
            "spark.pyspark.driver.python": sys.executable, "spark.executor.memory": "512m",
            "spark.cores.max": "2", "spark.task.maxFailures": "1"}
    args = [JOB, "--input", f"{d}/part-0.csv", "--format", "csv", "--schema", str(CORPUS_SCHEMA), "--num-shards", "2"]
    # Without --py-files the executors cannot import tfrecord_io: they do not see the repository.
    bad = spark_submit(args + ["--output", str(tmp_path / "no-py-files")], master=master, conf=conf, check=False)
    assert bad.returncode == 1 and "No module named 'tfrecord_io'" in bad.stdout + bad.stderr, bad.stderr[-3000:]
    out = tmp_path / "out"
    spark_submit(args + ["--output", str(out)], master=master, conf=conf, extra=["--py-files", zip_path])
    assert listing(out) == shard_names(2) | {"_manifest.json", "_SUCCESS"}
    assert read_back(sorted(out.glob("part-*"))) == expected_values(rows[:1000])


def _event_log(events_dir: Path) -> list[dict]:
    """The events of the one application that logged to ``events_dir`` (one uncompressed JSON-lines file)."""
    logs = [p for p in events_dir.iterdir() if not p.name.startswith(".")]
    assert len(logs) == 1 and logs[0].is_file(), f"expected one event log file in {events_dir}: {logs}"
    return [json.loads(line) for line in logs[0].read_text().splitlines() if line.strip()]


def _executor_logs(run: Path) -> str:
    """The stderr of every executor the standalone workers under ``run`` started."""
    return "".join(f"--- {p.relative_to(run)}\n{p.read_text(errors='replace')}"
                   for p in sorted(run.glob("work-*/app-*/*/stderr")))


def _task_line(event: dict) -> str:
    info = event["Task Info"]
    reason = event.get("Task End Reason") or {}
    return (f"{event['Event'].removeprefix('SparkListener')} stage {event['Stage ID']} TID {info['Task ID']} "
            f"partition {info['Index']} attempt {info['Attempt']} host {info['Host']} "
            f"speculative={info['Speculative']} killed={info['Killed']} "
            f"{reason.get('Reason', '')} {reason.get('Kill Reason', '')}").rstrip()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie has stopped
    except FileNotFoundError:
        return False


def test_submit_speculative_attempts_are_exactly_once(standalone_two_hosts, example_input, clean_run, tmp_path):
    """A real speculative attempt of a write-stage task, on a two-host standalone cluster: partition 0's
    first attempt writes a batch under _temporary/<attempt>/ and stalls; Spark launches a speculative copy
    on the other host, the copy wins, the straggler and its Python worker are killed before the commit.
    The output is exactly the clean run's: the same files, the same records in each shard, no _temporary."""
    master, run = standalone_two_hosts
    d, rows = example_input
    exec_python = make_executor_python(tmp_path)
    zip_path = shutil.make_archive(str(tmp_path / "tfrecord_io"), "zip", root_dir=REPO, base_dir="tfrecord_io")
    events = tmp_path / "events"
    events.mkdir()
    conf = {"spark.pyspark.python": exec_python, "spark.executorEnv.PYSPARK_PYTHON": exec_python,
            "spark.pyspark.driver.python": sys.executable, "spark.executor.memory": "512m",
            "spark.executor.cores": "1", "spark.cores.max": "2",  # one executor on each host
            "spark.task.maxFailures": "1",  # no retries: only speculation may run a partition twice
            "spark.locality.wait": "0s",
            # Speculate once 1 of the 3 write tasks is done, on anything 1.2x slower than the median
            # (the first Python task on an executor starts its Python worker: seconds on 2 cores).
            "spark.speculation": "true", "spark.speculation.interval": "100ms",
            "spark.speculation.quantile": "0.5", "spark.speculation.multiplier": "1.2",
            "spark.speculation.minTaskRuntime": "500ms", "spark.speculation.efficiency.enabled": "false",
            "spark.python.task.killTimeout": "1s",
            "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}
    out = tmp_path / "out"
    # The clean run's arguments: the records must come out byte for byte the same.
    proc = spark_submit([FAULTY_JOB, "stall:0", "--input", f"{d}/*.csv", "--format", "csv", "--schema", str(CORPUS_SCHEMA),
                         "--output", str(out), "--compression", "gzip", "--num-shards", str(SHARDS)],
                        master=master, conf=conf, extra=["--py-files", zip_path],
                        env={"SPARK_LOCAL_IP": "127.0.0.1"}, timeout=240)
    executors = _executor_logs(run)
    ev = _event_log(events)
    tasks = [e for e in ev if e["Event"] in ("SparkListenerTaskStart", "SparkListenerTaskEnd")]
    story = "\n".join(_task_line(e) for e in tasks)
    context = (f"\n--- tasks (event log)\n{story}\n--- executors' stderr (tails)\n"
               + "\n".join(part[-2500:] for part in executors.split("--- ")[1:])
               + f"\n--- spark-submit stderr (tail)\n{proc.stderr[-2500:]}")

    stalls = re.findall(r"stalling task attempt (\w+)-s(\d+)-p(\d+)-a(\d+)-t(\d+) mid-write", executors)
    assert len(stalls) == 1 and stalls[0][2:4] == ("00000", "0"), f"expected one stalled attempt: {stalls}" + context
    stage, tid = int(stalls[0][1]), int(stalls[0][4])
    ends = {e["Task Info"]["Task ID"]: e for e in tasks
            if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] == stage}
    starts = [e for e in tasks if e["Event"] == "SparkListenerTaskStart" and e["Stage ID"] == stage]
    # The speculative copy: started as speculative, on the other host, and it succeeded.
    spec = [e for e in starts if e["Task Info"]["Speculative"] and e["Task Info"]["Index"] == 0]
    assert len(spec) == 1, f"no speculative attempt of partition 0 in write stage {stage}" + context
    copy = ends.get(spec[0]["Task Info"]["Task ID"])
    stalled = ends.get(tid)
    assert copy and copy["Task End Reason"]["Reason"] == "Success", "the speculative copy did not succeed" + context
    assert stalled and stalled["Task Info"]["Killed"] and stalled["Task End Reason"]["Reason"] == "TaskKilled", \
        f"the stalled attempt TID {tid} was not killed" + context
    assert stalled["Task Info"]["Host"] != copy["Task Info"]["Host"], context
    # Every attempt ended; each partition succeeded exactly once; nothing failed (only killed).
    assert {e["Task Info"]["Task ID"] for e in starts} == set(ends), context
    done = sorted(e["Task Info"]["Index"] for e in ends.values() if e["Task End Reason"]["Reason"] == "Success")
    assert done == list(range(SHARDS)), context
    assert all(e["Task End Reason"]["Reason"] in ("Success", "TaskKilled") for e in ends.values()), context
    # Spark killed the straggler because the copy won, and killed its Python worker (which sleeps);
    # it never woke up, and it had ended before the driver committed.
    assert re.search(rf"trying to kill task 0\.0 in stage {stage}\.0 \(TID {tid}\).*reason: another attempt "
                     r"succeeded", executors), context
    assert re.search(rf"Attempting to kill Python Worker - task 0\.0 in stage {stage} \(TID {tid}\)", executors), \
        context
    assert "woke after" not in executors, context
    pid = int(re.search(r"stalling task attempt \S+ mid-write \(shard \d+, python pid (\d+)\)", executors).group(1))
    assert not _alive(pid), f"the stalled Python worker (pid {pid}) still runs" + context
    success_ms = (out / "_SUCCESS").stat().st_mtime_ns // 1_000_000
    assert success_ms >= stalled["Task Info"]["Finish Time"], "committed before the straggler stopped" + context

    clean_out = clean_run[0]
    assert listing(out) == listing(clean_out)  # no stray files, no _temporary
    for name in sorted(shard_names(SHARDS, ".gz")):
        assert serialized_records([out / name]) == serialized_records([clean_out / name]), name
    manifest, clean_manifest = output.read_manifest(str(out)), output.read_manifest(str(clean_out))
    assert manifest["totals"] == clean_manifest["totals"]
    assert ({f["path"]: f["records"] for f in manifest["files"]}
            == {f["path"]: f["records"] for f in clean_manifest["files"]})
    assert rejects_of(str(out)) == rejects_of(str(clean_out))
    assert read_back(sorted(out.glob("part-*"))) == expected_values(rows)
    print("speculation (event log):\n" + "\n".join(_task_line(e) for e in tasks if e["Stage ID"] == stage))


def test_cli_convert_fails_over_reject_limit(spark_cli, tmp_path):
    """``tfrecord-io convert --engine spark`` with the default 1% limit on the bad corpus: exit 3."""
    out = tmp_path / "out"
    proc = spark_cli("convert", "--engine", "spark", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                     "--input", f"{CORPUS}/*.csv", "--format", "csv", "--schema", str(CORPUS_SCHEMA), "--output", str(out),
                     check=False, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "13 of 25 input rows were rejected" in proc.stderr and "--max-reject-fraction" in proc.stderr
    files = listing(out)
    assert "_SUCCESS" not in files and "_manifest.json" not in files
    assert not any(f.startswith("part-") for f in files)
    assert any(re.match(r"_temporary/[^/]+/_rejects/part-\d+\.jsonl$", f) for f in files), files


# ---------------------------------------------------------------------------------------------
# In-process (the session's local[2] SparkSession): corpus, overwrite, sequences, headers
# ---------------------------------------------------------------------------------------------
def _convert(spark, tmp_path, inputs, fmt="csv", schema=CORPUS_SCHEMA, name="out", **kw) -> tuple[Path, dict]:
    out = tmp_path / name
    opts = ConversionOptions(inputs=inputs, input_format=fmt, schema=str(schema), output=str(out), **kw)
    return out, run_conversion(spark, opts)


@pytest.mark.parametrize("fmt,multiline", [("csv", False), ("csv", True), ("json", False)])
def test_bad_corpus_every_row_accounted_for(spark, tmp_path, fmt, multiline):
    pattern = "*.csv" if fmt == "csv" else "*.jsonl"
    table = corpus_table("CSV" if fmt == "csv" else "JSON Lines")
    suffix = " (multiline)" if multiline else ""
    out, manifest = _convert(spark, tmp_path, f"{CORPUS}/{pattern}", fmt, num_shards=2,
                             max_reject_fraction=1.0, multiline=multiline)
    totals = manifest["totals"]
    want = table["total"]
    assert totals == {"input_rows": int(want["rows" + suffix]), "records": int(want["records" + suffix]),
                      "rejected": int(want["rejects" + suffix])}
    assert totals["input_rows"] == totals["records"] + totals["rejected"]
    rejects = rejects_of(str(out))
    assert len(rejects) == totals["rejected"]
    assert all(set(r) == {"source", "line", "raw", "reason"} and r["reason"] and r["raw"]
               for r in rejects), rejects
    by_file = Counter(r["source"].rsplit("/", 1)[-1] for r in rejects)
    for name, row in table.items():
        if name == "total":
            continue
        assert by_file.get(name, 0) == int(row["rejects" + suffix]), (name, by_file)
        if not multiline:
            lines = sorted(r["line"] for r in rejects if r["source"].endswith("/" + name))
            assert lines == [int(x) for x in row["lines"].split(",") if x], name
    assert sum(serialized_records(sorted(out.glob("part-*"))).values()) == totals["records"]


def test_even_shards_are_the_same_bytes_every_run(spark, tmp_path):
    """The default layout: rows dealt by several read tasks (conversion.dealing) reach even shards,
    each row once, and the same input gives byte-identical shards (a recomputed or retried task
    writes what the first one would have).  The dealt pieces go through spill files under
    ``_temporary/``, not Spark's shuffle: each of the run's Spark jobs is one stage."""
    rows = corpus_rows(6000)
    write_corpus_csv(tmp_path / "in.csv", rows)
    conf = {"spark.sql.files.maxPartitionBytes": "64k", "spark.sql.files.openCostInBytes": "8k"}
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        runs = [_convert(spark, tmp_path, str(tmp_path / "in.csv"), name=f"out{k}", num_shards=3, block_size=16 << 10)
                for k in range(2)]
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    (out, manifest), (again, _) = runs
    assert (tmp_path / "in.csv").stat().st_size > 4 * 64 << 10  # several read tasks dealt the rows
    counts = [f["records"] for f in manifest["files"]]
    assert sum(counts) == 6000 and max(counts) - min(counts) < 0.05 * 2000, counts
    assert read_back(sorted(out.glob("part-*"))) == expected_values(rows)
    for shard in sorted(out.glob("part-*")):
        assert shard.read_bytes() == (again / shard.name).read_bytes(), shard.name
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(manifest["job"]["id"])]
    assert len(jobs) == 2 and all(len(j.stageIds) == 1 for j in jobs), jobs  # deal, then write: no shuffle
    assert not (out / "_temporary").exists() and not list(out.rglob("_spill*"))


def test_even_shards_on_hdfs_go_through_sparks_shuffle_and_are_the_same_bytes(spark, hdfs, tmp_path):
    """With the output on HDFS the dealt pieces cross Spark's shuffle (one Spark job of two stages:
    a spill file there would be written three times over and count three times against the quota);
    the shards are byte for byte those of the spilled path to a local output."""
    rows = corpus_rows(3000)
    write_corpus_csv(tmp_path / "in.csv", rows)
    out = hdfs.uri(f"/even-{uuid.uuid4().hex[:8]}/out")
    assert not spills(out) and spills(str(tmp_path / "local")) and spills(f"file://{tmp_path}/local")
    manifest = run_conversion(spark, ConversionOptions(inputs=str(tmp_path / "in.csv"), input_format="csv",
                                                       schema=str(CORPUS_SCHEMA), output=out, num_shards=3))
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(manifest["job"]["id"])]
    assert len(jobs) == 1 and len(jobs[0].stageIds) == 2, jobs  # read and deal | shuffle | write
    local, _ = _convert(spark, tmp_path, str(tmp_path / "in.csv"), name="local", num_shards=3)
    names = sorted(f["path"] for f in manifest["files"])
    assert names == sorted(p.name for p in local.glob("part-*")) and len(names) == 3
    for name in names:
        with fs.open(f"{out}/{name}") as f:
            assert f.read() == (local / name).read_bytes(), name
    assert not fs.exists(f"{out}/_temporary")


def test_overwrite_refused_then_allowed(spark, tmp_path):
    inp = tmp_path / "in.csv"
    write_corpus_csv(inp, corpus_rows(20))
    out, _ = _convert(spark, tmp_path, str(inp))
    before = listing(out)
    with pytest.raises(FileExistsError, match="--overwrite"):
        _convert(spark, tmp_path, str(inp))
    assert listing(out) == before
    write_corpus_csv(inp, corpus_rows(5, start=100))
    out, manifest = _convert(spark, tmp_path, str(inp), overwrite=True)
    assert manifest["totals"]["records"] == 5 and set(read_back(out.glob("part-*"))) == set(range(100, 105))


def test_reject_limit_leaves_no_success(spark, tmp_path):
    from tfrecord_io.storage.output import RejectLimitExceeded

    inp = tmp_path / "in.csv"
    write_corpus_csv(inp, corpus_rows(98), extra_lines=("x,1,a,,1;2", "y,1,b,,1;2"))  # 2% rejected
    with pytest.raises(RejectLimitExceeded, match="2 of 100 input rows"):
        _convert(spark, tmp_path, str(inp))
    files = listing(tmp_path / "out")
    assert not {"_SUCCESS", "_manifest.json"} & files and not any(f.startswith("part-") for f in files)
    out, manifest = _convert(spark, tmp_path, str(inp), name="out2", max_reject_fraction=0.02)
    assert manifest["totals"] == {"input_rows": 100, "records": 98, "rejected": 2}


def test_csv_header_matched_by_name_and_default_shard_count(spark, tmp_path):
    rows = corpus_rows(40)
    write_corpus_csv(tmp_path / "a.csv", rows[:20])
    with open(tmp_path / "b.csv", "w", newline="") as f:  # other order, an unknown column, no `tags`
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["vec", "extra", "name", "id", "score"])
        for r in rows[20:]:
            w.writerow([";".join(map(repr, r["vec"])), "zzz", r["name"] or "", r["id"],
                        "" if r["score"] is None else r["score"]])
    size = sum(p.stat().st_size for p in tmp_path.glob("*.csv"))
    both = [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    with pytest.raises(SchemaError, match="feature 'tags' is not a column of .*b.csv; column 'extra'"):
        _convert(spark, tmp_path, both)  # b.csv lacks a feature and has a column no feature reads
    out, manifest = _convert(spark, tmp_path, both, bytes_per_shard=1000, allow_missing_columns=True,
                             ignore_extra_columns=True)
    assert len(manifest["files"]) == -(-size // 1000)
    want = expected_values(rows[:20]) | {k: v[:2] + ([],) + v[3:] for k, v in expected_values(rows[20:]).items()}
    assert read_back(sorted(out.glob("part-*"))) == want


def test_multiline_json_documents(spark, tmp_path):
    rows = corpus_rows(6)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text(json.dumps([{k: v for k, v in r.items() if v is not None}
                                                        for r in rows[:4]], indent=2))
    (tmp_path / "in" / "b.json").write_text(json.dumps(rows[4], indent=2))
    (tmp_path / "in" / "c.json").write_text(json.dumps(rows[5], indent=2))
    out, manifest = _convert(spark, tmp_path, str(tmp_path / "in"), "json", multiline=True)
    assert manifest["totals"] == {"input_rows": 6, "records": 6, "rejected": 0}
    assert read_back(sorted(out.glob("part-*"))) == expected_values(rows)


SEQ_SCHEMA = (Path(__file__).resolve().parent / "data" / "seq_users.yaml").read_text()  # shared with test_beam_pipeline.py


def test_sequence_example_end_to_end(spark, tmp_path):
    import random

    import tensorflow as tf

    (tmp_path / "schema.yaml").write_text(SEQ_SCHEMA)
    rng = random.Random(7)
    lengths = {f"u{u}": (23 if u == 0 else rng.randint(1, 6)) for u in range(30)}
    lines = [f"u{u[1:]},{'DE' if int(u[1:]) % 2 else 'FR'},{t},{'' if t == 3 else t * 0.5},{t};{-t}"
             for u, n in lengths.items() for t in range(n)]
    lines += ["u5,XX,99,1.0,1;2",  # context disagrees -> group u5 rejected whole
              "u7,DE,42,1.0,1"]    # a [2] list with one value -> group u7 rejected whole
    rng.shuffle(lines)
    half = len(lines) // 2
    for k, part in enumerate((lines[:half], lines[half:])):
        (tmp_path / f"s{k}.csv").write_text("user,country,t,x,v\n" + "\n".join(part) + "\n")
    out, manifest = _convert(spark, tmp_path, f"{tmp_path}/s*.csv", schema=tmp_path / "schema.yaml",
                             num_shards=3, max_steps=10, max_reject_fraction=1.0)
    bad = {"u5": lengths["u5"] + 1, "u7": lengths["u7"] + 1}
    good_rows = sum(n for u, n in lengths.items() if u not in bad)
    # u0's 23 steps are 3 records (10 + 10 + 3); every other good group is one record
    assert manifest["totals"] == {"input_rows": len(lines), "records": (len(lengths) - 2) + 2,
                                  "rejected": sum(bad.values()), "rows_in_records": good_rows}
    rejects = rejects_of(str(out))
    assert Counter(r["raw"].split(",")[0] for r in rejects) == Counter(bad)
    assert any("context feature 'country' differs" in r["reason"] for r in rejects)
    assert any("expected 2 values" in r["reason"] for r in rejects)
    ctx, seq = parse_spec(load_schema(str(tmp_path / "schema.yaml")))
    got: dict[str, list] = {}
    for f in sorted(out.glob("part-*")):
        for rec in tf.data.TFRecordDataset(str(f)):
            c, s = tf.io.parse_single_sequence_example(rec, ctx, seq)
            user = c["user"].numpy().decode()
            assert c["country"].numpy().decode() == ("DE" if int(user[1:]) % 2 else "FR")
            got.setdefault(user, []).append((s["t"].numpy().tolist(), s["x"].numpy().tolist(),
                                             s["v"].numpy().tolist()))
    assert set(got) == set(lengths) - set(bad)
    for user, pieces in got.items():
        steps = [t for ts, _, _ in sorted(pieces) for t in ts]
        assert steps == list(range(lengths[user])), user  # ordered by t, nothing lost or repeated
        assert all(len(ts) <= 10 for ts, _, _ in pieces)
        for ts, xs, vs in pieces:
            assert xs == [(-1.0 if t == 3 else t * 0.5) for t in ts]  # null step -> default
            assert vs == [[t, -t] for t in ts]
    assert len(got["u0"]) == 3


def test_csv_extra_null_values_and_headerless(spark, tmp_path):
    """null_values beyond the first (read as text, then try_cast in the JVM); header: false."""
    (tmp_path / "schema.yaml").write_text(
        "features:\n"
        "  - {name: id, type: int64, required: true}\n"
        "  - {name: score, type: float, default: -1.0}\n"
        "  - {name: name, type: string, default: ''}\n"
        "  - {name: ks, type: int64, shape: [-1], separator: ' '}\n"
        "csv: {header: false, delimiter: ';', null_values: ['', 'NA', 'null']}\n")
    (tmp_path / "in.csv").write_text("1;2.5;a;1 2 3\n2;NA;null;NA\n3;x;c;\nnull;1;d;4\n5;1;e;4 z\n")
    out, manifest = _convert(spark, tmp_path, str(tmp_path / "in.csv"), schema=tmp_path / "schema.yaml",
                             max_reject_fraction=1.0)
    assert manifest["totals"] == {"input_rows": 5, "records": 2, "rejected": 3}
    reasons = {r["line"]: r["reason"] for r in rejects_of(str(out))}
    assert "'x' is not a valid float" in reasons[3] and "feature 'id': required" in reasons[4]
    assert "list item 'z' is not a valid int64" in reasons[5]
    import tensorflow as tf

    spec = parse_spec(load_schema(str(tmp_path / "schema.yaml")))
    parsed = tf.io.parse_example(list(tf.data.TFRecordDataset(str(next(out.glob("part-*")))).as_numpy_iterator()),
                                 spec)
    got = sorted(zip(parsed["id"].numpy().tolist(), parsed["score"].numpy().tolist(),
                     [n.decode() for n in parsed["name"].numpy()], parsed["ks"].to_list()))
    assert got == [(1, 2.5, "a", [1, 2, 3]), (2, -1.0, "", [])]


@pytest.mark.parametrize("shards", ["even", "input"])
def test_split_files_give_each_reject_its_line_and_raw_text(spark, tmp_path, shards):
    """A file read in several splits: each reject's ``line`` is its line in the file and ``raw`` the
    file's own text of that line (issue #15, item 3); with ``--shards input`` each split is a shard,
    written by the task that read it, with the same records and rejects."""
    rows = corpus_rows(3000)
    bad = {400: "bad400,1,x,,1;2", 1700: "bad1700,1.0,x,,1;2", 2900: "7,1.50,x,,1;q"}
    path = tmp_path / "big.csv"
    write_corpus_csv(path, rows)
    lines = path.read_text().splitlines(keepends=True)
    for k in sorted(bad, reverse=True):
        lines.insert(k, bad[k] + "\n")
    path.write_text("".join(lines))
    old = {k: spark.conf.get(k, None) for k in ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")}
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(40_000))
    spark.conf.set("spark.sql.files.openCostInBytes", str(1_000))
    try:
        kw = {"num_shards": 2} if shards == "even" else {"shards": "input"}
        out, manifest = _convert(spark, tmp_path, str(path), max_reject_fraction=1.0, **kw)
    finally:
        for k, v in old.items():
            spark.conf.set(k, v) if v is not None else spark.conf.unset(k)
    assert path.stat().st_size > 3 * 40_000  # really read in parts
    assert manifest["totals"] == {"input_rows": 3003, "records": 3000, "rejected": 3}
    file_lines = path.read_text().splitlines()
    rejects = rejects_of(str(out))
    assert sorted((r["line"], r["raw"]) for r in rejects) == sorted((file_lines.index(v) + 1, v)
                                                                    for v in bad.values())
    assert all(file_lines[r["line"] - 1] == r["raw"] and set(r) == {"source", "line", "raw", "reason"}
               for r in rejects)
    assert read_back(sorted(out.glob("part-*"))) == expected_values(rows)
    if shards == "input":  # one shard per read split (the file is ~3.4 splits of 40,000 bytes)
        assert len(manifest["files"]) == manifest["job"]["num_shards"] == -(-path.stat().st_size // 40_000)


def test_small_files_are_packed_into_read_tasks_as_spark_packs_them():
    """Spark's FilePartition packing: splits largest first, each costing its bytes + openCostInBytes,
    tasks of up to the split size; a split larger than that is a task of its own; input order within."""
    from tfrecord_io.engines.spark import _pack_splits, _Split, split_size

    small = [_Split(f"f{i:03d}", 0, 1_000, True) for i in range(100)]
    tasks = _pack_splits(small + [_Split("big", 0, 50_000, False)], max_split_bytes=20_000, open_cost=1_000)
    assert tasks[0] == [_Split("big", 0, 50_000, False)]
    assert [len(t) for t in tasks[1:]] == [10] * 10  # 10 x (1,000 + 1,000) = 20,000 bytes each
    assert all(t == sorted(t, key=lambda sp: sp.source) for t in tasks)
    assert sorted(sp.source for t in tasks for sp in t) == sorted(["big"] + [sp.source for sp in small])

    class F:
        size = 1_000
    assert split_size([F()] * 10_000, parallelism=2, max_split_bytes=128 << 20, open_cost=4 << 20) == 128 << 20


def test_many_small_files_are_few_tasks_and_shards_with_every_row(spark, tmp_path):
    """400 files of 5 rows: a handful of read tasks (and so of ``--shards input`` shards), not 400;
    every row is in the output, and each reject keeps its own file and line."""
    rows = corpus_rows(2000)
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(400):
        write_corpus_csv(inp / f"part-{i:04d}.csv", rows[5 * i:5 * i + 5],
                         extra_lines=("bad,1,x,,1;2",) if i == 123 else ())
    old = spark.conf.get("spark.sql.files.openCostInBytes", None)
    spark.conf.set("spark.sql.files.openCostInBytes", str(20_000))
    try:
        out, manifest = _convert(spark, tmp_path, str(inp), shards="input", max_reject_fraction=1.0)
    finally:
        spark.conf.set("spark.sql.files.openCostInBytes", old) if old else spark.conf.unset("spark.sql.files.openCostInBytes")
    # 400 x (~200 bytes + 20,000) over 2 cores: tasks of ~4 MB, ~200 files each
    assert 2 <= manifest["job"]["num_shards"] <= 4
    assert manifest["totals"] == {"input_rows": 2001, "records": 2000, "rejected": 1}
    assert read_back(sorted(out.glob("part-*"))) == expected_values(rows)
    [reject] = rejects_of(str(out))
    assert reject["source"].endswith("part-0123.csv") and reject["line"] == 7 and reject["raw"] == "bad,1,x,,1;2"


def test_sequence_writer_splits_long_groups_across_batches():
    """The write stage's grouping alone (no Spark): groups spanning Arrow batches, max_steps pieces,
    a list-valued context feature that disagrees, a null group key."""
    import tensorflow as tf

    schema = Schema.from_dict({
        "record_type": "sequence_example", "group_by": "g", "order_by": "t",
        "context": [{"name": "g", "type": "int64"}, {"name": "c", "type": "int64", "shape": [-1]}],
        "sequence": [{"name": "t", "type": "int64"}]})
    lengths = {1: 1, 2: 12, 3: 3, 4: 5, 5: 6, 6: 11}
    rows = [(g, [g, g] if not (g == 5 and t == 4) else [g], t) for g, n in lengths.items() for t in range(n)]
    rows.insert(0, (None, [0], 0))
    n = len(rows)
    table = pa.table({"g": pa.array([r[0] for r in rows], pa.int64()),
                      "c": pa.array([r[1] for r in rows], pa.list_(pa.int64())),
                      "t": pa.array([r[2] for r in rows], pa.int64()),
                      SOURCE: ["f"] * n, START: pa.array([0] * n, pa.int64()),
                      LINE: pa.array(range(1, n + 1), pa.int64()), RAW: pa.array([b"{}"] * n, pa.binary()),
                      REASON: pa.nulls(n, pa.string())})
    write = WriteStage(output="/x", job_id="j", num_shards=1, compression="none", max_steps=5, schema=schema)
    spool = _spool()
    stats = {"input_rows": 0, "records": 0, "rows_in_records": 0}
    records = [r for arr in write._sequence_records(table.to_batches(max_chunksize=4), spool, stats)
               for r in arr.to_pylist()]
    ctx, seq = parse_spec(schema)
    got = []
    for rec in records:
        c, s = tf.io.parse_single_sequence_example(rec, ctx, seq)
        got.append((int(c["g"].numpy()), c["c"].numpy().tolist(), s["t"].numpy().tolist()))
    want = [(1, [1, 1], [0]), (2, [2, 2], [0, 1, 2, 3, 4]), (2, [2, 2], [5, 6, 7, 8, 9]), (2, [2, 2], [10, 11]),
            (3, [3, 3], [0, 1, 2]), (4, [4, 4], [0, 1, 2, 3, 4]),
            (5, [5, 5], [5]),  # group 5's second piece; its first holds the row that disagrees
            (6, [6, 6], [0, 1, 2, 3, 4]), (6, [6, 6], [5, 6, 7, 8, 9]), (6, [6, 6], [10])]
    assert got == want
    rejected = list(spool.rows())
    assert stats == {"input_rows": n, "records": len(want), "rows_in_records": n - 1 - 5}
    assert len(rejected) == 1 + 5  # the null key alone; group 5's first piece (rows 0-4, row 4 disagrees)
    assert sum("group_by feature 'g' is null" in r["reason"] for r in rejected) == 1
    assert sum("context feature 'c' differs" in r["reason"] for r in rejected) == 5
    spool.close()


def _spool():
    from tfrecord_io.engines.spark import _RejectSpool

    return _RejectSpool()


def test_one_set_of_options_for_every_entry_point():
    import argparse

    from tfrecord_io.commands import convert
    from tfrecord_io.conversion import options as opts

    parser = argparse.ArgumentParser()
    convert.configure(parser)
    args = parser.parse_args(["--engine", "beam", "--input", "a.csv, hdfs://nn:1/d/*.csv", "--format", "json",
                              "--schema", "s.yaml", "--output", "out/", "--num-shards", "4", "--max-steps", "50",
                              "--allow-missing-columns", "--engine-arg=--runner=FnApiRunner"])
    o = opts.from_args(args)
    assert o.inputs == (os.path.abspath("a.csv"), "hdfs://nn:1/d/*.csv")
    assert o.output == os.path.abspath("out") and o.max_reject_fraction == output.DEFAULT_MAX_REJECT_FRACTION
    assert (o.num_shards, o.max_steps, o.allow_missing_columns, o.ignore_extra_columns) == (4, 50, True, False)
    assert args.engine_arg == ["--runner=FnApiRunner"]
    with pytest.raises(ValueError, match="--num-shards must be a positive integer, got 0"):
        ConversionOptions(inputs="a", input_format="csv", schema="s", output="o", num_shards=0)
    assert opts.default_num_shards(10**15) == opts.MAX_AUTO_SHARDS == 1000
    with pytest.raises(ValueError, match="max-reject-fraction"):
        ConversionOptions(inputs="a", input_format="csv", schema="s", output="o", max_reject_fraction=1.5)


def test_dataframe_source_speculative_straggler_is_exactly_once(standalone_two_hosts, tmp_path):
    """issue #13 section 1: the tfrecord data source on the two-host standalone cluster, partition 0's
    first attempt stalls after its first batch, Spark speculates it on the other host, the copy wins:
    every row once, one file per partition, nothing left under _temporary."""
    master, run = standalone_two_hosts
    exec_python = make_executor_python(tmp_path)
    zip_path = shutil.make_archive(str(tmp_path / "tfrecord_io"), "zip", root_dir=REPO, base_dir="tfrecord_io")
    out = tmp_path / "out"
    script = tmp_path / "write_df.py"
    script.write_text(
        "from pyspark.sql import SparkSession\nfrom tfrecord_io.testing.faults import FirstAttempt, data_source\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "spark.dataSource.register(data_source(FirstAttempt('stall', {0})))\n"
        "spark.conf.set('spark.sql.execution.arrow.maxRecordsPerBatch', '500')\n"
        "spark.range(6000).repartition(3).write.format('tfrecord').mode('append')"
        f".save({str(out)!r})\n"
        "spark.stop()\n")
    conf = {"spark.pyspark.python": exec_python, "spark.executorEnv.PYSPARK_PYTHON": exec_python,
            "spark.pyspark.driver.python": sys.executable, "spark.executor.memory": "512m",
            "spark.executor.cores": "1", "spark.cores.max": "2", "spark.task.maxFailures": "1",
            "spark.locality.wait": "0s", "spark.speculation": "true", "spark.speculation.interval": "100ms",
            "spark.speculation.quantile": "0.5", "spark.speculation.multiplier": "1.2",
            "spark.speculation.minTaskRuntime": "500ms", "spark.speculation.efficiency.enabled": "false",
            "spark.python.task.killTimeout": "1s"}
    proc = spark_submit([str(script)], master=master, conf=conf, extra=["--py-files", zip_path],
                        env={"SPARK_LOCAL_IP": "127.0.0.1"}, timeout=240)
    executors = _executor_logs(run)
    context = f"\n--- executors\n{executors[-4000:]}\n--- spark-submit\n{proc.stderr[-2500:]}"
    assert len(re.findall(r"stalling task attempt \S+-p00000-a0-", executors)) == 1, context
    assert "woke after" not in executors, context
    manifest = output.read_manifest(str(out))
    assert manifest["totals"] == {"input_rows": 6000, "records": 6000, "rejected": 0}, context
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "_manifest.json"] + \
        [f"part-0000{k}-of-00003.tfrecord" for k in range(3)]
    from tfrecord_io.core.decode import decode_example

    records = serialized_records(sorted(out.glob("part-*")))
    assert set(records.values()) == {1}
    assert sorted(decode_example(r)["id"][1][0] for r in records) == list(range(6000))
