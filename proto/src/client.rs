//! The cluster API client the scheduler, the node agents and the CLI share, and an informer:
//! list, then watch from the list's revision, keep a local cache, relist when the watch's
//! start was compacted away.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{Stream, StreamExt};
pub use tonic::Code;
use tonic::Status;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::api::object::DecodeError;
use crate::api::{DeletionPropagation, Kind, Object};
use crate::backoff::Backoff;
use crate::cluster::v1 as pb;
use crate::cluster::v1::cluster_client::ClusterClient as Raw;
use crate::cluster::v1::watch_event::Type;
use crate::tls::ClientTls;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server's answer: its message names the cause (and field path, for validation).
    #[error("{}", status_message(.0))]
    Status(#[from] Status),
    #[error("endpoint {endpoint}: {source}")]
    Endpoint {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("no endpoints given")]
    NoEndpoints,
    #[error("endpoint {endpoint}: https needs the CA to check the store's certificate (--cacert)")]
    NoCa { endpoint: String },
    #[error("TLS: {0}")]
    TlsFile(#[from] crate::tls::TlsFileError),
    #[error("the bearer token has characters an HTTP header cannot carry")]
    Token,
    #[error("server sent a {kind} that does not decode: {source}")]
    Decode { kind: String, source: DecodeError },
}

/// What a server's status says. gRPC answers a call to a service the server does not have
/// with `Unimplemented` and no message: from a member started without `--apiserver`, which
/// serves the etcd API alone, that is the first thing a client of the cluster API sees.
fn status_message(s: &Status) -> String {
    if s.code() == Code::Unimplemented && s.message().is_empty() {
        return "the endpoint does not serve Skiff's cluster API: a member started without \
                --apiserver is an etcd and nothing else (start the members with --apiserver, \
                or point at `skiff apiserver`)"
            .into();
    }
    s.message().to_string()
}

impl ClientError {
    /// The gRPC code, when the server answered.
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Status(s) => Some(s.code()),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;

/// A change seen by a watch.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Added(Object),
    Modified(Object),
    Deleted(Object),
    /// Everything up to this revision has been delivered.
    Bookmark(i64),
}

/// The `authorization: Bearer` header a client sends on every call, when it has a token (a
/// joining node's bootstrap token).
#[derive(Debug, Clone, Default)]
struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut req: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, Status> {
        if let Some(token) = &self.0 {
            req.metadata_mut().insert("authorization", token.clone());
        }
        Ok(req)
    }
}

/// Which part of an object an update writes.
#[derive(Debug, Clone, Copy)]
enum Part {
    Main,
    Status,
    Approval,
    Finalize,
}

/// A client of the cluster API, balanced over the given store members.
#[derive(Debug, Clone)]
pub struct ClusterClient {
    raw: Raw<InterceptedService<Channel, Bearer>>,
    /// The fencing token every write carries (see [`ClusterClient::fenced`]).
    fence: Option<pb::Fence>,
}

fn to_pb(object: &Object) -> pb::Object {
    let mut o = object.clone();
    o.set_type_meta();
    pb::Object {
        kind: o.kind().wire_name().into_owned(),
        json: o.to_json(),
    }
}

fn from_pb(o: &pb::Object) -> Result<Object> {
    let kind = Kind::from_wire(&o.kind).ok_or_else(|| ClientError::Decode {
        kind: o.kind.clone(),
        source: DecodeError::whole("unknown kind"),
    })?;
    Object::from_json(kind, &o.json).map_err(|source| ClientError::Decode {
        kind: o.kind.clone(),
        source,
    })
}

