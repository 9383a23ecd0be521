//! The named fault scenarios and what they share: the report each fills in
//! (what was injected, what was counted), the flags every fault pipeline uses,
//! and the checks every scenario ends with.

pub mod acl_missing;
pub mod bad_input;
pub mod breaker_open_crash;
pub mod broker_restart;
pub mod cluster_coordinator_kill;
pub mod cluster_isr;
pub mod cluster_leader_kill;
pub mod cluster_rolling;
pub mod cluster_zombie;
pub mod hostile_endpoints;
pub mod kill_dispatcher_retrying;
pub mod kill_dispatcher_steady;
pub mod kill_stages;
pub mod on_cluster;
pub mod rolling_restart;
pub mod secured;

use std::{collections::HashMap, time::Duration};

use anyhow::bail;
use hookline_envelope::delivery_id;
use hookline_testkit::pipeline::{Pipeline, Spec};

use crate::ledger::Ledger;

/// Names accepted on the command line, in the order `all` runs them.
pub const ALL: &[&str] = &[
    "kill_stages",
    "kill_dispatcher_retrying",
    "rolling_restart",
    "hostile_endpoints",
    "bad_input",
    "broker_restart",
    "cluster_leader_kill",
    "cluster_coordinator_kill",
    "cluster_zombie",
    "cluster_rolling",
    "cluster_isr",
    "secured",
    "acl_missing",
    "breaker_open_crash",
    "kill_dispatcher_steady",
];

/// Scenarios run only when named: measurements, heavy for `make test`; and
/// `cluster_zombie` while the exactly-once break it found is open (a woken
/// dispatcher zombie wrote retry records and dead letters a second time in
/// one run of eight: docs/faults.md#cluster_zombie).
pub const OPT_IN: &[&str] = &["kill_dispatcher_steady", "cluster_zombie"];

/// Scenarios that stop the broker: they get a private one, never the shared one.
pub const PRIVATE_BROKER: &[&str] = &["broker_restart", "breaker_open_crash"];

/// Scenarios that kill brokers of a three-broker cluster: consecutive ones
/// share one cluster that `hookline-faults` starts for them
/// ([`crate::cluster`]), never the shared broker.
pub const CLUSTER: &[&str] = &[
    "cluster_leader_kill",
    "cluster_coordinator_kill",
    "cluster_zombie",
    "cluster_rolling",
    "cluster_isr",
];

/// What one scenario injected and counted, printed as it goes and at the end.
#[derive(Debug)]
pub struct Report {
    pub scenario: &'static str,
    pub injected: Vec<String>,
    pub counted: Vec<String>,
}

impl Report {
    pub fn new(scenario: &'static str) -> Self {
        Self {
            scenario,
            injected: Vec::new(),
            counted: Vec::new(),
        }
    }

    /// Records (and prints at once) a fault that was injected.
    pub fn inject(&mut self, line: impl Into<String>) {
        let line = line.into();
        eprintln!("  [{}] inject: {line}", self.scenario);
        self.injected.push(line);
    }

    /// Records (and prints at once) something that was counted or measured.
    pub fn count(&mut self, line: impl Into<String>) {
        let line = line.into();
        eprintln!("  [{}] count:  {line}", self.scenario);
        self.counted.push(line);
    }
}

/// How long a scenario waits with no progress at all before it counts what
/// it has (and fails if anything is missing).
pub const STALL: Duration = Duration::from_secs(60);

/// The circuit breaker's times in every scenario but the breaker's own: it
/// opens at its default thresholds, but probes after 2 s rather than 30 s (so
/// an endpoint that recovers costs a scenario 2 s, doubling while it stays
/// down), and an always-failing endpoint's subscription is disabled after its
/// breaker has been open 20 s rather than 5 days — the only end an open
/// breaker allows the deliveries it parks, which no longer climb the ladder.
pub const BREAKER_TIMES: [&str; 4] = ["--breaker-open", "2s", "--breaker-disable-after", "20s"];

