"""``tfrecord-io stats``: per-feature statistics of a TFRecord source, streamed with bounded memory.

Every record of every file is read once; files are worked on in parallel (one process per
file, up to the CPU count), each building mergeable accumulators that are merged at the end.
For each feature (an Example's features; a SequenceExample's context features and, as
``feature_lists/NAME``, its sequence features):

* ``present`` / ``missing``: records that have the feature / do not;
* ``kinds``: how many records hold it as each kind (``int64_list``, ``float_list``, ``bytes_list``);
* ``values_per_record``: how many values the feature holds per record (per step for
  sequence features, where ``steps`` counts the steps per record) -- a numeric summary;
* numbers (``int64_list``, ``float_list``): a numeric summary of all values;
* strings (``bytes_list``): the number of values, distinct values and the top values.

A numeric summary has ``count`` (all values), ``nan``, ``posinf``, ``neginf``, and over the
finite values: ``finite``, ``min``, ``max``, ``mean``, ``std`` (population, ddof=0),
``quantiles`` p1, p5, p25, p50, p75, p95, p99 (integers for integer features), ``distinct``
(while exact, see below) and a 30-bucket ``histogram`` over [min, max] (one bucket per integer
when integer values span at most ``INTEGER_BARS``, 100, of them).

Exactness (``exact`` in each summary says which case applies; the summaries, and the constants
named here, are :mod:`tfrecord_io.core.sketches`):

* count, missing, nan/inf counts, min and max are exact; mean and std are exact up to
  float64 rounding (Chan et al.'s parallel merge of count, mean and sum of squares);
* quantiles and histogram are exact while a summary has seen at most ``EXACT_LIMIT``
  (10,000) finite values: it keeps them.  Beyond that they come from a DDSketch-style
  log-bucket sketch with relative accuracy ``SKETCH_ALPHA`` = 0.5%: a reported quantile
  is within 0.5% (relative) of the exact value at rank floor(q * (n - 1)) -- numpy's
  ``np.quantile(x, q, method="lower")`` (integers: rounded, so within 0.5% + 0.5, and
  exact below 100 in magnitude) -- and a histogram may count a value in a
  neighbouring bucket when it lies within 0.5% (relative) of a bucket edge.  The sketch
  keeps at most ``SKETCH_MAX_BINS`` (4,096) buckets per sign; past that the buckets of the
  smallest magnitudes are merged, so the bound holds for values within a factor of about
  1e17 of the largest magnitude;
* strings: counts of values are exact.  While a feature has at most ``TOP_CAPACITY``
  (10,000) distinct values, its distinct count and top-value counts are exact.  Beyond
  that the distinct count is a HyperLogLog estimate (2^14 registers: standard error 0.8%,
  within about 2% in practice)
  and the top values come from a Misra-Gries summary of 10,000 counters: each count is a
  lower bound, low by at most ``count_error`` (<= values / 10,001).  Values longer than
  128 bytes are counted by their BLAKE2b digest and shown by their first 64 bytes.

Memory is bounded per feature (about 10 MB in the worst case) and by a chunk of records
being decoded, whatever the size of the source.

Outputs (written by :mod:`tfrecord_io.commands.report`): TensorBoard summaries in ``--logdir``
(scalars, histograms and the top values as a text table, all at step 0; see
:func:`tfrecord_io.commands.report.write_summaries` for the tags), an HTML report (``--report``),
and on stdout an overview table (per feature: kind, % missing, distinct, min, max, mean) followed
by the details (``--json`` for all of it as JSON).

``--compare B`` describes a second source (train vs eval, or two days) side by side, as TFDV /
Facets users do: the overview of both and, per feature, a *drift* figure -- for numbers the
standardized mean difference |mean_a - mean_b| / sqrt((std_a^2 + std_b^2) / 2), for strings the
L-infinity distance between the two distributions of top values (TFDV's measure for categorical
features) -- with features present in only one of them marked.  TensorBoard gets one run per
source (``--logdir``/``a`` and ``/b``), so its dashboards overlay the two.
"""