fn key(kind: Kind, namespace: &str, name: &str) -> pb::ObjectKey {
    pb::ObjectKey {
        kind: kind.wire_name().into_owned(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// Which objects of a kind a list covers: one namespace (every namespace when unset), and
/// label and field selectors in Kubernetes' syntax (`app=web,tier!=db`, `spec.nodeName=n1`).
///
/// ```
/// # use skiff_proto::client::ListParams;
/// let p = ListParams::default().namespace("team").labels("app=web");
/// assert_eq!(p.fields, "");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListParams {
    pub namespace: String,
    pub labels: String,
    pub fields: String,
}

impl ListParams {
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.labels = selector.into();
        self
    }

    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.fields = selector.into();
        self
    }

    /// A watch of the same objects, for changes after `resource_version` (0: from now).
    pub fn watch_after(&self, resource_version: i64) -> WatchParams {
        WatchParams {
            list: self.clone(),
            resource_version,
            bookmarks: false,
        }
    }

    fn selectors(&self) -> Option<pb::Selectors> {
        Some(pb::Selectors {
            label_selector: self.labels.clone(),
            field_selector: self.fields.clone(),
        })
    }
}

/// A watch: the objects ([`ListParams`]), the revision it starts after (0: from now), and
/// whether the server sends bookmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchParams {
    pub list: ListParams,
    pub resource_version: i64,
    pub bookmarks: bool,
}

impl WatchParams {
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.list = self.list.namespace(namespace);
        self
    }

    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.list = self.list.labels(selector);
        self
    }

    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.list = self.list.fields(selector);
        self
    }

    /// Changes after this revision (a list's `resourceVersion`).
    pub fn resource_version(mut self, resource_version: i64) -> Self {
        self.resource_version = resource_version;
        self
    }

    /// Asks for bookmarks: progress events that carry only a revision.
    pub fn bookmarks(mut self) -> Self {
        self.bookmarks = true;
        self
    }
}

/// One channel balanced over `endpoints` (`https://` with `tls`), connected lazily.
fn channel(endpoints: &[String], tls: Option<&ClientTls>) -> Result<Channel> {
    if endpoints.is_empty() {
        return Err(ClientError::NoEndpoints);
    }
    let tls_config = tls.map(ClientTls::config).transpose()?;
    let mut eps = Vec::new();
    for e in endpoints {
        if tls.is_none() && e.starts_with("https://") {
            return Err(ClientError::NoCa {
                endpoint: e.clone(),
            });
        }
        let url = crate::tls::url(e, tls.is_some());
        let mut ep = Endpoint::from_shared(url)
            .map_err(|source| ClientError::Endpoint {
                endpoint: e.clone(),
                source,
            })?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10));
        if let Some(c) = &tls_config {
            ep = ep
                .tls_config(c.clone())
                .map_err(|source| ClientError::Endpoint {
                    endpoint: e.clone(),
                    source,
                })?;
        }
        eps.push(ep);
    }
    Ok(Channel::balance_list(eps.into_iter()))
}

/// The per-object results of a CreateMany or UpdateStatusMany, in request order.
fn results(r: pb::ManyResponse) -> Vec<Result<Object>> {
    r.results
        .into_iter()
        .map(|r| match r.object {
            Some(o) if r.code == 0 => from_pb(&o),
            _ => Err(ClientError::Status(Status::new(
                Code::from(r.code),
                r.message,
            ))),
        })
        .collect()
}

impl ClusterClient {
    /// Connects (lazily) to every endpoint (`host:port` or `http://host:port`).
    pub fn connect(endpoints: &[String]) -> Result<Self> {
        Self::connect_with(endpoints, None)
    }

    /// A client of `endpoints`, over TLS with `tls` (every endpoint then `https://`).
    pub fn connect_with(endpoints: &[String], tls: Option<&ClientTls>) -> Result<Self> {
        Ok(Self::over(channel(endpoints, tls)?, Bearer::default()))
    }

    fn over(channel: Channel, bearer: Bearer) -> Self {
        ClusterClient {
            fence: None,
            raw: Raw::with_interceptor(channel, bearer)
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
        }
    }

    /// This client authenticating with a bearer token (`authorization: Bearer <token>`) on
    /// every call, as a joining node does with its bootstrap token.
    pub fn with_token(endpoints: &[String], tls: &ClientTls, token: &str) -> Result<Self> {
        let value =
            MetadataValue::try_from(format!("Bearer {token}")).map_err(|_| ClientError::Token)?;
        Ok(Self::over(
            channel(endpoints, Some(tls))?,
            Bearer(Some(value)),
        ))
    }

