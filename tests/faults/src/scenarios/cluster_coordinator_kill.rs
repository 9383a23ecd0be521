//! `cluster_coordinator_kill`: on the three-broker cluster, under load, kill -9
//! of the broker that coordinates fanout's transactional id (its open
//! transaction, its offsets commits), then, once that broker is back and in
//! sync again, of the one that coordinates the dispatcher's consumer group
//! (its offsets, its members' heartbeats). Each is down until fenced, so the
//! coordinator moves to another broker, then started again on its data. The
//! stages keep running with the services' defaults (the circuit breaker on):
//! none may exit, nothing may be lost or written twice.

use std::time::{Duration, Instant};

use rand::{rngs::StdRng, Rng};

use super::{
    on_cluster::{self, Fault},
    Report,
};
use crate::cluster;

const NAME: &str = "cluster_coordinator_kill";
const RATE: f64 = 100.0;
/// 120 s of load: a broker's restart takes 7 s on an idle machine but up to
/// a minute on a busy one, and the second kill must still meet the load.
const EVENTS: u64 = 12_000;

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    let on_cluster::Running {
        mut p,
        work,
        load,
        load_start,
    } = on_cluster::start(NAME, r, EVENTS, RATE).await?;
    // The ids `Pipeline` starts the stages with: fanout's transactional id
    // and the dispatcher's group.
    let txn_id = format!("{}fanout-txn", p.topics.prefix());
    let group = format!("{}dispatcher", p.topics.prefix());
    let targets = [
        ("transaction", &txn_id, "fanout's transactional id"),
        ("group", &group, "the dispatcher's group"),
    ];
    let mut faults: Vec<Fault> = Vec::new();
    for (k, (kind, id, whose)) in targets.into_iter().enumerate() {
        let settle = if k == 0 { 15_000..17_000 } else { 6_000..8_000 };
        // Both coordinators are looked up while the pipeline runs steadily
        // (kafka.sh's tools are JVMs, seconds to start on a busy machine),
        // to say every role the killed broker has; the kill comes after.
        let steady = tokio::time::sleep(Duration::from_millis(rng.random_range(settle)));
        let (ask_txn, ask_group) = (
            ["coordinator", "transaction", txn_id.as_str()],
            ["coordinator", "group", group.as_str()],
        );
        let (txn_at, group_at, ()) =
            tokio::join!(cluster::node(&ask_txn), cluster::node(&ask_group), steady);
        let (txn_at, group_at) = (txn_at?, group_at?);
        let broker = if kind == "transaction" {
            txn_at
        } else {
            group_at
        };
        let roles = match (txn_at == broker, group_at == broker) {
            (true, true) => "fanout's transaction and the dispatcher's group coordinator",
            (true, false) => "fanout's transaction coordinator",
            _ => "the dispatcher's group coordinator",
        };
        if load.sent() >= EVENTS {
            r.inject(format!(
                "the load ended before kill {k}: it meets a draining pipeline, not new input"
            ));
        }
        let kill = Fault::now(&p, format!("kill -9 broker {broker} ({roles})")).await;
        cluster::kafka_sh(&["kill", &broker.to_string()]).await?;
        let killed_at = kill.at;
        r.inject(format!(
            "t={:.1}s kill -9 broker {broker}, the coordinator of {whose} {id}; {roles} ({} events sent)",
            (killed_at - load_start).as_secs_f64(),
            load.sent()
        ));
        faults.push(kill);
        let down = Duration::from_millis(rng.random_range(14_000..17_000));
        tokio::time::sleep(down).await;
        // Asked of the brokers that run: where the coordinator went.
        let moved = cluster::node(&["coordinator", kind, id]).await?;
        let (started_at, sent) = (Instant::now(), load.sent());
        cluster::kafka_sh(&["start", &broker.to_string()]).await?;
        let answering = started_at.elapsed();
        if let Some(kill) = faults.last_mut() {
            kill.restarted = Some(started_at);
        }
        let in_sync = on_cluster::wait_in_sync(&p, Duration::from_secs(60)).await?;
        r.inject(format!(
            "t={:.1}s broker {broker} started again after {:.1} s down (meanwhile {whose} coordinated by broker {moved}): \
             answering in {:.1} s, every partition back to 3 in-sync replicas in {:.1} s ({} events sent)",
            (started_at - load_start).as_secs_f64(),
            (started_at - killed_at).as_secs_f64(),
            answering.as_secs_f64(),
            in_sync.as_secs_f64(),
            sent
        ));
    }
    load.finish().await?;
    on_cluster::finish(&mut p, r, &work, EVENTS).await?;
    on_cluster::measure(&p, r, &faults, load_start, RATE);
    p.stop().await?;
    Ok(())
}
