//! The fan-out loop: consume-transform-produce in Kafka transactions. A batch
//! of events, the deliveries and quarantined records they produce, and the
//! consumer offsets after them commit atomically, so a crash or a rebalance
//! never duplicates or loses a fan-out for a `read_committed` reader.
//!
//! A transaction that fails is aborted (or its producer re-created) and the
//! same batch, still in memory, goes into the next one: the consumer is never
//! sought back, because a seek can fail while the broker is away and a
//! skipped event would then be committed past. Timeouts of the commit and of
//! the offsets call (a broker restarting) are retried as librdkafka asks,
//! rather than aborted mid-commit. A revoked partition's events leave the
//! batch; its new owner reads them again from the committed offset.
//!
//! Reading past a bursting tenant (`read_past`, docs/design.md#fanout): the
//! group consumer is the front reader; a tenant the burst router routes is
//! read past on its partition from then on, and a back reader fans its
//! records out at a share of each transaction (at least a quarter of
//! `--txn-max-events`), so the tenants behind it wait only for the front to
//! read past the burst. A batch is the front's records (fanned out first)
//! then the back's; each partition commits its watermark, the lowest record
//! not yet fanned out, with the checkpoint of what above it is done.
//!
//! The duplicate-admission window (`dedup`) of a partition is rebuilt before
//! its first record is processed; every record is judged once, by the front
//! when it reads it, in offset order, whoever fans it out, and a retried
//! batch reuses the verdicts, so the window observes every record exactly
//! once. Its stream time is committed in the offset's metadata, with the
//! checkpoint, in the same transaction.

use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use futures::FutureExt;
use hookline_core::{
    admission::{Admission, PayloadMatch},
    epoch,
    read_past::{BackVerdict, Checkpoint, FrontVerdict, ReadPast},
    Backoff, BurstRouter, Change, Route,
};
use hookline_envelope::{encode, Topics};
use hookline_runtime::{
    group_watch,
    health::Health,
    kafka::{
        self,
        access::{self, Access, Denial, Denied},
        txn::{Transactor, TxnError, TxnSpec},
        RevokeRecorder,
    },
    retry,
    subscriptions::Subscriptions,
};
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    error::KafkaError,
    message::{Message, OwnedMessage},
    Offset, TopicPartitionList,
};
use tokio_util::sync::CancellationToken;

use crate::{
    capacity,
    config::Config,
    dedup::{self, RebuildSpec, Windows},
    events, metrics as fm,
    read_past::{self, BackReader},
    transform::{fan_out_judged, judge, Duplicate, Judged, Output, Routed},
    FanoutError, STAGE,
};

const LOOP: &str = "fanout";
/// The readiness condition held while a partition's admission window is rebuilt.
const DEDUP_READY: &str = "dedup_window";
const IDLE_POLL: Duration = Duration::from_secs(1);
/// The front's wait for its first record when a back reader has work.
const BACK_POLL: Duration = Duration::from_millis(5);
/// Zero-wait polls that find nothing before a batch is deemed to have all
/// that is ready (see `collect`).
const READY_POLLS: u32 = 2;
/// Pause after a failed transaction before the batch is tried again: 500 ms
/// doubling to 5 s while transactions keep failing (a broker away), each
/// shortened by up to half so replicas do not retry in step.
const TXN_RETRY: Backoff =
    Backoff::new(Duration::from_millis(500), Duration::from_secs(5)).with_jitter(0.5);
/// Pause after a failed rebuild of an admission window: 1 s doubling to 10 s.
const REBUILD_RETRY: Backoff =
    Backoff::new(Duration::from_secs(1), Duration::from_secs(10)).with_jitter(0.5);

/// The consumer, the transactional producer and the loop state.
pub(crate) struct FanoutLoop {
    config: Config,
    topics: Topics,
    consumer: Arc<StreamConsumer<RevokeRecorder>>,
    txn: Transactor,
    subs: Subscriptions,
    health: Health,
    /// `None` when `--dedup-window 0`.
    windows: Option<Windows>,
    /// Reads partitions back for their windows; kept between rebuilds, dropped
    /// after a failed one (the next starts afresh).
    reader: Option<dedup::Reader>,
    /// A missing ACL: unready and named until the transaction succeeds.
    access: Access,
    /// The topic of the send that failed last (for naming a denial).
    failed_topic: Option<String>,
    /// Which bursting tenants' deliveries go straight to their lane.
    router: BurstRouter,
    /// When the last transaction committed: the next one starts no earlier
    /// than `--txn-gap` after it (see `collect`).
    committed_at: Option<tokio::time::Instant>,
    /// The wait after the next failed transaction; reset by a commit.
    txn_retry: Backoff,
    /// Each assigned partition's read-past progress, from its first record on.
    past: BTreeMap<i32, ReadPast>,
    /// The back readers of the partitions with a tenant read past.
    backs: BTreeMap<i32, BackReader>,
    /// Routed tenants whose id is too long to read past (said once each).
    refused: HashSet<String>,
    /// When the `/capacity` report was last published.
    reported_at: Option<Instant>,
    /// Each partition's watermark as last committed.
    committed_watermarks: BTreeMap<i32, i64>,
}

