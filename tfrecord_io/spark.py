"""Spark, as users reach it: the ``tfrecord`` data source and the job under one short, stable name.

    import tfrecord_io.spark
    tfrecord_io.spark.register(spark)        # df.write / spark.read .format("tfrecord")
    df.write.format("tfrecord").mode("overwrite").save("hdfs://nn/tfrecords/trips")

    tfrecord_io.spark.package_zip("/tmp")    # the package as a zip, for --py-files
    tfrecord_io.spark.run_conversion(spark, tfrecord_io.spark.ConversionOptions(...))   # the job

These names stay where they are when the package's inside moves: they forward to
:mod:`tfrecord_io.engines.spark_datasource` (the data source) and :mod:`tfrecord_io.engines.spark`
(the job), which are imported when first used.
"""

from __future__ import annotations

__all__ = ["ConversionOptions", "package_zip", "register", "run_conversion"]


def register(spark) -> None:
    """Register the ``tfrecord`` format with ``spark`` (once per session)."""
    from tfrecord_io.engines.spark_datasource import register as register_source

    register_source(spark)


def package_zip(directory: str) -> str:
    """Zip the ``tfrecord_io`` package into ``directory`` (for ``--py-files`` or
    ``SparkContext.addPyFile``); return the zip's path."""
    from tfrecord_io.engines.spark import package_zip as zip_package

    return zip_package(directory)


def run_conversion(spark, plan) -> dict:
    """The Spark job: convert ``plan`` (a Plan, or ConversionOptions) on ``spark``; the committed manifest.

    (The tests' fault injection goes through :func:`tfrecord_io.engines.spark.run_conversion`, not
    through this stable name.)"""
    from tfrecord_io.engines.spark import run_conversion as run

    return run(spark, plan)


def __getattr__(name: str):
    if name == "ConversionOptions":
        from tfrecord_io.conversion.options import ConversionOptions

        return ConversionOptions
    raise AttributeError(f"module 'tfrecord_io.spark' has no attribute {name!r}")
