"""The local HDFS with Kerberos, HA and several DataNodes (issue #20 section 1), against the real
clusters of cluster_fixtures and clusters of its own, with hdfs_native.Client directly.

Every secure client runs in a subprocess whose environment is only PATH, HOME and what the cluster
exports (``LocalHdfs.env()``, or the ``export`` lines the CLI printed), as a user's shell would
be, and with a timeout: hdfs-native retries a refused connection for minutes, and Kerberos state
must not leak between clients.  No mocks.
"""

from __future__ import annotations

import getpass
import json
import os
import pickle
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import tfrecord_io_cli
from tfrecord_io.clusters import hdfs_local

# One client program for every check: python -c CLIENT ACTION URL KWARGS CONFIG [ARGS...]
# (URL "" for fs.defaultFS; KWARGS: hdfs_native.Client's keyword arguments, CONFIG: its config
# dict, both JSON).  Exit status 3 and "REFUSED ..." when the cluster refuses it.
CLIENT = r'''
import hashlib, json, os, sys, time
import hdfs_native

action, url, kwargs, config, args = (sys.argv[1], sys.argv[2], json.loads(sys.argv[3]),
                                     json.loads(sys.argv[4]), sys.argv[5:])
try:
    client = hdfs_native.Client(url or None, config=config, **kwargs)
    if action == "probe":
        client.get_file_info("/")
    elif action == "roundtrip":  # a multi-block file (1 MiB blocks): write, read, list
        base = args[0]
        payload = os.urandom(3 * 1024 * 1024 + 17)
        with client.create(f"{base}/data.bin") as w:
            w.write(payload)
        assert client.read(f"{base}/data.bin").read() == payload, "read back other bytes"
        info = client.get_file_info(f"{base}/data.bin")
        print(json.dumps({"listing": sorted(s.path for s in client.list_status(base)),
                          "replication": info.replication, "owner": info.owner}))
    elif action == "write":  # ARGS: path, MiB, [text]: random bytes, or numbered lines of text
        path, mib = args[0], int(args[1])
        if args[2:] == ["text"]:
            data = "".join(f"line {i}\n" for i in range(mib * 1024 * 1024 // 16)).encode()
        else:
            data = os.urandom(mib * 1024 * 1024)
        with client.create(path) as w:
            w.write(data)
        print(hashlib.sha256(data).hexdigest())
    elif action == "read":
        print(hashlib.sha256(client.read(args[0]).read()).hexdigest())
    elif action == "stream":  # ARGS: stop file, paths: read them over and over until it exists
        stop, paths = args[0], args[1:]
        deadline = time.monotonic() + 300
        while not os.path.exists(stop) and time.monotonic() < deadline:
            for path in paths:
                began, digest = time.time(), hashlib.sha256()
                with client.read(path) as f:
                    while chunk := f.read(256 * 1024):
                        digest.update(chunk)
                        time.sleep(0.005)
                print(json.dumps({"path": path, "sha256": digest.hexdigest(), "began": began,
                                  "ended": time.time()}), flush=True)
except Exception as e:
    print(f"REFUSED {type(e).__name__}: {e}")
    sys.exit(3)
'''


