//! Follows the `subscriptions` topic into a [`SubscriptionTable`]. A record
//! that cannot be used is counted by reason (`not_avro`, `unknown_fingerprint`,
//! `wrong_record`, `bad_datum`, `bad_key`, `key_mismatch`, `bad_pattern`),
//! logged with its coordinates and skipped; it never stops the table, and it is
//! never written anywhere (every replica re-reads the whole table). Readiness turns on once every partition has reached the high
//! watermark it had when the follower started.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard},
    time::Duration,
};

use hookline_envelope::{decode, error_chain, Subscription};
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    error::KafkaError,
    message::Message,
    Offset, TopicPartitionList,
};
use tokio::{sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use super::table::{Applied, LiveSubscription, SubscriptionTable};
use crate::{
    config::CommonArgs,
    health::Health,
    kafka::{self, QuietContext},
    metric_names as m, RuntimeError,
};

const READINESS: &str = "subscriptions";
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
const RETRY_MISSING_TOPIC: Duration = Duration::from_secs(2);

/// A read handle on the live table; cheap to clone.
#[derive(Debug, Clone)]
pub struct Subscriptions {
    table: Arc<RwLock<SubscriptionTable>>,
    caught_up: watch::Receiver<bool>,
}

impl Subscriptions {
    /// Enabled subscriptions of `tenant` that want `event_type`, in id order.
    pub fn matching(&self, tenant: &str, event_type: &str) -> Vec<Arc<LiveSubscription>> {
        self.read().matching(tenant, event_type)
    }

    /// The subscription with this id as it is now, if it exists.
    pub fn get(&self, id: &str) -> Option<Arc<LiveSubscription>> {
        self.read().get(id)
    }

    /// Every subscription, by tenant then id.
    pub fn all(&self) -> Vec<Arc<LiveSubscription>> {
        self.read().all()
    }

    /// How many subscriptions are loaded.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no subscription is loaded.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Whether the table has caught up with the topic as it was at start.
    pub fn is_caught_up(&self) -> bool {
        *self.caught_up.borrow()
    }

    /// Waits until the table has caught up (or the follower stopped).
    pub async fn wait_caught_up(&self) -> bool {
        let mut rx = self.caught_up.clone();
        let reached = rx.wait_for(|c| *c).await.is_ok();
        reached
    }

    fn read(&self) -> RwLockReadGuard<'_, SubscriptionTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts following `topic`. Readiness is reported to `health` under
/// `subscriptions`; the task ends when `stop` is cancelled.
pub fn follow(
    common: &CommonArgs,
    topic: &str,
    stage: &'static str,
    health: Option<Health>,
    stop: CancellationToken,
) -> Result<(Subscriptions, JoinHandle<()>), RuntimeError> {
    let client_id = format!("hookline-{stage}-subscriptions");
    // Its own group, so replicas never share or disturb one another; the
    // end of a partition tells it it has caught up.
    let consumer: StreamConsumer<QuietContext> =
        kafka::reader_config(common, &client_id, kafka::AtEnd::Report)?
            .create_with_context(QuietContext)
            .map_err(|e| RuntimeError::kafka("creating the subscriptions reader", e))?;
    let table = Arc::new(RwLock::new(SubscriptionTable::default()));
    let (tx, rx) = watch::channel(false);
    let handle = Subscriptions {
        table: Arc::clone(&table),
        caught_up: rx,
    };
    let follower = Follower {
        consumer,
        topic: topic.to_owned(),
        stage,
        table,
        caught_up: tx,
        health,
    };
    let task = tokio::spawn(follower.run(stop));
    Ok((handle, task))
}

/// Reads the whole table once (for the `subscriptions` CLI) and stops.
pub async fn load_snapshot(
    common: &CommonArgs,
    topic: &str,
    timeout: Duration,
) -> Result<Subscriptions, RuntimeError> {
    let stop = CancellationToken::new();
    let (subs, task) = follow(common, topic, "cli", None, stop.clone())?;
    let caught_up = tokio::time::timeout(timeout, subs.wait_caught_up()).await;
    stop.cancel();
    let _ = task.await;
    match caught_up {
        Ok(true) => Ok(subs),
        _ => Err(RuntimeError::NotCaughtUp {
            topic: topic.to_owned(),
            timeout,
        }),
    }
}

struct Follower {
    consumer: StreamConsumer<QuietContext>,
    topic: String,
    stage: &'static str,
    table: Arc<RwLock<SubscriptionTable>>,
    caught_up: watch::Sender<bool>,
    health: Option<Health>,
}

/// Per-partition catch-up state: the high watermark seen at start, the next
/// offset to read, and whether the partition has reached the target.
#[derive(Debug)]
struct Progress {
    target: i64,
    next: i64,
    reached: bool,
}

impl Follower {
    async fn run(self, stop: CancellationToken) {
        let Some(mut progress) = self.assign_all(&stop).await else {
            return;
        };
        self.report_readiness(&progress);
        loop {
            let received = tokio::select! {
                _ = stop.cancelled() => break,
                r = self.consumer.recv() => r,
            };
            match received {
                Ok(msg) => {
                    self.apply(msg.key(), msg.payload(), msg.partition(), msg.offset());
                    if let Some(p) = progress.get_mut(&msg.partition()) {
                        p.next = msg.offset() + 1;
                        if !p.reached && p.next >= p.target {
                            p.reached = true;
                            self.report_readiness(&progress);
                        }
                    }
                    self.report_lag(&progress);
                }
                Err(KafkaError::PartitionEOF(partition)) => {
                    if let Some(p) = progress.get_mut(&partition) {
                        // At the end of the log: nothing is behind, whatever the
                        // offsets say (control records and compaction leave gaps).
                        p.next = p.next.max(p.target);
                        if !p.reached {
                            p.reached = true;
                            self.report_readiness(&progress);
                        }
                    }
                    self.report_lag(&progress);
                }
                Err(error) => {
                    tracing::warn!(%error, topic = %self.topic, "subscriptions reader error; continuing");
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            }
        }
        let _ = self.caught_up.send(false);
    }

    /// Waits for the topic to exist, records each partition's high watermark
    /// and assigns every partition from the beginning.
    async fn assign_all(&self, stop: &CancellationToken) -> Option<HashMap<i32, Progress>> {
        loop {
            match self.plan_assignment() {
                Ok((tpl, progress)) => match self.consumer.assign(&tpl) {
                    Ok(()) => {
                        tracing::info!(topic = %self.topic, partitions = progress.len(), "reading subscriptions from the beginning");
                        return Some(progress);
                    }
                    Err(e) => self.not_ready(format!("cannot assign {}: {e}", self.topic)),
                },
                Err(why) => self.not_ready(why),
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tokio::time::sleep(RETRY_MISSING_TOPIC) => {}
            }
        }
    }

    fn plan_assignment(&self) -> Result<(TopicPartitionList, HashMap<i32, Progress>), String> {
        // Metadata and watermark calls block; they are short and run rarely.
        let metadata = self
            .consumer
            .fetch_metadata(Some(&self.topic), METADATA_TIMEOUT)
            .map_err(|e| format!("cannot read metadata of {}: {e}", self.topic))?;
        let topic = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .ok_or_else(|| format!("topic {} does not exist", self.topic))?;
        if let Some(err) = topic.error() {
            return Err(format!("topic {} is unavailable: {err:?}", self.topic));
        }
        if topic.partitions().is_empty() {
            return Err(format!("topic {} has no partitions", self.topic));
        }
        let mut tpl = TopicPartitionList::new();
        let mut progress = HashMap::new();
        for p in topic.partitions() {
            let (low, high) = self
                .consumer
                .fetch_watermarks(&self.topic, p.id(), METADATA_TIMEOUT)
                .map_err(|e| format!("cannot read watermarks of {}/{}: {e}", self.topic, p.id()))?;
            tpl.add_partition_offset(&self.topic, p.id(), Offset::Beginning)
                .map_err(|e| e.to_string())?;
            progress.insert(
                p.id(),
                Progress {
                    target: high,
                    next: low,
                    reached: high <= low,
                },
            );
        }
        Ok((tpl, progress))
    }

    /// Applies one record. A record that cannot be used is counted by reason,
    /// logged with its coordinates and skipped; it is deliberately not
    /// quarantined: every replica re-reads the compacted table from the start,
    /// so each would write it again on every start, forever. The fix is a
    /// corrected record (or a tombstone) under the same key.
    fn apply(&self, key: Option<&[u8]>, payload: Option<&[u8]>, partition: i32, offset: i64) {
        let stage = self.stage;
        let topic = self.topic.as_str();
        let invalid = |reason: &'static str, detail: String| {
            metrics::counter!(m::SUBSCRIPTIONS_INVALID, m::label::STAGE => stage, m::label::REASON => reason)
                .increment(1);
            tracing::warn!(topic, partition, offset, reason, %detail, "skipping an unusable subscription record");
        };
        let Some(key) = key.and_then(|k| std::str::from_utf8(k).ok()) else {
            return invalid("bad_key", "missing or non-UTF-8 key".to_owned());
        };
        let applied = match payload {
            None => self.write().delete(key),
            Some(bytes) => {
                let record: Subscription = match decode(bytes) {
                    Ok(r) => r,
                    Err(e) => return invalid(e.quarantine_reason().as_str(), error_chain(&e)),
                };
                if record.subscription_id != key {
                    return invalid(
                        "key_mismatch",
                        format!("key {key} but subscription_id {}", record.subscription_id),
                    );
                }
                match LiveSubscription::new(record) {
                    Ok(live) => self.write().upsert(live),
                    Err(e) => return invalid("bad_pattern", e.to_string()),
                }
            }
        };
        if let Applied::Stale { held, offered } = applied {
            tracing::warn!(
                subscription_id = key,
                held,
                offered,
                "ignoring an older subscription version"
            );
        }
        let len = self.table.read().map(|t| t.len()).unwrap_or_default();
        metrics::gauge!(m::SUBSCRIPTIONS_LOADED, m::label::STAGE => stage).set(len as f64);
    }

    /// Records still to read before the start-time target; after catch-up the
    /// end-of-partition events keep it at zero while the table follows live.
    fn report_lag(&self, progress: &HashMap<i32, Progress>) {
        let lag: i64 = progress.values().map(|p| (p.target - p.next).max(0)).sum();
        metrics::gauge!(m::SUBSCRIPTIONS_LAG, m::label::STAGE => self.stage).set(lag as f64);
    }

    fn report_readiness(&self, progress: &HashMap<i32, Progress>) {
        let behind: Vec<i32> = progress
            .iter()
            .filter(|(_, p)| !p.reached)
            .map(|(id, _)| *id)
            .collect();
        if behind.is_empty() {
            if !*self.caught_up.borrow() {
                let loaded = self.table.read().map(|t| t.len()).unwrap_or_default();
                tracing::info!(topic = %self.topic, loaded, "subscription table caught up");
            }
            let _ = self.caught_up.send(true);
            if let Some(h) = &self.health {
                h.set_ready(READINESS, Ok(()));
            }
        } else if let Some(h) = &self.health {
            h.set_ready(
                READINESS,
                Err(format!(
                    "catching up with {} ({} partitions behind)",
                    self.topic,
                    behind.len()
                )),
            );
        }
    }

    fn not_ready(&self, why: String) {
        tracing::warn!(topic = %self.topic, %why, "subscription table not ready");
        if let Some(h) = &self.health {
            h.set_ready(READINESS, Err(why));
        }
    }

    fn write(&self) -> RwLockWriteGuard<'_, SubscriptionTable> {
        self.table.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// Follows `topic`, waits until the table has caught up (or `shutdown`), runs
/// `stage` with it, then stops the follower. The shape every stage that
/// matches against subscriptions starts with. `Ok(None)`: shut down before the
/// table caught up.
pub async fn run_with_table<T, E, Fut>(
    common: &CommonArgs,
    topic: &str,
    stage_name: &'static str,
    health: &Health,
    shutdown: &CancellationToken,
    stage: impl FnOnce(Subscriptions) -> Fut,
) -> Result<Option<T>, E>
where
    E: From<RuntimeError>,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let table_stop = CancellationToken::new();
    let (subs, table_task) = follow(
        common,
        topic,
        stage_name,
        Some(health.clone()),
        table_stop.clone(),
    )?;
    let result = async {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            _ = subs.wait_caught_up() => {}
        }
        stage(subs).await.map(Some)
    }
    .await;
    table_stop.cancel();
    let _ = table_task.await;
    result
}
