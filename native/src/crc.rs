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

/// The masked CRC-32C of a length field: `length` as 8 little-endian bytes.  One `crc32` instruction
/// where the CPU has SSE4.2 (the walks check one per record: a call into the general routine
/// costs more than the CRC).
#[inline]
pub fn masked_crc32c_u64(length: u64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2 (checked above; the check is cached by std).
            return mask(unsafe { crc32c_u64_sse42(length) });
        }
    }
    masked_crc32c(&length.to_le_bytes())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_u64_sse42(v: u64) -> u32 {
    use std::arch::x86_64::_mm_crc32_u64;
    !(_mm_crc32_u64(0xFFFF_FFFF, v) as u32)
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
        for v in [0u64, 1, 255, 256, 65_795, u32::MAX as u64, 1 << 40, u64::MAX] {
            assert_eq!(masked_crc32c_u64(v), masked_crc32c(&v.to_le_bytes()));
        }
    }
}
