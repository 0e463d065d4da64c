"""The mirror of :mod:`tfrecord_io.core.codec`: serialized records back into Python values.

A small reader of the protobuf wire format for the messages in
``tensorflow/core/example/{example,feature}.proto`` (no TensorFlow import, so
``inspect`` and ``verify`` start fast and worker processes stay light)::

    Example          { Features features = 1; }
    SequenceExample  { Features context = 1; FeatureLists feature_lists = 2; }
    Features         { map<string, Feature> feature = 1; }
    FeatureLists     { map<string, FeatureList> feature_list = 1; }
    FeatureList      { repeated Feature feature = 1; }
    Feature          { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                                    Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
    Int64List { repeated int64 value = 1 [packed]; }

A decoded feature is ``(kind, values)``: ``kind`` is ``"bytes_list"``, ``"float_list"``,
``"int64_list"``, or ``None`` for a ``Feature`` with no kind set; ``values`` is a list of
``bytes``, ``float`` (the float32 value, exactly) or ``int``.

Example and SequenceExample share field 1, so an Example is byte for byte a
SequenceExample with a context and no ``feature_lists``: :func:`decode_record` returns
``feature_lists=None`` when field 2 is absent and callers decide (a record with
``feature_lists`` is a SequenceExample; one without is read as an Example unless the
source is known to hold SequenceExamples).

The reader follows protobuf's parsing rules (packed and unpacked numbers, map entries
with the key and value in either order or missing, a repeated sub-message merging, the
last entry for a map key winning) but is strict about everything else: a field number or
wire type these messages do not have is an error, which is how bytes that are not an
Example at all are told apart.  Errors are :class:`RecordDecodeError` (a ValueError)
naming the feature being decoded.

:func:`to_json` turns decoded values into JSON-ready data for ``inspect`` (see there for
how bytes and non-finite floats are shown).
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "KINDS", "RecordDecodeError", "DecodedRecord",
    "decode_record", "decode_example", "decode_sequence_example",
    "bytes_to_json", "float_to_json", "feature_to_json", "record_to_json",
]

#: Feature kinds by their field number in ``tf.train.Feature``.
KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}

_WIRE_NAMES = {0: "varint", 1: "fixed64", 2: "length-delimited", 3: "start-group", 4: "end-group", 5: "fixed32"}
_TWO_63, _TWO_64 = 1 << 63, 1 << 64


class RecordDecodeError(ValueError):
    """A record that is not a valid ``tf.train.Example`` / ``SequenceExample``."""


@dataclass(frozen=True)
class DecodedRecord:
    """``features`` (an Example's features, or a SequenceExample's context) and
    ``feature_lists`` (name -> list of per-step features; None when the record has none)."""

    features: dict[str, tuple[str | None, list]]
    feature_lists: dict[str, list[tuple[str | None, list]]] | None

    @property
    def is_sequence(self) -> bool:
        return self.feature_lists is not None


# ---------------------------------------------------------------------------------------
# Wire format
# ---------------------------------------------------------------------------------------
# The loops below are written out by hand (no generators, one-byte fast paths for tags
# and lengths) because stats and verify decode every record: this is ~3x faster than a
# generic field iterator.
_F1_LEN, _F2_LEN, _F3_LEN = 0x0A, 0x12, 0x1A   # (field 1|2|3, length-delimited) tag bytes
_F1_VARINT, _F1_I32 = 0x08, 0x0D
_KIND_BY_TAG = {_F1_LEN: "bytes_list", _F2_LEN: "float_list", _F3_LEN: "int64_list"}
_unpack_floats = struct.unpack_from


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode a base-128 varint at ``pos``; returns (value, position after it)."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise RecordDecodeError(f"truncated varint at byte {pos}")
        if shift >= 70:
            raise RecordDecodeError(f"varint longer than 10 bytes at byte {pos}")
        b = buf[pos]
        result |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return result & (_TWO_64 - 1), pos
        shift += 7


def _key(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """The tag (field number << 3 | wire type) at ``pos``; canonical tags of fields 1-15 are one byte."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return _varint(buf, pos, end)


