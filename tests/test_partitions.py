"""Partitioned outputs (issue #24 item 2): Hive-style ``cut=Ideal/`` directories as spark-tfrecord users
write them, from the data source (``option("partitionBy")``) and the Spark job (``--partition-by``),
committed exactly once with a manifest per partition and one for the whole; read back by
``spark.read`` (partition columns discovered from paths where the records lack them, as Spark's file
sources do) and by ``make_dataset`` (all partitions, or ``partitions=`` selected).  Local disk and a
real HDFS."""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

import tfrecord_io.spark
from helpers import VENV_BIN
from tfrecord_io.commands.reading import resolve_source
from tfrecord_io.commands.verify import verify_source
from tfrecord_io.engines.loader import make_dataset, steps_per_epoch
from tfrecord_io.storage import fs, output
from tfrecord_io.storage.partitions import (DEFAULT_PARTITION, escape, parse_partition_path, partition_codes,
                                            partition_dir, unescape)

CUTS = ["Ideal", "Good", "Fair/Poor", "Premium"]  # "Fair/Poor": a value Hive escapes


@pytest.fixture(scope="module")
def tfspark(spark):
    tfrecord_io.spark.register(spark)
    return spark


def diamonds(spark, n: int = 200):
    rows = [(i, CUTS[i % 4], float(i) / 2, 2020 + i % 2) for i in range(n)]
    return spark.createDataFrame(rows, "id long, cut string, price double, year int").repartition(3)


def ids_by(ds, key: str = "cut") -> dict:
    out: dict = {}
    for batch in ds:
        features, ids = (batch[0], batch[1]) if isinstance(batch, tuple) else (batch, batch["id"])
        for k, i in zip(features[key].numpy().tolist(), ids.numpy().tolist()):
            out.setdefault(k.decode() if isinstance(k, bytes) else k, []).append(i)
    return {k: sorted(v) for k, v in out.items()}


# -- paths --------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["Ideal", "Fair/Poor", "a=b", "50%", "x:y?", "é", "tab\there", "[]^*"])
def test_partition_values_escape_as_hive_does_and_come_back(value):
    d = partition_dir({"cut": value, "year": "2021"})
    assert "/" not in d.split("/")[0][len("cut="):] and d.endswith("/year=2021")
    assert parse_partition_path(d + "/part-00000.tfrecord") == {"cut": value, "year": "2021"}
    assert unescape(escape(value)) == value


def test_nulls_go_to_hives_default_partition_and_codes_are_per_distinct_value():
    codes, dirs, values = partition_codes(
        [pa.array(["b", None, "b", "a", ""]), pa.array([1, 1, 1, 2, 2], pa.int32())], ["s", "n"])
    assert [dirs[c] for c in codes] == ["s=b/n=1", f"s={DEFAULT_PARTITION}/n=1", "s=b/n=1", "s=a/n=2",
                                        f"s={DEFAULT_PARTITION}/n=2"]
    assert parse_partition_path(f"s={DEFAULT_PARTITION}/n=1/f") == {"s": None, "n": "1"}
    codes, dirs, _ = partition_codes([pa.array([datetime.date(2024, 1, 31)] * 2), pa.array([True, False])],
                                     ["day", "ok"])
    assert sorted(dirs) == ["day=2024-01-31/ok=false", "day=2024-01-31/ok=true"]


