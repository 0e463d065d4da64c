"""The job server's lifecycle: :func:`start` (resolves the runner's jars, writes the Flink conf dir,
launches ``BeamJobServer.java`` on free ports and waits until it is ready), and for a job server
running from a base dir, started by any process: :func:`status` and :func:`stop`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tfrecord_io.clusters import jvm
from tfrecord_io.clusters.flink.handle import LocalFlinkJobServer, accepts, server_handle
from tfrecord_io.clusters.flink.runners import (
    JOB_SERVER_PROCESS, LAUNCHERS, NEEDED_BY, FlinkLocalError, fetch_jars, runner_of,
)

__all__ = ["default_base_dir", "free_ports", "start", "status", "stop"]

_MIN_JAVA = 11  # Flink 1.19 runs on 11 and 17
_READY_LINE = "Job server now running"
_COMMON_JVM_OPTS = (
    "-Xmx1g", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
    "-Dorg.slf4j.simpleLogger.log.org.apache.beam.runners.fnexecution.artifact=warn",
)

# Flink runs a batch job without retries unless told; Beam 2.62's portable batch translation
# ignores --number_of_execution_retries, but applies a conf dir's restart strategy.
_FLINK_CONF = """\
# Written by tfrecord_io.clusters.flink: pass this directory as --flink_conf_dir.
restart-strategy.type: fixed-delay
restart-strategy.fixed-delay.attempts: 3
restart-strategy.fixed-delay.delay: 1 s
"""


def default_base_dir(runner: str = "flink") -> Path:
    """Where the CLI keeps its job server unless given ``--dir``: ``<cache_root>/<runner>-local``."""
    return jvm.cache_root() / f"{runner_of(runner).name}-local"


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (free when asked; the JVM binds them right after)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def status(base_dir: str | os.PathLike) -> LocalFlinkJobServer | None:
    """The job server running from ``base_dir`` (started by any process), or None."""
    base = Path(base_dir).resolve()
    state = jvm.read_state(base / "server.json")
    if state is None or not jvm.is_alive(int(state["pid"]), JOB_SERVER_PROCESS):
        return None
    return server_handle(base, state)


def stop(base_dir: str | os.PathLike, timeout: float = 60.0) -> bool:
    """Stop the job server running from ``base_dir``; False if none was running."""
    base = Path(base_dir).resolve()
    return jvm.stop_running(status(base), base / "server.json", timeout)


def start(base_dir: str | os.PathLike, *, timeout: float = 180.0, detach: bool = True,
          job_port: int = 0, runner: str = "flink") -> LocalFlinkJobServer:
    """Start a job server (Flink master ``[local]``; ``runner="spark"``: Spark ``local[2]``) in
    ``base_dir`` and wait until it is ready.

    Ready means it logged that it runs and its job port accepts connections.  ``job_port`` 0
    picks a free port.  With ``detach=True`` it outlives this process (stop it with
    :func:`stop`); with ``detach=False`` it also stops when this process exits, however it
    exits (the JVM watches a pipe from us).
    """
    base = Path(base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    spec = runner_of(runner)
    java = jvm.find_java(NEEDED_BY, FlinkLocalError, _MIN_JAVA)
    jars = fetch_jars(runner)
    with jvm.locked(base / ".lock"):
        jvm.starting(status(base), base / "server.json", lambda running: FlinkLocalError(
            f"a {running.runner} job server is already running from {base} at {running.job_endpoint} "
            f"(pid {running.pid}); stop it first"))
        (base / "conf").mkdir(exist_ok=True)
        (base / "conf" / "flink-conf.yaml").write_text(_FLINK_CONF)
        for sub in ("artifacts", "tmp"):
            shutil.rmtree(base / sub, ignore_errors=True)
            (base / sub).mkdir()
        ports = free_ports(3)
        if job_port:
            ports[0] = job_port
        log_path = base / "jobserver.log"
        env = {k: v for k, v in os.environ.items()
               if k not in ("JAVA_TOOL_OPTIONS", "FLINK_CONF_DIR", "SPARK_HOME", "SPARK_CONF_DIR")}
        env.update(spec.env)
        cmd = [java, *_COMMON_JVM_OPTS, *spec.jvm_opts, f"-Djava.io.tmpdir={base / 'tmp'}", "-cp", f"{jars}/*",
               str(LAUNCHERS / "BeamJobServer.java"), spec.main_class,
               *spec.master_args, "--job-host=127.0.0.1", f"--job-port={ports[0]}",
               f"--artifact-port={ports[1]}", f"--expansion-port={ports[2]}",
               f"--artifacts-dir={base / 'artifacts'}"]
        proc = jvm.launch(cmd, cwd=base, env=env, log_path=log_path, detach=detach, append=False)
        state = {"runner": spec.name, "pid": proc.pid, "job_port": ports[0], "artifact_port": ports[1],
                 "expansion_port": ports[2]}
        handle = server_handle(base, state, proc)
        try:
            _wait_ready(handle, proc, timeout)
        except BaseException:
            jvm.terminate(proc.pid, proc, 30, JOB_SERVER_PROCESS, FlinkLocalError)
            raise
        tmp = base / "server.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, base / "server.json")
    if detach:  # the handle must not own the process, or its stop/GC would take it down
        object.__setattr__(handle, "_proc", None)
    return handle


def _wait_ready(handle: LocalFlinkJobServer, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FlinkLocalError(f"the {handle.runner} job server exited with status {proc.returncode} while starting; last "
                                  f"lines of {handle.log_path}:\n{jvm.log_tail(handle.log_path)}")
        try:
            logged = _READY_LINE in handle.log_path.read_text(errors="replace")
        except FileNotFoundError:
            logged = False
        if logged and accepts(handle.job_endpoint):
            return
        time.sleep(0.25)
    raise TimeoutError(f"the {handle.runner} job server in {handle.base_dir} was not ready within {timeout:.0f}s; last lines "
                       f"of {handle.log_path}:\n{jvm.log_tail(handle.log_path)}")
