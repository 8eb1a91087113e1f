//! Service account tokens, as kube-apiserver issues and checks them: JWTs (ES256 or RS256)
//! signed with `--service-account-signing-key-file`, checked against
//! `--service-account-key-file` (public keys, or private ones whose public half is used),
//! issued by `--service-account-issuer` for audiences (the API's own, `--api-audiences`,
//! unless the TokenRequest names others).
//!
//! A token names its service account by name and uid, and, when bound, the Pod or Secret it
//! was issued for: it authenticates only while each still exists with that uid, and until it
//! expires. Its user is `system:serviceaccount:<namespace>:<name>`, in the groups
//! `system:serviceaccounts` and `system:serviceaccounts:<namespace>`.
//!
//! ```text
//! header  {"alg":"ES256","kid":"<sha256 of the public key>"}
//! claims  {"iss","sub":"system:serviceaccount:ns:name","aud":[…],"iat","nbf","exp","jti",
//!          "kubernetes.io":{"namespace","serviceaccount":{"name","uid"},"pod":{"name","uid"}}}
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// The issuer of tokens when none is configured (kube-apiserver's in-cluster name).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// How long a requested token lives when the request does not say (TokenRequest's default).
pub const DEFAULT_EXPIRATION: Duration = Duration::from_secs(3600);
/// The shortest lifetime a TokenRequest may ask for.
pub const MIN_EXPIRATION: Duration = Duration::from_secs(600);
/// The group of every service account's user.
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";

/// `--service-account-*` and `--api-audiences`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountConfig {
    pub issuer: String,
    /// The key new tokens are signed with; none: this server issues no tokens.
    pub signing_key_file: Option<PathBuf>,
    /// The keys tokens are checked against (the signing key's public half when none).
    pub key_files: Vec<PathBuf>,
    /// The audiences the API itself accepts (the issuer when none).
    pub api_audiences: Vec<String>,
}

/// A key file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    Key { path: PathBuf, why: String },
}

/// The bound object of a token: a Pod or a Secret it lives no longer than.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundRef {
    pub name: String,
    pub uid: String,
}

/// The `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaim {
    pub namespace: String,
    pub serviceaccount: BoundRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<BoundRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<BoundRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    pub exp: u64,
    pub iat: u64,
    pub nbf: u64,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaim,
}

/// What a token is asked for (a TokenRequest's spec, resolved).
#[derive(Debug, Clone)]
pub struct TokenSpec {
    pub namespace: String,
    pub service_account: BoundRef,
    /// Empty: the API's own audiences.
    pub audiences: Vec<String>,
    pub expiration: Duration,
    pub pod: Option<BoundRef>,
    pub secret: Option<BoundRef>,
}

/// The keys and settings of service account tokens.
pub struct Tokens {
    issuer: String,
    api_audiences: Vec<String>,
    signer: Option<(EncodingKey, Algorithm, String)>,
    verifiers: Vec<(DecodingKey, Algorithm)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("issuer", &self.issuer)
            .field("api_audiences", &self.api_audiences)
            .field("signs", &self.signer.is_some())
            .field("verifiers", &self.verifiers.len())
            .finish()
    }
}

/// A key read from a PEM file: its algorithm, the public key's DER (SPKI) and, for a
/// private key, the PEM itself.
struct LoadedKey {
    algorithm: Algorithm,
    public_der: Vec<u8>,
    private_pem: Option<String>,
}

fn load(path: &Path) -> Result<LoadedKey, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.to_owned(),
        source,
    })?;
    let bad = |why: String| KeyError::Key {
        path: path.to_owned(),
        why,
    };
    if text.contains("PRIVATE KEY") {
        let pair = rcgen::KeyPair::from_pem(&text).map_err(|e| bad(e.to_string()))?;
        let algorithm = if pair.is_compatible(&rcgen::PKCS_ECDSA_P256_SHA256) {
            Algorithm::ES256
        } else if pair.is_compatible(&rcgen::PKCS_RSA_SHA256) {
            Algorithm::RS256
        } else {
            return Err(bad(
                "the key is neither ECDSA P-256 nor RSA: service account tokens are signed ES256 or RS256".into(),
            ));
        };
        return Ok(LoadedKey {
            algorithm,
            public_der: pair.public_key_der(),
            private_pem: Some(pair.serialize_pem()),
        });
    }
    let der = pem_body(&text, "PUBLIC KEY").ok_or_else(|| {
        bad("no PEM private or public key (PRIVATE KEY / PUBLIC KEY blocks) in the file".into())
    })?;
    // The SPKI's algorithm identifier: ecPublicKey (1.2.840.10045.2.1) or rsaEncryption.
    let ec_oid = [0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    let algorithm = if der.windows(ec_oid.len()).any(|w| w == ec_oid) {
        Algorithm::ES256
    } else {
        Algorithm::RS256
    };
    Ok(LoadedKey {
        algorithm,
        public_der: der,
        private_pem: None,
    })
}

