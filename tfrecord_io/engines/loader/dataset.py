"""The public calls: :func:`make_dataset`, :func:`input_fn`, :func:`steps_per_epoch`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
from typing import Sequence


from tfrecord_io.engines.quiet_tf import import_tensorflow
from tfrecord_io.storage import source_identity
from tfrecord_io.storage.partitions import select_partitions
from tfrecord_io.engines.loader.files import (_FileTable, _check_present, _counts_from_indexes, _read_as,
    _resolve_schema, resolve_source, select_features)
from tfrecord_io.engines.loader.offsets import _Lifetime
from tfrecord_io.engines.loader.options import LoaderOptions, _FOREVER, _autotune_on
from tfrecord_io.engines.loader.parse import _parser, _target_device, prefetch_to_gpu
from tfrecord_io.engines.loader.plan import _batches_per_epoch, _share
from tfrecord_io.engines.loader.readers import _declare_length, _global_pipeline, _window_pipeline
from tfrecord_io.engines.loader.state import LoaderResume, LoaderStats, _SameData, _Start


__all__ = ["make_dataset", "input_fn", "steps_per_epoch"]

log = logging.getLogger(__name__)


def make_dataset(source, *, batch_size: int, schema=None, input_context=None, stats: LoaderStats | None = None,
                 features: Sequence[str] | None = None, resume: LoaderResume | None = None,
                 partitions: dict | None = None, **options):
    """A ``tf.data.Dataset`` of parsed batches from ``source`` (see the package doc and :class:`LoaderOptions`).

    Yields a features dict, or ``(features, label)`` when the schema names a label.
    ``features``: parse and yield only these (and the label), e.g. the named inputs of a Keras
    model (Keras matches a dict by name, but only when it holds exactly the model's inputs).  The
    returned dataset carries ``loader_stats`` (a :class:`LoaderStats`; pass ``stats=`` to share
    one, e.g. across the pipelines of an :func:`input_fn`) and ``loader_resume`` (a
    :class:`LoaderResume`; ``resume=`` to share one).  ``partitions``: of a partitioned output
    (``--partition-by``), read only these, e.g. ``{"cut": "Ideal"}`` or ``{"cut": ["Ideal", "Good"]}``
    (:func:`tfrecord_io.storage.partitions.select_partitions`); the partition columns are features
    of the records like any other.
    """
    tf = import_tensorflow()

    opts = LoaderOptions.from_options("make_dataset", {"schema", "input_context", "stats", "features", "resume",
                                                       "partitions"}, batch_size=batch_size, **options)
    if stats is not None and not isinstance(stats, LoaderStats):
        raise TypeError(f"stats must be a LoaderStats, got {type(stats).__name__}")
    if resume is not None and not isinstance(resume, LoaderResume):
        raise TypeError(f"resume must be a LoaderResume, got {type(resume).__name__}")
    stats = stats if stats is not None else LoaderStats()
    resume = resume if resume is not None else LoaderResume()
    src = select_partitions(resolve_source(source, opts.compression), partitions)
    resolved_schema = select_features(_resolve_schema(schema, src), features)
    _check_present(resolved_schema, src)
    parse = _parser(*_read_as(resolved_schema, src), ragged=opts.ragged)
    batch = opts.batch_size
    if input_context is not None:
        batch = input_context.get_per_replica_batch_size(opts.batch_size)
    table = _FileTable(src.files, src.manifest)
    if opts.global_shuffle or (input_context is not None and any(f.records is None for f in src.files)):
        _counts_from_indexes(table)
    counts = table.counts()
    share = _share(counts, input_context, batch, opts.remainder)
    pipeline_files = None
    if input_context is not None and share is None:
        n, p = input_context.num_input_pipelines, input_context.input_pipeline_id
        log.warning("%s: record counts unknown (no _manifest.json, no record indexes): each of the %d input "
                    "pipelines reads every %d-th file, so they may yield different numbers of batches (give "
                    "the files an index with `tfrecord-io index`)", src.uri, n, n)
        pipeline_files = list(range(p, len(src.files), n))
    common_key = input_context is not None and input_context.num_input_pipelines > 1
    if common_key and opts.seed is None:  # every pipeline must cut the same order
        opts = dataclasses.replace(opts, seed=0)
    key = opts.seed if opts.seed is not None else secrets.randbits(62)
    start = _Start(int(key) & (2**63 - 1), opts.num_epochs or _FOREVER)
    per_epoch = _batches_per_epoch(counts, share, batch, opts.drop_remainder)
    data_identity = source_identity.identity(src)
    resume._add(start, per_epoch, data_identity, src.uri)
    same_data = _SameData(data_identity, src.uri)

    threads = None
    if opts.global_shuffle:
        epoch_fn, staged = _global_pipeline(table, src, opts, stats, share, batch)
    else:
        epoch_fn, threads, staged = _window_pipeline(table, opts, stats, share, batch, pipeline_files)
    # The head's element is what a checkpoint of the iterator keeps of its start: the epoch
    # arguments and the identity of the data they index.  Restored, epochs() runs again on the
    # saved element, and refuses one saved over other data (_SameData).
    identity_text = tf.constant(same_data.text)
    # The pipeline's functions have no Python control flow on tensors: AutoGraph's conversion of
    # each (the first make_dataset of a process pays it: 0.3-1 s measured on 2 CPUs) is skipped.
    plain = tf.autograph.experimental.do_not_convert
    head = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).map(
        plain(lambda _: tuple(tf.numpy_function(start, [], [tf.int64] * 4, stateful=True)) + (identity_text,)))
    epochs_per_iteration = opts.num_epochs or _FOREVER

    def epochs(key_, first, skip, token, saved_identity):
        key_, first, skip, token = (tf.reshape(t, []) for t in (key_, first, skip, token))
        first += tf.reshape(tf.numpy_function(same_data, [saved_identity], tf.int64, stateful=False), [])
        # (key, epoch, batches to skip: the first epoch's skip, then 0, token): a zip of built-in
        # datasets rather than a map, one function fewer to trace and instantiate.
        skips = tf.data.Dataset.from_tensors(skip).concatenate(
            tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat())
        return tf.data.Dataset.zip((tf.data.Dataset.from_tensors(key_).repeat(),
                                    tf.data.Dataset.range(first, first + epochs_per_iteration), skips,
                                    tf.data.Dataset.from_tensors(token).repeat()))

    ds = _declare_length(head.flat_map(plain(epochs)).flat_map(plain(epoch_fn)), per_epoch, opts.num_epochs)
    if threads is not None:
        ds = ds.with_options(threads)
    ds = ds.map(plain(parse), num_parallel_calls=tf.data.AUTOTUNE, deterministic=opts.is_deterministic)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    tuning = tf.data.Options()
    tuning.autotune.enabled = _autotune_on(opts.autotune)
    # The Python steps are pure functions of their inputs or keep their state outside the graph
    # (see "Checkpointing" in the package doc): an iterator's checkpoint is its tf.data state.
    tuning.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    # tf.data's static rewrites of the pipeline's graph take ~50 ms of each new iterator's start on
    # 2 CPUs (its many small functions) and gain nothing here: parallelism and prefetching are
    # placed by hand (same throughput with and without them, BENCHMARKS.md).  with_options() turns
    # them back on.
    tuning.experimental_optimization.apply_default_optimizations = False
    ds = ds.with_options(tuning)
    if input_context is None:
        ds = prefetch_to_gpu(ds, opts.prefetch_to_device)
    else:
        _target_device(opts.prefetch_to_device, input_context, ds.element_spec)  # rejects True / a device
    from tfrecord_io.engines.loader.errors import LeadingErrorsDataset

    if not isinstance(ds, LeadingErrorsDataset):  # (prefetch_to_gpu wraps what it copies to the GPU itself)
        ds = LeadingErrorsDataset(ds)  # its iterators raise the loader's errors with our line first
    ds.loader_stats = stats
    ds.loader_resume = resume
    if staged is not None:
        ds._tfrecord_io_lifetime = _Lifetime([staged])
    return ds


def input_fn(source, **options):
    """A ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``.

    ``options`` are :func:`make_dataset`'s (``batch_size`` is the global batch size); each input
    pipeline reads its equal share of each epoch's records (see "Equal work per input pipeline"
    in the package doc) with the per-replica batch size.  The source is resolved (manifest read)
    once, here; ``dataset_fn.loader_stats`` counts for all pipelines, ``dataset_fn.loader_resume``
    steers them all (:class:`tfrecord_io.engines.resume.BackupAndRestore`).
    """
    if "input_context" in options:
        raise TypeError("input_fn() passes input_context itself; do not give it")
    if "batch_size" not in options:
        raise TypeError("input_fn() needs batch_size= (the global batch size)")
    LoaderOptions.from_options("input_fn", {"schema", "stats", "features", "resume", "partitions"},
                               **options)  # fail here, not per worker
    src = select_partitions(resolve_source(source, options.get("compression", "auto")), options.pop("partitions", None))
    _resolve_schema(options.get("schema"), src)
    stats = options.pop("stats", None) or LoaderStats()
    resume = options.pop("resume", None) or LoaderResume()

    def dataset_fn(input_context):
        return make_dataset(src, input_context=input_context, stats=stats, resume=resume, **options)

    dataset_fn.loader_stats = stats
    dataset_fn.loader_resume = resume
    dataset_fn.source = src
    return dataset_fn


def steps_per_epoch(source, batch_size: int, input_context=None, *, drop_remainder: bool = False,
                    remainder: str = "drop", partitions: dict | None = None) -> int:
    """Batches per epoch, from the manifest's record counts (no data is read).

    Without ``input_context``: exactly the batches one epoch of ``make_dataset(source,
    batch_size=batch_size, drop_remainder=...)`` yields: ``ceil(records / batch_size)``
    (``floor`` with ``drop_remainder``).  With one: the global steps of an epoch, which every
    input pipeline of ``input_fn(source, batch_size=batch_size, remainder=...)`` fills with full
    per-replica batches for all its replicas: ``records // batch_size`` (``remainder="drop"``) or
    ``ceil(records / batch_size)`` (``"pad"``), ``batch_size`` being the global batch.
    """
    LoaderOptions(batch_size=batch_size, remainder=remainder)
    src = select_partitions(resolve_source(source), partitions)
    if src.total_records is None:
        raise ValueError(f"steps_per_epoch needs record counts from a _manifest.json; {src.uri} "
                         f"is not an output directory of tfrecord-io (count the records, or use "
                         f"num_epochs=None with your own steps)")
    total = src.total_records
    if input_context is None:
        return total // batch_size if drop_remainder else math.ceil(total / batch_size)
    per_replica = input_context.get_per_replica_batch_size(batch_size)
    share = _share([total], input_context, per_replica, remainder)
    pipelines = input_context.num_input_pipelines
    return share.records // (per_replica * max(1, input_context.num_replicas_in_sync // pipelines))


make_dataset.__signature__ = LoaderOptions.signature(make_dataset)  # help() and IDEs list every option
