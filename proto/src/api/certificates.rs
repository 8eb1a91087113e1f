//! `CertificateSigningRequest` (certificates.k8s.io/v1): a request for a certificate, signed
//! by a named signer once an approver allows it, as Kubernetes has it. A joining node makes
//! one with its bootstrap token (`CN=system:node:<name>`, `O=system:nodes`, signer
//! `kubernetes.io/kube-apiserver-client-kubelet`); the controller manager approves and signs
//! it; the node reads its certificate from `status.certificate` and carries on with it.
//!
//! The request (`spec.request`) is a PKCS#10 CSR in PEM; [`parse_request`] reads it and checks
//! its signature, and [`signer_rules`] holds what each of Kubernetes' signers requires of
//! it. `spec.username`, `uid`, `groups` and `extra` are the requester's, set by the server.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::meta::{ObjectMeta, Time, Unmodelled};
use super::node::{NODE_USER_PREFIX, NODES_GROUP};
#[cfg(test)]
use super::testing::small_vec;
use super::vocabulary::{CertificateConditionType, ConditionStatus};

/// The signer of node agents' client certificates (`CN=system:node:<name>`).
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of client certificates for the Kubernetes API, any user.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// The signer of node agents' serving certificates.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// The shortest certificate a request may ask for (`spec.expirationSeconds`).
pub const MIN_EXPIRATION_SECONDS: i32 = 600;

/// The key usages a request may name, in Kubernetes' spelling.
pub const KEY_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct CertificateSigningRequest {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"certificates.k8s.io/v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"CertificateSigningRequest\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CertificateSigningRequestSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CertificateSigningRequestStatus>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct CertificateSigningRequestSpec {
    /// The PKCS#10 request, PEM (base64 of the PEM in JSON).
    #[serde(default, with = "base64_bytes")]
    pub request: Vec<u8>,
    /// Who is asked to sign it (`kubernetes.io/kube-apiserver-client-kubelet`, ...).
    #[serde(default)]
    pub signer_name: String,
    /// How long the certificate should be valid; the signer may give less.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i32>,
    /// Key usages asked for (`digital signature`, `client auth` ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub usages: Vec<String>,
    /// The requester, as the server authenticated it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(test, proptest(value = "BTreeMap::new()"))]
    pub extra: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct CertificateSigningRequestStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub conditions: Vec<CertificateSigningRequestCondition>,
    /// The issued certificate chain, PEM (base64 of the PEM in JSON); set once, by the signer.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "base64_bytes")]
    pub certificate: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct CertificateSigningRequestCondition {
    #[serde(rename = "type")]
    pub type_: CertificateConditionType,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl CertificateSigningRequestCondition {
    /// A condition of `type_` that holds, set now.
    pub fn new(type_: CertificateConditionType, reason: &str, message: &str) -> Self {
        let now = Time::now();
        CertificateSigningRequestCondition {
            type_,
            status: ConditionStatus::True,
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_update_time: Some(now),
            last_transition_time: Some(now),
        }
    }
}

impl CertificateSigningRequest {
    /// The condition of `type_` that holds, if one does.
    pub fn condition(
        &self,
        type_: &CertificateConditionType,
    ) -> Option<&CertificateSigningRequestCondition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| &c.type_ == type_ && c.status == ConditionStatus::True)
    }

    pub fn is_approved(&self) -> bool {
        self.condition(&CertificateConditionType::Approved)
            .is_some()
    }

    pub fn is_denied(&self) -> bool {
        self.condition(&CertificateConditionType::Denied).is_some()
    }

    pub fn is_failed(&self) -> bool {
        self.condition(&CertificateConditionType::Failed).is_some()
    }

    /// The issued certificate, when the signer has written one.
    pub fn certificate(&self) -> Option<&[u8]> {
        self.status
            .as_ref()
            .map(|s| s.certificate.as_slice())
            .filter(|c| !c.is_empty())
    }

    /// What kubectl's CONDITION column says: `Approved,Issued`, `Denied`, `Pending` ...
    pub fn condition_summary(&self) -> String {
        let mut words: Vec<&str> = self
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .filter(|c| c.status == ConditionStatus::True)
            .map(|c| c.type_.as_str())
            .collect();
        if self.certificate().is_some() {
            words.push("Issued");
        }
        if words.is_empty() {
            "Pending".into()
        } else {
            words.join(",")
        }
    }
}

/// The algorithm of a request's public key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    EcdsaP256,
    EcdsaP384,
    Ed25519,
    Rsa,
}

/// What a signer needs of a request: its subject, the names it asks for and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRequest {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub emails: Vec<String>,
    pub uris: Vec<String>,
    pub key_algorithm: KeyAlgorithm,
    /// The subject public key's bits (the BIT STRING of the SubjectPublicKeyInfo).
    pub public_key: Vec<u8>,
}