/// The DER inside the first PEM block labelled `label`.
fn pem_body(text: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    let b64: String = text[start..stop].split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// A key's id, as kube-apiserver derives it: the SHA-256 of the public key's DER, base64url.
fn key_id(public_der: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(public_der))
}

/// The verifying key of a public key's DER (SPKI).
fn decoding_key(key: &LoadedKey) -> Result<DecodingKey, String> {
    match key.algorithm {
        // jsonwebtoken takes an EC public key as the raw point: the SPKI's last 65 bytes.
        Algorithm::ES256 => {
            let point = key
                .public_der
                .get(key.public_der.len().saturating_sub(65)..)
                .filter(|p| p.len() == 65 && p[0] == 0x04)
                .ok_or("not an uncompressed P-256 public key")?;
            Ok(DecodingKey::from_ec_der(point))
        }
        _ => {
            let pem = format!(
                "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
                base64::engine::general_purpose::STANDARD.encode(&key.public_der)
            );
            DecodingKey::from_rsa_pem(pem.as_bytes()).map_err(|e| e.to_string())
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Tokens {
    /// Reads the keys; `None` when no key is configured (no service account tokens).
    pub fn load(config: &ServiceAccountConfig) -> Result<Option<Tokens>, KeyError> {
        let signing = config.signing_key_file.as_deref().map(load).transpose()?;
        let mut verifying = Vec::new();
        for f in &config.key_files {
            verifying.push((f.clone(), load(f)?));
        }
        if signing.is_none() && verifying.is_empty() {
            return Ok(None);
        }
        let mut verifiers = Vec::new();
        let mut signer = None;
        if let (Some(key), Some(path)) = (&signing, &config.signing_key_file) {
            let pem = key.private_pem.as_deref().ok_or_else(|| KeyError::Key {
                path: path.clone(),
                why: "a public key cannot sign: give the private key".into(),
            })?;
            let encoding = match key.algorithm {
                Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()),
                _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
            }
            .map_err(|e| KeyError::Key {
                path: path.clone(),
                why: e.to_string(),
            })?;
            signer = Some((encoding, key.algorithm, key_id(&key.public_der)));
            if config.key_files.is_empty() {
                let d = decoding_key(key).map_err(|why| KeyError::Key {
                    path: path.clone(),
                    why,
                })?;
                verifiers.push((d, key.algorithm));
            }
        }
        for (path, key) in &verifying {
            let d = decoding_key(key).map_err(|why| KeyError::Key {
                path: path.clone(),
                why,
            })?;
            verifiers.push((d, key.algorithm));
        }
        let api_audiences = if config.api_audiences.is_empty() {
            vec![config.issuer.clone()]
        } else {
            config.api_audiences.clone()
        };
        Ok(Some(Tokens {
            issuer: config.issuer.clone(),
            api_audiences,
            signer,
            verifiers,
        }))
    }

    /// The audiences the API accepts, which a token is for unless its request names others.
    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    /// Whether this server issues tokens (it has a signing key).
    pub fn issues(&self) -> bool {
        self.signer.is_some()
    }

    /// A signed token for `spec`, and when it expires (Unix seconds); `None` without a
    /// signing key.
    pub fn issue(&self, spec: &TokenSpec) -> Option<(String, u64)> {
        let (key, algorithm, kid) = self.signer.as_ref()?;
        let iat = now();
        let exp = iat + spec.expiration.as_secs();
        let audiences = if spec.audiences.is_empty() {
            self.api_audiences.clone()
        } else {
            spec.audiences.clone()
        };
        let claims = Claims {
            iss: self.issuer.clone(),
            sub: format!(
                "system:serviceaccount:{}:{}",
                spec.namespace, spec.service_account.name
            ),
            aud: audiences,
            exp,
            iat,
            nbf: iat,
            jti: uuid_like(),
            kubernetes: KubernetesClaim {
                namespace: spec.namespace.clone(),
                serviceaccount: spec.service_account.clone(),
                pod: spec.pod.clone(),
                secret: spec.secret.clone(),
            },
        };
        let mut header = Header::new(*algorithm);
        header.kid = Some(kid.clone());
        let token = jsonwebtoken::encode(&header, &claims, key).ok()?;
        Some((token, exp))
    }

    /// The claims of `token` when a key here signed it, it is for this issuer and one of the
    /// API's audiences, and it has not expired.
    pub fn verify(&self, token: &str) -> Option<Claims> {
        for (key, algorithm) in &self.verifiers {
            let mut v = Validation::new(*algorithm);
            v.set_issuer(&[&self.issuer]);
            v.set_audience(&self.api_audiences);
            v.validate_nbf = true;
            v.leeway = 0;
            if let Ok(data) = jsonwebtoken::decode::<Claims>(token, key, &v) {
                return Some(data.claims);
            }
        }
        None
    }
}

/// Whether a bearer token has the shape of a JWT (three base64url parts).
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3 && token.starts_with("eyJ")
}

/// A random token id.
fn uuid_like() -> String {
    let b: [u8; 16] = rand::random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> ServiceAccountConfig {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let path = dir.join("sa.key");
        std::fs::write(&path, key.serialize_pem()).expect("write");
        ServiceAccountConfig {
            issuer: DEFAULT_ISSUER.into(),
            signing_key_file: Some(path),
            key_files: Vec::new(),
            api_audiences: Vec::new(),
        }
    }

    fn spec(audiences: &[&str], secs: u64) -> TokenSpec {
        TokenSpec {
            namespace: "team".into(),
            service_account: BoundRef {
                name: "ci".into(),
                uid: "u1".into(),
            },
            audiences: audiences.iter().map(|a| (*a).to_owned()).collect(),
            expiration: Duration::from_secs(secs),
            pod: Some(BoundRef {
                name: "p".into(),
                uid: "u2".into(),
            }),
            secret: None,
        }
    }

    #[test]
    fn issued_tokens_verify_for_the_api_and_name_their_account() {
        let dir = tempfile::tempdir().expect("dir");
        let tokens = Tokens::load(&config(dir.path()))
            .expect("load")
            .expect("keys");
        let (token, exp) = tokens.issue(&spec(&[], 3600)).expect("issued");
        assert!(looks_like_jwt(&token), "{token}");
        assert!(exp > now());
        let claims = tokens.verify(&token).expect("verifies");
        assert_eq!(claims.sub, "system:serviceaccount:team:ci");
        assert_eq!(claims.aud, [DEFAULT_ISSUER]);
        assert_eq!(claims.kubernetes.serviceaccount.uid, "u1");
        assert_eq!(claims.kubernetes.pod.map(|p| p.uid), Some("u2".into()));

        // Another audience's token is not the API's.
        let (other, _) = tokens.issue(&spec(&["vault"], 3600)).expect("issued");
        assert!(tokens.verify(&other).is_none());
        // A token of another key is refused; so is a tampered one.
        let stranger = Tokens::load(&config(dir.path()))
            .expect("load")
            .expect("keys");
        assert!(stranger.verify(&token).is_none());
        let mut tampered = token.clone();
        tampered.pop();
        assert!(tokens.verify(&tampered).is_none());
    }

    #[test]
    fn a_public_key_verifies_but_cannot_sign() {
        let dir = tempfile::tempdir().expect("dir");
        let c = config(dir.path());
        let signer = Tokens::load(&c).expect("load").expect("keys");
        let (token, _) = signer.issue(&spec(&[], 600)).expect("issued");
        let pair = rcgen::KeyPair::from_pem(
            &std::fs::read_to_string(c.signing_key_file.as_ref().expect("file")).expect("read"),
        )
        .expect("pem");
        let public = dir.path().join("sa.pub");
        std::fs::write(&public, pair.public_key_pem()).expect("write");
        let verifier = Tokens::load(&ServiceAccountConfig {
            signing_key_file: None,
            key_files: vec![public.clone()],
            ..c.clone()
        })
        .expect("load")
        .expect("keys");
        assert!(!verifier.issues());
        assert!(verifier.verify(&token).is_some());
        let e = Tokens::load(&ServiceAccountConfig {
            signing_key_file: Some(public),
            ..c
        })
        .expect_err("a public key cannot sign");
        assert!(e.to_string().contains("cannot sign"), "{e}");
    }
}
