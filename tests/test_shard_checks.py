"""Readers check what they read against the manifest (#31 item 1): a shard cut short, one with a
record appended, one replaced by another conversion's shard (of another size, or of the same size
and record lengths: only the content checksum tells it), a gzip shard missing one record -- every
reader fails naming the shard, what the manifest says and what the file holds.

Each reader is also run on the untampered output and must read every record (so that none of
these tests passes by refusing everything).  Files without a manifest keep working: the rest of
the suite reads TF-written and spark-tfrecord files without one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest

from helpers import tfrecord_io_cli
from schemas import ID_SCORE
from tfrecord_io.commands.inspect import inspect_source
from tfrecord_io.commands.reading import resolve_source
from tfrecord_io.commands.stats import compute_stats
from tfrecord_io.commands.verify import verify_source
from tfrecord_io.core.codec import encode_examples
from tfrecord_io.core.framing import TFRecordWriter, iter_records
from tfrecord_io.core.schema import Schema
from tfrecord_io.storage import fs, output
from tfrecord_io.storage.sources import ShardMismatchError

SCHEMA = Schema.from_yaml(ID_SCORE)
PER_SHARD = 200
SHARD = output.shard_name(1, 2)


def _batch(start: int, n: int, scale: float) -> pa.RecordBatch:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.RecordBatch.from_pydict({"id": ids, "score": (ids * scale).astype(np.float32)})


def convert(out: str, scale: float = 0.5, first_id: int = 0, compression: str = "none") -> str:
    """A committed output of two shards of PER_SHARD records (ids from ``first_id``; ``scale``
    changes the float values only, so two outputs of other scales have the same sizes and lengths)."""
    output.write_output(out, [[encode_examples(_batch(first_id + k * PER_SHARD, PER_SHARD, scale), SCHEMA)]
                              for k in range(2)], schema=SCHEMA, compression=compression, engine="test")
    return out


def _records(path: Path, compression: str = "none") -> list[bytes]:
    with open(path, "rb") as f:
        return [data for _, data in iter_records(f, name=str(path), compression=compression)]


def _rewrite(path: Path, records: list[bytes], compression: str = "none") -> None:
    with open(path, "wb") as f, TFRecordWriter(f, compression=compression) as w:
        for r in records:
            w.write(r)


# -- the tamperings: (name, how, what the error says) -------------------------------------------
def cut_at_a_record_boundary(out: Path, tmp: Path) -> None:
    shard = out / SHARD
    _rewrite(shard, _records(shard)[:150])


def a_valid_record_appended(out: Path, tmp: Path) -> None:
    shard = out / SHARD
    _rewrite(shard, _records(shard) + _records(shard)[:1])


def replaced_by_another_conversions_shard(out: Path, tmp: Path) -> None:
    other = convert(str(tmp / "other"), first_id=10_000_000)  # longer ids: another size
    shutil.copyfile(Path(other) / SHARD, out / SHARD)


def replaced_by_one_of_the_same_size_and_lengths(out: Path, tmp: Path) -> None:
    other = Path(convert(str(tmp / "twin"), scale=0.25))  # other floats: same size, same record lengths
    assert (other / SHARD).stat().st_size == (out / SHARD).stat().st_size
    assert [len(r) for r in _records(other / SHARD)] == [len(r) for r in _records(out / SHARD)]
    shutil.copyfile(other / SHARD, out / SHARD)


TAMPERINGS = {
    "cut": (cut_at_a_record_boundary, r"is \d+ bytes, but _manifest.json says \d+ bytes \(200 records\)"),
    "appended": (a_valid_record_appended, r"is \d+ bytes, but _manifest.json says \d+ bytes \(200 records\)"),
    "foreign": (replaced_by_another_conversions_shard,
                r"is \d+ bytes, but _manifest.json says \d+ bytes \(200 records\)"),
    "twin": (replaced_by_one_of_the_same_size_and_lengths,
             r"its bytes have CRC-32C [0-9a-f]{8}, but _manifest.json says [0-9a-f]{8}"),
}


@pytest.fixture(params=sorted(TAMPERINGS))
def tampered(request, tmp_path) -> tuple[str, str]:
    how, says = TAMPERINGS[request.param]
    out = Path(convert(str(tmp_path / "out")))
    how(out, tmp_path)
    return str(out), says


def _says(error: BaseException, pattern: str) -> None:
    import re

    text = str(error)
    assert SHARD in text, f"the error does not name the shard: {text[:300]}"
    assert re.search(pattern, text), f"{pattern!r} not in {text[:400]}"


# -- every reader, on the untampered output and on each tampering ----------------------------------
def _read_batches(out: str) -> int:
    from tfrecord_io import read_batches

    return sum(len(b["id"]) for b in read_batches(out, batch_size=64))


def _make_dataset(shuffle):
    def read(out: str) -> int:
        from tfrecord_io import make_dataset

        return sum(int(b["id"].shape[0]) for b in make_dataset(out, batch_size=64, shuffle=shuffle, seed=1,
                                                               num_epochs=1))
    return read


def _stats(out: str) -> int:
    return compute_stats(resolve_source(out), workers=1, progress=False).records


def _inspect(out: str) -> int:
    return inspect_source(resolve_source(out), workers=1, progress=False)["records"]


READERS = {"read_batches": _read_batches, "make_dataset": _make_dataset(False),
           "make_dataset-shuffled": _make_dataset(True), "make_dataset-global": _make_dataset("global"),
           "stats": _stats, "inspect": _inspect}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_reads_an_untampered_output_whole(reader, tmp_path):
    out = convert(str(tmp_path / "out"))
    assert READERS[reader](out) == 2 * PER_SHARD


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_refuses_a_shard_that_is_not_the_manifests(reader, tampered):
    import tensorflow as tf

    out, says = tampered
    if reader == "inspect" and "CRC-32C" in says:
        # inspect shows the manifest's counts and the first records: it checks sizes, reads no file whole
        assert READERS[reader](out) == 2 * PER_SHARD
        return
    with pytest.raises((ValueError, tf.errors.OpError)) as e:
        READERS[reader](out)
    _says(e.value, says)


def test_verify_names_each_difference(tampered):
    out, says = tampered
    result = verify_source(resolve_source(out))
    assert not result.ok
    manifest = [p for p in result.problems if p.check == "manifest"]
    assert manifest and all(p.file == SHARD for p in manifest), result.problems
    text = " ".join(p.message for p in manifest)
    if "CRC-32C" in says:
        assert "the manifest says CRC-32C" in text and "replaced or altered" in text, text
    else:
        assert "bytes" in text, text


def test_the_cli_readers_exit_3_or_2_with_one_line_naming_the_shard(tampered, tmp_path):
    out, says = tampered
    proc = tfrecord_io_cli("verify", out, check=False)
    assert proc.returncode == 3, proc.stderr
    assert SHARD in proc.stdout + proc.stderr
    proc = tfrecord_io_cli("stats", out, "--logdir", str(tmp_path / "logs"), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    _says(proc.stderr, says)


def test_a_gzip_shard_missing_one_record_is_refused(tmp_path):
    from tfrecord_io import read_batches

    out = Path(convert(str(tmp_path / "gz"), compression="gzip"))
    name = output.shard_name(1, 2, "gzip")
    _rewrite(out / name, _records(out / name, "gzip")[:-1], "gzip")
    with pytest.raises(ShardMismatchError, match=rf"{name}: is \d+ bytes, but _manifest.json says"):
        list(read_batches(str(out), batch_size=64))
    # the same shard with its manifest entry made to match its size (a tampered manifest): the count tells
    manifest = json.loads((out / "_manifest.json").read_text())
    entry = next(f for f in manifest["files"] if f["path"] == name)
    entry["bytes"] = (out / name).stat().st_size
    del entry["crc32c"]
    (out / "_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardMismatchError, match=rf"{name}: holds 199 records, but _manifest.json says 200"):
        list(read_batches(str(out), batch_size=64))


def test_the_manifest_checksum_is_the_files_crc32c(tmp_path):
    """The checksum is the plain CRC-32C of the stored bytes (compressed ones for gzip): what any
    crc32c tool, or Hadoop's COMPOSITE_CRC, computes of the file."""
    for compression in ("none", "gzip", "zlib"):
        out = Path(convert(str(tmp_path / compression), compression=compression))
        for f in json.loads((out / "_manifest.json").read_text())["files"]:
            assert f["crc32c"] == f"{google_crc32c.value((out / f['path']).read_bytes()):08x}"


