"""Storage: where bytes live and how a conversion owns its output.

fs (local paths and hdfs:// behind one interface: the one place HDFS is reached), credentials (who
this process is to HDFS: keytab, ticket cache, delegation tokens), schema_io (a schema from a path
or URI), inputs (listing input files, strict decompression, Hadoop-style line ranges), sources
(TFRecord sources and their manifest, for every reader, each file checked against it), manifest
(the output contract's names and the manifest reader), output (the output contract: shards,
manifest, rejects, _SUCCESS, exactly-once commit), replace (what ``--overwrite`` may remove, and a
commit that undoes itself), permissions (``--umask``, rejects no more readable than the input),
lease (one writer per output), partitions (Hive-style partition directories), index (record
indexes: where each record starts), shard_cache (the loader's local cache of HDFS shards),
source_identity (what a source's data is, for saved training positions).  Imports no engine."""
