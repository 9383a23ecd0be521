//! Exactly-once hand-offs: follow-up records (retries, dead letters,
//! quarantined records) and the source partitions' offsets commit together in
//! one Kafka transaction, with each consumer's group metadata, so:
//! - a crash between an attempt and its follow-up leaves neither (the record
//!   is attempted again by whoever reads it next); a retry chain never forks
//!   and a dead letter is never written twice for a `read_committed` reader;
//! - a zombie replica (thrown out of the group, not yet aware) is fenced by
//!   its stale generation: its transaction aborts, nothing of it is visible;
//! - the offsets of delivered records ride in the same transactions, at most
//!   `--commit-interval` behind, so a restart re-attempts only what was in
//!   flight or finished within that interval.
//!
//! The rule that keeps the committed offset honest: a hand-off's source record
//! is finished (in the machine's watermark) only when the hand-off is put into
//! a transaction, and that transaction's offsets are computed after it. So a
//! committed offset never passes a record whose follow-up is not committed in
//! the same or an earlier transaction. Until then the record counts as running
//! (its lane slot and buffer share stay held), which bounds what waits here.
//! A partition's committed offset goes no further than its first finished
//! record whose hand-off is not in the same transaction.
//!
//! The shared circuit breakers' records (`shared_breakers.rs`) ride the same
//! queue as delivered attempts' records, below.
//!
//! The attempt log (`attempt_log.rs`): a hand-off carries its attempt records,
//! so they commit with it. A delivered attempt has no hand-off: its record is
//! queued here before its source record is finished, and every transaction
//! takes the whole queue before computing its offsets, so the transaction
//! whose offsets first pass a delivered record carries its attempt record (or
//! an earlier one did). The queue rides the `--commit-interval` transactions
//! (it starts one early only when it holds [`LOG_BATCH`] records); a failed
//! transaction puts its records back in front. Nothing is added to the hot
//! path of a delivery: its lane slot is freed at once, as without the log.
//!
//! One transaction runs at a time. One that fails is aborted and its
//! partitions become suspect: each is then tried alone (its hand-offs and
//! offsets), with a growing back-off while it keeps failing, so one hand-off
//! the broker refuses (a record over the topic's `max.message.bytes`) holds
//! back only its own partition's offset, committed up to it, while every
//! other partition goes on. A suspect partition's new hand-offs are not
//! finished meanwhile (their records stay running), so the machine's buffer
//! limits bound what waits. A failed transaction's hand-offs of a partition
//! being revoked go back too, so the revoke's own commits stop below them;
//! only once its revoke is over are they forgotten (also those of a
//! transaction still running then), and its new owner re-attempts those
//! records.

use std::{collections::VecDeque, panic::AssertUnwindSafe, sync::Arc, time::Duration};

use futures::FutureExt;

use hookline_envelope::encode;
use hookline_runtime::kafka::txn::{GroupOffsets, Transactor, TxnError};
use rdkafka::{consumer::Consumer, error::KafkaError, Offset, TopicPartitionList};
use tokio::{task::JoinHandle, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    attempt::Finished,
    attempt_log::Logged,
    config::CommitSettings,
    events,
    handoff::{Batch, Handoff, Pending, RETRY_BACKOFF},
    machine::Machine,
    metrics,
    part::{Key, Part},
};

use super::Engine;

/// What a commit task returns.
pub(super) struct Outcome {
    /// `None` when the producer could not be re-created (shutdown).
    transactor: Option<Transactor>,
    result: Result<(), TxnError>,
    took: Duration,
}

/// Queued attempt-log records that start a transaction before the interval.
pub(crate) const LOG_BATCH: usize = 5_000;

/// The transaction in progress.
struct InFlight {
    handoffs: Arc<Vec<Handoff>>,
    log: Arc<Vec<Logged>>,
    offsets: Vec<(Part, i64)>,
    solo: Option<Part>,
    /// Hand-offs forgotten while it runs (their partition's revoke ended):
    /// dropped, not put back, if it fails.
    forgotten: Vec<Key>,
    task: JoinHandle<Outcome>,
}

/// The transactional producer, the transaction in progress and what waits.
pub(crate) struct Commits {
    transactor: Option<Transactor>,
    in_flight: Option<InFlight>,
    pending: Pending,
    /// Attempt-log records of delivered attempts, for the next transaction.
    log: VecDeque<Logged>,
    interval: Duration,
    last: Instant,
    /// After a failed offsets-only transaction.
    retry_at: Option<Instant>,
    /// Cancelled when the engine stops for good: a producer being re-created
    /// then gives up.
    stop: CancellationToken,
}

