"""``df.write.format("tfrecord")`` (issue #13, section 1) on real Spark, read back with TensorFlow."""

from __future__ import annotations

import gzip
import json
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from schemas import ID, write_schema
from tfrecord_io.storage import output
import tfrecord_io.spark
from tfrecord_io.engines.loader import make_dataset


@pytest.fixture(scope="module")
def tfspark(spark):
    tfrecord_io.spark.register(spark)
    return spark


def _frame(spark, n: int = 50, partitions: int = 3):
    from pyspark.sql import functions as F

    df = spark.range(n).select(
        F.col("id"), F.col("id").cast("int").alias("small"), (F.col("id") / 4).alias("x"),
        F.when(F.col("id") % 5 == 0, None).otherwise(F.concat(F.lit("c"), F.col("id").cast("string"))).alias("city"),
        F.array(F.col("id").cast("float"), F.lit(0.5)).alias("vec"), (F.col("id") % 2 == 0).alias("even"),
        F.col("id").cast("string").cast("binary").alias("blob"))
    return df.repartition(partitions)


def _read_back(out: str) -> dict[int, dict]:
    got = {}
    for batch in make_dataset(out, batch_size=64, shuffle=False, prefetch_to_device=False):
        features = batch[0] if isinstance(batch, tuple) else batch
        for i, ident in enumerate(features["id"].numpy().tolist()):
            got[ident] = {k: (v[i].numpy() if not isinstance(v, tf.RaggedTensor) else v[i].numpy())
                          for k, v in features.items()}
    return got


def test_dataframe_written_and_read_back_with_the_derived_schema(tfspark, tmp_path):
    out = str(tmp_path / "out")
    _frame(tfspark).write.format("tfrecord").mode("append").save(out)
    manifest = output.read_manifest(out)
    assert manifest["totals"] == {"input_rows": 50, "records": 50, "rejected": 0}
    types = {f["name"]: (f["type"], f.get("shape")) for f in manifest["schema"]["features"]}
    assert types == {"id": ("int64", None), "small": ("int64", None), "x": ("float", None),
                     "city": ("string", None), "vec": ("float", [-1]), "even": ("int64", None),
                     "blob": ("bytes", None)}
    assert sorted(f["path"] for f in manifest["files"]) == [f"part-0000{k}-of-00003.tfrecord" for k in range(3)]
    assert (Path(out) / "_SUCCESS").exists() and not (Path(out) / "_temporary").exists()
    assert manifest["present"] == {"id": 50, "small": 50, "x": 50, "city": 40, "vec": 50, "even": 50, "blob": 50}
    with pytest.raises(ValueError, match="feature 'city' is missing from 10 of 50 records"):
        make_dataset(out, batch_size=64)  # the derived schema has no defaults: refused at once
    got = {}
    for features in make_dataset(out, batch_size=64, shuffle=False, prefetch_to_device=False,
                                 features=["id", "x", "vec", "even", "blob", "small"]):
        for i, ident in enumerate(features["id"].numpy().tolist()):
            got[ident] = (float(features["x"][i]), features["vec"][i].numpy().tolist(), int(features["even"][i]),
                          features["blob"][i].numpy(), int(features["small"][i]))
    assert got == {i: (i / 4, [float(i), 0.5], int(i % 2 == 0), str(i).encode(), i) for i in range(50)}


