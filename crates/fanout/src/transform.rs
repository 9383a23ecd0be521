//! One consumed `events` record in, the records fan-out writes out: one
//! `Delivery` per enabled, matching subscription of the event's own tenant, or
//! one `QuarantinedEvent` when the bytes cannot be used. Never panics on input.

use hookline_envelope::{
    decode_value, delivery_id, Delivery, DomainEvent, QuarantineReason, QuarantinedEvent,
    QuarantinedHeader, Unusable,
};
use hookline_runtime::subscriptions::LiveSubscription;
use std::sync::Arc;

/// A consumed record, borrowed from the Kafka message: the shared
/// [`hookline_envelope::SourceRecord`], so a quarantined event is built the same
/// way here as in the dispatcher.
pub use hookline_envelope::SourceRecord as Input;

/// Room for an event's fields around its payload when checking the raw size
/// before decoding.
const ENVELOPE_ALLOWANCE: usize = 64 * 1024;

/// What to write for one input.
#[derive(Debug)]
pub enum Output {
    /// One delivery per matching subscription (key: tenant).
    Deliveries(Vec<Delivery>),
    /// The event decoded, but no subscription wants it.
    Unmatched,
    /// The record cannot be used; keep it on the quarantine topic.
    Quarantine(Box<QuarantinedEvent>),
}

