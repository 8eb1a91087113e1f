//! The CRI runtime: containerd's CRI plugin over its unix socket, the path the kubelet uses.
//!
//! Choices that follow from containerd 1.6 on this kind of machine (see RUNTIME-NOTES):
//! * No registry is reachable, so images must already be present (imported from OCI
//!   tarballs, see [`crate::image`]). Before creating a container the image is looked up with
//!   `ImageStatus`; a missing one is tried once with `PullImage` and otherwise reported as
//!   [`RuntimeError::ImageNotFound`] (the pod worker shows `ErrImagePull`).
//! * `GetContainerEvents` is not implemented, so exits are found by relisting, like the
//!   kubelet's generic PLEG: one task lists every container each `poll` (one RPC however many
//!   containers run) and publishes their states; [`Runtime::wait_container`] waits on that
//!   and fetches the exit details once. Polling each container instead cost one RPC per
//!   container per poll and slowed containerd down under a hundred pods.
//! * Images found present are remembered, so a pod start costs no image lookups after the
//!   first.
//! * `CreateContainer` needs the sandbox's config again; it is kept per sandbox and rebuilt
//!   from the sandbox's labels for sandboxes adopted after a restart.
//! * Interactive sessions (`kubectl exec`, `attach`) go through containerd's streaming server
//!   over WebSocket ([`session`]).
//! * Host-network sandboxes get the node's IP; pod-network sandboxes need a CNI config in
//!   containerd (the agent writes one, see [`crate::cni`]; their IP comes from
//!   `PodSandboxStatus`).
//! * containerd may run in a network namespace of its own (`netns`), as `skiff up` runs it:
//!   probes and the streaming server are then reached there ([`crate::netns`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::security::{ImageUser, MASKED_PATHS, READONLY_PATHS, Seccomp, Security};
use crate::volumes::Propagation;
use async_trait::async_trait;
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use skiff_proto::api::Time;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::runtime::{
    Container, ContainerSpec, ContainerState, ExecOutput, Exit, PortConnection, Result, Runtime,
    RuntimeError, Sandbox, SandboxSpec, Session, SessionSpec, labels, sandbox_labels,
};

mod session;

/// Where containerd is and how the agent uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct CriConfig {
    /// containerd's socket.
    pub socket: PathBuf,
    /// The image every sandbox runs (fully named: CRI would prefix short names with docker.io).
    pub pause_image: String,
    /// Pod log directories go under here: `<dir>/<namespace>_<name>_<uid>/<container>/<n>.log`.
    pub log_dir: PathBuf,
    /// How often `wait_container` polls a running container.
    pub poll: Duration,
    /// containerd's network namespace (`/proc/<pid>/ns/net`), when it runs in one of its
    /// own: probes and the streaming server are reached there.
    pub netns: Option<PathBuf>,
}

impl Default for CriConfig {
    fn default() -> Self {
        CriConfig {
            socket: "/run/containerd/containerd.sock".into(),
            pause_image: crate::image::PAUSE.into(),
            log_dir: "/var/log/skiff/pods".into(),
            poll: Duration::from_millis(200),
            netns: None,
        }
    }
}

/// A client of containerd's CRI services.
#[derive(Debug)]
pub struct CriRuntime {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    config: CriConfig,
    version: String,
    // Held only to read or insert a config, never across an await.
    sandboxes: Mutex<HashMap<String, cri::PodSandboxConfig>>,
    /// Images known to be present, with the user each runs as.
    images_seen: Mutex<HashMap<String, ImageUser>>,
    /// The latest relist: container ID → CRI state. The relist task ends when this (and
    /// every waiter's clone) is dropped.
    states: tokio::sync::watch::Receiver<Arc<HashMap<String, i32>>>,
}

