"""Input files: which files an input URI names, and how each is opened (decompressed, strictly).

One listing and one opener for every reader of CSV/JSON input (the Beam pipeline, the Spark
driver's header checks, ``infer-schema``), so that they agree on what the input is:

Listing (:func:`list_inputs`)
    A URI is a file, a directory (its files; names starting with ``_`` or ``.`` are skipped, as
    Hadoop's ``FileInputFormat`` skips ``_SUCCESS`` and ``.crc`` files; subdirectories are not
    entered) or a glob (``*``, ``?``, ``[``).  A path that exists as written is that path, even
    with ``*?[`` in its name: a pattern is expanded only when no such path exists (to glob where
    a same-named path exists, list the files, comma-separated).  A URI that matches nothing is a
    ``FileNotFoundError`` naming it.

Compression (:func:`open_input`)
    By extension, as Hadoop's codecs and Beam's ``CompressionTypes.AUTO`` choose: ``.gz``
    (gzip, several concatenated members allowed, as ``cat a.gz b.gz`` makes), ``.bz2`` (bzip2,
    multi-stream allowed) and ``.deflate`` (a zlib stream, Hadoop's ``DefaultCodec``).  The
    first bytes are checked against the extension: a ``.gz`` that is not gzip, or a ``.csv``
    that starts with a gzip, bzip2, zstd or xz signature, is a ``ValueError`` naming the file
    (reading compressed bytes as text would turn the whole file into rejects or, for a header,
    into a garbage column name).  Extensions of codecs we do not read (``.zst``, ``.xz``,
    ``.lz4``, ``.snappy``, ``.zip``) are refused the same way.  A read decompresses at most
    1 MiB at a time, however far the data expands (a small ``.gz`` of one huge line): the
    parser above holds what it reads up to its record limit (``--max-record-bytes``), never a
    decompressor's whole output.

Line ranges (:func:`open_line_range`)
    An uncompressed file whose records are lines can be read in parts, as Hadoop's
    ``LineRecordReader`` reads splits: the part for bytes ``[start, end)`` holds every line
    that *starts* in that range, whole (a line starts at 0 or just after a ``\n``).  The parts
    of a file hold each of its lines exactly once, and ``LineRange.lines`` counts the lines a
    part held, so that line numbers within a part can be made the file's.

    Decompression is strict: a stream that ends before its compressed end-of-stream marker
    (a truncated upload, a copy cut short) raises ``ValueError`` naming the file and the
    compressed byte offset where it ended, instead of ending the input quietly -- zlib and
    bz2 decompressors (and so Python's ``gzip`` module in streaming use, and Beam's
    ``CompressedFile``) return the bytes they have and say nothing.  Corrupt data (a bad CRC,
    an invalid block) and bytes after the last member that are not another member are
    errors the same way.  A conversion that meets one fails, naming the file; nothing is
    committed (``docs/wire-contract.md``, "Input files").
"""

from __future__ import annotations

import bz2
import io
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterable

from tfrecord_io.storage import fs

__all__ = ["DecompressingReader", "InputFile", "LineRange", "compression_of", "list_inputs", "open_input",
           "open_line_range"]

# Leading bytes of compressed formats ("magic numbers").
_MAGIC = {
    "gzip": b"\x1f\x8b",          # RFC 1952 ID1 ID2
    "bzip2": b"BZh",              # bzip2 stream header ("BZ", 'h' = Huffman-coded)
    "zstd": b"\x28\xb5\x2f\xfd",  # zstd frame magic 0xFD2FB528, little-endian
    "xz": b"\xfd7zXZ\x00",
}
_READABLE = {".gz": "gzip", ".bz2": "bzip2", ".deflate": "zlib"}
_UNREADABLE = (".zst", ".zstd", ".xz", ".lzma", ".lz4", ".snappy", ".zip", ".br")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class InputFile:
    """One input file: its full URI and its size in bytes (compressed size for compressed files)."""

    path: str
    size: int


def list_inputs(uris: str | Iterable[str]) -> list[InputFile]:
    """The input files of each URI (see the module doc), sorted and without duplicates."""
    if isinstance(uris, str):
        uris = [u for u in uris.split(",") if u.strip()]
    found: dict[str, int] = {}
    for uri in uris:
        for path, size in _files_of(uri.strip()):
            found.setdefault(path, size)
    return [InputFile(p, s) for p, s in sorted(found.items())]


def is_glob(uri: str) -> bool:
    """Whether ``uri`` is a glob pattern (``*``, ``?``, ``[...]``) and not a path that exists as
    written: a name the user gave literally is used literally (``in[1]/a.csv`` is that file when it
    exists, never ``in1/a.csv``); only a pattern that names no existing path is expanded."""
    return any(c in uri for c in "*?[") and not fs.exists(uri)


