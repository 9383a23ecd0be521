//! `hookline-dlq-sink replay`: sends matching dead letters back to `deliveries` (or a retry
//! tier), or quarantined records back to the topic each was read from.
//!
//! Guarantees: a preview (the default) writes nothing. With `--execute`, each dead letter's
//! delivery is written with `attempt` 0, `due_at` now, attempt history cleared (so `max_age`
//! starts again), the ORIGINAL `delivery_id` (the receiver's idempotency key) and
//! `replay_of` = the dead letter's coordinates; a quarantined record is written byte for byte
//! with its original key and headers to its `source_topic` — `events` for what fanout
//! quarantined, `deliveries` or a retry tier for what the dispatcher quarantined — and only
//! if that is a pipeline input of this `--topic-prefix` (`Topics::is_pipeline_input`);
//! any other source topic is refused, counted, and makes the exit code 2. The producer is
//! idempotent with `acks=all` and every send is awaited before the summary, so "replayed"
//! means acknowledged by Kafka. Each coordinate is replayed at most once per run, from the
//! topic or the archive: a copy of a dead letter the sink archived twice across a crash is
//! skipped and counted as `duplicates skipped` in the summary. Reading is by assignment: the
//! sink's consumer group is never touched.

use std::{
    collections::{BTreeMap, HashMap},
    io::IsTerminal,
    io::Write,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use clap::Args;
use futures::{stream::FuturesUnordered, StreamExt};
use hookline_core::{epoch, RateLimit, TokenBucket};
use hookline_envelope::{
    decode, encode, error_chain, DeadLetter, Delivery, QuarantinedEvent, QuarantinedHeader,
    ReplayOf, Topics,
};
use hookline_runtime::{config::CommonArgs, kafka, topic_check, RuntimeError};
use indicatif::{ProgressBar, ProgressStyle};
use rdkafka::{
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};

use crate::{
    cli::{open_source, CliError, SourceArgs, EXIT_NOTHING_MATCHED, EXIT_OK, EXIT_PARTIAL},
    events::{self, Coordinates},
    filter::FilterArgs,
    inspect::{print_counts, CountBy, Output},
    row::{ArchiveRow, Kind},
    store::ArchiveArgs,
};

const SEND_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_IN_FLIGHT: usize = 256;

/// Arguments of `replay`.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// What to read.
    #[command(flatten)]
    pub source: SourceArgs,

    /// Which records.
    #[command(flatten)]
    pub filter: FilterArgs,

    /// Write for real; without it, only preview what would be replayed.
    #[arg(long, env = "HOOKLINE_REPLAY_EXECUTE")]
    pub execute: bool,

    /// Write deliveries to this retry tier (`deliveries.<tier>`) instead of `deliveries`.
    #[arg(
        long,
        value_name = "TIER",
        env = "HOOKLINE_REPLAY_TO_TIER",
        conflicts_with = "quarantine"
    )]
    pub to_tier: Option<String>,

    /// Write deliveries to `deliveries.strict`, for a strictly ordered
    /// subscription (`ordering = strict`): they are then delivered one at a time
    /// in the order replayed (the dead letters' order), each in backoff holding
    /// the later ones.
    #[arg(
        long,
        env = "HOOKLINE_REPLAY_TO_STRICT",
        conflicts_with_all = ["quarantine", "to_tier"]
    )]
    pub to_strict: bool,

    /// Most records written per second.
    #[arg(long, value_name = "PER_SECOND", env = "HOOKLINE_REPLAY_RATE")]
    pub rate: Option<f64>,

    /// Replay at most this many matching records.
    #[arg(long, env = "HOOKLINE_REPLAY_MAX", value_parser = clap::value_parser!(u64).range(1..))]
    pub max: Option<u64>,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Distinct records read (by coordinate).
    pub scanned: u64,
    /// Records not read again because their coordinate was already read: copies the sink
    /// archived twice across a crash (or a record a topic fetch repeated). Each coordinate
    /// is replayed at most once.
    pub duplicates_skipped: u64,
    /// Records that passed the filters (at most `--max`).
    pub matched: u64,
    /// Records written and acknowledged.
    pub replayed: u64,
    /// Matching records that could not be replayed (undecodable, the destination topic
    /// does not exist, or the send failed).
    pub failed: u64,
    /// Matching quarantined records not replayed because their source topic is not a
    /// pipeline input of this prefix (`events`, `deliveries`, `deliveries.<tier>`).
    pub refused: u64,
}

