"""Reading a schema from where it lives: a local path, ``file://`` or ``hdfs://`` URI.

The schema itself (:mod:`tfrecord_io.core.schema`) is pure: it parses YAML text and knows nothing
of storage.  This module brings the text to it, bounded in size before it is parsed (a schema is a
few KiB; :data:`~tfrecord_io.core.schema.MAX_SCHEMA_BYTES` is the most read).
"""

from __future__ import annotations

import os

from tfrecord_io.core.schema import MAX_SCHEMA_BYTES, Schema, SchemaError
from tfrecord_io.storage import fs

__all__ = ["load_schema"]


def load_schema(path_or_uri: str | os.PathLike) -> Schema:
    """The YAML schema at ``path_or_uri``: SchemaError naming it when it is not one,
    FileNotFoundError when nothing is there."""
    where = os.fspath(path_or_uri)
    with fs.open(where, "rb") as f:
        data = f.read(MAX_SCHEMA_BYTES + 1)
    if len(data) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"{where}: more than {MAX_SCHEMA_BYTES} bytes; a schema is a few KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SchemaError(f"{where}: not UTF-8 text ({e})") from e
    return Schema.from_yaml(text, source=where)
