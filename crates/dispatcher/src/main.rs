//! `hookline-dispatcher`: parses flags and environment, sets up logging, and
//! runs the service or the `capacity` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// jemalloc is the whole process's malloc, librdkafka's buffers included:
/// glibc's heap fragmented under a backlog and kept its peak. Its options are
/// built in from `.cargo/config.toml` (docs/operating.md#memory).
#[cfg(all(feature = "jemalloc", target_os = "linux"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// hookline dispatcher: signed webhook deliveries with retries and dead letters.
#[derive(Debug, Parser)]
#[command(name = "hookline-dispatcher", version, about)]
struct Cli {
    #[command(flatten)]
    config: hookline_dispatcher::Config,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Who holds the replicas' capacity: promoted overflow lanes, and the top
    /// tenants and subscriptions by worker-seconds or backlog (reads `/capacity`).
    Capacity(hookline_dispatcher::capacity::CapacityArgs),
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
    if let Some(Command::Capacity(args)) = cli.command {
        hookline_runtime::telemetry::init_logging("warn", common.log_format)?;
        let mut stdout = std::io::stdout().lock();
        hookline_dispatcher::capacity::run(&args, &mut stdout).await?;
        return Ok(());
    }
    hookline_runtime::telemetry::init_logging(&common.log, common.log_format)?;
    let signals = hookline_runtime::shutdown::on_signals();
    let stage = hookline_dispatcher::run(cli.config, signals.token());
    match signals.unless_forced(stage).await {
        Ok(result) => result?,
        Err(_) => std::process::exit(hookline_runtime::shutdown::FORCED_EXIT_CODE),
    }
    Ok(())
}
