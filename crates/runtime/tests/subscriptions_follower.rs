//! The subscription-table follower on real Kafka with bad records in the table:
//! garbage, truncated Avro, an unknown fingerprint, another record type, an
//! empty value, a non-UTF-8 key and a key that disagrees with the record. Each is
//! counted by reason and skipped; the good records around them load, the table
//! catches up, and records written after them are followed. Nothing is written
//! anywhere (the follower deliberately never quarantines: every replica re-reads
//! the compacted table).

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use hookline_envelope::{encode, DomainEvent, Subscription};
use hookline_runtime::subscriptions;
use hookline_testkit::kafka;
use metrics_exporter_prometheus::PrometheusBuilder;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

fn sub(id: &str) -> Subscription {
    Subscription {
        subscription_id: id.into(),
        tenant_id: "acme".into(),
        url: "https://hooks.example/in".into(),
        event_types: vec!["*".into()],
        secret_ref: "s".into(),
        enabled: true,
        max_in_flight: 1,
        rate_limit_per_s: None,
        disabled_reason: None,
        disabled_at: None,
        ordering: "unordered".into(),
        version: 1,
        updated_at: 0,
    }
}

async fn send(p: &FutureProducer, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) {
    let mut r = FutureRecord::<[u8], [u8]>::to(topic);
    if let Some(k) = key {
        r = r.key(k);
    }
    if let Some(v) = value {
        r = r.payload(v);
    }
    p.send(r, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
}

/// The value of `hookline_subscriptions_invalid_total` for a stage and reason.
fn invalid(rendered: &str, stage: &str, reason: &str) -> u64 {
    rendered
        .lines()
        .filter(|l| l.starts_with("hookline_subscriptions_invalid_total{"))
        .filter(|l| l.contains(&format!("stage=\"{stage}\"")))
        .filter(|l| l.contains(&format!("reason=\"{reason}\"")))
        .filter_map(|l| l.rsplit(" ").next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_subscription_records_are_counted_by_reason_and_skipped_without_stalling() {
    let metrics = PrometheusBuilder::new().install_recorder().unwrap();
    let topic = kafka::unique_name("follower-bad");
    kafka::create_topics(&[(&topic, 1)], &[("cleanup.policy", "compact")])
        .await
        .unwrap();
    let p = kafka::producer();
    let good = encode(&sub("a"));
    let mut truncated = good.clone();
    truncated.truncate(good.len() - 3);
    let mut unknown = good.clone();
    unknown[2..10].copy_from_slice(&0x0123_4567_89ab_cdef_u64.to_le_bytes());
    let event = encode(&DomainEvent {
        event_id: "e".into(),
        tenant_id: "acme".into(),
        event_type: "a.b".into(),
        occurred_at: 0,
        content_type: "application/json".into(),
        payload: vec![],
        attributes: Default::default(),
    });
    send(&p, &topic, Some(b"a"), Some(&good)).await;
    send(&p, &topic, Some(b"g"), Some(b"{\"not\":\"avro\"}")).await;
    send(&p, &topic, Some(b"t"), Some(&truncated)).await;
    send(&p, &topic, Some(b"u"), Some(&unknown)).await;
    send(&p, &topic, Some(b"w"), Some(&event)).await;
    send(&p, &topic, Some(b"e"), Some(b"")).await;
    // A compacted topic refuses records without a key; a non-UTF-8 key gets through.
    send(&p, &topic, Some(b"\xff\xfe"), Some(&encode(&sub("badkey")))).await;
    send(&p, &topic, Some(b"x"), Some(&encode(&sub("y")))).await;
    send(&p, &topic, Some(b"b"), Some(&encode(&sub("b")))).await;

    let stop = CancellationToken::new();
    let (subs, task) =
        subscriptions::follow(&common::args(), &topic, "fault_test", None, stop.clone()).unwrap();
    let caught_up = tokio::time::timeout(Duration::from_secs(30), subs.wait_caught_up()).await;
    assert_eq!(
        caught_up,
        Ok(true),
        "the table caught up past the bad records"
    );
    let ids: Vec<String> = subs
        .all()
        .iter()
        .map(|s| s.record.subscription_id.clone())
        .collect();
    assert_eq!(ids, ["a", "b"]);

    // Following live: more garbage, then a good record, which must load.
    send(&p, &topic, Some(b"g2"), Some(b"\xc3\x01garbage")).await;
    send(&p, &topic, Some(b"c"), Some(&encode(&sub("c")))).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while subs.get("c").is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stalled behind live garbage"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    task.await.unwrap();

    let rendered = metrics.render();
    let counts: Vec<(&str, u64)> = [
        "not_avro",
        "bad_datum",
        "unknown_fingerprint",
        "wrong_record",
        "bad_key",
        "key_mismatch",
    ]
    .into_iter()
    .map(|r| (r, invalid(&rendered, "fault_test", r)))
    .collect();
    // not_avro: the JSON, the empty value and the live `C3 01 garbage` (too short).
    assert_eq!(
        counts,
        [
            ("not_avro", 3),
            ("bad_datum", 1),
            ("unknown_fingerprint", 1),
            ("wrong_record", 1),
            ("bad_key", 1),
            ("key_mismatch", 1)
        ],
        "{rendered}"
    );
    assert_eq!(invalid(&rendered, "fault_test", "undecodable"), 0);
}
