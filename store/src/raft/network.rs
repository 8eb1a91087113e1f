//! The client side of the peer transport: Raft RPCs to other members.
//!
//! AppendEntries go on the peer stream ([`super::stream`]), and over gRPC to a member that
//! does not speak it. Everything else goes over gRPC: one tonic channel per peer, created
//! lazily and cached for the life of the process (a channel reconnects by itself). Raft
//! messages travel as bincode payloads inside `RaftMessage`; snapshots are streamed from their
//! file in 1 MiB chunks over one `InstallSnapshot` call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Future;
use openraft::error::{
    Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, ReplicationClosed,
    StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, Vote};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use skiff_proto::raft::v1::raft_peer_client::RaftPeerClient;
use skiff_proto::raft::v1::{RaftMessage, SnapshotChunk};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tonic::transport::{Channel, Endpoint};

use super::relay::Relays;
use super::stream::{CallError, Dialer, Streams};
use super::{Member, Snapshot, SnapshotMeta, TypeConfig};
use crate::backend;

/// Bytes per streamed snapshot chunk.
pub const SNAPSHOT_CHUNK: usize = 1 << 20;

/// The first chunk's header: either a whole snapshot follows in this stream, or (openraft's
/// chunked protocol) the header carries one chunk request by itself.
#[derive(Debug, Serialize, Deserialize)]
pub enum SnapshotHeader {
    Full { vote: Vote<u64>, meta: SnapshotMeta },
    Chunk(InstallSnapshotRequest<TypeConfig>),
}

/// Channels to peers, shared by every Raft replication stream and by request forwarding,
/// and the peer-stream and relay connections AppendEntries and forwarded requests travel on.
#[derive(Clone)]
pub struct Channels {
    inner: Arc<Mutex<HashMap<String, Channel>>>,
    /// How `https://` peers are dialled (none: they cannot be).
    tls: Option<Arc<rustls::ClientConfig>>,
    streams: Streams,
    relays: Relays,
}

impl Default for Channels {
    fn default() -> Channels {
        Channels::new(None)
    }
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels")
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Channels {
    /// Channels that dial `https://` peers with `tls`.
    pub fn new(tls: Option<Arc<rustls::ClientConfig>>) -> Channels {
        Channels {
            inner: Arc::default(),
            streams: Streams::new(Dialer::new(tls.clone())),
            relays: Relays::new(Dialer::new(tls.clone())),
            tls,
        }
    }

    /// The cached channel to `url`, created (lazily connecting) on first use. An `https://`
    /// URL is dialled over TLS (refused when this member has no peer certificate).
    pub fn get(&self, url: &str) -> Result<Channel, ChannelError> {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = map.get(url) {
            return Ok(c.clone());
        }
        // TLS is this member's own connector's (tonic is handed the plain-HTTP form of the
        // URL, so its own TLS, when some other crate's feature builds it in, stays out).
        let (dial, tls) = match url.strip_prefix("https://") {
            Some(rest) => (
                format!("http://{rest}"),
                Some(self.tls.clone().ok_or(ChannelError::NoTls)?),
            ),
            None => (url.to_string(), None),
        };
        let endpoint = Endpoint::from_shared(dial)?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5));
        let channel = match tls {
            Some(tls) => endpoint.connect_with_connector_lazy(crate::tls::connector(tls)),
            None => endpoint.connect_lazy(),
        };
        map.insert(url.to_string(), channel.clone());
        Ok(channel)
    }

    /// The relay connections forwarded requests travel on.
    pub fn relays(&self) -> &Relays {
        &self.relays
    }

    pub fn peer_client(&self, url: &str) -> Result<RaftPeerClient<Channel>, ChannelError> {
        Ok(RaftPeerClient::new(self.get(url)?)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX))
    }
}

/// Why a channel to a peer could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error(transparent)]
    Url(#[from] tonic::transport::Error),
    #[error("an https:// peer URL, and this member has no --peer-cert-file to dial it with")]
    NoTls,
}

