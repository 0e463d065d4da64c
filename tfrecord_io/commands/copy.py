"""``tfrecord-io copy SRC... DEST``: copy files and directories between local disk and HDFS.

The way to put input into an HDFS (``tfrecord-io hdfs-local`` or a cluster's) and to get a
few shards back, without a Hadoop client installation: ``hdfs dfs -put``/``-get``/``-cp`` in
one command, through the same clients as everything else (hdfs-native, with Kerberos from the
ticket cache or ``--principal``/``--keytab``).

* A SRC is a file, a directory (copied with everything under it) or a glob, local or ``hdfs://``.
* With one SRC and a DEST that is not an existing directory (and does not end in ``/``), DEST
  is the copy's name; otherwise each SRC goes into DEST under its own name (DEST is created).
* An existing destination file stops the copy before anything is written (``--force``
  overwrites).  A copy that fails half-way removes the file it was writing.
* Bytes are streamed in 8 MiB pieces: memory stays flat whatever the size.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from tfrecord_io.commands import exits
from tfrecord_io.storage import fs
from tfrecord_io.storage.inputs import is_glob

__all__ = ["CopyPlan", "configure", "copy", "plan_copy", "run"]

_CHUNK = 8 << 20


@dataclass(frozen=True)
class CopyPlan:
    """The files a copy writes: ``(source file, destination file)`` pairs, and the directories to create."""

    pairs: tuple[tuple[str, str], ...]
    directories: tuple[str, ...]


def _basename(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1]


def _expand(src: str) -> list[str]:
    if not is_glob(src):  # (a path that exists as written is that path, even with *?[ in it)
        if not fs.exists(src):
            raise FileNotFoundError(f"{src}: no such file or directory")
        return [src]
    found = fs.glob(src)
    if not found:
        raise FileNotFoundError(f"{src}: the pattern matches nothing")
    return found


def _walk(src: str, dst: str, pairs: list, directories: list) -> None:
    if not fs.isdir(src):
        pairs.append((src, dst))
        return
    directories.append(dst)
    for child in sorted(fs.ls(src)):
        _walk(child, fs.join(dst, _basename(child)), pairs, directories)


def plan_copy(sources: list[str], dest: str, *, force: bool = False) -> CopyPlan:
    """What ``copy`` would write; FileNotFoundError for a missing source, FileExistsError for a
    destination file that exists (without ``force``)."""
    expanded = [s for src in sources for s in _expand(src)]
    into = len(expanded) > 1 or dest.endswith("/") or (fs.exists(dest) and fs.isdir(dest))
    pairs: list[tuple[str, str]] = []
    directories: list[str] = [dest.rstrip("/") or dest] if into else []
    for src in expanded:
        _walk(src, fs.join(dest, _basename(src)) if into else dest, pairs, directories)
    if not force:
        for src, dst in pairs:
            if fs.exists(dst):
                raise FileExistsError(f"{dst} exists (copying {src}); --force overwrites it")
    return CopyPlan(tuple(pairs), tuple(directories))


def _copy_file(src: str, dst: str) -> int:
    copied = 0
    with fs.open(src, "rb") as reader:
        raw = getattr(reader, "raw", reader)
        writer = fs.open(dst, "wb")
        try:
            with writer:
                while chunk := raw.read(_CHUNK):
                    writer.write(chunk)
                    copied += len(chunk)
        except BaseException:
            try:
                fs.delete(dst)
            except OSError:
                pass
            raise
    return copied


def copy(sources: list[str], dest: str, *, force: bool = False) -> tuple[int, int]:
    """Copy ``sources`` to ``dest`` (module doc); returns ``(files, bytes)`` copied."""
    plan = plan_copy(sources, dest, force=force)
    for directory in plan.directories:
        fs.makedirs(directory, exist_ok=True)
    total = 0
    for src, dst in plan.pairs:
        try:
            total += _copy_file(src, dst)
        except OSError as e:
            what = e.strerror if e.strerror and e.filename in (dst, None) else exits.message_of(e)
            raise type(e)(e.errno, f"copying {src} to {dst}: {what}") from e
    return len(plan.pairs), total


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("examples: tfrecord-io copy data/trips/ hdfs://127.0.0.1:PORT/data/   "
                     "tfrecord-io copy 'hdfs:///tfrecords/trips/part-0000*' shards/")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="SRC... DEST: files, directories or globs, "
                        "local or hdfs:// (quote globs so the shell leaves them)")
    parser.add_argument("--force", action="store_true", help="overwrite destination files that exist")


def run(args: argparse.Namespace) -> int:
    if len(args.paths) < 2:
        return exits.fail("copy", "give at least one SRC and a DEST")
    try:
        files, size = copy(args.paths[:-1], args.paths[-1], force=args.force)
    except (OSError, ValueError) as e:
        return exits.report("copy", e)
    print(f"copied {files} file(s), {size:,} bytes, to {args.paths[-1]}", file=sys.stdout)
    return exits.OK
