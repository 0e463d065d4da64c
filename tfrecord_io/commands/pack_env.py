"""``tfrecord-io pack-env OUT.tar.gz``: a slim Python environment for Spark executors on YARN.

Spark executors only encode and frame bytes, so what they need is the core of this package
(numpy, pyarrow, google-crc32c, pyyaml, hdfs-native); pandas is added for the driver, which
PySpark makes check for it when the job calls ``mapInArrow`` (so that in cluster mode the driver
runs from the same archive; executors and the DataFrame writer work without it).  No
TensorFlow and no pyspark (YARN containers get pyspark and py4j from the ``pyspark.zip`` and
``py4j-*.zip`` that spark-submit ships from ``$SPARK_HOME/python/lib``).  This builds that
environment as a venv of the running interpreter's Python, with ``tfrecord_io`` itself copied
in (so no ``--py-files`` is needed; ``--no-package`` leaves it out), and packs it as a tar.gz to
ship with ``--archives``::

    tfrecord-io pack-env tfrecord-io-env.tar.gz
    spark-submit --master yarn --deploy-mode cluster \\
        --archives tfrecord-io-env.tar.gz#env \\
        --conf spark.pyspark.python=./env/bin/python \\
        --conf spark.yarn.appMasterEnv.PYSPARK_PYTHON=./env/bin/python \\
        jobs/to_tfrecord.py ...

Like every packed venv, the archive holds the libraries but not the Python interpreter itself:
``env/bin/python`` links to the interpreter the venv was made from (``--python``, default the
one running this command), which must exist at the same path on every NodeManager host (for
hosts without it, pack a conda environment with conda-pack instead).  The packages are the exact
versions this installation of tfrecord-io pins, downloaded by pip (from PyPI or the index pip is
configured for).  The size of the result is printed; see BENCHMARKS.md for what it costs per
application.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from tfrecord_io.commands import exits
from tfrecord_io.storage import fs

#: Beyond the core requirements: pandas (pinned as in the ``[spark]`` extra), which PySpark 4.3
#: requires in the *driver* of a job that calls ``mapInArrow`` ("[PACKAGE_NOT_INSTALLED] Pandas >=
#: 2.2.0 must be installed"); executors' Python workers run without it.
SPARK_WORKER_EXTRAS = ("pandas",)
#: Never in the slim environment, whatever asks for them.
EXCLUDED = ("tensorflow", "pyspark", "apache-beam")
#: Parts of installed packages that nothing imports at run time.
_PRUNE_DIRS = ("tests", "include", "__pycache__")
_PRUNE_TOP = ("pip", "setuptools", "_distutils_hack")


class PackEnvError(RuntimeError):
    """The slim environment could not be built or packed (the message says which step and why)."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("Ship it with: spark-submit --archives OUT.tar.gz#env --conf "
                     "spark.pyspark.python=./env/bin/python ...  (docs/running-on-yarn.md)")
    parser.add_argument("output", metavar="OUT.tar.gz", help="the archive to write")
    parser.add_argument("--python", default=None, metavar="PYTHON",
                        help="the interpreter to make the venv from; it must exist at the same path on "
                             "the cluster's hosts (default: the one running this command)")
    parser.add_argument("--no-package", action="store_true",
                        help="leave tfrecord_io out (ship it with --py-files instead)")
    parser.add_argument("--with", dest="extra", action="append", default=[], metavar="REQUIREMENT",
                        help="another requirement to install (repeatable), e.g. --with 'scipy==1.16.0'")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT.tar.gz if it exists")


def requirements(extra: list[str] = ()) -> list[str]:
    """The pinned requirements of the slim environment: this installation's core requirements,
    pandas as the ``[spark]`` extra pins it, and ``extra``."""
    from importlib import metadata

    try:
        declared = metadata.requires("tfrecord-io") or []
    except metadata.PackageNotFoundError as e:
        raise PackEnvError("tfrecord-io is not installed in this Python (pip install it, then run "
                           "pack-env from that environment): its pinned requirements are unknown") from e
    core, spark = [], {}
    for req in declared:
        spec, _, marker = req.partition(";")
        spec = spec.strip()
        name = re.split(r"[\[<>=!~ ]", spec, maxsplit=1)[0].lower()
        if not marker.strip():
            core.append(spec)
        elif re.search(r"""extra\s*==\s*["']spark["']""", marker):
            spark[name] = spec
    picked = core + [spark[n] for n in SPARK_WORKER_EXTRAS if n in spark]
    for req in extra:
        name = re.split(r"[\[<>=!~ ]", req.strip(), maxsplit=1)[0].lower()
        if name in EXCLUDED:
            raise PackEnvError(f"{name} does not belong in the executors' slim environment")
        picked.append(req.strip())
    return picked


