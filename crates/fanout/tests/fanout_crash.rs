//! Exactly-once across a crash: the real `hookline-fanout` binary is killed
//! with SIGKILL mid-stream and restarted; a `read_committed` reader of
//! `deliveries` then finds exactly one delivery per (event, matching
//! subscription): none missing, none doubled.

mod common;

use std::{
    collections::{HashMap, HashSet},
    process::{Command, Stdio},
    time::Duration,
};

use common::Env;
use hookline_envelope::{delivery_id, encode};
use hookline_testkit::{
    kafka,
    process::KillOnDrop,
    records::{event, subscription},
};
use rdkafka::producer::FutureRecord;

const EVENTS: usize = 6000;
const TYPES: [&str; 4] = [
    "invoice.paid",
    "invoice.voided",
    "order.created",
    "user.deleted",
];

/// Small transactions (1,200 for the stream) keep fanout mid-stream for
/// seconds, so the first look at its committed offset (every 50 ms, each a
/// group query) finds it part of the way through. At 50 events a
/// transaction (120 in all) a fanout whose transactions got ~3 ms shorter
/// finished the whole stream before that first look in 2 of 6 runs.
const TXN_MAX_EVENTS: &str = "5";

fn spawn(env: &Env) -> KillOnDrop {
    let args = env.args(&[
        "--txn-max-events",
        TXN_MAX_EVENTS,
        "--group-session-timeout",
        "6s",
    ]);
    Command::new(env!("CARGO_BIN_EXE_hookline-fanout"))
        .args(&args[1..])
        .env("HOOKLINE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start hookline-fanout")
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_neither_loses_nor_duplicates_a_delivery() {
    let env = Env::new("fanout-crash").await;
    let url = "https://hooks.example/in";
    // Several subscriptions per tenant with overlapping filters.
    let subs = [
        subscription("t0-all", "t0", &["*"], url),
        subscription("t0-inv", "t0", &["invoice.*"], url),
        subscription("t1-all", "t1", &["*"], url),
        subscription("t1-ord", "t1", &["order.created"], url),
        subscription("t2-inv", "t2", &["invoice.*"], url),
        subscription("t2-usr", "t2", &["user.*"], url),
        subscription("t3-all", "t3", &["*"], url),
    ];
    for s in &subs {
        env.put(s).await;
    }
    // Expected (event, subscription) pairs, from the rules themselves.
    let mut expected = HashSet::new();
    let payloads: Vec<(String, Vec<u8>)> = (0..EVENTS)
        .map(|i| {
            let tenant = format!("t{}", i % 5);
            let ty = TYPES[i % TYPES.len()];
            let e = event(&format!("evt-{i}"), &tenant, ty);
            for s in subs.iter().filter(|s| s.tenant_id == tenant) {
                let wants = s.event_types.iter().any(|p| {
                    p == "*"
                        || p == ty
                        || p.strip_suffix('*').is_some_and(|pre| ty.starts_with(pre))
                });
                if wants {
                    expected.insert(delivery_id(&e.event_id, &s.subscription_id));
                }
            }
            (tenant, encode(&e))
        })
        .collect();
    let producer = kafka::producer();
    let mut futures = Vec::with_capacity(EVENTS);
    for (tenant, bytes) in &payloads {
        futures.push(
            producer.send(
                FutureRecord::to(env.topics.events())
                    .key(tenant)
                    .payload(bytes),
                Duration::from_secs(30),
            ),
        );
    }
    for f in futures {
        f.await.map_err(|(e, _)| e).unwrap();
    }

    let mut first = spawn(&env);
    // Kill it once it has committed part of the stream, not all of it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (committed, high) = kafka::group_progress(&env.group, env.topics.events())
            .await
            .unwrap();
        if committed > 0 {
            assert!(
                committed < high,
                "fanout finished before it could be killed; raise EVENTS"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "fanout made no progress in 90 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.kill();

    let mut second = spawn(&env);
    env.drained(Duration::from_secs(120)).await;
    let deliveries = env.deliveries().await;
    second.kill();

    let mut seen: HashMap<&str, usize> = HashMap::new();
    for d in &deliveries {
        *seen.entry(d.delivery_id.as_str()).or_default() += 1;
    }
    let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(
        doubled.is_empty(),
        "duplicated deliveries, e.g. {doubled:?}"
    );
    let got: HashSet<String> = seen.keys().map(|s| s.to_string()).collect();
    let missing = expected.difference(&got).count();
    let extra = got.difference(&expected).count();
    assert_eq!((missing, extra), (0, 0), "missing or unexpected deliveries");
    assert_eq!(deliveries.len(), expected.len());
}
