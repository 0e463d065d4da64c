//! The protobuf wire scanner, compiled: what a batch of serialized `tf.train.Example` /
//! `SequenceExample` records holds -- every key, kind and value -- read record by record in one
//! pass, without a schema.
//!
//! The reference is `tfrecord_io/core/wire_scan.py` (numpy, all records in lock step); its module
//! doc gives the messages and the rules, which are the same here: the *canonical* layout every
//! protobuf serializer writes is read (at most one `features` / `context` field then at most one
//! `feature_lists` field, map entries holding the key then the value, a `Feature` with one list
//! field, numbers packed in one field, UTF-8 keys, a key once per record); a record that departs
//! from it anywhere is *odd*: nothing of it is returned, and the caller decodes it with
//! `decode_record`, which applies protobuf's rules or refuses it.  Every feature of a record is
//! checked; the features (feature lists) not asked for are checked by their wire structure alone
//! (the same checks, their values not copied), so the same records are odd whatever is asked.
//! Lengths are varints of at most 8 bytes (as the numpy scanner reads them: a longer one is a
//! length no record holds, or a non-minimal one, and the record is odd); packed int64 values are
//! varints of at most 10 bytes, the bits past 64 dropped (protobuf's rule).
//!
//! Every position read comes from a length checked against the end of the region it lies in,
//! and regions against the record's end, so hostile bytes make a record odd, never a read out of
//! bounds.  `tests/test_native_scan.py` checks it against the numpy scanner.

use std::collections::{HashMap, HashSet};

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyByteArray;
use pyo3::BoundObject;

use crate::buffers::{check_offsets, slice};
use crate::scratch;
use crate::varint;

/// Kind codes (`wire_scan.KIND_*`): no kind set, then the field numbers of the three lists.
const KIND_NONE: u8 = 0;
const KIND_BYTES: u8 = 1;
const KIND_FLOAT: u8 = 2;
const KIND_INT64: u8 = 3;

/// A length varint at `p` of at most 8 bytes: (value, the position after it).
#[inline(always)]
fn length(buf: &[u8], p: usize) -> Option<(usize, usize)> {
    let first = *buf.get(p)?;
    if first < 0x80 {
        return Some((first as usize, p + 1));
    }
    let mut v = (first & 0x7F) as u64;
    for i in 1..8 {
        let b = *buf.get(p + i)?;
        v |= ((b & 0x7F) as u64) << (7 * i);
        if b < 0x80 {
            return Some((usize::try_from(v).ok()?, p + i + 1));
        }
    }
    None
}

/// The payload [a, b) of the length-delimited field whose tag byte is at `p`, when its length
/// is read and the payload ends within `end` (the tag itself is the caller's to check).
#[inline(always)]
fn ld(buf: &[u8], p: usize, end: usize) -> Option<(usize, usize)> {
    let (len, a) = length(buf, p + 1)?;
    let b = a.checked_add(len)?;
    (b <= end).then_some((a, b))
}

/// A column that is most often one value repeated (the kind of every slot, one value per slot)
/// or, with `ident`, the numbers 0, 1, 2... (the records of a feature every record holds): held
/// as that and a length until an item breaks the run, which costs no store per slot and no copy
/// out (Python makes the array).
struct Col<T: scratch::Pooled + PartialEq> {
    /// The value every item has while `vec` is None (for `ident`: item i is i).
    first: T,
    n: usize,
    ident: bool,
    vec: Option<Vec<T>>,
}

impl<T: scratch::Pooled + PartialEq + TryFrom<usize>> Col<T> {
    fn new(ident: bool) -> Self {
        Col { first: T::default(), n: 0, ident, vec: None }
    }

    #[inline(always)]
    fn push(&mut self, x: T) {
        match &mut self.vec {
            Some(v) => v.push(x),
            None if self.ident => match T::try_from(self.n) {
                Ok(i) if i == x => self.n += 1,
                _ => self.spill(x),
            },
            None if self.n == 0 => {
                self.first = x;
                self.n = 1;
            }
            None if x == self.first => self.n += 1,
            None => self.spill(x),
        }
    }