/// Events of one transaction, and the partitions whose progress it commits.
#[derive(Default)]
struct Batch {
    /// Each record to fan out with its verdict, judged when it was read (in
    /// offset order) and kept for the batch's retries, and which reader took
    /// it. A tenant's records are the front's or the back's, never both in one
    /// batch, each reader's in offset order.
    messages: Vec<(OwnedMessage, Judged, Reader)>,
    bytes: u64,
    /// The partitions it moves, the front's and the back's: their watermarks
    /// and checkpoints are committed (a partition whose records were all read
    /// past or done moves too).
    parts: BTreeSet<(String, i32)>,
}

/// Which reader took a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    Front,
    Back,
}

impl Batch {
    fn push(&mut self, msg: OwnedMessage, judged: Judged, reader: Reader) {
        self.touch(&msg);
        self.bytes += msg.payload().map_or(0, <[u8]>::len) as u64;
        self.messages.push((msg, judged, reader));
    }

    /// `msg`'s partition moves in this batch.
    fn touch(&mut self, msg: &OwnedMessage) {
        if !self
            .parts
            .contains(&(msg.topic().to_owned(), msg.partition()))
        {
            self.parts.insert((msg.topic().to_owned(), msg.partition()));
        }
    }

    /// Forgets a revoked partition's messages: its new owner reads them again
    /// from the last committed offset.
    fn drop_partition(&mut self, topic: &str, partition: i32) -> usize {
        let before = self.messages.len();
        self.messages
            .retain(|(m, _, _)| !(m.topic() == topic && m.partition() == partition));
        self.parts.remove(&(topic.to_owned(), partition));
        self.bytes = self
            .messages
            .iter()
            .map(|(m, _, _)| m.payload().map_or(0, <[u8]>::len) as u64)
            .sum();
        before - self.messages.len()
    }

    fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.parts.is_empty()
    }
}

/// The tenant a record belongs to for reading past: its key (hookline keys
/// `events` by tenant). A record keyed otherwise is never read past.
fn key_tenant(msg: &OwnedMessage) -> &str {
    msg.key()
        .and_then(|k| std::str::from_utf8(k).ok())
        .unwrap_or("")
}

impl FanoutLoop {
    pub(crate) async fn new(
        config: Config,
        topics: Topics,
        subs: Subscriptions,
        health: Health,
    ) -> Result<Self, FanoutError> {
        let consumer = kafka::manual_commit_consumer(
            &config.common,
            "hookline-fanout",
            &config.fanout.group_id,
        )?;
        let txn = Transactor::new(
            &config.common,
            TxnSpec {
                client_id: "hookline-fanout",
                transactional_id: config.fanout.transactional_id(&config.common),
                // Short, so that a crashed replica's open transaction (a new pod
                // has a new transactional id and cannot fence it) stops holding
                // back read_committed readers within seconds; batches take ms.
                transaction_timeout: Duration::from_secs(20),
                call_timeout: config.fanout.txn_timeout,
                // A batch's records are all sent before its commit, which
                // then waits for them: lingering only delays the commit (the
                // dispatcher's transactional producer lingers 1 ms too).
                linger: Duration::from_millis(1),
            },
        )
        .await?
        .report_writes_to(health.clone(), STAGE);
        let windows = config
            .fanout
            .dedup()
            .map(|w| Windows::new(w, config.fanout.dedup_max_keys));
        let bursts = config.fanout.bursts().map_err(|why| FanoutError::Config {
            flag: "--overflow-lanes / --overflow-route-window",
            why,
        })?;
        if bursts.enabled() {
            tracing::info!(
                lanes = bursts.lanes,
                route_records = bursts.route_records,
                window = ?bursts.window,
                "a tenant's burst goes straight to its overflow lane"
            );
        }
        let router = BurstRouter::new(bursts);
        Ok(Self {
            windows,
            reader: None,
            config,
            topics,
            consumer: Arc::new(consumer),
            txn,
            subs,
            access: Access::new(health.clone(), STAGE),
            failed_topic: None,
            health,
            router,
            committed_at: None,
            txn_retry: TXN_RETRY,
            past: BTreeMap::new(),
            backs: BTreeMap::new(),
            refused: HashSet::new(),
            reported_at: None,
            committed_watermarks: BTreeMap::new(),
        })
    }

