//! etcd's authentication and authorization: users, roles, key-range permissions, and the
//! simple tokens clients authenticate with.
//!
//! The state ([`AuthState`]) is part of the replicated state machine: every change is an
//! [`AuthCommand`] through the Raft log, validated when it is applied (so every member reaches
//! the same answer), persisted with the keyspace in the same write batch, and carried by
//! snapshots and backups. Each change bumps the auth revision; a write checked against an
//! older revision than the one in force when it is applied is refused
//! ([`StoreError::AuthOldRevision`]), as etcd refuses it, so a revoked permission cannot be
//! used by a write already on its way.
//!
//! Tokens are etcd's simple tokens: a member checks the password, and the token goes through
//! the log ([`AuthCommand::Authenticate`]) so every member knows it; each member then expires
//! it after the TTL without use. They live in memory only: after a restart clients
//! authenticate again, as with etcd.
//!
//! The rules ([`AuthState::apply`] for changes, [`AuthState::permitted`] and
//! [`AuthState::check_admin`] for requests) live here once; the etcd services call them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::request::{RequestOp, TxnRequest};

/// The user and role that may do everything, and without which auth cannot be enabled.
pub const ROOT: &str = "root";

/// What a permission grants, with etcd's numbers (`authpb.Permission.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PermKind {
    Read,
    Write,
    ReadWrite,
}

impl PermKind {
    pub fn from_number(n: i32) -> Option<PermKind> {
        match n {
            0 => Some(PermKind::Read),
            1 => Some(PermKind::Write),
            2 => Some(PermKind::ReadWrite),
            _ => None,
        }
    }

    pub fn number(self) -> i32 {
        match self {
            PermKind::Read => 0,
            PermKind::Write => 1,
            PermKind::ReadWrite => 2,
        }
    }

    fn grants(self, want: Access) -> bool {
        matches!(
            (self, want),
            (PermKind::ReadWrite, _)
                | (PermKind::Read, Access::Read)
                | (PermKind::Write, Access::Write)
        )
    }
}

/// What a request needs on a key range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// A key or key range a role may read and/or write: etcd's encoding, where an empty
/// `range_end` means the key alone and `"\0"` every key from `key` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permission {
    pub kind: PermKind,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub range_end: Vec<u8>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The bcrypt hash of the password; none for a user created with `--no-password`, who
    /// can only be authenticated by a client certificate.
    pub password: Option<String>,
    pub roles: BTreeSet<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    /// At most one per (key, range_end), in the order granted.
    pub perms: Vec<Permission>,
}

/// The replicated auth state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthState {
    pub enabled: bool,
    /// Bumped by every change; requests are checked at one and refused if it moved on.
    pub revision: u64,
    pub users: BTreeMap<String, User>,
    pub roles: BTreeMap<String, Role>,
}

/// A change to the auth state, as the log carries it. Passwords arrive hashed: hashing is
/// salted, so it happens once, before proposing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthCommand {
    Enable,
    Disable,
    UserAdd {
        name: String,
        password: Option<String>,
    },
    UserDelete {
        name: String,
    },
    UserChangePassword {
        name: String,
        password: Option<String>,
    },
    UserGrantRole {
        user: String,
        role: String,
    },
    UserRevokeRole {
        user: String,
        role: String,
    },
    RoleAdd {
        name: String,
    },
    RoleDelete {
        name: String,
    },
    RoleGrantPermission {
        name: String,
        perm: Permission,
    },
    RoleRevokePermission {
        name: String,
        key: Vec<u8>,
        range_end: Vec<u8>,
    },
    /// A password was checked on some member: `token` now stands for `user` on every member.
    Authenticate {
        user: String,
        token: String,
    },
}

impl AuthState {
    fn user(&self, name: &str) -> Result<&User, StoreError> {
        self.users.get(name).ok_or(StoreError::UserNotFound)
    }

    fn user_mut(&mut self, name: &str) -> Result<&mut User, StoreError> {
        self.users.get_mut(name).ok_or(StoreError::UserNotFound)
    }