/// When each peer last answered a Raft RPC of this member's replication streams (heartbeats
/// included), which run only while it leads: how the leader tells which members are up, for
/// the strict reconfiguration check (see [`crate::reconfig`]). openraft's own metrics give the
/// matched log index per follower but no time, and an idle cluster matches as well with a
/// follower that died after the last write.
#[derive(Debug, Clone, Default)]
pub struct PeerActivity {
    last_answer: Arc<Mutex<HashMap<u64, Instant>>>,
}

impl PeerActivity {
    fn answered(&self, peer: u64) {
        self.lock().insert(peer, Instant::now());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Instant>> {
        self.last_answer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `peer` answered within the last `window`.
    pub fn answered_within(&self, peer: u64, window: Duration) -> bool {
        self.lock()
            .get(&peer)
            .is_some_and(|t| t.elapsed() <= window)
    }
}

/// The network factory handed to openraft.
#[derive(Debug, Clone, Default)]
pub struct Network {
    pub channels: Channels,
    /// The log store's encodings of its newest entries, which AppendEntries carry as they are.
    pub encodings: super::log_store::HeldEncodings,
    pub activity: PeerActivity,
    pub metrics: crate::metrics::StoreMetrics,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: u64, node: &Member) -> PeerConnection {
        PeerConnection {
            target,
            url: node.peer_urls.first().cloned().unwrap_or_default(),
            channels: self.channels.clone(),
            activity: self.activity.clone(),
            encodings: self.encodings.clone(),
            rtt: self
                .metrics
                .peer_rtt
                .get_or_create(&crate::metrics::PeerLabel {
                    To: format!("{target:x}"),
                })
                .clone(),
        }
    }
}

#[derive(Debug)]
pub struct PeerConnection {
    target: u64,
    url: String,
    channels: Channels,
    activity: PeerActivity,
    encodings: super::log_store::HeldEncodings,
    /// Heartbeats' round trips to this peer.
    rtt: prometheus_client::metrics::histogram::Histogram,
}

type RpcErr<E = openraft::error::Infallible> = RPCError<u64, Member, RaftError<u64, E>>;

fn unreachable_err<E: std::error::Error>(e: impl std::fmt::Display) -> RPCError<u64, Member, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(e.to_string())))
}

fn network_err<E: std::error::Error>(e: impl std::fmt::Display) -> RPCError<u64, Member, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(e.to_string())))
}

fn status_err<E: std::error::Error>(s: tonic::Status) -> RPCError<u64, Member, E> {
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::Cancelled => unreachable_err(s.message()),
        _ => network_err(format!("{}: {}", s.code(), s.message())),
    }
}

fn decode_reply<T: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
    payload: &[u8],
    target: u64,
) -> Result<T, RPCError<u64, Member, RaftError<u64, E>>> {
    let reply: Result<T, RaftError<u64, E>> = backend::decode(payload).map_err(network_err)?;
    reply.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(target, e)))
}

impl PeerConnection {
    fn client(&self) -> Result<RaftPeerClient<Channel>, ChannelError> {
        self.channels.peer_client(&self.url)
    }

