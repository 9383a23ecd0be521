//! The real-Kafka harness works end to end: an encoded `DomainEvent` produced
//! with rdkafka comes back from a `read_committed` consumer and decodes equal.

use std::time::Duration;

use hookline_envelope::{decode, encode, DomainEvent};
use hookline_testkit::kafka;
use rdkafka::{consumer::Consumer, message::Message, producer::FutureRecord};

#[tokio::test]
async fn domain_event_round_trips_through_real_kafka() {
    let topic = kafka::unique_name("roundtrip");
    kafka::create_topics(&[(&topic, 3)], &[]).await.unwrap();

    let event = DomainEvent {
        event_id: "evt-roundtrip-1".into(),
        tenant_id: "acme".into(),
        event_type: "invoice.paid".into(),
        occurred_at: 1_764_000_000_123,
        content_type: "application/json".into(),
        payload: br#"{"invoice":"in_1","amount":4200}"#.to_vec(),
        attributes: [("traceparent".to_owned(), "00-abc-def-01".to_owned())].into(),
    };
    let bytes = encode(&event);
    let producer = kafka::producer();
    let delivered = producer
        .send(
            FutureRecord::to(&topic)
                .key(&event.tenant_id)
                .payload(&bytes),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .expect("produce to the real broker");

    let consumer = kafka::consumer(&kafka::unique_name("roundtrip-group"));
    consumer.subscribe(&[&topic]).unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .expect("a message within 60 s")
        .expect("consume from the real broker");
    assert_eq!(
        (msg.partition(), msg.offset()),
        (delivered.partition, delivered.offset)
    );
    assert_eq!(msg.key(), Some(event.tenant_id.as_bytes()));
    let decoded: DomainEvent = decode(msg.payload().expect("a value")).unwrap();
    assert_eq!(decoded, event);
}

/// `read_to_end` returns the records of a transaction that was still open when
/// the read started: it reads up to the high watermark, not to the last stable
/// offset a `read_committed` reader reaches first. (A transaction's commit
/// markers land on its partitions after the commit has returned, so reading
/// right after a commit used to miss records.)
#[tokio::test]
async fn read_to_end_waits_for_a_transaction_open_when_it_starts() {
    use rdkafka::producer::{FutureProducer, Producer};
    let topic = kafka::unique_name("read-to-end");
    kafka::create_topics(&[(&topic, 2)], &[]).await.unwrap();
    let producer: FutureProducer = kafka::client_config()
        .set("transactional.id", kafka::unique_name("read-to-end-txn"))
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    for n in 0..4 {
        let value = format!("record-{n}");
        producer
            .send(
                FutureRecord::to(&topic)
                    .partition(n % 2)
                    .key("k")
                    .payload(&value),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let reading = topic.clone();
    let read = tokio::spawn(async move { kafka::read_to_end(&reading).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !read.is_finished(),
        "the read waits for the open transaction"
    );
    let producer = tokio::task::spawn_blocking(move || {
        producer
            .commit_transaction(Duration::from_secs(30))
            .map(|()| producer)
    })
    .await
    .unwrap()
    .unwrap();
    let mut values: Vec<String> = read
        .await
        .unwrap()
        .unwrap()
        .iter()
        .map(|m| String::from_utf8(m.payload().unwrap().to_vec()).unwrap())
        .collect();
    values.sort();
    assert_eq!(values, ["record-0", "record-1", "record-2", "record-3"]);
    drop(producer);
}
