//! `pods/log`: a container's log read through the agent of the pod's node, as kube-apiserver
//! reads it through the kubelet. The agent's log service address is on its Node
//! ([`ENDPOINT_ANNOTATION`]). `follow` polls the agent and sends what was appended since, until
//! the pod is gone or finished, or the client goes away.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use skiff_proto::api::{Kind, Object, Pod};
use skiff_proto::logs::{ENDPOINT_ANNOTATION, connect_agent, text_of, text_with_timestamps};
use skiff_proto::node::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::request::{Params, Target};
use super::status::{ApiError, Reason};
use crate::cluster::{ClusterApi, not_found};

/// How long the agent has to answer one read.
const AGENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a followed log is read again.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// What one log read asks the agent for.
#[derive(Debug, Clone)]
struct LogRequest {
    agent: PodAgent,
    request: pb::ContainerLogRequest,
    timestamps: bool,
}

/// The pod's node, its agent's address and the container a request names.
#[derive(Debug, Clone)]
pub(super) struct PodAgent {
    pub(super) node: String,
    pub(super) endpoint: String,
    pub(super) container: String,
    /// This member's TLS to agents (`--kubelet-client-certificate`).
    pub(super) tls: Option<tonic::transport::ClientTlsConfig>,
}

impl PodAgent {
    /// The agent is unreachable or failed: 503, naming the node and the address.
    pub(super) fn unavailable(&self, e: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            Reason::ServiceUnavailable,
            format!("the agent of node {} at {}: {e}", self.node, self.endpoint),
        )
    }

    /// A connection to the agent, with this member's TLS to agents when it serves TLS.
    pub(super) async fn connect(&self) -> Result<tonic::transport::Channel, ApiError> {
        connect_agent(&self.endpoint, self.tls.as_ref(), AGENT_TIMEOUT)
            .await
            .map_err(|e| self.unavailable(e))
    }

    /// An error the agent answered with: what the client asked for is not there or not
    /// running (400, as kube-apiserver answers), or the agent failed (503).
    pub(super) fn refused(&self, s: &tonic::Status) -> ApiError {
        match s.code() {
            tonic::Code::NotFound
            | tonic::Code::FailedPrecondition
            | tonic::Code::InvalidArgument => ApiError::bad_request(s.message().to_string()),
            _ => self.unavailable(s.message()),
        }
    }
}

async fn read(r: &LogRequest, tail_lines: u64) -> Result<Vec<u8>, ApiError> {
    let channel = r.agent.connect().await?;
    let mut client = pb::logs_client::LogsClient::new(channel);
    let mut request = tonic::Request::new(pb::ContainerLogRequest {
        tail_lines,
        ..r.request.clone()
    });
    request.set_timeout(AGENT_TIMEOUT);
    match client.container_log(request).await {
        Ok(r) => Ok(r.into_inner().data),
        Err(s) => Err(r.agent.refused(&s)),
    }
}

fn render(r: &LogRequest, cri: &[u8]) -> String {
    if r.timestamps {
        text_with_timestamps(cri)
    } else {
        text_of(cri)
    }
}

/// The pod's node and agent, and the container asked for (or the pod's only one).
pub(super) async fn pod_agent(
    api: &ClusterApi,
    target: &Target,
    container_asked: &str,
) -> Result<PodAgent, ApiError> {
    let (pod, mut agent) = node_agent(api, target).await?;
    agent.container = container(&pod, container_asked)?;
    Ok(agent)
}

