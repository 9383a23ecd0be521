//! One archived Kafka record (`schemas/archive_row.avsc`) and how it is made from the
//! record read. Guarantees: every record becomes a row — one that does not decode as the
//! topic's contract record is kept raw with `decode_error` set, never dropped — and the row
//! always carries the original value bytes and the record's (topic, partition, offset).

use std::sync::LazyLock;

use apache_avro::Schema;
use chrono::{DateTime, Utc};
use hookline_core::DeadLetterReason;
use hookline_envelope::{
    decode, error_chain, AttemptRecord, DeadLetter, QuarantineReason, QuarantinedEvent,
};
use serde::{Deserialize, Serialize};

/// The archive row schema, compiled in from `schemas/archive_row.avsc`.
pub const SCHEMA_SOURCE: &str = include_str!("../../../schemas/archive_row.avsc");

/// The parsed row schema, shared by every writer and reader.
pub static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    Schema::parse_str(SCHEMA_SOURCE).expect("schemas/archive_row.avsc is a valid Avro schema")
});

/// `reason` and `record_type` of a row whose value did not decode.
pub const UNDECODABLE: &str = "undecodable";

/// The metric label of a reason that is none of the known ones.
const OTHER_REASON: &str = "other";

/// The tenant directory of rows with no known tenant.
pub const UNKNOWN_TENANT: &str = "_unknown";

/// Which source topic a row came from: the `kind=` directory of the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `deliveries.dlq`: dead letters.
    Dlq,
    /// `events.quarantine`: undecodable events.
    Quarantine,
    /// `deliveries.attempts`: the attempt log.
    Attempts,
}

impl Kind {
    /// The directory and `kind` field value: `dlq` or `quarantine`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dlq => "dlq",
            Self::Quarantine => "quarantine",
            Self::Attempts => "attempts",
        }
    }

    /// The contract record this kind's topic carries.
    pub fn record_type(self) -> &'static str {
        match self {
            Self::Dlq => "DeadLetter",
            Self::Quarantine => "QuarantinedEvent",
            Self::Attempts => "AttemptRecord",
        }
    }
}

/// One Kafka header of an archived record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveHeader {
    /// Header name.
    pub name: String,
    /// Header value, if any.
    #[serde(default, with = "apache_avro::serde::bytes_opt")]
    pub value: Option<Vec<u8>>,
}

/// One archived record, field for field `schemas/archive_row.avsc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveRow {
    /// Source topic (with prefix).
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// Source offset.
    pub offset: i64,
    /// Kafka timestamp, ms since the epoch.
    #[serde(default)]
    pub kafka_timestamp: Option<i64>,
    /// Kafka key.
    #[serde(default, with = "apache_avro::serde::bytes_opt")]
    pub key: Option<Vec<u8>>,
    /// Kafka headers, in order.
    #[serde(default)]
    pub headers: Vec<ArchiveHeader>,
    /// `dlq` or `quarantine`.
    pub kind: String,
    /// `DeadLetter`, `QuarantinedEvent` or `undecodable`.
    pub record_type: String,
    /// Tenant, if known.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// Subscription (dead letters).
    #[serde(default)]
    pub subscription_id: Option<String>,
    /// Event type (dead letters).
    #[serde(default)]
    pub event_type: Option<String>,
    /// Event id (dead letters).
    #[serde(default)]
    pub event_id: Option<String>,
    /// Delivery id (dead letters).
    #[serde(default)]
    pub delivery_id: Option<String>,
    /// Dead-letter or quarantine reason, or `undecodable`.
    pub reason: String,
    /// Attempts made (dead letters).
    #[serde(default)]
    pub attempt: Option<i32>,
    /// Last HTTP status (dead letters).
    #[serde(default)]
    pub last_status: Option<i32>,
    /// `dead_at` or `quarantined_at`, ms since the epoch.
    #[serde(default)]
    pub dead_at: Option<i64>,
    /// Bounded detail.
    #[serde(default)]
    pub detail: Option<String>,
    /// The original value bytes.
    #[serde(default, with = "apache_avro::serde::bytes_opt")]
    pub value: Option<Vec<u8>>,
    /// Why the value did not decode.
    #[serde(default)]
    pub decode_error: Option<String>,
    /// When the sink read it, ms since the epoch.
    pub archived_at: i64,
}

