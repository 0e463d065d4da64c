"""``tfrecord-io verify``: is a TFRecord source intact and true to its manifest and schema?

Checks, for a SOURCE (see :mod:`tfrecord_io.commands.inspect`):

* framing: both CRCs of every record, and that no file ends inside a record.  After a
  framing error the rest of that file cannot be trusted (a bad length says nothing about
  where the next record starts), so the first framing problem of a file is reported and
  its remaining records are not read;
* record indexes (in the manifest of our converters' outputs, or ``_index/<file>.idx`` from
  ``tfrecord-io index``): each one is intact and is its file's -- size, compression, and every
  record's length against a second, streamed walk of the file's headers;
* the manifest (directories written by our converters): every listed file exists and has
  the listed size, record count and content checksum (CRC-32C of its bytes), the totals add up (``records`` is the sum over files;
  ``input_rows`` = converted rows + ``rejected``), the listed rejects files hold the listed
  number of lines, ``_SUCCESS`` is there, and no record file or ``_temporary`` is beside
  the manifest that it does not list;
* the schema (the manifest's, or ``--schema FILE.yaml``): every record decodes as the
  schema's record type; each schema feature that is present has the schema's kind
  (``int64_list`` / ``float_list`` / ``bytes_list``), exactly one value (scalars) or
  exactly k values (shape ``[k]``), valid UTF-8 for ``string`` features; ``required``
  features are present; sequence features check each step the same way.  Features the
  schema does not name are allowed (see docs/wire-contract.md).  Without a manifest or
  ``--schema`` only the framing is checked.

Records are read a chunk at a time (:func:`tfrecord_io.core.framing.iter_record_chunks`: both CRCs of
a read's records checked in one compiled call, no Python object per record) and checked against the
schema a chunk at a time by the vectorized decoder
(:func:`tfrecord_io.core.wire_scan.scan_batch`); only the records it finds a problem in, or
cannot take, are decoded one by one (``decode_record``, :func:`check_record`), which gives each
problem its detail: the result is that of a record-by-record check.

Also reported, as warnings that do not fail the run: records missing a scalar or ``[k]``
feature that has no default (the schema's parse spec cannot parse them).

Exit status (every command's contract, see :mod:`tfrecord_io.commands.convert`): 0 when every check
holds, 3 when there are problems (the first one is named with its file and byte offset, and the
total is counted), 2 when the source cannot be read at all.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from tfrecord_io.storage import fs, lease
from tfrecord_io.core.wire_scan import KIND_BYTES, KIND_CODE, is_utf8, scan_batch
from tfrecord_io.core.decode import RecordDecodeError, decode_record
from tfrecord_io.core.checksum import format_crc
from tfrecord_io.core.framing import CorruptRecordError, chunk_records
from tfrecord_io.commands import exits
from tfrecord_io.commands.reading import add_source_arguments, map_files, resolve_source
from tfrecord_io.storage.sources import ShardReader, Source, SourceFile
from tfrecord_io.storage.output import MANIFEST, SUCCESS, TEMPORARY

__all__ = ["Problem", "VerifyResult", "check_record", "verify_source", "configure", "run"]

DEFAULT_MAX_LISTED = 20
_KEPT_PER_FILE = 100  # problems kept (with offsets) per file; all are counted


@dataclass(frozen=True)
class Problem:
    """One failed check: ``file`` (relative name; None for the source as a whole), ``offset``
    (byte offset of the record in the uncompressed stream; None for file-level checks)."""

    check: str  # "framing" | "manifest" | "schema" | "index"
    message: str
    file: str | None = None
    offset: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file + (f" at byte offset {self.offset}" if self.offset is not None else "") + ": "
        return f"{where}{self.message}"

    def as_dict(self) -> dict:
        return {"check": self.check, "file": self.file, "offset": self.offset, "message": self.message}


@dataclass
class FileCheck:
    """What one worker found in one file."""

    records: int = 0
    framing_ok: bool = True
    crc32c: int | None = None  # of the file's bytes (None: not read to its end)
    problems: list[Problem] = field(default_factory=list)  # the first _KEPT_PER_FILE
    problem_count: int = 0
    by_check: Counter = field(default_factory=Counter)
    by_reason: Counter = field(default_factory=Counter)
    warnings: Counter = field(default_factory=Counter)

    def add(self, problem: Problem, reason: str) -> None:
        self.problem_count += 1
        self.by_check[problem.check] += 1
        self.by_reason[reason] += 1
        if len(self.problems) < _KEPT_PER_FILE or problem.check == "framing":  # the last one a file has
            self.problems.append(problem)


@dataclass
class VerifyResult:
    source: str
    files: int
    records: int
    bytes: int
    schema_from: str | None
    problems: list[Problem]       # the listed ones, in order (first = first problem)
    problem_count: int
    by_check: Counter
    by_reason: Counter
    warnings: Counter
    checked: list[str]

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def as_dict(self) -> dict:
        return {"source": self.source, "ok": self.ok, "files": self.files, "records": self.records,
                "bytes": self.bytes, "schema_from": self.schema_from, "checked": self.checked,
                "problem_count": self.problem_count, "by_check": dict(self.by_check),
                "by_reason": dict(self.by_reason.most_common()),
                "first_problem": self.problems[0].as_dict() if self.problems else None,
                "problems": [p.as_dict() for p in self.problems], "warnings": dict(self.warnings)}


# ---------------------------------------------------------------------------------------
# Records against the schema
# ---------------------------------------------------------------------------------------
def _check_values(f, feature: tuple, where: str, step: str = "") -> tuple[str, str] | None:
    """(reason, message) when a present feature breaks the schema: the reason names the
    feature and the rule, the message adds what this record holds."""
    kind, values = feature
    if kind != f.kind:
        reason = f"{where}: expected {f.kind} ({f.type})"
        return reason, f"{where}{step}: expected {f.kind} ({f.type}), got {kind or 'a feature with no kind set'}"
    k = f.fixed_length if f.is_list else 1
    if k is not None and len(values) != k:
        reason = f"{where}: expected {k} value{'s' if k != 1 else ''} ({'shape [%d]' % k if f.is_list else 'scalar'})"
        return reason, f"{reason.replace(where, where + step, 1)}, got {len(values)}"
    if f.type == "string":
        for i, v in enumerate(values):
            try:
                v.decode("utf-8")
            except UnicodeDecodeError:
                reason = f"{where}: a value that is not valid UTF-8 (type string)"
                return reason, f"{where}{step}: value {i} is not valid UTF-8 (type string): {v[:40]!r}"
    return None


def check_record(record, schema) -> tuple[list[tuple[str, str]], list[str]]:
    """Problems of one decoded record against a schema, and warnings.

    Returns ``([(reason, message), ...], [warning, ...])``: ``reason`` names the feature and
    the rule (for counting problems by kind), ``message`` adds what this record holds.
    """
    problems: list[tuple[str, str]] = []
    warnings: list[str] = []
    sequence = schema.record_type == "sequence_example"
    if record.is_sequence and not sequence:
        return [("a SequenceExample in an example source",
                 "a SequenceExample (it has feature_lists) where the schema says example")], []
    label = "context feature" if sequence else "feature"
    for f in (schema.context if sequence else schema.features):
        feature = record.features.get(f.name)
        where = f"{label} {f.name!r}"
        if feature is None:
            if f.required:
                problems.append((f"{where}: required, missing",) * 2)
            elif f.default is None and not f.is_varlen:
                warnings.append(f"{where}: missing and has no default (parsing fails)")
            continue
        found = _check_values(f, feature, where)
        if found is not None:
            problems.append(found)
    if sequence:
        lists = record.feature_lists or {}
        for f in schema.sequence:
            where = f"sequence feature {f.name!r}"
            steps = lists.get(f.name)
            if steps is None:
                if f.required:
                    problems.append((f"{where}: required, missing",) * 2)
                continue
            for j, step in enumerate(steps):
                found = _check_values(f, step, where, f", step {j}")
                if found is not None:
                    problems.append(found)
                    break  # one problem per feature and record
    return problems, warnings


# ---------------------------------------------------------------------------------------
# Per file (runs in worker processes)
# ---------------------------------------------------------------------------------------
_CHUNK_RECORDS = 4096  # records checked at once by the vectorized decoder (at most; a chunk is about one read)


def _verify_file(file: SourceFile, schema, report) -> FileCheck:
    out = FileCheck()
    reader = ShardReader(file, verify=True, report=report)
    try:  # a chunk at a time, no object per record; a corrupt record ends them: the intact ones are checked
        for offsets, lengths, data in reader.chunks(_CHUNK_RECORDS, gather=schema is not None):
            out.records += len(offsets)
            if schema is not None:
                _check_chunk(out, file, schema, chunk_records(lengths, data), offsets.tolist())
    except CorruptRecordError as e:
        out.framing_ok = False
        out.add(Problem("framing", f"{e.check}: {e.detail}", file.name, e.offset), f"framing: {e.check}")
        return out
    out.crc32c = reader.crc32c
    return out


def _check_chunk(out: FileCheck, file: SourceFile, schema, chunk, offsets: list[int]) -> None:
    """Check a chunk of records against the schema: vectorized for all of them (:func:`_suspects`),
    then one by one with :func:`check_record` for those that may have a problem, so that each
    problem is reported with its record's detail exactly as a record-by-record check would."""
    if not len(chunk):
        return
    scan = scan_batch(chunk)
    suspects, warned = _suspects(scan, schema)
    for warning, n in warned.items():
        out.warnings[warning] += n
    for i in np.flatnonzero(suspects).tolist():
        try:
            record = decode_record(chunk[i].as_py())
        except RecordDecodeError as e:
            out.add(Problem("schema", str(e), file.name, offsets[i]), "not a valid Example/SequenceExample")
            continue
        problems, warnings = check_record(record, schema)
        for reason, message in problems:
            out.add(Problem("schema", message, file.name, offsets[i]), reason)
        for w in warnings:
            out.warnings[w] += 1


