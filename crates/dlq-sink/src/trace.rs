//! `hookline-dlq-sink trace`: the timeline of each matching delivery, from the attempt log
//! (`deliveries.attempts`, read by assignment like `inspect`) or its archive
//! (`kind=attempts`): when it was fanned out (the `created_at` its records carry: fanout
//! writes no record of its own, so fan-out costs nothing more), every attempt with its status
//! and duration, the tier it was written to, parkings, its dead-lettering, and a replay (from
//! the `replay_of` lineage its records carry). Results on stdout — a table per delivery, or one JSON object per step with
//! `--json` — and a summary on stderr. Read-only.
//!
//! Order: a delivery's steps by their time (`at`), ties in the order read (Kafka order within
//! a tenant's partition); deliveries by their first step. Each coordinate is read once (the
//! archive can hold a record twice after a sink crash).

use std::{collections::BTreeMap, io::Write, time::SystemTime};

use clap::Args;
use hookline_core::epoch;
use hookline_envelope::{decode, AttemptRecord, ReplayOf};
use hookline_runtime::config::CommonArgs;
use serde_json::{json, Value};

use crate::{
    cli::{open_kind, CliError},
    filter::FilterArgs,
    inspect::{print_table, rfc3339},
    row::{ArchiveRow, Kind},
    store::ArchiveArgs,
};

/// Arguments of `trace`.
#[derive(Debug, Clone, Default, Args)]
pub struct TraceArgs {
    /// The deliveries of this event (every subscription it fanned out to).
    #[arg(long, value_name = "ID", env = "HOOKLINE_TRACE_EVENT_ID")]
    pub event_id: Option<String>,

    /// This delivery (its `webhook-id`).
    #[arg(long, value_name = "ID", env = "HOOKLINE_TRACE_DELIVERY_ID")]
    pub delivery_id: Option<String>,

    /// The deliveries of this subscription.
    #[arg(long, value_name = "ID", env = "HOOKLINE_TRACE_SUBSCRIPTION")]
    pub subscription: Option<String>,

    /// Only this tenant's deliveries (also prunes the archive by tenant).
    #[arg(long, value_name = "TENANT", env = "HOOKLINE_TRACE_TENANT")]
    pub tenant: Option<String>,

    /// Only steps at or after this time: RFC 3339, a date (UTC) or an age (`1h`, `30m`).
    #[arg(long, value_name = "TIME", env = "HOOKLINE_TRACE_SINCE")]
    pub since: Option<String>,

    /// Only steps before this time; same forms as --since.
    #[arg(long, value_name = "TIME", env = "HOOKLINE_TRACE_UNTIL")]
    pub until: Option<String>,

    /// One JSON object per step (with its delivery's ids) instead of tables.
    #[arg(long, env = "HOOKLINE_TRACE_JSON")]
    pub json: bool,

    /// Read the archive at --archive-url (`kind=attempts`) instead of the topic.
    #[arg(long, env = "HOOKLINE_FROM_ARCHIVE")]
    pub from_archive: bool,

    /// Read the archive at this directory or URL (implies --from-archive).
    #[arg(long, value_name = "DIR|URL")]
    pub archive: Option<String>,
}

/// One step of a timeline: an attempt record, the fan-out its records date, or a replay
/// seen in the lineage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `attempted`, `parked`, `dead_lettered`, `fanned_out` (from `created_at`) or
    /// `replayed` (from `replay_of`).
    pub kind: String,
    /// The record (for `replayed`: the first record of the replayed delivery; for
    /// `fanned_out`: the first record carrying `created_at`, with `at` set to it).
    pub record: AttemptRecord,
}

/// The steps of one delivery, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The delivery's id.
    pub delivery_id: String,
    /// Its steps.
    pub steps: Vec<Step>,
}

/// `kind` of a step that is a replay, seen where a delivery's records first carry a new
/// `replay_of`.
pub const REPLAYED: &str = "replayed";

/// `kind` of the first step: fanout made the delivery, at the `created_at` its records carry
/// (records from dispatchers older than that field have none, and no such step).
pub const FANNED_OUT: &str = "fanned_out";

/// Whether a step is derived from what records carry, not a record of its own: it has only
/// the ids and its time.
fn derived(kind: &str) -> bool {
    kind == REPLAYED || kind == FANNED_OUT
}

