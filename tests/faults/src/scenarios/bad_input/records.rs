//! What `bad_input` writes: for each topic, one bad record of each kind —
//! garbage bytes, truncated Avro, an unknown writer fingerprint, a valid
//! record of another type, an oversize payload, an empty value or a tombstone
//! — and what must become of it; and the good deliveries written between them.

use hookline_envelope::{
    encode, fixtures::DeliveryBuilder, DeadLetter, Delivery, DomainEvent, QuarantinedEvent,
    Subscription,
};
use hookline_testkit::pipeline::{now_us, payload, Pipeline};

/// Payload of a valid but oversize event or delivery (over `MAX_PAYLOAD`).
pub(super) const OVERSIZE: usize = 32 * 1024;
/// A raw record far beyond any payload cap (and fanout's pre-decode allowance).
const HUGE: usize = 256 * 1024;
/// The writer fingerprint no schema has.
const UNKNOWN_FP: u64 = 0x0bad_f00d_dead_beef;

/// What must become of one bad record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// On the quarantine topic with this reason (and then archived).
    Quarantined(&'static str),
    /// Decoded, refused as oversize: a dead letter (checked by the ledger).
    DeadLettered,
    /// Archived raw by the dlq-sink with reason `undecodable`.
    ArchivedRaw,
    /// Counted by both subscription followers under this reason, then skipped.
    Skipped(&'static str),
}

/// One bad record to write: its kind (for the report), value and fate.
pub(super) struct Bad {
    pub kind: &'static str,
    pub value: Option<Vec<u8>>,
    pub fate: Fate,
}

pub(super) fn bad(kind: &'static str, value: Option<Vec<u8>>, fate: Fate) -> Bad {
    Bad { kind, value, fate }
}

fn truncated(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.truncate(bytes.len() - 3);
    bytes
}

fn unknown_fingerprint(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes[2..10].copy_from_slice(&UNKNOWN_FP.to_le_bytes());
    bytes
}

fn huge() -> Vec<u8> {
    (0..HUGE).map(|i| (i % 251) as u8).collect()
}

fn event(id: &str, payload_len: usize) -> DomainEvent {
    DomainEvent {
        event_id: id.to_owned(),
        tenant_id: "bad".to_owned(),
        event_type: "faults.created".to_owned(),
        occurred_at: now_us() / 1000,
        content_type: "application/json".to_owned(),
        payload: vec![b'x'; payload_len],
        attributes: Default::default(),
    }
}

/// A delivery of event `seq` for subscription `sub` of `tenant`, as fanout
/// would write it (`attempt` > 0: as the dispatcher writes a retry).
pub(super) fn delivery(p: &Pipeline, seq: u64, tenant: &str, sub: &str, attempt: i32) -> Delivery {
    let event_id = p.event_id(seq);
    let now = now_us() / 1000;
    let first = DeliveryBuilder::for_event(&event_id, tenant, sub)
        .event_type("faults.created")
        .at(now)
        .payload(&payload(seq, 256));
    if attempt > 0 {
        first.attempted(attempt, now, now, "http_503").build()
    } else {
        first.attempt(attempt).build()
    }
}

pub(super) fn dead_letter() -> DeadLetter {
    DeadLetter {
        delivery: DeliveryBuilder::new("msg_not_in_this_pipeline", "bad", "s")
            .event_type("faults.created")
            .payload(b"")
            .attempt(1)
            .build(),
        reason: "exhausted".to_owned(),
        last_status: None,
        dead_at: 0,
        policy_version: "p".to_owned(),
        detail: None,
    }
}

pub(super) fn quarantined() -> QuarantinedEvent {
    QuarantinedEvent {
        key: None,
        value: b"x".to_vec(),
        headers: Vec::new(),
        reason: "not_avro".to_owned(),
        detail: "d".to_owned(),
        source_topic: "t".to_owned(),
        source_partition: 0,
        source_offset: 0,
        quarantined_at: 0,
    }
}

fn junk_subscription() -> Subscription {
    Subscription {
        subscription_id: "bad-x".to_owned(),
        tenant_id: "bad".to_owned(),
        url: "https://example.invalid/".to_owned(),
        event_types: vec!["*".to_owned()],
        secret_ref: "s".to_owned(),
        enabled: true,
        max_in_flight: 1,
        rate_limit_per_s: None,
        disabled_reason: None,
        disabled_at: None,
        ordering: "unordered".to_owned(),
        version: 1,
        updated_at: 0,
    }
}

/// The bad records of each kind for `events`.
pub(super) fn bad_events() -> Vec<Bad> {
    let good = encode(&event("bad-event", 10));
    vec![
        bad(
            "garbage",
            Some(b"{\"json\":\"not avro\"}".to_vec()),
            Fate::Quarantined("not_avro"),
        ),
        bad(
            "truncated",
            Some(truncated(good.clone())),
            Fate::Quarantined("bad_datum"),
        ),
        bad(
            "unknown_fingerprint",
            Some(unknown_fingerprint(good)),
            Fate::Quarantined("unknown_fingerprint"),
        ),
        bad(
            "wrong_type",
            Some(encode(&dead_letter().delivery)),
            Fate::Quarantined("wrong_record"),
        ),
        bad(
            "oversize",
            Some(encode(&event("bad-oversize", OVERSIZE))),
            Fate::Quarantined("payload_too_large"),
        ),
        bad(
            "oversize_raw",
            Some(huge()),
            Fate::Quarantined("payload_too_large"),
        ),
        bad("tombstone", None, Fate::Quarantined("not_avro")),
    ]
}

/// The bad records for `deliveries` or a tier (the oversize one is added by the caller).
pub(super) fn bad_deliveries(template: &Delivery) -> Vec<Bad> {
    let good = encode(template);
    vec![
        bad(
            "garbage",
            Some(b"\x00\x01 not a delivery".to_vec()),
            Fate::Quarantined("not_avro"),
        ),
        bad(
            "truncated",
            Some(truncated(good.clone())),
            Fate::Quarantined("bad_datum"),
        ),
        bad(
            "unknown_fingerprint",
            Some(unknown_fingerprint(good)),
            Fate::Quarantined("unknown_fingerprint"),
        ),
        bad(
            "wrong_type",
            Some(encode(&event("bad-wrong-type", 10))),
            Fate::Quarantined("wrong_record"),
        ),
        bad("empty", Some(Vec::new()), Fate::Quarantined("not_avro")),
        bad("tombstone", None, Fate::Quarantined("not_avro")),
    ]
}

/// The bad records for the DLQ (`wrong` is another record's bytes).
pub(super) fn bad_archive_input(good: Vec<u8>, wrong: Vec<u8>) -> Vec<Bad> {
    vec![
        bad(
            "garbage",
            Some(b"\xc3\x01short".to_vec()),
            Fate::ArchivedRaw,
        ),
        bad(
            "truncated",
            Some(truncated(good.clone())),
            Fate::ArchivedRaw,
        ),
        bad(
            "unknown_fingerprint",
            Some(unknown_fingerprint(good)),
            Fate::ArchivedRaw,
        ),
        bad("wrong_type", Some(wrong), Fate::ArchivedRaw),
        bad("oversize_raw", Some(huge()), Fate::ArchivedRaw),
        bad("tombstone", None, Fate::ArchivedRaw),
    ]
}

pub(super) fn bad_subscriptions() -> Vec<Bad> {
    let good = encode(&junk_subscription());
    vec![
        bad(
            "garbage",
            Some(b"{\"subscription\":1}".to_vec()),
            Fate::Skipped("not_avro"),
        ),
        bad(
            "truncated",
            Some(truncated(good.clone())),
            Fate::Skipped("bad_datum"),
        ),
        bad(
            "unknown_fingerprint",
            Some(unknown_fingerprint(good)),
            Fate::Skipped("unknown_fingerprint"),
        ),
        bad(
            "wrong_type",
            Some(encode(&event("bad-sub", 10))),
            Fate::Skipped("wrong_record"),
        ),
        bad("oversize_raw", Some(huge()), Fate::Skipped("not_avro")),
    ]
}