# -- the data source ----------------------------------------------------------------------------
def test_data_source_writes_hive_partitions_each_a_complete_output(tfspark, tmp_path):
    out = str(tmp_path / "diamonds")
    diamonds(tfspark).write.format("tfrecord").option("partitionBy", "cut").mode("overwrite").save(out)
    root = Path(out)
    assert sorted(p.name for p in root.iterdir()) == sorted(["_SUCCESS", "_manifest.json"] +
                                                            [f"cut={escape(c)}" for c in CUTS])
    top = json.loads((root / "_manifest.json").read_text())
    assert top["partition_by"] == [{"name": "cut", "type": "string"}]
    assert {d: (p["values"], p["records"]) for d, p in top["partitions"].items()} == {
        f"cut={escape(c)}": ({"cut": c}, 50) for c in CUTS}
    assert top["totals"] == {"input_rows": 200, "records": 200, "rejected": 0}
    assert sum(f["records"] for f in top["files"]) == 200 and set(top["index"]["lengths"]) == {
        f["path"] for f in top["files"]}
    for c in CUTS:  # each partition: a committed output of its own, shards named within it
        part = root / f"cut={escape(c)}"
        m = json.loads((part / "_manifest.json").read_text())
        assert m["partition"] == {"cut": c} and (part / "_SUCCESS").exists()
        n = len(m["files"])
        assert [f["path"] for f in m["files"]] == [f"part-{j:05d}-of-{n:05d}.tfrecord" for j in range(n)]
        assert ids_by(make_dataset(str(part), batch_size=64, shuffle=False, prefetch_to_device=False)) == {
            c: [i for i in range(200) if CUTS[i % 4] == c]}
    assert verify_source(resolve_source(out)).ok
    # the root reads as one output: every record once, the partition column a feature of each
    everything = ids_by(make_dataset(out, batch_size=64, shuffle=False, prefetch_to_device=False))
    assert {c: len(v) for c, v in everything.items()} == {c: 50 for c in CUTS}
    chosen = make_dataset(out, batch_size=64, prefetch_to_device=False, partitions={"cut": ["Ideal", "Fair/Poor"]})
    assert ids_by(chosen) == {c: everything[c] for c in ("Ideal", "Fair/Poor")}
    assert steps_per_epoch(out, 64, partitions={"cut": "Ideal"}) == 1
    with pytest.raises(ValueError, match=r"no partition matches .*it has cut: Fair/Poor, Good, Ideal, Premium"):
        make_dataset(out, batch_size=8, partitions={"cut": "Very Good"})
    with pytest.raises(ValueError, match=r"no partition column 'color' \(its partition columns are \['cut'\]\)"):
        make_dataset(out, batch_size=8, partitions={"color": "E"})
    # spark.read: the root, with the column; and overwrite replaces a previous partitioned output
    counts = {r["cut"]: r["count"] for r in tfspark.read.format("tfrecord").load(out).groupBy("cut").count().collect()}
    assert counts == {c: 50 for c in CUTS}
    diamonds(tfspark, 40).write.format("tfrecord").option("partitionBy", "year,cut").mode("overwrite").save(out)
    top = output.read_manifest(out)
    assert sorted(top["partitions"]) == sorted(f"year={y}/cut={escape(c)}" for y in (2020, 2021)
                                               for c in CUTS if any(i % 2 == y - 2020 and CUTS[i % 4] == c
                                                                    for i in range(40)))
    assert sorted(p.name for p in Path(out).iterdir()) == ["_SUCCESS", "_manifest.json", "year=2020", "year=2021"]
    assert tfspark.read.format("tfrecord").load(out).count() == 40


def test_partition_by_that_cannot_work_fails_before_any_task_naming_why(tfspark, tmp_path):
    df = diamonds(tfspark, 8)
    cases = [("price", "partition column 'price' is double: partition by a string, integer, boolean or date"),
             ("colour", "partition column 'colour' is not a column of the DataFrame"),
             ("cut,cut", "partitionBy names a column twice")]
    for option, why in cases:
        with pytest.raises(Exception, match=why):
            df.write.format("tfrecord").option("partitionBy", option).mode("overwrite").save(str(tmp_path / "x"))
    with pytest.raises(Exception, match="options partitionBy and split cannot be combined"):
        df.write.format("tfrecord").option("partitionBy", "cut").option("split", "a=1,b=1").mode("overwrite") \
            .save(str(tmp_path / "x"))
    assert not (tmp_path / "x").exists() or not any(p.name.startswith("cut=") for p in (tmp_path / "x").iterdir())