    /// Applies `cmd`, or refuses it (changing nothing) as etcd would.
    pub fn apply(&mut self, cmd: &AuthCommand) -> Result<(), StoreError> {
        use AuthCommand::*;
        match cmd {
            Enable => {
                if self.enabled {
                    return Ok(());
                }
                let root = self.users.get(ROOT).ok_or(StoreError::RootUserNotExist)?;
                if !root.roles.contains(ROOT) {
                    return Err(StoreError::RootRoleNotExist);
                }
                self.enabled = true;
            }
            Disable => {
                if !self.enabled {
                    return Ok(());
                }
                self.enabled = false;
            }
            UserAdd { name, password } => {
                if name.is_empty() {
                    return Err(StoreError::UserEmpty);
                }
                if self.users.contains_key(name) {
                    return Err(StoreError::UserAlreadyExist);
                }
                self.users.insert(
                    name.clone(),
                    User {
                        password: password.clone(),
                        roles: BTreeSet::new(),
                    },
                );
            }
            UserDelete { name } => {
                if self.enabled && name == ROOT {
                    return Err(StoreError::InvalidAuthMgmt);
                }
                self.users.remove(name).ok_or(StoreError::UserNotFound)?;
            }
            UserChangePassword { name, password } => {
                self.user_mut(name)?.password = password.clone();
            }
            UserGrantRole { user, role } => {
                self.user(user)?;
                if role != ROOT && !self.roles.contains_key(role) {
                    return Err(StoreError::RoleNotFound);
                }
                let u = self.user_mut(user)?;
                if !u.roles.insert(role.clone()) {
                    // Granted already: nothing changes, as in etcd.
                    return Ok(());
                }
            }
            UserRevokeRole { user, role } => {
                if self.enabled && user == ROOT && role == ROOT {
                    return Err(StoreError::InvalidAuthMgmt);
                }
                if !self.user_mut(user)?.roles.remove(role) {
                    return Err(StoreError::RoleNotGranted);
                }
            }
            RoleAdd { name } => {
                if name.is_empty() {
                    return Err(StoreError::RoleEmpty);
                }
                if self.roles.contains_key(name) {
                    return Err(StoreError::RoleAlreadyExist);
                }
                self.roles.insert(name.clone(), Role::default());
            }
            RoleDelete { name } => {
                if self.enabled && name == ROOT {
                    return Err(StoreError::InvalidAuthMgmt);
                }
                self.roles.remove(name).ok_or(StoreError::RoleNotFound)?;
                for u in self.users.values_mut() {
                    u.roles.remove(name);
                }
            }
            RoleGrantPermission { name, perm } => {
                let role = self.roles.get_mut(name).ok_or(StoreError::RoleNotFound)?;
                match role
                    .perms
                    .iter_mut()
                    .find(|p| p.key == perm.key && p.range_end == perm.range_end)
                {
                    Some(p) => p.kind = perm.kind,
                    None => role.perms.push(perm.clone()),
                }
            }
            RoleRevokePermission {
                name,
                key,
                range_end,
            } => {
                let role = self.roles.get_mut(name).ok_or(StoreError::RoleNotFound)?;
                let before = role.perms.len();
                role.perms
                    .retain(|p| !(p.key == *key && p.range_end == *range_end));
                if role.perms.len() == before {
                    return Err(StoreError::PermissionNotGranted);
                }
            }
            Authenticate { user, .. } => {
                if !self.enabled {
                    return Err(StoreError::AuthNotEnabled);
                }
                self.user(user)?;
                // Not a change of the state: the revision stays.
                return Ok(());
            }
        }
        self.revision += 1;
        Ok(())
    }

    /// Whether `user` holds the root role (and so may do anything).
    pub fn is_root(&self, user: &str) -> bool {
        self.users.get(user).is_some_and(|u| u.roles.contains(ROOT))
    }

    /// Refuses unless `user` is root: membership, maintenance and auth management.
    pub fn check_admin(&self, user: &str) -> Result<(), StoreError> {
        if self.is_root(user) {
            Ok(())
        } else {
            Err(StoreError::PermissionDenied)
        }
    }

    /// Whether `user` may `want` every key in `[key, range_end)` (etcd's encoding of
    /// `range_end`): the ranges its roles grant, together, must cover the whole request.
    pub fn permitted(&self, user: &str, want: Access, key: &[u8], range_end: &[u8]) -> bool {
        let Some(u) = self.users.get(user) else {
            return false;
        };
        if u.roles.contains(ROOT) {
            return true;
        }
        let mut granted: Vec<Interval> = u
            .roles
            .iter()
            .filter_map(|r| self.roles.get(r))
            .flat_map(|r| &r.perms)
            .filter(|p| p.kind.grants(want))
            .map(|p| Interval::of(&p.key, &p.range_end))
            .collect();
        granted.sort_by(|a, b| a.start.cmp(&b.start));
        Interval::of(key, range_end).covered_by(&granted)
    }