from __future__ import annotations

import argparse
import json
import os
import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfrecord_io.commands import exits
from tfrecord_io.commands.reading import add_source_arguments, resolve_source
from tfrecord_io.commands.report import overview
from tfrecord_io.core.sketches import EXACT_LIMIT, HLL_P, SKETCH_ALPHA, TOP_CAPACITY, NumericSummary, StringSummary

__all__ = ["FeatureStats", "SourceStats", "file_stats", "compute_stats", "stats_to_dict", "configure", "run"]

_CHUNK_RECORDS = 4096    # records decoded at once (vectorized) before their values are folded into the accumulators
_CHUNK_BYTES = 4 << 20   # ... or this many record bytes (about a million values at most), whichever first


# ---------------------------------------------------------------------------------------
# Features and sources
# ---------------------------------------------------------------------------------------
@dataclass
class FeatureStats:
    name: str
    section: str  # "features" (Example features / SequenceExample context) | "feature_lists"
    present: int = 0
    kinds: Counter = field(default_factory=Counter)
    lengths: NumericSummary = field(default_factory=NumericSummary)   # values per record (per step)
    steps: NumericSummary | None = None                               # steps per record (sequences)
    numbers: NumericSummary | None = None
    strings: StringSummary | None = None

    def merge(self, other: "FeatureStats") -> None:
        self.present += other.present
        self.kinds.update(other.kinds)
        self.lengths.merge(other.lengths)
        for attr in ("steps", "numbers", "strings"):
            theirs = getattr(other, attr)
            if theirs is not None:
                mine = getattr(self, attr)
                if mine is None:
                    setattr(self, attr, theirs)
                else:
                    mine.merge(theirs)


@dataclass
class SourceStats:
    records: int = 0
    sequence_records: int = 0  # records that had feature_lists
    undecodable: int = 0
    first_undecodable: str | None = None
    files: list[dict] = field(default_factory=list)
    features: dict[tuple[str, str], FeatureStats] = field(default_factory=dict)

    def merge(self, other: "SourceStats") -> None:
        self.records += other.records
        self.sequence_records += other.sequence_records
        self.undecodable += other.undecodable
        self.first_undecodable = self.first_undecodable or other.first_undecodable
        self.files.extend(other.files)
        for key, fs_ in other.features.items():
            mine = self.features.get(key)
            if mine is None:
                self.features[key] = fs_
            else:
                mine.merge(fs_)


class _Pending:
    """One feature's values from a chunk of records, before they go into the summaries: arrays from
    the vectorized decoder (:func:`tfrecord_io.core.wire_scan.scan_batch`), and lists from the few
    records it leaves to ``decode_record``."""

    __slots__ = ("present", "kinds", "lengths", "steps", "ints", "floats", "strings")

    def __init__(self) -> None:
        self.present = 0
        self.kinds: Counter = Counter()
        self.lengths: list = [[]]  # arrays, and last a list for decode_record's records
        self.steps: list = [[]]
        self.ints: list = [[]]
        self.floats: list = [[]]
        self.strings: list[bytes] = []

    def feature(self, kind: str | None, values: list) -> None:
        """A feature of a record decoded by ``decode_record``."""
        self.kinds[kind or "none"] += 1
        self.lengths[-1].append(len(values))
        if kind == "float_list":
            self.floats[-1].extend(values)
        elif kind == "int64_list":
            self.ints[-1].extend(values)
        elif kind == "bytes_list":
            self.strings.extend(values)

    def values(self, values) -> None:
        """The slots of a feature in a chunk, vectorized (a :class:`~tfrecord_io.core.wire_scan.Values`)."""
        seen = np.flatnonzero(np.bincount(values.kind, minlength=4))
        firsts = [int(np.argmax(values.kind == k)) for k in seen]
        for _, k in sorted(zip(firsts, seen.tolist())):  # kinds in the order the records show them
            self.kinds[_KIND_NAMES[k]] += int(np.count_nonzero(values.kind == k))
        self.lengths.insert(-1, values.counts)
        if values.floats.size:
            self.floats.insert(-1, values.floats)
        if values.ints.size:
            self.ints.insert(-1, values.ints)
        if len(values.data):
            self.strings.extend(values.data.to_pylist())

    def flush_into(self, st: FeatureStats) -> None:
        def joined(parts: list, dtype) -> np.ndarray:
            return np.concatenate([np.asarray(p, dtype=dtype) for p in parts])

        st.present += self.present
        st.kinds.update(self.kinds)
        st.lengths.add(joined(self.lengths, np.int64))
        steps = joined(self.steps, np.int64)
        if steps.size:
            if st.steps is None:
                st.steps = NumericSummary()
            st.steps.add(steps)
        ints, floats = joined(self.ints, np.int64), joined(self.floats, np.float64)
        if ints.size or floats.size:
            if st.numbers is None:
                st.numbers = NumericSummary()
            if ints.size:
                st.numbers.add(ints)
            if floats.size:
                st.numbers.add(floats)
        if self.strings:
            if st.strings is None:
                st.strings = StringSummary()
            st.strings.add(self.strings)


