//! The dlq-sink's notable events, one struct each, as Vector's
//! `internal_events`: `emit()` both logs the event and counts it, so no error
//! path or skip is invisible to the dashboards. Every error event counts in
//! `hookline_dlq_sink_errors_total{kind}`, `kind` from the fixed [`ErrorKind`]
//! set; those the dashboards already read keep their own counter too (offset
//! commits by outcome). A record archived raw is counted by reason
//! (`undecodable`) once its file is durable, like every archived record.
//!
//! `replay` is a one-shot command: its events count only where a recorder is
//! installed (a test, or a process that serves `/metrics`).

use std::fmt::Display;

use crate::metrics::{self, ErrorKind};

/// Where a record was read: its topic, partition and offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Coordinates<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
}

// --- the archiving loop (service.rs, lib.rs) --------------------------------

/// The consumer reported an error; the loop goes on.
pub(crate) struct ConsumerError<'a> {
    pub error: &'a dyn Display,
}

impl ConsumerError<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(error = %self.error, "consumer error; continuing");
        metrics::error(ErrorKind::ConsumerError);
    }
}

/// A record from a topic the sink does not archive; ignored.
pub(crate) struct UnexpectedTopic<'a> {
    pub topic: &'a str,
}

impl UnexpectedTopic<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            topic = self.topic,
            "record from an unexpected topic; ignored"
        );
        metrics::error(ErrorKind::UnexpectedTopic);
    }
}

/// A record that does not decode is archived raw, with the reason. Counted as
/// archived with reason `undecodable` once its file is durable.
pub(crate) struct ArchivedRaw<'a> {
    pub at: Coordinates<'a>,
    pub error: &'a dyn Display,
}

impl ArchivedRaw<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            topic = %self.at.topic,
            partition = self.at.partition,
            offset = self.at.offset,
            error = %self.error,
            "archiving an undecodable record raw"
        );
    }
}

/// A revoked partition's unarchived rows were dropped; its new owner reads
/// them again from the committed offset.
pub(crate) struct RevokedRowsDropped<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub dropped: u64,
}

impl RevokedRowsDropped<'_> {
    pub(crate) fn emit(self) {
        tracing::info!(
            topic = %self.topic,
            partition = self.partition,
            dropped = self.dropped,
            "revoked partition's unarchived rows left to its new owner"
        );
        metrics::revoked_dropped(self.dropped);
    }
}

/// Writing an archive file failed; it is tried again after `retry_in_ms`
/// unless the shutdown grace ends first.
pub(crate) struct ArchiveWriteFailed<'a> {
    pub path: &'a dyn Display,
    /// The error and its causes, as one line.
    pub error: &'a str,
    pub retry_in_ms: u64,
}

impl ArchiveWriteFailed<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            error = %self.error,
            path = %self.path,
            retry_in_ms = self.retry_in_ms,
            "archive write failed; retrying"
        );
        metrics::error(ErrorKind::ArchiveWriteFailed);
    }
}

/// An offset commit failed. Not fatal: the rows are durable, a later commit
/// covers them, and a crash before then only archives them again.
pub(crate) struct CommitFailed<'a> {
    pub error: &'a dyn Display,
}

impl CommitFailed<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(error = %self.error, "offset commit failed");
        metrics::commit(false);
        metrics::error(ErrorKind::CommitFailed);
    }
}

/// Temporary files a crash left in the archive were removed at start.
pub(crate) struct TempFilesRemoved {
    pub removed: usize,
}

impl TempFilesRemoved {
    pub(crate) fn emit(self) {
        tracing::info!(cleaned = self.removed, "removed temp files left by a crash");
        metrics::temp_files_removed(self.removed);
    }
}

// --- replay ------------------------------------------------------------------

/// Why a dead letter is not replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotReplayed<'a> {
    /// It cannot be: no value, or not the record its topic carries.
    Failed(&'a str),
    /// Its source topic is not one replay may write to.
    Refused(&'a str),
    /// Its destination topic does not exist.
    NoDestination(&'a str),
}

/// A dead letter was skipped by `replay`.
pub(crate) struct ReplaySkipped<'a> {
    pub at: Coordinates<'a>,
    pub why: NotReplayed<'a>,
}

impl ReplaySkipped<'_> {
    pub(crate) fn emit(self) {
        let Coordinates {
            topic,
            partition,
            offset,
        } = self.at;
        match self.why {
            NotReplayed::Failed(why) => {
                tracing::warn!(%topic, partition, offset, %why, "cannot replay");
                metrics::error(ErrorKind::ReplayFailed);
            }
            NotReplayed::Refused(why) => {
                tracing::warn!(%topic, partition, offset, %why, "refusing to replay");
                metrics::error(ErrorKind::ReplayRefused);
            }
            NotReplayed::NoDestination(destination) => {
                tracing::warn!(
                    %topic,
                    partition,
                    offset,
                    %destination,
                    "cannot replay: the destination topic does not exist"
                );
                metrics::error(ErrorKind::ReplayFailed);
            }
        }
    }
}

