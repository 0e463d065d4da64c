"""Vectorized encoding of Arrow batches into serialized ``tf.train.Example`` / ``SequenceExample``.

No protobuf object is built per row.  The protobuf wire format of these messages is
small and stable (``docs/wire-contract.md``), so each record is laid out directly:

    Example      { Features features = 1; }
    Features     { map<string, Feature> feature = 1; }      # map entry: {string key = 1; Feature value = 2;}
    Feature      { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList    { repeated bytes value = 1; }
    FloatList    { repeated float value = 1 [packed]; }
    Int64List    { repeated int64 value = 1 [packed]; }
    SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }
    FeatureLists { map<string, FeatureList> feature_list = 1; }
    FeatureList  { repeated Feature feature = 1; }

Every field above is length-delimited (wire type 2), so a tag byte is ``field << 3 | 2``
and is followed by a varint length.  A record is built as a list of *pieces* (constant
bytes, varints, fixed-width values, ragged byte runs) whose per-row lengths are computed
bottom-up with numpy; one pass then scatters every piece into a single output buffer.

Nulls: a null scalar or null list is left out of the record (the loader then fills the
schema default); an empty list is written as a present, empty list.

When the compiled record core is built (:mod:`tfrecord_io.core.native`), the checks, casts and
column flattening below still run here, per column, and the records are laid out by
``_native.encode_examples`` / ``encode_sequence_examples`` in one pass per batch instead of the
pieces: the same bytes (``tests/test_native_core.py``).  The numpy path is the reference.

Writers of TFRecord files take :func:`encode_framed`: with the compiled core each record is encoded
straight into its place in the framed stream (header, record, data CRC), one buffer per batch and
no second pass; with numpy the records are encoded, then framed (:class:`FramedBatch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfrecord_io.core import native
from tfrecord_io.core.framing import FramedBatch
from tfrecord_io.core.schema import Feature, Schema

# Tag bytes: (field_number << 3) | 2, wire type 2 = length-delimited.
_TAG1, _TAG2, _TAG3 = b"\x0a", b"\x12", b"\x1a"
_KIND_TAG = {"bytes_list": _TAG1, "float_list": _TAG2, "int64_list": _TAG3}


# A *presence* mask is a bool array over rows, or None meaning "every row"; lengths are
# an int64 array over rows, or a plain int when every row has the same length.


def _where(present: np.ndarray | None, value):
    """``value`` in present rows, 0 elsewhere (``value`` unchanged when every row is present)."""
    return value if present is None else np.where(present, value, 0)


def _expand(present: np.ndarray | None, values: np.ndarray) -> np.ndarray:
    """Per-row array from one value per present row (0 in absent rows)."""
    if present is None:
        return values
    out = np.zeros(len(present), dtype=values.dtype)
    out[present] = values
    return out


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


# ---------------------------------------------------------------------------------------
# Varints
# ---------------------------------------------------------------------------------------
def _varint_sizes(v: np.ndarray) -> np.ndarray:
    """Bytes each uint64 takes as a protobuf varint (1..10)."""
    v = v.astype(np.uint64, copy=False)
    sizes = np.ones(v.shape, dtype=np.int64)
    top = int(v.max()) if len(v) else 0
    for k in range(1, 10):
        if top < (1 << (7 * k)):
            break
        sizes += v >= np.uint64(1 << (7 * k))
    return sizes


def _varint_matrix(v: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """An N x max(size) uint8 matrix whose row i holds v[i]'s varint in its first sizes[i] bytes."""
    v = v.astype(np.uint64, copy=False)
    width = int(sizes.max()) if len(sizes) else 1
    if width == 1:
        return v.astype(np.uint8).reshape(-1, 1)
    mat = np.empty((len(v), width), dtype=np.uint8)
    for k in range(width):
        mat[:, k] = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)) | np.uint64(0x80)
    mat[np.arange(len(v)), sizes - 1] &= 0x7F  # the last byte of each varint has no continuation bit
    return mat


