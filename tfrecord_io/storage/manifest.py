"""The names of the output contract (:mod:`tfrecord_io.storage.output`'s module doc) and the reader
of its ``_manifest.json``: what every module that writes, replaces or reads an output agrees on."""

from __future__ import annotations

import json
import re

from tfrecord_io.storage import fs, lease

__all__ = ["MANIFEST", "MANIFEST_VERSION", "MAX_MANIFEST_BYTES", "REJECTS", "SHARD_NAME", "STAGING", "SUCCESS",
           "read_manifest"]

MANIFEST = "_manifest.json"
SUCCESS = "_SUCCESS"
REJECTS = "_rejects"
STAGING = lease.STAGING  # task attempts write here; the lease on the output lives here too
MANIFEST_VERSION = 1
SHARD_NAME = re.compile(r"part-\d{5}-of-\d{5}\.tfrecord(\.gz|\.zlib)?")
MAX_MANIFEST_BYTES = 256 << 20  # ~2 million files; anything bigger is not a manifest


def read_manifest(output: str) -> dict:
    """The ``_manifest.json`` of a committed output (FileNotFoundError naming it when absent;
    ValueError naming it when it is not a manifest), read in bounded time and memory."""
    path = fs.join(output, MANIFEST)
    with fs.open(path, "rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes: not a manifest")
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from e
    except RecursionError as e:
        raise ValueError(f"{path}: nested too deeply to be a manifest") from e
    if not isinstance(manifest, dict) or manifest.get("format_version") != MANIFEST_VERSION:
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        raise ValueError(f"{path}: not a tfrecord-io manifest (format_version {str(version)[:40]}, expected "
                         f"{MANIFEST_VERSION})")
    return manifest
