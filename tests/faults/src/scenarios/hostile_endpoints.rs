//! `hostile_endpoints` (issue #9 item 4): the real dispatcher delivers to one
//! subscription per hostile endpoint of `hookline_testkit::hostile` — silent,
//! dripping, resetting, an endless body, a redirect to a private address, a
//! malformed status line, a certificate it must refuse — while a healthy
//! tenant's events flow beside them. Proves, from the DLQ and the endpoints'
//! own connection logs: each hostile delivery ends as its endpoint dictates
//! (dead-lettered with the expected reason and `last_outcome`, or delivered
//! once when a 200 arrived), every attempt is bounded in time and in bytes
//! read, the dispatcher's memory stays bounded, no stage dies, and the
//! healthy tenant's deliveries arrive promptly throughout.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    time::Duration,
};

use anyhow::{bail, Context};
use hookline_envelope::{decode, delivery_id, DeadLetter};
use hookline_testkit::{
    hostile::{Behaviour, CertFault, Framing, HostileServer, Malformed, RedirectTo},
    kafka,
    pipeline::{epoch_us, sent_us, Pipeline, ATTEMPT_STARTED_HEADER},
};
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::{all_running, check_outcomes, spec, Report, Want};
use crate::ledger::Ledger;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_ATTEMPTS: u32 = 3;
/// Scheduling slack for an attempt's time bound on a shared machine.
const SLACK: Duration = Duration::from_secs(1);
/// Hostile events per wave per hostile subscription, and the waves' start times.
const PER_WAVE: u64 = 2;
const WAVES: [Duration; 2] = [Duration::ZERO, Duration::from_secs(5)];
/// The healthy tenant's load.
const HEALTHY_EVENTS: u64 = 300;
const HEALTHY_RATE: f64 = 25.0;
/// What "promptly" means for the healthy tenant: well under one hostile
/// attempt (the request timeout), which is what it would wait if a hostile
/// endpoint held its lane, partition or a shared slot.
const HEALTHY_P99: Duration = Duration::from_millis(1500);
const HEALTHY_MAX: Duration = Duration::from_millis(3000);
/// Peak RSS the dispatcher may reach while endpoints offer it 8 GiB bodies.
const MAX_DISPATCHER_RSS_MIB: f64 = 300.0;
/// Bytes a server may get rid of per attempt on a huge body: the client's
/// 4 KiB cap plus the sockets' buffers.
const MAX_BYTES_PER_ATTEMPT: u64 = 16 << 20;
/// How many of the slowest healthy deliveries the report breaks down by hop.
const SLOWEST_SHOWN: usize = 5;
const STALL: Duration = Duration::from_secs(30);
const GIB: u64 = 1 << 30;

/// One hostile subscription: its endpoint and how its deliveries must end.
struct Case {
    sub: &'static str,
    behaviour: Behaviour,
    want: Want,
    /// `last_outcome` of the dead letter, or None for a delivery.
    outcome: Option<&'static str>,
    /// Attempts each delivery gets.
    attempts: u32,
}

