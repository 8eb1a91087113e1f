//! The store's roles and bindings as RBAC reads them, kept current.
//!
//! The compiled [`Rules`] are read again from the member's keyspace when they may have
//! changed: a watch on each RBAC kind marks them stale on every event, and the next request
//! that needs them reads them (one request at a time reads; the others wait for it). Marking
//! happens after a change is applied, and a read clears the mark before it reads, so a
//! change is never lost between the two: at worst the rules are read twice. Like
//! kube-apiserver's informers, a member authorizes by what it has applied.
//!
//! The watch reports a change a moment after it is applied, so a request the rules deny
//! has them read again ([`Policy::reread`]) when the keyspace has moved past the revision
//! they were read at: a binding a client has just seen written (as `skiff up` waits for the
//! components' bindings before it starts them) is never denied by a member that applied it.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt as _;
use skiff_proto::api::{Kind, Object};
use skiff_proto::backoff::Backoff;
use skiff_proto::cluster::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;

use super::bootstrap;
use super::rbac::Rules;
use crate::cluster::{ClusterApi, ClusterError};

/// The RBAC kinds, whose objects make the rules.
const KINDS: [Kind; 4] = [
    Kind::Role,
    Kind::ClusterRole,
    Kind::RoleBinding,
    Kind::ClusterRoleBinding,
];

#[derive(Debug)]
pub struct Policy {
    stale: AtomicBool,
    /// Held while the rules are read, so concurrent requests read them once.
    reading: Mutex<()>,
    rules: RwLock<Arc<Rules>>,
    /// The keyspace revision the rules were read at: they hold every change up to it.
    read_at: AtomicI64,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            stale: AtomicBool::new(true),
            reading: Mutex::new(()),
            rules: RwLock::new(Arc::new(Rules::default())),
            read_at: AtomicI64::new(0),
        }
    }
}

impl Policy {
    /// The rules as of every RBAC change this member has been told of.
    pub fn rules(&self, api: &ClusterApi) -> Arc<Rules> {
        if self.stale.load(Ordering::Acquire) {
            let _reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
            if self.stale.swap(false, Ordering::AcqRel) && self.read(api).is_none() {
                // Kept stale: the next request tries again; this one has the last rules.
                self.stale.store(true, Ordering::Release);
            }
        }
        self.rules.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The rules read again, for a request they deny, when the keyspace has moved past the
    /// revision they were read at; `None` when they are as of now (or cannot be read).
    pub fn reread(&self, api: &ClusterApi) -> Option<Arc<Rules>> {
        let _reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        if api.revision() <= self.read_at.load(Ordering::Acquire) {
            return None;
        }
        self.read(api)
    }

    /// Reads the rules and keeps them; the caller holds `reading`.
    fn read(&self, api: &ClusterApi) -> Option<Arc<Rules>> {
        match read(api) {
            Ok((at, rules)) => {
                let rules = Arc::new(rules);
                *self.rules.write().unwrap_or_else(|p| p.into_inner()) = rules.clone();
                self.read_at.fetch_max(at, Ordering::AcqRel);
                Some(rules)
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the RBAC roles and bindings");
                None
            }
        }
    }

    pub fn invalidate(&self) {
        self.stale.store(true, Ordering::Release);
    }
}

/// The rules, and a revision they hold every change up to (the first kind's read).
fn read(api: &ClusterApi) -> Result<(i64, Rules), ClusterError> {
    let mut objects = Vec::new();
    let mut at = None;
    for kind in KINDS {
        let (key, end) = crate::cluster::watch::key_range(kind, "");
        let (revision, items) = api.range(kind, &key, &end, 0)?;
        at.get_or_insert(revision);
        objects.extend(items.into_iter().map(|s| s.object));
    }
    let (mut roles, mut cluster_roles, mut bindings, mut cluster_bindings) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for o in objects {
        match o {
            Object::Role(r) => roles.push(r),
            Object::ClusterRole(r) => cluster_roles.push(r),
            Object::RoleBinding(b) => bindings.push(b),
            Object::ClusterRoleBinding(b) => cluster_bindings.push(b),
            _ => {}
        }
    }
    Ok((
        at.unwrap_or(0),
        Rules::new(&roles, &cluster_roles, &bindings, &cluster_bindings),
    ))
}

/// Keeps `policy` current (watching the RBAC kinds, watching again when a watch ends) and,
/// with `bootstrap`, creates the bootstrap roles and bindings that are missing. Runs until
/// `stop` is cancelled.
pub async fn maintain(
    api: ClusterApi,
    policy: Arc<Policy>,
    bootstrap: bool,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let work = async {
        tokio::join!(
            async {
                if bootstrap {
                    create_bootstrap(&api).await;
                }
            },
            watch(&api, &policy)
        )
    };
    tokio::select! {
        _ = work => {}
        _ = stop.cancelled() => {}
    }
    Ok(())
}

async fn watch(api: &ClusterApi, policy: &Policy) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let mut streams = Vec::new();
        for kind in KINDS {
            let req = pb::WatchRequest {
                kind: kind.name().to_owned(),
                ..pb::WatchRequest::default()
            };
            match api.watch(req) {
                Ok(rx) => streams.push(ReceiverStream::new(rx)),
                Err(e) => tracing::warn!(error = %e, %kind, "watching RBAC objects"),
            }
        }
        // Whatever happened before the watches began is read on the next request.
        policy.invalidate();
        if streams.len() == KINDS.len() {
            let mut events = futures::stream::select_all(streams);
            while let Some(event) = events.next().await {
                if let Err(e) = event {
                    tracing::info!(error = %e, "an RBAC watch ended; watching again");
                    break;
                }
                policy.invalidate();
                backoff.reset();
            }
        }
        backoff.wait().await;
    }
}

