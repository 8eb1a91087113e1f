//! The declared kinds ([`super::registry`]): each one's names, scope, subresources, Kubernetes
//! type, defaults, rules and table, in one place. The rules and defaults are kube-apiserver's
//! for Kubernetes 1.32 (its `validation.go` and `defaults.go` of each group); the columns are
//! its printers'.

use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::coordination::v1 as coordination;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::networking::v1 as networking;
use serde_json::{Value, json};

use super::meta::{IntOrString, LabelSelector};
use super::print::{number, or_none, since, text, time};
use super::registry::{Column, GenericObject, KindInfo, Typed, default_field, template};
use super::validation::apps::{int_or_percent, non_negative, selector_and_template};
use super::validation::names::{validate_labels, validate_selector};
use super::validation::pod::validate_pod_spec;
use super::validation::{Errors, Path};
use super::vocabulary::RestartPolicy;

/// Every declared kind. A kind's index here is its [`super::GenericKind`].
pub static DECLARED: &[KindInfo] = &[
    KindInfo {
        kind: "ConfigMap",
        plural: "configmaps",
        api_version: "v1",
        namespaced: true,
        short_names: &["cm"],
        categories: &[],
        status: false,
        scale: false,
        template: None,
        schema: &Typed::<core::ConfigMap>(PhantomData),
        defaults: no_defaults,
        validate: config_map,
        columns: &[
            Column {
                name: "Data",
                type_: "string",
                format: "",
                priority: 0,
                description: "Data contains the configuration data.",
                cell: config_map_data,
            },
            AGE,
        ],
    },
    KindInfo {
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        api_version: "v1",
        namespaced: true,
        short_names: &["sa"],
        categories: &[],
        status: false,
        scale: false,
        template: None,
        schema: &Typed::<core::ServiceAccount>(PhantomData),
        defaults: no_defaults,
        validate: no_rules,
        columns: &[
            Column {
                name: "Secrets",
                type_: "string",
                format: "",
                priority: 0,
                description: "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
                cell: |o, _| json!(items(o, "/secrets").len()),
            },
            AGE,
        ],
    },
    KindInfo {
        kind: "Lease",
        plural: "leases",
        api_version: "coordination.k8s.io/v1",
        namespaced: true,
        short_names: &[],
        categories: &[],
        status: false,
        scale: false,
        template: None,
        schema: &Typed::<coordination::Lease>(PhantomData),
        defaults: no_defaults,
        validate: lease,
        columns: &[
            Column {
                name: "Holder",
                type_: "string",
                format: "",
                priority: 0,
                description: "The holder of the lease.",
                cell: |o, _| json!(text(o, "/spec/holderIdentity")),
            },
            AGE,
        ],
    },
    KindInfo {
        kind: "PodTemplate",
        plural: "podtemplates",
        api_version: "v1",
        namespaced: true,
        short_names: &[],
        categories: &[],
        status: false,
        scale: false,
        template: Some("/template"),
        schema: &Typed::<core::PodTemplate>(PhantomData),
        defaults: no_defaults,
        validate: pod_template,
        columns: &[
            containers_column!("/template", 0),
            images_column!("/template", 0),
            Column {
                name: "Pod Labels",
                type_: "string",
                format: "",
                priority: 0,
                description: "The labels of the pods made from the template.",
                cell: |o, _| json!(labels(o, "/template/metadata/labels")),
            },
        ],
    },
    KindInfo {
        kind: "ReplicationController",
        plural: "replicationcontrollers",
        api_version: "v1",
        namespaced: true,
        short_names: &["rc"],
        categories: &["all"],
        status: true,
        scale: true,
        template: Some("/spec/template"),
        schema: &Typed::<core::ReplicationController>(PhantomData),
        defaults: replication_controller_defaults,
        validate: replication_controller,
        columns: &[
            integer!("Desired", "/spec/replicas", "Number of desired pods."),
            integer!("Current", "/status/replicas", "Number of actual pods."),
            integer!("Ready", "/status/readyReplicas", "Number of ready pods."),
            AGE,
            containers_column!("/spec/template", 1),
            images_column!("/spec/template", 1),
            Column {
                name: "Selector",
                type_: "string",
                format: "",
                priority: 1,
                description: "The label selector of the pods.",
                cell: |o, _| json!(labels(o, "/spec/selector")),
            },
        ],
    },
    KindInfo {
        kind: "DaemonSet",
        plural: "daemonsets",
        api_version: "apps/v1",
        namespaced: true,
        short_names: &["ds"],
        categories: &["all"],
        status: true,
        scale: false,
        template: Some("/spec/template"),
        schema: &Typed::<apps::DaemonSet>(PhantomData),
        defaults: daemon_set_defaults,
        validate: daemon_set,
        columns: &[
            integer!(
                "Desired",
                "/status/desiredNumberScheduled",
                "The number of nodes that should be running the daemon pod."
            ),
            integer!(
                "Current",
                "/status/currentNumberScheduled",
                "The number of nodes running at least one daemon pod."
            ),
            integer!(
                "Ready",
                "/status/numberReady",
                "The number of nodes with a ready daemon pod."
            ),
            integer!(
                "Up-to-date",
                "/status/updatedNumberScheduled",
                "The number of nodes running the updated daemon pod."
            ),
            integer!(
                "Available",
                "/status/numberAvailable",
                "The number of nodes with an available daemon pod."
            ),
            Column {
                name: "Node Selector",
                type_: "string",
                format: "",
                priority: 0,
                description: "The node selector of the daemon pods.",
                cell: |o, _| json!(labels(o, "/spec/template/spec/nodeSelector")),
            },
            AGE,
            containers_column!("/spec/template", 1),
            images_column!("/spec/template", 1),
            selector_column(),
        ],
    },
    KindInfo {
        kind: "StatefulSet",
        plural: "statefulsets",
        api_version: "apps/v1",
        namespaced: true,
        short_names: &["sts"],
        categories: &["all"],
        status: true,
        scale: true,
        template: Some("/spec/template"),
        schema: &Typed::<apps::StatefulSet>(PhantomData),
        defaults: stateful_set_defaults,
        validate: stateful_set,
        columns: &[
            Column {
                name: "Ready",
                type_: "string",
                format: "",
                priority: 0,
                description: "Number of the pods that are ready, of those desired.",
                cell: |o, _| {
                    json!(format!(
                        "{}/{}",
                        number(o, "/status/readyReplicas"),
                        number(o, "/spec/replicas")
                    ))
                },
            },
            AGE,
            containers_column!("/spec/template", 1),
            images_column!("/spec/template", 1),
        ],
    },
    KindInfo {
        kind: "ControllerRevision",
        plural: "controllerrevisions",
        api_version: "apps/v1",
        namespaced: true,
        short_names: &[],
        categories: &[],
        status: false,
        scale: false,
        template: None,
        schema: &Typed::<apps::ControllerRevision>(PhantomData),
        defaults: no_defaults,
        validate: controller_revision,
        columns: &[
            Column {
                name: "Controller",
                type_: "string",
                format: "",
                priority: 0,
                description: "The controller the revision belongs to.",
                cell: |o, _| {
                    let owner = items(o, "/metadata/ownerReferences")
                        .iter()
                        .find(|r| r["controller"] == Value::Bool(true));
                    json!(owner.map_or_else(String::new, |r| format!(
                        "{}/{}",
                        controller_resource(text(r, "/apiVersion"), text(r, "/kind")),
                        text(r, "/name")
                    )))
                },
            },
            integer!("Revision", "/revision", "The revision number."),
            AGE,
        ],
    },
    KindInfo {
        kind: "Job",
        plural: "jobs",
        api_version: "batch/v1",
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        status: true,
        scale: false,
        template: Some("/spec/template"),
        schema: &Typed::<batch::Job>(PhantomData),
        defaults: job_defaults,
        validate: job,
        columns: &[
            Column {
                name: "Status",
                type_: "string",
                format: "",
                priority: 0,
                description: "Status of the job.",
                cell: |o, _| json!(job_status(o)),
            },
            Column {
                name: "Completions",
                type_: "string",
                format: "",
                priority: 0,
                description: "The desired number of successfully finished pods the job should be run with.",
                cell: |o, _| json!(job_completions(o)),
            },
            Column {
                name: "Duration",
                type_: "string",
                format: "",
                priority: 0,
                description: "Time required to complete the job.",
                cell: |o, now| {
                    let Some(start) = time(o, "/status/startTime") else {
                        return json!("");
                    };
                    let end = time(o, "/status/completionTime").unwrap_or(now);
                    json!(super::print::human_duration(end - start))
                },
            },
            AGE,
            containers_column!("/spec/template", 1),
            images_column!("/spec/template", 1),
            selector_column(),
        ],
    },
    KindInfo {
        kind: "CronJob",
        plural: "cronjobs",
        api_version: "batch/v1",
        namespaced: true,
        short_names: &["cj"],
        categories: &["all"],
        status: true,
        scale: false,
        template: Some("/spec/jobTemplate/spec/template"),
        schema: &Typed::<batch::CronJob>(PhantomData),
        defaults: cron_job_defaults,
        validate: cron_job,
        columns: &[
            Column {
                name: "Schedule",
                type_: "string",
                format: "",
                priority: 0,
                description: "The schedule in Cron format.",
                cell: |o, _| json!(text(o, "/spec/schedule")),
            },
            Column {
                name: "Timezone",
                type_: "string",
                format: "",
                priority: 0,
                description: "The time zone name for the given schedule.",
                cell: |o, _| json!(or_none(text(o, "/spec/timeZone"))),
            },
            flag_column!(
                "Suspend",
                "/spec/suspend",
                "Whether subsequent executions are suspended."
            ),
            Column {
                name: "Active",
                type_: "integer",
                format: "",
                priority: 0,
                description: "The number of running jobs.",
                cell: |o, _| json!(items(o, "/status/active").len()),
            },
            Column {
                name: "Last Schedule",
                type_: "string",
                format: "",
                priority: 0,
                description: "When the job was last successfully scheduled.",
                cell: |o, now| match time(o, "/status/lastScheduleTime") {
                    Some(t) => json!(super::print::human_duration(now - t)),
                    None => json!("<none>"),
                },
            },
            AGE,
            containers_column!("/spec/jobTemplate/spec/template", 1),
            images_column!("/spec/jobTemplate/spec/template", 1),
            Column {
                name: "Selector",
                type_: "string",
                format: "",
                priority: 1,
                description: "The label selector of the pods.",
                cell: |o, _| json!(selector(o, "/spec/jobTemplate/spec/selector")),
            },
        ],
    },
    KindInfo {
        kind: "PersistentVolume",
        plural: "persistentvolumes",
        api_version: "v1",
        namespaced: false,
        short_names: &["pv"],
        categories: &[],
        status: true,
        scale: false,
        template: None,
        schema: &Typed::<core::PersistentVolume>(PhantomData),
        defaults: persistent_volume_defaults,
        validate: persistent_volume,
        columns: &[
            text_column!(
                "Capacity",
                "/spec/capacity/storage",
                0,
                "The size of the volume."
            ),
            Column {
                name: "Access Modes",
                type_: "string",
                format: "",
                priority: 0,
                description: "The ways the volume can be mounted.",
                cell: |o, _| json!(access_modes(o)),
            },
            text_column!(
                "Reclaim Policy",
                "/spec/persistentVolumeReclaimPolicy",
                0,
                "What happens to the volume when released from its claim."
            ),
            text_column!("Status", "/status/phase", 0, "The phase of the volume."),
            Column {
                name: "Claim",
                type_: "string",
                format: "",
                priority: 0,
                description: "The claim bound to the volume.",
                cell: |o, _| {
                    let name = text(o, "/spec/claimRef/name");
                    json!(if name.is_empty() {
                        String::new()
                    } else {
                        format!("{}/{name}", text(o, "/spec/claimRef/namespace"))
                    })
                },
            },
            text_column!(
                "StorageClass",
                "/spec/storageClassName",
                0,
                "The storage class of the volume."
            ),
            Column {
                name: "VolumeAttributesClass",
                type_: "string",
                format: "",
                priority: 0,
                description: "The volume attributes class of the volume.",
                cell: |o, _| json!(or_unset(text(o, "/spec/volumeAttributesClassName"))),
            },
            text_column!(
                "Reason",
                "/status/reason",
                0,
                "Why the volume is in its phase."
            ),
            AGE,
            text_column!(
                "VolumeMode",
                "/spec/volumeMode",
                1,
                "Whether the volume is a filesystem or a block device."
            ),
        ],
    },
    KindInfo {
        kind: "PersistentVolumeClaim",
        plural: "persistentvolumeclaims",
        api_version: "v1",
        namespaced: true,
        short_names: &["pvc"],
        categories: &[],
        status: true,
        scale: false,
        template: None,
        schema: &Typed::<core::PersistentVolumeClaim>(PhantomData),
        defaults: persistent_volume_claim_defaults,
        validate: persistent_volume_claim,
        columns: &[
            text_column!("Status", "/status/phase", 0, "The phase of the claim."),
            text_column!(
                "Volume",
                "/spec/volumeName",
                0,
                "The volume bound to the claim."
            ),
            text_column!(
                "Capacity",
                "/status/capacity/storage",
                0,
                "The size of the bound volume."
            ),
            Column {
                name: "Access Modes",
                type_: "string",
                format: "",
                priority: 0,
                description: "The ways the volume can be mounted.",
                cell: |o, _| json!(access_modes(o)),
            },
            text_column!(
                "StorageClass",
                "/spec/storageClassName",
                0,
                "The storage class of the claim."
            ),
            Column {
                name: "VolumeAttributesClass",
                type_: "string",
                format: "",
                priority: 0,
                description: "The volume attributes class of the claim.",
                cell: |o, _| json!(or_unset(text(o, "/spec/volumeAttributesClassName"))),
            },
            AGE,
            text_column!(
                "VolumeMode",
                "/spec/volumeMode",
                1,
                "Whether the volume is a filesystem or a block device."
            ),
        ],
    },
    KindInfo {
        kind: "PodDisruptionBudget",
        plural: "poddisruptionbudgets",
        api_version: "policy/v1",
        namespaced: true,
        short_names: &["pdb"],
        categories: &[],
        status: true,
        scale: false,
        template: None,
        schema: &Typed::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(PhantomData),
        defaults: no_defaults,
        validate: pod_disruption_budget,
        columns: &[
            Column {
                name: "Min Available",
                type_: "string",
                format: "",
                priority: 0,
                description: "The minimum number of pods that must be available.",
                cell: |o, _| json!(int_or_string(o, "/spec/minAvailable")),
            },
            Column {
                name: "Max Unavailable",
                type_: "string",
                format: "",
                priority: 0,
                description: "The maximum number of pods that may be unavailable.",
                cell: |o, _| json!(int_or_string(o, "/spec/maxUnavailable")),
            },
            integer!(
                "Allowed Disruptions",
                "/status/disruptionsAllowed",
                "Number of pod disruptions that are currently allowed."
            ),
            AGE,
        ],
    },
    KindInfo {
        kind: "PriorityClass",
        plural: "priorityclasses",
        api_version: "scheduling.k8s.io/v1",
        namespaced: false,
        short_names: &["pc"],
        categories: &[],
        status: false,
        scale: false,
        template: None,
        schema: &Typed::<k8s_openapi::api::scheduling::v1::PriorityClass>(PhantomData),
        defaults: priority_class_defaults,
        validate: priority_class,
        columns: &[
            integer!("Value", "/value", "The priority of the pods of the class."),
            flag_column!(
                "Global-Default",
                "/globalDefault",
                "Whether pods without a class get this one."
            ),
            AGE,
            text_column!(
                "PreemptionPolicy",
                "/preemptionPolicy",
                0,
                "Whether pods of the class preempt others."
            ),
        ],
    },
    KindInfo {
        kind: "StorageClass",
        plural: "storageclasses",
        api_version: "storage.k8s.io/v1",
        namespaced: false,
        short_names: &["sc"],
        categories: &[],
        status: false,
        scale: false,
        template: None,
        schema: &Typed::<k8s_openapi::api::storage::v1::StorageClass>(PhantomData),
        defaults: storage_class_defaults,
        validate: storage_class,
        columns: &[
            text_column!(
                "Provisioner",
                "/provisioner",
                0,
                "The provisioner of the class's volumes."
            ),
            text_column!(
                "ReclaimPolicy",
                "/reclaimPolicy",
                0,
                "What happens to a volume when its claim is deleted."
            ),
            text_column!(
                "VolumeBindingMode",
                "/volumeBindingMode",
                0,
                "When volumes are bound to claims."
            ),
            flag_column!(
                "AllowVolumeExpansion",
                "/allowVolumeExpansion",
                "Whether claims may grow."
            ),
            AGE,
        ],
    },
    KindInfo {
        kind: "Endpoints",
        plural: "endpoints",
        api_version: "v1",
        namespaced: true,
        short_names: &["ep"],
        categories: &[],
        status: false,
        scale: false,
        template: None,
        schema: &Typed::<core::Endpoints>(PhantomData),
        defaults: no_defaults,
        validate: endpoints,
        columns: &[
            Column {
                name: "Endpoints",
                type_: "string",
                format: "",
                priority: 0,
                description: "Endpoints of the service.",
                cell: |o, _| json!(endpoints_cell(o)),
            },
            AGE,
        ],
    },
    KindInfo {
        kind: "Ingress",
        plural: "ingresses",
        api_version: "networking.k8s.io/v1",
        namespaced: true,
        short_names: &["ing"],
        categories: &[],
        status: true,
        scale: false,
        template: None,
        schema: &Typed::<networking::Ingress>(PhantomData),
        defaults: no_defaults,
        validate: ingress,
        columns: &[
            Column {
                name: "Class",
                type_: "string",
                format: "",
                priority: 0,
                description: "The name of the IngressClass resource that should be used for this Ingress.",
                cell: |o, _| json!(or_none(text(o, "/spec/ingressClassName"))),
            },
            Column {
                name: "Hosts",
                type_: "string",
                format: "",
                priority: 0,
                description: "Hosts that incoming requests are matched against.",
                cell: |o, _| {
                    let hosts: Vec<&str> = items(o, "/spec/rules")
                        .iter()
                        .map(|r| text(r, "/host"))
                        .map(|h| if h.is_empty() { "*" } else { h })
                        .collect();
                    json!(if hosts.is_empty() {
                        "*".to_owned()
                    } else {
                        hosts.join(",")
                    })
                },
            },
            Column {
                name: "Address",
                type_: "string",
                format: "",
                priority: 0,
                description: "Address is a list containing ingress points for the load-balancer.",
                cell: |o, _| json!(load_balancer(o)),
            },
            Column {
                name: "Ports",
                type_: "string",
                format: "",
                priority: 0,
                description: "Ports of TLS configurations that open.",
                cell: |o, _| {
                    json!(if items(o, "/spec/tls").is_empty() {
                        "80"
                    } else {
                        "80, 443"
                    })
                },
            },
            AGE,
        ],
    },
    KindInfo {
        kind: "IngressClass",
        plural: "ingressclasses",
        api_version: "networking.k8s.io/v1",
        namespaced: false,
        short_names: &[],
        categories: &[],
        status: false,
        scale: false,
        template: None,
        schema: &Typed::<networking::IngressClass>(PhantomData),
        defaults: no_defaults,
        validate: ingress_class,
        columns: &[
            text_column!(
                "Controller",
                "/spec/controller",
                0,
                "Controller that is in charge of handling this class."
            ),
            Column {
                name: "Parameters",
                type_: "string",
                format: "",
                priority: 0,
                description: "A reference to a resource with additional parameters.",
                cell: |o, _| {
                    let name = text(o, "/spec/parameters/name");
                    json!(if name.is_empty() {
                        "<none>".to_owned()
                    } else {
                        format!("{}/{name}", text(o, "/spec/parameters/kind"))
                    })
                },
            },
            AGE,
        ],
    },
    KindInfo {
        kind: "NetworkPolicy",
        plural: "networkpolicies",
        api_version: "networking.k8s.io/v1",
        namespaced: true,
        short_names: &["netpol"],
        categories: &[],
        status: false,
        scale: false,
        template: None,
        schema: &Typed::<networking::NetworkPolicy>(PhantomData),
        defaults: network_policy_defaults,
        validate: network_policy,
        columns: &[
            Column {
                name: "Pod-Selector",
                type_: "string",
                format: "",
                priority: 0,
                description: "Selects the pods to which this NetworkPolicy object applies.",
                cell: |o, _| {
                    let s = selector(o, "/spec/podSelector");
                    json!(if s == "<none>" {
                        "<none>".to_owned()
                    } else {
                        s
                    })
                },
            },
            AGE,
        ],
    },
    KindInfo {
        kind: "HorizontalPodAutoscaler",
        plural: "horizontalpodautoscalers",
        api_version: "autoscaling/v2",
        namespaced: true,
        short_names: &["hpa"],
        categories: &["all"],
        status: true,
        scale: false,
        template: None,
        schema: &Typed::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>(PhantomData),
        defaults: horizontal_pod_autoscaler_defaults,
        validate: horizontal_pod_autoscaler,
        columns: &[
            Column {
                name: "Reference",
                type_: "string",
                format: "",
                priority: 0,
                description: "Reference to the target resource.",
                cell: |o, _| {
                    json!(format!(
                        "{}/{}",
                        text(o, "/spec/scaleTargetRef/kind"),
                        text(o, "/spec/scaleTargetRef/name")
                    ))
                },
            },
            Column {
                name: "Targets",
                type_: "string",
                format: "",
                priority: 0,
                description: "The current and target values of the metrics.",
                cell: |o, _| json!(hpa_targets(o)),
            },
            integer!(
                "MinPods",
                "/spec/minReplicas",
                "Lower limit for the number of pods."
            ),
            integer!(
                "MaxPods",
                "/spec/maxReplicas",
                "Upper limit for the number of pods."
            ),
            integer!(
                "Replicas",
                "/status/currentReplicas",
                "Current number of replicas of pods managed by this autoscaler."
            ),
            AGE,
        ],
    },
    KindInfo {
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        api_version: "apiextensions.k8s.io/v1",
        namespaced: false,
        short_names: &["crd", "crds"],
        categories: &["api-extensions"],
        status: true,
        scale: false,
        template: None,
        schema: &Typed::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(PhantomData),
        defaults: super::custom::crd::defaults,
        validate: super::custom::crd::validate,
        columns: &[Column {
            name: "Created At",
            type_: "date",
            format: "",
            priority: 0,
            description: "When the definition was created.",
            cell: |o, _| json!(text(o, "/metadata/creationTimestamp")),
        }],
    },
    KindInfo {
        kind: "APIService",
        plural: "apiservices",
        api_version: "apiregistration.k8s.io/v1",
        namespaced: false,
        short_names: &[],
        categories: &["api-extensions"],
        status: true,
        scale: false,
        template: None,
        schema: &Typed::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>(
            PhantomData,
        ),
        defaults: no_defaults,
        validate: api_service,
        columns: &[
            Column {
                name: "Service",
                type_: "string",
                format: "",
                priority: 0,
                description: "The service that serves the group version, or Local.",
                cell: |o, _| {
                    let name = text(o, "/spec/service/name");
                    json!(if name.is_empty() {
                        "Local".to_owned()
                    } else {
                        format!("{}/{name}", text(o, "/spec/service/namespace"))
                    })
                },
            },
            Column {
                name: "Available",
                type_: "string",
                format: "",
                priority: 0,
                description: "Whether the group version is served, and if not why.",
                cell: |o, _| json!(api_service_available(o)),
            },
            AGE,
        ],
    },
];

