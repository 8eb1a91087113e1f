//! The typed cluster API (`skiff.cluster.v1.Cluster`): Pods, Nodes, Namespaces, ResourceQuotas
//! and LimitRanges over the same MVCC keyspace as the etcd API, under
//! `/registry/<plural>/<namespace>/<name>`.
//!
//! Every write is one transaction proposed through Raft with compare-and-swap guards: create
//! requires the key to be absent, update and delete require the stored mod revision to be the
//! one the request was checked against (and the client's `resourceVersion`, when it gives
//! one), quota admission requires that no pod in the namespace changed since the usage was
//! counted. An object's `resourceVersion` is its mod revision; it is not stored in the JSON but
//! filled in on every read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use skiff_proto::api::meta::{FOREGROUND_DELETION_FINALIZER, ORPHAN_FINALIZER, generated_name};
use skiff_proto::api::object::DecodeError;
use skiff_proto::api::schema::{self, FieldValidation};
use skiff_proto::api::{DeletionPropagation, Kind, Object, PodPhase, Time, defaults, validation};
use skiff_proto::cluster::v1 as pb;

use crate::access::{Access, Attributes, User};
pub use config::ApiConfig;
pub use error::{ClusterError, Result};
use skiff_store::error::StoreError;
pub use skiff_store::key_index::prefix_end;
use skiff_store::key_index::{is_empty_range, range_bounds};
use skiff_store::kv::{Keyspace, Kv};
use skiff_store::request::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, KeyValue, PutRequest, RangeRequest,
    RequestOp, ResponseOp, TxnRequest, TxnResponse,
};

pub mod addresses;
pub mod admission;
pub mod apiservices;
pub mod bind;
pub mod config;
pub mod crds;
pub mod error;
pub mod eviction;
pub mod gate;
pub mod ipam;
pub mod kubernetes_service;
pub mod list;
pub mod node_graph;
pub mod pod_security;
pub mod priority;
pub mod rbac_policy;
mod review;
pub mod service;
pub mod system;
#[cfg(test)]
pub(crate) mod testing;
pub mod token;
pub mod watch;

/// Attempts at a write whose guard lost a race with another writer (quota usage moved, or the
/// object changed between read and write when the client did not pin a resourceVersion).
const WRITE_ATTEMPTS: usize = 8;

/// Events written within this long share one lease (kube-apiserver reuses its event leases
/// the same way), so an event lives between `event_ttl` and `event_ttl` plus this after its
/// last write, at one lease grant a minute. Short TTLs reuse for a tenth of the TTL.
const EVENT_LEASE_REUSE: Duration = Duration::from_secs(60);

/// Records who changed which fields of an object (`metadata.managedFields`, Kubernetes'
/// field manager), for a face that knows its writer's field manager: the REST API's
/// [`crate::rest::patch::FieldManager`]. It sees every create and update of the handle
/// it is given to ([`ClusterApi::tracked_by`]), once the object is defaulted, admitted and
/// validated.
pub trait FieldTracker: Send + Sync + std::fmt::Debug {
    /// `current` is the stored object (none on create), `next` what replaces it.
    fn track(&self, current: Option<&Object>, next: &mut Object);
}

/// The cluster API over one member.
#[derive(Debug, Clone)]
pub struct ClusterApi {
    /// The store the API keeps its objects in.
    pub kv: Arc<dyn Kv>,
    uid_seq: Arc<AtomicU64>,
    /// The lease new Event writes go under, and when it was granted.
    event_lease: Arc<Mutex<Option<(i64, Instant)>>>,
    /// The fencing token every write of this handle carries (see [`ClusterApi::fenced`]).
    fence: Option<Arc<(String, i64)>>,
    /// Who may do what, for both faces.
    pub access: Arc<Access>,
    /// Who the writes of this handle are made for, when a face knows it: admission
    /// (NodeRestriction) judges what a node agent writes.
    requester: Option<Arc<User>>,
    /// Who records the fields the writes of this handle change, when a face knows its
    /// writer's field manager (see [`FieldTracker`]).
    tracker: Option<Arc<dyn FieldTracker>>,
    /// The API server's settings.
    pub config: Arc<ApiConfig>,
    /// What the pods of each namespace under a quota use (quota admission's).
    quota_usage: Arc<admission::UsageCache>,
}

/// A delete's options (`DeleteOptions`, whichever face sent them): what an eviction, which
/// is a delete a budget may refuse, passes on to the delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// The grace period, in seconds (unset: the pod's own).
    pub grace: Option<i64>,
    /// `preconditions.resourceVersion`: the object must still be at it (0: any).
    pub resource_version: i64,
    /// `preconditions.uid`: the object must be this one (empty: any).
    pub uid: String,
    /// `dryRun: [All]`: checked, nothing written.
    pub dry_run: bool,
    /// Unset: the store's default (see [`ClusterApi::delete`]).
    pub propagation: Option<DeletionPropagation>,
}

/// Which part of an object an update writes: the object (spec and metadata, status kept),
/// its `status` subresource (status only), or a CertificateSigningRequest's `approval`
/// subresource (its Approved and Denied conditions only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
    Approval,
    /// A namespace's `spec.finalizers` (the `finalize` subresource).
    Finalize,
}

/// The attributes of `verb` on objects of `kind` (a subresource of them; one object when
/// `name` is given) in `namespace` (none for a cluster-scoped kind), with a list's or
/// watch's field selector.
pub fn kind_attributes(
    verb: &str,
    kind: Kind,
    subresource: Option<&str>,
    namespace: &str,
    name: &str,
    fields: &str,
) -> Attributes {
    let ns = if kind.is_namespaced() { namespace } else { "" };
    Attributes::resource(verb, kind.group(), kind.plural(), subresource, ns, name)
        .with_fields(fields)
}

impl crate::access::authn::Credentials for ClusterApi {
    fn uid_of(&self, kind: &str, namespace: &str, name: &str) -> Option<String> {
        let kind = Kind::from_name(kind)?;
        match self.get_local(kind, namespace, name) {
            Ok((_, Some(s))) if s.object.metadata().deletion_timestamp.is_none() => {
                Some(s.object.metadata().uid.clone())
            }
            _ => None,
        }
    }

    fn bootstrap_secret(&self, id: &str) -> Option<skiff_proto::api::Secret> {
        match self.get_local(
            Kind::Secret,
            "kube-system",
            &format!("bootstrap-token-{id}"),
        ) {
            Ok((
                _,
                Some(Stored {
                    object: Object::Secret(s),
                    ..
                }),
            )) => Some(s),
            _ => None,
        }
    }
}

impl crate::access::Facts for ClusterApi {
    fn rules(&self) -> Arc<crate::access::rbac::Rules> {
        self.access.policy().rules(self)
    }

    fn reread_rules(&self) -> Option<Arc<crate::access::rbac::Rules>> {
        self.access.policy().reread(self)
    }
}

/// An object as stored, with its mod revision.
#[derive(Debug, Clone)]
pub struct Stored {
    pub object: Object,
    pub mod_revision: i64,
}

pub fn header(kv: &dyn Kv, revision: i64) -> Option<pb::ResponseHeader> {
    let h = kv.header();
    Some(pb::ResponseHeader {
        revision,
        member_id: h.member_id,
        raft_term: h.raft_term,
    })
}

