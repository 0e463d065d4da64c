"""Keras inputs and preprocessing from the schema: the boilerplate every model on our outputs repeats.

    import keras
    from tfrecord_io import keras_inputs

    prep = keras_inputs("hdfs://nn/tfrecords/trips", task="regression")   # schema from the manifest
    h = keras.layers.Dense(64, activation="relu")(prep.encoded)
    model = keras.Model(prep.inputs, prep.output_layer()(h))
    model.compile("adam", loss=prep.loss, metrics=prep.metrics)
    model.fit(prep.dataset(batch_size=256), epochs=3)           # make_dataset + the label mapping

What it builds, per feature of the schema (or of ``features=``; the label is left out):

* a ``keras.Input`` named as the feature, with its dtype and shape (scalars ``()``, ``[k]``
  features ``(k,)``), so that a dict batch of :func:`~tfrecord_io.engines.loader.make_dataset`
  matches it by name;
* numbers (``float``, ``int64``): ``Normalization`` with the mean and variance of the data;
  an ``int64`` feature with at most ``max_categories`` distinct values is a category instead
  (``IntegerLookup``, one-hot), as are ``string`` / ``bytes`` features (``StringLookup``,
  one-hot, the ``max_categories`` most frequent values plus one out-of-vocabulary slot);
* a feature that gathers a wide table's columns (``columns:`` in the schema, ``[N]``): one
  ``keras.Input(shape=(N,))`` and one ``Normalization`` with each column's own mean and variance
  (from the sample; ``stats=`` has one per feature, used for every column), never a category;
* the preprocessed features concatenated into one float tensor, ``encoded``.

The task decides the head, and it is never guessed in silence: ``task=`` (or ``task:`` in the
schema) is ``"regression"`` (1 unit, mean squared error; an int64 label is read as float),
``"binary"`` (1 sigmoid unit, binary cross-entropy) or ``"classification"`` (softmax over
``label_classes``, sparse categorical cross-entropy).  A classification label's classes come from
``num_classes=`` / ``classes=`` (or ``classes:`` in the schema: a number n for int64 labels
0..n-1, or the list of values); without them, from the statistics or the sample, and a line says
so.  A label outside its classes fails in :meth:`KerasInputs.dataset` naming the value (on a CPU
the loss would fail on it, on a GPU train on garbage).  Without a task, a ``float`` label is
regression and a ``string`` label classification; an ``int64`` label is binary when its values
are 0 and 1 and regression otherwise -- a count is a number -- and a warning line says which was
chosen and how to choose the other.

The statistics come from ``stats=`` -- what ``tfrecord-io stats --json`` prints, as a dict or a
path -- or else from one bounded pass over the first ``sample_records`` records of the source
(shuffled files), so that the helper never reads a whole dataset.  Variable-length list features
(``shape: [-1]``) have no fixed input shape: they are refused with a message unless left out
through ``features=``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from tfrecord_io.core.schema import Feature, Schema
from tfrecord_io.engines.quiet_tf import import_tensorflow

__all__ = ["KerasInputs", "keras_inputs"]

DEFAULT_SAMPLE_RECORDS = 20_000
DEFAULT_MAX_CATEGORIES = 100


@dataclass(frozen=True)
class KerasInputs:
    """What :func:`keras_inputs` built (see the module doc)."""

    source: Any
    schema: Schema
    inputs: dict                       # feature name -> keras.Input
    encoded: Any                       # the preprocessed features, concatenated (float32)
    features: tuple[str, ...]
    label: str | None
    label_classes: tuple | None        # class values (None: regression or binary)
    loss: str | None
    metrics: list = field(default_factory=list)
    task: str | None = None            # "regression" | "binary" | "classification" (None: no label)

    @property
    def output_units(self) -> int:
        return len(self.label_classes) if self.label_classes is not None else 1

    def output_layer(self, name: str = "prediction"):
        """The model's last layer for this label (module doc)."""
        import keras

        if self.label_classes is not None:
            return keras.layers.Dense(len(self.label_classes), activation="softmax", name=name)
        binary = self.loss == "binary_crossentropy"
        return keras.layers.Dense(1, activation="sigmoid" if binary else None, name=name)

    def dataset(self, source=None, **make_dataset_options):
        """``make_dataset(source, features=...)`` with a string label mapped to its class index,
        ready for ``model.fit``.  ``source``: another source of the same schema (default: the one
        these inputs were built from), e.g. the eval split for ``model.evaluate``: its string labels
        map to the same classes; one the training source never had maps to -1."""
        import tensorflow as tf

        from tfrecord_io.engines.loader import make_dataset

        ds = make_dataset(self.source if source is None else source, schema=self.schema,
                          features=list(self.features), **make_dataset_options)
        label = self.schema.feature(self.label) if self.label else None
        if label is None:
            return ds
        from tfrecord_io.engines.loader.errors import LeadingErrorsDataset

        def keep(mapped):  # our errors lead, and BackupAndRestore(data=) steers it as it would ds
            out = LeadingErrorsDataset(mapped)
            out.loader_stats, out.loader_resume = ds.loader_stats, ds.loader_resume
            return out

        if self.task in ("regression", "binary"):
            return keep(ds.map(lambda x, y: (x, tf.cast(y, tf.float32)), num_parallel_calls=tf.data.AUTOTUNE))
        classes = self.label_classes
        if label.type in ("string", "bytes"):
            table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant([str(c) for c in classes]),
                                                    tf.range(len(classes), dtype=tf.int64)), -1)
            index = table.lookup
        else:  # int64 classes 0..n-1 (label_classes is that range)
            index = tf.identity
        check = _ClassCheck(label.name, classes)

        def to_class(x, y):
            k = index(y)
            bad = tf.reduce_any((k < 0) | (k >= len(classes)))
            k = tf.cond(bad, lambda: tf.numpy_function(check, [y, k], tf.int64, stateful=False), lambda: k)
            return x, tf.ensure_shape(k, y.shape)

        return keep(ds.map(to_class, num_parallel_calls=tf.data.AUTOTUNE))


