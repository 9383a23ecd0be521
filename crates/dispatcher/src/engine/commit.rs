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
//! One transaction runs at a time. One that fails is aborted and its
//! partitions become suspect: each is then tried alone (its hand-offs and
//! offsets), with a growing back-off while it keeps failing, so one hand-off
//! the broker refuses (a record over the topic's `max.message.bytes`) holds
//! back only its own partition's offset, committed up to it, while every
//! other partition goes on. A suspect partition's new hand-offs are not
//! finished meanwhile (their records stay running), so the machine's buffer
//! limits bound what waits. Hand-offs of partitions no longer assigned are
//! forgotten; their new owner re-attempts those records.

use std::{
    collections::{BTreeMap, VecDeque},
    panic::AssertUnwindSafe,
    sync::Arc,
    time::Duration,
};

use futures::FutureExt;

use hookline_runtime::kafka::txn::{GroupOffsets, Transactor, TxnError};
use rdkafka::{consumer::Consumer, error::KafkaError, Offset, TopicPartitionList};
use tokio::{task::JoinHandle, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    attempt::Finished,
    config::CommitSettings,
    events,
    handoff::Handoff,
    metrics,
    part::{Key, Part},
};

use super::Engine;

/// First back-off of a suspect partition (and of a failed offsets-only
/// transaction); doubled while it keeps failing, up to [`MAX_BACKOFF`].
const RETRY_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Most hand-offs in one transaction.
const MAX_HANDOFFS: usize = 5_000;
/// Most hand-off bytes in one transaction (bounds its memory with large payloads).
const MAX_BYTES: usize = 16 * 1024 * 1024;

/// What a commit task returns.
pub(super) struct Outcome {
    /// `None` when the producer could not be re-created (shutdown).
    transactor: Option<Transactor>,
    result: Result<(), TxnError>,
    took: Duration,
}

/// The transaction in progress.
struct InFlight {
    handoffs: Arc<Vec<Handoff>>,
    offsets: Vec<(Part, i64)>,
    /// The suspect partition tried alone, if that is what this is.
    solo: Option<Part>,
    task: JoinHandle<Outcome>,
}

/// A partition whose hand-offs failed in a transaction.
#[derive(Debug, Clone, Copy)]
struct Suspect {
    retry_at: Instant,
    backoff: Duration,
}

/// The hand-offs waiting for a transaction and the one in progress.
pub(crate) struct Commits {
    transactor: Option<Transactor>,
    in_flight: Option<InFlight>,
    /// Ended attempts' and quarantine decisions' hand-offs, not yet finished:
    /// their source records still count as running.
    deferred: Vec<Handoff>,
    /// Finished hand-offs not yet committed, per partition, in offset order.
    unsent: BTreeMap<Part, VecDeque<Handoff>>,
    suspect: BTreeMap<Part, Suspect>,
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
            .field("deferred", &self.deferred.len())
            .field(
                "unsent",
                &self.unsent.values().map(VecDeque::len).sum::<usize>(),
            )
            .field("suspect", &self.suspect.keys().collect::<Vec<_>>())
            .field("in_flight", &self.in_flight.is_some())
            .finish_non_exhaustive()
    }
}

impl Commits {
    pub(crate) fn new(transactor: Transactor, settings: &CommitSettings) -> Self {
        Self {
            transactor: Some(transactor),
            in_flight: None,
            deferred: Vec::new(),
            unsent: BTreeMap::new(),
            suspect: BTreeMap::new(),
            interval: settings.interval,
            last: Instant::now(),
            retry_at: None,
            stop: CancellationToken::new(),
        }
    }

    /// A hand-off to commit with its source offset.
    pub(crate) fn defer(&mut self, handoff: Handoff) {
        self.deferred.push(handoff);
    }

    /// Forgets hand-offs of source records matching `which` (abandoned: their
    /// offsets are left unfinished, or their partition is gone).
    pub(crate) fn forget(&mut self, which: impl Fn(&Key) -> bool) {
        self.deferred.retain(|h| !which(&h.key));
        for queue in self.unsent.values_mut() {
            queue.retain(|h| !which(&h.key));
        }
        self.unsent.retain(|_, q| !q.is_empty());
        let unsent = &self.unsent;
        self.suspect.retain(|part, _| unsent.contains_key(part));
    }

    /// When the loop should look again, with no transaction in progress: the
    /// next offsets-only commit, a failed one's retry, a suspect's retry.
    pub(crate) fn wakeup(&self) -> Option<Instant> {
        if self.in_flight.is_some() || self.transactor.is_none() {
            return None;
        }
        let next = self.retry_at.unwrap_or(self.last + self.interval);
        Some(
            self.suspect
                .values()
                .map(|s| s.retry_at)
                .fold(next, Instant::min),
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
        !self.deferred.is_empty() || !self.unsent.is_empty() || self.in_flight.is_some()
    }

    /// Takes the hand-offs of the next transaction: a due suspect partition's
    /// alone, else every healthy partition's, within the bounds.
    fn take(&mut self, now: Instant) -> (Vec<Handoff>, Option<Part>) {
        let due = self
            .suspect
            .iter()
            .find(|(_, s)| s.retry_at <= now)
            .map(|(p, _)| *p);
        let (parts, solo): (Vec<Part>, _) = match due {
            Some(part) => (vec![part], Some(part)),
            None => (
                self.unsent
                    .keys()
                    .filter(|p| !self.suspect.contains_key(p))
                    .copied()
                    .collect(),
                None,
            ),
        };
        let (mut taken, mut bytes) = (Vec::new(), 0);
        'parts: for part in parts {
            let Some(queue) = self.unsent.get_mut(&part) else {
                continue;
            };
            while let Some(h) = queue.front() {
                if !taken.is_empty()
                    && (taken.len() >= MAX_HANDOFFS || bytes + h.bytes() > MAX_BYTES)
                {
                    break 'parts;
                }
                bytes += h.bytes();
                taken.extend(queue.pop_front());
            }
        }
        self.unsent.retain(|_, q| !q.is_empty());
        (taken, solo)
    }

