//! The RBAC policy kept current: a watch on each RBAC kind marks the member's [`Policy`]
//! stale on every event, and the bootstrap roles and bindings are created (or given what they
//! lack) on start. A client of the cluster API, as kube-apiserver's RBAC informers are of its
//! storage. The policy reads the rules through [`RulesSource`], which [`ClusterApi`] is.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use skiff_proto::api::{Kind, Object};
use skiff_proto::backoff::Backoff;
use skiff_proto::cluster::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;

use super::{ClusterApi, ClusterError};
use crate::access::bootstrap::{self, AUTOUPDATE};
use crate::access::policy::{Policy, RulesSource};
use crate::access::rbac::Rules;

/// The RBAC kinds, whose objects make the rules.
const KINDS: [Kind; 4] = [
    Kind::Role,
    Kind::ClusterRole,
    Kind::RoleBinding,
    Kind::ClusterRoleBinding,
];

impl RulesSource for ClusterApi {
    type Error = ClusterError;

    fn revision(&self) -> i64 {
        ClusterApi::revision(self)
    }

    fn read_rules(&self) -> Result<(i64, Rules), ClusterError> {
        read(self)
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
