"""``tfrecord-io hdfs-local start|stop|status|failover|stop-datanode|fetch``: a local HDFS (and
YARN) on loopback, optionally with several DataNodes, two NameNodes (HA) and Kerberos.

Each action is a subcommand with its own flags: ``tfrecord-io hdfs-local start --help`` lists
start's only.  Kept import-light: ``configure`` runs for every ``tfrecord-io --help``.
"""

from __future__ import annotations

import argparse

from tfrecord_io.commands import exits
from tfrecord_io.commands.actions import ActionParser

_NOTE = """\
--dir defaults to ${TFRECORD_IO_CACHE:-~/.cache/tfrecord-io}/hdfs-local.  Needs Java 17+ and
Maven; the first start downloads about 120 MB of Apache Hadoop 3.5.0 jars from Maven Central.
"""

# (action, its line in `hdfs-local --help`, its description in `hdfs-local ACTION --help`)
_ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("start", "start a local HDFS (and, with --yarn, YARN) in the background",
     "Start a NameNode + DataNode on 127.0.0.1 in the background, wait until it is ready, and print\n"
     "its hdfs:// and WebHDFS addresses and the variables to export.  Each start begins with an\n"
     "empty filesystem.\n\n"
     "--kerberos also prints KRB5_CONFIG and KRB5CCNAME (a ticket for <you>@EXAMPLE.COM, no kinit\n"
     "needed) and that principal's keytab.  --yarn writes yarn-site.xml into the same\n"
     "HADOOP_CONF_DIR (`spark-submit --master yarn`); with --kerberos the YARN is secure\n"
     "(yarn/localhost@EXAMPLE.COM; spark-submit needs the printed -Djava.security.krb5.conf,\n"
     "e.g. in SPARK_SUBMIT_OPTS)."),
    ("stop", "shut it down, YARN included", "Shut the local HDFS down, YARN included."),
    ("status", "print its addresses and options (exit status 1 if it is not running)",
     "Print the addresses and options of the running local HDFS (exit status 1 if none runs)."),
    ("failover", "(--ha) make the standby NameNode active",
     "Of a cluster started with --ha: shut the active NameNode down and make the standby active;\n"
     "the next failover starts the stopped one again and fails back to it."),
    ("stop-datanode", "stop one DataNode (--index I)",
     "Stop DataNode I (0-based, as started); the NameNodes count it dead at once."),
    ("fetch", "only download the Hadoop jars with Maven (`start` does this too)",
     "Only download the Apache Hadoop 3.5.0 jars with Maven (needs `mvn`) into\n"
     "${TFRECORD_IO_CACHE:-~/.cache/tfrecord-io}; `start` does this too."),
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "`tfrecord-io hdfs-local ACTION --help` lists that action's flags.\n\n" + _NOTE
    # `hdfs-local --dir D start` (--dir before the action) worked before the actions had parsers: still
    # accepted, not shown; an action's own --dir (default SUPPRESS) does not overwrite it
    parser.add_argument("--dir", metavar="DIR", default=None, help=argparse.SUPPRESS)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=ActionParser)
    sub = {name: actions.add_parser(name, help=short, description=long,
                                    formatter_class=argparse.RawDescriptionHelpFormatter,
                                    epilog=_NOTE if name != "fetch" else None)
           for name, short, long in _ACTIONS}
    for name in ("start", "stop", "status", "failover", "stop-datanode"):
        sub[name].add_argument("--dir", metavar="DIR", default=argparse.SUPPRESS,
                               help="base dir for data, logs, conf and state (default: see below)")
    for name, what in (("start", "start"), ("failover", "the failover"), ("stop-datanode", "the DataNode to stop")):
        sub[name].add_argument("--timeout", type=float, default=180.0,
                               help=f"seconds to wait for {what} (default: %(default)s)")

    start = sub["start"]
    start.add_argument("--port", type=int, default=0, help="NameNode RPC port (default: a free one)")
    start.add_argument("--http-port", type=int, default=0,
                       help="NameNode HTTP/WebHDFS port (default: a free one)")
    start.add_argument("--block-size", type=_size, default="1m", metavar="SIZE",
                       help="dfs.blocksize, in bytes or with k/m/g (default: 1m, so that small files span "
                            "blocks; HDFS's own default is 128m)")
    start.add_argument("--datanodes", type=int, default=1, metavar="N",
                       help="the number of DataNodes; replication min(N, 3) (default: %(default)s)")
    start.add_argument("--ha", action="store_true",
                       help="two NameNodes, nn1 active and nn2 standby, in the HA nameservice minidfs-ns "
                            "(hdfs://minidfs-ns)")
    start.add_argument("--kerberos", action="store_true",
                       help="a KDC (realm EXAMPLE.COM) and the cluster in secure mode")
    start.add_argument("--data-protection", default="authentication",
                       choices=("authentication", "integrity", "privacy"),
                       help="with --kerberos: dfs.data.transfer.protection and hadoop.rpc.protection "
                            "(default: %(default)s)")
    start.add_argument("--ticket-lifetime", type=_duration, default="24h", metavar="DURATION",
                       help="with --kerberos: how long the user's ticket is valid, in seconds or with "
                            "s/m/h/d (default: 24h)")
    start.add_argument("--yarn", action="store_true",
                       help="also a local YARN (ResourceManager + NodeManager, 6 GiB, 4 vcores) on localhost")

    sub["stop-datanode"].add_argument("--index", type=int, required=True, metavar="I",
                                      help="which DataNode (0-based, as started)")


