//! Arrow columns to serialized `tf.train.Example` / `SequenceExample` records.
//!
//! The byte-for-byte twin of `tfrecord_io/core/codec.py` (the numpy reference): the same map
//! entries in the same order (the caller orders them), a null scalar or list left out, an empty
//! list written as a present, empty list, packed floats and int64s (the packed field itself only
//! when there are values), bytes values each as their own field.  Two passes: the length of
//! every nested message first (protobuf puts each length before its bytes), then the bytes, each
//! record written once into one output buffer -- a block of rows at a time, an entry (column) at
//! a time within the block, so that each column's loop is one tight loop (a float or int64
//! scalar: a fixed-size prefix copy and its value), and the block's records are checksummed
//! while they are in cache.  A framed batch's buffer is kept for the next batch once let go.
//!
//! Wire layout (every field length-delimited, tag = field << 3 | 2):
//!   Example  = 0x0a len Features;  Features = (0x0a len MapEntry)*;
//!   MapEntry = 0x0a len(key) key 0x12 len Value;  Feature = kind_tag len List;
//!   List     = [0x0a len packed-values] (float, int64) | (0x0a len value)* (bytes);
//!   SequenceExample = [0x0a len Features] 0x12 len (0x0a len MapEntry{FeatureList})*;
//!   FeatureList = (0x0a len Feature)*.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffers::{check_offsets, slice};
use crate::crc::{masked_crc32c_u64, masked_crcs};
use crate::framing::{FOOTER, HEADER};
use crate::scratch::{give, give_out, take, take_empty, take_out};
use crate::varint;

/// One column as Python hands it over: (kind: 0 bytes / 1 float / 2 int64, elements, presence
/// (uint8 per element, None: all present), values per element (int64, None: one per present
/// element), ints (int64 values, or the offsets of the bytes values), data (float32 bytes, or
/// the bytes values' data)).
pub type ColumnArgs = (u8, usize, Option<PyBuffer<u8>>, Option<PyBuffer<i64>>, Option<PyBuffer<i64>>,
                       Option<PyBuffer<u8>>);

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bytes,
    Float,
    Int,
}

impl Kind {
    fn tag(self) -> u8 {
        match self {
            Kind::Bytes => 0x0a,
            Kind::Float => 0x12,
            Kind::Int => 0x1a,
        }
    }
}

/// How a column's per-element lengths are known.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// Kept in `list_len` and `payload`, one per element.
    Stored,
    /// A float scalar without nulls: every element's Feature is 8 bytes (the vectors are empty).
    FloatScalar,
    /// An int64 scalar without nulls: worked out from the value's varint size (the vectors are empty).
    IntScalar,
}

/// A column of elements (rows, or a sequence's steps), each a `tf.train.Feature` when present.
struct Column<'a> {
    kind: Kind,
    present: Option<&'a [u8]>,
    dense: bool,      // a scalar in every element: element i is value i (`ends` left empty)
    ends: Vec<usize>, // otherwise the values of element i: ends[i]..ends[i + 1]
    ints: &'a [i64],
    data: &'a [u8],
    n: usize,         // elements
    shape: Shape,     // how the lengths below are known
    list_len: Vec<u64>, // length of element i's list message (within its Feature; 0 when absent)
    payload: Vec<u64>,  // its packed payload's length (float, int64) or its list's (bytes)
}

#[inline]
fn framed_len(len: u64) -> u64 {
    1 + varint::size(len) as u64 + len
}

