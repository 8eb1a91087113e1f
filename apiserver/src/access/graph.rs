//! The node authorizer's graph: which ConfigMaps, Secrets, PersistentVolumeClaims and
//! ServiceAccounts the pods bound to each node reference, as kube-apiserver's Node
//! authorizer keeps it from its pod informer. A node agent reads those objects for the pods it
//! runs (when each pod starts, and every few seconds after), so a decision must not scan the
//! pods: it is two hash lookups here.
//!
//! ```text
//!  pods:    namespace ─► name ─► PodEdges { node, service account, References }
//!  reached: node ─► namespace ─► [config maps, secrets, claims, service accounts]
//!                                      each: name ─► how many of those pods reference it
//! ```
//!
//! `reached` is what `pods` adds up to: a pod's put takes its former edges' counts away and
//! adds its new ones; a name whose count falls to 0 goes, and so does a namespace or node left
//! with none. Unbound pods have no edges (they reach no node).
//!
//! [`NodeGraph`] holds the index with the revision it is current to. The cluster API keeps
//! it (`cluster::node_graph`: list, then watch from the list's revision); a request the
//! index denies while it may be behind the store is checked again against the pods changed
//! since that revision, so a node asking right after a pod was bound to it is not refused.

use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;

use skiff_proto::api::Pod;
use skiff_proto::api::volume::References;

use super::node::Referent;

/// What a pod bound to a node lets that node read: the pod's service account and what its
/// spec references (all in the pod's namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEdges {
    pub node: String,
    pub service_account: String,
    pub references: References,
}

impl PodEdges {
    /// The edges of `pod`; `None` while it is bound to no node.
    pub fn of(pod: &Pod) -> Option<PodEdges> {
        if pod.spec.node_name.is_empty() {
            return None;
        }
        Some(PodEdges {
            node: pod.spec.node_name.clone(),
            service_account: pod.spec.service_account_name.clone(),
            references: References::of(&pod.spec),
        })
    }

    /// Whether the pod references `referent` `name`.
    pub fn reaches(&self, referent: Referent, name: &str) -> bool {
        match referent {
            Referent::ConfigMap => self.references.config_maps.contains(name),
            Referent::Secret => self.references.secrets.contains(name),
            Referent::Claim => self.references.claims.contains(name),
            Referent::ServiceAccount => !name.is_empty() && self.service_account == name,
        }
    }

    /// Each `(referent, name)` the pod references, once.
    fn each(&self) -> impl Iterator<Item = (Referent, &str)> {
        fn named(
            referent: Referent,
            names: &BTreeSet<String>,
        ) -> impl Iterator<Item = (Referent, &str)> {
            names.iter().map(move |n| (referent, n.as_str()))
        }
        let r = &self.references;
        named(Referent::ConfigMap, &r.config_maps)
            .chain(named(Referent::Secret, &r.secrets))
            .chain(named(Referent::Claim, &r.claims))
            .chain(
                (!self.service_account.is_empty())
                    .then_some((Referent::ServiceAccount, self.service_account.as_str())),
            )
    }
}

/// What the pods of one node in one namespace reference: per [`Referent`], each name with
/// how many of them do.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Reached([HashMap<String, u32>; Referent::ALL.len()]);

impl Reached {
    fn is_empty(&self) -> bool {
        self.0.iter().all(HashMap::is_empty)
    }
}

/// The pods bound to nodes and what each node's pods reference (see the module's diagram).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Index {
    pods: HashMap<String, HashMap<String, PodEdges>>,
    reached: HashMap<String, HashMap<String, Reached>>,
}

impl Index {
    /// Pod `namespace/name` now has `edges` (`None`: it is unbound, or deleted).
    pub fn set(&mut self, namespace: &str, name: &str, edges: Option<PodEdges>) {
        let before = match edges {
            Some(e) => {
                if self.pods.get(namespace).and_then(|p| p.get(name)) == Some(&e) {
                    return;
                }
                self.add(namespace, &e);
                self.pods
                    .entry(namespace.to_owned())
                    .or_default()
                    .insert(name.to_owned(), e)
            }
            None => {
                let Some(pods) = self.pods.get_mut(namespace) else {
                    return;
                };
                let before = pods.remove(name);
                if pods.is_empty() {
                    self.pods.remove(namespace);
                }
                before
            }
        };
        if let Some(before) = before {
            self.take(namespace, &before);
        }
    }

    /// Whether a pod bound to `node` in `namespace` references `referent` `name`.
    pub fn reaches(&self, node: &str, namespace: &str, referent: Referent, name: &str) -> bool {
        self.reached
            .get(node)
            .and_then(|n| n.get(namespace))
            .is_some_and(|r| r.0[referent as usize].contains_key(name))
    }