/// Groups records (in the order read) into timelines, each in time order, with a
/// `fanned_out` step first (at the earliest `created_at` they carry; a replay keeps it, so
/// there is one) and a `replayed` step before the first record of each new replay lineage.
pub fn timelines(records: Vec<AttemptRecord>) -> Vec<Timeline> {
    let mut by_delivery: BTreeMap<String, Vec<AttemptRecord>> = BTreeMap::new();
    for r in records {
        by_delivery
            .entry(r.delivery_id.clone())
            .or_default()
            .push(r);
    }
    let mut out: Vec<Timeline> = by_delivery
        .into_iter()
        .map(|(delivery_id, mut records)| {
            // Stable: ties keep the order read.
            records.sort_by_key(|r| r.at);
            let mut steps = Vec::with_capacity(records.len() + 2);
            let fanned_out = records
                .iter()
                .filter_map(|r| Some((r.created_at?, r)))
                .min_by_key(|(at, _)| *at);
            if let Some((at, r)) = fanned_out {
                let mut record = r.clone();
                record.at = at;
                steps.push(Step {
                    kind: FANNED_OUT.to_owned(),
                    record,
                });
            }
            let mut lineage: Option<ReplayOf> = None;
            for r in records {
                if r.replay_of.is_some() && r.replay_of != lineage {
                    lineage.clone_from(&r.replay_of);
                    steps.push(Step {
                        kind: REPLAYED.to_owned(),
                        record: r.clone(),
                    });
                }
                steps.push(Step {
                    kind: r.kind.clone(),
                    record: r,
                });
            }
            Timeline { delivery_id, steps }
        })
        .collect();
    out.sort_by_key(|t| t.steps.first().map(|s| s.record.at));
    out
}

/// Runs `trace`; returns how many deliveries were shown.
pub async fn run(
    common: &CommonArgs,
    archive: &ArchiveArgs,
    args: &TraceArgs,
    out: &mut dyn Write,
) -> Result<usize, CliError> {
    if args.event_id.is_none()
        && args.delivery_id.is_none()
        && args.subscription.is_none()
        && args.tenant.is_none()
    {
        return Err(CliError::Usage(
            "trace needs --event-id, --delivery-id, --subscription or --tenant".into(),
        ));
    }
    let filter = FilterArgs {
        tenants: args.tenant.iter().cloned().collect(),
        subscriptions: args.subscription.iter().cloned().collect(),
        since: args.since.clone(),
        until: args.until.clone(),
        ..FilterArgs::default()
    }
    .build(epoch::millis(SystemTime::now()))?;
    let mut archive = archive.clone();
    if let Some(url) = &args.archive {
        archive.archive_url.clone_from(url);
    }
    let from_archive = args.from_archive || args.archive.is_some();
    let mut source = open_kind(common, &archive, Kind::Attempts, from_archive, &filter).await?;
    let (mut scanned, mut undecodable) = (0u64, 0u64);
    let mut records = Vec::new();
    while let Some(row) = source.next().await? {
        scanned += 1;
        if !filter.matches(&row) || !wanted(args, &row) {
            continue;
        }
        match row.value.as_deref().map(decode::<AttemptRecord>) {
            Some(Ok(r)) => records.push(r),
            _ => undecodable += 1,
        }
    }
    let timelines = timelines(records);
    for t in &timelines {
        if args.json {
            for s in &t.steps {
                writeln!(out, "{}", step_json(s))?;
            }
        } else {
            print_timeline(out, t)?;
        }
    }
    let duplicates_skipped = source.duplicates_skipped();
    let shown = timelines.len();
    let steps: usize = timelines.iter().map(|t| t.steps.len()).sum();
    if args.json {
        eprintln!(
            "{}",
            json!({"scanned": scanned, "deliveries": shown, "steps": steps,
                   "undecodable": undecodable, "duplicates_skipped": duplicates_skipped})
        );
    } else {
        eprintln!(
            "scanned {scanned}, deliveries {shown}, steps {steps}, undecodable {undecodable}, \
             duplicates skipped {duplicates_skipped}"
        );
    }
    Ok(shown)
}

fn wanted(args: &TraceArgs, row: &ArchiveRow) -> bool {
    let is = |want: &Option<String>, have: &Option<String>| {
        want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
    };
    is(&args.event_id, &row.event_id) && is(&args.delivery_id, &row.delivery_id)
}

