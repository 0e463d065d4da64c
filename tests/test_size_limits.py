"""Size limits on what is read (issue #31 items 6 and 7): a record longer than ``--max-record-bytes``
fails the conversion within seconds, naming the file, the line and the limit, with memory bounded
by the limit and not by the record; a TFRecord length field claiming a huge length is never
allocated; a JSON array line is a reject like any other line that is not one object.

The long lines come from small compressed files made here (a 1 GiB line in a 1 MB ``.gz``), read
by the parser alone (memory measured with tracemalloc), by the Beam pipeline as ``tfrecord-io
convert --engine beam`` runs it (the process's peak RSS, from ``wait4``) and by the Spark job on the
session's ``local[2]`` Spark.  Before the limit, the same files ran for minutes and took the
whole line (and more) into memory.
"""

from __future__ import annotations

import bz2
import io
import json
import os
import re
import struct
import subprocess
import time
import tracemalloc
import zlib
from pathlib import Path

import google_crc32c
import pytest
import yaml

from helpers import VENV_BIN, convert
from tfrecord_io.conversion import columns, parsing, small_files
from tfrecord_io.conversion.options import DEFAULT_MAX_RECORD_BYTES, ConversionOptions, add_arguments, from_args
from tfrecord_io.core import framing
from tfrecord_io.core.schema import Schema
from tfrecord_io.storage import inputs

MiB = 1 << 20
LINE = 1 << 30  # the long line: 1 GiB of text in a ~1 MB .gz
LOW = 4 * MiB  # a low limit, set with --max-record-bytes
SCHEMA = {"features": [{"name": "id", "type": "int64", "required": True},
                       {"name": "s", "type": "string", "default": ""}]}
HEADS = {"csv": (b"id,s\n1,a\n2,", b"\n3,c\n"),  # the long line is line 3 (byte 9)
         "json": (b'{"id": 1, "s": "a"}\n{"id": 2, "s": "', b'"}\n{"id": 3, "s": "c"}\n')}  # line 2 (byte 20)
WHERE = {"csv": "line 3, byte 9", "json": "line 2, byte 20"}


