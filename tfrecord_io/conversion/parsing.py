"""CSV and JSON Lines to typed Arrow batches, with a reject for every row that does not convert.

Engine-neutral: this module knows nothing about Beam or Spark.  It takes an open binary
stream (any object with ``read(n)``), a :class:`~tfrecord_io.core.schema.Schema` and a source
name, and yields :class:`ParsedBatch` es: the rows that converted, as an Arrow batch typed
for the encoder (``tfrecord_io.core.codec``), plus the rows that did not, as reject dicts
``{"source", "line", "raw", "reason"}`` (the ``_rejects/`` contract of
``tfrecord_io.storage.output``).  Every input row ends up in exactly one of the two:
``sum(b.input_rows) == good rows + rejects``.  Memory is bounded by ``block_size``: a file is
never read whole (except a ``multiline`` JSON document, which is one record).

Record size
    No input record may be longer than ``max_record_bytes`` (``--max-record-bytes``, default
    64 MiB): a JSON line, a CSV line, a CSV record with ``multiline`` (its quoted line breaks
    included), a ``multiline`` JSON document (the whole file).  The limit is checked as the
    stream is read -- a line still without its end is given up as soon as it passes the limit,
    so a reader holds at most the limit plus one read, and a 1.5 GB line inside a 1.5 MB
    ``.gz`` fails after decompressing the limit, not the line (:mod:`tfrecord_io.storage.inputs`
    decompresses 1 MiB at a time).  A longer record fails the file with a ``ValueError`` naming
    it, the line and the byte where the record starts, and the limit (:func:`record_too_long`):
    not a reject, because a "line" that long is almost always a file that is not one record per
    line (line breaks the reader does not split on, a binary or single-line dump), and as one
    reject it would hide the file's every row under ``--max-reject-fraction``.  CSV records must
    also fit in one parse block (``block_size``), as before: a longer one fails the file too.

The rules are the Spark job's (``tfrecord_io.engines.spark``, Spark's CSV/JSON readers), so that both
engines turn the same input into the same records and the same number of rejects.

CSV
    Parsed by pyarrow's streaming reader (``pyarrow.csv.open_csv``, single-threaded so that it
    numbers the rows it rejects), ``block_size`` bytes at a time.  Quoted fields may hold
    delimiters and doubled quotes.  *Line breaks inside quoted fields* need ``multiline``, as
    in Spark: without it records are lines -- a line with an unbalanced quote is a reject of
    its own (``"malformed CSV: unbalanced quote ..."``) and the next line is read afresh; with
    it a quoted field runs on across lines.  Blank lines are not rows.  With ``csv.header`` the
    first record names the columns and they are matched to features by name (unknown columns
    are ignored, a feature without a column is null, a header naming no feature is an error);
    without it the columns are the schema's features in order.  Every cell is read as bytes
    and converted here, per column, so one bad cell rejects its row and nothing else:

    * wrong number of fields -> ``"wrong number of columns: expected N, got M"``;
    * string/bytes cells (and list items) must be valid UTF-8;
    * ``int64``: Java's ``Long.parseLong`` (``[+-]?[0-9]+``, in range, no spaces);
      ``float``: Java's ``Float.parseFloat`` (surrounding spaces, ``1.5e3``, ``.5``, ``1f``,
      ``NaN``, ``Infinity``, hex ``0x1p3``) plus Spark's ``Inf`` / ``-Inf``, correctly rounded
      to float32; anything else -> ``"feature 'x': 'abc' is not a valid float"``;
    * nulls (Spark's): a cell whose text is one of ``csv.null_values`` (quoted or not) is null,
      and so is an unquoted empty cell; a quoted empty cell ``""`` is the empty string unless
      ``""`` is a null value;
    * list features need a ``separator``: the cell is split on it (``"a||b"`` has an empty
      item) and each item converted as above; a null cell is a null list;
    * a feature that gathers columns (``columns:`` in the schema) reads one number from each of
      its N columns, in the schema's order (matched by name; without a header, N fields in a
      row), into one ``[N]`` list.  A cell that does not convert rejects the row naming the
      column (``"feature 'pixels': column 'px_5': 'abc' is not a valid float"``); a null cell
      takes the feature's ``default`` for its place, or rejects the row naming the column when
      there is none; a row whose N cells are all null has a null list.  (JSON: the same, one
      number from each of N keys.)

    ``line`` is the physical line (1-based) where the row starts.  (With ``multiline``, blank
    lines before a row are not counted.)  ``raw`` of a row that split into the right number of
    fields is its fields joined again with the delimiter, quoted where needed.

JSON Lines
    One JSON object per line, read in chunks of about ``block_size`` bytes cut at line ends
    (``line`` and ``raw`` are exact).  A chunk is converted by pyarrow's JSON reader against the
    schema; a chunk it refuses is halved until the offending lines are found, and those are
    converted one by one with :mod:`json`, which names the problem: not UTF-8, not JSON, not an
    object, ``int64`` given a non-integer (``1.0`` included), ``float`` given a non-number
    (``"NaN"``/``"Infinity"``/``"INF"`` strings are numbers, as in Spark), ``string`` given a
    non-string, ``bytes`` given a string that is not base64 (JSON carries bytes as base64, as
    Spark reads them), a list feature given a non-array.  Missing fields are null; unknown
    fields are ignored; blank lines are skipped.  With ``multiline`` each file is one JSON
    document -- an object, or an array of objects -- and ``line`` is the record's number.

Row checks
    After conversion, :func:`row_rejects` applies the wire contract's per-row rules:
    :func:`tfrecord_io.core.codec.row_errors` (required nulls, ``[k]`` lists of another length, null
    list items); for SequenceExample schemas on the row's context + step features, plus a null
    step of a sequence feature without a default, and a null ``group_by`` key.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfrecord_io.core.codec import row_errors
from tfrecord_io.conversion.gather import NullCell, gather, gather_row
from tfrecord_io.conversion.options import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_RECORD_BYTES
from tfrecord_io.core.values import BadValue as _BadValue
from tfrecord_io.core.values import java_float as _java_float
from tfrecord_io.core.values import java_long as _java_long
from tfrecord_io.core.values import json_scalar as _json_scalar
from tfrecord_io.core.values import show as _show
from tfrecord_io.core.schema import Feature, Schema

__all__ = [
    "DEFAULT_BLOCK_SIZE", "DEFAULT_MAX_RECORD_BYTES", "FORMATS", "ParsedBatch", "Prepended", "first_record_end",
    "input_schema", "make_reject", "record_too_long",
    "read_batches", "read_csv_batches", "read_json_batches", "row_rejects", "row_schema",
]

FORMATS = ("csv", "json")
_MAX_HEADER_BYTES = 1024 * 1024
_CAST_CHUNK = 1024  # bad cells are located by casting chunks of this many cells, then halving


@dataclass
class ParsedBatch:
    """One step of reading a file: the rows that converted and the rows that did not.

    ``rows`` has the columns of :func:`input_schema` (the schema's input features, typed for
    the encoder); ``lines[i]`` is the line where ``rows`` row i starts; ``raw[i]`` its text
    (binary), only with ``keep_raw``.  ``reject_values[j]`` (only with ``reject_values``) holds
    the named features' converted values of ``rejects[j]`` (None for a value that did not
    convert), or is None when the row could not be split into values at all.
    """

    source: str
    rows: pa.RecordBatch
    lines: np.ndarray
    rejects: list[dict] = field(default_factory=list)
    raw: pa.Array | None = None
    reject_values: list[dict | None] | None = None

    @property
    def input_rows(self) -> int:
        """Input rows this batch accounts for (converted + rejected)."""
        return self.rows.num_rows + len(self.rejects)


def input_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of parsed rows: ``schema.arrow_schema()`` with every field nullable
    (required nulls are found by :func:`row_rejects`, not by Arrow)."""
    return pa.schema([pa.field(f.name, f.arrow_type(), nullable=True) for f in schema.input_features])


