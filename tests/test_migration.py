"""docs/migrating-from-queue-runners.md, executed: the TF1 queue-runner pipeline users have and its
tf.data replacements yield the same values for the same CSV.

* ``tf1_queue_runner_batches``: ``string_input_producer`` + ``TextLineReader`` + ``decode_csv`` +
  ``tf.compat.v1.train.batch`` + ``Coordinator`` / ``start_queue_runners``, in graph mode
  (tf.compat.v1 still runs on TF 2.21).
* ``tfdata_csv_batches``: tf.data reading the same CSV with the same ``record_defaults``.
* ``make_dataset`` reading the CSV converted to TFRecords (the converters' CSV reader, encoder and
  output contract), from local disk and from a real HDFS.

TF 2.21 has no ``hdfs://`` filesystem, so the two CSV readers read the files from local disk; the
converted TFRecords are also read from HDFS, as the migrated code would.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import tensorflow as tf

from tfrecord_io.storage import output
from tfrecord_io.core.codec import encode_examples
from tfrecord_io.conversion.parsing import read_batches
from tfrecord_io.commands.demo_train import demo_rows, taxi_schema
from tfrecord_io.engines.loader import make_dataset

SCHEMA = taxi_schema()
COLUMNS = [f.name for f in SCHEMA.features]
LABEL = SCHEMA.label
DTYPES = {"float": tf.float32, "int64": tf.int64, "string": tf.string}


def record_defaults() -> list:
    """decode_csv's record_defaults from the schema: the default, or an empty tensor (= required)."""
    return [tf.constant([f.default] if f.default is not None else [], dtype=DTYPES[f.type])
            for f in SCHEMA.features]


def write_csv(directory: Path, files: int = 2, rows_per_file: int = 150) -> list[str]:
    """CSV with a header; cells of defaulted columns are sometimes empty (null -> default)."""
    directory.mkdir(parents=True, exist_ok=True)
    nullable = [f.name for f in SCHEMA.features if f.default is not None]
    paths = []
    for k in range(files):
        batch = demo_rows(k * rows_per_file, rows_per_file, seed=11).to_pydict()
        path = directory / f"trips-{k}.csv"
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(COLUMNS)
            for r in range(rows_per_file):
                cells = []
                for c in COLUMNS:
                    v = batch[c][r]
                    empty = c in nullable and (r + COLUMNS.index(c)) % 9 == 0
                    cells.append("" if empty else (f"{v:.6g}" if isinstance(v, float) else str(v)))
                w.writerow(cells)
        paths.append(str(path))
    return paths


# ---------------------------------------------------------------------------------------
# The three pipelines
# ---------------------------------------------------------------------------------------
def tf1_queue_runner_batches(files: list[str], batch_size: int) -> list[dict]:
    """The seed-era TF1 input pipeline, verbatim apart from the tf.compat.v1 prefix."""
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        filename_queue = tf1.train.string_input_producer(files, num_epochs=1, shuffle=False)
        reader = tf1.TextLineReader(skip_header_lines=1)
        _, line = reader.read(filename_queue)
        columns = tf1.decode_csv(line, record_defaults=record_defaults())
        features = dict(zip(COLUMNS, columns))
        batch = tf1.train.batch(features, batch_size=batch_size, num_threads=1, capacity=4 * batch_size,
                                allow_smaller_final_batch=True)
        init = [tf1.global_variables_initializer(), tf1.local_variables_initializer()]
    batches = []
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        coord = tf1.train.Coordinator()
        threads = tf1.train.start_queue_runners(sess=sess, coord=coord)
        try:
            while not coord.should_stop():
                batches.append(sess.run(batch))
        except tf.errors.OutOfRangeError:
            pass  # num_epochs=1: the filename queue is exhausted
        finally:
            coord.request_stop()
            coord.join(threads)
    return batches


def tfdata_csv_batches(files: list[str], batch_size: int) -> list[dict]:
    """tf.data on the same CSV: lines -> batch -> vectorized decode_csv (same record_defaults)."""
    defaults = record_defaults()

    def decode(lines):
        return dict(zip(COLUMNS, tf.io.decode_csv(lines, record_defaults=defaults)))

    ds = (tf.data.Dataset.from_tensor_slices(files)
          .interleave(lambda f: tf.data.TextLineDataset(f).skip(1), cycle_length=1)  # file order, like shuffle=False
          .batch(batch_size)
          .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))
    return [{k: v.numpy() for k, v in b.items()} for b in ds]


def csv_dataset_batches(files: list[str], batch_size: int) -> list[dict]:
    """The same with tf.data.experimental.CsvDataset (parses record by record)."""
    ds = tf.data.experimental.CsvDataset(files, record_defaults=record_defaults(), header=True)
    ds = ds.batch(batch_size).map(lambda *cols: dict(zip(COLUMNS, cols)))
    return [{k: v.numpy() for k, v in b.items()} for b in ds]


