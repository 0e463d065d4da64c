"""Which record core runs: the compiled one (``tfrecord_io.core._native``, Rust) or numpy's.

The hot loops of the format -- framing a batch of records, the header / CRC walk of the readers,
encoding Arrow batches into Examples and SequenceExamples, the wire scan of the decoder -- have two
implementations: the numpy one in :mod:`tfrecord_io.core.framing`, :mod:`tfrecord_io.core.codec` and
:mod:`tfrecord_io.core.wire_scan` (the reference, and the fallback) and the compiled one built from
``native/``.  They give the same bytes and the same
errors (``tests/test_native_core.py``).  This module chooses once, at import:

* the compiled core when it imports (an install with a Rust toolchain, or a wheel);
* numpy when it does not (no toolchain at install time; a bare ``--py-files`` zip, from which no
  compiled module loads), or when ``TFRECORD_IO_PURE=1`` is set.

The choice is logged once at debug level, and ``tfrecord-io --version`` prints it
(:func:`description`).  The dispatch points call :func:`active` per batch, not per record.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from types import ModuleType

__all__ = ["PURE_ENV", "active", "available", "description", "pure"]

#: Set to 1 (or any value but ``""`` and ``"0"``) to run the numpy core even when the compiled one is built.
PURE_ENV = "TFRECORD_IO_PURE"

_log = logging.getLogger(__name__)


def _load() -> tuple[ModuleType | None, str | None]:
    """The compiled module, or None and why not."""
    try:
        from tfrecord_io.core import _native
    except ImportError as e:
        return None, f"{type(e).__name__}: {e}"
    return _native, None


_COMPILED, _WHY_NOT = _load()
_FORCED_PURE = os.environ.get(PURE_ENV, "").strip() not in ("", "0")
_active = None if _FORCED_PURE else _COMPILED


def description() -> str:
    """One line: which core runs, and why numpy when it is numpy."""
    if _active is not None:
        return "native (Rust)"
    if _FORCED_PURE and _COMPILED is not None:
        return f"numpy (pure; {PURE_ENV}=1)"
    return "numpy (pure; compiled core not built)"


_log.debug("record core: %s%s", description(), f" ({_WHY_NOT})" if _active is None and _WHY_NOT else "")


def active() -> ModuleType | None:
    """The compiled module when it is the one that runs, else None (run the numpy code)."""
    return _active


def available() -> ModuleType | None:
    """The compiled module when it is built and imports, whether or not it runs (for the differential tests)."""
    return _COMPILED


@contextlib.contextmanager
def pure() -> Iterator[None]:
    """Run the numpy core inside the block, in this process (the differential tests' reference)."""
    global _active
    before, _active = _active, None
    try:
        yield
    finally:
        _active = before
