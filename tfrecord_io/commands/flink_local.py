"""``tfrecord-io flink-local fetch|start|stop|status``: a Beam job server for Flink (or Spark) on loopback.

Each action is a subcommand with its own flags: ``tfrecord-io flink-local start --help`` lists
start's only.  Kept import-light: ``configure`` runs for every ``tfrecord-io --help``.
"""

from __future__ import annotations

import argparse

from tfrecord_io.commands import exits
from tfrecord_io.commands.actions import ActionParser

_NOTE = """\
--runner spark does the same for Beam's Spark runner 2.62.0 with Spark 3.5.1 (local[2]; about
300 MB of jars).  --dir defaults to ${TFRECORD_IO_CACHE:-~/.cache/tfrecord-io}/RUNNER-local.
Needs Java 17 and Maven.  See docs/running-on-flink.md.
"""

# (action, its line in `flink-local --help`, its description in `flink-local ACTION --help`)
_ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("fetch", "only download the job server's jars with Maven (`start` does this too)",
     "Download the Beam Flink runner 2.62.0 and Flink 1.19.0 jars with Maven (about 150 MB; needs\n"
     "`mvn`) and write the jar for --flink_job_server_jar; `start` does this too."),
    ("start", "start Beam's job server in the background and print the Beam options to use",
     "Start Beam's Flink job server (Flink master [local]: a MiniCluster in its JVM) on 127.0.0.1 in\n"
     "the background, wait until it is ready, and print the Beam options to use."),
    ("stop", "shut it down", "Shut the job server down."),
    ("status", "print its options (exit status 1 if it is not running)",
     "Print the options of the running job server (exit status 1 if none runs)."),
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "`tfrecord-io flink-local ACTION --help` lists that action's flags.\n\n" + _NOTE
    # `flink-local --runner spark fetch` (flags before the action) worked before the actions had
    # parsers: still accepted, not shown; an action's own flag (default SUPPRESS) does not overwrite it
    parser.add_argument("--runner", choices=("flink", "spark"), default="flink", help=argparse.SUPPRESS)
    parser.add_argument("--dir", metavar="DIR", default=None, help=argparse.SUPPRESS)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=ActionParser)
    sub = {name: actions.add_parser(name, help=short, description=long,
                                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_NOTE)
           for name, short, long in _ACTIONS}
    for name, parser_ in sub.items():
        parser_.add_argument("--runner", choices=("flink", "spark"), default=argparse.SUPPRESS,
                             help="which Beam runner's job server (default: flink)")
        if name != "fetch":
            parser_.add_argument("--dir", metavar="DIR", default=argparse.SUPPRESS,
                                 help="base dir for logs, conf and state (default: see below)")
    sub["start"].add_argument("--port", type=int, default=0, help="job service port (default: a free one)")
    sub["start"].add_argument("--timeout", type=float, default=180.0,
                              help="seconds to wait for readiness (default: %(default)s)")


def _describe(h) -> str:
    return (f"  job endpoint: {h.job_endpoint}\n"
            f"  pid:          {h.pid}\n"
            f"  log:          {h.log_path}\n"
            f"Beam options:   {' '.join(h.pipeline_args())}")


def run(args: argparse.Namespace) -> int:
    from tfrecord_io.clusters import flink

    base = args.dir or flink.default_base_dir(args.runner)
    try:
        if args.action == "fetch":
            print(flink.fetch_jars(args.runner))
            print(f"--{args.runner}_job_server_jar={flink.job_server_jar(args.runner)}")
        elif args.action == "start":
            h = flink.start(base, timeout=args.timeout, detach=True, job_port=args.port, runner=args.runner)
            print(f"{h.runner} job server is ready, state in {h.base_dir}\n{_describe(h)}")
        elif args.action == "stop":
            stopped = flink.stop(base)
            print(f"stopped the job server in {base}" if stopped else f"no job server running in {base}")
        else:
            h = flink.status(base)
            if h is None:
                print(f"no job server running in {base}")
                return exits.FAILED
            print(f"{h.runner} job server in {h.base_dir} is {'ready' if h.is_ready() else 'NOT ready'}\n"
                  f"{_describe(h)}")
    except (flink.FlinkLocalError, TimeoutError, ValueError) as e:
        return exits.fail(f"flink-local {args.action}", exits.message_of(e), exits.FAILED)
    return exits.OK
