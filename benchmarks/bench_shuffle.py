"""Global shuffle against the default window shuffle, local disk and HDFS: records/s and peak memory.

Data: bench_loader's (N rows x 17 columns of the demo taxi schema, S uncompressed shards, a
committed output with its record indexes), on local disk and, unless ``--no-hdfs``, copied to a
local HDFS started for the run (NameNode + DataNode on this machine, 128 MiB blocks).  Each
configuration runs in a fresh process (so that its peak RSS is its own) and reads ``--epochs``
epochs of ``make_dataset(source, batch_size=1024, seed=0, shuffle=...)``:

    window   shuffle=True (the default): file order shuffled, records in windows of 10,000
    global   shuffle="global": a permutation of all the records each epoch, read by offset;
             on HDFS the files are copied to local disk first (in the first epoch)

Rounds alternate the configurations; medians are reported: time to the first batch, each
epoch's records/s, and the peak RSS over the run minus the RSS after ``import tensorflow``.

    .venv/bin/python benchmarks/bench_shuffle.py [--rows 1000000] [--shards 8] [--epochs 2] [--rounds 3] [--no-hdfs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def probe(config: dict) -> dict:
    """One configuration, in this (fresh) process."""
    import tensorflow as tf  # noqa: F401  (the runtime's own footprint is the baseline)

    from tfrecord_io.engines.loader import make_dataset

    base = _rss_mb()
    ds = make_dataset(config["source"], batch_size=1024, seed=0, shuffle=config["shuffle"],
                      num_epochs=config["epochs"], cache_dir=config["cache_dir"], prefetch_to_device=False)
    per_epoch = config["rows"]
    started = time.perf_counter()
    first, marks, rows = None, [], 0
    for _, label in ds:
        if first is None:
            first = time.perf_counter() - started
        rows += int(label.shape[0])
        if rows >= per_epoch * (len(marks) + 1):
            marks.append(time.perf_counter())
    epochs, last = [], started
    for m in marks:
        epochs.append(per_epoch / (m - last))
        last = m
    return {"rows": rows, "first_batch_s": first, "epoch_rows_per_s": epochs,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base}


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_probe(config: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--probe", json.dumps(config)], capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"probe {config} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-hdfs", action="store_true")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(json.loads(args.probe))))
        return 0

    from bench_loader import write_data

    print(f"bench_shuffle: {args.rows:,} rows in {args.shards} shards, {args.epochs} epochs, {args.rounds} rounds; "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}", flush=True)
    cluster = None
    with tempfile.TemporaryDirectory(prefix="bench-shuffle-") as tmp:
        work = Path(tmp)
        _, out = write_data(work, args.rows, args.shards)
        sources = {"local": out}
        try:
            if not args.no_hdfs:
                from tfrecord_io.clusters import hdfs_local
                from tfrecord_io.storage import fs

                cluster = hdfs_local.start(work / "hdfs", detach=False, block_size=hdfs_local.HDFS_DEFAULT_BLOCK_SIZE)
                remote = cluster.uri("/bench/shuffle")
                for path in sorted(Path(out).rglob("*"), key=lambda p: p.name == "_SUCCESS"):
                    if path.is_file():
                        with open(path, "rb") as src, fs.open(fs.join(remote, str(path.relative_to(out))), "wb") as dst:
                            while chunk := src.read(8 << 20):
                                dst.write(chunk)
                sources["HDFS"] = remote
            results: dict[tuple, list[dict]] = {}
            for r in range(args.rounds):
                for where, source in sources.items():
                    for shuffle in (True, "global"):
                        config = {"source": source, "shuffle": shuffle, "epochs": args.epochs, "rows": args.rows,
                                  "cache_dir": str(work / "cache")}
                        got = run_probe(config)
                        results.setdefault((where, shuffle), []).append(got)
                        print(f"  {where}, shuffle={shuffle!r} (round {r + 1}): first batch {got['first_batch_s']:.2f}s, "
                              f"epochs {[f'{x:,.0f}' for x in got['epoch_rows_per_s']]} rows/s, "
                              f"peak RSS +{got['peak_rss_mb']:.0f} MiB", flush=True)
        finally:
            if cluster is not None:
                cluster.stop()

    print()
    print(f"### Global vs window shuffle: {args.rows:,} rows, {args.shards} shards, batch 1024, median of {args.rounds} "
          f"rounds")
    print()
    epochs = " | ".join(f"epoch {e + 1} rows/s" for e in range(args.epochs))
    print(f"| source | shuffle | first batch (s) | {epochs} | peak RSS over TF's own (MiB) |")
    print("| --- | --- | ---: | " + " | ".join("---:" for _ in range(args.epochs)) + " | ---: |")
    for (where, shuffle), runs in results.items():
        per_epoch = [statistics.median(run["epoch_rows_per_s"][e] for run in runs) for e in range(args.epochs)]
        print(f"| {where} | {'window (default)' if shuffle is True else 'global'} | "
              f"{statistics.median(run['first_batch_s'] for run in runs):.2f} | "
              + " | ".join(f"{x:,.0f}" for x in per_epoch)
              + f" | {statistics.median(run['peak_rss_mb'] for run in runs):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
