//! `hookline-dlq-sink inspect`: lists or counts what is in the DLQ (or the quarantine), from
//! the topic or the archive. Results go to stdout; the summary (a line, or a JSON object with
//! `--output json`), progress and logs to stderr. Read-only. Each coordinate is listed and
//! counted once: `scanned` counts distinct records, `duplicates skipped` the copies of one
//! already read (the archive can hold a record twice after a sink crash).

use std::{collections::BTreeMap, io::Write, time::SystemTime};

use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use hookline_core::epoch;
use hookline_envelope::{decode, QuarantinedEvent};
use serde_json::{json, Value};

use crate::{
    cli::{open_source, CliError, SourceArgs},
    filter::FilterArgs,
    row::ArchiveRow,
};

/// Arguments of `inspect`.
#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// What to read.
    #[command(flatten)]
    pub source: SourceArgs,

    /// Which records.
    #[command(flatten)]
    pub filter: FilterArgs,

    /// Output format: aligned columns, or one JSON object per line.
    #[arg(long, env = "HOOKLINE_INSPECT_OUTPUT", value_enum, default_value_t = Output::Table)]
    pub output: Output,

    /// Count matching records grouped by these fields instead of listing them
    /// (repeatable: `--count-by tenant --count-by reason`).
    #[arg(
        long = "count-by",
        env = "HOOKLINE_INSPECT_COUNT_BY",
        value_delimiter = ',',
        value_enum,
        value_name = "FIELD"
    )]
    pub count_by: Vec<CountBy>,

    /// List at most this many records (counting still reads everything).
    #[arg(long, env = "HOOKLINE_INSPECT_MAX", value_parser = clap::value_parser!(u64).range(1..))]
    pub max: Option<u64>,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// One JSON object per line.
    Json,
}

/// A field to count by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CountBy {
    /// The dead-letter or quarantine reason.
    Reason,
    /// The tenant.
    Tenant,
    /// The subscription.
    Subscription,
    /// The event type.
    EventType,
    /// The UTC date it was dead-lettered.
    Date,
    /// `DeadLetter`, `QuarantinedEvent` or `undecodable`.
    RecordType,
}

impl CountBy {
    fn name(self) -> &'static str {
        match self {
            Self::Reason => "reason",
            Self::Tenant => "tenant",
            Self::Subscription => "subscription",
            Self::EventType => "event_type",
            Self::Date => "date",
            Self::RecordType => "record_type",
        }
    }

    fn value(self, row: &ArchiveRow) -> String {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        match self {
            Self::Reason => row.reason.clone(),
            Self::Tenant => opt(&row.tenant_id),
            Self::Subscription => opt(&row.subscription_id),
            Self::EventType => opt(&row.event_type),
            Self::Date => row.date_dir(),
            Self::RecordType => row.record_type.clone(),
        }
    }
}

/// Runs `inspect`; returns how many records matched.
pub async fn run(
    common: &hookline_runtime::config::CommonArgs,
    archive: &crate::store::ArchiveArgs,
    args: &InspectArgs,
    out: &mut dyn Write,
) -> Result<u64, CliError> {
    let filter = args.filter.build(epoch::millis(SystemTime::now()))?;
    let mut source = open_source(common, archive, &args.source, &filter).await?;
    let mut scanned = 0u64;
    let mut matched = 0u64;
    let mut listed: Vec<ArchiveRow> = Vec::new();
    let mut counts: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    while let Some(row) = source.next().await? {
        scanned += 1;
        if !filter.matches(&row) {
            continue;
        }
        matched += 1;
        if !args.count_by.is_empty() {
            let key = args.count_by.iter().map(|c| c.value(&row)).collect();
            *counts.entry(key).or_default() += 1;
        } else if args.max.is_none_or(|m| (listed.len() as u64) < m) {
            if args.output == Output::Json {
                writeln!(out, "{}", row_json(&row))?;
            } else {
                listed.push(row);
            }
        }
    }
    if !args.count_by.is_empty() {
        print_counts(out, &args.count_by, &counts, args.output)?;
    } else if args.output == Output::Table && args.source.quarantine {
        print_quarantine_rows(out, &listed)?;
    } else if args.output == Output::Table {
        print_rows(out, &listed)?;
    }
    let duplicates_skipped = source.duplicates_skipped();
    tracing::info!(scanned, matched, duplicates_skipped, "inspect done");
    // The summary goes to stderr so that stdout stays rows (or counts) only.
    if args.output == Output::Json {
        let summary = json!({
            "scanned": scanned,
            "matched": matched,
            "duplicates_skipped": duplicates_skipped,
        });
        eprintln!("{summary}");
    } else {
        eprintln!("scanned {scanned}, matched {matched}, duplicates skipped {duplicates_skipped}");
    }
    Ok(matched)
}

/// RFC 3339 (UTC, ms) of a time in ms since the epoch.
pub(crate) fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// Where a quarantined row's original was read from, and its size: decoded
/// from the row's value (the `QuarantinedEvent`), `None` when it is not one.
fn quarantined_source(row: &ArchiveRow) -> Option<(String, i32, i64, usize)> {
    let q = decode::<QuarantinedEvent>(row.value.as_deref()?).ok()?;
    Some((
        q.source_topic,
        q.source_partition,
        q.source_offset,
        q.value.len(),
    ))
}

