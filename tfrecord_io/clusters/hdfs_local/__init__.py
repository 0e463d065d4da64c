"""A real HDFS on 127.0.0.1 for tests and trying things out: by default one NameNode + one DataNode;
optionally several DataNodes, two NameNodes in one HA nameservice, and Kerberos.

The cluster is Apache Hadoop's own ``MiniDFSCluster`` from the 3.5.0 jars, which Maven resolves
from Maven Central into ``${TFRECORD_IO_CACHE:-~/.cache/tfrecord-io}/hadoop-3.5.0/jars`` (see
:func:`fetch_jars`).  ``MiniHdfs.java`` is run with Java's single-file source mode, so there is
no build step: a fresh machine needs only ``java`` (17+) and ``mvn``.

The cluster listens on loopback only, serves both native RPC (``hdfs://127.0.0.1:PORT``) and
WebHDFS (``http://127.0.0.1:PORT``), enforces permissions (the superuser is the OS user that
started it), uses replication 1 (``min(N, 3)`` with N DataNodes) and by default 1 MiB blocks (so
multi-MB test files span several blocks; ``block_size=HDFS_DEFAULT_BLOCK_SIZE`` gives HDFS's own
128 MiB, as the loader benchmark does).

Options of :func:`start` (any combination):

* ``datanodes=N``: N DataNodes, default replication ``min(N, 3)``.  :meth:`LocalHdfs.stop_datanode`
  stops one while clients run; the NameNodes count it dead at once (not after the usual ten-minute
  heartbeat expiry).
* ``ha=True``: two NameNodes, ``nn1`` (active) and ``nn2`` (standby), in the nameservice
  ``minidfs-ns`` (``MiniDFSNNTopology.simpleHATopology()``, shared edits in ``data/``), so
  ``namenode_uri`` is ``hdfs://minidfs-ns`` and the conf dir lists both.
  :meth:`LocalHdfs.failover` shuts the active one down and makes the standby active; a second
  failover first starts the stopped one again as the standby, then fails back.
* ``kerberos=True``: a KDC (Hadoop's MiniKdc, Apache Kerby) on 127.0.0.1 over TCP, realm
  ``EXAMPLE.COM``, and the cluster in secure mode: RPC authenticated with Kerberos and authorized
  (``security.client.protocol.acl`` admits the user's principal and ``guest``), block access tokens, SASL on
  the DataNodes' data transfer, ``data_protection`` (``authentication``, ``integrity`` or
  ``privacy``) for both ``dfs.data.transfer.protection`` and ``hadoop.rpc.protection``.  The
  services run as ``hdfs/localhost@EXAMPLE.COM`` (WebHDFS's SPNEGO as ``HTTP/localhost``): clients
  on both sides name the NameNode host ``localhost`` with no DNS canonicalization, as the generated
  ``krb5.conf`` says.  The OS user gets a principal ``<user>@EXAMPLE.COM`` (the HDFS superuser,
  as the OS user is without Kerberos), a keytab, and a ticket cache obtained in the JVM (no
  ``kinit`` needed).  :meth:`LocalHdfs.env` gives the variables that make any client use them
  (``HADOOP_CONF_DIR``, ``KRB5_CONFIG``, ``KRB5CCNAME``); :class:`KerberosInfo` has the rest,
  including an expired ticket and a principal the NameNode refuses, for negative tests.  The
  NameNode's JMX (readiness) stays unauthenticated; WebHDFS needs SPNEGO.

The running JVM takes actions from other processes (failover, stopping a DataNode) through request
files in ``control/`` that it polls; the calls here wait for its answer.

Layout of a base dir::

    cluster.json   pid, ports and options of the running cluster (rewritten by the JVM after
                   every action)
    conf/          generated HADOOP_CONF_DIR (core-site.xml, hdfs-site.xml; yarn-site.xml with YARN)
    control/       requests to the JVM and its answers
    data/          NameNode and DataNode storage (emptied by every start)
    kerberos/      with ``kerberos=True``: krb5.conf, keytabs, ticket caches, the KDC's work dir
    hdfs.log       the JVM's output
    yarn/          with ``yarn=True``: the YARN JVM's yarn.json, yarn.log and work dir

YARN (``start(..., yarn=True)``, or :func:`start_yarn` next to any running :class:`LocalHdfs`):
a ResourceManager and a NodeManager in a second JVM, Hadoop's own ``MiniYARNCluster`` from the
same jars (``MiniYarn.java``), hosts named ``localhost``, free ports, one queue ``root.default``
(the CapacityScheduler), a NodeManager of 6 GiB and 4 vcores by default with the containers'
memory checks off, 256 MiB minimum allocation.  Containers run as the OS user with the
NodeManager's ``PATH`` and ``JAVA_HOME``; their logs stay under :attr:`LocalYarn.container_logs`.

:func:`start` returns a :class:`LocalHdfs` handle; :func:`status` and :func:`stop` find a running
cluster from any process through ``cluster.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from html import escape
from pathlib import Path

from tfrecord_io.clusters import jvm

__all__ = [
    "DATA_PROTECTION_LEVELS", "HADOOP_VERSION", "HDFS_DEFAULT_BLOCK_SIZE", "TEST_BLOCK_SIZE",
    "DataNode", "Failover", "HdfsLocalError", "KerberosInfo", "LocalHdfs", "LocalYarn", "NameNode",
    "default_base_dir", "failover", "fetch_jars", "start", "start_yarn", "status", "stop",
    "stop_datanode", "stop_yarn", "yarn_status",
]

HADOOP_VERSION = "3.5.0"
_HERE = Path(__file__).resolve().parent
_HDFS, _YARN = b"MiniHdfs", b"MiniYarn"  # our launchers, in their JVMs' command lines
_NEEDED_BY = f"the local Hadoop {HADOOP_VERSION}"
TEST_BLOCK_SIZE = 1024 * 1024                # start()'s default
HDFS_DEFAULT_BLOCK_SIZE = 128 * 1024 * 1024  # dfs.blocksize in Hadoop's hdfs-default.xml
_JVM_OPTS = (
    "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
    "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
    # Chatty per-operation / per-subdir INFO lines; keep the log about the cluster itself.
    *(f"-Dorg.slf4j.simpleLogger.log.org.apache.hadoop.hdfs.server.{name}=warn" for name in (
        "datanode.fsdataset.impl.FsDatasetImpl", "namenode.FSNamesystem.audit",
        "datanode.DataNode.clienttrace")),
)
# With Kerberos the log shows the QOP each DataNode connection negotiated (SASL on data transfer).
_SASL_LOG_OPT = ("-Dorg.slf4j.simpleLogger.log.org.apache.hadoop.hdfs.protocol.datatransfer"
                 ".sasl.DataTransferSaslUtil=debug")
# The YARN JVM (ResourceManager + NodeManager; containers are processes of their own).
_YARN_JVM_OPTS = ("-Xmx768m", *_JVM_OPTS[1:])
DATA_PROTECTION_LEVELS = ("authentication", "integrity", "privacy")
DEFAULT_TICKET_LIFETIME = 24 * 3600  # seconds, the user's ticket cache with kerberos=True
MAX_DATANODES = 5  # all in one JVM of 512 MiB


class HdfsLocalError(RuntimeError):
    """The local HDFS could not be set up, started or stopped (the message says why)."""


def default_base_dir() -> Path:
    """Where the CLI keeps its cluster unless given ``--dir``: ``<cache_root>/hdfs-local``."""
    return jvm.cache_root() / "hdfs-local"


def _jars_dir() -> Path:
    return jvm.cache_root() / f"hadoop-{HADOOP_VERSION}" / "jars"


def _jars_marker() -> str:
    """What ``.complete`` says once the jars of this ``pom.xml`` are all there (a pom that gains a
    dependency makes an older cache incomplete, so it is resolved again)."""
    digest = hashlib.sha256((_HERE / "pom.xml").read_bytes()).hexdigest()[:16]
    return f"hadoop {HADOOP_VERSION} pom {digest}\n"


def _jars_complete(target: Path) -> bool:
    try:
        return (target / ".complete").read_text() == _jars_marker()
    except FileNotFoundError:
        return False


def fetch_jars() -> Path:
    """Resolve the Hadoop jars with Maven into the cache (once) and return their directory.

    Idempotent and safe to call from several processes at once.  Needs ``mvn`` and access to Maven
    Central (or a mirror configured in ``~/.m2/settings.xml``).
    """
    target = _jars_dir()
    if _jars_complete(target):
        return target
    mvn = jvm.require("mvn", "Apache Maven 3 (e.g. `apt-get install maven`)", _NEEDED_BY, HdfsLocalError)
    with jvm.locked(target.parent / ".fetch.lock"):
        if _jars_complete(target):
            return target
        import tempfile

        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
            pom = Path(tmp) / "pom.xml"  # a copy, so Maven never writes next to the package
            shutil.copyfile(_HERE / "pom.xml", pom)
            out = Path(tmp) / "jars"
            try:
                run = subprocess.run(
                    [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                     f"-DoutputDirectory={out}"],
                    capture_output=True, text=True, timeout=1800, cwd=tmp)
            except subprocess.TimeoutExpired as e:
                raise HdfsLocalError("Maven did not resolve the jars within 30 minutes") from e
            if run.returncode != 0 or not any(out.glob("hadoop-client-minicluster-*.jar")):
                tail = "\n".join((run.stdout + run.stderr).splitlines()[-30:])
                raise HdfsLocalError(
                    f"Maven could not resolve the Hadoop {HADOOP_VERSION} jars (is Maven Central "
                    f"reachable?); `mvn dependency:copy-dependencies` said:\n{tail}")
            (out / ".complete").write_text(_jars_marker())
            if target.exists():
                shutil.rmtree(target)
            os.replace(out, target)
    return target


@dataclasses.dataclass(frozen=True)
class KerberosInfo:
    """The KDC and credentials of a cluster started with ``kerberos=True`` (files in ``kerberos/``)."""

    realm: str                  # "EXAMPLE.COM"
    kdc: str                    # "127.0.0.1:PORT" (TCP only)
    krb5_conf: Path             # KRB5_CONFIG for MIT Kerberos clients; the JVM's own too
    principal: str              # "<OS user>@EXAMPLE.COM": the HDFS superuser
    keytab: Path                # its keys: hdfs_native.Client(kerberos_principal=, kerberos_keytab=)
    ticket_cache: Path          # a ticket for it (KRB5CCNAME=FILE:<path>), valid until ticket_expires
    ticket_expires: float       # epoch seconds
    expired_ticket_cache: Path  # a ticket for it that ran out before the cluster was up
    rejected_principal: str     # "intruder@EXAMPLE.COM": the KDC knows it, the NameNode refuses it
    rejected_keytab: Path
    guest_principal: str        # "guest@EXAMPLE.COM": admitted, not the superuser (permissions apply)
    guest_keytab: Path
    service_principal: str      # "hdfs/localhost@EXAMPLE.COM": the NameNodes and DataNodes
    yarn_principal: str         # "yarn/localhost@EXAMPLE.COM": a YARN started next to it
    service_keytab: Path        # the keys of both (and of HTTP/localhost, WebHDFS's SPNEGO)
    data_protection: str        # dfs.data.transfer.protection and hadoop.rpc.protection
    auth_to_local: str          # hadoop.security.auth_to_local: the services' principals -> OS user

    @property
    def java_option(self) -> str:
        """``-Djava.security.krb5.conf=<krb5_conf>``: Java clients do not read KRB5_CONFIG."""
        return f"-Djava.security.krb5.conf={self.krb5_conf}"

    @property
    def ccache_name(self) -> str:
        """``FILE:<ticket_cache>``, for KRB5CCNAME."""
        return f"FILE:{self.ticket_cache}"


@dataclasses.dataclass(frozen=True)
class NameNode:
    """One NameNode as the handle last saw it."""

    id: str            # "nn1"; with ha=True also "nn2"
    rpc_address: str   # "127.0.0.1:PORT" (a NameNode started again keeps its ports)
    http_address: str  # "127.0.0.1:PORT": JMX, WebHDFS
    state: str         # "active", "standby" or "stopped"


@dataclasses.dataclass(frozen=True)
class DataNode:
    """One DataNode as the handle last saw it."""

    index: int     # as started: what stop_datanode() takes
    address: str   # its data transfer address, "127.0.0.1:PORT"
    alive: bool    # False once stop_datanode() has stopped it


@dataclasses.dataclass(frozen=True)
class Failover:
    """What :meth:`LocalHdfs.failover` did."""

    active: str                # the NameNode now active ("nn2" after the first failover)
    previous: str              # the one that was active, now shut down
    restarted_previous: bool   # True if ``active`` had been stopped and was started again first
    seconds: float             # how long it took, in the JVM


@dataclasses.dataclass(frozen=True)
class LocalHdfs:
    """A running local cluster.  Picklable (the handle, not the process).

    The NameNode and DataNode fields are a snapshot: after :meth:`failover` or
    :meth:`stop_datanode`, :func:`status` gives a handle that shows the change.
    """

    base_dir: Path
    namenode_uri: str   # "hdfs://127.0.0.1:PORT"; with ha=True "hdfs://minidfs-ns"
    webhdfs_url: str    # "http://127.0.0.1:PORT" of the (then) active NameNode
    conf_dir: Path      # a HADOOP_CONF_DIR for Spark, Beam and hdfs-native
    user: str           # the HDFS superuser (the OS user that started the cluster)
    log_path: Path
    pid: int
    nameservice: str | None = None     # "minidfs-ns" with ha=True
    namenodes: tuple[NameNode, ...] = ()
    datanodes: tuple[DataNode, ...] = ()
    replication: int = 1               # dfs.replication of the cluster and of its conf dir
    kerberos: KerberosInfo | None = None
    _proc: subprocess.Popen | None = dataclasses.field(default=None, repr=False, compare=False)

    def __reduce__(self):
        fields = [getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "_proc"]
        return (LocalHdfs, tuple(fields))

    @property
    def ha(self) -> bool:
        return self.nameservice is not None

    @property
    def active_namenode(self) -> NameNode:
        return next(nn for nn in self.namenodes if nn.state == "active")

    def uri(self, path: str = "/") -> str:
        """``hdfs://127.0.0.1:PORT/path`` (``hdfs://minidfs-ns/path``) for an absolute HDFS path."""
        return self.namenode_uri + "/" + path.lstrip("/")

    def env(self) -> dict[str, str]:
        """What a client's environment needs to use this cluster (``start`` prints it as
        ``export`` lines): ``HADOOP_CONF_DIR``, and with Kerberos ``KRB5_CONFIG`` and
        ``KRB5CCNAME`` (the user's ticket cache)."""
        env = {"HADOOP_CONF_DIR": str(self.conf_dir)}
        if self.kerberos is not None:
            env["KRB5_CONFIG"] = str(self.kerberos.krb5_conf)
            env["KRB5CCNAME"] = self.kerberos.ccache_name
        return env

    def is_ready(self) -> bool:
        """An active NameNode out of safe mode with at least one live DataNode (asks its JMX)."""
        if not jvm.is_alive(self.pid, _HDFS):
            return False
        if not self.ha:
            return _jmx_ready(self.webhdfs_url)
        return any(_jmx_ready(f"http://{nn.http_address}", active=True) for nn in self.namenodes)

    def failover(self, timeout: float = 180.0) -> Failover:
        """Make the standby NameNode active and shut the active one down, while clients keep
        running (they retry on the other NameNode); wait until it is done.  A later call starts the
        stopped NameNode again as the standby first, then fails back to it.  Needs ``ha=True``."""
        if not self.ha:
            raise HdfsLocalError(f"the local HDFS in {self.base_dir} has a single NameNode; start "
                                 f"it with ha=True (`--ha`) to fail over")
        answer = _control(self, "failover", timeout)
        return Failover(active=answer["active"], previous=answer["previous"],
                        restarted_previous=answer["restarted_previous_standby"],
                        seconds=answer["seconds"])

    def stop_datanode(self, index: int, timeout: float = 120.0) -> DataNode:
        """Stop DataNode ``index`` (as started, 0-based) while clients keep running; the NameNodes
        count it dead at once.  Returns it, no longer alive."""
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError(f"index must be a DataNode's index (0 to {len(self.datanodes) - 1}); "
                             f"got {index!r}")
        answer = _control(self, f"stop-datanode {index}", timeout)
        return DataNode(index=answer["index"], address=answer["address"], alive=False)

    def stop(self, timeout: float = 60.0) -> None:
        """Shut the cluster down (SIGTERM, then SIGKILL after ``timeout`` s).  Idempotent."""
        jvm.terminate(self.pid, self._proc, timeout, _HDFS, HdfsLocalError)
        with contextlib.suppress(FileNotFoundError):
            (self.base_dir / "cluster.json").unlink()


