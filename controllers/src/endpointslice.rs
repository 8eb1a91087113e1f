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
//! A slice is labelled `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`, and owned by its
//! Service, so the garbage collector removes it with the Service. A Service without a
//! selector is left to whoever keeps its slices. A slice written carries
//! `endpoints.kubernetes.io/last-change-trigger-time`: when this controller saw the earliest
//! change it reflects, from which each node's Service proxy measures its network
//! programming latency.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use skiff_proto::api::meta::IntOrString;
use skiff_proto::api::service::{
    Endpoint, EndpointConditions, EndpointPort, EndpointSlice, MANAGED_BY, MANAGED_BY_LABEL,
    ObjectReference, SERVICE_NAME_LABEL, Service, TRIGGER_TIME_ANNOTATION, trigger_time_now,
};
use skiff_proto::api::{ConditionStatus, Kind, Object, ObjectMeta, Pod, PodConditionType};
use skiff_proto::client::{ClientError, Event};

use crate::core::{Context, Controller, Requeue, controller_ref, gone_is_none, key_of, split_key};
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "endpointslice";
/// Endpoints a slice holds at most (kube-controller-manager's `--max-endpoints-per-slice`).
pub const MAX_ENDPOINTS: usize = 100;

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

/// The endpoint of `pod`, when it has an address and has not finished.
fn endpoint(pod: &Pod) -> Option<Endpoint> {
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
    Some(Endpoint {
        addresses: vec![ip],
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
        let Some(e) = endpoint(pod) else { continue };
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
            if meta.labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
                && let Some(svc) = meta.labels.get(SERVICE_NAME_LABEL)
            {
                self.queue.add(format!("{}/{svc}", meta.namespace));
            }
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

    /// The slices this controller keeps for the Service `namespace/name`, by name.
    fn current(&self, namespace: &str, name: &str) -> Vec<EndpointSlice> {
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
                            == Some(MANAGED_BY) =>
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
        let Some(object) = self.ctx.services.get(namespace, name) else {
            // Gone: its slices are owned by it, and go with it (the garbage collector).
            return Ok(None);
        };
        let Object::Service(svc) = &*object else {
            return Ok(None);
        };
        if svc.spec.selector.is_empty() || svc.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let pods = self.ctx.pods.list(Some(namespace));
        let want = desired(svc, &pods);
        let wanted = want.len();
        let have = self.current(namespace, name);
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
                        .insert(TRIGGER_TIME_ANNOTATION.to_owned(), trigger.clone());
                    gone_is_none(client.update(&Object::EndpointSlice(next)).await)?;
                }
                None => {
                    let mut labels = BTreeMap::new();
                    labels.insert(SERVICE_NAME_LABEL.to_owned(), name.to_owned());
                    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
                    let slice = EndpointSlice {
                        metadata: ObjectMeta {
                            namespace: namespace.to_owned(),
                            generate_name: format!("{name}-"),
                            labels,
                            annotations: BTreeMap::from([(
                                TRIGGER_TIME_ANNOTATION.to_owned(),
                                trigger.clone(),
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

    fn service(target: serde_json::Value) -> Service {
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
}
