//! A cluster API over a real store member of one, in a temporary directory, for unit tests
//! that need objects stored, admitted and watched as a server stores, admits and watches
//! them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use skiff_proto::api::{Kind, Object};
use skiff_store::kv::MemberKv;
use skiff_store::member::{MemberConfig, StoreMember};

use super::{ApiConfig, ClusterApi};
use crate::access::serviceaccount::{DEFAULT_ISSUER, ServiceAccountConfig};
use crate::access::{Access, AccessConfig, Mode};

/// A member of one and the cluster API over it; stopped by [`TestApi::stop`].
pub struct TestApi {
    pub api: ClusterApi,
    member: Arc<StoreMember>,
    _dir: tempfile::TempDir,
}

/// Access as a secured server has it: the Node and RBAC modes, a signing key.
pub fn secured_access(dir: &std::path::Path) -> AccessConfig {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let path = dir.join("sa.key");
    std::fs::write(&path, key.serialize_pem()).expect("write the key");
    AccessConfig {
        modes: vec![Mode::Node, Mode::Rbac],
        anonymous: false,
        service_accounts: Some(ServiceAccountConfig {
            issuer: DEFAULT_ISSUER.into(),
            signing_key_file: Some(path),
            key_files: Vec::new(),
            api_audiences: Vec::new(),
        }),
        ..AccessConfig::default()
    }
}

impl TestApi {
    /// A member started in a new directory, leading, with `access` (made in that directory).
    pub async fn start(access: impl FnOnce(&std::path::Path) -> AccessConfig) -> TestApi {
        let dir = tempfile::tempdir().expect("temporary directory");
        let access = Arc::new(Access::new(access(dir.path())).expect("access"));
        let config = MemberConfig {
            data_dir: dir.path().join("member"),
            heartbeat_interval: Duration::from_millis(20),
            election_timeout: Duration::from_millis(200),
            ..MemberConfig::default()
        };
        let member = StoreMember::start(config, Some(super::watch::tagger()))
            .await
            .expect("the member starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !member.is_leader() {
            assert!(Instant::now() < deadline, "the member never led");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let api = ClusterApi::with_access(
            Arc::new(MemberKv(member.clone())),
            access,
            ApiConfig::default(),
        );
        TestApi {
            api,
            member,
            _dir: dir,
        }
    }

    pub async fn stop(self) {
        self.member.shutdown().await;
    }

    /// Creates `json` as a `kind`, as an administrator would.
    pub async fn create(&self, kind: Kind, json: serde_json::Value) -> Object {
        let object = Object::from_value(kind, json).expect("an object");
        self.api.create(object, false).await.expect("created").1
    }
}

/// A pod of namespace `team` on `node` (none: unbound), running as `account`, with a volume
/// of ConfigMap `config_map`.
pub fn pod(name: &str, node: &str, account: &str, config_map: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "containers": [{"name": "app", "image": "busybox"}],
            "volumes": [{"name": "config", "configMap": {"name": config_map}}],
        },
    })
}

/// Namespace `team`, accounts `web` and `db`, pod `web-1` on n1 as `web` reading ConfigMap
/// `web-config`, `db-1` on n2 as `db` reading `db-config`: the uid of each pod.
pub async fn team(t: &TestApi) -> (String, String) {
    t.create(
        Kind::Namespace,
        serde_json::json!({"metadata": {"name": "team"}}),
    )
    .await;
    for account in ["web", "db"] {
        let account = serde_json::json!({"metadata": {"name": account, "namespace": "team"}});
        t.create(super::token::service_account_kind(), account)
            .await;
    }
    let web = t
        .create(Kind::Pod, pod("web-1", "n1", "web", "web-config"))
        .await;
    let db = t
        .create(Kind::Pod, pod("db-1", "n2", "db", "db-config"))
        .await;
    (web.metadata().uid.clone(), db.metadata().uid.clone())
}