/// Reads a PEM CSR (one `CERTIFICATE REQUEST` block) and checks that its key signed it.
pub fn parse_request(pem: &[u8]) -> Result<ParsedRequest, String> {
    use x509_parser::certification_request::X509CertificationRequest;
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    use x509_parser::prelude::FromDer;

    let (rest, block) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|e| format!("must contain one PEM block: {e}"))?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err(format!(
            "the PEM block is {:?}; it must be \"CERTIFICATE REQUEST\"",
            block.label
        ));
    }
    if rest.iter().any(|b| !b.is_ascii_whitespace()) {
        return Err("must contain exactly one PEM block".into());
    }
    let (trailing, csr) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| format!("not a PKCS#10 certificate request: {e}"))?;
    if !trailing.is_empty() {
        return Err("trailing bytes after the certificate request".into());
    }
    csr.verify_signature()
        .map_err(|e| format!("the request's signature does not verify: {e}"))?;
    let info = &csr.certification_request_info;
    let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        a.as_str()
            .map(str::to_owned)
            .map_err(|e| format!("a subject name is not text: {e}"))
    };
    let common_name = match info.subject.iter_common_name().next() {
        Some(a) => text(a)?,
        None => String::new(),
    };
    let organizations = info
        .subject
        .iter_organization()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    let mut parsed = ParsedRequest {
        common_name,
        organizations,
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        emails: Vec::new(),
        uris: Vec::new(),
        key_algorithm: key_algorithm(&info.subject_pki)?,
        public_key: info.subject_pki.subject_public_key.data.to_vec(),
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => parsed.dns_names.push((*d).to_owned()),
                    GeneralName::RFC822Name(e) => parsed.emails.push((*e).to_owned()),
                    GeneralName::URI(u) => parsed.uris.push((*u).to_owned()),
                    GeneralName::IPAddress(ip) => match ip.len() {
                        4 => parsed
                            .ip_addresses
                            .push(IpAddr::from(<[u8; 4]>::try_from(*ip).unwrap_or_default())),
                        16 => parsed
                            .ip_addresses
                            .push(IpAddr::from(<[u8; 16]>::try_from(*ip).unwrap_or_default())),
                        n => return Err(format!("an IP address SAN of {n} bytes")),
                    },
                    _ => {}
                }
            }
        }
    }
    Ok(parsed)
}

fn key_algorithm(
    spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>,
) -> Result<KeyAlgorithm, String> {
    let alg = spki.algorithm.algorithm.to_id_string();
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .map(|o| o.to_id_string());
    match (alg.as_str(), curve.as_deref()) {
        ("1.2.840.10045.2.1", Some("1.2.840.10045.3.1.7")) => Ok(KeyAlgorithm::EcdsaP256),
        ("1.2.840.10045.2.1", Some("1.3.132.0.34")) => Ok(KeyAlgorithm::EcdsaP384),
        ("1.3.101.112", _) => Ok(KeyAlgorithm::Ed25519),
        ("1.2.840.113549.1.1.1", _) => Ok(KeyAlgorithm::Rsa),
        _ => Err(format!(
            "unsupported public key algorithm {alg}{}: use ECDSA P-256 or P-384, Ed25519 or RSA",
            curve.map(|c| format!(" (curve {c})")).unwrap_or_default()
        )),
    }
}

/// Whether `pem` holds one or more certificates and nothing else (`status.certificate`).
pub fn check_certificates(pem: &[u8]) -> Result<usize, String> {
    let mut count = 0;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let block = block.map_err(|e| format!("not PEM: {e}"))?;
        if block.label != "CERTIFICATE" {
            return Err(format!(
                "a PEM block is {:?}; only \"CERTIFICATE\" blocks are allowed",
                block.label
            ));
        }
        x509_parser::parse_x509_certificate(&block.contents)
            .map_err(|e| format!("a certificate does not parse: {e}"))?;
        count += 1;
    }
    if count == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(count)
}

