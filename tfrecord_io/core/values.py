"""The value rules, once: how a CSV cell or a JSON value becomes an ``int64``, ``float``, ``string``
or ``bytes`` value, and how a value is shown in a reject's reason.

Used by the parser both engines run (:mod:`tfrecord_io.conversion.parsing`) and by ``infer-schema``
(:mod:`tfrecord_io.commands.infer`), so that a schema ``infer-schema`` proposes converts the data it was
inferred from.  The rules (``docs/wire-contract.md``, "Input files and rejects"):

CSV cells (text)
    ``int64``: Java's ``Long.parseLong`` -- ``[+-]?[0-9]+``, in range, no spaces, no ``_``.
    ``float``: Java's ``Float.parseFloat`` -- surrounding spaces and control characters ignored,
    ``1.5e3``, ``.5``, ``1f``/``1d`` suffixes, ``NaN``, ``Infinity``, hex ``0x1p3`` -- plus Spark's
    ``Inf``/``-Inf``; correctly rounded to float32 from the decimal text by the parser.
    ``string``/``bytes``: any valid UTF-8.

JSON values
    ``int64``: a JSON integer in range, or ``true``/``false`` (1/0: ``tf.train.Example`` has no
    booleans); ``1.0`` is not an integer.  ``float``: any JSON number, or the strings ``NaN``,
    ``Infinity``, ``-Infinity``, ``INF`` (as Spark reads them).  ``string``: a JSON string
    (valid Unicode).  ``bytes``: a base64 JSON string (as Spark writes binary columns).
    Anything else is a reject naming the feature and what was expected.
"""

from __future__ import annotations

import base64
import binascii
import math
import re

from tfrecord_io.core.schema import Feature

__all__ = ["BadValue", "csv_kind", "java_float", "java_long", "json_kind", "json_scalar", "show"]

SHOW_CHARS = 60  # characters of a bad value shown in a reason


class BadValue(ValueError):
    """A value that does not convert to its feature's type (the message is the reject reason)."""


def show(value) -> str:
    """A bad value for a message: repr, cut to a readable length, bytes shown as text."""
    if isinstance(value, (bytes, bytearray)):  # shown as text, bad bytes as \\xNN
        text = "'" + bytes(value).decode("utf-8", "backslashreplace") + "'"
    else:
        text = repr(value) if not isinstance(value, (list, dict)) or len(value) < 50 else \
            f"<{type(value).__name__} of {len(value)}>"
    return text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS - 4] + "...'"


_JAVA_SPACE = "".join(chr(c) for c in range(33))
# re.ASCII: Java's grammar has ASCII digits only (Python's \d, float() and int() take any Unicode
# digit: "٣.٥" and "１.5", which Float.parseFloat and Spark refuse)
_JAVA_FLOAT = re.compile(r"[+-]?(?:NaN|Infinity|(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
                         r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+)[fFdD]?)", re.ASCII)
_JAVA_LONG = re.compile(r"[+-]?\d+", re.ASCII)


def java_float(text: str) -> float | None:
    """``Float.parseFloat`` (plus Spark's ``Inf``/``-Inf``), or None where Java would refuse."""
    if text == "Inf":
        return math.inf
    if text == "-Inf":
        return -math.inf
    s = text.strip(_JAVA_SPACE)
    if not _JAVA_FLOAT.fullmatch(s):
        return None
    if s.endswith("NaN"):
        return math.nan
    if s.endswith("Infinity"):
        return -math.inf if s.startswith("-") else math.inf
    body = s[:-1] if s[-1] in "fFdD" else s
    try:
        return float.fromhex(body) if "x" in body or "X" in body else float(body)
    except (ValueError, OverflowError):
        return None


def java_long(text: str) -> int | None:
    if not _JAVA_LONG.fullmatch(text):
        return None
    v = int(text)
    return v if -(2**63) <= v < 2**63 else None


def csv_kind(text: str) -> str:
    """The narrowest type a non-null CSV cell converts to: ``int64``, ``float`` or ``string``."""
    if java_long(text) is not None:
        return "int64"
    if java_float(text) is not None:
        return "float"
    return "string"


def json_kind(value) -> str | None:
    """The narrowest type a JSON scalar converts to (None for null): booleans and integers
    ``int64``, other numbers ``float``, strings (and nested values, kept as text) ``string``."""
    if value is None:
        return None
    if isinstance(value, bool) or (isinstance(value, int) and -(2**63) <= value < 2**63):
        return "int64"
    if isinstance(value, (int, float)):
        return "float"
    return "string"


_JSON_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf, "-Infinity": -math.inf,
                     "INF": math.inf, "+INF": math.inf, "-INF": -math.inf}


def json_scalar(v, f: Feature, what: str = ""):
    """A JSON scalar as feature ``f``'s value (None for null); BadValue naming the feature if not.
    ``what`` adds to "expected ..." (e.g. " in the list")."""
    if v is None:
        return None
    t = f.type
    if t == "int64":
        if isinstance(v, bool):
            return int(v)  # true/false: 1/0 (tf.train.Example has no booleans)
        if not isinstance(v, int):
            raise BadValue(f"feature {f.name!r}: expected an integer{what}, got {show(v)}")
        if not -(2**63) <= v < 2**63:
            raise BadValue(f"feature {f.name!r}: {v} is out of the int64 range")
        return v
    if t == "float":
        if isinstance(v, str) and v in _JSON_FLOAT_WORDS:
            return _JSON_FLOAT_WORDS[v]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise BadValue(f"feature {f.name!r}: expected a number{what}, got {show(v)}")
        try:
            return float(v)
        except OverflowError as e:
            raise BadValue(f"feature {f.name!r}: {v} is too large for a float") from e
    if not isinstance(v, str):
        raise BadValue(f"feature {f.name!r}: expected a string{what}, got {show(v)}")
    if t == "bytes":
        try:
            return base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError) as e:
            raise BadValue(f"feature {f.name!r}: bytes are base64 in JSON, and {show(v)} is not") from e
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadValue(f"feature {f.name!r}: not valid Unicode (a lone surrogate escape): {show(v)}") from e
    return v


