//! One block of a block-parallel gzip stream (`tfrecord_io/core/gzip_blocks.py`, which says how
//! the blocks make one gzip member): raw deflate (no zlib header) of the block, with the 32 KiB
//! before it as the dictionary, ended by a sync flush -- or, for the last block, by the end of the
//! stream.
//!
//! zlib-rs (the Rust port of zlib-ng's compressor) deflates TFRecord data with 1.2x less CPU than
//! the system zlib that Python's `zlib` module wraps at level 6, for 3% more bytes, and about 2.6x
//! less at level 1, for 14% more (BENCHMARKS.md, "Gzip writers"); the bytes differ from zlib's,
//! as two deflate encoders' may, and every gzip reader reads them.  The work runs without the
//! GIL: the writer's threads deflate blocks side by side.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use zlib_rs::{Deflate, DeflateFlush, Status};

use crate::buffers::slice;

/// Bytes a sync flush or the end of the stream may add past `compress_bound` (the empty stored
/// block of a sync flush is 5 bytes).
const FLUSH_ROOM: usize = 64;

/// `block` deflated: see the module's doc.  `level` is zlib's (-1: its default, 6).
#[pyfunction]
#[pyo3(signature = (block, level, zdict, last))]
pub fn deflate_block<'py>(py: Python<'py>, block: PyBuffer<u8>, level: i32, zdict: Option<PyBuffer<u8>>, last: bool)
    -> PyResult<Bound<'py, PyBytes>> {
    if !(-1..=9).contains(&level) {
        return Err(PyValueError::new_err(format!("deflate_block: level must be -1 to 9 (zlib's), got {level}")));
    }
    let data = slice(&block, "deflate_block: block")?;
    let dict: &[u8] = match &zdict {
        Some(d) => slice(d, "deflate_block: zdict")?,
        None => &[],
    };
    let done = py.detach(|| -> Result<Vec<u8>, String> {
        let mut z = Deflate::new(level, false, 15);
        if !dict.is_empty() {
            z.set_dictionary(dict).map_err(|e| format!("setting the dictionary: {e:?}"))?;
        }
        let mut out = vec![0u8; zlib_rs::compress_bound(data.len()) + FLUSH_ROOM];
        let flush = if last { DeflateFlush::Finish } else { DeflateFlush::SyncFlush };
        let status = z.compress(data, &mut out, flush).map_err(|e| format!("{e:?}"))?;
        let whole = z.total_in() as usize == data.len()
            && if last { status == Status::StreamEnd } else { (z.total_out() as usize) < out.len() };
        if !whole {  // cannot happen with compress_bound's room: said rather than a cut block
            return Err(format!("deflate stopped after {} of {} bytes ({status:?})", z.total_in(), data.len()));
        }
        out.truncate(z.total_out() as usize);
        Ok(out)
    });
    match done {
        Ok(out) => Ok(PyBytes::new(py, &out)),
        Err(e) => Err(PyValueError::new_err(format!("deflate_block: {e}"))),
    }
}
