"""Replacing an output without destroying it first: what ``--overwrite`` may remove, and a commit
that can be undone.

``--overwrite`` never deletes the previous output before the new one is complete:

1. **At the start** (:func:`tfrecord_io.storage.output.check_output`) the previous output is
   *confirmed* (:func:`previous_entries`): every entry of the directory must be one the output
   contract names and the files themselves confirm -- shard names listed in its ``_manifest.json``
   with matching sizes, reject files listed there, record indexes (``_index/``) of listed shards,
   and the split or partition directories that manifest names, each holding only files that its
   manifests list with matching sizes.  Anything else refuses the overwrite before a job starts,
   naming it: a file no conversion wrote, or a manifest that claims what its files do not
   confirm (tampered).  Nothing is deleted then.  On local disk the directories to be moved and
   removed are checked for permission too (:func:`check_removable`), so a previous output the
   user can remove only in part is refused at the start, untouched.
2. **The job** writes the new output under ``_temporary/`` beside the previous one, which stays
   readable all the while.
3. **The commit** (:class:`Commit`) confirms the previous output again, moves it aside into
   ``_temporary/_previous/`` (``_SUCCESS`` first, then ``_manifest.json``: a reader never takes a
   half-moved output for a complete one), moves the new files in, writes the new manifest and
   ``_SUCCESS``, and only then deletes ``_temporary/`` and the previous output with it.  Every
   step is a rename or a new file, written down as it is made: a failure at any step undoes the
   steps made so far in reverse, so the previous output is back in place, whole, and the error
   says so; if the undo itself fails, the error says exactly where each part is.  A previous
   output that cannot be deleted once the new one is committed is left under
   ``_temporary/_previous/``, with one warning naming it.
4. A run **killed** during its commit leaves ``_temporary/_previous/`` with its dead lease: the
   next run with ``--overwrite`` finishes the replacement (the refusal without it says so).
"""

from __future__ import annotations

import logging
import os
import stat

from tfrecord_io.storage import fs, lease
from tfrecord_io.storage.index import DALI_DIR, INDEX_DIR, INDEX_SUFFIX
from tfrecord_io.storage.manifest import MANIFEST, REJECTS, SHARD_NAME, STAGING, SUCCESS, read_manifest

log = logging.getLogger(__name__)

__all__ = ["PREVIOUS", "Commit", "CommitError", "check_removable", "previous_entries"]

PREVIOUS = "_previous"  # under _temporary/: the previous output, set aside during a commit


def _name(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1]


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


class _Confirm:
    """The walk of :func:`previous_entries`: what is confirmed, and what is not (``foreign``: no
    conversion wrote it; ``tampered``: a manifest claims it, the files do not confirm it)."""

    def __init__(self):
        self.foreign: list[str] = []
        self.tampered: list[str] = []

    def listed_files(self, manifest: dict, where: str) -> dict[str, int]:
        """``{path relative to the manifest's directory: bytes}`` of the manifest's shards."""
        files = manifest.get("files") or []
        out = {}
        if not isinstance(files, list):
            self.tampered.append(f"{where}: 'files' is not a list")
            return out
        for entry in files:
            if not (isinstance(entry, dict) and isinstance(entry.get("path"), str)
                    and isinstance(entry.get("bytes"), int)):
                self.tampered.append(f"{where}: a 'files' entry without a path and a size")
                continue
            out[entry["path"]] = entry["bytes"]
        return out

    def shard(self, uri: str, rel: str, listed: dict[str, int]) -> None:
        """A shard-named file: confirmed when its manifest lists it with its size."""
        if rel not in listed:
            self.foreign.append(f"{rel} (a shard name its manifest does not list)")
            return
        size = fs.size(uri)
        if size != listed[rel]:
            self.tampered.append(f"{rel} is {size} bytes, its manifest says {listed[rel]}")

    def rejects(self, uri: str, manifest: dict | None) -> None:
        listed = {r.get("path") for r in (manifest or {}).get("rejects") or [] if isinstance(r, dict)}
        for entry in fs.ls(uri):
            rel = f"{REJECTS}/{_name(entry)}"
            if rel not in listed:
                self.foreign.append(f"{rel} (not a reject file its manifest lists)")

    def index(self, uri: str, shards: set[str], rel_dir: str = INDEX_DIR) -> None:
        """``_index/<shard>.idx`` and ``_index/dali/<shard>.idx`` (``tfrecord-io index``), of listed shards."""
        for entry in fs.ls(uri):
            name = _name(entry)
            if name == DALI_DIR and rel_dir == INDEX_DIR and fs.isdir(entry):
                self.index(entry, shards, f"{INDEX_DIR}/{DALI_DIR}")
            elif not (name.endswith(INDEX_SUFFIX) and name[:-len(INDEX_SUFFIX)] in shards):
                self.foreign.append(f"{rel_dir}/{name} (not the index of a shard the manifest lists)")

    def output_dir(self, uri: str, prefix: str, manifest: dict | None, listed: dict[str, int],
                   children: dict[str, object]) -> None:
        """The entries of one output directory (the top, a split or a partition).  ``listed``: its
        shards, relative to the top; ``children``: the directories it may hold, ``name -> a walk``."""
        shards = {p.rpartition("/")[2] for p in listed if p.rpartition("/")[0] == prefix.rstrip("/")}
        for entry in fs.ls(uri):
            name = _name(entry)
            rel = prefix + name
            if name in (MANIFEST, SUCCESS) or (name == STAGING and not prefix):
                continue
            if name == REJECTS and not prefix and fs.isdir(entry):
                self.rejects(entry, manifest)
            elif name == INDEX_DIR and fs.isdir(entry):
                self.index(entry, shards)
            elif SHARD_NAME.fullmatch(name) and not fs.isdir(entry):
                self.shard(entry, rel, listed)
            elif name in children and fs.isdir(entry):
                children[name](entry, rel + "/")
            else:
                self.foreign.append(rel + ("/" if fs.isdir(entry) else ""))


