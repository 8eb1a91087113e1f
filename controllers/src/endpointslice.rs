//! The EndpointSlice controller: for each Service with a selector, the addresses of the pods
//! it selects, in EndpointSlices (discovery.k8s.io/v1) of at most 100 endpoints, as
//! kube-controller-manager's `endpointslice` controller keeps them.
//!
//! ```text
//!  Service, or a pod it selects (before or after a change), or one of its slices changes
//!    ──► its key ──► sync: the pods it selects that have an IP and have not finished
//!        ──► endpoints (ready: the pod is Ready and not terminating; serving; terminating)
//!        ──► grouped by the ports they resolve to (a named targetPort may differ per pod),
//!            100 a slice, sorted by pod name ──► slices written where they differ
//! ```
//!
//! The same sync keeps the Service's `Endpoints` (core/v1), as kube-controller-manager's
//! `endpoints` controller does for the clients that still read them: the ready addresses and
//! the not ready ones, grouped by ports, at most 1,000 (then marked over capacity). A Service
//! without a selector is the other way round: its Endpoints are written by someone else, and
//! mirrored into EndpointSlices (`endpointslicemirroring-controller.k8s.io`) so every node's
//! proxy sees them.
//!
//! A slice is labelled `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`, and owned by its
//! Service, so the garbage collector removes it with the Service. A Service without a
//! selector is left to whoever keeps its slices. A slice written carries
//! `endpoints.kubernetes.io/last-change-trigger-time`: when this controller saw the earliest
//! change it reflects, from which each node's Service proxy measures its network
//! programming latency.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};
use skiff_proto::api::meta::IntOrString;
use skiff_proto::api::service::{
    ENDPOINTS_MANAGED_BY, ENDPOINTS_MANAGED_BY_LABEL, Endpoint, EndpointConditions, EndpointPort,
    EndpointSlice, MANAGED_BY, MANAGED_BY_LABEL, MAX_ENDPOINTS_ADDRESSES, MIRRORED_BY,
    OVER_CAPACITY_ANNOTATION, ObjectReference, SERVICE_NAME_LABEL, Service,
    TRIGGER_TIME_ANNOTATION, trigger_time_now,
};
use skiff_proto::api::{
    ConditionStatus, GenericObject, Kind, Object, ObjectMeta, Pod, PodConditionType,
};
use skiff_proto::client::{ClientError, Event};

use crate::core::{
    Context, Controller, Requeue, controller_ref, created_or_there, gone_is_none, key_of, split_key,
};
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "endpointslice";
/// Endpoints a slice holds at most (kube-controller-manager's `--max-endpoints-per-slice`).
pub const MAX_ENDPOINTS: usize = 100;
/// Set to `"true"` on Endpoints that are not to be mirrored into slices.
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// The label on the Endpoints of a headless Service.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

#[derive(Debug)]
pub struct EndpointSlices {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Per Service key, when the earliest change not yet written to its slices was seen:
    /// the trigger time the slices written for it carry.
    triggers: std::sync::Mutex<HashMap<String, String>>,
}

fn selects(svc: &Service, pod: &Pod) -> bool {
    !svc.spec.selector.is_empty()
        && pod.metadata.namespace == svc.metadata.namespace
        && svc
            .spec
            .selector
            .iter()
            .all(|(k, v)| pod.metadata.labels.get(k) == Some(v))
}

/// The port `target` names on `pod`: a number as it is, a name looked up in its containers'
/// ports; `None` when the pod has no port of that name.
fn resolve(target: &IntOrString, pod: &Pod) -> Option<i32> {
    match target {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(name) => pod
            .spec
            .containers
            .iter()
            .flat_map(|c| &c.ports)
            .find(|p| &p.name == name)
            .map(|p| p.container_port),
    }
}