def _payload(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    """[start, stop) of the length-delimited payload whose length varint is at ``pos``."""
    if pos < end and buf[pos] < 0x80:
        n, pos = buf[pos], pos + 1
    else:
        n, pos = _varint(buf, pos, end)
    if pos + n > end:
        raise RecordDecodeError(f"{what}: a field at byte {pos} claims {n} bytes, only {end - pos} left")
    return pos, pos + n


def _skip_error(what: str, key: int, pos: int) -> RecordDecodeError:
    number, wire = key >> 3, key & 7
    if wire in (3, 4, 6, 7):
        return RecordDecodeError(f"{what}: unsupported wire type {wire} "
                                 f"({_WIRE_NAMES.get(wire, 'invalid')}) at byte {pos}")
    return RecordDecodeError(f"{what}: unexpected field {number} ({_WIRE_NAMES.get(wire, wire)}) at byte {pos}")


# ---------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------
def _parse_list(buf: bytes, pos: int, end: int, kind: str, values: list) -> None:
    """Append the values of a BytesList / FloatList / Int64List at [pos, end) to ``values``."""
    while pos < end:
        at = pos
        key, pos = _key(buf, pos, end)
        if key == _F1_LEN:
            a, pos = _payload(buf, pos, end, kind)
            if kind == "bytes_list":
                values.append(buf[a:pos])
            elif kind == "float_list":  # packed
                n, rem = divmod(pos - a, 4)
                if rem:
                    raise RecordDecodeError(f"float_list: packed floats of {pos - a} bytes at byte {a}, "
                                            f"not a multiple of 4")
                if n <= 256:
                    values.extend(_unpack_floats(f"<{n}f", buf, a))
                else:
                    values.extend(np.frombuffer(buf, "<f4", n, a).tolist())
            else:  # int64_list, packed varints
                p = a
                while p < pos:
                    v = buf[p]
                    if v < 0x80:
                        p += 1
                    else:
                        v, p = _varint(buf, p, pos)
                        if v >= _TWO_63:
                            v -= _TWO_64
                    values.append(v)
        elif key == _F1_I32 and kind == "float_list":  # unpacked float
            if pos + 4 > end:
                raise RecordDecodeError(f"float_list: truncated float at byte {pos}")
            values.append(_unpack_floats("<f", buf, pos)[0])
            pos += 4
        elif key == _F1_VARINT and kind == "int64_list":  # unpacked int64
            v, pos = _varint(buf, pos, end)
            values.append(v - _TWO_64 if v >= _TWO_63 else v)
        else:
            raise _skip_error(kind, key, at)


def _parse_feature(buf: bytes, pos: int, end: int, state: list) -> None:
    """Parse a ``Feature`` at [pos, end) into ``state = [kind, values]`` (merging, as protobuf does)."""
    while pos < end:
        at = pos
        key, pos = _key(buf, pos, end)
        kind = _KIND_BY_TAG.get(key)
        if kind is None:
            raise _skip_error("Feature", key, at)
        a, pos = _payload(buf, pos, end, "Feature")
        if state[0] != kind:  # setting another member of a oneof clears the previous one
            state[0], state[1] = kind, []
        _parse_list(buf, a, pos, kind, state[1])


def _map_entries(buf: bytes, pos: int, end: int, what: str) -> list[tuple[str, list[tuple[int, int]]]]:
    """``(name, [(start, stop), ...])`` for each entry of a ``map<string, Message>``, in order."""
    out = []
    while pos < end:
        at = pos
        key, pos = _key(buf, pos, end)
        if key != _F1_LEN:
            raise _skip_error(what, key, at)
        a, pos = _payload(buf, pos, end, what)
        name = b""
        value_ranges = []
        while a < pos:
            at = a
            k2, a = _key(buf, a, pos)
            if k2 == _F1_LEN:
                c, a = _payload(buf, a, pos, f"{what} entry")
                name = buf[c:a]
            elif k2 == _F2_LEN:
                c, a = _payload(buf, a, pos, f"{what} entry")
                value_ranges.append((c, a))  # a repeated sub-message merges: keep every part
            else:
                raise _skip_error(f"{what} entry", k2, at)
        try:
            out.append((name.decode("utf-8"), value_ranges))
        except UnicodeDecodeError as e:
            raise RecordDecodeError(f"{what}: a feature name is not valid UTF-8: {name!r}") from e
    return out


def _parse_features(buf: bytes, ranges: list[tuple[int, int]], label: str) -> dict:
    out: dict[str, tuple[str | None, list]] = {}
    for pos, end in ranges:
        for name, value_ranges in _map_entries(buf, pos, end, "Features"):
            state: list = [None, []]
            try:
                for c, d in value_ranges:
                    _parse_feature(buf, c, d, state)
            except RecordDecodeError as e:
                raise RecordDecodeError(f"{label} {name!r}: {e}") from e
            out[name] = (state[0], state[1])  # a later entry for the same key replaces it
    return out


def _parse_feature_lists(buf: bytes, ranges: list[tuple[int, int]]) -> dict:
    out: dict[str, list[tuple[str | None, list]]] = {}
    for pos, end in ranges:
        for name, value_ranges in _map_entries(buf, pos, end, "FeatureLists"):
            steps: list[tuple[str | None, list]] = []
            try:
                for c, d in value_ranges:
                    while c < d:
                        at = c
                        key, c = _key(buf, c, d)
                        if key != _F1_LEN:
                            raise _skip_error("FeatureList", key, at)
                        a, c = _payload(buf, c, d, "FeatureList")
                        state: list = [None, []]
                        _parse_feature(buf, a, c, state)
                        steps.append((state[0], state[1]))
            except RecordDecodeError as e:
                raise RecordDecodeError(f"sequence feature {name!r}, step {len(steps)}: {e}") from e
            out[name] = steps
    return out


def decode_record(data: bytes) -> DecodedRecord:
    """Decode a serialized ``tf.train.Example`` or ``tf.train.SequenceExample``.

    ``feature_lists`` is None when the record has no field 2 (then it is an Example, or a
    SequenceExample with only a context: the bytes are the same).
    """
    if not isinstance(data, bytes):
        try:
            data = memoryview(data).tobytes()
        except TypeError as e:
            raise TypeError(f"decode_record: expected bytes, got {type(data).__name__}") from e
    features_ranges: list[tuple[int, int]] = []
    lists_ranges: list[tuple[int, int]] | None = None
    pos, end = 0, len(data)
    try:
        while pos < end:
            at = pos
            key, pos = _key(data, pos, end)
            if key == _F1_LEN:
                a, pos = _payload(data, pos, end, "record")
                features_ranges.append((a, pos))
            elif key == _F2_LEN:
                a, pos = _payload(data, pos, end, "record")
                lists_ranges = (lists_ranges or []) + [(a, pos)]
            else:
                raise _skip_error("record", key, at)
        features = _parse_features(data, features_ranges,
                                   "context feature" if lists_ranges is not None else "feature")
        lists = _parse_feature_lists(data, lists_ranges) if lists_ranges is not None else None
    except RecordDecodeError as e:
        raise RecordDecodeError(f"not a valid tf.train.Example or SequenceExample: {e}") from e
    return DecodedRecord(features, lists)


def decode_example(data: bytes) -> dict[str, tuple[str | None, list]]:
    """Decode a serialized ``tf.train.Example`` into ``{name: (kind, values)}``."""
    rec = decode_record(data)
    if rec.feature_lists is not None:
        raise RecordDecodeError("record has feature_lists: it is a SequenceExample, not an Example")
    return rec.features


def decode_sequence_example(data: bytes) -> tuple[dict, dict]:
    """Decode a serialized ``tf.train.SequenceExample`` into ``(context, feature_lists)``.

    ``context`` is ``{name: (kind, values)}``; ``feature_lists`` is ``{name: [(kind, values), ...]}``
    (one item per step; empty when the record has none).
    """
    rec = decode_record(data)
    return rec.features, (rec.feature_lists or {})


# ---------------------------------------------------------------------------------------
# Readable (JSON) form
# ---------------------------------------------------------------------------------------
def bytes_to_json(value: bytes) -> Any:
    """A ``bytes`` value as JSON: a string when it is valid UTF-8, else ``{"base64": "..."}``."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def float_to_json(value: float) -> Any:
    """A float32 value as JSON: its shortest float32 spelling; ``"NaN"``, ``"Infinity"`` or
    ``"-Infinity"`` (strings) for values JSON has no number for."""
    if math.isfinite(value):
        return float(str(np.float32(value)))
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def feature_to_json(feature: tuple[str | None, list]) -> dict:
    """``(kind, values)`` as ``{kind: [values...]}`` (``{}`` for a Feature with no kind)."""
    kind, values = feature
    if kind is None:
        return {}
    if kind == "bytes_list":
        return {kind: [bytes_to_json(v) for v in values]}
    if kind == "float_list":
        return {kind: [float_to_json(v) for v in values]}
    return {kind: list(values)}


def record_to_json(record: DecodedRecord, *, sequence: bool | None = None,
                   order: list[str] | None = None) -> dict:
    """A decoded record as JSON-ready data.

    Example: ``{"features": {name: {kind: [...]}}}``; SequenceExample:
    ``{"context": {...}, "feature_lists": {name: [{kind: [...]}, ...]}}``.  ``sequence``
    forces the layout (default: a SequenceExample when the record has feature_lists).
    Features come in ``order`` (names not in it follow, sorted), else sorted by name.
    """
    def ordered(d: dict) -> list[str]:
        known = [n for n in (order or []) if n in d]
        return known + sorted(n for n in d if n not in set(known))

    features = {n: feature_to_json(record.features[n]) for n in ordered(record.features)}
    if sequence is None:
        sequence = record.is_sequence
    if not sequence:
        return {"features": features}
    lists = record.feature_lists or {}
    return {"context": features,
            "feature_lists": {n: [feature_to_json(s) for s in lists[n]] for n in ordered(lists)}}
