//! The record types of the contract. Each struct matches its `schemas/*.avsc` field for field
//! (names, order, types); timestamps are `i64` milliseconds since the Unix epoch (UTC), and
//! Avro `["null", T]` unions are `Option<T>`. The round-trip tests hold them to the schemas.

use std::collections::BTreeMap;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::schema::{KnownSchema, RecordKind, Registry};

/// A record type of the contract: a Rust type with the Avro schema it is written and read with.
pub trait Record: Serialize + DeserializeOwned {
    /// Which contract record this is; decoding refuses bytes written for another record.
    const KIND: RecordKind;

    /// The schema this type is written with, and the reader schema it is decoded into.
    /// Defaults to the current schema in `schemas/`.
    fn schema() -> &'static KnownSchema {
        Registry::global().current(Self::KIND)
    }
}

/// A domain event on `events` (`schemas/domain_event.avsc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainEvent {
    /// Producer-chosen, stable identifier; duplicates carry the same id.
    pub event_id: String,
    /// Owning tenant; the Kafka key.
    pub tenant_id: String,
    /// Dotted type such as `invoice.paid`.
    pub event_type: String,
    /// When it happened, ms since the Unix epoch.
    pub occurred_at: i64,
    /// Media type of `payload`.
    pub content_type: String,
    /// The exact request body.
    #[serde(with = "apache_avro::serde::bytes")]
    pub payload: Vec<u8>,
    /// Free-form attributes; empty when there are none. Sorted, so encoding is deterministic.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

impl Record for DomainEvent {
    const KIND: RecordKind = RecordKind::DomainEvent;
}

/// A subscription on the compacted `subscriptions` topic (`schemas/subscription.avsc`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subscription {
    /// Stable identifier; the Kafka key.
    pub subscription_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Endpoint URL.
    pub url: String,
    /// Exact event types and `prefix.*` patterns.
    pub event_types: Vec<String>,
    /// Name of the signing secret(s); never the secret.
    pub secret_ref: String,
    /// False pauses the subscription.
    pub enabled: bool,
    /// Concurrent attempts allowed to this endpoint; 1 keeps order.
    pub max_in_flight: i32,
    /// Optional attempts-per-second cap.
    #[serde(default)]
    pub rate_limit_per_s: Option<f64>,
    /// Why it is disabled (`gone`, `breaker_open`, `operator`); `None` when enabled.
    #[serde(default)]
    pub disabled_reason: Option<String>,
    /// When it was disabled, ms since the Unix epoch; `None` when enabled.
    #[serde(default)]
    pub disabled_at: Option<i64>,
    /// `unordered` or `strict` ([`ORDERING_STRICT`]); see [`Subscription::is_strict`].
    #[serde(default = "unordered")]
    pub ordering: String,
    /// Monotonic version; the highest wins.
    pub version: i64,
    /// When this version was written, ms since the Unix epoch.
    pub updated_at: i64,
}

impl Record for Subscription {
    const KIND: RecordKind = RecordKind::Subscription;
}

/// `Subscription::ordering` of a subscription whose deliveries are strictly ordered.
pub const ORDERING_STRICT: &str = "strict";
/// `Subscription::ordering` by default.
pub const ORDERING_UNORDERED: &str = "unordered";

fn unordered() -> String {
    ORDERING_UNORDERED.to_owned()
}

impl Subscription {
    /// Strict FIFO: one delivery at a time, in event order, and one in backoff
    /// holds the later ones. Any other value (a newer writer's) is unordered.
    pub fn is_strict(&self) -> bool {
        self.ordering == ORDERING_STRICT
    }
}

/// Lineage of a replayed delivery: where its dead letter was stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayOf {
    /// Topic of the dead letter.
    pub topic: String,
    /// Partition of the dead letter.
    pub partition: i32,
    /// Offset of the dead letter.
    pub offset: i64,
}

