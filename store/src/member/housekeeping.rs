//! The member's timers: the lease clock, recording its client URLs in the membership, and the
//! backend quota. They run as one task, stopped with the member's other tasks.

use std::sync::Arc;
use std::time::Duration;

use super::StoreMember;
use super::forward::Introduce;
use crate::backend;
use crate::command::{Alarm, Command};

/// How often the timers run.
const TICK: Duration = Duration::from_millis(250);

impl StoreMember {
    /// Starts the timers. The task holds the member weakly, so a member that is dropped without
    /// [`StoreMember::shutdown`] does not live on in it.
    pub(super) fn spawn_housekeeping(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(member) = me.upgrade() else { return };
                member.lease_tick().await;
                member.client_urls_tick().await;
                member.quota_tick().await;
            }
        });
    }

    /// Records this member's name and client URLs in the membership: members are bootstrapped
    /// (or added) knowing only peer URLs, and clients discover endpoints from MemberList.
    async fn client_urls_tick(self: &Arc<Self>) {
        let membership = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .clone();
        let Some(me) = membership.get_node(&self.id) else {
            return;
        };
        if me.client_urls == self.config.advertise_client_urls && me.name == self.config.name {
            return;
        }
        let introduce = Introduce {
            id: self.id,
            name: self.config.name.clone(),
            client_urls: self.config.advertise_client_urls.clone(),
        };
        if let Err(e) = self.on_leader(introduce).await {
            tracing::debug!(error = %e, "recording client URLs");
        }
    }

    /// Raises the NOSPACE alarm when the backend outgrows its quota (leader only; the alarm is
    /// replicated, so every member then refuses puts).
    async fn quota_tick(&self) {
        if !self.is_leader() {
            return;
        }
        let (size, raised) = {
            let mvcc = self.shared.read();
            let raised = mvcc.alarms().iter().any(|(_, a)| *a == Alarm::NoSpace);
            (backend::size(mvcc.db()), raised)
        };
        if size > self.config.quota_backend_bytes && !raised {
            tracing::warn!(
                size,
                quota = self.config.quota_backend_bytes,
                "backend quota exceeded: raising NOSPACE"
            );
            let cmd = Command::AlarmActivate {
                member: self.id,
                alarm: Alarm::NoSpace,
            };
            if let Err(e) = self.write_local(cmd).await {
                tracing::warn!(error = %e, "raising NOSPACE");
            }
        }
    }
}
