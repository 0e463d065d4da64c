"""Train/eval splits the TFX way: which split each record goes to, the same on every engine.

``--split train=8,eval=1,test=1`` names the splits and their hash buckets.  As TFX ExampleGen
assigns them (``tfx/components/example_gen/utils.py``, ``_PartitionFn``): the *partition key*
is hashed with SHA-256, read as a big-endian integer, taken modulo the total number of buckets,
and the record goes to the first split whose cumulative bucket count exceeds that value.

The partition key:

* with ``--split-by FEATURE`` (``int64``, ``string`` or ``bytes``): the feature's serialized
  ``tf.train.Feature``, as TFX's ``partition_feature_name`` takes it -- so all rows with one
  value (one user, one day) land in one split;
* without it: the record's deterministic serialization (``SerializeToString(deterministic=True)``:
  the features map sorted by name), whatever order our encoder wrote the features in.

A user who moves from TFX with the same feature and buckets gets the same rows in each split
(``tests/test_splits.py`` checks the keys against TensorFlow's own protos).  A row with no value
for the split feature cannot be assigned: it is a reject that names the feature.

This module needs no engine and no TensorFlow.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import struct
from dataclasses import dataclass

from tfrecord_io.core.schema import Schema

__all__ = ["Splits", "feature_key", "record_key"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 values: two's complement, 10 bytes
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def feature_key(kind: str, values: list) -> bytes:
    """The serialized ``tf.train.Feature`` of a value list, as protobuf writes it (packed numbers)."""
    if kind == "int64_list":
        inner = _len_field(0x0A, b"".join(_varint(int(v)) for v in values)) if values else b""
        return _len_field(0x1A, inner)
    if kind == "float_list":
        inner = _len_field(0x0A, struct.pack(f"<{len(values)}f", *values)) if values else b""
        return _len_field(0x12, inner)
    if kind == "bytes_list":
        return _len_field(0x0A, b"".join(_len_field(0x0A, v) for v in values))
    return b""  # a Feature with no kind


def record_key(features: dict[str, tuple[str | None, list]]) -> bytes:
    """``tf.train.Example(...).SerializeToString(deterministic=True)`` of decoded features."""
    entries = b"".join(
        _len_field(0x0A, _len_field(0x0A, name.encode("utf-8")) + _len_field(0x12, feature_key(kind or "", values)))
        for name, (kind, values) in sorted(features.items(), key=lambda kv: kv[0].encode("utf-8")))
    return _len_field(0x0A, entries)  # the features field is always there (our encoder writes it, empty too)


@dataclass(frozen=True)
class Splits:
    """Split names, their buckets, and the optional split feature (see the module doc)."""

    names: tuple[str, ...]
    buckets: tuple[int, ...]
    feature: str | None = None

    @classmethod
    def parse(cls, text: str, feature: str | None = None, schema: Schema | None = None) -> "Splits":
        """``"train=8,eval=1,test=1"``; ValueError naming what is wrong."""
        names, buckets = [], []
        for item in (p.strip() for p in str(text).split(",") if p.strip()):
            name, sep, count = item.partition("=")
            if not sep or not _NAME.fullmatch(name.strip()) or not count.strip().isdigit() or int(count) < 1:
                raise ValueError(f"--split: expected NAME=BUCKETS[,NAME=BUCKETS...] with positive bucket counts "
                                 f"(e.g. train=8,eval=1,test=1), got {item!r}")
            names.append(name.strip())
            buckets.append(int(count))
        if len(names) < 2 or len(set(names)) != len(names):
            raise ValueError(f"--split needs two or more distinct split names, got {text!r}")
        if any(n.startswith(("_", ".")) or n.startswith("part-") for n in names):
            raise ValueError(f"--split names may not start with '_', '.' or 'part-': {names}")
        if feature is not None and schema is not None:
            f = next((x for x in schema.input_features if x.name == feature), None)
            if f is None:
                raise ValueError(f"--split-by {feature!r} names no feature of the schema")
            if f.type not in ("int64", "string", "bytes") or f.is_list:
                raise ValueError(f"--split-by {feature!r} must be a scalar int64, string or bytes feature "
                                 f"(as TFX's partition_feature_name), not {f.type}"
                                 f"{' list' if f.is_list else ''}")
            if schema.record_type != "example":
                raise ValueError("--split is for example records")
        return cls(tuple(names), tuple(buckets), feature)

    @property
    def cumulative(self) -> list[int]:
        out, total = [], 0
        for b in self.buckets:
            total += b
            out.append(total)
        return out

    def of_key(self, key: bytes) -> int:
        """The split index of a partition key."""
        cumulative = self.cumulative
        bucket = int.from_bytes(hashlib.sha256(key).digest(), "big") % cumulative[-1]
        return bisect.bisect(cumulative, bucket)

    def assign(self, records) -> tuple[list[int | None], list[str | None]]:
        """(split index per serialized record, reason per record it cannot assign)."""
        from tfrecord_io.core.decode import decode_example

        out: list[int | None] = []
        why: list[str | None] = []
        for data in records:
            features = decode_example(data if isinstance(data, bytes) else bytes(data))
            if self.feature is None:
                out.append(self.of_key(record_key(features)))
                why.append(None)
                continue
            kind, values = features.get(self.feature, (None, []))
            if not values:
                out.append(None)
                why.append(f"feature {self.feature!r}: no value to split by (--split-by {self.feature})")
                continue
            out.append(self.of_key(feature_key(kind, values)))
            why.append(None)
        return out, why

    def to_dict(self) -> dict:
        return {"splits": [{"name": n, "hash_buckets": b} for n, b in zip(self.names, self.buckets)],
                "partition_feature_name": self.feature}
