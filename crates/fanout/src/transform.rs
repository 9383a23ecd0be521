//! One consumed `events` record in, the records fan-out writes out: one
//! `Delivery` per matching subscription of the event's own tenant (a disabled one
//! too: the dispatcher keeps its deliveries as dead letters for replay), or
//! one `QuarantinedEvent` when the bytes cannot be used or repeat an event_id
//! with another payload, or nothing for a same-payload duplicate. Never panics
//! on input.

use hookline_core::{
    admission::{Admission, Fingerprint, KeyHash, PayloadMatch},
    TraceContext,
};
use hookline_envelope::{
    decode_value, delivery_id, Delivery, DomainEvent, QuarantineReason, QuarantinedEvent,
    QuarantinedHeader, Unusable,
};
use hookline_runtime::subscriptions::LiveSubscription;
use sha2::{Digest, Sha256};
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
    /// One delivery per matching subscription (key: tenant), with where it goes.
    Deliveries(Vec<Routed>),
    /// The event decoded, but no subscription wants it.
    Unmatched,
    /// The record cannot be used; keep it on the quarantine topic.
    Quarantine(Box<QuarantinedEvent>),
    /// Its (tenant_id, event_id) appeared within the admission window.
    Duplicate(Duplicate),
}

/// A duplicate within the admission window.
#[derive(Debug)]
pub enum Duplicate {
    /// The same payload as the previous record of the id: nothing to write.
    Same,
    /// Another payload under the same id: kept on the quarantine topic, never dropped.
    Changed(Box<QuarantinedEvent>),
}

/// The event a record carries, if fan-out can use it: the one test, shared by
/// the live loop and the admission window's rebuild, of which records the
/// window sees.
pub fn usable_event(
    value: Option<&[u8]>,
    max_payload_bytes: usize,
) -> Result<DomainEvent, Unusable> {
    if let Some(value) = value {
        if value.len() > max_payload_bytes.saturating_add(ENVELOPE_ALLOWANCE) {
            return Err(Unusable::new(
                QuarantineReason::PayloadTooLarge,
                format!(
                    "record of {} bytes exceeds the {max_payload_bytes}-byte payload cap",
                    value.len()
                ),
            ));
        }
    }
    let event: DomainEvent = decode_value(value)?;
    if event.payload.len() > max_payload_bytes {
        return Err(Unusable::new(
            QuarantineReason::PayloadTooLarge,
            format!(
                "payload of {} bytes exceeds the {max_payload_bytes}-byte cap (--max-payload-bytes)",
                event.payload.len()
            ),
        ));
    }
    Ok(event)
}

/// The admission window's view of an event: a 128-bit hash of (tenant_id,
/// event_id) and a 64-bit fingerprint of everything else a delivery carries.
/// SHA-256 (truncated), so that no tenant can craft an id that collides with
/// another tenant's; every field is length-prefixed, so no two different
/// events hash the same input.
pub fn admission_key(event: &DomainEvent) -> (KeyHash, Fingerprint) {
    fn field(h: &mut Sha256, bytes: &[u8]) {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    let mut key = Sha256::new();
    key.update(b"hookline.admission.key.v1");
    field(&mut key, event.tenant_id.as_bytes());
    field(&mut key, event.event_id.as_bytes());
    let key = key.finalize();
    let mut print = Sha256::new();
    print.update(b"hookline.admission.payload.v1");
    field(&mut print, event.event_type.as_bytes());
    print.update(event.occurred_at.to_le_bytes());
    field(&mut print, event.content_type.as_bytes());
    field(&mut print, &event.payload);
    print.update((event.attributes.len() as u64).to_le_bytes());
    for (name, value) in &event.attributes {
        field(&mut print, name.as_bytes());
        field(&mut print, value.as_bytes());
    }
    let print = print.finalize();
    let word = |bytes: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    (
        KeyHash([word(&key, 0), word(&key, 8)]),
        Fingerprint(word(&print, 0)),
    )
}

/// A delivery and the queue it is written to: `deliveries`, or, for a strictly
/// ordered subscription (`ordering = strict`), `deliveries.strict`, where one in
/// backoff holds the later ones behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    pub delivery: Delivery,
    pub strict: bool,
    /// Its subscription starts one at a time (`max_in_flight` 1, or strict):
    /// never routed to an overflow lane at fanout (`hookline_core::burst`).
    pub ordered: bool,
}

/// A record judged: the event it carries with the admission window's verdict,
/// or why it cannot be used (then the window never saw it). Judged when the
/// record is read, in offset order, whoever fans it out later.
#[derive(Debug)]
pub enum Judged {
    Event(Box<DomainEvent>, Admission),
    Unusable(Unusable),
}

