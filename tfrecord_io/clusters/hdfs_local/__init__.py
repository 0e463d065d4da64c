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
    conf/          generated HADOOP_CONF_DIR (core-site.xml, hdfs-site.xml)
    data/          NameNode and DataNode storage (emptied by every start)
    hdfs.log       the JVM's output

:func:`start` returns a :class:`LocalHdfs` handle; :func:`status` and :func:`stop` find a running
cluster from any process through ``cluster.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time
from html import escape
from pathlib import Path

__all__ = [
    "HADOOP_VERSION", "HDFS_DEFAULT_BLOCK_SIZE", "TEST_BLOCK_SIZE", "HdfsLocalError", "LocalHdfs",
    "cache_root", "default_base_dir", "fetch_jars", "start", "status", "stop",
]

HADOOP_VERSION = "3.5.0"
_HERE = Path(__file__).resolve().parent
_MIN_JAVA = 17  # Hadoop 3.5 class files are Java 17 (major version 61)
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


class HdfsLocalError(RuntimeError):
    """The local HDFS could not be set up, started or stopped (the message says why)."""


def cache_root() -> Path:
    """``$TFRECORD_IO_CACHE``, or ``~/.cache/tfrecord-io``."""
    return Path(os.environ.get("TFRECORD_IO_CACHE") or Path.home() / ".cache" / "tfrecord-io")


def default_base_dir() -> Path:
    """Where the CLI keeps its cluster unless given ``--dir``: ``<cache_root>/hdfs-local``."""
    return cache_root() / "hdfs-local"


def _jars_dir() -> Path:
    return cache_root() / f"hadoop-{HADOOP_VERSION}" / "jars"


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _require(tool: str, install: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise HdfsLocalError(f"`{tool}` is not on PATH; the local HDFS needs it: install {install}")
    return path


def _java() -> str:
    java = _require("java", f"a Java {_MIN_JAVA}+ runtime (e.g. `apt-get install "
                            "openjdk-17-jdk-headless`)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):  # "1.8.0_x"
        major = int(m.group(2))
    if major < _MIN_JAVA:
        raise HdfsLocalError(f"{java} is Java {major or '?'}; Hadoop {HADOOP_VERSION} needs Java "
                             f"{_MIN_JAVA}+ (e.g. `apt-get install openjdk-17-jdk-headless`)")
    return java


def fetch_jars() -> Path:
    """Resolve the Hadoop jars with Maven into the cache (once) and return their directory.

    Idempotent and safe to call from several processes at once.  Needs ``mvn`` and access to Maven
    Central (or a mirror configured in ``~/.m2/settings.xml``).
    """
    target = _jars_dir()
    done = target / ".complete"
    if done.is_file():
        return target
    mvn = _require("mvn", "Apache Maven 3 (e.g. `apt-get install maven`)")
    with _locked(target.parent / ".fetch.lock"):
        if done.is_file():
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
            (out / ".complete").write_text(f"hadoop {HADOOP_VERSION}\n")
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
        return _is_alive(self.pid) and _jmx_ready(self.webhdfs_url)

    def stop(self, timeout: float = 60.0) -> None:
        """Shut the cluster down (SIGTERM, then SIGKILL after ``timeout`` s).  Idempotent."""
        _terminate(self.pid, self._proc, timeout)
        with contextlib.suppress(FileNotFoundError):
            (self.base_dir / "cluster.json").unlink()


def _is_alive(pid: int) -> bool:
    """True if ``pid`` runs our launcher (reaps it first if it is our exited child)."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if not Path("/proc/self").exists():
        return True  # no procfs: trust kill(0)
    try:  # guards against the pid having been reused by another program
        return b"MiniHdfs" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False


def _terminate(pid: int, proc: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM (a clean MiniDFSCluster shutdown), then SIGKILL after ``timeout`` seconds."""
    if proc is not None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        if proc.stdin:
            proc.stdin.close()
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 30.0)):
        if not _is_alive(pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while _is_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    if _is_alive(pid):
        raise HdfsLocalError(f"the local HDFS (pid {pid}) did not exit after SIGKILL")


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


def _read_state(base: Path) -> dict | None:
    try:
        return json.loads((base / "cluster.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


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
        body = "".join(f"  <property><name>{escape(k, False)}</name>"
                       f"<value>{escape(v, False)}</value></property>\n" for k, v in props.items())
        tmp = h.conf_dir / (name + ".tmp")
        tmp.write_text(f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')
        os.replace(tmp, h.conf_dir / name)


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def status(base_dir: str | os.PathLike) -> LocalHdfs | None:
    """The cluster running from ``base_dir`` (started by any process), or None."""
    base = Path(base_dir).resolve()
    state = _read_state(base)
    if state is None or not _is_alive(int(state["pid"])):
        return None
    return _handle(base, state)


def stop(base_dir: str | os.PathLike, timeout: float = 60.0) -> bool:
    """Stop the cluster running from ``base_dir``; False if none was running."""
    base = Path(base_dir).resolve()
    handle = status(base)
    if handle is None:
        with contextlib.suppress(FileNotFoundError):
            (base / "cluster.json").unlink()  # stale
        return False
    handle.stop(timeout)
    return True


def start(base_dir: str | os.PathLike, *, port: int = 0, http_port: int = 0,
          timeout: float = 180.0, detach: bool = True,
          block_size: int = TEST_BLOCK_SIZE) -> LocalHdfs:
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
    """
    if (not isinstance(block_size, int) or isinstance(block_size, bool)
            or block_size < TEST_BLOCK_SIZE or block_size % 512):
        raise ValueError(f"block_size must be a whole number of bytes, at least {TEST_BLOCK_SIZE} "
                         f"(HDFS's minimum) and a multiple of 512 (its checksum chunk); got "
                         f"{block_size!r}")
    base = Path(base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    java = _java()
    jars = fetch_jars()
    with _locked(base / ".lock"):
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
        except BaseException:
            _terminate(proc.pid, proc, 30)
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
                                 f"{_log_tail(base / 'hdfs.log')}")
        state = _read_state(base)
        if state is not None and state.get("pid") == proc.pid:
            handle = _handle(base, state, proc)
            if _jmx_ready(handle.webhdfs_url):
                return handle
        time.sleep(0.25)
    raise TimeoutError(f"the local HDFS in {base} was not ready within {timeout:.0f}s; last lines "
                       f"of {base / 'hdfs.log'}:\n{_log_tail(base / 'hdfs.log')}")
