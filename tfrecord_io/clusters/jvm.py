"""What every local cluster here shares: the cache directory, finding Java, and the JVM process.

``hdfs_local`` (HDFS, YARN) and ``flink`` (Beam job servers) each run a Java launcher of their
own in a background JVM, remembered in a state file (pid and ports) so that any process can find
and stop it.  The helpers take the caller's error class, so that each package raises its own
(``HdfsLocalError``, ``FlinkLocalError``) with a message saying what to install or look at.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["cache_root", "find_java", "is_alive", "launch", "locked", "log_tail", "read_state", "require", "starting",
           "stop_running", "terminate"]

MIN_JAVA = 17  # Hadoop 3.5's class files are Java 17 (major version 61); the launchers use its source mode


def cache_root() -> Path:
    """``$TFRECORD_IO_CACHE``, or ``~/.cache/tfrecord-io``: resolved jars and the CLI's clusters."""
    return Path(os.environ.get("TFRECORD_IO_CACHE") or Path.home() / ".cache" / "tfrecord-io")


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``path`` (created), e.g. so that two processes do not fetch jars at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def require(tool: str, install: str, needed_by: str, error: type[Exception]) -> str:
    """The path of ``tool`` on PATH; else ``error`` saying who needs it and what to install."""
    path = shutil.which(tool)
    if path is None:
        raise error(f"`{tool}` is not on PATH; {needed_by} needs it: install {install}")
    return path


def find_java(needed_by: str, error: type[Exception], min_major: int = MIN_JAVA) -> str:
    """The ``java`` on PATH, checked to be at least ``min_major``."""
    java = require("java", f"a Java {min_major}+ runtime (e.g. `apt-get install openjdk-17-jdk-headless`)",
                   needed_by, error)
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):  # "1.8.0_x"
        major = int(m.group(2))
    if major < min_major:
        raise error(f"{java} is Java {major or '?'}; {needed_by} needs Java {min_major}+ "
                    f"(e.g. `apt-get install openjdk-17-jdk-headless`)")
    return java


def is_alive(pid: int, marker: bytes) -> bool:
    """True if ``pid`` runs a command line holding ``marker`` (our launcher's name); reaps it
    first if it is our exited child, and guards against the pid having been reused."""
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
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False


def launch(cmd: list[str], *, cwd: Path, env: dict[str, str], log_path: Path, detach: bool,
           append: bool = True) -> subprocess.Popen:
    """Start a launcher's JVM in a session of its own, its output in ``log_path`` (added to it, or,
    without ``append``, replacing it).  ``detach``: it outlives this process; otherwise it gets
    ``--exit-on-stdin-eof`` and a pipe from us, and exits when this process does, however it exits."""
    if not detach:
        cmd = [*cmd, "--exit-on-stdin-eof"]
    with open(log_path, "ab" if append else "wb") as log:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL if detach else subprocess.PIPE, start_new_session=True)


def terminate(pid: int, proc: subprocess.Popen | None, timeout: float, marker: bytes,
              error: type[Exception]) -> None:
    """SIGTERM (a clean shutdown), then SIGKILL after ``timeout`` seconds; ``error`` if it survives."""
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
        if not is_alive(pid, marker):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while is_alive(pid, marker) and time.monotonic() < deadline:
            time.sleep(0.1)
    if is_alive(pid, marker):
        raise error(f"the local {marker.decode()} (pid {pid}) did not exit after SIGKILL")


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` of a JVM's log, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def read_state(path: Path) -> dict | None:
    """A launcher's state file (pid, ports), or None when there is none (or it is half written)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def stop_running(handle, state_file: Path, timeout: float) -> bool:
    """Stop a cluster found running (``handle``, what its ``status`` gave: None for none) and say
    whether one was; with none, a stale ``state_file`` goes."""
    if handle is None:
        with contextlib.suppress(FileNotFoundError):
            state_file.unlink()
        return False
    handle.stop(timeout)
    return True


def starting(running, state_file: Path, refusal) -> None:
    """Before a start, under the base dir's lock: raise ``refusal(running)`` when a cluster runs
    from it (``running``, what its ``status`` gave), else drop a stale ``state_file``."""
    if running is not None:
        raise refusal(running)
    with contextlib.suppress(FileNotFoundError):
        state_file.unlink()