/// Decodes `value` and, for a usable event, asks `admit` (the admission window).
pub fn judge(
    value: Option<&[u8]>,
    max_payload_bytes: usize,
    admit: impl FnOnce(&DomainEvent) -> Admission,
) -> Judged {
    match usable_event(value, max_payload_bytes) {
        Ok(event) => {
            let admission = admit(&event);
            Judged::Event(Box::new(event), admission)
        }
        Err(unusable) => Judged::Unusable(unusable),
    }
}

/// Fans one record out against `matching`, which returns the subscriptions of a
/// tenant that want an event type, after `admit` (the admission window) has
/// decided on the usable event: [`judge`] then [`fan_out_judged`].
pub fn fan_out(
    input: Input<'_>,
    trace: Option<&TraceContext>,
    headers: impl FnOnce() -> Vec<QuarantinedHeader>,
    matching: impl FnOnce(&str, &str) -> Vec<Arc<LiveSubscription>>,
    admit: impl FnOnce(&DomainEvent) -> Admission,
    max_payload_bytes: usize,
    now_ms: i64,
) -> Output {
    let judged = judge(input.value, max_payload_bytes, admit);
    fan_out_judged(input, &judged, trace, headers, matching, now_ms)
}

/// Fans out a record already [`judge`]d.
pub fn fan_out_judged(
    input: Input<'_>,
    judged: &Judged,
    trace: Option<&TraceContext>,
    headers: impl FnOnce() -> Vec<QuarantinedHeader>,
    matching: impl FnOnce(&str, &str) -> Vec<Arc<LiveSubscription>>,
    now_ms: i64,
) -> Output {
    let quarantined =
        |unusable: &Unusable| Box::new(unusable.quarantine(&input, headers(), now_ms));
    let (event, admission) = match judged {
        Judged::Event(event, admission) => (event, *admission),
        Judged::Unusable(unusable) => return Output::Quarantine(quarantined(unusable)),
    };
    match admission {
        Admission::Admit => {}
        Admission::Duplicate(PayloadMatch::Same) => return Output::Duplicate(Duplicate::Same),
        Admission::Duplicate(PayloadMatch::Changed) => {
            return Output::Duplicate(Duplicate::Changed(quarantined(&Unusable::new(
                QuarantineReason::DuplicateChangedPayload,
                format!(
                    "event_id `{}` of tenant `{}` appeared on this partition within the \
                     duplicate-admission window (--dedup-window) with another payload; \
                     this record was not fanned out",
                    event.event_id, event.tenant_id
                ),
            ))))
        }
    }
    let subs = matching(&event.tenant_id, &event.event_type);
    if subs.is_empty() {
        return Output::Unmatched;
    }
    let deliveries = subs
        .iter()
        .map(|sub| Routed {
            strict: sub.record.is_strict(),
            ordered: sub.record.is_strict() || sub.record.max_in_flight <= 1,
            delivery: Delivery {
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
                traceparent: trace.map(|t| t.traceparent.clone()),
                tracestate: trace.and_then(|t| t.tracestate.clone()),
            },
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
            let ordering = if id == "a-inv" { "strict" } else { "unordered" };
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
                    disabled_reason: None,
                    disabled_at: None,
                    ordering: ordering.into(),
                    version: 1,
                    updated_at: 0,
                })
                .unwrap(),
            );
        }
        t
    }

    fn run(value: Option<&[u8]>, cap: usize) -> Output {
        run_admitted(value, cap, Admission::Admit)
    }

    fn run_admitted(value: Option<&[u8]>, cap: usize, admission: Admission) -> Output {
        run_traced(value, cap, admission, None)
    }

    fn run_traced(
        value: Option<&[u8]>,
        cap: usize,
        admission: Admission,
        trace: Option<&TraceContext>,
    ) -> Output {
        let t = table();
        fan_out(
            Input {
                topic: "events",
                partition: 2,
                offset: 41,
                key: Some(b"acme"),
                value,
            },
            trace,
            || {
                vec![QuarantinedHeader {
                    name: "h".into(),
                    value: Some(b"v".to_vec()),
                }]
            },
            |tenant, ty| t.matching(tenant, ty),
            |_| admission,
            cap,
            5,
        )
    }

    #[test]
    fn one_delivery_per_matching_subscription_of_the_same_tenant_disabled_ones_too() {
        let bytes = encode(&event("acme", "invoice.paid", 10));
        let Output::Deliveries(routed) = run(Some(&bytes), 1024) else {
            panic!("expected deliveries")
        };
        let subs: Vec<_> = routed
            .iter()
            .map(|r| (r.delivery.subscription_id.as_str(), r.strict))
            .collect();
        // `a-off` is disabled: its delivery is made, and the dispatcher keeps it.
        // `a-inv` is strictly ordered: its delivery goes to `deliveries.strict`.
        assert_eq!(subs, [("a-all", false), ("a-inv", true), ("a-off", false)]);
        let ds: Vec<Delivery> = routed.into_iter().map(|r| r.delivery).collect();
        for d in &ds {
            assert_eq!(d.delivery_id, delivery_id("evt-1", &d.subscription_id));
            assert_eq!((d.attempt, d.created_at, d.due_at), (0, 5, 5));
            assert_eq!(d.tenant_id, "acme");
            assert_eq!(d.payload, vec![b'x'; 10]);
            assert_eq!(d.attributes.get("trace").map(String::as_str), Some("abc"));
        }
    }

    #[test]
    fn every_delivery_carries_the_events_trace_context_or_none() {
        let bytes = encode(&event("acme", "invoice.paid", 1));
        let tc = TraceContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: Some("congo=t61rcWkgMzE".into()),
        };
        let Output::Deliveries(ds) = run_traced(Some(&bytes), 1024, Admission::Admit, Some(&tc))
        else {
            panic!("expected deliveries")
        };
        assert!(ds.len() > 1);
        for Routed { delivery: d, .. } in &ds {
            assert_eq!(d.traceparent.as_deref(), Some(tc.traceparent.as_str()));
            assert_eq!(d.tracestate, tc.tracestate);
        }
        let Output::Deliveries(ds) = run(Some(&bytes), 1024) else {
            panic!("expected deliveries")
        };
        assert!(ds
            .iter()
            .all(|r| r.delivery.traceparent.is_none() && r.delivery.tracestate.is_none()));
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

    #[test]
    fn duplicates_fan_out_to_nothing_and_a_changed_payload_is_quarantined() {
        let bytes = encode(&event("acme", "invoice.paid", 10));
        assert!(matches!(
            run_admitted(Some(&bytes), 1024, Admission::Duplicate(PayloadMatch::Same)),
            Output::Duplicate(Duplicate::Same)
        ));
        let Output::Duplicate(Duplicate::Changed(q)) = run_admitted(
            Some(&bytes),
            1024,
            Admission::Duplicate(PayloadMatch::Changed),
        ) else {
            panic!("expected a changed duplicate")
        };
        assert_eq!(q.reason, "duplicate_changed_payload");
        assert_eq!(q.value, bytes);
        assert_eq!((q.source_partition, q.source_offset), (2, 41));
        assert!(q.detail.contains("evt-1"), "{}", q.detail);
    }

    #[test]
    fn unusable_records_never_reach_the_window() {
        let big = encode(&event("acme", "a", 2000));
        for value in [Some(&b"junk"[..]), None, Some(&big[..])] {
            let out = fan_out(
                Input {
                    topic: "events",
                    partition: 0,
                    offset: 0,
                    key: None,
                    value,
                },
                None,
                Vec::new,
                |_, _| Vec::new(),
                |_| panic!("the window saw an unusable record"),
                1000,
                0,
            );
            assert!(matches!(out, Output::Quarantine(_)));
        }
    }

    #[test]
    fn the_key_is_tenant_and_id_and_the_fingerprint_everything_else() {
        let base = event("acme", "invoice.paid", 10);
        let (key, print) = admission_key(&base);
        let mut other_tenant = base.clone();
        other_tenant.tenant_id = "globex".into();
        let mut other_id = base.clone();
        other_id.event_id = "evt-2".into();
        // Length prefixes: moving a byte between the two strings is another key.
        let mut shifted = base.clone();
        shifted.tenant_id = "acm".into();
        shifted.event_id = "eevt-1".into();
        for (name, e) in [
            ("tenant", &other_tenant),
            ("id", &other_id),
            ("shifted", &shifted),
        ] {
            assert_ne!(admission_key(e).0, key, "{name}");
        }
        type Change = fn(&mut DomainEvent);
        let changes: [(&str, Change); 5] = [
            ("payload", |e| e.payload[0] = b'y'),
            ("type", |e| e.event_type = "invoice.voided".into()),
            ("occurred_at", |e| e.occurred_at += 1),
            ("content_type", |e| e.content_type = "text/plain".into()),
            ("attributes", |e| {
                e.attributes.insert("trace".into(), "abd".into());
            }),
        ];
        for (name, change) in changes {
            let mut e = base.clone();
            change(&mut e);
            let (k, f) = admission_key(&e);
            assert_eq!(k, key, "{name} is not part of the key");
            assert_ne!(f, print, "{name} is part of the fingerprint");
        }
        assert_eq!(admission_key(&base.clone()), (key, print));
    }
}
