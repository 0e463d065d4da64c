"""Every conversion entry point, run as a user runs it: through a real shell, from the command line.

Issue #24 item 0: a README line with an unquoted glob (``--input data/trips/*.csv``) made the
shell pass the second file as a stray argument, which Beam only WARNed about, and the run
converted half the data with exit 0.  No entry point may let an argument it does not know pass.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
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

# What each one's error lines begin with: its own name, as its usage errors do (#32 item 7: the Beam
# pipeline's once said "tfrecord-io convert").  pipelines/to_tfrecord.py is the same command line.
ERROR_PREFIX = {
    "python -m tfrecord_io.beam": "python -m tfrecord_io.beam: error: ",
    "python -m pipelines.to_tfrecord": "python -m tfrecord_io.beam: error: ",
    "tfrecord-io convert --engine beam": "tfrecord-io convert: error: ",
    "tfrecord-io convert --engine spark": "tfrecord-io convert: error: ",
    "spark-submit jobs/to_tfrecord.py": "to_tfrecord.py: error: ",
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
           # conftest's guard holds (SPARK_HOME), and its quick JIT for Spark's JVMs (SPARK_SUBMIT_OPTS)
           **{k: os.environ[k] for k in ("SPARK_HOME", "SPARK_SUBMIT_OPTS") if k in os.environ}}
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
    assert errors[-1].startswith(ERROR_PREFIX[entry]), errors
    assert not out.exists(), f"{entry} touched the output before refusing"
    assert "Traceback" not in said


@pytest.mark.parametrize("entry", ["python -m tfrecord_io.beam"])  # (every entry point's name: the glob test)
def test_a_missing_input_or_schema_is_one_line_in_the_entry_points_own_name(data, entry):
    base = " ".join(shlex.quote(a) for a in ENTRY_POINTS[entry])
    for args, says in ((" --input nowhere.csv --schema s.yaml", r"input (\S*/)?nowhere\.csv does not exist"),
                       (" --input 'trips/*.csv' --schema none.yaml", r"schema file none\.yaml does not exist")):
        proc = _shell(base + args + " --format csv --output out-missing", data)
        assert proc.returncode == 2, proc.stderr[-4000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and re.fullmatch(re.escape(ERROR_PREFIX[entry]) + says, lines[0]), lines


@pytest.mark.parametrize("entry", ["python -m tfrecord_io.beam", "tfrecord-io convert --engine beam"])
def test_a_misspelled_option_fails_and_beams_own_options_pass(data, entry):
    out = data / f"typo-{abs(hash(entry))}"
    base = " ".join(shlex.quote(a) for a in ENTRY_POINTS[entry])
    common = f" --input 'trips/*.csv' --format csv --schema s.yaml --output {shlex.quote(str(out))}"
    typo = "--engine-arg=--num_shards=2" if "convert" in entry else "--num_shards=2"
    proc = _shell(base + common + " " + typo, data)
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "--num_shards=2" in [ln for ln in proc.stderr.splitlines() if "error:" in ln][-1]
    assert proc.stderr.rstrip("\n").splitlines()[-1].startswith(ERROR_PREFIX[entry]), proc.stderr[-2000:]
    assert not out.exists()
    # Beam's own options (Python's, and a Java runner's that Python hands to a job server) pass;
    # the quoted glob reads both files.
    extra = ["--direct_num_workers=1", "--flink_conf_dir=/nonexistent"]
    own = " ".join(f"--engine-arg={a}" if "convert" in entry else a for a in extra)
    proc = _shell(base + common + " " + own, data)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "wrote 25 example records" in proc.stderr


# ---------------------------------------------------------------------------------------------
# Issue #24 item 1: every option, through every entry point
# ---------------------------------------------------------------------------------------------
SESSIONS = """\
record_type: sequence_example
group_by: session_id
order_by: ts
context:
  - {name: session_id, type: string, required: true}
  - {name: country, type: string, default: "??", allow_missing: true}
sequence:
  - {name: ts, type: int64, required: true}
  - {name: price, type: float, default: 0.0}
