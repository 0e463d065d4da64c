//! TFRecord framing: a batch of records framed at once, and the header walk of a read.
//!
//! Each record is `u64 length | u32 masked_crc(length) | data | u32 masked_crc(data)`, all
//! little-endian (see `tfrecord_io/core/framing.py`, the reference implementation).  The
//! readers here look at one buffer of the stream at a time: what is whole in it is walked here;
//! a record that runs past its end is left to the Python caller, which reads on (and names the
//! error exactly as the numpy path does).

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffers::{check_offsets, slice};
use crate::crc::{masked_crc32c, masked_crc32c_u64, masked_crcs};

/// Bytes of a record's header (length, masked CRC of the length) and footer (masked CRC of the data).
pub const HEADER: usize = 12;
pub const FOOTER: usize = 4;

/// Write one framed record at `out[at..]`; returns the position after it.
#[inline]
fn put_record(out: &mut [u8], at: usize, data: &[u8]) -> usize {
    let len = data.len() as u64;
    out[at..at + 8].copy_from_slice(&len.to_le_bytes());
    out[at + 8..at + 12].copy_from_slice(&masked_crc32c_u64(len).to_le_bytes());
    let end = at + HEADER + data.len();
    out[at + HEADER..end].copy_from_slice(data);
    out[end..end + FOOTER].copy_from_slice(&masked_crc32c(data).to_le_bytes());
    end + FOOTER
}

/// The framed stream of the records `data[offsets[i]..offsets[i + 1]]`, i in 0..n.
#[pyfunction]
pub fn frame<'py>(py: Python<'py>, offsets: PyBuffer<i64>, data: PyBuffer<u8>) -> PyResult<Bound<'py, PyBytes>> {
    let off = slice(&offsets, "frame: offsets")?;
    let bytes = slice(&data, "frame: data")?;
    check_offsets(off, bytes.len(), "frame")?;
    let n = off.len() - 1;
    let total = (off[n] - off[0]) as usize + (HEADER + FOOTER) * n;
    PyBytes::new_with(py, total, |out| {
        let mut at = 0;
        for w in off.windows(2) {
            at = put_record(out, at, &bytes[w[0] as usize..w[1] as usize]);
        }
        Ok(())
    })
}

/// The framed stream of a list of `bytes` records.
#[pyfunction]
pub fn frame_list<'py>(py: Python<'py>, records: Vec<Bound<'py, PyBytes>>) -> PyResult<Bound<'py, PyBytes>> {
    let total: usize = records.iter().map(|r| r.as_bytes().len() + HEADER + FOOTER).sum();
    PyBytes::new_with(py, total, |out| {
        let mut at = 0;
        for r in &records {
            at = put_record(out, at, r.as_bytes());
        }
        Ok(())
    })
}

/// A failed check: (which: 0 length CRC / 1 data CRC, header position, length, stored, computed).
type Bad = (u8, u64, u64, u32, u32);

#[inline]
fn header_at(buf: &[u8], pos: usize) -> (u64, u32, u32) {
    let length = u64::from_le_bytes(buf[pos..pos + 8].try_into().unwrap());
    let stored = u32::from_le_bytes(buf[pos + 8..pos + 12].try_into().unwrap());
    (length, stored, masked_crc32c_u64(length))
}

/// Where the record whose header is at `pos` ends, if it ends inside `len` bytes.
#[inline]
fn record_end(pos: usize, length: u64, len: usize) -> Option<usize> {
    let end = (pos as u64).checked_add(HEADER as u64)?.checked_add(length)?.checked_add(FOOTER as u64)?;
    if end <= len as u64 { Some(end as usize) } else { None }
}

/// Walk the record headers of `buf` from `pos`: the data lengths of up to `limit` records, each
/// header's length CRC checked (data CRCs are not).
///
/// Returns `(lengths, pos, straddles, bad)`: `lengths` as little-endian int64 bytes; `pos` where
/// the walk stopped (after the last whole record, or at the header of the one that runs past the
/// buffer's end); `straddles` when that record's header is whole and its length is the last of
/// `lengths` but its data runs past the end (the caller skips it); `bad` a failed length CRC
/// `(0, header position, length, stored, computed)` -- the lengths before it are returned.
#[pyfunction]
pub fn scan_lengths<'py>(py: Python<'py>, buf: PyBuffer<u8>, pos: usize, limit: usize)
    -> PyResult<(Bound<'py, PyBytes>, usize, bool, Option<Bad>)> {
    let b = slice(&buf, "scan_lengths: buffer")?;
    if pos > b.len() {
        return Err(PyValueError::new_err(format!("scan_lengths: position {pos} is past the {} bytes", b.len())));
    }
    let mut lengths: Vec<u8> = Vec::with_capacity(8 * limit.min(1 << 16));
    let (mut at, mut count, mut straddles, mut bad) = (pos, 0usize, false, None);
    while count < limit && at + HEADER <= b.len() {
        let (length, stored, got) = header_at(b, at);
        if got != stored {
            bad = Some((0, at as u64, length, stored, got));
            break;
        }
        lengths.extend_from_slice(&length.to_le_bytes());
        count += 1;
        match record_end(at, length, b.len()) {
            Some(end) => at = end,
            None => {
                straddles = true;
                break;
            }
        }
    }
    Ok((PyBytes::new(py, &lengths), at, straddles, bad))
}