def row_schema(schema: Schema) -> Schema:
    """The per-row view of a schema: itself for Examples; context + step features as an
    Example schema for SequenceExamples (one input row is one step)."""
    if schema.record_type == "example":
        return schema
    return Schema(record_type="example", features=schema.context + schema.sequence, csv=schema.csv)


def make_reject(source: str, line: int | None, raw: str | bytes | None, reason: str) -> dict:
    """A reject row of the output contract.  ``raw`` bytes that are not UTF-8 keep their bad
    bytes as ``\\xNN`` escapes."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw).decode("utf-8", "backslashreplace")
    return {"source": source, "line": int(line) if line else None, "raw": raw, "reason": reason}


_TOO_LONG_HINTS = {
    "line": "a line that long usually means a file that is not one record per line (other line breaks, binary "
            "data): check it, or raise the limit",
    "record": "a record that long usually means a quote that does not close: check it, or raise the limit",
    "document": "write JSON Lines (one object per line, read in parts), or raise the limit",
}


def record_too_long(source: str, line: int | None, offset: int | None, limit: int,
                    what: str = "line") -> ValueError:
    """The error of a record longer than ``limit`` bytes (``--max-record-bytes``) that starts at
    ``line`` (None: not known, in a part of a file) and byte ``offset`` of ``source``'s data
    (decompressed for a compressed file; None: not known); see the module doc.  ``what``: ``"line"``,
    ``"record"`` (a ``multiline`` CSV record) or ``"document"`` (a ``multiline`` JSON file)."""
    where = ", ".join(([f"line {line}"] if line else []) + ([f"byte {offset}"] if offset is not None else []))
    if offset is not None and source.lower().endswith((".gz", ".bz2", ".deflate")):
        where += " of the decompressed data"
    size = next((f" ({limit >> shift} {unit})" for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB"))
                 if limit >= 1 << shift and not limit % (1 << shift)), "")
    thing = "JSON document (with --multiline, the whole file is one record)" if what == "document" else what
    return ValueError(f"{source}: {where + ': ' if where else ''}a {thing} longer than the record limit, "
                      f"--max-record-bytes {limit}{size}; {_TOO_LONG_HINTS[what]}")


def read_batches(stream: BinaryIO, schema: Schema, input_format: str, source: str, *,
                 block_size: int = DEFAULT_BLOCK_SIZE, multiline: bool = False, keep_raw: bool = False,
                 check_rows: bool = True, reject_values: tuple[str, ...] = (),
                 header_names: list[str] | None = None, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                 byte_offset: int = 0) -> Iterator[ParsedBatch]:
    """Parse one file (``input_format`` ``"csv"`` or ``"json"``) into batches; see the module doc.

    ``header_names`` (CSV): the stream starts after the header, which named these columns.
    ``max_record_bytes``: the longest record read (module doc, "Record size").  ``byte_offset``:
    where the stream starts in the file, for a part of a file (errors then name the byte, not
    the line, which only the whole file numbers).

    ``check_rows`` applies :func:`row_rejects`; ``keep_raw`` carries each good row's text along
    (for rejects decided later, e.g. per SequenceExample group); ``reject_values`` names
    features whose values to report with each reject (e.g. the ``group_by`` key).  Raises
    ``ValueError`` naming ``source`` for problems with the whole file (a header naming no
    feature, a CSV list feature without a separator, a record longer than ``block_size`` or than
    ``max_record_bytes``).
    """
    kw = dict(block_size=block_size, multiline=multiline, keep_raw=keep_raw, check_rows=check_rows,
              reject_values=tuple(reject_values), max_record_bytes=max_record_bytes, byte_offset=byte_offset)
    if input_format == "csv":
        return read_csv_batches(stream, schema, source, header_names=header_names, **kw)
    if input_format == "json":
        return read_json_batches(stream, schema, source, **kw)
    raise ValueError(f"unknown input format {input_format!r}; expected one of {', '.join(FORMATS)}")


def row_rejects(batch: pa.RecordBatch, schema: Schema) -> list[str | None]:
    """Per-row rule breaks of parsed rows (``None`` for a good row); see the module doc."""
    reasons = row_errors(batch, row_schema(schema))
    if schema.record_type == "example":
        return reasons
    for f in schema.sequence:
        col = batch.column(f.name)
        if f.default is None and col.null_count:
            for i in np.flatnonzero(~col.is_valid().to_numpy(zero_copy_only=False)):
                reasons[i] = reasons[i] or f"sequence feature {f.name!r}: null step, and the feature has no default"
    key = batch.column(schema.group_by)
    if key.null_count:
        for i in np.flatnonzero(~key.is_valid().to_numpy(zero_copy_only=False)):
            reasons[i] = reasons[i] or f"group_by feature {schema.group_by!r} is null"
    return reasons


# ---------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------
def _cast_marking(arr: pa.Array, to_type: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """``arr.cast(to_type)`` with the cells that do not cast set to null and marked.

    Returns (result, bad) where ``bad`` is None when every cell cast.  Bad cells are found by
    casting chunks and halving the ones that fail, so the cast rules are exactly Arrow's.
    """
    try:
        return arr.cast(to_type), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    n = len(arr)
    bad = np.zeros(n, dtype=bool)

    def find(lo: int, hi: int) -> None:
        try:
            arr.slice(lo, hi - lo).cast(to_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            if hi - lo == 1:
                bad[lo] = True
                return
            mid = (lo + hi) // 2
            find(lo, mid)
            find(mid, hi)

    for start in range(0, n, _CAST_CHUNK):
        find(start, min(n, start + _CAST_CHUNK))
    return _mask_to_null(arr, bad).cast(to_type), bad


def _data_has(cells: pa.Array, byte_values: bytes) -> bool:
    """Whether any of ``byte_values`` occurs in the value bytes of a binary array (a cheap
    pre-check before a per-cell search; may see bytes of cells outside a slice)."""
    data = cells.buffers()[-1]
    if data is None or data.size == 0:
        return False
    data = data.to_pybytes()  # a memcpy; then each test is a memchr
    return any(bytes((b,)) in data for b in byte_values)


def _null_text_mask(cells: pa.Array, null_values: tuple[str, ...]) -> pa.Array | None:
    """Non-null cells whose text is one of ``null_values`` (None when there is none)."""
    if not null_values or cells.null_count == len(cells):
        return None
    offsets = np.frombuffer(cells.buffers()[1], dtype=np.int32)[cells.offset: cells.offset + len(cells) + 1]
    if not np.isin(np.diff(offsets), [len(v.encode()) for v in null_values]).any():
        return None  # no cell is as long as a null text: the common case, found cheaply
    m = pc.is_in(cells, value_set=pa.array([v.encode() for v in null_values], pa.binary())).fill_null(False)
    return m if pc.any(m).as_py() else None


def _empty_batch(target: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in target], schema=target)


def _mask_to_null(arr: pa.Array, mask) -> pa.Array:
    return pc.if_else(pa.array(mask) if isinstance(mask, np.ndarray) else mask, pa.scalar(None, arr.type), arr)


class _Reasons:
    """Per-row reject reasons of one batch, the first reason found winning."""

    def __init__(self, n: int):
        self.n = n
        self.reasons: list[str | None] | None = None

    def add(self, index: int, reason: str) -> None:
        if self.reasons is None:
            self.reasons = [None] * self.n
        if self.reasons[index] is None:
            self.reasons[index] = reason

    def merge(self, reasons: list[str | None]) -> None:
        if not any(reasons):  # the usual batch, every row good: one pass in C, not a Python loop per row
            return
        for i, r in enumerate(reasons):
            if r is not None:
                self.add(i, r)

    def bad_mask(self) -> np.ndarray | None:
        if self.reasons is None:
            return None
        mask = np.fromiter((r is not None for r in self.reasons), dtype=bool, count=self.n)
        return mask if mask.any() else None


def _values_of(rows: pa.RecordBatch, indices, names: tuple[str, ...]) -> list[dict]:
    """The named columns' values of some rows, as dicts."""
    if not names:
        return [{} for _ in indices]
    sub = rows.take(pa.array(indices, pa.int64()))
    cols = {n: sub.column(n).to_pylist() for n in names}
    return [{n: cols[n][i] for n in names} for i in range(len(indices))]


