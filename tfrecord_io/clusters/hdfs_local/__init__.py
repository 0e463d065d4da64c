"""A real HDFS on 127.0.0.1 for tests and trying things out: by default one NameNode + one DataNode;
optionally several DataNodes, two NameNodes in one HA nameservice, and Kerberos.

The cluster is Apache Hadoop's own ``MiniDFSCluster`` from the 3.5.0 jars, which Maven resolves
from Maven Central into ``${TFRECORD_IO_CACHE:-~/.cache/tfrecord-io}/hadoop-3.5.0/jars`` (see
:func:`fetch_jars`).  ``MiniHdfs.java`` is run with Java's single-file source mode, so there is
no build step: a fresh machine needs only ``java`` (17+) and ``mvn``.

The cluster listens on loopback only, serves both native RPC (``hdfs://127.0.0.1:PORT``) and
WebHDFS (``http://127.0.0.1:PORT``), enforces permissions (the superuser is the OS user that
started it), uses replication 1 (``min(N, 3)`` with N DataNodes) and by default 1 MiB blocks (so
multi-MB test files span several blocks; ``block_size=HDFS_DEFAULT_BLOCK_SIZE`` gives HDFS's own
128 MiB, as the loader benchmark does).

Options of :func:`start` (any combination):

* ``datanodes=N``: N DataNodes, default replication ``min(N, 3)``.  :meth:`LocalHdfs.stop_datanode`
  stops one while clients run; the NameNodes count it dead at once (not after the usual ten-minute
  heartbeat expiry).
* ``ha=True``: two NameNodes, ``nn1`` (active) and ``nn2`` (standby), in the nameservice
  ``minidfs-ns`` (``MiniDFSNNTopology.simpleHATopology()``, shared edits in ``data/``), so
  ``namenode_uri`` is ``hdfs://minidfs-ns`` and the conf dir lists both.
  :meth:`LocalHdfs.failover` shuts the active one down and makes the standby active; a second
  failover first starts the stopped one again as the standby, then fails back.
* ``kerberos=True``: a KDC (Hadoop's MiniKdc, Apache Kerby) on 127.0.0.1 over TCP, realm
  ``EXAMPLE.COM``, and the cluster in secure mode: RPC authenticated with Kerberos and authorized
  (``security.client.protocol.acl`` admits the user's principal and ``guest``), block access tokens, SASL on
  the DataNodes' data transfer, ``data_protection`` (``authentication``, ``integrity`` or
  ``privacy``) for both ``dfs.data.transfer.protection`` and ``hadoop.rpc.protection``.  The
  services run as ``hdfs/localhost@EXAMPLE.COM`` (WebHDFS's SPNEGO as ``HTTP/localhost``): clients
  on both sides name the NameNode host ``localhost`` with no DNS canonicalization, as the generated
  ``krb5.conf`` says.  The OS user gets a principal ``<user>@EXAMPLE.COM`` (the HDFS superuser,
  as the OS user is without Kerberos), a keytab, and a ticket cache obtained in the JVM (no
  ``kinit`` needed).  :meth:`LocalHdfs.env` gives the variables that make any client use them
  (``HADOOP_CONF_DIR``, ``KRB5_CONFIG``, ``KRB5CCNAME``); :class:`KerberosInfo` has the rest,
  including an expired ticket and a principal the NameNode refuses, for negative tests.  The
  NameNode's JMX (readiness) stays unauthenticated; WebHDFS needs SPNEGO.

The running JVM takes actions from other processes (failover, stopping a DataNode) through request
files in ``control/`` that it polls; the calls here wait for its answer.

Layout of a base dir::

    cluster.json   pid, ports and options of the running cluster (rewritten by the JVM after
                   every action)
    conf/          generated HADOOP_CONF_DIR (core-site.xml, hdfs-site.xml; yarn-site.xml with YARN)
    control/       requests to the JVM and its answers
    data/          NameNode and DataNode storage (emptied by every start)
    kerberos/      with ``kerberos=True``: krb5.conf, keytabs, ticket caches, the KDC's work dir
    hdfs.log       the JVM's output
    yarn/          with ``yarn=True``: the YARN JVM's yarn.json, yarn.log and work dir

YARN (``start(..., yarn=True)``, or :func:`start_yarn` next to any running :class:`LocalHdfs`):
a ResourceManager and a NodeManager in a second JVM, Hadoop's own ``MiniYARNCluster`` from the
same jars (``MiniYarn.java``), hosts named ``localhost``, free ports, one queue ``root.default``
(the CapacityScheduler), a NodeManager of 6 GiB and 4 vcores by default with the containers'
memory checks off, 256 MiB minimum allocation.  Containers run as the OS user with the
NodeManager's ``PATH`` and ``JAVA_HOME``; their logs stay under :attr:`LocalYarn.container_logs`.

:func:`start` returns a :class:`LocalHdfs` handle; :func:`status` and :func:`stop` find a running
cluster from any process through ``cluster.json``.

One job per module, their public names all here: ``hadoop`` (the Hadoop jars Maven fetches, the
launchers' JVM options, :class:`HdfsLocalError`), ``handle`` (:class:`LocalHdfs` and what it asks
the JVM: JMX readiness, control requests), ``site_xml`` (the generated conf dir), ``hdfs`` (the
HDFS's start, status, failover and stop) and ``yarn`` (the YARN's, and :class:`LocalYarn`).
"""

from __future__ import annotations

from tfrecord_io.clusters.hdfs_local.hadoop import HADOOP_VERSION, HdfsLocalError, fetch_jars
from tfrecord_io.clusters.hdfs_local.handle import DataNode, Failover, KerberosInfo, LocalHdfs, NameNode
from tfrecord_io.clusters.hdfs_local.hdfs import (
    DATA_PROTECTION_LEVELS, DEFAULT_TICKET_LIFETIME, HDFS_DEFAULT_BLOCK_SIZE, MAX_DATANODES, TEST_BLOCK_SIZE,
    default_base_dir, failover, start, status, stop, stop_datanode,
)
from tfrecord_io.clusters.hdfs_local.yarn import (
    YARN_MIN_ALLOCATION_MB, YARN_NM_MEMORY_MB, YARN_NM_VCORES, LocalYarn, start_yarn, stop_yarn, yarn_status,
)

__all__ = [
    "DATA_PROTECTION_LEVELS", "DEFAULT_TICKET_LIFETIME", "HADOOP_VERSION", "HDFS_DEFAULT_BLOCK_SIZE", "MAX_DATANODES",
    "TEST_BLOCK_SIZE", "YARN_MIN_ALLOCATION_MB", "YARN_NM_MEMORY_MB", "YARN_NM_VCORES",
    "DataNode", "Failover", "HdfsLocalError", "KerberosInfo", "LocalHdfs", "LocalYarn", "NameNode",
    "default_base_dir", "failover", "fetch_jars", "start", "start_yarn", "status", "stop",
    "stop_datanode", "stop_yarn", "yarn_status",
]
