//! A DaemonSet's or StatefulSet's history as ControllerRevisions, as Kubernetes keeps it:
//! one revision per template the owner has had, named `<owner>-<hash>`, its `data` the
//! template as a patch that replaces the owner's, numbered in the order the templates became
//! current. `kubectl rollout history` lists them and `kubectl rollout undo` applies one; a
//! template that comes back (an undo) gets its old revision renumbered as the newest.
//! Revisions no pod runs are trimmed to `revisionHistoryLimit`.

use std::sync::Arc;

use serde_json::{Value, json};
use skiff_proto::api::apps::PodTemplateSpec;
use skiff_proto::api::meta::ObjectMeta;
use skiff_proto::api::{GenericObject, Kind, Object};
use skiff_proto::client::{ClientError, Code};

use crate::cache::controller_of;
use crate::core::{Context, controller_ref, gone_is_none, key_of};

/// The label a workload's pods and revisions carry: the hash of the template.
pub const REVISION_HASH_LABEL: &str = "controller-revision-hash";

/// Whose history: the owner's kind, its metadata and its current template.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    pub kind: Kind,
    pub meta: &'a ObjectMeta,
    pub template: &'a PodTemplateSpec,
}

/// The kind of ControllerRevisions.
pub fn kind() -> Kind {
    Kind::from_name("ControllerRevision").expect("invariant: ControllerRevision is declared")
}

/// The revision number of a stored revision.
pub fn number(r: &GenericObject) -> i64 {
    r.at("/revision").and_then(Value::as_i64).unwrap_or(0)
}

/// What to write so the history holds the current template as the newest revision, and no
/// more old ones than the limit.
#[derive(Debug, Default)]
pub struct Changes {
    /// A new revision to create.
    pub create: Option<Object>,
    /// An old revision renumbered as the newest (the template came back).
    pub update: Option<Object>,
    /// Old revisions to delete (names).
    pub delete: Vec<String>,
}

/// The changes that make `revisions` (the owner's own) current for `owner`, whose template
/// hashes to `hash`; `in_use` are the hashes its pods carry.
pub fn reconcile(
    owner: Owner<'_>,
    hash: &str,
    revisions: &[&GenericObject],
    in_use: &[&str],
    limit: usize,
) -> Changes {
    let mut out = Changes::default();
    let name = format!("{}-{hash}", owner.meta.name);
    let newest = revisions.iter().map(|r| number(r)).max().unwrap_or(0);
    match revisions.iter().find(|r| r.metadata.name == name) {
        Some(current) if number(current) == newest => {}
        Some(current) => {
            let mut next = (*current).clone();
            next.body.insert("revision".into(), json!(newest + 1));
            if let Kind::Generic(g) = kind() {
                out.update = Some(Object::Generic(g, next));
            }
        }
        None => {
            let mut template = serde_json::to_value(owner.template).unwrap_or_default();
            template["$patch"] = json!("replace");
            let mut labels = owner.template.metadata.labels.clone();
            labels.insert(REVISION_HASH_LABEL.into(), hash.into());
            let value = json!({
                "metadata": {
                    "name": name,
                    "namespace": owner.meta.namespace,
                    "labels": labels,
                    "ownerReferences": [controller_ref(owner.kind, owner.meta)],
                },
                "data": {"spec": {"template": template}},
                "revision": newest + 1,
            });
            out.create = Object::from_value(kind(), value).ok();
        }
    }
    let mut old: Vec<&&GenericObject> = revisions
        .iter()
        .filter(|r| r.metadata.name != name)
        .filter(|r| {
            let h = r
                .metadata
                .labels
                .get(REVISION_HASH_LABEL)
                .map(String::as_str);
            // A DaemonSet's pods carry the hash; a StatefulSet's, the revision's name.
            !h.is_some_and(|h| in_use.contains(&h)) && !in_use.contains(&r.metadata.name.as_str())
        })
        .collect();
    old.sort_by_key(|r| number(r));
    let excess = old.len().saturating_sub(limit);
    out.delete = old[..excess]
        .iter()
        .map(|r| r.metadata.name.clone())
        .collect();
    out
}

