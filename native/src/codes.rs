//! Strings to codes: the names, pid/tid keys and their code tables (TableBuilder's `_Codes`), with the hash
//! and the name cache in front of them.

use super::*;

/// Fx-style hash, 8 bytes a step: names are hashed once per kept event (kernel names run to 1 KB); SipHash's
/// DoS resistance buys nothing for one file's names.
#[derive(Default)]
pub(crate) struct Fnv(pub(crate) u64);
impl Fnv {
    #[inline]
    pub(crate) fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517cc1b727220a95);
    }
}
impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut it = bytes.chunks_exact(8);
        for c in &mut it {
            self.mix(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let mut last = [0u8; 8];
        let rest = it.remainder();
        last[..rest.len()].copy_from_slice(rest);
        self.mix(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
    }
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
}
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

pub(crate) const NAME_CACHE_BITS: u32 = 10;
pub(crate) const NAME_CACHE: usize = 1 << NAME_CACHE_BITS;

/// An entry of the name cache (`Codes::code_cached`): a name's first and last 16 bytes (the first n, zero-padded,
/// when shorter), its length and its code (-1: none).
#[derive(Clone, Copy)]
pub(crate) struct CachedName {
    pub(crate) head: u128,
    pub(crate) tail: u128,
    pub(crate) len: u32,
    pub(crate) code: i32,
}
pub(crate) const NO_NAME: CachedName = CachedName { head: 0, tail: 0, len: 0, code: -1 };

/// Strings in order of first appearance -> code (TableBuilder's `_Codes`).
#[derive(Default)]
pub(crate) struct Codes {
    pub(crate) map: FastMap<Vec<u8>, i32>,
    pub(crate) order: Vec<Vec<u8>>,
}
impl Codes {
    /// `code` through a small cache in front of the map, indexed by a hash of the key's length and its first and
    /// last 16 bytes (a kernel name runs to 1 KB: hashing it all, as the map does, costs more than comparing it
    /// with the one name the cache offers). An entry keeps those bytes: a key of at most 32 bytes is matched by
    /// them alone, a longer one is then compared whole; so a collision only misses. `padded`: 16 bytes from the
    /// key's start can be read (it lies in the padded chunk), so a short key is loaded without a copy.
    #[inline(always)]
    pub(crate) fn code_cached(&mut self, key: &[u8], padded: bool, cache: &mut [CachedName; NAME_CACHE]) -> i32 {
        let n = key.len();
        let (head, tail) = if n >= 16 {
            (u128::from_le_bytes(key[..16].try_into().unwrap()), u128::from_le_bytes(key[n - 16..].try_into().unwrap()))
        } else if padded && n > 0 {
            // SAFETY: the caller says 16 bytes from the key's start are inside the padded chunk. Not for an empty
            // key: an event without a name has the static `b""` (Event::default), whose pointer may be dangling.
            (unsafe { std::ptr::read_unaligned(key.as_ptr() as *const u128) } & low_bytes(n), 0)
        } else {
            let mut b = [0u8; 16];
            b[..n].copy_from_slice(key);
            (u128::from_le_bytes(b), 0)
        };
        let h = ((head as u64) ^ ((head >> 64) as u64).rotate_left(17) ^ (tail as u64).rotate_left(31)
                 ^ ((tail >> 64) as u64).rotate_left(47) ^ n as u64).wrapping_mul(0x9E3779B97F4A7C15);
        let slot = (h >> (64 - NAME_CACHE_BITS)) as usize;
        let e = cache[slot];
        if e.code >= 0 && e.len as usize == n && e.head == head && e.tail == tail
            && (n <= 32 || self.order.get(e.code as usize).is_some_and(|k| k.as_slice() == key)) {
            return e.code;
        }
        let c = self.code(key);
        cache[slot] = CachedName { head, tail, len: n as u32, code: c };
        c
    }

    pub(crate) fn code(&mut self, key: &[u8]) -> i32 {
        if let Some(&c) = self.map.get(key) {
            return c;
        }
        let c = self.order.len() as i32;
        self.map.insert(key.to_vec(), c);
        self.order.push(key.to_vec());
        c
    }
    pub(crate) fn truncate(&mut self, n: usize) {
        while self.order.len() > n {
            let k = self.order.pop().unwrap();
            self.map.remove(&k);
        }
    }
}