"""
# (case, its options, input, schema, for the Spark job only, the summary it prints, what the output holds)
CASES = {
    "splits": (["--format", "csv", "--split", "train=2,eval=1", "--split-by", "id", "--compression", "gzip",
                "--compression-level", "1", "--num-shards", "2", "--record-order", "input", "--block-size", "65536",
                "--max-reject-fraction", "0.5"],
               "trips/", "s.yaml", False, r"wrote 24 example records in 4 files in splits train \(\d+\), eval \(\d+\); "
                                          r"1 of 25 input rows rejected",
               {"splits": ["train", "eval"], "totals": {"input_rows": 25, "records": 24, "rejected": 1}}),
    "sequences over a previous output": (
        ["--format", "json", "--record-type", "sequence_example", "--max-steps", "2", "--compression", "zlib",
         "--ignore-extra-columns", "--allow-missing-columns", "--overwrite"],
        "sessions.jsonl", "sessions.yaml", False,
        r"wrote 4 sequence_example records from 6 input rows in 1 files; 0 of 6 input rows rejected",
        {"record_type": "sequence_example", "totals": {"input_rows": 6, "records": 4, "rejected": 0,
                                                       "rows_in_records": 6}}),
    "a JSON array, multiline": (["--format", "json", "--multiline", "--shards", "even", "--max-record-bytes", "1m"],
                                "array.json", "s.yaml", False,
                                r"wrote 3 example records in 1 files; 0 of 3 input rows rejected",
                                {"totals": {"input_rows": 3, "records": 3, "rejected": 0}}),
    "partitioned by a feature": (["--format", "csv", "--partition-by", "id", "--max-reject-fraction", "0.5"],
                                 "trips/", "s.yaml", True,
                                 r"wrote 24 example records in \d+ files in 24 partitions by id; "
                                 r"1 of 25 input rows rejected",
                                 {"partition_by": [{"name": "id", "type": "int64"}],
                                  "totals": {"input_rows": 25, "records": 24, "rejected": 1}}),
    "parquet, a shard per split": (["--format", "parquet", "--shards", "input", "--umask", "027"], "trips.parquet",
                                   "s.yaml", True,
                                   r"wrote 5 example records in \d+ files; 0 of 5 input rows rejected",
                                   {"totals": {"input_rows": 5, "records": 5, "rejected": 0}}),
}
TABLE_ENTRY_POINTS = ["tfrecord-io convert --engine spark", "spark-submit jobs/to_tfrecord.py",
                      "tfrecord-io convert --engine beam", "python -m pipelines.to_tfrecord"]


@pytest.fixture(scope="module")
def inputs(data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (data / "trips" / "b.csv").write_text("id,x\n" + "".join(f"{i},{i / 2}\n" for i in range(10, 24)) + "oops,1\n")
    sessions = [{"session_id": "s1", "ts": t, "price": 1.5, "extra": 1} for t in (3, 1, 2)] + \
               [{"session_id": "s2", "ts": t, "country": "fr"} for t in (5, 4)] + [{"session_id": "s3", "ts": 1}]
    (data / "sessions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sessions))
    (data / "sessions.yaml").write_text(SESSIONS)
    (data / "array.json").write_text(json.dumps([{"id": i, "x": i * 1.5} for i in range(3)], indent=1))
    pq.write_table(pa.table({"id": pa.array(range(5), pa.int64()), "x": pa.array([0.5] * 5, pa.float32())}),
                   data / "trips.parquet")
    return data


def _entry_marks(entry: str):
    # Spark's need a JVM; Beam's are whole conversions of several seconds (make test runs them)
    return pytest.param(entry, marks=pytest.mark.spark if "spark" in entry else pytest.mark.slow)


@pytest.mark.parametrize("entry", [_entry_marks(e) for e in TABLE_ENTRY_POINTS], ids=TABLE_ENTRY_POINTS)
def test_every_option_through_every_entry_point(inputs, entry):
    """Each case's options through the real command line: the exit code, the one-line summary and
    the committed output.  Spark-only options make the Beam entry points exit 2 before they start."""
    out = inputs / f"out-{TABLE_ENTRY_POINTS.index(entry)}"
    for name, (options, source, schema, spark_only, summary, holds) in CASES.items():
        if "--overwrite" not in options and out.exists():
            shutil.rmtree(out)  # the case writes where nothing is
        line = (" ".join(shlex.quote(a) for a in ENTRY_POINTS[entry]) + " " +
                shlex.join(["--input", source, "--schema", schema, "--output", str(out), *options]))
        proc = _shell(line, inputs)
        said = proc.stdout + proc.stderr
        if spark_only and "spark" not in entry:
            assert proc.returncode == 2, f"{name}: {said[-3000:]}"
            assert "use the Spark job" in said, f"{name}: {said[-3000:]}"
            continue
        assert proc.returncode == 0, f"{entry}, {name}: exit {proc.returncode}\n{said[-4000:]}"
        assert re.search(summary, said), f"{entry}, {name}: no summary like {summary!r} in\n{said[-3000:]}"
        assert "Traceback" not in said, said[-3000:]
        manifest = json.loads((out / "_manifest.json").read_text())
        for key, value in holds.items():
            got = list(manifest[key]) if key == "splits" else manifest[key]
            assert got == value, f"{entry}, {name}: manifest {key} = {got!r}, expected {value!r}"
        done = json.loads([ln for ln in proc.stdout.splitlines() if '"tfrecord-io-done"' in ln][-1])
        assert done["totals"] == manifest["totals"]
        assert (out / "_SUCCESS").exists()
        if "--umask" in options:  # what the output may be read by: rw-r----- files in an rwxr-x--- directory
            import stat

            got = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [out, *out.iterdir()]}
            assert got == {**{n: 0o640 for n in got}, out.name: 0o750}, f"{entry}, {name}: modes {got}"
        if "--compression-level" in options:  # gzip's header says the level reached the writer (XFL 4: fastest)
            shard = sorted((out / "train").glob("part-*.gz"))[0].read_bytes()
            assert shard[:3] == b"\x1f\x8b\x08" and shard[8] == 4, f"{entry}, {name}: header {shard[:10]!r}"


def test_the_table_has_every_option():
    """A conversion option the table does not run fails here: no new option skips an entry point."""
    import argparse

    from tfrecord_io.conversion import options as opts

    parser = argparse.ArgumentParser()
    opts.add_arguments(parser)
    flags = {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"--help"}  # noqa: SLF001
    used = {a for case in CASES.values() for a in case[0] if a.startswith("--")} | {"--input", "--schema", "--output"}
    assert flags - used == set(), f"options no case of the table runs: {sorted(flags - used)}"


def test_the_stable_conversion_calls_carry_no_test_seam():
    """The tests' fault injection is reached through the engines' functions, never through the
    stable names users call (#32 item 5); tests.helpers.convert runs Beam through the stable name."""
    import inspect

    import tfrecord_io.beam
    import tfrecord_io.spark

    for fn in (tfrecord_io.spark.run_conversion, tfrecord_io.beam.run_conversion):
        assert "faults" not in inspect.signature(fn).parameters, fn
