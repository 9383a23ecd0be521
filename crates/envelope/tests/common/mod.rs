//! Proptest strategies for every contract record, shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;

use hookline_envelope::{
    AttemptRecord, DeadLetter, Delivery, DomainEvent, QuarantinedEvent, QuarantinedHeader,
    ReplayOf, Subscription,
};
use proptest::{collection::vec, option, prelude::*};

fn text() -> impl Strategy<Value = String> {
    // Mostly short ASCII ids, sometimes arbitrary Unicode.
    prop_oneof![3 => "[a-z0-9_.-]{0,16}", 1 => any::<String>()]
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..128)
}

fn attributes() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(text(), text(), 0..4)
}

prop_compose! {
    pub fn domain_event()(
        event_id in text(), tenant_id in text(), event_type in text(),
        occurred_at in any::<i64>(), content_type in text(), payload in bytes(),
        attributes in attributes(),
    ) -> DomainEvent {
        DomainEvent { event_id, tenant_id, event_type, occurred_at, content_type, payload, attributes }
    }
}

prop_compose! {
    pub fn subscription()(
        subscription_id in text(), tenant_id in text(), url in text(),
        event_types in vec(text(), 0..4), secret_ref in text(), enabled in any::<bool>(),
        max_in_flight in any::<i32>(),
        // Finite: NaN never equals itself, so it cannot take part in a round-trip assertion.
        rate_limit_per_s in option::of(-1e12f64..1e12),
        disabled_reason in option::of(text()), disabled_at in option::of(any::<i64>()),
        ordering in text(),
        version in any::<i64>(), updated_at in any::<i64>(),
    ) -> Subscription {
        Subscription {
            subscription_id, tenant_id, url, event_types, secret_ref, enabled,
            max_in_flight, rate_limit_per_s, disabled_reason, disabled_at, ordering, version,
            updated_at,
        }
    }
}

prop_compose! {
    fn replay_of()(topic in text(), partition in any::<i32>(), offset in any::<i64>()) -> ReplayOf {
        ReplayOf { topic, partition, offset }
    }
}

prop_compose! {
    fn delivery_ids()(delivery_id in text(), event_id in text(), tenant_id in text(),
        subscription_id in text(), event_type in text()) -> [String; 5] {
        [delivery_id, event_id, tenant_id, subscription_id, event_type]
    }
}

prop_compose! {
    fn delivery_times()(occurred_at in any::<i64>(), created_at in any::<i64>(), due_at in any::<i64>(),
        first_attempt_at in option::of(any::<i64>()), last_attempt_at in option::of(any::<i64>()))
        -> (i64, i64, i64, Option<i64>, Option<i64>) {
        (occurred_at, created_at, due_at, first_attempt_at, last_attempt_at)
    }
}

prop_compose! {
    pub fn delivery()(
        ids in delivery_ids(), times in delivery_times(), content_type in text(),
        payload in bytes(), attributes in attributes(), attempt in any::<i32>(),
        last_outcome in option::of(text()), policy_version in option::of(text()),
        replay_of in option::of(replay_of()), trace in option::of((text(), option::of(text()))),
    ) -> Delivery {
        let [delivery_id, event_id, tenant_id, subscription_id, event_type] = ids;
        let (occurred_at, created_at, due_at, first_attempt_at, last_attempt_at) = times;
        Delivery {
            delivery_id, event_id, tenant_id, subscription_id, event_type, occurred_at,
            content_type, payload, attributes, attempt, created_at, due_at, first_attempt_at,
            last_attempt_at, last_outcome, policy_version, replay_of,
            traceparent: trace.as_ref().map(|t| t.0.clone()),
            tracestate: trace.and_then(|t| t.1),
        }
    }
}

prop_compose! {
    pub fn dead_letter()(
        delivery in delivery(), reason in text(), last_status in option::of(any::<i32>()),
        dead_at in any::<i64>(), policy_version in text(), detail in option::of(text()),
    ) -> DeadLetter {
        DeadLetter { delivery, reason, last_status, dead_at, policy_version, detail }
    }
}

prop_compose! {
    fn header()(name in text(), value in option::of(bytes())) -> QuarantinedHeader {
        QuarantinedHeader { name, value }
    }
}

prop_compose! {
    pub fn quarantined_event()(
        key in option::of(bytes()), value in bytes(), headers in vec(header(), 0..4),
        reason in text(), detail in text(), source_topic in text(),
        source_partition in any::<i32>(), source_offset in any::<i64>(),
        quarantined_at in any::<i64>(),
    ) -> QuarantinedEvent {
        QuarantinedEvent {
            key, value, headers, reason, detail, source_topic, source_partition,
            source_offset, quarantined_at,
        }
    }
}

