//! The member's side of etcd's auth: who a request comes from, checking a password and
//! issuing a token, and proposing changes (the rules themselves are in [`crate::auth`]).

use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::MetadataMap;

use super::StoreMember;
use crate::auth::{self, Access, AuthCommand, Caller};
use crate::command::{Command, Outcome, TxnRequest};
use crate::error::StoreError;
use crate::tls::ConnInfo;

/// How long a member that does not know a token waits to apply the entry that issued it on
/// another member.
const TOKEN_WAIT: Duration = Duration::from_secs(2);

impl StoreMember {
    /// Who sent a request through the etcd API. With auth off, anyone. With it on: the user
    /// of the `token` (or `authorization`) metadata; without one, the common name of the
    /// client certificate the connection presented (under `--client-cert-auth`); else the
    /// request is refused ("user name is empty"), as etcd refuses it.
    pub async fn caller(
        &self,
        metadata: &MetadataMap,
        conn: Option<&ConnInfo>,
    ) -> Result<Caller, StoreError> {
        // With auth off a token is ignored, whatever it holds (as etcd ignores it).
        if !self.shared.auth_gate.enabled() {
            return Ok(Caller::Anyone);
        }
        let token = match metadata
            .get("token")
            .or_else(|| metadata.get("authorization"))
        {
            Some(t) => Some(t.to_str().map_err(|_| StoreError::InvalidAuthToken)?),
            None => None,
        };
        {
            let mvcc = self.shared.read();
            let auth = mvcc.auth();
            if !auth.state.enabled {
                return Ok(Caller::Anyone);
            }
            let Some(token) = token else {
                // etcd names the user by the certificate's CN under --client-cert-auth only.
                let required = self
                    .config
                    .tls
                    .client
                    .as_ref()
                    .is_some_and(|f| f.client_cert_auth);
                return conn
                    .and_then(|c| c.client.as_ref())
                    .filter(|_| required)
                    .map(|s| Caller::User(s.common_name.clone()))
                    .ok_or(StoreError::UserEmpty);
            };
            let (secret, _) = auth::split_token(token).ok_or(StoreError::InvalidAuthToken)?;
            if let Some(user) = auth.tokens.user(secret, mvcc.token_ttl()) {
                return Ok(Caller::User(user));
            }
        }
        // A token another member issued carries the index by which that member had applied
        // it: this one may not have got there yet.
        let (secret, index) = token
            .and_then(auth::split_token)
            .ok_or(StoreError::InvalidAuthToken)?;
        if index > self.applied_index() {
            let _ = tokio::time::timeout(
                TOKEN_WAIT,
                self.applied_at_least(index, "the entry of an auth token"),
            )
            .await;
        }
        let mvcc = self.shared.read();
        mvcc.auth()
            .tokens
            .user(secret, mvcc.token_ttl())
            .map(Caller::User)
            .ok_or(StoreError::InvalidAuthToken)
    }

    /// Refuses `caller` unless auth is off or it is root (auth management, membership,
    /// maintenance).
    pub fn check_admin(&self, caller: &Caller) -> Result<(), StoreError> {
        match caller {
            Caller::Anyone => Ok(()),
            Caller::User(user) => self.shared.read().auth().state.check_admin(user),
        }
    }

    /// Refuses `caller` unless it may `want` every key in `[key, range_end)`.
    pub fn check_access(
        &self,
        caller: &Caller,
        want: Access,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<(), StoreError> {
        match caller {
            Caller::Anyone => Ok(()),
            Caller::User(user) => self
                .shared
                .read()
                .auth()
                .state
                .check(user, want, key, range_end),
        }
    }

    /// Checks `txn` for `caller` and stamps it with the auth revision it was checked at: if
    /// the auth state moves on before it is applied, it is refused then.
    pub fn authorize_txn(&self, caller: &Caller, txn: &mut TxnRequest) -> Result<(), StoreError> {
        let Caller::User(_) = caller else {
            txn.auth_revision = Some(self.shared.auth_gate.revision());
            return Ok(());
        };
        let mvcc = self.shared.read();
        let state = &mvcc.auth().state;
        if let Caller::User(user) = caller {
            let lease_keys = |id: i64| {
                mvcc.leases()
                    .get(&id)
                    .map(|l| l.keys.iter().cloned().collect())
                    .unwrap_or_default()
            };
            state.check_txn(user, txn, &lease_keys)?;
        }
        txn.auth_revision = Some(state.revision);
        Ok(())
    }

    /// Refuses `caller` unless it may write every key attached to lease `id` (revoking it
    /// deletes them).
    pub fn check_lease_revoke(&self, caller: &Caller, id: i64) -> Result<(), StoreError> {
        let Caller::User(user) = caller else {
            return Ok(());
        };
        let mvcc = self.shared.read();
        let state = &mvcc.auth().state;
        if let Some(lease) = mvcc.leases().get(&id) {
            for key in &lease.keys {
                state.check(user, Access::Write, key, &[])?;
            }
        }
        Ok(())
    }

    /// A change to users, roles or permissions, through the log; the store revision after.
    pub async fn change_auth(self: &Arc<Self>, cmd: AuthCommand) -> Result<i64, StoreError> {
        let resp = self.propose(Command::Auth(cmd)).await?;
        match resp.result? {
            Outcome::Auth => Ok(resp.revision),
            other => Err(StoreError::internal(format!(
                "an auth change answered {other:?}"
            ))),
        }
    }

    /// bcrypt's hash of `password`, at `--bcrypt-cost`, off the async threads.
    pub async fn hash_password(&self, password: String) -> Result<String, StoreError> {
        let cost = self.config.bcrypt_cost;
        tokio::task::spawn_blocking(move || auth::hash_password(&password, cost))
            .await
            .map_err(StoreError::internal)?
    }

    /// etcd's Authenticate: checks `password` against the auth state as of now (after a
    /// ReadIndex), off the async threads, and issues a token every member knows once it is
    /// applied. Refused alike for an unknown user and a
    /// wrong password.
    pub async fn authenticate(
        self: &Arc<Self>,
        name: &str,
        password: String,
    ) -> Result<String, StoreError> {
        // As etcd does: first catch up with everything committed, so a user added or auth
        // enabled through another member a moment ago is known here.
        self.linearizable_barrier().await?;
        let user = {
            let mvcc = self.shared.read();
            let state = &mvcc.auth().state;
            if !state.enabled {
                return Err(StoreError::AuthNotEnabled);
            }
            state.users.get(name).cloned()
        };
        let matches = tokio::task::spawn_blocking(move || {
            user.is_some_and(|u| auth::password_matches(&u, &password))
        })
        .await
        .map_err(StoreError::internal)?;
        if !matches {
            return Err(StoreError::AuthFailed);
        }
        let secret = auth::new_token();
        self.change_auth(AuthCommand::Authenticate {
            user: name.to_string(),
            token: secret.clone(),
        })
        .await?;
        // The entry may have been applied by the leader only (a follower forwards it): the
        // index given with the token must be one by which this member knows it too.
        self.linearizable_barrier().await?;
        Ok(format!("{secret}.{}", self.applied_index()))
    }
}
