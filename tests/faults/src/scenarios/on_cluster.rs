//! What the `cluster_*` scenarios share: their pipeline settings (the
//! services' defaults, the circuit breaker included), their workload, where
//! partitions are led, the figures of each fault (attempts in flight at it,
//! duplicates after it, recovery time) and the checks they end with (the
//! promise, and no doubles in the topics as a `read_committed` reader sees
//! them). docs/faults.md#cluster_leader_kill says what they prove.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use hookline_envelope::{delivery_id, Delivery};
use hookline_testkit::{
    kafka,
    pipeline::{seq_of, Pipeline, Spec},
    receiver::Behaviour,
    records,
};
use rdkafka::Message;

use super::{all_running, check_outcomes, post_mortem, spec, Report, Want, STALL};
use crate::{chains::Chains, cluster, ledger, load};

/// Tenants of the workload; events go to them round robin.
pub const TENANTS: [&str; 4] = ["t0", "t1", "t2", "t3"];
/// `--max-attempts`: the throttled endpoint's deliveries end after this many.
pub const MAX_ATTEMPTS: i32 = 4;
/// The healthy endpoint's answer time: attempts in flight ≈ its rate × this.
pub const ANSWER: Duration = Duration::from_millis(20);
/// The path whose deliveries measure the pipeline's freshness.
const HEALTHY: &str = "/ok";
/// Throttles (429) of each failing `/flaky` delivery before it succeeds.
const FLAKY_FAILURES: u32 = 2;
/// The steady stretch before the first fault the figures compare with.
const BASELINE: Duration = Duration::from_secs(8);

/// The fault pipelines' settings (`spec`: the breaker on, with the suite's
/// shortened times) and `--max-attempts`; the stages also log their
/// producers re-created and their partitions assigned and revoked
/// (`hookline_runtime::kafka`), for what a zombie does when it wakes.
pub fn cluster_spec(scenario: &'static str) -> Spec {
    let mut spec = spec(scenario);
    spec.log_filter.push_str(",hookline_runtime::kafka=info");
    spec.dispatcher_args
        .extend(["--max-attempts".to_owned(), MAX_ATTEMPTS.to_string()]);
    spec
}

/// The workload: per tenant a healthy subscription (20 ms answers) and one
/// other — t0 an ordered one (`max_in_flight` 1), t1 one that always answers
/// 429 (dead-lettered `exhausted` after `MAX_ATTEMPTS`, every attempt but the
/// last a retry record; a throttle is neutral to the breaker), t2 one that
/// answers 404 (`rejected_4xx`), t3 one where every fourth delivery is
/// throttled (429) twice and then succeeds (two retry records each).
///
/// No endpoint fails with a 5xx: the breaker, on at its defaults, counts 5xx
/// and timeouts in the order attempts end, and a retry tier releases its due
/// records together, all of them deliveries that failed before; ten that
/// fail again in a row open it (seen with a quarter of the deliveries
/// failing twice with 503, without any fault). It then parks the whole
/// subscription for 30 s, 60 s, ... until a probe succeeds: right, and longer
/// than the suite can wait. A 429 is neutral to the breaker.
#[derive(Debug)]
pub struct Work {
    pub subs_of: HashMap<String, Vec<(String, Want)>>,
}