/// Creates each missing bootstrap object, and gives each existing one what this version's
/// has and it lacks (rules of a role, subjects of a binding), as kube-apiserver reconciles
/// its bootstrap policy on start, so a cluster made by an older version gains the
/// permissions newer components need. One annotated `rbac.authorization.kubernetes.io/
/// autoupdate: "false"` is left as it is. Tries again (with back-off) while the store cannot
/// take writes.
async fn create_bootstrap(api: &ClusterApi) {
    let objects: Vec<Object> = bootstrap::cluster_roles()
        .into_iter()
        .map(Object::ClusterRole)
        .chain(
            bootstrap::cluster_role_bindings()
                .into_iter()
                .map(Object::ClusterRoleBinding),
        )
        .collect();
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut missing = objects;
    while !missing.is_empty() {
        let mut failed = Vec::new();
        for o in missing {
            let outcome = match api.create(o.clone(), false).await {
                Err(ClusterError::AlreadyExists { .. }) => reconcile(api, &o).await,
                other => other.map(|_| ()),
            };
            match outcome {
                Ok(()) => {}
                Err(e) => {
                    tracing::debug!(error = %e, object = %o.display_name(), "creating a bootstrap RBAC object; trying again");
                    failed.push(o);
                }
            }
        }
        missing = failed;
        if !missing.is_empty() {
            backoff.wait().await;
        }
    }
    tracing::info!("the bootstrap RBAC roles and bindings are in place");
}

/// The annotation that keeps a bootstrap object from being reconciled when `"false"`.
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// Adds to the stored bootstrap object `want` names what `want` has and it lacks.
async fn reconcile(api: &ClusterApi, want: &Object) -> Result<(), ClusterError> {
    let name = &want.metadata().name;
    let (_, stored) = api.get_local(want.kind(), "", name)?;
    let Some(stored) = stored else {
        return Err(ClusterError::Contended {
            kind: want.kind(),
            name: name.clone(),
        });
    };
    let mut have = stored.object;
    if have
        .metadata()
        .annotations
        .get(AUTOUPDATE)
        .map(String::as_str)
        == Some("false")
    {
        return Ok(());
    }
    let added = match (&mut have, want) {
        (Object::ClusterRole(have), Object::ClusterRole(want)) => {
            let missing: Vec<_> = want
                .rules
                .iter()
                .filter(|r| !have.rules.contains(r))
                .cloned()
                .collect();
            let n = missing.len();
            have.rules.extend(missing);
            n
        }
        (Object::ClusterRoleBinding(have), Object::ClusterRoleBinding(want)) => {
            let missing: Vec<_> = want
                .subjects
                .iter()
                .filter(|s| !have.subjects.contains(s))
                .cloned()
                .collect();
            let n = missing.len();
            have.subjects.extend(missing);
            n
        }
        _ => 0,
    };
    if added == 0 {
        return Ok(());
    }
    tracing::info!(object = %want.display_name(), added, "bootstrap RBAC object reconciled");
    api.update(have, crate::cluster::Part::Main, false).await?;
    Ok(())
}
