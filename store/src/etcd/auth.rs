//! The Auth service: users, roles, permissions, `auth enable/disable`, and Authenticate.
//! Changes go through the log ([`crate::auth::AuthCommand`]); who may make them is checked
//! here (root, once auth is on), and what they do in [`crate::auth`].

use std::sync::Arc;

use skiff_proto::etcd::{
    PbAuthDisableRequest, PbAuthDisableResponse, PbAuthEnableRequest, PbAuthEnableResponse,
    PbAuthRoleAddRequest, PbAuthRoleAddResponse, PbAuthRoleDeleteRequest, PbAuthRoleDeleteResponse,
    PbAuthRoleGetRequest, PbAuthRoleGetResponse, PbAuthRoleGrantPermissionRequest,
    PbAuthRoleGrantPermissionResponse, PbAuthRoleListRequest, PbAuthRoleListResponse,
    PbAuthRoleRevokePermissionRequest, PbAuthRoleRevokePermissionResponse, PbAuthService,
    PbAuthStatusRequest, PbAuthStatusResponse, PbAuthUserAddRequest, PbAuthUserAddResponse,
    PbAuthUserChangePasswordRequest, PbAuthUserChangePasswordResponse, PbAuthUserDeleteRequest,
    PbAuthUserDeleteResponse, PbAuthUserGetRequest, PbAuthUserGetResponse,
    PbAuthUserGrantRoleRequest, PbAuthUserGrantRoleResponse, PbAuthUserListRequest,
    PbAuthUserListResponse, PbAuthUserRevokeRoleRequest, PbAuthUserRevokeRoleResponse,
    PbAuthenticateRequest, PbAuthenticateResponse, PbPermission,
};
use tonic::{Request, Response, Status};

use super::{caller, header};
use crate::auth::{AuthCommand, Caller, PermKind, Permission, ROOT};
use crate::error::StoreError;
use crate::member::StoreMember;

#[derive(Debug, Clone)]
pub struct AuthService {
    member: Arc<StoreMember>,
}

impl AuthService {
    pub fn new(member: Arc<StoreMember>) -> Self {
        AuthService { member }
    }

    /// Refuses unless auth is off or the caller is root.
    async fn admin<T>(&self, req: &Request<T>) -> Result<(), StoreError> {
        super::admin(&self.member, req).await
    }

    /// Refuses unless auth is off, the caller is root, or `allowed` says yes for it.
    async fn admin_or<T>(
        &self,
        req: &Request<T>,
        allowed: impl FnOnce(&str) -> bool,
    ) -> Result<(), StoreError> {
        let who = caller(&self.member, req).await?;
        match &who {
            Caller::User(user) if allowed(user) => Ok(()),
            _ => self.member.check_admin(&who),
        }
    }

    /// Makes a change (the caller checked) and answers with the header after it.
    async fn change(
        &self,
        cmd: AuthCommand,
    ) -> Result<Option<skiff_proto::etcd::PbResponseHeader>, Status> {
        let revision = self.member.change_auth(cmd).await?;
        Ok(header(&self.member, revision))
    }

    /// Whether this member's auth state has user `name` (`role`: a role of that name).
    fn knows(&self, name: &str, role: bool) -> bool {
        let mvcc = self.member.shared.read();
        let state = &mvcc.auth().state;
        if role {
            state.roles.contains_key(name)
        } else {
            state.users.contains_key(name)
        }
    }

    fn now(&self) -> Option<skiff_proto::etcd::PbResponseHeader> {
        header(&self.member, self.member.shared.read().revision())
    }

    /// The password to store for a new or changed user: etcd's `hashedPassword` as given,
    /// else `password` hashed; none for `--no-password`.
    async fn password(
        &self,
        password: String,
        hashed: String,
        no_password: bool,
    ) -> Result<Option<String>, StoreError> {
        if no_password {
            return Ok(None);
        }
        if !hashed.is_empty() {
            hashed.parse::<bcrypt::HashParts>().map_err(|e| {
                StoreError::Invalid(format!("hashedPassword is not a bcrypt hash: {e}"))
            })?;
            return Ok(Some(hashed));
        }
        if password.is_empty() {
            return Err(StoreError::Invalid(
                "password is empty (give one, or create the user with --no-password)".into(),
            ));
        }
        self.member.hash_password(password).await.map(Some)
    }
}

fn permission(p: &Permission) -> PbPermission {
    PbPermission {
        perm_type: p.kind.number(),
        key: p.key.clone(),
        range_end: p.range_end.clone(),
    }
}

