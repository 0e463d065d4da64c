"""Benchmark: tfrecord-io against LinkedIn's spark-tfrecord 0.7.0, in one Spark, interleaved rounds.

    .venv/bin/python benchmarks/bench_dataframe.py [--rows 1000000] [--rounds 5] [--peer-jar PATH]
        [--reader-only | --csv-only]

Data: ``bench_spark.make_csv`` (``--rows`` rows x 17 columns: 10 float, 5 int64, 1 string, 1 int64
label), and the same rows as Parquet.  One ``spark-submit --master local[2] --jars spark-tfrecord``
runs every operation once per round, in the same order each round, after one untimed warm-up
round; the table gives the median of the timed rounds and peer/ours (above 1.0x: we are faster):

* CSV -> TFRecords: our job (``run_conversion``: parse, rejects, manifest, exactly-once commit)
  against ``spark.read.csv(schema) + df.write.format("tfrecord")``; uncompressed and gzip; with
  the default even shards (a shuffle) and with ``--shards input`` (a shard per read split, as the
  peer writes); each run of ours checks its record count;
* DataFrame (from Parquet) -> TFRecords: our data source against the peer's;
* TFRecords -> DataFrame (the peer's output, read to Spark's ``noop`` sink): our reader against
  the peer's;
* the same read with executors *without TensorFlow* (``--reader``): a second spark-submit whose
  executors run a Python that cannot import TensorFlow (the venv's packages but TensorFlow's, as
  on executors installed with ``pip install "tfrecord-io[spark]"`` or from ``tfrecord-io
  pack-env``), our reader against the peer's, interleaved in the same way.

spark-tfrecord's jar is not served by the registries here; ``../shared/peers/`` holds one built
from its public source (see the README there).  Our data source is registered under the name
``tfrecord_io`` for the run, so that both formats live in one session.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
PEER_JAR = REPO.parent / "shared" / "peers" / "spark-tfrecord_2.13-0.7.0.jar"
OPS = ("csv: ours (job)", "csv: peer", "csv gzip: ours (job)", "csv gzip: peer",
       "parquet df -> tfrecord: ours", "parquet df -> tfrecord: peer",
       "tfrecord -> df: ours", "tfrecord -> df: peer",
       "csv --shards input: ours (job)", "csv gzip --shards input: ours (job)")
READER_OPS = (OPS[6], OPS[7])
CSV_OPS = (OPS[0], OPS[1], OPS[2], OPS[3], OPS[8], OPS[9])  # the second job's, with executors without TensorFlow
#: The table's rows: (operation, ours, peer).  The --shards input rows compare with the same peer runs.
PAIRS = (("csv", OPS[0], OPS[1]), ("csv gzip", OPS[2], OPS[3]),
         ("csv, --shards input (no shuffle, as the peer)", OPS[8], OPS[1]),
         ("csv gzip, --shards input", OPS[9], OPS[3]),
         ("parquet df -> tfrecord", OPS[4], OPS[5]), ("tfrecord -> df", OPS[6], OPS[7]))
READER_PAIR = ("tfrecord -> df, executors without TensorFlow", OPS[6], OPS[7])
#: What a TensorFlow-free Python leaves out of the venv's site-packages (as tests/test_installed.py's slim venv).
TF_PACKAGES = ("tensorflow", "tensorboard", "keras", "tf_keras", "ml_dtypes", "tensorflow_io")


def rounds_job(argv: list[str]) -> int:
    """Runs under spark-submit: every operation per round; prints the timings as JSON."""
    p = argparse.ArgumentParser()
    p.add_argument("--csv", required=True)
    p.add_argument("--parquet", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--ops", default=",".join(OPS), help="the operations to run, comma-separated")
    p.add_argument("--executors-without-tensorflow", action="store_true",
                   help="check first that the executors' Python cannot import TensorFlow")
    args = p.parse_args(argv)
    import bench_spark
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

    from tfrecord_io.engines import spark_datasource
    from tfrecord_io.engines.spark import ConversionOptions, run_conversion

    class Ours(spark_datasource.TFRecordDataSource):
        @classmethod
        def name(cls):
            return "tfrecord_io"

    spark = SparkSession.builder.appName("bench-dataframe").getOrCreate()
    spark.dataSource.register(Ours)
    if args.executors_without_tensorflow:
        found = spark.sparkContext.parallelize(range(2), 2).map(
            lambda _: __import__("importlib.util").util.find_spec("tensorflow") is not None).collect()
        if any(found):
            raise RuntimeError("the executors' Python can import TensorFlow")
    struct = T.StructType([T.StructField(n, T.FloatType()) for n in bench_spark.FLOATS]
                          + [T.StructField(n, T.LongType()) for n in bench_spark.INTS]
                          + [T.StructField("s", T.StringType()), T.StructField("label", T.LongType())])
    peer_out = f"{args.work}/peer-ref"
    spark.read.schema(struct).option("header", "true").csv(args.csv).write.format("tfrecord") \
        .option("recordType", "Example").mode("overwrite").save(peer_out)

    def ours_csv(out, compression="none", shards="even"):
        manifest = run_conversion(spark, ConversionOptions(inputs=args.csv, input_format="csv", schema=args.schema,
                                                           output=out, overwrite=True, compression=compression,
                                                           shards=shards))
        if manifest["totals"]["records"] != args.rows:  # a fast wrong answer is no answer
            raise RuntimeError(f"{out}: {manifest['totals']} for {args.rows} rows")

    def peer_csv(out, codec=None):
        w = spark.read.schema(struct).option("header", "true").csv(args.csv).write.format("tfrecord") \
            .option("recordType", "Example").mode("overwrite")
        if codec:
            w = w.option("codec", codec)
        w.save(out)

    ops = {
        OPS[0]: lambda out: ours_csv(out),
        OPS[1]: lambda out: peer_csv(out),
        OPS[2]: lambda out: ours_csv(out, "gzip"),
        OPS[3]: lambda out: peer_csv(out, "org.apache.hadoop.io.compress.GzipCodec"),
        OPS[4]: lambda out: spark.read.parquet(args.parquet).write.format("tfrecord_io").mode("overwrite").save(out),
        OPS[5]: lambda out: spark.read.parquet(args.parquet).write.format("tfrecord").option("recordType", "Example")
        .mode("overwrite").save(out),
        OPS[6]: lambda out: spark.read.format("tfrecord_io").schema(struct).load(peer_out).write.format("noop")
        .mode("overwrite").save(),
        OPS[7]: lambda out: spark.read.format("tfrecord").schema(struct).load(peer_out).write.format("noop")
        .mode("overwrite").save(),
        OPS[8]: lambda out: ours_csv(out, shards="input"),
        OPS[9]: lambda out: ours_csv(out, "gzip", shards="input"),
    }
    chosen = args.ops.split(",")
    times = {op: [] for op in chosen}
    for r in range(args.rounds + 1):  # round 0: warm-up, not timed
        for op in chosen:
            started = time.monotonic()
            ops[op](f"{args.work}/out-{OPS.index(op)}")
            if r:
                times[op].append(round(time.monotonic() - started, 3))
    if OPS[2] in chosen:  # the peer's reader (Hadoop's GzipCodec) reads our block-parallel gzip
        n = spark.read.format("tfrecord").option("recordType", "Example").load(f"{args.work}/out-2").count()
        if n != args.rows:
            raise RuntimeError(f"spark-tfrecord read {n} rows of our gzip output, not {args.rows}")
        print(json.dumps({"event": "peer read our gzip", "rows": n}))
    print(json.dumps({"event": "done", "times": times}))
    spark.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rounds"]:
        return rounds_job(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--peer-jar", default=str(PEER_JAR))
    p.add_argument("--reader-only", action="store_true",
                   help="only the read with executors without TensorFlow (the second job)")
    p.add_argument("--csv-only", action="store_true",
                   help="only the CSV jobs (ours and the peer's, plain and gzip, both layouts of ours)")
    args = p.parse_args(argv)
    if not Path(args.peer_jar).is_file():
        raise SystemExit(f"spark-tfrecord's jar is not at {args.peer_jar} (see ../shared/peers/README.md)")
    import bench_spark

    work = Path(tempfile.mkdtemp(prefix="bench-dataframe-"))
    csv = work / "data.csv"
    bench_spark.make_csv(csv, args.rows)
    schema = work / "schema.yaml"
    schema.write_text(bench_spark.schema_text())
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{Path(__file__).resolve().parent}", "PYSPARK_PYTHON": sys.executable}
    base = [str(VENV_BIN / "spark-submit"), "--master", "local[2]", "--driver-memory", "3g",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
            "--jars", args.peer_jar]
    make_parquet = work / "to_parquet.py"
    make_parquet.write_text(
        "import sys\nfrom pyspark.sql import SparkSession\nimport bench_spark\n"
        "from pyspark.sql import types as T\n"
        "s = SparkSession.builder.getOrCreate()\n"
        "st = T.StructType([T.StructField(n, T.FloatType()) for n in bench_spark.FLOATS] + "
        "[T.StructField(n, T.LongType()) for n in bench_spark.INTS] + "
        "[T.StructField('s', T.StringType()), T.StructField('label', T.LongType())])\n"
        "s.read.schema(st).option('header', 'true').csv(sys.argv[1]).write.parquet(sys.argv[2])\n")
    subprocess.run([*base, str(make_parquet), str(csv), str(work / "data.parquet")], check=True, env=env,
                   capture_output=True)
    job = [*base, __file__, "rounds", "--csv", str(csv), "--parquet", str(work / "data.parquet"),
           "--schema", str(schema), "--work", str(work), "--rounds", str(args.rounds), "--rows", str(args.rows)]
    rows = []
    if args.csv_only:
        times = _rounds([*job, "--ops", ",".join(CSV_OPS)], env)
        rows += [(label, times[ours], times[peer]) for label, ours, peer in PAIRS if ours in CSV_OPS]
    elif not args.reader_only:
        times = _rounds(job, env)
        rows += [(label, times[ours], times[peer]) for label, ours, peer in PAIRS]
    if not args.csv_only:
        slim = {**env, "PYSPARK_DRIVER_PYTHON": sys.executable, "PYSPARK_PYTHON": tf_free_python(work)}
        reader = _rounds([*job, "--ops", ",".join(READER_OPS), "--executors-without-tensorflow"], slim)
        label, ours, peer = READER_PAIR
        rows.append((label, reader[ours], reader[peer]))
    print(f"\n### tfrecord-io vs spark-tfrecord 0.7.0: {args.rows:,} rows x 17 columns, local[2], "
          f"median of {args.rounds} interleaved warm rounds\n")
    print("| operation | tfrecord-io (s) | spark-tfrecord (s) | **peer / ours** |")
    print("| --- | ---: | ---: | ---: |")
    for label, ours_t, peer_t in rows:
        o, q = statistics.median(ours_t), statistics.median(peer_t)
        print(f"| {label} | {o:.2f} | {q:.2f} | **{q / o:.2f}x** |")
    print("\nAll timings (s):", json.dumps({label: {"ours": o, "peer": q} for label, o, q in rows}))
    return 0


def _rounds(cmd: list[str], env: dict) -> dict:
    """Run the rounds job under spark-submit; its timings per operation."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the benchmark job failed:\n{proc.stderr[-6000:]}")
    events = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith('{"event"')]
    for e in events:
        if e["event"] == "peer read our gzip":
            print(f"  spark-tfrecord's reader read our gzip output: {e['rows']:,} rows", flush=True)
    return events[-1]["times"]


def tf_free_python(work: Path) -> str:
    """A Python with this venv's packages but TensorFlow's (and not the editable tfrecord_io install:
    the job's PYTHONPATH gives the checkout): a venv whose site-packages links every entry of this
    one's except those."""
    import sysconfig

    venv = work / "executors-without-tensorflow"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name.lower()
        if name.startswith(TF_PACKAGES) or name.startswith(("tfrecord_io", "__editable__")) or entry.suffix == ".pth":
            continue
        (site / entry.name).symlink_to(entry)
    probe = subprocess.run([str(python), "-c", "import tensorflow"], capture_output=True, text=True)
    if probe.returncode == 0:
        raise SystemExit(f"{python} can import TensorFlow")
    return str(python)


if __name__ == "__main__":
    sys.exit(main())
