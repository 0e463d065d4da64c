"""Every conversion entry point, run as a user runs it: through a real shell, from the command line.

Issue #24 item 0: a README line with an unquoted glob (``--input data/trips/*.csv``) made the
shell pass the second file as a stray argument, which Beam only WARNed about, and the run
converted half the data with exit 0.  No entry point may let an argument it does not know pass.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from helpers import REPO, VENV_BIN, spark_conf_args

SCHEMA = "features:\n  - {name: id, type: int64}\n  - {name: x, type: float}\nlabel: id\n"

# (entry point, its command line up to the conversion's options, extra args after them).
BEAM = ["--runner=FnApiRunner"]
ENTRY_POINTS = {
    "python -m tfrecord_io.beam": [sys.executable, "-m", "tfrecord_io.beam", *BEAM],
    "python -m pipelines.to_tfrecord": [sys.executable, "-m", "pipelines.to_tfrecord", *BEAM],
    "tfrecord-io convert --engine beam": [str(VENV_BIN / "tfrecord-io"), "convert", "--engine", "beam",
                                          "--engine-arg=--runner=FnApiRunner"],
    "tfrecord-io convert --engine spark": [str(VENV_BIN / "tfrecord-io"), "convert", "--engine", "spark",
                                           "--master", "local[1]"],
    "spark-submit jobs/to_tfrecord.py": [str(VENV_BIN / "spark-submit"), "--master", "local[1]",
                                         *spark_conf_args(), str(REPO / "jobs" / "to_tfrecord.py")],
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("entry")
    (d / "trips").mkdir()
    (d / "trips" / "a.csv").write_text("id,x\n" + "".join(f"{i},{i / 2}\n" for i in range(10)))
    (d / "trips" / "b.csv").write_text("id,x\n" + "".join(f"{i},{i / 2}\n" for i in range(10, 25)))
    (d / "s.yaml").write_text(SCHEMA)
    return d


def _shell(line: str, cwd) -> subprocess.CompletedProcess:
    """``line`` run by bash, which expands its globs as a user's shell would."""
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(cwd),
           "PYSPARK_PYTHON": sys.executable, "TF_CPP_MIN_LOG_LEVEL": "3",
           **{k: os.environ[k] for k in ("SPARK_HOME",) if k in os.environ}}  # conftest's guard holds
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.mark.parametrize("entry", [pytest.param(e, marks=pytest.mark.spark) if "spark" in e else e
                                   for e in ENTRY_POINTS], ids=list(ENTRY_POINTS))
def test_an_unquoted_glob_fails_before_anything_runs(data, entry):
    out = data / f"out-{abs(hash(entry))}"
    line = (" ".join(shlex.quote(a) for a in ENTRY_POINTS[entry]) +
            f" --input trips/*.csv --format csv --schema s.yaml --output {shlex.quote(str(out))}")
    proc = _shell(line, data)
    assert proc.returncode == 2, f"{entry}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    said = proc.stdout + proc.stderr  # spark-submit relays the driver's stderr on its stdout
    errors = [ln for ln in said.splitlines() if "error:" in ln]
    assert errors and "trips/b.csv" in errors[-1], said[-4000:]
    assert not out.exists(), f"{entry} touched the output before refusing"
    assert "Traceback" not in said


@pytest.mark.parametrize("entry", ["python -m tfrecord_io.beam", "tfrecord-io convert --engine beam"])
def test_a_misspelled_option_fails_and_beams_own_options_pass(data, entry):
    out = data / f"typo-{abs(hash(entry))}"
    base = " ".join(shlex.quote(a) for a in ENTRY_POINTS[entry])
    common = f" --input 'trips/*.csv' --format csv --schema s.yaml --output {shlex.quote(str(out))}"
    typo = "--engine-arg=--num_shards=2" if "convert" in entry else "--num_shards=2"
    proc = _shell(base + common + " " + typo, data)
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "--num_shards=2" in [ln for ln in proc.stderr.splitlines() if "error:" in ln][-1]
    assert not out.exists()
    # Beam's own options (Python's, and a Java runner's that Python hands to a job server) pass;
    # the quoted glob reads both files.
    extra = ["--direct_num_workers=1", "--flink_conf_dir=/nonexistent"]
    own = " ".join(f"--engine-arg={a}" if "convert" in entry else a for a in extra)
    proc = _shell(base + common + " " + own, data)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "wrote 25 example records" in proc.stderr
