//! The delivery engine: buffers fetched deliveries into lanes, starts attempts as
//! the caps allow, and finishes offsets only when an attempt's outcome is durable.
//!
//! Guarantees:
//! - at least once: an offset is finished only after delivery, a durable retry or
//!   dead-letter record, a cancellation, or — for a record that is not a
//!   `Delivery` — a durable quarantined record (quarantine.rs); only the
//!   watermark is stored;
//! - fairness: `hookline_core::Lanes` decides what starts (per-subscription
//!   `max_in_flight` and `rate_limit_per_s`, tenant and global caps, retry share,
//!   round-robin); a lane held back by its rate is started at its
//!   `next_rate_wakeup` by the same timer arm as due partitions;
//! - bounded memory: a partition over its buffer share is paused until drained;
//! - revoke and shutdown: queued records are dropped (not attempted), in-flight
//!   attempts get the request timeout to finish, then the watermark is stored and
//!   committed; whatever did not finish stays unfinished and is re-attempted.
//!
//! - never early: a retry-tier record is pushed only once `now ≥ due_at`. When a
//!   tier partition's head is not due, its offset is forgotten by the watermark,
//!   the poller pauses the partition and seeks back to it, and a [`DueTimers`]
//!   entry resumes it at the due time (one timer arm in the loop, not a task per
//!   partition; the poller keeps polling, so the group session stays alive).
//!   Records of that partition fetched before the seek are dropped until the
//!   poller's `Rewound` marker, and refetched after the resume. A partition is
//!   resumed only when neither backpressure, a rewind nor a timer holds it, and
//!   always on (re)assignment.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use hookline_core::{
    head_decision, DueTimers, Flow, HeadDecision, Job, LaneKey, LaneLimits, LaneSettings, Lanes,
    Started,
};
use hookline_envelope::{decode_value, Delivery, Unusable};
use hookline_runtime::{
    group_watch::HeldPartitions, health::Health, kafka, subscriptions::Subscriptions,
};
use rdkafka::{
    consumer::Consumer,
    message::{Message, OwnedMessage},
    TopicPartitionList,
};
use tokio::{
    sync::mpsc,
    task::{AbortHandle, Id, JoinError, JoinSet},
};
use tokio_util::sync::CancellationToken;

use crate::{
    attempt::{self, AttemptContext, Finished, Target},
    consumer::{Command, Consumers, FromKafka, TopicPartition},
    metrics,
    offsets::{self, Offsets},
    quarantine, DispatcherError,
};

const LOOP: &str = "dispatcher";
const TICK: Duration = Duration::from_millis(200);
/// Gauges are refreshed every this many ticks.
const GAUGE_TICKS: u32 = 5;
/// Time for a follow-up produce after the request timeout, when draining.
const DRAIN_SLACK: Duration = Duration::from_secs(5);
/// Added to a due time before sleeping on it, so the wall clock has surely passed
/// it when the refetched head is checked (the sleep runs on the monotonic clock).
const WAKE_SLACK: Duration = Duration::from_millis(2);

/// One consumed topic.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    pub topic: String,
    /// Metric label: `deliveries` or the tier name.
    pub label: &'static str,
    /// Records are retries (they count against the retry share).
    pub retry: bool,
}

/// A partition of an input, as lanes and offsets key it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Part {
    pub input: u16,
    pub partition: i32,
}

type Key = (Part, i64);

/// A rewind in progress: the poller has been asked to pause and seek back to `offset`.
#[derive(Debug, Clone, Copy)]
struct Rewind {
    generation: u64,
    offset: i64,
}

/// A buffered record not yet started.
#[derive(Debug)]
struct Held {
    delivery: Delivery,
    ready_since: SystemTime,
}

/// A task in flight: an attempt the lanes started, or (`started: None`) the
/// quarantine write of a record that is not a `Delivery`.
#[derive(Debug)]
struct Running {
    started: Option<Started<Part>>,
    abort: AbortHandle,
    cancel: CancellationToken,
}

