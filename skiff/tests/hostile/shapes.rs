//! The fixed request shapes: every method with a malformed message, an unknown field and its
//! edge values, each with the answer etcd 3.4.23 gives it (observed with
//! `SKIFF_HOSTILE_TARGET=etcd`, which holds this table to etcd itself) and, where Skiff
//! answers otherwise on purpose, what Skiff answers and why.
//!
//! The shapes run in this order against a cluster prepared by [`prepare`], so revisions and
//! leases are the same on both servers.

use bytes::Bytes;

use crate::methods::{self, Method};
use crate::wire::Pb;

/// What Skiff should answer to a shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skiff {
    /// What etcd answers.
    AsEtcd,
    /// What etcd answers, once a fix under way lands (the text names it); fails until then.
    AsEtcdOnceFixed(&'static str),
    /// Something else, on purpose.
    Differs {
        verdict: &'static str,
        why: &'static str,
    },
}

#[derive(Debug, Clone)]
pub struct Shape {
    pub method: Method,
    pub name: String,
    /// The request messages (unary calls send the first; streams send all, in order).
    pub bodies: Vec<Bytes>,
    /// etcd 3.4.23's verdict (see `methods::ask`).
    pub etcd: &'static str,
    pub skiff: Skiff,
}

impl Shape {
    /// The verdict Skiff is held to.
    pub fn want_skiff(&self) -> &'static str {
        match self.skiff {
            Skiff::AsEtcd | Skiff::AsEtcdOnceFixed(_) => self.etcd,
            Skiff::Differs { verdict, .. } => verdict,
        }
    }
}

/// The keys every run writes first (revisions 2 to 11 on a new cluster), and the keys the
/// sort shapes read (revisions 12 to 14).
pub const SEED_PREFIX: &str = "/a-seed/";
pub const SEEDS: usize = 10;
pub const SORT_KEYS: [(&str, &str); 3] =
    [("/a-sort/a", "3"), ("/a-sort/b", "1"), ("/a-sort/c", "2")];

/// Writes the seed keys and the sort keys.
pub async fn prepare(c: &mut etcd_client::Client) {
    for i in 0..SEEDS {
        c.put(format!("{SEED_PREFIX}{i}"), format!("v{i}"), None)
            .await
            .expect("seed put");
    }
    for (k, v) in SORT_KEYS {
        c.put(k, v, None).await.expect("sort key put");
    }
}

// Field numbers from etcd's rpc.proto.
fn range(key: &[u8], end: &[u8]) -> Pb {
    Pb::new().bytes(1, key).bytes(2, end)
}

fn put(key: &[u8], value: &[u8]) -> Pb {
    Pb::new().bytes(1, key).bytes(2, value)
}

fn watch_create(c: Pb) -> Bytes {
    Pb::new().msg(1, c).into_bytes()
}

fn txn_of(ops: Vec<Pb>) -> Pb {
    ops.into_iter().fold(Pb::new(), |t, op| t.msg(2, op))
}

fn op_put(key: &[u8]) -> Pb {
    Pb::new().msg(2, put(key, b"v"))
}

fn nested_txn(depth: usize) -> Pb {
    let mut t = txn_of(vec![op_put(b"/shape/nested")]);
    for _ in 1..depth {
        t = txn_of(vec![Pb::new().msg(4, t)]);
    }
    t
}

const MIB: usize = 1024 * 1024;

/// A field with an invalid wire type (7): no protobuf decoder accepts it.
pub const BAD_WIRE_TYPE: &[u8] = &[0x0f, 0x01];
/// Field 1, length 5, one byte present.
pub const TRUNCATED: &[u8] = &[0x0a, 0x05, 0x61];
/// Field 999 (a varint): unknown to every message, so skipped.
pub fn unknown_field() -> Pb {
    Pb::new().varint(999, 1)
}

const UNKNOWN_ENUM: Skiff = Skiff::Differs {
    verdict: "InvalidArgument",
    why: "Skiff refuses enum values etcd 3.4 does not define; etcd ignores them (no sort, a compare result that is always true, an alarm type a GET does not read)",
};
const STREAM_DECODE: Skiff = Skiff::AsEtcdOnceFixed(
    "not claimed yet: a stream whose request does not decode should end with the decode error, not OK",
);

