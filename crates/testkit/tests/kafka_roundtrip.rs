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