/// A pipeline spec for the fault scenarios: a ladder of seconds, the
/// breaker's shortened times ([`BREAKER_TIMES`]), and group session timeouts
/// at the broker's minimum so a killed member's partitions move in 6 s rather
/// than the default 10 s (correctness does not depend on them; the suite's
/// run time does).
pub fn spec(scenario: &'static str) -> Spec {
    let mut spec = Spec::for_harness("faults", scenario);
    // Info from the services themselves, for post-mortems (HOOKLINE_KEEP_DIRS=1
    // keeps the logs): transactions, rebalances, drains; HOOKLINE_STAGE_LOG
    // adds more (`librdkafka=debug` with HOOKLINE_CONSUMER_KAFKA_CONFIG=debug=cgrp
    // shows the consumers' group protocol).
    spec.log_filter = hookline_testkit::pipeline::with_stage_log(
        "warn,hookline_runtime::ops=info,hookline_fanout=info,hookline_dispatcher=info,hookline_dlq_sink=info",
    );
    spec.tiers = vec![
        ("r1".to_owned(), Duration::from_secs(1)),
        ("r2".to_owned(), Duration::from_secs(2)),
    ];
    let session = ["--group-session-timeout", "6s"];
    spec.dispatcher_args = ["--retry-jitter", "200ms", "--request-timeout", "5s"]
        .into_iter()
        .chain(session)
        .chain(BREAKER_TIMES)
        .map(str::to_owned)
        .collect();
    spec.fanout_args = session.map(str::to_owned).to_vec();
    // Archive files close after 2 s, so dead letters are durable (and
    // readable by `inspect --from-archive`) soon after they arrive.
    spec.sink_args = ["--max-file-age", "2s"]
        .into_iter()
        .chain(session)
        .map(str::to_owned)
        .collect();
    spec
}

/// What must become of each delivery of a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    Delivered,
    DeadLettered(&'static str),
    /// Dead-lettered with any of these reasons: an always-failing endpoint's
    /// deliveries end `subscription_disabled` once its breaker has been open
    /// long enough, or `exhausted` if they used up the ladder while it was closed.
    DeadLetteredAs(&'static [&'static str]),
}

/// What a failed run leaves for whoever reads CI's log: the last lines of
/// every stage's log (the fault pipelines log transactions, rebalances and
/// drains at info) and every non-zero series of its metrics but histogram
/// buckets (buffers, paused partitions, in-flight attempts, transactions).
/// `HOOKLINE_KEEP_DIRS=1` keeps the whole logs.
pub async fn post_mortem(p: &Pipeline) -> String {
    let mut out = vec![format!("post-mortem of {}:", p.dir().display())];
    for stage in p.stages() {
        out.push(stage.log_tail_lines(40));
        match stage.metrics().await {
            Ok(text) => {
                out.push(format!("--- non-zero metrics of {} ---", stage.name));
                out.extend(
                    text.lines()
                        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.contains("_bucket{"))
                        .filter(|l| l.rsplit(' ').next().is_some_and(|v| v != "0"))
                        .map(str::to_owned),
                );
            }
            Err(e) => out.push(format!("--- metrics of {}: {e:#} ---", stage.name)),
        }
    }
    out.join("\n")
}

/// Where a few lost deliveries were last seen: every record of the
/// dispatcher's inputs and the DLQ (committed reads) that holds the id, with
/// the dispatcher group's committed offset of its partition, and the
/// receiver's answers to it. A record below its committed offset with no
/// follow-up and no 2xx is a follow-up lost by an offset committed past it.
pub async fn trace_lost(p: &Pipeline, lost: &[String]) -> String {
    use rdkafka::Message;
    let sample: Vec<&String> = lost.iter().take(4).collect();
    let mut topics: Vec<String> = p
        .topics
        .dispatcher_inputs()
        .into_iter()
        .map(str::to_owned)
        .collect();
    topics.push(p.topics.dlq().to_owned());
    let group = format!("{}dispatcher", p.topics.prefix());
    let mut out = Vec::new();
    let mut seen: HashMap<&str, Vec<String>> = HashMap::new();
    for topic in &topics {
        let records = match hookline_testkit::kafka::read_to_end(topic).await {
            Ok(records) => records,
            Err(e) => {
                out.push(format!("reading {topic}: {e:#}"));
                continue;
            }
        };
        let committed = hookline_testkit::kafka::committed_by_partition(&group, topic)
            .await
            .unwrap_or_default();
        for m in &records {
            let value = m.payload().unwrap_or_default();
            for id in &sample {
                if value.windows(id.len()).any(|w| w == id.as_bytes()) {
                    seen.entry(id.as_str()).or_default().push(format!(
                        "{topic} [{}] @{} (group committed {:?})",
                        m.partition(),
                        m.offset(),
                        committed.get(&m.partition())
                    ));
                }
            }
        }
    }
    let requests = p.receiver.requests();
    for id in sample {
        let answers: Vec<u16> = requests
            .iter()
            .filter(|r| r.header("webhook-id") == id.as_str())
            .map(|r| r.status)
            .collect();
        out.push(format!(
            "{id}: answered {answers:?}; in {}",
            seen.get(id.as_str())
                .map_or("no record".to_owned(), |s| s.join(", "))
        ));
    }
    out.join("\n")
}

