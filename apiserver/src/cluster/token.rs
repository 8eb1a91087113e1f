//! Service account tokens: a ServiceAccount's `token` subresource, one implementation behind
//! both faces (the REST face's TokenRequest, the gRPC `CreateToken` node agents ask for the
//! tokens they project into pods), as kube-apiserver's TokenRequest storage answers it.
//!
//! ```text
//!  TokenRequest ─► lifetime in [10 min, 2^32 s] ─► the account exists (its uid)
//!     ─► a node's request: bound to a pod of that node (NodeRestriction)
//!     ─► the bound Pod or Secret exists, with the uid asked (and a pod runs as the account)
//!     ─► signed (this server's key), with the account's and bound object's uids in it
//! ```
//!
//! Only a server with a signing key issues tokens: a request of any other fails with
//! [`ClusterError::NoTokenIssuer`]. The bound object keeps the token alive no longer than
//! itself: the authenticator checks its uid is still stored.

use std::sync::Arc;
use std::time::Duration;

use skiff_proto::api::{Kind, Object};

use super::{ClusterApi, ClusterError, Result, Stored, not_found};
use crate::access::authn::Credentials;
use crate::access::node::{TOKEN_NOT_BOUND, TOKEN_OTHER_NODE, TOKEN_WITHOUT_UID, node_of};
use crate::access::serviceaccount::{
    BoundRef, DEFAULT_EXPIRATION, MIN_EXPIRATION, TokenSpec, Tokens,
};

/// The longest lifetime a token may be asked for (kube-apiserver's `math.MaxUint32` s).
pub const MAX_EXPIRATION_SECONDS: i64 = u32::MAX as i64;

/// The ServiceAccount kind (declared, not typed).
pub fn service_account_kind() -> Kind {
    Kind::from_name("ServiceAccount").expect("invariant: ServiceAccount is declared")
}

/// The kinds a token may be bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundKind {
    Pod,
    Secret,
}

impl BoundKind {
    pub fn kind(self) -> Kind {
        match self {
            BoundKind::Pod => Kind::Pod,
            BoundKind::Secret => Kind::Secret,
        }
    }
}

/// The object a token is bound to, as the request names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundObject {
    pub kind: BoundKind,
    pub name: String,
    /// Empty: whichever object has the name (a node must give it).
    pub uid: String,
}

/// A token asked for, as either face received it (its namespace and account from the path
/// or the request; the rest a TokenRequest's spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    pub namespace: String,
    pub service_account: String,
    /// Empty: the API's own audiences.
    pub audiences: Vec<String>,
    /// `None`: an hour.
    pub expiration_seconds: Option<i64>,
    pub bound: Option<BoundObject>,
}

/// A token issued, and what the request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub token: String,
    /// When it expires, in seconds since the Unix epoch.
    pub expires_unix: i64,
    /// The audiences it is for (the API's own when the request named none).
    pub audiences: Vec<String>,
    pub expiration: Duration,
    /// The bound object's uid, as stored.
    pub bound_uid: Option<String>,
}

/// The lifetime `seconds` asks for (an hour when none), or why it may not be asked for.
pub fn expiration(seconds: Option<i64>) -> Result<Duration> {
    let Some(secs) = seconds else {
        return Ok(DEFAULT_EXPIRATION);
    };
    let invalid = |why: &str| ClusterError::InvalidTokenRequest {
        field: "spec.expirationSeconds",
        why: format!("Invalid value: {secs}: {why}"),
    };
    if secs < 0 || (secs as u64) < MIN_EXPIRATION.as_secs() {
        return Err(invalid("may not specify a duration less than 10 minutes"));
    }
    if secs > MAX_EXPIRATION_SECONDS {
        return Err(invalid(
            "may not specify a duration longer than 2^32 seconds",
        ));
    }
    Ok(Duration::from_secs(secs as u64))
}

impl ClusterApi {
    /// This server's token keys, when it signs tokens.
    pub fn token_issuer(&self) -> Result<&Arc<Tokens>> {
        self.access
            .service_account_tokens
            .as_ref()
            .filter(|k| k.issues())
            .ok_or(ClusterError::NoTokenIssuer)
    }