/// One event for one subscription, on `deliveries` and the retry tiers
/// (`schemas/delivery.avsc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// [`crate::delivery_id`] of (event_id, subscription_id); the `webhook-id`.
    pub delivery_id: String,
    /// The event's id.
    pub event_id: String,
    /// Owning tenant; the Kafka key.
    pub tenant_id: String,
    /// Target subscription.
    pub subscription_id: String,
    /// The event's type.
    pub event_type: String,
    /// The event's time, ms since the Unix epoch.
    pub occurred_at: i64,
    /// The event's media type.
    pub content_type: String,
    /// The exact request body.
    #[serde(with = "apache_avro::serde::bytes")]
    pub payload: Vec<u8>,
    /// The event's attributes.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// Attempts already made.
    pub attempt: i32,
    /// When fan-out created it, ms since the Unix epoch.
    pub created_at: i64,
    /// Earliest next attempt, ms since the Unix epoch.
    pub due_at: i64,
    /// Start of the first attempt, if any.
    #[serde(default)]
    pub first_attempt_at: Option<i64>,
    /// Start of the latest attempt, if any.
    #[serde(default)]
    pub last_attempt_at: Option<i64>,
    /// Bounded classification of the latest attempt (`http_503`, `timeout`, ...).
    #[serde(default)]
    pub last_outcome: Option<String>,
    /// Retry policy version that scheduled this attempt.
    #[serde(default)]
    pub policy_version: Option<String>,
    /// Set when this delivery is a replay of a dead letter.
    #[serde(default)]
    pub replay_of: Option<ReplayOf>,
    /// The event's W3C `traceparent`, sent on every attempt.
    #[serde(default)]
    pub traceparent: Option<String>,
    /// The `tracestate` that came with it.
    #[serde(default)]
    pub tracestate: Option<String>,
}

impl Record for Delivery {
    const KIND: RecordKind = RecordKind::Delivery;
}

/// A delivery that will not be attempted again, on `deliveries.dlq`
/// (`schemas/dead_letter.avsc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The delivery as it stood.
    pub delivery: Delivery,
    /// `exhausted`, `rejected_4xx`, `egress_denied`, `payload_too_large`, ...
    pub reason: String,
    /// HTTP status of the last attempt, if it got one.
    #[serde(default)]
    pub last_status: Option<i32>,
    /// When it was dead-lettered, ms since the Unix epoch.
    pub dead_at: i64,
    /// Retry policy version that decided it.
    pub policy_version: String,
    /// Optional detail, at most [`MAX_DETAIL_BYTES`] (see [`bounded_detail`]).
    #[serde(default)]
    pub detail: Option<String>,
}

impl Record for DeadLetter {
    const KIND: RecordKind = RecordKind::DeadLetter;
}

/// One Kafka header of a quarantined record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedHeader {
    /// Header name.
    pub name: String,
    /// Header value, if it had one.
    #[serde(default, with = "apache_avro::serde::bytes_opt")]
    pub value: Option<Vec<u8>>,
}

/// An undecodable or unusable record from `events` (fanout) or from `deliveries` or a
/// retry tier (dispatcher), kept byte for byte on `events.quarantine`
/// (`schemas/quarantined_event.avsc`); built only by [`crate::Unusable::quarantine`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedEvent {
    /// The original key, if any.
    #[serde(default, with = "apache_avro::serde::bytes_opt")]
    pub key: Option<Vec<u8>>,
    /// The original value.
    #[serde(with = "apache_avro::serde::bytes")]
    pub value: Vec<u8>,
    /// The original headers, in order.
    #[serde(default)]
    pub headers: Vec<QuarantinedHeader>,
    /// A [`QuarantineReason`] as a string.
    pub reason: String,
    /// Detail of the reason, at most [`MAX_DETAIL_BYTES`] (see [`bounded_detail`]).
    pub detail: String,
    /// Where the original was read from.
    pub source_topic: String,
    /// Partition of the original.
    pub source_partition: i32,
    /// Offset of the original.
    pub source_offset: i64,
    /// When it was quarantined, ms since the Unix epoch.
    pub quarantined_at: i64,
}

impl Record for QuarantinedEvent {
    const KIND: RecordKind = RecordKind::QuarantinedEvent;
}