    /// From here on, one item each.
    #[cold]
    fn spill(&mut self, x: T) {
        let mut v = scratch::take_empty(self.n + 1);
        for i in 0..self.n {
            v.push(if self.ident { T::try_from(i).unwrap_or(self.first) } else { self.first });
        }
        v.push(x);
        self.vec = Some(v);
    }

    fn len(&self) -> usize {
        self.vec.as_ref().map_or(self.n, |v| v.len())
    }

    fn last(&self) -> Option<T> {
        match &self.vec {
            Some(v) => v.last().copied(),
            None if self.n == 0 => None,
            None if self.ident => T::try_from(self.n - 1).ok(),
            None => Some(self.first),
        }
    }

    fn pop(&mut self) -> Option<T> {
        let x = self.last()?;
        self.truncate(self.len() - 1);
        Some(x)
    }

    fn truncate(&mut self, m: usize) {
        match &mut self.vec {
            Some(v) => v.truncate(m),
            None => self.n = self.n.min(m),
        }
    }

    fn give(self) {
        if let Some(v) = self.vec {
            scratch::give(v);
        }
    }
}

/// The values of one feature (or feature list) of a batch, slot after slot (a slot: a record
/// that holds the feature, or a step of a feature list), as `wire_scan.Values` holds them.
struct Acc {
    name: String,
    owners: Col<u64>,
    steps: Col<u64>,
    kind: Col<u8>,
    counts: Col<u64>,
    floats: Vec<u32>,
    ints: Vec<u64>,
    offsets: Vec<u64>,
    data: Vec<u8>,
}

impl Acc {
    /// Its vectors from the scratch pool (`scratch.rs`: fresh ones each batch cost page faults).
    fn new(name: String) -> Self {
        let mut offsets = scratch::take_empty(1);
        offsets.push(0);
        Acc {
            name,
            owners: Col::new(true),
            steps: Col::new(false),
            kind: Col::new(false),
            counts: Col::new(false),
            floats: scratch::take_empty(0),
            ints: scratch::take_empty(0),
            offsets,
            data: scratch::take_empty(0),
        }
    }

    /// Give the vectors back to the pool.
    fn give(self) {
        self.owners.give();
        self.steps.give();
        self.kind.give();
        self.counts.give();
        scratch::give(self.floats);
        scratch::give(self.ints);
        scratch::give(self.offsets);
        scratch::give(self.data);
    }

    /// Room for `n` records like the one held.
    fn reserve(&mut self, n: usize) {
        const MOST: usize = 16 << 20; // bytes reserved at most, per vector
        fn room<T>(v: &mut Vec<T>, n: usize) {
            let want = v.len().saturating_mul(n).min(MOST / std::mem::size_of::<T>().max(1));
            v.reserve(want.saturating_sub(v.len()));
        }
        room(&mut self.floats, n);
        room(&mut self.ints, n);
        room(&mut self.offsets, n);
        room(&mut self.data, n);
    }

    /// A slot of `kind` and `count` values (its values already pushed).  Most slots of a column
    /// repeat the kind and count of all before them: both runs go on by one compare.
    #[inline(always)]
    fn slot(&mut self, kind: u8, count: u64) {
        let (k, c) = (&mut self.kind, &mut self.counts);
        if k.vec.is_none() && c.vec.is_none() && k.n > 0 && k.first == kind && c.first == count {
            k.n += 1;
            c.n += 1;
        } else {
            k.push(kind);
            c.push(count);
        }
    }

    /// Drop the last slot and its values.
    fn pop_slot(&mut self) {
        let (Some(kind), Some(count)) = (self.kind.pop(), self.counts.pop()) else { return };
        let c = count as usize;
        match kind {
            KIND_FLOAT => self.floats.truncate(self.floats.len().saturating_sub(c)),
            KIND_INT64 => self.ints.truncate(self.ints.len().saturating_sub(c)),
            KIND_BYTES => {
                self.offsets.truncate(self.offsets.len().saturating_sub(c).max(1));
                self.data.truncate(self.offsets.last().copied().unwrap_or(0) as usize);
            }
            _ => {}
        }
    }

