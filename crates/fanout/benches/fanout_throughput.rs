//! Fan-out throughput on the real Kafka broker: events/s in and deliveries/s
//! out through the transactional loop, measured from the first commit after
//! a warm-up to the moment the group has committed every event. Prints
//! figures; asserts nothing.
//!
//! `cargo bench -p hookline-fanout --bench fanout_throughput`
//! Parameters (env): BENCH_EVENTS (default 100000), BENCH_FANOUT subscriptions
//! per event (default 3), BENCH_PAYLOAD bytes (default 512), BENCH_TENANTS (default 20),
//! BENCH_TXN_EVENTS events per transaction (default 500, the service default).

use std::time::{Duration, Instant};

use clap::Parser;
use hookline_envelope::encode;
use hookline_testkit::{kafka, records};
use rdkafka::producer::FutureRecord;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    config: hookline_fanout::Config,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let events = env_usize("BENCH_EVENTS", 100_000);
    let fanout = env_usize("BENCH_FANOUT", 3);
    let payload = env_usize("BENCH_PAYLOAD", 512);
    let tenants = env_usize("BENCH_TENANTS", 20);
    let txn_events = env_usize("BENCH_TXN_EVENTS", 500).to_string();
    let prefix = format!("{}.", kafka::unique_name("bench-fanout"));
    let topics = kafka::create_hookline_topics(&prefix).await?;
    let producer = kafka::producer();
    let group = format!("{prefix}fanout");

    for t in 0..tenants {
        for s in 0..fanout {
            let sub = records::subscription(
                &format!("t{t}-s{s}"),
                &format!("t{t}"),
                &["*"],
                "https://hooks.example/in",
            );
            producer
                .send(
                    FutureRecord::to(topics.subscriptions())
                        .key(&sub.subscription_id)
                        .payload(&encode(&sub)),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(e, _)| e)?;
        }
    }
    let brokers = kafka::brokers();
    let config = Args::try_parse_from([
        "bench",
        "--brokers",
        &brokers,
        "--topic-prefix",
        &prefix,
        "--http-addr",
        "127.0.0.1:0",
        "--group-id",
        &group,
        "--transactional-id",
        &format!("{prefix}txn"),
        "--txn-max-events",
        &txn_events,
    ])?
    .config;
    let stop = CancellationToken::new();
    let task = tokio::spawn(hookline_fanout::run(config, stop.clone()));

    // Warm-up: one event, drained, so the group is joined and the table loaded.
    let warm = encode(&records::event("warm", "t0", "bench.warm"));
    producer
        .send(
            FutureRecord::to(topics.events()).key("t0").payload(&warm),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)?;
    wait_drained(&group, topics.events(), 1).await?;

    eprintln!(
        "producing {events} events ({payload} B payload, {tenants} tenants, fan-out {fanout})"
    );
    let produce_started = Instant::now();
    let records = (0..events).map(|i| {
        let tenant = format!("t{}", i % tenants);
        let mut e = records::event(&format!("evt-{i}"), &tenant, "bench.created");
        e.payload = vec![b'x'; payload];
        (tenant.into_bytes(), encode(&e))
    });
    kafka::produce_many(&producer, topics.events(), records).await?;
    let produce_secs = produce_started.elapsed().as_secs_f64();

    let (start_committed, _) = kafka::group_progress(&group, topics.events()).await?;
    let t0 = Instant::now();
    wait_drained(&group, topics.events(), 1 + events as i64).await?;
    let secs = t0.elapsed().as_secs_f64();
    let processed = (1 + events as i64 - start_committed) as f64;
    stop.cancel();
    task.await??;

    println!(
        "fanout throughput on real Kafka ({} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!("  events                {events}");
    println!("  fan-out               {fanout} subscriptions per event");
    println!("  payload               {payload} B");
    println!("  events / transaction  {txn_events} (max)");
    println!(
        "  produce (client)      {:.0} events/s",
        events as f64 / produce_secs
    );
    println!("  measured window       {secs:.2} s for {processed:.0} events (fan-out overlapped production for the rest)");
    println!("  events in             {:.0} events/s", processed / secs);
    println!(
        "  deliveries out        {:.0} deliveries/s",
        processed * fanout as f64 / secs
    );
    Ok(())
}

async fn wait_drained(group: &str, topic: &str, total: i64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let (committed, high) = kafka::group_progress(group, topic).await?;
        if committed >= total && committed == high {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "not drained: {committed}/{high}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
