//! `cluster_leader_kill`: on the three-broker cluster (replication factor 3,
//! `min.insync.replicas` 2), under load, kill -9 of the broker that leads the
//! busiest `deliveries` partition (and, as the cluster spreads leaders, an
//! `events` partition), down until it is fenced and its partitions are led
//! elsewhere, then started again on its data. The stages keep running with
//! the services' defaults (the circuit breaker on): none may exit, nothing
//! may be lost or written twice, and the report says what the kill cost
//! (attempts in flight, duplicates, recovery time).

use std::time::{Duration, Instant};

use anyhow::Context;
use hookline_testkit::pipeline::Pipeline;
use rand::{rngs::StdRng, Rng};

use super::{
    on_cluster::{self, cluster_spec, partitions, Fault, Part, Work, TENANTS},
    Report,
};
use crate::{cluster, load};

const NAME: &str = "cluster_leader_kill";
const RATE: f64 = 100.0;
const EVENTS: u64 = 5500;

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    cluster::ensure_harness_cluster(NAME)?;
    // Every broker up (a previous scenario restarted some).
    cluster::kafka_sh(&["up"]).await?;
    let mut p = Pipeline::create(cluster_spec(NAME)).await?;
    let work = Work::install(&mut p, EVENTS).await?;
    p.start().await?;
    let load = load::start(&mut p, &TENANTS, EVENTS, RATE)?;
    let load_start = Instant::now();
    r.inject(format!(
        "load: {EVENTS} events at {RATE}/s over 4 tenants, {} expected deliveries; topics with 3 replicas, min ISR 2",
        p.expected()
    ));
    // The targets are looked up during the warm-up (kafka.sh's tools are
    // JVMs, seconds to start on a busy machine); the kill comes after both.
    let warm_up = tokio::time::sleep(Duration::from_millis(rng.random_range(15_000..17_000)));
    let (targets, ()) = tokio::join!(targets(&p), warm_up);
    let (busiest, total, leader, led_events) = targets?;
    let mut faults = vec![Fault::now(&p, format!("kill -9 broker {leader}")).await];
    cluster::kafka_sh(&["kill", &leader.to_string()]).await?;
    r.inject(format!(
        "t={:.1}s kill -9 broker {leader}: leader of deliveries[{}] (the busiest, {} of {} records) and of events[{}] ({} events sent)",
        (faults[0].at - load_start).as_secs_f64(),
        busiest.partition,
        busiest.high,
        total,
        if led_events.is_empty() { "none".to_owned() } else { led_events.join(", ") },
        load.sent()
    ));
    let down = Duration::from_millis(rng.random_range(14_000..17_000));
    let moved = wait_led_elsewhere(&p, busiest.partition, leader as i32, down).await;
    tokio::time::sleep(down.saturating_sub(faults[0].at.elapsed())).await;
    r.inject(match moved {
        Some((by, after)) => format!(
            "deliveries[{}] led by broker {by} {:.1} s after the kill",
            busiest.partition,
            after.as_secs_f64()
        ),
        None => format!(
            "deliveries[{}] still without another leader {:.1} s after the kill",
            busiest.partition,
            down.as_secs_f64()
        ),
    });

    let (restarted, sent) = (Instant::now(), load.sent());
    faults[0].restarted = Some(restarted);
    cluster::kafka_sh(&["start", &leader.to_string()]).await?;
    let answering = restarted.elapsed();
    let in_sync = on_cluster::wait_in_sync(&p, Duration::from_secs(60)).await?;
    r.inject(format!(
        "t={:.1}s broker {leader} started again after {:.1} s down: answering in {:.1} s, every partition back to 3 in-sync replicas in {:.1} s ({} events sent)",
        (restarted - load_start).as_secs_f64(),
        (restarted - faults[0].at).as_secs_f64(),
        answering.as_secs_f64(),
        in_sync.as_secs_f64(),
        sent
    ));
    load.finish().await?;
    on_cluster::finish(&mut p, r, &work, EVENTS).await?;
    on_cluster::measure(&p, r, &faults, load_start, RATE);
    p.stop().await?;
    Ok(())
}

/// The busiest `deliveries` partition (most records so far), the records of
/// all, its leader (`kafka.sh cluster leader`), and the `events` partitions
/// that broker leads.
async fn targets(p: &Pipeline) -> anyhow::Result<(Part, i64, u32, Vec<String>)> {
    tokio::time::sleep(Duration::from_secs(8)).await;
    let deliveries = partitions(p.topics.deliveries(), true).await?;
    let busiest = deliveries
        .iter()
        .max_by_key(|d| d.high)
        .context("deliveries has no partition")?
        .clone();
    let leader = cluster::node(&[
        "leader",
        p.topics.deliveries(),
        &busiest.partition.to_string(),
    ])
    .await?;
    let led_events = partitions(p.topics.events(), false)
        .await?
        .iter()
        .filter(|e| e.leader == leader as i32)
        .map(|e| e.partition.to_string())
        .collect();
    let total = deliveries.iter().map(|d| d.high).sum();
    Ok((busiest, total, leader, led_events))
}

/// Polls the metadata until `partition` of `deliveries` has a leader other
/// than `dead`: which broker, and how long after the kill (None within `limit`).
async fn wait_led_elsewhere(
    p: &Pipeline,
    partition: i32,
    dead: i32,
    limit: Duration,
) -> Option<(i32, Duration)> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Ok(parts) = partitions(p.topics.deliveries(), false).await {
            if let Some(now) = parts.iter().find(|x| x.partition == partition) {
                if now.leader >= 0 && now.leader != dead {
                    return Some((now.leader, started.elapsed()));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}
