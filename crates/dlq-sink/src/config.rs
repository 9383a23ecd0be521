//! Flags of the sink, validated at start.

use std::time::Duration;

use clap::Args;
use hookline_runtime::config::{parse_duration, CommonArgs};

use crate::{archive::Limits, store::ArchiveArgs, DlqSinkError};

/// Configuration of the dlq-sink service.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Options shared by every service.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Where the archive is (shared with `inspect` and `replay`).
    #[command(flatten)]
    pub archive: ArchiveArgs,

    /// Sink options.
    #[command(flatten)]
    pub sink: SinkArgs,
}

/// Options of the archiving loop.
#[derive(Debug, Clone, Args)]
pub struct SinkArgs {
    /// Consumer group of the sink replicas on the DLQ and quarantine topics.
    #[arg(
        long,
        env = "HOOKLINE_DLQ_SINK_GROUP",
        default_value = hookline_runtime::acls::DLQ_SINK_GROUP
    )]
    pub group_id: String,

    /// Close an archive file once it holds about this many bytes (before compression).
    #[arg(long, env = "HOOKLINE_DLQ_SINK_MAX_FILE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_file_bytes: usize,

    /// Close an archive file this long after its first record (e.g. `5m`); offsets are
    /// committed only after, so this bounds how far commits trail the log.
    #[arg(long, env = "HOOKLINE_DLQ_SINK_MAX_FILE_AGE", default_value = "5m",
          value_parser = parse_duration)]
    pub max_file_age: Duration,

    /// Most bytes held in open files together; the largest files are closed beyond it.
    #[arg(long, env = "HOOKLINE_DLQ_SINK_MAX_BUFFERED_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub max_buffered_bytes: usize,

    /// Most files open at once (one per kind, date, tenant and partition).
    #[arg(long, env = "HOOKLINE_DLQ_SINK_MAX_OPEN_FILES", default_value_t = 1024)]
    pub max_open_files: usize,

    /// Archive the attempt log (`deliveries.attempts`, under `kind=attempts`) too, so
    /// `trace --from-archive` sees past the topic's retention. `--archive-attempts=false`
    /// archives only the DLQ and the quarantine.
    #[arg(
        long,
        env = "HOOKLINE_DLQ_SINK_ARCHIVE_ATTEMPTS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub archive_attempts: bool,
}

impl SinkArgs {
    /// Checks the limits and returns them.
    pub(crate) fn limits(&self) -> Result<Limits, DlqSinkError> {
        let bad = |flag: &'static str, why: String| DlqSinkError::Config { flag, why };
        if self.group_id.trim().is_empty() {
            return Err(bad(
                "--group-id (HOOKLINE_DLQ_SINK_GROUP)",
                "is empty".into(),
            ));
        }
        if self.max_file_bytes < 1024 {
            return Err(bad(
                "--max-file-bytes (HOOKLINE_DLQ_SINK_MAX_FILE_BYTES)",
                format!("{} is below the minimum of 1024", self.max_file_bytes),
            ));
        }
        if self.max_file_age < Duration::from_millis(100) {
            return Err(bad(
                "--max-file-age (HOOKLINE_DLQ_SINK_MAX_FILE_AGE)",
                format!("{:?} is below the minimum of 100ms", self.max_file_age),
            ));
        }
        if self.max_buffered_bytes < self.max_file_bytes {
            return Err(bad(
                "--max-buffered-bytes (HOOKLINE_DLQ_SINK_MAX_BUFFERED_BYTES)",
                format!(
                    "{} is below --max-file-bytes ({})",
                    self.max_buffered_bytes, self.max_file_bytes
                ),
            ));
        }
        if self.max_open_files == 0 {
            return Err(bad(
                "--max-open-files (HOOKLINE_DLQ_SINK_MAX_OPEN_FILES)",
                "must be at least 1".into(),
            ));
        }
        Ok(Limits {
            max_file_bytes: self.max_file_bytes,
            max_file_age: self.max_file_age,
            max_buffered_bytes: self.max_buffered_bytes,
            max_open_files: self.max_open_files,
        })
    }
}