    /// Drop what record `r` added (it is odd).  A `Feature` or `FeatureList` that failed took back
    /// its own values; a feature's record is added before its slot, a feature list's after its
    /// steps, so the slots to drop are known from the records.
    fn undo(&mut self, r: u64, lists: bool) {
        while self.owners.last() == Some(r) {
            self.owners.pop();
            if lists {
                for _ in 0..self.steps.pop().unwrap_or(0) {
                    self.pop_slot();
                }
            }
        }
        if !lists {
            while self.kind.len() > self.owners.len() {
                self.pop_slot();
            }
        }
    }
}

/// Whether two keys (or entry headers) are the same bytes: eight at a time, inline (most are
/// short: a call to memcmp costs more than the compare).
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut ca, mut cb) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut ca).zip(&mut cb) {
        if u64::from_ne_bytes(x.try_into().unwrap()) != u64::from_ne_bytes(y.try_into().unwrap()) {
            return false;
        }
    }
    ca.remainder().iter().zip(cb.remainder()).all(|(x, y)| x == y)
}

/// One distinct map key of a batch.
struct Key {
    /// Its values' `Acc` when it is asked for (None: checked only, or a key that is not UTF-8).
    acc: Option<usize>,
    utf8: bool,
    /// The last record (+1) holding it: a key twice in a record makes it odd.
    last: usize,
}

/// The keys of one map (`Features` or `FeatureLists`) across a batch, and the values of those asked.
struct Keys<'a> {
    asked: Option<HashSet<String>>,
    ids: HashMap<&'a [u8], u32>,
    keys: Vec<Key>,
    accs: Vec<Acc>,
    /// The k-th entry last seen at each place k of a region (its header -- the bytes before the
    /// value --, key, id and length): records from one writer hold the same keys in the same
    /// order, most with the same header, known by a compare instead of a parse and a hash.  Only
    /// an entry that differs from the one remembered at its place is written.
    seen: Vec<Cached<'a>>,
}

/// An entry as `Keys::entry` remembers it for the next regions.
#[derive(Clone, Copy)]
struct Cached<'a> {
    header: &'a [u8],
    key: &'a [u8],
    id: u32,
    len: usize,
    /// Both lengths in the header one byte: `0A <entry length> <mid> <value length>`, `mid` the
    /// key's field and the value's tag.
    short: bool,
}

impl<'a> Keys<'a> {
    fn new(asked: Option<Vec<String>>) -> Self {
        Keys { asked: asked.map(|a| a.into_iter().collect()), ids: HashMap::new(), keys: Vec::new(),
               accs: Vec::new(), seen: Vec::new() }
    }

    /// The id of key `key`, the `k`-th of its region.
    #[inline]
    fn id(&mut self, k: usize, key: &'a [u8]) -> u32 {
        if let Some(c) = self.seen.get(k) {
            if same(c.key, key) {
                return c.id;
            }
        }
        match self.ids.get(key) {
            Some(&id) => id,
            None => {
                let id = self.keys.len() as u32;
                let (utf8, acc) = match std::str::from_utf8(key) {
                    Ok(name) if self.asked.as_ref().is_none_or(|a| a.contains(name)) => {
                        self.accs.push(Acc::new(name.to_owned()));
                        (true, Some(self.accs.len() - 1))
                    }
                    Ok(_) => (true, None),
                    Err(_) => (false, None),
                };
                self.keys.push(Key { acc, utf8, last: 0 });
                self.ids.insert(key, id);
                id
            }
        }
    }

