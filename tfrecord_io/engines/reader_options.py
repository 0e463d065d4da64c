"""The options both readers share (the tf.data loader's ``LoaderOptions`` and ``read_batches``'
``BatchOptions``), checked one way: ``seed``, ``on_corrupt`` and ``compression``."""

from __future__ import annotations

import numpy as np

__all__ = ["ON_CORRUPT", "check_common", "check_feature_names"]

#: What a reader does at a corrupt record: fail naming the file and offset, or keep the file's
#: intact records before it and go on.
ON_CORRUPT = ("error", "skip")


def check_common(options) -> None:
    """Check ``options.seed`` / ``.on_corrupt`` and normalize ``.compression`` (``"auto"`` or a
    compression name) of a frozen dataclass; TypeError / ValueError naming the option."""
    from tfrecord_io.core.framing import normalize_compression

    seed = options.seed
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)):
        raise TypeError(f"seed must be an integer or None, got {seed!r}")
    if options.on_corrupt not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be 'error' or 'skip', got {options.on_corrupt!r}")
    if options.compression != "auto":
        try:
            object.__setattr__(options, "compression", normalize_compression(options.compression))
        except ValueError as e:
            raise ValueError(f"compression: {e}; or 'auto'") from e


def check_feature_names(schema, names) -> None:
    """ValueError naming the first of ``names`` (``features=``) that is no input feature of
    ``schema``, and the closest one there is."""
    known = {f.name for f in schema.input_features}
    for name in names:
        if name not in known:
            import difflib

            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; features: {sorted(known)}"
            raise ValueError(f"features=: no feature named {name!r} in the schema{hint}")
