//! Certificate requests: the approver, the signer and the cleaner, as
//! kube-controller-manager's `csrapproving`, `csrsigning` and `csrcleaner` controllers.
//!
//! ```text
//!  CSR created ──► approver: a node's client certificate (signer ...-client-kubelet,
//!                  CN system:node:<n>, O system:nodes) whose requester may
//!                  `create certificatesigningrequests/nodeclient` (a bootstrap token)
//!                  or `/selfnodeclient` (the node itself, renewing) ──► Approved
//!  Approved ──► signer (with --cluster-signing-cert-file/--cluster-signing-key-file):
//!               the signer's rules hold ──► status.certificate, else Failed
//!  any CSR ──► cleaner: deleted an hour after it was decided, a day after it was made
//! ```
//!
//! Anything the approver does not approve waits for a person (`kubectl certificate approve`).
//! The approver asks the API, with a SubjectAccessReview, whether the requester may have its
//! request approved, so who may join is RBAC's to say, as in Kubernetes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use skiff_proto::api::certificates::{
    CertificateSigningRequest, CertificateSigningRequestCondition, KUBE_APISERVER_CLIENT,
    KUBE_APISERVER_CLIENT_KUBELET, KeyAlgorithm, ParsedRequest, parse_request, signer_rules,
};
use skiff_proto::api::rbac::{AccessReview, AccessReviewSpec, ResourceAttributes};
use skiff_proto::api::{CertificateConditionType, Kind, Object, Time};
use skiff_proto::client::{ClientError, Code, Event};

use crate::core::{Context, Controller, Requeue, gone_is_none};
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "certificates";

/// How long a decided (issued, denied or failed) request is kept.
const DECIDED_TTL: Duration = Duration::from_secs(3600);
/// How long an undecided request is kept.
const PENDING_TTL: Duration = Duration::from_secs(24 * 3600);
/// How far back an issued certificate's validity starts, for clocks that lag.
const BACKDATE: Duration = Duration::from_secs(300);

/// The CA that signs approved requests (kube-controller-manager's
/// `--cluster-signing-cert-file`, `--cluster-signing-key-file`, `--cluster-signing-duration`).
#[derive(Debug, Clone)]
pub struct SigningConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The longest certificate it issues; a request may ask for less.
    pub duration: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    Parse { path: PathBuf, why: String },
}

