"""Mergeable summaries of a stream of values, in bounded memory: what ``tfrecord-io stats`` folds
each feature's values into, one per worker, merged at the end.

* :class:`NumericSummary`: count, NaN/inf counts, min, max, mean and std (Chan et al.'s parallel
  merge), and quantiles and a histogram -- exact while it has seen at most ``EXACT_LIMIT``
  finite values (it keeps them), from a :class:`LogSketch` beyond;
* :class:`LogSketch`: a DDSketch-style quantile sketch, log-spaced buckets with relative accuracy
  ``SKETCH_ALPHA`` and at most ``SKETCH_MAX_BINS`` buckets per sign;
* :class:`StringSummary`: the values, distinct values and top values of byte strings -- exact
  while at most ``TOP_CAPACITY`` distinct values, then a HyperLogLog of 2^``HLL_P`` registers for
  the distinct count and a Misra-Gries summary for the top values.

What is exact and how close the rest is: :mod:`tfrecord_io.commands.stats`.  Imports only numpy
(and :func:`tfrecord_io.core.decode.bytes_to_json` for a top value's JSON form).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from typing import Any, Iterable

import numpy as np

from tfrecord_io.core.decode import bytes_to_json

__all__ = [
    "EXACT_LIMIT", "HISTOGRAM_BUCKETS", "HLL_P", "INTEGER_BARS", "QUANTILES", "SKETCH_ALPHA", "SKETCH_MAX_BINS",
    "TOP_CAPACITY", "TOP_SHOWN", "LogSketch", "NumericSummary", "StringSummary", "quantile_name",
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
        top = []
        for key, n in self.top():
            if isinstance(key, tuple):
                top.append({"value": bytes_to_json(key[1]), "truncated": True, "length": key[2], "count": n})
            else:
                top.append({"value": bytes_to_json(key), "count": n})
        return {"count": self.count, "distinct": self.distinct(), "exact": self.exact,
                "count_error": self.count_error, "top": top}