# ---------------------------------------------------------------------------------------
# Numbers as Java (Spark) reads them
# ---------------------------------------------------------------------------------------
def _parse_numbers(cells: pa.Array, f: Feature) -> tuple[pa.Array, np.ndarray | None]:
    """Binary cells -> int64 / float32 as Java reads them: (values, bad mask or None).

    Arrow's cast does the work; the cells it refuses, and those it takes but Java would not
    (hex integers, lowercase ``nan``/``inf``), are decided one by one in Python.
    """
    target = pa.int64() if f.type == "int64" else pa.float32()
    values, bad = _cast_marking(cells, target)
    recheck = np.zeros(len(cells), dtype=bool) if bad is None else bad.copy()
    if f.type == "int64" and _data_has(cells, b"xX"):
        recheck |= pc.match_substring(cells, "x", ignore_case=True).fill_null(False).to_numpy(zero_copy_only=False)
    if f.type == "float" and _data_has(cells, b"nNiI"):
        recheck |= pc.match_substring_regex(cells, "(?i)nan|inf").fill_null(False).to_numpy(zero_copy_only=False)
    if not recheck.any():
        return values, None
    idx = np.flatnonzero(recheck)
    parse = _java_long if f.type == "int64" else _java_float
    fixed = [parse(cells[int(i)].as_py().decode("utf-8", "replace")) for i in idx]
    bad = np.zeros(len(cells), dtype=bool)
    bad[idx] = [v is None for v in fixed]
    py = values.to_pylist()
    for i, v in zip(idx, fixed):
        py[i] = v
    return pa.array(py, target), (bad if bad.any() else None)


# ---------------------------------------------------------------------------------------
# CSV: cell conversion
# ---------------------------------------------------------------------------------------
def _convert_values(cells: pa.Array, f: Feature, what: str) -> tuple[pa.Array, list[tuple[int, str]]]:
    """Binary cells -> the feature's scalar type; (values with bad cells null, [(index, reason)])."""
    problems: list[tuple[int, str]] = []
    if f.type in ("string", "bytes"):
        _, bad = _cast_marking(cells, pa.string())  # UTF-8 check
        if bad is not None:
            for i in np.flatnonzero(bad):
                problems.append((int(i), f"feature {f.name!r}: {what}{_show(cells[int(i)].as_py())} is not "
                                         f"valid UTF-8"))
            cells = _mask_to_null(cells, bad)
        return (cells.cast(pa.string()) if f.type == "string" else cells), problems
    values, bad = _parse_numbers(cells, f)
    if bad is not None:
        for i in np.flatnonzero(bad):
            problems.append((int(i), f"feature {f.name!r}: {what}{_show(cells[int(i)].as_py())} is not a valid "
                                     f"{f.type}"))
    return values, problems


def _gather_column(cells: pa.RecordBatch, positions: tuple[int | None, ...], f: Feature, reasons: _Reasons,
                   null_values: tuple[str, ...]) -> pa.Array:
    """A gathered feature's N columns of cells (``positions`` in ``cells``; None: a column the file
    lacks, null) -> its ``[N]`` lists (module doc; :func:`tfrecord_io.conversion.gather.gather`)."""
    converted = []
    for name, at in zip(f.columns, positions):
        if at is None:
            converted.append(None)
            continue
        col = cells.column(at)
        is_null = _null_text_mask(col, null_values)
        if is_null is not None:
            col = _mask_to_null(col, is_null)
        values, problems = _convert_values(col, f, f"column {name!r}: ")
        for i, reason in problems:
            reasons.add(i, reason)
        converted.append(values)
    lists, null_cells = gather(converted, f, cells.num_rows)
    for i, reason in null_cells.items():
        reasons.add(i, reason)
    return lists


def _convert_column(cells: pa.Array, f: Feature, reasons: _Reasons) -> pa.Array:
    if not f.is_list:
        values, problems = _convert_values(cells, f, "")
        for i, reason in problems:
            reasons.add(i, reason)
        return values
    null_mask = pc.invert(cells.is_valid())
    parts = pc.split_pattern(cells, f.separator)
    offsets = parts.offsets.to_numpy().astype(np.int64)
    items = parts.values.slice(offsets[0], offsets[-1] - offsets[0])
    offsets = offsets - offsets[0]
    values, problems = _convert_values(items, f, "list item ")
    if problems:
        row_of = np.searchsorted(offsets, np.array([i for i, _ in problems]), side="right") - 1
        for row, (_, reason) in zip(row_of, problems):
            reasons.add(int(row), reason)
    if offsets[-1] >= 2**31:
        return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values, mask=null_mask).cast(
            f.arrow_type())
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32), pa.int32()), values, mask=null_mask)


# ---------------------------------------------------------------------------------------
# CSV: raw text of parsed rows
# ---------------------------------------------------------------------------------------
def _null_text(null_values: tuple[str, ...]) -> bytes:
    return b"" if not null_values or "" in null_values else null_values[0].encode()


def _raw_rows(batch: pa.RecordBatch, indices, delimiter: str, quote: str,
              null_values: tuple[str, ...]) -> list[bytes]:
    """The text of rows ``indices`` of a batch of cells: fields re-joined, quoted where needed."""
    d, q = delimiter.encode(), quote.encode()
    null = _null_text(null_values)
    special = (d, q, b"\n", b"\r")
    sub = batch.take(pa.array(indices, pa.int64()))
    cols = [c.to_pylist() for c in sub.columns]
    out = []
    for r in range(sub.num_rows):
        fields = []
        for col in cols:
            v = col[r]
            if v is None:
                fields.append(null)
            elif any(s in v for s in special) or (v == b"" and null == b""):
                fields.append(q + v.replace(q, q + q) + q)
            else:
                fields.append(v)
        out.append(d.join(fields))
    return out


