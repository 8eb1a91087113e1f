//! Revisions and the byte layout of versioned keys.
//!
//! Every write transaction gets the next *main* revision; the operations inside it are told
//! apart by the *sub* revision (0, 1, 2 …), as in etcd. A key's versions are stored under
//! (key, revision) so that, for one key, byte order is revision order:
//!
//! ```text
//!  versioned key = escaped(user key) ‖ 0x00 0x01 ‖ main (8 bytes BE) ‖ sub (8 bytes BE)
//!  escaped(k)    = k with every 0x00 written as 0x00 0xFF
//! ```
//!
//! The escape keeps the order of user keys (a key sorts before every key it is a prefix of,
//! because the terminator 0x00 0x01 sorts below any escaped continuation byte), so a prefix or
//! range scan over user keys is a contiguous scan over versioned keys.

use std::fmt;

/// (main, sub): main is the store revision of a write transaction, sub the index of the
/// operation within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Revision {
    pub main: i64,
    pub sub: i64,
}

impl Revision {
    pub const fn new(main: i64, sub: i64) -> Self {
        Revision { main, sub }
    }

    /// 16 bytes, big-endian, so byte order equals numeric order for non-negative revisions.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.main.to_be_bytes());
        out[8..].copy_from_slice(&self.sub.to_be_bytes());
        out
    }

    pub fn from_bytes(b: &[u8; 16]) -> Self {
        let (main, sub) = b.split_at(8);
        Revision {
            main: i64::from_be_bytes(main.try_into().expect("invariant: 8 bytes")),
            sub: i64::from_be_bytes(sub.try_into().expect("invariant: 8 bytes")),
        }
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.main, self.sub)
    }
}

const ESCAPE: u8 = 0xFF;
const TERMINATOR: [u8; 2] = [0x00, 0x01];

/// The versioned key of `key` at `rev`.
pub fn versioned_key(key: &[u8], rev: Revision) -> Vec<u8> {
    let mut out = key_prefix(key);
    out.extend_from_slice(&rev.to_bytes());
    out
}

/// Every version of `key` starts with these bytes (and no version of any other key does).
pub fn key_prefix(key: &[u8]) -> Vec<u8> {
    let mut out = escape(key);
    out.extend_from_slice(&TERMINATOR);
    out
}

/// The order-preserving escape of a user key, without terminator: the lower bound of a range
/// scan starting at `key`.
pub fn escape(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 18);
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(ESCAPE);
        }
    }
    out
}

/// Splits a versioned key back into the user key and the revision.
pub fn split_versioned_key(v: &[u8]) -> Option<(Vec<u8>, Revision)> {
    if v.len() < 18 {
        return None;
    }
    let (escaped, rest) = v.split_at(v.len() - 16);
    let rev = Revision::from_bytes(rest.try_into().ok()?);
    let body = escaped.strip_suffix(&TERMINATOR)?;
    let mut key = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        key.push(body[i]);
        if body[i] == 0 {
            if body.get(i + 1) != Some(&ESCAPE) {
                return None;
            }
            i += 1;
        }
        i += 1;
    }
    Some((key, rev))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn versions_of_a_key_sort_by_revision() {
        let a = versioned_key(b"k", Revision::new(2, 0));
        let b = versioned_key(b"k", Revision::new(2, 1));
        let c = versioned_key(b"k", Revision::new(10, 0));
        assert!(a < b && b < c);
        assert_eq!(
            split_versioned_key(&c),
            Some((b"k".to_vec(), Revision::new(10, 0)))
        );
    }

    #[test]
    fn a_key_sorts_before_its_extensions() {
        let max = Revision::new(i64::MAX, i64::MAX);
        assert!(versioned_key(b"a", max) < versioned_key(b"a\0", Revision::new(0, 0)));
        assert!(versioned_key(b"a", max) < versioned_key(b"ab", Revision::new(0, 0)));
        assert!(versioned_key(b"a\0", max) < versioned_key(b"a\x01", Revision::new(0, 0)));
    }

    proptest! {
        /// Byte order of versioned keys is (user key, revision) order, and encoding reverses.
        #[test]
        fn encoding_preserves_order(
            k1 in proptest::collection::vec(any::<u8>(), 0..6),
            k2 in proptest::collection::vec(any::<u8>(), 0..6),
            r1 in (0i64..1000, 0i64..4),
            r2 in (0i64..1000, 0i64..4),
        ) {
            let (r1, r2) = (Revision::new(r1.0, r1.1), Revision::new(r2.0, r2.1));
            let (v1, v2) = (versioned_key(&k1, r1), versioned_key(&k2, r2));
            prop_assert_eq!(v1.cmp(&v2), (&k1, r1).cmp(&(&k2, r2)));
            prop_assert_eq!(split_versioned_key(&v1), Some((k1.clone(), r1)));
            // every version of k1 lies between escape(k1) and the next key's range
            prop_assert!(v1.starts_with(&key_prefix(&k1)));
            prop_assert!(v1 >= escape(&k1));
        }
    }
}
