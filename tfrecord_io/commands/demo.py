"""``tfrecord-io demo`` (what ``make demo`` runs): the whole path on embedded defaults.

1. writes sample taxi-trip CSV (``conf/taxi.yaml``), with a few deliberately bad rows;
2. converts it to TFRecords with the Spark job in local mode (``local[2]``), local disk in and out
   — or, with ``--hdfs``, on a local HDFS started for the demo (Hadoop 3.5.0, loopback);
3. shows what came out: shards, counts, rejects with their reasons, one record;
4. trains a small Keras model with ``model.fit(make_dataset(...))`` and prints examples/s.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_ROWS = 200_000
BAD_ROWS = [  # (what is wrong, how the row is written): each becomes a reject with its reason
    ("fare is not a number", {"fare": "twelve"}),
    ("fare is missing (required)", {"fare": ""}),
    ("tipped is missing (required)", {"tipped": ""}),
]


def write_sample_csv(directory: Path, rows: int, files: int = 2) -> list[Path]:
    """``rows`` synthetic trips over ``files`` CSV files, plus the BAD_ROWS in the first file."""
    from tfrecord_io.commands.demo_train import demo_rows, taxi_schema

    names = [f.name for f in taxi_schema().features]
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    per_file = -(-rows // files)
    for i in range(files):
        n = min(per_file, rows - i * per_file)
        batch = demo_rows(i * per_file, n).to_pydict()
        path = directory / f"trips-{i:02d}.csv"
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(names)
            for r in range(n):
                w.writerow([_cell(batch[c][r]) for c in names])
            if i == 0:
                good = {c: _cell(batch[c][0]) for c in names}
                for _, change in BAD_ROWS:
                    w.writerow([{**good, **change}[c] for c in names])
        paths.append(path)
    return paths


def _cell(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _short(feature: dict) -> str:
    """A feature's values as the first record line shows them: one value plainly, lists bounded."""
    (values,) = feature.values() if feature else ([],)
    text = json.dumps(values[0] if len(values) == 1 else values, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _step(n: int, text: str) -> None:
    print(f"\n[{n}/4] {text}", flush=True)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"sample rows (default {DEFAULT_ROWS:,})")
    parser.add_argument("--workdir", default="demo-output", help="where the demo writes (default ./demo-output)")
    parser.add_argument("--hdfs", action="store_true",
                        help="start a local HDFS and convert and train hdfs:// to hdfs:// instead of local disk")
    parser.add_argument("--epochs", type=int, default=2)


def run(args: argparse.Namespace) -> int:
    import warnings

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    work = Path(args.workdir).resolve()
    schema = str(Path(__file__).resolve().parent.parent / "schemas" / "taxi.yaml")

    _step(1, f"writing {args.rows:,} sample taxi trips as CSV (+{len(BAD_ROWS)} bad rows) under {work}/input")
    csv_paths = write_sample_csv(work / "input", args.rows)
    input_uri, output_uri = str(work / "input"), str(work / "tfrecords")

    cluster = None
    if args.hdfs:
        from tfrecord_io.storage import fs
        from tfrecord_io.clusters import hdfs_local

        print("      starting a local HDFS (Apache Hadoop 3.5.0 NameNode + DataNode on 127.0.0.1) ...", flush=True)
        cluster = hdfs_local.start(tempfile.mkdtemp(prefix="tfrecord-io-demo-hdfs-"), detach=False)
        print(f"      HDFS at {cluster.namenode_uri}, WebHDFS at {cluster.webhdfs_url}")
        input_uri, output_uri = cluster.uri("/demo/input"), cluster.uri("/demo/tfrecords")
        for p in csv_paths:
            with open(p, "rb") as src, fs.open(fs.join(input_uri, p.name), "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
    try:
        return _convert_inspect_train(args, schema, input_uri, output_uri)
    finally:
        if cluster is not None:
            cluster.stop()


def _convert_inspect_train(args, schema: str, input_uri: str, output_uri: str) -> int:
    from pyspark.sql import SparkSession

    from tfrecord_io.storage import fs
    from tfrecord_io.commands.demo_train import train_demo
    from tfrecord_io.engines.spark import ConversionOptions, driver_java_options, run_conversion
    from tfrecord_io.storage import credentials

    _step(2, f"Spark (local[2]) job: {input_uri} -> {output_uri}")
    spark = (SparkSession.builder.master("local[2]").appName("tfrecord-io demo")
             .config("spark.driver.extraJavaOptions", driver_java_options(credentials.java_options()))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    t0 = time.perf_counter()
    try:
        manifest = run_conversion(spark, ConversionOptions(
            inputs=(input_uri,), input_format="csv", schema=schema, output=output_uri,
            compression="gzip", num_shards=4, overwrite=True))
    finally:
        spark.stop()
    seconds = time.perf_counter() - t0
    totals = manifest["totals"]
    print(f"      {totals['input_rows']:,} input rows -> {totals['records']:,} records + "
          f"{totals['rejected']:,} rejected, in {seconds:.1f} s (Spark start-up included)")

    _step(3, "what came out")
    for f in manifest["files"]:
        print(f"      {f['path']:<40} {f['records']:>9,} records {f['bytes']:>12,} bytes")
    rejects = []
    for r in manifest["rejects"]:
        with fs.open(fs.join(output_uri, r["path"]), "rb") as fh:
            rejects += [json.loads(line) for line in fh.read().decode("utf-8").splitlines()]
    for rej in sorted(rejects, key=lambda r: (r["source"], r.get("line") or 0)):
        print(f"      reject: {Path(rej['source']).name} line {rej.get('line')}: {rej['reason']}")
    from tfrecord_io.core.framing import read_records
    from tfrecord_io.core.decode import decode_record, record_to_json

    first = fs.join(output_uri, manifest["files"][0]["path"])
    with fs.open(first, "rb") as fh:
        record = next(iter(read_records(fh, name=first, compression=manifest["compression"])))
    shown = record_to_json(decode_record(record))["features"]
    print("      first record: " + ", ".join(f"{name}={_short(value)}" for name, value in shown.items()))

    _step(4, f"training a Keras model: inputs and preprocessing from the schema (keras_inputs), "
             f"model.fit(make_dataset({output_uri!r}))")
    train_demo(output_uri, epochs=args.epochs, verbose=0)  # prints examples/s
    print("\ndemo done: CSV -> TFRecords (Spark) -> tf.data -> Keras")
    return 0
