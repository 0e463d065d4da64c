//! Masked CRC-32C, as TFRecord stores it.
//!
//! CRC-32C is the Castagnoli polynomial (0x1EDC6F41, reflected 0x82F63B78); the `crc32c` crate
//! computes it with SSE4.2 / ARMv8 CRC instructions when the CPU has them (checked at run time)
//! and with tables otherwise.  TFRecord stores it *masked*, as LevelDB does: rotated right by
//! 15 bits, plus 0xa282ead8 (mod 2**32).

/// LevelDB's kMaskDelta.
const MASK_DELTA: u32 = 0xA282_EAD8;

/// Rotate right by 15 bits and add the mask delta.
#[inline]
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The masked CRC-32C of `data`.
#[inline]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask(crc32c::crc32c(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // CRC-32C check value of "123456789" (RFC 3720 test vector).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(mask(0), MASK_DELTA);
        assert_eq!(masked_crc32c(b""), MASK_DELTA);
    }
}