def _run(cmd: list[str], what: str, timeout: float) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise PackEnvError(f"{what} did not finish within {timeout:.0f}s: {' '.join(cmd)}") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise PackEnvError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def _site_packages(env: Path) -> Path:
    found = sorted(env.glob("lib/python3*/site-packages"))
    if len(found) != 1:
        raise PackEnvError(f"expected one lib/python3*/site-packages in {env}, found {found}")
    return found[0]


def _prune(site: Path) -> None:
    for name in _PRUNE_TOP:
        for p in site.glob(name):
            shutil.rmtree(p, ignore_errors=True)
        for p in site.glob(f"{name}-*.dist-info"):
            shutil.rmtree(p, ignore_errors=True)
    for top in site.iterdir():
        if not top.is_dir() or top.name.endswith(".dist-info"):
            continue
        for p in sorted(top.rglob("*"), reverse=True):
            if p.is_dir() and p.name in _PRUNE_DIRS and p.exists():
                shutil.rmtree(p, ignore_errors=True)


def _copy_package(site: Path) -> None:
    root = Path(__file__).resolve().parents[1]  # the tfrecord_io package
    shutil.copytree(root, site / "tfrecord_io", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def build(output: str | os.PathLike, *, python: str | None = None, package: bool = True,
          extra: list[str] = (), overwrite: bool = False, log=print) -> dict:
    """Build the slim environment and pack it into ``output``; return what was built (path,
    bytes, unpacked bytes, requirements, seconds)."""
    out = Path(output).resolve()
    if not out.name.endswith((".tar.gz", ".tgz")):
        raise ValueError(f"{out.name}: the archive's name must end in .tar.gz or .tgz (YARN unpacks "
                         f"--archives by their extension)")
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists (--overwrite replaces it)")
    base_python = python or os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    if shutil.which(base_python) is None and not os.access(base_python, os.X_OK):
        raise ValueError(f"--python {base_python}: not an executable")
    reqs = requirements(list(extra))
    started = time.monotonic()
    if out.parent.exists() and not out.parent.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{out.parent} is a file, not a directory", str(out))
    fs.makedirs(str(out.parent))  # (a file further up is named as such)
    with tempfile.TemporaryDirectory(prefix="tfrecord-io-env-", dir=out.parent) as tmp:
        env = Path(tmp) / "env"
        log(f"pack-env: venv from {base_python}")
        _run([base_python, "-m", "venv", "--without-pip", str(env)], "creating the venv", 300)
        log(f"pack-env: installing {' '.join(reqs)}")
        # This Python's pip installs into the new venv: no pip inside the archive.
        _run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install",
              "--quiet", "--disable-pip-version-check", "--no-compile", "--only-binary=:all:", *reqs],
             "pip install", 1800)
        site = _site_packages(env)
        _prune(site)
        if package:
            _copy_package(site)
        probe = ("import importlib.util, sys; import numpy, pyarrow, yaml, google_crc32c, hdfs_native; "
                 + ("import tfrecord_io.core.codec, tfrecord_io.storage.fs; " if package else "")
                 + "bad = [m for m in ('tensorflow', 'pyspark') if importlib.util.find_spec(m)]; "
                   "sys.exit(f'in the slim environment: {bad}') if bad else None")
        _run([str(env / "bin" / "python"), "-I", "-c", probe], "checking the environment", 300)
        unpacked = sum(p.stat().st_size for p in env.rglob("*") if p.is_file() and not p.is_symlink())
        log(f"pack-env: packing {unpacked / 2**20:.0f} MiB")
        partial = Path(tmp) / out.name
        with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
            for p in sorted(env.iterdir()):
                tar.add(p, arcname=p.name)  # archive root = the venv: --archives X#env gives ./env/bin/python
        os.replace(partial, out)
    info = {"path": str(out), "bytes": out.stat().st_size, "unpacked_bytes": unpacked,
            "requirements": reqs, "package": package, "python": base_python,
            "seconds": round(time.monotonic() - started, 1)}
    return info


def run(args: argparse.Namespace) -> int:
    try:
        info = build(args.output, python=args.python, package=not args.no_package, extra=args.extra,
                     overwrite=args.overwrite, log=lambda m: print(m, file=sys.stderr))
    except (FileExistsError, ValueError) as e:
        return exits.fail("pack-env", exits.message_of(e), exits.USAGE)
    except OSError as e:  # the archive's folder is missing or not writable
        where = os.path.dirname(os.path.abspath(args.output))
        return exits.fail("pack-env", f"cannot write the archive {args.output} in {where}: "
                                      f"{e.strerror or exits.message_of(e)} (write it to a folder you can write to)",
                          exits.USAGE)
    except PackEnvError as e:
        return exits.fail("pack-env", exits.message_of(e), exits.FAILED)
    print(f"{info['path']}: {info['bytes'] / 2**20:.1f} MiB ({info['unpacked_bytes'] / 2**20:.0f} MiB unpacked), "
          f"Python {info['python']}, {' '.join(info['requirements'])}"
          f"{' + tfrecord_io' if info['package'] else ''}, built in {info['seconds']}s")
    return exits.OK