/// One step in the life of a delivery — an attempt, a parking, a dead-lettering — on
/// `deliveries.attempts` (`schemas/attempt_record.avsc`). Never a secret, a URL, a payload
/// or a response body; `detail` is at most [`MAX_ATTEMPT_DETAIL_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// The delivery's id (the `webhook-id`).
    pub delivery_id: String,
    /// The event's id.
    pub event_id: String,
    /// Owning tenant; the Kafka key.
    pub tenant_id: String,
    /// Target subscription.
    pub subscription_id: String,
    /// The event's type.
    pub event_type: String,
    /// `attempted`, `parked` or `dead_lettered` ([`AttemptRecord::ATTEMPTED`], ...).
    pub kind: String,
    /// `delivered`, `retried`, `held`, `rejected`, `exhausted`; a park reason; a
    /// dead-letter reason.
    pub outcome: String,
    /// The number of this attempt (1 for the first); otherwise the attempts made so far.
    pub attempt: i32,
    /// When it happened (an attempt: its start), ms since the Unix epoch.
    pub at: i64,
    /// How long the attempt took, in ms.
    #[serde(default)]
    pub duration_ms: Option<i64>,
    /// Bounded classification of the attempt's result (`http_503`, `timeout`, ...).
    #[serde(default)]
    pub classification: Option<String>,
    /// HTTP status, if there was a response.
    #[serde(default)]
    pub status: Option<i32>,
    /// Short explanation, at most [`MAX_ATTEMPT_DETAIL_BYTES`].
    #[serde(default)]
    pub detail: Option<String>,
    /// The retry tier it was read from; `None` for the ready queue.
    #[serde(default)]
    pub from_tier: Option<String>,
    /// The retry tier it was written to.
    #[serde(default)]
    pub tier: Option<String>,
    /// When it is due again, ms since the Unix epoch.
    #[serde(default)]
    pub next_due_at: Option<i64>,
    /// Set when the delivery is a replay of a dead letter.
    #[serde(default)]
    pub replay_of: Option<ReplayOf>,
    /// The W3C trace id of the delivery's `traceparent`.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// Retry policy version of the writer.
    #[serde(default)]
    pub policy_version: Option<String>,
    /// The delivery's `created_at`: when fanout made it (its fanned-out step).
    #[serde(default)]
    pub created_at: Option<i64>,
}

impl AttemptRecord {
    /// `kind` of an attempt.
    pub const ATTEMPTED: &'static str = "attempted";
    /// `kind` of a parking on a tier, no attempt spent.
    pub const PARKED: &'static str = "parked";
    /// `kind` of a dead-lettering.
    pub const DEAD_LETTERED: &'static str = "dead_lettered";
}

impl Record for AttemptRecord {
    const KIND: RecordKind = RecordKind::AttemptRecord;
}

/// One subscription's circuit breaker as the dispatcher replicas share it, and
/// a strict subscription's head waiting in place, on `subscriptions.health`
/// (`schemas/endpoint_health.avsc`; compacted, key: `subscription_id`). Closed
/// when `open_since` is `None`; no head waits when `head_delivery_id` is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointHealth {
    /// The subscription; the Kafka key.
    pub subscription_id: String,
    /// When the breaker first opened in its current run of openings, ms since
    /// the Unix epoch; `None`: closed.
    #[serde(default)]
    pub open_since: Option<i64>,
    /// When a delivery may probe, ms since the Unix epoch; `None`: closed.
    #[serde(default)]
    pub open_until: Option<i64>,
    /// The current open period in ms; 0 when closed.
    #[serde(default)]
    pub open_period_ms: i64,
    /// When the writer's breaker changed state, ms since the Unix epoch.
    pub changed_at: i64,
    /// The writing replica's transactional id.
    #[serde(default)]
    pub written_by: String,
    /// A strict head waiting in place after a failed attempt: its delivery id.
    #[serde(default)]
    pub head_delivery_id: Option<String>,
    /// The head's attempts so far.
    #[serde(default)]
    pub head_attempt: i32,
    /// The head's first attempt, ms since the Unix epoch.
    #[serde(default)]
    pub head_first_attempt_at: Option<i64>,
    /// The head's latest attempt, ms since the Unix epoch.
    #[serde(default)]
    pub head_last_attempt_at: Option<i64>,
    /// When the head may be attempted again, ms since the Unix epoch.
    #[serde(default)]
    pub head_due_at: Option<i64>,
    /// The head's latest outcome label.
    #[serde(default)]
    pub head_last_outcome: Option<String>,
}

