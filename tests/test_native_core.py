"""The compiled record core (``tfrecord_io.core._native``, built from ``native/``) against the numpy one.

Every compiled function is checked through the public function that dispatches to it: the same
call run twice, once as it runs (the compiled core, in this checkout) and once inside
:func:`tfrecord_io.core.native.pure` (the numpy reference), must give the same bytes, the same
values, and -- for damaged streams -- the same error (type, message, file, offset, check).  On
TensorFlow's golden files, on Hypothesis' batches (``record_strategies``: both record types, every
feature kind, nulls, empty and ragged lists, non-UTF-8 bytes, int64 extremes), and on empty ones.

Also: this checkout (built by ``make``) runs the compiled core, ``TFRECORD_IO_PURE=1`` selects numpy
and ``tfrecord-io --version`` says which; a bare ``--py-files`` zip falls back to numpy; the
``pack-env`` copy of the package carries the compiled module.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from helpers import REPO, VENV_BIN, examples
from record_strategies import (ANY_NAMES, I64_MAX, I64_MIN, batch_of, schema_and_rows, schema_of, sequence_batch,
                               sequence_schema_and_groups)
from tfrecord_io.core import native
from tfrecord_io.core.codec import encode_examples, encode_framed, encode_sequence_examples
from tfrecord_io.core.framing import (CorruptRecordError, TFRecordWriter, chunk_records, frame_records,
                                      iter_record_chunks, iter_record_lengths,
                                      iter_records, read_records)
from tfrecord_io.core.schema import Feature, Schema

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
_spec = importlib.util.spec_from_file_location("make_golden", GOLDEN_DIR / "make_golden.py")
_make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_make_golden)
GOLDEN_RECORDS: list[bytes] = _make_golden.GOLDEN_RECORDS
GOLDEN = {"none": GOLDEN_DIR / "records.tfrecord", "gzip": GOLDEN_DIR / "records.tfrecord.gz",
          "zlib": GOLDEN_DIR / "records.tfrecord.zlib"}

HOW_TO_BUILD = ("the compiled record core (tfrecord_io/core/_native, from native/) is not built in this checkout: "
                "run `make check` (or `pip install -e .`) with Rust installed (cargo on the PATH or in ~/.cargo/bin; "
                "README, Design notes)")
FORCED_PURE = os.environ.get(native.PURE_ENV, "").strip() not in ("", "0")


@pytest.fixture
def compiled():
    """The compiled core, running (skips when it is not built: test_this_checkout_runs_the_compiled_core fails then)."""
    if native.available() is None:
        pytest.skip(HOW_TO_BUILD)
    if native.active() is None:
        pytest.skip(f"{native.PURE_ENV}=1: the suite runs the numpy core")
    return native.active()


def _require_compiled():
    """The ``compiled`` fixture's skip, for Hypothesis tests (which take no function-scoped fixture)."""
    if native.active() is None:
        pytest.skip(HOW_TO_BUILD)


def both(fn, *args, **kw):
    """(compiled result, numpy result) of ``fn(*args, **kw)``."""
    got = fn(*args, **kw)
    with native.pure():
        want = fn(*args, **kw)
    return got, want


def outcome(make_iter):
    """What iterating ``make_iter()`` gives: (items, None) or (items before the error, the error's identity)."""
    items = []
    try:
        for item in make_iter():
            items.append(item.tolist() if isinstance(item, np.ndarray) else item)
    except (CorruptRecordError, ValueError, TypeError) as e:
        return items, (type(e).__name__, str(e), getattr(e, "path", None), getattr(e, "offset", None),
                       getattr(e, "check", None))
    return items, None


def same_outcome(make_iter):
    got = outcome(make_iter)
    with native.pure():
        want = outcome(make_iter)
    assert got == want
    return got