class _ClassCheck:
    """Raised for a batch holding a label outside the classes: names the first such value."""

    def __init__(self, name: str, classes: tuple):
        self.name, self.classes = name, classes

    def __call__(self, values, index):
        bad = np.flatnonzero((index < 0) | (index >= len(self.classes)))
        k = int(bad[0]) if len(bad) else 0
        value = values.ravel()[k]
        value = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value.item()
        shown = (f"0..{len(self.classes) - 1}" if self.classes == tuple(range(len(self.classes)))
                 else ", ".join(map(repr, self.classes[:8])) + (" ..." if len(self.classes) > 8 else ""))
        raise ValueError(f"label {self.name!r}: record {k} of a batch has {value!r}, not one of the "
                         f"{len(self.classes)} classes ({shown}): give the label all its classes "
                         f"(keras_inputs(num_classes=... or classes=[...]), or classes: in the schema)")


def _load_stats(stats) -> dict[str, dict]:
    if stats is None:
        return {}
    if isinstance(stats, (str, os.PathLike)):
        from tfrecord_io.storage import fs

        with fs.open(os.fspath(stats), "rb") as f:
            stats = json.loads(f.read().decode("utf-8"))
    try:
        return {entry["name"]: entry for entry in stats["features"]}
    except (KeyError, TypeError) as e:
        raise ValueError(f"stats must be what `tfrecord-io stats --json` prints (a 'features' list): {e}") from e


class _Sample:
    """Per-feature values of the first records of a source (bounded)."""

    def __init__(self, source, schema: Schema, names: list[str], limit: int):
        import tensorflow as tf

        from tfrecord_io.engines.loader import make_dataset

        self.values: dict[str, list] = {n: [] for n in names}
        with_label = [n for n in names if n != schema.label]
        ds = make_dataset(source, schema=schema, features=with_label or None, batch_size=1024, num_epochs=1,
                          shuffle=True, seed=0, prefetch_to_device=False)
        seen = 0
        for batch in ds:
            x, y = batch if isinstance(batch, tuple) else (batch, None)
            for n in names:
                t = y if n == schema.label else x[n]
                self.values[n].append(t.numpy() if not isinstance(t, tf.RaggedTensor) else t.flat_values.numpy())
            seen += int(next(iter(x.values())).shape[0])
            if seen >= limit:
                break
        self.values = {n: (np.concatenate(v) if v else np.array([])) for n, v in self.values.items()}


def _top(values: np.ndarray, k: int) -> list:
    counts = Counter(v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v.item()
                     if hasattr(v, "item") else v for v in values.ravel())
    return [v for v, _ in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[:k]]


def _stat_top(entry: dict, k: int) -> list | None:
    top = (entry.get("strings") or {}).get("top") if entry else None
    if not top:
        return None
    return [t["value"] for t in top[:k] if isinstance(t.get("value"), (str, int))]


