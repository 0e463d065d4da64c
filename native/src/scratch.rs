//! Scratch vectors kept from one call to the next, per thread.
//!
//! The encoder needs a few vectors per column per batch (value ranges, lengths, prefix caches):
//! allocated afresh, each batch, they cost more in page faults than the encoding itself (glibc
//! gives large freed blocks back to the kernel, and the next batch touches new pages).  Taken
//! from here and given back on drop, their pages stay mapped.

use std::cell::RefCell;

/// At most this many vectors of a type are kept per thread...
const KEEP: usize = 512;
/// ... and none larger than this (bytes): a huge batch's vectors are not held on to.
const KEEP_BYTES: usize = 16 << 20;

pub trait Pooled: Copy + Default + 'static {
    fn with_pool<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> R;
}

macro_rules! pooled {
    ($t:ty, $name:ident) => {
        thread_local! { static $name: RefCell<Vec<Vec<$t>>> = const { RefCell::new(Vec::new()) }; }
        impl Pooled for $t {
            fn with_pool<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> R {
                $name.with(|p| f(&mut p.borrow_mut()))
            }
        }
    };
}

pooled!(u8, POOL_U8);
pooled!(u32, POOL_U32);
pooled!(u64, POOL_U64);
pooled!(usize, POOL_USIZE);

thread_local! { static OUT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) }; }
/// Output buffers kept per thread (a writer has one or two batches in hand at a time), each of at
/// most `KEEP_OUT_BYTES` (a Beam writer's 65,536-row batch of 300-byte records is 20 MB).
const KEEP_OUT: usize = 2;
const KEEP_OUT_BYTES: usize = 32 << 20;

/// A buffer of at least `n` initialized bytes (what they hold is left from an earlier use): the
/// smallest kept one that is long enough, else a kept one grown (only its new part zeroed).
pub fn take_out(n: usize) -> Vec<u8> {
    let kept = OUT.try_with(|p| {
        let mut p = p.borrow_mut();
        let fit = (0..p.len()).filter(|&i| p[i].len() >= n).min_by_key(|&i| p[i].len());
        match fit {
            Some(i) => Some(p.swap_remove(i)),
            None => p.pop(),
        }
    });
    let mut v = kept.ok().flatten().unwrap_or_default();
    if v.len() < n {
        v.resize(n, 0);
    }
    v
}

/// Give an output buffer back (not one over `KEEP_OUT_BYTES`).
pub fn give_out(v: Vec<u8>) {
    if v.len() > 0 && v.len() <= KEEP_OUT_BYTES {
        let _ = OUT.try_with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < KEEP_OUT {
                p.push(v);
            }
        });
    }
}

/// A vector of `n` default values (zeros), from the pool when it has one.
pub fn take<T: Pooled>(n: usize) -> Vec<T> {
    let mut v = T::with_pool(|p| p.pop()).unwrap_or_default();
    v.clear();
    v.resize(n, T::default());
    v
}

/// An empty vector with room for `n`, from the pool when it has one.
pub fn take_empty<T: Pooled>(n: usize) -> Vec<T> {
    let mut v = T::with_pool(|p| p.pop()).unwrap_or_default();
    v.clear();
    v.reserve(n);
    v
}

/// Give `v` back for a later call.
pub fn give<T: Pooled>(v: Vec<T>) {
    if v.capacity() > 0 && v.capacity() * std::mem::size_of::<T>() <= KEEP_BYTES {
        T::with_pool(|p| if p.len() < KEEP { p.push(v) });
    }
}
