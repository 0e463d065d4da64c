"""What the record index costs the conversion, and what indexing a file someone else wrote costs.

1. Encode + write, with and without the index, same run (issue #21 item 2: "no measurable cost"):
   N rows x 17 columns (bench_encode's data), encoded and written as S shards by
   ``output.write_shard`` -- what every converter's task does -- once as it is (the shard and its
   ``_index/<shard>.idx``) and once with the index left out (``write_shard`` without it: the same
   code with ``index=None``), local disk and, with ``--hdfs URI``, an HDFS directory.  Rounds
   alternate the two; the median of the per-round ratios is reported.
2. ``tfrecord-io index`` on one uncompressed file of ``--index-mb`` MiB written by TensorFlow's own
   writer (records of a few KiB and a few of 8 MiB): seconds, MB/s and peak Python memory
   (tracemalloc), against reading the file whole into memory as DALI's indexer does (NVIDIA/DALI#4002).

    .venv/bin/python benchmarks/bench_index.py [--rows 1000000] [--shards 8] [--rounds 5] [--hdfs hdfs://HOST:PORT/dir]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from bench_encode import SCHEMA, make_table  # noqa: E402
from tfrecord_io.core.codec import encode_examples  # noqa: E402
from tfrecord_io.core.framing import TFRecordWriter, normalize_compression  # noqa: E402
from tfrecord_io.storage import fs, output  # noqa: E402
from tfrecord_io.storage.index import build_index, index_uri  # noqa: E402


def write_without_index(records, out: str, attempt: str, final_name: str, compression: str) -> None:
    """``output.write_shard`` as it was before the index: the shard alone."""
    temp_path = fs.join(output.attempt_dir(out, attempt), final_name)
    with fs.open(temp_path, "wb") as f, TFRecordWriter(f, compression=normalize_compression(compression)) as w:
        for batch in records:
            w.write_batch(batch)


def convert(table, base: str, shards: int, with_index: bool, batch_rows: int) -> float:
    """Seconds to encode and write ``table`` as ``shards`` shards into an attempt directory under ``base``."""
    if fs.exists(base):
        fs.delete(base, recursive=True)
    bounds = np.linspace(0, table.num_rows, shards + 1).astype(int)
    t0 = time.perf_counter()
    for k in range(shards):
        part = table.slice(int(bounds[k]), int(bounds[k + 1] - bounds[k]))
        batches = (encode_examples(b, SCHEMA) for b in part.to_batches(max_chunksize=batch_rows))
        name = output.shard_name(k, shards)
        if with_index:
            output.write_shard(batches, base, "a0", name, "none")
        else:
            write_without_index(batches, base, "a0", name, "none")
    return time.perf_counter() - t0


def big_file(path: str, mb: int) -> int:
    import tensorflow as tf

    rng = np.random.default_rng(0)
    written = 0
    with tf.io.TFRecordWriter(path) as w:
        while written < mb << 20:
            n = 8 << 20 if rng.random() < 0.002 else int(rng.integers(100, 8 << 10))
            w.write(rng.bytes(16) * (n // 16))
            written += n // 16 * 16 + 16
    return os.path.getsize(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--batch-rows", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hdfs", help="also write into this hdfs:// directory (e.g. a tfrecord-io hdfs-local)")
    ap.add_argument("--index-mb", type=int, default=1024, help="size of the file tfrecord-io index reads (MiB)")
    args = ap.parse_args(argv)

    table = make_table(args.rows)
    print(f"bench_index: {args.rows:,} rows x 17 columns in {args.shards} shards, {args.rounds} rounds; "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        places = [("local disk", os.path.join(tmp, "out"))]
        if args.hdfs:
            places.append(("HDFS", fs.join(args.hdfs, "bench-index")))
        results: dict[str, dict[bool, list[float]]] = {}
        convert(table.slice(0, 20_000), places[0][1], 2, True, args.batch_rows)  # warm-up
        for r in range(args.rounds):
            for where, base in places:
                for with_index in ((True, False) if r % 2 else (False, True)):
                    seconds = convert(table, base, args.shards, with_index, args.batch_rows)
                    results.setdefault(where, {}).setdefault(with_index, []).append(seconds)
                    print(f"  {where}, {'with' if with_index else 'without'} the index (round {r + 1}): "
                          f"{args.rows / seconds:,.0f} records/s", flush=True)
        convert(table, places[0][1], args.shards, True, args.batch_rows)
        attempt = output.attempt_dir(places[0][1], "a0")
        index_bytes = sum(fs.size(index_uri(fs.join(attempt, output.shard_name(k, args.shards))))
                          for k in range(args.shards))
        for where, base in places:
            fs.delete(base, recursive=True)

        path = os.path.join(tmp, "foreign.tfrecord")
        size = big_file(path, args.index_mb)
        tracemalloc.start()
        t0 = time.perf_counter()
        built = build_index(path, "none")
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        tracemalloc.start()
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            whole = f.read()  # what an indexer that reads the file whole holds
        whole_s = time.perf_counter() - t0
        _, whole_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del whole

    print()
    print(f"### Record index: encode + write, {args.rows:,} rows in {args.shards} shards, median of {args.rounds} rounds")
    print()
    print("| where | without the index, records/s | with it, records/s | with / without (median of rounds) |")
    print("| --- | ---: | ---: | ---: |")
    for where, by in results.items():
        ratio = statistics.median(without / with_ for with_, without in zip(by[True], by[False]))
        print(f"| {where} | {args.rows / statistics.median(by[False]):,.0f} | {args.rows / statistics.median(by[True]):,.0f} "
              f"| {ratio:.3f}x |")
    print(f"\nindex files: {index_bytes / 2**20:.1f} MiB for {args.rows:,} records ({index_bytes / args.rows:.1f} bytes "
          f"per record, {index_bytes / (table.nbytes or 1):.2%} of the table's Arrow size)")
    print()
    print(f"### tfrecord-io index on one {size / 2**20:,.0f} MiB file ({built.records:,} records)")
    print()
    print("| reader | seconds | MB/s | peak Python memory |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| tfrecord-io index (streamed headers) | {seconds:.2f} | {size / 1e6 / seconds:,.0f} | {peak / 2**20:.1f} MiB |")
    print(f"| the file read whole (DALI's indexer holds it) | {whole_s:.2f} | {size / 1e6 / whole_s:,.0f} | "
          f"{whole_peak / 2**20:,.0f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
