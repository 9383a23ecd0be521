//! `broker_restart`: the (private, single-node) Kafka broker is stopped and
//! started again under load, twice — once cleanly (SIGTERM: controlled
//! shutdown) and once by SIGKILL (unflushed page cache survives, the broker
//! recovers its logs) — each time down for a while, as in an operator's
//! restart or a node loss. The stages keep running throughout: none may exit,
//! and nothing may be lost.

use std::{process::Stdio, time::Duration};

use anyhow::{bail, Context};
use rand::{rngs::StdRng, Rng};
use tokio::time::Instant;

use super::{finish, spec, Report, Workload, MAX_ATTEMPTS};
use crate::load;

const EVENTS: u64 = 3000;
const RATE: f64 = 100.0;

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    let state = std::env::var("HOOKLINE_KAFKA_STATE").unwrap_or_default();
    if !state.contains("kafka-faults-") {
        bail!("broker_restart must run on the private broker hookline-faults starts for it");
    }
    let mut spec = spec("broker_restart");
    spec.dispatcher_args
        .extend(["--max-attempts", MAX_ATTEMPTS].map(str::to_owned));
    if let Ok(debug) = std::env::var("HOOKLINE_FAULTS_FANOUT_DEBUG") {
        spec.fanout_args
            .extend(["-X".to_owned(), format!("debug={debug}")]);
        spec.log_filter.push_str(",librdkafka=debug");
    }
    let mut p = hookline_testkit::pipeline::Pipeline::create(spec).await?;
    let work = Workload::install(&mut p).await?;
    p.start().await?;
    let load = load::start(&mut p, &work.tenants, EVENTS, RATE)?;
    r.inject(format!(
        "load: {EVENTS} events at {RATE}/s over 4 tenants, {} expected deliveries",
        p.expected()
    ));
    let began = Instant::now();
    for how in ["SIGTERM", "SIGKILL"] {
        tokio::time::sleep(Duration::from_millis(rng.random_range(3000..6000))).await;
        let down = Duration::from_millis(rng.random_range(5000..10000));
        let at = began.elapsed().as_secs_f64();
        kafka_sh(if how == "SIGKILL" {
            &["halt", "--kill"]
        } else {
            &["halt"]
        })
        .await?;
        let halted = Instant::now();
        tokio::time::sleep(down).await;
        let resuming = Instant::now();
        kafka_sh(&["resume"]).await?;
        r.inject(format!(
            "t={at:.1}s broker stopped by {how}, down {:.1} s, answering again {:.1} s after the restart ({} events sent so far)",
            (resuming - halted).as_secs_f64(),
            resuming.elapsed().as_secs_f64(),
            load.sent()
        ));
    }
    load.finish().await?;
    finish(&mut p, r, &work, EVENTS).await?;
    let restarts: Vec<String> = p
        .stages_mut()
        .iter()
        .map(|s| format!("{} {}", s.name, s.starts() - 1))
        .collect();
    r.count(format!(
        "stage restarts (none expected): {}",
        restarts.join(", ")
    ));
    p.stop().await?;
    Ok(())
}

/// Runs deploy/dev/kafka.sh on the private broker (HOOKLINE_KAFKA_STATE is
/// inherited from the parent that started it): `halt`, `halt --kill`, `resume`.
pub async fn kafka_sh(args: &[&str]) -> anyhow::Result<()> {
    let script = hookline_testkit::kafka::repo_root().join("deploy/dev/kafka.sh");
    let status = tokio::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("kafka.sh {} failed ({status})", args.join(" "));
    }
    Ok(())
}
