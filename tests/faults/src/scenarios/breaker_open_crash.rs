//! `breaker_open_crash`: a crash and a broker restart while a circuit breaker
//! is open, with the breaker's defaults (open 30 s, the harness's shortened
//! times removed). One subscription's endpoint answers 503 until the
//! dispatcher's `hookline_dispatcher_breakers_open` shows its breaker open; then
//! the dispatcher is killed -9 and the (private) broker is stopped (SIGTERM)
//! and restarted while the deliveries the breaker parked sit on the retry
//! tiers; the dispatcher is restarted, and the endpoint recovers when the
//! breaker would have probed (at least 5 s after the restart). Proves, from the receiver's log, the tiers and the
//! DLQ read `read_committed`: every (event, matching subscription) delivered
//! (none dead-lettered: no endpoint refuses), one retry record per (delivery,
//! attempt) with parked records apart, no gap, at most one dead letter per
//! delivery, no stage exiting on its own.
//!
//! The breaker is shared on `subscriptions.health` and survives the crash: the
//! restarted dispatcher starts with it open and sends the endpoint at most
//! one request (its probe, at the probe time) before the first success,
//! asserted. Also printed: the attempts in flight at the kill, the duplicates
//! at the receiver, and the recovery time (endpoint back → first success →
//! every parked delivery arrived).

use std::{collections::HashMap, time::Duration};

use anyhow::{bail, ensure};
use hookline_testkit::{pipeline::Pipeline, receiver::Behaviour};
use rand::{rngs::StdRng, Rng};
use tokio::time::Instant;

use super::{
    all_running, broker_restart::kafka_sh, check_outcomes, post_mortem, spec, Report, Want,
    BREAKER_TIMES, STALL,
};
use crate::{chains::Chains, ledger, load};

