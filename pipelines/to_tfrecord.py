"""CSV / JSON Lines -> TFRecords with Apache Beam: the same as ``python -m tfrecord_io.beam``.

    python -m pipelines.to_tfrecord --input URI[,URI...] --format csv|json --schema PATH_OR_URI \
        --output URI [the job's options, as jobs/to_tfrecord.py] \
        [Beam pipeline options: --runner, --direct_num_workers, --hdfs_host, --hdfs_port, ...]

Kept as a thin script for source checkouts; all logic is in ``tfrecord_io.engines.beam`` and
``tfrecord_io.commands.convert`` (exit status as there).
"""

from __future__ import annotations

import sys

from tfrecord_io.commands.convert import beam_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
