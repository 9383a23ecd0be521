//! The Kafka side of the engine: one group consumer per input topic
//! (`deliveries` and each retry tier), all in the dispatcher's one group, each
//! polled by a dedicated thread that hands its messages and rebalance events,
//! in order, to the engine over its input's inbox (the first-attempt inputs
//! share one, the tiers and lanes another: `engine/inbox.rs`). The overflow lanes'
//! consumers are the exception: they never join the group; the engine assigns
//! them, by hand, the partitions of `deliveries` its group consumer owns
//! (`engine/lanes.rs`).
//!
//! One consumer per topic is what balances the group *per topic*: the
//! cooperative-sticky assignor balances partition counts per member, and each
//! member here subscribes to one topic, so N replicas own ⌊P/N⌋ or ⌈P/N⌉
//! partitions of `deliveries` and of every tier. With a single consumer on
//! all topics one replica could own every `deliveries` partition while the
//! others held only tiers. The group (and so every committed offset) is the
//! one it always was; only its members changed.
//!
//! Rebalance callbacks only signal (CONVENTIONS 5): a revoke is sent to the
//! engine, which drops the partitions' queued records, lets their in-flight
//! attempts finish, stores and commits the watermark, and confirms; only then does
//! the callback return and librdkafka hand the partitions over. Because polling
//! happens on this thread, the callback can block without stalling the engine.
//! Partitions *lost* with the group session (librdkafka's assignment lost: a
//! broker away past the session timeout) cannot be committed any more; the
//! engine drops them at once and confirms (`engine/rebalance.rs`).
//!
//! Rewinds (pause-until-due) are carried out here too, between two polls: pause,
//! seek back, then a [`FromKafka::Rewound`] marker into the same inbox. So every
//! message of that partition the engine receives before the marker was fetched
//! before the seek (stale: drop it), and every one after it was fetched after the
//! seek (librdkafka's synchronous seek purges what was prefetched). A rewind asked
//! for before a rebalance the engine had not yet seen is refused, never applied to
//! a partition that was reassigned meanwhile (it could skip unfinished records).

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc as sync_mpsc, Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use rdkafka::{
    consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance},
    error::KafkaError,
    message::OwnedMessage,
    ClientContext, Offset, TopicPartitionList,
};
use tokio::sync::mpsc;

/// A (topic, partition) as librdkafka names it.
pub(crate) type TopicPartition = (String, i32);

/// What a poller thread hands to the engine, in its consumer's order. `input`
/// is the index of the input (and so of the consumer) an event comes from.
#[derive(Debug)]
pub(crate) enum FromKafka {
    Message(OwnedMessage),
    /// Newly assigned partitions, and the consumer's rebalance epoch they start.
    Assigned {
        input: u16,
        parts: Vec<TopicPartition>,
        epoch: u64,
    },
    /// The engine must confirm on `confirm` once the partitions are drained
    /// and committed; the consumer's rebalance epoch they end. `lost`: the
    /// consumer's group session ended (librdkafka's "assignment lost": a
    /// session timeout, a broker away longer than it), so nothing of these
    /// partitions can be committed any more; the engine drops them at once.
    Revoked {
        input: u16,
        parts: Vec<TopicPartition>,
        confirm: sync_mpsc::SyncSender<()>,
        epoch: u64,
        lost: bool,
    },
    /// A [`Command::Rewind`] was carried out (`done`), or refused (`!done`: a
    /// rebalance came between, or the seek failed; the engine may ask again).
    Rewound {
        partition: TopicPartition,
        generation: u64,
        done: bool,
    },
    /// The consumer of `input` read `partition` to its end (only the overflow
    /// lanes' consumers ask for this: `enable.partition.eof`).
    Eof {
        input: u16,
        partition: i32,
    },
    Error(KafkaError),
    /// What the backlog peeker (`engine/peek.rs`, not a group consumer) found
    /// at the positions it was asked about: (partition, offset asked, found).
    Peeked(Vec<(TopicPartition, i64, crate::backlog::Peeked)>),
}

/// What the engine asks of the polling thread.
#[derive(Debug)]
pub(crate) enum Command {
    /// Pause the partition and seek it back to `offset`, if no rebalance happened
    /// since `epoch`; answer with [`FromKafka::Rewound`].
    Rewind {
        partition: TopicPartition,
        offset: i64,
        generation: u64,
        epoch: u64,
    },
}

/// The consumer context: logs through `tracing` and forwards rebalances.
#[derive(Debug)]
pub(crate) struct DispatchContext {
    /// The input this consumer reads.
    input: u16,
    events: mpsc::Sender<FromKafka>,
    /// How long a revoke waits for the engine's confirmation.
    revoke_wait: Duration,
    /// Bumped on every assign and revoke, before the engine hears of it.
    epoch: AtomicU64,
}

impl DispatchContext {
    pub(crate) fn new(input: u16, events: mpsc::Sender<FromKafka>, revoke_wait: Duration) -> Self {
        Self {
            input,
            events,
            revoke_wait,
            epoch: AtomicU64::new(0),
        }
    }

    fn next_epoch(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::SeqCst) + 1
    }
}

