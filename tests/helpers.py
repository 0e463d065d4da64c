"""What the test modules share: the rig that runs the real things, the inputs they convert and the
readers that check the outputs.

* the rig: :func:`spark_submit`, :func:`tfrecord_io_cli` (the installed command), :func:`convert` (an
  engine in this process), :func:`spark_conf` (the settings of every Spark the suite starts);
* TFRecords read back: :data:`TF_COMPRESSION` / :func:`tf_compression` (TensorFlow's names),
  :func:`output_records`, :func:`serialized_records`, :func:`rejects_of`, :func:`read_back`;
* files others wrote: :func:`write_tfx_shards` (TFX's ExampleGen shards, by TensorFlow's writer);
* inputs: the Beam tests' example CSV (:data:`EXAMPLE_SCHEMA`, :func:`example_rows`,
  :func:`write_example_csv`) and sessions (:data:`SESSIONS_SCHEMA`, :func:`session_lines`); the Spark
  tests' corpus (:data:`CORPUS`, :data:`CORPUS_SCHEMA`, :func:`corpus_rows`, :func:`write_corpus_csv`,
  :func:`expected_values`, :func:`corpus_table`);
* Hypothesis: :func:`examples`, a property's ``max_examples`` in the tier that runs it.

Fixtures live in ``conftest.py`` and ``cluster_fixtures.py``; this module defines none.
"""

from __future__ import annotations

import collections
import csv
import json
import os
import random
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path

from tfrecord_io.core.framing import read_records
from tfrecord_io.core.schema import Schema
from tfrecord_io.engines.loader import parse_spec
from tfrecord_io.storage import fs, output
from tfrecord_io.storage.schema_io import load_schema


REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
JOB = str(REPO / "jobs" / "to_tfrecord.py")
CORPUS = REPO / "tests" / "data" / "bad_corpus"
CORPUS_SCHEMA = CORPUS / "schema.yaml"
FNAPI = ["--runner=FnApiRunner"]


# ---------------------------------------------------------------------------------------------
# The rig
# ---------------------------------------------------------------------------------------------
#: The JIT setting of the JVMs the suite's Spark starts: the quick compiler (C1) only, as the local
#: clusters run (tfrecord_io.clusters.hdfs_local.hadoop.JVM_OPTS).  For jobs of seconds on 2 cores the
#: optimizing compiler's threads cost more CPU than they save (a spark-submit of 3,000 rows: about
#: 15 s of CPU, 9 s with C1 only).  tests/conftest.py puts it in SPARK_SUBMIT_OPTS (the drivers);
#: :func:`spark_conf` gives it to executors.  It changes how fast the JVM runs, nothing it does.
QUICK_JVM = "-XX:TieredStopAtLevel=1"


#: The Hypothesis profile of the fast tier (``make check``, ``-m "... not slow"``; tests/conftest.py
#: loads it): each property runs :data:`CHECK_SHARE` of its examples there, all of them in ``make test``.
CHECK_PROFILE = "check"
CHECK_SHARE = 4


