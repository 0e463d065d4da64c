"""Real clusters on loopback for tests and trying things out, each in a JVM of its own: hdfs_local
(Apache Hadoop's own mini HDFS and YARN), flink (a Beam job server for Flink or Spark), and jvm
(what they share: the cache, finding Java, the JVM process)."""