/// `pods "web-1" not found`, as Kubernetes words it.
pub fn not_found(kind: Kind, name: &str) -> ClusterError {
    ClusterError::NotFound {
        kind,
        name: name.to_string(),
    }
}

pub fn conflict(kind: Kind, name: &str) -> ClusterError {
    ClusterError::Conflict {
        kind,
        name: name.to_string(),
    }
}

pub fn parse_kind(kind: &str) -> Result<Kind> {
    Kind::from_wire(kind)
        .filter(|k| k.is_stored())
        .ok_or_else(|| ClusterError::UnknownKind {
            kind: kind.to_string(),
        })
}

/// The stored bytes of an object: its JSON without `resourceVersion` (that is the key's mod
/// revision, filled in on read).
pub fn encode(object: &Object) -> Vec<u8> {
    let mut o = object.clone();
    o.metadata_mut().resource_version.clear();
    o.set_type_meta();
    // A custom kind's objects are kept in its storage version, whichever version wrote them.
    if let Object::Generic(g, generic) = &mut o
        && let Some(live) = skiff_proto::api::custom::live(*g)
    {
        generic.api_version.clone_from(&live.storage_version);
    }
    o.to_json()
}

pub fn decode(kind: Kind, kv: &KeyValue) -> Result<Stored> {
    let mut object = Object::from_json(kind, &kv.value).map_err(|source| ClusterError::Stored {
        kind,
        key: String::from_utf8_lossy(&kv.key).into_owned(),
        source,
    })?;
    object.metadata_mut().resource_version = kv.mod_revision.to_string();
    Ok(Stored {
        object,
        mod_revision: kv.mod_revision,
    })
}

pub fn to_pb(object: &Object) -> pb::Object {
    let mut o = object.clone();
    o.set_type_meta();
    pb::Object {
        kind: o.kind().wire_name().into_owned(),
        json: o.to_json(),
    }
}

/// Decodes a cluster API request object: known kind, valid JSON of that kind, no field that
/// Kubernetes' schema lacks (Skiff's components and CLI write only what they mean to).
pub fn from_pb(o: Option<pb::Object>) -> Result<Object> {
    let o = o.ok_or(ClusterError::Missing { field: "object" })?;
    // Created, an access review is a question (answered, not stored).
    let kind = match Kind::from_wire(&o.kind) {
        Some(k) if k.is_review() => k,
        _ => parse_kind(&o.kind)?,
    };
    let (object, _) = decode_request(kind, &o.json, FieldValidation::Strict)?;
    Ok(object)
}

/// Decodes the JSON of an object a client writes, through either API: checked against
/// Kubernetes' schema under `mode` (unknown fields refused, or dropped with warnings), then
/// decoded as Skiff's type of `kind`. Returns the object and the warnings for the client.
pub fn decode_request(
    kind: Kind,
    json: &[u8],
    mode: FieldValidation,
) -> Result<(Object, Vec<String>)> {
    let decode_error = |source| ClusterError::Decode { kind, source };
    let mut value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| decode_error(DecodeError::whole(e)))?;
    if !value.is_object() {
        return Err(decode_error(DecodeError::whole(
            "the body must be a JSON object",
        )));
    }
    let warnings = schema::check(kind, &mut value, mode)
        .map_err(|source| ClusterError::Schema { kind, source })?;
    let object = Object::from_value(kind, value).map_err(decode_error)?;
    Ok((object, warnings))
}

/// What the transaction of [`ClusterApi::admit_new`] did for `candidate`: created (at
/// revision `rev`), refused because the name is taken, or `None` when a guard or claim lost a
/// race and the create should be decided again.
/// The keys the transactions of one batch (a CreateMany's, in one log entry) write. Every
/// compare of a transaction is evaluated before any of its writes, so a nested transaction
/// whose compares read a key an earlier one writes would be checked against the state before
/// the batch: two creates of one name would both succeed, the second over the first. Such a
/// transaction is left out of the batch, and its object written alone after it. A quota's
/// guard is the exception: admission counted the batch's earlier pods already (see
/// [`admission::QuotaCounts`]), so pods under a quota stay in the batch.
#[derive(Debug, Default)]
struct BatchWrites(std::collections::BTreeSet<Vec<u8>>);

impl BatchWrites {
    /// Takes `txn` into the batch (its puts among the writes) unless one of its compares
    /// other than `counted` (its quota's guard) reads a key written before; whether it took
    /// it.
    fn admit(&mut self, txn: &TxnRequest, counted: Option<&Compare>) -> bool {
        let reads_written = txn.compare.iter().any(|c| {
            Some(c) != counted
                && !is_empty_range(&c.key, &c.range_end)
                && self
                    .0
                    .range::<[u8], _>(range_bounds(&c.key, &c.range_end))
                    .next()
                    .is_some()
        });
        if reads_written {
            return false;
        }
        for op in &txn.success {
            if let RequestOp::Put(p) = op {
                self.0.insert(p.key.clone());
            }
        }
        true
    }
}

fn created(
    mut candidate: Object,
    rev: i64,
    succeeded: bool,
    responses: &[ResponseOp],
) -> Option<Result<(i64, Object)>> {
    if succeeded {
        candidate.metadata_mut().resource_version = rev.to_string();
        return Some(Ok((rev, candidate)));
    }
    if let Some(ResponseOp::Range(r)) = responses.first()
        && !r.kvs.is_empty()
    {
        return Some(Err(ClusterError::AlreadyExists {
            kind: candidate.kind(),
            name: candidate.metadata().name.clone(),
        }));
    }
    None
}

fn validation_error(object: &Object, source: validation::ValidationErrors) -> ClusterError {
    ClusterError::Invalid {
        kind: object.kind(),
        name: object.metadata().name.clone(),
        source,
    }
}

/// The results of a request of many objects, each one answered (none left is a bug, said as
/// an internal error).
fn answered(results: Vec<Option<Result<Object>>>) -> Vec<Result<Object>> {
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(StoreError::internal("no result").into())))
        .collect()
}

/// A request's `metadata.resourceVersion`, the revision an update is pinned to (unset: none).
fn pinned_revision(object: &Object) -> Result<Option<i64>> {
    match object.metadata().resource_version.as_str() {
        "" => Ok(None),
        rv => rv
            .parse::<i64>()
            .map(Some)
            .map_err(|_| ClusterError::BadResourceVersion {
                value: rv.to_string(),
            }),
    }
}

/// What a status patch of [`ClusterApi::update_status_many`] comes to.
enum Patch {
    /// The stored object already has the status.
    Unchanged(Object),
    /// The object as it will be, and the nested transaction that writes it.
    Write(Object, TxnRequest),
}

/// A transaction that performs `op` if `key` still has `mod_revision`.
fn unchanged_since(key: &str, mod_revision: i64, op: RequestOp) -> TxnRequest {
    TxnRequest {
        compare: vec![compare(
            key,
            CompareTarget::Mod(mod_revision),
            CompareResult::Equal,
        )],
        success: vec![op],
        failure: vec![],
        auth_revision: None,
    }
}