impl<'a> Column<'a> {
    fn new(args: &'a ColumnArgs, where_: &str) -> PyResult<Self> {
        let (kind, n, present, counts, ints, data) = args;
        let kind = match kind {
            0 => Kind::Bytes,
            1 => Kind::Float,
            2 => Kind::Int,
            k => return Err(PyValueError::new_err(format!("{where_}: unknown kind {k}"))),
        };
        let present = match present {
            Some(b) => Some(slice(b, where_)?),
            None => None,
        };
        if present.is_some_and(|p| p.len() != *n) {
            return Err(PyValueError::new_err(format!("{where_}: presence of {} elements, expected {n}",
                                                     present.unwrap().len())));
        }
        let ints: &[i64] = match ints {
            Some(b) => slice(b, where_)?,
            None => &[],
        };
        let data: &[u8] = match data {
            Some(b) => slice(b, where_)?,
            None => &[],
        };
        let values = match kind {
            Kind::Float => {
                if data.len() % 4 != 0 {
                    return Err(PyValueError::new_err(format!("{where_}: {} float bytes is not a multiple of 4",
                                                             data.len())));
                }
                data.len() / 4
            }
            Kind::Int => ints.len(),
            Kind::Bytes => {
                check_offsets(ints, data.len(), where_)?;
                ints.len() - 1
            }
        };
        let dense = counts.is_none() && present.is_none();
        let mut ends = take_empty(if dense { 0 } else { n + 1 });
        ends.push(0usize);
        let mut total = 0usize;
        match counts {
            Some(c) => {
                let c = slice(c, where_)?;
                if c.len() != *n {
                    return Err(PyValueError::new_err(format!("{where_}: {} counts, expected {n}", c.len())));
                }
                for &k in c {
                    if k < 0 {
                        return Err(PyValueError::new_err(format!("{where_}: a negative count ({k})")));
                    }
                    total += k as usize;
                    ends.push(total);
                }
            }
            None if dense => total = *n,
            None => {
                for i in 0..*n {
                    total += present.map_or(1, |p| (p[i] != 0) as usize);
                    ends.push(total);
                }
            }
        }
        if total != values {
            return Err(PyValueError::new_err(format!("{where_}: the elements hold {total} values, got {values}")));
        }
        let shape = match kind {
            Kind::Float if dense => Shape::FloatScalar,
            Kind::Int if dense => Shape::IntScalar,
            _ => Shape::Stored,
        };
        let stored = shape == Shape::Stored;
        let (list_len, payload) = if stored { (take(*n), take(*n)) } else { (Vec::new(), Vec::new()) };
        let mut col = Column { kind, present, dense, ends, ints, data, n: *n, shape, list_len, payload };
        for i in 0..if stored { *n } else { 0 } {
            if col.is_present(i) {
                let (p, list) = col.lengths(i);
                col.payload[i] = p;
                col.list_len[i] = list;
            }
        }
        Ok(col)
    }

    /// Length of element i's Feature message (0 when it is absent).
    #[inline]
    fn feature_len(&self, i: usize) -> u64 {
        if self.is_present(i) { framed_len(self.list_len_at(i)) } else { 0 }
    }

    /// The length of element i's list message (a packed float: tag, length 4, the float).
    #[inline]
    fn list_len_at(&self, i: usize) -> u64 {
        match self.shape {
            Shape::Stored => self.list_len[i],
            Shape::FloatScalar => 6,
            Shape::IntScalar => 2 + varint::size(self.ints[i] as u64) as u64,
        }
    }

    #[inline]
    fn payload_at(&self, i: usize) -> u64 {
        match self.shape {
            Shape::Stored => self.payload[i],
            Shape::FloatScalar => 4,
            Shape::IntScalar => varint::size(self.ints[i] as u64) as u64,
        }
    }

    #[inline]
    fn is_present(&self, i: usize) -> bool {
        self.present.map_or(true, |p| p[i] != 0)
    }

    /// The values of element i: `a..b`.
    #[inline]
    fn range(&self, i: usize) -> (usize, usize) {
        if self.dense { (i, i + 1) } else { (self.ends[i], self.ends[i + 1]) }
    }

    /// (payload length, list message length) of element i.
    #[inline]
    fn lengths(&self, i: usize) -> (u64, u64) {
        let (a, b) = self.range(i);
        match self.kind {
            Kind::Float => {
                let p = 4 * (b - a) as u64;
                (p, if b > a { framed_len(p) } else { 0 })
            }
            Kind::Int => {
                let p: u64 = self.ints[a..b].iter().map(|&v| varint::size(v as u64) as u64).sum();
                (p, if b > a { framed_len(p) } else { 0 })
            }
            Kind::Bytes => {
                let p: u64 = (a..b).map(|k| framed_len((self.ints[k + 1] - self.ints[k]) as u64)).sum();
                (p, p)
            }
        }
    }

