//! The fanout stage (docs/design.md#fanout): consumes `events` in a consumer group, keeps
//! the subscription table live, and writes one `Delivery` per matching
//! subscription to `deliveries` in Kafka transactions, exactly once.
//! Undecodable or oversize events go to `events.quarantine` in the same
//! transaction; they never block a partition.

pub mod capacity;
pub mod cli;
pub mod config;
mod dedup;
mod events;
pub mod events_cli;
mod metrics;
mod read_past;
mod service;
pub mod transform;

use hookline_envelope::{TopicError, Topics};
use hookline_runtime::{ops::Ops, shutdown, subscriptions, topic_check, RuntimeError};
use tokio_util::sync::CancellationToken;

pub use config::{Config, FanoutArgs};

/// The stage name used in metrics and logs.
pub const STAGE: &str = "fanout";

/// Why the fanout service stopped.
#[derive(Debug, thiserror::Error)]
pub enum FanoutError {
    /// A shared adapter failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The topic prefix makes illegal topic names.
    #[error("invalid --topic-prefix: {0}")]
    Topics(#[from] TopicError),
    /// A blocking Kafka call could not be joined.
    #[error("internal task failed: {0}")]
    Join(String),
    /// A flag has a value that cannot work.
    #[error("invalid {flag}: {why}")]
    Config { flag: &'static str, why: String },
}

/// Runs fan-out until `shutdown` is cancelled: the batch in hand is committed,
/// then the consumer leaves its group.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), FanoutError> {
    let topics = Topics::with_prefix(&config.common.topic_prefix)?;
    config.fanout.bursts().map_err(|why| FanoutError::Config {
        flag: "--overflow-lanes / --overflow-route-window",
        why,
    })?;
    let ops = Ops::start(
        config
            .common
            .http_addr_or(hookline_runtime::config::default_port::FANOUT),
        STAGE,
    )
    .await?;
    metrics::describe();
    ops.health.set_ready(
        STAGE,
        Err("waiting for topics and the subscription table".into()),
    );
    // Draining commits the batch in hand; past the grace period the process
    // exits and the broker aborts the open transaction.
    let result = shutdown::within_grace(
        run_stage(&config, &topics, &ops, &shutdown),
        &shutdown,
        config.common.shutdown_grace,
        || ops.health.set_draining(),
    )
    .await
    .unwrap_or(Ok(()));
    ops.health.set_draining();
    ops.stop().await;
    result
}

async fn run_stage(
    config: &Config,
    topics: &Topics,
    ops: &Ops,
    shutdown: &CancellationToken,
) -> Result<(), FanoutError> {
    let mut needed = vec![
        topics.events(),
        topics.subscriptions(),
        topics.deliveries(),
        topics.strict(),
        topics.quarantine(),
    ];
    // The lanes a burst may be routed to (`hookline_core::burst`).
    let lanes: Vec<&str> = if config.fanout.bursts().is_ok_and(|b| b.enabled()) {
        topics.lanes().take(config.fanout.overflow_lanes).collect()
    } else {
        Vec::new()
    };
    needed.extend(&lanes);
    if !topic_check::wait_for_topics(
        &config.common,
        &needed,
        &topic_check::topics_hint(&config.common),
        &ops.health,
        STAGE,
        shutdown,
    )
    .await?
    {
        return Ok(());
    }
    if let Some(why) =
        topic_check::lanes_short_of(&config.common, topics.deliveries(), &lanes).await?
    {
        return Err(FanoutError::Config {
            flag: "--overflow-lanes / HOOKLINE_OVERFLOW_LANES",
            why,
        });
    }
    subscriptions::run_with_table(
        &config.common,
        topics.subscriptions(),
        STAGE,
        &ops.health,
        shutdown,
        |subs| async move {
            let fanout =
                service::FanoutLoop::new(config.clone(), topics.clone(), subs, ops.health.clone())
                    .await?;
            fanout.run(shutdown.clone()).await
        },
    )
    .await
    .map(|_| ())
}
