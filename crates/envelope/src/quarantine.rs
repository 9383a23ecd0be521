//! The one place a record a stage cannot use becomes a [`QuarantinedEvent`]: fanout (on
//! `events`) and the dispatcher (on `deliveries` and the retry tiers) both decode with
//! [`decode_value`] and build with [`Unusable::quarantine`], so every quarantined record
//! carries the original key, value and headers byte for byte, a reason from the one fixed
//! set ([`QuarantineReason`]), a bounded detail and the source coordinates, whichever
//! stage wrote it.

use crate::{
    codec::{decode, DecodeError},
    records::{bounded_detail, QuarantineReason, QuarantinedEvent, QuarantinedHeader, Record},
};

/// A consumed Kafka record, borrowed: where it was read and its raw key and value.
#[derive(Debug, Clone, Copy)]
pub struct SourceRecord<'a> {
    /// Source topic (with prefix).
    pub topic: &'a str,
    /// Source partition.
    pub partition: i32,
    /// Source offset.
    pub offset: i64,
    /// The record key, if any.
    pub key: Option<&'a [u8]>,
    /// The record value; `None` for a tombstone.
    pub value: Option<&'a [u8]>,
}

/// Why a record cannot be used: the quarantine reason and a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// The reason, a metric label and the `reason` field.
    pub reason: QuarantineReason,
    /// What exactly was wrong (bounded when quarantined).
    pub detail: String,
}

impl Unusable {
    /// A reason with its detail.
    pub fn new(reason: QuarantineReason, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }

    /// The record `source` as a [`QuarantinedEvent`] filed under this reason, its key,
    /// value and `headers` kept byte for byte (a tombstone's value is empty).
    pub fn quarantine(
        &self,
        source: &SourceRecord<'_>,
        headers: Vec<QuarantinedHeader>,
        now_ms: i64,
    ) -> QuarantinedEvent {
        QuarantinedEvent {
            key: source.key.map(<[u8]>::to_vec),
            value: source.value.map(<[u8]>::to_vec).unwrap_or_default(),
            headers,
            reason: self.reason.as_str().to_owned(),
            detail: bounded_detail(&self.detail),
            source_topic: source.topic.to_owned(),
            source_partition: source.partition,
            source_offset: source.offset,
            quarantined_at: now_ms,
        }
    }
}

impl From<&DecodeError> for Unusable {
    fn from(e: &DecodeError) -> Self {
        Self::new(e.quarantine_reason(), error_chain(e))
    }
}

/// Decodes a record value as `T`, or says why it must be quarantined: a tombstone is
/// `not_avro`, and every [`DecodeError`] files under its own reason with its full text.
pub fn decode_value<T: Record>(value: Option<&[u8]>) -> Result<T, Unusable> {
    let Some(bytes) = value else {
        return Err(Unusable::new(
            QuarantineReason::NotAvro,
            format!("record has no value (a tombstone), expected a {}", T::KIND),
        ));
    };
    decode(bytes).map_err(|e| Unusable::from(&e))
}

/// An error and its sources on one line, joined with `: `: how every hookline crate
/// prints an error in a log field, a record's `detail` or a CLI's last line. Here because
/// this is the lowest crate that needs it.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        // An error whose message already ends with its source's (`"archive: {0}"`
        // over a `#[from]`) is not repeated.
        let more = s.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode, Delivery, DomainEvent, MAX_DETAIL_BYTES};

    fn event() -> DomainEvent {
        DomainEvent {
            event_id: "e".into(),
            tenant_id: "acme".into(),
            event_type: "a.b".into(),
            occurred_at: 1,
            content_type: "application/json".into(),
            payload: b"{}".to_vec(),
            attributes: Default::default(),
        }
    }

    fn reason_of(value: Option<&[u8]>) -> QuarantineReason {
        decode_value::<DomainEvent>(value).unwrap_err().reason
    }

    #[test]
    fn every_kind_of_bad_value_has_its_reason() {
        let good = encode(&event());
        assert!(decode_value::<DomainEvent>(Some(&good)).is_ok());
        let mut unknown = good.clone();
        unknown[2] ^= 0xff;
        let mut truncated = good.clone();
        truncated.truncate(good.len() - 2);
        let cases = [
            (reason_of(None), QuarantineReason::NotAvro),
            (reason_of(Some(b"")), QuarantineReason::NotAvro),
            (reason_of(Some(b"{\"json\":1}")), QuarantineReason::NotAvro),
            (
                reason_of(Some(&unknown)),
                QuarantineReason::UnknownFingerprint,
            ),
            (reason_of(Some(&truncated)), QuarantineReason::BadDatum),
            (
                decode_value::<Delivery>(Some(&good)).unwrap_err().reason,
                QuarantineReason::WrongRecord,
            ),
        ];
        for (i, (got, want)) in cases.into_iter().enumerate() {
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn error_chain_joins_every_source_in_order() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Middle);
        #[derive(Debug, thiserror::Error)]
        #[error("middle")]
        struct Middle(#[source] std::io::Error);
        let e = Outer(Middle(std::io::Error::other("inner")));
        assert_eq!(error_chain(&e), "outer: middle: inner");
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }

    #[test]
    fn error_chain_does_not_repeat_a_source_the_message_already_holds() {
        #[derive(Debug, thiserror::Error)]
        #[error("archive: {0}")]
        struct Wrapping(#[from] std::io::Error);
        let e = Wrapping(std::io::Error::other("no such bucket"));
        assert_eq!(error_chain(&e), "archive: no such bucket");
    }

    #[test]
    fn the_detail_keeps_the_error_chain() {
        let mut truncated = encode(&event());
        truncated.truncate(truncated.len() - 2);
        let u = decode_value::<DomainEvent>(Some(&truncated)).unwrap_err();
        assert!(
            u.detail.starts_with("malformed DomainEvent datum: "),
            "{}",
            u.detail
        );
    }

    #[test]
    fn the_quarantined_record_keeps_bytes_headers_and_coordinates() {
        let source = SourceRecord {
            topic: "p.deliveries",
            partition: 3,
            offset: 41,
            key: Some(b"acme"),
            value: Some(b"\x00raw"),
        };
        let headers = vec![QuarantinedHeader {
            name: "h".into(),
            value: None,
        }];
        let long = "x".repeat(MAX_DETAIL_BYTES * 2);
        let q =
            Unusable::new(QuarantineReason::NotAvro, long).quarantine(&source, headers.clone(), 9);
        assert_eq!(q.key.as_deref(), Some(&b"acme"[..]));
        assert_eq!(q.value, b"\x00raw");
        assert_eq!(q.headers, headers);
        assert_eq!(q.reason, "not_avro");
        assert_eq!(q.detail.len(), MAX_DETAIL_BYTES);
        assert_eq!(
            (
                q.source_topic.as_str(),
                q.source_partition,
                q.source_offset,
                q.quarantined_at
            ),
            ("p.deliveries", 3, 41, 9)
        );
        let tombstone = SourceRecord {
            value: None,
            key: None,
            ..source
        };
        let q = Unusable::new(QuarantineReason::NotAvro, "").quarantine(&tombstone, vec![], 9);
        assert_eq!((q.key, q.value), (None, Vec::new()));
    }
}