prop_compose! {
    pub fn attempt_record()(
        ids in delivery_ids(), kind in text(), outcome in text(), attempt in any::<i32>(),
        at in any::<i64>(), duration_ms in option::of(any::<i64>()),
        classification in option::of(text()), status in option::of(any::<i32>()),
        detail in option::of(text()), tiers in (option::of(text()), option::of(text())),
        next_due_at in option::of(any::<i64>()), replay_of in option::of(replay_of()),
        trace_id in option::of(text()), policy_version in option::of(text()),
        created_at in option::of(any::<i64>()),
    ) -> AttemptRecord {
        let [delivery_id, event_id, tenant_id, subscription_id, event_type] = ids;
        AttemptRecord {
            delivery_id, event_id, tenant_id, subscription_id, event_type, kind, outcome,
            attempt, at, duration_ms, classification, status, detail, from_tier: tiers.0,
            tier: tiers.1, next_due_at, replay_of, trace_id, policy_version, created_at,
        }
    }
}

/// A fixed, fully populated example of each record.
pub fn sample_event() -> DomainEvent {
    DomainEvent {
        event_id: "evt_1".into(),
        tenant_id: "tenant_a".into(),
        event_type: "invoice.paid".into(),
        occurred_at: 1_700_000_000_000,
        content_type: "application/json".into(),
        payload: br#"{"amount":42}"#.to_vec(),
        attributes: BTreeMap::from([("source".into(), "billing".into())]),
    }
}

pub fn sample_subscription() -> Subscription {
    Subscription {
        subscription_id: "sub_1".into(),
        tenant_id: "tenant_a".into(),
        url: "https://example.com/hooks".into(),
        event_types: vec!["invoice.*".into(), "customer.created".into()],
        secret_ref: "tenant_a/sub_1".into(),
        enabled: true,
        max_in_flight: 1,
        rate_limit_per_s: Some(12.5),
        disabled_reason: None,
        disabled_at: None,
        ordering: "unordered".into(),
        version: 7,
        updated_at: 1_700_000_000_001,
    }
}

pub fn sample_delivery() -> Delivery {
    let e = sample_event();
    Delivery {
        delivery_id: hookline_envelope::delivery_id(&e.event_id, "sub_1"),
        event_id: e.event_id,
        tenant_id: e.tenant_id,
        subscription_id: "sub_1".into(),
        event_type: e.event_type,
        occurred_at: e.occurred_at,
        content_type: e.content_type,
        payload: e.payload,
        attributes: e.attributes,
        attempt: 2,
        created_at: 1_700_000_000_100,
        due_at: 1_700_000_060_100,
        first_attempt_at: Some(1_700_000_000_200),
        last_attempt_at: Some(1_700_000_010_200),
        last_outcome: Some("http_503".into()),
        policy_version: Some("ladder-v1".into()),
        replay_of: Some(ReplayOf {
            topic: "deliveries.dlq".into(),
            partition: 3,
            offset: 12_345,
        }),
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("congo=t61rcWkgMzE".into()),
    }
}

pub fn sample_dead_letter() -> DeadLetter {
    DeadLetter {
        delivery: sample_delivery(),
        reason: "exhausted".into(),
        last_status: Some(503),
        dead_at: 1_700_000_100_000,
        policy_version: "ladder-v1".into(),
        detail: Some("12 attempts over 2h".into()),
    }
}

pub fn sample_quarantined() -> QuarantinedEvent {
    QuarantinedEvent {
        key: Some(b"tenant_a".to_vec()),
        value: b"{not avro".to_vec(),
        headers: vec![
            QuarantinedHeader {
                name: "traceparent".into(),
                value: Some(b"00-abc-01".to_vec()),
            },
            QuarantinedHeader {
                name: "empty".into(),
                value: None,
            },
        ],
        reason: "not_avro".into(),
        detail: "bad single-object magic 7b 6e".into(),
        source_topic: "events".into(),
        source_partition: 0,
        source_offset: 99,
        quarantined_at: 1_700_000_000_500,
    }
}

pub fn sample_attempt() -> AttemptRecord {
    AttemptRecord {
        delivery_id: "msg_20e1242c711154e9a82e4856a8cc2c18".into(),
        event_id: "evt_1".into(),
        tenant_id: "tenant_a".into(),
        subscription_id: "sub_1".into(),
        event_type: "invoice.paid".into(),
        kind: AttemptRecord::ATTEMPTED.into(),
        outcome: "retried".into(),
        attempt: 2,
        at: 1_700_000_010_000,
        duration_ms: Some(153),
        classification: Some("http_503".into()),
        status: Some(503),
        detail: Some("upstream unavailable".into()),
        from_tier: Some("retry-10s".into()),
        tier: Some("retry-1m".into()),
        next_due_at: Some(1_700_000_070_153),
        replay_of: Some(ReplayOf {
            topic: "deliveries.dlq".into(),
            partition: 3,
            offset: 17,
        }),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        policy_version: Some("ladder-v1".into()),
        created_at: Some(1_700_000_000_000),
    }
}
