//! The `discovery.k8s.io` group's served resource: EndpointSlices. (Named by its one kind:
//! `discovery` is this module's parent.)

use skiff_proto::api::Kind;

use super::{READ_WRITE, Resource};

/// The group's served resources, in discovery order.
pub(super) const RESOURCES: &[Resource] = &[
    // The addresses behind each Service, kept by the EndpointSlice controller.
    Resource {
        kind: Kind::EndpointSlice,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
];