def _varint_bytes(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v < 1:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


# ---------------------------------------------------------------------------------------
# Pieces: per-row byte runs with known lengths, assembled into one buffer
# ---------------------------------------------------------------------------------------
class _Const:
    """The same bytes in every present row."""

    def __init__(self, data: bytes, present: np.ndarray | None = None):
        self.data, self.present = np.frombuffer(data, dtype=np.uint8), present
        self.lengths = _where(present, len(data))

    def fill(self, mat: np.ndarray, at: int, w: int) -> None:
        mat[:, at:at + w] = self.data

    def scatter(self, out: np.ndarray, pos: np.ndarray) -> None:
        at = pos if self.present is None else pos[self.present]
        out[at[:, None] + np.arange(len(self.data))] = self.data


class _Padded:
    """Row r of ``matrix`` (one row per present row) contributes its first ``sizes[r]`` bytes."""

    def __init__(self, matrix: np.ndarray, sizes: np.ndarray | int, present: np.ndarray | None = None):
        self.matrix, self.sizes, self.present = matrix, sizes, present
        if isinstance(sizes, int):
            self.lengths = _where(present, sizes)
        else:
            self.lengths = _expand(present, sizes)

    def fill(self, mat: np.ndarray, at: int, w: int) -> None:
        src = self.matrix[:, :w]
        if self.present is None:
            mat[:, at:at + w] = src
        else:
            mat[self.present, at:at + w] = src

    def scatter(self, out: np.ndarray, pos: np.ndarray) -> None:
        at = pos if self.present is None else pos[self.present]
        cols = np.arange(self.matrix.shape[1])
        if isinstance(self.sizes, int):
            out[at[:, None] + cols] = self.matrix
            return
        mask = cols < self.sizes[:, None]
        out[(at[:, None] + cols)[mask]] = self.matrix[mask]


class _Ragged:
    """Variable-length byte runs: row i's run is the next ``lengths[i]`` bytes of ``data``."""

    def __init__(self, lengths: np.ndarray, data: np.ndarray):
        self.lengths, self.data = lengths.astype(np.int64, copy=False), data

    def _targets(self, row_starts: np.ndarray) -> np.ndarray:
        src_start = np.cumsum(self.lengths) - self.lengths
        return np.repeat(row_starts - src_start, self.lengths) + np.arange(len(self.data))

    def fill(self, mat: np.ndarray, at: int, w: int) -> None:
        row_starts = np.arange(mat.shape[0], dtype=np.int64) * mat.shape[1] + at
        mat.reshape(-1)[self._targets(row_starts)] = self.data

    def scatter(self, out: np.ndarray, pos: np.ndarray) -> None:
        out[self._targets(pos)] = self.data


def _varint_piece(values, present: np.ndarray | None = None):
    """One varint per present row (a constant piece when they are all the same)."""
    if isinstance(values, (int, np.integer)):
        return _Const(_varint_bytes(int(values)), present)
    v = values if present is None else values[present]
    if len(v) == 0:
        return _Const(b"", present)
    lo, hi = v.min(), v.max()
    if lo == hi:
        return _Const(_varint_bytes(int(lo)), present)
    if hi < 0x80:  # every value fits one byte (most lengths)
        return _Padded(v.astype(np.uint8).reshape(-1, 1), 1, present)
    sizes = _varint_sizes(v)
    return _Padded(_varint_matrix(v, sizes), sizes, present)


def _total_length(pieces: list):
    return sum((p.lengths for p in pieces), 0)


def _merge_consts(pieces: list) -> list:
    """Join runs of constant pieces present in every row into one (fewer, wider blocks)."""
    out: list = []
    for p in pieces:
        if isinstance(p, _Const) and p.present is None and out and isinstance(out[-1], _Const) \
                and out[-1].present is None:
            out[-1] = _Const(out[-1].data.tobytes() + p.data.tobytes())
        else:
            out.append(p)
    return out


def _assemble(pieces: list, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate, per row, the pieces in order; returns (offsets[n+1], data).

    Fast path: lay the pieces side by side in an N x W matrix, each in a column block as
    wide as its longest run (the constant ones as one row template broadcast to every row, the
    others by whole-block strided copies), then keep each row's valid prefix of every block
    with one boolean compress.  When a few long runs would make
    the matrix much larger than the output, scatter each piece into place instead.
    """
    pieces = [p for p in pieces if (p.lengths if isinstance(p.lengths, int) else p.lengths.any())]
    widths = [p.lengths if isinstance(p.lengths, int) else int(p.lengths.max()) for p in pieces]
    row_len = np.zeros(n, dtype=np.int64) + _total_length(pieces)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_len, out=offsets[1:])
    total, width = int(offsets[-1]), sum(widths)
    if n * width <= 2 * total + (1 << 16):
        template = np.zeros(width, dtype=np.uint8)
        at = 0
        for p, w in zip(pieces, widths):
            if isinstance(p, _Const) and p.present is None:
                template[at:at + w] = p.data
            at += w
        mat = np.empty((n, width), dtype=np.uint8)
        mat[:] = template
        mask = None
        at = 0
        for p, w in zip(pieces, widths):
            if not (isinstance(p, _Const) and p.present is None):
                p.fill(mat, at, w)
            if not isinstance(p.lengths, int) and not (p.lengths == w).all():
                if mask is None:
                    mask = np.ones((n, width), dtype=bool)
                mask[:, at:at + w] = np.arange(w) < p.lengths[:, None]
            at += w
        return offsets, mat.reshape(-1) if mask is None else mat[mask]
    out = np.empty(total, dtype=np.uint8)
    pos = offsets[:-1].copy()
    for p in _merge_consts(pieces):
        p.scatter(out, pos)
        pos += p.lengths
    return offsets, out


def _segment_sums(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sum of consecutive runs of ``values``: run i has ``counts[i]`` elements."""
    cs = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=cs[1:])
    ends = np.cumsum(counts)
    return cs[ends] - cs[ends - counts]


def _to_binary_array(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    n = len(offsets) - 1
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(data)])
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


