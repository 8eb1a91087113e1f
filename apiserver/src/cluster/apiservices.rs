//! The APIService (apiregistration.k8s.io/v1) of each group version this server serves, as
//! kube-apiserver's `autoregister` and CRD registration controllers keep them: no Service
//! (`Local`), `Available=True`, labelled `kube-aggregator.kubernetes.io/automanaged`
//! (`onstart` for built-in groups, `true` for those of CustomResourceDefinitions). So
//! `kubectl get apiservices` lists what the cluster serves, and tools that wait for an API
//! to be available (Helm, operators) find it. A group version no longer served (its CRD
//! deleted) loses its APIService.
//!
//! Skiff serves no aggregated API servers: an APIService that names a Service is stored and
//! reported `Available=False` with the reason `AggregationUnsupported`, not proxied to.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use skiff_proto::api::{GenericKind, GenericObject, Kind, Object, Time};

use super::{ClusterApi, ClusterError, Part, Result, prefix_end};
use crate::rest::discovery::{self, GroupVersion};

/// The label on the APIServices this server keeps.
pub const AUTOMANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";
/// How often the served custom kinds are looked at: a change syncs the APIServices.
const EVERY: Duration = Duration::from_secs(2);
/// How often the APIServices are compared with what is served whatever changed (one made by
/// hand gets its status).
const RESYNC: Duration = Duration::from_secs(30);

/// `groupPriorityMinimum` and `versionPriority` of the built-in group versions, as
/// kube-apiserver registers them (a group not listed gets a CRD's 1000 and 100).
const PRIORITIES: &[(&str, &str, i64, i64)] = &[
    ("", "v1", 18000, 1),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v2", 17500, 30),
    ("autoscaling", "v1", 17500, 15),
    ("batch", "v1", 17400, 15),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("networking.k8s.io", "v1", 17200, 15),
    ("policy", "v1", 17100, 15),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("apiregistration.k8s.io", "v1", 18000, 15),
];

fn kind() -> GenericKind {
    match Kind::from_name("APIService") {
        Some(Kind::Generic(g)) => g,
        _ => unreachable!("APIService is a declared kind"),
    }
}

/// The APIService of a served group version, without status.
fn local(gv: GroupVersion) -> Value {
    let (group_priority, version_priority) = PRIORITIES
        .iter()
        .find(|(g, v, _, _)| *g == gv.group && *v == gv.version)
        .map_or((1000, 100), |(_, _, g, v)| (*g, *v));
    let custom = discovery::is_custom(gv);
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {
            "name": format!("{}.{}", gv.version, gv.group),
            "labels": {AUTOMANAGED_LABEL: if custom { "true" } else { "onstart" }},
        },
        "spec": {
            "group": gv.group,
            "version": gv.version,
            "groupPriorityMinimum": group_priority,
            "versionPriority": version_priority,
        },
    })
}

/// The `Available` condition an APIService should carry: `(status, reason, message)`.
fn availability(o: &GenericObject) -> (&'static str, &'static str, &'static str) {
    if o.at("/spec/service").is_some_and(|s| !s.is_null()) {
        (
            "False",
            "AggregationUnsupported",
            "Skiff does not proxy to aggregated API servers",
        )
    } else {
        ("True", "Local", "Local APIServices are always available")
    }
}

/// Writes the `Available` condition `o` should have, unless it has it.
async fn write_status(api: &ClusterApi, o: &GenericObject) -> Result<()> {
    let (status, reason, message) = availability(o);
    let current = o
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| {
            c.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"))
        });
    let same = current.is_some_and(|c| {
        c.get("status").and_then(Value::as_str) == Some(status)
            && c.get("reason").and_then(Value::as_str) == Some(reason)
    });
    if same {
        return Ok(());
    }
    let mut next = o.clone();
    next.body.insert(
        "status".into(),
        json!({"conditions": [{
            "type": "Available",
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": Time::now(),
        }]}),
    );
    match api
        .update(Object::Generic(kind(), next), Part::Status, false)
        .await
    {
        Ok(_) | Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes the APIServices match what is served now.
async fn sync(api: &ClusterApi) -> Result<()> {
    let k = Kind::Generic(kind());
    let prefix = k.prefix(None);
    let (_, stored) = api.range(k, prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0)?;
    let mut have: BTreeMap<String, GenericObject> = stored
        .into_iter()
        .filter_map(|s| match s.object {
            Object::Generic(_, o) => Some((o.metadata.name.clone(), o)),
            _ => None,
        })
        .collect();
    for gv in discovery::group_versions() {
        let name = format!("{}.{}", gv.version, gv.group);
        let object = match have.remove(&name) {
            Some(o) => o,
            None => {
                let new = Object::from_value(k, local(gv))
                    .expect("invariant: an APIService of a served group version decodes");
                match api.create(new, false).await {
                    Ok((_, Object::Generic(_, o))) => o,
                    // Another API server made it: its status is looked at next time.
                    Ok(_) | Err(ClusterError::AlreadyExists { .. }) => continue,
                    Err(e) => return Err(e),
                }
            }
        };
        write_status(api, &object).await?;
    }
    // What is left is served no more, or was never this server's to serve.
    for (name, o) in have {
        if o.metadata.labels.contains_key(AUTOMANAGED_LABEL) {
            match api.delete(k, "", &name, 0, None, None).await {
                Ok(_) | Err(ClusterError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        } else {
            write_status(api, &o).await?;
        }
    }
    Ok(())
}

/// Keeps the APIServices current until `stop`.
pub async fn maintain(
    api: ClusterApi,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // (the custom kinds' generation, when) of the last sync that went through
    let mut synced: Option<(u64, tokio::time::Instant)> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return Ok(()),
        }
        let generation = skiff_proto::api::custom::generation();
        let due = synced.is_none_or(|(g, at)| g != generation || at.elapsed() >= RESYNC);
        if !due {
            continue;
        }
        match sync(&api).await {
            Ok(()) => synced = Some((generation, tokio::time::Instant::now())),
            Err(e) => tracing::debug!(error = %e, "keeping the APIServices; trying again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every served group version's APIService is valid as written.
    #[test]
    fn local_api_services_are_valid() {
        let k = Kind::Generic(kind());
        for gv in discovery::group_versions() {
            let mut o = Object::from_value(k, local(gv)).expect("decodes");
            skiff_proto::api::defaults::apply(&mut o);
            skiff_proto::api::validation::validate(&o)
                .unwrap_or_else(|e| panic!("{}: {e}", o.display_name()));
        }
    }
}
