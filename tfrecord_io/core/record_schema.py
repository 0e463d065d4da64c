"""What decoded records hold, and the schema they imply: the one inference rule for every reader.

``spark.read.format("tfrecord")`` and ``read_batches`` type the columns of files that others wrote
(TensorFlow, Beam, TFX, spark-tfrecord) by :func:`infer_schema`, and ``tfrecord-io inspect`` shows
:meth:`Inference.describe` of the very same records (:func:`read_sample`): one inference, so what
inspect says a source holds is what they read.

Per feature (and per feature list, per step):

* the type is the kind of its values: ``int64_list`` -> ``int64``, ``float_list`` -> ``float``,
  ``bytes_list`` -> ``string``, or ``bytes`` when any value is not UTF-8.  A ``Feature`` with no
  kind set (an empty cell, as TFX's ExampleGen writes it) says nothing of the type: such a feature
  is *unknown* until a record gives it a kind.  ``int64`` and ``float`` seen for one feature
  widen to ``float``; any other pair of kinds is a conflict, an error naming both records (file,
  record, byte offset) and how to give the schema instead;
* the shape is scalar when every record that holds the feature has exactly one value, ``[k]``
  when every one has the same ``k`` values (``k`` > 1), and ``[-1]`` (a variable-length list)
  otherwise -- a feature missing from some records does not make it a list;
* feature lists make SequenceExample records; their context's first feature (by name) is the
  schema's ``group_by`` (a SequenceExample schema needs one; nothing is grouped on reading).

:func:`infer_schema` is the inference every reader of files without a manifest runs
(``spark.read.format("tfrecord")``, ``read_batches``): it samples the first records of every
file (``INFER_SAMPLE_RECORDS`` spread over the files, at least ``INFER_MIN_PER_FILE`` each), and
while a feature is still unknown reads on, file by file, up to ``INFER_MAX_RECORDS`` in all; a
feature unknown at that bound is read as a ``string`` list, and a note says so.  The sample is
scanned a batch at a time (:meth:`Inference.add_records`: the wire scan, compiled where the core
runs), which ends in the state the records would make one at a time (:meth:`Inference.add`,
``decode_record``; ``tests/test_record_inference.py``); the reading on is a record at a time, to
stop at the record that gives the last unknown feature its kind.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa

from tfrecord_io.core.decode import DecodedRecord, RecordDecodeError, decode_record
from tfrecord_io.core.schema import Feature, Schema
from tfrecord_io.core.wire_scan import KIND_CODE, KIND_NONE, scan_batch

__all__ = ["Inference", "describe_records", "infer_schema", "read_sample"]

_TYPES = {"int64_list": "int64", "float_list": "float"}
#: The scan's kind codes as :func:`decode_record` names the kinds.
_KIND_NAMES = {KIND_NONE: None, **{code: name for name, code in KIND_CODE.items()}}
#: The records sampled from the starts of the files, spread over them, and the least from each file.
INFER_SAMPLE_RECORDS = 10_000
INFER_MIN_PER_FILE = 20
#: The most records read in all while some feature still has no kind.
INFER_MAX_RECORDS = 200_000
_SCAN_RECORDS = 4096  # sample records scanned at once


@dataclass
class _Seen:
    kinds: Counter = field(default_factory=Counter)
    present: int = 0
    min_values: int | None = None
    max_values: int | None = None
    min_steps: int | None = None
    max_steps: int | None = None
    utf8: bool = True
    first: dict = field(default_factory=dict)  # kind -> (file, record, byte offset) first seen

    def values(self, n: int) -> None:
        self.min_values = n if self.min_values is None else min(self.min_values, n)
        self.max_values = n if self.max_values is None else max(self.max_values, n)

    def steps(self, n: int) -> None:
        self.min_steps = n if self.min_steps is None else min(self.min_steps, n)
        self.max_steps = n if self.max_steps is None else max(self.max_steps, n)

    def feature(self, kind: str | None, values: list, where: tuple | None = None) -> None:
        self.kinds[str(kind)] += 1
        if where is not None and kind is not None:
            self.first.setdefault(kind, where)
        self.values(len(values))
        if kind == "bytes_list" and self.utf8:
            try:
                for v in values:
                    v.decode("utf-8")
            except UnicodeDecodeError:
                self.utf8 = False

    def slots(self, values, where: Callable[[int], tuple]) -> None:
        """:meth:`feature` of every slot of a scan's :class:`~tfrecord_io.core.wire_scan.Values`
        (``where(slot)``: the record holding it), at once."""
        if not len(values.kind):
            return
        codes, first_slots, counts = np.unique(values.kind, return_index=True, return_counts=True)
        order = np.argsort(first_slots)  # the kinds in the order they come (describe's order of a tie)
        for code, slot, n in zip(codes[order].tolist(), first_slots[order].tolist(), counts[order].tolist()):
            kind = _KIND_NAMES[code]
            self.kinds[str(kind)] += n
            if kind is not None:
                self.first.setdefault(kind, where(slot))
        self.values(int(values.counts.min()))
        self.values(int(values.counts.max()))
        if self.utf8 and len(values.data):
            try:
                values.data.cast(pa.large_string())
            except pa.ArrowInvalid:
                self.utf8 = False

    def describe(self, name: str, records: int, sequence: bool) -> dict:
        """What was seen of the feature; :meth:`Inference.describe` adds its type and shape."""
        kinds = {k: n for k, n in self.kinds.most_common()}
        out: dict[str, Any] = {"name": name, "kinds": kinds, "present": self.present, "records": records}
        if sequence:
            out["steps"] = [self.min_steps, self.max_steps]
        out["values"] = [self.min_values, self.max_values]
        return out

    def shape(self) -> tuple[int, ...] | None:
        """Scalar (None) when every holder has one value, ``(k,)`` when each has k > 1, else ``(-1,)``."""
        if self.min_values is not None and self.min_values == self.max_values and self.min_values >= 1:
            return None if self.min_values == 1 else (self.min_values,)
        return (-1,)


def describe_records(decoded: Sequence[DecodedRecord]) -> dict:
    """:meth:`Inference.describe` of decoded records."""
    seen = Inference()
    for r in decoded:
        seen.add_decoded(r)
    return seen.describe()


class Inference:
    """The schema records imply, built a record at a time (module doc): :meth:`add` each record
    with where it is, :attr:`unknown` says which features have no kind yet, :meth:`schema` the
    result, :meth:`describe` what was seen with it.

    ``skip_undecodable``: a record that is not an Example or SequenceExample is counted in
    :attr:`undecodable` and left out (``inspect`` shows such sources); otherwise it raises."""

    def __init__(self, *, skip_undecodable: bool = False) -> None:
        self.feats: dict[str, _Seen] = {}
        self.lists: dict[str, _Seen] = {}
        self.records = 0
        self.undecodable = 0
        self.sequence = False
        self.skip_undecodable = skip_undecodable
        self.bound: int | None = None  # read_sample's max_records, for the note when it stopped there

    def add(self, data: bytes, uri: str, record: int, offset: int) -> None:
        try:
            decoded = decode_record(data)
        except RecordDecodeError:
            if not self.skip_undecodable:
                raise
            self.undecodable += 1
            return
        self.add_decoded(decoded, (uri, record, offset))

    def add_records(self, records: Sequence[bytes], uri: str, first: int, offsets: Sequence[int]) -> None:
        """Records ``first``, ``first + 1``... of ``uri`` at once, as :meth:`add` one at a time would
        take them: scanned together (:func:`~tfrecord_io.core.wire_scan.scan_batch`, the compiled
        core's where it runs), not decoded one by one in Python.  A batch with a record the scan
        leaves to ``decode_record`` (one not in the canonical layout) is added a record at a time."""
        scan = scan_batch(pa.array(records, pa.binary()))
        if scan.odd.any():
            for k, (data, offset) in enumerate(zip(records, offsets)):
                self.add(data, uri, first + k, offset)
            return

        def where(record: int) -> tuple:
            return uri, first + record, offsets[record]

        self.records += scan.n
        self.sequence |= bool(scan.has_lists.any())
        for name, sf in scan.features.items():
            seen = self.feats.setdefault(name, _Seen())
            seen.present += len(sf.records)
            seen.slots(sf.values, lambda slot: where(int(sf.records[slot])))
        for name, sl in scan.feature_lists.items():
            seen = self.lists.setdefault(name, _Seen())
            seen.present += len(sl.records)
            seen.steps(int(sl.steps.min()))
            seen.steps(int(sl.steps.max()))
            owner = np.repeat(sl.records, sl.steps)  # the record of each step
            seen.slots(sl.values, lambda slot: where(int(owner[slot])))

    def add_decoded(self, decoded: DecodedRecord, where: tuple | None = None) -> None:
        """One decoded record; ``where`` (file, record, byte offset) names it in a conflict."""
        self.records += 1
        self.sequence |= decoded.is_sequence
        for name, (kind, values) in decoded.features.items():
            seen = self.feats.setdefault(name, _Seen())
            seen.present += 1
            seen.feature(kind, values, where)
        for name, steps in (decoded.feature_lists or {}).items():
            seen = self.lists.setdefault(name, _Seen())
            seen.present += 1
            seen.steps(len(steps))
            for kind, values in steps:
                seen.feature(kind, values, where)

    @property
    def unknown(self) -> list[str]:
        """Features (and feature lists) seen with no kind yet."""
        return sorted(n for table in (self.feats, self.lists) for n, s in table.items() if not s.first)

    def _typed(self, name: str, seen: _Seen, notes: list[str]) -> Feature:
        """The feature's type and shape (module doc); ValueError for a conflict of kinds."""
        kinds = set(seen.first)
        if not kinds:
            notes.append(f"feature {name!r} has no value in the {self.records:,} records read: read as a list "
                         f"of strings (give the schema to type it)")
            kind = "bytes_list"
        elif kinds == {"int64_list", "float_list"}:
            kind = "float_list"  # widened: int64 values read as float
        elif len(kinds) > 1:
            (k1, w1), (k2, w2) = sorted(seen.first.items(), key=lambda kv: kv[1])[:2]
            raise ValueError(
                f"feature {name!r} is {k1} in {w1[0]} (record {w1[1]} at byte offset {w1[2]}) and {k2} in "
                f"{w2[0]} (record {w2[1]} at byte offset {w2[2]}): no one type reads both; give the schema "
                f"(spark.read.format('tfrecord').schema(...) or .option('schema', 'schema.yaml'); "
                f"read_batches(schema=...))")
        else:
            kind = next(iter(kinds))
        return Feature(name=name, type=_TYPES.get(kind, "string" if seen.utf8 else "bytes"), shape=seen.shape())

    def schema(self) -> tuple[Schema, list[str]]:
        """``(schema, notes)``: notes name each feature typed without evidence.  ValueError for
        no records, a conflict of kinds, or SequenceExamples without a context feature."""
        if not self.records:
            raise ValueError("no records to infer a schema from: pass option('schema', ...) or .schema(...)")
        notes: list[str] = []
        context = tuple(self._typed(n, self.feats[n], notes) for n in sorted(self.feats))
        if not self.sequence:
            return Schema(features=context), notes + self._bound_note()
        if not context:
            raise ValueError("SequenceExamples without context features: pass option('schema', ...)")
        sequence = tuple(self._typed(n, self.lists[n], notes) for n in sorted(self.lists))
        return Schema(record_type="sequence_example", context=context, sequence=sequence,
                      group_by=context[0].name), notes + self._bound_note()

    def _bound_note(self) -> list[str]:
        if self.bound is not None and self.unknown and self.records >= self.bound:
            return [f"stopped at {self.bound:,} records (the inference's bound) with {len(self.unknown)} "
                    f"feature(s) still without a value"]
        return []

    def describe(self) -> dict:
        """What the records hold and the schema read from them: ``{"record_type", "records",
        "features": [...], "feature_lists": [...] (SequenceExamples), "notes": [...]}``, and
        ``"error"``: why no schema reads them (a conflict of kinds, as :meth:`schema` raises it).

        Each feature has its ``kinds`` (with counts), ``present`` (records that have it),
        ``values`` ([min, max] values per record, or per step; feature lists also ``steps``), and
        the ``type`` and ``shape`` (``None`` = scalar) :meth:`schema` gives it -- ``None`` for a
        feature whose kinds conflict, with the ``conflict``."""
        n, notes = self.records, []

        def entry(name: str, seen: _Seen, sequence: bool) -> dict:
            out = seen.describe(name, n, sequence)
            try:
                f = self._typed(name, seen, notes)
            except ValueError as e:
                out.update(type=None, shape=None, conflict=str(e))
            else:
                out.update(type=f.type, shape=None if f.shape is None else list(f.shape))
            return out

        out: dict[str, Any] = {"record_type": "sequence_example" if self.sequence else "example", "records": n,
                               "features": [entry(k, self.feats[k], False) for k in sorted(self.feats)]}
        if self.sequence:
            out["feature_lists"] = [entry(k, self.lists[k], True) for k in sorted(self.lists)]
        out["notes"] = notes + self._bound_note()
        if n:
            try:
                self.schema()
            except ValueError as e:
                out["error"] = str(e)
        return out


def read_sample(uris: Sequence[str], records_of: Callable[[str], Iterable[tuple[int, bytes]]], *,
                sample: int = INFER_SAMPLE_RECORDS, min_per_file: int = INFER_MIN_PER_FILE,
                max_records: int = INFER_MAX_RECORDS, skip_undecodable: bool = False) -> Inference:
    """The records the inference reads (module doc), added to an :class:`Inference`:
    ``records_of(uri)`` yields a file's ``(offset, data)``.  Reads no file further than it must."""
    inference = Inference(skip_undecodable=skip_undecodable)
    inference.bound = max_records
    per_file = max(min_per_file, sample // max(1, len(uris)))
    for uri in uris:  # the first records of every file, scanned _SCAN_RECORDS at a time
        datas: list[bytes] = []
        offsets: list[int] = []
        taken = 0
        for offset, data in itertools.islice(records_of(uri), per_file):
            datas.append(data)
            offsets.append(offset)
            taken += 1
            if len(datas) == _SCAN_RECORDS:
                inference.add_records(datas, uri, taken - len(datas), offsets)
                datas, offsets = [], []
        if datas:
            inference.add_records(datas, uri, taken - len(datas), offsets)
    for uri in uris:  # then on, while a feature has no kind
        if not inference.unknown or inference.records >= max_records:
            break
        for k, (offset, data) in enumerate(records_of(uri)):
            if k < per_file:
                continue
            if not inference.unknown or inference.records >= max_records:
                break
            inference.add(data, uri, k, offset)
    return inference


def infer_schema(uris: Sequence[str], records_of: Callable[[str], Iterable[tuple[int, bytes]]], *,
                 sample: int = INFER_SAMPLE_RECORDS, min_per_file: int = INFER_MIN_PER_FILE,
                 max_records: int = INFER_MAX_RECORDS) -> tuple[Schema, list[str]]:
    """The schema of files without one (module doc), from :func:`read_sample`'s records:
    ``(schema, notes)``."""
    return read_sample(uris, records_of, sample=sample, min_per_file=min_per_file, max_records=max_records).schema()
