"""Cost that grows as the work grows: the Spark job, the Beam pipeline and the loader at 1M, 4M
and 16M rows, and the small-file case (10,000 files of 100 rows against the same rows in one file).

    .venv/bin/python benchmarks/bench_scaling.py [--sizes 1,4,16] [--small-files 10000] [--workdir DIR]
        [--skip spark,loader,beam-small-files] [--repeat 3] [--baseline DIR] [--flink]

Beam alone, before (``--baseline``: a checkout of the code to compare, e.g. ``git worktree add
/tmp/base main`` -- with its compiled core copied in) and after, in one run::

    .venv/bin/python benchmarks/bench_scaling.py --skip spark,loader,beam-small-files --baseline /tmp/base

Data: files of 1,000,000 rows x 17 columns each (``bench_spark.make_csv``: 10 float, 5 int64, 1
string, 1 int64 label; 148 MB a file, a different seed each); a size of N million rows is the first
N files.  Local disk, each measurement in its own process, one after the other:

* **Spark**: ``spark-submit --master local[2] bench_spark.py ours-job --repeat 2`` (what
  ``jobs/to_tfrecord.py`` runs, default even shards); the *warm* (second) job's time, so the JVM
  start does not flatter the small sizes.  Peak memory is the highest resident set (``VmHWM``)
  seen of the driver JVM and of any one Python worker, polled from ``/proc`` every 0.2 s.
* **Beam**: ``run_conversion`` on the FnApiRunner (which the table confirms ran), in a process of
  its own; the runner executes bundles in that process, so driver and worker are one peak: the
  highest ``VmHWM`` of that process and any child of it, polled from ``/proc``, and its own
  ``ru_maxrss`` and its children's (the larger).  ``--flink``: the same on Beam's Flink job server
  (``tfrecord_io.clusters.flink``, Flink ``[local]``, parallelism 2, ``LOOPBACK`` SDK workers in the
  submitting process), started afresh for each size so that the job server JVM's ``VmHWM`` is that
  size's: both peaks are reported.
* **Loader**: ``make_dataset`` over the Spark output of that size, one epoch, batch 1024, in a
  process of its own; its peak resident set.

Per size: seconds per million rows, and each one's ratio to the 1M figure (the target: within
15%, i.e. <= 1.15x); peak memory per size (the target: flat).  Then the small files: the same 1M
rows as 10,000 files of 100 rows against one file, for each engine (``--shards input`` on Spark
too, since that is the layout whose shard count follows the input), Beam writing 10,000 shards
against 1 (``--num-shards``), and ``make_dataset`` over those 10,000 shards against the 1: times,
ratios (target within 3x), shards written, and the manifest's size.  The Beam runs of 1 against
10,000 shards alternate ``--repeat`` times; the table gives each one's median (and every time).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, os.environ.get("BENCH_SCALING_CODE", str(REPO)))  # --baseline: the code measured
sys.path.insert(0, str(BENCH))

from bench_spark import make_csv, schema_text  # noqa: E402

VENV_BIN = Path(sys.executable).parent
ROWS_PER_FILE = 1_000_000


# ---------------------------------------------------------------------------------------------
# Peak memory of a process tree, from /proc
# ---------------------------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (the JVM starts Spark's Python daemon from a thread
    other than its main one: the main thread's list alone misses the Python workers)."""
    out = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _hwm_mb(pid: int) -> tuple[str, float] | None:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return cmd, int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class TreePeaks:
    """Polls a process tree: the peak resident set of the JVM and of any one Python worker."""

    def __init__(self, pid: int):
        self.pid, self.jvm, self.worker, self.driver = pid, 0.0, 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            for p in _tree(self.pid):
                got = _hwm_mb(p)
                if got is None:
                    continue
                cmd, mb = got
                if "java" in cmd.split(" ", 1)[0]:
                    self.jvm = max(self.jvm, mb)
                elif "pyspark.daemon" in cmd or "pyspark/daemon" in cmd or "worker" in cmd:
                    self.worker = max(self.worker, mb)
                elif "python" in cmd:
                    self.driver = max(self.driver, mb)
            self._stop.wait(0.2)

    def stop(self):
        self._stop.set()
        self._thread.join()


