//! The gRPC face of the cluster API. Each request is authenticated (the connection's
//! client certificate, else an `authorization: Bearer` token) and authorized as the REST
//! face authorizes the same verb on the same resource.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use skiff_proto::api::{DeletionPropagation, Kind};
use skiff_proto::cluster::v1 as pb;
use skiff_proto::cluster::v1::cluster_server::Cluster;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::list::ReadAt;
use super::token::{BoundKind, BoundObject, TokenRequest};
use super::watch::Filter;
use super::{
    ClusterApi, ClusterError, Part, from_pb, header, kind_attributes, not_found, parse_kind, to_pb,
};
use crate::access::User;
use crate::access::audit::{Asked, Slot};
use skiff_store::tls::ConnInfo;

/// Who sent a request: its connection's client certificate, else its bearer token, else
/// anonymous (when allowed).
fn user<T>(api: &ClusterApi, req: &Request<T>) -> Result<User, ClusterError> {
    let cert = req
        .extensions()
        .get::<ConnInfo>()
        .and_then(|c| c.client.as_ref());
    let bearer = req
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(crate::access::bearer);
    Ok(api.access.authenticate(bearer, cert, api)?)
}

/// What a request is asked about: a verb on a kind (a subresource of it; one object when
/// `name` is given) in a namespace, with a list's or watch's field selector.
struct Ask<'a> {
    verb: &'a str,
    kind: Kind,
    subresource: Option<&'a str>,
    namespace: &'a str,
    name: &'a str,
    fields: &'a str,
}

impl<'a> Ask<'a> {
    fn new(verb: &'a str, kind: Kind, namespace: &'a str, name: &'a str) -> Ask<'a> {
        Ask {
            verb,
            kind,
            subresource: None,
            namespace,
            name,
            fields: "",
        }
    }
}

/// Authenticates the request and checks what it asks; the API to serve it with, writing for
/// its user (so admission knows who writes). Who asked what, and the answer, go to the
/// audit log's slot when the call is audited.
fn authorize<T>(
    api: &ClusterApi,
    req: &Request<T>,
    ask: Ask<'_>,
) -> Result<ClusterApi, ClusterError> {
    let slot = req.extensions().get::<Slot>();
    // A certificate request records its requester, so its create is authenticated even
    // when everything is allowed.
    if api.access.allows_everything()
        && slot.is_none()
        && ask.kind != Kind::CertificateSigningRequest
    {
        return Ok(api.clone());
    }
    let user = user(api, req)?;
    let attributes = kind_attributes(
        ask.verb,
        ask.kind,
        ask.subresource,
        ask.namespace,
        ask.name,
        ask.fields,
    );
    let answer = api.authorize(&user, attributes.clone());
    if let Some(slot) = slot {
        slot.fill(Asked {
            user: user.clone(),
            attributes,
            allowed: answer.is_ok(),
        });
    }
    answer?;
    Ok(api.as_user(&user))
}

/// Update, UpdateStatus, UpdateApproval and UpdateFinalize: authorized as `update` of the object or of its
/// subresource, then written as [`ClusterApi::update`] writes `part`.
async fn update_part(
    api: &ClusterApi,
    req: Request<pb::UpdateRequest>,
    part: Part,
) -> Result<Response<pb::ObjectResponse>, Status> {
    let object = from_pb(req.get_ref().object.clone())?;
    let (ns, name) = (namespace_of(&object), &object.metadata().name);
    let ask = Ask {
        subresource: match part {
            Part::Main => None,
            Part::Status => Some("status"),
            Part::Approval => Some("approval"),
            Part::Finalize => Some("finalize"),
        },
        ..Ask::new("update", object.kind(), ns, name)
    };
    let me = authorize(api, &req, ask)?;
    let req = req.into_inner();
    let fenced = fenced(&me, req.fence);
    let (rev, o) = ClusterApi::update(&fenced, object, part, req.dry_run).await?;
    Ok(object_response(api, rev, &o))
}

fn fields(selectors: Option<&pb::Selectors>) -> &str {
    selectors.map_or("", |s| s.field_selector.as_str())
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

/// A request of many objects (CreateMany, UpdateStatusMany): each object authorized as its
/// own request would be (`verb` on its kind, `subresource`), those allowed written together
/// by `write`, and one result per object, in request order.
async fn many<T, W, F>(
    api: &ClusterApi,
    mut req: Request<T>,
    (verb, subresource): (&'static str, Option<&'static str>),
    write: W,
) -> Result<Response<pb::ManyResponse>, Status>
where
    T: ManyRequest,
    W: FnOnce(ClusterApi, Vec<skiff_proto::api::Object>) -> F,
    F: Future<Output = super::Result<(i64, Vec<super::Result<skiff_proto::api::Object>>)>>,
{
    let (given, fence) = req.get_mut().take();
    let mut objects = Vec::new();
    let mut results: Vec<Option<pb::ObjectResult>> = Vec::new();
    let mut me = None;
    for o in given {
        // A review, answered and not stored, is refused as a kind that is not stored.
        let admitted = from_pb(Some(o)).and_then(|object| {
            let m = object.metadata();
            let name = if verb == "create" {
                ""
            } else {
                m.name.as_str()
            };
            let ask = Ask {
                subresource,
                ..Ask::new(verb, object.kind(), namespace_of(&object), name)
            };
            Ok((authorize(api, &req, ask)?, object))
        });
        match admitted {
            Ok((allowed, object)) => {
                me.get_or_insert(allowed);
                objects.push(object);
                results.push(None);
            }
            Err(e) => results.push(Some(refused(&Status::from(e)))),
        }
    }
    let (rev, written) = match me {
        Some(allowed) => write(fenced(&allowed, fence), objects).await?,
        None => (api.revision(), Vec::new()),
    };
    let mut written = written.into_iter();
    let results = results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| match written.next() {
                Some(Ok(object)) => pb::ObjectResult {
                    object: Some(to_pb(&object)),
                    code: 0,
                    message: String::new(),
                },
                Some(Err(e)) => refused(&Status::from(e)),
                None => refused(&Status::internal("no result")),
            })
        })
        .collect();
    Ok(Response::new(pb::ManyResponse {
        header: header(&*api.kv, rev),
        results,
    }))
}

