"""Engine adapters, each importing its engine lazily: spark (the spark-submit job),
spark_datasource (df.write / spark.read .format("tfrecord")), beam (the Beam pipeline,
``python -m tfrecord_io.beam``), tfdata (the tf.data loader) and keras_inputs (Keras
inputs and preprocessing from the schema)."""