/// Relists containers every `poll` while anyone holds a receiver.
async fn relist(
    mut runtime: RuntimeServiceClient<Channel>,
    tx: tokio::sync::watch::Sender<Arc<HashMap<String, i32>>>,
    poll: Duration,
) {
    while !tx.is_closed() {
        match runtime
            .list_containers(cri::ListContainersRequest { filter: None })
            .await
        {
            Ok(r) => {
                let states = r
                    .into_inner()
                    .containers
                    .into_iter()
                    .map(|c| (c.id, c.state))
                    .collect();
                tx.send_replace(Arc::new(states));
            }
            Err(e) => tracing::warn!(error = %e, "relisting containers failed"),
        }
        tokio::time::sleep(poll).await;
    }
}

fn call(name: &'static str) -> impl Fn(tonic::Status) -> RuntimeError {
    move |s| match s.code() {
        tonic::Code::NotFound => RuntimeError::NotFound {
            what: name,
            id: s.message().to_string(),
        },
        tonic::Code::DeadlineExceeded => RuntimeError::Timeout {
            call: name,
            timeout: Duration::ZERO,
        },
        _ => RuntimeError::Call {
            call: name,
            message: s.message().to_string(),
        },
    }
}

fn time_of(nanos: i64) -> Option<Time> {
    (nanos > 0)
        .then(|| Time::from_unix(nanos / 1_000_000_000))
        .flatten()
}

/// The container's security in CRI's terms, as the kubelet sends it: the user, groups,
/// capabilities, seccomp profile and flags, the sandbox's namespaces, and `/proc` and `/sys`
/// masked unless the container is privileged.
fn container_security(
    s: &Security,
    namespaces: Option<cri::NamespaceOption>,
) -> cri::LinuxContainerSecurityContext {
    let paths = |p: &[&str]| {
        if s.privileged {
            Vec::new()
        } else {
            p.iter().map(|p| (*p).to_owned()).collect()
        }
    };
    let (profile_type, localhost_ref) = match &s.seccomp {
        Seccomp::Unconfined => (
            cri::security_profile::ProfileType::Unconfined,
            String::new(),
        ),
        Seccomp::RuntimeDefault => (
            cri::security_profile::ProfileType::RuntimeDefault,
            String::new(),
        ),
        Seccomp::Localhost(path) => (cri::security_profile::ProfileType::Localhost, path.clone()),
    };
    cri::LinuxContainerSecurityContext {
        capabilities: Some(cri::Capability {
            add_capabilities: s.add_capabilities.clone(),
            drop_capabilities: s.drop_capabilities.clone(),
            ..cri::Capability::default()
        }),
        privileged: s.privileged,
        namespace_options: namespaces,
        run_as_user: s.run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: s.run_as_group.map(|value| cri::Int64Value { value }),
        readonly_rootfs: s.read_only_root,
        supplemental_groups: s.supplemental_groups.clone(),
        no_new_privs: s.no_new_privs,
        masked_paths: paths(MASKED_PATHS),
        readonly_paths: paths(READONLY_PATHS),
        seccomp: Some(cri::SecurityProfile {
            profile_type: profile_type.into(),
            localhost_ref,
        }),
        ..cri::LinuxContainerSecurityContext::default()
    }
}

/// CPU shares as the kubelet derives them: 1024 per CPU requested, at least 2.
fn cpu_shares(request_milli: i64) -> i64 {
    (request_milli * 1024 / 1000).max(2)
}

const CPU_PERIOD: i64 = 100_000;
/// The reason containerd gives a container the kernel's OOM killer ended.
const OOM_KILLED: &str = "OOMKilled";
/// How long a memory-limited container's exit by SIGKILL waits for containerd's OOM event
/// (see `oom_settled`). Under load the event has come more than 500 ms after the exit.
const OOM_EVENT_GRACE: Duration = Duration::from_secs(3);