/// A request of many objects under one fence.
trait ManyRequest {
    /// Its objects and fence, taken out of it.
    fn take(&mut self) -> (Vec<pb::Object>, Option<pb::Fence>);
}

impl ManyRequest for pb::CreateManyRequest {
    fn take(&mut self) -> (Vec<pb::Object>, Option<pb::Fence>) {
        (std::mem::take(&mut self.objects), self.fence.take())
    }
}

impl ManyRequest for pb::UpdateStatusManyRequest {
    fn take(&mut self) -> (Vec<pb::Object>, Option<pb::Fence>) {
        (std::mem::take(&mut self.objects), self.fence.take())
    }
}

/// A [`pb::ObjectResult`] for an object refused with `status`.
fn refused(status: &Status) -> pb::ObjectResult {
    pb::ObjectResult {
        object: None,
        code: status.code() as i32,
        message: status.message().to_string(),
    }
}

fn object_response(
    api: &ClusterApi,
    revision: i64,
    object: &skiff_proto::api::Object,
) -> Response<pb::ObjectResponse> {
    Response::new(pb::ObjectResponse {
        header: header(&*api.kv, revision),
        object: Some(to_pb(object)),
    })
}

fn key_parts(key: Option<pb::ObjectKey>) -> super::Result<(Kind, String, String)> {
    let key = key.ok_or(ClusterError::Missing { field: "key" })?;
    let kind = parse_kind(&key.kind)?;
    if key.name.is_empty() {
        return Err(ClusterError::Missing { field: "key.name" });
    }
    if kind.is_namespaced() && key.namespace.is_empty() {
        return Err(ClusterError::NamespaceRequired { kind });
    }
    let ns = if kind.is_namespaced() {
        key.namespace
    } else {
        String::new()
    };
    Ok((kind, ns, key.name))
}