impl Work {
    pub async fn install(p: &mut Pipeline, events: u64) -> anyhow::Result<Self> {
        let flaky: Vec<String> = (0..events)
            .filter(|seq| seq % 4 == 3 && (seq / 4) % 4 == 0)
            .map(|seq| delivery_id(&p.event_id(seq), "t3-flaky"))
            .collect();
        p.receiver
            .set(HEALTHY, Behaviour::status(204).delay(ANSWER));
        p.receiver.set("/ordered", Behaviour::status(204));
        p.receiver.set("/throttled", Behaviour::status(429));
        p.receiver.set("/rejects", Behaviour::status(404));
        p.receiver.set(
            "/flaky",
            Behaviour::status(200).fail_first_of(flaky, FLAKY_FAILURES, 429),
        );
        let plan: [(&str, &str, &str, i32, Want); 8] = [
            ("t0-ok", "t0", HEALTHY, 8, Want::Delivered),
            ("t0-ordered", "t0", "/ordered", 1, Want::Delivered),
            ("t1-ok", "t1", HEALTHY, 8, Want::Delivered),
            (
                "t1-throttled",
                "t1",
                "/throttled",
                4,
                Want::DeadLettered("exhausted"),
            ),
            ("t2-ok", "t2", HEALTHY, 8, Want::Delivered),
            (
                "t2-rejected",
                "t2",
                "/rejects",
                4,
                Want::DeadLettered("rejected_4xx"),
            ),
            ("t3-ok", "t3", HEALTHY, 8, Want::Delivered),
            ("t3-flaky", "t3", "/flaky", 4, Want::Delivered),
        ];
        let subs: Vec<_> = plan
            .iter()
            .map(|(id, tenant, path, mif, _)| p.subscription(id, tenant, path, *mif))
            .collect();
        p.put_subscriptions(&subs).await?;
        let mut subs_of: HashMap<String, Vec<(String, Want)>> = HashMap::new();
        for (id, tenant, _, _, want) in plan {
            subs_of
                .entry(tenant.to_owned())
                .or_default()
                .push((id.to_owned(), want));
        }
        Ok(Self { subs_of })
    }

    /// (seq, tenant) of the first `events` events as `load::start` spreads them.
    pub fn events(events: u64) -> impl Iterator<Item = (u64, String)> {
        (0..events).map(|seq| (seq, TENANTS[seq as usize % TENANTS.len()].to_owned()))
    }
}

/// A cluster scenario under way: the workload installed, the stages
/// started, the load running since `load_start`.
pub struct Running {
    pub p: Pipeline,
    pub work: Work,
    pub load: load::Load,
    pub load_start: Instant,
}

/// What every cluster scenario begins with: checks that it runs on the
/// harness's cluster, brings every broker up (a previous scenario stopped
/// or restarted some), starts the pipeline with the workload and the load
/// of `events` at `rate` per second, and says so in the report.
pub async fn start(
    name: &'static str,
    r: &mut Report,
    events: u64,
    rate: f64,
) -> anyhow::Result<Running> {
    cluster::ensure_harness_cluster(name)?;
    cluster::kafka_sh(&["up"]).await?;
    let mut p = Pipeline::create(cluster_spec(name)).await?;
    let work = Work::install(&mut p, events).await?;
    p.start().await?;
    let load = load::start(&mut p, &TENANTS, events, rate)?;
    let load_start = Instant::now();
    r.inject(format!(
        "load: {events} events at {rate}/s over 4 tenants, {} expected deliveries; topics with 3 replicas, min ISR 2",
        p.expected()
    ));
    Ok(Running {
        p,
        work,
        load,
        load_start,
    })
}

/// One partition as the cluster's metadata shows it.
#[derive(Debug, Clone)]
pub struct Part {
    pub partition: i32,
    pub leader: i32,
    pub replicas: usize,
    pub isr: usize,
    /// The high watermark, records written so far (-1: not asked).
    pub high: i64,
}

/// Every partition of `topic`: leader, replicas, in-sync replicas, and with
/// `ends` its end (without, no partition's leader is asked: one that is
/// down would hold the call up).
pub async fn partitions(topic: &str, ends: bool) -> anyhow::Result<Vec<Part>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let consumer: BaseConsumer = kafka::client_config()
            .set("group.id", kafka::unique_name("meta"))
            .create()?;
        let md = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
        let t = md.topics().first().context("no metadata")?;
        let mut out = Vec::new();
        for p in t.partitions() {
            let high = if ends {
                consumer
                    .fetch_watermarks(&topic, p.id(), Duration::from_secs(10))
                    .map_or(-1, |(_, high)| high)
            } else {
                -1
            };
            out.push(Part {
                partition: p.id(),
                leader: p.leader(),
                replicas: p.replicas().len(),
                isr: p.isr().len(),
                high,
            });
        }
        out.sort_by_key(|p| p.partition);
        Ok(out)
    })
    .await?
}

