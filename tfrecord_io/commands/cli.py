"""The ``tfrecord-io`` command line.

Each subcommand lives in the module that does its work; that module exposes
``configure(parser)`` and ``run(args) -> int``.  Modules are imported only when
their subcommand runs, so ``tfrecord-io --help`` never pays for TensorFlow,
Spark or Beam start-up.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (name, module, one-line help)
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("demo", "tfrecord_io.commands.demo", "the whole path on sample data: CSV -> TFRecords (Spark) -> inspect -> Keras training"),
    ("hdfs-local", "tfrecord_io.commands.hdfs_local",
     "start, stop or query a single-node HDFS on loopback (for tests and trying things out)"),
    ("flink-local", "tfrecord_io.commands.flink_local", "fetch, start, stop or query a Beam job server for Flink on loopback"),
    ("infer-schema", "tfrecord_io.commands.infer",
     "read a sample of CSV or JSON input and print an editable YAML schema"),
    ("convert", "tfrecord_io.commands.convert", "convert CSV/JSON (local or HDFS) to TFRecord files with Spark or Beam"),
    ("inspect", "tfrecord_io.commands.inspect", "show a TFRecord source's files, record count, schema and first records"),
    ("verify", "tfrecord_io.commands.verify", "check every record's CRCs, the manifest's counts and sizes, and the schema"),
    ("index", "tfrecord_io.commands.index", "write record indexes for TFRecord files others wrote (ours, or DALI's format)"),
    ("copy", "tfrecord_io.commands.copy", "copy files and directories between local disk and HDFS (put, get, cp)"),
    ("stats", "tfrecord_io.commands.stats", "per-feature statistics as TensorBoard summaries and an HTML report"),
    ("pack-env", "tfrecord_io.commands.pack_env", "pack a slim Python environment (no TensorFlow) for Spark executors on YARN"),
)


# Commands that read or write hdfs://: they take the keytab options (tfrecord_io.storage.credentials).
_HDFS_COMMANDS = ("convert", "infer-schema", "inspect", "verify", "stats", "copy")


def add_credential_arguments(parser: argparse.ArgumentParser) -> None:
    """``--principal``/``--keytab``: log in to a kerberized HDFS from a keytab, without kinit."""
    parser.add_argument("--principal", default=None, metavar="NAME@REALM",
                        help="Kerberos principal to log in to HDFS as, with --keytab (default: the ticket cache "
                             "of KRB5CCNAME, or $TFRECORD_IO_KERBEROS_PRINCIPAL)")
    parser.add_argument("--keytab", default=None, metavar="FILE", help="the principal's keytab (with --principal)")


def apply_credentials(args: argparse.Namespace) -> None:
    """Use ``--principal``/``--keytab`` in this process and the ones it starts; ValueError if wrong."""
    from tfrecord_io.storage import credentials

    if getattr(args, "principal", None) or getattr(args, "keytab", None):
        credentials.use_keytab(args.principal, args.keytab)


def version_lines() -> str:
    """``tfrecord-io --version``: the package's version, and which record core runs."""
    from importlib.metadata import PackageNotFoundError, version

    from tfrecord_io.core import native

    try:
        mine = version("tfrecord-io")
    except PackageNotFoundError:  # a --py-files zip: no installed metadata
        mine = "(not installed)"
    return f"tfrecord-io {mine}\nrecord core: {native.description()}"


class _Version(argparse.Action):
    """``--version``, worked out only when asked for (the record core is chosen on import)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_lines())  # on stdout, as argparse's own version action does
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfrecord-io",
        description="Turn CSV/JSON on HDFS or local disk into TFRecords, and stream them into training.",
    )
    parser.add_argument("--version", action=_Version,
                        help="print the version and which record core runs (native Rust, or numpy), then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, help_text in SUBCOMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module, _parser=p)
        # configure() is cheap: the modules keep their heavy imports inside run().
        importlib.import_module(module).configure(p)
        if name in _HDFS_COMMANDS:
            add_credential_arguments(p)
    return parser


# A module an extra installs -> that extra (setup.cfg's extras_require).
_EXTRAS = {"tensorflow": "tf", "keras": "tf", "tensorboard": "tf", "matplotlib": "tf", "apache_beam": "beam",
           "hdfs": "beam", "pyspark": "spark", "pandas": "spark"}


def missing_extra(e: ModuleNotFoundError) -> str | None:
    """The line that says which extra to install, for a missing engine module (None: another module)."""
    top = (e.name or "").split(".")[0]
    extra = _EXTRAS.get(top)
    if extra is None:
        return None
    return (f"this needs {top}, which this installation of tfrecord-io lacks: pip install \"tfrecord-io[{extra}]\" "
            f"(from a checkout: pip install \".[{extra}]\")")


def main(argv: list[str] | None = None) -> int:
    import os

    from tfrecord_io.commands import exits

    # TensorFlow's C++ start-up lines (oneDNN, CUDA stubs, "failed call to cuInit" on a machine without
    # a GPU) say nothing a user of these commands can act on; TF_CPP_MIN_LOG_LEVEL set by the user wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args, stray = build_parser().parse_known_args(argv)
    if stray:  # said by the command's own parser (argparse's top parser would say "tfrecord-io: error")
        args._parser.error(f"unrecognized arguments: {' '.join(stray)}")
    try:
        apply_credentials(args)
    except ValueError as e:
        return exits.fail(args.command, exits.message_of(e))
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except ModuleNotFoundError as e:
        why = missing_extra(e)
        if why is None:
            raise
        return exits.fail(args.command, why)


if __name__ == "__main__":
    sys.exit(main())
