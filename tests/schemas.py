"""Schemas that several test modules use, each written once, as the YAML a user writes: pass the
text to ``Schema.from_yaml`` for a :class:`~tfrecord_io.core.schema.Schema`, or write it to a file
for ``--schema`` with :func:`write_schema`.  A module's own schema, one that no other module shares,
stays in that module."""

from __future__ import annotations

from pathlib import Path

#: One int64 feature, ``id``: the records of the output-commit tests (overwrite, literal paths).
ID = "features:\n  - {name: id, type: int64}\n"
#: ``id`` and a float ``x``: the CSV ``id,x`` of the command-line tests.
ID_X = "features:\n  - {name: id, type: int64}\n  - {name: x, type: float}\n"
#: ``id`` and a float ``score``: the CSV ``id,score`` of the lease and shard-check tests.
ID_SCORE = "features:\n  - {name: id, type: int64}\n  - {name: score, type: float}\n"


def write_schema(path: Path, text: str) -> Path:
    """``text`` written to ``path`` (a schema file for ``--schema``); returns ``path``."""
    path.write_text(text)
    return path
