//! Whether a partition is fetched: every reason to hold one, in one place.
//!
//! Guarantees (tested in `gate_tests.rs` without a broker):
//! - a partition is resumed only when no reason holds it — a reason is never
//!   lost, and a resume never comes while one remains;
//! - each hold that turns a fetching partition into a paused one produces one
//!   action (a [`Pause`](GateAction::Pause), or for a head not yet due the
//!   rewind that pauses it), and releasing the last reason produces one
//!   [`Resume`](GateAction::Resume);
//! - (re)assignment always resumes (librdkafka keeps a partition's pause flag
//!   across rebalances) and starts the partition with no reasons; a revoked
//!   partition is forgotten and never resumed by a late release.

use std::{collections::BTreeMap, time::SystemTime};

use hookline_core::DueTimers;

use crate::part::Part;

/// Why a partition is held. Each is set and cleared by its own events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hold {
    /// The lanes' buffer for the partition (or the total buffer) is full;
    /// released when the lanes report it below its low water.
    Buffer,
    /// Too many writes of the partition are pending (quarantined records,
    /// moves and attempts' follow-ups not yet in a transaction), in records or
    /// bytes; released when both are at half of their [`WriteCap`].
    Writes,
    /// A tier partition's head is not due; released at its due time.
    NotDue,
    /// The poller has been asked to pause and seek back; released by its answer.
    Rewinding,
}

impl Hold {
    pub const ALL: [Hold; 4] = [Hold::Buffer, Hold::Writes, Hold::NotDue, Hold::Rewinding];

    /// The metric label of the reason (`buffer`, `writes`, `not_due`, `rewinding`).
    pub fn as_str(self) -> &'static str {
        match self {
            Hold::Buffer => "buffer",
            Hold::Writes => "writes",
            Hold::NotDue => "not_due",
            Hold::Rewinding => "rewinding",
        }
    }
}

/// What the adapter must do to the consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateAction {
    /// Pause fetching the partition (the reason is for the counter and log).
    Pause { part: Part, reason: Hold },
    /// Resume fetching it.
    Resume(Part),
    /// Pause it and seek back to `offset` (the poller does both, in that order).
    Rewind {
        part: Part,
        offset: i64,
        generation: u64,
    },
}

/// A rewind asked of the poller and not yet answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rewind {
    generation: u64,
    offset: i64,
    /// The poller refused it while the partition stayed ours: ask again.
    again: bool,
}

/// The pending writes of one partition at which it is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteCap {
    pub records: usize,
    /// Bytes of the records those writes hold (their payloads).
    pub bytes: usize,
}

impl WriteCap {
    /// Writes pending per partition (quarantined records, overflow moves,
    /// follow-ups waiting for the records before them or for a failing
    /// transaction) at which the partition is paused (resumed when both are at
    /// half), so they cannot hold unbounded memory: at most 8,192 records and
    /// 8 MiB of their payloads. The bytes bound is the memory bound; the records
    /// bound only binds below 1 KiB a record. Both set what one transaction can
    /// move out of a partition when a promoted whale's backlog is moved to its
    /// overflow lane, and each pause for them drops what librdkafka had
    /// prefetched: at 256 records the moves, not the whale, set how long the
    /// tenants behind it waited; a 100,000-record burst took ~2.5 s to move at
    /// 2,048 and ~1.7 s at 8,192 (docs/benchmarks.md,
    /// "Isolation: what we know").
    pub const PARTITION: Self = Self {
        records: 8_192,
        bytes: 8 << 20,
    };
}

#[derive(Debug, Default)]
struct Entry {
    buffer: bool,
    /// Writes pending (quarantined records, moves, follow-ups), and their bytes.
    writes_pending: usize,
    writes_bytes: usize,
    writes: bool,
    rewind: Option<Rewind>,
    /// What we last asked of librdkafka: paused or fetching.
    paused: bool,
}

/// The gate of every assigned partition.
#[derive(Debug)]
pub struct Gate {
    parts: BTreeMap<Part, Entry>,
    /// Heads not yet due, by partition: the `NotDue` reason.
    timers: DueTimers<Part>,
    writes_cap: WriteCap,
    generation: u64,
}

impl Gate {
    pub fn new(writes_cap: WriteCap) -> Self {
        Self {
            parts: BTreeMap::new(),
            timers: DueTimers::new(),
            writes_cap,
            generation: 0,
        }
    }

    /// A partition (re)assigned: no reasons, and resumed whatever librdkafka kept.
    pub fn assign(&mut self, part: Part, out: &mut Vec<GateAction>) {
        self.parts.insert(part, Entry::default());
        self.timers.cancel(&part);
        out.push(GateAction::Resume(part));
    }

    /// A partition revoked: forgotten with its reasons; nothing resumes it.
    pub fn revoke(&mut self, part: Part) {
        self.parts.remove(&part);
        self.timers.cancel(&part);
    }

    pub fn is_assigned(&self, part: Part) -> bool {
        self.parts.contains_key(&part)
    }

    /// Whether `reason` holds `part` now.
    pub fn holds(&self, part: Part, reason: Hold) -> bool {
        let Some(e) = self.parts.get(&part) else {
            return false;
        };
        match reason {
            Hold::Buffer => e.buffer,
            Hold::Writes => e.writes,
            Hold::NotDue => self.timers.is_paused(&part),
            Hold::Rewinding => e.rewind.is_some(),
        }
    }

    /// Whether any reason holds `part`.
    pub fn is_held(&self, part: Part) -> bool {
        Hold::ALL.iter().any(|r| self.holds(part, *r))
    }