    /// The entry at `q` (before `e`), the `k`-th of its region: (key id, value start, entry end),
    /// or None when it is not a well-formed entry.
    #[inline(always)]
    fn entry(&mut self, buf: &'a [u8], q: usize, e: usize, k: usize) -> Option<(u32, usize, usize)> {
        // the k-th entry seen last had this header: the same entry structure
        if let Some(&c) = self.seen.get(k) {
            let hl = c.header.len();
            if c.short {
                // the same key field and value tag, and one-byte lengths that agree (the entry
                // holds the header's rest and the value): the same structure, whatever the value's
                // length (an int64's varints vary from record to record)
                if let Some(h) = buf.get(q..q + hl) {
                    let (el, vl) = (h[1] as usize, h[hl - 1] as usize);
                    if el < 0x80 && vl < 0x80 && el == hl - 2 + vl && q + 2 + el <= e
                        && same(&h[2..hl - 1], &c.header[2..hl - 1]) {
                        return Some((c.id, q + hl, q + 2 + el));
                    }
                }
            } else if q + c.len <= e && buf.get(q..q + hl).is_some_and(|h| same(h, c.header)) {
                return Some((c.id, q + hl, q + c.len));
            }
        }
        // 0A <entry length> 0A <key length> <key> 12 <value length> <value>, nothing else
        let (bs, be) = ld(buf, q, e)?;
        let (kl, ks) = if bs < be && buf[bs] == 0x0A { length(buf, bs + 1)? } else { return None };
        let ke = ks.checked_add(kl).filter(|&ke| ke < be && buf[ke] == 0x12)?;
        let (vl, vs) = length(buf, ke + 1)?;
        if vs.checked_add(vl) != Some(be) {
            return None;
        }
        let key = &buf[ks..ke];
        let id = self.id(k, key);
        let c = Cached { header: &buf[q..vs], key, id, len: be - q, short: bs == q + 2 && vs == ke + 2 };
        match self.seen.get_mut(k) {
            Some(place) => *place = c,
            None => self.seen.push(c),
        }
        Some((id, vs, be))
    }

    /// The entries of the map at [s, e) of record `r`: (key id, value start, value end) into
    /// `out`, each asked key's `Acc` into `touched` (for an undo); false when the region is not
    /// canonical (a unit that is not a well-formed entry, a key that is not UTF-8 or that comes
    /// twice).  As the numpy scanner does, the entries are found up to the first unit that is
    /// not a field 1 of a length within the region.
    fn entries(&mut self, buf: &'a [u8], s: usize, e: usize, r: usize, out: &mut Vec<(u32, usize, usize)>,
               touched: &mut Vec<usize>) -> bool {
        out.clear();
        let mut ok = true;
        let (mut q, mut k) = (s, 0);
        while q < e {
            if buf[q] != 0x0A {
                return false;
            }
            let Some((id, vs, be)) = self.entry(buf, q, e, k) else {
                match ld(buf, q, e) {
                    Some((_, be)) => {
                        ok = false; // a unit, not an entry: the walk goes on
                        q = be;
                        continue;
                    }
                    None => return false,
                }
            };
            q = be;
            k += 1;
            let key = &mut self.keys[id as usize];
            if !key.utf8 {
                ok = false;
                continue;
            }
            if key.last == r + 1 {
                ok = false; // a key twice: protobuf's last entry wins (the slow path)
            }
            key.last = r + 1;
            if let Some(a) = key.acc {
                touched.push(a);
            }
            out.push((id, vs, be));
        }
        ok
    }

    /// Drop what record `r` added to the `Acc`s it touched (it is odd).
    fn undo(&mut self, r: usize, touched: &[usize], lists: bool) {
        for &a in touched {
            self.accs[a].undo(r as u64, lists);
        }
    }
}

/// Packed varints at [ps, pe): how many, each into `out` (None: checked only); None when the
/// last is cut or one is longer than 10 bytes.
#[inline(always)]
fn varints(buf: &[u8], ps: usize, pe: usize, mut out: Option<&mut Vec<u64>>) -> Option<u64> {
    let start = out.as_ref().map_or(0, |o| o.len());
    let (mut q, mut count) = (ps, 0);
    while q < pe {
        // most varints are read by one load (`varint::get`); the rest (the last bytes of a
        // batch, a cut or an overlong one) byte by byte
        if let Some((v, next)) = varint::get(buf, q, pe) {
            if let Some(o) = out.as_deref_mut() {
                o.push(v);
            }
            q = next;
            count += 1;
            continue;
        }
        let mut v = 0u64;
        let mut i = 0;
        loop {
            if q >= pe || i == 10 {
                if let Some(o) = out {
                    o.truncate(start); // a bad list leaves no values
                }
                return None;
            }
            let b = buf[q];
            q += 1;
            v |= ((b & 0x7F) as u64) << (7 * i); // the 10th byte: its lowest bit only (bit 63)
            i += 1;
            if b < 0x80 {
                break;
            }
        }
        if let Some(o) = out.as_deref_mut() {
            o.push(v);
        }
        count += 1;
    }
    Some(count)
}