_KIND_NAMES = ("none", "bytes_list", "float_list", "int64_list")  # by wire_scan's kind codes


def file_stats(file, _context, report) -> SourceStats:
    """Statistics of one file (a :class:`~tfrecord_io.storage.sources.SourceFile`); runs in a worker.

    Records are decoded a chunk at a time by the vectorized decoder; the records it cannot take
    (not canonically serialized, or not Examples) are decoded one by one by ``decode_record``."""
    from tfrecord_io.core.framing import record_chunks
    from tfrecord_io.storage.sources import iter_file_records

    out = SourceStats()
    records = iter_file_records(file, verify=True, report=report)
    for offsets, chunk in record_chunks(records, max_records=_CHUNK_RECORDS, max_bytes=_CHUNK_BYTES):
        _fold(out, file, chunk, offsets)
    out.files.append({"path": file.name, "records": out.records, "bytes": file.size})
    return out


def _fold(out: SourceStats, file, chunk: list[bytes], offsets: list[int]) -> None:
    """Decode a chunk of records and fold what they hold into ``out``."""
    from tfrecord_io.core.wire_scan import scan_batch
    from tfrecord_io.core.decode import RecordDecodeError, decode_record

    if not chunk:
        return
    pending: dict[tuple[str, str], _Pending] = {}

    def of(key: tuple[str, str]) -> _Pending:
        p = pending.get(key)
        if p is None:
            p = pending[key] = _Pending()
        return p

    scan = scan_batch(chunk)
    out.records += len(chunk)
    out.sequence_records += int(np.count_nonzero(scan.has_lists))
    for name, sf in scan.features.items():
        p = of(("features", name))
        p.present += len(sf.records)
        p.values(sf.values)
    for name, sl in scan.feature_lists.items():
        p = of(("feature_lists", name))
        p.present += len(sl.records)
        p.steps.insert(-1, sl.steps)
        p.values(sl.values)
    for i in np.flatnonzero(scan.odd).tolist():
        try:
            rec = decode_record(chunk[i])
        except RecordDecodeError as e:
            out.undecodable += 1
            if out.first_undecodable is None:
                out.first_undecodable = f"{file.uri} at byte offset {offsets[i]}: {e}"
            continue
        for name, (kind, values) in rec.features.items():
            p = of(("features", name))
            p.present += 1
            p.feature(kind, values)
        if rec.feature_lists is not None:
            out.sequence_records += 1
            for name, steps in rec.feature_lists.items():
                p = of(("feature_lists", name))
                p.present += 1
                p.steps[-1].append(len(steps))
                for kind, values in steps:
                    p.feature(kind, values)
    for key, p in pending.items():
        st = out.features.get(key)
        if st is None:
            st = out.features[key] = FeatureStats(key[1], key[0])
        p.flush_into(st)