class Trickle(io.RawIOBase):
    """A raw binary file that hands out at most ``step`` bytes per read: records straddle its reads."""

    def __init__(self, data: bytes, step: int, name: str = "trickle.tfrecord"):
        self._data, self._pos, self._step, self.name = data, 0, step, name

    def readable(self):
        return True

    def read(self, n=-1):
        n = self._step if n is None or n < 0 else min(n, self._step)
        out = self._data[self._pos:self._pos + n]
        self._pos += len(out)
        return out


# ---------------------------------------------------------------------------------------------
# Which core runs
# ---------------------------------------------------------------------------------------------
def test_this_checkout_runs_the_compiled_core():
    if native.available() is None:
        pytest.fail(HOW_TO_BUILD)
    if FORCED_PURE:
        assert native.active() is None and native.description() == "numpy (pure; TFRECORD_IO_PURE=1)"
    else:
        assert native.active() is native.available()
        assert native.description() == "native (Rust)"


def _run(code: str, cwd: Path = REPO, **env) -> str:
    """``python -c code``'s output (``-c`` puts ``cwd`` first on sys.path: the checkout's package by default)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_tfrecord_io_pure_selects_numpy_and_the_version_line_says_so():
    code = "from tfrecord_io.core import native; print(native.active() is None, native.description())"
    assert _run(code, TFRECORD_IO_PURE="1") == "True numpy (pure; TFRECORD_IO_PURE=1)"
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    cli = [str(VENV_BIN / "tfrecord-io"), "--version"]
    pure = subprocess.run(cli, capture_output=True, text=True, timeout=120, env={**env, native.PURE_ENV: "1"})
    assert pure.returncode == 0, pure.stderr
    assert pure.stdout.splitlines() == ["tfrecord-io 0.1.0", "record core: numpy (pure; TFRECORD_IO_PURE=1)"]
    if native.available() is not None:
        default = subprocess.run(cli, capture_output=True, text=True, timeout=120, env=env)
        assert default.stdout.splitlines()[1] == "record core: native (Rust)", default.stderr


def test_the_choice_is_logged_once_at_debug_level():
    code = ("import logging; logging.basicConfig(level=logging.DEBUG, format='%(name)s %(message)s'); "
            "import tfrecord_io.core.codec, tfrecord_io.core.framing, tfrecord_io.core.native")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, native.PURE_ENV: "1"})
    lines = [line for line in proc.stderr.splitlines() if "record core" in line]
    assert lines == ["tfrecord_io.core.native record core: numpy (pure; TFRECORD_IO_PURE=1)"], proc.stderr


def _encode_and_frame_code(schema_yaml: str) -> str:
    return ("import sys, pyarrow as pa, hashlib\n"
            "from tfrecord_io.core import native\n"
            "from tfrecord_io.core.codec import encode_examples\n"
            "from tfrecord_io.core.framing import frame_records\n"
            "from tfrecord_io.core.schema import Schema\n"
            "import tfrecord_io, yaml\n"
            f"schema = Schema.from_dict(yaml.safe_load({schema_yaml!r}))\n"
            "batch = pa.record_batch({'x': pa.array([1.5, None, -2.0], pa.float32()),"
            " 'n': pa.array([-1, 2**63 - 1, None]), 's': pa.array([b'\\xff\\xfe', b'', None])})\n"
            "data = frame_records(encode_examples(batch, schema))\n"
            "print(tfrecord_io.__file__); print(native.description()); print(hashlib.sha256(data).hexdigest())\n")


SMALL_SCHEMA = ("features: [{name: x, type: float}, {name: n, type: int64}, {name: s, type: bytes}]\n")


def test_a_bare_py_files_zip_runs_on_the_numpy_core(tmp_path):
    from tfrecord_io.spark import package_zip

    zipped = package_zip(str(tmp_path))
    out = _run(_encode_and_frame_code(SMALL_SCHEMA), tmp_path, PYTHONPATH=zipped,
               **{native.PURE_ENV: ""}).splitlines()
    assert out[0].startswith(zipped + os.sep), out  # the package came from the zip, not the checkout
    assert out[1] == "numpy (pure; compiled core not built)"
    here = _run(_encode_and_frame_code(SMALL_SCHEMA)).splitlines()
    assert out[2] == here[2]  # the same bytes as this checkout's core


def test_the_pack_env_copy_of_the_package_carries_the_compiled_core(tmp_path, compiled):
    from tfrecord_io.commands import pack_env

    pack_env._copy_package(tmp_path)  # what pack-env puts in the archive's site-packages
    assert list((tmp_path / "tfrecord_io" / "core").glob("_native*.so"))
    out = _run(_encode_and_frame_code(SMALL_SCHEMA), tmp_path, PYTHONPATH=str(tmp_path)).splitlines()
    assert out[0].startswith(str(tmp_path)), out
    assert out[1] == "native (Rust)"


def test_the_dispatching_functions_still_pickle(compiled):
    batch = pa.record_batch({"x": pa.array([1.0, 2.0], pa.float32())})
    schema = schema_of(Feature("x", "float"))
    for fn, arg in [(encode_examples, batch), (frame_records, None)]:
        again = pickle.loads(pickle.dumps(fn))
        assert again is fn
    assert pickle.loads(pickle.dumps(schema)) == schema
    assert frame_records(encode_examples(batch, schema)) == \
        pickle.loads(pickle.dumps(frame_records))(pickle.loads(pickle.dumps(encode_examples))(batch, schema))


# ---------------------------------------------------------------------------------------------
# Framing
# ---------------------------------------------------------------------------------------------
def test_framing_the_golden_records_gives_tensorflows_bytes(compiled):
    golden = GOLDEN["none"].read_bytes()
    for records in (GOLDEN_RECORDS, tuple(GOLDEN_RECORDS), pa.array(GOLDEN_RECORDS, pa.binary()),
                    pa.array(GOLDEN_RECORDS, pa.large_binary()),
                    pa.chunked_array([GOLDEN_RECORDS[:3], GOLDEN_RECORDS[3:]], pa.binary())):
        got, want = both(frame_records, records)
        assert got == want == golden


def test_framing_empty_batches(compiled):
    for records in ([], pa.array([], pa.binary()), pa.array([b""] * 3, pa.large_binary())):
        got, want = both(frame_records, records)
        assert got == want


def test_framing_many_records_crosses_the_chunk_bounds(compiled):
    records = [bytes([i % 251]) * (i % 700) for i in range(40_000)]  # > 16,384 records and > 8 MiB
    arr = pa.array(records, pa.binary())
    for batch in (records, arr, arr.slice(7, 30_000)):
        got, want = both(frame_records, batch)
        assert got == want


RECORDS = st.lists(st.binary(max_size=300) | st.sampled_from([b"", b"\x00" * 12, b"\xff\xfe\x80"]), max_size=40)


@settings(max_examples=examples(200), deadline=None)
@given(RECORDS, st.integers(0, 5), st.booleans())
def test_framing_random_batches(records, cut, large):
    _require_compiled()
    arr = pa.array(records, pa.large_binary() if large else pa.binary())
    for batch in (records, arr, arr.slice(min(cut, len(arr)))):
        got, want = both(frame_records, batch)
        assert got == want

    def written(batch):
        out = io.BytesIO()
        with TFRecordWriter(out) as w:
            w.write_batch(batch)
            return out.getvalue(), w.crc32c, w.bytes_written

    assert both(written, arr)[0] == both(written, arr)[1]


def test_framing_refuses_nulls_and_non_bytes_the_same(compiled):
    for bad in ([b"a", None], ["text"], pa.array([b"a", None]), pa.array([1, 2])):
        got = outcome(lambda: [frame_records(bad)])
        with native.pure():
            want = outcome(lambda: [frame_records(bad)])
        assert got == want and got[1] is not None


# ---------------------------------------------------------------------------------------------
# The walk: read_records / iter_records (verify, stats, the loaders) and iter_record_lengths (index)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("compression", sorted(GOLDEN))
def test_walking_the_golden_files(compression, compiled):
    path = GOLDEN[compression]
    items, error = same_outcome(lambda: iter_records(path, compression=compression))
    assert error is None and [d for _, d in items] == GOLDEN_RECORDS
    for per in (1, 3, 1 << 16):
        lengths, error = same_outcome(lambda: iter_record_lengths(path, compression=compression, per=per))
        assert error is None and sum(lengths, []) == [len(r) for r in GOLDEN_RECORDS]
    assert same_outcome(lambda: read_records(path, compression=compression, verify=False))[0] == GOLDEN_RECORDS


def _damage(stream: bytes, kind: str, at: int, value: int) -> bytes:
    b = bytearray(stream)
    if kind == "flip":
        b[at % len(b)] ^= 1 << (value % 8)
    elif kind == "truncate":
        del b[at % (len(b) + 1):]
    return bytes(b)


def _huge_length(stream: bytes, at_record: int, length: int, good_crc: bool) -> bytes:
    """The stream with record ``at_record``'s length field set to ``length`` (its CRC fixed up or not)."""
    from tfrecord_io.core.framing import masked_crc32c

    pos = 0
    for _ in range(at_record):
        pos += 16 + int.from_bytes(stream[pos:pos + 8], "little")
    field = length.to_bytes(8, "little")
    crc = masked_crc32c(field) if good_crc else int.from_bytes(stream[pos + 8:pos + 12], "little")
    return stream[:pos] + field + crc.to_bytes(4, "little") + stream[pos + 12:]