#[tonic::async_trait]
impl PbAuthService for AuthService {
    async fn auth_enable(
        &self,
        req: Request<PbAuthEnableRequest>,
    ) -> Result<Response<PbAuthEnableResponse>, Status> {
        self.admin(&req).await?;
        let header = self.change(AuthCommand::Enable).await?;
        Ok(Response::new(PbAuthEnableResponse { header }))
    }

    async fn auth_disable(
        &self,
        req: Request<PbAuthDisableRequest>,
    ) -> Result<Response<PbAuthDisableResponse>, Status> {
        self.admin(&req).await?;
        let header = self.change(AuthCommand::Disable).await?;
        Ok(Response::new(PbAuthDisableResponse { header }))
    }

    async fn auth_status(
        &self,
        _req: Request<PbAuthStatusRequest>,
    ) -> Result<Response<PbAuthStatusResponse>, Status> {
        let (enabled, auth_revision) = {
            let mvcc = self.member.shared.read();
            let state = &mvcc.auth().state;
            (state.enabled, state.revision)
        };
        Ok(Response::new(PbAuthStatusResponse {
            header: self.now(),
            enabled,
            auth_revision,
        }))
    }

    async fn authenticate(
        &self,
        req: Request<PbAuthenticateRequest>,
    ) -> Result<Response<PbAuthenticateResponse>, Status> {
        let req = req.into_inner();
        let token = self.member.authenticate(&req.name, req.password).await?;
        Ok(Response::new(PbAuthenticateResponse {
            header: self.now(),
            token,
        }))
    }

    async fn user_add(
        &self,
        req: Request<PbAuthUserAddRequest>,
    ) -> Result<Response<PbAuthUserAddResponse>, Status> {
        self.admin(&req).await?;
        let req = req.into_inner();
        if req.name.is_empty() {
            return Err(StoreError::UserEmpty.into());
        }
        let no_password = req.options.is_some_and(|o| o.no_password);
        let password = self
            .password(req.password, req.hashed_password, no_password)
            .await?;
        let header = self
            .change(AuthCommand::UserAdd {
                name: req.name,
                password,
            })
            .await?;
        Ok(Response::new(PbAuthUserAddResponse { header }))
    }

    async fn user_get(
        &self,
        req: Request<PbAuthUserGetRequest>,
    ) -> Result<Response<PbAuthUserGetResponse>, Status> {
        let name = req.get_ref().name.clone();
        self.admin_or(&req, |me| me == name).await?;
        let roles = {
            let mvcc = self.member.shared.read();
            let user = mvcc
                .auth()
                .state
                .users
                .get(&name)
                .ok_or(StoreError::UserNotFound)?;
            user.roles.iter().cloned().collect()
        };
        Ok(Response::new(PbAuthUserGetResponse {
            header: self.now(),
            roles,
        }))
    }

    async fn user_list(
        &self,
        req: Request<PbAuthUserListRequest>,
    ) -> Result<Response<PbAuthUserListResponse>, Status> {
        self.admin(&req).await?;
        let users = self
            .member
            .shared
            .read()
            .auth()
            .state
            .users
            .keys()
            .cloned()
            .collect();
        Ok(Response::new(PbAuthUserListResponse {
            header: self.now(),
            users,
        }))
    }

    async fn user_delete(
        &self,
        req: Request<PbAuthUserDeleteRequest>,
    ) -> Result<Response<PbAuthUserDeleteResponse>, Status> {
        self.admin(&req).await?;
        let name = req.into_inner().name;
        let header = self.change(AuthCommand::UserDelete { name }).await?;
        Ok(Response::new(PbAuthUserDeleteResponse { header }))
    }

    async fn user_change_password(
        &self,
        req: Request<PbAuthUserChangePasswordRequest>,
    ) -> Result<Response<PbAuthUserChangePasswordResponse>, Status> {
        self.admin(&req).await?;
        let req = req.into_inner();
        // A request with no password is refused either way; etcd names the unknown user first.
        if req.password.is_empty()
            && req.hashed_password.is_empty()
            && !self.knows(&req.name, false)
        {
            return Err(StoreError::UserNotFound.into());
        }
        let password = self
            .password(req.password, req.hashed_password, false)
            .await?;
        let header = self
            .change(AuthCommand::UserChangePassword {
                name: req.name,
                password,
            })
            .await?;
        Ok(Response::new(PbAuthUserChangePasswordResponse { header }))
    }

    async fn user_grant_role(
        &self,
        req: Request<PbAuthUserGrantRoleRequest>,
    ) -> Result<Response<PbAuthUserGrantRoleResponse>, Status> {
        self.admin(&req).await?;
        let req = req.into_inner();
        let header = self
            .change(AuthCommand::UserGrantRole {
                user: req.user,
                role: req.role,
            })
            .await?;
        Ok(Response::new(PbAuthUserGrantRoleResponse { header }))
    }