    /// Runs until `stop`; the batch in hand when it fires is committed first.
    pub(crate) async fn run(mut self, stop: CancellationToken) -> Result<(), FanoutError> {
        self.consumer
            .context()
            .hold_ready_until_assigned(&self.health, "events");
        self.consumer
            .subscribe(&[self.topics.events()])
            .map_err(|e| kafka_err("subscribing to events", e))?;
        // Stalled or unassigned shows in `/readyz`; stopped when this
        // returns, however it returns, and waited for when it returns Ok.
        let watch = group_watch::watch_while_held(
            &self.consumer,
            group_watch::WatchSpec {
                stage: STAGE,
                consumer: "events",
                stall_timeout: self.config.common.consumer_stall_timeout,
            },
            &self.health,
        );
        self.health.set_ready(STAGE, Ok(()));
        tracing::info!(topic = %self.topics.events(), group = %self.config.fanout.group_id, "fanning out");
        // A batch whose transaction failed, to go into the next one.
        let mut retained = Batch::default();
        while !stop.is_cancelled() {
            self.health.beat(LOOP);
            let batch = self.collect(&stop, std::mem::take(&mut retained)).await;
            if batch.is_empty() {
                continue;
            }
            if let Some(failed) = self.commit_batch(batch, &stop).await? {
                retained = failed;
            }
        }
        self.health.forget(LOOP);
        for (_, back) in std::mem::take(&mut self.backs) {
            back.close();
        }
        watch.stop().await;
        Ok(())
    }