/// The namespace an object is written to: its own, `default` when a namespaced object names
/// none (as defaulting will), none for a cluster-scoped one.
fn namespace_of(object: &skiff_proto::api::Object) -> &str {
    let ns = object.metadata().namespace.as_str();
    match (object.kind().is_namespaced(), ns) {
        (false, _) => "",
        (true, "") => skiff_proto::api::defaults::DEFAULT_NAMESPACE,
        (true, ns) => ns,
    }
}

/// The API a request writes through: fenced when it carries a fence.
fn fenced(api: &ClusterApi, fence: Option<pb::Fence>) -> ClusterApi {
    match fence {
        Some(f) if !f.key.is_empty() => api.fenced(&f.key, f.create_revision),
        _ => api.clone(),
    }
}

#[tonic::async_trait]
impl Cluster for ClusterApi {
    async fn create(
        &self,
        req: Request<pb::CreateRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        let object = from_pb(req.get_ref().object.clone())?;
        let ns = namespace_of(&object);
        let me = authorize(self, &req, Ask::new("create", object.kind(), ns, ""))?;
        if object.kind().is_review() {
            let answered = self.review(&user(self, &req)?, object)?;
            let revision = self.revision();
            return Ok(object_response(self, revision, &answered));
        }
        let req = req.into_inner();
        let api = fenced(&me, req.fence);
        let (rev, created) = ClusterApi::create(&api, object, req.dry_run).await?;
        Ok(object_response(self, rev, &created))
    }

    async fn get(
        &self,
        req: Request<pb::GetRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        let (kind, ns, name) = key_parts(req.get_ref().key.clone())?;
        authorize(self, &req, Ask::new("get", kind, &ns, &name))?;
        let req = req.into_inner();
        self.barrier(req.serializable).await?;
        let (rev, found) = self.get_local(kind, &ns, &name)?;
        let found = found.ok_or_else(|| not_found(kind, &name))?;
        Ok(object_response(self, rev, &found.object))
    }

    async fn list(
        &self,
        req: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let kind = parse_kind(&req.get_ref().kind)?;
        let r = req.get_ref();
        let ask = Ask {
            fields: fields(r.selectors.as_ref()),
            ..Ask::new("list", kind, &r.namespace, "")
        };
        authorize(self, &req, ask)?;
        let req = req.into_inner();
        let filter = Filter::parse(kind, req.selectors.as_ref())?;
        let read = if req.serializable {
            ReadAt::Any
        } else {
            ReadAt::Latest
        };
        let page = ClusterApi::list(
            self,
            kind,
            &req.namespace,
            &filter,
            req.limit,
            &req.continue_token,
            read,
        )
        .await?;
        Ok(Response::new(pb::ListResponse {
            header: header(&*self.kv, page.revision),
            items: page.items.iter().map(|s| to_pb(&s.object)).collect(),
            resource_version: page.revision,
            continue_token: page.continue_token,
        }))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let kind = parse_kind(&req.get_ref().kind)?;
        let r = req.get_ref();
        let ask = Ask {
            fields: fields(r.selectors.as_ref()),
            ..Ask::new("watch", kind, &r.namespace, "")
        };
        authorize(self, &req, ask)?;
        let rx = ClusterApi::watch(self, req.into_inner())?;
        Ok(Response::new(Box::pin(
            ReceiverStream::new(rx).map(|r| r.map_err(Status::from)),
        )))
    }

    async fn update(
        &self,
        req: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        update_part(self, req, Part::Main).await
    }

    async fn update_status(
        &self,
        req: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        update_part(self, req, Part::Status).await
    }

    async fn update_approval(
        &self,
        req: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        update_part(self, req, Part::Approval).await
    }

    async fn update_finalize(
        &self,
        req: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        update_part(self, req, Part::Finalize).await
    }

