//! `skiff controller-manager`: the Deployment and ReplicaSet controllers against a running
//! store, leader-elected.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use skiff_controllers::Config;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Store members' client endpoints (host:port), comma-separated.
    #[arg(long, env = "SKIFF_ENDPOINTS", value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
    #[command(flatten)]
    tls: crate::config::TlsArgs,
    /// Objects of each kind synced at once (kube-controller-manager's
    /// `--concurrent-*-syncs`).
    #[arg(long, default_value_t = 5)]
    workers: usize,
    /// Objects the garbage collector looks at at once (`--concurrent-gc-syncs`).
    #[arg(long, default_value_t = 20)]
    gc_workers: usize,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    leadership: crate::leadership::LeaderElection,
    /// How long a node's heartbeat may be silent before the node is `Ready=Unknown`,
    /// tainted unreachable and its pods' tolerations start to run out.
    #[arg(long, default_value = "40s", value_parser = skiff_proto::duration::parse)]
    node_monitor_grace_period: std::time::Duration,
    /// Nodes per second, per zone, tainted for eviction (NoExecute); 0 evicts nothing.
    #[arg(long, default_value_t = 0.1)]
    node_eviction_rate: f64,
    /// The CA certificate (PEM) that signs approved certificate requests (joining nodes'
    /// client certificates, signers kubernetes.io/kube-apiserver-client-kubelet and
    /// kubernetes.io/kube-apiserver-client); without it nothing is signed.
    #[arg(long, requires = "cluster_signing_key_file")]
    cluster_signing_cert_file: Option<std::path::PathBuf>,
    /// The key of `--cluster-signing-cert-file` (PEM).
    #[arg(long, requires = "cluster_signing_cert_file")]
    cluster_signing_key_file: Option<std::path::PathBuf>,
    /// The longest certificate signed; a request may ask for less (`expirationSeconds`).
    #[arg(long, default_value = "8760h", value_parser = skiff_proto::duration::parse)]
    cluster_signing_duration: std::time::Duration,
    /// The CA (PEM) the API server's certificate chains to, published in every namespace as
    /// the ConfigMap `kube-root-ca.crt`; `--cluster-signing-cert-file` when not given.
    #[arg(long)]
    root_ca_file: Option<std::path::PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root_ca = args
        .root_ca_file
        .clone()
        .or_else(|| args.cluster_signing_cert_file.clone());
    let config = Config {
        root_ca,
        endpoints: args.endpoints,
        tls: args.tls.client_tls(),
        workers: args.workers,
        gc_workers: args.gc_workers,
        metrics_addr: args.metrics_addr,
        leader_elect: args.leadership.leader_elect(),
        lease_ttl: args.leadership.lease_ttl(),
        identity: crate::leadership::identity(),
        node_monitor_grace_period: args.node_monitor_grace_period,
        node_eviction_rate: args.node_eviction_rate,
        signing: args
            .cluster_signing_cert_file
            .zip(args.cluster_signing_key_file)
            .map(
                |(cert, key)| skiff_controllers::certificates::SigningConfig {
                    cert,
                    key,
                    duration: args.cluster_signing_duration,
                },
            ),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(skiff_controllers::run(config, crate::signals::terminated()))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    /// What `skiff-launch` starts is what this command reads.
    #[test]
    fn the_launch_crates_command_line_parses_as_set() {
        use clap::Parser as _;
        use skiff_launch::ControllerManagerCommand;

        let cmd = ControllerManagerCommand {
            endpoints: vec!["127.0.0.1:1".into()],
            tls: Some(skiff_launch::ClientCert {
                ca: "/c/ca.pem".into(),
                cert: "/c/x.pem".into(),
                key: "/c/x-key.pem".into(),
            }),
            metrics_addr: Some("127.0.0.1:3".parse().expect("address")),
            lease_ttl: Some(std::time::Duration::from_secs(2)),
            node_monitor_grace_period: Some(std::time::Duration::from_secs(7)),
            node_eviction_rate: Some(2.5),
            signing: Some(skiff_launch::SigningCa {
                cert: "/c/ca.pem".into(),
                key: "/c/ca-key.pem".into(),
            }),
            root_ca: Some("/c/root.pem".into()),
            log: Some("info".into()),
        };
        let cli = crate::Cli::try_parse_from(std::iter::once("skiff".into()).chain(cmd.args()))
            .expect("the launch crate's argv parses");
        let a = match cli.command {
            crate::Command::ControllerManager(a) => a,
            other => panic!("not `skiff controller-manager`: {other:?}"),
        };
        assert_eq!(a.endpoints, cmd.endpoints);
        let tls = a.tls.client_tls().expect("tls");
        assert_eq!(Some(tls.ca), cmd.tls.as_ref().map(|t| t.ca.clone()));
        assert_eq!(tls.cert, cmd.tls.as_ref().map(|t| t.cert.clone()));
        assert_eq!(tls.key, cmd.tls.as_ref().map(|t| t.key.clone()));
        assert_eq!(a.metrics_addr, cmd.metrics_addr);
        assert_eq!(Some(a.leadership.lease_ttl), cmd.lease_ttl);
        assert_eq!(
            Some(a.node_monitor_grace_period),
            cmd.node_monitor_grace_period
        );
        assert_eq!(Some(a.node_eviction_rate), cmd.node_eviction_rate);
        let signing = cmd.signing.as_ref().expect("signing");
        assert_eq!(a.cluster_signing_cert_file.as_ref(), Some(&signing.cert));
        assert_eq!(a.cluster_signing_key_file.as_ref(), Some(&signing.key));
        assert_eq!(a.root_ca_file, cmd.root_ca);
    }
}
