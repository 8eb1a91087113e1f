//! Collection of implementations of usually used traits defined by Openraft

pub use crate::async_runtime::TokioRuntime;
pub use crate::entry::Entry;
pub use crate::node::BasicNode;
pub use crate::node::EmptyNode;
pub use crate::raft::responder::impls::OneshotResponder;
