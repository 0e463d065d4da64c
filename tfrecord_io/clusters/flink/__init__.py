"""A Beam job server for Flink (or Spark) on 127.0.0.1, for tests and trying the Beam pipeline there.

The job server is Beam's own ``org.apache.beam.runners.flink.FlinkJobServerDriver`` from the
``beam-runners-flink-1.19`` 2.62.0 jars (Flink 1.19.0), which Maven resolves from Maven Central
into ``${TFRECORD_IO_CACHE:-~/.cache/tfrecord-io}/beam-flink-2.62.0/jars`` (see
:func:`fetch_jars`; about 150 MB).  With ``--flink-master=[local]`` it runs every submitted job on
a Flink MiniCluster inside its own JVM; the Python SDK (2.77) talks to it with the portable
runner.  Why the Java runner is 2.62.0 while the Python SDK is 2.77.0: docs/running-on-flink.md.
``runner="spark"`` does the same with ``org.apache.beam.runners.spark.SparkJobServerDriver``
(``beam-runners-spark-3`` 2.62.0 with Spark 3.5.1, ``local[2]``; about 300 MB, ``pom-spark.xml``).

:func:`fetch_jars` also writes ``beam-flink-job-server.jar`` (``beam-spark-job-server.jar``), a
jar with only a manifest that names the main class and the resolved jars (``Class-Path``):
Beam's own ``FlinkRunner`` (``SparkRunner``) starts it when given ``--flink_job_server_jar``
(``--spark_job_server_jar``), as it would the job-server jar Beam downloads itself.

Layout of a base dir::

    server.json   runner, pid + ports of the running job server (written once it is ready)
    conf/         a Flink conf dir for ``--flink_conf_dir``: failed tasks are retried
    artifacts/    artifacts the pipelines stage
    jobserver.log the JVM's output

:func:`start` returns a :class:`LocalFlinkJobServer`; :meth:`LocalFlinkJobServer.pipeline_args`
gives the Beam options that run a pipeline on it.  Beam's gRPC servers bind every interface
(``NettyServerBuilder.forPort``); the job server advertises and is used on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import time
import zipfile
from pathlib import Path

from tfrecord_io.clusters import jvm

__all__ = [
    "BEAM_RUNNER_VERSION", "FLINK_RUNNER_ARTIFACT", "FLINK_VERSION", "RUNNERS", "SPARK_VERSION", "FlinkLocalError",
    "LocalFlinkJobServer", "default_base_dir", "fetch_jars", "job_server_jar", "start", "status", "stop",
]

BEAM_RUNNER_VERSION = "2.62.0"          # Beam's Java runners, resolved by Maven (docs/running-on-flink.md)
FLINK_RUNNER_ARTIFACT = "beam-runners-flink-1.19"
FLINK_VERSION = "1.19.0"                # what beam-runners-flink-1.19:2.62.0 depends on
SPARK_VERSION = "3.5.1"                 # named in pom-spark.xml (the runner has Spark as "provided")
_HERE = Path(__file__).resolve().parent
_MIN_JAVA = 11  # Flink 1.19 runs on 11 and 17
_MARKER = b"BeamJobServer"  # our launcher, in the JVM's command line
_NEEDED_BY = "the local Beam job server"
_READY_LINE = "Job server now running"
_COMMON_JVM_OPTS = (
    "-Xmx1g", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
    "-Dorg.slf4j.simpleLogger.log.org.apache.beam.runners.fnexecution.artifact=warn",
)


@dataclasses.dataclass(frozen=True)
class _Runner:
    name: str
    artifact: str
    pom: str
    main_class: str
    master_args: tuple[str, ...]
    jvm_opts: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


RUNNERS = {
    "flink": _Runner(
        "flink", FLINK_RUNNER_ARTIFACT, "pom.xml", "org.apache.beam.runners.flink.FlinkJobServerDriver",
        ("--flink-master=[local]",),
        # Flink's MiniCluster says ~2,000 lines a job at INFO; keep the job's states and restarts.
        ("-Dorg.slf4j.simpleLogger.log.org.apache.flink=warn",
         "-Dorg.slf4j.simpleLogger.log.org.apache.pekko=warn",
         "-Dorg.slf4j.simpleLogger.log.org.apache.flink.runtime.executiongraph.ExecutionGraph=info",
         "-Dorg.slf4j.simpleLogger.log.org.apache.flink.runtime.jobmaster.JobMaster=info")),
    "spark": _Runner(
        "spark", "beam-runners-spark-3", "pom-spark.xml", "org.apache.beam.runners.spark.SparkJobServerDriver",
        ("--spark-master-url=local[2]",),
        # Spark 3.5 on Java 17 needs these (as spark-submit's launcher adds them).
        (*(f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in (
            "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
            "java.util.concurrent", "java.util.concurrent.atomic", "sun.nio.ch", "sun.nio.cs", "sun.security.action",
            "sun.util.calendar")),
         "-Dorg.slf4j.simpleLogger.log.org.apache.spark=warn",
         "-Dorg.slf4j.simpleLogger.log.org.sparkproject=warn",
         "-Dspark.ui.enabled=false"),
        env=(("SPARK_LOCAL_IP", "127.0.0.1"),)),
}


def _runner(name: str) -> _Runner:
    try:
        return RUNNERS[name]
    except KeyError:
        raise ValueError(f"unknown Beam runner {name!r}: one of {', '.join(RUNNERS)}") from None


# Flink runs a batch job without retries unless told; Beam 2.62's portable batch translation
# ignores --number_of_execution_retries, but applies a conf dir's restart strategy.
_FLINK_CONF = """\
# Written by tfrecord_io.clusters.flink: pass this directory as --flink_conf_dir.
restart-strategy.type: fixed-delay
restart-strategy.fixed-delay.attempts: 3
restart-strategy.fixed-delay.delay: 1 s
"""


class FlinkLocalError(RuntimeError):
    """The local Flink (or Spark) job server could not be set up, started or stopped (the message says why)."""


def default_base_dir(runner: str = "flink") -> Path:
    """Where the CLI keeps its job server unless given ``--dir``: ``<cache_root>/<runner>-local``."""
    return jvm.cache_root() / f"{_runner(runner).name}-local"


def _home(runner: str) -> Path:
    return jvm.cache_root() / f"beam-{_runner(runner).name}-{BEAM_RUNNER_VERSION}"


def _jars_dir(runner: str) -> Path:
    return _home(runner) / "jars"


def job_server_jar(runner: str = "flink") -> Path:
    """The manifest-only jar for ``--flink_job_server_jar`` / ``--spark_job_server_jar`` (after
    :func:`fetch_jars`)."""
    return _home(runner) / f"beam-{_runner(runner).name}-job-server.jar"


def _manifest(main_class: str, jars: list[str]) -> bytes:
    """A jar manifest naming ``main_class`` and ``jars`` (relative URLs), lines wrapped at 72 bytes."""
    def wrap(line: str) -> str:
        data = line.encode("utf-8")
        out, first = [], True
        while data:
            n = 72 if first else 71
            out.append((b"" if first else b" ") + data[:n])
            data, first = data[n:], False
        return "".join(part.decode("utf-8") + "\r\n" for part in out)

    return (wrap("Manifest-Version: 1.0") + wrap("Created-By: tfrecord-io") + wrap(f"Main-Class: {main_class}")
            + wrap("Class-Path: " + " ".join(jars)) + "\r\n").encode("utf-8")


def _write_job_server_jar(main_class: str, jars_dir: Path, target: Path) -> None:
    names = sorted(p.name for p in jars_dir.glob("*.jar"))
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/MANIFEST.MF", _manifest(main_class, [f"{jars_dir.name}/{n}" for n in names]))
    os.replace(tmp, target)


def fetch_jars(runner: str = "flink") -> Path:
    """Resolve the job server's jars with Maven into the cache (once) and return their directory.

    Also writes :func:`job_server_jar`.  Idempotent and safe to call from several processes at
    once.  Needs ``mvn`` and access to Maven Central (or a mirror in ``~/.m2/settings.xml``).
    """
    spec = _runner(runner)
    target = _jars_dir(runner)
    done = target / ".complete"
    if done.is_file() and job_server_jar(runner).is_file():
        return target
    with jvm.locked(target.parent / ".fetch.lock"):
        if not done.is_file():
            mvn = jvm.require("mvn", "Apache Maven 3 (e.g. `apt-get install maven`)", _NEEDED_BY, FlinkLocalError)
            import tempfile

            with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
                pom = Path(tmp) / "pom.xml"  # a copy, so Maven never writes next to the package
                shutil.copyfile(_HERE / spec.pom, pom)
                out = Path(tmp) / "jars"
                try:
                    run = subprocess.run(
                        [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={out}"],
                        capture_output=True, text=True, timeout=1800, cwd=tmp)
                except subprocess.TimeoutExpired as e:
                    raise FlinkLocalError(f"Maven did not resolve the Beam {runner} runner's jars within 30 "
                                          f"minutes") from e
                if run.returncode != 0 or not any(out.glob(f"{spec.artifact}-{BEAM_RUNNER_VERSION}.jar")):
                    tail = "\n".join((run.stdout + run.stderr).splitlines()[-30:])
                    raise FlinkLocalError(
                        f"Maven could not resolve org.apache.beam:{spec.artifact}:{BEAM_RUNNER_VERSION} "
                        f"and its dependencies (is Maven Central reachable?); `mvn dependency:copy-dependencies` "
                        f"said:\n{tail}")
                (out / ".complete").write_text(f"{spec.artifact} {BEAM_RUNNER_VERSION}\n")
                if target.exists():
                    shutil.rmtree(target)
                os.replace(out, target)
        _write_job_server_jar(spec.main_class, target, job_server_jar(runner))
    return target


@dataclasses.dataclass(frozen=True)
class LocalFlinkJobServer:
    """A running job server.  Picklable (the handle, not the process)."""

    base_dir: Path
    runner: str            # "flink" or "spark"
    job_endpoint: str      # "127.0.0.1:PORT": --job_endpoint for the PortableRunner
    artifact_port: int
    expansion_port: int
    conf_dir: Path         # --flink_conf_dir (retries failed tasks)
    log_path: Path
    pid: int
    _proc: subprocess.Popen | None = dataclasses.field(default=None, repr=False, compare=False)

    def __reduce__(self):
        fields = [getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "_proc"]
        return (LocalFlinkJobServer, tuple(fields))

    def pipeline_args(self, parallelism: int = 2) -> list[str]:
        """Beam options that run a pipeline on this job server's Flink (Spark: ``local[2]``),
        workers in this process."""
        args = ["--runner=PortableRunner", f"--job_endpoint={self.job_endpoint}", "--environment_type=LOOPBACK"]
        if self.runner == "flink":
            args += [f"--parallelism={parallelism}", f"--flink_conf_dir={self.conf_dir}"]
        return args

    def is_ready(self) -> bool:
        return jvm.is_alive(self.pid, _MARKER) and _accepts(self.job_endpoint)

    def jobs(self, timeout: float = 30.0) -> list[dict]:
        """The jobs the job server knows (``job_id``, ``job_name``, ``state``, ``options``); needs apache-beam."""
        import grpc
        from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

        channel = grpc.insecure_channel(self.job_endpoint)
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
            reply = beam_job_api_pb2_grpc.JobServiceStub(channel).GetJobs(
                beam_job_api_pb2.GetJobsRequest(), timeout=timeout)
        except grpc.FutureTimeoutError as e:
            raise FlinkLocalError(f"the job server at {self.job_endpoint} did not answer within {timeout:.0f}s") from e
        finally:
            channel.close()
        out = []
        for info in reply.job_info:
            options = {}
            for key, value in info.pipeline_options.fields.items():
                name = key[len("beam:option:"):-len(":v1")] if key.startswith("beam:option:") else key
                kind = value.WhichOneof("kind")
                options[name] = None if kind in (None, "null_value") else getattr(value, kind)
            out.append({"job_id": info.job_id, "job_name": info.job_name,
                        "state": beam_job_api_pb2.JobState.Enum.Name(info.state), "options": options})
        return out

    def stop(self, timeout: float = 60.0) -> None:
        """Shut the job server down (SIGTERM, then SIGKILL after ``timeout`` s).  Idempotent."""
        jvm.terminate(self.pid, self._proc, timeout, _MARKER, FlinkLocalError)
        with contextlib.suppress(FileNotFoundError):
            (self.base_dir / "server.json").unlink()


def _accepts(endpoint: str, timeout: float = 2.0) -> bool:
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def _free_ports(n: int) -> list[int]:
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


def _handle(base: Path, state: dict, proc: subprocess.Popen | None = None) -> LocalFlinkJobServer:
    return LocalFlinkJobServer(base_dir=base, runner=state.get("runner", "flink"),
                               job_endpoint=f"127.0.0.1:{state['job_port']}",
                               artifact_port=int(state["artifact_port"]), expansion_port=int(state["expansion_port"]),
                               conf_dir=base / "conf", log_path=base / "jobserver.log", pid=int(state["pid"]),
                               _proc=proc)


def status(base_dir: str | os.PathLike) -> LocalFlinkJobServer | None:
    """The job server running from ``base_dir`` (started by any process), or None."""
    base = Path(base_dir).resolve()
    state = jvm.read_state(base / "server.json")
    if state is None or not jvm.is_alive(int(state["pid"]), _MARKER):
        return None
    return _handle(base, state)


def stop(base_dir: str | os.PathLike, timeout: float = 60.0) -> bool:
    """Stop the job server running from ``base_dir``; False if none was running."""
    base = Path(base_dir).resolve()
    handle = status(base)
    if handle is None:
        with contextlib.suppress(FileNotFoundError):
            (base / "server.json").unlink()
        return False
    handle.stop(timeout)
    return True


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
    spec = _runner(runner)
    java = jvm.find_java(_NEEDED_BY, FlinkLocalError, _MIN_JAVA)
    jars = fetch_jars(runner)
    with jvm.locked(base / ".lock"):
        running = status(base)
        if running is not None:
            raise FlinkLocalError(f"a {running.runner} job server is already running from {base} at {running.job_endpoint} "
                                  f"(pid {running.pid}); stop it first")
        with contextlib.suppress(FileNotFoundError):
            (base / "server.json").unlink()
        (base / "conf").mkdir(exist_ok=True)
        (base / "conf" / "flink-conf.yaml").write_text(_FLINK_CONF)
        for sub in ("artifacts", "tmp"):
            shutil.rmtree(base / sub, ignore_errors=True)
            (base / sub).mkdir()
        ports = _free_ports(3)
        if job_port:
            ports[0] = job_port
        log_path = base / "jobserver.log"
        env = {k: v for k, v in os.environ.items()
               if k not in ("JAVA_TOOL_OPTIONS", "FLINK_CONF_DIR", "SPARK_HOME", "SPARK_CONF_DIR")}
        env.update(spec.env)
        cmd = [java, *_COMMON_JVM_OPTS, *spec.jvm_opts, f"-Djava.io.tmpdir={base / 'tmp'}", "-cp", f"{jars}/*",
               str(_HERE / "BeamJobServer.java"), spec.main_class,
               *spec.master_args, "--job-host=127.0.0.1", f"--job-port={ports[0]}",
               f"--artifact-port={ports[1]}", f"--expansion-port={ports[2]}",
               f"--artifacts-dir={base / 'artifacts'}"]
        proc = jvm.launch(cmd, cwd=base, env=env, log_path=log_path, detach=detach, append=False)
        state = {"runner": spec.name, "pid": proc.pid, "job_port": ports[0], "artifact_port": ports[1],
                 "expansion_port": ports[2]}
        handle = _handle(base, state, proc)
        try:
            _wait_ready(handle, proc, timeout)
        except BaseException:
            jvm.terminate(proc.pid, proc, 30, _MARKER, FlinkLocalError)
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
        if logged and _accepts(handle.job_endpoint):
            return
        time.sleep(0.25)
    raise TimeoutError(f"the {handle.runner} job server in {handle.base_dir} was not ready within {timeout:.0f}s; last lines "
                       f"of {handle.log_path}:\n{jvm.log_tail(handle.log_path)}")
