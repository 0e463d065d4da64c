"""tfrecord-io: CSV/JSON on HDFS or local disk to TFRecords, and back into training.

The package is layered by dependency; heavy engines (TensorFlow, Spark, Beam)
are imported only by the modules that need them, so ``import tfrecord_io`` is
cheap.  Public names are loaded lazily on first access.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Schema": "tfrecord_io.core.schema",
    "Feature": "tfrecord_io.core.schema",
    "SchemaError": "tfrecord_io.core.schema",
    "load_schema": "tfrecord_io.storage.schema_io",
    "encode_examples": "tfrecord_io.core.codec",
    "encode_sequence_examples": "tfrecord_io.core.codec",
    "TFRecordWriter": "tfrecord_io.core.framing",
    "read_records": "tfrecord_io.core.framing",
    "CorruptRecordError": "tfrecord_io.core.framing",
    "make_dataset": "tfrecord_io.engines.loader",
    "input_fn": "tfrecord_io.engines.loader",
    "prefetch_to_gpu": "tfrecord_io.engines.loader",
    "steps_per_epoch": "tfrecord_io.engines.loader",
    "BackupAndRestore": "tfrecord_io.engines.resume",
    "LoaderResume": "tfrecord_io.engines.loader",
    "keras_inputs": "tfrecord_io.engines.keras_inputs",
    "read_batches": "tfrecord_io.engines.batches",
    "Ragged": "tfrecord_io.engines.batches",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tfrecord_io' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
