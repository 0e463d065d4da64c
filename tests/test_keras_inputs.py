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
