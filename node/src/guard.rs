//! Who may use the agent's port: over TLS every caller presents a client certificate from
//! the cluster's CA (the handshake refuses anyone else), and the agent asks the API, with a
//! `SubjectAccessReview`, whether the certificate's user may read that pod's log (`get
//! pods/log`), exec into it (`create pods/exec`, `pods/attach`) or forward a connection to
//! it (`create pods/portforward`), as the kubelet asks with
//! its webhook authorizer. Answers are kept a while (allowed 5 minutes, refused 30 seconds:
//! the kubelet's defaults), so a `kubectl logs -f` costs one review, not one per read.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use skiff_proto::api::Object;
use skiff_proto::api::rbac::{AccessReview, AccessReviewSpec, ResourceAttributes};
use skiff_proto::client::ClusterClient;
use skiff_proto::tls::Subject;
use tonic::{Request, Status};

/// How long an allowed answer is kept.
const ALLOWED_TTL: Duration = Duration::from_secs(300);
/// How long a refusal is kept.
const REFUSED_TTL: Duration = Duration::from_secs(30);
/// The most answers kept; past it the cache starts over.
const CACHE_LIMIT: usize = 10_000;

/// One question: who, which verb on which subresource of which pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Question {
    user: String,
    groups: Vec<String>,
    verb: &'static str,
    subresource: &'static str,
    namespace: String,
    pod: String,
}

/// The authorizer of the agent's port.
#[derive(Debug)]
pub struct Guard {
    client: ClusterClient,
    answers: Mutex<HashMap<Question, (bool, Instant)>>,
}

impl Guard {
    /// Asks the API through `client` (the agent's own, whose node user may create
    /// SubjectAccessReviews).
    pub fn new(client: ClusterClient) -> Guard {
        Guard {
            client,
            answers: Mutex::new(HashMap::new()),
        }
    }

    /// Who called: the user of the client certificate the connection presented
    /// (`Unauthenticated` without one that names a user).
    pub fn caller<T>(request: &Request<T>) -> Result<Subject, Status> {
        request
            .peer_certs()
            .and_then(|chain| {
                chain
                    .first()
                    .and_then(|leaf| skiff_proto::tls::subject(leaf))
            })
            .ok_or_else(|| {
                Status::unauthenticated("a client certificate that names a user is required")
            })
    }

    /// Whether `subject` may `verb` the `subresource` (`log`, `exec`, `attach`) of pod
    /// `namespace/pod`: `PermissionDenied` when the API says no, `Unavailable` when it
    /// cannot be asked.
    pub async fn check(
        &self,
        subject: &Subject,
        verb: &'static str,
        subresource: &'static str,
        namespace: &str,
        pod: &str,
    ) -> Result<(), Status> {
        let question = Question {
            user: subject.common_name.clone(),
            groups: groups(subject),
            verb,
            subresource,
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
        };
        let allowed = match self.cached(&question) {
            Some(allowed) => allowed,
            None => {
                let allowed = self.ask(&question).await?;
                self.keep(question.clone(), allowed);
                allowed
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "user {:?} cannot {verb} resource \"pods/{subresource}\" of pod {:?} in namespace {:?}",
                question.user, question.pod, question.namespace
            )))
        }
    }

    fn cached(&self, q: &Question) -> Option<bool> {
        let answers = self
            .answers
            .lock()
            .expect("invariant: no panic under the lock");
        answers
            .get(q)
            .and_then(|(allowed, until)| (Instant::now() < *until).then_some(*allowed))
    }

    fn keep(&self, q: Question, allowed: bool) {
        let ttl = if allowed { ALLOWED_TTL } else { REFUSED_TTL };
        let mut answers = self
            .answers
            .lock()
            .expect("invariant: no panic under the lock");
        if answers.len() >= CACHE_LIMIT {
            answers.clear();
        }
        answers.insert(q, (allowed, Instant::now() + ttl));
    }

    async fn ask(&self, q: &Question) -> Result<bool, Status> {
        let review = AccessReview {
            spec: AccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: q.namespace.clone(),
                    verb: q.verb.to_owned(),
                    version: "v1".into(),
                    resource: "pods".into(),
                    subresource: q.subresource.to_owned(),
                    name: q.pod.clone(),
                    ..ResourceAttributes::default()
                }),
                user: q.user.clone(),
                groups: q.groups.clone(),
                ..AccessReviewSpec::default()
            },
            ..AccessReview::default()
        };
        match self
            .client
            .create(&Object::SubjectAccessReview(review))
            .await
        {
            Ok(Object::SubjectAccessReview(r)) => Ok(r.status.is_some_and(|s| s.allowed)),
            Ok(other) => Err(Status::internal(format!(
                "the API answered a SubjectAccessReview with a {}",
                other.kind()
            ))),
            Err(e) => Err(Status::unavailable(format!(
                "asking the API whether the caller may: {e}"
            ))),
        }
    }
}

/// A certificate's groups as the API authenticates them: its organizations and
/// `system:authenticated`.
fn groups(subject: &Subject) -> Vec<String> {
    let mut groups = subject.organizations.clone();
    groups.push("system:authenticated".into());
    groups
}
