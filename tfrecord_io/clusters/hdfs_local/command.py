"""``tfrecord-io hdfs-local start|stop|status|fetch``: a single-node HDFS (and YARN) on loopback.

Kept import-light: ``configure`` runs for every ``tfrecord-io --help``.
"""

from __future__ import annotations

import argparse
import sys

_HELP = """\
actions:
  start    start a NameNode + DataNode on 127.0.0.1 in the background, wait until it is
           ready, print its hdfs:// and WebHDFS addresses and the HADOOP_CONF_DIR to export;
           with --yarn also a ResourceManager + NodeManager (6 GiB, 4 vcores) on localhost,
           their yarn-site.xml in the same HADOOP_CONF_DIR (`spark-submit --master yarn`)
  stop     shut it down, YARN included (each start begins with an empty filesystem)
  status   print the addresses if it is running (exit status 1 if not)
  fetch    only download the Hadoop jars with Maven (needs `mvn`; `start` does this too)

--dir defaults to ${TFRECORD_IO_CACHE:-~/.cache/tfrecord-io}/hdfs-local.  Needs Java 17+ and
Maven; the first start downloads about 120 MB of Apache Hadoop 3.5.0 jars from Maven Central.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _HELP
    parser.add_argument("action", choices=("start", "stop", "status", "fetch"))
    parser.add_argument("--dir", metavar="DIR", default=None,
                        help="base dir for data, logs, conf and state (default: see below)")
    parser.add_argument("--port", type=int, default=0,
                        help="NameNode RPC port for start (default: a free one)")
    parser.add_argument("--http-port", type=int, default=0,
                        help="NameNode HTTP/WebHDFS port for start (default: a free one)")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds to wait for readiness on start (default: %(default)s)")
    parser.add_argument("--block-size", type=_size, default="1m", metavar="SIZE",
                        help="dfs.blocksize for start, in bytes or with k/m/g (default: 1m, so "
                             "that small files span blocks; HDFS's own default is 128m)")
    parser.add_argument("--yarn", action="store_true",
                        help="start: also start a local YARN (ResourceManager + NodeManager) on it")


def _size(text: str) -> int:
    """``"134217728"``, ``"128m"``, ``"1g"`` -> bytes (Hadoop's dfs.blocksize spellings)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    try:
        return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 134217728 or 128m)") from None


def _describe(h) -> str:
    return (f"  native RPC:   {h.namenode_uri}\n"
            f"  WebHDFS:      {h.webhdfs_url}\n"
            f"  superuser:    {h.user}\n"
            f"  pid:          {h.pid}\n"
            f"  log:          {h.log_path}\n"
            f"export HADOOP_CONF_DIR={h.conf_dir}")


def _describe_yarn(y) -> str:
    return (f"  YARN ResourceManager: {y.rm_address} (NodeManager {y.nm_memory_mb} MiB, "
            f"{y.nm_vcores} vcores)\n"
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
                                 yarn=args.yarn)
            y = hdfs_local.yarn_status(h.base_dir / "yarn") if args.yarn else None
            print(f"local HDFS {'and YARN are' if y else 'is'} ready, data in {h.base_dir}\n"
                  f"{_describe_yarn(y) if y else ''}{_describe(h)}")
        elif args.action == "stop":
            stopped = hdfs_local.stop(base)
            print(f"stopped the local HDFS (and its YARN, if any) in {base}" if stopped
                  else f"no local HDFS running in {base}")
        else:
            h = hdfs_local.status(base)
            if h is None:
                print(f"no local HDFS running in {base}")
                return 1
            y = hdfs_local.yarn_status(h.base_dir / "yarn")
            print(f"local HDFS in {h.base_dir} is {'ready' if h.is_ready() else 'NOT ready'}"
                  f"{', with YARN' if y else ''}\n{_describe_yarn(y) if y else ''}{_describe(h)}")
    except (hdfs_local.HdfsLocalError, TimeoutError, ValueError) as e:
        print(f"tfrecord-io hdfs-local {args.action}: {e}", file=sys.stderr)
        return 1
    return 0
