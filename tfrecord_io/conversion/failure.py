"""How a conversion that started fails: :class:`ConversionError`, and the worker's own words.

Spark and Beam report a failed task by wrapping the Python worker's exception in their own
traceback (a Py4J ``Py4JJavaError`` with Java frames; a Beam runner's ``RuntimeError`` with its
bundle processing frames), so the line a user needs -- ``ValueError: data.csv.gz: truncated at
byte 1048576`` -- sits in the middle of a few hundred lines.  :func:`worker_error` finds it, once
for every engine.

A task of ours says it in one line itself: :func:`task_errors` wraps what the engine runs in a
worker, and any exception there leaves as :class:`TaskFailed` (raised ``from`` the original, whose
traceback the worker's log keeps) carrying :func:`cause_line` -- the cause and the file, e.g. ``no
space left on device writing out/_temporary/.../part-00000-of-00004.tfrecord``.  The driver gets
the worker's error as text only (the exception crosses a process boundary as its traceback), and
:func:`task_failure_line` takes that line back out of it.
"""

from __future__ import annotations

import errno
import re
from typing import Iterator

__all__ = ["ConversionError", "TaskFailed", "cause_line", "task_errors", "task_failure_line", "worker_error",
           "worker_line"]


class ConversionError(RuntimeError):
    """The conversion started and failed (a task, a worker, the commit): exit status 1."""


class TaskFailed(RuntimeError):
    """A worker's error as one line, its cause and the file (:func:`cause_line`): what
    :func:`task_errors` raises in a task, ``from`` the original."""


#: How a worker's traceback text ends when a task of ours failed: the class as Python prints it.
_TASK_FAILED = f"{TaskFailed.__module__}.{TaskFailed.__qualname__}: "
#: The exceptions whose message says it all; any other is named by its class too (``KeyError: 'x'``).
_SELF_EXPLAINING = (ValueError, RuntimeError, OSError)


def cause_line(e: BaseException) -> str:
    """One line naming what went wrong and the file: ``no space left on device writing PATH``,
    ``quota exceeded writing URI: The DiskSpace quota of /dir is exceeded: ...``, ``Permission
    denied: PATH``, or the message of our own errors (which name their file and line); a foreign
    exception with its class (``KeyError: 'x'``)."""
    if isinstance(e, OSError) and e.errno is not None and e.strerror:
        where = e.filename
        if e.errno == errno.ENOSPC:  # a write's: say which file it was writing
            text = "no space left on device" + (f" writing {where}" if where is not None else "")
        elif e.errno == errno.EDQUOT:  # HDFS says which quota of which directory (storage.fs)
            text = "quota exceeded" + (f" writing {where}" if where is not None else "") + f": {e.strerror}"
        else:
            text = e.strerror + (f": {where}" if where is not None else "")
            if e.filename2 is not None:
                text += f" -> {e.filename2}"
    else:
        message = str(e)
        if isinstance(e, _SELF_EXPLAINING) and message:
            text = message
        else:
            text = f"{type(e).__name__}: {message}" if message else type(e).__name__
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


def task_errors(items: Iterator) -> Iterator:
    """``items`` (what a task function yields), with any exception raised as :class:`TaskFailed`
    (:func:`cause_line`) from the original; a TaskFailed from a nested task function passes as it is."""
    try:
        yield from items
    except TaskFailed:
        raise
    except Exception as e:  # noqa: BLE001 - every failure of a task leaves as its one line
        raise TaskFailed(cause_line(e)) from e


def task_failure_line(text: str) -> str | None:
    """The line :class:`TaskFailed` carried, out of a worker's traceback text (the last one when
    several tasks failed); None when no task of ours raised it (the worker died, or failed before
    our code ran: the engine's own error then)."""
    found = None
    for line in text.splitlines():
        at = line.find(_TASK_FAILED)
        if at >= 0:
            found = line[at + len(_TASK_FAILED):].strip()
    return found or None


def worker_line(text: str) -> str:
    """One line out of a Python worker's error text: :class:`TaskFailed`'s, else what
    :func:`worker_error` finds (the worker's last exception line: it failed before our code ran)."""
    return task_failure_line(text) or "; ".join(worker_error(RuntimeError(text)).splitlines())


_PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exceeded|Interrupt)\b:?")
_NOT_PYTHON = ("org.", "java.", "py4j.", "scala.", "RuntimeError: Pipeline")


def worker_error(e: BaseException) -> str:
    """The root cause in an engine's error: the file Spark was reading (when it says), then the
    last exception line of a Python worker; without one, the last Java ``Caused by``; without
    that, the first lines of the text."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.lstrip().startswith(("at ", "... ", "File \""))]
    if not lines:
        return type(e).__name__
    picked = [ln for ln in lines if "Encountered error while reading file" in ln][:1]
    python = [ln for ln in lines if _PYTHON_ERROR.match(ln) and not ln.startswith(_NOT_PYTHON)]
    causes = [ln for ln in lines if ln.startswith("Caused by:")]
    if python:
        picked.append(python[-1])
    elif causes:
        picked.append(causes[-1])
    if not picked:
        picked = [ln for ln in lines if not ln.startswith("An error occurred while calling")][:3] or lines[:1]
    return "\n".join(dict.fromkeys(picked))
