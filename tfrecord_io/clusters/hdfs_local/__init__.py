"""A real single-node HDFS (a NameNode + a DataNode) on 127.0.0.1, for tests and trying things out.

The cluster is Apache Hadoop's own ``MiniDFSCluster`` from the 3.5.0 jars, which Maven resolves
from Maven Central into ``${TFRECORD_IO_CACHE:-~/.cache/tfrecord-io}/hadoop-3.5.0/jars`` (see
:func:`fetch_jars`).  ``MiniHdfs.java`` is run with Java's single-file source mode, so there is
no build step: a fresh machine needs only ``java`` (17+) and ``mvn``.

The cluster listens on loopback only, serves both native RPC (``hdfs://127.0.0.1:PORT``) and
WebHDFS (``http://127.0.0.1:PORT``), enforces permissions (the superuser is the OS user that
started it), uses replication 1 and by default 1 MiB blocks (so multi-MB test files span several
blocks; ``block_size=HDFS_DEFAULT_BLOCK_SIZE`` gives HDFS's own 128 MiB, as the loader benchmark
does).

Layout of a base dir::

    cluster.json   pid + ports of the running cluster (written by the JVM once it is up)
    conf/          generated HADOOP_CONF_DIR (core-site.xml, hdfs-site.xml; yarn-site.xml with YARN)
    data/          NameNode and DataNode storage (emptied by every start)
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
from html import escape
from pathlib import Path

from tfrecord_io.clusters import jvm

__all__ = [
    "HADOOP_VERSION", "HDFS_DEFAULT_BLOCK_SIZE", "TEST_BLOCK_SIZE", "HdfsLocalError", "LocalHdfs",
    "LocalYarn", "default_base_dir", "fetch_jars", "start", "start_yarn", "status",
    "stop", "stop_yarn", "yarn_status",
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
# The YARN JVM (ResourceManager + NodeManager; containers are processes of their own).
_YARN_JVM_OPTS = ("-Xmx768m", *_JVM_OPTS[1:])


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
class LocalHdfs:
    """A running local cluster.  Picklable (the handle, not the process)."""

    base_dir: Path
    namenode_uri: str   # "hdfs://127.0.0.1:PORT"
    webhdfs_url: str    # "http://127.0.0.1:PORT"
    conf_dir: Path      # a HADOOP_CONF_DIR for Spark, Beam and hdfs-native
    user: str           # the HDFS superuser (the OS user that started the cluster)
    log_path: Path
    pid: int
    _proc: subprocess.Popen | None = dataclasses.field(default=None, repr=False, compare=False)

    def __reduce__(self):
        fields = [getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "_proc"]
        return (LocalHdfs, tuple(fields))

    def uri(self, path: str = "/") -> str:
        """``hdfs://127.0.0.1:PORT/path`` for an absolute HDFS path."""
        return self.namenode_uri + "/" + path.lstrip("/")

    def is_ready(self) -> bool:
        """NameNode out of safe mode with at least one live DataNode (asks its JMX)."""
        return jvm.is_alive(self.pid, _HDFS) and _jmx_ready(self.webhdfs_url)

    def stop(self, timeout: float = 60.0) -> None:
        """Shut the cluster down (SIGTERM, then SIGKILL after ``timeout`` s).  Idempotent."""
        jvm.terminate(self.pid, self._proc, timeout, _HDFS, HdfsLocalError)
        with contextlib.suppress(FileNotFoundError):
            (self.base_dir / "cluster.json").unlink()


def _jmx_ready(webhdfs_url: str) -> bool:
    import urllib.request

    query = "/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState"
    try:
        with urllib.request.urlopen(webhdfs_url + query, timeout=5) as r:
            beans = json.load(r).get("beans") or [{}]
    except (OSError, ValueError):
        return False
    state = beans[0]
    return state.get("FSState") == "Operational" and state.get("NumLiveDataNodes", 0) >= 1


def _handle(base: Path, state: dict, proc: subprocess.Popen | None = None) -> LocalHdfs:
    return LocalHdfs(
        base_dir=base,
        namenode_uri=f"hdfs://127.0.0.1:{state['port']}",
        webhdfs_url=f"http://127.0.0.1:{state['http_port']}",
        conf_dir=base / "conf",
        user=state["user"],
        log_path=base / "hdfs.log",
        pid=int(state["pid"]),
        _proc=proc,
    )


