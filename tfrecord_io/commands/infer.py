"""``tfrecord-io infer-schema``: read a sample of CSV or JSON Lines input and propose a schema.

The proposal converts the data it was inferred from: columns are typed by the converters' own
value rules (:mod:`tfrecord_io.core.values`: Java's number rules for CSV, the JSON scalar rules), and
input is listed and opened as the converters do (:mod:`tfrecord_io.storage.inputs`: directories, globs,
``.gz``/``.bz2`` decompressed).

Missing values: CSV cells that are one of the null tokens (default :data:`NULL_TOKENS`: empty,
``NA``, ``N/A``, ``null``, ``NULL``, ``None``, ``nan``, and ``NaN`` in a column that is otherwise
integers) are nulls, not strings; the tokens seen go into ``csv.null_values``, and
``--null-values`` replaces the list.  A column with nulls gets a ``default`` (0, 0.0 or ""), so
that the proposed schema loads without editing, and a comment saying how many nulls were seen.
JSON ``null`` and absent keys are nulls; JSON arrays become ``shape: [-1]`` lists; nested objects
(which no feature type takes) are listed under ``ignore_columns``.

Wide tables: a run of at least :data:`GATHER_MIN_COLUMNS` consecutive numeric columns named by
one stem and consecutive numbers (``px_0`` .. ``px_783``, ``V1`` .. ``V2308``) is proposed as one
gathered feature, ``{name: px, type: float, shape: [784], columns: {from: px_0, to: px_783}}``:
one ``[N]`` list per record (packed on the wire, about the bytes of the raw numbers, and one
Keras input) instead of N scalar features.  A run of int64 and float columns is float.  A comment
says what was gathered; ``--no-gather`` lists every column as a feature of its own.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from dataclasses import dataclass, field
from typing import Iterator

from tfrecord_io.commands import exits
from tfrecord_io.conversion.parsing import Prepended, read_csv_header
from tfrecord_io.storage import inputs

from tfrecord_io.core import values
from tfrecord_io.core.schema import CsvOptions

DEFAULT_SAMPLE_ROWS = 1000
#: Without --sample-rows, local inputs up to this size are read whole (a null, or a value of another
#: type, past a sample would otherwise surprise the conversion or training); larger ones and
#: hdfs:// inputs are sampled (DEFAULT_SAMPLE_ROWS rows), and the schema's comment says so.
WHOLE_INPUT_BYTES = 256 << 20
NULL_TOKENS = ("", "NA", "N/A", "n/a", "null", "NULL", "None", "nan", "NaN")
_INT_ONLY_NULLS = ("NaN", "nan")  # NaN is a float value; in a column of integers it means missing
_DEFAULTS = {"int64": 0, "float": 0.0, "string": ""}
#: The fewest consecutive numeric columns, named ``stem<number>`` with consecutive numbers, that
#: infer-schema proposes as one gathered ``[N]`` feature (``columns:``); ``--no-gather`` turns it off.
GATHER_MIN_COLUMNS = 16
_STEM_NUMBER = re.compile(r"^(.*?)(\d+)$")


@dataclass
class _Column:
    name: str
    kinds: set[str] = field(default_factory=set)  # seen value kinds: int64 / float / string
    is_list: bool = False
    non_null: int = 0
    nulls: int = 0
    nested: bool = False
    tokens: set[str] = field(default_factory=set)  # null tokens seen (CSV)
    nan_cells: int = 0  # "NaN"/"nan" cells (CSV), decided once the column's type is known
    declared: bool = False  # typed by a Parquet/ORC schema (counts mean nothing)
    unsupported: str | None = None  # a Parquet/ORC type no feature takes

    def see(self, kind: str | None) -> None:
        if kind is None:
            self.nulls += 1
        else:
            self.kinds.add(kind)
            self.non_null += 1

    @property
    def type(self) -> str:
        if self.nested or "string" in self.kinds:
            return "string"
        if "float" in self.kinds:
            return "float"
        return "int64" if "int64" in self.kinds else "string"


def _rows_csv(uri: str, options: CsvOptions, multiline: bool = False) -> Iterator[tuple[bool, list[str]]]:
    """(is a header, cells) for each non-empty record of each input file; headers read by the
    converter's own header reader (parsing.read_csv_header: byte-order mark, quotes, CRLF)."""
    for f in inputs.list_inputs(uri):
        with inputs.open_input(f.path) as raw:
            stream = raw
            if options.header:
                names, head, end = read_csv_header(raw, options, f.path, multiline)
                if names is None:
                    continue
                yield True, names
                stream = io.BufferedReader(Prepended(head[end:], raw))
            elif (first := raw.read(3)) != b"\xef\xbb\xbf":
                stream = io.BufferedReader(Prepended(first, raw))
            text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")
            for row in csv.reader(text, delimiter=options.delimiter, quotechar=options.quote):
                if row:
                    yield False, row


