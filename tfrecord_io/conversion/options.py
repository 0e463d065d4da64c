"""The options of one conversion, once, for every engine and entry point.

:class:`ConversionOptions` is what ``spark-submit jobs/to_tfrecord.py``, ``python -m
tfrecord_io.engines.beam`` (and ``pipelines/to_tfrecord.py``), ``tfrecord-io convert`` and the library
calls (:func:`tfrecord_io.engines.spark.run_conversion`, :func:`tfrecord_io.engines.beam.run_conversion`) all
take; :func:`add_arguments` defines its command-line flags and :func:`from_args` reads them
back.  Validation happens once, in the dataclass, before any engine starts.

This module imports no engine and no TensorFlow.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import dataclass

from tfrecord_io.storage.permissions import parse_umask
from tfrecord_io.storage.output import DEFAULT_MAX_REJECT_FRACTION
from tfrecord_io.core.schema import Schema, SchemaError
from tfrecord_io.storage.schema_io import load_schema

__all__ = ["ConversionOptions", "DEFAULT_BLOCK_SIZE", "DEFAULT_BYTES_PER_SHARD",
           "DEFAULT_MAX_RECORD_BYTES", "DEFAULT_MAX_REJECT_FRACTION", "DEFAULT_MAX_STEPS", "FORMATS",
           "MAX_AUTO_SHARDS", "add_arguments", "byte_size", "check_fraction", "default_num_shards", "from_args"]

FORMATS = ("csv", "json", "parquet", "orc", "table")
TEXT_FORMATS = ("csv", "json")  # what every engine parses; the others are read by Spark (the job only)
COMPRESSIONS = ("none", "gzip", "zlib")
DEFAULT_MAX_STEPS = 10_000
DEFAULT_BYTES_PER_SHARD = 128 * 1024 * 1024
DEFAULT_BLOCK_SIZE = 4 * 1024 * 1024
#: The longest input record (a line, a CSV record, a whole-file JSON document) a conversion reads:
#: 16 times the parse block, above any row real data has (a 20 MB JSON string is a valid row), and
#: still a bounded cost per reading task (the limit + one read, in memory).  See ``max_record_bytes``.
DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024
MAX_AUTO_SHARDS = 1000


def default_num_shards(input_bytes: int, bytes_per_shard: int = DEFAULT_BYTES_PER_SHARD) -> int:
    """Shards when ``num_shards`` is not given: one per ``bytes_per_shard`` of input, from 1 to
    :data:`MAX_AUTO_SHARDS`."""
    return max(1, min(MAX_AUTO_SHARDS, math.ceil(input_bytes / bytes_per_shard)))


def _absolute(uri: str) -> str:
    """Local paths made absolute (executors and workers do not share the driver's directory)."""
    if "://" in uri or uri.startswith("file:"):
        return uri
    return os.path.abspath(uri)


def check_fraction(value, flag: str) -> float:
    """``value`` as a fraction from 0 to 1; ValueError naming ``flag`` otherwise (strings are parsed:
    Spark's options are strings)."""
    f = value
    if isinstance(f, str):
        try:
            f = float(f)
        except ValueError:
            raise ValueError(f"{flag} must be a number from 0 to 1, got {value!r}") from None
    if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0.0 <= f <= 1.0:
        raise ValueError(f"{flag} must be a number from 0 to 1, got {value!r}")
    return float(f)


def byte_size(text: str) -> int:
    """A number of bytes from the command line: ``67108864``, or with a binary suffix ``64m``,
    ``64MiB``, ``512k``, ``1g`` (argparse turns the ValueError into a usage error)."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:([kmgt])(?:i?b)?|b)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"not a number of bytes: {text!r} (e.g. 67108864 or 64m)")
    return int(m.group(1)) << (10 * " kmgt".index(m.group(2).lower()) if m.group(2) else 0)


def _positive_int(value, flag: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{flag} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ConversionOptions:
    """What to convert and how.  Defaults are the documented defaults of every entry point.

    inputs: input URIs (local paths, ``file://``, ``hdfs://``; files, directories or globs); a
        string may hold several separated by commas.
    input_format: ``"csv"`` or ``"json"`` (JSON Lines; whole-file JSON with ``multiline``); for the
        Spark job also ``"parquet"``, ``"orc"`` (files) and ``"table"`` (``inputs`` names a table
        or view of Spark's catalog), read by Spark and checked against the schema by column.
    schema: path or URI of the YAML schema, or a :class:`~tfrecord_io.core.schema.Schema`.
    output: output directory URI.
    record_type: ``"example"`` / ``"sequence_example"``; None (default) takes the schema's.
        When given it must match the schema's ``record_type``.
    compression: ``"none"`` (default), ``"gzip"`` or ``"zlib"``.
    compression_level: zlib's level for gzip / zlib, 1 (fastest) to 9 (smallest); None
        (default): 6, as TensorFlow's writer.  An error without a compression.
    num_shards: number of TFRecord files; None (default): :func:`default_num_shards` of the
        input size (one per ``bytes_per_shard``, at most 1000).  0 is an error.
    overwrite: replace an existing output that a conversion wrote (default False: refuse).
    max_reject_fraction: most rejected/input rows tolerated (default 0.01 = 1%).
    multiline: records may span lines: multi-line JSON documents, or CSV with line breaks in
        quoted fields (default False; each file is then read by one task).
    max_steps: longest SequenceExample; longer groups are split (default 10,000).
    allow_missing_columns: a feature may be absent from an input (null there) -- for every
        feature, as ``allow_missing: true`` does for one (default False: an error).
    ignore_extra_columns: input columns that no feature reads are dropped (default False: an
        error naming them; ``ignore_columns:`` in the schema names some).
    record_order: ``"shuffled"`` (default): records are written to each shard in a random (but
        deterministic) order, so that a loader shuffling within a window still mixes date-sorted
        input; ``"input"``: in input order (a little faster; sorted input gives sorted batches).
    shards: ``"even"`` (default): ``num_shards`` files of (nearly) the same number of records,
        dealt to them by the read tasks (:mod:`tfrecord_io.conversion.dealing`), which costs a shuffle; ``"input"`` (the Spark job, Example
        records): one file per input split, written by the task that read it -- no shuffle, the
        fastest path, and spark-tfrecord's layout: files as uneven as the splits, records in input
        order (``record_order`` does not apply).
    split: ``"train=8,eval=1,test=1"``: write each split to ``<output>/<name>/`` by TFX's hash
        buckets (:mod:`tfrecord_io.conversion.splits`); None (default): one output.
    split_by: with ``split``, the feature whose value decides the split (TFX's
        ``partition_feature_name``); None (default): the whole record.
    bytes_per_shard: input bytes per shard when ``num_shards`` is None (default 128 MiB).
    block_size: bytes parsed at a time per file (default 4 MiB; a CSV record must fit in one).
    max_record_bytes: the longest input record read (default 64 MiB): a JSON line, a CSV line (a
        whole record with ``multiline``: its quoted line breaks included; CSV records must also
        fit in ``block_size``), or with ``multiline`` a whole-file JSON document.  Checked as the
        input is read and decompressed, so a reading task never holds more than the limit plus
        one read; a longer record fails the conversion, naming the file, the line and the byte
        where it starts (``docs/wire-contract.md``, "Input files and rejects").
    umask: what the output's files and directories may be read by, as Hadoop's
        ``fs.permissions.umask-mode``: ``"027"`` (or ``0o027``) gives files ``rw-r-----`` and
        directories ``rwxr-x---``; None (default): the process's umask for local outputs, Hadoop's
        ``022`` for HDFS.  The rejects are never more readable than the input they quote
        (:mod:`tfrecord_io.storage.permissions`).
    """

    inputs: tuple[str, ...]
    input_format: str
    schema: str | Schema
    output: str
    record_type: str | None = None
    compression: str = "none"
    compression_level: int | None = None
    num_shards: int | None = None
    overwrite: bool = False
    max_reject_fraction: float = DEFAULT_MAX_REJECT_FRACTION
    multiline: bool = False
    max_steps: int = DEFAULT_MAX_STEPS
    allow_missing_columns: bool = False
    ignore_extra_columns: bool = False
    record_order: str = "shuffled"
    shards: str = "even"
    split: str | None = None
    split_by: str | None = None
    partition_by: tuple[str, ...] = ()
    bytes_per_shard: int = DEFAULT_BYTES_PER_SHARD
    block_size: int = DEFAULT_BLOCK_SIZE
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    umask: int | str | None = None

    def __post_init__(self) -> None:
        from tfrecord_io.core.framing import check_compression_level, normalize_compression

        raw = (self.inputs,) if isinstance(self.inputs, str) else tuple(self.inputs)
        where = (lambda p: p) if self.input_format == "table" else _absolute  # a table name is no path
        inputs = tuple(where(p.strip()) for item in raw for p in str(item).split(",") if p.strip())
        if not inputs:
            raise ValueError("no input given (--input URI[,URI...])")
        object.__setattr__(self, "inputs", inputs)
        if self.input_format not in FORMATS:
            raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {self.input_format!r}")
        if not isinstance(self.schema, Schema) and not str(self.schema or "").strip():
            raise ValueError("no schema given (--schema PATH_OR_URI)")
        if not self.output or not str(self.output).strip():
            raise ValueError("no output given (--output URI)")
        if isinstance(self.umask, str):
            object.__setattr__(self, "umask", parse_umask(self.umask))
        elif self.umask is not None and not (isinstance(self.umask, int) and 0 <= self.umask <= 0o777):
            raise ValueError(f"--umask must be an octal umask such as 0o022, got {self.umask!r}")
        object.__setattr__(self, "output", _absolute(str(self.output).strip().rstrip("/") or "/"))
        if self.record_type is not None and self.record_type not in ("example", "sequence_example"):
            raise ValueError(f"--record-type must be example or sequence_example, got {self.record_type!r}")
        object.__setattr__(self, "compression", normalize_compression(self.compression))
        if self.compression_level is not None:
            if self.compression == "none":
                raise ValueError("--compression-level needs --compression gzip or zlib")
            object.__setattr__(self, "compression_level",
                               check_compression_level(self.compression_level, "--compression-level"))
        if self.num_shards is not None:
            _positive_int(self.num_shards, "--num-shards")
        if isinstance(self.max_reject_fraction, str):
            raise ValueError(f"--max-reject-fraction must be a number from 0 to 1, got {self.max_reject_fraction!r}")
        check_fraction(self.max_reject_fraction, "--max-reject-fraction")
        _positive_int(self.max_steps, "--max-steps")
        _positive_int(self.bytes_per_shard, "bytes_per_shard")
        if not isinstance(self.block_size, int) or self.block_size < 1024:
            raise ValueError(f"--block-size must be at least 1024 bytes, got {self.block_size!r}")
        if (not isinstance(self.max_record_bytes, int) or isinstance(self.max_record_bytes, bool)
                or self.max_record_bytes < 1024):
            raise ValueError(f"--max-record-bytes must be at least 1024 bytes, got {self.max_record_bytes!r}")
        if self.record_order not in ("shuffled", "input"):
            raise ValueError(f"--record-order must be shuffled or input, got {self.record_order!r}")
        if self.shards not in ("even", "input"):
            raise ValueError(f"--shards must be even or input, got {self.shards!r}")
        if self.shards == "input" and self.num_shards is not None:
            raise ValueError("--num-shards and --shards input exclude each other: with --shards input there is one "
                             "shard per input split")
        if self.split is not None:
            from tfrecord_io.conversion.splits import Splits

            Splits.parse(self.split)  # the syntax now; the feature against the schema in splits()
        elif self.split_by is not None:
            raise ValueError("--split-by needs --split NAME=BUCKETS,...")
        raw_partitions = (self.partition_by,) if isinstance(self.partition_by, str) else tuple(self.partition_by or ())
        object.__setattr__(self, "partition_by",
                           tuple(c.strip() for item in raw_partitions for c in str(item).split(",") if c.strip()))
        if self.partition_by and self.split is not None:
            raise ValueError("--partition-by and --split exclude each other (partition first, then split each "
                             "partition's output, or split by a feature)")

    def needs_spark(self) -> str | None:
        """Why these options need the Spark job (an input format or a layout only it has), or None."""
        if self.input_format not in TEXT_FORMATS:
            return f"--format {self.input_format} is read by Spark"
        if self.shards == "input":
            return "--shards input (one shard per input split) is the Spark job's"
        if self.partition_by:
            return "--partition-by (Hive-style partition directories) is the Spark job's"
        return None

    def check_partition_by(self, schema: Schema) -> None:
        """ValueError unless each ``--partition-by`` column is a scalar string / int64 feature of
        ``schema`` (an Example schema): the partition directories name its values."""
        if not self.partition_by:
            return
        if schema.record_type != "example":
            raise ValueError("--partition-by writes Example records; partition SequenceExample input into one "
                             "conversion per partition")
        by_name = {f.name: f for f in schema.features}
        for c in self.partition_by:
            f = by_name.get(c)
            if f is None:
                raise ValueError(f"--partition-by {c}: not a feature of {self.schema_name} "
                                 f"({', '.join(sorted(by_name))})")
            if f.type not in ("string", "int64") or f.shape is not None:
                raise ValueError(f"--partition-by {c}: a {f.type} feature of shape {f.shape}; partition by a "
                                 f"scalar string or int64 feature")

    def splits(self, schema: Schema):
        """The :class:`~tfrecord_io.conversion.splits.Splits` of ``split``/``split_by`` (None without them)."""
        if self.split is None:
            return None
        from tfrecord_io.conversion.splits import Splits

        return Splits.parse(self.split, self.split_by, schema)

    @property
    def level(self) -> int:
        """The zlib level the shards are compressed with (``compression_level``, else 6)."""
        from tfrecord_io.core.framing import DEFAULT_COMPRESSION_LEVEL

        return self.compression_level or DEFAULT_COMPRESSION_LEVEL

    @property
    def schema_name(self) -> str:
        return "the schema" if isinstance(self.schema, Schema) else f"the schema {self.schema}"

    def load_schema(self) -> Schema:
        """The schema (loaded if a path), checked against ``record_type``: SchemaError if not."""
        if isinstance(self.schema, Schema):
            schema = self.schema
        else:
            try:
                schema = load_schema(self.schema)
            except FileNotFoundError as e:
                raise SchemaError(f"schema file {self.schema} does not exist") from e
        if schema.record_type == "sequence_example" and not schema.group_by and self.input_format in TEXT_FORMATS:
            raise SchemaError(f"{self.schema_name} needs 'group_by' to convert {self.input_format} rows to "
                              f"sequence_example records: the rows sharing a group_by value become one record")
        if self.record_type is not None and self.record_type != schema.record_type:
            raise SchemaError(f"--record-type {self.record_type} does not match {self.schema_name}, whose "
                              f"record_type is {schema.record_type}")
        return schema


def _umask_arg(text: str) -> int:
    try:
        return parse_umask(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an octal umask such as 022 or 077 (as Hadoop's "
                                         f"fs.permissions.umask-mode), got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The conversion's flags, for every command line that runs one."""
    parser.add_argument("--input", required=True, metavar="URI[,URI...]",
                        help="input files, directories or globs: local paths, file:// or hdfs://")
    parser.add_argument("--format", required=True, choices=FORMATS, dest="input_format",
                        help="csv, or json (JSON Lines; whole-file JSON with --multiline); Spark only: parquet, "
                             "orc, or table (--input names a table or view of Spark's catalog)")
    parser.add_argument("--schema", required=True, metavar="PATH_OR_URI", help="the YAML schema")
    parser.add_argument("--output", required=True, metavar="URI", help="output directory")
    parser.add_argument("--record-type", choices=("example", "sequence_example"), default=None,
                        help="must match the schema's record_type (default: the schema's)")
    parser.add_argument("--compression", choices=COMPRESSIONS, default="none",
                        help="TFRecord compression (default: none)")
    parser.add_argument("--compression-level", type=int, default=None, metavar="1-9",
                        help="zlib level for gzip / zlib: 1 fastest, 9 smallest (default: 6, as TensorFlow)")
    parser.add_argument("--num-shards", type=int, default=None, metavar="N",
                        help="number of output files (default: one per 128 MiB of input, 1 to 1000)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output that a previous conversion wrote")
    parser.add_argument("--max-reject-fraction", type=float, default=DEFAULT_MAX_REJECT_FRACTION, metavar="F",
                        help=f"fail (nothing committed) when rejected/input rows exceeds F "
                             f"(default: {DEFAULT_MAX_REJECT_FRACTION}, i.e. 1%%)")
    parser.add_argument("--multiline", action="store_true",
                        help="records may span lines: whole-file JSON documents, or CSV with line breaks "
                             "inside quoted fields (each file is then read by one task)")
    parser.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS, metavar="N",
                        help=f"sequence_example: split groups longer than N rows into consecutive records "
                             f"(default: {DEFAULT_MAX_STEPS})")
    parser.add_argument("--allow-missing-columns", action="store_true",
                        help="features that an input lacks are null there (default: an error naming them)")
    parser.add_argument("--ignore-extra-columns", action="store_true",
                        help="drop input columns that no feature reads (default: an error naming them)")
    parser.add_argument("--record-order", choices=("shuffled", "input"), default="shuffled",
                        help="order of records within a shard: shuffled (default: sorted input still trains "
                             "on mixed batches) or input (a little faster)")
    parser.add_argument("--shards", choices=("even", "input"), default="even",
                        help="even (default): --num-shards files of equal size, rows spread by a shuffle; input "
                             "(Spark job): one file per input split, no shuffle -- fastest, records in input order")
    parser.add_argument("--split", default=None, metavar="NAME=BUCKETS,...",
                        help="write splits the TFX way, e.g. train=8,eval=1,test=1: <output>/train/, ... "
                             "(by the record's hash, or --split-by's feature)")
    parser.add_argument("--split-by", default=None, metavar="FEATURE",
                        help="with --split: the int64/string/bytes feature that decides the split "
                             "(TFX's partition_feature_name)")
    parser.add_argument("--partition-by", default=None, metavar="FEATURE[,FEATURE]",
                        help="Spark job: Hive-style directories per value (<output>/cut=Ideal/), each a complete "
                             "output; the feature stays in the records (make_dataset(..., partitions=) selects)")
    parser.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE, metavar="BYTES",
                        help="bytes parsed at a time per file (a CSV record must fit in one block)")
    parser.add_argument("--umask", type=_umask_arg, default=None, metavar="OCTAL",
                        help="what the output may be read by, as Hadoop's fs.permissions.umask-mode: 027 gives "
                             "files rw-r----- and directories rwxr-x--- (default: the process umask; 022 on "
                             "HDFS). The rejects are never more readable than the input they quote")
    parser.add_argument("--max-record-bytes", type=byte_size, default=DEFAULT_MAX_RECORD_BYTES, metavar="BYTES",
                        help=f"the longest input record (a line; a CSV record; with --multiline a whole JSON "
                             f"file) read, checked while reading and decompressing: a longer one fails the "
                             f"conversion naming the file and line (default: {DEFAULT_MAX_RECORD_BYTES >> 20}m; "
                             f"k, m, g suffixes)")


def from_args(args: argparse.Namespace) -> ConversionOptions:
    """The options parsed by :func:`add_arguments` (ValueError for a bad value)."""
    return ConversionOptions(
        inputs=args.input, input_format=args.input_format, schema=args.schema, output=args.output,
        record_type=args.record_type, compression=args.compression,
        compression_level=args.compression_level, num_shards=args.num_shards,
        overwrite=args.overwrite, max_reject_fraction=args.max_reject_fraction, multiline=args.multiline,
        max_steps=args.max_steps, allow_missing_columns=args.allow_missing_columns,
        ignore_extra_columns=args.ignore_extra_columns, record_order=args.record_order, shards=args.shards,
        split=args.split, partition_by=args.partition_by or (),
        split_by=args.split_by,
        block_size=args.block_size, max_record_bytes=args.max_record_bytes, umask=args.umask)
