"""Regenerate the TFRecord golden files with real TensorFlow.

Run from the repository root:

    .venv/bin/python tests/golden/make_golden.py

It writes ``records.tfrecord``, ``records.tfrecord.gz`` and
``records.tfrecord.zlib`` next to this script with ``tf.io.TFRecordWriter`` and
``tf.io.TFRecordOptions(compression_type="" / "GZIP" / "ZLIB")``.  The records
are :data:`GOLDEN_RECORDS`, which ``tests/test_framing.py`` imports from here,
so this module must stay importable without TensorFlow (it is imported inside
``main`` only).
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: The records in every golden file, in order.
GOLDEN_RECORDS: list[bytes] = [
    b"",                                          # empty record
    b"\x00",                                      # one byte
    b"hello, tfrecord",                           # plain ASCII
    b"\xff\xfe\x80\x81\xc3\x28\xa0\xa1\xed\xa0\x80\x00",  # not valid UTF-8
    b"\x00" * 12,                                 # looks like an empty header
    b"a" * 255,                                   # length fits one byte ...
    b"b" * 256,                                   # ... and now it needs two
    bytes(range(256)) * 257 + b"end",             # 65,795 bytes: > 64 KiB
    bytes(i * 7 % 251 for i in range(1000)),
]

#: file name -> TFRecordOptions compression_type
GOLDEN_FILES: dict[str, str] = {
    "records.tfrecord": "",
    "records.tfrecord.gz": "GZIP",
    "records.tfrecord.zlib": "ZLIB",
}


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    for name, compression in GOLDEN_FILES.items():
        path = HERE / name
        options = tf.io.TFRecordOptions(compression_type=compression)
        with tf.io.TFRecordWriter(str(path), options) as writer:
            for record in GOLDEN_RECORDS:
                writer.write(record)
        # Sanity check with TensorFlow's own reader.
        read = [r.numpy() for r in tf.data.TFRecordDataset(str(path), compression_type=compression)]
        assert read == GOLDEN_RECORDS, name
        print(f"wrote {path} ({path.stat().st_size} bytes) with TensorFlow {tf.__version__}")


if __name__ == "__main__":
    main()
