"""The ``tfrecord-io`` command line: cli (the entry point) and one module per command."""