def _env(cluster_env: dict[str, str]) -> dict[str, str]:
    """A user's shell: PATH, HOME, and nothing else but what the cluster exports."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"), **cluster_env}


def _client(env: dict[str, str], action: str, url: str, *args: str, kwargs: dict | None = None,
            config: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CLIENT, action, url, json.dumps(kwargs or {}),
         json.dumps(config or {}), *args],
        env=_env(env), capture_output=True, text=True, timeout=timeout)


def _ok(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, f"the client failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
    return run.stdout


def _refused(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 3, f"the client was not refused ({run.returncode}):\n{run.stdout}\n{run.stderr}"
    return run.stdout


def _conf(path: Path) -> dict[str, str]:
    return {p.findtext("name"): p.findtext("value") for p in ET.parse(path).getroot()}


def _log_since(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def _wait_for_log(path: Path, offset: int, pattern: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = _log_since(path, offset)
        if re.search(pattern, text):
            return text
        time.sleep(0.2)
    raise AssertionError(f"{path} does not say {pattern!r} within {timeout:.0f}s:\n{text[-3000:]}")


def _jmx(http_address: str, bean: str) -> dict:
    url = f"http://{http_address}/jmx?qry=Hadoop:service=NameNode,name={bean}"
    with urllib.request.urlopen(url, timeout=10) as r:  # no SPNEGO: JMX stays open
        return json.load(r)["beans"][0]


# ---------------------------------------------------------------------------------------------
# Kerberos
# ---------------------------------------------------------------------------------------------
def test_secure_handle_describes_the_cluster(secure_hdfs):
    k = secure_hdfs.kerberos
    user = getpass.getuser()
    assert (k.realm, k.principal, k.rejected_principal) == ("EXAMPLE.COM", f"{user}@EXAMPLE.COM",
                                                            "intruder@EXAMPLE.COM")
    assert k.service_principal == "hdfs/localhost@EXAMPLE.COM"
    assert k.data_protection == "authentication" and re.fullmatch(r"127\.0\.0\.1:\d+", k.kdc)
    for f in (k.krb5_conf, k.keytab, k.ticket_cache, k.expired_ticket_cache, k.rejected_keytab,
              k.service_keytab):
        assert f.is_file() and f.is_relative_to(secure_hdfs.base_dir / "kerberos"), f
    assert 23 * 3600 < k.ticket_expires - time.time() <= 24 * 3600
    krb5 = k.krb5_conf.read_text()
    for line in ("udp_preference_limit = 1", "dns_canonicalize_hostname = false", "rdns = false",
                 f"kdc = {k.kdc}"):
        assert line in krb5
    assert secure_hdfs.env() == {"HADOOP_CONF_DIR": str(secure_hdfs.conf_dir),
                                 "KRB5_CONFIG": str(k.krb5_conf),
                                 "KRB5CCNAME": f"FILE:{k.ticket_cache}"}
    assert secure_hdfs.user == user and not secure_hdfs.ha
    assert hdfs_local.status(secure_hdfs.base_dir) == secure_hdfs
    assert pickle.loads(pickle.dumps(secure_hdfs)) == secure_hdfs

    core = _conf(secure_hdfs.conf_dir / "core-site.xml")
    site = _conf(secure_hdfs.conf_dir / "hdfs-site.xml")
    assert core["hadoop.security.authentication"] == "kerberos"
    assert core["hadoop.rpc.protection"] == site["dfs.data.transfer.protection"] == "authentication"
    assert site["dfs.namenode.kerberos.principal"] == k.service_principal

    # Readiness reads the NameNode's JMX, which needs no SPNEGO; WebHDFS does.
    assert secure_hdfs.is_ready()
    assert _jmx(secure_hdfs.active_namenode.http_address, "FSNamesystemState")["NumLiveDataNodes"] == 1
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{secure_hdfs.webhdfs_url}/webhdfs/v1/?op=LISTSTATUS", timeout=10)
    assert refused.value.code in (401, 403)


def test_keytabs_and_ticket_caches_are_the_users_alone(secure_hdfs):
    """0600 files in a 0700 directory, whatever the umask; and, run as another local user
    (``nobody``, when the suite runs as root), neither the keytab nor the ticket cache can be read."""
    k = secure_hdfs.kerberos
    kdir = secure_hdfs.base_dir / "kerberos"
    assert kdir.stat().st_mode & 0o777 == 0o700
    for f in (k.keytab, k.ticket_cache, k.expired_ticket_cache, k.service_keytab, k.guest_keytab,
              k.rejected_keytab):
        assert f.stat().st_mode & 0o777 == 0o600, f"{f}: {oct(f.stat().st_mode & 0o777)}"
    if os.geteuid() != 0:
        return  # (another user's view needs root to become one; the modes above are what it would meet)
    for f in (k.keytab, k.ticket_cache, k.service_keytab):
        proc = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(f)], capture_output=True, timeout=30)
        assert proc.returncode != 0 and b"Permission denied" in proc.stderr, (f, proc.stderr)


def test_the_exported_environment_is_enough(secure_hdfs):
    offset = secure_hdfs.log_path.stat().st_size
    base = f"/env-{uuid.uuid4().hex}"
    out = json.loads(_ok(_client(secure_hdfs.env(), "roundtrip", secure_hdfs.namenode_uri, base)))
    assert out["listing"] == [f"{base}/data.bin"] and out["owner"] == getpass.getuser()
    log = _log_since(secure_hdfs.log_path, offset)
    assert f"Auth successful for {secure_hdfs.kerberos.principal} (auth:KERBEROS)" in log
    # The DataNode negotiated SASL on every block transfer, with the configured QOP.
    assert "SaslServer: Verifying QOP: requested = [auth], negotiated = auth" in log
    # No URL at all: fs.defaultFS from HADOOP_CONF_DIR.
    assert _client(secure_hdfs.env(), "probe", "").returncode == 0


def test_a_keytab_alone_is_enough(secure_hdfs):
    k = secure_hdfs.kerberos
    env = {name: v for name, v in secure_hdfs.env().items() if name != "KRB5CCNAME"}
    out = _ok(_client(env, "roundtrip", secure_hdfs.namenode_uri, f"/keytab-{uuid.uuid4().hex}",
                      kwargs={"kerberos_principal": k.principal, "kerberos_keytab": str(k.keytab)}))
    assert json.loads(out)["owner"] == getpass.getuser()


@pytest.mark.parametrize("ticket", ["none", "expired"])
def test_no_valid_ticket_is_refused(secure_hdfs, tmp_path, ticket):
    k = secure_hdfs.kerberos
    cache = tmp_path / "no-such-ccache" if ticket == "none" else k.expired_ticket_cache
    env = {**secure_hdfs.env(), "KRB5CCNAME": f"FILE:{cache}"}
    began = time.monotonic()
    out = _refused(_client(env, "probe", secure_hdfs.namenode_uri, timeout=60))
    assert time.monotonic() - began < 30
    assert ("No Kerberos credentials available" if ticket == "none" else "Ticket expired") in out


def test_the_rejected_principal_is_refused(secure_hdfs):
    """The KDC knows it (it authenticates) but the NameNode's ACL does not admit it.  hdfs-native
    drops the NameNode's AuthorizationException and retries for minutes; no retries here."""
    k = secure_hdfs.kerberos
    offset = secure_hdfs.log_path.stat().st_size
    env = {name: v for name, v in secure_hdfs.env().items() if name != "KRB5CCNAME"}
    _refused(_client(env, "probe", secure_hdfs.namenode_uri, timeout=60,
                     kwargs={"kerberos_principal": k.rejected_principal,
                             "kerberos_keytab": str(k.rejected_keytab)},
                     config={"dfs.client.failover.max.attempts": "0"}))
    log = _wait_for_log(secure_hdfs.log_path, offset, "denied by configured ACL")
    assert f"Auth successful for {k.rejected_principal} (auth:KERBEROS)" in log
    assert (f"Authorization failed for {k.rejected_principal} (auth:KERBEROS) for "
            f"protocol=interface org.apache.hadoop.hdfs.protocol.ClientProtocol") in log