def _walks(stream: bytes, step: int, compression: str):
    """The three walks over ``stream`` read ``step`` bytes at a time (compressed as ``compression``)."""
    data = {"none": stream, "gzip": gzip.compress(stream, mtime=0), "zlib": zlib.compress(stream)}[compression]
    return [lambda: iter_records(Trickle(data, step), compression=compression),
            lambda: read_records(Trickle(data, step), compression=compression, verify=False),
            lambda: iter_record_lengths(Trickle(data, step), compression=compression, per=3)]


def _records_of_chunks(chunks, gather: bool = True):
    """The chunk walk's records one at a time: (offset, data) (gathered) or (offset, length)."""
    for offsets, lengths, data in chunks:
        assert len(offsets) == len(lengths) > 0  # no chunk is empty
        records = chunk_records(lengths, data).to_pylist() if gather else lengths.tolist()
        yield from zip(offsets.tolist(), records)


def _chunk_walks(stream: bytes, step: int, compression: str, max_records: int):
    """verify's chunk walk over ``stream`` (records one at a time): (with data CRCs, gathered and not;
    without data CRCs)."""
    data = {"none": stream, "gzip": gzip.compress(stream, mtime=0), "zlib": zlib.compress(stream)}[compression]

    def walk(verify: bool, gather: bool):
        return lambda: _records_of_chunks(iter_record_chunks(Trickle(data, step), compression=compression,
                                                             verify=verify, gather=gather,
                                                             max_records=max_records), gather)
    return [walk(True, True), walk(True, False)], [walk(False, True), walk(False, False)]


