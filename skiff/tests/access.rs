//! Who may do what on a secured member (TLS, client certificates from the cluster's CA,
//! a static token file, RBAC), through every face a client reaches it by: the Kubernetes
//! REST API (curl, kubectl), the gRPC cluster API (Skiff's own client) and the etcd API
//! (etcdctl), with `--authorization-mode Node,RBAC` as `skiff up` runs it. Each row of each table is one identity doing one thing, and the answer
//! kube-apiserver would give it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, run_skiff, skiff_bin};
use skiff_launch::{
    Child, ClientCert, ControllerManagerCommand, Launch, NodeBootstrap, NodeCommand, RuntimeKind,
    ServingCert, SigningCa, StoreCommand, StoreTls,
};
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::{ClusterClient, Code, Informer, ListParams};
use skiff_proto::tls::ClientTls;

/// Who sends a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// `admin`, in `system:masters`.
    Admin,
    Scheduler,
    /// `system:node:n1`, in `system:nodes`.
    Node,
    /// A certificate from the cluster's CA and no role.
    Alice,
    /// A token from the token file, in group `dev`.
    Bob,
    Anonymous,
    BadToken,
    /// A certificate from another CA.
    Stranger,
}

const TOKEN_FILE: &str = "t-bob,bob,1002,\"dev\"\n";

struct Secured {
    dir: tempfile::TempDir,
    api: String,
    client: String,
    _member: Child,
}

impl Secured {
    fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    fn file(&self, who: Who) -> Option<&'static str> {
        match who {
            Who::Admin => Some("admin"),
            Who::Scheduler => Some("system-kube-scheduler"),
            Who::Node => Some("system-node-n1"),
            Who::Alice => Some("alice"),
            _ => None,
        }
    }

    fn cert_dir(&self, who: Who) -> PathBuf {
        if who == Who::Stranger {
            self.dir.path().join("other")
        } else {
            self.certs()
        }
    }

    /// curl as `who`: the HTTP status and the body.
    fn curl(&self, who: Who, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        self.curl_with(who, method, path, body, &[])
    }

    fn curl_with(
        &self,
        who: Who,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[&str],
    ) -> (u16, String) {
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "-S", "--max-time", "10", "-X", method])
            .arg("--cacert")
            .arg(self.certs().join("ca.pem"))
            .args(["-w", "\n%{http_code}"]);
        let file = self.file(who).or((who == Who::Stranger).then_some("admin"));
        if let Some(f) = file {
            let dir = self.cert_dir(who);
            cmd.arg("--cert")
                .arg(dir.join(format!("{f}.pem")))
                .arg("--key")
                .arg(dir.join(format!("{f}-key.pem")));
        }
        match who {
            Who::Bob => {
                cmd.args(["-H", "Authorization: Bearer t-bob"]);
            }
            Who::BadToken => {
                cmd.args(["-H", "Authorization: Bearer nope"]);
            }
            _ => {}
        }
        for h in headers {
            cmd.args(["-H", h]);
        }
        if let Some(b) = body {
            cmd.args(["-H", "Content-Type: application/json", "--data", b]);
        }
        let out = cmd
            .arg(format!("{}{path}", self.api))
            .output()
            .expect("curl is installed (scripts/common.sh installs it)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    }

    /// The admin binds `user` to the ClusterRole `role`: in `namespace` (a RoleBinding
    /// `name`), or everywhere (a ClusterRoleBinding).
    fn bind_role(&self, name: &str, namespace: Option<&str>, role: &str, user: &str) {
        let (kind, metadata, path) = match namespace {
            Some(ns) => (
                "RoleBinding",
                serde_json::json!({"name": name, "namespace": ns}),
                format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
            ),
            None => (
                "ClusterRoleBinding",
                serde_json::json!({"name": name}),
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".to_string(),
            ),
        };
        let binding = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "User", "name": user}]
        })
        .to_string();
        let (code, body) = self.curl(Who::Admin, "POST", &path, Some(&binding));
        assert_eq!(code, 201, "{body}");
    }

    /// The simulated node `n1`'s agent, with its certificate, its port on loopback.
    fn node_n1(&self) -> NodeCommand {
        let certs = self.certs();
        NodeCommand {
            name: Some("n1".into()),
            tls: Some(ClientCert {
                ca: certs.join("ca.pem"),
                cert: certs.join("system-node-n1.pem"),
                key: certs.join("system-node-n1-key.pem"),
            }),
            logs_address: Some("127.0.0.1:0".into()),
            ..NodeCommand::new(RuntimeKind::Sim, vec![self.client.clone()])
        }
    }

    /// What the controller manager makes in `default`, which these tests run without: its
    /// `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap that pods' service
    /// account volumes read.
    fn controller_manager_basics(&self) {
        for (path, body) in [
            (
                "/api/v1/namespaces/default/serviceaccounts",
                r#"{"metadata":{"name":"default"}}"#,
            ),
            (
                "/api/v1/namespaces/default/configmaps",
                r#"{"metadata":{"name":"kube-root-ca.crt"},"data":{"ca.crt":"the CA"}}"#,
            ),
        ] {
            let (code, out) = self.curl(Who::Admin, "POST", path, Some(body));
            assert_eq!(code, 201, "{path}: {out}");
        }
    }

    /// `skiff` as the admin: its command line after `args`, with the endpoint and the TLS
    /// flags.
    fn skiff_as_admin(&self, args: &[&str]) -> (bool, String) {
        let certs = self.certs();
        let file = |f: &str| certs.join(f).to_string_lossy().into_owned();
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend([
            "--endpoints".into(),
            self.client.clone(),
            "--cacert".into(),
            file("ca.pem"),
            "--cert".into(),
            file("admin.pem"),
            "--key".into(),
            file("admin-key.pem"),
        ]);
        run_skiff(&all)
    }

    /// kubectl as the admin, with the admin's certificate and no kubeconfig.
    fn kubectl_as_admin(&self, args: &[&str]) -> (bool, String) {
        let certs = self.certs();
        let out = Command::new("kubectl")
            .arg(format!("--server={}", self.api))
            .arg(format!(
                "--certificate-authority={}",
                certs.join("ca.pem").display()
            ))
            .arg(format!(
                "--client-certificate={}",
                certs.join("admin.pem").display()
            ))
            .arg(format!(
                "--client-key={}",
                certs.join("admin-key.pem").display()
            ))
            .args(args)
            .env("KUBECONFIG", self.dir.path().join("none"))
            .output()
            .expect("kubectl");
        common::outcome(out)
    }

    /// The cluster API as `who` (a certificate, or none: anonymous).
    fn grpc(&self, who: Who) -> ClusterClient {
        let tls = match self.file(who) {
            Some(f) => ClientTls::in_dir(&self.certs(), f),
            None => ClientTls {
                ca: self.certs().join("ca.pem"),
                cert: None,
                key: None,
            },
        };
        ClusterClient::connect_with(std::slice::from_ref(&self.client), Some(&tls)).expect("client")
    }

    /// The audit log's events, once one of them is `until` (or after 10 s, whatever is
    /// there: the writer is a task of its own).
    async fn audit_events(
        &self,
        until: impl Fn(&serde_json::Value) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text =
                std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
            let events: Vec<serde_json::Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
                .collect();
            if events.iter().any(&until) || Instant::now() > deadline {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn etcdctl(&self, who: Who, args: &[&str]) -> (bool, String) {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.client))
            .args(["--command-timeout=5s", "--dial-timeout=2s"])
            .arg(format!(
                "--cacert={}",
                self.certs().join("ca.pem").display()
            ));
        if let Some(f) = self.file(who) {
            cmd.arg(format!(
                "--cert={}",
                self.certs().join(format!("{f}.pem")).display()
            ))
            .arg(format!(
                "--key={}",
                self.certs().join(format!("{f}-key.pem")).display()
            ));
        }
        common::outcome(cmd.args(args).output().expect("etcdctl is installed"))
    }
}

