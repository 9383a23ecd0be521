//! The circuit breakers (and strict heads) the replicas share:
//! `subscriptions.health` followed
//! from the beginning ([`hookline_runtime::compacted`]) before the dispatcher
//! fetches anything, then live. What it reads waits here until the engine
//! takes it (every tick) and adopts it (`Machine::adopt`); what a
//! breaker of this replica does goes the other way, in the engine's
//! transactions (`engine/mod.rs`). See docs/design.md#circuit-breaker.

use std::sync::{Arc, Mutex};

use hookline_core::Shared;
use hookline_dispatch_core::health::{self, HeldHead};
use hookline_envelope::{decode, error_chain, EndpointHealth};
use hookline_runtime::{compacted, config::CommonArgs, health::Health, RuntimeError};
use tokio::{sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::events;

/// The `/readyz` check that waits for the shared breakers.
pub(crate) const READINESS: &str = "breakers";

/// What the follower read and the engine has not taken yet.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedBreakers {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    read: Vec<(String, Shared, Option<HeldHead>)>,
    records: usize,
}

impl SharedBreakers {
    /// The states read since the last call, in topic order.
    pub(crate) fn take(&self) -> Vec<(String, Shared, Option<HeldHead>)> {
        std::mem::take(&mut self.lock().read)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl compacted::Table for SharedBreakers {
    fn apply(&self, key: Option<&[u8]>, payload: Option<&[u8]>, partition: i32, offset: i64) {
        let unusable = |why: &dyn std::fmt::Display| {
            events::UnusableBreakerRecord {
                partition,
                offset,
                why,
            }
            .emit();
        };
        let Some(key) = key.and_then(|k| std::str::from_utf8(k).ok()) else {
            return unusable(&"missing or non-UTF-8 key");
        };
        // A tombstone forgets nothing a replica holds: its breaker closes by
        // its own probe, or by a later record.
        let Some(bytes) = payload else { return };
        let record: EndpointHealth = match decode(bytes) {
            Ok(r) => r,
            Err(e) => return unusable(&error_chain(&e)),
        };
        if record.subscription_id != key {
            return unusable(&format!(
                "key {key} but subscription_id {}",
                record.subscription_id
            ));
        }
        let mut inner = self.lock();
        inner.records += 1;
        inner.read.push((
            record.subscription_id.clone(),
            health::shared(&record),
            health::head(&record),
        ));
    }

    fn report_lag(&self, _lag: i64) {}

    fn len(&self) -> usize {
        self.lock().records
    }
}

/// Starts following `topic`; `/readyz` reports [`READINESS`] until it has
/// caught up. The receiver turns `true` then.
pub(crate) fn follow(
    common: &CommonArgs,
    topic: &str,
    health: &Health,
    stop: CancellationToken,
) -> Result<(SharedBreakers, watch::Receiver<bool>, JoinHandle<()>), RuntimeError> {
    let shared = SharedBreakers::default();
    let (caught_up, task) = compacted::follow(
        common,
        topic,
        "hookline-dispatcher-breakers",
        READINESS,
        shared.clone(),
        Some(health.clone()),
        stop,
    )?;
    Ok((shared, caught_up, task))
}
