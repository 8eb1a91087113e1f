//! Authentication: the user a request comes from, as kube-apiserver finds it.
//!
//! - **Client certificate** (checked against the client CA by the TLS handshake): the CN is
//!   the user, each O a group. Tried first.
//! - **Bearer token** from `--token-auth-file`, kube-apiserver's CSV format, one token a
//!   line: `token,user,uid,"group1,group2"` (the groups column optional). A token that is
//!   not in the file is refused (401), not taken for anonymous.
//! - **Bootstrap token** (`--enable-bootstrap-token-auth`), for nodes joining:
//!   `<id>.<secret>` (6 and 16 of `[a-z0-9]`), matched against the Secret
//!   `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` (its
//!   `token-secret`, `usage-bootstrap-authentication: "true"`, an `expiration` not passed);
//!   the user is `system:bootstrap:<id>` in `system:bootstrappers` and the Secret's
//!   `auth-extra-groups`, as kube-apiserver's bootstrap token authenticator has it.
//! - **Neither:** `system:anonymous` in `system:unauthenticated`, when `--anonymous-auth`
//!   allows it; else 401.
//!
//! Every authenticated user is also in `system:authenticated`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use skiff_proto::api::Secret;
use skiff_proto::api::secret::BOOTSTRAP_TOKEN_TYPE;

use super::serviceaccount::{self, Tokens};
use super::{ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED, Unauthorized};
use skiff_store::tls::Subject;

/// The group of every bootstrap token's user.
pub const BOOTSTRAPPERS: &str = "system:bootstrappers";

/// What authentication reads of the store: bootstrap tokens' Secrets, and the objects a
/// service account token is bound to.
pub trait Credentials {
    /// The Secret `kube-system/bootstrap-token-<id>`, when there is one.
    fn bootstrap_secret(&self, id: &str) -> Option<Secret>;

    /// The uid of the object `namespace/name` of `kind` (a ServiceAccount, a Pod, a Secret),
    /// when it exists and is not being deleted.
    fn uid_of(&self, _kind: &str, _namespace: &str, _name: &str) -> Option<String> {
        None
    }
}

/// The user of a service account token's claims, while the account (and the object the
/// token is bound to) still exists as it was when the token was issued.
fn service_account_user(c: &serviceaccount::Claims, store: &dyn Credentials) -> Option<User> {
    let k = &c.kubernetes;
    let ns = k.namespace.as_str();
    let alive = |kind: &str, r: &serviceaccount::BoundRef| {
        store.uid_of(kind, ns, &r.name).as_deref() == Some(r.uid.as_str())
    };
    if !alive("ServiceAccount", &k.serviceaccount)
        || k.pod.as_ref().is_some_and(|p| !alive("Pod", p))
        || k.secret.as_ref().is_some_and(|s| !alive("Secret", s))
        || c.sub != format!("system:serviceaccount:{ns}:{}", k.serviceaccount.name)
    {
        return None;
    }
    Some(User::authenticated(
        c.sub.clone(),
        k.serviceaccount.uid.clone(),
        vec![
            serviceaccount::SERVICE_ACCOUNTS_GROUP.to_owned(),
            format!("{}:{ns}", serviceaccount::SERVICE_ACCOUNTS_GROUP),
        ],
    ))
}

/// A bearer token in the bootstrap token format: its id and its secret.
pub fn bootstrap_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// Equal bytes, compared in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The user of bootstrap token `id.secret` by its Secret, when the Secret allows it now.
fn bootstrap_user(id: &str, secret: &str, s: &Secret) -> Option<User> {
    let text = |k: &str| s.text(k).unwrap_or_default();
    if s.type_ != BOOTSTRAP_TOKEN_TYPE
        || s.metadata.deletion_timestamp.is_some()
        || text("token-id") != id
        || !same(text("token-secret").as_bytes(), secret.as_bytes())
        || text("usage-bootstrap-authentication") != "true"
    {
        return None;
    }
    let expiration = text("expiration");
    if !expiration.is_empty() {
        let at = chrono::DateTime::parse_from_rfc3339(expiration).ok()?;
        if at <= chrono::Utc::now() {
            return None;
        }
    }
    let mut groups = vec![BOOTSTRAPPERS.to_owned()];
    for g in text("auth-extra-groups").split(',').map(str::trim) {
        if g.is_empty() {
            continue;
        }
        // kube-apiserver takes only groups under system:bootstrappers: from a token.
        if !g.starts_with("system:bootstrappers:") {
            return None;
        }
        groups.push(g.to_owned());
    }
    Some(User::authenticated(
        format!("system:bootstrap:{id}"),
        String::new(),
        groups,
    ))
}

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl User {
    pub fn anonymous() -> User {
        User {
            name: ANONYMOUS.to_owned(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.to_owned()],
        }
    }

    /// A user by name and groups, as tests make them.
    #[cfg(test)]
    pub(crate) fn named(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn authenticated(name: String, uid: String, mut groups: Vec<String>) -> User {
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        User { name, uid, groups }
    }
}

/// A token file that could not be used, with the line at fault.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}, line {line}: {why}", path.display())]
    Line {
        path: PathBuf,
        line: u64,
        why: String,
    },
}

