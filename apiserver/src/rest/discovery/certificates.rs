//! The `certificates.k8s.io` group's served resource: CertificateSigningRequests, with their
//! `approval` and `status` subresources.

use skiff_proto::api::Kind;

use super::{READ_WRITE, Resource, STATUS_VERBS, Subresource};

/// The group's served resources, in discovery order.
pub(super) const RESOURCES: &[Resource] = &[
    // Certificates asked for by joining nodes and users, approved and signed.
    Resource {
        kind: Kind::CertificateSigningRequest,
        verbs: READ_WRITE,
        subresources: &[
            Subresource {
                name: "approval",
                kind: "CertificateSigningRequest",
                api_version: None,
                verbs: STATUS_VERBS,
            },
            Subresource {
                name: "status",
                kind: "CertificateSigningRequest",
                api_version: None,
                verbs: STATUS_VERBS,
            },
        ],
        categories: &[],
    },
];