    /// A token for `request` (checked against what is stored after a barrier), for the
    /// requester of this handle (a node's is held to NodeRestriction's rules).
    pub async fn issue_token(&self, request: &TokenRequest) -> Result<IssuedToken> {
        let keys = self.token_issuer()?;
        self.barrier(false).await?;
        let expiration = expiration(request.expiration_seconds)?;
        let ns = request.namespace.as_str();
        let account = &request.service_account;
        let service_account = BoundRef {
            name: account.clone(),
            uid: self.uid_or_not_found(service_account_kind(), ns, account)?,
        };
        if let Some(node) = self.requester.as_deref().and_then(node_of) {
            self.restrict_token(node, request)?;
        }
        let (mut pod, mut secret) = (None, None);
        if let Some(bound) = &request.bound {
            let uid = self.uid_or_not_found(bound.kind.kind(), ns, &bound.name)?;
            if !bound.uid.is_empty() && bound.uid != uid {
                return Err(ClusterError::BoundUidMismatch {
                    asked: bound.uid.clone(),
                    stored: uid,
                });
            }
            if bound.kind == BoundKind::Pod {
                self.runs_as(ns, &bound.name, account)?;
            }
            let slot = match bound.kind {
                BoundKind::Pod => &mut pod,
                BoundKind::Secret => &mut secret,
            };
            *slot = Some(BoundRef {
                name: bound.name.clone(),
                uid,
            });
        }
        let spec = TokenSpec {
            namespace: ns.to_owned(),
            service_account,
            audiences: request.audiences.clone(),
            expiration,
            pod,
            secret,
        };
        let (token, expires) = keys.issue(&spec).ok_or(ClusterError::TokenSigning)?;
        let bound_uid = spec
            .pod
            .as_ref()
            .or(spec.secret.as_ref())
            .map(|b| b.uid.clone());
        let audiences = if spec.audiences.is_empty() {
            keys.api_audiences().to_vec()
        } else {
            spec.audiences
        };
        Ok(IssuedToken {
            token,
            expires_unix: i64::try_from(expires).unwrap_or(i64::MAX),
            audiences,
            expiration,
            bound_uid,
        })
    }

    /// The uid of `kind` `namespace/name` as the authenticator checks it (one being deleted
    /// is gone), or not found.
    fn uid_or_not_found(&self, kind: Kind, namespace: &str, name: &str) -> Result<String> {
        Credentials::uid_of(self, kind.name(), namespace, name).ok_or_else(|| not_found(kind, name))
    }

    /// A token bound to pod `name` is for the account the pod runs as (kube-apiserver's
    /// TokenRequest refuses the others).
    fn runs_as(&self, namespace: &str, name: &str, account: &str) -> Result<()> {
        let (_, stored) = self.get_local(Kind::Pod, namespace, name)?;
        match stored {
            Some(Stored {
                object: Object::Pod(p),
                ..
            }) if p.spec.service_account_name != account => {
                Err(ClusterError::TokenAccountMismatch {
                    service_account: account.to_owned(),
                })
            }
            _ => Ok(()),
        }
    }

    /// NodeRestriction of a token node `node` asks for: bound to a pod, named with its uid,
    /// that is bound to the node (a token the node could hand to anything would outlive
    /// the pods it runs).
    fn restrict_token(&self, node: &str, request: &TokenRequest) -> Result<()> {
        let refuse = |why: &'static str| ClusterError::NodeRestricted {
            kind: service_account_kind(),
            name: request.service_account.clone(),
            why,
        };
        let bound = match &request.bound {
            Some(b) if b.kind == BoundKind::Pod && !b.name.is_empty() => b,
            _ => return Err(refuse(TOKEN_NOT_BOUND)),
        };
        if bound.uid.is_empty() {
            return Err(refuse(TOKEN_WITHOUT_UID));
        }
        let (_, stored) = self.get_local(Kind::Pod, &request.namespace, &bound.name)?;
        let Some(Stored {
            object: Object::Pod(pod),
            ..
        }) = stored
        else {
            return Err(not_found(Kind::Pod, &bound.name));
        };
        if pod.metadata.uid != bound.uid {
            return Err(ClusterError::BoundUidMismatch {
                asked: bound.uid.clone(),
                stored: pod.metadata.uid,
            });
        }
        if pod.spec.node_name != node {
            return Err(refuse(TOKEN_OTHER_NODE));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{NODES, User};
    use crate::cluster::testing::{TestApi, secured_access, team};

    fn request(account: &str, bound: Option<(&str, &str)>) -> TokenRequest {
        TokenRequest {
            namespace: "team".into(),
            service_account: account.into(),
            audiences: Vec::new(),
            expiration_seconds: None,
            bound: bound.map(|(name, uid)| BoundObject {
                kind: BoundKind::Pod,
                name: name.into(),
                uid: uid.into(),
            }),
        }
    }

    /// A token names its account and bound pod by their uids and is for the API; each
    /// request kube-apiserver refuses is refused with its words and the code clients
    /// branch on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tokens_are_checked_against_what_is_stored() {
        let t = TestApi::start(secured_access).await;
        let (web, _) = team(&t).await;
        let issued = t
            .api
            .issue_token(&request("web", Some(("web-1", &web))))
            .await
            .expect("issued");
        let keys = t.api.token_issuer().expect("keys");
        let claims = keys.verify(&issued.token).expect("the API's");
        assert_eq!(claims.sub, "system:serviceaccount:team:web");
        assert_eq!(claims.kubernetes.pod.map(|p| p.uid), Some(web.clone()));
        assert_eq!(issued.bound_uid, Some(web.clone()));
        assert_eq!(issued.audiences, keys.api_audiences());
        assert_eq!(issued.expiration, DEFAULT_EXPIRATION);
        let without_uid = t
            .api
            .issue_token(&request("web", Some(("web-1", ""))))
            .await
            .expect("the stored uid is taken");
        assert_eq!(without_uid.bound_uid, Some(web.clone()));

        let refused = |r: TokenRequest| {
            let api = t.api.clone();
            async move { api.issue_token(&r).await.expect_err("refused") }
        };
        let e = refused(request("nobody", None)).await;
        assert_eq!(
            (e.code(), e.to_string()),
            (
                tonic::Code::NotFound,
                "serviceaccounts \"nobody\" not found".into()
            )
        );
        let e = refused(request("web", Some(("absent", "")))).await;
        assert_eq!(
            (e.code(), e.to_string()),
            (tonic::Code::NotFound, "pods \"absent\" not found".into())
        );
        let e = refused(request("web", Some(("web-1", "other-uid")))).await;
        assert_eq!(e.code(), tonic::Code::Aborted);
        assert_eq!(
            e.to_string(),
            format!(
                "the UID in the bound object reference (other-uid) does not match the UID in \
                 record ({web}); the object might have been deleted and then recreated"
            )
        );
        let e = refused(request("db", Some(("web-1", "")))).await;
        assert_eq!(
            (e.code(), e.to_string()),
            (
                tonic::Code::InvalidArgument,
                "cannot bind token for serviceaccount \"db\" to pod running with different \
                 serviceaccount name."
                    .into()
            )
        );
        let e = refused(TokenRequest {
            expiration_seconds: Some(60),
            ..request("web", None)
        })
        .await;
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        t.stop().await;
    }