def compute_stats(source, *, workers: int | None = None, progress: bool | None = None) -> SourceStats:
    """Statistics of a resolved source (:func:`tfrecord_io.commands.reading.resolve_source`)."""
    from tfrecord_io.commands.reading import map_files

    missing = [f.name for f in source.files if f.size is None]
    if missing:
        raise FileNotFoundError(f"{source.uri}: files listed in the manifest are missing: {', '.join(missing)}")
    parts = map_files(file_stats, source.files, workers=workers, label="stats", progress=progress)
    total = SourceStats()
    for part in parts:
        total.merge(part)
    if total.records and total.undecodable == total.records:
        raise ValueError(f"{source.uri}: no record is a tf.train.Example or SequenceExample; "
                         f"the first: {total.first_undecodable}")
    return total


def stats_to_dict(stats: SourceStats, source) -> dict:
    """Everything as JSON-ready data (what ``--json`` prints and the report embeds)."""
    if source.record_type is not None:
        record_type = source.record_type
    else:
        record_type = "sequence_example" if stats.sequence_records else "example"
    sequence = record_type == "sequence_example"
    features = []
    order = {}
    if source.schema is not None:
        order = {f.name: i for i, f in enumerate(source.schema.input_features)}
    keys = sorted(stats.features, key=lambda k: (k[0] != "features", order.get(k[1], len(order)), k[1]))
    for key in keys:
        st = stats.features[key]
        section = "feature_lists" if key[0] == "feature_lists" else ("context" if sequence else "features")
        kinds = {k: n for k, n in st.kinds.most_common()}
        entry: dict[str, Any] = {
            "name": st.name, "section": section,
            "tag": st.name if section == "features" else f"{section}/{st.name}",
            "kind": next(iter(kinds), None), "kinds": kinds,
            "present": st.present, "missing": stats.records - stats.undecodable - st.present,
        }
        if st.steps is not None or section == "feature_lists":
            entry["steps"] = (st.steps or NumericSummary()).to_dict()
            entry["values_per_step"] = st.lengths.to_dict()
        else:
            entry["values_per_record"] = st.lengths.to_dict()
        if st.numbers is not None:
            entry["numbers"] = st.numbers.to_dict()
        if st.strings is not None:
            entry["strings"] = st.strings.to_dict()
        features.append(entry)
    return {
        "source": source.uri, "record_type": record_type, "records": stats.records,
        "undecodable": stats.undecodable, "first_undecodable": stats.first_undecodable,
        "files": sorted(stats.files, key=lambda f: f["path"]), "features": features,
        "accuracy": {"exact_limit": EXACT_LIMIT, "sketch_alpha": SKETCH_ALPHA, "top_capacity": TOP_CAPACITY,
                     "hll_registers": 1 << HLL_P},
    }


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------
def _is_list(entry: dict) -> bool:
    """Whether a feature is shown with its values-per-record (a list, not always one value)."""
    lengths = entry.get("values_per_record") or entry.get("values_per_step")
    return entry["section"] == "feature_lists" or lengths.get("min") != 1 or lengths.get("max") != 1


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _distinct(row: dict) -> str:
    return "-" if row["distinct"] is None else f"{row['distinct']}{'' if row['distinct_exact'] else '~'}"


def overview_text(info: dict) -> list[str]:
    rows = [[r["tag"], str(r["kind"]), _pct(r["missing_pct"]), _distinct(r), _fmt(r["min"]), _fmt(r["max"]),
             _fmt(r["mean"])] for r in overview(info)]
    return _table(["feature", "kind", "missing", "distinct", "min", "max", "mean"], rows)


def _share(strings: dict) -> dict:
    total = strings.get("count") or 0
    return {json.dumps(t["value"], ensure_ascii=False): t["count"] / total for t in strings.get("top", [])} \
        if total else {}


