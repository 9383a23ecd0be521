//! Bad input on the dispatcher's inputs, on real Kafka: garbage bytes, truncated
//! Avro, an unknown writer fingerprint, a valid record of another type, an empty
//! value and a tombstone, interleaved with good deliveries on `deliveries` and on
//! a retry tier. Every good delivery arrives; every bad record is on the
//! quarantine topic with its reason, its bytes, key and headers and its source
//! coordinates; an oversize `Delivery` is dead-lettered as `payload_too_large`;
//! and the group commits past all of them.

#![allow(clippy::unwrap_used)]

mod common;

use std::{collections::HashMap, time::Duration};

use common::{delivery, Env};
use hookline_envelope::{decode, encode, DomainEvent, QuarantinedEvent};
use hookline_testkit::kafka;
use rdkafka::{
    message::{Header, OwnedHeaders},
    producer::FutureRecord,
};

/// (topic, partition, offset) of a record sent.
type Coords = (String, i32, i64);

/// Sends one raw record and returns where it landed.
async fn send_raw(
    env: &Env,
    topic: &str,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    header: Option<(&str, &[u8])>,
) -> Coords {
    let mut record = FutureRecord::<[u8], [u8]>::to(topic);
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(v) = value {
        record = record.payload(v);
    }
    if let Some((name, v)) = header {
        record = record.headers(OwnedHeaders::new().insert(Header {
            key: name,
            value: Some(v),
        }));
    }
    let delivered = env
        .producer
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    (topic.to_owned(), delivered.partition, delivered.offset)
}