/// An APIService's `Available` column: its condition's status, with the reason when it is
/// not `True` (`False (ServiceNotFound)`), as kubectl shows it.
fn api_service_available(o: &Value) -> String {
    let condition = items(o, "/status/conditions")
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"));
    let Some(c) = condition else {
        return "Unknown".into();
    };
    let status = c.get("status").and_then(Value::as_str).unwrap_or("Unknown");
    match c.get("reason").and_then(Value::as_str) {
        Some(reason) if status != "True" && !reason.is_empty() => format!("{status} ({reason})"),
        _ => status.to_owned(),
    }
}

/// `Age`, the column most printers end with.
const AGE: Column = Column {
    name: "Age",
    type_: "string",
    format: "",
    priority: 0,
    description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
    cell: age,
};

fn age(object: &Value, now: DateTime<Utc>) -> Value {
    json!(since(time(object, "/metadata/creationTimestamp"), now))
}

/// The array at a JSON pointer, or none.
fn items<'a>(object: &'a Value, pointer: &str) -> &'a [Value] {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The number of entries of the map at a JSON pointer.
fn entries(object: &Value, pointer: &str) -> usize {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .map_or(0, serde_json::Map::len)
}

fn no_defaults(_: &mut GenericObject) {}

fn no_rules(_: &mut Errors, _: &GenericObject, _: Option<&GenericObject>) {}