/// Whether an update of a deleted object removed its last finalizer (and nothing else holds
/// it: a bound pod still stopping is removed by its agent). Adding a finalizer to a deleted
/// object is refused, as in Kubernetes.
fn finalizers_done(current: &Object, next: &Object) -> Result<bool> {
    let (cur, new) = (current.metadata(), next.metadata());
    if cur.deletion_timestamp.is_none() {
        return Ok(false);
    }
    if new.finalizers.iter().any(|f| !cur.finalizers.contains(f)) {
        return Err(ClusterError::Immutable {
            kind: next.kind(),
            name: new.name.clone(),
            field: "metadata.finalizers",
            why: "no new finalizers can be added if the object is being deleted",
        });
    }
    let stopping = matches!(next, Object::Pod(p)
        if !p.spec.node_name.is_empty()
            && !p.is_terminal()
            && new.deletion_grace_period_seconds.is_some_and(|g| g > 0));
    Ok(held(current) && !held(next) && !stopping)
}

/// What the first step of a namespace's delete did.
enum Termination {
    /// Marked `Terminating`: the namespace controller takes it from here.
    Marked(Box<(i64, Object)>),
    /// The mark lost a race with another write.
    Raced,
    /// Nothing holds the namespace: it is removed as any object is.
    Free,
}

/// Whether finalizers hold an object: its own, and a namespace's `spec.finalizers`.
fn held(object: &Object) -> bool {
    !object.metadata().finalizers.is_empty()
        || matches!(object, Object::Namespace(ns) if !ns.finalizers().is_empty())
}

/// The propagation of a delete of `kind` that names none (and finds no garbage-collection
/// finalizer on the object): Orphan for batch/v1 Jobs and core/v1 ReplicationControllers, as
/// kube-apiserver keeps it for compatibility (their pods stay; kubectl sends Background),
/// Background for every other kind.
pub fn default_propagation(kind: Kind) -> DeletionPropagation {
    match kind.declared().map(|info| (info.api_version, info.kind)) {
        Some(("batch/v1", "Job") | ("v1", "ReplicationController")) => DeletionPropagation::Orphan,
        _ => DeletionPropagation::Background,
    }
}

/// What kube-apiserver warns a client that deletes a Job without a propagation policy.
pub const JOB_DELETE_WARNING: &str = "child pods are preserved by default when jobs are deleted; \
     set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to \
     suppress this warning";

/// The finalizers an object keeps when deleted with `propagation`, as kube-apiserver decides
/// them for the garbage collector: an orphaning delete leaves `orphan` on it, a foreground one
/// `foregroundDeletion` (never both), a background one neither. Unset, a garbage-collection
/// finalizer already on the object (from an earlier delete) decides; else the kind's
/// `default` ([`default_propagation`]).
///
/// ```text
///  propagation   finalizers after           the object
///  Orphan        others + orphan            stays, marked, until the collector has
///                                           released its dependents
///  Foreground    others + foregroundDeletion  stays, marked, until the collector has
///                                           deleted its dependents
///  Background    others                     goes as before (held only by the others)
/// ```
pub fn deletion_finalizers(
    finalizers: &[String],
    propagation: Option<DeletionPropagation>,
    default: DeletionPropagation,
) -> Vec<String> {
    let is_gc = |f: &String| f == ORPHAN_FINALIZER || f == FOREGROUND_DELETION_FINALIZER;
    let policy = propagation
        .or_else(|| {
            finalizers.iter().find(|f| is_gc(f)).map(|f| {
                if f == ORPHAN_FINALIZER {
                    DeletionPropagation::Orphan
                } else {
                    DeletionPropagation::Foreground
                }
            })
        })
        .unwrap_or(default);
    let mut kept: Vec<String> = finalizers.iter().filter(|f| !is_gc(f)).cloned().collect();
    match policy {
        DeletionPropagation::Orphan => kept.push(ORPHAN_FINALIZER.to_owned()),
        DeletionPropagation::Foreground => kept.push(FOREGROUND_DELETION_FINALIZER.to_owned()),
        DeletionPropagation::Background => {}
    }
    kept
}

fn compare(key: &str, target: CompareTarget, result: CompareResult) -> Compare {
    Compare {
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        result,
        target,
    }
}

/// A random pause before attempt `attempt + 1` of a write whose guard lost a race: up to
/// 1 ms, doubling each attempt (128 ms at most), so writers racing for the same slots (pod
/// CIDRs when a pool is nearly full, a quota's last units) spread out instead of meeting
/// again.
async fn contended_pause(attempt: usize) {
    use rand::Rng as _;
    let cap = 1_000u64 << attempt.min(7);
    let pause = rand::rng().random_range(0..=cap);
    tokio::time::sleep(Duration::from_micros(pause)).await;
}

/// The operations `op` nests below itself, as etcd counts them against its `--max-txn-ops`:
/// a transaction's widest list, plus what its own ops nest.
fn nested_ops(op: &RequestOp) -> usize {
    let RequestOp::Txn(t) = op else {
        return 0;
    };
    let wide = t.compare.len().max(t.success.len()).max(t.failure.len());
    wide + t
        .success
        .iter()
        .chain(&t.failure)
        .map(nested_ops)
        .max()
        .unwrap_or(0)
}

impl ClusterApi {
    /// The API of `member` with the default settings, open to everyone (no authentication,
    /// everything allowed).
    pub fn new(kv: Arc<dyn Kv>) -> Self {
        ClusterApi::with_access(kv, Arc::new(Access::open()), ApiConfig::default())
    }

    /// The API of `member` under `access`'s rules, with `config`.
    pub fn with_access(kv: Arc<dyn Kv>, access: Arc<Access>, config: ApiConfig) -> Self {
        ClusterApi {
            kv,
            uid_seq: Arc::new(AtomicU64::new(0)),
            event_lease: Arc::new(Mutex::new(None)),
            fence: None,
            access,
            requester: None,
            tracker: None,
            config: Arc::new(config),
            quota_usage: Arc::default(),
        }
    }

    /// This API writing for `user` (see [`ClusterApi::requester`]).
    pub fn as_user(&self, user: &User) -> ClusterApi {
        ClusterApi {
            requester: Some(Arc::new(user.clone())),
            ..self.clone()
        }
    }

    /// This API with `tracker` recording the fields its creates and updates change.
    pub fn tracked_by(&self, tracker: Arc<dyn FieldTracker>) -> ClusterApi {
        ClusterApi {
            tracker: Some(tracker),
            ..self.clone()
        }
    }

    /// NodeRestriction: what a node agent may write to a Node (`current` is what an update
    /// replaces).
    fn restrict(&self, current: Option<&Object>, next: &Object) -> Result<()> {
        let Some(user) = &self.requester else {
            return Ok(());
        };
        crate::access::node::restrict(user, current, next).map_err(|why| ClusterError::Forbidden {
            kind: next.kind(),
            name: next.metadata().name.clone(),
            why,
        })
    }