/// What a step says, in a few words: `delivered`, `retried → retry-1m`, `parked
/// (breaker_open) → retry-10s`, `dead-lettered (cancelled)`, `replayed from dlq:0:17`.
fn what(s: &Step) -> String {
    let r = &s.record;
    let to = |t: &Option<String>| t.as_ref().map(|t| format!(" → {t}")).unwrap_or_default();
    match s.kind.as_str() {
        FANNED_OUT => "fanned out".to_owned(),
        REPLAYED => match &r.replay_of {
            Some(of) => format!("replayed from {}:{}:{}", of.topic, of.partition, of.offset),
            None => REPLAYED.to_owned(),
        },
        AttemptRecord::ATTEMPTED => format!("{}{}", r.outcome, to(&r.tier)),
        AttemptRecord::PARKED => format!("parked ({}){}", r.outcome, to(&r.tier)),
        AttemptRecord::DEAD_LETTERED => format!("dead-lettered ({})", r.outcome),
        other => format!("{other} ({})", r.outcome),
    }
}

fn print_timeline(out: &mut dyn Write, t: &Timeline) -> std::io::Result<()> {
    let Some(first) = t.steps.first().map(|s| &s.record) else {
        return Ok(());
    };
    writeln!(
        out,
        "delivery {}  event {}  tenant {}  subscription {}  type {}",
        t.delivery_id, first.event_id, first.tenant_id, first.subscription_id, first.event_type
    )?;
    let header = [
        "AT", "STEP", "ATTEMPT", "STATUS", "RESULT", "DURATION", "FROM", "NEXT_DUE", "DETAIL",
    ]
    .map(str::to_owned);
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let body = t.steps.iter().map(|s| {
        let r = &s.record;
        let replayed = derived(&s.kind);
        let attempt_only = |v: Option<String>| if replayed { "-".into() } else { dash(v) };
        [
            rfc3339(r.at),
            what(s),
            if replayed {
                "-".into()
            } else {
                r.attempt.to_string()
            },
            attempt_only(r.status.map(|s| s.to_string())),
            attempt_only(r.classification.clone()),
            attempt_only(r.duration_ms.map(|ms| format!("{ms}ms"))),
            attempt_only(Some(
                r.from_tier.clone().unwrap_or_else(|| "deliveries".into()),
            )),
            attempt_only(r.next_due_at.map(rfc3339)),
            attempt_only(
                r.detail
                    .as_ref()
                    .map(|d| d.replace(['\n', '\r', '\t'], " ")),
            ),
        ]
    });
    print_table(out, header, body)?;
    writeln!(out)
}

