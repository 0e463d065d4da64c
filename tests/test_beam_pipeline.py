"""The Beam pipeline (``pipelines.to_tfrecord`` / ``tfrecord_io.beam``) end to end.

Runs use ``--runner=FnApiRunner`` (Beam's in-process runner, without DirectRunner's attempt to
download Prism) unless a test is about the runner; every run checks which runner actually ran.
Output is read back with TensorFlow (``tf.data.TFRecordDataset`` + ``tf.io.parse_example``).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import sys
from pathlib import Path

import pytest

from helpers import (CORPUS, EXAMPLE_SCHEMA, FNAPI, REPO, SESSIONS_SCHEMA, TF_COMPRESSION, corpus_table,
                     example_rows, output_records, rejects_of, session_lines, write_example_csv)
from tfrecord_io.engines import beam as tbeam
from tfrecord_io.storage import fs, output
from tfrecord_io.core.schema import Schema
from tfrecord_io.engines.loader import parse_spec
from tfrecord_io.storage.schema_io import load_schema

sys.path.insert(0, str(REPO))  # pipelines/ is a top-level package of the repository

from pipelines import to_tfrecord  # noqa: E402


# ------------------------------------------------------------------------------- data


# ------------------------------------------------------------------------------- helpers
def run(tmp_path: Path, inp, fmt: str, schema: Schema | str, *, beam_args=(), **kw) -> tbeam.ConversionResult:
    from apache_beam.options.pipeline_options import PipelineOptions

    if not isinstance(schema, Schema):
        schema = load_schema(schema)
    kw.setdefault("output", str(tmp_path / "out"))
    conv = tbeam.ConversionOptions(inputs=str(inp), input_format=fmt, schema=schema, **kw)
    return tbeam.run_conversion(conv, PipelineOptions(list(beam_args) or FNAPI))


def parse_examples(out: str, schema: Schema) -> list[dict]:
    """Every record of a committed output parsed by TensorFlow with the schema's spec."""
    import tensorflow as tf

    manifest = output.read_manifest(out)
    comp = TF_COMPRESSION[manifest["compression"]]
    rows = []
    for f in manifest["files"]:
        path = fs.join(out, f["path"])
        local = path if "://" not in path else None
        if local is None:  # TF has no WebHDFS/hdfs-native here: copy the file out
            import tempfile

            local = tempfile.mktemp(suffix=Path(f["path"]).suffix)
            with fs.open(path, "rb") as src, open(local, "wb") as dst:
                dst.write(src.read())
        ds = tf.data.TFRecordDataset(local, compression_type=comp).batch(512)
        for batch in ds:
            parsed = tf.io.parse_example(batch, parse_spec(schema))
            n = int(batch.shape[0])
            for i in range(n):
                row = {}
                for name, t in parsed.items():
                    v = t[i]
                    v = v.numpy() if not hasattr(v, "to_list") else v.to_list()
                    row[name] = v.tolist() if hasattr(v, "tolist") else v
                rows.append(row)
    return rows


def assert_committed(out: str, result: tbeam.ConversionResult, runner: str = "FnApiRunner") -> dict:
    assert result.runner == runner, f"ran on {result.runner}"
    assert fs.exists(fs.join(out, output.SUCCESS)) and not fs.exists(fs.join(out, output.TEMPORARY))
    manifest = output.read_manifest(out)
    t = manifest["totals"]
    assert manifest["engine"] == "beam"
    assert t["input_rows"] == t.get("rows_in_records", t["records"]) + t["rejected"]
    # Beam metrics agree with what was committed.
    assert result.metrics["rows_read"] == t["input_rows"]
    assert result.metrics["records_written"] == t["records"]
    assert result.metrics.get("rows_rejected", 0) == t["rejected"]
    if not out.startswith("hdfs://"):
        names = os.listdir(out)
        assert set(names) <= {output.SUCCESS, output.MANIFEST, output.REJECTS} | {f["path"] for f in manifest["files"]}
        mtimes = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in names}
        assert mtimes[output.SUCCESS] >= max(mtimes.values())  # _SUCCESS last
    return manifest


