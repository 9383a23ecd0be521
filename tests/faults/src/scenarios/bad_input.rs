//! `bad_input` (issue #9 item 5): bad records on every topic while all three
//! stages run under steady good load — garbage bytes, truncated Avro, unknown
//! writer fingerprints, valid records of the wrong type, oversize payloads and
//! tombstones on `events`, `subscriptions`, `deliveries`, a retry tier,
//! `deliveries.dlq` and `events.quarantine`, interleaved with good records on
//! the same partitions.
//!
//! Proves: no stage exits; every expected delivery arrives, or is
//! dead-lettered as its endpoint dictates (an oversize `Delivery` as
//! `payload_too_large`); every bad record on `events`, `deliveries` and the
//! tier is on the quarantine topic with its reason and source coordinates,
//! and archived; every bad record on the DLQ and the quarantine topic is
//! archived raw with reason `undecodable`; every bad subscription record is
//! counted by reason by both followers (which, by design, write nowhere);
//! nothing behind a bad record stalls — deliveries produced after the bad
//! records arrive within a bound, a subscription written after them takes
//! effect, and every group commits to the end of every topic.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::Duration,
};

use anyhow::{bail, ensure, Context};
use hookline_envelope::{decode, encode, QuarantinedEvent, Subscription};
use hookline_testkit::{
    kafka,
    pipeline::{epoch_us, now_us, sent_us, seq_of, Pipeline},
    receiver::Behaviour,
};
use rand::rngs::StdRng;
use rdkafka::{producer::FutureRecord, Message};
use tokio::time::Instant;

use super::{all_running, check_outcomes, spec, Report, Want, FLAKY_OUTAGE, STALL};
use crate::{ledger, load};

mod records;

use records::{
    bad, bad_archive_input, bad_deliveries, bad_events, bad_subscriptions, dead_letter, delivery,
    quarantined, Bad, Fate, OVERSIZE,
};

const EVENTS: u64 = 1200;
const RATE: f64 = 40.0;
/// Steady load before the first bad record.
const WARM_UP: Duration = Duration::from_secs(4);
/// `--max-payload-bytes` of fanout and dispatcher.
const MAX_PAYLOAD: usize = 16 * 1024;
/// How soon a delivery produced after the bad records must arrive.
const PROMPT: Duration = Duration::from_secs(10);
/// Bound on catching up: the late subscription taking effect, the archive,
/// the final commits.
const CATCH_UP: Duration = Duration::from_secs(30);
/// Sequence numbers of events injected by hand (not by the load).
const DIRECT_SEQ: u64 = 100_000;
const BIG_SEQ: u64 = 200_000;
const LATE_SEQ: u64 = 300_000;
const LATE_EVENTS: u64 = 20;
/// (topic, partition, offset).
type Coords = (String, i32, i64);

