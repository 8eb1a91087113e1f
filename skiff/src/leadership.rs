//! The leader-election flags of the processes that run as a leader and standbys (the
//! scheduler, the controller manager), and the identity each writes into the leadership key.

use std::time::Duration;

/// The shortest lease: keep-alives go every third of it, so shorter would be all renewals.
const MIN_LEASE_TTL: Duration = Duration::from_secs(2);

#[derive(Debug, clap::Args)]
pub struct LeaderElection {
    /// Run without electing a leader (only safe when no other process of this kind runs).
    #[arg(long)]
    pub no_leader_elect: bool,
    /// How long the leadership lease lives without renewal (at least 2s); a standby takes
    /// over after it.
    #[arg(long, default_value = "10s", value_parser = skiff_proto::duration::parse)]
    pub lease_ttl: Duration,
}

impl LeaderElection {
    pub fn leader_elect(&self) -> bool {
        !self.no_leader_elect
    }

    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl.max(MIN_LEASE_TTL)
    }
}

/// This process in the leadership key: host and pid.
pub fn identity() -> String {
    format!(
        "{}/{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into()),
        std::process::id()
    )
}