/// A Kafka record as read, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Kafka timestamp in ms, if any.
    pub timestamp: Option<i64>,
    /// Key.
    pub key: Option<&'a [u8]>,
    /// Value.
    pub value: Option<&'a [u8]>,
}

impl ArchiveRow {
    /// Makes the row of one record read from a topic of `kind`. Never fails: a value that
    /// is not the topic's record is archived raw with the reason in `decode_error`.
    pub fn from_record(
        kind: Kind,
        rec: RawRecord<'_>,
        headers: Vec<ArchiveHeader>,
        now_ms: i64,
    ) -> Self {
        let mut row = ArchiveRow {
            topic: rec.topic.to_owned(),
            partition: rec.partition,
            offset: rec.offset,
            kafka_timestamp: rec.timestamp,
            key: rec.key.map(<[u8]>::to_vec),
            headers,
            kind: kind.as_str().to_owned(),
            record_type: UNDECODABLE.to_owned(),
            tenant_id: None,
            subscription_id: None,
            event_type: None,
            event_id: None,
            delivery_id: None,
            reason: UNDECODABLE.to_owned(),
            attempt: None,
            last_status: None,
            dead_at: None,
            detail: None,
            value: rec.value.map(<[u8]>::to_vec),
            decode_error: None,
            archived_at: now_ms,
        };
        let Some(value) = rec.value else {
            row.decode_error = Some("the record has no value".to_owned());
            return row;
        };
        match kind {
            Kind::Dlq => match decode::<DeadLetter>(value) {
                Ok(dl) => row.fill_dead_letter(&dl),
                Err(e) => row.decode_error = Some(error_chain(&e)),
            },
            Kind::Quarantine => match decode::<QuarantinedEvent>(value) {
                Ok(q) => row.fill_quarantined(&q),
                Err(e) => row.decode_error = Some(error_chain(&e)),
            },
            Kind::Attempts => match decode::<AttemptRecord>(value) {
                Ok(a) => row.fill_attempt(&a),
                Err(e) => row.decode_error = Some(error_chain(&e)),
            },
        }
        row
    }

    fn fill_dead_letter(&mut self, dl: &DeadLetter) {
        let d = &dl.delivery;
        self.record_type = Kind::Dlq.record_type().to_owned();
        self.tenant_id = Some(d.tenant_id.clone());
        self.subscription_id = Some(d.subscription_id.clone());
        self.event_type = Some(d.event_type.clone());
        self.event_id = Some(d.event_id.clone());
        self.delivery_id = Some(d.delivery_id.clone());
        self.reason = dl.reason.clone();
        self.attempt = Some(d.attempt);
        self.last_status = dl.last_status;
        self.dead_at = Some(dl.dead_at);
        self.detail = dl.detail.clone();
    }

    /// An attempt record's row: `reason` is its `kind:outcome` (`attempted:delivered`,
    /// `dead_lettered:cancelled`, ...), `dead_at` its `at`, `last_status` its status.
    fn fill_attempt(&mut self, a: &AttemptRecord) {
        self.record_type = Kind::Attempts.record_type().to_owned();
        self.tenant_id = Some(a.tenant_id.clone());
        self.subscription_id = Some(a.subscription_id.clone());
        self.event_type = Some(a.event_type.clone());
        self.event_id = Some(a.event_id.clone());
        self.delivery_id = Some(a.delivery_id.clone());
        self.reason = format!("{}:{}", a.kind, a.outcome);
        self.attempt = Some(a.attempt);
        self.last_status = a.status;
        self.dead_at = Some(a.at);
        self.detail = a.detail.clone();
    }

    fn fill_quarantined(&mut self, q: &QuarantinedEvent) {
        self.record_type = Kind::Quarantine.record_type().to_owned();
        // Events are keyed by tenant, so the original key names it.
        self.tenant_id = q
            .key
            .as_deref()
            .and_then(|k| std::str::from_utf8(k).ok())
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        self.reason = q.reason.clone();
        self.dead_at = Some(q.quarantined_at);
        self.detail = Some(q.detail.clone());
    }

    /// The time the row is filed and filtered under: `dead_at` (or `quarantined_at`), else
    /// the Kafka timestamp, else when it was archived.
    pub fn event_time(&self) -> i64 {
        self.dead_at
            .or(self.kafka_timestamp)
            .unwrap_or(self.archived_at)
    }