const TENANTS: [&str; 2] = ["t0", "t1"];
const EVENTS: u64 = 1800;
const RATE: f64 = 30.0;
const MAX_ATTEMPTS: &str = "10";
/// The breaker's default open period: the endpoint recovers when the
/// breaker that was open at the kill would have probed.
const OPEN: Duration = Duration::from_secs(30);
const SICK: &str = "/sick";
/// Least time the endpoint stays down after the dispatcher's restart.
const STILL_DOWN: Duration = Duration::from_secs(5);

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    let state = std::env::var("HOOKLINE_KAFKA_STATE").unwrap_or_default();
    if !state.contains("kafka-faults-") {
        bail!("breaker_open_crash must run on the private broker hookline-faults starts for it");
    }
    let mut spec = spec("breaker_open_crash");
    // The breaker is what this scenario is about: its default times.
    spec.dispatcher_args = strip(&spec.dispatcher_args, &BREAKER_TIMES);
    spec.dispatcher_args
        .extend(["--max-attempts", MAX_ATTEMPTS].map(str::to_owned));
    let mut p = Pipeline::create(spec).await?;
    p.receiver.set("/ok", Behaviour::status(204));
    p.receiver.set(SICK, Behaviour::status(503));
    let plan = [
        ("t0-ok", "t0", "/ok", 8),
        ("t0-sick", "t0", SICK, 4),
        ("t1-ok", "t1", "/ok", 8),
    ];
    let subs: Vec<_> = plan
        .iter()
        .map(|(id, t, path, mif)| p.subscription(id, t, path, *mif))
        .collect();
    p.put_subscriptions(&subs).await?;
    let mut subs_of: HashMap<String, Vec<(String, Want)>> = HashMap::new();
    for (id, t, _, _) in plan {
        subs_of
            .entry(t.to_owned())
            .or_default()
            .push((id.to_owned(), Want::Delivered));
    }
    p.start().await?;
    let load = load::start(&mut p, &TENANTS, EVENTS, RATE)?;
    r.inject(format!(
        "load: {EVENTS} events at {RATE}/s over 2 tenants, {} deliveries; {SICK} answers 503 until recovered; \
         breaker defaults (10 failures in a row, open {} s), max attempts {MAX_ATTEMPTS}",
        p.expected(),
        OPEN.as_secs()
    ));
    let began = Instant::now();

    // The breaker opens.
    let opened = loop {
        if gauge(&p, "hookline_dispatcher_breakers_open").await >= 1.0 {
            break Instant::now();
        }
        if began.elapsed() > STALL {
            bail!(
                "no breaker open within {STALL:?}\n{}",
                post_mortem(&p).await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let failed_before_open = failed_to(&p, SICK);
    r.inject(format!(
        "t={:.1}s the dispatcher reports the breaker open, after {failed_before_open} failed requests to {SICK}",
        (opened - began).as_secs_f64()
    ));
    // Parked deliveries pile up on the tiers; then the crash.
    tokio::time::sleep(Duration::from_millis(rng.random_range(1000..4000))).await;
    let in_flight = gauge(&p, "hookline_dispatcher_in_flight").await;
    let parked = gauge(&p, "hookline_dispatcher_parked_total").await;
    let dispatcher = p.stage_mut("dispatcher")?;
    let pid = dispatcher.pid();
    dispatcher.kill().await?;
    let killed = Instant::now();
    r.inject(format!(
        "t={:.1}s kill -9 dispatcher (pid {pid}) with its breaker open {:.1} s: {in_flight} attempts in flight \
         (dispatcher gauge), {parked} parked so far (breaker open and not-due reparks; {} events sent)",
        (killed - began).as_secs_f64(),
        (killed - opened).as_secs_f64(),
        load.sent()
    ));
    // A controlled stop: `broker_restart` covers SIGKILL of the broker.
    kafka_sh(&["halt"]).await?;
    let halted = Instant::now();
    tokio::time::sleep(Duration::from_millis(rng.random_range(3000..6000))).await;
    let resuming = Instant::now();
    kafka_sh(&["resume"]).await?;
    r.inject(format!(
        "t={:.1}s broker stopped by SIGTERM, down {:.1} s, answering again {:.1} s after the restart",
        (halted - began).as_secs_f64(),
        (resuming - halted).as_secs_f64(),
        resuming.elapsed().as_secs_f64()
    ));
    let restarting = Instant::now();
    p.stage_mut("dispatcher")?.restart().await?;
    let restarted = Instant::now();
    r.inject(format!(
        "t={:.1}s dispatcher restarted, ready in {:.1} s ({} events sent)",
        (restarting - began).as_secs_f64(),
        (restarted - restarting).as_secs_f64(),
        load.sent()
    ));
    // The endpoint recovers when the breaker open at the kill would probe, or
    // a little after the restart if that is later (the broker's restart can
    // take longer than the open period): the restarted dispatcher meets the
    // endpoint still down.
    let probe_at = opened + OPEN;
    tokio::time::sleep_until(probe_at.max(restarted + STILL_DOWN)).await;
    p.receiver.set(SICK, Behaviour::status(204));
    let recovered = Instant::now();
    r.inject(format!(
        "t={:.1}s {SICK} recovers ({:.1} s after the breaker opened)",
        (recovered - began).as_secs_f64(),
        (recovered - opened).as_secs_f64()
    ));
    load.finish().await?;

    let settle_start = Instant::now();
    let ledger = ledger::settle(&p, STALL).await?;
    let chains = Chains::read(&p).await?;
    r.count(format!(
        "events {EVENTS}; {} (settled {:.1} s after the recovery)",
        ledger.summary(),
        settle_start.elapsed().as_secs_f64()
    ));
    let requests = p.receiver.requests();
    let sick: Vec<_> = requests.iter().filter(|q| q.path == SICK).collect();
    // From the restarted process's start: it attempts before it reports ready.
    let (restarted, recovered_std) = (restarting.into_std(), recovered.into_std());
    let after_restart = sick.iter().filter(|q| q.at >= restarted);
    let first_success = sick
        .iter()
        .filter(|q| (200..300).contains(&q.status))
        .map(|q| q.at)
        .min();
    let before_success = after_restart
        .filter(|q| first_success.is_none_or(|s| q.at < s))
        .count();
    // When the restarted dispatcher sent its first request anywhere.
    let first_any = requests
        .iter()
        .filter(|q| q.at >= restarted)
        .map(|q| q.at)
        .min();
    let last_sick = sick
        .iter()
        .filter(|q| (200..300).contains(&q.status))
        .map(|q| q.at)
        .max();
    let secs = |t: Option<std::time::Instant>| {
        t.map_or("never".to_owned(), |t| {
            format!(
                "{:.1} s",
                t.saturating_duration_since(recovered_std).as_secs_f64()
            )
        })
    };
    r.count(format!(
        "{SICK}: {} requests ({} failed); {before_success} between the dispatcher's restart and the first success; \
         recovery: first success {} after the endpoint recovered, every one of its deliveries {} after \
         (the restarted dispatcher's first request to any endpoint: {} after it was started)",
        sick.len(),
        sick.iter().filter(|q| !(200..300).contains(&q.status)).count(),
        secs(first_success),
        secs(last_sick),
        first_any.map_or("never".to_owned(), |t| format!(
            "{:.1} s",
            t.saturating_duration_since(restarted).as_secs_f64()
        ))
    ));
    r.count(format!(
        "read_committed: {} tier records: {} retry records for {} deliveries, {} parked for {} deliveries; \
         {} dead letters; forked retry records {}, gapped chains {}, double dead letters {}; \
         at the receiver: {} duplicate 2xx, with {in_flight} attempts in flight at the kill",
        chains.tier_records(),
        chains.retry_records(),
        chains.attempts.len(),
        chains.parked,
        chains.parked_deliveries.len(),
        chains.dead_letters(),
        chains.forks().len(),
        chains.gaps().len(),
        chains.double_dead().len(),
        ledger.duplicates
    ));
    if let Err(e) = check_outcomes(&p, &ledger, &subs_of, events()).await {
        return Err(anyhow::anyhow!("{e:#}\n{}", post_mortem(&p).await));
    }
    let (forks, gaps, doubles) = (chains.forks(), chains.gaps(), chains.double_dead());
    ensure!(
        forks.is_empty() && gaps.is_empty() && doubles.is_empty(),
        "EXACTLY-ONCE BROKEN: forked retry records {:?}, gapped chains {:?}, double dead letters {:?}",
        &forks[..forks.len().min(5)],
        &gaps[..gaps.len().min(5)],
        &doubles[..doubles.len().min(5)]
    );
    ensure!(
        chains.parked > 0,
        "the open breaker parked nothing on the tiers: the crash did not find parked deliveries"
    );
    ensure!(
        before_success <= 1,
        "the restarted dispatcher sent {before_success} requests to {SICK} before the first success: \
         it forgot the open breaker (one probe per open period is all it may send)"
    );
    all_running(&mut p)?;
    p.stop().await?;
    Ok(())
}

/// (seq, tenant) of every event `load::start` produced.
fn events() -> impl Iterator<Item = (u64, String)> {
    (0..EVENTS).map(|seq| (seq, TENANTS[seq as usize % TENANTS.len()].to_owned()))
}

/// `args` without the flags (with their values) of `remove`, given as flag–value pairs.
fn strip(args: &[String], remove: &[&str]) -> Vec<String> {
    let flags: Vec<&str> = remove.iter().step_by(2).copied().collect();
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if flags.contains(&arg.as_str()) {
            it.next();
        } else {
            out.push(arg.clone());
        }
    }
    out
}

/// Failed (non-2xx) requests to `path` so far.
fn failed_to(p: &Pipeline, path: &str) -> usize {
    p.receiver
        .requests_to(path)
        .iter()
        .filter(|q| !(200..300).contains(&q.status))
        .count()
}

/// A dispatcher gauge or counter summed over its series (0 if unreadable).
async fn gauge(p: &Pipeline, name: &str) -> f64 {
    let Ok(stage) = p.stage("dispatcher") else {
        return 0.0;
    };
    let Ok(text) = stage.metrics().await else {
        return 0.0;
    };
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}
