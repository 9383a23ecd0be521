//! Watches one group consumer and makes it visible when it is not consuming:
//! every few seconds it reads the consumer's assignment and positions (local)
//! and the assigned partitions' high watermarks (from the broker), feeds them
//! to [`hookline_core::StallDetector`], and reports the verdict as a readiness
//! condition and as gauges. A stage keeps partitions it pauses on purpose out
//! of the count through [`HeldPartitions`].
//!
//! It only observes: it never seeks, pauses or rejoins, so it cannot change
//! what the consumer does; it runs beside the stage's own loop on blocking
//! threads, so a stuck loop or a slow broker cannot stop it from reporting.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hookline_core::{PartitionView, StallDetector, StallVerdict};
use rdkafka::{
    consumer::{Consumer, ConsumerContext},
    Offset,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{health::Health, metric_names as m};

/// How long one broker query (watermarks, committed offsets) may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Partitions a stage holds paused on purpose; their lag is not a stall.
#[derive(Debug, Clone, Default)]
pub struct HeldPartitions {
    inner: Arc<Mutex<HashSet<(String, i32)>>>,
}

impl HeldPartitions {
    /// Replaces the held set.
    pub fn set(&self, parts: impl IntoIterator<Item = (String, i32)>) {
        let mut held = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        held.clear();
        held.extend(parts);
    }

    fn contains(&self, topic: &str, partition: i32) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(topic.to_owned(), partition))
    }
}

/// What to watch and where to report it.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// The stage label (`fanout`, `dispatcher`, `dlq_sink`).
    pub stage: &'static str,
    /// The consumer's name, a small fixed set per stage: the readiness
    /// condition is `consumer <name>`, the gauges' `consumer` label is `<name>`.
    pub consumer: &'static str,
    /// `--consumer-stall-timeout`.
    pub stall_timeout: Duration,
}

impl WatchSpec {
    /// How often the consumer is looked at: often enough that a stall is seen
    /// within a third of the timeout, never more than once a second.
    fn interval(&self) -> Duration {
        (self.stall_timeout / 3).clamp(Duration::from_secs(1), Duration::from_secs(10))
    }
}

/// Starts watching `consumer` (which has subscribed) until `stop`, or until
/// the consumer is dropped: the watch holds it only weakly between looks, so
/// it never keeps a stopping stage's consumer (and its group membership and
/// librdkafka threads) alive.
pub fn spawn<C, K>(
    consumer: Arc<K>,
    spec: WatchSpec,
    held: HeldPartitions,
    health: Health,
    stop: CancellationToken,
) -> JoinHandle<()>
where
    C: ConsumerContext + 'static,
    K: Consumer<C> + Send + Sync + 'static,
{
    let condition: &'static str = Box::leak(format!("consumer {}", spec.consumer).into_boxed_str());
    let consumer = Arc::downgrade(&consumer);
    tokio::spawn(async move {
        let mut detector = StallDetector::new(spec.stall_timeout, Instant::now());
        let mut was_ready = true;
        let mut tick = tokio::time::interval(spec.interval());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let Some(c) = consumer.upgrade() else {
                break;
            };
            let h = held.clone();
            let Ok(views) = tokio::task::spawn_blocking(move || look(&*c, &h)).await else {
                continue;
            };
            let verdict = match views {
                Ok(views) => detector.observe(Instant::now(), &views),
                Err(error) => {
                    // No assignment could be read: say so, but judge nothing.
                    tracing::debug!(consumer = spec.consumer, %error, "cannot read the assignment");
                    continue;
                }
            };
            report(&spec, condition, &health, &verdict, &mut was_ready);
        }
        health.set_ready(condition, Ok(()));
    })
}

/// [`spawn`] for a stage that pauses nothing on purpose: the watch runs until
/// the returned [`HeldWatch`] is dropped or stopped.
pub fn watch_while_held<C, K>(consumer: &Arc<K>, spec: WatchSpec, health: &Health) -> HeldWatch
where
    C: ConsumerContext + 'static,
    K: Consumer<C> + Send + Sync + 'static,
{
    let stop = CancellationToken::new();
    let task = spawn(
        Arc::clone(consumer),
        spec,
        HeldPartitions::default(),
        health.clone(),
        stop.clone(),
    );
    HeldWatch {
        stop: stop.drop_guard(),
        task,
    }
}

