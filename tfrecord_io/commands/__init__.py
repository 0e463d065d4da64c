"""The ``tfrecord-io`` command line: cli (the entry point) and one module per command -- convert,
infer, inspect, verify, index, stats (with report: its TensorBoard summaries and HTML report), copy,
pack_env, demo (with demo_train), hdfs_local, flink_local -- and what they share: exits (the
exit-status contract and its error line), reading (a SOURCE's arguments, resolution and worker
pool), progress (the progress bar)."""
