"""The schema's features against the input's columns, checked once on the driver before any task.

A misspelled feature (``dep_dealy`` for the header's ``dep_delay``) used to pass silently: the
feature was null in every row (its ``default`` filled in at training time) and the real column
was dropped.  Every engine now calls :func:`check_columns` before it starts any work:

* a feature that an input does not provide fails the conversion, naming the feature, the
  file(s) and the closest column name ("did you mean"), unless the feature says
  ``allow_missing: true`` (files written before the column existed) or the job allows missing
  columns (``--allow-missing-columns``);
* an input column that no feature reads fails it too, unless the schema lists it in
  ``ignore_columns`` or the job ignores extra columns (``--ignore-extra-columns``);
* a CSV header that names a column twice fails it (which of the two would be read?).

A feature that gathers columns (``columns:`` in the schema) reads its N columns, not its name:
each must be there (the error names the column and the feature), and none counts as extra.  A
``columns: {pattern: ...}`` is matched against the input's columns first, once, on the driver
(:func:`resolve_patterns`): the engines get the schema with the matched names.

What "the input's columns" are: each CSV file's header (checked per file: files may differ in
order, and a file that lacks a column is exactly the case to catch); for JSON, the keys of the
objects in the first :data:`JSON_SAMPLE_BYTES` of each file, taken together (a JSON writer
may leave out a key whose value is null, so one object without it proves nothing); for a
Spark DataFrame, its columns.  CSV without a header has no names: its columns are the
features in order, and a row with another number of fields is a reject.
"""

from __future__ import annotations

import difflib
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Mapping

from tfrecord_io.conversion.options import DEFAULT_MAX_RECORD_BYTES
from tfrecord_io.storage import inputs
from tfrecord_io.core.schema import Schema, SchemaError

__all__ = ["ColumnMismatch", "JSON_SAMPLE_BYTES", "check_columns", "input_columns", "read_headers",
           "resolve_patterns", "sample_json_keys"]

JSON_SAMPLE_BYTES = 1 << 20
_SHOWN_FILES = 3


class ColumnMismatch(SchemaError):
    """The schema's features and the input's columns do not match."""


def read_headers(files: Iterable[str], schema: Schema, multiline: bool = False) -> dict[str, list[str] | None]:
    """Each CSV file's header names (None for a file with no lines), read in parallel."""
    from tfrecord_io.conversion.parsing import read_header

    def peek(uri: str):
        with inputs.open_input(uri) as f:
            names, _ = read_header(f, schema, uri, multiline)
        return names

    files = list(files)
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(files, pool.map(peek, files)))


def sample_json_keys(files: Iterable[str], multiline: bool = False,
                     max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> dict[str, set[str]]:
    """The keys of the JSON objects in the first :data:`JSON_SAMPLE_BYTES` of each file (lines
    that do not parse, or are not objects -- an array, a bare value -- are skipped: they become
    rejects when converted).  A first line longer than ``max_record_bytes`` is the conversion's
    error (:func:`~tfrecord_io.conversion.parsing.record_too_long`), raised here, before any task."""
    def keys(uri: str) -> set[str]:
        with inputs.open_input(uri) as f:
            pieces = [f.read(JSON_SAMPLE_BYTES + 1)]
            size = len(pieces[0])
            # At least one whole line, however long (a 20 MB string value is a valid row), up to the limit.
            while not multiline and b"\n" not in pieces[-1] and pieces[-1]:
                if size > max_record_bytes:
                    from tfrecord_io.conversion.parsing import record_too_long

                    raise record_too_long(uri, 1, 0, max_record_bytes)
                pieces.append(f.read(JSON_SAMPLE_BYTES))
                size += len(pieces[-1])
            data = b"".join(pieces)
        found: set[str] = set()
        if multiline:
            try:
                doc = json.loads(data) if len(data) <= JSON_SAMPLE_BYTES else None
            except (ValueError, RecursionError):
                doc = None
            for obj in (doc if isinstance(doc, list) else [doc]):
                if isinstance(obj, dict):
                    found.update(obj)
            return found
        lines = data.split(b"\n")
        if len(lines) > 1:
            lines = lines[:-1]  # possibly cut (or the empty rest after the last newline)
        for line in lines:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(obj, dict):
                found.update(obj)
        return found

    files = list(files)
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(files, pool.map(keys, files)))


