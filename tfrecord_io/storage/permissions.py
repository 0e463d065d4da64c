"""Who may read an output: its permissions follow a umask, and its rejects follow the input.

Hadoop users set what their files may be read by with a umask (``fs.permissions.umask-mode``,
``022`` by default: files ``rw-r--r--``, directories ``rwxr-xr-x``); a conversion takes one too,
``--umask`` (octal, as Hadoop's), for everything it writes: shards, manifests, ``_SUCCESS``, the
output's directories.  Without it, local outputs take the process's umask (as every file this
process creates does) and HDFS outputs Hadoop's default, ``022`` (hdfs-native applies none).

The rejects quote input rows as the input has them, so they are never more readable than the
input: a class of users (group, others) may read them only where it may read *every* input file
(its read bit, and the search bit of the directory that holds it).  An input ``0600`` in a ``0700``
directory gives rejects ``0600`` in a ``_rejects/`` of ``0700`` whatever the umask.  The staging
directory (``_temporary/``, where task attempts write rejects and shards before the commit) is
made no more open than that from the start.

Applied by the commit (:mod:`tfrecord_io.storage.output`): every file gets its mode before it is
renamed into place, every directory the commit creates as it creates it.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from typing import Iterable

from tfrecord_io.storage import fs

__all__ = ["HADOOP_DEFAULT_UMASK", "Permissions", "for_inputs", "parse_umask", "process_umask"]

HADOOP_DEFAULT_UMASK = 0o022  # fs.permissions.umask-mode's default
_OCTAL = re.compile(r"[0-7]{3,4}")


def parse_umask(text: str, flag: str = "--umask") -> int:
    """``"027"`` -> ``0o027`` (ValueError naming ``flag`` for anything else: octal only, as Hadoop's
    ``fs.permissions.umask-mode`` is usually given)."""
    value = str(text).strip()
    if not _OCTAL.fullmatch(value) or int(value, 8) > 0o777:
        raise ValueError(f"{flag} {text!r}: expected an octal umask such as 022 or 077 (as Hadoop's "
                         f"fs.permissions.umask-mode)")
    return int(value, 8)


def process_umask() -> int:
    """This process's umask, read without changing it (Linux: /proc/self/status)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # (elsewhere: the classic read; a moment's race with threads creating files)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class Permissions:
    """The modes a conversion gives what it writes (module doc).  Picklable.

    umask: ``--umask``; None: the process's (local) or Hadoop's default (HDFS).
    readers: the classes that may read every input: ``0o700`` | ``0o070`` (group) | ``0o007`` (others).
    """

    umask: int | None = None
    readers: int = 0o777

    def _umask(self, uri: str) -> int:
        if self.umask is not None:
            return self.umask
        return HADOOP_DEFAULT_UMASK if fs.is_hdfs(uri) else process_umask()

    def file_mode(self, uri: str) -> int:
        return 0o666 & ~self._umask(uri)

    def dir_mode(self, uri: str) -> int:
        return 0o777 & ~self._umask(uri)

    def rejects_file_mode(self, uri: str) -> int:
        return self.file_mode(uri) & self.readers

    def rejects_dir_mode(self, uri: str) -> int:
        return self.dir_mode(uri) & self.readers

    def staging_mode(self, uri: str) -> int:
        """``_temporary/``: the rejects are written there first."""
        return self.rejects_dir_mode(uri)


def _readable_by(file_mode: int, dir_mode: int) -> int:
    """The classes that may read a file of ``file_mode`` in a directory of ``dir_mode``."""
    out = 0o700
    if file_mode & 0o040 and dir_mode & 0o010:
        out |= 0o070
    if file_mode & 0o004 and dir_mode & 0o001:
        out |= 0o007
    return out


def for_inputs(paths: Iterable[str], umask: int | None = None) -> Permissions:
    """The permissions of a conversion of the input files ``paths`` (module doc)."""
    readers = 0o777
    dirs: dict[str, int] = {}
    for path in paths:
        parent = posixpath.dirname(path.rstrip("/")) or "."
        if parent not in dirs:
            dirs[parent] = fs.permission(parent)
        readers &= _readable_by(fs.permission(path), dirs[parent])
    return Permissions(umask, readers)