    /// Write element i's Feature message (it must be present) at `out[at..]`.
    #[inline]
    fn write(&self, i: usize, out: &mut [u8], at: usize) -> usize {
        let at = self.write_header(i, out, at);
        self.write_values(i, out, at)
    }

    /// The bytes of element i's Feature before its values: the kind's tag, the list's length and,
    /// for packed numbers, the packed field's tag and length.  The same for every element whose
    /// Feature has the same length (`Entry` keeps them by that length).
    #[inline]
    fn write_header(&self, i: usize, out: &mut [u8], mut at: usize) -> usize {
        out[at] = self.kind.tag();
        at = varint::put(out, at + 1, self.list_len_at(i));
        if self.kind != Kind::Bytes && (self.dense || self.ends[i + 1] > self.ends[i]) {
            out[at] = 0x0a;
            at = varint::put(out, at + 1, self.payload_at(i));
        }
        at
    }

    #[inline]
    fn write_values(&self, i: usize, out: &mut [u8], mut at: usize) -> usize {
        let (a, b) = self.range(i);
        match self.kind {
            Kind::Float => {
                if b == a + 1 {  // a scalar: a fixed-size copy, no call
                    out[at..at + 4].copy_from_slice(&self.data[4 * a..4 * a + 4]);
                    at += 4;
                } else {
                    let src = &self.data[4 * a..4 * b];
                    out[at..at + src.len()].copy_from_slice(src);
                    at += src.len();
                }
            }
            Kind::Int => {
                for &v in &self.ints[a..b] {
                    at = varint::put(out, at, v as u64);
                }
            }
            Kind::Bytes => {
                for k in a..b {
                    let src = &self.data[self.ints[k] as usize..self.ints[k + 1] as usize];
                    out[at] = 0x0a;
                    at = varint::put(out, at + 1, src.len() as u64);
                    out[at..at + src.len()].copy_from_slice(src);
                    at += src.len();
                }
            }
        }
        at
    }
}

impl Drop for Column<'_> {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.ends));
        give(std::mem::take(&mut self.list_len));
        give(std::mem::take(&mut self.payload));
    }
}

/// A FeatureList per group: the steps of group g are elements `ends[g]..ends[g + 1]` of `steps`.
struct Steps<'a> {
    present: Option<&'a [u8]>,
    ends: Vec<usize>,
    steps: Column<'a>,
    list_len: Vec<u64>, // length of group g's FeatureList message
}

impl<'a> Steps<'a> {
    fn new(groups: usize, present: &'a Option<PyBuffer<u8>>, counts: &'a PyBuffer<i64>, steps: Column<'a>,
           where_: &str) -> PyResult<Self> {
        let present = match present {
            Some(b) => Some(slice(b, where_)?),
            None => None,
        };
        if present.is_some_and(|p| p.len() != groups) {
            return Err(PyValueError::new_err(format!("{where_}: presence of {} groups, expected {groups}",
                                                     present.unwrap().len())));
        }
        let counts = slice(counts, where_)?;
        if counts.len() != groups {
            return Err(PyValueError::new_err(format!("{where_}: {} step counts, expected {groups}", counts.len())));
        }
        let mut ends = Vec::with_capacity(groups + 1);
        ends.push(0usize);
        let mut total = 0usize;
        for &k in counts {
            if k < 0 {
                return Err(PyValueError::new_err(format!("{where_}: a negative step count ({k})")));
            }
            total += k as usize;
            ends.push(total);
        }
        if total != steps.n {
            return Err(PyValueError::new_err(format!("{where_}: the groups hold {total} steps, got {}",
                                                     steps.n)));
        }
        let list_len = (0..groups)
            .map(|g| (ends[g]..ends[g + 1]).map(|s| framed_len(steps.feature_len(s))).sum())
            .collect();
        Ok(Steps { present, ends, steps, list_len })
    }

