"""keras_inputs (issue #15, section 5): Keras inputs and preprocessing from the schema, trained for real."""

from __future__ import annotations

import keras
import numpy as np
import pyarrow as pa
import pytest

from tfrecord_io.commands.demo_train import make_demo_output
from tfrecord_io.core.codec import encode_examples
from tfrecord_io.core.schema import Schema
from tfrecord_io.engines.keras_inputs import keras_inputs
from tfrecord_io.storage import output

PENGUINS = Schema.from_dict({"label": "species", "features": [
    {"name": "bill", "type": "float"}, {"name": "island", "type": "string", "default": ""},
    {"name": "year", "type": "int64"}, {"name": "species", "type": "string"},
    {"name": "notes", "type": "string", "shape": [-1]}]})
SPECIES = ("adelie", "chinstrap", "gentoo")


def penguins(out: str, n: int = 3000) -> list[dict]:
    rng = np.random.default_rng(0)
    kind = rng.integers(0, 3, n)
    rows = {"bill": (35 + 7 * kind + rng.normal(0, 1.0, n)).astype(np.float32),
            "island": pa.array([("biscoe", "dream", "torgersen")[(k + i % 2) % 3] for i, k in enumerate(kind)]),
            "year": rng.integers(2007, 2010, n), "species": pa.array([SPECIES[k] for k in kind]),
            "notes": pa.array([["x"] * (i % 3) for i in range(n)], pa.list_(pa.string()))}
    batch = pa.RecordBatch.from_pydict(rows, schema=PENGUINS.arrow_schema())
    output.prepare_output(out, overwrite=True)
    output.write_output(out, [[encode_examples(batch.slice(0, n // 2), PENGUINS)],
                              [encode_examples(batch.slice(n // 2), PENGUINS)]],
                        schema=PENGUINS, compression="none", engine="test")
    return batch.to_pylist()


def fit(prep, epochs: int) -> dict:
    keras.utils.set_random_seed(0)
    h = keras.layers.Dense(32, activation="relu")(prep.encoded)
    model = keras.Model(prep.inputs, prep.output_layer()(h))
    model.compile(keras.optimizers.Adam(0.01), loss=prep.loss, metrics=prep.metrics)
    history = model.fit(prep.dataset(batch_size=128, seed=0, prefetch_to_device=False, num_epochs=1),
                        epochs=epochs, verbose=0)
    return {k: v[-1] for k, v in history.history.items()}


def test_the_demo_schema_trains_with_one_call(tmp_path):
    out = str(tmp_path / "taxi")
    make_demo_output(out, rows=4000, shards=2)
    prep = keras_inputs(out)
    layers = {layer.name: layer for layer in keras.Model(prep.inputs, prep.encoded).layers}
    assert prep.loss == "binary_crossentropy" and prep.label == "tipped" and prep.label_classes is None
    assert prep.task == "binary"  # the demo schema says so (task: binary)
    assert type(layers["hour_lookup"]).__name__ == "IntegerLookup"  # 24 values: a category
    assert sorted(layers["payment_type_lookup"].get_vocabulary()[1:]) == ["card", "cash", "mobile", "unknown"]
    assert type(layers["fare_norm"]).__name__ == "Normalization"
    assert set(prep.inputs) == set(prep.features) and prep.label not in prep.inputs
    got = fit(prep, epochs=4)
    assert got["accuracy"] > 0.6, got  # the label depends on fare, miles and passengers; chance is 0.5


def test_a_string_label_is_a_class_and_list_features_are_named(tmp_path):
    out = str(tmp_path / "penguins")
    penguins(out)
    with pytest.raises(ValueError, match=r"variable-length list feature\(s\) \['notes'\]"):
        keras_inputs(out)
    prep = keras_inputs(out, features=["bill", "island", "year"])
    assert prep.label_classes == SPECIES and prep.loss == "sparse_categorical_crossentropy"
    assert prep.output_units == 3
    got = fit(prep, epochs=6)
    assert got["accuracy"] > 0.85, got  # bill length separates the species (7 mm apart, sd 1 mm)


def test_stats_from_tfrecord_io_stats_replace_the_sample_pass(tmp_path):
    from tfrecord_io.commands.reading import resolve_source
    from tfrecord_io.commands.stats import compute_stats, stats_to_dict

    out = str(tmp_path / "penguins")
    rows = penguins(out)
    src = resolve_source(out)
    stats = stats_to_dict(compute_stats(src, workers=1, progress=False), src)
    prep = keras_inputs(out, features=["bill", "island"], stats=stats, sample_records=0)
    norm = keras.Model(prep.inputs, prep.encoded).get_layer("bill_norm")
    bills = np.array([r["bill"] for r in rows], dtype=np.float64)
    assert float(np.asarray(norm.mean).ravel()[0]) == pytest.approx(bills.mean(), rel=1e-5)
    assert prep.label_classes == SPECIES
    with pytest.raises(ValueError, match="tfrecord-io stats --json"):
        keras_inputs(out, features=["bill"], stats={"not": "stats"})


RIDES = Schema.from_dict({"label": "riders", "features": [
    {"name": "temp", "type": "float"}, {"name": "hour", "type": "int64"}, {"name": "riders", "type": "int64"}]})


def rides(out: str, n: int = 4000, schema: Schema = RIDES, top: int = 651) -> np.ndarray:
    """An hourly rental table: riders (a count, 1..top) grows with the temperature."""
    rng = np.random.default_rng(1)
    temp = rng.uniform(0, 1, n).astype(np.float32)
    noise = rng.integers(-3, 4, n) if top > 50 else 0
    riders = np.clip(1 + (temp * (top - 1)).round().astype(np.int64) + noise, 1, top)
    batch = pa.RecordBatch.from_pydict({"temp": temp, "hour": rng.integers(0, 24, n), "riders": riders},
                                       schema=schema.arrow_schema())
    output.prepare_output(out, overwrite=True)
    output.write_output(out, [[encode_examples(batch, schema)]], schema=schema, compression="none", engine="test")
    return riders


def test_an_int64_count_label_is_regression_and_a_line_says_so(tmp_path):
    out = str(tmp_path / "rides")
    rides(out)
    with pytest.warns(UserWarning, match=r"int64 label 'riders' .* \(values 1\.\.651 .* taken as regression; pass "
                                         r"task='classification', num_classes=N"):
        prep = keras_inputs(out)
    assert (prep.task, prep.loss, prep.label_classes, prep.output_units) == ("regression", "mse", None, 1)
    ds = prep.dataset(batch_size=64, seed=0, prefetch_to_device=False)
    x, y = next(iter(ds))
    assert y.dtype.name == "float32" and float(y.numpy().max()) > 100
    assert int(ds.cardinality()) == -(-4000 // 64) and ds.loader_resume.batches_per_epoch == 63  # for BackupAndRestore


def test_the_task_is_taken_from_the_argument_or_the_schema_without_a_warning(tmp_path, recwarn):
    out = str(tmp_path / "rides")
    rides(out, top=5)
    prep = keras_inputs(out, task="classification", num_classes=6)
    assert prep.label_classes == tuple(range(6)) and prep.loss == "sparse_categorical_crossentropy"
    got = fit(prep, epochs=3)
    assert got["accuracy"] > 0.5, got
    binary = keras_inputs(out, task="regression")
    assert binary.loss == "mse"
    schema = Schema.from_dict(dict(RIDES.to_dict(), task="classification", classes=6))
    out2 = str(tmp_path / "rides-with-task")
    rides(out2, schema=schema, top=5)
    from_schema = keras_inputs(out2)
    assert from_schema.task == "classification" and from_schema.label_classes == tuple(range(6))
    assert not [w for w in recwarn if "keras_inputs" in str(w.message)], [str(w.message) for w in recwarn]
    with pytest.raises(ValueError, match="task must be one of regression, binary, classification, got 'ranking'"):
        keras_inputs(out, task="ranking")
    species = str(tmp_path / "penguins")
    penguins(species)
    with pytest.raises(ValueError, match="label 'species' is string: it can be classification, not regression"):
        keras_inputs(species, features=["bill"], task="regression")


def test_a_label_outside_its_classes_fails_naming_the_value(tmp_path):
    out = str(tmp_path / "rides")
    rides(out, top=9)
    prep = keras_inputs(out, task="classification", num_classes=5)
    with pytest.raises(ValueError, match=r"label 'riders': record \d+ of a batch has \d, not one of the 5 classes "
                                         r"\(0\.\.4\)"):
        for _ in prep.dataset(batch_size=256, seed=0, prefetch_to_device=False):
            pass
    species = str(tmp_path / "penguins")
    penguins(species)
    two = keras_inputs(species, features=["bill"], classes=["adelie", "gentoo"])
    with pytest.raises(ValueError, match=r"label 'species': record \d+ of a batch has 'chinstrap', not one of the 2"):
        for _ in two.dataset(batch_size=256, seed=0, prefetch_to_device=False):
            pass


def test_an_int64_feature_reads_as_float_without_converting_again(tmp_path):
    from tfrecord_io.engines.loader import make_dataset

    out = str(tmp_path / "rides")
    riders = rides(out)
    as_float = Schema.from_dict(dict(RIDES.to_dict(), features=[
        {"name": "temp", "type": "float"}, {"name": "hour", "type": "float", "default": 0.0},
        {"name": "riders", "type": "float"}]))
    got = [b for b in make_dataset(out, schema=as_float, batch_size=1000, shuffle=False, prefetch_to_device=False)]
    assert all(y.dtype.name == "float32" and x["hour"].dtype.name == "float32" for x, y in got)
    assert np.array_equal(np.concatenate([y.numpy() for _, y in got]), riders.astype(np.float32))
    as_string = Schema.from_dict(dict(RIDES.to_dict(), features=[
        {"name": "temp", "type": "float"}, {"name": "hour", "type": "string"}, {"name": "riders", "type": "int64"}]))
    with pytest.raises(ValueError, match=r"feature 'hour': the records of .* hold int64 \(int64_list\), the schema "
                                         r"given asks for string"):
        make_dataset(out, schema=as_string, batch_size=100)