# ---------------------------------------------------------------------------------------
# Arrow columns -> per-element value runs
# ---------------------------------------------------------------------------------------
def _is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _valid_mask(arr: pa.Array) -> np.ndarray | None:
    """Presence of each slot (None when there is no null)."""
    if arr.null_count == 0:
        return None
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, contiguous data) of a binary/string array without nulls."""
    if not pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.large_binary())
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset: arr.offset + len(arr) + 1]
    if data_buf is None:
        return np.diff(offsets), np.empty(0, dtype=np.uint8)
    return np.diff(offsets), np.frombuffer(data_buf, dtype=np.uint8)[offsets[0]: offsets[-1]]


def _list_parts(arr: pa.Array) -> tuple[np.ndarray | None, np.ndarray, pa.Array]:
    """(presence, items per slot (0 for null slots), the items of non-null slots in order)."""
    present = _valid_mask(arr)
    offsets = arr.offsets.to_numpy().astype(np.int64)
    sizes = np.diff(offsets)
    items = arr.values.slice(offsets[0], offsets[-1] - offsets[0])
    if present is not None:
        items = items.filter(pa.array(np.repeat(present, sizes)))
        sizes = np.where(present, sizes, 0)
    return present, sizes, items


@dataclass
class _Elements:
    """A column seen as *elements* (rows, or the steps of a sequence), each holding
    ``counts`` values taken in order from the flat ``values`` (nulls excluded)."""

    present: np.ndarray | None  # the feature is written for this element (None: for all)
    counts: np.ndarray | int  # values per element (0 where absent); 1 for a scalar feature
    values: pa.Array


def _problems(arr: pa.Array, feature: Feature) -> list[tuple[np.ndarray, str]]:
    """Per-slot rule breaks of one column: (mask over slots, reason) pairs."""
    out = []
    present = _valid_mask(arr)
    if feature.required and present is not None and not present.all():
        out.append((~present, "required, got null"))
    if feature.is_list and _is_list_type(arr.type):
        present, counts, items = _list_parts(arr)
        if items.null_count:
            item_null = ~items.is_valid().to_numpy(zero_copy_only=False)
            out.append((_segment_sums(item_null.astype(np.int64), counts) > 0,
                        "a list holds a null item (lists may be null or empty, their items may not be null)"))
        k = feature.fixed_length
        if k is not None:
            wrong = counts != k if present is None else present & (counts != k)
            if wrong.any():
                out.append((wrong, f"expected {k} values (shape [{k}])"))
    return out


def _elements(arr: pa.Array, feature: Feature, where: str) -> _Elements:
    """Flatten one column (scalar or list) into per-element value runs, checking the schema's rules."""
    if feature.is_list != _is_list_type(arr.type):
        want = f"a list column (shape {list(feature.shape)})" if feature.is_list else "a scalar column"
        raise TypeError(f"{where}: expected {want}, got {arr.type}")
    for mask, reason in _problems(arr, feature):
        i = _first(mask)
        raise ValueError(f"{where}, row {i}: {reason}; got {arr[i].as_py()!r}")
    if feature.is_list:
        present, counts, values = _list_parts(arr)
        return _Elements(present, counts, values)
    present = _valid_mask(arr)
    return _Elements(present, 1, arr.drop_null() if present is not None else arr)