/// One step as JSON: the record's fields, times in RFC 3339, and `step` (its kind, or
/// `fanned_out` or `replayed`, which have only the ids, their time, and `replay_of`).
pub fn step_json(s: &Step) -> Value {
    let r = &s.record;
    let mut v = json!({
        "step": s.kind,
        "delivery_id": r.delivery_id,
        "event_id": r.event_id,
        "tenant_id": r.tenant_id,
        "subscription_id": r.subscription_id,
        "event_type": r.event_type,
        "at": rfc3339(r.at),
        "replay_of": r.replay_of.as_ref().map(|o| json!({
            "topic": o.topic, "partition": o.partition, "offset": o.offset
        })),
        "trace_id": r.trace_id,
    });
    if !derived(&s.kind) {
        let fields = json!({
            "outcome": r.outcome,
            "attempt": r.attempt,
            "duration_ms": r.duration_ms,
            "classification": r.classification,
            "status": r.status,
            "detail": r.detail,
            "from_tier": r.from_tier,
            "tier": r.tier,
            "next_due_at": r.next_due_at.map(rfc3339),
        });
        if let (Value::Object(v), Value::Object(f)) = (&mut v, fields) {
            v.extend(f);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(delivery: &str, kind: &str, outcome: &str, attempt: i32, at: i64) -> AttemptRecord {
        AttemptRecord {
            delivery_id: delivery.into(),
            event_id: "evt".into(),
            tenant_id: "t".into(),
            subscription_id: "s".into(),
            event_type: "a.b".into(),
            kind: kind.into(),
            outcome: outcome.into(),
            attempt,
            at,
            duration_ms: None,
            classification: None,
            status: None,
            detail: None,
            from_tier: None,
            tier: None,
            next_due_at: None,
            replay_of: None,
            trace_id: None,
            policy_version: None,
            created_at: None,
        }
    }

    fn shape(t: &Timeline) -> Vec<(String, String, i32)> {
        t.steps
            .iter()
            .map(|s| (s.kind.clone(), s.record.outcome.clone(), s.record.attempt))
            .collect()
    }

    #[test]
    fn steps_are_grouped_by_delivery_in_time_order_ties_as_read() {
        let records = vec![
            rec("b", "attempted", "delivered", 1, 50),
            rec("a", "attempted", "retried", 2, 30),
            rec("a", "attempted", "retried", 1, 10),
            rec("a", "attempted", "rejected", 3, 40),
            rec("a", "dead_lettered", "rejected_4xx", 3, 40),
        ];
        let t = timelines(records);
        assert_eq!(
            t.iter().map(|t| t.delivery_id.as_str()).collect::<Vec<_>>(),
            ["a", "b"],
            "by first step"
        );
        let s = |k: &str, o: &str, a| (k.to_owned(), o.to_owned(), a);
        assert_eq!(
            shape(&t[0]),
            [
                s("attempted", "retried", 1),
                s("attempted", "retried", 2),
                s("attempted", "rejected", 3),
                s("dead_lettered", "rejected_4xx", 3),
            ]
        );
    }

    #[test]
    fn a_replay_shows_once_before_the_first_record_of_its_lineage() {
        let of = |offset| {
            Some(ReplayOf {
                topic: "deliveries.dlq".into(),
                partition: 0,
                offset,
            })
        };
        let mut r2 = rec("a", "attempted", "retried", 1, 20);
        r2.replay_of = of(7);
        let mut r3 = rec("a", "attempted", "delivered", 2, 30);
        r3.replay_of = of(7);
        let mut r4 = rec("a", "attempted", "delivered", 1, 40);
        r4.replay_of = of(9);
        let t = timelines(vec![
            rec("a", "dead_lettered", "exhausted", 5, 10),
            r2,
            r3,
            r4,
        ]);
        let kinds: Vec<_> = t[0].steps.iter().map(|s| s.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "dead_lettered",
                "replayed",
                "attempted",
                "attempted",
                "replayed",
                "attempted"
            ]
        );
        assert_eq!(what(&t[0].steps[1]), "replayed from deliveries.dlq:0:7");
        let replayed = step_json(&t[0].steps[1]);
        assert_eq!(replayed["outcome"], Value::Null);
        assert_eq!(replayed["attempt"], Value::Null);
        assert_eq!(replayed["replay_of"]["offset"], 7);
        assert_eq!(step_json(&t[0].steps[2])["attempt"], 1);
    }

    #[test]
    fn the_fan_out_comes_first_at_the_earliest_created_at_once_even_across_a_replay() {
        let mut a1 = rec("a", "attempted", "retried", 1, 20);
        a1.created_at = Some(12);
        let mut a2 = rec("a", "attempted", "delivered", 2, 30);
        a2.created_at = Some(12);
        a2.replay_of = Some(ReplayOf {
            topic: "deliveries.dlq".into(),
            partition: 0,
            offset: 7,
        });
        // From a dispatcher older than the field: no created_at.
        let old = rec("b", "attempted", "delivered", 1, 5);
        let t = timelines(vec![a2, a1, old]);
        let kinds = |t: &Timeline| t.steps.iter().map(|s| s.kind.clone()).collect::<Vec<_>>();
        assert_eq!(t[0].delivery_id, "b");
        assert_eq!(kinds(&t[0]), ["attempted"], "nothing to date a fan-out by");
        assert_eq!(
            kinds(&t[1]),
            ["fanned_out", "attempted", "replayed", "attempted"]
        );
        let fanned = &t[1].steps[0];
        assert_eq!(fanned.record.at, 12);
        assert_eq!(what(fanned), "fanned out");
        let json = step_json(fanned);
        assert_eq!(json["step"], "fanned_out");
        assert_eq!(json["at"], rfc3339(12));
        assert_eq!(json["attempt"], Value::Null, "not an attempt");
    }

    #[test]
    fn steps_read_as_words() {
        let mut r = rec("a", "attempted", "retried", 1, 0);
        r.tier = Some("retry-1m".into());
        let step = |r: &AttemptRecord| Step {
            kind: r.kind.clone(),
            record: r.clone(),
        };
        assert_eq!(what(&step(&r)), "retried → retry-1m");
        let mut p = rec("a", "parked", "breaker_open", 1, 0);
        p.tier = Some("retry-10s".into());
        assert_eq!(what(&step(&p)), "parked (breaker_open) → retry-10s");
        let d = rec("a", "dead_lettered", "cancelled", 0, 0);
        assert_eq!(what(&step(&d)), "dead-lettered (cancelled)");
    }
}
