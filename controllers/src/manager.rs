//! Starts the controllers and keeps them running: leadership, the informers that fill the
//! caches, each controller's workers, `/metrics`; stops them when asked or when leadership
//! is lost.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use skiff_proto::api::Kind;
use skiff_proto::client::{ClientError, ClusterClient, Code, Event, Informer, ListParams};
use skiff_proto::recorder::EventRecorder;
use tracing::Instrument;

use crate::cache::Cache;
use crate::core::{Context, Controller};
use crate::metrics::{self, Metrics};
use crate::{
    certificates, cronjob, daemonset, deployment, disruption, endpointslice, gc, history, job,
    namespace, nodelifecycle, provisioner, replicaset, resourcequota, rootca, serviceaccount,
    statefulset,
};

/// The key controller manager processes elect their leader on.
pub const LEADER_KEY: &str = "/skiff/leader/controller-manager";
/// The component name on the events the controllers record.
pub const COMPONENT: &str = "controller-manager";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Leader(#[from] skiff_proto::leader::Error),
    #[error("lost the controller manager leadership; stopping so a standby can take over")]
    LeadershipLost,
    #[error("metrics address {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the {kind} informer stopped: {source}")]
    Informer { kind: Kind, source: ClientError },
    #[error("a part of the controller manager stopped: {0}")]
    Stopped(String),
    #[error("controller manager settings: {0}")]
    Config(String),
    #[error("the signing CA: {0}")]
    Signer(#[from] certificates::SignerError),
    #[error("--root-ca-file {}: {source}", path.display())]
    RootCa {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Settings of `skiff controller-manager`.
#[derive(Debug, Clone)]
pub struct Config {
    pub endpoints: Vec<String>,
    /// TLS to the store, with the certificate that names this component.
    pub tls: Option<skiff_proto::tls::ClientTls>,
    /// Workers of the Deployment and ReplicaSet controllers each
    /// (kube-controller-manager's `--concurrent-deployment-syncs`, `--concurrent-replicaset-syncs`).
    pub workers: usize,
    /// Workers of the garbage collector (`--concurrent-gc-syncs`): each delete it makes waits
    /// for the store, so it runs more of them.
    pub gc_workers: usize,
    pub metrics_addr: Option<SocketAddr>,
    /// Elect a leader among controller manager processes.
    pub leader_elect: bool,
    pub lease_ttl: Duration,
    /// This process in the leadership key.
    pub identity: String,
    /// How long a node's heartbeat may be silent before it is `Ready=Unknown`
    /// (kube-controller-manager's `--node-monitor-grace-period`).
    pub node_monitor_grace_period: Duration,
    /// Nodes per second, per zone, tainted for eviction (`--node-eviction-rate`).
    pub node_eviction_rate: f64,
    /// The CA that signs approved certificate requests; none signs nothing (requests are
    /// still approved, for another signer).
    pub signing: Option<certificates::SigningConfig>,
    /// The CA (PEM) published in every namespace as `kube-root-ca.crt`
    /// (kube-controller-manager's `--root-ca-file`); none publishes nothing.
    pub root_ca: Option<std::path::PathBuf>,
}

impl Config {
    /// Refuses settings no controller manager can run with, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.endpoints.is_empty() {
            return Err("endpoints: at least one store member is needed".into());
        }
        if self.workers == 0 || self.gc_workers == 0 {
            return Err("workers, gc_workers: at least 1 each".into());
        }
        if !self.node_eviction_rate.is_finite() || self.node_eviction_rate < 0.0 {
            return Err(format!(
                "node_eviction_rate: {} is not a rate (nodes per second, 0 or more)",
                self.node_eviction_rate
            ));
        }
        if self.node_monitor_grace_period.is_zero() {
            return Err("node_monitor_grace_period: must be longer than 0".into());
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoints: Vec::new(),
            tls: None,
            workers: 5,
            gc_workers: 20,
            metrics_addr: None,
            leader_elect: true,
            lease_ttl: Duration::from_secs(10),
            identity: format!("controller-manager-{}", std::process::id()),
            node_monitor_grace_period: Duration::from_secs(
                skiff_proto::api::node::NODE_MONITOR_GRACE_SECS.unsigned_abs(),
            ),
            node_eviction_rate: 0.1,
            signing: None,
            root_ca: None,
        }
    }
}

/// A worker: takes keys off the controller's queue until it is closed.
pub async fn work<C: Controller>(controller: Arc<C>, metrics: Arc<Metrics>) {
    let queue = controller.queue().clone();
    while let Some(key) = queue.get().await {
        let started = Instant::now();
        let span = tracing::debug_span!("controller.sync", controller = C::NAME, key = %key);
        let outcome = controller.sync(&key).instrument(span).await;
        metrics.synced(C::NAME, started.elapsed(), outcome.is_err());
        match outcome {
            Ok(requeue) => {
                queue.forget(&key);
                if let Some(after) = requeue {
                    queue.add_after(key.clone(), after);
                }
            }
            Err(e) => {
                let failures = queue.failures(&key);
                if e.code() == Some(Code::Aborted) {
                    // Decided on a cache older than the object: decide again on a newer one.
                    tracing::debug!(controller = C::NAME, key, error = %e, "sync conflicted");
                } else if failures < 3 || failures.is_power_of_two() {
                    tracing::warn!(controller = C::NAME, key, failures, error = %e, "sync failed");
                }
                queue.add_rate_limited(&key);
            }
        }
        queue.done(&key);
    }
}

/// Runs the controllers until `shutdown` resolves or leadership is lost.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    config.validate().map_err(Error::Config)?;
    let signer = config
        .signing
        .as_ref()
        .map(certificates::Signer::load)
        .transpose()?;
    let root_ca = match &config.root_ca {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|source| Error::RootCa {
                path: path.clone(),
                source,
            })?,
        ),
        None => None,
    };
    tokio::pin!(shutdown);
    let mut leadership = if config.leader_elect {
        tokio::select! {
            l = skiff_proto::leader::acquire(&config.endpoints, config.tls.as_ref(), LEADER_KEY, &config.identity, config.lease_ttl) => Some(l?),
            () = &mut shutdown => return Ok(()),
        }
    } else {
        None
    };
    let client = ClusterClient::connect_with(&config.endpoints, config.tls.as_ref())?;
    // Every write a controller makes is fenced by the leadership; events are not (a deposed
    // leader's last events are harmless).
    let writer = match &leadership {
        Some(l) => client.fenced(&l.key, l.revision),
        None => client.clone(),
    };
    let metrics = Arc::new(Metrics::default());
    let ctx = Arc::new(Context {
        client: writer,
        pods: Cache::new(Kind::Pod),
        replica_sets: Cache::new(Kind::ReplicaSet),
        deployments: Cache::new(Kind::Deployment),
        nodes: Cache::new(Kind::Node),
        csrs: Cache::new(Kind::CertificateSigningRequest),
        services: Cache::new(Kind::Service),
        endpoint_slices: Cache::new(Kind::EndpointSlice),
        endpoints: Cache::new(endpointslice::endpoints_kind()),
        quotas: Cache::new(Kind::ResourceQuota),
        namespaces: Cache::new(Kind::Namespace),
        service_accounts: Cache::new(serviceaccount::kind()),
        jobs: Cache::new(job::kind()),
        cron_jobs: Cache::new(cronjob::kind()),
        daemon_sets: Cache::new(daemonset::kind()),
        controller_revisions: Cache::new(history::kind()),
        stateful_sets: Cache::new(statefulset::kind()),
        claims: Cache::new(statefulset::claim_kind()),
        volumes: Cache::new(provisioner::volume_kind()),
        storage_classes: Cache::new(provisioner::class_kind()),
        root_ca_maps: Cache::new(rootca::config_map_kind()),
        disruption_budgets: Cache::new(disruption::kind()),
        replication_controllers: Cache::new(disruption::replication_controller_kind()),
        events: EventRecorder::spawn(client.clone(), COMPONENT, ""),
        metrics: metrics.clone(),
        expectations: Default::default(),
    });
    let replica_sets = Arc::new(replicaset::ReplicaSets::new(ctx.clone()));
    let deployments = Arc::new(deployment::Deployments::new(ctx.clone()));
    let collector = Arc::new(gc::GarbageCollector::new(ctx.clone()));
    let nodes = Arc::new(nodelifecycle::NodeLifecycle::new(
        ctx.clone(),
        config.node_monitor_grace_period,
        config.node_eviction_rate,
    ));
    let csrs = Arc::new(certificates::Certificates::new(ctx.clone(), signer));
    let slices = Arc::new(endpointslice::EndpointSlices::new(ctx.clone()));
    let quotas = Arc::new(resourcequota::ResourceQuotas::new(ctx.clone()));
    let accounts = Arc::new(serviceaccount::ServiceAccounts::new(ctx.clone()));
    let namespaces = Arc::new(namespace::Namespaces::new(ctx.clone()));
    let jobs = Arc::new(job::Jobs::new(ctx.clone()));
    let cron_jobs = Arc::new(cronjob::CronJobs::new(ctx.clone()));
    let daemon_sets = Arc::new(daemonset::DaemonSets::new(ctx.clone()));
    let stateful_sets = Arc::new(statefulset::StatefulSets::new(ctx.clone()));
    let provisioner = Arc::new(provisioner::Provisioner::new(ctx.clone()));
    let budgets = Arc::new(disruption::Disruption::new(ctx.clone()));
    let root_ca = root_ca.map(|ca| Arc::new(rootca::RootCa::new(ctx.clone(), ca)));
    let handlers = Arc::new(Handlers {
        ctx: ctx.clone(),
        root_ca: root_ca.clone(),
        accounts: accounts.clone(),
        namespaces: namespaces.clone(),
        jobs: jobs.clone(),
        cron_jobs: cron_jobs.clone(),
        daemon_sets: daemon_sets.clone(),
        stateful_sets: stateful_sets.clone(),
        provisioner: provisioner.clone(),
        budgets: budgets.clone(),
        csrs: csrs.clone(),
        slices: slices.clone(),
        quotas: quotas.clone(),
        replica_sets: replica_sets.clone(),
        deployments: deployments.clone(),
        collector: collector.clone(),
        nodes: nodes.clone(),
    });

    // Every cache is full before any worker starts, so no sync decides on half a list.
    let mut informers = Vec::new();
    for kind in [
        Kind::Node,
        Kind::Deployment,
        Kind::ReplicaSet,
        Kind::Pod,
        Kind::CertificateSigningRequest,
        Kind::Service,
        Kind::EndpointSlice,
        Kind::ResourceQuota,
        endpointslice::endpoints_kind(),
        Kind::Namespace,
        serviceaccount::kind(),
        rootca::config_map_kind(),
        job::kind(),
        cronjob::kind(),
        daemonset::kind(),
        history::kind(),
        statefulset::kind(),
        statefulset::claim_kind(),
        provisioner::volume_kind(),
        provisioner::class_kind(),
        disruption::kind(),
        disruption::replication_controller_kind(),
    ] {
        let params = if kind == rootca::config_map_kind() {
            // Only the ones this controller manager keeps.
            ListParams::default().fields(format!("metadata.name={}", rootca::CONFIG_MAP))
        } else {
            ListParams::default()
        };
        let mut informer = Informer::new(client.clone(), kind, params);
        for e in informer.sync().await? {
            handlers.on_event(kind, &e);
        }
        handlers.cache(kind).set_synced();
        informers.push((kind, informer));
    }
    // The kinds the garbage collector alone looks at (ConfigMaps, Secrets, CRDs ...).
    let mut collected = Vec::new();
    for &kind in collector.fixed_kinds() {
        let mut informer = Informer::new(client.clone(), kind, ListParams::default());
        for e in informer.sync().await? {
            collector.observe(kind, &e);
        }
        collector.set_synced(kind);
        collected.push((kind, informer));
    }
    tracing::info!(
        deployments = ctx.deployments.len(),
        replica_sets = ctx.replica_sets.len(),
        pods = ctx.pods.len(),
        "controller caches synced"
    );
    let mut tasks = tokio::task::JoinSet::new();
    for (kind, mut informer) in informers {
        let h = handlers.clone();
        tasks.spawn(async move {
            let r = informer.run(|e, _| h.on_event(kind, e)).await;
            r.map_err(|source| Error::Informer { kind, source })
        });
    }
    for (kind, mut informer) in collected {
        let c = collector.clone();
        tasks.spawn(async move {
            let r = informer.run(|e, _| c.observe(kind, e)).await;
            r.map_err(|source| Error::Informer { kind, source })
        });
    }
    let follower = collector.clone();
    let custom_client = client.clone();
    tasks.spawn(async move {
        follower.follow_custom_kinds(custom_client).await;
        Ok(())
    });
    // The local StorageClass, made when missing (tried again until the store takes it).
    let maker = provisioner.clone();
    tasks.spawn(async move {
        let mut backoff = skiff_proto::backoff::Backoff::for_store();
        while let Err(e) = maker.ensure_class().await {
            tracing::debug!(error = %e, "making the local StorageClass; trying again");
            backoff.wait().await;
        }
        std::future::pending::<Result<(), Error>>().await
    });
    let watcher = quotas.clone();
    tasks.spawn(async move {
        watcher.watch_counted().await;
        Ok(())
    });
    let resync = budgets.clone();
    tasks.spawn(async move {
        resync.resync().await;
        Ok(())
    });
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..config.workers {
        workers.spawn(work(replica_sets.clone(), metrics.clone()));
        workers.spawn(work(deployments.clone(), metrics.clone()));
    }
    for _ in 0..config.gc_workers {
        workers.spawn(work(collector.clone(), metrics.clone()));
    }
    workers.spawn(work(nodes.clone(), metrics.clone()));
    workers.spawn(work(csrs.clone(), metrics.clone()));
    for _ in 0..config.workers {
        workers.spawn(work(slices.clone(), metrics.clone()));
        workers.spawn(work(quotas.clone(), metrics.clone()));
    }
    workers.spawn(work(accounts.clone(), metrics.clone()));
    for _ in 0..config.workers {
        workers.spawn(work(namespaces.clone(), metrics.clone()));
        workers.spawn(work(jobs.clone(), metrics.clone()));
        workers.spawn(work(cron_jobs.clone(), metrics.clone()));
        workers.spawn(work(daemon_sets.clone(), metrics.clone()));
        workers.spawn(work(stateful_sets.clone(), metrics.clone()));
    }
    workers.spawn(work(provisioner.clone(), metrics.clone()));
    for _ in 0..config.workers {
        workers.spawn(work(budgets.clone(), metrics.clone()));
    }
    if let Some(r) = &root_ca {
        workers.spawn(work(r.clone(), metrics.clone()));
    }
    let served = match config.metrics_addr {
        Some(addr) => {
            let mut queues = vec![
                (replicaset::NAME, replica_sets.queue().clone()),
                (deployment::NAME, deployments.queue().clone()),
                (gc::NAME, collector.queue().clone()),
                (nodelifecycle::NAME, nodes.queue().clone()),
                (certificates::NAME, csrs.queue().clone()),
                (endpointslice::NAME, slices.queue().clone()),
                (resourcequota::NAME, quotas.queue().clone()),
                (serviceaccount::NAME, accounts.queue().clone()),
                (namespace::NAME, namespaces.queue().clone()),
                (job::NAME, jobs.queue().clone()),
                (cronjob::NAME, cron_jobs.queue().clone()),
                (daemonset::NAME, daemon_sets.queue().clone()),
                (statefulset::NAME, stateful_sets.queue().clone()),
                (provisioner::NAME, provisioner.queue().clone()),
                (disruption::NAME, budgets.queue().clone()),
            ];
            if let Some(r) = &root_ca {
                queues.push((rootca::NAME, r.queue().clone()));
            }
            let registry = metrics::registry(metrics.clone(), queues);
            Some(
                metrics::serve(addr, registry)
                    .await
                    .map_err(|source| Error::Metrics { addr, source })?,
            )
        }
        None => None,
    };

    let lost = async {
        match leadership.as_mut() {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        () = &mut shutdown => Ok(()),
        () = lost => Err(Error::LeadershipLost),
        Some(r) = tasks.join_next() => match r {
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => Ok(()),
            Err(e) => Err(Error::Stopped(e.to_string())),
        },
    };
    for q in [
        replica_sets.queue(),
        deployments.queue(),
        collector.queue(),
        nodes.queue(),
        csrs.queue(),
        slices.queue(),
        quotas.queue(),
        accounts.queue(),
        namespaces.queue(),
        jobs.queue(),
        cron_jobs.queue(),
        daemon_sets.queue(),
        stateful_sets.queue(),
        provisioner.queue(),
        budgets.queue(),
    ] {
        q.close();
    }
    if let Some(r) = &root_ca {
        r.queue().close();
    }
    tasks.abort_all();
    if let Some(m) = served {
        m.abort();
    }
    if outcome.is_ok() {
        // A clean stop lets the syncs under way finish.
        while workers.join_next().await.is_some() {}
    } else {
        // Leadership lost (or a part failed): another leader may already act, so nothing
        // under way here may write another step (and fenced writes would fail anyway).
        workers.abort_all();
    }
    if let (Some(l), Ok(())) = (leadership, &outcome) {
        l.release().await;
    }
    outcome
}

