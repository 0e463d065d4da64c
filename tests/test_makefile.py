"""The Makefile's targets do what the README says: `make demo` sets up only what the demo uses (Spark in
local mode on local disk: no Hadoop or job-server jars), `make test` everything (issue #32).

Read from `make -n` (print the commands, run none) with setup.cfg taken as just changed, so the
install step shows too, whatever the state of .venv."""

from __future__ import annotations

import os
import subprocess

from helpers import REPO


def _commands(target: str) -> list[str]:
    # Not make's own variables: under `make test` (CI) the inner make would print "Entering directory" lines.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    proc = subprocess.run(["make", "--no-print-directory", "-n", "-W", "setup.cfg", target], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.replace("\\\n", " ").splitlines()  # a command continued over lines: one


def _fetches(commands: list[str]) -> list[str]:
    return [c.split("tfrecord-io ", 1)[1] for c in commands if " fetch" in c]


def test_make_demo_installs_the_package_and_fetches_no_jars():
    commands = _commands("demo")
    assert _fetches(commands) == [], commands
    assert commands[-1] == ".venv/bin/tfrecord-io demo", commands
    install = [c for c in commands if "pip install" in c and " -e " in c]
    assert len(install) == 1, commands
    # the banner silenced; a dropped download resumed, and the install tried again (a CI run failed on one)
    assert 'PYTHONWARNINGS="ignore:Editable installation" ' in install[0], install
    assert "--resume-retries" in install[0] and install[0].startswith("for try in 1 2 3; do"), install


def test_make_test_still_sets_up_every_cluster_it_runs():
    commands = _commands("test")
    assert _fetches(commands) == ["hdfs-local fetch", "flink-local fetch", "flink-local fetch --runner spark"], commands
    assert commands[-1] == ".venv/bin/python -m pytest -n 2 --dist loadfile", commands