def _jmx_ready(http_url: str, active: bool = False) -> bool:
    """The NameNode at ``http_url`` is out of safe mode with a live DataNode (and, with
    ``active``, is the active one of an HA pair)."""
    import urllib.request

    def bean(name: str) -> dict:
        with urllib.request.urlopen(f"{http_url}/jmx?qry=Hadoop:service=NameNode,name={name}",
                                    timeout=5) as r:
            return (json.load(r).get("beans") or [{}])[0]

    try:
        if active and bean("NameNodeStatus").get("State") != "active":
            return False
        state = bean("FSNamesystemState")
    except (OSError, ValueError):
        return False
    return state.get("FSState") == "Operational" and state.get("NumLiveDataNodes", 0) >= 1


def _control(h: LocalHdfs, command: str, timeout: float) -> dict:
    """Ask the cluster's JVM to do ``command`` (see MiniHdfs.java) and wait for its answer."""
    control = h.base_dir / "control"
    name = f"{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp, request, response = (control / f"{name}.{ext}" for ext in ("tmp", "request", "response"))
    tmp.write_text(command + "\n")
    os.replace(tmp, request)  # never seen half written
    deadline = time.monotonic() + timeout
    while True:
        answer = jvm.read_state(response)
        if answer is not None:
            response.unlink()
            break
        if not jvm.is_alive(h.pid, _HDFS):
            raise HdfsLocalError(f"the local HDFS in {h.base_dir} (pid {h.pid}) is not running, so "
                                 f"it cannot `{command}`; last lines of {h.log_path}:\n"
                                 f"{jvm.log_tail(h.log_path)}")
        if time.monotonic() > deadline:
            with contextlib.suppress(FileNotFoundError):
                request.unlink()
            raise TimeoutError(f"the local HDFS in {h.base_dir} did not finish `{command}` "
                               f"within {timeout:.0f}s; last lines of {h.log_path}:\n"
                               f"{jvm.log_tail(h.log_path)}")
        time.sleep(0.1)
    if not answer.get("ok"):
        raise HdfsLocalError(f"the local HDFS in {h.base_dir} could not `{command}`: "
                             f"{answer.get('error')} (see {h.log_path})")
    return answer