/// Everything written by hand, in order.
#[derive(Default)]
struct Injected {
    bad: Vec<(Coords, &'static str, Fate)>,
    /// (topic label, kind) → records.
    by_kind: BTreeMap<(String, &'static str), usize>,
}

impl Injected {
    async fn write(
        &mut self,
        p: &Pipeline,
        label: &str,
        topic: &str,
        partition: Option<i32>,
        key: &[u8],
        b: &Bad,
    ) -> anyhow::Result<()> {
        let coords = send(p, topic, partition, key, b.value.as_deref()).await?;
        self.bad.push((coords, b.kind, b.fate));
        *self.by_kind.entry((label.to_owned(), b.kind)).or_default() += 1;
        Ok(())
    }
}

/// Produces one record (to `partition`, or by key) and returns where it landed.
async fn send(
    p: &Pipeline,
    topic: &str,
    partition: Option<i32>,
    key: &[u8],
    value: Option<&[u8]>,
) -> anyhow::Result<Coords> {
    let mut record = FutureRecord::<[u8], [u8]>::to(topic).key(key);
    if let Some(partition) = partition {
        record = record.partition(partition);
    }
    if let Some(value) = value {
        record = record.payload(value);
    }
    let (partition, offset) = p
        .producer
        .send(record, Duration::from_secs(30))
        .await
        .map(|d| (d.partition, d.offset))
        .map_err(|(e, _)| anyhow::anyhow!("producing to {topic}: {e}"))?;
    Ok((topic.to_owned(), partition, offset))
}

/// The sum of the samples of metric `name` whose labels include every one of `labels`.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub async fn run(r: &mut Report, _rng: &mut StdRng) -> anyhow::Result<()> {
    let mut spec = spec("bad_input");
    let cap = MAX_PAYLOAD.to_string();
    spec.fanout_args
        .extend(["--max-payload-bytes".to_owned(), cap.clone()]);
    spec.dispatcher_args
        .extend(["--max-payload-bytes".to_owned(), cap]);
    let mut p = Pipeline::create(spec).await?;
    let partitions: Vec<i32> = (0..3).collect();
    p.receiver.set("/ok", Behaviour::status(204));
    p.receiver
        .set("/flaky", Behaviour::status(204).fail_for(FLAKY_OUTAGE, 503));
    p.receiver.set("/rejects", Behaviour::status(404));
    let tenants = ["t0", "t1", "t2", "t3"];
    let mut plan: Vec<(String, &str, &str, i32, Want)> = tenants
        .iter()
        .map(|t| (format!("{t}-ok"), *t, "/ok", 8, Want::Delivered))
        .collect();
    plan.extend([
        // Retries on the tiers and dead letters on the DLQ all along.
        ("t1-flaky".to_owned(), "t1", "/flaky", 4, Want::Delivered),
        (
            "t2-rejected".to_owned(),
            "t2",
            "/rejects",
            4,
            Want::DeadLettered("rejected_4xx"),
        ),
        // Good deliveries written by hand between the bad ones.
        ("direct-ok".to_owned(), "direct", "/ok", 8, Want::Delivered),
        // Valid deliveries above the dispatcher's payload cap.
        (
            "big-sub".to_owned(),
            "big",
            "/ok",
            1,
            Want::DeadLettered("payload_too_large"),
        ),
    ]);
    let subs: Vec<Subscription> = plan
        .iter()
        .map(|(id, t, path, mif, _)| p.subscription(id, t, path, *mif))
        .collect();
    p.put_subscriptions(&subs).await?;
    let mut subs_of: HashMap<String, Vec<(String, Want)>> = HashMap::new();
    for (id, t, _, _, want) in &plan {
        subs_of
            .entry((*t).to_owned())
            .or_default()
            .push((id.clone(), want.clone()));
    }
    subs_of.insert(
        "late".to_owned(),
        vec![("late-ok".to_owned(), Want::Delivered)],
    );
    p.start().await?;
    // The load's payloads are stamped when made (all up front); it sends event
    // `seq` at `load_started + seq / RATE`.
    let load_started_us = now_us();
    let load = load::start(&mut p, &tenants, EVENTS, RATE)?;
    r.inject(format!(
        "load: {EVENTS} events at {RATE}/s over 4 tenants (ok, flaky, rejecting subscriptions); \
         --max-payload-bytes {MAX_PAYLOAD} on fanout and dispatcher"
    ));
    let mut events: Vec<(u64, String)> = (0..EVENTS)
        .map(|seq| (seq, tenants[seq as usize % tenants.len()].to_owned()))
        .collect();
    tokio::time::sleep(WARM_UP).await;

    // Downstream topics first, so good records written later sit behind the bad ones.
    let injecting = Instant::now();
    let injected_at_us = now_us();
    let mut inj = Injected::default();
    let quarantine = p.topics.quarantine().to_owned();
    let dlq = p.topics.dlq().to_owned();
    for &partition in &partitions {
        for b in bad_archive_input(encode(&quarantined()), encode(&dead_letter())) {
            inj.write(
                &p,
                "events.quarantine",
                &quarantine,
                Some(partition),
                b"bad",
                &b,
            )
            .await?;
        }
        for b in bad_archive_input(encode(&dead_letter()), encode(&dead_letter().delivery)) {
            inj.write(&p, "deliveries.dlq", &dlq, Some(partition), b"bad", &b)
                .await?;
        }
    }
    let subscriptions = p.topics.subscriptions().to_owned();
    for b in bad_subscriptions() {
        let key = format!("bad-{}", b.kind);
        inj.write(
            &p,
            "subscriptions",
            &subscriptions,
            None,
            key.as_bytes(),
            &b,
        )
        .await?;
    }
    // A good subscription behind the bad ones: it must take effect.
    let late = p.subscription("late-ok", "late", "/ok", 8);
    p.put_subscriptions(std::slice::from_ref(&late)).await?;
    let events_topic = p.topics.events().to_owned();
    for &partition in &partitions {
        for b in bad_events() {
            inj.write(&p, "events", &events_topic, Some(partition), b"bad", &b)
                .await?;
        }
    }
    // deliveries and the first tier: good, bad, good, bad, ... on every
    // partition, and one valid delivery over the payload cap.
    let tier = p
        .topics
        .retries()
        .next()
        .map(|(_, t)| t.to_owned())
        .context("no retry tier")?;
    let mut direct = DIRECT_SEQ;
    let mut big = BIG_SEQ;
    for (label, topic, attempt) in [
        ("deliveries", p.topics.deliveries().to_owned(), 0),
        ("deliveries.r1", tier.clone(), 1),
    ] {
        for &partition in &partitions {
            let template = delivery(&p, direct, "direct", "direct-ok", attempt);
            let mut bads = bad_deliveries(&template);
            let _ = p.event(big, "big", 1); // registers the expected delivery
            let mut oversize = delivery(&p, big, "big", "big-sub", attempt);
            oversize.payload = vec![b'x'; OVERSIZE];
            events.push((big, "big".to_owned()));
            big += 1;
            bads.push(bad("oversize", Some(encode(&oversize)), Fate::DeadLettered));
            for b in bads {
                let _ = p.event(direct, "direct", 1);
                let good = delivery(&p, direct, "direct", "direct-ok", attempt);
                events.push((direct, "direct".to_owned()));
                direct += 1;
                send(&p, &topic, Some(partition), b"direct", Some(&encode(&good))).await?;
                inj.write(&p, label, &topic, Some(partition), b"direct", &b)
                    .await?;
            }
            let _ = p.event(direct, "direct", 1);
            let good = delivery(&p, direct, "direct", "direct-ok", attempt);
            events.push((direct, "direct".to_owned()));
            direct += 1;
            send(&p, &topic, Some(partition), b"direct", Some(&encode(&good))).await?;
        }
    }
    let mut per_topic: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((label, kind), n) in &inj.by_kind {
        per_topic
            .entry(label.as_str())
            .or_default()
            .push(format!("{kind} {n}"));
    }
    for (label, kinds) in &per_topic {
        r.inject(format!("{label}: {}", kinds.join(", ")));
    }
    r.inject(format!(
        "{} bad records in {:.1} s, {} good deliveries written by hand between them; then \
         subscription late-ok and {LATE_EVENTS} events for it",
        inj.bad.len(),
        injecting.elapsed().as_secs_f64(),
        direct - DIRECT_SEQ
    ));

    // The late subscription takes effect in both followers, behind the bad records.
    let want_loaded = (subs.len() + 1) as f64;
    let deadline = Instant::now() + CATCH_UP;
    loop {
        let mut loaded = Vec::new();
        for stage in ["fanout", "dispatcher"] {
            let text = p.stage(stage)?.metrics().await?;
            loaded.push(metric(
                &text,
                "hookline_subscriptions_loaded",
                &[("stage", stage)],
            ));
        }
        if loaded.iter().all(|n| *n >= want_loaded) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the subscription written after the bad ones did not take effect within \
             {CATCH_UP:?}: loaded {loaded:?} of {want_loaded}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    r.count(format!(
        "subscription late-ok in effect in fanout and dispatcher {:.1} s after the first bad record",
        injecting.elapsed().as_secs_f64()
    ));
    let late_events: Vec<_> = (0..LATE_EVENTS)
        .map(|i| p.event(LATE_SEQ + i, "late", 256))
        .collect();
    p.produce(late_events).await?;
    events.extend((0..LATE_EVENTS).map(|i| (LATE_SEQ + i, "late".to_owned())));
    load.finish().await?;

    // Every expected delivery: delivered, or dead-lettered as dictated.
    let skip: HashSet<(i32, i64)> = inj
        .bad
        .iter()
        .filter(|((t, _, _), _, _)| *t == dlq)
        .map(|((_, partition, offset), _, _)| (*partition, *offset))
        .collect();
    let ledger = ledger::settle_skipping(&p, STALL, &skip).await?;
    r.count(ledger.summary());
    check_outcomes(&p, &ledger, &subs_of, events).await?;

    // Nothing behind the bad records stalled: first attempts of events produced
    // after the first bad record arrive promptly.
    let sent_at = |body: &[u8]| match seq_of(body)? {
        seq if seq < EVENTS => Some(load_started_us + (seq as f64 * 1e6 / RATE) as i64),
        _ => sent_us(body),
    };
    let mut waits: Vec<i64> = p
        .receiver
        .requests()
        .iter()
        .filter(|q| q.path == "/ok" && (200..300).contains(&q.status))
        .filter_map(|q| {
            let sent = sent_at(&q.body)?;
            (sent >= injected_at_us).then(|| (epoch_us(q.received_at) - sent).max(0))
        })
        .collect();
    waits.sort_unstable();
    let max = waits.last().copied().unwrap_or(0);
    r.count(format!(
        "{} deliveries produced after the first bad record: wait p50 {:.0} ms, max {:.0} ms (bound {PROMPT:?})",
        waits.len(),
        waits.get(waits.len() / 2).copied().unwrap_or(0) as f64 / 1000.0,
        max as f64 / 1000.0
    ));
    ensure!(
        !waits.is_empty(),
        "no delivery produced after the bad records arrived"
    );
    ensure!(
        max <= PROMPT.as_micros() as i64,
        "a delivery behind the bad records waited {:.1} s",
        max as f64 / 1e6
    );

    check_quarantine(&p, r, &inj).await?;
    check_archive(&p, r, &inj, &ledger).await?;
    check_followers(&p, r, &inj).await?;
    check_committed(&p, r, &tier).await?;
    all_running(&mut p)?;
    r.count("no stage exited".to_owned());
    p.stop().await?;
    Ok(())
}

/// Every bad record read by fanout or the dispatcher is on the quarantine
/// topic, once per reading, with its expected reason and source coordinates.
async fn check_quarantine(p: &Pipeline, r: &mut Report, inj: &Injected) -> anyhow::Result<()> {
    let injected_here: HashSet<(i32, i64)> = inj
        .bad
        .iter()
        .filter(|((t, _, _), _, _)| t == p.topics.quarantine())
        .map(|((_, partition, offset), _, _)| (*partition, *offset))
        .collect();
    let mut found: HashMap<Coords, Vec<String>> = HashMap::new();
    for m in kafka::read_to_end(p.topics.quarantine()).await? {
        if injected_here.contains(&(m.partition(), m.offset())) {
            continue;
        }
        let q: QuarantinedEvent = decode(m.payload().unwrap_or_default()).with_context(|| {
            format!(
                "a record the pipeline wrote to {} at {}/{} is not a QuarantinedEvent",
                p.topics.quarantine(),
                m.partition(),
                m.offset()
            )
        })?;
        found
            .entry((q.source_topic, q.source_partition, q.source_offset))
            .or_default()
            .push(q.reason);
    }
    let mut by_reason: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut wanted = 0;
    let mut duplicates = 0;
    for (coords, kind, fate) in &inj.bad {
        let Fate::Quarantined(reason) = fate else {
            continue;
        };
        wanted += 1;
        // At least once: a re-read after a rebalance may quarantine it again.
        match found.get(coords) {
            Some(got) if !got.is_empty() && got.iter().all(|g| g == reason) => {
                let label = coords.0.trim_start_matches(p.topics.prefix()).to_owned();
                *by_reason.entry((label, (*reason).to_owned())).or_default() += 1;
                duplicates += got.len() - 1;
            }
            other => wrong.push(format!(
                "{kind} at {coords:?}: wanted {reason}, got {other:?}"
            )),
        }
    }
    let lines: Vec<String> = by_reason
        .iter()
        .map(|((topic, reason), n)| format!("{topic} {reason} {n}"))
        .collect();
    r.count(format!(
        "quarantined {} of {wanted} bad records with the expected reason and coordinates \
         ({duplicates} duplicates): {}",
        wanted - wrong.len(),
        lines.join(", ")
    ));
    if !wrong.is_empty() {
        bail!(
            "{} bad records not quarantined as expected: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
    let extra = found.len() - wanted;
    ensure!(extra == 0, "{extra} quarantined records of unknown origin");
    for stage in ["fanout", "dispatcher"] {
        let text = p.stage(stage)?.metrics().await?;
        let name = if stage == "fanout" {
            "hookline_fanout_events_quarantined_total"
        } else {
            "hookline_dispatcher_records_quarantined_total"
        };
        let counts: Vec<String> = [
            "not_avro",
            "unknown_fingerprint",
            "wrong_record",
            "bad_datum",
            "payload_too_large",
        ]
        .iter()
        .map(|reason| format!("{reason} {}", metric(&text, name, &[("reason", reason)])))
        .collect();
        r.count(format!("{name}: {}", counts.join(", ")));
    }
    Ok(())
}

/// The archive holds every record of the quarantine topic with its reason,
/// every bad record of the DLQ and the quarantine topic raw as `undecodable`,
/// and every dead letter.
async fn check_archive(
    p: &Pipeline,
    r: &mut Report,
    inj: &Injected,
    ledger: &ledger::Ledger,
) -> anyhow::Result<()> {
    let (dl_rows, dl_ids) = ledger::wait_archived(p, ledger, CATCH_UP).await?;
    // What each coordinate of the two sink inputs must be archived as.
    let mut want: HashMap<Coords, String> = HashMap::new();
    for m in kafka::read_to_end(p.topics.quarantine()).await? {
        let reason = decode::<QuarantinedEvent>(m.payload().unwrap_or_default())
            .map_or_else(|_| "undecodable".to_owned(), |q| q.reason);
        want.insert((m.topic().to_owned(), m.partition(), m.offset()), reason);
    }
    for (coords, _, fate) in &inj.bad {
        if *fate == Fate::ArchivedRaw {
            want.insert(coords.clone(), "undecodable".to_owned());
        }
    }
    let deadline = Instant::now() + CATCH_UP;
    let (missing, mismatched, undecodable) = loop {
        let mut rows = Vec::new();
        if p.archive_dir().exists() {
            rows.extend(ledger::archived(p, true).await?);
            rows.extend(ledger::archived(p, false).await?);
        }
        let mut got: HashMap<Coords, (String, bool)> = HashMap::new();
        for row in &rows {
            let field = |k: &str| row.get(k).and_then(serde_json::Value::as_str);
            let (Some(topic), Some(partition), Some(offset), Some(reason)) = (
                field("topic"),
                row.get("partition").and_then(serde_json::Value::as_i64),
                row.get("offset").and_then(serde_json::Value::as_i64),
                field("reason"),
            ) else {
                continue;
            };
            let has_error = field("decode_error").is_some_and(|e| !e.is_empty());
            got.insert(
                (topic.to_owned(), partition as i32, offset),
                (reason.to_owned(), has_error),
            );
        }
        let missing: Vec<&Coords> = want.keys().filter(|c| !got.contains_key(*c)).collect();
        let mismatched: Vec<String> = want
            .iter()
            .filter_map(|(c, reason)| {
                let (got_reason, has_error) = got.get(c)?;
                let ok = got_reason == reason && (reason != "undecodable" || *has_error);
                (!ok).then(|| format!("{c:?}: wanted {reason}, archived {got_reason}"))
            })
            .collect();
        let undecodable = want.values().filter(|r| *r == "undecodable").count();
        if missing.is_empty() || Instant::now() >= deadline {
            break (missing.len(), mismatched, undecodable);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    r.count(format!(
        "archive: {dl_rows} rows from the DLQ ({dl_ids} dead-lettered delivery ids, the rest \
         bad records); of {} records to check on the sink's inputs ({undecodable} bad, to be \
         archived raw as undecodable with the decode error), {missing} missing, {} with the \
         wrong reason",
        want.len(),
        mismatched.len()
    ));
    ensure!(
        missing == 0,
        "{missing} records of the sink's inputs not archived after {CATCH_UP:?}"
    );
    ensure!(
        mismatched.is_empty(),
        "archived with the wrong reason: {:?}",
        &mismatched[..mismatched.len().min(5)]
    );
    Ok(())
}

/// Both subscription followers counted every bad subscription record by reason.
async fn check_followers(p: &Pipeline, r: &mut Report, inj: &Injected) -> anyhow::Result<()> {
    let mut want: BTreeMap<&str, f64> = BTreeMap::new();
    for (_, _, fate) in &inj.bad {
        if let Fate::Skipped(reason) = fate {
            *want.entry(reason).or_default() += 1.0;
        }
    }
    for stage in ["fanout", "dispatcher"] {
        let text = p.stage(stage)?.metrics().await?;
        let got: BTreeMap<&str, f64> = want
            .keys()
            .map(|reason| {
                (
                    *reason,
                    metric(
                        &text,
                        "hookline_subscriptions_invalid_total",
                        &[("stage", stage), ("reason", reason)],
                    ),
                )
            })
            .collect();
        let line: Vec<String> = got.iter().map(|(k, v)| format!("{k} {v}")).collect();
        r.count(format!(
            "{stage}'s subscription follower skipped: {} (written nowhere, by design)",
            line.join(", ")
        ));
        ensure!(
            got == want,
            "{stage} counted bad subscription records {got:?}, wanted {want:?}"
        );
    }
    Ok(())
}

/// Every group commits past the last record of every topic it reads: nothing
/// is stuck behind a bad record. (The end is the last record's offset + 1, not
/// the high watermark: fanout writes transactionally, and a commit marker at
/// the end of a partition is never delivered to a consumer, so never committed.)
async fn check_committed(p: &Pipeline, r: &mut Report, tier: &str) -> anyhow::Result<()> {
    let prefix = p.topics.prefix();
    let dispatcher = format!("{prefix}dispatcher");
    let sink = format!("{prefix}dlq-sink");
    let mut reads: Vec<(String, String)> = vec![
        (p.groups.fanout.clone(), p.topics.events().to_owned()),
        (dispatcher.clone(), p.topics.deliveries().to_owned()),
        (dispatcher.clone(), tier.to_owned()),
        (sink.clone(), p.topics.dlq().to_owned()),
        (sink.clone(), p.topics.quarantine().to_owned()),
    ];
    reads.extend(
        p.topics
            .retries()
            .skip(1)
            .map(|(_, t)| (dispatcher.clone(), t.to_owned())),
    );
    let mut ends = Vec::new();
    for (_, topic) in &reads {
        let mut end: HashMap<i32, i64> = HashMap::new();
        for m in kafka::read_to_end(topic).await? {
            end.insert(m.partition(), m.offset() + 1);
        }
        ends.push(end);
    }
    let deadline = Instant::now() + CATCH_UP;
    let mut behind: Vec<String>;
    loop {
        behind = Vec::new();
        for ((group, topic), end) in reads.iter().zip(&ends) {
            let committed = committed_offsets(group, topic).await?;
            for (partition, last) in end {
                let at = committed.get(partition).copied().unwrap_or(-1);
                if at < *last {
                    behind.push(format!("{topic}/{partition}: committed {at}, end {last}"));
                }
            }
        }
        if behind.is_empty() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    r.count(format!(
        "committed past the last record: {} (group, topic) pairs, {} partitions behind",
        reads.len(),
        behind.len()
    ));
    ensure!(
        behind.is_empty(),
        "groups did not commit past the bad records: {behind:?}"
    );
    Ok(())
}

/// The offsets `group` has committed on each partition of `topic`.
async fn committed_offsets(group: &str, topic: &str) -> anyhow::Result<HashMap<i32, i64>> {
    use rdkafka::{
        consumer::{BaseConsumer, Consumer},
        Offset, TopicPartitionList,
    };
    let (group, topic) = (group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = kafka::client_config()
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()?;
        let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
        let mut tpl = TopicPartitionList::new();
        for t in metadata.topics() {
            for part in t.partitions() {
                tpl.add_partition(&topic, part.id());
            }
        }
        let committed = consumer.committed_offsets(tpl, Duration::from_secs(10))?;
        Ok(committed
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect())
    })
    .await?
}
