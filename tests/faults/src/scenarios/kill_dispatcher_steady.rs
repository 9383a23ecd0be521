//! `kill_dispatcher_steady` (opt-in, a measurement): duplicates at the
//! receiver per kill -9 of the dispatcher at a steady ~1,000 deliveries/s to
//! healthy endpoints. A restarted dispatcher re-attempts what its predecessor
//! had not committed: the attempts in flight at the kill plus the finished
//! deliveries whose offsets were still waiting (at most `--commit-interval`
//! of them with transactional commits). It asserts nothing about that figure,
//! only that nothing is lost; it prints, per kill, the duplicates that
//! arrived after it, the attempts in flight at it (the dispatcher's
//! `hookline_dispatcher_in_flight` just before, and the receiver's requests
//! still being answered) and the delivery rate just before it.
//!
//! `HOOKLINE_FAULTS_DISPATCHER_BIN=/path/to/hookline-dispatcher` measures
//! another build (e.g. one from before transactional commits).

use std::{
    collections::HashMap,
    time::{Duration, Instant as StdInstant},
};

use anyhow::ensure;
use hookline_testkit::{pipeline::Pipeline, receiver::Behaviour};
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::{all_running, check_outcomes, spec, Report, Want, STALL};
use crate::{dispatcher::Dispatcher, ledger, load};

const TENANTS: [&str; 8] = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"];
const SUBS_PER_TENANT: usize = 4;
/// Events per second; × `SUBS_PER_TENANT` deliveries per second.
const RATE: f64 = 250.0;
const SECONDS: f64 = 80.0;
const KILLS: usize = 5;
/// Steady delivery before each kill: the backlog a restart (and its
/// rebalance) left is drained, and the rate has stayed near the input's this long.
const STEADY: Duration = Duration::from_secs(2);
/// Longest wait for it; the kill then comes anyway (its rate says so).
const STEADY_WAIT: Duration = Duration::from_secs(20);
/// The endpoint's answer time: attempts in flight ≈ rate × this.
const ANSWER: Duration = Duration::from_millis(20);

/// One kill and what surrounded it.
#[derive(Debug)]
struct Kill {
    at: StdInstant,
    /// The dispatcher's `hookline_dispatcher_in_flight` just before.
    in_flight_gauge: f64,
}

pub async fn run(r: &mut Report, _rng: &mut StdRng) -> anyhow::Result<()> {
    let spec = spec("kill_dispatcher_steady");
    let mut p = Pipeline::create(spec.clone()).await?;
    p.receiver.set("/ok", Behaviour::status(204).delay(ANSWER));
    let mut subs = Vec::new();
    let mut subs_of: HashMap<String, Vec<(String, Want)>> = HashMap::new();
    for t in TENANTS {
        for i in 0..SUBS_PER_TENANT {
            let id = format!("{t}-ok{i}");
            subs.push(p.subscription(&id, t, "/ok", 16));
            subs_of
                .entry(t.to_owned())
                .or_default()
                .push((id, Want::Delivered));
        }
    }
    p.put_subscriptions(&subs).await?;
    p.start_sink().await?;
    let txn_id = format!("{}dispatcher", p.topics.prefix());
    let mut d = Dispatcher::start(&p, &spec, "dispatcher", &txn_id).await?;
    p.start_fanout().await?;
    let events = (RATE * SECONDS) as u64;
    let load = load::start(&mut p, &TENANTS, events, RATE)?;
    r.inject(format!(
        "load: {events} events at {RATE}/s × {SUBS_PER_TENANT} subscriptions = {:.0} deliveries/s ({} in all), \
         endpoint answers in {ANSWER:?}; dispatcher {} ({})",
        RATE * SUBS_PER_TENANT as f64,
        p.expected(),
        d.bin().display(),
        if d.transactional() {
            "transactional, default --commit-interval"
        } else {
            "no --transactional-id: a pre-transaction build"
        }
    ));
    let mut kills = Vec::new();
    for k in 0..KILLS {
        let base = p.receiver.count();
        ensure!(
            p.wait_for_requests(base + 1, STALL).await,
            "no attempt within {STALL:?} of the dispatcher's restart (kill {k})"
        );
        wait_steady(&p).await;
        let in_flight_gauge = gauge(&d, "hookline_dispatcher_in_flight").await;
        let at = StdInstant::now();
        d.kill().await?;
        let restarting = Instant::now();
        d.restart().await?;
        r.inject(format!(
            "kill {k}: kill -9 dispatcher, restarted {}, ready in {:.1} s ({} events sent)",
            if d.transactional() {
                "with the same transactional id"
            } else {
                "with the same flags"
            },
            restarting.elapsed().as_secs_f64(),
            load.sent()
        ));
        kills.push(Kill {
            at,
            in_flight_gauge,
        });
    }
    load.finish().await?;
    let ledger = ledger::settle(&p, STALL).await?;
    r.count(ledger.summary());
    measure(&p, r, &kills);
    check_outcomes(
        &p,
        &ledger,
        &subs_of,
        (0..events).map(|seq| (seq, TENANTS[seq as usize % TENANTS.len()].to_owned())),
    )
    .await?;
    d.check_running()?;
    all_running(&mut p)?;
    d.stop().await?;
    p.stop().await?;
    Ok(())
}

