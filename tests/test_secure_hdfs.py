"""Every reader and writer on the HDFS that companies run (issue #20 sections 2-4): Kerberos (ticket
cache and keytab), an HA nameservice, YARN's delegation tokens, refusals, and faults.

Clients run as a user runs them: a subprocess whose environment is PATH, HOME and what the cluster
exports (``LocalHdfs.env()``: HADOOP_CONF_DIR, KRB5_CONFIG, KRB5CCNAME), with a timeout.  The
clusters are real (``cluster_fixtures``: MiniKdc + a secure MiniDFSCluster, its HA variant with
three DataNodes, a secure YARN; and clusters of this module's own for the faults).  No mocks.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

from helpers import QUICK_JVM, REPO, VENV_BIN
from tfrecord_io.storage import credentials

ROWS = 3000
SCHEMA = """\
features:
  - {name: id, type: int64, required: true}
  - {name: fare, type: float, default: 0.0}
  - {name: city, type: string, default: ""}
label: id
"""


def user_env(cluster, *, ticket: bool = True, keytab: bool = False, **extra) -> dict[str, str]:
    """A user's shell on the cluster: its exports, and nothing of this test process but PATH and HOME (and
    the suite's JIT setting for Spark's JVMs, which changes nothing they do)."""
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"), "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYSPARK_PYTHON": sys.executable, **cluster.env(), **extra}
    if not ticket:
        env["KRB5CCNAME"] = "FILE:/nonexistent/ccache"  # not even the default cache
    if keytab:
        env[credentials.PRINCIPAL_ENV] = cluster.kerberos.principal
        env[credentials.KEYTAB_ENV] = str(cluster.kerberos.keytab)
    if "SPARK_HOME" in os.environ:  # conftest's guard: tests not marked spark start no Spark
        env["SPARK_HOME"] = os.environ["SPARK_HOME"]
    env.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM)  # the suite's quick JIT for Spark's drivers (helpers.QUICK_JVM)
    return env


def run(env, *cmd, timeout: float = 600, check: bool = True, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{shlex.join(map(str, cmd))} exited {proc.returncode}\n--- stdout\n"
                             f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def cli(env, *args, **kw) -> subprocess.CompletedProcess:
    return run(env, VENV_BIN / "tfrecord-io", *args, **kw)


def python(env, code: str, *args, **kw) -> subprocess.CompletedProcess:
    return run(env, sys.executable, "-c", textwrap.dedent(code), *args, **kw)


PUT = """
import sys
from tfrecord_io.storage import fs
base, rows, schema = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for k in range(2):
    lines = "".join(f"{i},{i / 4},c{i % 7}\\n" for i in range(k * rows // 2, (k + 1) * rows // 2))
    with fs.open(f"{base}/in/part-{k}.csv", "wb") as f:
        f.write(("id,fare,city\\n" + lines).encode())
with fs.open(f"{base}/schema.yaml", "wb") as f:
    f.write(schema.encode())
"""

# The loader, its record count and Keras inputs, and the DataFrame source, on one output.
READ = """
import json, sys
import numpy as np
import tfrecord_io
from tfrecord_io import keras_inputs, make_dataset, steps_per_epoch
out = sys.argv[1]
ids = np.sort(np.concatenate([y.numpy() for _, y in make_dataset(out, batch_size=500, seed=1)]))  # id is the label
dist = tfrecord_io.input_fn(out, batch_size=1000, shuffle=False)
prep = keras_inputs(out, features=["fare", "city"])
report = {"ids": [int(ids[0]), int(ids[-1]), len(ids), len(set(ids.tolist()))],
          "steps": steps_per_epoch(out, 500), "inputs": sorted(prep.inputs)}
if len(sys.argv) > 2:  # df.write and spark.read .format("tfrecord"), in local mode
    from pyspark.sql import SparkSession
    import tfrecord_io.spark
    from tfrecord_io.storage.credentials import java_options
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.extraJavaOptions", java_options()).getOrCreate())
    tfrecord_io.spark.register(spark)
    df = spark.read.format("tfrecord").load(out)
    df.write.format("tfrecord").mode("overwrite").save(sys.argv[2])
    report["dataframe"] = spark.read.format("tfrecord").load(sys.argv[2]).count()
    spark.stop()
print("REPORT " + json.dumps(report))
"""


COUNT = """
import json, sys
import numpy as np
from tfrecord_io import make_dataset
ids = np.sort(np.concatenate([y.numpy() for _, y in make_dataset(sys.argv[1], batch_size=5000, shuffle=False)]))
print("REPORT " + json.dumps({"ids": [int(ids[0]), int(ids[-1]), len(ids), len(set(ids.tolist()))]}))
"""


def report_of(proc) -> dict:
    return json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")][-1][7:])


def assert_read_back(report: dict, dataframe: bool = False) -> None:
    assert report["ids"] == [0, ROWS - 1, ROWS, ROWS], report
    assert report["steps"] == ROWS // 500 and report["inputs"] == ["city", "fare"]
    if dataframe:
        assert report["dataframe"] == ROWS


def no_secret_in(text: str, cluster) -> None:
    """Neither a keytab's path nor its bytes, nor the ticket cache's, in what a user sees or keeps."""
    k = cluster.kerberos
    for secret in (str(k.keytab), str(k.ticket_cache)):
        assert secret not in text, f"{secret} appears in:\n{text[-2000:]}"


# ---------------------------------------------------------------------------------------------
# 2. Every reader and writer authenticates
# ---------------------------------------------------------------------------------------------
def test_every_reader_and_writer_with_the_ticket_cache(secure_hdfs, spark_cli, tmp_path):
    """The exported variables and nothing else: infer-schema, both engines' conversions (Spark's
    driver and Python workers, Beam's workers), inspect, verify, stats, the loader with its shard
    cache, steps_per_epoch, input_fn, keras_inputs, df.write and spark.read."""
    env = user_env(secure_hdfs)
    base = secure_hdfs.uri(f"/tickets/{uuid.uuid4().hex[:8]}")
    python(env, PUT, base, str(ROWS), SCHEMA)
    assert '{name: "fare", type: float}' in cli(env, "infer-schema", "--input", f"{base}/in/", "--format", "csv").stdout
    common = ["--input", f"{base}/in/", "--format", "csv", "--schema", f"{base}/schema.yaml"]
    spark = cli(env, "convert", "--engine", "spark", "--master", "local[2]", *common, "--output", f"{base}/spark",
                "--num-shards", "3")
    beam = cli(env, "convert", "--engine", "beam", "--engine-arg=--runner=FnApiRunner", *common,
               "--output", f"{base}/beam", "--num-shards", "2")
    for proc in (spark, beam):
        assert f"wrote {ROWS} example records" in proc.stderr
    assert f"records:     {ROWS} (from the manifest)" in cli(env, "inspect", f"{base}/spark").stdout
    assert cli(env, "verify", f"{base}/beam").stdout.rstrip().endswith("OK: all checks hold")
    cli(env, "stats", f"{base}/spark", "--logdir", str(tmp_path / "tb"))
    assert_read_back(report_of(python(env, READ, f"{base}/spark", f"{base}/df")), dataframe=True)
    manifest = python(env, "import sys; from tfrecord_io.storage import fs; "
                           "print(fs.open(sys.argv[1] + '/_manifest.json').read().decode())", f"{base}/spark").stdout
    no_secret_in(manifest + spark.stdout + spark.stderr + beam.stderr, secure_hdfs)


def test_spark_submit_without_javas_krb5_option_is_one_line_saying_what_to_add(secure_hdfs, spark_cli, tmp_path):
    """KRB5_CONFIG is the realm's file for Python (hdfs-native, the KDC library); Java reads only
    java.security.krb5.conf.  A spark-submit without that option used to end in a 56-line Java trace
    ("Can't get Kerberos realm"): the job says it in one line, with the option to add (#32 item 7)."""
    env = user_env(secure_hdfs)
    base = secure_hdfs.uri(f"/realm/{uuid.uuid4().hex[:8]}")
    python(env, PUT, base, "10", SCHEMA)
    proc = run(env, VENV_BIN / "spark-submit", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
               REPO / "jobs" / "to_tfrecord.py", "--input", f"{base}/in/", "--format", "csv", "--schema",
               f"{base}/schema.yaml", "--output", f"{base}/out", check=False, cwd=tmp_path)
    said = proc.stdout + proc.stderr  # (spark-submit joins the driver's stderr to its stdout)
    assert proc.returncode == 2, said[-4000:]
    errors = [ln for ln in said.splitlines() if "error:" in ln]
    assert len(errors) == 1 and errors[0].startswith("to_tfrecord.py: error: "), said[-4000:]
    assert f"-Djava.security.krb5.conf={env['KRB5_CONFIG']}" in errors[0], errors[0]
    assert "\tat " not in said and "Traceback" not in said, said[-4000:]


def test_a_keytab_alone_through_the_ha_nameservice(secure_ha_hdfs, spark_cli, tmp_path):
    """No ticket anywhere: the keytab (--principal/--keytab on our command lines and spark-submit's;
    the variables for the library) logs every process in, Spark's local Python workers and Beam's
    workers included, and every URI names the nameservice, not a NameNode."""
    env = user_env(secure_ha_hdfs, ticket=False)
    keyed = user_env(secure_ha_hdfs, ticket=False, keytab=True)
    k = secure_ha_hdfs.kerberos
    login = ["--principal", k.principal, "--keytab", str(k.keytab)]
    base = f"hdfs://{secure_ha_hdfs.nameservice}/keytab/{uuid.uuid4().hex[:8]}"
    python(keyed, PUT, base, str(ROWS), SCHEMA)
    common = ["--input", f"{base}/in/", "--format", "csv", "--schema", f"{base}/schema.yaml"]
    spark = cli(env, "convert", "--engine", "spark", "--master", "local[2]", *common, "--output", f"{base}/spark",
                *login)
    beam = run(env, sys.executable, "-m", "tfrecord_io.beam", "--runner=FnApiRunner", *common,
               "--output", f"{base}/beam", *login, cwd=REPO)
    # spark-submit's own --principal/--keytab: the job's driver and its local Python workers log in with them.
    submitted = run({**env, "SPARK_SUBMIT_OPTS": f"{k.java_option} {QUICK_JVM}"}, VENV_BIN / "spark-submit",
                    "--master", "local[2]", *login, REPO / "jobs" / "to_tfrecord.py", *common, "--output",
                    f"{base}/submitted", cwd=tmp_path)
    for proc in (spark, beam):
        assert f"wrote {ROWS} example records" in proc.stderr
    assert f"wrote {ROWS} example records" in submitted.stdout + submitted.stderr
    assert f"records:     {ROWS} (from the manifest)" in cli(env, "inspect", f"{base}/beam", *login).stdout
    assert_read_back(report_of(python(keyed, READ, f"{base}/spark")))
    no_secret_in(spark.stdout + spark.stderr + beam.stdout + beam.stderr + submitted.stdout + submitted.stderr,
                 secure_ha_hdfs)


def test_spark_on_secure_yarn_executors_use_the_delegation_tokens(secure_hdfs, secure_yarn, tmp_path):
    """spark-submit --master yarn with the user's ticket: the driver plans and commits with it, the
    executors' Python workers read and write HDFS with the delegation tokens YARN puts in their
    containers (HADOOP_TOKEN_FILE_LOCATION); no keytab or ticket cache goes to them."""
    import pyspark

    env = user_env(secure_hdfs)
    base = secure_hdfs.uri(f"/yarn/{uuid.uuid4().hex[:8]}")
    python(env, PUT, base, str(ROWS), SCHEMA)
    spark_home = Path(pyspark.__file__).resolve().parent
    conf = {"spark.yarn.jars": f"local:{spark_home}/jars/*", "spark.executor.instances": "1",
            "spark.executor.memory": "512m", "spark.yarn.am.memory": "512m", "spark.yarn.maxAppAttempts": "1",
            "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable, "spark.yarn.appMasterEnv.PYSPARK_PYTHON": sys.executable,
            "spark.executor.extraJavaOptions": QUICK_JVM, "spark.yarn.am.extraJavaOptions": QUICK_JVM}
    yarn_env = {**env, "HADOOP_CONF_DIR": str(secure_yarn.conf_dir), "SPARK_HOME": str(spark_home),
                "SPARK_SUBMIT_OPTS": f"{secure_hdfs.kerberos.java_option} {QUICK_JVM}"}
    offset = secure_hdfs.log_path.stat().st_size
    proc = run(yarn_env, VENV_BIN / "spark-submit", "--master", "yarn", "--deploy-mode", "client",
               *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")), REPO / "jobs" / "to_tfrecord.py",
               "--input", f"{base}/in/", "--format", "csv", "--schema", f"{base}/schema.yaml",
               "--output", f"{base}/out", "--num-shards", "2", cwd=tmp_path)
    said = proc.stdout + proc.stderr
    assert f"wrote {ROWS} example records" in said, said[-3000:]
    log = secure_hdfs.log_path.read_text(errors="replace")[offset:]
    assert f"Auth successful for {secure_hdfs.kerberos.principal} (auth:KERBEROS)" in log  # the driver
    assert f"Auth successful for {secure_hdfs.kerberos.principal} (auth:TOKEN)" in log  # the containers
    # The containers (the write stage's Python workers wrote every shard there) had the tokens YARN
    # wrote for them, and no Kerberos credentials: neither a ticket cache nor our keytab variables.
    app = proc.stderr.split("Submitted application ", 1)[1].split()[0] if "Submitted application " in proc.stderr \
        else sorted(p.name for p in secure_yarn.container_logs.glob("application_*"))[-1]
    launches = [p.read_text() for p in secure_yarn.work_dir.rglob("launch_container.sh") if app in str(p)]
    assert launches, f"no launch_container.sh of {app} under {secure_yarn.work_dir}"
    for script in launches:
        assert "HADOOP_TOKEN_FILE_LOCATION" in script
        assert "KRB5CCNAME" not in script and credentials.KEYTAB_ENV not in script
    container_logs = secure_yarn.app_logs(app)
    no_secret_in(said + container_logs, secure_hdfs)
    assert_read_back(report_of(python(env, READ, f"{base}/out")))


# ---------------------------------------------------------------------------------------------
# 3. Nobody else gets in
# ---------------------------------------------------------------------------------------------
def test_nobody_else_gets_in(secure_hdfs, tmp_path):
    """No ticket, an expired one, a principal the NameNode does not admit, a keytab without the
    principal's key, no Kerberos configuration, a file the user may not read: each refused within
    the HDFS timeout, with exit 2 and one line that says what is missing, and no credential in it."""
    k = secure_hdfs.kerberos
    owner = user_env(secure_hdfs)
    base = secure_hdfs.uri(f"/refusals/{uuid.uuid4().hex[:8]}")
    python(owner, PUT, base, "10", SCHEMA)
    python(owner, "import sys, hdfs_native; hdfs_native.Client(sys.argv[1]).set_permission(sys.argv[2], 0o700)",
           secure_hdfs.namenode_uri, "/" + base.split("://", 1)[1].partition("/")[2])  # the superuser's alone
    guest = user_env(secure_hdfs, ticket=False)
    cases = {
        "no ticket": (user_env(secure_hdfs, ticket=False), [], "no Kerberos ticket"),
        "an expired ticket": (user_env(secure_hdfs, KRB5CCNAME=f"FILE:{k.expired_ticket_cache}"), [], "has expired"),
        "a principal the NameNode does not admit": (
            user_env(secure_hdfs, ticket=False), ["--principal", k.rejected_principal, "--keytab", str(k.rejected_keytab)],
            "does not let this client in"),
        "a keytab without the principal's key": (
            user_env(secure_hdfs, ticket=False), ["--principal", k.principal, "--keytab", str(k.guest_keytab)],
            "no Kerberos key for"),
        "no Kerberos configuration": ({**user_env(secure_hdfs), "HADOOP_CONF_DIR": str(tmp_path)}, [],
                                      "simple authentication as"),
        "a file it may not read": (guest, ["--principal", k.guest_principal, "--keytab", str(k.guest_keytab)],
                                   "Permission denied"),
    }
    for what, (env, login, says) in cases.items():
        began = time.monotonic()
        proc = cli(env, "inspect", f"{base}/in/part-0.csv", *login, check=False, timeout=120)
        took = time.monotonic() - began
        errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
        assert proc.returncode == 2, f"{what}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        assert len(errors) == 1 and says in errors[0], f"{what}: {proc.stderr[-3000:]}"
        # in the user's terms: no "[Errno 13]"; a keytab given with --keytab named by its path, not by
        # the variable --keytab sets internally
        assert "[Errno" not in errors[0], errors[0]
        if "--keytab" in login:
            assert credentials.KEYTAB_ENV not in errors[0], errors[0]
        if "no Kerberos key" in says:
            assert str(k.guest_keytab) in errors[0] and "--principal" in errors[0], errors[0]
        assert "Traceback" not in proc.stderr and "GssMajorCodes" not in proc.stderr, f"{what}: {proc.stderr}"
        assert took < 30, f"{what}: refused after {took:.0f}s"
        no_secret_in(proc.stdout + proc.stderr, secure_hdfs)
    # The loader from Python: the same PermissionError, not a TensorFlow stack.
    proc = python(user_env(secure_hdfs, ticket=False), """
        import sys
        from tfrecord_io import make_dataset
        try:
            make_dataset(sys.argv[1], batch_size=10)
        except PermissionError as e:
            print("REFUSED", e)
        """, f"{base}/in", check=False, timeout=120)
    assert "REFUSED" in proc.stdout and "no Kerberos ticket" in proc.stdout, proc.stdout + proc.stderr


def test_rejects_of_a_private_input_are_refused_to_another_principal(secure_hdfs, tmp_path):
    """#31 item 4 where it is about users: the owner converts an input only they may read (0600 in
    a 0700 directory) on the kerberized HDFS; another principal is refused its rejects (they quote
    the rows) and may read the records, which follow the umask."""
    k = secure_hdfs.kerberos
    owner = user_env(secure_hdfs)
    base = secure_hdfs.uri(f"/private/{uuid.uuid4().hex[:8]}")
    python(owner, PUT, base, "20", SCHEMA)
    python(owner, """
        import sys
        from tfrecord_io.storage import fs
        with fs.open(sys.argv[1] + "/in/part-0.csv", "wb") as f:
            f.write(b"id,fare,city\\n1,2.5,x\\nnot-a-number,0,card 4111111111111111\\n")
        fs.chmod(sys.argv[1] + "/in/part-0.csv", 0o600)
        fs.chmod(sys.argv[1] + "/in/part-1.csv", 0o600)
        fs.chmod(sys.argv[1] + "/in", 0o700)
        """, base)
    cli(owner, "convert", "--engine", "beam", "--engine-arg=--runner=FnApiRunner", "--format", "csv", "--input",
        f"{base}/in", "--schema", f"{base}/schema.yaml", "--output", f"{base}/out", "--max-reject-fraction", "0.5")
    guest = {**user_env(secure_hdfs, ticket=False), credentials.PRINCIPAL_ENV: k.guest_principal,
             credentials.KEYTAB_ENV: str(k.guest_keytab)}
    proc = python(guest, """
        import json, sys
        from tfrecord_io.storage import fs, output
        out = sys.argv[1]
        manifest = output.read_manifest(out)
        print("modes", oct(fs.permission(out + "/_rejects")), oct(fs.permission(out + "/" + manifest["files"][0]["path"])))
        with fs.open(out + "/" + manifest["files"][0]["path"]) as f:
            print("records", len(f.read()) == manifest["files"][0]["bytes"])
        try:
            with fs.open(out + "/" + manifest["rejects"][0]["path"]) as f:
                print("READ", f.read())
        except PermissionError as e:
            print("REFUSED", e)
        """, f"{base}/out")
    assert "modes 0o700 0o644" in proc.stdout and "records True" in proc.stdout, proc.stdout + proc.stderr
    assert "REFUSED" in proc.stdout and "4111" not in proc.stdout, proc.stdout
    mine = python(owner, """
        import sys
        from tfrecord_io.storage import fs, output
        reject = sys.argv[1] + "/" + output.read_manifest(sys.argv[1])["rejects"][0]["path"]
        print(oct(fs.permission(reject)), "4111" in fs.open(reject).read().decode())
        """, f"{base}/out")
    assert mine.stdout.split() == ["0o600", "True"], mine.stdout  # the owner reads what the guest may not


# ---------------------------------------------------------------------------------------------
# 4. Faults lose nothing
# ---------------------------------------------------------------------------------------------
def _faulty_env(faulty_hdfs, monkeypatch) -> str:
    """This process as a client of the HA cluster: its nameservice URI (the conf names both NameNodes)."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(faulty_hdfs.conf_dir))
    return f"hdfs://{faulty_hdfs.nameservice}"


def test_a_loader_pass_survives_a_stopped_datanode_and_a_namenode_failover(faulty_hdfs, monkeypatch, tmp_path):
    """Replication 3 over 3 DataNodes: one stops in the middle of a make_dataset pass (its blocks are
    read from another replica), then the active NameNode goes away (the client fails over to the
    standby, now active): the pass ends with every record exactly once."""
    import numpy as np
    import pyarrow as pa

    from tfrecord_io import make_dataset
    from tfrecord_io.core.codec import encode_examples
    from tfrecord_io.core.schema import Schema
    from tfrecord_io.storage import output

    root = _faulty_env(faulty_hdfs, monkeypatch)
    out = f"{root}/faults/loader-{uuid.uuid4().hex[:8]}"
    schema = Schema.from_dict({"features": [{"name": "id", "type": "int64"}, {"name": "pad", "type": "bytes"}]})
    per_shard = 4000

    def shard(k):  # ~2.2 MB: several 1 MiB blocks, each on 3 DataNodes
        ids = np.arange(k * per_shard, (k + 1) * per_shard)
        return [encode_examples(pa.RecordBatch.from_pydict(
            {"id": ids, "pad": [bytes(500)] * per_shard}, schema=schema.arrow_schema()), schema)]

    output.write_output(out, [shard(k) for k in range(6)], schema=schema, engine="test")
    seen, faults = [], {}
    for i, batch in enumerate(make_dataset(out, batch_size=1000, shuffle=False, cycle_length=1)):
        seen.append(batch["id"].numpy())
        if i == 3:
            faults["datanode"] = faulty_hdfs.stop_datanode(0)
        if i == 9:
            began = time.monotonic()
            faults["failover"] = faulty_hdfs.failover()
            faults["first batch after"] = None
            failover_began = began
        elif "failover" in faults and faults["first batch after"] is None:
            faults["first batch after"] = time.monotonic() - failover_began
    ids = np.concatenate(seen)
    assert len(ids) == 6 * per_shard and np.array_equal(np.sort(ids), np.arange(6 * per_shard)), \
        f"{len(ids)} records, {len(set(ids.tolist()))} distinct"
    assert not faults["datanode"].alive
    print(f"failover: {faults['failover'].seconds:.2f}s in the JVM; the next batch {faults['first batch after']:.2f}s "
          f"after it began")


def test_a_spark_job_commits_exactly_once_through_a_failover_and_a_stopped_datanode(faulty_hdfs, spark_cli,
                                                                                    monkeypatch, tmp_path):
    """The Spark job (local[2,4]: failed tasks are retried) writes to the HA cluster; while its
    write tasks run, the active NameNode goes away and a DataNode stops: the job commits once, with
    every row once."""
    from tfrecord_io.storage import fs

    root = _faulty_env(faulty_hdfs, monkeypatch)
    base = f"{root}/faults/spark-{uuid.uuid4().hex[:8]}"
    rows = 40_000
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "closed").touch()
    env = {**user_env(faulty_hdfs)}
    python(env, PUT, base, str(rows), SCHEMA)
    env.update(PYTHONPATH=str(Path(__file__).parent / "write_gate"), TFRECORD_IO_TEST_WRITE_GATE=str(gate))
    job = subprocess.Popen(
        [str(VENV_BIN / "tfrecord-io"), "convert", "--engine", "spark", "--master", "local[2,4]",
         "--input", f"{base}/in/", "--format", "csv", "--schema", f"{base}/schema.yaml",
         "--output", f"{base}/out", "--num-shards", "4", "--block-size", "65536"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not list(gate.glob("reached-*")):  # a write task holds an open shard stream (tests/write_gate)
            assert job.poll() is None and time.monotonic() < deadline, "the job ended before its write stage"
            time.sleep(0.2)
        faulty_hdfs.failover()
        faulty_hdfs.stop_datanode(1)
        assert job.poll() is None and not fs.exists(f"{base}/out/_SUCCESS"), "the job was done before the faults"
        (gate / "closed").unlink()
        stdout, stderr = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr[-6000:]
    assert f"wrote {rows} example records" in stderr
    ids = report_of(python(env, COUNT, f"{base}/out"))["ids"]
    assert ids == [0, rows - 1, rows, rows], ids


def test_writes_retry_a_namenode_that_has_not_seen_the_last_block_yet(lagging_hdfs, caplog):
    """A NameNode whose DataNode reports new blocks late answers addBlock with NotReplicatedYetException,
    as a loaded one does; twelve writers at once, each file many blocks: every file is written,
    byte for byte, after the retries the Java client would make (logged)."""
    import logging

    from tfrecord_io.storage import fs

    caplog.set_level(logging.WARNING, logger="tfrecord_io.storage.fs")
    base = lagging_hdfs.uri(f"/lagging/{uuid.uuid4().hex[:8]}")
    payloads = {f"{base}/f{i}": os.urandom((3 << 20) + i) for i in range(12)}
    errors = []

    def write(uri, data):
        try:
            with fs.open(uri, "wb") as f:
                f.write(data)
        except Exception as e:  # noqa: BLE001 - collected, asserted below
            errors.append(f"{uri}: {e}")

    threads = [threading.Thread(target=write, args=item) for item in payloads.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    for uri, data in payloads.items():
        with fs.open(uri, "rb") as f:
            assert f.read() == data, uri
    retries = [r.getMessage() for r in caplog.records if "has not yet seen the last block replicated" in r.getMessage()]
    assert retries, "no NotReplicatedYetException happened: the test's NameNode did not lag"


def test_viewfs_mount_tables(secure_hdfs, tmp_path):
    """``viewfs://`` URIs through a client-side mount table over the kerberized namespace: a
    conversion, the loader and inspect, as with hdfs://."""
    import xml.etree.ElementTree as ET

    target = f"/viewfs-target/{uuid.uuid4().hex[:8]}"
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "hdfs-site.xml").write_bytes((secure_hdfs.conf_dir / "hdfs-site.xml").read_bytes())
    core = ET.parse(secure_hdfs.conf_dir / "core-site.xml")
    for name, value in (("fs.viewfs.mounttable.tfio.link./warehouse", secure_hdfs.uri(target)),
                        ("fs.viewfs.mounttable.tfio.linkFallback", secure_hdfs.uri("/"))):
        prop = ET.SubElement(core.getroot(), "property")
        ET.SubElement(prop, "name").text, ET.SubElement(prop, "value").text = name, value
    core.write(conf / "core-site.xml")
    env = user_env(secure_hdfs, HADOOP_CONF_DIR=str(conf))
    base = "viewfs://tfio/warehouse"
    python(env, PUT, base, str(ROWS), SCHEMA)
    proc = cli(env, "convert", "--engine", "beam", "--engine-arg=--runner=FnApiRunner", "--input", f"{base}/in/",
               "--format", "csv", "--schema", f"{base}/schema.yaml", "--output", f"{base}/out")
    assert f"wrote {ROWS} example records" in proc.stderr
    assert report_of(python(env, COUNT, f"{base}/out"))["ids"] == [0, ROWS - 1, ROWS, ROWS]
    assert f"records:     {ROWS} (from the manifest)" in cli(env, "inspect", f"{base}/out").stdout
    # The same files through the namespace itself.
    listed = python(user_env(secure_hdfs), "import sys; from tfrecord_io.storage import fs; print(fs.ls(sys.argv[1]))",
                    secure_hdfs.uri(f"{target}/out")).stdout
    assert "_SUCCESS" in listed and "part-00000-of-00001.tfrecord" in listed
