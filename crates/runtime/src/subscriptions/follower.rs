//! Follows the `subscriptions` topic into a [`SubscriptionTable`]
//! ([`crate::compacted`]). A record that cannot be used is counted by reason
//! (`not_avro`, `unknown_fingerprint`, `wrong_record`, `bad_datum`, `bad_key`,
//! `key_mismatch`, `bad_pattern`), logged with its coordinates and skipped; it
//! never stops the table, and it is never written anywhere (every replica
//! re-reads the whole table). Readiness turns on once every partition has
//! reached the high watermark it had when the follower started.

use std::{
    sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard},
    time::Duration,
};

use hookline_envelope::{decode, error_chain, Subscription};
use tokio::{sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use super::table::{Applied, LiveSubscription, SubscriptionTable};
use crate::{compacted, config::CommonArgs, health::Health, metric_names as m, RuntimeError};

const READINESS: &str = "subscriptions";

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
    let table = Arc::new(RwLock::new(SubscriptionTable::default()));
    let (caught_up, task) = compacted::follow(
        common,
        topic,
        &format!("hookline-{stage}-subscriptions"),
        READINESS,
        Sink {
            topic: topic.to_owned(),
            stage,
            table: Arc::clone(&table),
        },
        health,
        stop,
    )?;
    Ok((Subscriptions { table, caught_up }, task))
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

/// The subscription table as a [`compacted::Table`].
struct Sink {
    topic: String,
    stage: &'static str,
    table: Arc<RwLock<SubscriptionTable>>,
}

impl compacted::Table for Sink {
    /// A record that cannot be used is counted by reason, logged with its
    /// coordinates and skipped; it is deliberately not quarantined: every
    /// replica re-reads the compacted table from the start, so each would write
    /// it again on every start, forever. The fix is a corrected record (or a
    /// tombstone) under the same key.
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
        let len = self.len();
        metrics::gauge!(m::SUBSCRIPTIONS_LOADED, m::label::STAGE => stage).set(len as f64);
    }

    fn report_lag(&self, lag: i64) {
        metrics::gauge!(m::SUBSCRIPTIONS_LAG, m::label::STAGE => self.stage).set(lag as f64);
    }

    fn len(&self) -> usize {
        self.table.read().map(|t| t.len()).unwrap_or_default()
    }
}

impl Sink {
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
