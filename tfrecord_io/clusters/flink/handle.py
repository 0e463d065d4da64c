"""The handle of a running job server (:class:`LocalFlinkJobServer`, as ``server.json`` describes
it) and what it asks the job server: whether it is ready (alive, its job port accepting), the jobs
it knows (Beam's job API), and its stop."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import subprocess
from pathlib import Path

from tfrecord_io.clusters import jvm
from tfrecord_io.clusters.flink.runners import JOB_SERVER_PROCESS, FlinkLocalError

__all__ = ["LocalFlinkJobServer", "accepts", "server_handle"]


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
        return jvm.is_alive(self.pid, JOB_SERVER_PROCESS) and accepts(self.job_endpoint)

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
        jvm.terminate(self.pid, self._proc, timeout, JOB_SERVER_PROCESS, FlinkLocalError)
        with contextlib.suppress(FileNotFoundError):
            (self.base_dir / "server.json").unlink()


def accepts(endpoint: str, timeout: float = 2.0) -> bool:
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def server_handle(base: Path, state: dict, proc: subprocess.Popen | None = None) -> LocalFlinkJobServer:
    return LocalFlinkJobServer(base_dir=base, runner=state.get("runner", "flink"),
                               job_endpoint=f"127.0.0.1:{state['job_port']}",
                               artifact_port=int(state["artifact_port"]), expansion_port=int(state["expansion_port"]),
                               conf_dir=base / "conf", log_path=base / "jobserver.log", pid=int(state["pid"]),
                               _proc=proc)
