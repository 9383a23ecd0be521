//! `kill_dispatcher_retrying`: kill -9 of the dispatcher again and again while
//! hundreds of deliveries fail and climb a short ladder, proving the
//! transactional hand-offs from what a `read_committed` reader of the tiers
//! and the DLQ sees: one retry record per (delivery, attempt) — a retry chain
//! never forks — attempts without gaps, at most one dead letter per delivery,
//! and every delivery received (at least once) or dead-lettered, never both,
//! never neither.
//!
//! The circuit breaker runs with its default thresholds ([`super::BREAKER_TIMES`]
//! shortens its times): the failing endpoints open it, and it parks their
//! deliveries on the tiers, unattempted, beside the retry records. Parked
//! records are counted apart (`crate::chains`). A delivery of the always-503
//! endpoint ends `exhausted` after a full chain if it used up the ladder
//! while the breaker was closed (each restart starts it closed), or
//! `subscription_disabled` after a gapless part of its chain once the breaker
//! has been open long enough to disable the subscription.
//!
//! Each kill lands 0.5–2.5 s (seeded) after the restarted dispatcher made its
//! first attempt, so every kill hits a working replica. Restarts reuse the
//! transactional id (the restart fences its predecessor and aborts its open
//! transaction at once), except one, which comes back under another id, as a
//! replacement replica would: the dead one's open transaction then has to
//! time out (`transaction.timeout.ms`) before the tiers' and the group's
//! offsets are stable again.

use std::{collections::HashMap, time::Duration};

use anyhow::{bail, ensure};
use hookline_envelope::delivery_id;
use hookline_testkit::{pipeline::Pipeline, receiver::Behaviour};
use rand::{rngs::StdRng, Rng};
use tokio::time::Instant;

use super::{all_running, spec, Report, STALL};
use crate::{chains::Chains, dispatcher::Dispatcher, ledger, load};

const EVENTS: u64 = 180;
const RATE: f64 = 4.0;
const TENANTS: [&str; 2] = ["t0", "t1"];
const MAX_ATTEMPTS: i32 = 4;
/// How long `/flaky` answers 503 before it answers 200, from its first
/// request: early deliveries may use up their attempts (dead-lettered,
/// `exhausted`), later ones succeed after retries or parking, the last ones
/// at once. Its breaker closes at a probe within 14 s of opening (2 s doubling),
/// before [`super::BREAKER_TIMES`] would disable its subscription.
const FLAKY_OUTAGE: Duration = Duration::from_secs(10);
const KILLS: usize = 6;
/// The kill (0-based) after which the dispatcher comes back under another id.
const NEW_ID_AT: usize = 3;

/// What each subscription must end as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Delivered,
    Exhausted,
    /// Dead-lettered `subscription_disabled`, unattempted, its breaker open too long.
    Disabled,
    /// Delivered or exhausted, decided by when its attempts met `/flaky`'s outage.
    Either,
    /// Exhausted or disabled: the always-503 endpoint's deliveries.
    Failed,
}

