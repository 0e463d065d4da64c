"""stats: numbers against a direct numpy computation, TensorBoard's own readers, the HTML report, HDFS."""

from __future__ import annotations

import base64
import glob
import json
import math
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from helpers import tfrecord_io_cli
from tfrecord_io.storage import fs, output
from tfrecord_io.core.codec import encode_examples
from tfrecord_io.commands.reading import resolve_source
from tfrecord_io.core.schema import Schema
from tfrecord_io.commands.stats import compute_stats, stats_to_dict
from tfrecord_io.core.sketches import (
    EXACT_LIMIT, INTEGER_BARS, QUANTILES, SKETCH_ALPHA, TOP_CAPACITY, NumericSummary, StringSummary,
)
from tfrecord_io.commands.report import format_number, write_summaries


SCHEMA = Schema.from_dict({"features": [
    {"name": "fare", "type": "float", "default": 0.0},
    {"name": "n", "type": "int64", "required": True},
    {"name": "tags", "type": "string", "shape": [-1]},
    {"name": "emb", "type": "float", "shape": [3]},
    {"name": "city", "type": "string", "default": ""},
    {"name": "x", "type": "float", "shape": [-1]},
]})
CITIES = ["nyc", "sf", "zürich", "la", "<b>o&slo</script>"]  # the last one must be escaped in HTML


