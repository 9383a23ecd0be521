//! The in-memory subscription table: the latest version of every subscription,
//! indexed by tenant, with each subscription's event-type filter compiled once.
//! Applying a record never fails the table: bad records are reported and skipped.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use hookline_core::matching::{EventTypeFilter, PatternError};
use hookline_envelope::Subscription;

/// A subscription with its compiled filter.
#[derive(Debug)]
pub struct LiveSubscription {
    /// The record as last written.
    pub record: Subscription,
    /// Its `event_types`, compiled.
    pub filter: EventTypeFilter,
}

impl LiveSubscription {
    /// Compiles a record's filter; a record whose patterns do not parse is refused.
    pub fn new(record: Subscription) -> Result<Self, PatternError> {
        let filter = EventTypeFilter::parse(&record.event_types)?;
        Ok(Self { record, filter })
    }

    /// Whether an event of `event_type` is for this subscription. A disabled one still
    /// wants it: fan-out makes the delivery, and the dispatcher keeps it (a dead letter
    /// with reason `subscription_disabled`) for `replay` once the subscription is enabled
    /// again, so nothing published while it is disabled is lost.
    pub fn wants(&self, event_type: &str) -> bool {
        self.filter.matches(event_type)
    }
}

/// What applying one record did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A new subscription or a newer version of one.
    Upserted,
    /// A tombstone removed a subscription.
    Deleted,
    /// A tombstone for a subscription the table did not have.
    DeletedUnknown,
    /// An older version than the one held; ignored.
    Stale { held: i64, offered: i64 },
}

/// The table itself: by id, and by tenant in id order (deterministic fan-out order).
#[derive(Debug, Default)]
pub struct SubscriptionTable {
    by_id: HashMap<String, Arc<LiveSubscription>>,
    by_tenant: HashMap<String, BTreeMap<String, Arc<LiveSubscription>>>,
}

impl SubscriptionTable {
    /// Applies an upsert. A lower version than the one held is ignored (the
    /// highest version wins); an equal one replaces it (the log's later write).
    pub fn upsert(&mut self, sub: LiveSubscription) -> Applied {
        let id = sub.record.subscription_id.clone();
        if let Some(held) = self.by_id.get(&id) {
            if held.record.version > sub.record.version {
                return Applied::Stale {
                    held: held.record.version,
                    offered: sub.record.version,
                };
            }
        }
        self.remove(&id);
        let sub = Arc::new(sub);
        self.by_tenant
            .entry(sub.record.tenant_id.clone())
            .or_default()
            .insert(id.clone(), Arc::clone(&sub));
        self.by_id.insert(id, sub);
        Applied::Upserted
    }

    /// Applies a tombstone for `id`.
    pub fn delete(&mut self, id: &str) -> Applied {
        if self.remove(id) {
            Applied::Deleted
        } else {
            Applied::DeletedUnknown
        }
    }

    fn remove(&mut self, id: &str) -> bool {
        let Some(old) = self.by_id.remove(id) else {
            return false;
        };
        if let Some(subs) = self.by_tenant.get_mut(&old.record.tenant_id) {
            subs.remove(id);
            if subs.is_empty() {
                self.by_tenant.remove(&old.record.tenant_id);
            }
        }
        true
    }

    /// The subscription with this id, enabled or not.
    pub fn get(&self, id: &str) -> Option<Arc<LiveSubscription>> {
        self.by_id.get(id).cloned()
    }

    /// Subscriptions of `tenant` whose filter matches `event_type`, enabled or not
    /// (see [`LiveSubscription::wants`]), in id order. Never another tenant's.
    pub fn matching(&self, tenant: &str, event_type: &str) -> Vec<Arc<LiveSubscription>> {
        self.by_tenant
            .get(tenant)
            .map(|subs| {
                subs.values()
                    .filter(|s| s.wants(event_type))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every subscription, by tenant then id.
    pub fn all(&self) -> Vec<Arc<LiveSubscription>> {
        let mut tenants: Vec<_> = self.by_tenant.iter().collect();
        tenants.sort_by(|a, b| a.0.cmp(b.0));
        tenants
            .into_iter()
            .flat_map(|(_, subs)| subs.values().cloned())
            .collect()
    }

    /// How many subscriptions are held.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(id: &str, tenant: &str, types: &[&str], version: i64) -> LiveSubscription {
        LiveSubscription::new(Subscription {
            subscription_id: id.into(),
            tenant_id: tenant.into(),
            url: format!("https://{tenant}.example/hook"),
            event_types: types.iter().map(|s| s.to_string()).collect(),
            secret_ref: "s".into(),
            enabled: true,
            max_in_flight: 1,
            rate_limit_per_s: None,
            disabled_reason: None,
            disabled_at: None,
            ordering: "unordered".into(),
            version,
            updated_at: 0,
        })
        .unwrap()
    }

    #[test]
    fn matches_only_the_events_own_tenant() {
        let mut t = SubscriptionTable::default();
        t.upsert(sub("a1", "acme", &["invoice.*"], 1));
        t.upsert(sub("g1", "globex", &["invoice.paid"], 1));
        let ids = |v: Vec<Arc<LiveSubscription>>| {
            v.iter()
                .map(|s| s.record.subscription_id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(t.matching("acme", "invoice.paid")), vec!["a1"]);
        assert_eq!(ids(t.matching("globex", "invoice.paid")), vec!["g1"]);
        assert!(t.matching("globex", "invoice.voided").is_empty());
        assert!(t.matching("initech", "invoice.paid").is_empty());
    }

    #[test]
    fn disabled_subscriptions_still_match_so_their_events_are_kept() {
        let mut t = SubscriptionTable::default();
        let mut s = sub("a1", "acme", &["x.*"], 1);
        s.record.enabled = false;
        t.upsert(s);
        assert_eq!(t.matching("acme", "x.y").len(), 1);
        assert!(t.matching("acme", "z").is_empty());
        assert!(t.get("a1").is_some());
    }

    #[test]
    fn highest_version_wins_and_tenant_moves_are_reindexed() {
        let mut t = SubscriptionTable::default();
        assert_eq!(t.upsert(sub("s", "acme", &["a"], 2)), Applied::Upserted);
        assert_eq!(
            t.upsert(sub("s", "acme", &["b"], 1)),
            Applied::Stale {
                held: 2,
                offered: 1
            }
        );
        assert_eq!(t.matching("acme", "a").len(), 1);
        assert_eq!(t.upsert(sub("s", "globex", &["a"], 3)), Applied::Upserted);
        assert!(t.matching("acme", "a").is_empty());
        assert_eq!(t.matching("globex", "a").len(), 1);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn tombstones_remove() {
        let mut t = SubscriptionTable::default();
        t.upsert(sub("s", "acme", &["a"], 1));
        assert_eq!(t.delete("s"), Applied::Deleted);
        assert_eq!(t.delete("s"), Applied::DeletedUnknown);
        assert!(t.is_empty());
        assert!(t.matching("acme", "a").is_empty());
    }
}
