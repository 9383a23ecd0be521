//! Peeks at the record at held partitions' positions (`backlog.rs` decides
//! which), off the engine's loop: a thread with a consumer of its own that
//! joins no group and commits nothing — it assigns the partitions at those
//! offsets, reads the first committed record of each (`read_committed`, as the
//! group consumers), and unassigns. Asked at most once per gauge refresh, one
//! ask at a time, each bounded by [`PEEK_WAIT`] per topic and by a small fetch
//! size, so its cost is a fetch per held partition whose position moved. The
//! answers come back in the engine's bulk inbox as [`FromKafka::Peeked`].

use std::{
    collections::BTreeMap,
    sync::mpsc as sync_mpsc,
    time::{Duration, Instant},
};

use hookline_runtime::{config::CommonArgs, kafka};
use rdkafka::{
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    message::Message,
    Offset, TopicPartitionList,
};
use tokio::sync::mpsc;

use crate::{
    backlog::Peeked,
    consumer::{FromKafka, TopicPartition},
    DispatcherError,
};

/// How long one topic's peeks may take before the unanswered ones fail (and
/// are asked again at the next refresh).
const PEEK_WAIT: Duration = Duration::from_secs(2);

/// The peeking thread; it ends when this is dropped.
#[derive(Debug)]
pub(crate) struct Peeker {
    asks: sync_mpsc::SyncSender<Vec<(TopicPartition, i64)>>,
}

/// The peeking thread itself, to wait for once the engine (and with it the
/// [`Peeker`]) is gone, so that its consumer does not outlive the stage.
#[derive(Debug)]
pub(crate) struct PeekThread(std::thread::JoinHandle<()>);

impl PeekThread {
    /// Waits until the thread has ended and destroyed its consumer: it ends
    /// once the [`Peeker`] is dropped, after the ask in hand (at most
    /// [`PEEK_WAIT`] per topic; an answer it cannot deliver any more is
    /// dropped, as the engine's channel is closed by then).
    pub(crate) async fn join(self) {
        let _ = tokio::task::spawn_blocking(move || self.0.join()).await;
    }
}

impl Peeker {
    pub(crate) fn spawn(
        common: &CommonArgs,
        events: mpsc::WeakSender<FromKafka>,
    ) -> Result<(Self, PeekThread), DispatcherError> {
        let client_id = "hookline-dispatcher-peek";
        // librdkafka wants a group.id even for assign(); this consumer never
        // joins or commits to it.
        let consumer: BaseConsumer<kafka::QuietContext> =
            kafka::reader_config(common, client_id, kafka::AtEnd::Report)?
                // One record per partition is wanted: fetch little, prefetch nothing more.
                .set("max.partition.fetch.bytes", "65536")
                .set("queued.min.messages", "1")
                .set("queued.max.messages.kbytes", "1024")
                .set("fetch.wait.max.ms", "100")
                .create_with_context(kafka::QuietContext)
                .map_err(|source| DispatcherError::Kafka {
                    context: "creating the backlog peeker",
                    source,
                })?;
        // One ask waits at most: the engine asks again at the next refresh.
        let (asks, asked) = sync_mpsc::sync_channel::<Vec<(TopicPartition, i64)>>(1);
        let thread = std::thread::Builder::new()
            .name("dispatch-peek".into())
            .spawn(move || {
                while let Ok(ask) = asked.recv() {
                    let answers = peek(&consumer, ask);
                    // Weak: the engine's channel still closes when the
                    // pollers are gone.
                    let sent = events
                        .upgrade()
                        .is_some_and(|e| e.blocking_send(FromKafka::Peeked(answers)).is_ok());
                    if !sent {
                        break;
                    }
                }
            })
            .map_err(DispatcherError::Thread)?;
        Ok((Self { asks }, PeekThread(thread)))
    }

    /// Asks for the records at these positions; `false` when the thread is
    /// still busy with the last ask (or gone).
    pub(crate) fn ask(&self, positions: Vec<(TopicPartition, i64)>) -> bool {
        self.asks.try_send(positions).is_ok()
    }
}

/// Answers every position asked, topic by topic (an end of partition names
/// only the partition).
fn peek(
    consumer: &BaseConsumer<kafka::QuietContext>,
    ask: Vec<(TopicPartition, i64)>,
) -> Vec<(TopicPartition, i64, Peeked)> {
    let mut by_topic: BTreeMap<String, Vec<(i32, i64)>> = BTreeMap::new();
    for ((topic, partition), at) in ask {
        by_topic.entry(topic).or_default().push((partition, at));
    }
    let mut answers = Vec::new();
    for (topic, positions) in by_topic {
        let mut found = peek_topic(consumer, &topic, &positions);
        for (partition, at) in positions {
            let peeked = found.remove(&partition).unwrap_or(Peeked::Failed);
            answers.push(((topic.clone(), partition), at, peeked));
        }
    }
    answers
}

fn peek_topic(
    consumer: &BaseConsumer<kafka::QuietContext>,
    topic: &str,
    positions: &[(i32, i64)],
) -> BTreeMap<i32, Peeked> {
    let mut found = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for (partition, at) in positions {
        if tpl
            .add_partition_offset(topic, *partition, Offset::Offset(*at))
            .is_err()
        {
            return found;
        }
    }
    if let Err(error) = consumer.assign(&tpl) {
        tracing::warn!(%error, topic, "cannot assign partitions to peek at");
        return found;
    }
    let deadline = Instant::now() + PEEK_WAIT;
    while found.len() < positions.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match consumer.poll(left) {
            Some(Ok(msg)) => {
                found
                    .entry(msg.partition())
                    .or_insert_with(|| Peeked::Record(msg.payload().map(<[u8]>::to_vec)));
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                found.entry(partition).or_insert(Peeked::End);
            }
            Some(Err(error)) => {
                tracing::debug!(%error, topic, "peeking");
            }
            None => {}
        }
    }
    if let Err(error) = consumer.unassign() {
        tracing::warn!(%error, topic, "cannot unassign peeked partitions");
    }
    found
}
