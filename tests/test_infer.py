"""tfrecord-io infer-schema on local and HDFS input."""

import subprocess
import sys
from pathlib import Path

import pytest

from tfrecord_io.infer import infer_columns, schema_yaml
from tfrecord_io.schema import CsvOptions, Schema

CSV = 'id,fare,name,empty,big\n1,2.5,"a, b",,1\n2,3,"say ""hi""",,99999999999999999999\n3,,c,,2\n'
JSONL = '{"id": 1, "score": 0.5, "tags": ["a", "b"], "vec": [1, 2], "meta": {"k": 1}, "nothing": null}\n' \
        '{"id": 2, "score": 1, "tags": [], "vec": [3.5], "meta": {"k": 2}, "nothing": null}\n'


def infer_text(path, fmt):
    return schema_yaml(infer_columns(str(path), fmt), fmt, CsvOptions(), 1000)


def test_csv(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text(CSV)
    text = infer_text(p, "csv")
    schema = Schema.from_yaml(text)
    types = {f.name: f.type for f in schema.features}
    assert types == {"id": "int64", "fare": "float", "name": "string", "empty": "string", "big": "float"}
    assert "always empty in the sample" in text.splitlines()[[l.strip().startswith('- {name: "empty"')
                                                              for l in text.splitlines()].index(True)]


def test_json_lines(tmp_path):
    p = tmp_path / "in.json"
    p.write_text(JSONL)
    schema = Schema.from_yaml(infer_text(p, "json"))
    f = {f.name: f for f in schema.features}
    assert (f["id"].type, f["score"].type) == ("int64", "float")
    assert f["tags"].type == "string" and f["tags"].shape == (-1,)
    assert f["vec"].type == "float" and f["vec"].shape == (-1,)
    assert f["meta"].type == "string"


def test_directory_and_sample_limit(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.csv").write_text("x\n1\n2\n")
    (d / "_SUCCESS").write_text("")
    cols = infer_columns(str(d), "csv", sample_rows=1)
    assert [(c.name, c.type, c.non_null) for c in cols] == [("x", "int64", 1)]


def test_bad_json_names_line(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.json: line 2 is not JSON"):
        infer_columns(str(p), "json")


def test_cli(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text(CSV)
    exe = Path(sys.executable).parent / "tfrecord-io"
    out = subprocess.run([str(exe), "infer-schema", "--input", str(p), "--format", "csv"],
                         capture_output=True, text=True, check=True)
    assert Schema.from_yaml(out.stdout).feature("fare").type == "float"
    helptext = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=True).stdout
    assert "infer-schema" in helptext and "hdfs-local" in helptext


@pytest.mark.hdfs
def test_hdfs_input(hdfs, tmp_path):
    from tfrecord_io import fs

    uri = f"{hdfs.namenode_uri}/infer/in.csv"
    with fs.open(uri, "wb") as f:
        f.write(CSV.encode())
    schema = Schema.from_yaml(infer_text(uri, "csv"))
    assert schema.feature("fare").type == "float"
