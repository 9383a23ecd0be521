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
//! The duplicate-admission window (`dedup`) of a partition is rebuilt before
//! its first record is processed; each record is decided once, the first time
//! its batch is tried, and a retried batch reuses the decisions, so the window
//! observes every record exactly once. The window's stream time is committed
//! in the offset's metadata, in the same transaction.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use futures::FutureExt;
use hookline_core::{
    admission::{Admission, PayloadMatch},
    epoch, Backoff, BurstRouter, Change, Route,
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
    config::Config,
    dedup::{self, RebuildSpec, Windows},
    metrics as fm,
    transform::{fan_out, Duplicate, Output, Routed},
    FanoutError, STAGE,
};

const LOOP: &str = "fanout";
/// The readiness condition held while a partition's admission window is rebuilt.
const DEDUP_READY: &str = "dedup_window";
const IDLE_POLL: Duration = Duration::from_secs(1);
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
}

/// Events of one transaction, with the offsets they span per partition.
#[derive(Default)]
struct Batch {
    /// Each message with its admission decision, made the first time the batch
    /// is tried and kept for its retries.
    messages: Vec<(OwnedMessage, Option<Admission>)>,
    bytes: u64,
    /// (topic, partition) → (first offset, next offset).
    span: BTreeMap<(String, i32), (i64, i64)>,
}

impl Batch {
    fn push(&mut self, msg: OwnedMessage) {
        let key = (msg.topic().to_owned(), msg.partition());
        let offset = msg.offset();
        self.span
            .entry(key)
            .and_modify(|(_, next)| *next = offset + 1)
            .or_insert((offset, offset + 1));
        self.bytes += msg.payload().map_or(0, <[u8]>::len) as u64;
        self.messages.push((msg, None));
    }

    /// Forgets a revoked partition's messages: its new owner reads them again
    /// from the last committed offset.
    fn drop_partition(&mut self, topic: &str, partition: i32) -> usize {
        let before = self.messages.len();
        self.messages
            .retain(|(m, _)| !(m.topic() == topic && m.partition() == partition));
        self.span.remove(&(topic.to_owned(), partition));
        self.bytes = self
            .messages
            .iter()
            .map(|(m, _)| m.payload().map_or(0, <[u8]>::len) as u64)
            .sum();
        before - self.messages.len()
    }

    fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
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
        .await?;
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
                    r = tokio::time::timeout(IDLE_POLL, consumer.recv()) => r.ok(),
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
                    if !self.ensure_window(&msg, stop).await {
                        break;
                    }
                    batch.push(msg);
                    deadline.get_or_insert_with(|| {
                        tokio::time::Instant::now() + self.config.fanout.txn_max_interval
                    });
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, "events consumer error");
                    break;
                }
            }
        }
        batch
    }

    fn drop_revoked(&mut self, batch: &mut Batch) {
        for (topic, partition) in self.consumer.context().take_revoked() {
            if let Some(windows) = &mut self.windows {
                windows.forget(partition);
            }
            let dropped = batch.drop_partition(&topic, partition);
            if dropped > 0 {
                tracing::info!(%topic, partition, dropped, "dropped a revoked partition's uncommitted events");
            }
        }
    }

    /// Makes sure `msg`'s partition has its admission window, rebuilding it from
    /// the partition's records before `msg` (retried until it works). False only
    /// if `stop` fired first.
    async fn ensure_window(&mut self, msg: &OwnedMessage, stop: &CancellationToken) -> bool {
        let partition = msg.partition();
        let Some(windows) = &self.windows else {
            return true;
        };
        if windows.has(partition) {
            return true;
        }
        self.health.set_ready(
            DEDUP_READY,
            Err(format!(
                "rebuilding the duplicate-admission window of events partition {partition}"
            )),
        );
        let (window, max_keys) = (windows.window(), windows.max_keys());
        let mut backoff = REBUILD_RETRY;
        loop {
            let started = Instant::now();
            let outcome = self.rebuild_once(msg, window, max_keys).await;
            match outcome {
                Ok(rebuilt) => {
                    fm::rebuild(
                        partition,
                        Ok((
                            rebuilt.records,
                            rebuilt.start,
                            msg.offset(),
                            started.elapsed(),
                        )),
                    );
                    if let Some(windows) = &mut self.windows {
                        windows.install(partition, rebuilt.window);
                    }
                    self.health.set_ready(DEDUP_READY, Ok(()));
                    return true;
                }
                Err(error) => fm::rebuild(partition, Err(&error)),
            }
            self.health.beat(LOOP);
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = retry::pause(&mut backoff) => {}
            }
        }
    }

    /// One rebuild attempt: the committed stream time from the offset's metadata
    /// (else now), then the records from one window before it up to `msg`.
    async fn rebuild_once(
        &mut self,
        msg: &OwnedMessage,
        window: Duration,
        max_keys: usize,
    ) -> Result<dedup::Rebuilt, FanoutError> {
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
        let committed_stream_time = committed
            .find_partition(&topic, partition)
            .and_then(|e| dedup::parse_metadata(e.metadata()));
        if committed_stream_time.is_none() {
            tracing::info!(partition, "no stream time committed with the offset; the admission window reaches back from now");
        }
        let spec = RebuildSpec {
            topic,
            partition,
            end: msg.offset(),
            from_stream_time: committed_stream_time
                .unwrap_or_else(|| epoch::millis(SystemTime::now())),
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
                tracing::warn!(%error, events = batch.messages.len(), "transaction failed; aborting (or re-creating the producer), the batch goes into the next one");
                if let Some(denial) = self.denial(&error) {
                    self.access.refused(denial, &error);
                }
                fm::transaction(outcome, started.elapsed());
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
            ..fm::TxnCounts::default()
        };
        for (msg, decided) in &mut batch.messages {
            let windows = &mut self.windows;
            let output = fan_out(
                kafka::source_record(msg),
                kafka::trace_context(msg).as_ref(),
                || kafka::quarantined_headers(msg),
                |tenant, ty| self.subs.matching(tenant, ty),
                |event| {
                    *decided.get_or_insert_with(|| match windows {
                        Some(w) => w.admit(msg.partition(), dedup::record_time(msg), event),
                        None => Admission::Admit,
                    })
                },
                self.config.fanout.max_payload_bytes,
                now_ms,
            );
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
                    tracing::debug!(
                        partition = msg.partition(),
                        offset = msg.offset(),
                        "a duplicate within the admission window; not fanned out again"
                    );
                    counts.duplicate(PayloadMatch::Same);
                }
                Output::Duplicate(Duplicate::Changed(q)) => {
                    tracing::warn!(
                        partition = q.source_partition,
                        offset = q.source_offset,
                        detail = %q.detail,
                        "quarantining a duplicate with another payload"
                    );
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
                    tracing::warn!(
                        partition = q.source_partition,
                        offset = q.source_offset,
                        reason = %q.reason,
                        detail = %q.detail,
                        "quarantining an unusable event"
                    );
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
        for ((topic, partition), (_, next)) in &batch.span {
            offsets
                .add_partition_offset(topic, *partition, Offset::Offset(*next))
                .map_err(TxnError::Abortable)?;
            // The window's stream time after this partition's last record in the
            // batch: where its next owner's rebuild reaches back from.
            let metadata = self
                .windows
                .as_ref()
                .and_then(|w| w.commit_metadata(*partition));
            if let (Some(metadata), Some(mut elem)) =
                (metadata, offsets.find_partition(topic, *partition))
            {
                elem.set_metadata(metadata);
            }
        }
        let group = self
            .consumer
            .group_metadata()
            .ok_or_else(|| TxnError::Abortable(KafkaError::NoMessageReceived))?;
        self.txn.commit(vec![(offsets, group)]).await?;
        Ok(counts)
    }
}

impl FanoutLoop {
    /// Logs and counts the burst router's changes since the last call.
    fn report_routing(&mut self) {
        let changes = self.router.take_changes();
        let (routing, waiting) = (self.router.routed(), self.router.waiting());
        for change in &changes {
            match change {
                Change::Promote(tenant_id) => tracing::info!(
                    %tenant_id,
                    lane = Topics::lane_of(tenant_id, self.router.settings().lanes),
                    routing,
                    "a tenant's burst: its unordered deliveries now go straight to its overflow lane"
                ),
                Change::Demote(tenant_id) => tracing::info!(
                    %tenant_id,
                    routing,
                    "a routed tenant calmed down: its deliveries go to deliveries again"
                ),
            }
            fm::routing(matches!(change, Change::Promote(_)), routing, waiting);
        }
        if changes.is_empty() && waiting > 0 {
            fm::routing_state(routing, waiting);
        }
    }
}

fn kafka_err(context: &str, e: KafkaError) -> FanoutError {
    FanoutError::Runtime(hookline_runtime::RuntimeError::kafka(context, e))
}
