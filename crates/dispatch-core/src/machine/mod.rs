//! The delivery engine's decisions, as a state machine with no I/O: records,
//! completions, due times, assignments and revocations go in with `now`;
//! actions (start an attempt, write to quarantine, pause/resume/rewind a
//! partition) and notes (what to count and log) come out. The dispatcher's
//! engine carries them out against Kafka and tokio; the tests
//! (`tests.rs`, `gate_tests.rs`) drive it without a broker.
//!
//! Guarantees:
//! - at least once: an offset is finished only after an attempt ends
//!   delivered, or its follow-up (a retry, a dead letter — also the unattempted
//!   one of a delivery whose subscription is disabled or deleted — or a
//!   quarantined record) goes into a transaction; a panicked attempt is queued
//!   again, never finished;
//! - never early: a retry-tier record is queued only once `now ≥ due_at`; a head
//!   not yet due holds its partition (`Hold::NotDue`) and rewinds it, and what
//!   was fetched before the rewind is dropped, to be fetched again — at most
//!   until its tier releases it (written + the tier's delay): a head released
//!   with more than the first tier's delay still to wait (a long `Retry-After`)
//!   is re-parked, written unattempted to the tier that fits what is left
//!   (`Ladder::release`), so no hint stalls a tier partition;
//! - bounded memory: a partition whose buffer share is full is held
//!   (`Hold::Buffer`) until the lanes report it drained; one with too many
//!   writes pending (quarantined records, follow-ups waiting for their
//!   transaction) likewise (`Hold::Writes`);
//! - fairness: `hookline_core::Lanes` decides what starts;
//! - revoke: a revoked partition's queued records are dropped (not finished),
//!   its holds forgotten; its in-flight attempts may still complete.

mod breakers;
mod gate;
mod overflow;
mod start;

#[cfg(test)]
mod gate_tests;
#[cfg(test)]
mod overflow_tests;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeSet, HashMap},
    time::{Duration, SystemTime},
};

use hookline_core::{
    epoch, BreakerSettings, Change, Flow, Job, Ladder, LaneKey, LaneLimits, LaneSettings, Lanes,
    OverflowSettings, Release, Shared, Signal, Started, Transition,
};

use breakers::{Breakers, Decision};
use hookline_envelope::{decode_value, Delivery, Unusable};

use gate::Gate;
pub use gate::GateAction;
#[cfg(test)]
pub use gate::Hold;
pub use gate::WriteCap;
pub use overflow::Hot;
use overflow::Overflow;

use crate::{
    attempt::{Finished, Refusal, Target},
    health::HeldHead,
    offsets::Offsets,
    part::{Input, Key, NoTarget, Part},
};

/// What the machine needs to know of the subscriptions, read when it decides.
pub trait Directory {
    /// The lane settings of a subscription (unknown: one in flight, no rate).
    fn settings(&self, subscription_id: &str) -> LaneSettings;
    /// Where to send `delivery` now, or why there is nowhere: its subscription is
    /// deleted, disabled, or no longer the delivery's tenant's.
    fn target(&self, delivery: &Delivery) -> Result<Target, NoTarget>;
}

/// What the adapter must do.
#[derive(Debug)]
pub enum Action {
    /// Pause, resume or rewind a partition.
    Gate(GateAction),
    /// Attempt `delivery` at `target` — or, with a `refusal`, fail it without
    /// sending; report with [`Machine::complete`].
    Attempt {
        key: Key,
        delivery: Box<Delivery>,
        target: Target,
        refusal: Option<Refusal>,
        /// From `deliveries.strict`: a retry is held in place
        /// ([`Machine::hold`]), not written to a tier.
        strict: bool,
    },
    /// `delivery` has nowhere to go (`why`): hand its dead letter, unattempted, to
    /// the next transaction, then [`Machine::complete`] `key`; with `disable`, a
    /// strict subscription's breaker has been open for `--breaker-disable-after`:
    /// disable it too (its head is kept in order, first of its dead letters).
    Unattempted {
        key: Key,
        delivery: Box<Delivery>,
        why: NoTarget,
        disable: bool,
    },
    /// Its subscription's breaker is open: write `delivery`, unattempted and due
    /// at `until`, to retry tier `tier` in the next transaction, then
    /// [`Machine::complete`] `key`; with `disable`, the subscription's breaker has
    /// been open for `--breaker-disable-after`: disable it too.
    Park {
        key: Key,
        delivery: Box<Delivery>,
        tier: usize,
        until: SystemTime,
        disable: bool,
    },
    /// A queued record of a subscription just promoted: write it as it is to
    /// overflow lane `lane` (partition `key.0.partition`) in the next
    /// transaction, then [`Machine::complete`] `key`.
    Move {
        key: Key,
        delivery: Box<Delivery>,
        lane: usize,
    },
}

