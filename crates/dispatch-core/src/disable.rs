//! A 410 Gone disables its subscription: the subscription is written back
//! disabled (`disabled_reason = gone`, `disabled_at`, the next version) to the
//! `subscriptions` topic in the same transaction as the 410's dead letter, so
//! the two are written together or not at all. A breaker open for
//! `--breaker-disable-after` does the same (`breaker_open`), with the delivery
//! it parks. From then on its deliveries —
//! new ones, and those waiting in the tiers — are kept unattempted as dead
//! letters (`subscription_disabled`) for `replay` once it is enabled again.
//!
//! Until this replica's table shows the disabled version, it treats the
//! subscription as disabled all the same ([`Disabling::overrides`]), so the
//! deliveries behind the 410 are not attempted while the record travels. A
//! subscription already being disabled gets no second record.

use std::collections::HashMap;

use hookline_core::{DeadLetterReason, RejectReason};
use hookline_envelope::{
    subscription_state::{self, DisabledReason},
    Subscription,
};

use crate::handoff::{Disable, Handoff, Written};

/// The disables written by this replica that its table may not show yet:
/// subscription id → the version written.
#[derive(Debug, Default)]
pub struct Disabling {
    written: HashMap<String, i64>,
}

impl Disabling {
    /// The record that disables the subscription of `delivery` (its id and
    /// tenant) for `reason` at `now_ms`; `None` when it is disabled already (or
    /// being disabled), deleted, or no longer the delivery's tenant's.
    pub fn on_disable(
        &mut self,
        live: Option<&Subscription>,
        delivery: (&str, &str),
        reason: DisabledReason,
        topic: &str,
        now_ms: i64,
    ) -> Option<Box<Disable>> {
        let (subscription_id, tenant_id) = delivery;
        let record = live?;
        if !record.enabled
            || record.tenant_id != tenant_id
            || self.overrides(subscription_id, record.version)
        {
            return None;
        }
        let record = subscription_state::disabled(record, reason, now_ms);
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
    pub fn overrides(&self, subscription_id: &str, version: i64) -> bool {
        self.written
            .get(subscription_id)
            .is_some_and(|&written| version < written)
    }

    /// Forgets the disables the table shows (or has passed), or whose
    /// subscription is gone from it; `version_of` is the table's version of a
    /// subscription.
    pub fn prune(&mut self, version_of: impl Fn(&str) -> Option<i64>) {
        self.written
            .retain(|id, written| version_of(id).is_some_and(|version| version < *written));
    }

    /// The dead letter in `handoff` takes its subscription with it: the record
    /// that disables the subscription (`live`, as the table has it) for
    /// `reason` is written in the same transaction. A strict subscription's
    /// breaker open too long does this with its head's dead letter.
    pub fn disable_with(
        &mut self,
        handoff: &mut Handoff,
        live: Option<&Subscription>,
        reason: DisabledReason,
        (topic, now_ms): (&str, i64),
    ) {
        if let Written::Dead {
            subscription_id,
            tenant_id,
            ..
        } = &handoff.written
        {
            handoff.disable =
                self.on_disable(live, (subscription_id, tenant_id), reason, topic, now_ms);
        }
    }

    /// A 410's dead letter takes its subscription with it; any other hand-off
    /// is left as it is.
    pub fn disable_if_gone(
        &mut self,
        handoff: &mut Handoff,
        live: Option<&Subscription>,
        (topic, now_ms): (&str, i64),
    ) {
        if matches!(
            handoff.written,
            Written::Dead {
                reason: DeadLetterReason::Rejected(RejectReason::Gone),
                ..
            }
        ) {
            self.disable_with(handoff, live, DisabledReason::Gone, (topic, now_ms));
        }
    }

    /// The subscription of a dead letter, to look up before
    /// [`disable_with`](Self::disable_with) or [`disable_if_gone`](Self::disable_if_gone).
    pub fn dead_letter_subscription(handoff: &Handoff) -> Option<&str> {
        match &handoff.written {
            Written::Dead {
                subscription_id, ..
            } => Some(subscription_id),
            _ => None,
        }
    }
}