def expected_examples(lines: list[str]) -> dict[int, dict]:
    """What the good CSV lines should parse back to, by id (computed with Python's csv)."""
    import csv
    import io

    import numpy as np

    out = {}
    for row in csv.reader(io.StringIO("\n".join(lines) + "\n")):
        if len(row) != 8 or not row[0] or row[1] == "notanumber" or len(row[6].split(";")) != 3:
            continue
        out[int(row[0])] = {
            "id": int(row[0]), "fare": float(np.float32(row[1])) if row[1] else 0.0,
            "miles": float(np.float32(row[2])), "city": (row[3] or "?").encode(), "note": row[4].encode(),
            "scores": [float(np.float32(x)) for x in row[5].split("|")] if row[5] else [],
            "dims": [int(x) for x in row[6].split(";")], "label": int(row[7])}
    return out


# ------------------------------------------------------------------------------- local
def test_csv_to_examples_read_back_with_tensorflow(tmp_path):
    lines = example_rows(400, bad_every=23, newlines=True)
    inp = write_example_csv(tmp_path / "in.csv", lines)
    result = run(tmp_path, inp, "csv", EXAMPLE_SCHEMA, max_reject_fraction=0.1, multiline=True)
    out = str(tmp_path / "out")
    manifest = assert_committed(out, result)
    expected = expected_examples(lines)
    got = {r["id"]: r for r in parse_examples(out, EXAMPLE_SCHEMA)}
    assert got.keys() == expected.keys() and len(got) == manifest["totals"]["records"]
    for i, want in expected.items():
        assert got[i] == want, i
    rejects = rejects_of(out)
    assert len(rejects) == 400 // 23 == manifest["totals"]["rejected"]
    for r in rejects:
        assert r["source"] == str(inp) and r["line"] > 1 and r["raw"] and r["reason"]
    # The line numbers point at the rejected rows in the file (rows may span lines).
    text = inp.read_text().split("\n")
    for r in rejects:
        assert text[r["line"] - 1].startswith(r["raw"].split("\n")[0])


def test_command_line_exit_codes_and_overwrite_refusal(tmp_path, caplog, capsys):
    inp = write_example_csv(tmp_path / "in.csv", example_rows(50))
    schema = tmp_path / "schema.yaml"
    schema.write_text(EXAMPLE_SCHEMA.to_yaml())
    out = tmp_path / "out"
    args = ["--input", str(inp), "--format", "csv", "--schema", str(schema), "--output", str(out), *FNAPI]
    assert to_tfrecord.main(args) == 0
    first = output_records(str(out))
    caplog.set_level(logging.INFO, logger="tfrecord_io")
    assert to_tfrecord.main(args) == 2  # refuses a non-empty output
    assert "exists and is not empty; pass --overwrite" in capsys.readouterr().err
    assert output_records(str(out)) == first  # untouched
    assert to_tfrecord.main([*args, "--overwrite", "--record-type", "example"]) == 0
    assert output_records(str(out)) == first
    assert "done on FnApiRunner: 50 rows read, 50 records written to 1 file(s), 0 rows rejected" in caplog.text
    assert to_tfrecord.main([*args, "--overwrite", "--record-type", "sequence_example"]) == 2
    assert "does not match the schema" in capsys.readouterr().err
    assert to_tfrecord.main(["--format", "csv"]) == 2  # argparse: missing required options


