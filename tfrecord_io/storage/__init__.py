"""Storage: where bytes live and how a conversion owns its output.

fs (local paths and hdfs:// behind one interface: the one place HDFS is reached), schema_io
(a schema from a path or URI), inputs (listing input files, strict decompression, Hadoop-style
line ranges), sources (TFRecord sources and their manifest, for every reader, each file checked against it),
output (the output contract: shards, manifest, rejects, _SUCCESS, exactly-once commit), lease
(one writer per output), shard_cache (the loader's
local cache of HDFS shards).  Imports no engine."""
