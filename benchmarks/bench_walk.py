"""The record walk of ``verify`` and ``index`` against reading the file's bytes (issue #30).

Two uncompressed files, written before timing: bench_encode's 1M x 17 records (~313 B each,
the converter's output) and bench_index's file of mixed record sizes (a few KiB, a few 8 MiB;
``--mb``).  Each round, in alternating order, times on each file (all in the page cache):

* the floor: reading the file's bytes in 1 MiB reads, as the walks read it;
* the CRC floor: the same reads, each read's CRC-32C computed as one stream (``google_crc32c``,
  hardware CRC instructions).  A walk that checks every record's data CRC cannot cost less than
  this: the last column reports each walk against it;
* ``iter_record_lengths``: the header walk of ``tfrecord-io index`` (length CRCs checked);
* ``storage.index.build_index``: ``tfrecord-io index`` itself (the walk, then the index file);
* ``iter_records(verify=True)``: the record-at-a-time CRC walk (both CRCs of every record, each
  record's bytes handed on as an object);
* ``iter_record_chunks(gather=False)``: verify's CRC walk -- both CRCs and every length checked a
  read at a time, offsets handed back, no object per record (``tfrecord-io verify`` without a schema);
* ``iter_record_chunks`` + ``chunk_records``: the same, each chunk's records gathered into one
  buffer as an Arrow array -- what verify's schema check is handed;
* ``tfrecord-io verify``'s work on the file (``verify._verify_file`` with bench_encode's schema, in
  this process): the read above, the file's CRC-32C, and the vectorized decoder's check of every
  record against the schema (``wire_scan.scan_batch``) -- its parts are the rows above and
  ``scan_batch`` over the chunks alone (timed with both cores' walk; the decoder is the same);

with the compiled record core and with the numpy one (``native.pure()``).  Prints the median
MB/s of each and its median ratio to the floor of the same round.

    .venv/bin/python benchmarks/bench_walk.py [--rows 1000000] [--mb 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_encode import SCHEMA, make_table  # noqa: E402
from tfrecord_io.core import checksum, native  # noqa: E402
from tfrecord_io.core.codec import encode_examples  # noqa: E402
from tfrecord_io.commands import verify  # noqa: E402
from tfrecord_io.core.framing import (  # noqa: E402
    TFRecordWriter, chunk_records, iter_record_chunks, iter_record_lengths, iter_records)
from tfrecord_io.core.wire_scan import scan_batch  # noqa: E402
from tfrecord_io.storage.sources import SourceFile  # noqa: E402
from tfrecord_io.storage.index import build_index  # noqa: E402


def small_records(path: str, rows: int) -> None:
    with TFRecordWriter(path) as w:
        for batch in make_table(rows).to_batches(max_chunksize=8192):
            w.write_batch(encode_examples(batch, SCHEMA))


def mixed_records(path: str, mb: int) -> None:
    """bench_index's file (there written by TensorFlow; the bytes are the same)."""
    rng = np.random.default_rng(0)
    written = 0
    with TFRecordWriter(path) as w:
        while written < mb << 20:
            n = 8 << 20 if rng.random() < 0.002 else int(rng.integers(100, 8 << 10))
            w.write(rng.bytes(16) * (n // 16))
            written += n // 16 * 16 + 16


def read_bytes(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def read_and_crc(path: str) -> None:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = checksum.extend(crc, chunk)


def lengths(path: str) -> None:
    for _ in iter_record_lengths(path):
        pass


def index(path: str) -> None:
    build_index(path, "none", overwrite=True)


def verify_walk(path: str) -> None:
    for _ in iter_records(path, verify=True):
        pass


def chunk_walk(path: str) -> None:
    for _ in iter_record_chunks(path, gather=False):
        pass


def chunk_read(path: str) -> None:
    for _, lens, data in iter_record_chunks(path):
        chunk_records(lens, data)


_CHUNKS: dict[str, list] = {}


def decoder_only(path: str) -> None:
    """scan_batch over the file's chunks, read beforehand (the decoder's part of verify alone)."""
    if path not in _CHUNKS:
        _CHUNKS[path] = [chunk_records(lens, data) for _, lens, data in iter_record_chunks(path)]
    for chunk in _CHUNKS[path]:
        scan_batch(chunk)


def verify_file(path: str) -> None:
    found = verify._verify_file(SourceFile(path, os.path.basename(path), "none"), SCHEMA, None)
    if found.problem_count or not found.framing_ok:
        raise SystemExit(f"verify found problems in {path}: {found.problems[:3]}")


CRC_FLOOR = "read + CRC-32C of the bytes (the CRC floor)"
WALKS = {"read the bytes (floor)": read_bytes, CRC_FLOOR: read_and_crc, "iter_record_lengths (index's walk)": lengths,
         "tfrecord-io index (build_index)": index, "iter_records, verify=True (record at a time)": verify_walk,
         "iter_record_chunks, gather=False (verify's CRC walk)": chunk_walk,
         "iter_record_chunks + chunk_records (verify's read)": chunk_read,
         "scan_batch over the chunks (verify's decoder alone)": decoder_only,
         "verify._verify_file with the schema (verify's work)": verify_file}
SMALL_ONLY = {decoder_only, verify_file}  # the schema is bench_encode's: the mixed file's records are not Examples


def timed(fn, path: str) -> float:
    t0 = time.perf_counter()
    fn(path)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if native.available() is None:
        raise SystemExit("the compiled record core is not built (make check / pip install -e . with Rust)")
    with tempfile.TemporaryDirectory(prefix="bench-walk-") as tmp:
        files = {f"{args.rows:,} records of bench_encode": os.path.join(tmp, "small.tfrecord"),
                 f"{args.mb} MiB of mixed records": os.path.join(tmp, "mixed.tfrecord")}
        paths = list(files.values())
        small_records(paths[0], args.rows)
        mixed_records(paths[1], args.mb)
        sizes = {name: os.path.getsize(p) for name, p in files.items()}
        seconds: dict[tuple[str, str, str], list[float]] = {}
        for r in range(args.rounds):
            for name, path in files.items():
                read_bytes(path)  # into the page cache
                for walk, fn in (WALKS.items() if r % 2 == 0 else reversed(WALKS.items())):
                    if fn in SMALL_ONLY and path != paths[0]:
                        continue
                    cores = ("native", "numpy") if fn not in (read_bytes, read_and_crc) else ("-",)
                    for core in (cores if r % 2 == 0 else tuple(reversed(cores))):
                        if core == "numpy":
                            with native.pure():
                                s = timed(fn, path)
                        else:
                            s = timed(fn, path)
                        seconds.setdefault((name, walk, core), []).append(s)
            print(f"  round {r + 1} done", flush=True)
    print(f"\nbench_walk on {platform.node()}, load average {os.getloadavg()[0]:.1f} at the end "
          f"({os.cpu_count()} cores, Python {platform.python_version()}), "
          f"{args.rounds} interleaved rounds, files in the page cache\n")
    print("| file | walk | core | MB/s (median) | vs reading the bytes (median of round ratios) "
          "| vs the CRC floor (median of round ratios) |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for name in files:
        floor = seconds[(name, "read the bytes (floor)", "-")]
        crc_floor = seconds[(name, CRC_FLOOR, "-")]
        for (fname, walk, core), times in seconds.items():
            if fname != name:
                continue
            ratio = statistics.median(f / t for f, t in zip(floor, times))
            vs_crc = statistics.median(f / t for f, t in zip(crc_floor, times))
            print(f"| {name} ({sizes[name] / 1e6:,.0f} MB) | {walk} | {core} | "
                  f"{sizes[name] / 1e6 / statistics.median(times):,.0f} | {ratio:.2f}x | {vs_crc:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