def _same_as_the_record_walk(chunk_walk, record_walk, gather: bool):
    """The chunk walk gives the record walk's records (offsets, data or lengths) and error, with either core."""
    items, error = same_outcome(chunk_walk)
    want, want_error = same_outcome(record_walk)
    assert error == want_error
    assert items == [(o, d if gather else len(d)) for o, d in want]
    return error


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=2000), max_size=40), st.sampled_from(["flip", "truncate", "none"]),
       st.integers(0, 10**6), st.integers(0, 7), st.sampled_from([1, 5, 12, 16, 100, 1000, 1 << 20]),
       st.sampled_from(["none", "none", "gzip"]), st.sampled_from([1, 2, 3, 4096]))
def test_the_chunk_walk_gives_the_record_walks_records_and_errors(records, kind, at, bit, step, compression,
                                                                  max_records):
    _require_compiled()
    stream = frame_records(records) if records else b""
    stream = _damage(stream, kind, at, bit) if stream else stream
    data = {"none": stream, "gzip": gzip.compress(stream, mtime=0), "zlib": zlib.compress(stream)}[compression]
    verified, unverified = _chunk_walks(stream, step, compression, max_records)
    for walks, verify in ((verified, True), (unverified, False)):
        record_walk = lambda: iter_records(Trickle(data, step), compression=compression, verify=verify)  # noqa: E731
        for walk, gather in zip(walks, (True, False)):
            _same_as_the_record_walk(walk, record_walk, gather)