def keras_inputs(source, *, schema: Schema | dict | str | None = None, features: Sequence[str] | None = None,
                 stats=None, sample_records: int = DEFAULT_SAMPLE_RECORDS,
                 max_categories: int = DEFAULT_MAX_CATEGORIES, task: str | None = None,
                 num_classes: int | None = None, classes: Sequence | None = None) -> KerasInputs:
    """Keras inputs, preprocessing and the label's head for ``source`` (module doc).

    ``task``: ``"regression"``, ``"binary"`` or ``"classification"`` (default: the schema's
    ``task:``, else chosen from the label's type, with a warning for an int64 label);
    ``num_classes`` / ``classes``: a classification label's classes (default: the schema's
    ``classes:``, else from the data, with a warning).  Raises ValueError for a feature that has no
    fixed shape, a schema without an Example layout, a task the label's type cannot have, or
    ``stats`` that are not ``tfrecord-io stats --json`` output.
    """
    import_tensorflow()  # quietly, before Keras imports it (engines.quiet_tf)
    import keras

    from tfrecord_io.engines.loader import resolve_source
    from tfrecord_io.storage import sources

    src = resolve_source(source)
    resolved = sources.resolve_source(src, schema=schema).schema if schema is not None else src.schema
    if resolved is None:
        raise ValueError(f"keras_inputs needs a schema: {src.uri} has no _manifest.json; pass schema=")
    if resolved.record_type != "example":
        raise ValueError("keras_inputs builds inputs for Example records; this schema is for SequenceExamples")
    names = list(features) if features is not None else [f.name for f in resolved.features
                                                           if f.name != resolved.label]
    unknown = [n for n in names if n not in {f.name for f in resolved.features}]
    if unknown:
        raise ValueError(f"features {unknown} are not in the schema; features: {[f.name for f in resolved.features]}")
    chosen = [resolved.feature(n) for n in names if n != resolved.label]
    ragged = [f.name for f in chosen if f.shape is not None and -1 in f.shape]
    if ragged:
        raise ValueError(f"variable-length list feature(s) {ragged} have no fixed Keras input shape: leave them "
                         f"out with features=[...], or give them a fixed shape [k] in the schema")
    known = _load_stats(stats)
    need = [f.name for f in chosen if f.name not in known]
    if resolved.label and resolved.label not in known:
        need.append(resolved.label)
    sample = _Sample(src, resolved, need, sample_records).values if need else {}

    inputs, parts = {}, []
    for f in chosen:
        shape = tuple(f.shape) if f.shape else ()
        dtype = {"float": "float32", "int64": "int64"}.get(f.type, "string")
        inp = keras.Input(shape=shape, dtype=dtype, name=f.name)
        inputs[f.name] = inp
        x = inp if shape else keras.layers.Reshape((1,), name=f"{f.name}_as_column")(inp)
        parts.append(_preprocess(f, x, known.get(f.name), sample.get(f.name), max_categories))
    if not parts:
        raise ValueError("keras_inputs needs at least one feature besides the label")
    encoded = parts[0] if len(parts) == 1 else keras.layers.Concatenate(name="features")(parts)

    label_classes, loss, metrics, chosen_task = None, None, [], None
    if resolved.label:
        lf = resolved.feature(resolved.label)
        chosen_task, label_classes = _label_task(lf, resolved, task, num_classes, classes, known.get(lf.name),
                                                 sample.get(lf.name), src.uri)
        loss, metrics = {"regression": ("mse", []), "binary": ("binary_crossentropy", ["accuracy"]),
                         "classification": ("sparse_categorical_crossentropy", ["accuracy"])}[chosen_task]
    return KerasInputs(src, resolved, inputs, encoded, tuple(f.name for f in chosen), resolved.label,
                       label_classes, loss, metrics, chosen_task)


def _label_task(lf: Feature, schema: Schema, task: str | None, num_classes: int | None, classes: Sequence | None,
                entry: dict | None, values: np.ndarray | None, uri: str) -> tuple[str, tuple | None]:
    """(task, classes) of the label ``lf``: the caller's, else the schema's, else chosen and said (module doc)."""
    from tfrecord_io.core.schema import TASKS

    if task is not None and task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if num_classes is not None and classes is not None:
        raise ValueError("give num_classes= or classes=, not both")
    given = classes if classes is not None else num_classes
    if given is not None and task not in (None, "classification"):
        raise ValueError(f"num_classes/classes are for task='classification', not {task!r}")
    task = task or ("classification" if given is not None else schema.task)
    given = given if given is not None else (schema.classes if task == "classification" else None)
    allowed = {"float": ("regression", "binary"), "int64": ("regression", "binary", "classification")}.get(
        lf.type, ("classification",))
    if task is not None and task not in allowed:
        raise ValueError(f"label {lf.name!r} is {lf.type}: it can be {' or '.join(allowed)}, not {task}")
    if task is None:
        if lf.type == "float":
            task = "regression"
        elif lf.type != "int64":
            task = "classification"
        else:
            lo, hi = _label_range(entry, values)
            task = "binary" if lo is not None and lo >= 0 and hi <= 1 else "regression"
            other = "task='regression'" if task == "binary" else "task='classification', num_classes=N"
            warnings.warn(f"keras_inputs: the int64 label {lf.name!r} of {uri} (values {lo}..{hi} in what was "
                          f"read) is taken as {task}; pass {other} (or set task:/classes: in the schema) for the "
                          f"other", stacklevel=3)
    if task != "classification":
        return task, None
    if isinstance(given, int) and not isinstance(given, bool):
        if lf.type != "int64" or given < 2:
            raise ValueError(f"num_classes={given} needs an int64 label and at least 2 classes")
        return task, tuple(range(given))
    if given is not None:
        found = tuple(given)
        if lf.type == "int64" and found != tuple(range(len(found))):
            raise ValueError(f"the classes of the int64 label {lf.name!r} must be 0..n-1 (give num_classes=n), "
                             f"got {list(found)[:10]}")
        return task, tuple(str(c) for c in found) if lf.type != "int64" else found
    if lf.type == "int64":
        lo, hi = _label_range(entry, values)
        if lo is None or lo < 0:
            raise ValueError(f"label {lf.name!r} has negative values ({lo}): classes are 0..n-1; map them first")
        found = tuple(range(hi + 1))
    else:
        found = tuple(sorted(_stat_top(entry, 1 << 16) or _top(values, 1 << 16), key=str))
    warnings.warn(f"keras_inputs: the {len(found)} classes of label {lf.name!r} come from the data read "
                  f"({'statistics' if entry else 'a sample'}); a label outside them fails at its batch: pass "
                  f"{'num_classes=N' if lf.type == 'int64' else 'classes=[...]'} (or classes: in the schema) to "
                  f"fix them", stacklevel=3)
    return task, found