/// A field that may not change once the object exists.
fn immutable(errs: &mut Errors, object: &GenericObject, stored: &GenericObject, pointer: &str) {
    if object.at(pointer) != stored.at(pointer) {
        errs.add(&path(pointer), "field is immutable");
    }
}

/// The field path of a JSON pointer (`/spec/selector` → `spec.selector`).
fn path(pointer: &str) -> Path {
    super::registry::path_of(pointer)
}

/// An integer field that, when set, is at least `min`.
fn at_least(errs: &mut Errors, object: &GenericObject, pointer: &str, min: i64) {
    if let Some(v) = object.int(pointer)
        && v < min
    {
        errs.add(
            &path(pointer),
            format!("invalid value {v}: must be greater than or equal to {min}"),
        );
    }
}

// Columns many kinds share.

/// A column of the integer at a JSON pointer (0 when absent, as Go prints it).
macro_rules! integer {
    ($name:expr, $pointer:expr, $description:expr) => {
        Column {
            name: $name,
            type_: "integer",
            format: "",
            priority: 0,
            description: $description,
            cell: |o, _| json!(number(o, $pointer)),
        }
    };
}
use integer;

/// A column of the string at a JSON pointer.
macro_rules! text_column {
    ($name:expr, $pointer:expr, $priority:expr, $description:expr) => {
        Column {
            name: $name,
            type_: "string",
            format: "",
            priority: $priority,
            description: $description,
            cell: |o, _| json!(text(o, $pointer)),
        }
    };
}
use text_column;

/// A column of the boolean at a JSON pointer (`false` when absent).
macro_rules! flag_column {
    ($name:expr, $pointer:expr, $description:expr) => {
        Column {
            name: $name,
            type_: "boolean",
            format: "",
            priority: 0,
            description: $description,
            cell: |o, _| {
                json!(
                    o.pointer($pointer)
                        .and_then(Value::as_bool)
                        .unwrap_or(false)
                )
            },
        }
    };
}
use flag_column;

/// `Containers`: the names of the template's containers.
macro_rules! containers_column {
    ($template:expr, $priority:expr) => {
        Column {
            name: "Containers",
            type_: "string",
            format: "",
            priority: $priority,
            description: "Names of each container in the template.",
            cell: |o, _| {
                json!(container_field(
                    o,
                    concat!($template, "/spec/containers"),
                    "/name"
                ))
            },
        }
    };
}
use containers_column;

/// `Images`: the images of the template's containers.
macro_rules! images_column {
    ($template:expr, $priority:expr) => {
        Column {
            name: "Images",
            type_: "string",
            format: "",
            priority: $priority,
            description: "Images referenced by each container in the template.",
            cell: |o, _| {
                json!(container_field(
                    o,
                    concat!($template, "/spec/containers"),
                    "/image"
                ))
            },
        }
    };
}
use images_column;

const fn selector_column() -> Column {
    Column {
        name: "Selector",
        type_: "string",
        format: "",
        priority: 1,
        description: "The label selector of the pods.",
        cell: |o, _| json!(selector(o, "/spec/selector")),
    }
}

/// One field of each container, comma-separated.
fn container_field(o: &Value, containers: &str, field: &str) -> String {
    items(o, containers)
        .iter()
        .map(|c| text(c, field))
        .collect::<Vec<_>>()
        .join(",")
}

/// A label map as kubectl prints it: `a=b,c=d`, or `<none>`.
fn labels(o: &Value, pointer: &str) -> String {
    let pairs: Vec<String> = o
        .pointer(pointer)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    if pairs.is_empty() {
        "<none>".to_owned()
    } else {
        pairs.join(",")
    }
}

/// A label selector as kubectl prints it (`app=web,tier in (a,b)`), or `<none>`.
fn selector(o: &Value, pointer: &str) -> String {
    let Some(sel) = o
        .pointer(pointer)
        .and_then(|v| serde_json::from_value::<LabelSelector>(v.clone()).ok())
    else {
        return "<none>".to_owned();
    };
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in &sel.match_expressions {
        parts.push(match r.operator.as_str() {
            "Exists" => r.key.clone(),
            "DoesNotExist" => format!("!{}", r.key),
            op => format!(
                "{} {} ({})",
                r.key,
                op.to_ascii_lowercase(),
                r.values.join(",")
            ),
        });
    }
    if parts.is_empty() {
        "<none>".to_owned()
    } else {
        parts.join(",")
    }
}

/// An int-or-string field as kubectl prints it, `N/A` when unset.
fn int_or_string(o: &Value, pointer: &str) -> String {
    match o.pointer(pointer) {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".to_owned(),
    }
}