    /// Puts a failed transaction's hand-offs back in front of their queues.
    fn put_back(&mut self, handoffs: Vec<Handoff>) {
        for h in handoffs.into_iter().rev() {
            self.unsent.entry(h.key.0).or_default().push_front(h);
        }
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
        // Finished now, so that offsets may pass them: they commit in a
        // transaction with them or the offset stops below them. A suspect
        // partition's stay running (bounded by the buffers) until it recovers.
        let deferred = std::mem::take(&mut self.commits.deferred);
        for h in deferred {
            if self.commits.suspect.contains_key(&h.key.0) {
                self.commits.deferred.push(h);
            } else {
                self.machine.complete(h.key, Finished::Durable);
                self.commits.unsent.entry(h.key.0).or_default().push_back(h);
            }
        }
        let (handoffs, solo) = self.commits.take(now);
        let offsets_due = force
            || (now >= self.commits.last + self.commits.interval
                && self.commits.retry_at.is_none_or(|at| now >= at));
        if handoffs.is_empty() && !offsets_due {
            return;
        }
        let unsent = &self.commits.unsent;
        let offsets = self
            .machine
            .offsets_mut()
            .to_commit(|part| unsent.get(&part).and_then(|q| q.front()).map(|h| h.key.1));
        if handoffs.is_empty() && offsets.is_empty() {
            self.commits.last = now;
            return;
        }
        let groups = match self.group_offsets(&offsets) {
            Ok(groups) => groups,
            Err(why) => {
                self.failed(handoffs, solo, now, &why, "aborted");
                return;
            }
        };
        let Some(mut transactor) = self.commits.transactor.take() else {
            return;
        };
        let handoffs = Arc::new(handoffs);
        let batch = Arc::clone(&handoffs);
        let stop = self.commits.stop.clone();
        let task = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let result = AssertUnwindSafe(transact(&transactor, &batch, groups))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    tracing::error!("a transaction panicked; aborting it");
                    Err(TxnError::Fatal(KafkaError::Canceled))
                });
            let took = started.elapsed();
            drop(batch);
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
            offsets,
            solo,
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
            offsets,
            solo,
            ..
        }) = self.commits.in_flight.take()
        else {
            return;
        };
        // The task has ended, so this is the only reference left.
        let handoffs = Arc::try_unwrap(handoffs).unwrap_or_else(|shared| (*shared).clone());
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
                self.machine.offsets_mut().committed(&offsets);
                for h in &handoffs {
                    h.emit_written();
                }
                if let Some(part) = solo {
                    self.commits.suspect.remove(&part);
                }
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
                self.failed(handoffs, solo, now, &error, outcome);
            }
        }
    }

    /// A transaction failed (or could not be started): its hand-offs go back,
    /// and their partitions become suspect (a suspect's back-off grows).
    fn failed(
        &mut self,
        mut handoffs: Vec<Handoff>,
        solo: Option<Part>,
        now: Instant,
        error: &dyn std::fmt::Display,
        outcome: &'static str,
    ) {
        events::TransactionFailed {
            error,
            handoffs: handoffs.len(),
            outcome,
        }
        .emit();
        handoffs.retain(|h| self.machine.is_assigned(h.key.0));
        let c = &mut self.commits;
        if handoffs.is_empty() && solo.is_none() {
            c.retry_at = Some(now + RETRY_BACKOFF);
        }
        for h in &handoffs {
            let part = h.key.0;
            let backoff = match (solo, c.suspect.get(&part)) {
                (Some(s), Some(prev)) if s == part => (prev.backoff * 2).min(MAX_BACKOFF),
                _ => RETRY_BACKOFF,
            };
            c.suspect.insert(
                part,
                Suspect {
                    retry_at: now + backoff,
                    backoff,
                },
            );
        }
        c.put_back(handoffs);
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
            let unsent = &self.commits.unsent;
            let moved = !self
                .machine
                .offsets_mut()
                .to_commit(|part| unsent.get(&part).and_then(|q| q.front()).map(|h| h.key.1))
                .is_empty();
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

/// One transaction: the hand-offs, then each consumer's offsets, then commit.
async fn transact(
    transactor: &Transactor,
    handoffs: &[Handoff],
    offsets: Vec<GroupOffsets>,
) -> Result<(), TxnError> {
    transactor.begin()?;
    for h in handoffs {
        transactor
            .send(&h.topic, h.record_key.as_deref(), &h.value)
            .await?;
    }
    transactor.commit(offsets).await
}
