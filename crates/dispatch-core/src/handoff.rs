//! Hand-offs: the records an attempt or a quarantine decision leaves to write
//! (a retry on its tier, a dead letter, a quarantined record), each with the
//! source record it finishes. They are not produced where they are decided:
//! the engine commits them together with the source partitions' offsets in a
//! Kafka transaction (`crates/dispatcher/src/engine/commit.rs`), so a crash or a zombie replica can
//! neither write one twice nor lose one, and a retry chain never forks.
//!
//! [`Pending`] is the bookkeeping of what waits for a transaction, with no
//! Kafka and the time passed in (tested below):
//! - a deferred hand-off's source record is still running; it is finished
//!   when taken into `unsent`, just before a transaction is built — and only
//!   when it is its partition's lowest unfinished record, so the transaction
//!   that writes it also moves the partition's committed offset past it. A
//!   hand-off committed with an offset below its record would be written
//!   again by whoever re-reads the record after a crash: a forked retry chain.
//!   Records finish out of order (lanes run concurrently), so a hand-off waits,
//!   still running and so bounded by the machine's buffers, for the records
//!   before it; and never while its partition is suspect;
//! - a partition's offset may pass its finished records only when their
//!   hand-offs are in the same transaction: [`Pending::cap`] is the first one
//!   left out;
//! - a failed transaction makes its partitions suspect: each is then taken
//!   alone, after a back-off that doubles while it keeps failing, so one
//!   hand-off the broker refuses holds back only its own partition.

use std::{
    collections::{BTreeMap, VecDeque},
    time::{Duration, Instant},
};

use hookline_core::{Backoff, DeadLetterReason};
use hookline_envelope::subscription_state::DisabledReason;
use hookline_envelope::{QuarantineReason, QuarantinedEvent, Subscription};

use crate::{
    attempt_log::Logged,
    part::{Key, ParkReason, Part},
};

/// The back-off of a suspect partition: 500 ms, doubled each time it fails
/// again alone, up to 30 s. Not jittered: one partition's hand-offs are tried
/// by the one replica that owns it, so no replicas retry it in step.
pub const SUSPECT_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
/// The first back-off of a suspect partition, and of a failed offsets-only
/// transaction.
pub const RETRY_BACKOFF: Duration = SUSPECT_BACKOFF.initial();
/// Most hand-offs in one transaction.
pub const MAX_HANDOFFS: usize = 5_000;
/// Most hand-off bytes in one transaction (bounds its memory with large payloads).
pub const MAX_BYTES: usize = 16 * 1024 * 1024;

/// A record to write in the next transaction, and the source record it finishes.
#[derive(Debug, Clone)]
pub struct Handoff {
    /// The source record, finished by the transaction that writes this.
    pub key: Key,
    pub topic: String,
    /// The partition to write to; the partitioner (by `record_key`) when `None`.
    pub partition: Option<i32>,
    pub record_key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    /// Headers of the written record (an overflow move's source offset).
    pub headers: Vec<(&'static str, String)>,
    /// What to count and log once the transaction commits.
    pub written: Written,
    /// Written in the same transaction: the subscription written back disabled,
    /// after its endpoint answered 410 Gone (`crates/dispatcher/src/engine/disable.rs`).
    pub disable: Option<Box<Disable>>,
    /// Written in the same transaction: the attempt log's records of what led
    /// to this hand-off (`attempt_log.rs`); empty when the log is off.
    pub log: Vec<Logged>,
}

/// A subscription record to write with a hand-off.
#[derive(Debug, Clone)]
pub struct Disable {
    /// The `subscriptions` topic.
    pub topic: String,
    /// The record as written: disabled, its next version.
    pub record: Subscription,
    pub reason: DisabledReason,
}

/// What a hand-off is, for the events emitted once it is committed.
#[derive(Debug, Clone)]
pub enum Written {
    Retry {
        tier: String,
        delivery_id: String,
    },
    Dead {
        reason: DeadLetterReason,
        delivery_id: String,
        subscription_id: String,
        tenant_id: String,
    },
    Quarantined {
        reason: QuarantineReason,
        record: Box<QuarantinedEvent>,
    },
    /// A delivery written, unattempted, to a tier to wait on.
    Reparked {
        tier: String,
        reason: ParkReason,
    },
    /// A delivery of a promoted subscription moved, unattempted, to an
    /// overflow lane.
    Moved {
        lane: usize,
    },
}

impl Handoff {
    /// Bytes this hand-off holds (its key and value), for the batch bound.
    pub fn bytes(&self) -> usize {
        // A subscription record is small; counted by its URL and id, the bulk of it.
        let disable = self.disable.as_ref().map_or(0, |d| {
            d.record.url.len() + d.record.subscription_id.len() + d.record.secret_ref.len()
        });
        self.value.len()
            + self.record_key.as_ref().map_or(0, Vec::len)
            + disable
            + self.log.iter().map(Logged::bytes).sum::<usize>()
    }
}

/// A partition whose hand-offs failed in a transaction.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Suspect {
    retry_at: Instant,
    /// The wait that set `retry_at`.
    wait: Duration,
    backoff: Backoff,
}

