"""Encode + frame + write: tfrecord-io's vectorized encoder against the pure-Python path.

Data: N rows x 17 columns (10 float, 5 int64, 1 string, 1 int64 label), built in memory
before timing.  Both paths write an uncompressed TFRecord file to local disk.

    ours:      encode_framed(Arrow batch) -> TFRecordWriter.write_batch (what the writers run)
    baseline:  tf.train.Example per row -> SerializeToString -> tf.io.TFRecordWriter.write

The baseline runs on the first --baseline-rows rows (it is slow); both are reported as
records/s, and the ratio is ours / baseline.  Run:  .venv/bin/python benchmarks/bench_encode.py

``--stages`` also times each stage of our path alone, in CPU seconds of this one thread, beside
the floors a single core cannot go under on the same bytes (issue #22 item 4): a copy of the
serialized records (memory bandwidth), the CRC32C of each record (the C library the framing
calls), and the write of the framed bytes to the file.

``--cores`` runs the path with each record core in the same run (issue #30): the compiled one
(``tfrecord_io.core._native``) and the numpy one (``tfrecord_io.core.native.pure()``), alternating,
``--repeats`` rounds, each round also timing the pure-Python baseline; it prints the medians and
the median of the per-round ratios.  The compiled core runs twice: fused (``encode_framed``: each
record encoded straight into the framed stream) and in two passes (``encode_examples``, then
``write_batch`` frames the records: a second pass and a second copy).
Without ``--cores`` "ours" is whichever core this process
selected (``tfrecord-io --version`` says which; ``TFRECORD_IO_PURE=1`` forces numpy).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from tfrecord_io.core import native  # noqa: E402
from tfrecord_io.core.codec import encode_examples, encode_framed  # noqa: E402
from tfrecord_io.core.framing import TFRecordWriter  # noqa: E402
from tfrecord_io.core.schema import Schema  # noqa: E402
from tfrecord_io.engines.loader import parse_spec

SCHEMA = Schema.from_dict({
    "features": [{"name": f"f{i}", "type": "float"} for i in range(10)]
    + [{"name": f"i{i}", "type": "int64"} for i in range(5)]
    + [{"name": "category", "type": "string"}, {"name": "label", "type": "int64"}],
    "label": "label",
})


def make_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols = {f"f{i}": rng.normal(size=rows).astype(np.float32) for i in range(10)}
    cols.update({f"i{i}": rng.integers(-1_000_000, 1_000_000, rows) for i in range(5)})
    cols["category"] = pa.array(np.char.add("cat-", rng.integers(0, 5000, rows).astype(str)))
    cols["label"] = rng.integers(0, 2, rows)
    return pa.table(cols)


def run_ours(table: pa.Table, path: str, batch_rows: int, fused: bool = True) -> float:
    encode = encode_framed if fused else encode_examples
    t0 = time.perf_counter()
    with open(path, "wb") as f, TFRecordWriter(f) as w:
        for batch in table.to_batches(max_chunksize=batch_rows):
            w.write_batch(encode(batch, SCHEMA))
    return time.perf_counter() - t0


def stages(table: pa.Table, path: str, batch_rows: int, repeats: int) -> list[tuple[str, float]]:
    """(stage, best CPU seconds of ``repeats``) for each stage of run_ours alone, and the floors."""
    import google_crc32c

    from tfrecord_io.core.framing import frame_records

    batches = table.to_batches(max_chunksize=batch_rows)

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            fn()
            times.append(time.process_time() - t0)
        return min(times)

    encoded = [encode_examples(b, SCHEMA) for b in batches]
    framed = [frame_records(e) for e in encoded]
    payload = [np.frombuffer(e.buffers()[2], np.uint8) for e in encoded]
    records = [e.to_pylist() for e in encoded]

    def write():
        with open(path, "wb") as f:
            for data in framed:
                f.write(data)

    return [
        ("encode_framed (Arrow columns -> framed Examples, one pass)",
         best(lambda: [next(encode_framed(b, SCHEMA).parts()) for b in batches])),
        ("encode_examples (Arrow columns -> serialized Examples)", best(lambda: [encode_examples(b, SCHEMA)
                                                                              for b in batches])),
        ("frame_records (lengths, CRC32Cs, headers and footers)", best(lambda: [frame_records(e) for e in encoded])),
        ("write of the framed bytes to the file", best(write)),
        ("floor: one copy of the serialized bytes (memory bandwidth)", best(lambda: [p.copy() for p in payload])),
        ("floor: google_crc32c over each record", best(lambda: [google_crc32c.value(r) for rs in records
                                                                 for r in rs])),
    ]


def run_baseline(rows: list[dict], path: str) -> float:
    import tensorflow as tf

    names = [f.name for f in SCHEMA.features]
    kinds = {f.name: f.type for f in SCHEMA.features}
    t0 = time.perf_counter()
    with tf.io.TFRecordWriter(path) as w:
        for row in rows:
            feature = {}
            for name in names:
                v = row[name]
                if kinds[name] == "float":
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                elif kinds[name] == "int64":
                    feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                else:
                    feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return time.perf_counter() - t0


def same_content(ours: str, baseline: str, n: int) -> bool:
    """The first n records of both files parse to the same values."""
    import tensorflow as tf

    spec = parse_spec(SCHEMA)
    a = next(iter(tf.data.TFRecordDataset(ours).batch(n).map(lambda x: tf.io.parse_example(x, spec))))
    b = next(iter(tf.data.TFRecordDataset(baseline).batch(n).map(lambda x: tf.io.parse_example(x, spec))))
    return all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in spec)


def compare_cores(table: pa.Table, base_rows: list[dict], d: str, args) -> None:
    """Interleaved rounds: the compiled core, the numpy core and the pure-Python path, each round."""
    if native.available() is None:
        raise SystemExit("--cores: the compiled record core is not built (make check / pip install -e . with Rust)")
    import tensorflow  # noqa: F401  (imported before the rounds: its start-up is no round's CPU time)

    keys = ("native", "native2", "numpy", "python")
    paths = {k: os.path.join(d, f"{k}.tfrecord") for k in keys}
    rates: dict[str, list[float]] = {k: [] for k in keys}
    cpu_rates: dict[str, list[float]] = {k: [] for k in keys}  # records per CPU second
    for r in range(args.repeats):
        for core in (("native", "native2", "numpy") if r % 2 == 0 else ("numpy", "native2", "native")):
            cpu = time.process_time()
            if core == "numpy":
                with native.pure():
                    seconds = run_ours(table, paths[core], args.batch_rows)
            else:
                seconds = run_ours(table, paths[core], args.batch_rows, fused=core == "native")
            cpu_rates[core].append(args.rows / (time.process_time() - cpu))
            rates[core].append(args.rows / seconds)
        cpu = time.process_time()
        rates["python"].append(args.baseline_rows / run_baseline(base_rows, paths["python"]))
        cpu_rates["python"].append(args.baseline_rows / (time.process_time() - cpu))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s ({cpu_rates[k][-1]:,.0f}/CPU-s)"
                                               for k, v in rates.items()), flush=True)
    with open(paths["native"], "rb") as a, open(paths["native2"], "rb") as b, open(paths["numpy"], "rb") as c:
        identical = a.read() == b.read() == c.read()
    ok = same_content(paths["native"], paths["python"], min(1000, args.baseline_rows))

    def ratio(a: str, b: str, of=rates) -> float:
        return statistics.median(x / y for x, y in zip(of[a], of[b]))

    print(f"\nbench_encode --cores on {platform.node()} ({os.cpu_count()} cores, {platform.python_version()}), "
          f"{args.rows:,} rows x 17 columns, batches of {args.batch_rows}; {args.repeats} interleaved rounds")
    print(f"native (both) and numpy files byte-identical: {identical}; same values as the baseline: {ok}\n")
    print("| path | records/s, wall (median) | vs pure Python | records per CPU second (median) | vs pure Python |")
    print("| --- | ---: | ---: | ---: | ---: |")
    names = {"python": f"pure Python (tf.train.Example + tf.io.TFRecordWriter), {args.baseline_rows:,} rows",
             "numpy": "numpy core: encode_framed (encode, then frame) + TFRecordWriter",
             "native2": "compiled core (Rust), two passes: encode_examples, then TFRecordWriter frames",
             "native": "compiled core (Rust), fused: encode_framed + TFRecordWriter"}
    for k, name in names.items():
        print(f"| {name} | {statistics.median(rates[k]):,.0f} | {ratio(k, 'python'):.1f}x "
              f"| {statistics.median(cpu_rates[k]):,.0f} | {ratio(k, 'python', cpu_rates):.1f}x |")
    print(f"\ncompiled (fused) / numpy: {ratio('native', 'numpy'):.2f}x wall, "
          f"{ratio('native', 'numpy', cpu_rates):.2f}x CPU; fused / two passes: {ratio('native', 'native2'):.2f}x wall, "
          f"{ratio('native', 'native2', cpu_rates):.2f}x CPU (medians of the round ratios)")
    if not (identical and ok):
        raise SystemExit("the paths wrote different bytes or values")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--baseline-rows", type=int, default=100_000)
    p.add_argument("--batch-rows", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--stages", action="store_true", help="also time each stage of ours alone (CPU seconds)")
    p.add_argument("--cores", action="store_true", help="the compiled and the numpy record core, interleaved rounds")
    args = p.parse_args()

    table = make_table(args.rows)
    base_rows = table.slice(0, args.baseline_rows).to_pylist()
    if args.cores:
        with tempfile.TemporaryDirectory() as d:
            compare_cores(table, base_rows, d, args)
        return
    with tempfile.TemporaryDirectory() as d:
        ours_path, base_path = os.path.join(d, "ours.tfrecord"), os.path.join(d, "base.tfrecord")
        ours_t = [run_ours(table, ours_path, args.batch_rows) for _ in range(args.repeats)]
        base_t = [run_baseline(base_rows, base_path) for _ in range(max(1, args.repeats - 2))]
        ok = same_content(ours_path, base_path, min(1000, args.baseline_rows))
        ours_size = os.path.getsize(ours_path)
        split = stages(table, ours_path, args.batch_rows, args.repeats) if args.stages else []
    ours_rate = args.rows / statistics.median(ours_t)
    base_rate = args.baseline_rows / statistics.median(base_t)
    print(f"\nbench_encode on {platform.node()} ({os.cpu_count()} cores, {platform.python_version()}), "
          f"{args.rows:,} rows x 17 columns, batches of {args.batch_rows}; median of {args.repeats} runs; "
          f"record core: {native.description()}")
    print(f"same values as the baseline for the first records: {ok}; our file: {ours_size / 1e6:.1f} MB\n")
    print("| path | records/s | ratio |")
    print("| --- | ---: | ---: |")
    print(f"| pure Python (tf.train.Example + tf.io.TFRecordWriter), {args.baseline_rows:,} rows "
          f"| {base_rate:,.0f} | 1.0x |")
    print(f"| tfrecord-io encode_framed + TFRecordWriter | {ours_rate:,.0f} | {ours_rate / base_rate:.1f}x |")
    if split:
        print(f"\nStages of ours alone, {args.rows:,} records, best of {args.repeats} (CPU seconds of one thread):\n")
        print("| stage | CPU s | records/s |")
        print("| --- | ---: | ---: |")
        for name, cpu in split:
            print(f"| {name} | {cpu:.3f} | {args.rows / cpu:,.0f} |")
    if not ok:
        raise SystemExit("the two paths wrote different values")


if __name__ == "__main__":
    main()