/// The endpoint of `pod` for `svc`, when it has an address and has not finished; named by
/// the pod's hostname when its `subdomain` is the Service (a StatefulSet's pods).
fn endpoint(svc: &Service, pod: &Pod) -> Option<Endpoint> {
    if pod.is_terminal() {
        return None;
    }
    let ip = pod.status.as_ref()?.pod_ip.clone();
    if ip.is_empty() {
        return None;
    }
    let ready_condition = pod
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == PodConditionType::Ready)
        })
        .is_some_and(|c| c.status == ConditionStatus::True);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let field = |f: &str| {
        pod.spec
            .other
            .get(f)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let hostname = if !svc.metadata.name.is_empty() && field("subdomain") == svc.metadata.name {
        field("hostname")
    } else {
        String::new()
    };
    Some(Endpoint {
        addresses: vec![ip],
        hostname,
        conditions: EndpointConditions {
            ready: Some(ready_condition && !terminating),
            serving: Some(ready_condition),
            terminating: Some(terminating),
        },
        node_name: pod.spec.node_name.clone(),
        target_ref: Some(ObjectReference {
            kind: "Pod".into(),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
        }),
        other: Default::default(),
    })
}

/// A Service port as one pod serves it: name, protocol, the pod's port number.
type ResolvedPort = (String, String, i32);

/// The slices `svc` should have, from the pods in its namespace: endpoints grouped by the
/// ports they resolve to, sorted by pod name, [`MAX_ENDPOINTS`] a slice (name, labels and
/// owner left to the caller).
pub fn desired(svc: &Service, pods: &[Arc<Object>]) -> Vec<(Vec<EndpointPort>, Vec<Endpoint>)> {
    let mut groups: BTreeMap<Vec<ResolvedPort>, Vec<(String, Endpoint)>> = BTreeMap::new();
    for o in pods {
        let Object::Pod(pod) = &**o else { continue };
        if !selects(svc, pod) {
            continue;
        }
        let Some(e) = endpoint(svc, pod) else {
            continue;
        };
        let ports: Option<Vec<ResolvedPort>> = svc
            .spec
            .ports
            .iter()
            .map(|p| {
                let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
                Some((p.name.clone(), p.protocol.clone(), resolve(&target, pod)?))
            })
            .collect();
        // A pod without a port a Service names by name is no endpoint of it.
        let Some(ports) = ports else { continue };
        groups
            .entry(ports)
            .or_default()
            .push((pod.metadata.name.clone(), e));
    }
    let mut out = Vec::new();
    for (ports, mut endpoints) in groups {
        endpoints.sort_by(|a, b| a.0.cmp(&b.0));
        let ports: Vec<EndpointPort> = ports
            .into_iter()
            .map(|(name, protocol, port)| EndpointPort {
                name: Some(name),
                protocol: Some(if protocol.is_empty() {
                    "TCP".into()
                } else {
                    protocol
                }),
                port: Some(port),
            })
            .collect();
        let endpoints: Vec<Endpoint> = endpoints.into_iter().map(|(_, e)| e).collect();
        for chunk in endpoints.chunks(MAX_ENDPOINTS) {
            out.push((ports.clone(), chunk.to_vec()));
        }
    }
    if out.is_empty() {
        // A Service with no endpoints still has a slice, with its ports, as in Kubernetes.
        let ports = svc
            .spec
            .ports
            .iter()
            .filter_map(|p| match &p.target_port {
                Some(IntOrString::String(_)) => None,
                t => Some(EndpointPort {
                    name: Some(p.name.clone()),
                    protocol: Some(if p.protocol.is_empty() {
                        "TCP".into()
                    } else {
                        p.protocol.clone()
                    }),
                    port: Some(match t {
                        Some(IntOrString::Int(n)) => *n,
                        _ => p.port,
                    }),
                }),
            })
            .collect();
        out.push((ports, Vec::new()));
    }
    out
}

