"""The tf.data loader (tfrecord_io.engines.loader) against real TensorFlow, real Beam and a real HDFS.

Files come from three writers: TensorFlow's own ``tf.io.TFRecordWriter`` (each compression),
Beam's ``WriteToTFRecord`` and our output contract (``output.write_shard`` + ``output.commit``).
Every test compares what the loader yields with values computed here from the rows written.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import re
import struct
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

import tfrecord_io
from tfrecord_io.storage import fs, output
from tfrecord_io.core.codec import encode_examples, encode_sequence_examples
from tfrecord_io.core.schema import Schema
from tfrecord_io.core.framing import CorruptRecordError
from tfrecord_io.engines.loader.options import CHUNK_RECORDS
from tfrecord_io.engines.loader import AUTOTUNE_MIN_CPUS, LoaderOptions, LoaderStats, input_fn, make_dataset, steps_per_epoch
from tfrecord_io.storage.index import build_index
from tfrecord_io.storage.schema_io import load_schema
from helpers import TF_COMPRESSION

SCHEMA = Schema.from_dict({
    "record_type": "example",
    "features": [
        {"name": "id", "type": "int64", "required": True},
        {"name": "x", "type": "float", "default": -1.0},
        {"name": "city", "type": "string", "default": "?"},
        {"name": "pair", "type": "float", "shape": [2], "default": [7.0, 8.0]},
        {"name": "tags", "type": "int64", "shape": [-1]},
        {"name": "y", "type": "int64", "default": 0},
    ],
    "label": "y",
})
EXT = {"none": "", "gzip": ".gz", "zlib": ".zlib"}


# ---------------------------------------------------------------------------------------
# Data: rows with nulls and empty lists, and what the loader must yield for each
# ---------------------------------------------------------------------------------------
def rows(start: int, n: int) -> pa.RecordBatch:
    ids = list(range(start, start + n))
    return pa.RecordBatch.from_pydict({
        "id": ids,
        "x": [None if i % 7 == 3 else i * 0.5 for i in ids],
        "city": [None if i % 11 == 4 else f"c{i % 5}" for i in ids],
        "pair": [None if i % 13 == 5 else [float(i), float(-i)] for i in ids],
        "tags": [None if i % 6 == 1 else list(range(i % 4)) for i in ids],  # i % 4 == 0: empty list
        "y": [None if i % 17 == 9 else i % 3 for i in ids],
    }, schema=SCHEMA.arrow_schema())


def expected(i: int) -> dict:
    """What the loader yields for row ``i``: schema defaults for missing values, [] for ragged."""
    return {
        "x": -1.0 if i % 7 == 3 else i * 0.5,
        "city": b"?" if i % 11 == 4 else f"c{i % 5}".encode(),
        "pair": [7.0, 8.0] if i % 13 == 5 else [float(i), float(-i)],
        "tags": [] if i % 6 == 1 else list(range(i % 4)),
        "y": 0 if i % 17 == 9 else i % 3,
    }


def records(start: int, n: int) -> list[bytes]:
    return encode_examples(rows(start, n), SCHEMA).to_pylist()


def unbatch(ds) -> list[tuple[int, dict]]:
    """(id, values) for every record the dataset yields, in order."""
    out = []
    for features, label in ds:
        ids = features["id"].numpy()
        x, city, pair = features["x"].numpy(), features["city"].numpy(), features["pair"].numpy()
        tags, y = features["tags"].to_list(), label.numpy()
        for j, i in enumerate(ids):
            out.append((int(i), {"x": float(x[j]), "city": city[j], "pair": pair[j].tolist(),
                                 "tags": tags[j], "y": int(y[j])}))
    return out


def assert_all_once(got: list[tuple[int, dict]], ids) -> None:
    counts = Counter(i for i, _ in got)
    assert sorted(counts) == sorted(ids), "the loader did not yield exactly the records written"
    assert set(counts.values()) == {1}, f"records read more than once: {[i for i, c in counts.items() if c > 1][:5]}"
    for i, values in got:
        assert values == expected(i), f"record {i}"


# ---------------------------------------------------------------------------------------
# Writers
# ---------------------------------------------------------------------------------------
def write_tf(path: str, recs: list[bytes], compression: str = "none") -> str:
    """With TensorFlow's own writer (local paths only: TF 2.21 has no hdfs filesystem)."""
    with tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(compression_type=TF_COMPRESSION[compression])) as w:
        for r in recs:
            w.write(r)
    return path


def write_output(out: str, shards: list[tuple[int, int]], compression: str = "none", schema=SCHEMA) -> dict:
    """Our output contract (the converters' layout): one shard per (start, n) of rows; local or hdfs://."""
    return output.write_output(out, [[encode_examples(rows(start, n), schema)] if n else [] for start, n in shards],
                               schema=schema, compression=compression, engine="test")


def upload(local: str, uri: str) -> str:
    with open(local, "rb") as src, fs.open(uri, "wb") as dst:
        dst.write(src.read())
    return uri


def record_offsets(data: bytes) -> list[int]:
    """Byte offset of each record's header in an uncompressed TFRecord stream."""
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        (length,) = struct.unpack_from("<Q", data, pos)
        pos += length + 16
    return offsets


