//! Every record type survives encode → decode unchanged, encoding is deterministic, and no
//! input whatsoever makes a decoder panic.

mod common;

use std::fmt::Debug;

use common::*;
use hookline_envelope::{
    decode, encode, fingerprint_of, kind_of, AttemptRecord, DeadLetter, Delivery, DomainEvent,
    QuarantinedEvent, Record, Subscription, HEADER_LEN, MAGIC,
};
use proptest::prelude::*;

fn assert_round_trip<T: Record + PartialEq + Debug>(record: &T) {
    let bytes = encode(record);
    assert_eq!(bytes[..2], MAGIC);
    assert_eq!(fingerprint_of(&bytes), Some(T::schema().fingerprint()));
    assert_eq!(kind_of(&bytes), Some(T::KIND));
    let back: T = decode(&bytes).expect("a just-encoded record decodes");
    assert_eq!(&back, record);
    assert_eq!(encode(&back), bytes, "encoding is deterministic");
}

#[test]
fn every_record_round_trips_with_all_fields_set() {
    assert_round_trip(&sample_event());
    assert_round_trip(&sample_subscription());
    assert_round_trip(&sample_delivery());
    assert_round_trip(&sample_dead_letter());
    assert_round_trip(&sample_quarantined());
    assert_round_trip(&sample_attempt());
}

#[test]
fn every_record_round_trips_with_optional_fields_empty() {
    let mut event = sample_event();
    event.attributes.clear();
    event.payload.clear();
    assert_round_trip(&event);

    let mut sub = sample_subscription();
    sub.rate_limit_per_s = None;
    sub.event_types.clear();
    assert_round_trip(&sub);

    let mut delivery = sample_delivery();
    delivery.first_attempt_at = None;
    delivery.last_attempt_at = None;
    delivery.last_outcome = None;
    delivery.policy_version = None;
    delivery.replay_of = None;
    assert_round_trip(&delivery);

    let mut dead = sample_dead_letter();
    dead.delivery = delivery;
    dead.last_status = None;
    dead.detail = None;
    assert_round_trip(&dead);

    let mut q = sample_quarantined();
    q.key = None;
    q.headers.clear();
    assert_round_trip(&q);

    let mut a = sample_attempt();
    a.duration_ms = None;
    a.classification = None;
    a.status = None;
    a.detail = None;
    a.from_tier = None;
    a.tier = None;
    a.next_due_at = None;
    a.replay_of = None;
    a.trace_id = None;
    a.policy_version = None;
    a.created_at = None;
    assert_round_trip(&a);
}

#[test]
fn attributes_encode_in_key_order_whatever_the_insertion_order() {
    let mut a = sample_event();
    a.attributes.clear();
    a.attributes.insert("z".into(), "1".into());
    a.attributes.insert("a".into(), "2".into());
    let mut b = sample_event();
    b.attributes.clear();
    b.attributes.insert("a".into(), "2".into());
    b.attributes.insert("z".into(), "1".into());
    assert_eq!(encode(&a), encode(&b));
}

#[test]
fn header_is_magic_then_little_endian_fingerprint() {
    let bytes = encode(&sample_event());
    let fp = DomainEvent::schema().fingerprint();
    assert_eq!(bytes[2..HEADER_LEN], fp.to_le_bytes());
    assert_eq!(bytes[..HEADER_LEN], DomainEvent::schema().header());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn domain_events_round_trip(r in domain_event()) { assert_round_trip(&r) }

    #[test]
    fn subscriptions_round_trip(r in subscription()) { assert_round_trip(&r) }

    #[test]
    fn deliveries_round_trip(r in delivery()) { assert_round_trip(&r) }

    #[test]
    fn dead_letters_round_trip(r in dead_letter()) { assert_round_trip(&r) }

    #[test]
    fn quarantined_events_round_trip(r in quarantined_event()) { assert_round_trip(&r) }

    #[test]
    fn attempt_records_round_trip(r in attempt_record()) { assert_round_trip(&r) }
}

/// Decodes `bytes` as every record type; only errors or values may come back.
fn decode_all(bytes: &[u8]) {
    let _ = decode::<DomainEvent>(bytes);
    let _ = decode::<Subscription>(bytes);
    let _ = decode::<Delivery>(bytes);
    let _ = decode::<DeadLetter>(bytes);
    let _ = decode::<QuarantinedEvent>(bytes);
    let _ = decode::<AttemptRecord>(bytes);
    let _ = kind_of(bytes);
}

fn valid_encodings() -> Vec<Vec<u8>> {
    vec![
        encode(&sample_event()),
        encode(&sample_subscription()),
        encode(&sample_delivery()),
        encode(&sample_dead_letter()),
        encode(&sample_quarantined()),
        encode(&sample_attempt()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        decode_all(&bytes);
    }

    #[test]
    fn arbitrary_datum_behind_a_valid_header_never_panics(
        which in 0usize..5,
        datum in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut bytes = valid_encodings()[which][..HEADER_LEN].to_vec();
        bytes.extend_from_slice(&datum);
        decode_all(&bytes);
    }

    #[test]
    fn corrupted_valid_records_never_panic(
        which in 0usize..5,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = valid_encodings()[which].clone();
        for (at, byte) in edits {
            let i = HEADER_LEN + at.index(bytes.len() - HEADER_LEN);
            bytes[i] = byte;
        }
        decode_all(&bytes);
        let cut = cut.index(bytes.len() + 1);
        decode_all(&bytes[..cut]);
    }
}