impl Record for EndpointHealth {
    const KIND: RecordKind = RecordKind::EndpointHealth;
}

/// Upper bound, in UTF-8 bytes, of `AttemptRecord.detail`: one record per attempt, so
/// smaller than a dead letter's.
pub const MAX_ATTEMPT_DETAIL_BYTES: usize = 256;

/// Why a record was quarantined: the `reason` of a [`QuarantinedEvent`] and a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuarantineReason {
    /// Too short or no `C3 01` magic: not single-object Avro.
    NotAvro,
    /// Avro framing, but a writer fingerprint no known schema has.
    UnknownFingerprint,
    /// A known schema, but of another record type than the topic carries.
    WrongRecord,
    /// The datum does not decode with its writer schema.
    BadDatum,
    /// Larger than the configured maximum.
    PayloadTooLarge,
    /// An `event_id` fanout already saw within its duplicate-admission window, with
    /// another payload: kept here instead of being dropped as a duplicate.
    DuplicateChangedPayload,
}

impl QuarantineReason {
    /// Every reason, for metric pre-registration and tests.
    pub const ALL: [QuarantineReason; 6] = [
        Self::NotAvro,
        Self::UnknownFingerprint,
        Self::WrongRecord,
        Self::BadDatum,
        Self::PayloadTooLarge,
        Self::DuplicateChangedPayload,
    ];

    /// The wire and label form: `not_avro`, `unknown_fingerprint`, `wrong_record`,
    /// `bad_datum`, `payload_too_large`, `duplicate_changed_payload`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAvro => "not_avro",
            Self::UnknownFingerprint => "unknown_fingerprint",
            Self::WrongRecord => "wrong_record",
            Self::BadDatum => "bad_datum",
            Self::PayloadTooLarge => "payload_too_large",
            Self::DuplicateChangedPayload => "duplicate_changed_payload",
        }
    }
}

impl std::fmt::Display for QuarantineReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Upper bound, in UTF-8 bytes, of `DeadLetter.detail` and `QuarantinedEvent.detail`.
pub const MAX_DETAIL_BYTES: usize = 1024;

/// Truncates `detail` to at most [`MAX_DETAIL_BYTES`] bytes on a character boundary.
pub fn bounded_detail(detail: &str) -> String {
    truncate_detail(detail, MAX_DETAIL_BYTES)
}

/// Truncates `detail` to at most `max` bytes on a character boundary.
pub fn truncate_detail(detail: &str, max: usize) -> String {
    if detail.len() <= max {
        return detail.to_owned();
    }
    let mut end = max;
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    detail[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_detail_keeps_short_text_and_cuts_on_char_boundary() {
        assert_eq!(bounded_detail("timeout"), "timeout");
        let long = "é".repeat(MAX_DETAIL_BYTES); // 2 bytes each
        let cut = bounded_detail(&long);
        assert!(cut.len() <= MAX_DETAIL_BYTES);
        assert_eq!(cut.len(), MAX_DETAIL_BYTES);
        let odd = format!("a{long}");
        let cut = bounded_detail(&odd);
        assert_eq!(cut.len(), MAX_DETAIL_BYTES - 1);
        assert!(cut.starts_with('a'));
    }

    #[test]
    fn quarantine_reasons_are_snake_case_labels() {
        let labels: Vec<_> = QuarantineReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            labels,
            [
                "not_avro",
                "unknown_fingerprint",
                "wrong_record",
                "bad_datum",
                "payload_too_large",
                "duplicate_changed_payload"
            ]
        );
    }
}
