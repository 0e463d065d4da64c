"""Column pruning: the decoder's cost with the features read, not the features stored (issue #29 item 3).

``spark.read.format("tfrecord").option("features", "a,b")`` and ``read_batches(features=[...])``
decode the features named only (``tfrecord_io.core.arrow_decode.decode_batch(features=)``): the
others are checked by their wire structure, their values never read, because a record that is not
a valid Example is refused whatever is asked (``tests/test_arrow_decode.py``: a record damaged in a
feature not asked for).  This decodes the same records of ``conf/taxi.yaml`` (17 features) with all
of them, 8, 4 and 1, in interleaved rounds, and reports each against decoding all 17 in the same
round (median) -- on the compiled record core (native/src/scan.rs) and on the numpy one
(wire_scan.py), interleaved in the same rounds (--core: one of them only).  Each batch is handed
over as the readers hand it (spark.read and read_batches: an Arrow binary array of the chunk's
records, no copy).

TensorFlow's parser is the reference for what pruning can save: ``tf.io.parse_example`` with a
``RaggedFeature`` spec of the same features, on the same records already in string tensors (rows
"tf"; --no-tf leaves them out).  Any parser of these records walks every stored feature's map entry
to find the ones asked for, so neither reaches 17x for 1 of 17: the tf rows show how close a parser
that does not check the unasked features comes.

    .venv/bin/python benchmarks/bench_column_pruning.py --rows 200000 --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tfrecord_io.commands.demo_train import demo_rows, taxi_schema  # noqa: E402
from tfrecord_io.core import native  # noqa: E402
from tfrecord_io.core.arrow_decode import decode_batch  # noqa: E402
from tfrecord_io.core.codec import encode_examples  # noqa: E402

FOUR = ["fare", "trip_miles", "payment_type", "tipped"]
CHOICES = {"all 17": None, "8": FOUR + ["trip_seconds", "hour", "pickup_lat", "pickup_area"], "4": FOUR, "1": ["fare"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batch", type=int, default=8192, help="records per decode call (spark.read's batch)")
    ap.add_argument("--core", choices=["both", "native", "numpy"], default="both",
                    help="which record core(s) decode_batch runs on (both: rows for each)")
    ap.add_argument("--no-tf", action="store_true", help="leave out TensorFlow's parser (rows 'tf')")
    args = ap.parse_args(argv)
    cores = ["native", "numpy"] if args.core == "both" else [args.core]
    if native.available() is None and "native" in cores:
        if args.core == "native":
            ap.error("the compiled core is not built (make check builds it)")
        cores.remove("native")
    schema = taxi_schema()
    records = encode_examples(demo_rows(0, args.rows, seed=1), schema)
    batches = [records.slice(i, args.batch) for i in range(0, len(records), args.batch)]
    runs = {core: lambda features: [decode_batch(b, schema, features=features) for b in batches] for core in cores}
    if not args.no_tf:
        runs["tf"] = tf_parse(schema, batches)
    times: dict[tuple[str, str], list[float]] = {(c, k): [] for c in runs for k in CHOICES}
    before = os.getloadavg()
    for _ in range(args.rounds):
        for core, run in runs.items():
            for name, features in CHOICES.items():
                with native.pure() if core == "numpy" else contextlib.nullcontext():
                    started = time.process_time()
                    run(features)
                    times[core, name].append(time.process_time() - started)
    print(f"load average before: {before}, after: {os.getloadavg()}\n")
    print(f"| core | features decoded | CPU s per {args.rows:,} records (median) | vs all 17, same core and round "
          f"(median) | {cores[-1]} / {cores[0]}, same round (median) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for (core, name), t in times.items():
        base = times[core, "all 17"]
        ratio = statistics.median(b / x for b, x in zip(base, t))
        other = "-" if core not in cores else \
            f"{statistics.median(o / x for o, x in zip(times[cores[-1], name], times[cores[0], name])):.2f}x"
        print(f"| {core} | {name} | {statistics.median(t):.3f} | {ratio:.2f}x faster | {other} |")
    return 0


def tf_parse(schema, batches):
    """TensorFlow's parser over the same batches (string tensors made once, outside the timing):
    a function of the features asked (None: all)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    dtype = {"int64": tf.int64, "float": tf.float32, "string": tf.string, "bytes": tf.string}
    tensors = [tf.constant(b.to_numpy(zero_copy_only=False)) for b in batches]

    def run(features):
        names = features if features is not None else [f.name for f in schema.input_features]
        spec = {n: tf.io.RaggedFeature(dtype[schema.feature(n).type], row_splits_dtype=tf.int64) for n in names}
        for t in tensors:
            for v in tf.io.parse_example(t, spec).values():
                (v.flat_values if isinstance(v, tf.RaggedTensor) else v).numpy()
    return run


if __name__ == "__main__":
    sys.exit(main())