    /// [`permitted`](Self::permitted), as the error requests get.
    pub fn check(
        &self,
        user: &str,
        want: Access,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<(), StoreError> {
        if self.permitted(user, want, key, range_end) {
            Ok(())
        } else {
            Err(StoreError::PermissionDenied)
        }
    }
}

impl AuthState {
    /// Whether `user` may run `txn` as etcd decides it: read on every compared range; and in
    /// both branches (whichever runs), read on every range read, write on every key put or
    /// range deleted, read too where the previous values are asked back; and for a put that
    /// attaches a lease, write on every key already attached to it (`lease_keys`).
    pub fn check_txn(
        &self,
        user: &str,
        txn: &TxnRequest,
        lease_keys: &dyn Fn(i64) -> Vec<Vec<u8>>,
    ) -> Result<(), StoreError> {
        if self.is_root(user) {
            return Ok(());
        }
        for c in &txn.compare {
            self.check(user, Access::Read, &c.key, &c.range_end)?;
        }
        for op in txn.success.iter().chain(&txn.failure) {
            match op {
                RequestOp::Range(r) => self.check(user, Access::Read, &r.key, &r.range_end)?,
                RequestOp::Put(p) => {
                    self.check(user, Access::Write, &p.key, &[])?;
                    if p.prev_kv {
                        self.check(user, Access::Read, &p.key, &[])?;
                    }
                    if p.lease != 0 {
                        for key in lease_keys(p.lease) {
                            self.check(user, Access::Write, &key, &[])?;
                        }
                    }
                }
                RequestOp::DeleteRange(d) => {
                    self.check(user, Access::Write, &d.key, &d.range_end)?;
                    if d.prev_kv {
                        self.check(user, Access::Read, &d.key, &d.range_end)?;
                    }
                }
                RequestOp::Txn(t) => self.check_txn(user, t, lease_keys)?,
            }
        }
        Ok(())
    }
}

/// `[start, end)`, `end` none: unbounded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Interval {
    start: Vec<u8>,
    end: Option<Vec<u8>>,
}

impl Interval {
    fn of(key: &[u8], range_end: &[u8]) -> Interval {
        let end = match range_end {
            [] => {
                // The key alone: up to its immediate successor.
                let mut next = key.to_vec();
                next.push(0);
                Some(next)
            }
            [0] => None,
            end => Some(end.to_vec()),
        };
        Interval {
            start: key.to_vec(),
            end,
        }
    }

    /// Whether `sorted` (by start) together cover all of `self`.
    fn covered_by(&self, sorted: &[Interval]) -> bool {
        if self.end.as_ref().is_some_and(|e| *e <= self.start) {
            // An empty range asks for nothing.
            return true;
        }
        let mut reached: Vec<u8> = self.start.clone();
        for i in sorted {
            if i.start > reached {
                break;
            }
            match &i.end {
                None => return true,
                Some(e) if *e > reached => reached = e.clone(),
                Some(_) => {}
            }
            if self.end.as_ref().is_some_and(|end| reached >= *end) {
                return true;
            }
        }
        false
    }
}

/// Who a request comes from, once its token or certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Auth is off: everything is allowed.
    Anyone,
    User(String),
}

/// The simple tokens this member knows: each stands for a user until it goes unused for the
/// TTL, the user is deleted or changes password, or auth is disabled.
#[derive(Debug, Default)]
pub struct Tokens {
    inner: Mutex<HashMap<String, Token>>,
}

#[derive(Debug)]
struct Token {
    user: String,
    last_used: Instant,
}

impl Tokens {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Token>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `token` for `user`, dropping tokens unused for `ttl` while at it.
    pub fn insert(&self, token: String, user: String, ttl: Duration) {
        let now = Instant::now();
        let mut tokens = self.lock();
        tokens.retain(|_, t| now.duration_since(t.last_used) < ttl);
        tokens.insert(
            token,
            Token {
                user,
                last_used: now,
            },
        );
    }

