//! The duplicate-admission window of one `events` partition: whether a record's
//! (tenant, event_id) already appeared on the partition within the window.
//!
//! Guarantee: every decision is a pure function of the partition's records in
//! offset order (their key hash, payload fingerprint and Kafka timestamp), never
//! of wall time or of earlier decisions, so a window rebuilt from the records
//! since [`rebuild_from`] of the committed stream time decides every later record
//! exactly as the live window would have (see `admission_tests.rs`, including
//! non-monotonic timestamps). The one exception is the hard cap on entries:
//! when it evicts a live entry early the window is shortened, and that is counted.
//!
//! Semantics. `stream_time` is the largest record timestamp seen. A record with
//! key `k` and timestamp `t` first raises `stream_time` to at least `t`; it is a
//! duplicate iff an earlier record with key `k` has a timestamp `≥ stream_time −
//! window`. Whatever the decision, `k`'s entry then holds the largest timestamp
//! seen for it and the payload fingerprint of this, its latest, record ("seen",
//! not "admitted": a duplicate also refreshes the entry). A duplicate's payload is
//! compared with the previous record of the same key: each record dropped as a
//! same-payload duplicate therefore equals a record that was fanned out or kept
//! aside, by induction, so dropping it loses nothing.
//!
//! Memory: one hash-map entry (16-byte key hash, 8-byte timestamp, 8-byte
//! fingerprint) and one entry of a time-ordered set (timestamp, key hash) per
//! live key; see docs/benchmarks.md#what-each-part-costs for the
//! measured bytes per entry.

use std::{
    collections::{BTreeSet, HashMap},
    time::Duration,
};

/// A fixed-size, 128-bit hash of an event's (tenant_id, event_id); the caller
/// hashes (the key strings are never stored). Two `u64`s rather than a `u128`:
/// 8-byte alignment keeps the time index's entries at 24 bytes instead of 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyHash(pub [u64; 2]);

/// A fixed-size hash of everything a delivery of the event carries besides its ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub u64);

/// Whether a duplicate carries the same payload as the previous record of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadMatch {
    /// Same fingerprint: dropping it loses nothing.
    Same,
    /// Another payload under the same id: must be kept aside, never dropped.
    Changed,
}

impl PayloadMatch {
    /// Both, for metric pre-registration.
    pub const ALL: [PayloadMatch; 2] = [Self::Same, Self::Changed];

    /// The metric label: `same` or `changed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Same => "same",
            Self::Changed => "changed",
        }
    }
}

/// The decision for one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admission {
    /// First appearance within the window: fan it out.
    Admit,
    /// Its key appeared within the window.
    Duplicate(PayloadMatch),
}

/// One live key: the largest timestamp seen for it and its latest record's fingerprint.
#[derive(Debug, Clone, Copy)]
struct Entry {
    last_seen: i64,
    fingerprint: Fingerprint,
}

/// What [`AdmissionWindow::observe`] decided, and what it had to do to stay bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// The decision for the record.
    pub admission: Admission,
    /// Live entries evicted before their time because of the cap (the window is
    /// shortened for them).
    pub evicted_early: usize,
}

/// The window of one partition.
#[derive(Debug, Clone)]
pub struct AdmissionWindow {
    window_ms: i64,
    max_keys: usize,
    stream_time: Option<i64>,
    entries: HashMap<KeyHash, Entry>,
    /// (last_seen, key) of every entry, oldest first: eviction order.
    by_time: BTreeSet<(i64, KeyHash)>,
}

/// The timestamp a rebuild starts reading at: the window reaches back from the
/// committed `stream_time` (or from now, when no stream time was committed).
pub fn rebuild_from(stream_time: i64, window: Duration) -> i64 {
    stream_time.saturating_sub(duration_ms(window))
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl AdmissionWindow {
    /// An empty window of `window` (millisecond resolution) holding at most
    /// `max_keys` keys (at least one).
    pub fn new(window: Duration, max_keys: usize) -> Self {
        Self {
            window_ms: duration_ms(window),
            max_keys: max_keys.max(1),
            stream_time: None,
            entries: HashMap::new(),
            by_time: BTreeSet::new(),
        }
    }

    /// The largest record timestamp seen, if any record was.
    pub fn stream_time(&self) -> Option<i64> {
        self.stream_time
    }

    /// Live keys held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Decides one record, the next on the partition in offset order, with Kafka
    /// timestamp `timestamp_ms`, and records it.
    pub fn observe(
        &mut self,
        key: KeyHash,
        fingerprint: Fingerprint,
        timestamp_ms: i64,
    ) -> Observed {
        let stream_time = self
            .stream_time
            .map_or(timestamp_ms, |s| s.max(timestamp_ms));
        self.stream_time = Some(stream_time);
        let horizon = stream_time.saturating_sub(self.window_ms);
        self.expire(horizon);
        let previous = self.entries.get(&key).copied();
        let admission = match previous {
            Some(e) if e.last_seen >= horizon => {
                Admission::Duplicate(if e.fingerprint == fingerprint {
                    PayloadMatch::Same
                } else {
                    PayloadMatch::Changed
                })
            }
            _ => Admission::Admit,
        };
        let last_seen = previous.map_or(timestamp_ms, |e| e.last_seen.max(timestamp_ms));
        let mut evicted_early = 0;
        if let Some(e) = previous {
            self.by_time.remove(&(e.last_seen, key));
        } else if last_seen >= horizon {
            while self.entries.len() >= self.max_keys {
                self.evict_oldest();
                evicted_early += 1;
            }
        }
        // A record older than the horizon (a late timestamp) could never make a
        // later record a duplicate: it is not kept.
        if last_seen >= horizon {
            self.entries.insert(
                key,
                Entry {
                    last_seen,
                    fingerprint,
                },
            );
            self.by_time.insert((last_seen, key));
        } else {
            self.entries.remove(&key);
        }
        Observed {
            admission,
            evicted_early,
        }
    }

    /// Drops the entries no record can be a duplicate of any more. Only memory
    /// depends on when this runs, never a decision: `observe` compares with the
    /// horizon itself.
    fn expire(&mut self, horizon: i64) {
        while let Some(&(at, key)) = self.by_time.first() {
            if at >= horizon {
                break;
            }
            self.by_time.pop_first();
            self.entries.remove(&key);
        }
    }

    fn evict_oldest(&mut self) {
        if let Some((_, key)) = self.by_time.pop_first() {
            self.entries.remove(&key);
        }
    }
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