pub async fn run(r: &mut Report, rng: &mut StdRng) -> anyhow::Result<()> {
    let mut spec = spec("kill_dispatcher_retrying");
    spec.dispatcher_args
        .extend(["--max-attempts".to_owned(), MAX_ATTEMPTS.to_string()]);
    let mut p = Pipeline::create(spec.clone()).await?;
    p.receiver.set("/ok", Behaviour::status(204));
    p.receiver
        .set("/flaky", Behaviour::status(200).fail_for(FLAKY_OUTAGE, 503));
    p.receiver.set("/down", Behaviour::status(503));
    let mut subs = Vec::new();
    let mut ends: HashMap<String, End> = HashMap::new();
    for t in TENANTS {
        for (kind, path, end) in [
            ("ok", "/ok", End::Delivered),
            ("flaky", "/flaky", End::Either),
            ("down", "/down", End::Failed),
        ] {
            let id = format!("{t}-{kind}");
            subs.push(p.subscription(&id, t, path, 8));
            ends.insert(id, end);
        }
    }
    p.put_subscriptions(&subs).await?;
    let txn_a = format!("{}dispatcher-a", p.topics.prefix());
    let txn_b = format!("{}dispatcher-b", p.topics.prefix());
    p.start_sink().await?;
    let mut d = Dispatcher::start(&p, &spec, "dispatcher", &txn_a).await?;
    if !d.transactional() {
        r.inject(format!(
            "{} does not know --transactional-id: started without it",
            d.bin().display()
        ));
    }
    p.start_fanout().await?;
    let load = load::start(&mut p, &TENANTS, EVENTS, RATE)?;
    r.inject(format!(
        "load: {EVENTS} events at {RATE}/s, {} deliveries (ok / flaky: 503 for its first {} s / always 503), \
         ladder r1=1s,r2=2s, max attempts {MAX_ATTEMPTS}",
        p.expected(),
        FLAKY_OUTAGE.as_secs()
    ));
    let began = Instant::now();
    let mut kills_with_failures = 0;
    for k in 0..KILLS {
        // Wait for the (restarted) dispatcher's first attempt, then a bit more.
        let base = p.receiver.count();
        let waiting = Instant::now();
        if !p.wait_for_requests(base + 1, STALL).await {
            bail!("no attempt within {STALL:?} of the dispatcher's restart (kill {k})");
        }
        let first_attempt = waiting.elapsed();
        let (failed_before, parked_before) = (failed(&p), parked(&d).await);
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2500))).await;
        let (attempts, failures) = (p.receiver.count() - base, failed(&p) - failed_before);
        // An open breaker parks the failing endpoints' due deliveries instead of
        // attempting them: hand-offs all the same.
        let parks = parked(&d).await - parked_before;
        if failures > 0 || parks > 0.0 {
            kills_with_failures += 1;
        }
        let pid = d.stage().pid();
        d.kill().await?;
        let restarting = Instant::now();
        let how = match (k == NEW_ID_AT, d.transactional()) {
            (true, transactional) => {
                d.restart_as("dispatcher-b", &txn_b).await?;
                if transactional {
                    "under a new transactional id"
                } else {
                    "as a new incarnation"
                }
            }
            (false, true) => {
                d.restart().await?;
                "with the same transactional id"
            }
            (false, false) => {
                d.restart().await?;
                "with the same flags"
            }
        };
        r.inject(format!(
            "kill {k}: t={:.1}s kill -9 dispatcher (pid {pid}): its first attempt came {:.1} s after ready, \
             then {attempts} attempts ({failures} failed) and {parks} deliveries parked by an open breaker; \
             restarted {how}, ready in {:.1} s ({} events sent)",
            (restarting - began).as_secs_f64(),
            first_attempt.as_secs_f64(),
            restarting.elapsed().as_secs_f64(),
            load.sent()
        ));
    }
    load.finish().await?;
    let settle_start = Instant::now();
    let ledger = ledger::settle(&p, STALL).await?;
    let chains = Chains::read(&p).await?;
    r.count(format!(
        "{} (settled {:.1} s after the last kill)",
        ledger.summary(),
        settle_start.elapsed().as_secs_f64()
    ));
    r.count(format!(
        "read_committed: {} tier records ({}): {} retry records for {} deliveries, {} parked for {} deliveries; \
         {} dead letters for {} deliveries",
        chains.tier_records(),
        chains
            .per_tier
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        chains.retry_records(),
        chains.attempts.len(),
        chains.parked,
        chains.parked_deliveries.len(),
        chains.dead_letters(),
        chains.dead.len()
    ));
    check(&p, r, &ledger, &chains, &ends)?;
    ensure!(
        d.kills as usize == KILLS,
        "{} kills, wanted {KILLS}",
        d.kills
    );
    ensure!(
        kills_with_failures * 2 > KILLS,
        "only {kills_with_failures} of {KILLS} kills came while attempts were failing or deliveries being parked: \
         retries were not flowing"
    );
    d.check_running()?;
    all_running(&mut p)?;
    d.stop().await?;
    p.stop().await?;
    Ok(())
}

