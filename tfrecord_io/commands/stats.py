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

Exactness (``exact`` in each summary says which case applies):

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
import hashlib
import json
import os
import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from tfrecord_io.commands import exits
from tfrecord_io.commands.reading import add_source_arguments, resolve_source
from tfrecord_io.commands.report import overview

__all__ = [
    "EXACT_LIMIT", "SKETCH_ALPHA", "SKETCH_MAX_BINS", "TOP_CAPACITY", "QUANTILES", "HISTOGRAM_BUCKETS", "INTEGER_BARS",
    "LogSketch", "NumericSummary", "StringSummary", "FeatureStats", "SourceStats",
    "file_stats", "compute_stats", "stats_to_dict", "configure", "run",
]

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
HISTOGRAM_BUCKETS = 30
INTEGER_BARS = 100       # integer values spanning at most this many get one histogram bar each
EXACT_LIMIT = 10_000
SKETCH_ALPHA = 0.005
SKETCH_MAX_BINS = 4096
TOP_CAPACITY = 10_000
TOP_SHOWN = 20
HLL_P = 14
_LONG_VALUE = 128        # values longer than this are counted by digest
_CHUNK_RECORDS = 4096    # records decoded at once (vectorized) before their values are folded into the accumulators
_CHUNK_BYTES = 4 << 20   # ... or this many record bytes (about a million values at most), whichever first


def quantile_name(q: float) -> str:
    return f"p{round(q * 100):d}"


# ---------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------
class LogSketch:
    """DDSketch-style quantile sketch: log-spaced buckets with relative accuracy ``alpha``.

    A positive value x goes to bucket ``ceil(log_gamma(x))`` with gamma = (1+a)/(1-a), i.e.
    (gamma^(i-1), gamma^i]; negative values to a mirror store by magnitude; zeros are
    counted apart.  Every value in a bucket is within ``alpha`` (relative) of the bucket's
    representative ``2 gamma^i / (gamma + 1)``.  Mergeable: merging adds bucket counts.
    """

    def __init__(self, alpha: float = SKETCH_ALPHA, max_bins: int = SKETCH_MAX_BINS):
        self.alpha = alpha
        self.gamma = (1 + alpha) / (1 - alpha)
        self._ln_gamma = math.log(self.gamma)
        self.max_bins = max_bins
        self.pos: dict[int, int] = {}
        self.neg: dict[int, int] = {}
        self.zero = 0
        self.count = 0

    def _store(self, store: dict, magnitudes: np.ndarray) -> None:
        if not magnitudes.size:
            return
        idx = np.ceil(np.log(magnitudes) / self._ln_gamma).astype(np.int64)
        keys, counts = np.unique(idx, return_counts=True)
        for k, c in zip(keys.tolist(), counts.tolist()):
            store[k] = store.get(k, 0) + c
        self._collapse(store)

    def _collapse(self, store: dict) -> None:
        if len(store) <= self.max_bins:
            return
        keys = sorted(store)
        cut = len(keys) - self.max_bins  # merge keys[0..cut] into keys[cut]
        total = sum(store.pop(k) for k in keys[:cut])
        store[keys[cut]] += total

    def add(self, values: np.ndarray) -> None:
        """Add finite float64 values."""
        self.count += int(values.size)
        self.zero += int(np.count_nonzero(values == 0))
        self._store(self.pos, values[values > 0])
        self._store(self.neg, -values[values < 0])

    def merge(self, other: "LogSketch") -> None:
        for mine, theirs in ((self.pos, other.pos), (self.neg, other.neg)):
            for k, c in theirs.items():
                mine[k] = mine.get(k, 0) + c
            self._collapse(mine)
        self.zero += other.zero
        self.count += other.count

    def _value(self, index: int) -> float:
        return 2.0 * self.gamma ** index / (self.gamma + 1.0)

    def buckets(self) -> tuple[np.ndarray, np.ndarray]:
        """(representative values ascending, counts)."""
        neg = sorted(self.neg, reverse=True)
        pos = sorted(self.pos)
        values = [-self._value(k) for k in neg] + ([0.0] if self.zero else []) + [self._value(k) for k in pos]
        counts = [self.neg[k] for k in neg] + ([self.zero] if self.zero else []) + [self.pos[k] for k in pos]
        return np.asarray(values, dtype=np.float64), np.asarray(counts, dtype=np.int64)

    def quantiles(self, qs: Iterable[float]) -> list[float]:
        """Value at rank floor(q * (count - 1)) (0-based), to within ``alpha`` relative."""
        values, counts = self.buckets()
        cum = np.cumsum(counts)
        out = []
        for q in qs:
            rank = math.floor(q * (self.count - 1))
            out.append(float(values[int(np.searchsorted(cum, rank, side="right"))]))
        return out