impl std::fmt::Debug for Commits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commits")
            .field("pending", &self.pending.len())
            .field("in_flight", &self.in_flight.is_some())
            .finish_non_exhaustive()
    }
}

impl Commits {
    pub(crate) fn new(transactor: Transactor, settings: &CommitSettings) -> Self {
        Self {
            transactor: Some(transactor),
            in_flight: None,
            pending: Pending::default(),
            log: VecDeque::new(),
            interval: settings.interval,
            last: Instant::now(),
            retry_at: None,
            stop: CancellationToken::new(),
        }
    }

    /// A hand-off to commit with its source offset.
    pub(crate) fn defer(&mut self, handoff: Handoff) {
        self.pending.defer(handoff);
    }

    /// Attempt-log records of a delivered attempt, queued before its source
    /// record is finished.
    pub(crate) fn log(&mut self, records: Vec<Logged>) {
        self.log.extend(records);
    }

    /// Forgets hand-offs of source records matching `which`, also those of
    /// the transaction in progress should it fail.
    pub(crate) fn forget(&mut self, which: impl Fn(&Key) -> bool) {
        if let Some(f) = &mut self.in_flight {
            let keys = f.handoffs.iter().map(|h| h.key).filter(|k| which(k));
            f.forgotten.extend(keys);
        }
        self.pending.forget(which);
    }

    /// When the loop should look again, with no transaction in progress: the
    /// next offsets-only commit, a failed one's retry, a suspect's retry.
    pub(crate) fn wakeup(&self) -> Option<Instant> {
        if self.in_flight.is_some() || self.transactor.is_none() {
            return None;
        }
        let next = self.retry_at.unwrap_or(self.last + self.interval);
        Some(
            self.pending
                .next_retry()
                .map_or(next, |at| Instant::from_std(at).min(next)),
        )
    }

    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Waits for the transaction in progress (forever when there is none).
    pub(crate) async fn done(&mut self) -> Result<Outcome, tokio::task::JoinError> {
        match &mut self.in_flight {
            Some(f) => (&mut f.task).await,
            None => std::future::pending().await,
        }
    }

    /// The producer is gone for good (it could not be re-created before the
    /// engine began to stop): nothing more can be committed.
    pub(crate) fn lost(&self) -> bool {
        self.transactor.is_none() && self.in_flight.is_none()
    }

    fn pending(&self) -> bool {
        !self.pending.is_empty() || !self.log.is_empty() || self.in_flight.is_some()
    }
}

