"""Train a small Keras model on converted TFRecords with ``model.fit(make_dataset(...))``.

The demo's last step: after the converter has written an output directory (schema
``conf/taxi.yaml``: 10 float and 5 int64 features, a string, an int64 0/1 label),
:func:`train_demo` builds the model's inputs and preprocessing from the schema
(:func:`~tfrecord_io.engines.keras_inputs.keras_inputs`), fits a few Dense layers and reports
examples/s::

    python -m tfrecord_io.commands.demo_train demo-output/trips --epochs 2

:func:`make_demo_output` writes a synthetic output of that schema (for trying this out without
the converter, and for tests and benchmarks).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from tfrecord_io.engines.quiet_tf import import_tensorflow

TAXI_SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "taxi.yaml"  # conf/taxi.yaml links here


# Plausible ranges [lo, hi) for the demo's integer columns.
INT_RANGES = {"hour": (0, 24), "weekday": (0, 7), "month": (1, 13), "passengers": (1, 7), "pickup_area": (1, 78)}


def taxi_schema():
    """The demo schema (``conf/taxi.yaml``)."""
    from tfrecord_io.storage.schema_io import load_schema

    return load_schema(str(TAXI_SCHEMA))


def demo_rows(start: int, n: int, seed: int = 0):
    """``n`` synthetic rows of the taxi schema (an Arrow batch); the label depends on the features."""
    import pyarrow as pa

    schema = taxi_schema()
    rng = np.random.default_rng([seed, start])
    cols: dict = {}
    for f in schema.features:
        if f.type == "float":
            cols[f.name] = rng.gamma(2.0, 5.0, n).astype(np.float32)
        elif f.type == "int64":
            lo, hi = INT_RANGES.get(f.name, (0, 24))
            cols[f.name] = rng.integers(lo, hi, n, dtype=np.int64)
        else:
            cols[f.name] = pa.array(rng.choice(["card", "cash", "mobile", "unknown"], n))
    label = schema.label
    score = cols["fare"] * 0.08 + cols["trip_miles"] * 0.05 - cols["passengers"] * 0.1 + rng.normal(0, 0.5, n)
    cols[label] = (score > np.median(score)).astype(np.int64)
    return pa.RecordBatch.from_pydict(cols, schema=schema.arrow_schema())


def make_demo_output(output_dir: str, rows: int = 100_000, shards: int = 4, compression: str = "none",
                     seed: int = 0) -> dict:
    """Write ``rows`` synthetic taxi rows as a committed tfrecord-io output; returns its manifest."""
    from tfrecord_io.storage import output
    from tfrecord_io.core.codec import encode_framed

    schema = taxi_schema()
    output.prepare_output(output_dir, overwrite=True)
    bounds = np.linspace(0, rows, shards + 1).astype(int)

    def batches(lo: int, hi: int):
        for start in range(lo, hi, 50_000):
            yield encode_framed(demo_rows(start, min(50_000, hi - start), seed), schema)

    return output.write_output(output_dir, [batches(int(bounds[k]), int(bounds[k + 1])) for k in range(shards)],
                               schema=schema, compression=compression, engine="demo")


def numeric_model(schema, *, learning_rate: float = 1e-3, seed: int | None = 0):
    """``(model, to_xy, names)``: a fixed numeric Keras model for an example ``schema`` (the train-step
    benchmark's, ``benchmarks/bench_train_step.py``; the demo builds its model with ``keras_inputs``).

    The model sees every scalar float/int64 feature ``names`` (cast to float32, stacked, batch-
    normalized) through two Dense layers.  An int64 label is taken as a 0/1 class (binary
    cross-entropy), a float label as a regression target.  ``to_xy(features, label)`` turns a
    :func:`~tfrecord_io.engines.loader.make_dataset` batch into the model's ``(x, y)``.
    """
    tf = import_tensorflow(command=True)  # without its start-up lines (engines.quiet_tf)
    import keras

    if not hasattr(schema, "features"):
        from tfrecord_io.core.schema import Schema
        from tfrecord_io.storage.schema_io import load_schema

        schema = load_schema(schema) if isinstance(schema, (str, Path)) else Schema.from_dict(schema)
    if schema.record_type != "example" or schema.label is None:
        raise ValueError("the demo model needs an example schema with a label")
    names = [f.name for f in schema.features
             if f.name != schema.label and f.type in ("float", "int64") and f.shape is None]
    if not names:
        raise ValueError("the demo model needs at least one scalar float or int64 feature")

    def to_xy(features, label):
        x = tf.stack([tf.cast(features[n], tf.float32) for n in names], axis=1)
        return x, tf.cast(label, tf.float32)

    if seed is not None:
        keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(len(names),), name="numeric")
    h = keras.layers.BatchNormalization()(inputs)
    h = keras.layers.Dense(64, activation="relu")(h)
    h = keras.layers.Dense(32, activation="relu")(h)
    binary = schema.feature(schema.label).type == "int64"
    outputs = keras.layers.Dense(1, activation="sigmoid" if binary else None)(h)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss="binary_crossentropy" if binary else "mse",
                  metrics=["accuracy"] if binary else [])
    return model, to_xy, names


def train_demo(source, *, schema=None, epochs: int = 2, batch_size: int = 1024, learning_rate: float = 1e-3,
               seed: int | None = 0, verbose: int = 1, prefetch_to_device: bool | str = "auto",
               **loader_options) -> dict:
    """Fit a model built with :func:`tfrecord_io.engines.keras_inputs.keras_inputs` on ``source``
    with ``model.fit(make_dataset(...))``; returns what it measured.

    Returns ``{"examples", "steps", "seconds", "examples_per_sec", "final_loss", "features"}``
    (plus ``"steady_examples_per_sec"``, the rate after the first epoch, when there is a manifest
    and more than one epoch) and prints one line with examples/s.  The batches go to the GPU,
    when there is one, after they are turned into the model's inputs (:func:`prefetch_to_gpu`).
    """
    tf = import_tensorflow(command=True)  # without its start-up lines (engines.quiet_tf)
    import keras

    from tfrecord_io.engines.keras_inputs import keras_inputs
    from tfrecord_io.engines.loader import prefetch_to_gpu, resolve_source, steps_per_epoch

    src = resolve_source(source)
    resolved = schema or src.schema
    if resolved is None:
        raise ValueError("train_demo needs a schema: pass schema= for a source without a manifest")
    # The model: Keras inputs and preprocessing from the schema (keras_inputs: normalization for
    # numbers, lookups for categories), then two Dense layers and the label's head.
    if seed is not None:
        keras.utils.set_random_seed(seed)
    prep = keras_inputs(src, schema=schema)
    h = keras.layers.Dense(64, activation="relu")(prep.encoded)
    h = keras.layers.Dense(32, activation="relu")(h)
    model = keras.Model(prep.inputs, prep.output_layer()(h))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=prep.loss, metrics=prep.metrics)
    names = list(prep.features)
    # With a manifest: one endless dataset and exact steps per epoch (the pipeline is built once);
    # without: Keras reads the dataset to its end in each epoch.
    steps = steps_per_epoch(src, batch_size) if src.total_records is not None else None
    ds = prep.dataset(batch_size=batch_size, seed=seed, num_epochs=None if steps else 1, prefetch_to_device=False,
                      **loader_options)
    seen = tf.Variable(0, dtype=tf.int64, trainable=False)

    def counted(features, label):
        seen.assign_add(tf.shape(label, out_type=tf.int64)[0])
        return features, label

    train = prefetch_to_gpu(ds.map(counted, num_parallel_calls=tf.data.AUTOTUNE), prefetch_to_device)

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            epoch_seconds.append(time.perf_counter() - self.started)

    epoch_seconds: list[float] = []
    started = time.perf_counter()
    history = model.fit(train, epochs=epochs, steps_per_epoch=steps, shuffle=False, verbose=verbose,
                        callbacks=[EpochTimer()])
    seconds = time.perf_counter() - started
    # An endless dataset is read ahead of training (prefetch), so count from the manifest then.
    examples = epochs * src.total_records if steps else int(seen.numpy())
    steps_run = int(model.optimizer.iterations.numpy())
    result = {
        "examples": examples,
        "steps": steps_run,
        "seconds": seconds,
        "examples_per_sec": examples / seconds if seconds > 0 else float("inf"),
        "final_loss": float(history.history["loss"][-1]),
        "features": names,
    }
    line = (f"trained {epochs} epoch(s) on {src.uri}: {examples:,} examples in {seconds:.1f}s = "
            f"{result['examples_per_sec']:,.0f} examples/s")
    if len(epoch_seconds) > 1 and src.total_records:
        # The first epoch also traces and compiles the model; later ones show the steady rate.
        later = sum(epoch_seconds[1:])
        result["steady_examples_per_sec"] = (len(epoch_seconds) - 1) * src.total_records / later
        line += f" ({result['steady_examples_per_sec']:,.0f} examples/s after the first epoch)"
    print(f"{line}, loss {result['final_loss']:.4f}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="an output directory of the converter (or a glob, with --schema)")
    parser.add_argument("--schema", help="YAML schema, for a source without _manifest.json")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--make-synthetic", type=int, metavar="ROWS",
                        help="first write ROWS synthetic taxi rows to SOURCE (overwriting it)")
    args = parser.parse_args(argv)
    if args.make_synthetic:
        make_demo_output(args.source, rows=args.make_synthetic)
    train_demo(args.source, schema=args.schema, epochs=args.epochs, batch_size=args.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