def _suspects(scan, schema) -> tuple[np.ndarray, Counter]:
    """The records of a scanned chunk that :func:`check_record` would find a problem in (and those
    the vectorized decoder left to ``decode_record``), and the warnings of all the others."""
    suspect = scan.odd.copy()
    sequence = schema.record_type == "sequence_example"
    if not sequence:
        suspect |= scan.has_lists
    missing: list[tuple[str, np.ndarray]] = []
    label = "context feature" if sequence else "feature"
    for f in (schema.context if sequence else schema.features):
        sf = scan.features.get(f.name)
        present = np.zeros(scan.n, dtype=bool)
        if sf is not None:
            present[sf.records] = True
            suspect[sf.records[_bad_slots(f, sf.values)]] = True
        if f.required:
            suspect |= ~present
        elif f.default is None and not f.is_varlen:
            missing.append((f"{label} {f.name!r}: missing and has no default (parsing fails)", ~present))
    if sequence:
        for f in schema.sequence:
            sl = scan.feature_lists.get(f.name)
            present = np.zeros(scan.n, dtype=bool)
            if sl is not None:
                present[sl.records] = True
                bad_steps = _bad_slots(f, sl.values)
                if bad_steps.any():
                    lists = np.repeat(np.arange(len(sl.records)), sl.steps)[bad_steps]
                    suspect[sl.records[lists]] = True
            if f.required:
                suspect |= ~present
    warned = Counter({w: int(np.count_nonzero(where & ~suspect)) for w, where in missing})
    return suspect, +warned