    fn request<T>(&self, payload: T, option: &RPCOption) -> tonic::Request<T> {
        let mut req = tonic::Request::new(payload);
        req.set_timeout(option.hard_ttl());
        req
    }
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RpcErr> {
        let heartbeat = rpc.entries.is_empty();
        let payload = self.encodings.encode_append_entries(&rpc);
        let sent = Instant::now();
        let streamed = self
            .channels
            .streams
            .append_entries(&self.url, &payload, option.hard_ttl())
            .await
            .map_err(|e| match e {
                CallError::Unreachable(e) => unreachable_err(e),
                CallError::Network(e) => network_err(e),
            })?;
        let reply = match streamed {
            Some(reply) => reply,
            // A member of a release from before the peer stream.
            None => {
                let mut client = self.client().map_err(unreachable_err)?;
                client
                    .append_entries(self.request(RaftMessage { payload }, &option))
                    .await
                    .map_err(status_err)?
                    .into_inner()
                    .payload
            }
        };
        if heartbeat {
            self.rtt.observe(sent.elapsed().as_secs_f64());
        }
        self.activity.answered(self.target);
        decode_reply(&reply, self.target)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RpcErr<InstallSnapshotError>> {
        let mut client = self.client().map_err(unreachable_err)?;
        let chunk = SnapshotChunk {
            header: backend::encode(&SnapshotHeader::Chunk(rpc)),
            offset: 0,
            data: Vec::new(),
            done: true,
        };
        let stream = futures::stream::iter([chunk]);
        let reply = client
            .install_snapshot(self.request(stream, &option))
            .await
            .map_err(status_err)?;
        decode_reply(&reply.into_inner().payload, self.target)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RpcErr> {
        let mut client = self.client().map_err(unreachable_err)?;
        let msg = RaftMessage {
            payload: backend::encode(&rpc),
        };
        let reply = client
            .vote(self.request(msg, &option))
            .await
            .map_err(status_err)?;
        decode_reply(&reply.into_inner().payload, self.target)
    }

    /// Streams the whole snapshot in one call: the header with the vote and metadata first,
    /// then the data in [`SNAPSHOT_CHUNK`]-byte pieces.
    async fn full_snapshot(
        &mut self,
        vote: Vote<u64>,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<TypeConfig, Fatal<u64>>> {
        let mut client = self.client().map_err(|e| {
            StreamingError::Unreachable(Unreachable::new(&std::io::Error::other(e.to_string())))
        })?;
        let header = backend::encode(&SnapshotHeader::Full {
            vote,
            meta: snapshot.meta.clone(),
        });
        let mut data = snapshot.snapshot;
        let read_err = |e: std::io::Error| {
            StreamingError::Network(NetworkError::new(&std::io::Error::other(format!(
                "reading snapshot {}: {e}",
                snapshot.meta.snapshot_id
            ))))
        };
        let len = data.len().await.map_err(read_err)?;
        data.seek(std::io::SeekFrom::Start(0))
            .await
            .map_err(read_err)?;
        // Read from the file as the stream is polled: one chunk in memory at a time.
        let target = self.target;
        let chunks = futures::stream::unfold(
            (data, 0u64, Some(header)),
            move |(mut data, offset, header)| async move {
                if offset >= len && header.is_none() {
                    return None;
                }
                let end = (offset + SNAPSHOT_CHUNK as u64).min(len);
                let mut buf = vec![0u8; (end - offset) as usize];
                if let Err(e) = data.read_exact(&mut buf).await {
                    // Ending the stream early makes the receiver refuse the snapshot.
                    tracing::warn!(peer = target, error = %e, "reading a snapshot to send");
                    return None;
                }
                let chunk = SnapshotChunk {
                    header: header.unwrap_or_default(),
                    offset,
                    data: buf,
                    done: end == len,
                };
                Some((chunk, (data, end, None)))
            },
        );
        // Snapshots can be large: the deadline is per chunk rather than for the whole stream.
        let n = len.div_ceil(SNAPSHOT_CHUNK as u64).max(1) as u32;
        let mut req = tonic::Request::new(chunks);
        req.set_timeout(option.hard_ttl() * n);
        let call = client.install_snapshot(req);
        let reply = tokio::select! {
            r = call => r,
            closed = cancel => return Err(StreamingError::Closed(closed)),
        };
        let reply = reply.map_err(|s| match s.code() {
            tonic::Code::Unavailable => StreamingError::Unreachable(Unreachable::new(
                &std::io::Error::other(s.message().to_string()),
            )),
            _ => StreamingError::Network(NetworkError::new(&std::io::Error::other(
                s.message().to_string(),
            ))),
        })?;
        let reply: Result<SnapshotResponse<u64>, Fatal<u64>> =
            backend::decode(&reply.into_inner().payload).map_err(|e| {
                StreamingError::Network(NetworkError::new(&std::io::Error::other(e.to_string())))
            })?;
        reply.map_err(|f| {
            StreamingError::RemoteError(openraft::error::RemoteError::new(self.target, f))
        })
    }
}