    /// NodeRestriction: a node's token is bound to a pod of its own, named with its uid.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_gets_tokens_bound_to_its_own_pods_only() {
        let t = TestApi::start(secured_access).await;
        let (web, db) = team(&t).await;
        let n1 = t.api.as_user(&User::named("system:node:n1", &[NODES]));
        n1.issue_token(&request("web", Some(("web-1", &web))))
            .await
            .expect("its own pod's");
        for (r, code, message) in [
            (
                request("web", None),
                tonic::Code::PermissionDenied,
                "serviceaccounts \"web\" is forbidden: node requested token not bound to a pod",
            ),
            (
                request("web", Some(("web-1", ""))),
                tonic::Code::PermissionDenied,
                "serviceaccounts \"web\" is forbidden: node requested token with a pod binding \
                 without a uid",
            ),
            (
                request("db", Some(("db-1", &db))),
                tonic::Code::PermissionDenied,
                "serviceaccounts \"db\" is forbidden: node requested token bound to a pod \
                 scheduled on a different node",
            ),
            (
                request("web", Some(("gone", "u"))),
                tonic::Code::NotFound,
                "pods \"gone\" not found",
            ),
        ] {
            let e = n1.issue_token(&r).await.expect_err("refused");
            assert_eq!((e.code(), e.to_string().as_str()), (code, message), "{r:?}");
        }
        let secret = TokenRequest {
            bound: Some(BoundObject {
                kind: BoundKind::Secret,
                name: "s".into(),
                uid: "u".into(),
            }),
            ..request("web", None)
        };
        let e = n1.issue_token(&secret).await.expect_err("not a pod");
        assert!(e.to_string().ends_with(TOKEN_NOT_BOUND), "{e}");
        // Anyone else may bind a token to any pod of the account.
        let admin = t
            .api
            .as_user(&User::named("admin", &[crate::access::MASTERS]));
        admin
            .issue_token(&request("db", Some(("db-1", &db))))
            .await
            .expect("an administrator's");
        t.stop().await;
    }

    /// A server without a signing key issues nothing: FAILED_PRECONDITION.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_signing_key_no_tokens() {
        let t = TestApi::start(|_| crate::access::AccessConfig::default()).await;
        let e = t
            .api
            .issue_token(&request("web", None))
            .await
            .expect_err("no key");
        assert!(matches!(e, ClusterError::NoTokenIssuer), "{e}");
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        t.stop().await;
    }

    /// The bounds of a lifetime, and the words of each refusal.
    #[test]
    fn expiration_bounds() {
        assert_eq!(expiration(None).unwrap(), DEFAULT_EXPIRATION);
        assert_eq!(expiration(Some(600)).unwrap(), Duration::from_secs(600));
        assert_eq!(
            expiration(Some(MAX_EXPIRATION_SECONDS)).unwrap(),
            Duration::from_secs(u64::from(u32::MAX))
        );
        for (secs, why) in [
            (599, "less than 10 minutes"),
            (-1, "less than 10 minutes"),
            (MAX_EXPIRATION_SECONDS + 1, "longer than 2^32 seconds"),
        ] {
            let e = expiration(Some(secs)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert_eq!(
                e.to_string(),
                format!(
                    "TokenRequest.authentication.k8s.io is invalid: spec.expirationSeconds: \
                     Invalid value: {secs}: may not specify a duration {why}"
                )
            );
        }
    }
}
