//! `hookline-fanout`: parses flags and environment, sets up logging, runs.

use clap::Parser;

/// hookline fanout service.
#[derive(Debug, Parser)]
#[command(name = "hookline-fanout", version, about)]
struct Cli {
    #[command(flatten)]
    config: hookline_fanout::Config,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let common = &cli.config.common;
    hookline_runtime::telemetry::init_logging(&common.log, common.log_format)?;
    let shutdown = hookline_runtime::shutdown::on_signals();
    hookline_fanout::run(cli.config, shutdown).await?;
    Ok(())
}
