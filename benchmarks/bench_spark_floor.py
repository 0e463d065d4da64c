"""Where the Spark job's time goes: its stages timed one by one in one warm local[2] session.

The job reads its input in Python (``ReadStage``: parsing on line-range splits, the Beam
pipeline's parser) and encodes inside ``mapInArrow``.  This times, on the benchmark's CSV
(``bench_spark.make_csv``: 1M rows x 17 columns, 148 MB), its stages on their own, with Spark's
own CSV parse beside them for scale:

    1. spark.read.csv(StructType) -> noop sink           Spark's CSV parse alone (for scale)
    2. the read stage -> noop                            our parse, Python -> JVM
    3. + repartition(N) on (file, split, line) -> noop   the shuffle that evens the shards
    4. 3 -> mapInArrow(drop every batch) -> count        + moving the rows back to Python
    5. run_conversion                                    the whole job (+ encode, write, commit)

Each is the best of ``--repeats`` (default 3) after one untimed run of the whole job.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python benchmarks/bench_spark_floor.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    import bench_spark
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tfrecord_io.engines import spark as job

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="bench-spark-floor-"))
    csv = work / "data.csv"
    bench_spark.make_csv(csv, args.rows)
    schema_path = work / "schema.yaml"
    schema_path.write_text(bench_spark.schema_text())
    from tfrecord_io.storage.schema_io import load_schema

    schema = load_schema(str(schema_path))
    spark = (SparkSession.builder.master("local[2]").appName("tfrecord-io floor")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    def options():
        return job.ConversionOptions(inputs=str(csv), input_format="csv", schema=str(schema_path),
                                     output=str(work / "out"), overwrite=True)

    def noop(df):
        df.write.format("noop").mode("overwrite").save()

    def best(fn) -> float:
        times = []
        for _ in range(args.repeats):
            started = time.monotonic()
            fn()
            times.append(time.monotonic() - started)
        return min(times)

    job.run_conversion(spark, options())  # warm-up: JIT, Python workers
    from tfrecord_io.conversion import columns
    from tfrecord_io.storage import inputs

    files = inputs.list_inputs(str(csv))
    headers = columns.read_headers([f.path for f in files], schema)
    prepared, _, _ = job._read_input(spark, schema, options(), files, headers)
    names = {f.name for f in schema.features}
    plain = spark.read.option("header", "true").schema(
        T.StructType([f for f in prepared.schema.fields if f.name in names])).csv(str(csv))
    shards = job.default_num_shards(sum(f.size for f in files))
    shuffled = prepared.repartition(shards, F.col(job.SOURCE), F.col(job.START), F.col(job.LINE))
    rows = [("Spark CSV parse alone (spark.read.csv -> noop), for scale", best(lambda: noop(plain))),
            ("the read stage: parsing in Python -> JVM (-> noop)", best(lambda: noop(prepared))),
            (f"+ repartition({shards}) on (file, split, line) (-> noop)", best(lambda: noop(shuffled))),
            ("+ JVM -> Python (mapInArrow dropping every batch)", best(
                lambda: shuffled.mapInArrow(lambda batches: (b.slice(0, 0) for b in batches),
                                            shuffled.schema).count()))]
    rows.append(("the whole job (run_conversion)", best(lambda: job.run_conversion(spark, options()))))
    spark.stop()

    total = rows[-1][1]
    print(f"\n### Spark job floor: {args.rows:,} rows, {csv.stat().st_size / 1e6:.0f} MB CSV, local[2], "
          f"best of {args.repeats}\n")
    print("| stage | seconds | share of the job |")
    print("| --- | ---: | ---: |")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.2f} | {seconds / total:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
