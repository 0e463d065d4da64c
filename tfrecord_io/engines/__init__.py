"""Engine adapters, one per engine, each running a :class:`~tfrecord_io.conversion.plan.Plan` or reading
an output with the rules decided below them: spark (the spark-submit job), spark_datasource
(``df.write`` / ``spark.read`` ``.format("tfrecord")``, and the job's Spark-read formats),
spark_columns (which Spark column becomes which feature), beam (the Beam pipeline), loader (the
tf.data loader, a package of its own), resume (Keras' BackupAndRestore resuming mid-epoch),
keras_inputs (Keras inputs and preprocessing from the schema), batches (numpy or Arrow batches
without TensorFlow), reader_options (the options both readers share) and quiet_tf (TensorFlow
imported without its start-up lines).

Each adapter imports its engine itself: beam, spark_datasource and resume at their top (their
classes subclass Beam's, Spark's and Keras'), the others inside the functions that need it.
Nothing below this layer imports an adapter, and nothing imports one before it is used: ``import
tfrecord_io`` loads its public names on first access, the CLI imports a command's module when it
runs, and :mod:`tfrecord_io.spark` / :mod:`tfrecord_io.beam` are the stable names users import.
"""
