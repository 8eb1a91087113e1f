//! Admission, in the order Kubernetes runs it for these kinds: the namespace exists,
//! Priority (a pod's priority from its PriorityClass, [`super::priority`]), ServiceAccount
//! (a pod's account, and its token mounted), LimitRange (defaults, then min /
//! max / ratio per container), ResourceQuota (object count and request / limit totals per
//! namespace). Each rejection names the plugin's reason the way
//! kube-apiserver words it. Also the update rules: what an update may change and what it may
//! not.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};

use skiff_proto::api::certificates::{
    CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use skiff_proto::api::meta::generated_name;
use skiff_proto::api::node::{DEFAULT_TOLERATION_SECONDS, TAINT_NOT_READY, TAINT_UNREACHABLE};
use skiff_proto::api::quota::{self, PodScope, Usage};
use skiff_proto::api::rbac::RoleRef;
use skiff_proto::api::volume::{
    DEFAULT_MODE, DownwardApiProjection, DownwardApiVolumeFile, KeyToPath, KeysProjection,
    ObjectFieldSelector, ProjectedVolumeSource, ROOT_CA_CONFIG_MAP, SERVICE_ACCOUNT_MOUNT,
    SERVICE_ACCOUNT_TOKEN_SECONDS, SERVICE_ACCOUNT_VOLUME_PREFIX, ServiceAccountTokenProjection,
    Volume, VolumeMount, VolumeProjection,
};
use skiff_proto::api::{
    CertificateConditionType, Kind, LabelSelector, Object, Pod, ResourceList, ResourceQuota, Taint,
    TaintEffect, Toleration,
};
use skiff_proto::quantity::Quantity;

use super::{
    ClusterApi, ClusterError, Result, decode, not_found, pod_security, prefix_end, priority,
};
use skiff_store::lock;
use skiff_store::request::{Compare, CompareResult, CompareTarget, RangeRequest};

fn forbidden(object: &Object, why: String) -> ClusterError {
    ClusterError::Forbidden {
        kind: object.kind(),
        name: object.metadata().name.clone(),
        why,
    }
}

/// The name of the service account a pod names none of.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// ServiceAccount admission, as far as names go: a pod runs as the service account it names
/// (by `serviceAccountName`, or the deprecated `serviceAccount`), else as `default`; both
/// fields then hold the name.
fn default_service_account(pod: &mut Pod) {
    let spec = &mut pod.spec;
    if spec.service_account_name.is_empty() {
        spec.service_account_name = if spec.service_account.is_empty() {
            DEFAULT_SERVICE_ACCOUNT.to_owned()
        } else {
            spec.service_account.clone()
        };
    }
    spec.service_account = spec.service_account_name.clone();
}

/// The annotation of a mirror pod (the API's copy of a node's static pod): admission leaves
/// its spec as the node wrote it, which the node compares with its own.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// ServiceAccount admission's token, as kube-apiserver's mounts it: unless the pod (or,
/// when the pod does not say, its ServiceAccount, whose `automountServiceAccountToken` is
/// `account_automounts`) turns it off, every container and init container without a mount at
/// [`SERVICE_ACCOUNT_MOUNT`] gets one, read-only, of a projected volume
/// `kube-api-access-<random>` (one the pod has already is reused) of the account's token,
/// the cluster's CA and the pod's namespace.
fn mount_service_account_token(pod: &mut Pod, account_automounts: Option<bool>) {
    let spec = &mut pod.spec;
    if !spec
        .automount_service_account_token
        .or(account_automounts)
        .unwrap_or(true)
    {
        return;
    }
    let existing = spec
        .volumes
        .iter()
        .find(|v| v.name.starts_with(SERVICE_ACCOUNT_VOLUME_PREFIX))
        .map(|v| v.name.clone());
    let name = existing
        .clone()
        .unwrap_or_else(|| generated_name(SERVICE_ACCOUNT_VOLUME_PREFIX));
    let mut needed = false;
    for c in spec
        .init_containers
        .iter_mut()
        .chain(spec.containers.iter_mut())
    {
        if c.volume_mounts
            .iter()
            .any(|m| m.mount_path == SERVICE_ACCOUNT_MOUNT)
        {
            continue;
        }
        c.volume_mounts.push(VolumeMount {
            name: name.clone(),
            mount_path: SERVICE_ACCOUNT_MOUNT.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        needed = true;
    }
    if needed && existing.is_none() {
        spec.volumes.push(service_account_volume(name));
    }
}

/// The projected volume of a pod's service account token, the cluster's CA and the pod's
/// namespace (kube-apiserver's `TokenVolumeSource`, its mode set as that sets it).
fn service_account_volume(name: String) -> Volume {
    let token = VolumeProjection {
        service_account_token: Some(ServiceAccountTokenProjection {
            audience: String::new(),
            expiration_seconds: Some(SERVICE_ACCOUNT_TOKEN_SECONDS),
            path: "token".to_owned(),
        }),
        ..VolumeProjection::default()
    };
    let ca = VolumeProjection {
        config_map: Some(KeysProjection {
            name: ROOT_CA_CONFIG_MAP.to_owned(),
            items: vec![KeyToPath {
                key: "ca.crt".to_owned(),
                path: "ca.crt".to_owned(),
                mode: None,
            }],
            optional: None,
        }),
        ..VolumeProjection::default()
    };
    let namespace = VolumeProjection {
        downward_api: Some(DownwardApiProjection {
            items: vec![DownwardApiVolumeFile {
                path: "namespace".to_owned(),
                field_ref: Some(ObjectFieldSelector {
                    api_version: "v1".to_owned(),
                    field_path: "metadata.namespace".to_owned(),
                }),
                resource_field_ref: None,
                mode: None,
            }],
        }),
        ..VolumeProjection::default()
    };
    Volume {
        name,
        projected: Some(ProjectedVolumeSource {
            sources: vec![token, ca, namespace],
            default_mode: Some(DEFAULT_MODE),
        }),
        ..Volume::default()
    }
}

/// What ServiceAccount `namespace/name` says of mounting its token (`None`: nothing, or
/// there is no such account yet: the pod is admitted, and its node asks for the token until
/// the account exists).
fn account_automounts(api: &ClusterApi, namespace: &str, name: &str) -> Result<Option<bool>> {
    let (_, found) = api.get_local(super::token::service_account_kind(), namespace, name)?;
    Ok(match found.map(|s| s.object) {
        Some(Object::Generic(_, account)) => account
            .body
            .get("automountServiceAccountToken")
            .and_then(serde_json::Value::as_bool),
        _ => None,
    })
}

/// What the pods of each namespace use against each of its quotas (by name), counted once per
/// create or per batch of creates (a CreateMany) at the revision in `at`, each pod admitted
/// since added. A batch's pods are thus checked against each other as well as against what is
/// stored, and the namespace is counted once per batch, from the member's [`UsageCache`]. A
/// pod admitted and then not written with its batch (its name was taken meanwhile) still
/// counts for the rest of the batch: a batch errs toward refusing, never toward exceeding a
/// quota.
#[derive(Debug, Default)]
pub struct QuotaCounts(HashMap<String, Counted>);

#[derive(Debug)]
struct Counted {
    at: i64,
    used: HashMap<String, Usage>,
}

/// What the pods of each namespace under a quota use, as of a revision, kept by the API
/// server between creates: a count decodes only the pods changed since the namespace's last count
/// ([`skiff_store::mvcc::Mvcc::changed_since`]), not every pod in it. A namespace is counted whole
/// again when the index no longer reaches back to its last count (compaction) and after a
/// snapshot replaced the keyspace; it is forgotten once no quota is left in it.
#[derive(Debug, Default)]
pub struct UsageCache(Mutex<HashMap<String, Arc<Mutex<NamespaceUsage>>>>);

#[derive(Debug, Default)]
struct NamespaceUsage {
    /// The revision counted at; 0: to be counted whole.
    at: i64,
    /// The member's snapshot installs as of that count.
    epoch: u64,
    /// Each counted pod's usage and scope, by key (pods that ended use nothing and are not
    /// held).
    pods: HashMap<Vec<u8>, (Usage, PodScope)>,
}

impl UsageCache {
    /// What the pods of namespace `ns` use now against each of `quotas` (by name), and the
    /// revision that is as of.
    fn count(
        &self,
        api: &ClusterApi,
        ns: &str,
        quotas: &[&ResourceQuota],
    ) -> Result<(i64, HashMap<String, Usage>)> {
        let entry = lock(&self.0).entry(ns.to_owned()).or_default().clone();
        let mut counted = lock(&entry);
        let prefix = Kind::Pod.prefix(Some(ns));
        let end = prefix_end(prefix.as_bytes());
        let keyspace = api.keyspace();
        let mvcc = keyspace.read();
        // Read under the keyspace lock, as the install raises it: the epoch of what is read.
        let epoch = keyspace.epoch();
        let now = mvcc.revision();
        let changed = if counted.at > 0 && counted.epoch == epoch {
            mvcc.changed_since(prefix.as_bytes(), &end, counted.at)?
        } else {
            None
        };
        let (whole, kvs) = match changed {
            Some(changed) => (false, changed),
            None => {
                let all = mvcc.range(&RangeRequest {
                    key: prefix.as_bytes().to_vec(),
                    range_end: end,
                    revision: now,
                    ..RangeRequest::default()
                })?;
                let kvs = all.kvs.into_iter().map(|kv| (kv.key.clone(), Some(kv)));
                (true, kvs.collect())
            }
        };
        // Decoded without the keyspace lock, so the apply path does not wait on it.
        drop(mvcc);
        if whole {
            // Until this count is done: an error part way leaves it to be counted whole.
            counted.at = 0;
            counted.pods.clear();
        }
        for (key, kv) in kvs {
            counted.pods.remove(&key);
            let Some(kv) = kv else { continue };
            let pod = decode(Kind::Pod, &kv)?.object;
            if let Object::Pod(p) = &pod
                && !p.is_terminal()
            {
                counted
                    .pods
                    .insert(key, (quota::usage(&pod), PodScope::of(p)));
            }
        }
        counted.at = now;
        counted.epoch = epoch;
        let mut used: HashMap<String, Usage> = HashMap::new();
        for q in quotas {
            let sum = used.entry(q.metadata.name.clone()).or_default();
            for (usage, scope) in counted.pods.values() {
                if quota::in_scope(q, Some(scope)) {
                    quota::add(sum, usage);
                }
            }
        }
        Ok((now, used))
    }

    /// `ns` has no quota (left): its count is not kept.
    fn forget(&self, ns: &str) {
        lock(&self.0).remove(ns);
    }
}

/// What admission asks of a create's write.
#[derive(Debug, Default)]
pub struct Admitted {
    /// What must still hold when the write lands (the namespace exists, …).
    pub guards: Vec<Compare>,
    /// Under a quota: no pod of the namespace was created since the count. A batch's own
    /// earlier pods are in the count, so this guard does not read the batch's writes.
    pub counted: Option<Compare>,
}

/// The guard that no object under `prefix` was created after revision `at`.
fn none_created_since(prefix: &str, at: i64) -> Compare {
    Compare {
        key: prefix.as_bytes().to_vec(),
        range_end: prefix_end(prefix.as_bytes()),
        result: CompareResult::Less,
        target: CompareTarget::Create(at + 1),
    }
}

/// The refusal of a create that would take `resource` past `hard` in `quota`.
fn exceeded(
    object: &Object,
    quota: &str,
    resource: &str,
    want: &Quantity,
    have: &Quantity,
    hard: &Quantity,
) -> ClusterError {
    forbidden(
        object,
        format!(
            "exceeded quota: {quota}, requested: {resource}={want}, used: {resource}={have}, limited: {resource}={hard}"
        ),
    )
}

/// Runs admission for a create, counting quota usage into `counts`; returns what the write
/// must carry.
pub fn admit_create(
    api: &ClusterApi,
    object: &mut Object,
    counts: &mut QuotaCounts,
) -> Result<Admitted> {
    let kind = object.kind();
    let mut guards = Vec::new();
    if kind == priority::priority_class_kind() {
        priority::admit_class(api, object)?;
    }
    if !kind.is_namespaced() {
        return Ok(Admitted::default());
    }
    let ns = object.metadata().namespace.clone();
    let (_, found) = api.get_local(Kind::Namespace, "", &ns)?;
    let namespace = match found {
        None => {
            return Err(not_found(Kind::Namespace, &ns));
        }
        Some(n) if n.object.metadata().deletion_timestamp.is_some() => {
            return Err(forbidden(
                object,
                format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            ));
        }
        Some(n) => n.object,
    };
    // The namespace must still exist when the write lands.
    guards.push(Compare {
        key: Kind::Namespace.key("", &ns).into_bytes(),
        range_end: Vec::new(),
        result: CompareResult::Greater,
        target: CompareTarget::Create(0),
    });
    if matches!(object, Object::Pod(_)) {
        let level = pod_security::Level::of_namespace(&namespace.metadata().labels);
        let violations = pod_security::violations(level, &object.to_json_value());
        if !violations.is_empty() {
            return Err(forbidden(object, pod_security::refusal(level, &violations)));
        }
    }
    if let Object::Pod(pod) = object {
        // First: a quota's PriorityClass scope reads the class it gives.
        priority::admit_pod(api, pod)?;
        default_toleration_seconds(pod);
        default_service_account(pod);
        // Only a server that signs tokens mounts them: elsewhere no node could get one, and
        // no pod would start.
        if api.token_issuer().is_ok()
            && !pod.metadata.annotations.contains_key(MIRROR_POD_ANNOTATION)
        {
            let account = match pod.spec.automount_service_account_token {
                Some(_) => None,
                None => account_automounts(api, &ns, &pod.spec.service_account_name)?,
            };
            mount_service_account_token(pod, account);
        }
        let prefix = Kind::LimitRange.prefix(Some(&ns));
        let (_, ranges) = api.range(
            Kind::LimitRange,
            prefix.as_bytes(),
            &prefix_end(prefix.as_bytes()),
            0,
        )?;
        for lr in &ranges {
            if let Object::LimitRange(lr) = &lr.object {
                apply_limit_range(pod, lr)?;
            }
        }
    }
    let quotas = quotas_in(api, &ns)?;
    let quotas: Vec<&ResourceQuota> = quotas.iter().collect();
    let counted = match object {
        Object::Pod(_) if quotas.is_empty() => {
            api.quota_usage.forget(&ns);
            None
        }
        Object::Pod(_) => Some(admit_pod(api, object, &quotas, counts)?),
        _ => {
            guards.extend(admit_counted(api, object, &quotas)?);
            None
        }
    };
    Ok(Admitted { guards, counted })
}

/// A pod against its namespace's quotas, counted into `counts`; the guard that the count
/// still holds when the write lands.
fn admit_pod(
    api: &ClusterApi,
    object: &Object,
    quotas: &[&ResourceQuota],
    counts: &mut QuotaCounts,
) -> Result<Compare> {
    let Object::Pod(pod) = object else {
        unreachable!("admit_pod is given pods")
    };
    let ns = &pod.metadata.namespace;
    let counted = match counts.0.entry(ns.clone()) {
        Entry::Occupied(e)
            if quotas
                .iter()
                .all(|q| e.get().used.contains_key(&q.metadata.name)) =>
        {
            e.into_mut()
        }
        e => {
            let (at, used) = api.quota_usage.count(api, ns, quotas)?;
            let counted = Counted { at, used };
            match e {
                Entry::Occupied(mut e) => {
                    e.insert(counted);
                    e.into_mut()
                }
                Entry::Vacant(e) => e.insert(counted),
            }
        }
    };
    let scope = PodScope::of(pod);
    let wanted = quota::usage(object);
    let in_scope: Vec<&ResourceQuota> = quotas
        .iter()
        .copied()
        .filter(|q| quota::in_scope(q, Some(&scope)))
        .collect();
    for q in &in_scope {
        let name = &q.metadata.name;
        let used = counted.used.get(name);
        for (resource, hard) in &q.spec.hard {
            if quota::kind_counted(resource) != Some(Kind::Pod) {
                continue;
            }
            let Some(want) = wanted.get(resource) else {
                if quota::must_specify(resource) {
                    return Err(forbidden(
                        object,
                        format!("failed quota: {name}: must specify {resource}"),
                    ));
                }
                continue;
            };
            let have = used
                .and_then(|u| u.get(resource))
                .copied()
                .unwrap_or(Quantity::ZERO);
            let total = have.checked_add(want).unwrap_or(*want);
            if total > *hard {
                return Err(exceeded(object, name, resource, want, &have, hard));
            }
        }
    }
    for q in &in_scope {
        quota::add(
            counted.used.entry(q.metadata.name.clone()).or_default(),
            &wanted,
        );
    }
    // No pod may have been created in the namespace since the count: only a new pod adds to
    // what the namespace uses. A pod's requests and limits never change once it is created,
    // and one that ends, or is deleted, only frees quota; so updates of other pods (their
    // status, say), which never stop while the namespace runs pods, do not make this create
    // count again. (A pod's status moved back from Succeeded or Failed would use quota
    // again unseen; nothing in Skiff does that, and Kubernetes' own quota would also only
    // see it at its controller's next count.)
    Ok(none_created_since(&Kind::Pod.prefix(Some(ns)), counted.at))
}

/// The ResourceQuotas of namespace `ns`.
fn quotas_in(api: &ClusterApi, ns: &str) -> Result<Vec<ResourceQuota>> {
    let prefix = Kind::ResourceQuota.prefix(Some(ns));
    let (_, stored) = api.range(
        Kind::ResourceQuota,
        prefix.as_bytes(),
        &prefix_end(prefix.as_bytes()),
        0,
    )?;
    Ok(stored
        .into_iter()
        .filter_map(|q| match q.object {
            Object::ResourceQuota(q) => Some(q),
            _ => None,
        })
        .collect())
}

/// What `object` adds to each resource (`adds`) against the unscoped quotas of its namespace
/// that limit them, with the objects of its kind there counted now: refused if a limit would
/// be passed. When a quota limits any of it, the revision counted at and the kind's prefix
/// in the namespace, for the caller's guard.
fn check_counted(
    api: &ClusterApi,
    object: &Object,
    quotas: &[&ResourceQuota],
    adds: &Usage,
) -> Result<Option<(i64, String)>> {
    // (quota, resource, hard, amount) for each limit `adds` reaches.
    let limits: Vec<(&str, &str, &Quantity, &Quantity)> = quotas
        .iter()
        .filter(|q| quota::in_scope(q, None))
        .flat_map(|q| {
            q.spec.hard.iter().filter_map(|(r, hard)| {
                let amount = adds.get(r).filter(|a| !a.is_zero())?;
                Some((q.metadata.name.as_str(), r.as_str(), hard, amount))
            })
        })
        .collect();
    if limits.is_empty() {
        return Ok(None);
    }
    let kind = object.kind();
    let prefix = kind.prefix(Some(&object.metadata().namespace));
    let (at, stored) = api.range(kind, prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0)?;
    let mut used = Usage::new();
    for s in &stored {
        quota::add(&mut used, &quota::usage(&s.object));
    }
    for (name, resource, hard, amount) in limits {
        let have = used.get(resource).copied().unwrap_or(Quantity::ZERO);
        if have.checked_add(amount).is_none_or(|total| total > *hard) {
            return Err(exceeded(object, name, resource, amount, &have, hard));
        }
    }
    Ok(Some((at, prefix)))
}

/// Any other object against the quotas of its namespace that count its kind (`configmaps`,
/// `count/jobs.batch`, `services.nodeports`, `requests.storage`, …): the objects of the kind
/// in the namespace are counted now, and the guard returned (if a quota counts the kind)
/// holds only if none was created since.
fn admit_counted(
    api: &ClusterApi,
    object: &Object,
    quotas: &[&ResourceQuota],
) -> Result<Option<Compare>> {
    let counted = check_counted(api, object, quotas, &quota::usage(object))?;
    Ok(counted.map(|(at, prefix)| none_created_since(&prefix, at)))
}

/// An update against the quotas of its namespace: one that makes its object count for more
/// (a Service turned NodePort, a claim asking for more storage) is refused if that would
/// take a quota past a limit. The guard returned (when a quota limits what grows) holds only
/// if no object of the kind in the namespace changed since the count. A pod's resources
/// never change once it is created, so pods are not counted again here.
pub fn admit_update(api: &ClusterApi, current: &Object, next: &Object) -> Result<Option<Compare>> {
    if next.kind() == priority::priority_class_kind() {
        priority::admit_class(api, next)?;
    }
    if !next.kind().is_namespaced() || matches!(next, Object::Pod(_)) {
        return Ok(None);
    }
    let before = quota::usage(current);
    let grows: Usage = quota::usage(next)
        .into_iter()
        .filter_map(|(r, now)| {
            let was = before.get(&r).copied().unwrap_or(Quantity::ZERO);
            (now > was).then(|| (r, now.checked_sub(&was).unwrap_or(now)))
        })
        .collect();
    if grows.is_empty() {
        return Ok(None);
    }
    let quotas = quotas_in(api, &next.metadata().namespace)?;
    let quotas: Vec<&ResourceQuota> = quotas.iter().collect();
    let counted = check_counted(api, next, &quotas, &grows)?;
    Ok(counted.map(|(at, prefix)| Compare {
        key: prefix.as_bytes().to_vec(),
        range_end: prefix_end(prefix.as_bytes()),
        result: CompareResult::Less,
        target: CompareTarget::Mod(at + 1),
    }))
}

fn apply_limit_range(pod: &mut Pod, lr: &skiff_proto::api::LimitRange) -> Result<()> {
    let pod_name = pod.metadata.name.clone();
    let deny = |why: String| ClusterError::Forbidden {
        kind: Kind::Pod,
        name: pod_name.clone(),
        why,
    };
    for item in lr.spec.limits.iter().filter(|i| i.type_ == "Container") {
        for c in pod
            .spec
            .containers
            .iter_mut()
            .chain(pod.spec.init_containers.iter_mut())
        {
            for (r, q) in &item.default {
                c.resources.limits.entry(r.clone()).or_insert(*q);
            }
            // Defaulting already made an explicit limit the request where none was given, so
            // what is still missing takes the range's defaultRequest.
            for (r, q) in &item.default_request {
                c.resources.requests.entry(r.clone()).or_insert(*q);
            }
            check_range(
                &item.min,
                &item.max,
                &item.max_limit_request_ratio,
                &c.resources.requests,
                &c.resources.limits,
            )
            .map_err(&deny)?;
        }
    }
    Ok(())
}

fn check_range(
    min: &ResourceList,
    max: &ResourceList,
    ratio: &ResourceList,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Result<(), String> {
    for (r, lo) in min {
        match requests.get(r) {
            Some(v) if v < lo => {
                return Err(format!(
                    "minimum {r} usage per Container is {lo}, but request is {v}"
                ));
            }
            None => {
                return Err(format!(
                    "minimum {r} usage per Container is {lo}. No request is specified"
                ));
            }
            _ => {}
        }
    }
    for (r, hi) in max {
        match limits.get(r) {
            Some(v) if v > hi => {
                return Err(format!(
                    "maximum {r} usage per Container is {hi}, but limit is {v}"
                ));
            }
            None => {
                return Err(format!(
                    "maximum {r} usage per Container is {hi}. No limit is specified"
                ));
            }
            _ => {}
        }
    }
    for (r, max_ratio) in ratio {
        if let (Some(l), Some(q)) = (limits.get(r), requests.get(r))
            && q.milli_value() > 0
        {
            let ratio_milli = l.milli_value().saturating_mul(1000) / q.milli_value();
            if ratio_milli > max_ratio.milli_value() {
                return Err(format!(
                    "{r} max limit to request ratio per Container is {max_ratio}, but provided ratio is {:.6}",
                    ratio_milli as f64 / 1000.0
                ));
            }
        }
    }
    Ok(())
}

/// DefaultTolerationSeconds: a pod that does not say how long it stays on a node that is
/// not ready or unreachable stays [`DEFAULT_TOLERATION_SECONDS`], then the node lifecycle
/// controller evicts it (and its ReplicaSet replaces it elsewhere).
fn default_toleration_seconds(pod: &mut Pod) {
    for key in [TAINT_NOT_READY, TAINT_UNREACHABLE] {
        let taint = Taint {
            key: key.to_owned(),
            value: String::new(),
            effect: TaintEffect::NoExecute,
            time_added: None,
            other: Default::default(),
        };
        if pod.spec.tolerations.iter().any(|t| t.tolerates(&taint)) {
            continue;
        }
        pod.spec.tolerations.push(Toleration {
            key: key.to_owned(),
            operator: "Exists".to_owned(),
            value: String::new(),
            effect: Some(TaintEffect::NoExecute),
            toleration_seconds: Some(DEFAULT_TOLERATION_SECONDS),
            other: Default::default(),
        });
    }
}

/// The object an Update writes: the request's metadata (labels, annotations, …) and spec over
/// the stored object, status kept; identity fields and immutable spec fields stay as stored.
pub fn with_spec(current: &Object, request: &Object) -> Result<Object> {
    let mut next = request.clone();
    keep_identity(current, &mut next);
    match (current, &mut next) {
        (Object::Pod(cur), Object::Pod(new)) => {
            new.status = cur.status.clone();
            new.spec.keep_service_account(&cur.spec);
            new.spec.keep_priority(&cur.spec);
            if cur.spec.node_name != new.spec.node_name {
                return Err(ClusterError::Immutable {
                    kind: Kind::Pod,
                    name: cur.metadata.name.clone(),
                    field: "spec.nodeName",
                    why: "a pod is bound through Bind, not by update",
                });
            }
            // Kubernetes lets an update change container images and add tolerations;
            // everything else in a pod's spec is immutable.
            let mut a = cur.spec.clone();
            let mut b = new.spec.clone();
            for (x, y) in a.containers.iter_mut().zip(b.containers.iter_mut()) {
                x.image = y.image.clone();
            }
            for (x, y) in a
                .init_containers
                .iter_mut()
                .zip(b.init_containers.iter_mut())
            {
                x.image = y.image.clone();
            }
            let added_only = b.tolerations.len() >= a.tolerations.len()
                && a.tolerations.iter().all(|t| b.tolerations.contains(t));
            if added_only {
                a.tolerations = b.tolerations.clone();
            }
            // The active deadline may be set, or shortened, never lengthened or removed.
            if let Some(d) = b.active_deadline_seconds
                && a.active_deadline_seconds.is_none_or(|was| d <= was)
            {
                a.active_deadline_seconds = Some(d);
            }
            if a != b {
                return Err(ClusterError::Immutable {
                    kind: Kind::Pod,
                    name: cur.metadata.name.clone(),
                    field: "spec",
                    why: "pod updates may not change fields other than \
                          `spec.containers[*].image`, `spec.initContainers[*].image`, \
                          `spec.activeDeadlineSeconds` (set or shortened) or \
                          `spec.tolerations` (only additions to existing tolerations)",
                });
            }
        }
        (Object::Node(cur), Object::Node(new)) => {
            new.status = cur.status.clone();
            new.spec.keep_pod_cidr(&cur.spec);
            // As Kubernetes: a node's pod CIDR is set once (by registration, or from none
            // by an update) and kept.
            for (field, was, now) in [
                (
                    "spec.podCIDR",
                    vec![cur.spec.pod_cidr.clone()],
                    vec![new.spec.pod_cidr.clone()],
                ),
                (
                    "spec.podCIDRs",
                    cur.spec.pod_cidrs.clone(),
                    new.spec.pod_cidrs.clone(),
                ),
            ] {
                let unset = was.iter().all(String::is_empty);
                if !unset && was != now {
                    return Err(ClusterError::Immutable {
                        kind: Kind::Node,
                        name: cur.metadata.name.clone(),
                        field,
                        why: "node updates may not change podCIDR except from \"\" to valid",
                    });
                }
            }
        }
        (Object::Namespace(cur), Object::Namespace(new)) => {
            // `spec.finalizers` changes only through `finalize`.
            new.spec = cur.spec.clone();
            new.status = cur.status.clone();
        }
        (Object::ResourceQuota(cur), Object::ResourceQuota(new)) => new.status = cur.status.clone(),
        (Object::Deployment(cur), Object::Deployment(new)) => {
            new.status = cur.status.clone();
            selector_kept(current, &cur.spec.selector, &new.spec.selector)?;
        }
        (Object::ReplicaSet(cur), Object::ReplicaSet(new)) => {
            new.status = cur.status.clone();
            selector_kept(current, &cur.spec.selector, &new.spec.selector)?;
        }
        (Object::Secret(cur), Object::Secret(new)) => {
            if new.type_.is_empty() {
                new.type_ = cur.type_.clone();
            }
            // An immutable Secret's data, type and immutability stay as they are.
            if cur.immutable == Some(true)
                && (cur.data != new.data || cur.type_ != new.type_ || new.immutable != Some(true))
            {
                return Err(ClusterError::Immutable {
                    kind: Kind::Secret,
                    name: cur.metadata.name.clone(),
                    field: "data",
                    why: "field is immutable when `immutable` is set",
                });
            }
            if cur.type_ != new.type_ {
                return Err(ClusterError::Immutable {
                    kind: Kind::Secret,
                    name: cur.metadata.name.clone(),
                    field: "type",
                    why: "field is immutable",
                });
            }
        }
        (Object::Service(cur), Object::Service(new)) => {
            new.status = cur.status.clone();
            // A cluster IP, once given, stays; an update that names none keeps it.
            if new.spec.cluster_ip.is_empty() {
                new.spec.cluster_ip = cur.spec.cluster_ip.clone();
                new.spec.cluster_ips = cur.spec.cluster_ips.clone();
            }
            if !cur.spec.cluster_ip.is_empty() && new.spec.cluster_ip != cur.spec.cluster_ip {
                return Err(ClusterError::Immutable {
                    kind: Kind::Service,
                    name: cur.metadata.name.clone(),
                    field: "spec.clusterIP",
                    why: "field is immutable",
                });
            }
        }
        (Object::CertificateSigningRequest(cur), Object::CertificateSigningRequest(new)) => {
            // A request is what was asked, by whom: an update changes its metadata only.
            new.spec = cur.spec.clone();
            new.status = cur.status.clone();
        }
        (Object::RoleBinding(cur), Object::RoleBinding(new)) => {
            role_kept(current, &cur.role_ref, &new.role_ref)?;
        }
        (Object::ClusterRoleBinding(cur), Object::ClusterRoleBinding(new)) => {
            role_kept(current, &cur.role_ref, &new.role_ref)?;
        }
        (Object::Generic(g, cur), Object::Generic(_, new)) if g.info().status => {
            match cur.body.get("status") {
                Some(status) => new.body.insert("status".to_owned(), status.clone()),
                None => new.body.remove("status"),
            };
        }
        _ => {}
    }
    if spec_changed(current, &next) {
        next.metadata_mut().generation = Some(current.metadata().generation.unwrap_or(1) + 1);
    }
    Ok(next)
}

/// A workload's selector is fixed at creation (apps/v1): changing it would orphan the pods
/// it owns and adopt others.
fn selector_kept(current: &Object, old: &LabelSelector, new: &LabelSelector) -> Result<()> {
    if old == new {
        return Ok(());
    }
    Err(ClusterError::Immutable {
        kind: current.kind(),
        name: current.metadata().name.clone(),
        field: "spec.selector",
        why: "field is immutable",
    })
}

/// A binding grants one role for its whole life, as in Kubernetes: granting another is a
/// new binding (so whoever may bind the new role is checked again).
fn role_kept(current: &Object, old: &RoleRef, new: &RoleRef) -> Result<()> {
    if old == new {
        return Ok(());
    }
    Err(ClusterError::Immutable {
        kind: current.kind(),
        name: current.metadata().name.clone(),
        field: "roleRef",
        why: "cannot change roleRef",
    })
}

fn spec_changed(a: &Object, b: &Object) -> bool {
    let (mut a, mut b) = (a.to_json_value(), b.to_json_value());
    a.as_object_mut().map(|m| m.remove("metadata"));
    b.as_object_mut().map(|m| m.remove("metadata"));
    a.as_object_mut().map(|m| m.remove("status"));
    b.as_object_mut().map(|m| m.remove("status"));
    a != b
}

/// The object an UpdateStatus writes: the stored object with the request's status.
pub fn with_status(current: &Object, request: &Object) -> Result<Object> {
    let mut next = current.clone();
    match (&mut next, request) {
        (Object::Pod(n), Object::Pod(r)) => n.status = r.status.clone(),
        (Object::Node(n), Object::Node(r)) => n.status = r.status.clone(),
        (Object::Namespace(n), Object::Namespace(r)) => n.status = r.status.clone(),
        (Object::ResourceQuota(n), Object::ResourceQuota(r)) => n.status = r.status.clone(),
        (Object::Deployment(n), Object::Deployment(r)) => n.status = r.status.clone(),
        (Object::ReplicaSet(n), Object::ReplicaSet(r)) => n.status = r.status.clone(),
        (Object::Service(n), Object::Service(r)) => n.status = r.status.clone(),
        (Object::Generic(g, n), Object::Generic(_, r)) if g.info().status => {
            match r.body.get("status") {
                Some(status) => n.body.insert("status".to_owned(), status.clone()),
                None => n.body.remove("status"),
            };
        }
        (Object::CertificateSigningRequest(n), Object::CertificateSigningRequest(r)) => {
            // The signer's part: the certificate (once) and conditions other than the
            // approver's, which only the approval subresource changes.
            let cur = n.status.take().unwrap_or_default();
            let req = r.status.clone().unwrap_or_default();
            if !cur.certificate.is_empty() && cur.certificate != req.certificate {
                return Err(ClusterError::Immutable {
                    kind: Kind::CertificateSigningRequest,
                    name: n.metadata.name.clone(),
                    field: "status.certificate",
                    why: "updates may not modify a certificate once issued",
                });
            }
            let (approval, _) = split_approval(cur.conditions);
            let (_, others) = split_approval(req.conditions);
            n.status = Some(CertificateSigningRequestStatus {
                conditions: approval.into_iter().chain(others).collect(),
                certificate: req.certificate,
            });
        }
        (n, _) => {
            return Err(ClusterError::NoStatus { kind: n.kind() });
        }
    }
    Ok(next)
}

/// The object an update of a CertificateSigningRequest's `approval` writes: the stored
/// request with the request's Approved and Denied conditions, which once given stay.
pub fn with_approval(current: &Object, request: &Object) -> Result<Object> {
    let (Object::CertificateSigningRequest(cur), Object::CertificateSigningRequest(req)) =
        (current, request)
    else {
        return Err(ClusterError::NoApproval {
            kind: current.kind(),
        });
    };
    let mut next = cur.clone();
    let status = next.status.take().unwrap_or_default();
    let (_, others) = split_approval(status.conditions);
    let (approval, _) = split_approval(req.status.clone().unwrap_or_default().conditions);
    next.status = Some(CertificateSigningRequestStatus {
        conditions: approval.into_iter().chain(others).collect(),
        certificate: status.certificate,
    });
    for (was, is, what) in [
        (cur.is_approved(), next.is_approved(), "Approved"),
        (cur.is_denied(), next.is_denied(), "Denied"),
    ] {
        if was && !is {
            return Err(ClusterError::Immutable {
                kind: Kind::CertificateSigningRequest,
                name: cur.metadata.name.clone(),
                field: "status.conditions",
                why: if what == "Approved" {
                    "updates may not remove an Approved condition"
                } else {
                    "updates may not remove a Denied condition"
                },
            });
        }
    }
    Ok(Object::CertificateSigningRequest(next))
}

/// A namespace's `spec.finalizers` as the request has them (the `finalize` subresource, the
/// namespace controller's once the namespace is empty); nothing else changes.
pub fn with_finalizers(current: &Object, request: &Object) -> Result<Object> {
    let (Object::Namespace(cur), Object::Namespace(req)) = (current, request) else {
        return Err(ClusterError::NoFinalize {
            kind: current.kind(),
        });
    };
    let mut next = cur.clone();
    next.spec.get_or_insert_with(Default::default).finalizers = req.finalizers().to_vec();
    Ok(Object::Namespace(next))
}

/// A request's conditions: the approver's (Approved, Denied) and the rest.
fn split_approval(
    conditions: Vec<CertificateSigningRequestCondition>,
) -> (
    Vec<CertificateSigningRequestCondition>,
    Vec<CertificateSigningRequestCondition>,
) {
    conditions.into_iter().partition(|c| {
        matches!(
            c.type_,
            CertificateConditionType::Approved | CertificateConditionType::Denied
        )
    })
}

fn keep_identity(current: &Object, next: &mut Object) {
    let cur = current.metadata();
    let m = next.metadata_mut();
    m.uid = cur.uid.clone();
    m.creation_timestamp = cur.creation_timestamp;
    m.deletion_timestamp = cur.deletion_timestamp;
    m.deletion_grace_period_seconds = cur.deletion_grace_period_seconds;
    m.generation = cur.generation;
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::{Container, ObjectMeta, PodSpec};

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            image: "busybox".into(),
            ..Container::default()
        }
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: "web".into(),
                namespace: "team".into(),
                ..ObjectMeta::default()
            },
            spec: PodSpec {
                init_containers: vec![container("init")],
                containers: vec![container("app"), container("sidecar")],
                ..PodSpec::default()
            },
            ..Pod::default()
        }
    }

    /// The token volume as kube-apiserver's admission writes it, JSON for JSON, mounted
    /// read-only into every container and init container.
    #[test]
    fn every_container_mounts_the_token_volume() {
        let mut p = pod();
        mount_service_account_token(&mut p, None);
        assert_eq!(p.spec.volumes.len(), 1);
        let volume = &p.spec.volumes[0];
        let suffix = volume
            .name
            .strip_prefix(SERVICE_ACCOUNT_VOLUME_PREFIX)
            .expect("prefix");
        assert_eq!(suffix.len(), 5, "{}", volume.name);
        assert!(
            suffix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{suffix}"
        );
        let mut json = serde_json::to_value(volume).expect("json");
        json["name"] = "kube-api-access-xxxxx".into();
        assert_eq!(
            json,
            serde_json::json!({
                "name": "kube-api-access-xxxxx",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt",
                                       "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                    ],
                    "defaultMode": 420,
                },
            })
        );
        for c in p.spec.init_containers.iter().chain(&p.spec.containers) {
            assert_eq!(
                c.volume_mounts,
                [VolumeMount {
                    name: volume.name.clone(),
                    mount_path: SERVICE_ACCOUNT_MOUNT.into(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                }],
                "{}",
                c.name
            );
        }
        // The admitted pod is a valid one.
        let mut object = Object::Pod(p);
        skiff_proto::api::defaults::apply(&mut object);
        skiff_proto::api::validation::validate(&object).expect("valid");
    }

    /// The pod's word wins, then its account's; unsaid, the token is mounted.
    #[test]
    fn the_pod_then_its_account_decide() {
        for (pod_says, account_says, mounted) in [
            (None, None, true),
            (None, Some(true), true),
            (None, Some(false), false),
            (Some(true), Some(false), true),
            (Some(false), None, false),
            (Some(false), Some(true), false),
        ] {
            let mut p = pod();
            p.spec.automount_service_account_token = pod_says;
            mount_service_account_token(&mut p, account_says);
            assert_eq!(
                !p.spec.volumes.is_empty(),
                mounted,
                "pod {pod_says:?}, account {account_says:?}"
            );
            assert_eq!(
                p.spec
                    .containers
                    .iter()
                    .all(|c| !c.volume_mounts.is_empty()),
                mounted
            );
        }
    }

    /// A container that mounts something of its own at the path keeps it; when every one
    /// does, no volume is added; a pod's own `kube-api-access-` volume is the one mounted.
    #[test]
    fn mounts_at_the_path_are_kept() {
        let own = VolumeMount {
            name: "mine".into(),
            mount_path: SERVICE_ACCOUNT_MOUNT.into(),
            ..VolumeMount::default()
        };
        let mut p = pod();
        p.spec.containers[0].volume_mounts.push(own.clone());
        mount_service_account_token(&mut p, None);
        assert_eq!(
            p.spec.containers[0].volume_mounts,
            std::slice::from_ref(&own)
        );
        assert_eq!(p.spec.containers[1].volume_mounts.len(), 1);
        assert_eq!(p.spec.volumes.len(), 1);

        let mut p = pod();
        for c in p
            .spec
            .init_containers
            .iter_mut()
            .chain(p.spec.containers.iter_mut())
        {
            c.volume_mounts.push(own.clone());
        }
        let before = p.clone();
        mount_service_account_token(&mut p, None);
        assert_eq!(p, before, "nothing needed the volume");

        let mut p = pod();
        p.spec
            .volumes
            .push(service_account_volume("kube-api-access-abcde".into()));
        mount_service_account_token(&mut p, None);
        assert_eq!(p.spec.volumes.len(), 1);
        assert!(
            p.spec
                .containers
                .iter()
                .all(|c| c.volume_mounts[0].name == "kube-api-access-abcde")
        );
    }

    /// Pods created through the API on a server that signs tokens get the token volume,
    /// unless their account says no (a missing account refuses nothing); a server without a
    /// signing key, on which no node could get a token, mounts none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn created_pods_get_the_token_volume() {
        use crate::cluster::testing::{TestApi, pod, secured_access};
        let volumes = |o: &Object| match o {
            Object::Pod(p) => p
                .spec
                .volumes
                .iter()
                .map(|v| v.name.clone())
                .collect::<Vec<_>>(),
            _ => unreachable!("a pod"),
        };
        let t = TestApi::start(secured_access).await;
        t.create(
            Kind::Namespace,
            serde_json::json!({"metadata": {"name": "team"}}),
        )
        .await;
        let quiet = serde_json::json!({
            "metadata": {"name": "quiet", "namespace": "team"},
            "automountServiceAccountToken": false,
        });
        t.create(super::super::token::service_account_kind(), quiet)
            .await;
        let created = t.create(Kind::Pod, pod("a", "", "missing", "cfg")).await;
        let names = volumes(&created);
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(
            names[1].starts_with(SERVICE_ACCOUNT_VOLUME_PREFIX),
            "{names:?}"
        );
        let created = t.create(Kind::Pod, pod("b", "", "quiet", "cfg")).await;
        assert_eq!(volumes(&created), ["config"]);
        let mut says_yes = pod("c", "", "quiet", "cfg");
        says_yes["spec"]["automountServiceAccountToken"] = true.into();
        assert_eq!(volumes(&t.create(Kind::Pod, says_yes).await).len(), 2);
        let mut mirror = pod("d", "n1", "default", "cfg");
        mirror["metadata"]["annotations"] = serde_json::json!({MIRROR_POD_ANNOTATION: "x"});
        assert_eq!(volumes(&t.create(Kind::Pod, mirror).await), ["config"]);
        t.stop().await;

        let t = TestApi::start(|_| crate::access::AccessConfig::default()).await;
        t.create(
            Kind::Namespace,
            serde_json::json!({"metadata": {"name": "team"}}),
        )
        .await;
        let created = t.create(Kind::Pod, pod("a", "", "default", "cfg")).await;
        assert_eq!(volumes(&created), ["config"]);
        t.stop().await;
    }

    /// A pod's volumes, and its containers' mounts, are as immutable as the rest of its
    /// spec: an update that drops the token volume is refused.
    #[test]
    fn pod_volumes_are_immutable() {
        let mut p = pod();
        mount_service_account_token(&mut p, None);
        let current = Object::Pod(p.clone());
        let mut image = p.clone();
        image.spec.containers[0].image = "busybox:2".into();
        assert!(with_spec(&current, &Object::Pod(image)).is_ok());
        for change in [
            |p: &mut Pod| p.spec.volumes.clear(),
            |p: &mut Pod| p.spec.containers[1].volume_mounts.clear(),
            |p: &mut Pod| p.spec.automount_service_account_token = Some(false),
        ] {
            let mut next = p.clone();
            change(&mut next);
            let e = with_spec(&current, &Object::Pod(next)).expect_err("immutable");
            assert!(
                matches!(e, ClusterError::Immutable { field: "spec", .. }),
                "{e}"
            );
        }
    }

    /// As Kubernetes: `activeDeadlineSeconds` may be set on a running pod, or shortened,
    /// never lengthened or removed.
    #[test]
    fn a_pods_active_deadline_may_be_set_or_shortened() {
        let deadline = |d: Option<i64>| {
            let mut p = pod();
            p.spec.active_deadline_seconds = d;
            Object::Pod(p)
        };
        for (from, to, allowed) in [
            (None, Some(60), true),
            (Some(60), Some(30), true),
            (Some(60), Some(60), true),
            (Some(60), Some(90), false),
            (Some(60), None, false),
        ] {
            let outcome = with_spec(&deadline(from), &deadline(to));
            assert_eq!(outcome.is_ok(), allowed, "{from:?} → {to:?}: {outcome:?}");
        }
    }
}