def convert(files: list[str], out: str) -> dict:
    """CSV -> TFRecords as the converters do it (parsing -> codec -> output contract), a shard per file."""
    shards = []
    for path in files:
        with open(path, "rb") as fh:
            parsed = list(read_batches(fh, SCHEMA, "csv", path))
        assert not [r for p in parsed for r in p.rejects], "the sample CSV converts without rejects"
        shards.append([encode_examples(p.rows, SCHEMA) for p in parsed if p.rows.num_rows])
    return output.write_output(out, shards, schema=SCHEMA, compression="gzip", engine="test")


def loader_batches(source: str, batch_size: int) -> list[dict]:
    """make_dataset in file order (shuffle=False, one file at a time), label put back as a column."""
    ds = make_dataset(source, batch_size=batch_size, shuffle=False, cycle_length=1)
    out = []
    for features, label in ds:
        b = {k: v.numpy() for k, v in features.items()}
        b[LABEL] = label.numpy()
        out.append(b)
    return out


def columns_of(batches: list[dict]) -> dict[str, np.ndarray]:
    return {c: np.concatenate([b[c] for b in batches]) for c in COLUMNS}


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray], what: str) -> None:
    for c in COLUMNS:
        x, y = a[c], b[c]
        assert len(x) == len(y), f"{what}: column {c}: {len(x)} vs {len(y)} rows"
        assert x.dtype == y.dtype, f"{what}: column {c}: {x.dtype} vs {y.dtype}"
        if x.dtype.kind == "f":
            assert x.dtype == y.dtype == np.float32, f"{what}: column {c}: {x.dtype} vs {y.dtype}"
            assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), f"{what}: column {c} differs"
        else:
            assert x.tolist() == y.tolist(), f"{what}: column {c} differs"


# ---------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------
def test_tf1_graph_mode_still_runs_on_tf2(tmp_path):
    """The queue-runner code users migrate from runs as it is on TF 2.21 (in a tf.Graph, through
    tf.compat.v1): the reference the other tests compare against is real, and eager stays on."""
    files = write_csv(tmp_path / "csv", files=2, rows_per_file=5)
    batches = tf1_queue_runner_batches(files, 4)
    assert [len(b["fare"]) for b in batches] == [4, 4, 2]  # allow_smaller_final_batch, num_epochs=1
    assert set(batches[0]) == set(COLUMNS)
    assert tf.__version__.startswith("2.") and tf.executing_eagerly()


def test_queue_runner_and_tfdata_yield_identical_values(tmp_path, hdfs):
    files = write_csv(tmp_path / "csv")
    out = str(tmp_path / "tfrecords")
    convert(files, out)
    hdfs_out = hdfs.uri("/migration/tfrecords")
    convert(files, hdfs_out)

    batch_size = 32
    queue = tf1_queue_runner_batches(files, batch_size)
    reference = columns_of(queue)
    assert len(reference["fare"]) == 300
    assert [len(b["fare"]) for b in queue] == [32] * 9 + [12]
    # Empty cells took their record_defaults: the columns below have some.
    assert (reference["temperature"] == 15.0).any() and (reference["payment_type"] == b"unknown").any()

    assert_same(reference, columns_of(tfdata_csv_batches(files, batch_size)), "tf.data TextLineDataset + decode_csv")
    assert_same(reference, columns_of(csv_dataset_batches(files, batch_size)), "tf.data CsvDataset")
    local = loader_batches(out, batch_size)
    assert [len(b["fare"]) for b in local] == [len(b["fare"]) for b in queue]
    assert_same(reference, columns_of(local), "make_dataset on local TFRecords")
    assert_same(reference, columns_of(loader_batches(hdfs_out, batch_size)), "make_dataset on HDFS TFRecords")


def test_shuffled_loader_yields_the_same_rows(tmp_path):
    """With shuffling (the default) the loader yields the same multiset of rows."""
    files = write_csv(tmp_path / "csv", files=3, rows_per_file=100)
    out = str(tmp_path / "tfrecords")
    convert(files, out)
    reference = columns_of(tf1_queue_runner_batches(files, 64))

    def rows(cols):
        return sorted(zip(*(cols[c].tolist() for c in COLUMNS)))

    ds = make_dataset(out, batch_size=64, seed=3)
    shuffled = []
    for features, label in ds:
        b = {k: v.numpy() for k, v in features.items()}
        b[LABEL] = label.numpy()
        shuffled.append(b)
    assert rows(columns_of(shuffled)) == rows(reference)
    assert columns_of(shuffled)["fare"].tolist() != reference["fare"].tolist()