def _cast_values(values: pa.Array, feature: Feature, where: str) -> pa.Array:
    target = {"int64": pa.int64(), "float": pa.float32()}.get(feature.type, pa.large_binary())
    if values.type == target:
        return values
    try:
        return values.cast(target, safe=feature.type != "float")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise TypeError(f"{where}: cannot encode {values.type} values as {feature.type}: {e}") from e


# ---------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------
def _feature_pieces(el: _Elements, feature: Feature, where: str) -> tuple[list, np.ndarray | int]:
    """Pieces of the serialized ``tf.train.Feature`` of each element, and its length per element."""
    values = _cast_values(el.values, feature, where)
    scalar = not feature.is_list
    if feature.type == "float":
        data = np.ascontiguousarray(values.to_numpy(zero_copy_only=False), dtype="<f4").view(np.uint8)
        plen = _where(el.present, el.counts * 4)
        payload = _Padded(data.reshape(-1, 4), 4, el.present) if scalar else _Ragged(plen, data)
        packed = True
    elif feature.type == "int64":
        v = values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False).view(np.uint64)
        sizes = _varint_sizes(v)
        mat = _varint_matrix(v, sizes)
        if scalar:
            payload = _Padded(mat, sizes, el.present)
            plen = payload.lengths
        else:
            plen = _segment_sums(sizes, el.counts)
            payload = _Ragged(plen, mat[np.arange(mat.shape[1]) < sizes[:, None]] if len(v) else
                              np.empty(0, np.uint8))
        packed = True
    else:  # bytes/string: BytesList holds each value as its own tagged field, no packing
        lengths, data = _binary_parts(values)
        off, tagged = _assemble([_Const(_TAG1), _varint_piece(lengths), _Ragged(lengths, data)], len(lengths))
        plen = _expand(el.present, np.diff(off)) if scalar else _segment_sums(np.diff(off), el.counts)
        payload = _Ragged(plen, tagged)
        packed = False
    if packed:  # packed numbers: their own tag and length, written only when there are values
        has_values = el.present if scalar else (el.counts > 0 if el.present is None else el.present & (el.counts > 0))
        list_pieces = [_Const(_TAG1, has_values), _varint_piece(plen, has_values), payload]
    else:
        list_pieces = [payload]
    list_len = _total_length(list_pieces)
    pieces = [_Const(_KIND_TAG[feature.kind], el.present), _varint_piece(list_len, el.present), *list_pieces]
    return pieces, _total_length(pieces)


