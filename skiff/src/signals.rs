//! How the long-running commands learn they should stop: Ctrl-C or SIGTERM.

/// Resolves on the first Ctrl-C (SIGINT) or SIGTERM; without a SIGTERM handler (which only
/// fails if the process is out of file descriptors at start-up), on Ctrl-C alone.
pub async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "no SIGTERM handler; stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
