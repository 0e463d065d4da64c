"""How the diagnostic commands (``inspect``, ``verify``, ``stats``) read a SOURCE: its arguments,
its resolution, and a pool of worker processes over its files.

A SOURCE is an output directory, any directory, a glob or a file, local or ``hdfs://``, with a
file's compression from the manifest, ``--compression``, its extension or its first bytes:
:mod:`tfrecord_io.storage.sources` resolves it (as for every reader); the commands look at
anything, committed or not, so they resolve with every file's size and sniff compression.

:func:`map_files` runs a function over the files, in this process for small sources and in
``spawn``-ed processes (one per file, at most the CPU count) otherwise, with a progress bar.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Sequence

from tfrecord_io.commands.progress import Progress, progress_enabled
from tfrecord_io.storage import sources
from tfrecord_io.storage.sources import Source, SourceFile

__all__ = ["PARALLEL_MIN_BYTES", "add_source_arguments", "default_workers", "map_files", "resolve_source"]


def resolve_source(uri: str, *, compression: str | None = None, schema_uri: str | None = None) -> Source:
    """A SOURCE as the diagnostic commands see it: anything, committed or not, with every file's
    size, and compression sniffed where the name implies none (:mod:`tfrecord_io.storage.sources`)."""
    return sources.resolve_source(uri, compression=compression, schema=schema_uri or None, sniff=True, sizes=True)


# ---------------------------------------------------------------------------------------
# Work over files: inline, or a process pool, with a progress bar
# ---------------------------------------------------------------------------------------
_WORKER_QUEUE = None


def _init_worker(queue) -> None:
    global _WORKER_QUEUE
    _WORKER_QUEUE = queue


class _QueueReporter:
    """Batches byte counts from a worker to the parent (at most one message per MiB)."""

    def __init__(self, queue):
        self.queue, self.pending = queue, 0

    def __call__(self, n: int) -> None:
        self.pending += n
        if self.pending >= 1 << 20:
            self.flush()

    def flush(self) -> None:
        if self.pending and self.queue is not None:
            self.queue.put(self.pending)
        self.pending = 0


def _run_in_worker(fn: Callable, item: Any, context: Any) -> Any:
    reporter = _QueueReporter(_WORKER_QUEUE)
    try:
        return fn(item, context, reporter if _WORKER_QUEUE is not None else None)
    finally:
        reporter.flush()


#: Below this many bytes in all, work runs in this process: starting workers would cost more.
PARALLEL_MIN_BYTES = 32 << 20


def default_workers(files: Sequence[SourceFile]) -> int:
    """One process per file, at most the CPU count; one in all for small sources."""
    if sum(f.size or 0 for f in files) < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(len(files), os.cpu_count() or 1))


def map_files(fn: Callable[[SourceFile, Any, Callable[[int], None] | None], Any], files: Sequence[SourceFile],
              *, context: Any = None, workers: int | None = None, label: str = "reading",
              progress: bool | None = None) -> list:
    """``[fn(file, context, report) for file in files]``, in a process pool when ``workers > 1``
    (default: :func:`default_workers`).

    ``fn`` must be a module-level function and ``context`` picklable (both go to
    ``spawn``-ed workers, which import no TensorFlow); ``report(nbytes)`` feeds the progress
    bar and is None when no bar is drawn.  Results come back in the order of ``files``; the first exception raised
    by any ``fn`` is re-raised here (the rest of the work is cancelled).
    """
    workers = default_workers(files) if workers is None else max(1, int(workers))
    show = progress_enabled() if progress is None else progress
    total = sum(f.size or 0 for f in files)
    with Progress(label, total, len(files), enabled=show) as bar:
        if workers == 1 or len(files) <= 1:
            results = []
            for f in files:
                results.append(fn(f, context, bar.advance if show else None))
                bar.file_done()
            return results
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue() if show else None
        results: list = [None] * len(files)
        with ProcessPoolExecutor(max_workers=min(workers, len(files)), mp_context=ctx,
                                 initializer=_init_worker, initargs=(queue,)) as pool:
            futures = {pool.submit(_run_in_worker, fn, f, context): i for i, f in enumerate(files)}
            pending = set(futures)
            try:
                while pending:
                    done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                    if queue is not None:
                        _drain(queue, bar)
                    for fut in done:
                        results[futures[fut]] = fut.result()
                        bar.file_done()
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise
            if queue is not None:
                _drain(queue, bar)
        return results


def _drain(queue, bar: Progress) -> None:
    import queue as queue_module

    while True:
        try:
            bar.advance(queue.get_nowait())
        except queue_module.Empty:
            return


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE",
                        help="an output directory, any directory of TFRecord files, a glob, or one file; "
                             "local path, file:// or hdfs://")
    parser.add_argument("--compression", choices=("auto", "none", "gzip", "zlib"), default="auto",
                        help="compression of files without a manifest (default: from the extension, "
                             "else sniffed from the first bytes)")
