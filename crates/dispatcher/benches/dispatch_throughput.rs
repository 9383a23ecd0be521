//! Prints dispatcher figures on this machine (a measurement, not a timed test):
//!
//! 1. throughput: deliveries/s draining a backlog to a local receiver answering 204;
//! 2. latency: at a paced load, the time from a record's production to its POST
//!    arriving (end to end), the time from production to a plain consumer in
//!    another group receiving the same record (Kafka alone), and per record the
//!    difference — the latency the dispatcher adds.
//!
//! Needs the real broker (`HOOKLINE_TEST_BROKERS`, or started by testkit):
//! `cargo bench -p hookline-dispatcher --bench dispatch_throughput`
//! Sizes: `BENCH_DELIVERIES` (default 20000), `BENCH_RATE` per second (default 500),
//! `BENCH_SECONDS` of paced load (default 10).

#![allow(clippy::unwrap_used)]

use std::{
    collections::HashMap,
    time::{Duration, Instant, SystemTime},
};

use clap::Parser;
use hookline_core::epoch;
use hookline_envelope::{encode, Delivery, Subscription, Topics};
use hookline_runtime::kafka::{Offsets, ReadCommitted as _, StartAt};
use hookline_testkit::{kafka, receiver::Receiver, records};
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    message::Message,
    producer::FutureRecord,
};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    config: hookline_dispatcher::Config,
}