    /// This client with every create, update and delete fenced by a leadership: each commits
    /// only while the etcd key `key` still has create revision `create_revision`, and fails
    /// with `FAILED_PRECONDITION` once another leader took over.
    pub fn fenced(&self, key: &str, create_revision: i64) -> ClusterClient {
        ClusterClient {
            raw: self.raw.clone(),
            fence: Some(pb::Fence {
                key: key.to_owned(),
                create_revision,
            }),
        }
    }

    pub async fn create(&self, object: &Object) -> Result<Object> {
        let r = self
            .raw
            .clone()
            .create(pb::CreateRequest {
                object: Some(to_pb(object)),
                dry_run: false,
                fence: self.fence.clone(),
            })
            .await?
            .into_inner();
        from_pb(&r.object.unwrap_or_default())
    }

    /// Creates `objects` in one request (one log entry), each checked on its own: one result
    /// per object, in order, each as [`ClusterClient::create`] would have answered it.
    pub async fn create_many(&self, objects: &[Object]) -> Result<Vec<Result<Object>>> {
        let r = self
            .raw
            .clone()
            .create_many(pb::CreateManyRequest {
                objects: objects.iter().map(to_pb).collect(),
                fence: self.fence.clone(),
            })
            .await?;
        Ok(results(r.into_inner()))
    }

    /// Writes the statuses of `objects` in one request (one log entry), each checked on its
    /// own as [`ClusterClient::update_status`] checks one, and patched: stored conditions of
    /// types an object's status does not carry are kept. A status that changes nothing is
    /// not written. An object's `metadata.uid`, when set, must be the stored one's (else
    /// NOT_FOUND). One result per object, in order.
    pub async fn update_status_many(&self, objects: &[Object]) -> Result<Vec<Result<Object>>> {
        let r = self
            .raw
            .clone()
            .update_status_many(pb::UpdateStatusManyRequest {
                objects: objects.iter().map(to_pb).collect(),
                fence: self.fence.clone(),
            })
            .await?;
        Ok(results(r.into_inner()))
    }

    pub async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<Object>> {
        match self
            .raw
            .clone()
            .get(pb::GetRequest {
                key: Some(key(kind, namespace, name)),
                serializable: false,
            })
            .await
        {
            Ok(r) => from_pb(&r.into_inner().object.unwrap_or_default()).map(Some),
            Err(s) if s.code() == Code::NotFound => Ok(None),
            Err(s) => Err(s.into()),
        }
    }

    /// Every object of a kind that `params` selects (all pages), and the collection's
    /// revision to watch from.
    pub async fn list(&self, kind: Kind, params: &ListParams) -> Result<(Vec<Object>, i64)> {
        let mut items = Vec::new();
        let mut token = String::new();
        loop {
            let r = self
                .raw
                .clone()
                .list(pb::ListRequest {
                    kind: kind.wire_name().into_owned(),
                    namespace: params.namespace.clone(),
                    selectors: params.selectors(),
                    limit: 0,
                    continue_token: token,
                    serializable: false,
                })
                .await?
                .into_inner();
            for o in &r.items {
                items.push(from_pb(o)?);
            }
            if r.continue_token.is_empty() {
                return Ok((items, r.resource_version));
            }
            token = r.continue_token;
        }
    }