/// Whether the first four bytes of a `Feature` of `w` bytes (4 to 129) are a list's tag, the
/// list's length `w - 2`, its one field's tag 0A and that field's length `w - 4`: one compare.
#[inline(always)]
fn usual(head: &[u8], w: usize) -> bool {
    let got = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) & 0xFFFF_FF00;
    got == (((w as u32 - 2) << 8) | (0x0A << 16) | ((w as u32 - 4) << 24))
}

/// One `Feature` at [vs, ve): its kind, count and values into `acc` (None: its structure
/// checked only); false, and nothing added, when it is not canonical.
#[inline(always)]
fn feature(buf: &[u8], vs: usize, ve: usize, acc: Option<&mut Acc>) -> bool {
    // The usual Feature, known from its first four bytes: its kind's tag, the list's length, the
    // list's one field (tag 0A) and that field's length, both lengths under 128.
    let w = ve - vs;
    if (4..=129).contains(&w) && usual(&buf[vs..vs + 4], w) {
        let (ps, pe) = (vs + 4, ve);
        match (buf[vs], acc) {
            (0x12, acc) if w % 4 == 0 => {
                if let Some(acc) = acc {
                    acc.floats.extend(buf[ps..pe].chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])));
                    acc.slot(KIND_FLOAT, (w as u64 - 4) / 4);
                }
                return true;
            }
            (0x1A, Some(acc)) => {
                if let Some(c) = varints(buf, ps, pe, Some(&mut acc.ints)) {
                    acc.slot(KIND_INT64, c);
                    return true;
                }
                return false;
            }
            (0x1A, None) => return varints(buf, ps, pe, None).is_some(),
            (0x0A, acc) => {
                if let Some(acc) = acc {
                    acc.data.extend_from_slice(&buf[ps..pe]);
                    acc.offsets.push(acc.data.len() as u64);
                    acc.slot(KIND_BYTES, 1);
                }
                return true;
            }
            (_, acc) => return general_feature(buf, vs, ve, acc),
        }
    }
    general_feature(buf, vs, ve, acc)
}

/// :func:`feature` for any layout.
#[inline(never)]
fn general_feature(buf: &[u8], vs: usize, ve: usize, mut acc: Option<&mut Acc>) -> bool {
    if vs == ve {
        if let Some(a) = acc {
            a.slot(KIND_NONE, 0);
        }
        return true;
    }
    let kind = match buf[vs] {
        0x0A => KIND_BYTES,
        0x12 => KIND_FLOAT,
        0x1A => KIND_INT64,
        _ => return false,
    };
    let Some((ls, le)) = ld(buf, vs, ve) else { return false };
    if le != ve {
        return false;
    }
    let count = if kind == KIND_BYTES {
        let (mut q, mut count) = (ls, 0u64);
        while q < le {
            let unit = if buf[q] == 0x0A { ld(buf, q, le) } else { None };
            let Some((a, b)) = unit else {
                if let Some(acc) = acc {
                    acc.offsets.truncate(acc.offsets.len() - count as usize); // a bad list leaves no values
                    acc.data.truncate(acc.offsets.last().copied().unwrap_or(0) as usize);
                }
                return false;
            };
            if let Some(acc) = acc.as_deref_mut() {
                acc.data.extend_from_slice(&buf[a..b]);
                acc.offsets.push(acc.data.len() as u64);
            }
            count += 1;
            q = b;
        }
        count
    } else if ls == le {
        0
    } else {
        if buf[ls] != 0x0A {
            return false;
        }
        let Some((ps, pe)) = ld(buf, ls, le) else { return false };
        if pe != le {
            return false;
        }
        if kind == KIND_FLOAT {
            if (pe - ps) % 4 != 0 {
                return false;
            }
            if let Some(acc) = acc.as_deref_mut() {
                // floats as their bits, word by word (a call to memmove costs more than a scalar)
                acc.floats.extend(buf[ps..pe].chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])));
            }
            ((pe - ps) / 4) as u64
        } else {
            match varints(buf, ps, pe, acc.as_deref_mut().map(|a| &mut a.ints)) {
                Some(c) => c,
                None => return false,
            }
        }
    };
    if let Some(a) = acc {
        a.slot(kind, count);
    }
    true
}