/// What the adapter must count and log (each is one event).
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// A record of a partition not assigned here (dropped; its owner reads it).
    NotAssigned(Part, i64),
    /// A record whose offset is already tracked (dropped).
    AlreadyTracked(Part, i64),
    /// The lanes refused a record (a bug: the record stays unfinished).
    LanesRefusedRecord(String),
    /// The lanes refused a completion (a bug).
    LanesRefusedCompletion(String),
    /// The lanes started a record that is not queued (a bug).
    StartedNotQueued(Key),
    /// The watermark refused a finish (a bug: the committed offset waits).
    WatermarkRefused(Part, i64, String),
    /// An attempt's task panicked; its delivery is queued again.
    Panicked(Key),
    /// A retry started this late after it was due.
    RetryLate { label: &'static str, late: Duration },
    /// A tier partition held until its head was due is fetched again: the
    /// head's due time came (a promotion of the tier).
    Promoted { label: &'static str },
    /// A subscription's breaker changed state here.
    Breaker {
        subscription_id: String,
        transition: Transition,
    },
    /// What the other replicas (and this one after a restart) must learn of a
    /// subscription: its breaker and, for a strict one, the head waiting in
    /// place — write it to `subscriptions.health`.
    Share {
        subscription_id: String,
        shared: Shared,
        head: Option<HeldHead>,
    },
    /// A tenant was promoted to (or demoted from) an overflow lane on a
    /// partition of `deliveries`.
    Overflow {
        partition: i32,
        tenant_id: String,
        lane: usize,
        promoted: bool,
    },
    /// A strict head read again (a restart, a rebalance) goes on with the
    /// attempts and due time the shared topic held for it.
    HeadRestored {
        subscription_id: String,
        attempt: i32,
    },
    /// A strictly ordered delivery waits at the head of its lane until `until`
    /// (its backoff, or its breaker's), holding the later ones behind it.
    Held {
        subscription_id: String,
        attempt: i32,
        until: SystemTime,
        breaker: bool,
    },
}

/// What became of a fetched record.
#[derive(Debug)]
pub enum Intake {
    /// Queued in the lanes.
    Queued,
    /// Dropped: fetched before a rewind (fetched again), or see the notes.
    Dropped,
    /// A tier head not yet due: its partition is held and rewound.
    NotDue,
    /// A tier head its tier released before it is due: write the record as it
    /// is, unattempted, to retry tier `tier` (the ladder's index), then
    /// [`Machine::complete`] its key. The partition behind it flows on.
    Repark { tier: usize },
    /// Not a `Delivery`: write it to quarantine, then [`Machine::complete`] `key`.
    Quarantine(Unusable),
    /// Its subscription is promoted (or an ordered one not yet back in sync):
    /// write the record as it is to overflow lane `lane`, partition
    /// `key.0.partition`, then [`Machine::complete`] its key.
    Move { lane: usize },
}

/// A buffered record not yet started.
#[derive(Debug)]
struct Queued {
    /// Boxed, so the map's slots stay small and starting or deferring it
    /// moves a pointer.
    delivery: Box<Delivery>,
    ready_since: SystemTime,
}

/// Work in flight.
#[derive(Debug)]
enum Running {
    /// An attempt the lanes started; the delivery is kept to queue it again if
    /// the attempt's task dies.
    Attempt {
        started: Started<Part>,
        delivery: Box<Delivery>,
        ready_since: SystemTime,
        /// The probe of its subscription's breaker, until its signal is recorded.
        probe: bool,
    },
    /// A write pending: the quarantine record of a record that is not a
    /// `Delivery`, a move to an overflow lane, or the follow-up of an ended
    /// attempt (its lane slot freed); `bytes`: what it holds, for the gate.
    Write { bytes: usize },
}

/// Counts for the gauges.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InputCounts {
    /// Ready or due and not finished: queued, in flight, or a head past due.
    pub waiting: usize,
    /// Partitions held until their head is due.
    pub not_due: usize,
    /// Due and not yet started: queued, or a held head past its due time. In a
    /// tier every record behind a head is due no earlier than it, so a paused
    /// head not yet due hides nothing due; records a full buffer left
    /// unfetched are not counted (the consumer lag bounds them).
    pub due: usize,
    /// The oldest ready-since time among them.
    pub oldest_ready: Option<SystemTime>,
}