    /// A request's approval or its certificate is given only by those the signer it names
    /// lets: `approve` (through the `approval` subresource) or `sign` (through `status`) on
    /// the resource `signers` of certificates.k8s.io, named as the signer or as its domain's
    /// `<domain>/*`, as kube-apiserver checks them.
    fn authorize_signer(&self, part: Part, current: &Object, next: &Object) -> Result<()> {
        let (
            Some(user),
            Object::CertificateSigningRequest(cur),
            Object::CertificateSigningRequest(new),
        ) = (&self.requester, current, next)
        else {
            return Ok(());
        };
        let verb = match part {
            Part::Approval
                if cur.is_approved() != new.is_approved() || cur.is_denied() != new.is_denied() =>
            {
                "approve"
            }
            Part::Status if cur.certificate() != new.certificate() => "sign",
            _ => return Ok(()),
        };
        if self.access.allows_everything() {
            return Ok(());
        }
        let signer = &new.spec.signer_name;
        let wildcard = signer
            .split_once('/')
            .map(|(domain, _)| format!("{domain}/*"))
            .unwrap_or_default();
        let asked = |name: &str| {
            let group = Kind::CertificateSigningRequest.group();
            Attributes::resource(verb, group, "signers", None, "", name)
        };
        if self.authorize(user, asked(signer)).is_ok()
            || self.authorize(user, asked(&wildcard)).is_ok()
        {
            return Ok(());
        }
        Err(ClusterError::Forbidden {
            kind: Kind::CertificateSigningRequest,
            name: new.metadata.name.clone(),
            why: format!(
                "user {:?} is not permitted to {verb} requests with signerName {signer:?}",
                user.name
            ),
        })
    }

    /// Whether `user` may do `attributes` (see [`kind_attributes`]): the one check both
    /// faces make.
    pub fn authorize(&self, user: &User, attributes: Attributes) -> Result<()> {
        if self.access.allows_everything() {
            return Ok(());
        }
        self.access
            .check(user, attributes, self)
            .map_err(ClusterError::Denied)
    }

    /// This API with every write fenced: it commits only while the etcd key `key` still has
    /// create revision `create_revision` (a leader-elected writer's leadership key), so a
    /// deposed leader's writes fail instead of landing after another leader's.
    pub fn fenced(&self, key: &str, create_revision: i64) -> ClusterApi {
        ClusterApi {
            fence: Some(Arc::new((key.to_owned(), create_revision))),
            ..self.clone()
        }
    }

    /// The lease an object is written under: events expire (`event_ttl` after their last
    /// write); every other kind lives until deleted.
    async fn lease_for(&self, kind: Kind) -> Result<i64> {
        if kind != Kind::Event {
            return Ok(0);
        }
        // The lock is never held across an await: two writers may both grant, and the later
        // grant wins the cache; the other lease just expires with its events.
        let event_ttl = self.config.event_ttl;
        let reuse = EVENT_LEASE_REUSE.min(event_ttl / 10);
        let cached = *self
            .event_lease
            .lock()
            .expect("invariant: the event lease lock is never poisoned");
        if let Some((id, at)) = cached
            && at.elapsed() < reuse
        {
            return Ok(id);
        }
        let ttl = (event_ttl + reuse).as_secs_f64().ceil() as i64;
        let id = self.kv.lease_grant(ttl).await?;
        *self
            .event_lease
            .lock()
            .expect("invariant: the event lease lock is never poisoned") =
            Some((id, Instant::now()));
        Ok(id)
    }

    /// Forgets the event lease after a failed write (it may have been revoked by hand).
    fn forget_lease(&self, kind: Kind) {
        if kind == Kind::Event {
            *self
                .event_lease
                .lock()
                .expect("invariant: the event lease lock is never poisoned") = None;
        }
    }

    /// `txn` for a write of `kind`, which drops the cached event lease when it fails.
    async fn write_txn(&self, kind: Kind, txn: TxnRequest) -> Result<(i64, TxnResponse)> {
        let r = self.txn(txn).await;
        if r.is_err() {
            self.forget_lease(kind);
        }
        r
    }

    /// Reads are linearizable unless the caller accepts a possibly stale local view.
    pub async fn barrier(&self, serializable: bool) -> Result<()> {
        if !serializable {
            self.kv.barrier().await?;
        }
        Ok(())
    }

    /// The keyspace's current revision.
    pub fn revision(&self) -> i64 {
        self.keyspace().read().revision()
    }

    /// The keyspace, to read and watch.
    pub fn keyspace(&self) -> Keyspace {
        self.kv.keyspace()
    }

    /// The current revision and the objects under a key prefix (or one key).
    pub fn range(
        &self,
        kind: Kind,
        key: &[u8],
        range_end: &[u8],
        revision: i64,
    ) -> Result<(i64, Vec<Stored>)> {
        let (at, items, _) = self.range_chunk(kind, key, range_end, revision, 0)?;
        Ok((at, items))
    }