impl CriRuntime {
    /// Connects to containerd and checks that the CRI service answers.
    pub async fn connect(config: CriConfig) -> Result<CriRuntime> {
        let path = config.socket.clone();
        let channel = Endpoint::from_static("http://[::]:50051")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .map_err(|e| RuntimeError::Call {
                call: "connect",
                message: format!("{}: {e}", config.socket.display()),
            })?;
        let mut runtime = RuntimeServiceClient::new(channel.clone());
        let v = runtime
            .version(cri::VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(call("Version"))?
            .into_inner();
        let (tx, states) = tokio::sync::watch::channel(Arc::new(HashMap::new()));
        tokio::spawn(relist(runtime.clone(), tx, config.poll));
        Ok(CriRuntime {
            runtime,
            images: ImageServiceClient::new(channel),
            version: format!("{} {}", v.runtime_name, v.runtime_version),
            config,
            sandboxes: Mutex::new(HashMap::new()),
            images_seen: Mutex::new(HashMap::new()),
            states,
        })
    }

    fn sandbox_config(&self, spec: &SandboxSpec) -> cri::PodSandboxConfig {
        let log_dir = self.config.log_dir.join(format!(
            "{}_{}_{}",
            spec.namespace, spec.pod_name, spec.pod_uid
        ));
        let mode = if spec.host_network {
            cri::NamespaceMode::Node
        } else {
            cri::NamespaceMode::Pod
        };
        let mut labels: HashMap<String, String> = sandbox_labels(spec).into_iter().collect();
        labels.insert(labels::HOST_IP.into(), spec.host_ip.clone());
        labels.insert(labels::HOST_NETWORK.into(), spec.host_network.to_string());
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: spec.pod_name.clone(),
                uid: spec.pod_uid.clone(),
                namespace: spec.namespace.clone(),
                attempt: spec.attempt,
            }),
            // A host-network sandbox shares the host's UTS namespace: no hostname of its own.
            hostname: if spec.host_network {
                String::new()
            } else if spec.hostname.is_empty() {
                spec.pod_name.clone()
            } else {
                spec.hostname.clone()
            },
            log_directory: log_dir.to_string_lossy().into_owned(),
            dns_config: spec.dns.as_ref().map(|d| cri::DnsConfig {
                servers: d.servers.clone(),
                searches: d.searches.clone(),
                options: d.options.clone(),
            }),
            // containerd hands them to CNI's portmap; a host-network pod needs none.
            port_mappings: if spec.host_network {
                Vec::new()
            } else {
                spec.host_ports
                    .iter()
                    .map(|p| cri::PortMapping {
                        protocol: match p.protocol.as_str() {
                            "UDP" => cri::Protocol::Udp,
                            "SCTP" => cri::Protocol::Sctp,
                            _ => cri::Protocol::Tcp,
                        } as i32,
                        container_port: p.container_port,
                        host_port: p.host_port,
                        host_ip: p.host_ip.clone(),
                    })
                    .collect()
            },
            labels,
            linux: Some(cri::LinuxPodSandboxConfig {
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        network: mode as i32,
                        pid: cri::NamespaceMode::Container as i32,
                        ipc: cri::NamespaceMode::Pod as i32,
                        ..cri::NamespaceOption::default()
                    }),
                    ..cri::LinuxSandboxSecurityContext::default()
                }),
                ..cri::LinuxPodSandboxConfig::default()
            }),
            ..cri::PodSandboxConfig::default()
        }
    }

    fn spec_of_labels(labels: &HashMap<String, String>, attempt: u32) -> SandboxSpec {
        let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
        SandboxSpec {
            node: get(labels::NODE),
            pod_uid: get(labels::POD_UID),
            pod_name: get(labels::POD_NAME),
            namespace: get(labels::POD_NAMESPACE),
            hostname: String::new(),
            host_network: get(labels::HOST_NETWORK) == "true",
            host_ip: get(labels::HOST_IP),
            pod_cidr: String::new(),
            attempt,
            host_ports: Vec::new(),
            dns: None,
        }
    }

    async fn sandbox_status(&self, id: &str) -> Result<Sandbox> {
        let st = self
            .runtime
            .clone()
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            })
            .await
            .map_err(call("PodSandboxStatus"))?
            .into_inner()
            .status
            .ok_or_else(|| RuntimeError::NotFound {
                what: "sandbox",
                id: id.into(),
            })?;
        let attempt = st.metadata.as_ref().map_or(0, |m| m.attempt);
        let spec = Self::spec_of_labels(&st.labels, attempt);
        let ip = st
            .network
            .as_ref()
            .map(|n| n.ip.clone())
            .filter(|ip| !ip.is_empty())
            .unwrap_or_else(|| spec.host_ip.clone());
        self.sandboxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(id.to_string())
            .or_insert_with(|| self.sandbox_config(&spec));
        Ok(Sandbox {
            id: st.id,
            node: spec.node,
            pod_uid: spec.pod_uid,
            pod_name: spec.pod_name,
            namespace: spec.namespace,
            ip,
            ready: st.state == cri::PodSandboxState::SandboxReady as i32,
        })
    }

    /// Makes sure `image` is present (a pull is tried once: it fails where no registry can
    /// be reached, and the image is reported missing); its user, for `runAsNonRoot`.
    async fn ensure_image(&self, image: &str) -> Result<ImageUser> {
        if let Some(user) = self
            .images_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(image)
        {
            return Ok(user.clone());
        }
        let spec = cri::ImageSpec {
            image: image.to_string(),
            ..cri::ImageSpec::default()
        };
        let status = |spec: cri::ImageSpec| {
            let images = self.images.clone();
            async move {
                images
                    .clone()
                    .image_status(cri::ImageStatusRequest {
                        image: Some(spec),
                        verbose: false,
                    })
                    .await
                    .map_err(call("ImageStatus"))
                    .map(|r| r.into_inner().image)
            }
        };
        let found = match status(spec.clone()).await? {
            Some(found) => found,
            None => {
                self.images
                    .clone()
                    .pull_image(cri::PullImageRequest {
                        image: Some(spec.clone()),
                        ..cri::PullImageRequest::default()
                    })
                    .await
                    .map_err(|s| RuntimeError::ImageNotFound {
                        image: image.to_string(),
                        message: s.message().to_string(),
                    })?;
                status(spec).await?.unwrap_or_default()
            }
        };
        let user = ImageUser {
            uid: found.uid.map(|u| u.value),
            username: found.username,
        };
        self.images_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(image.to_string(), user.clone());
        Ok(user)
    }

    async fn status(&self, id: &str) -> Result<cri::ContainerStatus> {
        self.runtime
            .clone()
            .container_status(cri::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await
            .map_err(call("ContainerStatus"))?
            .into_inner()
            .status
            .ok_or_else(|| RuntimeError::NotFound {
                what: "container",
                id: id.into(),
            })
    }

    fn state_of(st: &cri::ContainerStatus) -> ContainerState {
        match cri::ContainerState::try_from(st.state) {
            Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running {
                started_at: time_of(st.started_at),
            },
            Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited(Exit {
                exit_code: st.exit_code,
                reason: st.reason.clone(),
                message: st.message.clone(),
                started_at: time_of(st.started_at),
                finished_at: time_of(st.finished_at),
            }),
            Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
            _ => ContainerState::Exited(Exit {
                exit_code: 255,
                reason: "Error".into(),
                message: "container state unknown to the runtime".into(),
                started_at: time_of(st.started_at),
                finished_at: time_of(st.finished_at),
            }),
        }
    }

    /// containerd (1.6 here) records an OOM kill when it handles the task's OOM event, which
    /// can come after the exit event: a container the kernel's OOM killer ended may show exit
    /// code 137 with reason "Error" for a while (containerd issue 12260). A container with a
    /// memory limit whose 137 is not "OOMKilled" is therefore asked about again for up to
    /// [`OOM_EVENT_GRACE`] before it is believed. One without a limit is believed at once, so
    /// the SIGKILL that ends a stop's grace period costs that container no wait. An OOM kill
    /// in the first instant after start, before containerd watches the container's cgroup,
    /// containerd never records (containerd issue 8180): such a container stays 137 "Error",
    /// as it does under the kubelet.
    async fn oom_settled(&self, id: &str, status: &cri::ContainerStatus, exit: Exit) -> Exit {
        if exit.exit_code != 137
            || exit.reason == OOM_KILLED
            || !status.labels.contains_key(labels::MEMORY_LIMIT)
        {
            return exit;
        }
        let deadline = tokio::time::Instant::now() + OOM_EVENT_GRACE;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            match self.container_state(id).await {
                Ok(ContainerState::Exited(again)) if again.reason == OOM_KILLED => return again,
                Ok(_) => {}
                // Removed meanwhile, or containerd did not answer: what was seen stands.
                Err(_) => break,
            }
        }
        exit
    }

    /// The container's exit, if its status says it has exited (OOM kills settled).
    async fn exit_of(&self, id: &str) -> Result<Option<Exit>> {
        let status = self.status(id).await?;
        Ok(match Self::state_of(&status) {
            ContainerState::Exited(exit) => Some(self.oom_settled(id, &status, exit).await),
            _ => None,
        })
    }
}