def _label_range(entry: dict | None, values: np.ndarray | None) -> tuple[int | None, int | None]:
    if values is not None and len(values):
        return int(values.min()), int(values.max())
    numbers = (entry or {}).get("numbers") or {}
    if numbers.get("min") is None:
        return None, None
    return int(numbers["min"]), int(numbers["max"])


def _preprocess(f: Feature, x, entry: dict | None, values: np.ndarray | None, max_categories: int):
    import keras

    if f.gathered:
        return _normalize_columns(f, x, entry, values)

    if f.type in ("string", "bytes"):
        vocab = _stat_top(entry, max_categories) if entry else None
        if vocab is None:
            vocab = [v for v in _top(values, max_categories) if v != ""] if values is not None else []
        return keras.layers.StringLookup(vocabulary=[str(v) for v in vocab] or ["<none>"], output_mode="one_hot",
                                         name=f"{f.name}_lookup")(x)
    if f.type == "int64":
        distinct = None
        if entry is not None and entry.get("numbers", {}).get("min") is not None:
            lo, hi = entry["numbers"]["min"], entry["numbers"]["max"]
            distinct = list(range(int(lo), int(hi) + 1)) if hi - lo < max_categories else None
        elif values is not None and len(values):
            uniq = np.unique(values)
            distinct = uniq.tolist() if len(uniq) <= max_categories else None
        if distinct is not None:
            return keras.layers.IntegerLookup(vocabulary=[int(v) for v in distinct], output_mode="one_hot",
                                              name=f"{f.name}_lookup")(x)
    if entry is not None and entry.get("numbers", {}).get("mean") is not None:
        mean, var = float(entry["numbers"]["mean"]), float(entry["numbers"]["std"]) ** 2
    elif values is not None and len(values):
        finite = values.astype(np.float64)
        finite = finite[np.isfinite(finite)]
        mean, var = (float(finite.mean()), float(finite.var())) if len(finite) else (0.0, 1.0)
    else:
        mean, var = 0.0, 1.0
    # (Normalization casts an int64 input to float32 itself)
    return keras.layers.Normalization(mean=mean, variance=var if var > 0 else 1.0, name=f"{f.name}_norm")(x)


def _normalize_columns(f: Feature, x, entry: dict | None, values: np.ndarray | None):
    """A gathered feature's ``[N]`` values, each column normalized by its own mean and variance."""
    import keras

    k = f.fixed_length
    mean, var = np.zeros(k), np.ones(k)
    if values is not None and values.size:
        rows = values.astype(np.float64).reshape(-1, k)
        finite = np.isfinite(rows)
        counts = finite.sum(axis=0)
        safe = np.where(finite, rows, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = safe.sum(axis=0) / counts
            v = (np.where(finite, rows - m, 0.0) ** 2).sum(axis=0) / counts
        mean, var = np.where(counts > 0, m, 0.0), np.where((counts > 0) & (v > 0), v, 1.0)
    elif entry is not None and entry.get("numbers", {}).get("mean") is not None:
        mean = np.full(k, float(entry["numbers"]["mean"]))
        var = np.full(k, float(entry["numbers"]["std"]) ** 2 or 1.0)
    return keras.layers.Normalization(axis=-1, mean=mean, variance=var, name=f"{f.name}_norm")(x)
