//! What the REST API serves, and the discovery documents that tell clients so.
//!
//! [`resources`] is the single source of truth: the router, the OpenAPI documents
//! ([`super::openapi`]) and the discovery documents below are all derived from it, so a
//! resource, verb or subresource exists for clients exactly when it is listed here.
//!
//! Clients learn the API in one of two ways:
//!
//! ```text
//!  unaggregated (kube-rs, client-go with legacy discovery)
//!    GET /api     → APIVersions        ["v1"]
//!    GET /apis    → APIGroupList       one entry per non-core group
//!    GET /api/v1  → APIResourceList    resources, then "pods/status"-style subresources
//!
//!  aggregated (kubectl ≥ 1.30; Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList)
//!    GET /api     → APIGroupDiscoveryList   the core group with every resource
//!    GET /apis    → APIGroupDiscoveryList   every other group with every resource
//! ```
//!
//! The aggregated answer must carry [`AGGREGATED_V2`] as its `Content-Type`: client-go decides
//! which document it received from that header alone (`ContentTypeIsGVK`), and reads any other
//! body as the unaggregated document.
//!
//! Every served kind names its group and version through [`Kind::api_version`] (`v1`,
//! `apps/v1`), so adding a group is adding a module of its resources to `GROUPS`; the group
//! lists, the per-group documents and the OpenAPI documents follow.
//!
//! This module holds the types and the documents; the served resources themselves are listed
//! by group, a module each: `core`, `apps`, `rbac`, `authorization`, `endpoint_slices`
//! (`discovery.k8s.io`) and `certificates`.

mod apps;
mod authorization;
mod certificates;
mod core;
mod endpoint_slices;
mod rbac;

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use serde_json::{Map, Value, json};
use skiff_proto::api::{GenericKind, Kind};

/// The verbs of the Kubernetes API, as discovery spells them.
pub mod verb {
    pub const CREATE: &str = "create";
    pub const DELETE: &str = "delete";
    pub const DELETE_COLLECTION: &str = "deletecollection";
    pub const GET: &str = "get";
    pub const LIST: &str = "list";
    pub const PATCH: &str = "patch";
    pub const UPDATE: &str = "update";
    pub const WATCH: &str = "watch";
}

use verb::{CREATE, DELETE, DELETE_COLLECTION, GET, LIST, PATCH, UPDATE, WATCH};

/// The media type of aggregated discovery (`apidiscovery.k8s.io/v2`): what kubectl puts first in
/// its `Accept` for `/api` and `/apis`, and the `Content-Type` an aggregated answer must carry.
pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// A subresource of a served resource: `pods/status`, `pods/binding`.
#[derive(Debug)]
pub struct Subresource {
    /// The path segment after the object's name (`status`).
    pub name: &'static str,
    /// The kind a request to it sends or returns (`Pod` for status, `Binding`, `Eviction`).
    pub kind: &'static str,
    /// The group/version of `kind` when it is not the parent's (`policy/v1` for `Eviction`);
    /// client-go's `kubectl drain` finds the eviction API by these.
    pub api_version: Option<&'static str>,
    pub verbs: &'static [&'static str],
}

/// A served resource: a kind's collection and its objects.
#[derive(Debug)]
pub struct Resource {
    pub kind: Kind,
    pub verbs: &'static [&'static str],
    pub subresources: &'static [Subresource],
    /// Groupings such as `all` (what `kubectl get all` lists).
    pub categories: &'static [&'static str],
}

/// An API group and version: `("", "v1")` is the core group, served under `/api/v1`; any
/// other group is served under `/apis/<group>/<version>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupVersion {
    pub group: &'static str,
    pub version: &'static str,
}

impl GroupVersion {
    pub const CORE_V1: GroupVersion = GroupVersion {
        group: "",
        version: "v1",
    };

    /// Splits an `apiVersion` (`v1`, `apps/v1`).
    pub fn parse(api_version: &'static str) -> GroupVersion {
        match api_version.split_once('/') {
            Some((group, version)) => GroupVersion { group, version },
            None => GroupVersion {
                group: "",
                version: api_version,
            },
        }
    }

    /// The group and version `kind` is served under.
    pub fn of(kind: Kind) -> GroupVersion {
        GroupVersion::parse(kind.api_version())
    }