/// A volume's or a claim's access modes, abbreviated as kubectl prints them (`RWO,ROX`).
fn access_modes(o: &Value) -> String {
    items(o, "/spec/accessModes")
        .iter()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `<unset>` for an empty string, as kubectl prints an unset class.
fn or_unset(s: &str) -> String {
    if s.is_empty() {
        "<unset>".to_owned()
    } else {
        s.to_owned()
    }
}

/// `daemonset.apps`, the resource of an owner's kind, as kubectl names a revision's
/// controller.
fn controller_resource(api_version: &str, kind: &str) -> String {
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let resource = kind.to_ascii_lowercase();
    if group.is_empty() {
        resource
    } else {
        format!("{resource}.{group}")
    }
}

// Pod templates.

/// The template at `pointer` is a valid pod (labels included) that restarts as `restart`
/// allows; `selector`, when given, selects it.
fn pod_template_rules(
    errs: &mut Errors,
    o: &GenericObject,
    pointer: &str,
    selector: Option<&LabelSelector>,
    restart: &[RestartPolicy],
) {
    let p = path(pointer);
    let Some(t) = template(errs, o, pointer) else {
        errs.add(&p, "Required value");
        return;
    };
    validate_labels(
        errs,
        &p.field("metadata").field("labels"),
        &t.metadata.labels,
    );
    if let Some(sel) = selector
        && !sel.matches(&t.metadata.labels)
    {
        errs.add(
            &p.field("metadata").field("labels"),
            "invalid value: `selector` does not match template `labels`",
        );
    }
    let spec = p.field("spec");
    validate_pod_spec(errs, &spec, &t.spec);
    if let Some(policy) = t.spec.restart_policy
        && !restart.contains(&policy)
    {
        let allowed: Vec<&str> = restart.iter().map(|r| r.as_str()).collect();
        errs.one_of(&spec.field("restartPolicy"), policy.as_str(), &allowed);
    }
}

/// The label selector at a JSON pointer: valid, and not empty; `None` when absent.
fn required_selector(errs: &mut Errors, o: &GenericObject, pointer: &str) -> Option<LabelSelector> {
    let p = path(pointer);
    let Some(value) = o.at(pointer) else {
        errs.add(&p, "Required value");
        return None;
    };
    let sel: LabelSelector = match serde_json::from_value(value.clone()) {
        Ok(s) => s,
        Err(e) => {
            errs.add(&p, format!("invalid value: {e}"));
            return None;
        }
    };
    if sel.match_labels.is_empty() && sel.match_expressions.is_empty() {
        errs.add(&p, "invalid value: empty selector is invalid");
    } else {
        validate_selector(errs, &p, &sel);
    }
    Some(sel)
}

fn pod_template(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    pod_template_rules(
        errs,
        o,
        "/template",
        None,
        &[
            RestartPolicy::Always,
            RestartPolicy::OnFailure,
            RestartPolicy::Never,
        ],
    );
}

// ReplicationController

fn replication_controller_defaults(o: &mut GenericObject) {
    let labels = o.at("/spec/template/metadata/labels").cloned();
    let spec = o.object_at("/spec");
    default_field(spec, "replicas", json!(1));
    // An RC without a selector selects its template's labels, as Kubernetes defaults it.
    if spec
        .get("selector")
        .is_none_or(|s| s.as_object().is_none_or(serde_json::Map::is_empty))
        && let Some(labels) = labels
    {
        spec.insert("selector".to_owned(), labels);
    }
    let labels = o.at("/spec/template/metadata/labels").cloned();
    let meta = &mut o.metadata;
    if meta.labels.is_empty()
        && let Some(Value::Object(labels)) = labels
    {
        meta.labels = labels
            .into_iter()
            .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_owned()))
            .collect();
    }
}

fn replication_controller(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    non_negative(
        errs,
        &path("/spec/replicas"),
        o.int("/spec/replicas").and_then(|v| i32::try_from(v).ok()),
    );
    let selector: Option<std::collections::BTreeMap<String, String>> = o
        .at("/spec/selector")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let selector = selector
        .filter(|s| !s.is_empty())
        .map(|match_labels| LabelSelector {
            match_labels,
            ..LabelSelector::default()
        });
    if selector.is_none() {
        errs.add(&path("/spec/selector"), "Required value");
    }
    pod_template_rules(
        errs,
        o,
        "/spec/template",
        selector.as_ref(),
        &[RestartPolicy::Always],
    );
}

// DaemonSet

fn daemon_set_defaults(o: &mut GenericObject) {
    let spec = o.object_at("/spec");
    default_field(spec, "revisionHistoryLimit", json!(10));
    let strategy = o.object_at("/spec/updateStrategy");
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let rolling = o.object_at("/spec/updateStrategy/rollingUpdate");
        default_field(rolling, "maxUnavailable", json!(1));
        default_field(rolling, "maxSurge", json!(0));
    }
}

fn daemon_set(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    workload_rules(errs, o, "DaemonSet");
    let strategy = o.text("/spec/updateStrategy/type");
    errs_one_of(
        errs,
        "/spec/updateStrategy/type",
        strategy,
        &["RollingUpdate", "OnDelete"],
    );
    if strategy == "RollingUpdate" {
        let surge = int_or_percent_at(errs, o, "/spec/updateStrategy/rollingUpdate/maxSurge");
        let unavailable =
            int_or_percent_at(errs, o, "/spec/updateStrategy/rollingUpdate/maxUnavailable");
        if surge == Some(0) && unavailable == Some(0) {
            errs.add(
                &path("/spec/updateStrategy/rollingUpdate/maxUnavailable"),
                "invalid value 0: may not be 0 when `maxSurge` is 0",
            );
        }
    }
    if let Some(stored) = stored {
        immutable(errs, o, stored, "/spec/selector");
    }
}