impl Summary {
    /// The exit code: 2 if anything failed or was refused, 3 if nothing matched, else 0.
    pub fn exit_code(&self) -> i32 {
        if self.failed > 0 || self.refused > 0 {
            EXIT_PARTIAL
        } else if self.matched == 0 {
            EXIT_NOTHING_MATCHED
        } else {
            EXIT_OK
        }
    }
}

/// One record to write back, and where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replayed {
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub headers: Vec<QuarantinedHeader>,
}

/// Where replayed records go.
#[derive(Debug, Clone)]
pub(crate) enum Destination {
    /// Every dead letter's delivery to this topic (`deliveries` or `--to-tier`).
    Fixed(String),
    /// Every quarantined record to its own `source_topic`, if a pipeline input of these topics.
    SourceTopic(Box<Topics>),
}

/// Why a matching row is not replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotReplayed {
    /// It cannot be: no value, or not the record its topic carries.
    Failed(String),
    /// Its source topic is not one replay may write to.
    Refused(String),
}

/// The delivery a dead letter is replayed as.
pub(crate) fn replay_delivery(dl: &DeadLetter, of: ReplayOf, now_ms: i64) -> Delivery {
    Delivery {
        attempt: 0,
        due_at: now_ms,
        first_attempt_at: None,
        last_attempt_at: None,
        last_outcome: None,
        policy_version: None,
        replay_of: Some(of),
        // The trace context is the event's: a replay belongs to the same trace.
        ..dl.delivery.clone()
    }
}

/// What to write back for a row, and where, or why it is not replayed.
pub(crate) fn replay_record(
    row: &ArchiveRow,
    destination: &Destination,
    now_ms: i64,
) -> Result<Replayed, NotReplayed> {
    let failed = |e: &dyn std::error::Error| NotReplayed::Failed(error_chain(e));
    let value = row
        .value
        .as_deref()
        .ok_or_else(|| NotReplayed::Failed("the record has no value".to_owned()))?;
    if row.kind == Kind::Quarantine.as_str() {
        let q: QuarantinedEvent = decode(value).map_err(|e| failed(&e))?;
        let topic = match destination {
            Destination::SourceTopic(topics) if topics.is_pipeline_input(&q.source_topic) => {
                q.source_topic
            }
            Destination::SourceTopic(topics) => {
                return Err(NotReplayed::Refused(format!(
                    "source topic `{}` is not a pipeline topic of --topic-prefix `{}` \
                     (events, deliveries, deliveries.<tier>); not replayed",
                    q.source_topic,
                    topics.prefix()
                )))
            }
            Destination::Fixed(topic) => topic.clone(),
        };
        return Ok(Replayed {
            topic,
            key: q.key,
            value: q.value,
            headers: q.headers,
        });
    }
    let dl: DeadLetter = decode(value).map_err(|e| failed(&e))?;
    let of = ReplayOf {
        topic: row.topic.clone(),
        partition: row.partition,
        offset: row.offset,
    };
    let delivery = replay_delivery(&dl, of, now_ms);
    let topic = match destination {
        Destination::Fixed(topic) => topic.clone(),
        Destination::SourceTopic(topics) => topics.deliveries().to_owned(),
    };
    Ok(Replayed {
        topic,
        key: Some(delivery.tenant_id.clone().into_bytes()),
        value: encode(&delivery),
        headers: Vec::new(),
    })
}

