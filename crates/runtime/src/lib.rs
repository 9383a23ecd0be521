//! Adapters shared by the hookline services: configuration, Kafka clients,
//! telemetry, the health/metrics endpoint and shutdown. Stage logic lives in the
//! service crates; pure decisions live in `hookline-core`.

pub mod acls;
pub mod compacted;
pub mod config;
pub mod group_watch;
pub mod health;
pub mod http;
pub mod kafka;
pub mod metric_names;
pub mod ops;
pub mod ops_report;
pub mod passthrough;
pub mod provision;
pub mod retry;
pub mod server;
pub mod shutdown;
pub mod signing;
pub mod subscriptions;
pub mod table;
pub mod telemetry;
pub mod topic_check;

mod error;

pub use error::RuntimeError;

/// Prints a command's failure the way every hookline binary does: one
/// `Error: ` line with the error's Display chain (what failed, then why),
/// never a Debug form or a backtrace, even under `RUST_BACKTRACE=1`. Returns
/// the non-zero exit code to end with.
pub fn report_error(e: &(dyn std::error::Error + 'static)) -> std::process::ExitCode {
    eprintln!("Error: {}", hookline_envelope::error_chain(e));
    std::process::ExitCode::FAILURE
}