/// The hand-offs of one transaction; `solo` when it is a suspect partition's
/// alone.
#[derive(Debug, Default)]
pub struct Batch {
    pub handoffs: Vec<Handoff>,
    pub solo: Option<Part>,
}

/// What waits for a transaction.
#[derive(Debug, Default)]
pub struct Pending {
    /// Not yet finished, per partition by offset: their source records still
    /// count as running.
    deferred: BTreeMap<Part, BTreeMap<i64, Handoff>>,
    /// Finished, not yet committed, per partition, in the order finished.
    unsent: BTreeMap<Part, VecDeque<Handoff>>,
    suspect: BTreeMap<Part, Suspect>,
}

impl Pending {
    pub fn defer(&mut self, handoff: Handoff) {
        let (part, offset) = handoff.key;
        self.deferred
            .entry(part)
            .or_default()
            .insert(offset, handoff);
    }

    /// Partitions with deferred hand-offs that may be finished (not suspect).
    pub fn ready_parts(&self) -> Vec<Part> {
        self.deferred
            .keys()
            .filter(|p| !self.suspect.contains_key(p))
            .copied()
            .collect()
    }

    /// Moves the deferred hand-off of `part` at `lowest` — the partition's
    /// lowest unfinished offset — to `unsent`, and returns its key for the
    /// machine to finish; `None` when the record there is not a deferred
    /// hand-off (an attempt still running, or a queued record), or the
    /// partition is suspect.
    pub fn finish_lowest(&mut self, part: Part, lowest: i64) -> Option<Key> {
        if self.suspect.contains_key(&part) {
            return None;
        }
        let queue = self.deferred.get_mut(&part)?;
        let h = queue.remove(&lowest)?;
        if queue.is_empty() {
            self.deferred.remove(&part);
        }
        self.unsent.entry(part).or_default().push_back(h);
        Some((part, lowest))
    }

