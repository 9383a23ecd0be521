//! `hookline-dlq-sink`: parses flags and environment, sets up logging, and runs the sink.

use clap::Parser;

/// hookline dlq-sink: a durable archive of dead letters and quarantined events.
#[derive(Debug, Parser)]
#[command(name = "hookline-dlq-sink", version, about)]
struct Cli {
    #[command(flatten)]
    config: hookline_dlq_sink::Config,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let common = &cli.config.common;
    hookline_runtime::telemetry::init_logging(&common.log, common.log_format)?;
    let shutdown = hookline_runtime::shutdown::on_signals();
    hookline_dlq_sink::run(cli.config, shutdown).await?;
    Ok(())
}
