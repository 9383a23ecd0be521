//! The delivery engine's adapter: it feeds the decision machine (`machine/`)
//! what Kafka and the attempt tasks report, and carries out what it decides —
//! spawning attempts, pausing, resuming and rewinding partitions through their
//! consumer, and committing follow-ups with offsets in transactions.
//!
//! Guarantees (the decisions themselves are the machine's; see there):
//! - at least once to endpoints, exactly once inside Kafka: an offset is
//!   committed only from the watermark (`offsets.rs`), in a transaction with
//!   the follow-ups (retries, dead letters, quarantined records) of the
//!   records below it (`commit.rs`);
//! - one loop: every decision is made on this task, in the order events are
//!   taken from its two inboxes (first attempts first, `inbox.rs`); the
//!   pollers only fetch and carry out rewinds (`consumer.rs`);
//! - revoke and shutdown: queued records are dropped (not attempted), in-flight
//!   attempts get the request timeout to finish, then what is pending is
//!   committed; whatever did not finish stays unfinished and is re-attempted
//!   (`rebalance.rs`);
//! - a due head or a rate-limited lane is woken by one timer arm in the loop,
//!   not a task per partition; the pollers keep polling meanwhile, so the group
//!   session stays alive.

mod commit;
#[cfg(test)]
mod commit_tests;
mod gauges;
pub(crate) mod inbox;
mod lanes;
mod peek;
mod rebalance;
mod wake;

use std::{collections::HashMap, sync::Arc, time::Duration, time::SystemTime};

use hookline_core::{BreakerSettings, LaneLimits, LaneSettings, OverflowSettings, Signal};
use hookline_dispatch_core::{directory, disable::Disabling};
use hookline_envelope::{Delivery, Unusable};
use hookline_runtime::{
    group_watch::HeldPartitions,
    health::Health,
    kafka::{self, txn::Transactor},
    subscriptions::{DisabledReason, Subscriptions},
};
use rdkafka::{
    consumer::Consumer,
    message::{Message, OwnedMessage},
    TopicPartitionList,
};
use tokio::task::{AbortHandle, Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

pub(crate) use crate::part::Input;
use crate::{
    attempt::{self, AttemptContext, Ended, Finished, Target},
    config::CommitSettings,
    consumer::{Command, Consumers, FromKafka},
    events,
    handoff::Handoff,
    machine::{Action, Directory, GateAction, Intake, Machine, Note},
    metrics,
    part::{Key, NoTarget, Part},
    shared_breakers::SharedBreakers,
    DispatcherError,
};

const LOOP: &str = "dispatcher";
const TICK: Duration = Duration::from_millis(200);
/// Events handled in one pass of the loop when they are already waiting
/// ([`Engine::on_waiting_events`]).
const EVENT_BATCH: usize = 256;
/// Gauges are refreshed every this many ticks.
const GAUGE_TICKS: u32 = 5;
/// Added to a due time before sleeping on it, so the wall clock has surely passed
/// it when the refetched head is checked (the sleep runs on the monotonic clock).
const WAKE_SLACK: Duration = Duration::from_millis(2);

/// The subscription table, as the machine asks it, with the disables this
/// replica has written and the table does not show yet; the rules are
/// `hookline_dispatch_core::directory`'s.
struct Subs<'a>(&'a Subscriptions, &'a Disabling);

impl Directory for Subs<'_> {
    fn settings(&self, subscription_id: &str) -> LaneSettings {
        let live = self.0.get(subscription_id);
        directory::lane_settings(live.as_deref().map(|l| &l.record))
    }

    fn target(&self, d: &Delivery) -> Result<Target, NoTarget> {
        let live = self.0.get(&d.subscription_id);
        directory::target(live.as_deref().map(|l| &l.record), d, self.1)
    }
}

/// A task in flight, by record.
#[derive(Debug)]
struct Task {
    abort: AbortHandle,
}

