"""The hostile-input corpus: input files generated here (no hand-kept blobs), one case per class
of damage, each with the promise it must keep on every engine.

A case is files (name -> bytes), an input format, a schema and an expectation:

* ``Ok(rows, records, rejects)``: the conversion succeeds with exactly these counts (and
  rows = records + rejects, checked by the test);
* ``Fails(file, why)``: the conversion fails and commits nothing, with an error that names the
  file and says what is wrong (a regular expression).

``python tests/hostile_corpus.py DIR`` writes the corpus out to look at.
"""

from __future__ import annotations

import bz2
import gzip
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = {
    "features": [
        {"name": "id", "type": "int64", "required": True},
        {"name": "x", "type": "float", "default": 0.0},
        {"name": "s", "type": "string", "default": ""},
    ],
}


@dataclass(frozen=True)
class Ok:
    rows: int
    records: int
    rejects: int


@dataclass(frozen=True)
class Fails:
    """The error names ``file`` and matches the regular expression ``why``."""

    file: str
    why: str = ""


@dataclass(frozen=True)
class Case:
    name: str
    files: dict[str, bytes]
    expect: Ok | Fails
    fmt: str = "csv"
    schema: dict = field(default_factory=lambda: SCHEMA)


def csv_rows(n: int, start: int = 1) -> bytes:
    return ("id,x,s\n" + "".join(f"{i},{i / 4},name{i}\n" for i in range(start, start + n))).encode()


def _cut_inside(data: bytes, compress, marker: bytes) -> bytes:
    """The compressed stream of ``data`` cut so that decompression stops inside ``marker``'s row.

    Found by search: the shortest prefix of the compressed bytes whose (lenient) decompression
    reaches ``marker``'s middle -- what a truncated upload looks like.
    """
    whole = compress(data)
    stop = data.index(marker) + len(marker) // 2
    lo, hi = 0, len(whole)
    while lo < hi:  # smallest prefix that decompresses to >= stop bytes
        mid = (lo + hi) // 2
        if len(_lenient(whole[:mid], compress)) >= stop:
            hi = mid
        else:
            lo = mid + 1
    return whole[:lo]


def _lenient(prefix: bytes, compress) -> bytes:
    if compress is bz2.compress:
        d = bz2.BZ2Decompressor()
    elif compress is gzip.compress:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    else:
        d = zlib.decompressobj()
    try:
        return d.decompress(prefix)
    except (OSError, zlib.error, EOFError):
        return b""


