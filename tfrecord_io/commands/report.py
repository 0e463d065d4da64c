"""What ``tfrecord-io stats`` writes: TensorBoard summaries and a standalone HTML report.

Both take the dict of :func:`tfrecord_io.commands.stats.stats_to_dict`.

:func:`write_summaries` writes an event file for ``tensorboard --logdir DIR``.

:func:`render_report` makes one HTML file with its plots embedded as base64 PNGs.  Per
feature the page has a table of its numbers and plots (matplotlib, Agg backend): the value
histogram for numbers, the top values for strings, and the values-per-record (or steps and
values-per-step) histograms for lists and sequences.  The statistics are also embedded as
JSON in ``<script type="application/json" id="tfrecord-io-stats">`` for tools to read.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from typing import Any

import numpy as np

from tfrecord_io.engines.quiet_tf import import_tensorflow

__all__ = ["check_logdir", "write_summaries", "render_report", "format_number"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { padding: 2px 10px; text-align: right; }
th { text-align: left; font-weight: normal; color: #555; } td.text { text-align: left; font-family: monospace; }
.note { color: #666; font-size: 0.9em; } .plots img { margin: 0 1em 0.5em 0; vertical-align: top; }
.feature { display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start; }
"""


def _shows_lengths(e: dict) -> bool:
    """A list or sequence feature (not always exactly one value): its lengths are shown."""
    lengths = e.get("values_per_record") or e.get("values_per_step")
    return e["section"] == "feature_lists" or lengths.get("min") != 1 or lengths.get("max") != 1


# ---------------------------------------------------------------------------------------
# TensorBoard
# ---------------------------------------------------------------------------------------
def _import_tensorflow():
    """TensorFlow, imported without its start-up log lines (:mod:`tfrecord_io.engines.quiet_tf`)."""
    tf = import_tensorflow(level="3", command=True)  # later C++ chatter too (e.g. "failed call to cuInit")
    from tensorflow.core.framework import summary_pb2

    return tf, summary_pb2


def check_logdir(logdir: str) -> str:
    """The local path of ``--logdir`` (ValueError for a remote one: write locally, then copy)."""
    if logdir.startswith("file://"):
        return logdir[len("file://"):]
    if "://" in logdir:
        raise ValueError(f"--logdir {logdir}: TensorBoard summaries are written to a local directory; "
                         f"write them locally and copy them")
    return logdir


def write_summaries(info: dict, logdir: str) -> list[str]:
    """Write ``info`` (from :func:`tfrecord_io.commands.stats.stats_to_dict`) as TensorBoard summaries; returns the tags.

    All at step 0, under each feature's ``tag`` (``NAME``, or ``context/NAME`` /
    ``feature_lists/NAME`` for SequenceExamples):

    * scalars ``TAG/present``, ``TAG/missing``; numbers: ``TAG/value_count``, ``TAG/mean``,
      ``TAG/std``, ``TAG/min``, ``TAG/max``, ``TAG/p1`` ... ``TAG/p99``, ``TAG/nan``; strings:
      ``TAG/value_count``, ``TAG/distinct``;
    * histograms ``TAG/values`` (numbers), ``TAG/values_per_record`` (lists) or
      ``TAG/values_per_step`` and ``TAG/steps`` (sequence features);
    * text ``TAG/top_values`` (strings: a markdown table);
    * scalars ``_source/records`` and ``_source/files``.

    Written with ``tf.summary.write`` and the scalars / histograms / text plugins' metadata
    (what ``tf.summary.scalar`` / ``histogram`` / ``text`` write), so TensorBoard shows them
    on its Scalars, Histograms, Distributions and Text dashboards.  Histograms carry the
    buckets computed here (exact counts over all the data) rather than re-bucketing a sample.
    Scalars are float32, as ``tf.summary.scalar`` writes them (TensorBoard's fast loader
    skips float64 scalars); the exact numbers are in ``--json`` and the HTML report.  Each
    run adds an event file to ``logdir``: give each source its own directory (a run of
    TensorBoard over a parent directory then compares them).
    """
    path = check_logdir(logdir)
    tf, summary_pb2 = _import_tensorflow()

    def metadata(plugin: str):
        return summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin))

    scalar_md, hist_md, text_md = metadata("scalars"), metadata("histograms"), metadata("text")
    tags: list[str] = []

    def scalar(tag: str, value) -> None:
        if value is None or (isinstance(value, float) and not math.isfinite(value)) or tag in tags:
            return  # (a feature with both numbers and strings has one value_count: the numbers')
        tf.summary.write(tag, tf.constant(float(value), dtype=tf.float32), step=0, metadata=scalar_md)
        tags.append(tag)

    def histogram(tag: str, summary: dict) -> None:
        edges, counts = summary["histogram"]["edges"], summary["histogram"]["counts"]
        if not counts:
            return
        buckets = np.stack([np.asarray(edges[:-1]), np.asarray(edges[1:]), np.asarray(counts, dtype=np.float64)],
                           axis=1)
        tf.summary.write(tag, tf.constant(buckets, dtype=tf.float64), step=0, metadata=hist_md)
        tags.append(tag)

    writer = tf.summary.create_file_writer(path)
    try:
        with writer.as_default():
            scalar("_source/records", info["records"])
            scalar("_source/files", len(info["files"]))
            for e in info["features"]:
                t = e["tag"]
                scalar(f"{t}/present", e["present"])
                scalar(f"{t}/missing", e["missing"])
                if "numbers" in e:
                    n = e["numbers"]
                    scalar(f"{t}/value_count", n["count"])
                    for k in ("mean", "std", "min", "max"):
                        scalar(f"{t}/{k}", n[k])
                    for k, v in n["quantiles"].items():
                        scalar(f"{t}/{k}", v)
                    scalar(f"{t}/nan", n["nan"])
                    histogram(f"{t}/values", n)
                if "strings" in e:
                    s = e["strings"]
                    scalar(f"{t}/value_count", s["count"])
                    scalar(f"{t}/distinct", s["distinct"])
                    rows = ["| value | count |", "| --- | --- |"]
                    for item in s["top"]:
                        v = item["value"]
                        text = v if isinstance(v, str) else f"base64:{v['base64']}"
                        text = text.replace("|", "\\|").replace("\n", " ")
                        rows.append(f"| {text}{' …' if item.get('truncated') else ''} | {item['count']} |")
                    tf.summary.write(f"{t}/top_values", tf.constant("\n".join(rows)), step=0, metadata=text_md)
                    tags.append(f"{t}/top_values")
                if "steps" in e:
                    histogram(f"{t}/steps", e["steps"])
                    histogram(f"{t}/values_per_step", e["values_per_step"])
                elif _shows_lengths(e):
                    histogram(f"{t}/values_per_record", e["values_per_record"])
        writer.flush()
    finally:
        writer.close()
    return tags