pub(crate) struct Engine {
    machine: Machine,
    /// One consumer per input, indexed like the inputs.
    consumers: Consumers,
    /// The inputs' topics, indexed like the inputs.
    topics: Vec<String>,
    events: inbox::Inbox,
    subs: Subscriptions,
    disabling: Disabling,
    ctx: Arc<AttemptContext>,
    health: Health,
    request_timeout: Duration,
    shutdown_grace: Duration,
    tasks: JoinSet<(Key, Ended)>,
    task_keys: HashMap<Id, Key>,
    running: HashMap<Key, Task>,
    /// Per input: its consumer's rebalance epoch as last reported.
    epochs: Vec<u64>,
    /// Per input: its poller's command channel.
    commands: Vec<std::sync::mpsc::Sender<Command>>,
    /// Per input: the partitions paused on purpose, for its consumer's watch.
    on_purpose: Vec<HeldPartitions>,
    commits: commit::Commits,
    ticks: u32,
    /// Overflow lanes in use, and the `deliveries` input they follow.
    lane_count: usize,
    lane_source: Option<u16>,
    /// The unfetched heads of held partitions, for the gauges (`gauges.rs`).
    backlog: crate::backlog::Backlog,
    peeker: peek::Peeker,
    /// Wakes librdkafka's fetcher after a resume (`wake.rs`).
    waker: wake::FetchWaker,
    /// The last refresh waited for the peeker's answer to set the gauges.
    gauges_deferred: bool,
    /// The group consumers (inputs) that have not had an assignment yet.
    unjoined: std::collections::BTreeSet<u16>,
    /// The breakers other replicas (or earlier runs) wrote, to adopt.
    breakers: SharedBreakers,
    /// This replica's transactional id: the writer of its breaker records.
    replica: String,
}

pub(crate) use peek::Peeker;

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("inputs", &self.machine.inputs())
            .field("in_flight", &self.running.len())
            .finish_non_exhaustive()
    }
}

/// What [`Engine::new`] needs besides the limits.
pub(crate) struct Parts {
    pub inputs: Vec<Input>,
    pub consumers: Consumers,
    pub events: inbox::Inbox,
    pub subs: Subscriptions,
    pub ctx: Arc<AttemptContext>,
    pub health: Health,
    pub request_timeout: Duration,
    pub shutdown_grace: Duration,
    /// Larger payloads are refused (dead-lettered) without being sent.
    pub max_payload_bytes: usize,
    pub breaker: BreakerSettings,
    pub overflow: OverflowSettings,
    pub commands: Vec<std::sync::mpsc::Sender<Command>>,
    pub on_purpose: Vec<HeldPartitions>,
    pub transactor: Transactor,
    pub commits: CommitSettings,
    pub peeker: Peeker,
    /// Caught up already: what it holds is adopted before the first fetch.
    pub breakers: SharedBreakers,
}

impl Engine {
    pub(crate) fn new(p: Parts, limits: LaneLimits) -> Result<Self, DispatcherError> {
        let machine = Machine::new(
            p.inputs,
            limits,
            p.max_payload_bytes,
            p.ctx.retry_policy.ladder().clone(),
            (p.breaker, p.overflow),
        )?;
        let lane_source = machine.overflow().source();
        let lane_count = machine.inputs().iter().filter(|i| i.lane.is_some()).count();
        let topics: Vec<String> = machine.inputs().iter().map(|i| i.topic.clone()).collect();
        let waker = wake::FetchWaker::spawn(&p.consumers, topics.clone())?;
        // A lane's consumer is assigned by hand, never by the group.
        let unjoined = (0..)
            .zip(machine.inputs())
            .filter(|(_, i)| i.lane.is_none())
            .map(|(n, _)| n)
            .collect();
        let replica = p.commits.transactional_id.clone();
        let mut engine = Self {
            epochs: vec![0; machine.inputs().len()],
            topics,
            waker,
            machine,
            lane_count,
            lane_source,
            consumers: p.consumers,
            events: p.events,
            subs: p.subs,
            disabling: Disabling::default(),
            ctx: p.ctx,
            health: p.health,
            request_timeout: p.request_timeout,
            shutdown_grace: p.shutdown_grace,
            tasks: JoinSet::new(),
            task_keys: HashMap::new(),
            running: HashMap::new(),
            commands: p.commands,
            on_purpose: p.on_purpose,
            commits: commit::Commits::new(p.transactor, &p.commits),
            ticks: 0,
            backlog: crate::backlog::Backlog::default(),
            peeker: p.peeker,
            gauges_deferred: false,
            unjoined,
            breakers: p.breakers,
            replica,
        };
        engine.adopt_breakers();
        engine.report_joining();
        Ok(engine)
    }