/// The signing CA, read once at start.
pub struct Signer {
    issuer: rcgen::Certificate,
    key: rcgen::KeyPair,
    /// The CA's own end of validity: nothing it signs outlives it.
    not_after: time::OffsetDateTime,
    duration: Duration,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("issuer", &self.issuer.params().distinguished_name)
            .field("not_after", &self.not_after)
            .field("duration", &self.duration)
            .finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<String, SignerError> {
    std::fs::read_to_string(path).map_err(|source| SignerError::Read {
        path: path.to_owned(),
        source,
    })
}

impl Signer {
    pub fn load(config: &SigningConfig) -> Result<Signer, SignerError> {
        let parse = |path: &Path, why: String| SignerError::Parse {
            path: path.to_owned(),
            why,
        };
        let key = rcgen::KeyPair::from_pem(&read(&config.key)?)
            .map_err(|e| parse(&config.key, format!("not a private key: {e}")))?;
        let pem = read(&config.cert)?;
        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .map_err(|e| parse(&config.cert, format!("not PEM: {e}")))?;
        let (_, ca) = x509_parser::parse_x509_certificate(&block.contents)
            .map_err(|e| parse(&config.cert, format!("not a certificate: {e}")))?;
        if ca.public_key().raw != key.public_key_der().as_slice() {
            return Err(parse(
                &config.key,
                format!("is not the key of {}", config.cert.display()),
            ));
        }
        // The issuer of what is signed is the CA's subject, byte for byte as the CA has it,
        // so that verifiers chain the two; the authority key identifier is the CA's own.
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name =
            issuer_name(ca.subject()).map_err(|w| parse(&config.cert, w))?;
        let ski = ca
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(k) => {
                    Some(k.0.to_vec())
                }
                _ => None,
            });
        if let Some(ski) = ski {
            params.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(ski);
        }
        let not_after =
            time::OffsetDateTime::from_unix_timestamp(ca.validity().not_after.timestamp())
                .map_err(|e| parse(&config.cert, format!("its validity: {e}")))?;
        let issuer = params
            .self_signed(&key)
            .map_err(|e| parse(&config.key, format!("cannot sign with it: {e}")))?;
        Ok(Signer {
            issuer,
            key,
            not_after,
            duration: config.duration,
        })
    }

    /// The certificate (PEM) for `request`, valid from a little before now for the shorter
    /// of `asked` and the signer's duration, and never past the CA's own end.
    pub fn sign(
        &self,
        request: &ParsedRequest,
        usages: &[String],
        asked: Option<Duration>,
    ) -> Result<String, String> {
        let now = time::OffsetDateTime::now_utc();
        let lifetime = asked.map_or(self.duration, |a| a.min(self.duration));
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if !request.common_name.is_empty() {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, request.common_name.as_str());
        }
        for o in &request.organizations {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, o.as_str());
        }
        params.not_before = now - BACKDATE;
        params.not_after = (now + lifetime).min(self.not_after);
        let mut serial: [u8; 16] = rand::random();
        serial[0] &= 0x7f;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
        params.use_authority_key_identifier_extension = true;
        for u in usages {
            match u.as_str() {
                "digital signature" => params
                    .key_usages
                    .push(rcgen::KeyUsagePurpose::DigitalSignature),
                "key encipherment" => params
                    .key_usages
                    .push(rcgen::KeyUsagePurpose::KeyEncipherment),
                "client auth" => params
                    .extended_key_usages
                    .push(rcgen::ExtendedKeyUsagePurpose::ClientAuth),
                "server auth" => params
                    .extended_key_usages
                    .push(rcgen::ExtendedKeyUsagePurpose::ServerAuth),
                other => return Err(format!("usage {other:?} is not one this signer issues")),
            }
        }
        let key = RequestKey {
            algorithm: match request.key_algorithm {
                KeyAlgorithm::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
                KeyAlgorithm::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
                KeyAlgorithm::Ed25519 => &rcgen::PKCS_ED25519,
                KeyAlgorithm::Rsa => &rcgen::PKCS_RSA_SHA256,
            },
            bits: request.public_key.clone(),
        };
        let cert = params
            .signed_by(&key, &self.issuer, &self.key)
            .map_err(|e| format!("signing: {e}"))?;
        Ok(cert.pem())
    }
}

/// A request's public key, as rcgen writes it into the certificate.
struct RequestKey {
    algorithm: &'static rcgen::SignatureAlgorithm,
    bits: Vec<u8>,
}

impl rcgen::PublicKeyData for RequestKey {
    fn der_bytes(&self) -> &[u8] {
        &self.bits
    }

    fn algorithm(&self) -> &rcgen::SignatureAlgorithm {
        self.algorithm
    }
}

/// The CA's subject as rcgen writes names, each value in the string type the CA used.
fn issuer_name(name: &x509_parser::x509::X509Name<'_>) -> Result<rcgen::DistinguishedName, String> {
    use x509_parser::der_parser::asn1_rs::Tag;
    let mut dn = rcgen::DistinguishedName::new();
    for rdn in name.iter() {
        for atv in rdn.iter() {
            let oid: Vec<u64> = atv
                .attr_type()
                .iter()
                .ok_or("an attribute of the subject has an OID too large to read")?
                .collect();
            let text = atv
                .as_str()
                .map_err(|e| format!("a subject attribute is not text: {e}"))?
                .to_owned();
            let value = match atv.attr_value().header.tag() {
                Tag::PrintableString => rcgen::DnValue::PrintableString(
                    text.try_into().map_err(|e| format!("subject: {e}"))?,
                ),
                Tag::Ia5String => {
                    rcgen::DnValue::Ia5String(text.try_into().map_err(|e| format!("subject: {e}"))?)
                }
                _ => rcgen::DnValue::Utf8String(text),
            };
            dn.push(rcgen::DnType::from_oid(&oid), value);
        }
    }
    Ok(dn)
}

/// The approver, the signer (when there is a signing CA) and the cleaner.
#[derive(Debug)]
pub struct Certificates {
    ctx: Arc<Context>,
    queue: WorkQueue,
    signer: Option<Signer>,
}

