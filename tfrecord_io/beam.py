"""The Beam pipeline, as users reach it: ``python -m tfrecord_io.beam`` and ``tfrecord_io.beam.*``.

    python -m tfrecord_io.beam --input 'hdfs://nn:8020/data/trips/*.csv' --format csv \\
        --schema conf/taxi.yaml --output hdfs://nn:8020/tfrecords/trips [Beam's options: --runner=...]

    from tfrecord_io import beam
    result = beam.run_conversion(beam.ConversionOptions(...), beam.pipeline_options(["--runner=FlinkRunner"]))

A stable name over :mod:`tfrecord_io.engines.beam` (the pipeline) and
:func:`tfrecord_io.commands.convert.beam_main` (its command line; exit status as there).  Any
argument that is neither a conversion option nor a Beam pipeline option stops the run.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["ConversionOptions", "ConversionResult", "main", "pipeline_options", "run_conversion"]


def main(argv: list[str] | None = None) -> int:
    """The command line (``python -m tfrecord_io.beam``); returns the exit status."""
    from tfrecord_io.commands.convert import beam_main

    return beam_main(argv)


def run_conversion(plan, options=None):
    """Run ``plan`` (a Plan, or ConversionOptions) on the runner in the pipeline ``options`` and commit
    its output; a ``ConversionResult``.  See :func:`tfrecord_io.engines.beam.run_conversion` (which
    also takes the tests' fault injection; this stable name does not)."""
    from tfrecord_io.engines.beam import run_conversion as run

    return run(plan, options)


def __getattr__(name: str):
    if name in ("ConversionOptions", "ConversionResult", "pipeline_options"):
        return getattr(importlib.import_module("tfrecord_io.engines.beam"), name)
    raise AttributeError(f"module 'tfrecord_io.beam' has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