fn make_certs(dir: &Path, clients: &[&str]) {
    let mut args = vec![
        "certs",
        "--dir",
        dir.to_str().expect("utf8"),
        "--member",
        "m0",
    ];
    for c in clients {
        args.extend(["--client", c]);
    }
    let (ok, out) = run_skiff(&args);
    assert!(ok, "skiff certs: {out}");
}

/// One member with everything on: https client, peer and API URLs, client certificates
/// from its CA naming Kubernetes users, the token file, RBAC. Waits until the bootstrap
/// roles are in place.
async fn secured() -> Secured {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    make_certs(
        &certs,
        &[
            "admin/system:masters",
            "system:kube-scheduler",
            "system:node:n1/system:nodes",
            "system:node:n2/system:nodes",
            "alice",
            "kube-apiserver-kubelet-client",
            "system:kube-controller-manager",
        ],
    );
    // The node agents' serving certificate (a member's: serving and dialling, 127.0.0.1).
    let (ok, out) = run_skiff(&[
        "certs",
        "--dir",
        certs.to_str().expect("utf8"),
        "--member",
        "agents",
    ]);
    assert!(ok, "skiff certs: {out}");
    make_certs(&dir.path().join("other"), &["admin/system:masters"]);
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKEN_FILE).expect("token file");
    let service_account_key = certs.join("service-account-key.pem");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    std::fs::write(&service_account_key, key.serialize_pem()).expect("key file");
    let (client, peer, api) = (free_port(), free_port(), free_port());
    let store = StoreCommand {
        name: "m0".into(),
        data_dir: dir.path().join("m0"),
        listen_client_url: format!("https://127.0.0.1:{client}"),
        listen_peer_url: format!("https://127.0.0.1:{peer}"),
        apiserver: true,
        listen_api_url: Some(format!("https://127.0.0.1:{api}")),
        initial_cluster: vec![("m0".into(), format!("https://127.0.0.1:{peer}"))],
        tls: Some(StoreTls {
            cert: certs.join("m0.pem"),
            key: certs.join("m0-key.pem"),
            ca: certs.join("ca.pem"),
        }),
        rbac: true,
        token_auth_file: Some(tokens),
        bootstrap_tokens: true,
        audit_log: Some(dir.path().join("audit.log")),
        kubelet: Some(ClientCert {
            ca: certs.join("ca.pem"),
            cert: certs.join("kube-apiserver-kubelet-client.pem"),
            key: certs.join("kube-apiserver-kubelet-client-key.pem"),
        }),
        service_account_key: Some(service_account_key),
        ..StoreCommand::default()
    };
    let member = Launch::new("m0", skiff_bin(), dir.path().join("m0.log"))
        .args(store.args())
        .spawn()
        .expect("spawn skiff store")
        .tail_on_panic(40);
    let s = Secured {
        api: format!("https://127.0.0.1:{api}"),
        client: format!("127.0.0.1:{client}"),
        dir,
        _member: member,
    };
    let admin = s.grpc(Who::Admin);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The last bootstrap binding: the others were created before it.
        if let Ok(Some(_)) = admin
            .get(Kind::ClusterRoleBinding, "", "system:kubelet-api-admin")
            .await
        {
            break;
        }
        assert!(Instant::now() < deadline, "no bootstrap roles within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s
}