/// The engine's state, without I/O.
#[derive(Debug)]
pub struct Machine {
    inputs: Vec<Input>,
    lanes: Lanes<Part>,
    offsets: Offsets,
    gate: Gate,
    queued: HashMap<Key, Queued>,
    running: HashMap<Key, Running>,
    actions: Vec<Action>,
    notes: Vec<Note>,
    /// Larger payloads are refused without being sent.
    max_payload_bytes: usize,
    /// When a tier head is due, and where a re-parked one goes.
    ladder: Ladder,
    breakers: Breakers,
    /// Deferred heads waiting for their subscription's probe to answer, by
    /// subscription: woken when it does.
    probe_waiters: HashMap<String, BTreeSet<Key>>,
    /// Strict heads this replica holds in place after a failed attempt, by
    /// subscription (shared until they finish).
    holding: HashMap<String, HeldHead>,
    /// Strict heads the shared topic holds, by subscription: a delivery read
    /// again goes on from there.
    shared_heads: HashMap<String, HeldHead>,
    overflow: Overflow,
}

impl Machine {
    pub fn new(
        inputs: Vec<Input>,
        limits: LaneLimits,
        max_payload_bytes: usize,
        ladder: Ladder,
        (breaker, overflow): (BreakerSettings, OverflowSettings),
    ) -> Result<Self, hookline_core::LaneError> {
        Ok(Self {
            overflow: Overflow::new(&inputs, overflow),
            inputs,
            lanes: Lanes::new(limits)?,
            offsets: Offsets::default(),
            gate: Gate::new(WriteCap::PARTITION),
            queued: HashMap::new(),
            running: HashMap::new(),
            actions: Vec::new(),
            notes: Vec::new(),
            max_payload_bytes,
            ladder,
            breakers: Breakers::new(breaker),
            probe_waiters: HashMap::new(),
            holding: HashMap::new(),
            shared_heads: HashMap::new(),
        })
    }

    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }

    /// The partition of `input`'s topic, if it is one of ours.
    pub fn part(&self, topic: &str, partition: i32) -> Option<Part> {
        let input = self.inputs.iter().position(|i| i.topic == topic)?;
        Some(Part {
            input: u16::try_from(input).ok()?,
            partition,
        })
    }

    /// The actions decided since the last call, in order.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// The notes since the last call, in order.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    pub fn offsets_mut(&mut self) -> &mut Offsets {
        &mut self.offsets
    }

    /// Partitions (re)assigned: read afresh from their committed offsets.
    pub fn assign(&mut self, parts: &[Part]) {
        let mut out = Vec::new();
        for part in parts {
            self.offsets.assign(*part);
            self.gate.assign(*part, &mut out);
            self.overflow.reset(*part);
        }
        self.gate_actions(out);
    }

    /// One fetched record of `part` at `offset` (`payload` is its value,
    /// `written_at` its Kafka timestamp when it has one).
    pub fn on_record(
        &mut self,
        part: Part,
        offset: i64,
        (payload, written_at): (Option<&[u8]>, Option<SystemTime>),
        now: SystemTime,
        dir: &impl Directory,
    ) -> Intake {
        if !self.gate.is_assigned(part) {
            self.notes.push(Note::NotAssigned(part, offset));
            return Intake::Dropped;
        }
        if self.gate.is_rewinding(part) {
            // Fetched before the seek back to a head not yet due; fetched again.
            return Intake::Dropped;
        }
        if self.offsets.track(part, offset).is_err() {
            self.notes.push(Note::AlreadyTracked(part, offset));
            return Intake::Dropped;
        }
        let delivery: Delivery = match decode_value(payload) {
            Ok(d) => d,
            Err(unusable) => {
                self.start_write((part, offset), payload.map_or(0, <[u8]>::len));
                return Intake::Quarantine(unusable);
            }
        };
        if let Some(tier) = self.inputs[usize::from(part.input)].tier {
            let due = epoch::from_millis(delivery.due_at);
            match self.ladder.release(tier, due, written_at, now) {
                Release::Ready => {}
                Release::Wait { until } => {
                    // Forget it and what follows: they are fetched and tracked again.
                    self.offsets.reset_to(part, offset);
                    let mut out = Vec::new();
                    self.gate.hold_until(part, offset, until, &mut out);
                    self.gate_actions(out);
                    return Intake::NotDue;
                }
                Release::Repark { tier } => {
                    self.start_write((part, offset), delivery.payload.len());
                    return Intake::Repark { tier };
                }
            }
        }
        let mut delivery = delivery;
        if self.inputs[usize::from(part.input)].strict {
            if let Some(head) = self.shared_heads.get(&delivery.subscription_id) {
                if head.restore(&mut delivery) {
                    // Held here now: its end is shared from here.
                    self.holding
                        .insert(delivery.subscription_id.clone(), head.clone());
                    self.notes.push(Note::HeadRestored {
                        subscription_id: delivery.subscription_id.clone(),
                        attempt: delivery.attempt,
                    });
                }
            }
        }
        let ordered = dir.settings(&delivery.subscription_id).max_in_flight <= 1;
        if let Some(lane) = self.overflow.route(part, &delivery.tenant_id, ordered) {
            self.start_write((part, offset), delivery.payload.len());
            self.overflow.moving((part, offset), lane);
            return Intake::Move { lane };
        }
        let ready_since = epoch::from_millis(delivery.due_at.max(delivery.created_at));
        let look_now = self.overflow.arrived(part, &delivery.tenant_id);
        self.queue((part, offset), Box::new(delivery), ready_since, now, dir);
        if look_now {
            self.observe_backlog(now);
        }
        Intake::Queued
    }

    /// `key` becomes a pending write holding `bytes` (a quarantined record, a
    /// move, a re-park), until its transaction finishes it.
    fn start_write(&mut self, key: Key, bytes: usize) {
        self.running.insert(key, Running::Write { bytes });
        let mut out = Vec::new();
        self.gate.write_started(key.0, bytes, &mut out);
        self.gate_actions(out);
    }

    /// A record of an overflow lane's partition is about to be given to
    /// [`on_record`](Self::on_record); `moved_from` is its source offset in
    /// `deliveries` (its `hookline-moved-from` header).
    pub fn lane_record(&mut self, part: Part, moved_from: Option<i64>) {
        self.overflow.fetched(part, moved_from);
    }

    /// An overflow lane's partition was read to its end.
    pub fn lane_eof(&mut self, part: Part) {
        self.overflow.eof(part);
    }

    /// Periodic, and at once when a tenant's arrivals on a partition reach
    /// `promote_at_once_records` ([`Overflow::arrived`]): the promotion
    /// controller sees each tenant's backlog per partition of `deliveries`
    /// (queued records of `deliveries` and of the lanes); a tenant promoted
    /// now has its queued records of `deliveries` withdrawn from the lanes
    /// and moved, in source order.
    pub fn observe_backlog(&mut self, now: SystemTime) {
        if self.overflow.source().is_none() {
            return;
        }
        // Counted under borrowed ids, owned once per tenant: this runs every
        // tick over everything buffered.
        let mut counts: HashMap<(i32, &str), usize> = HashMap::new();
        for ((part, _), q) in &self.queued {
            if let Some(partition) = self.overflow.backlog_partition(*part) {
                *counts
                    .entry((partition, q.delivery.tenant_id.as_str()))
                    .or_default() += 1;
            }
        }
        let backlog: HashMap<Hot, usize> = counts
            .into_iter()
            .map(|((partition, tenant), n)| ((partition, tenant.to_owned()), n))
            .collect();
        for change in self.overflow.observe(backlog, now) {
            let (promoted, (partition, tenant_id)) = match change {
                Change::Promote(hot) => (true, hot),
                Change::Demote(hot) => (false, hot),
            };
            let lane = self.overflow.lane_for(&tenant_id);
            self.notes.push(Note::Overflow {
                partition,
                tenant_id: tenant_id.clone(),
                lane,
                promoted,
            });
            if !promoted {
                continue;
            }
            let Some(input) = self.overflow.source() else {
                continue;
            };
            let part = Part { input, partition };
            let subscriptions: BTreeSet<String> = self
                .queued
                .iter()
                .filter(|((p, _), q)| *p == part && q.delivery.tenant_id == tenant_id)
                .map(|(_, q)| q.delivery.subscription_id.clone())
                .collect();
            let mut offsets: Vec<i64> = subscriptions
                .iter()
                .flat_map(|sub| self.lanes.withdraw(&part, sub))
                .collect();
            offsets.sort_unstable();
            for offset in offsets {
                let key = (part, offset);
                let Some(queued) = self.queued.remove(&key) else {
                    continue;
                };
                self.start_write(key, queued.delivery.payload.len());
                self.overflow.moving(key, lane);
                self.actions.push(Action::Move {
                    key,
                    delivery: queued.delivery,
                    lane,
                });
            }
        }
    }

    /// The overflow lanes' state, for the gauges and the attribution table.
    pub fn overflow(&self) -> &Overflow {
        &self.overflow
    }

    fn queue(
        &mut self,
        key: Key,
        delivery: Box<Delivery>,
        ready_since: SystemTime,
        now: SystemTime,
        dir: &impl Directory,
    ) {
        let (part, offset) = key;
        let job = Job {
            partition: part,
            offset,
            lane: LaneKey {
                subscription_id: delivery.subscription_id.clone(),
            },
            tenant_id: delivery.tenant_id.clone(),
            retry: self.inputs[usize::from(part.input)].retry(),
            overflow: self.inputs[usize::from(part.input)].overflow(),
            bytes: delivery.payload.len(),
        };
        let settings = dir.settings(&delivery.subscription_id);
        match self.lanes.push_with(job, settings, now) {
            Ok(flow) => {
                self.queued.insert(
                    key,
                    Queued {
                        delivery,
                        ready_since,
                    },
                );
                if flow == Flow::Pause {
                    let mut out = Vec::new();
                    self.gate.hold_buffer(part, &mut out);
                    self.gate_actions(out);
                }
            }
            // Unreachable: the watermark refused duplicates already.
            Err(error) => self.notes.push(Note::LanesRefusedRecord(error.to_string())),
        }
    }

    /// Work of `key` ended: an attempt, or its pending write went into a
    /// transaction. A key no longer
    /// running (abandoned by a revoke or a drain) is ignored.
    pub fn complete(&mut self, key: Key, finished: Finished) {
        let Some(run) = self.running.remove(&key) else {
            return;
        };
        if let Running::Attempt { delivery, .. } = &run {
            if finished == Finished::Durable && self.holding.contains_key(&delivery.subscription_id)
            {
                // The head that waited in place is done: nothing to go on from.
                self.holding.remove(&delivery.subscription_id);
                self.share(&delivery.subscription_id);
            }
        }
        self.release(key, &run);
        self.overflow.ended(key, finished == Finished::Durable);
        if finished == Finished::Durable {
            self.finish(key);
        }
    }

    /// An attempt ended with a follow-up to write: its lane slot is freed (the
    /// next of its lane may start), its offset stays unfinished and counts as a
    /// pending write until [`complete`](Self::complete) (`crates/dispatcher/src/engine/commit.rs`).
    pub fn attempt_ended(&mut self, key: Key) {
        let Some(run) = self.running.get(&key) else {
            return;
        };
        let Running::Attempt { delivery, .. } = run else {
            return;
        };
        let bytes = delivery.payload.len();
        if let Some(run) = self.running.insert(key, Running::Write { bytes }) {
            self.release(key, &run);
        }
        let mut out = Vec::new();
        self.gate.write_started(key.0, bytes, &mut out);
        self.gate_actions(out);
    }

    /// A strictly ordered delivery's attempt of `key` ended in backoff: `record`
    /// (its attempt counted) goes back to the head of its lane, not to start
    /// before its `due_at`; its slots are freed, its offset stays unfinished, and
    /// every later record of its lane waits behind it. On a partition no longer
    /// assigned it is dropped (unfinished), for the new owner to read again.
    pub fn hold(&mut self, key: Key, record: Delivery) {
        let Some(Running::Attempt {
            started,
            ready_since,
            ..
        }) = self.running.remove(&key)
        else {
            return;
        };
        let until = epoch::from_millis(record.due_at);
        if !self.gate.is_assigned(key.0) {
            if let Err(error) = self.lanes.complete(&started) {
                self.notes
                    .push(Note::LanesRefusedCompletion(error.to_string()));
            }
            return;
        }
        self.notes.push(Note::Held {
            subscription_id: record.subscription_id.clone(),
            attempt: record.attempt,
            until,
            breaker: false,
        });
        self.holding
            .insert(record.subscription_id.clone(), HeldHead::of(&record));
        self.share(&record.subscription_id);
        self.defer(
            key,
            started,
            Box::new(record),
            ready_since.max(until),
            until,
        );
    }

    /// Puts a started record back at the head of its lane until `until`.
    fn defer(
        &mut self,
        key: Key,
        started: Started<Part>,
        delivery: Box<Delivery>,
        ready_since: SystemTime,
        until: SystemTime,
    ) {
        match self.lanes.defer(started, until) {
            Ok(()) => {
                self.queued.insert(
                    key,
                    Queued {
                        delivery,
                        ready_since,
                    },
                );
            }
            // Unreachable: it was started and not completed.
            Err(error) => self
                .notes
                .push(Note::LanesRefusedCompletion(error.to_string())),
        }
    }

    /// The task of `key` panicked: an attempt is queued again (its offset stays
    /// unfinished until one ends durably); a quarantine write stays unfinished.
    pub fn panicked(&mut self, key: Key, now: SystemTime, dir: &impl Directory) {
        let Some(run) = self.running.remove(&key) else {
            return;
        };
        self.notes.push(Note::Panicked(key));
        self.release(key, &run);
        if let Running::Attempt {
            delivery,
            ready_since,
            ..
        } = run
        {
            if self.gate.is_assigned(key.0) {
                self.queue(key, delivery, ready_since, now, dir);
            }
        }
    }

    /// An attempt of `key` ended at `now` with `signal` for its endpoint's
    /// health: its lane is charged the slot time up to `now` and its
    /// subscription's breaker is told (before
    /// [`complete`](Self::complete) or [`attempt_ended`](Self::attempt_ended)).
    pub fn attempted(&mut self, key: Key, now: SystemTime, signal: Signal) {
        let Some(Running::Attempt {
            started,
            delivery,
            probe,
            ..
        }) = self.running.get_mut(&key)
        else {
            return;
        };
        // Its slot time, for the worker-seconds fair share (`hookline_core::fair`).
        if let Err(error) = self.lanes.charge(started, now) {
            self.notes
                .push(Note::LanesRefusedCompletion(error.to_string()));
        }
        let was_probe = std::mem::take(probe);
        let subscription_id = delivery.subscription_id.clone();
        let transition = self
            .breakers
            .record(&subscription_id, now, signal, was_probe);
        if was_probe {
            self.wake_probe_waiters(&subscription_id);
        }
        if let Some(transition) = transition {
            self.notes.push(Note::Breaker {
                subscription_id: subscription_id.clone(),
                transition,
            });
            self.share(&subscription_id);
        }
    }

    /// Notes what the others must learn of `subscription_id` now.
    fn share(&mut self, subscription_id: &str) {
        let shared = self.breakers.shared(subscription_id).unwrap_or(Shared {
            open: None,
            changed_at: SystemTime::UNIX_EPOCH,
        });
        self.notes.push(Note::Share {
            subscription_id: subscription_id.to_owned(),
            shared,
            head: self.holding.get(subscription_id).cloned(),
        });
    }

    /// What another replica (or an earlier run) shared of `subscription_id`:
    /// its breaker, taken when it is the later state (a breaker closed this way
    /// releases what waited for a probe here), and its strict head waiting in
    /// place, which a delivery read again goes on from
    /// ([`HeldHead::restore`]).
    pub fn adopt(&mut self, subscription_id: &str, shared: Shared, head: Option<HeldHead>) {
        if self.breakers.adopt(subscription_id, shared) && shared.open.is_none() {
            self.wake_probe_waiters(subscription_id);
        }
        match head {
            Some(head) => {
                self.shared_heads.insert(subscription_id.to_owned(), head);
            }
            None => {
                self.shared_heads.remove(subscription_id);
            }
        }
    }

    /// The probe of `subscription_id` answered (or was lost): what waited for it
    /// may start at once and asks the breaker again — closed, it is sent; open
    /// again, it is parked until the next probe.
    fn wake_probe_waiters(&mut self, subscription_id: &str) {
        for (part, offset) in self
            .probe_waiters
            .remove(subscription_id)
            .unwrap_or_default()
        {
            self.lanes.undefer(&part, offset);
        }
    }

    /// Breakers open or probing now, for the gauge.
    pub fn breakers_open(&self) -> usize {
        self.breakers.open()
    }

    fn release(&mut self, key: Key, run: &Running) {
        match run {
            Running::Attempt {
                started,
                delivery,
                probe,
                ..
            } => {
                if let Err(error) = self.lanes.complete(started) {
                    self.notes
                        .push(Note::LanesRefusedCompletion(error.to_string()));
                }
                if *probe {
                    // A probe that never answered (panicked, abandoned): the next may probe.
                    self.breakers.record(
                        &delivery.subscription_id,
                        SystemTime::UNIX_EPOCH,
                        Signal::Neutral,
                        true,
                    );
                    self.wake_probe_waiters(&delivery.subscription_id);
                }
            }
            Running::Write { bytes } => {
                let mut out = Vec::new();
                self.gate.write_ended(key.0, *bytes, &mut out);
                self.gate_actions(out);
            }
        }
    }

    fn finish(&mut self, (part, offset): Key) {
        if let Err(error) = self.offsets.finish(part, offset) {
            self.notes
                .push(Note::WatermarkRefused(part, offset, error.to_string()));
        }
    }

    /// The poller answered a rewind.
    pub fn rewound(&mut self, part: Part, generation: u64, done: bool) {
        let mut out = Vec::new();
        self.gate.rewound(part, generation, done, &mut out);
        self.gate_actions(out);
    }

    /// Releases the heads due at `now`.
    pub fn on_due(&mut self, now: SystemTime) {
        let mut out = Vec::new();
        self.gate.due(now, &mut out);
        for action in &out {
            if let GateAction::Resume(part) = action {
                if let Some(input) = self.inputs.get(usize::from(part.input)) {
                    if input.retry() {
                        self.notes.push(Note::Promoted { label: input.label });
                    }
                }
            }
        }
        self.gate_actions(out);
    }

    /// Periodic: releases partitions the lanes drained, asks again for refused
    /// rewinds, forgets idle breakers.
    pub fn on_tick(&mut self) {
        self.breakers.prune();
        let mut out = Vec::new();
        for part in self.lanes.take_resumable() {
            self.gate.release_buffer(part, &mut out);
        }
        self.gate.retry_rewinds(&mut out);
        self.gate_actions(out);
    }

    /// When to call [`on_due`](Self::on_due) or [`start_ready`](Self::start_ready)
    /// next: a head falls due, a rate-limited lane may start, or a strict head
    /// held in place comes out of its backoff.
    pub fn next_wakeup(&self) -> Option<SystemTime> {
        [
            self.gate.next_wakeup(),
            self.lanes.next_rate_wakeup(),
            self.lanes.next_deferred_wakeup(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Partitions revoked: their queued records are dropped (unfinished) and
    /// their holds forgotten. Returns how many were dropped. Their running work
    /// may still complete; [`abandon`](Self::abandon) what does not, then store,
    /// commit and [`forget`](Self::forget) them.
    pub fn revoke(&mut self, parts: &[Part]) -> usize {
        let mut dropped = 0;
        for part in parts {
            for offset in self.lanes.drop_partition(part) {
                self.queued.remove(&(*part, offset));
                dropped += 1;
            }
            self.gate.revoke(*part);
            self.overflow.reset(*part);
        }
        for keys in self.probe_waiters.values_mut() {
            keys.retain(|(p, _)| !parts.contains(p));
        }
        self.probe_waiters.retain(|_, keys| !keys.is_empty());
        dropped
    }

    /// The lowest unfinished offset of `part` (one past the last when all are
    /// finished; `None` when nothing is tracked).
    pub fn lowest_unfinished(&self, part: Part) -> Option<i64> {
        self.offsets.committable(part)
    }

    /// Whether an offset of `part` may still be committed: it is assigned,
    /// or revoked and not yet [`forget`](Self::forget)-ten — the revoke's
    /// final commits still carry its watermark.
    pub fn commits_offsets(&self, part: Part) -> bool {
        self.offsets.is_tracked(part)
    }

    /// Whether work matching `which` is running.
    #[cfg(test)]
    pub fn is_running(&self, which: impl Fn(&Key) -> bool) -> bool {
        self.running.keys().any(which)
    }

    pub fn running_attempts(&self) -> usize {
        self.running
            .values()
            .filter(|r| matches!(r, Running::Attempt { .. }))
            .count()
    }

    /// Attempts in flight by class: `(first attempts, retries, overflow)`, a
    /// retry being a record of a tier (it draws on the retry share), overflow
    /// one read back from an overflow lane (it draws on the overflow share).
    pub fn running_attempts_by_class(&self) -> (usize, usize, usize) {
        let mut by_class = (0, 0, 0);
        for (key, run) in &self.running {
            if !matches!(run, Running::Attempt { .. }) {
                continue;
            }
            match self.inputs.get(usize::from(key.0.input)) {
                Some(input) if input.retry() => by_class.1 += 1,
                Some(input) if input.overflow() => by_class.2 += 1,
                _ => by_class.0 += 1,
            }
        }
        by_class
    }

    /// Gives up on running work matching `which`: its offsets stay unfinished
    /// (re-attempted by whoever reads them next). Returns the keys, for the
    /// adapter to cancel.
    pub fn abandon(&mut self, which: impl Fn(&Key) -> bool) -> Vec<Key> {
        let mut keys: Vec<Key> = self.running.keys().copied().filter(|k| which(k)).collect();
        keys.sort();
        for key in &keys {
            if let Some(run) = self.running.remove(key) {
                self.release(*key, &run);
                self.overflow.ended(*key, false);
            }
        }
        keys
    }

    /// Forgets revoked partitions' offsets, after their final store and commit.
    pub fn forget(&mut self, parts: &[Part]) {
        self.offsets.forget(parts);
    }

    /// Shutdown: drops every queued record (unfinished). Returns how many.
    pub fn drop_queued(&mut self) -> usize {
        let mut parts: Vec<Part> = self.queued.keys().map(|(p, _)| *p).collect();
        parts.sort();
        parts.dedup();
        for part in &parts {
            self.lanes.drop_partition(part);
        }
        let dropped = self.queued.len();
        self.queued.clear();
        dropped
    }

    /// Held partitions (any reason), ascending.
    pub fn held(&self) -> impl Iterator<Item = Part> + '_ {
        self.gate.held()
    }

    /// Partitions held with ready records left unfetched — a full buffer share
    /// or too many pending writes; not a head not yet due, nor a rewind — and
    /// the next offset each fetches: [`counts`](Self::counts) cannot see those
    /// records, so the engine peeks at that offset (`backlog.rs`).
    pub fn unfetched_behind(&self) -> Vec<(Part, i64)> {
        use gate::Hold;
        self.gate
            .held()
            .filter(|p| {
                (self.gate.holds(*p, Hold::Buffer) || self.gate.holds(*p, Hold::Writes))
                    && !self.gate.holds(*p, Hold::NotDue)
                    && !self.gate.holds(*p, Hold::Rewinding)
            })
            .filter_map(|p| Some((p, self.next_to_fetch(p)?)))
            .collect()
    }

    /// The next offset an assigned partition fetches (one past the last record
    /// it handed the machine), if it has handed any since its assignment.
    pub fn next_to_fetch(&self, part: Part) -> Option<i64> {
        if !self.gate.is_assigned(part) {
            return None;
        }
        self.offsets.next_to_fetch(part)
    }

    /// Per input (indexed like the inputs), what waits and since when.
    pub fn counts(&self, now: SystemTime) -> Vec<InputCounts> {
        let mut counts = vec![InputCounts::default(); self.inputs.len()];
        let earlier = |slot: &mut Option<SystemTime>, t: SystemTime| {
            if slot.is_none_or(|o| t < o) {
                *slot = Some(t);
            }
        };
        for ((part, _), q) in &self.queued {
            let c = &mut counts[usize::from(part.input)];
            earlier(&mut c.oldest_ready, q.ready_since);
            c.waiting += 1;
            c.due += 1;
        }
        for (part, _) in self.running.keys() {
            counts[usize::from(part.input)].waiting += 1;
        }
        // A held head past its due time is ready but unattempted too: this is
        // where a stalled scheduler shows.
        for (part, until) in self.gate.not_due() {
            let c = &mut counts[usize::from(part.input)];
            c.not_due += 1;
            c.waiting += 1;
            if until <= now {
                earlier(&mut c.oldest_ready, until);
                c.due += 1;
            }
        }
        counts
    }

    pub fn lanes(&self) -> &Lanes<Part> {
        &self.lanes
    }

    fn gate_actions(&mut self, out: Vec<GateAction>) {
        self.actions.extend(out.into_iter().map(Action::Gate));
    }

    #[cfg(test)]
    fn gate(&self) -> &Gate {
        &self.gate
    }
}
