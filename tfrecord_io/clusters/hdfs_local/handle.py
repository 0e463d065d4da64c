"""The handle of a running local HDFS (:class:`LocalHdfs`, with its :class:`NameNode`,
:class:`DataNode` and :class:`KerberosInfo` fields) as ``cluster.json`` describes it, and what it
asks the cluster's JVM: whether it is ready (the NameNode's JMX) and the actions it takes from
other processes (request files in ``control/``: failover, stopping a DataNode)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

from tfrecord_io.clusters import jvm
from tfrecord_io.clusters.hdfs_local.hadoop import HDFS_PROCESS, HdfsLocalError

__all__ = ["DataNode", "Failover", "KerberosInfo", "LocalHdfs", "NameNode", "hdfs_handle", "jmx_ready"]


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
        if not jvm.is_alive(self.pid, HDFS_PROCESS):
            return False
        if not self.ha:
            return jmx_ready(self.webhdfs_url)
        return any(jmx_ready(f"http://{nn.http_address}", active=True) for nn in self.namenodes)

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
        jvm.terminate(self.pid, self._proc, timeout, HDFS_PROCESS, HdfsLocalError)
        with contextlib.suppress(FileNotFoundError):
            (self.base_dir / "cluster.json").unlink()


def jmx_ready(http_url: str, active: bool = False) -> bool:
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
        if not jvm.is_alive(h.pid, HDFS_PROCESS):
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


def hdfs_handle(base: Path, state: dict, proc: subprocess.Popen | None = None) -> LocalHdfs:
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
