"""The local YARN's lifecycle, next to any running local HDFS: :func:`start_yarn` (a ResourceManager
and a NodeManager in a JVM of their own, Hadoop's ``MiniYARNCluster`` from ``MiniYarn.java``),
:func:`yarn_status`, :func:`stop_yarn`, and the :class:`LocalYarn` handle they give."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from tfrecord_io.clusters import jvm
from tfrecord_io.clusters.hdfs_local.hadoop import (
    LAUNCHERS, NEEDED_BY, YARN_JVM_OPTS, YARN_PROCESS, HdfsLocalError, fetch_jars,
)
from tfrecord_io.clusters.hdfs_local.handle import LocalHdfs
from tfrecord_io.clusters.hdfs_local.site_xml import write_yarn_conf

__all__ = ["YARN_MIN_ALLOCATION_MB", "YARN_NM_MEMORY_MB", "YARN_NM_VCORES", "LocalYarn", "start_yarn", "stop_yarn",
           "yarn_status"]

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
        return jvm.is_alive(self.pid, YARN_PROCESS) and (self.base_dir / "yarn.json").is_file()

    def stop(self, timeout: float = 60.0) -> None:
        """Shut YARN down (SIGTERM, then SIGKILL after ``timeout`` s).  Idempotent."""
        jvm.terminate(self.pid, self._proc, timeout, YARN_PROCESS, HdfsLocalError)
        with contextlib.suppress(FileNotFoundError):
            (self.base_dir / "yarn.json").unlink()


def _yarn_handle(base: Path, state: dict, conf_dir: Path,
                 proc: subprocess.Popen | None = None) -> LocalYarn:
    return LocalYarn(
        base_dir=base, rm_address=state["rm_address"], scheduler_address=state["scheduler_address"],
        conf_dir=conf_dir, work_dir=Path(state["work_dir"]), log_path=base / "yarn.log",
        pid=int(state["pid"]), nm_memory_mb=int(state["nm_memory_mb"]),
        nm_vcores=int(state["nm_vcores"]), principal=state.get("principal"), _proc=proc)


def yarn_status(base_dir: str | os.PathLike) -> LocalYarn | None:
    """The YARN running from ``base_dir`` (``<hdfs base>/yarn`` for ``start(yarn=True)``), or None."""
    base = Path(base_dir).resolve()
    state = jvm.read_state(base / "yarn.json")
    if state is None or not jvm.is_alive(int(state["pid"]), YARN_PROCESS):
        return None
    try:
        conf = Path(json.loads((base / "conf_dir.json").read_text())["conf_dir"])
    except (FileNotFoundError, ValueError, KeyError):
        conf = base / "conf"
    return _yarn_handle(base, state, conf)


def stop_yarn(base_dir: str | os.PathLike, timeout: float = 60.0) -> bool:
    """Stop the YARN running from ``base_dir``; False if none was running."""
    base = Path(base_dir).resolve()
    return jvm.stop_running(yarn_status(base), base / "yarn.json", timeout)


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
    java = jvm.find_java(NEEDED_BY, HdfsLocalError)
    jars = fetch_jars()
    with jvm.locked(base / ".lock"):
        jvm.starting(yarn_status(base), base / "yarn.json", lambda running: HdfsLocalError(
            f"a local YARN is already running from {base} (ResourceManager {running.rm_address}, pid "
            f"{running.pid}); stop it first"))
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
        cmd = [java, *YARN_JVM_OPTS, f"-Djava.io.tmpdir={base / 'tmp'}",
               *([k.java_option] if k else []),
               "-cp", classpath, str(LAUNCHERS / "MiniYarn.java"),
               "--base", str(base), "--default-fs", hdfs.namenode_uri,
               "--nm-memory-mb", str(nm_memory_mb), "--nm-vcores", str(nm_vcores),
               "--min-allocation-mb", str(min_allocation_mb)]
        if k:
            cmd += ["--kerberos", k.yarn_principal, str(k.service_keytab), str(k.krb5_conf)]
        proc = jvm.launch(cmd, cwd=base, env=env, log_path=log_path, detach=detach)
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
            write_yarn_conf(conf, state)
            handle = _yarn_handle(base, state, conf, proc)
        except BaseException:
            jvm.terminate(proc.pid, proc, 30, YARN_PROCESS, HdfsLocalError)
            raise
    if detach:
        object.__setattr__(handle, "_proc", None)
    return handle