/// What Kubernetes' signer `signer` requires of a request and its usages; `None` for a
/// signer Skiff does not sign for (another signer's business).
pub fn signer_rules(
    signer: &str,
    request: &ParsedRequest,
    usages: &[String],
) -> Option<Result<(), String>> {
    let usages_within = |allowed: &[&str], required: &[&str]| -> Result<(), String> {
        if let Some(u) = usages.iter().find(|u| !allowed.contains(&u.as_str())) {
            return Err(format!(
                "usage {u:?} is not allowed for {signer}: allowed are {allowed:?}"
            ));
        }
        if let Some(r) = required.iter().find(|r| !usages.iter().any(|u| u == *r)) {
            return Err(format!("{signer} requires usage {r:?}"));
        }
        Ok(())
    };
    let no_sans = || -> Result<(), String> {
        if !request.dns_names.is_empty()
            || !request.ip_addresses.is_empty()
            || !request.emails.is_empty()
            || !request.uris.is_empty()
        {
            return Err(format!(
                "{signer} signs no subject alternative names (DNS, IP, email or URI)"
            ));
        }
        Ok(())
    };
    let client = ["digital signature", "key encipherment", "client auth"];
    Some(match signer {
        KUBE_APISERVER_CLIENT_KUBELET => (|| {
            if request.organizations != [NODES_GROUP] {
                return Err(format!(
                    "{signer} requires organization [\"system:nodes\"], not {:?}",
                    request.organizations
                ));
            }
            if request
                .common_name
                .strip_prefix(NODE_USER_PREFIX)
                .is_none_or(str::is_empty)
            {
                return Err(format!(
                    "{signer} requires a common name of the form \"system:node:<name>\", \
                     not {:?}",
                    request.common_name
                ));
            }
            no_sans()?;
            usages_within(&client, &["client auth"])
        })(),
        KUBE_APISERVER_CLIENT => (|| {
            if request.common_name.is_empty() {
                return Err(format!("{signer} requires a common name (the user)"));
            }
            usages_within(&client, &["client auth"])
        })(),
        _ => return None,
    })
}

/// Bytes as base64 in JSON (`spec.request`, `status.certificate`).
mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = Option::<String>::deserialize(d)?.unwrap_or_default();
        STANDARD
            .decode(text.as_bytes())
            .map_err(|e| serde::de::Error::custom(format!("illegal base64 data: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as a joining node makes it (rcgen, as `skiff node --bootstrap-token` does).
    fn node_request(cn: &str, org: &str) -> String {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, org);
        params
            .serialize_request(&key)
            .expect("csr")
            .pem()
            .expect("pem")
    }

    #[test]
    fn requests_are_read_and_their_signatures_checked() {
        let pem = node_request("system:node:n1", "system:nodes");
        let parsed = parse_request(pem.as_bytes()).expect("parses");
        assert_eq!(parsed.common_name, "system:node:n1");
        assert_eq!(parsed.organizations, ["system:nodes"]);
        assert_eq!(parsed.key_algorithm, KeyAlgorithm::EcdsaP256);
        let usages = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = usages(&["digital signature", "client auth"]);
        assert_eq!(
            signer_rules(KUBE_APISERVER_CLIENT_KUBELET, &parsed, &ok),
            Some(Ok(()))
        );
        let serving = usages(&["digital signature", "server auth"]);
        let err = signer_rules(KUBE_APISERVER_CLIENT_KUBELET, &parsed, &serving)
            .expect("known signer")
            .expect_err("server auth refused");
        assert!(err.contains("\"server auth\" is not allowed"), "{err}");
        assert_eq!(signer_rules("example.com/mine", &parsed, &ok), None);

        let alice = parse_request(node_request("alice", "devs").as_bytes()).expect("parses");
        let err = signer_rules(KUBE_APISERVER_CLIENT_KUBELET, &alice, &ok)
            .expect("known signer")
            .expect_err("not a node");
        assert!(err.contains("organization"), "{err}");
        assert_eq!(
            signer_rules(KUBE_APISERVER_CLIENT, &alice, &ok),
            Some(Ok(()))
        );

        // A flipped bit in the signed part: the signature no longer verifies.
        let block = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .expect("pem")
            .1;
        let mut der = block.contents.clone();
        let at = der.len() / 3;
        der[at] ^= 1;
        let tampered = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &der)
        );
        assert!(parse_request(tampered.as_bytes()).is_err());
        assert!(parse_request(b"hello").is_err());
        let two = format!("{pem}{pem}");
        let err = parse_request(two.as_bytes()).expect_err("two blocks");
        assert!(err.contains("exactly one"), "{err}");
    }

    #[test]
    fn the_condition_column_reads_as_kubectls() {
        let mut csr = CertificateSigningRequest::default();
        assert_eq!(csr.condition_summary(), "Pending");
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: vec![CertificateSigningRequestCondition::new(
                CertificateConditionType::Approved,
                "AutoApproved",
                "",
            )],
            certificate: b"-----BEGIN CERTIFICATE-----".to_vec(),
        });
        assert!(csr.is_approved() && !csr.is_denied());
        assert_eq!(csr.condition_summary(), "Approved,Issued");
        let json = serde_json::to_value(&csr).expect("json");
        assert_eq!(
            json["status"]["certificate"],
            "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"
        );
    }
}
