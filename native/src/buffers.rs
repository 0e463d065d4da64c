//! Borrowing the memory of Python buffer objects (numpy arrays, `bytes`) as Rust slices.
//!
//! Every buffer is checked to be C-contiguous; offsets read from them are checked against the
//! data they index before any byte is copied, so a bad argument is a `ValueError`, never a read
//! outside the buffer.

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The items of a contiguous buffer, borrowed for as long as `buf` lives.
pub fn slice<'a, T: Element>(buf: &'a PyBuffer<T>, what: &str) -> PyResult<&'a [T]> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{what}: the buffer is not C-contiguous")));
    }
    let n = buf.item_count();
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the buffer is contiguous, holds `n` items of `T` (PyBuffer checked the item
    // format and size), and stays alive and exported (hence unmoved) while `buf` is borrowed.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const T, n) })
}

/// Check that `offsets` (n + 1 of them) rise and stay within `0..=len`.
pub fn check_offsets(offsets: &[i64], len: usize, what: &str) -> PyResult<()> {
    if offsets.is_empty() {
        return Err(PyValueError::new_err(format!("{what}: offsets are empty (need n + 1 of them)")));
    }
    let mut prev = offsets[0];
    if prev < 0 {
        return Err(PyValueError::new_err(format!("{what}: offset 0 is negative ({prev})")));
    }
    for (i, &o) in offsets.iter().enumerate().skip(1) {
        if o < prev {
            return Err(PyValueError::new_err(format!("{what}: offset {i} ({o}) is below offset {} ({prev})", i - 1)));
        }
        prev = o;
    }
    if prev as u64 > len as u64 {
        return Err(PyValueError::new_err(format!("{what}: last offset {prev} is past the {len} data bytes")));
    }
    Ok(())
}