def _bad_slots(f, values) -> np.ndarray:
    """The slots (records, or steps) whose value breaks the feature's rules (:func:`_check_values`)."""
    bad = values.kind != KIND_CODE[f.kind]
    k = f.fixed_length if f.is_list else 1
    if k is not None:
        bad |= values.counts != k
    if f.type == "string" and len(values.data) and not _all_utf8(values.data):
        not_utf8 = np.array([not is_utf8(v) for v in values.data.to_pylist()], dtype=np.int64)
        seen = np.concatenate([[0], np.cumsum(not_utf8)])  # values not UTF-8 before each value
        offsets = values.value_offsets(KIND_BYTES)
        bad |= seen[offsets[1:]] > seen[offsets[:-1]]
    return bad


def _all_utf8(data) -> bool:
    """Whether every value of a binary array is UTF-8 (Arrow checks them all at once)."""
    import pyarrow as pa

    try:
        data.cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    return True


# ---------------------------------------------------------------------------------------
# The source
# ---------------------------------------------------------------------------------------
def _count_lines(uri: str) -> int:
    n = 0
    last = b"\n"
    with fs.open(uri, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def _manifest_problems(source: Source) -> list[Problem]:
    out: list[Problem] = []
    if source.manifest is None:
        return out
    m = source.manifest.raw
    if not source.success:
        out.append(Problem("manifest", f"{SUCCESS} is missing: the output was never committed", SUCCESS))
    for name in source.extra_entries:
        out.append(Problem("manifest", f"a file beside {MANIFEST} that it does not list", name))
    if fs.exists(fs.join(source.uri, TEMPORARY)):
        held = lease.read_lease(source.uri)
        if held is None or held.state() != "live":  # (a live run stages its replacement beside this output)
            out.append(Problem("manifest", "left behind by a job (a committed output has none)", TEMPORARY))
    totals = m.get("totals") or {}
    listed = sum(f.records or 0 for f in source.files)
    if "records" in totals and totals["records"] != listed:
        out.append(Problem("manifest", f"totals.records is {totals['records']}, the files entries add up to {listed}",
                           MANIFEST))
    if {"input_rows", "rejected"} <= set(totals):
        converted = totals.get("rows_in_records", totals.get("records", listed))
        if totals["input_rows"] != converted + totals["rejected"]:
            out.append(Problem("manifest", f"totals do not reconcile: input_rows {totals['input_rows']} != "
                                           f"{converted} converted + {totals['rejected']} rejected", MANIFEST))
    for entry in m.get("rejects") or []:
        path, rows = entry.get("path"), entry.get("rows")
        uri = fs.join(source.uri, str(path))
        try:
            lines = _count_lines(uri)
        except FileNotFoundError:
            out.append(Problem("manifest", "listed in the manifest's rejects, missing", str(path)))
            continue
        if rows is not None and lines != rows:
            out.append(Problem("manifest", f"the manifest says {rows} reject rows, the file has {lines} lines",
                               str(path)))
    return out


# ---------------------------------------------------------------------------------------
# Record indexes (tfrecord_io.storage.index): each one against its file
# ---------------------------------------------------------------------------------------
def _check_index(file: SourceFile, context: dict, report) -> list[Problem] | None:
    """The problems of ``file``'s record index (None: it has none) -- the one its manifest holds
    (``context``: per file URI, the manifest's encoded lengths and its URI), else its
    ``_index/<name>.idx``: the index itself, then every record's length against one streamed walk
    of the file's headers, its record count, size and compression.  A file whose framing is
    damaged is left to the framing check (runs in workers)."""
    from tfrecord_io.core.framing import iter_record_lengths
    from tfrecord_io.storage.index import RecordIndex, decode_lengths, index_uri, read_index

    embedded = context.get(file.uri)
    try:
        if embedded is not None:
            text, where = embedded
            # Its size is the manifest's (checked with the manifest): the walk below checks the rest.
            index = RecordIndex(where, decode_lengths(text, where), -1, file.compression)
        else:
            index = read_index(index_uri(file.uri))
    except FileNotFoundError:
        return None
    except ValueError as e:
        return [Problem("index", str(e), file.name)]
    done, first_difference = 0, None
    try:
        with fs.open(file.uri, "rb") as f:
            for lengths in iter_record_lengths(f, name=file.uri, compression=file.compression):
                mine = index.lengths[done:done + lengths.size]
                differ = np.flatnonzero(mine != lengths[:mine.size])
                if first_difference is None and differ.size:
                    k = done + int(differ[0])
                    first_difference = Problem("index", f"record {k} has {int(lengths[k - done])} data bytes, its "
                                                        f"index says {int(index.lengths[k])}", file.name,
                                               int(index.offsets[k]))
                done += lengths.size
    except CorruptRecordError:
        return []
    if first_difference is not None:
        return [first_difference]
    if done != index.records:
        return [Problem("index", f"the file holds {done} records, its index {index.records}", file.name)]
    why = index.matches(file.size, file.compression) if index.file_bytes >= 0 else None
    return [Problem("index", f"{index.uri} is not this file's index: {why}", file.name)] if why is not None else []


def _index_problems(source: Source, files: list[SourceFile], workers: int | None,
                    progress: bool | None) -> list[Problem]:
    """Every index problem of ``files`` (files without an index have none)."""
    embedded: dict = {}
    if source.manifest is not None:
        field_ = source.manifest.raw.get("index")
        if field_ is not None and not (isinstance(field_, dict) and isinstance(field_.get("lengths"), dict)):
            return [Problem("index", "the manifest's 'index' field is not a record index", MANIFEST)]
        lengths = (field_ or {}).get("lengths") or {}
        embedded = {f.uri: (lengths[f.name], f"{source.manifest.uri}#index/{f.name}")
                    for f in files if f.name in lengths}
        if field_ is not None and len(embedded) < len(files):
            missing = sorted(f.name for f in files if f.name not in lengths)
            return [Problem("index", f"the manifest's 'index' has no entry for {missing[0]}", missing[0])]
    found = map_files(_check_index, files, context=embedded, workers=workers, label="indexes",
                      progress=progress) if files else []
    return [p for problems in found if problems for p in problems]


def verify_source(source: Source, *, workers: int | None = None, progress: bool | None = None,
                  max_listed: int = DEFAULT_MAX_LISTED) -> VerifyResult:
    """Run every check on a resolved source (see the module doc)."""
    present = [f for f in source.files if f.size is not None]
    checks = map_files(_verify_file, present, context=source.schema, workers=workers,
                       label="verifying", progress=progress) if present else []
    by_file = dict(zip((f.uri for f in present), checks))

    problems: list[Problem] = []
    count = 0
    by_check: Counter = Counter()
    by_reason: Counter = Counter()
    warnings: Counter = Counter()
    records = 0

    def add(p: Problem, reason: str) -> None:
        nonlocal count
        count += 1
        by_check[p.check] += 1
        by_reason[reason] += 1
        problems.append(p)

    for f in source.files:
        if f.size is None:
            add(Problem("manifest", "listed in the manifest, missing", f.name), "file missing")
            continue
        fc = by_file[f.uri]
        records += fc.records
        warnings.update(fc.warnings)
        problems.extend(fc.problems)
        count += fc.problem_count
        by_check.update(fc.by_check)
        by_reason.update(fc.by_reason)
        if f.bytes is not None and f.size != f.bytes:
            add(Problem("manifest", f"the manifest says {f.bytes} bytes, the file has {f.size}", f.name),
                "file size differs from the manifest")
        if f.records is not None and fc.framing_ok and fc.records != f.records:
            add(Problem("manifest", f"the manifest says {f.records} records, the file has {fc.records}",
                        f.name), "record count differs from the manifest")
        elif (f.crc32c is not None and fc.crc32c is not None and fc.crc32c != f.crc32c
              and (f.bytes is None or f.size == f.bytes)):
            add(Problem("manifest", f"the manifest says CRC-32C {format_crc(f.crc32c)}, the file's bytes have "
                        f"{format_crc(fc.crc32c)} (replaced or altered since it was written)", f.name),
                "content checksum differs from the manifest")
    for p in _manifest_problems(source):
        add(p, p.message if p.file != MANIFEST else "totals")
    for p in _index_problems(source, present, workers, progress):
        add(p, "record index does not match its file")
    checked = ["framing"]
    if source.manifest is not None:
        checked.append("manifest")
    if source.schema is not None:
        checked.append("schema")
    return VerifyResult(source=source.uri, files=len(source.files), records=records,
                        bytes=sum(f.size or 0 for f in source.files), schema_from=source.schema_from,
                        problems=problems[:max_listed], problem_count=count, by_check=by_check,
                        by_reason=by_reason, warnings=warnings, checked=checked)


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------
def render_text(r: VerifyResult) -> str:
    def state(check: str) -> str:
        n = r.by_check.get(check, 0)
        return "ok" if not n else f"{n} problem{'s' if n != 1 else ''}"

    lines = [f"verify {r.source}",
             f"  files:    {r.files} ({r.bytes} bytes), {r.records} records read",
             f"  CRCs:     {state('framing')}"]
    if r.by_check.get("index"):
        lines.append(f"  indexes:  {state('index')} (each record index against its file)")
    if "manifest" in r.checked:
        lines.append(f"  manifest: {state('manifest')}")
    else:
        lines.append("  manifest: none (not an output directory of ours)")
    if "schema" in r.checked:
        what = "the manifest's" if r.schema_from == "manifest" else "the --schema"
        lines.append(f"  schema:   {state('schema')} (records checked against {what} schema)")
    else:
        lines.append("  schema:   not checked (no manifest; pass --schema FILE.yaml to check records)")
    for w, n in sorted(r.warnings.items()):
        lines.append(f"  warning:  {n} record{'s' if n != 1 else ''}: {w}")
    if r.ok:
        lines.append("OK: all checks hold")
        return "\n".join(lines) + "\n"
    lines.append(f"FAILED: {r.problem_count} problem{'s' if r.problem_count != 1 else ''}; "
                 f"the first: {r.problems[0]}")
    if len(r.by_reason) > 1:
        lines.append("by kind:")
        lines += [f"  {n:>8}  {reason}" for reason, n in r.by_reason.most_common()]
    shown = f" (the first {len(r.problems)})" if r.problem_count > len(r.problems) else ""
    lines.append(f"problems{shown}:")
    lines += [f"  {p}" for p in r.problems]
    return "\n".join(lines) + "\n"


def configure(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser)
    parser.add_argument("--schema", metavar="FILE.yaml", default=None,
                        help="check records against this schema (default: the manifest's; "
                             "without either only the framing is checked)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="processes (default: one per file, at most the CPU count; one for sources under 32 MB)")
    parser.add_argument("--max-problems", type=int, default=DEFAULT_MAX_LISTED, metavar="N",
                        help=f"problems to list (all are counted; default {DEFAULT_MAX_LISTED})")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run(args: argparse.Namespace) -> int:
    try:
        source = resolve_source(args.source, compression=args.compression, schema_uri=args.schema)
        result = verify_source(source, workers=args.workers, max_listed=max(1, args.max_problems))
    except (OSError, ValueError, TypeError) as e:
        return exits.fail("verify", exits.message_of(e), exits.USAGE)  # the source cannot be read
    if args.json:
        print(json.dumps(result.as_dict(), ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(render_text(result))
    return exits.OK if result.ok else exits.PROBLEMS
