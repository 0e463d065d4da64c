"""Real clusters on loopback for tests and trying things out (Apache Hadoop's own mini clusters)."""
