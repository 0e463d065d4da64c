"""The local single-node HDFS: readiness, both protocols, the generated conf, and the CLI."""

from __future__ import annotations

import getpass
import json
import os
import re
import socket
import time
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import hdfs as webhdfs
import hdfs_native
import pytest

from helpers import tfrecord_io_cli
from tfrecord_io.clusters import hdfs_local


def _conf(path: Path) -> dict[str, str]:
    return {p.findtext("name"): p.findtext("value") for p in ET.parse(path).getroot()}


def test_cluster_is_ready(hdfs):
    assert hdfs.is_ready()
    query = "/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState"
    with urllib.request.urlopen(hdfs.webhdfs_url + query, timeout=10) as r:
        state = json.load(r)["beans"][0]
    assert state["FSState"] == "Operational"
    assert state["NumLiveDataNodes"] == 1
    assert re.fullmatch(r"hdfs://127\.0\.0\.1:\d+", hdfs.namenode_uri)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", hdfs.webhdfs_url)
    assert hdfs.user == getpass.getuser()
    assert hdfs.log_path.is_file() and "READY" in hdfs.log_path.read_text()


def test_status_finds_the_running_cluster(hdfs):
    found = hdfs_local.status(hdfs.base_dir)
    assert found == hdfs  # same addresses, user and pid (the process handle is not compared)


def test_native_and_webhdfs_see_the_same_files(hdfs):
    native = hdfs_native.Client(hdfs.namenode_uri)
    web = webhdfs.InsecureClient(hdfs.webhdfs_url, user=hdfs.user)
    base = f"/roundtrip-{uuid.uuid4().hex}"
    payload = os.urandom(3 * 1024 * 1024 + 17)  # spans blocks (1 MiB)

    with native.create(f"{base}/native.bin") as w:
        w.write(payload)
    with web.read(f"{base}/native.bin") as r:  # follows the redirect to the DataNode
        assert r.read() == payload

    web.write(f"{base}/web.bin", data=payload[::-1])
    assert native.read(f"{base}/web.bin").read() == payload[::-1]
    assert sorted(web.list(base)) == ["native.bin", "web.bin"]
    assert native.get_file_info(f"{base}/web.bin").blocksize == 1024 * 1024


def test_conf_dir_configures_a_client(hdfs):
    core, site = _conf(hdfs.conf_dir / "core-site.xml"), _conf(hdfs.conf_dir / "hdfs-site.xml")
    assert core["fs.defaultFS"] == hdfs.namenode_uri
    assert site["dfs.namenode.rpc-address"] == hdfs.namenode_uri.removeprefix("hdfs://")
    assert site["dfs.namenode.http-address"] == hdfs.webhdfs_url.removeprefix("http://")
    client = hdfs_native.Client(config_dir=str(hdfs.conf_dir))  # no URL: fs.defaultFS
    assert client.get_file_info("/").isdir


def test_permissions_are_enforced(hdfs, monkeypatch):
    path = f"/private-{uuid.uuid4().hex}"
    admin = hdfs_native.Client(hdfs.namenode_uri)
    admin.mkdirs(path, 0o700)
    monkeypatch.setenv("HADOOP_USER_NAME", "someoneelse")
    with pytest.raises(Exception, match="AccessControlException"):
        list(hdfs_native.Client(hdfs.namenode_uri).list_status(path))


def test_fetch_jars_is_idempotent():
    started = time.monotonic()
    jars = hdfs_local.fetch_jars()
    assert hdfs_local.fetch_jars() == jars
    assert time.monotonic() - started < 5
    assert any(jars.glob("hadoop-client-minicluster-3.5.0.jar"))


def test_block_size_is_checked_before_anything_starts(tmp_path):
    for bad in (1000, 512 * 1024, (1 << 20) + 1, 1.5 * (1 << 20), True, "128m"):
        with pytest.raises(ValueError, match="block_size must be"):
            hdfs_local.start(tmp_path / "cluster", block_size=bad)
    assert not (tmp_path / "cluster").exists()
    bad_cli = tfrecord_io_cli("hdfs-local", "start", "--dir", str(tmp_path / "cli"), "--block-size", "lots", check=False)
    assert bad_cli.returncode == 2 and "not a size: 'lots'" in bad_cli.stderr


def test_missing_tools_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither java nor mvn
    with pytest.raises(hdfs_local.HdfsLocalError, match=r"`java`.*install"):
        hdfs_local.start(tmp_path / "cluster")
    monkeypatch.setenv("TFRECORD_IO_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(hdfs_local.HdfsLocalError, match=r"`mvn`.*install.*[Mm]aven"):
        hdfs_local.fetch_jars()


def test_cli_start_status_stop(tmp_path, own_hdfs):
    """One extra cluster, started by the CLI, must outlive the command and stop on request."""
    base = str(tmp_path / "cli-cluster")
    try:
        out = tfrecord_io_cli("hdfs-local", "start", "--dir", base, "--block-size", "128m").stdout
        uri = re.search(r"hdfs://127\.0\.0\.1:\d+", out).group(0)
        web = re.search(r"http://127\.0\.0\.1:\d+", out).group(0)
        conf = re.search(r"export HADOOP_CONF_DIR=(\S+)", out).group(1)
        assert _conf(Path(conf) / "core-site.xml")["fs.defaultFS"] == uri
        assert _conf(Path(conf) / "hdfs-site.xml")["dfs.blocksize"] == str(128 << 20)
        with hdfs_native.Client(uri).create("/f.bin") as w:  # no block size of its own
            w.write(b"x" * (3 << 20))
        assert hdfs_native.Client(uri).get_file_info("/f.bin").blocksize == 128 << 20

        # The command has returned; the cluster keeps serving both protocols.
        assert hdfs_native.Client(uri).get_file_info("/").isdir
        assert webhdfs.InsecureClient(web).status("/")["type"] == "DIRECTORY"

        status = tfrecord_io_cli("hdfs-local", "status", "--dir", base)
        assert "ready" in status.stdout and uri in status.stdout
        again = tfrecord_io_cli("hdfs-local", "start", "--dir", base, check=False)
        assert again.returncode == 1 and "already running" in again.stderr

        assert "stopped" in tfrecord_io_cli("hdfs-local", "stop", "--dir", base).stdout
        assert tfrecord_io_cli("hdfs-local", "status", "--dir", base, check=False).returncode == 1
        with pytest.raises(ConnectionRefusedError):  # nothing listens on the RPC port any more
            socket.create_connection(("127.0.0.1", int(uri.rsplit(":", 1)[1])), timeout=5)
    finally:
        hdfs_local.stop(base)