def test_the_chunk_walk_of_large_records_that_straddle_reads(compiled):
    """Records larger than a read (and than the size above which one is a chunk of its own), between small ones."""
    rng = np.random.default_rng(5)
    records = [rng.bytes(n) for n in (10, 70_000, 3, 0, 1_500_000, 20, 65_536, 65_535, 9)]
    stream = frame_records(records)
    for step in (4096, 1 << 16, 1 << 20):  # reads far smaller than the large records, and larger
        for max_records in (1, 2, 4096):
            verified, unverified = _chunk_walks(stream, step, "none", max_records)
            for walk in verified + unverified:
                assert same_outcome(walk)[1] is None
            items, _ = same_outcome(verified[0])
            assert [d for _, d in items] == records
    for at in (12 + 5, 16 + 10 + 12 + 69_999, len(stream) - 30, len(stream) - 1_000_000):
        damaged = _damage(stream, "flip", at, 2)
        for walk in _chunk_walks(damaged, 1 << 16, "none", 4096)[0]:
            assert same_outcome(walk)[1] is not None


def test_the_chunk_walk_of_a_file_read_into_one_buffer(compiled, tmp_path):
    """A file object with ``readinto`` is read into one buffer used again (the bytes a read leaves
    unwalked moved to its front): records across every 1 MiB read, one of 600 KiB (re-read whole
    after a move) and one of 2.6 MB (larger than the buffer: taken apart, whole reads of it kept), each chunk's data kept
    until the walk ends -- none of it may be a view of the buffer the later reads overwrite."""
    rng = np.random.default_rng(7)
    sizes = [int(n) for n in rng.integers(0, 900, 4000)] + [600_000] + [313] * 3000 + [2_600_000, 5] + [100] * 5000
    records = [rng.bytes(n) for n in sizes]
    path = tmp_path / "reads.tfrecord"
    path.write_bytes(frame_records(records))
    want = list(iter_records(str(path)))

    def walks(**kw):
        """The chunks of a walk over the path, a buffered file and a raw one, all kept."""
        yield list(iter_record_chunks(str(path), **kw))
        for buffering in (-1, 0):
            with open(path, "rb", buffering=buffering) as f:
                yield list(iter_record_chunks(f, **kw))

    for max_records in (3, 4096):
        for kept in walks(max_records=max_records):
            assert [(o, d) for c in kept for o, d in _records_of_chunks([c])] == want
        for kept in walks(max_records=max_records, gather=False):
            assert [n for c in kept for n in c[1].tolist()] == sizes
    # a damaged record after many reads: the records before it, then its error at its offset
    stream = bytearray(path.read_bytes())
    at = want[7500][0] + 12 + 50
    stream[at] ^= 4
    path.write_bytes(bytes(stream))
    got: list = []
    with pytest.raises(CorruptRecordError) as e:
        for c in iter_record_chunks(str(path)):
            got.append(c)
    assert [(o, d) for c in got for o, d in _records_of_chunks([c])] == want[:7500]
    assert e.value.offset == want[7500][0] and "data CRC" in str(e.value)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=12), st.sampled_from(["flip", "truncate", "none"]),
       st.integers(0, 10**6), st.integers(0, 7), st.sampled_from([1, 5, 12, 16, 100, 1 << 20]),
       st.sampled_from(["none", "none", "gzip"]))
def test_damaged_streams_fail_the_same_way(records, kind, at, bit, step, compression):
    _require_compiled()
    stream = _damage(frame_records(records), kind, at, bit)
    for walk in _walks(stream, step, compression):
        same_outcome(walk)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.binary(max_size=50), min_size=1, max_size=6), st.integers(0, 5),
       st.sampled_from([17, 2**31, 2**32 + 5, 2**63, 2**64 - 1, 2**64 - 16]), st.booleans(),
       st.sampled_from([3, 64, 1 << 20]))
