//! Follows a compacted topic into an in-memory table: every partition
//! assigned from the beginning (no consumer group, so replicas never share or
//! disturb one another), then followed live. Readiness turns on once every
//! partition has reached the high watermark it had when the follower started,
//! so a fresh replica never acts on half a table. The subscription table and
//! the dispatchers' shared circuit breakers are both read this way; what a
//! record means is the [`Table`]'s business.

use std::{collections::HashMap, time::Duration};

use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    error::KafkaError,
    message::Message,
    Offset, TopicPartitionList,
};
use tokio::{sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{
    config::CommonArgs,
    health::Health,
    kafka::{self, QuietContext},
    RuntimeError,
};

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
const RETRY_MISSING_TOPIC: Duration = Duration::from_secs(2);

/// What a follower does with its topic's records.
pub trait Table: Send + Sync + 'static {
    /// Applies one record (`payload` `None`: a tombstone). A record the table
    /// cannot use is counted, logged and skipped by the table; it never stops
    /// the follower.
    fn apply(&self, key: Option<&[u8]>, payload: Option<&[u8]>, partition: i32, offset: i64);
    /// Records still to read before the start-time target.
    fn report_lag(&self, lag: i64);
    /// Entries held, for the caught-up log line.
    fn len(&self) -> usize;
    /// Whether it holds nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Starts following `topic` into `table`. Readiness is reported to `health`
/// under `readiness`; the returned receiver turns `true` once caught up (and
/// `false` when the follower stops). The task ends when `stop` is cancelled.
pub fn follow<T: Table>(
    common: &CommonArgs,
    topic: &str,
    client_id: &str,
    readiness: &'static str,
    table: T,
    health: Option<Health>,
    stop: CancellationToken,
) -> Result<(watch::Receiver<bool>, JoinHandle<()>), RuntimeError> {
    // The end of a partition tells it it has caught up.
    let consumer: StreamConsumer<QuietContext> =
        kafka::reader_config(common, client_id, kafka::AtEnd::Report)?
            .create_with_context(QuietContext)
            .map_err(|e| RuntimeError::kafka("creating a compacted-topic reader", e))?;
    let (tx, rx) = watch::channel(false);
    let follower = Follower {
        consumer,
        topic: topic.to_owned(),
        readiness,
        table,
        caught_up: tx,
        health,
    };
    Ok((rx, tokio::spawn(follower.run(stop))))
}

struct Follower<T> {
    consumer: StreamConsumer<QuietContext>,
    topic: String,
    readiness: &'static str,
    table: T,
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

impl<T: Table> Follower<T> {
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
                    self.table
                        .apply(msg.key(), msg.payload(), msg.partition(), msg.offset());
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
                    tracing::warn!(%error, topic = %self.topic, "compacted-topic reader error; continuing");
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
                        tracing::info!(topic = %self.topic, partitions = progress.len(), "reading a compacted topic from the beginning");
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

    /// Records still to read before the start-time target; after catch-up the
    /// end-of-partition events keep it at zero while the table follows live.
    fn report_lag(&self, progress: &HashMap<i32, Progress>) {
        let lag: i64 = progress.values().map(|p| (p.target - p.next).max(0)).sum();
        self.table.report_lag(lag);
    }

    fn report_readiness(&self, progress: &HashMap<i32, Progress>) {
        let behind = progress.values().filter(|p| !p.reached).count();
        if behind == 0 {
            if !*self.caught_up.borrow() {
                tracing::info!(topic = %self.topic, loaded = self.table.len(), "caught up with a compacted topic");
            }
            let _ = self.caught_up.send(true);
            if let Some(h) = &self.health {
                h.set_ready(self.readiness, Ok(()));
            }
        } else if let Some(h) = &self.health {
            h.set_ready(
                self.readiness,
                Err(format!(
                    "catching up with {} ({behind} partitions behind)",
                    self.topic
                )),
            );
        }
    }

    fn not_ready(&self, why: String) {
        tracing::warn!(topic = %self.topic, %why, "compacted-topic table not ready");
        if let Some(h) = &self.health {
            h.set_ready(self.readiness, Err(why));
        }
    }
}
