"""The Hypothesis generators of the encoder and decoder tests (``test_codec.py``, ``test_arrow_decode.py``):
random schemas with rows of values for them, SequenceExample schemas with groups of steps, and the Arrow
batches our encoder takes.

* :func:`schema_and_rows`: an Example schema (every type, scalars and ``[-1]`` / ``[k]`` lists) and rows
  for it, a missing value as None;
* :func:`sequence_schema_and_groups`: a SequenceExample schema and groups (context values, steps);
* :func:`value_strategy` / :func:`step_strategy`: one feature's values / steps;
* :func:`schema_of`, :func:`batch_of`, :func:`sequence_batch`: a schema from features, rows and groups
  as the RecordBatch :func:`tfrecord_io.core.codec.encode_examples` takes;
* :func:`damaged`: serialized records with a few bytes changed, cut or inserted, and
  :func:`feature_messages`: ``tf.train.Feature`` messages built field by field, most of them
  invalid in one place (what a reader must refuse, or read as protobuf does);
* :func:`varint`, :func:`ld`: protobuf bytes by hand.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import strategies as st

from tfrecord_io.core.codec import encode_examples, encode_sequence_examples, row_errors
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


#: Bytes that mean something on the wire of these messages (tags, a varint's continuation, small
#: lengths), then any byte.
WIRE_BYTES = st.one_of(st.sampled_from([0x00, 0x01, 0x02, 0x04, 0x08, 0x0A, 0x10, 0x12, 0x1A, 0x22, 0x7F, 0x80, 0xFF]),
                       st.integers(0, 255))


@st.composite
def damaged(draw, records: list[bytes], most: int = 3) -> list[bytes]:
    """``records`` with up to ``most`` changes anywhere in them: a byte set to another value or made
    one more or less (a length off by one), a byte cut out or one inserted."""
    out = list(records)
    for _ in range(draw(st.integers(0, most))):
        held = [i for i, r in enumerate(out) if r]
        if not held:
            break
        i = draw(st.sampled_from(held))
        r = bytearray(out[i])
        at = draw(st.integers(0, len(r) - 1))
        op = draw(st.sampled_from(["set", "bump", "cut", "insert"]))
        if op == "set":
            r[at] = draw(WIRE_BYTES)
        elif op == "bump":
            r[at] = (r[at] + draw(st.sampled_from([1, 255]))) % 256
        elif op == "cut":
            del r[at]
        else:
            r.insert(at, draw(WIRE_BYTES))
        out[i] = bytes(r)
    return out


def varint(n: int) -> bytes:
    """``n`` as a protobuf varint (a negative one as its 64-bit two's complement, 10 bytes)."""
    n &= 2**64 - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte, the payload's length, the payload."""
    return bytes([tag]) + varint(len(payload)) + payload


def _field(tag: int, payload: bytes, off: int = 0) -> bytes:
    """:func:`ld` with a length ``off`` from the payload's (a damaged one)."""
    return bytes([tag]) + varint(max(len(payload) + off, 0)) + payload


@st.composite
def feature_messages(draw) -> bytes:
    """A ``tf.train.Feature``'s bytes as a serializer writes them (a bytes_list, float_list or
    int64_list of 0 to 40 values, or no kind), then, more often than not, changed in one place:
    every way its wire structure can be wrong (a length one off, a tag these messages do not
    have, a float payload not a multiple of 4 bytes, a varint cut or longer than 10 bytes, a
    stray byte) and the non-canonical ways protobuf reads (unpacked numbers, two lists)."""
    kind = draw(st.sampled_from([0x0A, 0x12, 0x1A, None]))  # bytes_list, float_list, int64_list, no kind
    n = draw(st.sampled_from([0, 1, 1, 2, 3, 40]))  # 40: past the one-byte lengths
    if kind == 0x0A:
        fields = [[0x0A, draw(st.binary(max_size=8))] for _ in range(n)]
    elif kind == 0x12:
        fields = [[0x0A, draw(st.binary(min_size=4 * n, max_size=4 * n))]] if n else []
    elif kind == 0x1A:
        values = draw(st.lists(st.integers(I64_MIN, I64_MAX) | st.integers(0, 127), min_size=n, max_size=n))
        fields = [[0x0A, b"".join(varint(v) for v in values)]] if n else []
    else:
        fields = []
    change = draw(st.sampled_from(["none", "length", "tag", "payload", "stray", "unpacked", "two-lists"]))
    at = draw(st.integers(-1, len(fields) - 1))  # -1: the kind field, else one of the list's fields
    off = [0] * (len(fields) + 1)
    extra = b""
    if change == "length":
        off[at] = draw(st.sampled_from([-1, 1, 2]))
    elif change == "tag" and at >= 0:
        fields[at][0] = draw(WIRE_BYTES)
    elif change == "tag":
        kind = draw(WIRE_BYTES)
    elif change == "payload" and fields:
        fields[-1][1] += draw(st.sampled_from([b"\x00", b"\x00\x00\x00", b"\x80", b"\xff" * 10 + b"\x01",
                                               b"\xff" * 9 + b"\x01", b"\x01" * 9 + b"\xff" * 11]))
    elif change == "stray":
        extra = draw(WIRE_BYTES).to_bytes(1, "little")
    elif change == "unpacked" and kind in (0x12, 0x1A) and fields:
        payload = fields.pop()[1]
        if kind == 0x12:
            fields = [[0x0D, payload[i:i + 4]] for i in range(0, len(payload), 4)]
        else:
            fields = [[0x08, payload]]
    body = b"".join(bytes([t]) + p if t in (0x0D, 0x08) else _field(t, p, off[i]) for i, (t, p) in enumerate(fields))
    feature = b"" if kind is None else _field(kind, body, off[-1])
    if change == "two-lists":
        feature += _field(draw(st.sampled_from([0x0A, 0x12, 0x1A])), b"")
    return feature + extra


@st.composite
def damaged_reads(draw, sequences: bool = False):
    """``(records, schema, asked)``: encoded Examples (``sequences``: SequenceExamples) of a random
    schema, some of them damaged (:func:`damaged`), and a non-empty set of its input features to
    read (column pruning)."""
    if sequences:
        schema, groups = draw(sequence_schema_and_groups())
        batch = sequence_batch(schema, groups)
        keep = [e is None for e in row_errors(batch, schema)]
        records = encode_sequence_examples(batch.filter(pa.array(keep, pa.bool_())), schema).to_pylist()
        names = [f.name for f in schema.input_features]
    else:
        schema, rows = draw(schema_and_rows(max_rows=12))
        records = encode_examples(batch_of(schema, rows), schema).to_pylist()
        names = [f.name for f in schema.features]
    asked = draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True))
    return draw(damaged(records)), schema, asked
