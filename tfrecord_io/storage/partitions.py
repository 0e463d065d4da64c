"""Hive-style partitioned outputs: ``<output>/cut=Ideal/color=E/part-...``, as Spark's file sources
and spark-tfrecord write them.

A partitioned output (``option("partitionBy", "cut")``, the job's ``--partition-by``) holds one
directory per value (per combination of values) of its partition columns, each a complete output
of its own (shards, ``_manifest.json``, ``_SUCCESS``: ``make_dataset("out/cut=Ideal")`` reads one
partition).  The top ``_manifest.json`` lists every shard (``cut=Ideal/part-00000-of-00002.tfrecord``)
with its record index, so the root reads as one output too, plus ``partition_by`` (the columns and
their feature types) and ``partitions`` (per directory: its values, records and files).

Unlike Hive and spark-tfrecord, the partition columns stay in every record as well: a TFRecord
file read on its own (TensorFlow has no partition discovery) still has them, and the loader gets
them as ordinary features.

Directory names: ``name=value``, the value as Spark prints it (integers in decimal, booleans
``true``/``false``, dates ``YYYY-MM-DD``), with the characters Hive escapes written ``%XX``
(Spark's ``ExternalCatalogUtils.escapePathName``); a null or empty value is Hive's
``__HIVE_DEFAULT_PARTITION__``.  A value no directory can be named after -- one holding a NUL
byte (Hive does not escape it, and no file system takes it), or one whose ``name=value`` is longer
than the :data:`MAX_NAME_BYTES` a name may be on local disks and HDFS -- makes its row a reject
(:func:`unusable_values`), naming the column; the rest of the input converts.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

__all__ = ["DEFAULT_PARTITION", "MAX_NAME_BYTES", "PARTITION_ARROW_TYPES", "check_partition_columns", "escape",
           "partition_codes", "partition_dir", "parse_partition_path", "prune", "select_partitions", "unescape",
           "unusable_values"]

#: The comparisons :func:`prune` decides from a partition directory's value.
PRUNE_OPS = ("=", "in", "<", "<=", ">", ">=", "is_null", "is_not_null")

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# What Hive (and Spark) escape in a partition value: control characters and these.
_ESCAPED = frozenset(chr(c) for c in range(1, 0x20)) | frozenset('"#%\'*/:=?\\\x7f{[]^')
#: Column kinds a partition column may have (Arrow type predicates' names, for messages).
PARTITION_ARROW_TYPES = "a string, integer, boolean or date column"


def escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "%" and _is_hex(text[i + 1:i + 3]):
            out.append(chr(int(text[i + 1:i + 3], 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _is_hex(s: str) -> bool:
    return len(s) == 2 and all(c in "0123456789abcdefABCDEF" for c in s)


def partition_dir(values: dict[str, str | None]) -> str:
    """``{"cut": "Ideal", "color": "E"}`` -> ``cut=Ideal/color=E`` (in the order given)."""
    return "/".join(f"{escape(k)}={DEFAULT_PARTITION if v is None or v == '' else escape(v)}"
                    for k, v in values.items())


def parse_partition_path(relative: str) -> dict[str, str | None]:
    """The ``name=value`` directories of a file's path relative to its output, outermost first
    (``{}`` for a file at the top); a default partition's value is None."""
    values: dict[str, str | None] = {}
    for part in relative.split("/")[:-1]:
        name, eq, value = part.partition("=")
        if not eq or not name:
            return {}
        raw = unescape(value)
        values[unescape(name)] = None if raw == DEFAULT_PARTITION else raw
    return values


def _is_partition_type(t) -> bool:
    import pyarrow as pa

    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
            or pa.types.is_boolean(t) or pa.types.is_date(t))


def check_partition_columns(columns: Sequence[str], types: dict[str, Any], where: str) -> None:
    """ValueError unless each of ``columns`` is one of ``types`` (name -> Arrow type) of a kind a
    partition directory can name."""
    if not columns:
        raise ValueError("partitionBy names no column")
    if len(set(columns)) != len(columns):
        raise ValueError(f"partitionBy names a column twice: {list(columns)}")
    for c in columns:
        if c not in types:
            raise ValueError(f"partition column {c!r} is not a column of {where} ({', '.join(sorted(types))})")
        if not _is_partition_type(types[c]):
            raise ValueError(f"partition column {c!r} is {types[c]}: partition by {PARTITION_ARROW_TYPES}")