#[derive(Debug, Default)]
pub struct Authenticator {
    /// The token file's tokens; none without a token file, when a bearer token names no one
    /// and the request is taken as if it had none (as kube-apiserver does with no token
    /// authenticator).
    tokens: Option<HashMap<String, User>>,
    anonymous: bool,
    /// `--enable-bootstrap-token-auth`.
    bootstrap: bool,
    /// Service account tokens' keys, when configured.
    service_accounts: Option<std::sync::Arc<Tokens>>,
}

impl Authenticator {
    pub fn new(
        token_file: Option<&Path>,
        anonymous: bool,
        bootstrap: bool,
    ) -> Result<Self, TokenFileError> {
        let tokens = match token_file {
            Some(path) => Some({
                let text =
                    std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
                        path: path.to_owned(),
                        source,
                    })?;
                parse_tokens(&text).map_err(|(line, why)| TokenFileError::Line {
                    path: path.to_owned(),
                    line,
                    why,
                })?
            }),
            None => None,
        };
        Ok(Authenticator {
            tokens,
            anonymous,
            bootstrap,
            service_accounts: None,
        })
    }

    /// Service account tokens signed by `keys` authenticate their accounts.
    pub fn with_service_accounts(mut self, keys: Option<std::sync::Arc<Tokens>>) -> Self {
        self.service_accounts = keys;
        self
    }

    /// The user of a request: its certificate's, else its bearer token's (the token file,
    /// then bootstrap tokens from `secrets`), else anonymous when allowed.
    pub fn authenticate(
        &self,
        bearer: Option<&str>,
        cert: Option<&Subject>,
        secrets: &dyn Credentials,
    ) -> Result<User, Unauthorized> {
        if let Some(s) = cert {
            return Ok(User::authenticated(
                s.common_name.clone(),
                String::new(),
                s.organizations.clone(),
            ));
        }
        let Some(token) = bearer else {
            return if self.anonymous {
                Ok(User::anonymous())
            } else {
                Err(Unauthorized)
            };
        };
        if let Some(user) = self.tokens.as_ref().and_then(|t| t.get(token)) {
            return Ok(user.clone());
        }
        if let Some(keys) = &self.service_accounts
            && serviceaccount::looks_like_jwt(token)
        {
            return keys
                .verify(token)
                .and_then(|c| service_account_user(&c, secrets))
                .ok_or(Unauthorized);
        }
        if self.bootstrap {
            return bootstrap_token(token)
                .and_then(|(id, secret)| {
                    let s = secrets.bootstrap_secret(id)?;
                    bootstrap_user(id, secret, &s)
                })
                .ok_or(Unauthorized);
        }
        match &self.tokens {
            Some(_) => Err(Unauthorized),
            // No token authenticator at all: a token names no one, and the request is taken
            // as if it had none (as kube-apiserver does).
            None if self.anonymous => Ok(User::anonymous()),
            None => Err(Unauthorized),
        }
    }
}

