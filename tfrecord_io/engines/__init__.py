"""Engine adapters, one per engine, each running a :class:`~tfrecord_io.conversion.plan.Plan` or reading
an output with the rules decided below them: spark (the spark-submit job), spark_datasource
(``df.write`` / ``spark.read`` ``.format("tfrecord")``, and the job's Spark-read formats), beam (the
Beam pipeline), tfdata (the tf.data loader) and keras_inputs (Keras inputs and preprocessing from
the schema).

Each adapter imports its engine itself: beam and spark_datasource at their top (their classes
subclass Beam's and Spark's), spark, tfdata and keras_inputs inside the functions that need it.
Nothing below this layer imports an adapter, and nothing imports one before it is used: ``import
tfrecord_io`` loads its public names on first access, the CLI imports a command's module when it
runs, and :mod:`tfrecord_io.spark` / :mod:`tfrecord_io.beam` are the stable names users import.
"""
