//! Memory and load time of the live subscription table with many
//! subscriptions (default 100,000), read from the real Kafka broker, plus the
//! cost of one lookup. Prints figures; asserts nothing.
//!
//! `cargo bench -p hookline-fanout --bench subscription_table_memory`
//! Parameters (env): BENCH_SUBSCRIPTIONS (default 100000), BENCH_TENANTS (default 10000).

use std::time::{Duration, Instant};

use clap::Parser;
use hookline_envelope::encode;
use hookline_runtime::subscriptions;
use hookline_testkit::{kafka, records};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    common: hookline_runtime::config::CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("BENCH_SUBSCRIPTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let tenants: usize = std::env::var("BENCH_TENANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let prefix = format!("{}.", kafka::unique_name("bench-subs"));
    let topics = kafka::create_hookline_topics(&prefix).await?;
    let producer = kafka::producer();
    eprintln!("writing {n} subscriptions over {tenants} tenants");
    let records = (0..n).map(|i| {
        let mut sub = records::subscription(
            &format!("sub-{i:07}"),
            &format!("tenant-{:05}", i % tenants),
            &["invoice.*", "order.created", "customer.updated"],
            &format!("https://hooks-{i}.tenant.example.com/webhooks/hookline"),
        );
        sub.secret_ref = format!("tenant-{:05}-signing", i % tenants);
        (sub.subscription_id.clone().into_bytes(), encode(&sub))
    });
    kafka::produce_many(&producer, topics.subscriptions(), records).await?;

    let common = Args::try_parse_from(["bench", "--brokers", &kafka::brokers()])?.common;
    let before = hookline_testkit::rss_kib();
    let started = Instant::now();
    let stop = CancellationToken::new();
    let (table, task) =
        subscriptions::follow(&common, topics.subscriptions(), "bench", None, stop.clone())?;
    anyhow::ensure!(table.wait_caught_up().await, "table did not catch up");
    let load = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = hookline_testkit::rss_kib();
    anyhow::ensure!(table.len() == n, "loaded {} of {n}", table.len());

    let lookups = 1_000_000;
    let t = Instant::now();
    let mut matched = 0usize;
    for i in 0..lookups {
        matched += table
            .matching(&format!("tenant-{:05}", i % tenants), "invoice.paid")
            .len();
    }
    let per_lookup = t.elapsed() / lookups as u32;
    stop.cancel();
    let _ = task.await;

    println!("subscription table with {n} subscriptions ({tenants} tenants)");
    println!(
        "  load from Kafka       {:.2} s ({:.0} records/s)",
        load.as_secs_f64(),
        n as f64 / load.as_secs_f64()
    );
    println!(
        "  RSS before / after    {} MiB / {} MiB",
        before / 1024,
        after / 1024
    );
    println!(
        "  table memory (RSS Δ)  {} MiB ({} B per subscription)",
        (after.saturating_sub(before)) / 1024,
        after.saturating_sub(before) * 1024 / n as u64
    );
    println!(
        "  matching() lookup     {:?} per call ({matched} matches in {lookups} lookups)",
        per_lookup
    );
    Ok(())
}