    async fn user_revoke_role(
        &self,
        req: Request<PbAuthUserRevokeRoleRequest>,
    ) -> Result<Response<PbAuthUserRevokeRoleResponse>, Status> {
        self.admin(&req).await?;
        let req = req.into_inner();
        let header = self
            .change(AuthCommand::UserRevokeRole {
                user: req.name,
                role: req.role,
            })
            .await?;
        Ok(Response::new(PbAuthUserRevokeRoleResponse { header }))
    }

    async fn role_add(
        &self,
        req: Request<PbAuthRoleAddRequest>,
    ) -> Result<Response<PbAuthRoleAddResponse>, Status> {
        self.admin(&req).await?;
        let name = req.into_inner().name;
        let header = self.change(AuthCommand::RoleAdd { name }).await?;
        Ok(Response::new(PbAuthRoleAddResponse { header }))
    }

    async fn role_get(
        &self,
        req: Request<PbAuthRoleGetRequest>,
    ) -> Result<Response<PbAuthRoleGetResponse>, Status> {
        let role = req.get_ref().role.clone();
        let member = self.member.clone();
        self.admin_or(&req, |me| {
            member
                .shared
                .read()
                .auth()
                .state
                .users
                .get(me)
                .is_some_and(|u| u.roles.contains(&role))
        })
        .await?;
        let perm = {
            let mvcc = self.member.shared.read();
            match mvcc.auth().state.roles.get(&role) {
                Some(r) => r.perms.iter().map(permission).collect(),
                // The root role need not be added to be granted: it holds every key.
                None if role == ROOT => vec![permission(&Permission {
                    kind: PermKind::ReadWrite,
                    key: vec![0],
                    range_end: vec![0],
                })],
                None => return Err(StoreError::RoleNotFound.into()),
            }
        };
        Ok(Response::new(PbAuthRoleGetResponse {
            header: self.now(),
            perm,
        }))
    }

    async fn role_list(
        &self,
        req: Request<PbAuthRoleListRequest>,
    ) -> Result<Response<PbAuthRoleListResponse>, Status> {
        self.admin(&req).await?;
        let roles = self
            .member
            .shared
            .read()
            .auth()
            .state
            .roles
            .keys()
            .cloned()
            .collect();
        Ok(Response::new(PbAuthRoleListResponse {
            header: self.now(),
            roles,
        }))
    }

    async fn role_delete(
        &self,
        req: Request<PbAuthRoleDeleteRequest>,
    ) -> Result<Response<PbAuthRoleDeleteResponse>, Status> {
        self.admin(&req).await?;
        let name = req.into_inner().role;
        let header = self.change(AuthCommand::RoleDelete { name }).await?;
        Ok(Response::new(PbAuthRoleDeleteResponse { header }))
    }

    async fn role_grant_permission(
        &self,
        req: Request<PbAuthRoleGrantPermissionRequest>,
    ) -> Result<Response<PbAuthRoleGrantPermissionResponse>, Status> {
        self.admin(&req).await?;
        let req = req.into_inner();
        let valid = req
            .perm
            .as_ref()
            .is_some_and(|p| PermKind::from_number(p.perm_type).is_some() && !p.key.is_empty());
        // A permission that is not one is refused either way; etcd names the unknown role first.
        if !valid && !self.knows(&req.name, true) {
            return Err(StoreError::RoleNotFound.into());
        }
        let p = req
            .perm
            .ok_or_else(|| StoreError::Invalid("permission not given".into()))?;
        let kind = PermKind::from_number(p.perm_type).ok_or_else(|| {
            StoreError::Invalid(format!(
                "permission type {} is none of READ (0), WRITE (1), READWRITE (2)",
                p.perm_type
            ))
        })?;
        if p.key.is_empty() {
            return Err(StoreError::EmptyKey.into());
        }
        let header = self
            .change(AuthCommand::RoleGrantPermission {
                name: req.name,
                perm: Permission {
                    kind,
                    key: p.key,
                    range_end: p.range_end,
                },
            })
            .await?;
        Ok(Response::new(PbAuthRoleGrantPermissionResponse { header }))
    }

    async fn role_revoke_permission(
        &self,
        req: Request<PbAuthRoleRevokePermissionRequest>,
    ) -> Result<Response<PbAuthRoleRevokePermissionResponse>, Status> {
        self.admin(&req).await?;
        let req = req.into_inner();
        let header = self
            .change(AuthCommand::RoleRevokePermission {
                name: req.role,
                key: req.key,
                range_end: req.range_end,
            })
            .await?;
        Ok(Response::new(PbAuthRoleRevokePermissionResponse { header }))
    }
}
