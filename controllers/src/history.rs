//! A DaemonSet's history as ControllerRevisions, as Kubernetes keeps it: one revision per
//! template the DaemonSet has had, named `<daemonset>-<hash>`, its `data` the template as a
//! patch that replaces the DaemonSet's, numbered in the order the templates became current.
//! `kubectl rollout history ds` lists them and `kubectl rollout undo ds` applies one; a
//! template that comes back (an undo) gets its old revision renumbered as the newest.
//! Revisions no pod runs are trimmed to `revisionHistoryLimit`.

use serde_json::{Value, json};
use skiff_proto::api::apps::DaemonSet;
use skiff_proto::api::{GenericObject, Kind, Object};

use crate::core::controller_ref;

use super::plan::REVISION_HASH_LABEL;

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

/// The changes that make `revisions` (the DaemonSet's own) current for `ds`, whose template
/// hashes to `hash`; `in_use` are the hashes its pods carry.
pub fn reconcile(
    ds: &DaemonSet,
    hash: &str,
    revisions: &[&GenericObject],
    in_use: &[&str],
    limit: usize,
) -> Changes {
    let mut out = Changes::default();
    let name = format!("{}-{hash}", ds.metadata.name);
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
            let mut template = serde_json::to_value(&ds.spec.template).unwrap_or_default();
            template["$patch"] = json!("replace");
            let mut labels = ds.spec.template.metadata.labels.clone();
            labels.insert(REVISION_HASH_LABEL.into(), hash.into());
            let value = json!({
                "metadata": {
                    "name": name,
                    "namespace": ds.metadata.namespace,
                    "labels": labels,
                    "ownerReferences": [controller_ref(super::kind(), &ds.metadata)],
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
            !h.is_some_and(|h| in_use.contains(&h))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ds() -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap()
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
        let changes = reconcile(&ds(), "d", &[&a, &b, &c], &["b"], 1);
        let Some(Object::Generic(_, made)) = changes.create else {
            panic!("no revision made")
        };
        assert_eq!(made.metadata.name, "agent-d");
        assert_eq!(number(&made), 4);
        assert_eq!(
            made.at("/data/spec/template/$patch"),
            Some(&json!("replace"))
        );
        // b is still run by a pod; of a and c, only the newest is kept.
        assert_eq!(changes.delete, ["agent-a"]);
    }

    #[test]
    fn a_template_that_comes_back_is_renumbered() {
        let (a, b) = (revision("a", 1), revision("b", 2));
        let changes = reconcile(&ds(), "a", &[&a, &b], &[], 10);
        let Some(Object::Generic(_, back)) = changes.update else {
            panic!("not renumbered")
        };
        assert_eq!(number(&back), 3);
        assert!(changes.create.is_none());
    }
}
