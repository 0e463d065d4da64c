"""The package works once pip-installed, outside the source checkout (issue #12, item 4).

The suite builds a wheel of this checkout, installs it (without dependencies) into a fresh venv
whose dependencies come from the test venv by a path entry, and runs the commands from a
directory far from the checkout: ``tfrecord_io`` must come from the wheel, and the Beam pipeline,
the demo's schema and every ``tfrecord-io`` command must be found there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from helpers import REPO
from schemas import ID_X, write_schema


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("installed")
    wheels = base / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(REPO)], check=True, capture_output=True, text=True, timeout=600)
    (wheel,) = wheels.glob("tfrecord_io-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Dependencies from the test venv: a plain path entry (its .pth files, among them the editable
    # install of this checkout, are not processed).
    Path(site, "test-venv-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site, str(wheel)],
                   check=True, capture_output=True, text=True, timeout=600)
    bindir = venv / "bin"
    (bindir / "tfrecord-io").write_text(f"#!{py}\nimport sys\nfrom tfrecord_io.commands.cli import main\nsys.exit(main())\n")
    (bindir / "tfrecord-io").chmod(0o755)
    return venv


TF_PACKAGES = ("tensorflow", "tensorboard", "keras", "tf_keras", "ml_dtypes", "tensorflow_io")


@pytest.fixture(scope="module")
def slim(installed, tmp_path_factory) -> Path:
    """A venv with the wheel and every dependency of the test venv EXCEPT TensorFlow (and
    TensorBoard, Keras): their files are not on its path, so ``import tensorflow`` fails there as it
    does on an executor installed with ``pip install "tfrecord-io[spark,beam]"``."""
    base = tmp_path_factory.mktemp("slim")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    source = Path(sysconfig.get_paths()["purelib"])
    for entry in source.iterdir():
        name = entry.name.lower()
        if name.startswith(TF_PACKAGES) or name.startswith(("tfrecord_io", "__editable__")) or entry.suffix == ".pth":
            continue
        (site / entry.name).symlink_to(entry)
    wheel = next((installed.parent / "wheels").glob("tfrecord_io-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, text=True, timeout=600)
    (venv / "bin" / "tfrecord-io").write_text(f"#!{py}\nimport sys\nfrom tfrecord_io.commands.cli import main\n"
                                             f"sys.exit(main())\n")
    (venv / "bin" / "tfrecord-io").chmod(0o755)
    return venv


def test_the_converters_work_without_tensorflow(slim, tmp_path):
    """Issue #14 item 3: the core, the Spark job, the DataFrame source and the Beam pipeline need no
    TensorFlow (executors and workers use this Python too)."""
    py, cli = str(slim / "bin" / "python"), str(slim / "bin" / "tfrecord-io")
    gone = _run(slim, py, "-c", "import tensorflow", cwd=tmp_path, check=False)
    assert gone.returncode != 0 and "No module named 'tensorflow'" in gone.stderr
    data = tmp_path / "in.csv"
    data.write_text("id,x\n" + "".join(f"{i},{i / 2}\n" for i in range(40)))
    write_schema(tmp_path / "s.yaml", ID_X)
    common = ["--input", str(data), "--format", "csv", "--schema", str(tmp_path / "s.yaml")]
    _run(slim, cli, "convert", "--engine", "spark", "--master", "local[1]", *common, "--output",
         str(tmp_path / "spark"), cwd=tmp_path)
    _run(slim, cli, "convert", "--engine", "beam", *common, "--output", str(tmp_path / "beam"),
         "--engine-arg=--runner=FnApiRunner", cwd=tmp_path)
    script = tmp_path / "df.py"
    script.write_text(
        "import sys\nfrom pyspark.sql import SparkSession\nimport tfrecord_io.spark\n"
        "s = SparkSession.builder.master('local[1]').getOrCreate()\ntfrecord_io.spark.register(s)\n"
        f"s.range(25).write.format('tfrecord').mode('append').save({str(tmp_path / 'df')!r})\n"
        f"print(sorted(r['id'] for r in s.read.format('tfrecord').load({str(tmp_path / 'df')!r}).collect()))\n")
    out = _run(slim, py, str(script), cwd=tmp_path)
    assert out.stdout.strip().splitlines()[-1] == str(list(range(25)))
    for name in ("spark", "beam"):
        _run(slim, cli, "verify", str(tmp_path / name), cwd=tmp_path)
        shown = _run(slim, cli, "inspect", str(tmp_path / name), "--head", "1", cwd=tmp_path)
        assert "40" in shown.stdout
    # What needs TensorFlow says which extra to install, in one line, with exit 2.
    stats = _run(slim, cli, "stats", str(tmp_path / "spark"), "--logdir", str(tmp_path / "tb"), cwd=tmp_path,
                 check=False)
    assert stats.returncode == 2 and "Traceback" not in stats.stderr, stats.stderr[-3000:]
    assert 'pip install "tfrecord-io[tf]"' in [ln for ln in stats.stderr.splitlines() if "error:" in ln][-1]


def _run(venv: Path, *args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYSPARK_PYTHON=str(venv / "bin" / "python"), TF_CPP_MIN_LOG_LEVEL="3",
               PATH=f"{venv / 'bin'}:{Path(sys.executable).parent}:{env.get('PATH', '')}",
               SPARK_HOME=str(Path(__import__("pyspark").__file__).parent))
    proc = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def test_every_command_works_from_the_wheel_outside_the_checkout(installed, tmp_path):
    py, cli = str(installed / "bin" / "python"), str(installed / "bin" / "tfrecord-io")
    where = _run(installed, py, "-c", "import tfrecord_io, os; print(os.path.dirname(tfrecord_io.__file__))",
                 cwd=tmp_path).stdout.strip()
    assert where.startswith(str(installed)) and not where.startswith(str(REPO)), where
    schema = _run(installed, py, "-c", "from tfrecord_io.commands.demo_train import TAXI_SCHEMA; print(TAXI_SCHEMA)",
                  cwd=tmp_path).stdout.strip()
    assert schema.startswith(str(installed)) and Path(schema).is_file()  # package data

    data = tmp_path / "in.csv"
    data.write_text("id,x\n" + "".join(f"{i},{i / 2}\n" for i in range(50)) + "oops,1\n")
    write_schema(tmp_path / "s.yaml", ID_X)
    common = ["--input", str(data), "--format", "csv", "--schema", str(tmp_path / "s.yaml"),
              "--max-reject-fraction", "0.1"]
    _run(installed, cli, "convert", "--engine", "beam", *common, "--output", str(tmp_path / "beam"),
         "--engine-arg=--runner=FnApiRunner", cwd=tmp_path)
    _run(installed, py, "-m", "tfrecord_io.beam", *common, "--output", str(tmp_path / "beam2"),
         "--runner=FnApiRunner", cwd=tmp_path)
    done = _run(installed, cli, "convert", "--engine", "spark", "--master", "local[1]", *common,
                "--output", str(tmp_path / "spark"), cwd=tmp_path)
    event = json.loads(done.stdout.strip().splitlines()[-1])
    assert event["totals"] == {"input_rows": 51, "records": 50, "rejected": 1}
    for out in ("beam", "beam2", "spark"):
        assert (tmp_path / out / "_SUCCESS").exists()
    _run(installed, cli, "inspect", str(tmp_path / "spark"), "--head", "1", cwd=tmp_path)
    _run(installed, cli, "verify", str(tmp_path / "spark"), cwd=tmp_path)
    _run(installed, cli, "stats", str(tmp_path / "spark"), "--logdir", str(tmp_path / "logs"), cwd=tmp_path)
    inferred = _run(installed, cli, "infer-schema", "--input", str(data), "--format", "csv", cwd=tmp_path)
    assert "name: \"id\"" in inferred.stdout or "name: id" in inferred.stdout
    _run(installed, cli, "demo", "--rows", "2000", "--epochs", "1", "--workdir", str(tmp_path / "demo"),
         cwd=tmp_path)
    assert (tmp_path / "demo" / "tfrecords" / "_SUCCESS").exists()


def test_the_wheel_carries_the_compiled_record_core(installed, tmp_path):
    """The wheel holds tfrecord_io/core/_native (built from native/), and it is the core that runs."""
    py = str(installed / "bin" / "python")
    out = _run(installed, py, "-c", "from tfrecord_io.core import native, _native; print(native.description()); "
               "print(_native.__file__)", cwd=tmp_path).stdout.splitlines()
    forced = os.environ.get("TFRECORD_IO_PURE", "").strip() not in ("", "0")
    assert out[0] == ("numpy (pure; TFRECORD_IO_PURE=1)" if forced else "native (Rust)"), out
    assert out[1].startswith(str(installed)), out
    version = _run(installed, str(installed / "bin" / "tfrecord-io"), "--version", cwd=tmp_path).stdout
    assert f"record core: {out[0]}" in version


def test_the_wheel_carries_the_package_data(installed, tmp_path):
    """What the code opens by path, from the wheel: the demo schema, the local clusters' Maven
    projects, and the log4j2 configuration our commands start Spark's driver with (a missing one
    would make log4j print an error line on every start)."""
    code = ("import os, tfrecord_io, tfrecord_io.engines.spark as s, tfrecord_io.clusters.hdfs_local as h\n"
            "assert '/site-packages/' in tfrecord_io.__file__ or 'installed' in tfrecord_io.__file__, tfrecord_io.__file__\n"
            "root = os.path.dirname(tfrecord_io.__file__)\n"
            "for p in (s.LOG4J2_PROPERTIES, os.path.join(root, 'schemas', 'taxi.yaml'),\n"
            "          os.path.join(os.path.dirname(h.__file__), 'pom.xml')):\n"
            "    assert os.path.isfile(p), p\n"
            "print('ok')\n")
    proc = _run(installed, str(installed / "bin" / "python"), "-c", code, cwd=tmp_path)
    assert proc.stdout.strip() == "ok"
