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

/// Slices longer than this go to the `crc32c` crate one at a time (it splits a long one into three
/// interleaved streams itself); shorter ones are interleaved with each other by `masked_lanes`.
const LANE_MAX: usize = 2048;

/// The masked CRC-32C of each of `N` slices, computed together: a record of a few hundred bytes
/// is one chain of dependent `crc32` instructions (3 cycles each), so the words of `N` records are
/// interleaved to keep the CPU's CRC unit busy -- what the walks and the fused encoder use for
/// short records.  The same values as `masked_crc32c` of each.
#[inline]
pub fn masked_lanes<const N: usize>(data: [&[u8]; N]) -> [u32; N] {
    #[cfg(target_arch = "x86_64")]
    {
        if data.iter().all(|d| d.len() <= LANE_MAX) && std::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2 (checked above; the check is cached by std).
            return unsafe { lanes_sse42(data) }.map(mask);
        }
    }
    data.map(masked_crc32c)
}

/// `out[i]` = the masked CRC-32C of `data[i]`, four at a time (`masked_lanes`).
pub fn masked_crcs(data: &[&[u8]], out: &mut [u32]) {
    let mut chunks = data.chunks_exact(4);
    for (i, c) in (&mut chunks).enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&masked_lanes([c[0], c[1], c[2], c[3]]));
    }
    let done = data.len() / 4 * 4;
    let rest = chunks.remainder();
    match rest.len() {
        3 => out[done..done + 3].copy_from_slice(&masked_lanes([rest[0], rest[1], rest[2]])),
        2 => out[done..done + 2].copy_from_slice(&masked_lanes([rest[0], rest[1]])),
        1 => out[done] = masked_crc32c(rest[0]),
        _ => {}
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn lanes_sse42<const N: usize>(data: [&[u8]; N]) -> [u32; N] {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let word = |d: &[u8], w: usize| u64::from_le_bytes(d[8 * w..8 * w + 8].try_into().unwrap());
    let mut crc = [0xFFFF_FFFFu64; N];
    let common = data.iter().map(|d| d.len() / 8).min().unwrap_or(0);
    // The words all lanes have, as fixed-size arrays: no bounds check per word.
    let lanes: [&[[u8; 8]]; N] = data.map(|d| d[..8 * common].as_chunks::<8>().0);
    for w in 0..common {
        for k in 0..N {
            crc[k] = _mm_crc32_u64(crc[k], u64::from_le_bytes(lanes[k][w]));
        }
    }
    let mut out = [0u32; N];
    for k in 0..N {
        let d = data[k];
        for w in common..d.len() / 8 {
            crc[k] = _mm_crc32_u64(crc[k], word(d, w));
        }
        let mut c = crc[k] as u32;
        for &b in &d[d.len() / 8 * 8..] {
            c = _mm_crc32_u8(c, b);
        }
        out[k] = !c;
    }
    out
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

    #[test]
    fn lanes_match_one_at_a_time() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for (a, b, c, d) in [(0, 0, 0, 0), (1, 7, 8, 9), (300, 313, 17, 0), (2048, 2049, 5000, 64), (15, 16, 31, 4096)] {
            let s = [&data[..a], &data[1..1 + b], &data[..c], &data[3..3 + d.min(4997)]];
            assert_eq!(masked_lanes(s), s.map(masked_crc32c));
            assert_eq!(masked_lanes([s[1]]), [masked_crc32c(s[1])]);
        }
        // every tail (0-7 bytes) in every lane, lanes of equal and unequal word counts
        for a in 0..40 {
            for b in [0, 3, 6, 13, 22, 38] {
                let s = [&data[a..2 * a], &data[7..7 + b], &data[..(a + b) % 41], &data[1..1 + (a * 3) % 37]];
                assert_eq!(masked_lanes(s), s.map(masked_crc32c), "lengths {:?}", s.map(|x| x.len()));
            }
        }
    }
}
