//! A whale's import on `events` and the clocks kept on it: when fanout had
//! committed the import's last event (its group's offset on the import's
//! partition, polled), and when the import's last delivery as fanout wrote it
//! became readable to a `read_committed` reader of `deliveries` and every
//! overflow lane (fanout routes a burst straight to a lane, so most of an
//! import never passes through `deliveries`).

use std::{
    sync::{
        atomic::{AtomicI64, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::Context as _;
use hookline_runtime::kafka::{Offsets, ReadCommitted as _, StartAt};
use hookline_testkit::kafka;
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    message::Headers,
    Message, Offset, Timestamp, TopicPartitionList,
};

// The header the dispatcher puts on a record it moved from `deliveries` to a
// lane: such a copy is not fanout's writing.
use hookline_dispatch_core::build::MOVED_FROM;

use crate::pipeline::{now_us, Pipeline};

/// How often fanout's committed offset is asked for.
const POLL: Duration = Duration::from_millis(100);

/// A whale's import, produced in one go, and the two clocks running on it.
pub(super) struct Import {
    /// When its first event was produced, µs since the epoch.
    pub(super) from_us: i64,
    /// The `events` partition it went to.
    pub(super) partition: i32,
    /// Its deliveries: events × the tenant's subscriptions.
    pub(super) deliveries: usize,
    committed: Arc<AtomicI64>,
    committed_task: tokio::task::JoinHandle<()>,
    written: Arc<Written>,
    written_task: tokio::task::JoinHandle<()>,
}

impl Drop for Import {
    fn drop(&mut self) {
        self.committed_task.abort();
        self.written_task.abort();
    }
}

/// What the reader of the delivery topics saw of the import.
#[derive(Default)]
struct Written {
    count: AtomicUsize,
    last_us: AtomicI64,
}

/// The clocks of an import, read once the phase is over (µs since the epoch;
/// `None` when not seen).
#[derive(Debug, Clone, Copy)]
pub(super) struct Times {
    /// Fanout had committed the import's last event.
    pub(super) committed_us: Option<i64>,
    /// The import's last delivery, as fanout wrote it, became readable.
    pub(super) last_readable_us: Option<i64>,
    /// How many of the import's deliveries as fanout wrote them were read.
    pub(super) written: usize,
}

impl Import {
    /// Produces `events` events of `tenant` (with `partitions` partitions on
    /// every topic) and returns once every one is acknowledged; the reader of
    /// the delivery topics is reading before the first is produced.
    pub(super) async fn produce(
        p: &mut Pipeline,
        seq: &mut u64,
        tenant: &str,
        (events, payload): (usize, usize),
        partitions: i32,
    ) -> anyhow::Result<Self> {
        let from_us = now_us();
        let written = Arc::new(Written::default());
        let written_task = read_written(p, partitions, tenant, from_us, Arc::clone(&written))?;
        let before = p.expected();
        let mut import: Vec<_> = (0..events)
            .map(|_| {
                *seq += 1;
                p.event(*seq, tenant, payload)
            })
            .collect();
        let last = import.pop().context("an import of no events")?;
        p.produce(import).await?;
        // The last one alone, for where the import ends.
        let end = p
            .send(&last)?
            .await
            .context("the producer dropped the import's last event")?
            .map_err(|(e, _)| anyhow::anyhow!("producing the import's last event: {e}"))?;
        let committed = Arc::new(AtomicI64::new(i64::MAX));
        let committed_task = tokio::spawn(watch_committed(
            p.groups.fanout.clone(),
            p.topics.events().to_owned(),
            (end.partition, end.offset + 1),
            Arc::clone(&committed),
        ));
        Ok(Self {
            from_us,
            partition: end.partition,
            deliveries: p.expected() - before,
            committed,
            committed_task,
            written,
            written_task,
        })
    }

    /// When fanout had committed the import's last event, µs since the
    /// epoch, `i64::MAX` until then: for a pacer to stop on.
    pub(super) fn committed(&self) -> Arc<AtomicI64> {
        Arc::clone(&self.committed)
    }

    pub(super) fn times(&self) -> Times {
        let seen = |us: i64| (us != i64::MAX && us != 0).then_some(us);
        Times {
            committed_us: seen(self.committed.load(Ordering::Relaxed)),
            last_readable_us: seen(self.written.last_us.load(Ordering::Relaxed)),
            written: self.written.count.load(Ordering::Relaxed),
        }
    }
}

/// Stores when fanout's committed offset on `partition` of `topic` reached
/// `end` (asked every [`POLL`]).
async fn watch_committed(
    group: String,
    topic: String,
    (partition, end): (i32, i64),
    at: Arc<AtomicI64>,
) {
    loop {
        if let Ok(committed) = kafka::committed_by_partition(&group, &topic).await {
            if committed.get(&partition).is_some_and(|&o| o >= end) {
                at.store(now_us(), Ordering::Relaxed);
                return;
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Reads `deliveries` and every lane from the beginning, `read_committed`
/// and fetching as the dispatcher does, and notes each record fanout wrote
/// for `tenant` (its key; a record the dispatcher moved carries
/// [`MOVED_FROM`]) since `since_us`: how many, and when the latest became
/// readable. Nothing is decoded, so the reader costs the machine little
/// beside the stages it measures.
fn read_written(
    p: &Pipeline,
    partitions: i32,
    tenant: &str,
    since_us: i64,
    into: Arc<Written>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    // Assigned by hand: the group is never joined nor committed to.
    let consumer: StreamConsumer = kafka::client_config()
        .set("group.id", format!("{}import-reader", p.topics.prefix()))
        .read_committed(StartAt::Earliest, Offsets::Explicit)
        // As the dispatcher's default `--fetch-wait-max`.
        .set("fetch.wait.max.ms", "10")
        .create()
        .context("creating the import's reader")?;
    let mut tpl = TopicPartitionList::new();
    for topic in std::iter::once(p.topics.deliveries()).chain(p.topics.lanes()) {
        for partition in 0..partitions {
            tpl.add_partition_offset(topic, partition, Offset::Beginning)?;
        }
    }
    consumer.assign(&tpl)?;
    let (key, since_ms) = (tenant.as_bytes().to_vec(), since_us / 1000);
    Ok(tokio::spawn(async move {
        loop {
            let Ok(msg) = consumer.recv().await else {
                continue;
            };
            let readable_us = now_us();
            let at_ms = match msg.timestamp() {
                Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) => t,
                Timestamp::NotAvailable => continue,
            };
            let moved = msg
                .headers()
                .is_some_and(|h| h.iter().any(|h| h.key == MOVED_FROM));
            if msg.key() != Some(key.as_slice()) || moved || at_ms < since_ms {
                continue;
            }
            into.count.fetch_add(1, Ordering::Relaxed);
            into.last_us.store(readable_us, Ordering::Relaxed);
        }
    }))
}
