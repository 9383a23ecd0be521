//! `cluster_isr`: on the three-broker cluster (replication factor 3,
//! `min.insync.replicas` 2), under load, two brokers shut down together for
//! 20–30 s: every partition is left with one in-sync replica, so every
//! `acks=all` write and every transaction commit is refused
//! (NOT_ENOUGH_REPLICAS). The stages must wait and retry, losing nothing,
//! and say why: fanout's and the dispatcher's `/readyz` turn unready with
//! "writes to ...[n] refused: not enough in-sync replicas" and their logs
//! carry the warning. Then one broker comes back (two in-sync replicas:
//! writes flow, the stages ready again by themselves), then the other.

use std::time::{Duration, Instant};

use anyhow::bail;
use hookline_testkit::{pipeline::Pipeline, stage::http_get};
use rand::{rngs::StdRng, Rng};

use super::{
    on_cluster::{self, partitions, Fault},
    Report,
};
use crate::cluster;

const NAME: &str = "cluster_isr";
const RATE: f64 = 100.0;
/// 100 s of load: warm-up, the outage, both restarts and a steady end.
const EVENTS: u64 = 10_000;
/// The stages that write to Kafka (dlq-sink only reads it and commits offsets).
const WRITERS: [&str; 2] = ["fanout", "dispatcher"];
/// What `/readyz` and the log must say while writes are refused.
const REASON: &str = "not enough in-sync replicas";
/// How long after two replicas are in sync again the stages must have
/// dropped the reason (a stage's next transaction commits by then).
const READY_AGAIN: Duration = Duration::from_secs(60);
/// The readiness condition that carries the reason.
const CONDITION: &str = "kafka writes: not ready";

/// What one stage said during the outage.
#[derive(Debug, Default)]
struct Said {
    /// (seconds after the shutdown, `/readyz` line).
    readyz: Option<(f64, String)>,
    /// The log's warning.
    log: Option<String>,
}

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    let on_cluster::Running {
        mut p,
        work,
        load,
        load_start,
    } = on_cluster::start(NAME, r, EVENTS, RATE).await?;
    let t = |at: Instant| (at - load_start).as_secs_f64();
    tokio::time::sleep(Duration::from_millis(rng.random_range(15_000..17_000))).await;
    let keep = rng.random_range(1..=3u32);
    let [a, b] = match keep {
        1 => ["2", "3"],
        2 => ["1", "3"],
        _ => ["1", "2"],
    };
    let mut faults = vec![Fault::now(&p, format!("brokers {a} and {b} shut down")).await];
    let down_at = faults[0].at;
    let (term_a, term_b) = (["term", a], ["term", b]);
    let (ta, tb) = tokio::join!(cluster::kafka_sh(&term_a), cluster::kafka_sh(&term_b));
    ta?;
    tb?;
    // The outage counts from both brokers gone: a controlled shutdown takes
    // 6-35 s, more than the outage itself on a busy machine.
    let both_down = Instant::now();
    let down = Duration::from_millis(rng.random_range(22_000..28_000));
    r.inject(format!(
        "t={:.1}s brokers {a} and {b} shut down (SIGTERM, both exited {:.1} s later; {} events sent); only broker {keep} runs, for {:.1} s",
        t(down_at),
        down_at.elapsed().as_secs_f64(),
        load.sent(),
        down.as_secs_f64()
    ));
    let said = watch(&p, down_at, both_down + down).await;
    let isr = partitions(p.topics.deliveries(), false).await?;
    r.count(format!(
        "deliveries during the outage: in-sync replicas per partition {:?}",
        isr.iter().map(|x| x.isr).collect::<Vec<_>>()
    ));
    let mut missing = Vec::new();
    for (stage, said) in WRITERS.iter().zip(&said) {
        match &said.readyz {
            Some((after, line)) => r.count(format!(
                "{stage} /readyz {after:.1} s after the shutdown: {line}"
            )),
            None => missing.push(format!("{stage}'s /readyz did not say \"{REASON}\"")),
        }
        match &said.log {
            Some(line) => r.count(format!("{stage} log: {line}")),
            None => missing.push(format!("{stage}'s log did not say \"{REASON}\"")),
        }
    }

    // One broker back: two in-sync replicas, enough for every write.
    let mut back = Fault::now(&p, format!("broker {a} started again (min ISR met)")).await;
    faults[0].restarted = Some(back.at);
    cluster::kafka_sh(&["start", a]).await?;
    let answering = back.at.elapsed();
    let isr2 = on_cluster::wait_isr(&p, 2, Duration::from_secs(90)).await?;
    let min_isr_at = Instant::now();
    let ready = ready_again(&p, min_isr_at).await;
    r.inject(format!(
        "t={:.1}s broker {a} started again after {:.1} s down: answering in {:.1} s, every partition at 2 in-sync replicas {:.1} s after that ({} events sent)",
        t(back.at),
        (back.at - down_at).as_secs_f64(),
        answering.as_secs_f64(),
        isr2.as_secs_f64(),
        load.sent()
    ));
    for (stage, ready) in WRITERS.iter().zip(&ready) {
        match ready {
            Ok(after) => r.count(format!(
                "{stage}: writes no longer refused {after:.1} s after two replicas were in sync again (/readyz 200 or no \"{CONDITION}\")"
            )),
            Err(body) => missing.push(format!(
                "{stage} still says {body:?} {READY_AGAIN:?} after two replicas were in sync again"
            )),
        }
    }
    // Writes flow with two replicas in sync before the last broker returns.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let last = Instant::now();
    back.restarted = Some(last);
    cluster::kafka_sh(&["start", b]).await?;
    let in_sync = on_cluster::wait_in_sync(&p, Duration::from_secs(90)).await?;
    r.inject(format!(
        "t={:.1}s broker {b} started again: answering in {:.1} s, every partition back to 3 in-sync replicas {:.1} s after that",
        t(last),
        (Instant::now() - last - in_sync).as_secs_f64(),
        in_sync.as_secs_f64()
    ));
    faults.push(back);
    let dir = p.dir().to_owned();
    // The promise first: it is checked whatever the stages said.
    load.finish().await?;
    on_cluster::finish(&mut p, r, &work, EVENTS).await?;
    on_cluster::measure(&p, r, &faults, load_start, RATE);
    p.stop().await?;
    if !missing.is_empty() {
        bail!(
            "the stages did not say why their writes waited: {}; logs in {}",
            missing.join("; "),
            dir.display()
        );
    }
    Ok(())
}

