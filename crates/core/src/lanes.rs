//! The dispatcher's fair scheduler: a record starts only when every cap allows it
//! (subscription `max_in_flight`, tenant, global, retry share), each lane starts its
//! records in push order, lanes take turns round-robin so a big lane never starves a
//! small one, and buffering is bounded by backpressure — never by dropping: every
//! pushed record is started, or returned by [`Lanes::drop_partition`], exactly once.
//!
//! Lanes are keyed by subscription *and* by first-attempt/retry: a subscription has
//! up to two FIFO lanes sharing its `max_in_flight`. Keeping retries in their own lane
//! means a retry waiting for the retry share never holds up a first attempt behind it
//! (DESIGN §4: a backlog of failing retries never delays first attempts). At
//! `max_in_flight = 1` first attempts still start strictly in order, one at a time.
//!
//! A subscription may also have a rate limit ([`TokenBucket`], shared by its two
//! lanes): in any window of length `w` it starts at most `capacity + rate × w`
//! records. A lane whose bucket is empty is skipped by the round robin like a lane
//! at its cap, so other lanes keep flowing; [`Lanes::next_rate_wakeup`] says when
//! it may start again. Lanes without a rate behave exactly as if rates did not exist.
//!
//! A started job can be given back to the *front* of its lane, not to start again
//! before a time ([`Lanes::defer`]): its slots are freed meanwhile, its buffer share
//! stays held, and nothing behind it in its lane starts first. This is how a strict
//! subscription's head waits out its backoff in place (`ordering = strict`).

use std::collections::{hash_map::Entry, BTreeMap, HashMap, VecDeque};
use std::time::SystemTime;

use crate::rate::{RateLimit, TokenBucket};

/// Identifies a lane: the subscription whose records it holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneKey {
    pub subscription_id: String,
}

/// A buffered record, as the scheduler sees it. `P` names a partition, e.g.
/// `(topic_index, partition)`; (`partition`, `offset`) must be unique while held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job<P> {
    pub partition: P,
    pub offset: i64,
    pub lane: LaneKey,
    pub tenant_id: String,
    /// From a retry tier (counts against the retry share) rather than the ready queue.
    pub retry: bool,
    /// Memory held while buffered (payload size is a fine estimate).
    pub bytes: usize,
}

/// A job handed out by [`Lanes::pop_ready`]; give it back to [`Lanes::complete`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started<P> {
    pub job: Job<P>,
    pub enqueued_at: SystemTime,
}

/// What a push asks of the consumer for the record's partition.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Pause fetching this partition; [`Lanes::take_resumable`] says when to resume.
    Pause,
}

/// What a push says about its subscription; the latest push sets both.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaneSettings {
    /// Cap on the subscription's records in flight (0 is treated as 1).
    pub max_in_flight: u32,
    /// Cap on starts per second; `None`, non-positive or non-finite is unlimited.
    pub rate_per_s: Option<f64>,
}

impl LaneSettings {
    pub fn unlimited_rate(max_in_flight: u32) -> Self {
        Self {
            max_in_flight,
            rate_per_s: None,
        }
    }
}

/// Caps and buffer bounds. Buffered = queued + in flight (memory held).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneLimits {
    pub global_in_flight: u32,
    pub tenant_in_flight: u32,
    /// Retries may hold at most `ceil(global_in_flight × pct / 100)` slots (1..=100).
    pub retry_share_percent: u8,
    pub partition_records: usize,
    pub partition_bytes: usize,
    pub total_records: usize,
    pub total_bytes: usize,
}

impl Default for LaneLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl LaneLimits {
    /// The product's limits: the dispatcher's flags (`--global-in-flight`,
    /// `--partition-buffer-records`, ...) default to these fields, so the flags
    /// and the library cannot disagree.
    pub const DEFAULT: Self = Self {
        global_in_flight: 256,
        tenant_in_flight: 32,
        retry_share_percent: 50,
        partition_records: 5_000,
        partition_bytes: 32 << 20,
        total_records: 50_000,
        total_bytes: 256 << 20,
    };