/// Service account tokens: a TokenRequest (JSON, and `kubectl create token`'s protobuf)
/// gets a token that authenticates as the account, authorized by what it is bound to, and
/// no longer once the account is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_authenticate_their_accounts() {
    use Who::*;
    let s = secured().await;
    let sa = r#"{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"ci"}}"#;
    let (code, body) = s.curl(
        Admin,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        Some(sa),
    );
    assert_eq!(code, 201, "{body}");
    let request = |spec: &str| {
        format!(
            r#"{{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{spec}}}"#
        )
    };
    let path = "/api/v1/namespaces/default/serviceaccounts/ci/token";
    let (code, body) = s.curl(Admin, "POST", path, Some(&request("{}")));
    assert_eq!(code, 201, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["spec"]["expirationSeconds"], 3600);
    assert!(
        answer["status"]["expirationTimestamp"].is_string(),
        "{answer}"
    );
    let token = answer["status"]["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let bearer = format!("Authorization: Bearer {token}");
    let pods = "/api/v1/namespaces/default/pods";
    let (code, body) = s.curl_with(Anonymous, "GET", pods, None, &[&bearer]);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"User \"system:serviceaccount:default:ci\" cannot list"#),
        "{body}"
    );

    let binding = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding",
        "metadata":{"name":"ci-view","namespace":"default"},
        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
        "subjects":[{"kind":"ServiceAccount","name":"ci","namespace":"default"}]}"#;
    let (code, body) = s.curl(
        Admin,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        Some(binding),
    );
    assert_eq!(code, 201, "{body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = s.curl_with(Anonymous, "GET", pods, None, &[&bearer]);
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {code} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, _) = s.curl_with(
        Anonymous,
        "GET",
        "/api/v1/namespaces/kube-system/pods",
        None,
        &[&bearer],
    );
    assert_eq!(code, 403, "the binding is for its namespace only");

    // Requests kube-apiserver refuses.
    let (code, body) = s.curl(
        Admin,
        "POST",
        path,
        Some(&request(r#"{"expirationSeconds":60}"#)),
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("spec.expirationSeconds"), "{body}");
    let bound = r#"{"boundObjectRef":{"kind":"Pod","apiVersion":"v1","name":"absent"}}"#;
    let (code, body) = s.curl(Admin, "POST", path, Some(&request(bound)));
    assert_eq!(code, 404, "{body}");
    let (code, body) = s.curl(
        Admin,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/nobody/token",
        Some(&request("{}")),
    );
    assert_eq!(code, 404, "{body}");
    // A token for another audience is not the API's.
    let (code, body) = s.curl(
        Admin,
        "POST",
        path,
        Some(&request(r#"{"audiences":["vault"]}"#)),
    );
    assert_eq!(code, 201, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    let other = format!(
        "Authorization: Bearer {}",
        answer["status"]["token"].as_str().expect("token")
    );
    let (code, _) = s.curl_with(Anonymous, "GET", pods, None, &[&other]);
    assert_eq!(code, 401);

    if kubectl_on_path() {
        let (ok, out) = s.kubectl_as_admin(&["create", "token", "ci", "-n", "default"]);
        assert!(ok, "kubectl create token: {out}");
        let from_kubectl = format!("Authorization: Bearer {}", out.trim());
        let (code, body) = s.curl_with(Anonymous, "GET", pods, None, &[&from_kubectl]);
        assert_eq!(code, 200, "{body}");
    }

    // The account gone, its tokens name no one.
    let (code, body) = s.curl(
        Admin,
        "DELETE",
        "/api/v1/namespaces/default/serviceaccounts/ci",
        None,
    );
    assert_eq!(code, 200, "{body}");
    let (code, _) = s.curl_with(Anonymous, "GET", pods, None, &[&bearer]);
    assert_eq!(code, 401);
}

/// The Kubernetes REST API, identity by identity: kube-apiserver's codes (401 for wrong
/// credentials, 403 for a user the roles do not allow) and its wording.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_requests_are_authenticated_and_authorized() {
    use Who::*;
    let s = secured().await;
    let ns = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"dev"}}"#;
    #[rustfmt::skip]
    let table: &[(Who, &str, &str, Option<&str>, u16)] = &[
        (Admin, "GET", "/api/v1/namespaces/default/pods", None, 200),
        (Scheduler, "GET", "/api/v1/namespaces/default/pods", None, 200),
        // A node lists the pods bound to it, and only through the selector that says so.
        (Node, "GET", "/api/v1/namespaces/default/pods", None, 403),
        (Node, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", None, 200),
        (Node, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2", None, 403),
        // Every Node may be read (the agent routes to every node's pod network); only its
        // own written.
        (Node, "GET", "/api/v1/nodes", None, 200),
        (Node, "GET", "/api/v1/nodes/n1", None, 404),
        (Node, "GET", "/api/v1/nodes/n2", None, 404),
        (Node, "DELETE", "/api/v1/nodes/n2", None, 403),
        (Alice, "GET", "/api/v1/namespaces/default/pods", None, 403),
        (Bob, "GET", "/api/v1/namespaces/default/pods", None, 403),
        (Anonymous, "GET", "/api/v1/namespaces/default/pods", None, 403),
        (BadToken, "GET", "/api/v1/namespaces/default/pods", None, 401),
        (Scheduler, "GET", "/api/v1/nodes", None, 200),
        (Alice, "GET", "/api/v1/nodes", None, 403),
        (Scheduler, "POST", "/api/v1/namespaces", Some(ns), 403),
        (Node, "POST", "/api/v1/namespaces", Some(ns), 403),
        (Admin, "POST", "/api/v1/namespaces", Some(ns), 201),
        (Alice, "DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin", None, 403),
        // Health and version for everyone; discovery for the authenticated only.
        (Anonymous, "GET", "/healthz", None, 200),
        (Anonymous, "GET", "/version", None, 200),
        (Anonymous, "GET", "/api", None, 403),
        (Alice, "GET", "/api", None, 200),
        (Bob, "GET", "/apis", None, 200),
        (BadToken, "GET", "/healthz", None, 401),
    ];
    for (who, method, path, body, want) in table {
        let (code, text) = s.curl(*who, method, path, *body);
        assert_eq!(code, *want, "{who:?} {method} {path}: {text}");
    }
    // A certificate from another CA, or one of ours that has expired, does not get as far
    // as a request.
    let (code, _) = s.curl(Stranger, "GET", "/healthz", None);
    assert_eq!(code, 0, "a certificate from another CA was accepted");
    expired_certificate(&s.certs(), "expired");
    let mut cmd = Command::new("curl");
    let out = cmd
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .arg("--cacert")
        .arg(s.certs().join("ca.pem"))
        .arg("--cert")
        .arg(s.certs().join("expired.pem"))
        .arg("--key")
        .arg(s.certs().join("expired-key.pem"))
        .arg(format!("{}/healthz", s.api))
        .output()
        .expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "000",
        "an expired certificate was accepted"
    );

    // The refusal reads as kube-apiserver's.
    let (_, text) = s.curl(Alice, "GET", "/api/v1/namespaces/default/pods/web", None);
    let status: serde_json::Value = serde_json::from_str(&text).expect("a Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "pods \"web\" is forbidden: User \"alice\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let (_, text) = s.curl(BadToken, "GET", "/api", None);
    assert!(text.contains("\"reason\":\"Unauthorized\""), "{text}");

    // A RoleBinding lets bob (by his group) read pods in dev, and nothing more.
    let binding = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding",
        "metadata":{"name":"dev-view","namespace":"dev"},
        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
        "subjects":[{"kind":"Group","name":"dev"}]}"#;
    let (code, text) = s.curl(
        Admin,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/dev/rolebindings",
        Some(binding),
    );
    assert_eq!(code, 201, "{text}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.curl(Bob, "GET", "/api/v1/namespaces/dev/pods", None).0 != 200 {
        assert!(Instant::now() < deadline, "the binding never took effect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
        "spec":{"containers":[{"name":"c","image":"busybox"}]}}"#;
    #[rustfmt::skip]
    let after: &[(Who, &str, &str, Option<&str>, u16)] = &[
        (Bob, "POST", "/api/v1/namespaces/dev/pods", Some(pod), 403),
        (Bob, "GET", "/api/v1/namespaces/default/pods", None, 403),
        (Alice, "GET", "/api/v1/namespaces/dev/pods", None, 403),
    ];
    for (who, method, path, body, want) in after {
        let (code, text) = s.curl(*who, method, path, *body);
        assert_eq!(code, *want, "{who:?} {method} {path}: {text}");
    }

    // Impersonation needs the impersonate verb: the admin may act as bob (and is then
    // refused what bob is refused); bob may not act as the admin.
    let as_bob = ["Impersonate-User: bob", "Impersonate-Group: dev"];
    let (code, _) = s.curl_with(Admin, "GET", "/api/v1/namespaces/dev/pods", None, &as_bob);
    assert_eq!(code, 200);
    let (code, text) = s.curl_with(
        Admin,
        "GET",
        "/api/v1/namespaces/default/pods",
        None,
        &as_bob,
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("User \\\"bob\\\""), "{text}");
    let (code, text) = s.curl_with(
        Bob,
        "GET",
        "/api/v1/namespaces/default/pods",
        None,
        &["Impersonate-User: admin"],
    );
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains("cannot impersonate resource \\\"users\\\""),
        "{text}"
    );

    // An access review answers what the request itself would get.
    let review = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview",
        "spec":{"resourceAttributes":{"namespace":"dev","verb":"list","resource":"pods"}}}"#;
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let (code, text) = s.curl(Bob, "POST", path, Some(review));
    assert_eq!(code, 201, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).expect("a review");
    assert_eq!(answer["status"]["allowed"], true, "{text}");
    let (_, text) = s.curl(Alice, "POST", path, Some(review));
    let answer: serde_json::Value = serde_json::from_str(&text).expect("a review");
    assert_eq!(answer["status"]["allowed"], false, "{text}");

    // PodSecurity: a namespace labelled restricted takes hardened pods only, saying why.
    let restricted = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"locked",
        "labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}"#;
    let (code, text) = s.curl(Admin, "POST", "/api/v1/namespaces", Some(restricted));
    assert_eq!(code, 201, "{text}");
    let (code, text) = s.curl(Admin, "POST", "/api/v1/namespaces/locked/pods", Some(pod));
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains(
            "violates PodSecurity \\\"restricted:latest\\\": allowPrivilegeEscalation != false"
        ),
        "{text}"
    );
    let hardened = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"h"},
        "spec":{"securityContext":{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}},
        "containers":[{"name":"c","image":"busybox","securityContext":{
            "allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}}"#;
    let (code, text) = s.curl(
        Admin,
        "POST",
        "/api/v1/namespaces/locked/pods",
        Some(hardened),
    );
    assert_eq!(code, 201, "{text}");
    let typo = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"typo",
        "labels":{"pod-security.kubernetes.io/enforce":"strict"}}}"#;
    let (code, text) = s.curl(Admin, "POST", "/api/v1/namespaces", Some(typo));
    assert_eq!(code, 422, "{text}");

    // The audit log: every request, refused or not, as kube-apiserver's events.
    let events = s.audit_events(|e| e["requestURI"] == path).await;
    let find = |user: &str, uri: &str| {
        events
            .iter()
            .find(|e| e["user"]["username"] == user && e["requestURI"] == uri)
            .unwrap_or_else(|| panic!("no event of {user} {uri} in {events:#?}"))
    };
    let forbidden = find("alice", "/api/v1/namespaces/default/pods/web");
    assert_eq!(forbidden["kind"], "Event");
    assert_eq!(forbidden["verb"], "get");
    assert_eq!(forbidden["responseStatus"]["code"], 403);
    assert_eq!(
        forbidden["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert_eq!(
        forbidden["objectRef"],
        serde_json::json!({"resource": "pods", "namespace": "default", "name": "web", "apiVersion": "v1"})
    );
    let created = find("admin", "/api/v1/namespaces");
    assert_eq!(created["verb"], "create");
    assert_eq!(created["responseStatus"]["code"], 201);
    assert_eq!(
        created["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert_eq!(created["level"], "Metadata");
    let acting = events
        .iter()
        .find(|e| e["impersonatedUser"]["username"] == "bob")
        .expect("the admin acting as bob");
    assert_eq!(acting["user"]["username"], "admin");
    let unknown = find("", "/api");
    assert_eq!(unknown["responseStatus"]["code"], 401);
    assert!(unknown.get("annotations").is_none(), "{unknown}");
    assert!(forbidden["sourceIPs"][0] == "127.0.0.1", "{forbidden}");

    // kubectl, as a user would run it.
    if kubectl_on_path() {
        let kubectl = |args: &[&str]| {
            let out = Command::new("kubectl")
                .arg(format!("--server={}", s.api))
                .arg(format!(
                    "--certificate-authority={}",
                    s.certs().join("ca.pem").display()
                ))
                .arg("--token=t-bob")
                .args(args)
                .env("KUBECONFIG", s.dir.path().join("none"))
                .output()
                .expect("kubectl");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        assert_eq!(
            kubectl(&["auth", "can-i", "list", "pods", "-n", "dev"]),
            "yes"
        );
        assert_eq!(
            kubectl(&["auth", "can-i", "create", "pods", "-n", "dev"]),
            "no"
        );
        assert_eq!(
            kubectl(&["auth", "can-i", "list", "pods", "-n", "default"]),
            "no"
        );
    } else {
        eprintln!("kubectl auth can-i not checked: kubectl is not on PATH");
    }
}

/// The gRPC cluster API and the etcd API answer to the same rules: the scheduler binds, a
/// node may not create workloads, no certificate is anonymous, and under RBAC the etcd
/// keyspace is the cluster-admin's (and the leader-elected components' for their keys).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_etcd_requests_are_authorized() {
    let s = secured().await;
    let admin = s.grpc(Who::Admin);
    let node: Object = serde_json::from_value::<skiff_proto::api::Node>(serde_json::json!({
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}
    }))
    .map(Object::Node)
    .expect("node");
    admin.create(&node).await.expect("admin creates a node");
    let pod: Object = serde_json::from_value::<skiff_proto::api::Pod>(serde_json::json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .map(Object::Pod)
    .expect("pod");
    admin.create(&pod).await.expect("admin creates a pod");

    let scheduler = s.grpc(Who::Scheduler);
    let results = scheduler
        .bind(vec![skiff_proto::cluster::v1::Binding {
            namespace: "default".into(),
            pod: "p".into(),
            node: "n1".into(),
            pod_resource_version: 0,
        }])
        .await
        .expect("the scheduler binds");
    let bound = skiff_proto::cluster::v1::bind_result::Outcome::Bound as i32;
    assert!(results.iter().all(|r| r.outcome == bound), "{results:?}");
    let denied = scheduler
        .list(Kind::Deployment, &ListParams::default())
        .await
        .expect_err("the scheduler does not read deployments");
    assert_eq!(denied.code(), Some(Code::PermissionDenied), "{denied:?}");

    // A second pod, bound to another node.
    let theirs: Object = serde_json::from_value::<skiff_proto::api::Pod>(serde_json::json!({
        "metadata": {"name": "q", "namespace": "default"},
        "spec": {"nodeName": "n2", "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .map(Object::Pod)
    .expect("pod");
    admin
        .create(&theirs)
        .await
        .expect("admin creates a pod on n2");

    let agent = s.grpc(Who::Node);
    let deployment: Object =
        serde_json::from_value::<skiff_proto::api::Deployment>(serde_json::json!({
            "metadata": {"name": "d", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            }
        }))
        .map(Object::Deployment)
        .expect("deployment");
    let denied = agent
        .create(&deployment)
        .await
        .expect_err("a node creates no deployment");
    assert_eq!(denied.code(), Some(Code::PermissionDenied), "{denied:?}");
    assert!(
        denied.to_string().contains(
            "User \"system:node:n1\" cannot create resource \"deployments\" in API group \"apps\""
        ),
        "{denied}"
    );
    // The node authorizer: n1 reads and writes its own pods and Node only, and lists pods
    // only through the selector that names it (a stolen certificate reads no more).
    let denied = agent
        .list(Kind::Pod, &ListParams::default())
        .await
        .expect_err("a node lists only its own pods");
    assert_eq!(denied.code(), Some(Code::PermissionDenied), "{denied:?}");
    let denied = agent
        .list(Kind::Pod, &ListParams::default().fields("spec.nodeName=n2"))
        .await
        .expect_err("nor another node's");
    assert_eq!(denied.code(), Some(Code::PermissionDenied), "{denied:?}");
    let (pods, _) = agent
        .list(Kind::Pod, &ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("a node lists its pods");
    assert_eq!(pods.len(), 1);
    let Some(Object::Pod(mut mine)) = agent.get(Kind::Pod, "default", "p").await.expect("get")
    else {
        panic!("the bound pod");
    };
    let denied = agent
        .get(Kind::Pod, "default", "q")
        .await
        .expect_err("another node's pod");
    assert_eq!(denied.code(), Some(Code::PermissionDenied), "{denied:?}");
    mine.status.get_or_insert_with(Default::default).message = "running".into();
    agent
        .update_status(&Object::Pod(mine))
        .await
        .expect("a node writes its pod's status");
    let Some(Object::Pod(mut other)) = admin.get(Kind::Pod, "default", "q").await.expect("get")
    else {
        panic!("the other pod");
    };
    other.status.get_or_insert_with(Default::default).message = "hijacked".into();
    let denied = agent
        .update_status(&Object::Pod(other))
        .await
        .expect_err("not another node's pod's status");
    assert_eq!(denied.code(), Some(Code::PermissionDenied), "{denied:?}");

    // NodeRestriction: its own Node, but not its restricted labels or its taints.
    let Some(Object::Node(mut own)) = agent.get(Kind::Node, "", "n1").await.expect("own node")
    else {
        panic!("node n1");
    };
    own.metadata
        .labels
        .insert("node-restriction.kubernetes.io/pci".into(), "yes".into());
    let refused = agent
        .update(&Object::Node(own))
        .await
        .expect_err("a node labels itself into a restricted group");
    assert!(
        refused
            .to_string()
            .contains("node-restriction.kubernetes.io/"),
        "{refused}"
    );
    let other_node: Object = serde_json::from_value::<skiff_proto::api::Node>(
        serde_json::json!({"metadata": {"name": "n3"}}),
    )
    .map(Object::Node)
    .expect("node");
    let refused = agent
        .create(&other_node)
        .await
        .expect_err("a node registers only itself");
    assert!(
        refused
            .to_string()
            .contains("not allowed to modify node \"n3\""),
        "{refused}"
    );

    // The client port requires a certificate (as etcd's under --client-cert-auth): without
    // one there is no connection to make a request on.
    let anonymous = s.grpc(Who::Anonymous);
    let refused = anonymous
        .list(Kind::Pod, &ListParams::default())
        .await
        .expect_err("anonymous reads nothing");
    assert_ne!(refused.code(), Some(Code::Ok), "{refused:?}");

    // The cluster API's calls are in the audit log too, when they have ended.
    let events = s
        .audit_events(|e| {
            e["user"]["username"] == "system:node:n1" && e["responseStatus"]["code"] == 403
        })
        .await;
    let bind = events
        .iter()
        .find(|e| e["requestURI"] == "/skiff.cluster.v1.Cluster/Bind")
        .unwrap_or_else(|| panic!("no Bind in {events:#?}"));
    assert_eq!(bind["user"]["username"], "system:kube-scheduler");
    assert_eq!(bind["verb"], "create");
    assert_eq!(bind["objectRef"]["subresource"], "binding");
    assert_eq!(bind["responseStatus"]["code"], 200);
    assert_eq!(
        bind["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    let refused = events
        .iter()
        .find(|e| {
            e["user"]["username"] == "system:node:n1"
                && e["verb"] == "list"
                && e["annotations"]["authorization.k8s.io/decision"] == "forbid"
        })
        .unwrap_or_else(|| panic!("no refused list of n1 in {events:#?}"));
    assert_eq!(refused["responseStatus"]["code"], 403);
    assert_eq!(refused["requestURI"], "/skiff.cluster.v1.Cluster/List");

    // A component that starts before its binding has reached the member waits for it, as
    // client-go's reflector does, instead of ending: alice's informer is refused until a
    // binding lets her read pods, then fills its cache.
    let mut informer = Informer::new(s.grpc(Who::Alice), Kind::Pod, ListParams::default());
    let sync = tokio::spawn(async move { informer.sync().await.map(|_| informer) });
    let events = s
        .audit_events(|e| {
            e["user"]["username"] == "alice"
                && e["requestURI"] == "/skiff.cluster.v1.Cluster/List"
                && e["responseStatus"]["code"] == 403
        })
        .await;
    assert!(
        events.iter().any(|e| e["user"]["username"] == "alice"),
        "alice's list was not refused: {events:#?}"
    );
    assert!(!sync.is_finished(), "alice's informer ended on a refusal");
    s.bind_role("alice-views", None, "view", "alice");
    let informer = tokio::time::timeout(Duration::from_secs(30), sync)
        .await
        .expect("alice's informer synced within 30 s of her binding")
        .expect("the task")
        .expect("alice lists pods");
    assert!(
        informer.cache().keys().any(|k| k.ends_with("/p")),
        "{:?}",
        informer.cache().keys()
    );

    let (ok, out) = s.etcdctl(Who::Admin, &["put", "/x", "1"]);
    assert!(ok, "{out}");
    let (ok, out) = s.etcdctl(Who::Node, &["get", "--prefix", "/registry/"]);
    assert!(!ok && out.contains("PermissionDenied"), "{out}");
    assert!(out.contains("/etcdserverpb.KV/Range"), "{out}");
    let (ok, out) = s.etcdctl(Who::Alice, &["put", "/x", "2"]);
    assert!(!ok && out.contains("PermissionDenied"), "{out}");
    let (ok, out) = s.etcdctl(Who::Scheduler, &["lease", "grant", "10"]);
    assert!(
        ok,
        "the scheduler holds its leadership through a lease: {out}"
    );
}

/// The node agent's port (logs, exec, attach) serves TLS and takes only certificates from
/// the cluster's CA, and asks the API whether each caller may: the members (through
/// `kubectl logs` and `kubectl exec`) and the admin may, a user without a role and another
/// node may not. Without TLS the agent serves loopback only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_port_takes_certificates_and_asks_the_api() {
    use skiff_proto::logs::connect_agent;
    use skiff_proto::node::v1 as pb;

    let s = secured().await;
    let certs = s.certs();
    let node = NodeCommand {
        serving: Some(ServingCert {
            cert: certs.join("agents.pem"),
            key: certs.join("agents-key.pem"),
            client_ca: certs.join("ca.pem"),
        }),
        ..s.node_n1()
    };
    let _agent = Launch::new("agent n1", skiff_bin(), s.dir.path().join("agent.log"))
        .args(node.args())
        .spawn()
        .expect("spawn skiff node")
        .tail_on_panic(40);
    s.controller_manager_basics();
    let admin = s.grpc(Who::Admin);
    let pod: Object = serde_json::from_value::<skiff_proto::api::Pod>(serde_json::json!({
        "metadata": {"name": "talker", "namespace": "default"},
        "spec": {"nodeName": "n1", "containers": [{
            "name": "c", "image": "busybox",
            "command": ["sh", "-c", "echo from n1; sleep 3600"]
        }]}
    }))
    .map(Object::Pod)
    .expect("pod");
    admin.create(&pod).await.expect("admin creates a pod on n1");
    let endpoint = common::eventually(Duration::from_secs(30), "the pod running", || async {
        let Ok(Some(Object::Pod(p))) = admin.get(Kind::Pod, "default", "talker").await else {
            return None;
        };
        let running = p.status.and_then(|st| st.phase) == Some(skiff_proto::api::PodPhase::Running);
        let Ok(Some(Object::Node(n))) = admin.get(Kind::Node, "", "n1").await else {
            return None;
        };
        let endpoint = n
            .metadata
            .annotations
            .get(skiff_proto::logs::ENDPOINT_ANNOTATION)
            .cloned()?;
        running.then_some(endpoint)
    })
    .await;
    assert!(endpoint.starts_with("https://127.0.0.1:"), "{endpoint}");

    // Through the API: the member presents its kubelet client certificate.
    let (code, body) = s.curl(
        Who::Admin,
        "GET",
        "/api/v1/namespaces/default/pods/talker/log",
        None,
    );
    assert_eq!((code, body.as_str()), (200, "from n1\n"));
    let (code, _) = s.curl(
        Who::Alice,
        "GET",
        "/api/v1/namespaces/default/pods/talker/log",
        None,
    );
    assert_eq!(code, 403, "alice may not read logs through the API");

    // Straight to the agent's port, as each identity.
    let ca = certs.join("ca.pem");
    let read_log = |file: Option<&'static str>, dir: PathBuf| {
        let (endpoint, ca) = (endpoint.clone(), ca.clone());
        async move {
            let tls = ClientTls {
                ca,
                cert: file.map(|f| dir.join(format!("{f}.pem"))),
                key: file.map(|f| dir.join(format!("{f}-key.pem"))),
            }
            .config()
            .expect("TLS files");
            let channel = connect_agent(&endpoint, Some(&tls), Duration::from_secs(5)).await?;
            pb::logs_client::LogsClient::new(channel)
                .container_log(pb::ContainerLogRequest {
                    node: "n1".into(),
                    namespace: "default".into(),
                    pod: "talker".into(),
                    ..Default::default()
                })
                .await
                .map(|r| skiff_proto::logs::text_of(&r.into_inner().data))
                .map_err(|st| format!("{:?}: {}", st.code(), st.message()))
        }
    };
    assert_eq!(
        read_log(Some("admin"), certs.clone()).await.as_deref(),
        Ok("from n1\n")
    );
    let alice = read_log(Some("alice"), certs.clone())
        .await
        .expect_err("alice has no role");
    assert!(
        alice.starts_with("PermissionDenied")
            && alice.contains("\"alice\" cannot get resource \"pods/log\""),
        "{alice}"
    );
    let neighbour = read_log(Some("system-node-n2"), certs.clone())
        .await
        .expect_err("node n2 may not read n1's pods");
    assert!(neighbour.starts_with("PermissionDenied"), "{neighbour}");
    // No certificate, or one from another CA: the handshake fails.
    let err = read_log(None, certs.clone())
        .await
        .expect_err("no certificate");
    assert!(!err.starts_with("Ok"), "{err}");
    read_log(Some("admin"), s.dir.path().join("other"))
        .await
        .expect_err("a certificate from another CA");

    // `skiff logs` reaches the agent itself, with the admin's certificate.
    let (ok, out) = s.skiff_as_admin(&["logs", "talker"]);
    assert!(ok && out.contains("from n1"), "skiff logs: {out}");

    // kubectl exec: the member opens the session with its kubelet client certificate.
    if kubectl_on_path() {
        let (ok, text) = s.kubectl_as_admin(&["exec", "talker", "--", "echo", "through the agent"]);
        assert!(
            ok && text.contains("through the agent"),
            "kubectl exec: {text}"
        );
    } else {
        eprintln!("kubectl exec not checked: kubectl is not on PATH");
    }

    // Plain TCP beyond loopback is refused at start.
    let plain = NodeCommand {
        name: Some("n3".into()),
        logs_address: Some("0.0.0.0:0".into()),
        ..NodeCommand::new(RuntimeKind::Sim, vec![s.client.clone()])
    };
    let (ok, out) = run_skiff(&plain.args());
    assert!(
        !ok && out.contains("would serve anyone on the network"),
        "skiff node: {out}"
    );
}

/// Bootstrap tokens: `skiff token create` keeps one as a Secret in kube-system; it
/// authenticates as `system:bootstrap:<id>` in `system:bootstrappers` (and is then authorized
/// like any user), until it expires; a wrong secret or an expired token is 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_tokens_authenticate_joining_nodes() {
    let s = secured().await;
    let (ok, out) = s.skiff_as_admin(&[
        "token",
        "create",
        "--ttl",
        "1h",
        "--description",
        "for node n9",
    ]);
    assert!(ok, "skiff token create: {out}");
    let token = out.trim().to_owned();
    let (id, secret) = token.split_once('.').expect("id.secret");
    assert_eq!((id.len(), secret.len()), (6, 16), "{token}");

    let as_token = |t: &str| {
        let header = format!("Authorization: Bearer {t}");
        s.curl_with(
            Who::Anonymous,
            "GET",
            "/api/v1/namespaces/default/pods",
            None,
            &[header.as_str()],
        )
    };
    let (code, body) = as_token(&token);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!("User \\\"system:bootstrap:{id}\\\" cannot list")),
        "{body}"
    );
    let (code, body) = as_token(&format!("{id}.0000000000000000"));
    assert_eq!(code, 401, "a wrong secret: {body}");

    // The Secret, as kubectl shows it to an admin.
    let (code, body) = s.curl(
        Who::Admin,
        "GET",
        &format!("/api/v1/namespaces/kube-system/secrets/bootstrap-token-{id}"),
        None,
    );
    assert_eq!(code, 200, "{body}");
    let secret_json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(secret_json["type"], "bootstrap.kubernetes.io/token");
    assert!(secret_json["data"]["expiration"].is_string(), "{body}");
    // A user with `view` reads pods but not Secrets (as in Kubernetes); `edit` reads them.
    for (name, role) in [("bob-view", "view"), ("alice-edit", "edit")] {
        let user = if role == "view" { "bob" } else { "alice" };
        s.bind_role(name, Some("kube-system"), role, user);
    }
    let pods = "/api/v1/namespaces/kube-system/pods";
    let secrets = "/api/v1/namespaces/kube-system/secrets";
    common::eventually(Duration::from_secs(10), "the bindings in force", || async {
        let ok = s.curl(Who::Bob, "GET", pods, None).0 == 200
            && s.curl(Who::Alice, "GET", secrets, None).0 == 200;
        ok.then_some(())
    })
    .await;
    let (code, body) = s.curl(Who::Bob, "GET", secrets, None);
    assert_eq!(code, 403, "view reads no secrets: {body}");

    // An expired token is refused.
    let expired: Object = serde_json::from_value::<skiff_proto::api::Secret>(serde_json::json!({
        "metadata": {"name": "bootstrap-token-old000", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": "old000", "token-secret": "0123456789abcdef",
            "usage-bootstrap-authentication": "true", "expiration": "2020-01-01T00:00:00Z"
        }
    }))
    .map(Object::Secret)
    .expect("secret");
    s.grpc(Who::Admin)
        .create(&expired)
        .await
        .expect("admin stores an expired token");
    let (code, body) = as_token("old000.0123456789abcdef");
    assert_eq!(code, 401, "an expired token: {body}");
}

/// A certificate request (PEM) for `cn` in `org`, and its key.
fn certificate_request(cn: &str, org: Option<&str>) -> (String, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    if let Some(o) = org {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, o);
    }
    let pem = params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem");
    (pem, key)
}

/// A CertificateSigningRequest's JSON.
fn csr_json(name: &str, request: &str, signer: &str) -> String {
    use base64::Engine as _;
    serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(request),
            "signerName": signer,
            "usages": ["digital signature", "client auth"],
            // What a requester says of itself is replaced by who it authenticated as.
            "username": "system:masters-wannabe",
            "groups": ["system:masters"]
        }
    })
    .to_string()
}

/// TLS bootstrap, end to end: a node started with a bootstrap token (and no certificate)
/// asks for one with a CertificateSigningRequest; the controller manager approves it (the
/// token's group may have node client certificates) and signs it with the cluster's CA;
/// the node then runs as `system:node:<name>`, and a restart uses the certificate it kept.
/// Anything else waits for a person: `kubectl certificate approve` (by the admin, not by
/// alice) gets carol a certificate that authenticates her, `deny` gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_with_a_bootstrap_token_and_get_their_certificates() {
    use skiff_proto::api::CertificateSigningRequest;
    use skiff_proto::api::certificates::KUBE_APISERVER_CLIENT;

    let s = secured().await;
    let certs = s.certs();
    let cm = ControllerManagerCommand {
        endpoints: vec![s.client.clone()],
        tls: Some(ClientCert {
            ca: certs.join("ca.pem"),
            cert: certs.join("system-kube-controller-manager.pem"),
            key: certs.join("system-kube-controller-manager-key.pem"),
        }),
        signing: Some(SigningCa {
            cert: certs.join("ca.pem"),
            key: certs.join("ca-key.pem"),
        }),
        lease_ttl: Some(Duration::from_secs(2)),
        log: Some("info".into()),
        ..ControllerManagerCommand::default()
    };
    let cm_log = s.dir.path().join("controller-manager.log");
    let _cm = Launch::new("controller-manager", skiff_bin(), cm_log.clone())
        .args(cm.args())
        .spawn()
        .expect("spawn skiff controller-manager")
        .tail_on_panic(40);
    let (ok, out) = s.skiff_as_admin(&["token", "create", "--ttl", "1h"]);
    assert!(ok, "skiff token create: {out}");
    let token = out.trim().to_owned();
    let id = token.split_once('.').expect("id.secret").0.to_owned();

    let pki = s.dir.path().join("n5-pki");
    let node = |token: &str| NodeCommand {
        name: Some("n5".into()),
        logs_address: Some("127.0.0.1:0".into()),
        bootstrap: Some(NodeBootstrap {
            ca: certs.join("ca.pem"),
            token: token.to_owned(),
            server: s.api.clone(),
            cert_dir: pki.clone(),
        }),
        heartbeat_interval: Some(Duration::from_millis(500)),
        log: Some("info".into()),
        ..NodeCommand::new(RuntimeKind::Sim, vec![s.client.clone()])
    };
    let agent_log = s.dir.path().join("agent-n5.log");
    let agent = Launch::new("agent n5", skiff_bin(), agent_log.clone())
        .args(node(&token).args())
        .spawn()
        .expect("spawn skiff node")
        .tail_on_panic(40);
    let admin = s.grpc(Who::Admin);
    common::eventually(Duration::from_secs(30), "node n5 registered", || async {
        matches!(admin.get(Kind::Node, "", "n5").await, Ok(Some(_))).then_some(())
    })
    .await;

    // The certificate the node got: its own name, its key owner-only.
    let cert = std::fs::read(pki.join("kubelet-client.pem")).expect("the node's certificate");
    let der = x509_parser::pem::parse_x509_pem(&cert)
        .expect("pem")
        .1
        .contents;
    let subject = skiff_proto::tls::subject(&der).expect("subject");
    assert_eq!(subject.common_name, "system:node:n5");
    assert_eq!(subject.organizations, ["system:nodes"]);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(pki.join("kubelet-client-key.pem"))
        .expect("key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Its request: made by the token's user, approved and issued.
    let (csrs, _) = admin
        .list(Kind::CertificateSigningRequest, &ListParams::default())
        .await
        .expect("list csrs");
    let Some(Object::CertificateSigningRequest(joined)) = csrs.first() else {
        panic!("no certificate request: {csrs:?}");
    };
    assert_eq!(joined.spec.username, format!("system:bootstrap:{id}"));
    assert!(
        joined
            .spec
            .groups
            .iter()
            .any(|g| g == "system:bootstrappers")
    );
    assert_eq!(joined.condition_summary(), "Approved,Issued");

    // Alice may ask for certificates (a binding to system:node-bootstrapper) but not have a
    // node's approved: her request for one waits.
    s.bind_role("alice-asks", None, "system:node-bootstrapper", "alice");
    let (evil, _) = certificate_request("system:node:evil", Some("system:nodes"));
    let alice_csr = csr_json(
        "alice-node",
        &evil,
        skiff_proto::api::certificates::KUBE_APISERVER_CLIENT_KUBELET,
    );
    let body = common::eventually(Duration::from_secs(10), "alice's request", || async {
        let (code, body) = s.curl(
            Who::Alice,
            "POST",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            Some(&alice_csr),
        );
        (code == 201).then_some(body)
    })
    .await;
    let created: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        created["spec"]["username"], "alice",
        "the requester is who asked"
    );
    assert_eq!(
        created["spec"]["groups"],
        serde_json::json!(["system:authenticated"])
    );

    // Carol's client certificate: pending until the admin approves it.
    let (carol_req, carol_key) = certificate_request("carol", None);
    let (code, body) = s.curl(
        Who::Admin,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        Some(&csr_json("carol", &carol_req, KUBE_APISERVER_CLIENT)),
    );
    assert_eq!(code, 201, "{body}");
    let (code, body) = s.curl(
        Who::Admin,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        Some(&csr_json(
            "dave",
            &certificate_request("dave", None).0,
            KUBE_APISERVER_CLIENT,
        )),
    );
    assert_eq!(code, 201, "{body}");
    // A request that is not one: refused with the field.
    let (code, body) = s.curl(
        Who::Admin,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        Some(&csr_json("junk", "not a request", KUBE_APISERVER_CLIENT)),
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("spec.request"), "{body}");

    // Alice may not approve (she has no `approve` on the signer, nor the subresource).
    let approval = serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "carol"},
        "status": {"conditions": [{"type": "Approved", "status": "True", "reason": "Alice"}]}
    })
    .to_string();
    let (code, _) = s.curl(
        Who::Alice,
        "PUT",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests/carol/approval",
        Some(&approval),
    );
    assert_eq!(code, 403);

    let carol_cert = s.dir.path().join("carol.pem");
    let carol_key_file = s.dir.path().join("carol-key.pem");
    if kubectl_on_path() {
        let (ok, out) = s.kubectl_as_admin(&["certificate", "approve", "carol"]);
        assert!(
            ok && out.contains("approved"),
            "kubectl certificate approve: {out}"
        );
        let (ok, out) = s.kubectl_as_admin(&["certificate", "deny", "dave"]);
        assert!(
            ok && out.contains("denied"),
            "kubectl certificate deny: {out}"
        );
        let (ok, table) = s.kubectl_as_admin(&["get", "csr"]);
        assert!(ok, "kubectl get csr: {table}");
        for expected in [
            "SIGNERNAME",
            &format!("system:bootstrap:{id}"),
            "Approved,Issued",
            "Denied",
        ] {
            assert!(table.contains(expected), "{expected:?} in:\n{table}");
        }
    } else {
        eprintln!(
            "kubectl certificate approve not checked: kubectl is not on PATH; approving over REST"
        );
        let approval = approval.replace("Alice", "Admin");
        let (code, body) = s.curl(
            Who::Admin,
            "PUT",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/carol/approval",
            Some(&approval),
        );
        assert_eq!(code, 200, "{body}");
    }
    let issued = common::eventually(Duration::from_secs(20), "carol's certificate", || async {
        match admin
            .get(Kind::CertificateSigningRequest, "", "carol")
            .await
        {
            Ok(Some(Object::CertificateSigningRequest(c))) => c.certificate().map(<[u8]>::to_vec),
            _ => None,
        }
    })
    .await;
    std::fs::write(&carol_cert, &issued).expect("write");
    std::fs::write(&carol_key_file, carol_key.serialize_pem()).expect("write");
    // The issued certificate authenticates carol (who has no role yet).
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "--cacert"])
        .arg(certs.join("ca.pem"))
        .arg("--cert")
        .arg(&carol_cert)
        .arg("--key")
        .arg(&carol_key_file)
        .arg(format!("{}/api/v1/namespaces/default/pods", s.api))
        .output()
        .expect("curl");
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(body.contains(r#"User \"carol\" cannot list"#), "{body}");

    // Alice's node request and the denied one get nothing.
    let get = |name: &'static str| {
        let admin = admin.clone();
        async move {
            match admin.get(Kind::CertificateSigningRequest, "", name).await {
                Ok(Some(Object::CertificateSigningRequest(c))) => c,
                other => panic!("{name}: {other:?}"),
            }
        }
    };
    let alice: CertificateSigningRequest = get("alice-node").await;
    assert_eq!(alice.condition_summary(), "Pending");
    if kubectl_on_path() {
        assert_eq!(get("dave").await.condition_summary(), "Denied");
    }
    let log = std::fs::read_to_string(&cm_log).unwrap_or_default();
    assert!(
        log.contains("not approving a node client certificate"),
        "the approver logs why it leaves alice's request: {log}"
    );

    // A restart uses the certificate the node kept: the token is no longer needed.
    drop(agent);
    let before = std::fs::read(pki.join("kubelet-client.pem")).expect("cert");
    let _again = Launch::new(
        "agent n5 again",
        skiff_bin(),
        s.dir.path().join("agent-n5-again.log"),
    )
    .args(node("abcdef.0000000000000000").args())
    .spawn()
    .expect("spawn skiff node")
    .tail_on_panic(40);
    let again_log = s.dir.path().join("agent-n5-again.log");
    common::eventually(
        Duration::from_secs(20),
        "the restarted node on its certificate",
        || async {
            let log = std::fs::read_to_string(&again_log).unwrap_or_default();
            (log.contains("using the node's certificate") && log.contains("node agent starting"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        std::fs::read(pki.join("kubelet-client.pem")).expect("cert"),
        before
    );
    let _ = agent_log;
}

/// A client certificate `name` signed by the CA in `dir` that expired yesterday (the CA is
/// signed again with its own key under its own name, as `skiff certs` does).
fn expired_certificate(dir: &Path, name: &str) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let ca_key =
        KeyPair::from_pem(&std::fs::read_to_string(dir.join("ca-key.pem")).expect("CA key"))
            .expect("CA key");
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "skiff CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca.self_signed(&ca_key).expect("CA");
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name.push(DnType::CommonName, "alice");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    leaf.use_authority_key_identifier_extension = true;
    leaf.not_before = rcgen::date_time_ymd(2020, 1, 1);
    leaf.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let key = KeyPair::generate().expect("key");
    let cert = leaf.signed_by(&key, &ca, &ca_key).expect("signed");
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).expect("write");
    std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).expect("write");
}

