"""The loader's own errors first: what TensorFlow makes of an error raised inside the pipeline, undone.

An error raised by one of the loader's Python steps (a corrupt record, a manifest that lies, a
shard the HDFS cache cannot fetch) reaches the user as TensorFlow's op error, whose text starts
with TensorFlow's context -- ``{{function_node __wrapped__IteratorGetNext_output_types_1_device_
/job:localhost/...}} Error in user-defined function passed to MapDataset:9 transformation with
iterator: Iterator::Root::Prefetch::...`` -- then our line, then the Python traceback of the
step.  Logs that keep the first few hundred characters keep only the noise.

Iterating a dataset of :func:`~tfrecord_io.engines.loader.make_dataset` (``for batch in ds``,
``next(iter(ds))``) raises instead an error whose message *is* our line (the file, the byte
offset, what failed) followed by what to do, with TensorFlow's error as its ``__cause__``.  Its
class is both ours and TensorFlow's (``CorruptRecordError`` and ``tf.errors.InvalidArgumentError``,
say), so ``except tf.errors.OpError`` and ``except CorruptRecordError`` both still catch it, and
``.message`` / ``.offset`` / ``.path`` are there.  Inside ``model.fit`` (Keras runs the iterator in
a ``tf.function``) TensorFlow raises its own error, our line right after its ``{{function_node}}``
tag.  Errors that are not the loader's (TensorFlow's parser refusing a record) pass unchanged.
"""

from __future__ import annotations

import builtins
import functools
import re

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops, iterator_ops
from tensorflow.python.framework import ops

from tfrecord_io.core.framing import CorruptRecordError
from tfrecord_io.storage.fs import NameNodeUnreachableError


__all__ = ["LeadingErrorsDataset", "leading_error"]


#: The loader's exception classes, by the name TensorFlow's text gives them.
_OURS = {cls.__name__: cls for cls in (
    CorruptRecordError, NameNodeUnreachableError, builtins.FileNotFoundError, builtins.PermissionError,
    builtins.ConnectionError, builtins.TimeoutError, builtins.OSError, builtins.ValueError, builtins.TypeError)}

# "{{function_node ...}} [Error in user-defined function passed to X transformation with iterator: Y: ]Name: text"
_RAISED = re.compile(r"^(?:\{\{function_node [^}]*\}\}\s*)?(?:Failed to restore dataset iterator from checkpoint: )?"
                     r"(?:Error in user-defined function passed to \S+ transformation with iterator: \S+: )?"
                     r"(?P<name>[A-Za-z_]\w*): (?P<text>[^\n]*)")
_CORRUPT = re.compile(r"^(?P<path>.*): corrupt TFRecord at byte offset (?P<offset>\d+): (?P<check>[^:]+): "
                      r"(?P<detail>.*)$")


_ADVICE = {
    "CorruptRecordError": "`tfrecord-io verify {path}` lists every bad record; make_dataset(..., "
                          "on_corrupt=\"skip\") keeps the records before it and drops the rest of that file",
    "NameNodeUnreachableError": "check that the NameNode is up and HADOOP_CONF_DIR names it "
                                "(TFRECORD_IO_HDFS_TIMEOUT sets how long to wait)",
}


@functools.lru_cache(maxsize=None)
def _leading_class(ours: type, theirs: type) -> type:
    """One class that is both the loader's exception class and TensorFlow's op error class."""

    def __init__(self, op_error, message: str):  # noqa: N807 - a method of the class built here
        tf.errors.OpError.__init__(self, op_error.node_def, op_error.op, message, op_error.error_code)
        self.args = (message,)

    def __reduce__(self):  # noqa: N807 - pickles as TensorFlow's own error (the class is made here)
        return theirs, (self.node_def, self.op, self.message, self.error_code)

    return type(ours.__name__, (ours, theirs), {"__init__": __init__, "__reduce__": __reduce__,
                                                 "__str__": tf.errors.OpError.__str__,
                                                 "__module__": ours.__module__})


def leading_error(e: tf.errors.OpError) -> BaseException | None:
    """The error to raise instead of ``e``, leading with the loader's line (None: ``e`` is not ours)."""
    if isinstance(e, tf.errors.OutOfRangeError):
        return None
    m = _RAISED.match(e.message or "")
    if m is None or m["name"] not in _OURS:
        return None
    name, text = m["name"], m["text"]
    corrupt = _CORRUPT.match(text) if name == "CorruptRecordError" else None
    advice = _ADVICE.get(name)
    message = text
    if advice:
        message += "\n  " + advice.format(path=corrupt["path"] if corrupt else "PATH")
    message += f"\n  (raised inside the tf.data pipeline; TensorFlow's {type(e).__name__} is the cause)"
    lead = _leading_class(_OURS[name], type(e))(e, message)
    if corrupt:
        lead.path, lead.offset = corrupt["path"], int(corrupt["offset"])
        lead.check, lead.detail = corrupt["check"], corrupt["detail"]
    return lead


class _LeadingIterator(iterator_ops.OwnedIterator):
    """tf.data's eager iterator (checkpointable as it is), raising the loader's errors first."""

    def __next__(self):
        try:
            return super().__next__()
        except tf.errors.OpError as e:
            lead = leading_error(e)
            if lead is None:
                raise
            raise lead from e

    def get_next(self):
        return self.__next__()

    def _restore_from_tensors(self, restored_tensors):
        try:
            return super()._restore_from_tensors(restored_tensors)
        except tf.errors.OpError as e:  # e.g. restored against other data: the loader's line first
            lead = leading_error(e)
            if lead is None:
                raise
            raise lead from e


class LeadingErrorsDataset(dataset_ops.UnaryUnchangedStructureDataset):
    """``input_dataset`` itself (the same graph, no op added) whose eager iterators lead with the
    loader's errors.  Transformations (``.map``, ...) return TensorFlow's datasets, as always.

    ``length``: the cardinality to report where the graph's is unknown -- after
    ``prefetch_to_device``, whose copy to the device hides it (Keras reads it for an epoch's length).
    """

    def __init__(self, input_dataset: tf.data.Dataset, length: int | None = None):
        super().__init__(input_dataset, input_dataset._variant_tensor)  # noqa: SLF001 - tf.data's own pattern
        self._length = length

    def cardinality(self):
        if self._length is not None:
            return tf.constant(self._length, tf.int64)
        return super().cardinality()

    def __iter__(self):
        if tf.executing_eagerly() or ops.inside_function():  # as tf.data.Dataset.__iter__
            with ops.colocate_with(self._variant_tensor):
                return _LeadingIterator(self)
        return super().__iter__()
