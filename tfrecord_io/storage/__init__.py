"""Storage: where bytes live and how a conversion owns its output.

fs (local paths and hdfs:// behind one interface), inputs (listing input files, strict
decompression, Hadoop-style line ranges), output (the output contract: shards, manifest,
rejects, _SUCCESS, exactly-once commit), shard_cache (the loader's local cache of HDFS shards)."""
