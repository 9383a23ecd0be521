//! The sink on real Kafka: every dead letter and quarantined event lands in the archive with
//! its fields and coordinates, a record that is not a `DeadLetter` (or, on the quarantine
//! topic, not a `QuarantinedEvent`) is archived raw with the reason, and offsets are
//! committed once the files are durable.

mod common;

use std::{collections::HashSet, time::Duration};

use common::{dead_letter, read_archive, wait_for_archive, Env};
use hookline_envelope::{encode, DeadLetter, QuarantinedEvent, QuarantinedHeader};
use hookline_testkit::kafka;
use rdkafka::message::{Header, OwnedHeaders};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_land_in_the_archive_with_fields_and_coordinates() {
    let env = Env::new("sink-fields").await;
    let dlq = env.topics.dlq().to_owned();
    let mut sent: Vec<((String, i32, i64), DeadLetter)> = Vec::new();
    for n in 0..30 {
        let tenant = ["acme", "globex", "initech:eu"][n % 3];
        let reason = ["exhausted", "rejected_4xx"][n % 2];
        let dl = dead_letter(tenant, n, reason);
        let headers = OwnedHeaders::new().insert(Header {
            key: "origin",
            value: Some("dispatcher"),
        });
        let coords = env
            .send(&dlq, Some(tenant.as_bytes()), &encode(&dl), Some(headers))
            .await;
        sent.push((coords, dl));
    }
    // Not a DeadLetter: garbage, and a valid record of the wrong type.
    let garbage = env
        .send(&dlq, Some(b"acme"), b"{\"not\":\"avro\"}", None)
        .await;
    let quarantined = QuarantinedEvent {
        key: Some(b"acme".to_vec()),
        value: b"\x00garbage".to_vec(),
        headers: vec![QuarantinedHeader {
            name: "h".into(),
            value: Some(b"v".to_vec()),
        }],
        reason: "not_avro".into(),
        detail: "bad single-object magic".into(),
        source_topic: env.topics.events().into(),
        source_partition: 1,
        source_offset: 7,
        quarantined_at: 1_795_995_000_000,
    };
    let wrong_type = env
        .send(&dlq, Some(b"acme"), &encode(&quarantined), None)
        .await;
    let q_coords = env
        .send(
            env.topics.quarantine(),
            Some(b"acme"),
            &encode(&quarantined),
            None,
        )
        .await;
    // Not a QuarantinedEvent on the quarantine topic: archived raw too.
    let q_garbage = env
        .send(
            env.topics.quarantine(),
            Some(b"acme"),
            b"\xc3\x01short",
            None,
        )
        .await;

    let sink = env.start(&[]);
    let mut want: HashSet<_> = sent.iter().map(|(c, _)| c.clone()).collect();
    want.extend([
        garbage.clone(),
        wrong_type.clone(),
        q_coords.clone(),
        q_garbage.clone(),
    ]);
    let expect = want.clone();
    wait_for_archive(env.archive_dir(), Duration::from_secs(60), move |got| {
        expect.iter().all(|c| got.contains(c))
    })
    .await;
    sink.stop().await;

    let files = read_archive(env.archive_dir());
    let rows: Vec<_> = files.values().flatten().collect();
    assert_eq!(rows.len(), want.len(), "one row per record, no duplicates");
    for (path, rows) in &files {
        let path = path.to_str().unwrap();
        for row in rows {
            let kind = if row.topic == dlq {
                "dlq"
            } else {
                "quarantine"
            };
            let prefix = format!(
                "kind={kind}/date={}/tenant={}/part-",
                row.date_dir(),
                row.tenant_dir()
            );
            assert!(path.starts_with(&prefix), "{path} vs {prefix}");
            assert!(
                path.ends_with(&format!("-{}-{}.avro", row.topic, row.partition)[..])
                    || path.contains(&format!("-{}-{}-", row.topic, row.partition)),
                "{path}"
            );
        }
    }
    for (coords, dl) in &sent {
        let row = rows
            .iter()
            .find(|r| (r.topic.clone(), r.partition, r.offset) == *coords)
            .unwrap();
        let d = &dl.delivery;
        assert_eq!(row.kind, "dlq");
        assert_eq!(row.record_type, "DeadLetter");
        assert_eq!(row.tenant_id.as_deref(), Some(d.tenant_id.as_str()));
        assert_eq!(
            row.subscription_id.as_deref(),
            Some(d.subscription_id.as_str())
        );
        assert_eq!(row.event_type.as_deref(), Some(d.event_type.as_str()));
        assert_eq!(row.event_id.as_deref(), Some(d.event_id.as_str()));
        assert_eq!(row.delivery_id.as_deref(), Some(d.delivery_id.as_str()));
        assert_eq!(row.reason, dl.reason);
        assert_eq!(row.attempt, Some(8));
        assert_eq!(row.last_status, Some(503));
        assert_eq!(row.dead_at, Some(dl.dead_at));
        assert_eq!(row.detail, dl.detail);
        assert_eq!(row.key.as_deref(), Some(d.tenant_id.as_bytes()));
        assert_eq!(row.headers.len(), 1);
        assert_eq!(row.headers[0].name, "origin");
        assert!(row.kafka_timestamp.is_some());
        assert_eq!(row.decode_error, None);
        // The original bytes, decodable back into the same dead letter.
        assert_eq!(row.value.as_deref(), Some(&encode(dl)[..]));
    }
    for (coords, why) in [
        (&garbage, "single-object"),
        (&wrong_type, "expected a DeadLetter"),
        (&q_garbage, "shorter than the 10-byte"),
    ] {
        let row = rows
            .iter()
            .find(|r| (r.topic.clone(), r.partition, r.offset) == *coords)
            .unwrap();
        assert_eq!(row.reason, "undecodable");
        assert_eq!(row.record_type, "undecodable");
        assert_eq!(row.tenant_id, None);
        assert_eq!(row.tenant_dir(), "_unknown");
        let err = row.decode_error.as_deref().unwrap();
        assert!(err.contains(why), "{err}");
        assert_eq!(row.key.as_deref(), Some(&b"acme"[..]));
    }
    let garbage_row = rows
        .iter()
        .find(|r| (r.topic.clone(), r.partition, r.offset) == garbage)
        .unwrap();
    assert_eq!(
        garbage_row.value.as_deref(),
        Some(&b"{\"not\":\"avro\"}"[..])
    );
    let q_row = rows
        .iter()
        .find(|r| (r.topic.clone(), r.partition, r.offset) == q_coords)
        .unwrap();
    assert_eq!(q_row.kind, "quarantine");
    assert_eq!(q_row.record_type, "QuarantinedEvent");
    assert_eq!(q_row.reason, "not_avro");
    assert_eq!(q_row.tenant_id.as_deref(), Some("acme"));
    assert_eq!(q_row.dead_at, Some(1_795_995_000_000));
    let q_garbage_row = rows
        .iter()
        .find(|r| (r.topic.clone(), r.partition, r.offset) == q_garbage)
        .unwrap();
    assert_eq!(q_garbage_row.kind, "quarantine");
    assert_eq!(q_garbage_row.value.as_deref(), Some(&b"\xc3\x01short"[..]));

    // Drained: the group has committed everything it archived.
    for topic in [env.topics.dlq(), env.topics.quarantine()] {
        let (committed, high) = kafka::group_progress(&env.group, topic).await.unwrap();
        assert_eq!(committed, high, "{topic}");
    }
}