/// The pod a request names, and the agent of its node (naming no container).
pub(super) async fn node_agent(
    api: &ClusterApi,
    target: &Target,
) -> Result<(Pod, PodAgent), ApiError> {
    api.barrier(false).await?;
    let (_, found) = api.get_local(Kind::Pod, &target.namespace, &target.name)?;
    let Some(Object::Pod(pod)) = found.map(|s| s.object) else {
        return Err(not_found(Kind::Pod, &target.name).into());
    };
    let node = pod.spec.node_name.clone();
    if node.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {} does not have a host assigned",
            target.name
        )));
    }
    let (_, n) = api.get_local(Kind::Node, "", &node)?;
    let n = n.ok_or_else(|| not_found(Kind::Node, &node))?;
    let endpoint = n
        .object
        .metadata()
        .annotations
        .get(ENDPOINT_ANNOTATION)
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                Reason::ServiceUnavailable,
                format!("node {node} publishes no agent endpoint ({ENDPOINT_ANNOTATION})"),
            )
        })?;
    let agent = PodAgent {
        node,
        endpoint,
        container: String::new(),
        tls: api.access.kubelet.clone(),
    };
    Ok((pod, agent))
}

/// What a log read asks of the pod's agent.
async fn locate(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
) -> Result<LogRequest, ApiError> {
    let agent = pod_agent(api, target, &params.container).await?;
    Ok(LogRequest {
        request: pb::ContainerLogRequest {
            node: agent.node.clone(),
            namespace: target.namespace.clone(),
            pod: target.name.clone(),
            container: agent.container.clone(),
            previous: params.previous,
            tail_lines: 0,
        },
        agent,
        timestamps: params.timestamps,
    })
}

/// The container a log request names, or the pod's only one.
fn container(pod: &Pod, asked: &str) -> Result<String, ApiError> {
    let names: Vec<&str> = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .map(|c| c.name.as_str())
        .collect();
    if !asked.is_empty() {
        if names.contains(&asked) {
            return Ok(asked.to_string());
        }
        return Err(ApiError::bad_request(format!(
            "container {asked} is not valid for pod {}",
            pod.metadata.name
        )));
    }
    match pod.spec.containers.as_slice() {
        [only] => Ok(only.name.clone()),
        all => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {}, choose one of: [{}]",
            pod.metadata.name,
            all.iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ))),
    }
}

fn text_response(body: Body) -> Response {
    let mut r = body.into_response();
    *r.status_mut() = StatusCode::OK;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

fn limit(mut text: String, limit_bytes: Option<i64>) -> String {
    if let Some(n) = limit_bytes.and_then(|n| usize::try_from(n).ok())
        && text.len() > n
    {
        let mut cut = n;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// GET `pods/<name>/log`.
pub async fn logs(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
) -> Result<Response, ApiError> {
    if params.tail_lines.is_some_and(|n| n < 0) {
        return Err(ApiError::bad_request(
            "tailLines: must be greater than or equal to 0",
        ));
    }
    let r = locate(api, target, params).await?;
    let tail = params.tail_lines.unwrap_or(0) as u64;
    let first = read(&r, tail).await?;
    if !params.follow {
        return Ok(text_response(Body::from(limit(
            render(&r, &first),
            params.limit_bytes,
        ))));
    }
    // Follow: what was there, then what is appended, read again every poll. The offset is in
    // the full log, so the first full read skips what the tailed read already sent.
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    let api = api.clone();
    let target = target.clone();
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from(render(&r, &first)))).await.is_err() {
            return;
        }
        let mut sent = match read(&r, 0).await {
            Ok(all) => all.len(),
            Err(_) => return,
        };
        loop {
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
                _ = tx.closed() => return,
            }
            let finished = match api.get_local(Kind::Pod, &target.namespace, &target.name) {
                Ok((_, Some(s))) => matches!(&s.object, Object::Pod(p) if p.is_terminal()),
                _ => true,
            };
            let Ok(all) = read(&r, 0).await else { return };
            if all.len() < sent {
                // The log was rotated or the container restarted: start over.
                sent = 0;
            }
            // Only whole lines: a line still being written is sent once it ends.
            let end = all[sent..]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(sent, |i| sent + i + 1);
            if end > sent {
                let text = render(&r, &all[sent..end]);
                sent = end;
                if tx.send(Ok(Bytes::from(text))).await.is_err() {
                    return;
                }
            }
            if finished {
                return;
            }
        }
    });
    Ok(text_response(Body::from_stream(ReceiverStream::new(rx))))
}