def test_too_many_rejects_fails_and_commits_nothing(tmp_path, capsys):
    inp = write_example_csv(tmp_path / "in.csv", example_rows(100, bad_every=5))
    schema = tmp_path / "schema.yaml"
    schema.write_text(EXAMPLE_SCHEMA.to_yaml())
    out = tmp_path / "out"
    rc = to_tfrecord.main(["--input", str(inp), "--format", "csv", "--schema", str(schema), "--output", str(out),
                           "--max-reject-fraction", "0.1", *FNAPI])
    assert rc == 3
    assert "20 of 100 input rows were rejected (20.00%), more than --max-reject-fraction 0.1" in \
        capsys.readouterr().err
    assert not (out / output.SUCCESS).exists() and not (out / output.MANIFEST).exists()
    assert not list(out.glob("part-*"))
    # The reasons stay under _temporary for inspection.
    kept = [json.loads(line) for p in out.glob("_temporary/*/_rejects/*.jsonl") for line in p.read_text().splitlines()]
    assert len(kept) == 20


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_compression_and_fixed_shards_hold_the_same_records(tmp_path, compression):
    inp = write_example_csv(tmp_path / "in.csv", example_rows(300, seed=3))
    plain = run(tmp_path, inp, "csv", EXAMPLE_SCHEMA, output=str(tmp_path / "plain"))
    packed = run(tmp_path, inp, "csv", EXAMPLE_SCHEMA, output=str(tmp_path / "packed"), num_shards=3,
                 compression=compression)
    manifest = assert_committed(str(tmp_path / "packed"), packed)
    ext = {"gzip": ".gz", "zlib": ".zlib"}[compression]
    assert [f["path"] for f in manifest["files"]] == [f"part-{i:05d}-of-00003.tfrecord{ext}" for i in range(3)]
    assert all(f["records"] > 50 for f in manifest["files"])  # rows are spread over the shards
    assert output_records(str(tmp_path / "packed")) == output_records(str(tmp_path / "plain"))
    assert len(parse_examples(str(tmp_path / "packed"), EXAMPLE_SCHEMA)) == 300
    assert plain.totals.records == 300


def test_more_shards_than_rows_writes_empty_shards(tmp_path):
    inp = write_example_csv(tmp_path / "in.csv", example_rows(2))
    result = run(tmp_path, inp, "csv", EXAMPLE_SCHEMA, num_shards=4)
    manifest = assert_committed(str(tmp_path / "out"), result)
    assert len(manifest["files"]) == 4 and sum(f["records"] for f in manifest["files"]) == 2


def _shard_bytes(out: str) -> dict[str, bytes]:
    return {f["path"]: (Path(out) / f["path"]).read_bytes() for f in output.read_manifest(out)["files"]}