/// A `FeatureList` at [vs, ve): its steps (`Feature` messages) into `acc` (None: checked only),
/// and their number; None when it is not canonical.
fn feature_list(buf: &[u8], vs: usize, ve: usize, mut acc: Option<&mut Acc>) -> Option<u64> {
    let (mut q, mut steps) = (vs, 0);
    while q < ve {
        let step = if buf[q] == 0x0A { ld(buf, q, ve) } else { None };
        match step {
            Some((a, b)) if feature(buf, a, b, acc.as_deref_mut()) => q = b,
            _ => {
                if let Some(acc) = acc {
                    for _ in 0..steps {
                        acc.pop_slot(); // a bad list leaves no steps
                    }
                }
                return None;
            }
        }
        steps += 1;
    }
    Some(steps)
}

/// What a scan finds (the `wire_scan.Scan` of a batch, before it becomes Python objects).
struct Found {
    odd: Vec<u8>,
    has_lists: Vec<u8>,
    features: Vec<Acc>,
    lists: Vec<Acc>,
}

/// Scan the `n` records `buf[bounds[i]..bounds[i + 1]]` (module doc).
fn scan(buf: &[u8], bounds: &[i64], features: Option<Vec<String>>, feature_lists: Option<Vec<String>>) -> Found {
    let n = bounds.len() - 1;
    let mut odd = vec![0u8; n];
    let mut has_lists = vec![0u8; n];
    let mut fkeys = Keys::new(features);
    let mut lkeys = Keys::new(feature_lists);
    let (mut entries, mut ftouched, mut ltouched) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..n {
        let (s, e) = (bounds[r] as usize, bounds[r + 1] as usize);
        ftouched.clear();
        ltouched.clear();
        let mut bad = false;
        // the record: field 1 (features, context) then field 2 (feature_lists), each at most once
        let mut p = s;
        let (mut cs, mut ce) = (s, s);
        if p < e && buf[p] == 0x0A {
            match ld(buf, p, e) {
                Some((a, b)) => {
                    (cs, ce, p) = (a, b, b);
                }
                None => bad = true,
            }
        }
        let mut lists = None;
        if !bad && p < e && buf[p] == 0x12 {
            match ld(buf, p, e) {
                Some((a, b)) => {
                    lists = Some((a, b));
                    p = b;
                }
                None => bad = true,
            }
        }
        bad |= p != e;
        // the features: every entry's Feature read (asked for) or checked
        if cs < ce {
            bad |= !fkeys.entries(buf, cs, ce, r, &mut entries, &mut ftouched);
            for &(id, vs, ve) in &entries {
                if bad {
                    break; // the names are known; the values of an odd record are not kept
                }
                let acc = fkeys.keys[id as usize].acc.map(|a| &mut fkeys.accs[a]);
                match acc {
                    Some(acc) => {
                        acc.owners.push(r as u64);
                        bad |= !feature(buf, vs, ve, Some(acc));
                    }
                    None => bad |= !feature(buf, vs, ve, None),
                }
            }
        }
        // the feature lists: every step of each
        if let Some((a, b)) = lists {
            bad |= !lkeys.entries(buf, a, b, r, &mut entries, &mut ltouched);
            for &(id, vs, ve) in &entries {
                if bad {
                    break;
                }
                let acc = lkeys.keys[id as usize].acc.map(|a| &mut lkeys.accs[a]);
                match acc {
                    Some(acc) => match feature_list(buf, vs, ve, Some(&mut *acc)) {
                        Some(steps) => {
                            acc.owners.push(r as u64);
                            acc.steps.push(steps);
                        }
                        None => bad = true,
                    },
                    None => bad |= feature_list(buf, vs, ve, None).is_none(),
                }
            }
        }
        if bad {
            odd[r] = 1;
            fkeys.undo(r, &ftouched, false);
            lkeys.undo(r, &ltouched, true);
        } else {
            has_lists[r] = lists.is_some() as u8;
            if r == 0 {
                // room for n records like the first: the vectors grow once, not log(n) times
                for acc in fkeys.accs.iter_mut().chain(lkeys.accs.iter_mut()) {
                    acc.reserve(n);
                }
            }
        }
    }
    Found { odd, has_lists, features: fkeys.accs, lists: lkeys.accs }
}