    fn write(&self, g: usize, out: &mut [u8], mut at: usize) -> usize {
        for s in self.ends[g]..self.ends[g + 1] {
            out[at] = 0x0a;
            at = varint::put(out, at + 1, self.steps.feature_len(s));
            if self.steps.is_present(s) {
                at = self.steps.write(s, out, at);
            }
        }
        at
    }
}

enum Value<'a> {
    Feature(Column<'a>),
    List(Steps<'a>),
}

/// Entries whose value is shorter than this keep the bytes before their values (the entry's tag
/// and length, the key, the Feature's tag and lengths), built the first time a length is seen.
const CACHED: usize = 256;
/// Cached prefixes are copied this many bytes at a time, a fixed-size copy (the bytes past the
/// prefix are overwritten by what follows it).
const WIDE: usize = 32;

/// One map entry per row (of `Features.feature` or `FeatureLists.feature_list`): the key, then
/// the row's Feature or FeatureList.
struct Entry<'a> {
    key: &'a [u8], // 0x0a len(key) key 0x12, as the caller built it
    value: Value<'a>,
    value_len: Vec<u64>, // per row: the length of its Feature / FeatureList, ABSENT when left out
    constant: Option<(u64, [u8; WIDE], usize)>, // every row's value length and prefix (value_len empty)
    stride: usize,      // bytes per cached prefix (at least WIDE)
    prefixes: Vec<u8>,  // CACHED * stride, filled lazily
    prefix_len: Vec<u32>, // 0: not built yet
    /// An int64 scalar without nulls whose prefixes fit in `WIDE`: the prefix (and its length) of a
    /// value of 1..=10 varint bytes, at that index.
    ints: Option<Box<([[u8; WIDE]; 11], [usize; 11])>>,
}

/// The prefixes of an int64 scalar's entry (see `Entry::ints`), None when one is longer than `WIDE`.
fn int_prefixes(key: &[u8]) -> Option<Box<([[u8; WIDE]; 11], [usize; 11])>> {
    let mut t = Box::new(([[0u8; WIDE]; 11], [0usize; 11]));
    let mut tmp = vec![0u8; key.len() + 64];
    for p in 1..=10u64 {
        let v = 4 + p; // the Feature: kind tag, list length, packed tag, payload length, p value bytes
        tmp[0] = 0x0a;
        let mut at = varint::put(&mut tmp, 1, key.len() as u64 + varint::size(v) as u64 + v);
        tmp[at..at + key.len()].copy_from_slice(key);
        at = varint::put(&mut tmp, at + key.len(), v);
        tmp[at] = Kind::Int.tag();
        at = varint::put(&mut tmp, at + 1, 2 + p);
        tmp[at] = 0x0a;
        at = varint::put(&mut tmp, at + 1, p);
        if at > WIDE {
            return None;
        }
        t.0[p as usize][..at].copy_from_slice(&tmp[..at]);
        t.1[p as usize] = at;
    }
    Some(t)
}

/// A row's entry that is left out (a null).
const ABSENT: u64 = u64::MAX;

fn lens_or_absent(lens: impl Iterator<Item = u64>, present: Option<&[u8]>, n: usize) -> Vec<u64> {
    let mut out = take_empty(n);
    match present {
        None => out.extend(lens),
        Some(p) => out.extend(lens.zip(p).map(|(v, &q)| if q != 0 { v } else { ABSENT })),
    }
    out
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.value_len));
        give(std::mem::take(&mut self.prefixes));
        give(std::mem::take(&mut self.prefix_len));
    }
}

