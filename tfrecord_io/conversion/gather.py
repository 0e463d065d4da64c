"""A gathered feature's N input columns -> its ``[N]`` lists: the one rule for every engine.

A feature with ``columns:`` in the schema (:attr:`tfrecord_io.core.schema.Feature.columns`)
reads one number from each of N input columns: CSV cells or JSON keys
(:mod:`tfrecord_io.conversion.parsing`, for the Spark job and the Beam pipeline; a JSON line is
decided by :func:`gather_row` when the batch's fast path cannot take it) or a DataFrame's columns
(:mod:`tfrecord_io.engines.spark_columns`, for ``df.write.format("tfrecord")`` and the Spark job's
``--format parquet|orc|table``).  Both convert each column to the feature's type, then call
:func:`gather`, which decides what a null cell means:

* a row whose N cells are all null has a null list: the feature is left out of its record, as
  for any null value (the loader fills the default, or refuses a feature without one);
* otherwise a null cell takes the feature's ``default`` for its place (a ``[N]`` default has a
  value per place; a scalar one is the same in every place);
* and without a default the row is a reject, whose reason names the column:
  ``feature 'pixels': column 'px_5' is null, and the feature has no default``.

On the wire a gathered feature is an ordinary ``[N]`` list: one packed ``float_list`` /
``int64_list`` per record, about the bytes of the raw numbers, read back as one ``[N]`` tensor.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from tfrecord_io.core.schema import Feature

__all__ = ["NullCell", "gather", "gather_row", "null_cell_reasons"]


class NullCell(ValueError):
    """A null cell in a gathered feature without a default: the row is a reject (module doc)."""


def _null_cell(f: Feature, column: str) -> str:
    return f"feature {f.name!r}: column {column!r} is null, and the feature has no default"


def null_cell_reasons(valid: np.ndarray, f: Feature) -> dict[int, str]:
    """Rows (of ``valid``, rows x N: whether each cell has a value) that a null cell rejects: the
    feature has no default, and the row is not all null.  ``{row: reason naming the first such column}``."""
    if f.default is not None or valid.size == 0:
        return {}
    holes = ~valid & valid.any(axis=1)[:, None]
    rows = np.flatnonzero(holes.any(axis=1))
    return {int(i): _null_cell(f, f.columns[int(j)]) for i, j in zip(rows, holes[rows].argmax(axis=1))}


def gather_row(cells: list, f: Feature) -> list | None:
    """One row's N converted cells (None: null) -> its list, as :func:`gather` decides (None: all
    null); :class:`NullCell` naming the column for a null cell the feature has no default for."""
    if all(v is None for v in cells):
        return None
    if f.default is None:
        for column, v in zip(f.columns, cells):
            if v is None:
                raise NullCell(_null_cell(f, column))
        return list(cells)
    return [d if v is None else v for v, d in zip(cells, f.default)]


def gather(columns: Sequence[pa.Array | None], f: Feature, num_rows: int) -> tuple[pa.Array, dict[int, str]]:
    """The feature's ``[N]`` lists from its N columns, already of its scalar type (``int64`` /
    ``float32``; None: a column the input lacks, null in every row), and ``{row: reason}`` for
    the rows a null cell rejects (module doc).  The cells of those rows stay null items in the
    lists, so that :func:`tfrecord_io.core.codec.row_errors` refuses them too."""
    k = len(columns)
    dtype = np.int64 if f.type == "int64" else np.float32
    values = np.zeros((num_rows, k), dtype)
    valid = np.zeros((num_rows, k), dtype=bool)
    for j, col in enumerate(columns):
        if col is None:
            continue
        valid[:, j] = col.is_valid().to_numpy(zero_copy_only=False)
        values[:, j] = col.fill_null(0).to_numpy(zero_copy_only=False)
    present = valid.any(axis=1)
    holes = ~valid & present[:, None]
    reasons = null_cell_reasons(valid, f)
    item_mask = None
    if holes.any():
        if f.default is not None:
            values = np.where(holes, np.asarray(f.default, dtype)[None, :], values)
        else:
            item_mask = holes.reshape(-1)
    flat = pa.array(values.reshape(-1), mask=item_mask)
    mask = pa.array(~present)
    if num_rows * k >= 2**31:
        offsets = pa.array(np.arange(0, (num_rows + 1) * k, k, dtype=np.int64))
        return pa.LargeListArray.from_arrays(offsets, flat, mask=mask).cast(f.arrow_type()), reasons
    offsets = pa.array(np.arange(0, (num_rows + 1) * k, k, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, flat, mask=mask), reasons
