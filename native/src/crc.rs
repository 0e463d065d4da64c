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
    mask(crc32c(data))
}

/// The CRC-32C of `data`: by carry-less multiplication (`fold`) from `FOLD_MIN` bytes on where the
/// CPU has VPCLMULQDQ and AVX-512, else by the `crc32c` crate.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if data.len() >= fold::FOLD_MIN && fold::available() {
            // SAFETY: the CPU has the features `fold` needs (checked above) and the data is long enough.
            return unsafe { fold::crc32c(data) };
        }
    }
    crc32c::crc32c(data)
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

/// `out[i]` = the masked CRC-32C of `data[i]`: four at a time (`masked_lanes`), or each by
/// carry-less multiplication (`fold`) where the CPU can and four of them are long enough.
pub fn masked_crcs(data: &[&[u8]], out: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if fold::available() {
            for (c, o) in data.chunks(4).zip(out.chunks_mut(4)) {
                if c.len() == 4 && c.iter().all(|d| d.len() >= fold::FOLD_MIN) {
                    for (d, o) in c.iter().zip(o.iter_mut()) {
                        // SAFETY: the CPU has the features `fold` needs, and each slice is long enough.
                        *o = mask(unsafe { fold::crc32c(d) });
                    }
                } else {
                    masked_crcs_lanes(c, o);
                }
            }
            return;
        }
    }
    masked_crcs_lanes(data, out)
}