def infer_columns(uri: str, input_format: str, sample_rows: int = DEFAULT_SAMPLE_ROWS,
                  csv_options: CsvOptions = CsvOptions(), null_tokens: tuple[str, ...] = NULL_TOKENS,
                  multiline: bool = False) -> list[_Column]:
    """Look at up to ``sample_rows`` rows of the input and describe each column (``multiline``: JSON
    files are whole documents, an object or an array of objects, as ``convert --multiline`` reads them)."""
    columns: dict[str, _Column] = {}
    if input_format == "csv":
        names: list[str] | None = None
        cols: list[_Column] = []
        seen = 0
        for is_header, row in _rows_csv(uri, csv_options, multiline):
            if is_header:
                if names is None:
                    names = row
                    cols = [columns.setdefault(n, _Column(n)) for n in names]
                continue  # the header of a later file
            if names is None:
                names = [f"column_{i}" for i in range(len(row))]
                cols = [columns.setdefault(n, _Column(n)) for n in names]
            if seen >= sample_rows:
                break
            seen += 1
            for col, cell in zip(cols, row):
                if cell in _INT_ONLY_NULLS and cell in null_tokens:
                    col.nan_cells += 1
                elif cell in null_tokens:
                    col.tokens.add(cell)
                    col.see(None)
                else:
                    col.see(values.csv_kind(cell))
        if names is None:
            raise ValueError(f"{uri}: no rows to infer a schema from")
        for col in cols:  # NaN: missing in a column of integers (or of nothing), a value otherwise
            if col.nan_cells:
                if col.kinds <= {"int64"}:
                    col.nulls += col.nan_cells
                    col.tokens.update(t for t in _INT_ONLY_NULLS if t in null_tokens)
                else:
                    col.see("float")
                    col.non_null += col.nan_cells - 1
    elif input_format == "json":
        for i, (path, where, obj) in enumerate(_json_objects(uri, multiline)):
            if i >= sample_rows:
                break
            if not isinstance(obj, dict):
                raise ValueError(f"{path}: {where}: expected a JSON object per {'element' if multiline else 'line'}, "
                                 f"got {type(obj).__name__}")
            for name in columns:
                if name not in obj:
                    columns[name].see(None)
            for name, value in obj.items():
                col = columns.get(name)
                if col is None:
                    col = columns[name] = _Column(name)
                    col.nulls = i  # absent from the lines before
                if isinstance(value, list):
                    col.is_list = True
                    col.non_null += 1
                    for item in value:
                        col.nested |= isinstance(item, (list, dict))
                        if item is not None:
                            col.kinds.add(values.json_kind(item))
                elif isinstance(value, dict):
                    col.nested = True
                    col.see("string")
                else:
                    col.see(values.json_kind(value))
    elif input_format in ("parquet", "orc"):
        return _columnar(uri, input_format)
    else:
        raise ValueError(f"unknown input format {input_format!r}; expected csv, json, parquet or orc")
    return list(columns.values())


def _columnar(uri: str, input_format: str) -> list[_Column]:
    """Columns from a Parquet or ORC file's own types (the first file of the input); nothing is sampled."""
    import pyarrow as pa

    first = inputs.list_inputs(uri)[0].path
    with inputs.open_input(first) as f:
        if input_format == "parquet":
            import pyarrow.parquet as pq

            schema = pq.read_schema(pa.PythonFile(f, mode="r"))
        else:
            import pyarrow.orc as orc

            schema = orc.ORCFile(pa.BufferReader(f.read())).schema
    out = []
    for fld in schema:
        t, is_list = fld.type, False
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            t, is_list = t.value_type, True
        kind = ("int64" if pa.types.is_integer(t) or pa.types.is_boolean(t) else
                "float" if pa.types.is_floating(t) else
                "string" if pa.types.is_string(t) or pa.types.is_large_string(t) else
                "bytes" if pa.types.is_binary(t) or pa.types.is_large_binary(t) else None)
        col = _Column(fld.name, is_list=is_list)
        if kind is None:
            col.unsupported = str(fld.type)
        else:
            col.kinds.add(kind)
            col.non_null = 1
            col.nulls = 1 if fld.nullable and not is_list else 0
            col.declared = True
        out.append(col)
    return out


