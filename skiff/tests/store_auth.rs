//! etcd's Auth API against a Skiff cluster, as an operator drives it with Debian's etcdctl
//! 3.4 and as programs use it through the `etcd-client` crate: users, roles, key-range
//! permissions, `auth enable/disable` and tokens. (The client certificate's CN as the user is
//! in `store_tls.rs`, whose clusters have certificates.)

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Cluster, eventually};
use etcd_client::{
    Compare, CompareOp, ConnectOptions, GetOptions, Permission, Txn, TxnOp, WatchOptions,
};

/// etcdctl against `endpoints`, with `user` (`name:password`) when given, and `stdin`.
fn etcdctl_with(
    endpoints: &str,
    user: Option<&str>,
    args: &[&str],
    stdin: &[u8],
) -> (bool, String) {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut cmd = Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--command-timeout=10s");
    if let Some(u) = user {
        cmd.arg(format!("--user={u}"));
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("etcdctl is installed");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    common::outcome(child.wait_with_output().expect("etcdctl output"))
}

fn etcdctl(endpoints: &str, user: Option<&str>, args: &[&str]) -> (bool, String) {
    etcdctl_with(endpoints, user, args, b"")
}

fn ok(endpoints: &str, user: Option<&str>, args: &[&str]) -> String {
    let (ok, out) = etcdctl(endpoints, user, args);
    assert!(ok, "etcdctl {args:?} as {user:?} failed:\n{out}");
    out
}

fn refused(endpoints: &str, user: Option<&str>, args: &[&str], why: &str) {
    let (ok, out) = etcdctl(endpoints, user, args);
    assert!(!ok, "etcdctl {args:?} as {user:?} succeeded:\n{out}");
    assert!(
        out.contains(why),
        "etcdctl {args:?} as {user:?}: expected {why:?} in:\n{out}"
    );
}

const ROOT: Option<&str> = Some("root:rootpw");
const ALICE: Option<&str> = Some("alice:alicepw");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_roles_and_key_range_permissions_with_etcdctl() {
    let mut cluster = Cluster::start(3).await;
    let eps = cluster.endpoints();
    let (m0, m1, all) = (eps[0].clone(), eps[1].clone(), eps.join(","));

    // Set-up as etcd's guide has it; `auth enable` adds and grants the root role itself
    // when the server says root lacks it (etcdctl's own recovery).
    ok(&m0, None, &["user", "add", "root:rootpw"]);
    refused(
        &m0,
        None,
        &["user", "add", "root:again"],
        "user name already exists",
    );
    ok(&m0, None, &["put", "/app/config", "v1"]);
    ok(&m0, None, &["put", "/secret/key", "s1"]);
    ok(&m0, None, &["auth", "enable"]);
    // Anonymous requests now need a user; a wrong password is refused.
    refused(&m1, None, &["get", "/app/config"], "user name is empty");
    refused(
        &m1,
        Some("root:wrong"),
        &["get", "/app/config"],
        "authentication failed",
    );
    assert_eq!(
        ok(&m1, ROOT, &["get", "/app/config", "--print-value-only"]),
        "v1\n"
    );

    // alice reads /app/ and writes /app/log/ only.
    ok(&m0, ROOT, &["role", "add", "app"]);
    ok(
        &m0,
        ROOT,
        &[
            "role",
            "grant-permission",
            "app",
            "read",
            "/app/",
            "--prefix=true",
        ],
    );
    ok(
        &m1,
        ROOT,
        &[
            "role",
            "grant-permission",
            "app",
            "readwrite",
            "/app/log/",
            "--prefix=true",
        ],
    );
    ok(&m0, ROOT, &["user", "add", "alice:alicepw"]);
    ok(&m0, ROOT, &["user", "grant-role", "alice", "app"]);
    let role = ok(&all, ROOT, &["role", "get", "app"]);
    assert!(
        role.contains("[/app/, /app0)") && role.contains("[/app/log/, /app/log0)"),
        "{role}"
    );
    assert!(ok(&all, ROOT, &["user", "list"]).contains("alice"));

    assert_eq!(
        ok(&m1, ALICE, &["get", "/app/config", "--print-value-only"]),
        "v1\n"
    );
    ok(&m1, ALICE, &["get", "/app/", "--prefix"]);
    ok(&all, ALICE, &["put", "/app/log/1", "line"]);
    refused(
        &m1,
        ALICE,
        &["put", "/app/config", "v2"],
        "permission denied",
    );
    refused(&m1, ALICE, &["get", "/secret/key"], "permission denied");
    // A range must be covered whole.
    refused(&m1, ALICE, &["get", "/", "--prefix"], "permission denied");
    // Management is root's.
    refused(&m1, ALICE, &["user", "list"], "permission denied");
    refused(&m1, ALICE, &["role", "add", "mine"], "permission denied");
    // A user may read itself.
    assert!(ok(&m1, ALICE, &["user", "get", "alice"]).contains("app"));

    // A transaction needs every key it touches: here the branch that would run is allowed,
    // the other is not.
    let (allowed, out) = etcdctl_with(
        &m1,
        ALICE,
        &["txn"],
        b"value(\"/app/config\") = \"v1\"\n\nput /app/log/2 ok\n\nput /secret/key stolen\n\n",
    );
    assert!(!allowed && out.contains("permission denied"), "{out}");
    assert_eq!(
        ok(&m0, ROOT, &["get", "/secret/key", "--print-value-only"]),
        "s1\n"
    );
    assert_eq!(
        ok(&m0, ROOT, &["get", "/app/log/2"]),
        "",
        "nothing of it ran"
    );

    // Revoked: refused from every member.
    ok(
        &m0,
        ROOT,
        &["role", "revoke-permission", "app", "/app/", "--prefix=true"],
    );
    for ep in &eps {
        eventually(
            Duration::from_secs(5),
            "the revoke applied everywhere",
            || {
                let (ok, out) = etcdctl(ep, ALICE, &["get", "/app/config"]);
                async move { (!ok && out.contains("permission denied")).then_some(()) }
            },
        )
        .await;
    }

    // The auth state is replicated and durable: a restarted member still knows it.
    cluster.kill(2);
    cluster.restart(2);
    let m2 = cluster.members[2].endpoint();
    eventually(
        Duration::from_secs(20),
        "the restarted member serves",
        || {
            let (ok, out) = etcdctl(&m2, ALICE, &["put", "/app/log/3", "x"]);
            async move { ok.then_some(out) }
        },
    )
    .await;
    refused(&m2, ALICE, &["get", "/secret/key"], "permission denied");

    // Deleting the user takes its tokens with it; disabling auth opens the store again.
    ok(&m0, ROOT, &["user", "delete", "alice"]);
    refused(&m1, ALICE, &["get", "/app/log/1"], "authentication failed");
    refused(
        &m0,
        ROOT,
        &["user", "delete", "root"],
        "invalid auth management",
    );
    ok(&m0, ROOT, &["auth", "disable"]);
    assert_eq!(
        ok(&m1, None, &["get", "/secret/key", "--print-value-only"]),
        "s1\n"
    );
}

/// The Rust client authenticates once and its token works on every member, including one
/// that had not yet applied the entry that issued it; a watch on a range the user cannot
/// read is refused, and one it can read gets its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_authenticates_and_watches_what_it_may_read() {
    let cluster = Cluster::start(3).await;
    let admin = cluster.client(0).await;
    let mut a = admin.auth_client();
    a.user_add("root", "rootpw", None).await.expect("add root");
    a.user_grant_role("root", "root").await.expect("grant root");
    a.role_add("watcher").await.expect("role");
    a.role_grant_permission("watcher", Permission::read("/w/").with_prefix())
        .await
        .expect("grant");
    a.user_add("bob", "bobpw", None).await.expect("add bob");
    a.user_grant_role("bob", "watcher")
        .await
        .expect("grant role");
    a.auth_enable().await.expect("enable");
    let status = admin
        .maintenance_client()
        .status()
        .await
        .expect("status needs no user");
    assert!(status.leader() != 0);

    let connect = |user: &'static str, pw: &'static str| {
        let endpoints = cluster.endpoints();
        async move {
            etcd_client::Client::connect(
                endpoints,
                Some(
                    ConnectOptions::new()
                        .with_user(user, pw)
                        .with_timeout(Duration::from_secs(10)),
                ),
            )
            .await
            .expect("connect with a user")
        }
    };
    let mut root = connect("root", "rootpw").await;
    let mut bob = connect("bob", "bobpw").await;
    for i in 0..20 {
        // Spread over the members by the client's balancing.
        root.put(format!("/w/{i}"), "v", None)
            .await
            .expect("root puts");
        let got = bob.get(format!("/w/{i}"), None).await.expect("bob reads");
        assert_eq!(got.kvs().len(), 1);
    }
    let denied = bob
        .put("/w/x", "v", None)
        .await
        .expect_err("bob may not write");
    assert!(denied.to_string().contains("permission denied"), "{denied}");
    let txn = Txn::new()
        .when([Compare::version("/w/1", CompareOp::Greater, 0)])
        .and_then([TxnOp::get("/w/1", None)])
        .or_else([TxnOp::get("/other", None)]);
    let denied = bob.txn(txn).await.expect_err("a txn touching /other");
    assert!(denied.to_string().contains("permission denied"), "{denied}");
    let range = bob
        .get("/w/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("bob reads the prefix");
    assert_eq!(range.kvs().len(), 20);

    // A watch outside bob's range is refused at once.
    let mut refused = bob
        .watch("/other", None)
        .await
        .expect("the watch call itself");
    let first = tokio::time::timeout(Duration::from_secs(5), refused.message())
        .await
        .expect("an answer")
        .expect("a message")
        .expect("a response");
    assert!(first.canceled(), "{first:?}");
    assert!(
        first.cancel_reason().contains("permission denied"),
        "{first:?}"
    );
    // One inside it gets root's writes.
    let mut events = bob
        .watch("/w/", Some(WatchOptions::new().with_prefix()))
        .await
        .expect("watch");
    root.put("/w/new", "1", None).await.expect("put");
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.message().await {
                Ok(Some(r)) if !r.events().is_empty() => return r,
                Ok(Some(_)) => continue,
                other => panic!("the watch ended: {other:?}"),
            }
        }
    })
    .await
    .expect("the event within 10 s");
    assert_eq!(got.events()[0].kv().expect("kv").key(), b"/w/new");
}