/// Lost deliveries per subscription, with the range of their events' seqs:
/// whether a whole partition, one subscription or a stretch of time is missing.
fn lost_by_subscription(
    p: &Pipeline,
    ledger: &Ledger,
    subs_of: &HashMap<String, Vec<(String, Want)>>,
    events: &[(u64, String)],
) -> String {
    let lost: std::collections::HashSet<&str> = ledger.lost.iter().map(String::as_str).collect();
    let mut by_sub: std::collections::BTreeMap<&str, (usize, u64, u64)> = Default::default();
    for (seq, tenant) in events {
        for (sub, _) in subs_of.get(tenant).into_iter().flatten() {
            if lost.contains(delivery_id(&p.event_id(*seq), sub).as_str()) {
                let e = by_sub.entry(sub).or_insert((0, *seq, *seq));
                *e = (e.0 + 1, e.1.min(*seq), e.2.max(*seq));
            }
        }
    }
    by_sub
        .iter()
        .map(|(sub, (n, first, last))| format!("{sub}: {n} lost, events {first}..={last}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Checks the invariant and, per subscription, the expected end of each of
/// its deliveries: `wants` maps subscription id → what must happen, and
/// `events` lists (seq, tenant) of every event produced.
pub async fn check_outcomes(
    p: &Pipeline,
    ledger: &Ledger,
    subs_of: &HashMap<String, Vec<(String, Want)>>,
    events: impl IntoIterator<Item = (u64, String)>,
) -> anyhow::Result<()> {
    let events: Vec<(u64, String)> = events.into_iter().collect();
    if let Err(e) = ledger.check() {
        if ledger.lost.is_empty() {
            return Err(e);
        }
        return Err(anyhow::anyhow!(
            "{e:#}; lost by subscription: {}\n{}",
            lost_by_subscription(p, ledger, subs_of, &events),
            trace_lost(p, &ledger.lost).await
        ));
    }
    let delivered = &ledger.delivered_ids;
    let mut wrong = Vec::new();
    for (seq, tenant) in events {
        for (sub, want) in subs_of.get(&tenant).into_iter().flatten() {
            let id = delivery_id(&p.event_id(seq), sub);
            let ok = match want {
                Want::Delivered => delivered.contains(&id),
                Want::DeadLettered(reason) => {
                    !delivered.contains(&id)
                        && ledger.reasons.get(&id).map(String::as_str) == Some(*reason)
                }
                Want::DeadLetteredAs(reasons) => {
                    !delivered.contains(&id)
                        && ledger
                            .reasons
                            .get(&id)
                            .is_some_and(|r| reasons.contains(&r.as_str()))
                }
            };
            if !ok {
                wrong.push(format!(
                    "{sub} event {seq}: wanted {want:?}, got {}",
                    if delivered.contains(&id) {
                        "delivered".to_owned()
                    } else {
                        format!("{:?}", ledger.reasons.get(&id))
                    }
                ));
            }
        }
    }
    if !wrong.is_empty() {
        bail!(
            "{} deliveries ended otherwise than their endpoint dictates, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
    Ok(())
}

/// Fails if a stage's process has exited on its own.
pub fn all_running(p: &mut Pipeline) -> anyhow::Result<()> {
    let mut dead = Vec::new();
    for stage in p.stages_mut() {
        if !stage.is_running() {
            dead.push(format!("{}\n{}", stage.name, stage.log_tail()));
        }
    }
    if !dead.is_empty() {
        bail!("stages exited on their own: {}", dead.join("\n"));
    }
    Ok(())
}

/// The workload of the crash and restart scenarios: four tenants, each with a
/// healthy subscription, beside it an ordered one (max_in_flight 1), one whose
/// endpoint is down (503) for its first `FLAKY_OUTAGE` (its breaker opens,
/// its deliveries climb the ladder or are parked, then succeed), one that
/// answers 404 (dead-lettered at once, `rejected_4xx`; a 410 would also
/// disable its subscription, which has its own test) and one that always
/// answers 503 (its breaker opens and parks its deliveries until the
/// subscription is disabled, [`BREAKER_TIMES`]: dead-lettered
/// `subscription_disabled`, or `exhausted` after `MAX_ATTEMPTS` if a delivery
/// used up the ladder while the breaker was closed — after each restart of
/// the dispatcher, which starts it closed).
#[derive(Debug)]
pub struct Workload {
    pub tenants: Vec<&'static str>,
    pub subs_of: HashMap<String, Vec<(String, Want)>>,
}

/// `--max-attempts` of the workload.
pub const MAX_ATTEMPTS: &str = "6";

/// How long the workload's flaky endpoint is down, from its first request: a
/// clock, not a number of requests, since its open breaker sends few.
pub const FLAKY_OUTAGE: Duration = Duration::from_secs(4);

/// The ends of the workload's always-503 subscription.
pub const DOWN_ENDS: &[&str] = &["subscription_disabled", "exhausted"];

impl Workload {
    pub async fn install(p: &mut Pipeline) -> anyhow::Result<Self> {
        use hookline_testkit::receiver::Behaviour;
        p.receiver.set("/ok", Behaviour::status(204));
        p.receiver
            .set("/flaky", Behaviour::status(200).fail_for(FLAKY_OUTAGE, 503));
        p.receiver.set("/rejects", Behaviour::status(404));
        p.receiver.set("/down", Behaviour::status(503));
        let tenants = vec!["t0", "t1", "t2", "t3"];
        let plan: [(&str, &str, &str, i32, Want); 8] = [
            ("t0-ok", "t0", "/ok", 8, Want::Delivered),
            ("t0-ordered", "t0", "/ok", 1, Want::Delivered),
            ("t1-ok", "t1", "/ok", 8, Want::Delivered),
            ("t1-flaky", "t1", "/flaky", 4, Want::Delivered),
            ("t2-ok", "t2", "/ok", 8, Want::Delivered),
            (
                "t2-rejected",
                "t2",
                "/rejects",
                4,
                Want::DeadLettered("rejected_4xx"),
            ),
            ("t3-ok", "t3", "/ok", 8, Want::Delivered),
            ("t3-down", "t3", "/down", 4, Want::DeadLetteredAs(DOWN_ENDS)),
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
        Ok(Self { tenants, subs_of })
    }

    /// (seq, tenant) of the first `events` events as `load::start` spreads them.
    pub fn events(&self, events: u64) -> impl Iterator<Item = (u64, String)> + '_ {
        (0..events).map(|seq| {
            (
                seq,
                self.tenants[seq as usize % self.tenants.len()].to_owned(),
            )
        })
    }
}

/// Counts and checks what a crash or restart scenario ends with: settles, then
/// the invariant, each subscription's expected end, the archive, and that no
/// stage died on its own.
pub async fn finish(
    p: &mut Pipeline,
    r: &mut Report,
    work: &Workload,
    events: u64,
) -> anyhow::Result<()> {
    let settle_start = tokio::time::Instant::now();
    let ledger = crate::ledger::settle(p, STALL).await?;
    r.count(format!(
        "events {events}; {} (settled {:.1} s after the last fault)",
        ledger.summary(),
        settle_start.elapsed().as_secs_f64()
    ));
    if let Err(e) = check_outcomes(p, &ledger, &work.subs_of, work.events(events)).await {
        return Err(anyhow::anyhow!("{e:#}\n{}", post_mortem(p).await));
    }
    let (rows, ids) = match crate::ledger::wait_archived(p, &ledger, STALL).await {
        Ok(archived) => archived,
        Err(e) => return Err(anyhow::anyhow!("{e:#}\n{}", post_mortem(p).await)),
    };
    r.count(format!(
        "archive: {rows} rows for {ids} distinct dead-lettered deliveries (every dead letter archived)"
    ));
    all_running(p)?;
    Ok(())
}