def _write_xml(conf_dir: Path, name: str, props: dict[str, str]) -> None:
    body = "".join(f"  <property><name>{escape(k, False)}</name>"
                   f"<value>{escape(v, False)}</value></property>\n" for k, v in props.items())
    tmp = conf_dir / (name + ".tmp")
    tmp.write_text(f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')
    os.replace(tmp, conf_dir / name)


def _write_conf(h: LocalHdfs, block_size: int) -> None:
    port = h.namenode_uri.rsplit(":", 1)[1]
    http = h.webhdfs_url.rsplit(":", 1)[1]
    files = {
        "core-site.xml": {
            "fs.defaultFS": h.namenode_uri,
            # Fail fast instead of retrying for minutes when the cluster is gone.
            "ipc.client.connect.max.retries": "3",
            "ipc.client.connect.timeout": "10000",
        },
        "hdfs-site.xml": {
            "dfs.namenode.rpc-address": f"127.0.0.1:{port}",
            "dfs.namenode.http-address": f"127.0.0.1:{http}",
            "dfs.webhdfs.enabled": "true",
            "dfs.replication": "1",
            "dfs.blocksize": str(block_size),
            "dfs.client.use.datanode.hostname": "false",
        },
    }
    h.conf_dir.mkdir(parents=True, exist_ok=True)
    for name, props in files.items():
        _write_xml(h.conf_dir, name, props)


def status(base_dir: str | os.PathLike) -> LocalHdfs | None:
    """The cluster running from ``base_dir`` (started by any process), or None."""
    base = Path(base_dir).resolve()
    state = jvm.read_state(base / "cluster.json")
    if state is None or not jvm.is_alive(int(state["pid"]), _HDFS):
        return None
    return _handle(base, state)


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


def start(base_dir: str | os.PathLike, *, port: int = 0, http_port: int = 0,
          timeout: float = 180.0, detach: bool = True,
          block_size: int = TEST_BLOCK_SIZE, yarn: bool = False) -> LocalHdfs:
    """Start a cluster in ``base_dir`` and wait until it is ready.

    ``port`` / ``http_port`` of 0 let the OS pick free ports.  With ``detach=True`` the cluster
    outlives this process (stop it with :func:`stop`); with ``detach=False`` it also stops when
    this process exits, however it exits (the JVM watches a pipe from us).  Ready means the
    NameNode reports itself out of safe mode with at least one live DataNode.  The filesystem
    starts empty: data from an earlier start in the same ``base_dir`` is discarded.

    ``block_size`` is the cluster's ``dfs.blocksize``, which files written without their own
    block size get: by default :data:`TEST_BLOCK_SIZE` (1 MiB, so tests cross block boundaries);
    :data:`HDFS_DEFAULT_BLOCK_SIZE` (128 MiB) is what a production cluster uses unless told
    otherwise, and costs its DataNode half the CPU per byte read (one request per block).

    ``yarn=True`` also starts a local YARN on this HDFS (:func:`start_yarn`, from
    ``base_dir/yarn``, its ``yarn-site.xml`` in the same conf dir); :func:`yarn_status` on
    ``base_dir/yarn`` finds it, and :func:`stop` stops both.
    """
    if (not isinstance(block_size, int) or isinstance(block_size, bool)
            or block_size < TEST_BLOCK_SIZE or block_size % 512):
        raise ValueError(f"block_size must be a whole number of bytes, at least {TEST_BLOCK_SIZE} "
                         f"(HDFS's minimum) and a multiple of 512 (its checksum chunk); got "
                         f"{block_size!r}")
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
        shutil.rmtree(base / "data", ignore_errors=True)  # every start is a fresh filesystem
        log_path = base / "hdfs.log"
        env = {k: v for k, v in os.environ.items()
               if k not in ("HADOOP_USER_NAME", "HADOOP_PROXY_USER", "HADOOP_CONF_DIR",
                            "HADOOP_TOKEN_FILE_LOCATION", "JAVA_TOOL_OPTIONS")}
        (base / "tmp").mkdir(exist_ok=True)  # also the JVM's (Jetty's) temp dir
        cmd = [java, *_JVM_OPTS, f"-Djava.io.tmpdir={base / 'tmp'}",
               "-cp", f"{jars}/*", str(_HERE / "MiniHdfs.java"),
               "--base", str(base), "--port", str(port), "--http-port", str(http_port),
               "--block-size", str(block_size)]
        if not detach:
            cmd.append("--exit-on-stdin-eof")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                cmd, cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL if detach else subprocess.PIPE, start_new_session=True)
        try:
            handle = _wait_ready(base, proc, timeout)
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
            if _jmx_ready(handle.webhdfs_url):
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
        nm_vcores=int(state["nm_vcores"]), _proc=proc)


def _write_yarn_conf(conf_dir: Path, state: dict) -> None:
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
        cmd = [java, *_YARN_JVM_OPTS, f"-Djava.io.tmpdir={base / 'tmp'}",
               "-cp", f"{jars}/*", str(_HERE / "MiniYarn.java"),
               "--base", str(base), "--default-fs", hdfs.namenode_uri,
               "--nm-memory-mb", str(nm_memory_mb), "--nm-vcores", str(nm_vcores),
               "--min-allocation-mb", str(min_allocation_mb)]
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
