"""The output contract shared by every converter (Spark job, Beam pipeline), and its commit protocol.

A finished output directory holds::

    part-00000-of-00004.tfrecord[.gz|.zlib]   the records, one file per shard
    _rejects/part-00000.jsonl                  rows that did not convert, one JSON object each:
                                               {"source", "line", "raw", "reason"}
    _manifest.json                             files with record counts and sizes, each shard's record
                                               index (tfrecord_io.storage.index), totals, schema
    _SUCCESS                                   written last: the output is complete

Exactly-once: a task attempt writes only under ``_temporary/<attempt>/`` and reports what
it wrote; each shard's record index is written beside it there (``<attempt>/_index/<name>.idx``),
by the same framing pass, and found from the shard's temporary path -- or, from a writer that
asks for it (``write_shard(..., inline_index=True)``: Beam's, which writes thousands of small
shards), carried in its report (:attr:`WrittenFile.index`), one file fewer per shard.  The driver, once the
whole job has succeeded, moves exactly one reported attempt per shard into place and takes its
index into the manifest (Spark and Beam report only the winning attempt of a task),
deletes ``_temporary`` with whatever failed or losing attempts left there, and writes
``_manifest.json`` and then ``_SUCCESS``.  Readers that wait for ``_SUCCESS`` never see a
partial output.

``--overwrite`` never destroys first (:mod:`tfrecord_io.storage.replace`): the previous output is
confirmed against its manifests at the start and stays readable while the job runs; the commit
sets it aside, moves the new output in, and deletes the previous one only once the new one's
``_SUCCESS`` is written.  A commit that fails at any step is taken back.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import time
from dataclasses import dataclass, field, replace
from typing import Iterable

from tfrecord_io.core.checksum import format_crc
from tfrecord_io.storage import fs, lease
from tfrecord_io.storage.inputs import is_glob
from tfrecord_io.storage.manifest import (MANIFEST, MANIFEST_VERSION, MAX_MANIFEST_BYTES, REJECTS, SUCCESS,  # (re-exported)
                                          read_manifest)
from tfrecord_io.storage.permissions import Permissions
from tfrecord_io.storage.replace import PREVIOUS, Commit, check_removable, previous_entries
from tfrecord_io.core.framing import DEFAULT_COMPRESSION_LEVEL, TFRecordWriter, extension_for, normalize_compression
from tfrecord_io.storage.index import (MANIFEST_INDEX_VERSION, IndexWriter, encode_lengths, index_uri,
                                       parse_index, read_index)

TEMPORARY = lease.STAGING  # task attempts write here; the lease on the output lives here too
DEFAULT_MAX_REJECT_FRACTION = 0.01


def shard_name(index: int, num_shards: int, compression: str = "none") -> str:
    """``part-00003-of-00008.tfrecord`` (+ ``.gz`` / ``.zlib`` when compressed)."""
    return f"part-{index:05d}-of-{num_shards:05d}.tfrecord{extension_for(compression)}"


@dataclass(frozen=True)
class WrittenFile:
    """What one task attempt wrote: ``temp_path`` (absolute URI) and where it goes when committed."""

    temp_path: str
    final_name: str  # relative to the output directory
    records: int
    bytes: int
    crc32c: int | None = None  # of the file's bytes as written (record files; None for rejects)
    index: str | None = None  # its record index (index.encode_lengths) when reported inline, not in _index/


_WRITTEN_FIELDS = tuple(WrittenFile.__dataclass_fields__)


@dataclass
class ConversionTotals:
    """Counts that must reconcile: ``input_rows == converted_rows + rejected``.

    For Examples each converted row is one record.  For SequenceExamples a record holds a
    group of rows, so ``rows_in_records`` counts the rows that went into records.
    """

    input_rows: int = 0
    records: int = 0
    rejected: int = 0
    rows_in_records: int | None = None
    present: dict | None = field(default=None, compare=False)  # records holding each feature (Examples)

    @property
    def converted_rows(self) -> int:
        return self.records if self.rows_in_records is None else self.rows_in_records

    def as_dict(self) -> dict:
        out = {"input_rows": self.input_rows, "records": self.records, "rejected": self.rejected}
        if self.rows_in_records is not None:
            out["rows_in_records"] = self.rows_in_records
        return out


class RejectLimitExceeded(RuntimeError):
    """More of the input was rejected than ``--max-reject-fraction`` allows."""


def _canonical(uri: str) -> tuple[str, str]:
    """(filesystem, absolute normalized path) for comparing locations.

    Local paths and ``file://`` URIs resolve symlinks; ``hdfs://`` URIs compare by path alone
    (``hdfs://nn:8020/a`` and ``hdfs://127.0.0.1:8020/a`` may be the same NameNode).
    """
    if fs.is_hdfs(uri):
        path = "/" + uri.split("://", 1)[1].partition("/")[2]
        return "hdfs", posixpath.normpath(path)
    path = fs.local_path(uri)
    return "local", os.path.realpath(path)


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


class OutputOverlapsInput(FileExistsError):
    """The output directory is an input, contains one, or lies inside one."""


def check_output_apart(output: str, input_uris: Iterable[str], input_paths: Iterable[str] = ()) -> None:
    """Refuse an output that is an input, contains one, or lies inside one (:class:`OutputOverlapsInput`
    naming both).

    ``input_uris`` are the URIs as given (files, directories, globs); ``input_paths`` the files
    they list.  Checked before anything is created or deleted, so that ``--overwrite`` can never
    remove input.
    """
    out_fs, out = _canonical(output)
    for given in (*input_uris, *input_paths):
        if is_glob(given):  # the files it matched are among input_paths
            continue
        in_fs, path = _canonical(given)
        if in_fs != out_fs:
            continue
        if _inside(path, out):
            raise OutputOverlapsInput(f"output {output} {'is' if path == out else 'contains'} the input {given}: "
                                      f"choose an output directory apart from the input (--overwrite would "
                                      f"delete it)")
        if _inside(out, path) and fs.isdir(given):
            raise OutputOverlapsInput(f"output {output} lies inside the input directory {given}: choose an "
                                      f"output directory outside the input")


def check_output(output: str, *, overwrite: bool, inputs: Iterable[str] = (),
                 input_paths: Iterable[str] = ()) -> list[str]:
    """What :func:`prepare_output` would do, without doing it: raise what it would raise; return the
    entries of the previous output that the commit will replace (nothing is deleted before it).

    Raises :class:`OutputOverlapsInput` for an output that overlaps an input and
    FileExistsError for an existing output that may not be replaced: without ``overwrite``,
    or (even with it) when the directory holds anything that a conversion did not write there and
    its manifests do not confirm (:func:`tfrecord_io.storage.replace.previous_entries`: a file of
    someone else's, a manifest that claims what its files do not), and PermissionError for a
    previous output this user may remove only in part (local disk).  A ``_temporary`` is checked
    against its lease (:func:`_check_staging`): a live run's refuses even ``overwrite``; one a
    failed run ended is cleared without ``overwrite`` (a run that fails never blocks the next); a
    killed run's, or one without our lease, needs ``overwrite``.
    """
    return _inspect(output, overwrite, inputs, input_paths)[0]


def _inspect(output: str, overwrite: bool, inputs: Iterable[str], input_paths: Iterable[str]) -> tuple[list[str], bool]:
    """:func:`check_output`'s entries, and whether a killed commit left the output half replaced."""
    check_output_apart(output, inputs, input_paths)
    if not fs.exists(output):
        return [], False
    if not fs.isdir(output):
        raise FileExistsError(f"output {output} exists and is a file")
    names = [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(output)]
    interrupted = _check_staging(output, overwrite) if TEMPORARY in names else False
    if all(n == TEMPORARY for n in names):
        return [], False
    if not overwrite:
        raise FileExistsError(f"output {output} exists and is not empty; pass --overwrite to replace it")
    previous = previous_entries(output, interrupted=interrupted)
    check_removable(output, previous)
    return previous, interrupted


def _check_staging(output: str, overwrite: bool) -> bool:
    """The ``_temporary/`` of an output, against its lease (:mod:`tfrecord_io.storage.lease`):
    a live run's is never touched; a dead run's, or one with no lease of ours, only with ``overwrite``.
    True: it is a run of ours whose commit was cut short, with the previous output set aside in it."""
    held = lease.read_lease(output)
    if held is not None and held.run == lease.held_here(output):
        return False  # this process's own run
    state = held.state() if held is not None else None
    if state == "live":
        raise FileExistsError(
            f"output {output} is being written by another conversion ({held.describe()}): two conversions "
            f"to one output would wipe each other's attempts; wait for it to finish, or choose another --output")
    aside = fs.join(output, TEMPORARY, PREVIOUS)
    if held is not None and fs.exists(aside):
        if overwrite:
            return True
        raise FileExistsError(
            f"output {output}: a conversion's commit was cut short ({held.describe()}) while it replaced the "
            f"previous output, whose files it had set aside under {aside}: the output is neither; pass --overwrite "
            f"to finish replacing it, or move the files under {aside} back yourself")
    if state == "ended" or overwrite:
        return False
    if state == "dead":
        raise FileExistsError(
            f"output {output} holds the staging (_temporary/) of a conversion that died without finishing "
            f"({held.describe()}): pass --overwrite to clean it")
    raise FileExistsError(
        f"output {output} holds a _temporary/ that no tfrecord-io conversion holds a lease on (another tool's "
        f"committer, or a run of an older version): pass --overwrite to delete it, or choose another --output")


def prepare_output(output: str, *, overwrite: bool, inputs: Iterable[str] = (),
                   input_paths: Iterable[str] = (), run: str | None = None,
                   permissions: Permissions | None = None) -> None:
    """Check the output against the inputs and what it holds (:func:`check_output`), clear the
    ``_temporary`` a failed or killed run left, create the output and its ``_temporary``, and take
    the output's lease (:mod:`~tfrecord_io.storage.lease`).  A previous output stays, readable,
    until the commit replaces it; only one that a killed commit left half replaced is cleared now.

    ``run``: the lease is the one run ``run`` holds (another process of the same conversion: the
    driver of ``convert_dataframe`` for its data source's writer); it is kept, not taken.
    ``permissions``: the output directory, when this creates it, takes their directory mode, and
    ``_temporary`` their staging mode (:mod:`~tfrecord_io.storage.permissions`)."""
    if run is not None:
        held = lease.read_lease(output)
        if held is None or held.run != run or held.state() != "live":
            raise RuntimeError(f"output {output}: the lease of run {run} is gone ({held.describe() if held else 'none'})")
        return
    previous, interrupted = _inspect(output, overwrite, inputs, input_paths)
    staging = fs.join(output, TEMPORARY)
    if fs.exists(staging):
        fs.delete(staging, recursive=True)
    for entry in previous if interrupted else ():
        fs.delete(entry, recursive=True)
    created = not fs.exists(output)
    fs.makedirs(staging)
    if permissions is not None:
        if created:
            fs.chmod(output, permissions.dir_mode(output))
        fs.chmod(staging, permissions.staging_mode(output))
    lease.hold(output)


def abort(output: str) -> None:
    """Best effort, after a failed run: remove what its task attempts wrote (``_temporary``), so that
    the output holds nothing of it.  Never raises: the run's own error is the one to report."""
    temporary = fs.join(output, TEMPORARY)
    lease.release(output, ended=True)  # (what cannot be removed, the next run may)
    try:
        if fs.exists(fs.join(temporary, PREVIOUS)):  # a commit that could not be taken back said where it is
            return
        if fs.exists(temporary):
            fs.delete(temporary, recursive=True)
    except OSError as e:
        import logging

        logging.getLogger(__name__).warning("could not remove %s after the failed run: %s", temporary, e)


def attempt_dir(output: str, attempt: str) -> str:
    return fs.join(output, TEMPORARY, attempt)


def write_shard(records: Iterable, output: str, attempt: str, final_name: str, compression: str,
                level: int = DEFAULT_COMPRESSION_LEVEL, *, inline_index: bool = False) -> WrittenFile:
    """Write batches of serialized records (Arrow binary arrays, or records already framed:
    :class:`~tfrecord_io.core.framing.FramedBatch`, from :func:`tfrecord_io.core.codec.encode_framed`)
    to this attempt's temporary file, and its record index beside it (``_index/<name>.idx``, from the
    same framing pass) or, with ``inline_index``, in the WrittenFile returned (``index``: the
    encoded lengths)."""
    temp_path = fs.join(attempt_dir(output, attempt), final_name)
    comp = normalize_compression(compression)
    if inline_index:
        buf = io.BytesIO()
        with fs.open(temp_path, "wb") as f:
            index = IndexWriter(buf, index_uri(temp_path))
            with TFRecordWriter(f, compression=comp, compression_level=level, index=index) as w:
                for batch in records:
                    w.write_batch(batch)
            index.finish(w.bytes_written, comp)
        parsed = parse_index(buf.getvalue(), index_uri(temp_path))
        if parsed.records != w.records_written:
            raise RuntimeError(f"{temp_path}: its index holds {parsed.records} records, {w.records_written} written")
        return WrittenFile(temp_path, final_name, w.records_written, w.bytes_written, w.crc32c,
                           encode_lengths(parsed.lengths))
    with fs.open(temp_path, "wb") as f, fs.open(index_uri(temp_path), "wb") as fi:
        index = IndexWriter(fi, index_uri(temp_path))
        with TFRecordWriter(f, compression=comp, compression_level=level, index=index) as w:
            for batch in records:
                w.write_batch(batch)
        index.finish(w.bytes_written, comp)
    return WrittenFile(temp_path, final_name, w.records_written, w.bytes_written, w.crc32c)


def write_rejects(lines: Iterable[dict], output: str, attempt: str, final_name: str) -> WrittenFile | None:
    """Write reject rows as JSON lines to this attempt's temporary area (None when there are none)."""
    temp_path = fs.join(attempt_dir(output, attempt), REJECTS, final_name)
    count = size = 0
    f = None
    try:
        for row in lines:
            if f is None:
                f = fs.open(temp_path, "wb")
            data = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
            f.write(data)
            count += 1
            size += len(data)
    finally:
        if f is not None:
            f.close()
    return WrittenFile(temp_path, f"{REJECTS}/{final_name}", count, size) if count else None


def check_reject_fraction(totals: ConversionTotals, max_reject_fraction: float, output: str | None = None) -> None:
    """RejectLimitExceeded when too much was rejected; ``_temporary`` stays, with the rejects to look
    at, and the lease on ``output`` is ended (the next run may clear it)."""
    if totals.input_rows != totals.converted_rows + totals.rejected:
        raise RuntimeError(f"counts do not reconcile: {totals.input_rows} input rows != "
                           f"{totals.converted_rows} converted + {totals.rejected} rejected")
    if totals.input_rows and totals.rejected / totals.input_rows > max_reject_fraction:
        error = RejectLimitExceeded(
            f"{totals.rejected} of {totals.input_rows} input rows were rejected "
            f"({totals.rejected / totals.input_rows:.2%}), more than --max-reject-fraction "
            f"{max_reject_fraction:g}; see the reasons under _temporary/*/{REJECTS}/ (output not committed)")
        if output is not None:
            lease.release(output, ended=True)
        raise error


def commit(output: str, files: list[WrittenFile], rejects: list[WrittenFile], totals: ConversionTotals, *,
           schema, compression: str, engine: str, max_reject_fraction: float = DEFAULT_MAX_REJECT_FRACTION,
           permissions: Permissions | None = None) -> dict:
    """Move the winning attempts' files into place, then write ``_manifest.json`` and ``_SUCCESS``.

    ``files`` must hold exactly one entry per shard.  Raises ``RejectLimitExceeded`` (and
    commits nothing) when too much was rejected.  ``totals.present`` (records holding each
    feature, :func:`tfrecord_io.core.codec.present_counts`) goes into the manifest when known.
    ``permissions``: the modes of what is committed (:mod:`~tfrecord_io.storage.permissions`;
    None: as the files were created).
    """
    _check_files(files, totals.records)
    check_reject_fraction(totals, max_reject_fraction, output)
    indexes = _indexes(files)
    manifest = _manifest(engine, schema, compression, files, rejects, totals, indexes)
    if totals.present is not None:
        manifest["present"] = dict(totals.present)
    with Commit(output) as c:
        c.set_aside()
        _move(c, output, [*files, *rejects], permissions)
        _finish(c, output, manifest, permissions)
    c.finish()
    return manifest


def commit_splits(output: str, splits, files: list[WrittenFile], rejects: list[WrittenFile],
                  totals: ConversionTotals, *, schema, compression: str, engine: str,
                  max_reject_fraction: float = DEFAULT_MAX_REJECT_FRACTION,
                  permissions: Permissions | None = None) -> dict:
    """The commit of a split output (``--split``): ``<output>/<split>/`` is a complete output of its
    own (shards, ``_manifest.json``, ``_SUCCESS``) for each of ``splits.names``; the rejects, a
    manifest of the whole and ``_SUCCESS`` go at the top, ``_SUCCESS`` last of all.

    ``files``' final names start with their split (``train/part-...``).
    """
    _check_files(files, totals.records)
    check_reject_fraction(totals, max_reject_fraction, output)
    by_split: dict[str, list[WrittenFile]] = {name: [] for name in splits.names}
    for f in files:
        name, _, rest = f.final_name.partition("/")
        if name not in by_split or not rest:
            raise RuntimeError(f"a shard of no split: {f.final_name}")
        by_split[name].append(f)
    indexes = _indexes(files)
    with Commit(output) as c:
        c.set_aside()
        for name in splits.names:
            c.makedirs(fs.join(output, name), permissions and permissions.dir_mode(output))
        _move(c, output, [*files, *rejects], permissions)
        summary = {}
        for name, split_files in by_split.items():
            n = sum(f.records for f in split_files)
            local = [replace(f, final_name=f.final_name.partition("/")[2]) for f in split_files]
            manifest = _manifest(engine, schema, compression, local, [], ConversionTotals(n, n, 0),
                                 {f.final_name.partition("/")[2]: indexes[f.final_name] for f in split_files})
            manifest["split"] = {"name": name, **splits.to_dict()}
            _finish(c, fs.join(output, name), manifest, permissions)
            summary[name] = {"records": n, "files": len(split_files)}
        top = _manifest(engine, schema, compression, [], rejects, totals, {})
        del top["files"], top["index"]
        top["splits"] = summary
        top["split_config"] = splits.to_dict()
        _finish(c, output, top, permissions)
    c.finish()
    return top


def commit_partitions(output: str, partition_by: list[dict], files: list[WrittenFile], rejects: list[WrittenFile],
                      totals: ConversionTotals, *, schema, compression: str, engine: str,
                      max_reject_fraction: float = DEFAULT_MAX_REJECT_FRACTION,
                      permissions: Permissions | None = None) -> dict:
    """The commit of a partitioned output (:mod:`tfrecord_io.storage.partitions`).

    ``files``' final names are ``<partition dir>/<task key>`` (``cut=Ideal/00003``), one per task
    that wrote rows of the partition; each partition's shards are named ``part-J-of-M`` in task
    order.  Every partition directory is a complete output (manifest with its ``partition``
    values, ``_SUCCESS``); the top manifest lists every shard, with its index, the rejects,
    ``partition_by`` (``[{"name", "type"}]``) and ``partitions``; its ``_SUCCESS`` is written last.
    """
    from tfrecord_io.storage.partitions import parse_partition_path

    by_dir: dict[str, list[WrittenFile]] = {}
    for f in sorted(files, key=lambda f: f.final_name):
        directory = f.final_name.rpartition("/")[0]
        if not directory:
            raise RuntimeError(f"a shard of no partition: {f.final_name}")
        by_dir.setdefault(directory, []).append(f)
    named = [replace(f, final_name=f"{d}/{shard_name(j, len(fs_), compression)}")
             for d, fs_ in by_dir.items() for j, f in enumerate(fs_)]
    _check_files(named, totals.records)
    check_reject_fraction(totals, max_reject_fraction, output)
    indexes = _indexes(named)
    with Commit(output) as c:
        c.set_aside()
        for d in by_dir:
            c.makedirs(fs.join(output, d), permissions and permissions.dir_mode(output))
        _move(c, output, [*named, *rejects], permissions)
        summary = {}
        for d in by_dir:
            mine = [f for f in named if f.final_name.rpartition("/")[0] == d]
            n = sum(f.records for f in mine)
            local = [replace(f, final_name=f.final_name.rpartition("/")[2]) for f in mine]
            manifest = _manifest(engine, schema, compression, local, [], ConversionTotals(n, n, 0),
                                 {f.final_name.rpartition("/")[2]: indexes[f.final_name] for f in mine})
            values = parse_partition_path(d + "/x")
            manifest["partition"] = values
            _finish(c, fs.join(output, d), manifest, permissions)
            summary[d] = {"values": values, "records": n, "files": len(mine)}
        top = _manifest(engine, schema, compression, named, rejects, totals, indexes)
        if totals.present is not None:
            top["present"] = dict(totals.present)
        top["partition_by"] = list(partition_by)
        top["partitions"] = summary
        _finish(c, output, top, permissions)
    c.finish()
    return top


def commit_output(output: str, files: list[WrittenFile], rejects: list[WrittenFile], totals: ConversionTotals, *,
                  splits=None, partition_by: list[dict] | None = None, **common) -> dict:
    """The commit of any conversion, whichever its layout: :func:`commit_partitions` with
    ``partition_by`` (``[{"name", "type"}]``), :func:`commit_splits` with ``splits``, else
    :func:`commit`.  ``common``: their keyword arguments (``schema``, ``compression``, ``engine``,
    ``max_reject_fraction``, ``permissions``).  The one place every engine chooses."""
    if partition_by and splits is not None:
        raise ValueError("an output is split or partitioned, not both")
    if partition_by:
        return commit_partitions(output, list(partition_by), files, rejects, totals, **common)
    if splits is not None:
        return commit_splits(output, splits, files, rejects, totals, **common)
    return commit(output, files, rejects, totals, **common)


def write_partition_shards(batches: Iterable, output: str, attempt: str, task_key: str, compression: str,
                           level: int = DEFAULT_COMPRESSION_LEVEL) -> list[WrittenFile]:
    """Write ``(records, codes, dirs)`` batches (record i goes to partition ``dirs[codes[i]]``) to
    one temporary file per partition this task sees, opened as its first record comes, each with
    its record index; final names ``<dir>/<task_key>`` (see :func:`commit_partitions`)."""
    import numpy as np
    import pyarrow as pa

    comp = normalize_compression(compression)
    open_: dict[str, tuple] = {}  # dir -> (path, file, index file, writer, index)
    try:
        for records, codes, dirs in batches:
            codes = np.asarray(codes)
            for code in np.unique(codes):
                d = dirs[int(code)]
                if d not in open_:
                    path = fs.join(attempt_dir(output, attempt), d, task_key)
                    f = fs.open(path, "wb")
                    fi = fs.open(index_uri(path), "wb")
                    index = IndexWriter(fi, index_uri(path))
                    open_[d] = (path, f, fi, TFRecordWriter(f, compression=comp, compression_level=level,
                                                            index=index), index)
                mask = codes == code
                open_[d][3].write_batch(records if mask.all() else records.filter(pa.array(mask)))
        for path, f, fi, w, index in open_.values():
            w.close()
            index.finish(w.bytes_written, comp)
    finally:
        for path, f, fi, w, index in open_.values():
            f.close()
            fi.close()
    return [WrittenFile(path, f"{d}/{task_key}", w.records_written, w.bytes_written, w.crc32c)
            for d, (path, f, fi, w, index) in sorted(open_.items())]


def _check_files(files: list[WrittenFile], records: int) -> None:
    names = [f.final_name for f in files]
    if len(set(names)) != len(names):
        raise RuntimeError(f"more than one attempt reported for a shard: {sorted(names)}")
    if sum(f.records for f in files) != records:
        raise RuntimeError(f"the shard files hold {sum(f.records for f in files)} records, the job counted {records}")


def _move(commit: Commit, output: str, files: list[WrittenFile], permissions: Permissions | None) -> None:
    p = permissions  # (each mode worked out once: a local output's reads the process's umask)
    shard_mode, reject_mode = (None, None) if p is None else (p.file_mode(output), p.rejects_file_mode(output))
    if any(f.final_name.startswith(REJECTS + "/") for f in files):  # renames do not create parents
        commit.makedirs(fs.join(output, REJECTS), p and p.rejects_dir_mode(output))
    for f in files:
        mode = reject_mode if f.final_name.startswith(REJECTS + "/") else shard_mode
        commit.rename(f.temp_path, fs.join(output, f.final_name), mode)


def _indexes(files: list[WrittenFile]) -> dict[str, str]:
    """Each shard's record index, read from beside its temporary file (before the commit moves it),
    encoded for the manifest: ``{final name: encode_lengths(...)}``.  Read in parallel (on HDFS
    each is a small remote read)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(f: WrittenFile) -> str:
        if f.index is not None:  # reported inline (write_shard(inline_index=True))
            return f.index
        try:
            index = read_index(index_uri(f.temp_path))
        except FileNotFoundError as e:
            raise RuntimeError(f"the record index of {f.final_name} is missing from its task attempt "
                               f"({index_uri(f.temp_path)}): every shard is written with one by output.write_shard; "
                               f"are the executors running another tfrecord-io version?") from e
        if index.records != f.records:
            raise RuntimeError(f"{index.uri}: {index.records} records, but its task reported {f.records}")
        return encode_lengths(index.lengths)

    if all(f.index is not None for f in files):
        return {f.final_name: f.index for f in files}
    with ThreadPoolExecutor(max(1, min(8, len(files)))) as pool:
        return dict(zip((f.final_name for f in files), pool.map(one, files)))


def _manifest(engine: str, schema, compression: str, files: list[WrittenFile], rejects: list[WrittenFile],
              totals: ConversionTotals, indexes: dict[str, str]) -> dict:
    return {
        "format_version": MANIFEST_VERSION,
        "engine": engine,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "record_type": schema.record_type,
        "compression": normalize_compression(compression),
        "schema": schema.to_dict(),
        "files": [_file_entry(f) for f in sorted(files, key=lambda f: f.final_name)],
        "index": {"version": MANIFEST_INDEX_VERSION,
                  "lengths": {name: indexes[name] for name in sorted(f.final_name for f in files)}},
        "rejects": [{"path": f.final_name, "rows": f.records} for f in sorted(rejects, key=lambda f: f.final_name)],
        "totals": totals.as_dict(),
    }


def _file_entry(f: WrittenFile) -> dict:
    entry = {"path": f.final_name, "records": f.records, "bytes": f.bytes}
    if f.crc32c is not None:
        entry["crc32c"] = format_crc(f.crc32c)
    return entry


def _finish(commit: Commit, directory: str, manifest: dict, permissions: Permissions | None) -> None:
    """``_manifest.json``, then ``_SUCCESS``."""
    mode = None if permissions is None else permissions.file_mode(directory)
    commit.write(fs.join(directory, MANIFEST), json.dumps(manifest, indent=2, sort_keys=False).encode("utf-8"), mode)
    commit.write(fs.join(directory, SUCCESS), b"", mode)


def write_split_shards(batches: Iterable, output: str, attempt: str, final_names: list[str],
                       compression: str, level: int = DEFAULT_COMPRESSION_LEVEL) -> list[WrittenFile]:
    """Write ``(records, split index per record)`` batches to one temporary file per split
    (``final_names[i]`` for split i), each with its record index; returns what was written,
    empty files included."""
    import numpy as np
    import pyarrow as pa

    comp = normalize_compression(compression)
    paths = [fs.join(attempt_dir(output, attempt), name) for name in final_names]
    handles, writers, indexes = [], [], []
    try:
        for path in paths:
            handles.append(fs.open(path, "wb"))
            handles.append(fs.open(index_uri(path), "wb"))
            indexes.append(IndexWriter(handles[-1], index_uri(path)))
            writers.append(TFRecordWriter(handles[-2], compression=comp, compression_level=level, index=indexes[-1]))
        for records, which in batches:
            which = np.asarray(which)
            for i, w in enumerate(writers):
                mask = which == i
                if mask.all():
                    w.write_batch(records)
                elif mask.any():
                    w.write_batch(records.filter(pa.array(mask)))
        for w, index in zip(writers, indexes):
            w.close()
            index.finish(w.bytes_written, comp)
    finally:
        for h in handles:
            h.close()
    return [WrittenFile(p, n, w.records_written, w.bytes_written, w.crc32c)
            for p, n, w in zip(paths, final_names, writers)]


def sum_present(counts: Iterable[dict | None]) -> dict[str, int] | None:
    """Per-feature present counts of several task reports added up (None if any report lacks them)."""
    total: dict[str, int] = {}
    for c in counts:
        if c is None:
            return None
        for k, v in c.items():
            total[k] = total.get(k, 0) + int(v)
    return total


def write_output(output_dir: str, shards: Iterable[Iterable], *, schema, compression: str = "none",
                 engine: str) -> dict:
    """Write and commit a whole output from already-encoded records, without an engine.

    ``shards`` holds, per shard, an iterable of serialized-record batches (Arrow binary
    arrays, e.g. from :func:`tfrecord_io.core.codec.encode_examples`, or framed batches from
    :func:`tfrecord_io.core.codec.encode_framed`).  There are no rejects, so
    every record is an input row.  Returns the manifest.
    """
    shards = list(shards)
    written = [write_shard(batches, output_dir, f"{engine}-0", shard_name(k, len(shards), compression), compression)
               for k, batches in enumerate(shards)]
    n = sum(w.records for w in written)
    return commit(output_dir, written, [], ConversionTotals(input_rows=n, records=n, rejected=0), schema=schema,
                  compression=compression, engine=engine)


def written_file_dict(f: WrittenFile) -> dict:
    """A WrittenFile as a plain dict (for returning through Spark rows / Beam elements).  Field by field:
    ``dataclasses.asdict`` deep-copies, a cost per shard that ten thousand shards notice."""
    return {name: getattr(f, name) for name in _WRITTEN_FIELDS}