def _named(manifest: dict, key: str) -> list:
    """The names a manifest's ``splits`` or ``partitions`` holds (its keys; [] for anything else)."""
    value = manifest.get(key) or {}
    return list(value) if isinstance(value, (dict, list)) else []


def previous_entries(output: str, *, interrupted: bool = False) -> list[str]:
    """The entries of ``output`` (URIs, ``_temporary`` left out) that the previous conversion wrote
    there and its files confirm (module doc); FileExistsError naming what is not.

    ``interrupted``: ``_temporary/`` holds the lease of a run of ours that did not finish (a
    commit killed after it set the previous manifest aside): with no manifest to confirm them,
    shard names, ``_rejects/``, ``_index/`` and ``_SUCCESS`` are taken by name; otherwise shard
    files that no manifest lists are refused."""
    entries = [e for e in fs.ls(output) if _name(e) != STAGING]
    if not entries:
        return []
    names = {_name(e) for e in entries}
    check = _Confirm()
    if MANIFEST not in names:
        for entry in entries:
            name = _name(entry)
            ours = name in (SUCCESS, REJECTS, INDEX_DIR) or SHARD_NAME.fullmatch(name)
            if not (ours and interrupted):
                check.foreign.append(name + ("/" if fs.isdir(entry) else "") +
                                     ("" if not ours else " (no _manifest.json lists it)"))
        _raise(output, check)
        return entries
    try:
        manifest = read_manifest(output)
    except ValueError as e:
        raise FileExistsError(f"output {output}: its {MANIFEST} is not one a conversion wrote ({e}); --overwrite "
                              f"removes only an output its manifest describes: remove it yourself or choose "
                              f"another --output") from e
    listed = check.listed_files(manifest, MANIFEST)
    children: dict[str, object] = {}
    for split in _named(manifest, "splits"):
        if not isinstance(split, str) or not split or "/" in split or split.startswith((".", "_")):
            check.tampered.append(f"{MANIFEST} names a split {split!r}")
            continue
        children[split] = lambda uri, rel, split=split: _split(check, uri, rel, split)
    tree: dict = {}
    for d in _named(manifest, "partitions"):
        parts = d.split("/") if isinstance(d, str) else []
        if not parts or any(not p or "=" not in p or p.startswith((".", "_")) for p in parts):
            check.tampered.append(f"{MANIFEST} names a partition {d!r} that is not <column>=<value>/...")
            continue
        node = tree
        for p in parts:
            node = node.setdefault(p, {})
        node[None] = True  # a partition's own directory (it holds shards)
    for name, sub in tree.items():
        children[name] = lambda uri, rel, sub=sub: _partition(check, uri, rel, sub, listed)
    for claimed in sorted(children):
        if claimed not in names:
            continue  # claimed but absent: nothing to remove
        if not fs.isdir(fs.join(output, claimed)):
            check.tampered.append(f"{claimed} (its manifest names a directory; it is a file)")
            del children[claimed]
    check.output_dir(output, "", manifest, listed, children)
    _raise(output, check)
    return entries


