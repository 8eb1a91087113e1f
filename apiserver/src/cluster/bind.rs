//! Batch Bind: many pod → node bindings in one Raft log entry, each checked on its own.
//!
//! The member reads every pod and node once, decides each binding, and proposes one
//! transaction whose operations are one nested transaction per binding that passed: "the pod
//! still has the revision I checked and the node still exists" → put the bound pod. Nested
//! transactions choose their branches independently, so a binding that lost a race fails
//! alone, and nothing of it is written.

use std::collections::HashSet;

use skiff_proto::api::pod::PodCondition;
use skiff_proto::api::{ConditionStatus, Kind, Object, Pod, PodConditionType};
use skiff_proto::cluster::v1::bind_result::Outcome;
use skiff_proto::cluster::v1::{BindResult, Binding};

use super::{ClusterApi, encode};
use skiff_store::request::{
    Compare, CompareResult, CompareTarget, PutRequest, RangeRequest, RequestOp, ResponseOp,
    TxnRequest,
};

fn result(outcome: Outcome, message: String) -> BindResult {
    BindResult {
        outcome: outcome as i32,
        message,
        resource_version: 0,
    }
}

/// Assigns `pod` to `node`: `spec.nodeName` and `PodScheduled=True`.
///
/// The only writer of `PodScheduled=True`. In Kubernetes the API server's binding
/// subresource sets it as it assigns the node; here Bind does, and create does for a pod that
/// names its node itself. The other case has one writer too: the scheduler's status writer
/// (`skiff_scheduler::service::status`) sets `PodScheduled=False, Unschedulable`; the node
/// agent reports the condition as it found it on the pod, and never writes its own.
pub fn assign(pod: &mut Pod, node: &str) {
    pod.spec.node_name = node.to_string();
    pod.status
        .get_or_insert_with(Default::default)
        .set_condition(PodCondition::new(
            PodConditionType::PodScheduled,
            ConditionStatus::True,
        ));
}

fn bound(object: &Object, node: &str) -> Object {
    let mut next = object.clone();
    if let Object::Pod(p) = &mut next {
        assign(p, node);
    }
    next
}

impl ClusterApi {
    /// Commits the good bindings of `bindings` in one log entry; one result per binding, in
    /// order. Returns the revision after the commit. With a `fence` (key, create revision),
    /// each binding also requires that key to still have that create revision.
    pub async fn bind(
        &self,
        bindings: &[Binding],
        fence: Option<(&str, i64)>,
    ) -> super::Result<(i64, Vec<BindResult>)> {
        self.barrier(false).await?;
        let mut results: Vec<Option<BindResult>> = vec![None; bindings.len()];
        let mut ops = Vec::new();
        // (index in request, pod key, revision checked) of each binding in the transaction.
        let mut proposed: Vec<(usize, String)> = Vec::new();
        let mut seen = HashSet::new();
        for (i, b) in bindings.iter().enumerate() {
            let invalid = |m: String| Some(result(Outcome::Invalid, m));
            if b.pod.is_empty() || b.node.is_empty() || b.namespace.is_empty() {
                results[i] = invalid("namespace, pod and node are required".into());
                continue;
            }
            if !seen.insert((b.namespace.clone(), b.pod.clone())) {
                results[i] = invalid(format!(
                    "pod {}/{} appears twice in the batch",
                    b.namespace, b.pod
                ));
                continue;
            }
            let (_, pod) = self.get_local(Kind::Pod, &b.namespace, &b.pod)?;
            let Some(pod) = pod else {
                results[i] = Some(result(
                    Outcome::PodNotFound,
                    format!("pods \"{}\" not found in namespace {}", b.pod, b.namespace),
                ));
                continue;
            };
            let Object::Pod(p) = &pod.object else {
                continue;
            };
            if !p.spec.node_name.is_empty() {
                results[i] = Some(result(
                    Outcome::AlreadyBound,
                    format!(
                        "pod {}/{} is already bound to {}",
                        b.namespace, b.pod, p.spec.node_name
                    ),
                ));
                continue;
            }
            if b.pod_resource_version != 0 && b.pod_resource_version != pod.mod_revision {
                results[i] = Some(result(
                    Outcome::Conflict,
                    format!(
                        "pod {}/{} changed: resourceVersion {} is now {}",
                        b.namespace, b.pod, b.pod_resource_version, pod.mod_revision
                    ),
                ));
                continue;
            }
            if p.metadata.deletion_timestamp.is_some() {
                results[i] = Some(result(
                    Outcome::PodTerminating,
                    format!("pod {}/{} is being deleted", b.namespace, b.pod),
                ));
                continue;
            }
            let (_, node) = self.get_local(Kind::Node, "", &b.node)?;
            if node.is_none() {
                results[i] = Some(result(
                    Outcome::NodeNotFound,
                    format!("nodes \"{}\" not found", b.node),
                ));
                continue;
            }
            let pod_key = Kind::Pod.key(&b.namespace, &b.pod);
            let node_key = Kind::Node.key("", &b.node);
            let mut compare = vec![
                Compare {
                    key: pod_key.as_bytes().to_vec(),
                    range_end: Vec::new(),
                    result: CompareResult::Equal,
                    target: CompareTarget::Mod(pod.mod_revision),
                },
                Compare {
                    key: node_key.as_bytes().to_vec(),
                    range_end: Vec::new(),
                    result: CompareResult::Greater,
                    target: CompareTarget::Create(0),
                },
            ];
            if let Some((key, revision)) = fence {
                compare.push(Compare {
                    key: key.as_bytes().to_vec(),
                    range_end: Vec::new(),
                    result: CompareResult::Equal,
                    target: CompareTarget::Create(revision),
                });
            }
            ops.push(RequestOp::Txn(TxnRequest {
                compare,
                success: vec![RequestOp::Put(PutRequest {
                    key: pod_key.as_bytes().to_vec(),
                    value: encode(&bound(&pod.object, &b.node)),
                    ..PutRequest::default()
                })],
                failure: vec![RequestOp::Range(RangeRequest {
                    key: node_key.into_bytes(),
                    count_only: true,
                    ..RangeRequest::default()
                })],
                auth_revision: None,
            }));
            proposed.push((i, pod_key));
        }
        let mut revision = self.revision();
        if !ops.is_empty() {
            let (rev, responses) = self.txn_each(ops).await?;
            revision = rev;
            for ((i, _key), op) in proposed.iter().zip(responses) {
                let b = &bindings[*i];
                results[*i] = Some(match op {
                    ResponseOp::Txn(t) if t.succeeded => BindResult {
                        outcome: Outcome::Bound as i32,
                        message: String::new(),
                        resource_version: rev,
                    },
                    ResponseOp::Txn(t) => {
                        let node_gone = matches!(t.responses.first(), Some(ResponseOp::Range(r)) if r.count == 0);
                        if node_gone {
                            result(
                                Outcome::NodeNotFound,
                                format!("nodes \"{}\" not found", b.node),
                            )
                        } else {
                            let why = if fence.is_some() {
                                "changed while binding, or the scheduler's leadership \
                                 (fence) was lost"
                            } else {
                                "changed while binding"
                            };
                            result(
                                Outcome::Conflict,
                                format!("pod {}/{} {why}; retry", b.namespace, b.pod),
                            )
                        }
                    }
                    _ => result(Outcome::Invalid, "unexpected response".into()),
                });
            }
        }
        Ok((
            revision,
            results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| result(Outcome::Invalid, "not a pod".into())))
                .collect(),
        ))
    }
}
