//! The fanout's notable events, one struct each, as Vector's
//! `internal_events`: `emit()` both logs the event and counts it, so no error
//! path or skip is invisible to the dashboards. Every error event counts in
//! `hookline_fanout_errors_total{kind}`, `kind` from the fixed [`ErrorKind`]
//! set; those the dashboards already read keep their own counter too
//! (transactions by outcome, window rebuilds). Quarantined records and
//! duplicates are logged when decided and counted once their transaction
//! commits (`metrics::committed`), so an aborted batch tried again is not
//! counted twice.

use std::{fmt::Display, time::Duration};

use crate::metrics::{self, ErrorKind};

/// The events consumer reported an error; the batch goes on with what is
/// ready, and ends within its interval.
pub(crate) struct ConsumerError<'a> {
    pub error: &'a dyn Display,
}

impl ConsumerError<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(error = %self.error, "events consumer error");
        metrics::error(ErrorKind::ConsumerError);
    }
}

/// A revoked partition's events left the uncommitted batch; its new owner
/// reads them again from the committed offset.
pub(crate) struct RevokedDropped<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub dropped: usize,
}

impl RevokedDropped<'_> {
    pub(crate) fn emit(self) {
        tracing::info!(
            topic = %self.topic,
            partition = self.partition,
            dropped = self.dropped,
            "dropped a revoked partition's uncommitted events"
        );
        metrics::revoked_dropped(self.dropped);
    }
}

/// A transaction failed: it is aborted (or the producer re-created) and its
/// batch goes into the next one.
pub(crate) struct TransactionFailed<'a> {
    pub error: &'a dyn Display,
    pub events: usize,
    /// `aborted`, or `fenced` when the producer had to be re-created.
    pub outcome: &'static str,
    /// From the transaction's begin.
    pub took: Duration,
}

impl TransactionFailed<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            error = %self.error,
            events = self.events,
            outcome = self.outcome,
            "transaction failed; aborting (or re-creating the producer), the batch goes into the next one"
        );
        metrics::transaction(self.outcome, self.took);
        metrics::error(ErrorKind::CommitFailed);
    }
}

/// A partition's admission window was rebuilt from its records.
pub(crate) struct WindowRebuilt {
    pub partition: i32,
    pub records: u64,
    /// The first offset read, and the offset the window reaches up to.
    pub start: i64,
    pub end: i64,
    pub took: Duration,
}

impl WindowRebuilt {
    pub(crate) fn emit(self) {
        tracing::info!(
            partition = self.partition,
            records = self.records,
            start = self.start,
            end = self.end,
            took_ms = u64::try_from(self.took.as_millis()).unwrap_or(u64::MAX),
            "rebuilt the duplicate-admission window"
        );
        metrics::rebuild(Some(self.records));
    }
}

/// Rebuilding a partition's admission window failed; the partition waits and
/// the rebuild is tried again.
pub(crate) struct WindowRebuildFailed<'a> {
    pub partition: i32,
    pub error: &'a dyn Display,
}

impl WindowRebuildFailed<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            partition = self.partition,
            error = %self.error,
            "rebuilding the duplicate-admission window failed; retrying, the partition waits"
        );
        metrics::rebuild(None);
        metrics::error(ErrorKind::RebuildFailed);
    }
}

/// No stream time was committed with a partition's offset (a new group, or
/// `--dedup-window` just turned on): its window reaches back from now.
pub(crate) struct NoCommittedStreamTime {
    pub partition: i32,
}

impl NoCommittedStreamTime {
    pub(crate) fn emit(self) {
        tracing::info!(
            partition = self.partition,
            "no stream time committed with the offset; the admission window reaches back from now"
        );
        metrics::rebuilt_from_now();
    }
}

/// An event seen within the admission window with the same payload: not
/// fanned out again. Counted once its transaction commits.
pub(crate) struct DuplicateDropped {
    pub partition: i32,
    pub offset: i64,
}

impl DuplicateDropped {
    pub(crate) fn emit(self) {
        tracing::debug!(
            partition = self.partition,
            offset = self.offset,
            "a duplicate within the admission window; not fanned out again"
        );
    }
}

/// An event seen within the admission window with another payload: quarantined.
/// Counted once its transaction commits.
pub(crate) struct ChangedDuplicateQuarantined<'a> {
    pub partition: i32,
    pub offset: i64,
    pub detail: &'a str,
}

impl ChangedDuplicateQuarantined<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            partition = self.partition,
            offset = self.offset,
            detail = %self.detail,
            "quarantining a duplicate with another payload"
        );
    }
}

