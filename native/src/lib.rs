//! `tfrecord_io.core._native`: the compiled record core of tfrecord-io.
//!
//! Each function here has a numpy reference implementation in `tfrecord_io/core/` that it must
//! match byte for byte (`tests/test_native_core.py` checks it); `tfrecord_io/core/native.py`
//! decides once which of the two runs.  Modules by job:
//!   crc      masked CRC-32C (TFRecord's checksum)
//!   deflate  a block of a block-parallel gzip stream
//!   framing  framing a batch of records; the header / CRC walk of the readers
//!   encode   Arrow columns to serialized Example / SequenceExample records
//!   scan     the protobuf wire scanner: serialized records to their keys, kinds and values
//!   varint   protobuf varints;  buffers  Python buffers as checked slices;
//!   scratch  vectors kept from one call to the next

use pyo3::prelude::*;

mod buffers;
mod crc;
mod deflate;
mod encode;
mod framing;
mod scan;
mod scratch;
mod varint;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(framing::frame, m)?)?;
    m.add_function(wrap_pyfunction!(framing::frame_list, m)?)?;
    m.add_function(wrap_pyfunction!(framing::scan_lengths, m)?)?;
    m.add_function(wrap_pyfunction!(framing::scan_records, m)?)?;
    m.add_function(wrap_pyfunction!(framing::scan_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(encode::encode_examples, m)?)?;
    m.add_function(wrap_pyfunction!(encode::encode_sequence_examples, m)?)?;
    m.add_function(wrap_pyfunction!(scan::scan_examples, m)?)?;
    m.add_class::<encode::FramedBuffer>()?;
    m.add_function(wrap_pyfunction!(deflate::deflate_block, m)?)?;
    Ok(())
}
