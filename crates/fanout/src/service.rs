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

use hookline_core::{
    admission::{Admission, PayloadMatch},
    epoch,
};
use hookline_envelope::{encode, Topics};
use hookline_runtime::{
    group_watch,
    health::Health,
    kafka::{self, RevokeRecorder},
    subscriptions::Subscriptions,
};
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    error::KafkaError,
    message::{Message, OwnedMessage},
    producer::{FutureProducer, FutureRecord, Producer},
    Offset, TopicPartitionList,
};
use tokio_util::sync::CancellationToken;

use crate::{
    config::Config,
    dedup::{self, RebuildSpec, Windows},
    metrics as fm,
    transform::{fan_out, Duplicate, Output},
    FanoutError, STAGE,
};

const LOOP: &str = "fanout";
/// The readiness condition held while a partition's admission window is rebuilt.
const DEDUP_READY: &str = "dedup_window";
const IDLE_POLL: Duration = Duration::from_secs(1);
/// Pause after a failed transaction before the batch is tried again.
const RETRY_BACKOFF: Duration = Duration::from_millis(500);
/// Times a retriable transactional call (a timeout) is repeated before the
/// producer is given up and re-created.
const RETRIABLE_TRIES: u32 = 10;

/// The consumer, the transactional producer and the loop state.
pub(crate) struct FanoutLoop {
    config: Config,
    topics: Topics,
    consumer: Arc<StreamConsumer<RevokeRecorder>>,
    producer: FutureProducer,
    subs: Subscriptions,
    health: Health,
    /// `None` when `--dedup-window 0`.
    windows: Option<Windows>,
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

enum TxnError {
    /// Abort, rewind and go on with a new transaction.
    Abortable(KafkaError),
    /// The producer is unusable (fenced or fatal): re-create it, rewind.
    Fatal(KafkaError),
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
        let producer = Self::transactional_producer(&config).await?;
        let windows = config
            .fanout
            .dedup()
            .map(|w| Windows::new(w, config.fanout.dedup_max_keys));
        Ok(Self {
            windows,
            config,
            topics,
            consumer: Arc::new(consumer),
            producer,
            subs,
            health,
        })
    }

    async fn transactional_producer(config: &Config) -> Result<FutureProducer, FanoutError> {
        let txn_id = config.fanout.transactional_id();
        let producer: FutureProducer = kafka::client_config(&config.common, "hookline-fanout")?
            .set("transactional.id", &txn_id)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("compression.type", "lz4")
            // Short, so that a crashed replica's open transaction (a new pod
            // has a new transactional id and cannot fence it) stops holding
            // back read_committed readers within seconds; batches take ms.
            .set("transaction.timeout.ms", "20000")
            .create()
            .map_err(|e| kafka_err("creating the transactional producer", e))?;
        let timeout = config.fanout.txn_timeout;
        let p = producer.clone();
        tokio::task::spawn_blocking(move || p.init_transactions(timeout))
            .await
            .map_err(|e| FanoutError::Join(e.to_string()))?
            .map_err(|e| kafka_err("initialising transactions", e))?;
        tracing::info!(transactional_id = %txn_id, "transactional producer ready");
        Ok(producer)
    }

