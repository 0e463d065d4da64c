"""Wide tables: N scalar features against one gathered ``[N]`` feature (issue #29 item 4).

Writes a synthetic numeric CSV (``--rows`` rows of an ``id``, ``--columns`` float columns
``V1`` .. ``VN`` and a 0/1 ``label``, the layout of a 2,308-column table), converts it twice
with the Beam pipeline in this process (``FnApiRunner``) -- once with a feature per column
(``infer-schema --no-gather``'s schema) and once with the columns gathered into one ``[N]``
feature (``infer-schema``'s proposal) -- and reports, from the same run:

* the bytes of the TFRecord shards against the raw float32 values (rows x N x 4 bytes);
* the wall time of ``keras_inputs(output)`` (the schema, a sample of records for the
  preprocessing, a ``keras.Input`` per feature), and of the conversion itself.

    .venv/bin/python benchmarks/bench_wide.py --rows 5000 --columns 2308
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tfrecord_io.commands.infer import infer_columns, schema_yaml  # noqa: E402
from tfrecord_io.core.schema import CsvOptions  # noqa: E402
from tfrecord_io.storage import output  # noqa: E402


def write_csv(path: Path, rows: int, columns: int) -> None:
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        f.write(",".join(["id"] + [f"V{j}" for j in range(1, columns + 1)] + ["label"]) + "\n")
        for start in range(0, rows, 500):
            block = rng.normal(size=(min(500, rows - start), columns)).astype(np.float32)
            for i, row in enumerate(block, start):
                f.write(f"{i}," + ",".join(f"{v:.6g}" for v in row) + f",{i % 2}\n")


def convert(csv: Path, schema: Path, out: Path) -> float:
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io import beam

    started = time.perf_counter()
    beam.run_conversion(beam.ConversionOptions(inputs=str(csv), input_format="csv", schema=str(schema),
                                               output=str(out), num_shards=1),
                        PipelineOptions(["--runner=FnApiRunner"]))
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--columns", type=int, default=2308)
    args = ap.parse_args(argv)
    from tfrecord_io.engines.keras_inputs import keras_inputs

    work = Path(tempfile.mkdtemp(prefix="bench-wide-"))
    try:
        csv = work / "wide.csv"
        write_csv(csv, args.rows, args.columns)
        cols = infer_columns(str(csv), "csv", sample_rows=1000)
        results = {}
        for name, gather in (("scalar features", False), ("gathered [N]", True)):
            schema = work / f"{gather}.yaml"
            schema.write_text(schema_yaml(cols, "csv", CsvOptions(), 1000, gather=gather).replace(
                "csv: {", "label: label\ncsv: {"))
            out = work / f"out-{gather}"
            seconds = convert(csv, schema, out)
            manifest = output.read_manifest(str(out))
            shard_bytes = sum(f["bytes"] for f in manifest["files"])
            started = time.perf_counter()
            prep = keras_inputs(str(out), task="binary")
            built = time.perf_counter() - started
            results[name] = (len(manifest["schema"]["features"]), len(prep.inputs), shard_bytes, seconds, built)
        raw = args.rows * args.columns * 4
        print(f"{args.rows:,} rows x {args.columns:,} float columns (+ id, label); raw float32 values: "
              f"{raw / 1e6:.1f} MB; CSV {csv.stat().st_size / 1e6:.1f} MB")
        print("| schema | features | Keras inputs | shard MB | vs raw floats | convert s | keras_inputs s |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, (features, inputs, size, seconds, built) in results.items():
            print(f"| {name} | {features:,} | {inputs:,} | {size / 1e6:.1f} | {size / raw:.2f}x | {seconds:.1f} | "
                  f"{built:.2f} |")
        (_, _, s_bytes, s_conv, s_keras), (_, _, g_bytes, g_conv, g_keras) = results.values()
        print(f"gathered vs scalar, same run: bytes {s_bytes / g_bytes:.2f}x smaller, keras_inputs "
              f"{s_keras / g_keras:.1f}x faster, conversion {s_conv / g_conv:.1f}x faster")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