    /// At most `limit` objects (all when 0) from `key` on, at `revision` (the latest when 0):
    /// the revision read, the objects, and whether more follow.
    pub fn range_chunk(
        &self,
        kind: Kind,
        key: &[u8],
        range_end: &[u8],
        revision: i64,
        limit: usize,
    ) -> Result<(i64, Vec<Stored>, bool)> {
        let keyspace = self.keyspace();
        let mvcc = keyspace.read();
        let resp = mvcc.range(&RangeRequest {
            key: key.to_vec(),
            range_end: range_end.to_vec(),
            revision,
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
            ..RangeRequest::default()
        })?;
        let at = if revision > 0 {
            revision
        } else {
            mvcc.revision()
        };
        drop(mvcc);
        let items = resp
            .kvs
            .iter()
            .map(|kv| decode(kind, kv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((at, items, resp.more))
    }

    pub fn get_local(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<(i64, Option<Stored>)> {
        let key = kind.key(namespace, name);
        let (rev, mut items) = self.range(kind, key.as_bytes(), &[], 0)?;
        Ok((rev, items.pop()))
    }

    /// Independent writes, each op a nested transaction that takes its own branch (batch
    /// Bind, CreateMany): in one transaction, so one revision, when they fit the store's
    /// limit on operations (a member has none; an etcd takes 128 by default), else in as
    /// few as fit. The last revision and each op's response, in order.
    pub(super) async fn txn_each(&self, ops: Vec<RequestOp>) -> Result<(i64, Vec<ResponseOp>)> {
        // etcd counts a nested transaction's operations against what its parent leaves of
        // the limit: a chunk of n ops, each nesting at most `deepest`, needs n + deepest.
        let deepest = ops.iter().map(nested_ops).max().unwrap_or(0);
        let max = self.kv.max_txn_ops().saturating_sub(deepest).max(1);
        let mut revision = self.revision();
        let mut responses = Vec::with_capacity(ops.len());
        let mut ops = ops.into_iter().peekable();
        while ops.peek().is_some() {
            let (rev, resp) = self
                .txn(TxnRequest {
                    compare: Vec::new(),
                    success: ops.by_ref().take(max).collect(),
                    failure: Vec::new(),
                    auth_revision: None,
                })
                .await?;
            revision = rev;
            responses.extend(resp.responses);
        }
        Ok((revision, responses))
    }

    /// Applies a transaction (with this handle's fence among its comparisons): the revision
    /// after it and its response. A fenced one that failed because the fence moved is
    /// [`ClusterError::Fenced`], not a conflict.
    pub async fn txn(&self, mut txn: TxnRequest) -> Result<(i64, TxnResponse)> {
        if let Some(fence) = &self.fence {
            txn.compare.push(compare(
                &fence.0,
                CompareTarget::Create(fence.1),
                CompareResult::Equal,
            ));
        }
        let (revision, t) = self.kv.txn(txn).await?;
        if let Some(fence) = &self.fence
            && !t.succeeded
        {
            self.barrier(false).await?;
            let held = self
                .keyspace()
                .read()
                .range(&RangeRequest {
                    key: fence.0.as_bytes().to_vec(),
                    ..RangeRequest::default()
                })?
                .kvs
                .first()
                .is_some_and(|kv| kv.create_revision == fence.1);
            if !held {
                return Err(ClusterError::Fenced {
                    key: fence.0.clone(),
                });
            }
        }
        Ok((revision, t))
    }

    fn new_uid(&self) -> String {
        let n = self.uid_seq.fetch_add(1, Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let id = self.kv.header().member_id;
        let a = t ^ id.rotate_left(29);
        let b = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ id;
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (a >> 32) as u32,
            (a >> 16) as u16,
            a & 0xfff,
            b & 0xfff,
            b >> 16 & 0xffff_ffff_ffff
        )
    }

    /// Create: defaults, validation, admission, then a put guarded by "key absent". An
    /// object without a name but with `generateName` gets a generated one, tried again (up
    /// to [`WRITE_ATTEMPTS`] times) when it is taken.
    pub async fn create(&self, object: Object, dry_run: bool) -> Result<(i64, Object)> {
        let meta = object.metadata();
        if !meta.name.is_empty() || meta.generate_name.is_empty() {
            return self.create_named(object, dry_run).await;
        }
        let prefix = meta.generate_name.clone();
        for _ in 0..WRITE_ATTEMPTS {
            let mut candidate = object.clone();
            candidate.metadata_mut().name = generated_name(&prefix);
            match self.create_named(candidate, dry_run).await {
                Err(ClusterError::AlreadyExists { .. }) => continue,
                Err(e) => return Err(e.naming(&prefix)),
                done => return done,
            }
        }
        Err(ClusterError::Contended {
            kind: object.kind(),
            name: prefix,
        })
    }

    async fn create_named(&self, object: Object, dry_run: bool) -> Result<(i64, Object)> {
        let object = self.new_object(object).await?;
        let kind = object.kind();
        for attempt in 0..WRITE_ATTEMPTS {
            self.barrier(false).await?;
            let (candidate, txn, _) = self
                .admit_new(&object, &mut admission::QuotaCounts::default())
                .await?;
            if dry_run {
                return Ok((self.revision(), candidate));
            }
            let (rev, resp) = self.write_txn(kind, txn).await?;
            match created(candidate, rev, resp.succeeded, &resp.responses) {
                Some(done) => return done,
                // A quota guard or a pod CIDR claim lost a race: count again, after a pause
                // that spreads the writers racing for the same slots.
                None => contended_pause(attempt).await,
            }
        }
        Err(ClusterError::Contended {
            kind,
            name: object.metadata().name.clone(),
        })
    }

    /// Many objects created in one log entry, each admitted and checked on its own as
    /// [`ClusterApi::create`] checks one: one result per object, in order. A refused object
    /// writes nothing, and does not hold the others back. An object with `generateName` gets
    /// a name in the batch (a ReplicaSet's burst of pods is one entry); one whose name was
    /// taken meanwhile, or that lost a race with another writer's quota or address claim, is
    /// tried again alone. So is an object whose checks read what an earlier one of the batch
    /// writes (see [`BatchWrites`]): its key, or the pods a quota counts.
    pub async fn create_many(&self, objects: Vec<Object>) -> Result<(i64, Vec<Result<Object>>)> {
        self.barrier(false).await?;
        let mut results: Vec<Option<Result<Object>>> = Vec::with_capacity(objects.len());
        let mut ops = Vec::new();
        // (index, object as admitted, the object as given) of each one in the transaction.
        let mut proposed = Vec::new();
        let mut writes = BatchWrites::default();
        let mut counts = admission::QuotaCounts::default();
        // (index, the object as given) of each one created alone after the batch.
        let mut alone = Vec::new();
        for (i, given) in objects.into_iter().enumerate() {
            let meta = given.metadata();
            let prefix = (meta.name.is_empty() && !meta.generate_name.is_empty())
                .then(|| meta.generate_name.clone());
            let mut object = given.clone();
            if let Some(prefix) = &prefix {
                object.metadata_mut().name = generated_name(prefix);
            }
            let admitted = match self.new_object(object).await {
                Ok(o) => self.admit_new(&o, &mut counts).await,
                Err(e) => Err(e),
            };
            match admitted {
                Ok((candidate, txn, counted)) => {
                    if writes.admit(&txn, counted.as_ref()) {
                        ops.push(RequestOp::Txn(txn));
                        proposed.push((i, candidate, given));
                    } else {
                        alone.push((i, given));
                    }
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(match &prefix {
                    Some(prefix) => e.naming(prefix),
                    None => e,
                }))),
            }
        }
        let mut revision = self.revision();
        if !ops.is_empty() {
            let (rev, responses) = self.txn_each(ops).await.inspect_err(|_| {
                // A failed write may have been refused for its lease: only Events have one.
                self.forget_lease(Kind::Event);
            })?;
            revision = rev;
            for ((i, candidate, given), op) in proposed.into_iter().zip(responses) {
                let ResponseOp::Txn(t) = op else {
                    results[i] = Some(Err(StoreError::internal("unexpected response").into()));
                    continue;
                };
                let generated = given.metadata().name.is_empty();
                let done = match created(candidate, rev, t.succeeded, &t.responses) {
                    // A generated name someone else holds: another one, alone.
                    Some(Err(ClusterError::AlreadyExists { .. })) if generated => None,
                    done => done,
                };
                match done {
                    Some(done) => results[i] = Some(done.map(|(_, o)| o)),
                    None => alone.push((i, given)),
                }
            }
        }
        alone.sort_unstable_by_key(|(i, _)| *i);
        for (i, given) in alone {
            results[i] = Some(self.create(given, false).await.map(|(r, o)| {
                revision = revision.max(r);
                o
            }));
        }
        Ok((revision, answered(results)))
    }

    /// What the server sets on any new object (uid, creation time, generation; a pod's phase
    /// and, when it names its node, its binding), then defaults and the checks that need no
    /// other object.
    async fn new_object(&self, mut object: Object) -> Result<Object> {
        let kind = object.kind();
        if kind == Kind::Binding {
            return Err(ClusterError::CreateBinding);
        }
        if !kind.is_stored() {
            return Err(ClusterError::UnknownKind {
                kind: kind.name().to_owned(),
            });
        }
        {
            let m = object.metadata_mut();
            m.resource_version.clear();
            m.uid = self.new_uid();
            m.creation_timestamp = Some(Time::now());
            m.deletion_timestamp = None;
            m.deletion_grace_period_seconds = None;
            m.generation = Some(1);
        }
        if let Object::CertificateSigningRequest(csr) = &mut object {
            // Who asks is who authenticated, whatever the body says; a new request has no
            // approval and no certificate.
            let user = self
                .requester
                .as_deref()
                .cloned()
                .unwrap_or_else(User::anonymous);
            csr.spec.username = user.name;
            csr.spec.uid = user.uid;
            csr.spec.groups = user.groups;
            csr.spec.extra.clear();
            csr.status = None;
        }
        if let Object::Namespace(ns) = &mut object {
            ns.prepare_for_create();
        }
        if let Object::Pod(p) = &mut object {
            let status = p.status.get_or_insert_with(Default::default);
            status.phase.get_or_insert(PodPhase::Pending);
            if !p.spec.node_name.is_empty() {
                // Bound at birth, without a scheduler.
                let node = p.spec.node_name.clone();
                bind::assign(p, &node);
            }
        }
        defaults::apply(&mut object);
        self.restrict(None, &object)?;
        if object.kind().is_namespaced() && object.metadata().namespace == "default" {
            self.ensure_default_namespace().await?;
        }
        Ok(object)
    }

    /// Admission and validation of a new object against the current state (read after a
    /// barrier), and the transaction that creates it: "the key is absent and every admission
    /// guard holds" → put it, with the claims it makes; else read the key. Quota usage is
    /// counted into `counts` (see [`admission::QuotaCounts`]); the quota's guard is also
    /// returned on its own.
    async fn admit_new(
        &self,
        object: &Object,
        counts: &mut admission::QuotaCounts,
    ) -> Result<(Object, TxnRequest, Option<Compare>)> {
        let kind = object.kind();
        let key = object.key();
        let mut candidate = object.clone();
        let admitted = admission::admit_create(self, &mut candidate, counts)?;
        let claim = self.claim_pod_cidr(&mut candidate)?;
        let addresses = self.service_addresses(None, &mut candidate)?;
        validation::validate(&candidate).map_err(|e| validation_error(&candidate, e))?;
        if let Some(tracker) = &self.tracker {
            tracker.track(None, &mut candidate);
        }
        let mut compare = vec![compare(
            &key,
            CompareTarget::Create(0),
            CompareResult::Equal,
        )];
        compare.extend(admitted.guards);
        compare.extend(admitted.counted.clone());
        let mut success = vec![RequestOp::Put(PutRequest {
            key: key.as_bytes().to_vec(),
            value: encode(&candidate),
            lease: self.lease_for(kind).await?,
            ..PutRequest::default()
        })];
        for claim in claim.into_iter().chain(addresses.claims) {
            compare.push(claim.compare);
            success.push(claim.put);
        }
        let txn = TxnRequest {
            compare,
            success,
            failure: vec![RequestOp::Range(RangeRequest {
                key: key.as_bytes().to_vec(),
                ..RangeRequest::default()
            })],
            auth_revision: None,
        };
        Ok((candidate, txn, admitted.counted))
    }

    /// The `default` namespace exists from the first write into it on, as in Kubernetes,
    /// where the API server creates it at start-up.
    async fn ensure_default_namespace(&self) -> Result<()> {
        let (_, found) = self.get_local(Kind::Namespace, "", "default")?;
        if found.is_some() {
            return Ok(());
        }
        let mut namespace = skiff_proto::api::Namespace::default();
        namespace.prepare_for_create();
        let mut ns = Object::Namespace(namespace);
        {
            let m = ns.metadata_mut();
            m.name = "default".into();
            m.uid = self.new_uid();
            m.creation_timestamp = Some(Time::now());
        }
        defaults::apply(&mut ns);
        let key = ns.key();
        self.txn(TxnRequest {
            compare: vec![compare(
                &key,
                CompareTarget::Create(0),
                CompareResult::Equal,
            )],
            success: vec![RequestOp::Put(PutRequest {
                key: key.into_bytes(),
                value: encode(&ns),
                ..PutRequest::default()
            })],
            failure: vec![],
            auth_revision: None,
        })
        .await?;
        Ok(())
    }

    /// Writes `next` over `current` if the key still has `current`'s mod revision.
    pub async fn replace(&self, current: &Stored, next: &Object) -> Result<Option<(i64, Object)>> {
        self.replace_with(current, next, addresses::Allocation::default(), None)
            .await
    }

    /// The transaction that writes `next` over `current` if the key still has `current`'s
    /// mod revision, making and giving back the address claims of `allocation` with it.
    async fn replace_txn(
        &self,
        current: &Stored,
        next: &Object,
        allocation: addresses::Allocation,
        guard: Option<Compare>,
    ) -> Result<TxnRequest> {
        self.restrict(Some(&current.object), next)?;
        let key = next.key();
        let put = RequestOp::Put(PutRequest {
            key: key.as_bytes().to_vec(),
            value: encode(next),
            lease: self.lease_for(next.kind()).await?,
            ..PutRequest::default()
        });
        let mut txn = unchanged_since(&key, current.mod_revision, put);
        txn.compare.extend(guard);
        for claim in allocation.claims {
            txn.compare.push(claim.compare);
            txn.success.push(claim.put);
        }
        txn.success.extend(allocation.releases);
        Ok(txn)
    }

    /// [`ClusterApi::replace`], making and giving back the address claims of `allocation`
    /// in the same transaction.
    async fn replace_with(
        &self,
        current: &Stored,
        next: &Object,
        allocation: addresses::Allocation,
        guard: Option<Compare>,
    ) -> Result<Option<(i64, Object)>> {
        let txn = self.replace_txn(current, next, allocation, guard).await?;
        let (rev, resp) = self.write_txn(next.kind(), txn).await?;
        if !resp.succeeded {
            return Ok(None);
        }
        let mut out = next.clone();
        out.metadata_mut().resource_version = rev.to_string();
        Ok(Some((rev, out)))
    }

    /// Deletes the key of `current` if it still has `current`'s mod revision; the revision
    /// of the delete, or `None` when another write came first.
    async fn remove(&self, current: &Stored) -> Result<Option<i64>> {
        let key = current.object.key();
        let delete = RequestOp::DeleteRange(DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            range_end: Vec::new(),
            prev_kv: false,
        });
        let mut txn = unchanged_since(&key, current.mod_revision, delete);
        if let Some(release) = self.release_pod_cidr(&current.object) {
            txn.success.push(release);
        }
        txn.success
            .extend(self.release_service_addresses(&current.object));
        let (rev, resp) = self.txn(txn).await?;
        Ok(resp.succeeded.then_some(rev))
    }

    /// A namespace's delete, as kube-apiserver's: the first marks it `Terminating` (nothing
    /// new may be created in it from then on) and, while `spec.finalizers` or
    /// `metadata.finalizers` hold it, returns it as marked; the namespace controller deletes
    /// what it holds and then removes the `kubernetes` finalizer, which removes it. A delete
    /// of a namespace already terminating and still held is a conflict.
    async fn terminate_namespace(
        &self,
        current: &Stored,
        ns: &skiff_proto::api::Namespace,
    ) -> Result<Termination> {
        let name = &ns.metadata.name;
        if system::IMMORTAL_NAMESPACES.contains(&name.as_str()) {
            return Err(ClusterError::Forbidden {
                kind: Kind::Namespace,
                name: name.clone(),
                why: "this namespace may not be deleted".into(),
            });
        }
        if !held(&current.object) {
            return Ok(Termination::Free);
        }
        if ns.metadata.deletion_timestamp.is_some() {
            return Err(ClusterError::NamespaceTerminating { name: name.clone() });
        }
        let mut next = ns.clone();
        next.metadata.deletion_timestamp = Some(Time::now());
        next.metadata.deletion_grace_period_seconds = Some(0);
        next.status.get_or_insert_with(Default::default).phase =
            Some(skiff_proto::api::NamespacePhase::Terminating);
        Ok(
            match self.replace(current, &Object::Namespace(next)).await? {
                Some(done) => Termination::Marked(Box::new(done)),
                None => Termination::Raced,
            },
        )
    }

    /// Update of `part` of an object ([`Part`]). A `resourceVersion` in the request pins the
    /// write to that version.
    pub async fn update(&self, object: Object, part: Part, dry_run: bool) -> Result<(i64, Object)> {
        let kind = object.kind();
        let name = object.metadata().name.clone();
        let namespace = object.metadata().namespace.clone();
        let pinned = pinned_revision(&object)?;
        for _ in 0..WRITE_ATTEMPTS {
            self.barrier(false).await?;
            let (_, current) = self.get_local(kind, &namespace, &name)?;
            let current = current.ok_or_else(|| not_found(kind, &name))?;
            if pinned.is_some_and(|rv| rv != current.mod_revision) {
                return Err(conflict(kind, &name));
            }
            let (next, allocation) = self.next_version(&current.object, &object, part)?;
            // A quota counts what the update adds (a Service's node ports, a claim's storage).
            let guard = match part {
                Part::Main => admission::admit_update(self, &current.object, &next)?,
                Part::Status | Part::Approval | Part::Finalize => None,
            };
            let finalized = finalizers_done(&current.object, &next)?;
            if dry_run {
                return Ok((current.mod_revision, next));
            }
            if finalized {
                // The last finalizer of a deleted object is gone: so is the object.
                if let Some(rev) = self.remove(&current).await? {
                    let mut out = next;
                    out.metadata_mut().resource_version = rev.to_string();
                    return Ok((rev, out));
                }
            } else if let Some(done) = self
                .replace_with(&current, &next, allocation, guard)
                .await?
            {
                return Ok(done);
            }
            if pinned.is_some() {
                return Err(conflict(kind, &name));
            }
        }
        Err(conflict(kind, &name))
    }

    /// What an update of `part` makes of `current`: the request's part over the stored
    /// object, defaulted, its addresses allocated, checked and validated.
    fn next_version(
        &self,
        current: &Object,
        request: &Object,
        part: Part,
    ) -> Result<(Object, addresses::Allocation)> {
        let mut next = match part {
            Part::Main => admission::with_spec(current, request)?,
            Part::Status => admission::with_status(current, request)?,
            Part::Approval => admission::with_approval(current, request)?,
            Part::Finalize => admission::with_finalizers(current, request)?,
        };
        self.authorize_signer(part, current, &next)?;
        defaults::apply(&mut next);
        let allocation = self.service_addresses(Some(current), &mut next)?;
        validation::validate_write(&next, Some(current)).map_err(|e| validation_error(&next, e))?;
        if let Some(tracker) = &self.tracker {
            tracker.track(Some(current), &mut next);
        }
        Ok((next, allocation))
    }

    /// Many objects' statuses in one log entry, each checked as [`ClusterApi::update`] checks
    /// a status update, and patched rather than replaced: stored conditions of types the
    /// request does not carry stay ([`Object::keep_stored_conditions`]). A status that
    /// changes nothing is not written. `metadata.uid`, when set, must be the stored object's;
    /// `metadata.resourceVersion`, when set, pins the write. One result per object, in
    /// order; a refused one writes nothing and holds nobody back, and one that lost a race
    /// with another writer is read and tried again (with the next round's others).
    pub async fn update_status_many(
        &self,
        objects: Vec<Object>,
    ) -> Result<(i64, Vec<Result<Object>>)> {
        let mut results: Vec<Option<Result<Object>>> = objects.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..objects.len()).collect();
        let mut revision = self.revision();
        for _ in 0..WRITE_ATTEMPTS {
            if pending.is_empty() {
                break;
            }
            self.barrier(false).await?;
            let mut ops = Vec::new();
            let mut proposed = Vec::new();
            // One write of an object per round: every compare of a transaction reads the
            // state before it, so a second one in the same entry would pass the same check
            // and overwrite the first. A later status of the same object waits a round.
            let mut keys = std::collections::HashSet::new();
            let mut later = Vec::new();
            for i in std::mem::take(&mut pending) {
                let m = objects[i].metadata();
                if !keys.insert(objects[i].kind().key(&m.namespace, &m.name)) {
                    later.push(i);
                    continue;
                }
                match self.status_patch(&objects[i]).await {
                    Ok(Patch::Unchanged(stored)) => results[i] = Some(Ok(stored)),
                    Ok(Patch::Write(next, txn)) => {
                        ops.push(RequestOp::Txn(txn));
                        proposed.push((i, next));
                    }
                    Err(e) => results[i] = Some(Err(e)),
                }
            }
            if !ops.is_empty() {
                let (rev, responses) = self.txn_each(ops).await?;
                revision = rev;
                for ((i, mut next), op) in proposed.into_iter().zip(responses) {
                    if matches!(op, ResponseOp::Txn(t) if t.succeeded) {
                        next.metadata_mut().resource_version = rev.to_string();
                        results[i] = Some(Ok(next));
                    } else if !objects[i].metadata().resource_version.is_empty() {
                        results[i] = Some(Err(conflict(next.kind(), &next.metadata().name)));
                    } else {
                        pending.push(i);
                    }
                }
            }
            // In request order, so an object's statuses are written in the order given.
            pending.extend(later);
            pending.sort_unstable();
        }
        for i in pending {
            let m = objects[i].metadata();
            results[i] = Some(Err(ClusterError::Contended {
                kind: objects[i].kind(),
                name: m.name.clone(),
            }));
        }
        Ok((revision, answered(results)))
    }