/// Fans one record out against `matching`, which returns the enabled
/// subscriptions of a tenant that want an event type.
pub fn fan_out(
    input: Input<'_>,
    headers: impl FnOnce() -> Vec<QuarantinedHeader>,
    matching: impl FnOnce(&str, &str) -> Vec<Arc<LiveSubscription>>,
    max_payload_bytes: usize,
    now_ms: i64,
) -> Output {
    let quarantine = |unusable: Unusable| {
        Output::Quarantine(Box::new(unusable.quarantine(&input, headers(), now_ms)))
    };
    if let Some(value) = input.value {
        if value.len() > max_payload_bytes.saturating_add(ENVELOPE_ALLOWANCE) {
            return quarantine(Unusable::new(
                QuarantineReason::PayloadTooLarge,
                format!(
                    "record of {} bytes exceeds the {max_payload_bytes}-byte payload cap",
                    value.len()
                ),
            ));
        }
    }
    let event: DomainEvent = match decode_value(input.value) {
        Ok(event) => event,
        Err(unusable) => return quarantine(unusable),
    };
    if event.payload.len() > max_payload_bytes {
        return quarantine(Unusable::new(
            QuarantineReason::PayloadTooLarge,
            format!(
                "payload of {} bytes exceeds the {max_payload_bytes}-byte cap (--max-payload-bytes)",
                event.payload.len()
            ),
        ));
    }
    let subs = matching(&event.tenant_id, &event.event_type);
    if subs.is_empty() {
        return Output::Unmatched;
    }
    let deliveries = subs
        .iter()
        .map(|sub| Delivery {
            delivery_id: delivery_id(&event.event_id, &sub.record.subscription_id),
            event_id: event.event_id.clone(),
            tenant_id: event.tenant_id.clone(),
            subscription_id: sub.record.subscription_id.clone(),
            event_type: event.event_type.clone(),
            occurred_at: event.occurred_at,
            content_type: event.content_type.clone(),
            payload: event.payload.clone(),
            attributes: event.attributes.clone(),
            attempt: 0,
            created_at: now_ms,
            due_at: now_ms,
            first_attempt_at: None,
            last_attempt_at: None,
            last_outcome: None,
            policy_version: None,
            replay_of: None,
        })
        .collect();
    Output::Deliveries(deliveries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookline_envelope::{encode, Subscription};
    use hookline_runtime::subscriptions::SubscriptionTable;

    fn event(tenant: &str, ty: &str, payload: usize) -> DomainEvent {
        DomainEvent {
            event_id: "evt-1".into(),
            tenant_id: tenant.into(),
            event_type: ty.into(),
            occurred_at: 1_700_000_000_000,
            content_type: "application/json".into(),
            payload: vec![b'x'; payload],
            attributes: [("trace".to_owned(), "abc".to_owned())].into(),
        }
    }

    fn table() -> SubscriptionTable {
        let mut t = SubscriptionTable::default();
        for (id, tenant, types, enabled) in [
            ("a-all", "acme", vec!["*"], true),
            ("a-inv", "acme", vec!["invoice.*"], true),
            ("a-off", "acme", vec!["*"], false),
            ("g-inv", "globex", vec!["invoice.paid"], true),
        ] {
            t.upsert(
                LiveSubscription::new(Subscription {
                    subscription_id: id.into(),
                    tenant_id: tenant.into(),
                    url: "https://example.com/h".into(),
                    event_types: types.into_iter().map(String::from).collect(),
                    secret_ref: "s".into(),
                    enabled,
                    max_in_flight: 1,
                    rate_limit_per_s: None,
                    version: 1,
                    updated_at: 0,
                })
                .unwrap(),
            );
        }
        t
    }

    fn run(value: Option<&[u8]>, cap: usize) -> Output {
        let t = table();
        fan_out(
            Input {
                topic: "events",
                partition: 2,
                offset: 41,
                key: Some(b"acme"),
                value,
            },
            || {
                vec![QuarantinedHeader {
                    name: "h".into(),
                    value: Some(b"v".to_vec()),
                }]
            },
            |tenant, ty| t.matching(tenant, ty),
            cap,
            5,
        )
    }

    #[test]
    fn one_delivery_per_enabled_matching_subscription_of_the_same_tenant() {
        let bytes = encode(&event("acme", "invoice.paid", 10));
        let Output::Deliveries(ds) = run(Some(&bytes), 1024) else {
            panic!("expected deliveries")
        };
        let subs: Vec<_> = ds.iter().map(|d| d.subscription_id.as_str()).collect();
        assert_eq!(subs, ["a-all", "a-inv"]);
        for d in &ds {
            assert_eq!(d.delivery_id, delivery_id("evt-1", &d.subscription_id));
            assert_eq!((d.attempt, d.created_at, d.due_at), (0, 5, 5));
            assert_eq!(d.tenant_id, "acme");
            assert_eq!(d.payload, vec![b'x'; 10]);
            assert_eq!(d.attributes.get("trace").map(String::as_str), Some("abc"));
        }
    }

    #[test]
    fn unmatched_events_are_reported() {
        let bytes = encode(&event("initech", "invoice.paid", 1));
        assert!(matches!(run(Some(&bytes), 1024), Output::Unmatched));
    }

    fn quarantined(out: Output) -> QuarantinedEvent {
        match out {
            Output::Quarantine(q) => *q,
            other => panic!("expected quarantine, got {other:?}"),
        }
    }

    #[test]
    fn bad_input_is_quarantined_with_reason_and_coordinates() {
        let q = quarantined(run(Some(b"{\"not\":\"avro\"}"), 1024));
        assert_eq!(q.reason, "not_avro");
        assert_eq!(
            (q.source_topic.as_str(), q.source_partition, q.source_offset),
            ("events", 2, 41)
        );
        assert_eq!(q.key.as_deref(), Some(&b"acme"[..]));
        assert_eq!(q.value, b"{\"not\":\"avro\"}");
        assert_eq!(q.headers.len(), 1);

        let mut unknown = encode(&event("acme", "a", 1));
        unknown[2] ^= 0xff;
        assert_eq!(
            quarantined(run(Some(&unknown), 1024)).reason,
            "unknown_fingerprint"
        );

        let mut truncated = encode(&event("acme", "a", 1));
        truncated.truncate(truncated.len() - 3);
        assert_eq!(quarantined(run(Some(&truncated), 1024)).reason, "bad_datum");

        let big = encode(&event("acme", "a", 2000));
        let q = quarantined(run(Some(&big), 1000));
        assert_eq!(q.reason, "payload_too_large");
        assert!(q.detail.contains("2000"), "{}", q.detail);

        assert_eq!(quarantined(run(None, 1000)).reason, "not_avro");
    }
}
