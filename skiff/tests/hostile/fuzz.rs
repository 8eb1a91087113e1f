//! Random requests from a seed: every method, every field at edge values, and a quarter of
//! them mutated at the byte level (flipped, truncated, extended) so some do not decode.
//!
//! Case `i` of seed `s` is generated from `s` and `i` alone, so a failing case can be replayed
//! (`SKIFF_FUZZ_SEED=s`) whatever order the workers ran the cases in.
//!
//! What the generators never produce, because a client may legitimately do it and the checks
//! afterwards assume it was not done: writes (puts, deletes, leases' keys) below `/fuzz/`, where
//! the seeded keys are; a MemberAdd, MemberUpdate, MemberRemove, MemberPromote or MoveLeader
//! naming a real member or a valid new peer URL; an Alarm ACTIVATE; a `root` user or role (so
//! AuthEnable always fails). Against etcd, no unknown Alarm action and no Range sorted
//! (ascending or descending) by an unknown target either: etcd 3.4.23 crashes on both (a nil
//! applier response; `sort.Sort` of a nil sorter).

use bytes::Bytes;

use crate::methods::{self, Method};
use crate::target::Kind;
use crate::wire::Pb;

/// SplitMix64: small, fast and the same on every platform and crate version.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator of case `i` of a run seeded `seed`.
    pub fn for_case(seed: u64, i: u64) -> Rng {
        let mut r = Rng(seed ^ i.wrapping_mul(0xa076_1d64_78bd_642f));
        r.next();
        r
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    pub fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max as u64 + 1) as usize;
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The run's seed: `SKIFF_FUZZ_SEED` (decimal or 0x-hex), else one from the clock.
pub fn seed_from_env() -> u64 {
    match std::env::var("SKIFF_FUZZ_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("SKIFF_FUZZ_SEED={s:?}: {e}"))
        }
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

/// `SKIFF_FUZZ_CASES`, else `default`.
pub fn cases_from_env(default: usize) -> usize {
    std::env::var("SKIFF_FUZZ_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// One generated request.
#[derive(Debug, Clone)]
pub struct Case {
    pub method: Method,
    pub bodies: Vec<Bytes>,
    /// Whether the bytes were mutated after building (so may not decode).
    pub mutated: bool,
}

/// How often each method is drawn (Snapshot and Defragment are heavy; reads and writes are
/// what clients send most).
const WEIGHTS: &[(Method, u64)] = &[
    (methods::RANGE, 12),
    (methods::PUT, 12),
    (methods::DELETE_RANGE, 6),
    (methods::TXN, 10),
    (methods::COMPACT, 2),
    (methods::WATCH, 12),
    (methods::LEASE_GRANT, 3),
    (methods::LEASE_REVOKE, 3),
    (methods::LEASE_KEEP_ALIVE, 3),
    (methods::LEASE_TIME_TO_LIVE, 3),
    (methods::LEASE_LEASES, 1),
    (methods::MEMBER_ADD, 3),
    (methods::MEMBER_REMOVE, 2),
    (methods::MEMBER_UPDATE, 2),
    (methods::MEMBER_LIST, 1),
    (methods::MEMBER_PROMOTE, 2),
    (methods::ALARM, 2),
    (methods::STATUS, 1),
    (methods::DEFRAGMENT, 1),
    (methods::HASH, 1),
    (methods::HASH_KV, 1),
    (methods::SNAPSHOT, 1),
    (methods::MOVE_LEADER, 1),
    (methods::AUTH_ENABLE, 1),
    (methods::AUTH_DISABLE, 1),
    (methods::AUTHENTICATE, 1),
    (methods::USER_ADD, 1),
    (methods::USER_GET, 1),
    (methods::USER_LIST, 1),
    (methods::USER_DELETE, 1),
    (methods::USER_CHANGE_PASSWORD, 1),
    (methods::USER_GRANT_ROLE, 1),
    (methods::USER_REVOKE_ROLE, 1),
    (methods::ROLE_ADD, 1),
    (methods::ROLE_GET, 1),
    (methods::ROLE_LIST, 1),
    (methods::ROLE_DELETE, 1),
    (methods::ROLE_GRANT_PERMISSION, 1),
    (methods::ROLE_REVOKE_PERMISSION, 1),
];

/// `SKIFF_FUZZ_SKIP`: methods (`MemberAdd` or `Cluster.MemberAdd`, comma-separated) the
/// fuzzer leaves out, to look past a known bug while it is being fixed.
fn skipped(m: &Method) -> bool {
    std::env::var("SKIFF_FUZZ_SKIP")
        .unwrap_or_default()
        .split(',')
        .any(|s| s.trim() == m.name || s.trim() == m.label())
}

pub fn case(seed: u64, index: u64, target: Kind) -> Case {
    let mut r = Rng::for_case(seed, index);
    let weights: Vec<(Method, u64)> = WEIGHTS
        .iter()
        .filter(|(m, _)| !skipped(m))
        .copied()
        .collect();
    let total: u64 = weights.iter().map(|(_, w)| w).sum();
    let mut at = r.below(total);
    let mut method = weights[0].0;
    for (m, w) in &weights {
        if at < *w {
            method = *m;
            break;
        }
        at -= w;
    }
    let mut bodies = match method.call {
        methods::Call::Watch => (0..1 + r.below(3)).map(|_| watch_request(&mut r)).collect(),
        methods::Call::KeepAlive => (0..1 + r.below(3))
            .map(|_| Pb::new().int(1, int(&mut r)))
            .collect(),
        _ => vec![request(&mut r, method, target)],
    }
    .into_iter()
    .map(Pb::into_bytes)
    .collect::<Vec<_>>();
    let mutated = r.chance(25);
    if mutated {
        let i = r.below(bodies.len() as u64) as usize;
        // A flipped, inserted or appended byte can turn a write's key into one below `/fuzz/`
        // that still decodes (a valid delete of the seeded keys), or an Alarm's action into
        // ACTIVATE (a valid NOSPACE alarm that stops every write). Those are only cut short.
        let cut_only = matches!(
            method,
            methods::PUT | methods::DELETE_RANGE | methods::TXN | methods::ALARM
        );
        bodies[i] = mutate(&mut r, &bodies[i], cut_only);
    }
    if r.chance(5) {
        // Unknown fields are skipped by every decoder.
        let i = r.below(bodies.len() as u64) as usize;
        let extra = Pb::new()
            .raw(&bodies[i])
            .varint(1000 + r.below(5000) as u32, r.next());
        bodies[i] = extra.into_bytes();
    }
    Case {
        method,
        bodies,
        mutated,
    }
}

/// An int64 at an edge more often than not.
fn int(r: &mut Rng) -> i64 {
    let (small, any) = ((r.next() % 1000) as i64, r.next() as i64);
    *r.pick(&[
        0,
        1,
        -1,
        2,
        7,
        100,
        i64::MAX,
        i64::MIN,
        i64::from(i32::MAX),
        i64::from(i32::MIN),
        small,
        any,
    ])
}

fn enum_value(r: &mut Rng, known: i64) -> i64 {
    if r.chance(70) {
        r.below(known as u64) as i64
    } else {
        *r.pick(&[known, known + 5, -1, i64::from(i32::MAX), i64::MIN])
    }
}

/// A key for reads and watches: anything.
fn any_key(r: &mut Rng) -> Vec<u8> {
    match r.below(9) {
        0 => Vec::new(),
        1 => b"\0".to_vec(),
        2 => b"/".to_vec(),
        3 => b"/a-seed/".to_vec(),
        4 => vec![0xff; 1 + r.below(8) as usize],
        5 => vec![b'k'; 10_000],
        6 => r.bytes(24),
        _ => fuzz_key(r),
    }
}

/// A key under `/fuzz/` (or empty, or all 0xff): writes stay clear of the seeded keys.
fn write_key(r: &mut Rng) -> Vec<u8> {
    match r.below(10) {
        0 => Vec::new(),
        1 => vec![0xff; 1 + r.below(4) as usize],
        _ => fuzz_key(r),
    }
}

fn fuzz_key(r: &mut Rng) -> Vec<u8> {
    let mut k = b"/fuzz/".to_vec();
    if r.chance(50) {
        k.extend(format!("{}", r.below(50)).as_bytes());
    } else {
        k.extend(r.bytes(12));
    }
    k
}

fn prefix_end(key: &[u8]) -> Vec<u8> {
    let mut end = key.to_vec();
    while let Some(&last) = end.last() {
        if last < 0xff {
            *end.last_mut().expect("non-empty") += 1;
            return end;
        }
        end.pop();
    }
    b"\0".to_vec()
}

/// A range end for `key` at an edge: none, everything after, equal, reversed, prefix, random.
fn any_end(r: &mut Rng, key: &[u8]) -> Vec<u8> {
    match r.below(8) {
        0 => Vec::new(),
        1 => b"\0".to_vec(),
        2 => key.to_vec(),
        3 => b"\x01".to_vec(),
        4 => prefix_end(key),
        5 => [key, b"\0"].concat(),
        6 => r.bytes(8),
        _ => b"/".to_vec(),
    }
}

/// A range end for a write from `key` that stays at or above `/fuzz/`.
fn write_end(r: &mut Rng, key: &[u8]) -> Vec<u8> {
    let floor = key >= b"/fuzz/".as_slice();
    match r.below(6) {
        0 => Vec::new(),
        1 if floor => b"\0".to_vec(),
        2 => key.to_vec(),
        3 if floor => b"/fuzz/".to_vec(),
        4 => prefix_end(key),
        _ => [key, b"\0"].concat(),
    }
}

fn value(r: &mut Rng) -> Vec<u8> {
    match r.below(6) {
        0 => Vec::new(),
        1 => vec![b'v'; 64 * 1024],
        _ => r.bytes(64),
    }
}

fn range_request(r: &mut Rng, target: Kind) -> Pb {
    let key = any_key(r);
    let mut p = Pb::new().bytes(1, &key);
    if r.chance(60) {
        p = p.bytes(2, &any_end(r, &key));
    }
    let fields: [(u32, bool); 11] = [
        (3, true),
        (4, true),
        (5, false),
        (6, false),
        (7, false),
        (8, false),
        (9, false),
        (10, true),
        (11, true),
        (12, true),
        (13, true),
    ];
    for (f, is_int) in fields {
        if r.chance(25) {
            p = match (f, is_int) {
                (5, _) => p.int(5, enum_value(r, 3)),
                (6, _) if target == Kind::Etcd => p.int(6, r.below(5) as i64),
                (6, _) => p.int(6, enum_value(r, 5)),
                (_, true) => p.int(f, int(r)),
                _ => p.flag(f, true),
            };
        }
    }
    p
}

fn put_request(r: &mut Rng) -> Pb {
    let mut p = Pb::new().bytes(1, &write_key(r)).bytes(2, &value(r));
    if r.chance(20) {
        p = p.int(3, int(r));
    }
    for f in 4..=6 {
        if r.chance(15) {
            p = p.flag(f, true);
        }
    }
    p
}

fn delete_request(r: &mut Rng) -> Pb {
    let key = write_key(r);
    let mut p = Pb::new().bytes(1, &key);
    if r.chance(70) {
        p = p.bytes(2, &write_end(r, &key));
    }
    if r.chance(30) {
        p = p.flag(3, true);
    }
    p
}

fn txn_request(r: &mut Rng, depth: u32, target: Kind) -> Pb {
    let mut t = Pb::new();
    for _ in 0..r.below(4) {
        let key = if r.chance(10) { Vec::new() } else { any_key(r) };
        let target = enum_value(r, 5);
        let mut c = Pb::new()
            .int(1, enum_value(r, 4))
            .int(2, target)
            .bytes(3, &key);
        c = match r.below(6) {
            0 => c.int(4, int(r)),
            1 => c.int(5, int(r)),
            2 => c.int(6, int(r)),
            3 => c.bytes(7, &r.bytes(8)),
            4 => c.int(8, int(r)),
            _ => c,
        };
        if r.chance(20) {
            c = c.bytes(64, &any_end(r, &key));
        }
        t = t.msg(1, c);
    }
    for branch in [2, 3] {
        for _ in 0..r.below(4) {
            let op = match r.below(if depth < 3 { 5 } else { 4 }) {
                0 => Pb::new().msg(1, range_request(r, target)),
                1 => Pb::new().msg(2, put_request(r)),
                2 => Pb::new().msg(3, delete_request(r)),
                3 => Pb::new(),
                _ => Pb::new().msg(4, txn_request(r, depth + 1, target)),
            };
            t = t.msg(branch, op);
        }
    }
    t
}

fn watch_request(r: &mut Rng) -> Pb {
    match r.below(10) {
        0 => Pb::new().msg(2, Pb::new().int(1, int(r))),
        1 => Pb::new().msg(3, Pb::new()),
        2 => Pb::new(),
        _ => {
            let key = any_key(r);
            let mut c = Pb::new().bytes(1, &key);
            if r.chance(70) {
                c = c.bytes(2, &any_end(r, &key));
            }
            // Half start in the past (a catch-up from history), mostly within the writes so far.
            if r.chance(50) {
                let from = if r.chance(60) {
                    1 + r.below(20) as i64
                } else {
                    int(r)
                };
                c = c.int(3, from);
            }
            for f in [4, 6, 8] {
                if r.chance(20) {
                    c = c.flag(f, true);
                }
            }
            for _ in 0..r.below(3) {
                c = c.int(5, enum_value(r, 2));
            }
            if r.chance(30) {
                c = c.int(7, int(r));
            }
            Pb::new().msg(1, c)
        }
    }
}

/// Peer URLs no member can have: each list holds at least one that does not parse as
/// `http(s)://host:port`.
fn bad_urls(r: &mut Rng) -> Vec<Vec<u8>> {
    let bad: &[&[u8]] = &[
        b"not a url",
        b"",
        b"http://",
        b"http://127.0.0.1",
        b"ftp://127.0.0.1:2380",
        b"http://127.0.0.1:2380/path",
        b"://",
        b"http://[::1",
        b"\xff\xfe",
    ];
    let mut urls = vec![r.pick(bad).to_vec()];
    // Beside it, one that looks almost right: but wrong twice over (a path and a query), so
    // no single flipped byte makes it valid, and a mutation that hides the first field (a
    // flipped tag) still leaves no valid URL to add.
    if r.chance(30) {
        urls.push(b"http://127.0.0.1:1/x?y".to_vec());
    }
    if r.chance(20) {
        urls.push(r.bytes(20));
    }
    urls
}

fn member_id(r: &mut Rng) -> u64 {
    let any = r.next();
    *r.pick(&[0, 1, u64::MAX, any])
}

fn name(r: &mut Rng) -> Vec<u8> {
    match r.below(4) {
        0 => Vec::new(),
        1 => b"nobody".to_vec(),
        2 => vec![b'n'; 5000],
        _ => r.bytes(10),
    }
}

fn request(r: &mut Rng, m: Method, target: Kind) -> Pb {
    use methods::*;
    match m {
        RANGE => range_request(r, target),
        PUT => put_request(r),
        DELETE_RANGE => delete_request(r),
        TXN => txn_request(r, 0, target),
        COMPACT => {
            let rev = if r.chance(50) {
                r.below(40) as i64
            } else {
                int(r)
            };
            Pb::new().int(1, rev).flag(2, r.chance(30))
        }
        LEASE_GRANT => Pb::new().int(1, int(r)).int(2, int(r)),
        LEASE_REVOKE => Pb::new().int(1, int(r)),
        LEASE_TIME_TO_LIVE => Pb::new().int(1, int(r)).flag(2, r.chance(50)),
        MEMBER_ADD => bad_urls(r)
            .iter()
            .fold(Pb::new(), |p, u| p.bytes(1, u))
            .flag(2, r.chance(30)),
        MEMBER_UPDATE => bad_urls(r)
            .iter()
            .fold(Pb::new().varint(1, member_id(r)), |p, u| p.bytes(2, u)),
        MEMBER_REMOVE | MEMBER_PROMOTE | MOVE_LEADER => Pb::new().varint(1, member_id(r)),
        ALARM => Pb::new()
            .int(
                1,
                match target {
                    Kind::Skiff => *r.pick(&[0, 2, 3, 9, -1]),
                    Kind::Etcd => *r.pick(&[0, 2]),
                },
            )
            .varint(2, member_id(r))
            .int(3, enum_value(r, 3)),
        HASH_KV => Pb::new().int(1, int(r)),
        AUTHENTICATE | USER_ADD | USER_CHANGE_PASSWORD => {
            Pb::new().bytes(1, &name(r)).bytes(2, &r.bytes(10))
        }
        USER_GET | USER_DELETE | ROLE_ADD | ROLE_GET | ROLE_DELETE => Pb::new().bytes(1, &name(r)),
        USER_GRANT_ROLE | USER_REVOKE_ROLE => Pb::new().bytes(1, &name(r)).bytes(2, &name(r)),
        ROLE_GRANT_PERMISSION => Pb::new().bytes(1, &name(r)).msg(
            2,
            Pb::new()
                .int(1, enum_value(r, 3))
                .bytes(2, &any_key(r))
                .bytes(3, &r.bytes(4)),
        ),
        ROLE_REVOKE_PERMISSION => Pb::new()
            .bytes(1, &name(r))
            .bytes(2, &any_key(r))
            .bytes(3, &r.bytes(4)),
        // Requests without fields: Status, Defragment, Hash, Snapshot, MemberList,
        // LeaseLeases, AuthEnable, AuthDisable, UserList, RoleList.
        _ => Pb::new(),
    }
}

/// Byte-level damage: a flipped byte, a cut, a bad tag, or garbage appended (only a cut when
/// `cut_only`).
fn mutate(r: &mut Rng, b: &[u8], cut_only: bool) -> Bytes {
    let mut v = b.to_vec();
    if cut_only {
        v.truncate(r.below(v.len() as u64) as usize);
        return Bytes::from(v);
    }
    match r.below(4) {
        0 if !v.is_empty() => {
            let i = r.below(v.len() as u64) as usize;
            v[i] ^= 1 << r.below(8);
        }
        1 if !v.is_empty() => v.truncate(r.below(v.len() as u64) as usize),
        2 => {
            let i = r.below(v.len() as u64 + 1) as usize;
            v.splice(i..i, [0x0f, 0x00]);
        }
        _ => v.extend(r.bytes(16)),
    }
    Bytes::from(v)
}