class NumericSummary:
    """Mergeable summary of a stream of numbers (see the module doc for what is exact)."""

    def __init__(self) -> None:
        self.count = 0
        self.nan = self.posinf = self.neginf = 0
        self.finite = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.min: int | float | None = None
        self.max: int | float | None = None
        self.integer = True
        self.kept: list[np.ndarray] | None = []  # the values, while at most EXACT_LIMIT
        self.sketch = LogSketch()

    def add(self, values: np.ndarray) -> None:
        if not values.size:
            return
        self.count += int(values.size)
        if values.dtype.kind == "f":
            self.integer = False
            ok = np.isfinite(values)
            if not ok.all():
                self.nan += int(np.count_nonzero(np.isnan(values)))
                self.posinf += int(np.count_nonzero(values == np.inf))
                self.neginf += int(np.count_nonzero(values == -np.inf))
                values = values[ok]
                if not values.size:
                    return
        lo, hi = values.min().item(), values.max().item()
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        f = values.astype(np.float64, copy=False)
        n_b = int(f.size)
        mean_b = float(f.mean())
        m2_b = float(np.square(f - mean_b).sum())
        self._combine(n_b, mean_b, m2_b)
        self.sketch.add(f)
        if self.kept is not None:
            if self.finite <= EXACT_LIMIT:
                self.kept.append(values.copy())
            else:
                self.kept = None

    def _combine(self, n_b: int, mean_b: float, m2_b: float) -> None:
        n_a = self.finite
        n = n_a + n_b
        delta = mean_b - self.mean
        self.mean += delta * n_b / n
        self.m2 += m2_b + delta * delta * n_a * n_b / n
        self.finite = n

    def merge(self, other: "NumericSummary") -> None:
        self.count += other.count
        self.nan += other.nan
        self.posinf += other.posinf
        self.neginf += other.neginf
        self.integer = self.integer and other.integer
        if other.finite:
            self.min = other.min if self.min is None else min(self.min, other.min)
            self.max = other.max if self.max is None else max(self.max, other.max)
            self._combine(other.finite, other.mean, other.m2)
        self.sketch.merge(other.sketch)
        if self.kept is not None and other.kept is not None and self.finite <= EXACT_LIMIT:
            self.kept.extend(other.kept)
        else:
            self.kept = None

    @property
    def exact(self) -> bool:
        return self.kept is not None

    def _values(self) -> np.ndarray:
        return np.sort(np.concatenate(self.kept)) if self.kept else np.empty(0)

    def quantiles(self, qs: Iterable[float] = QUANTILES) -> list:
        qs = list(qs)
        if not self.finite:
            return [None] * len(qs)
        if self.exact:
            values = self._values()
            return [values[math.floor(q * (values.size - 1))].item() for q in qs]
        estimates = [min(max(v, self.min), self.max) for v in self.sketch.quantiles(qs)]
        if self.integer:  # exact when alpha*|v| < 0.5; else within alpha*|v| + 0.5
            return [int(round(v)) for v in estimates]
        return estimates

    def histogram_edges(self, buckets: int = HISTOGRAM_BUCKETS) -> np.ndarray:
        lo, hi = self.min, self.max
        if lo == hi:
            return np.array([lo - 0.5, hi + 0.5], dtype=np.float64)
        if self.integer and hi - lo + 1 <= max(buckets, INTEGER_BARS):
            return np.arange(lo, hi + 2, dtype=np.float64) - 0.5
        edges = np.linspace(float(lo), float(hi), buckets + 1)
        edges[-1] = float(hi)
        return edges

    def histogram(self, buckets: int = HISTOGRAM_BUCKETS) -> tuple[list[float], list[int]]:
        """(edges, counts); numpy's convention: buckets are [a, b) except the last, [a, b]."""
        if not self.finite:
            return [], []
        edges = self.histogram_edges(buckets)
        if self.exact:
            counts, _ = np.histogram(self._values().astype(np.float64), bins=edges)
        else:
            values, weights = self.sketch.buckets()
            values = np.clip(values, float(self.min), float(self.max))
            counts, _ = np.histogram(values, bins=edges, weights=weights)
        return edges.tolist(), [int(c) for c in counts]

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"count": self.count, "finite": self.finite, "nan": self.nan,
                               "posinf": self.posinf, "neginf": self.neginf, "integer": self.integer,
                               "exact": self.exact}
        if self.finite:
            edges, counts = self.histogram()
            out.update(min=self.min, max=self.max, mean=self.mean, std=math.sqrt(max(self.m2, 0.0) / self.finite),
                       distinct=int(np.unique(self._values()).size) if self.exact else None,
                       quantiles=dict(zip(map(quantile_name, QUANTILES), self.quantiles())),
                       histogram={"edges": edges, "counts": counts})
        else:
            out.update(min=None, max=None, mean=None, std=None, distinct=0 if self.exact else None, quantiles={},
                       histogram={"edges": [], "counts": []})
        return out


