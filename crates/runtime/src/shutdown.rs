//! Turns SIGTERM and Ctrl-C into a cancellation token, so every task stops
//! taking work through the same signal. A second signal exits at once.

use tokio_util::sync::CancellationToken;

/// Returns a token cancelled on the first SIGTERM or SIGINT.
///
/// A second signal while draining terminates the process with status 130, for
/// an operator who does not want to wait for the grace period.
pub fn on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested; draining");
        trigger.cancel();
        wait_for_signal().await;
        tracing::warn!("second signal; exiting without draining");
        std::process::exit(130);
    });
    token
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the service");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
