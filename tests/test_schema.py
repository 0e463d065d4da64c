"""Schema loading, validation and the engine schemas derived from it."""

import pyarrow as pa
import pytest
import tensorflow as tf

from tfrecord_io.core.schema import Schema, SchemaError
from tfrecord_io.engines.loader import parse_spec
from tfrecord_io.storage.schema_io import load_schema

TAXI = """
record_type: example
features:
  - {name: fare, type: float, default: 0.0}
  - {name: trips, type: int64, required: true}
  - {name: tags, type: string, shape: [-1], separator: "|"}
  - {name: emb, type: float, shape: [3], default: [0.0, 0.0, 0.0]}
  - {name: raw, type: bytes}
  - {name: tips, type: float}
label: tips
csv: {header: false, delimiter: ";", null_values: ["", "NA"]}
"""

SESSIONS = """
record_type: sequence_example
group_by: session_id
order_by: ts
context:
  - {name: session_id, type: string, required: true}
  - {name: country, type: string, default: "?"}
sequence:
  - {name: ts, type: int64}
  - {name: item, type: string}
  - {name: scores, type: float, shape: [-1]}
"""


def test_round_trip_through_yaml():
    s = Schema.from_yaml(TAXI)
    assert Schema.from_yaml(s.to_yaml()) == s
    assert s.csv.delimiter == ";" and s.csv.null_values == ("", "NA") and s.csv.header is False
    assert s.feature("emb").default == (0.0, 0.0, 0.0)
    assert [f.name for f in s.input_features] == ["fare", "trips", "tags", "emb", "raw", "tips"]


def test_load_from_file(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SESSIONS)
    s = load_schema(str(p))
    assert s.record_type == "sequence_example" and s.group_by == "session_id"
    assert load_schema("file://" + str(p)) == s


@pytest.mark.parametrize("text, message", [
    ("features: [{name: a, type: double}]", "unknown type 'double'"),
    ("features: [{name: a, type: float, colour: red}]", "unknown key(s) ['colour']"),
    ("features: [{name: a, type: float}, {name: a, type: int64}]", "duplicate feature name 'a'"),
    ("features: [{name: a, type: int64, default: 1.5}]", "default of type int64 must be an integer, got float"),
    ("features: [{name: a, type: string, default: 3}]", "default of type string must be a string"),
    ("features: [{name: a, type: float, shape: [2], default: [1.0]}]", "default must have 2 values, got 1"),
    ("features: [{name: a, type: float, shape: [-1], default: [1.0]}]", "variable-length list has no default"),
    ("features: [{name: a, type: float, shape: [0]}]", "shape must be [-1]"),
    ("features: [{name: a, type: float, separator: '|'}]", "separator is only for list features"),
    ("features: [{name: a, type: float}]\nlabel: b", "label 'b' names no feature"),
    ("features: [{name: a, type: float}]\nflavour: x", "unknown top-level key(s) ['flavour']"),
    ("record_type: table\nfeatures: [{name: a, type: float}]", "unknown record_type 'table'"),
    ("record_type: sequence_example\ngroup_by: g\nsequence: [{name: a, type: float}]",
     "group_by 'g' names no context feature"),
    ("features: [{name: a, type: float}]\ncsv: {delimiter: ';;'}", "delimiter must be one character"),
    ("features: [", "not valid YAML"),
    # a key given twice: YAML keeps the last silently; a schema refuses it, naming the line
    ("features:\n  - {name: id, type: int64, type: string}", "line 2: 'type' is given twice in one mapping"),
    ("features:\n  - name: id\n    type: int64\n    name: x", "line 4: 'name' is given twice in one mapping "
                                                              "(first on line 2)"),
    ("features: [{name: a, type: float}]\nlabel: a\nlabel: a", "line 3: 'label' is given twice"),
])
def test_validation_errors_name_the_problem(text, message):
    with pytest.raises(SchemaError) as e:
        Schema.from_yaml(text, source="conf/x.yaml")
    assert message in str(e.value)
    assert "conf/x.yaml" in str(e.value)


def test_missing_schema_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_schema(str(tmp_path / "nope.yaml"))


def test_arrow_schema():
    s = Schema.from_yaml(TAXI)
    a = s.arrow_schema()
    assert a.field("fare").type == pa.float32()
    assert a.field("trips").type == pa.int64() and not a.field("trips").nullable
    assert a.field("tags").type == pa.list_(pa.string())
    assert a.field("raw").type == pa.binary()


def test_parse_spec_example():
    spec = parse_spec(Schema.from_yaml(TAXI))
    assert spec["fare"] == tf.io.FixedLenFeature([], tf.float32, default_value=0.0)
    assert spec["trips"] == tf.io.FixedLenFeature([], tf.int64)
    assert spec["emb"] == tf.io.FixedLenFeature([3], tf.float32, default_value=[0.0, 0.0, 0.0])
    assert spec["tags"] == tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64)


def test_parse_spec_sequence_example():
    ctx, seq = parse_spec(Schema.from_yaml(SESSIONS))
    assert ctx["country"] == tf.io.FixedLenFeature([], tf.string, default_value="?")
    assert seq["ts"] == tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True)
    assert seq["scores"] == tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64)


def test_group_by_is_needed_only_to_group_rows(tmp_path):
    """A sequence_example schema without group_by describes records (a DataFrame of array columns,
    the loader); converting CSV/JSON rows needs it, and the converters say so before any work."""
    from tfrecord_io.conversion.options import ConversionOptions

    path = tmp_path / "s.yaml"
    path.write_text("record_type: sequence_example\ncontext: [{name: g, type: string}]\n"
                    "sequence: [{name: a, type: float}]\n")
    schema = load_schema(str(path))
    assert schema.group_by is None and [f.name for f in schema.sequence] == ["a"]
    opts = ConversionOptions(inputs=("in.csv",), input_format="csv", schema=str(path), output=str(tmp_path / "out"))
    with pytest.raises(SchemaError, match="needs 'group_by' to convert csv rows"):
        opts.load_schema()


def test_load_schema_is_public_and_schema_load_a_deprecated_alias(tmp_path):
    import tfrecord_io
    from tfrecord_io.core.schema import Schema

    path = tmp_path / "s.yaml"
    path.write_text("features:\n  - {name: id, type: int64}\nlabel: id\ntask: regression\n")
    loaded = tfrecord_io.load_schema(str(path))
    assert loaded.label == "id" and loaded.task == "regression"
    with pytest.warns(DeprecationWarning, match="use tfrecord_io.load_schema"):
        assert Schema.load(path) == loaded


def test_a_yaml_merge_key_is_not_a_duplicate():
    """``<<: *base`` then a key of the base: YAML's override, not a key given twice."""
    s = Schema.from_yaml("features: [&a {name: a, type: float}, {<<: *a, name: b}]")
    assert [(f.name, f.type) for f in s.features] == [("a", "float"), ("b", "float")]
