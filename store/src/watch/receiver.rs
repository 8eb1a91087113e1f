//! The receiving end of a watch stream's queue, which tells the catch-up task when a blocked
//! stream has room again.
//!
//! A stream whose client stops reading fills its queue; its watchers are parked and the
//! catch-up task marks the stream *blocked* and leaves it alone: no reads, no retries, no
//! locks taken on its behalf. The one party that knows when the client reads again is this
//! receiver, so it wakes the catch-up task once the queue has drained to a useful amount of
//! room, and a stuck client costs the member nothing but its queued messages.
//!
//! ```text
//!   catch-up: queue full → gate.blocked = true → recheck room (a drain may have raced)
//!   receiver: message taken → blocked and room ≥ threshold → blocked = false, wake catch-up
//! ```

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::sync::{Notify, mpsc};

use super::WatchMessage;

/// Whether the catch-up task is waiting for a stream's client to read.
#[derive(Debug, Default)]
pub(super) struct Gate {
    blocked: AtomicBool,
}

impl Gate {
    pub(super) fn is_blocked(&self) -> bool {
        self.blocked.load(Ordering::SeqCst)
    }

    /// Marks the stream blocked unless `tx` has room after all (a drain that raced with the
    /// caller's check). Returns whether it is blocked.
    pub(super) fn block(&self, tx: &mpsc::Sender<WatchMessage>) -> bool {
        self.blocked.store(true, Ordering::SeqCst);
        if tx.capacity() > 0 {
            self.blocked.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }
}

/// A watch stream's queue, as its service reads it.
#[derive(Debug)]
pub struct WatchReceiver {
    rx: mpsc::Receiver<WatchMessage>,
    gate: Arc<Gate>,
    wake: Arc<Notify>,
    /// Free slots at which a blocked stream is worth resuming.
    threshold: usize,
}

impl WatchReceiver {
    pub(super) fn new(
        rx: mpsc::Receiver<WatchMessage>,
        gate: Arc<Gate>,
        wake: Arc<Notify>,
    ) -> WatchReceiver {
        let threshold = (rx.max_capacity() / 4).clamp(1, 64);
        WatchReceiver {
            rx,
            gate,
            wake,
            threshold,
        }
    }

    fn taken(&self) {
        if self.gate.is_blocked()
            && self.rx.capacity() >= self.threshold
            && self.gate.blocked.swap(false, Ordering::SeqCst)
        {
            self.wake.notify_one();
        }
    }

    pub async fn recv(&mut self) -> Option<WatchMessage> {
        let msg = self.rx.recv().await;
        self.taken();
        msg
    }

    /// Whether no message is queued.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    pub fn try_recv(&mut self) -> Result<WatchMessage, mpsc::error::TryRecvError> {
        let msg = self.rx.try_recv();
        self.taken();
        msg
    }
}

impl futures::Stream for WatchReceiver {
    type Item = WatchMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchMessage>> {
        let me = self.get_mut();
        let polled = me.rx.poll_recv(cx);
        if polled.is_ready() {
            me.taken();
        }
        polled
    }
}