def test_from_parquet_with_a_schema_and_gzip_via_sparks_codec_option(tfspark, tmp_path):
    parquet = str(tmp_path / "in.parquet")
    _frame(tfspark).write.parquet(parquet)
    schema = tmp_path / "s.yaml"
    schema.write_text(textwrap.dedent("""\
        features:
          - {name: id, type: int64, required: true}
          - {name: x, type: float, default: 0.0}
          - {name: city, type: string, default: "?"}
        label: id
        ignore_columns: [small, vec, even, blob]
        """))
    out = str(tmp_path / "out")
    (tfspark.read.parquet(parquet).write.format("tfrecord").mode("overwrite").option("schema", str(schema))
     .option("codec", "org.apache.hadoop.io.compress.GzipCodec").save(out))
    manifest = output.read_manifest(out)
    assert manifest["compression"] == "gzip" and all(f["path"].endswith(".tfrecord.gz") for f in manifest["files"])
    seen = {}
    for features, label in make_dataset(out, batch_size=64, shuffle=False, prefetch_to_device=False):
        for i, ident in enumerate(label.numpy().tolist()):
            seen[ident] = (float(features["x"][i]), features["city"][i].numpy().decode())
    assert seen == {i: (i / 4, "?" if i % 5 == 0 else f"c{i}") for i in range(50)}
    # option compressionLevel reaches the writer: gzip's XFL byte says fastest (1) or best (9)
    for level, xfl in (("1", 4), ("9", 2)):
        (tfspark.read.parquet(parquet).write.format("tfrecord").mode("overwrite").option("schema", str(schema))
         .option("compression", "gzip").option("compressionLevel", level).save(out))
        head = (Path(out) / output.read_manifest(out)["files"][0]["path"]).read_bytes()[:10]
        assert head[8] == xfl, (level, head)
    with pytest.raises(Exception, match="compressionLevel must be an integer from 1"):
        (tfspark.read.parquet(parquet).write.format("tfrecord").mode("overwrite").option("schema", str(schema))
         .option("compression", "gzip").option("compressionLevel", "11").save(out))


def test_unwritable_types_and_misspelled_features_fail_before_any_task(tfspark, tmp_path):
    from pyspark.sql import functions as F

    out = tmp_path / "out"
    with pytest.raises(Exception, match="column 'm' has type map<string,bigint>.*to_json"):
        tfspark.range(3).select(F.create_map(F.lit("k"), F.col("id")).alias("m")).write.format("tfrecord") \
            .mode("append").save(str(out))
    assert not out.exists()
    schema = tmp_path / "s.yaml"
    schema.write_text("features:\n  - {name: idd, type: int64}\n")
    with pytest.raises(Exception, match="feature 'idd' is not a column of the DataFrame \\(did you mean 'id'\\?\\)"):
        tfspark.range(3).write.format("tfrecord").mode("append").option("schema", str(schema)).save(str(out))


def test_append_into_an_output_refuses_and_overwrite_replaces(tfspark, tmp_path):
    out = str(tmp_path / "out")
    tfspark.range(10).write.format("tfrecord").mode("append").save(out)
    with pytest.raises(Exception, match="is not empty: Spark's append mode would mix two outputs"):
        tfspark.range(5).write.format("tfrecord").mode("append").save(out)
    assert output.read_manifest(out)["totals"]["records"] == 10
    tfspark.range(5).repartition(2).write.format("tfrecord").mode("overwrite").save(out)
    manifest = output.read_manifest(out)
    assert manifest["totals"]["records"] == 5 and len(manifest["files"]) == 2
    assert sorted(p.name for p in Path(out).iterdir()) == ["_SUCCESS", "_manifest.json",
                                                          "part-00000-of-00002.tfrecord",
                                                          "part-00001-of-00002.tfrecord"]


def test_rows_that_break_the_schema_are_rejects_not_failures(tfspark, tmp_path):
    from pyspark.sql import functions as F

    schema = tmp_path / "s.yaml"
    schema.write_text("features:\n  - {name: id, type: int64}\n  - {name: x, type: float, required: true}\n")
    out = str(tmp_path / "out")
    df = tfspark.range(20).select("id", F.when(F.col("id") == 7, None).otherwise(F.col("id") * 1.5).alias("x"))
    df.write.format("tfrecord").mode("append").option("schema", str(schema)).option("maxRejectFraction", "0.1") \
        .save(out)
    manifest = output.read_manifest(out)
    assert manifest["totals"] == {"input_rows": 20, "records": 19, "rejected": 1}
    (reject,) = [json.loads(line) for f in manifest["rejects"] for line in (Path(out) / f["path"]).read_text()
                 .splitlines()]
    assert reject["reason"] == "feature 'x': required, got null" and json.loads(reject["raw"]) == {"id": 7, "x": None}


