//! `kill_stages`: kill -9 of each stage at random moments under load, then a
//! restart with the same arguments. Each of fanout, dispatcher and dlq-sink is
//! killed twice in a seeded random order, at a random moment and for a random
//! time, while events flow, deliveries climb the retry ladder and dead letters
//! are archived.

use std::time::Duration;

use rand::{rngs::StdRng, seq::SliceRandom, Rng};
use tokio::time::Instant;

use super::{finish, spec, Report, Workload, MAX_ATTEMPTS};
use crate::load;

const EVENTS: u64 = 3000;
const RATE: f64 = 150.0;

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    let mut spec = spec("kill_stages");
    spec.dispatcher_args
        .extend(["--max-attempts", MAX_ATTEMPTS].map(str::to_owned));
    let mut p = hookline_testkit::pipeline::Pipeline::create(spec).await?;
    let work = Workload::install(&mut p).await?;
    p.start().await?;
    let load = load::start(&mut p, &work.tenants, EVENTS, RATE)?;
    r.inject(format!(
        "load: {EVENTS} events at {RATE}/s over 4 tenants, {} expected deliveries",
        p.expected()
    ));
    let began = Instant::now();
    let mut order = ["fanout", "dispatcher", "dlq-sink"];
    for round in 0..2 {
        order.shuffle(rng);
        for name in order {
            let before = Duration::from_millis(rng.random_range(500..3000));
            let down = Duration::from_millis(rng.random_range(100..2500));
            tokio::time::sleep(before).await;
            let stage = p.stage_mut(name)?;
            let pid = stage.pid();
            stage.kill().await?;
            tokio::time::sleep(down).await;
            let restarting = Instant::now();
            stage.restart().await?;
            r.inject(format!(
                "round {round}: t={:.1}s kill -9 {name} (pid {pid}), down {:.1} s, restarted ready in {:.1} s ({} events sent so far)",
                (restarting - down).duration_since(began).as_secs_f64(),
                down.as_secs_f64(),
                restarting.elapsed().as_secs_f64(),
                load.sent()
            ));
        }
    }
    load.finish().await?;
    finish(&mut p, r, &work, EVENTS).await?;
    p.stop().await?;
    Ok(())
}