def corrupt_record(path: str, index: int) -> int:
    """Flip a byte inside the data of record ``index`` of an uncompressed local file; its offset."""
    data = bytearray(Path(path).read_bytes())
    offset = record_offsets(bytes(data))[index]
    data[offset + 12 + 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    return offset


# ---------------------------------------------------------------------------------------
# Writers x compressions, local disk
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_reads_files_written_by_tensorflow(tmp_path, compression):
    for k in range(3):
        write_tf(str(tmp_path / f"data-{k}.tfrecord{EXT[compression]}"), records(100 * k, 100), compression)
    ds = make_dataset(str(tmp_path / "data-*"), schema=SCHEMA, batch_size=32, seed=1)
    assert_all_once(unbatch(ds), range(300))
    assert ds.loader_stats.files_read == 3 and ds.loader_stats.records_read == 300
    assert ds.loader_stats.corrupt_files == 0


def test_explicit_compression_overrides_the_file_name(tmp_path):
    path = write_tf(str(tmp_path / "gzipped-but-named-plain.tfrecord"), records(0, 50), "gzip")
    assert_all_once(unbatch(make_dataset(path, schema=SCHEMA, batch_size=16, compression="gzip")), range(50))


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_reads_files_written_by_beam(tmp_path, compression):
    import apache_beam as beam
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(["--runner=DirectRunner"])
    pipeline = beam.Pipeline(options=options)
    # Beam 2.77 resolves --runner=DirectRunner to SwitchingDirectRunner, which runs this
    # pipeline on the in-process FnApiRunner (result: fn_api_runner.fn_runner.RunnerResult);
    # asserted below so that a change of runner shows up here.
    assert type(pipeline.runner).__name__ == "SwitchingDirectRunner"
    _ = (pipeline | beam.Create(records(0, 240))
         | beam.io.WriteToTFRecord(str(tmp_path / "beam"), file_name_suffix=".tfrecord" + EXT[compression],
                                   num_shards=3, compression_type=CompressionTypes.AUTO))
    result = pipeline.run()
    result.wait_until_finish()
    assert type(result).__module__.startswith("apache_beam.runners.portability.fn_api_runner")
    files = sorted(tmp_path.glob("beam-*"))
    assert len(files) == 3
    ds = make_dataset(str(tmp_path / "beam-*"), schema=SCHEMA, batch_size=50, shuffle=False)
    assert_all_once(unbatch(ds), range(240))


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_reads_our_output_contract_with_the_manifest_schema(tmp_path, compression):
    out = str(tmp_path / "out")
    write_output(out, [(0, 70), (70, 0), (70, 90), (160, 40)], compression)
    ds = make_dataset(out, batch_size=25, seed=3)  # schema, files, compression: from _manifest.json
    got = unbatch(ds)
    assert_all_once(got, range(200))
    assert steps_per_epoch(out, 25) == math.ceil(200 / 25) == sum(1 for _ in ds)
    assert steps_per_epoch(out, 25, drop_remainder=True) == 8
    assert sum(1 for _ in make_dataset(out, batch_size=30, drop_remainder=True)) == steps_per_epoch(
        out, 30, drop_remainder=True) == 6


def test_lazy_exports():
    assert tfrecord_io.make_dataset is make_dataset
    assert tfrecord_io.input_fn is input_fn
    assert tfrecord_io.steps_per_epoch is steps_per_epoch


# ---------------------------------------------------------------------------------------
# Sources and errors
# ---------------------------------------------------------------------------------------
def test_refuses_an_output_without_success(tmp_path):
    out = str(tmp_path / "out")
    write_output(out, [(0, 10)])
    os.remove(os.path.join(out, output.SUCCESS))
    with pytest.raises(ValueError, match=r"no _SUCCESS .*still running or failed"):
        make_dataset(out, batch_size=4)
    with pytest.raises(ValueError, match="no _SUCCESS"):
        steps_per_epoch(out, 4)


def test_source_errors(tmp_path):
    path = write_tf(str(tmp_path / "a.tfrecord"), records(0, 5))
    with pytest.raises(ValueError, match="schema= is required"):
        make_dataset(path, batch_size=2)
    with pytest.raises(FileNotFoundError, match="no files match"):
        make_dataset(str(tmp_path / "nothing-*.tfrecord"), schema=SCHEMA, batch_size=2)
    with pytest.raises(FileNotFoundError, match="do not exist"):
        make_dataset([path, str(tmp_path / "missing.tfrecord")], schema=SCHEMA, batch_size=2)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_dataset(str(tmp_path / "missing"), schema=SCHEMA, batch_size=2)
    with pytest.raises(ValueError, match="needs record counts"):
        steps_per_epoch(path, 2)
    with pytest.raises(ValueError, match="on_corrupt"):
        make_dataset(path, schema=SCHEMA, batch_size=2, on_corrupt="ignore")
    with pytest.raises(ValueError, match="batch_size"):
        make_dataset(path, schema=SCHEMA, batch_size=0)
    with pytest.warns(UserWarning, match=r"cache_files=8 is below its least, 9: .*cycle_length=3\); using cache_files=9"):
        assert LoaderOptions(batch_size=2, cycle_length=3, cache_files=8).cache_files == 9
    with pytest.warns(UserWarning, match="cache_files=1 is below its least, 3"):
        assert sum(1 for _ in make_dataset(path, schema=SCHEMA, batch_size=2, cache_files=1)) > 0  # (worked before)
    seq = load_schema(str(Path(__file__).resolve().parent.parent / "conf" / "sessions.yaml"))
    out = str(tmp_path / "out")
    write_output(out, [(0, 5)])
    with pytest.raises(ValueError, match="sequence_example records but .* holds example records"):
        make_dataset(out, schema=seq, batch_size=2)
    os.remove(os.path.join(out, "part-00000-of-00001.tfrecord"))
    with pytest.raises(FileNotFoundError, match="listed in _manifest.json are missing"):
        make_dataset(out, batch_size=2)


def test_hidden_files_are_not_part_of_a_glob(tmp_path):
    out = str(tmp_path / "out")
    write_output(out, [(0, 30), (30, 30)])
    ds = make_dataset(os.path.join(out, "*"), schema=SCHEMA, batch_size=7)  # _SUCCESS, _manifest.json left out
    assert_all_once(unbatch(ds), range(60))


def test_autotune_option_reaches_the_dataset(tmp_path):
    path = write_tf(str(tmp_path / "a.tfrecord"), records(0, 10))
    default = make_dataset(path, schema=SCHEMA, batch_size=4)
    few_cpus = len(os.sched_getaffinity(0)) < AUTOTUNE_MIN_CPUS
    assert default.options().autotune.enabled is (not few_cpus)
    assert make_dataset(path, schema=SCHEMA, batch_size=4, autotune=True).options().autotune.enabled is True
    off = make_dataset(path, schema=SCHEMA, batch_size=4, autotune=False, shuffle=False)
    assert off.options().autotune.enabled is False
    assert [i for i, _ in unbatch(off)] == list(range(10))
    with pytest.raises(ValueError, match="autotune must be"):
        make_dataset(path, schema=SCHEMA, batch_size=4, autotune="yes")


def test_prefetch_to_device_only_with_a_gpu(tmp_path):
    dense = Schema.from_dict({"features": [{"name": "id", "type": "int64"}, {"name": "x", "type": "float",
                                                                           "default": -1.0}]})
    path = write_tf(str(tmp_path / "a.tfrecord"), records(0, 10))
    gpus = tf.config.list_logical_devices("GPU")
    features = next(iter(make_dataset(path, schema=dense, batch_size=4, shuffle=False)))
    assert features["id"].numpy().tolist() == [0, 1, 2, 3]
    # "auto": batches of dense tensors go to /gpu:0 when there is one, and stay put otherwise.
    assert ("GPU" if gpus else "CPU") in features["id"].device
    # Ragged features are never copied by "auto" (copy_to_device is for dense tensors).
    features, _ = next(iter(make_dataset(path, schema=SCHEMA, batch_size=4)))
    assert "CPU" in features["id"].device
    if not gpus:
        with pytest.raises(ValueError, match="sees no GPU"):
            make_dataset(path, schema=SCHEMA, batch_size=4, prefetch_to_device=True)
    with pytest.raises(ValueError, match="cannot be combined with input_context"):
        make_dataset(path, schema=SCHEMA, batch_size=4, prefetch_to_device=True,
                     input_context=tf.distribute.InputContext(1, 0, 1))
    # Own transformations after the loader: prefetch_to_device=False, then prefetch_to_gpu last.
    mapped = make_dataset(path, schema=dense, batch_size=4, shuffle=False, prefetch_to_device=False).map(
        lambda f: f["x"] * 2.0)
    moved = tfrecord_io.prefetch_to_gpu(mapped)
    assert ("GPU" if gpus else "CPU") in next(iter(moved)).device
    assert next(iter(moved)).numpy().tolist() == [0.0, 1.0, 2.0, -2.0]  # x = i / 2, default -1 at i = 3
    if not gpus:
        assert moved is mapped
        with pytest.raises(ValueError, match="sees no GPU"):
            tfrecord_io.prefetch_to_gpu(mapped, True)


# ---------------------------------------------------------------------------------------
# Epochs, order, sharding
# ---------------------------------------------------------------------------------------
def test_exact_epochs_with_clean_boundaries(tmp_path):
    out = str(tmp_path / "out")
    write_output(out, [(0, 45), (45, 45), (90, 40)])
    steps = steps_per_epoch(out, 16)
    ds = make_dataset(out, batch_size=16, num_epochs=3, seed=5)
    batches = [f["id"].numpy().tolist() for f, _ in ds]
    assert len(batches) == 3 * steps == 3 * math.ceil(130 / 16)
    for epoch in range(3):
        ids = [i for b in batches[epoch * steps:(epoch + 1) * steps] for i in b]
        assert sorted(ids) == list(range(130)), f"epoch {epoch} is not exactly one pass"
    forever = make_dataset(out, batch_size=16, num_epochs=None, seed=5)
    assert sum(int(f["id"].shape[0]) for f, _ in forever.take(5 * steps)) == 5 * 130


def test_seed_makes_order_reproducible_and_epochs_differ(tmp_path):
    out = str(tmp_path / "out")
    write_output(out, [(0, 100), (100, 100), (200, 100), (300, 100)])

    def order(seed):
        return [i for f, _ in make_dataset(out, batch_size=50, num_epochs=2, seed=seed, shuffle_buffer=150)
                for i in f["id"].numpy().tolist()]

    a, b, c = order(7), order(7), order(8)
    assert a == b
    assert a != c
    assert a[:400] != a[400:] and sorted(a[:400]) == sorted(a[400:]) == list(range(400))
    assert a[:400] != list(range(400))
    plain = [i for f, _ in make_dataset(out, batch_size=50, shuffle=False) for i in f["id"].numpy().tolist()]
    assert plain == [i for f, _ in make_dataset(out, batch_size=50, shuffle=False) for i in f["id"].numpy().tolist()]
    # No shuffle: files interleaved 128 records at a time, in file order.
    assert plain[:128] == list(range(100)) + list(range(100, 128))


def read_pipelines(fn, pipelines: int, replicas: int) -> list[list]:
    """Every batch of each of ``pipelines`` input pipelines of ``fn`` (an input_fn), pipeline by pipeline."""
    return [list(fn(tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=p,
                                               num_replicas_in_sync=replicas))) for p in range(pipelines)]


