//! `cluster_zombie`: on the three-broker cluster, under load, three processes
//! frozen with SIGSTOP long enough to be given up on, then woken with
//! SIGCONT to carry on from where they froze. First the broker that leads the
//! busiest `deliveries` partition, past `broker.session.timeout.ms` (9 s): the
//! controller fences it and moves its leaderships; woken, it must rejoin and
//! catch up until every partition has three in-sync replicas again. Then the
//! dispatcher, past its group session timeout (6 s, [`super::spec`]) and its
//! transaction timeout (10 s), while a replacement in the same group takes
//! over its partitions; then fanout likewise (transaction timeout 20 s), its
//! replacement under the same transactional id. Each woken stage is a
//! zombie: its open transaction was aborted by the broker or the
//! replacement's epoch, its generation is stale. The scenario asserts what it
//! does then — it is fenced, writes nothing that counts, and runs on as a
//! member of its group again — and the promise: nothing lost, nothing
//! written twice, as a `read_committed` reader sees the topics.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hookline_testkit::pipeline::Pipeline;
use rand::{rngs::StdRng, Rng};

use super::{
    on_cluster::{self, partitions, Fault},
    Report,
};
use crate::cluster;

const NAME: &str = "cluster_zombie";
const RATE: f64 = 100.0;
/// 130 s of load: the three faults and the broker's catching up fit in it.
const EVENTS: u64 = 13_000;
/// The brokers' `broker.session.timeout.ms` (Kafka's default, kept by
/// `kafka.sh cluster`).
const BROKER_SESSION: Duration = Duration::from_secs(9);
/// The dispatcher's transaction timeout (`transaction.timeout.ms`).
const DISPATCHER_TXN_TIMEOUT: Duration = Duration::from_secs(10);
/// Fanout's transaction timeout.
const FANOUT_TXN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long past a timeout a process stays frozen: the broker's sweep of
/// timed-out transactions runs every second in the cluster's settings.
const PAST: Duration = Duration::from_secs(3);
/// How long a woken stage has to show what it makes of being fenced.
const AWAKE: Duration = Duration::from_secs(30);

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    let on_cluster::Running {
        mut p,
        work,
        load,
        load_start,
    } = on_cluster::start(NAME, r, EVENTS, RATE).await?;
    let t = |at: Instant| (at - load_start).as_secs_f64();
    let mut faults = Vec::new();

    // The broker zombie.
    tokio::time::sleep(Duration::from_millis(rng.random_range(15_000..17_000))).await;
    let deliveries = partitions(p.topics.deliveries(), true).await?;
    let busiest = deliveries
        .iter()
        .max_by_key(|d| d.high)
        .context("deliveries has no partition")?
        .clone();
    let broker = busiest.leader;
    let mut fault = Fault::now(&p, format!("SIGSTOP broker {broker}")).await;
    cluster::kafka_sh(&["stop", &broker.to_string()]).await?;
    r.inject(format!(
        "t={:.1}s SIGSTOP broker {broker}: leader of deliveries[{}] (the busiest, {} of {} records) ({} events sent)",
        t(fault.at),
        busiest.partition,
        busiest.high,
        deliveries.iter().map(|d| d.high).sum::<i64>(),
        load.sent()
    ));
    let frozen = BROKER_SESSION + PAST + Duration::from_millis(rng.random_range(0..2_000));
    let moved = on_cluster::wait_led_elsewhere(&p, busiest.partition, broker, frozen).await;
    tokio::time::sleep(frozen.saturating_sub(fault.at.elapsed())).await;
    let woken = Instant::now();
    cluster::kafka_sh(&["cont", &broker.to_string()]).await?;
    fault.restarted = Some(woken);
    let in_sync = on_cluster::wait_in_sync(&p, Duration::from_secs(60)).await?;
    r.inject(format!(
        "t={:.1}s SIGCONT broker {broker} after {:.1} s frozen (deliveries[{}] {}); \
         every partition back to 3 in-sync replicas {:.1} s later ({} events sent)",
        t(woken),
        (woken - fault.at).as_secs_f64(),
        busiest.partition,
        match moved {
            Some((by, after)) => format!(
                "led by broker {by} {:.1} s after the stop",
                after.as_secs_f64()
            ),
            None => "never led elsewhere meanwhile".to_owned(),
        },
        in_sync.as_secs_f64(),
        load.sent()
    ));
    faults.push(fault);

    // The process zombies; (stage, its log's length at the wake, its
    // replacement, the replacement's).
    let mut woke = Vec::new();
    for (stage, replacement, txn_timeout) in [
        ("dispatcher", "dispatcher-b", DISPATCHER_TXN_TIMEOUT),
        ("fanout", "fanout-b", FANOUT_TXN_TIMEOUT),
    ] {
        tokio::time::sleep(Duration::from_millis(rng.random_range(5_000..7_000))).await;
        let mut fault = Fault::now(&p, format!("SIGSTOP {stage}")).await;
        let logged = p.stage(stage)?.log_text().len();
        p.stage(stage)?.pause()?;
        r.inject(format!(
            "t={:.1}s SIGSTOP {stage} (pid {}), {} events sent",
            t(fault.at),
            p.stage(stage)?.pid(),
            load.sent()
        ));
        if stage == "dispatcher" {
            p.start_dispatcher(replacement).await?;
        } else {
            p.start_fanout_as(replacement).await?;
        }
        r.inject(format!(
            "t={:.1}s {replacement} started in the same group{} and ready",
            t(Instant::now()),
            if stage == "fanout" {
                " under the same transactional id (its epoch fences the frozen one's)"
            } else {
                ""
            }
        ));
        let frozen = txn_timeout + PAST + Duration::from_millis(rng.random_range(0..2_000));
        tokio::time::sleep(frozen.saturating_sub(fault.at.elapsed())).await;
        let replaced_at = p.stage(replacement)?.log_text().len();
        let awake_at = p.stage(stage)?.log_text().len();
        woke.push((stage, awake_at, replacement, replaced_at));
        let woken = Instant::now();
        p.stage(stage)?.resume()?;
        fault.restarted = Some(woken);
        r.inject(format!(
            "t={:.1}s SIGCONT {stage} after {:.1} s frozen (past its group session, 6 s, and its transaction timeout, {} s)",
            t(woken),
            (woken - fault.at).as_secs_f64(),
            txn_timeout.as_secs()
        ));
        let seen = zombie(&mut p, stage, logged, replacement, replaced_at).await?;
        r.count(format!("{stage} woken: {seen}"));
        faults.push(fault);
    }
    load.finish().await?;
    on_cluster::finish(&mut p, r, &work, EVENTS).await?;
    on_cluster::measure(&p, r, &faults, load_start, RATE);
    for (stage, awake_at, replacement, replaced_at) in woke {
        let since = |name: &str, at: usize| -> anyhow::Result<(usize, usize)> {
            let log = p.stage(name)?.log_text();
            let after = log.get(at..).unwrap_or_default();
            Ok((
                after.lines().filter(|l| is_fenced_transaction(l)).count(),
                after.matches("transactional producer ready").count(),
            ))
        };
        let (zombie, theirs) = (since(stage, awake_at)?, since(replacement, replaced_at)?);
        r.count(format!(
            "from {stage}'s wake to the end: transactions fenced {} ({stage}) and {} ({replacement}), \
             producers re-created {} and {}",
            zombie.0, theirs.0, zombie.1, theirs.1
        ));
    }
    p.stop().await?;
    Ok(())
}