def _raw_column(batch: pa.RecordBatch, delimiter: str, quote: str, null_values: tuple[str, ...]) -> pa.Array:
    """Vectorized :func:`_raw_rows` for every row of a batch of cells."""
    q = pa.scalar(quote.encode(), pa.binary())
    null = pa.scalar(_null_text(null_values), pa.binary())
    empty = pa.scalar(b"", pa.binary())
    pattern = "[" + re.escape(delimiter) + re.escape(quote) + "\\n\\r]"
    pieces = []
    for col in batch.columns:
        col = col.cast(pa.binary())
        needs = pc.match_substring_regex(col, pattern)
        if null.as_py() == b"":
            needs = pc.or_(needs, pc.equal(col, empty))
        quoted = pc.binary_join_element_wise(q, pc.replace_substring(col, quote, quote * 2), q, empty)
        pieces.append(pc.if_else(needs.fill_null(False), quoted, col).fill_null(null))
    return pc.binary_join_element_wise(*pieces, pa.scalar(delimiter.encode(), pa.binary()))


def _row_spans(batch: pa.RecordBatch) -> np.ndarray:
    """Lines each row of cells spans: 1 + newlines inside its (quoted) values."""
    spans = np.ones(batch.num_rows, dtype=np.int64)
    for col in batch.columns:
        if not _data_has(col, b"\n"):
            continue
        spans += pc.count_substring(col, "\n").fill_null(0).to_numpy(zero_copy_only=False)
    return spans


# ---------------------------------------------------------------------------------------
# CSV: records, lines and the stream pyarrow reads
# ---------------------------------------------------------------------------------------
class _RecordLocator:
    """Numbers the records of one CSV stream and finds the line each starts on.

    pyarrow numbers every record (header included, blank lines not) but reports the number
    only for rows it rejects (``InvalidRow.number``).  The converted rows are the records in
    between, in order, so their numbers follow; their lines (in the stream pyarrow reads)
    follow from the lines each record spans.
    """

    def __init__(self, first_record: int, first_line: int):
        self.next_record, self.next_line = first_record, first_line
        self.pending: list[tuple[int, str, int]] = []  # invalid rows not yet placed: (number, text, fields)
        self.known = True

    def add_invalid(self, rows: list[tuple[int | None, str, int]]) -> None:
        for number, text, nfields in rows:
            if number is None:
                self.known = False
                number = 0
            self.pending.append((number, text, nfields))
        self.pending.sort(key=lambda r: r[0])

    def place(self, spans: np.ndarray, final: bool) -> tuple[np.ndarray, list[tuple[int, str, int]]]:
        """Lines of the next ``len(spans)`` converted rows, and the invalid rows placed before
        them (all remaining ones when ``final``) as (line, text, fields)."""
        k = len(spans)
        inv = np.array([r[0] for r in self.pending], dtype=np.int64)
        before = inv - np.arange(len(inv)) - self.next_record  # converted rows before each invalid row
        m = len(inv) if final else int(np.searchsorted(before, k, side="left"))
        records = self.next_record + np.arange(k) + np.searchsorted(before[:m], np.arange(k), side="right")
        all_spans = np.ones(k + m, dtype=np.int64)
        valid_pos = records - self.next_record
        inv_pos = inv[:m] - self.next_record
        if k:
            all_spans[valid_pos] = spans
        placed = self.pending[:m]
        if m:
            all_spans[inv_pos] = [1 + text.count("\n") for _, text, _ in placed]
        starts = self.next_line + np.cumsum(all_spans) - all_spans
        self.next_record += k + m
        self.next_line += int(all_spans.sum())
        del self.pending[:m]
        if not self.known:
            return np.zeros(k, dtype=np.int64), [(0, t, n) for _, t, n in placed]
        lines = starts[valid_pos] if k else np.zeros(0, dtype=np.int64)
        return lines, [(int(starts[p]), t, n) for p, (_, t, n) in zip(inv_pos, placed)]