impl Engine {
    /// Starts a transaction if none is running and there is something to
    /// commit: hand-offs (at once), a suspect partition (after its back-off), or
    /// moved offsets (every `--commit-interval`). `force` commits moved offsets
    /// at once (revoke, drain).
    pub(super) fn maybe_commit(&mut self, force: bool) {
        if self.commits.in_flight.is_some() || self.commits.transactor.is_none() {
            return;
        }
        let now = Instant::now();
        finish_ready(&mut self.machine, &mut self.commits.pending);
        let batch = self.commits.pending.take(now.into_std());
        // A failed offsets-only transaction is retried after its back-off,
        // also when forced: a revoke's flush against a broker that refuses
        // every commit would otherwise start one every few milliseconds.
        let backed_off = self.commits.retry_at.is_none_or(|at| now >= at);
        let offsets_due = (backed_off
            && (force || now >= self.commits.last + self.commits.interval))
            || (self.commits.log.len() >= LOG_BATCH && self.commits.retry_at.is_none());
        if batch.handoffs.is_empty() && !offsets_due {
            return;
        }
        // Taken before the offsets are computed: every delivered record those
        // offsets pass had its attempt record queued already.
        let log: Vec<Logged> = self.commits.log.drain(..).collect();
        let pending = &self.commits.pending;
        let offsets = self
            .machine
            .offsets_mut()
            .to_commit(|part| pending.cap(part));
        if batch.handoffs.is_empty() && offsets.is_empty() && log.is_empty() {
            self.commits.last = now;
            return;
        }
        let groups = match self.group_offsets(&offsets) {
            Ok(groups) => groups,
            Err(why) => {
                self.failed(batch, log, now, &why, "aborted");
                return;
            }
        };
        let Some(mut transactor) = self.commits.transactor.take() else {
            self.commits.unlog(log);
            return;
        };
        let solo = batch.solo;
        let handoffs = Arc::new(batch.handoffs);
        let batch = Arc::clone(&handoffs);
        let log = Arc::new(log);
        let records = Arc::clone(&log);
        let stop = self.commits.stop.clone();
        let task = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let result = AssertUnwindSafe(transact(&transactor, &batch, &records, groups))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    tracing::error!("a transaction panicked; aborting it");
                    Err(TxnError::Fatal(KafkaError::Canceled))
                });
            let took = started.elapsed();
            drop(batch);
            drop(records);
            let transactor = match &result {
                Ok(()) => Some(transactor),
                Err(error) => match transactor.recover(error, &stop).await {
                    Ok(()) => Some(transactor),
                    Err(error) => {
                        tracing::error!(%error, "cannot re-create the transactional producer");
                        None
                    }
                },
            };
            Outcome {
                transactor,
                result,
                took,
            }
        });
        self.commits.in_flight = Some(InFlight {
            handoffs,
            log,
            offsets,
            solo,
            forgotten: Vec::new(),
            task,
        });
    }

    /// Each input's offsets with its consumer's current group metadata.
    fn group_offsets(&self, offsets: &[(Part, i64)]) -> Result<Vec<GroupOffsets>, String> {
        let mut groups = Vec::new();
        for (input, consumer) in self.consumers.iter().enumerate() {
            let mut tpl = TopicPartitionList::new();
            for (part, offset) in offsets
                .iter()
                .filter(|(p, _)| usize::from(p.input) == input)
            {
                tpl.add_partition_offset(
                    &self.topics[input],
                    part.partition,
                    Offset::Offset(*offset),
                )
                .map_err(|e| e.to_string())?;
            }
            if tpl.count() == 0 {
                continue;
            }
            // An overflow lane is read by assignment, with the partition of
            // `deliveries` it mirrors: its offsets commit in the group under
            // the `deliveries` consumer's membership.
            let consumer = self
                .lane_source
                .filter(|_| self.machine.inputs()[input].lane.is_some())
                .map_or(consumer, |source| &self.consumers[usize::from(source)]);
            let group = consumer
                .group_metadata()
                .ok_or_else(|| format!("no group metadata for {}", self.topics[input]))?;
            groups.push((tpl, group));
        }
        Ok(groups)
    }

    /// The transaction in progress ended.
    pub(super) fn on_committed(&mut self, done: Result<Outcome, tokio::task::JoinError>) {
        let Some(InFlight {
            handoffs,
            log,
            offsets,
            solo,
            forgotten,
            ..
        }) = self.commits.in_flight.take()
        else {
            return;
        };
        // The task has ended, so these are the only references left.
        let handoffs = Arc::try_unwrap(handoffs).unwrap_or_else(|shared| (*shared).clone());
        let log = Arc::try_unwrap(log).unwrap_or_else(|shared| (*shared).clone());
        let now = Instant::now();
        let (result, took) = match done {
            Ok(outcome) => {
                self.commits.transactor = outcome.transactor;
                (outcome.result.map_err(|e| e.to_string()), outcome.took)
            }
            // Never aborted, and panics are caught inside: unreachable short
            // of the runtime shutting down. The producer went with the task,
            // so the engine stops (`Commits::lost`).
            Err(error) => (Err(format!("commit task failed: {error}")), Duration::ZERO),
        };
        match result {
            Ok(()) => {
                metrics::transaction("committed", took);
                // The queue also carries shared breaker records: not counted.
                let attempts = self.ctx.handoffs.topics().attempts();
                metrics::attempt_log_written(
                    log.iter().filter(|r| r.topic == attempts).count()
                        + handoffs.iter().map(|h| h.log.len()).sum::<usize>(),
                );
                self.machine.offsets_mut().committed(&offsets);
                for h in &handoffs {
                    events::written(h);
                }
                self.commits.pending.committed(&Batch { handoffs, solo });
                self.commits.last = now;
                self.commits.retry_at = None;
            }
            Err(error) => {
                let outcome = if self.commits.transactor.is_some() {
                    "aborted"
                } else {
                    "fenced"
                };
                metrics::transaction(outcome, took);
                // Forgotten while it ran (their partition's revoke ended): a
                // partition assigned again re-reads those records itself.
                let handoffs = handoffs
                    .into_iter()
                    .filter(|h| !forgotten.contains(&h.key))
                    .collect();
                self.failed(Batch { handoffs, solo }, log, now, &error, outcome);
            }
        }
    }

    /// A transaction failed (or could not be started): its hand-offs go back
    /// and their partitions become suspect (`Pending::failed`).
    fn failed(
        &mut self,
        batch: Batch,
        log: Vec<Logged>,
        now: Instant,
        error: &dyn std::fmt::Display,
        outcome: &'static str,
    ) {
        // Back in front, for the next transaction (their attempts happened,
        // whoever re-attempts the records next).
        self.commits.unlog(log);
        events::TransactionFailed {
            error,
            handoffs: batch.handoffs.len(),
            outcome,
        }
        .emit();
        if put_back(&self.machine, &mut self.commits.pending, batch, now) {
            self.commits.retry_at = Some(now + RETRY_BACKOFF);
        }
    }

    /// Commits everything pending (revoke, drain) until nothing is left or
    /// `deadline`; true when nothing is left.
    pub(super) async fn flush(&mut self, deadline: Instant) -> bool {
        loop {
            if self.commits.in_flight() {
                match tokio::time::timeout_at(deadline, self.commits.done()).await {
                    Ok(done) => self.on_committed(done),
                    Err(_) => return false,
                }
            }
            let pending = &self.commits.pending;
            let moved = !self
                .machine
                .offsets_mut()
                .to_commit(|part| pending.cap(part))
                .is_empty();
            let moved = moved || !self.commits.log.is_empty();
            if !self.commits.pending() && !moved {
                return true;
            }
            if Instant::now() >= deadline || self.commits.transactor.is_none() {
                return false;
            }
            self.maybe_commit(true);
            if !self.commits.in_flight() {
                // Only suspect partitions are left, not yet due again.
                match self.commits.wakeup() {
                    Some(at) if at < deadline => tokio::time::sleep_until(at).await,
                    _ => return false,
                }
            }
        }
    }

    /// Stops re-creating producers for good (the engine is stopping).
    pub(super) fn stop_commits(&mut self) {
        self.commits.stop.cancel();
    }
}

