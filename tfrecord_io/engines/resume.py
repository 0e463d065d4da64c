"""Resuming Keras training mid-epoch on :func:`~tfrecord_io.engines.tfdata.make_dataset` input.

``keras.callbacks.BackupAndRestore(save_freq=N)`` (Keras 3) saves the weights, the epoch and the
batch reached every N batches, but an interrupted run restarts that epoch from its first batch:
the batches trained before the save are trained on again, and the epoch's shuffle is not the
one the first run had (a new process, a new iterator).  :class:`BackupAndRestore` is that
callback plus the loader's side: told the dataset (or :func:`~tfrecord_io.engines.tfdata.input_fn`)
that ``fit`` reads, it starts each epoch's iterator at that epoch -- its file order and shuffles
are those of the epoch number, in any process -- and, after a restart, leaves out the batches the
saved state has already trained on::

    ds = make_dataset(source, batch_size=1024, seed=7)          # num_epochs=1: one iterator per epoch
    backup = BackupAndRestore("/ckpt/backup", data=ds, save_freq=500)
    model.fit(ds, epochs=10, callbacks=[backup])                 # killed at any point, run again: resumes

So across a kill and a restart every record of each epoch is trained on exactly once.  It needs
a dataset with ``num_epochs=1`` (Keras makes one iterator per epoch) and a ``seed`` (or an
``input_fn``, whose pipelines share one), and ``fit`` without ``steps_per_epoch``.  Skipping the
batches of the interrupted epoch reads them without parsing them (``shuffle="global"``: without
reading them either).
"""

from __future__ import annotations

import json

import keras
from keras.src.utils import file_utils  # what keras.callbacks.BackupAndRestore itself reads and writes with

from tfrecord_io.engines.tfdata import LoaderResume

__all__ = ["BackupAndRestore"]


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """``keras.callbacks.BackupAndRestore`` that also resumes the interrupted epoch at its next batch.

    ``data``: what ``fit`` is given, made by ``make_dataset`` or ``input_fn`` (anything with
    ``loader_resume``); the other arguments are Keras' (``backup_dir``, ``save_freq``,
    ``double_checkpoint``, ``delete_checkpoint``).
    """

    def __init__(self, backup_dir, data, save_freq="epoch", **kwargs):
        super().__init__(backup_dir, save_freq=save_freq, **kwargs)
        control = getattr(data, "loader_resume", None)
        if not isinstance(control, LoaderResume):
            raise TypeError(f"data must be a dataset of make_dataset() or an input_fn() (they carry loader_resume), "
                            f"got {type(data).__name__}")
        self._control = control
        self._resume_epoch, self._resume_skip = 0, 0

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)  # the weights, and model._initial_epoch: the epoch saved in
        self._resume_epoch, self._resume_skip = self.model._initial_epoch or 0, 0
        if isinstance(self.save_freq, int) and file_utils.exists(self._training_metadata_path):
            with file_utils.File(self._training_metadata_path, "r") as f:
                saved = json.loads(f.read())
            # A save every N batches records the last batch done (its index); at an epoch's end
            # nothing is saved, so a saved batch is always within its epoch.
            self._resume_skip = int(saved.get("batch", -1)) + 1
            per_epoch = self._control.batches_per_epoch
            if per_epoch is not None and self._resume_skip >= per_epoch:  # saved at its last batch
                self._resume_epoch, self._resume_skip = self._resume_epoch + 1, 0
                self.model._initial_epoch = self._resume_epoch

    def on_epoch_begin(self, epoch, logs=None):
        self._control.start_epoch(epoch, self._resume_skip if epoch == self._resume_epoch else 0)
        super().on_epoch_begin(epoch, logs)
