"""Plain output (#32 item 6): the loader, ``keras_inputs`` and ``BackupAndRestore`` import TensorFlow
without its start-up lines (oneDNN, CUDA stubs, "failed call to cuInit" on a machine without a GPU)
where the user set no log level; a level the user set is theirs.  Real TensorFlow in a fresh
interpreter each time: what a user's script prints on stderr."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tfrecord_io.commands.demo_train import make_demo_output

SCRIPT = """
import tfrecord_io
ds = tfrecord_io.make_dataset({out!r}, batch_size=50, prefetch_to_device=False)
print(sum(int(x["trip_seconds"].shape[0]) for x, y in ds))
ds = tfrecord_io.make_dataset({out!r}, batch_size=50, shuffle_buffer=700, prefetch_to_device=False)
print(sum(int(x["trip_seconds"].shape[0]) for x, y in ds))
inputs = tfrecord_io.keras_inputs({out!r}, task="binary")
print(type(tfrecord_io.BackupAndRestore).__name__)
"""


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("quiet") / "out")
    # 9,000 records in a file: more than one 8,192-record read chunk, whose 1,024-record slices the
    # shuffle's windows were cut from -- where TensorFlow once printed an E-line for each window.
    make_demo_output(path, rows=9000, shards=1)
    return path


def _run(out: str, script: str = SCRIPT, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-c", script.format(out=out)], capture_output=True, text=True,
                          timeout=300, env={**clean, **env})


@pytest.mark.slow  # a fresh interpreter starts TensorFlow and trains: several seconds
def test_the_loader_keras_inputs_and_backups_print_nothing_of_tensorflows_start(out):
    proc = _run(out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["9000", "9000", "type"]
    noise = [ln for ln in proc.stderr.splitlines() if "keras_inputs" not in ln and "task" not in ln]
    assert noise == [], "\n".join(noise)


@pytest.mark.slow
def test_a_log_level_the_user_set_is_theirs(out):
    proc = _run(out, "import tfrecord_io; tfrecord_io.make_dataset({out!r}, batch_size=50)", TF_CPP_MIN_LOG_LEVEL="0")
    assert proc.returncode == 0, proc.stderr
    assert "oneDNN" in proc.stderr or "cuda" in proc.stderr.lower(), proc.stderr[-2000:]
