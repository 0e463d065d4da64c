"""Runnable pipelines (``python -m pipelines.<name>``); the logic lives in ``tfrecord_io``."""
