//! Prints how late retries are attempted behind their `due_at` under load (a
//! measurement, not a timed test). A paced stream of retry records is produced
//! to a tier the way failing attempts write them — `due_at = now + delay + jitter`
//! with jitter uniform in [0, max] — spread over tenants and partitions; the
//! receiver answers 204, and each record's lateness is its arrival at the
//! receiver minus its `due_at`. Negative lateness would be a bug (never early).
//!
//! With jitter, a record can wait behind a partition head due up to `max` later
//! (the head blocks its partition), so lateness is bounded by jitter plus the
//! fetch after a resume; `BENCH_JITTER_MS=0` isolates the scheduler's own delay.
//!
//! Needs the real broker (`HOOKLINE_TEST_BROKERS`, or started by testkit):
//! `cargo bench -p hookline-dispatcher --bench retry_lateness`
//! Knobs: `BENCH_RATE` records/s (default 500), `BENCH_SECONDS` (default 10),
//! `BENCH_JITTER_MS` (default 500, the default ladder's), tier delay 2 s.

#![allow(clippy::unwrap_used)]

use std::{
    collections::HashMap,
    time::{Duration, Instant, SystemTime},
};

use clap::Parser;
use hookline_core::epoch;
use hookline_envelope::{encode, Subscription, Topics};
use hookline_testkit::{kafka, receiver::Receiver, records};
use rdkafka::producer::FutureRecord;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    config: hookline_dispatcher::Config,
}

const TENANTS: usize = 20;
const DELAY_MS: i64 = 2000;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let rate = env_or("BENCH_RATE", 500);
    let seconds = env_or("BENCH_SECONDS", 10);
    let jitter = env_or("BENCH_JITTER_MS", 500) as i64;

    let prefix = format!("{}.", kafka::unique_name("disp-lateness"));
    let topics = Topics::new(&prefix, &["t1"]).unwrap();
    let plain: Vec<(&str, i32)> = topics
        .all()
        .into_iter()
        .filter(|t| !topics.tables().contains(t))
        .map(|t| (t, 4))
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
    let subs: Vec<Subscription> = (0..TENANTS)
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
    let group = format!("{prefix}dispatcher");
    let jitter_flag = format!("{jitter}ms");
    let tiers_flag = format!("t1={DELAY_MS}ms");
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
        "--retry-tiers",
        &tiers_flag,
        "--retry-jitter",
        &jitter_flag,
        "--log",
        "warn",
    ];
    hookline_runtime::telemetry::init_logging("warn", hookline_runtime::config::LogFormat::Text)
        .unwrap();
    let config = Args::try_parse_from(args).unwrap().config;
    let stop = CancellationToken::new();
    let task = tokio::spawn(hookline_dispatcher::run(config, stop.clone()));
    tokio::time::sleep(Duration::from_secs(5)).await; // joined and caught up

    let (_, tier) = topics.retries().next().unwrap();
    let total = rate * seconds;
    let mut due: HashMap<String, i64> = HashMap::with_capacity(total);
    let start = Instant::now();
    let mut pending = Vec::new();
    for n in 0..total {
        let at = start + Duration::from_secs_f64(n as f64 / rate as f64);
        tokio::time::sleep_until(at.into()).await;
        let sub = &subs[n % TENANTS];
        let event_id = format!("late-{n}");
        let now = epoch::millis(SystemTime::now());
        let d = records::delivery(sub, &event_id, now)
            .payload(format!(r#"{{"event":"{event_id}"}}"#).as_bytes())
            .attempted(1, now, now, "http_503")
            .due_at(now + DELAY_MS + (rand::random::<f64>() * jitter as f64) as i64)
            .build();
        due.insert(d.delivery_id.clone(), d.due_at);
        let value = encode(&d);
        let key = d.tenant_id.clone();
        let p = producer.clone();
        let topic = tier.to_owned();
        pending.push(tokio::spawn(async move {
            p.send(
                FutureRecord::to(&topic).key(&key).payload(&value),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        }));
    }
    for p in pending {
        p.await.unwrap();
    }
    assert!(
        receiver
            .wait_until(Duration::from_secs(120), |r| r.len() >= total)
            .await,
        "not every retry arrived"
    );
    stop.cancel();
    let _ = task.await;

    let mut late: Vec<f64> = receiver
        .requests()
        .iter()
        .map(|r| {
            let at = epoch::millis(r.received_at);
            (at - due[r.header("webhook-id")]) as f64
        })
        .collect();
    late.sort_by(|a, b| a.total_cmp(b));
    let early = late.iter().filter(|l| **l < 0.0).count();
    println!(
        "retry lateness behind due_at: {total} retries at {rate}/s over 4 partitions, tier delay {DELAY_MS} ms, jitter ≤ {jitter} ms"
    );
    println!(
        "  p50 {:>7.1} ms   p90 {:>7.1} ms   p99 {:>7.1} ms   max {:>7.1} ms   early {early}",
        pct(&late, 0.50),
        pct(&late, 0.90),
        pct(&late, 0.99),
        late.last().copied().unwrap()
    );
}