/// The `subsets` of a Service's Endpoints from its slices as [`desired`] makes them: per set of
/// ports, the addresses of the ready endpoints and of the not ready ones (terminating ones
/// are in neither), sorted by address; at most [`MAX_ENDPOINTS_ADDRESSES`] in all, and whether
/// some were left out.
pub fn subsets(slices: &[(Vec<EndpointPort>, Vec<Endpoint>)]) -> (Vec<Value>, bool) {
    let mut groups: Vec<(&Vec<EndpointPort>, Vec<&Endpoint>)> = Vec::new();
    for (ports, endpoints) in slices {
        match groups.iter_mut().find(|(p, _)| *p == ports) {
            Some((_, e)) => e.extend(endpoints),
            None => groups.push((ports, endpoints.iter().collect())),
        }
    }
    let mut room = MAX_ENDPOINTS_ADDRESSES;
    let mut truncated = false;
    let mut out = Vec::new();
    for (ports, endpoints) in groups {
        let mut ready = Vec::new();
        let mut not_ready = Vec::new();
        for e in endpoints {
            if e.conditions.terminating == Some(true) {
                continue;
            }
            let Some(ip) = e.addresses.first() else {
                continue;
            };
            let mut address = json!({"ip": ip});
            if !e.node_name.is_empty() {
                address["nodeName"] = json!(e.node_name);
            }
            if let Some(r) = &e.target_ref {
                address["targetRef"] = json!({"kind": r.kind, "namespace": r.namespace,
                                              "name": r.name, "uid": r.uid});
            }
            if e.conditions.ready == Some(true) {
                ready.push((ip.clone(), address));
            } else {
                not_ready.push((ip.clone(), address));
            }
        }
        ready.sort_by(|a, b| a.0.cmp(&b.0));
        not_ready.sort_by(|a, b| a.0.cmp(&b.0));
        let mut take = |list: Vec<(String, Value)>| -> Vec<Value> {
            truncated |= list.len() > room;
            let kept: Vec<Value> = list.into_iter().take(room).map(|(_, a)| a).collect();
            room -= kept.len();
            kept
        };
        let (ready, not_ready) = (take(ready), take(not_ready));
        if ready.is_empty() && not_ready.is_empty() {
            continue;
        }
        let ports: Vec<Value> = ports
            .iter()
            .map(|p| {
                let mut port = json!({"port": p.port, "protocol": p.protocol});
                if let Some(name) = p.name.as_ref().filter(|n| !n.is_empty()) {
                    port["name"] = json!(name);
                }
                port
            })
            .collect();
        let mut subset = json!({"ports": ports});
        if !ready.is_empty() {
            subset["addresses"] = json!(ready);
        }
        if !not_ready.is_empty() {
            subset["notReadyAddresses"] = json!(not_ready);
        }
        out.push(subset);
    }
    (out, truncated)
}

/// Slices mirrored from the Endpoints of a Service without a selector: each subset's
/// addresses (ready) and not ready addresses, with its ports, [`MAX_ENDPOINTS`] a slice.
pub fn mirrored(endpoints: &GenericObject) -> Vec<(Vec<EndpointPort>, Vec<Endpoint>)> {
    let mut out = Vec::new();
    let subsets = endpoints.at("/subsets").and_then(Value::as_array);
    for subset in subsets.into_iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| EndpointPort {
                name: Some(
                    p.get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                ),
                protocol: Some(
                    p.get("protocol")
                        .and_then(Value::as_str)
                        .unwrap_or("TCP")
                        .to_owned(),
                ),
                port: p
                    .get("port")
                    .and_then(Value::as_i64)
                    .and_then(|n| i32::try_from(n).ok()),
            })
            .collect();
        let mut list = Vec::new();
        for (field, ready) in [("addresses", true), ("notReadyAddresses", false)] {
            for a in subset
                .get(field)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(ip) = a.get("ip").and_then(Value::as_str) else {
                    continue;
                };
                let target_ref = a.get("targetRef").map(|r| {
                    let s = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
                    ObjectReference {
                        kind: s("kind"),
                        namespace: s("namespace"),
                        name: s("name"),
                        uid: s("uid"),
                    }
                });
                list.push(Endpoint {
                    addresses: vec![ip.to_owned()],
                    hostname: a
                        .get("hostname")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    conditions: EndpointConditions {
                        ready: Some(ready),
                        serving: Some(ready),
                        terminating: Some(false),
                    },
                    node_name: a
                        .get("nodeName")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    target_ref,
                    other: Default::default(),
                });
            }
        }
        for chunk in list.chunks(MAX_ENDPOINTS) {
            out.push((ports.clone(), chunk.to_vec()));
        }
    }
    out
}

