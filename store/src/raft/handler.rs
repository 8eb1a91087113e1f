//! What the peer transport hands up to the member it serves, as etcd's `rafthttp.Raft`
//! interface does: the transport (the peer stream, the relay) reads frames off connections
//! and knows no member; the member implements this trait and is handed in when the peer
//! listener starts.

use std::future::Future;

use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};

use super::TypeConfig;
use crate::error::StoreError;

/// The receiving end of the peer transport's fast paths.
pub trait PeerHandler: Clone + Send + Sync + 'static {
    /// An AppendEntries (a heartbeat when it carries no entries) from the leader, whichever
    /// way it came (the `RaftPeer` service or the peer stream, see [`super::stream`]).
    fn take_append_entries(
        &self,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> impl Future<Output = Result<Result<AppendEntriesResponse<u64>, RaftError<u64>>, StoreError>>
    + Send;

    /// A request a follower forwarded to this member as its leader, whichever way it came
    /// (the `RaftPeer` service or the relay, see [`super::relay`]): the encoded reply, or why
    /// the request could not be decoded.
    fn take_forwarded(
        &self,
        payload: &[u8],
    ) -> impl Future<Output = Result<Vec<u8>, String>> + Send;
}
