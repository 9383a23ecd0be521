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
}
