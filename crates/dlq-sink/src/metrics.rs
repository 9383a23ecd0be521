//! Recording of dlq-sink metrics; the names live in `metric_names`. Labels come from fixed
//! sets only: a reason outside [`reason_labels`] is counted as `other`, an error event's kind
//! is an [`ErrorKind`]. Notable events are recorded through `events`, which also logs them.

use std::time::Duration;

use hookline_runtime::metric_names::{self as m, label};

use crate::{archive::SealedFile, row::reason_labels};

/// Zeroes the labelled series so dashboards show them before the first record.
pub(crate) fn describe() {
    for topic in ["dlq", "quarantine", "attempts"] {
        metrics::counter!(m::DLQ_SINK_FILES_WRITTEN, label::TOPIC => topic).absolute(0);
        for reason in reason_labels() {
            metrics::counter!(m::DLQ_SINK_ARCHIVED, label::TOPIC => topic, label::REASON => *reason)
                .absolute(0);
        }
    }
    metrics::gauge!(m::DLQ_SINK_OLDEST_UNARCHIVED_AGE).set(0.0);
    for outcome in ["ok", "error"] {
        metrics::counter!(m::DLQ_SINK_COMMITS, label::OUTCOME => outcome).absolute(0);
    }
    metrics::counter!(m::DLQ_SINK_REVOKED_DROPPED).absolute(0);
    metrics::counter!(m::DLQ_SINK_TEMP_FILES_REMOVED).absolute(0);
    for kind in ErrorKind::ALL {
        metrics::counter!(m::DLQ_SINK_ERRORS, label::KIND => kind.as_str()).absolute(0);
    }
}

/// The `kind` label of `hookline_dlq_sink_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ErrorKind {
    /// The consumer reported an error.
    ConsumerError,
    /// A record from a topic the sink does not archive.
    UnexpectedTopic,
    /// An archive file could not be written; it is tried again.
    ArchiveWriteFailed,
    /// An offset commit failed; a later one covers it.
    CommitFailed,
    /// `replay` could not replay a dead letter (no record, no destination, a failed send).
    ReplayFailed,
    /// `replay` refused a dead letter that must not go again.
    ReplayRefused,
}

impl ErrorKind {
    /// Every kind, for pre-registering the series.
    pub(crate) const ALL: [Self; 6] = [
        Self::ConsumerError,
        Self::UnexpectedTopic,
        Self::ArchiveWriteFailed,
        Self::CommitFailed,
        Self::ReplayFailed,
        Self::ReplayRefused,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::ConsumerError => "consumer_error",
            Self::UnexpectedTopic => "unexpected_topic",
            Self::ArchiveWriteFailed => "archive_write_failed",
            Self::CommitFailed => "commit_failed",
            Self::ReplayFailed => "replay_failed",
            Self::ReplayRefused => "replay_refused",
        }
    }
}

/// One error event (see `events`).
pub(crate) fn error(kind: ErrorKind) {
    metrics::counter!(m::DLQ_SINK_ERRORS, label::KIND => kind.as_str()).increment(1);
}

/// Unarchived rows of a revoked partition dropped.
pub(crate) fn revoked_dropped(n: u64) {
    metrics::counter!(m::DLQ_SINK_REVOKED_DROPPED).increment(n);
}

/// Temporary files left by a crash, removed at start.
pub(crate) fn temp_files_removed(n: usize) {
    metrics::counter!(m::DLQ_SINK_TEMP_FILES_REMOVED).increment(n as u64);
}

/// Records one file written durably.
pub(crate) fn file_written(file: &SealedFile, size: usize, took: Duration) {
    let topic = file.key.kind.as_str();
    metrics::counter!(m::DLQ_SINK_FILES_WRITTEN, label::TOPIC => topic).increment(1);
    for (reason, n) in &file.reasons {
        metrics::counter!(m::DLQ_SINK_ARCHIVED, label::TOPIC => topic, label::REASON => *reason)
            .increment(*n);
    }
    metrics::histogram!(m::DLQ_SINK_WRITE_DURATION, label::OUTCOME => "ok")
        .record(took.as_secs_f64());
    metrics::histogram!(m::DLQ_SINK_WRITE_BYTES).record(size as f64);
}

/// Records one failed write attempt.
pub(crate) fn write_failed(took: Duration) {
    metrics::histogram!(m::DLQ_SINK_WRITE_DURATION, label::OUTCOME => "error")
        .record(took.as_secs_f64());
}

pub(crate) fn commit(ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::counter!(m::DLQ_SINK_COMMITS, label::OUTCOME => outcome).increment(1);
}

/// Updates the backlog gauges: the oldest unarchived record's age and the buffered rows.
pub(crate) fn backlog(oldest_ms: Option<i64>, now_ms: i64, rows: u64) {
    let age = oldest_ms.map_or(0.0, |t| (now_ms.saturating_sub(t)).max(0) as f64 / 1000.0);
    metrics::gauge!(m::DLQ_SINK_OLDEST_UNARCHIVED_AGE).set(age);
    metrics::gauge!(m::DLQ_SINK_BUFFERED_RECORDS).set(rows as f64);
}
