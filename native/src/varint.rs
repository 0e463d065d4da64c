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

#[cfg(test)]
mod tests {
    use super::*;

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
