"""Resuming Keras training mid-epoch on :func:`~tfrecord_io.engines.loader.make_dataset` input.

``keras.callbacks.BackupAndRestore(save_freq=N)`` (Keras 3) saves the weights, the epoch and the
batch reached every N batches, but an interrupted run restarts that epoch from its first batch:
the batches trained before the save are trained on again, and the epoch's shuffle is not the
one the first run had (a new process, a new iterator).  :class:`BackupAndRestore` is that
callback plus the loader's side: told the dataset (or :func:`~tfrecord_io.engines.loader.input_fn`)
that ``fit`` reads, it starts each epoch's iterator at that epoch -- its file order and shuffles
are those of the epoch number, in any process -- and, after a restart, leaves out the batches the
saved state has already trained on::

    ds = make_dataset(source, batch_size=1024, seed=7)          # num_epochs=1: one iterator per epoch
    backup = BackupAndRestore("/ckpt/backup", data=ds, save_freq=500)
    model.fit(ds, epochs=10, callbacks=[backup])                 # killed at any point, run again: resumes

So across kills and restarts every record of each epoch is trained on exactly once: the resumed
epoch trains the batches after the saved one, every later epoch all of its batches (the dataset
declares its length, so Keras does not take the shortened resumed epoch for the length of every
epoch).  It needs a dataset with ``num_epochs=1`` (Keras makes one iterator per epoch) and a
``seed`` (or an ``input_fn``, whose pipelines share one), and ``fit`` without ``steps_per_epoch``.
Skipping the batches of the interrupted epoch reads them without parsing them
(``shuffle="global"``: without reading them either).

A save a kill cannot tear
-------------------------
Keras rewrites ``latest.weights.h5`` and then ``training_metadata.json`` in place: a kill during
the first leaves a file the restart cannot open, a kill between the two resumes newer weights at
an older batch.  Here each save is one unit, a directory ``state-NNNNNNNN`` holding the weights
and ``state.json`` (the epoch, the batches done, the weights' size and CRC32C, the identity of the
data), written under a temporary name, flushed to disk and renamed into place; the newest two
are kept.  A restart takes the newest state whose weights match their recorded size and CRC; one
that does not is passed over with a warning, and with none usable training starts over with one
warning line -- never a crash.  A state saved over other data (a shard added, rewritten or
removed since) stops the restart with one line naming what changed.

Under ``MultiWorkerMirroredStrategy`` (``data=`` an :func:`~tfrecord_io.engines.loader.input_fn`)
the chief alone writes the backup; ``backup_dir`` must be a directory every worker sees (a shared
filesystem), and after a restart every worker resumes from the chief's last save.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import warnings

import google_crc32c

from tfrecord_io.engines.quiet_tf import import_tensorflow

import_tensorflow()  # (before Keras imports it)
import keras  # noqa: E402

from tfrecord_io.engines.loader import LoaderResume
from tfrecord_io.storage import source_identity

__all__ = ["BackupAndRestore"]

log = logging.getLogger(__name__)

#: Complete states kept in the backup directory (the newest, and one before it).
KEEP_STATES = 2
_STATE = re.compile(r"^state-(\d{8})$")
_TMP_PREFIX = ".tmp-state-"
_WEIGHTS = "model.weights.h5"
_META = "state.json"
_FORMAT = 1
_RAN_OUT = "Your input ran out of data"


def _fsync(path: str, directory: bool = False) -> None:
    fd = os.open(path, (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)) if directory else os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _crc32c_of(path: str) -> str:
    crc = google_crc32c.Checksum()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            crc.update(block)
    return crc.hexdigest().decode()


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """``keras.callbacks.BackupAndRestore`` that resumes the interrupted epoch at its next batch,
    whose saves a kill cannot tear (see the module doc).

    ``data``: what ``fit`` is given, made by ``make_dataset`` or ``input_fn`` (anything with
    ``loader_resume``); ``backup_dir`` a local directory; ``save_freq``: ``"epoch"`` or every N
    batches; ``delete_checkpoint`` (default True): remove the backup when ``fit`` ends.  Keras'
    ``double_checkpoint`` is accepted and always on: the two newest states are kept.
    """

    def __init__(self, backup_dir, data, save_freq="epoch", delete_checkpoint=True, double_checkpoint=True):
        super().__init__(os.fspath(backup_dir), save_freq=save_freq, delete_checkpoint=delete_checkpoint,
                         double_checkpoint=double_checkpoint)
        control = getattr(data, "loader_resume", None)
        if not isinstance(control, LoaderResume):
            raise TypeError(f"data must be a dataset of make_dataset() or an input_fn() (they carry loader_resume), "
                            f"got {type(data).__name__}")
        if "://" in self.backup_dir and not self.backup_dir.startswith("file://"):
            raise ValueError(f"backup_dir must be a local directory (its saves are renamed into place), "
                             f"got {self.backup_dir}")
        self.backup_dir = self.backup_dir.removeprefix("file://")
        self._control = control
        self._resume_epoch, self._resume_skip = 0, 0
        self._epoch, self._offset = 0, 0      # the epoch being trained, and the batches left out of it
        self._filters = None                  # warnings filters while the resumed epoch runs

    # -- restoring --------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        if not self.model.built:
            raise ValueError(f"To use the BackupAndRestore callback, the model must be built before fit() "
                             f"(call it on a batch of data); {self.model.name} is not built")
        state = self._restore()
        self._resume_epoch, self._resume_skip = 0, 0
        if state is not None:
            epoch, done = int(state["epoch"]), int(state["batches_done"])
            per_epoch = self._control.batches_per_epoch
            if per_epoch is not None and done >= per_epoch:  # saved at the epoch's last batch
                epoch, done = epoch + 1, 0
            self._resume_epoch, self._resume_skip = epoch, done
            self.model._initial_epoch = epoch
            log.info("%s: resuming at epoch %d, batch %d (%s)", self.backup_dir, epoch, done, state["_dir"])

    def _states(self) -> list[tuple[int, str]]:
        """(number, path) of the complete state directories, newest first."""
        try:
            names = os.listdir(self.backup_dir)
        except FileNotFoundError:
            return []
        found = [(int(m[1]), os.path.join(self.backup_dir, n)) for n in names if (m := _STATE.match(n))]
        return sorted(found, reverse=True)

    def _check(self, path: str) -> dict:
        """The state in ``path``, its weights checked against their recorded size and CRC32C
        (ValueError saying what does not match)."""
        try:
            with open(os.path.join(path, _META), encoding="utf-8") as f:
                state = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{_META} unreadable ({e})") from e
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise ValueError(f"{_META} is not a state of this version (format {state.get('format')!r})"
                             if isinstance(state, dict) else f"{_META} holds no state")
        weights = os.path.join(path, _WEIGHTS)
        try:
            size = os.path.getsize(weights)
        except OSError as e:
            raise ValueError(f"{_WEIGHTS} missing ({e.strerror})") from e
        if size != state.get("weights_bytes"):
            raise ValueError(f"{_WEIGHTS} holds {size:,} bytes, its state says {state.get('weights_bytes')}")
        crc = _crc32c_of(weights)
        if crc != state.get("weights_crc32c"):
            raise ValueError(f"{_WEIGHTS} CRC32C {crc}, its state says {state.get('weights_crc32c')}")
        for key in ("epoch", "batches_done"):
            if not isinstance(state.get(key), int) or state[key] < 0:
                raise ValueError(f"{_META}: {key} is {state.get(key)!r}, not a non-negative integer")
        state["_dir"], state["_weights"] = path, weights
        return state

    def _restore(self) -> dict | None:
        """Load the newest usable state (weights into the model); None to start over."""
        passed_over = []
        for _, path in self._states():
            try:
                state = self._check(path)
            except ValueError as e:
                passed_over.append(f"{os.path.basename(path)}: {e}")
                continue
            saved = state.get("data")
            if saved is not None and self._control.identity is not None:
                change = source_identity.describe_changes(saved, self._control.identity)
                if change:
                    raise ValueError(
                        f"{self._control.source_uri}: the data changed since the backup in {self.backup_dir} was "
                        f"saved: {change}; resume against the data it was saved over, or delete {self.backup_dir} "
                        f"to start training over")
            if self.model.optimizer is not None and not self.model.optimizer.built:
                self.model.optimizer.build(self.model.trainable_variables)
            self.model.load_weights(state["_weights"])
            for note in passed_over:
                warnings.warn(f"{self.backup_dir}: passed over a torn backup ({note}); resuming from "
                              f"{os.path.basename(path)}", stacklevel=3)
            return state
        if passed_over:
            warnings.warn(f"{self.backup_dir}: no usable backup ({'; '.join(passed_over)}): training starts over",
                          stacklevel=3)
        elif os.path.exists(self._weights_path):  # keras.callbacks.BackupAndRestore's own layout
            warnings.warn(f"{self.backup_dir} holds a backup of keras.callbacks.BackupAndRestore, which does not "
                          f"say which batches it trained: training starts over", stacklevel=3)
        return None

    # -- the epochs ---------------------------------------------------------------------------
    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._offset = self._resume_skip if epoch == self._resume_epoch else 0
        self._control.start_epoch(epoch, self._offset)
        if self._offset:
            per_epoch = self._control.batches_per_epoch
            log.info("epoch %d resumes at batch %d of %s", epoch + 1, self._offset, per_epoch or "?")
            # The resumed epoch's iterator ends after its remaining batches, short of the length
            # the dataset declares for an epoch: Keras warns that the input ran out (and goes on).
            self._filters = warnings.filters[:]
            warnings.filterwarnings("ignore", message=_RAN_OUT)
        super().on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self._filters is not None:
            warnings.filters[:] = self._filters
            self._filters = None
        self._offset = 0
        super().on_epoch_end(epoch, logs)

    # -- saving -------------------------------------------------------------------------------
    def _writes(self) -> bool:
        """Whether this process writes the backup: always, but under a multi-worker strategy only
        the chief (the ``chief`` task, else worker 0) -- every worker holds the same weights and the
        same position, and all of them restore from the chief's saves (a directory they share)."""
        resolver = getattr(self.model.distribute_strategy, "cluster_resolver", None)
        cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
        if not cluster or resolver.task_type in (None, "chief"):
            return True
        return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster

    def _save_model(self):
        """One save as one unit: a state directory written aside, flushed, renamed into place."""
        if not self._writes():
            return
        if self.save_freq == "epoch":  # at an epoch's end: the next one, from its start
            epoch, done = self._current_epoch, 0
        else:  # after batch _last_batch_seen of the epoch as Keras counts it (from the resumed batch on)
            epoch, done = self._epoch, self._offset + self._last_batch_seen + 1
        os.makedirs(self.backup_dir, exist_ok=True)
        states = self._states()
        number = states[0][0] + 1 if states else 0
        tmp = os.path.join(self.backup_dir, f"{_TMP_PREFIX}{number:08d}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        weights = os.path.join(tmp, _WEIGHTS)
        self.model.save_weights(weights, overwrite=True)
        _fsync(weights)
        state = {"format": _FORMAT, "epoch": epoch, "batches_done": done,
                 "batches_per_epoch": self._control.batches_per_epoch,
                 "weights_bytes": os.path.getsize(weights), "weights_crc32c": _crc32c_of(weights),
                 "data": self._control.identity, "source": self._control.source_uri,
                 "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        meta = os.path.join(tmp, _META)
        with open(meta, "w", encoding="utf-8") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        _fsync(tmp, directory=True)
        final = os.path.join(self.backup_dir, f"state-{number:08d}")
        os.rename(tmp, final)
        _fsync(self.backup_dir, directory=True)
        for _, old in self._states()[KEEP_STATES:]:
            shutil.rmtree(old, ignore_errors=True)
        for name in os.listdir(self.backup_dir):  # saves a kill interrupted
            if name.startswith(_TMP_PREFIX):
                shutil.rmtree(os.path.join(self.backup_dir, name), ignore_errors=True)