    /// Changes to the objects `params` selects, after its resource version.
    pub async fn watch(
        &self,
        kind: Kind,
        params: &WatchParams,
    ) -> Result<impl Stream<Item = Result<Event>> + Send + 'static> {
        let stream = self
            .raw
            .clone()
            .watch(pb::WatchRequest {
                kind: kind.wire_name().into_owned(),
                namespace: params.list.namespace.clone(),
                selectors: params.list.selectors(),
                resource_version: params.resource_version,
                allow_bookmarks: params.bookmarks,
            })
            .await?
            .into_inner();
        Ok(stream.map(|item| {
            let e = item?;
            let object = || {
                from_pb(
                    e.object
                        .as_ref()
                        .ok_or_else(|| Status::internal("event without object"))?,
                )
            };
            Ok(match Type::try_from(e.r#type).unwrap_or(Type::Bookmark) {
                Type::Added => Event::Added(object()?),
                Type::Modified => Event::Modified(object()?),
                Type::Deleted => Event::Deleted(object()?),
                Type::Bookmark => Event::Bookmark(e.revision),
            })
        }))
    }

    pub async fn update(&self, object: &Object) -> Result<Object> {
        self.write_part(object, Part::Main).await
    }

    pub async fn update_status(&self, object: &Object) -> Result<Object> {
        self.write_part(object, Part::Status).await
    }

    /// Writes a CertificateSigningRequest's Approved or Denied condition (its `approval`
    /// subresource), as an approver does.
    pub async fn update_approval(&self, object: &Object) -> Result<Object> {
        self.write_part(object, Part::Approval).await
    }

    /// Writes a namespace's `spec.finalizers` (its `finalize` subresource), as the namespace
    /// controller does once a deleted namespace is empty.
    pub async fn update_finalize(&self, object: &Object) -> Result<Object> {
        self.write_part(object, Part::Finalize).await
    }

    /// An update of `part` of `object` (the object itself, its status, or a request's
    /// approval), fenced as this client is.
    async fn write_part(&self, object: &Object, part: Part) -> Result<Object> {
        let request = pb::UpdateRequest {
            object: Some(to_pb(object)),
            dry_run: false,
            fence: self.fence.clone(),
        };
        let mut raw = self.raw.clone();
        let r = match part {
            Part::Main => raw.update(request).await?,
            Part::Status => raw.update_status(request).await?,
            Part::Approval => raw.update_approval(request).await?,
            Part::Finalize => raw.update_finalize(request).await?,
        }
        .into_inner();
        from_pb(&r.object.unwrap_or_default())
    }

    /// A token of service account `namespace/name` for `audiences` (the API server's own
    /// when none), living `expiration` (an hour when none), bound to the pod `bound_pod`
    /// (name and uid) when given: its `token` subresource, as a kubelet asks for the
    /// tokens it projects into pods. The token and when it expires.
    pub async fn create_token(
        &self,
        namespace: &str,
        name: &str,
        audiences: &[String],
        expiration: Option<Duration>,
        bound_pod: Option<(&str, &str)>,
    ) -> Result<(String, crate::api::Time)> {
        let (pod, uid) = bound_pod.unwrap_or_default();
        let request = pb::CreateTokenRequest {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            audiences: audiences.to_vec(),
            expiration_seconds: expiration
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
            bound_pod_name: pod.to_owned(),
            bound_pod_uid: uid.to_owned(),
        };
        let r = self.raw.clone().create_token(request).await?.into_inner();
        let expires =
            crate::api::Time::from_unix(r.expiration_unix).ok_or_else(|| ClientError::Decode {
                kind: "CreateTokenResponse".into(),
                source: DecodeError::whole(format!(
                    "an expiration time out of range: {}",
                    r.expiration_unix
                )),
            })?;
        Ok((r.token, expires))
    }

    /// Deletes (gracefully for a bound pod unless `grace` is 0); returns the object as it was,
    /// or as it now is while terminating.
    pub async fn delete(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        resource_version: i64,
        grace: Option<i64>,
    ) -> Result<Object> {
        self.delete_with(kind, namespace, name, resource_version, grace, None)
            .await
    }

    /// Deletes with a grace period and a propagation policy, either left to the server
    /// (`None`: a pod's own grace period; the kind's default propagation, Background but for
    /// Jobs, whose pods a delete without one leaves).
    pub async fn delete_with(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        resource_version: i64,
        grace: Option<i64>,
        propagation: Option<DeletionPropagation>,
    ) -> Result<Object> {
        self.delete_request(pb::DeleteRequest {
            key: Some(key(kind, namespace, name)),
            resource_version,
            grace_period_seconds: grace,
            propagation_policy: propagation.map(|p| p.as_str().to_owned()),
            fence: self.fence.clone(),
        })
        .await
    }

    /// Deletes with a propagation policy, as `kubectl delete --cascade` does: `Orphan` and
    /// `Foreground` leave the object marked with the garbage collector's finalizer (returned
    /// as it now is), `Background` deletes it as [`ClusterClient::delete`] does.
    pub async fn delete_propagating(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        resource_version: i64,
        propagation: DeletionPropagation,
    ) -> Result<Object> {
        self.delete_with(
            kind,
            namespace,
            name,
            resource_version,
            None,
            Some(propagation),
        )
        .await
    }

    async fn delete_request(&self, request: pb::DeleteRequest) -> Result<Object> {
        let r = self.raw.clone().delete(request).await?.into_inner();
        from_pb(&r.object.unwrap_or_default())
    }

    pub async fn bind(&self, bindings: Vec<pb::Binding>) -> Result<Vec<pb::BindResult>> {
        self.bind_fenced(bindings, "", 0).await
    }

    /// Bind that commits only while the etcd key `fence_key` still has create revision
    /// `fence_revision` (a leader-elected scheduler's leadership key; see `BindRequest`).
    pub async fn bind_fenced(
        &self,
        bindings: Vec<pb::Binding>,
        fence_key: &str,
        fence_revision: i64,
    ) -> Result<Vec<pb::BindResult>> {
        Ok(self
            .raw
            .clone()
            .bind(pb::BindRequest {
                bindings,
                fence_key: fence_key.to_string(),
                fence_revision,
            })
            .await?
            .into_inner()
            .results)
    }
}