fn bytearray<'py>(py: Python<'py>, v: &[u8]) -> PyResult<Bound<'py, PyByteArray>> {
    Ok(PyByteArray::new(py, v))
}

/// Integers (`u32` / `u64`: no padding, any bit pattern) as a bytearray of their little-endian
/// bytes: on a little-endian host one copy of the vector's own bytes, not a loop over the items.
fn le_items<'py, T: Copy, const N: usize>(py: Python<'py>, v: &[T], to_le: fn(T) -> [u8; N])
    -> PyResult<Bound<'py, PyByteArray>> {
    const { assert!(std::mem::size_of::<T>() == N) };
    PyByteArray::new_with(py, N * v.len(), |out| {
        if cfg!(target_endian = "little") {
            // SAFETY: the N * len bytes of `v` (integers of N bytes), read while `v` is borrowed
            out.copy_from_slice(unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), N * v.len()) });
        } else {
            for (o, &x) in out.chunks_exact_mut(N).zip(v) {
                o.copy_from_slice(&to_le(x));
            }
        }
        Ok(())
    })
}

/// Little-endian int64 items (the values are int64 bits held as u64).
fn i64s<'py>(py: Python<'py>, v: &[u64]) -> PyResult<Bound<'py, PyByteArray>> {
    le_items(py, v, u64::to_le_bytes)
}

/// Little-endian 32-bit items (floats as their bits).
fn u32s<'py>(py: Python<'py>, v: &[u32]) -> PyResult<Bound<'py, PyByteArray>> {
    le_items(py, v, u32::to_le_bytes)
}

/// A `Col` as Python takes it: (its length, its one value or None for a record index equal to
/// the slot's, or a bytearray of its items).
fn col_out<'py, T: scratch::Pooled + PartialEq + TryFrom<usize> + IntoPyObject<'py>>(
    py: Python<'py>, c: &Col<T>, items: impl Fn(Python<'py>, &[T]) -> PyResult<Bound<'py, PyByteArray>>)
    -> PyResult<(usize, Bound<'py, PyAny>)> {
    Ok(match &c.vec {
        Some(v) => (v.len(), items(py, v)?.into_any()),
        None if c.ident => (c.n, py.None().into_bound(py)),
        None => (c.n, c.first.into_pyobject(py).map_err(Into::into)?.into_any().into_bound()),
    })
}

/// One feature as Python takes it: (name, records, kind, counts, floats, ints, value offsets,
/// value bytes, steps), the arrays bytearrays of little-endian int64 / uint8 / float32 items,
/// `records`, `kind`, `counts` and `steps` each as `col_out` gives it.
type ColOut<'py> = (usize, Bound<'py, PyAny>);
type FeatureOut<'py> = (String, ColOut<'py>, ColOut<'py>, ColOut<'py>, Bound<'py, PyByteArray>,
                        Bound<'py, PyByteArray>, Bound<'py, PyByteArray>, Bound<'py, PyByteArray>, ColOut<'py>);

