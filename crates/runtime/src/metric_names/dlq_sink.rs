//! The dlq-sink stage.

/// Records durably archived (their file written and synced), by `topic` (`dlq`,
/// `quarantine`) and bounded `reason` (unknown reasons count as `other`).
pub const DLQ_SINK_ARCHIVED: &str = "hookline_dlq_sink_records_archived_total";
/// Archive files durably written, by `topic` (`dlq`, `quarantine`).
pub const DLQ_SINK_FILES_WRITTEN: &str = "hookline_dlq_sink_files_written_total";
/// Time to write one archive file durably (local fsync + rename, or the S3 PUT), by `outcome`.
pub const DLQ_SINK_WRITE_DURATION: &str = "hookline_dlq_sink_archive_write_duration_seconds";
/// Size of each archive file written.
pub const DLQ_SINK_WRITE_BYTES: &str = "hookline_dlq_sink_archive_write_bytes";
/// Age of the oldest record read but not yet durably archived (0 when none).
pub const DLQ_SINK_OLDEST_UNARCHIVED_AGE: &str = "hookline_dlq_sink_oldest_unarchived_age_seconds";
/// Records read and buffered in open archive files, not yet durable.
pub const DLQ_SINK_BUFFERED_RECORDS: &str = "hookline_dlq_sink_buffered_records";
/// Offset commits by `outcome` (`ok`, `error`).
pub const DLQ_SINK_COMMITS: &str = "hookline_dlq_sink_commits_total";
/// Rows read but not yet archived that were dropped when their partition was
/// revoked (the new owner reads them again).
pub const DLQ_SINK_REVOKED_DROPPED: &str = "hookline_dlq_sink_revoked_rows_dropped_total";
/// Temporary files a crash left in the archive, removed at start.
pub const DLQ_SINK_TEMP_FILES_REMOVED: &str = "hookline_dlq_sink_temp_files_removed_total";
/// Error events by bounded `kind` (`consumer_error`, `unexpected_topic`,
/// `archive_write_failed`, `commit_failed`, `replay_failed`, `replay_refused`;
/// see the dlq-sink's `events` module). Each is also logged.
pub const DLQ_SINK_ERRORS: &str = "hookline_dlq_sink_errors_total";

pub(super) fn describe() {
    metrics::describe_counter!(
        DLQ_SINK_ARCHIVED,
        "Records durably archived, by topic and reason."
    );
    metrics::describe_counter!(
        DLQ_SINK_FILES_WRITTEN,
        "Archive files durably written, by topic."
    );
    metrics::describe_histogram!(
        DLQ_SINK_WRITE_DURATION,
        metrics::Unit::Seconds,
        "Time to write one archive file durably, by outcome."
    );
    metrics::describe_histogram!(
        DLQ_SINK_WRITE_BYTES,
        metrics::Unit::Bytes,
        "Size of each archive file written."
    );
    metrics::describe_gauge!(
        DLQ_SINK_OLDEST_UNARCHIVED_AGE,
        metrics::Unit::Seconds,
        "Age of the oldest record read but not yet durably archived."
    );
    metrics::describe_gauge!(
        DLQ_SINK_BUFFERED_RECORDS,
        "Records buffered in open archive files, not yet durable."
    );
    metrics::describe_counter!(DLQ_SINK_COMMITS, "Offset commits by outcome.");
    metrics::describe_counter!(
        DLQ_SINK_REVOKED_DROPPED,
        "Unarchived rows dropped when their partition was revoked (its new owner reads them again)."
    );
    metrics::describe_counter!(
        DLQ_SINK_TEMP_FILES_REMOVED,
        "Temporary files a crash left in the archive, removed at start."
    );
    metrics::describe_counter!(
        DLQ_SINK_ERRORS,
        "Error events of the dlq-sink (each also logged), by kind."
    );
}
