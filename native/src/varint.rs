//! Protobuf base-128 varints.

/// Bytes `v` takes as a varint (1..=10).
#[inline]
pub fn size(v: u64) -> usize {
    // 1 + floor(bits / 7), with bits = 64 - leading zeros (and at least 1 bit for 0).
    let bits = 64 - (v | 1).leading_zeros() as usize;
    (bits + 6) / 7
}

/// Write `v` as a varint at `out[at..]`; returns the position after it.
#[inline]
pub fn put(out: &mut [u8], mut at: usize, mut v: u64) -> usize {
    if let Some(w) = out.get_mut(at..at + 10) {
        // Room for the longest varint: one bounds check, not one per byte.
        let w: &mut [u8; 10] = w.try_into().unwrap();
        let mut k = 0;
        while v >= 0x80 {
            w[k] = (v as u8) | 0x80;
            v >>= 7;
            k += 1;
        }
        w[k] = v as u8;
        return at + k + 1;
    }
    while v >= 0x80 {
        out[at] = (v as u8) | 0x80;
        v >>= 7;
        at += 1;
    }
    out[at] = v as u8;
    at + 1
}

/// The seven-bit groups of `w`'s bytes (their top bits already cleared) side by side: eight
/// bytes' groups into 56 bits, in three steps of pairs (bytes, then 14-bit, then 28-bit halves).
#[inline(always)]
fn compact(w: u64) -> u64 {
    let x = ((w & 0x7F00_7F00_7F00_7F00) >> 1) | (w & 0x007F_007F_007F_007F);
    let x = ((x & 0x3FFF_0000_3FFF_0000) >> 2) | (x & 0x0000_3FFF_0000_3FFF);
    ((x & 0x0FFF_FFFF_0000_0000) >> 4) | (x & 0x0000_0000_0FFF_FFFF)
}

/// The varint at `buf[at..]`, when it is one of at most 10 bytes that ends before `end` and the
/// 8 bytes from `at` lie in `buf` (one load finds its end: the first byte under 0x80): (value,
/// the position after it), the bits past 64 of a 10th byte dropped (protobuf's rule).  None
/// otherwise -- including a varint that is cut or too long: the caller reads those byte by byte.
#[inline(always)]
pub fn get(buf: &[u8], at: usize, end: usize) -> Option<(u64, usize)> {
    let w = u64::from_le_bytes(buf.get(at..at + 8)?.try_into().unwrap());
    let stops = !w & 0x8080_8080_8080_8080;
    if stops != 0 {
        let n = (stops.trailing_zeros() / 8 + 1) as usize; // 1..=8 bytes
        let keep = u64::MAX >> (64 - 8 * n); // the varint's own bytes
        return (at + n <= end).then(|| (compact(w & keep & 0x7F7F_7F7F_7F7F_7F7F), at + n));
    }
    let low = compact(w & 0x7F7F_7F7F_7F7F_7F7F);
    let b8 = *buf.get(at + 8)? as u64;
    if b8 < 0x80 {
        return (at + 9 <= end).then_some((low | (b8 << 56), at + 9));
    }
    let b9 = *buf.get(at + 9)? as u64;
    (b9 < 0x80 && at + 10 <= end).then_some((low | ((b8 & 0x7F) << 56) | (b9 << 63), at + 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte by byte, as protobuf reads a varint.
    fn slow(b: &[u8]) -> Option<(u64, usize)> {
        let mut v = 0u64;
        for (i, &x) in b.iter().enumerate().take(10) {
            v |= ((x & 0x7F) as u64).checked_shl(7 * i as u32).unwrap_or(0);
            if i == 9 {
                v |= ((x & 1) as u64) << 63;
            }
            if x < 0x80 {
                return Some((v, i + 1));
            }
        }
        None
    }

    #[test]
    fn get_reads_what_put_writes() {
        let mut values: Vec<u64> = vec![0, 1, 127, 128, 300, u64::MAX, (-1i64) as u64, (-1_000_000i64) as u64];
        values.extend((0..64).map(|k| 1u64 << k));
        values.extend((0..64).map(|k| (1u64 << k) - 1));
        for v in values {
            let mut b = [0u8; 24];
            let n = put(&mut b, 3, v) - 3;
            assert_eq!(get(&b, 3, 3 + n), Some((v, 3 + n)), "{v}");
            assert_eq!(get(&b, 3, 3 + n - 1), None, "{v}: one byte short of its end");
            assert_eq!(slow(&b[3..]), Some((v, n)));
        }
    }

    #[test]
    fn get_agrees_with_the_bytewise_read() {
        // non-minimal varints, 10th bytes with bits past 64, 11-byte runs, every byte pattern
        // near the group boundaries
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut b = [0u8; 12];
            let len = (seed % 11) as usize;
            for (i, x) in b.iter_mut().enumerate() {
                let r = (seed.rotate_left(8 * i as u32) & 0xFF) as u8;
                *x = if i < len { r | 0x80 } else { r };
            }
            let fast = get(&b, 0, b.len());
            match slow(&b) {
                Some(want) => assert_eq!(fast, Some(want), "{b:02x?}"),
                None => assert_eq!(fast, None, "{b:02x?}"),
            }
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(size(0), 1);
        assert_eq!(size(127), 1);
        assert_eq!(size(128), 2);
        assert_eq!(size(u64::MAX), 10);
        assert_eq!(size((-1i64) as u64), 10);
        let mut b = [0u8; 10];
        assert_eq!(put(&mut b, 0, 300), 2);
        assert_eq!(&b[..2], &[0xAC, 0x02]);
        assert_eq!(put(&mut b, 0, u64::MAX), 10);
        assert_eq!(b[9], 1);
    }
}
