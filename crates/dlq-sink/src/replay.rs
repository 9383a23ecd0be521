//! `hookline-dlq-sink replay`: sends matching dead letters back to `deliveries` (or a retry
//! tier), or quarantined events back to `events`.
//!
//! Guarantees: a preview (the default) writes nothing. With `--execute`, each dead letter's
//! delivery is written with `attempt` 0, `due_at` now, attempt history cleared (so `max_age`
//! starts again), the ORIGINAL `delivery_id` (the receiver's idempotency key) and
//! `replay_of` = the dead letter's coordinates; a quarantined event is written byte for byte
//! with its original key and headers. The producer is idempotent with `acks=all` and every
//! send is awaited before the summary, so "replayed" means acknowledged by Kafka. Reading is
//! by assignment: the sink's consumer group is never touched.

use std::{collections::BTreeMap, io::IsTerminal, io::Write, time::Duration};

use clap::Args;
use futures::{stream::FuturesUnordered, StreamExt};
use hookline_envelope::{
    decode, encode, DeadLetter, Delivery, QuarantinedEvent, QuarantinedHeader, ReplayOf, Topics,
};
use hookline_runtime::{config::CommonArgs, kafka, RuntimeError};
use indicatif::{ProgressBar, ProgressStyle};
use rdkafka::{
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};

use crate::{
    cli::{open_source, CliError, SourceArgs, EXIT_NOTHING_MATCHED, EXIT_OK, EXIT_PARTIAL},
    filter::FilterArgs,
    inspect::{print_counts, CountBy, Output},
    row::{error_chain, ArchiveRow, Kind},
    service::now_ms,
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
    #[arg(long)]
    pub execute: bool,

    /// Write deliveries to this retry tier (`deliveries.<tier>`) instead of `deliveries`.
    #[arg(long, value_name = "TIER", conflicts_with = "quarantine")]
    pub to_tier: Option<String>,

    /// Most records written per second.
    #[arg(long, value_name = "PER_SECOND")]
    pub rate: Option<f64>,

    /// Replay at most this many matching records.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max: Option<u64>,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records read.
    pub scanned: u64,
    /// Records that passed the filters (at most `--max`).
    pub matched: u64,
    /// Records written and acknowledged.
    pub replayed: u64,
    /// Matching records that could not be replayed (undecodable, or the send failed).
    pub failed: u64,
}

impl Summary {
    /// The exit code: 2 if anything failed, 3 if nothing matched, else 0.
    pub fn exit_code(&self) -> i32 {
        if self.failed > 0 {
            EXIT_PARTIAL
        } else if self.matched == 0 {
            EXIT_NOTHING_MATCHED
        } else {
            EXIT_OK
        }
    }
}

/// One record to write back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replayed {
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub headers: Vec<QuarantinedHeader>,
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
        ..dl.delivery.clone()
    }
}

/// What to write back for a row, or why it cannot be replayed.
pub(crate) fn replay_record(row: &ArchiveRow, now_ms: i64) -> Result<Replayed, String> {
    let value = row
        .value
        .as_deref()
        .ok_or_else(|| "the record has no value".to_owned())?;
    if row.kind == Kind::Quarantine.as_str() {
        let q: QuarantinedEvent = decode(value).map_err(|e| error_chain(&e))?;
        return Ok(Replayed {
            key: q.key,
            value: q.value,
            headers: q.headers,
        });
    }
    let dl: DeadLetter = decode(value).map_err(|e| error_chain(&e))?;
    let of = ReplayOf {
        topic: row.topic.clone(),
        partition: row.partition,
        offset: row.offset,
    };
    let delivery = replay_delivery(&dl, of, now_ms);
    Ok(Replayed {
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
    let filter = args.filter.build(now_ms())?;
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(CliError::Usage(format!(
                "invalid --rate `{rate}`: must be a positive number of records per second"
            )));
        }
    }
    let topics = Topics::with_prefix(&common.topic_prefix)?;
    let destination = match (&args.to_tier, args.source.quarantine) {
        (_, true) => topics.events().to_owned(),
        (Some(tier), false) => Topics::new(&common.topic_prefix, &[tier.as_str()])?
            .retry(tier)
            .map(str::to_owned)
            .ok_or_else(|| CliError::Usage(format!("invalid --to-tier `{tier}`")))?,
        (None, false) => topics.deliveries().to_owned(),
    };
    let producer = if args.execute {
        let missing = kafka::missing_topics(common, &[destination.as_str()]).await?;
        if !missing.is_empty() {
            return Err(CliError::Usage(format!(
                "the destination topic {destination} does not exist (check --to-tier and \
                 --topic-prefix); nothing written"
            )));
        }
        Some(producer(common)?)
    } else {
        None
    };
    let mut source = open_source(common, archive, &args.source, &filter).await?;
    let bar = progress_bar(source.total(), args.source.from_archive);

    let mut summary = Summary::default();
    let mut by_reason_tenant: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    let mut in_flight = FuturesUnordered::new();
    let interval = args.rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut next_send = tokio::time::Instant::now();
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
        let record = match replay_record(&row, now_ms()) {
            Ok(r) => r,
            Err(why) => {
                summary.failed += 1;
                tracing::warn!(topic = %row.topic, partition = row.partition, offset = row.offset, %why, "cannot replay");
                continue;
            }
        };
        let Some(producer) = &producer else {
            continue;
        };
        if let Some(step) = interval {
            tokio::time::sleep_until(next_send).await;
            next_send = next_send.max(tokio::time::Instant::now()) + step;
        }
        while in_flight.len() >= MAX_IN_FLIGHT {
            settle(in_flight.next().await, &mut summary);
        }
        in_flight.push(send(producer.clone(), destination.clone(), record, row));
        while let Some(done) = futures::FutureExt::now_or_never(in_flight.next()) {
            match done {
                Some(r) => settle(Some(r), &mut summary),
                None => break,
            }
        }
        bar.set_message(format!(
            "matched {} replayed {} failed {}",
            summary.matched, summary.replayed, summary.failed
        ));
    }
    while let Some(r) = in_flight.next().await {
        settle(Some(r), &mut summary);
    }
    bar.finish_and_clear();

    if args.execute {
        writeln!(out, "replayed to {destination}")?;
    } else {
        writeln!(
            out,
            "preview: {} record(s) would be replayed to {destination}; nothing written \
             (add --execute to replay)",
            summary.matched
        )?;
        if !by_reason_tenant.is_empty() {
            print_counts(
                out,
                &[CountBy::Reason, CountBy::Tenant],
                &by_reason_tenant,
                Output::Table,
            )?;
        }
    }
    writeln!(
        out,
        "scanned {}, matched {}, replayed {}, failed {}",
        summary.scanned, summary.matched, summary.replayed, summary.failed
    )?;
    Ok(summary)
}

type SendResult = Result<(), String>;

async fn send(
    producer: FutureProducer,
    topic: String,
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
    let mut fr = FutureRecord::<[u8], [u8]>::to(&topic).payload(&record.value);
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
    (result, row)
}

fn settle(done: Option<(SendResult, ArchiveRow)>, summary: &mut Summary) {
    match done {
        Some((Ok(()), _)) => summary.replayed += 1,
        Some((Err(why), row)) => {
            summary.failed += 1;
            tracing::warn!(topic = %row.topic, partition = row.partition, offset = row.offset, %why, "replay send failed");
        }
        None => {}
    }
}

fn producer(common: &CommonArgs) -> Result<FutureProducer, CliError> {
    Ok(kafka::client_config(common, "hookline-dlq-sink-replay")?
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
