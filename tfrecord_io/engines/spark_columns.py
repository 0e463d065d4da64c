"""How Spark's column types become features: the one table, for the ``tfrecord`` data source and the
Spark job's ``--format parquet|orc|table`` alike (``docs/wire-contract.md``, "Spark columns").

==============================================  ===========================  ============================
Spark column                                    feature                      written as
==============================================  ===========================  ============================
byte, short, int, long                          ``int64``                    the integer
boolean                                         ``int64``                    1 / 0
float, double                                   ``float``                    float32
decimal(p, s)                                   ``float`` (``string`` with   float32 (the decimal's text)
                                                option ``decimalAs=string``)
date                                            ``int64``                    days since 1970-01-01
timestamp, timestamp_ntz                        ``int64``                    microseconds since the epoch
                                                                             (``timestampUnit``: seconds,
                                                                             milliseconds), truncated
string, varchar, char                           ``string``                   UTF-8
binary                                          ``bytes``
array<one of the above>                         a ``[-1]`` list of it        each element as above
array<array<...>>                               a SequenceExample feature    one step per inner array
                                                list (``recordType``)        (an Example cannot hold it)
struct<a, b>                                    the features ``s.a``, ``s.b``  each field as above
MLlib vector (``VectorUDT``, dense or sparse)   ``float`` ``[-1]``           the dense values (a sparse
                                                                             vector expanded to its size)
map, array<struct>, null                        refused before any task, naming the column and the cast that works
==============================================  ===========================  ============================

A schema feature that gathers columns (``columns:``, :mod:`tfrecord_io.conversion.gather`) takes N
scalar numeric columns of the table above (each converted as its row says) into one ``[N]`` list.

:func:`column_plan` decides, on the driver, where each feature's values come from (a column, or a
field of a struct) and how they are converted; :meth:`ColumnSource.extract` applies it to the Arrow
batches the executors get.  Spark's types are imported here only when a function needs them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfrecord_io.conversion.gather import gather, null_cell_reasons
from tfrecord_io.core.schema import Feature, Schema, SchemaError

__all__ = ["SPARK_TYPES", "SparkType", "ColumnSource", "WriteTypes", "check_column_types", "column_plan",
           "gathered_reasons", "leaf_columns", "schema_from_spark"]


@dataclass(frozen=True)
class SparkType:
    """How one feature type meets Spark's types.

    read_as: the SQL type of the column ``spark.read`` gives the feature's values.
    inferred_from: Spark types whose columns get this feature type when no schema is given.
    written_from: column types a schema's feature of this type accepts (value-preserving casts).
    """

    read_as: str
    inferred_from: tuple[str, ...]
    written_from: tuple[str, ...]


_INTEGERS = ("ByteType", "ShortType", "IntegerType", "LongType")
_TIMES = ("DateType", "TimestampType", "TimestampNTZType")
_STRINGS = ("StringType", "VarcharType", "CharType")
SPARK_TYPES = {
    "int64": SparkType("bigint", _INTEGERS + ("BooleanType",) + _TIMES, _INTEGERS + ("BooleanType",) + _TIMES),
    "float": SparkType("float", ("FloatType", "DoubleType", "DecimalType"),
                       ("FloatType", "DoubleType", *_INTEGERS, "DecimalType")),
    "string": SparkType("string", _STRINGS, _STRINGS + ("DecimalType",)),
    "bytes": SparkType("binary", ("BinaryType",), ("BinaryType", "StringType")),
}
_CASTS = {"MapType": "explode it, or turn it into a JSON string with to_json",
          "StructType": "flatten its fields into columns (col('s.field')), or to_json",
          "NullType": "cast it to the type it should have"}
TIMESTAMP_UNITS = {"seconds": "s", "milliseconds": "ms", "microseconds": "us"}


@dataclass(frozen=True)
class WriteTypes:
    """The writer's options for the types of the table.

    decimal_as: ``"float"`` (default) or ``"string"`` (``decimalAs``): a decimal column's feature.
    timestamp_unit: ``"microseconds"`` (default, Spark's own), ``"milliseconds"`` or ``"seconds"``
        (``timestampUnit``): what a timestamp's int64 counts since the epoch.
    """

    decimal_as: str = "float"
    timestamp_unit: str = "microseconds"

    def __post_init__(self):
        if self.decimal_as not in ("float", "string"):
            raise ValueError(f"decimalAs must be float or string, got {self.decimal_as!r}")
        if self.timestamp_unit not in TIMESTAMP_UNITS:
            raise ValueError(f"timestampUnit must be one of {', '.join(TIMESTAMP_UNITS)}, got {self.timestamp_unit!r}")


def _is_vector(dt) -> bool:
    """An MLlib vector column (``pyspark.ml.linalg.VectorUDT`` or ``pyspark.mllib.linalg.VectorUDT``)."""
    return type(dt).__name__ == "VectorUDT"


def leaf_columns(struct) -> list[tuple[str, tuple[str, ...], object]]:
    """``(feature name, path, Spark type)`` of every column, struct fields flattened to dotted names
    (``s.a``: the field ``a`` of the struct column ``s``); a vector is a leaf."""
    from pyspark.sql import types as T

    out = []

    def walk(fields, prefix: str, path: tuple[str, ...]):
        for f in fields:
            dt = f.dataType
            if isinstance(dt, T.StructType) and not _is_vector(dt):
                walk(dt.fields, f"{prefix}{f.name}.", path + (f.name,))
            else:
                out.append((prefix + f.name, path + (f.name,), dt))

    walk(struct.fields, "", ())
    return out


def _scalar_kind(dt, types: WriteTypes) -> str | None:
    """The feature type a scalar Spark type becomes (None: none)."""
    name = type(dt).__name__
    if name == "DecimalType":
        return types.decimal_as
    return next((t for t, m in SPARK_TYPES.items() if name in m.inferred_from), None)


def _cannot_hold(name: str, dt, record_type: str) -> TypeError:
    from pyspark.sql import types as T

    kind = type(dt).__name__
    if isinstance(dt, T.ArrayType) and isinstance(dt.elementType, T.ArrayType) and record_type == "example":
        fix = ("a tf.train.Example holds one flat list per feature: flatten it (F.flatten), or write "
               "recordType SequenceExample, where each inner array is a step")
    elif isinstance(dt, T.ArrayType) and isinstance(dt.elementType, T.StructType):
        fix = "explode the array, then flatten the struct's fields into columns"
    else:
        fix = _CASTS.get(kind, "cast it to a number, string or binary column (or an array of one)")
    record = "tf.train.SequenceExample" if record_type == "sequence_example" else "tf.train.Example"
    return TypeError(f"column {name!r} has type {dt.simpleString()}, which a {record} cannot hold: {fix}, or drop it")


def schema_from_spark(struct, record_type: str = "example", types: WriteTypes = WriteTypes()) -> Schema:
    """The schema a DataFrame's types give (the module's table); TypeError naming a column we cannot write.

    For ``sequence_example`` (spark-tfrecord's layout: one row per record) an array of arrays is a
    feature list whose steps are lists, and every other column a context feature."""
    from pyspark.sql import types as T

    features, sequence = [], []
    for name, _, dt in leaf_columns(struct):
        kind, shape, steps = _scalar_kind(dt, types), None, False
        if _is_vector(dt):
            kind, shape = "float", (-1,)
        elif kind is None and isinstance(dt, T.ArrayType):
            kind, shape = _scalar_kind(dt.elementType, types), (-1,)
            if kind is None and record_type == "sequence_example" and isinstance(dt.elementType, T.ArrayType):
                kind, steps = _scalar_kind(dt.elementType.elementType, types), True
        if kind is None:
            raise _cannot_hold(name, dt, record_type)
        (sequence if steps else features).append(Feature(name=name, type=kind, shape=shape))
    if not features and not sequence:
        raise TypeError("the DataFrame has no columns")
    if record_type == "example":
        return Schema(record_type="example", features=tuple(features))
    if not sequence:
        raise TypeError("recordType SequenceExample needs at least one array-of-arrays column (a feature list: "
                        "one array per step); the DataFrame has none")
    return Schema(record_type="sequence_example", context=tuple(features), sequence=tuple(sequence))


def check_column_types(schema: Schema, struct, where: str, schema_name: str = "the schema") -> None:
    """Refuse, before any task, a column whose Spark type its feature does not take (the module's
    table), naming the column and what to do.  Struct fields are matched by their dotted names."""
    from pyspark.sql import types as T

    types = {name: dt for name, _, dt in leaf_columns(struct)}
    steps = {f.name for f in schema.sequence}
    for f in schema.input_features:
        if f.gathered:
            _check_gathered_types(f, types, where, schema_name)
            continue
        dt = types.get(f.name)
        if dt is None:  # allowed missing: null in every row
            continue
        if _is_vector(dt):
            ok = f.type == "float" and f.is_list and f.name not in steps
        else:
            inner, arrays = dt, 0
            while isinstance(inner, T.ArrayType):
                inner, arrays = inner.elementType, arrays + 1
            ok = type(inner).__name__ in SPARK_TYPES[f.type].written_from and \
                arrays == int(f.is_list) + int(f.name in steps)
        if not ok:
            want = f"an array of {f.type}" if f.is_list else f.type
            shape = f" (shape {list(f.shape)})" if f.is_list else ""
            raise SchemaError(f"column {f.name!r} of {where} is {dt.simpleString()}, and feature {f.name!r} is "
                              f"{want}{shape} in {schema_name}: cast the column, or change the feature's type")


def _check_gathered_types(f: Feature, types: dict, where: str, schema_name: str) -> None:
    """Each column a gathered feature reads is a scalar column its type takes."""
    from pyspark.sql import types as T

    for c in f.columns:
        dt = types.get(c)
        if dt is None:  # allowed missing: null in every row
            continue
        if _is_vector(dt) or isinstance(dt, T.ArrayType) or type(dt).__name__ not in SPARK_TYPES[f.type].written_from:
            raise SchemaError(f"column {c!r} of {where} is {dt.simpleString()}, and feature {f.name!r} gathers "
                              f"{f.type} columns (shape {list(f.shape)}) in {schema_name}: cast the column, or "
                              f"leave it out of the feature's columns")


# ---------------------------------------------------------------------------------------------
# Executors: Arrow columns -> the encoder's columns
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ColumnSource:
    """Where a feature's values come from in the writer's Arrow batches, and how they are converted.

    path: the column, then struct fields; convert: ``"cast"`` (to the feature's Arrow type),
    ``"days"`` (date32), ``"epoch"`` (a timestamp, in ``unit``), ``"decimal"`` (to float or its
    text), ``"vector"`` (an MLlib vector to its dense values), ``"gather"`` (a gathered feature:
    ``parts`` are its N columns' sources, ``gathered`` the feature).
    """

    feature: str
    path: tuple[str, ...]
    convert: str = "cast"
    unit: str = "us"
    parts: tuple["ColumnSource", ...] = ()
    gathered: Feature | None = None

    def _parts(self, batch: pa.RecordBatch) -> list[pa.Array]:
        scalar = pa.int64() if self.gathered.type == "int64" else pa.float32()
        return [p.extract(batch, scalar) for p in self.parts]

    def extract(self, batch: pa.RecordBatch, target: pa.DataType) -> pa.Array:
        if self.gathered is not None:
            lists, _ = gather(self._parts(batch), self.gathered, batch.num_rows)
            return lists if lists.type == target else lists.cast(target)
        i = batch.schema.get_field_index(self.path[0])
        if i < 0:  # a feature the DataFrame lacks (allowMissingColumns): null in every row
            return pa.nulls(batch.num_rows, target)
        arr = batch.column(i)
        for name in self.path[1:]:
            arr = pc.struct_field(arr, name)
        if self.convert == "vector":
            arr = _dense_vectors(arr)
        elif self.convert != "cast":
            arr = _elementwise(arr, self._scalar)
        return arr if arr.type == target else arr.cast(target, safe=False)

    def _scalar(self, values: pa.Array) -> pa.Array:
        if self.convert == "days":
            return values.cast(pa.int32()).cast(pa.int64())
        if self.convert == "epoch":
            unit = values.type.unit
            if unit != self.unit:
                values = values.cast(pa.timestamp(self.unit, values.type.tz), safe=False)  # truncates
            return values.cast(pa.int64())
        return values.cast(pa.string()) if self.convert == "decimal-string" else values.cast(pa.float64())


def gathered_reasons(batch: pa.RecordBatch, sources: tuple[ColumnSource, ...]) -> dict[int, str]:
    """``{row: reason}`` of the rows of ``batch`` that a null cell of a gathered feature rejects,
    naming the column (:func:`tfrecord_io.conversion.gather.null_cell_reasons`)."""
    out: dict[int, str] = {}
    for src in sources:
        if src.gathered is None or src.gathered.default is not None:
            continue
        parts = src._parts(batch)
        valid = np.stack([p.is_valid().to_numpy(zero_copy_only=False) for p in parts], axis=1) if parts else \
            np.zeros((batch.num_rows, 0), bool)
        for i, why in null_cell_reasons(valid, src.gathered).items():
            out.setdefault(i, why)
    return out


def _elementwise(arr: pa.Array, fn) -> pa.Array:
    """``fn`` on the scalar values of ``arr``, through any lists around them (offsets and nulls kept)."""
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        inner = _elementwise(arr.values, fn)
        cls = pa.ListArray if pa.types.is_list(arr.type) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, inner, mask=arr.is_null())
    return fn(arr)


def _dense_vectors(arr: pa.Array) -> pa.Array:
    """MLlib vectors (VectorUDT's struct<type: int8, size: int32, indices: array<int32>, values:
    array<double>>; type 1 dense, 0 sparse) as lists of their dense values."""
    kinds = pc.struct_field(arr, "type").to_numpy(zero_copy_only=False)
    values = pc.struct_field(arr, "values")
    if not np.any(kinds == 0):  # all dense (or null): the values lists as they are
        return pa.ListArray.from_arrays(values.offsets, values.values, mask=arr.is_null())
    sizes = pc.struct_field(arr, "size").to_pylist()
    indices = pc.struct_field(arr, "indices").to_pylist()
    rows = []
    for valid, k, size, idx, vals in zip(arr.is_valid().to_pylist(), kinds, sizes, indices, values.to_pylist()):
        if not valid:
            rows.append(None)
        elif k == 0:
            dense = np.zeros(size, np.float64)
            dense[np.asarray(idx, np.int64)] = vals
            rows.append(dense)
        else:
            rows.append(vals)
    return pa.array(rows, pa.list_(pa.float64()))


def column_plan(struct, schema: Schema, types: WriteTypes = WriteTypes()) -> tuple[ColumnSource, ...]:
    """For each input feature of ``schema``, where its values are in a DataFrame of ``struct`` (the
    module's table); a feature no column provides reads nulls."""
    from pyspark.sql import types as T

    leaves = {name: (path, dt) for name, path, dt in leaf_columns(struct)}
    unit = TIMESTAMP_UNITS[types.timestamp_unit]
    plan = []

    def source(name: str, f: Feature) -> ColumnSource:
        path, dt = leaves.get(name, ((name,), None))
        inner = dt
        while isinstance(inner, T.ArrayType):
            inner = inner.elementType
        kind = type(inner).__name__ if inner is not None else None
        if dt is not None and _is_vector(dt):
            convert = "vector"
        elif kind == "DateType":
            convert = "days"
        elif kind in ("TimestampType", "TimestampNTZType"):
            convert = "epoch"
        elif kind == "DecimalType":
            convert = "decimal-string" if f.type == "string" else "decimal"
        else:
            convert = "cast"
        return ColumnSource(name, path, convert, unit)

    for f in schema.input_features:
        if f.gathered:
            plan.append(ColumnSource(f.name, (), "gather", unit, tuple(source(c, f) for c in f.columns), f))
        else:
            plan.append(source(f.name, f))
    return tuple(plan)
