"""The generated ``HADOOP_CONF_DIR`` of a local cluster: ``core-site.xml`` and ``hdfs-site.xml`` for
its HDFS (addresses, HA nameservice, Kerberos settings), ``yarn-site.xml`` for a YARN next to it;
each file replaced whole, never seen half written."""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from tfrecord_io.clusters.hdfs_local.handle import LocalHdfs

__all__ = ["write_hdfs_conf", "write_xml", "write_yarn_conf"]


def write_xml(conf_dir: Path, name: str, props: dict[str, str]) -> None:
    body = "".join(f"  <property><name>{escape(k, False)}</name>"
                   f"<value>{escape(v, False)}</value></property>\n" for k, v in props.items())
    tmp = conf_dir / (name + ".tmp")
    tmp.write_text(f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')
    os.replace(tmp, conf_dir / name)


def write_hdfs_conf(h: LocalHdfs, block_size: int) -> None:
    core = {
        "fs.defaultFS": h.namenode_uri,
        # Fail fast instead of retrying for minutes when the cluster is gone.
        "ipc.client.connect.max.retries": "3",
        "ipc.client.connect.timeout": "10000",
    }
    if h.ha:
        ns = h.nameservice
        addresses = {"dfs.nameservices": ns,
                     f"dfs.ha.namenodes.{ns}": ",".join(nn.id for nn in h.namenodes),
                     f"dfs.client.failover.proxy.provider.{ns}":
                         "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider"}
        for nn in h.namenodes:
            addresses[f"dfs.namenode.rpc-address.{ns}.{nn.id}"] = nn.rpc_address
            addresses[f"dfs.namenode.http-address.{ns}.{nn.id}"] = nn.http_address
    else:
        addresses = {"dfs.namenode.rpc-address": h.active_namenode.rpc_address,
                     "dfs.namenode.http-address": h.active_namenode.http_address}
    site = {
        **addresses,
        "dfs.webhdfs.enabled": "true",
        "dfs.replication": str(h.replication),
        "dfs.blocksize": str(block_size),
        "dfs.client.use.datanode.hostname": "false",
    }
    if h.kerberos is not None:
        k = h.kerberos
        core.update({
            "hadoop.security.authentication": "kerberos",
            "hadoop.rpc.protection": k.data_protection,
            # For Java clients: principals map to user names as on the cluster.
            "hadoop.security.auth_to_local": k.auth_to_local,
        })
        site.update({
            "dfs.namenode.kerberos.principal": k.service_principal,
            "dfs.datanode.kerberos.principal": k.service_principal,
            # Without it a client (hdfs-native, Java's) skips SASL and the DataNodes refuse it.
            "dfs.data.transfer.protection": k.data_protection,
        })
    h.conf_dir.mkdir(parents=True, exist_ok=True)
    for name, props in (("core-site.xml", core), ("hdfs-site.xml", site)):
        write_xml(h.conf_dir, name, props)


def write_yarn_conf(conf_dir: Path, state: dict) -> None:
    secure = {"yarn.resourcemanager.principal": state["principal"],
              "yarn.nodemanager.principal": state["principal"]} if state.get("principal") else {}
    write_xml(conf_dir, "yarn-site.xml", {
        "yarn.resourcemanager.hostname": state["rm_address"].rsplit(":", 1)[0],
        "yarn.resourcemanager.address": state["rm_address"],
        "yarn.resourcemanager.scheduler.address": state["scheduler_address"],
        "yarn.resourcemanager.resource-tracker.address": state["resource_tracker_address"],
        "yarn.resourcemanager.admin.address": state["admin_address"],
        "yarn.resourcemanager.webapp.address": state["webapp_address"],
        "yarn.scheduler.minimum-allocation-mb": str(state["min_allocation_mb"]),
        "yarn.scheduler.maximum-allocation-mb": str(state["nm_memory_mb"]),
        "yarn.scheduler.maximum-allocation-vcores": str(state["nm_vcores"]),
        # Clients give up on a stopped cluster in seconds rather than retrying for 15 minutes.
        "yarn.resourcemanager.connect.max-wait.ms": "30000",
        "yarn.resourcemanager.connect.retry-interval.ms": "1000",
        **secure,
    })