def hidden(uri: str) -> bool:
    """Names starting with ``_`` or ``.`` are not data (``_SUCCESS``, ``.crc`` files, temporaries)."""
    return uri.rstrip("/").rsplit("/", 1)[-1].startswith(("_", "."))


def _files_of(uri: str) -> list[tuple[str, int]]:
    if is_glob(uri):
        candidates = fs.glob(uri)
    elif fs.isdir(uri):
        candidates = fs.ls(uri)
    else:
        candidates = [uri]
    found = []
    for path in candidates:
        if path != uri and hidden(path):
            continue
        if fs.isdir(path):
            continue
        if not fs.exists(path):
            raise FileNotFoundError(f"input {path} does not exist")
        found.append((path, fs.size(path)))
    if not found:
        raise FileNotFoundError(f"no input files match {uri}")
    return found


def compression_of(uri: str) -> str:
    """``"none"``, ``"gzip"``, ``"bzip2"`` or ``"zlib"`` by the file's extension; ValueError for a
    compressed format we cannot read."""
    name = uri.rstrip("/").rsplit("/", 1)[-1].lower()
    for ext, codec in _READABLE.items():
        if name.endswith(ext):
            return codec
    for ext in _UNREADABLE:
        if name.endswith(ext):
            raise ValueError(f"{uri}: {ext} compressed input is not supported; decompress it, or recompress it "
                             f"as .gz or .bz2")
    return "none"


def _check_magic(uri: str, codec: str, head: bytes) -> None:
    if codec == "gzip" and head and not head.startswith(_MAGIC["gzip"]):
        raise ValueError(f"{uri}: named .gz but not gzip data (first bytes {head[:4].hex()}, expected 1f8b)")
    if codec == "bzip2" and head and not head.startswith(_MAGIC["bzip2"]):
        raise ValueError(f"{uri}: named .bz2 but not bzip2 data (first bytes {head[:4].hex()})")
    if codec == "none":
        for kind, magic in _MAGIC.items():
            if head.startswith(magic):
                hint = {"gzip": ".gz", "bzip2": ".bz2"}.get(kind)
                fix = f"name it *{hint} so that it is decompressed" if hint else "decompress it first"
                raise ValueError(f"{uri}: the file holds {kind}-compressed data but its name has no compression "
                                 f"extension; {fix}")


class _Wrapping(io.RawIOBase):
    """A read-only raw stream over another stream ``self._raw``, which it closes."""

    _raw: BinaryIO

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()
            finally:
                super().close()