    /// How many bound pods the index holds.
    pub fn len(&self) -> usize {
        self.pods.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    fn add(&mut self, namespace: &str, edges: &PodEdges) {
        let reached = self
            .reached
            .entry(edges.node.clone())
            .or_default()
            .entry(namespace.to_owned())
            .or_default();
        for (referent, name) in edges.each() {
            *reached.0[referent as usize]
                .entry(name.to_owned())
                .or_default() += 1;
        }
    }

    fn take(&mut self, namespace: &str, edges: &PodEdges) {
        let Some(node) = self.reached.get_mut(&edges.node) else {
            return;
        };
        let Some(reached) = node.get_mut(namespace) else {
            return;
        };
        for (referent, name) in edges.each() {
            let counts = &mut reached.0[referent as usize];
            if let Some(n) = counts.get_mut(name) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(name);
                }
            }
        }
        if reached.is_empty() {
            node.remove(namespace);
            if node.is_empty() {
                self.reached.remove(&edges.node);
            }
        }
    }
}

/// The index as of a revision, shared by the loop that keeps it and the requests that read
/// it. Its revision is one it holds every pod change up to; 0 until the first list (every
/// request the index denies is then checked against the store).
#[derive(Debug, Default)]
pub struct NodeGraph {
    state: RwLock<State>,
}

#[derive(Debug, Default)]
struct State {
    index: Index,
    revision: i64,
    /// The keyspace's snapshot installs as of the list the index was built from: history
    /// from before another install says nothing of the keyspace now.
    epoch: u64,
}

/// Where a [`NodeGraph`] is current to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Every pod change up to this revision is in the index.
    pub revision: i64,
    pub epoch: u64,
}

impl NodeGraph {
    /// `index`, read whole at `revision` of the keyspace of `epoch`, replaces the index.
    pub fn replace(&self, index: Index, revision: i64, epoch: u64) {
        *self.write() = State {
            index,
            revision,
            epoch,
        };
    }

    /// A watch event at `revision`: pod `namespace/name` now has `edges`. Other events of
    /// the same revision (one transaction's writes) may still be on their way, so the index
    /// is current to the revision before it until a later event or progress says more.
    pub fn apply(&self, namespace: &str, name: &str, edges: Option<PodEdges>, revision: i64) {
        let mut state = self.write();
        state.index.set(namespace, name, edges);
        state.revision = state.revision.max(revision - 1);
    }

    /// The watch has delivered every event up to `revision` (a bookmark).
    pub fn progress(&self, revision: i64) {
        let mut state = self.write();
        state.revision = state.revision.max(revision);
    }

    /// Whether a pod bound to `node` in `namespace` references `referent` `name`, by the
    /// index, and where the index is current to.
    pub fn reaches(
        &self,
        node: &str,
        namespace: &str,
        referent: Referent,
        name: &str,
    ) -> (bool, Position) {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let found = state.index.reaches(node, namespace, referent, name);
        let at = Position {
            revision: state.revision,
            epoch: state.epoch,
        };
        (found, at)
    }