def test_a_task_attempt_that_dies_mid_write_leaves_exactly_once_output(submit, tmp_path):
    """spark-submit local[2,4]: every partition's first attempt dies after its first batch."""
    script = tmp_path / "write_df.py"
    out = tmp_path / "out"
    script.write_text(textwrap.dedent(f"""\
        from pyspark.sql import SparkSession
        from tfrecord_io.testing.faults import FirstAttempt, data_source
        spark = SparkSession.builder.getOrCreate()
        spark.dataSource.register(data_source(FirstAttempt("die")))
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
        spark.range(20000).repartition(4).write.format("tfrecord").mode("append").save({str(out)!r})
        spark.stop()
        """))
    proc = submit([str(script)], master="local[2,4]")
    assert "killing task attempt" in proc.stderr
    manifest = output.read_manifest(str(out))
    assert manifest["totals"]["records"] == 20000 and len(manifest["files"]) == 4
    ids = np.sort(np.concatenate([f["id"].numpy() for f in make_dataset(str(out), batch_size=5000, shuffle=False,
                                                                        prefetch_to_device=False)]))
    assert np.array_equal(ids, np.arange(20000))
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "_manifest.json"] + \
        [f"part-0000{k}-of-00004.tfrecord" for k in range(4)]


# ----------------------------------------------------------------------------- reading
def test_read_back_what_was_written_typed_by_the_manifest(tfspark, tmp_path):
    out = str(tmp_path / "out")
    df = _frame(tfspark)
    df.write.format("tfrecord").mode("append").save(out)
    back = tfspark.read.format("tfrecord").load(out)
    assert back.rdd.getNumPartitions() == 3  # one per file
    assert dict(back.dtypes) == {"id": "bigint", "small": "bigint", "x": "float", "city": "string",
                                 "vec": "array<float>", "even": "bigint", "blob": "binary"}
    got = sorted(back.collect(), key=lambda r: r["id"])
    want = sorted(df.collect(), key=lambda r: r["id"])
    assert [(r["id"], r["small"], r["x"], r["city"], r["vec"], r["even"], r["blob"]) for r in got] == \
        [(r["id"], r["small"], float(np.float32(r["x"])), r["city"], r["vec"], int(r["even"]), bytes(r["blob"]))
         for r in want]


def test_option_features_reads_and_decodes_only_those_columns(tfspark, tmp_path):
    out = str(tmp_path / "out")
    df = _frame(tfspark)
    df.write.format("tfrecord").mode("append").save(out)
    back = tfspark.read.format("tfrecord").option("features", "city, id").load(out)
    assert back.columns == ["city", "id"]
    assert sorted((r["id"], r["city"]) for r in back.collect()) == sorted((r["id"], r["city"]) for r in df.collect())
    with pytest.raises(Exception, match="no feature named 'cty' in the schema; did you mean 'city'"):
        tfspark.read.format("tfrecord").option("features", "cty").load(out).schema