/// Runs `replay`, printing the preview or summary to `out`.
pub async fn run(
    common: &CommonArgs,
    archive: &ArchiveArgs,
    args: &ReplayArgs,
    out: &mut dyn Write,
) -> Result<Summary, CliError> {
    let filter = args.filter.build(epoch::millis(SystemTime::now()))?;
    let mut pacer = match args.rate.map(RateLimit::try_per_second).transpose() {
        Ok(limit) => limit.map(Pacer::new),
        Err(e) => {
            return Err(CliError::Usage(format!(
                "invalid --rate `{}`: must be a positive number of records per second",
                e.rate
            )))
        }
    };
    let topics = Topics::with_prefix(&common.topic_prefix)?;
    let destination = match (&args.to_tier, args.source.quarantine) {
        (_, true) => Destination::SourceTopic(Box::new(topics)),
        (Some(tier), false) => Destination::Fixed(
            Topics::new(&common.topic_prefix, &[tier.as_str()])?
                .retry(tier)
                .map(str::to_owned)
                .ok_or_else(|| CliError::Usage(format!("invalid --to-tier `{tier}`")))?,
        ),
        (None, false) if args.to_strict => Destination::Fixed(topics.strict().to_owned()),
        (None, false) => Destination::Fixed(topics.deliveries().to_owned()),
    };
    let producer = if args.execute {
        if let Destination::Fixed(topic) = &destination {
            let missing = topic_check::missing_topics(common, &[topic.as_str()]).await?;
            if !missing.is_empty() {
                return Err(CliError::Usage(format!(
                    "the destination topic {topic} does not exist (check --to-tier and \
                     --topic-prefix); nothing written"
                )));
            }
        }
        Some(producer(common)?)
    } else {
        None
    };
    // Whether each per-record destination exists, looked up once per topic.
    let mut exists: HashMap<String, bool> = HashMap::new();
    let mut source = open_source(common, archive, &args.source, &filter).await?;
    let bar = progress_bar(source.total(), args.source.from_archive);

    let mut summary = Summary::default();
    let mut by_reason_tenant: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    let mut by_destination: BTreeMap<String, u64> = BTreeMap::new();
    let mut in_flight = FuturesUnordered::new();
    while let Some(row) = source.next().await? {
        summary.scanned += 1;
        if !args.source.from_archive {
            bar.inc(1);
        }
        if !filter.matches(&row) {
            continue;
        }
        if args.max.is_some_and(|m| summary.matched >= m) {
            break;
        }
        summary.matched += 1;
        *by_reason_tenant
            .entry(vec![
                row.reason.clone(),
                row.tenant_id.clone().unwrap_or_else(|| "-".into()),
            ])
            .or_default() += 1;
        let record = match replay_record(&row, &destination, epoch::millis(SystemTime::now())) {
            Ok(r) => r,
            Err(NotReplayed::Failed(why)) => {
                summary.failed += 1;
                skipped(&row, events::NotReplayed::Failed(&why));
                continue;
            }
            Err(NotReplayed::Refused(why)) => {
                summary.refused += 1;
                skipped(&row, events::NotReplayed::Refused(&why));
                continue;
            }
        };
        let Some(producer) = &producer else {
            *by_destination.entry(record.topic.clone()).or_default() += 1;
            continue;
        };
        if !exists.contains_key(&record.topic) {
            let missing = topic_check::missing_topics(common, &[record.topic.as_str()]).await?;
            exists.insert(record.topic.clone(), missing.is_empty());
        }
        if exists.get(&record.topic) == Some(&false) {
            summary.failed += 1;
            skipped(&row, events::NotReplayed::NoDestination(&record.topic));
            continue;
        }
        if let Some(pacer) = &mut pacer {
            pacer.wait_turn().await;
        }
        while in_flight.len() >= MAX_IN_FLIGHT {
            settle(in_flight.next().await, &mut summary, &mut by_destination);
        }
        in_flight.push(send(producer.clone(), record, row));
        while let Some(done) = futures::FutureExt::now_or_never(in_flight.next()) {
            match done {
                Some(r) => settle(Some(r), &mut summary, &mut by_destination),
                None => break,
            }
        }
        bar.set_message(format!(
            "matched {} replayed {} failed {}",
            summary.matched, summary.replayed, summary.failed
        ));
    }
    while let Some(r) = in_flight.next().await {
        settle(Some(r), &mut summary, &mut by_destination);
    }
    bar.finish_and_clear();
    summary.duplicates_skipped = source.duplicates_skipped();

    let to = match &destination {
        Destination::Fixed(topic) => topic.clone(),
        Destination::SourceTopic(_) => "their source topics".to_owned(),
    };
    if args.execute {
        writeln!(out, "replayed to {to}")?;
    } else {
        writeln!(
            out,
            "preview: {} record(s) would be replayed to {to}; nothing written \
             (add --execute to replay)",
            by_destination.values().sum::<u64>()
        )?;
    }
    if matches!(destination, Destination::SourceTopic(_)) {
        for (topic, n) in &by_destination {
            writeln!(out, "  {topic}: {n}")?;
        }
    }
    if !args.execute && !by_reason_tenant.is_empty() {
        print_counts(
            out,
            &[CountBy::Reason, CountBy::Tenant],
            &by_reason_tenant,
            Output::Table,
        )?;
    }
    writeln!(
        out,
        "scanned {}, matched {}, replayed {}, failed {}, refused {}, duplicates skipped {}",
        summary.scanned,
        summary.matched,
        summary.replayed,
        summary.failed,
        summary.refused,
        summary.duplicates_skipped
    )?;
    Ok(summary)
}