def test_spilled_and_grouped_writers_write_the_same_bytes(tmp_path, monkeypatch):
    """The in-process runner spills the dealt pieces (the shuffle carries references) and writes small
    shards in groups; neither changes a byte: the same shard files as pieces sent whole, one shard a
    writer.  Windows smaller than a shard (a scratch file for a group) keep each shard's rows."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.conversion import dealing

    assert tbeam.spills(PipelineOptions([])) and tbeam.spills(PipelineOptions(FNAPI))
    assert tbeam.spills(PipelineOptions(["--runner=PortableRunner"]))
    assert tbeam.spills(PipelineOptions(["--runner=FlinkRunner"]))
    assert not tbeam.spills(PipelineOptions(["--runner=DataflowRunner"]))
    (tmp_path / "in").mkdir()
    for k in range(3):
        write_example_csv(tmp_path / "in" / f"part-{k}.csv", example_rows(400, seed=k, bad_every=97))
    kw = dict(num_shards=7, max_reject_fraction=0.05)
    spilled = run(tmp_path, tmp_path / "in", "csv", EXAMPLE_SCHEMA, output=str(tmp_path / "spilled"), **kw)
    want = _shard_bytes(str(tmp_path / "spilled"))
    assert len(want) == 7 and all(want.values())
    with monkeypatch.context() as m:  # one shard a writer
        m.setattr(dealing, "GROUP_INPUT_BYTES", 1)
        run(tmp_path, tmp_path / "in", "csv", EXAMPLE_SCHEMA, output=str(tmp_path / "alone"), **kw)
    with monkeypatch.context() as m:  # the pieces through the shuffle, as on Dataflow
        m.setattr(tbeam, "spills", lambda options: False)
        run(tmp_path, tmp_path / "in", "csv", EXAMPLE_SCHEMA, output=str(tmp_path / "whole"), **kw)
    assert _shard_bytes(str(tmp_path / "alone")) == want
    assert _shard_bytes(str(tmp_path / "whole")) == want
    for per_writer in (1, 1 << 30):  # windows of ~one piece: streamed (one shard) / scratch (a group)
        with monkeypatch.context() as m:
            m.setattr(dealing, "HOLD_BYTES", 1)
            m.setattr(dealing, "GROUP_INPUT_BYTES", per_writer)
            out = str(tmp_path / f"windows-{per_writer}")
            result = run(tmp_path, tmp_path / "in", "csv", EXAMPLE_SCHEMA, output=out, **kw)
        assert_committed(out, result)
        got = _shard_bytes(out)
        assert got.keys() == want.keys()
        for name in want:  # the same records in each shard
            assert output_records_of(got[name]) == output_records_of(want[name])
    assert spilled.totals == result.totals and result.totals.rejected == 12


def output_records_of(data: bytes) -> collections.Counter:
    from tfrecord_io.core.framing import read_records
    import io

    return collections.Counter(read_records(io.BytesIO(data), compression="none"))


def test_read_tasks_send_spill_references_through_the_shuffle(tmp_path):
    """On the in-process runner what crosses GroupByShard is ``(path, offset, length)``, never the rows:
    the memory a run takes does not grow with the input."""
    inp = write_example_csv(tmp_path / "in.csv", example_rows(500, seed=1))
    conv = tbeam.ConversionOptions(inputs=str(inp), input_format="csv", schema=EXAMPLE_SCHEMA,
                                   output=str(tmp_path / "out"), num_shards=4)
    plan = tbeam.plan_conversion(conv)
    plan.prepare_output()
    job = tbeam._Job(plan, "run1", spill=True, shards_per_writer=2)
    read = tbeam.ReadFile(job)
    read.setup()
    sent = [x for x in read.process((str(inp),)) if not hasattr(x, "tag")]
    assert sent and {group for group, _ in sent} == {0, 1}
    for group, (key, ref) in sent:
        path, offset, length = ref
        assert path.startswith(str(tmp_path / "out" / output.TEMPORARY)) and length > 0
    pieces = list(tbeam.spill.read_pieces([piece for _, piece in sent]))
    assert sum(b.num_rows for _, data in pieces for b in tbeam.dealing.from_ipc(data)) == 500
    output.abort(str(tmp_path / "out"))


def test_sequence_examples_grouped_and_ordered(tmp_path):
    lines = session_lines(60)
    bad = [json.dumps({"session_id": "s0000", "ts": 500, "item": "x", "price": 1.0}),  # no tags: group reject
           json.dumps({"session_id": None, "ts": 1, "tags": []}),                     # no group key
           "{not json"]
    half = len(lines) // 2
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines[:half] + bad) + "\n")
    (tmp_path / "in" / "b.jsonl").write_text("\n".join(lines[half:]) + "\n")
    (tmp_path / "in" / "_SUCCESS").write_text("")  # Hadoop-style marker files are skipped
    result = run(tmp_path, tmp_path / "in", "json", SESSIONS_SCHEMA, num_shards=2, compression="gzip",
                 max_reject_fraction=0.5)
    out = str(tmp_path / "out")
    manifest = assert_committed(out, result)
    rows = [json.loads(x) for x in lines]
    sessions = collections.defaultdict(list)
    for r in rows:
        sessions[r["session_id"]].append(r)
    s0000 = len(sessions.pop("s0000"))
    t = manifest["totals"]
    assert t == {"input_rows": len(rows) + 3, "records": len(sessions), "rejected": s0000 + 3,
                 "rows_in_records": len(rows) - s0000}
    reasons = collections.Counter(r["reason"].split(":")[0] for r in rejects_of(out))
    assert reasons == {"rejected with its group (session_id='s0000'), which holds a bad row": s0000,
                       "sequence feature 'tags'": 1,          # its bad row (no tags, no default)
                       "feature 'session_id'": 1,             # no group: rejected alone
                       "malformed JSON": 1}

    import tensorflow as tf

    context_spec, sequence_spec = parse_spec(SESSIONS_SCHEMA)
    seen = set()
    for f in manifest["files"]:
        for rec in tf.data.TFRecordDataset(str(Path(out) / f["path"]), compression_type="GZIP"):
            ctx, seq = tf.io.parse_single_sequence_example(rec, context_spec, sequence_spec)
            sid = ctx["session_id"].numpy().decode()
            steps = sorted(sessions[sid], key=lambda r: r["ts"])
            assert seq["ts"].numpy().tolist() == [r["ts"] for r in steps]
            assert [x.decode() for x in seq["item"].numpy().tolist()] == [r["item"] for r in steps]
            assert seq["price"].numpy().tolist() == pytest.approx([r["price"] for r in steps])
            assert seq["tags"].to_list() == [[t.encode() for t in r["tags"]] for r in steps]
            assert ctx["country"].numpy().decode() == steps[0].get("country", "??")
            seen.add(sid)
    assert seen == set(sessions)


def test_huge_groups_split_into_consecutive_records(tmp_path):
    """The Spark job's policy: a group longer than --max-steps is cut into records of at most that many
    steps, in order, in one shard, each with the group's context."""
    lines = [json.dumps({"session_id": "big", "country": "fr", "ts": i, "tags": [str(i)]}) for i in range(25)]
    lines += [json.dumps({"session_id": f"s{k}", "ts": i, "tags": []}) for k in range(6) for i in range(3)]
    random.Random(1).shuffle(lines)
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    result = run(tmp_path, tmp_path / "in.jsonl", "json", SESSIONS_SCHEMA, max_steps=10, num_shards=3,
                 allow_missing_columns=True)  # no item or price in this data
    out = str(tmp_path / "out")
    manifest = assert_committed(out, result)
    assert (result.totals.records, result.totals.rejected, result.totals.rows_in_records) == (3 + 6, 0, 43)
    import tensorflow as tf

    context_spec, sequence_spec = parse_spec(SESSIONS_SCHEMA)
    pieces = []
    for f in manifest["files"]:
        for rec in tf.data.TFRecordDataset(str(Path(out) / f["path"])):
            ctx, seq = tf.io.parse_single_sequence_example(rec, context_spec, sequence_spec)
            if ctx["session_id"].numpy() == b"big":
                assert ctx["country"].numpy() == b"fr"
                pieces.append((f["path"], seq["ts"].numpy().tolist()))
    assert len({path for path, _ in pieces}) == 1  # one shard, the pieces one after the other
    assert [ts for _, ts in pieces] == [list(range(0, 10)), list(range(10, 20)), list(range(20, 25))]