def _json_objects(uri: str, multiline: bool) -> Iterator[tuple[str, str, object]]:
    """(file, where in it, value) of each JSON Lines line, or of each element of a whole-file document."""
    for f in inputs.list_inputs(uri):
        with inputs.open_input(f.path) as raw:
            if multiline:
                try:
                    doc = json.load(io.TextIOWrapper(raw, encoding="utf-8", errors="replace"))
                except (ValueError, RecursionError) as e:
                    raise ValueError(f"{f.path}: not a JSON document: {str(e)[:200]}") from e
                for k, obj in enumerate(doc if isinstance(doc, list) else [doc]):
                    yield f.path, f"element {k}", obj
                continue
            for number, line in enumerate(io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=""), 1):
                if not line.strip():
                    continue
                if number == 1 and line.lstrip().startswith("["):
                    raise ValueError(f"{f.path} holds a JSON array (it starts with '['), not JSON Lines: pass "
                                     f"--multiline to read it (each element a row)")
                try:
                    yield f.path, f"line {number}", json.loads(line)
                except (ValueError, RecursionError) as e:
                    raise ValueError(f"{f.path}: line {number} is not JSON: {str(e)[:200]}") from e


def sample_rows_for(uri: str, asked: int | None) -> int:
    """The rows infer-schema reads: ``asked``, else every row of a local input up to
    :data:`WHOLE_INPUT_BYTES`, else :data:`DEFAULT_SAMPLE_ROWS`."""
    if asked is not None:
        return asked
    if "://" in uri and not uri.startswith("file:"):
        return DEFAULT_SAMPLE_ROWS
    return (1 << 62) if sum(f.size for f in inputs.list_inputs(uri)) <= WHOLE_INPUT_BYTES else DEFAULT_SAMPLE_ROWS


@dataclass
class _Run:
    """Consecutive numeric columns ``stem<i>`` .. ``stem<j>`` proposed as one gathered feature."""

    name: str
    columns: list[_Column]

    @property
    def type(self) -> str:
        return "int64" if all(c.type == "int64" for c in self.columns) else "float"


def _gatherable(c: _Column) -> tuple[str, int] | None:
    """(stem, number) of a scalar numeric column named ``stem<number>``, else None."""
    m = _STEM_NUMBER.match(c.name)
    if m is None or c.is_list or c.nested or c.unsupported or c.non_null == 0 or c.type not in ("int64", "float"):
        return None
    return m.group(1), int(m.group(2))


def find_runs(columns: list[_Column], min_columns: int = GATHER_MIN_COLUMNS) -> list[_Run]:
    """The runs of at least ``min_columns`` consecutive numeric columns named by one stem and
    consecutive numbers (module doc), each named after its stem (``px_`` -> ``px``)."""
    from tfrecord_io.core.schema import column_range

    runs: list[list[_Column]] = []
    last = None
    for c in columns:
        key = _gatherable(c)
        if key is not None and last is not None and key == (last[0], last[1] + 1):
            runs[-1].append(c)
        elif key is not None:
            runs.append([c])
        last = key
    taken = {c.name for c in columns}
    out = []
    for run in runs:
        if len(run) < min_columns:
            continue
        names = tuple(c.name for c in run)
        try:
            if column_range(names[0], names[-1]) != names:  # px_9, px_010: not one {from, to}
                continue
        except ValueError:
            continue
        stem = _STEM_NUMBER.match(names[0]).group(1)
        name = stem.rstrip("_-. ") or "columns"
        if name in taken:
            name = f"{names[0]}_to_{names[-1]}"
        taken.add(name)
        out.append(_Run(name, run))
    return out


def rows_read(columns: list[_Column]) -> int:
    return max((c.nulls + c.non_null for c in columns if not c.declared), default=0)


def _run_entry(run: _Run, input_format: str) -> list[str]:
    """A gathered feature's lines of the proposed schema (with its comment)."""
    cols = run.columns
    entry = (f"  - {{name: {json.dumps(run.name)}, type: {run.type}, shape: [{len(cols)}], "
             f"columns: {{from: {json.dumps(cols[0].name)}, to: {json.dumps(cols[-1].name)}}}")
    nulls = sum(c.nulls for c in cols)
    if nulls:
        entry += f", default: {json.dumps(_DEFAULTS[run.type])}"
    note = (f"# {len(cols)} {input_format} columns {cols[0].name} .. {cols[-1].name} gathered into one [{len(cols)}] "
            f"feature (--no-gather: one feature each)")
    if nulls:
        note += f"; {nulls} null cell(s) in the sample take the default in their place"
    return [f"  {note}", entry + "}"]