impl ClientContext for DispatchContext {
    fn error(&self, error: KafkaError, reason: &str) {
        // A lane's consumer asks to be told of a partition's end; not an error.
        if matches!(
            error.rdkafka_error_code(),
            Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF)
        ) {
            return;
        }
        tracing::warn!(%error, %reason, "librdkafka error");
    }
}

impl ConsumerContext for DispatchContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: rdkafka::types::RDKafkaRespErr,
        tpl: &mut rdkafka::TopicPartitionList,
    ) {
        hookline_runtime::kafka::cooperative_rebalance(self, consumer, err, tpl);
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let parts = hookline_runtime::kafka::partitions(tpl);
                let lost = consumer.assignment_lost();
                if lost {
                    tracing::warn!(partitions = ?parts, "partitions lost with the group session; dropping them");
                } else {
                    tracing::info!(partitions = ?parts, "partitions revoked; draining them");
                }
                let (confirm, confirmed) = sync_mpsc::sync_channel(1);
                let epoch = self.next_epoch();
                // A closed channel means the engine is gone and has committed.
                let revoked = FromKafka::Revoked {
                    input: self.input,
                    parts,
                    confirm,
                    epoch,
                    lost,
                };
                if self.events.blocking_send(revoked).is_ok()
                    && confirmed.recv_timeout(self.revoke_wait).is_err()
                {
                    crate::events::RevokeNotConfirmed {
                        waited: self.revoke_wait,
                    }
                    .emit();
                }
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let parts = hookline_runtime::kafka::partitions(tpl);
            tracing::info!(partitions = ?parts, "partitions assigned");
            let epoch = self.next_epoch();
            let _ = self.events.blocking_send(FromKafka::Assigned {
                input: self.input,
                parts,
                epoch,
            });
        }
    }
}

/// The dispatcher's consumers, indexed like the engine's inputs.
pub(crate) type Consumers = Vec<Arc<BaseConsumer<DispatchContext>>>;

/// The polling thread of one consumer; stop it with [`Poller::stop`].
#[derive(Debug)]
pub(crate) struct Poller {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const POLL: Duration = Duration::from_millis(100);
/// How long a rewind's seek may take before it is reported as refused.
const SEEK_TIMEOUT: Duration = Duration::from_secs(10);

impl Poller {
    /// Polls `consumer` until stopped. The thread holds the consumer last, so its
    /// close (and the final revoke callback) happens here, outside the runtime.
    pub(crate) fn spawn(
        consumer: Arc<BaseConsumer<DispatchContext>>,
        events: mpsc::Sender<FromKafka>,
        commands: sync_mpsc::Receiver<Command>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let name = format!("dispatch-poll-{}", consumer.context().input);
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            'polling: while !flag.load(Ordering::Relaxed) {
                while let Ok(command) = commands.try_recv() {
                    let answer = execute(&consumer, command);
                    if events.blocking_send(answer).is_err() {
                        break 'polling;
                    }
                }
                let event = match consumer.poll(POLL) {
                    None => continue,
                    Some(Ok(msg)) => FromKafka::Message(msg.detach()),
                    Some(Err(KafkaError::PartitionEOF(partition))) => FromKafka::Eof {
                        input: consumer.context().input,
                        partition,
                    },
                    Some(Err(e)) => FromKafka::Error(e),
                };
                if events.blocking_send(event).is_err() {
                    break 'polling;
                }
            }
            drop(events);
            // Waits for librdkafka to close the consumer (leaving the group).
            drop(consumer);
        })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops polling and waits for the consumer to close.
    pub(crate) async fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }

    /// Stops every poller at once, so the consumers leave the group together
    /// (one rebalance for the others, not one per consumer).
    pub(crate) async fn stop_all(pollers: Vec<Self>) {
        for poller in &pollers {
            poller.stop.store(true, Ordering::Relaxed);
        }
        futures::future::join_all(pollers.into_iter().map(Self::stop)).await;
    }
}

/// Carries out one command on the polling thread, between two polls.
fn execute(consumer: &BaseConsumer<DispatchContext>, command: Command) -> FromKafka {
    let Command::Rewind {
        partition,
        offset,
        generation,
        epoch,
    } = command;
    let current = consumer.context().epoch.load(Ordering::SeqCst);
    let done = current == epoch && rewind(consumer, &partition, offset);
    FromKafka::Rewound {
        partition,
        generation,
        done,
    }
}

/// Pause first, then seek: librdkafka's pause saves the application position as
/// the resume point, and the seek that follows overrides it (the reverse order
/// lost the seek before librdkafka 1.9).
fn rewind(
    consumer: &BaseConsumer<DispatchContext>,
    (topic, partition): &TopicPartition,
    offset: i64,
) -> bool {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, *partition);
    if let Err(error) = consumer.pause(&tpl) {
        crate::events::RewindFailed {
            topic,
            partition: *partition,
            offset: None,
            error: &error,
        }
        .emit();
        return false;
    }
    match consumer.seek(topic, *partition, Offset::Offset(offset), SEEK_TIMEOUT) {
        Ok(()) => true,
        Err(error) => {
            crate::events::RewindFailed {
                topic,
                partition: *partition,
                offset: Some(offset),
                error: &error,
            }
            .emit();
            false
        }
    }
}