def _size(text: str) -> int:
    """``"134217728"``, ``"128m"``, ``"1g"`` -> bytes (Hadoop's dfs.blocksize spellings)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    try:
        return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 134217728 or 128m)") from None


def _duration(text: str) -> int:
    """``"90"``, ``"60s"``, ``"10m"``, ``"24h"``, ``"7d"`` -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip().lower()
    try:
        return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 3600 or 1h)") from None


def _describe(h) -> str:
    live = sum(d.alive for d in h.datanodes)
    datanodes = (f"{len(h.datanodes)} DataNode{'s' if len(h.datanodes) != 1 else ''} "
                 f"({live} live), replication {h.replication}")
    options = [datanodes]
    if h.ha:
        options.append(f"HA nameservice {h.nameservice}: " + ", ".join(
            f"{nn.id} {nn.state} at {nn.rpc_address}" for nn in h.namenodes))
    if h.kerberos is not None:
        k = h.kerberos
        options.append(f"Kerberos realm {k.realm} (KDC {k.kdc}), data protection "
                       f"{k.data_protection}, services {k.service_principal}")
    lines = [f"  native RPC:   {h.namenode_uri}",
             f"  WebHDFS:      {h.webhdfs_url}{' (SPNEGO)' if h.kerberos else ''}",
             f"  superuser:    {h.user}",
             *(f"  cluster:      {o}" for o in options),
             f"  pid:          {h.pid}",
             f"  log:          {h.log_path}",
             *(f"export {name}={value}" for name, value in h.env().items())]
    if h.kerberos is not None:
        lines += [f"# principal: {h.kerberos.principal}", f"# keytab: {h.kerberos.keytab}",
                  f"# Java clients (e.g. SPARK_SUBMIT_OPTS): {h.kerberos.java_option}"]
    return "\n".join(lines)


def _describe_yarn(y) -> str:
    return (f"  YARN ResourceManager: {y.rm_address} (NodeManager {y.nm_memory_mb} MiB, "
            f"{y.nm_vcores} vcores){f', Kerberos {y.principal}' if y.principal else ''}\n"
            f"  YARN pid:     {y.pid}\n"
            f"  YARN log:     {y.log_path}\n"
            f"  containers' logs: {y.container_logs}\n")


def run(args: argparse.Namespace) -> int:
    from tfrecord_io.clusters import hdfs_local

    base = args.dir or hdfs_local.default_base_dir()
    try:
        if args.action == "fetch":
            print(hdfs_local.fetch_jars())
        elif args.action == "start":
            h = hdfs_local.start(base, port=args.port, http_port=args.http_port,
                                 timeout=args.timeout, detach=True, block_size=args.block_size,
                                 yarn=args.yarn, datanodes=args.datanodes, ha=args.ha,
                                 kerberos=args.kerberos, data_protection=args.data_protection,
                                 ticket_lifetime=args.ticket_lifetime)
            y = hdfs_local.yarn_status(h.base_dir / "yarn") if args.yarn else None
            print(f"local HDFS {'and YARN are' if y else 'is'} ready, data in {h.base_dir}\n"
                  f"{_describe_yarn(y) if y else ''}{_describe(h)}")
        elif args.action == "stop":
            stopped = hdfs_local.stop(base)
            print(f"stopped the local HDFS (and its YARN, if any) in {base}" if stopped
                  else f"no local HDFS running in {base}")
        elif args.action == "failover":
            f = hdfs_local.failover(base, timeout=args.timeout)
            print(f"{f.active} is the active NameNode now ({f.previous} shut down"
                  f"{f'; {f.active} was started again first' if f.restarted_previous else ''}), "
                  f"in {f.seconds:.1f}s")
        elif args.action == "stop-datanode":
            d = hdfs_local.stop_datanode(base, args.index, timeout=args.timeout)
            print(f"stopped DataNode {d.index} ({d.address})")
        else:
            h = hdfs_local.status(base)
            if h is None:
                print(f"no local HDFS running in {base}")
                return exits.FAILED
            y = hdfs_local.yarn_status(h.base_dir / "yarn")
            print(f"local HDFS in {h.base_dir} is {'ready' if h.is_ready() else 'NOT ready'}"
                  f"{', with YARN' if y else ''}\n{_describe_yarn(y) if y else ''}{_describe(h)}")
    except (hdfs_local.HdfsLocalError, TimeoutError, ValueError) as e:
        return exits.fail(f"hdfs-local {args.action}", exits.message_of(e), exits.FAILED)
    return exits.OK