    async fn delete(
        &self,
        req: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        let (kind, ns, name) = key_parts(req.get_ref().key.clone())?;
        let me = authorize(self, &req, Ask::new("delete", kind, &ns, &name))?;
        let req = req.into_inner();
        if req.grace_period_seconds.is_some_and(|g| g < 0) {
            return Err(ClusterError::NegativeGrace.into());
        }
        let propagation = req
            .propagation_policy
            .as_deref()
            .map(str::parse::<DeletionPropagation>)
            .transpose()
            .map_err(|source| ClusterError::BadPropagation { source })?;
        let api = fenced(&me, req.fence);
        let (rev, o) = ClusterApi::delete(
            &api,
            kind,
            &ns,
            &name,
            req.resource_version,
            req.grace_period_seconds,
            propagation,
        )
        .await?;
        Ok(object_response(self, rev, &o))
    }

    async fn create_many(
        &self,
        req: Request<pb::CreateManyRequest>,
    ) -> Result<Response<pb::ManyResponse>, Status> {
        many(self, req, ("create", None), |api, objects| async move {
            ClusterApi::create_many(&api, objects).await
        })
        .await
    }

    async fn update_status_many(
        &self,
        req: Request<pb::UpdateStatusManyRequest>,
    ) -> Result<Response<pb::ManyResponse>, Status> {
        many(
            self,
            req,
            ("update", Some("status")),
            |api, objects| async move { ClusterApi::update_status_many(&api, objects).await },
        )
        .await
    }

    async fn create_token(
        &self,
        req: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        let r = req.get_ref();
        let account = super::token::service_account_kind();
        if r.namespace.is_empty() {
            return Err(ClusterError::NamespaceRequired { kind: account }.into());
        }
        if r.name.is_empty() {
            return Err(ClusterError::Missing { field: "name" }.into());
        }
        if r.bound_pod_name.is_empty() && !r.bound_pod_uid.is_empty() {
            return Err(ClusterError::Missing {
                field: "bound_pod_name",
            }
            .into());
        }
        let ask = Ask {
            subresource: Some("token"),
            ..Ask::new("create", account, &r.namespace, &r.name)
        };
        let me = authorize(self, &req, ask)?;
        let r = req.into_inner();
        let request = TokenRequest {
            namespace: r.namespace,
            service_account: r.name,
            audiences: r.audiences,
            expiration_seconds: (r.expiration_seconds != 0).then_some(r.expiration_seconds),
            bound: (!r.bound_pod_name.is_empty()).then_some(BoundObject {
                kind: BoundKind::Pod,
                name: r.bound_pod_name,
                uid: r.bound_pod_uid,
            }),
        };
        let issued = me.issue_token(&request).await?;
        Ok(Response::new(pb::CreateTokenResponse {
            header: header(&*self.kv, self.revision()),
            token: issued.token,
            expiration_unix: issued.expires_unix,
        }))
    }