# ---------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------
def format_number(v: Any) -> str:
    """How the report writes a number: integers in full, other floats to 6 significant digits."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.6g}"
    return html.escape(str(v))


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _hist_plot(plt, summary: dict, title: str) -> str | None:
    edges, counts = summary["histogram"]["edges"], summary["histogram"]["counts"]
    if not counts:
        return None
    fig, ax = plt.subplots(figsize=(5, 2.8))
    try:
        widths = [b - a for a, b in zip(edges[:-1], edges[1:])]
        ax.bar(edges[:-1], counts, width=widths, align="edge", color="#4878a8", edgecolor="white", linewidth=0.3)
        if summary.get("integer"):  # integer values: ticks on integers (a bar per value when few)
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("count")
        return _png(fig)
    finally:
        plt.close(fig)


def _top_plot(plt, strings: dict, title: str) -> str | None:
    top = strings["top"][:15]
    if not top:
        return None
    labels = []
    for t in top:
        v = t["value"]
        text = v if isinstance(v, str) else "b64:" + v["base64"]
        labels.append((text[:30] + "…") if len(text) > 30 or t.get("truncated") else text)
    fig, ax = plt.subplots(figsize=(5, 0.3 * len(top) + 0.8))
    try:
        ax.barh(range(len(top)), [t["count"] for t in top], color="#59a14f")
        ax.set_yticks(range(len(top)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("count")
        return _png(fig)
    finally:
        plt.close(fig)


def _rows(pairs: list[tuple[str, Any]]) -> str:
    return "".join(f"<tr><th>{html.escape(k)}</th><td>{format_number(v)}</td></tr>" for k, v in pairs)


def _numeric_rows(n: dict, prefix: str = "") -> list[tuple[str, Any]]:
    rows = [(f"{prefix}values", n["count"]), (f"{prefix}min", n["min"]), (f"{prefix}max", n["max"]),
            (f"{prefix}mean", n["mean"]), (f"{prefix}std", n["std"])]
    rows += [(f"{prefix}{k}", v) for k, v in n["quantiles"].items()]
    if n["nan"] or n["posinf"] or n["neginf"]:
        rows += [(f"{prefix}NaN", n["nan"]), (f"{prefix}+inf", n["posinf"]), (f"{prefix}-inf", n["neginf"])]
    return rows


def _feature_section(plt, e: dict, alpha: float) -> str:
    parts = [f"<h2 id=\"{html.escape(e['tag'], quote=True)}\">{html.escape(e['tag'])}</h2>"]
    kinds = ", ".join(f"{html.escape(k)}: {v}" for k, v in e["kinds"].items())
    parts.append(f"<p class=\"note\">kind {html.escape(str(e['kind']))} ({kinds})</p>")
    rows: list[tuple[str, Any]] = [("present", e["present"]), ("missing", e["missing"])]
    notes = []
    plots = []
    if "numbers" in e:
        n = e["numbers"]
        rows += _numeric_rows(n)
        if not n["exact"]:
            notes.append(f"quantiles and histogram from a sketch: within {alpha:.1%} (relative)")
        img = _hist_plot(plt, n, f"{e['tag']}: values")
        if img:
            plots.append(img)
    if "strings" in e:
        s = e["strings"]
        rows += [("values", s["count"]), ("distinct", s["distinct"])]
        if not s["exact"]:
            notes.append(f"distinct is an estimate; top counts may be low by at most {s['count_error']}")
        img = _top_plot(plt, s, f"{e['tag']}: top values")
        if img:
            plots.append(img)
    if "steps" in e:
        rows += _numeric_rows(e["steps"], "steps ")[:5]
        rows += _numeric_rows(e["values_per_step"], "values per step ")[1:5]
        for key, title in (("steps", "steps per record"), ("values_per_step", "values per step")):
            img = _hist_plot(plt, e[key], f"{e['tag']}: {title}")
            if img:
                plots.append(img)
    else:
        vr = e["values_per_record"]
        if _shows_lengths(e):
            rows += _numeric_rows(vr, "values per record ")[1:5]
            img = _hist_plot(plt, vr, f"{e['tag']}: values per record")
            if img:
                plots.append(img)
    tables = [f"<table>{_rows(rows)}</table>"]
    if "strings" in e and e["strings"]["top"]:
        top_rows = "".join(
            f"<tr><td class=\"text\">{html.escape(json.dumps(t['value'], ensure_ascii=False))}"
            f"{' …' if t.get('truncated') else ''}</td><td>{t['count']}</td></tr>" for t in e["strings"]["top"])
        tables.append(f"<table><tr><th>top value</th><th>count</th></tr>{top_rows}</table>")
    images = "".join(f"<img alt=\"plot\" src=\"data:image/png;base64,{p}\">" for p in plots)
    parts.append(f"<div class=\"feature\">{''.join(tables)}<div class=\"plots\">{images}</div></div>")
    parts += [f"<p class=\"note\">{html.escape(n)}</p>" for n in notes]
    return "\n".join(parts)


def overview(info: dict) -> list[dict]:
    """One row per feature: tag, kind, % missing, distinct, min, max, mean (None where unknown)."""
    rows = []
    decodable = max(info["records"] - info.get("undecodable", 0), 0)
    for e in info["features"]:
        n, s = e.get("numbers"), e.get("strings")
        rows.append({
            "tag": e["tag"], "kind": e["kind"],
            "missing_pct": 100.0 * e["missing"] / decodable if decodable else None,
            "distinct": (s or {}).get("distinct") if s else (n or {}).get("distinct"),
            "distinct_exact": bool((s or n or {}).get("exact")),
            "min": (n or {}).get("min"), "max": (n or {}).get("max"), "mean": (n or {}).get("mean"),
        })
    return rows


def _overview_table(info: dict) -> str:
    def cell(v) -> str:
        return "-" if v is None else format_number(v)

    def pct(v) -> str:
        return "-" if v is None else f"{v:.1f}%"

    rows = "".join(
        f"<tr><td class=\"text\"><a href=\"#{html.escape(r['tag'], quote=True)}\">{html.escape(r['tag'])}</a></td>"
        f"<td class=\"text\">{html.escape(str(r['kind']))}</td>"
        f"<td>{pct(r['missing_pct'])}</td>"
        f"<td>{cell(r['distinct'])}{'' if r['distinct_exact'] or r['distinct'] is None else ' (estimate)'}</td>"
        f"<td>{cell(r['min'])}</td><td>{cell(r['max'])}</td><td>{cell(r['mean'])}</td></tr>"
        for r in overview(info))
    return ("<h2>overview</h2><table><tr><th>feature</th><th>kind</th><th>missing</th><th>distinct</th>"
            f"<th>min</th><th>max</th><th>mean</th></tr>{rows}</table>")


def render_report(info: dict) -> str:
    """The HTML page for ``info`` (from :func:`tfrecord_io.commands.stats.stats_to_dict`)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    alpha = info.get("accuracy", {}).get("sketch_alpha", 0.005)
    files = "".join(f"<tr><td class=\"text\">{html.escape(f['path'])}</td><td>{f['records']}</td>"
                    f"<td>{format_number(f['bytes'])}</td></tr>" for f in info["files"])
    toc = " · ".join(f"<a href=\"#{html.escape(e['tag'], quote=True)}\">{html.escape(e['tag'])}</a>"
                     for e in info["features"])
    sections = "\n".join(_feature_section(plt, e, alpha) for e in info["features"])
    data = json.dumps(info, ensure_ascii=False).replace("<", "\\u003c")  # nothing can end the <script>
    warn = ""
    if info.get("undecodable"):
        warn = (f"<p class=\"note\">{info['undecodable']} records are not Examples and were left out; the first: "
                f"{html.escape(str(info['first_undecodable']))}</p>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>tfrecord-io stats: {html.escape(info['source'])}</title>
<style>{_CSS}</style></head>
<body>
<h1>tfrecord-io stats: {html.escape(info['source'])}</h1>
<p>{html.escape(info['record_type'])}, {info['records']} records, {len(info['files'])} files,
{len(info['features'])} features</p>
{warn}
<table><tr><th>file</th><th>records</th><th>bytes</th></tr>{files}</table>
{_overview_table(info)}
<p>{toc}</p>
{sections}
<script type="application/json" id="tfrecord-io-stats">{data}</script>
</body></html>
"""