class DecompressingReader(_Wrapping):
    """A read-only stream of the decompressed bytes of ``raw`` (gzip, bzip2 or zlib), strict about
    truncation, corruption and trailing garbage (see the module doc).  ``uri`` names the file in
    errors; ``consumed`` is the compressed offset reached."""

    def __init__(self, raw: BinaryIO, codec: str, uri: str):
        self._raw, self._codec, self._uri = raw, codec, uri
        self._d = self._new()
        self._out = memoryview(b"")
        self._tail = b""  # zlib: compressed input not yet decompressed (the output limit was reached)
        self._full = False  # the last call gave all the output it was allowed: more may be pending
        self._consumed = 0
        self._done = False

    def _new(self):
        if self._codec == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self._codec == "bzip2":
            return bz2.BZ2Decompressor()
        return zlib.decompressobj(zlib.MAX_WBITS)

    @property
    def consumed(self) -> int:
        return self._consumed

    def _error(self, what: str, e: BaseException | None = None) -> ValueError:
        return ValueError(f"{self._uri}: {what} at compressed byte {self._consumed}"
                          + (f" ({e})" if e is not None else ""))

    def _decompress(self, data: bytes) -> None:
        """Decompress ``data`` (after any held-back input) into ``_out``: at most :data:`_CHUNK` bytes
        a call, however much they expand (a gzip of zeros inflates ~1000-fold, bzip2 far more), so
        that what reads this stream decides how much is held: never a decompressor's whole output."""
        try:
            if self._codec == "bzip2":
                out = self._d.decompress(data, _CHUNK)
            else:
                out = self._d.decompress(self._tail + data if self._tail else data, _CHUNK)
                self._tail = self._d.unconsumed_tail
        except (zlib.error, OSError, EOFError) as e:
            raise self._error(f"corrupt {self._codec} data", e) from e
        self._full = len(out) >= _CHUNK
        self._out = memoryview(out)

    def _pending(self) -> bool:
        """Whether the decompressor has more output without more input."""
        if self._codec == "bzip2":
            return not self._d.needs_input
        return bool(self._tail) or self._full

    def _fill(self) -> None:
        """Decompress until some output is ready or the input has ended (then check it ended well)."""
        while not len(self._out) and not self._done:
            if self._d.eof:
                rest = self._d.unused_data
                if not rest:
                    rest = self._raw.read(_CHUNK)
                    self._consumed += len(rest)
                if not rest:
                    self._done = True
                    return
                if self._codec == "zlib" or not rest.startswith(_MAGIC[self._codec][:len(rest)]):
                    raise self._error(f"{len(rest)}+ bytes after the end of the {self._codec} stream that are "
                                      f"not another {self._codec} member (trailing garbage)")
                self._d, self._tail = self._new(), b""  # another member (concatenated gzip / multi-stream bzip2)
                self._decompress(rest)
                continue
            if self._pending():
                self._decompress(b"")
                continue
            chunk = self._raw.read(_CHUNK)
            if not chunk and self._consumed == 0:  # a zero-byte file: no data, as Hadoop reads it
                self._done = True
                return
            if not chunk:
                raise self._error(f"the {self._codec} stream ends early (truncated file: no end-of-stream "
                                  f"marker)")
            self._consumed += len(chunk)
            self._decompress(chunk)

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        self._fill()
        n = min(len(view), len(self._out))
        view[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


def open_input(uri: str) -> BinaryIO:
    """Open an input file for reading its (decompressed) bytes, buffered; see the module doc."""
    codec = compression_of(uri)
    raw = fs.open(uri, "rb")
    try:
        buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(_Raw(raw), _CHUNK)
        head = buffered.peek(8)[:8]
        _check_magic(uri, codec, head)
    except BaseException:
        raw.close()
        raise
    if codec == "none":
        return buffered
    return io.BufferedReader(DecompressingReader(buffered, codec, uri), _CHUNK)


class LineRange(_Wrapping):
    """The lines of a seekable binary stream that start in ``[start, end)`` (see the module doc).

    ``lines`` is the number of lines delivered so far (a last line without a newline counts);
    ``first`` the byte of the file where the first of them starts (errors name bytes from it).
    """

    def __init__(self, raw: BinaryIO, start: int, end: int):
        self._raw, self._end = raw, end
        self.lines = 0
        self._last = b"\n"  # the last byte delivered ("\n": no line is open)
        self._done = False
        self._buf = b""
        if start > 0:
            raw.seek(start - 1)
            self._pos = start - 1
            self._skip_to_line_start()
        else:
            self._pos = 0
        self.first = self._pos

    def _skip_to_line_start(self) -> None:
        while True:
            chunk = self._raw.read(_CHUNK)
            if not chunk:
                self._done = True
                return
            nl = chunk.find(b"\n")
            if nl >= 0:
                self._pos += nl + 1
                self._buf = chunk[nl + 1:]
                return
            self._pos += len(chunk)

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        if self._done:
            return 0
        if not self._buf:
            self._buf = self._raw.read(_CHUNK)
            if not self._buf:  # end of file: a last line without a newline still counts
                self._done = True
                if self._last != b"\n":
                    self.lines += 1
                return 0
        data = self._buf
        if self._pos < self._end:  # inside the range: any byte belongs to a line that starts in it
            take = min(len(view), len(data), self._end - self._pos)
        elif self._last == b"\n":  # past the range, and the last line is complete
            self._done = True
            return 0
        else:  # past the range: the rest of the line that started inside it
            nl = data.find(b"\n")
            take = min(len(view), len(data) if nl < 0 else nl + 1)
        view[:take] = data[:take]
        self._buf = data[take:]
        self._pos += take
        self.lines += data[:take].count(b"\n")
        self._last = data[take - 1:take]
        return take


def open_line_range(uri: str, start: int, end: int) -> tuple[BinaryIO, LineRange]:
    """A buffered stream of the lines of ``uri`` that start in ``[start, end)``, and the
    :class:`LineRange` under it (for its ``lines`` count once read).  Uncompressed files only."""
    if compression_of(uri) != "none":
        raise ValueError(f"{uri}: a compressed file cannot be read in parts")
    raw = fs.open(uri, "rb")
    try:
        rng = LineRange(raw, start, end)
    except BaseException:
        raw.close()
        raise
    return io.BufferedReader(rng, _CHUNK), rng


class _Raw(_Wrapping):
    """Any object with ``read(n)`` as a raw stream (for BufferedReader's ``peek``)."""

    def __init__(self, f):
        self._raw = f

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self._raw.read(len(view))
        view[:len(data)] = data
        return len(data)