/// Waits until every partition of every topic of `p` and of Kafka's own
/// offsets and transaction-state topics has a leader and all three replicas
/// in sync (a restarted broker caught up); how long it took.
pub async fn wait_in_sync(p: &Pipeline, limit: Duration) -> anyhow::Result<Duration> {
    wait_isr(p, 3, limit).await
}

/// [`wait_in_sync`] with at least `want` in-sync replicas (all when fewer).
pub async fn wait_isr(p: &Pipeline, want: usize, limit: Duration) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut topics: Vec<String> = p.topics.all().into_iter().map(str::to_owned).collect();
    topics.extend(["__consumer_offsets", "__transaction_state"].map(str::to_owned));
    loop {
        let mut lagging = Vec::new();
        for t in &topics {
            for part in partitions(t, false).await.unwrap_or_default() {
                if part.leader < 0 || part.isr < want.min(part.replicas) {
                    lagging.push(format!("{t}[{}]", part.partition));
                }
            }
        }
        if lagging.is_empty() {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            bail!(
                "partitions not back to {want} in-sync replicas after {limit:?}: {}",
                lagging.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Polls the metadata until `partition` of `deliveries` has a leader other
/// than `dead` (killed or stopped): which broker, and how long after the kill (None within `limit`).
pub async fn wait_led_elsewhere(
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

/// A fault (a broker killed or stopped, a stage stopped), as the figures
/// need it.
#[derive(Debug)]
pub struct Fault {
    pub what: String,
    pub at: Instant,
    /// The dispatchers' `hookline_dispatcher_in_flight` just before, summed.
    pub in_flight: f64,
    /// When it ended: the broker started again or continued, the stopped
    /// stage continued.
    pub restarted: Option<Instant>,
}

impl Fault {
    /// Reads what is in flight, then marks the moment: call it right before
    /// injecting `what` (while every dispatcher answers).
    pub async fn now(p: &Pipeline, what: impl Into<String>) -> Self {
        let mut in_flight = 0.0;
        for stage in p
            .stages()
            .iter()
            .filter(|s| s.name.starts_with("dispatcher"))
        {
            in_flight += gauge(
                stage.metrics().await.unwrap_or_default(),
                "hookline_dispatcher_in_flight",
            );
        }
        Self {
            what: what.into(),
            at: Instant::now(),
            in_flight,
            restarted: None,
        }
    }
}

/// A gauge's value summed over its series (0 when not exposed).
fn gauge(text: String, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The figures of each fault, from the receiver's log: the attempts in
/// flight at it, the duplicates (2xx for a `webhook-id` already answered
/// 2xx) that arrived after it, and the recovery time.
///
/// A healthy delivery's wait is its arrival at the receiver minus the time
/// the load sent its event (`load_start` + seq / `rate`). Over the
/// `BASELINE` before the first fault the waits have a p99 `W`; a delivery is
/// late when it waited longer than `max(2 W, W + 1 s)`. A fault's recovery
/// time runs from the fault to the last late healthy delivery that arrived
/// before the next fault (the end of the fault included): after it every
/// delivery is as fresh as before the fault, so the backlog is drained and
/// deliveries flow at the input's rate again.
pub fn measure(p: &Pipeline, r: &mut Report, faults: &[Fault], load_start: Instant, rate: f64) {
    let requests = p.receiver.requests();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    // Index 0: before the first fault; k + 1: after fault k.
    let mut dups = vec![0usize; faults.len() + 1];
    // (arrival, wait) of the first 2xx of each healthy delivery.
    let mut healthy: Vec<(Instant, Duration)> = Vec::new();
    for req in requests.iter().filter(|q| (200..300).contains(&q.status)) {
        let n = seen.entry(req.header("webhook-id")).or_default();
        *n += 1;
        if *n > 1 {
            dups[faults.iter().take_while(|f| f.at <= req.at).count()] += 1;
        } else if req.path == HEALTHY {
            if let Some(seq) = seq_of(&req.body) {
                let sent = load_start + Duration::from_secs_f64(seq as f64 / rate);
                healthy.push((req.at, req.at.saturating_duration_since(sent)));
            }
        }
    }
    let Some(first) = faults.first() else {
        return;
    };
    let mut before: Vec<Duration> = healthy
        .iter()
        .filter(|(at, _)| *at < first.at && *at + BASELINE >= first.at)
        .map(|(_, w)| *w)
        .collect();
    before.sort();
    let p99 = before
        .get((before.len() * 99 / 100).min(before.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default();
    let late = (p99 * 2).max(p99 + Duration::from_secs(1));
    r.count(format!(
        "before the first fault: {:.0} healthy deliveries/s, wait p99 {} ms; late = waited over {} ms",
        before.len() as f64 / BASELINE.as_secs_f64(),
        p99.as_millis(),
        late.as_millis()
    ));
    for (k, f) in faults.iter().enumerate() {
        let until = faults.get(k + 1).map(|n| n.at);
        let window: Vec<&(Instant, Duration)> = healthy
            .iter()
            .filter(|(at, _)| *at >= f.at && until.is_none_or(|u| *at < u))
            .collect();
        let last_late = window
            .iter()
            .rev()
            .find(|(_, w)| *w > late)
            .map(|(at, _)| *at);
        let recovery = match last_late {
            None => "0 s (none late)".to_owned(),
            Some(at) if until.is_some() && window.last().is_some_and(|(l, _)| *l == at) => {
                "not before the next fault".to_owned()
            }
            Some(at) => format!("{:.1} s", (at - f.at).as_secs_f64()),
        };
        let mut gap = Duration::ZERO;
        let mut prev = f.at;
        for (at, _) in &window {
            gap = gap.max(*at - prev);
            prev = *at;
        }
        let answering = requests
            .iter()
            .filter(|q| q.path == HEALTHY && q.at <= f.at && q.at + ANSWER > f.at)
            .count();
        r.count(format!(
            "{}: in flight at it {} (dispatcher gauge), {answering} (receiver, being answered); \
             {} duplicates after it; recovery {recovery} (the fault ended at +{}); \
             {} late deliveries, longest gap between healthy deliveries {:.1} s",
            f.what,
            f.in_flight,
            dups[k + 1],
            f.restarted.map_or("-".to_owned(), |t| format!(
                "{:.1} s",
                (t - f.at).as_secs_f64()
            )),
            window.iter().filter(|(_, w)| *w > late).count(),
            gap.as_secs_f64()
        ));
    }
    let after: usize = dups[1..].iter().sum();
    r.count(format!(
        "duplicates at the receiver (same webhook-id): {after} after the faults, {} before the first",
        dups[0]
    ));
}

/// Settles and checks everything: the promise (each delivery delivered or
/// dead-lettered as its endpoint dictates), and what a `read_committed`
/// reader sees — one `deliveries` record per delivery, one retry record per
/// (delivery, attempt) with attempts 1..k, at most one dead letter per
/// delivery, none both delivered and dead-lettered — every dead letter
/// archived, and no stage exited on its own.
pub async fn finish(
    p: &mut Pipeline,
    r: &mut Report,
    work: &Work,
    events: u64,
) -> anyhow::Result<()> {
    let settling = Instant::now();
    let ledger = ledger::settle(p, STALL).await?;
    r.count(format!(
        "events {events}; {} (settled {:.1} s after the load's end)",
        ledger.summary(),
        settling.elapsed().as_secs_f64()
    ));
    if let Err(e) = check_outcomes(p, &ledger, &work.subs_of, Work::events(events)).await {
        bail!(
            "{e:#}\nlogs in {}\n{}",
            p.dir().display(),
            post_mortem(p).await
        );
    }
    let chains = Chains::read(p).await?;
    let fanned = fanned_out(p).await?;
    let mut broken = Vec::new();
    if !fanned.doubles.is_empty() {
        broken.push(format!(
            "{} deliveries written to deliveries more than once, e.g. {:?}",
            fanned.doubles.len(),
            &fanned.doubles[..fanned.doubles.len().min(5)]
        ));
    }
    let forks = chains.forks();
    if !forks.is_empty() {
        broken.push(format!(
            "{} retry records written more than once, e.g. (delivery, attempt, copies) {:?}; first: {:?}",
            forks.len(),
            &forks[..forks.len().min(5)],
            chains.coordinates.get(&forks[0].0)
        ));
    }
    let doubles = chains.double_dead();
    if !doubles.is_empty() {
        broken.push(format!(
            "{} deliveries dead-lettered more than once, e.g. {:?}",
            doubles.len(),
            &doubles[..doubles.len().min(5)]
        ));
    }
    let gaps = chains.gaps();
    if !gaps.is_empty() {
        broken.push(format!(
            "{} retry chains with a gap, e.g. {:?}",
            gaps.len(),
            &gaps[..gaps.len().min(5)]
        ));
    }
    if ledger.delivered_and_dead > 0 {
        broken.push(format!(
            "{} deliveries both received and dead-lettered",
            ledger.delivered_and_dead
        ));
    }
    r.count(format!(
        "read_committed: deliveries {} records for {} deliveries ({} written twice); retry tiers {} records ({}) for {} deliveries, \
         {} written twice, {} gapped chains; DLQ {} dead letters for {} deliveries, {} dead-lettered twice",
        fanned.records,
        fanned.ids,
        fanned.doubles.len(),
        chains.tier_records(),
        chains
            .per_tier
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        chains.attempts.len(),
        forks.len(),
        gaps.len(),
        chains.dead_letters(),
        chains.dead.len(),
        doubles.len()
    ));
    if !broken.is_empty() {
        bail!(
            "EXACTLY-ONCE BROKEN: {}; logs in {}",
            broken.join("; "),
            p.dir().display()
        );
    }
    if chains.tier_records() == 0 {
        bail!("no retry record was written: the workload did not exercise the tiers");
    }
    let (rows, ids) = match ledger::wait_archived(p, &ledger, STALL).await {
        Ok(archived) => archived,
        Err(e) => bail!("{e:#}\n{}", post_mortem(p).await),
    };
    r.count(format!(
        "archive: {rows} rows for {ids} distinct dead-lettered deliveries (every dead letter archived)"
    ));
    all_running(p)?;
    let restarts: Vec<String> = p
        .stages_mut()
        .iter()
        .map(|s| format!("{} {}", s.name, s.starts() - 1))
        .collect();
    r.count(format!(
        "stage restarts (none made): {}",
        restarts.join(", ")
    ));
    Ok(())
}

/// The `deliveries` topic as a `read_committed` reader sees it.
#[derive(Debug)]
struct Fanned {
    records: usize,
    ids: usize,
    /// (delivery id, its coordinates) of every delivery written more than once.
    doubles: Vec<(String, Vec<String>)>,
}

async fn fanned_out(p: &Pipeline) -> anyhow::Result<Fanned> {
    let records = kafka::read_to_end(p.topics.deliveries()).await?;
    let mut by_id: HashMap<String, Vec<String>> = HashMap::new();
    for m in &records {
        let d: Delivery = records::decoded(m)?;
        by_id
            .entry(d.delivery_id)
            .or_default()
            .push(format!("{}@{}", m.partition(), m.offset()));
    }
    let mut doubles: Vec<(String, Vec<String>)> = by_id
        .iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(id, at)| (id.clone(), at.clone()))
        .collect();
    doubles.sort();
    Ok(Fanned {
        records: records.len(),
        ids: by_id.len(),
        doubles,
    })
}
