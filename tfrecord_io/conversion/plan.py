"""A conversion decided once, below the engines: :func:`plan_conversion` makes the :class:`Plan`.

Every entry point (``tfrecord-io convert``, ``spark-submit jobs/to_tfrecord.py``, ``python -m
tfrecord_io.beam``) builds the plan *before* an engine starts, so that a misspelled path, a
feature the input lacks or an output that exists fails in a second, with no JVM started; the
engines (:func:`tfrecord_io.engines.spark.run_conversion`, :func:`tfrecord_io.engines.beam.run_conversion`)
take the plan and only run it.  Deciding here, once:

* the schema, loaded and checked against the options (record type, ``group_by``) and the rules
  every engine shares (no feature under the reserved prefix ``__tfio_``; ``--shards input`` and
  the table formats write Examples);
* the splits (``--split``/``--split-by``, checked against the schema);
* the input files, listed and sized once (on HDFS, once per conversion, not per engine step);
* the number of shards (``--num-shards``, else one per ``bytes_per_shard`` of input);
* the input's columns against the schema's features, a ``columns: {pattern: ...}`` matched against
  them first (the plan's schema has the matched names; each CSV file's header is read once, and
  kept in the plan: the Spark job's read tasks need it for the splits that do not start a file);
* the output against the inputs and what it holds (:func:`tfrecord_io.storage.output.check_output`,
  which only looks); :meth:`Plan.prepare_output` clears and creates it when the engine starts.

Spark's own input formats (``--format parquet|orc|table``) are listed and typed by Spark: their
plan has no input files and no shard count, which the Spark job decides once it has read them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Mapping

from tfrecord_io.conversion import columns
from tfrecord_io.conversion.options import TEXT_FORMATS, ConversionOptions, default_num_shards
from tfrecord_io.conversion.splits import Splits
from tfrecord_io.core.schema import Schema, SchemaError
from tfrecord_io.storage import inputs, output, permissions
from tfrecord_io.storage.permissions import Permissions
from tfrecord_io.storage.inputs import InputFile

__all__ = ["RESERVED_PREFIX", "Plan", "plan_conversion"]

#: Feature names may not start with it: engines name their own columns with it.
RESERVED_PREFIX = "__tfio_"


@dataclass(frozen=True)
class Plan:
    """What a conversion will do, decided before an engine starts (module doc).  Picklable.

    options: the conversion's options, as given.
    schema: the loaded, checked schema.
    splits: the ``--split`` assignment, or None.
    inputs: the input files with their sizes, sorted; empty for Spark's own formats.
    num_shards: the number of shards; None where the Spark job decides it (``--shards input``:
        one per read split; Spark's own formats).
    headers: CSV with a header: each input file's column names.
    job_id: names this run's task attempts under ``_temporary/``.
    permissions: the modes of what the conversion writes: ``--umask``, and rejects no more
        readable than the input files (:mod:`tfrecord_io.storage.permissions`).
    """

    options: ConversionOptions
    schema: Schema
    splits: Splits | None
    inputs: tuple[InputFile, ...]
    num_shards: int | None
    headers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    permissions: Permissions = field(default_factory=Permissions)

    @property
    def output(self) -> str:
        return self.options.output

    @property
    def input_bytes(self) -> int:
        return sum(f.size for f in self.inputs)

    @property
    def input_paths(self) -> list[str]:
        return [f.path for f in self.inputs]

    def prepare_output(self, input_paths: list[str] | None = None) -> None:
        """Clear what a previous conversion wrote (``overwrite``) or a failed run left, and create the
        output with its ``_temporary``; ``input_paths`` for Spark's own formats (the files Spark read)."""
        o = self.options
        output.prepare_output(o.output, overwrite=o.overwrite, inputs=self._given_inputs(),
                              input_paths=self.input_paths if input_paths is None else input_paths,
                              permissions=self.permissions)

    def _given_inputs(self) -> tuple[str, ...]:
        return () if self.options.input_format == "table" else self.options.inputs  # a table name is no path


def plan_conversion(options: ConversionOptions) -> Plan:
    """The plan of ``options`` (module doc).  Raises SchemaError (a ValueError) for a schema that does
    not fit the options or the input's columns, FileNotFoundError for an input that matches nothing,
    ValueError for an input that cannot be read, and FileExistsError for an output that may not be
    written."""
    schema = options.load_schema()
    for f in schema.input_features:
        if f.name.startswith(RESERVED_PREFIX):
            raise SchemaError(f"{options.schema_name}: feature name {f.name!r} uses the reserved prefix "
                              f"{RESERVED_PREFIX!r}")
    if schema.record_type != "example":
        if options.shards == "input":
            raise SchemaError(f"--shards input writes example records (a SequenceExample's rows must first be "
                              f"grouped, which takes a shuffle); {options.schema_name} is for {schema.record_type}")
        if options.input_format not in TEXT_FORMATS:
            raise SchemaError(f"--format {options.input_format} writes example records; {options.schema_name} is "
                              f"for {schema.record_type}")
    splits = options.splits(schema)
    options.check_partition_by(schema)
    if options.input_format not in TEXT_FORMATS:  # Spark lists and types them
        output.check_output(options.output, overwrite=options.overwrite,
                            inputs=() if options.input_format == "table" else options.inputs)
        return Plan(options, schema, splits, inputs=(), num_shards=None, permissions=Permissions(options.umask))
    listed = tuple(inputs.list_inputs(options.inputs))
    found = columns.input_columns([f.path for f in listed], schema, options.input_format, options.multiline,
                                  options.max_record_bytes)
    schema = columns.resolve_patterns(schema, found, input_format=options.input_format,
                                      schema_name=options.schema_name)
    columns.check_columns(schema, found, input_format=options.input_format,
                          allow_missing=options.allow_missing_columns, ignore_extra=options.ignore_extra_columns,
                          schema_name=options.schema_name)
    headers = {path: tuple(names) for path, names in found.items() if names is not None} \
        if options.input_format == "csv" else {}
    num_shards = None if options.shards == "input" else (
        options.num_shards or default_num_shards(sum(f.size for f in listed), options.bytes_per_shard))
    output.check_output(options.output, overwrite=options.overwrite, inputs=options.inputs,
                        input_paths=[f.path for f in listed])
    return Plan(options, schema, splits, listed, num_shards, headers,
                permissions=permissions.for_inputs([f.path for f in listed], options.umask))