const SUBSCRIPTIONS: usize = 20;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn delivery(sub: &Subscription, tag: &str, n: usize) -> Delivery {
    let event_id = format!("{tag}-{}-{n}", sub.subscription_id);
    records::delivery(sub, &event_id, epoch::millis(SystemTime::now()))
        .payload(format!(r#"{{"event":"{event_id}","amount":4200,"currency":"EUR","note":"benchmark payload of a typical small webhook"}}"#).as_bytes())
        .build()
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn summary(name: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.total_cmp(b));
    println!(
        "  {name:<34} p50 {:>7.2} ms   p99 {:>7.2} ms   max {:>7.2} ms   (n={})",
        pct(&v, 0.50),
        pct(&v, 0.99),
        v.last().copied().unwrap_or(f64::NAN),
        v.len()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let backlog = env_or("BENCH_DELIVERIES", 20_000);
    let rate = env_or("BENCH_RATE", 500);
    let seconds = env_or("BENCH_SECONDS", 10);

    let prefix = format!("{}.", kafka::unique_name("disp-bench"));
    let topics = Topics::with_prefix(&prefix).unwrap();
    let plain: Vec<(&str, i32)> = topics
        .all()
        .into_iter()
        .filter(|t| !topics.tables().contains(t))
        .map(|t| (t, 3))
        .collect();
    kafka::create_topics(&plain, &[]).await.unwrap();
    kafka::create_topics(
        &topics.tables().map(|t| (t, 1)),
        &[("cleanup.policy", "compact")],
    )
    .await
    .unwrap();
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(
        secrets.path().join("bench"),
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
    )
    .unwrap();
    let receiver = Receiver::start().await.unwrap();
    let producer = kafka::producer();

    let subs: Vec<Subscription> = (0..SUBSCRIPTIONS)
        .map(|i| Subscription {
            subscription_id: format!("sub-{i}"),
            tenant_id: format!("tenant-{i}"),
            url: receiver.url("/hook"),
            event_types: vec!["*".into()],
            secret_ref: "bench".into(),
            enabled: true,
            max_in_flight: 16,
            rate_limit_per_s: None,
            disabled_reason: None,
            disabled_at: None,
            ordering: "unordered".into(),
            version: 1,
            updated_at: epoch::millis(SystemTime::now()),
        })
        .collect();
    for s in &subs {
        producer
            .send(
                FutureRecord::to(topics.subscriptions())
                    .key(s.subscription_id.as_bytes())
                    .payload(&encode(s)),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }

    // 1. Throughput: the whole backlog is in Kafka before the dispatcher starts.
    let records: Vec<Delivery> = (0..backlog)
        .map(|n| delivery(&subs[n % SUBSCRIPTIONS], "backlog", n))
        .collect();
    kafka::produce_many(
        &producer,
        topics.deliveries(),
        records
            .iter()
            .map(|d| (d.tenant_id.as_bytes().to_vec(), encode(d))),
    )
    .await
    .unwrap();
    let group = format!("{prefix}dispatcher");
    let args = [
        "hookline-dispatcher",
        "--brokers",
        &kafka::brokers(),
        "--topic-prefix",
        &prefix,
        "--http-addr",
        "127.0.0.1:0",
        "--group-id",
        &group,
        "--secrets-dir",
        secrets.path().to_str().unwrap(),
        "--egress-allow-http",
        "--egress-allow-cidr",
        "127.0.0.0/8",
        "--log",
        "warn",
    ];
    hookline_runtime::telemetry::init_logging("warn", hookline_runtime::config::LogFormat::Text)
        .unwrap();
    let config = Args::try_parse_from(args).unwrap().config;
    let stop = CancellationToken::new();
    let task = tokio::spawn(hookline_dispatcher::run(config, stop.clone()));
    assert!(
        receiver
            .wait_until(Duration::from_secs(600), |r| r.len() >= backlog)
            .await,
        "backlog not delivered"
    );
    let reqs = receiver.requests();
    let first = reqs.iter().map(|r| r.at).min().unwrap();
    let last = reqs.iter().map(|r| r.at).max().unwrap();
    let secs = last.duration_since(first).as_secs_f64();
    println!("dispatcher benchmark (2 cores shared with Kafka, receiver and producer)");
    println!(
        "  throughput: {backlog} deliveries in {secs:.2} s = {:.0} deliveries/s ({SUBSCRIPTIONS} subscriptions × max_in_flight 16, 3 partitions, 204 receiver)",
        backlog as f64 / secs
    );

    // 2. Latency at a paced load, against a plain consumer of the same records.
    let plain: StreamConsumer = kafka::client_config()
        .set("group.id", format!("{prefix}plain"))
        .read_committed(StartAt::Latest, Offsets::Explicit)
        .create()
        .unwrap();
    plain.subscribe(&[topics.deliveries()]).unwrap();
    // Wait for the plain consumer's assignment before producing.
    let warm = Instant::now();
    while plain.assignment().map(|a| a.count()).unwrap_or(0) == 0
        && warm.elapsed() < Duration::from_secs(30)
    {
        let _ = tokio::time::timeout(Duration::from_millis(100), plain.recv()).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen_plain = tokio::spawn(async move {
        let mut at: HashMap<String, SystemTime> = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(seconds as u64 + 30);
        while Instant::now() < deadline {
            if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(500), plain.recv()).await
            {
                if let Ok(d) =
                    hookline_envelope::decode::<Delivery>(m.payload().unwrap_or_default())
                {
                    at.entry(d.delivery_id).or_insert_with(SystemTime::now);
                }
            }
        }
        at
    });
    let before = receiver.count();
    let total = rate * seconds;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let mut next = tokio::time::Instant::now();
    let mut paced = Vec::with_capacity(total);
    let mut acks = Vec::with_capacity(total);
    for n in 0..total {
        next += interval;
        tokio::time::sleep_until(next).await;
        let d = delivery(&subs[n % SUBSCRIPTIONS], "paced", n);
        let ack = producer
            .send_result(
                FutureRecord::to(topics.deliveries())
                    .key(d.tenant_id.as_bytes())
                    .payload(&encode(&d)),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        acks.push(ack);
        paced.push(d);
    }
    for ack in acks {
        ack.await.unwrap().map_err(|(e, _)| e).unwrap();
    }
    assert!(
        receiver
            .wait_until(Duration::from_secs(120), |r| r.len() >= before + total)
            .await
    );
    let plain_at = seen_plain.await.unwrap();
    let arrived: HashMap<String, SystemTime> = receiver.requests()[before..]
        .iter()
        .map(|r| (r.header("webhook-id").to_owned(), r.received_at))
        .collect();
    let ms = |a: SystemTime, b: SystemTime| {
        a.duration_since(b)
            .map(|d| d.as_secs_f64() * 1e3)
            .unwrap_or_else(|e| -e.duration().as_secs_f64() * 1e3)
    };
    let (mut e2e, mut kafka_only, mut added) = (Vec::new(), Vec::new(), Vec::new());
    for d in &paced {
        let created = epoch::from_millis(d.created_at);
        let Some(&http) = arrived.get(&d.delivery_id) else {
            continue;
        };
        e2e.push(ms(http, created));
        if let Some(&k) = plain_at.get(&d.delivery_id) {
            kafka_only.push(ms(k, created));
            added.push(ms(http, k));
        }
    }
    println!(
        "  latency at {rate}/s for {seconds} s ({} deliveries):",
        paced.len()
    );
    summary("produce → POST arrives (end to end)", e2e);
    summary("produce → plain consumer (Kafka)", kafka_only);
    summary("added by the dispatcher (per record)", added);

    stop.cancel();
    task.await.unwrap().unwrap();
}