    /// The `tenant=` directory name of this row.
    pub fn tenant_dir(&self) -> String {
        match &self.tenant_id {
            Some(t) => encode_tenant(t),
            None => UNKNOWN_TENANT.to_owned(),
        }
    }

    /// The `date=` directory name of this row (UTC).
    pub fn date_dir(&self) -> String {
        date_of(self.event_time())
    }
}

/// `YYYY-MM-DD` (UTC) of a time in ms since the epoch; out-of-range times clamp to the epoch.
pub fn date_of(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d")
        .to_string()
}

/// Encodes a tenant id as one URL-safe path segment, reversibly: `[A-Za-z0-9-]` and a
/// non-leading `.` stay as they are; every other UTF-8 byte, `_` included, becomes `_XX`
/// (`_` is the one unreserved character `object_store` does not itself escape), so no
/// tenant encodes to `_unknown`, `.` or `..`. The empty id is `_`.
pub fn encode_tenant(tenant: &str) -> String {
    if tenant.is_empty() {
        return "_".to_owned();
    }
    let mut out = String::with_capacity(tenant.len());
    for (i, b) in tenant.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'-' || (i > 0 && b == b'.') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("_{b:02X}"));
        }
    }
    out
}

/// Every reason label of the archive metrics: each dead-letter reason, each quarantine
/// reason, [`UNDECODABLE`] and `other`. Derived from the enums that define the reasons, so
/// it cannot drift from what the dispatcher and the stages write.
pub(crate) fn reason_labels() -> &'static [&'static str] {
    static LABELS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
        let mut labels: Vec<&'static str> = Vec::new();
        let all = DeadLetterReason::ALL
            .iter()
            .map(|r| r.as_str())
            .chain(QuarantineReason::ALL.iter().map(|r| r.as_str()))
            .chain([UNDECODABLE, OTHER_REASON]);
        for label in all {
            // `payload_too_large` is both a dead-letter and a quarantine reason.
            if !labels.contains(&label) {
                labels.push(label);
            }
        }
        labels
    });
    &LABELS
}

/// The bounded metric label of a row's reason: itself if it is one of [`reason_labels`],
/// else `other`.
pub(crate) fn reason_label(reason: &str) -> &'static str {
    reason_labels()
        .iter()
        .find(|r| **r == reason)
        .copied()
        .unwrap_or(OTHER_REASON)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_reasons_are_other() {
        assert_eq!(reason_label("exhausted"), "exhausted");
        assert_eq!(reason_label("not_avro"), "not_avro");
        assert_eq!(reason_label("tenant-acme-special"), "other");
        assert_eq!(reason_label(""), "other");
    }

    #[test]
    fn every_defined_reason_is_its_own_label_once() {
        for r in DeadLetterReason::ALL {
            assert_eq!(reason_label(r.as_str()), r.as_str());
        }
        for r in QuarantineReason::ALL {
            assert_eq!(reason_label(r.as_str()), r.as_str());
        }
        assert_eq!(reason_label(UNDECODABLE), UNDECODABLE);
        let labels = reason_labels();
        let unique: std::collections::HashSet<_> = labels.iter().collect();
        assert_eq!(unique.len(), labels.len(), "{labels:?}");
        assert_eq!(labels.last(), Some(&"other"));
    }

    #[test]
    fn a_retried_failure_is_not_a_reason_label() {
        // A missing secret is retried, never dead-lettered.
        assert_eq!(reason_label("missing_secret"), "other");
    }

    #[test]
    fn tenant_encoding_keeps_plain_ids_and_escapes_the_rest() {
        let cases = [
            ("acme", "acme"),
            ("acme-eu1.x", "acme-eu1.x"),
            ("acme_eu", "acme_5Feu"),
            ("a:b", "a_3Ab"),
            ("a/b", "a_2Fb"),
            ("a~b", "a_7Eb"),
            ("..", "_2E."),
            (".hidden", "_2Ehidden"),
            ("_unknown", "_5Funknown"),
            ("é", "_C3_A9"),
            ("", "_"),
        ];
        for (tenant, want) in cases {
            assert_eq!(encode_tenant(tenant), want, "{tenant:?}");
        }
    }

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(date_of(0), "1970-01-01");
        assert_eq!(date_of(1_795_996_799_999), "2026-11-29");
        assert_eq!(date_of(1_795_996_800_000), "2026-11-30");
    }

    #[test]
    fn schema_parses() {
        assert!(matches!(&*SCHEMA, Schema::Record(_)));
    }
}