def input_columns(files: Iterable[str], schema: Schema, input_format: str, multiline: bool = False,
                  max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> dict[str, list[str] | set[str] | None]:
    """What :func:`check_columns` compares: per file, its CSV header or sampled JSON keys."""
    if input_format == "csv":
        return read_headers(files, schema, multiline) if schema.csv.header else {}
    return sample_json_keys(files, multiline, max_record_bytes)


def resolve_patterns(schema: Schema, columns: Mapping[str, list[str] | set[str] | None], *,
                     input_format: str, schema_name: str = "the schema") -> Schema:
    """``schema`` with each ``columns: {pattern: ...}`` matched (:meth:`Schema.resolve_columns`)
    against the input's columns (:func:`input_columns`'s answer): the first CSV header or
    DataFrame, or the JSON keys of every file together; :func:`check_columns` then checks every
    input against the matched names."""
    patterned = [f.name for f in schema.input_features if f.column_pattern is not None]
    if not patterned:
        return schema
    if input_format == "json":
        names: list[str] = sorted(set().union(*(c for c in columns.values() if c)) if columns else set())
        where = "the sampled JSON objects"
    else:
        first = next(((src, cols) for src, cols in sorted(columns.items()) if cols is not None), None)
        if first is None:
            raise ColumnMismatch(f"{schema_name}: feature {patterned[0]!r} gathers the columns a pattern matches; "
                                 f"the input has no column names to match (CSV needs csv.header: true)")
        where, names = first[0], list(first[1])
    try:
        return schema.resolve_columns(names, where)
    except SchemaError as e:
        raise ColumnMismatch(f"{schema_name}: {e}") from e


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _files(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN_FILES])
    return shown + (f" and {len(names) - _SHOWN_FILES} more file(s)" if len(names) > _SHOWN_FILES else "")


def check_columns(schema: Schema, columns: Mapping[str, list[str] | set[str] | None], *, input_format: str,
                  allow_missing: bool = False, ignore_extra: bool = False, schema_name: str = "the schema") -> None:
    """Raise :class:`ColumnMismatch` when the features and the input's columns disagree (module doc).

    ``columns`` maps each input (file, or ``"the DataFrame"``) to its column names: a list for
    CSV headers and DataFrames (checked per input), a set of sampled keys for JSON (checked
    across all files); None for an input with no header (an empty file).
    """
    features = list(schema.source_columns)
    optional = {c for f in schema.input_features if f.allow_missing for c in f.source_columns}
    owner = {c: f.name for f in schema.input_features if f.gathered for c in f.source_columns}
    missing: dict[str, list[str]] = {}
    extra: dict[str, list[str]] = {}
    problems: list[str] = []
    per_input = input_format != "json"
    if per_input:
        views = [(src, cols) for src, cols in sorted(columns.items()) if cols is not None]
    else:
        union: set[str] = set().union(*(c for c in columns.values() if c)) if columns else set()
        # No object parsed in any sample: nothing to compare (those rows become rejects).
        views = [("the sampled JSON objects of " + _files(sorted(columns)), union)] if union else []
    seen_columns: set[str] = set()
    for src, cols in views:
        cols = list(cols)
        seen_columns.update(cols)
        dupes = sorted({c for c in cols if cols.count(c) > 1})
        if dupes:
            problems.append(f"{src}: the header names column(s) {dupes} more than once")
        for name in features:
            if name not in cols and not allow_missing and name not in optional:
                missing.setdefault(name, []).append(src)
        for col in dict.fromkeys(cols):
            if col not in features and col not in schema.ignore_columns and not ignore_extra:
                extra.setdefault(col, []).append(src)
    for name, srcs in missing.items():
        what = f"column {name!r} of feature {owner[name]!r}" if name in owner else f"feature {name!r}"
        problems.append(f"{what} is not a column of {_files(srcs)}"
                        f"{_did_you_mean(name, seen_columns - set(features))}")
    for col, srcs in extra.items():
        problems.append(f"column {col!r} of {_files(srcs)} is read by no feature"
                        f"{_did_you_mean(col, set(features) - seen_columns)}")
    if not problems:
        return
    fixes = []
    if missing:
        fixes.append("for a feature that older files lack, add 'allow_missing: true' to it (or pass "
                     "--allow-missing-columns)")
    if extra:
        fixes.append("to leave columns out, list them under 'ignore_columns:' (or pass --ignore-extra-columns)")
    raise ColumnMismatch(f"{schema_name} does not match the input: " + "; ".join(problems)
                         + (". Fix the names, or: " + "; ".join(fixes) if fixes else ""))