    /// Slots retries may occupy: `ceil(global × share)`, at least 1.
    pub fn retry_slots(&self) -> u32 {
        let slots =
            (u64::from(self.global_in_flight) * u64::from(self.retry_share_percent)).div_ceil(100);
        u32::try_from(slots).unwrap_or(u32::MAX).max(1)
    }

    pub fn validate(&self) -> Result<(), LaneError> {
        let positive = [
            ("global_in_flight", self.global_in_flight as usize),
            ("tenant_in_flight", self.tenant_in_flight as usize),
            ("partition_records", self.partition_records),
            ("partition_bytes", self.partition_bytes),
            ("total_records", self.total_records),
            ("total_bytes", self.total_bytes),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(LaneError::InvalidLimit {
                field,
                requirement: "at least 1",
            });
        }
        if !(1..=100).contains(&self.retry_share_percent) {
            return Err(LaneError::InvalidLimit {
                field: "retry_share_percent",
                requirement: "between 1 and 100",
            });
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneError {
    #[error("lane limit `{field}` must be {requirement}")]
    InvalidLimit {
        field: &'static str,
        requirement: &'static str,
    },
    #[error("offset {offset} of this partition is already queued or in flight")]
    Duplicate { offset: i64 },
    #[error("offset {offset} of this partition is not in flight")]
    NotInFlight { offset: i64 },
}

/// (subscription, is_retry): one FIFO lane.
type LaneId = (LaneKey, bool);

#[derive(Debug, Default)]
struct SubState {
    in_flight: u32,
    max_in_flight: u32,
    queued: usize,
}

#[derive(Debug, Default)]
struct PartitionState {
    /// Queued (not started) offsets with their enqueue time.
    queued: BTreeMap<i64, SystemTime>,
    /// Held records and bytes: queued + in flight.
    records: usize,
    bytes: usize,
    /// We asked the consumer to pause it and have not yet said resume.
    paused: bool,
}

#[derive(Debug)]
struct InFlight {
    subscription: String,
    tenant: String,
    retry: bool,
    bytes: usize,
}

/// The scheduler. Pure state: the engine pushes fetched records, pops what may start,
/// completes what finished, and pauses/resumes partitions as told.
#[derive(Debug)]
pub struct Lanes<P> {
    limits: LaneLimits,
    retry_slots: u32,
    lanes: HashMap<LaneId, VecDeque<Started<P>>>,
    /// Round-robin order of the non-empty lanes: exactly the keys of `lanes`.
    ring: VecDeque<LaneId>,
    subs: HashMap<String, SubState>,
    tenants: HashMap<String, u32>,
    partitions: BTreeMap<P, PartitionState>,
    in_flight: BTreeMap<(P, i64), InFlight>,
    retry_in_flight: u32,
    held_records: usize,
    held_bytes: usize,
    /// Rate-limited subscriptions' buckets. A bucket outlives its subscription's
    /// records until it is full again, so draining a lane never grants a new burst.
    buckets: HashMap<String, TokenBucket>,
    /// The latest `now` passed in; rate decisions never see time go backwards.
    clock: Option<SystemTime>,
    /// Lanes whose head was given back by [`defer`](Self::defer): the head's
    /// (partition, offset) and the time before which it may not start.
    deferred: HashMap<LaneId, (P, i64, SystemTime)>,
}

impl<P: Ord + Clone> Lanes<P> {
    pub fn new(limits: LaneLimits) -> Result<Self, LaneError> {
        limits.validate()?;
        Ok(Self {
            retry_slots: limits.retry_slots(),
            limits,
            lanes: HashMap::new(),
            ring: VecDeque::new(),
            subs: HashMap::new(),
            tenants: HashMap::new(),
            partitions: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            retry_in_flight: 0,
            held_records: 0,
            held_bytes: 0,
            buckets: HashMap::new(),
            clock: None,
            deferred: HashMap::new(),
        })
    }

    pub fn limits(&self) -> &LaneLimits {
        &self.limits
    }

    /// [`push_with`](Self::push_with) for a subscription without a rate limit.
    pub fn push(
        &mut self,
        job: Job<P>,
        max_in_flight: u32,
        now: SystemTime,
    ) -> Result<Flow, LaneError> {
        self.push_with(job, LaneSettings::unlimited_rate(max_in_flight), now)
    }

    /// Buffers a fetched record; always accepted (never dropped). `settings` are the
    /// subscription's current caps; the latest push sets them. Returns `Pause`
    /// while the partition is over its share — at or above a partition or total
    /// limit — until [`take_resumable`](Self::take_resumable) releases it.
    pub fn push_with(
        &mut self,
        job: Job<P>,
        settings: LaneSettings,
        now: SystemTime,
    ) -> Result<Flow, LaneError> {
        let queued = self
            .partitions
            .get(&job.partition)
            .is_some_and(|p| p.queued.contains_key(&job.offset));
        if queued
            || self
                .in_flight
                .contains_key(&(job.partition.clone(), job.offset))
        {
            return Err(LaneError::Duplicate { offset: job.offset });
        }
        let part = self.partitions.entry(job.partition.clone()).or_default();
        part.queued.insert(job.offset, now);
        part.records += 1;
        part.bytes += job.bytes;
        self.held_records += 1;
        self.held_bytes += job.bytes;
        let limits = &self.limits;
        if part.records >= limits.partition_records
            || part.bytes >= limits.partition_bytes
            || self.held_records >= limits.total_records
            || self.held_bytes >= limits.total_bytes
        {
            part.paused = true;
        }
        let flow = if part.paused {
            Flow::Pause
        } else {
            Flow::Continue
        };

        let sub = self
            .subs
            .entry(job.lane.subscription_id.clone())
            .or_default();
        sub.max_in_flight = settings.max_in_flight.max(1);
        sub.queued += 1;
        match settings.rate_per_s.and_then(RateLimit::per_second) {
            Some(limit) => match self.buckets.entry(job.lane.subscription_id.clone()) {
                Entry::Occupied(mut b) => b.get_mut().set_limit(limit),
                Entry::Vacant(slot) => {
                    slot.insert(TokenBucket::new(limit));
                }
            },
            None => {
                self.buckets.remove(&job.lane.subscription_id);
            }
        }
        self.tick(now);
        let id = (job.lane.clone(), job.retry);
        let entry = Started {
            job,
            enqueued_at: now,
        };
        match self.lanes.entry(id) {
            Entry::Occupied(mut lane) => lane.get_mut().push_back(entry),
            Entry::Vacant(slot) => {
                self.ring.push_back(slot.key().clone());
                slot.insert(VecDeque::from([entry]));
            }
        }
        Ok(flow)
    }

    /// [`pop_ready_at`](Self::pop_ready_at) at the latest time passed in so far
    /// (rate limits refill nothing).
    pub fn pop_ready(&mut self) -> Option<Started<P>> {
        let now = self.clock?;
        self.pop_ready_at(now)
    }

    /// Starts the head of the first lane, in round-robin order, that every cap and
    /// its subscription's rate limit allow at `now`; that lane then goes to the back
    /// of the order. `None` when nothing queued may start now (call again after a
    /// push, a completion or at [`next_rate_wakeup`](Self::next_rate_wakeup)).
    pub fn pop_ready_at(&mut self, now: SystemTime) -> Option<Started<P>> {
        let now = self.tick(now);
        if self.in_flight.len() >= self.limits.global_in_flight as usize {
            return None;
        }
        let index = self
            .ring
            .iter()
            .position(|id| self.head_can_start(id, now))?;
        let id = self.ring.remove(index).expect("index from position");
        let lane = self.lanes.get_mut(&id).expect("ring and lanes agree");
        let started = lane.pop_front().expect("lanes in the ring are non-empty");
        self.deferred.remove(&id);
        if lane.is_empty() {
            self.lanes.remove(&id);
        } else {
            self.ring.push_back(id);
        }

        let job = &started.job;
        if let Some(bucket) = self.buckets.get_mut(&job.lane.subscription_id) {
            let took = bucket.try_take(now);
            debug_assert!(took, "head_can_start checked the bucket");
        }
        let sub = self
            .subs
            .get_mut(&job.lane.subscription_id)
            .expect("queued job has a subscription");
        sub.in_flight += 1;
        sub.queued -= 1;
        *self.tenants.entry(job.tenant_id.clone()).or_default() += 1;
        if job.retry {
            self.retry_in_flight += 1;
        }
        if let Some(part) = self.partitions.get_mut(&job.partition) {
            part.queued.remove(&job.offset);
        }
        self.in_flight.insert(
            (job.partition.clone(), job.offset),
            InFlight {
                subscription: job.lane.subscription_id.clone(),
                tenant: job.tenant_id.clone(),
                retry: job.retry,
                bytes: job.bytes,
            },
        );
        Some(started)
    }

    /// Advances the clock to `now` unless it is behind; returns the clock. Forgets
    /// buckets that are full and whose subscription holds nothing.
    fn tick(&mut self, now: SystemTime) -> SystemTime {
        let now = self.clock.map_or(now, |c| c.max(now));
        self.clock = Some(now);
        let subs = &self.subs;
        self.buckets
            .retain(|sub, b| subs.contains_key(sub) || !b.is_full(now));
        now
    }

    fn head_can_start(&self, id: &LaneId, now: SystemTime) -> bool {
        let Some(head) = self.lanes.get(id).and_then(VecDeque::front) else {
            return false;
        };
        let job = &head.job;
        if let Some((partition, offset, not_before)) = self.deferred.get(id) {
            if *partition == job.partition && *offset == job.offset && now < *not_before {
                return false;
            }
        }
        let sub_ok = self
            .subs
            .get(&job.lane.subscription_id)
            .is_some_and(|s| s.in_flight < s.max_in_flight);
        let tenant = self.tenants.get(&job.tenant_id).copied().unwrap_or(0);
        sub_ok
            && tenant < self.limits.tenant_in_flight
            && (!job.retry || self.retry_in_flight < self.retry_slots)
            && self
                .buckets
                .get(&job.lane.subscription_id)
                .is_none_or(|b| b.allows(now))
    }

    /// The earliest time a subscription with queued records, held back by its rate
    /// limit as of the latest `now`, may start one; `None` when none is held back.
    /// (It may still wait on another cap then; a completion wakes it for that.)
    pub fn next_rate_wakeup(&self) -> Option<SystemTime> {
        let now = self.clock?;
        self.rate_held()
            .map(|b| b.next_start())
            .filter(|t| *t > now)
            .min()
    }

    /// The earliest time a deferred head (see [`defer`](Self::defer)) may start,
    /// when one is still waiting as of the latest `now`.
    pub fn next_deferred_wakeup(&self) -> Option<SystemTime> {
        let now = self.clock?;
        self.deferred
            .iter()
            .filter(|(id, (partition, offset, _))| {
                self.lanes
                    .get(*id)
                    .and_then(VecDeque::front)
                    .is_some_and(|h| h.job.partition == *partition && h.job.offset == *offset)
            })
            .map(|(_, (_, _, t))| *t)
            .filter(|t| *t > now)
            .min()
    }

    /// Gives a started job back to the front of its lane, not to start before
    /// `not_before`: its subscription, tenant, retry and global slots are freed,
    /// its buffer share stays held, and the records behind it in its lane wait
    /// behind it (whatever their subscription's `max_in_flight`, they start only
    /// after it, since a lane starts in order). It starts again through
    /// [`pop_ready_at`](Self::pop_ready_at), or is dropped with its partition.
    pub fn defer(&mut self, started: Started<P>, not_before: SystemTime) -> Result<(), LaneError> {
        let offset = started.job.offset;
        let key = (started.job.partition.clone(), offset);
        let info = self
            .in_flight
            .remove(&key)
            .ok_or(LaneError::NotInFlight { offset })?;
        let sub = self.subs.entry(info.subscription.clone()).or_default();
        sub.in_flight = sub.in_flight.saturating_sub(1);
        sub.queued += 1;
        sub.max_in_flight = sub.max_in_flight.max(1);
        if let Some(count) = self.tenants.get_mut(&info.tenant) {
            *count -= 1;
            if *count == 0 {
                self.tenants.remove(&info.tenant);
            }
        }
        if info.retry {
            self.retry_in_flight -= 1;
        }
        self.partitions
            .entry(key.0.clone())
            .or_default()
            .queued
            .insert(offset, started.enqueued_at);
        let id = (started.job.lane.clone(), started.job.retry);
        self.deferred
            .insert(id.clone(), (key.0, offset, not_before));
        match self.lanes.entry(id) {
            Entry::Occupied(mut lane) => lane.get_mut().push_front(started),
            Entry::Vacant(slot) => {
                self.ring.push_back(slot.key().clone());
                slot.insert(VecDeque::from([started]));
            }
        }
        Ok(())
    }

    /// Subscriptions with queued records whose rate limit holds them back now.
    pub fn rate_limited_subscriptions(&self) -> usize {
        self.rate_held().count()
    }

    fn rate_held(&self) -> impl Iterator<Item = &TokenBucket> {
        let now = self.clock;
        self.buckets.iter().filter_map(move |(sub, b)| {
            let queued = self.subs.get(sub).is_some_and(|s| s.queued > 0);
            (queued && now.is_some_and(|now| !b.allows(now))).then_some(b)
        })
    }

    /// Frees the slots of a started job (whatever its outcome). Caps and buffer
    /// accounting use what was recorded at start, not the fields passed back.
    pub fn complete(&mut self, started: &Started<P>) -> Result<(), LaneError> {
        let offset = started.job.offset;
        let info = self
            .in_flight
            .remove(&(started.job.partition.clone(), offset))
            .ok_or(LaneError::NotInFlight { offset })?;
        if let Some(sub) = self.subs.get_mut(&info.subscription) {
            sub.in_flight -= 1;
            if sub.in_flight == 0 && sub.queued == 0 {
                self.subs.remove(&info.subscription);
            }
        }
        if let Some(count) = self.tenants.get_mut(&info.tenant) {
            *count -= 1;
            if *count == 0 {
                self.tenants.remove(&info.tenant);
            }
        }
        if info.retry {
            self.retry_in_flight -= 1;
        }
        self.release(&started.job.partition, 1, info.bytes);
        Ok(())
    }

    /// Removes a revoked partition's queued records and returns their offsets,
    /// ascending; its in-flight records stay in flight and must still be completed.
    /// Clears its pause (the partition is no longer ours to resume).
    pub fn drop_partition(&mut self, partition: &P) -> Vec<i64> {
        let Some(part) = self.partitions.get_mut(partition) else {
            return Vec::new();
        };
        part.paused = false;
        let offsets: Vec<i64> = std::mem::take(&mut part.queued).into_keys().collect();
        let mut bytes = 0;
        for queue in self.lanes.values_mut() {
            queue.retain(|s| {
                if s.job.partition != *partition {
                    return true;
                }
                bytes += s.job.bytes;
                if let Some(sub) = self.subs.get_mut(&s.job.lane.subscription_id) {
                    sub.queued -= 1;
                }
                false
            });
        }
        self.lanes.retain(|_, queue| !queue.is_empty());
        let lanes = &self.lanes;
        self.ring.retain(|id| lanes.contains_key(id));
        self.deferred.retain(|_, (p, _, _)| p != partition);
        self.subs.retain(|_, s| s.queued > 0 || s.in_flight > 0);
        self.release(partition, offsets.len(), bytes);
        offsets
    }

    /// Removes the queued (not started) first-attempt records of
    /// `subscription_id` on `partition` and returns their offsets, ascending:
    /// they are moved elsewhere (an overflow lane), so their buffer share is
    /// released here. In-flight records of it stay in flight.
    pub fn withdraw(&mut self, partition: &P, subscription_id: &str) -> Vec<i64> {
        let id = (
            LaneKey {
                subscription_id: subscription_id.to_owned(),
            },
            false,
        );
        let Some(queue) = self.lanes.get_mut(&id) else {
            return Vec::new();
        };
        let mut offsets = Vec::new();
        let mut bytes = 0;
        queue.retain(|s| {
            if s.job.partition != *partition {
                return true;
            }
            offsets.push(s.job.offset);
            bytes += s.job.bytes;
            false
        });
        if queue.is_empty() {
            self.lanes.remove(&id);
            self.ring.retain(|r| *r != id);
        }
        if let Some((p, o, _)) = self.deferred.get(&id) {
            if p == partition && offsets.contains(o) {
                self.deferred.remove(&id);
            }
        }
        if let Some(part) = self.partitions.get_mut(partition) {
            for offset in &offsets {
                part.queued.remove(offset);
            }
        }
        if let Some(sub) = self.subs.get_mut(subscription_id) {
            sub.queued -= offsets.len();
            if sub.queued == 0 && sub.in_flight == 0 {
                self.subs.remove(subscription_id);
            }
        }
        self.release(partition, offsets.len(), bytes);
        offsets.sort_unstable();
        offsets
    }

    fn release(&mut self, partition: &P, records: usize, bytes: usize) {
        self.held_records -= records;
        self.held_bytes -= bytes;
        if let Some(part) = self.partitions.get_mut(partition) {
            part.records -= records;
            part.bytes -= bytes;
            if part.records == 0 && !part.paused {
                self.partitions.remove(partition);
            }
        }
    }

    /// Whether a partition we paused has drained enough to resume: it is at or
    /// below half of its partition limits and the totals are at or below half of
    /// theirs (hysteresis, so partitions do not flap at the limit).
    pub fn should_resume(&self, partition: &P) -> bool {
        self.partitions
            .get(partition)
            .is_some_and(|p| p.paused && self.below_low_water(p))
    }

    /// Every partition that [`should_resume`](Self::should_resume), ascending; each
    /// is forgotten as paused, so it is returned once per pause.
    pub fn take_resumable(&mut self) -> Vec<P> {
        let resumable: Vec<P> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.paused && self.below_low_water(p))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &resumable {
            if let Some(part) = self.partitions.get_mut(key) {
                part.paused = false;
                if part.records == 0 {
                    self.partitions.remove(key);
                }
            }
        }
        resumable
    }

    fn below_low_water(&self, p: &PartitionState) -> bool {
        let l = &self.limits;
        p.records <= l.partition_records / 2
            && p.bytes <= l.partition_bytes / 2
            && self.held_records <= l.total_records / 2
            && self.held_bytes <= l.total_bytes / 2
    }

    pub fn is_paused(&self, partition: &P) -> bool {
        self.partitions.get(partition).is_some_and(|p| p.paused)
    }

    /// Lanes with queued records (a subscription has up to two).
    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    pub fn retry_in_flight(&self) -> u32 {
        self.retry_in_flight
    }

    pub fn subscription_in_flight(&self, subscription_id: &str) -> u32 {
        self.subs.get(subscription_id).map_or(0, |s| s.in_flight)
    }

    pub fn tenant_in_flight(&self, tenant_id: &str) -> u32 {
        self.tenants.get(tenant_id).copied().unwrap_or(0)
    }

    /// Records queued, not yet started.
    pub fn queued_records(&self) -> usize {
        self.held_records - self.in_flight.len()
    }

    /// Records held: queued + in flight.
    pub fn buffered_records(&self) -> usize {
        self.held_records
    }

    /// Bytes held: queued + in flight.
    pub fn buffered_bytes(&self) -> usize {
        self.held_bytes
    }

    /// (records, bytes) held for one partition.
    pub fn partition_buffered(&self, partition: &P) -> (usize, usize) {
        self.partitions
            .get(partition)
            .map_or((0, 0), |p| (p.records, p.bytes))
    }

    /// The earliest enqueue time among a partition's queued records (O(queued)).
    pub fn oldest_enqueued(&self, partition: &P) -> Option<SystemTime> {
        self.partitions
            .get(partition)?
            .queued
            .values()
            .min()
            .copied()
    }

    /// Nothing queued and nothing in flight.
    pub fn is_idle(&self) -> bool {
        self.held_records == 0
    }
}

#[cfg(test)]
#[path = "lanes_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "lanes_rate_tests.rs"]
mod rate_tests;