class _LineFilter(io.RawIOBase):
    """The stream pyarrow reads when records are lines (no ``multiline``).

    Passes the lines through, except blank lines (not rows) and lines with an odd number of
    quote characters: a quoted field cannot end on such a line, so it is a malformed record of
    its own (as Spark's line-based reader sees it), collected in ``rejected``.  ``physical()``
    maps a line of the filtered stream back to its line in the file.  A line longer than
    ``limit`` bytes is :func:`record_too_long`, raised as soon as the line passes the limit
    (``offset``: where the stream starts in the file; ``numbered``: whether its lines are the
    file's).
    """

    def __init__(self, stream: BinaryIO, quote: str, chunk: int, source: str = "<stream>",
                 limit: int = DEFAULT_MAX_RECORD_BYTES, offset: int = 0, numbered: bool = True):
        self._stream, self._q, self._chunk = stream, ord(quote), chunk
        self._source, self._limit, self._numbered = source, limit, numbered
        self._carry: list[bytes] = []  # the start of a line whose end is not read yet
        self._carried = 0
        self._start = offset  # the stream's byte (in the file) where _carry starts
        self._out = memoryview(b"")
        self._eof = False
        self._next_physical = 1  # physical line number of the first line in _carry
        self._passed = 0  # lines passed so far
        self._maps: list[tuple[int, np.ndarray]] = []  # (first filtered line, physical lines)
        self.rejected: list[tuple[int, bytes]] = []  # (physical line, text)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        while not len(self._out) and not (self._eof and not self._carry):
            self._fill()
        n = min(len(view), len(self._out))
        view[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _too_long(self, line: int, offset: int) -> ValueError:
        return record_too_long(self._source, line if self._numbered else None, offset, self._limit)

    def _fill(self) -> None:
        chunk = self._stream.read(self._chunk)
        if not chunk:
            self._eof = True
            data = b"".join(self._carry)
            self._carry, self._carried = [], 0
            if not data:
                return
        else:
            cut = chunk.rfind(b"\n")
            if cut < 0:  # the line goes on: held, up to the limit
                self._carry.append(chunk)
                self._carried += len(chunk)
                if self._carried > self._limit:
                    raise self._too_long(self._next_physical, self._start)
                return
            data = b"".join(self._carry + [chunk[:cut + 1]]) if self._carry else chunk[:cut + 1]
            rest = chunk[cut + 1:]
            self._carry, self._carried = ([rest], len(rest)) if rest else ([], 0)
        start = self._start
        self._start += len(data)
        self._out = memoryview(self._lines(data, start))

    def _lines(self, data: bytes, start: int) -> bytes:
        buf = np.frombuffer(data, dtype=np.uint8)
        ends = np.flatnonzero(buf == 10) + 1
        if not len(ends) or ends[-1] != len(data):
            ends = np.append(ends, len(data))  # the last line of the file without a newline
        starts = np.concatenate([[0], ends[:-1]])
        quote_at = np.flatnonzero(buf == self._q)
        if len(quote_at):
            per_line = np.bincount(np.searchsorted(ends, quote_at, side="right"), minlength=len(ends))
            odd = per_line[:len(ends)] % 2 == 1
        else:
            odd = np.zeros(len(ends), dtype=bool)
        content = ends - starts - (buf[ends - 1] == 10)
        content -= (content > 0) & (buf[np.maximum(starts + content - 1, 0)] == 13)
        long_lines = np.flatnonzero(content > self._limit)  # the limit: a line's text, its line break left out
        if len(long_lines):
            i = int(long_lines[0])
            raise self._too_long(self._next_physical + i, start + int(starts[i]))
        blank = content == 0
        keep = ~(odd | blank)
        physical = self._next_physical + np.arange(len(ends))
        self._next_physical += len(ends)
        for i in np.flatnonzero(odd & ~blank):
            self.rejected.append((int(physical[i]), data[starts[i]: starts[i] + content[i]]))
        if keep.any():
            self._maps.append((self._passed + 1, physical[keep]))
            self._passed += int(keep.sum())
        if keep.all():
            return data
        return b"".join(data[s:e] for s, e in zip(starts[keep], ends[keep]))

    def physical(self, lines: np.ndarray) -> np.ndarray:
        """Physical line of each (increasing) filtered line; earlier mappings are then dropped."""
        out = np.zeros(len(lines), dtype=np.int64)
        if not len(lines):
            return out
        firsts = np.array([f for f, _ in self._maps], dtype=np.int64)
        which = np.searchsorted(firsts, lines, side="right") - 1
        for w in np.unique(which):
            if w < 0:
                continue
            sel = which == w
            first, arr = self._maps[w]
            pos = lines[sel] - first
            ok = pos < len(arr)
            out[np.flatnonzero(sel)[ok]] = arr[pos[ok]]
        keep_from = max(0, int(which.min()))
        del self._maps[:keep_from]
        return out


class Prepended(io.RawIOBase):
    """A stream that first returns ``head`` and then the rest of ``stream``."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head, self._stream = memoryview(head), stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        if len(self._head):
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._stream.read(len(view))
        view[:len(data)] = data
        return len(data)


def first_record_end(data: bytes, quote: str, multiline: bool) -> int | None:
    """Index just past the first non-blank record's newline, or None if not in ``data``."""
    q = quote.encode()
    i, n = 0, len(data)
    while i < n and data[i:i + 1] in (b"\n", b"\r"):
        i += 1
    in_quotes = False
    while i < n:
        nl = data.find(b"\n", i)
        qp = data.find(q, i) if multiline else -1
        if in_quotes:
            if qp < 0:
                return None
            in_quotes, i = False, qp + 1
            continue
        if nl < 0 and qp < 0:
            return None
        if qp >= 0 and (nl < 0 or qp < nl):
            in_quotes, i = True, qp + 1
            continue
        return nl + 1
    return None


def read_header(stream: BinaryIO, schema: Schema, source: str, multiline: bool) -> tuple[list[str] | None, bytes]:
    """Parse the header record: (column names, or None for a file without one; the bytes read)."""
    names, head, _ = read_csv_header(stream, schema.csv, source, multiline)
    return names, head


def read_csv_header(stream: BinaryIO, opts, source: str, multiline: bool) -> tuple[list[str] | None, bytes, int]:
    """The one header reader (the converter's and ``infer-schema``'s): ``(column names, or None for
    a file without one; the bytes read; where the header record ends in them)``.  A UTF-8
    byte-order mark is dropped before the CSV rules apply, so a quoted first name
    (``\\xEF\\xBB\\xBF"season"``, as R and Excel write it) is ``season``; ``opts``: the schema's
    :class:`~tfrecord_io.core.schema.CsvOptions`."""
    head = b""
    while True:
        chunk = stream.read(64 * 1024)
        head += chunk
        end = first_record_end(head, opts.quote, multiline)
        if end is not None or not chunk:
            break
        if len(head) > _MAX_HEADER_BYTES:
            raise ValueError(f"{source}: line 1: no end of the header record within {_MAX_HEADER_BYTES} bytes")
    end = end if end is not None else len(head)
    text_bytes = head[:end]
    if text_bytes.startswith(b"\xef\xbb\xbf"):
        text_bytes = text_bytes[3:]
    if not text_bytes.strip():
        return None, head, end
    text = text_bytes.decode("utf-8", "replace")
    names = next(csv.reader(io.StringIO(text, newline=""), delimiter=opts.delimiter, quotechar=opts.quote,
                            doublequote=True, strict=False))
    return names, head, end


def _check_csv_schema(schema: Schema, source: str) -> None:
    for f in schema.input_features:
        if f.column_pattern is not None and not schema.csv.header:
            raise ValueError(f"{source}: feature {f.name!r} gathers the columns {{pattern: {f.column_pattern!r}}} "
                             f"matches; a CSV without a header has no names to match: list the columns")
        if f.is_list and not f.separator and not f.gathered:
            raise ValueError(f"{source}: feature {f.name!r} is a list (shape {list(f.shape)}); reading it "
                             f"from CSV needs a 'separator' in the schema (e.g. separator: \"|\")")


@dataclass
class _CsvFile:
    """What converting one file's batches needs."""

    schema: Schema
    source: str
    columns: list  # per input feature: its column in the file (None: absent, all null); a tuple for a gathered one
    expected: int  # fields per record
    keep_raw: bool
    check_rows: bool
    reject_values: tuple[str, ...]

    @property
    def null_values(self) -> tuple[str, ...]:
        return tuple(self.schema.csv.null_values)


def read_csv_batches(stream: BinaryIO, schema: Schema, source: str, *, block_size: int = DEFAULT_BLOCK_SIZE,
                     multiline: bool = False, keep_raw: bool = False, check_rows: bool = True,
                     reject_values: tuple[str, ...] = (), header_names: list[str] | None = None,
                     max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, byte_offset: int = 0
                     ) -> Iterator[ParsedBatch]:
    """CSV -> :class:`ParsedBatch` es (see the module doc).

    ``header_names``: for a stream that starts after the file's header (a later split of a file
    read in parts), the names the header gave; ``line`` then counts from the stream's start.
    """
    import pyarrow.csv as pcsv

    opts = schema.csv
    _check_csv_schema(schema, source)
    numbered = byte_offset == 0  # a part of a file (a later split) numbers its lines from its start
    lines_filter = None if multiline else _LineFilter(stream, opts.quote, block_size, source, max_record_bytes,
                                                      byte_offset, numbered)
    src = stream if lines_filter is None else lines_filter
    if opts.header:
        if header_names is not None:
            names, head = list(header_names), b""
        else:
            names, head = read_header(src, schema, source, multiline)
        if names is None:
            return
        schema = schema.resolve_columns(names, source)  # a columns: {pattern: ...} not matched before
        features = schema.input_features
        position = {}
        for i, name in enumerate(names):
            position.setdefault(name, i)  # a repeated name: the first column counts
        columns = [tuple(position.get(c) for c in f.columns) if f.gathered else position.get(f.name)
                   for f in features]
        if all(c is None for c in columns for c in (c if isinstance(c, tuple) else (c,))):
            raise ValueError(f"{source}: line 1: the CSV header {names} names none of the schema's features "
                             f"{[f.name for f in features]}; check csv.delimiter ({opts.delimiter!r}) and "
                             f"csv.header")
        file_names = [f"c{i}" for i in range(len(names))]  # pyarrow's names: unique whatever the header says
        read_options = pcsv.ReadOptions(use_threads=False, block_size=block_size, column_names=file_names,
                                        skip_rows=0)
    else:
        head = b""
        features = schema.input_features
        file_names = [f"c{i}" for i in range(sum(len(f.source_columns) for f in features))]
        columns, at = [], 0  # the features' fields in order; a gathered feature's N of them
        for f in features:
            width = len(f.source_columns)
            columns.append(tuple(range(at, at + width)) if f.gathered else at)
            at += width
        read_options = pcsv.ReadOptions(use_threads=False, block_size=block_size, column_names=file_names)
    if not head:  # no header read from this stream: an empty stream (file or split) has no rows
        head = src.read(64 * 1024)
        if not head:
            return
    file = _CsvFile(schema, source, columns, len(file_names), keep_raw, check_rows, tuple(reject_values))
    invalid: list[tuple[int | None, str, int]] = []

    def on_invalid(row) -> str:
        invalid.append((row.number, row.text, row.actual_columns))
        return "skip"

    parse_options = pcsv.ParseOptions(delimiter=opts.delimiter, quote_char=opts.quote, double_quote=True,
                                      escape_char=False, newlines_in_values=multiline, ignore_empty_lines=True,
                                      invalid_row_handler=on_invalid)
    # Unquoted empty cells and unquoted null texts are null here; quoted null texts below.
    convert_options = pcsv.ConvertOptions(column_types={n: pa.binary() for n in file_names},
                                          null_values=sorted(set(opts.null_values) | {""}),
                                          strings_can_be_null=True, quoted_strings_can_be_null=False,
                                          check_utf8=False)
    # pyarrow gets our own column names, so a header is its record 1 (dropped below).
    locator = _RecordLocator(1, 1)

    def fail(e: Exception) -> ValueError:
        hint = (f" (a record longer than the block size, {block_size} bytes? pass a larger --block-size)"
                if "straddl" in str(e) else "")
        return ValueError(f"{source}: near line {locator.next_line}: cannot read CSV: {e}{hint}")

    def physical(lines: np.ndarray) -> np.ndarray:
        return lines if lines_filter is None else lines_filter.physical(lines)

    try:
        # pyarrow takes each read as a block: a short one (1 byte, say) made it drop the blocks after
        # it, or fail as "straddling".  A BufferedReader returns full reads until the end.
        reader = pcsv.open_csv(io.BufferedReader(Prepended(head, src), block_size), read_options=read_options,
                               parse_options=parse_options, convert_options=convert_options)
    except pa.ArrowInvalid as e:
        raise fail(e) from e
    header_pending = opts.header and header_names is None  # else record 1 is a data row, at line 1
    while True:
        try:
            cells = reader.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowInvalid as e:
            raise fail(e) from e
        if header_pending and cells.num_rows:
            header_pending = False
            # The header is record 1 (pyarrow read it as data: we named the columns): drop it.
            spans = _row_spans(cells.slice(0, 1))
            locator.next_record, locator.next_line = 2, 1 + int(spans[0])
            cells = cells.slice(1)
        locator.add_invalid(invalid)
        invalid.clear()
        spans = _row_spans(cells) if cells.num_rows else np.zeros(0, np.int64)
        lines, placed = locator.place(spans, final=False)
        lines, placed = _to_physical(lines, placed, physical)
        if multiline and cells.num_rows and max_record_bytes < 2 * block_size:
            _check_record_sizes(cells, lines, source, max_record_bytes, numbered)
        extra = []
        if lines_filter is not None:
            extra, lines_filter.rejected = lines_filter.rejected, []
        yield _csv_batch(cells, lines, spans, placed, extra, file, multiline)
    locator.add_invalid(invalid)
    _, placed = locator.place(np.zeros(0, np.int64), final=True)
    _, placed = _to_physical(np.zeros(0, np.int64), placed, physical)
    extra = lines_filter.rejected if lines_filter is not None else []
    if placed or extra:
        yield _csv_batch(None, np.zeros(0, np.int64), np.zeros(0, np.int64), placed, extra, file, multiline)


def _check_record_sizes(cells: pa.RecordBatch, lines: np.ndarray, source: str, limit: int, numbered: bool) -> None:
    """:func:`record_too_long` for a record of ``cells`` longer than ``limit`` (``multiline`` CSV,
    whose records pyarrow bounds only by its block, up to twice ``block_size``): its values and
    delimiters, a lower bound of its text, which also has its quotes."""
    size = np.full(cells.num_rows, cells.num_columns - 1, dtype=np.int64)
    for col in cells.columns:
        size += pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False)
    over = np.flatnonzero(size > limit)
    if len(over):
        line = int(lines[over[0]]) if numbered and len(lines) else None
        raise record_too_long(source, line, None, limit, what="record")