/// One row as a JSON object: coordinates and decoded fields; payload bytes are not printed.
/// A quarantined row also has its original's `source_topic`, `source_partition`,
/// `source_offset` and `source_value_bytes`.
pub(crate) fn row_json(row: &ArchiveRow) -> Value {
    let mut value = row_json_common(row);
    if let (Some((topic, partition, offset, size)), Value::Object(obj)) =
        (quarantined_source(row), &mut value)
    {
        obj.insert("source_topic".into(), json!(topic));
        obj.insert("source_partition".into(), json!(partition));
        obj.insert("source_offset".into(), json!(offset));
        obj.insert("source_value_bytes".into(), json!(size));
    }
    value
}

fn row_json_common(row: &ArchiveRow) -> Value {
    json!({
        "topic": row.topic,
        "partition": row.partition,
        "offset": row.offset,
        "kind": row.kind,
        "record_type": row.record_type,
        "tenant_id": row.tenant_id,
        "subscription_id": row.subscription_id,
        "event_type": row.event_type,
        "event_id": row.event_id,
        "delivery_id": row.delivery_id,
        "reason": row.reason,
        "attempt": row.attempt,
        "last_status": row.last_status,
        "dead_at": row.dead_at.map(rfc3339),
        "kafka_timestamp": row.kafka_timestamp.map(rfc3339),
        "detail": row.detail,
        "decode_error": row.decode_error,
        "value_bytes": row.value.as_ref().map_or(0, Vec::len),
    })
}

fn print_rows(out: &mut dyn Write, rows: &[ArchiveRow]) -> std::io::Result<()> {
    let header = [
        "TOPIC:PARTITION:OFFSET",
        "DEAD_AT",
        "TENANT",
        "SUBSCRIPTION",
        "EVENT_TYPE",
        "REASON",
        "ATTEMPT",
        "STATUS",
        "DELIVERY_ID",
    ]
    .map(str::to_owned);
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let body = rows.iter().map(|r| {
        [
            format!("{}:{}:{}", r.topic, r.partition, r.offset),
            r.dead_at.map(rfc3339).unwrap_or_else(|| "-".into()),
            dash(r.tenant_id.clone()),
            dash(r.subscription_id.clone()),
            dash(r.event_type.clone()),
            r.reason.clone(),
            dash(r.attempt.map(|a| a.to_string())),
            dash(r.last_status.map(|s| s.to_string())),
            dash(r.delivery_id.clone()),
        ]
    });
    print_table(out, header, body)
}

/// Longest detail shown in a table cell (`--output json` has all of it).
const DETAIL_CELL_CHARS: usize = 100;

/// The quarantine's own columns: where the original was read from (source
/// topic, partition, offset), why, the detail, and the original's size.
fn print_quarantine_rows(out: &mut dyn Write, rows: &[ArchiveRow]) -> std::io::Result<()> {
    let header = [
        "SOURCE_TOPIC",
        "PARTITION",
        "OFFSET",
        "QUARANTINED_AT",
        "REASON",
        "SIZE",
        "DETAIL",
    ]
    .map(str::to_owned);
    let body = rows.iter().map(|r| {
        let (topic, partition, offset, size) = match quarantined_source(r) {
            Some((t, p, o, n)) => (t, p.to_string(), o.to_string(), n.to_string()),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let detail = r
            .detail
            .as_deref()
            .or(r.decode_error.as_deref())
            .unwrap_or("-")
            .replace(['\n', '\r', '\t'], " ");
        let detail = if detail.chars().count() > DETAIL_CELL_CHARS {
            let cut: String = detail.chars().take(DETAIL_CELL_CHARS - 1).collect();
            format!("{cut}…")
        } else {
            detail
        };
        [
            topic,
            partition,
            offset,
            r.dead_at.map(rfc3339).unwrap_or_else(|| "-".into()),
            r.reason.clone(),
            size,
            detail,
        ]
    });
    print_table(out, header, body)
}

pub(crate) fn print_counts(
    out: &mut dyn Write,
    by: &[CountBy],
    counts: &BTreeMap<Vec<String>, u64>,
    output: Output,
) -> std::io::Result<()> {
    let mut sorted: Vec<_> = counts.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    if output == Output::Json {
        for (key, n) in sorted {
            let mut obj = serde_json::Map::new();
            for (field, value) in by.iter().zip(key) {
                obj.insert(field.name().into(), Value::String(value.clone()));
            }
            obj.insert("count".into(), json!(n));
            writeln!(out, "{}", Value::Object(obj))?;
        }
        return Ok(());
    }
    let header: Vec<String> = by
        .iter()
        .map(|c| c.name().to_uppercase())
        .chain(["COUNT".to_owned()])
        .collect();
    let body = sorted.into_iter().map(|(key, n)| {
        let mut row = key.clone();
        row.push(n.to_string());
        row
    });
    print_table(out, header, body)
}

/// Prints aligned columns separated by two spaces.
pub(crate) fn print_table<H, R>(
    out: &mut dyn Write,
    header: H,
    body: impl Iterator<Item = R>,
) -> std::io::Result<()>
where
    H: AsRef<[String]>,
    R: AsRef<[String]>,
{
    let rows: Vec<R> = body.collect();
    write!(
        out,
        "{}",
        hookline_runtime::table::aligned(header.as_ref(), &rows)
    )
}
