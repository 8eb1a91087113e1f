//! The gRPC face of the cluster API.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use skiff_proto::api::{DeletionPropagation, Kind};
use skiff_proto::cluster::v1 as pb;
use skiff_proto::cluster::v1::cluster_server::Cluster;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::list::ReadAt;
use super::watch::Filter;
use super::{ClusterApi, ClusterError, from_pb, header, not_found, parse_kind, to_pb};

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

fn object_response(
    api: &ClusterApi,
    revision: i64,
    object: &skiff_proto::api::Object,
) -> Response<pb::ObjectResponse> {
    Response::new(pb::ObjectResponse {
        header: header(&api.member, revision),
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
        let req = req.into_inner();
        let object = from_pb(req.object)?;
        let api = fenced(self, req.fence);
        let (rev, created) = ClusterApi::create(&api, object, req.dry_run).await?;
        Ok(object_response(self, rev, &created))
    }

    async fn get(
        &self,
        req: Request<pb::GetRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        let req = req.into_inner();
        let (kind, ns, name) = key_parts(req.key)?;
        self.barrier(req.serializable).await?;
        let (rev, found) = self.get_local(kind, &ns, &name)?;
        let found = found.ok_or_else(|| not_found(kind, &name))?;
        Ok(object_response(self, rev, &found.object))
    }

    async fn list(
        &self,
        req: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let req = req.into_inner();
        let kind = parse_kind(&req.kind)?;
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
            header: header(&self.member, page.revision),
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
        let rx = ClusterApi::watch(self, req.into_inner())?;
        Ok(Response::new(Box::pin(
            ReceiverStream::new(rx).map(|r| r.map_err(Status::from)),
        )))
    }

    async fn update(
        &self,
        req: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        let req = req.into_inner();
        let object = from_pb(req.object)?;
        let api = fenced(self, req.fence);
        let (rev, o) = ClusterApi::update(&api, object, false, req.dry_run).await?;
        Ok(object_response(self, rev, &o))
    }

    async fn update_status(
        &self,
        req: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        let req = req.into_inner();
        let object = from_pb(req.object)?;
        let api = fenced(self, req.fence);
        let (rev, o) = ClusterApi::update(&api, object, true, req.dry_run).await?;
        Ok(object_response(self, rev, &o))
    }

    async fn delete(
        &self,
        req: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::ObjectResponse>, Status> {
        let req = req.into_inner();
        let (kind, ns, name) = key_parts(req.key)?;
        if req.grace_period_seconds.is_some_and(|g| g < 0) {
            return Err(ClusterError::NegativeGrace.into());
        }
        let propagation = req
            .propagation_policy
            .as_deref()
            .map(str::parse::<DeletionPropagation>)
            .transpose()
            .map_err(|source| ClusterError::BadPropagation { source })?;
        let api = fenced(self, req.fence);
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

    async fn bind(
        &self,
        req: Request<pb::BindRequest>,
    ) -> Result<Response<pb::BindResponse>, Status> {
        let req = req.into_inner();
        let (rev, results) = ClusterApi::bind(
            self,
            &req.bindings,
            (!req.fence_key.is_empty()).then_some((req.fence_key.as_str(), req.fence_revision)),
        )
        .await?;
        Ok(Response::new(pb::BindResponse {
            header: header(&self.member, rev),
            results,
        }))
    }
}