def _run(cmd: list[str], env: dict | None = None) -> tuple[dict, float, TreePeaks]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable, "TF_CPP_MIN_LOG_LEVEL": "3",
                **(env or {})}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, cwd=REPO)
    peaks = TreePeaks(proc.pid)
    out, err = proc.communicate()
    peaks.stop()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        log = "\n".join(ln for ln in err.splitlines() if " INFO " not in ln)
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{log[-6000:]}")
    lines = [ln for ln in out.splitlines() if ln.startswith('{"event"')]
    return json.loads(lines[-1]), wall, peaks


# ---------------------------------------------------------------------------------------------
# The measurements
# ---------------------------------------------------------------------------------------------
def spark_job(inputs: str, schema: str, out: str, rows: int, extra: list[str] = ()) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(VENV_BIN / "spark-submit"), "--master", "local[2]", "--driver-memory", "2g",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
           str(BENCH / "bench_spark.py"), "ours-job", "--input", inputs, "--schema", schema, "--output", out,
           *extra]
    summary, _, peaks = _run(cmd)
    if any(r != rows for r in summary["records"]):
        raise SystemExit(f"spark wrote {summary['records']} records, expected {rows}")
    return {"seconds": summary["runs"][-1], "jvm_mb": peaks.jvm, "worker_mb": peaks.worker,
            "files": summary["files"], "tasks": summary.get("tasks")}


def beam_job(inputs: str, schema: str, out: str, rows: int, num_shards: int | None = None, *,
             code: Path = REPO, beam_args: list[str] = ()) -> dict:
    """One conversion in a process of its own, with the code at ``code`` (default: this checkout)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, __file__, "beam-one", inputs, schema, out, str(num_shards or 0), *beam_args]
    summary, wall, peaks = _run(cmd, env={"PYTHONPATH": str(code), "BENCH_SCALING_CODE": str(code)})
    want = "PortableRunner" if beam_args else "FnApiRunner"
    if summary["records"] != rows or not summary["runner"].startswith(want):
        raise SystemExit(f"beam: {summary}, expected {rows} records on the {want}")
    return {"seconds": summary["seconds"], "peak_mb": max(summary["peak_mb"], peaks.driver, peaks.worker),
            "runner": summary["runner"], "manifest_bytes": summary["manifest_bytes"], "wall": wall,
            "load": os.getloadavg()[0]}


def beam_one(argv: list[str]) -> int:
    inputs, schema, out, shards = argv[0], argv[1], argv[2], int(argv[3])
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.engines import beam as tbeam

    conv = tbeam.ConversionOptions(inputs=inputs, input_format="csv", schema=schema, output=out,
                                   **({"num_shards": shards} if shards else {}))
    started = time.monotonic()
    result = tbeam.run_conversion(conv, PipelineOptions(argv[4:] or ["--runner=DirectRunner"]))
    seconds = time.monotonic() - started
    manifest = json.loads(Path(out, "_manifest.json").read_text())
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print(json.dumps({"event": "done", "seconds": seconds, "records": manifest["totals"]["records"],
                      "runner": result.runner, "peak_mb": peak / 1024,
                      "manifest_bytes": Path(out, "_manifest.json").stat().st_size}))
    return 0


def flink_job(work: Path, inputs: str, schema: str, out: str, rows: int) -> dict:
    """``beam_job`` on a Flink job server started for this run alone: its JVM's peak too."""
    from tfrecord_io.clusters import flink as flink_local

    server = flink_local.start(work / "flink-server", detach=False)
    try:
        r = beam_job(inputs, schema, out, rows, beam_args=[*server.pipeline_args(parallelism=2),
                                                           f"--job_name=bench-scaling-{rows}"])
        got = _hwm_mb(server.pid)
        r["jvm_mb"] = got[1] if got else float("nan")
    finally:
        server.stop()
    return r


def loader(source: str, rows: int) -> dict:
    summary, _, _ = _run([sys.executable, __file__, "loader-one", source])
    if summary["rows"] != rows:
        raise SystemExit(f"loader read {summary['rows']} rows of {source}, expected {rows}")
    return summary


