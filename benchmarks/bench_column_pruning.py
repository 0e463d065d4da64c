"""Column pruning: the decoder's cost with the features read, not the features stored (issue #29 item 3).

``spark.read.format("tfrecord").option("features", "a,b")`` and ``read_batches(features=[...])``
decode the features named only (``tfrecord_io.core.arrow_decode.decode_batch(features=)``): the
others are checked by their wire structure, their values never read, because a record that is not
a valid Example is refused whatever is asked (``tests/test_arrow_decode.py``: a record damaged in a
feature not asked for).  This decodes the same records of ``conf/taxi.yaml`` (17 features) with all
of them, 8, 4 and 1, in interleaved rounds, and reports each against decoding all 17 in the same
round (median).

    .venv/bin/python benchmarks/bench_column_pruning.py --rows 200000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tfrecord_io.commands.demo_train import demo_rows, taxi_schema  # noqa: E402
from tfrecord_io.core.arrow_decode import decode_batch  # noqa: E402
from tfrecord_io.core.codec import encode_examples  # noqa: E402

FOUR = ["fare", "trip_miles", "payment_type", "tipped"]
CHOICES = {"all 17": None, "8": FOUR + ["trip_seconds", "hour", "pickup_lat", "pickup_area"], "4": FOUR, "1": ["fare"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batch", type=int, default=8192, help="records per decode call (spark.read's batch)")
    args = ap.parse_args(argv)
    schema = taxi_schema()
    records = encode_examples(demo_rows(0, args.rows, seed=1), schema).to_pylist()
    batches = [records[i:i + args.batch] for i in range(0, len(records), args.batch)]
    times: dict[str, list[float]] = {k: [] for k in CHOICES}
    for _ in range(args.rounds):
        for name, features in CHOICES.items():
            started = time.process_time()
            for b in batches:
                decode_batch(b, schema, features=features)
            times[name].append(time.process_time() - started)
    base = times["all 17"]
    print(f"| features decoded | CPU s per {args.rows:,} records (median) | vs all 17, same round (median) |")
    print("| --- | ---: | ---: |")
    for name, t in times.items():
        ratio = statistics.median(b / x for b, x in zip(base, t))
        print(f"| {name} | {statistics.median(t):.3f} | {ratio:.2f}x faster |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