def test_huge_length_fields_fail_the_same_way(records, which, length, good_crc, step):
    _require_compiled()
    assume(len(records[which % len(records)]) != length)  # a changed length field
    stream = _huge_length(frame_records(records), which % len(records), length, good_crc)
    verified, *unverified = _walks(stream, step, "none")
    assert same_outcome(verified)[1] is not None  # a CRC, or the stream's end, catches it
    for walk in unverified:  # the length may happen to span whole records: no error without data CRCs
        same_outcome(walk)
    chunk_verified, chunk_unverified = _chunk_walks(stream, step, "none", 3)
    for walk, gather in zip(chunk_verified, (True, False)):
        assert _same_as_the_record_walk(walk, verified, gather) is not None


def test_each_crc_byte_flipped_in_turn(compiled):
    stream = frame_records([b"abc", b"", b"\xff" * 40])  # records at 0, 19 and 35
    headers = {*range(0, 12), *range(19, 31), *range(35, 47)}
    for at in range(len(stream)):
        verified, *unverified = _walks(_damage(stream, "flip", at, 3), 1 << 20, "none")
        items, error = same_outcome(verified)
        assert error is not None, at  # every bit of a framed stream is covered by a CRC
        for walk in unverified:  # data CRCs unchecked: an error only when the header is hit
            assert (same_outcome(walk)[1] is not None) == (at in headers), at
        chunk_verified, chunk_unverified = _chunk_walks(_damage(stream, "flip", at, 3), 1 << 20, "none", 4096)
        for walk, gather in zip(chunk_verified, (True, False)):
            assert _same_as_the_record_walk(walk, verified, gather) == error, at
        for walk in chunk_unverified:
            assert (same_outcome(walk)[1] is not None) == (at in headers), at


# ---------------------------------------------------------------------------------------------
# Deflate (the blocks of the gzip writer, core/gzip_blocks)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("level", [-1, 0, 1, 6, 9])
def test_deflated_blocks_inflate_to_the_block_with_the_window_before_it(compiled, level):
    """Each block is raw deflate that may refer back into the 32 KiB before it (the dictionary) and
    ends on a byte boundary (a sync flush), the last one with the end of the stream; inflated with
    zlib, block after block, they give the data back."""
    rng = np.random.default_rng(level + 2)
    data = bytes(rng.integers(0, 3, size=3 << 20, dtype=np.uint8)) + bytes(200_000) + os.urandom(100_000)
    blocks = [data[i:i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
    stream, window = [], None
    for k, block in enumerate(blocks):
        stream.append(compiled.deflate_block(block, level, window, k == len(blocks) - 1))
        window = block[-32768:]
    d = zlib.decompressobj(-15)
    assert d.decompress(b"".join(stream)) == data and d.eof
    with pytest.raises(ValueError, match="level must be -1 to 9"):
        compiled.deflate_block(b"x", 10, None, True)


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------
def _same_records(fn, batch, schema):
    got, want = both(fn, batch, schema)
    assert got.type == want.type and got.to_pylist() == want.to_pylist()
    _same_framed(batch, schema, want)
    return got


def _framed(batch, schema) -> tuple[bytes, list[int]]:
    """encode_framed's stream, and the record lengths its parts carry."""
    batch_ = encode_framed(batch, schema)
    parts = list(batch_.parts())
    return b"".join(bytes(p) for _, p in parts), [n for lengths, _ in parts for n in lengths.tolist()], len(batch_)


def _same_framed(batch, schema, records: pa.Array):
    """The fused path (each record encoded into its framed place) writes the numpy core's records, framed."""
    got, want = both(_framed, batch, schema)
    lengths = [len(r) for r in records.to_pylist()]
    assert got == want == (frame_records(records), lengths, len(lengths))
    buf = io.BytesIO()
    with TFRecordWriter(buf) as w:
        assert w.write_batch(encode_framed(batch, schema)) == len(lengths)
    assert buf.getvalue() == got[0]


def _same_records_whole_and_sliced(fn, batch, schema):
    _same_records(fn, batch, schema)
    if batch.num_rows > 2:  # a slice: the columns' offsets do not start at 0
        _same_records(fn, batch.slice(1, batch.num_rows - 2), schema)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_rows(max_rows=30))
def test_examples_of_random_batches(case):
    _require_compiled()
    schema, rows = case
    _same_records_whole_and_sliced(encode_examples, batch_of(schema, rows), schema)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_rows(names=ANY_NAMES, max_rows=10))