def test_option_features_still_refuses_a_record_damaged_in_a_feature_it_does_not_read(tfspark, tmp_path):
    from record_strategies import ld, varint

    from tfrecord_io.core.framing import TFRecordWriter

    def record(i: int, city: bytes) -> bytes:
        entries = [(b"id", ld(0x1A, ld(0x0A, varint(i)))), (b"city", city)]
        return ld(0x0A, b"".join(ld(0x0A, ld(0x0A, k) + ld(0x12, f)) for k, f in entries))

    records = [record(i, ld(0x0A, ld(0x0A, b"c"))) for i in range(10)]
    records[6] = record(6, ld(0x0A, b"\x0a\x05c"))  # city's one value claims 5 bytes, holds 1
    path = tmp_path / "in" / "part-0.tfrecord"
    path.parent.mkdir()
    with TFRecordWriter(str(path)) as w:
        w.write_batch(records)
    offset = sum(len(r) + 16 for r in records[:6])
    schema = tmp_path / "schema.yaml"
    schema.write_text("features:\n  - {name: id, type: int64}\n  - {name: city, type: string}\n")
    read = tfspark.read.format("tfrecord").option("schema", str(schema))
    for reader in (read, read.option("features", "id")):
        with pytest.raises(Exception, match=rf"part-0\.tfrecord: record 6 at byte offset {offset}: not a valid"):
            reader.load(str(path.parent)).collect()


def test_reads_files_written_by_tensorflow_and_beam_inferring_the_schema(tfspark, tmp_path):
    import apache_beam as beam

    examples = []
    for i in range(30):
        ex = tf.train.Example()
        ex.features.feature["id"].int64_list.value.append(i)
        ex.features.feature["w"].float_list.value.extend([i / 2, 1.0])
        ex.features.feature["name"].bytes_list.value.append(f"n{i}".encode())
        examples.append(ex.SerializeToString())
    (tmp_path / "tf").mkdir()
    with tf.io.TFRecordWriter(str(tmp_path / "tf" / "a.tfrecord.gz"), options="GZIP") as w:
        for e in examples:
            w.write(e)
    with beam.Pipeline(runner="FnApiRunner") as p:
        _ = p | beam.Create(examples) | beam.io.WriteToTFRecord(str(tmp_path / "beam" / "part"),
                                                                 file_name_suffix=".tfrecord", num_shards=2)
    for source in ("tf", "beam"):
        df = tfspark.read.format("tfrecord").load(str(tmp_path / source))
        assert dict(df.dtypes) == {"id": "bigint", "name": "string", "w": "array<float>"}, source
        rows = sorted((r["id"], r["name"], r["w"]) for r in df.collect())
        assert rows == [(i, f"n{i}", [i / 2, 1.0]) for i in range(30)], source


def test_tfx_shards_with_empty_features_read_typed_by_the_first_value_anywhere(tfspark, tmp_path):
    """ExampleGen's gz shards (no manifest): 'tip' is an empty Feature everywhere but in one record
    deep in the last shard; spark.read types it bigint, and every row reads.  Mixed int64 and float
    widen to double-free float; int64 against bytes fails before any task, naming both records."""
    from helpers import write_tfx_shards

    shards = [[{"id": k * 3000 + i, "tip": None, "fare": float(i) if k else i} for i in range(3000)]
              for k in range(3)]
    shards[2][2500]["tip"] = 7
    df = tfspark.read.format("tfrecord").load(str(write_tfx_shards(tmp_path / "tfx", shards)))
    assert dict(df.dtypes) == {"id": "bigint", "tip": "array<bigint>", "fare": "float"}
    rows = df.collect()
    assert len(rows) == 9000 and [r["tip"] for r in rows if r["tip"]] == [[7]]
    clash = write_tfx_shards(tmp_path / "clash", [[{"v": 1}], [{"v": "one"}]])
    with pytest.raises(Exception, match=r"feature 'v' is int64_list in .*00000-of-00002\.gz \(record 0 at byte "
                                        r"offset 0\) and bytes_list in .*00001-of-00002\.gz"):
        tfspark.read.format("tfrecord").load(str(clash)).schema


