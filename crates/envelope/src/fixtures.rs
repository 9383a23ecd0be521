//! Records with plausible defaults, for tests, benches and examples: one
//! place that spells out every field of a [`Delivery`], so a test names only
//! the fields it is about and a new schema field is added here once. Pure
//! (no Kafka, no clock): times are passed in.

use crate::{Delivery, Subscription, ORDERING_UNORDERED};

/// An enabled, unordered subscription of `tenant` to `patterns` at `url`, four
/// in flight, its secret named `<tenant>-secret`, version 1.
pub fn subscription(id: &str, tenant: &str, patterns: &[&str], url: &str) -> Subscription {
    Subscription {
        subscription_id: id.to_owned(),
        tenant_id: tenant.to_owned(),
        url: url.to_owned(),
        event_types: patterns.iter().map(|p| (*p).to_owned()).collect(),
        secret_ref: format!("{tenant}-secret"),
        enabled: true,
        max_in_flight: 4,
        rate_limit_per_s: None,
        disabled_reason: None,
        disabled_at: None,
        ordering: ORDERING_UNORDERED.to_owned(),
        version: 1,
        updated_at: 1_764_000_000_000,
    }
}

/// Builds a [`Delivery`]: a first attempt (attempt 0, due when created) of an
/// `order.created` event with a `{}` JSON payload, every optional field empty.
///
/// ```
/// use hookline_envelope::fixtures::DeliveryBuilder;
/// let d = DeliveryBuilder::new("d-1", "acme", "s-1").at(1_000).attempt(2).build();
/// assert_eq!((d.tenant_id.as_str(), d.due_at, d.attempt), ("acme", 1_000, 2));
/// ```
#[derive(Debug, Clone)]
pub struct DeliveryBuilder(Delivery);

impl DeliveryBuilder {
    /// Delivery `delivery_id` of tenant `tenant_id` to `subscription_id`, all
    /// times at 0 (the Unix epoch) until [`at`](Self::at) or [`due_at`](Self::due_at).
    pub fn new(delivery_id: &str, tenant_id: &str, subscription_id: &str) -> Self {
        Self(Delivery {
            delivery_id: delivery_id.to_owned(),
            event_id: "e".to_owned(),
            tenant_id: tenant_id.to_owned(),
            subscription_id: subscription_id.to_owned(),
            event_type: "order.created".to_owned(),
            occurred_at: 0,
            content_type: "application/json".to_owned(),
            payload: b"{}".to_vec(),
            attributes: Default::default(),
            attempt: 0,
            created_at: 0,
            due_at: 0,
            first_attempt_at: None,
            last_attempt_at: None,
            last_outcome: None,
            policy_version: None,
            replay_of: None,
            traceparent: None,
            tracestate: None,
        })
    }

    /// Delivery of event `event_id` to `subscription_id`, its id derived from
    /// both as fan-out derives it ([`crate::delivery_id`]); otherwise as [`new`](Self::new).
    pub fn for_event(event_id: &str, tenant_id: &str, subscription_id: &str) -> Self {
        let delivery_id = crate::delivery_id(event_id, subscription_id);
        Self::new(&delivery_id, tenant_id, subscription_id).event_id(event_id)
    }

    /// Occurred, created and due at `ms` (since the Unix epoch).
    pub fn at(mut self, ms: i64) -> Self {
        self.0.occurred_at = ms;
        self.0.created_at = ms;
        self.0.due_at = ms;
        self
    }

    /// Due at `ms`, the other times unchanged.
    pub fn due_at(mut self, ms: i64) -> Self {
        self.0.due_at = ms;
        self
    }

    /// The event occurred at `ms`, the other times unchanged.
    pub fn occurred_at(mut self, ms: i64) -> Self {
        self.0.occurred_at = ms;
        self
    }

    pub fn event_id(mut self, event_id: &str) -> Self {
        self.0.event_id = event_id.to_owned();
        self
    }

    pub fn event_type(mut self, event_type: &str) -> Self {
        self.0.event_type = event_type.to_owned();
        self
    }

    pub fn payload(mut self, payload: &[u8]) -> Self {
        self.0.payload = payload.to_vec();
        self
    }

    /// `attempt` attempts already made (the first and last of them unset).
    pub fn attempt(mut self, attempt: i32) -> Self {
        self.0.attempt = attempt;
        self
    }

    /// `attempt` attempts already made, the first started at `first_ms`, the
    /// latest at `last_ms` and classified `outcome` (`http_503`, `timeout`, ...).
    pub fn attempted(mut self, attempt: i32, first_ms: i64, last_ms: i64, outcome: &str) -> Self {
        self.0.attempt = attempt;
        self.0.first_attempt_at = Some(first_ms);
        self.0.last_attempt_at = Some(last_ms);
        self.0.last_outcome = Some(outcome.to_owned());
        self
    }

    /// The event's attribute `name` set to `value`, the others kept.
    pub fn attribute(mut self, name: &str, value: &str) -> Self {
        self.0.attributes.insert(name.to_owned(), value.to_owned());
        self
    }

    /// Scheduled by retry policy `version`.
    pub fn policy_version(mut self, version: &str) -> Self {
        self.0.policy_version = Some(version.to_owned());
        self
    }

    /// Carrying the event's W3C `traceparent` (no `tracestate`).
    pub fn traceparent(mut self, traceparent: &str) -> Self {
        self.0.traceparent = Some(traceparent.to_owned());
        self
    }

    pub fn build(self) -> Delivery {
        self.0
    }
}