def _split(check: _Confirm, uri: str, rel: str, name: str) -> None:
    """A split directory: a complete output of its own, whose manifest names this split."""
    try:
        manifest = read_manifest(uri)
    except (FileNotFoundError, ValueError):
        check.tampered.append(f"{rel} (its manifest names a split here, but it holds no {MANIFEST} of one)")
        return
    if (manifest.get("split") or {}).get("name") != name:
        check.tampered.append(f"{rel} (its manifest names a split here; its own {MANIFEST} is not that split's)")
        return
    listed = {rel + p: size for p, size in check.listed_files(manifest, rel + MANIFEST).items()}
    check.output_dir(uri, rel, None, listed, {})


def _partition(check: _Confirm, uri: str, rel: str, node: dict, listed: dict[str, int]) -> None:
    """A directory on the way to a partition (``year=2024/``) or a partition itself: only the
    directories the manifest names, and in a partition its shards the top manifest lists."""
    children = {k: (lambda u, r, sub=v: _partition(check, u, r, sub, listed)) for k, v in node.items() if k}
    if node.get(None):
        try:
            own = read_manifest(uri)
        except (FileNotFoundError, ValueError):
            own = {}
        if "partition" not in own:
            check.tampered.append(f"{rel} (its manifest names a partition here, but it holds no {MANIFEST} of one)")
            return
        check.output_dir(uri, rel, None, listed, children)
        return
    for entry in fs.ls(uri):
        name = _name(entry)
        if name in children and fs.isdir(entry):
            children[name](entry, rel + name + "/")
        else:
            check.foreign.append(rel + name)


def _raise(output: str, check: _Confirm) -> None:
    if check.tampered:
        raise FileExistsError(
            f"output {output}: its manifest claims what its files do not confirm ({_shown(check.tampered)}): it "
            f"looks tampered with, and --overwrite removes only what a conversion wrote and its files confirm; "
            f"remove it yourself or choose another --output")
    if check.foreign:
        raise FileExistsError(
            f"output {output} holds files that no conversion wrote ({_shown(check.foreign)}); --overwrite only "
            f"replaces a previous conversion's output: choose another --output or remove them yourself")


def check_removable(output: str, entries: list[str]) -> None:
    """On local disk: PermissionError naming the first of ``entries`` (and what lies below them)
    that this user cannot move aside and remove (a rename needs write on the parent, and on a
    moved directory for its ``..``; a removal needs write on every directory it empties; in a
    sticky directory, only its owner or the entry's may move an entry).  HDFS checks at the commit,
    which undoes itself on failure."""
    if fs.is_hdfs(output) or os.geteuid() == 0:
        return
    top = fs.local_path(output)
    if not os.access(top, os.W_OK | os.X_OK):
        raise PermissionError(f"--overwrite must move the previous output's files, and {top} is not writable "
                              f"by you; the previous output is untouched")
    top_st = os.stat(top)
    for entry in entries:
        path = fs.local_path(entry)
        st = os.lstat(path)
        if top_st.st_mode & stat.S_ISVTX and os.geteuid() not in (top_st.st_uid, st.st_uid):
            raise PermissionError(f"--overwrite cannot move the previous output's {path} (owner uid {st.st_uid}) "
                                  f"out of {top}, a sticky directory (mode {stat.filemode(top_st.st_mode)}) you do "
                                  f"not own; the previous output is untouched: remove it as its owner, or choose "
                                  f"another --output")
        if not stat.S_ISDIR(st.st_mode):
            continue
        for directory, subdirs, _ in os.walk(path):
            if not os.access(directory, os.W_OK | os.X_OK):
                st = os.stat(directory)
                raise PermissionError(
                    f"--overwrite cannot remove the previous output's {directory} (owner uid {st.st_uid}, mode "
                    f"{stat.filemode(st.st_mode)}): you may not write it; the previous output is untouched: remove "
                    f"it as its owner, or choose another --output")


class CommitError(RuntimeError):
    """A commit that failed; it was taken back (or the message says exactly what is where)."""