/// Read the whole records of `buf` from `pos`: their stream offsets (`base` is the offset of
/// `buf[0]`) and data, the length CRC of each checked, and its data CRC too with `verify`.
///
/// Returns `(offsets, datas, pos, bad)`: `pos` is where the first record that is not whole in
/// `buf` starts (the caller reads on from there); `bad` a failed check
/// `(0 length CRC | 1 data CRC, stream offset, length, stored, computed)` -- the records
/// before it are returned.
#[pyfunction]
pub fn scan_records<'py>(py: Python<'py>, buf: Bound<'py, PyBytes>, pos: usize, verify: bool, base: u64)
    -> PyResult<(Vec<u64>, Vec<Bound<'py, PyBytes>>, usize, Option<Bad>)> {
    let b = buf.as_bytes();
    if pos > b.len() {
        return Err(PyValueError::new_err(format!("scan_records: position {pos} is past the {} bytes", b.len())));
    }
    let (mut positions, mut datas) = (Vec::new(), Vec::new());
    let (mut at, mut bad) = (pos, None);
    while at + HEADER <= b.len() {
        let (length, stored, got) = header_at(b, at);
        if got != stored {
            bad = Some((0, base + at as u64, length, stored, got));
            break;
        }
        let Some(end) = record_end(at, length, b.len()) else { break };
        let data = &b[at + HEADER..end - FOOTER];
        if verify {
            let stored = u32::from_le_bytes(b[end - FOOTER..end].try_into().unwrap());
            let got = masked_crc32c(data);
            if got != stored {
                bad = Some((1, base + at as u64, length, stored, got));
                break;
            }
        }
        positions.push(base + at as u64);
        datas.push(PyBytes::new(py, data));
        at = end;
    }
    Ok((positions, datas, at, bad))
}

/// Walk the whole records of `buf` from `pos`, up to `limit` of them, without handing any record
/// over: the length CRC of each checked, and its data CRC too with `verify` -- the chunked walk of
/// `verify` (no Python object per record).
///
/// Returns `(positions, lengths, data, pos, bad)`: the records' header positions (stream offsets:
/// `base` is the offset of `buf[0]`) and data lengths as little-endian int64 bytes; with `gather`,
/// `data` is the records' data back to back (record i is `data[sum(lengths[:i]):][:lengths[i]]`),
/// else None; `pos` and `bad` as for `scan_records` (the records before a failed check are returned).
/// `lead`: bytes put before the gathered data (the data of records the caller read itself, one
/// that straddled two reads: so that a chunk is still one buffer).
#[pyfunction]
#[pyo3(signature = (buf, pos, verify, base, limit, gather, lead = None))]
#[allow(clippy::too_many_arguments)]
pub fn scan_chunk<'py>(py: Python<'py>, buf: PyBuffer<u8>, pos: usize, verify: bool, base: u64, limit: usize,
                       gather: bool, lead: Option<PyBuffer<u8>>)
    -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, Option<Bound<'py, PyBytes>>, usize, Option<Bad>)> {
    let b = slice(&buf, "scan_chunk: buffer")?;
    let lead: &[u8] = match &lead {
        Some(l) => slice(l, "scan_chunk: lead")?,
        None => &[],
    };
    if pos > b.len() {
        return Err(PyValueError::new_err(format!("scan_chunk: position {pos} is past the {} bytes", b.len())));
    }
    let cap = limit.min(b.len() / HEADER + 1);
    let (mut positions, mut lengths): (Vec<u8>, Vec<u8>) = (Vec::with_capacity(8 * cap), Vec::with_capacity(8 * cap));
    let (mut at, mut count, mut bad, mut total) = (pos, 0usize, None, 0usize);
    // Records a group at a time: their headers walked (lengths checked), then their data CRCs
    // computed together (`masked_crcs`), then checked in order -- so the first failed check in the
    // stream is the one reported, whichever kind it is.
    const GROUP: usize = 16;
    let mut group: [(usize, u64, usize); GROUP] = [(0, 0, 0); GROUP];
    let (mut datas, mut crcs): ([&[u8]; GROUP], [u32; GROUP]) = ([&[][..]; GROUP], [0; GROUP]);
    'walk: loop {
        let (mut m, mut a, mut header_bad, mut cut) = (0, at, None, false);
        while m < GROUP && count + m < limit && a + HEADER <= b.len() {
            let (length, stored, got) = header_at(b, a);
            if got != stored {
                header_bad = Some((0, base + a as u64, length, stored, got));
                break;
            }
            let Some(end) = record_end(a, length, b.len()) else {
                cut = true;
                break;
            };
            group[m] = (a, length, end);
            datas[m] = &b[a + HEADER..end - FOOTER];
            m += 1;
            a = end;
        }
        if verify {
            masked_crcs(&datas[..m], &mut crcs[..m]);
        }
        for (i, &(a, length, end)) in group[..m].iter().enumerate() {
            if verify {
                let stored = u32::from_le_bytes(b[end - FOOTER..end].try_into().unwrap());
                if crcs[i] != stored {
                    bad = Some((1, base + a as u64, length, stored, crcs[i]));
                    break 'walk;
                }
            }
            positions.extend_from_slice(&(base + a as u64).to_le_bytes());
            lengths.extend_from_slice(&length.to_le_bytes());
            total += length as usize;
            count += 1;
            at = end;
        }
        if header_bad.is_some() {
            bad = header_bad;
            break;
        }
        if m < GROUP || cut {
            break;
        }
    }
    let data = if gather {
        Some(PyBytes::new_with(py, lead.len() + total, |out| {
            out[..lead.len()].copy_from_slice(lead);
            let (mut from, mut to) = (pos, lead.len());
            for l in lengths.chunks_exact(8) {
                let l = u64::from_le_bytes(l.try_into().unwrap()) as usize;
                out[to..to + l].copy_from_slice(&b[from + HEADER..from + HEADER + l]);
                (from, to) = (from + HEADER + l + FOOTER, to + l);
            }
            Ok(())
        })?)
    } else {
        None
    };
    Ok((PyBytes::new(py, &positions), PyBytes::new(py, &lengths), data, at, bad))
}
