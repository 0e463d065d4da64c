"""``tfrecord-io infer-schema``: read a sample of CSV or JSON Lines input and propose a schema.

The result is a starting point to edit, printed as YAML with comments: every column
gets ``int64``, ``float`` or ``string`` (JSON arrays become ``shape: [-1]`` lists), and
columns that were empty in every sampled row are flagged, since their type is a guess.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from dataclasses import dataclass, field
from typing import Iterator

from tfrecord_io.schema import CsvOptions

DEFAULT_SAMPLE_ROWS = 1000


@dataclass
class _Column:
    name: str
    kinds: set[str] = field(default_factory=set)  # seen value kinds: int64 / float / string
    is_list: bool = False
    non_null: int = 0
    nested: bool = False

    def see(self, kind: str | None) -> None:
        if kind is not None:
            self.kinds.add(kind)
            self.non_null += 1

    @property
    def type(self) -> str:
        if self.nested or "string" in self.kinds:
            return "string"
        if "float" in self.kinds:
            return "float"
        return "int64" if "int64" in self.kinds else "string"


def _text_kind(text: str) -> str:
    for kind, parse in (("int64", int), ("float", float)):
        try:
            v = parse(text)
        except ValueError:
            continue
        if kind == "int64" and not -(2**63) <= v < 2**63:
            return "float"
        return kind
    return "string"


def _json_kind(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float"
    return "string"


def _input_files(uri: str) -> list[str]:
    from tfrecord_io import fs

    if any(c in uri for c in "*?["):
        files = fs.glob(uri)
    elif fs.isdir(uri):
        files = [f for f in fs.ls(uri) if not f.rsplit("/", 1)[-1].startswith(("_", "."))]
    else:
        files = [uri]
    if not files:
        raise FileNotFoundError(f"no input files match {uri}")
    return files


def _lines(uri: str) -> Iterator[str]:
    from tfrecord_io import fs

    for path in _input_files(uri):
        with fs.open(path, "rb") as raw:
            yield from io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def infer_columns(uri: str, input_format: str, sample_rows: int = DEFAULT_SAMPLE_ROWS,
                  csv_options: CsvOptions = CsvOptions()) -> list[_Column]:
    """Look at up to ``sample_rows`` rows of the input and describe each column."""
    columns: dict[str, _Column] = {}
    if input_format == "csv":
        reader = csv.reader(_lines(uri), delimiter=csv_options.delimiter, quotechar=csv_options.quote)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{uri}: no rows to infer a schema from")
        if csv_options.header:
            names, rows = header, reader
        else:
            names = [f"column_{i}" for i in range(len(header))]
            rows = _chain_first(header, reader)
        cols = [columns.setdefault(n, _Column(n)) for n in names]
        for i, row in enumerate(rows):
            if i >= sample_rows:
                break
            for col, cell in zip(cols, row):
                col.see(None if cell in csv_options.null_values else _text_kind(cell))
    elif input_format == "json":
        for i, line in enumerate(_lines(uri)):
            if i >= sample_rows:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{uri}: line {i + 1} is not JSON: {e}") from e
            if not isinstance(obj, dict):
                raise ValueError(f"{uri}: line {i + 1}: expected a JSON object per line, got {type(obj).__name__}")
            for name, value in obj.items():
                col = columns.setdefault(name, _Column(name))
                if isinstance(value, list):
                    col.is_list = True
                    for item in value:
                        col.nested |= isinstance(item, (list, dict))
                        col.see(_json_kind(item))
                else:
                    col.nested |= isinstance(value, dict)
                    col.see(_json_kind(value))
    else:
        raise ValueError(f"unknown input format {input_format!r}; expected csv or json")
    return list(columns.values())


def _chain_first(first, rest):
    yield first
    yield from rest


def schema_yaml(columns: list[_Column], input_format: str, csv_options: CsvOptions, sample_rows: int) -> str:
    """The proposed schema as commented YAML (valid input to ``Schema.from_yaml``)."""
    lines = [f"# Inferred by tfrecord-io infer-schema from up to {sample_rows} {input_format} rows: review it.",
             "record_type: example", "features:"]
    for c in columns:
        entry = f"  - {{name: {json.dumps(c.name)}, type: {c.type}"
        if c.is_list:
            entry += ", shape: [-1]"
        entry += "}"
        notes = []
        if c.non_null == 0:
            notes.append("always empty in the sample: type is a guess")
        if c.nested:
            notes.append("nested JSON: kept as its text")
        lines.append(entry + (f"  # {'; '.join(notes)}" if notes else ""))
    if input_format == "csv":
        lines.append(f"csv: {{header: {str(csv_options.header).lower()}, "
                     f"delimiter: {json.dumps(csv_options.delimiter)}, null_values: {json.dumps(list(csv_options.null_values))}}}")
    return "\n".join(lines) + "\n"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="file, directory or glob; local path, file:// or hdfs://")
    parser.add_argument("--format", required=True, choices=("csv", "json"), dest="input_format",
                        help="csv, or json (JSON Lines: one object per line)")
    parser.add_argument("--sample-rows", type=int, default=DEFAULT_SAMPLE_ROWS,
                        help=f"rows to look at (default {DEFAULT_SAMPLE_ROWS})")
    parser.add_argument("--delimiter", default=",", help="CSV field delimiter (default ',')")
    parser.add_argument("--no-header", action="store_true", help="CSV files have no header line")


def run(args: argparse.Namespace) -> int:
    options = CsvOptions(header=not args.no_header, delimiter=args.delimiter)
    columns = infer_columns(args.input, args.input_format, args.sample_rows, options)
    print(schema_yaml(columns, args.input_format, options, args.sample_rows), end="")
    return 0
