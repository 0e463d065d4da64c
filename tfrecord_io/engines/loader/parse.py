"""From serialized records to tensors: the parse spec of a schema, the batch parser, and the
copy onto the GPU.
"""

from __future__ import annotations

from typing import Sequence


from tfrecord_io.core.schema import Feature, Schema


__all__ = ["tf_dtype", "parse_spec", "prefetch_to_gpu"]


def tf_dtype(f: Feature):
    """The TensorFlow dtype of a feature's values (bytes and string are both ``tf.string``)."""
    import tensorflow as tf

    return {"int64": tf.int64, "float": tf.float32}.get(f.type, tf.string)


def parse_spec(schema: Schema):
    """The ``tf.io.parse_example`` spec of ``schema``, or ``(context, sequence)`` specs for
    SequenceExamples (``tf.io.parse_sequence_example``).

    Scalars are ``FixedLenFeature([])`` (with the schema default when given: a record missing a
    scalar with no default fails to parse, naming the feature); ``[k]`` lists are
    ``FixedLenFeature([k])``; ``[-1]`` lists are ``RaggedFeature``.  Sequence features are
    ``FixedLenSequenceFeature`` (scalar/[k] steps) or ``RaggedFeature``.
    """
    import tensorflow as tf

    def spec(f: Feature, in_sequence: bool = False):
        dtype = tf_dtype(f)
        if f.is_varlen:
            return tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
        shape = [] if f.shape is None else list(f.shape)
        if in_sequence:
            return tf.io.FixedLenSequenceFeature(shape, dtype, allow_missing=True)
        default = f.default
        if isinstance(default, tuple):
            default = list(default)
        return tf.io.FixedLenFeature(shape, dtype, default_value=default)

    if schema.record_type == "example":
        return {f.name: spec(f) for f in schema.features}
    return ({f.name: spec(f) for f in schema.context},
            {f.name: spec(f, in_sequence=True) for f in schema.sequence})


def _parser(schema: Schema, casts: Sequence[str] = (), *, ragged: bool):
    """The batch -> features (or (features, label)) function; ``casts``: features parsed as int64
    and yielded as float32 (:func:`_read_as`)."""
    import tensorflow as tf

    label = schema.label
    if schema.record_type == "example":
        spec = parse_spec(schema)

        def parse(serialized):
            parsed = tf.io.parse_example(serialized, spec)
            for name in casts:
                parsed[name] = tf.cast(parsed[name], tf.float32)
            return parsed
    else:
        context_spec, sequence_spec = parse_spec(schema)
        names = {f.name for f in schema.input_features}
        if not ragged:
            clash = sorted(f"{s}_length" for s in sequence_spec if f"{s}_length" in names)
            if clash:
                raise ValueError(f"the schema has feature(s) {clash}, which clash with the sequence lengths "
                                 f"the loader adds; rename them or pass ragged=True")

        def parse(serialized):
            context, sequences, lengths = tf.io.parse_sequence_example(
                serialized, context_features=context_spec or None, sequence_features=sequence_spec)
            out = dict(context)
            for name in casts:
                if name in out:
                    out[name] = tf.cast(out[name], tf.float32)
                elif name in sequences:
                    sequences[name] = tf.cast(sequences[name], tf.float32)
            for name, value in sequences.items():
                is_ragged = isinstance(value, tf.RaggedTensor)
                if ragged:
                    out[name] = value if is_ragged else tf.RaggedTensor.from_tensor(value, lengths=lengths[name])
                else:
                    out[name] = value
                    out[f"{name}_length"] = value.row_lengths() if is_ragged else lengths[name]
            return out

    if label is None:
        return parse

    def parse_with_label(serialized):
        features = parse(serialized)
        target = features.pop(label)
        return features, target

    return parse_with_label


def _target_device(option, input_context, element_spec) -> str | None:
    import tensorflow as tf

    if option is False:
        return None
    if input_context is not None:
        if option == "auto":
            return None
        raise ValueError("prefetch_to_device cannot be combined with input_context: the distribution "
                         "strategy copies batches to its devices; leave prefetch_to_device='auto'")
    gpus = tf.config.list_logical_devices("GPU")
    if option == "auto":
        # dense numbers only: strings stay in host memory (a Keras StringLookup runs on the CPU)
        dense = all(isinstance(s, tf.TensorSpec) and s.dtype != tf.string for s in tf.nest.flatten(element_spec))
        return "/gpu:0" if gpus and dense else None
    if option is True:
        if not gpus:
            raise ValueError("prefetch_to_device=True but TensorFlow sees no GPU")
        return "/gpu:0"
    return option


def prefetch_to_gpu(dataset, device: bool | str = "auto"):
    """``dataset`` followed by ``tf.data.experimental.prefetch_to_device`` (``"auto"``: onto
    ``/gpu:0`` when TensorFlow sees a GPU and every tensor is dense and numeric; else ``dataset``
    unchanged).

    For pipelines that transform :func:`make_dataset`'s batches further: build it with
    ``prefetch_to_device=False``, add the transformations, then end with this (tf.data needs the
    copy to the device to be the last step).  ``device``: as ``make_dataset``'s ``prefetch_to_device``.
    """
    import tensorflow as tf

    target = _target_device(device, None, dataset.element_spec)
    if target is None:
        return dataset
    length = int(dataset.cardinality())
    prefetched = dataset.apply(tf.data.experimental.prefetch_to_device(target))
    if length == tf.data.UNKNOWN_CARDINALITY or int(prefetched.cardinality()) != tf.data.UNKNOWN_CARDINALITY:
        return prefetched
    from tfrecord_io.engines.loader.errors import LeadingErrorsDataset

    return LeadingErrorsDataset(prefetched, length=length)  # the copy to the device hides the length