    /// Adds to `batch` (a failed one, or empty) the events the consumer has
    /// ready, up to `txn_max_events` / `txn_max_bytes`: it waits for the
    /// first one, then takes only what is ready without waiting, and ends the
    /// batch as soon as nothing is, or `txn_max_interval` after the first
    /// one at the latest. So a batch is one event when events trickle in and
    /// grows with the load (everything that arrived while the previous
    /// transaction committed); the interval bounds it, it is not a wait.
    /// Nor does it end before `--txn-gap` has passed since the previous
    /// commit: a transaction begun while the coordinator still writes that
    /// commit's markers waits 20 ms in librdkafka (CONCURRENT_TRANSACTIONS),
    /// so what arrives within the gap joins this batch instead.
    async fn collect(&mut self, stop: &CancellationToken, mut batch: Batch) -> Batch {
        let max = self.config.fanout.txn_max_events as usize;
        let max_bytes = self.config.fanout.txn_max_bytes;
        let mut deadline: Option<tokio::time::Instant> = (!batch.is_empty())
            .then(|| tokio::time::Instant::now() + self.config.fanout.txn_max_interval);
        self.drop_revoked(&mut batch);
        // A local handle: a received message borrows it, not `self`.
        let consumer = Arc::clone(&self.consumer);
        // Zero-wait polls in a row that found no message: the consumer's queue
        // may hand out a non-message event (a commit or rebalance callback)
        // instead, so one empty poll does not yet mean nothing is ready.
        let mut empty_polls = 0;
        let gap_ends = self.committed_at.map(|at| at + self.config.fanout.txn_gap);
        // With a back reader that has work, wait for the front only briefly.
        let idle = if self.back_has_work() {
            BACK_POLL
        } else {
            IDLE_POLL
        };
        while batch.messages.len() < max && batch.bytes < max_bytes {
            let ready_only = match deadline {
                Some(d) if tokio::time::Instant::now() < d => true,
                Some(_) => break,
                None => false,
            };
            let received = if ready_only {
                if stop.is_cancelled() {
                    break;
                }
                // Only what is ready: `recv` polled once, no timer. (A
                // `timeout` of zero polls it once too, but then waits for
                // the timer driver's next millisecond tick, ~1.1 ms: twice
                // per batch, every transaction started 2 ms late.)
                match consumer.recv().now_or_never() {
                    // All that is ready is in; within the gap since the last
                    // commit, wait for more (bounded by the interval too).
                    None if empty_polls >= READY_POLLS => {
                        match gap_ends.filter(|&g| tokio::time::Instant::now() < g) {
                            Some(g) => tokio::select! {
                                _ = stop.cancelled() => None,
                                _ = tokio::time::sleep_until(deadline.map_or(g, |d| d.min(g))) => None,
                                r = consumer.recv() => Some(r),
                            },
                            None => None,
                        }
                    }
                    polled => polled,
                }
            } else {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    r = tokio::time::timeout(idle, consumer.recv()) => r.ok(),
                }
            };
            self.drop_revoked(&mut batch);
            match received {
                None if ready_only && empty_polls < READY_POLLS => {
                    empty_polls += 1;
                    tokio::task::yield_now().await;
                }
                None => break,
                Some(Ok(msg)) => {
                    empty_polls = 0;
                    let msg = msg.detach();
                    // Nothing of a partition is processed before its window is
                    // in place; on shutdown the record is left for the next owner.
                    if !self.ensure_partition(&msg, stop).await {
                        break;
                    }
                    self.read_front(msg, &mut batch);
                    deadline.get_or_insert_with(|| {
                        tokio::time::Instant::now() + self.config.fanout.txn_max_interval
                    });
                }
                Some(Err(error)) => {
                    events::ConsumerError { error: &error }.emit();
                    // While brokers are away the consumer queues an error
                    // every few seconds. Ending the batch at each one took
                    // one of them per transaction attempt (seconds apart,
                    // with the transaction's back-off), and the rebalance
                    // and records queued behind them waited minutes. Drain
                    // what is ready now instead, within the batch's interval.
                    empty_polls = 0;
                    deadline.get_or_insert_with(|| {
                        tokio::time::Instant::now() + self.config.fanout.txn_max_interval
                    });
                }
            }
        }
        self.read_back(&mut batch);
        // A watermark that moved with no record of this batch (a tenant
        // settled after a commit) is committed too, or the group would lag
        // behind work already done until the partition's next record.
        for (partition, past) in &self.past {
            if past.watermark() != self.committed_watermarks.get(partition).copied() {
                batch
                    .parts
                    .insert((self.topics.events().to_owned(), *partition));
            }
        }
        batch
    }

    /// The front reads `msg`: judged at once, in offset order (the admission
    /// window sees every record here, whoever fans it out), then fanned out in
    /// this batch, left to the partition's back reader (its tenant is read
    /// past), or skipped (fanned out before a restart).
    fn read_front(&mut self, msg: OwnedMessage, batch: &mut Batch) {
        let partition = msg.partition();
        let before = self.windows.as_ref().and_then(|w| w.stream_time(partition));
        let windows = &mut self.windows;
        let judged = judge(
            msg.payload(),
            self.config.fanout.max_payload_bytes,
            |event| match windows {
                Some(w) => w.admit(partition, dedup::record_time(&msg), event),
                None => Admission::Admit,
            },
        );
        let after = self.windows.as_ref().and_then(|w| w.stream_time(partition));
        let past = self.past.entry(partition).or_default();
        match past.front(msg.offset(), key_tenant(&msg), (before, after)) {
            FrontVerdict::FanOut => batch.push(msg, judged, Reader::Front),
            FrontVerdict::Back => {
                if let Judged::Event(_, admission) = judged {
                    past.judged(msg.offset(), admission);
                }
                batch.touch(&msg);
            }
            FrontVerdict::Done => batch.touch(&msg),
        }
    }

    /// Whether a back reader can hand out a record now (it is not holding one
    /// the front has not read yet).
    fn back_has_work(&self) -> bool {
        self.backs
            .iter()
            .any(|(partition, back)| match back.held_at() {
                None => true,
                Some(at) => self.past.get(partition).is_some_and(|p| p.has_read(at)),
            })
    }

    /// Adds the read-past tenants' records the back readers have ready, up to
    /// the back's share of the batch: what the front left of
    /// `--txn-max-events`, and at least a quarter of it, so a busy front never
    /// starves them.
    fn read_back(&mut self, batch: &mut Batch) {
        let max = self.config.fanout.txn_max_events as usize;
        let mut budget = max.saturating_sub(batch.messages.len()).max(max / 4);
        let topic = self.topics.events().to_owned();
        let parts: Vec<i32> = self.past.keys().copied().collect();
        for partition in parts {
            let Some(past) = self.past.get_mut(&partition) else {
                continue;
            };
            // A back reader lives while a tenant is read past on its partition
            // (also when it has caught up: it then waits for the front).
            if past.behind() == 0 {
                if let Some(back) = self.backs.remove(&partition) {
                    back.close();
                }
                continue;
            }
            if !self.backs.contains_key(&partition) {
                let Some(from) = past.back_from() else {
                    continue;
                };
                match BackReader::new(&self.config.common, &topic, partition, from) {
                    Ok(back) => {
                        events::BackReaderStarted { partition, from }.emit();
                        self.backs.insert(partition, back);
                    }
                    Err(error) => {
                        events::BackReaderFailed {
                            partition,
                            error: &error,
                        }
                        .emit();
                        continue;
                    }
                }
            }
            let Some(back) = self.backs.get_mut(&partition) else {
                continue;
            };
            while budget > 0 {
                let Some(msg) = back.next() else {
                    break;
                };
                match past.back(msg.offset(), key_tenant(&msg)) {
                    BackVerdict::Wait => {
                        back.hold(msg);
                        break;
                    }
                    // Passing another tenant's record moves the watermark.
                    BackVerdict::Skip => batch.touch(&msg),
                    BackVerdict::FanOut(admission) => {
                        let judged =
                            match judge(msg.payload(), self.config.fanout.max_payload_bytes, |_| {
                                admission
                            }) {
                                Judged::Event(event, _) => Judged::Event(event, admission),
                                unusable => unusable,
                            };
                        batch.push(msg, judged, Reader::Back);
                        budget -= 1;
                    }
                }
            }
        }
    }

    fn drop_revoked(&mut self, batch: &mut Batch) {
        for (topic, partition) in self.consumer.context().take_revoked() {
            if let Some(windows) = &mut self.windows {
                windows.forget(partition);
            }
            self.past.remove(&partition);
            self.committed_watermarks.remove(&partition);
            if let Some(back) = self.backs.remove(&partition) {
                back.close();
            }
            let dropped = batch.drop_partition(&topic, partition);
            if dropped > 0 {
                events::RevokedDropped {
                    topic: &topic,
                    partition,
                    dropped,
                }
                .emit();
            }
        }
    }

    /// Makes sure `msg`'s partition, on its first record here, has its
    /// read-past progress, restored from the checkpoint committed with its
    /// offset, and its admission window, rebuilt from the partition's records
    /// before `msg` (each retried until it works). False only if `stop` fired
    /// first.
    async fn ensure_partition(&mut self, msg: &OwnedMessage, stop: &CancellationToken) -> bool {
        let partition = msg.partition();
        let has_window = |w: &Option<Windows>| w.as_ref().is_none_or(|w| w.has(partition));
        if self.past.contains_key(&partition) && has_window(&self.windows) {
            return true;
        }
        self.health.set_ready(
            DEDUP_READY,
            Err(format!(
                "restoring the progress and rebuilding the duplicate-admission window of events partition {partition}"
            )),
        );
        let mut backoff = REBUILD_RETRY;
        let mut stream_time = None;
        loop {
            if !self.past.contains_key(&partition) {
                match self.committed_checkpoint(msg).await {
                    Ok(checkpoint) => {
                        stream_time = checkpoint.as_ref().and_then(|c| c.stream_time);
                        if let Some(c) = checkpoint.as_ref().filter(|c| !c.tenants.is_empty()) {
                            events::ReadPastRestored {
                                partition,
                                watermark: c.watermark,
                                front: c.front,
                                tenants: c.tenants.len(),
                            }
                            .emit();
                        }
                        self.past.insert(partition, ReadPast::restore(checkpoint));
                    }
                    Err(error) => events::CheckpointUnread {
                        partition,
                        error: &error,
                    }
                    .emit(),
                }
            }
            if self.past.contains_key(&partition) {
                match &self.windows {
                    Some(w) if !w.has(partition) => {
                        let (window, max_keys) = (w.window(), w.max_keys());
                        let started = Instant::now();
                        match self.rebuild_once(msg, window, max_keys, stream_time).await {
                            Ok(rebuilt) => {
                                events::WindowRebuilt {
                                    partition,
                                    records: rebuilt.records,
                                    start: rebuilt.start,
                                    end: msg.offset(),
                                    took: started.elapsed(),
                                }
                                .emit();
                                if let Some(windows) = &mut self.windows {
                                    windows.install(partition, rebuilt.window);
                                }
                            }
                            Err(error) => events::WindowRebuildFailed {
                                partition,
                                error: &error,
                            }
                            .emit(),
                        }
                    }
                    _ => {}
                }
            }
            if self.past.contains_key(&partition) && has_window(&self.windows) {
                self.health.set_ready(DEDUP_READY, Ok(()));
                return true;
            }
            self.health.beat(LOOP);
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = retry::pause(&mut backoff) => {}
            }
        }
    }

    /// The checkpoint committed with `msg`'s partition's offset: `None` when
    /// nothing is committed, or hookline did not write its metadata.
    async fn committed_checkpoint(
        &self,
        msg: &OwnedMessage,
    ) -> Result<Option<Checkpoint>, FanoutError> {
        let (topic, partition) = (msg.topic().to_owned(), msg.partition());
        let consumer = Arc::clone(&self.consumer);
        let timeout = self.config.fanout.txn_timeout;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&topic, partition);
        let committed =
            tokio::task::spawn_blocking(move || consumer.committed_offsets(tpl, timeout))
                .await
                .map_err(|e| FanoutError::Join(e.to_string()))?
                .map_err(|e| kafka_err("reading the committed offset's metadata", e))?;
        Ok(committed
            .find_partition(&topic, partition)
            .and_then(|e| match e.offset() {
                Offset::Offset(offset) => read_past::decode(e.metadata(), offset),
                _ => None,
            }))
    }

    /// One rebuild attempt: from one window before `stream_time` (the
    /// committed one, else now) up to `msg`.
    async fn rebuild_once(
        &mut self,
        msg: &OwnedMessage,
        window: Duration,
        max_keys: usize,
        stream_time: Option<i64>,
    ) -> Result<dedup::Rebuilt, FanoutError> {
        let partition = msg.partition();
        if stream_time.is_none() {
            events::NoCommittedStreamTime { partition }.emit();
        }
        let spec = RebuildSpec {
            topic: msg.topic().to_owned(),
            partition,
            end: msg.offset(),
            from_stream_time: stream_time.unwrap_or_else(|| epoch::millis(SystemTime::now())),
            window,
            max_keys,
            max_payload_bytes: self.config.fanout.max_payload_bytes,
        };
        let common = self.config.common.clone();
        let reader = self.reader.take();
        let mut task = tokio::task::spawn_blocking(move || {
            let reader = match reader {
                Some(reader) => reader,
                None => dedup::Reader::new(&common)?,
            };
            let rebuilt = dedup::rebuild(&reader, &spec)?;
            Ok::<_, hookline_runtime::RuntimeError>((reader, rebuilt))
        });
        // Reading back can take a while; the loop is alive meanwhile.
        loop {
            tokio::select! {
                done = &mut task => {
                    let (reader, rebuilt) = done
                        .map_err(|e| FanoutError::Join(e.to_string()))?
                        .map_err(FanoutError::Runtime)?;
                    self.reader = Some(reader);
                    return Ok(rebuilt);
                }
                _ = tokio::time::sleep(Duration::from_secs(1)) => self.health.beat(LOOP),
            }
        }
    }

    /// Commits one batch in a transaction; on failure aborts (or re-creates the
    /// producer) and hands the batch back to be tried again.
    async fn commit_batch(
        &mut self,
        mut batch: Batch,
        stop: &CancellationToken,
    ) -> Result<Option<Batch>, FanoutError> {
        let started = Instant::now();
        let result = self.transact(&mut batch).await;
        self.report_routing();
        match result {
            Ok(counts) => {
                self.access.granted();
                self.txn_retry.reset();
                self.committed_at = Some(tokio::time::Instant::now());
                self.settle_read_past();
                fm::transaction("committed", started.elapsed());
                fm::committed(&counts);
                return Ok(None);
            }
            Err(error) => {
                let outcome = match &error {
                    TxnError::Abortable(_) => "aborted",
                    // Re-created: the new producer fences the old one.
                    TxnError::Fatal(_) | TxnError::Stuck { .. } => "fenced",
                };
                events::TransactionFailed {
                    error: &error,
                    events: batch.messages.len(),
                    outcome,
                    took: started.elapsed(),
                }
                .emit();
                if let Some(denial) = self.denial(&error) {
                    self.access.refused(denial, &error);
                }
                self.txn.recover(&error, stop).await?;
            }
        }
        // A stop ends the wait: the loop then leaves the batch to the next owner.
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = retry::pause(&mut self.txn_retry) => {}
        }
        Ok(Some(batch))
    }

    /// What a failed transaction was refused, if an ACL is missing: the
    /// resource and operation of the fanout's row of the ACL table.
    fn denial(&self, error: &TxnError) -> Option<Denial> {
        let (TxnError::Abortable(e) | TxnError::Fatal(e)) = error else {
            return None;
        };
        let (resource, name, operation) = match access::denied(e)? {
            Denied::Topic => (
                "topic",
                self.failed_topic.clone().unwrap_or_else(|| {
                    format!(
                        "{} or {}",
                        self.topics.deliveries(),
                        self.topics.quarantine()
                    )
                }),
                "Write",
            ),
            Denied::Group => ("group", self.config.fanout.group_id.clone(), "Read"),
            Denied::TransactionalId => (
                "transactional-id",
                self.txn.transactional_id().to_owned(),
                "Write",
            ),
            Denied::Cluster => ("cluster", String::new(), "IdempotentWrite"),
        };
        Some(Denial {
            resource,
            name,
            operation,
        })
    }

    async fn transact(&mut self, batch: &mut Batch) -> Result<fm::TxnCounts, TxnError> {
        self.failed_topic = None;
        self.txn.begin()?;
        let now = SystemTime::now();
        let now_ms = epoch::millis(now);
        self.router.tick(now);
        let mut counts = fm::TxnCounts {
            consumed: batch.messages.len(),
            read_past: batch
                .messages
                .iter()
                .filter(|(_, _, r)| *r == Reader::Back)
                .count(),
            ..fm::TxnCounts::default()
        };
        for (msg, judged, reader) in &batch.messages {
            let output = fan_out_judged(
                kafka::source_record(msg),
                judged,
                kafka::trace_context(msg).as_ref(),
                || kafka::quarantined_headers(msg),
                |tenant, ty| self.subs.matching(tenant, ty),
                now_ms,
            );
            if let (Reader::Front, Judged::Event(event, _)) = (reader, judged) {
                self.read_past_if_routed(msg, &event.tenant_id);
            }
            match output {
                Output::Deliveries(deliveries) => {
                    for Routed {
                        delivery: d,
                        strict,
                        ordered,
                    } in &deliveries
                    {
                        let bytes = encode(d);
                        let key = Some(d.tenant_id.as_bytes());
                        let (topic, route) = if *strict {
                            (self.topics.strict(), Route::Deliveries)
                        } else {
                            let route = self.router.route(&d.tenant_id, *ordered, now);
                            (self.topics.deliveries(), route)
                        };
                        let sent = match route {
                            Route::Deliveries => self.txn.send(topic, key, &bytes).await,
                            Route::Locate => self
                                .txn
                                .send_located(topic, key, &bytes)
                                .await
                                .map(|partition| self.router.located(&d.tenant_id, partition)),
                            Route::Lane { partition } => {
                                let lane =
                                    Topics::lane_of(&d.tenant_id, self.router.settings().lanes);
                                let lane = self.topics.lanes().nth(lane).unwrap_or(topic);
                                counts.routed += 1;
                                let sent = self
                                    .txn
                                    .send_to(lane, Some(partition), key, &bytes, &[])
                                    .await;
                                if sent.is_err() {
                                    self.failed_topic = Some(lane.to_owned());
                                }
                                sent
                            }
                        };
                        if let Err(e) = sent {
                            self.failed_topic.get_or_insert_with(|| topic.to_owned());
                            return Err(e);
                        }
                    }
                    counts.produced += deliveries.len();
                }
                Output::Unmatched => counts.unmatched += 1,
                Output::Duplicate(Duplicate::Same) => {
                    events::DuplicateDropped {
                        partition: msg.partition(),
                        offset: msg.offset(),
                    }
                    .emit();
                    counts.duplicate(PayloadMatch::Same);
                }
                Output::Duplicate(Duplicate::Changed(q)) => {
                    events::ChangedDuplicateQuarantined {
                        partition: q.source_partition,
                        offset: q.source_offset,
                        detail: &q.detail,
                    }
                    .emit();
                    counts.duplicate(PayloadMatch::Changed);
                    counts.quarantined.push(q.reason.clone());
                    let key = q.key.clone().unwrap_or_default();
                    let topic = self.topics.quarantine();
                    if let Err(e) = self.txn.send(topic, Some(&key), &encode(q.as_ref())).await {
                        self.failed_topic = Some(topic.to_owned());
                        return Err(e);
                    }
                }
                Output::Quarantine(q) => {
                    events::UnusableQuarantined {
                        partition: q.source_partition,
                        offset: q.source_offset,
                        reason: &q.reason,
                        detail: &q.detail,
                    }
                    .emit();
                    counts.quarantined.push(q.reason.clone());
                    let key = q.key.clone().unwrap_or_default();
                    let topic = self.topics.quarantine();
                    if let Err(e) = self.txn.send(topic, Some(&key), &encode(q.as_ref())).await {
                        self.failed_topic = Some(topic.to_owned());
                        return Err(e);
                    }
                }
            }
        }
        let mut offsets = TopicPartitionList::new();
        let mut watermarks = Vec::with_capacity(batch.parts.len());
        for (topic, partition) in &batch.parts {
            // The lowest record not yet fanned out, with what above it is done
            // and the stream time a rebuild reaches back from.
            let Some(checkpoint) = self.past.get_mut(partition).and_then(ReadPast::checkpoint)
            else {
                continue;
            };
            offsets
                .add_partition_offset(topic, *partition, Offset::Offset(checkpoint.watermark))
                .map_err(TxnError::Abortable)?;
            watermarks.push((*partition, checkpoint.watermark));
            if let Some(mut elem) = offsets.find_partition(topic, *partition) {
                elem.set_metadata(read_past::encode(&checkpoint));
            }
        }
        let group = self
            .consumer
            .group_metadata()
            .ok_or_else(|| TxnError::Abortable(KafkaError::NoMessageReceived))?;
        self.txn.commit(vec![(offsets, group)]).await?;
        self.committed_watermarks.extend(watermarks);
        Ok(counts)
    }
}

