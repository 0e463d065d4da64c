"""Benchmark: the Spark job (tfrecord_io.engines.spark) against a naive PySpark job, CSV -> TFRecords.

    .venv/bin/python benchmarks/bench_spark.py [--rows 1000000] [--skip-hdfs] [--workdir DIR] [--keep]

Data: ``--rows`` rows x 17 columns (10 float, 5 int64, 1 string, 1 int64 label) as one CSV file
(about 150 bytes a row), on local disk and on a local HDFS started for the run
(``tfrecord_io.clusters.hdfs_local.start``).  Each job runs in its own ``spark-submit --master local[2,4]``,
one after the other, reading the same CSV with Spark's CSV reader under the same schema:

* **tfrecord-io**: ``tfrecord_io.engines.spark.run_conversion`` (what ``jobs/to_tfrecord.py`` runs:
  vectorized Arrow encoding in ``mapInArrow``, shards written from the executors, exactly-once
  commit, rejects, manifest; default shard count).
* **naive**: ``df.rdd.mapPartitionsWithIndex``: a ``tf.train.Example`` built per row and written
  with one ``tf.io.TFRecordWriter`` per partition.  TensorFlow 2.21 has no ``hdfs://``
  filesystem (it moved to tensorflow-io), so on HDFS the naive job writes each partition to a
  local temporary file and uploads it with ``tfrecord_io.storage.fs`` -- the usual workaround.

Each spark-submit runs its job twice, to separate outputs, and reports per storage, for both
jobs: the *first job* (a fresh JVM: class loading, JIT, Python workers starting), the *warm*
job (the second run in the same Spark), and *with start-up* (spark-submit's JVM and
SparkSession start + the first job: what a user waits for), each as naive/tfrecord-io
ratios.  Job times are measured in the driver from before the first read to the last file
written (tfrecord-io's include its commit).  Every run is checked to hold ``--rows`` records.
Prints a markdown table.

The same file is the two jobs when run as ``spark-submit bench_spark.py ours-job|naive-job ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent

SCHEMA = """\
record_type: example
features:
{features}
label: label
csv: {{header: true}}
"""
FLOATS = [f"f{i}" for i in range(10)]
INTS = [f"i{i}" for i in range(5)]


def schema_text() -> str:
    feats = [f"  - {{name: {n}, type: float}}" for n in FLOATS] + [f"  - {{name: {n}, type: int64}}" for n in INTS]
    feats += ["  - {name: s, type: string}", "  - {name: label, type: int64}"]
    return SCHEMA.format(features="\n".join(feats))


def make_csv(path: Path, rows: int, seed: int = 0) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(seed)
    with pacsv.CSVWriter(str(path), pa.schema([(n, pa.float32()) for n in FLOATS] + [(n, pa.int64()) for n in INTS]
                                              + [("s", pa.string()), ("label", pa.int64())]),
                         write_options=pacsv.WriteOptions(quoting_style="none")) as w:
        for start in range(0, rows, 250_000):
            n = min(250_000, rows - start)
            cols = [rng.random(n, dtype=np.float32) * 100 for _ in FLOATS]
            cols += [rng.integers(-1_000_000, 1_000_000, n) for _ in INTS]
            cols += [pa.array(np.char.add("category_", rng.integers(0, 5000, n).astype(str))),
                     rng.integers(0, 2, n)]
            w.write_batch(pa.record_batch(cols, names=FLOATS + INTS + ["s", "label"]))


# ---------------------------------------------------------------------------------------------
# The naive job (runs under spark-submit)
# ---------------------------------------------------------------------------------------------
def job_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--schema")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--shards", default="even", help="ours-job: the job's --shards (even or input)")
    return p.parse_args(argv)


def ours_job(argv: list[str]) -> int:
    """run_conversion ``--repeat`` times in one SparkSession (the first run is the cold one)."""
    args = job_args(argv)
    from pyspark.sql import SparkSession

    from tfrecord_io.engines.spark import ConversionOptions, run_conversion

    spark = SparkSession.builder.appName("tfrecord-io bench").getOrCreate()
    runs, records = [], []
    for i in range(args.repeat):
        started = time.monotonic()
        manifest = run_conversion(spark, ConversionOptions(inputs=args.input, input_format="csv", schema=args.schema,
                                                           output=f"{args.output}/run-{i}", shards=args.shards))
        runs.append(round(time.monotonic() - started, 3))
        records.append(manifest["totals"]["records"])
    print(json.dumps({"event": "done", "runs": runs, "records": records,
                      "files": len(manifest["files"])}))
    spark.stop()
    return 0


def naive_job(argv: list[str]) -> int:
    args = job_args(argv)
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

    spark = SparkSession.builder.appName("naive tfrecords").getOrCreate()
    schema = T.StructType([T.StructField(n, T.FloatType()) for n in FLOATS]
                          + [T.StructField(n, T.LongType()) for n in INTS]
                          + [T.StructField("s", T.StringType()), T.StructField("label", T.LongType())])

    def writer_for(out):
        return lambda index, rows: write_partition(out, index, rows)

    def write_partition(out, index, rows):
        import tensorflow as tf

        from tfrecord_io.storage import fs

        local = out if "://" not in out else tempfile.mkdtemp(prefix="naive-")
        path = os.path.join(local, f"part-{index:05d}.tfrecord")
        n = 0
        with tf.io.TFRecordWriter(path) as w:
            for row in rows:
                feature = {}
                for k, v in row.asDict().items():
                    if isinstance(v, float):
                        feature[k] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                    elif isinstance(v, int):
                        feature[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                    elif v is not None:
                        feature[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
                w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
                n += 1
        if local != out:  # hdfs://: upload the local file
            with open(path, "rb") as src, fs.open(f"{out}/part-{index:05d}.tfrecord", "wb") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
            shutil.rmtree(local)
        yield n

    runs, records = [], []
    base = args.output
    for i in range(args.repeat):
        out = f"{base}/run-{i}"
        if "://" not in out:
            os.makedirs(out, exist_ok=True)
        started = time.monotonic()
        df = spark.read.schema(schema).option("header", "true").csv(args.input)
        records.append(sum(df.rdd.mapPartitionsWithIndex(writer_for(out)).collect()))
        runs.append(round(time.monotonic() - started, 3))
    print(json.dumps({"event": "done", "runs": runs, "records": records}))
    spark.stop()
    return 0


def upload(argv: list[str]) -> int:
    """Copy the CSV to HDFS with Hadoop's own Java client (it retries a NameNode that is slow to
    confirm blocks; the test cluster's 1 MiB blocks make a 150 MB file 150 of them)."""
    args = job_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("upload").getOrCreate()
    jvm = spark._jvm
    dst = jvm.org.apache.hadoop.fs.Path(args.output)
    fs = dst.getFileSystem(spark._jsc.hadoopConfiguration())
    fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path(args.input), dst)
    print(json.dumps({"event": "done", "bytes": fs.getFileStatus(dst).getLen()}))
    spark.stop()
    return 0


