//! What the benchmarks against a running cluster share: its Ready nodes, a namespace of a
//! run's own (made, then removed with its pods) and the pods they create. Below every
//! benchmark; none of it knows one.

use anyhow::{Context, bail};
use futures::StreamExt;
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::ClusterClient;

/// The Ready nodes of the cluster the benchmark runs against; none is an error that says how
/// to start some.
pub(crate) async fn ready_nodes(api: &ClusterClient) -> anyhow::Result<usize> {
    let (nodes, _) = api
        .list(Kind::Node, &skiff_proto::client::ListParams::default())
        .await?;
    let ready = nodes
        .iter()
        .filter(|o| matches!(o, Object::Node(n) if n.is_ready()))
        .count();
    if ready == 0 {
        bail!("no Ready node: start agents first (`skiff up --nodes 1000`)");
    }
    Ok(ready)
}

/// A namespace of its own for one benchmark run, `<prefix>-<time>-<pid>`, created; returns
/// its name and the object as created.
pub(crate) async fn fresh_namespace(
    api: &ClusterClient,
    prefix: &str,
) -> anyhow::Result<(String, Object)> {
    let ns = format!(
        "{prefix}-{:x}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs(),
        std::process::id()
    );
    let created = api
        .create(&Object::from_json(
            Kind::Namespace,
            serde_json::json!({"metadata": {"name": ns}})
                .to_string()
                .as_bytes(),
        )?)
        .await
        .context("creating the benchmark namespace")?;
    Ok((ns, created))
}

/// A benchmark's pod: one pause container requesting `cpu` and 16Mi, labelled `app: <app>`,
/// with `grace` seconds to stop.
pub(crate) fn pod(
    ns: &str,
    name: &str,
    app: &str,
    cpu: &str,
    grace: i64,
) -> anyhow::Result<Object> {
    object(
        Kind::Pod,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "spec": {
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "main", "image": "localhost/skiff/pause:1",
                    "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}]
            }
        }),
    )
}

/// Deletes a benchmark's namespace: its pods first, at once (`concurrency` deletes in
/// flight), since a namespace goes only once it is empty. What fails is said, not fatal.
pub(crate) async fn remove_namespace(api: &ClusterClient, ns: &str, concurrency: usize) {
    let pods = match api
        .list(
            Kind::Pod,
            &skiff_proto::client::ListParams::default().namespace(ns),
        )
        .await
    {
        Ok((pods, _)) => pods,
        Err(e) => {
            eprintln!("namespace {ns} left in place: listing its pods: {e}");
            return;
        }
    };
    futures::stream::iter(pods)
        .map(|p| async move {
            let _ = api
                .delete(Kind::Pod, ns, &p.metadata().name, 0, Some(0))
                .await;
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    if let Err(e) = api.delete(Kind::Namespace, "", ns, 0, None).await {
        eprintln!("namespace {ns} left in place: {e}");
    }
}

/// An object of `kind` from its JSON.
pub(crate) fn object(kind: Kind, json: serde_json::Value) -> anyhow::Result<Object> {
    Ok(Object::from_json(kind, json.to_string().as_bytes())?)
}