def _to_physical(lines: np.ndarray, placed: list, physical) -> tuple[np.ndarray, list]:
    """Stream lines of converted rows and of placed invalid rows -> lines in the file (one lookup)."""
    both = physical(np.concatenate([lines, np.array([p[0] for p in placed], dtype=np.int64)]))
    return both[:len(lines)], [(int(line), t, n) for line, (_, t, n) in zip(both[len(lines):], placed)]


_UNBALANCED = "malformed CSV: unbalanced quote ({q}); a quoted field holding a line break needs --multiline"


def _csv_batch(cells: pa.RecordBatch | None, lines: np.ndarray, spans: np.ndarray, placed: list,
               unbalanced: list, file: _CsvFile, multiline: bool) -> ParsedBatch:
    schema, source = file.schema, file.source
    q = schema.csv.quote
    rejects = [make_reject(source, line, text, f"wrong number of columns: expected {file.expected}, got {nfields}")
               for line, text, nfields in placed]
    rejects += [make_reject(source, line, text, _UNBALANCED.format(q=q)) for line, text in unbalanced]
    reject_values: list = []
    if file.reject_values:  # what a malformed row's fields still say (Spark keeps the fields it could parse)
        reject_values = [_values_from_text(t, file) for _, t, _ in placed]
        reject_values += [_values_from_text(t.decode("utf-8", "replace"), file) for _, t in unbalanced]
    target = input_schema(schema)
    if cells is None or cells.num_rows == 0:
        return ParsedBatch(source, _empty_batch(target), np.zeros(0, np.int64), rejects,
                           pa.array([], pa.binary()) if file.keep_raw else None,
                           reject_values if file.reject_values else None)
    n = cells.num_rows
    reasons = _Reasons(n)
    if not multiline and (spans > 1).any():  # a quote that pyarrow closed on a later line
        for i in np.flatnonzero(spans > 1):
            reasons.add(int(i), _UNBALANCED.format(q=q))
    columns = []
    null_values = file.null_values
    for f, at in zip(schema.input_features, file.columns):
        if f.gathered:
            columns.append(_gather_column(cells, at, f, reasons, null_values))
            continue
        if at is None:
            columns.append(pa.nulls(n, f.arrow_type()))
            continue
        col = cells.column(at)
        is_null = _null_text_mask(col, null_values)  # quoted null texts
        if is_null is not None:
            col = _mask_to_null(col, is_null)
        columns.append(_convert_column(col, f, reasons))
    rows = pa.RecordBatch.from_arrays(columns, schema=target)
    if file.check_rows:
        reasons.merge(row_rejects(rows, schema))
    raw = _raw_column(cells, schema.csv.delimiter, q, null_values) if file.keep_raw else None
    bad = reasons.bad_mask()
    if bad is not None:
        idx = np.flatnonzero(bad)
        texts = _raw_rows(cells, idx, schema.csv.delimiter, q, null_values)
        rejects += [make_reject(source, lines[i], text, reasons.reasons[i]) for i, text in zip(idx, texts)]
        reject_values += _values_of(rows, idx, file.reject_values)
        keep = pa.array(~bad)
        rows = rows.filter(keep)
        lines = lines[~bad]
        if raw is not None:
            raw = raw.filter(keep)
    return ParsedBatch(source, rows, lines, rejects, raw, reject_values if file.reject_values else None)


