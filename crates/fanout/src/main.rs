//! `hookline-fanout`: parses flags and environment, sets up logging, and runs
//! the service or a `subscriptions`, `topics` or `acls` subcommand.

use clap::{Parser, Subcommand};
use hookline_fanout::cli::SubscriptionsCmd;

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
    /// Print the least-privilege ACLs of every stage and command (a table, or
    /// kafka-acls.sh command lines with --format kafka-acls).
    Acls(hookline_runtime::acls::AclsArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let common = &cli.config.common;
    match cli.command {
        Some(Command::Subscriptions(cmd)) => {
            // The CLI keeps stdout for results; logs go to stderr at warn.
            hookline_runtime::telemetry::init_logging("warn", common.log_format)?;
            let mut stdout = std::io::stdout().lock();
            hookline_fanout::cli::run(common, cmd, &mut stdout).await?;
        }
        Some(Command::Topics(args)) => {
            hookline_runtime::telemetry::init_logging("warn", common.log_format)?;
            let mut stdout = std::io::stdout().lock();
            hookline_runtime::provision::run(common, &args, &mut stdout).await?;
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