pub(crate) struct Engine {
    inputs: Vec<Input>,
    /// One consumer per input, indexed like `inputs`.
    consumers: Consumers,
    events: mpsc::Receiver<FromKafka>,
    subs: Subscriptions,
    ctx: Arc<AttemptContext>,
    health: Health,
    request_timeout: Duration,
    shutdown_grace: Duration,
    lanes: Lanes<Part>,
    offsets: Offsets,
    held: HashMap<Key, Held>,
    running: HashMap<Key, Running>,
    tasks: JoinSet<(Key, Finished)>,
    task_keys: HashMap<Id, Key>,
    /// Paused by us for backpressure (lanes' buffer, or quarantine writes).
    paused: std::collections::BTreeSet<Part>,
    /// Quarantine writes in flight per partition.
    quarantining: HashMap<Part, usize>,
    /// Tier partitions paused until their head is due.
    timers: DueTimers<Part>,
    /// Partitions being rewound: their messages are stale until `Rewound`.
    rewinding: HashMap<Part, Rewind>,
    /// Rewinds the poller refused while the partition stayed ours: asked again.
    rewind_again: Vec<Part>,
    generation: u64,
    /// Per input: its consumer's rebalance epoch as last reported.
    epochs: Vec<u64>,
    /// Per input: its poller's command channel.
    commands: Vec<std::sync::mpsc::Sender<Command>>,
    /// Per input: the partitions paused on purpose, for its consumer's watch.
    on_purpose: Vec<HeldPartitions>,
    ticks: u32,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("inputs", &self.inputs)
            .field("in_flight", &self.running.len())
            .field("queued", &self.held.len())
            .finish_non_exhaustive()
    }
}

/// What [`Engine::new`] needs besides the limits.
pub(crate) struct Parts {
    pub inputs: Vec<Input>,
    pub consumers: Consumers,
    pub events: mpsc::Receiver<FromKafka>,
    pub subs: Subscriptions,
    pub ctx: Arc<AttemptContext>,
    pub health: Health,
    pub request_timeout: Duration,
    pub shutdown_grace: Duration,
    pub commands: Vec<std::sync::mpsc::Sender<Command>>,
    pub on_purpose: Vec<HeldPartitions>,
}

impl Engine {
    pub(crate) fn new(p: Parts, limits: LaneLimits) -> Result<Self, DispatcherError> {
        Ok(Self {
            epochs: vec![0; p.inputs.len()],
            inputs: p.inputs,
            consumers: p.consumers,
            events: p.events,
            subs: p.subs,
            ctx: p.ctx,
            health: p.health,
            request_timeout: p.request_timeout,
            shutdown_grace: p.shutdown_grace,
            lanes: Lanes::new(limits)?,
            offsets: Offsets::default(),
            held: HashMap::new(),
            running: HashMap::new(),
            tasks: JoinSet::new(),
            task_keys: HashMap::new(),
            paused: Default::default(),
            quarantining: HashMap::new(),
            timers: DueTimers::new(),
            rewinding: HashMap::new(),
            rewind_again: Vec::new(),
            generation: 0,
            commands: p.commands,
            on_purpose: p.on_purpose,
            ticks: 0,
        })
    }