def _values_from_text(text: str, file: _CsvFile) -> dict | None:
    """The ``reject_values`` features of a malformed record, from the fields it does have."""
    opts = file.schema.csv
    try:
        fields = next(csv.reader(io.StringIO(text, newline=""), delimiter=opts.delimiter, quotechar=opts.quote,
                                 doublequote=True, strict=False), [])
    except csv.Error:
        return None
    features = {f.name: (f, at) for f, at in zip(file.schema.input_features, file.columns)}
    out = {}
    for name in file.reject_values:
        f, at = features[name]
        cell = fields[at] if isinstance(at, int) and at < len(fields) else None
        if cell is None or cell in opts.null_values or cell == "" or f.is_list:
            out[name] = None
        elif f.type == "int64":
            out[name] = _java_long(cell)
        elif f.type == "float":
            out[name] = _java_float(cell)
        else:
            out[name] = cell if f.type == "string" else cell.encode()
    return out


# ---------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------
def _json_value(v, f: Feature):
    if v is None or not f.is_list:
        if isinstance(v, (list, dict)):
            raise _BadValue(f"feature {f.name!r}: expected a single value, got {_show(v)}")
        return _json_scalar(v, f, "")
    if not isinstance(v, list):
        raise _BadValue(f"feature {f.name!r}: expected a JSON array, got {_show(v)}")
    return [_json_scalar(x, f, " item") for x in v]


def _json_gathered(obj: dict, f: Feature) -> list | None:
    """A gathered feature's value: one number from each of its keys (:func:`gather_row`)."""
    cells = []
    for c in f.columns:
        v = obj.get(c)
        if isinstance(v, (list, dict)):
            raise _BadValue(f"feature {f.name!r}: column {c!r}: expected a single value, got {_show(v)}")
        cells.append(_json_scalar(v, f, f" in column {c!r}"))
    try:
        return gather_row(cells, f)
    except NullCell as e:
        raise _BadValue(str(e)) from e


def _json_object_values(obj, features: tuple[Feature, ...]) -> tuple[list, str | None]:
    """(each feature's converted value, None where it did not convert; the first problem or None)."""
    if not isinstance(obj, dict):
        raise _BadValue(f"not a JSON object: {_show(obj)}")
    values, problem = [], None
    for f in features:
        try:
            values.append(_json_gathered(obj, f) if f.gathered else _json_value(obj.get(f.name), f))
        except _BadValue as e:
            values.append(None)
            problem = problem or str(e)
    return values, problem


def _json_line_values(line: bytes, features: tuple[Feature, ...]) -> tuple[list, str | None]:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _BadValue(f"not valid UTF-8: {e}") from e
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise _BadValue(f"malformed JSON: {e}") from e
    except RecursionError as e:
        raise _BadValue(_TOO_DEEP) from e
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        raise _BadValue(f"not a JSON object: {_show(obj)} (an array of objects; a file that is one JSON array "
                        f"is read with --multiline)")
    return _json_object_values(obj, features)


_TOO_DEEP = "malformed JSON: nested deeper than the JSON parser allows (about 1,000 levels)"


class _JsonConverter:
    """Converts lines (or parsed objects) to typed batches: pyarrow first, :mod:`json` for the rest."""

    def __init__(self, schema: Schema, target: pa.Schema):
        import pyarrow.json as pj

        self.pj, self.schema, self.target = pj, schema, target
        self.features = schema.input_features
        self.b64 = [i for i, f in enumerate(self.features) if f.type == "bytes"]
        self.gathered = any(f.gathered for f in self.features)
        # pyarrow reads bytes features as strings: their base64 is decoded after.
        def read_type(f: Feature) -> pa.DataType:
            if f.type != "bytes":
                return f.arrow_type()
            return pa.list_(pa.string()) if f.is_list else pa.string()

        def read_fields(f: Feature) -> list[pa.Field]:  # a gathered feature: a number per key
            if f.gathered:
                return [pa.field(c, f.arrow_type().value_type) for c in f.columns]
            return [pa.field(f.name, read_type(f))]

        read_schema = pa.schema([field for f in self.features for field in read_fields(f)])
        self.parse_options = pj.ParseOptions(explicit_schema=read_schema, unexpected_field_behavior="ignore")

    def fast(self, lines: list[bytes]) -> pa.RecordBatch | None:
        data = b"\n".join(lines) + b"\n"
        try:
            data.decode("utf-8")  # pyarrow's JSON reader lets bad bytes into strings
        except UnicodeDecodeError:
            return None
        try:
            table = self.pj.read_json(io.BytesIO(data), parse_options=self.parse_options,
                                      read_options=self.pj.ReadOptions(use_threads=False,
                                                                        block_size=max(len(data), 1 << 16)))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, ValueError):
            return None
        if table.num_rows != len(lines):  # e.g. two objects on one line
            return None
        batch = table.combine_chunks().to_batches()[0] if table.num_rows else None
        if batch is not None and self.gathered:
            batch = self._gather(batch)
        if batch is None or not self.b64:
            return batch
        arrays = list(batch.columns)
        for i in self.b64:
            try:
                arrays[i] = self._b64(arrays[i], self.features[i])
            except _BadValue:
                return None  # a value that is not base64: let the line-by-line path name it
        return pa.RecordBatch.from_arrays(arrays, schema=self.target)

    def _gather(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """Each gathered feature's keys as its lists (:func:`gather`); None when a null cell rejects
        a row, for the line-by-line path to name it."""
        arrays = []
        for f in self.features:
            if not f.gathered:
                arrays.append(batch.column(f.name))
                continue
            lists, null_cells = gather([batch.column(c) for c in f.columns], f, batch.num_rows)
            if null_cells:
                return None
            arrays.append(lists)
        if self.b64:  # bytes features still base64 strings: typed after
            return pa.RecordBatch.from_arrays(arrays, names=[f.name for f in self.features])
        return pa.RecordBatch.from_arrays(arrays, schema=self.target)

    @staticmethod
    def _b64(arr: pa.Array, f: Feature) -> pa.Array:
        def dec(v):
            if v is None:
                return None
            try:
                return base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError) as e:
                raise _BadValue(str(e)) from e
        values = arr.to_pylist()
        if f.is_list:
            return pa.array([None if v is None else [dec(x) for x in v] for v in values], f.arrow_type())
        return pa.array([dec(v) for v in values], f.arrow_type())

    def convert(self, lines: list[bytes], numbers: list[int], out: list, rejects: list) -> None:
        """Append (batch, its rows' line numbers) parts to ``out``; (number, line, reason, values) to ``rejects``."""
        if not lines:
            return
        batch = self.fast(lines)
        if batch is not None:
            out.append((batch, numbers))
            return
        if len(lines) > 16:
            mid = len(lines) // 2
            self.convert(lines[:mid], numbers[:mid], out, rejects)
            self.convert(lines[mid:], numbers[mid:], out, rejects)
            return
        parsed = []
        for line, number in zip(lines, numbers):
            try:
                values, problem = _json_line_values(line, self.features)
            except _BadValue as e:
                rejects.append((number, line, str(e), None))
                continue
            parsed.append((number, line, values, problem))
        self.from_values(parsed, out, rejects)

    def from_values(self, parsed: list, out: list, rejects: list) -> None:
        kept = []
        for number, line, values, problem in parsed:
            if problem is not None:
                rejects.append((number, line, problem, values))
            else:
                kept.append((number, values))
        if kept:
            arrays = [pa.array([v[j] for _, v in kept], type=f.arrow_type()) for j, f in enumerate(self.features)]
            out.append((pa.RecordBatch.from_arrays(arrays, schema=self.target), [n for n, _ in kept]))


