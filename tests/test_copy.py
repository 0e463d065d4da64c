"""``tfrecord-io copy``: files and directories between local disk and a real HDFS, byte for byte."""

from __future__ import annotations

import os

import pytest

from helpers import tfrecord_io_cli
from tfrecord_io.commands.copy import copy, plan_copy


def _tree(root):
    """A directory with a nested directory, an empty file and a file of several 1 MiB HDFS blocks."""
    (root / "sub").mkdir(parents=True)
    (root / "a.csv").write_bytes(b"x,y\n1,2\n")
    (root / "empty.txt").write_bytes(b"")
    (root / "sub" / "big.bin").write_bytes(os.urandom(3 * (1 << 20) + 17))
    return root


def _contents(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_copy_local_directory_into_new_directory_and_single_file_rename(tmp_path):
    src = _tree(tmp_path / "src")
    files, size = copy([str(src)], str(tmp_path / "dst") + "/")
    assert files == 3 and size == sum(len(b) for b in _contents(src).values())
    assert _contents(tmp_path / "dst" / "src") == _contents(src)
    copy([str(src / "a.csv")], str(tmp_path / "renamed.csv"))
    assert (tmp_path / "renamed.csv").read_bytes() == b"x,y\n1,2\n"


def test_copy_refuses_to_overwrite_before_writing_anything_and_names_missing_sources(tmp_path):
    src = _tree(tmp_path / "src")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "a.csv").write_bytes(b"keep")
    with pytest.raises(FileExistsError, match=r"dst/a\.csv exists .*--force"):
        copy([str(src / "a.csv"), str(src / "empty.txt")], str(tmp_path / "dst"))
    assert sorted(os.listdir(tmp_path / "dst")) == ["a.csv"] and (tmp_path / "dst" / "a.csv").read_bytes() == b"keep"
    copy([str(src / "a.csv")], str(tmp_path / "dst"), force=True)
    assert (tmp_path / "dst" / "a.csv").read_bytes() == b"x,y\n1,2\n"
    with pytest.raises(FileNotFoundError, match="nope"):
        plan_copy([str(tmp_path / "nope")], str(tmp_path / "x"))
    with pytest.raises(FileNotFoundError, match="matches nothing"):
        plan_copy([str(tmp_path / "src" / "*.parquet")], str(tmp_path / "x"))


def test_copy_put_and_get_through_real_hdfs_with_the_cli(hdfs, tmp_path):
    src = _tree(tmp_path / "src")
    remote = f"{hdfs.namenode_uri}/copy-test/"
    put = tfrecord_io_cli("copy", str(src), remote)
    assert "copied 3 file(s)" in put.stdout
    # a glob on HDFS, into a local directory: only the files it matches
    got = tfrecord_io_cli("copy", f"{hdfs.namenode_uri}/copy-test/src/*.csv", str(tmp_path / "back") + "/")
    assert "copied 1 file(s)" in got.stdout
    assert (tmp_path / "back" / "a.csv").read_bytes() == b"x,y\n1,2\n"
    # the whole tree back: every byte (the big file spans 4 blocks)
    tfrecord_io_cli("copy", f"{hdfs.namenode_uri}/copy-test/src", str(tmp_path / "whole"))
    assert _contents(tmp_path / "whole") == _contents(src)
    again = tfrecord_io_cli("copy", str(src / "a.csv"), f"{hdfs.namenode_uri}/copy-test/src/a.csv", check=False)
    assert again.returncode == 2 and "exists" in again.stderr and "--force" in again.stderr
    assert "Traceback" not in again.stderr
