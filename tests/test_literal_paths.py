"""Literal names first (#31 item 5): a path that exists as written is that path, even with ``*``,
``?`` or ``[`` in its name; a pattern is expanded only when no such path exists.  Inputs, outputs
and every reader; local disk and real HDFS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import tfrecord_io_cli
from schemas import ID
from tfrecord_io.storage import fs
from tfrecord_io.storage.inputs import list_inputs

SCHEMA = ID


def _csv(path: Path, ids: range) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("id\n" + "".join(f"{i}\n" for i in ids))
    return path


def _ids(out: str) -> list[int]:
    from tfrecord_io import read_batches

    return sorted(int(i) for b in read_batches(out, batch_size=100) for i in b["id"])


def _convert(inp: str, out: str, schema: Path, *extra: str):
    return tfrecord_io_cli("convert", "--engine", "beam", "--format", "csv", "--input", inp, "--schema", str(schema),
                           "--output", out, "--num-shards", "1", *extra, check=False)


def test_an_input_named_like_a_pattern_is_that_file_and_a_pattern_still_globs(tmp_path):
    literal = _csv(tmp_path / "in[1]" / "a.csv", range(0, 5))
    _csv(tmp_path / "in1" / "a.csv", range(100, 105))  # what the pattern in[1] matches
    assert [f.path for f in list_inputs(str(literal))] == [str(literal)]
    schema = tmp_path / "s.yaml"
    schema.write_text(SCHEMA)
    out = str(tmp_path / "out")
    proc = _convert(str(literal), out, schema)
    assert proc.returncode == 0, proc.stderr
    assert _ids(out) == list(range(5))
    # no such path: a pattern, expanded
    proc = _convert(str(tmp_path / "in?" / "a.csv"), str(tmp_path / "globbed"), schema)
    assert proc.returncode == 0, proc.stderr
    assert _ids(str(tmp_path / "globbed")) == list(range(100, 105))


@pytest.mark.slow  # a conversion, then every reader (TensorFlow's included) in turn
def test_an_output_with_pattern_characters_in_its_name_reads_back_with_every_reader(tmp_path):
    from tfrecord_io import make_dataset

    schema = tmp_path / "s.yaml"
    schema.write_text(SCHEMA)
    out = str(tmp_path / "run[2026-12]*?")
    proc = _convert(str(_csv(tmp_path / "a.csv", range(7))), out, schema)
    assert proc.returncode == 0, proc.stderr
    assert _ids(out) == list(range(7))
    assert sorted(int(i) for b in make_dataset(out, batch_size=4, num_epochs=1) for i in b["id"].numpy()) == \
        list(range(7))
    assert tfrecord_io_cli("verify", out, check=False).returncode == 0
    info = json.loads(tfrecord_io_cli("inspect", out, "--json").stdout)
    assert info["records"] == 7
    # and --overwrite replaces it (the output's own name is no pattern either)
    assert _convert(str(tmp_path / "a.csv"), out, schema, "--overwrite").returncode == 0


def test_on_hdfs_literal_names_first(hdfs, tmp_path):
    root = hdfs.uri(f"/literal/{tmp_path.name}")
    for name, ids in (("in[1]/a.csv", range(0, 5)), ("in1/a.csv", range(100, 105))):
        with fs.open(fs.join(root, name), "wb") as f:
            f.write(("id\n" + "".join(f"{i}\n" for i in ids)).encode())
    schema = tmp_path / "s.yaml"
    schema.write_text(SCHEMA)
    out = fs.join(root, "out[1]")
    proc = _convert(fs.join(root, "in[1]/a.csv"), out, schema)
    assert proc.returncode == 0, proc.stderr
    assert _ids(out) == list(range(5))
    proc = _convert(fs.join(root, "in?/a.csv"), fs.join(root, "globbed"), schema)
    assert proc.returncode == 0, proc.stderr
    assert _ids(fs.join(root, "globbed")) == list(range(100, 105))


@pytest.mark.parametrize("name", ["in*", "in?x", "in[ab]"])
def test_a_pattern_that_matches_nothing_says_so(tmp_path, name):
    with pytest.raises(FileNotFoundError, match="no input files match"):
        list_inputs(str(tmp_path / name / "a.csv"))