fn kubectl_on_path() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A pod on a node reads its configuration as real applications do: a ConfigMap and a
/// Secret mounted as files and set as environment (`$(NAME)` in its command reads them, and
/// the `kubernetes` Service's variables),
/// scratch space in an emptyDir, and its service account's token, the cluster's CA and its
/// namespace under /var/run/secrets/kubernetes.io/serviceaccount. The token authenticates
/// as the service account (and is authorized as it: no role, no pods). The node may read
/// what its pods name and nothing else; an update of the ConfigMap reaches the file; the
/// volumes go with the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_reads_its_configuration_and_token_from_its_node() {
    let s = secured().await;
    let root = s.dir.path().join("node-root");
    let node = NodeCommand {
        root_dir: Some(root.clone()),
        volume_resync: Some(Duration::from_millis(300)),
        ..s.node_n1()
    };
    let _agent = Launch::new("agent n1", skiff_bin(), s.dir.path().join("agent.log"))
        .args(node.args())
        .spawn()
        .expect("spawn skiff node")
        .tail_on_panic(40);
    s.controller_manager_basics();
    for (path, body) in [
        (
            "/api/v1/namespaces/default/configmaps",
            r#"{"metadata":{"name":"app"},"data":{"greeting":"hello","app.conf":"level=3\n"}}"#,
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            r#"{"metadata":{"name":"unrelated"},"data":{"k":"v"}}"#,
        ),
        (
            "/api/v1/namespaces/default/secrets",
            r#"{"metadata":{"name":"db"},"stringData":{"password":"s3cret"}}"#,
        ),
    ] {
        let (code, out) = s.curl(Who::Admin, "POST", path, Some(body));
        assert_eq!(code, 201, "{path}: {out}");
    }
    // The member keeps the API's Service from its start.
    common::eventually(
        Duration::from_secs(20),
        "the kubernetes Service",
        || async {
            let (code, _) = s.curl(
                Who::Admin,
                "GET",
                "/api/v1/namespaces/default/services/kubernetes",
                None,
            );
            (code == 200).then_some(())
        },
    )
    .await;
    let pod = serde_json::json!({
        "metadata": {"name": "reader"},
        "spec": {"nodeName": "n1", "containers": [{
            "name": "c", "image": "busybox",
            "command": ["sh", "-c",
                "echo $(GREETING) $(DB_password) $(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT); sleep 3600"],
            "env": [{"name": "GREETING",
                     "valueFrom": {"configMapKeyRef": {"name": "app", "key": "greeting"}}}],
            "envFrom": [{"secretRef": {"name": "db"}, "prefix": "DB_"}],
            "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"},
                             {"name": "creds", "mountPath": "/etc/db", "readOnly": true},
                             {"name": "scratch", "mountPath": "/scratch"}]
        }],
        "volumes": [{"name": "conf", "configMap": {"name": "app"}},
                    {"name": "creds", "secret": {"secretName": "db"}},
                    {"name": "scratch", "emptyDir": {}}]}
    })
    .to_string();
    let (code, out) = s.curl(
        Who::Admin,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(&pod),
    );
    assert_eq!(code, 201, "{out}");
    let created: serde_json::Value = serde_json::from_str(&out).expect("a pod");
    let uid = created["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_owned();
    let access = created["spec"]["volumes"]
        .as_array()
        .and_then(|v| {
            v.iter()
                .filter_map(|v| v["name"].as_str())
                .find(|n| n.starts_with("kube-api-access-"))
        })
        .unwrap_or_else(|| panic!("admission adds the service account's volume: {out}"))
        .to_owned();
    let (code, log) = common::eventually(Duration::from_secs(30), "the pod's log", || async {
        let (code, log) = s.curl(
            Who::Admin,
            "GET",
            "/api/v1/namespaces/default/pods/reader/log",
            None,
        );
        (code == 200 && !log.is_empty()).then_some((code, log))
    })
    .await;
    // The API's Service (kept by the member) gives every container its variables.
    assert_eq!((code, log.as_str()), (200, "hello s3cret 10.96.0.1:443\n"));

    let volumes = root.join(&uid).join("volumes");
    let read = |p: &str| std::fs::read_to_string(volumes.join(p)).unwrap_or_default();
    assert_eq!(read("kubernetes.io~configmap/conf/greeting"), "hello");
    assert_eq!(read("kubernetes.io~configmap/conf/app.conf"), "level=3\n");
    assert_eq!(read("kubernetes.io~secret/creds/password"), "s3cret");
    assert!(volumes.join("kubernetes.io~empty-dir/scratch").is_dir());
    let projected = format!("kubernetes.io~projected/{access}");
    assert_eq!(read(&format!("{projected}/ca.crt")), "the CA");
    assert_eq!(read(&format!("{projected}/namespace")), "default");
    let token = read(&format!("{projected}/token"));
    assert!(token.starts_with("ey"), "a JWT: {token:?}");

    // The token is the pod's service account's, and that account has no role.
    let bearer = format!("Authorization: Bearer {token}");
    let (code, out) = s.curl_with(
        Who::Anonymous,
        "GET",
        "/api/v1/namespaces/default/pods",
        None,
        &[&bearer],
    );
    assert_eq!(code, 403, "{out}");
    let status: serde_json::Value = serde_json::from_str(&out).expect("a Status");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"system:serviceaccount:default:default\" cannot list resource \"pods\""),
        "{out}"
    );

    // The node reads what its pods name, and nothing else.
    let node_api = s.grpc(Who::Node);
    let config_map = Kind::from_name("ConfigMap").expect("declared");
    node_api
        .get(config_map, "default", "app")
        .await
        .expect("n1 reads the ConfigMap its pod mounts");
    let refused = node_api
        .get(config_map, "default", "unrelated")
        .await
        .expect_err("n1 may not read a ConfigMap no pod of its names");
    assert_eq!(refused.code(), Some(Code::PermissionDenied), "{refused}");
    let refused = node_api
        .create_token("default", "default", &[], None, None)
        .await
        .expect_err("a node's token must be bound to one of its pods");
    assert_eq!(refused.code(), Some(Code::PermissionDenied), "{refused}");

    // An update reaches the file within a few resyncs.
    let admin = s.grpc(Who::Admin);
    let Some(Object::Generic(g, mut app)) = admin
        .get(config_map, "default", "app")
        .await
        .expect("the ConfigMap")
    else {
        panic!("a ConfigMap is a generic object");
    };
    app.object_at("/data")
        .insert("greeting".into(), serde_json::json!("bonjour"));
    admin
        .update(&Object::Generic(g, app))
        .await
        .expect("the admin updates the ConfigMap");
    common::eventually(Duration::from_secs(20), "the updated file", || async {
        (read("kubernetes.io~configmap/conf/greeting") == "bonjour").then_some(())
    })
    .await;

    let (code, out) = s.curl(
        Who::Admin,
        "DELETE",
        "/api/v1/namespaces/default/pods/reader?gracePeriodSeconds=0",
        None,
    );
    assert_eq!(code, 200, "{out}");
    common::eventually(
        Duration::from_secs(30),
        "the pod's volumes removed",
        || async { (!root.join(&uid).exists()).then_some(()) },
    )
    .await;
}