    /// The `apiVersion` of objects in this group version (`v1`, `apps/v1`).
    pub fn api_version(self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The URL path of the group version without its leading slash (`api/v1`,
    /// `apis/apps/v1`): the key of the OpenAPI v3 index and of kubectl's explain.
    pub fn path(self) -> String {
        if self.group.is_empty() {
            format!("api/{}", self.version)
        } else {
            format!("apis/{}/{}", self.group, self.version)
        }
    }

    /// The `{group, version, kind}` object discovery and OpenAPI use to name a kind.
    pub fn kind_json(self, kind: &str) -> Value {
        json!({"group": self.group, "kind": kind, "version": self.version})
    }
}

impl Resource {
    /// The resource name: the path segment (`pods`).
    pub fn plural(&self) -> &'static str {
        self.kind.plural()
    }

    pub fn group_version(&self) -> GroupVersion {
        GroupVersion::of(self.kind)
    }

    /// Whether the collection or its objects answer `verb`.
    pub fn allows(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// The subresource called `name` (`status`), if served.
    pub fn subresource(&self, name: &str) -> Option<&'static Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }
}

impl Subresource {
    /// The group and version of the subresource's kind, given its parent's.
    pub fn group_version(&self, parent: GroupVersion) -> GroupVersion {
        self.api_version.map_or(parent, GroupVersion::parse)
    }

    /// Whether the subresource answers `verb`.
    pub fn allows(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }
}

const READ_WRITE: &[&str] = &[
    CREATE,
    DELETE,
    DELETE_COLLECTION,
    GET,
    LIST,
    PATCH,
    UPDATE,
    WATCH,
];
const STATUS_VERBS: &[&str] = &[GET, PATCH, UPDATE];

/// The served resources of each group, in discovery order: the core group first, then the
/// others in the order `/apis` lists them.
static GROUPS: [&[Resource]; 6] = [
    core::RESOURCES,
    apps::RESOURCES,
    rbac::RESOURCES,
    authorization::RESOURCES,
    endpoint_slices::RESOURCES,
    certificates::RESOURCES,
];

/// The resource of a kind served from a declaration (declared, or defined by a CRD): every
/// verb, and `scale` and `status` where the kind has them.
fn declared_resource(g: GenericKind) -> Resource {
    let info = g.info();
    let mut subresources = Vec::new();
    if info.scale {
        subresources.push(apps::SCALE);
    }
    if info.status {
        subresources.push(Subresource {
            name: "status",
            kind: info.kind,
            api_version: None,
            verbs: STATUS_VERBS,
        });
    }
    if info.kind == "ServiceAccount" && g.custom_index().is_none() {
        // TokenRequest: `kubectl create token`.
        subresources.push(Subresource {
            name: "token",
            kind: "TokenRequest",
            api_version: Some("authentication.k8s.io/v1"),
            verbs: &[CREATE],
        });
    }
    Resource {
        kind: Kind::Generic(g),
        verbs: READ_WRITE,
        subresources: Box::leak(subresources.into_boxed_slice()),
        categories: info.categories,
    }
}

/// The declared kinds' resources ([`skiff_proto::api::registry`]).
static DECLARED: LazyLock<Vec<Resource>> =
    LazyLock::new(|| GenericKind::declared().map(declared_resource).collect());

/// The resources of the custom kinds ever served, made once each (a custom kind's shape
/// never changes: [`skiff_proto::api::custom`]).
static CUSTOM: LazyLock<Mutex<HashMap<GenericKind, &'static Resource>>> =
    LazyLock::new(Mutex::default);

/// The custom kinds' resources served now, in the order their kinds were first defined.
fn custom_resources() -> Vec<&'static Resource> {
    let served = skiff_proto::api::custom::served();
    if served.is_empty() {
        return Vec::new();
    }
    let mut made = CUSTOM.lock().unwrap_or_else(PoisonError::into_inner);
    served
        .into_iter()
        .map(|g| {
            *made
                .entry(g)
                .or_insert_with(|| Box::leak(Box::new(declared_resource(g))))
        })
        .collect()
}

/// Every served resource, in discovery order: each group's own, then the declared kinds',
/// then the custom kinds' served now.
pub fn resources() -> impl Iterator<Item = &'static Resource> {
    GROUPS
        .iter()
        .flat_map(|group| group.iter())
        .chain(DECLARED.iter())
        .chain(custom_resources())
}