fn masked_crcs_lanes(data: &[&[u8]], out: &mut [u32]) {
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

/// CRC-32C by folding with carry-less multiplication (VPCLMULQDQ on 512-bit registers): 64 bytes
/// a step, four 128-bit lanes, where the `crc32` instruction takes 8 bytes a cycle at best -- the
/// floor of the walks' and the encoder's CRCs on records of a few hundred bytes.
///
/// The bytes are polynomial coefficients, reflected (bit 0 of byte 0 is the highest degree), so a
/// 128-bit little-endian load holds degree 127 - i in bit i.  Folding a 128-bit lane A = L:H (its
/// low and high 64 bits) forward by d bits, onto the lane d bits later, replaces A * x^d with
/// L * (x^(63+d) mod P) + H * (x^(d-1) mod P): congruent mod P, at most 95 bits, and -- with the
/// constants reflected into the high half of a 64-bit word, degree g at bit 63 - g -- aligned by
/// `pclmulqdq` with the later lane's bits (the 63 and -1 absorb the product's one-bit offset).
/// The initial value is XORed into the first four bytes; the last 128-bit remainder R (congruent
/// to the message so far) becomes the CRC state with two `crc32` instructions from 0, which
/// compute R * x^32 mod P; the last 0-15 bytes go through `crc32` as well.  The test
/// `fold_constants_are_powers_of_x` computes the constants from P, and `fold_matches_the_crate`
/// checks every length from 64 to 1,100 bytes against the crate's CRC.
#[cfg(target_arch = "x86_64")]
pub mod fold {
    use std::arch::x86_64::*;

    /// Slices shorter than this are not folded (one 512-bit load is the first step).
    pub const FOLD_MIN: usize = 64;

    /// (x^(63+d) mod P, x^(d-1) mod P), reflected, for folding by d = 128, 256, 384 and 512 bits.
    pub(super) const K128: (u64, u64) = (0x3743_f7bd_0000_0000, 0x3171_d430_0000_0000);
    pub(super) const K256: (u64, u64) = (0x33cc_bbbc_0000_0000, 0xa215_8b34_0000_0000);
    pub(super) const K384: (u64, u64) = (0xa46e_f4aa_0000_0000, 0x6051_243f_0000_0000);
    pub(super) const K512: (u64, u64) = (0x1c19_243b_0000_0000, 0x75bb_a45b_0000_0000);

    #[inline]
    pub fn available() -> bool {
        std::is_x86_feature_detected!("vpclmulqdq")
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("pclmulqdq")
            && std::is_x86_feature_detected!("sse4.2")
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.2")]
    fn fold128(a: __m128i, d: __m128i, k: (u64, u64)) -> __m128i {
        let k = _mm_set_epi64x(k.1 as i64, k.0 as i64);
        _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128::<0x00>(a, k), _mm_clmulepi64_si128::<0x11>(a, k)), d)
    }

    /// The CRC-32C of `data` (at least `FOLD_MIN` bytes).
    ///
    /// # Safety
    /// The CPU must have what [`available`] checks, and `data.len() >= FOLD_MIN`.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    pub unsafe fn crc32c(data: &[u8]) -> u32 {
        debug_assert!(data.len() >= FOLD_MIN);
        let n = data.len();
        let at = |p: usize| data.as_ptr().add(p);
        let k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(K512.1 as i64, K512.0 as i64));
        let mut x = _mm512_xor_si512(_mm512_loadu_si512(at(0) as *const _), _mm512_maskz_set1_epi64(1, 0xFFFF_FFFF));
        let mut p = 64;
        while n - p >= 64 {
            let d = _mm512_loadu_si512(at(p) as *const _);
            let (lo, hi) = (_mm512_clmulepi64_epi128::<0x00>(x, k512), _mm512_clmulepi64_epi128::<0x11>(x, k512));
            x = _mm512_ternarylogic_epi64::<0x96>(lo, hi, d); // lo ^ hi ^ d
            p += 64;
        }
        let zero = _mm_setzero_si128();
        let mut r = _mm_xor_si128(
            _mm_xor_si128(fold128(_mm512_extracti32x4_epi32::<0>(x), zero, K384),
                          fold128(_mm512_extracti32x4_epi32::<1>(x), zero, K256)),
            fold128(_mm512_extracti32x4_epi32::<2>(x), _mm512_extracti32x4_epi32::<3>(x), K128),
        );
        while n - p >= 16 {
            r = fold128(r, _mm_loadu_si128(at(p) as *const __m128i), K128);
            p += 16;
        }
        let mut crc = _mm_crc32_u64(0, _mm_cvtsi128_si64(r) as u64);
        crc = _mm_crc32_u64(crc, _mm_extract_epi64::<1>(r) as u64);
        while n - p >= 8 {
            crc = _mm_crc32_u64(crc, u64::from_le_bytes(data[p..p + 8].try_into().unwrap()));
            p += 8;
        }
        let mut c = crc as u32;
        for &b in &data[p..] {
            c = _mm_crc32_u8(c, b);
        }
        !c
    }
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
    #[cfg(target_arch = "x86_64")]
    fn fold_constants_are_powers_of_x() {
        // x^n mod P (P = x^32 + 0x1EDC6F41, bit g the coefficient of x^g), reflected into the
        // high half of a 64-bit word: degree g at bit 63 - g.
        let xpow = |n: u32| (0..n).fold(1u64, |r, _| if r & (1 << 31) != 0 { (r << 1) ^ 0x1_1EDC_6F41 } else { r << 1 });
        let reflect = |k: u64| (0..32).filter(|g| k >> g & 1 == 1).fold(0u64, |out, g| out | 1 << (63 - g));
        for (d, k) in [(128, fold::K128), (256, fold::K256), (384, fold::K384), (512, fold::K512)] {
            assert_eq!(k, (reflect(xpow(63 + d)), reflect(xpow(d - 1))), "folding by {d} bits");
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn fold_matches_the_crate() {
        if !fold::available() {
            eprintln!("no VPCLMULQDQ / AVX-512 on this CPU: the fold is not run here");
            return;
        }
        let data: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
        for n in fold::FOLD_MIN..1100 {
            for start in [0, 1, 7] {
                let d = &data[start..start + n];
                assert_eq!(unsafe { fold::crc32c(d) }, crc32c::crc32c(d), "length {n} from {start}");
            }
        }
        for n in [4096, 4999] {
            assert_eq!(unsafe { fold::crc32c(&data[..n]) }, crc32c::crc32c(&data[..n]));
        }
        let zeros = [0u8; 300];
        assert_eq!(unsafe { fold::crc32c(&zeros) }, crc32c::crc32c(&zeros));
        // through the entry points: every length, and groups of four long and short slices
        for n in 0..300 {
            assert_eq!(masked_crc32c(&data[..n]), mask(crc32c::crc32c(&data[..n])));
        }
        let slices: Vec<&[u8]> = [64, 313, 2000, 80, 63, 200, 0, 99, 128, 129].iter().map(|&n| &data[3..3 + n]).collect();
        let mut out = vec![0u32; slices.len()];
        masked_crcs(&slices, &mut out);
        assert_eq!(out, slices.iter().map(|d| mask(crc32c::crc32c(d))).collect::<Vec<_>>());
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
