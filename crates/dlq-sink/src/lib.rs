//! The dlq-sink stage: see DESIGN.md. `run` serves the operations endpoint and
//! stops cleanly when the shutdown token is cancelled.

use clap::Args;
use hookline_runtime::{config::CommonArgs, ops::Ops, RuntimeError};
use tokio_util::sync::CancellationToken;

/// The stage name used in metrics and logs.
pub const STAGE: &str = "dlq_sink";

/// Configuration of the dlq-sink service.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Options shared by every service.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs the service until `shutdown` is cancelled.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), RuntimeError> {
    let ops = Ops::start(config.common.http_addr, STAGE).await?;
    ops.health.set_ready(STAGE, Ok(()));
    shutdown.cancelled().await;
    ops.health.set_draining();
    ops.stop().await;
    Ok(())
}