/// Applies informer events to the caches and hands them to the controllers that care.
struct Handlers {
    ctx: Arc<Context>,
    replica_sets: Arc<replicaset::ReplicaSets>,
    deployments: Arc<deployment::Deployments>,
    collector: Arc<gc::GarbageCollector>,
    nodes: Arc<nodelifecycle::NodeLifecycle>,
    csrs: Arc<certificates::Certificates>,
    slices: Arc<endpointslice::EndpointSlices>,
    quotas: Arc<resourcequota::ResourceQuotas>,
    accounts: Arc<serviceaccount::ServiceAccounts>,
    namespaces: Arc<namespace::Namespaces>,
    jobs: Arc<job::Jobs>,
    cron_jobs: Arc<cronjob::CronJobs>,
    daemon_sets: Arc<daemonset::DaemonSets>,
    stateful_sets: Arc<statefulset::StatefulSets>,
    provisioner: Arc<provisioner::Provisioner>,
    budgets: Arc<disruption::Disruption>,
    root_ca: Option<Arc<rootca::RootCa>>,
}

impl Handlers {
    fn cache(&self, kind: Kind) -> &Cache {
        match kind {
            Kind::Pod => &self.ctx.pods,
            Kind::ReplicaSet => &self.ctx.replica_sets,
            Kind::Node => &self.ctx.nodes,
            Kind::CertificateSigningRequest => &self.ctx.csrs,
            Kind::Service => &self.ctx.services,
            Kind::EndpointSlice => &self.ctx.endpoint_slices,
            Kind::ResourceQuota => &self.ctx.quotas,
            Kind::Namespace => &self.ctx.namespaces,
            k if k == serviceaccount::kind() => &self.ctx.service_accounts,
            k if k == rootca::config_map_kind() => &self.ctx.root_ca_maps,
            k if k == job::kind() => &self.ctx.jobs,
            k if k == cronjob::kind() => &self.ctx.cron_jobs,
            k if k == daemonset::kind() => &self.ctx.daemon_sets,
            k if k == history::kind() => &self.ctx.controller_revisions,
            k if k == statefulset::kind() => &self.ctx.stateful_sets,
            k if k == statefulset::claim_kind() => &self.ctx.claims,
            k if k == provisioner::volume_kind() => &self.ctx.volumes,
            k if k == provisioner::class_kind() => &self.ctx.storage_classes,
            k if k == disruption::kind() => &self.ctx.disruption_budgets,
            k if k == disruption::replication_controller_kind() => {
                &self.ctx.replication_controllers
            }
            Kind::Generic(_) => &self.ctx.endpoints,
            _ => &self.ctx.deployments,
        }
    }