@pytest.mark.parametrize("pipelines", [1, 2, 3])
def test_input_context_gives_every_pipeline_an_equal_share(tmp_path, pipelines):
    """Uneven shards (issue #21 item 3): each pipeline yields the same number of full batches, the
    pipelines together read every record once but a remainder smaller than one global batch, each
    reads only its own records, and steps_per_epoch agrees."""
    out = str(tmp_path / "out")
    sizes = [5, 61, 3, 40, 0, 77, 14]
    starts = np.cumsum([0] + sizes[:-1]).tolist()
    write_output(out, list(zip(starts, sizes)))
    total, replicas = sum(sizes), 2 * pipelines
    global_batch = 4 * replicas
    stats = LoaderStats()
    fn = input_fn(out, batch_size=global_batch, seed=1, stats=stats)
    per_pipeline = read_pipelines(fn, pipelines, replicas)
    steps = total // global_batch
    ctx = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=0, num_replicas_in_sync=replicas)
    assert steps_per_epoch(out, global_batch, ctx) == steps
    seen: Counter = Counter()
    for batches in per_pipeline:
        assert len(batches) == steps * 2, "every pipeline: the same batches, two replicas' worth per step"
        assert {int(f["id"].shape[0]) for f, _ in batches} == {4}, "full per-replica batches"
        got = unbatch(batches)
        assert all(values == expected(i) for i, values in got)
        seen.update(i for i, _ in got)
    assert set(seen.values()) == {1} and len(seen) == steps * global_batch > total - global_batch
    assert stats.records_read == len(seen), "no pipeline reads records that are not its own"
    # remainder="pad": one step more, every record at least once, fewer than a global batch twice.
    padded = read_pipelines(input_fn(out, batch_size=global_batch, seed=1, remainder="pad"), pipelines, replicas)
    assert {len(b) for b in padded} == {2 * math.ceil(total / global_batch)}
    again = Counter(i for batches in padded for i, _ in unbatch(batches))
    assert sorted(again) == list(range(total)) and sum(again.values()) - total < global_batch
    assert steps_per_epoch(out, global_batch, ctx, remainder="pad") == math.ceil(total / global_batch)


