//! A 410 Gone disables its subscription: the subscription is written back
//! disabled (`disabled_reason = gone`, `disabled_at`, the next version) to the
//! `subscriptions` topic in the same transaction as the 410's dead letter, so
//! the two are written together or not at all. From then on its deliveries —
//! new ones, and those waiting in the tiers — are kept unattempted as dead
//! letters (`subscription_disabled`) for `replay` once it is enabled again.
//!
//! Until this replica's table shows the disabled version, it treats the
//! subscription as disabled all the same ([`Disabling::overrides`]), so the
//! deliveries behind the 410 are not attempted while the record travels. A
//! subscription already being disabled gets no second record.

use std::collections::HashMap;

use hookline_runtime::subscriptions::{self, DisabledReason, Subscriptions};

use crate::handoff::Disable;

/// The disables written by this replica that its table may not show yet:
/// subscription id → the version written.
#[derive(Debug, Default)]
pub(super) struct Disabling {
    written: HashMap<String, i64>,
}

impl Disabling {
    /// The record that disables the subscription of `delivery`, which answered
    /// 410, at `now_ms`; `None` when it is disabled already (or being disabled),
    /// deleted, or no longer the delivery's tenant's.
    pub(super) fn on_gone(
        &mut self,
        table: &Subscriptions,
        delivery: (&str, &str),
        topic: &str,
        now_ms: i64,
    ) -> Option<Box<Disable>> {
        let (subscription_id, tenant_id) = delivery;
        let live = table.get(subscription_id)?;
        let record = &live.record;
        if !record.enabled
            || record.tenant_id != tenant_id
            || self.overrides(subscription_id, record.version)
        {
            return None;
        }
        let reason = DisabledReason::Gone;
        let record = subscriptions::disabled(record, reason, now_ms);
        self.written
            .insert(subscription_id.to_owned(), record.version);
        Some(Box::new(Disable {
            topic: topic.to_owned(),
            record,
            reason,
        }))
    }

    /// Whether the subscription at `version` in the table is one this replica
    /// has disabled at a later version: the table has not caught up yet.
    pub(super) fn overrides(&self, subscription_id: &str, version: i64) -> bool {
        self.written
            .get(subscription_id)
            .is_some_and(|&written| version < written)
    }

    /// Forgets the disables the table shows (or has passed), or whose
    /// subscription is gone from it.
    pub(super) fn prune(&mut self, table: &Subscriptions) {
        self.written.retain(|id, written| {
            table
                .get(id)
                .is_some_and(|live| live.record.version < *written)
        });
    }
}
