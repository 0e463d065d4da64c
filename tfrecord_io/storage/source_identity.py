"""What a source's data is, as a small JSON-able value, and what changed between two of them.

A saved training state (an iterator's checkpoint, a Keras backup) says "epoch 3, batch 41" of
*some* data.  Restored over other data -- a shard added, rewritten or removed, another
conversion written to the same directory -- the same positions name other records: an epoch
that repeats some records and never shows others, with no error.  So the loader keeps the
identity of the data beside every saved position and refuses to restore against another one,
naming what changed.

The identity holds, per file (by its name relative to the source): the size in bytes and the
record count the manifest gives (None where there is no manifest), and the manifest's
``created`` time.  A file without a manifest is known by its name only (the loader does not look
up sizes it does not need); ``tfrecord-io index`` counts are used where a file has them.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from tfrecord_io.storage.sources import Source

__all__ = ["as_text", "changes", "describe_changes", "identity"]

#: File names a change description lists before "and N more".
_SHOWN = 3


def identity(src: Source) -> dict[str, Any]:
    """The identity of ``src``'s data: ``{"created": ..., "files": [[name, bytes, records], ...]}``."""
    created = src.manifest.raw.get("created") if src.manifest is not None else None
    return {"created": created,
            "files": [[f.name, f.bytes, f.records] for f in src.files]}


def as_text(ident: Mapping[str, Any]) -> str:
    """An identity as canonical JSON text (equal data, equal text)."""
    return json.dumps(ident, sort_keys=True, separators=(",", ":"))


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def changes(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between two identities, one phrase per kind of change ([] when equal)."""
    try:
        old = {str(name): (nbytes, records) for name, nbytes, records in saved["files"]}
        new = {str(name): (nbytes, records) for name, nbytes, records in now["files"]}
    except (KeyError, TypeError, ValueError) as e:
        return [f"the saved state's description of its data is not readable ({e})"]
    found = []
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    if added:
        found.append(f"{len(added)} file(s) added ({_names(added)})")
    if removed:
        found.append(f"{len(removed)} file(s) removed ({_names(removed)})")
    rewritten = []
    for name in sorted(set(old) & set(new)):
        (ob, orec), (nb, nrec) = old[name], new[name]
        if ob != nb or orec != nrec:
            was = ", ".join(p for p in (f"{ob:,} bytes" if ob is not None else "",
                                         f"{orec:,} records" if orec is not None else "") if p)
            is_ = ", ".join(p for p in (f"{nb:,} bytes" if nb is not None else "",
                                         f"{nrec:,} records" if nrec is not None else "") if p)
            rewritten.append(f"{name} ({was or '?'} -> {is_ or '?'})")
    if rewritten:
        found.append(f"{len(rewritten)} file(s) rewritten: {_names(rewritten)}")
    if not found and saved.get("created") != now.get("created"):
        found.append(f"the output was written again (manifest created {saved.get('created')}, "
                     f"now {now.get('created')})")
    if not found and [f[0] for f in saved["files"]] != [f[0] for f in now["files"]]:
        found.append("the files are listed in another order")
    return found


def describe_changes(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """:func:`changes` as one phrase ("2 file(s) added (...); ..."), or None when the data is the same."""
    found = changes(saved, now)
    return "; ".join(found) if found else None
