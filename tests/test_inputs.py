"""tfrecord_io.storage.inputs: the listing, the strict decompression and the line ranges every reader uses."""

from __future__ import annotations

import bz2
import gzip
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_io.storage import inputs

DATA = b"".join(b"%d,row %d\n" % (i, i) for i in range(50_000))


@pytest.mark.parametrize("ext,compress", [(".gz", gzip.compress), (".bz2", bz2.compress),
                                          (".deflate", zlib.compress)])
def test_whole_stream_decompresses_and_every_cut_is_an_error_naming_the_file(tmp_path, ext, compress):
    path = tmp_path / f"d.csv{ext}"
    packed = compress(DATA)
    path.write_bytes(packed)
    with inputs.open_input(str(path)) as f:
        assert f.read() == DATA
    for cut in (len(packed) // 3, len(packed) - 1, 12):
        path.write_bytes(packed[:cut])
        with pytest.raises(ValueError, match=rf"{path}: .*(ends early|corrupt)") as info:
            with inputs.open_input(str(path)) as f:
                while f.read(1 << 16):
                    pass
        assert "compressed byte" in str(info.value)


def test_concatenated_gzip_members_are_all_read_and_garbage_after_them_is_an_error(tmp_path):
    path = tmp_path / "d.gz"
    path.write_bytes(gzip.compress(b"a\n") + gzip.compress(b"b\n") + gzip.compress(b""))
    with inputs.open_input(str(path)) as f:
        assert f.read() == b"a\nb\n"
    path.write_bytes(gzip.compress(b"a\n") + b"\0\0junk")
    with pytest.raises(ValueError, match="trailing garbage"):
        inputs.open_input(str(path)).read()
    path.write_bytes(b"")
    assert inputs.open_input(str(path)).read() == b""  # a zero-byte file holds no rows


@pytest.mark.parametrize("name,data,match", [
    ("a.csv", gzip.compress(b"x", mtime=0), "gzip-compressed data but its name has no compression extension"),
    ("a.csv", b"\x28\xb5\x2f\xfd rest", "zstd"),
    ("a.csv.gz", b"plain text", "named .gz but not gzip"),
    ("a.csv.zst", b"whatever", "not supported"),
])
def test_content_must_match_the_name(tmp_path, name, data, match):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError, match=match):
        inputs.open_input(str(tmp_path / name))


def test_listing_skips_hidden_and_underscore_files_and_names_what_matches_nothing(tmp_path):
    for name in ("a.csv", "b.csv", "_SUCCESS", ".a.csv.crc"):
        (tmp_path / name).write_text("x\n")
    (tmp_path / "sub").mkdir()
    assert [f.path.rsplit("/", 1)[1] for f in inputs.list_inputs(str(tmp_path))] == ["a.csv", "b.csv"]
    assert [f.size for f in inputs.list_inputs(f"{tmp_path}/a.csv,{tmp_path}/*.csv")] == [2, 2]
    with pytest.raises(FileNotFoundError, match="no input files match"):
        inputs.list_inputs(f"{tmp_path}/*.json")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.binary(max_size=6).map(lambda b: b.replace(b"\n", b"")), max_size=25),
       final_newline=st.booleans(), cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_line_ranges_hold_every_line_once_and_count_them(tmp_path, lines, final_newline, cuts):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    joined, counted = b"", 0
    for a, b in zip(bounds, bounds[1:]):
        stream, rng = inputs.open_line_range(str(path), a, b)
        with stream:
            part = stream.read()
        at = len(joined)  # a part begins at a line start and ends at a line end (or the file's end)
        assert not part or at == 0 or data[at - 1:at] == b"\n"
        assert not part or part.endswith(b"\n") or at + len(part) == len(data)
        joined += part
        counted += rng.lines
    assert joined == data
    assert counted == data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