def partition_codes(columns: Iterable[Any], names: Sequence[str]) -> tuple[Any, list[str], list[dict]]:
    """Each row's partition: ``(codes, dirs, values)`` -- ``dirs[codes[i]]`` is row i's directory,
    ``values[codes[i]]`` its values by column (None for null) -- from the partition columns' Arrow
    arrays (one per name).  Vectorized: Python runs once per distinct partition, not per row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    indices, dictionaries = [], []
    for col in columns:
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        text = col if pa.types.is_string(col.type) else pc.cast(col, pa.string())
        encoded = pc.dictionary_encode(text, null_encoding="encode")
        dictionaries.append(encoded.dictionary.to_pylist())
        indices.append(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64))
    if not indices:
        raise ValueError("no partition column")
    stacked = np.stack(indices, axis=1)
    unique, codes = np.unique(stacked, axis=0, return_inverse=True)
    values = [{n: d[int(k)] for n, d, k in zip(names, dictionaries, row)} for row in unique]
    return codes.reshape(-1), [partition_dir(v) for v in values], values


#: The longest name (bytes of UTF-8) of a file or directory: NAME_MAX of Linux file systems, and
#: HDFS's ``dfs.namenode.fs-limits.max-component-length`` default.
MAX_NAME_BYTES = 255


def _unusable(name: str, value: str) -> str | None:
    """Why ``name=value`` cannot name a directory (a reject's reason, naming the column), or None."""
    if "\x00" in value:
        return f"partition column {name!r}: its value holds a NUL byte, which no directory name can hold"
    size = len(f"{escape(name)}={escape(value)}".encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        return (f"partition column {name!r}: its value makes a directory name of {size} bytes, longer than the "
                f"{MAX_NAME_BYTES} a file system allows")
    return None


def unusable_values(columns: Iterable[Any], names: Sequence[str]) -> dict[int, str]:
    """The rows whose partition values no directory can be named after (module doc): ``{row: reason}``,
    the first such column's reason per row, from the partition columns' Arrow arrays (one per name).
    Python runs once per distinct value, not per row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    refused: dict[int, str] = {}
    for name, col in zip(names, columns):
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            continue  # integers, booleans and dates always make a name
        encoded = pc.dictionary_encode(col)
        bad = {k: why for k, value in enumerate(encoded.dictionary.to_pylist())
               if value is not None and (why := _unusable(name, value)) is not None}
        if not bad:
            continue
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        for k, why in bad.items():
            for row in np.flatnonzero(indices == k):
                refused.setdefault(int(row), why)
    return refused


def select_partitions(source, wanted: dict | None):
    """``source`` (a :class:`~tfrecord_io.storage.sources.Source`) with only the files of the
    partitions ``wanted`` names: ``{"cut": "Ideal"}`` or ``{"cut": ["Ideal", "Good"], "year": 2024}``
    (values compared as their directory text; None: the null partition).  ValueError when the
    source has no such partition column, or no partition matches."""
    import dataclasses

    if wanted is None:
        return source
    if not isinstance(wanted, dict) or not wanted:
        raise TypeError(f"partitions must be a dict of column -> value(s), got {wanted!r}")
    want = {}
    for name, value in wanted.items():
        values = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
        want[name] = {None if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in values}
    found: dict[str, set] = {}
    kept = []
    for f in source.files:
        values = parse_partition_path(f.name)
        for k, v in values.items():
            found.setdefault(k, set()).add(v)
        if all(k in values and values[k] in vs for k, vs in want.items()):
            kept.append(f)
    unknown = sorted(set(want) - set(found))
    if unknown:
        has = f"its partition columns are {sorted(found)}" if found else "it is not partitioned"
        raise ValueError(f"{source.uri}: no partition column {', '.join(map(repr, unknown))} ({has})")
    if not kept:
        shown = "; ".join(f"{k}: {', '.join(sorted(str(v) for v in vs))}" for k, vs in sorted(found.items()))
        raise ValueError(f"{source.uri}: no partition matches {wanted!r} (it has {shown})")
    return dataclasses.replace(source, files=tuple(kept))


def _as_path_text(literal: Any) -> str | None:
    """A filter's literal as a directory would spell it (Spark's spelling), or None: not comparable."""
    import datetime

    if isinstance(literal, bool):
        return "true" if literal else "false"
    if isinstance(literal, (int, str)):
        return str(literal)
    if isinstance(literal, datetime.date) and not isinstance(literal, datetime.datetime):
        return literal.isoformat()
    return None


def _may_hold(value: str | None, op: str, literal: Any) -> bool:
    """Whether a partition whose directory says ``value`` may hold rows where ``column op literal``
    (True whenever it cannot tell: pruning only ever leaves out what cannot match)."""
    if op == "is_null":
        return value is None
    if op == "is_not_null":
        return value is not None
    if value is None:  # a comparison with null is never true
        return False
    literals = list(literal) if op == "in" else [literal]
    texts = [_as_path_text(v) for v in literals]
    if op in ("=", "in"):
        if any(t is None for t in texts):
            return True
        if all(isinstance(v, int) and not isinstance(v, bool) for v in literals):
            try:
                return int(value) in {int(v) for v in literals}
            except ValueError:
                return True
        return value in texts
    (lit,) = literals
    if isinstance(lit, int) and not isinstance(lit, bool):
        try:
            left, right = int(value), lit
        except ValueError:
            return True
    elif isinstance(lit, str) or texts[0] is not None and not isinstance(lit, bool):
        left, right = value, texts[0]
    else:
        return True
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]


def prune(files: Iterable[tuple[str, dict[str, str | None]]], conditions: Sequence[tuple[str, str, Any]]) -> list[str]:
    """The files (``(uri, its partition values)``, :func:`parse_partition_path`) whose partition may
    hold rows meeting every condition ``(column, op, literal)`` (``op`` one of :data:`PRUNE_OPS`;
    ``in`` takes a collection).  A condition on a column a file's path does not name keeps it."""
    kept = []
    for uri, values in files:
        if all(column not in values or _may_hold(values[column], op, literal) for column, op, literal in conditions):
            kept.append(uri)
    return kept
