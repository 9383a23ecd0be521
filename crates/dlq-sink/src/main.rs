//! `hookline-dlq-sink`: parses flags and environment, sets up logging, and runs the sink or
//! an operator subcommand, exiting with the documented codes.

use std::process::ExitCode;

use clap::{error::ErrorKind, Parser, Subcommand};
use hookline_dlq_sink::cli::{EXIT_CODES_HELP, EXIT_OK, EXIT_USAGE};

/// jemalloc is the whole process's malloc, librdkafka's buffers included:
/// glibc's heap fragmented under a backlog and kept its peak. Its options are
/// built in from `.cargo/config.toml` (docs/operating.md#memory).
#[cfg(all(feature = "jemalloc", target_os = "linux"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// hookline dlq-sink: a durable archive of dead letters and quarantined events, and the
/// operator commands to inspect and replay them. With no subcommand, runs the sink.
#[derive(Debug, Parser)]
#[command(name = "hookline-dlq-sink", version, about, after_help = EXIT_CODES_HELP)]
struct Cli {
    #[command(flatten)]
    config: hookline_dlq_sink::Config,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List or count dead letters (or quarantined events) in the topic or the archive.
    /// Results on stdout; progress and logs on stderr. Reads by assignment, never commits.
    #[command(after_help = EXIT_CODES_HELP)]
    Inspect(hookline_dlq_sink::inspect::InspectArgs),
    /// Preview (default) or, with --execute, write matching dead letters back to
    /// `deliveries` (attempt 0, same delivery_id, replay_of set), or, with --quarantine,
    /// quarantined records byte for byte back to the topic each was read from (`events`,
    /// `deliveries` or a retry tier of this --topic-prefix; any other source topic is
    /// refused and the exit code is 2). Reads by assignment, never commits.
    #[command(after_help = EXIT_CODES_HELP)]
    Replay(hookline_dlq_sink::replay::ReplayArgs),
    /// The timeline of each matching delivery from the attempt log (`deliveries.attempts`,
    /// or its archive with --from-archive / --archive DIR): attempts with status and
    /// duration, tiers, parkings, dead-lettering, replays. A table per delivery, or JSON
    /// lines with --json. Reads by assignment, never commits.
    #[command(after_help = EXIT_CODES_HELP)]
    Trace(hookline_dlq_sink::trace::TraceArgs),
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => exit(EXIT_OK),
                _ => exit(EXIT_USAGE),
            };
        }
    };
    let common = &cli.config.common;
    let archive = &cli.config.archive;
    let Some(command) = &cli.command else {
        if let Err(e) = hookline_runtime::telemetry::init_logging(&common.log, common.log_format) {
            eprintln!("Error: {e}");
            return exit(EXIT_USAGE);
        }
        let signals = hookline_runtime::shutdown::on_signals();
        let stage = hookline_dlq_sink::run(cli.config.clone(), signals.token());
        return match signals.unless_forced(stage).await {
            Ok(Ok(())) => exit(EXIT_OK),
            Err(_) => std::process::exit(hookline_runtime::shutdown::FORCED_EXIT_CODE),
            Ok(Err(e)) => {
                eprintln!("Error: {}", hookline_envelope::error_chain(&e));
                exit(e.exit_code())
            }
        };
    };
    // Subcommands keep stdout for results; logs go to stderr at warn.
    let _ = hookline_runtime::telemetry::init_logging("warn", common.log_format);
    let mut stdout = std::io::stdout().lock();
    let result = match command {
        Command::Inspect(args) => {
            hookline_dlq_sink::inspect::run(common, archive, args, &mut stdout)
                .await
                .map(|_| EXIT_OK)
        }
        Command::Replay(args) => hookline_dlq_sink::replay::run(common, archive, args, &mut stdout)
            .await
            .map(|summary| summary.exit_code()),
        Command::Trace(args) => hookline_dlq_sink::trace::run(common, archive, args, &mut stdout)
            .await
            .map(|_| EXIT_OK),
    };
    match result {
        Ok(code) => exit(code),
        Err(e) => {
            eprintln!("Error: {}", hookline_envelope::error_chain(&e));
            exit(e.exit_code())
        }
    }
}