def _key_part(key: str) -> bytes:
    """A map entry's bytes between its length and its value's: the key field, then the value's tag."""
    k = key.encode("utf-8")
    return _TAG1 + _varint_bytes(len(k)) + k + _TAG2


def _map_entry_pieces(key: str, value_pieces: list, value_len, present: np.ndarray | None) -> list:
    """A ``map<string, V>`` entry (field 1 of Features / FeatureLists) around a value message."""
    key_part = _key_part(key)
    if isinstance(value_len, (int, np.integer)):
        entry_len = len(key_part) + len(_varint_bytes(int(value_len))) + int(value_len)
    else:
        entry_len = len(key_part) + _varint_sizes(value_len) + value_len
    return [_Const(_TAG1, present), _varint_piece(entry_len, present), _Const(key_part, present),
            _varint_piece(value_len, present), *value_pieces]


def _column(batch: pa.RecordBatch, feature: Feature) -> pa.Array:
    idx = batch.schema.get_field_index(feature.name)
    if idx < 0:
        raise ValueError(f"feature {feature.name!r}: no such column in the batch; columns: {batch.schema.names}")
    col = batch.column(idx)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _feature_elements(batch: pa.RecordBatch, features: tuple[Feature, ...], kind: str):
    """(feature, where, elements) of each feature of a ``Features`` message, in the order its map
    entries are written.  Map entries may come in any order.  Fixed-width ones (float scalars) go
    first so their constant parts merge into one block in _assemble; the rest keep schema order."""
    for f in sorted(features, key=lambda f: not (f.type == "float" and not f.is_list)):
        where = f"{kind} feature {f.name!r}"
        yield f, where, _elements(_column(batch, f), f, where)


def _features_pieces(batch: pa.RecordBatch, features: tuple[Feature, ...], kind: str) -> tuple[list, object]:
    """Pieces of a ``Features`` message body (one map entry per present feature) for each row."""
    pieces: list = []
    for f, where, el in _feature_elements(batch, features, kind):
        fp, flen = _feature_pieces(el, f, where)
        pieces += _map_entry_pieces(f.name, fp, flen, el.present)
    return pieces, _total_length(pieces)


def _sequence_pieces(batch: pa.RecordBatch, f: Feature) -> list:
    """The ``feature_list`` map entry of one sequence feature, for each group."""
    where, group_present, steps_per_group, steps = _sequence_steps(batch, f)
    fp, flen = _feature_pieces(steps, f, where)
    # FeatureList: each step is `feature` (field 1): its tag, its length, the Feature message.
    st_off, st_bytes = _assemble([_Const(_TAG1), _varint_piece(flen), *fp], _element_count(steps))
    fl_len = _segment_sums(np.diff(st_off), steps_per_group)
    return _map_entry_pieces(f.name, [_Ragged(fl_len, st_bytes)], fl_len, group_present)


def _element_count(el: _Elements) -> int:
    if el.present is not None:
        return len(el.present)
    return len(el.values) if isinstance(el.counts, int) else len(el.counts)


def _sequence_steps(batch: pa.RecordBatch, f: Feature) -> tuple[str, np.ndarray | None, np.ndarray, _Elements]:
    """(where, group presence, steps per group, the steps as elements) of one sequence feature; a
    null step takes the feature's default (ValueError when it has none)."""
    where = f"sequence feature {f.name!r}"
    col = _column(batch, f)
    if not _is_list_type(col.type):
        raise TypeError(f"{where}: expected a list of steps per group, got {col.type}")
    group_present, steps_per_group, steps = _list_parts(col)
    if steps.null_count:
        if f.default is None:
            raise ValueError(f"{where}, row {_step_row(steps, steps_per_group)}: a step is null and the "
                             f"feature has no default to fill it with")
        fill = list(f.default) if isinstance(f.default, tuple) else f.default
        steps = pc.fill_null(steps, pa.scalar(fill, type=steps.type))
    return where, group_present, steps_per_group, _elements(steps, f, where)