/// Whether `gv` is a custom kinds' group version (defined by CRDs, not built in).
pub fn is_custom(gv: GroupVersion) -> bool {
    resources().any(|r| {
        r.group_version() == gv && matches!(r.kind, Kind::Generic(g) if g.custom_index().is_some())
    })
}

/// The served resource of `kind`, if any.
pub fn resource(kind: Kind) -> Option<&'static Resource> {
    resources().find(|r| r.kind == kind)
}

/// Every served group version, in discovery order: groups as their first resource comes,
/// and a group's versions by Kubernetes' version priority, the one clients prefer first.
pub fn group_versions() -> Vec<GroupVersion> {
    let mut out: Vec<GroupVersion> = Vec::new();
    for gv in resources().map(Resource::group_version) {
        if !out.contains(&gv) {
            out.push(gv);
        }
    }
    let groups: Vec<&str> = out.iter().fold(Vec::new(), |mut groups, gv| {
        if !groups.contains(&gv.group) {
            groups.push(gv.group);
        }
        groups
    });
    let rank = |gv: &GroupVersion| groups.iter().position(|g| *g == gv.group);
    out.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| version_priority(a.version).cmp(&version_priority(b.version)))
    });
    out
}

/// The sort key of a version by Kubernetes' priority: GA before beta before alpha, a higher
/// major (then minor) version first (`v2`, `v1`, `v1beta2`, `v1beta1`, `v1alpha1`), and any
/// other version after them, alphabetically.
fn version_priority(version: &str) -> (u8, Reverse<u64>, Reverse<u64>, &str) {
    let parsed = version.strip_prefix('v').and_then(|rest| {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let major: u64 = rest[..digits].parse().ok()?;
        let (stage, minor) = match &rest[digits..] {
            "" => return Some((0, major, 0)),
            tail => tail
                .strip_prefix("beta")
                .map(|m| (1, m))
                .or_else(|| tail.strip_prefix("alpha").map(|m| (2, m)))?,
        };
        Some((stage, major, minor.parse().ok()?))
    });
    match parsed {
        Some((stage, major, minor)) if major > 0 => (stage, Reverse(major), Reverse(minor), ""),
        _ => (3, Reverse(0), Reverse(0), version),
    }
}