    /// The user `token` stands for, if it is known and was used within `ttl`; using it
    /// renews it.
    pub fn user(&self, token: &str, ttl: Duration) -> Option<String> {
        let now = Instant::now();
        let mut tokens = self.lock();
        let t = tokens.get_mut(token)?;
        if now.duration_since(t.last_used) >= ttl {
            tokens.remove(token);
            return None;
        }
        t.last_used = now;
        Some(t.user.clone())
    }

    /// Forgets every token of `user`.
    pub fn forget_user(&self, user: &str) {
        self.lock().retain(|_, t| t.user != user);
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether auth is on, and at which revision, readable without the keyspace lock: while auth
/// is off (most clusters), a request costs no lock for it.
#[derive(Debug, Default)]
pub struct AuthGate {
    enabled: AtomicBool,
    revision: AtomicU64,
}

impl AuthGate {
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::Acquire)
    }

    fn set(&self, state: &AuthState) {
        self.revision.store(state.revision, Ordering::Release);
        self.enabled.store(state.enabled, Ordering::Release);
    }
}

/// The auth state with this member's tokens: what the keyspace holds.
#[derive(Debug, Default)]
pub struct Auth {
    pub state: AuthState,
    pub tokens: Tokens,
    /// Follows `state` (see [`AuthGate`]).
    pub gate: Arc<AuthGate>,
}

impl Auth {
    /// Applies a replicated change, keeping the tokens in step: a token is registered by
    /// `Authenticate`, and dropped when its user goes, changes password, or auth is disabled.
    pub fn apply(&mut self, cmd: &AuthCommand, token_ttl: Duration) -> Result<(), StoreError> {
        self.state.apply(cmd)?;
        self.gate.set(&self.state);
        match cmd {
            AuthCommand::Authenticate { user, token } => {
                self.tokens.insert(token.clone(), user.clone(), token_ttl)
            }
            AuthCommand::UserDelete { name } | AuthCommand::UserChangePassword { name, .. } => {
                self.tokens.forget_user(name)
            }
            AuthCommand::Disable => self.tokens.clear(),
            _ => {}
        }
        Ok(())
    }

    /// Replaces the state (a snapshot installed): tokens of users that no longer exist go.
    pub fn replace(&mut self, state: AuthState) {
        if !state.enabled {
            self.tokens.clear();
        } else {
            self.tokens
                .lock()
                .retain(|_, t| state.users.contains_key(&t.user));
        }
        self.state = state;
        self.gate.set(&self.state);
    }
}

/// bcrypt's cost as etcd's `--bcrypt-cost` sets it: 4 to 31, 10 by default.
pub const DEFAULT_BCRYPT_COST: u32 = 10;

/// Hashes a password for [`AuthCommand::UserAdd`] and [`AuthCommand::UserChangePassword`]
/// (slow by design: call it off the async threads).
pub fn hash_password(password: &str, cost: u32) -> Result<String, StoreError> {
    bcrypt::hash(password, cost).map_err(StoreError::internal)
}

/// Whether `password` is the one `user` was given (slow by design, as hashing).
pub fn password_matches(user: &User, password: &str) -> bool {
    user.password
        .as_deref()
        .is_some_and(|hash| bcrypt::verify(password, hash).unwrap_or(false))
}

/// The secret of a new simple token: random and unguessable. The client gets it with the
/// index by which the issuing member had applied it (`<secret>.<index>`, as etcd's simple
/// tokens look), so that another member can wait until it knows it too.
pub fn new_token() -> String {
    use rand::Rng as _;
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect()
}