def schema_yaml(columns: list[_Column], input_format: str, csv_options: CsvOptions, sample_rows: int,
                gather: bool = True) -> str:
    """The proposed schema as commented YAML (valid input to ``Schema.from_yaml``); ``gather``:
    propose runs of numbered numeric columns as gathered features (:func:`find_runs`)."""
    read = rows_read(columns)
    runs = {id(r.columns[0]): r for r in find_runs(columns)} if gather else {}
    in_run = {id(c) for r in runs.values() for c in r.columns}
    if input_format in ("parquet", "orc"):
        source = f"the {input_format} file's own schema"
    elif read < sample_rows:
        source = f"all {read:,} {input_format} rows"
    else:
        source = (f"the first {read:,} {input_format} rows (a sample: a null or another type later is not seen; "
                  f"--sample-rows N reads more)")
    lines = [f"# Inferred by tfrecord-io infer-schema from {source}: review it.", "record_type: example", "features:"]
    nested = [c for c in columns if (c.nested and input_format == "json") or c.unsupported]
    for c in columns:
        if id(c) in runs:
            lines.extend(_run_entry(runs[id(c)], input_format))
        if c in nested or id(c) in in_run:
            continue
        entry = f"  - {{name: {json.dumps(c.name)}, type: {c.type}"
        if c.is_list:
            entry += ", shape: [-1]"
            if input_format == "csv":
                entry += ', separator: "|"'
        elif c.nulls:
            entry += f", default: {json.dumps(_DEFAULTS[c.type])}"
        entry += "}"
        notes = []
        if c.declared:
            notes.append("nullable in the file's schema" if c.nulls else "")
            notes = [n for n in notes if n]
        elif c.non_null == 0:
            notes.append("always empty in the sample: type is a guess")
        elif c.nulls:
            notes.append(f"{c.nulls} null(s) in {c.nulls + c.non_null} sampled rows: missing values train as "
                         f"this default -- choose one that means 'missing' here, or remove it to have the loader "
                         f"refuse records that lack the feature")
        if len(c.kinds) > 1 and c.type == "string" and input_format == "json":
            notes.append("mixed JSON types: only its strings convert, other values are rejects")
        lines.append(entry + (f"  # {'; '.join(notes)}" if notes else ""))
    if nested:
        lines.append("# No feature type takes these (nested JSON, or " + ", ".join(
            sorted({f"{c.name}: {c.unsupported}" for c in nested if c.unsupported}) or ["-"])
            + "): flatten or cast them to use them.")
        lines.append(f"ignore_columns: {json.dumps([c.name for c in nested])}")
    if input_format == "csv":
        tokens = sorted(set().union(*(c.tokens for c in columns)) | {""}, key=lambda t: (t != "", t))
        lines.append(f"csv: {{header: {str(csv_options.header).lower()}, "
                     f"delimiter: {json.dumps(csv_options.delimiter)}, null_values: {json.dumps(tokens)}}}")
    return "\n".join(lines) + "\n"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="file, directory or glob; local path, file:// or hdfs://")
    parser.add_argument("--format", required=True, choices=("csv", "json", "parquet", "orc"), dest="input_format",
                        help="csv, json (JSON Lines: one object per line), or parquet / orc (typed by the file's "
                             "own schema)")
    parser.add_argument("--sample-rows", type=int, default=None,
                        help=f"rows to look at (default: all of a local input up to {WHOLE_INPUT_BYTES >> 20} MiB, "
                             f"else {DEFAULT_SAMPLE_ROWS})")
    parser.add_argument("--delimiter", default=",", help="CSV field delimiter (default ',')")
    parser.add_argument("--no-header", action="store_true", help="CSV files have no header line")
    parser.add_argument("--multiline", action="store_true",
                        help="JSON files are whole documents (an object, or an array of objects), as "
                             "`convert --multiline` reads them")
    parser.add_argument("--null-values", default=None, metavar="A,B,...",
                        help="CSV cell texts that mean missing (default: " + ",".join(t or '""' for t in NULL_TOKENS)
                             + ')')
    parser.add_argument("--no-gather", action="store_true",
                        help=f"one feature per column, even for a run of {GATHER_MIN_COLUMNS} or more numbered "
                             f"numeric columns (px_0, px_1, ...), which is otherwise proposed as one [N] feature")


def run(args: argparse.Namespace) -> int:
    try:
        options = CsvOptions(header=not args.no_header, delimiter=args.delimiter)
        tokens = NULL_TOKENS if args.null_values is None else tuple(args.null_values.split(","))
        sample_rows = sample_rows_for(args.input, args.sample_rows)
        columns = infer_columns(args.input, args.input_format, sample_rows, options, tokens,
                                multiline=args.multiline)
    except (OSError, ValueError) as e:
        return exits.fail("infer-schema", exits.message_of(e))
    print(schema_yaml(columns, args.input_format, options, sample_rows, gather=not args.no_gather), end="")
    return exits.OK