impl FanoutLoop {
    /// Reads the tenant of `msg` (a record the front fanned out) past on its
    /// partition from now on, if the burst router routes it: its later records
    /// there go to the back reader, so the tenants behind it wait only for the
    /// front to read past them. Not if its id would not fit in the
    /// partition's committed metadata.
    fn read_past_if_routed(&mut self, msg: &OwnedMessage, tenant_id: &str) {
        let tenant = key_tenant(msg);
        if tenant != tenant_id || !self.router.is_routed(tenant_id) {
            return;
        }
        let Some(past) = self.past.get_mut(&msg.partition()) else {
            return;
        };
        if past.is_behind(tenant) {
            return;
        }
        if !read_past::room_for(past, tenant) {
            if self.refused.insert(tenant.to_owned()) {
                events::ReadPastRefused {
                    partition: msg.partition(),
                    tenant_id: tenant,
                }
                .emit();
            }
            return;
        }
        if past.promote(tenant) {
            events::ReadPastStarted {
                partition: msg.partition(),
                tenant_id: tenant,
            }
            .emit();
        }
    }

    /// After a commit: ends reading past the tenants the back readers have
    /// caught up with and the router no longer routes, closes the back
    /// readers with nothing left to do, and refreshes the read-past gauges.
    fn settle_read_past(&mut self) {
        let router = &self.router;
        let (mut tenants, mut ahead) = (0, 0);
        for (partition, past) in &mut self.past {
            for tenant_id in past.settle(|t| router.is_routed(t)) {
                events::ReadPastEnded {
                    partition: *partition,
                    tenant_id: &tenant_id,
                }
                .emit();
            }
            if past.behind() == 0 {
                if let Some(back) = self.backs.remove(partition) {
                    back.close();
                }
            }
            tenants += past.behind();
            ahead += past.ahead();
        }
        fm::read_past(tenants, ahead);
        if self
            .reported_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
        {
            self.reported_at = Some(Instant::now());
            self.publish_capacity();
        }
    }

