"""Partition pruning: a query reads the partitions it needs, not the table (issue #29 item 2).

A partitioned output (``option("partitionBy", "season")``, 4 partitions of the demo taxi rows,
written once by our DataFrame writer) read three ways, each with and without a filter on the
partition column, in interleaved rounds:

    spark.read.format("tfrecord").load(out).count()  vs  .where("season = 3").count()
                                                     and .where("season IN (1, 2)").count()
    read_batches(out)                                vs  read_batches(out, partitions={"season": ["3"]})

``where()`` on a partition column prunes by path (``pushFilters``; ``tfrecord_io.spark.register``
turns on Spark's ``spark.sql.python.filterPushdown.enabled``): the other partitions' files are
never opened.  Each ratio is the unfiltered read's seconds over the filtered one's, same round,
median; the rows each read returned are checked against the data written.

    .venv/bin/python benchmarks/bench_partition_pruning.py --rows 400000 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workdir", help="where to write the data (default: a temporary directory, removed)")
    args = ap.parse_args(argv)

    import pyarrow as pa
    from pyspark.sql import SparkSession

    import tfrecord_io.spark
    from tfrecord_io import read_batches
    from tfrecord_io.commands.demo_train import demo_rows

    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="bench-pruning-")
    work = Path(args.workdir or tmp.name)
    out = str(work / "by-season")
    spark = (SparkSession.builder.master("local[2]").appName("bench-partition-pruning")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    tfrecord_io.spark.register(spark)

    table = demo_rows(0, args.rows, seed=1)
    season = pa.array([(i % 4) + 1 for i in range(args.rows)], pa.int64())
    table = table.append_column("season", season)
    t = time.perf_counter()
    (spark.createDataFrame(table.to_pandas()).repartition(4).write.format("tfrecord")
     .option("partitionBy", "season").mode("overwrite").save(out))
    print(f"bench_partition_pruning: {args.rows:,} rows in 4 partitions written in {time.perf_counter() - t:.1f}s; "
          f"{os.cpu_count()} CPUs, Spark local[2]", flush=True)
    expected = {None: args.rows, "season = 3": args.rows // 4 + (args.rows % 4 > 2),
                "season IN (1, 2)": args.rows // 2 + (args.rows % 4 > 0) + (args.rows % 4 > 1)}

    def spark_count(where):
        df = spark.read.format("tfrecord").load(out)
        return (df.where(where) if where else df).count()

    def batches_count(partitions):
        return sum(len(b["fare"]) for b in read_batches(out, batch_size=8192, features=["fare"],
                                                         partitions=partitions))

    runs = {
        "spark.read, no filter": lambda: spark_count(None),
        "spark.read, where season = 3": lambda: spark_count("season = 3"),
        "spark.read, where season IN (1, 2)": lambda: spark_count("season IN (1, 2)"),
        "read_batches, all": lambda: batches_count(None),
        "read_batches, partitions season=3": lambda: batches_count({"season": ["3"]}),
    }
    wants = [None, "season = 3", "season IN (1, 2)", None, "season = 3"]
    spark_count(None)  # warm-up: the session's first read pays Spark's planning start
    # The files each read plans (spark.read: one input partition per file, after pruning) or selects.
    from tfrecord_io.storage.partitions import select_partitions
    from tfrecord_io.storage.sources import resolve_source

    def planned(where):
        df = spark.read.format("tfrecord").load(out)
        return (df.where(where) if where else df).rdd.getNumPartitions()

    total = len(resolve_source(out).files)
    files = {name: planned(want) for name, want in zip(runs, wants) if name.startswith("spark")}
    files["read_batches, all"] = total
    files["read_batches, partitions season=3"] = len(select_partitions(resolve_source(out), {"season": ["3"]}).files)
    seconds: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.rounds):
        for (name, run), want in zip(runs.items(), wants):
            t = time.perf_counter()
            got = run()
            seconds[name].append(time.perf_counter() - t)
            if got != expected[want]:
                print(f"MISMATCH: {name} read {got} rows, expected {expected[want]}")
                return 1
    spark.stop()

    def ratio(base: str, pruned: str) -> float:
        return statistics.median(b / p for b, p in zip(seconds[base], seconds[pruned]))

    print()
    print(f"| read ({args.rows:,} rows, 4 partitions) | seconds, median of {args.rounds} | "
          f"unfiltered / this, same round (median) | files read (Spark: planned partitions) |")
    print("| --- | ---: | ---: | ---: |")
    base = {"spark.read": "spark.read, no filter", "read_batches": "read_batches, all"}
    for name, s in seconds.items():
        engine = name.split(", ", 1)[0]
        print(f"| {name} | {statistics.median(s):.2f} | {ratio(base[engine], name):.2f}x | {files[name]} of {total} |")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
