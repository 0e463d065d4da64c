"""Permissions that follow the data (#31 item 4): :mod:`tfrecord_io.storage.permissions`.

The rejects quote input rows, so they are never more readable than the input: an input ``0600`` in
a ``0700`` directory gives rejects ``0600`` in a ``_rejects/`` of ``0700``, whatever the umask,
and a real second user is refused them, while the output follows ``--umask`` (Hadoop's
``fs.permissions.umask-mode``).  Both engines, local disk and a real HDFS (a second identity there).
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from helpers import convert, tfrecord_io_cli
from tfrecord_io.storage import fs, output
from tfrecord_io.storage.permissions import Permissions, for_inputs, parse_umask, process_umask

SCHEMA = "features:\n  - {name: id, type: int64}\n  - {name: secret, type: string}\n"
ROWS = "id,secret\n1,alpha\n2,beta\nnot-a-number,card 4111111111111111\n3,gamma\n"


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def modes(out: Path) -> dict[str, int]:
    """{relative path: mode} of what a committed output holds."""
    found = {".": mode(out)}
    for dirpath, dirs, files in os.walk(out):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            found[os.path.relpath(p, out)] = mode(p)
    return found


@pytest.fixture
def shared_dir():
    """A directory another user may enter (tmp_path is root's, 0700): there the modes decide."""
    d = Path(subprocess.run(["mktemp", "-d", "/tmp/tfrecord-io-perm.XXXXXX"], capture_output=True, text=True,
                            check=True).stdout.strip())
    d.chmod(0o755)
    yield d
    subprocess.run(["rm", "-rf", str(d)], check=False)


def _input(base: Path, file_mode: int, dir_mode: int) -> tuple[Path, Path]:
    d = base / "in"
    d.mkdir()
    (d / "data.csv").write_text(ROWS)
    (d / "data.csv").chmod(file_mode)
    d.chmod(dir_mode)
    schema = base / "schema.yaml"
    schema.write_text(SCHEMA)
    return d / "data.csv", schema


def test_parse_umask_takes_hadoops_octal_and_names_the_flag():
    assert parse_umask("022") == 0o022 and parse_umask("0077") == 0o077
    for bad in ("abc", "u=rwx", "888", "1777", ""):
        with pytest.raises(ValueError, match="--umask"):
            parse_umask(bad)


@pytest.mark.parametrize("file_mode, dir_mode, readers", [
    (0o600, 0o700, 0o700), (0o644, 0o700, 0o700), (0o644, 0o755, 0o777), (0o640, 0o750, 0o770),
    (0o644, 0o754, 0o770), (0o604, 0o705, 0o707)])
def test_the_rejects_are_readable_by_those_who_may_read_every_input(tmp_path, file_mode, dir_mode, readers):
    f, _ = _input(tmp_path, file_mode, dir_mode)
    (tmp_path / "pub").mkdir(mode=0o755)
    other = tmp_path / "pub" / "open.csv"
    other.write_text(ROWS)
    other.chmod(0o644)
    got = for_inputs([str(f), str(other)], 0o022)
    assert got == Permissions(0o022, readers)
    assert got.rejects_file_mode(str(f)) == 0o644 & readers and got.rejects_dir_mode(str(f)) == 0o755 & readers


def test_rejects_of_a_private_input_stay_private_from_a_real_second_user_while_the_output_follows_the_umask(
        engine, session, shared_dir):
    csv, schema = _input(shared_dir, 0o600, 0o700)
    out = shared_dir / "out"
    manifest = convert(engine, session, str(csv), "csv", str(schema), str(out))
    assert manifest["totals"] == {"input_rows": 4, "records": 3, "rejected": 1}
    umask = process_umask()
    got = modes(out)
    rejects = [p for p in got if p.startswith(output.REJECTS + "/")]
    assert len(rejects) == 1
    assert got[output.REJECTS] == 0o700 and got[rejects[0]] == 0o600, got
    assert got["."] == 0o777 & ~umask and got[output.MANIFEST] == got[output.SUCCESS] == 0o666 & ~umask
    assert all(m == 0o666 & ~umask for p, m in got.items() if p.startswith("part-")), got
    # a real second user: refused the rejects (they quote the card number), given the records
    refused = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(out / rejects[0])], capture_output=True,
                             text=True, timeout=30)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused
    shard = next(out.glob("part-*"))
    allowed = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(shard)], capture_output=True, timeout=30)
    assert allowed.returncode == 0 and allowed.stdout == shard.read_bytes()