def _kerberos_info(k: dict) -> KerberosInfo:
    return KerberosInfo(
        realm=k["realm"], kdc=k["kdc"], krb5_conf=Path(k["krb5_conf"]), principal=k["principal"],
        keytab=Path(k["keytab"]), ticket_cache=Path(k["ticket_cache"]),
        ticket_expires=float(k["ticket_expires"]),
        expired_ticket_cache=Path(k["expired_ticket_cache"]),
        rejected_principal=k["rejected_principal"], rejected_keytab=Path(k["rejected_keytab"]),
        guest_principal=k["guest_principal"], guest_keytab=Path(k["guest_keytab"]),
        service_principal=k["service_principal"], yarn_principal=k["yarn_principal"],
        service_keytab=Path(k["service_keytab"]), data_protection=k["protection"],
        auth_to_local=k["auth_to_local"])


def _handle(base: Path, state: dict, proc: subprocess.Popen | None = None) -> LocalHdfs:
    nameservice = state.get("nameservice")
    return LocalHdfs(
        base_dir=base,
        namenode_uri=f"hdfs://{nameservice}" if nameservice else f"hdfs://127.0.0.1:{state['port']}",
        webhdfs_url=f"http://127.0.0.1:{state['http_port']}",
        conf_dir=base / "conf",
        user=state["user"],
        log_path=base / "hdfs.log",
        pid=int(state["pid"]),
        nameservice=nameservice,
        namenodes=tuple(NameNode(id=n["id"], rpc_address=n["rpc_address"],
                                 http_address=n["http_address"], state=n["state"])
                        for n in state["namenodes"]),
        datanodes=tuple(DataNode(index=int(d["index"]), address=d["address"], alive=bool(d["alive"]))
                        for d in state["datanodes"]),
        replication=int(state["replication"]),
        kerberos=_kerberos_info(state["kerberos"]) if "kerberos" in state else None,
        _proc=proc,
    )


