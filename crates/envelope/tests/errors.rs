//! Bytes that are not a valid record of the expected type are refused with the variant that
//! says what was wrong, and that variant maps to the right quarantine reason.

mod common;

use common::*;
use hookline_envelope::{
    decode, encode, fingerprint_of, kind_of, DatumError, DecodeError, Delivery, DomainEvent,
    QuarantineReason, RecordKind, HEADER_LEN,
};

#[test]
fn empty_input_is_too_short() {
    let err = decode::<DomainEvent>(&[]).unwrap_err();
    assert!(matches!(err, DecodeError::TooShort { len: 0 }), "{err:?}");
    assert_eq!(err.quarantine_reason(), QuarantineReason::NotAvro);
}

#[test]
fn header_only_part_is_too_short() {
    let bytes = encode(&sample_event());
    let err = decode::<DomainEvent>(&bytes[..HEADER_LEN - 1]).unwrap_err();
    assert!(matches!(err, DecodeError::TooShort { len: 9 }), "{err:?}");
}

#[test]
fn json_is_bad_magic() {
    let err = decode::<DomainEvent>(br#"{"event_id":"e1"}"#).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::BadMagic {
                found: [b'{', b'"']
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.quarantine_reason(), QuarantineReason::NotAvro);
    assert_eq!(
        err.to_string(),
        "bad single-object magic 7b 22, expected c3 01"
    );
}

#[test]
fn confluent_wire_format_is_bad_magic() {
    // Confluent framing: 0x00 + 4-byte schema id + datum.
    let mut bytes = vec![0x00, 0, 0, 0, 42];
    bytes.extend_from_slice(&encode(&sample_event())[HEADER_LEN..]);
    assert!(matches!(
        decode::<DomainEvent>(&bytes),
        Err(DecodeError::BadMagic {
            found: [0x00, 0x00]
        })
    ));
    assert_eq!(fingerprint_of(&bytes), None);
}

#[test]
fn unknown_fingerprint_is_reported_with_its_value() {
    let mut bytes = encode(&sample_event());
    bytes[2..HEADER_LEN].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
    let err = decode::<DomainEvent>(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::UnknownFingerprint {
                fingerprint: 0x0123_4567_89ab_cdef
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.quarantine_reason(),
        QuarantineReason::UnknownFingerprint
    );
    assert_eq!(fingerprint_of(&bytes), Some(0x0123_4567_89ab_cdef));
    assert_eq!(kind_of(&bytes), None);
}

#[test]
fn another_record_is_wrong_record() {
    let bytes = encode(&sample_delivery());
    assert_eq!(kind_of(&bytes), Some(RecordKind::Delivery));
    let err = decode::<DomainEvent>(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::WrongRecord {
                expected: RecordKind::DomainEvent,
                found: RecordKind::Delivery
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.quarantine_reason(), QuarantineReason::WrongRecord);
}

#[test]
fn every_truncation_of_a_datum_is_bad_datum() {
    let bytes = encode(&sample_delivery());
    for len in HEADER_LEN..bytes.len() {
        let err = decode::<Delivery>(&bytes[..len]).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::BadDatum {
                    record: RecordKind::Delivery,
                    source: DatumError::Truncated { .. } | DatumError::BadLength { .. },
                }
            ),
            "truncated to {len}: {err:?}"
        );
        assert_eq!(err.quarantine_reason(), QuarantineReason::BadDatum);
    }
}

#[test]
fn header_with_no_datum_is_truncated() {
    let bytes = encode(&sample_event());
    let err = decode::<DomainEvent>(&bytes[..HEADER_LEN]).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::BadDatum {
                source: DatumError::Truncated { at: 0 },
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn bytes_after_the_datum_are_trailing_bytes() {
    let mut bytes = encode(&sample_event());
    bytes.extend_from_slice(&[0, 0, 0]);
    let err = decode::<DomainEvent>(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::TrailingBytes {
                record: RecordKind::DomainEvent,
                count: 3
            }
        ),
        "{err:?}"
    );
}

#[test]
fn out_of_range_union_branch_is_bad_index() {
    // A Subscription whose strings are all empty: the union `rate_limit_per_s` sits right
    // after the fixed-size prefix, so its branch index is easy to corrupt.
    let mut sub = sample_subscription();
    sub.subscription_id.clear();
    sub.tenant_id.clear();
    sub.url.clear();
    sub.event_types.clear();
    sub.secret_ref.clear();
    sub.rate_limit_per_s = None;
    let mut bytes = encode(&sub);
    // 5 empty strings / empty array (1 byte each) + boolean (1) + max_in_flight 1 (1 byte).
    let union_at = HEADER_LEN + 7;
    assert_eq!(bytes[union_at], 0, "null branch");
    bytes[union_at] = 4; // zig-zag 2: a third branch that does not exist
    let err = decode::<hookline_envelope::Subscription>(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::BadDatum {
                source: DatumError::BadIndex {
                    index: 2,
                    len: 2,
                    ..
                },
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn invalid_utf8_in_a_string_is_bad_datum_from_avro() {
    let mut event = sample_event();
    event.event_id = "ab".into();
    let mut bytes = encode(&event);
    // event_id is the first field: length 2 (zig-zag 4), then "ab".
    assert_eq!(bytes[HEADER_LEN..HEADER_LEN + 3], [4, b'a', b'b']);
    bytes[HEADER_LEN + 1] = 0xff;
    let err = decode::<DomainEvent>(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::BadDatum {
                source: DatumError::Avro(_),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_huge_declared_length_is_refused_without_allocating() {
    let mut bytes = encode(&sample_event())[..HEADER_LEN].to_vec();
    // event_id declares 2^40 bytes.
    bytes.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
    let err = decode::<DomainEvent>(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::BadDatum {
                source: DatumError::BadLength { at: 0, .. },
                ..
            }
        ),
        "{err:?}"
    );
}

/// Without the pre-scan, apache-avro 0.21 reserves a HashMap for the declared count and a
/// 15-byte input aborts the process (SIGABRT, checked by hand). It must be a plain error.
#[test]
fn a_huge_map_count_is_refused_without_aborting() {
    let mut event = sample_event();
    event.attributes.clear();
    let mut bytes = encode(&event);
    assert_eq!(bytes.pop(), Some(0), "empty map ends the datum");
    // 400 million entries: zig-zag 800_000_000 as a varint.
    let mut n: u64 = 800_000_000;
    loop {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            bytes.push(low);
            break;
        }
        bytes.push(low | 0x80);
    }
    let err = decode::<DomainEvent>(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::BadDatum {
                source: DatumError::BadLength {
                    declared: 400_000_000,
                    ..
                },
                ..
            }
        ),
        "{err:?}"
    );
}