def loader_one(argv: list[str]) -> int:
    import tensorflow as tf  # noqa: F401  (its import is not the loader's time)

    from tfrecord_io.engines.loader import make_dataset

    started = time.monotonic()
    ds = make_dataset(argv[0], batch_size=1024, num_epochs=1)
    first = None
    rows = 0
    for _features, label in ds:
        if first is None:
            first = time.monotonic() - started
        rows += int(label.shape[0])
    print(json.dumps({"event": "done", "rows": rows, "seconds": time.monotonic() - started, "first_batch_s": first,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    return 0


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------
def _write_small_files(one: Path, into: Path, n: int) -> None:
    """``one`` (a CSV with a header) cut into ``n`` CSV files of equal row counts, each with the header."""
    into.mkdir(parents=True, exist_ok=True)
    with open(one) as f:
        header = f.readline()
        lines = f.readlines()
    per = -(-len(lines) // n)
    for i in range(n):
        with open(into / f"part-{i:05d}.csv", "w") as out:
            out.write(header)
            out.writelines(lines[i * per:(i + 1) * per])


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["beam-one"]:
        return beam_one(argv[1:])
    if argv[:1] == ["loader-one"]:
        return loader_one(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,4,16", help="millions of rows (default 1,4,16)")
    ap.add_argument("--small-files", type=int, default=10_000, help="files for the small-file case (0: skip)")
    ap.add_argument("--skip", default="", help="comma-separated: spark, beam, loader, scaling (the 1M-16M table), "
                                               "beam-small-files (Beam on the 10,000 files: only 1 vs 10,000 shards)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side of Beam's 1 vs 10,000 shards")
    ap.add_argument("--baseline", default=None, help="a checkout of the code to measure Beam's runs against too")
    ap.add_argument("--flink", action="store_true", help="the Beam runs on a local Flink job server too")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    skip = set(args.skip.split(",")) - {""}
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-scaling-"))
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    schema = work / "schema.yaml"
    schema.write_text(schema_text())
    for i in range(max(sizes)):
        path = data / f"rows-{i:02d}.csv"
        if not path.exists():
            print(f"writing {path}", file=sys.stderr, flush=True)
            make_csv(path, ROWS_PER_FILE, seed=i)

    results: dict[int, dict] = {}
    if "scaling" not in skip:
        for n in sizes:
            files = ",".join(str(data / f"rows-{i:02d}.csv") for i in range(n))
            rows = n * ROWS_PER_FILE
            r: dict = {}
            if "spark" not in skip or "loader" not in skip:
                r["spark"] = spark_job(files, str(schema), str(work / f"spark-{n}m"), rows)
            if "beam" not in skip:
                r["beam"] = beam_job(files, str(schema), str(work / f"beam-{n}m"), rows)
                if args.baseline:
                    r["beam (baseline)"] = beam_job(files, str(schema), str(work / f"beam-{n}m"), rows,
                                                    code=Path(args.baseline).resolve())
            if args.flink:
                r["beam on flink"] = flink_job(work, files, str(schema), str(work / f"flink-{n}m"), rows)
            if "loader" not in skip:
                r["loader"] = loader(str(work / f"spark-{n}m" / "run-1"), rows)
            results[n] = r
            print(f"  {n}M: {json.dumps(r)}", file=sys.stderr, flush=True)
        print(scaling_table(results, sizes))

    if args.small_files:
        print(small_files(work, data / "rows-00.csv", args.small_files, str(schema), skip, args.repeat,
                          Path(args.baseline).resolve() if args.baseline else None))
    print(f"\nworkdir: {work}", file=sys.stderr)
    return 0


def scaling_table(results: dict, sizes: list[int]) -> str:
    base = results[sizes[0]]
    out = ["| engine | rows | s per 1M rows | vs 1M | peak memory (MB) |", "| --- | ---: | ---: | ---: | --- |"]
    for engine in ("spark", "beam", "beam (baseline)", "beam on flink", "loader"):
        if engine not in base:
            continue
        per0 = base[engine]["seconds"] / sizes[0]
        for n in sizes:
            r = results[n][engine]
            per = r["seconds"] / n
            mem = (f"driver JVM {r['jvm_mb']:.0f}, Python worker {r['worker_mb']:.0f}" if engine == "spark"
                   else f"job server JVM {r['jvm_mb']:.0f}, Python (submitter + LOOPBACK workers) {r['peak_mb']:.0f}"
                   if engine == "beam on flink"
                   else f"{r['peak_mb']:.0f} (in-process runner: driver + worker; load {r['load']:.1f})"
                   if engine.startswith("beam") else f"{r['peak_mb']:.0f}")
            out.append(f"| {engine} | {n}M | {per:.2f} | {_ratio(per, per0)} | {mem} |")
    return "\n".join(out)


def _alternated(repeat: int, *runs):
    """Each of ``runs`` (callables) ``repeat`` times, in turn: [[results of the first], [of the second], ...]."""
    got = [[] for _ in runs]
    for _ in range(max(1, repeat)):
        for k, run in enumerate(runs):
            got[k].append(run())
    return got


def _median(results: list[dict]) -> dict:
    ranked = sorted(results, key=lambda r: r["seconds"])
    return {**ranked[len(ranked) // 2], "all": [round(r["seconds"], 2) for r in results]}


def small_files(work: Path, one: Path, n: int, schema: str, skip: set = frozenset(), repeat: int = 3,
                baseline: Path | None = None) -> str:
    """The small-file table: the engines ``skip`` does not name."""
    small = work / f"small-{n}"
    if not small.exists():
        print(f"writing {n} small files", file=sys.stderr, flush=True)
        _write_small_files(one, small, n)
    rows = ROWS_PER_FILE
    out = [f"| case | 1 file (s) | {n:,} files (s) | **ratio** | notes |", "| --- | ---: | ---: | ---: | --- |"]
    if "spark" not in skip:
        for label, extra in (("`--shards input`", ["--shards", "input"]), ("default even shards", [])):
            spark_one = spark_job(str(one), schema, str(work / "sf-spark-one"), rows, extra)
            spark_many = spark_job(str(small), schema, str(work / "sf-spark-many"), rows, extra)
            out.append(f"| Spark job, {label} (warm) | {spark_one['seconds']:.1f} | {spark_many['seconds']:.1f} | "
                       f"**{_ratio(spark_many['seconds'], spark_one['seconds'])}** | {spark_many['files']} shards "
                       f"written from {n:,} files |")
    if "beam" not in skip:
        if "beam-small-files" not in skip:
            beam_one_ = beam_job(str(one), schema, str(work / "sf-beam-one"), rows)
            beam_many = beam_job(str(small), schema, str(work / "sf-beam-many"), rows)
            out.append(f"| Beam pipeline (FnApiRunner) | {beam_one_['seconds']:.1f} | {beam_many['seconds']:.1f} | "
                       f"**{_ratio(beam_many['seconds'], beam_one_['seconds'])}** | default shards |")
        for label, code in (("", REPO), (" (baseline)", baseline)):
            if code is None:
                continue
            runs = _alternated(repeat if not label else 1,
                               lambda: beam_job(str(one), schema, str(work / "sf-beam-1-shard"), rows, num_shards=1,
                                                code=code),
                               lambda: beam_job(str(one), schema, str(work / "sf-beam-n-shards"), rows, num_shards=n,
                                                code=code))
            beam_1, beam_n = _median(runs[0]), _median(runs[1])
            out.append(f"| Beam pipeline{label} writing 1 vs {n:,} shards (1 input file) | {beam_1['seconds']:.1f} | "
                       f"{beam_n['seconds']:.1f} | **{_ratio(beam_n['seconds'], beam_1['seconds'])}** | medians of "
                       f"{beam_1['all']} and {beam_n['all']} s; peak {beam_1['peak_mb']:.0f} / {beam_n['peak_mb']:.0f} "
                       f"MB; load {beam_1['load']:.1f}; manifest {beam_n['manifest_bytes']:,} bytes for {n:,} shards |")
        if "loader" not in skip:
            ones, manys = _alternated(repeat, lambda: loader(str(work / "sf-beam-1-shard"), rows),
                                      lambda: loader(str(work / "sf-beam-n-shards"), rows))
            load_one, load_many = _median(ones), _median(manys)
            out.append(f"| `make_dataset`, 1 shard vs {n:,} shards | {load_one['seconds']:.1f} | "
                       f"{load_many['seconds']:.1f} | **{_ratio(load_many['seconds'], load_one['seconds'])}** | "
                       f"medians of {load_one['all']} and {load_many['all']} s; first batch "
                       f"{load_one['first_batch_s']:.2f} s vs {load_many['first_batch_s']:.2f} s |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
