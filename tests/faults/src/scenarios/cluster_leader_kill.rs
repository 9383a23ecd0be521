//! `cluster_leader_kill`: on the three-broker cluster (replication factor 3,
//! `min.insync.replicas` 2), under load, kill -9 of the broker that leads the
//! busiest `deliveries` partition (and, as the cluster spreads leaders, an
//! `events` partition), down until it is fenced and its partitions are led
//! elsewhere, then started again on its data. The stages keep running with
//! the services' defaults (the circuit breaker on): none may exit, nothing
//! may be lost or written twice, and the report says what the kill cost
//! (attempts in flight, duplicates, recovery time).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hookline_testkit::pipeline::Pipeline;
use rand::{rngs::StdRng, Rng};

use super::{
    on_cluster::{self, partitions, Fault, Part},
    Report,
};
use crate::cluster;

const NAME: &str = "cluster_leader_kill";
const RATE: f64 = 100.0;
const EVENTS: u64 = 5500;

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    let on_cluster::Running {
        mut p,
        work,
        load,
        load_start,
    } = on_cluster::start(NAME, r, EVENTS, RATE).await?;
    // The targets are looked up during the warm-up (kafka.sh's tools are
    // JVMs, seconds to start on a busy machine); the kill comes after both.
    let warm_up = tokio::time::sleep(Duration::from_millis(rng.random_range(15_000..17_000)));
    let (targets, ()) = tokio::join!(targets(&p), warm_up);
    let Targets {
        busiest,
        total,
        leader,
        led_events,
        group_coordinator,
    } = targets?;
    let mut faults = vec![Fault::now(&p, format!("kill -9 broker {leader}")).await];
    cluster::kafka_sh(&["kill", &leader.to_string()]).await?;
    r.inject(format!(
        "t={:.1}s kill -9 broker {leader}: leader of deliveries[{}] (the busiest, {} of {total} records) and of events[{}]; \
         the dispatcher's group coordinator is broker {group_coordinator} ({} events sent)",
        (faults[0].at - load_start).as_secs_f64(),
        busiest.partition,
        busiest.high,
        if led_events.is_empty() {
            "none".to_owned()
        } else {
            led_events.join(", ")
        },
        load.sent()
    ));
    let down = Duration::from_millis(rng.random_range(14_000..17_000));
    let moved = on_cluster::wait_led_elsewhere(&p, busiest.partition, leader as i32, down).await;
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

/// Where the kill lands, looked up under load.
#[derive(Debug)]
struct Targets {
    /// The busiest `deliveries` partition (most records so far).
    busiest: Part,
    /// Records on all `deliveries` partitions.
    total: i64,
    /// Its leader (`kafka.sh cluster leader`).
    leader: u32,
    /// The `events` partitions that broker leads.
    led_events: Vec<String>,
    /// The coordinator of the dispatcher's group (`kafka.sh cluster
    /// coordinator group`): when it is the leader too, the kill also costs
    /// the dispatcher its group session.
    group_coordinator: u32,
}

async fn targets(p: &Pipeline) -> anyhow::Result<Targets> {
    // Tenants key the deliveries: a few hundred records show the busiest.
    let started = Instant::now();
    let deliveries = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = partitions(p.topics.deliveries(), true).await?;
        if now.iter().map(|d| d.high).sum::<i64>() >= 300 {
            break now;
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("fanout wrote under 300 deliveries in 30 s: {now:?}");
        }
    };
    let busiest = deliveries
        .iter()
        .max_by_key(|d| d.high)
        .context("deliveries has no partition")?
        .clone();
    let partition = busiest.partition.to_string();
    let ask_leader = ["leader", p.topics.deliveries(), partition.as_str()];
    let group = format!("{}dispatcher", p.topics.prefix());
    let ask_group = ["coordinator", "group", group.as_str()];
    let (leader, group_coordinator) =
        tokio::join!(cluster::node(&ask_leader), cluster::node(&ask_group));
    let (leader, group_coordinator) = (leader?, group_coordinator?);
    let led_events = partitions(p.topics.events(), false)
        .await?
        .iter()
        .filter(|e| e.leader == leader as i32)
        .map(|e| e.partition.to_string())
        .collect();
    Ok(Targets {
        busiest,
        total: deliveries.iter().map(|d| d.high).sum(),
        leader,
        led_events,
        group_coordinator,
    })
}
