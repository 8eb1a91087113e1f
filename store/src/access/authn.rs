//! Authentication: the user a request comes from, as kube-apiserver finds it.
//!
//! - **Client certificate** (checked against the client CA by the TLS handshake): the CN is
//!   the user, each O a group. Tried first.
//! - **Bearer token** from `--token-auth-file`, kube-apiserver's CSV format, one token a
//!   line: `token,user,uid,"group1,group2"` (the groups column optional). A token that is
//!   not in the file is refused (401), not taken for anonymous.
//! - **Neither:** `system:anonymous` in `system:unauthenticated`, when `--anonymous-auth`
//!   allows it; else 401.
//!
//! Every authenticated user is also in `system:authenticated`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED, Unauthorized};
use crate::tls::Subject;

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
}

impl Authenticator {
    pub fn new(token_file: Option<&Path>, anonymous: bool) -> Result<Self, TokenFileError> {
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
        Ok(Authenticator { tokens, anonymous })
    }

    pub fn authenticate(
        &self,
        bearer: Option<&str>,
        cert: Option<&Subject>,
    ) -> Result<User, Unauthorized> {
        if let Some(s) = cert {
            return Ok(User::authenticated(
                s.common_name.clone(),
                String::new(),
                s.organizations.clone(),
            ));
        }
        match (bearer, &self.tokens) {
            (Some(token), Some(tokens)) => tokens.get(token).cloned().ok_or(Unauthorized),
            _ if self.anonymous => Ok(User::anonymous()),
            _ => Err(Unauthorized),
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
        }
    }

    #[test]
    fn token_file_as_kube_apiserver_reads_it() {
        let a = authn(
            "# comment\nt1,alice,1001,\"dev,ops\"\n\nt2, bob ,1002\n",
            true,
        );
        let alice = a.authenticate(Some("t1"), None).expect("alice");
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.uid, "1001");
        assert_eq!(alice.groups, ["dev", "ops", AUTHENTICATED]);
        assert_eq!(a.authenticate(Some("t2"), None).expect("bob").name, "bob");
        assert_eq!(a.authenticate(Some("t3"), None), Err(Unauthorized));
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
        let node = a.authenticate(Some("wrong"), Some(&cert)).expect("cert");
        assert_eq!(node.name, "system:node:n1");
        assert_eq!(node.groups, ["system:nodes", AUTHENTICATED]);
        assert_eq!(a.authenticate(None, None), Err(Unauthorized));
        let with_file = authn("", true);
        assert_eq!(with_file.authenticate(None, None), Ok(User::anonymous()));
        assert_eq!(with_file.authenticate(Some("x"), None), Err(Unauthorized));
        let no_file = Authenticator::new(None, true).expect("no file");
        assert_eq!(no_file.authenticate(Some("x"), None), Ok(User::anonymous()));
    }
}