def _tf_example(i: int) -> bytes:
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature={
        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))})).SerializeToString()


def test_spark_read_discovers_partition_columns_from_paths_as_spark_does(tfspark, tmp_path):
    """A spark-tfrecord partitioned output: no manifest, the records without the partition columns,
    Hive directories: the columns come from the paths (bigint when every value is an integer)."""
    import tensorflow as tf

    root = tmp_path / "peer"
    for day in (1, 2):
        for cut in ("Ideal", "Fair/Poor"):
            d = root / f"day={day}" / f"cut={escape(cut)}"
            d.mkdir(parents=True)
            with tf.io.TFRecordWriter(str(d / "part-r-00000")) as w:
                for i in range(3):
                    w.write(_tf_example(day * 100 + i))
    (root / "_SUCCESS").touch()
    df = tfspark.read.format("tfrecord").load(str(root))
    assert dict(df.dtypes) == {"id": "bigint", "day": "bigint", "cut": "string"}
    rows = sorted((r["day"], r["cut"], r["id"]) for r in df.collect())
    assert rows == sorted((day, cut, day * 100 + i) for day in (1, 2) for cut in ("Ideal", "Fair/Poor")
                          for i in range(3))
    assert df.filter("cut = 'Fair/Poor' and day = 2").count() == 3


@pytest.mark.parametrize("conditions, kept", [
    ([("year", "=", 2021)], ["y21-ideal", "y21-good"]),
    ([("year", "in", (2020, 2022))], ["y20-ideal"]),
    ([("year", ">", 2020), ("cut", "=", "Good")], ["y21-good"]),
    ([("year", "<=", 2020)], ["y20-ideal"]),
    ([("year", "is_null", None)], ["null-good"]),
    ([("year", "is_not_null", None), ("cut", ">=", "Ideal")], ["y20-ideal", "y21-ideal"]),
    ([("cut", "=", "Fair")], []),
    ([("price", "=", 3)], ["y20-ideal", "y21-ideal", "y21-good", "null-good"]),  # not a partition column
    ([("year", "=", 2021.0)], ["y20-ideal", "y21-ideal", "y21-good"]),  # not comparable: kept but the null
])
def test_pruning_leaves_out_only_partitions_that_cannot_match(conditions, kept):
    from tfrecord_io.storage.partitions import prune

    files = [("y20-ideal", {"year": "2020", "cut": "Ideal"}), ("y21-ideal", {"year": "2021", "cut": "Ideal"}),
             ("y21-good", {"year": "2021", "cut": "Good"}), ("null-good", {"year": None, "cut": "Good"})]
    assert prune(files, conditions) == kept


def test_where_on_a_partition_column_never_opens_the_other_partitions(tfspark, tmp_path):
    """A partitioned output with a shard of cut=Fair/Poor truncated: where(cut = 'Good'), IN, range
    and IS NULL queries read right, never opening it; a query that needs it fails naming it."""
    out = str(tmp_path / "out")
    diamonds(tfspark).write.format("tfrecord").option("partitionBy", "year,cut").mode("overwrite").save(out)
    damaged = sorted(Path(out).glob("year=2020/cut=Fair%2FPoor/part-*"))[0]
    damaged.write_bytes(damaged.read_bytes()[:-7])
    df = tfspark.read.format("tfrecord").load(out)
    want = {cut: sum(1 for i in range(200) if CUTS[i % 4] == cut) for cut in CUTS}
    assert df.where("cut = 'Good'").count() == want["Good"]
    assert df.where("cut in ('Good', 'Ideal') and year >= 2020").count() == want["Good"] + want["Ideal"]
    assert df.where("year = 2021").count() == 100
    assert df.where("year > 2020 and cut < 'H'").count() == want["Good"]
    assert df.where("year is null").count() == 0
    with pytest.raises(Exception, match=r"cut=Fair%2FPoor/part-"):
        df.where("cut = 'Fair/Poor'").count()
    # read_batches(partitions=) prunes the same way (make_dataset's selection)
    got = sum(len(b["id"]) for b in tfrecord_io.read_batches(out, batch_size=64, partitions={"cut": ["Good", "Ideal"]}))
    assert got == want["Good"] + want["Ideal"]
    with pytest.raises(Exception, match=r"cut=Fair%2FPoor/part-"):
        list(tfrecord_io.read_batches(out, batch_size=64, partitions={"cut": "Fair/Poor"}))