/// An event that cannot be fanned out (not Avro, too large, ...): quarantined.
/// Counted by reason once its transaction commits.
pub(crate) struct UnusableQuarantined<'a> {
    pub partition: i32,
    pub offset: i64,
    pub reason: &'a str,
    pub detail: &'a str,
}

impl UnusableQuarantined<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            partition = self.partition,
            offset = self.offset,
            reason = %self.reason,
            detail = %self.detail,
            "quarantining an unusable event"
        );
    }
}

/// A bursting tenant's unordered deliveries now go straight to its overflow
/// lane, or a routed tenant calmed down and goes back to `deliveries`.
pub(crate) struct RoutingChanged<'a> {
    pub tenant_id: &'a str,
    /// The tenant's lane when routed; `None` when it goes back.
    pub lane: Option<usize>,
    /// Tenants routed, and waiting for a lane, after the change.
    pub routing: usize,
    pub waiting: usize,
}

impl RoutingChanged<'_> {
    pub(crate) fn emit(self) {
        match self.lane {
            Some(lane) => tracing::info!(
                tenant_id = %self.tenant_id,
                lane,
                routing = self.routing,
                "a tenant's burst: its unordered deliveries now go straight to its overflow lane"
            ),
            None => tracing::info!(
                tenant_id = %self.tenant_id,
                routing = self.routing,
                "a routed tenant calmed down: its deliveries go to deliveries again"
            ),
        }
        metrics::routing(self.lane.is_some(), self.routing, self.waiting);
    }
}

/// A partition's checkpoint (its committed offset's metadata) could not be
/// read on assignment; it is tried again before the partition is processed.
pub(crate) struct CheckpointUnread<'a> {
    pub partition: i32,
    pub error: &'a dyn Display,
}

impl CheckpointUnread<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(partition = self.partition, error = %self.error, "reading the partition's committed checkpoint failed; trying again");
        metrics::error(ErrorKind::CheckpointUnread);
    }
}

/// A partition's previous owner was reading tenants past: its checkpoint says
/// which records above the committed offset it already fanned out.
pub(crate) struct ReadPastRestored {
    pub partition: i32,
    pub watermark: i64,
    pub front: i64,
    pub tenants: usize,
}

impl ReadPastRestored {
    pub(crate) fn emit(self) {
        tracing::info!(
            partition = self.partition,
            watermark = self.watermark,
            front = self.front,
            tenants = self.tenants,
            "restored the read-past checkpoint: records below front are done but the read-past tenants'"
        );
    }
}

/// A routed tenant is read past on its partition from now on.
pub(crate) struct ReadPastStarted<'a> {
    pub partition: i32,
    pub tenant_id: &'a str,
}

impl ReadPastStarted<'_> {
    pub(crate) fn emit(self) {
        tracing::info!(
            partition = self.partition,
            tenant_id = %self.tenant_id,
            "reading past a bursting tenant: its records go to a back reader, the tenants behind it are served as they are read"
        );
        metrics::read_past_change("started");
    }
}

/// A read-past tenant's back reader caught up and the router no longer
/// routes it: its records are the front's again.
pub(crate) struct ReadPastEnded<'a> {
    pub partition: i32,
    pub tenant_id: &'a str,
}

impl ReadPastEnded<'_> {
    pub(crate) fn emit(self) {
        tracing::info!(
            partition = self.partition,
            tenant_id = %self.tenant_id,
            "stopped reading past a tenant: caught up and calm"
        );
        metrics::read_past_change("ended");
    }
}

/// A routed tenant is not read past: its id would take the partition's
/// committed metadata past its bound. Its records wait in order, as any.
pub(crate) struct ReadPastRefused<'a> {
    pub partition: i32,
    pub tenant_id: &'a str,
}

impl ReadPastRefused<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            partition = self.partition,
            tenant_bytes = self.tenant_id.len(),
            "a bursting tenant's id is too long to read it past; its records stay in order with the others"
        );
        metrics::read_past_change("refused");
    }
}

/// A partition's back reader started, from the lowest read-past offset.
pub(crate) struct BackReaderStarted {
    pub partition: i32,
    pub from: i64,
}

impl BackReaderStarted {
    pub(crate) fn emit(self) {
        tracing::debug!(
            partition = self.partition,
            from = self.from,
            "back reader started"
        );
    }
}

