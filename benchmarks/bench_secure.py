"""The loader on a kerberized HDFS against the same loader on a plain one, in the same run.

Three local clusters (``tfrecord_io.clusters.hdfs_local``, 128 MiB blocks, one DataNode, all on
this machine's cores) hold the same output -- N rows (default 1,000,000) of the demo schema in S
shards (default 8):

    plain           no security
    authentication  Kerberos, block tokens, SASL on data transfer at ``authentication``
    privacy         the same at ``privacy`` (RPC and block data encrypted: AES/CTR)

Each round reads the whole output once with ``make_dataset(batch_size=1024, shuffle=False)`` from
each cluster, in turn (the order rotates every round); a client of a secure cluster runs with its
ticket cache.  Reported: records/s per cluster (median of the rounds) and the ratio to the plain
cluster.  Every pass is checked to hold every record.  The machine is shared and noisy: the
ratio is the number to read, not the rates.

    .venv/bin/python benchmarks/bench_secure.py [--rows 1000000] [--shards 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# One pass in a process of its own, with only the cluster's environment: as a trainer runs.
PASS = """
import sys, time
import numpy as np
from tfrecord_io import make_dataset
began = time.monotonic()
n = 0
for features, label in make_dataset(sys.argv[1], batch_size=1024, shuffle=False):
    n += int(label.shape[0])
print(n, time.monotonic() - began)
"""


def one_pass(cluster, out: str) -> tuple[int, float]:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"), "TF_CPP_MIN_LOG_LEVEL": "3",
           **cluster.env()}
    proc = subprocess.run([sys.executable, "-c", PASS, out], env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"the pass over {out} failed:\n{proc.stderr[-3000:]}")
    n, seconds = proc.stdout.split()[-2:]
    return int(n), float(seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)

    from tfrecord_io.clusters import hdfs_local
    from tfrecord_io.commands.demo_train import make_demo_output

    work = Path(tempfile.mkdtemp(prefix="bench-secure-"))
    kinds = {"plain": {}, "authentication": {"kerberos": True},
             "privacy": {"kerberos": True, "data_protection": "privacy"}}
    clusters = {}
    try:
        for name, options in kinds.items():
            clusters[name] = hdfs_local.start(work / name, detach=False, block_size=hdfs_local.HDFS_DEFAULT_BLOCK_SIZE,
                                              **options)
        outputs = {}
        local = str(work / "local-output")
        make_demo_output(local, rows=args.rows, shards=args.shards)
        for name, cluster in clusters.items():
            out = cluster.uri("/bench/trips")
            env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"), **cluster.env()}
            subprocess.run([sys.executable, "-c", "import sys, os\nfrom tfrecord_io.storage import fs\n"
                            "src, dst = sys.argv[1:3]\nfor name in sorted(os.listdir(src)):\n"
                            "    with open(os.path.join(src, name), 'rb') as a, fs.open(dst + '/' + name, 'wb') as b:\n"
                            "        b.write(a.read())\n", local, out], env=env, check=True, timeout=1800)
            outputs[name] = out
        rates: dict[str, list[float]] = {name: [] for name in clusters}
        names = list(clusters)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                n, seconds = one_pass(clusters[name], outputs[name])
                if n != args.rows:
                    raise RuntimeError(f"{name}: a pass read {n} of {args.rows} records")
                rates[name].append(n / seconds)
    finally:
        for cluster in clusters.values():
            cluster.stop()
    plain = statistics.median(rates["plain"])
    print(f"\n{args.rows:,} rows of the demo schema in {args.shards} shards, 128 MiB blocks, one DataNode; "
          f"median of {args.rounds} rounds; {platform.machine()}, {os.cpu_count()} CPUs\n")
    print("| cluster | records/s | vs plain |\n| --- | ---: | ---: |")
    for name in names:
        median = statistics.median(rates[name])
        print(f"| {name} | {median:,.0f} | {median / plain:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
