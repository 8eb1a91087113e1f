//! The store's roles and bindings as RBAC reads them: a [`Policy`] holds the compiled
//! [`Rules`] and reads them again, from a [`RulesSource`], when they may have changed.
//!
//! The loop that keeps a policy current is the cluster API's (`cluster::rbac_policy`): a
//! watch on each RBAC kind marks the rules stale ([`Policy::invalidate`]) on every event, and
//! the next request that needs them reads them (one request at a time reads; the others wait
//! for it). Marking happens after a change is applied, and a read clears the mark before it
//! reads, so a change is never lost between the two: at worst the rules are read twice. Like
//! kube-apiserver's informers, a member authorizes by what it has applied.
//!
//! The watch reports a change a moment after it is applied, so a request the rules deny
//! has them read again ([`Policy::reread`]) when the keyspace has moved past the revision
//! they were read at: a binding a client has just seen written (as `skiff up` waits for the
//! components' bindings before it starts them) is never denied by a member that applied it.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::rbac::Rules;

/// Where a [`Policy`] reads its rules: the roles and bindings in the store, as the cluster
/// API reads them.
pub trait RulesSource {
    /// Why the rules could not be read.
    type Error: fmt::Display;

    /// The keyspace revision now.
    fn revision(&self) -> i64;

    /// The rules, and a revision they hold every change up to.
    fn read_rules(&self) -> Result<(i64, Rules), Self::Error>;
}

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
    pub fn rules(&self, source: &impl RulesSource) -> Arc<Rules> {
        if self.stale.load(Ordering::Acquire) {
            let _reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
            if self.stale.swap(false, Ordering::AcqRel) && self.read(source).is_none() {
                // Kept stale: the next request tries again; this one has the last rules.
                self.stale.store(true, Ordering::Release);
            }
        }
        self.rules.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The rules read again, for a request they deny, when the keyspace has moved past the
    /// revision they were read at; `None` when they are as of now (or cannot be read).
    pub fn reread(&self, source: &impl RulesSource) -> Option<Arc<Rules>> {
        let _reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        if source.revision() <= self.read_at.load(Ordering::Acquire) {
            return None;
        }
        self.read(source)
    }

    /// Reads the rules and keeps them; the caller holds `reading`.
    fn read(&self, source: &impl RulesSource) -> Option<Arc<Rules>> {
        match source.read_rules() {
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