/// A workload's selector (required, not empty) selects its template, a pod that always
/// restarts; its counts are not negative.
fn workload_rules(errs: &mut Errors, o: &GenericObject, kind: &str) {
    for field in [
        "/spec/replicas",
        "/spec/minReadySeconds",
        "/spec/revisionHistoryLimit",
    ] {
        non_negative(
            errs,
            &path(field),
            o.int(field).and_then(|v| i32::try_from(v).ok()),
        );
    }
    let Some(sel) = o
        .at("/spec/selector")
        .and_then(|v| serde_json::from_value::<LabelSelector>(v.clone()).ok())
    else {
        errs.add(&path("/spec/selector"), "Required value");
        return;
    };
    let Some(mut t) = template(errs, o, "/spec/template") else {
        errs.add(&path("/spec/template"), "Required value");
        return;
    };
    // A StatefulSet's pods mount their claims by the claim templates' names: as the
    // controller adds them, they are the template's volumes.
    let claims = o
        .at("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.pointer("/metadata/name")?.as_str());
    for name in claims {
        t.spec.volumes.retain(|v| v.name != name);
        t.spec.volumes.push(super::volume::Volume {
            name: name.to_owned(),
            persistent_volume_claim: Some(super::volume::PersistentVolumeClaimVolumeSource {
                claim_name: name.to_owned(),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    selector_and_template(errs, kind, &Path::root("spec"), &sel, &t);
}

fn errs_one_of(errs: &mut Errors, pointer: &str, value: &str, allowed: &[&str]) {
    errs.one_of(&path(pointer), value, allowed);
}

fn int_or_percent_at(errs: &mut Errors, o: &GenericObject, pointer: &str) -> Option<i32> {
    let value: IntOrString = serde_json::from_value(o.at(pointer)?.clone()).ok()?;
    int_or_percent(errs, &path(pointer), &value, true)
}

// StatefulSet

fn stateful_set_defaults(o: &mut GenericObject) {
    let spec = o.object_at("/spec");
    default_field(spec, "replicas", json!(1));
    default_field(spec, "podManagementPolicy", json!("OrderedReady"));
    default_field(spec, "revisionHistoryLimit", json!(10));
    let strategy = o.object_at("/spec/updateStrategy");
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let rolling = o.object_at("/spec/updateStrategy/rollingUpdate");
        default_field(rolling, "partition", json!(0));
    }
    let retention = o.object_at("/spec/persistentVolumeClaimRetentionPolicy");
    default_field(retention, "whenDeleted", json!("Retain"));
    default_field(retention, "whenScaled", json!("Retain"));
}

/// What an update of a StatefulSet's spec may change.
const STATEFUL_SET_MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

fn stateful_set(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    workload_rules(errs, o, "StatefulSet");
    errs_one_of(
        errs,
        "/spec/podManagementPolicy",
        o.text("/spec/podManagementPolicy"),
        &["OrderedReady", "Parallel"],
    );
    let strategy = o.text("/spec/updateStrategy/type");
    errs_one_of(
        errs,
        "/spec/updateStrategy/type",
        strategy,
        &["RollingUpdate", "OnDelete"],
    );
    at_least(errs, o, "/spec/updateStrategy/rollingUpdate/partition", 0);
    at_least(errs, o, "/spec/ordinals/start", 0);
    for field in ["whenDeleted", "whenScaled"] {
        let pointer = format!("/spec/persistentVolumeClaimRetentionPolicy/{field}");
        errs_one_of(errs, &pointer, o.text(&pointer), &["Retain", "Delete"]);
    }
    for (i, claim) in o
        .at("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = text(claim, "/metadata/name");
        let p = path("/spec/volumeClaimTemplates")
            .index(i)
            .field("metadata")
            .field("name");
        if !super::validation::is_dns1123_subdomain(name) {
            errs.add(
                &p,
                format!("invalid value {name:?}: a claim template needs a DNS subdomain name"),
            );
        }
    }
    if let Some(stored) = stored {
        let strip = |o: &GenericObject| {
            let mut spec = o.at("/spec").cloned().unwrap_or_default();
            if let Some(spec) = spec.as_object_mut() {
                spec.retain(|k, _| !STATEFUL_SET_MUTABLE.contains(&k.as_str()));
            }
            spec
        };
        if strip(o) != strip(stored) {
            errs.add(
                &Path::root("spec"),
                "Forbidden: updates to statefulset spec for fields other than 'replicas', \
                 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', \
                 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            );
        }
    }
}

// ControllerRevision

fn controller_revision(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    at_least(errs, o, "/revision", 0);
    if let Some(stored) = stored {
        immutable(errs, o, stored, "/data");
    }
}

// Job

/// The labels a Job's pods carry and its generated selector matches.
const JOB_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

fn job_defaults(o: &mut GenericObject) {
    let uid = o.metadata.uid.clone();
    let name = o.metadata.name.clone();
    let spec = o.object_at("/spec");
    // Neither set: one pod to one completion; parallelism alone: a work queue.
    let completions = spec.get("completions").filter(|v| !v.is_null()).cloned();
    let parallelism = spec.get("parallelism").filter(|v| !v.is_null()).cloned();
    if completions.is_none() && parallelism.is_none() {
        spec.insert("completions".to_owned(), json!(1));
    }
    default_field(spec, "parallelism", json!(1));
    let per_index = spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null());
    default_field(
        spec,
        "backoffLimit",
        json!(if per_index { i64::from(i32::MAX) } else { 6 }),
    );
    default_field(spec, "completionMode", json!("NonIndexed"));
    default_field(spec, "suspend", json!(false));
    default_field(spec, "manualSelector", json!(false));
    let pod_failure_policy = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
    default_field(
        spec,
        "podReplacementPolicy",
        json!(if pod_failure_policy {
            "Failed"
        } else {
            "TerminatingOrFailed"
        }),
    );
    // The selector is the Job's own unless the user chose one (manualSelector): its uid.
    let manual = spec.get("manualSelector") == Some(&Value::Bool(true));
    if !manual && !uid.is_empty() && spec.get("selector").is_none_or(Value::is_null) {
        spec.insert(
            "selector".to_owned(),
            json!({ "matchLabels": { JOB_UID_LABEL: uid } }),
        );
        let labels = o.object_at("/spec/template/metadata/labels");
        for (k, v) in [
            (JOB_UID_LABEL, uid.as_str()),
            (JOB_NAME_LABEL, name.as_str()),
            ("controller-uid", uid.as_str()),
            ("job-name", name.as_str()),
        ] {
            default_field(labels, k, json!(v));
        }
    }
}

fn job(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    for (field, min) in [
        ("/spec/parallelism", 0),
        ("/spec/completions", 0),
        ("/spec/backoffLimit", 0),
        ("/spec/activeDeadlineSeconds", 1),
        ("/spec/ttlSecondsAfterFinished", 0),
        ("/spec/backoffLimitPerIndex", 0),
    ] {
        at_least(errs, o, field, min);
    }
    let mode = o.text("/spec/completionMode");
    errs_one_of(
        errs,
        "/spec/completionMode",
        mode,
        &["NonIndexed", "Indexed"],
    );
    if mode == "Indexed" && o.int("/spec/completions").is_none() {
        errs.add(
            &path("/spec/completions"),
            "Required value: when completion mode is Indexed",
        );
    }
    let selector = required_selector(errs, o, "/spec/selector");
    pod_template_rules(
        errs,
        o,
        "/spec/template",
        selector.as_ref(),
        &[RestartPolicy::OnFailure, RestartPolicy::Never],
    );
    if let Some(stored) = stored {
        for field in ["/spec/selector", "/spec/completionMode", "/spec/template"] {
            immutable(errs, o, stored, field);
        }
        // Completions change only with parallelism, for an elastic Indexed Job.
        if mode != "Indexed" {
            immutable(errs, o, stored, "/spec/completions");
        }
    }
}

/// A Job's status as kubectl prints it: Complete, Failed, Suspended, or Running.
fn job_status(o: &Value) -> String {
    let conditions = items(o, "/status/conditions");
    let holds = |t: &str| {
        conditions
            .iter()
            .any(|c| text(c, "/type") == t && text(c, "/status") == "True")
    };
    let status = if holds("Complete") {
        "Complete"
    } else if holds("Failed") {
        "Failed"
    } else if holds("FailureTarget") || holds("SuccessCriteriaMet") {
        "Terminating"
    } else if holds("Suspended") {
        "Suspended"
    } else {
        "Running"
    };
    status.to_owned()
}

/// `succeeded/completions`, or `succeeded/1 of parallelism` for a work queue.
fn job_completions(o: &Value) -> String {
    let succeeded = number(o, "/status/succeeded");
    match o.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let parallelism = number(o, "/spec/parallelism");
            if parallelism > 1 {
                format!("{succeeded}/1 of {parallelism}")
            } else {
                format!("{succeeded}/1")
            }
        }
    }
}

// CronJob

/// The longest name of a CronJob: its Jobs' names add 11 characters, and must stay labels.
const CRON_JOB_MAX_NAME: usize = 52;

fn cron_job_defaults(o: &mut GenericObject) {
    let spec = o.object_at("/spec");
    default_field(spec, "concurrencyPolicy", json!("Allow"));
    default_field(spec, "suspend", json!(false));
    default_field(spec, "successfulJobsHistoryLimit", json!(3));
    default_field(spec, "failedJobsHistoryLimit", json!(1));
    let job = o.object_at("/spec/jobTemplate/spec");
    default_field(job, "backoffLimit", json!(6));
    default_field(job, "completionMode", json!("NonIndexed"));
    default_field(job, "suspend", json!(false));
}

fn cron_job(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    if o.metadata.name.len() > CRON_JOB_MAX_NAME {
        errs.add(
            &Path::root("metadata").field("name"),
            format!(
                "Invalid value: {:?}: must be no more than {CRON_JOB_MAX_NAME} characters",
                o.metadata.name
            ),
        );
    }
    let schedule = o.text("/spec/schedule");
    if schedule.is_empty() {
        errs.add(&path("/spec/schedule"), "Required value");
    } else if schedule.contains("TZ") {
        errs.add(
            &path("/spec/schedule"),
            format!("Invalid value: {schedule:?}: cannot use TZ or CRON_TZ in schedule, use timeZone field instead"),
        );
    } else if let Err(why) = super::cron::Schedule::parse(schedule) {
        errs.add(
            &path("/spec/schedule"),
            format!("Invalid value: {schedule:?}: {why}"),
        );
    }
    let zone = o.text("/spec/timeZone");
    if o.at("/spec/timeZone").is_some()
        && let Err(why) = super::cron::time_zone(Some(zone))
    {
        errs.add(
            &path("/spec/timeZone"),
            format!("Invalid value: {zone:?}: {why}"),
        );
    }
    errs_one_of(
        errs,
        "/spec/concurrencyPolicy",
        o.text("/spec/concurrencyPolicy"),
        &["Allow", "Forbid", "Replace"],
    );
    for field in [
        "/spec/startingDeadlineSeconds",
        "/spec/successfulJobsHistoryLimit",
        "/spec/failedJobsHistoryLimit",
    ] {
        at_least(errs, o, field, 0);
    }
    let selector = o
        .at("/spec/jobTemplate/spec/selector")
        .and_then(|v| serde_json::from_value::<LabelSelector>(v.clone()).ok());
    pod_template_rules(
        errs,
        o,
        "/spec/jobTemplate/spec/template",
        selector.as_ref(),
        &[RestartPolicy::OnFailure, RestartPolicy::Never],
    );
}

// PersistentVolume and PersistentVolumeClaim

const ACCESS_MODES: &[&str] = &[
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

fn persistent_volume_defaults(o: &mut GenericObject) {
    let spec = o.object_at("/spec");
    default_field(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
    default_field(spec, "volumeMode", json!("Filesystem"));
    default_field(o.object_at("/status"), "phase", json!("Pending"));
}

/// The volume sources a PersistentVolume can have: exactly one is set.
const VOLUME_SOURCES: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

fn access_mode_rules(errs: &mut Errors, o: &GenericObject) {
    let modes = o.at("/spec/accessModes").and_then(Value::as_array);
    if modes.is_none_or(Vec::is_empty) {
        errs.add(
            &path("/spec/accessModes"),
            "Required value: at least 1 access mode is required",
        );
    }
    for (i, m) in modes.into_iter().flatten().enumerate() {
        errs.one_of(
            &path("/spec/accessModes").index(i),
            m.as_str().unwrap_or_default(),
            ACCESS_MODES,
        );
    }
}

fn persistent_volume(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    access_mode_rules(errs, o);
    if o.text("/spec/capacity/storage").is_empty() {
        errs.add(&path("/spec/capacity"), "Required value: storage");
    }
    let sources: Vec<&str> = VOLUME_SOURCES
        .iter()
        .copied()
        .filter(|s| o.at(&format!("/spec/{s}")).is_some_and(|v| !v.is_null()))
        .collect();
    match sources.len() {
        0 => errs.add(
            &Path::root("spec"),
            "Required value: must specify a volume type",
        ),
        1 => {}
        _ => errs.add(
            &path(&format!("/spec/{}", sources[1])),
            "Forbidden: may not specify more than 1 volume type",
        ),
    }
    errs_one_of(
        errs,
        "/spec/persistentVolumeReclaimPolicy",
        o.text("/spec/persistentVolumeReclaimPolicy"),
        &["Retain", "Delete", "Recycle"],
    );
    errs_one_of(
        errs,
        "/spec/volumeMode",
        o.text("/spec/volumeMode"),
        &["Filesystem", "Block"],
    );
    if let Some(stored) = stored {
        for s in VOLUME_SOURCES {
            immutable(errs, o, stored, &format!("/spec/{s}"));
        }
        immutable(errs, o, stored, "/spec/volumeMode");
    }
}

fn persistent_volume_claim_defaults(o: &mut GenericObject) {
    default_field(o.object_at("/spec"), "volumeMode", json!("Filesystem"));
    default_field(o.object_at("/status"), "phase", json!("Pending"));
}

fn persistent_volume_claim(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    access_mode_rules(errs, o);
    let storage = o.text("/spec/resources/requests/storage");
    if storage.is_empty() {
        errs.add(&path("/spec/resources/requests"), "Required value: storage");
    } else if let Ok(q) = storage.parse::<crate::quantity::Quantity>()
        && q.is_zero()
    {
        errs.add(
            &path("/spec/resources/requests/storage"),
            "Invalid value: \"0\": must be greater than zero",
        );
    }
    errs_one_of(
        errs,
        "/spec/volumeMode",
        o.text("/spec/volumeMode"),
        &["Filesystem", "Block"],
    );
    if let Some(stored) = stored {
        // A claim may grow, an unbound one be bound, and one that names no class be given
        // the default (as Kubernetes does retroactively); the rest of its spec is fixed.
        let binding = stored.text("/spec/volumeName").is_empty();
        let classless = stored.at("/spec/storageClassName").is_none();
        let fixed = |o: &GenericObject| {
            let mut spec = o.at("/spec").cloned().unwrap_or_default();
            if let Some(spec) = spec.as_object_mut() {
                spec.remove("resources");
                spec.remove("volumeAttributesClassName");
                if binding {
                    spec.remove("volumeName");
                }
                if classless {
                    spec.remove("storageClassName");
                }
            }
            spec
        };
        if fixed(o) != fixed(stored) {
            errs.add(
                &Path::root("spec"),
                "Forbidden: spec is immutable after creation except resources.requests and \
                 volumeAttributesClassName for bound claims",
            );
        }
    }
}

// PodDisruptionBudget

fn pod_disruption_budget(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    let min = o.at("/spec/minAvailable").filter(|v| !v.is_null());
    let max = o.at("/spec/maxUnavailable").filter(|v| !v.is_null());
    if min.is_some() && max.is_some() {
        errs.add(
            &path("/spec"),
            "Invalid value: minAvailable and maxUnavailable cannot be both set",
        );
    }
    int_or_percent_at(errs, o, "/spec/minAvailable");
    int_or_percent_at(errs, o, "/spec/maxUnavailable");
    if let Some(v) = o.at("/spec/selector")
        && let Ok(sel) = serde_json::from_value::<LabelSelector>(v.clone())
    {
        validate_selector(errs, &path("/spec/selector"), &sel);
    }
    errs_one_of_optional(
        errs,
        o,
        "/spec/unhealthyPodEvictionPolicy",
        &["IfHealthyBudget", "AlwaysAllow"],
    );
}

/// A field that, when set, holds one of `allowed`.
fn errs_one_of_optional(errs: &mut Errors, o: &GenericObject, pointer: &str, allowed: &[&str]) {
    if o.at(pointer).is_some_and(|v| !v.is_null()) {
        errs_one_of(errs, pointer, o.text(pointer), allowed);
    }
}

// PriorityClass

/// The highest value a user's PriorityClass may have; above it are the system classes'.
pub const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;
/// The system classes Kubernetes creates, their values and descriptions.
pub const SYSTEM_PRIORITY_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to \
         another node if necessary.",
    ),
];

fn priority_class_defaults(o: &mut GenericObject) {
    default_field(
        &mut o.body,
        "preemptionPolicy",
        json!(crate::api::pod::PREEMPT_LOWER_PRIORITY),
    );
}

fn priority_class(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    let name = o.metadata.name.as_str();
    let value = o.int("/value");
    match SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _, _)| *n == name) {
        Some((_, v, _)) if value != Some(*v) => errs.add(
            &path("/value"),
            format!("Forbidden: the value of {name} is {v}"),
        ),
        Some(_) => {}
        None if name.starts_with("system-") => errs.add(
            &Path::root("metadata").field("name"),
            format!("Invalid value: {name:?}: priority class names with 'system-' prefix are reserved"),
        ),
        None => match value {
            None => errs.add(&path("/value"), "Required value"),
            Some(v) if v > HIGHEST_USER_PRIORITY => errs.add(
                &path("/value"),
                format!("Invalid value: {v}: maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
            ),
            Some(_) => {}
        },
    }
    errs_one_of(
        errs,
        "/preemptionPolicy",
        o.text("/preemptionPolicy"),
        &crate::api::pod::PREEMPTION_POLICIES,
    );
    if let Some(stored) = stored {
        immutable(errs, o, stored, "/value");
        immutable(errs, o, stored, "/preemptionPolicy");
    }
}

// StorageClass

fn storage_class_defaults(o: &mut GenericObject) {
    default_field(&mut o.body, "reclaimPolicy", json!("Delete"));
    default_field(&mut o.body, "volumeBindingMode", json!("Immediate"));
}

fn storage_class(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    let provisioner = o.text("/provisioner");
    if provisioner.is_empty() {
        errs.add(&path("/provisioner"), "Required value");
    } else if provisioner.len() > 253
        || !super::validation::is_qualified_name(provisioner.rsplit('/').next().unwrap_or_default())
    {
        errs.add(
            &path("/provisioner"),
            format!("Invalid value: {provisioner:?}: name part must be a qualified name"),
        );
    }
    errs_one_of(
        errs,
        "/reclaimPolicy",
        o.text("/reclaimPolicy"),
        &["Delete", "Retain"],
    );
    errs_one_of(
        errs,
        "/volumeBindingMode",
        o.text("/volumeBindingMode"),
        &["Immediate", "WaitForFirstConsumer"],
    );
    if let Some(stored) = stored {
        for field in [
            "/parameters",
            "/provisioner",
            "/reclaimPolicy",
            "/volumeBindingMode",
        ] {
            immutable(errs, o, stored, field);
        }
    }
}

// Endpoints

fn endpoints(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    for (i, subset) in o
        .at("/subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let p = Path::root("subsets").index(i);
        for field in ["addresses", "notReadyAddresses"] {
            for (j, a) in items(subset, &format!("/{field}")).iter().enumerate() {
                let ip = text(a, "/ip");
                if ip.parse::<std::net::IpAddr>().is_err() {
                    errs.add(
                        &p.field(field).index(j).field("ip"),
                        format!("Invalid value: {ip:?}: must be a valid IP address"),
                    );
                }
            }
        }
        let ports = items(subset, "/ports");
        for (j, port) in ports.iter().enumerate() {
            let pp = p.field("ports").index(j);
            port_rules(errs, &pp, port, ports.len() > 1);
        }
    }
}

/// A port of an Endpoints subset or a network policy: a number in range, a known protocol,
/// and (when there are several) a name.
fn port_rules(errs: &mut Errors, p: &Path, port: &Value, named: bool) {
    match port.get("port").and_then(Value::as_i64) {
        Some(n) if (1..=65535).contains(&n) => {}
        Some(n) => errs.add(
            &p.field("port"),
            format!("Invalid value: {n}: must be between 1 and 65535, inclusive"),
        ),
        None => {}
    }
    if let Some(protocol) = port.get("protocol").and_then(Value::as_str) {
        errs.one_of(&p.field("protocol"), protocol, &["TCP", "UDP", "SCTP"]);
    }
    let name = text(port, "/name");
    if named && name.is_empty() {
        errs.add(&p.field("name"), "Required value");
    } else if !name.is_empty() && !super::validation::is_dns1123_label(name) {
        errs.add(
            &p.field("name"),
            format!("Invalid value: {name:?}: must be a DNS label"),
        );
    }
}

/// An Endpoints' addresses as kubectl prints them: `ip:port`, the first three, then how many
/// more.
fn endpoints_cell(o: &Value) -> String {
    let mut list = Vec::new();
    for subset in items(o, "/subsets") {
        let ports = items(subset, "/ports");
        for a in items(subset, "/addresses") {
            if ports.is_empty() {
                list.push(text(a, "/ip").to_owned());
            }
            for port in ports {
                list.push(format!("{}:{}", text(a, "/ip"), number(port, "/port")));
            }
        }
    }
    match list.len() {
        0 => "<none>".to_owned(),
        n if n > 3 => format!("{} + {} more...", list[..3].join(","), n - 3),
        _ => list.join(","),
    }
}

// Ingress and IngressClass

fn ingress(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    let rules = o.at("/spec/rules").and_then(Value::as_array);
    let default_backend = o.at("/spec/defaultBackend").filter(|v| !v.is_null());
    if rules.is_none_or(Vec::is_empty) && default_backend.is_none() {
        errs.add(
            &Path::root("spec"),
            "Invalid value: either `defaultBackend` or `rules` must be specified",
        );
    }
    if let Some(b) = default_backend {
        backend_rules(errs, &path("/spec/defaultBackend"), b);
    }
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        let p = path("/spec/rules").index(i);
        let host = text(rule, "/host");
        let bare = host.strip_prefix("*.").unwrap_or(host);
        if !host.is_empty()
            && (!super::validation::is_dns1123_subdomain(bare)
                || host.parse::<std::net::IpAddr>().is_ok())
        {
            errs.add(&p.field("host"), format!("Invalid value: {host:?}: a host must be a DNS name, optionally with a leading wildcard label, and not an IP"));
        }
        for (j, rp) in items(rule, "/http/paths").iter().enumerate() {
            let pp = p.field("http").field("paths").index(j);
            let path_type = text(rp, "/pathType");
            if path_type.is_empty() {
                errs.add(
                    &pp.field("pathType"),
                    "Required value: pathType must be specified",
                );
            } else {
                errs.one_of(
                    &pp.field("pathType"),
                    path_type,
                    &["Exact", "Prefix", "ImplementationSpecific"],
                );
            }
            let route = text(rp, "/path");
            if matches!(path_type, "Exact" | "Prefix") && !route.starts_with('/') {
                errs.add(
                    &pp.field("path"),
                    format!("Invalid value: {route:?}: must be an absolute path"),
                );
            }
            match rp.get("backend") {
                Some(b) => backend_rules(errs, &pp.field("backend"), b),
                None => errs.add(&pp.field("backend"), "Required value"),
            }
        }
    }
}

/// An Ingress backend: a service (a name and a port by name or number) or a resource, not both.
fn backend_rules(errs: &mut Errors, p: &Path, backend: &Value) {
    let service = backend.get("service").filter(|v| !v.is_null());
    let resource = backend.get("resource").filter(|v| !v.is_null());
    match (service, resource) {
        (Some(_), Some(_)) => errs.add(
            p,
            "Invalid value: cannot set both service and resource backends",
        ),
        (None, None) => errs.add(
            p,
            "Invalid value: one backend (service or resource) must be specified",
        ),
        (Some(s), None) => {
            if text(s, "/name").is_empty() {
                errs.add(&p.field("service").field("name"), "Required value");
            }
            let name = text(s, "/port/name");
            let number = s.pointer("/port/number").and_then(Value::as_i64);
            match (name.is_empty(), number) {
                (false, Some(_)) => errs.add(
                    &p.field("service").field("port"),
                    "Invalid value: cannot set both port name & port number",
                ),
                (true, None) => errs.add(
                    &p.field("service").field("port"),
                    "Invalid value: port name or number is required",
                ),
                (true, Some(n)) if !(1..=65535).contains(&n) => {
                    errs.add(
                        &p.field("service").field("port").field("number"),
                        format!("Invalid value: {n}: must be between 1 and 65535, inclusive"),
                    );
                }
                _ => {}
            }
        }
        (None, Some(_)) => {}
    }
}

/// A load balancer's ingress points, as kubectl prints them.
fn load_balancer(o: &Value) -> String {
    items(o, "/status/loadBalancer/ingress")
        .iter()
        .map(|i| {
            let ip = text(i, "/ip");
            if ip.is_empty() {
                text(i, "/hostname")
            } else {
                ip
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn ingress_class(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    let controller = o.text("/spec/controller");
    let valid = controller.len() <= 250
        && controller.split_once('/').is_some_and(|(domain, rest)| {
            super::validation::is_dns1123_subdomain(domain) && !rest.is_empty()
        });
    if !controller.is_empty() && !valid {
        errs.add(
            &path("/spec/controller"),
            format!("Invalid value: {controller:?}: must be a domain-prefixed path (such as \"acme.io/foo\")"),
        );
    }
    if let Some(stored) = stored {
        immutable(errs, o, stored, "/spec/controller");
    }
}

// APIService

fn api_service(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    let group = o.text("/spec/group");
    let version = o.text("/spec/version");
    if version.is_empty() {
        errs.add(&path("/spec/version"), "Required value");
    }
    let name = o.metadata.name.as_str();
    let want = format!("{version}.{group}");
    if !version.is_empty() && name != want {
        errs.add(
            &Path::root("metadata").field("name"),
            format!("Invalid value: {name:?}: must be `spec.version+\".\"+spec.group`: {want:?}"),
        );
    }
    for field in ["/spec/groupPriorityMinimum", "/spec/versionPriority"] {
        match o.int(field) {
            Some(n) if n > 0 && n <= 20000 => {}
            Some(n) => errs.add(
                &path(field),
                format!("Invalid value: {n}: must be positive and less than 20000"),
            ),
            None => errs.add(&path(field), "Required value"),
        }
    }
    let service = o.at("/spec/service").filter(|v| !v.is_null());
    if let Some(service) = service {
        for field in ["namespace", "name"] {
            if service
                .get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errs.add(&path(&format!("/spec/service/{field}")), "Required value");
            }
        }
        let insecure = o.at("/spec/insecureSkipTLSVerify") == Some(&Value::Bool(true));
        if insecure && !o.text("/spec/caBundle").is_empty() {
            errs.add(
                &path("/spec/insecureSkipTLSVerify"),
                "Invalid value: true: may not be true if caBundle is present",
            );
        }
    }
}

// NetworkPolicy

fn network_policy_defaults(o: &mut GenericObject) {
    let egress = o
        .at("/spec/egress")
        .and_then(Value::as_array)
        .is_some_and(|e| !e.is_empty());
    let spec = o.object_at("/spec");
    if spec
        .get("policyTypes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        let mut types = vec![json!("Ingress")];
        if egress {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".to_owned(), Value::Array(types));
    }
}

fn network_policy(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    if let Some(v) = o.at("/spec/podSelector")
        && let Ok(sel) = serde_json::from_value::<LabelSelector>(v.clone())
    {
        validate_selector(errs, &path("/spec/podSelector"), &sel);
    }
    for (i, t) in o
        .at("/spec/policyTypes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        errs.one_of(
            &path("/spec/policyTypes").index(i),
            t.as_str().unwrap_or_default(),
            &["Ingress", "Egress"],
        );
    }
    for (direction, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in o
            .at(&format!("/spec/{direction}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let p = Path::root("spec").field(direction).index(i);
            for (j, port) in items(rule, "/ports").iter().enumerate() {
                let pp = p.field("ports").index(j);
                if let Some(protocol) = port.get("protocol").and_then(Value::as_str) {
                    errs.one_of(&pp.field("protocol"), protocol, &["TCP", "UDP", "SCTP"]);
                }
                if let (Some(start), Some(end)) = (
                    port.get("port").and_then(Value::as_i64),
                    port.get("endPort").and_then(Value::as_i64),
                ) && end < start
                {
                    errs.add(
                        &pp.field("endPort"),
                        "Invalid value: must be greater than or equal to `port`",
                    );
                }
            }
            for (j, peer) in items(rule, &format!("/{peers}")).iter().enumerate() {
                let Some(block) = peer.get("ipBlock") else {
                    continue;
                };
                let bp = p.field(peers).index(j).field("ipBlock");
                let cidr = text(block, "/cidr");
                if !is_cidr(cidr) {
                    errs.add(
                        &bp.field("cidr"),
                        format!("Invalid value: {cidr:?}: must be a valid CIDR"),
                    );
                }
                for (k, except) in items(block, "/except").iter().enumerate() {
                    let e = except.as_str().unwrap_or_default();
                    if !is_cidr(e) {
                        errs.add(
                            &bp.field("except").index(k),
                            format!("Invalid value: {e:?}: must be a valid CIDR"),
                        );
                    }
                }
            }
        }
    }
}

/// `10.0.0.0/8`, `fd00::/64`.
fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    match (ip.parse::<std::net::IpAddr>(), bits.parse::<u8>()) {
        (Ok(std::net::IpAddr::V4(_)), Ok(b)) => b <= 32,
        (Ok(std::net::IpAddr::V6(_)), Ok(b)) => b <= 128,
        _ => false,
    }
}

// HorizontalPodAutoscaler

fn horizontal_pod_autoscaler_defaults(o: &mut GenericObject) {
    let spec = o.object_at("/spec");
    default_field(spec, "minReplicas", json!(1));
    // No metric: the average CPU utilization, at 80 %.
    if spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec.insert(
            "metrics".to_owned(),
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
}

fn horizontal_pod_autoscaler(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    for field in ["kind", "name"] {
        if o.text(&format!("/spec/scaleTargetRef/{field}")).is_empty() {
            errs.add(&path("/spec/scaleTargetRef").field(field), "Required value");
        }
    }
    let min = o.int("/spec/minReplicas").unwrap_or(1);
    let max = o.int("/spec/maxReplicas").unwrap_or(0);
    if min < 1 {
        errs.add(
            &path("/spec/minReplicas"),
            format!("Invalid value: {min}: must be greater than or equal to 1"),
        );
    }
    if max < 1 {
        errs.add(
            &path("/spec/maxReplicas"),
            format!("Invalid value: {max}: must be greater than 0"),
        );
    } else if max < min {
        errs.add(
            &path("/spec/maxReplicas"),
            format!("Invalid value: {max}: must be greater than or equal to `minReplicas`"),
        );
    }
    for (i, m) in o
        .at("/spec/metrics")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        errs.one_of(
            &path("/spec/metrics").index(i).field("type"),
            text(m, "/type"),
            &[
                "Object",
                "Pods",
                "Resource",
                "ContainerResource",
                "External",
            ],
        );
    }
}

/// An autoscaler's metrics as kubectl prints them: `cpu: <unknown>/80%`, current first.
fn hpa_targets(o: &Value) -> String {
    let current = items(o, "/status/currentMetrics");
    let list: Vec<String> = items(o, "/spec/metrics")
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let kind = text(m, "/type");
            let (name, target) = match kind {
                "Resource" => (text(m, "/resource/name"), m.pointer("/resource/target")),
                "ContainerResource" => (
                    text(m, "/containerResource/name"),
                    m.pointer("/containerResource/target"),
                ),
                _ => ("", None),
            };
            let target = target.cloned().unwrap_or_default();
            let want = match target.get("averageUtilization").and_then(Value::as_i64) {
                Some(u) => format!("{u}%"),
                None => text(&target, "/averageValue").to_owned(),
            };
            let have = current
                .get(i)
                .and_then(|c| c.pointer("/resource/current/averageUtilization"))
                .and_then(Value::as_i64)
                .map_or_else(|| "<unknown>".to_owned(), |u| format!("{u}%"));
            if name.is_empty() {
                format!("{have}/{want}")
            } else {
                format!("{name}: {have}/{want}")
            }
        })
        .collect();
    if list.is_empty() {
        "<none>".to_owned()
    } else {
        list.join(", ")
    }
}

// ConfigMap

/// The most a ConfigMap may hold, keys and values together, as Kubernetes limits it.
const CONFIG_MAP_MAX_BYTES: usize = 1024 * 1024;

fn config_map(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    let mut total = 0;
    let data = o.at("/data").and_then(Value::as_object);
    let binary = o.at("/binaryData").and_then(Value::as_object);
    for (field, map) in [("data", data), ("binaryData", binary)] {
        for (key, value) in map.into_iter().flatten() {
            let p = Path::root(field).key(key);
            super::validation::kinds::config_key(errs, &p, key);
            total += key.len() + value.as_str().map_or(0, str::len);
            if field == "binaryData" && data.is_some_and(|d| d.contains_key(key)) {
                errs.add(
                    &p,
                    format!("Invalid value: {key:?}: duplicate of key present in data"),
                );
            }
        }
    }
    if total > CONFIG_MAP_MAX_BYTES {
        errs.add(
            &Path::root("data"),
            format!("Too long: must have at most {CONFIG_MAP_MAX_BYTES} bytes"),
        );
    }
    if let Some(stored) = stored
        && stored.at("/immutable") == Some(&Value::Bool(true))
    {
        if o.at("/immutable") != Some(&Value::Bool(true)) {
            errs.add(
                &path("/immutable"),
                "field is immutable when `immutable` is set",
            );
        }
        for pointer in ["/data", "/binaryData"] {
            if o.at(pointer) != stored.at(pointer) {
                errs.add(&path(pointer), "field is immutable when `immutable` is set");
            }
        }
    }
}

fn config_map_data(o: &Value, _: DateTime<Utc>) -> Value {
    json!(entries(o, "/data") + entries(o, "/binaryData"))
}

// Lease

fn lease(errs: &mut Errors, o: &GenericObject, _: Option<&GenericObject>) {
    at_least(errs, o, "/spec/leaseDurationSeconds", 1);
    at_least(errs, o, "/spec/leaseTransitions", 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Kind, Object, defaults, validation};

    fn kind(name: &str) -> Kind {
        Kind::from_name(name).expect("declared")
    }

    /// Decoded as a write is, defaulted and validated: the object, or each violation as
    /// `path: message`.
    fn write(kind: Kind, value: Value) -> Result<Object, Vec<String>> {
        let mut o = Object::from_value(kind, value).map_err(|e| vec![e.to_string()])?;
        defaults::apply(&mut o);
        validation::validate(&o)
            .map_err(|e| e.0.iter().map(ToString::to_string).collect::<Vec<_>>())?;
        Ok(o)
    }

    /// Every declared kind has a unique resource name, and is found by kind, plural and
    /// short name.
    #[test]
    fn declared_kinds_are_found_by_every_name() {
        let mut plurals = std::collections::BTreeSet::new();
        for info in DECLARED {
            assert!(plurals.insert((info.group(), info.plural)), "{}", info.kind);
            let k = kind(info.kind);
            assert_eq!(Kind::from_plural(info.plural), Some(k));
            assert_eq!(Kind::from_cli(info.plural), Some(k));
            for short in info.short_names {
                assert_eq!(Kind::from_cli(short), Some(k), "{short}");
            }
        }
        assert_eq!(Kind::from_cli("cm"), Some(kind("ConfigMap")));
    }

    /// A declared kind's object is written with what Kubernetes always writes, and keeps what
    /// it does not model verbatim.
    #[test]
    fn a_config_map_round_trips_through_kubernetes_type() {
        let o = write(
            kind("ConfigMap"),
            json!({"metadata": {"name": "cfg", "namespace": "a"}, "data": {"k": "v"}}),
        )
        .expect("valid");
        let served = o.to_json_value();
        assert_eq!(served["apiVersion"], "v1");
        assert_eq!(served["kind"], "ConfigMap");
        assert_eq!(served["data"], json!({"k": "v"}));
        let back = Object::from_json(o.kind(), &o.to_json()).expect("decodes");
        assert_eq!(back, o);
    }

    #[test]
    fn config_map_rules() {
        let errors = write(
            kind("ConfigMap"),
            json!({
                "metadata": {"name": "cfg"},
                "data": {"a b": "1", "ok": "2"},
                "binaryData": {"ok": "AAAA"}
            }),
        )
        .expect_err("invalid");
        assert_eq!(
            errors,
            [
                "data[\"a b\"]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name')",
                "binaryData.ok: Invalid value: \"ok\": duplicate of key present in data",
            ]
        );
        let big = "x".repeat(CONFIG_MAP_MAX_BYTES);
        assert!(
            write(
                kind("ConfigMap"),
                json!({"metadata": {"name": "cfg"}, "data": {"k": big}})
            )
            .is_err()
        );
    }

    /// An immutable ConfigMap keeps its data and its immutability.
    #[test]
    fn an_immutable_config_map_keeps_its_data() {
        let stored = write(
            kind("ConfigMap"),
            json!({"metadata": {"name": "cfg"}, "data": {"k": "v"}, "immutable": true}),
        )
        .unwrap();
        let next = write(
            kind("ConfigMap"),
            json!({"metadata": {"name": "cfg"}, "data": {"k": "w"}, "immutable": true}),
        )
        .unwrap();
        let errors = validation::validate_update(&next, &stored).unwrap_err();
        assert_eq!(
            errors.to_string(),
            "data: field is immutable when `immutable` is set"
        );
        assert!(validation::validate_update(&stored, &stored).is_ok());
    }

    #[test]
    fn lease_rules() {
        let errors = write(
            kind("Lease"),
            json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}}),
        )
        .expect_err("invalid");
        assert_eq!(
            errors,
            ["spec.leaseDurationSeconds: invalid value 0: must be greater than or equal to 1"]
        );
    }

    const TEMPLATE: &str = r#"{"metadata": {"labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}"#;

    fn template_json() -> Value {
        serde_json::from_str(TEMPLATE).unwrap()
    }

    /// A Job gets kube-apiserver's defaults and a selector of its own uid, which its pods'
    /// labels carry; a pod that restarts always is refused; its template is fixed.
    #[test]
    fn job_defaults_and_rules() {
        let mut t = template_json();
        t["spec"]["restartPolicy"] = json!("Never");
        let mut o = Object::from_value(
            kind("Job"),
            json!({"metadata": {"name": "pi", "uid": "u-1"}, "spec": {"template": t}}),
        )
        .unwrap();
        defaults::apply(&mut o);
        validation::validate(&o).expect("valid");
        let v = o.to_json_value();
        assert_eq!(v["spec"]["completions"], 1);
        assert_eq!(v["spec"]["parallelism"], 1);
        assert_eq!(v["spec"]["backoffLimit"], 6);
        assert_eq!(v["spec"]["completionMode"], "NonIndexed");
        assert_eq!(
            v["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(
            v["spec"]["template"]["metadata"]["labels"]["job-name"],
            "pi"
        );
        assert_eq!(
            v["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
            30
        );

        let mut changed = v.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx");
        let changed = Object::from_value(kind("Job"), changed).unwrap();
        assert_eq!(
            validation::validate_update(&changed, &o)
                .unwrap_err()
                .to_string(),
            "spec.template: field is immutable"
        );

        let errors = write(kind("Job"), json!({"metadata": {"name": "pi", "uid": "u-2"}, "spec": {"template": template_json()}}))
            .expect_err("restarts always");
        assert_eq!(
            errors,
            [
                "spec.template.spec.restartPolicy: unsupported value \"Always\": supported values: \"OnFailure\", \"Never\""
            ]
        );
    }

    #[test]
    fn daemon_set_and_stateful_set() {
        let ds = write(
            kind("DaemonSet"),
            json!({"metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template_json()}}),
        )
        .expect("valid");
        let v = ds.to_json_value();
        assert_eq!(
            v["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        let errors = write(
            kind("DaemonSet"),
            json!({"metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "b"}}, "template": template_json()}}),
        )
        .expect_err("selector misses");
        assert_eq!(
            errors,
            [
                "spec.template.metadata.labels: invalid value: `selector` does not match template `labels`"
            ]
        );

        let sts = write(
            kind("StatefulSet"),
            json!({"metadata": {"name": "db"}, "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "a"}}, "template": template_json()}}),
        )
        .expect("valid");
        let v = sts.to_json_value();
        assert_eq!(v["spec"]["replicas"], 1);
        assert_eq!(v["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            v["spec"]["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        let mut scaled = v.clone();
        scaled["spec"]["replicas"] = json!(3);
        let scaled = Object::from_value(kind("StatefulSet"), scaled).unwrap();
        assert!(validation::validate_update(&scaled, &sts).is_ok());
        let mut renamed = v;
        renamed["spec"]["serviceName"] = json!("other");
        let renamed = Object::from_value(kind("StatefulSet"), renamed).unwrap();
        assert!(validation::validate_update(&renamed, &sts).is_err());
    }

    #[test]
    fn cron_schedules() {
        for ok in [
            "*/5 * * * *",
            "0 0 * * MON-FRI",
            "@hourly",
            "@every 1h30m",
            "0 12 1,15 jan,jul ?",
        ] {
            assert!(super::super::cron::Schedule::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "* * * *",
            "61 * * * *",
            "0 0 * * 8",
            "@fortnightly",
            "*/0 * * * *",
            "5-1 * * * *",
        ] {
            assert!(super::super::cron::Schedule::parse(bad).is_err(), "{bad}");
        }
        let mut t = template_json();
        t["spec"]["restartPolicy"] = json!("OnFailure");
        let errors = write(
            kind("CronJob"),
            json!({"metadata": {"name": "backup"}, "spec": {"schedule": "TZ=UTC 0 * * * *", "jobTemplate": {"spec": {"template": t}}}}),
        )
        .expect_err("TZ");
        assert_eq!(
            errors,
            [
                "spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
            ]
        );
    }

    #[test]
    fn priority_classes() {
        assert!(
            write(
                kind("PriorityClass"),
                json!({"metadata": {"name": "high"}, "value": 1000})
            )
            .is_ok()
        );
        assert_eq!(
            write(
                kind("PriorityClass"),
                json!({"metadata": {"name": "system-mine"}, "value": 1})
            )
            .unwrap_err(),
            [
                "metadata.name: Invalid value: \"system-mine\": priority class names with 'system-' prefix are reserved"
            ]
        );
        assert!(
            write(
                kind("PriorityClass"),
                json!({"metadata": {"name": "huge"}, "value": 2_000_000_000})
            )
            .is_err()
        );
        assert!(
            write(
                kind("PriorityClass"),
                json!({"metadata": {"name": "system-node-critical"}, "value": 2_000_001_000})
            )
            .is_ok()
        );
        assert!(
            write(
                kind("PriorityClass"),
                json!({"metadata": {"name": "polite"}, "value": 10, "preemptionPolicy": "Never"})
            )
            .is_ok()
        );
        assert_eq!(
            write(
                kind("PriorityClass"),
                json!({"metadata": {"name": "rude"}, "value": 10, "preemptionPolicy": "Always"})
            )
            .unwrap_err(),
            [
                "preemptionPolicy: unsupported value \"Always\": supported values: \"PreemptLowerPriority\", \"Never\""
            ]
        );
    }

    #[test]
    fn claims_grow_but_keep_their_modes() {
        let claim = |storage: &str, mode: &str| {
            write(
                kind("PersistentVolumeClaim"),
                json!({"metadata": {"name": "data"}, "spec": {"accessModes": [mode], "resources": {"requests": {"storage": storage}}}}),
            )
            .unwrap()
        };
        let stored = claim("1Gi", "ReadWriteOnce");
        assert!(validation::validate_update(&claim("2Gi", "ReadWriteOnce"), &stored).is_ok());
        assert!(validation::validate_update(&claim("1Gi", "ReadWriteMany"), &stored).is_err());
        assert!(
            write(
                kind("PersistentVolumeClaim"),
                json!({"metadata": {"name": "d"}, "spec": {"accessModes": []}})
            )
            .is_err()
        );
    }

    #[test]
    fn networking_rules_and_defaults() {
        let errors = write(
            kind("Ingress"),
            json!({"metadata": {"name": "web"}, "spec": {"rules": [{"host": "10.0.0.1", "http": {"paths": [
                {"path": "api", "pathType": "Prefix", "backend": {"service": {"name": "api", "port": {"number": 70000}}}},
                {"path": "/", "backend": {"service": {"name": "web"}}}
            ]}}]}}),
        )
        .expect_err("invalid");
        assert_eq!(
            errors,
            [
                "spec.rules[0].host: Invalid value: \"10.0.0.1\": a host must be a DNS name, optionally with a leading wildcard label, and not an IP",
                "spec.rules[0].http.paths[0].path: Invalid value: \"api\": must be an absolute path",
                "spec.rules[0].http.paths[0].backend.service.port.number: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.rules[0].http.paths[1].pathType: Required value: pathType must be specified",
                "spec.rules[0].http.paths[1].backend.service.port: Invalid value: port name or number is required",
            ]
        );
        let policy = write(
            kind("NetworkPolicy"),
            json!({"metadata": {"name": "p"}, "spec": {"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}}),
        )
        .expect("valid");
        assert_eq!(
            policy.to_json_value()["spec"]["policyTypes"],
            json!(["Ingress", "Egress"])
        );
        assert!(
            write(
                kind("NetworkPolicy"),
                json!({"metadata": {"name": "p"}, "spec": {"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}}),
            )
            .is_err()
        );
        assert!(
            write(
                kind("Endpoints"),
                json!({"metadata": {"name": "e"}, "subsets": [{"addresses": [{"ip": "nope"}], "ports": [{"port": 80}]}]}),
            )
            .is_err()
        );
    }

    #[test]
    fn autoscaler_defaults_and_rules() {
        let hpa = write(
            kind("HorizontalPodAutoscaler"),
            json!({"metadata": {"name": "web"}, "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 5}}),
        )
        .expect("valid");
        let v = hpa.to_json_value();
        assert_eq!(v["spec"]["minReplicas"], 1);
        assert_eq!(
            v["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert_eq!(hpa_targets(&v), "cpu: <unknown>/80%");
        let errors = write(
            kind("HorizontalPodAutoscaler"),
            json!({"metadata": {"name": "web"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 4, "maxReplicas": 2}}),
        )
        .expect_err("invalid");
        assert_eq!(
            errors,
            ["spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"]
        );
    }
}