/// A watch started by [`watch_while_held`]: it stops when this is dropped;
/// [`HeldWatch::stop`] also waits for it to end.
#[derive(Debug)]
#[must_use = "the watch stops when this is dropped"]
pub struct HeldWatch {
    stop: tokio_util::sync::DropGuard,
    task: JoinHandle<()>,
}

impl HeldWatch {
    /// Stops the watch and waits until it has ended, and with it any look at
    /// the consumer in progress (which holds the consumer for up to a few
    /// broker round trips): a stage that calls this before it returns does
    /// not leave its consumer to be closed after it, by whichever thread
    /// drops the last handle.
    pub async fn stop(self) {
        drop(self.stop);
        let _ = self.task.await;
    }
}

/// Reads the assignment, positions and watermarks of `consumer`.
fn look<C: ConsumerContext, K: Consumer<C>>(
    consumer: &K,
    held: &HeldPartitions,
) -> Result<Vec<PartitionView>, rdkafka::error::KafkaError> {
    let assignment = consumer.assignment()?;
    if assignment.count() == 0 {
        return Ok(Vec::new());
    }
    let positions = consumer.position()?;
    // Before the application has received anything from a partition, its
    // position is unknown: it will start at the committed offset.
    let unknown = {
        let mut tpl = rdkafka::TopicPartitionList::new();
        for e in positions.elements() {
            if !matches!(e.offset(), Offset::Offset(_)) {
                tpl.add_partition(e.topic(), e.partition());
            }
        }
        tpl
    };
    let committed = if unknown.count() > 0 {
        consumer.committed_offsets(unknown, QUERY_TIMEOUT).ok()
    } else {
        None
    };
    let mut views = Vec::with_capacity(assignment.count());
    for e in assignment.elements() {
        let (topic, partition) = (e.topic(), e.partition());
        let offset_of = |tpl: &rdkafka::TopicPartitionList| {
            tpl.find_partition(topic, partition)
                .and_then(|p| match p.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                })
        };
        let held = held.contains(topic, partition);
        let watermarks = if held {
            None
        } else {
            consumer
                .fetch_watermarks(topic, partition, QUERY_TIMEOUT)
                .ok()
        };
        let next = offset_of(&positions)
            .or_else(|| committed.as_ref().and_then(offset_of))
            .or(watermarks.map(|(low, _)| low));
        views.push(PartitionView {
            topic: topic.to_owned(),
            partition,
            next,
            high: watermarks.map(|(_, high)| high),
            held,
        });
    }
    Ok(views)
}

fn report(
    spec: &WatchSpec,
    condition: &'static str,
    health: &Health,
    v: &StallVerdict,
    was_ready: &mut bool,
) {
    let labels = [
        (m::label::STAGE, spec.stage),
        (m::label::CONSUMER, spec.consumer),
    ];
    metrics::gauge!(m::CONSUMER_STALLED, &labels).set(v.stalled_for.as_secs_f64());
    metrics::gauge!(m::CONSUMER_UNASSIGNED, &labels).set(v.unassigned_for.as_secs_f64());
    metrics::gauge!(m::CONSUMER_LAG, &labels).set(v.lag as f64);
    metrics::gauge!(m::CONSUMER_ASSIGNED, &labels).set(v.assigned as f64);
    // Logged on the transitions; the gauges carry the state in between.
    match (&v.ready, *was_ready) {
        (Err(why), true) => {
            tracing::warn!(stage = spec.stage, consumer = spec.consumer, %why, "consumer is not consuming")
        }
        (Ok(()), false) => {
            tracing::info!(
                stage = spec.stage,
                consumer = spec.consumer,
                "consumer is consuming again"
            )
        }
        _ => {}
    }
    *was_ready = v.ready.is_ok();
    health.set_ready(condition, v.ready.clone());
}