/// What a woken stage made of being given up on, from its log after
/// `logged` bytes (what it had written before it froze), waited for up to
/// [`AWAKE`]: it must have been refused — its partitions lost with its group
/// session, or its late transaction fenced — and be running again as a
/// member of its group (partitions assigned after it woke). Also counts what
/// the replacement's log shows from the wake on (`replaced_at`, bytes): its
/// own transactions fenced in turn when the zombie re-created a producer
/// under their shared transactional id.
async fn zombie(
    p: &mut Pipeline,
    stage: &str,
    logged: usize,
    replacement: &str,
    replaced_at: usize,
) -> anyhow::Result<String> {
    let started = Instant::now();
    loop {
        let s = p.stage_mut(stage)?;
        let log = s.log_text();
        let after: Vec<&str> = log.get(logged..).unwrap_or_default().lines().collect();
        let count = |what: &str| after.iter().filter(|l| l.contains(what)).count();
        let lost = count("Consumer group session timed out");
        let fenced: Vec<&str> = after
            .iter()
            .copied()
            .filter(|l| is_fenced_transaction(l))
            .collect();
        let recreated = count("transactional producer ready");
        let assigned = count("partitions assigned");
        if !s.is_running() {
            bail!("{stage} exited after it woke\n{}", s.log_tail_lines(30));
        }
        if lost + fenced.len() > 0 && assigned > 0 {
            let theirs = p.stage(replacement)?.log_text();
            let hit = theirs
                .get(replaced_at..)
                .unwrap_or_default()
                .lines()
                .filter(|l| is_fenced_transaction(l))
                .count();
            return Ok(format!(
                "group session lost {lost} times (a consumer each), late transaction fenced {} times{}, \
                 producer re-created {recreated} times, then partitions assigned {assigned} times: \
                 a member again, running; {replacement}'s transactions fenced {hit} times since the wake",
                fenced.len(),
                fenced
                    .first()
                    .map_or(String::new(), |l| format!(" ({})", summary(l)))
            ));
        }
        if started.elapsed() > AWAKE {
            bail!(
                "{stage} woken {AWAKE:?} ago: group session lost {lost} times, fenced {} times, \
                 {assigned} assignments since it froze\n{}",
                fenced.len(),
                s.log_tail_lines(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A stage's own log line of a transaction, or of its abort, that failed
/// because its producer was fenced (a newer epoch under its transactional id).
fn is_fenced_transaction(line: &str) -> bool {
    (line.contains("\"transaction failed;") || line.contains("\"abort_transaction failed;"))
        && line.contains("fenced by a newer instance")
}

/// A JSON log line's message and error, short.
fn summary(line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    let field = |k: &str| {
        v.get(k)
            .or_else(|| v.pointer(&format!("/fields/{k}")))
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    format!("{}: {}", field("message"), field("error"))
}