impl<'a> Entry<'a> {
    fn new(key: &'a [u8], value: Value<'a>) -> Self {
        let stride = (key.len() + 43).max(WIDE); // 0x0a, 2 varints, the key, a tag, 2 varints, a tag
        let cached = if matches!(value, Value::Feature(_)) { CACHED } else { 0 };
        let (value_len, constant) = match &value {
            Value::Feature(c) if c.shape == Shape::FloatScalar => (Vec::new(), Some(framed_len(c.list_len_at(0)))),
            Value::Feature(c) if c.shape == Shape::IntScalar => {
                // tag, length, packed tag, length (all one byte: at most 10 value bytes), the value
                let v = c.ints.iter().map(|&x| 4 + varint::size(x as u64) as u64);
                (lens_or_absent(v, None, c.n), None)
            }
            Value::Feature(c) => {
                (lens_or_absent(c.list_len.iter().map(|&l| framed_len(l)), c.present, c.list_len.len()), None)
            }
            Value::List(s) => (lens_or_absent(s.list_len.iter().copied(), s.present, s.list_len.len()), None),
        };
        let ints = match &value {
            Value::Feature(c) if c.shape == Shape::IntScalar => int_prefixes(key),
            _ => None,
        };
        let cached = if ints.is_some() || constant.is_some() { 0 } else { cached };
        let mut entry = Entry { key, value, value_len, constant: None, stride, prefixes: take(cached * stride),
                                prefix_len: take(cached), ints };
        if let (Some(v), Value::Feature(c)) = (constant, &entry.value) {
            let mut tmp = vec![0u8; stride];
            let len = entry.write_prefix(c, 0, v, &mut tmp, 0);
            let mut prefix = [0u8; WIDE];
            let fits = len <= WIDE;
            prefix[..len.min(WIDE)].copy_from_slice(&tmp[..len.min(WIDE)]);
            entry.constant = Some((v, prefix, if fits { len } else { 0 }));
            if !fits {  // written by the general path, which keeps prefixes by length
                entry.prefixes = take(CACHED * stride);
                entry.prefix_len = take(CACHED);
            }
        }
        entry
    }

    /// Write the entry's bytes before row r's values (its Feature's value length is `v`).
    #[inline]
    fn write_prefix(&self, c: &Column, r: usize, v: u64, out: &mut [u8], mut at: usize) -> usize {
        out[at] = 0x0a;
        at = varint::put(out, at + 1, self.entry_len(v));
        out[at..at + self.key.len()].copy_from_slice(self.key);
        at = varint::put(out, at + self.key.len(), v);
        c.write_header(r, out, at)
    }

    /// Row r's value length (ABSENT when the row leaves the entry out).
    #[inline]
    fn vlen(&self, r: usize) -> u64 {
        match self.constant {
            Some((v, _, _)) => v,
            None => self.value_len[r],
        }
    }

    #[inline]
    fn entry_len(&self, v: u64) -> u64 {
        self.key.len() as u64 + varint::size(v) as u64 + v
    }

    /// Write the entry of each row of `rows` at `cur[k]` (row `rows.start + k`), advancing it.
    /// Row k's record ends at `ends[k]`: the fixed-size copies that run past an entry's end (its
    /// next bytes are written after it) never run into the next record, written already.
    fn write_rows(&mut self, rows: std::ops::Range<usize>, out: &mut [u8], cur: &mut [usize], ends: &[usize]) {
        if let (Some((_, prefix, len)), Value::Feature(c)) = (&self.constant, &self.value) {
            if *len > 0 {  // a float scalar: the same prefix in every row, then value r's 4 bytes
                debug_assert!(c.shape == Shape::FloatScalar);
                let len = *len;
                let values: &[[u8; 4]] = c.data.as_chunks::<4>().0;
                for (k, r) in rows.enumerate() {
                    let at = cur[k];
                    if at + WIDE <= ends[k] {
                        out[at..at + WIDE].copy_from_slice(prefix);
                    } else {
                        out[at..at + len].copy_from_slice(&prefix[..len]);
                    }
                    out[at + len..at + len + 4].copy_from_slice(&values[r]);
                    cur[k] = at + len + 4;
                }
                return;
            }
        }
        if let (Some(t), Value::Feature(c)) = (&self.ints, &self.value) {
            let (prefixes, lens) = &**t;
            for (k, r) in rows.enumerate() {
                let x = c.ints[r] as u64;
                let p = varint::size(x);
                let at = cur[k];
                if at + WIDE <= ends[k] {
                    out[at..at + WIDE].copy_from_slice(&prefixes[p]);
                } else {
                    out[at..at + lens[p]].copy_from_slice(&prefixes[p][..lens[p]]);
                }
                cur[k] = varint::put(out, at + lens[p], x);
            }
            return;
        }
        for (k, r) in rows.enumerate() {
            cur[k] = self.write(r, &mut out[..ends[k]], cur[k]);
        }
    }