# ---------------------------------------------------------------------------------------------
# The benchmark driver
# ---------------------------------------------------------------------------------------------
def submit(args: list[str], env: dict | None = None, master: str = "local[2]") -> tuple[dict, float]:
    """Run spark-submit; return (its JSON summary line, wall seconds)."""
    cmd = [str(VENV_BIN / "spark-submit"), "--master", master, "--driver-memory", "2g",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false", *args]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
                "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=REPO)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        log = "\n".join(ln for ln in proc.stderr.splitlines() if " INFO " not in ln)
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{log[-6000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"event"')]
    return json.loads(lines[-1]), wall


def measure(label: str, mode: str, csv_uri: str, schema: str, out: str, rows: int, env: dict | None) -> dict:
    """One spark-submit running the job twice: cold first job, warm second job, start-up."""
    # local[2,4]: 2 cores, and a task may be retried (as on a cluster) -- a write to the test
    # HDFS can fail transiently (NotReplicatedYetException) when the machine is busy.
    summary, wall = submit([__file__, mode, "--input", csv_uri, "--schema", schema, "--output", out], env,
                           master="local[2,4]")
    if summary["records"] != [rows, rows]:
        raise SystemExit(f"{label}: {mode} wrote {summary['records']} records, expected {rows} per run")
    first, warm = summary["runs"]
    startup = wall - first - warm  # JVM + SparkSession start and stop
    return {"first": first, "warm": warm, "startup": startup, "with_startup": startup + first}


def run_pair(label: str, csv_uri: str, schema: str, out_base: str, rows: int, env: dict | None = None) -> dict:
    ours = measure(label, "ours-job", csv_uri, schema, f"{out_base}/tfrecord-io", rows, env)
    naive = measure(label, "naive-job", csv_uri, schema, f"{out_base}/naive", rows, env)
    print(f"  {label}: tfrecord-io {ours}; naive {naive}", file=sys.stderr, flush=True)
    return {"storage": label, "rows": rows, "ours": ours, "naive": naive}


def table(results: list[dict]) -> str:
    out = ["| storage | rows | job | tfrecord-io (s) | naive (s) | **speed-up** |",
           "| --- | ---: | --- | ---: | ---: | ---: |"]
    kinds = (("first", "first job in a fresh Spark (cold JVM)"), ("warm", "second job, same Spark (warm)"),
             ("with_startup", "with Spark start-up (spark-submit to first job done)"))
    for r in results:
        for key, what in kinds:
            o, n = r["ours"][key], r["naive"][key]
            out.append(f"| {r['storage']} | {r['rows']:,} | {what} | {o:.1f} | {n:.1f} | **{n / o:.1f}x** |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["naive-job"]:
        return naive_job(argv[1:])
    if argv[:1] == ["ours-job"]:
        return ours_job(argv[1:])
    if argv[:1] == ["upload"]:
        return upload(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of CSV (default 1,000,000)")
    p.add_argument("--skip-hdfs", action="store_true", help="local disk only")
    p.add_argument("--workdir", default=None, help="where data and outputs go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args(argv)

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-spark-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    results = []
    cluster = None
    try:
        schema = work / "schema.yaml"
        schema.write_text(schema_text())
        data = work / "data"
        data.mkdir(exist_ok=True)
        csv_path = data / "input.csv"
        t0 = time.monotonic()
        make_csv(csv_path, args.rows)
        print(f"generated {args.rows:,} rows, {csv_path.stat().st_size / 1e6:.0f} MB of CSV in "
              f"{time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)
        results.append(run_pair("local disk", str(csv_path), str(schema), str(work / "out-local"), args.rows))
        if not args.skip_hdfs:
            from tfrecord_io.clusters import hdfs_local

            cluster = hdfs_local.start(work / "hdfs", detach=False)
            remote = cluster.uri("/bench/input.csv")
            submit([__file__, "upload", "--input", str(csv_path), "--output", remote])
            # Closing a 70 MB shard on this single, loopback DataNode can take longer than
            # tfrecord_io.storage.fs's default 15 s per-call bound when the machine is busy.
            env = {"HADOOP_CONF_DIR": str(cluster.conf_dir),
                   "TFRECORD_IO_HDFS_TIMEOUT": os.environ.get("TFRECORD_IO_HDFS_TIMEOUT", "300")}
            results.append(run_pair("HDFS", remote, str(schema), cluster.uri("/bench/out"), args.rows, env=env))
    finally:
        if cluster is not None:
            cluster.stop()
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