# ---------------------------------------------------------------------------------------
# The compiled core's arguments (tfrecord_io.core._native, native/src/encode.rs)
# ---------------------------------------------------------------------------------------
_NATIVE_KIND = {"bytes_list": 0, "float_list": 1, "int64_list": 2}


def _native_column(el: _Elements, feature: Feature, where: str) -> tuple:
    """One column as ``_native`` takes it: (kind, elements, presence as uint8 or None, values per
    element or None for one per present element, int64 values or the bytes values' offsets,
    float32 bytes or the bytes values' data)."""
    values = _cast_values(el.values, feature, where)
    present = None if el.present is None else el.present.view(np.uint8)
    counts = None if isinstance(el.counts, int) else np.ascontiguousarray(el.counts, dtype=np.int64)
    ints = data = None
    if feature.type == "float":
        data = np.ascontiguousarray(values.to_numpy(zero_copy_only=False), dtype="<f4").view(np.uint8)
    elif feature.type == "int64":
        ints = np.ascontiguousarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)
    else:
        _, off_buf, data_buf = values.buffers()
        ints = np.frombuffer(off_buf, dtype=np.int64)[values.offset: values.offset + len(values) + 1]
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return _NATIVE_KIND[feature.kind], _element_count(el), present, counts, ints, data


def _native_features(batch: pa.RecordBatch, features: tuple[Feature, ...], kind: str) -> list:
    return [(_key_part(f.name), _native_column(el, f, where)) for f, where, el in _feature_elements(batch, features, kind)]


def _native_sequence(batch: pa.RecordBatch, f: Feature) -> tuple:
    where, group_present, steps_per_group, steps = _sequence_steps(batch, f)
    return (_key_part(f.name), None if group_present is None else group_present.view(np.uint8),
            np.ascontiguousarray(steps_per_group, dtype=np.int64), _native_column(steps, f, where))


def _native_records(encoded: tuple[bytes, bytes]) -> pa.Array:
    offsets, data = encoded
    return _to_binary_array(np.frombuffer(offsets, dtype=np.int64), np.frombuffer(data, dtype=np.uint8))


def _step_row(steps: pa.Array, steps_per_group: np.ndarray) -> int:
    first_null = _first(~steps.is_valid().to_numpy(zero_copy_only=False))
    return int(np.searchsorted(np.cumsum(steps_per_group), first_null, side="right"))


# ---------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------
def encode_examples(batch: pa.RecordBatch, schema: Schema) -> pa.Array:
    """Serialize each row of ``batch`` as a ``tf.train.Example`` (an Arrow binary array, one per row).

    Columns are matched to the schema's features by name; extra columns are ignored.
    Raises ``ValueError`` (naming the feature, row and value) for a row that breaks the
    schema — route such rows to rejects first with :func:`row_errors`.
    """
    if schema.record_type != "example":
        raise ValueError("encode_examples needs an example schema; use encode_sequence_examples")
    core = native.active()
    if core is not None:
        return _native_records(core.encode_examples(batch.num_rows, _native_features(batch, schema.features, "example")))
    body, body_len = _features_pieces(batch, schema.features, "example")
    return _to_binary_array(*_assemble([_Const(_TAG1), _varint_piece(body_len), *body], batch.num_rows))


def encode_sequence_examples(batch: pa.RecordBatch, schema: Schema) -> pa.Array:
    """Serialize each row of ``batch`` (one *group*) as a ``tf.train.SequenceExample``.

    Context columns hold one value per group, as for :func:`encode_examples`.  Each
    sequence column holds the group's steps in order: ``list<T>`` for scalar steps,
    ``list<list<T>>`` for list steps.  A null step takes the feature's default when it
    has one; otherwise it is an error.
    """
    if schema.record_type != "sequence_example":
        raise ValueError("encode_sequence_examples needs a sequence_example schema")
    core = native.active()
    if core is not None:
        context = _native_features(batch, schema.context, "context") if schema.context else None
        lists = [_native_sequence(batch, f) for f in schema.sequence]
        return _native_records(core.encode_sequence_examples(batch.num_rows, context, lists))
    pieces = []
    if schema.context:
        ctx, ctx_len = _features_pieces(batch, schema.context, "context")
        pieces += [_Const(_TAG1), _varint_piece(ctx_len), *ctx]
    lists = [p for f in schema.sequence for p in _sequence_pieces(batch, f)]
    pieces += [_Const(_TAG2), _varint_piece(_total_length(lists)), *lists]
    return _to_binary_array(*_assemble(pieces, batch.num_rows))