/// A local cache of one kind, kept current by list + watch.
#[derive(Debug)]
pub struct Informer {
    client: ClusterClient,
    kind: Kind,
    params: ListParams,
    cache: BTreeMap<String, Object>,
    revision: i64,
}

/// Whether an informer waits and tries again after `e`, as client-go's reflector does after
/// any failed list or watch: everything but a request the store will never take (a bad
/// selector, an API it does not serve) and a client that cannot work at all (no endpoints,
/// TLS files, an answer that does not decode). A member that is away, a connection that
/// broke (whatever code the transport gave it: `Unknown` for a broken pipe), a timeout, no
/// leader: all wait. A refusal of the user's (permission, credentials) is logged, since only
/// an administrator ends it.
fn waits(e: &ClientError, kind: Kind) -> bool {
    match e {
        ClientError::Status(s) => match s.code() {
            Code::InvalidArgument | Code::Unimplemented | Code::OutOfRange => false,
            Code::PermissionDenied | Code::Unauthenticated => {
                tracing::warn!(%kind, error = %e, "list or watch refused; trying again");
                true
            }
            _ => true,
        },
        ClientError::Endpoint { .. } => true,
        ClientError::NoEndpoints
        | ClientError::NoCa { .. }
        | ClientError::TlsFile(_)
        | ClientError::Token
        | ClientError::Decode { .. } => false,
    }
}

impl Informer {
    /// An informer of the objects of `kind` that `params` selects.
    pub fn new(client: ClusterClient, kind: Kind, params: ListParams) -> Self {
        Informer {
            client,
            kind,
            params,
            cache: BTreeMap::new(),
            revision: 0,
        }
    }

