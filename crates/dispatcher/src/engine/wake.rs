//! Wakes librdkafka's fetcher after the engine resumes a partition.
//!
//! librdkafka does not wake a broker thread when a partition is resumed: only a
//! change of fetch state (assign, seek), an op for the thread (a request to
//! send) or I/O does. A consumer none of whose partitions on that broker is
//! being fetched — a retry tier whose heads are all not due, the one
//! `deliveries` partition held for its pending writes — has nothing in flight,
//! so its broker thread sleeps up to a second (`rd_kafka_max_block_ms`) before
//! it decides to fetch the resumed partition. Every due retry after the first
//! of a burst was attempted 0–1 s late (`make bench` `retry_lateness`: p50
//! 0.4–0.8 s and max 1.0 s after every tier, up to 60 s; librdkafka's debug
//! log shows the resume and the fetch decision ~0.4 s apart).
//!
//! A request for the partition's leader wakes that thread: after each resume,
//! this thread asks the leader for the partition's watermarks (ListOffsets) and
//! drops the answer. It never seeks, so it cannot change what is fetched, only
//! when. Off the engine's loop (the ask blocks for a round trip); a partition
//! asked for again while an ask is queued is asked once.
//!
//! It holds the consumers weakly, only for the length of an ask, and dropping
//! it joins the thread: each poller thread must hold its consumer last, so that
//! the consumer's close (leaving the group, the final revoke) happens there,
//! when the pollers are stopped. A first version held them strongly, the
//! consumers then closed whenever this thread ended, and `make faults`
//! `rolling_restart` saw deliveries repeated across the handovers.

use std::{
    collections::BTreeSet,
    sync::{mpsc as sync_mpsc, Arc, Weak},
    thread::JoinHandle,
    time::Duration,
};

use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::{
    consumer::{Consumers, DispatchContext},
    DispatcherError,
};

/// How long one wake-up ask may take; a broker that does not answer delays
/// only the asks behind it, and the fetcher still wakes within its second.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The waking thread; dropping this ends it and waits for it.
#[derive(Debug)]
pub(crate) struct FetchWaker {
    asks: Option<sync_mpsc::Sender<(usize, i32)>>,
    thread: Option<JoinHandle<()>>,
}

impl FetchWaker {
    /// Starts the thread for these consumers, one per input, each reading its
    /// topic of `topics`.
    pub(crate) fn spawn(
        consumers: &Consumers,
        topics: Vec<String>,
    ) -> Result<Self, DispatcherError> {
        let consumers: Vec<Weak<BaseConsumer<DispatchContext>>> =
            consumers.iter().map(Arc::downgrade).collect();
        let (asks, asked) = sync_mpsc::channel::<(usize, i32)>();
        let thread = std::thread::Builder::new()
            .name("dispatch-wake".into())
            .spawn(move || {
                while let Ok(first) = asked.recv() {
                    let mut due: BTreeSet<(usize, i32)> = BTreeSet::from([first]);
                    due.extend(asked.try_iter());
                    for (input, partition) in due {
                        let (Some(consumer), Some(topic)) =
                            (consumers.get(input).and_then(Weak::upgrade), topics.get(input))
                        else {
                            continue;
                        };
                        if let Err(error) = consumer.fetch_watermarks(topic, partition, ASK_TIMEOUT) {
                            tracing::debug!(%error, topic, partition, "waking the fetcher after a resume");
                        }
                    }
                }
            })
            .map_err(DispatcherError::Thread)?;
        Ok(Self {
            asks: Some(asks),
            thread: Some(thread),
        })
    }

    /// Asks for a wake-up of the fetcher of `input`'s `partition`.
    pub(crate) fn wake(&self, input: usize, partition: i32) {
        if let Some(asks) = &self.asks {
            // The thread ends only when this is dropped.
            let _ = asks.send((input, partition));
        }
    }
}

impl Drop for FetchWaker {
    /// Ends the thread and waits for it: at most one ask in flight
    /// ([`ASK_TIMEOUT`]), so the pollers stopped after the engine hold their
    /// consumers last.
    fn drop(&mut self) {
        drop(self.asks.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