def test_context_must_agree_within_a_record(tmp_path):
    lines = [json.dumps({"session_id": "a", "country": "de", "ts": 1, "tags": []}),
             json.dumps({"session_id": "a", "country": "fr", "ts": 2, "tags": []}),
             json.dumps({"session_id": "b", "country": "fr", "ts": 1, "tags": []})]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    result = run(tmp_path, tmp_path / "in.jsonl", "json", SESSIONS_SCHEMA, max_reject_fraction=1.0,
                 allow_missing_columns=True)  # no item or price in this data
    assert (result.totals.records, result.totals.rejected) == (1, 2)
    assert {r["reason"] for r in rejects_of(str(tmp_path / "out"))} == {
        "rejected with its group (session_id='a'), which holds a bad row: context feature 'country' differs "
        "within the group: 'fr' at line 2, 'de' in its first row"}


def test_multi_processing_workers_give_the_same_records(tmp_path):
    """Runner-agnostic: two worker processes (nothing shared with the driver but pickles)."""
    (tmp_path / "in").mkdir()
    for k in range(4):
        write_example_csv(tmp_path / "in" / f"part-{k}.csv", example_rows(150, seed=k, bad_every=50))
    single = run(tmp_path, tmp_path / "in", "csv", EXAMPLE_SCHEMA, output=str(tmp_path / "one"), num_shards=2,
                 max_reject_fraction=0.05)
    multi = run(tmp_path, f"file://{tmp_path}/in/*.csv", "csv", EXAMPLE_SCHEMA,
                output=f"file://{tmp_path}/two", num_shards=2, max_reject_fraction=0.05,
                beam_args=[*FNAPI, "--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert_committed(str(tmp_path / "two"), multi)
    assert output_records(str(tmp_path / "two")) == output_records(str(tmp_path / "one"))
    assert multi.totals == single.totals and multi.totals.input_rows == 600 and multi.totals.rejected == 12


def test_direct_runner_reports_the_runner_that_actually_ran(tmp_path):
    """Beam 2.77's DirectRunner tries Prism first; whatever ran is what we report."""
    inp = write_example_csv(tmp_path / "in.csv", example_rows(20))
    result = run(tmp_path, inp, "csv", EXAMPLE_SCHEMA, beam_args=["--runner=DirectRunner"])
    assert result.requested_runner == "DirectRunner"
    # Offline (as in CI) Prism cannot be downloaded and the FnApiRunner runs it.
    assert result.runner in ("FnApiRunner", "PortableRunner (Prism, when DirectRunner chose it)")
    assert result.totals.records == 20


def test_exactly_once_commit_takes_only_reported_attempts(tmp_path):
    """Files of attempts the pipeline did not report (failed or duplicate bundles) never land."""
    out = str(tmp_path / "out")
    output.prepare_output(out, overwrite=False)
    conv = tbeam.ConversionOptions(inputs="unused", input_format="csv", schema=EXAMPLE_SCHEMA, output=out)
    job = tbeam._Job(tbeam.Plan(conv, EXAMPLE_SCHEMA, None, (), 1), "run1")
    import pyarrow as pa

    recs = pa.array([b"a", b"b"], pa.binary())
    winner = output.write_shard([recs], out, "beam-run1-winner", output.shard_name(0, 1), "none")
    output.write_shard([recs, recs], out, "beam-run1-loser", output.shard_name(0, 1), "none")  # a retry's leftovers
    report = [{"kind": "records", "files": [output.written_file_dict(winner)]},  # a writer group's files
              {"kind": "input", "path": "x", "rows": 2}]
    result = tbeam._commit(job, report, "FnApiRunner", {})
    assert result.ok and output_records(out) == collections.Counter({b"a": 1, b"b": 1})
    assert sorted(os.listdir(out)) == ["_SUCCESS", "_manifest.json", "part-00000-of-00001.tfrecord"]


# ------------------------------------------------------------------------------- HDFS
def test_hdfs_in_and_out_in_two_worker_processes(hdfs, tmp_path, monkeypatch):
    """Input read and shards written in two worker processes, listing and commit on the driver, all
    through tfrecord_io.storage.fs (hdfs-native); ``--hdfs_user`` is the HDFS user there and here."""
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    base = hdfs.uri(f"/beam-test/{tmp_path.name}")
    lines = example_rows(200, seed=7, bad_every=40)
    for k, chunk in enumerate((lines[:120], lines[120:])):
        with fs.open(f"{base}/in/part-{k}.csv", "wb") as f:
            f.write(("id,fare,miles,city,note,scores,dims,label\n" + "".join(x + "\n" for x in chunk)).encode())
    with fs.open(f"{base}/schema.yaml", "wb") as f:
        f.write(EXAMPLE_SCHEMA.to_yaml().encode())
    hdfs_args = [f"--hdfs_user={hdfs.user}"]
    out = f"{base}/out"
    rc = to_tfrecord.main(["--input", f"{base}/in", "--format", "csv", "--schema", f"{base}/schema.yaml",
                           "--output", out, "--num-shards", "2", "--compression", "gzip",
                           "--max-reject-fraction", "0.05",
                           *FNAPI, *hdfs_args,
                           "--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert rc == 0
    manifest = output.read_manifest(out)
    assert fs.exists(f"{out}/_SUCCESS") and not fs.exists(f"{out}/_temporary")
    assert manifest["totals"] == {"input_rows": 200, "records": 195, "rejected": 5}
    got = {r["id"]: r for r in parse_examples(out, EXAMPLE_SCHEMA)}
    expected = expected_examples(lines)
    assert got.keys() == expected.keys()
    assert all(got[i] == expected[i] for i in expected)
    assert {r["source"] for r in rejects_of(out)} <= {f"{base}/in/part-0.csv", f"{base}/in/part-1.csv"}

    # The same input converted locally gives the same records.
    local = tmp_path / "in"
    local.mkdir()
    write_example_csv(local / "part-0.csv", lines[:120])
    write_example_csv(local / "part-1.csv", lines[120:])
    run(tmp_path, local, "csv", EXAMPLE_SCHEMA, output=str(tmp_path / "local"), compression="gzip",
        max_reject_fraction=0.05)
    assert output_records(out) == output_records(str(tmp_path / "local"))

    # Sequence examples on HDFS, in-process, WebHDFS settings from HADOOP_CONF_DIR.
    with fs.open(f"{base}/sessions.jsonl", "wb") as f:
        f.write(("\n".join(session_lines(20)) + "\n").encode())
    monkeypatch.setenv("HADOOP_CONF_DIR", str(hdfs.conf_dir))
    seq = run(tmp_path, f"{base}/sessions.jsonl", "json", SESSIONS_SCHEMA, output=f"{base}/seq")
    assert_committed(f"{base}/seq", seq)
    assert seq.totals.records == 20 and seq.totals.rejected == 0


# ------------------------------------------------------------------------------- shared with Spark
SEQ_CSV_SCHEMA = (Path(__file__).resolve().parent / "data" / "seq_users.yaml").read_text()  # shared with test_spark_job.py


@pytest.mark.parametrize("fmt,multiline", [("csv", False), ("csv", True), ("json", False)])
def test_bad_corpus_every_row_accounted(tmp_path, fmt, multiline):
    """The corpus the Spark job's tests use, with the counts its README gives: same per file, same lines."""
    table = corpus_table("CSV" if fmt == "csv" else "JSON Lines")
    suffix = " (multiline)" if multiline else ""
    pattern = "*.csv" if fmt == "csv" else "*.jsonl"
    result = run(tmp_path, f"{CORPUS}/{pattern}", fmt, str(CORPUS / "schema.yaml"), num_shards=2,
                 max_reject_fraction=1.0, multiline=multiline)
    out = str(tmp_path / "out")
    manifest = assert_committed(out, result)
    want = table["total"]
    assert manifest["totals"] == {"input_rows": int(want["rows" + suffix]), "records": int(want["records" + suffix]),
                                  "rejected": int(want["rejects" + suffix])}
    rejects = rejects_of(out)
    assert all(set(r) == {"source", "line", "raw", "reason"} and r["reason"] and r["raw"] for r in rejects)
    by_file = collections.Counter(r["source"].rsplit("/", 1)[-1] for r in rejects)
    rows_by_file = {path.rsplit("/", 1)[-1]: n for path, n in result.input_rows_by_file.items()}
    for name, row in table.items():
        if name == "total":
            continue
        assert rows_by_file[name] == int(row["rows" + suffix]), name
        assert by_file.get(name, 0) == int(row["rejects" + suffix]), (name, by_file)
        if not multiline:
            lines = sorted(r["line"] for r in rejects if r["source"].endswith("/" + name))
            assert lines == [int(x) for x in row["lines"].split(",") if x], name
    assert len(parse_examples(out, load_schema(str(CORPUS / "schema.yaml")))) == manifest["totals"]["records"]


@pytest.mark.parametrize("record_type", ["example", "example-multiline", "sequence_example",
                                         "sequence_example-csv"])
def test_same_records_as_the_spark_job(spark, tmp_path, record_type):
    """For the same input, the multiset of records (and the totals) equal the Spark job's."""
    from tfrecord_io.engines.spark import ConversionOptions, run_conversion

    (tmp_path / "in").mkdir()
    if record_type.startswith("example"):
        multiline = record_type.endswith("multiline")
        lines = example_rows(300, seed=11, bad_every=30, newlines=multiline)
        lines[7] = '7,1.5,2.5,"an ""open quote,y,1|2,1;2;3,0'  # unbalanced: one line, or up to the next quote
        write_example_csv(tmp_path / "in" / "a.csv", lines[:150])
        write_example_csv(tmp_path / "in" / "b.csv", lines[150:])
        schema, fmt, kw = EXAMPLE_SCHEMA, "csv", {"multiline": multiline}
    elif record_type.endswith("csv"):
        schema = Schema.from_yaml(SEQ_CSV_SCHEMA)
        rng = random.Random(5)
        lines = [f"u{u},{'DE' if u % 2 else 'FR'},{t},{'' if t == 3 else t * 0.5},{t};{-t}"
                 for u in range(25) for t in rng.sample(range(40), rng.randint(1, 7))]
        lines += ["u3,DE,99",                    # too few fields: its group (u3) is rejected with it
                  'u4,FR,98,"1.0,1;2',           # an unbalanced quote: a bad row of group u4
                  "u5,XX,97,1.0,1;2",            # context differs: group u5 rejected
                  ",DE,1,1.0,1;2"]               # no group: rejected alone
        rng.shuffle(lines)
        (tmp_path / "in" / "a.csv").write_text("user,country,t,x,v\n" + "\n".join(lines) + "\n")
        fmt, kw = "csv", {"max_steps": 4}
    else:
        lines = session_lines(40, seed=3)
        lines[5] = json.dumps({"session_id": "s0001", "ts": 7, "price": "cheap", "tags": []})  # rejects its group
        (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")
        schema, fmt, kw = SESSIONS_SCHEMA, "json", {"max_steps": 3}
    schema_path = tmp_path / "schema.yaml"
    schema_path.write_text(schema.to_yaml())
    spark_manifest = run_conversion(spark, ConversionOptions(
        inputs=str(tmp_path / "in"), input_format=fmt, schema=str(schema_path), output=str(tmp_path / "spark"),
        num_shards=2, max_reject_fraction=0.5, **kw))
    beam = run(tmp_path, tmp_path / "in", fmt, schema, output=str(tmp_path / "beam"), num_shards=3,
               max_reject_fraction=0.5, **kw)
    assert beam.manifest["totals"] == spark_manifest["totals"]
    assert spark_manifest["totals"]["rejected"] > 0
    assert output_records(str(tmp_path / "beam")) == output_records(str(tmp_path / "spark"))


def test_gzipped_input_and_file_level_errors_name_the_file(tmp_path, capsys):
    import gzip

    lines = example_rows(40, seed=5)
    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "a.csv.gz", "wt") as f:
        f.write("id,fare,miles,city,note,scores,dims,label\n" + "".join(x + "\n" for x in lines))
    result = run(tmp_path, tmp_path / "in", "csv", EXAMPLE_SCHEMA)
    assert_committed(str(tmp_path / "out"), result)
    assert {r["id"] for r in parse_examples(str(tmp_path / "out"), EXAMPLE_SCHEMA)} == set(range(40))

    bad = tmp_path / "in" / "b.csv"
    bad.write_text("a,b\n1,2\n")  # a header naming none of the schema's features
    schema = tmp_path / "schema.yaml"
    schema.write_text(EXAMPLE_SCHEMA.to_yaml())
    rc = to_tfrecord.main(["--input", str(tmp_path / "in"), "--format", "csv", "--schema", str(schema),
                           "--output", str(tmp_path / "out2"), *FNAPI])
    assert rc == 2  # found on the driver, before the pipeline starts
    err = capsys.readouterr().err
    assert f"feature 'id' is not a column of {bad}" in err and f"column 'a' of {bad} is read by no feature" in err
    assert not (tmp_path / "out2").exists()  # nothing was created
    assert to_tfrecord.main(["--input", str(tmp_path / "nothing-*.csv"), "--format", "csv", "--schema", str(schema),
                             "--output", str(tmp_path / "out3"), *FNAPI]) == 2
    assert "no input files match" in capsys.readouterr().err