/// Deliveries the dispatcher's open breakers parked so far in this incarnation
/// (0 if its metrics cannot be read).
async fn parked(d: &Dispatcher) -> f64 {
    let Ok(text) = d.stage().metrics().await else {
        return 0.0;
    };
    text.lines()
        .filter(|l| {
            l.starts_with("hookline_dispatcher_parked_total{")
                && l.contains("reason=\"breaker_open\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// Failed (non-2xx) attempts at the receiver so far.
fn failed(p: &Pipeline) -> usize {
    p.receiver
        .requests()
        .iter()
        .filter(|r| !(200..300).contains(&r.status))
        .count()
}

/// Every exactly-once claim, from the evidence; fails naming what broke.
fn check(
    p: &Pipeline,
    r: &mut Report,
    ledger: &ledger::Ledger,
    chains: &Chains,
    ends: &HashMap<String, End>,
) -> anyhow::Result<()> {
    let mut broken = Vec::new();
    let forks = chains.forks();
    if !forks.is_empty() {
        broken.push(format!(
            "{} retry records written more than once (forked chains), e.g. (delivery, attempt, copies) {:?}",
            forks.len(),
            &forks[..forks.len().min(5)]
        ));
        let first = &forks[0].0;
        broken.push(format!(
            "{first}'s tier records: {:?}",
            chains.coordinates.get(first)
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
            "{} retry chains with a gap, e.g. (delivery, attempts) {:?}",
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
    let (mut retried_then_delivered, mut exhausted, mut disabled, mut wrong) =
        (0, 0, 0, Vec::new());
    for (id, event) in p.expected_ids() {
        let sub = ends
            .iter()
            .find(|(sub, _)| delivery_id(event, sub) == *id)
            .map(|(sub, end)| (sub.as_str(), *end));
        let Some((sub, end)) = sub else {
            bail!("expected delivery {id} of {event} matches no subscription");
        };
        let delivered = ledger.delivered_ids.contains(id);
        let letters = chains.dead.get(id).map(Vec::as_slice).unwrap_or_default();
        let last = chains.last_attempt(id);
        let outcome = match (delivered, letters) {
            (true, []) => {
                if last > 0 {
                    retried_then_delivered += 1;
                }
                End::Delivered
            }
            (false, [(reason, attempt)])
                if reason == "exhausted"
                    && *attempt == MAX_ATTEMPTS
                    && last == MAX_ATTEMPTS - 1 =>
            {
                exhausted += 1;
                End::Exhausted
            }
            // Parked when its subscription was disabled: its attempts are
            // the retry records it has, not one more.
            (false, [(reason, attempt)])
                if reason == "subscription_disabled"
                    && *attempt == last
                    && *attempt < MAX_ATTEMPTS =>
            {
                disabled += 1;
                End::Disabled
            }
            // Lost, both, or a dead letter that is not the end of a full chain.
            _ => {
                wrong.push(format!(
                    "{sub} {event}: delivered {delivered}, dead letters {letters:?}, last tier attempt {last}"
                ));
                continue;
            }
        };
        let allowed = match end {
            End::Either => matches!(outcome, End::Delivered | End::Exhausted),
            End::Failed => matches!(outcome, End::Exhausted | End::Disabled),
            _ => outcome == end,
        };
        if !allowed {
            wrong.push(format!("{sub} {event}: wanted {end:?}, got {outcome:?}"));
        }
    }
    if !wrong.is_empty() {
        broken.push(format!(
            "{} deliveries did not end delivered xor dead-lettered (exhausted after a full chain, or disabled after a gapless one) \
             as their endpoint dictates, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        ));
    }
    // Attempts at the receiver beyond one per link of its chain: what the
    // kills made the dispatcher repeat (allowed: the hop to the endpoint is
    // at-least-once).
    let mut per_id: HashMap<&str, usize> = HashMap::new();
    let requests = p.receiver.requests();
    for req in &requests {
        *per_id.entry(req.header("webhook-id")).or_default() += 1;
    }
    let repeated: usize = per_id
        .iter()
        .map(|(id, n)| {
            // The attempt that ended the chain: a delivery, or a dead letter
            // after an attempt (a disabled subscription's is unattempted).
            let attempted_dead = chains.dead.get(*id).is_some_and(|letters| {
                letters
                    .iter()
                    .any(|(reason, _)| reason != "subscription_disabled")
            });
            let links = chains.last_attempt(id) as usize
                + usize::from(ledger.delivered_ids.contains(*id) || attempted_dead);
            n.saturating_sub(links.max(1))
        })
        .sum();
    r.count(format!(
        "ends: {} delivered ({retried_then_delivered} of them after retries), {exhausted} dead-lettered exhausted after {MAX_ATTEMPTS} attempts, \
         {disabled} subscription_disabled (parked by the breaker); \
         forked retry records {}, double dead letters {}, gapped chains {}; at the receiver: {} duplicate 2xx, {repeated} attempts repeated after kills",
        ledger.delivered,
        forks.len(),
        doubles.len(),
        gaps.len(),
        ledger.duplicates,
    ));
    ledger.check()?;
    if !broken.is_empty() {
        bail!(
            "EXACTLY-ONCE BROKEN: {}; logs in {}",
            broken.join("; "),
            p.dir().display()
        );
    }
    // The open breaker may park every always-503 delivery before it uses up
    // the ladder: failed deliveries end exhausted or disabled.
    ensure!(
        retried_then_delivered > 0 && exhausted + disabled > 0,
        "the workload did not exercise both ends: {retried_then_delivered} delivered after retries, \
         {exhausted} exhausted, {disabled} disabled"
    );
    Ok(())
}
