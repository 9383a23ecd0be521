//! Recording of dlq-sink metrics; the names live in `metric_names`. Labels come from fixed
//! sets only: a reason outside [`REASONS`] is counted as `other`.

use std::time::Duration;

use hookline_runtime::metric_names::{self as m, label};

use crate::{archive::SealedFile, row::UNDECODABLE};

/// Every reason label: the dead-letter reasons the dispatcher writes, the quarantine
/// reasons, `undecodable` for records that are neither, and `other`.
pub(crate) const REASONS: &[&str] = &[
    "exhausted",
    "rejected_4xx",
    "redirect",
    "egress_denied",
    "payload_too_large",
    "invalid_url",
    "missing_secret",
    "not_avro",
    "unknown_fingerprint",
    "wrong_record",
    "bad_datum",
    UNDECODABLE,
    "other",
];

/// The bounded label of a reason.
pub(crate) fn reason_label(reason: &str) -> &'static str {
    REASONS
        .iter()
        .find(|r| **r == reason)
        .copied()
        .unwrap_or("other")
}

/// Zeroes the labelled series so dashboards show them before the first record.
pub(crate) fn describe() {
    for topic in ["dlq", "quarantine"] {
        metrics::counter!(m::DLQ_SINK_FILES_WRITTEN, label::TOPIC => topic).absolute(0);
        for reason in REASONS {
            metrics::counter!(m::DLQ_SINK_ARCHIVED, label::TOPIC => topic, label::REASON => *reason)
                .absolute(0);
        }
    }
    metrics::gauge!(m::DLQ_SINK_OLDEST_UNARCHIVED_AGE).set(0.0);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_reasons_are_other() {
        assert_eq!(reason_label("exhausted"), "exhausted");
        assert_eq!(reason_label("not_avro"), "not_avro");
        assert_eq!(reason_label("tenant-acme-special"), "other");
        assert_eq!(reason_label(""), "other");
    }
}
