"""``tfrecord-io inspect``: a SOURCE's files, record count, schema and first records.

A SOURCE is an output directory, any directory, a glob or a file, local or ``hdfs://``
(:mod:`tfrecord_io.commands.reading`).

``inspect`` prints the files, the record count (the manifest's, or counted by reading
every file), the schema (the manifest's, or inferred: feature names, kinds, how many values, and
the type and shape) and the first ``--head`` records.  A source without a schema is inferred as
``spark.read.format("tfrecord")`` and ``read_batches`` infer it, from the same records
(:func:`tfrecord_io.storage.sources.infer_files`: the first records of every file, ``--sample`` in
all, and on while a feature has no kind), so the types shown are the ones they read, and a
conflict of kinds is shown with the error they would raise.  Records are shown as JSON (see :func:`tfrecord_io.core.decode.record_to_json`):

* a feature is ``{"int64_list": [...]}``, ``{"float_list": [...]}``, ``{"bytes_list": [...]}``,
  or ``{}`` for a feature with no kind set, so an empty list and a missing feature differ;
* bytes are a JSON string when they are valid UTF-8, else ``{"base64": "..."}``;
* floats are float32 values in their shortest spelling; NaN and infinities are the strings
  ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
* a record that is not an Example or SequenceExample is ``{"error": "...", "base64": "..."}``.

A file holds Examples or SequenceExamples (the manifest says which; otherwise a record with
``feature_lists`` marks SequenceExamples, and records without any are shown as Examples).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any, Iterator

from tfrecord_io.commands import exits
from tfrecord_io.commands.reading import add_source_arguments, map_files, resolve_source
from tfrecord_io.core.decode import RecordDecodeError, decode_record, record_to_json
from tfrecord_io.core.record_schema import INFER_SAMPLE_RECORDS
from tfrecord_io.storage.sources import Source, SourceFile, infer_files, iter_file_records, shard_mismatch

__all__ = ["configure", "inspect_source", "render_text", "run"]

DEFAULT_HEAD = 5
DEFAULT_SAMPLE = INFER_SAMPLE_RECORDS  # spark.read's and read_batches' own


# ---------------------------------------------------------------------------------------
# inspect
# ---------------------------------------------------------------------------------------
def _count_file(file: SourceFile, _context, report) -> int:
    return sum(1 for _ in iter_file_records(file, verify=False, report=report))


def _sample(source: Source, n: int) -> Iterator[tuple[SourceFile, int, bytes]]:
    """The first ``n`` records of the source, in file order (stops reading when it has them)."""
    if n <= 0:
        return
    got = 0
    for file in source.files:
        if file.size is None:
            continue
        for offset, data in iter_file_records(file, verify=False):
            yield file, offset, data
            got += 1
            if got >= n:
                return


def inspect_source(source: Source, *, head: int = DEFAULT_HEAD, sample: int = DEFAULT_SAMPLE,
                   workers: int | None = None, progress: bool | None = None) -> dict:
    """Everything ``inspect`` shows, as JSON-ready data."""
    files = [{"path": f.name, "uri": f.uri, "compression": f.compression,
              "compression_from": f.compression_from, "bytes": f.size,
              **({"records": f.records} if f.records is not None else {})}
             for f in source.files]
    out: dict[str, Any] = {"source": source.uri}
    if source.manifest is not None:
        for f in source.files:  # (the counts shown are the manifest's: a file of another size is not its)
            problem = shard_mismatch(f, nbytes=f.size)
            if problem is not None:
                raise ValueError(f"{problem} (`tfrecord-io verify {source.uri}` checks every file)") from problem
        raw = source.manifest.raw
        totals = raw.get("totals", {})
        out["manifest"] = {"engine": raw.get("engine"), "created": raw.get("created"),
                           "totals": totals, "success": source.success,
                           "rejects": [r.get("path") for r in raw.get("rejects") or ()]}
        if source.splits:
            out["splits"] = {name: sum(f.records or 0 for f in source.files if f.name.startswith(name + "/"))
                             for name in source.splits}
        out["records"] = sum(f.records or 0 for f in source.files)
        out["records_from"] = "manifest"
    else:
        readable = [f for f in source.files if f.size is not None]
        counts = dict(zip((f.uri for f in readable),
                          map_files(_count_file, readable, workers=workers, label="counting", progress=progress)))
        for entry in files:
            if entry["uri"] in counts:
                entry["records"] = counts[entry["uri"]]
        out["records"] = sum(counts.values())
        out["records_from"] = "scan"
    out["files"] = files

    rows = []
    for file, offset, data in _sample(source, head):
        rec, err = None, None
        try:
            rec = decode_record(data)
        except RecordDecodeError as e:
            err = str(e)
        rows.append((file, offset, data, rec, err))

    if source.schema is not None:
        out["record_type"] = source.schema.record_type
        out["record_type_from"] = source.schema_from
        out["schema"] = {"from": source.schema_from, **source.schema.to_dict()}
        sequence = source.schema.record_type == "sequence_example"
        order = [f.name for f in source.schema.input_features]
    else:
        readable = [(f.uri, f.compression) for f in source.files if f.size is not None]
        inference = infer_files(readable, sample=sample, skip_undecodable=True)
        inferred = inference.describe()
        sequence = inferred["record_type"] == "sequence_example"
        out["record_type"] = inferred["record_type"] if inference.records else None
        out["record_type_from"] = "records"
        out["schema"] = {"from": "records", "sampled": inference.records + inference.undecodable,
                         "files": len(readable), **inferred}
        if inference.undecodable:
            out["schema"]["undecodable"] = inference.undecodable
        order = None
    out["head"] = []
    for file, offset, data, rec, err in rows:
        item: dict[str, Any] = {"file": file.name, "offset": offset}
        if rec is None:
            item.update(error=err, base64=base64.b64encode(data).decode("ascii"))
        else:
            item.update(record_to_json(rec, sequence=sequence or rec.is_sequence, order=order))
        out["head"].append(item)
    return out


# -- text rendering ------------------------------------------------------------------------
_MAX_SHOWN = 16  # values shown per feature in text mode


def _values_text(feature_json: dict) -> str:
    if not feature_json:
        return "(no kind set)"
    (kind, values), = feature_json.items()
    shown = ", ".join(json.dumps(v, ensure_ascii=False) for v in values[:_MAX_SHOWN])
    more = f", ... ({len(values)} values)" if len(values) > _MAX_SHOWN else ""
    return f"{kind:<11} [{shown}{more}]"


def _features_text(features: dict, indent: str) -> list[str]:
    if not features:
        return [f"{indent}(no features)"]
    width = max(len(n) for n in features)
    return [f"{indent}{n:<{width}}  {_values_text(v)}" for n, v in features.items()]


def _schema_text(schema: dict) -> list[str]:
    lines = []
    if schema["from"] in ("manifest", "option"):
        what = "the manifest" if schema["from"] == "manifest" else "--schema"
        lines.append(f"schema (from {what}): {schema['record_type']}")
        groups = ([("features", schema.get("features", []))] if schema["record_type"] == "example"
                  else [("context", schema.get("context", [])), ("sequence", schema.get("sequence", []))])
        for title, feats in groups:
            if schema["record_type"] != "example":
                lines.append(f"  {title}:")
            width = max([len(f["name"]) for f in feats] or [0])
            for f in feats:
                shape = "scalar" if "shape" not in f else str(f["shape"])
                extra = []
                if "default" in f:
                    extra.append(f"default {json.dumps(f['default'], ensure_ascii=False)}")
                if f.get("required"):
                    extra.append("required")
                pad = "    " if schema["record_type"] != "example" else "  "
                lines.append(f"{pad}{f['name']:<{width}}  {f['type']:<6}  {shape:<7}  {', '.join(extra)}".rstrip())
        return lines
    lines.append(f"schema (inferred from {schema['sampled']} records of {schema['files']} files, as spark.read and "
                 f"read_batches infer it): {schema['record_type']}"
                 + (f"; {schema['undecodable']} records are not Examples" if schema.get("undecodable") else ""))
    for title in ("features", "feature_lists"):
        feats = schema.get(title)
        if feats is None:
            continue
        pad = "  "
        if schema["record_type"] != "example":
            lines.append(f"  {'context' if title == 'features' else 'feature_lists'}:")
            pad = "    "
        width = max([len(f["name"]) for f in feats] or [4])
        for f in feats:
            kinds = ",".join(f["kinds"])
            lo, hi = f["values"]
            values = f"{lo}" if lo == hi else f"{lo}..{hi}"
            steps = ""
            if "steps" in f:
                a, b = f["steps"]
                steps = f"  steps {a if a == b else f'{a}..{b}'}"
            guess = f["type"] or "? (kinds conflict)"
            if f["shape"] is not None:
                guess += f" {f['shape']}"
            lines.append(f"{pad}{f['name']:<{width}}  {kinds:<11}  in {f['present']}/{f['records']} records"
                         f"{steps}  values {values}  read as {guess}")
        if not feats:
            lines.append(f"{pad}(none)")
    lines += [f"  note: {note}" for note in schema.get("notes", ())]
    if schema.get("error"):
        lines.append(f"  no schema reads these records: {schema['error']}")
    return lines


def render_text(info: dict) -> str:
    lines = [f"source:      {info['source']}"]
    if "manifest" in info:
        m = info["manifest"]
        lines.append(f"manifest:    yes ({m.get('engine')}, {m.get('created')}); "
                     f"_SUCCESS {'present' if m.get('success') else 'MISSING'}")
    lines.append(f"record type: {info.get('record_type') or 'unknown'}"
                 f" (from the {'records' if info.get('record_type_from') == 'records' else info.get('record_type_from')})")
    lines.append(f"records:     {info['records']} "
                 f"({'from the manifest' if info['records_from'] == 'manifest' else 'counted'})")
    if "splits" in info:
        lines.append("splits:      " + ", ".join(f"{name} ({n} records)" for name, n in info["splits"].items()))
    if "manifest" in info and info["manifest"].get("totals"):
        t, rejects = info["manifest"]["totals"], info["manifest"]["rejects"]
        lines.append(f"rejects:     {t.get('rejected', 0)} of {t.get('input_rows', '?')} input rows"
                     + (f" (in {', '.join(rejects)})" if rejects else ""))
    label = (info.get("schema") or {}).get("label")
    if label:
        lines.append(f"label:       {label}")
    lines.append(f"files:       {len(info['files'])}")
    width = max(len(f["path"]) for f in info["files"])
    for f in info["files"]:
        size = "MISSING" if f["bytes"] is None else f"{f['bytes']} bytes"
        records = f"{f['records']} records" if "records" in f else ""
        lines.append(f"  {f['path']:<{width}}  {f['compression']:<5}  {records:>15}  {size}")
    lines.append("")
    lines += _schema_text(info["schema"])
    if info["head"]:
        lines.append("")
        lines.append(f"first {len(info['head'])} records:")
        for i, r in enumerate(info["head"]):
            lines.append(f"[{i}] {r['file']} @ offset {r['offset']}")
            if "error" in r:
                lines.append(f"    not an Example: {r['error']}")
                b64 = r["base64"]
                lines.append(f"    base64: {b64[:96]}{'...' if len(b64) > 96 else ''}")
            elif "features" in r:
                lines += _features_text(r["features"], "    ")
            else:
                lines.append("    context:")
                lines += _features_text(r["context"], "      ")
                lines.append("    feature_lists:")
                if not r["feature_lists"]:
                    lines.append("      (none)")
                width = max([len(n) for n in r["feature_lists"]] or [0])
                for name, steps in r["feature_lists"].items():
                    lines.append(f"      {name:<{width}}  {len(steps)} steps")
                    for j, step in enumerate(steps[:_MAX_SHOWN]):
                        lines.append(f"        [{j}] {_values_text(step)}")
                    if len(steps) > _MAX_SHOWN:
                        lines.append(f"        ... ({len(steps)} steps)")
    return "\n".join(lines) + "\n"


# -- command line ----------------------------------------------------------------------------
def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "Records are shown as JSON: a feature is {\"int64_list\": [...]}, {\"float_list\": [...]},\n"
        "{\"bytes_list\": [...]} or {} (no kind set); bytes are a string when valid UTF-8, else\n"
        "{\"base64\": \"...\"}; NaN and infinities are the strings \"NaN\", \"Infinity\", \"-Infinity\".")
    add_source_arguments(parser)
    parser.add_argument("--head", type=int, default=DEFAULT_HEAD, metavar="N",
                        help=f"records to show (default {DEFAULT_HEAD})")
    parser.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, metavar="N",
                        help=f"records to infer the schema from when there is no manifest, spread over the files "
                             f"(and more while a feature has no value; default {DEFAULT_SAMPLE}, as spark.read "
                             f"and read_batches)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="processes for counting records without a manifest (default: one per file, "
                             "at most the CPU count; one for sources under 32 MB)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    if args.head < 0 or args.sample < 0:
        return exits.fail("inspect", "--head and --sample must be >= 0")
    try:
        source = resolve_source(args.source, compression=args.compression)
        info = inspect_source(source, head=args.head, sample=args.sample, workers=args.workers)
    except (OSError, ValueError, TypeError) as e:  # a corrupt record: 1; cannot read the source: 2
        return exits.report("inspect", e)
    if args.json:
        print(json.dumps(info, ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(render_text(info))
    return exits.OK