def test_examples_with_any_feature_names(case):
    _require_compiled()
    schema, rows = case
    _same_records(encode_examples, batch_of(schema, rows), schema)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence_schema_and_groups())
def test_sequence_examples_of_random_batches(case):
    _require_compiled()
    schema, groups = case
    _same_records_whole_and_sliced(encode_sequence_examples, sequence_batch(schema, groups), schema)


EXTREMES = [I64_MIN, I64_MIN + 1, -1, 0, 1, 127, 128, 2**31 - 1, 2**32, 2**56, I64_MAX]


def test_examples_of_every_kind_with_extremes_nulls_and_empty_lists(compiled):
    schema = schema_of(Feature("i", "int64"), Feature("f", "float"), Feature("b", "bytes"), Feature("s", "string"),
                       Feature("il", "int64", shape=(-1,)), Feature("fl", "float", shape=(-1,)),
                       Feature("bl", "bytes", shape=(-1,)), Feature("i3", "int64", shape=(3,)),
                       Feature("f2", "float", shape=(2,)))
    n = len(EXTREMES)
    rows = [{"i": v, "f": None if k % 3 == 0 else float(v), "b": bytes([0xFF, 0xC0, k]) * k if k % 4 else None,
             "s": "é" * k, "il": None if k == 2 else EXTREMES[:k], "fl": [] if k % 2 else [float("nan"), -0.0, 1e38],
             "bl": [b"", b"\x80\x81"] * (k % 3), "i3": [v, -v if v != I64_MIN else v, 0] if k != 5 else None,
             "f2": [float("inf"), -float("inf")]} for k, v in enumerate(EXTREMES)]
    batch = batch_of(schema, rows)
    assert batch.num_rows == n
    _same_records(encode_examples, batch, schema)
    _same_records(encode_examples, batch.slice(0, 0), schema)
    # a batch whose every value is missing, and one with a huge bytes value (lengths of 3-byte varints)
    empty = batch_of(schema, [{f.name: None for f in schema.features}] * 4)
    _same_records(encode_examples, empty, schema)
    big = schema_of(Feature("b", "bytes"), Feature("x", "int64", shape=(-1,)))
    _same_records(encode_examples, batch_of(big, [{"b": b"\x00" * 70_000, "x": list(range(-5000, 5000))},
                                                  {"b": None, "x": None}]), big)


def test_examples_of_many_rows_cross_the_encoders_blocks(compiled):
    """More rows than the compiled encoder writes at a time (256 a block, each entry of a block in
    turn): float and int64 scalars without nulls (the fixed-prefix paths), under short names and
    names too long for a fixed prefix, beside strings long enough for 2-byte entry lengths and a
    ragged list; the whole batch and a slice of it, byte for byte the numpy core's."""
    long = "n" * 40
    schema = schema_of(Feature("f", "float"), Feature("i", "int64"), Feature(long + "f", "float"),
                       Feature(long + "i", "int64"), Feature("s", "string"), Feature("fl", "float", shape=(-1,)))
    rng = np.random.default_rng(7)
    rows = [{"f": float(rng.normal()), "i": EXTREMES[k % len(EXTREMES)], long + "f": float(k),
             long + "i": int(rng.integers(-2**40, 2**40)), "s": "v" * (k % 300), "fl": [0.5] * (k % 5)}
            for k in range(1000)]
    _same_records_whole_and_sliced(encode_examples, batch_of(schema, rows), schema)