    /// Row r's entry at `out[at..]` by the general path: prefixes kept by value length
    /// (`write_rows` writes a fixed prefix itself where one fits).
    #[inline]
    fn write(&mut self, r: usize, out: &mut [u8], mut at: usize) -> usize {
        let v = self.vlen(r);
        if v == ABSENT {
            return at;
        }
        match &self.value {
            Value::Feature(c) => {
                let vi = v as usize;
                if vi >= CACHED {
                    at = self.write_prefix(c, r, v, out, at);
                } else {
                    let (stride, start) = (self.stride, vi * self.stride);
                    if self.prefix_len[vi] == 0 {
                        let mut tmp = vec![0u8; stride];
                        let len = self.write_prefix(c, r, v, &mut tmp, 0);
                        self.prefixes[start..start + stride].copy_from_slice(&tmp);
                        self.prefix_len[vi] = len as u32;
                    }
                    let len = self.prefix_len[vi] as usize;
                    if len <= WIDE && at + WIDE <= out.len() {
                        let src: &[u8; WIDE] = self.prefixes[start..start + WIDE].try_into().unwrap();
                        out[at..at + WIDE].copy_from_slice(src);
                    } else {
                        out[at..at + len].copy_from_slice(&self.prefixes[start..start + len]);
                    }
                    at += len;
                }
                c.write_values(r, out, at)
            }
            Value::List(s) => {
                out[at] = 0x0a;
                at = varint::put(out, at + 1, self.entry_len(v));
                out[at..at + self.key.len()].copy_from_slice(self.key);
                at = varint::put(out, at + self.key.len(), v);
                s.write(r, out, at)
            }
        }
    }
}

/// The length of each row's body: the sum of its entries (an entry at a time: tight loops).
fn body_lens(entries: &[Entry], n: usize) -> Vec<u64> {
    let mut body = take(n);
    for e in entries {
        if let Some((v, _, _)) = e.constant {
            let total = framed_len(e.entry_len(v));
            body.iter_mut().for_each(|b| *b += total);
            continue;
        }
        let key = e.key.len() as u64;
        let small = 127u64.saturating_sub(key); // below it, v and the entry's length are 1-byte varints
        for (b, &v) in body.iter_mut().zip(&e.value_len) {
            if v < small {  // (ABSENT is not)
                *b += key + 3 + v;
            } else if v != ABSENT {
                *b += framed_len(e.entry_len(v));
            }
        }
    }
    body
}

/// Rows written together: each entry writes its values into a block's records before the next
/// entry does (one tight loop per entry, not a dispatch per entry per row), and the block's
/// records -- about 80 KB at 300 bytes each, in cache -- are checksummed four at a time.
const BLOCK: usize = 256;