    async fn bind(
        &self,
        req: Request<pb::BindRequest>,
    ) -> Result<Response<pb::BindResponse>, Status> {
        let namespaces: std::collections::BTreeSet<&str> = req
            .get_ref()
            .bindings
            .iter()
            .map(|b| b.namespace.as_str())
            .collect();
        for ns in namespaces {
            let ask = Ask {
                subresource: Some("binding"),
                ..Ask::new("create", Kind::Pod, ns, "")
            };
            authorize(self, &req, ask)?;
        }
        let req = req.into_inner();
        let (rev, results) = ClusterApi::bind(
            self,
            &req.bindings,
            (!req.fence_key.is_empty()).then_some((req.fence_key.as_str(), req.fence_revision)),
        )
        .await?;
        Ok(Response::new(pb::BindResponse {
            header: header(&*self.kv, rev),
            results,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{AccessConfig, MASTERS, NODES};
    use crate::cluster::testing::{TestApi, secured_access, team};
    use skiff_store::tls::Subject;
    use tonic::Code;

    /// A request over a connection whose client certificate names `user` in `group`.
    fn from<T>(user: &str, group: &str, message: T) -> Request<T> {
        let mut r = Request::new(message);
        r.extensions_mut().insert(ConnInfo {
            tcp: tonic::transport::server::TcpConnectInfo {
                local_addr: None,
                remote_addr: None,
            },
            client: Some(Subject {
                common_name: user.into(),
                organizations: vec![group.into()],
            }),
        });
        r
    }

    fn ask(account: &str, pod: &str, uid: &str) -> pb::CreateTokenRequest {
        pb::CreateTokenRequest {
            namespace: "team".into(),
            name: account.into(),
            bound_pod_name: pod.into(),
            bound_pod_uid: uid.into(),
            ..pb::CreateTokenRequest::default()
        }
    }

    /// CreateToken, as a node agent asks for its pods' tokens: allowed for the accounts its
    /// pods run as (the node graph), bound to its own pods (NodeRestriction); each refusal
    /// with the code a client branches on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn create_token_for_nodes_and_administrators() {
        let t = TestApi::start(|dir| AccessConfig {
            client_certs: true,
            ..secured_access(dir)
        })
        .await;
        let (web, db) = team(&t).await;
        let n1 = |m| from("system:node:n1", NODES, m);
        let answer = Cluster::create_token(&t.api, n1(ask("web", "web-1", &web)))
            .await
            .expect("its own pod's token")
            .into_inner();
        let claims = t
            .api
            .token_issuer()
            .expect("keys")
            .verify(&answer.token)
            .expect("the API's");
        assert_eq!(claims.kubernetes.pod.map(|p| p.uid), Some(web.clone()));
        assert_eq!(answer.expiration_unix, i64::try_from(claims.exp).unwrap());
        assert!(answer.header.is_some());
        for (request, code, words) in [
            // No pod of n1 runs as db: the node authorizer has no opinion, RBAC none.
            (
                ask("db", "db-1", &db),
                Code::PermissionDenied,
                "cannot create resource \"serviceaccounts/token\"",
            ),
            (
                ask("web", "", ""),
                Code::PermissionDenied,
                "node requested token not bound to a pod",
            ),
            (
                ask("web", "db-1", &db),
                Code::PermissionDenied,
                "a pod scheduled on a different node",
            ),
            (
                ask("web", "web-1", "stale"),
                Code::Aborted,
                "does not match the UID in record",
            ),
            (
                pb::CreateTokenRequest {
                    expiration_seconds: 60,
                    ..ask("web", "web-1", &web)
                },
                Code::InvalidArgument,
                "may not specify a duration less than 10 minutes",
            ),
            (
                ask("web", "", "uid"),
                Code::InvalidArgument,
                "bound_pod_name: required",
            ),
            (
                pb::CreateTokenRequest {
                    namespace: String::new(),
                    ..ask("web", "web-1", &web)
                },
                Code::InvalidArgument,
                "namespace",
            ),
        ] {
            let s = Cluster::create_token(&t.api, n1(request.clone()))
                .await
                .expect_err("refused");
            assert_eq!(s.code(), code, "{request:?}: {}", s.message());
            assert!(s.message().contains(words), "{request:?}: {}", s.message());
        }
        let admin = |m| from("admin", MASTERS, m);
        let s = Cluster::create_token(&t.api, admin(ask("nobody", "", "")))
            .await
            .expect_err("no such account");
        assert_eq!(
            (s.code(), s.message()),
            (Code::NotFound, "serviceaccounts \"nobody\" not found")
        );
        let s = Cluster::create_token(&t.api, admin(ask("web", "gone", "")))
            .await
            .expect_err("no such pod");
        assert_eq!(
            (s.code(), s.message()),
            (Code::NotFound, "pods \"gone\" not found")
        );
        let unbound = Cluster::create_token(&t.api, admin(ask("db", "", "")))
            .await
            .expect("an administrator's token need not be bound")
            .into_inner();
        assert!(!unbound.token.is_empty());
        t.stop().await;
    }

    /// A server without a signing key answers FAILED_PRECONDITION.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn create_token_without_a_signing_key() {
        let t = TestApi::start(|_| AccessConfig::default()).await;
        let s = Cluster::create_token(&t.api, Request::new(ask("web", "", "")))
            .await
            .expect_err("no key");
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert!(
            s.message().contains("--service-account-signing-key-file"),
            "{}",
            s.message()
        );
        t.stop().await;
    }
}