def compressed_cases() -> list[Case]:
    """#16 item 1, as a class: a compressed input that is cut, corrupt or not what its name says."""
    # Larger than any header peek (64 KiB): the damage is met by the engine's own reading.
    data = csv_rows(20_000)
    row = b"name10000\n"
    early = "ends early|Unexpected end of input stream"
    gz = gzip.compress(data)
    bad_crc = bytearray(gz)
    bad_crc[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    return [
        Case("gzip cut inside a row", {"t.csv.gz": _cut_inside(data, gzip.compress, row)},
             Fails("t.csv.gz", early)),
        Case("gzip cut in its trailer", {"t.csv.gz": gz[:-4]}, Fails("t.csv.gz", early)),
        Case("gzip with a bad CRC", {"t.csv.gz": bytes(bad_crc)}, Fails("t.csv.gz")),
        Case("gzip with trailing garbage", {"t.csv.gz": gz + b"garbage"}, Fails("t.csv.gz")),
        Case("bzip2 cut inside a row", {"t.csv.bz2": _cut_inside(data, bz2.compress, row)}, Fails("t.csv.bz2")),
        Case("deflate cut inside a row", {"t.csv.deflate": _cut_inside(data, zlib.compress, row)},
             Fails("t.csv.deflate")),
        Case("two gzip members, one after the other (cat a.gz b.gz)",
             {"t.csv.gz": gzip.compress(csv_rows(10)) + gzip.compress(csv_rows(5, 11)[len(b"id,x,s\n"):])},
             Ok(15, 15, 0)),
        Case("gzip named .csv", {"t.csv": gz}, Fails("t.csv", "gzip")),
        Case("jsonl cut inside a row", {"t.jsonl.gz": _cut_inside(
            b"".join(b'{"id": %d, "x": 1.5, "s": "name%d"}\n' % (i, i) for i in range(1, 20_001)),
            gzip.compress, b'"name10000"}\n')}, Fails("t.jsonl.gz", early), fmt="json"),
    ]


def malformed_cases() -> list[Case]:
    """#16 items 3-5, as classes: malformed CSV quotes, JSON that is not one object per line, values a
    lenient reader would rewrite.  Each is a reject (or an exact value), the same on both engines."""
    good_json = b'{"id": 1, "x": 0.5, "s": "fine"}\n'
    return [
        Case("quoted line break without --multiline (last column)",
             {"q.csv": b'id,x,s\n1,1.5,"two\nlines"\n2,2.5,plain\n'}, Ok(3, 1, 2)),
        Case("unbalanced quote in the last column", {"q.csv": b'id,x,s\n1,1.5,ok\n2,2.5,"bad\n'}, Ok(2, 1, 1)),
        Case("unbalanced quote mid-row", {"q.csv": b'id,x,s\n1,"1.5,ok\n2,2.5,fine\n'}, Ok(2, 1, 1)),
        Case("stray quote inside an unquoted field", {"q.csv": b'id,x,s\n1,1.5,a"b"c\n2,2.5,fine\n'}, Ok(2, 2, 0)),
        Case("two JSON objects on one line", {"j.jsonl": good_json + b'{"id": 10}{"id": 11}\n'}, Ok(2, 1, 1),
             fmt="json"),
        Case("JSON object with trailing garbage", {"j.jsonl": good_json + b'{"id": 9} trailing garbage\n'},
             Ok(2, 1, 1), fmt="json"),
        Case("JSON lone surrogate in a string", {"j.jsonl": good_json + b'{"id": 2, "s": "\\ud800"}\n'},
             Ok(2, 1, 1), fmt="json"),
        Case("JSON object or number for a string feature",
             {"j.jsonl": good_json + b'{"id": 3, "s": {"a": 1}}\n{"id": 4, "s": 5}\n{"id": 5, "s": [1]}\n'},
             Ok(4, 1, 3), fmt="json"),
        Case("JSON array or bare value for a row", {"j.jsonl": good_json + b'[1, 2]\n7\n"s"\nnull\n'},
             Ok(5, 1, 4), fmt="json"),
        Case("float correctly rounded to float32 (no double rounding)",
             {"f.csv": b"id,x,s\n1,1.0000000596046447753906250000001,a\n2,16777217,b\n3,3.4028235677973366e38,c\n"},
             Ok(3, 3, 0)),
        Case("float out of float32 range", {"f.csv": b"id,x,s\n1,3.5e38,a\n2,1e-50,b\n"}, Ok(2, 2, 0)),
        Case("integer edge cases", {"i.csv": b"id,x,s\n9223372036854775807,1,a\n9223372036854775808,1,b\n"
                                            b"-9223372036854775808,1,c\n 12,1,d\n1_000,1,e\n+7,1,f\n1.0,1,g\n"},
             Ok(7, 3, 4)),
    ]


def bomb_cases() -> list[Case]:
    """#16 item 6, as a class: one line that would take the parser (and so the job) down is one reject."""
    deep = b"[" * 10_000 + b"1" + b"]" * 10_000
    good_json = b'{"id": 1, "x": 0.5, "s": "fine"}\n'
    ignoring = {**SCHEMA, "ignore_columns": ["junk"]}
    return [
        Case("JSON nested 10,000 levels in a feature", {"d.jsonl": good_json + b'{"id": 2, "x": 1, "s": ' + deep
                                                         + b"}\n"}, Ok(2, 1, 1), fmt="json"),
        Case("JSON nested 10,000 levels in an ignored field",
             # pyarrow's reader skips the ignored value; the row converts
             {"d.jsonl": good_json + b'{"id": 2, "x": 1, "s": "a", "junk": ' + deep + b"}\n"}, Ok(2, 2, 0),
             fmt="json", schema=ignoring),
        Case("JSON whole-file document nested 10,000 levels", {"d.json": b'[{"id": 2, "x": 1, "s": ' + deep
                                                                + b"}]"}, Ok(1, 0, 1), fmt="json-multiline"),
        Case("a valid 20 MB JSON string", {"big.jsonl": b'{"id": 1, "x": 1, "s": "' + b"a" * (20 << 20) + b'"}\n'},
             Ok(1, 1, 0), fmt="json"),
        # A CSV record must fit in one parse block (--block-size, 4 MiB): a bigger one fails the file
        # with a message that says so, on both engines.
        Case("a 20 MB CSV cell", {"big.csv": b"id,x,s\n1,1," + b"a" * (20 << 20) + b"\n"},
             Fails("big.csv", "--block-size")),
    ]


def all_cases() -> list[Case]:
    return compressed_cases() + malformed_cases() + bomb_cases()


def write_case(case: Case, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (directory / name).write_bytes(data)
    return directory


if __name__ == "__main__":
    root = Path(sys.argv[1])
    for i, c in enumerate(all_cases()):
        write_case(c, root / f"{i:02d}")
        print(f"{i:02d}  {c.name}: {c.expect}")