impl Certificates {
    pub fn new(ctx: Arc<Context>, signer: Option<Signer>) -> Self {
        Certificates {
            ctx,
            queue: WorkQueue::new(),
            signer,
        }
    }

    pub fn on_csr(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) = event {
            self.queue.add(o.metadata().name.clone());
        }
    }

    /// Whether the requester may have this node client certificate approved: the
    /// SubjectAccessReview kube-controller-manager's approver asks.
    async fn may_be_approved(
        &self,
        csr: &CertificateSigningRequest,
        own: bool,
    ) -> Result<bool, ClientError> {
        let review = AccessReview {
            spec: AccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: "create".into(),
                    group: Kind::CertificateSigningRequest.group().into(),
                    version: "v1".into(),
                    resource: Kind::CertificateSigningRequest.plural().into(),
                    subresource: if own { "selfnodeclient" } else { "nodeclient" }.into(),
                    ..ResourceAttributes::default()
                }),
                user: csr.spec.username.clone(),
                groups: csr.spec.groups.clone(),
                uid: csr.spec.uid.clone(),
                ..AccessReviewSpec::default()
            },
            ..AccessReview::default()
        };
        match self
            .ctx
            .client
            .create(&Object::SubjectAccessReview(review))
            .await?
        {
            Object::SubjectAccessReview(r) => Ok(r.status.is_some_and(|s| s.allowed)),
            _ => Ok(false),
        }
    }

    /// Approves a node's client certificate when its requester may have one.
    async fn approve(&self, csr: &CertificateSigningRequest) -> Result<(), ClientError> {
        if csr.spec.signer_name != KUBE_APISERVER_CLIENT_KUBELET {
            return Ok(());
        }
        let Ok(request) = parse_request(&csr.spec.request) else {
            return Ok(());
        };
        if !matches!(
            signer_rules(KUBE_APISERVER_CLIENT_KUBELET, &request, &csr.spec.usages),
            Some(Ok(()))
        ) {
            // Not a node client certificate as Kubernetes shapes one: a person decides.
            return Ok(());
        }
        let own = csr.spec.username == request.common_name;
        if !self.may_be_approved(csr, own).await? {
            tracing::info!(
                csr = %csr.metadata.name,
                requester = %csr.spec.username,
                "not approving a node client certificate: its requester may not have one"
            );
            return Ok(());
        }
        let mut approved = csr.clone();
        approved
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .push(CertificateSigningRequestCondition::new(
                CertificateConditionType::Approved,
                "AutoApproved",
                if own {
                    "Auto approving self kubelet client certificate after SubjectAccessReview."
                } else {
                    "Auto approving kubelet client certificate after SubjectAccessReview."
                },
            ));
        gone_is_none(
            self.ctx
                .client
                .update_approval(&Object::CertificateSigningRequest(approved))
                .await,
        )?;
        tracing::info!(csr = %csr.metadata.name, node = %request.common_name, "approved a node client certificate");
        Ok(())
    }

    /// Signs an approved request for one of the signers this CA serves, or marks it Failed
    /// when it breaks that signer's rules.
    async fn sign(
        &self,
        signer: &Signer,
        csr: &CertificateSigningRequest,
    ) -> Result<(), ClientError> {
        let name = csr.spec.signer_name.as_str();
        if ![KUBE_APISERVER_CLIENT_KUBELET, KUBE_APISERVER_CLIENT].contains(&name) {
            return Ok(());
        }
        let outcome = parse_request(&csr.spec.request).and_then(|request| {
            signer_rules(name, &request, &csr.spec.usages).unwrap_or(Ok(()))?;
            let asked = csr
                .spec
                .expiration_seconds
                .map(|s| Duration::from_secs(s.unsigned_abs().into()));
            signer.sign(&request, &csr.spec.usages, asked)
        });
        let mut next = csr.clone();
        let status = next.status.get_or_insert_with(Default::default);
        match &outcome {
            Ok(pem) => status.certificate = pem.clone().into_bytes(),
            Err(why) => status
                .conditions
                .push(CertificateSigningRequestCondition::new(
                    CertificateConditionType::Failed,
                    "SignerValidationFailure",
                    why,
                )),
        }
        gone_is_none(
            self.ctx
                .client
                .update_status(&Object::CertificateSigningRequest(next))
                .await,
        )?;
        match outcome {
            Ok(_) => {
                tracing::info!(csr = %csr.metadata.name, signer = name, "issued a certificate")
            }
            Err(why) => {
                tracing::warn!(csr = %csr.metadata.name, signer = name, %why, "refused to sign")
            }
        }
        Ok(())
    }
}