/// The kind of `Endpoints` objects.
pub fn endpoints_kind() -> Kind {
    Kind::from_name("Endpoints").expect("Endpoints is a declared kind")
}

/// Whether an Endpoints object is one this controller keeps.
fn ours(meta: &ObjectMeta) -> bool {
    meta.labels
        .get(ENDPOINTS_MANAGED_BY_LABEL)
        .map(String::as_str)
        == Some(ENDPOINTS_MANAGED_BY)
}

impl EndpointSlices {
    pub fn new(ctx: Arc<Context>) -> Self {
        EndpointSlices {
            ctx,
            queue: WorkQueue::new(),
            triggers: std::sync::Mutex::default(),
        }
    }

    /// Queues the Service `key` for a change seen now (the earliest unwritten one's time is
    /// kept).
    fn changed(&self, key: String) {
        self.triggers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key.clone())
            .or_insert_with(trigger_time_now);
        self.queue.add(key);
    }

    pub fn on_service(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            self.changed(key_of(o.metadata()));
        }
    }

    pub fn on_slice(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            let meta = o.metadata();
            let by = meta.labels.get(MANAGED_BY_LABEL).map(String::as_str);
            if (by == Some(MANAGED_BY) || by == Some(MIRRORED_BY))
                && let Some(svc) = meta.labels.get(SERVICE_NAME_LABEL)
            {
                self.queue.add(format!("{}/{svc}", meta.namespace));
            }
        }
    }

    /// Endpoints changed: mirrored if their Service has no selector, made right if it has one.
    pub fn on_endpoints(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            self.changed(key_of(o.metadata()));
        }
    }

    /// A pod changed: every Service that selects it, before or after.
    pub fn on_pod(&self, event: &Event, old: Option<&Object>) {
        let (Event::Added(o) | Event::Modified(o) | Event::Deleted(o)) = event else {
            return;
        };
        let Object::Pod(pod) = o else { return };
        let old = match old {
            Some(Object::Pod(p)) => Some(p),
            _ => None,
        };
        for s in self.ctx.services.list(Some(&pod.metadata.namespace)) {
            let Object::Service(svc) = &*s else { continue };
            if selects(svc, pod) || old.is_some_and(|p| selects(svc, p)) {
                self.changed(key_of(&svc.metadata));
            }
        }
    }

    /// The slices `managed_by` keeps for the Service `namespace/name`, by name.
    fn current(&self, namespace: &str, name: &str, managed_by: &str) -> Vec<EndpointSlice> {
        let mut slices: Vec<EndpointSlice> = self
            .ctx
            .endpoint_slices
            .list(Some(namespace))
            .into_iter()
            .filter_map(|o| match &*o {
                Object::EndpointSlice(s)
                    if s.metadata
                        .labels
                        .get(SERVICE_NAME_LABEL)
                        .map(String::as_str)
                        == Some(name)
                        && s.metadata.labels.get(MANAGED_BY_LABEL).map(String::as_str)
                            == Some(managed_by) =>
                {
                    Some(s.clone())
                }
                _ => None,
            })
            .collect();
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        slices
    }
}