# ---------------------------------------------------------------------------------------
# Strings
# ---------------------------------------------------------------------------------------
def _key(value: bytes):
    """How a value is counted: itself, or (digest, prefix, length) when it is long."""
    if len(value) <= _LONG_VALUE:
        return value
    return (hashlib.blake2b(value, digest_size=16).digest(), value[:64], len(value))


def _hash64(key) -> int:
    data = key[0] if isinstance(key, tuple) else key
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class StringSummary:
    """Values, distinct values and top values of a stream of byte strings (see the module doc)."""

    def __init__(self) -> None:
        self.count = 0
        self.counts: Counter = Counter()
        self.exact = True
        self.count_error = 0          # Misra-Gries: each count is low by at most this
        self.registers: np.ndarray | None = None  # HyperLogLog, once not exact

    def _hll_add(self, keys: Iterable) -> None:
        if self.registers is None:
            self.registers = np.zeros(1 << HLL_P, dtype=np.uint8)
        idx, ranks = [], []
        mask, rest_bits = (1 << HLL_P) - 1, 64 - HLL_P
        for k in keys:
            h = _hash64(k)
            idx.append(h & mask)
            ranks.append(rest_bits - (h >> HLL_P).bit_length() + 1)
        if idx:
            np.maximum.at(self.registers, np.asarray(idx, dtype=np.int64), np.asarray(ranks, dtype=np.uint8))

    def _reduce(self) -> None:
        """Misra-Gries: keep TOP_CAPACITY counters by subtracting the (capacity+1)-th largest count."""
        if len(self.counts) <= TOP_CAPACITY:
            return
        c = sorted(self.counts.values(), reverse=True)[TOP_CAPACITY]
        self.counts = Counter({k: n - c for k, n in self.counts.items() if n > c})
        self.count_error += c

    def _go_approximate(self) -> None:
        self.exact = False
        self._hll_add(self.counts.keys())  # every distinct value so far is a key while exact

    def add(self, values: list[bytes]) -> None:
        for i in range(0, len(values), TOP_CAPACITY):  # slices: at most 3 x TOP_CAPACITY counters at once
            self._add(values[i:i + TOP_CAPACITY])

    def _add(self, values: list[bytes]) -> None:
        if not values:
            return
        self.count += len(values)
        keys = values if max(map(len, values)) <= _LONG_VALUE else [_key(v) for v in values]
        self.counts.update(keys)
        if self.exact:
            if len(self.counts) > TOP_CAPACITY:
                self._go_approximate()
                self._reduce()
        else:
            self._hll_add(keys)
            if len(self.counts) > 2 * TOP_CAPACITY:  # reduce in batches: amortized O(1) per value
                self._reduce()

    def merge(self, other: "StringSummary") -> None:
        self.count += other.count
        if self.exact and other.exact:
            self.counts.update(other.counts)
            if len(self.counts) > TOP_CAPACITY:
                self._go_approximate()
                self._reduce()
            return
        if self.exact:
            self._go_approximate()
        theirs = other.registers
        if other.exact:
            tmp = StringSummary()
            tmp._hll_add(other.counts.keys())
            theirs = tmp.registers
        np.maximum(self.registers, theirs, out=self.registers)
        self.counts.update(other.counts)
        self.count_error += other.count_error
        self._reduce()

    def distinct(self) -> int:
        if self.exact:
            return len(self.counts)
        m = 1 << HLL_P
        regs = self.registers.astype(np.float64)
        estimate = (0.7213 / (1 + 1.079 / m)) * m * m / float(np.sum(np.exp2(-regs)))
        zeros = int(np.count_nonzero(self.registers == 0))
        if estimate <= 2.5 * m and zeros:
            estimate = m * math.log(m / zeros)
        return int(round(estimate))

    def top(self, k: int = TOP_SHOWN) -> list[tuple[Any, int]]:
        def order(item):
            key, n = item
            return (-n, key[1] if isinstance(key, tuple) else key)
        return sorted(self.counts.items(), key=order)[:k]

    def to_dict(self) -> dict:
        from tfrecord_io.core.decode import bytes_to_json

        top = []
        for key, n in self.top():
            if isinstance(key, tuple):
                top.append({"value": bytes_to_json(key[1]), "truncated": True, "length": key[2], "count": n})
            else:
                top.append({"value": bytes_to_json(key), "count": n})
        return {"count": self.count, "distinct": self.distinct(), "exact": self.exact,
                "count_error": self.count_error, "top": top}


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
    the vectorized decoder (:func:`tfrecord_io.core.arrow_decode.scan_batch`), and lists from the few
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
        """The slots of a feature in a chunk, vectorized (an ``arrow_decode.Values``)."""
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