    /// One object of [`ClusterApi::update_status_many`] against the state read after the
    /// round's barrier.
    async fn status_patch(&self, object: &Object) -> Result<Patch> {
        let kind = object.kind();
        let m = object.metadata();
        let pinned = pinned_revision(object)?;
        let (_, current) = self.get_local(kind, &m.namespace, &m.name)?;
        let current = current.ok_or_else(|| not_found(kind, &m.name))?;
        let stored = current.object.metadata();
        if !m.uid.is_empty() && m.uid != stored.uid {
            return Err(ClusterError::OtherUid {
                kind,
                name: m.name.clone(),
                uid: m.uid.clone(),
                stored: stored.uid.clone(),
            });
        }
        if pinned.is_some_and(|rv| rv != current.mod_revision) {
            return Err(conflict(kind, &m.name));
        }
        let mut request = object.clone();
        request.keep_stored_conditions(&current.object);
        let (next, allocation) = self.next_version(&current.object, &request, Part::Status)?;
        if next == current.object {
            return Ok(Patch::Unchanged(current.object));
        }
        let txn = self.replace_txn(&current, &next, allocation, None).await?;
        Ok(Patch::Write(next, txn))
    }

    /// Delete. A pod bound to a node is deleted gracefully: it gets a deletionTimestamp and its
    /// agent removes it once the containers have stopped; an unbound or finished pod, or a
    /// grace period of 0, is removed at once. `propagation` decides the garbage-collection
    /// finalizer the object gets ([`deletion_finalizers`]); an object held by any finalizer is
    /// only marked, and goes with the update that removes its last finalizer.
    pub async fn delete(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        pinned: i64,
        grace: Option<i64>,
        propagation: Option<DeletionPropagation>,
    ) -> Result<(i64, Object)> {
        for _ in 0..WRITE_ATTEMPTS {
            self.barrier(false).await?;
            let (_, current) = self.get_local(kind, namespace, name)?;
            let current = current.ok_or_else(|| not_found(kind, name))?;
            if pinned > 0 && pinned != current.mod_revision {
                return Err(conflict(kind, name));
            }
            if let Object::Namespace(ns) = &current.object {
                match self.terminate_namespace(&current, ns).await? {
                    Termination::Marked(done) => return Ok(*done),
                    Termination::Raced if pinned > 0 => return Err(conflict(kind, name)),
                    Termination::Raced => continue,
                    // Nothing holds it: it goes as any object does, below.
                    Termination::Free => {}
                }
            }
            // Every kind may own others (the collector sees every kind but events), so a
            // delete's propagation is honoured, but a pod's: it is deleted as in the
            // background (a pod marked for foreground deletion would be released by the
            // collector before its agent had stopped it).
            let propagation = if kind == Kind::Pod {
                Some(DeletionPropagation::Background)
            } else {
                propagation
            };
            let finalizers = deletion_finalizers(
                &current.object.metadata().finalizers,
                propagation,
                default_propagation(kind),
            );
            if !finalizers.is_empty() {
                // Finalizers hold the object: the delete only marks it (once); the update
                // that removes the last finalizer removes it.
                let grace = match &current.object {
                    Object::Pod(p) if !p.spec.node_name.is_empty() && !p.is_terminal() => grace
                        .or(p.spec.termination_grace_period_seconds)
                        .unwrap_or(30),
                    _ => 0,
                };
                let marked = current.object.metadata();
                // A later delete may only shorten the grace period (an agent done stopping
                // the pod deletes with 0), or change the propagation.
                if marked.deletion_timestamp.is_some()
                    && marked.finalizers == finalizers
                    && marked
                        .deletion_grace_period_seconds
                        .is_none_or(|g| g <= grace)
                {
                    return Ok((current.mod_revision, current.object));
                }
                let mut next = current.object.clone();
                let meta = next.metadata_mut();
                let shorter = meta.deletion_grace_period_seconds.is_none_or(|g| grace < g);
                if meta.deletion_timestamp.is_none() || shorter {
                    meta.deletion_timestamp = Time::from_unix(Time::now().unix() + grace);
                    meta.deletion_grace_period_seconds = Some(grace);
                }
                meta.finalizers = finalizers;
                match self.replace(&current, &next).await? {
                    Some(done) => return Ok(done),
                    None if pinned > 0 => return Err(conflict(kind, name)),
                    None => continue,
                }
            }
            if let Object::Pod(pod) = &current.object {
                let bound = !pod.spec.node_name.is_empty() && !pod.is_terminal();
                let grace = grace
                    .or(pod.spec.termination_grace_period_seconds)
                    .unwrap_or(30);
                if bound && grace > 0 {
                    let mut next = current.object.clone();
                    let meta = next.metadata_mut();
                    let shorter = meta.deletion_grace_period_seconds.is_none_or(|g| grace < g);
                    if meta.deletion_timestamp.is_some() && !shorter {
                        return Ok((current.mod_revision, current.object));
                    }
                    meta.deletion_timestamp = Time::from_unix(Time::now().unix() + grace);
                    meta.deletion_grace_period_seconds = Some(grace);
                    match self.replace(&current, &next).await? {
                        Some(done) => return Ok(done),
                        None if pinned > 0 => return Err(conflict(kind, name)),
                        None => continue,
                    }
                }
            }
            if let Some(rev) = self.remove(&current).await? {
                return Ok((rev, current.object));
            }
            if pinned > 0 {
                return Err(conflict(kind, name));
            }
        }
        Err(conflict(kind, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|f| (*f).to_owned()).collect()
    }

    /// A create as admission builds it: its key absent, and, under a quota, no pod of the
    /// namespace created since the count (that guard also returned on its own).
    fn create_txn(key: &str, quota_over: Option<&str>) -> (TxnRequest, Option<Compare>) {
        let counted = quota_over.map(|prefix| Compare {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            result: CompareResult::Less,
            target: CompareTarget::Create(10),
        });
        let mut guards = vec![compare(key, CompareTarget::Create(0), CompareResult::Equal)];
        guards.extend(counted.clone());
        let txn = TxnRequest {
            compare: guards,
            success: vec![RequestOp::Put(PutRequest {
                key: key.as_bytes().to_vec(),
                ..PutRequest::default()
            })],
            failure: Vec::new(),
            auth_revision: None,
        };
        (txn, counted)
    }

    /// A batch takes creates that read nothing an earlier one writes, and leaves out a second
    /// create of a key; a quota's guard over the pods the batch writes does not count as a
    /// read (admission counted those pods), any other read of them does.
    #[test]
    fn a_batch_leaves_out_what_reads_its_own_writes() {
        let mut batch = BatchWrites::default();
        let mut admit = |key: &str, quota_over: Option<&str>| {
            let (txn, counted) = create_txn(key, quota_over);
            batch.admit(&txn, counted.as_ref())
        };
        assert!(admit("/registry/pods/a/p1", None));
        assert!(admit("/registry/pods/b/p1", None));
        assert!(!admit("/registry/pods/a/p1", None), "same key");
        assert!(
            admit("/registry/pods/a/p2", Some("/registry/pods/a/")),
            "a quota over namespace a's pods, which counted them"
        );
        assert!(
            admit("/registry/pods/a/p3", Some("/registry/pods/a/")),
            "and the pod just taken"
        );
        let (mut txn, _) = create_txn("/registry/pods/a/p4", Some("/registry/pods/a/"));
        assert!(
            !batch.admit(&txn, None),
            "the same range read by a guard that did not count the batch"
        );
        txn.compare.truncate(1);
        assert!(batch.admit(&txn, None), "without it");
    }

    /// Each policy leaves at most one collector finalizer, after the others; unset, the one
    /// already there stands, and with none, Background adds nothing.
    #[test]
    fn deletion_finalizers_follow_the_policy() {
        use DeletionPropagation::*;
        let keep = "example.com/keep";
        for (before, policy, after) in [
            (&[][..], None, &[][..]),
            (&[], Some(Background), &[]),
            (&[], Some(Orphan), &[ORPHAN_FINALIZER][..]),
            (&[], Some(Foreground), &[FOREGROUND_DELETION_FINALIZER]),
            (&[keep], Some(Orphan), &[keep, ORPHAN_FINALIZER]),
            (&[ORPHAN_FINALIZER, keep], None, &[keep, ORPHAN_FINALIZER]),
            (
                &[FOREGROUND_DELETION_FINALIZER],
                None,
                &[FOREGROUND_DELETION_FINALIZER],
            ),
            (
                &[FOREGROUND_DELETION_FINALIZER],
                Some(Orphan),
                &[ORPHAN_FINALIZER],
            ),
            (&[ORPHAN_FINALIZER, keep], Some(Background), &[keep]),
        ] {
            assert_eq!(
                deletion_finalizers(&strings(before), policy, Background),
                strings(after),
                "{before:?} {policy:?}"
            );
        }
        // A Job deleted without a policy orphans its pods, unless its finalizers say
        // otherwise.
        let job = Kind::from_name("Job").expect("declared");
        assert_eq!(default_propagation(job), Orphan);
        let rc = Kind::from_name("ReplicationController").expect("declared");
        assert_eq!(default_propagation(rc), Orphan);
        assert_eq!(default_propagation(Kind::Deployment), Background);
        assert_eq!(
            deletion_finalizers(&[], None, default_propagation(job)),
            [ORPHAN_FINALIZER]
        );
        assert_eq!(
            deletion_finalizers(
                &strings(&[FOREGROUND_DELETION_FINALIZER]),
                None,
                default_propagation(job)
            ),
            [FOREGROUND_DELETION_FINALIZER]
        );
    }
}