    fn on_event(&self, kind: Kind, event: &Event) {
        if matches!(event, Event::Bookmark(_)) {
            return;
        }
        let old = self.cache(kind).apply(event);
        let old = old.as_deref();
        match kind {
            Kind::Node => {
                self.nodes.on_node(event);
                self.daemon_sets.on_node(event, old);
            }
            Kind::CertificateSigningRequest => self.csrs.on_csr(event),
            Kind::Service => {
                self.slices.on_service(event);
                self.quotas.on_counted(kind, event);
            }
            Kind::EndpointSlice => self.slices.on_slice(event),
            Kind::ResourceQuota => self.quotas.on_quota(event),
            Kind::Namespace => {
                self.namespaces.on_namespace(event);
                self.accounts.on_namespace(event);
                if let Some(r) = &self.root_ca {
                    r.on_namespace(event);
                }
            }
            k if k == serviceaccount::kind() => self.accounts.on_service_account(event),
            k if k == rootca::config_map_kind() => {
                if let Some(r) = &self.root_ca {
                    r.on_config_map(event);
                }
            }
            k if k == job::kind() => {
                self.jobs.on_job(event);
                self.cron_jobs.on_job(event);
            }
            k if k == cronjob::kind() => self.cron_jobs.on_cron_job(event),
            k if k == daemonset::kind() => self.daemon_sets.on_daemon_set(event),
            k if k == history::kind() => {}
            k if k == statefulset::kind() => self.stateful_sets.on_stateful_set(event),
            k if k == statefulset::claim_kind() => self.provisioner.on_claim(event),
            k if k == provisioner::volume_kind() || k == provisioner::class_kind() => {}
            k if k == disruption::kind() => self.budgets.on_budget(event),
            k if k == disruption::replication_controller_kind() => {}
            Kind::Generic(_) => self.slices.on_endpoints(event),
            Kind::Pod => {
                self.quotas.on_counted(kind, event);
                self.slices.on_pod(event, old);
                self.replica_sets.on_pod(event, old);
                self.deployments.on_pod(event);
                self.nodes.on_pod(event);
                self.namespaces.on_pod(event);
                self.jobs.on_pod(event);
                self.daemon_sets.on_pod(event);
                self.stateful_sets.on_pod(event);
                self.provisioner.on_pod(event);
                self.budgets.on_pod(event, old);
            }
            Kind::ReplicaSet => {
                self.replica_sets.on_replica_set(event);
                self.deployments.on_replica_set(event, old);
            }
            _ => self.deployments.on_deployment(event),
        }
        self.collector.on_event(event, old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings no controller manager can run with are refused, naming the setting.
    #[test]
    fn settings_that_cannot_run_are_refused_by_name() {
        let ok = Config {
            endpoints: vec!["127.0.0.1:2379".into()],
            ..Config::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        for (bad, field) in [
            (
                Config {
                    endpoints: Vec::new(),
                    ..ok.clone()
                },
                "endpoints",
            ),
            (
                Config {
                    gc_workers: 0,
                    ..ok.clone()
                },
                "workers",
            ),
            (
                Config {
                    node_eviction_rate: f64::NAN,
                    ..ok.clone()
                },
                "node_eviction_rate",
            ),
            (
                Config {
                    node_monitor_grace_period: Duration::ZERO,
                    ..ok.clone()
                },
                "node_monitor_grace_period",
            ),
        ] {
            let e = bad.validate().expect_err(field);
            assert!(e.starts_with(field), "{e}");
        }
    }
}
