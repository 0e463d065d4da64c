"""TensorFlow imported without its start-up lines, where the user has not chosen a log level.

Importing TensorFlow prints, from C++ and before ``TF_CPP_MIN_LOG_LEVEL`` applies, a dozen lines
(``All log messages before absl::InitializeLog()``, oneDNN, CUDA stubs, CPU features -- twice),
and on a machine without a GPU its first device probe logs ``E0000 ... failed call to cuInit``:
lines that look like failure and that a user of the loader can do nothing about.
:func:`import_tensorflow` is the one import of TensorFlow by the loader, ``keras_inputs``,
``BackupAndRestore`` and the commands: when TensorFlow is not imported yet and the user has not set
``TF_CPP_MIN_LOG_LEVEL``, it sets it (``1``, TensorFlow's warnings and errors stay; the commands
ask ``3``) and imports TensorFlow, and probes its devices, with file descriptor 2 pointed at
/dev/null.  A level the user set, or a TensorFlow the user imported first, is left as it is.
"""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["import_tensorflow", "native_stderr_to_devnull"]


@contextlib.contextmanager
def native_stderr_to_devnull():
    """Point file descriptor 2 at /dev/null for a while (what C++ code logs there is dropped)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def import_tensorflow(level: str = "1", *, command: bool = False):
    """``tensorflow``, imported quietly the first time (module doc); a failing import raises as usual.
    ``command``: for our commands, which set the level themselves (``commands.cli``): quiet whatever it is."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ and not command:
        import tensorflow as tf

        return tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", level)
    with native_stderr_to_devnull():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # the CUDA probe, whose "failed call to cuInit" is no failure
    return tf
