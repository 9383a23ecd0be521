//! Turns SIGTERM and Ctrl-C into a cancellation token, so every task stops
//! taking work through the same signal. A second signal ends the wait for the
//! drain with [`RuntimeError::Forced`]; the binary exits then (the library never
//! exits the process itself).

use tokio_util::sync::CancellationToken;

use crate::RuntimeError;

/// The exit status of a process a second signal stopped while it drained
/// (128 + SIGINT, as shells report an interrupted command).
pub const FORCED_EXIT_CODE: i32 = 130;

/// The shutdown signals of the process: the first cancels [`Signals::token`],
/// the second forces [`Signals::unless_forced`] to give up on the drain.
#[derive(Debug, Clone)]
pub struct Signals {
    drain: CancellationToken,
    forced: CancellationToken,
}

impl Signals {
    /// The token cancelled on the first signal: hand it to the stage.
    pub fn token(&self) -> CancellationToken {
        self.drain.clone()
    }

    /// Runs `stage` to its end, unless a second signal comes first: then
    /// [`RuntimeError::Forced`], for an operator who does not want to wait for
    /// the grace period; `main` exits with [`FORCED_EXIT_CODE`] at once.
    pub async fn unless_forced<T>(
        &self,
        stage: impl std::future::Future<Output = T>,
    ) -> Result<T, RuntimeError> {
        tokio::select! {
            out = stage => Ok(out),
            _ = self.forced.cancelled() => Err(RuntimeError::Forced),
        }
    }
}

/// Listens for SIGTERM and SIGINT: the first cancels the token, the second
/// forces the exit (see [`Signals`]).
pub fn on_signals() -> Signals {
    let signals = Signals {
        drain: CancellationToken::new(),
        forced: CancellationToken::new(),
    };
    let trigger = signals.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested; draining");
        trigger.drain.cancel();
        wait_for_signal().await;
        tracing::warn!("second signal; exiting without draining");
        trigger.forced.cancel();
    });
    signals
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

    fn signals() -> Signals {
        Signals {
            drain: CancellationToken::new(),
            forced: CancellationToken::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stage_that_drains_is_not_forced() {
        let s = signals();
        s.drain.cancel();
        let stage = tokio::time::sleep(Duration::from_secs(5));
        assert!(s.unless_forced(stage).await.is_ok());
        assert!(s.token().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_signal_returns_forced_instead_of_exiting() {
        let s = signals();
        s.drain.cancel();
        let forced = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            forced.forced.cancel();
        });
        let stage = tokio::time::sleep(Duration::from_secs(60));
        let got = s.unless_forced(stage).await;
        assert!(matches!(got, Err(RuntimeError::Forced)), "{got:?}");
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
