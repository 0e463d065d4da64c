"""The Beam pipeline against a naive Beam pipeline, same runner, same run.

Data: N rows x 17 columns of CSV (10 float, 5 int64, 1 string, 1 int64 label), written to a
temporary directory before timing.  Both pipelines read that CSV and write uncompressed
TFRecords of tf.train.Example to local disk:

    ours:   tfrecord_io.engines.beam (pipelines.to_tfrecord): pyarrow's streaming CSV reader per file ->
            typed Arrow batches -> GroupByKey(shard) -> encode_examples -> write_shard -> commit
    naive:  ReadFromText -> Map(parse line) -> Map(tf.train.Example ... SerializeToString)
            -> WriteToTFRecord

Both pipelines first run once on a 2,000-row warm-up file (imports -- TensorFlow for the naive
one --, runner start-up), then each is timed once on the data from ``Pipeline.run()`` to the
end (ours includes its driver work: listing, prepare, commit, manifest).  The ratio is naive
time / ours.  Both outputs are parsed back with TensorFlow and compared column by column before
anything is reported.  The table says which runner actually ran (Beam 2.77's DirectRunner
tries Prism first and falls back to the FnApiRunner when Prism cannot be downloaded).

    .venv/bin/python benchmarks/bench_beam.py [--rows 300000] [--runner DirectRunner]
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from tfrecord_io.core.schema import Schema  # noqa: E402
from tfrecord_io.engines.loader import parse_spec  # noqa: E402

SCHEMA = Schema.from_dict({
    "features": [{"name": f"f{i}", "type": "float"} for i in range(10)]
    + [{"name": f"i{i}", "type": "int64"} for i in range(5)]
    + [{"name": "category", "type": "string"}, {"name": "label", "type": "int64"}],
    "label": "label",
})
NAMES = [f.name for f in SCHEMA.features]
KINDS = [f.type for f in SCHEMA.features]


def write_csv(path: str, rows: int, seed: int = 0, chunk: int = 100_000) -> None:
    """A header and ``rows`` lines; floats as float32 text, no quoting needed (naive split works)."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write(",".join(NAMES) + "\n")
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            cols = [np.char.mod("%.7g", rng.normal(size=n).astype(np.float32)) for _ in range(10)]
            cols += [rng.integers(-1_000_000, 1_000_000, n).astype(str) for _ in range(5)]
            cols.append(np.char.add("cat-", rng.integers(0, 5000, n).astype(str)))
            cols.append(rng.integers(0, 2, n).astype(str))
            lines = cols[0]
            for c in cols[1:]:
                lines = np.char.add(np.char.add(lines, ","), c)
            f.write("\n".join(lines.tolist()) + "\n")


# --------------------------------------------------------------------------- naive pipeline
def _parse_line(line: str) -> dict:
    values = line.split(",")
    return {name: (float(v) if kind == "float" else int(v) if kind == "int64" else v)
            for name, kind, v in zip(NAMES, KINDS, values)}


def _to_example(row: dict) -> bytes:
    import tensorflow as tf

    feature = {}
    for name, kind in zip(NAMES, KINDS):
        v = row[name]
        if kind == "float":
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
        elif kind == "int64":
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
        else:
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def run_naive(csv_path: str, out_dir: str, beam_args: list[str]) -> tuple[float, str]:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.engines.beam import runner_that_ran

    p = beam.Pipeline(options=PipelineOptions(beam_args))
    (p
     | "Read" >> beam.io.ReadFromText(csv_path, skip_header_lines=1)
     | "Parse" >> beam.Map(_parse_line)
     | "Example" >> beam.Map(_to_example)
     | "Write" >> beam.io.WriteToTFRecord(os.path.join(out_dir, "part"), file_name_suffix=".tfrecord"))
    t0 = time.perf_counter()
    result = p.run()
    result.wait_until_finish()
    return time.perf_counter() - t0, runner_that_ran(result)