def test_a_framed_batch_kept_is_not_overwritten_by_later_batches(compiled):
    """encode_framed's compiled buffers are reused from batch to batch, but only once let go: a
    batch still held keeps its bytes; the buffer is read-only."""
    schema = schema_of(Feature("f", "float"), Feature("i", "int64"))

    def batch(seed):
        rng = np.random.default_rng(seed)
        return batch_of(schema, [{"f": float(x), "i": int(y)} for x, y in
                                 zip(rng.normal(size=3000), rng.integers(-10**9, 10**9, 3000))])

    [(lengths, kept)] = list(encode_framed(batch(0), schema).parts())
    want = bytes(kept)
    assert want == frame_records(encode_examples(batch(0), schema)) and int(lengths.sum()) + 16 * 3000 == len(want)
    for seed in range(1, 6):  # later batches of the same size, each let go at once
        assert bytes(_framed(batch(seed), schema)[0]) != want
    assert bytes(kept) == want
    view = memoryview(kept)
    assert view.readonly and view.format == "B" and view.nbytes == len(want)
    with pytest.raises(TypeError):
        view[0] = 1


def test_sequence_examples_with_and_without_context(compiled):
    sequence = (Feature("t", "int64", default=0), Feature("w", "string", shape=(2,), default=("x", "y")),
                Feature("v", "float", shape=(2,)), Feature("r", "bytes", shape=(-1,)))
    groups = [{"c": None, "t": [I64_MIN, None, I64_MAX], "w": [["a", "\u00ff"], ["", "b"], None],
               "v": [[1.0, 2.0]], "r": [[b"\xff"], [], [b"", b"\x80"]]},
              {"c": 3, "t": None, "w": None, "v": [], "r": None},
              {"c": -1, "t": [], "w": [["q", "r"]], "v": None, "r": [[]]}]
    for context in ((Feature("c", "int64"),), ()):
        schema = Schema(record_type="sequence_example", context=context, sequence=sequence)
        batch = sequence_batch(schema, [{k: v for k, v in g.items() if k != "c" or context} for g in groups])
        _same_records(encode_sequence_examples, batch, schema)
        _same_records(encode_sequence_examples, batch.slice(1), schema)
        _same_records(encode_sequence_examples, batch.slice(3), schema)


def test_bad_rows_raise_the_same_errors(compiled):
    schema = schema_of(Feature("x", "int64", required=True), Feature("v", "float", shape=(2,)))
    for rows in ([{"x": None, "v": [1.0, 2.0]}], [{"x": 1, "v": [1.0]}], [{"x": 1, "v": [1.0, None]}]):
        batch = batch_of(schema, rows)
        got = outcome(lambda: [encode_examples(batch, schema)])
        with native.pure():
            want = outcome(lambda: [encode_examples(batch, schema)])
        assert got == want and got[1] is not None
        assert outcome(lambda: [encode_framed(batch, schema)])[1] == got[1]
        with native.pure():
            assert outcome(lambda: [encode_framed(batch, schema)])[1] == got[1]


def test_the_encoder_refuses_inconsistent_columns_with_a_value_error(compiled):
    """The compiled core checks what it is handed before it copies a byte (no read past a buffer)."""
    ints = np.array([1, 2], dtype=np.int64)
    with pytest.raises(ValueError, match="elements hold 3 values, got 2"):
        compiled.encode_examples(3, [(b"\x0a\x01x\x12", (2, 3, None, None, ints, None))])
    with pytest.raises(ValueError, match="last offset 9 is past the 2 data bytes"):
        compiled.encode_examples(1, [(b"\x0a\x01x\x12", (0, 1, None, None, np.array([0, 9], np.int64),
                                                          np.zeros(2, np.uint8)))])
    with pytest.raises(ValueError, match="offset 1 .* is below"):
        compiled.frame(np.array([0, -1], np.int64), np.zeros(4, np.uint8))