class Commit:
    """One commit into ``output``, written down step by step so that it can be undone (module doc).

    ``set_aside()`` moves the previous output into ``_temporary/_previous/``; ``rename``,
    ``makedirs`` and ``write`` make the new output; ``undo()`` takes every step back, in reverse;
    ``finish()`` deletes ``_temporary/`` (the previous output with it) once ``_SUCCESS`` is written.
    As a context manager, an exception inside undoes the commit and is raised again, saying so.
    """

    def __init__(self, output: str):
        self.output = output
        self.aside = fs.join(output, STAGING, PREVIOUS)
        self.steps: list[tuple] = []  # ("rename", src, dst) | ("mkdir", uri) | ("file", uri)
        self.had_previous = False

    def __enter__(self) -> "Commit":
        return self

    def __exit__(self, kind, error, tb) -> bool:
        if error is None or not isinstance(error, Exception):
            return False
        undone, left = self.undo()
        cause = _cause(error)
        if left:
            raise CommitError(
                f"output {self.output}: the commit failed ({cause}), and taking it back failed too: "
                + "; ".join(left) + f". The new output's files are under {fs.join(self.output, STAGING)}/; move "
                f"each part named above back to where it came from, or rerun with --overwrite") from error
        raise CommitError(f"output {self.output}: the commit failed ({cause}) and was taken back: "
                          + ("the previous output is in place, as it was" if self.had_previous else "the output "
                             "holds nothing of this run") + "; nothing was committed") from error

    def set_aside(self) -> None:
        """Move the previous output (confirmed again) out of the way, ``_SUCCESS`` and the manifest first."""
        entries = previous_entries(self.output)
        if not entries:
            return
        self.had_previous = True
        check_removable(self.output, entries)
        self.makedirs(self.aside)
        first = {SUCCESS: 0, MANIFEST: 1}
        for entry in sorted(entries, key=lambda e: (first.get(_name(e), 2), _name(e))):
            self.rename(entry, fs.join(self.aside, _name(entry)))

    def rename(self, src: str, dst: str, mode: int | None = None) -> None:
        """Move ``src`` to ``dst``, given ``mode`` first (it is never seen in place with another)."""
        if mode is not None:
            fs.chmod(src, mode)
        fs.rename(src, dst)
        self.steps.append(("rename", src, dst))

    def makedirs(self, uri: str, mode: int | None = None) -> None:
        """Create ``uri`` and any missing parent below the output (with ``mode``), each written down."""
        missing = []
        cur = uri.rstrip("/")
        while cur.rstrip("/") != self.output.rstrip("/") and not fs.exists(cur):
            missing.append(cur)
            cur = cur.rsplit("/", 1)[0]
        for d in reversed(missing):
            fs.makedirs(d)
            self.steps.append(("mkdir", d))
            if mode is not None:
                fs.chmod(d, mode)

    def write(self, uri: str, data: bytes, mode: int | None = None) -> None:
        self.steps.append(("file", uri))
        with fs.open(uri, "wb") as f:
            f.write(data)
        if mode is not None:
            fs.chmod(uri, mode)

    def undo(self) -> tuple[list[tuple], list[str]]:
        """Take back every step, newest first: ``(the steps taken back, what could not be)``."""
        undone, left = [], []
        for step in reversed(self.steps):
            try:
                if step[0] == "rename":
                    fs.rename(step[2], step[1])
                elif step[0] == "mkdir":
                    fs.delete(step[1])  # (empty again once what went in has gone back)
                elif fs.exists(step[1]):
                    fs.delete(step[1])
                undone.append(step)
            except OSError as e:
                left.append(f"{step[2]} should go back to {step[1]} ({e.strerror or e})" if step[0] == "rename"
                            else f"{step[1]} is left over ({e.strerror or e})")
        self.steps = []
        return undone, left

    def finish(self) -> None:
        """After ``_SUCCESS``: end the lease, delete ``_temporary/`` and the previous output in it.
        What cannot be deleted stays there, with one warning (the new output is committed)."""
        staging = fs.join(self.output, STAGING)
        lease.release(self.output, ended=False)
        self.steps = []
        try:
            fs.delete(staging, recursive=True)
        except FileNotFoundError:
            pass
        except OSError as e:
            what = "the previous output's files (set aside under " + self.aside + ")" \
                if fs.exists(self.aside) else "the commit's staging"
            log.warning("output %s is committed, but %s could not be removed: %s; remove %s yourself",
                        self.output, what, e.strerror or e, staging)


def _cause(error: BaseException) -> str:
    """``error`` in a few words, naming its file: ``<path>: Permission denied``."""
    if isinstance(error, OSError) and error.strerror:
        where = " -> ".join(str(f) for f in (error.filename, error.filename2) if f is not None)
        return f"{where}: {error.strerror}" if where else error.strerror
    return str(error) or type(error).__name__