/// A partition's back reader could not be created; it is tried again on the
/// next batch (the read-past tenant's records wait meanwhile).
pub(crate) struct BackReaderFailed<'a> {
    pub partition: i32,
    pub error: &'a dyn Display,
}

impl BackReaderFailed<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(partition = self.partition, error = %self.error, "starting a back reader failed; trying again");
        metrics::error(ErrorKind::BackReaderFailed);
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

    /// One event, emitted.
    type Emit = Box<dyn Fn()>;

    fn errors(kind: ErrorKind) -> f64 {
        value(m::FANOUT_ERRORS, &format!("kind=\"{}\"", kind.as_str()))
    }

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
                ErrorKind::CommitFailed,
                Box::new(move || {
                    TransactionFailed {
                        error: e,
                        events: 3,
                        outcome: "aborted",
                        took: Duration::from_millis(5),
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::RebuildFailed,
                Box::new(move || {
                    WindowRebuildFailed {
                        partition: 1,
                        error: e,
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::CheckpointUnread,
                Box::new(move || {
                    CheckpointUnread {
                        partition: 1,
                        error: e,
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::BackReaderFailed,
                Box::new(move || {
                    BackReaderFailed {
                        partition: 1,
                        error: e,
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
                m::FANOUT_REVOKED_DROPPED,
                "",
                Box::new(|| {
                    RevokedDropped {
                        topic: "events",
                        partition: 2,
                        dropped: 7,
                    }
                    .emit()
                }),
                7.0,
            ),
            (
                m::FANOUT_TRANSACTIONS,
                "outcome=\"fenced\"",
                Box::new(|| {
                    TransactionFailed {
                        error: &"fenced",
                        events: 1,
                        outcome: "fenced",
                        took: Duration::from_millis(1),
                    }
                    .emit()
                }),
                1.0,
            ),
            (
                m::FANOUT_DEDUP_REBUILDS,
                "outcome=\"done\"",
                Box::new(|| {
                    WindowRebuilt {
                        partition: 0,
                        records: 4,
                        start: 10,
                        end: 14,
                        took: Duration::from_millis(3),
                    }
                    .emit()
                }),
                1.0,
            ),
            (
                m::FANOUT_DEDUP_REBUILD_RECORDS,
                "",
                Box::new(|| {
                    WindowRebuilt {
                        partition: 0,
                        records: 4,
                        start: 10,
                        end: 14,
                        took: Duration::from_millis(3),
                    }
                    .emit()
                }),
                4.0,
            ),
            (
                m::FANOUT_DEDUP_REBUILDS,
                "outcome=\"failed\"",
                Box::new(|| {
                    WindowRebuildFailed {
                        partition: 0,
                        error: &"gone",
                    }
                    .emit()
                }),
                1.0,
            ),
            (
                m::FANOUT_DEDUP_FROM_NOW,
                "",
                Box::new(|| NoCommittedStreamTime { partition: 5 }.emit()),
                1.0,
            ),
            (
                m::FANOUT_READ_PAST_CHANGES,
                "change=\"started\"",
                Box::new(|| {
                    ReadPastStarted {
                        partition: 0,
                        tenant_id: "t",
                    }
                    .emit()
                }),
                1.0,
            ),
            (
                m::FANOUT_READ_PAST_CHANGES,
                "change=\"ended\"",
                Box::new(|| {
                    ReadPastEnded {
                        partition: 0,
                        tenant_id: "t",
                    }
                    .emit()
                }),
                1.0,
            ),
            (
                m::FANOUT_READ_PAST_CHANGES,
                "change=\"refused\"",
                Box::new(|| {
                    ReadPastRefused {
                        partition: 0,
                        tenant_id: "t",
                    }
                    .emit()
                }),
                1.0,
            ),
            (
                m::FANOUT_OVERFLOW_CHANGES,
                "change=\"routed\"",
                Box::new(|| {
                    RoutingChanged {
                        tenant_id: "t",
                        lane: Some(3),
                        routing: 1,
                        waiting: 0,
                    }
                    .emit()
                }),
                1.0,
            ),
            (
                m::FANOUT_OVERFLOW_CHANGES,
                "change=\"back\"",
                Box::new(|| {
                    RoutingChanged {
                        tenant_id: "t",
                        lane: None,
                        routing: 0,
                        waiting: 0,
                    }
                    .emit()
                }),
                1.0,
            ),
        ];
        for (name, labels, emit, by) in cases {
            let before = value(name, labels);
            emit();
            assert_eq!(value(name, labels), before + by, "{name}{{{labels}}}");
        }
    }
}