/// The whole catalogue, in the order it runs.
pub fn catalogue() -> Vec<Shape> {
    let mut out = Vec::new();
    let mut add = |method: Method, name: &str, body: Pb, etcd: &'static str, skiff: Skiff| {
        out.push(Shape {
            method,
            name: name.to_string(),
            bodies: vec![body.into_bytes()],
            etcd,
            skiff,
        });
    };
    use Skiff::{AsEtcd, AsEtcdOnceFixed};
    use methods::*;

    // Every method: a message that does not decode, and one with only an unknown field.
    for &mth in ALL {
        let (malformed, empty) = match (mth.service, mth.call) {
            (_, Call::Watch | Call::KeepAlive) => (STREAM_DECODE, AsEtcd),
            _ if mth == COMPACT => (
                AsEtcd,
                Skiff::Differs {
                    verdict: "OutOfRange",
                    why: "Skiff's compacted revision starts at 0, so compacting to revision 0 is \"already compacted\"; etcd's starts at -1 and takes it as a no-op",
                },
            ),
            _ => (AsEtcd, AsEtcd),
        };
        let bad = match mth.call {
            Call::Watch | Call::KeepAlive => "ended Internal",
            _ => "Internal",
        };
        add(
            mth,
            "malformed: invalid wire type",
            Pb::new().raw(BAD_WIRE_TYPE),
            bad,
            malformed,
        );
        add(
            mth,
            "malformed: length past the end",
            Pb::new().raw(TRUNCATED),
            bad,
            malformed,
        );
        // An empty MemberAdd runs with the membership shapes, last.
        if mth != MEMBER_ADD {
            let etcd_empty = empty_answer(mth);
            add(
                mth,
                "only an unknown field (an empty request)",
                unknown_field(),
                etcd_empty,
                empty,
            );
        }
    }

    // KV.Range.
    add(
        RANGE,
        "range_end before key",
        range(b"/z", b"/a"),
        "Ok",
        AsEtcd,
    );
    add(
        RANGE,
        "range_end equal to key",
        range(b"/z", b"/z"),
        "Ok",
        AsEtcd,
    );
    add(
        RANGE,
        "key \"\\0\", range_end \"\\0\" (everything)",
        range(b"\0", b"\0"),
        "Ok",
        AsEtcd,
    );
    add(
        RANGE,
        "limit -1",
        Pb::new().bytes(1, b"/a").int(3, -1),
        "Ok",
        AsEtcd,
    );
    add(
        RANGE,
        "limit i64::MAX",
        Pb::new().bytes(1, b"/a").int(3, i64::MAX),
        "Ok",
        AsEtcd,
    );
    add(
        RANGE,
        "revision -1",
        Pb::new().bytes(1, b"/a").int(4, -1),
        "Ok",
        AsEtcd,
    );
    add(
        RANGE,
        "revision i64::MAX (future)",
        Pb::new().bytes(1, b"/a").int(4, i64::MAX),
        "OutOfRange",
        AsEtcd,
    );
    add(
        RANGE,
        "sort_order 7, sort_target 9 (unknown enum values)",
        range(b"/a-sort/", b"/a-sort0").int(5, 7).int(6, 9),
        "Ok",
        UNKNOWN_ENUM,
    );
    add(
        RANGE,
        "sort_order -1 (negative enum value)",
        range(b"/a-sort/", b"/a-sort0").int(5, -1),
        "Ok",
        UNKNOWN_ENUM,
    );
    add(
        RANGE,
        "keys_only + count_only + serializable",
        range(b"/a-sort/", b"/a-sort0")
            .flag(7, true)
            .flag(8, true)
            .flag(9, true),
        "Ok",
        AsEtcd,
    );
    add(
        RANGE,
        "min/max mod and create revisions negative",
        range(b"/a-sort/", b"/a-sort0")
            .int(10, -5)
            .int(11, -5)
            .int(12, -5)
            .int(13, -5),
        "Ok",
        AsEtcd,
    );
    add(
        RANGE,
        "key of 1 MiB",
        Pb::new().bytes(1, &vec![b'k'; MIB]),
        "Ok",
        AsEtcd,
    );
    add(
        RANGE,
        "message of 3 MiB (over the gRPC limit)",
        Pb::new().bytes(1, &vec![b'k'; 3 * MIB]),
        "ResourceExhausted",
        AsEtcdOnceFixed("request limits: a message over the limit is a size error"),
    );
    add(
        RANGE,
        "key wrong wire type (varint)",
        Pb::new().varint(1, 5),
        "Internal",
        AsEtcd,
    );

    // KV.Put.
    add(PUT, "empty key", put(b"", b"v"), "InvalidArgument", AsEtcd);
    add(
        PUT,
        "value of 1.75 MiB (over --max-request-bytes, under the gRPC limit)",
        put(b"/shape/big", &vec![b'v'; MIB + 3 * MIB / 4]),
        "InvalidArgument",
        AsEtcd,
    );
    add(
        PUT,
        "value of 3 MiB (over the gRPC limit)",
        put(b"/shape/big", &vec![b'v'; 3 * MIB]),
        "ResourceExhausted",
        AsEtcdOnceFixed("request limits: a message over the limit is a size error"),
    );
    add(
        PUT,
        "lease i64::MAX (not granted)",
        put(b"/shape/l", b"v").int(3, i64::MAX),
        "NotFound",
        AsEtcd,
    );
    add(
        PUT,
        "lease -1",
        put(b"/shape/l", b"v").int(3, -1),
        "NotFound",
        AsEtcd,
    );
    add(
        PUT,
        "ignore_value with a value",
        put(b"/shape/iv", b"v").flag(5, true),
        "InvalidArgument",
        AsEtcd,
    );
    add(
        PUT,
        "ignore_value on a missing key",
        Pb::new().bytes(1, b"/shape/none").flag(5, true),
        "InvalidArgument",
        AsEtcd,
    );
    add(
        PUT,
        "ignore_lease with a lease",
        put(b"/shape/il", b"v").int(3, 5).flag(6, true),
        "InvalidArgument",
        AsEtcd,
    );
    add(
        PUT,
        "key of 255 0xff bytes",
        put(&[0xff; 255], b"v"),
        "Ok",
        AsEtcd,
    );

    // KV.DeleteRange.
    add(
        DELETE_RANGE,
        "empty key",
        Pb::new().bytes(2, b"/z"),
        "InvalidArgument",
        AsEtcd,
    );
    add(
        DELETE_RANGE,
        "range_end before key",
        range(b"/shape/z", b"/shape/a"),
        "Ok",
        AsEtcd,
    );
    add(
        DELETE_RANGE,
        "range_end equal to key",
        range(b"/shape/z", b"/shape/z"),
        "Ok",
        AsEtcd,
    );

    // KV.Txn.
    let compare = |key: &[u8]| Pb::new().int(1, 0).int(2, 0).bytes(3, key).int(4, 0);
    add(
        TXN,
        "compare with an empty key",
        Pb::new().msg(1, compare(b"")),
        "InvalidArgument",
        AsEtcdOnceFixed("request validation: a compare's key must not be empty"),
    );
    add(
        TXN,
        "compare result 9, target 9 (unknown enum values)",
        Pb::new().msg(1, Pb::new().int(1, 9).int(2, 9).bytes(3, b"/shape/c")),
        "Ok",
        UNKNOWN_ENUM,
    );
    add(
        TXN,
        "compare target VALUE with no value set",
        Pb::new().msg(1, Pb::new().int(2, 3).bytes(3, b"/a-sort/a")),
        "Ok",
        AsEtcd,
    );
    add(
        TXN,
        "compare range_end before key",
        Pb::new().msg(1, compare(b"/z").bytes(64, b"/a")),
        "Ok",
        AsEtcd,
    );
    add(
        TXN,
        "two puts of one key",
        txn_of(vec![op_put(b"/shape/d"), op_put(b"/shape/d")]),
        "InvalidArgument",
        AsEtcd,
    );
    add(
        TXN,
        "a request op with nothing set",
        Pb::new().msg(2, Pb::new()),
        "InvalidArgument",
        AsEtcd,
    );
    add(
        TXN,
        "200 puts (over --max-txn-ops)",
        txn_of(
            (0..200)
                .map(|i| op_put(format!("/shape/ops/{i}").as_bytes()))
                .collect(),
        ),
        "InvalidArgument",
        AsEtcd,
    );
    add(TXN, "txn nested 3 deep", nested_txn(3), "Ok", AsEtcd);
    add(
        TXN,
        "txn nested 120 deep",
        nested_txn(120),
        "Ok",
        Skiff::Differs {
            verdict: "Internal",
            why: "prost refuses messages nested over 100 deep as undecodable (a decode error, allowed); etcd's gogo-protobuf has no depth limit",
        },
    );

    // KV.Compact (in this order: nothing compacted yet).
    add(
        COMPACT,
        "revision i64::MAX (future)",
        Pb::new().int(1, i64::MAX),
        "OutOfRange",
        AsEtcd,
    );
    add(
        COMPACT,
        "revision -1",
        Pb::new().int(1, -1),
        "OutOfRange",
        AsEtcd,
    );
    add(
        COMPACT,
        "revision 1, physical",
        Pb::new().int(1, 1).flag(2, true),
        "Ok",
        AsEtcd,
    );
    add(
        COMPACT,
        "revision 1 again (already compacted)",
        Pb::new().int(1, 1),
        "OutOfRange",
        AsEtcd,
    );

    // Watch.
    let empty_range = "created+canceled `mvcc: watcher range is empty`";
    add(
        WATCH,
        "create: range_end before key, from revision 1",
        Pb::new().msg(1, range(b"/s/z", b"/s/a").int(3, 1)),
        empty_range,
        AsEtcdOnceFixed("watch validation: an empty range is refused in one response"),
    );
    add(
        WATCH,
        "create: range_end equal to key",
        Pb::new().msg(1, range(b"/s/z", b"/s/z")),
        empty_range,
        AsEtcdOnceFixed("watch validation: an empty range is refused in one response"),
    );
    add(
        WATCH,
        "create: empty key, range_end \"\\0\" (everything)",
        Pb::new().msg(1, Pb::new().bytes(2, b"\0")),
        "created",
        AsEtcdOnceFixed("watch validation: an empty key means \"\\0\""),
    );
    add(
        WATCH,
        "create: empty key, no range_end",
        Pb::new().msg(1, Pb::new()),
        "created",
        AsEtcdOnceFixed("watch validation: an empty key means \"\\0\""),
    );
    add(
        WATCH,
        // From revision 1: etcd's first write is revision 2, Skiff's revision 1.
        "create: seed prefix from revision 1 (10 past writes)",
        Pb::new().msg(1, range(SEED_PREFIX.as_bytes(), b"/a-seed0").int(3, 1)),
        "created | 10 events",
        AsEtcdOnceFixed("watch catch-up: the backlog is sent in as few responses as fit"),
    );
    add(
        WATCH,
        "create: start_revision -1 (after a compaction at 1)",
        Pb::new().msg(1, Pb::new().bytes(1, b"/w").int(3, -1)),
        "created | canceled compact_revision set",
        Skiff::Differs {
            verdict: "created",
            why: "Skiff reads a start revision <= 0 as \"from now\", as etcd reads 0; etcd takes a negative one as a past revision, here below the compaction",
        },
    );
    add(
        WATCH,
        "create: start_revision i64::MAX",
        Pb::new().msg(1, Pb::new().bytes(1, b"/w").int(3, i64::MAX)),
        "created",
        AsEtcd,
    );
    add(
        WATCH,
        "create: filter 7 (unknown enum value)",
        Pb::new().msg(1, Pb::new().bytes(1, b"/w").int(5, 7)),
        "created",
        AsEtcd,
    );
    add(
        WATCH,
        "create: watch_id -5",
        Pb::new().msg(1, Pb::new().bytes(1, b"/w").int(7, -5)),
        "created",
        AsEtcd,
    );
    add(
        WATCH,
        "cancel of a watch that does not exist",
        Pb::new().msg(2, Pb::new().int(1, 12345)),
        "no response",
        AsEtcd,
    );
    add(
        WATCH,
        "progress request, no watchers",
        Pb::new().msg(3, Pb::new()),
        "progress",
        AsEtcd,
    );
    add(
        WATCH,
        "create of 3 MiB (over the gRPC limit)",
        Pb::new().msg(1, Pb::new().bytes(1, &vec![b'k'; 3 * MIB])),
        "ended ResourceExhausted",
        AsEtcdOnceFixed("request limits: a message over the limit is a size error"),
    );
    out.push(Shape {
        method: WATCH,
        name: "create twice with watch_id 7".into(),
        bodies: vec![
            watch_create(Pb::new().bytes(1, b"/w").int(7, 7)),
            watch_create(Pb::new().bytes(1, b"/w").int(7, 7)),
        ],
        etcd: "created | created+canceled `mvcc: duplicate watch ID provided on the WatchStream`",
        skiff: AsEtcdOnceFixed("watch validation: a refused create is one response"),
    });

    // Lease.
    let mut add = |method: Method, name: &str, body: Pb, etcd: &'static str, skiff: Skiff| {
        out.push(Shape {
            method,
            name: name.to_string(),
            bodies: vec![body.into_bytes()],
            etcd,
            skiff,
        });
    };
    add(LEASE_GRANT, "TTL -1", Pb::new().int(1, -1), "Ok", AsEtcd);
    add(
        LEASE_GRANT,
        "TTL i64::MAX",
        Pb::new().int(1, i64::MAX),
        "OutOfRange",
        AsEtcd,
    );
    add(
        LEASE_GRANT,
        "ID 77, TTL 60",
        Pb::new().int(1, 60).int(2, 77),
        "Ok",
        AsEtcd,
    );
    add(
        LEASE_GRANT,
        "ID 77 again",
        Pb::new().int(1, 60).int(2, 77),
        "FailedPrecondition",
        AsEtcd,
    );
    add(
        LEASE_GRANT,
        "ID -3",
        Pb::new().int(1, 60).int(2, -3),
        "Ok",
        Skiff::Differs {
            verdict: "InvalidArgument",
            why: "Skiff refuses a negative lease ID (etcd grants it; clients print IDs as unsigned hex)",
        },
    );
    add(
        LEASE_REVOKE,
        "ID not granted",
        Pb::new().int(1, 4242),
        "NotFound",
        AsEtcd,
    );
    add(
        LEASE_KEEP_ALIVE,
        "ID not granted",
        Pb::new().int(1, 4242),
        "ttl=0",
        AsEtcd,
    );
    add(
        LEASE_KEEP_ALIVE,
        "ID 77",
        Pb::new().int(1, 77),
        "ttl>0",
        AsEtcd,
    );
    add(
        LEASE_TIME_TO_LIVE,
        "ID not granted, keys",
        Pb::new().int(1, 4242).flag(2, true),
        "Ok",
        AsEtcd,
    );

    // Maintenance.
    add(
        ALARM,
        "deactivate NOSPACE of member 0",
        Pb::new().int(1, 2).int(3, 1),
        "Ok",
        AsEtcd,
    );
    add(
        ALARM,
        "get, alarm 9 (unknown enum value)",
        Pb::new().int(1, 0).int(3, 9),
        "Ok",
        UNKNOWN_ENUM,
    );
    add(
        HASH_KV,
        "revision i64::MAX",
        Pb::new().int(1, i64::MAX),
        "OutOfRange",
        AsEtcd,
    );
    add(HASH_KV, "revision -1", Pb::new().int(1, -1), "Ok", AsEtcd);
    add(
        MOVE_LEADER,
        "target u64::MAX",
        Pb::new().varint(1, u64::MAX),
        "FailedPrecondition",
        AsEtcd,
    );

    // Auth: the refusals etcd gives with auth disabled (nothing here enables it).
    add(
        AUTHENTICATE,
        "user \"nobody\"",
        Pb::new().bytes(1, b"nobody").bytes(2, b"x"),
        "FailedPrecondition",
        AsEtcd,
    );
    add(
        USER_ADD,
        "empty name",
        Pb::new().bytes(2, b"pw"),
        "InvalidArgument",
        AsEtcd,
    );
    add(
        USER_GET,
        "user \"nobody\"",
        Pb::new().bytes(1, b"nobody"),
        "FailedPrecondition",
        AsEtcd,
    );
    add(
        USER_DELETE,
        "user \"nobody\"",
        Pb::new().bytes(1, b"nobody"),
        "FailedPrecondition",
        AsEtcd,
    );
    add(ROLE_ADD, "empty name", Pb::new(), "InvalidArgument", AsEtcd);
    add(
        ROLE_GET,
        "role \"nobody\"",
        Pb::new().bytes(1, b"nobody"),
        "FailedPrecondition",
        AsEtcd,
    );
    add(
        ROLE_GRANT_PERMISSION,
        "role \"nobody\", permType 9",
        Pb::new()
            .bytes(1, b"nobody")
            .msg(2, Pb::new().int(1, 9).bytes(2, b"/k")),
        "FailedPrecondition",
        AsEtcd,
    );
    // Cluster, last but one: a MemberAdd accepted by mistake changes the quorum for every
    // shape after it.
    let bad_url =
        AsEtcdOnceFixed("membership validation: peer URLs must parse as http(s)://host:port");
    add(
        MEMBER_ADD,
        "peer URL \"not a url\"",
        Pb::new().bytes(1, b"not a url"),
        "InvalidArgument",
        bad_url,
    );
    add(
        MEMBER_ADD,
        "peer URL without a port",
        Pb::new().bytes(1, b"http://127.0.0.1"),
        "InvalidArgument",
        bad_url,
    );
    add(
        MEMBER_ADD,
        "peer URL ftp://",
        Pb::new().bytes(1, b"ftp://127.0.0.1:2380"),
        "InvalidArgument",
        bad_url,
    );
    add(
        MEMBER_ADD,
        "learner, peer URL \"\"",
        Pb::new().bytes(1, b"").flag(2, true),
        "InvalidArgument",
        bad_url,
    );
    add(
        MEMBER_REMOVE,
        "ID u64::MAX",
        Pb::new().varint(1, u64::MAX),
        "NotFound",
        AsEtcd,
    );
    add(
        MEMBER_UPDATE,
        "unknown ID, good URL",
        Pb::new().varint(1, 99).bytes(2, b"http://127.0.0.1:1"),
        "NotFound",
        AsEtcd,
    );
    add(
        MEMBER_UPDATE,
        "unknown ID, bad URL",
        Pb::new().varint(1, 99).bytes(2, b"::"),
        "NotFound",
        AsEtcd,
    );
    add(
        MEMBER_PROMOTE,
        "unknown ID",
        Pb::new().varint(1, 99),
        "NotFound",
        AsEtcd,
    );

    add(
        MEMBER_ADD,
        "only an unknown field (no peer URLs)",
        unknown_field(),
        "InvalidArgument",
        bad_url,
    );
    // Last: etcd 3.4.23 crashes on it (a nil response from the applier, so the member that
    // applied it panics).
    add(
        ALARM,
        "action 9 (unknown enum value)",
        Pb::new().int(1, 9),
        "Unknown",
        Skiff::Differs {
            verdict: "InvalidArgument",
            why: "etcd 3.4.23's applier returns no response for an unknown alarm action and the member panics; Skiff refuses the action",
        },
    );
    out
}

/// etcd's answer to an empty request of each method (with the shapes before it run).
fn empty_answer(m: Method) -> &'static str {
    use methods::*;
    match m {
        RANGE | PUT | DELETE_RANGE => "InvalidArgument",
        TXN | LEASE_GRANT | LEASE_LEASES | MEMBER_LIST | ALARM | STATUS | DEFRAGMENT | HASH
        | HASH_KV | SNAPSHOT => "Ok",
        COMPACT => "Ok",
        WATCH => "no response",
        LEASE_REVOKE => "NotFound",
        LEASE_KEEP_ALIVE => "ttl=0",
        LEASE_TIME_TO_LIVE => "Ok",
        MEMBER_ADD => "InvalidArgument",
        MEMBER_REMOVE | MEMBER_UPDATE | MEMBER_PROMOTE => "NotFound",
        MOVE_LEADER => "FailedPrecondition",
        AUTH_ENABLE => "FailedPrecondition",
        AUTH_DISABLE | USER_LIST | ROLE_LIST => "Ok",
        USER_ADD | ROLE_ADD => "InvalidArgument",
        _ => "FailedPrecondition",
    }
}
