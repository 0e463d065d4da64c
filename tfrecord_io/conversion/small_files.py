"""Small input files parsed together, for every engine: which ones, and how.

A parse has a fixed cost per batch -- a few numpy and Arrow calls per column -- which a file of
100 rows pays in full: ~2.6 ms a file on the 17-column benchmark, against ~0.3 ms for 100 rows
inside a large file.  So consecutive small files (at most :data:`SMALL_FILE_BYTES`, uncompressed,
records as lines, the same CSV header) are grouped up to ``block_size`` bytes (:func:`groups`),
their bodies joined into one stream and parsed once (:func:`read_together`), and the result cut
back into each file's own :class:`~tfrecord_io.conversion.parsing.ParsedBatch` es: the same rows,
lines and rejects as the file parsed alone (``tests/test_parsing.py`` checks it on the bad corpus
and on every way a small file can begin and end).  A group that cannot be joined that way is read
file by file (:func:`read_group`).
"""

from __future__ import annotations

import io
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from tfrecord_io.conversion import parsing
from tfrecord_io.conversion.options import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_RECORD_BYTES
from tfrecord_io.core.schema import Schema
from tfrecord_io.storage import inputs

#: Files of at most this many bytes may be parsed together.
SMALL_FILE_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"


def groups(files: Sequence[tuple[str, int]], *, schema: Schema, input_format: str, multiline: bool,
           headers: Mapping[str, Sequence[str]], block_size: int = DEFAULT_BLOCK_SIZE) -> Iterator[list[str]]:
    """The paths of ``(path, size)`` whole files, in order, in groups: runs of small ones that may be
    parsed together (the same header in ``headers`` for CSV with one), up to ``block_size`` bytes;
    any other file alone."""
    group: list[str] = []
    size = 0
    header = schema.csv.header and input_format == "csv"

    def small(path: str, n: int) -> bool:
        return (not multiline and n <= SMALL_FILE_BYTES and inputs.compression_of(path) == "none"
                and (not header or path in headers))

    for path, n in files:
        if not small(path, n):
            if group:
                yield group
            group, size = [], 0
            yield [path]
            continue
        if group and (size + n > block_size or (header and headers[path] != headers[group[0]])):
            yield group
            group, size = [], 0
        group.append(path)
        size += n
    if group:
        yield group


def read_group(paths: list[str], schema: Schema, input_format: str, *, headers: Mapping[str, Sequence[str]],
               multiline: bool = False, block_size: int = DEFAULT_BLOCK_SIZE, keep_raw: bool = False,
               reject_values: tuple[str, ...] = (), max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
               open_input: Callable = inputs.open_input) -> Iterator[parsing.ParsedBatch]:
    """The :class:`~tfrecord_io.conversion.parsing.ParsedBatch` es of a group of :func:`groups`, each of
    one file: parsed together when there are several and they can be, else file by file.
    ``max_record_bytes``: the longest record (:func:`~tfrecord_io.conversion.parsing.read_batches`)."""
    kw = dict(block_size=block_size, keep_raw=keep_raw, reject_values=tuple(reject_values),
              max_record_bytes=max_record_bytes)
    if len(paths) > 1:
        files = []
        for path in paths:
            with open_input(path) as f:
                files.append((path, f.read()))
        names = headers.get(paths[0]) if input_format == "csv" and schema.csv.header else None
        together = read_together(files, schema, input_format, header_names=None if names is None else list(names),
                                 **kw)
        if together is not None:
            yield from together
            return
    for path in paths:
        with open_input(path) as stream:
            yield from parsing.read_batches(stream, schema, input_format, path, multiline=multiline, **kw)


def read_together(files: list[tuple[str, bytes]], schema: Schema, input_format: str, *,
                  header_names: list[str] | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                  keep_raw: bool = False, check_rows: bool = True, reject_values: tuple[str, ...] = (),
                  max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[parsing.ParsedBatch] | None:
    """Parse small whole files, ``(source, bytes)`` of uncompressed CSV with the header
    ``header_names`` (None: the schema's CSV has no header) or JSON Lines, records as lines, as one
    stream; return :class:`~tfrecord_io.conversion.parsing.ParsedBatch` es of one file each, with each
    file's own lines, rows and rejects as :func:`~tfrecord_io.conversion.parsing.read_batches` gives
    them for the file alone (cut into batches at other places).

    Returns None -- read them one by one -- when a file cannot join the stream unchanged (a
    byte-order mark where the stream would not start, a lone ``\\r`` line break) or the parse meets
    a problem it would name a file for (a reject with no line, a whole-file error).
    """
    bodies, before, starts = [], [], []
    total = 0
    for _source, data in files:
        skipped = 0
        if header_names is not None:
            end = parsing.first_record_end(data, schema.csv.quote, False)
            end = len(data) if end is None else end
            skipped, data = data[:end].count(b"\n"), data[end:]
        if data.startswith(_BOM) or data.count(b"\r") != data.count(b"\r\n"):
            return None
        if data and not data.endswith(b"\n"):
            data += b"\n"
        bodies.append(data)
        before.append(skipped)
        starts.append(total)
        total += data.count(b"\n")
    kw = dict(block_size=block_size, keep_raw=keep_raw, check_rows=check_rows, reject_values=reject_values,
              max_record_bytes=max_record_bytes)
    stream = io.BytesIO(b"".join(bodies))
    try:
        if input_format == "csv":
            parsed = list(parsing.read_csv_batches(stream, schema, files[0][0], header_names=header_names, **kw))
        else:
            parsed = list(parsing.read_json_batches(stream, schema, files[0][0], **kw))
    except ValueError:
        return None
    if any(r["line"] is None for pb in parsed for r in pb.rejects):
        return None
    first_lines = np.asarray(starts, np.int64)
    out = []
    for pb in parsed:
        owner = np.searchsorted(first_lines, pb.lines - 1, side="right") - 1
        bad_owner = (np.searchsorted(first_lines, np.asarray([r["line"] for r in pb.rejects], np.int64) - 1,
                                     side="right") - 1) if pb.rejects else np.zeros(0, np.int64)
        for k in np.unique(np.concatenate([owner, bad_owner])):
            k = int(k)
            shift = before[k] - starts[k]
            rows = np.flatnonzero(owner == k)
            lo, hi = (int(rows[0]), int(rows[-1]) + 1) if rows.size else (0, 0)  # a file's rows are consecutive
            mine = np.flatnonzero(bad_owner == k)
            rejects = [dict(pb.rejects[j], source=files[k][0], line=pb.rejects[j]["line"] + shift) for j in mine]
            out.append(parsing.ParsedBatch(
                source=files[k][0], rows=pb.rows.slice(lo, hi - lo), lines=pb.lines[lo:hi] + shift,
                rejects=rejects, raw=None if pb.raw is None else pb.raw.slice(lo, hi - lo),
                reject_values=None if pb.reject_values is None else [pb.reject_values[j] for j in mine]))
    return out