    /// Publishes who is routed and read past at `GET /capacity`.
    fn publish_capacity(&self) {
        let lanes = self.router.settings().lanes;
        let report = capacity::Report {
            at_ms: epoch::millis(SystemTime::now()),
            ceiling: lanes,
            routed: self
                .router
                .routed_tenants()
                .map(|(tenant_id, since)| capacity::Routed {
                    tenant_id: tenant_id.to_owned(),
                    lane: format!("lane-{}", Topics::lane_of(tenant_id, lanes)),
                    since_ms: epoch::millis(since),
                })
                .collect(),
            waiting: self.router.waiting(),
            read_past: self
                .past
                .iter()
                .filter(|(_, p)| p.behind() > 0)
                .filter_map(|(partition, p)| {
                    Some(capacity::PartitionPast {
                        partition: *partition,
                        watermark: p.watermark()?,
                        front: p.position()?,
                        tenants: p
                            .tenants()
                            .map(|(tenant_id, from_offset)| capacity::TenantPast {
                                tenant_id: tenant_id.to_owned(),
                                from_offset,
                            })
                            .collect(),
                    })
                })
                .collect(),
        };
        match serde_json::to_string(&report) {
            Ok(json) => self.health.set_report("capacity", json),
            Err(error) => tracing::debug!(%error, "encoding the capacity report"),
        }
    }

    /// Logs and counts the burst router's changes since the last call.
    fn report_routing(&mut self) {
        let changes = self.router.take_changes();
        let (routing, waiting) = (self.router.routed(), self.router.waiting());
        for change in &changes {
            let (tenant_id, lane) = match change {
                Change::Promote(tenant_id) => (
                    tenant_id,
                    Some(Topics::lane_of(tenant_id, self.router.settings().lanes)),
                ),
                Change::Demote(tenant_id) => {
                    self.refused.remove(tenant_id);
                    (tenant_id, None)
                }
            };
            events::RoutingChanged {
                tenant_id,
                lane,
                routing,
                waiting,
            }
            .emit();
        }
        if changes.is_empty() && waiting > 0 {
            fm::routing_state(routing, waiting);
        }
    }
}

fn kafka_err(context: &str, e: KafkaError) -> FanoutError {
    FanoutError::Runtime(hookline_runtime::RuntimeError::kafka(context, e))
}
