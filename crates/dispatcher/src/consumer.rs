//! The Kafka side of the engine: a dedicated thread polls the consumer and hands
//! every message and rebalance event, in order, to the engine over one channel.
//!
//! Rebalance callbacks only signal (CONVENTIONS 5): a revoke is sent to the
//! engine, which drops the partitions' queued records, lets their in-flight
//! attempts finish, stores and commits the watermark, and confirms; only then does
//! the callback return and librdkafka hand the partitions over. Because polling
//! happens on this thread, the callback can block without stalling the engine.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc as sync_mpsc, Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use rdkafka::{
    consumer::{BaseConsumer, ConsumerContext, Rebalance},
    error::KafkaError,
    message::OwnedMessage,
    ClientContext, TopicPartitionList,
};
use tokio::sync::mpsc;

/// A (topic, partition) as librdkafka names it.
pub(crate) type TopicPartition = (String, i32);

/// What the poller thread hands to the engine, in consumer order.
#[derive(Debug)]
pub(crate) enum FromKafka {
    Message(OwnedMessage),
    Assigned(Vec<TopicPartition>),
    /// The engine must confirm on the sender once the partitions are drained
    /// and committed.
    Revoked(Vec<TopicPartition>, sync_mpsc::SyncSender<()>),
    Error(KafkaError),
}

/// The consumer context: logs through `tracing` and forwards rebalances.
#[derive(Debug)]
pub(crate) struct DispatchContext {
    events: mpsc::Sender<FromKafka>,
    /// How long a revoke waits for the engine's confirmation.
    revoke_wait: Duration,
}

impl DispatchContext {
    pub(crate) fn new(events: mpsc::Sender<FromKafka>, revoke_wait: Duration) -> Self {
        Self {
            events,
            revoke_wait,
        }
    }
}

fn elements(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

impl ClientContext for DispatchContext {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, %reason, "librdkafka error");
    }
}

impl ConsumerContext for DispatchContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let parts = elements(tpl);
                tracing::info!(partitions = ?parts, "partitions revoked; draining them");
                let (confirm, confirmed) = sync_mpsc::sync_channel(1);
                // A closed channel means the engine is gone and has committed.
                if self
                    .events
                    .blocking_send(FromKafka::Revoked(parts, confirm))
                    .is_ok()
                    && confirmed.recv_timeout(self.revoke_wait).is_err()
                {
                    tracing::warn!("engine did not confirm the revoke in time; handing over");
                }
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let parts = elements(tpl);
            tracing::info!(partitions = ?parts, "partitions assigned");
            let _ = self.events.blocking_send(FromKafka::Assigned(parts));
        }
    }
}

/// The polling thread; stop it with [`Poller::stop`].
#[derive(Debug)]
pub(crate) struct Poller {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const POLL: Duration = Duration::from_millis(100);

impl Poller {
    /// Polls `consumer` until stopped. The thread holds the consumer last, so its
    /// close (and the final revoke callback) happens here, outside the runtime.
    pub(crate) fn spawn(
        consumer: Arc<BaseConsumer<DispatchContext>>,
        events: mpsc::Sender<FromKafka>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("dispatcher-poll".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    let event = match consumer.poll(POLL) {
                        None => continue,
                        Some(Ok(msg)) => FromKafka::Message(msg.detach()),
                        Some(Err(KafkaError::PartitionEOF(_))) => continue,
                        Some(Err(e)) => FromKafka::Error(e),
                    };
                    if events.blocking_send(event).is_err() {
                        break;
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
}
