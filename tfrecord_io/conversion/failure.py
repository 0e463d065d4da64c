"""How a conversion that started fails: :class:`ConversionError`, and the worker's own words.

Spark and Beam report a failed task by wrapping the Python worker's exception in their own
traceback (a Py4J ``Py4JJavaError`` with Java frames; a Beam runner's ``RuntimeError`` with its
bundle processing frames), so the line a user needs -- ``ValueError: data.csv.gz: truncated at
byte 1048576`` -- sits in the middle of a few hundred lines.  :func:`worker_error` finds it, once
for every engine.
"""

from __future__ import annotations

import re

__all__ = ["ConversionError", "worker_error"]


class ConversionError(RuntimeError):
    """The conversion started and failed (a task, a worker, the commit): exit status 1."""


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