fn cases() -> Vec<Case> {
    let drip = Duration::from_secs(1);
    let exhausted = |sub, behaviour, outcome| Case {
        sub,
        behaviour,
        want: Want::DeadLettered("exhausted"),
        outcome: Some(outcome),
        attempts: MAX_ATTEMPTS,
    };
    let redirect = |sub, status, to, outcome| Case {
        sub,
        behaviour: Behaviour::Redirect { status, to },
        want: Want::DeadLettered("redirect"),
        outcome: Some(outcome),
        attempts: 1,
    };
    let delivered = |sub, behaviour| Case {
        sub,
        behaviour,
        want: Want::Delivered,
        outcome: None,
        attempts: 1,
    };
    vec![
        exhausted("h-silent", Behaviour::Silent, "timeout"),
        exhausted(
            "h-drip-status",
            Behaviour::DripStatus { interval: drip },
            "timeout",
        ),
        delivered("h-drip-body", Behaviour::DripBody { interval: drip }),
        exhausted("h-reset", Behaviour::Reset, "connection_reset"),
        exhausted(
            "h-huge-500",
            Behaviour::HugeBody {
                status: 500,
                framing: Framing::Length(8 * GIB),
            },
            "http_500",
        ),
        exhausted(
            "h-huge-503-chunked",
            Behaviour::HugeBody {
                status: 503,
                framing: Framing::Chunked,
            },
            "http_503",
        ),
        delivered(
            "h-huge-200",
            Behaviour::HugeBody {
                status: 200,
                framing: Framing::Length(8 * GIB),
            },
        ),
        redirect("h-302-metadata", 302, RedirectTo::Metadata, "http_302"),
        redirect("h-307-loopback", 307, RedirectTo::Canary, "http_307"),
        exhausted(
            "h-status-2OO",
            Behaviour::Malformed(Malformed::LetterDigits),
            "protocol",
        ),
        exhausted(
            "h-status-99999",
            Behaviour::Malformed(Malformed::LongCode),
            "protocol",
        ),
        exhausted(
            "h-garbage",
            Behaviour::Malformed(Malformed::Garbage),
            "protocol",
        ),
        exhausted(
            "h-endless-headers",
            Behaviour::Malformed(Malformed::EndlessHeaders),
            "protocol",
        ),
        // Nothing complete arrived before the close: hyper's incomplete message.
        exhausted(
            "h-truncated",
            Behaviour::Malformed(Malformed::Truncated),
            "connection_reset",
        ),
        exhausted(
            "h-cert-other-host",
            Behaviour::WrongCert(CertFault::OtherHost),
            "tls",
        ),
        exhausted(
            "h-cert-untrusted",
            Behaviour::WrongCert(CertFault::UntrustedCa),
            "tls",
        ),
    ]
}

