//! `rolling_restart`: two dispatchers share the group while a slow endpoint
//! (1.5 s per response) keeps attempts in flight; two rolling updates, each
//! sending SIGTERM first to the member with attempts in flight (both must
//! catch some, or the drain was not exercised), then to the other, each
//! started again before the next. Every SIGTERM
//! must end in a clean exit within the shutdown grace, with no attempt
//! abandoned mid-flight: in-flight attempts finish and are committed on the
//! way out (and on the revoke the rejoining member causes), so the other
//! dispatcher never repeats one — zero duplicates.
//!
//! A grace shorter than the request timeout is refused at start
//! (`--shutdown-grace` is validated against `--request-timeout`), so an
//! attempt can never outlive the grace: one slower than the request timeout
//! ends as a timeout and is retried, not abandoned.

use std::time::Duration;

use anyhow::ensure;
use hookline_testkit::{pipeline::Pipeline, receiver::Behaviour};
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::{all_running, check_outcomes, spec, Report, Want, STALL};
use crate::{ledger, load};

const EVENTS: u64 = 1500;
const RATE: f64 = 30.0;
const SLOW: Duration = Duration::from_millis(1500);

const GRACE: Duration = Duration::from_secs(8);

pub async fn run(r: &mut Report, _rng: &mut StdRng) -> anyhow::Result<()> {
    let grace = GRACE;
    let mut spec = spec("rolling_restart");
    spec.partitions = 4;
    let grace_flag = format!("{}ms", grace.as_millis());
    spec.dispatcher_args
        .extend(["--shutdown-grace".to_owned(), grace_flag]);
    let mut p = Pipeline::create(spec).await?;
    p.receiver.set("/slow", Behaviour::status(204).delay(SLOW));
    p.receiver.set("/ok", Behaviour::status(204));
    // Enough tenants (the key) that both members own busy partitions.
    let tenants = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"];
    let mut subs = Vec::new();
    let mut subs_of = std::collections::HashMap::new();
    for t in tenants {
        subs.push(p.subscription(&format!("{t}-slow"), t, "/slow", 16));
        subs.push(p.subscription(&format!("{t}-ok"), t, "/ok", 8));
        subs_of.insert(
            t.to_owned(),
            vec![
                (format!("{t}-slow"), Want::Delivered),
                (format!("{t}-ok"), Want::Delivered),
            ],
        );
    }
    p.put_subscriptions(&subs).await?;
    p.start().await?;
    p.start_dispatcher("dispatcher-b").await?;
    let load = load::start(&mut p, &tenants, EVENTS, RATE)?;
    r.inject(format!(
        "two dispatchers in one group; load {EVENTS} events at {RATE}/s, {} expected deliveries, /slow answers after {SLOW:?}",
        p.expected()
    ));
    let mut abandoned_total = 0;
    let mut busy_stops = 0;
    let mut last = "";
    for step in 0..4 {
        tokio::time::sleep(Duration::from_secs(4)).await;
        // SIGTERM the member with the most attempts in flight (both own
        // `deliveries` partitions, balanced per topic, so the drain is
        // exercised on whichever is busiest).
        let mut pick = None;
        let waiting = Instant::now();
        while pick.is_none() && waiting.elapsed() < Duration::from_secs(10) {
            for name in ["dispatcher", "dispatcher-b"] {
                let n = in_flight_of(&p, name).await;
                if n > 0 && pick.is_none_or(|(_, m)| n > m) {
                    pick = Some((name, n));
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut name = pick.map_or("dispatcher", |(name, _)| name);
        if step % 2 == 1 {
            // The second half of a rolling update: the member not yet replaced.
            name = if last == "dispatcher" {
                "dispatcher-b"
            } else {
                "dispatcher"
            };
        }
        last = name;
        let in_flight = in_flight_of(&p, name).await;
        busy_stops += usize::from(in_flight > 0);
        let stage = p.stage_mut(name)?;
        let exit = stage.terminate(grace + Duration::from_secs(30)).await?;
        let restarting = Instant::now();
        stage.restart().await?;
        r.inject(format!(
            "SIGTERM {name} with {in_flight} attempts in flight: exit code {:?} after {:.2} s; restarted, ready in {:.1} s ({} events sent)",
            exit.code,
            exit.took.as_secs_f64(),
            restarting.elapsed().as_secs_f64(),
            load.sent()
        ));
        ensure!(exit.clean, "{name} did not exit cleanly after SIGTERM");
        // The drain is bounded by the grace; 2 s covers the final commit and exit.
        ensure!(
            exit.took <= grace + Duration::from_secs(2),
            "{name} took {:?} to exit, beyond its {grace:?} grace",
            exit.took
        );
    }
    load.finish().await?;
    ensure!(
        busy_stops >= 2,
        "only {busy_stops} of 4 SIGTERMs found attempts in flight: the drain was not exercised"
    );
    let ledger = ledger::settle(&p, STALL).await?;
    for name in ["dispatcher", "dispatcher-b"] {
        let (drains, revokes) = handovers(&p, name)?;
        abandoned_total += drains.iter().chain(&revokes).map(|h| h.1).sum::<u64>();
        r.count(format!(
            "{name}: drains (finished, abandoned) {drains:?}; revokes (finished, abandoned) {revokes:?}"
        ));
    }
    r.count(ledger.summary());
    let events = (0..EVENTS).map(|seq| (seq, tenants[seq as usize % tenants.len()].to_owned()));
    check_outcomes(&p, &ledger, &subs_of, events).await?;
    ensure!(
        abandoned_total == 0 && ledger.duplicates == 0,
        "{abandoned_total} attempts were abandoned and {} delivered twice",
        ledger.duplicates
    );
    all_running(&mut p)?;
    p.stop().await?;
    Ok(())
}

/// `hookline_dispatcher_in_flight` of a stage now (0 if unreadable).
async fn in_flight_of(p: &Pipeline, name: &str) -> u64 {
    let Ok(stage) = p.stage(name) else {
        return 0;
    };
    let Ok(text) = stage.metrics().await else {
        return 0;
    };
    text.lines()
        .find(|l| l.starts_with("hookline_dispatcher_in_flight"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// (finished, abandoned) of each drain and each revoke the dispatcher logged.
type Handover = (u64, u64);

fn handovers(p: &Pipeline, name: &str) -> anyhow::Result<(Vec<Handover>, Vec<Handover>)> {
    let log = std::fs::read_to_string(p.dir().join(format!("{name}.log")))?;
    let mut drains = Vec::new();
    let mut revokes = Vec::new();
    let mut draining_in_flight = 0;
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let field = |k: &str| {
            v.get(k)
                .or_else(|| v.pointer(&format!("/fields/{k}")))
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        };
        let message = v
            .get("message")
            .or_else(|| v.pointer("/fields/message"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        match message {
            "draining" => draining_in_flight = field("in_flight"),
            "drained; offsets committed" => {
                let abandoned = field("abandoned");
                drains.push((draining_in_flight.saturating_sub(abandoned), abandoned));
            }
            "revoked partitions handed over" => {
                revokes.push((field("finished_in_flight"), field("abandoned")));
            }
            _ => {}
        }
    }
    Ok((drains, revokes))
}