    /// Runs until `shutdown`, then drains.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.start_ready();
            // A due partition to resume or a rate-limited lane allowed to start.
            let next = match (self.timers.next_wakeup(), self.lanes.next_rate_wakeup()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let wakeup = next.map(|at| {
                let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
                tokio::time::Instant::now() + wait + WAKE_SLACK
            });
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = sleep_until_some(wakeup), if wakeup.is_some() => self.on_due(),
                Some(done) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => self.on_done(done),
                event = self.events.recv() => match event {
                    Some(event) => self.on_event(event).await,
                    None => break,
                },
                _ = tick.tick() => self.on_tick(),
            }
        }
        self.drain().await;
    }

    async fn on_event(&mut self, event: FromKafka) {
        match event {
            FromKafka::Message(msg) => self.on_message(msg),
            FromKafka::Assigned {
                input,
                parts,
                epoch,
            } => {
                self.epochs[usize::from(input)] = epoch;
                let mut tpl = TopicPartitionList::new();
                for (topic, partition) in parts {
                    if let Some(part) = self.part(&topic, partition) {
                        self.offsets.assign(part);
                        self.paused.remove(&part);
                        self.timers.cancel(&part);
                        self.rewinding.remove(&part);
                        tpl.add_partition(&topic, partition);
                    }
                }
                // librdkafka keeps a partition's pause flag across rebalances: a
                // partition paused until due by its previous owner (or by us before
                // a revoke) would otherwise never be fetched again. Its head is
                // checked afresh when it arrives.
                if let Err(error) = self.consumers[usize::from(input)].resume(&tpl) {
                    tracing::debug!(%error, "resume after assignment");
                }
            }
            FromKafka::Revoked {
                input,
                parts,
                confirm,
                epoch,
            } => {
                self.epochs[usize::from(input)] = epoch;
                self.revoke(input, &parts).await;
                let _ = confirm.send(());
            }
            FromKafka::Rewound {
                partition: (topic, partition),
                generation,
                done,
            } => self.on_rewound(&topic, partition, generation, done),
            FromKafka::Error(error) => tracing::warn!(%error, "consumer error"),
        }
    }

    fn part(&self, topic: &str, partition: i32) -> Option<Part> {
        let input = self.inputs.iter().position(|i| i.topic == topic)?;
        Some(Part {
            input: u16::try_from(input).ok()?,
            partition,
        })
    }

    fn topic_of(&self, part: Part) -> String {
        self.inputs[usize::from(part.input)].topic.clone()
    }

    fn on_message(&mut self, msg: OwnedMessage) {
        let Some(part) = self.part(msg.topic(), msg.partition()) else {
            tracing::warn!(topic = msg.topic(), "message from an unexpected topic");
            return;
        };
        let offset = msg.offset();
        if self.rewinding.contains_key(&part) {
            // Fetched before the seek back to a head not yet due; refetched later.
            return;
        }
        if let Err(error) = self.offsets.track(part, offset) {
            tracing::warn!(topic = msg.topic(), partition = part.partition, offset, %error, "skipping a record already tracked");
            return;
        }
        let delivery: Delivery = match decode_value(msg.payload()) {
            Ok(d) => d,
            Err(unusable) => return self.quarantine(part, &msg, &unusable),
        };
        let input = &self.inputs[usize::from(part.input)];
        if input.retry {
            let due_at = UNIX_EPOCH + Duration::from_millis(delivery.due_at.max(0).unsigned_abs());
            if let HeadDecision::Wait { until } = head_decision(due_at, SystemTime::now()) {
                self.wait_until_due(part, offset, until);
                return;
            }
        }
        // Non-positive or non-finite rates are unlimited (`LaneSettings`).
        let settings =
            self.subs
                .get(&delivery.subscription_id)
                .map_or(LaneSettings::unlimited_rate(1), |s| LaneSettings {
                    max_in_flight: u32::try_from(s.record.max_in_flight).unwrap_or(1),
                    rate_per_s: s.record.rate_limit_per_s,
                });
        let job = Job {
            partition: part,
            offset,
            lane: LaneKey {
                subscription_id: delivery.subscription_id.clone(),
            },
            tenant_id: delivery.tenant_id.clone(),
            retry: self.inputs[usize::from(part.input)].retry,
            bytes: delivery.payload.len(),
        };
        let ready_ms = delivery.due_at.max(delivery.created_at).max(0);
        let ready_since = UNIX_EPOCH + Duration::from_millis(ready_ms.unsigned_abs());
        self.held.insert(
            (part, offset),
            Held {
                delivery,
                ready_since,
            },
        );
        match self.lanes.push_with(job, settings, SystemTime::now()) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Pause) => {
                if self.paused.insert(part) {
                    self.set_paused(part, true);
                }
            }
            Err(error) => {
                // Unreachable: the watermark refused duplicates already.
                tracing::error!(%error, "lanes refused a record");
                self.held.remove(&(part, offset));
            }
        }
    }

    /// Writes a record that is not a `Delivery` to the quarantine topic in a
    /// task; its offset is finished when the write is acknowledged (`complete`).
    /// A partition with too many writes pending is paused until they drain.
    fn quarantine(&mut self, part: Part, msg: &OwnedMessage, unusable: &Unusable) {
        let offset = msg.offset();
        let record = unusable.quarantine(
            &kafka::source_record(msg),
            kafka::quarantined_headers(msg),
            now_ms(),
        );
        tracing::warn!(
            topic = msg.topic(),
            partition = part.partition,
            offset,
            reason = %unusable.reason,
            detail = %record.detail,
            "quarantining a record that is not a Delivery"
        );
        let key = (part, offset);
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let ctx = Arc::clone(&self.ctx);
        let reason = unusable.reason;
        let abort = self.tasks.spawn(async move {
            let finished = quarantine::run(ctx, record, reason, token).await;
            (key, finished)
        });
        self.task_keys.insert(abort.id(), key);
        self.running.insert(
            key,
            Running {
                started: None,
                abort,
                cancel,
            },
        );
        let pending = self.quarantining.entry(part).or_default();
        *pending += 1;
        if *pending >= quarantine::PARTITION_PENDING_CAP && self.paused.insert(part) {
            self.set_paused(part, true);
        }
    }

    /// One quarantine write of `part` ended (acknowledged or abandoned).
    fn quarantine_ended(&mut self, part: Part) {
        if let Some(pending) = self.quarantining.get_mut(&part) {
            *pending = pending.saturating_sub(1);
            if *pending == 0 {
                self.quarantining.remove(&part);
            }
        }
        if self.paused.contains(&part) && self.may_unpause(part) {
            self.paused.remove(&part);
            self.maybe_resume(part);
        }
    }

    /// Whether neither the lanes' buffer nor pending quarantine writes hold `part`.
    fn may_unpause(&self, part: Part) -> bool {
        !self.lanes.is_paused(&part)
            && self.quarantining.get(&part).copied().unwrap_or(0)
                <= quarantine::PARTITION_PENDING_CAP / 2
    }

    /// The head of tier partition `part` at `offset` is due at `until`: forget it
    /// and what follows, have the poller pause and seek back, resume at `until`.
    fn wait_until_due(&mut self, part: Part, offset: i64, until: SystemTime) {
        self.offsets.reset_to(part, offset);
        self.generation += 1;
        self.rewinding.insert(
            part,
            Rewind {
                generation: self.generation,
                offset,
            },
        );
        self.timers.pause(part, until);
        tracing::debug!(
            ?part,
            offset,
            "head not due; pausing the partition until it is"
        );
        self.ask_rewind(part);
    }

    fn ask_rewind(&mut self, part: Part) {
        let Some(rewind) = self.rewinding.get(&part).copied() else {
            return;
        };
        let input = usize::from(part.input);
        let command = Command::Rewind {
            partition: (self.topic_of(part), part.partition),
            offset: rewind.offset,
            generation: rewind.generation,
            epoch: self.epochs[input],
        };
        if self.commands[input].send(command).is_err() {
            tracing::debug!(?part, "poller gone; not rewinding");
        }
    }

    fn on_rewound(&mut self, topic: &str, partition: i32, generation: u64, done: bool) {
        let Some(part) = self.part(topic, partition) else {
            return;
        };
        if self.rewinding.get(&part).map(|r| r.generation) != Some(generation) {
            return; // superseded by a rebalance
        }
        if done {
            self.rewinding.remove(&part);
            self.maybe_resume(part);
        } else if self.offsets.is_assigned(part) {
            self.rewind_again.push(part);
        } else {
            self.rewinding.remove(&part);
            self.timers.cancel(&part);
        }
    }

    /// Resumes the tier partitions whose head is due now.
    fn on_due(&mut self) {
        for part in self.timers.due(SystemTime::now()) {
            self.maybe_resume(part);
        }
    }

    /// Resumes `part` unless backpressure, a rewind or a due timer still holds it.
    fn maybe_resume(&mut self, part: Part) {
        if self.paused.contains(&part)
            || self.rewinding.contains_key(&part)
            || self.timers.is_paused(&part)
            || !self.offsets.is_assigned(part)
        {
            return;
        }
        self.set_paused(part, false);
    }

    fn set_paused(&self, part: Part, pause: bool) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic_of(part), part.partition);
        let consumer = &self.consumers[usize::from(part.input)];
        let result = if pause {
            metrics::paused();
            tracing::debug!(?part, "buffer full; pausing the partition");
            consumer.pause(&tpl)
        } else {
            consumer.resume(&tpl)
        };
        if let Err(error) = result {
            tracing::warn!(?part, pause, %error, "cannot pause/resume a partition");
        }
    }

    /// Starts every record the lanes allow.
    fn start_ready(&mut self) {
        let now = SystemTime::now();
        while let Some(started) = self.lanes.pop_ready_at(now) {
            let key = (started.job.partition, started.job.offset);
            let Some(held) = self.held.remove(&key) else {
                tracing::error!(?key, "started a record that is not held");
                let _ = self.lanes.complete(&started);
                continue;
            };
            let d = held.delivery;
            let input = &self.inputs[usize::from(key.0.input)];
            if input.retry {
                let late = SystemTime::now()
                    .duration_since(held.ready_since)
                    .unwrap_or_default();
                metrics::retry_lateness(input.label, late);
            }
            // The subscription as it is now: deleted or disabled means cancelled.
            let target = self.subs.get(&d.subscription_id).and_then(|s| {
                (s.record.enabled && s.record.tenant_id == d.tenant_id).then(|| Target {
                    url: s.record.url.clone(),
                    secret_ref: s.record.secret_ref.clone(),
                })
            });
            let Some(target) = target else {
                metrics::cancelled();
                tracing::info!(delivery_id = %d.delivery_id, subscription_id = %d.subscription_id, "subscription disabled or deleted; delivery cancelled");
                let _ = self.lanes.complete(&started);
                self.offsets.finish(key.0, key.1);
                continue;
            };
            let cancel = CancellationToken::new();
            let ctx = Arc::clone(&self.ctx);
            let token = cancel.clone();
            let abort = self.tasks.spawn(async move {
                let finished = attempt::run(ctx, d, target, token).await;
                (key, finished)
            });
            self.task_keys.insert(abort.id(), key);
            self.running.insert(
                key,
                Running {
                    started: Some(started),
                    abort,
                    cancel,
                },
            );
        }
    }

    fn on_done(&mut self, done: Result<(Id, (Key, Finished)), JoinError>) {
        match done {
            Ok((id, (key, finished))) => {
                self.task_keys.remove(&id);
                self.complete(key, finished);
            }
            Err(e) => {
                let Some(key) = self.task_keys.remove(&e.id()) else {
                    return;
                };
                if e.is_panic() {
                    tracing::error!(?key, "attempt task panicked; the record stays unfinished");
                }
                self.complete(key, Finished::Abandoned);
            }
        }
    }

    fn complete(&mut self, key: Key, finished: Finished) {
        let Some(run) = self.running.remove(&key) else {
            return; // abandoned by a revoke or drain already
        };
        match &run.started {
            Some(started) => {
                if let Err(error) = self.lanes.complete(started) {
                    tracing::error!(%error, "lanes refused a completion");
                }
            }
            None => self.quarantine_ended(key.0),
        }
        if finished == Finished::Durable {
            self.offsets.finish(key.0, key.1);
        }
    }

    fn on_tick(&mut self) {
        self.health.beat(LOOP);
        let inputs = self.inputs.clone();
        self.offsets.store(
            &self.consumers,
            |p| inputs[usize::from(p.input)].topic.clone(),
            None,
        );
        for part in self.lanes.take_resumable() {
            if self.may_unpause(part) && self.paused.remove(&part) {
                self.maybe_resume(part);
            }
        }
        for part in std::mem::take(&mut self.rewind_again) {
            self.ask_rewind(part);
        }
        self.ticks += 1;
        if self.ticks % GAUGE_TICKS == 0 {
            self.gauges();
            self.publish_held();
        }
    }

    /// Tells each consumer's watch which of its partitions are paused on
    /// purpose (backpressure, a head not yet due, a rewind): their lag is
    /// expected, not a stall.
    fn publish_held(&self) {
        let mut paused: Vec<Vec<(String, i32)>> = vec![Vec::new(); self.inputs.len()];
        let parts = self
            .paused
            .iter()
            .chain(self.timers.iter().map(|(p, _)| p))
            .chain(self.rewinding.keys());
        for part in parts {
            paused[usize::from(part.input)].push((self.topic_of(*part), part.partition));
        }
        for (handle, parts) in self.on_purpose.iter().zip(paused) {
            handle.set(parts);
        }
    }

    fn gauges(&self) {
        let now = SystemTime::now();
        let n = self.inputs.len();
        let mut oldest: Vec<Option<SystemTime>> = vec![None; n];
        let mut waiting = vec![0usize; n];
        let mut paused = vec![0usize; n];
        let earlier = |slot: &mut Option<SystemTime>, t: SystemTime| {
            if slot.is_none_or(|o| t < o) {
                *slot = Some(t);
            }
        };
        for ((part, _), held) in &self.held {
            let i = usize::from(part.input);
            earlier(&mut oldest[i], held.ready_since);
            waiting[i] += 1;
        }
        for (part, _) in self.running.keys() {
            waiting[usize::from(part.input)] += 1;
        }
        // A paused head past its due time is ready but unattempted too: this is
        // where a stalled scheduler shows.
        for (part, until) in self.timers.iter() {
            let i = usize::from(part.input);
            paused[i] += 1;
            waiting[i] += 1;
            if until <= now {
                earlier(&mut oldest[i], until);
            }
        }
        let age = |t: Option<SystemTime>| {
            t.map_or(Duration::ZERO, |t| {
                now.duration_since(t).unwrap_or_default()
            })
        };
        let oldest_ready = self
            .inputs
            .iter()
            .zip(&oldest)
            .map(|(input, t)| (input.label, age(*t)))
            .collect();
        let tiers = self
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, input)| input.retry)
            .map(|(i, input)| metrics::TierGauges {
                tier: input.label,
                oldest_due_age: age(oldest[i]),
                waiting: waiting[i],
                paused: paused[i],
            })
            .collect();
        metrics::gauges(&metrics::Gauges {
            in_flight: self
                .running
                .values()
                .filter(|r| r.started.is_some())
                .count(),
            lanes: self.lanes.lane_count(),
            rate_limited: self.lanes.rate_limited_subscriptions(),
            buffered: self.lanes.buffered_records(),
            oldest_ready,
            tiers,
        });
    }

    /// Hands partitions of `input`'s consumer over: drop their queued records,
    /// give their in-flight attempts the request timeout, store and commit,
    /// forget them.
    async fn revoke(&mut self, input: u16, revoked: &[TopicPartition]) {
        let parts: Vec<Part> = revoked
            .iter()
            .filter_map(|(t, p)| self.part(t, *p))
            .collect();
        let mut dropped = 0;
        for part in &parts {
            for offset in self.lanes.drop_partition(part) {
                self.held.remove(&(*part, offset));
                dropped += 1;
            }
            self.paused.remove(part);
            self.timers.cancel(part);
            self.rewinding.remove(part);
        }
        let deadline = tokio::time::Instant::now() + self.request_timeout + DRAIN_SLACK;
        let in_flight = self.wait_for(|k| parts.contains(&k.0), deadline).await;
        let abandoned = self.abandon(|k| parts.contains(&k.0));
        let inputs = self.inputs.clone();
        self.offsets.store(
            &self.consumers,
            |p| inputs[usize::from(p.input)].topic.clone(),
            Some(&parts),
        );
        offsets::commit_now(&self.consumers[usize::from(input)..=usize::from(input)]).await;
        self.offsets.forget(&parts);
        tracing::info!(
            partitions = parts.len(),
            dropped,
            finished_in_flight = in_flight,
            abandoned,
            "revoked partitions handed over"
        );
    }

    /// Processes completions until no running attempt matches `which` or the
    /// deadline; returns how many matching attempts completed.
    async fn wait_for(
        &mut self,
        which: impl Fn(&Key) -> bool,
        deadline: tokio::time::Instant,
    ) -> usize {
        let mut completed = 0;
        while self.running.keys().any(&which) {
            tokio::select! {
                Some(done) = self.tasks.join_next_with_id() => {
                    let key = match &done {
                        Ok((_, (key, _))) => Some(*key),
                        Err(e) => self.task_keys.get(&e.id()).copied(),
                    };
                    if key.is_some_and(|k| which(&k)) {
                        completed += 1;
                    }
                    self.on_done(done);
                }
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        completed
    }

    /// Cancels and aborts matching attempts; their offsets stay unfinished.
    fn abandon(&mut self, which: impl Fn(&Key) -> bool) -> usize {
        let keys: Vec<Key> = self.running.keys().copied().filter(|k| which(k)).collect();
        for key in &keys {
            if let Some(run) = self.running.remove(key) {
                run.cancel.cancel();
                run.abort.abort();
                self.task_keys.remove(&run.abort.id());
                match &run.started {
                    Some(started) => {
                        let _ = self.lanes.complete(started);
                    }
                    None => self.quarantine_ended(key.0),
                }
            }
        }
        keys.len()
    }

    /// Shutdown: stop taking work, let in-flight attempts finish within the
    /// request timeout (and the shutdown grace), store and commit.
    async fn drain(mut self) {
        let parts: Vec<Part> = self.lanes_partitions();
        for part in &parts {
            for offset in self.lanes.drop_partition(part) {
                self.held.remove(&(*part, offset));
            }
        }
        self.held.clear();
        let budget = (self.request_timeout + DRAIN_SLACK).min(self.shutdown_grace);
        let in_flight = self.running.len();
        tracing::info!(in_flight, ?budget, "draining");
        let deadline = tokio::time::Instant::now() + budget;
        self.wait_for(|_| true, deadline).await;
        let abandoned = self.abandon(|_| true);
        let inputs = self.inputs.clone();
        self.offsets.store(
            &self.consumers,
            |p| inputs[usize::from(p.input)].topic.clone(),
            None,
        );
        offsets::commit_now(&self.consumers).await;
        self.health.forget(LOOP);
        tracing::info!(abandoned, "drained; offsets committed");
    }

    fn lanes_partitions(&self) -> Vec<Part> {
        let mut parts: Vec<Part> = self.held.keys().map(|(p, _)| *p).collect();
        parts.sort();
        parts.dedup();
        parts
    }
}

async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}