fn feature_out(py: Python<'_>, a: Acc) -> PyResult<FeatureOut<'_>> {
    let out = (a.name.clone(), col_out(py, &a.owners, i64s)?, col_out(py, &a.kind, bytearray)?,
               col_out(py, &a.counts, i64s)?, u32s(py, &a.floats)?, i64s(py, &a.ints)?, i64s(py, &a.offsets)?,
               bytearray(py, &a.data)?, col_out(py, &a.steps, i64s)?);
    a.give();
    Ok(out)
}

/// Scan the `n` records `data[bounds[i]..bounds[i + 1]]` (`bounds`: n + 1 int64, rising): the
/// compiled `wire_scan.scan_wire`.  `features` / `feature_lists`: the names whose values are
/// read (None: every one); the others are checked by their structure.  Returns `(odd,
/// has_lists, features, feature_lists)`: `odd` and `has_lists` one byte (0 / 1) per record, each
/// feature as `FeatureOut` in the order of first appearance.
#[pyfunction]
#[pyo3(signature = (data, bounds, features=None, feature_lists=None))]
pub fn scan_examples<'py>(py: Python<'py>, data: PyBuffer<u8>, bounds: PyBuffer<i64>,
                          features: Option<Vec<String>>, feature_lists: Option<Vec<String>>)
    -> PyResult<(Bound<'py, PyByteArray>, Bound<'py, PyByteArray>, Vec<FeatureOut<'py>>, Vec<FeatureOut<'py>>)> {
    let buf = slice(&data, "scan_examples: data")?;
    let bounds = slice(&bounds, "scan_examples: bounds")?;
    check_offsets(bounds, buf.len(), "scan_examples")?;
    let found = py.detach(|| scan(buf, bounds, features, feature_lists));
    let features = found.features.into_iter().map(|a| feature_out(py, a)).collect::<PyResult<Vec<_>>>()?;
    let lists = found.lists.into_iter().map(|a| feature_out(py, a)).collect::<PyResult<Vec<_>>>()?;
    Ok((bytearray(py, &found.odd)?, bytearray(py, &found.has_lists)?, features, lists))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld_bytes(tag: u8, payload: &[u8]) -> Vec<u8> {
        assert!(payload.len() < 128);
        let mut v = vec![tag, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    fn run(records: &[Vec<u8>]) -> Found {
        let mut buf = Vec::new();
        let mut bounds = vec![0i64];
        for r in records {
            buf.extend_from_slice(r);
            bounds.push(buf.len() as i64);
        }
        buf.extend_from_slice(&[0; 32]);
        scan(&buf, &bounds, None, None)
    }

    #[test]
    fn reads_an_example_and_refuses_damage() {
        let feature = ld_bytes(0x1A, &ld_bytes(0x0A, &[0x96, 0x01]));
        let entry = ld_bytes(0x0A, &[ld_bytes(0x0A, b"x"), ld_bytes(0x12, &feature)].concat());
        let good = ld_bytes(0x0A, &entry);
        let twice = ld_bytes(0x0A, &[entry.clone(), entry.clone()].concat());
        let mut cut = good.clone();
        cut.pop();
        let found = run(&[good.clone(), twice, cut, vec![], vec![0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]]);
        assert_eq!(found.odd, vec![0, 1, 1, 0, 1]);
        let x = &found.features[0];
        assert_eq!((x.name.as_str(), x.owners.len(), x.owners.vec.is_none(), &x.ints[..]), ("x", 1, true, &[150u64][..]));
        assert_eq!((x.counts.first, x.counts.len(), x.kind.first), (1, 1, KIND_INT64));
    }

    #[test]
    fn ten_byte_varints_keep_bit_63_only() {
        let mut out = Vec::new();
        let bytes = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F];
        assert_eq!(varints(&bytes, 0, 10, Some(&mut out)), Some(1));
        assert_eq!(out, vec![u64::MAX]);
        assert_eq!(varints(&[0xFF; 11], 0, 11, None), None);
        assert_eq!(varints(&[0x80], 0, 1, None), None);
    }
}
