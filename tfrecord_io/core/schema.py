"""One schema drives everything: parsing input, encoding records, and the loader's parse spec.

A schema is YAML (see ``conf/*.yaml`` and ``docs/wire-contract.md``)::

    record_type: example              # example | sequence_example
    features:                         # example records; for CSV without a header, the column order
      - {name: fare, type: float, default: 0.0}
      - {name: tags, type: string, shape: [-1], separator: "|"}
      - {name: pixels, type: float, shape: [784], columns: {from: px_0, to: px_783}}   # 784 columns, one feature
    label: tips
    task: regression                  # what the label is: regression | binary | classification
    # classes: 10                     # classification: n classes (int64 labels 0..n-1), or their values
    csv: {header: true, delimiter: ",", null_values: [""]}

Sequence-example schemas name ``group_by`` (rows with the same key form one
record), ``order_by`` (step order) and use ``context:`` / ``sequence:`` lists
instead of ``features:``.

This module is pure: it parses YAML text (:func:`tfrecord_io.storage.schema_io.load_schema`
reads it from a path or URI) and derives the Arrow types the encoder takes; the loader's
TensorFlow parse spec is :func:`tfrecord_io.engines.loader.parse_spec`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import reprlib
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

TYPES = ("int64", "float", "bytes", "string")
RECORD_TYPES = ("example", "sequence_example")
#: What a label is, for the model's head (``task:`` in a schema; ``keras_inputs(task=)``).
TASKS = ("regression", "binary", "classification")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class SchemaError(ValueError):
    """A schema file or dict that does not describe a valid schema."""


MAX_SCHEMA_BYTES = 1 << 20  # a schema is a few KiB; anything this big is not one
MAX_YAML_ALIASES = 100
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict = 3, 6, 6


def _show(value: Any) -> str:
    """A value in an error message: bounded in size whatever the value (a YAML alias bomb's 10^9
    leaves included), so that reporting a bad schema never costs more than reading it."""
    return _REPR.repr(value)


class _DuplicateKey(yaml.YAMLError):
    """A key given twice in one YAML mapping."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses more than :data:`MAX_YAML_ALIASES` aliases: "billion laughs"
    documents expand a few hundred bytes into 10^9 nodes through nested aliases."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_YAML_ALIASES} YAML aliases (*name): not a schema "
                                     f"(an alias bomb?)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        """A mapping, refusing a key given twice (``{name: id, type: int64, type: string}``): YAML
        itself would silently keep the last."""
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: merged by SafeLoader
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader refuses it itself
                continue
            if first is not None:
                raise _DuplicateKey(f"line {key_node.start_mark.line + 1}: {_show(key)} is given twice in one "
                                    f"mapping (first on line {first}); YAML would keep the last silently")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True)
class CsvOptions:
    """How CSV input is read.

    header: the first line of each file names the columns (matched to features by name).
        Without a header, columns are taken in the schema's feature order.
    delimiter: one character between fields.
    quote: the quote character; a quoted field may hold delimiters, quotes (doubled) and newlines.
    null_values: cell texts read as null (missing).
    """

    header: bool = True
    delimiter: str = ","
    quote: str = '"'
    null_values: tuple[str, ...] = ("",)

    def __post_init__(self) -> None:
        if len(self.delimiter) != 1:
            raise SchemaError(f"csv.delimiter must be one character, got {_show(self.delimiter)}")
        if len(self.quote) != 1:
            raise SchemaError(f"csv.quote must be one character, got {_show(self.quote)}")


@dataclass(frozen=True)
class Feature:
    """One named, typed column of input and one feature of the output records.

    type: ``int64`` | ``float`` (float32 on the wire) | ``bytes`` | ``string`` (bytes holding UTF-8).
    shape: ``None`` for a scalar, ``(-1,)`` for a variable-length list, ``(k,)`` for exactly k values.
    default: what the loader fills in when the feature is missing (scalar, or list for ``(k,)``).
    required: a null or missing value makes the input row a reject.
    separator: CSV only; how one cell holds a list (``"a|b|c"``).
    allow_missing: input files may lack this column altogether (schema evolution: older files
        written before it existed); it is then null in their rows.  Without it (the default) a
        feature that an input file's header (or the JSON keys, or the DataFrame) does not
        provide fails the conversion before it starts -- usually a misspelled name.
    columns: a *gathered* feature (a wide table's many numeric columns as one ``[N]`` list):
        the N input columns whose values, in this order, make the feature's list; the feature's
        name is then no input column.  YAML ``columns:`` takes a list of names, ``{from: px_0,
        to: px_783}`` (a name stem with a numeric suffix, every number in between) or
        ``{pattern: "px_*"}`` (kept in ``column_pattern`` until :meth:`Schema.resolve_columns`
        matches it against the input's columns).  ``int64`` or ``float`` only; ``shape`` is
        ``[N]`` (taken from the columns when not given).  CSV columns, JSON keys or DataFrame
        columns (:mod:`tfrecord_io.conversion.gather`).  A null cell takes the feature's
        ``default`` for its place, or rejects the row naming the column; all N null is a null
        list (the feature is left out of the record, as any null).
    column_pattern: the ``{pattern: ...}`` of ``columns`` (an ``fnmatch`` glob), not yet matched.
    """

    name: str
    type: str
    shape: tuple[int, ...] | None = None
    default: Any = None
    required: bool = False
    separator: str | None = None
    allow_missing: bool = False
    columns: tuple[str, ...] | None = None
    column_pattern: str | None = None

    def __post_init__(self) -> None:
        where = f"feature {_show(self.name)}"
        if not isinstance(self.name, str) or not self.name:
            raise SchemaError(f"feature name must be a non-empty string, got {_show(self.name)}")
        if self.type not in TYPES:
            raise SchemaError(f"{where}: unknown type {_show(self.type)}; expected one of {', '.join(TYPES)}")
        if self.columns is not None or self.column_pattern is not None:
            self._check_gathered(where)
        if self.shape is not None:
            shape = tuple(self.shape)
            if len(shape) != 1 or not isinstance(shape[0], int) or isinstance(shape[0], bool) \
                    or (shape[0] != -1 and shape[0] < 1):
                raise SchemaError(f"{where}: shape must be [-1] (variable-length list) or [k] with k >= 1, "
                                  f"got {list(shape)!r}")
            object.__setattr__(self, "shape", shape)
        if self.separator is not None and (not self.is_list or not isinstance(self.separator, str)
                                           or not self.separator):
            raise SchemaError(f"{where}: separator is only for list features (shape [-1] or [k]), "
                              f"and must be a non-empty string; got {_show(self.separator)}")
        if not isinstance(self.required, bool):
            raise SchemaError(f"{where}: required must be true or false, got {_show(self.required)}")
        if not isinstance(self.allow_missing, bool):
            raise SchemaError(f"{where}: allow_missing must be true or false, got {_show(self.allow_missing)}")
        if self.default is not None:
            object.__setattr__(self, "default", self._check_default(self.default))

    def _check_gathered(self, where: str) -> None:
        """A gathered feature (``columns:``): N numeric columns as one ``[N]`` list."""
        if self.columns is not None and self.column_pattern is not None:
            raise SchemaError(f"{where}: columns is a list of names or a pattern, not both")
        if self.type not in GATHERED_TYPES:
            raise SchemaError(f"{where}: columns gathers numeric columns (type int64 or float); the feature's "
                              f"type is {self.type}")
        if self.separator is not None:
            raise SchemaError(f"{where}: a feature that gathers columns takes one value per column; it has no "
                              f"separator")
        if self.columns is not None:
            if isinstance(self.columns, str) or not isinstance(self.columns, (list, tuple)) or not self.columns:
                raise SchemaError(f"{where}: columns must be a non-empty list of column names, {{from: a_0, to: "
                                  f"a_9}} or {{pattern: \"a_*\"}}; got {_show(self.columns)}")
            cols = tuple(self.columns)
            for c in cols:
                if not isinstance(c, str) or not c:
                    raise SchemaError(f"{where}: column names must be non-empty strings, got {_show(c)}")
            seen: set[str] = set()
            for c in cols:
                if c in seen:
                    raise SchemaError(f"{where}: column {_show(c)} is listed twice in columns")
                seen.add(c)
            object.__setattr__(self, "columns", cols)
            if self.shape is None:
                object.__setattr__(self, "shape", (len(cols),))
        else:
            if not isinstance(self.column_pattern, str) or not self.column_pattern:
                raise SchemaError(f"{where}: columns' pattern must be a non-empty string, got "
                                  f"{_show(self.column_pattern)}")
            if self.shape is None:
                raise SchemaError(f"{where}: columns {{pattern: {self.column_pattern!r}}} needs shape: [N], the "
                                  f"number of columns it matches (the loader reads [N] values)")
        shape = tuple(self.shape) if isinstance(self.shape, (list, tuple)) else self.shape
        if not isinstance(shape, tuple) or len(shape) != 1 or shape[0] == -1:
            raise SchemaError(f"{where}: a feature that gathers columns has a fixed shape [N], got {_show(self.shape)}")
        if self.columns is not None and shape[0] != len(self.columns):
            raise SchemaError(f"{where}: shape {list(shape)} does not match its {len(self.columns)} columns "
                              f"({self.columns[0]!r} .. {self.columns[-1]!r})")

    @property
    def gathered(self) -> bool:
        """Whether the feature gathers several input columns (``columns:``) into one ``[N]`` list."""
        return self.columns is not None or self.column_pattern is not None

    @property
    def source_columns(self) -> tuple[str, ...]:
        """The input columns the feature reads: its ``columns``, or its own name.  A pattern not yet
        matched (:meth:`Schema.resolve_columns`) has none."""
        if self.columns is not None:
            return self.columns
        return () if self.column_pattern is not None else (self.name,)

    # -- derived properties ------------------------------------------------------------
    @property
    def is_list(self) -> bool:
        return self.shape is not None

    @property
    def is_varlen(self) -> bool:
        return self.shape == (-1,)

    @property
    def fixed_length(self) -> int | None:
        """k for shape [k]; None for scalars and variable-length lists."""
        return self.shape[0] if self.shape is not None and self.shape[0] > 0 else None

    @property
    def kind(self) -> str:
        """The ``tf.train.Feature`` oneof this feature is written as."""
        return {"int64": "int64_list", "float": "float_list"}.get(self.type, "bytes_list")

    def _check_default(self, value: Any) -> Any:
        where = f"feature {_show(self.name)}"
        if self.is_varlen:
            raise SchemaError(f"{where}: a variable-length list has no default (missing reads as an empty list)")
        k = self.fixed_length
        if k is not None:
            values = value if isinstance(value, (list, tuple)) else [value] * k
            if len(values) != k:
                raise SchemaError(f"{where}: default must have {k} values, got {len(values)}")
            return tuple(self._check_scalar_default(v) for v in values)
        if isinstance(value, (list, tuple)):
            raise SchemaError(f"{where}: default of a scalar feature must be a scalar, got {_show(value)}")
        return self._check_scalar_default(value)

    def _check_scalar_default(self, v: Any) -> Any:
        where = f"feature {_show(self.name)}"
        expected = {"int64": "an integer", "float": "a number", "bytes": "a string", "string": "a string"}
        ok = {
            "int64": isinstance(v, int) and not isinstance(v, bool) and INT64_MIN <= v <= INT64_MAX,
            "float": isinstance(v, (int, float)) and not isinstance(v, bool),
            "bytes": isinstance(v, (str, bytes)),
            "string": isinstance(v, str),
        }[self.type]
        if not ok:
            raise SchemaError(f"{where}: default of type {self.type} must be {expected[self.type]}, "
                              f"got {type(v).__name__} {_show(v)}")
        if self.type == "float":
            return float(v)
        if self.type == "bytes" and isinstance(v, str):
            return v.encode("utf-8")
        return v

    # -- Arrow ----------------------------------------------------------------------------
    def arrow_type(self):
        """The Arrow type the encoder expects for this feature's column."""
        import pyarrow as pa

        scalar = {"int64": pa.int64(), "float": pa.float32(), "bytes": pa.binary(), "string": pa.string()}[self.type]
        return pa.list_(scalar) if self.is_list else scalar

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.shape is not None:
            out["shape"] = list(self.shape)
        if self.default is not None:
            d = self.default
            conv = (lambda x: x.decode("utf-8", "backslashreplace") if isinstance(x, bytes) else x)
            out["default"] = [conv(x) for x in d] if isinstance(d, tuple) else conv(d)
            if self.gathered and len(set(d)) == 1:  # N places, one value: written once
                out["default"] = conv(d[0])
        if self.required:
            out["required"] = True
        if self.separator is not None:
            out["separator"] = self.separator
        if self.allow_missing:
            out["allow_missing"] = True
        if self.column_pattern is not None:
            out["columns"] = {"pattern": self.column_pattern}
        elif self.columns is not None:
            span = _span_of(self.columns)
            out["columns"] = {"from": self.columns[0], "to": self.columns[-1]} if span else list(self.columns)
        return out


#: Types a feature that gathers columns (``columns:``) may have.
GATHERED_TYPES = ("int64", "float")
_SUFFIX = re.compile(r"^(.*?)(\d+)$")


def column_range(first: str, last: str) -> tuple[str, ...]:
    """``{from: first, to: last}``: the names of a stem with a numeric suffix, every number from
    ``first``'s to ``last``'s (``px_0`` .. ``px_783``; ``f001`` .. ``f120`` keeps the zero padding)."""
    a, b = _SUFFIX.match(first or ""), _SUFFIX.match(last or "")
    if a is None or b is None or a.group(1) != b.group(1):
        raise SchemaError(f"columns {{from: {_show(first)}, to: {_show(last)}}} needs two names with the same "
                          f"stem and a numeric suffix (px_0 .. px_783)")
    lo, hi = int(a.group(2)), int(b.group(2))
    if hi < lo:
        raise SchemaError(f"columns {{from: {first!r}, to: {last!r}}}: {last!r} comes before {first!r}")
    width = len(a.group(2)) if a.group(2).startswith("0") and len(a.group(2)) > 1 else 0
    return tuple(f"{a.group(1)}{i:0{width}d}" for i in range(lo, hi + 1))


def _span_of(cols: tuple[str, ...]) -> bool:
    """Whether ``cols`` is exactly ``column_range(cols[0], cols[-1])`` (written back as ``{from, to}``)."""
    if len(cols) < 2:
        return False
    try:
        return column_range(cols[0], cols[-1]) == cols
    except SchemaError:
        return False


def natural_key(name: str) -> tuple:
    """Sort key putting ``px_2`` before ``px_10``: the order a pattern's matches are gathered in."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name) if p)


def _columns_from(value: Any, where: str) -> dict[str, Any]:
    """The YAML ``columns:`` of a feature -> ``Feature`` keyword arguments."""
    if isinstance(value, Mapping):
        keys = set(value)
        if keys == {"pattern"}:
            return {"column_pattern": value["pattern"]}
        if keys == {"from", "to"}:
            return {"columns": column_range(value["from"], value["to"])}
        raise SchemaError(f"{where}: columns must be a list of names, {{from: px_0, to: px_783}} or {{pattern: "
                          f"\"px_*\"}}; got keys {sorted(keys, key=str)}")
    return {"columns": value}


_FEATURE_KEYS = {f.name for f in dataclasses.fields(Feature)} - {"column_pattern"}
_CSV_KEYS = {f.name for f in dataclasses.fields(CsvOptions)}
_TOP_KEYS = {"record_type", "features", "label", "csv", "group_by", "order_by", "context", "sequence",
             "ignore_columns", "task", "classes"}


def _features_from(items: Any, section: str) -> tuple[Feature, ...]:
    if not isinstance(items, list) or not items:
        raise SchemaError(f"'{section}' must be a non-empty list of features")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise SchemaError(f"{section}[{i}] must be a mapping with name and type, got {_show(item)}")
        unknown = set(item) - _FEATURE_KEYS
        if unknown:
            raise SchemaError(f"{section}[{i}] ({item.get('name')!r}): unknown key(s) {sorted(unknown)}; "
                              f"allowed: {sorted(_FEATURE_KEYS)}")
        missing = {"name", "type"} - set(item)
        if missing:
            raise SchemaError(f"{section}[{i}]: missing key(s) {sorted(missing)}")
        kwargs = dict(item)
        if "columns" in kwargs:
            try:
                kwargs.update(_columns_from(kwargs.pop("columns"), f"{section}[{i}] ({_show(item['name'])})"))
            except SchemaError as e:
                raise SchemaError(f"feature {_show(item['name'])}: {e}") from e
        if kwargs.get("shape") is not None:
            if not isinstance(kwargs["shape"], (list, tuple)):
                raise SchemaError(f"{section}[{i}] ({_show(item['name'])}): shape must be a list like [-1] or [3]")
            kwargs["shape"] = tuple(kwargs["shape"])
        out.append(Feature(**kwargs))
    return tuple(out)


@dataclass(frozen=True)
class Schema:
    """A validated schema.  Build with :func:`tfrecord_io.load_schema` (a path or an ``hdfs://``
    URI), :meth:`from_yaml` or :meth:`from_dict`.

    For ``example`` records, ``features`` are the record's features in input column order.
    For ``sequence_example`` records, ``context`` holds one value per group and ``sequence``
    one value (or list) per step; ``group_by`` names a context feature and ``order_by`` a
    sequence or context feature.
    """

    record_type: str = "example"
    features: tuple[Feature, ...] = ()
    label: str | None = None
    csv: CsvOptions = field(default_factory=CsvOptions)
    group_by: str | None = None
    order_by: str | None = None
    context: tuple[Feature, ...] = ()
    sequence: tuple[Feature, ...] = ()
    ignore_columns: tuple[str, ...] = ()
    task: str | None = None
    classes: int | tuple | None = None

    def __post_init__(self) -> None:
        for key in ("record_type", "label", "group_by", "order_by", "task"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                what = "example or sequence_example" if key == "record_type" else "a feature name (a string)"
                raise SchemaError(f"{key} must be {what}, got {type(value).__name__} {_show(value)}")
        if self.record_type not in RECORD_TYPES:
            raise SchemaError(f"unknown record_type {_show(self.record_type)}; expected one of {', '.join(RECORD_TYPES)}")
        if self.record_type == "example":
            if not self.features:
                raise SchemaError("an example schema needs a non-empty 'features' list")
            if self.context or self.sequence or self.group_by or self.order_by:
                raise SchemaError("context/sequence/group_by/order_by are for record_type: sequence_example")
        else:
            if self.features:
                raise SchemaError("a sequence_example schema uses 'context' and 'sequence', not 'features'")
            if not self.sequence:
                raise SchemaError("a sequence_example schema needs a non-empty 'sequence' list")
            if self.group_by is not None and self.group_by not in {f.name for f in self.context}:
                raise SchemaError(f"group_by {_show(self.group_by)} names no context feature; "
                                  f"context features: {[f.name for f in self.context]}")
            if self.order_by is not None and self.order_by not in {f.name for f in self.input_features}:
                raise SchemaError(f"order_by {_show(self.order_by)} names no feature; "
                                  f"features: {[f.name for f in self.input_features]}")
        seen: set[str] = set()
        for f in self.input_features:
            if f.name in seen:
                raise SchemaError(f"duplicate feature name {_show(f.name)}")
            seen.add(f.name)
        if self.label is not None and self.label not in seen:
            raise SchemaError(f"label {_show(self.label)} names no feature; features: {sorted(seen)}")
        if isinstance(self.ignore_columns, str) or not all(isinstance(c, str) for c in self.ignore_columns):
            raise SchemaError(f"ignore_columns must be a list of column names, got {_show(self.ignore_columns)}")
        object.__setattr__(self, "ignore_columns", tuple(self.ignore_columns))
        for key in ("group_by", "order_by"):
            name = getattr(self, key)
            if name is not None and self.feature(name).gathered:
                raise SchemaError(f"{key} {_show(name)} gathers columns (a list): {key} is one value per row")
        self._check_sources()
        self._check_task()

    def _check_sources(self) -> None:
        """Each input column is read by one feature at most, and is either read or ignored."""
        reader: dict[str, str] = {}
        for f in self.input_features:
            for c in f.source_columns:
                if c in reader:
                    raise SchemaError(f"column {_show(c)} is read by feature {_show(reader[c])} and by feature "
                                      f"{_show(f.name)}: a column belongs to one feature")
                reader[c] = f.name
        both = sorted(set(reader) & set(self.ignore_columns))
        if both:
            raise SchemaError(f"ignore_columns names feature(s) {both}: a column is either read or ignored")

    def _check_task(self) -> None:
        """``task`` (what the label is: regression | binary | classification) and ``classes`` (a
        classification label's classes: their number n, for int64 labels 0..n-1, or their values)."""
        if self.task is None and self.classes is None:
            return
        if self.label is None:
            raise SchemaError("task/classes describe the label: the schema names no label")
        label = self.feature(self.label)
        if self.task is not None and self.task not in TASKS:
            raise SchemaError(f"task must be one of {', '.join(TASKS)}, got {_show(self.task)}")
        kinds = {"regression": ("float", "int64"), "binary": ("int64", "float"),
                 "classification": ("int64", "string", "bytes")}
        if self.task is not None and label.type not in kinds[self.task]:
            raise SchemaError(f"task {self.task} needs a label of type {' or '.join(kinds[self.task])}; "
                              f"label {_show(label.name)} is {label.type}")
        if self.classes is None:
            return
        if self.task not in (None, "classification"):
            raise SchemaError(f"classes is for task: classification, not {self.task}")
        classes = self.classes
        if isinstance(classes, int) and not isinstance(classes, bool):
            if classes < 2 or label.type != "int64":
                raise SchemaError(f"classes: {classes} (a number of classes) needs an int64 label and at least 2 "
                                  f"classes; for string labels list the values")
            return
        if not isinstance(classes, (list, tuple)) or len(classes) < 2 or len(set(classes)) != len(classes):
            raise SchemaError(f"classes must be a number of classes or a list of at least 2 distinct values, "
                              f"got {_show(classes)}")
        want = int if label.type == "int64" else str
        if not all(isinstance(c, want) and not isinstance(c, bool) for c in classes):
            raise SchemaError(f"classes of the {label.type} label {_show(label.name)} must all be "
                              f"{'integers' if want is int else 'strings'}, got {_show(list(classes))}")
        object.__setattr__(self, "classes", tuple(classes))

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Schema":
        if not isinstance(d, Mapping):
            raise SchemaError(f"a schema must be a mapping at the top level, got {type(d).__name__}")
        unknown = set(d) - _TOP_KEYS
        if unknown:
            raise SchemaError(f"unknown top-level key(s) {sorted(unknown)}; allowed: {sorted(_TOP_KEYS)}")
        csv = d.get("csv") or {}
        if not isinstance(csv, Mapping):
            raise SchemaError(f"'csv' must be a mapping, got {_show(csv)}")
        bad = set(csv) - _CSV_KEYS
        if bad:
            raise SchemaError(f"unknown csv option(s) {sorted(bad)}; allowed: {sorted(_CSV_KEYS)}")
        csv = dict(csv)
        if "null_values" in csv:
            nv = csv["null_values"]
            if not isinstance(nv, list) or not all(isinstance(x, str) for x in nv):
                raise SchemaError(f"csv.null_values must be a list of strings, got {_show(nv)}")
            csv["null_values"] = tuple(nv)
        record_type = d.get("record_type", "example")
        ignore = d.get("ignore_columns") or []
        if not isinstance(ignore, list):
            raise SchemaError(f"ignore_columns must be a list of column names, got {_show(ignore)}")
        kwargs: dict[str, Any] = dict(record_type=record_type, label=d.get("label"), csv=CsvOptions(**csv),
                                      group_by=d.get("group_by"), order_by=d.get("order_by"),
                                      ignore_columns=tuple(ignore), task=d.get("task"), classes=d.get("classes"))
        if "features" in d:
            kwargs["features"] = _features_from(d["features"], "features")
        if "context" in d:
            kwargs["context"] = _features_from(d["context"], "context")
        if "sequence" in d:
            kwargs["sequence"] = _features_from(d["sequence"], "sequence")
        return cls(**kwargs)

    @classmethod
    def load(cls, path) -> "Schema":
        """Deprecated: :func:`tfrecord_io.load_schema` (which also reads ``hdfs://``).  The schema
        in a local YAML file."""
        import os
        import warnings

        warnings.warn("Schema.load(path) is deprecated: use tfrecord_io.load_schema(path_or_uri)", DeprecationWarning,
                      stacklevel=2)
        where = os.fspath(path)
        with open(where, "rb") as f:
            data = f.read(MAX_SCHEMA_BYTES + 1)
        try:
            return cls.from_yaml(data.decode("utf-8"), source=where)
        except UnicodeDecodeError as e:
            raise SchemaError(f"{where}: not UTF-8 text ({e})") from e

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<string>") -> "Schema":
        if len(text) > MAX_SCHEMA_BYTES:
            raise SchemaError(f"{source}: {len(text)} characters; a schema is at most {MAX_SCHEMA_BYTES} bytes")
        try:
            data = yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
        except RecursionError as e:
            raise SchemaError(f"{source}: nested too deeply to be a schema") from e
        except _DuplicateKey as e:
            raise SchemaError(f"{source}: {e}") from e
        except yaml.YAMLError as e:
            raise SchemaError(f"{source}: not valid YAML: {e}") from e
        try:
            return cls.from_dict(data)
        except SchemaError as e:
            raise SchemaError(f"{source}: {e}") from e

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"record_type": self.record_type}
        if self.record_type == "example":
            out["features"] = [f.to_dict() for f in self.features]
        else:
            out["group_by"] = self.group_by
            if self.order_by:
                out["order_by"] = self.order_by
            if self.context:
                out["context"] = [f.to_dict() for f in self.context]
            out["sequence"] = [f.to_dict() for f in self.sequence]
        if self.label:
            out["label"] = self.label
        if self.task:
            out["task"] = self.task
        if self.classes is not None:
            out["classes"] = list(self.classes) if isinstance(self.classes, tuple) else self.classes
        if self.ignore_columns:
            out["ignore_columns"] = list(self.ignore_columns)
        csv = dataclasses.asdict(self.csv)
        csv["null_values"] = list(csv["null_values"])
        out["csv"] = csv
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    # -- views ------------------------------------------------------------------------
    @property
    def input_features(self) -> tuple[Feature, ...]:
        """Every input column, in input order (features, or context then sequence)."""
        return self.features if self.record_type == "example" else self.context + self.sequence

    @property
    def gathered(self) -> bool:
        """Whether a feature gathers several input columns (``columns:``)."""
        return any(f.gathered for f in self.input_features)

    @property
    def source_columns(self) -> tuple[str, ...]:
        """Every input column a feature reads, in feature order (a gathered feature's in its order)."""
        return tuple(c for f in self.input_features for c in f.source_columns)

    def resolve_columns(self, names, where: str = "the input") -> "Schema":
        """This schema with each ``columns: {pattern: ...}`` matched against ``names`` (an input's
        columns): the matches, in natural order (``px_2`` before ``px_10``), become the feature's
        columns.  ValueError (SchemaError) naming the feature and pattern when the matches are not
        ``shape[0]`` columns, or include a column another feature reads."""
        if not any(f.column_pattern is not None for f in self.input_features):
            return self
        names = list(dict.fromkeys(names))
        taken = {c: f.name for f in self.input_features for c in f.source_columns}

        def resolve(f: Feature) -> Feature:
            if f.column_pattern is None:
                return f
            matched = sorted((n for n in names if fnmatch.fnmatchcase(n, f.column_pattern)), key=natural_key)
            for c in matched:
                if c in taken:
                    raise SchemaError(f"feature {f.name!r}: columns {{pattern: {f.column_pattern!r}}} matches column "
                                      f"{c!r}, which feature {taken[c]!r} reads: a column belongs to one feature")
                taken[c] = f.name
            if len(matched) != f.shape[0]:
                shown = f" ({matched[0]!r} .. {matched[-1]!r})" if matched else ""
                raise SchemaError(f"feature {f.name!r}: columns {{pattern: {f.column_pattern!r}}} matches "
                                  f"{len(matched)} column(s) of {where}{shown}, and its shape is {list(f.shape)}")
            return dataclasses.replace(f, columns=tuple(matched), column_pattern=None)

        return dataclasses.replace(self, features=tuple(map(resolve, self.features)),
                                   context=tuple(map(resolve, self.context)),
                                   sequence=tuple(map(resolve, self.sequence)))

    def feature(self, name: str) -> Feature:
        for f in self.input_features:
            if f.name == name:
                return f
        raise KeyError(f"no feature named {_show(name)}; features: {[f.name for f in self.input_features]}")

    # -- Arrow ----------------------------------------------------------------------------
    def arrow_schema(self):
        """Arrow schema of the *input rows* the encoder accepts (one row per input line)."""
        import pyarrow as pa

        return pa.schema([pa.field(f.name, f.arrow_type(), nullable=not f.required)
                          for f in self.input_features])