fn domain_event() -> DomainEvent {
    DomainEvent {
        event_id: "evt-wrong-type".into(),
        tenant_id: "acme".into(),
        event_type: "invoice.paid".into(),
        occurred_at: 1,
        content_type: "application/json".into(),
        payload: b"{}".to_vec(),
        attributes: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_on_deliveries_and_a_tier_are_quarantined_and_good_ones_delivered() {
    let env = Env::with_ladder("dispatch-bad-input", 1, &[("t1", "1s")]).await;
    let sub = env.subscription("sub-bad", "acme", "/ok", "one");
    env.put(&sub).await;
    let tier = env.topics.retries().next().unwrap().1.to_owned();

    let mut good = Vec::new();
    // (coords, expected reason, value sent)
    let mut bad: Vec<(Coords, &str, Vec<u8>)> = Vec::new();
    let mut oversize = Vec::new();
    let mut n = 0;
    for topic in [env.topics.deliveries().to_owned(), tier.clone()] {
        let template = encode(&delivery(&sub, 10_000));
        let mut unknown = template.clone();
        unknown[2..10].copy_from_slice(&0x0123_4567_89ab_cdef_u64.to_le_bytes());
        let mut truncated = template.clone();
        truncated.truncate(template.len() - 4);
        let cases: Vec<(&str, Option<Vec<u8>>)> = vec![
            ("not_avro", Some(b"{\"not\":\"a delivery\"}".to_vec())),
            ("bad_datum", Some(truncated)),
            ("unknown_fingerprint", Some(unknown)),
            ("wrong_record", Some(encode(&domain_event()))),
            ("not_avro", Some(Vec::new())),
            ("not_avro", None),
        ];
        for (reason, value) in cases {
            let d = delivery(&sub, n);
            n += 1;
            send_raw(&env, &topic, Some(b"acme"), Some(&encode(&d)), None).await;
            good.push(d);
            let coords = send_raw(
                &env,
                &topic,
                Some(b"acme"),
                value.as_deref(),
                Some(("origin", b"test")),
            )
            .await;
            bad.push((coords, reason, value.unwrap_or_default()));
        }
        // Valid, but larger than --max-payload-bytes: a dead letter, not quarantine.
        let mut big = delivery(&sub, n);
        n += 1;
        big.payload = vec![b'x'; 4096];
        send_raw(&env, &topic, Some(b"acme"), Some(&encode(&big)), None).await;
        oversize.push(big);
        let last = delivery(&sub, n);
        n += 1;
        send_raw(&env, &topic, Some(b"acme"), Some(&encode(&last)), None).await;
        good.push(last);
    }

    let running = env.start(&["--max-payload-bytes", "1024"]);
    let arrived = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| r.len() >= good.len())
        .await;
    assert!(
        arrived,
        "only {} of {} arrived",
        env.receiver.count(),
        good.len()
    );
    env.committed_to_end(Duration::from_secs(30)).await;
    env.topic_committed_to_end(&tier, Duration::from_secs(30))
        .await;
    running.shutdown().await;

    let ids: Vec<String> = env
        .receiver
        .requests()
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    for d in &good {
        assert!(ids.contains(&d.delivery_id), "{} not delivered", d.event_id);
    }
    assert_eq!(ids.len(), good.len(), "nothing else was sent: {ids:?}");

    let quarantined: Vec<QuarantinedEvent> = kafka::read_to_end(env.topics.quarantine())
        .await
        .unwrap()
        .iter()
        .map(|m| decode(rdkafka::Message::payload(m).unwrap()).unwrap())
        .collect();
    let by_coords: HashMap<Coords, &QuarantinedEvent> = quarantined
        .iter()
        .map(|q| {
            (
                (q.source_topic.clone(), q.source_partition, q.source_offset),
                q,
            )
        })
        .collect();
    assert_eq!(quarantined.len(), bad.len(), "one record per bad input");
    for (coords, reason, value) in &bad {
        let q = by_coords
            .get(coords)
            .unwrap_or_else(|| panic!("{coords:?} ({reason}) not quarantined"));
        assert_eq!(q.reason, *reason, "{coords:?}: {}", q.detail);
        assert!(!q.detail.is_empty());
        assert_eq!(&q.value, value, "{coords:?}");
        assert_eq!(q.key.as_deref(), Some(&b"acme"[..]));
        assert_eq!(q.headers.len(), 1);
        assert_eq!(q.headers[0].name, "origin");
        assert_eq!(q.headers[0].value.as_deref(), Some(&b"test"[..]));
    }

    let dead = env.dead_letters().await;
    assert_eq!(dead.len(), oversize.len(), "{dead:?}");
    for dl in &dead {
        assert_eq!(dl.reason, "payload_too_large");
        assert!(oversize
            .iter()
            .any(|d| d.delivery_id == dl.delivery.delivery_id));
    }
}

/// Sets `max.message.bytes` of `topic` (incremental alter, so nothing else changes).
async fn set_max_message_bytes(topic: &str, bytes: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        kafka::client_config().create().unwrap();
    let config = AlterConfig::new(ResourceSpecifier::Topic(topic)).set("max.message.bytes", bytes);
    let results = admin
        .alter_configs(&[config], &AdminOptions::new())
        .await
        .unwrap();
    for r in results {
        r.map_err(|(_, code)| code).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_quarantine_write_holds_the_offset_and_nothing_behind_it() {
    let env = Env::new("dispatch-quarantine-fails", 1).await;
    let sub = env.subscription("sub-qf", "acme", "/ok", "one");
    env.put(&sub).await;
    // The broker refuses the quarantine write (a record over the topic's
    // max.message.bytes, with room for transaction markers) until the limit is
    // raised.
    set_max_message_bytes(env.topics.quarantine(), "1024").await;
    let topic = env.topics.deliveries().to_owned();
    let first = delivery(&sub, 0);
    let second = delivery(&sub, 1);
    send_raw(&env, &topic, Some(b"acme"), Some(&encode(&first)), None).await;
    let garbage = send_raw(
        &env,
        &topic,
        Some(b"acme"),
        Some(&incompressible(4096)),
        None,
    )
    .await;
    send_raw(&env, &topic, Some(b"acme"), Some(&encode(&second)), None).await;

    let running = env.start(&[]);
    let arrived = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| r.len() >= 2)
        .await;
    assert!(
        arrived,
        "the deliveries around the bad record were not held up"
    );
    // Well past the commit interval and a few retries of the failing
    // transaction: the committed offset stops at the bad record.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (committed, high) = kafka::group_progress(&env.group, &topic).await.unwrap();
    assert_eq!(
        (committed, high),
        (garbage.2, garbage.2 + 2),
        "committed up to, not past, the record whose quarantine write failed"
    );
    assert!(kafka::read_to_end(env.topics.quarantine())
        .await
        .unwrap()
        .is_empty());

    set_max_message_bytes(env.topics.quarantine(), "1048588").await;
    env.committed_to_end(Duration::from_secs(30)).await;
    running.shutdown().await;
    let quarantined: Vec<QuarantinedEvent> = kafka::read_to_end(env.topics.quarantine())
        .await
        .unwrap()
        .iter()
        .map(|m| decode(rdkafka::Message::payload(m).unwrap()).unwrap())
        .collect();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(
        (
            quarantined[0].source_topic.clone(),
            quarantined[0].source_partition,
            quarantined[0].source_offset
        ),
        garbage
    );
    assert_eq!(quarantined[0].reason, "not_avro");
    assert_eq!(env.receiver.count(), 2, "each good delivery once");
}

/// `len` bytes that compression does not shrink (xorshift), not Avro.
fn incompressible(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    bytes[0] = b'x';
    bytes
}