def test_the_datanode_refuses_a_client_without_sasl(secure_hdfs, tmp_path):
    """A client without dfs.data.transfer.protection skips SASL: the NameNode (Kerberos) still
    answers, the DataNode does not hand out a byte."""
    path = f"/nosasl-{uuid.uuid4().hex}.bin"
    _ok(_client(secure_hdfs.env(), "write", secure_hdfs.namenode_uri, path, "2"))
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "core-site.xml").write_bytes((secure_hdfs.conf_dir / "core-site.xml").read_bytes())
    site = (secure_hdfs.conf_dir / "hdfs-site.xml").read_text()
    without = re.sub(r"\s*<property><name>dfs\.data\.transfer\.protection</name>.*?</property>", "",
                     site)
    assert without != site
    (conf / "hdfs-site.xml").write_text(without)
    env = {**secure_hdfs.env(), "HADOOP_CONF_DIR": str(conf)}
    offset = secure_hdfs.log_path.stat().st_size
    assert _client(env, "probe", secure_hdfs.namenode_uri).returncode == 0
    assert "All DataNodes failed" in _refused(_client(env, "read", secure_hdfs.namenode_uri, path))
    _wait_for_log(secure_hdfs.log_path, offset, "Failed to read expected SASL data transfer protection")


def test_integrity_protection(tmp_path, own_hdfs):
    cluster = hdfs_local.start(tmp_path / "cluster", detach=False, kerberos=True,
                               data_protection="integrity")
    try:
        assert _conf(cluster.conf_dir / "core-site.xml")["hadoop.rpc.protection"] == "integrity"
        _ok(_client(cluster.env(), "roundtrip", cluster.namenode_uri, "/integrity"))
        assert ("SaslServer: Verifying QOP: requested = [auth-int], negotiated = auth-int"
                in cluster.log_path.read_text())
    finally:
        cluster.stop()


def test_options_are_checked_before_anything_starts(tmp_path):
    base = tmp_path / "cluster"
    for kw, message in (({"datanodes": 0}, "datanodes must be"), ({"datanodes": 6}, "datanodes must be"),
                        ({"ha": True, "port": 8020}, "with ha=True"),
                        ({"kerberos": True, "data_protection": "none"}, "data_protection must be"),
                        ({"data_protection": "privacy"}, "need kerberos=True"),
                        ({"kerberos": True, "ticket_lifetime": 5}, "ticket_lifetime must be")):
        with pytest.raises(ValueError, match=message):
            hdfs_local.start(base, **kw)
    assert not base.exists()