def test_input_fn_with_a_real_strategy(tmp_path):
    out = str(tmp_path / "out")
    write_output(out, [(0, 64), (64, 64)])
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dist = strategy.distribute_datasets_from_function(input_fn(out, batch_size=32, shuffle=False))
    ids = [i for batch in dist for i in batch[0]["id"].numpy().tolist()]
    assert sorted(ids) == list(range(128))
    with pytest.raises(TypeError, match="unknown option"):
        input_fn(out, batch_size=6, bogus=1)


def test_fewer_files_than_pipelines_each_reads_its_own_byte_range(tmp_path):
    """One shard, three input pipelines: each reads its own third of the file (from the offset its
    index gives), not the whole file; with an index made by `tfrecord-io index` for a file TF wrote too."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 100)])
    (tmp_path / "tf").mkdir()
    tf_written = write_tf(str(tmp_path / "tf" / "one.tfrecord"), records(0, 100))
    build_index(tf_written, "none")
    for source, schema in ((out, None), (tf_written, SCHEMA)):
        stats = LoaderStats()
        fn = input_fn(source, schema=schema, batch_size=6, stats=stats)
        per_pipeline = read_pipelines(fn, 3, 3)
        assert [len(b) for b in per_pipeline] == [16, 16, 16]
        ids = [[i for i, _ in unbatch(b)] for b in per_pipeline]
        assert [sorted(i) for i in ids] == [list(range(p * 32, p * 32 + 32)) for p in range(3)]
        assert stats.records_read == 96
    assert steps_per_epoch(out, 6, tf.distribute.InputContext(3, 0, 3)) == 16


def test_features_subset_fits_a_keras_model_with_named_inputs(tmp_path):
    """make_dataset(features=[...]) yields only those (and the label): model.fit takes it by name
    (issue #15 item 5; with every feature, Keras would match inputs by position)."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 64)])
    ds = make_dataset(out, batch_size=16, features=["x", "city"], shuffle=False, prefetch_to_device=False)
    features, label = next(iter(ds))
    assert set(features) == {"x", "city"} and label.dtype == tf.int64
    x = tf.keras.Input(shape=(), name="x")
    city = tf.keras.Input(shape=(), name="city", dtype=tf.string)
    hashed = tf.keras.layers.Hashing(8, output_mode="one_hot")(tf.keras.layers.Reshape((1,))(city))
    joined = tf.keras.layers.Concatenate()([tf.keras.layers.Reshape((1,))(x), hashed])
    model = tf.keras.Model({"x": x, "city": city}, tf.keras.layers.Dense(1)(joined))
    model.compile("sgd", "mse")
    history = model.fit(ds, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1
    with pytest.raises(ValueError, match="did you mean 'city'"):
        make_dataset(out, batch_size=16, features=["cty"])


# ---------------------------------------------------------------------------------------
# Missing and empty features
# ---------------------------------------------------------------------------------------
def test_missing_and_empty_features(tmp_path):
    ex_empty = tf.train.Example()  # every feature missing
    ex_empty.features.feature["id"].int64_list.value.append(1000)
    ex_lists = tf.train.Example()  # present but empty ragged list, and an unknown feature
    ex_lists.features.feature["id"].int64_list.value.append(1001)
    ex_lists.features.feature["tags"].int64_list.SetInParent()
    ex_lists.features.feature["not_in_schema"].bytes_list.value.append(b"ignored")
    path = write_tf(str(tmp_path / "a.tfrecord"), [ex_empty.SerializeToString(), ex_lists.SerializeToString()]
                    + records(0, 30))
    got = dict(unbatch(make_dataset(path, schema=SCHEMA, batch_size=8, shuffle=False)))
    defaults = {"x": -1.0, "city": b"?", "pair": [7.0, 8.0], "tags": [], "y": 0}
    assert got[1000] == defaults and got[1001] == defaults
    assert all(got[i] == expected(i) for i in range(30))
    # A missing scalar without a default stops training, naming the feature (the wire contract).
    no_default = Schema.from_dict({"features": [{"name": "id", "type": "int64"}, {"name": "z", "type": "float"}]})
    with pytest.raises(tf.errors.InvalidArgumentError, match="Feature: z .*is required"):
        list(make_dataset(path, schema=no_default, batch_size=8))


def test_sequence_examples_padded_and_ragged(tmp_path):
    schema = Schema.from_dict({
        "record_type": "sequence_example", "group_by": "sid",
        "context": [{"name": "sid", "type": "string", "required": True},
                    {"name": "country", "type": "string", "default": "??"}],
        "sequence": [{"name": "ts", "type": "int64"}, {"name": "price", "type": "float", "default": 0.5},
                     {"name": "tags", "type": "string", "shape": [-1]}],
        "label": "country",
    })
    groups = pa.RecordBatch.from_pydict({
        "sid": ["a", "b", "c", "d"],
        "country": ["fr", None, "de", "it"],
        "ts": [[1, 2, 3], [4], [], None],
        "price": [[1.5, None, 3.5], [2.0], [], None],
        "tags": [[["x"], [], ["y", "z"]], [["w"]], [], None],
    }, schema=pa.schema([("sid", pa.string()), ("country", pa.string()), ("ts", pa.list_(pa.int64())),
                         ("price", pa.list_(pa.float32())), ("tags", pa.list_(pa.list_(pa.string())))]))
    out = str(tmp_path / "seq")
    written = output.write_shard([encode_sequence_examples(groups, schema)], out, "a0", output.shard_name(0, 1), "none")
    output.commit(out, [written], [], output.ConversionTotals(input_rows=4, records=4, rejected=0),
                  schema=schema, compression="none", engine="test")

    features, label = next(iter(make_dataset(out, batch_size=4, shuffle=False)))
    assert features["sid"].numpy().tolist() == [b"a", b"b", b"c", b"d"]
    assert label.numpy().tolist() == [b"fr", b"??", b"de", b"it"]
    assert features["ts"].numpy().tolist() == [[1, 2, 3], [4, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert features["ts_length"].numpy().tolist() == [3, 1, 0, 0]
    assert features["price"].numpy().tolist() == [[1.5, 0.5, 3.5], [2.0, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert features["price_length"].numpy().tolist() == [3, 1, 0, 0]
    assert features["tags"].to_list() == [[[b"x"], [], [b"y", b"z"]], [[b"w"]], [], []]
    assert features["tags_length"].numpy().tolist() == [3, 1, 0, 0]

    features, _ = next(iter(make_dataset(out, batch_size=4, shuffle=False, ragged=True)))
    assert not any(k.endswith("_length") for k in features)
    assert features["ts"].to_list() == [[1, 2, 3], [4], [], []]
    assert features["price"].to_list() == [[1.5, 0.5, 3.5], [2.0], [], []]


# ---------------------------------------------------------------------------------------
# Corruption
# ---------------------------------------------------------------------------------------
def test_tensorflow_checks_crcs_but_does_not_name_the_file(tmp_path):
    """Why the loader adds its own error: TF detects the bad CRC but names only an offset."""
    path = write_tf(str(tmp_path / "a.tfrecord"), records(0, 20))
    offset = corrupt_record(path, 7)
    with pytest.raises(tf.errors.DataLossError, match=f"corrupted record at {offset + 12}") as info:
        list(tf.data.TFRecordDataset(path))
    assert "a.tfrecord" not in info.value.message


def test_corrupt_file_error_names_file_and_offset(tmp_path):
    for k in range(3):
        write_tf(str(tmp_path / f"d-{k}.tfrecord"), records(100 * k, 100))
    bad = str(tmp_path / "d-1.tfrecord")
    offset = corrupt_record(bad, 40)
    ds = make_dataset(str(tmp_path / "d-*.tfrecord"), schema=SCHEMA, batch_size=10, shuffle=False)
    with pytest.raises(tf.errors.OpError) as info:
        list(ds)
    message = info.value.message
    # Our line first (logs that cut TensorFlow's text keep it), what to do, TensorFlow's error as the cause.
    assert message.startswith(f"{bad}: corrupt TFRecord at byte offset {offset}: data CRC: ")
    assert f"`tfrecord-io verify {bad}`" in message and 'on_corrupt="skip"' in message
    assert "function_node" not in message and "Traceback" not in message, message
    assert isinstance(info.value, CorruptRecordError) and isinstance(info.value, type(info.value.__cause__))
    assert (info.value.path, info.value.offset, info.value.check) == (bad, offset, "data CRC")
    assert str(info.value) == message
    assert "CorruptRecordError" in info.value.__cause__.message  # TensorFlow's own text, kept as the cause

    # The same through next() and after transformations TensorFlow's text carries our line right
    # after its function tag; errors that are not the loader's pass as TensorFlow raised them.
    with pytest.raises(CorruptRecordError):
        it = iter(ds)
        while True:
            next(it)
    with pytest.raises(tf.errors.OpError) as info:
        list(ds.map(lambda *batch: batch))
    assert not isinstance(info.value, CorruptRecordError)
    assert re.match(r"\{\{function_node [^}]+\}\} (Error in user-defined function[^:]*: \S+: )?CorruptRecordError: "
                    + re.escape(f"{bad}: corrupt TFRecord"), info.value.message), info.value.message[:400]


def test_truncated_file_error(tmp_path):
    path = write_tf(str(tmp_path / "t.tfrecord"), records(0, 20))
    data = Path(path).read_bytes()
    last = record_offsets(data)[-1]
    Path(path).write_bytes(data[:last + 30])
    with pytest.raises(tf.errors.OpError, match=re.escape(f"{path}: corrupt TFRecord at byte offset {last}: "
                                                          f"truncated data")):
        list(make_dataset(path, schema=SCHEMA, batch_size=8))


def _huge_length(path: str, index: int, compression: str) -> int:
    """Make record ``index`` claim 2**40 bytes, with a valid length CRC (TF's reader would try to
    allocate them and kill the process); returns its offset in the uncompressed stream."""
    import gzip as gz
    import zlib

    import google_crc32c

    raw = Path(path).read_bytes()
    data = bytearray({"none": lambda b: b, "gzip": gz.decompress, "zlib": zlib.decompress}[compression](raw))
    offset = record_offsets(bytes(data))[index]
    length = struct.pack("<Q", 2**40)
    crc = google_crc32c.value(length)
    data[offset:offset + 12] = length + struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)
    Path(path).write_bytes({"none": bytes, "gzip": gz.compress, "zlib": zlib.compress}[compression](bytes(data)))
    return offset


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_a_length_past_the_end_of_the_file_is_an_error_not_a_crash(tmp_path, compression):
    ext = {"none": "", "gzip": ".gz", "zlib": ".zlib"}[compression]
    path = write_tf(str(tmp_path / f"d.tfrecord{ext}"), records(0, 60), compression)
    offset = _huge_length(path, 30, compression)
    with pytest.raises(tf.errors.OpError) as info:
        list(make_dataset(path, schema=SCHEMA, batch_size=8, shuffle=False))
    assert f"{path}: corrupt TFRecord at byte offset {offset}:" in info.value.message
    ds = make_dataset(path, schema=SCHEMA, batch_size=8, shuffle=False, on_corrupt="skip")
    assert [i for i, _ in unbatch(ds)] == list(range(30))  # every record before the bad one


def test_skip_mode_keeps_every_record_before_the_bad_one_across_chunks(tmp_path):
    """TF's reader drops the chunk it was filling at a bad record; the loader hands those records on."""
    n, bad = CHUNK_RECORDS * 2 + 300, CHUNK_RECORDS + 500
    path = write_tf(str(tmp_path / "big.tfrecord"), records(0, n))
    offset = corrupt_record(path, bad)
    ds = make_dataset(path, schema=SCHEMA, batch_size=100, shuffle=False, on_corrupt="skip")
    got = unbatch(ds)
    assert [i for i, _ in got] == list(range(bad))
    assert all(values == expected(i) for i, values in got)
    (skipped,) = ds.loader_stats.skipped
    assert (skipped.offset, skipped.records_kept, ds.loader_stats.records_read) == (offset, bad, bad)


def test_skip_mode_drops_the_rest_of_each_corrupt_file_and_counts(tmp_path, caplog):
    for k in range(4):
        write_tf(str(tmp_path / f"d-{k}.tfrecord{'.gz' if k == 3 else ''}"), records(100 * k, 100),
                 "gzip" if k == 3 else "none")
    off1 = corrupt_record(str(tmp_path / "d-1.tfrecord"), 40)
    off2 = corrupt_record(str(tmp_path / "d-2.tfrecord"), 0)
    gz = tmp_path / "d-3.tfrecord.gz"
    gz.write_bytes(gz.read_bytes()[:-40])  # a truncated gzip stream
    stats = LoaderStats()
    with caplog.at_level(logging.WARNING, logger="tfrecord_io.engines.loader"):
        got = unbatch(make_dataset(str(tmp_path / "d-*"), schema=SCHEMA, batch_size=16, on_corrupt="skip",
                                   seed=2, stats=stats))
    ids = sorted(i for i, _ in got)
    kept_gz = [i for i in ids if i >= 300]
    assert ids[:140] == list(range(140)) and not [i for i in ids if 140 <= i < 300]
    assert kept_gz == list(range(300, 300 + len(kept_gz))) and len(kept_gz) < 100
    assert all(values == expected(i) for i, values in got)
    assert stats.corrupt_files == 3 and stats.files_read == 4 and stats.records_read == len(got)
    skipped = {Path(p.uri).name: p for p in stats.skipped}
    assert (skipped["d-1.tfrecord"].offset, skipped["d-1.tfrecord"].records_kept) == (off1, 40)
    assert (skipped["d-2.tfrecord"].offset, skipped["d-2.tfrecord"].records_kept) == (off2, 0)
    assert skipped["d-3.tfrecord.gz"].check in ("decompression", "truncated data", "truncated header")
    assert sum("skipped the rest of the file" in r.getMessage() for r in caplog.records) == 3
    assert f"d-1.tfrecord: corrupt TFRecord at byte offset {off1}" in caplog.text


def test_manifest_count_mismatch_is_an_error(tmp_path):
    out = str(tmp_path / "out")
    write_output(out, [(0, 30), (30, 30)])
    shard = os.path.join(out, output.shard_name(1, 2))
    write_tf(shard, records(30, 20))  # intact, but not what the manifest says
    with pytest.raises(tf.errors.OpError, match=r"is 2023 bytes, but _manifest.json says 3051 bytes \(30 records\)"):
        list(make_dataset(out, batch_size=8))


# ---------------------------------------------------------------------------------------
# Real HDFS
# ---------------------------------------------------------------------------------------
def _cache_files(cache_dir: Path) -> list[Path]:
    """The files under ``cache_dir`` now: looked at again when the cache deletes a folder under the walk."""
    while cache_dir.exists():
        try:
            return [p for p in cache_dir.rglob("*") if p.is_file()]
        except FileNotFoundError:
            continue
    return []


@pytest.mark.parametrize("cache_files", [3, 6])
def test_hdfs_output_contract_streams_through_a_bounded_cache(hdfs, tmp_path, cache_files):
    out = hdfs.uri(f"/tfdata/bounded-{cache_files}")
    write_output(out, [(k * 40, 40) for k in range(9)], "gzip")
    cache_dir = tmp_path / "cache"
    ds = make_dataset(out, batch_size=20, seed=4, cache_files=cache_files, cache_dir=str(cache_dir))
    on_disk, done = [0], threading.Event()

    def watch():  # the shards on local disk, as often as we can look
        while not done.is_set():
            on_disk.append(len(_cache_files(cache_dir)))
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        got = unbatch(ds)
    finally:
        done.set()
        watcher.join()
    most = max(on_disk)
    assert_all_once(got, range(360))
    cache = ds.loader_stats.cache
    assert cache.downloaded_files == 9 and cache.max_files_on_disk <= cache_files and cache.over_bound == 0
    assert 0 < most <= cache_files, f"{most} shards on disk at once"
    assert _cache_files(cache_dir) == [], "every shard is deleted once read"
    assert steps_per_epoch(out, 20) == sum(1 for _ in ds)


def test_hdfs_files_written_by_tensorflow_and_epochs(hdfs, tmp_path):
    for k in range(3):
        local = write_tf(str(tmp_path / f"tf-{k}.tfrecord.zlib"), records(50 * k, 50), "zlib")
        upload(local, hdfs.uri(f"/tfdata/tfwritten/tf-{k}.tfrecord.zlib"))
    pattern = hdfs.uri("/tfdata/tfwritten/tf-*.tfrecord.zlib")
    ds = make_dataset(pattern, schema=SCHEMA, batch_size=32, num_epochs=2, seed=9, cache_dir=str(tmp_path / "c"))
    batches = [unbatch([b]) for b in ds]
    per_epoch = math.ceil(150 / 32)
    assert len(batches) == 2 * per_epoch
    for epoch in range(2):
        assert_all_once([r for b in batches[epoch * per_epoch:(epoch + 1) * per_epoch] for r in b], range(150))
    again = [i for b in make_dataset(pattern, schema=SCHEMA, batch_size=32, num_epochs=2, seed=9) for i in
             b[0]["id"].numpy().tolist()]
    assert again == [i for b in batches for i, _ in b], "same seed, same order through the cache"


def test_hdfs_input_context_equal_shares(hdfs, tmp_path):
    """Uneven shards on HDFS, two pipelines: the same batches each, disjoint, together all records but
    the remainder -- each pipeline downloading only the shards its share touches."""
    out = hdfs.uri("/tfdata/sharded")
    write_output(out, [(0, 10), (10, 52), (62, 3), (65, 40), (105, 20)])
    stats = LoaderStats()
    fn = input_fn(out, batch_size=10, shuffle=False, stats=stats, cache_dir=str(tmp_path / "c"))
    per_pipeline = read_pipelines(fn, 2, 2)
    ids = [[i for i, _ in unbatch(b)] for b in per_pipeline]
    assert [len(b) for b in per_pipeline] == [12, 12] and ids[0] + ids[1] == list(range(120))
    assert stats.records_read == 120
    assert sum(c.downloaded_files for c in stats.caches) == 6  # the third shard is in both shares


def test_hdfs_early_stop_stays_bounded_and_leaves_nothing_once_the_dataset_is_gone(hdfs, tmp_path):
    """tf.data tells Python nothing when it drops an iterator mid-epoch (and a checkpointable pipeline
    has no generator to close), so the shards it staged stay, within the bound, until a later pass
    needs their room or the dataset is garbage collected."""
    out = hdfs.uri("/tfdata/early")
    write_output(out, [(k * 30_000, 30_000) for k in range(4)])  # more than tf.data buffers ahead
    cache_dir = tmp_path / "cache"
    ds = make_dataset(out, batch_size=10, shuffle=False, cache_dir=str(cache_dir), cache_files=3)
    it = iter(ds)
    for _ in range(3):
        next(it)
    assert _cache_files(cache_dir), "shards are staged while reading"
    del it
    gc.collect()
    assert len(_cache_files(cache_dir)) <= 3
    assert [int(f["id"][0]) for f, _ in ds.take(2)] == [0, 10]
    cache = ds.loader_stats.cache
    assert cache.max_files_on_disk <= 3 and cache.over_bound == 0 and cache.evicted >= 1
    del ds, cache
    gc.collect()
    assert _cache_files(cache_dir) == []


def test_hdfs_corrupt_file_names_the_hdfs_uri_and_skip_counts(hdfs, tmp_path):
    for k in range(2):
        write_tf(str(tmp_path / f"c-{k}.tfrecord"), records(100 * k, 100))
    offset = corrupt_record(str(tmp_path / "c-1.tfrecord"), 10)
    for k in range(2):
        upload(str(tmp_path / f"c-{k}.tfrecord"), hdfs.uri(f"/tfdata/corrupt/c-{k}.tfrecord"))
    pattern = hdfs.uri("/tfdata/corrupt/*.tfrecord")
    bad = hdfs.uri("/tfdata/corrupt/c-1.tfrecord")
    with pytest.raises(tf.errors.OpError, match=re.escape(f"{bad}: corrupt TFRecord at byte offset {offset}: data CRC")):
        list(make_dataset(pattern, schema=SCHEMA, batch_size=16, cache_dir=str(tmp_path / "c1")))
    ds = make_dataset(pattern, schema=SCHEMA, batch_size=16, on_corrupt="skip", cache_dir=str(tmp_path / "c2"))
    assert sorted(i for i, _ in unbatch(ds)) == list(range(110))
    assert ds.loader_stats.corrupt_files == 1 and ds.loader_stats.skipped[0].uri == bad
    del ds
    gc.collect()
    assert _cache_files(tmp_path / "c1") == [] and _cache_files(tmp_path / "c2") == []


def test_hdfs_shard_gone_before_reading_names_its_uri(hdfs, tmp_path):
    """A shard deleted between make_dataset and the read: its download fails, naming the URI."""
    pattern = hdfs.uri("/tfdata/vanishing/*.tfrecord")
    for k in range(3):
        local = write_tf(str(tmp_path / f"v-{k}.tfrecord"), records(40 * k, 40))
        upload(local, hdfs.uri(f"/tfdata/vanishing/v-{k}.tfrecord"))
    cache_dir = tmp_path / "cache"
    ds = make_dataset(pattern, schema=SCHEMA, batch_size=8, shuffle=False, cache_dir=str(cache_dir))
    gone = hdfs.uri("/tfdata/vanishing/v-2.tfrecord")
    fs.delete(gone)
    with pytest.raises(tf.errors.OpError, match=re.escape(gone)) as e:
        list(ds)
    assert isinstance(e.value, FileNotFoundError) and e.value.message.startswith("[Errno 2] File does not exist"), \
        str(e.value)
    gc.collect()
    assert _cache_files(cache_dir) == [], "nothing is left in the cache after the failure"


def test_hdfs_refuses_an_output_without_success(hdfs):
    out = hdfs.uri("/tfdata/partial")
    write_output(out, [(0, 10)])
    fs.delete(fs.join(out, output.SUCCESS))
    with pytest.raises(ValueError, match="no _SUCCESS"):
        make_dataset(out, batch_size=4)


# ---------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------
def test_demo_train_fits_a_keras_model(tmp_path):
    from tfrecord_io.commands.demo_train import make_demo_output, train_demo

    out = str(tmp_path / "demo")
    make_demo_output(out, rows=3000, shards=3)
    result = train_demo(out, epochs=2, batch_size=256, verbose=0)
    assert result["examples"] == 2 * 3000 and result["steps"] == 2 * math.ceil(3000 / 256)
    assert result["examples_per_sec"] > 0 and np.isfinite(result["final_loss"])
    assert "payment_type" in result["features"]  # the string feature too, through keras_inputs


def test_a_sometimes_missing_feature_without_default_is_refused_at_once(spark, tmp_path):
    """The converters record per-feature present counts (issue #15 item 5); the loader refuses a
    schema that would fail at the first batch holding a missing value, naming the feature."""
    from helpers import convert
    from tfrecord_io.storage import output as out_contract

    (tmp_path / "in.csv").write_text("id,air_time\n1,10\n2,\n3,30\n")
    (tmp_path / "s.yaml").write_text("features:\n  - {name: id, type: int64}\n  - {name: air_time, type: int64}\n")
    for engine in ("spark", "beam"):
        out = str(tmp_path / engine)
        convert(engine, spark if engine == "spark" else None, str(tmp_path / "in.csv"), "csv",
                str(tmp_path / "s.yaml"), out)
        assert out_contract.read_manifest(out)["present"] == {"id": 3, "air_time": 2}, engine
        with pytest.raises(ValueError, match="feature 'air_time' is missing from 1 of 3 records .* no default"):
            make_dataset(out, batch_size=2)
        got = [int(x) for b in make_dataset(out, batch_size=2, features=["id"], shuffle=False) for x in b["id"]]
        assert sorted(got) == [1, 2, 3]


def test_global_shuffle_is_a_seeded_permutation_of_every_record_each_epoch(tmp_path):
    """shuffle="global": each epoch holds every record once, in an order that mixes all shards from
    the first batch on (a window shuffle over file order cannot), differs between epochs, and is
    the same again for the same seed; a gzip output is refused naming the fix."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 300), (300, 300), (600, 300)])

    def epochs(seed):
        ids = np.concatenate([b[0]["id"].numpy() for b in make_dataset(
            out, batch_size=50, shuffle="global", seed=seed, num_epochs=2, prefetch_to_device=False)])
        return ids[:900], ids[900:]

    first, second = epochs(3)
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(900))
    assert not np.array_equal(first, second)
    assert {int(i) // 300 for i in first[:50]} == {0, 1, 2}, "the first batch comes from one shard"
    again = epochs(3)
    assert np.array_equal(first, again[0]) and np.array_equal(second, again[1])
    assert not np.array_equal(first, epochs(4)[0])

    gz = str(tmp_path / "gz")
    write_output(gz, [(0, 10)], compression="gzip")
    with pytest.raises(ValueError, match="global"):
        make_dataset(gz, batch_size=5, shuffle="global", seed=1)
