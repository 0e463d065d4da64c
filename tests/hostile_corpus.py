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


def all_cases() -> list[Case]:
    return compressed_cases()


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