impl Commits {
    /// Puts attempt-log records of a transaction that did not commit back in
    /// front of the queue, in order.
    fn unlog(&mut self, log: Vec<Logged>) {
        for r in log.into_iter().rev() {
            self.log.push_front(r);
        }
    }
}

/// Finishes, per partition, each deferred hand-off that is its partition's
/// lowest unfinished record, so that the offset of the transaction that
/// writes it passes it (`Pending`); a partition's offset stops below any
/// left out (`cap`).
pub(super) fn finish_ready(machine: &mut Machine, pending: &mut Pending) {
    for part in pending.ready_parts() {
        while let Some(key) = machine
            .lowest_unfinished(part)
            .and_then(|lowest| pending.finish_lowest(part, lowest))
        {
            machine.complete(key, Finished::Durable);
        }
    }
}

/// Puts a failed batch's hand-offs back, in front, for every partition
/// whose offset may still be committed — assigned, or revoked and still
/// being flushed — so that its next offsets stop below them (`cap`). Their
/// records are finished in the watermark already: dropping the hand-offs of
/// a partition being revoked let the revoke's next transaction (the consumer
/// back in the group under a new generation, its partitions assigned again)
/// commit its offset past records whose follow-ups were never written, and
/// those retry chains ended nowhere. Only a forgotten partition's are
/// dropped: its offset is never committed here again and its next owner
/// re-reads them. Returns whether the batch had no hand-offs.
pub(super) fn put_back(
    machine: &Machine,
    pending: &mut Pending,
    batch: Batch,
    now: Instant,
) -> bool {
    pending.failed(batch, now.into_std(), |part| machine.commits_offsets(part))
}

/// One transaction: the hand-offs (each with its attempt records), the queued
/// attempt records, then each consumer's offsets, then commit.
async fn transact(
    transactor: &Transactor,
    handoffs: &[Handoff],
    log: &[Logged],
    offsets: Vec<GroupOffsets>,
) -> Result<(), TxnError> {
    transactor.begin()?;
    for r in log {
        transactor.send(&r.topic, Some(&r.key), &r.value).await?;
    }
    for h in handoffs {
        transactor
            .send_to(
                &h.topic,
                h.partition,
                h.record_key.as_deref(),
                &h.value,
                &h.headers,
            )
            .await?;
        if let Some(d) = &h.disable {
            let key = d.record.subscription_id.as_bytes();
            transactor
                .send(&d.topic, Some(key), &encode(&d.record))
                .await?;
        }
        for r in &h.log {
            transactor.send(&r.topic, Some(&r.key), &r.value).await?;
        }
    }
    transactor.commit(offsets).await
}