    /// Notes that `input`'s consumer has had an assignment (empty or not):
    /// the replica is ready only once every group consumer has
    /// ([`kafka::GROUP_MEMBERSHIP`]).
    fn joined(&mut self, input: u16) {
        if self.unjoined.remove(&input) {
            self.report_joining();
        }
    }

    fn report_joining(&self) {
        let waiting: Vec<&str> = self
            .unjoined
            .iter()
            .map(|&n| self.machine.inputs()[usize::from(n)].label)
            .collect();
        self.health
            .set_ready(kafka::GROUP_MEMBERSHIP, kafka::joining(&waiting));
    }

    /// Runs until `shutdown`, then drains. Fails only when the transactional
    /// producer is lost for good (nothing more could be committed).
    pub(crate) async fn run(mut self, shutdown: CancellationToken) -> Result<(), DispatcherError> {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.maybe_commit(false);
            if self.commits.lost() {
                break;
            }
            self.machine
                .start_ready(SystemTime::now(), &Subs(&self.subs, &self.disabling));
            self.act();
            // A due partition to resume or a rate-limited lane allowed to start.
            let wakeup = self.machine.next_wakeup().map(|at| {
                let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
                tokio::time::Instant::now() + wait + WAKE_SLACK
            });
            let commit_wakeup = self.commits.wakeup();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                done = self.commits.done(), if self.commits.in_flight() => self.on_committed(done),
                _ = sleep_until_some(wakeup), if wakeup.is_some() => self.machine.on_due(SystemTime::now()),
                Some(done) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => self.on_done(done),
                event = self.events.recv() => match event {
                    Some(event) => {
                        self.on_event(event).await;
                        self.on_waiting_events().await;
                    }
                    None => break,
                },
                _ = sleep_until_some(commit_wakeup), if commit_wakeup.is_some() => {}
                _ = tick.tick() => self.on_tick(),
            }
            self.act();
        }
        let lost = self.commits.lost();
        self.drain().await;
        if lost {
            return Err(DispatcherError::Kafka {
                context: "committing: the transactional producer could not be re-created",
                source: rdkafka::error::KafkaError::Canceled,
            });
        }
        Ok(())
    }

    /// The events already waiting behind the one just handled, up to
    /// [`EVENT_BATCH`] in all, without going round the loop for each: under
    /// load the loop's own work (commit check, starting what is ready, the
    /// next wake-up, arming the `select!`) is paid per batch, not per record.
    /// Nothing waits for it: an idle channel ends the batch at once.
    async fn on_waiting_events(&mut self) {
        for _ in 1..EVENT_BATCH {
            let Some(event) = self.events.try_recv() else {
                return;
            };
            self.on_event(event).await;
        }
    }

    async fn on_event(&mut self, event: FromKafka) {
        match event {
            FromKafka::Message(msg) => self.on_message(&msg),
            FromKafka::Assigned {
                input,
                parts,
                epoch,
            } => {
                self.epochs[usize::from(input)] = epoch;
                let parts: Vec<Part> = parts
                    .iter()
                    .filter_map(|(t, p)| self.machine.part(t, *p))
                    .collect();
                self.machine.assign(&parts);
                self.assign_lanes(&parts).await;
                self.joined(input);
            }
            FromKafka::Revoked {
                input,
                parts,
                confirm,
                epoch,
                lost,
            } => {
                self.epochs[usize::from(input)] = epoch;
                if lost {
                    self.drop_lost(&parts);
                } else {
                    self.revoke(input, &parts).await;
                }
                let _ = confirm.send(());
            }
            FromKafka::Rewound {
                partition: (topic, partition),
                generation,
                done,
            } => {
                if let Some(part) = self.machine.part(&topic, partition) {
                    self.machine.rewound(part, generation, done);
                }
            }
            FromKafka::Eof { input, partition } => {
                self.machine.lane_eof(Part { input, partition });
            }
            FromKafka::Error(error) => events::ConsumerError { error: &error }.emit(),
            FromKafka::Peeked(answers) => self.on_peeked(answers),
        }
    }

    fn on_message(&mut self, msg: &OwnedMessage) {
        let Some(part) = self.machine.part(msg.topic(), msg.partition()) else {
            events::UnexpectedTopic { topic: msg.topic() }.emit();
            return;
        };
        let written_at = msg
            .timestamp()
            .to_millis()
            .filter(|ms| *ms >= 0)
            .map(hookline_core::epoch::from_millis);
        self.note_lane_record(part, msg);
        let intake = self.machine.on_record(
            part,
            msg.offset(),
            (msg.payload(), written_at),
            SystemTime::now(),
            &Subs(&self.subs, &self.disabling),
        );
        match intake {
            Intake::Quarantine(unusable) => self.quarantine(part, msg, &unusable),
            Intake::Repark { tier } => self.repark(part, msg, tier),
            Intake::Move { lane } => self.move_to_lane(
                (part, msg.offset()),
                lane,
                (
                    msg.key().map(<[u8]>::to_vec),
                    msg.payload().unwrap_or_default().to_vec(),
                ),
            ),
            Intake::Queued | Intake::Dropped | Intake::NotDue => {}
        }
    }

    /// Hands a tier head its tier released before it was due to the next
    /// transaction, as it is (no attempt), for the tier that fits what is left;
    /// the machine finishes its offset in that transaction.
    fn repark(&mut self, part: Part, msg: &OwnedMessage, tier: usize) {
        let key = (part, msg.offset());
        let read = (
            msg.key().map(<[u8]>::to_vec),
            msg.payload().unwrap_or_default().to_vec(),
        );
        let now_ms = hookline_core::epoch::millis(SystemTime::now());
        match self.ctx.handoffs.repark(key, read, tier, now_ms) {
            Ok(handoff) => self.commits.defer(handoff),
            Err(missing) => {
                events::missing_topic(missing);
                self.machine.complete(key, Finished::Abandoned);
            }
        }
    }

    /// Hands a record that is not a `Delivery` to the next transaction, for the
    /// quarantine topic; the machine finishes its offset in that transaction.
    fn quarantine(&mut self, part: Part, msg: &OwnedMessage, unusable: &Unusable) {
        let offset = msg.offset();
        let record = unusable.quarantine(
            &kafka::source_record(msg),
            kafka::quarantined_headers(msg),
            hookline_core::epoch::millis(SystemTime::now()),
        );
        tracing::warn!(
            topic = msg.topic(),
            partition = part.partition,
            offset,
            reason = %unusable.reason,
            detail = %record.detail,
            "quarantining a record that is not a Delivery"
        );
        let handoff = self
            .ctx
            .handoffs
            .quarantined((part, offset), record, unusable.reason);
        self.commits.defer(handoff);
    }

    fn spawn(&mut self, key: Key, work: impl std::future::Future<Output = Ended> + Send + 'static) {
        let abort = self.tasks.spawn(async move { (key, work.await) });
        self.task_keys.insert(abort.id(), key);
        self.running.insert(key, Task { abort });
    }

    /// Carries out what the machine decided, and counts and logs its notes.
    fn act(&mut self) {
        for action in self.machine.take_actions() {
            match action {
                Action::Gate(GateAction::Pause { part, reason }) => {
                    let consumer = self.machine.inputs()[usize::from(part.input)].label;
                    metrics::paused(reason.as_str(), consumer);
                    tracing::debug!(?part, ?reason, "pausing the partition");
                    self.set_paused(part, true);
                }
                Action::Gate(GateAction::Resume(part)) => self.set_paused(part, false),
                Action::Gate(GateAction::Rewind {
                    part,
                    offset,
                    generation,
                }) => self.ask_rewind(part, offset, generation),
                Action::Attempt {
                    key,
                    delivery,
                    target,
                    refusal,
                    strict,
                } => {
                    let ctx = Arc::clone(&self.ctx);
                    self.spawn(
                        key,
                        attempt::run(ctx, key, *delivery, target, (refusal, strict)),
                    );
                }
                // Finished when it goes into a transaction (`commit.rs`).
                Action::Park {
                    key,
                    delivery,
                    tier,
                    until,
                    disable,
                } => self.park(key, *delivery, tier, until, disable),
                // Finished when it goes into a transaction (`commit.rs`).
                Action::Move {
                    key,
                    delivery,
                    lane,
                } => self.move_queued(key, &delivery, lane),
                // Finished when it goes into a transaction (`commit.rs`).
                Action::Unattempted {
                    key,
                    delivery,
                    why,
                    disable,
                } => {
                    let now = SystemTime::now();
                    let mut handoff = attempt::unattempted(&self.ctx, key, *delivery, &why, now);
                    if disable {
                        let live = Disabling::dead_letter_subscription(&handoff)
                            .and_then(|id| self.subs.get(id));
                        self.disabling.disable_with(
                            &mut handoff,
                            live.as_deref().map(|l| &l.record),
                            DisabledReason::BreakerOpen,
                            (
                                self.ctx.handoffs.topics().subscriptions(),
                                hookline_core::epoch::millis(now),
                            ),
                        );
                    }
                    self.commits.defer(handoff);
                }
            }
        }
        for note in self.machine.take_notes() {
            if let Note::Share {
                subscription_id,
                shared,
                head,
            } = &note
            {
                self.share(subscription_id, shared, head.as_ref());
                continue;
            }
            emit(note, &self.topics);
        }
    }

    /// Takes what other replicas (or this one before a restart) shared, read
    /// since the last call.
    fn adopt_breakers(&mut self) {
        for (subscription_id, shared, head) in self.breakers.take() {
            self.machine.adopt(&subscription_id, shared, head);
        }
    }

    /// A breaker or a strict head of this replica changed: the others learn it
    /// from the next transaction (it rides with the attempt log's queue, so a
    /// failed transaction carries it into the next).
    fn share(
        &mut self,
        subscription_id: &str,
        shared: &hookline_core::Shared,
        head: Option<&hookline_dispatch_core::health::HeldHead>,
    ) {
        let record =
            hookline_dispatch_core::health::record(subscription_id, shared, head, &self.replica);
        self.commits.log(vec![crate::attempt_log::Logged {
            topic: self.ctx.handoffs.topics().health().to_owned(),
            key: subscription_id.as_bytes().to_vec(),
            value: hookline_envelope::encode(&record),
        }]);
    }

    fn ask_rewind(&self, part: Part, offset: i64, generation: u64) {
        let input = usize::from(part.input);
        tracing::debug!(
            ?part,
            offset,
            "head not due; pausing the partition until it is"
        );
        let command = Command::Rewind {
            partition: (self.topics[input].clone(), part.partition),
            offset,
            generation,
            epoch: self.epochs[input],
        };
        if self.commands[input].send(command).is_err() {
            events::PollerGone {
                part: &part,
                skipped: "rewinding",
            }
            .emit();
        }
    }

    fn set_paused(&self, part: Part, pause: bool) {
        let input = usize::from(part.input);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topics[input], part.partition);
        let consumer = &self.consumers[input];
        let result = if pause {
            consumer.pause(&tpl)
        } else {
            consumer
                .resume(&tpl)
                .map(|()| self.waker.wake(input, part.partition))
        };
        if let Err(error) = result {
            events::PauseFailed {
                part: &part,
                pause,
                error: &error,
            }
            .emit();
        }
    }

    fn on_done(&mut self, done: Result<(Id, (Key, Ended)), JoinError>) {
        match done {
            Ok((id, (key, ended))) => {
                self.task_keys.remove(&id);
                self.running.remove(&key);
                match ended {
                    Ended::Done(log) => {
                        self.machine
                            .attempted(key, SystemTime::now(), Signal::Success);
                        // Queued before the record is finished: the transaction
                        // whose offsets pass it carries its record (`commit.rs`).
                        self.commits.log(log);
                        self.machine.complete(key, Finished::Durable);
                    }
                    Ended::Abandoned => self.machine.complete(key, Finished::Abandoned),
                    Ended::Hold(record, signal, log) => {
                        self.machine.attempted(key, SystemTime::now(), signal);
                        self.commits.log(log);
                        self.machine.hold(key, *record);
                    }
                    // Finished when it goes into a transaction (`commit.rs`).
                    Ended::Handoff(mut handoff, signal) => {
                        self.machine.attempted(key, SystemTime::now(), signal);
                        self.machine.attempt_ended(key);
                        self.disable_if_gone(&mut handoff);
                        self.commits.defer(*handoff);
                    }
                }
            }
            Err(e) => {
                let Some(key) = self.task_keys.remove(&e.id()) else {
                    return;
                };
                self.running.remove(&key);
                if e.is_panic() {
                    self.machine.panicked(
                        key,
                        SystemTime::now(),
                        &Subs(&self.subs, &self.disabling),
                    );
                } else {
                    self.machine.complete(key, Finished::Abandoned);
                }
            }
        }
    }

    /// Hands a delivery its breaker holds back to the next transaction: on tier
    /// `tier`, due at `until`, its attempts unspent; with the subscription written
    /// back disabled when its breaker has been open too long.
    fn park(
        &mut self,
        key: Key,
        delivery: Delivery,
        tier: usize,
        until: SystemTime,
        disable: bool,
    ) {
        let now_ms = hookline_core::epoch::millis(SystemTime::now());
        let disable = if disable {
            let live = self.subs.get(&delivery.subscription_id);
            self.disabling.on_disable(
                live.as_deref().map(|l| &l.record),
                (&delivery.subscription_id, &delivery.tenant_id),
                DisabledReason::BreakerOpen,
                self.ctx.handoffs.topics().subscriptions(),
                now_ms,
            )
        } else {
            None
        };
        let until_ms = hookline_core::epoch::millis(until);
        match self
            .ctx
            .handoffs
            .park(key, delivery, (tier, until_ms), disable, now_ms)
        {
            Ok(handoff) => self.commits.defer(handoff),
            Err(missing) => {
                events::missing_topic(missing);
                self.machine.complete(key, Finished::Abandoned);
            }
        }
    }

    /// A 410's dead letter takes the disabled subscription with it.
    fn disable_if_gone(&mut self, handoff: &mut Handoff) {
        let live = Disabling::dead_letter_subscription(handoff).and_then(|id| self.subs.get(id));
        self.disabling.disable_if_gone(
            handoff,
            live.as_deref().map(|l| &l.record),
            (
                self.ctx.handoffs.topics().subscriptions(),
                hookline_core::epoch::millis(SystemTime::now()),
            ),
        );
    }

    fn on_tick(&mut self) {
        self.health.beat(LOOP);
        self.adopt_breakers();
        let subs = &self.subs;
        self.disabling
            .prune(|id| subs.get(id).map(|live| live.record.version));
        self.machine.on_tick();
        self.machine.observe_backlog(SystemTime::now());
        self.ticks += 1;
        if self.ticks % GAUGE_TICKS == 0 {
            self.refresh_gauges();
            self.overflow_gauges();
            self.publish_capacity();
            self.publish_held();
        }
    }
}