# --------------------------------------------------------------------------- ours
def run_ours(csv_path: str, out_dir: str, beam_args: list[str]) -> tuple[float, str]:
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.engines import beam as tbeam

    conv = tbeam.ConversionOptions(inputs=csv_path, input_format="csv", schema=SCHEMA, output=out_dir)
    t0 = time.perf_counter()
    result = tbeam.run_conversion(conv, PipelineOptions(beam_args))
    return time.perf_counter() - t0, result.runner


# --------------------------------------------------------------------------- checks
def parsed_columns(files: list[str]) -> dict[str, np.ndarray]:
    """Every record of ``files`` parsed by TensorFlow; each column sorted (record order differs)."""
    import tensorflow as tf

    cols: dict[str, list] = {n: [] for n in NAMES}
    ds = tf.data.TFRecordDataset(files).batch(8192)
    for batch in ds:
        parsed = tf.io.parse_example(batch, parse_spec(SCHEMA))
        for n in NAMES:
            cols[n].append(parsed[n].numpy())
    return {n: np.sort(np.concatenate(v)) if v else np.array([]) for n, v in cols.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300_000, help="rows of CSV (default 300000)")
    ap.add_argument("--runner", default="DirectRunner",
                    help="Beam runner for both pipelines (default DirectRunner; FnApiRunner skips the Prism attempt)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    beam_args = [f"--runner={args.runner}"]

    tmp = tempfile.mkdtemp(prefix="bench-beam-")
    try:
        csv_path = os.path.join(tmp, "input.csv")
        t0 = time.perf_counter()
        write_csv(csv_path, args.rows)
        mb = os.path.getsize(csv_path) / 1e6
        print(f"wrote {args.rows} rows ({mb:.1f} MB of CSV) in {time.perf_counter() - t0:.1f}s", file=sys.stderr)

        warm = os.path.join(tmp, "warm.csv")
        write_csv(warm, 2000, seed=1)
        run_ours(warm, os.path.join(tmp, "warm-ours"), beam_args)
        run_naive(warm, os.path.join(tmp, "warm-naive"), beam_args)

        ours_s, ours_runner = run_ours(csv_path, os.path.join(tmp, "ours"), beam_args)
        print(f"ours:  {ours_s:.2f}s on {ours_runner}", file=sys.stderr)
        naive_s, naive_runner = run_naive(csv_path, os.path.join(tmp, "naive"), beam_args)
        print(f"naive: {naive_s:.2f}s on {naive_runner}", file=sys.stderr)

        ours = parsed_columns(sorted(glob.glob(os.path.join(tmp, "ours", "part-*"))))
        naive = parsed_columns(sorted(glob.glob(os.path.join(tmp, "naive", "part*"))))
        for n in NAMES:
            if len(ours[n]) != args.rows or not np.array_equal(ours[n], naive[n]):
                print(f"MISMATCH in column {n}: ours {len(ours[n])} values, naive {len(naive[n])}", file=sys.stderr)
                return 1
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    ratio = naive_s / ours_s
    print(f"\n### Beam pipeline vs naive Beam pipeline ({args.rows:,} rows x 17 columns, {mb:.0f} MB CSV)\n")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"requested --runner={args.runner}\n")
    print("| pipeline | runner that ran | wall time | rows/s |")
    print("| --- | --- | ---: | ---: |")
    print(f"| ours: pyarrow CSV -> Arrow batches -> encode_examples | {ours_runner} | {ours_s:.2f} s | "
          f"{args.rows / ours_s:,.0f} |")
    print(f"| naive: ReadFromText -> Map(parse) -> Map(tf.train.Example) -> WriteToTFRecord | {naive_runner} | "
          f"{naive_s:.2f} s | {args.rows / naive_s:,.0f} |")
    print(f"\n**Ratio: {ratio:.1f}x** (target >= 5x); outputs parse back to the same values.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