def read_json_batches(stream: BinaryIO, schema: Schema, source: str, *, block_size: int = DEFAULT_BLOCK_SIZE,
                      multiline: bool = False, keep_raw: bool = False, check_rows: bool = True,
                      reject_values: tuple[str, ...] = (), max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                      byte_offset: int = 0) -> Iterator[ParsedBatch]:
    """JSON Lines (or, with ``multiline``, one JSON document) -> :class:`ParsedBatch` es."""
    target = input_schema(schema)
    converter = _JsonConverter(schema, target)
    numbered = byte_offset == 0  # a part of a file numbers its lines from its start

    def too_long(line: int, offset: int) -> ValueError:
        return record_too_long(source, line if numbered else None, offset, max_record_bytes)

    if multiline:
        data = stream.read(max_record_bytes + 1)  # one record: read whole, up to the limit
        if len(data) > max_record_bytes:
            raise record_too_long(source, None, None, max_record_bytes, what="document")
        yield from _json_document(data, converter, schema, target, source, keep_raw, check_rows, reject_values)
        return
    carry: list[bytes] = []  # the start of a line whose end is not read yet
    carried = 0
    start = byte_offset  # the byte (in the file) where carry starts
    next_line = 1
    while True:
        chunk = stream.read(block_size)
        if chunk:
            cut = chunk.rfind(b"\n")
            if cut < 0:  # the line goes on: held, up to the limit
                carry.append(chunk)
                carried += len(chunk)
                if carried > max_record_bytes:
                    raise too_long(next_line, start)
                continue
            data = b"".join(carry + [chunk[:cut + 1]]) if carry else chunk[:cut + 1]
            rest = chunk[cut + 1:]
            carry, carried = ([rest], len(rest)) if rest else ([], 0)
        else:
            data = b"".join(carry)
            carry, carried = [], 0
        if data:
            raw_lines = data.split(b"\n")
            if raw_lines and raw_lines[-1] == b"":
                raw_lines.pop()
            lines, numbers = [], []
            at = start
            for i, line in enumerate(raw_lines):
                if len(line) > max_record_bytes and len(line) - line.endswith(b"\r") > max_record_bytes:
                    raise too_long(next_line + i, at)
                at += len(line) + 1
                if line.strip():
                    lines.append(line[:-1] if line.endswith(b"\r") else line)
                    numbers.append(next_line + i)
            next_line += len(raw_lines)
            start += len(data)
            if lines:
                parts: list = []
                bad: list = []
                converter.convert(lines, numbers, parts, bad)
                yield _json_batch(parts, bad, dict(zip(numbers, lines)), schema, target, source, keep_raw,
                                  check_rows, reject_values)
        if not chunk:
            return


def _json_document(data: bytes, converter: _JsonConverter, schema: Schema, target: pa.Schema, source: str,
                   keep_raw: bool, check_rows: bool, reject_values: tuple[str, ...]) -> Iterator[ParsedBatch]:
    """A whole file as one JSON document: an object, or an array of objects (records 1, 2, ...)."""
    if not data.strip():
        return
    bad: list = []
    parts: list = []
    texts: dict[int, bytes] = {}
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        what = "not valid UTF-8" if isinstance(e, UnicodeDecodeError) else "malformed JSON"
        bad.append((1, data[:4096], _TOO_DEEP if isinstance(e, RecursionError) else f"{what}: {e}", None))
    else:
        objects = doc if isinstance(doc, list) else [doc]
        parsed = []
        for number, obj in enumerate(objects, start=1):
            try:
                texts[number] = json.dumps(obj, ensure_ascii=False).encode()
                values, problem = _json_object_values(obj, converter.features)
            except RecursionError:
                texts.setdefault(number, b"(nested too deep to show)")
                bad.append((number, texts[number], _TOO_DEEP, None))
                continue
            except _BadValue as e:
                bad.append((number, texts[number], str(e), None))
                continue
            parsed.append((number, texts[number], values, problem))
        converter.from_values(parsed, parts, bad)
    yield _json_batch(parts, bad, texts, schema, target, source, keep_raw, check_rows, reject_values)


def _json_batch(parts: list, bad: list, text_of: dict, schema: Schema, target: pa.Schema, source: str,
                keep_raw: bool, check_rows: bool, reject_values: tuple[str, ...]) -> ParsedBatch:
    names = [f.name for f in schema.input_features]
    rejects = [make_reject(source, number, line, reason) for number, line, reason, _ in bad]
    values_of_rejects = [None if values is None else {n: values[names.index(n)] for n in reject_values}
                         for _, _, _, values in bad]
    if parts:
        rows = pa.Table.from_batches([b for b, _ in parts], schema=target).combine_chunks().to_batches()
        rows = rows[0] if rows else _empty_batch(target)
        row_lines = np.array([n for _, numbers in parts for n in numbers], dtype=np.int64)
    else:
        rows, row_lines = _empty_batch(target), np.zeros(0, dtype=np.int64)
    raw = pa.array([text_of[n] for n in row_lines.tolist()], pa.binary()) if keep_raw else None
    if check_rows and rows.num_rows:
        reasons = row_rejects(rows, schema)
        bad_rows = [i for i, r in enumerate(reasons) if r is not None]
        if bad_rows:
            rejects += [make_reject(source, row_lines[i], text_of[int(row_lines[i])], reasons[i]) for i in bad_rows]
            values_of_rejects += _values_of(rows, bad_rows, reject_values)
            keep = np.ones(rows.num_rows, dtype=bool)
            keep[bad_rows] = False
            rows = rows.filter(pa.array(keep))
            row_lines = row_lines[keep]
            if raw is not None:
                raw = raw.filter(pa.array(keep))
    return ParsedBatch(source, rows, row_lines, rejects, raw, values_of_rejects if reject_values else None)