# -- the Spark job ------------------------------------------------------------------------------
def test_the_job_partitions_on_hdfs_and_beam_refuses_naming_the_spark_job(spark_cli, hdfs, tmp_path):
    base = hdfs.uri(f"/partitions/{tmp_path.name}")
    csv = "id,cut,price\n" + "".join(f"{i},{CUTS[i % 4]},{i / 4}\n" for i in range(120)) + "bad,Ideal,1\n"
    with fs.open(f"{base}/in/trips.csv", "wb") as f:
        f.write(csv.encode())
    schema = tmp_path / "s.yaml"
    schema.write_text("features:\n  - {name: id, type: int64, required: true}\n"
                      "  - {name: cut, type: string, default: ''}\n  - {name: price, type: float}\nlabel: id\n")
    args = ["--input", f"{base}/in/", "--format", "csv", "--schema", str(schema), "--output", f"{base}/out",
            "--partition-by", "cut", "--num-shards", "3", "--max-reject-fraction", "0.5", "--compression", "gzip"]
    proc = spark_cli("convert", "--engine", "spark", *args)
    assert "wrote 120 example records in" in proc.stderr and "in 4 partitions by cut; 1 of 121 input rows rejected" \
        in proc.stderr, proc.stderr[-2000:]
    top = output.read_manifest(f"{base}/out")
    assert {p["values"]["cut"]: p["records"] for p in top["partitions"].values()} == {c: 30 for c in CUTS}
    assert fs.exists(f"{base}/out/_rejects") and fs.exists(f"{base}/out/cut={escape('Fair/Poor')}/_SUCCESS")
    got = ids_by(make_dataset(f"{base}/out", batch_size=32, prefetch_to_device=False, partitions={"cut": "Good"}))
    assert got == {"Good": [i for i in range(120) if i % 4 == 1]}
    beam = subprocess.run([str(VENV_BIN / "tfrecord-io"), "convert", "--engine", "beam", *args,
                           "--overwrite"], capture_output=True, text=True, timeout=300)
    assert beam.returncode == 2 and "--partition-by (Hive-style partition directories) is the Spark job's" \
        in beam.stderr and "use the Spark job" in beam.stderr, beam.stderr[-2000:]


def test_data_source_partitions_on_hdfs_and_reads_them_back(tfspark, hdfs, tmp_path):
    out = hdfs.uri(f"/partitions/{tmp_path.name}/ds")
    diamonds(tfspark, 80).write.format("tfrecord").option("partitionBy", "year,cut").mode("overwrite").save(out)
    top = output.read_manifest(out)
    assert top["totals"]["records"] == 80 and len(top["partitions"]) == 4  # year follows cut here (i % 2, i % 4)
    assert fs.exists(f"{out}/year=2021/cut=Good/_SUCCESS") and fs.exists(f"{out}/_SUCCESS")
    df = tfspark.read.format("tfrecord").load(out)
    assert sorted((r["year"], r["cut"], r["n"]) for r in df.groupBy("year", "cut").count()
                  .withColumnRenamed("count", "n").collect()) == sorted(
        (2020 + k % 2, CUTS[k], 20) for k in range(4))
    got = ids_by(make_dataset(out, batch_size=16, prefetch_to_device=False, partitions={"year": 2021}))
    assert got == {c: [i for i in range(80) if CUTS[i % 4] == c] for c in ("Good", "Premium")}
