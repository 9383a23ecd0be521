//! `inspect` and `replay` as an operator runs them: the real binary against real Kafka and
//! a real archive, judged by exit code, stdout and what lands on the topics.

mod common;

use std::{collections::BTreeSet, time::Duration};

use common::{dead_letter, wait_for_archive, Env};
use hookline_envelope::{decode, encode, Delivery, QuarantinedEvent, QuarantinedHeader};
use hookline_testkit::kafka;
use rdkafka::message::{Headers, Message};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_filters_get_a_clear_error_and_exit_1() {
    let env = Env::new("cli-usage").await;
    let cases: [(&[&str], &str); 7] = [
        (&["inspect", "--since", "yesterday-ish"], "--since"),
        (&["inspect", "--until", "2026-13-40"], "--until"),
        (
            &["inspect", "--since", "1h", "--until", "2h"],
            "not after --since",
        ),
        (&["inspect", "--event-type", "a.*.b"], "--event-type"),
        (&["inspect", "--count-by", "colour"], "--count-by"),
        (
            &["replay", "--quarantine", "--subscription", "s1"],
            "--quarantine",
        ),
        (&["replay", "--rate", "0"], "--rate"),
    ];
    for (args, needle) in cases {
        let (code, stdout, stderr) = env.cli(args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
    let (code, _, stderr) = env.cli(&["replay", "--to-tier", "retry-9y", "--execute"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    let (code, _, stderr) = env.cli(&[
        "inspect",
        "--from-archive",
        "--archive-url",
        "/nonexistent/x",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--archive-url"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_previews_by_default_and_executes_with_original_ids_and_lineage() {
    let env = Env::new("cli-replay").await;
    let dlq = env.topics.dlq().to_owned();
    let mut sent = Vec::new();
    for n in 0..12 {
        let tenant = ["acme", "globex"][n % 2];
        let reason = ["exhausted", "rejected_4xx", "exhausted"][n % 3];
        let dl = dead_letter(tenant, n, reason);
        let coords = env
            .send(&dlq, Some(tenant.as_bytes()), &encode(&dl), None)
            .await;
        sent.push((coords, dl));
    }
    env.send(&dlq, Some(b"acme"), b"not a dead letter at all", None)
        .await;

    // Preview: counts by reason and tenant, nothing written.
    let (code, stdout, stderr) = env.cli(&["replay", "--tenant", "acme"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("preview: 6 record(s) would be replayed"),
        "{stdout}"
    );
    assert!(stdout.contains("exhausted     acme    4"), "{stdout}");
    assert!(stdout.contains("rejected_4xx  acme    2"), "{stdout}");
    assert!(
        stdout.contains("scanned 13, matched 6, replayed 0, failed 0"),
        "{stdout}"
    );
    assert!(kafka::read_to_end(env.topics.deliveries())
        .await
        .unwrap()
        .is_empty());

    // Nothing matches: exit 3.
    let (code, stdout, _) = env.cli(&["replay", "--tenant", "initech", "--execute"]);
    assert_eq!(code, 3, "{stdout}");

    // Execute: the matching dead letters come back as first attempts.
    let (code, stdout, stderr) = env.cli(&[
        "replay",
        "--tenant",
        "acme",
        "--reason",
        "exhausted",
        "--execute",
        "--rate",
        "200",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("scanned 13, matched 4, replayed 4, failed 0"),
        "{stdout}"
    );
    let written = kafka::read_to_end(env.topics.deliveries()).await.unwrap();
    let mut got = BTreeSet::new();
    for msg in &written {
        let d: Delivery = decode(msg.payload().unwrap()).unwrap();
        let of = d.replay_of.clone().expect("replay_of set");
        let (_, dl) = sent
            .iter()
            .find(|((t, p, o), _)| (t, *p, *o) == (&of.topic, of.partition, of.offset))
            .expect("replay_of names a dead letter");
        assert_eq!(d.delivery_id, dl.delivery.delivery_id);
        assert_eq!(d.attempt, 0);
        assert_eq!(d.first_attempt_at, None);
        assert_eq!(d.payload, dl.delivery.payload);
        assert_eq!(msg.key(), Some(&b"acme"[..]));
        assert_eq!(dl.reason, "exhausted");
        got.insert((of.topic, of.partition, of.offset));
    }
    let want: BTreeSet<_> = sent
        .iter()
        .filter(|(_, dl)| dl.delivery.tenant_id == "acme" && dl.reason == "exhausted")
        .map(|(c, _)| c.clone())
        .collect();
    assert_eq!(got, want);
    assert_eq!(written.len(), 4);

    // To a tier, bounded by --max.
    let (code, stdout, stderr) = env.cli(&[
        "replay",
        "--tenant",
        "globex",
        "--to-tier",
        "retry-10s",
        "--max",
        "2",
        "--execute",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("matched 2, replayed 2"), "{stdout}");
    let tier = env.topics.retry("retry-10s").unwrap();
    assert_eq!(kafka::read_to_end(tier).await.unwrap().len(), 2);

    // To deliveries.strict, in the dead letters' order.
    let (code, stdout, stderr) = env.cli(&[
        "replay",
        "--tenant",
        "globex",
        "--reason",
        "exhausted",
        "--to-strict",
        "--execute",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("matched 4, replayed 4"), "{stdout}");
    let strict: Vec<String> = kafka::read_to_end(env.topics.strict())
        .await
        .unwrap()
        .iter()
        .map(|m| {
            decode::<Delivery>(m.payload().unwrap())
                .unwrap()
                .delivery_id
        })
        .collect();
    let in_dlq_order: Vec<String> = sent
        .iter()
        .filter(|(_, dl)| dl.delivery.tenant_id == "globex" && dl.reason == "exhausted")
        .map(|(_, dl)| dl.delivery.delivery_id.clone())
        .collect();
    assert_eq!(strict, in_dlq_order);
    let (code, _, stderr) = env.cli(&["replay", "--to-strict", "--to-tier", "retry-10s"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");

    // A matching record that is not a dead letter cannot be replayed: partial, exit 2.
    let (code, stdout, _) = env.cli(&["replay", "--reason", "undecodable", "--execute"]);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        stdout.contains("matched 1, replayed 0, failed 1"),
        "{stdout}"
    );
    assert_eq!(
        kafka::read_to_end(env.topics.deliveries())
            .await
            .unwrap()
            .len(),
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_and_counts_from_the_topic_and_the_archive_alike() {
    let env = Env::new("cli-inspect").await;
    let dlq = env.topics.dlq().to_owned();
    let mut coords = Vec::new();
    for n in 0..9 {
        let tenant = ["acme", "globex", "initech"][n % 3];
        let reason = ["exhausted", "rejected_4xx"][n % 2];
        let dl = dead_letter(tenant, n, reason);
        coords.push(
            env.send(&dlq, Some(tenant.as_bytes()), &encode(&dl), None)
                .await,
        );
    }
    let sink = env.start(&[]);
    let expect = coords.clone();
    wait_for_archive(env.archive_dir(), Duration::from_secs(60), move |got| {
        expect.iter().all(|c| got.contains(c))
    })
    .await;
    sink.stop().await;

    for source in [&[][..], &["--from-archive"][..]] {
        let mut args = vec!["inspect", "--output", "json", "--tenant", "acme"];
        args.extend(source);
        let (code, stdout, stderr) = env.cli(&args);
        assert_eq!(code, 0, "{stderr}");
        let rows: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 3, "{source:?}: {stdout}");
        for r in &rows {
            assert_eq!(r["tenant_id"], "acme");
            assert_eq!(r["record_type"], "DeadLetter");
            assert!(
                r["delivery_id"].as_str().unwrap().starts_with("msg_"),
                "{r}"
            );
            assert!(r["dead_at"].as_str().unwrap().ends_with('Z'), "{r}");
        }
        // The archive prunes by tenant directory: only acme's files are read.
        let scanned = if source.is_empty() { 9 } else { 3 };
        let summary: serde_json::Value = stderr
            .lines()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("{source:?}: no JSON summary on stderr: {stderr}"));
        assert_eq!(
            summary,
            serde_json::json!({"scanned": scanned, "matched": 3, "duplicates_skipped": 0}),
            "{source:?}"
        );

        let mut args = vec!["inspect", "--count-by", "reason"];
        args.extend(source);
        let (code, stdout, _) = env.cli(&args);
        assert_eq!(code, 0);
        assert!(stdout.starts_with("REASON"), "{stdout}");
        assert!(stdout.contains("exhausted     5"), "{source:?}: {stdout}");
        assert!(stdout.contains("rejected_4xx  4"), "{source:?}: {stdout}");

        let mut args = vec![
            "inspect",
            "--reason",
            "rejected_4xx",
            "--event-type",
            "invoice.*",
        ];
        args.extend(source);
        let (_, stdout, _) = env.cli(&args);
        // n in {3}: odd n are rejected_4xx; n % 3 == 0 are invoice.paid.
        assert_eq!(
            stdout.lines().count(),
            2,
            "{source:?}: header + 1 row: {stdout}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_replay_restores_the_original_bytes_key_and_headers() {
    let env = Env::new("cli-quarantine").await;
    let originals: Vec<QuarantinedEvent> = (0..3)
        .map(|i| QuarantinedEvent {
            key: Some(format!("tenant-{i}").into_bytes()),
            value: format!("\u{0}raw event {i}").into_bytes(),
            headers: vec![
                QuarantinedHeader {
                    name: "traceparent".into(),
                    value: Some(format!("00-{i}").into_bytes()),
                },
                QuarantinedHeader {
                    name: "empty".into(),
                    value: None,
                },
            ],
            reason: "not_avro".into(),
            detail: "bad magic".into(),
            source_topic: env.topics.events().into(),
            source_partition: 0,
            source_offset: i,
            quarantined_at: 1_795_995_000_000,
        })
        .collect();
    for q in &originals {
        env.send(env.topics.quarantine(), q.key.as_deref(), &encode(q), None)
            .await;
    }
    // inspect --quarantine has the quarantine's own columns.
    let (code, stdout, stderr) = env.cli(&["inspect", "--quarantine"]);
    assert_eq!(code, 0, "{stderr}");
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "SOURCE_TOPIC",
            "PARTITION",
            "OFFSET",
            "QUARANTINED_AT",
            "REASON",
            "SIZE",
            "DETAIL"
        ],
        "{stdout}"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    // Listed in partition order, not send order: each is found by its source offset.
    for q in &originals {
        let offset = q.source_offset.to_string();
        let row = rows
            .iter()
            .find(|r| r[2] == offset)
            .unwrap_or_else(|| panic!("source offset {offset}: {stdout}"));
        assert_eq!(row[..2], [env.topics.events(), "0"], "{stdout}");
        assert_eq!(
            row[4..],
            ["not_avro", &q.value.len().to_string(), "bad", "magic"],
            "{stdout}"
        );
    }
    let (code, stdout, stderr) = env.cli(&["inspect", "--quarantine", "--output", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let first: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["source_topic"], env.topics.events());
    assert_eq!(first["source_partition"], 0);
    assert!(
        first["source_offset"]
            .as_i64()
            .is_some_and(|o| (0..3).contains(&o)),
        "{first}"
    );
    assert_eq!(first["source_value_bytes"], 12);
    assert_eq!(first["detail"], "bad magic");

    let (code, stdout, stderr) = env.cli(&["replay", "--quarantine", "--tenant", "tenant-1"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("preview: 1 record(s)"), "{stdout}");
    assert!(kafka::read_to_end(env.topics.events())
        .await
        .unwrap()
        .is_empty());

    let (code, stdout, stderr) = env.cli(&["replay", "--quarantine", "--execute"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("matched 3, replayed 3, failed 0"),
        "{stdout}"
    );
    let events = kafka::read_to_end(env.topics.events()).await.unwrap();
    assert_eq!(events.len(), 3);
    for msg in &events {
        let q = originals
            .iter()
            .find(|q| q.key.as_deref() == msg.key())
            .expect("original key");
        assert_eq!(msg.payload(), Some(&q.value[..]));
        let headers: Vec<(String, Option<Vec<u8>>)> = msg
            .headers()
            .unwrap()
            .iter()
            .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
            .collect();
        let want: Vec<_> = q
            .headers
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        assert_eq!(headers, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_replay_returns_each_record_to_its_source_topic_and_refuses_others() {
    let env = Env::new("cli-quarantine-source").await;
    let tier = env.topics.retry("retry-10s").unwrap().to_owned();
    let delivery_bytes = encode(&dead_letter("acme", 1, "exhausted").delivery);
    // (source topic, value, replayed?)
    let cases: Vec<(String, Vec<u8>, bool)> = vec![
        (env.topics.events().into(), b"\x00raw event".to_vec(), true),
        // Quarantined by the dispatcher: back to the ready queue, not to events.
        (env.topics.deliveries().into(), delivery_bytes.clone(), true),
        (tier.clone(), b"\x00raw retry".to_vec(), true),
        (
            env.topics.dlq().into(),
            b"\x00not for the dlq".to_vec(),
            false,
        ),
        ("someone-else.events".into(), b"\x00foreign".to_vec(), false),
    ];
    for (i, (source, value, _)) in cases.iter().enumerate() {
        let q = QuarantinedEvent {
            key: Some(b"acme".to_vec()),
            value: value.clone(),
            headers: vec![QuarantinedHeader {
                name: "origin".into(),
                value: Some(format!("case-{i}").into_bytes()),
            }],
            reason: "unknown_fingerprint".into(),
            detail: "x".into(),
            source_topic: source.clone(),
            source_partition: 0,
            source_offset: i as i64,
            quarantined_at: 1_795_995_000_000,
        };
        env.send(env.topics.quarantine(), Some(b"acme"), &encode(&q), None)
            .await;
    }

    let (code, stdout, stderr) = env.cli(&["replay", "--quarantine"]);
    assert_eq!(code, 2, "refusals make a partial replay: {stdout} {stderr}");
    assert!(
        stdout.contains("preview: 3 record(s) would be replayed to their source topics"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("  {}: 1", env.topics.deliveries())),
        "{stdout}"
    );
    assert!(stdout.contains("failed 0, refused 2"), "{stdout}");
    assert!(stderr.contains("is not a pipeline topic"), "{stderr}");

    let (code, stdout, stderr) = env.cli(&["replay", "--quarantine", "--execute"]);
    assert_eq!(code, 2, "{stdout} {stderr}");
    assert!(
        stdout.contains("matched 5, replayed 3, failed 0, refused 2"),
        "{stdout}"
    );
    assert!(stderr.contains("someone-else.events"), "{stderr}");
    for (i, (source, value, replayed)) in cases.iter().enumerate() {
        if !replayed {
            continue;
        }
        let got = kafka::read_to_end(source).await.unwrap();
        assert_eq!(got.len(), 1, "{source}");
        assert_eq!(got[0].payload(), Some(&value[..]), "{source}");
        assert_eq!(got[0].key(), Some(&b"acme"[..]));
        let h = got[0].headers().unwrap().get(0);
        assert_eq!(
            (h.key, h.value),
            ("origin", Some(format!("case-{i}").as_bytes()))
        );
    }
    let deliveries = kafka::read_to_end(env.topics.deliveries()).await.unwrap();
    let back: Delivery = decode(deliveries[0].payload().unwrap()).unwrap();
    assert_eq!(
        back.replay_of, None,
        "a quarantined record is returned as it was"
    );
    assert!(kafka::read_to_end(env.topics.dlq())
        .await
        .unwrap()
        .is_empty());
}
