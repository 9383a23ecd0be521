//! `hookline-fanout`: parses flags and environment, sets up logging, and runs
//! the service or a `subscriptions`, `topics`, `events` or `acls` subcommand.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hookline_fanout::cli::SubscriptionsCmd;

/// jemalloc is the whole process's malloc, librdkafka's buffers included:
/// glibc's heap fragmented under a backlog and kept its peak. Its options are
/// built in from `.cargo/config.toml` (docs/operating.md#memory).
#[cfg(all(feature = "jemalloc", target_os = "linux"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// hookline fanout: events to per-subscription deliveries, exactly once.
#[derive(Debug, Parser)]
#[command(name = "hookline-fanout", version, about)]
struct Cli {
    #[command(flatten)]
    config: hookline_fanout::Config,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Manage the subscription table.
    #[command(subcommand)]
    Subscriptions(SubscriptionsCmd),
    /// Create or correct every hookline topic (previews unless --execute).
    Topics(hookline_runtime::provision::TopicsArgs),
    /// Publish a sample domain event (for a first try; no kcat needed).
    #[command(subcommand)]
    Events(hookline_fanout::events_cli::EventsCmd),
    /// Print the least-privilege ACLs of every stage and command (a table, or
    /// kafka-acls.sh command lines with --format kafka-acls).
    Acls(hookline_runtime::acls::AclsArgs),
    /// Who fanout routes and reads past, per replica (reads `/capacity`).
    Capacity(hookline_fanout::capacity::CapacityArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    // Errors print as one `Error: ` line of their Display chain, never as
    // anyhow's Debug form (which adds a backtrace under RUST_BACKTRACE=1).
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => hookline_runtime::report_error(e.as_ref()),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let common = &cli.config.common;
    match cli.command {
        Some(Command::Subscriptions(cmd)) => {
            // The CLI keeps stdout for results; logs go to stderr at warn.
            hookline_runtime::telemetry::init_logging("warn", common.log_format)?;
            let mut stdout = std::io::stdout().lock();
            hookline_fanout::cli::run(common, cmd, &mut stdout).await?;
        }
        Some(Command::Events(cmd)) => {
            hookline_runtime::telemetry::init_logging("warn", common.log_format)?;
            let mut stdout = std::io::stdout().lock();
            hookline_fanout::events_cli::run(common, cmd, &mut stdout).await?;
        }
        Some(Command::Topics(args)) => {
            hookline_runtime::telemetry::init_logging("warn", common.log_format)?;
            let mut stdout = std::io::stdout().lock();
            hookline_runtime::provision::run(common, &args, &mut stdout).await?;
        }
        Some(Command::Capacity(args)) => {
            hookline_runtime::telemetry::init_logging("warn", common.log_format)?;
            let mut stdout = std::io::stdout().lock();
            hookline_fanout::capacity::run(&args, &mut stdout).await?;
        }
        Some(Command::Acls(args)) => {
            hookline_runtime::telemetry::init_logging("warn", common.log_format)?;
            let text = hookline_runtime::acls::render(common, &args)?;
            std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())?;
        }
        None => {
            hookline_runtime::telemetry::init_logging(&common.log, common.log_format)?;
            let signals = hookline_runtime::shutdown::on_signals();
            let stage = hookline_fanout::run(cli.config, signals.token());
            match signals.unless_forced(stage).await {
                Ok(result) => result?,
                Err(_) => std::process::exit(hookline_runtime::shutdown::FORCED_EXIT_CODE),
            }
        }
    }
    Ok(())
}
