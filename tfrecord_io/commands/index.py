"""``tfrecord-io index``: record indexes for TFRecord files that tfrecord-io did not write.

Our converters commit every shard's index in the output's ``_manifest.json`` (see
:mod:`tfrecord_io.storage.index`); files written by TensorFlow, Beam, TFX or spark-tfrecord have
none.  This command writes one per file of a SOURCE (a directory, a glob or a file, local or
``hdfs://``), beside it in ``_index/``, where the loader finds it: ``input_fn`` then gives
each input pipeline its own byte ranges of the files, ``shuffle="global"`` reads records by
offset, and the loader's length check needs no walk of the headers.

Each file is read once, streaming: only record headers are parsed (length CRCs checked), data
is passed over, so memory stays at one read buffer however large the file (DALI's own indexer
reads a whole shard into memory, NVIDIA/DALI#4002).  ``--format dali`` writes DALI's
``tfrecord2idx`` text index instead (``--format both``: both), by default to
``_index/dali/<file name>.idx``, or into ``--output DIR``; DALI reads uncompressed files only.
Indexes are written under a temporary name and renamed into place; an existing one is kept
unless ``--overwrite``.  Exit status: 0 done, 1 a file is damaged (named with its offset), 2 bad
usage or a source that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys

from tfrecord_io.commands import exits
from tfrecord_io.commands.reading import add_source_arguments, map_files, resolve_source
from tfrecord_io.storage.index import Built, build_index
from tfrecord_io.storage.sources import SourceFile

__all__ = ["configure", "index_source", "run"]

_FORMATS = {"tfrecord-io": ("tfrecord-io",), "dali": ("dali",), "both": ("tfrecord-io", "dali")}


def _index_file(file: SourceFile, context: dict, report) -> Built:
    """One file (runs in a worker process: module-level, and ``context`` is a plain dict)."""
    return build_index(file.uri, file.compression, formats=context["formats"], dali_dir=context["output"],
                       overwrite=context["overwrite"])


def index_source(uri: str, *, formats=("tfrecord-io",), output: str | None = None, overwrite: bool = False,
                 compression: str | None = None, workers: int | None = None, progress: bool | None = None) -> list[Built]:
    """Index every record file of ``uri`` (see the module doc); what was written, file by file."""
    source = resolve_source(uri, compression=compression)
    files = [f for f in source.files if f.size is not None]
    if not files:
        raise FileNotFoundError(f"{uri}: no record files to index")
    context = {"formats": tuple(formats), "output": output, "overwrite": overwrite}
    return map_files(_index_file, files, context=context, workers=workers, label="indexing", progress=progress)


def configure(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser)
    parser.add_argument("--format", choices=sorted(_FORMATS), default="tfrecord-io",
                        help="tfrecord-io (default: _index/<file>.idx, what the loader reads), dali "
                             "(DALI's tfrecord2idx text index) or both")
    parser.add_argument("--output", metavar="DIR", default=None,
                        help="where DALI's indexes go (default: _index/dali/ beside each file)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing indexes")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="processes (default: one per file, at most the CPU count; one for sources under 32 MB)")
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args: argparse.Namespace) -> int:
    from tfrecord_io.core.framing import CorruptRecordError

    try:
        built = index_source(args.source, formats=_FORMATS[args.format], output=args.output,
                             overwrite=args.overwrite, compression=args.compression, workers=args.workers)
    except CorruptRecordError as e:
        return exits.fail("index", exits.message_of(e), exits.FAILED)
    except (OSError, ValueError, TypeError) as e:
        return exits.fail("index", exits.message_of(e), exits.USAGE)
    if args.json:
        print(json.dumps([{"file": b.file, "records": b.records, "written": list(b.written)} for b in built], indent=2))
    else:
        for b in built:
            sys.stdout.write(f"{b.file}: {b.records} records -> {', '.join(b.written)}\n")
    return exits.OK
