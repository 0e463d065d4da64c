"""Benchmark: what shipping the slim executor environment to YARN costs (issue #14 section 3).

    .venv/bin/python benchmarks/bench_yarn.py [--rows 20000] [--repeats 2] [--workdir DIR]

Starts a local HDFS + YARN (``tfrecord_io.clusters.hdfs_local.start(yarn=True)``: Hadoop 3.5.0
MiniYARNCluster, one NodeManager of 6 GiB / 4 vcores) and reports how long that took; builds the
slim archive with ``tfrecord-io pack-env`` (its size, unpacked size and build time); then runs
the same job (``jobs/to_tfrecord.py``, ``--rows`` CSV rows on HDFS -> gzip TFRecords on HDFS,
2 shards) with ``spark-submit --master yarn --deploy-mode cluster`` (2 executors of 1 GiB,
``spark.yarn.jars=local:$SPARK_HOME/jars/*``), ``--repeats`` times each, interleaved:

* **no archive**: driver and executors run this venv's Python (TensorFlow and all, already on the
  "node"), tfrecord_io from ``--py-files``: what the per-application cost is measured against;
* **--archives local**: ``--archives tfrecord-io-env.tar.gz#env`` from local disk: spark-submit
  uploads it to the application's staging dir and every NodeManager downloads and unpacks it,
  for every application;
* **--archives hdfs://**: the archive uploaded to HDFS once, world-readable: YARN localizes it as
  a PUBLIC resource, once per NodeManager, and later applications reuse the unpacked copy.

Per variant it prints the median wall time of spark-submit (submission to the application's
end, as a user waits) and the overhead against *no archive*, and -- the part of that overhead
which does not depend on how busy the machine is otherwise -- how long the NodeManager spent
localizing the application master's container (downloading and unpacking its resources, from
the NodeManager's own log: NEW to LOCALIZING to SCHEDULED) and the most any container of the
application spent.  Each run's output is checked to hold ``--rows`` records.  The machine's load
average is printed too: on a shared 2-core machine the wall times move with it.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tfrecord_io.clusters import hdfs_local  # noqa: E402
from tfrecord_io.commands import pack_env  # noqa: E402
from tfrecord_io.spark import package_zip  # noqa: E402
from tfrecord_io.storage import fs, output  # noqa: E402

SCHEMA = """\
record_type: example
features:
  - {name: id, type: int64, required: true}
  - {name: fare, type: float, default: 0.0}
  - {name: miles, type: float, default: 0.0}
  - {name: kind, type: string, default: ""}
  - {name: tags, type: string, shape: [-1], separator: "|"}