def test_actions_a_cluster_cannot_take(secure_hdfs):
    with pytest.raises(hdfs_local.HdfsLocalError, match="single NameNode.*--ha"):
        secure_hdfs.failover()
    with pytest.raises(hdfs_local.HdfsLocalError, match="no DataNode 5; this cluster has 1"):
        hdfs_local.stop_datanode(secure_hdfs.base_dir, 5)


# ---------------------------------------------------------------------------------------------
# HA and several DataNodes
# ---------------------------------------------------------------------------------------------
def test_ha_cluster_and_its_conf(secure_ha_hdfs):
    h = secure_ha_hdfs
    assert h.ha and h.nameservice == "minidfs-ns" and h.namenode_uri == "hdfs://minidfs-ns"
    assert [nn.id for nn in h.namenodes] == ["nn1", "nn2"]
    assert len(h.datanodes) == 3 and all(d.alive for d in h.datanodes) and h.replication == 3
    core, site = _conf(h.conf_dir / "core-site.xml"), _conf(h.conf_dir / "hdfs-site.xml")
    assert core["fs.defaultFS"] == "hdfs://minidfs-ns"
    assert site["dfs.nameservices"] == "minidfs-ns" and site["dfs.ha.namenodes.minidfs-ns"] == "nn1,nn2"
    for nn in h.namenodes:
        assert site[f"dfs.namenode.rpc-address.minidfs-ns.{nn.id}"] == nn.rpc_address
    assert site["dfs.client.failover.proxy.provider.minidfs-ns"].endswith("ConfiguredFailoverProxyProvider")
    assert site["dfs.replication"] == "3"
    out = json.loads(_ok(_client(h.env(), "roundtrip", h.namenode_uri, f"/ha-{uuid.uuid4().hex}")))
    assert out["replication"] == 3
    active = hdfs_local.status(h.base_dir).active_namenode
    assert _jmx(active.http_address, "FSNamesystemState")["NumLiveDataNodes"] == 3


class _Streamer:
    """A client process reading ``paths`` over and over until stopped; every read checked."""

    def __init__(self, env: dict[str, str], url: str, paths: dict[str, str], workdir: Path):
        name = uuid.uuid4().hex
        self.expected, self.stop_file = paths, workdir / f"stop-{name}"
        self.stderr = workdir / f"reader-{name}.err"
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CLIENT, "stream", url, "{}", "{}", str(self.stop_file), *paths],
                env=_env(env), stdout=subprocess.PIPE, stderr=err, text=True)
        self.reads: list[dict] = []

    def wait_for_reads(self, n: int) -> None:
        while len(self.reads) < n:
            line = self.proc.stdout.readline()
            assert line and not line.startswith("REFUSED"), \
                f"the reader stopped: {line}\n{self.stderr.read_text()}"
            self.reads.append(json.loads(line))

    def finish(self) -> list[dict]:
        self.stop_file.touch()
        rest = self.proc.stdout.read()  # it ends its current round, then exits
        assert self.proc.wait(timeout=120) == 0, \
            f"the reader failed:\n{rest}\n{self.stderr.read_text()}"
        self.reads += [json.loads(line) for line in rest.splitlines()]
        for r in self.reads:
            assert r["sha256"] == self.expected[r["path"]], f"{r['path']} read back other bytes"
        return self.reads


def _overlapping(reads: list[dict], began: float, ended: float) -> list[dict]:
    return [r for r in reads if r["began"] < ended and r["ended"] > began]


def test_failover_while_a_client_reads(secure_ha_hdfs, tmp_path):
    """The reader keeps reading (hdfs-native fails over by itself) through two failovers: to the
    standby, and back to the first NameNode, started again as the standby."""
    h = secure_ha_hdfs
    before = hdfs_local.status(h.base_dir).active_namenode.id
    paths = {f"/failover-{uuid.uuid4().hex}-{i}.bin": "" for i in range(3)}
    for path in paths:
        paths[path] = _ok(_client(h.env(), "write", h.namenode_uri, path, "6")).strip()
    reader = _Streamer(h.env(), h.namenode_uri, paths, tmp_path)
    reader.wait_for_reads(1)
    began = time.time()
    first = h.failover()
    ended = time.time()
    assert (first.previous, first.restarted_previous) == (before, False) and first.active != before
    after = hdfs_local.status(h.base_dir)
    assert after.active_namenode.id == first.active
    assert {nn.id: nn.state for nn in after.namenodes} == {before: "stopped", first.active: "active"}
    reader.wait_for_reads(len(reader.reads) + 3)

    began2 = time.time()
    second = hdfs_local.failover(h.base_dir)
    ended2 = time.time()
    assert (second.active, second.previous, second.restarted_previous) == (before, first.active, True)
    reader.wait_for_reads(len(reader.reads) + 3)
    reads = reader.finish()
    assert _overlapping(reads, began, ended) and _overlapping(reads, began2, ended2)
    assert hdfs_local.status(h.base_dir).active_namenode.id == before
    print(f"\nfailover took {first.seconds:.1f}s, failing back (restart included) {second.seconds:.1f}s")
    # Writes go to the new active NameNode too.
    _ok(_client(h.env(), "roundtrip", h.namenode_uri, f"/after-failover-{uuid.uuid4().hex}"))


