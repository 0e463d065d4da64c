"""Gzip TFRecords: block-parallel compression (core/gzip_blocks) against serial zlib and against
TensorFlow's own gzip writer, in the same run.

Data: bench_encode's N rows x 17 columns, encoded once (the encoder is not timed here), written as
one gzip TFRecord file to local disk by:

    ours, threads=2        TFRecordWriter(compression="gzip") -- the default: 1 MiB blocks on 2 threads
    ours, threads=1        TFRecordWriter(compression="gzip", compression_threads=1): one serial zlib stream
    ours, threads=2, level 1
    tf.io.TFRecordWriter   TFRecordOptions(compression_type="GZIP"), record by record, level 6
    ParallelGzip, zlib-rs  the framed stream (framed before timing) through core/gzip_blocks, 2 threads,
    ParallelGzip, zlib     level 6: its blocks deflated by the compiled core's zlib-rs, then by
                           Python's zlib (what the numpy core uses) -- the compressors alone

Rounds alternate; medians of wall seconds and of process CPU seconds; every file is read back by
TensorFlow's reader and must hold every record.  What the parallel writer buys is wall time
where a core is free (a Spark task per core has none to spare: there the gain is the overlap of
compression with the next batch's encoding, see BENCHMARKS.md).

    .venv/bin/python benchmarks/bench_gzip.py [--rows 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import tensorflow as tf

    from bench_encode import SCHEMA, make_table
    from tfrecord_io.core.codec import encode_examples
    from tfrecord_io.core.framing import TFRecordWriter

    table = make_table(args.rows)
    batches = [encode_examples(b, SCHEMA) for b in table.to_batches(max_chunksize=8192)]
    mb = sum(b.nbytes for b in batches) / 1e6
    print(f"bench_gzip: {args.rows:,} records ({mb:,.0f} MB serialized), {args.rounds} rounds; "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, TF {tf.__version__}", flush=True)

    def ours(threads: int, level: int = 6):
        def run(path: str) -> None:
            with TFRecordWriter(path, "gzip", compression_level=level, compression_threads=threads) as w:
                for b in batches:
                    w.write_batch(b)
        return run

    records = [r for b in batches for r in b.to_pylist()]  # TF's writer takes bytes one by one

    def tf_writer(path: str) -> None:
        with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type="GZIP")) as w:
            for r in records:
                w.write(r)

    from tfrecord_io.core import native
    from tfrecord_io.core.framing import frame_records
    from tfrecord_io.core.gzip_blocks import ParallelGzip

    framed = [frame_records(b) for b in batches]

    def blocks(pure: bool):
        def run(path: str) -> None:
            with open(path, "wb") as f, (native.pure() if pure else contextlib.nullcontext()):
                z = ParallelGzip(f.write, level=6, threads=2)
                for part in framed:
                    z.compress(part)
                z.finish()
        return run

    ways = {"ours, threads=2 (default)": ours(2), "ours, threads=1 (serial zlib)": ours(1),
            "ours, threads=2, level 1": ours(2, 1), "tf.io.TFRecordWriter (GZIP)": tf_writer}
    if native.available() is not None:
        ways["ParallelGzip, zlib-rs (compiled core)"] = blocks(False)
        ways["ParallelGzip, zlib (numpy core)"] = blocks(True)
    wall = {w: [] for w in ways}
    cpu = {w: [] for w in ways}
    sizes = {}
    with tempfile.TemporaryDirectory(prefix="bench-gzip-") as work:
        for r in range(args.rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for name in order:
                path = os.path.join(work, "out.tfrecord.gz")
                t, c = time.perf_counter(), time.process_time()
                ways[name](path)
                wall[name].append(time.perf_counter() - t)
                cpu[name].append(time.process_time() - c)
                sizes[name] = os.path.getsize(path)
                n = sum(1 for _ in tf.data.TFRecordDataset(path, compression_type="GZIP"))
                if n != args.rows:
                    raise RuntimeError(f"{name}: TensorFlow read {n} records of {args.rows}")
                print(f"  {name} (round {r + 1}): {wall[name][-1]:.2f}s wall, {cpu[name][-1]:.2f} CPU-s", flush=True)
                os.remove(path)

    base = statistics.median(wall["tf.io.TFRecordWriter (GZIP)"])
    serial = statistics.median(wall["ours, threads=1 (serial zlib)"])
    print(f"\n### Gzip writers: {args.rows:,} records, median of {args.rounds} rounds\n")
    print("| writer | wall s | CPU s | MB written | vs TF's writer (wall) | vs serial zlib (wall) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in ways:
        w = statistics.median(wall[name])
        print(f"| {name} | {w:.2f} | {statistics.median(cpu[name]):.2f} | {sizes[name] / 1e6:,.1f} | "
              f"**{base / w:.2f}x** | {serial / w:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
