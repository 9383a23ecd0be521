//! Steady load while faults are injected: events are made up front (so the
//! pipeline knows every expected delivery), then a background task produces
//! them at a fixed rate with its own idempotent producer, whatever the
//! pipeline or the broker is doing. librdkafka queues and retries sends while
//! the broker is down; an event it finally gives up on is reported, never
//! silently dropped from the expectation.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::Context;
use hookline_testkit::{kafka, pipeline::Pipeline};
use rdkafka::{
    producer::{FutureProducer, FutureRecord},
    ClientConfig,
};
use tokio::{task::JoinHandle, time::Instant};

/// A running load.
#[derive(Debug)]
pub struct Load {
    sent: Arc<AtomicU64>,
    task: JoinHandle<anyhow::Result<()>>,
}

/// Makes `events` events spread round robin over `tenants` and starts sending
/// them at `rate` per second.
pub fn start(p: &mut Pipeline, tenants: &[&str], events: u64, rate: f64) -> anyhow::Result<Load> {
    let records: Vec<(Vec<u8>, Vec<u8>)> = (0..events)
        .map(|seq| p.event(seq, tenants[seq as usize % tenants.len()], 256))
        .collect();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka::brokers())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        // Long enough to ride out a broker restart.
        .set("message.timeout.ms", "300000")
        .create()
        .context("creating the load producer")?;
    let topic = p.topics.events().to_owned();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    let task = tokio::spawn(async move {
        let start = Instant::now();
        let mut acks = Vec::with_capacity(records.len());
        for (i, (key, value)) in records.iter().enumerate() {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            tokio::time::sleep_until(due).await;
            loop {
                match producer.send_result(FutureRecord::to(&topic).key(key).payload(value)) {
                    Ok(ack) => {
                        acks.push(ack);
                        break;
                    }
                    // The local queue is full while the broker is away: wait.
                    Err((_, _)) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            counter.fetch_add(1, Ordering::Relaxed);
        }
        for (i, ack) in acks.into_iter().enumerate() {
            ack.await
                .context("the producer dropped an event")?
                .map_err(|(e, _)| anyhow::anyhow!("event {i} was never acknowledged: {e}"))?;
        }
        Ok(())
    });
    Ok(Load { sent, task })
}

impl Load {
    /// Events handed to the producer so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Waits until every event is acknowledged by the broker.
    pub async fn finish(self) -> anyhow::Result<()> {
        self.task.await.context("the load task panicked")?
    }
}
