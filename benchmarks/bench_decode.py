"""Decode serialized records: tfrecord-io's vectorized decoder against TensorFlow's parser and decode.py.

Data: ``bench_encode.make_table`` (N rows x 17 columns: 10 float, 5 int64, 1 string, 1 int64 label)
encoded by our encoder, as Examples, and as SequenceExamples of --steps rows each (category and
label the context, the 15 numbers one feature list each), in batches of --batch-records.  Each
parser gets a batch as its readers hand it over, made before the timing: ours an Arrow binary
array (what the chunk walk of ``read_batches`` and ``spark.read`` gives decode_batch), TensorFlow's
a string tensor (what ``TFRecordDataset`` gives ``parse_example``); each path turns a batch into
columns in memory:

    ours:      arrow_decode.decode_batch(records, schema)                  -> Arrow columns
               on the compiled core (native/src/scan.rs) and on the numpy one (wire_scan.py), the
               rows "native" and "numpy" (--core: one of them only)
    TF:        tf.io.parse_example(records, spec) + .numpy()               -> numpy arrays
               (spec: RaggedFeature per feature, which reads what ours reads -- any number of
               values, a missing feature -- and FixedLenFeature, make_dataset's for scalars);
               SequenceExamples: tf.io.parse_sequence_example, RaggedFeature everywhere
    decode.py: decode_record per record (pure Python), on the first --slow-records records

And the readers, the same records from a file (written once, in the page cache) into columns:

    ours:      read_batches(file, format="arrow")       -> Arrow batches of --batch-records
               (the chunk walk, both CRCs checked, then decode_batch; decode_threads default, and 1)
    TF:        TFRecordDataset(file).batch(n).map(parse_example, AUTOTUNE).prefetch(AUTOTUNE)
               -> numpy arrays (parse_sequence_example for SequenceExamples), tf.data's pipeline

Every path runs once per round, in the same order, --rounds rounds after a warm-up; the table
gives the median records/s and ours / TF.  TensorFlow's parser runs on as many threads as it
likes (its own pool); decode_batch on one, read_batches on its decode_threads: the CPU column
(process CPU time) says what each costs.
Run:  .venv/bin/python benchmarks/bench_decode.py
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from bench_encode import SCHEMA, make_table  # noqa: E402
from tfrecord_io.core import native  # noqa: E402
from tfrecord_io.core.arrow_decode import decode_batch  # noqa: E402
from tfrecord_io.core.codec import encode_examples, encode_sequence_examples  # noqa: E402
from tfrecord_io.core.decode import decode_record  # noqa: E402
from tfrecord_io.core.framing import frame_records  # noqa: E402
from tfrecord_io.engines.batches import _default_threads, read_batches  # noqa: E402
from tfrecord_io.core.schema import Schema  # noqa: E402

NUMBERS = [f.name for f in SCHEMA.features if f.name not in ("category", "label")]
SEQ_SCHEMA = Schema.from_dict({
    "record_type": "sequence_example", "group_by": "category",
    "context": [{"name": "category", "type": "string"}, {"name": "label", "type": "int64"}],
    "sequence": [{"name": f.name, "type": f.type} for f in SCHEMA.features if f.name in NUMBERS]})


def sequence_records(table: pa.Table, steps: int) -> list[bytes]:
    """Groups of ``steps`` consecutive rows as SequenceExamples."""
    groups = table.num_rows // steps
    offsets = pa.array(np.arange(groups + 1, dtype=np.int32) * steps)
    cols = {"category": table.column("category").combine_chunks().take(pa.array(np.arange(groups) * steps)),
            "label": table.column("label").combine_chunks().take(pa.array(np.arange(groups) * steps))}
    for name in NUMBERS:
        cols[name] = pa.ListArray.from_arrays(offsets, table.column(name).combine_chunks().slice(0, groups * steps))
    return encode_sequence_examples(pa.record_batch(cols), SEQ_SCHEMA).to_pylist()


def tf_paths():
    import tensorflow as tf

    dtype = {"int64": tf.int64, "float": tf.float32, "string": tf.string}
    ragged = {f.name: tf.io.RaggedFeature(dtype[f.type], row_splits_dtype=tf.int64) for f in SCHEMA.features}
    fixed = {f.name: tf.io.FixedLenFeature([], dtype[f.type]) for f in SCHEMA.features}
    ctx = {f.name: tf.io.RaggedFeature(dtype[f.type], row_splits_dtype=tf.int64) for f in SEQ_SCHEMA.context}
    seq = {f.name: tf.io.RaggedFeature(dtype[f.type], row_splits_dtype=tf.int64) for f in SEQ_SCHEMA.sequence}

    def numpy(tensors) -> None:
        for t in tensors.values():
            (t.flat_values if isinstance(t, tf.RaggedTensor) else t).numpy()

    def examples(spec):
        def run(batches):
            for b in batches:
                numpy(tf.io.parse_example(b, spec))
        return run

    def sequences(batches):
        for b in batches:
            c, s, _ = tf.io.parse_sequence_example(b, context_features=ctx, sequence_features=seq)
            numpy(c)
            numpy(s)

    return examples(ragged), examples(fixed), sequences


def write_files(examples: list[bytes], sequences: list[bytes]) -> tuple[str, str]:
    """The records framed into two files of a temporary directory (removed at exit)."""
    import atexit
    import shutil
    import tempfile

    root = tempfile.mkdtemp(prefix="bench-decode-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    paths = (os.path.join(root, "examples.tfrecord"), os.path.join(root, "sequences.tfrecord"))
    for path, records in zip(paths, (examples, sequences)):
        with open(path, "wb") as f:
            f.write(frame_records(pa.array(records, pa.binary())))
    return paths


def tf_readers(batch: int):
    """TensorFlow's reader of a file into columns: tf.data's pipeline as its guide writes it."""
    import tensorflow as tf

    dtype = {"int64": tf.int64, "float": tf.float32, "string": tf.string}

    def ragged(features):
        return {f.name: tf.io.RaggedFeature(dtype[f.type], row_splits_dtype=tf.int64) for f in features}

    specs = {"ragged": ragged(SCHEMA.features),
             "fixed": {f.name: tf.io.FixedLenFeature([], dtype[f.type]) for f in SCHEMA.features}}
    ctx, seq = ragged(SEQ_SCHEMA.context), ragged(SEQ_SCHEMA.sequence)
    parse = {"ragged": lambda b: tf.io.parse_example(b, specs["ragged"]),
             "fixed": lambda b: tf.io.parse_example(b, specs["fixed"]),
             "sequence": lambda b: tf.io.parse_sequence_example(b, context_features=ctx, sequence_features=seq)[:2]}

    def run(path: str, kind: str) -> None:
        ds = tf.data.TFRecordDataset(path).batch(batch).map(parse[kind], num_parallel_calls=tf.data.AUTOTUNE)
        for parsed in ds.prefetch(tf.data.AUTOTUNE):
            for tensors in (parsed if kind == "sequence" else (parsed,)):
                for t in tensors.values():
                    (t.flat_values if isinstance(t, tf.RaggedTensor) else t).numpy()
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=500_000)
    p.add_argument("--steps", type=int, default=20, help="rows per SequenceExample")
    p.add_argument("--batch-records", type=int, default=4096)
    p.add_argument("--slow-records", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--core", choices=["both", "native", "numpy"], default="both",
                   help="which record core(s) decode_batch runs on (both: a row each)")
    args = p.parse_args()
    cores = ["native", "numpy"] if args.core == "both" else [args.core]
    if native.available() is None and "native" in cores:
        if args.core == "native":
            p.error("the compiled core is not built (make check builds it)")
        cores.remove("native")

    table = make_table(args.rows)
    examples = encode_examples(table.combine_chunks().to_batches()[0], SCHEMA).to_pylist()
    sequences = sequence_records(table, args.steps)

    def batched(records):
        return [records[i:i + args.batch_records] for i in range(0, len(records), args.batch_records)]

    import tensorflow as tf

    ex_batches, seq_batches = batched(pa.array(examples, pa.binary())), batched(pa.array(sequences, pa.binary()))
    ex_tensors, seq_tensors = ([tf.constant(b.to_numpy(zero_copy_only=False)) for b in batches]
                               for batches in (ex_batches, seq_batches))
    tf_ragged, tf_fixed, tf_seq = tf_paths()
    files = write_files(examples, sequences)
    tf_reader = tf_readers(args.batch_records)
    def on(core, run):
        """``run`` on one record core."""
        if core == "native":
            return run

        def pure():
            with native.pure():
                run()
        return pure

    ours_rows = {"Example": f"tfrecord-io decode_batch, {cores[0]}",  # the rows the ratios are of
                 "SequenceExample": f"tfrecord-io decode_batch, {cores[0]}",
                 "Example file": "tfrecord-io read_batches", "SequenceExample file": "tfrecord-io read_batches"}

    def reader(path, schema, threads=None):
        def run():
            for _ in read_batches(path, batch_size=args.batch_records, format="arrow", schema=schema,
                                  decode_threads=threads):
                pass
        return on(cores[0], run)
    paths = {
        **{("Example", f"tfrecord-io decode_batch, {c}"): (
            len(examples), on(c, lambda: [decode_batch(b, SCHEMA) for b in ex_batches])) for c in cores},
        ("Example", "TF parse_example, RaggedFeature"): (len(examples), lambda: tf_ragged(ex_tensors)),
        ("Example", "TF parse_example, FixedLenFeature"): (len(examples), lambda: tf_fixed(ex_tensors)),
        ("Example", "decode.py decode_record"): (min(args.slow_records, len(examples)),
                                                 lambda: [decode_record(r) for r in examples[:args.slow_records]]),
        **{("SequenceExample", f"tfrecord-io decode_batch, {c}"): (
            len(sequences), on(c, lambda: [decode_batch(b, SEQ_SCHEMA) for b in seq_batches])) for c in cores},
        ("SequenceExample", "TF parse_sequence_example, RaggedFeature"): (len(sequences), lambda: tf_seq(seq_tensors)),
        ("SequenceExample", "decode.py decode_record"): (
            min(args.slow_records // args.steps, len(sequences)),
            lambda: [decode_record(r) for r in sequences[:args.slow_records // args.steps]]),
        ("Example file", "tfrecord-io read_batches"): (len(examples), reader(files[0], SCHEMA)),
        ("Example file", "tfrecord-io read_batches, decode_threads=1"): (len(examples), reader(files[0], SCHEMA, 1)),
        ("Example file", "tf.data + parse_example, RaggedFeature"): (len(examples),
                                                                     lambda: tf_reader(files[0], "ragged")),
        ("Example file", "tf.data + parse_example, FixedLenFeature"): (len(examples),
                                                                       lambda: tf_reader(files[0], "fixed")),
        ("SequenceExample file", "tfrecord-io read_batches"): (len(sequences), reader(files[1], SEQ_SCHEMA)),
        ("SequenceExample file", "tfrecord-io read_batches, decode_threads=1"): (
            len(sequences), reader(files[1], SEQ_SCHEMA, 1)),
        ("SequenceExample file", "tf.data + parse_sequence_example, RaggedFeature"): (
            len(sequences), lambda: tf_reader(files[1], "sequence")),
    }
    before = os.getloadavg()
    wall: dict = {k: [] for k in paths}
    cpu: dict = {k: [] for k in paths}
    for r in range(args.rounds + 1):  # round 0: warm-up
        for key, (n, run) in paths.items():
            w0, c0 = time.perf_counter(), time.process_time()
            run()
            if r:
                wall[key].append(n / (time.perf_counter() - w0))
                cpu[key].append(n / (time.process_time() - c0))
    print(f"\nbench_decode on {platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()}): "
          f"{args.rows:,} rows x 17 columns; {len(sequences):,} SequenceExamples of {args.steps} steps; "
          f"batches of {args.batch_records} records; median of {args.rounds} interleaved rounds\n")
    print(f"ours: decode_batch and read_batches on the {cores[0]} core (read_batches' default decode_threads: "
          f"{_default_threads()}); load average before: {before}, after: {os.getloadavg()}\n")
    print("| records | path | records/s | records/s per CPU second | ours / this (wall) | ours / this (CPU) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for kind in ours_rows:
        ours = (kind, ours_rows[kind])
        for key in (k for k in paths if k[0] == kind):
            w, c = statistics.median(wall[key]), statistics.median(cpu[key])
            rw = statistics.median(wall[ours]) / w
            rc = statistics.median(cpu[ours]) / c
            print(f"| {kind} | {key[1]} | {w:,.0f} | {c:,.0f} | {rw:.2f}x | {rc:.2f}x |")


if __name__ == "__main__":
    main()
