"""The local HDFS's lifecycle: :func:`start` (checks its options, launches ``MiniHdfs.java``, waits
until the NameNode is ready and writes the conf dir), and for a cluster running from a base dir,
started by any process: :func:`status`, :func:`failover`, :func:`stop_datanode`, :func:`stop`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from tfrecord_io.clusters import jvm
from tfrecord_io.clusters.hdfs_local.hadoop import (
    HDFS_PROCESS, JVM_OPTS, LAUNCHERS, NEEDED_BY, SASL_LOG_OPT, HdfsLocalError, fetch_jars,
)
from tfrecord_io.clusters.hdfs_local.handle import DataNode, Failover, LocalHdfs, hdfs_handle, jmx_ready
from tfrecord_io.clusters.hdfs_local.site_xml import write_hdfs_conf
from tfrecord_io.clusters.hdfs_local.yarn import start_yarn, stop_yarn

__all__ = [
    "DATA_PROTECTION_LEVELS", "DEFAULT_TICKET_LIFETIME", "HDFS_DEFAULT_BLOCK_SIZE", "MAX_DATANODES", "TEST_BLOCK_SIZE",
    "default_base_dir", "failover", "start", "status", "stop", "stop_datanode",
]

TEST_BLOCK_SIZE = 1024 * 1024                # start()'s default
HDFS_DEFAULT_BLOCK_SIZE = 128 * 1024 * 1024  # dfs.blocksize in Hadoop's hdfs-default.xml
DATA_PROTECTION_LEVELS = ("authentication", "integrity", "privacy")
DEFAULT_TICKET_LIFETIME = 24 * 3600  # seconds, the user's ticket cache with kerberos=True
MAX_DATANODES = 5  # all in one JVM of 512 MiB


def default_base_dir() -> Path:
    """Where the CLI keeps its cluster unless given ``--dir``: ``<cache_root>/hdfs-local``."""
    return jvm.cache_root() / "hdfs-local"


def status(base_dir: str | os.PathLike) -> LocalHdfs | None:
    """The cluster running from ``base_dir`` (started by any process), or None."""
    base = Path(base_dir).resolve()
    state = jvm.read_state(base / "cluster.json")
    if state is None or not jvm.is_alive(int(state["pid"]), HDFS_PROCESS):
        return None
    try:
        return hdfs_handle(base, state)
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
    return jvm.stop_running(status(base), base / "cluster.json", timeout)


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
    seconds, of the user's ticket cache) are described in the package doc
    (:mod:`tfrecord_io.clusters.hdfs_local`); the handle's :attr:`LocalHdfs.kerberos` has the
    principals, keytabs and ticket caches.

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
    java = jvm.find_java(NEEDED_BY, HdfsLocalError)
    jars = fetch_jars()
    with jvm.locked(base / ".lock"):
        jvm.starting(status(base), base / "cluster.json", lambda running: HdfsLocalError(
            f"a local HDFS is already running from {base} at {running.namenode_uri} (pid {running.pid}); "
            f"stop it first"))
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
        cmd = [java, *JVM_OPTS, *([SASL_LOG_OPT] if kerberos else []),
               f"-Djava.io.tmpdir={base / 'tmp'}",
               "-cp", f"{jars}/*", str(LAUNCHERS / "MiniHdfs.java"),
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
        proc = jvm.launch(cmd, cwd=base, env=env, log_path=log_path, detach=detach)
        try:
            handle = _wait_ready(base, proc, timeout)
            if kerberos:
                _private_files(base / "kerberos")
            write_hdfs_conf(handle, block_size)
            if yarn:
                start_yarn(handle, base / "yarn", conf_dir=handle.conf_dir, timeout=timeout,
                           detach=detach)
        except BaseException:
            jvm.terminate(proc.pid, proc, 30, HDFS_PROCESS, HdfsLocalError)
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
            handle = hdfs_handle(base, state, proc)
            if jmx_ready(handle.webhdfs_url, active=handle.ha):
                return handle
        time.sleep(0.25)
    raise TimeoutError(f"the local HDFS in {base} was not ready within {timeout:.0f}s; last lines "
                       f"of {base / 'hdfs.log'}:\n{jvm.log_tail(base / 'hdfs.log')}")