impl Controller for EndpointSlices {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let trigger = self
            .triggers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        let result = self.write(key, trigger.clone()).await;
        if result.is_err()
            && let Some(t) = trigger
        {
            // Not written: the change is still the earliest unwritten one.
            self.triggers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(key.to_owned())
                .or_insert(t);
        }
        result
    }
}

impl EndpointSlices {
    /// Makes the slices of the Service `key` what its pods say; those written carry
    /// `trigger` (when the change they reflect was seen), else the time now.
    async fn write(&self, key: &str, trigger: Option<String>) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let trigger = trigger.unwrap_or_else(trigger_time_now);
        let endpoints = self.ctx.endpoints.get(namespace, name);
        let endpoints = match endpoints.as_deref() {
            Some(Object::Generic(_, e)) => Some(e),
            _ => None,
        };
        let service = self.ctx.services.get(namespace, name);
        let Some(Object::Service(svc)) = service.as_deref() else {
            // Gone: its slices are owned by it, and go with it (the garbage collector); the
            // Endpoints this controller wrote for it go now.
            if let Some(e) = endpoints.filter(|e| ours(&e.metadata)) {
                self.delete_endpoints(e).await?;
            }
            return Ok(None);
        };
        if svc.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        if svc.spec.selector.is_empty() {
            // Someone else keeps its Endpoints: mirrored into slices, unless they ask not to
            // be. Endpoints this controller wrote while the Service had a selector are stale.
            let skip = |e: &GenericObject| {
                e.metadata.labels.get(SKIP_MIRROR_LABEL).map(String::as_str) == Some("true")
            };
            let want = match endpoints {
                Some(e) if ours(&e.metadata) => {
                    self.delete_endpoints(e).await?;
                    Vec::new()
                }
                Some(e) if !skip(e) => mirrored(e),
                _ => Vec::new(),
            };
            return self.write_slices(svc, MIRRORED_BY, want, &trigger).await;
        }
        let pods = self.ctx.pods.list(Some(namespace));
        let want = desired(svc, &pods);
        self.write_endpoints(svc, endpoints, &want, &trigger)
            .await?;
        self.write_slices(svc, MANAGED_BY, want, &trigger).await
    }

    async fn delete_endpoints(&self, e: &GenericObject) -> Result<(), ClientError> {
        let r = self
            .ctx
            .client
            .delete(
                endpoints_kind(),
                &e.metadata.namespace,
                &e.metadata.name,
                0,
                None,
            )
            .await;
        gone_is_none(r).map(|_| ())
    }

    /// Makes the Service's Endpoints hold what `want` (its slices) says.
    async fn write_endpoints(
        &self,
        svc: &Service,
        current: Option<&GenericObject>,
        want: &[(Vec<EndpointPort>, Vec<Endpoint>)],
        trigger: &str,
    ) -> Result<(), ClientError> {
        let (subsets, truncated) = subsets(want);
        let mut labels = svc.metadata.labels.clone();
        labels.insert(
            ENDPOINTS_MANAGED_BY_LABEL.to_owned(),
            ENDPOINTS_MANAGED_BY.to_owned(),
        );
        if svc.is_headless() {
            labels.insert(HEADLESS_LABEL.to_owned(), String::new());
        }
        let subsets_now = current.and_then(|e| e.body.get("subsets")).cloned();
        let subsets_want = (!subsets.is_empty()).then_some(Value::Array(subsets));
        let over = current.and_then(|e| e.metadata.annotations.get(OVER_CAPACITY_ANNOTATION));
        if let Some(e) = current
            && subsets_now == subsets_want
            && e.metadata.labels == labels
            && over.is_some() == truncated
        {
            return Ok(());
        }
        let mut next = current.cloned().unwrap_or_else(|| GenericObject {
            api_version: "v1".into(),
            kind: "Endpoints".into(),
            metadata: ObjectMeta {
                namespace: svc.metadata.namespace.clone(),
                name: svc.metadata.name.clone(),
                ..ObjectMeta::default()
            },
            body: Default::default(),
        });
        next.metadata.labels = labels;
        let annotations = &mut next.metadata.annotations;
        annotations.insert(TRIGGER_TIME_ANNOTATION.to_owned(), trigger.to_owned());
        if truncated {
            annotations.insert(OVER_CAPACITY_ANNOTATION.to_owned(), "truncated".to_owned());
        } else {
            annotations.remove(OVER_CAPACITY_ANNOTATION);
        }
        match subsets_want {
            Some(s) => next.body.insert("subsets".to_owned(), s),
            None => next.body.remove("subsets"),
        };
        let object = Object::Generic(
            match endpoints_kind() {
                Kind::Generic(g) => g,
                _ => unreachable!("Endpoints is declared"),
            },
            next,
        );
        if current.is_some() {
            gone_is_none(self.ctx.client.update(&object).await)?;
        } else {
            // Someone else's Endpoints of that name are left as they are.
            created_or_there(self.ctx.client.create(&object).await)?;
        }
        Ok(())
    }

    /// Makes the slices `managed_by` keeps for `svc` what `want` says; those written carry
    /// `trigger` (when the change they reflect was seen).
    async fn write_slices(
        &self,
        svc: &Service,
        managed_by: &str,
        want: Vec<(Vec<EndpointPort>, Vec<Endpoint>)>,
        trigger: &str,
    ) -> Result<Requeue, ClientError> {
        let (namespace, name) = (&svc.metadata.namespace, &svc.metadata.name);
        let wanted = want.len();
        let have = self.current(namespace, name, managed_by);
        let owner = controller_ref(Kind::Service, &svc.metadata);
        let client = &self.ctx.client;
        for (i, (ports, endpoints)) in want.into_iter().enumerate() {
            match have.get(i) {
                Some(slice) if slice.ports == ports && slice.endpoints == endpoints => {}
                Some(slice) => {
                    let mut next = slice.clone();
                    next.ports = ports;
                    next.endpoints = endpoints;
                    next.metadata
                        .annotations
                        .insert(TRIGGER_TIME_ANNOTATION.to_owned(), trigger.to_owned());
                    gone_is_none(client.update(&Object::EndpointSlice(next)).await)?;
                }
                None => {
                    let mut labels = BTreeMap::new();
                    labels.insert(SERVICE_NAME_LABEL.to_owned(), name.to_owned());
                    labels.insert(MANAGED_BY_LABEL.to_owned(), managed_by.to_owned());
                    let slice = EndpointSlice {
                        metadata: ObjectMeta {
                            namespace: namespace.to_owned(),
                            generate_name: format!("{name}-"),
                            labels,
                            annotations: BTreeMap::from([(
                                TRIGGER_TIME_ANNOTATION.to_owned(),
                                trigger.to_owned(),
                            )]),
                            owner_references: vec![owner.clone()],
                            ..ObjectMeta::default()
                        },
                        address_type: "IPv4".into(),
                        ports,
                        endpoints,
                        ..EndpointSlice::default()
                    };
                    client.create(&Object::EndpointSlice(slice)).await?;
                }
            }
        }
        for extra in have.iter().skip(wanted) {
            let r = client
                .delete(
                    Kind::EndpointSlice,
                    namespace,
                    &extra.metadata.name,
                    0,
                    None,
                )
                .await;
            gone_is_none(r)?;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, app: &str, ip: &str, ready: bool) -> Arc<Object> {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                     "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .expect("pod");
        Arc::new(Object::Pod(pod))
    }

    fn service(target: Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"},
                     "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": target}]}
        }))
        .expect("service")
    }

    #[test]
    fn selected_pods_with_addresses_become_endpoints() {
        let pods = vec![
            pod("b", "web", "10.244.0.3", false),
            pod("a", "web", "10.244.0.2", true),
            pod("c", "db", "10.244.0.4", true),
            pod("d", "web", "", true),
        ];
        let want = desired(&service(serde_json::json!("http")), &pods);
        assert_eq!(want.len(), 1);
        let (ports, endpoints) = &want[0];
        assert_eq!(ports[0].port, Some(8080), "the named port, resolved");
        let addresses: Vec<&str> = endpoints.iter().map(|e| e.addresses[0].as_str()).collect();
        assert_eq!(addresses, ["10.244.0.2", "10.244.0.3"], "by pod name");
        assert_eq!(endpoints[0].conditions.ready, Some(true));
        assert_eq!(endpoints[1].conditions.ready, Some(false));

        let many: Vec<Arc<Object>> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i:03}"),
                    "web",
                    &format!("10.244.1.{}", i % 250),
                    true,
                )
            })
            .collect();
        let sizes: Vec<usize> = desired(&service(serde_json::json!(8080)), &many)
            .iter()
            .map(|(_, e)| e.len())
            .collect();
        assert_eq!(sizes, [100, 100, 50]);

        let none = desired(&service(serde_json::json!(9090)), &[]);
        assert_eq!(none.len(), 1);
        assert!(none[0].1.is_empty());
        assert_eq!(none[0].0[0].port, Some(9090));
    }

    #[test]
    fn endpoints_hold_ready_and_not_ready_addresses_by_ports() {
        let pods = vec![
            pod("b", "web", "10.244.0.3", false),
            pod("a", "web", "10.244.0.9", true),
            pod("c", "web", "10.244.0.2", true),
        ];
        let (written, truncated) = subsets(&desired(&service(json!("http")), &pods));
        assert!(!truncated);
        assert_eq!(
            Value::Array(written),
            json!([{
                "addresses": [
                    {"ip": "10.244.0.2", "nodeName": "n1",
                     "targetRef": {"kind": "Pod", "namespace": "default", "name": "c", "uid": ""}},
                    {"ip": "10.244.0.9", "nodeName": "n1",
                     "targetRef": {"kind": "Pod", "namespace": "default", "name": "a", "uid": ""}}],
                "notReadyAddresses": [
                    {"ip": "10.244.0.3", "nodeName": "n1",
                     "targetRef": {"kind": "Pod", "namespace": "default", "name": "b", "uid": ""}}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
            }])
        );
        let (none, _) = subsets(&desired(&service(serde_json::json!(9090)), &[]));
        assert!(none.is_empty(), "no addresses, no subsets");

        let many: Vec<Arc<Object>> = (0..1200)
            .map(|i| {
                pod(
                    &format!("p{i:04}"),
                    "web",
                    &format!("10.244.{}.{}", i / 250, i % 250),
                    true,
                )
            })
            .collect();
        let (capped, truncated) = subsets(&desired(&service(serde_json::json!(8080)), &many));
        assert!(truncated);
        assert_eq!(capped[0]["addresses"].as_array().map(Vec::len), Some(1000));
    }

    #[test]
    fn endpoints_written_by_hand_are_mirrored() {
        let e: GenericObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "ext", "namespace": "default"},
            "subsets": [{"addresses": [{"ip": "192.0.2.1"}],
                         "notReadyAddresses": [{"ip": "192.0.2.2", "nodeName": "n1"}],
                         "ports": [{"name": "pg", "port": 5432}]}]
        }))
        .expect("endpoints");
        let slices = mirrored(&e);
        assert_eq!(slices.len(), 1);
        let (ports, endpoints) = &slices[0];
        assert_eq!(ports[0].port, Some(5432));
        assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
        let seen: Vec<(&str, Option<bool>)> = endpoints
            .iter()
            .map(|e| (e.addresses[0].as_str(), e.conditions.ready))
            .collect();
        assert_eq!(
            seen,
            [("192.0.2.1", Some(true)), ("192.0.2.2", Some(false))]
        );
    }
}