def test_a_manifest_without_checksums_still_reads(tmp_path):
    """Outputs written before manifests held checksums: read, with the count and size checks."""
    from tfrecord_io import read_batches

    out = Path(convert(str(tmp_path / "old")))
    manifest = json.loads((out / "_manifest.json").read_text())
    for f in manifest["files"]:
        del f["crc32c"]
    (out / "_manifest.json").write_text(json.dumps(manifest))
    assert sum(len(b["id"]) for b in read_batches(str(out), batch_size=64)) == 2 * PER_SHARD
    assert verify_source(resolve_source(str(out))).ok


@pytest.mark.spark
@pytest.mark.parametrize("tampering", ["cut", "twin"])
def test_spark_read_refuses_a_shard_that_is_not_the_manifests(spark, tmp_path, tampering):
    import tfrecord_io.spark

    tfrecord_io.spark.register(spark)
    how, says = TAMPERINGS[tampering]
    out = Path(convert(str(tmp_path / "out")))
    assert spark.read.format("tfrecord").load(str(out)).count() == 2 * PER_SHARD
    how(out, tmp_path)
    with pytest.raises(Exception) as e:
        spark.read.format("tfrecord").load(str(out)).count()
    _says(e.value, says)


def test_hdfs_readers_refuse_a_same_size_replacement(hdfs, tmp_path):
    """On real HDFS: read_batches streams the file; make_dataset reads the shard cache's local copy."""
    import tensorflow as tf

    from tfrecord_io import make_dataset, read_batches

    local = Path(convert(str(tmp_path / "out")))
    replaced_by_one_of_the_same_size_and_lengths(local, tmp_path)
    root = hdfs.uri(f"/shard-checks/{tmp_path.name}")
    for p in sorted(local.rglob("*")):
        if p.is_file():
            with open(p, "rb") as src, fs.open(fs.join(root, str(p.relative_to(local))), "wb") as dst:
                dst.write(src.read())
    says = TAMPERINGS["twin"][1]
    with pytest.raises(ShardMismatchError) as e:
        list(read_batches(root, batch_size=64))
    _says(e.value, says)
    with pytest.raises(tf.errors.OpError) as e:
        list(make_dataset(root, batch_size=64, num_epochs=1))
    _says(e.value, says)