/// Counts and logs one note of the machine.
fn emit(note: Note, topics: &[String]) {
    match note {
        Note::NotAssigned(part, offset) => events::NotAssigned {
            part: &part,
            offset,
        }
        .emit(),
        Note::AlreadyTracked(part, offset) => events::AlreadyTracked {
            topic: &topics[usize::from(part.input)],
            partition: part.partition,
            offset,
            error: &"the watermark tracks this offset already",
        }
        .emit(),
        Note::LanesRefusedRecord(error) => events::LanesRefusedRecord { error: &error }.emit(),
        Note::LanesRefusedCompletion(error) => {
            events::LanesRefusedCompletion { error: &error }.emit()
        }
        Note::StartedNotQueued(key) => events::StartedNotHeld { key: &key }.emit(),
        Note::WatermarkRefused(part, offset, error) => events::WatermarkRefused {
            part: &part,
            offset,
            error: &error,
        }
        .emit(),
        Note::Panicked(key) => events::AttemptPanicked { key: &key }.emit(),
        Note::RetryLate { label, late } => metrics::retry_lateness(label, late),
        Note::Promoted { label } => metrics::promoted(label),
        Note::Breaker {
            subscription_id,
            transition,
        } => events::BreakerChanged {
            subscription_id: &subscription_id,
            transition,
        }
        .emit(),
        Note::Overflow {
            partition,
            tenant_id,
            lane,
            promoted,
        } => events::OverflowChanged {
            partition,
            tenant_id: &tenant_id,
            lane,
            promoted,
        }
        .emit(),
        // Written by the engine (`share`), never emitted.
        Note::Share { .. } => {}
        Note::HeadRestored {
            subscription_id,
            attempt,
        } => tracing::info!(
            subscription_id = %subscription_id,
            attempt,
            "a strict head read again goes on with its attempts and due time"
        ),
        Note::Held {
            subscription_id,
            attempt,
            until,
            breaker,
        } => events::StrictHeld {
            subscription_id: &subscription_id,
            attempt,
            until,
            breaker,
        }
        .emit(),
    }
}

async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