#[async_trait]
impl Runtime for CriRuntime {
    fn version(&self) -> String {
        self.version.clone()
    }

    fn id_scheme(&self) -> &'static str {
        "containerd"
    }

    async fn run_sandbox(&self, spec: &SandboxSpec) -> Result<Sandbox> {
        self.ensure_image(&self.config.pause_image).await?;
        let config = self.sandbox_config(spec);
        if let Err(e) = std::fs::create_dir_all(&config.log_directory) {
            return Err(RuntimeError::Call {
                call: "RunPodSandbox",
                message: format!("log directory {}: {e}", config.log_directory),
            });
        }
        let id = self
            .runtime
            .clone()
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .map_err(call("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id;
        self.sandboxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.clone(), config);
        self.sandbox_status(&id).await
    }

    async fn stop_sandbox(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map_err(call("StopPodSandbox"))?;
        Ok(())
    }

    async fn remove_sandbox(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map_err(call("RemovePodSandbox"))?;
        self.sandboxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
        Ok(())
    }

    async fn list_sandboxes(&self, node: &str) -> Result<Vec<Sandbox>> {
        let items = self
            .runtime
            .clone()
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(cri::PodSandboxFilter {
                    label_selector: HashMap::from([(labels::NODE.to_string(), node.to_string())]),
                    ..cri::PodSandboxFilter::default()
                }),
            })
            .await
            .map_err(call("ListPodSandbox"))?
            .into_inner()
            .items;
        let mut out = Vec::with_capacity(items.len());
        for sb in items {
            out.push(self.sandbox_status(&sb.id).await?);
        }
        Ok(out)
    }

    async fn create_container(&self, sandbox: &Sandbox, spec: &ContainerSpec) -> Result<String> {
        let image_user = self.ensure_image(&spec.image).await?;
        spec.security
            .verify_non_root(&image_user, &spec.name)
            .map_err(|message| RuntimeError::Config { message })?;
        let sandbox_config = self
            .sandboxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&sandbox.id)
            .cloned()
            .ok_or_else(|| RuntimeError::NotFound {
                what: "sandbox",
                id: sandbox.id.clone(),
            })?;
        let r = spec.resources;
        let labels: HashMap<String, String> = [
            (labels::POD_UID.to_string(), spec.pod_uid.clone()),
            (labels::CONTAINER_NAME.to_string(), spec.name.clone()),
            (labels::INIT.to_string(), spec.init.to_string()),
            (labels::ATTEMPT.to_string(), spec.attempt.to_string()),
        ]
        .into_iter()
        .chain(
            r.memory_limit_bytes
                .map(|b| (labels::MEMORY_LIMIT.to_string(), b.to_string())),
        )
        .collect();
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: spec.name.clone(),
                attempt: spec.attempt,
            }),
            image: Some(cri::ImageSpec {
                image: spec.image.clone(),
                ..cri::ImageSpec::default()
            }),
            command: spec.command.clone(),
            args: spec.args.clone(),
            working_dir: spec.working_dir.clone(),
            envs: spec
                .env
                .iter()
                .map(|(k, v)| cri::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            mounts: spec
                .mounts
                .iter()
                .map(|m| cri::Mount {
                    container_path: m.container_path.clone(),
                    host_path: m.host_path.to_string_lossy().into_owned(),
                    readonly: m.read_only,
                    propagation: match m.propagation {
                        Propagation::Private => cri::MountPropagation::PropagationPrivate,
                        Propagation::HostToContainer => {
                            cri::MountPropagation::PropagationHostToContainer
                        }
                        Propagation::Bidirectional => {
                            cri::MountPropagation::PropagationBidirectional
                        }
                    }
                    .into(),
                    ..cri::Mount::default()
                })
                .collect(),
            labels,
            log_path: format!("{}/{}.log", spec.name, spec.attempt),
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_shares: cpu_shares(r.cpu_request_milli),
                    cpu_period: r.cpu_limit_milli.map_or(0, |_| CPU_PERIOD),
                    cpu_quota: r
                        .cpu_limit_milli
                        .map_or(0, |m| (m * CPU_PERIOD / 1000).max(1000)),
                    memory_limit_in_bytes: r.memory_limit_bytes.unwrap_or(0),
                    ..cri::LinuxContainerResources::default()
                }),
                security_context: Some(container_security(
                    &spec.security,
                    sandbox_config
                        .linux
                        .as_ref()
                        .and_then(|l| l.security_context.as_ref())
                        .and_then(|s| s.namespace_options.clone()),
                )),
            }),
            ..cri::ContainerConfig::default()
        };
        if let Some(dir) = Path::new(&sandbox_config.log_directory)
            .join(&spec.name)
            .to_str()
            .map(PathBuf::from)
            && let Err(e) = std::fs::create_dir_all(&dir)
        {
            return Err(RuntimeError::Call {
                call: "CreateContainer",
                message: format!("log directory {}: {e}", dir.display()),
            });
        }
        Ok(self
            .runtime
            .clone()
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox.id.clone(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            })
            .await
            .map_err(call("CreateContainer"))?
            .into_inner()
            .container_id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .start_container(cri::StartContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .map_err(call("StartContainer"))?;
        Ok(())
    }

    async fn container_state(&self, id: &str) -> Result<ContainerState> {
        Ok(Self::state_of(&self.status(id).await?))
    }

    async fn image_ref(&self, id: &str) -> Result<String> {
        Ok(self.status(id).await?.image_ref)
    }

    async fn wait_container(&self, id: &str) -> Result<Exit> {
        let mut states = self.states.clone();
        states.mark_unchanged();
        if let Some(exit) = self.exit_of(id).await? {
            return Ok(exit);
        }
        loop {
            if states.changed().await.is_err() {
                return Err(RuntimeError::Call {
                    call: "ListContainers",
                    message: "the relist task ended".into(),
                });
            }
            let state = states.borrow_and_update().get(id).copied();
            // Gone from the list (removed) or exited: ask for the details once.
            if state.is_none_or(|s| s == cri::ContainerState::ContainerExited as i32)
                && let Some(exit) = self.exit_of(id).await?
            {
                return Ok(exit);
            }
        }
    }

    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<()> {
        self.runtime
            .clone()
            .stop_container(cri::StopContainerRequest {
                container_id: id.to_string(),
                timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            })
            .await
            .map_err(call("StopContainer"))?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .remove_container(cri::RemoveContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .map_err(call("RemoveContainer"))?;
        Ok(())
    }

    async fn list_containers(&self, sandbox_id: &str) -> Result<Vec<Container>> {
        let items = self
            .runtime
            .clone()
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    pod_sandbox_id: sandbox_id.to_string(),
                    ..cri::ContainerFilter::default()
                }),
            })
            .await
            .map_err(call("ListContainers"))?
            .into_inner()
            .containers;
        let mut out = Vec::with_capacity(items.len());
        for c in items {
            let st = self.status(&c.id).await?;
            let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
            out.push(Container {
                id: c.id.clone(),
                sandbox_id: c.pod_sandbox_id.clone(),
                pod_uid: label(labels::POD_UID),
                name: c
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default(),
                init: label(labels::INIT) == "true",
                attempt: c.metadata.as_ref().map_or(0, |m| m.attempt),
                state: Self::state_of(&st),
                image_ref: st.image_ref.clone(),
            });
        }
        Ok(out)
    }

    async fn logs(&self, id: &str, tail: Option<usize>) -> Result<Vec<u8>> {
        let path = self.status(id).await?.log_path;
        let data = tokio::fs::read(&path)
            .await
            .map_err(|e| RuntimeError::Call {
                call: "logs",
                message: format!("{path}: {e}"),
            })?;
        Ok(match tail {
            None => data,
            Some(n) => {
                let lines: Vec<&[u8]> = data.split_inclusive(|b| *b == b'\n').collect();
                lines[lines.len().saturating_sub(n)..].concat()
            }
        })
    }

    async fn exec(&self, id: &str, command: &[String], timeout: Duration) -> Result<ExecOutput> {
        let r = self
            .runtime
            .clone()
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.to_string(),
                cmd: command.to_vec(),
                timeout: i64::try_from(timeout.as_secs().max(1)).unwrap_or(i64::MAX),
            })
            .await
            .map_err(call("ExecSync"))?
            .into_inner();
        let mut output = r.stdout;
        output.extend(r.stderr);
        Ok(ExecOutput {
            exit_code: r.exit_code,
            output,
        })
    }

    async fn session(&self, id: &str, spec: &SessionSpec) -> Result<Session> {
        // A terminal has one output stream: CRI refuses a tty with a separate stderr.
        let stderr = spec.stderr && !spec.tty;
        let (name, url) = if spec.command.is_empty() {
            let request = cri::AttachRequest {
                container_id: id.to_string(),
                stdin: spec.stdin,
                tty: spec.tty,
                stdout: spec.stdout,
                stderr,
            };
            let r = self.runtime.clone().attach(request).await;
            ("Attach", r.map_err(call("Attach"))?.into_inner().url)
        } else {
            let request = cri::ExecRequest {
                container_id: id.to_string(),
                cmd: spec.command.clone(),
                tty: spec.tty,
                stdin: spec.stdin,
                stdout: spec.stdout,
                stderr,
            };
            let r = self.runtime.clone().exec(request).await;
            ("Exec", r.map_err(call("Exec"))?.into_inner().url)
        };
        session::open(&url, self.config.netns.as_deref(), name).await
    }

    async fn port_forward(&self, sandbox_id: &str, port: u16) -> Result<PortConnection> {
        let request = cri::PortForwardRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            port: vec![i32::from(port)],
        };
        let r = self.runtime.clone().port_forward(request).await;
        let url = r.map_err(call("PortForward"))?.into_inner().url;
        session::forward(&url, port, self.config.netns.as_deref()).await
    }

    /// Pods' addresses are containerd's network namespace's.
    async fn tcp_probe(&self, ip: &str, port: u16, timeout: Duration) -> Result<bool> {
        Ok(crate::runtime::tcp_connects(self.config.netns.as_deref(), ip, port, timeout).await)
    }

    async fn http_probe(&self, ip: &str, port: u16, path: &str, timeout: Duration) -> Result<bool> {
        let netns = self.config.netns.as_deref();
        Ok(crate::runtime::http_get_succeeds(netns, ip, port, path, timeout).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_settings_follow_the_kubelet() {
        assert_eq!(cpu_shares(0), 2);
        assert_eq!(cpu_shares(250), 256);
        assert_eq!(cpu_shares(2000), 2048);
    }
}
