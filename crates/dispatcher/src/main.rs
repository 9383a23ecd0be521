//! `hookline-dispatcher`: parses flags and environment, sets up logging, runs.

use std::process::ExitCode;

use clap::Parser;

/// hookline dispatcher: signed webhook deliveries with retries and dead letters.
#[derive(Debug, Parser)]
#[command(name = "hookline-dispatcher", version, about)]
struct Cli {
    #[command(flatten)]
    config: hookline_dispatcher::Config,
}

#[tokio::main]
async fn main() -> ExitCode {
    // One `Error: ` line of the Display chain, no backtrace (see hookline-fanout).
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => hookline_runtime::report_error(e.as_ref()),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let common = &cli.config.common;
    hookline_runtime::telemetry::init_logging(&common.log, common.log_format)?;
    let signals = hookline_runtime::shutdown::on_signals();
    let stage = hookline_dispatcher::run(cli.config, signals.token());
    match signals.unless_forced(stage).await {
        Ok(result) => result?,
        Err(_) => std::process::exit(hookline_runtime::shutdown::FORCED_EXIT_CODE),
    }
    Ok(())
}