def test_umask_sets_the_outputs_modes_from_the_command_line(tmp_path):
    csv, schema = _input(tmp_path, 0o644, 0o755)
    out = tmp_path / "out"
    tfrecord_io_cli("convert", "--engine", "beam", "--engine-arg=--runner=FnApiRunner", "--format", "csv",
                    "--input", str(csv), "--schema", str(schema), "--output", str(out), "--max-reject-fraction",
                    "0.5", "--umask", "027", "--num-shards", "2")
    got = modes(out)
    assert got["."] == 0o750 and got[output.REJECTS] == 0o750, got
    assert all(m == 0o640 for p, m in got.items() if p not in (".", output.REJECTS)), got
    proc = tfrecord_io_cli("convert", "--engine", "beam", "--format", "csv", "--input", str(csv), "--schema",
                           str(schema), "--output", str(tmp_path / "x"), "--umask", "u=rwx", check=False)
    assert proc.returncode == 2 and "--umask" in proc.stderr and "octal" in proc.stderr, proc.stderr


def test_on_hdfs_the_rejects_of_a_private_input_are_refused_to_another_identity(hdfs, monkeypatch):
    import hdfs_native

    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)  # the superuser
    base = hdfs.uri(f"/permissions/{os.urandom(4).hex()}")
    admin = hdfs_native.Client(hdfs.namenode_uri)
    with fs.open(f"{base}/in/data.csv", "wb") as f:
        f.write(ROWS.encode())
    admin.set_permission(f"{base}/in/data.csv".removeprefix(hdfs.namenode_uri), 0o600)
    admin.set_permission(f"{base}/in".removeprefix(hdfs.namenode_uri), 0o700)
    with fs.open(f"{base}/schema.yaml", "wb") as f:
        f.write(SCHEMA.encode())
    out = f"{base}/out"
    manifest = convert("beam", None, f"{base}/in/data.csv", "csv", f"{base}/schema.yaml", out)
    assert manifest["totals"]["rejected"] == 1
    reject = fs.join(out, manifest["rejects"][0]["path"])
    shard = fs.join(out, manifest["files"][0]["path"])
    assert fs.permission(fs.join(out, output.REJECTS)) == 0o700 and fs.permission(reject) == 0o600
    assert fs.permission(shard) == 0o644 and fs.permission(out) == 0o755  # Hadoop's default umask, 022
    monkeypatch.setenv("HADOOP_USER_NAME", "someoneelse")
    with pytest.raises(PermissionError):
        with fs.open(reject) as f:
            f.read()
    with fs.open(shard) as f:
        assert len(f.read()) == manifest["files"][0]["bytes"]
    monkeypatch.delenv("HADOOP_USER_NAME")
    out2 = f"{base}/out077"
    convert("beam", None, f"{base}/in/data.csv", "csv", f"{base}/schema.yaml", out2, umask="077")
    assert fs.permission(out2) == 0o700 and fs.permission(fs.join(out2, output.shard_name(0, 1))) == 0o600


def test_the_data_source_takes_the_umask_as_an_option(spark, tmp_path):
    import tfrecord_io.spark

    tfrecord_io.spark.register(spark)
    out = tmp_path / "out"
    spark.range(20).coalesce(1).write.format("tfrecord").mode("overwrite").option("umask", "077").save(str(out))
    got = modes(out)
    assert got["."] == 0o700 and all(m == 0o600 for p, m in got.items() if p != "."), got
    with pytest.raises(Exception, match="option umask"):
        spark.range(2).write.format("tfrecord").mode("overwrite").option("umask", "rwx").save(str(tmp_path / "bad"))