def examples(n: int) -> int:
    """``max_examples`` for a property that runs ``n`` examples in the whole suite: ``n //
    CHECK_SHARE`` (at least 5) in the fast tier, whose every property still runs on each commit;
    ``make test`` (and ``--hypothesis-profile=default``) runs all ``n``."""
    from hypothesis import settings

    return max(5, n // CHECK_SHARE) if settings.get_current_profile_name() == CHECK_PROFILE else n


def spark_conf() -> dict[str, str]:
    """The Spark settings of every session and spark-submit the suite starts."""
    return {
        "spark.executor.extraJavaOptions": QUICK_JVM,  # standalone executors (local mode: the driver's JVM)
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.memory": "2g",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    }


def spark_conf_args(conf: dict[str, str] | None = None) -> list[str]:
    """``--conf KEY=VALUE`` arguments for spark-submit: the suite's settings, then ``conf``."""
    return [a for k, v in {**spark_conf(), **(conf or {})}.items() for a in ("--conf", f"{k}={v}")]


def spark_submit(args: list[str], *, master: str = "local[2]", conf: dict[str, str] | None = None,
                 env: dict[str, str] | None = None, timeout: float = 600, check: bool = True,
                 extra: list[str] = ()) -> subprocess.CompletedProcess:
    """Run ``spark-submit`` (pyspark's own) as a subprocess, as a user would, and return the result."""
    cmd = [str(VENV_BIN / "spark-submit"), "--master", master, *spark_conf_args(conf), *extra, *args]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"spark-submit failed ({proc.returncode}): {' '.join(cmd)}\n"
                             f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}")
    return proc


def tfrecord_io_cli(*args: str, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run the installed ``tfrecord-io`` command as a user would (TF quiet, no progress bar forced)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TFRECORD_IO_PROGRESS", None)
    proc = subprocess.run([str(VENV_BIN / "tfrecord-io"), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"tfrecord-io {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def convert(engine: str, spark, inp: str, fmt: str, schema: str, out: str, **kw) -> dict:
    """Run one engine in this process; return the manifest (raises what the engine raises)."""
    if engine == "spark":
        from tfrecord_io.engines.spark import ConversionOptions, run_conversion

        return run_conversion(spark, ConversionOptions(inputs=inp, input_format=fmt, schema=schema, output=out,
                                                       max_reject_fraction=1.0, **kw))
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io import beam  # the stable name a user calls

    conv = beam.ConversionOptions(inputs=inp, input_format=fmt, schema=schema, output=out, max_reject_fraction=1.0,
                                  **kw)
    result = beam.run_conversion(conv, PipelineOptions(["--runner=FnApiRunner"]))
    assert result.runner == "FnApiRunner", result.runner
    return result.manifest


def make_executor_python(tmp_path: Path) -> str:
    """A Python for executors with the venv's libraries but *not* its editable tfrecord_io install.

    A venv whose site-packages holds one .pth line naming the main venv's site-packages: that
    directory joins sys.path, but its own .pth files (the editable install's finder) do not run.
    """
    env_dir = tmp_path / "executor-venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip",
                    str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "main-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([str(python), "-c", "import importlib.util, pyarrow, pyspark; "
                            "print(importlib.util.find_spec('tfrecord_io'))"],
                           capture_output=True, text=True, cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    assert probe.stdout.strip() == "None", probe
    return str(python)


# ---------------------------------------------------------------------------------------------
# TFRecords read back
# ---------------------------------------------------------------------------------------------
TF_COMPRESSION = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}  # ours -> TensorFlow's compression_type


def tf_compression(path: str) -> str:
    """TensorFlow's compression_type for a TFRecord file, from its name."""
    return "GZIP" if path.endswith(".gz") else "ZLIB" if path.endswith(".zlib") else ""


def output_records(out: str) -> collections.Counter:
    """The multiset of serialized records of a committed output (files from its manifest)."""
    manifest = output.read_manifest(out)
    got = collections.Counter()
    for f in manifest["files"]:
        with fs.open(fs.join(out, f["path"]), "rb") as stream:
            got.update(read_records(stream, compression=manifest["compression"]))
    return got


def serialized_records(files: list) -> Counter:
    """The multiset of serialized records of local TFRecord files, read by TensorFlow."""
    import tensorflow as tf

    c: Counter = Counter()
    for f in files:
        c.update(r.numpy() for r in tf.data.TFRecordDataset(str(f), compression_type=tf_compression(str(f))))
    return c


def rejects_of(out: str) -> list[dict]:
    """Every reject of an output (local or hdfs://), in file order."""
    rows = []
    if fs.exists(fs.join(out, output.REJECTS)):
        for f in fs.ls(fs.join(out, output.REJECTS)):
            with fs.open(f, "rb") as fh:
                rows += [json.loads(line) for line in fh.read().decode().splitlines()]
    return rows


def read_back(files: list, schema_path: Path = CORPUS_SCHEMA) -> dict[int, tuple]:
    """Parse TFRecord files with TensorFlow's own reader and parse_example."""
    import tensorflow as tf

    spec = parse_spec(load_schema(str(schema_path)))
    out: dict[int, tuple] = {}
    for f in files:
        name = str(f)
        for batch in tf.data.TFRecordDataset(name, compression_type=tf_compression(name)).batch(1024):
            p = tf.io.parse_example(batch, spec)
            for i, score, nm, tags, vec in zip(p["id"].numpy(), p["score"].numpy(), p["name"].numpy(),
                                               p["tags"].to_list(), p["vec"].numpy()):
                if int(i) in out:
                    raise AssertionError(f"id {i} appears twice in {files}")
                out[int(i)] = (float(score), nm.decode(), [t.decode() for t in tags], [float(v) for v in vec])
    return out


def listing(out: Path) -> set[str]:
    """Every file under a local directory, relative to it."""
    return {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}


def shard_names(n: int, ext: str = "") -> set[str]:
    """The shard file names of an output of ``n`` shards."""
    return {f"part-{i:05d}-of-{n:05d}.tfrecord{ext}" for i in range(n)}


# ---------------------------------------------------------------------------------------------
# Files others wrote: TFX's ExampleGen shards, by TensorFlow's own writer
# ---------------------------------------------------------------------------------------------
def write_tfx_shards(directory: Path, shards: list[list[dict]], compression: str = "GZIP") -> Path:
    """Shards as TFX's ExampleGen writes them, by TensorFlow's own writer: gz, no manifest; a value
    None is an empty ``Feature`` (no kind set), as ExampleGen writes an empty cell."""
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    for k, records in enumerate(shards):
        path = directory / f"data_tfrecord-{k:05d}-of-{len(shards):05d}.gz"
        with tf.io.TFRecordWriter(str(path), options=compression) as w:
            for record in records:
                feats = {}
                for name, v in record.items():
                    if v is None:
                        feats[name] = tf.train.Feature()
                    elif isinstance(v, int):
                        feats[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                    elif isinstance(v, float):
                        feats[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                    else:
                        feats[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
                w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return directory


# ---------------------------------------------------------------------------------------------
# Inputs: the Beam tests' example CSV and sessions
# ---------------------------------------------------------------------------------------------
EXAMPLE_SCHEMA = Schema.from_dict({
    "features": [
        {"name": "id", "type": "int64", "required": True},
        {"name": "fare", "type": "float", "default": 0.0},
        {"name": "miles", "type": "float", "default": -1.0},
        {"name": "city", "type": "string", "default": "?"},
        {"name": "note", "type": "bytes", "default": ""},
        {"name": "scores", "type": "float", "shape": [-1], "separator": "|"},
        {"name": "dims", "type": "int64", "shape": [3], "separator": ";", "default": [0, 0, 0]},
        {"name": "label", "type": "int64", "required": True},
    ],
    "label": "label",
})

SESSIONS_SCHEMA = load_schema(str(REPO / "conf" / "sessions.yaml"))


def example_rows(n: int, seed: int = 0, bad_every: int = 0, newlines: bool = False) -> list[str]:
    """CSV lines (no header) with quoting, nulls, embedded newlines when ``newlines`` (read those with
    multiline); every ``bad_every``-th row bad."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if bad_every and i % bad_every == bad_every - 1:
            out.append(rng.choice([f"{i},notanumber,1,x,y,1,1;2;3,0",  # unparseable float
                                   f"{i},1.5,2.5,x",                    # too few fields
                                   f"{i},1.5,2.5,x,y,1|2,1;2,1",        # [3] list with 2 values
                                   ",1.5,2.5,x,y,1|2,1;2;3,1"]))       # required id missing
            continue
        city = rng.choice(["Berlin", '"Paris, FR"', '"New\nYork"' if newlines else "Rome", '"say ""hi"""', ""])
        scores = "|".join(f"{rng.uniform(-1, 1):.4f}" for _ in range(rng.randrange(0, 4)))
        fare = "" if i % 17 == 0 else f"{rng.uniform(0, 100):.3f}"
        out.append(f"{i},{fare},{rng.uniform(0, 30):.2f},{city},n{i},{scores},"
                   f"{i};{i + 1};{i + 2},{i % 2}")
    return out


def write_example_csv(path: Path, lines: list[str], header: bool = True) -> Path:
    """``lines`` of :func:`example_rows` as a CSV file (with the header of :data:`EXAMPLE_SCHEMA`)."""
    head = "id,fare,miles,city,note,scores,dims,label\n" if header else ""
    path.write_text(head + "".join(line + "\n" for line in lines))
    return path


def session_lines(n_sessions: int, seed: int = 0) -> list[str]:
    """JSON Lines of click sessions, steps shuffled across the file."""
    rng = random.Random(seed)
    rows = []
    for s in range(n_sessions):
        country = rng.choice(["de", "fr", None])
        for t in rng.sample(range(100), rng.randrange(1, 6)):
            row = {"session_id": f"s{s:04d}", "ts": t, "item": f"i{rng.randrange(50)}",
                   "price": round(rng.uniform(1, 9), 2), "tags": rng.sample(["a", "b", "c"], rng.randrange(0, 3))}
            if country:
                row["country"] = country
            rows.append(json.dumps(row))
    rng.shuffle(rows)
    return rows


# ---------------------------------------------------------------------------------------------
# Inputs: the Spark tests' corpus (tests/data/bad_corpus)
# ---------------------------------------------------------------------------------------------
def corpus_rows(n: int, start: int = 0) -> list[dict]:
    """Rows for the corpus schema, with values that survive float32 exactly."""
    rows = []
    for i in range(start, start + n):
        rows.append({
            "id": i,
            "score": None if i % 7 == 0 else (i % 1000) * 0.25 - 100.0,
            "name": None if i % 11 == 0 else f"name {i}, \"quoted\" é{i % 13}",
            "tags": [f"t{j}" for j in range(i % 4)] or None,
            "vec": [float(i % 50), -0.5 * (i % 9)],
        })
    return rows


def write_corpus_csv(path: Path, rows: list[dict], extra_lines: tuple[str, ...] = ()) -> None:
    """:func:`corpus_rows` as a CSV file of the corpus schema, then ``extra_lines`` as they are."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "score", "name", "tags", "vec"])
        for r in rows:
            w.writerow([r["id"], "" if r["score"] is None else repr(r["score"]),
                        "" if r["name"] is None else r["name"],
                        "|".join(r["tags"] or []), ";".join(repr(v) for v in r["vec"])])
        for line in extra_lines:
            f.write(line + "\n")


def expected_values(rows: list[dict]) -> dict[int, tuple]:
    """What the loader yields for each row: nulls become the schema defaults."""
    return {r["id"]: (r["score"] if r["score"] is not None else 0.0, r["name"] or "", r["tags"] or [], r["vec"])
            for r in rows}


def corpus_table(section: str) -> dict[str, dict]:
    """The expected counts table of one section of tests/data/bad_corpus/README.md."""
    text = (CORPUS / "README.md").read_text()
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in body.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        table[cells[0].strip("`*")] = dict(zip(header, cells))
    return table