def cli(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return tfrecord_io_cli(*args, check=check, **kw)


def part(n: int, seed: int) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    x = [list(map(float, rng.exponential(2.0, k).astype(np.float32))) for k in rng.integers(0, 5, n)]
    x[0] = [float("nan"), float("inf"), 1.0]
    return {
        "fare": rng.normal(10, 3, n).astype(np.float32).tolist(),
        "n": rng.integers(-50, 1000, n).tolist(),
        "tags": [[f"t{j}" for j in range(k)] for k in rng.integers(0, 4, n)],
        "emb": [rng.normal(size=3).astype(np.float32).tolist() for _ in range(n)],
        "city": [CITIES[k] if k < len(CITIES) else None for k in rng.choice(6, n, p=[.3, .25, .2, .1, .05, .1])],
        "x": x,
    }


def write_output(base: str, parts: list[dict], compression: str = "gzip") -> None:
    arrow = pa.schema([SCHEMA.arrow_schema().field(f.name) for f in SCHEMA.features])
    output.write_output(base, [[encode_examples(pa.RecordBatch.from_pydict(cols, schema=arrow), SCHEMA)]
                               for cols in parts], schema=SCHEMA, compression=compression, engine="test")


def column(parts: list[dict], name: str) -> list:
    return [v for p in parts for v in p[name]]


def flat(values: list) -> np.ndarray:
    return np.asarray([v for vs in values for v in vs], dtype=np.float64)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[str, list[dict]]:
    base = str(tmp_path_factory.mktemp("stats") / "out")
    parts = [part(400, s) for s in range(3)]
    write_output(base, parts)
    return base, parts


def by_tag(info: dict) -> dict:
    return {e["tag"]: e for e in info["features"]}


def check_numeric(summary: dict, values: np.ndarray, integer: bool = False) -> None:
    """A summary of <= EXACT_LIMIT values against numpy: everything exact."""
    finite = values[np.isfinite(values)]
    assert summary["count"] == values.size
    assert summary["nan"] == np.isnan(values).sum()
    assert summary["posinf"] == np.isposinf(values).sum() and summary["neginf"] == np.isneginf(values).sum()
    assert summary["finite"] == finite.size and summary["exact"]
    assert summary["min"] == finite.min() and summary["max"] == finite.max()
    assert summary["mean"] == pytest.approx(finite.mean(), rel=1e-12, abs=1e-12)
    assert summary["std"] == pytest.approx(finite.std(), rel=1e-9, abs=1e-12)
    for q in QUANTILES:
        assert summary["quantiles"][f"p{round(q * 100)}"] == np.quantile(finite, q, method="lower")
    edges = np.asarray(summary["histogram"]["edges"])
    if (integer or summary["integer"]) and finite.max() - finite.min() + 1 <= INTEGER_BARS:  # a bar per value
        np.testing.assert_array_equal(edges, np.arange(finite.min(), finite.max() + 2) - 0.5)
    elif finite.min() != finite.max():
        assert len(edges) == 31 and edges[0] == finite.min() and edges[-1] == finite.max()
    counts, _ = np.histogram(finite, bins=edges)
    assert summary["histogram"]["counts"] == counts.tolist()


def check_source_stats(info: dict, parts: list[dict]) -> None:
    t = by_tag(info)
    records = sum(len(p["n"]) for p in parts)
    assert info["records"] == records and info["record_type"] == "example"
    assert [f["tag"] for f in info["features"]] == [f.name for f in SCHEMA.features]  # schema order

    fare = np.asarray(column(parts, "fare"), dtype=np.float32).astype(np.float64)
    assert t["fare"]["present"] == records and t["fare"]["missing"] == 0
    check_numeric(t["fare"]["numbers"], fare)

    n = np.asarray(column(parts, "n"))
    check_numeric(t["n"]["numbers"], n.astype(np.float64))
    assert isinstance(t["n"]["numbers"]["min"], int)

    x = column(parts, "x")
    check_numeric(t["x"]["numbers"], flat(x))
    check_numeric(t["x"]["values_per_record"], np.asarray([len(v) for v in x], dtype=np.float64), integer=True)
    assert t["x"]["numbers"]["nan"] == 3 and t["x"]["numbers"]["posinf"] == 3

    emb = column(parts, "emb")
    check_numeric(t["emb"]["numbers"], flat(emb))
    assert t["emb"]["values_per_record"]["min"] == t["emb"]["values_per_record"]["max"] == 3

    tags = column(parts, "tags")
    check_numeric(t["tags"]["values_per_record"], np.asarray([len(v) for v in tags], dtype=np.float64), integer=True)
    flat_tags = [v for vs in tags for v in vs]
    assert t["tags"]["strings"]["count"] == len(flat_tags)
    assert t["tags"]["strings"]["distinct"] == len(set(flat_tags)) and t["tags"]["strings"]["exact"]

    city = [c for c in column(parts, "city") if c is not None]
    s = t["city"]["strings"]
    assert t["city"]["present"] == len(city) and t["city"]["missing"] == records - len(city)
    expected = sorted(Counter(city).items(), key=lambda kv: (-kv[1], kv[0].encode()))
    assert [(v["value"], v["count"]) for v in s["top"]] == expected
    assert s["distinct"] == len(set(city)) and s["count_error"] == 0


# ---------------------------------------------------------------------------------------
# Numbers against numpy
# ---------------------------------------------------------------------------------------
def test_stats_match_numpy_in_parallel(source):
    base, parts = source
    src = resolve_source(base)
    info = stats_to_dict(compute_stats(src, workers=2), src)
    check_source_stats(info, parts)
    # one process, same numbers
    single = stats_to_dict(compute_stats(src, workers=1), src)
    assert json.dumps(single, sort_keys=True) == json.dumps(info, sort_keys=True)


def test_numeric_summary_merges_like_one_pass():
    rng = np.random.default_rng(1)
    chunks = [rng.normal(5, 2, 700), rng.normal(-3, 1, 300), np.array([0.0, np.nan, -np.inf])]
    whole = NumericSummary()
    whole.add(np.concatenate(chunks))
    merged = NumericSummary()
    for c in chunks:
        s = NumericSummary()
        s.add(c)
        merged.merge(s)
    a, b = whole.to_dict(), merged.to_dict()
    assert a.pop("mean") == pytest.approx(b.pop("mean"), rel=1e-12)
    assert a.pop("std") == pytest.approx(b.pop("std"), rel=1e-12)
    assert a == b
    check_numeric(b | {"mean": whole.mean, "std": math.sqrt(whole.m2 / whole.finite)}, np.concatenate(chunks))


def test_numeric_summary_beyond_exact_limit_within_documented_bound():
    rng = np.random.default_rng(2)
    data = [rng.lognormal(3, 2, 9000), -rng.lognormal(0, 1, 4000), np.zeros(500), rng.normal(0, 1e-3, 8000)]
    summaries = []
    for d in data:
        s = NumericSummary()
        s.add(d)
        summaries.append(s)
    total = summaries[0]
    for s in summaries[1:]:
        total.merge(s)
    values = np.concatenate(data)
    assert values.size > EXACT_LIMIT
    d = total.to_dict()
    assert not d["exact"]
    assert d["count"] == values.size and d["min"] == values.min() and d["max"] == values.max()
    assert d["mean"] == pytest.approx(values.mean(), rel=1e-9)
    assert d["std"] == pytest.approx(values.std(), rel=1e-9)
    for q in QUANTILES:
        exact = np.quantile(values, q, method="lower")
        got = d["quantiles"][f"p{round(q * 100)}"]
        assert abs(got - exact) <= SKETCH_ALPHA * abs(exact) + 1e-300, (q, got, exact)
    # histogram: a value may only move to a neighbouring bucket when within alpha of an edge
    edges = np.asarray(d["histogram"]["edges"])
    exact_counts, _ = np.histogram(values, bins=edges)
    near_edge = np.zeros(len(edges) - 1, dtype=np.int64)
    for i, e in enumerate(edges[1:-1], start=1):
        close = np.abs(values - e) <= SKETCH_ALPHA * np.abs(values)
        near_edge[i - 1] += close.sum()
        near_edge[i] += close.sum()
    diff = np.abs(np.asarray(d["histogram"]["counts"]) - exact_counts)
    assert (diff <= near_edge).all(), (diff, near_edge)
    assert sum(d["histogram"]["counts"]) == values.size


def test_integer_quantiles_beyond_exact_limit():
    rng = np.random.default_rng(5)
    small, large = NumericSummary(), NumericSummary()
    small_values, large_values = rng.integers(-99, 100, 20_000), rng.integers(-10**12, 10**12, 20_000)
    small.add(small_values)
    large.add(large_values)
    assert not small.exact and not large.exact
    for q, got_small, got_large in zip(QUANTILES, small.quantiles(), large.quantiles()):
        assert isinstance(got_small, int) and isinstance(got_large, int)
        assert got_small == np.quantile(small_values, q, method="lower")  # |v| < 100: exact
        exact = int(np.quantile(large_values, q, method="lower"))
        assert abs(got_large - exact) <= SKETCH_ALPHA * abs(exact) + 0.5
    counts = small.to_dict()["histogram"]["counts"]
    assert sum(counts) == 20_000


def test_string_summary_beyond_capacity():
    rng = np.random.default_rng(3)
    heavy = {b"alpha": 5000, b"beta": 3000, b"gamma": 2000}
    for distinct in (30_000, 100_000):
        uniques = [f"u{i}".encode() for i in range(distinct)]
        stream = uniques + [k for k, n in heavy.items() for _ in range(n)]
        rng.shuffle(stream)
        halves = [StringSummary(), StringSummary()]
        for i in range(0, len(stream), 5000):
            halves[(i // 5000) % 2].add(stream[i:i + 5000])
        s = halves[0]
        s.merge(halves[1])
        d = s.to_dict()
        assert d["count"] == len(stream) and not d["exact"]
        true_distinct = distinct + len(heavy)
        assert abs(d["distinct"] - true_distinct) <= 0.03 * true_distinct, (d["distinct"], true_distinct)
        assert d["count_error"] <= len(stream) / (TOP_CAPACITY + 1)
        top = {t["value"].encode(): t["count"] for t in d["top"][:3]}
        assert set(top) == set(heavy)
        for k, n in heavy.items():
            assert n - d["count_error"] <= top[k] <= n


def test_long_string_values_are_counted_by_digest():
    s = StringSummary()
    long_a, long_b = b"a" * 1000, b"a" * 999 + b"b"
    s.add([long_a, long_a, long_b, b"short"])
    d = s.to_dict()
    assert d["distinct"] == 3 and d["exact"]
    assert d["top"][0] == {"value": "a" * 64, "truncated": True, "length": 1000, "count": 2}


# ---------------------------------------------------------------------------------------
# End to end: CLI, TensorBoard's readers, the HTML report
# ---------------------------------------------------------------------------------------
def tensors_by_tag(logdir: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Every value in the event files, read with TensorFlow's own event reader."""
    out = {}
    files = glob.glob(str(logdir / "events.out.tfevents.*"))
    assert files, f"no event file in {logdir}"
    for path in files:
        for event in tf.compat.v1.train.summary_iterator(path):
            for v in event.summary.value:
                out[v.tag] = (v.metadata.plugin_data.plugin_name, tf.make_ndarray(v.tensor))
                assert event.step == 0
    return out


@pytest.mark.slow
def test_stats_cli_tensorboard_and_report(source, tmp_path):
    base, parts = source
    logdir, report = tmp_path / "logs", tmp_path / "report.html"
    proc = cli("stats", base, "--logdir", str(logdir), "--report", str(report), "--json")
    info = json.loads(proc.stdout)
    check_source_stats(info, parts)
    assert "\r" not in proc.stderr and "I0000" not in proc.stderr  # no progress bar, no TF start-up lines

    # TensorBoard summaries, read back with TF's summary_iterator
    tb = tensors_by_tag(logdir)
    fare = np.asarray(column(parts, "fare"), dtype=np.float32).astype(np.float64)
    # scalars are float32, as tf.summary.scalar writes them (TensorBoard's fast loader needs that)
    assert tb["fare/mean"][0] == "scalars" and tb["fare/mean"][1].dtype == np.float32
    assert tb["fare/mean"][1] == np.float32(fare.mean())
    assert tb["fare/std"][1] == pytest.approx(fare.std(), rel=1e-6)
    assert tb["fare/p50"][1] == np.float32(np.quantile(fare, 0.5, method="lower"))
    assert tb["fare/max"][1] == np.float32(fare.max()) and tb["n/min"][1] == min(column(parts, "n"))
    assert tb["_source/records"][1] == 1200 and tb["fare/value_count"][1] == 1200
    plugin, hist = tb["fare/values"]
    assert plugin == "histograms" and hist.shape == (30, 3)
    np.testing.assert_array_equal(hist[:, 2], np.histogram(fare, bins=np.append(hist[:, 0], hist[-1, 1]))[0])
    assert tb["city/missing"][1] == sum(c is None for c in column(parts, "city"))
    assert tb["city/distinct"][1] == len(CITIES)
    plugin, top = tb["city/top_values"]
    assert plugin == "text" and "| nyc |" in top.item().decode()
    assert tb["tags/values_per_record"][0] == "histograms"
    assert "fare/values_per_record" not in tb  # scalars have no length histogram

    # the HTML report: embedded numbers, tables and PNG plots
    html_text = report.read_text(encoding="utf-8")
    blob = re.search(r'<script type="application/json" id="tfrecord-io-stats">(.*?)</script>', html_text, re.S)
    embedded = json.loads(blob.group(1))
    check_source_stats(embedded, parts)
    assert f"<th>mean</th><td>{format_number(float(fare.mean()))}</td>" in html_text
    assert f"<th>missing</th><td>{sum(c is None for c in column(parts, 'city'))}</td>" in html_text
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html_text)
    assert len(images) >= 6
    assert all(base64.b64decode(i).startswith(b"\x89PNG\r\n\x1a\n") for i in images)
    assert "zürich" in html_text
    assert "<b>o&slo" not in html_text and "&lt;b&gt;o&amp;slo&lt;/script&gt;" in html_text


def test_tensorboard_event_accumulator_reads_the_summaries(source, tmp_path):
    # tensorboard is a pinned dependency (setup.cfg); no skip: a missing install fails here.
    from tensorboard.backend.event_processing import plugin_event_accumulator as ea_module

    base, parts = source
    src = resolve_source(base)
    info = stats_to_dict(compute_stats(src, workers=1), src)
    tags = write_summaries(info, str(tmp_path / "logs"))
    acc = ea_module.EventAccumulator(str(tmp_path / "logs"), size_guidance={"tensors": 0})
    acc.Reload()
    histograms = set(acc.PluginTagToContent("histograms"))
    assert histograms == {"fare/values", "n/values", "tags/values_per_record", "emb/values",
                          "emb/values_per_record", "x/values", "x/values_per_record"}
    scalars, texts = set(acc.PluginTagToContent("scalars")), set(acc.PluginTagToContent("text"))
    assert scalars | histograms | texts == set(tags) and len(tags) == len(set(tags))
    assert "fare/mean" in acc.PluginTagToContent("scalars")
    assert set(acc.PluginTagToContent("text")) == {"tags/top_values", "city/top_values"}
    n = np.asarray(column(parts, "n"))
    assert tf.make_ndarray(acc.Tensors("n/mean")[0].tensor_proto) == np.float32(n.mean())
    hist = tf.make_ndarray(acc.Tensors("n/values")[0].tensor_proto)
    assert hist[:, 2].sum() == n.size


def test_stats_of_sequence_examples(tmp_path):
    rng = np.random.default_rng(4)
    records, clicks_all, dwell_all = [], [], []
    for user in range(60):
        se = tf.train.SequenceExample()
        se.context.feature["user"].int64_list.value.append(user)
        clicks = rng.integers(0, 100, rng.integers(0, 6)).tolist()
        dwell = [rng.random(rng.integers(1, 3)).astype(np.float32).tolist() for _ in clicks]
        for c, d in zip(clicks, dwell):
            se.feature_lists.feature_list["clicks"].feature.add().int64_list.value.append(c)
            se.feature_lists.feature_list["dwell"].feature.add().float_list.value.extend(d)
        clicks_all.append(clicks)
        dwell_all.append(dwell)
        records.append(se.SerializeToString())
    for i, name in enumerate(("a.tfrecord", "b.tfrecord.zlib")):
        opts = tf.io.TFRecordOptions(compression_type="" if i == 0 else "ZLIB")
        with tf.io.TFRecordWriter(str(tmp_path / name), opts) as w:
            for r in records[i * 30:(i + 1) * 30]:
                w.write(r)
    src = resolve_source(str(tmp_path))
    info = stats_to_dict(compute_stats(src, workers=2), src)
    t = by_tag(info)
    assert info["record_type"] == "sequence_example" and info["records"] == 60
    assert t["context/user"]["numbers"]["max"] == 59
    clicks = t["feature_lists/clicks"]
    # a record with no clicks has no FeatureList for them (TF writes none): missing, not 0 steps
    assert clicks["missing"] == sum(not c for c in clicks_all)
    check_numeric(clicks["steps"], np.asarray([len(c) for c in clicks_all if c], dtype=np.float64), integer=True)
    check_numeric(clicks["numbers"], np.asarray([c for cs in clicks_all for c in cs], dtype=np.float64))
    dwell = t["feature_lists/dwell"]
    check_numeric(dwell["values_per_step"], np.asarray([len(d) for ds in dwell_all for d in ds], dtype=np.float64),
                  integer=True)
    check_numeric(dwell["numbers"], np.asarray([v for ds in dwell_all for d in ds for v in d], dtype=np.float64))
    tb_dir = tmp_path / "logs"
    write_summaries(info, str(tb_dir))
    tb = tensors_by_tag(tb_dir)
    assert tb["feature_lists/clicks/steps"][0] == "histograms"
    assert tb["feature_lists/dwell/values_per_step"][0] == "histograms"


def test_stats_beyond_exact_limit_end_to_end(tmp_path):
    base = str(tmp_path / "out")
    parts = []
    for s in range(2):
        p = part(3000, 10 + s)
        p["x"] = [list(map(float, np.random.default_rng(s).exponential(2.0, 3).astype(np.float32)))
                  for _ in range(3000)]
        parts.append(p)
    write_output(base, parts, compression="none")
    src = resolve_source(base)
    info = stats_to_dict(compute_stats(src, workers=2), src)
    x = by_tag(info)["x"]["numbers"]
    values = flat(column(parts, "x"))
    assert values.size == 18_000 > EXACT_LIMIT and not x["exact"]
    for q in QUANTILES:
        exact = np.quantile(values, q, method="lower")
        assert abs(x["quantiles"][f"p{round(q * 100)}"] - exact) <= SKETCH_ALPHA * abs(exact)
    assert x["mean"] == pytest.approx(values.mean(), rel=1e-9)


def test_stats_errors(tmp_path, source):
    base, _ = source
    proc = cli("stats", base, "--logdir", "hdfs://127.0.0.1:1/logs", check=False)
    assert proc.returncode == 2 and "local directory" in proc.stderr
    # a corrupt file: the error names the file and the offset
    bad = tmp_path / "bad.tfrecord"
    with tf.io.TFRecordWriter(str(bad)) as w:
        for i in range(5):
            ex = tf.train.Example()
            ex.features.feature["i"].int64_list.value.append(i)
            w.write(ex.SerializeToString())
    data = bytearray(bad.read_bytes())
    data[-1] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"bad\.tfrecord: corrupt TFRecord at byte offset \d+: data CRC"):
        compute_stats(resolve_source(str(bad)))


@pytest.mark.slow
def test_stats_says_when_there_is_nothing_or_the_manifest_lies(tmp_path):
    from tfrecord_io.storage import output as out_contract
    from tfrecord_io.core.schema import Schema

    schema = Schema.from_dict({"features": [{"name": "a", "type": "int64"}]})
    empty = tmp_path / "empty"
    out_contract.write_output(str(empty), [[], []], schema=schema, engine="test")
    proc = cli("stats", str(empty), "--logdir", str(tmp_path / "l1"), check=False)
    assert proc.returncode == 0 and "holds no records (2 file(s))" in proc.stderr, proc.stderr
    import pyarrow as pa

    from tfrecord_io.core.codec import encode_examples

    lying = tmp_path / "lying"
    out_contract.write_output(str(lying), [[encode_examples(pa.RecordBatch.from_pydict({"a": [1, 2, 3]}), schema)]],
                              schema=schema, engine="test")
    manifest = json.loads((lying / "_manifest.json").read_text())
    manifest["files"][0]["records"] = 300
    (lying / "_manifest.json").write_text(json.dumps(manifest))
    proc = cli("stats", str(lying), "--logdir", str(tmp_path / "l2"), check=False)
    assert proc.returncode == 3, proc.stderr
    assert "part-00000-of-00001.tfrecord: holds 3 records, but _manifest.json says 300" in proc.stderr
    assert "tfrecord-io verify" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------
# HDFS
# ---------------------------------------------------------------------------------------
def test_stats_on_hdfs(hdfs, source, tmp_path):
    base, parts = source
    root = hdfs.uri(f"/stats/{tmp_path.name}")
    for p in sorted(Path(base).iterdir()):
        with fs.open(f"{root}/out/{p.name}", "wb") as f:
            f.write(p.read_bytes())
    report = f"{root}/report.html"
    proc = cli("stats", f"{root}/out", "--logdir", str(tmp_path / "logs"), "--report", report)
    assert "fare  (float_list)  present 1200  missing 0" in proc.stdout, proc.stdout
    with fs.open(report, "rb") as f:
        html_text = f.read().decode("utf-8")
    blob = re.search(r'id="tfrecord-io-stats">(.*?)</script>', html_text, re.S)
    check_source_stats(json.loads(blob.group(1)), parts)
    assert "fare/mean" in tensors_by_tag(tmp_path / "logs")


# ----------------------------------------------------------------------------- overview, integers, compare
DAYS = Schema.from_dict({"features": [
    {"name": "day", "type": "int64", "required": True}, {"name": "delay", "type": "float", "default": 0.0},
    {"name": "carrier", "type": "string", "default": ""}]})


def days_output(base: str, n: int, shift: float, carriers: list[str], seed: int, extra: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    cols = {"day": rng.integers(1, 32, n), "delay": (rng.normal(10, 4, n) + shift).astype(np.float32),
            "carrier": pa.array([carriers[k % len(carriers)] if k % 10 else None for k in range(n)])}
    schema = DAYS
    if extra:
        schema = Schema.from_dict({"features": [*DAYS.to_dict()["features"], {"name": "gate", "type": "int64"}]})
        cols["gate"] = rng.integers(1, 9, n)
    batch = pa.RecordBatch.from_pydict(cols, schema=schema.arrow_schema())
    output.write_output(base, [[encode_examples(batch, schema)]], schema=schema, compression="none", engine="test")
    return cols


@pytest.mark.slow
def test_overview_and_one_bar_per_integer_value(tmp_path):
    base = str(tmp_path / "days")
    cols = days_output(base, 3000, 0.0, ["AA", "UA", "DL"], seed=1)
    info = json.loads(cli("stats", base, "--logdir", str(tmp_path / "tb"), "--json").stdout)
    day = next(e for e in info["features"] if e["name"] == "day")["numbers"]
    assert len(day["histogram"]["counts"]) == 31  # one bar per day, not 30 buckets straddling them
    assert day["histogram"]["counts"] == np.bincount(cols["day"], minlength=32)[1:].tolist()
    assert all(isinstance(v, int) for v in day["quantiles"].values()) and day["distinct"] == 31
    text = cli("stats", base, "--logdir", str(tmp_path / "tb2")).stdout
    overview = {line.split()[0]: line.split() for line in text.splitlines()[2:7]}
    assert overview["feature"][:4] == ["feature", "kind", "missing", "distinct"]
    assert overview["carrier"][1:4] == ["bytes_list", "10.0%", "3"]  # every 10th row has no carrier
    assert overview["day"][1:6] == ["int64_list", "0.0%", "31", "1", "31"]


@pytest.mark.slow
def test_compare_shows_drift_per_feature(tmp_path):
    a, b = str(tmp_path / "train"), str(tmp_path / "eval")
    days_output(a, 4000, 0.0, ["AA", "UA", "DL"], seed=1)
    days_output(b, 4000, 4.0, ["AA", "AA", "UA", "DL"], seed=2, extra=True)  # delay +1 sd; more AA; a new column
    logdir = tmp_path / "tb"
    proc = cli("stats", a, "--compare", b, "--logdir", str(logdir), "--json")
    got = {r["tag"]: r for r in json.loads(proc.stdout)["compare"]}
    assert got["delay"]["drift"] == pytest.approx(1.0, abs=0.1)  # 4 / sd 4
    assert got["day"]["drift"] < 0.1  # the same distribution
    assert got["carrier"]["drift"] == pytest.approx(0.5 * 0.9 - (1 / 3) * 0.9, abs=0.03)  # AA's share changed most
    assert got["gate"]["only"] == "b" and got["gate"]["drift"] is None
    assert {p.name for p in logdir.iterdir()} == {"a", "b"}  # one TensorBoard run per source
    text = cli("stats", a, "--compare", b, "--logdir", str(tmp_path / "tb2")).stdout
    assert re.search(r"^delay\s.*\b1\.\d+ \(SMD\)$", text, re.M) and re.search(r"^gate\s.*only in b$", text, re.M)
