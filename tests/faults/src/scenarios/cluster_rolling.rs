//! `cluster_rolling`: on the three-broker cluster (replication factor 3,
//! `min.insync.replicas` 2), under load, a rolling restart of every broker
//! as an upgrade does it: broker 1, 2 then 3 each gets a controlled shutdown
//! (SIGTERM, `kafka.sh cluster term`: it hands its leaderships to the other
//! in-sync replicas and exits), is started again on its data, and the next
//! one goes only once every partition is back to three in-sync replicas. The
//! stages keep running with the services' defaults (the circuit breaker on):
//! none may exit, nothing may be lost or written twice, and the report says
//! what each restart cost (attempts in flight, duplicates, recovery time).

use std::time::{Duration, Instant};

use rand::{rngs::StdRng, Rng};

use super::{
    on_cluster::{self, Fault},
    Report,
};
use crate::cluster;

const NAME: &str = "cluster_rolling";
const RATE: f64 = 100.0;
/// 120 s of load: three restarts of 10–25 s each (a broker starts in 7 s on
/// an idle machine, much longer on a busy one), a steady stretch between.
const EVENTS: u64 = 12_000;
/// Steady running between one broker back in sync and the next shutdown,
/// so each restart's figures are its own.
const BETWEEN: Duration = Duration::from_secs(5);

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    let on_cluster::Running {
        mut p,
        work,
        load,
        load_start,
    } = on_cluster::start(NAME, r, EVENTS, RATE).await?;
    let t = |at: Instant| (at - load_start).as_secs_f64();
    tokio::time::sleep(Duration::from_millis(rng.random_range(15_000..17_000))).await;
    let mut faults: Vec<Fault> = Vec::new();
    for broker in ["1", "2", "3"] {
        if load.sent() >= EVENTS {
            r.inject(format!(
                "the load ended before broker {broker}'s restart: it meets a draining pipeline, not new input"
            ));
        }
        let mut fault = Fault::now(&p, format!("controlled shutdown of broker {broker}")).await;
        cluster::kafka_sh(&["term", broker]).await?;
        let (exited, sent) = (Instant::now(), load.sent());
        cluster::kafka_sh(&["start", broker]).await?;
        let answering = Instant::now();
        fault.restarted = Some(exited);
        let in_sync = on_cluster::wait_in_sync(&p, Duration::from_secs(90)).await?;
        r.inject(format!(
            "t={:.1}s broker {broker}: SIGTERM, exited after {:.1} s ({sent} events sent), answering again {:.1} s later: \
             down {:.1} s; every partition back to 3 in-sync replicas {:.1} s after that",
            t(fault.at),
            (exited - fault.at).as_secs_f64(),
            (answering - exited).as_secs_f64(),
            (answering - fault.at).as_secs_f64(),
            in_sync.as_secs_f64(),
        ));
        faults.push(fault);
        tokio::time::sleep(BETWEEN).await;
    }
    load.finish().await?;
    on_cluster::finish(&mut p, r, &work, EVENTS).await?;
    on_cluster::measure(&p, r, &faults, load_start, RATE);
    p.stop().await?;
    Ok(())
}