/// The record's destination topic and whether it was acknowledged.
type SendResult = (String, Result<(), String>);

/// Spaces sends by `--rate`: core's token bucket without a burst, on a monotonic clock
/// (the time since the replay started stands in for the bucket's `SystemTime`), so a
/// wall-clock step can neither bunch sends nor stall them.
pub(crate) struct Pacer {
    bucket: TokenBucket,
    start: tokio::time::Instant,
}

impl Pacer {
    pub(crate) fn new(limit: RateLimit) -> Self {
        Self {
            bucket: TokenBucket::new(limit.paced()),
            start: tokio::time::Instant::now(),
        }
    }

    /// Takes the turn if one is free `elapsed` after the start; else how long to wait.
    pub(crate) fn turn(&mut self, elapsed: Duration) -> Result<(), Duration> {
        let now = UNIX_EPOCH + elapsed;
        if self.bucket.try_take(now) {
            return Ok(());
        }
        Err(self
            .bucket
            .next_start()
            .duration_since(now)
            .unwrap_or_default())
    }

    async fn wait_turn(&mut self) {
        while let Err(wait) = self.turn(self.start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
}

async fn send(
    producer: FutureProducer,
    record: Replayed,
    row: ArchiveRow,
) -> (SendResult, ArchiveRow) {
    let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
    for h in &record.headers {
        headers = headers.insert(Header {
            key: &h.name,
            value: h.value.as_deref(),
        });
    }
    let mut fr = FutureRecord::<[u8], [u8]>::to(&record.topic).payload(&record.value);
    if let Some(k) = &record.key {
        fr = fr.key(k);
    }
    if !record.headers.is_empty() {
        fr = fr.headers(headers);
    }
    let result = producer
        .send(fr, SEND_TIMEOUT)
        .await
        .map(drop)
        .map_err(|(e, _)| e.to_string());
    ((record.topic, result), row)
}

/// Where a row was read, for its events.
fn coordinates(row: &ArchiveRow) -> Coordinates<'_> {
    Coordinates {
        topic: &row.topic,
        partition: row.partition,
        offset: row.offset,
    }
}

/// A row not replayed, and why.
fn skipped(row: &ArchiveRow, why: events::NotReplayed<'_>) {
    events::ReplaySkipped {
        at: coordinates(row),
        why,
    }
    .emit();
}

/// Counts a finished send: replayed (by destination) or failed.
fn settle(
    done: Option<(SendResult, ArchiveRow)>,
    summary: &mut Summary,
    by_destination: &mut BTreeMap<String, u64>,
) {
    match done {
        Some(((topic, Ok(())), _)) => {
            summary.replayed += 1;
            *by_destination.entry(topic).or_default() += 1;
        }
        Some(((destination, Err(why)), row)) => {
            summary.failed += 1;
            events::ReplaySendFailed {
                at: coordinates(&row),
                destination: &destination,
                why: &why,
            }
            .emit();
        }
        None => {}
    }
}

fn producer(common: &CommonArgs) -> Result<FutureProducer, CliError> {
    Ok(kafka::producer_config(common, "hookline-dlq-sink-replay")?
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .map_err(|e| RuntimeError::kafka("creating the replay producer", e))?)
}

/// A progress bar on stderr when it is a terminal; hidden otherwise.
fn progress_bar(total: u64, archive: bool) -> ProgressBar {
    if !std::io::stderr().is_terminal() || archive {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} scanned  {msg}")
            .expect("a valid progress template"),
    );
    bar
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