_KIND_NAMES = ("none", "bytes_list", "float_list", "int64_list")  # by arrow_decode's kind codes


def file_stats(file, _context, report) -> SourceStats:
    """Statistics of one file (a :class:`~tfrecord_io.storage.sources.SourceFile`); runs in a worker.

    Records are decoded a chunk at a time by the vectorized decoder; the records it cannot take
    (not canonically serialized, or not Examples) are decoded one by one by ``decode_record``."""
    from tfrecord_io.storage.sources import iter_file_records

    out = SourceStats()
    chunk: list[bytes] = []
    offsets: list[int] = []
    size = 0
    for offset, data in iter_file_records(file, verify=True, report=report):
        chunk.append(data)
        offsets.append(offset)
        size += len(data)
        if len(chunk) >= _CHUNK_RECORDS or size >= _CHUNK_BYTES:
            _fold(out, file, chunk, offsets)
            chunk, offsets, size = [], [], 0
    _fold(out, file, chunk, offsets)
    out.files.append({"path": file.name, "records": out.records, "bytes": file.size})
    return out


def _fold(out: SourceStats, file, chunk: list[bytes], offsets: list[int]) -> None:
    """Decode a chunk of records and fold what they hold into ``out``."""
    from tfrecord_io.core.arrow_decode import scan_batch
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
        return exits.fail("stats", str(e), exits.USAGE)  # the source cannot be read
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