def compare(a: dict, b: dict) -> list[dict]:
    """Per feature of either source: both overviews and the drift (module doc); ``only`` names the
    source that has a feature the other lacks."""
    rows_a = {r["tag"]: r for r in overview(a)}
    rows_b = {r["tag"]: r for r in overview(b)}
    feats_a = {e["tag"]: e for e in a["features"]}
    feats_b = {e["tag"]: e for e in b["features"]}
    out = []
    for tag in list(rows_a) + [t for t in rows_b if t not in rows_a]:
        ra, rb = rows_a.get(tag), rows_b.get(tag)
        entry = {"tag": tag, "a": ra, "b": rb, "drift": None, "drift_measure": None,
                 "only": None if ra and rb else ("a" if ra else "b")}
        ea, eb = feats_a.get(tag), feats_b.get(tag)
        if ea and eb and "numbers" in ea and "numbers" in eb and ea["numbers"]["mean"] is not None \
                and eb["numbers"]["mean"] is not None:
            na, nb = ea["numbers"], eb["numbers"]
            pooled = math.sqrt((na["std"] ** 2 + nb["std"] ** 2) / 2)
            diff = abs(na["mean"] - nb["mean"])
            entry["drift"] = diff / pooled if pooled > 0 else (0.0 if diff == 0 else math.inf)
            entry["drift_measure"] = "standardized mean difference"
        elif ea and eb and "strings" in ea and "strings" in eb:
            pa_, pb_ = _share(ea["strings"]), _share(eb["strings"])
            entry["drift"] = max((abs(pa_.get(k, 0.0) - pb_.get(k, 0.0)) for k in set(pa_) | set(pb_)), default=0.0)
            entry["drift_measure"] = "L-infinity distance"
        out.append(entry)
    return out


def compare_text(a: dict, b: dict, rows: list[dict]) -> str:
    lines = [f"compare a = {a['source']} ({a['records']} records)",
             f"     with b = {b['source']} ({b['records']} records)", ""]
    table = []
    for r in rows:
        ra, rb = r["a"] or {}, r["b"] or {}
        drift = {"a": "only in a", "b": "only in b"}.get(r["only"]) or \
            ("-" if r["drift"] is None else f"{r['drift']:.3f}" + (" (SMD)" if r["drift_measure"] ==
                                                                   "standardized mean difference" else " (L-inf)"))
        table.append([r["tag"], _pct(ra.get("missing_pct")), _pct(rb.get("missing_pct")),
                      _distinct(ra) if ra else "-", _distinct(rb) if rb else "-",
                      _fmt(ra.get("mean")), _fmt(rb.get("mean")), drift])
    lines += _table(["feature", "missing a", "missing b", "distinct a", "distinct b", "mean a", "mean b", "drift"],
                    table)
    return "\n".join(lines) + "\n"


def render_text(info: dict) -> str:
    lines = [f"stats {info['source']}: {info['record_type']}, {info['records']} records in "
             f"{len(info['files'])} file{'s' if len(info['files']) != 1 else ''}", ""]
    lines += overview_text(info)
    if info["undecodable"]:
        lines.append(f"warning: {info['undecodable']} records are not Examples (left out); "
                     f"the first: {info['first_undecodable']}")
    for e in info["features"]:
        lines.append("")
        lines.append(f"{e['tag']}  ({e['kind']}{', mixed kinds' if len(e['kinds']) > 1 else ''})  "
                     f"present {e['present']}  missing {e['missing']}")
        if "numbers" in e:
            n = e["numbers"]
            q = n["quantiles"]
            lines.append(f"  values {n['count']}  min {_fmt(n['min'])}  max {_fmt(n['max'])}  "
                         f"mean {_fmt(n['mean'])}  std {_fmt(n['std'])}"
                         + (f"  nan {n['nan']}" if n["nan"] else "")
                         + (f"  +inf {n['posinf']}  -inf {n['neginf']}" if n["posinf"] or n["neginf"] else ""))
            if q:
                lines.append("  " + "  ".join(f"{k} {_fmt(v)}" for k, v in q.items())
                             + ("" if n["exact"] else f"  (within {SKETCH_ALPHA:.1%})"))
        if "strings" in e:
            s = e["strings"]
            lines.append(f"  values {s['count']}  distinct {s['distinct']}{'' if s['exact'] else ' (estimate)'}")
            top = ", ".join(f"{json.dumps(t['value'], ensure_ascii=False)}: {t['count']}" for t in s["top"][:5])
            lines.append(f"  top: {top}")
        if "steps" in e:
            st, vs = e["steps"], e["values_per_step"]
            lines.append(f"  steps per record  min {_fmt(st['min'])}  max {_fmt(st['max'])}  mean {_fmt(st['mean'])}")
            lines.append(f"  values per step   min {_fmt(vs['min'])}  max {_fmt(vs['max'])}  mean {_fmt(vs['mean'])}")
        elif _is_list(e):
            vr = e["values_per_record"]
            lines.append(f"  values per record  min {_fmt(vr['min'])}  max {_fmt(vr['max'])}  mean {_fmt(vr['mean'])}")
    return "\n".join(lines) + "\n"