/// The records of rows `0..n` (see `records`) into `out`: record r starts at `starts[r]`
/// (framed: its header does), its message body lengths are `f_lens[r]` and `l_lens[r]`.
fn fill(out: &mut [u8], n: usize, starts: &[usize], f_lens: Option<&[u64]>, l_lens: Option<&[u64]>,
        mut features: Option<&mut [Entry]>, mut lists: Option<&mut [Entry]>, framed: bool) {
    let mut body = [0usize; BLOCK]; // where each record of the block starts (after its header)
    let mut cur = [0usize; BLOCK]; // where its next bytes go
    let mut ends = [0usize; BLOCK]; // where its message ends
    let mut crcs = [0u32; BLOCK];
    for b0 in (0..n).step_by(BLOCK) {
        let rows = b0..n.min(b0 + BLOCK);
        let m = rows.len();
        for (k, r) in rows.clone().enumerate() {
            let mut at = starts[r];
            if framed {
                let len = (starts[r + 1] - at - HEADER - FOOTER) as u64;
                out[at..at + 8].copy_from_slice(&len.to_le_bytes());
                out[at + 8..at + HEADER].copy_from_slice(&masked_crc32c_u64(len).to_le_bytes());
                at += HEADER;
            }
            body[k] = at;
            ends[k] = starts[r + 1] - if framed { FOOTER } else { 0 };
            if let Some(lens) = f_lens {
                out[at] = 0x0a;
                at = varint::put(out, at + 1, lens[r]);
            }
            cur[k] = at;
        }
        if let Some(entries) = features.as_deref_mut() {
            for e in entries.iter_mut() {
                e.write_rows(rows.clone(), out, &mut cur[..m], &ends[..m]);
            }
        }
        if let (Some(lens), Some(entries)) = (l_lens, lists.as_deref_mut()) {
            for (k, r) in rows.clone().enumerate() {
                out[cur[k]] = 0x12;
                cur[k] = varint::put(out, cur[k] + 1, lens[r]);
            }
            for e in entries.iter_mut() {
                e.write_rows(rows.clone(), out, &mut cur[..m], &ends[..m]);
            }
        }
        if framed {
            let mut slices: [&[u8]; BLOCK] = [&[]; BLOCK];
            for k in 0..m {
                slices[k] = &out[body[k]..cur[k]];
            }
            masked_crcs(&slices[..m], &mut crcs[..m]);
            for k in 0..m {
                debug_assert_eq!(cur[k] + FOOTER, starts[b0 + k + 1]);
                out[cur[k]..cur[k] + FOOTER].copy_from_slice(&crcs[k].to_le_bytes());
            }
        } else {
            debug_assert!((0..m).all(|k| cur[k] == starts[b0 + k + 1]));
        }
    }
}

/// A framed batch's bytes: a buffer (the buffer protocol, read-only) kept from one batch to the
/// next (`scratch::take_out`): a fresh one per batch costs the kernel a zeroed page per 4 KB
/// touched, and Python's `bytes` another zeroing of its own.
#[pyclass(frozen, name = "FramedBuffer", module = "tfrecord_io.core._native")]
pub struct FramedBuffer {
    vec: Vec<u8>, // at least `len` bytes, all initialized
    len: usize,
}

#[pymethods]
impl FramedBuffer {
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: std::ffi::c_int)
        -> PyResult<()> {
        use pyo3::ffi;
        if view.is_null() {
            return Err(pyo3::exceptions::PyBufferError::new_err("FramedBuffer: the view is null"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(pyo3::exceptions::PyBufferError::new_err("FramedBuffer is read-only"));
        }
        let me = slf.get();
        let ptr = me.vec.as_ptr();
        // SAFETY: the vector is never resized or moved while the object lives (it is only given
        // back in Drop), and the view holds a reference to the object.
        unsafe {
            (*view).buf = ptr as *mut std::ffi::c_void;
            (*view).len = me.len as isize;
            (*view).readonly = 1;
            (*view).itemsize = 1;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT { c"B".as_ptr() as *mut _ }
                             else { std::ptr::null_mut() };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND { &mut (*view).len } else { std::ptr::null_mut() };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES { &mut (*view).itemsize }
                              else { std::ptr::null_mut() };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
            (*view).obj = slf.into_any().into_ptr();
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.len
    }
}

impl Drop for FramedBuffer {
    fn drop(&mut self) {
        give_out(std::mem::take(&mut self.vec));
    }
}

/// The records: one message per row of `n`, made of an optional `Features` (field 1) and, for
/// SequenceExamples, a `FeatureLists` (field 2).
///
/// Returns `(offsets, data)`: `offsets` (n + 1, int64 bytes) of each record in `data` (bytes).
/// With `framed`, `data` is the TFRecord stream of the records instead (each one as `frame`
/// writes it: `u64 length | u32 masked_crc(length) | record | u32 masked_crc(record)`, encoded
/// straight into its place in the stream, its CRC taken while its bytes are in cache), a
/// `FramedBuffer`, and the first value is the n record lengths (int64 bytes), what a record index
/// needs.
fn records<'py>(py: Python<'py>, n: usize, mut features: Option<&mut [Entry]>, mut lists: Option<&mut [Entry]>,
                framed: bool) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyAny>)> {
    let f_lens = features.as_deref().map(|e| body_lens(e, n));
    let l_lens = lists.as_deref().map(|e| body_lens(e, n));
    let mut offsets: Vec<u8> = take_empty(8 * (n + 1));
    let mut starts: Vec<usize> = take_empty(n + 1);
    let mut total = 0usize;
    if !framed {
        offsets.extend_from_slice(&0i64.to_le_bytes());
    }
    starts.push(0);
    for r in 0..n {
        let len = f_lens.as_ref().map_or(0, |b| framed_len(b[r])) + l_lens.as_ref().map_or(0, |b| framed_len(b[r]));
        if framed {
            offsets.extend_from_slice(&(len as i64).to_le_bytes());
            total += len as usize + HEADER + FOOTER;
        } else {
            total += len as usize;
            offsets.extend_from_slice(&(total as i64).to_le_bytes());
        }
        starts.push(total);
    }
    let (f, l) = (f_lens.as_deref(), l_lens.as_deref());
    let data = if framed {
        let mut vec = take_out(total);
        fill(&mut vec[..total], n, &starts, f, l, features.as_deref_mut(), lists.as_deref_mut(), true);
        Bound::new(py, FramedBuffer { vec, len: total })?.into_any()
    } else {
        PyBytes::new_with(py, total, |out| {
            fill(out, n, &starts, f, l, features.as_deref_mut(), lists.as_deref_mut(), false);
            Ok(())
        })?.into_any()
    };
    let offsets_bytes = PyBytes::new(py, &offsets);
    give(offsets);
    give(starts);
    f_lens.map(give);
    l_lens.map(give);
    Ok((offsets_bytes, data))
}