def write_long_line_gz(path: Path, head: bytes, size: int, tail: bytes, fill: bytes = b"a") -> Path:
    """``head + fill * size + tail`` as one gzip member, made in well under a second whatever ``size``
    (a whole number of MiB; ``len(fill)`` divides a MiB): each MiB of ``fill`` is deflated once, after a
    full flush (which makes the deflate stream after it independent of what came before), and its
    bytes repeated."""
    block = fill * (MiB // len(fill))
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    body = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    last = c.compress(tail) + c.flush()
    crc = zlib.crc32(head)
    for _ in range(size // MiB):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # gzip header: deflate, no name, no mtime
        f.write(first)
        for _ in range(size // MiB):
            f.write(body)
        f.write(last)
        f.write(struct.pack("<II", crc, (len(head) + size + len(tail)) & 0xFFFFFFFF))
    return path


@pytest.fixture(scope="module")
def long_lines(tmp_path_factory) -> dict[str, Path]:
    """{"csv": dir with t.csv.gz, "json": dir with t.json.gz}: each a 1 GiB line between short ones."""
    root = tmp_path_factory.mktemp("long-lines")
    out = {}
    for fmt, (head, tail) in HEADS.items():
        (root / fmt).mkdir()
        out[fmt] = write_long_line_gz(root / fmt / f"t.{fmt}.gz", head, LINE, tail)
    return out


def _schema_file(tmp_path: Path) -> str:
    path = tmp_path / "schema.yaml"
    path.write_text(yaml.safe_dump(SCHEMA))
    return str(path)


def _parse_all(stream, fmt: str, source: str = "mem://in", schema: Schema | None = None, **kw) -> tuple[int, list]:
    rows, rejects = 0, []
    for pb in parsing.read_batches(stream, schema or Schema.from_dict(SCHEMA), fmt, source, **kw):
        rows += pb.rows.num_rows
        rejects += pb.rejects
    return rows, rejects


def test_the_generated_file_is_one_valid_gzip_of_the_long_line(tmp_path):
    path = write_long_line_gz(tmp_path / "small.gz", b"head,", 3 * MiB, b",tail\n", fill=b"xy")
    data = zlib.decompress(path.read_bytes(), 31)  # one member, checked to its CRC and size
    assert data == b"head," + b"xy" * (3 * MiB // 2) + b",tail\n"


# ------------------------------------------------------------------ decompression, bounded
@pytest.mark.parametrize("codec", ["gzip", "bzip2", "zlib"])
def test_decompression_hands_over_at_most_one_mib_a_read_however_far_the_data_expands(codec, tmp_path):
    """A bzip2 block of zeros expands ~45,000-fold, deflate ~1,000-fold: one read of compressed bytes
    used to become one bytes object that large."""
    zeros = bytes(48 * MiB)
    data = {"gzip": lambda: zlib.compress(zeros, 1, wbits=31), "bzip2": lambda: bz2.compress(zeros, 9),
            "zlib": lambda: zlib.compress(zeros, 1)}[codec]()
    path = tmp_path / ("z." + {"gzip": "gz", "bzip2": "bz2", "zlib": "deflate"}[codec])
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with inputs.open_input(str(path)) as f:
            head = f.read(10)
            _, peak_first = tracemalloc.get_traced_memory()
            total = len(head)
            while chunk := f.read(MiB):
                assert chunk.count(0) == len(chunk)
                total += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == len(zeros)
    assert peak_first < 8 * MiB and peak < 12 * MiB, (codec, len(data), peak_first, peak)  # was 126 MiB at once


# ------------------------------------------------------------------ the parser's limit
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_long_line_in_a_small_gz_fails_at_the_limit_naming_file_line_and_limit(fmt, long_lines):
    path = str(long_lines[fmt])
    for limit in (LOW, DEFAULT_MAX_RECORD_BYTES):
        tracemalloc.start()
        started = time.monotonic()
        try:
            with inputs.open_input(path) as f, pytest.raises(ValueError) as info:
                _parse_all(f, fmt, path, max_record_bytes=limit)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        took = time.monotonic() - started
        assert str(info.value).startswith(f"{path}: {WHERE[fmt]} of the decompressed data: a line longer than the "
                                          f"record limit, --max-record-bytes {limit} ({limit // MiB} MiB)")
        # Held: the line up to the limit and one read (joined once), and the parse's own blocks
        # (--block-size, 4 MiB: a few of them), never the 1 GiB line.
        assert peak < 2 * limit + 32 * MiB, (limit, peak)
        assert took < 20, took


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_line_of_exactly_the_limit_is_read_and_one_byte_more_fails(fmt):
    """The limit is on a line's text, its line break (``\\n`` or ``\\r\\n``) left out."""
    limit = 4096
    for extra, fails in ((0, False), (1, True)):
        if fmt == "csv":
            before = b"id,s\n" + b"1,a\n" * 1500
            line = b"2," + b"b" * (limit - 2 + extra)
        else:
            before = b'{"id": 1, "s": "a"}\n' * 300
            line = b'{"id": 2, "s": "' + b"b" * (limit - 18 + extra) + b'"}'
        data = before + line + b"\r\n" + (b"3,c\n" if fmt == "csv" else b"{}\n")
        assert len(line) == limit + extra
        number = data[:data.index(line)].count(b"\n") + 1
        for block_size in (8192, 1 << 16):  # the line across two reads, or inside one
            if fails:
                with pytest.raises(ValueError, match=re.escape(
                        f"mem://in: line {number}, byte {len(before)}: a line longer than the record limit, "
                        f"--max-record-bytes {limit} (4 KiB)")):
                    _parse_all(io.BytesIO(data), fmt, block_size=block_size, max_record_bytes=limit)
            else:
                rows, rejects = _parse_all(io.BytesIO(data), fmt, block_size=block_size, max_record_bytes=limit)
                assert (rows, len(rejects)) == ((1502, 0) if fmt == "csv" else (301, 1))


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_line_without_an_end_is_given_up_at_the_limit(fmt):
    """A stream that never ends its line: the reader gives up after the limit and one read."""
    limit, block = 64 * 1024, 4096

    class Endless(io.RawIOBase):
        served = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            n = len(buffer)
            if self.served == 0:
                head = b"id,s\n1," if fmt == "csv" else b'{"id": 1, "s": "'
                buffer[:len(head)] = head
                buffer[len(head):n] = b"z" * (n - len(head))
            else:
                buffer[:n] = b"z" * n
            self.served += n
            return n

    endless = Endless()
    with pytest.raises(ValueError, match=f"line {2 if fmt == 'csv' else 1}, byte {5 if fmt == 'csv' else 0}: "
                                         f"a line longer than the record limit"):
        _parse_all(io.BufferedReader(endless, block), fmt, block_size=block, max_record_bytes=limit)
    assert endless.served <= limit + 3 * block + 64 * 1024  # + the header's read and the buffer's


def test_a_part_of_a_file_names_the_byte_not_the_line():
    """A split after a file's first (the Spark job's line ranges) cannot number the file's lines."""
    data = b"1,a\n2," + b"b" * 5000 + b"\n"
    with pytest.raises(ValueError) as info:
        _parse_all(io.BytesIO(data), "csv", "/d/t.csv", header_names=["id", "s"], max_record_bytes=4096,
                   byte_offset=1_000_000)
    assert str(info.value).startswith("/d/t.csv: byte 1000004: a line longer than the record limit")
    with pytest.raises(ValueError, match=r"^/d/t.jsonl: byte 1000000: a line longer"):
        _parse_all(io.BytesIO(b"[" * 5000 + b"\n"), "json", "/d/t.jsonl", max_record_bytes=4096,
                   byte_offset=1_000_000)


def test_a_spark_split_starts_its_bytes_where_its_first_line_starts(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"id,s\n1,a\n2,b\n")
    stream, rng = inputs.open_line_range(str(path), 7, 14)  # inside line 2: its lines start at line 3
    with stream:
        assert (rng.first, stream.read()) == (9, b"2,b\n")


def test_with_multiline_a_csv_record_counts_whole_across_its_lines():
    """Without --multiline each of these short lines is a reject of its own (an unbalanced quote);
    with it they are one record, longer than the limit."""
    record = b'2,"' + b"short line\n" * 1000 + b'"'
    data = b"id,s\n1,a\n" + record + b"\n3,c\n"
    rows, rejects = _parse_all(io.BytesIO(data), "csv", max_record_bytes=4096)
    assert rows == 2 and len(rejects) == 1001  # each of the record's lines
    with pytest.raises(ValueError, match=re.escape("mem://in: line 3: a record longer than the record limit, "
                                                   "--max-record-bytes 4096 ")):
        _parse_all(io.BytesIO(data), "csv", multiline=True, max_record_bytes=4096)
    rows, rejects = _parse_all(io.BytesIO(data), "csv", multiline=True, max_record_bytes=len(record) + 10)
    assert (rows, rejects) == (3, [])


def test_with_multiline_a_json_document_is_one_record():
    doc = json.dumps([{"id": i, "s": "v" * 100} for i in range(100)]).encode()
    rows, _ = _parse_all(io.BytesIO(doc), "json", multiline=True, max_record_bytes=len(doc))
    assert rows == 100
    with pytest.raises(ValueError, match=re.escape("mem://in: a JSON document (with --multiline, the whole file is "
                                                   f"one record) longer than the record limit, --max-record-bytes "
                                                   f"{len(doc) - 1};")):
        _parse_all(io.BytesIO(doc), "json", multiline=True, max_record_bytes=len(doc) - 1)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_small_files_read_together_keep_the_limit_and_name_the_right_file(fmt, tmp_path):
    schema = Schema.from_dict(SCHEMA)
    good = b"id,s\n1,a\n" if fmt == "csv" else b'{"id": 1, "s": "a"}\n'
    long = (b"id,s\n" if fmt == "csv" else b"") + b"9," + b"x" * 5000 + b"\n"
    paths = []
    for name, data in (("a", good), ("b", good), ("c", long)):
        (tmp_path / f"{name}.{fmt}").write_bytes(data)
        paths.append(str(tmp_path / f"{name}.{fmt}"))
    headers = {p: ["id", "s"] for p in paths} if fmt == "csv" else {}
    groups = list(small_files.groups([(p, os.path.getsize(p)) for p in paths], schema=schema, input_format=fmt,
                                     multiline=False, headers=headers))
    assert groups == [paths]  # parsed together
    with pytest.raises(ValueError, match=f"^{re.escape(paths[2])}: line {2 if fmt == 'csv' else 1}, byte "):
        list(small_files.read_group(paths, schema, fmt, headers=headers, max_record_bytes=4096))
    got = list(small_files.read_group(paths, schema, fmt, headers=headers, max_record_bytes=8192))
    assert sum(pb.input_rows for pb in got) == 3


# ------------------------------------------------------------------ JSON: the driver's sample
def test_the_json_sample_skips_an_array_line_and_stops_at_the_limit(tmp_path):
    array_first = tmp_path / "a.jsonl"
    array_first.write_bytes(b'[{"id": 0}]\n{"id": 1, "s": "a"}\n')
    assert columns.sample_json_keys([str(array_first)]) == {str(array_first): {"id", "s"}}
    long_first = write_long_line_gz(tmp_path / "l.jsonl.gz", b'{"id": 1, "s": "', LINE, b'"}\n')
    tracemalloc.start()
    try:
        said = re.escape(f"{long_first}: line 1, byte 0 of the decompressed data: a line longer than the record "
                         f"limit, --max-record-bytes {LOW} ")
        with pytest.raises(ValueError, match=said):
            columns.sample_json_keys([str(long_first)], max_record_bytes=LOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * LOW, peak


def test_a_json_array_line_is_a_reject_that_names_its_line_and_says_multiline():
    data = b'[{"id": 0, "s": "a"}, {"id": 1}]\n{"id": 2, "s": "b"}\n[1, 2]\n{"id": 3}\n'
    rows, rejects = _parse_all(io.BytesIO(data), "json")
    assert rows == 2
    assert [(r["line"], r["reason"]) for r in rejects] == [
        (1, "not a JSON object: [{'id': 0, 's': 'a'}, {'id': 1}] (an array of objects; a file that is one JSON "
            "array is read with --multiline)"),
        (3, "not a JSON object: [1, 2]")]


# ------------------------------------------------------------------ the option
def test_the_option_takes_sizes_and_refuses_what_is_not_one(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--input", str(tmp_path), "--format", "json", "--schema", "s.yaml", "--output", str(tmp_path / "o")]
    assert from_args(parser.parse_args(base)).max_record_bytes == DEFAULT_MAX_RECORD_BYTES == 64 * MiB
    for text, value in (("8m", 8 * MiB), ("512KiB", 512 << 10), ("1g", 1 << 30), ("5000", 5000)):
        assert from_args(parser.parse_args(base + ["--max-record-bytes", text])).max_record_bytes == value
    with pytest.raises(SystemExit):
        parser.parse_args(base + ["--max-record-bytes", "8 apples"])
    with pytest.raises(ValueError, match="--max-record-bytes must be at least 1024 bytes, got 10"):
        ConversionOptions(inputs=str(tmp_path), input_format="json", schema="s.yaml", output=str(tmp_path / "o"),
                          max_record_bytes=10)


# ------------------------------------------------------------------ TFRecord length fields
def _claiming(length: int, then: bytes) -> bytes:
    header = struct.pack("<Q", length)
    return header + struct.pack("<I", framing.mask_crc(google_crc32c.value(header))) + then


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_record_length_claiming_a_terabyte_is_not_allocated(compression, tmp_path):
    """The length CRC is checked first; a length that passes it is read as far as the stream goes,
    never allocated up front: a truncated-data error after holding what the file has."""
    good = framing.frame_records([b"record one", b"record two"])
    stream = good + _claiming(2**40, b"x" * MiB)
    path = tmp_path / ("t.tfrecord" + (".gz" if compression == "gzip" else ""))
    path.write_bytes(zlib.compress(stream, 6, wbits=31) if compression == "gzip" else stream)
    tracemalloc.start()
    try:
        with pytest.raises(framing.CorruptRecordError, match=f"byte offset {len(good)}: truncated data: expected "
                                                             f"{2**40} data bytes, got {MiB}"):
            list(framing.read_records(str(path), compression=compression))
        with pytest.raises(framing.CorruptRecordError, match="truncated data"):
            list(framing.iter_record_lengths(str(path), compression=compression))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MiB, peak
    bad_crc = bytearray(good + _claiming(2**40, b""))
    bad_crc[len(good) + 9] ^= 1  # a damaged CRC of the length: refused before any data is read
    with pytest.raises(framing.CorruptRecordError, match=f"byte offset {len(good)}: length CRC"):
        list(framing.read_records(io.BytesIO(bytes(bad_crc))))


# ------------------------------------------------------------------ the engines
def test_a_json_array_line_is_a_reject_on_both_engines(engine, session, tmp_path):
    """#31 item 7: an array on line 1 used to refuse the whole file; the rest of it converts.  In the
    same run: a line of exactly the (low) limit converts."""
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_bytes(b'[{"id": 0, "s": "x"}]\n{"id": 1, "s": "a"}\n{"id": 2, "s": "b"}\n')
    at_limit = b'{"id": 3, "s": "' + b"c" * (8192 - 18) + b'"}'
    (d / "b.jsonl").write_bytes(at_limit + b"\n")
    out = tmp_path / "out"
    manifest = convert(engine, session, str(d), "json", _schema_file(tmp_path), str(out), max_record_bytes=8192)
    t = manifest["totals"]
    assert (t["input_rows"], t["records"], t["rejected"]) == (4, 3, 1)
    rejects = [json.loads(line) for p in sorted((out / "_rejects").glob("*.jsonl")) for line in p.open()]
    assert [(Path(r["source"]).name, r["line"], r["raw"]) for r in rejects] == [("a.jsonl", 1, '[{"id": 0, "s": "x"}]')]
    assert rejects[0]["reason"].startswith("not a JSON object: ") and "--multiline" in rejects[0]["reason"]


@pytest.mark.parametrize("fmt, limit", [("csv", None), ("json", LOW)])
def test_the_spark_job_fails_at_the_limit_within_seconds(fmt, limit, spark, long_lines, tmp_path):
    path = long_lines[fmt]
    kw = {} if limit is None else {"max_record_bytes": limit}
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        convert("spark", spark, str(path.parent), fmt, _schema_file(tmp_path), str(tmp_path / "out"), **kw)
    took = time.monotonic() - started
    limit = limit or DEFAULT_MAX_RECORD_BYTES
    assert re.search(re.escape(f"{path}: {WHERE[fmt]} of the decompressed data: a line longer than the record "
                               f"limit, --max-record-bytes {limit} "), str(info.value)), str(info.value)[:3000]
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    assert took < 60, took


def _beam_cli(tmp_path: Path, inp: Path, fmt: str, *extra: str) -> tuple[int, str, int, float]:
    """``tfrecord-io convert --engine beam`` (FnApiRunner: the pipeline runs in the command's own
    process): (exit status, stderr, the process's peak RSS in bytes, seconds)."""
    args = [str(VENV_BIN / "tfrecord-io"), "convert", "--engine", "beam", "--engine-arg=--runner=FnApiRunner",
            "--input", str(inp), "--format", fmt, "--schema", _schema_file(tmp_path),
            "--output", str(tmp_path / f"out-{inp.name}"), "--overwrite", *extra]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TFRECORD_IO_PROGRESS", None)
    err_path = tmp_path / f"stderr-{inp.name}.txt"
    started = time.monotonic()
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env)
    peak = 0
    while True:
        # The program's own high-water mark, VmHWM (new at exec): wait4's ru_maxrss would count the
        # memory the child held at fork, before exec -- all of this pytest process's, TensorFlow's too.
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                peak = max([peak] + [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:")])
        except (OSError, ValueError, IndexError):
            pass
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > 300:
            proc.kill()
            os.wait4(proc.pid, 0)
            raise AssertionError(f"tfrecord-io convert --engine beam on {inp} still running after 300 s")
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return proc.returncode, err_path.read_text(), peak, time.monotonic() - started


@pytest.mark.slow
def test_beam_fails_at_the_limit_within_seconds_in_bounded_memory(long_lines, tmp_path):
    """The Beam pipeline as ``tfrecord-io convert --engine beam`` runs it, on the 1 GiB lines: it fails
    within seconds, its peak RSS that of a small conversion plus about the limit (twice, at most).
    Three conversions of about 17 s in all: ``slow``; the fast tier has the parser's own limit and
    memory on the same lines (test_a_long_line_in_a_small_gz_fails_at_the_limit_naming_file_line_and_limit)."""
    small = tmp_path / "small"
    small.mkdir()
    (small / "t.json").write_bytes(b'{"id": 1, "s": "a"}\n{"id": 2, "s": "b"}\n')
    rc, err, base, _ = _beam_cli(tmp_path, small, "json")
    assert rc == 0, err[-3000:]
    for fmt, limit in (("json", DEFAULT_MAX_RECORD_BYTES), ("csv", LOW)):
        path = long_lines[fmt]
        extra = () if limit == DEFAULT_MAX_RECORD_BYTES else ("--max-record-bytes", f"{limit // MiB}m")
        rc, err, peak, took = _beam_cli(tmp_path, path.parent, fmt, *extra)
        assert rc == 1, err[-3000:]
        line = f"{path}: {WHERE[fmt]} of the decompressed data: a line longer than the record limit, " \
               f"--max-record-bytes {limit} "
        assert line in err, err[-3000:]
        print(f"beam {fmt} limit {limit}: failed after {took:.1f} s, peak RSS {peak / MiB:.0f} MiB "
              f"(a small conversion: {base / MiB:.0f} MiB)")
        assert took < 60, took
        assert peak - base < 2 * limit + 64 * MiB and peak < LINE // 2, (fmt, limit, peak, base)