def _write_xml(conf_dir: Path, name: str, props: dict[str, str]) -> None:
    body = "".join(f"  <property><name>{escape(k, False)}</name>"
                   f"<value>{escape(v, False)}</value></property>\n" for k, v in props.items())
    tmp = conf_dir / (name + ".tmp")
    tmp.write_text(f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')
    os.replace(tmp, conf_dir / name)


def _write_conf(h: LocalHdfs, block_size: int) -> None:
    core = {
        "fs.defaultFS": h.namenode_uri,
        # Fail fast instead of retrying for minutes when the cluster is gone.
        "ipc.client.connect.max.retries": "3",
        "ipc.client.connect.timeout": "10000",
    }
    if h.ha:
        ns = h.nameservice
        addresses = {"dfs.nameservices": ns,
                     f"dfs.ha.namenodes.{ns}": ",".join(nn.id for nn in h.namenodes),
                     f"dfs.client.failover.proxy.provider.{ns}":
                         "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider"}
        for nn in h.namenodes:
            addresses[f"dfs.namenode.rpc-address.{ns}.{nn.id}"] = nn.rpc_address
            addresses[f"dfs.namenode.http-address.{ns}.{nn.id}"] = nn.http_address
    else:
        addresses = {"dfs.namenode.rpc-address": h.active_namenode.rpc_address,
                     "dfs.namenode.http-address": h.active_namenode.http_address}
    site = {
        **addresses,
        "dfs.webhdfs.enabled": "true",
        "dfs.replication": str(h.replication),
        "dfs.blocksize": str(block_size),
        "dfs.client.use.datanode.hostname": "false",
    }
    if h.kerberos is not None:
        k = h.kerberos
        core.update({
            "hadoop.security.authentication": "kerberos",
            "hadoop.rpc.protection": k.data_protection,
            # For Java clients: principals map to user names as on the cluster.
            "hadoop.security.auth_to_local": k.auth_to_local,
        })
        site.update({
            "dfs.namenode.kerberos.principal": k.service_principal,
            "dfs.datanode.kerberos.principal": k.service_principal,
            # Without it a client (hdfs-native, Java's) skips SASL and the DataNodes refuse it.
            "dfs.data.transfer.protection": k.data_protection,
        })
    h.conf_dir.mkdir(parents=True, exist_ok=True)
    for name, props in (("core-site.xml", core), ("hdfs-site.xml", site)):
        _write_xml(h.conf_dir, name, props)


def status(base_dir: str | os.PathLike) -> LocalHdfs | None:
    """The cluster running from ``base_dir`` (started by any process), or None."""
    base = Path(base_dir).resolve()
    state = jvm.read_state(base / "cluster.json")
    if state is None or not jvm.is_alive(int(state["pid"]), _HDFS):
        return None
    try:
        return _handle(base, state)
    except (KeyError, TypeError, ValueError) as e:
        raise HdfsLocalError(f"the local HDFS running from {base} (pid {state['pid']}) was started by another "
                             f"version of tfrecord-io ({base / 'cluster.json'} has no {e}): stop it with "
                             f"`kill {state['pid']}`") from e


def _running(base_dir: str | os.PathLike) -> LocalHdfs:
    handle = status(base_dir)
    if handle is None:
        raise HdfsLocalError(f"no local HDFS is running from {Path(base_dir).resolve()}; start one "
                             f"first (`tfrecord-io hdfs-local start --dir ...`)")
    return handle


def failover(base_dir: str | os.PathLike, timeout: float = 180.0) -> Failover:
    """:meth:`LocalHdfs.failover` on the cluster running from ``base_dir``."""
    return _running(base_dir).failover(timeout)


def stop_datanode(base_dir: str | os.PathLike, index: int, timeout: float = 120.0) -> DataNode:
    """:meth:`LocalHdfs.stop_datanode` on the cluster running from ``base_dir``."""
    return _running(base_dir).stop_datanode(index, timeout)


def stop(base_dir: str | os.PathLike, timeout: float = 60.0) -> bool:
    """Stop the cluster running from ``base_dir`` (its YARN first, if started with it); False if
    no HDFS was running."""
    base = Path(base_dir).resolve()
    stop_yarn(base / "yarn", timeout)
    handle = status(base)
    if handle is None:
        with contextlib.suppress(FileNotFoundError):
            (base / "cluster.json").unlink()  # stale
        return False
    handle.stop(timeout)
    return True


def _check_options(block_size, port, http_port, datanodes, ha, kerberos, data_protection,
                   ticket_lifetime) -> None:
    """ValueError, before anything starts, for any option :func:`start` cannot take."""
    def whole(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not whole(block_size) or block_size < TEST_BLOCK_SIZE or block_size % 512:
        raise ValueError(f"block_size must be a whole number of bytes, at least {TEST_BLOCK_SIZE} "
                         f"(HDFS's minimum) and a multiple of 512 (its checksum chunk); got "
                         f"{block_size!r}")
    if not whole(datanodes) or not 1 <= datanodes <= MAX_DATANODES:
        raise ValueError(f"datanodes must be a whole number from 1 to {MAX_DATANODES}; got "
                         f"{datanodes!r}")
    if ha and (port or http_port):
        raise ValueError("port and http_port choose the single NameNode's ports; with ha=True both "
                         "NameNodes get free ones")
    if data_protection not in DATA_PROTECTION_LEVELS:
        raise ValueError(f"data_protection must be one of {', '.join(DATA_PROTECTION_LEVELS)}; "
                         f"got {data_protection!r}")
    if not whole(ticket_lifetime) or ticket_lifetime < 60:
        raise ValueError(f"ticket_lifetime must be a whole number of seconds, at least 60; got "
                         f"{ticket_lifetime!r}")
    if not kerberos and (data_protection != "authentication"
                         or ticket_lifetime != DEFAULT_TICKET_LIFETIME):
        raise ValueError("data_protection and ticket_lifetime are Kerberos settings: they need "
                         "kerberos=True (`--kerberos`)")


def start(base_dir: str | os.PathLike, *, port: int = 0, http_port: int = 0,
          timeout: float = 180.0, detach: bool = True,
          block_size: int = TEST_BLOCK_SIZE, yarn: bool = False, datanodes: int = 1,
          ha: bool = False, kerberos: bool = False, data_protection: str = "authentication",
          ticket_lifetime: int = DEFAULT_TICKET_LIFETIME, conf: dict[str, str] | None = None) -> LocalHdfs:
    """Start a cluster in ``base_dir`` and wait until it is ready.

    ``port`` / ``http_port`` of 0 let the OS pick free ports.  With ``detach=True`` the cluster
    outlives this process (stop it with :func:`stop`); with ``detach=False`` it also stops when
    this process exits, however it exits (the JVM watches a pipe from us).  Ready means the
    (active) NameNode reports itself out of safe mode with every DataNode registered.  The
    filesystem starts empty: data from an earlier start in the same ``base_dir`` is discarded.

    ``block_size`` is the cluster's ``dfs.blocksize``, which files written without their own
    block size get: by default :data:`TEST_BLOCK_SIZE` (1 MiB, so tests cross block boundaries);
    :data:`HDFS_DEFAULT_BLOCK_SIZE` (128 MiB) is what a production cluster uses unless told
    otherwise, and costs its DataNode half the CPU per byte read (one request per block).

    ``datanodes``, ``ha`` and ``kerberos`` (with ``data_protection`` and ``ticket_lifetime``, in
    seconds, of the user's ticket cache) are described in the module doc; the handle's
    :attr:`LocalHdfs.kerberos` has the principals, keytabs and ticket caches.

    ``conf``: Hadoop settings for the cluster's own configuration (the NameNodes' and DataNodes'),
    set after the ones above, e.g. ``{"dfs.blockreport.incremental.intervalMsec": "500"}`` for
    DataNodes that report new blocks late, as they do under load.

    ``yarn=True`` also starts a local YARN on this HDFS (:func:`start_yarn`, from
    ``base_dir/yarn``, its ``yarn-site.xml`` in the same conf dir); :func:`yarn_status` on
    ``base_dir/yarn`` finds it, and :func:`stop` stops both.
    """
    _check_options(block_size, port, http_port, datanodes, ha, kerberos, data_protection,
                   ticket_lifetime)
    base = Path(base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    java = jvm.find_java(_NEEDED_BY, HdfsLocalError)
    jars = fetch_jars()
    with jvm.locked(base / ".lock"):
        running = status(base)
        if running is not None:
            raise HdfsLocalError(f"a local HDFS is already running from {base} at "
                                 f"{running.namenode_uri} (pid {running.pid}); stop it first")
        with contextlib.suppress(FileNotFoundError):
            (base / "cluster.json").unlink()
        for stale in ("data", "kerberos", "control"):  # every start is a fresh filesystem
            shutil.rmtree(base / stale, ignore_errors=True)
        log_path = base / "hdfs.log"
        env = {k: v for k, v in os.environ.items()
               if k not in ("HADOOP_USER_NAME", "HADOOP_PROXY_USER", "HADOOP_CONF_DIR",
                            "HADOOP_TOKEN_FILE_LOCATION", "JAVA_TOOL_OPTIONS", "KRB5_CONFIG",
                            "KRB5CCNAME")}
        (base / "tmp").mkdir(exist_ok=True)  # also the JVM's (Jetty's) temp dir
        if kerberos:  # keytabs and ticket caches: the user's alone, from before the JVM writes one
            _private_dir(base / "kerberos")
        cmd = [java, *_JVM_OPTS, *([_SASL_LOG_OPT] if kerberos else []),
               f"-Djava.io.tmpdir={base / 'tmp'}",
               "-cp", f"{jars}/*", str(_HERE / "MiniHdfs.java"),
               "--base", str(base), "--port", str(port), "--http-port", str(http_port),
               "--block-size", str(block_size)]
        if datanodes != 1:
            cmd += ["--datanodes", str(datanodes), "--replication", str(min(datanodes, 3))]
        if ha:
            cmd.append("--ha")
        if kerberos:
            cmd += ["--kerberos", "--data-protection", data_protection,
                    "--ticket-lifetime", str(ticket_lifetime)]
        for key, value in (conf or {}).items():
            cmd += ["--conf", f"{key}={value}"]
        if not detach:
            cmd.append("--exit-on-stdin-eof")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                cmd, cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL if detach else subprocess.PIPE, start_new_session=True)
        try:
            handle = _wait_ready(base, proc, timeout)
            if kerberos:
                _private_files(base / "kerberos")
            _write_conf(handle, block_size)
            if yarn:
                start_yarn(handle, base / "yarn", conf_dir=handle.conf_dir, timeout=timeout,
                           detach=detach)
        except BaseException:
            jvm.terminate(proc.pid, proc, 30, _HDFS, HdfsLocalError)
            raise
    if detach:  # the handle must not own the process, or its stop/GC would take it down
        object.__setattr__(handle, "_proc", None)
    return handle


def _private_dir(path: Path) -> None:
    """``path``, created 0700 whatever the umask (another local user must not list or read it)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def _private_files(root: Path) -> None:
    """Every file under ``root`` 0600 and every directory 0700: keytabs, ticket caches and the
    KDC's work files are credentials (the JVM writes them with the umask's modes)."""
    for p in root.rglob("*"):
        p.chmod(0o700 if p.is_dir() else 0o600)


def _wait_ready(base: Path, proc: subprocess.Popen, timeout: float) -> LocalHdfs:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HdfsLocalError(f"the local HDFS exited with status {proc.returncode} while "
                                 f"starting; last lines of {base / 'hdfs.log'}:\n"
                                 f"{jvm.log_tail(base / 'hdfs.log')}")
        state = jvm.read_state(base / "cluster.json")
        if state is not None and state.get("pid") == proc.pid:
            handle = _handle(base, state, proc)
            if _jmx_ready(handle.webhdfs_url, active=handle.ha):
                return handle
        time.sleep(0.25)
    raise TimeoutError(f"the local HDFS in {base} was not ready within {timeout:.0f}s; last lines "
                       f"of {base / 'hdfs.log'}:\n{jvm.log_tail(base / 'hdfs.log')}")


# ---------------------------------------------------------------------------------------------
# YARN
# ---------------------------------------------------------------------------------------------
YARN_NM_MEMORY_MB = 6144
YARN_NM_VCORES = 4
YARN_MIN_ALLOCATION_MB = 256


@dataclasses.dataclass(frozen=True)
class LocalYarn:
    """A running local YARN (ResourceManager + NodeManager).  Picklable (the handle, not the process)."""

    base_dir: Path
    rm_address: str         # "localhost:PORT": yarn.resourcemanager.address
    scheduler_address: str  # where application masters ask for containers
    conf_dir: Path          # a HADOOP_CONF_DIR with core-, hdfs- and yarn-site.xml
    work_dir: Path          # the NodeManager's local and log dirs
    log_path: Path
    pid: int
    nm_memory_mb: int
    nm_vcores: int
    principal: str | None = None  # next to a Kerberos HDFS: the ResourceManager's and NodeManager's
    _proc: subprocess.Popen | None = dataclasses.field(default=None, repr=False, compare=False)

    def __reduce__(self):
        fields = [getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "_proc"]
        return (LocalYarn, tuple(fields))

    @property
    def container_logs(self) -> Path:
        """``<app id>/<container id>/{stdout,stderr,...}`` of every container the NodeManager ran."""
        return self.work_dir / "MiniYarn-logDir-nm-0_0"

    def app_logs(self, app_id: str) -> str:
        """Every log file of every container of one application, concatenated (for assertions and
        failure messages)."""
        parts = []
        for f in sorted((self.container_logs / app_id).glob("*/*")):
            if f.is_file():
                parts.append(f"--- {f.parent.name}/{f.name}\n{f.read_text(errors='replace')}")
        return "".join(parts)

    def is_ready(self) -> bool:
        return jvm.is_alive(self.pid, _YARN) and (self.base_dir / "yarn.json").is_file()

    def stop(self, timeout: float = 60.0) -> None:
        """Shut YARN down (SIGTERM, then SIGKILL after ``timeout`` s).  Idempotent."""
        jvm.terminate(self.pid, self._proc, timeout, _YARN, HdfsLocalError)
        with contextlib.suppress(FileNotFoundError):
            (self.base_dir / "yarn.json").unlink()


def _yarn_handle(base: Path, state: dict, conf_dir: Path,
                 proc: subprocess.Popen | None = None) -> LocalYarn:
    return LocalYarn(
        base_dir=base, rm_address=state["rm_address"], scheduler_address=state["scheduler_address"],
        conf_dir=conf_dir, work_dir=Path(state["work_dir"]), log_path=base / "yarn.log",
        pid=int(state["pid"]), nm_memory_mb=int(state["nm_memory_mb"]),
        nm_vcores=int(state["nm_vcores"]), principal=state.get("principal"), _proc=proc)


def _write_yarn_conf(conf_dir: Path, state: dict) -> None:
    secure = {"yarn.resourcemanager.principal": state["principal"],
              "yarn.nodemanager.principal": state["principal"]} if state.get("principal") else {}
    _write_xml(conf_dir, "yarn-site.xml", {
        "yarn.resourcemanager.hostname": state["rm_address"].rsplit(":", 1)[0],
        "yarn.resourcemanager.address": state["rm_address"],
        "yarn.resourcemanager.scheduler.address": state["scheduler_address"],
        "yarn.resourcemanager.resource-tracker.address": state["resource_tracker_address"],
        "yarn.resourcemanager.admin.address": state["admin_address"],
        "yarn.resourcemanager.webapp.address": state["webapp_address"],
        "yarn.scheduler.minimum-allocation-mb": str(state["min_allocation_mb"]),
        "yarn.scheduler.maximum-allocation-mb": str(state["nm_memory_mb"]),
        "yarn.scheduler.maximum-allocation-vcores": str(state["nm_vcores"]),
        # Clients give up on a stopped cluster in seconds rather than retrying for 15 minutes.
        "yarn.resourcemanager.connect.max-wait.ms": "30000",
        "yarn.resourcemanager.connect.retry-interval.ms": "1000",
        **secure,
    })


def yarn_status(base_dir: str | os.PathLike) -> LocalYarn | None:
    """The YARN running from ``base_dir`` (``<hdfs base>/yarn`` for ``start(yarn=True)``), or None."""
    base = Path(base_dir).resolve()
    state = jvm.read_state(base / "yarn.json")
    if state is None or not jvm.is_alive(int(state["pid"]), _YARN):
        return None
    try:
        conf = Path(json.loads((base / "conf_dir.json").read_text())["conf_dir"])
    except (FileNotFoundError, ValueError, KeyError):
        conf = base / "conf"
    return _yarn_handle(base, state, conf)


def stop_yarn(base_dir: str | os.PathLike, timeout: float = 60.0) -> bool:
    """Stop the YARN running from ``base_dir``; False if none was running."""
    base = Path(base_dir).resolve()
    handle = yarn_status(base)
    if handle is None:
        with contextlib.suppress(FileNotFoundError):
            (base / "yarn.json").unlink()
        return False
    handle.stop(timeout)
    return True


def _java_home(java: str) -> str:
    """The JDK/JRE directory of ``java`` (containers start ``$JAVA_HOME/bin/java``)."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return home
    return str(Path(os.path.realpath(java)).parent.parent)


def start_yarn(hdfs: LocalHdfs, base_dir: str | os.PathLike, *, conf_dir: str | os.PathLike | None = None,
               timeout: float = 180.0, detach: bool = True, nm_memory_mb: int = YARN_NM_MEMORY_MB,
               nm_vcores: int = YARN_NM_VCORES,
               min_allocation_mb: int = YARN_MIN_ALLOCATION_MB) -> LocalYarn:
    """Start a ResourceManager + NodeManager on ``hdfs`` from ``base_dir``; wait until the
    NodeManager has registered.

    ``conf_dir`` (default ``base_dir/conf``) becomes a complete HADOOP_CONF_DIR for Spark on YARN:
    the HDFS's core-site.xml and hdfs-site.xml (copied there unless it is ``hdfs.conf_dir``) and a
    yarn-site.xml with the ResourceManager's addresses.  ``detach`` as for :func:`start`.  Every
    start begins with empty NodeManager dirs.

    Next to a Kerberos HDFS it is a secure YARN: the ResourceManager and NodeManager log in as
    ``hdfs.kerberos.yarn_principal``, clients need a ticket (or keytab) as for the HDFS, and
    applications get HDFS delegation tokens as on a real cluster.  Containers still run as the OS
    user (the default container executor); the NodeManager gives each one the KDC's krb5.conf
    (``JAVA_TOOL_OPTIONS=-Djava.security.krb5.conf=...`` and ``KRB5_CONFIG``).  A client JVM
    (``spark-submit``) needs the same :attr:`KerberosInfo.java_option`, e.g. in
    ``SPARK_SUBMIT_OPTS``.
    """
    for name, value, least in (("nm_memory_mb", nm_memory_mb, 1024), ("nm_vcores", nm_vcores, 1),
                               ("min_allocation_mb", min_allocation_mb, 64)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be a whole number, at least {least}; got {value!r}")
    if min_allocation_mb > nm_memory_mb:
        raise ValueError(f"min_allocation_mb ({min_allocation_mb}) is more than the NodeManager's "
                         f"memory ({nm_memory_mb} MiB)")
    base = Path(base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    conf = Path(conf_dir).resolve() if conf_dir is not None else base / "conf"
    java = jvm.find_java(_NEEDED_BY, HdfsLocalError)
    jars = fetch_jars()
    with jvm.locked(base / ".lock"):
        running = yarn_status(base)
        if running is not None:
            raise HdfsLocalError(f"a local YARN is already running from {base} (ResourceManager "
                                 f"{running.rm_address}, pid {running.pid}); stop it first")
        with contextlib.suppress(FileNotFoundError):
            (base / "yarn.json").unlink()
        shutil.rmtree(base / "target", ignore_errors=True)  # the NodeManager's dirs
        conf.mkdir(parents=True, exist_ok=True)
        if conf != Path(hdfs.conf_dir).resolve():
            for name in ("core-site.xml", "hdfs-site.xml"):
                shutil.copyfile(Path(hdfs.conf_dir) / name, conf / (name + ".tmp"))
                os.replace(conf / (name + ".tmp"), conf / name)
        (base / "conf_dir.json").write_text(json.dumps({"conf_dir": str(conf)}))
        log_path = base / "yarn.log"
        env = {k: v for k, v in os.environ.items()
               if k not in ("HADOOP_USER_NAME", "HADOOP_PROXY_USER", "HADOOP_TOKEN_FILE_LOCATION",
                            "JAVA_TOOL_OPTIONS", "PYTHONPATH", "PYSPARK_PYTHON",
                            "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "VIRTUAL_ENV")}
        # Containers inherit these from the NodeManager (yarn.nodemanager.env-whitelist).
        env["JAVA_HOME"] = _java_home(java)
        env["HADOOP_CONF_DIR"] = str(conf)
        (base / "tmp").mkdir(exist_ok=True)
        classpath = f"{jars}/*"
        if hdfs.ha or hdfs.kerberos is not None:
            # The HDFS's client conf first on the JVM's classpath (see MiniYarn.java).
            hadoop_conf = base / "hadoop-conf"
            shutil.rmtree(hadoop_conf, ignore_errors=True)
            hadoop_conf.mkdir()
            for name in ("core-site.xml", "hdfs-site.xml"):
                shutil.copyfile(Path(hdfs.conf_dir) / name, hadoop_conf / name)
            classpath = f"{hadoop_conf}:{classpath}"
        k = hdfs.kerberos
        cmd = [java, *_YARN_JVM_OPTS, f"-Djava.io.tmpdir={base / 'tmp'}",
               *([k.java_option] if k else []),
               "-cp", classpath, str(_HERE / "MiniYarn.java"),
               "--base", str(base), "--default-fs", hdfs.namenode_uri,
               "--nm-memory-mb", str(nm_memory_mb), "--nm-vcores", str(nm_vcores),
               "--min-allocation-mb", str(min_allocation_mb)]
        if k:
            cmd += ["--kerberos", k.yarn_principal, str(k.service_keytab), str(k.krb5_conf)]
        if not detach:
            cmd.append("--exit-on-stdin-eof")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                cmd, cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL if detach else subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise HdfsLocalError(
                        f"the local YARN exited with status {proc.returncode} while starting; "
                        f"last lines of {log_path}:\n{jvm.log_tail(log_path)}")
                state = jvm.read_state(base / "yarn.json")
                if state is not None and state.get("pid") == proc.pid:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the local YARN in {base} was not ready within {timeout:.0f}s; "
                                       f"last lines of {log_path}:\n{jvm.log_tail(log_path)}")
                time.sleep(0.25)
            _write_yarn_conf(conf, state)
            handle = _yarn_handle(base, state, conf, proc)
        except BaseException:
            jvm.terminate(proc.pid, proc, 30, _YARN, HdfsLocalError)
            raise
    if detach:
        object.__setattr__(handle, "_proc", None)
    return handle
