"""Beam's HDFS I/O: Beam's own HadoopFileSystem (WebHDFS, the ``hdfs`` package) against the
hdfs-native path our Beam pipeline now uses (``tfrecord_io.storage.fs``), in the same run.

A local HDFS (``tfrecord_io.clusters.hdfs_local``, 128 MiB blocks, NameNode and DataNode on this
machine's cores) takes ``--mb`` MiB files written and read back, each way in turn, ``--rounds``
rounds (the order alternates):

    beam-webhdfs   apache_beam.io.hadoopfilesystem.HadoopFileSystem(hdfs_host, hdfs_port, hdfs_user)
                   .create(path) / .open(path): what Beam's TFRecord sink and source call on hdfs://
    hdfs-native    tfrecord_io.storage.fs.open(uri, "wb" / "rb"): what our sink and source call

Writes are in 1 MiB pieces (a shard writer's flushes), reads in 1 MiB pieces to the end.  Every
file read back is compared with what was written (CRC-32C).  Reported: the median MB/s of each
way and hdfs-native / WebHDFS.  WebHDFS has no Kerberos in Beam (apache/beam#20719), so the
secure side has only one contender; this is the plain cluster.

    .venv/bin/python benchmarks/bench_beam_hdfs.py [--mb 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PIECE = 1 << 20


def payload(mb: int) -> bytes:
    return os.urandom(PIECE) * mb  # incompressible pieces; size is what matters


def timed_write(open_for_write, data: bytes) -> float:
    started = time.perf_counter()
    f = open_for_write()
    view = memoryview(data)
    for i in range(0, len(data), PIECE):
        f.write(view[i:i + PIECE].tobytes())
    f.close()
    return time.perf_counter() - started


def timed_read(open_for_read) -> tuple[float, int]:
    import google_crc32c

    started = time.perf_counter()
    f = open_for_read()
    crc = 0
    while piece := f.read(PIECE):
        crc = google_crc32c.extend(crc, piece)
    f.close()
    return time.perf_counter() - started, crc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import google_crc32c
    from apache_beam.io.hadoopfilesystem import HadoopFileSystem
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.clusters import hdfs_local
    from tfrecord_io.storage import fs

    data = payload(args.mb)
    want = google_crc32c.value(data)
    print(f"bench_beam_hdfs: {args.mb} MiB files, {args.rounds} rounds; {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-beam-hdfs-") as work:
        cluster = hdfs_local.start(Path(work) / "hdfs", detach=False, block_size=hdfs_local.HDFS_DEFAULT_BLOCK_SIZE)
        try:
            web = urlsplit(cluster.webhdfs_url)
            beam_fs = HadoopFileSystem(PipelineOptions(hdfs_host=web.hostname, hdfs_port=web.port,
                                                       hdfs_user=cluster.user))
            ways = {
                "beam-webhdfs": (lambda p: (lambda: beam_fs.create(p)), lambda p: (lambda: beam_fs.open(p))),
                "hdfs-native": (lambda p: (lambda: fs.open(p, "wb")), lambda p: (lambda: fs.open(p, "rb"))),
            }
            times: dict[str, dict[str, list[float]]] = {w: {"write": [], "read": []} for w in ways}
            for r in range(args.rounds):
                order = list(ways) if r % 2 == 0 else list(reversed(ways))
                for way in order:
                    uri = cluster.uri(f"/bench/{way}-{r}.bin")
                    path = uri if way == "hdfs-native" else "hdfs://" + uri.split("/", 3)[3]
                    writer, reader = ways[way]
                    w = timed_write(writer(path), data)
                    t, crc = timed_read(reader(path))
                    if crc != want:
                        raise RuntimeError(f"{way}: {path} read back other bytes")
                    times[way]["write"].append(w)
                    times[way]["read"].append(t)
                    print(f"  {way} (round {r + 1}): write {args.mb / w:,.0f} MB/s, read {args.mb / t:,.0f} MB/s",
                          flush=True)
                    fs.delete(uri)
        finally:
            cluster.stop()

    def rate(way, op):
        return args.mb / statistics.median(times[way][op])

    print(f"\n### Beam's HDFS I/O: {args.mb} MiB files, median of {args.rounds} rounds\n")
    print("| operation | Beam HadoopFileSystem (WebHDFS), MB/s | hdfs-native (ours), MB/s | ours / Beam's |")
    print("| --- | ---: | ---: | ---: |")
    for op in ("write", "read"):
        b, o = rate("beam-webhdfs", op), rate("hdfs-native", op)
        print(f"| {op} | {b:,.0f} | {o:,.0f} | **{o / b:.2f}x** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