/// The template a stored revision holds (its `data.spec.template`).
pub fn template_of(r: &GenericObject) -> Option<PodTemplateSpec> {
    let mut t = r.at("/data/spec/template")?.clone();
    if let Some(o) = t.as_object_mut() {
        o.remove("$patch");
    }
    serde_json::from_value(t).ok()
}

/// The owner's revisions, as the cache has them.
pub fn revisions_of(ctx: &Context, uid: &str) -> Vec<Arc<Object>> {
    ctx.controller_revisions
        .owned_by(uid)
        .into_iter()
        .filter(|o| controller_of(o).is_some_and(|r| r.uid == uid))
        .collect()
}

fn generic(o: &Object) -> Option<&GenericObject> {
    match o {
        Object::Generic(_, g) => Some(g),
        _ => None,
    }
}

/// Keeps the owner's ControllerRevisions: the current template (hashing to `hash`) the
/// newest, old ones no pod runs trimmed to `limit` (`revisionHistoryLimit`).
pub async fn record(
    ctx: &Context,
    owner: Owner<'_>,
    hash: &str,
    limit: usize,
) -> Result<(), ClientError> {
    let uid = &owner.meta.uid;
    let revisions = revisions_of(ctx, uid);
    let revisions: Vec<&GenericObject> = revisions.iter().filter_map(|o| generic(o)).collect();
    let pods = ctx.pods.owned_by(uid);
    let in_use: Vec<&str> = pods
        .iter()
        .filter_map(|p| p.metadata().labels.get(REVISION_HASH_LABEL))
        .map(String::as_str)
        .collect();
    let changes = reconcile(owner, hash, &revisions, &in_use, limit);
    if let Some(made) = &changes.create {
        match ctx.client.create(made).await {
            Ok(_) => {
                tracing::debug!(owner = %key_of(owner.meta), revision = %made.metadata().name, "recorded a revision");
            }
            Err(e) if e.code() == Some(Code::AlreadyExists) => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(renumbered) = &changes.update {
        gone_is_none(ctx.client.update(renumbered).await)?;
    }
    for name in &changes.delete {
        gone_is_none(
            ctx.client
                .delete(kind(), &owner.meta.namespace, name, 0, None)
                .await,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::apps::DaemonSet;

    fn ds() -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap()
    }

    fn owner(ds: &DaemonSet) -> Owner<'_> {
        Owner {
            kind: Kind::from_name("DaemonSet").unwrap(),
            meta: &ds.metadata,
            template: &ds.spec.template,
        }
    }

    fn revision(hash: &str, n: i64) -> GenericObject {
        serde_json::from_value(json!({
            "metadata": {"name": format!("agent-{hash}"), "labels": {REVISION_HASH_LABEL: hash}},
            "data": {}, "revision": n
        }))
        .unwrap()
    }

    #[test]
    fn a_new_template_is_the_next_revision_and_old_ones_are_trimmed() {
        let (a, b, c) = (revision("a", 1), revision("b", 2), revision("c", 3));
        let ds = ds();
        let changes = reconcile(owner(&ds), "d", &[&a, &b, &c], &["b"], 1);
        let Some(Object::Generic(_, made)) = changes.create else {
            panic!("no revision made")
        };
        assert_eq!(made.metadata.name, "agent-d");
        assert_eq!(number(&made), 4);
        assert_eq!(
            made.at("/data/spec/template/$patch"),
            Some(&json!("replace"))
        );
        assert_eq!(template_of(&made).as_ref(), Some(&ds.spec.template));
        // b is still run by a pod; of a and c, only the newest is kept.
        assert_eq!(changes.delete, ["agent-a"]);
    }

    #[test]
    fn a_template_that_comes_back_is_renumbered() {
        let (a, b) = (revision("a", 1), revision("b", 2));
        let ds = ds();
        let changes = reconcile(owner(&ds), "a", &[&a, &b], &[], 10);
        let Some(Object::Generic(_, back)) = changes.update else {
            panic!("not renumbered")
        };
        assert_eq!(number(&back), 3);
        assert!(changes.create.is_none());
    }
}
