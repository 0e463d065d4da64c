"""Hostile input loses nothing (issue #16): every case of ``hostile_corpus`` through both engines.

The promise, per case: either the conversion succeeds and input rows = records + rejects with the
case's counts, or it fails naming the file and commits nothing (no ``_SUCCESS``, no shard).  Both
engines run in this process: Spark on the session's ``local[2]`` SparkSession, Beam on its
in-process FnApiRunner (asserted).  Plus the output-location rules: an output that is, holds or
lies inside an input is refused before anything is touched, and ``--overwrite`` only removes what
a conversion wrote.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

import hostile_corpus
from helpers import convert, tfrecord_io_cli
from tfrecord_io.storage import fs, output

CASES = hostile_corpus.all_cases()


def _format(case) -> tuple[str, dict]:
    """(--format, extra options) of a case (``json-multiline``: whole-file JSON documents)."""
    return ("json", {"multiline": True}) if case.fmt == "json-multiline" else (case.fmt, {})


def _schema_file(tmp_path: Path, schema: dict) -> str:
    path = tmp_path / "schema.yaml"
    path.write_text(yaml.safe_dump(schema))
    return str(path)


def _nothing_committed(out: Path) -> None:
    if out.exists():
        names = {p.name for p in out.iterdir()}
        assert not names & {output.SUCCESS, output.MANIFEST}, names
        assert not any(n.startswith("part-") for n in names), names


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_keeps_its_promise(case, engine, session, tmp_path):
    inp = hostile_corpus.write_case(case, tmp_path / "in")
    schema = _schema_file(tmp_path, case.schema)
    out = tmp_path / "out"
    fmt, kw = _format(case)
    if isinstance(case.expect, hostile_corpus.Fails):
        with pytest.raises(Exception) as info:
            convert(engine, session, str(inp), fmt, schema, str(out), **kw)
        text = str(info.value)
        assert case.expect.file in text and re.search(case.expect.why, text), \
            f"{engine}: the error does not name {case.expect.file} or say {case.expect.why!r}:\n{text[:3000]}"
        _nothing_committed(out)
        return
    manifest = convert(engine, session, str(inp), fmt, schema, str(out), **kw)
    t = manifest["totals"]
    assert (t["input_rows"], t["records"], t["rejected"]) == (case.expect.rows, case.expect.records,
                                                              case.expect.rejects)
    assert t["input_rows"] == t["records"] + t["rejected"]


# ----------------------------------------------------------------------------- output location
def _input_dir(tmp_path: Path) -> Path:
    d = tmp_path / "d"
    d.mkdir()
    (d / "data.csv").write_bytes(hostile_corpus.csv_rows(20))
    return d


@pytest.mark.parametrize("layout", ["output is the input file", "output is the input's directory",
                                    "output holds the glob's files", "output inside the input directory",
                                    "output is a symlink to the input's directory"])
def test_output_overlapping_the_input_is_refused_before_anything_is_touched(layout, engine, session, tmp_path):
    d = _input_dir(tmp_path)
    before = (d / "data.csv").read_bytes()
    inp, out = {
        "output is the input file": (d / "data.csv", d / "data.csv"),
        "output is the input's directory": (d / "data.csv", d),
        "output holds the glob's files": (f"{d}/*.csv", d),
        "output inside the input directory": (d, d / "out"),
        "output is a symlink to the input's directory": (d / "data.csv", tmp_path / "link"),
    }[layout]
    if layout.endswith("symlink to the input's directory"):
        os.symlink(d, tmp_path / "link")
    schema = _schema_file(tmp_path, hostile_corpus.SCHEMA)
    with pytest.raises(output.OutputOverlapsInput, match="input"):
        convert(engine, session, str(inp), "csv", schema, str(out), overwrite=True)
    assert (d / "data.csv").read_bytes() == before
    assert sorted(p.name for p in d.iterdir()) == ["data.csv"]


def test_overwrite_replaces_only_what_a_conversion_wrote(engine, session, tmp_path):
    d = _input_dir(tmp_path)
    schema = _schema_file(tmp_path, hostile_corpus.SCHEMA)
    out = tmp_path / "out"
    convert(engine, session, str(d), "csv", schema, str(out))
    first = sorted(p.name for p in out.iterdir())
    assert output.SUCCESS in first
    manifest = convert(engine, session, str(d), "csv", schema, str(out), overwrite=True)  # a rerun: allowed
    assert manifest["totals"]["records"] == 20
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="notes.txt"):
        convert(engine, session, str(d), "csv", schema, str(out), overwrite=True)
    assert (out / "notes.txt").read_text() == "mine" and (out / output.SUCCESS).exists()


@pytest.mark.parametrize("cli_engine", ["spark", "beam"])
def test_cli_refuses_overwrite_of_the_input_with_exit_2(cli_engine, tmp_path):
    d = _input_dir(tmp_path)
    schema = _schema_file(tmp_path, hostile_corpus.SCHEMA)
    args = ["convert", "--engine", cli_engine, "--input", str(d / "data.csv"), "--format", "csv",
            "--schema", schema, "--output", str(d), "--overwrite"]
    if cli_engine == "beam":
        args.append("--engine-arg=--runner=FnApiRunner")
    else:
        args += ["--master", "local[1]"]
    proc = tfrecord_io_cli(*args, check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"output {d} contains the input" in proc.stderr, proc.stderr[-3000:]
    assert (d / "data.csv").read_bytes() == hostile_corpus.csv_rows(20)


def test_overlap_rules_hold_on_hdfs(hdfs, tmp_path):
    base = hdfs.uri(f"/overlap/{tmp_path.name}")
    with fs.open(f"{base}/d/data.csv", "wb") as f:
        f.write(hostile_corpus.csv_rows(3))
    other_form = base.replace(hdfs.namenode_uri, "hdfs://localhost:" + hdfs.namenode_uri.rsplit(":", 1)[1])
    listed = [f"{base}/d/data.csv"]  # what the engines list from each input
    for out, given in ((f"{base}/d", [f"{base}/d/data.csv"]), (f"{other_form}/d/", [f"{base}/d/*.csv"]),
                       (f"{base}/d/out", [f"{base}/d"])):
        with pytest.raises(output.OutputOverlapsInput):
            output.prepare_output(out, overwrite=True, inputs=given, input_paths=listed)
    assert fs.exists(f"{base}/d/data.csv")
    output.prepare_output(f"{base}/out", overwrite=True, inputs=[f"{base}/d"])  # apart: fine
    with fs.open(f"{base}/out/keep.txt", "wb") as f:
        f.write(b"x")
    with pytest.raises(FileExistsError, match="keep.txt"):
        output.prepare_output(f"{base}/out", overwrite=True, inputs=[f"{base}/d"])
    assert fs.exists(f"{base}/out/keep.txt")


# ----------------------------------------------------------------------------- engines agree
OK_CASES = [c for c in CASES if isinstance(c.expect, hostile_corpus.Ok)]


def _records_and_rejects(out: Path) -> tuple[Counter, list]:
    from tfrecord_io.core.framing import read_records

    manifest = output.read_manifest(str(out))
    recs = Counter()
    for f in manifest["files"]:
        with open(out / f["path"], "rb") as stream:
            recs.update(read_records(stream, compression=manifest["compression"]))
    rejects = []
    for f in manifest["rejects"]:
        rejects += [json.loads(line) for line in (out / f["path"]).read_text().splitlines()]
    return recs, sorted((r["source"], r["line"], r["raw"], r["reason"]) for r in rejects)


@pytest.mark.parametrize("case", OK_CASES, ids=[c.name for c in OK_CASES])
def test_both_engines_write_the_same_records_and_the_same_rejects(case, spark, tmp_path):
    inp = hostile_corpus.write_case(case, tmp_path / "in")
    schema = _schema_file(tmp_path, case.schema)
    got = {}
    fmt, kw = _format(case)
    for engine in ("spark", "beam"):
        convert(engine, spark if engine == "spark" else None, str(inp), fmt, schema, str(tmp_path / engine), **kw)
        got[engine] = _records_and_rejects(tmp_path / engine)
    assert got["spark"][0] == got["beam"][0], "records differ"
    assert got["spark"][1] == got["beam"][1], "rejects differ"
    assert all(reason and raw is not None and line for _, line, raw, reason in got["beam"][1])
    if case.name.startswith("float correctly rounded"):
        from tfrecord_io.core.decode import decode_example

        xs = {decode_example(r)["id"][1][0]: decode_example(r)["x"][1][0] for r in got["beam"][0]}
        # Correctly rounded from the decimal text: just above the midpoint of 1 and 1 + 2**-23 rounds up
        # (through a double it would round to the midpoint, then to even: 1.0).
        assert xs == {1: float(np.nextafter(np.float32(1), np.float32(2))), 2: 16777216.0,
                      3: float(np.finfo(np.float32).max)}


# ----------------------------------------------------------------------------- hung services
def test_a_silent_namenode_fails_the_conversion_in_bounded_time(engine, session, tmp_path, monkeypatch):
    """A NameNode address that accepts connections and never answers (#16 item 9): every engine's
    first HDFS call is the driver's listing through tfrecord_io.storage.fs, bounded by its timeout."""
    import socket
    import time

    monkeypatch.setenv("TFRECORD_IO_HDFS_TIMEOUT", "3")
    schema = _schema_file(tmp_path, hostile_corpus.SCHEMA)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        uri = f"hdfs://127.0.0.1:{silent.getsockname()[1]}/data/in.csv"
        started = time.monotonic()
        with pytest.raises((TimeoutError, ConnectionError, OSError)) as info:
            convert(engine, session, uri, "csv", schema, str(tmp_path / "out"))
        elapsed = time.monotonic() - started
    assert elapsed < 30, f"{engine}: {elapsed:.1f}s"
    assert "127.0.0.1" in str(info.value)


# ----------------------------------------------------------------------------- defaults that train well
def test_sorted_input_gives_mixed_batches_by_default(engine, session, tmp_path):
    """Issue #15 item 4: date-sorted input, one shard, the default loader: the first batches already
    span the whole range (records are shuffled within shards when written)."""
    from tfrecord_io.engines.loader import make_dataset

    n = 40_000  # four times the loader's default shuffle buffer
    (tmp_path / "in.csv").write_text("id,x,s\n" + "".join(f"{i},{i},d\n" for i in range(n)))
    schema = _schema_file(tmp_path, hostile_corpus.SCHEMA)
    convert(engine, session, str(tmp_path / "in.csv"), "csv", schema, str(tmp_path / "out"), num_shards=1)
    ids = np.concatenate([b["id"].numpy() for b, _ in zip(make_dataset(str(tmp_path / "out"), batch_size=256,
                                                                        seed=1, prefetch_to_device=False), range(3))])
    assert ids.min() < 0.1 * n and ids.max() > 0.9 * n, (ids.min(), ids.max())
    convert(engine, session, str(tmp_path / "in.csv"), "csv", schema, str(tmp_path / "ordered"), num_shards=1,
            record_order="input")
    first = np.concatenate([b["id"].numpy() for b, _ in zip(make_dataset(str(tmp_path / "ordered"), batch_size=256,
                                                                          seed=1, prefetch_to_device=False), range(3))])
    assert first.max() < 0.5 * n  # what it was: input order, the window holds only the start