/// A replayed record's send failed.
pub(crate) struct ReplaySendFailed<'a> {
    pub at: Coordinates<'a>,
    pub destination: &'a str,
    pub why: &'a str,
}

impl ReplaySendFailed<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            topic = %self.at.topic,
            partition = self.at.partition,
            offset = self.at.offset,
            destination = %self.destination,
            why = %self.why,
            "replay send failed"
        );
        metrics::error(ErrorKind::ReplayFailed);
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeSet, sync::Mutex};

    use hookline_runtime::{metric_names as m, telemetry::metrics_recorder};

    use super::*;

    /// Held by each test that reads a counter before and after emitting: the
    /// recorder is the process's, and another test's event would count too.
    static COUNTING: Mutex<()> = Mutex::new(());

    /// One event, emitted.
    type Emit = Box<dyn Fn()>;

    /// The value of the series `name{labels}` in the process's `/metrics` text.
    fn value(name: &str, labels: &str) -> f64 {
        let text = metrics_recorder().unwrap().render();
        let series = if labels.is_empty() {
            format!("{name} ")
        } else {
            format!("{name}{{{labels}}} ")
        };
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    fn errors(kind: ErrorKind) -> f64 {
        value(m::DLQ_SINK_ERRORS, &format!("kind=\"{}\"", kind.as_str()))
    }

    const AT: Coordinates<'static> = Coordinates {
        topic: "deliveries.dlq",
        partition: 1,
        offset: 9,
    };

    #[test]
    fn kinds_have_distinct_snake_case_labels() {
        let labels: BTreeSet<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), ErrorKind::ALL.len());
        for l in labels {
            assert!(
                l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{l}"
            );
        }
    }

    #[test]
    fn every_error_event_counts_its_kind() {
        let _counting = COUNTING.lock().unwrap_or_else(|p| p.into_inner());
        let e: &dyn Display = &"boom";
        // Each event once, then the count of its kind must have grown by one.
        let cases: Vec<(ErrorKind, Emit)> = vec![
            (
                ErrorKind::ConsumerError,
                Box::new(move || ConsumerError { error: e }.emit()),
            ),
            (
                ErrorKind::UnexpectedTopic,
                Box::new(|| UnexpectedTopic { topic: "x" }.emit()),
            ),
            (
                ErrorKind::ArchiveWriteFailed,
                Box::new(move || {
                    ArchiveWriteFailed {
                        path: e,
                        error: "disk full",
                        retry_in_ms: 200,
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::CommitFailed,
                Box::new(move || CommitFailed { error: e }.emit()),
            ),
            (
                ErrorKind::ReplayFailed,
                Box::new(|| {
                    ReplaySkipped {
                        at: AT,
                        why: NotReplayed::Failed("no payload"),
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::ReplayFailed,
                Box::new(|| {
                    ReplaySkipped {
                        at: AT,
                        why: NotReplayed::NoDestination("deliveries"),
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::ReplayFailed,
                Box::new(|| {
                    ReplaySendFailed {
                        at: AT,
                        destination: "deliveries",
                        why: "timed out",
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::ReplayRefused,
                Box::new(|| {
                    ReplaySkipped {
                        at: AT,
                        why: NotReplayed::Refused("a replay of a replay"),
                    }
                    .emit()
                }),
            ),
        ];
        let mut seen = BTreeSet::new();
        for (kind, emit) in cases {
            let before = errors(kind);
            emit();
            assert_eq!(errors(kind), before + 1.0, "{kind:?}");
            seen.insert(kind);
        }
        assert_eq!(seen.len(), ErrorKind::ALL.len(), "every kind has an event");
    }

    #[test]
    fn events_with_a_counter_of_their_own_count_there() {
        let _counting = COUNTING.lock().unwrap_or_else(|p| p.into_inner());
        // (series, labels, event, by how much it grows)
        let cases: Vec<(&str, &str, Emit, f64)> = vec![
            (
                m::DLQ_SINK_REVOKED_DROPPED,
                "",
                Box::new(|| {
                    RevokedRowsDropped {
                        topic: "deliveries.dlq",
                        partition: 0,
                        dropped: 3,
                    }
                    .emit()
                }),
                3.0,
            ),
            (
                m::DLQ_SINK_COMMITS,
                "outcome=\"error\"",
                Box::new(|| CommitFailed { error: &"gone" }.emit()),
                1.0,
            ),
            (
                m::DLQ_SINK_TEMP_FILES_REMOVED,
                "",
                Box::new(|| TempFilesRemoved { removed: 2 }.emit()),
                2.0,
            ),
        ];
        for (name, labels, emit, by) in cases {
            let before = value(name, labels);
            emit();
            assert_eq!(value(name, labels), before + by, "{name}{{{labels}}}");
        }
    }
}
