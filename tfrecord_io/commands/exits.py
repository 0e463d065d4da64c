"""The exit-status contract of every command and entry point, and its one error line.

====  ===========================================================================================
0     done
1     the work started and failed: a task or worker error, the commit, a corrupt record read
2     bad usage: arguments, the schema (or its features against the input's columns), an input or
      source that cannot be found or read, an output that exists or overlaps an input
3     problems found: more rows rejected than ``--max-reject-fraction`` allows (``convert``,
      nothing committed), or a check that failed (``verify``, ``stats``)
====  ===========================================================================================

Errors are one line on stderr, ``tfrecord-io <command>: error: <what, naming the file, and what to
do>`` (an entry point of its own, :class:`Program`, puts its own name first); ``--debug`` (where a
command has it) adds the traceback.  :func:`status_of` is the one mapping from an exception to a
status; :func:`message_of` says it; :func:`report` prints the line and returns the status.
"""

from __future__ import annotations

import sys
import traceback

__all__ = ["FAILED", "INTERRUPTED", "OK", "PROBLEMS", "Program", "USAGE", "error", "fail", "message_of", "report",
           "status_of"]

OK, FAILED, USAGE, PROBLEMS = 0, 1, 2, 3
INTERRUPTED = 130  # as a shell reports SIGINT


class Program(str):
    """A program's own name for its error lines where it is not a ``tfrecord-io`` command
    (``python -m tfrecord_io.beam``, ``to_tfrecord.py`` under spark-submit): its lines then begin as
    its usage errors do."""


def _prefix(command: str | None) -> str:
    if isinstance(command, Program):
        return str(command)
    return f"tfrecord-io {command}" if command else "tfrecord-io"


def error(command: str | None, message: str, *, kind: str = "error") -> None:
    """Print ``tfrecord-io <command>: error: <message>`` (or another ``kind``: ``warning``) on stderr."""
    print(f"{_prefix(command)}: {kind}: {message}", file=sys.stderr)


def fail(command: str | None, message: str, status: int = USAGE) -> int:
    """Print the error line; return ``status`` (default: bad usage)."""
    error(command, message)
    return status


def status_of(e: BaseException) -> int:
    """The exit status for an exception that ended a command (the table in the module doc)."""
    from tfrecord_io.conversion.failure import ConversionError
    from tfrecord_io.core.framing import CorruptRecordError
    from tfrecord_io.storage.output import RejectLimitExceeded

    if isinstance(e, RejectLimitExceeded):
        return PROBLEMS
    if isinstance(e, (ConversionError, CorruptRecordError)):
        return FAILED
    if isinstance(e, (ValueError, TypeError, OSError)):  # SchemaError and ColumnMismatch are ValueErrors
        return USAGE
    return FAILED


def message_of(e: BaseException) -> str:
    """``e`` as the error line says it: an OSError as ``<file>: <what>`` (its strerror alone where
    that names the file already), without Python's ``[Errno 13] ...: 'file'`` framing."""
    if isinstance(e, OSError) and e.strerror:
        name = e.filename
        if name is None or str(name) in e.strerror:
            return e.strerror
        return f"{name}: {e.strerror}"
    return str(e) or type(e).__name__


def report(command: str | None, e: BaseException, *, debug: bool = False) -> int:
    """Print the error line for ``e`` (its traceback first with ``debug``); return its exit status."""
    if debug:
        traceback.print_exception(e)
    error(command, message_of(e))
    return status_of(e)
