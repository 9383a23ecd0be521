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

/// Runs `stage` to completion, but once `shutdown` fires gives it at most
/// `grace` to drain; `on_drain` runs when shutdown starts (e.g. to report
/// unready). Returns `None` when the stage overran the grace period.
pub async fn within_grace<T>(
    stage: impl std::future::Future<Output = T>,
    shutdown: &CancellationToken,
    grace: std::time::Duration,
    on_drain: impl FnOnce(),
) -> Option<T> {
    tokio::pin!(stage);
    tokio::select! {
        out = &mut stage => Some(out),
        _ = shutdown.cancelled() => {
            on_drain();
            match tokio::time::timeout(grace, &mut stage).await {
                Ok(out) => Some(out),
                Err(_) => {
                    tracing::error!(?grace, "drain did not finish within the shutdown grace");
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stage_that_drains_in_time_returns_its_result() {
        let stop = CancellationToken::new();
        let s = stop.clone();
        let stage = async move {
            s.cancelled().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            7
        };
        stop.cancel();
        let mut drained = false;
        let out = within_grace(stage, &stop, Duration::from_secs(5), || drained = true).await;
        assert_eq!(out, Some(7));
        assert!(drained);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stage_that_overruns_the_grace_is_abandoned() {
        let stop = CancellationToken::new();
        stop.cancel();
        let stage = tokio::time::sleep(Duration::from_secs(60));
        let out = within_grace(stage, &stop, Duration::from_secs(5), || {}).await;
        assert_eq!(out, None);
    }
}