/// Removes the CA file when the scenario ends, however it ends.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub async fn run(r: &mut Report, _rng: &mut StdRng) -> anyhow::Result<()> {
    let cases = cases();
    let mut servers = Vec::with_capacity(cases.len());
    for case in &cases {
        servers.push(HostileServer::start(case.behaviour).await?);
    }
    // The other-host certificate comes from a CA the dispatcher trusts, so
    // only its name is wrong.
    let ca = TempFile(
        std::env::temp_dir().join(format!("{}-ca.pem", kafka::unique_name("faults-hostile"))),
    );
    let ca_pem = servers
        .iter()
        .find_map(HostileServer::ca_pem)
        .context("the other-host server has a CA")?;
    std::fs::write(&ca.0, ca_pem)?;

    let mut spec = spec("hostile_endpoints");
    let mut args = std::mem::take(&mut spec.dispatcher_args).into_iter();
    while let Some(arg) = args.next() {
        if arg == "--request-timeout" {
            args.next();
        } else {
            spec.dispatcher_args.push(arg);
        }
    }
    spec.dispatcher_args.extend([
        "--request-timeout".to_owned(),
        format!("{}s", REQUEST_TIMEOUT.as_secs()),
        "--connect-timeout".to_owned(),
        "1s".to_owned(),
        "--max-attempts".to_owned(),
        MAX_ATTEMPTS.to_string(),
        "--tls-extra-ca".to_owned(),
        ca.0.display().to_string(),
    ]);
    let mut p = Pipeline::create(spec).await?;
    p.receiver
        .set("/ok", hookline_testkit::receiver::Behaviour::status(204));
    let mut subs = vec![p.subscription("healthy-ok", "healthy", "/ok", 8)];
    for (case, server) in cases.iter().zip(&servers) {
        let mut sub = p.subscription(case.sub, case.sub, "/unused", 4);
        sub.url = server.url("/hook");
        subs.push(sub);
        r.inject(format!(
            "{} ({}): {}",
            case.sub,
            server.url("/hook"),
            case.behaviour
        ));
    }
    p.put_subscriptions(&subs).await?;
    p.start().await?;
    let rss_at_start = p.stage("dispatcher")?.usage()?.peak_rss_mib;

    // The healthy events are made (and stamped) as they are sent, so the
    // receiver's arrival time minus the stamp is each one's end-to-end wait.
    r.inject(format!(
        "healthy tenant: {HEALTHY_EVENTS} events at {HEALTHY_RATE}/s to a 204 endpoint"
    ));
    let began = Instant::now();
    let mut acks = Vec::with_capacity(HEALTHY_EVENTS as usize);
    let mut hostile_events: Vec<(u64, String)> = Vec::new();
    let mut waves = WAVES.iter().enumerate().peekable();
    for seq in 0..HEALTHY_EVENTS {
        let due = began + Duration::from_secs_f64(seq as f64 / HEALTHY_RATE);
        tokio::time::sleep_until(due).await;
        while let Some((wave, _)) = waves.next_if(|(_, at)| began + **at <= due) {
            let mut batch = Vec::new();
            for (c, case) in cases.iter().enumerate() {
                for i in 0..PER_WAVE {
                    let seq = 100_000 + (wave as u64) * 10_000 + (c as u64) * 100 + i;
                    batch.push(p.event(seq, case.sub, 256));
                    hostile_events.push((seq, case.sub.to_owned()));
                }
            }
            let n = batch.len();
            p.produce(batch).await?;
            r.inject(format!(
                "wave {wave} at t={:.1}s: {PER_WAVE} events for each of {} hostile subscriptions ({n} deliveries)",
                began.elapsed().as_secs_f64(),
                cases.len()
            ));
        }
        let event = p.event(seq, "healthy", 256);
        acks.push(p.send(&event)?);
    }
    for ack in acks {
        ack.await
            .context("the producer dropped an event")?
            .map_err(|(e, _)| anyhow::anyhow!("a healthy event was not acknowledged: {e}"))?;
    }

    let ledger = settle(&p, &cases, &servers).await?;
    r.count(format!(
        "{} (drip-body and huge-200 deliveries counted from their endpoints' logs)",
        ledger.summary()
    ));
    let mut subs_of: HashMap<String, Vec<(String, Want)>> = HashMap::new();
    subs_of.insert(
        "healthy".to_owned(),
        vec![("healthy-ok".to_owned(), Want::Delivered)],
    );
    for case in &cases {
        subs_of.insert(
            case.sub.to_owned(),
            vec![(case.sub.to_owned(), case.want.clone())],
        );
    }
    let events = (0..HEALTHY_EVENTS)
        .map(|seq| (seq, "healthy".to_owned()))
        .chain(hostile_events.iter().cloned());
    let letters = dead_letters(&p).await?;
    let mut problems = Vec::new();
    for (case, server) in cases.iter().zip(&servers) {
        problems.extend(check_case(r, &p, case, server, &hostile_events, &letters));
    }
    if let Err(e) = check_outcomes(&p, &ledger, &subs_of, events).await {
        problems.push(format!("{e:#}"));
    }
    let canary = servers
        .iter()
        .map(HostileServer::canary_hits)
        .sum::<usize>();
    r.count(format!(
        "redirect targets contacted: {canary} (the loopback one is allowed by the egress policy)"
    ));
    if canary > 0 {
        problems.push(format!("a redirect was followed {canary} times"));
    }

    let accepted = servers
        .iter()
        .flat_map(HostileServer::connections)
        .map(|c| c.accepted_at);
    if let (Some(from), Some(to)) = (accepted.clone().min(), accepted.max()) {
        let t =
            |at: std::time::Instant| at.saturating_duration_since(began.into_std()).as_secs_f64();
        r.count(format!(
            "hostile attempts started from t={:.1}s to t={:.1}s; the healthy load ran t=0-{:.0}s",
            t(from),
            t(to),
            HEALTHY_EVENTS as f64 / HEALTHY_RATE
        ));
    }
    problems.extend(check_healthy(r, &p, began).await);
    let usage = p.stage("dispatcher")?.usage()?;
    r.count(format!(
        "dispatcher peak RSS {:.1} MiB (at start {rss_at_start:.1} MiB, bound {MAX_DISPATCHER_RSS_MIB} MiB), CPU {:.1} s",
        usage.peak_rss_mib, usage.cpu_s
    ));
    if usage.peak_rss_mib >= MAX_DISPATCHER_RSS_MIB {
        problems.push(format!("dispatcher peak RSS {:.1} MiB", usage.peak_rss_mib));
    }
    let (rows, ids) = crate::ledger::wait_archived(&p, &ledger, STALL).await?;
    r.count(format!(
        "archive: {rows} rows for {ids} distinct dead-lettered deliveries"
    ));
    all_running(&mut p)?;
    if !problems.is_empty() {
        bail!("{}", problems.join("; "));
    }
    p.stop().await?;
    Ok(())
}

