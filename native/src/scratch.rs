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
