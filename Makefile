# tfrecord-io: every target does its own set-up on a fresh machine (Python 3.11, Java 17, Maven; Rust's cargo
# for the compiled record core, else the numpy core runs).
#   make demo   install the package, then convert the demo data and train on it (see README): Spark in local
#               mode on local disk, so none of the Hadoop or job-server jars (`tfrecord-io demo --hdfs` fetches
#               the Hadoop ones on its first start)
#   make test   set up, then run the whole test suite (what CI runs), in two pytest-xdist workers
#   make check  the fast tier: the tests that need no JVM (Java, Maven, HDFS, Spark, Flink) and are not slow
#   make bench  set up, then run every benchmark in benchmarks/ and print its ratio table
#   make fuzz   the framing reader and schema loader fuzz targets, for much longer than the suite

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The compiled record core (native/, Rust + PyO3) is built by the install below through setuptools-rust:
# cargo from rustup's default place when it is not on the PATH already.  Its sources rebuild the install.
export PATH := $(PATH):$(HOME)/.cargo/bin
NATIVE := native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)

.PHONY: setup demo test check bench fuzz hadoop flink clean

# The install is tried three times, each resuming a broken download up to 20 times: TensorFlow's wheel is
# 570 MB, and one dropped connection used to fail a CI run after 11 s.
# PYTHONWARNINGS silences setuptools' editable-install banner ("Editable installation. ... folders in your
# working directory with the same name as your package ..."), which pip shows even with --quiet.
$(STAMP): setup.cfg pyproject.toml $(NATIVE)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	for try in 1 2 3; do \
	  PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --resume-retries 20 \
	    -e '.[all,test]' && break; \
	  test $$try -lt 3 && echo "pip install failed (try $$try of 3): trying again" >&2 || exit 1; \
	done
	@touch $@

# The Apache Hadoop 3.5.0 jars for the local HDFS, resolved by Maven into ~/.cache/tfrecord-io.
hadoop: $(STAMP)
	$(VENV)/bin/tfrecord-io hdfs-local fetch

# Beam's Flink runner 2.62.0 + Flink 1.19.0 jars, and its Spark runner 2.62.0 + Spark 3.5.1 jars, for the
# Beam-on-Flink/Spark tests (docs/running-on-flink.md).
flink: $(STAMP)
	$(VENV)/bin/tfrecord-io flink-local fetch
	$(VENV)/bin/tfrecord-io flink-local fetch --runner spark

setup: $(STAMP) hadoop flink

demo: $(STAMP)
	$(VENV)/bin/tfrecord-io demo

# Two pytest-xdist workers, a test file at a time: a file's module fixtures are built once, and the
# session clusters a file uses start on its worker.  (Not --dist loadgroup: with pytest 9.2 xdist 3.8
# ignores xdist_group marks without a word, pytest-xdist#1386.)
test: setup
	$(PY) -m pytest -n 2 --dist loadfile

# The fast tier: tests marked for no JVM (tests/conftest.py puts a refusing `java` first on their PATH),
# without the slow end-to-end runs (make test runs everything).
check: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not spark and not hdfs and not yarn and not flink and not slow"

# The fuzz targets of the suite (tests/test_fuzz.py), run much longer than `make test` does.
fuzz: $(STAMP)
	TFRECORD_IO_FUZZ_EXAMPLES=$${TFRECORD_IO_FUZZ_EXAMPLES:-50000} $(PY) -m pytest -q tests/test_fuzz.py

bench: setup
	@set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache demo-output native/target tfrecord_io/core/_native*.so
