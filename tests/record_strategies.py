"""The Hypothesis generators of the encoder and decoder tests (``test_codec.py``, ``test_arrow_decode.py``):
random schemas with rows of values for them, SequenceExample schemas with groups of steps, and the Arrow
batches our encoder takes.

* :func:`schema_and_rows`: an Example schema (every type, scalars and ``[-1]`` / ``[k]`` lists) and rows
  for it, a missing value as None;
* :func:`sequence_schema_and_groups`: a SequenceExample schema and groups (context values, steps);
* :func:`value_strategy` / :func:`step_strategy`: one feature's values / steps;
* :func:`schema_of`, :func:`batch_of`, :func:`sequence_batch`: a schema from features, rows and groups
  as the RecordBatch :func:`tfrecord_io.core.codec.encode_examples` takes.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import strategies as st

from tfrecord_io.core.schema import Feature, Schema

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
TYPES = st.sampled_from(["int64", "float", "bytes", "string"])
#: Feature names that are any UTF-8 text, the empty name too (as ``"_"``), unique.
ANY_NAMES = st.lists(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12),
                     min_size=1, max_size=6, unique=True).map(lambda names: list(dict.fromkeys(n or "_" for n in names)))


def schema_of(*features: Feature, **kw) -> Schema:
    return Schema(features=tuple(features), **kw)


def value_strategy(f: Feature):
    """A value of feature ``f`` (a list for a list feature), or None (missing)."""
    base = {
        "int64": st.integers(I64_MIN, I64_MAX),
        "float": st.floats(width=32, allow_nan=True, allow_infinity=True),
        "bytes": st.binary(max_size=40),
        "string": st.text(max_size=20),
    }[f.type]
    if f.is_varlen:
        base = st.lists(base, max_size=6)
    elif f.fixed_length:
        base = st.lists(base, min_size=f.fixed_length, max_size=f.fixed_length)
    return st.one_of(st.none(), base)


@st.composite
def schema_and_rows(draw, names=None, max_rows: int = 25):
    """(schema, rows): scalars, ``[-1]``, ``[1]`` and ``[3]`` lists of any type.  ``names``: a strategy
    for the features' names (e.g. :data:`ANY_NAMES`); by default 1 to 5 features named ``f<i>_<type>``."""
    chosen = draw(names) if names is not None else None
    features = []
    for i in range(len(chosen) if chosen is not None else draw(st.integers(1, 5))):
        t = draw(TYPES)
        shape = draw(st.sampled_from([None, (-1,), (1,), (3,)]))
        features.append(Feature(chosen[i] if chosen is not None else f"f{i}_{t}", t, shape=shape))
    rows = draw(st.lists(st.fixed_dictionaries({f.name: value_strategy(f) for f in features}), max_size=max_rows))
    return schema_of(*features), rows


def batch_of(schema: Schema, rows: list[dict]) -> pa.RecordBatch:
    return pa.record_batch({f.name: pa.array([r[f.name] for r in rows], f.arrow_type()) for f in schema.features},
                           schema=schema.arrow_schema())


def step_strategy(f: Feature):
    """A sequence feature's steps (each a value of ``f``, never None), or None (no FeatureList)."""
    base = value_strategy(f)
    return st.one_of(st.none(), st.lists(base.filter(lambda v: v is not None), max_size=8))


@st.composite
def sequence_schema_and_groups(draw):
    """(schema, groups): 0 to 3 context features ``c<i>`` and 1 to 3 sequence features ``s<i>``."""
    def feature(name):
        return Feature(name, draw(TYPES), shape=draw(st.sampled_from([None, (-1,), (2,)])))

    context = tuple(feature(f"c{i}") for i in range(draw(st.integers(0, 3))))
    sequence = tuple(feature(f"s{i}") for i in range(draw(st.integers(1, 3))))
    schema = Schema(record_type="sequence_example", context=context, sequence=sequence)
    groups = draw(st.lists(st.fixed_dictionaries({**{f.name: value_strategy(f) for f in context},
                                                  **{f.name: step_strategy(f) for f in sequence}}), max_size=20))
    return schema, groups


def sequence_batch(schema: Schema, groups: list[dict]) -> pa.RecordBatch:
    cols = {f.name: pa.array([g[f.name] for g in groups], f.arrow_type()) for f in schema.context}
    cols.update({f.name: pa.array([g[f.name] for g in groups], pa.list_(f.arrow_type())) for f in schema.sequence})
    return pa.record_batch(cols)