# ---------------------------------------------------------------------------------------------
# The CLI, as a user runs it
# ---------------------------------------------------------------------------------------------
def _exports(out: str) -> dict[str, str]:
    return dict(re.findall(r"^export (\w+)=(.*)$", out, re.MULTILINE))


def test_cli_secure_ha_cluster(tmp_path, own_hdfs):
    """start --kerberos --ha --datanodes 3 (privacy), its printed exports used verbatim, status,
    stop-datanode while a client reads a replication-3 file, failover, stop."""
    base = str(tmp_path / "cli-cluster")
    try:
        began = time.time()
        out = tfrecord_io_cli("hdfs-local", "start", "--kerberos", "--ha", "--datanodes", "3", "--data-protection",
                   "privacy", "--ticket-lifetime", "1h", "--dir", base).stdout
        env = _exports(out)
        assert set(env) == {"HADOOP_CONF_DIR", "KRB5_CONFIG", "KRB5CCNAME"}
        assert re.search(r"^# principal: \S+@EXAMPLE\.COM$", out, re.MULTILINE)
        assert re.search(r"^# keytab: \S+\.keytab$", out, re.MULTILINE)
        h = hdfs_local.status(base)
        assert 3500 < h.kerberos.ticket_expires - began < 3700
        out = json.loads(_ok(_client(env, "roundtrip", "hdfs://minidfs-ns", "/cli")))
        assert out["replication"] == 3
        assert "negotiated = auth-conf" in h.log_path.read_text()

        status = tfrecord_io_cli("hdfs-local", "status", "--dir", base).stdout
        for words in ("is ready", "3 DataNodes (3 live), replication 3",
                      "HA nameservice minidfs-ns: nn1 active", "nn2 standby",
                      "Kerberos realm EXAMPLE.COM", "data protection privacy"):
            assert words in status, status
        assert _exports(status) == env

        path = "/replicated.bin"
        reader = _Streamer(env, "hdfs://minidfs-ns",
                           {path: _ok(_client(env, "write", "hdfs://minidfs-ns", path, "12")).strip()},
                           tmp_path)
        reader.wait_for_reads(1)
        assert "stopped DataNode 1 (127.0.0.1:" in tfrecord_io_cli("hdfs-local", "stop-datanode", "--index", "1", "--dir", base).stdout
        reader.wait_for_reads(len(reader.reads) + 2)
        reader.finish()
        assert "3 DataNodes (2 live)" in tfrecord_io_cli("hdfs-local", "status", "--dir", base).stdout
        assert not hdfs_local.status(base).datanodes[1].alive
        again = tfrecord_io_cli("hdfs-local", "stop-datanode", "--index", "1", "--dir", base, check=False)
        assert again.returncode == 1 and "DataNode 1 is already stopped" in again.stderr
        assert tfrecord_io_cli("hdfs-local", "stop-datanode", "--dir", base, check=False).returncode == 2

        assert "nn2 is the active NameNode now (nn1 shut down)" in tfrecord_io_cli("hdfs-local", "failover", "--dir", base).stdout
        assert "nn1 stopped" in tfrecord_io_cli("hdfs-local", "status", "--dir", base).stdout
        _ok(_client(env, "roundtrip", "hdfs://minidfs-ns", "/after-failover"))

        assert "stopped" in tfrecord_io_cli("hdfs-local", "stop", "--dir", base).stdout
        assert tfrecord_io_cli("hdfs-local", "status", "--dir", base, check=False).returncode == 1
        failover = tfrecord_io_cli("hdfs-local", "failover", "--dir", base, check=False)
        assert failover.returncode == 1 and "no local HDFS is running" in failover.stderr
    finally:
        hdfs_local.stop(base)