    pub fn cache(&self) -> &BTreeMap<String, Object> {
        &self.cache
    }

    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Lists until the store answers, waiting between tries as [`Informer::run`] does (a
    /// member that is away, a refusal for permission); then as [`Informer::relist`]. Returns
    /// an error only for what no retry mends. This is how a component fills its caches at
    /// start: a binding written a moment before it started may not have reached the member
    /// it asks yet, and client-go's reflector waits that out too.
    pub async fn sync(&mut self) -> Result<Vec<Event>> {
        let mut backoff = Backoff::for_store();
        loop {
            match self.relist().await {
                Ok(events) => return Ok(events),
                Err(e) if waits(&e, self.kind) => {
                    tracing::debug!(kind = %self.kind, error = %e, "list failed; trying again");
                    backoff.wait().await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Lists and replaces the cache; returns the events that turn the old cache into the new.
    pub async fn relist(&mut self) -> Result<Vec<Event>> {
        let (items, rev) = self.client.list(self.kind, &self.params).await?;
        let mut fresh: BTreeMap<String, Object> = items.into_iter().map(|o| (o.key(), o)).collect();
        let mut events = Vec::new();
        for (k, old) in &self.cache {
            if !fresh.contains_key(k) {
                events.push(Event::Deleted(old.clone()));
            }
        }
        for (k, new) in &fresh {
            match self.cache.get(k) {
                None => events.push(Event::Added(new.clone())),
                Some(old) if old != new => events.push(Event::Modified(new.clone())),
                Some(_) => {}
            }
        }
        std::mem::swap(&mut self.cache, &mut fresh);
        self.revision = rev;
        Ok(events)
    }

    /// Runs forever: lists (unless [`Informer::sync`] or [`Informer::relist`] already did),
    /// then applies watch events to the cache and hands each one to `on_event` with the cache
    /// as it is after the event. Returns only on errors other than a compacted start, a broken stream, a store
    /// that is away (which relist, reconnect or wait) or a refusal for permission (which
    /// waits and tries again, as client-go's reflector does: a binding made a moment before
    /// may not have reached the member yet, and an administrator may grant it).
    pub async fn run<F>(&mut self, mut on_event: F) -> Result<()>
    where
        F: FnMut(&Event, &BTreeMap<String, Object>),
    {
        // A caller that listed already (`relist`) watches on from that list.
        let mut need_list = self.revision == 0;
        // Reconnects wait a little longer each time the store stays away, so a thousand
        // informers do not hammer a member that is starting or a cluster without a leader.
        let mut backoff = Backoff::for_store();
        loop {
            if need_list {
                for e in self.sync().await? {
                    on_event(&e, &self.cache);
                }
                need_list = false;
            }
            let mut stream = match self
                .client
                .watch(
                    self.kind,
                    &self.params.watch_after(self.revision).bookmarks(),
                )
                .await
            {
                Ok(s) => Box::pin(s),
                Err(e) if e.code() == Some(Code::FailedPrecondition) => {
                    need_list = true;
                    continue;
                }
                Err(e) if waits(&e, self.kind) => {
                    backoff.wait().await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            while let Some(item) = stream.next().await {
                let event = match item {
                    Ok(e) => e,
                    Err(e) if e.code() == Some(Code::FailedPrecondition) => {
                        need_list = true;
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "watch broke; resuming");
                        backoff.wait().await;
                        break;
                    }
                };
                backoff.reset();
                match &event {
                    Event::Added(o) | Event::Modified(o) => {
                        self.revision = self.revision.max(o.metadata().revision().unwrap_or(0));
                        self.cache.insert(o.key(), o.clone());
                    }
                    Event::Deleted(o) => {
                        self.revision = self.revision.max(o.metadata().revision().unwrap_or(0));
                        self.cache.remove(&o.key());
                    }
                    Event::Bookmark(r) => self.revision = self.revision.max(*r),
                }
                on_event(&event, &self.cache);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An informer outlives a member's death whatever code the broken connection came back
    /// with, and stops only for what no retry mends.
    #[test]
    fn informers_wait_out_broken_connections() {
        let status = |code: Code, msg: &str| ClientError::Status(Status::new(code, msg));
        for waited in [
            status(Code::Unknown, "transport error: Broken pipe (os error 32)"),
            status(Code::Unavailable, "connection refused"),
            status(Code::Cancelled, "operation was canceled"),
            status(Code::DeadlineExceeded, "Timeout expired"),
            status(Code::Internal, "h2 protocol error"),
            status(Code::PermissionDenied, "forbidden"),
        ] {
            assert!(waits(&waited, Kind::Pod), "{waited:?}");
        }
        for ended in [
            status(Code::InvalidArgument, "bad field selector"),
            status(Code::Unimplemented, "unknown service"),
            ClientError::NoEndpoints,
        ] {
            assert!(!waits(&ended, Kind::Pod), "{ended:?}");
        }
    }

    /// A call to a service the server lacks names the likely cause; a server's own message
    /// is passed on as it is.
    #[test]
    fn a_server_without_the_cluster_api_is_named() {
        let bare = ClientError::Status(Status::new(Code::Unimplemented, ""));
        assert!(bare.to_string().contains("--apiserver"), "{bare}");
        let own = ClientError::Status(Status::new(Code::Unimplemented, "CreateMany is newer"));
        assert_eq!(own.to_string(), "CreateMany is newer");
    }
}