/// A token as clients send it: its secret and the index that follows it.
pub fn split_token(token: &str) -> Option<(&str, u64)> {
    let (secret, index) = token.rsplit_once('.')?;
    Some((secret, index.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(kind: PermKind, key: &str, end: &str) -> Permission {
        Permission {
            kind,
            key: key.as_bytes().to_vec(),
            range_end: end.as_bytes().to_vec(),
        }
    }

    fn with_user(perms: Vec<Permission>) -> AuthState {
        let mut s = AuthState::default();
        for cmd in [
            AuthCommand::UserAdd {
                name: "u".into(),
                password: None,
            },
            AuthCommand::RoleAdd { name: "r".into() },
            AuthCommand::UserGrantRole {
                user: "u".into(),
                role: "r".into(),
            },
        ] {
            s.apply(&cmd).expect("apply");
        }
        for p in perms {
            s.apply(&AuthCommand::RoleGrantPermission {
                name: "r".into(),
                perm: p,
            })
            .expect("grant");
        }
        s
    }

    /// Keys over {0x00, 'a', 'b'} of up to three bytes. Every permission and request below
    /// has its ends among the keys of up to two bytes (a single key's end is that key and a
    /// zero byte, three bytes at most), so a key a grant misses inside a request can be found
    /// among these: the start of the gap is such an end.
    fn universe() -> Vec<Vec<u8>> {
        let alphabet = [0u8, b'a', b'b'];
        let mut keys = vec![Vec::new()];
        let mut level = vec![Vec::new()];
        for _ in 0..3 {
            level = level
                .iter()
                .flat_map(|k: &Vec<u8>| {
                    alphabet.iter().map(move |c| {
                        let mut next = k.clone();
                        next.push(*c);
                        next
                    })
                })
                .collect();
            keys.extend(level.iter().cloned());
        }
        keys
    }

    /// Whether `key` is in etcd's `[start, range_end)`.
    fn holds(start: &[u8], range_end: &[u8], key: &[u8]) -> bool {
        match range_end {
            [] => key == start,
            [0] => key >= start,
            end => key >= start && key < end,
        }
    }

    fn short_key() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b')], 1..=2)
    }

    /// A range as etcd encodes it: one key, `[key, end)`, or from `key` on.
    fn range() -> impl proptest::strategy::Strategy<Value = (Vec<u8>, Vec<u8>)> {
        use proptest::prelude::*;
        (short_key(), 0u8..3, short_key()).prop_map(|(key, form, end)| match form {
            0 => (key, Vec::new()),
            1 => (key, end),
            _ => (key, vec![0]),
        })
    }

    proptest::proptest! {
        /// The merged-interval check answers what checking every key would: a request is
        /// allowed exactly when each key in it is in some range the user was granted.
        #[test]
        fn a_range_is_permitted_exactly_when_every_key_in_it_is(
            grants in proptest::collection::vec(range(), 0..5),
            (key, range_end) in range(),
        ) {
            let s = with_user(
                grants
                    .iter()
                    .map(|(k, e)| Permission {
                        kind: PermKind::Read,
                        key: k.clone(),
                        range_end: e.clone(),
                    })
                    .collect(),
            );
            let model = universe()
                .iter()
                .filter(|k| holds(&key, &range_end, k))
                .all(|k| grants.iter().any(|(gk, ge)| holds(gk, ge, k)));
            proptest::prop_assert_eq!(s.permitted("u", Access::Read, &key, &range_end), model);
        }
    }

    #[test]
    fn a_key_needs_a_range_that_holds_it() {
        let s = with_user(vec![
            perm(PermKind::Read, "a", "c"),
            perm(PermKind::Write, "k", ""),
        ]);
        assert!(s.permitted("u", Access::Read, b"a", b""));
        assert!(s.permitted("u", Access::Read, b"bzz", b""));
        assert!(!s.permitted("u", Access::Read, b"c", b""));
        assert!(!s.permitted("u", Access::Write, b"a", b""));
        assert!(s.permitted("u", Access::Write, b"k", b""));
        assert!(!s.permitted("u", Access::Write, b"k0", b""));
        assert!(!s.permitted("u", Access::Read, b"k", b""));
        assert!(!s.permitted("nobody", Access::Read, b"a", b""));
    }

    #[test]
    fn a_range_must_be_covered_whole_perhaps_by_several_grants() {
        let s = with_user(vec![
            perm(PermKind::Read, "a", "c"),
            perm(PermKind::ReadWrite, "c", "e"),
            perm(PermKind::Read, "x", "\0"),
        ]);
        assert!(s.permitted("u", Access::Read, b"a", b"e"));
        assert!(s.permitted("u", Access::Read, b"b", b"d"));
        assert!(!s.permitted("u", Access::Read, b"a", b"f"));
        assert!(!s.permitted("u", Access::Write, b"a", b"d"));
        assert!(s.permitted("u", Access::Write, b"c", b"e"));
        assert!(s.permitted("u", Access::Read, b"y", b"\0"));
        assert!(s.permitted("u", Access::Read, b"x", b"zzzz"));
        assert!(!s.permitted("u", Access::Read, b"w", b"\0"));
        // Every key ("\0" to "\0") is more than any of this.
        assert!(!s.permitted("u", Access::Read, b"\0", b"\0"));
    }

    #[test]
    fn root_may_do_anything_and_auth_needs_it() {
        let mut s = AuthState::default();
        assert_eq!(
            s.apply(&AuthCommand::Enable),
            Err(StoreError::RootUserNotExist)
        );
        s.apply(&AuthCommand::UserAdd {
            name: ROOT.into(),
            password: None,
        })
        .expect("add root");
        assert_eq!(
            s.apply(&AuthCommand::Enable),
            Err(StoreError::RootRoleNotExist)
        );
        s.apply(&AuthCommand::UserGrantRole {
            user: ROOT.into(),
            role: ROOT.into(),
        })
        .expect("root role exists without being added");
        s.apply(&AuthCommand::Enable).expect("enable");
        assert!(s.permitted(ROOT, Access::Write, b"\0", b"\0"));
        assert!(s.check_admin(ROOT).is_ok());
        assert_eq!(
            s.apply(&AuthCommand::UserDelete { name: ROOT.into() }),
            Err(StoreError::InvalidAuthMgmt)
        );
        assert_eq!(
            s.apply(&AuthCommand::UserRevokeRole {
                user: ROOT.into(),
                role: ROOT.into()
            }),
            Err(StoreError::InvalidAuthMgmt)
        );
    }

    #[test]
    fn every_change_moves_the_revision_and_a_refused_one_does_not() {
        let mut s = AuthState::default();
        s.apply(&AuthCommand::RoleAdd { name: "r".into() })
            .expect("add");
        assert_eq!(s.revision, 1);
        assert_eq!(
            s.apply(&AuthCommand::RoleAdd { name: "r".into() }),
            Err(StoreError::RoleAlreadyExist)
        );
        assert_eq!(
            s.apply(&AuthCommand::RoleRevokePermission {
                name: "r".into(),
                key: b"a".to_vec(),
                range_end: Vec::new()
            }),
            Err(StoreError::PermissionNotGranted)
        );
        assert_eq!(s.revision, 1);
    }

    #[test]
    fn deleting_a_role_takes_it_from_its_users() {
        let mut s = with_user(vec![perm(PermKind::Read, "a", "")]);
        s.apply(&AuthCommand::RoleDelete { name: "r".into() })
            .expect("delete");
        assert!(s.users["u"].roles.is_empty());
        assert!(!s.permitted("u", Access::Read, b"a", b""));
    }

    #[test]
    fn tokens_expire_unused_and_go_with_their_user() {
        let mut auth = Auth {
            state: with_user(Vec::new()),
            ..Auth::default()
        };
        auth.state.users.insert(
            ROOT.into(),
            User {
                password: None,
                roles: [ROOT.to_string()].into(),
            },
        );
        auth.state.enabled = true;
        let ttl = Duration::from_secs(60);
        auth.apply(
            &AuthCommand::Authenticate {
                user: "u".into(),
                token: "t1".into(),
            },
            ttl,
        )
        .expect("authenticate");
        assert_eq!(auth.tokens.user("t1", ttl).as_deref(), Some("u"));
        assert_eq!(auth.tokens.user("t1", Duration::ZERO), None, "expired");
        assert_eq!(auth.tokens.user("t1", ttl), None, "and forgotten");
        auth.apply(
            &AuthCommand::Authenticate {
                user: "u".into(),
                token: "t2".into(),
            },
            ttl,
        )
        .expect("authenticate");
        auth.apply(
            &AuthCommand::UserChangePassword {
                name: "u".into(),
                password: None,
            },
            ttl,
        )
        .expect("change");
        assert_eq!(auth.tokens.user("t2", ttl), None);
    }

    #[test]
    fn passwords_are_hashed_and_checked() {
        let hash = hash_password("secret", 4).expect("hash");
        let user = User {
            password: Some(hash),
            roles: BTreeSet::new(),
        };
        assert!(password_matches(&user, "secret"));
        assert!(!password_matches(&user, "Secret"));
        assert!(!password_matches(&User::default(), ""));
        let t = new_token();
        assert!(
            t.len() == 24 && t.chars().all(|c| c.is_ascii_alphanumeric()),
            "{t}"
        );
        assert_ne!(t, new_token());
        assert_eq!(split_token(&format!("{t}.42")), Some((t.as_str(), 42)));
        assert_eq!(split_token(&t), None);
    }
}
