"""The protobuf wire scanner: what a batch of serialized ``tf.train.Example`` / ``SequenceExample``
records holds, every key and kind, found with numpy over the concatenated record bytes -- no
Python object per record, feature or value -- and without a schema (:func:`scan_batch`).
:mod:`tfrecord_io.core.arrow_decode` builds Arrow columns from a scan; ``verify`` and ``stats``
read the scan itself.  The messages (``tensorflow/core/example/{example,feature}.proto``)::

    Example          { Features features = 1; }
    SequenceExample  { Features context = 1; FeatureLists feature_lists = 2; }
    Features         { map<string, Feature> feature = 1; }        # entry: {string key = 1; Feature value = 2;}
    FeatureLists     { map<string, FeatureList> feature_list = 1; }
    FeatureList      { repeated Feature feature = 1; }
    Feature          { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
    Int64List { repeated int64 value = 1 [packed]; }

Every field here is length-delimited (``tag len payload``, tag ``field << 3 | 2``), so parsing is
finding, in every record at once, the units of repeated length-delimited fields.  Units follow
one another (a unit's length says where the next starts), so the records are walked in lock
step: step k reads the k-th unit of every region that has one -- its tag byte and its length
varint, gathered from the buffer at all positions at once -- so the Python work is one step per
unit of the *longest* region, not per record.  The few regions still going after many steps
(long sequences) are finished by a plain loop.  Varints are decoded eight bytes at a time from
an unaligned 64-bit view of the buffer (bit tricks, no per-byte loop).  Three shortcuts skip most
of that work for what writers usually produce, each checked for every record it is taken for:

* the same keys in the same order in every record (one writer, no missing feature): entry k of
  every record is feature k, its header (``0A <key length> <key> 12``) compared at once;
* units all of one size (the steps of a scalar float feature list): found by arithmetic, their
  tag and length checked where it puts them;
* a ``Feature`` whose list has one field and both lengths under 128 (scalars, short lists) is
  known from its first four bytes.

The fast path takes the *canonical* layout, which every protobuf serializer writes (TensorFlow,
Java -- spark-tfrecord, Beam --, Python, and our encoder): at most one ``features`` (or
``context``, then ``feature_lists``) field, map entries holding the key and then the value, a
``Feature`` with one list field, numbers packed in one field.  Each of these is checked, for
every record; a record that departs from it in any way -- unpacked numbers, a map entry with
its value first or a key twice, a feature twice in one record, a field these messages do not
have, a truncated length, a key that is not UTF-8 -- is left out of the scan and marked
(:attr:`Scan.odd`), for :func:`tfrecord_io.core.decode.decode_record` to decode, which applies
protobuf's rules (merging, the last entry for a key winning) and refuses what is not an Example.
Every feature of a record is checked.  A reader that asks for some features only
(:func:`scan_batch`'s ``features`` / ``feature_lists``: column pruning) gets the others checked
by their wire structure alone -- tags, wire types, lengths within bounds, the kind field, packed
lengths, a float payload a multiple of 4 bytes, every varint ended within 10 bytes -- the same
checks, so the same records are odd, without their values being read.

A compiled equivalent (``native/src/scan.rs``, record by record in Rust) runs instead when the compiled core does
(:func:`tfrecord_io.core.native.active`); this numpy scan is its reference and fallback (``tests/test_native_scan.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Collection

import numpy as np
import pyarrow as pa

from tfrecord_io.core import native

__all__ = ["KIND_BYTES", "KIND_CODE", "KIND_FLOAT", "KIND_INT64", "KIND_NONE", "Scan", "ScannedFeature", "ScannedList",
           "Values", "Wire", "binary_parts", "exclusive_cumsum", "is_utf8", "scan_batch", "scan_wire"]

#: Kind codes of :attr:`Values.kind`: a ``Feature`` with no kind set, then the field numbers of
#: ``bytes_list``, ``float_list``, ``int64_list`` in ``tf.train.Feature``.
KIND_NONE, KIND_BYTES, KIND_FLOAT, KIND_INT64 = 0, 1, 2, 3
KIND_CODE = {"bytes_list": KIND_BYTES, "float_list": KIND_FLOAT, "int64_list": KIND_INT64}
_BAD = 255
_KIND_OF_TAG = np.full(256, _BAD, dtype=np.uint8)
_KIND_OF_TAG[[0x0A, 0x12, 0x1A]] = [KIND_BYTES, KIND_FLOAT, KIND_INT64]

_PAD = 32            # zero bytes after the records: every gather near the end stays in the buffer
_TAIL_REGIONS = 8    # a walk with this few regions still going ...
_TAIL_AFTER = 64     # ... after this many steps finishes them with a plain loop
_U = np.uint64
_HIGH_BITS = _U(0x8080808080808080)
#: The stop bits of a varint of k bytes among its first 8 bytes (none for 9 and 10 bytes).
_LAST_STOP = np.array([0] + [0x80 << (8 * (k - 1)) for k in range(1, 9)] + [0, 0], dtype=np.uint64)
_BYTE_MASK = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)
_NOT_UTF8_KEY = -1
_SEED_ENTRIES = 256  # entries a batch's key table is first built from
_NO_BYTES = pa.array([], pa.large_binary())
_NO_FLOATS, _NO_INTS = np.empty(0, np.float32), np.empty(0, np.int64)


def _pext7(w: np.ndarray) -> np.ndarray:
    """The 7-bit groups of each uint64's bytes, packed (a varint's value from its first 8 bytes)."""
    x = w & _U(0x7F7F7F7F7F7F7F7F)
    x = (x & _U(0x007F007F007F007F)) | ((x >> _U(1)) & _U(0x3F803F803F803F80))
    x = (x & _U(0x00003FFF00003FFF)) | ((x >> _U(2)) & _U(0x0FFFC0000FFFC000))
    return (x & _U(0x000000000FFFFFFF)) | ((x >> _U(4)) & _U(0x00FFFFFFF0000000))


def exclusive_cumsum(counts: np.ndarray) -> np.ndarray:
    """Where each of ``counts`` starts when laid end to end, and their total last (n + 1 values)."""
    out = np.empty(len(counts) + 1, dtype=np.int64)
    out[0] = 0
    np.cumsum(counts, out=out[1:])
    return out


class Wire:
    """The records of a batch back to back, and the gathers over them (:func:`scan_wire` scans one;
    :meth:`record` gives a record's bytes back).

    The records' bytes are borrowed where they already lie back to back (an Arrow binary array: its
    data buffer and offsets, no copy) and copied once otherwise (a sequence of ``bytes``).  That is
    all the compiled scan reads (``data``, ``offsets``: it checks every position against a record's
    end).  The numpy scan gathers fixed-size rows near a record's end, so its view (``buf``,
    ``bounds`` ...) is a copy of the records followed by ``_PAD`` zero bytes, made when first used."""

    def __init__(self, records):
        if isinstance(records, pa.ChunkedArray):
            records = records.combine_chunks()
        if isinstance(records, pa.Array):
            if not (pa.types.is_binary(records.type) or pa.types.is_large_binary(records.type)):
                raise TypeError(f"expected a binary array of serialized records, got {records.type}")
            if records.null_count:
                raise ValueError("a null record: serialized records cannot be null")
        else:
            records = pa.array(records, pa.large_binary())  # Arrow copies the bytes in C++
        width = np.int64 if pa.types.is_large_binary(records.type) else np.int32
        _, off_buf, data = records.buffers()
        self.n = len(records)
        #: the bytes the records lie in, and n + 1 rising positions in them: record i is
        #: ``data[offsets[i]:offsets[i + 1]]``
        self.data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        self.offsets = np.frombuffer(off_buf, dtype=width, count=self.n + 1,
                                     offset=records.offset * np.dtype(width).itemsize).astype(np.int64, copy=False)
        # Views of k raw bytes from every byte of the padded copy (element i: the bytes at
        # i..i+k-1), made as needed: numpy gathers an element as one copy, so a row of several
        # words costs about what one unaligned integer does.
        self._views: dict[int, np.ndarray] = {}

    def record(self, i: int) -> bytes:
        return self.data[self.offsets[i]:self.offsets[i + 1]].tobytes()

    @functools.cached_property
    def buf(self) -> np.ndarray:
        """The records back to back from position 0, then ``_PAD`` zero bytes (the numpy scan's)."""
        first, last = int(self.offsets[0]), int(self.offsets[-1])
        out = np.zeros(last - first + _PAD, dtype=np.uint8)
        out[:last - first] = self.data[first:last]
        return out

    @functools.cached_property
    def bounds(self) -> np.ndarray:
        """n + 1 positions in :attr:`buf`: the records' starts, then the first padding byte."""
        return self.offsets - self.offsets[0]

    @property
    def starts(self) -> np.ndarray:
        return self.bounds[:-1]

    @property
    def ends(self) -> np.ndarray:
        return self.bounds[1:]

    @property
    def limit(self) -> int:
        """The first padding byte of :attr:`buf`."""
        return int(self.bounds[-1])

    @functools.cached_property
    def arrow(self) -> pa.Buffer:
        """:attr:`buf` without its padding, as an Arrow buffer."""
        return pa.py_buffer(self.buf[:self.limit])

    @functools.cached_property
    def raw(self) -> memoryview:
        """:attr:`buf` without its padding, as unsigned bytes."""
        return memoryview(self.buf[:self.limit])

    def _bytes_at(self, pos: np.ndarray, size: int) -> np.ndarray:
        view = self._views.get(size)
        if view is None:
            view = self._views[size] = np.ndarray((len(self.buf) - size + 1,), f"V{size}", self.buf, 0, (1,))
        return view[pos]

    def u64(self, pos: np.ndarray) -> np.ndarray:
        """The 8 bytes at each position as a little-endian uint64."""
        return self._bytes_at(pos, 8).view("<u8")

    def u32(self, pos: np.ndarray) -> np.ndarray:
        """The 4 bytes at each position as a little-endian uint32."""
        return self._bytes_at(pos, 4).view("<u4")

    def rows(self, pos: np.ndarray, size: int) -> np.ndarray:
        """The ``size`` bytes at each position, a row each (one gather however wide); a position
        past the buffer's end reads the last ``size`` bytes (lengths not yet checked)."""
        if size > _PAD:
            pos = np.minimum(pos, len(self.buf) - size)
        return self._bytes_at(pos, size).view(np.uint8).reshape(len(pos), size)

    def clamp(self, pos: np.ndarray) -> np.ndarray:
        """Positions computed from lengths not yet checked, kept inside the buffer."""
        return np.minimum(pos, self.limit)

    def varint(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
        """(value, size) of the varint at each position; size 0 where none ends within 8 bytes
        (a length that large exceeds any record anyway).  Size is the int 1 when every varint is
        one byte (most lengths are)."""
        b = self.buf[pos]
        if not len(b) or b.max() < 0x80:
            return b, 1
        value = b.astype(np.int64)
        size = np.ones(len(pos), dtype=np.int64)
        long = np.flatnonzero(b >= 0x80)
        if long.size:
            w = self.u64(pos[long])
            term = ~w & _HIGH_BITS                  # the stop bit of each byte that ends a varint
            low = term & (~term + _U(1))            # ... the first one
            nbytes = np.where(term == 0, 0, (np.log2(np.maximum(low, _U(1)).astype(np.float64))
                                             .astype(np.int64) >> 3) + 1)
            value[long] = _pext7(w & _BYTE_MASK[nbytes]).astype(np.int64)
            size[long] = nbytes
        return value, size


def _py_varint(raw: bytes, pos: int, end: int) -> tuple[int, int] | None:
    """(value, position after it) of a length varint at ``pos``: at most 8 bytes, as
    :meth:`Wire.varint` reads lengths (else None)."""
    result = shift = 0
    while pos < end and shift < 56:
        b = raw[pos]
        result |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return result, pos
        shift += 7
    return None


@dataclass
class _Units:
    """The units of a walk, region by region in order: ``owner`` (the region), payload [start, end)."""

    owner: np.ndarray
    start: np.ndarray
    end: np.ndarray
    counts: np.ndarray  # units per region
    bad: np.ndarray     # regions that are not a sequence of well-formed units of the tag


def _walk(wire: Wire, starts: np.ndarray, ends: np.ndarray, tag: int) -> _Units:
    """Split each region [starts[i], ends[i]) into the units ``tag len payload`` of a repeated
    length-delimited field, all regions in lock step (module doc)."""
    fixed = _fixed_units(wire, starts, ends, tag)
    if fixed is not None:
        return fixed
    n = len(starts)
    counts = np.zeros(n, dtype=np.int64)
    bad = np.zeros(n, dtype=bool)
    active = np.flatnonzero(starts < ends)
    pos, end = starts[active], ends[active]
    steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    tail: list[tuple[int, list[int], list[int]]] = []
    everyone = active.size == n  # every region still going: counts are len(steps), kept apart
    while active.size:
        if active.size <= _TAIL_REGIONS and len(steps) >= _TAIL_AFTER:
            tail = _walk_tail(wire.raw, active.tolist(), pos.tolist(), end.tolist(), tag, bad)
            if everyone:
                everyone = False
                counts += len(steps)
            break
        length, size = wire.varint(pos + 1)
        ps = pos + 1 + size
        pe = ps + length
        ok = (wire.buf[pos] == tag) & (size > 0) & (pe <= end)
        if not ok.all():
            bad[active[~ok]] = True
            active, ps, pe, end = active[ok], ps[ok], pe[ok], end[ok]
            if everyone:
                everyone = False
                counts += len(steps)
        steps.append((active, ps, pe))
        if not everyone:
            counts[active] += 1
        more = pe < end
        if not more.all():
            active, pe, end = active[more], pe[more], end[more]
            if active.size and everyone:  # from now on, count
                everyone = False
                counts += len(steps)
        pos = pe
    if everyone and steps:  # every region has the same number of units: a transpose
        counts += len(steps)
        return _Units(np.repeat(np.arange(n, dtype=np.int64), len(steps)),
                      np.stack([s[1] for s in steps], axis=1).reshape(-1),
                      np.stack([s[2] for s in steps], axis=1).reshape(-1), counts, bad)
    for r, ss, _ in tail:
        counts[r] += len(ss)
    offsets = exclusive_cumsum(counts)
    total = int(offsets[-1])
    owner = np.empty(total, dtype=np.int64)
    start = np.empty(total, dtype=np.int64)
    stop = np.empty(total, dtype=np.int64)
    for k, (act, ps, pe) in enumerate(steps):
        at = offsets[act] + k
        owner[at], start[at], stop[at] = act, ps, pe
    for r, ss, es in tail:
        at = offsets[r] + len(steps)
        owner[at:at + len(ss)], start[at:at + len(ss)], stop[at:at + len(ss)] = r, ss, es
    return _Units(owner, start, stop, counts, bad)


def _fixed_units(wire: Wire, starts: np.ndarray, ends: np.ndarray, tag: int) -> _Units | None:
    """The units when they all have the first one's size (the steps of a scalar float feature list,
    fixed-width values): every region a whole number of them, each unit's tag and one-byte length
    checked where the arithmetic puts it -- which is where a walk would find them.  Else None."""
    lengths = ends - starts
    first = np.flatnonzero(lengths)
    if not first.size:
        return None
    s0 = int(starts[first[0]])
    size = int(wire.buf[s0 + 1]) + 2
    if wire.buf[s0] != tag or size >= 0x82 or (lengths % size).any():
        return None
    counts = lengths // size
    owner = np.repeat(np.arange(len(starts)), counts)
    at = np.arange(len(owner)) * size + np.repeat(starts - exclusive_cumsum(counts)[:-1] * size, counts)
    if not ((wire.buf[at] == tag) & (wire.buf[at + 1] == size - 2)).all():
        return None
    return _Units(owner, at + 2, at + size, counts, np.zeros(len(starts), dtype=bool))


def _walk_tail(raw: bytes, regions: list, pos: list, end: list, tag: int, bad: np.ndarray) -> list:
    """The rest of a few long regions, one unit at a time: [(region, starts, ends)]."""
    out = []
    for r, p, e in zip(regions, pos, end):
        ss: list[int] = []
        es: list[int] = []
        while p < e:
            got = _py_varint(raw, p + 1, e) if raw[p] == tag else None
            if got is None or got[1] + got[0] > e:
                bad[r] = True
                break
            ss.append(got[1])
            p = got[1] + got[0]
            es.append(p)
        out.append((r, ss, es))
    return out


def _ranges(wire: Wire, start: np.ndarray, end: np.ndarray) -> pa.LargeBinaryArray:
    """The byte ranges [start[i], end[i]) of the buffer as one compact binary array.  The ranges are
    in buffer order and do not overlap, so they and the gaps between them tile a stretch of the
    buffer: a binary array of 2m values over it, of which Arrow's ``take`` keeps the even ones."""
    m = len(start)
    if m == 0:
        return _NO_BYTES
    off = np.empty(2 * m + 1, dtype=np.int64)
    off[0:2 * m:2] = start
    off[1:2 * m:2] = end
    off[2 * m] = end[-1]
    tiled = pa.Array.from_buffers(pa.large_binary(), 2 * m, [None, pa.py_buffer(off), wire.arrow])
    return tiled.take(pa.array(np.arange(0, 2 * m, 2, dtype=np.int64)))


def binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets[n+1], data) of a large_binary array without nulls."""
    off = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    data = arr.buffers()[2]
    return off, (np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8))


# ---------------------------------------------------------------------------------------
# Feature messages
# ---------------------------------------------------------------------------------------
@dataclass
class Values:
    """The ``Feature`` messages of one feature, one *slot* each (a record that holds the feature, or
    a step of a feature list): ``kind`` (``KIND_*``) and ``counts`` (values) per slot, and the values
    of the slots of each kind, slot after slot: ``floats`` (float32, bit for bit), ``ints`` (int64),
    ``data`` (the values of ``bytes_list`` slots, a large_binary array)."""

    kind: np.ndarray
    counts: np.ndarray
    floats: np.ndarray
    ints: np.ndarray
    data: pa.Array
    bad: np.ndarray = field(repr=False)  # slots the fast path cannot take
    #: the kind every slot has, each slot holding one value, when the scan knows it without a look
    #: at ``kind`` and ``counts`` (the compiled scan's usual scalar column); None: look
    one: int | None = field(default=None, repr=False, compare=False)

    def any_of_kind(self, kind: int) -> bool:
        """Whether a slot has ``kind``."""
        return self.one == kind if self.one is not None else bool((self.kind == kind).any())

    def one_each_of_kind(self, kind: int) -> bool:
        """Whether every slot holds one value, of ``kind``."""
        if self.one is not None:
            return self.one == kind
        return bool((self.kind == kind).all() and (self.counts == 1).all())

    def select(self, keep: np.ndarray) -> "Values":
        """The slots where ``keep`` (a bool mask) holds, with their values."""
        kept = {}
        for k, name in ((KIND_FLOAT, "floats"), (KIND_INT64, "ints"), (KIND_BYTES, "data")):
            of_kind = self.kind == k
            mask = np.repeat(keep[of_kind], self.counts[of_kind])
            values = getattr(self, name)
            kept[name] = values.filter(pa.array(mask)) if name == "data" else values[mask]
        return Values(self.kind[keep], self.counts[keep], bad=self.bad[keep], **kept)

    def value_offsets(self, kind: int) -> np.ndarray:
        """Where each slot's values start among the values of ``kind`` (slots of other kinds hold none)."""
        return exclusive_cumsum(np.where(self.kind == kind, self.counts, 0))


def _layout(wire: Wire, vs: np.ndarray, ve: np.ndarray, kinds: tuple[np.ndarray, np.ndarray]):
    """The wire structure of ``Feature`` messages at [vs, ve) (m > 0 of them), checking the canonical
    layout (module doc) down to the value payloads, not into them: (kind, simple, list start,
    payload start, payload end, bad).  A simple Feature's payload is its packed numbers or its one
    bytes value; a bytes_list that is not simple is walked from its list start.  ``kinds``: the
    Features' :func:`_kinds`."""
    m = len(vs)
    kind, simple = kinds
    if len(kind) == 1:
        kind, simple = np.repeat(kind, m), np.repeat(simple, m)
    ls = vs + 2  # the BytesList / FloatList / Int64List message
    ps = vs + 4  # a simple Feature's value field: a packed payload, or the one bytes value
    pe = ve
    bad = np.zeros(m, dtype=bool)
    if not simple.all():
        g = np.flatnonzero(~simple)
        kind[g], ls[g], le, bad[g] = _feature_lists(wire, vs[g], ve[g])
        numeric = np.flatnonzero((kind[g] == KIND_FLOAT) | (kind[g] == KIND_INT64))
        pe = ve.copy()
        if numeric.size:
            n = g[numeric]
            ps[n], pe[n], b = _packed(wire, ls[n], le[numeric])
            bad[n] |= b
            kind[n[b]] = KIND_NONE
    return kind, simple, ls, ps, pe, bad


def _kinds(wire: Wire, vs: np.ndarray, ve: np.ndarray, head: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_simple` of the Features at [vs, ve): one (kind, simple) for them all when their heads
    and sizes are all alike (fixed-width values: known once), else one per Feature.  ``head``: the
    four bytes at each ``vs`` when the caller has them already (else they are gathered)."""
    width = ve - vs
    if head is None:
        head = wire.u32(vs)
    if (head == head[0]).all() and (width == width[0]).all():
        return _simple(head[:1], width[:1])
    return _simple(head, width)


def _by_kind(kind: np.ndarray):
    """(kind, slots) for each value kind the slots hold, slots None when every slot has that kind."""
    for k in (KIND_FLOAT, KIND_INT64, KIND_BYTES):
        of_kind = kind == k
        if of_kind.any():
            yield k, None if of_kind.all() else np.flatnonzero(of_kind)


def _features(wire: Wire, vs: np.ndarray, ve: np.ndarray, head: np.ndarray | None = None) -> Values:
    """Parse ``Feature`` messages at [vs, ve), checking the canonical layout (module doc); ``head``
    as :func:`_kinds` takes it."""
    m = len(vs)
    if not m:
        return Values(np.zeros(0, np.uint8), np.zeros(0, np.int64), _NO_FLOATS, _NO_INTS, _NO_BYTES,
                      np.zeros(0, bool))
    kind, simple, ls, ps, pe, bad = _layout(wire, vs, ve, _kinds(wire, vs, ve, head))
    counts = np.zeros(m, dtype=np.int64)
    floats, ints, data = _NO_FLOATS, _NO_INTS, _NO_BYTES
    for k, idx in _by_kind(kind):
        s, e = (ps, pe) if idx is None else (ps[idx], pe[idx])
        if k == KIND_BYTES:
            c, data, b = _byte_values(wire, s, e, ls if idx is None else ls[idx],
                                      simple if idx is None else simple[idx])
        elif k == KIND_FLOAT:
            b = (e - s) % 4 != 0
            c = np.where(b, 0, (e - s) >> 2)
            floats = _floats(wire, s, c)
        else:
            c, ints, b = _varints(wire, s, e)
        if idx is None:
            counts, bad = c, bad | b
        else:
            counts[idx] = c
            bad[idx] |= b
    return Values(kind, counts, floats, ints, data, bad)


def _features_bad(wire: Wire, vs: np.ndarray, ve: np.ndarray, head: np.ndarray | None = None) -> np.ndarray:
    """``_features(wire, vs, ve).bad`` without reading a value: the same checks of the wire
    structure (the layout, a float payload a multiple of 4 bytes, every varint ended within 10
    bytes, a bytes_list's values within it) -- for the features a reader does not ask for."""
    m = len(vs)
    if not m:
        return np.zeros(0, dtype=bool)
    kinds = _kinds(wire, vs, ve, head)
    kind, simple = kinds
    if len(kind) == 1 and simple[0] and kind[0] != KIND_INT64:  # all alike: one check for them all
        return np.full(m, kind[0] == KIND_FLOAT and (ve[0] - vs[0]) % 4 != 0)
    kind, simple, ls, ps, pe, bad = _layout(wire, vs, ve, kinds)
    for k, idx in _by_kind(kind):
        s, e = (ps, pe) if idx is None else (ps[idx], pe[idx])
        if k == KIND_BYTES:  # a simple one holds one value, [s, e): nothing more to check
            other = ~simple if idx is None else ~simple[idx]
            if not other.any():
                continue
            b = np.zeros(len(s), dtype=bool)
            b[other] = _walk(wire, (ls if idx is None else ls[idx])[other], e[other], 0x0A).bad
        elif k == KIND_FLOAT:
            b = (e - s) % 4 != 0
        else:
            b = _varints_bad(wire, s, e)
        if idx is None:
            bad |= b
        else:
            bad[idx] |= b
    return bad


def _simple(head: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kind, simple) of Features by their first four bytes and their size.  The usual Feature is
    known from those bytes: its kind's tag, the list's length, the list's one field (tag 0A) and
    that field's length, both lengths under 128 (``width - 2`` and ``width - 4``)."""
    head = head.astype(np.int64)
    tag = head & 0xFF
    kind = _KIND_OF_TAG[tag]
    simple = (head - tag == (width * 0x01000100 + (0x0A0000 - 0x200 - 0x04000000))) \
        & (width >= 4) & (width <= 129) & (kind != _BAD)
    return kind, simple


def _byte_values(wire: Wire, s: np.ndarray, e: np.ndarray, ls: np.ndarray, simple: np.ndarray):
    """The values of BytesList slots: a simple one holds one, [s, e); the others are walked from
    their list start ``ls``.  Returns (values per slot, the values, bad slots)."""
    if simple.all():
        return np.ones(len(s), dtype=np.int64), _ranges(wire, s, e), np.zeros(len(s), dtype=bool)
    other = np.flatnonzero(~simple)
    units = _walk(wire, ls[other], e[other], 0x0A)
    counts = np.ones(len(s), dtype=np.int64)
    counts[other] = units.counts
    bad = np.zeros(len(s), dtype=bool)
    bad[other] = units.bad
    at = exclusive_cumsum(counts)
    starts, ends = np.empty(at[-1], dtype=np.int64), np.empty(at[-1], dtype=np.int64)
    one = np.flatnonzero(simple)
    starts[at[one]], ends[at[one]] = s[one], e[one]
    walked = np.repeat(at[other] - exclusive_cumsum(units.counts)[:-1], units.counts) + np.arange(len(units.start))
    starts[walked], ends[walked] = units.start, units.end
    return counts, _ranges(wire, starts, ends), bad


def _feature_lists(wire: Wire, vs: np.ndarray, ve: np.ndarray):
    """Any other Feature: (kind, list start, list end, bad); empty or bad ones have no kind."""
    empty = vs == ve
    kind = _KIND_OF_TAG[wire.buf[vs]]
    length, size = wire.varint(vs + 1)
    ls = vs + 1 + size
    le = ls + length
    bad = ~empty & ((kind == _BAD) | (size == 0) | (le != ve))
    none = empty | bad
    kind[none] = KIND_NONE
    return kind, np.where(none, vs, ls), np.where(none, vs, le), bad


def _packed(wire: Wire, s: np.ndarray, e: np.ndarray):
    """A FloatList / Int64List at [s, e): empty, or one packed field covering it.  Returns
    (payload start, payload end, bad)."""
    nonempty = s < e
    length, size = wire.varint(s + 1)
    ps = s + 1 + size
    ok = ~nonempty | ((wire.buf[s] == 0x0A) & (size > 0) & (ps + length == e))
    return np.where(ok & nonempty, ps, s), np.where(ok & nonempty, e, s), ~ok


def _floats(wire: Wire, ps: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The packed floats at ``ps``, ``counts`` of them per slot."""
    if (counts == 1).all():
        return wire.u32(ps).view("<f4")
    return np.frombuffer(_ranges(wire, ps, ps + 4 * counts).buffers()[2] or b"", dtype="<f4")


def _single_varints(wire: Wire, ps: np.ndarray, width: np.ndarray):
    """:func:`_varints` when every payload is empty or one varint of up to 10 bytes (else None)."""
    low = np.minimum(width, 8)
    w = wire.u64(ps) & _BYTE_MASK[low]
    stops = ~w & _HIGH_BITS & _BYTE_MASK[low]
    # one varint: a stop bit on its last byte only (none in the first 8 bytes of a 9- or 10-byte one)
    want = _LAST_STOP[width]
    single = (width > 0) & (stops == want)
    values = _pext7(w)
    long = np.flatnonzero(width > 8)
    if long.size:
        p, wl = ps[long], width[long]
        b8, b9 = wire.buf[p + 8], wire.buf[p + 9]
        single[long] &= np.where(wl == 9, b8 < 0x80, (b8 >= 0x80) & (b9 < 0x80))
        hi = (b8.astype(np.uint64) & _U(0x7F)) << _U(56)
        values[long] |= hi | np.where(wl == 10, b9.astype(np.uint64) << _U(63), _U(0))
    if not (single | (width == 0)).all():
        return None
    return single.astype(np.int64), values[single].view(np.int64), np.zeros(len(ps), bool)


def _varint_bounds(off: np.ndarray, data: np.ndarray, width: np.ndarray):
    """The packed varints of payloads laid end to end (``data``, slot i at [off[i], off[i + 1]),
    ``width`` bytes): (whether each byte ends a varint, each varint's first byte and size, bad
    slots: the last varint not ended, or one longer than 10 bytes)."""
    stop = data < 0x80
    last = off[1:][width > 0] - 1
    bad = np.zeros(len(width), dtype=bool)
    bad[width > 0] = ~stop[last]
    stop[last] = True  # a slot's values end with it, even when its last varint does not (a bad slot)
    ends = np.flatnonzero(stop)
    begins = np.concatenate([[0], ends[:-1] + 1])
    sizes = ends - begins + 1
    if (sizes > 10).any():  # a varint longer than 10 bytes: its slot is bad
        bad[np.searchsorted(off[1:], begins[sizes > 10], side="right")] = True
    return stop, begins, sizes, bad


def _varints_bad(wire: Wire, ps: np.ndarray, pe: np.ndarray) -> np.ndarray:
    """``_varints(wire, ps, pe)[2]`` without decoding a value: a payload's last byte ends a varint,
    and in payloads over 10 bytes (only there can one be longer) no varint is longer than 10."""
    width = pe - ps
    bad = (width > 0) & (wire.buf[pe - 1] >= 0x80)
    wide = np.flatnonzero(width > 10)
    if wide.size:
        off, data = binary_parts(_ranges(wire, ps[wide], pe[wide]))
        bad[wide] |= _varint_bounds(off, data, width[wide])[3]
    return bad


def _varints(wire: Wire, ps: np.ndarray, pe: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packed varints at [ps, pe) per slot: (values per slot, the values as int64, bad slots)."""
    m = len(ps)
    if m == 0:
        return np.zeros(0, np.int64), np.empty(0, np.int64), np.zeros(0, bool)
    width = pe - ps
    if width.max() <= 10:  # one varint each (scalars), read in place
        single = _single_varints(wire, ps, width)
        if single is not None:
            return single
    off, data = binary_parts(_ranges(wire, ps, pe))
    if not data.size:
        return np.zeros(m, np.int64), np.empty(0, np.int64), np.zeros(m, bool)
    stop, begins, sizes, bad = _varint_bounds(off, data, width)
    cum = exclusive_cumsum(stop)
    counts = cum[off[1:]] - cum[off[:-1]]
    data = np.concatenate([data, np.zeros(16, np.uint8)])
    u64 = np.ndarray((len(data) - 7,), "<u8", data, 0, (1,))
    w = u64[begins] & _BYTE_MASK[np.minimum(sizes, 8)]
    values = _pext7(w)
    nine = np.flatnonzero(sizes > 8)
    if nine.size:
        b = begins[nine]
        hi = (data[b + 8].astype(np.uint64) & _U(0x7F)) << _U(56)
        hi |= np.where(sizes[nine] > 9, data[b + 9].astype(np.uint64) << _U(63), _U(0))
        values[nine] |= hi
    return counts, values.view(np.int64), bad


# ---------------------------------------------------------------------------------------
# Records and maps
# ---------------------------------------------------------------------------------------
@dataclass
class _Entries:
    """Map entries (``Features`` or ``FeatureLists``): the region (record or map) each belongs to,
    its key id, its value [vs, ve); ``bad`` regions are not canonical."""

    owner: np.ndarray
    key: np.ndarray
    vs: np.ndarray
    ve: np.ndarray
    bad: np.ndarray


def _long_key_codes(wire: Wire, ks: np.ndarray, kl: np.ndarray) -> np.ndarray:
    """The codes of keys of 8 bytes or more: a hash of all their bytes, eight at a time (every
    word multiplied in, so keys that differ in one byte only do not share a code), the top byte
    0xFF (short keys' codes have their length there)."""
    h = kl.astype(np.uint64) * _U(0xC2B2AE3D27D4EB4F)
    for at in range(0, int(kl.max()), 8):
        i = np.flatnonzero(kl > at)
        word = wire.u64(ks[i] + at) & _BYTE_MASK[np.minimum(kl[i] - at, 8)]
        h[i] = (h[i] ^ word) * _U(0x9E3779B97F4A7C15)
    return (h >> _U(8)) | _U(0xFF << 56)


class _Keys:
    """The map keys of a batch: each distinct key gets an id (its index in ``names``).

    A key is known by a 64-bit code: keys of up to 7 bytes by their bytes and length (exact),
    longer ones by a hash of their bytes (:func:`_long_key_codes`), checked byte for byte
    against the key that first had the code (a collision sends the records to the slow path).
    Keys that are not UTF-8 get the id -1 (the record then goes to the slow path, which names it).
    """

    def __init__(self) -> None:
        self.codes = np.empty(0, dtype=np.uint64)  # sorted
        self.ids = np.empty(0, dtype=np.int64)     # id of each code
        self.names: list[str] = []
        self.raw: list[bytes] = []
        self._by_name: dict[bytes, int] = {}

    def resolve(self, wire: Wire, ks: np.ndarray, kl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(key id per entry, entries whose key could not be resolved exactly)."""
        short = kl <= 7
        w = wire.u64(ks) & _BYTE_MASK[np.minimum(kl, 8)]
        code = w | (np.minimum(kl, 7).astype(np.uint64) << _U(56))
        if not short.all():
            i = np.flatnonzero(~short)
            code[i] = _long_key_codes(wire, ks[i], kl[i])
        if not len(self.codes):  # the first entries hold most keys: learn them first
            self._learn(wire, ks, kl, code, np.arange(min(len(code), _SEED_ENTRIES)))
        at = np.searchsorted(self.codes, code)
        hit = self.codes[np.minimum(at, len(self.codes) - 1)] == code
        if not hit.all():
            self._learn(wire, ks, kl, code, np.flatnonzero(~hit))
            at = np.searchsorted(self.codes, code)
        ids = self.ids[at]
        unsure = ids == _NOT_UTF8_KEY
        if not short.all():  # long keys: compare the bytes with the name of their id
            i = np.flatnonzero(~short & ~unsure)
            unsure[i] = ~self._same(wire, ks[i], kl[i], ids[i])
        return ids, unsure

    def id_of(self, key: bytes) -> int | None:
        """The id of a key (None when it is not UTF-8)."""
        found = self._by_name.get(key)
        if found is None:
            try:
                self.names.append(key.decode("utf-8"))
            except UnicodeDecodeError:
                return None
            self.raw.append(key)
            found = self._by_name[key] = len(self.names) - 1
        return found

    def _learn(self, wire: Wire, ks: np.ndarray, kl: np.ndarray, code: np.ndarray, which: np.ndarray) -> None:
        """Give the codes of entries ``which`` that are new an id (names from their first entry)."""
        new, first = np.unique(code[which], return_index=True)
        fresh = ~np.isin(new, self.codes)
        new, firsts = new[fresh], which[first[fresh]]
        new_ids = []
        for j in firsts.tolist():
            key_id = self.id_of(wire.raw[ks[j]:ks[j] + kl[j]].tobytes())
            new_ids.append(_NOT_UTF8_KEY if key_id is None else key_id)
        codes = np.concatenate([self.codes, new])
        order = np.argsort(codes, kind="stable")
        self.codes, self.ids = codes[order], np.concatenate([self.ids, new_ids]).astype(np.int64)[order]

    def _same(self, wire: Wire, ks: np.ndarray, kl: np.ndarray, ids: np.ndarray) -> np.ndarray:
        same = np.ones(len(ks), dtype=bool)
        for key_id in np.unique(ids).tolist():
            name = self.raw[key_id]
            i = np.flatnonzero(ids == key_id)
            ref = np.frombuffer(name + bytes(8), dtype=np.uint8)
            for at in range(0, len(name), 8):
                n = min(8, len(name) - at)
                want = ref[at:at + 8].view("<u8")[0] & _BYTE_MASK[n]
                same[i] &= (wire.u64(ks[i] + at) & _BYTE_MASK[n]) == want
        return same


def _map_entries(wire: Wire, keys: _Keys, starts: np.ndarray, ends: np.ndarray) -> _Entries:
    """The entries of ``map<string, Message>`` regions, each checked to be ``key, value`` exactly."""
    units = _walk(wire, starts, ends, 0x0A)
    bs, be = units.start, units.end
    buf = wire.buf
    kl, ksize = wire.varint(bs + 1)
    ks = bs + 1 + ksize
    ke = wire.clamp(ks + kl)
    vl, vsize = wire.varint(ke + 1)
    vs = ke + 1 + vsize
    ve = vs + vl
    ok = (buf[bs] == 0x0A) & (ksize > 0) & (ke < be) & (buf[ke] == 0x12) & (vsize > 0) & (ve == be)
    ids = np.full(len(bs), _NOT_UTF8_KEY, dtype=np.int64)
    if ok.any():
        i = None if ok.all() else np.flatnonzero(ok)
        got, unsure = keys.resolve(wire, ks if i is None else ks[i], kl if i is None else kl[i])
        if i is None:
            ids, ok = got, ~unsure
        else:
            ids[i] = got
            ok[i] &= ~unsure
    bad = units.bad.copy()
    if not ok.all():
        bad[units.owner[~ok]] = True
        ids[~ok] = _NOT_UTF8_KEY
        vs, ve = np.where(ok, vs, bs), np.where(ok, ve, bs)
    return _Entries(units.owner, ids, vs, ve, bad)


def _same_bytes(wire: Wire, pos: np.ndarray, expected: bytes) -> bool:
    """Whether the bytes at every position start with ``expected`` (eight at a time)."""
    for at in range(0, len(expected), 8):
        chunk = expected[at:at + 8]
        want = _U(int.from_bytes(chunk, "little"))
        if not ((wire.u64(pos + at) & _BYTE_MASK[len(chunk)]) == want).all():
            return False
    return True


def _first_keys(raw: memoryview, pos: int, end: int) -> list[bytes] | None:
    """The keys of one ``Features`` region in order (the first record's), or None if it is not
    canonical (the vectorized checks then fail anyway)."""
    keys = []
    while pos < end:
        got = _py_varint(raw, pos + 1, end) if raw[pos] == 0x0A else None
        if got is None:
            return None
        length, body = got
        key = _py_varint(raw, body + 1, end) if raw[body] == 0x0A else None
        if key is None or key[1] + key[0] > body + length:
            return None
        keys.append(raw[key[1]:key[1] + key[0]].tobytes())
        pos = body + length
    return keys


def _same_layout(wire: Wire, starts: np.ndarray, ends: np.ndarray) -> list[tuple] | None:
    """The entries of ``map<string, Message>`` regions when every region holds the first region's
    keys in the same order -- files from one writer usually do: (name, value start, value end,
    the values' first 4 bytes or None) per key, one entry per region each.  Entry k of every
    region is then checked to have key k (the same header ``0A <key length> <key> 12``) and a
    value that ends it, and no region to hold more; a gather or two per key instead of finding
    every key of every region.  None when the layout
    differs anywhere (the general path, :func:`_map_entries`, then runs)."""
    if not len(starts):
        return None
    template = _first_keys(wire.raw, int(starts[0]), int(ends[0]))
    if template is None or len(set(template)) != len(template):
        return None
    pos, out = starts, []
    for key in template:
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            return None
        found = _short_entries(wire, pos, ends, key) or _entries_of(wire, pos, ends, key)
        if found is None:
            return None
        out.append((name, *found))
        pos = found[1]
    return out if (pos == ends).all() else None


def _short_entries(wire: Wire, pos: np.ndarray, ends: np.ndarray, key: bytes):
    """(value starts, entry ends, value heads) of entries at ``pos`` with key ``key`` when their
    lengths and their values' are one byte each: the whole header ``0A <len> 0A <key length> <key>
    12 <len>`` gathered in one row per entry and compared eight bytes at a time, the two lengths
    masked out and read from the same row.  The row runs 4 bytes past the header: the value's
    first 4 bytes (a ``Feature``'s kind tag and lengths, :func:`_layout`) come with it."""
    kl = len(key)
    if kl >= 0x80:  # a key length of two bytes or more: not this header
        return None
    size = -(-(10 + kl) // 8) * 8
    header = (b"\x0a\x00\x0a" + bytes([kl]) + key + b"\x12\x00").ljust(size, b"\x00")  # its lengths 0: masked
    care = (b"\xff\x00" + b"\xff" * (kl + 3) + b"\x00").ljust(size, b"\x00")
    row = wire.rows(pos, size)
    words = row.view("<u8")
    for j, (mask, want) in enumerate(zip(np.frombuffer(care, "<u8"), np.frombuffer(header, "<u8"))):
        if ((words[:, j] & mask) != want).any():  # column by column: numpy is slow over short rows
            return None
    length = row[:, 1].astype(np.int64)
    be = pos + 2 + length
    if length.max() >= 0x80 or (length - row[:, 5 + kl] != 4 + kl).any() or (be > ends).any():
        return None  # (a value length under 0x80 follows from these two)
    at, shift = divmod(6 + kl, 8)  # the head: bytes 6 + kl .. 9 + kl, in one word or across two
    head = words[:, at] >> _U(8 * shift)
    if shift > 4:
        head |= words[:, at + 1] << _U(64 - 8 * shift)
    return pos + 6 + kl, be, head.astype(np.uint32)


def _entries_of(wire: Wire, pos: np.ndarray, ends: np.ndarray, key: bytes):
    """:func:`_short_entries` for any lengths (varints read one by one), or None."""
    kl = len(key)
    if kl >= 0x80 or not (pos < ends).all():
        return None
    length, size = wire.varint(pos + 1)
    bs = pos + 1 + size
    be = bs + length
    if not ((wire.buf[pos] == 0x0A) & (size > 0) & (be <= ends) & (be - bs >= 4 + kl)).all() \
            or not _same_bytes(wire, bs, b"\x0a" + bytes([kl]) + key + b"\x12"):
        return None
    vl, vsize = wire.varint(bs + 3 + kl)
    vs = bs + 3 + kl + vsize
    return (vs, be, None) if ((vsize > 0) & (vs + vl == be)).all() else None


def _entries_by_key(wire: Wire, starts: np.ndarray, ends: np.ndarray):
    """The entries of ``map<string, Message>`` regions by key: ([(name, regions, value starts, value
    ends, the values' first 4 bytes or None)], bad regions); ``regions`` (ascending) is None when
    every region has the key."""
    same = _same_layout(wire, starts, ends)
    if same is not None:
        return [(name, None, *found) for name, *found in same], np.zeros(len(starts), dtype=bool)
    keys = _Keys()
    entries = _map_entries(wire, keys, starts, ends)
    groups = [(name, entries.owner[i], entries.vs[i], entries.ve[i], None) for name, i in _by_key(entries, keys)]
    return groups, entries.bad


@dataclass(frozen=True)
class ScannedFeature:
    """A feature of a batch: ``records`` (ascending), the record of each slot of ``values``."""

    records: np.ndarray
    values: Values


@dataclass(frozen=True)
class ScannedList:
    """A feature list of a batch: ``records`` (ascending) that hold it, ``steps`` in each, and the
    ``values`` of the steps (one slot per step: the steps of the first list, then the next's...)."""

    records: np.ndarray
    steps: np.ndarray
    values: Values


@dataclass(frozen=True)
class Scan:
    """What a batch of records holds (:func:`scan_batch`).

    ``odd``: the records the fast path leaves to :func:`tfrecord_io.core.decode.decode_record`
    (module doc): nothing of them is in ``features`` / ``feature_lists``, which hold the features
    (feature lists) the scan was asked to read, every one by default.  ``has_lists``: records
    with a ``feature_lists`` field (SequenceExamples).
    """

    n: int
    odd: np.ndarray
    has_lists: np.ndarray
    features: dict[str, ScannedFeature]
    feature_lists: dict[str, ScannedList]


def _record_regions(wire: Wire):
    """Per record: the ``features`` / ``context`` region, the ``feature_lists`` region (empty when
    absent), whether it has one, and whether the record is not one field 1 then one field 2."""
    ctx_s, ctx_e, _, f1_bad = _length_delimited(wire, wire.starts, 0x0A)
    lists_s, lists_e, f2_ok, f2_bad = _length_delimited(wire, ctx_e, 0x12)
    return ctx_s, ctx_e, lists_s, lists_e, f2_ok, (lists_e != wire.ends) | f1_bad | f2_bad


def _length_delimited(wire: Wire, p: np.ndarray, tag: int):
    """Per record, the length-delimited field whose tag byte is ``tag`` at ``p``: (its value's start
    and end, both ``p`` where it is not there or broken; where it is there; where it is broken)."""
    e, buf = wire.ends, wire.buf
    there = (p < e) & (buf[p] == tag)
    length, size = wire.varint(p + 1)
    a = p + 1 + size
    b = a + length
    ok = there & (size > 0) & (b <= e)
    return np.where(ok, a, p), np.where(ok, b, p), ok, there & ~ok


def _by_key(entries: _Entries, keys: _Keys) -> list[tuple[str, np.ndarray]]:
    """(name, entries with that key) for each key, entries in order."""
    good = entries.key >= 0
    ids = entries.key[good]
    if not ids.size:
        return []
    small = np.int16 if len(keys.names) < 2**15 else np.int32  # 16 bits: numpy's radix sort
    order = np.flatnonzero(good)[np.argsort(ids.astype(small), kind="stable")]
    bounds = exclusive_cumsum(np.bincount(ids, minlength=len(keys.names)))
    return [(keys.names[k], order[bounds[k]:bounds[k + 1]]) for k in range(len(keys.names))
            if bounds[k + 1] > bounds[k]]


def _twice(owners: np.ndarray) -> np.ndarray:
    """The owners (ascending) that appear more than once."""
    d = np.flatnonzero(owners[1:] == owners[:-1])
    return owners[d]


def scan_batch(records, features: Collection[str] | None = None,
               feature_lists: Collection[str] | None = None) -> Scan:
    """What a batch of serialized records holds, every key and kind, vectorized (module doc).

    ``records``: a binary / large_binary Arrow array or a sequence of ``bytes``.  ``features`` /
    ``feature_lists``: the names whose values the scan reads (default: every one).  The others are
    checked all the same, their wire structure as strictly as values are read (a record that is
    not a valid Example is odd whatever is asked), but their values are never read, and they are
    not in :attr:`Scan.features` / :attr:`Scan.feature_lists`: what a reader does not ask for
    costs it a structural check only.
    """
    return scan_wire(Wire(records), features, feature_lists)


def scan_wire(wire: Wire, features: Collection[str] | None = None,
              feature_lists: Collection[str] | None = None) -> Scan:
    """:func:`scan_batch` of the records already in a :class:`Wire` (for a reader that goes back to
    the bytes of the records the scan leaves out)."""
    compiled = native.active()
    if compiled is not None:
        return _compiled_scan(compiled, wire, features, feature_lists)
    features = None if features is None else frozenset(features)
    feature_lists = None if feature_lists is None else frozenset(feature_lists)
    ctx_s, ctx_e, lists_s, lists_e, has_lists, odd = _record_regions(wire)
    everyone = np.arange(wire.n)
    found: dict[str, tuple[np.ndarray, Values]] = {}
    groups, bad = _entries_by_key(wire, ctx_s, ctx_e)
    odd |= bad
    for name, owners, vs, ve, head in groups:
        if owners is None:  # every record has the key once
            owners = everyone
        else:
            odd[_twice(owners)] = True  # a key twice: the last entry wins (slow path)
        if features is None or name in features:
            values = _features(wire, vs, ve, head)
            found[name] = (owners, values)
            bad = values.bad
        else:
            bad = _features_bad(wire, vs, ve, head)
        if bad.any():
            odd[owners[bad]] = True
    lists: dict[str, tuple[np.ndarray, np.ndarray, Values]] = {}
    if has_lists.any():
        with_lists = np.flatnonzero(has_lists)
        groups, bad = _entries_by_key(wire, lists_s[with_lists], lists_e[with_lists])
        odd[with_lists[bad]] = True
        for name, owners, vs, ve, _ in groups:
            owners = with_lists if owners is None else with_lists[owners]
            steps = _walk(wire, vs, ve, 0x0A)
            odd[owners[steps.bad]] = True
            if feature_lists is None or name in feature_lists:
                values = _features(wire, steps.start, steps.end)
                lists[name] = (owners, steps.counts, values)
                odd[owners[steps.owner[values.bad]]] = True
            else:
                odd[owners[steps.owner[_features_bad(wire, steps.start, steps.end)]]] = True
            odd[_twice(owners)] = True
    if odd.any():
        keep = {name: ~odd[owners] for name, (owners, _) in found.items()}
        found = {name: (owners[keep[name]], values.select(keep[name])) for name, (owners, values) in found.items()}
        kept_lists = {}
        for name, (owners, steps, values) in lists.items():
            k = ~odd[owners]
            kept_lists[name] = (owners[k], steps[k], values.select(np.repeat(k, steps)))
        lists = kept_lists
    return Scan(wire.n, odd, has_lists & ~odd, {n: ScannedFeature(*v) for n, v in found.items()},
                {n: ScannedList(*v) for n, v in lists.items()})


_RUNS: dict[tuple, np.ndarray] = {}  # the compiled scan's runs as arrays, read-only, kept for the next batch
_RUNS_KEPT, _RUN_KEPT_MAX = 64, 1 << 16  # at most 64 kept, each of at most 65,536 items (<= 32 MiB in all)


def _run(n: int, value: int | None, dtype) -> np.ndarray:
    """``n`` items of ``value`` (None: 0, 1, 2...), read-only: made once per batch size, not per
    feature and batch (a column of a batch's records is most often one of a few such runs)."""
    key = (n, value, np.dtype(dtype).char)
    run = _RUNS.get(key)
    if run is None:
        run = np.arange(n, dtype=dtype) if value is None else np.full(n, value, dtype=dtype)
        run.flags.writeable = False
        if n <= _RUN_KEPT_MAX:
            if len(_RUNS) >= _RUNS_KEPT:
                _RUNS.clear()
            _RUNS[key] = run
    return run


def _compiled_column(column, dtype) -> np.ndarray:
    """A column of the compiled scan: (length, items as a bytearray, or the one value they all have,
    or None for 0, 1, 2...)."""
    n, items = column
    if items is None or isinstance(items, int):
        return _run(n, items, dtype)
    return np.frombuffer(items, dtype)


def _compiled_values(kind, counts, floats, ints, offsets, data) -> Values:
    """The :class:`Values` of a feature from the compiled scan (its bytearrays wrapped, not copied)."""
    one = kind[1] if isinstance(kind[1], int) and counts[1] == 1 else None
    kind = _compiled_column(kind, np.uint8)
    data = (_NO_BYTES if len(offsets) == 8 else  # a numeric feature's: no bytes values (offsets [0])
            pa.Array.from_buffers(pa.large_binary(), len(offsets) // 8 - 1, [None, pa.py_buffer(offsets),
                                                                          pa.py_buffer(data)]))
    return Values(kind, _compiled_column(counts, np.int64), np.frombuffer(floats, "<f4"), np.frombuffer(ints, np.int64),
                  data, _run(len(kind), False, bool), one=one)


_NO_BYTES = pa.array([], pa.large_binary())


def _compiled_scan(compiled, wire: Wire, features: Collection[str] | None,
                   feature_lists: Collection[str] | None) -> Scan:
    """:func:`scan_wire` by the compiled core (``native/src/scan.rs``): the same records odd, the
    same features and values (``tests/test_native_scan.py``); the dicts in the order the keys
    first appear."""
    odd, has_lists, found, lists = compiled.scan_examples(
        wire.data, wire.offsets, None if features is None else list(features),
        None if feature_lists is None else list(feature_lists))
    return Scan(wire.n, np.frombuffer(odd, bool), np.frombuffer(has_lists, bool),
                {name: ScannedFeature(_compiled_column(owners, np.int64), _compiled_values(*values))
                 for name, owners, *values, _ in found},
                {name: ScannedList(_compiled_column(owners, np.int64), _compiled_column(steps, np.int64),
                                   _compiled_values(*values))
                 for name, owners, *values, steps in lists})


def is_utf8(v: bytes) -> bool:
    """Whether a value's bytes are UTF-8 (a ``string`` feature's must be)."""
    try:
        v.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