/// Delivery ids whose endpoint wrote a 200 head for them: the hostile
/// endpoints of `Want::Delivered` cases answer 200 before anything else.
fn delivered_at_endpoints(cases: &[Case], servers: &[HostileServer]) -> HashMap<String, usize> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (case, server) in cases.iter().zip(servers) {
        if case.want != Want::Delivered {
            continue;
        }
        for conn in server.connections() {
            if conn.response_bytes > 0 {
                for id in conn.webhook_ids {
                    *seen.entry(id).or_default() += 1;
                }
            }
        }
    }
    seen
}

/// The ledger of the receiver and the DLQ, with the deliveries the hostile
/// endpoints answered 200 counted as delivered.
async fn collect(
    p: &Pipeline,
    cases: &[Case],
    servers: &[HostileServer],
) -> anyhow::Result<Ledger> {
    let mut ledger = Ledger::collect(p).await?;
    let at_endpoints = delivered_at_endpoints(cases, servers);
    ledger.lost.retain(|id| {
        let delivered = at_endpoints.contains_key(id);
        if delivered {
            ledger.delivered += 1;
            ledger.delivered_ids.insert(id.clone());
        }
        !delivered
    });
    ledger.duplicates += at_endpoints.values().map(|n| n - 1).sum::<usize>();
    Ok(ledger)
}