/// When a request goes: an hour after it was decided, a day after it was made undecided.
fn expires(csr: &CertificateSigningRequest) -> Option<i64> {
    let created = csr.metadata.creation_timestamp?.unix();
    let decided = csr.is_denied() || csr.is_failed() || csr.certificate().is_some();
    if decided {
        let at = csr
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .filter_map(|c| c.last_update_time.map(|t| t.unix()))
            .max()
            .unwrap_or(created);
        Some(at + DECIDED_TTL.as_secs() as i64)
    } else {
        Some(created + PENDING_TTL.as_secs() as i64)
    }
}

impl Controller for Certificates {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, name: &str) -> Result<Requeue, ClientError> {
        let Some(object) = self.ctx.csrs.get("", name) else {
            return Ok(None);
        };
        let Object::CertificateSigningRequest(csr) = &*object else {
            return Ok(None);
        };
        let now = Time::now().unix();
        if let Some(at) = expires(csr)
            && at <= now
        {
            let r = self
                .ctx
                .client
                .delete(Kind::CertificateSigningRequest, "", name, 0, None)
                .await;
            return match r {
                Err(e) if e.code() != Some(Code::NotFound) => Err(e),
                _ => Ok(None),
            };
        }
        if !csr.is_approved() && !csr.is_denied() {
            self.approve(csr).await?;
        } else if csr.is_approved()
            && !csr.is_failed()
            && csr.certificate().is_none()
            && let Some(signer) = &self.signer
        {
            self.sign(signer, csr).await?;
        }
        Ok(expires(csr).map(|at| Duration::from_secs((at - now).max(1).unsigned_abs())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(dir: &Path) -> SigningConfig {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test CA");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let cert = params.self_signed(&key).expect("ca");
        std::fs::write(dir.join("ca.pem"), cert.pem()).expect("write");
        std::fs::write(dir.join("ca-key.pem"), key.serialize_pem()).expect("write");
        SigningConfig {
            cert: dir.join("ca.pem"),
            key: dir.join("ca-key.pem"),
            duration: Duration::from_secs(3600),
        }
    }

    /// What the signer issues chains to the CA (rustls verifies it as a client
    /// certificate), names the requester's subject and key, and lives as long as asked.
    #[test]
    fn issued_certificates_chain_to_the_signing_ca() {
        let dir = std::env::temp_dir().join(format!("skiff-signer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let config = ca(&dir);
        let signer = Signer::load(&config).expect("signer");

        let node_key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n7");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let csr = params
            .serialize_request(&node_key)
            .expect("csr")
            .pem()
            .expect("pem");
        let request = parse_request(csr.as_bytes()).expect("request");
        let usages = vec!["digital signature".to_string(), "client auth".to_string()];
        let pem = signer
            .sign(&request, &usages, Some(Duration::from_secs(1200)))
            .expect("signed");

        let block = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .expect("pem")
            .1;
        let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).expect("cert");
        let subject = skiff_proto::tls::subject(&block.contents).expect("subject");
        assert_eq!(subject.common_name, "system:node:n7");
        assert_eq!(subject.organizations, ["system:nodes"]);
        assert_eq!(cert.public_key().raw, node_key.public_key_der().as_slice());
        let lifetime =
            cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        assert_eq!(lifetime, 1200 + BACKDATE.as_secs() as i64);

        let roots = {
            let ca_pem = std::fs::read(&config.cert).expect("ca");
            let ca_der = x509_parser::pem::parse_x509_pem(&ca_pem)
                .expect("pem")
                .1
                .contents;
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca_der.into()).expect("root");
            Arc::new(roots)
        };
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots,
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .expect("verifier");
        verifier
            .verify_client_cert(
                &block.contents.clone().into(),
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .expect("the issued certificate chains to the CA");

        // Another key than the CA's is refused at load.
        let other = rcgen::KeyPair::generate().expect("key");
        std::fs::write(&config.key, other.serialize_pem()).expect("write");
        let err = Signer::load(&config).expect_err("mismatched key");
        assert!(err.to_string().contains("is not the key of"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