/// Polls the writers' `/readyz` and logs until `until`: what each said
/// about refused writes, and when, in seconds after `since` (the shutdown).
async fn watch(p: &Pipeline, since: Instant, until: Instant) -> Vec<Said> {
    let mut said: Vec<Said> = WRITERS.iter().map(|_| Said::default()).collect();
    while Instant::now() < until {
        for (stage, said) in WRITERS.iter().zip(said.iter_mut()) {
            let Ok(s) = p.stage(stage) else { continue };
            if said.readyz.is_none() {
                if let Ok((status, body)) = http_get(s.addr(), "/readyz").await {
                    said.readyz = body
                        .lines()
                        .find(|l| status != 200 && l.starts_with(CONDITION) && l.contains(REASON))
                        .map(|l| (since.elapsed().as_secs_f64(), l.to_owned()));
                }
            }
            if said.log.is_none() {
                let text = std::fs::read_to_string(p.dir().join(format!("{stage}.log")))
                    .unwrap_or_default();
                said.log = text
                    .lines()
                    .find(|l| l.contains("kafka writes held up") && l.contains(REASON))
                    .map(str::to_owned);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    said
}

/// How long after `since` each writer's `/readyz` no longer carried
/// [`CONDITION`] (Err: what it still said after [`READY_AGAIN`]).
async fn ready_again(p: &Pipeline, since: Instant) -> Vec<Result<f64, String>> {
    let mut ready: Vec<Result<f64, String>> = WRITERS.iter().map(|_| Err(String::new())).collect();
    while since.elapsed() < READY_AGAIN && ready.iter().any(Result::is_err) {
        for (stage, ready) in WRITERS.iter().zip(ready.iter_mut()) {
            if ready.is_ok() {
                continue;
            }
            if let Ok(s) = p.stage(stage) {
                if let Ok((_, body)) = http_get(s.addr(), "/readyz").await {
                    *ready = match body.lines().find(|l| l.starts_with(CONDITION)) {
                        Some(line) => Err(line.to_owned()),
                        None => Ok(since.elapsed().as_secs_f64()),
                    };
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ready
}