    /// How many bound pods the index holds.
    pub fn len(&self) -> usize {
        self.state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .index
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn edges(node: &str, sa: &str, config_maps: &[&str], secrets: &[&str]) -> PodEdges {
        PodEdges {
            node: node.into(),
            service_account: sa.into(),
            references: References {
                config_maps: config_maps.iter().map(|s| (*s).to_owned()).collect(),
                secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
                claims: Default::default(),
                token: false,
            },
        }
    }

    /// Two pods of n1 share a ConfigMap: it stays reachable until the last of them goes;
    /// the other node and the other namespace never reach it.
    #[test]
    fn shared_references_are_counted() {
        let mut index = Index::default();
        index.set("team", "a", Some(edges("n1", "web", &["cfg"], &["tls"])));
        index.set("team", "b", Some(edges("n1", "web", &["cfg"], &[])));
        assert!(index.reaches("n1", "team", Referent::ConfigMap, "cfg"));
        assert!(index.reaches("n1", "team", Referent::Secret, "tls"));
        assert!(index.reaches("n1", "team", Referent::ServiceAccount, "web"));
        assert!(!index.reaches("n2", "team", Referent::ConfigMap, "cfg"));
        assert!(!index.reaches("n1", "other", Referent::ConfigMap, "cfg"));
        assert!(
            !index.reaches("n1", "team", Referent::Secret, "cfg"),
            "by kind"
        );
        index.set("team", "a", None);
        assert!(index.reaches("n1", "team", Referent::ConfigMap, "cfg"));
        assert!(index.reaches("n1", "team", Referent::ServiceAccount, "web"));
        assert!(!index.reaches("n1", "team", Referent::Secret, "tls"));
        index.set("team", "b", None);
        assert!(!index.reaches("n1", "team", Referent::ConfigMap, "cfg"));
        assert_eq!(index, Index::default(), "nothing left behind");
    }

    /// A pod moved to another node (deleted and made again under its name, or an update
    /// the index missed) takes its references with it; an unbound pod reaches no node; a
    /// delete of a pod never seen changes nothing.
    #[test]
    fn a_pod_that_moves_takes_its_references_along() {
        let mut index = Index::default();
        index.set("team", "p", Some(edges("n1", "", &["cfg"], &[])));
        index.set("team", "p", Some(edges("n2", "", &["cfg"], &[])));
        assert!(!index.reaches("n1", "team", Referent::ConfigMap, "cfg"));
        assert!(index.reaches("n2", "team", Referent::ConfigMap, "cfg"));
        assert_eq!(index.len(), 1);
        index.set("team", "p", None);
        index.set("team", "ghost", None);
        index.set("nowhere", "ghost", None);
        assert!(index.is_empty());
        assert_eq!(index, Index::default());
        // An empty service account name reaches nothing.
        index.set("team", "q", Some(edges("n1", "", &[], &[])));
        assert!(!index.reaches("n1", "team", Referent::ServiceAccount, ""));
    }

    /// An event moves the revision to the one before it (its transaction's other writes may
    /// follow); a bookmark to its own; neither moves it back.
    #[test]
    fn the_graph_is_current_to_the_revision_before_its_last_event() {
        let graph = NodeGraph::default();
        assert_eq!(
            graph.reaches("n1", "team", Referent::ConfigMap, "cfg"),
            (
                false,
                Position {
                    revision: 0,
                    epoch: 0
                }
            )
        );
        let mut index = Index::default();
        index.set("team", "a", Some(edges("n1", "", &["cfg"], &[])));
        graph.replace(index, 10, 2);
        assert_eq!(graph.len(), 1);
        graph.apply("team", "b", Some(edges("n1", "", &["other"], &[])), 12);
        let (found, at) = graph.reaches("n1", "team", Referent::ConfigMap, "other");
        assert!(found);
        assert_eq!(
            at,
            Position {
                revision: 11,
                epoch: 2
            }
        );
        graph.progress(15);
        graph.progress(13);
        graph.apply("team", "b", None, 14);
        let (found, at) = graph.reaches("n1", "team", Referent::ConfigMap, "other");
        assert!(!found);
        assert_eq!(at.revision, 15);
    }

    /// A pod put or deleted, in any order.
    #[derive(Debug, Clone)]
    enum Op {
        Put {
            pod: u8,
            node: Option<u8>,
            config_maps: Vec<u8>,
            account: u8,
        },
        Delete {
            pod: u8,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                0u8..6,
                proptest::option::of(0u8..3),
                proptest::collection::vec(0u8..4, 0..3),
                0u8..3
            )
                .prop_map(|(pod, node, config_maps, account)| Op::Put {
                    pod,
                    node,
                    config_maps,
                    account
                }),
            (0u8..6).prop_map(|pod| Op::Delete { pod }),
        ]
    }

    proptest! {
        /// After any puts and deletes the index answers as a scan of the pods it was told
        /// of would, and holds nothing for pods no longer there.
        #[test]
        fn the_index_answers_as_a_scan_of_the_pods(ops in proptest::collection::vec(op(), 0..40)) {
            let mut index = Index::default();
            let mut model: HashMap<String, PodEdges> = HashMap::new();
            for op in ops {
                match op {
                    Op::Put { pod, node, config_maps, account } => {
                        let name = format!("p{pod}");
                        let cms: Vec<String> = config_maps.iter().map(|c| format!("c{c}")).collect();
                        let cms: Vec<&str> = cms.iter().map(String::as_str).collect();
                        let e = node.map(|n| edges(&format!("n{n}"), &format!("sa{account}"), &cms, &[]));
                        match &e {
                            Some(e) => { model.insert(name.clone(), e.clone()); }
                            None => { model.remove(&name); }
                        }
                        index.set("ns", &name, e);
                    }
                    Op::Delete { pod } => {
                        let name = format!("p{pod}");
                        model.remove(&name);
                        index.set("ns", &name, None);
                    }
                }
            }
            for n in 0..3 {
                let node = format!("n{n}");
                for (referent, names) in [
                    (Referent::ConfigMap, (0..4).map(|c| format!("c{c}")).collect::<Vec<_>>()),
                    (Referent::ServiceAccount, (0..3).map(|a| format!("sa{a}")).collect()),
                ] {
                    for name in names {
                        let scan = model.values().any(|e| e.node == node && e.reaches(referent, &name));
                        prop_assert_eq!(index.reaches(&node, "ns", referent, &name), scan);
                    }
                }
            }
            prop_assert_eq!(index.len(), model.len());
            let mut rebuilt = Index::default();
            for (name, e) in &model {
                rebuilt.set("ns", name, Some(e.clone()));
            }
            prop_assert_eq!(index, rebuilt);
        }
    }
}