    /// Whether records of `part` fetched now are stale: a rewind is under way,
    /// so they were fetched before the seek and will be fetched again.
    pub fn is_rewinding(&self, part: Part) -> bool {
        self.holds(part, Hold::Rewinding)
    }

    /// The lanes' buffer for `part` is full.
    pub fn hold_buffer(&mut self, part: Part, out: &mut Vec<GateAction>) {
        let Some(e) = self.parts.get_mut(&part) else {
            return;
        };
        e.buffer = true;
        self.pause(part, Hold::Buffer, out);
    }

    /// The lanes report `part` drained below its low water.
    pub fn release_buffer(&mut self, part: Part, out: &mut Vec<GateAction>) {
        if let Some(e) = self.parts.get_mut(&part) {
            e.buffer = false;
            self.maybe_resume(part, out);
        }
    }

    /// A write of `part` holding `bytes` became pending (a quarantined
    /// record, a move, a follow-up).
    pub fn write_started(&mut self, part: Part, bytes: usize, out: &mut Vec<GateAction>) {
        let cap = self.writes_cap;
        let Some(e) = self.parts.get_mut(&part) else {
            return;
        };
        e.writes_pending += 1;
        e.writes_bytes = e.writes_bytes.saturating_add(bytes);
        if (e.writes_pending >= cap.records || e.writes_bytes >= cap.bytes) && !e.writes {
            e.writes = true;
            self.pause(part, Hold::Writes, out);
        }
    }

    /// A pending write of `part` holding `bytes` went into a transaction (or
    /// was abandoned).
    pub fn write_ended(&mut self, part: Part, bytes: usize, out: &mut Vec<GateAction>) {
        let cap = self.writes_cap;
        let Some(e) = self.parts.get_mut(&part) else {
            return;
        };
        e.writes_pending = e.writes_pending.saturating_sub(1);
        e.writes_bytes = e.writes_bytes.saturating_sub(bytes);
        if e.writes && e.writes_pending <= cap.records / 2 && e.writes_bytes <= cap.bytes / 2 {
            e.writes = false;
            self.maybe_resume(part, out);
        }
    }

    /// The head of tier partition `part` at `offset` is due at `until`: hold it
    /// until then, and have the poller pause it and seek back to the head.
    pub fn hold_until(
        &mut self,
        part: Part,
        offset: i64,
        until: SystemTime,
        out: &mut Vec<GateAction>,
    ) {
        self.generation += 1;
        let generation = self.generation;
        let Some(e) = self.parts.get_mut(&part) else {
            return;
        };
        e.rewind = Some(Rewind {
            generation,
            offset,
            again: false,
        });
        // The poller's rewind pauses the partition itself: pause, then seek (a
        // pause of ours after its seek would lose the seek).
        e.paused = true;
        self.timers.pause(part, until);
        out.push(GateAction::Rewind {
            part,
            offset,
            generation,
        });
    }

    /// The poller answered rewind `generation` of `part`: carried out (`done`),
    /// or refused (a rebalance came between, or the seek failed).
    pub fn rewound(&mut self, part: Part, generation: u64, done: bool, out: &mut Vec<GateAction>) {
        let Some(e) = self.parts.get_mut(&part) else {
            return; // revoked meanwhile: the new assignment starts afresh
        };
        let Some(rewind) = e.rewind.as_mut() else {
            return;
        };
        if rewind.generation != generation {
            return; // superseded
        }
        if done {
            e.rewind = None;
            self.maybe_resume(part, out);
        } else {
            rewind.again = true;
        }
    }

    /// Asks again for every refused rewind of a partition still ours.
    pub fn retry_rewinds(&mut self, out: &mut Vec<GateAction>) {
        for (part, e) in &mut self.parts {
            if let Some(rewind) = e.rewind.as_mut().filter(|r| r.again) {
                rewind.again = false;
                out.push(GateAction::Rewind {
                    part: *part,
                    offset: rewind.offset,
                    generation: rewind.generation,
                });
            }
        }
    }

    /// Releases every head due at `now`.
    pub fn due(&mut self, now: SystemTime, out: &mut Vec<GateAction>) {
        for part in self.timers.due(now) {
            self.maybe_resume(part, out);
        }
    }

    /// The earliest time a `NotDue` hold is released.
    pub fn next_wakeup(&self) -> Option<SystemTime> {
        self.timers.next_wakeup()
    }

    /// Every held partition, ascending: their lag is expected, not a stall.
    pub fn held(&self) -> impl Iterator<Item = Part> + '_ {
        self.parts.keys().copied().filter(|p| self.is_held(*p))
    }

    /// Heads not yet due and when they are due.
    pub fn not_due(&self) -> impl Iterator<Item = (Part, SystemTime)> + '_ {
        self.timers.iter().map(|(p, at)| (*p, at))
    }

    /// Whether librdkafka was last asked to pause `part` (for tests).
    #[cfg(test)]
    pub fn is_paused(&self, part: Part) -> bool {
        self.parts.get(&part).is_some_and(|e| e.paused)
    }

    fn pause(&mut self, part: Part, reason: Hold, out: &mut Vec<GateAction>) {
        if let Some(e) = self.parts.get_mut(&part) {
            if !e.paused {
                e.paused = true;
                out.push(GateAction::Pause { part, reason });
            }
        }
    }

    fn maybe_resume(&mut self, part: Part, out: &mut Vec<GateAction>) {
        if self.is_held(part) {
            return;
        }
        if let Some(e) = self.parts.get_mut(&part) {
            if e.paused {
                e.paused = false;
                out.push(GateAction::Resume(part));
            }
        }
    }
}