    /// Runs until `stop`; the batch in hand when it fires is committed first.
    pub(crate) async fn run(mut self, stop: CancellationToken) -> Result<(), FanoutError> {
        self.consumer
            .subscribe(&[self.topics.events()])
            .map_err(|e| kafka_err("subscribing to events", e))?;
        // Stalled or unassigned shows in `/readyz`; stopped when this
        // returns, however it returns.
        let _watch = group_watch::watch_while_held(
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
        Ok(())
    }

    /// Adds to `batch` (a failed one, or empty) up to `txn_max_events`
    /// events, waiting at most `txn_max_interval` after the first one.
    async fn collect(&mut self, stop: &CancellationToken, mut batch: Batch) -> Batch {
        let max = self.config.fanout.txn_max_events as usize;
        let max_bytes = self.config.fanout.txn_max_bytes;
        let mut deadline: Option<tokio::time::Instant> = (!batch.is_empty())
            .then(|| tokio::time::Instant::now() + self.config.fanout.txn_max_interval);
        self.drop_revoked(&mut batch);
        // A local handle: a received message borrows it, not `self`.
        let consumer = Arc::clone(&self.consumer);
        while batch.messages.len() < max && batch.bytes < max_bytes {
            let wait = match deadline {
                Some(d) => d.saturating_duration_since(tokio::time::Instant::now()),
                None => IDLE_POLL,
            };
            let received = tokio::select! {
                _ = stop.cancelled() => break,
                r = tokio::time::timeout(wait, consumer.recv()) => r,
            };
            self.drop_revoked(&mut batch);
            match received {
                Err(_elapsed) => break,
                Ok(Ok(msg)) => {
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
                Ok(Err(error)) => {
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
        loop {
            let outcome = self.rebuild_once(msg, window, max_keys).await;
            match outcome {
                Ok(rebuilt) => {
                    fm::rebuild(
                        partition,
                        Ok((rebuilt.records, rebuilt.start, msg.offset())),
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
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// One rebuild attempt: the committed stream time from the offset's metadata
    /// (else now), then the records from one window before it up to `msg`.
    async fn rebuild_once(
        &self,
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
        let mut task = tokio::task::spawn_blocking(move || dedup::rebuild(&common, &spec));
        // Reading back can take a while; the loop is alive meanwhile.
        loop {
            tokio::select! {
                done = &mut task => {
                    return done
                        .map_err(|e| FanoutError::Join(e.to_string()))?
                        .map_err(FanoutError::Runtime);
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
        match self.transact(&mut batch).await {
            Ok(counts) => {
                fm::transaction("committed", started.elapsed());
                fm::committed(&counts);
                return Ok(None);
            }
            Err(TxnError::Abortable(error)) => {
                tracing::warn!(%error, events = batch.messages.len(), "transaction failed; aborting, the batch goes into the next one");
                fm::transaction("aborted", started.elapsed());
                if !self.abort().await {
                    self.replace_producer(stop).await?;
                }
            }
            Err(TxnError::Fatal(error)) => {
                tracing::warn!(%error, events = batch.messages.len(), "producer fenced or failed; re-creating it, the batch goes into the next transaction");
                fm::transaction("fenced", started.elapsed());
                self.replace_producer(stop).await?;
            }
        }
        tokio::time::sleep(RETRY_BACKOFF).await;
        Ok(Some(batch))
    }

    /// A new transactional producer (same transactional id, which fences the
    /// old one and aborts its open transaction), retried while the broker is
    /// unreachable; gives up only on shutdown.
    async fn replace_producer(&mut self, stop: &CancellationToken) -> Result<(), FanoutError> {
        loop {
            match Self::transactional_producer(&self.config).await {
                Ok(producer) => {
                    self.producer = producer;
                    return Ok(());
                }
                Err(error) if !stop.is_cancelled() => {
                    tracing::warn!(%error, "could not re-create the transactional producer; retrying");
                    self.health.beat(LOOP);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    async fn transact(&mut self, batch: &mut Batch) -> Result<fm::TxnCounts, TxnError> {
        let timeout = self.config.fanout.txn_timeout;
        self.producer.begin_transaction().map_err(classify)?;
        let now_ms = epoch::millis(SystemTime::now());
        let mut counts = fm::TxnCounts {
            consumed: batch.messages.len(),
            ..fm::TxnCounts::default()
        };
        for (msg, decided) in &mut batch.messages {
            let windows = &mut self.windows;
            let output = fan_out(
                kafka::source_record(msg),
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
                    for d in &deliveries {
                        let bytes = encode(d);
                        self.send(self.topics.deliveries(), d.tenant_id.as_bytes(), &bytes)
                            .await?;
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
                    self.send(self.topics.quarantine(), &key, &encode(q.as_ref()))
                        .await?;
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
                    self.send(self.topics.quarantine(), &key, &encode(q.as_ref()))
                        .await?;
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
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || {
            retrying(|| producer.send_offsets_to_transaction(&offsets, &group, timeout))?;
            retrying(|| producer.commit_transaction(timeout))
        })
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "commit task failed");
            TxnError::Fatal(KafkaError::Canceled)
        })?
        .map_err(classify)?;
        Ok(counts)
    }

    /// Enqueues one record, waiting while the producer queue is full.
    async fn send(&self, topic: &str, key: &[u8], value: &[u8]) -> Result<(), TxnError> {
        loop {
            let record = FutureRecord::to(topic).key(key).payload(value);
            match self.producer.send_result(record) {
                // The transaction commit flushes and fails if any send failed,
                // so the delivery report need not be awaited here.
                Ok(_report) => return Ok(()),
                Err((
                    KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    _,
                )) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => return Err(classify(e)),
            }
        }
    }

    /// Aborts the open transaction; false if the producer could not, and
    /// must be re-created.
    async fn abort(&self) -> bool {
        let producer = self.producer.clone();
        let timeout = self.config.fanout.txn_timeout;
        match tokio::task::spawn_blocking(move || retrying(|| producer.abort_transaction(timeout)))
            .await
        {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                tracing::warn!(%error, "abort_transaction failed; re-creating the producer");
                false
            }
            Err(error) => {
                tracing::warn!(%error, "abort task failed; re-creating the producer");
                false
            }
        }
    }
}

/// Runs a blocking transactional call, repeating it while librdkafka says the
/// error is retriable (a timeout: the call is resumed, not restarted).
fn retrying(
    mut call: impl FnMut() -> rdkafka::error::KafkaResult<()>,
) -> rdkafka::error::KafkaResult<()> {
    let mut tries = 1;
    loop {
        match call() {
            Err(KafkaError::Transaction(e)) if e.is_retriable() && tries < RETRIABLE_TRIES => {
                tracing::warn!(error = %e, tries, "transactional call timed out; resuming it");
                tries += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// Abortable only when librdkafka says so (or the error is not a
/// transactional one); a fatal error, a call still retriable after
/// `RETRIABLE_TRIES`, or any other state error leaves the producer in a state
/// only a new one (which fences it) gets out of.
fn classify(e: KafkaError) -> TxnError {
    match &e {
        KafkaError::Transaction(rd) if rd.is_fatal() => TxnError::Fatal(e),
        KafkaError::Transaction(rd) if rd.txn_requires_abort() => TxnError::Abortable(e),
        KafkaError::Transaction(_) => TxnError::Fatal(e),
        _ => TxnError::Abortable(e),
    }
}

fn kafka_err(context: &str, e: KafkaError) -> FanoutError {
    FanoutError::Runtime(hookline_runtime::RuntimeError::kafka(context, e))
}