fn feature_entries<'a>(args: &'a [(Vec<u8>, ColumnArgs)], n: usize, what: &str) -> PyResult<Vec<Entry<'a>>> {
    args.iter()
        .map(|(key, col)| {
            let where_ = format!("{what} map entry {}", String::from_utf8_lossy(key));
            if col.1 != n {
                return Err(PyValueError::new_err(format!("{where_}: {} elements, expected {n} rows", col.1)));
            }
            Ok(Entry::new(key, Value::Feature(Column::new(col, &where_)?)))
        })
        .collect()
}

/// Serialized `tf.train.Example`s of `n` rows: `features` are (map entry key part, column), in
/// the order the entries are written.
/// With `framed`, the TFRecord stream of those records and their lengths (see `records`).
#[pyfunction]
#[pyo3(signature = (n, features, framed = false))]
pub fn encode_examples<'py>(py: Python<'py>, n: usize, features: Vec<(Vec<u8>, ColumnArgs)>, framed: bool)
    -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyAny>)> {
    let mut entries = feature_entries(&features, n, "example")?;
    records(py, n, Some(&mut entries), None, framed)
}

/// One sequence feature: (map entry key part, group presence, steps per group, steps column).
pub type SequenceArgs = (Vec<u8>, Option<PyBuffer<u8>>, PyBuffer<i64>, ColumnArgs);

/// Serialized `tf.train.SequenceExample`s of `n` groups: `context` as for `encode_examples`
/// (None: no context message at all), `sequence` one FeatureList map entry per feature; `framed`
/// as for `encode_examples`.
#[pyfunction]
#[pyo3(signature = (n, context, sequence, framed = false))]
pub fn encode_sequence_examples<'py>(py: Python<'py>, n: usize, context: Option<Vec<(Vec<u8>, ColumnArgs)>>,
                                     sequence: Vec<SequenceArgs>, framed: bool)
    -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyAny>)> {
    let mut ctx = match &context {
        Some(c) => Some(feature_entries(c, n, "context")?),
        None => None,
    };
    let mut lists = sequence
        .iter()
        .map(|(key, present, counts, col)| {
            let where_ = format!("sequence map entry {}", String::from_utf8_lossy(key));
            let steps = Column::new(col, &where_)?;
            Ok(Entry::new(key, Value::List(Steps::new(n, present, counts, steps, &where_)?)))
        })
        .collect::<PyResult<Vec<_>>>()?;
    records(py, n, ctx.as_deref_mut(), Some(&mut lists), framed)
}