def configure(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser)
    parser.add_argument("--logdir", default=None, metavar="DIR",
                        help="also write TensorBoard summaries here (a local directory; view with "
                             "`tensorboard --logdir DIR`)")
    parser.add_argument("--report", metavar="FILE.html", default=None,
                        help="also write a standalone HTML report with plots (local path, file:// or hdfs://)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="processes (default: one per file, at most the CPU count; one for sources under 32 MB)")
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON instead of a table")
    parser.add_argument("--compare", metavar="SOURCE_B", default=None,
                        help="also describe SOURCE_B and show the two side by side, with a drift figure per feature "
                             "(e.g. train vs eval); TensorBoard gets the runs LOGDIR/a and LOGDIR/b")


def run(args: argparse.Namespace) -> int:
    from tfrecord_io.commands.report import check_logdir, render_report, write_summaries
    from tfrecord_io.storage.sources import ShardMismatchError

    compare_to = getattr(args, "compare", None)
    try:
        if args.logdir:
            check_logdir(args.logdir)  # before the long part
        source = resolve_source(args.source, compression=args.compression)
        other = resolve_source(compare_to, compression=args.compression) if compare_to else None
        computed = compute_stats(source, workers=args.workers)
        info = stats_to_dict(computed, source)
        if args.logdir:
            write_summaries(info, args.logdir if other is None else os.path.join(args.logdir, "a"))
        if other is not None:
            computed_b = compute_stats(other, workers=args.workers)
            info_b = stats_to_dict(computed_b, other)
            if args.logdir:
                write_summaries(info_b, os.path.join(args.logdir, "b"))
        if args.report:
            from tfrecord_io.storage import fs

            html = render_report(info)
            with fs.open(args.report, "wb") as f:
                f.write(html.encode("utf-8"))
    except ShardMismatchError as e:  # a problem found, as verify reports it
        return exits.fail("stats", f"{e}; run `tfrecord-io verify {args.source}`", exits.PROBLEMS)
    except (OSError, ValueError, TypeError) as e:
        return exits.fail("stats", exits.message_of(e), exits.USAGE)  # the source cannot be read
    if other is not None:
        rows = compare(info, info_b)
        if args.json:
            print(json.dumps({"a": info, "b": info_b, "compare": rows}, ensure_ascii=False, indent=2))
        else:
            sys.stdout.write(compare_text(info, info_b, rows))
            if args.logdir:
                print(f"\nTensorBoard summaries: {args.logdir}/a and {args.logdir}/b  "
                      f"(tensorboard --logdir {args.logdir})")
        return max(_check_counts(computed.records, source), _check_counts(computed_b.records, other))
    if args.json:
        print(json.dumps(info, ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(render_text(info))
        if args.logdir:
            print(f"\nTensorBoard summaries: {args.logdir}  (tensorboard --logdir {args.logdir})")
        if args.report:
            print(f"HTML report: {args.report}")
    return _check_counts(computed.records, source)


def _check_counts(records: int, source) -> int:
    """0, with a warning when there is nothing to describe.  (A file that does not hold what its
    manifest says failed the reading already: :func:`~tfrecord_io.storage.sources.iter_file_records`.)"""
    if records == 0:
        exits.error("stats", f"{source.uri} holds no records ({len(source.files)} file(s)): there is nothing to "
                             f"describe", kind="warning")
    return exits.OK
