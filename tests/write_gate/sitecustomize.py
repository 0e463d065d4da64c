"""A gate in the middle of a task's shard write, for the fault tests (on PYTHONPATH only there).

With ``TFRECORD_IO_TEST_WRITE_GATE=<local dir>`` set, the first write of a TFRecord shard under
``_temporary/`` in each process, once its first bytes went to the open stream, drops
``<dir>/reached-<pid>`` and waits while ``<dir>/closed`` exists (at most 300 s). The test makes its
faults happen while a write stream is open, then opens the gate: no race with a job that is fast.
"""

import os

_GATE = os.environ.get("TFRECORD_IO_TEST_WRITE_GATE")

if _GATE:
    import time

    from tfrecord_io.storage import fs as _fs

    _open = _fs.open
    _held = []

    class _Gated:
        def __init__(self, f):
            self._f = f

        def write(self, data):
            n = self._f.write(data)
            if not _held:
                _held.append(True)
                open(os.path.join(_GATE, f"reached-{os.getpid()}"), "w").close()
                deadline = time.monotonic() + 300
                while os.path.exists(os.path.join(_GATE, "closed")) and time.monotonic() < deadline:
                    time.sleep(0.1)
            return n

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._f.__exit__(*exc)

    def _gated_open(uri, mode="rb"):
        f = _open(uri, mode)
        name = uri.rsplit("/", 1)[-1]
        if ("w" in mode and f"/{_fs_temporary()}/" in uri and name.startswith("part-")
                and not name.endswith(".idx") and not _held):
            return _Gated(f)
        return f

    def _fs_temporary():
        from tfrecord_io.storage.output import TEMPORARY

        return TEMPORARY

    _fs.open = _gated_open