    /// The next transaction's hand-offs: a due suspect partition's alone, else
    /// every healthy partition's, within [`MAX_HANDOFFS`] and [`MAX_BYTES`]
    /// (one at least).
    pub fn take(&mut self, now: Instant) -> Batch {
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
        let (mut handoffs, mut bytes) = (Vec::new(), 0);
        'parts: for part in parts {
            let Some(queue) = self.unsent.get_mut(&part) else {
                continue;
            };
            while let Some(h) = queue.front() {
                let full = handoffs.len() >= MAX_HANDOFFS || bytes + h.bytes() > MAX_BYTES;
                if full && !handoffs.is_empty() {
                    break 'parts;
                }
                bytes += h.bytes();
                handoffs.extend(queue.pop_front());
            }
        }
        self.unsent.retain(|_, q| !q.is_empty());
        if let Some(part) = solo {
            if handoffs.is_empty() {
                // Nothing of it is left (forgotten): it is healthy again.
                self.suspect.remove(&part);
            }
        }
        Batch { handoffs, solo }
    }

    /// How far `part`'s offset may go in a transaction without the hand-offs
    /// left out of it: the offset of its first one still unsent.
    pub fn cap(&self, part: Part) -> Option<i64> {
        self.unsent.get(&part)?.front().map(|h| h.key.1)
    }

    /// The batch committed: a suspect tried alone is healthy again.
    pub fn committed(&mut self, batch: &Batch) {
        if let Some(part) = batch.solo {
            self.suspect.remove(&part);
        }
    }

    /// The batch failed: its hand-offs of partitions to `keep` (whose offsets
    /// may still be committed) go back in front of their queues, and those
    /// partitions become suspect (a suspect tried alone again doubles its
    /// back-off); the others' are dropped. Returns whether the batch had no
    /// hand-offs (then only the caller's offsets-only back-off applies).
    pub fn failed(&mut self, batch: Batch, now: Instant, keep: impl Fn(Part) -> bool) -> bool {
        let Batch { handoffs, solo } = batch;
        let empty = handoffs.is_empty();
        for h in handoffs.into_iter().rev() {
            let part = h.key.0;
            if !keep(part) {
                continue;
            }
            let (wait, backoff) = match self.suspect.get(&part) {
                // Failed again alone: it is the partition's own hand-offs.
                Some(prev) if solo == Some(part) => {
                    let mut backoff = prev.backoff;
                    (backoff.next(0.0), backoff)
                }
                // Failed with others: it may not be its fault; the same wait.
                Some(prev) => (prev.wait, prev.backoff),
                None => {
                    let mut backoff = SUSPECT_BACKOFF;
                    (backoff.next(0.0), backoff)
                }
            };
            self.suspect.insert(
                part,
                Suspect {
                    retry_at: now + wait,
                    wait,
                    backoff,
                },
            );
            self.unsent.entry(part).or_default().push_front(h);
        }
        empty
    }

    /// Forgets hand-offs of source records matching `which` (abandoned, or
    /// their partition is gone).
    pub fn forget(&mut self, which: impl Fn(&Key) -> bool) {
        for queue in self.deferred.values_mut() {
            queue.retain(|_, h| !which(&h.key));
        }
        self.deferred.retain(|_, q| !q.is_empty());
        for queue in self.unsent.values_mut() {
            queue.retain(|h| !which(&h.key));
        }
        self.unsent.retain(|_, q| !q.is_empty());
        let (unsent, deferred) = (&self.unsent, &self.deferred);
        self.suspect
            .retain(|part, _| unsent.contains_key(part) || deferred.contains_key(part));
    }

    /// The earliest time a suspect partition is due again.
    pub fn next_retry(&self) -> Option<Instant> {
        self.suspect.values().map(|s| s.retry_at).min()
    }

    /// Whether anything waits (deferred or unsent).
    pub fn is_empty(&self) -> bool {
        self.deferred.is_empty() && self.unsent.is_empty()
    }

    /// How many hand-offs wait, deferred and unsent.
    pub fn len(&self) -> (usize, usize) {
        (
            self.deferred.values().map(BTreeMap::len).sum(),
            self.unsent.values().map(VecDeque::len).sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const A: Part = Part {
        input: 0,
        partition: 0,
    };
    const B: Part = Part {
        input: 0,
        partition: 1,
    };
    const T: Part = Part {
        input: 1,
        partition: 0,
    };

    fn h(part: Part, offset: i64, bytes: usize) -> Handoff {
        Handoff {
            key: (part, offset),
            topic: "t".into(),
            partition: None,
            record_key: None,
            value: vec![0; bytes],
            headers: Vec::new(),
            written: Written::Retry {
                tier: "t1".into(),
                delivery_id: format!("d-{offset}"),
            },
            disable: None,
            log: Vec::new(),
        }
    }

    fn keys(batch: &Batch) -> Vec<Key> {
        batch.handoffs.iter().map(|h| h.key).collect()
    }

    /// The machine's unfinished records, as the engine asks it.
    #[derive(Default)]
    struct Unfinished(BTreeSet<Key>);

    impl Unfinished {
        fn lowest(&self, part: Part) -> Option<i64> {
            self.0.iter().find(|k| k.0 == part).map(|k| k.1)
        }

        /// Defers hand-offs at `keys` (their records unfinished).
        fn defer(&mut self, p: &mut Pending, keys: &[(Part, i64)]) {
            for &(part, offset) in keys {
                self.0.insert((part, offset));
                p.defer(h(part, offset, 10));
            }
        }

        /// What the engine does before a transaction: finishes each
        /// partition's lowest unfinished record while it is a hand-off.
        fn finish_ready(&mut self, p: &mut Pending) -> Vec<Key> {
            let mut done = Vec::new();
            for part in p.ready_parts() {
                while let Some(key) = self.lowest(part).and_then(|l| p.finish_lowest(part, l)) {
                    self.0.remove(&key);
                    done.push(key);
                }
            }
            done
        }
    }

    #[test]
    fn a_healthy_batch_takes_every_finished_hand_off_in_order() {
        let mut p = Pending::default();
        let mut u = Unfinished::default();
        u.defer(&mut p, &[(A, 3), (B, 1), (A, 5), (T, 9)]);
        assert_eq!(u.finish_ready(&mut p), vec![(A, 3), (A, 5), (B, 1), (T, 9)]);
        assert_eq!(p.cap(A), Some(3));
        let batch = p.take(Instant::now());
        assert_eq!(batch.solo, None);
        assert_eq!(keys(&batch), vec![(A, 3), (A, 5), (B, 1), (T, 9)]);
        assert_eq!(p.cap(A), None, "nothing of A left out of the batch");
        assert!(p.is_empty());
    }

    #[test]
    fn a_hand_off_waits_for_the_records_before_it() {
        let mut p = Pending::default();
        let mut u = Unfinished::default();
        // Record 4 of A is an attempt still running; 5 and 7 ended with hand-offs.
        u.0.insert((A, 4));
        u.defer(&mut p, &[(A, 5), (A, 7)]);
        assert!(
            u.finish_ready(&mut p).is_empty(),
            "its offset could not pass them"
        );
        assert!(p.take(Instant::now()).handoffs.is_empty());
        // 4 ends delivered (finished, no hand-off): 5 goes; 6 still runs.
        u.0.remove(&(A, 4));
        u.0.insert((A, 6));
        assert_eq!(u.finish_ready(&mut p), vec![(A, 5)]);
        u.0.remove(&(A, 6));
        assert_eq!(u.finish_ready(&mut p), vec![(A, 7)]);
        assert_eq!(keys(&p.take(Instant::now())), vec![(A, 5), (A, 7)]);
    }

    #[test]
    fn a_batch_is_bounded_and_the_rest_caps_the_offsets() {
        let mut p = Pending::default();
        let mut u = Unfinished::default();
        let keys_a: Vec<Key> = (0..(MAX_HANDOFFS as i64 + 3)).map(|o| (A, o)).collect();
        u.defer(&mut p, &keys_a);
        u.finish_ready(&mut p);
        let batch = p.take(Instant::now());
        assert_eq!(batch.handoffs.len(), MAX_HANDOFFS);
        assert_eq!(p.cap(A), Some(MAX_HANDOFFS as i64));
        // Bytes: a hand-off larger than the bound still goes, alone.
        let mut p = Pending::default();
        p.defer(h(A, 0, MAX_BYTES + 1));
        p.defer(h(A, 1, 1));
        p.finish_lowest(A, 0);
        p.finish_lowest(A, 1);
        assert_eq!(keys(&p.take(Instant::now())), vec![(A, 0)]);
        assert_eq!(keys(&p.take(Instant::now())), vec![(A, 1)]);
    }

    #[test]
    fn a_failed_batch_makes_its_partitions_suspect_and_each_is_tried_alone() {
        let now = Instant::now();
        let mut p = Pending::default();
        let mut u = Unfinished::default();
        u.defer(&mut p, &[(A, 1), (A, 2), (B, 7)]);
        u.finish_ready(&mut p);
        let batch = p.take(now);
        assert!(!p.failed(batch, now, |_| true));
        assert_eq!((p.cap(A), p.cap(B)), (Some(1), Some(7)), "back, in order");
        assert_eq!(p.next_retry(), Some(now + RETRY_BACKOFF));
        // Not due yet: nothing of a suspect goes, and a healthy one's does.
        u.defer(&mut p, &[(T, 4), (A, 3)]);
        assert_eq!(
            u.finish_ready(&mut p),
            vec![(T, 4)],
            "a suspect's stay running"
        );
        let healthy = p.take(now);
        assert_eq!((keys(&healthy), healthy.solo), (vec![(T, 4)], None));
        // Due: one suspect alone.
        let later = now + RETRY_BACKOFF;
        let solo = p.take(later);
        assert_eq!((keys(&solo), solo.solo), (vec![(A, 1), (A, 2)], Some(A)));
        p.committed(&solo);
        assert_eq!(
            u.finish_ready(&mut p),
            vec![(A, 3)],
            "healthy again: finished"
        );
        let next = p.take(later);
        assert_eq!((keys(&next), next.solo), (vec![(B, 7)], Some(B)));
    }

    #[test]
    fn a_suspect_that_keeps_failing_backs_off_longer_up_to_the_bound() {
        let mut now = Instant::now();
        let mut p = Pending::default();
        let mut u = Unfinished::default();
        u.defer(&mut p, &[(A, 1)]);
        u.finish_ready(&mut p);
        let first = p.take(now);
        p.failed(first, now, |_| true);
        let mut waits = Vec::new();
        for _ in 0..9 {
            assert!(p.take(now).handoffs.is_empty(), "not before its back-off");
            now = p.next_retry().unwrap();
            let batch = p.take(now);
            assert_eq!(batch.solo, Some(A));
            p.failed(batch, now, |_| true);
            waits.push(p.suspect[&A].wait);
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(
            ms,
            [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000, 30_000]
        );
        assert_eq!(p.cap(A), Some(1), "its offset stays below it");
        // Meanwhile another partition's hand-offs go, without A's.
        u.defer(&mut p, &[(B, 2)]);
        u.finish_ready(&mut p);
        let other = p.take(now);
        assert_eq!((keys(&other), other.solo), (vec![(B, 2)], None));
    }

    #[test]
    fn revoked_partitions_are_dropped_on_failure_and_forgotten() {
        let now = Instant::now();
        let mut p = Pending::default();
        let mut u = Unfinished::default();
        u.defer(&mut p, &[(A, 1), (B, 2)]);
        u.finish_ready(&mut p);
        let batch = p.take(now);
        p.failed(batch, now, |part| part != B);
        assert_eq!((p.cap(A), p.cap(B)), (Some(1), None), "B is gone");
        u.defer(&mut p, &[(A, 3)]);
        p.forget(|k| k.0 == A);
        assert!(p.is_empty());
        assert_eq!(p.next_retry(), None, "no suspect left");
    }

    #[test]
    fn an_offsets_only_batch_that_fails_makes_nothing_suspect() {
        let now = Instant::now();
        let mut p = Pending::default();
        let batch = p.take(now);
        assert!(batch.handoffs.is_empty());
        assert!(p.failed(batch, now, |_| true));
        assert_eq!(p.next_retry(), None);
    }
}
