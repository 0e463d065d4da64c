"""TFX-compatible splits (issue #13, section 4): the same keys and buckets as TFX ExampleGen."""

from __future__ import annotations

import bisect
import hashlib

import pyarrow as pa
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_io.core.codec import encode_examples
from tfrecord_io.core.schema import Schema
from tfrecord_io.conversion.splits import Splits, feature_key, record_key

SCHEMA = Schema.from_dict({"features": [
    {"name": "user", "type": "string"}, {"name": "n", "type": "int64"}, {"name": "x", "type": "float"},
    {"name": "tags", "type": "string", "shape": [-1]}, {"name": "blob", "type": "bytes"}]})


def tfx_partition(example: tf.train.Example, buckets: list[int], feature: str | None) -> int:
    """TFX ExampleGen's _PartitionFn, written out with TensorFlow's own protos."""
    if feature is None:
        key = example.SerializeToString(deterministic=True)
    else:
        key = example.features.feature[feature].SerializeToString(deterministic=True)
    cumulative = [sum(buckets[:i + 1]) for i in range(len(buckets))]
    bucket = int(hashlib.sha256(key).hexdigest(), 16) % cumulative[-1]
    return bisect.bisect(cumulative, bucket)


_rows = st.lists(st.fixed_dictionaries({
    "user": st.one_of(st.none(), st.text(max_size=5)), "n": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    "x": st.one_of(st.none(), st.floats(width=32, allow_nan=False)),
    "tags": st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=3)),
    "blob": st.one_of(st.none(), st.binary(max_size=4))}), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(rows=_rows, buckets=st.lists(st.integers(1, 9), min_size=2, max_size=4),
       feature=st.sampled_from([None, "user", "n"]))
def test_our_assignment_is_tfx_examplegens(rows, buckets, feature):
    batch = pa.RecordBatch.from_pylist(rows, schema=pa.schema([(f.name, f.arrow_type()) for f in SCHEMA.features]))
    records = encode_examples(batch, SCHEMA).to_pylist()
    splits = Splits(tuple(f"s{i}" for i in range(len(buckets))), tuple(buckets), feature)
    ours, why = splits.assign(records)
    for rec, got, reason, row in zip(records, ours, why, rows):
        example = tf.train.Example.FromString(rec)
        if feature is not None and row[feature] is None:
            assert got is None and f"feature {feature!r}: no value to split by" in reason
            continue
        assert got == tfx_partition(example, buckets, feature)


def test_keys_are_protobufs_serialization():
    f = tf.train.Feature(int64_list=tf.train.Int64List(value=[-1, 0, 2**62]))
    assert feature_key("int64_list", [-1, 0, 2**62]) == f.SerializeToString(deterministic=True)
    g = tf.train.Feature(float_list=tf.train.FloatList(value=[1.5, -0.0]))
    assert feature_key("float_list", [1.5, -0.0]) == g.SerializeToString(deterministic=True)
    empty = tf.train.Example()
    empty.features.SetInParent()
    assert record_key({}) == empty.SerializeToString(deterministic=True)
    ex = tf.train.Example()
    ex.features.feature["b"].bytes_list.value.append(b"x")
    ex.features.feature["a"].int64_list.value.extend([])
    assert record_key({"b": ("bytes_list", [b"x"]), "a": ("int64_list", [])}) == \
        ex.SerializeToString(deterministic=True)


def test_parse_refuses_bad_specs():
    assert Splits.parse("train=8, eval=1,test=1").buckets == (8, 1, 1)
    for bad in ("train=8", "train=0,eval=1", "train=8,train=1", "train,eval=1", "_x=1,y=1"):
        with pytest.raises(ValueError, match="--split"):
            Splits.parse(bad)
    with pytest.raises(ValueError, match="must be a scalar int64, string or bytes"):
        Splits.parse("a=1,b=1", "x", SCHEMA)
    with pytest.raises(ValueError, match="names no feature"):
        Splits.parse("a=1,b=1", "nope", SCHEMA)


# ----------------------------------------------------------------------------- engines
def _data(tmp_path):
    import json

    path = tmp_path / "in.jsonl"
    rows = [{"user": None if i % 50 == 7 else f"u{i % 40}", "n": i, "x": i / 2, "tags": ["a"] * (i % 3),
             "blob": None} for i in range(600)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    schema = tmp_path / "s.yaml"
    schema.write_text(SCHEMA.to_yaml())
    return str(path), str(schema), rows


@pytest.mark.parametrize("feature", [None, "user"])
def test_both_engines_split_row_for_row_and_each_split_loads(spark, tmp_path, feature):
    import collections

    from helpers import convert
    from tfrecord_io.storage import output
    from tfrecord_io.core.framing import read_records
    from tfrecord_io.engines.loader import make_dataset

    inp, schema, rows = _data(tmp_path)
    got = {}
    for engine in ("spark", "beam", "dataframe"):
        out = tmp_path / engine
        if engine == "dataframe":  # df.write.format("tfrecord") with option split / splitBy
            import tfrecord_io.spark

            tfrecord_io.spark.register(spark)
            writer = spark.read.json(inp).repartition(2).write.format("tfrecord").mode("overwrite") \
                .option("schema", schema).option("split", "train=8,eval=1,test=1").option("maxRejectFraction", "1")
            writer = writer.option("splitBy", feature) if feature else writer
            writer.save(str(out))
            top = output.read_manifest(str(out))
        else:
            top = convert(engine, spark if engine == "spark" else None, inp, "json", schema, str(out),
                          split="train=8,eval=1,test=1", split_by=feature, num_shards=2)
        assert (out / "_SUCCESS").exists() and set(top["splits"]) == {"train", "eval", "test"}
        per_split = {}
        for name in ("train", "eval", "test"):
            m = output.read_manifest(str(out / name))
            assert (out / name / "_SUCCESS").exists() and len(m["files"]) == 2
            recs = collections.Counter()
            for f in m["files"]:
                with open(out / name / f["path"], "rb") as fh:
                    recs.update(read_records(fh))
            per_split[name] = recs
            assert sum(recs.values()) == m["totals"]["records"] == top["splits"][name]["records"]
        got[engine] = (per_split, top["totals"])
        # make_dataset reads a split
        n = sum(int(f["n"].shape[0]) for f in make_dataset(str(out / "eval"), batch_size=64,
                                                           prefetch_to_device=False, features=["n"]))
        assert n == top["splits"]["eval"]["records"]
    assert got["spark"] == got["beam"] == got["dataframe"]  # row for row
    # --overwrite replaces a split output (its split directories are a conversion's own)
    again = convert("beam", None, inp, "json", schema, str(tmp_path / "beam"), split="train=8,eval=1,test=1",
                    split_by=feature, num_shards=2, overwrite=True)
    assert again["totals"] == got["beam"][1]
    splits = Splits(("train", "eval", "test"), (8, 1, 1), feature)
    per_split, totals = got["beam"]
    for name, recs in per_split.items():
        which, _ = splits.assign(list(recs))
        assert set(which) == {("train", "eval", "test").index(name)}
    unassignable = sum(r["user"] is None for r in rows) if feature else 0
    assert totals == {"input_rows": 600, "records": 600 - unassignable, "rejected": unassignable}
    if feature:  # every user in exactly one split
        users = {}
        for name, recs in per_split.items():
            for rec in recs:
                from tfrecord_io.core.decode import decode_example

                users.setdefault(decode_example(rec)["user"][1][0], set()).add(name)
        assert all(len(v) == 1 for v in users.values())