/// `GET /api`: the core group's versions, and the address clients should use.
pub fn api_versions(server_address: &str) -> Value {
    let versions: Vec<&str> = group_versions()
        .into_iter()
        .filter(|gv| gv.group.is_empty())
        .map(|gv| gv.version)
        .collect();
    json!({
        "kind": "APIVersions",
        "versions": versions,
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// `GET /apis`: every group but the core one, with its versions (the first preferred).
pub fn api_group_list() -> Value {
    let mut groups: Vec<(&str, Vec<Value>)> = Vec::new();
    for gv in group_versions()
        .into_iter()
        .filter(|gv| !gv.group.is_empty())
    {
        let entry = json!({"groupVersion": gv.api_version(), "version": gv.version});
        match groups.iter_mut().find(|(name, _)| *name == gv.group) {
            Some((_, versions)) => versions.push(entry),
            None => groups.push((gv.group, vec![entry])),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            json!({"name": name, "preferredVersion": versions[0].clone(), "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /api/v1`: the core group's resources.
pub fn core_v1_resources() -> Value {
    resource_list(GroupVersion::CORE_V1)
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`: the APIResourceList of one group version;
/// each subresource follows as its own entry (`pods/status`) with an empty singular name, as
/// Kubernetes lists them.
pub fn resource_list(gv: GroupVersion) -> Value {
    let mut entries = Vec::new();
    for r in resources().filter(|r| r.group_version() == gv) {
        let mut entry = Map::new();
        entry.insert("name".into(), r.plural().into());
        entry.insert("singularName".into(), r.kind.singular().into());
        entry.insert("namespaced".into(), r.kind.is_namespaced().into());
        entry.insert("kind".into(), r.kind.name().into());
        entry.insert("verbs".into(), json!(r.verbs));
        if !r.kind.short_names().is_empty() {
            entry.insert("shortNames".into(), json!(r.kind.short_names()));
        }
        if !r.categories.is_empty() {
            entry.insert("categories".into(), json!(r.categories));
        }
        entries.push(Value::Object(entry));
    }
    for r in resources().filter(|r| r.group_version() == gv) {
        for s in r.subresources {
            let mut entry = Map::new();
            entry.insert("name".into(), format!("{}/{}", r.plural(), s.name).into());
            entry.insert("singularName".into(), "".into());
            entry.insert("namespaced".into(), r.kind.is_namespaced().into());
            if s.api_version.is_some() {
                let sgv = s.group_version(gv);
                entry.insert("group".into(), sgv.group.into());
                entry.insert("version".into(), sgv.version.into());
            }
            entry.insert("kind".into(), s.kind.into());
            entry.insert("verbs".into(), json!(s.verbs));
            entries.push(Value::Object(entry));
        }
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv.api_version(),
        "resources": entries,
    })
}

/// `GET /api` asked with [`AGGREGATED_V2`]: the core group and all its resources.
pub fn aggregated_core() -> Value {
    aggregated(|gv| gv.group.is_empty())
}

/// `GET /apis` asked with [`AGGREGATED_V2`]: every other group and all its resources.
pub fn aggregated_groups() -> Value {
    aggregated(|gv| !gv.group.is_empty())
}

fn aggregated(include: impl Fn(GroupVersion) -> bool) -> Value {
    // group name → its versions, in discovery order
    let mut groups: Vec<(&str, Vec<Value>)> = Vec::new();
    for gv in group_versions().into_iter().filter(|gv| include(*gv)) {
        let resources: Vec<Value> = resources()
            .filter(|r| r.group_version() == gv)
            .map(|r| aggregated_resource(r, gv))
            .collect();
        let version =
            json!({"version": gv.version, "resources": resources, "freshness": "Current"});
        match groups.iter_mut().find(|(name, _)| *name == gv.group) {
            Some((_, versions)) => versions.push(version),
            None => groups.push((gv.group, vec![version])),
        }
    }
    let items: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            // The core group's name is empty, and an empty name is left out of metadata.
            let metadata = if name.is_empty() {
                json!({})
            } else {
                json!({"name": name})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

fn aggregated_resource(r: &Resource, gv: GroupVersion) -> Value {
    let mut entry = Map::new();
    entry.insert("resource".into(), r.plural().into());
    entry.insert("responseKind".into(), gv.kind_json(r.kind.name()));
    let scope = if r.kind.is_namespaced() {
        "Namespaced"
    } else {
        "Cluster"
    };
    entry.insert("scope".into(), scope.into());
    entry.insert("singularResource".into(), r.kind.singular().into());
    entry.insert("verbs".into(), json!(r.verbs));
    if !r.kind.short_names().is_empty() {
        entry.insert("shortNames".into(), json!(r.kind.short_names()));
    }
    if !r.categories.is_empty() {
        entry.insert("categories".into(), json!(r.categories));
    }
    if !r.subresources.is_empty() {
        let subs: Vec<Value> = r
            .subresources
            .iter()
            .map(|s| {
                json!({
                    "subresource": s.name,
                    "responseKind": s.group_version(gv).kind_json(s.kind),
                    "verbs": s.verbs,
                })
            })
            .collect();
        entry.insert("subresources".into(), subs.into());
    }
    Value::Object(entry)
}

/// Whether a request with this `Accept` header should get the aggregated document: true when
/// the first media range the server can answer is [`AGGREGATED_V2`]'s. Ranges are taken in the
/// order given (clients list their preference first; kubectl sends no quality values), ranges
/// asking for other representations (`v2beta1`, protobuf, `as=Table`) are skipped, and a plain
/// JSON or wildcard range chooses the unaggregated document.
pub fn accepts_aggregated(accept: &str) -> bool {
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let mut g = None;
        let mut v = None;
        let mut kind = None;
        let mut refused = false;
        for param in parts {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match key.trim() {
                "g" => g = Some(value),
                "v" => v = Some(value),
                "as" => kind = Some(value),
                "q" => refused = value.parse::<f32>().is_ok_and(|q| q == 0.0),
                _ => {}
            }
        }
        if refused || !matches!(media.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        match (g, v, kind) {
            (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) => {
                return true;
            }
            (None, None, None) => return false,
            _ => continue,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn find<'a>(list: &'a Value, name: &str) -> &'a Value {
        list["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
    }

    /// Every kind the cluster API stores is served, each once, and nothing else.
    #[test]
    fn every_kind_is_served_once() {
        for kind in Kind::all() {
            assert_eq!(resources().filter(|r| r.kind == kind).count(), 1, "{kind}");
            assert_eq!(resource(kind).map(|r| r.kind), Some(kind));
        }
        assert_eq!(resources().count(), Kind::all().count());
    }

    /// The aggregated core document has the apidiscovery v2 shape client-go decodes, and
    /// carries the same resources, verbs and subresources as the unaggregated one.
    #[test]
    fn aggregated_core_matches_resource_list() {
        let doc = aggregated_core();
        assert_eq!(doc["kind"], "APIGroupDiscoveryList");
        assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
        let items = doc["items"].as_array().expect("items");
        assert_eq!(items.len(), 1);
        assert!(items[0]["metadata"].get("name").is_none());
        let version = &items[0]["versions"][0];
        assert_eq!(version["version"], "v1");
        assert_eq!(version["freshness"], "Current");
        let resources = version["resources"].as_array().expect("resources");
        let core = super::resources()
            .filter(|r| r.group_version() == GroupVersion::CORE_V1)
            .count();
        assert_eq!(resources.len(), core);
        assert!(resources.iter().all(|r| r["resource"] != "deployments"));

        let pods = resources
            .iter()
            .find(|r| r["resource"] == "pods")
            .expect("pods");
        assert_eq!(
            pods["responseKind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["singularResource"], "pod");
        assert_eq!(pods["shortNames"], json!(["po"]));
        let eviction = pods["subresources"]
            .as_array()
            .expect("subresources")
            .iter()
            .find(|s| s["subresource"] == "eviction")
            .expect("eviction");
        assert_eq!(
            eviction["responseKind"],
            json!({"group": "policy", "version": "v1", "kind": "Eviction"})
        );
        let nodes = resources
            .iter()
            .find(|r| r["resource"] == "nodes")
            .expect("nodes");
        assert_eq!(nodes["scope"], "Cluster");

        // the same verbs as the unaggregated list, entry by entry
        let list = core_v1_resources();
        for r in resources {
            let plural = r["resource"].as_str().expect("resource");
            assert_eq!(r["verbs"], find(&list, plural)["verbs"], "{plural}");
            for s in r["subresources"].as_array().into_iter().flatten() {
                let name = format!("{plural}/{}", s["subresource"].as_str().expect("name"));
                assert_eq!(s["verbs"], find(&list, &name)["verbs"], "{name}");
            }
        }
    }

    /// `GET /api` names v1 and the address given.
    #[test]
    fn api_versions_document() {
        assert_eq!(
            api_versions("10.0.0.1:6443"),
            json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}],
            })
        );
    }

    /// The unaggregated documents decode as k8s-openapi's types, which kube-rs's discovery
    /// reads them into (every field it requires is present, `singularName` included).
    #[test]
    fn unaggregated_documents_decode_as_kube_rs_reads_them() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
        let versions: meta::APIVersions =
            serde_json::from_value(api_versions("127.0.0.1:6443")).expect("APIVersions");
        assert_eq!(versions.versions, ["v1"]);
        let groups: meta::APIGroupList =
            serde_json::from_value(api_group_list()).expect("APIGroupList");
        let names: Vec<&str> = groups.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "apps",
                "rbac.authorization.k8s.io",
                "authorization.k8s.io",
                "discovery.k8s.io",
                "certificates.k8s.io",
                "coordination.k8s.io",
                "batch",
                "policy",
                "scheduling.k8s.io",
                "storage.k8s.io",
                "networking.k8s.io",
                "autoscaling",
                "apiextensions.k8s.io",
                "apiregistration.k8s.io"
            ]
        );
        let list: meta::APIResourceList =
            serde_json::from_value(core_v1_resources()).expect("APIResourceList");
        let eviction = list
            .resources
            .iter()
            .find(|r| r.name == "pods/eviction")
            .expect("pods/eviction");
        assert_eq!(eviction.group.as_deref(), Some("policy"));
        // nine core resources, seven pod subresources, the status of nodes, namespaces and
        // services, and the finalize of namespaces; seven declared kinds, the status of
        // three of them (replication controllers, persistent volumes and their claims), the
        // scale of one and the token of service accounts
        assert_eq!(list.resources.len(), 9 + 11 + 7 + 3 + 1 + 1);
        let apps: meta::APIResourceList =
            serde_json::from_value(resource_list(GroupVersion::parse("apps/v1")))
                .expect("APIResourceList");
        let names: Vec<&str> = apps.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "deployments",
                "replicasets",
                "daemonsets",
                "statefulsets",
                "controllerrevisions",
                "deployments/scale",
                "deployments/status",
                "replicasets/scale",
                "replicasets/status",
                "daemonsets/status",
                "statefulsets/scale",
                "statefulsets/status"
            ]
        );
        let scale = &apps.resources[5];
        assert_eq!(
            (scale.group.as_deref(), scale.version.as_deref()),
            (Some("autoscaling"), Some("v1"))
        );
    }

    /// Versions sort as Kubernetes prioritises them.
    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut versions = [
            "v1alpha1",
            "v1",
            "foo",
            "v1beta1",
            "v2",
            "v10beta3",
            "v1beta2",
            "v11alpha2",
            "bar",
            "v12",
        ];
        versions.sort_by_key(|v| version_priority(v));
        assert_eq!(
            versions,
            [
                "v12",
                "v2",
                "v1",
                "v10beta3",
                "v1beta2",
                "v1beta1",
                "v11alpha2",
                "v1alpha1",
                "bar",
                "foo"
            ]
        );
    }

    /// Group versions parse and print both ways, and give the paths kubectl looks up.
    #[test]
    fn group_version_forms() {
        let apps = GroupVersion::parse("apps/v1");
        assert_eq!((apps.group, apps.version), ("apps", "v1"));
        assert_eq!(apps.api_version(), "apps/v1");
        assert_eq!(apps.path(), "apis/apps/v1");
        assert_eq!(GroupVersion::parse("v1"), GroupVersion::CORE_V1);
        assert_eq!(GroupVersion::CORE_V1.path(), "api/v1");
        assert_eq!(GroupVersion::of(Kind::Pod), GroupVersion::CORE_V1);
        assert_eq!(GroupVersion::of(Kind::ReplicaSet), apps);
        assert_eq!(
            group_versions(),
            vec![
                GroupVersion::CORE_V1,
                apps,
                GroupVersion::parse("rbac.authorization.k8s.io/v1"),
                GroupVersion::parse("authorization.k8s.io/v1"),
                GroupVersion::parse("discovery.k8s.io/v1"),
                GroupVersion::parse("certificates.k8s.io/v1"),
                GroupVersion::parse("coordination.k8s.io/v1"),
                GroupVersion::parse("batch/v1"),
                GroupVersion::parse("policy/v1"),
                GroupVersion::parse("scheduling.k8s.io/v1"),
                GroupVersion::parse("storage.k8s.io/v1"),
                GroupVersion::parse("networking.k8s.io/v1"),
                GroupVersion::parse("autoscaling/v2"),
                GroupVersion::parse("apiextensions.k8s.io/v1"),
                GroupVersion::parse("apiregistration.k8s.io/v1")
            ]
        );
    }

    /// kubectl's and client-go's discovery `Accept` headers choose the aggregated document;
    /// kube-rs's and plain JSON requests choose the unaggregated one.
    #[test]
    fn accept_negotiation() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                       application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,\
                       application/json";
        assert!(accepts_aggregated(kubectl));
        assert!(accepts_aggregated(AGGREGATED_V2));
        assert!(accepts_aggregated(
            "application/json; as=APIGroupDiscoveryList; v=v2; g=apidiscovery.k8s.io"
        ));
        assert!(!accepts_aggregated("application/json"));
        assert!(!accepts_aggregated("*/*"));
        assert!(!accepts_aggregated(""));
        assert!(!accepts_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(!accepts_aggregated(
            "application/json,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        ));
        assert!(!accepts_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0,application/json"
        ));
    }
}