/// The tokens of a token file: `token,user,uid[,"group1,group2"]` per line; blank lines and
/// lines starting with `#` are skipped. An error names the line (1-based) and what is wrong.
pub(crate) fn parse_tokens(text: &str) -> Result<HashMap<String, User>, (u64, String)> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut tokens = HashMap::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, csv::Position::line);
            (line, e.to_string())
        })?;
        let line = record.position().map_or(0, csv::Position::line);
        if record.iter().all(str::is_empty) {
            continue;
        }
        if record.len() < 3 {
            return Err((
                line,
                format!(
                    "expected token,user,uid[,\"groups\"], found {} field(s)",
                    record.len()
                ),
            ));
        }
        let (token, name, uid) = (&record[0], &record[1], &record[2]);
        if token.is_empty() || name.is_empty() {
            return Err((line, "the token and the user name may not be empty".into()));
        }
        let groups = record
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let user = User::authenticated(name.to_owned(), uid.to_owned(), groups);
        if tokens.insert(token.to_owned(), user).is_some() {
            return Err((line, "the token is on an earlier line too".into()));
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authn(text: &str, anonymous: bool) -> Authenticator {
        Authenticator {
            tokens: Some(parse_tokens(text).expect("parses")),
            anonymous,
            bootstrap: false,
            service_accounts: None,
        }
    }

    /// Uids of stored objects by `kind/namespace/name`.
    struct Stored(HashMap<String, String>);

    impl Credentials for Stored {
        fn bootstrap_secret(&self, _id: &str) -> Option<Secret> {
            None
        }

        fn uid_of(&self, kind: &str, namespace: &str, name: &str) -> Option<String> {
            self.0.get(&format!("{kind}/{namespace}/{name}")).cloned()
        }
    }

    /// A service account token names its account while the account, and the pod it is
    /// bound to, exist with the uids they had.
    #[test]
    fn service_account_tokens_live_as_long_as_what_they_name() {
        use super::serviceaccount::{
            BoundRef, DEFAULT_ISSUER, ServiceAccountConfig, TokenSpec, Tokens,
        };
        let dir = tempfile::tempdir().expect("dir");
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let path = dir.path().join("sa.key");
        std::fs::write(&path, key.serialize_pem()).expect("write");
        let keys = Tokens::load(&ServiceAccountConfig {
            issuer: DEFAULT_ISSUER.into(),
            signing_key_file: Some(path),
            key_files: Vec::new(),
            api_audiences: Vec::new(),
        })
        .expect("load")
        .expect("keys");
        let (token, _) = keys
            .issue(&TokenSpec {
                namespace: "team".into(),
                service_account: BoundRef {
                    name: "ci".into(),
                    uid: "sa-1".into(),
                },
                audiences: Vec::new(),
                expiration: std::time::Duration::from_secs(600),
                pod: Some(BoundRef {
                    name: "runner".into(),
                    uid: "pod-1".into(),
                }),
                secret: None,
            })
            .expect("issued");
        let a = Authenticator::new(None, false, false)
            .expect("no file")
            .with_service_accounts(Some(std::sync::Arc::new(keys)));
        let store = |pairs: &[(&str, &str)]| {
            Stored(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        let both = store(&[
            ("ServiceAccount/team/ci", "sa-1"),
            ("Pod/team/runner", "pod-1"),
        ]);
        let user = a
            .authenticate(Some(&token), None, &both)
            .expect("authenticated");
        assert_eq!(user.name, "system:serviceaccount:team:ci");
        assert_eq!(user.uid, "sa-1");
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:team",
                "system:authenticated"
            ]
        );
        // The pod replaced under the same name, or the account gone: refused.
        let replaced = store(&[
            ("ServiceAccount/team/ci", "sa-1"),
            ("Pod/team/runner", "pod-2"),
        ]);
        assert!(a.authenticate(Some(&token), None, &replaced).is_err());
        let no_account = store(&[("Pod/team/runner", "pod-1")]);
        assert!(a.authenticate(Some(&token), None, &no_account).is_err());
        assert!(a.authenticate(Some("eyJ.not.valid"), None, &both).is_err());
    }

    /// Bootstrap tokens' Secrets by id.
    struct Secrets(HashMap<String, Secret>);

    impl Credentials for Secrets {
        fn bootstrap_secret(&self, id: &str) -> Option<Secret> {
            self.0.get(id).cloned()
        }
    }

    /// No bootstrap tokens at all.
    struct NoSecrets;

    impl Credentials for NoSecrets {
        fn bootstrap_secret(&self, _id: &str) -> Option<Secret> {
            None
        }
    }

    const NONE: &NoSecrets = &NoSecrets;

    fn token_secret(id: &str, secret: &str, extra: &[(&str, &str)]) -> Secret {
        let mut data: HashMap<&str, &str> = [
            ("token-id", id),
            ("token-secret", secret),
            ("usage-bootstrap-authentication", "true"),
        ]
        .into_iter()
        .collect();
        data.extend(extra.iter().copied());
        Secret {
            metadata: skiff_proto::api::ObjectMeta {
                name: format!("bootstrap-token-{id}"),
                namespace: "kube-system".into(),
                ..Default::default()
            },
            type_: BOOTSTRAP_TOKEN_TYPE.into(),
            data: data
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
                .collect(),
            ..Secret::default()
        }
    }

    /// kube-apiserver's bootstrap token authenticator: the format, the Secret's secret,
    /// usage, expiration and extra groups.
    #[test]
    fn bootstrap_tokens_name_their_joiners() {
        let a = Authenticator {
            tokens: None,
            anonymous: true,
            bootstrap: true,
            service_accounts: None,
        };
        let later = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
        let earlier = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
        let secrets = Secrets(
            [
                token_secret(
                    "abcdef",
                    "0123456789abcdef",
                    &[
                        ("expiration", later.as_str()),
                        ("auth-extra-groups", "system:bootstrappers:worker"),
                    ],
                ),
                token_secret(
                    "old000",
                    "0123456789abcdef",
                    &[("expiration", earlier.as_str())],
                ),
                token_secret(
                    "nouse0",
                    "0123456789abcdef",
                    &[("usage-bootstrap-authentication", "false")],
                ),
                token_secret(
                    "greedy",
                    "0123456789abcdef",
                    &[("auth-extra-groups", "system:masters")],
                ),
            ]
            .into_iter()
            .map(|s| (s.text("token-id").unwrap_or_default().to_owned(), s))
            .collect(),
        );
        let joiner = a
            .authenticate(Some("abcdef.0123456789abcdef"), None, &secrets)
            .expect("a valid token");
        assert_eq!(joiner.name, "system:bootstrap:abcdef");
        assert_eq!(
            joiner.groups,
            [BOOTSTRAPPERS, "system:bootstrappers:worker", AUTHENTICATED]
        );
        for refused in [
            "abcdef.0123456789abcdee", // the wrong secret
            "old000.0123456789abcdef", // expired
            "nouse0.0123456789abcdef", // not for authentication
            "greedy.0123456789abcdef", // a group outside system:bootstrappers:
            "zzzzzz.0123456789abcdef", // no Secret
            "ABCDEF.0123456789abcdef", // not the format
        ] {
            assert_eq!(
                a.authenticate(Some(refused), None, &secrets),
                Err(Unauthorized),
                "{refused}"
            );
        }
        assert_eq!(a.authenticate(None, None, NONE), Ok(User::anonymous()));
        assert_eq!(
            bootstrap_token("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        assert_eq!(bootstrap_token("abcdef.0123456789abcde"), None);
    }

    #[test]
    fn token_file_as_kube_apiserver_reads_it() {
        let a = authn(
            "# comment\nt1,alice,1001,\"dev,ops\"\n\nt2, bob ,1002\n",
            true,
        );
        let alice = a.authenticate(Some("t1"), None, NONE).expect("alice");
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.uid, "1001");
        assert_eq!(alice.groups, ["dev", "ops", AUTHENTICATED]);
        assert_eq!(
            a.authenticate(Some("t2"), None, NONE).expect("bob").name,
            "bob"
        );
        assert_eq!(a.authenticate(Some("t3"), None, NONE), Err(Unauthorized));
    }

    #[test]
    fn bad_token_files_name_the_line() {
        assert_eq!(parse_tokens("t1,alice,1\nt2\n").unwrap_err().0, 2);
        assert_eq!(parse_tokens("t1,alice,1\nt1,bob,2\n").unwrap_err().0, 2);
        assert!(parse_tokens(",alice,1\n").unwrap_err().1.contains("empty"));
    }

    /// A certificate wins over a token; no credentials is anonymous only when allowed.
    #[test]
    fn certificates_then_tokens_then_anonymous() {
        let cert = Subject {
            common_name: "system:node:n1".into(),
            organizations: vec!["system:nodes".into()],
        };
        let a = authn("t1,alice,1\n", false);
        let node = a
            .authenticate(Some("wrong"), Some(&cert), NONE)
            .expect("cert");
        assert_eq!(node.name, "system:node:n1");
        assert_eq!(node.groups, ["system:nodes", AUTHENTICATED]);
        assert_eq!(a.authenticate(None, None, NONE), Err(Unauthorized));
        let with_file = authn("", true);
        assert_eq!(
            with_file.authenticate(None, None, NONE),
            Ok(User::anonymous())
        );
        assert_eq!(
            with_file.authenticate(Some("x"), None, NONE),
            Err(Unauthorized)
        );
        let no_file = Authenticator::new(None, true, false).expect("no file");
        assert_eq!(
            no_file.authenticate(Some("x"), None, NONE),
            Ok(User::anonymous())
        );
    }
}