/// Waits until the last `STEADY` delivered at the input's rate (±25%, per
/// second): a restart's backlog is drained. Gives up after `STEADY_WAIT`.
async fn wait_steady(p: &Pipeline) {
    let target = RATE * SUBS_PER_TENANT as f64;
    let deadline = Instant::now() + STEADY_WAIT;
    let mut steady_since = Instant::now();
    let mut last = p.receiver.count();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = p.receiver.count();
        let rate = (now - last) as f64;
        last = now;
        if (rate - target).abs() > target / 4.0 {
            steady_since = Instant::now();
        } else if steady_since.elapsed() >= STEADY {
            return;
        }
    }
}

/// Attributes every duplicate 2xx to the last kill before it arrived and
/// prints the figures per kill.
fn measure(p: &Pipeline, r: &mut Report, kills: &[Kill]) {
    let requests = p.receiver.requests();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    // Index 0: before the first kill; k + 1: after kill k.
    let mut dups = vec![0usize; kills.len() + 1];
    for req in requests.iter().filter(|q| (200..300).contains(&q.status)) {
        let n = seen.entry(req.header("webhook-id")).or_default();
        *n += 1;
        if *n > 1 {
            let after = kills.iter().take_while(|k| k.at <= req.at).count();
            dups[after] += 1;
        }
    }
    let mut total_in_flight = 0.0;
    for (k, kill) in kills.iter().enumerate() {
        // Arrived but not yet answered when the dispatcher died.
        let answering = requests
            .iter()
            .filter(|q| q.at <= kill.at && q.at + ANSWER > kill.at)
            .count();
        let rate = requests
            .iter()
            .filter(|q| q.at <= kill.at && q.at + Duration::from_secs(1) > kill.at)
            .count();
        total_in_flight += kill.in_flight_gauge;
        r.count(format!(
            "kill {k}: {} duplicates after it; in flight at it: {} (dispatcher gauge), {answering} (receiver, being answered); \
             {rate} deliveries in the second before it",
            dups[k + 1],
            kill.in_flight_gauge
        ));
    }
    let after: usize = dups[1..].iter().sum();
    r.count(format!(
        "duplicates per kill: {:.1} ({after} after {} kills; {} before the first); attempts in flight per kill: {:.1}",
        after as f64 / kills.len() as f64,
        kills.len(),
        dups[0],
        total_in_flight / kills.len() as f64
    ));
}

/// A gauge's value summed over its series (0 if unreadable: then it is not known).
async fn gauge(d: &Dispatcher, name: &str) -> f64 {
    let Ok(text) = d.stage().metrics().await else {
        return 0.0;
    };
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