def encode_framed(batch: pa.RecordBatch, schema: Schema) -> FramedBatch:
    """The rows of ``batch`` as the schema's record type (:func:`encode_examples` /
    :func:`encode_sequence_examples`: the same records and errors), framed as a TFRecord stream:
    what :meth:`tfrecord_io.core.framing.TFRecordWriter.write_batch` writes as it is.  The
    compiled core encodes each record straight into its framed place (one pass, one buffer)."""
    example = schema.record_type == "example"
    core = native.active()
    if core is None:
        return FramedBatch.of(encode_examples(batch, schema) if example else encode_sequence_examples(batch, schema))
    n = batch.num_rows
    if example:
        lengths, data = core.encode_examples(n, _native_features(batch, schema.features, "example"), True)
    else:
        if schema.record_type != "sequence_example":  # as encode_sequence_examples says it
            raise ValueError("encode_sequence_examples needs a sequence_example schema")
        context = _native_features(batch, schema.context, "context") if schema.context else None
        lists = [_native_sequence(batch, f) for f in schema.sequence]
        lengths, data = core.encode_sequence_examples(n, context, lists, True)
    return FramedBatch(n, [(np.frombuffer(lengths, dtype=np.int64), data)] if n else [])


def row_errors(batch: pa.RecordBatch, schema: Schema) -> list[str | None]:
    """Why each row would be rejected (``None`` for a good row), checked vectorized.

    Catches what :func:`encode_examples` / :func:`encode_sequence_examples` would raise
    for: a null in a required feature, a fixed-length list of the wrong length, a null
    list item, and (sequence features) a null step with no default.
    """
    reasons: list[str | None] = [None] * batch.num_rows
    if schema.record_type == "example":
        checks = [(f, _column(batch, f), None) for f in schema.features]
    else:
        checks = [(f, _column(batch, f), None) for f in schema.context]
        for f in schema.sequence:
            _, steps_per_group, steps = _list_parts(_column(batch, f))
            checks.append((f, steps, steps_per_group))
            if steps.null_count and f.default is None:
                null_steps = (~steps.is_valid().to_numpy(zero_copy_only=False)).astype(np.int64)
                _note(reasons, _segment_sums(null_steps, steps_per_group) > 0,
                      f"sequence feature {f.name!r}: a step is null and the feature has no default")
    for f, arr, per_group in checks:
        for mask, reason in _problems(arr, f):
            if per_group is not None:  # step-level problem -> its group
                mask = _segment_sums(mask.astype(np.int64), per_group) > 0
            _note(reasons, mask, f"feature {f.name!r}: {reason}")
    return reasons


def _note(reasons: list, mask: np.ndarray, reason: str) -> None:
    for i in np.flatnonzero(mask):
        if reasons[i] is None:
            reasons[i] = reason


def present_counts(batch: pa.RecordBatch, schema: Schema, mask=None) -> dict[str, int]:
    """How many of the rows (those where ``mask`` is true, default all) have each feature present
    in the record they encode to: a null value (scalar or list) leaves the feature out; an empty
    list is present.  Recorded per feature in ``_manifest.json`` (``present``), so that the loader
    can tell before the first batch that a feature without a default is sometimes missing."""
    import pyarrow.compute as pc

    out = {}
    for f in schema.features:
        valid = batch.column(batch.schema.get_field_index(f.name)).is_valid()
        if mask is not None:
            valid = pc.and_(valid, mask)
        out[f.name] = int(pc.sum(pc.cast(valid, pa.int64())).as_py() or 0)
    return out
