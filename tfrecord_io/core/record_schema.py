"""What decoded records hold, and the schema they imply: the one inference rule for every reader.

``tfrecord-io inspect`` shows :func:`describe_records` of a source without a manifest, and
``spark.read.format("tfrecord")`` types the columns of files that others wrote (TensorFlow, Beam,
spark-tfrecord) by :func:`schema_from_records`: both from the same description, so what ``inspect``
guesses is what the data source reads.

Per feature (and per feature list, per step):

* the type is the kind seen most often: ``int64_list`` -> ``int64``, ``float_list`` -> ``float``,
  ``bytes_list`` -> ``string``, or ``bytes`` when any value is not UTF-8;
* the shape is scalar when every record that holds the feature has exactly one value, ``[k]``
  when every one has the same ``k`` values (``k`` > 1), and ``[-1]`` (a variable-length list)
  otherwise -- a feature missing from some records does not make it a list;
* feature lists make SequenceExample records; their context's first feature (by name) is the
  schema's ``group_by`` (a SequenceExample schema needs one; nothing is grouped on reading).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from tfrecord_io.core.decode import DecodedRecord, decode_record
from tfrecord_io.core.schema import Feature, Schema

__all__ = ["describe_records", "schema_from_records"]

_TYPES = {"int64_list": "int64", "float_list": "float"}


@dataclass
class _Seen:
    kinds: Counter = field(default_factory=Counter)
    present: int = 0
    min_values: int | None = None
    max_values: int | None = None
    min_steps: int | None = None
    max_steps: int | None = None
    utf8: bool = True

    def values(self, n: int) -> None:
        self.min_values = n if self.min_values is None else min(self.min_values, n)
        self.max_values = n if self.max_values is None else max(self.max_values, n)

    def steps(self, n: int) -> None:
        self.min_steps = n if self.min_steps is None else min(self.min_steps, n)
        self.max_steps = n if self.max_steps is None else max(self.max_steps, n)

    def feature(self, kind: str | None, values: list) -> None:
        self.kinds[str(kind)] += 1
        self.values(len(values))
        if kind == "bytes_list" and self.utf8:
            try:
                for v in values:
                    v.decode("utf-8")
            except UnicodeDecodeError:
                self.utf8 = False

    def describe(self, name: str, records: int, sequence: bool) -> dict:
        kinds = {k: n for k, n in self.kinds.most_common()}
        out: dict[str, Any] = {"name": name, "kinds": kinds, "present": self.present, "records": records}
        if sequence:
            out["steps"] = [self.min_steps, self.max_steps]
        out["values"] = [self.min_values, self.max_values]
        main = next((k for k in kinds if k != "None"), None)
        out["type"] = None if main is None else _TYPES.get(main, "string" if self.utf8 else "bytes")
        if self.min_values is not None and self.min_values == self.max_values and self.min_values >= 1:
            out["shape"] = None if self.min_values == 1 else [self.min_values]
        else:
            out["shape"] = [-1]
        return out


def describe_records(decoded: Sequence[DecodedRecord], *, sequence: bool | None = None) -> dict:
    """The features seen in decoded records (records that did not decode left out).

    Returns ``{"record_type", "records", "features": [...], "feature_lists": [...]}``; each
    feature has its ``kinds`` (with counts), ``present`` (records that have it), ``values``
    ([min, max] values per record, or per step), its ``type`` (None when no record set a kind)
    and ``shape`` (``None`` = scalar; module doc).  Feature lists also have ``steps`` ([min, max]).
    """
    if sequence is None:
        sequence = any(r.is_sequence for r in decoded)
    feats: dict[str, _Seen] = {}
    lists: dict[str, _Seen] = {}
    for r in decoded:
        for name, (kind, values) in r.features.items():
            s = feats.setdefault(name, _Seen())
            s.present += 1
            s.feature(kind, values)
        for name, steps in (r.feature_lists or {}).items():
            s = lists.setdefault(name, _Seen())
            s.present += 1
            s.steps(len(steps))
            for kind, values in steps:
                s.feature(kind, values)
    n = len(decoded)
    out = {"record_type": "sequence_example" if sequence else "example", "records": n,
           "features": [feats[k].describe(k, n, False) for k in sorted(feats)]}
    if sequence:
        out["feature_lists"] = [lists[k].describe(k, n, True) for k in sorted(lists)]
    return out


def schema_from_records(records: Iterable[bytes]) -> Schema:
    """The schema that serialized records imply (module doc); ValueError when there are none to
    infer from, or SequenceExamples without a context feature."""
    described = describe_records([decode_record(r) for r in records])
    if not described["records"]:
        raise ValueError("no records to infer a schema from: pass option('schema', ...) or .schema(...)")

    def features(entries: list[dict]) -> tuple[Feature, ...]:
        return tuple(Feature(name=e["name"], type=e["type"] or "string",
                             shape=None if e["shape"] is None else tuple(e["shape"])) for e in entries)

    context = features(described["features"])
    if described["record_type"] == "example":
        return Schema(features=context)
    if not context:
        raise ValueError("SequenceExamples without context features: pass option('schema', ...)")
    return Schema(record_type="sequence_example", context=context, sequence=features(described["feature_lists"]),
                  group_by=context[0].name)