def test_a_corrupt_file_fails_naming_path_and_offset_or_is_skipped(tfspark, tmp_path):
    out = str(tmp_path / "out")
    tfspark.range(100).coalesce(1).write.format("tfrecord").mode("append").save(out)
    (shard,) = [p for p in Path(out).iterdir() if p.name.startswith("part-")]
    data = bytearray(shard.read_bytes())
    record = len(data) // 100
    data[60 * record + 14] ^= 0xFF  # inside the data of record 60
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match=rf"{shard}: corrupt TFRecord at byte offset {60 * record}: data CRC"):
        tfspark.read.format("tfrecord").load(out).collect()
    kept = tfspark.read.format("tfrecord").option("onCorrupt", "skip").load(out).collect()
    assert sorted(r["id"] for r in kept) == list(range(60))


def test_sequence_examples_read_as_context_and_step_arrays(tfspark, tmp_path):
    from tfrecord_io.engines.spark import ConversionOptions, run_conversion

    lines = [json.dumps({"session_id": f"s{k}", "country": "fr", "ts": t, "item": f"i{t}", "price": t * 1.5,
                         "tags": ["a"] * t}) for k in range(3) for t in range(4)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    out = str(tmp_path / "seq")
    run_conversion(tfspark, ConversionOptions(inputs=str(tmp_path / "in.jsonl"), input_format="json",
                                              schema=str(Path(__file__).parent.parent / "conf" / "sessions.yaml"),
                                              output=out))
    df = tfspark.read.format("tfrecord").load(out)
    assert dict(df.dtypes)["ts"] == "array<bigint>" and dict(df.dtypes)["tags"] == "array<array<string>>"
    rows = {r["session_id"]: r for r in df.collect()}
    assert sorted(rows) == ["s0", "s1", "s2"]
    assert rows["s1"]["ts"] == [0, 1, 2, 3] and rows["s1"]["item"] == ["i0", "i1", "i2", "i3"]
    assert rows["s1"]["tags"] == [[], ["a"], ["a", "a"], ["a", "a", "a"]] and rows["s1"]["country"] == "fr"


# ----------------------------------------------------------------------------- the job on any Spark input
def test_job_reads_parquet_orc_and_catalog_tables_checking_types_by_column(tfspark, tmp_path):
    from tfrecord_io.core.schema import SchemaError
    from tfrecord_io.engines.spark import ConversionOptions, run_conversion

    df = _frame(tfspark)
    df.write.parquet(str(tmp_path / "pq"))
    df.write.orc(str(tmp_path / "orc"))
    df.createOrReplaceTempView("frames")
    schema = tmp_path / "s.yaml"
    schema.write_text("features:\n  - {name: id, type: int64, required: true}\n  - {name: x, type: float}\n"
                      "  - {name: city, type: string, default: '?'}\n  - {name: vec, type: float, shape: [-1]}\n"
                      "ignore_columns: [small, even, blob]\n")
    for fmt, inp in (("parquet", str(tmp_path / "pq")), ("orc", str(tmp_path / "orc")), ("table", "frames")):
        out = tmp_path / f"out-{fmt}"
        manifest = run_conversion(tfspark, ConversionOptions(inputs=inp, input_format=fmt, schema=str(schema),
                                                             output=str(out), num_shards=2))
        assert manifest["totals"] == {"input_rows": 50, "records": 50, "rejected": 0}, fmt
        assert len(manifest["files"]) == 2 and (out / "_SUCCESS").exists()
        back = {r["id"]: (r["x"], r["city"]) for r in tfspark.read.format("tfrecord").load(str(out)).collect()}
        assert back == {i: (i / 4, None if i % 5 == 0 else f"c{i}") for i in range(50)}, fmt
    bad = tmp_path / "bad.yaml"
    bad.write_text("features:\n  - {name: id, type: int64}\n  - {name: city, type: int64}\n"
                   "ignore_columns: [small, x, vec, even, blob]\n")
    with pytest.raises(SchemaError, match="column 'city' of the parquet input is string, and feature 'city' is "
                                          "int64"):
        run_conversion(tfspark, ConversionOptions(inputs=str(tmp_path / "pq"), input_format="parquet",
                                                  schema=str(bad), output=str(tmp_path / "never")))
    assert not (tmp_path / "never").exists()


def test_beam_refuses_spark_only_formats_with_exit_2(tmp_path):
    from helpers import tfrecord_io_cli

    write_schema(tmp_path / "s.yaml", ID)
    (tmp_path / "in").mkdir()
    proc = tfrecord_io_cli("convert", "--engine", "beam", "--input", str(tmp_path / "in"), "--format", "parquet",
                           "--schema", str(tmp_path / "s.yaml"), "--output", str(tmp_path / "out"), check=False)
    assert proc.returncode == 2 and "is read by Spark" in proc.stderr, proc.stderr[-2000:]
    (tmp_path / "in" / "a.csv").write_text("id\n1\n")
    proc = tfrecord_io_cli("convert", "--engine", "beam", "--input", str(tmp_path / "in"), "--format", "csv",
                           "--shards", "input", "--schema", str(tmp_path / "s.yaml"), "--output",
                           str(tmp_path / "out"), check=False)
    assert proc.returncode == 2 and "--shards input (one shard per input split) is the Spark job's" in proc.stderr
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- spark-tfrecord compatibility
GOLDEN = Path(__file__).resolve().parent / "golden"


def _golden_frames(spark):
    """The DataFrames behind tests/golden/spark-tfrecord (see make_spark_tfrecord_golden.py)."""
    import sys

    sys.path.insert(0, str(GOLDEN))
    try:
        from make_spark_tfrecord_golden import example_rows, sequence_rows, structs
    finally:
        sys.path.remove(str(GOLDEN))
    example, sequence = structs()
    return (example_rows(), spark.createDataFrame(example_rows(), example).coalesce(1),
            sequence_rows(), spark.createDataFrame(sequence_rows(), sequence).coalesce(1))


def _protos(directory: Path, proto) -> list:
    """Every record of a directory's part files, parsed by TensorFlow's own proto class."""
    from tfrecord_io.core.framing import compression_from_path, read_records

    out = []
    for part in sorted(directory.glob("part-*")):
        with open(part, "rb") as f:
            out += [proto.FromString(r) for r in read_records(f, compression=compression_from_path(str(part)))]
    return out


def test_reads_spark_tfrecords_own_output_to_the_same_values(tfspark):
    """Files that spark-tfrecord 0.7.0 wrote (tests/golden/spark-tfrecord, made by the peer jar itself)."""
    rows, _, sessions, _ = _golden_frames(tfspark)
    for name in ("example", "example-gzip"):
        df = tfspark.read.format("tfrecord").load(str(GOLDEN / "spark-tfrecord" / name))
        assert dict(df.dtypes) == {"id": "bigint", "x": "float", "name": "string", "vec": "array<float>",
                                   "tags": "array<string>", "blob": "binary"}, name
        got = sorted((r["id"], r["x"], r["name"], r["vec"], r["tags"], bytes(r["blob"])) for r in df.collect())
        assert got == [(r["id"], r["x"], r["name"], r["vec"], r["tags"], r["blob"]) for r in rows], name
    df = tfspark.read.format("tfrecord").load(str(GOLDEN / "spark-tfrecord" / "sequence"))
    assert dict(df.dtypes) == {"session": "string", "country": "string", "ts": "array<bigint>",
                               "items": "array<array<string>>", "prices": "array<float>"}
    got = {r["session"]: (r["country"], r["ts"], r["items"], r["prices"]) for r in df.collect()}
    assert got == {s["session"]: (s["country"], [t[0] for t in s["ts"]], s["items"], [p[0] for p in s["prices"]])
                   for s in sessions}


def test_writes_what_spark_tfrecord_writes_examples_and_sequence_examples(tfspark, tmp_path):
    """The same DataFrames through our data source give the same tf.train protos as spark-tfrecord's
    files (compared with TensorFlow's proto classes), SequenceExamples from array-of-array columns."""
    rows, examples, sessions, seqs = _golden_frames(tfspark)
    examples.write.format("tfrecord").mode("overwrite").save(str(tmp_path / "ex"))
    seqs.write.format("tfrecord").mode("overwrite").option("recordType", "SequenceExample") \
        .option("codec", "org.apache.hadoop.io.compress.GzipCodec").save(str(tmp_path / "seq"))
    peer = GOLDEN / "spark-tfrecord"
    assert _protos(tmp_path / "ex", tf.train.Example) == _protos(peer / "example", tf.train.Example)
    ours = _protos(tmp_path / "seq", tf.train.SequenceExample)
    assert ours == _protos(peer / "sequence", tf.train.SequenceExample) and len(ours) == len(sessions)
    manifest = output.read_manifest(str(tmp_path / "seq"))
    assert manifest["record_type"] == "sequence_example" and manifest["compression"] == "gzip"
    assert {f["name"]: f.get("shape") for f in manifest["schema"]["sequence"]} == \
        {"ts": [-1], "items": [-1], "prices": [-1]}
    assert [f["name"] for f in manifest["schema"]["context"]] == ["session", "country"]
    # ... and read back, to the DataFrame written
    back = {r["session"]: r.asDict() for r in tfspark.read.format("tfrecord").load(str(tmp_path / "seq")).collect()}
    assert back == {s["session"]: s for s in sessions}


PEER_JAR = Path(__file__).resolve().parents[2] / "shared" / "peers" / "spark-tfrecord_2.13-0.7.0.jar"


def test_spark_tfrecords_reader_reads_our_block_parallel_gzip(submit, tmp_path):
    """Issue #22 item 2: the gzip stream our writer compresses in 1 MiB blocks on threads (several
    blocks here) is read to every record by spark-tfrecord 0.7.0's own reader (Hadoop's GzipCodec),
    in a spark-submit with the peer's jar, as its users run it."""
    from tfrecord_io.core.codec import encode_examples
    from tfrecord_io.core.framing import TFRecordWriter
    from tfrecord_io.core.schema import Schema

    if not PEER_JAR.is_file():
        pytest.fail(f"spark-tfrecord's jar is not at {PEER_JAR}: this test reads our gzip with it "
                    f"(../shared/peers/README.md says how it was built)")
    schema = Schema.from_dict({"features": [{"name": "id", "type": "int64"}, {"name": "name", "type": "string"}]})
    n = 60_000
    ids = np.arange(n, dtype=np.int64)
    batch = pa.RecordBatch.from_arrays([pa.array(ids), pa.array([f"name-{i:07d}-" * 3 for i in ids])],
                                       names=["id", "name"])
    path = tmp_path / "data" / "part-00000.tfrecord.gz"
    path.parent.mkdir()
    with TFRecordWriter(path, "gzip", compression_threads=2) as w:
        w.write_batch(encode_examples(batch, schema))
    assert len(gzip.decompress(path.read_bytes())) > 3 << 20  # several 1 MiB blocks
    script = tmp_path / "peer_reads.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        from pyspark.sql import SparkSession, functions as F
        spark = SparkSession.builder.getOrCreate()
        df = spark.read.format("tfrecord").option("recordType", "Example").load(sys.argv[1])
        row = df.agg(F.count("*").alias("n"), F.sum("id").alias("ids"),
                     F.sum(F.length("name")).alias("chars")).collect()[0]
        print("PEER " + json.dumps(row.asDict()))
    """))
    proc = submit([str(script), str(path.parent)], master="local[1]", extra=["--jars", str(PEER_JAR)])
    got = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("PEER "))[5:])
    assert got == {"n": n, "ids": int(ids.sum()), "chars": n * len("name-0000000-" * 3)}


def test_with_spark_tfrecords_jar_loaded_ours_is_tfrecord_io_and_register_says_so(submit, tmp_path):
    """spark-tfrecord's jar on the classpath owns format('tfrecord'): register() warns naming the
    other name, and format('tfrecord_io') writes and reads ours (the peer reads what ours wrote)."""
    if not PEER_JAR.is_file():
        pytest.fail(f"spark-tfrecord's jar is not at {PEER_JAR} (../shared/peers/README.md says how it was built)")
    script = tmp_path / "both.py"
    script.write_text(textwrap.dedent("""
        import json, sys, warnings
        from pyspark.sql import SparkSession
        import tfrecord_io.spark
        spark = SparkSession.builder.getOrCreate()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tfrecord_io.spark.register(spark)
        out = sys.argv[1]
        spark.range(50).selectExpr("id", "cast(id as string) as name").write.format("tfrecord_io") \
            .mode("overwrite").save(out)
        ours = spark.read.format("tfrecord_io").load(out).count()
        peer = spark.read.format("tfrecord").option("recordType", "Example").load(out + "/part-*").count()
        print("BOTH " + json.dumps({"warnings": [str(w.message) for w in caught], "ours": ours, "peer": peer}))
    """))
    proc = submit([str(script), str(tmp_path / "out")], master="local[1]", extra=["--jars", str(PEER_JAR)])
    got = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("BOTH "))[5:])
    assert got["ours"] == 50 and got["peer"] == 50
    assert [w for w in got["warnings"] if "format('tfrecord_io')" in w], got["warnings"]


def test_sequence_example_needs_a_feature_list_column(tfspark, tmp_path):
    with pytest.raises(Exception, match="recordType SequenceExample needs at least one array-of-arrays column"):
        tfspark.range(3).write.format("tfrecord").mode("overwrite").option("recordType", "SequenceExample") \
            .save(str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


# ----------------------------------------------------------------------------- on the test HDFS
def test_on_hdfs_split_write_read_back_and_the_job_from_parquet(tfspark, hdfs, tmp_path):
    """Sections 1-4 on a real HDFS: the data source writes splits there and reads them back; the
    job converts Parquet on HDFS (with --split too)."""
    from tfrecord_io.engines.spark import ConversionOptions, run_conversion

    base = hdfs.uri(f"/datasource/{tmp_path.name}")
    df = _frame(tfspark)
    df.write.format("tfrecord").mode("overwrite").option("split", "train=3,eval=1").option("splitBy", "id") \
        .save(f"{base}/split")
    top = output.read_manifest(f"{base}/split")
    assert top["totals"] == {"input_rows": 50, "records": 50, "rejected": 0}
    ids = {name: sorted(r["id"] for r in tfspark.read.format("tfrecord").load(f"{base}/split/{name}").collect())
           for name in ("train", "eval")}
    assert sorted(ids["train"] + ids["eval"]) == list(range(50)) and ids["train"] and ids["eval"]
    assert [top["splits"][n]["records"] for n in ("train", "eval")] == [len(ids["train"]), len(ids["eval"])]
    df.write.parquet(f"{base}/pq")
    schema = tmp_path / "s.yaml"
    schema.write_text("features:\n  - {name: id, type: int64, required: true}\n  - {name: x, type: float}\n"
                      "ignore_columns: [small, city, vec, even, blob]\n")
    manifest = run_conversion(tfspark, ConversionOptions(inputs=f"{base}/pq", input_format="parquet",
                                                         schema=str(schema), output=f"{base}/from-pq",
                                                         split="train=3,eval=1", split_by="id"))
    assert manifest["totals"] == {"input_rows": 50, "records": 50, "rejected": 0}
    back = {name: sorted(r["id"] for r in tfspark.read.format("tfrecord").load(f"{base}/from-pq/{name}").collect())
            for name in ("train", "eval")}
    assert back == ids  # split by id: the same rows in eval, whatever else the records hold
