#![allow(clippy::unwrap_used)]

use hookline_envelope::{fixtures::DeliveryBuilder, QuarantinedEvent};

use super::*;
use crate::row::RawRecord;

fn dead_letter() -> DeadLetter {
    let mut delivery = DeliveryBuilder::for_event("ev1", "acme", "sub1")
        .event_type("invoice.paid")
        .at(2)
        .occurred_at(1)
        .due_at(3)
        .attempted(9, 4, 5, "http_503")
        .policy_version("p1")
        .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .build();
    delivery.replay_of = Some(ReplayOf {
        topic: "old".into(),
        partition: 0,
        offset: 0,
    });
    DeadLetter {
        delivery,
        reason: "exhausted".into(),
        last_status: Some(503),
        dead_at: 6,
        policy_version: "p1".into(),
        detail: None,
    }
}

fn deliveries() -> Destination {
    Destination::Fixed("x.deliveries".into())
}

fn to_source() -> Destination {
    Destination::SourceTopic(Box::new(Topics::with_prefix("x.").unwrap()))
}

fn row_of(kind: Kind, value: &[u8]) -> ArchiveRow {
    ArchiveRow::from_record(
        kind,
        RawRecord {
            topic: "x.deliveries.dlq",
            partition: 2,
            offset: 41,
            timestamp: Some(7),
            key: Some(b"acme"),
            value: Some(value),
        },
        vec![],
        8,
    )
}

#[test]
fn a_replayed_delivery_starts_over_with_the_same_id_and_lineage() {
    let dl = dead_letter();
    let row = row_of(Kind::Dlq, &encode(&dl));
    let replayed = replay_record(&row, &deliveries(), 1_000).unwrap();
    assert_eq!(replayed.topic, "x.deliveries");
    assert_eq!(replayed.key.as_deref(), Some(&b"acme"[..]));
    assert!(replayed.headers.is_empty());
    let d: Delivery = decode(&replayed.value).unwrap();
    let want = Delivery {
        attempt: 0,
        due_at: 1_000,
        first_attempt_at: None,
        last_attempt_at: None,
        last_outcome: None,
        policy_version: None,
        replay_of: Some(ReplayOf {
            topic: "x.deliveries.dlq".into(),
            partition: 2,
            offset: 41,
        }),
        ..dl.delivery.clone()
    };
    assert_eq!(d, want);
    assert_eq!(d.delivery_id, dl.delivery.delivery_id);
    assert!(d.traceparent.is_some());
    assert_eq!(
        d.traceparent, dl.delivery.traceparent,
        "a replay keeps the event's trace"
    );
    assert_eq!(
        d.created_at, 2,
        "created_at keeps the original fan-out time"
    );
}

fn quarantined(source_topic: &str) -> QuarantinedEvent {
    QuarantinedEvent {
        key: Some(b"acme".to_vec()),
        value: b"\x00\x01raw".to_vec(),
        headers: vec![QuarantinedHeader {
            name: "traceparent".into(),
            value: Some(b"00-1".to_vec()),
        }],
        reason: "not_avro".into(),
        detail: "x".into(),
        source_topic: source_topic.into(),
        source_partition: 0,
        source_offset: 3,
        quarantined_at: 9,
    }
}

#[test]
fn a_quarantined_record_is_replayed_byte_for_byte_to_its_source_topic() {
    for source in [
        "x.events",
        "x.deliveries",
        "x.deliveries.retry-10s",
        "x.deliveries.t1",
    ] {
        let q = quarantined(source);
        let row = row_of(Kind::Quarantine, &encode(&q));
        let replayed = replay_record(&row, &to_source(), 1_000).unwrap();
        assert_eq!(
            replayed,
            Replayed {
                topic: source.to_owned(),
                key: q.key.clone(),
                value: q.value.clone(),
                headers: q.headers.clone(),
            }
        );
    }
}

#[test]
fn a_quarantined_record_from_elsewhere_is_refused() {
    for source in [
        "x.deliveries.dlq",
        "x.events.quarantine",
        "x.subscriptions",
        "events",
        "y.deliveries",
    ] {
        let row = row_of(Kind::Quarantine, &encode(&quarantined(source)));
        match replay_record(&row, &to_source(), 1_000) {
            Err(NotReplayed::Refused(why)) => {
                assert!(why.contains(source) && why.contains("`x.`"), "{why}")
            }
            other => panic!("{source}: expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn undecodable_rows_cannot_be_replayed() {
    let row = row_of(Kind::Dlq, b"garbage, not avro");
    match replay_record(&row, &deliveries(), 0) {
        Err(NotReplayed::Failed(why)) => assert!(why.contains("magic"), "{why}"),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn exit_codes_follow_the_summary() {
    let s = |matched, replayed, failed, refused| Summary {
        scanned: 10,
        matched,
        replayed,
        failed,
        refused,
        duplicates_skipped: 4,
    };
    assert_eq!(s(3, 3, 0, 0).exit_code(), 0);
    assert_eq!(s(3, 2, 1, 0).exit_code(), 2);
    assert_eq!(s(3, 2, 0, 1).exit_code(), 2);
    assert_eq!(s(0, 0, 0, 0).exit_code(), 3);
}

#[test]
fn replays_are_paced_evenly_at_the_rate_without_a_burst() {
    let ms = Duration::from_millis;
    let mut pacer = Pacer::new(RateLimit::per_second(20.0).unwrap());
    assert_eq!(pacer.turn(ms(0)), Ok(()), "the first record goes at once");
    assert_eq!(pacer.turn(ms(0)), Err(ms(50)));
    assert_eq!(pacer.turn(ms(30)), Err(ms(20)));
    assert_eq!(pacer.turn(ms(50)), Ok(()));
    // A slow send leaves no credit behind: the next turn is one interval later.
    assert_eq!(pacer.turn(ms(400)), Ok(()));
    assert_eq!(pacer.turn(ms(400)), Err(ms(50)));
}