/// Like `ledger::settle`, counting the hostile endpoints' deliveries too.
async fn settle(p: &Pipeline, cases: &[Case], servers: &[HostileServer]) -> anyhow::Result<Ledger> {
    let mut last = None;
    let mut changed = Instant::now();
    loop {
        let ledger = collect(p, cases, servers).await?;
        if ledger.accounted() >= ledger.expected {
            // Let late retries and duplicates land before counting them.
            tokio::time::sleep(Duration::from_secs(2)).await;
            return collect(p, cases, servers).await;
        }
        let now = (ledger.attempts, ledger.dlq_records, ledger.delivered);
        if last != Some(now) {
            (last, changed) = (Some(now), Instant::now());
        } else if changed.elapsed() >= STALL {
            return Ok(ledger);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn dead_letters(p: &Pipeline) -> anyhow::Result<HashMap<String, DeadLetter>> {
    use rdkafka::Message;
    let mut out = HashMap::new();
    for m in kafka::read_to_end(p.topics.dlq()).await? {
        let letter: DeadLetter = decode(m.payload().unwrap_or_default())?;
        out.insert(letter.delivery.delivery_id.clone(), letter);
    }
    Ok(out)
}

/// Checks one hostile subscription's dead letters and its endpoint's log;
/// reports what it counted and returns what is wrong.
fn check_case(
    r: &mut Report,
    p: &Pipeline,
    case: &Case,
    server: &HostileServer,
    events: &[(u64, String)],
    letters: &HashMap<String, DeadLetter>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let ids: HashSet<String> = events
        .iter()
        .filter(|(_, tenant)| tenant == case.sub)
        .map(|(seq, _)| delivery_id(&p.event_id(*seq), case.sub))
        .collect();
    // Dead letters: reason, last outcome, attempts, first attempt to dead.
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    let mut attempts: HashMap<i32, usize> = HashMap::new();
    let mut longest_ms = 0i64;
    for id in &ids {
        let Some(letter) = letters.get(id) else {
            continue;
        };
        let outcome = letter.delivery.last_outcome.clone().unwrap_or_default();
        *outcomes
            .entry(format!("{}/{outcome}", letter.reason))
            .or_default() += 1;
        *attempts.entry(letter.delivery.attempt).or_default() += 1;
        if let Some(first) = letter.delivery.first_attempt_at {
            longest_ms = longest_ms.max(letter.dead_at - first);
        }
        if case.outcome != Some(outcome.as_str()) {
            problems.push(format!(
                "{}: dead letter with last_outcome {outcome}, wanted {:?}",
                case.sub, case.outcome
            ));
        }
        if letter.delivery.attempt != case.attempts as i32 {
            problems.push(format!(
                "{}: dead-lettered after {} attempts, wanted {}",
                case.sub, letter.delivery.attempt, case.attempts
            ));
        }
    }
    // The endpoint's log: attempts, how long each held the connection, bytes.
    let conns = server.connections();
    let bound = REQUEST_TIMEOUT + SLACK;
    let mut longest = Duration::ZERO;
    // What each connection the client holds open (neither closed nor reusable) saw.
    let mut held = Vec::new();
    for c in &conns {
        match c.closed_after() {
            Some(after) => longest = longest.max(after),
            None if c.settled() || c.ended_at.is_some() => {}
            // Never carried a request: hyper-util's pool races a new connect
            // against a connection being returned and, when the returned one
            // wins, keeps the new one idle in the pool, unused but reusable.
            // (`Connection::settled` does not count it: a test waiting on it
            // must still wait for a TLS handshake's end.)
            None if c.requests == 0 && c.error.is_none() => {}
            None => {
                held.push(format!(
                    "{} requests read, {} answered, open {:.1} s",
                    c.requests,
                    c.responses,
                    c.accepted_at.elapsed().as_secs_f64()
                ));
            }
        }
    }
    let requests: usize = conns.iter().map(|c| c.requests as usize).sum();
    let max_written = conns.iter().map(|c| c.response_bytes).max().unwrap_or(0);
    r.count(format!(
        "{}: {} deliveries -> {}; endpoint: {} connections, {requests} requests, longest held {:.2} s, max written {} B/connection{}",
        case.sub,
        ids.len(),
        if outcomes.is_empty() {
            "delivered".to_owned()
        } else {
            let mut o: Vec<String> = outcomes.iter().map(|(k, n)| format!("{n}x {k}")).collect();
            o.sort();
            format!(
                "{} after {:?} attempts, first attempt to DLQ <= {:.1} s",
                o.join(", "),
                attempts,
                longest_ms as f64 / 1000.0
            )
        },
        conns.len(),
        longest.as_secs_f64(),
        max_written,
        if !held.is_empty() {
            format!(", {} held open by the client", held.len())
        } else {
            String::new()
        }
    ));
    if longest > bound {
        problems.push(format!(
            "{}: an attempt held its connection {longest:?} (bound {bound:?})",
            case.sub
        ));
    }
    if !held.is_empty() {
        problems.push(format!(
            "{}: {} connections neither closed nor reusable ({})",
            case.sub,
            held.len(),
            held.join("; ")
        ));
    }
    if max_written > MAX_BYTES_PER_ATTEMPT {
        problems.push(format!(
            "{}: {max_written} bytes written on one connection",
            case.sub
        ));
    }
    // Every attempt reached the endpoint (TLS ones stop at the handshake).
    let reached = if matches!(case.behaviour, Behaviour::WrongCert(_)) {
        conns.len()
    } else {
        requests
    };
    let wanted = ids.len() * case.attempts as usize;
    if reached != wanted {
        problems.push(format!(
            "{}: {reached} attempts reached the endpoint, wanted {wanted}",
            case.sub
        ));
    }
    problems
}

/// The healthy tenant's end-to-end wait (event produced → first 2xx), while
/// hostile attempts were in progress. The slowest few are broken down by hop
/// (fanout produced the delivery record, the dispatcher started the POST, the
/// receiver got it), so a wait over the bound says where it was spent.
async fn check_healthy(r: &mut Report, p: &Pipeline, began: Instant) -> Vec<String> {
    struct Wait {
        wait: i64,
        sent: i64,
        started: Option<i64>,
        received: i64,
    }
    let mut first: HashMap<String, Wait> = HashMap::new();
    for req in p.receiver.requests_to("/ok") {
        if !(200..300).contains(&req.status) {
            continue;
        }
        let Some(sent) = sent_us(&req.body) else {
            continue;
        };
        let received = epoch_us(req.received_at);
        let wait = Wait {
            wait: received - sent,
            sent,
            started: req.header(ATTEMPT_STARTED_HEADER).parse().ok(),
            received,
        };
        let id = req.header("webhook-id").to_owned();
        match first.get(&id) {
            Some(w) if w.wait <= wait.wait => {}
            _ => {
                first.insert(id, wait);
            }
        }
    }
    let mut waits: Vec<(String, Wait)> = first.into_iter().collect();
    waits.sort_unstable_by_key(|(_, w)| w.wait);
    if waits.is_empty() {
        return vec!["the healthy tenant got nothing".to_owned()];
    }
    let at = |q: f64| {
        waits[((waits.len() as f64 * q).ceil() as usize).clamp(1, waits.len()) - 1]
            .1
            .wait
    };
    let (p50, p99, max) = (at(0.5), at(0.99), at(1.0));
    let ms = |us: i64| us as f64 / 1000.0;
    r.count(format!(
        "healthy tenant: {} deliveries, wait p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (bounds p99 {:?}, max {:?})",
        waits.len(),
        ms(p50),
        ms(p99),
        ms(max),
        HEALTHY_P99,
        HEALTHY_MAX
    ));
    // Where the slowest waits went: the delivery record's timestamp is when
    // fanout produced it inside its transaction.
    let slowest = &waits[waits.len().saturating_sub(SLOWEST_SHOWN)..];
    let produced = produced_at(p, slowest.iter().map(|(id, _)| id.as_str()))
        .await
        .unwrap_or_else(|e| {
            r.inject(format!("could not read the deliveries' timestamps: {e:#}"));
            HashMap::new()
        });
    let began_us = epoch_us(std::time::SystemTime::now()) - began.elapsed().as_micros() as i64;
    for (id, w) in slowest.iter().rev() {
        let hop =
            |t: Option<i64>| t.map_or("?".to_owned(), |t| format!("+{:.0} ms", ms(t - w.sent)));
        r.count(format!(
            "  slow healthy delivery sent at t={:.2}s: fanout produced {}, POST started {}, received {}",
            ms(w.sent - began_us) / 1000.0,
            hop(produced.get(id).copied()),
            hop(w.started),
            hop(Some(w.received)),
        ));
    }
    let mut problems = Vec::new();
    if p99 > HEALTHY_P99.as_micros() as i64 || max > HEALTHY_MAX.as_micros() as i64 {
        problems.push(format!(
            "the healthy tenant waited p99 {:.0} ms, max {:.0} ms",
            ms(p99),
            ms(max)
        ));
    }
    problems
}

/// The Kafka timestamps (µs since the epoch) of the given deliveries' records.
async fn produced_at<'a>(
    p: &Pipeline,
    ids: impl Iterator<Item = &'a str>,
) -> anyhow::Result<HashMap<String, i64>> {
    use rdkafka::Message;
    let wanted: HashSet<&str> = ids.collect();
    let mut out = HashMap::new();
    for m in kafka::read_to_end(p.topics.deliveries()).await? {
        let delivery: hookline_envelope::Delivery = decode(m.payload().unwrap_or_default())?;
        if let (true, Some(ms)) = (
            wanted.contains(delivery.delivery_id.as_str()),
            m.timestamp().to_millis(),
        ) {
            out.insert(delivery.delivery_id, ms * 1000);
        }
    }
    Ok(out)
}
