"""The tf.data loader: TFRecords written by tfrecord-io (or anyone) back into training.

A package, one job per module, lowest first; the first six need no TensorFlow and are tested
without it (``tests/test_loader_parts.py``)::

    options   LoaderOptions (make_dataset's keyword options, written once) and the constants
    state     LoaderStats (counters), LoaderResume (where the next iterator starts), the data check
    files     the source, the schema and the types read as, the files' record indexes
    plan      each epoch's work: which records each input pipeline reads, in which order
    checks    the length check of a segment's byte ranges, the end-of-segment check (corrupt files)
    offsets   the global shuffle's reader (records by offset)
    readers   the tf.data side of reading: byte ranges, interleave, shuffles, the declared length
    parse     records to tensors (parse spec, parser), the copy onto the GPU
    errors    the loader's errors raised with its own line first
    dataset   make_dataset, input_fn, steps_per_epoch

One call builds the whole input pipeline::

    from tfrecord_io import make_dataset, input_fn, steps_per_epoch

    ds = make_dataset("hdfs://nn:8020/data/trips", batch_size=1024)   # an output directory
    model.fit(ds, epochs=3)

    strategy.distribute_datasets_from_function(input_fn("/data/trips", batch_size=4096))

``source`` is one of

* an output directory of our jobs: its ``_manifest.json`` gives the files, the schema, the
  compression, the record counts and each shard's record index.  A directory without
  ``_SUCCESS`` (a job still running, or one that failed) is refused;
* a glob (``"/data/part-*.tfrecord.gz"``); names starting with ``_`` or ``.`` are left out;
* a single file, or a list of files;

on local disk, ``file://`` or ``hdfs://``.  Without a manifest, ``schema=`` is required.  Files
that others wrote get a record index from ``tfrecord-io index`` (:mod:`tfrecord_io.storage.index`);
the loader uses one wherever it finds it.

The pipeline, per input pipeline (``input_context``)::

    epochs: (key, epoch) for each epoch of each iterator     key = seed, or drawn once per dataset
      -> this pipeline's segments of the epoch               pure function of (key, epoch): the file
         (file, first record, count), in file order          order (seeded permutation when
                                                             shuffling); with an input_context an
                                                             equal share of the records (below)
      -> parallel interleave over segments (cycle_length files read at once; deterministic
         option; through the HDFS shard cache, each waits for its shard's download first)
             per segment: its byte ranges (from the index, or a walk), each checked before
                          TensorFlow opens it (below); whole small files in packs (below)
                          -> TFRecordDatasetV2 from each range's offset (CRC-checked), chunks of
                             1,024 records for the interleave -> end-of-segment check (Python
                             called at the segment's end only; corruption names the file and
                             offset; skip mode)
      -> shuffle records in windows of shuffle_buffer (seeded by key, epoch, window) [shuffle=True]
      -> batch (per-replica batch size) BEFORE parsing, per epoch: each epoch yields exactly
         ceil(records / batch) batches
      -> tf.io.parse_example / parse_sequence_example (vectorized, parallel)
      -> prefetch, and prefetch_to_device('/gpu:0') when a GPU is present

``shuffle="global"`` replaces everything before the batching: each epoch is a seeded
permutation of all the records (``tf.random.experimental.index_shuffle`` over positions, so
nothing of size N is held but the index), read record by record at the offsets the record
indexes give (a py_function of ``pread``; CRCs checked).  Uncompressed files only (a gzip
stream cannot be read from the middle); on ``hdfs://`` the files are first copied to local
disk, whole (``cache_dir``): ranged HDFS reads of single records run at ~3,000 records/s.

Checkpointing
-------------
Every iterator of ``make_dataset`` and of each ``input_fn`` pipeline can be saved with
``tf.train.Checkpoint(iterator=it)`` and restored in a new process, where it yields exactly the
batches the first one would have yielded next (with a ``seed``: the same order; without, the
order drawn for this dataset is part of the checkpoint).  Everything that decides what is read
is tf.data state -- the epochs are a ``Dataset.range``, file orders and shuffles stateless
functions of (key, epoch, position), the position in a segment scan state -- and the Python steps
(``numpy_function`` / ``py_function``: the range checks, the end-of-segment checks, the shard
cache's fetches) are pure functions of their inputs or keep their state outside the graph, so
the dataset sets ``experimental_external_state_policy = IGNORE`` and a restored pipeline re-runs
them (the shard cache downloads the shards the restored iterator asks for, from where it is).
``prefetch_to_device`` (added only when TensorFlow sees a GPU) wraps the dataset in a
multi-device iterator whose state tf.data cannot save: checkpoint the iterator of a dataset
built with ``prefetch_to_device=False``.  Keras' own ``BackupAndRestore(save_freq=N)`` restarts
an interrupted epoch from its first batch; :class:`tfrecord_io.engines.resume.BackupAndRestore`
resumes it at the next batch (each dataset has a ``loader_resume`` it steers).

Equal work per input pipeline
-----------------------------
With an ``input_context`` of N pipelines, each epoch's records (in the epoch's file order, or
its global permutation) are cut into N equal runs of ``steps x replicas_per_pipeline x
per-replica batch`` records, one per pipeline, with ``steps = records // global batch``
(``remainder="drop"``: the last ``records % global batch`` records of the epoch's order are not
read) or ``ceil(records / global batch)`` (``remainder="pad"``: the missing records are taken
again from the start of the epoch's order).  Every pipeline yields the same number of full
batches, every record is read once per epoch across them (but the remainder), and a pipeline
reads only its own byte ranges: a file shared by two pipelines is entered at the offset its
index gives (or, without one, at an offset found by walking its headers; compressed files are
read from their start).  All pipelines must agree on the order, so without a ``seed`` they
use seed 0.  :func:`steps_per_epoch` with the same ``input_context`` and ``remainder`` agrees.

The length check
----------------
TensorFlow's reader allocates a record's length before reading it: a length field of 2**40
with a valid length CRC (a crafted or mis-written file) kills the process (uncompressed files
only: for gzip and zlib its reader grows the record as data comes and ends with "truncated
record").  So TensorFlow never reads an uncompressed record whose length has not been checked
against what remains of the file: each file is read in byte ranges (the first of 1,024 records,
then growing to 65,536 records / 64 MiB), listed as the segment opens and read as a plain list
(no scan between them).  With the file's index, the list comes from the index and each range's
length fields are checked against the index's lengths (vectorized) just before TensorFlow opens
it, so the first batch waits for one range's check; without, the list comes from walking the
file's headers as the segment opens (once per file per process: later epochs reuse it), so the
first batch of an unindexed file waits for that walk.  A bad length is a
:class:`~tfrecord_io.core.framing.CorruptRecordError` naming the file and the offset; with
``on_corrupt="skip"`` TensorFlow reads the records before it.

Small files
-----------
Each file the interleave opens costs about 1 ms of tf.data's datasets and Python checks, however
few its records: 10,000 shards of 100 records took 4.6x one file of the same records.  So
whole files of at most 4 MiB (``PACK_FILE_BYTES``) that come one after another in the epoch's
order, of one compression, are read as a *pack* (up to 1,024 files and 32 MiB): one
``TFRecordDatasetV2`` over their list, one element of the interleave.  Before TensorFlow opens
any of them, one read of each file checks its size against the manifest, its length fields
(the length check, above: against its index, or by a walk of its headers) and, once per process,
its bytes against the manifest's CRC-32C; after, one end check compares the records and bytes
TensorFlow delivered with the files' sizes (gzip: ISIZE trailers) and counts, and when they
differ reads the files in turn to name the bad one and its offset.  Shuffling is unchanged (the
packs follow the epoch's shuffled file order; records are shuffled in windows as before).  Not
packed: files through the shard cache, parts of files (``input_context`` shares), zlib streams
without a record count, and every file in ``on_corrupt="skip"`` mode, where each file's records
before its bad one are handed on file by file.

``hdfs://`` on a TensorFlow without an HDFS filesystem (TF 2.21) goes through
:class:`tfrecord_io.storage.shard_cache.ShardCache`: shards are copied ahead of the reader into a bounded
local directory (at most ``cache_files`` shards on disk, default ``3 x cycle_length``) and
deleted once read.  The parallel interleave (``cycle_length`` default 2) is given the epoch's
segments at once; each of its workers waits for its shard's download as it starts reading it,
so a late download holds up one file, not the pipeline.  The wait sits inside the element
(tf.data makes interleave elements one at a time, so a wait while making one would hold up the
others), and the pipeline gets a private thread pool of CPUs + ``3 x cycle_length`` threads
(tf.data's default has one per CPU, and a waiting worker would take one from the parsing).
tf.data's parallel interleave opens ``2 x cycle_length`` files ahead of those it reads: those
are the look-ahead, and the reason for the ``3 x cycle_length`` bound.  Each epoch copies the
shards again; disk use never grows with the dataset.

What a batch holds
------------------
Examples: a dict ``{feature: tensor}``, or ``(features, label)`` when the schema names a label.
Scalars are ``[batch]``, ``[k]`` lists ``[batch, k]`` (missing ones take the schema default),
``[-1]`` lists are ``tf.RaggedTensor`` ``[batch, (n)]`` (missing or empty: an empty row).

SequenceExamples: the context features as above, plus each sequence feature padded to the
longest sequence in the batch, ``[batch, steps]`` (``[batch, steps, k]`` for ``[k]`` steps;
padding is 0 / ``b""``), with its length per example in ``features["<name>_length"]``
(int64 ``[batch]``).  ``[-1]`` step features stay ragged, ``[batch, (steps), (values)]``, with
``<name>_length`` their step counts.  With ``ragged=True`` every sequence feature is a
``tf.RaggedTensor`` ``[batch, (steps), ...]`` and there are no ``_length`` entries.  A label
that is a sequence feature keeps its ``<label>_length`` in the features.

Corrupt files
-------------
Every record's two CRCs are checked by ``TFRecordDataset`` as it reads.  Its own error
("corrupted record at 597") does not say which file, so each file's stream ends at its first
bad record and an end-of-segment check (record and byte counts against the file size, the
segment or the manifest; our own framing reader only when those do not settle it) finds where
and why:

* ``on_corrupt="error"`` (default): iteration fails with an error whose message names the file
  and the byte offset of the bad record (``CorruptRecordError: hdfs://.../part-00003-of-00008
  .tfrecord: corrupt TFRecord at byte offset 585: data CRC: ...``) and what to do.  Iterating
  the dataset raises it with that line first: an error that is both a ``CorruptRecordError``
  and TensorFlow's op error (:mod:`tfrecord_io.engines.loader.errors`); inside ``model.fit``
  TensorFlow's own error carries it, right after its ``{{function_node}}`` tag.
* ``on_corrupt="skip"``: the rest of that file is dropped (every record before the bad one is
  kept), a warning is logged and ``dataset.loader_stats`` counts it.  With
  ``shuffle="global"`` each bad record is dropped on its own.
"""

from __future__ import annotations

from tfrecord_io.engines.loader.dataset import make_dataset, input_fn, steps_per_epoch
from tfrecord_io.engines.loader.options import LoaderOptions, DEFAULT_SHUFFLE_BUFFER, AUTOTUNE_MIN_CPUS, CHUNK_RECORDS
from tfrecord_io.engines.loader.state import LoaderStats, LoaderResume, CorruptFile
from tfrecord_io.engines.loader.files import resolve_source, select_features
from tfrecord_io.engines.loader.parse import parse_spec, prefetch_to_gpu, tf_dtype
from tfrecord_io.engines.loader.readers import tf_can_open
from tfrecord_io.storage.sources import Source, SourceFile


__all__ = [
    "AUTOTUNE_MIN_CPUS", "CHUNK_RECORDS", "CorruptFile", "DEFAULT_SHUFFLE_BUFFER", "LoaderOptions", "LoaderResume",
    "LoaderStats", "Source", "SourceFile", "input_fn", "make_dataset", "parse_spec", "prefetch_to_gpu",
    "resolve_source", "select_features", "steps_per_epoch", "tf_can_open", "tf_dtype",
]