csv: {header: true, delimiter: ",", null_values: [""]}
"""


def write_csv(path: Path, rows: int) -> None:
    rnd = random.Random(7)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "fare", "miles", "kind", "tags"])
        for i in range(rows):
            w.writerow([i, f"{rnd.uniform(2, 90):.2f}", f"{rnd.uniform(0, 30):.3f}",
                        rnd.choice(["cash", "card", "app"]), "|".join(rnd.sample("abcdef", i % 4))])


def submit(conf_dir: Path, args: list[str], *, python: str, extra: list[str], cwd: Path) -> tuple[float, str]:
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    conf = {
        "spark.yarn.jars": f"local:{home}/jars/*",
        "spark.executor.instances": "2", "spark.executor.cores": "1", "spark.executor.memory": "1g",
        "spark.driver.memory": "1g", "spark.yarn.maxAppAttempts": "1", "spark.ui.enabled": "false",
        "spark.pyspark.python": python, "spark.yarn.appMasterEnv.PYSPARK_PYTHON": python,
        "spark.yarn.appMasterEnv.SPARK_LOCAL_IP": "127.0.0.1",
    }
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "yarn", "--deploy-mode", "cluster"]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd += [*extra, *args]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update(HADOOP_CONF_DIR=str(conf_dir), SPARK_HOME=str(home))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=cwd)
    seconds = time.monotonic() - t0
    if proc.returncode != 0 or "final status: SUCCEEDED" not in proc.stderr:
        raise RuntimeError(f"spark-submit failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-5000:]}")
    app = re.search(r"Submitted application (application_\d+_\d+)", proc.stderr).group(1)
    return seconds, app


_STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})"


def localization(yarn_log: Path, app: str) -> tuple[float, float]:
    """(seconds the application master's container spent localizing, the most any container of
    ``app`` spent), from the NodeManager's container state transitions in ``yarn_log``."""
    from datetime import datetime

    prefix = app.replace("application_", "container_") + "_"
    began: dict[str, datetime] = {}
    took: dict[str, float] = {}
    pattern = re.compile(_STAMP + r".* Container (" + re.escape(prefix) + r"\d+_\d+) transitioned from "
                         r"(NEW to LOCALIZING|LOCALIZING to \w+)")
    for line in yarn_log.read_text(errors="replace").splitlines():
        m = pattern.match(line)
        if not m:
            continue
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
        if m.group(3) == "NEW to LOCALIZING":
            began[m.group(2)] = at
        elif m.group(2) in began:
            took[m.group(2)] = (at - began[m.group(2)]).total_seconds()
    am = [v for k, v in took.items() if k.endswith("_01_000001")]
    if not am:
        raise RuntimeError(f"no localization of {app}'s application master in {yarn_log}")
    return am[0], max(took.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench-yarn-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; work dir {work}")

    t0 = time.monotonic()
    hdfs = hdfs_local.start(work / "cluster", detach=False, yarn=True)
    yarn = hdfs_local.yarn_status(work / "cluster" / "yarn")
    started = time.monotonic() - t0
    try:
        print(f"local HDFS + YARN started in {started:.1f}s")
        t0 = time.monotonic()
        yarn_alone = hdfs_local.start_yarn(hdfs, work / "yarn-timing", detach=False)
        yarn_start = time.monotonic() - t0
        yarn_alone.stop()
        print(f"a second YARN alone (next to the running HDFS) started in {yarn_start:.1f}s")

        archive = work / "tfrecord-io-env.tar.gz"
        info = pack_env.build(archive, overwrite=True, log=lambda m: None)
        print(f"slim archive: {info['bytes'] / 2**20:.1f} MiB ({info['unpacked_bytes'] / 2**20:.0f} MiB unpacked), "
              f"built in {info['seconds']}s: {' '.join(info['requirements'])} + tfrecord_io")
        venv = Path(sys.prefix)
        venv_bytes = sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
        print(f"for comparison, this venv (everything, TensorFlow included): {venv_bytes / 2**30:.2f} GiB unpacked")

        base = hdfs.uri("/bench-yarn")
        local_csv = work / "in.csv"
        write_csv(local_csv, a.rows)
        with fs.open(f"{base}/in/trips.csv", "wb") as f:
            f.write(local_csv.read_bytes())
        with fs.open(f"{base}/schema.yaml", "wb") as f:
            f.write(SCHEMA.encode())
        # The archive on HDFS, readable by all (and its directories), so YARN caches it PUBLIC.
        with fs.open(f"{base}/public/tfrecord-io-env.tar.gz", "wb") as f:
            f.write(archive.read_bytes())
        _chmod_webhdfs(hdfs, ["/", "/bench-yarn", "/bench-yarn/public"], "/bench-yarn/public/tfrecord-io-env.tar.gz")

        py_files = package_zip(str(work))
        variants = {
            "no archive": (sys.executable, ["--py-files", py_files]),
            "--archives local": ("./env/bin/python", ["--archives", f"{archive}#env"]),
            "--archives hdfs://": ("./env/bin/python", ["--archives", f"{base}/public/tfrecord-io-env.tar.gz#env"]),
        }
        times: dict[str, list[float]] = {v: [] for v in variants}
        local_s: dict[str, list[float]] = {v: [] for v in variants}
        run = 0
        for rep in range(a.repeats):
            for name, (python, extra) in variants.items():
                out = f"{base}/out-{run}"
                run += 1
                args = [str(REPO / "jobs" / "to_tfrecord.py"), "--input", f"{base}/in/trips.csv", "--format", "csv",
                        "--schema", f"{base}/schema.yaml", "--output", out, "--compression", "gzip",
                        "--num-shards", "2"]
                seconds, app = submit(yarn.conf_dir, args, python=python, extra=extra, cwd=work)
                records = output.read_manifest(out)["totals"]["records"]
                if records != a.rows:
                    raise RuntimeError(f"{name}: {records} records, expected {a.rows} ({app})")
                times[name].append(seconds)
                am_s, most_s = localization(yarn.log_path, app)
                local_s[name].append(am_s)
                print(f"  repeat {rep + 1}: {name:20s} {seconds:6.1f}s, localizing the AM {am_s:5.1f}s "
                      f"(any container at most {most_s:.1f}s)  ({app}, load {os.getloadavg()[0]:.1f})")
        base_median = statistics.median(times["no archive"])
        base_local = statistics.median(local_s["no archive"])
        print(f"\n| spark-submit --deploy-mode cluster, {a.rows:,} rows, {a.repeats} runs each "
              f"| median wall s | vs no archive | AM localization s (each run) | vs no archive |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, ts in times.items():
            m = statistics.median(ts)
            lm = statistics.median(local_s[name])
            each = ", ".join(f"{v:.1f}" for v in local_s[name])
            print(f"| {name} | {m:.1f} | {m - base_median:+.1f} s | {each} | {lm - base_local:+.1f} s |")
        print(f"\nload average at end: {os.getloadavg()[0]:.1f}")
    finally:
        hdfs_local.stop(work / "cluster")
    return 0


def _chmod_webhdfs(hdfs, dirs: list[str], file: str) -> None:
    """Permissions through WebHDFS (SETPERMISSION), for a storage layer without chmod."""
    import urllib.request

    for path, perm in [(d, "755") for d in dirs] + [(file, "644")]:
        url = (f"{hdfs.webhdfs_url}/webhdfs/v1{path}?op=SETPERMISSION&permission={perm}"
               f"&user.name={hdfs.user}")
        req = urllib.request.Request(url, method="PUT")
        with urllib.request.urlopen(req, timeout=30) as r:
            if r.status != 200:
                raise RuntimeError(f"SETPERMISSION {path} {perm}: HTTP {r.status}")


if __name__ == "__main__":
    sys.exit(main())
