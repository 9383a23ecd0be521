//! The rows `isolation` prints: the small tenant's waits per window, the
//! import's clocks, the waits by hop, the drain's slowest waits and the goals.

use std::collections::HashMap;

use hookline_testkit::receiver::Recorded;

use super::{import::Import, import::Times, Shared};
use crate::{
    pipeline::{sent_us, ATTEMPT_STARTED_HEADER},
    report::Outcome,
    scenarios::{
        latency::{hop_samples, HopWaits, Seen},
        waits,
    },
    stats::{ms, Summary},
};

/// How many of the small tenant's slowest waits during the drain are shown.
const SLOWEST_SHOWN: usize = 5;
/// The goals: the p99 ratios, and the longest wait during fan-out.
const GOAL_RATIO: f64 = 1.5;
const GOAL_MAX_MS: f64 = 1000.0;

/// A row of p50 / p99 / max and the count, the [`Summary`] under `key`.
pub(super) fn summary_row(out: &mut Outcome, label: &str, key: &str, s: &Summary, note: &str) {
    out.figure(
        format!("{label} p50/p99/max"),
        format!(
            "{} / {} / {} (n={}{note})",
            ms(s.p50_ms),
            ms(s.p99_ms),
            ms(s.max_ms),
            s.n
        ),
        key,
        s,
    );
}

/// The import's clocks, each from its first event's production;
/// `read_past_us` is `None` where it is not measured (the control), and
/// `Some(None)` where the observer never had that delivery.
pub(super) fn import_row(
    out: &mut Outcome,
    label: &str,
    key: &str,
    import: &Import,
    times: Times,
    read_past_us: Option<Option<i64>>,
) {
    let since = |t: Option<i64>| t.map(|t| (t - import.from_us) as f64 / 1e6);
    let text = |s: Option<f64>| s.map_or("n/a".to_owned(), |s| ms(s * 1000.0));
    let (read_past, fan_out, committed) = (
        since(read_past_us.flatten()),
        since(times.last_readable_us),
        since(times.committed_us),
    );
    let mut line = format!(
        "{} deliveries on events partition {}:",
        import.deliveries, import.partition
    );
    if read_past_us.is_some() {
        line.push_str(&format!(" fanout read past it in {},", text(read_past)));
    }
    line.push_str(&format!(
        " fanned it out in {} (its last delivery readable), committed its last event at {}",
        text(fan_out),
        text(committed)
    ));
    if times.written != import.deliveries {
        line.push_str(&format!(
            "; read {} of its deliveries as fanout wrote them",
            times.written
        ));
    }
    let mut value = serde_json::json!({
        "deliveries": import.deliveries,
        "partition": import.partition,
        "fan_out_s": fan_out,
        "committed_s": committed,
        "deliveries_read": times.written,
    });
    if read_past_us.is_some() {
        value["read_past_s"] = read_past.into();
    }
    out.figure(label, line, key, value);
}

/// The p99 of each hop of the small tenant's waits for events produced
/// within `(from, to)` (µs since the epoch, inclusive).
pub(super) fn hop_row(
    out: &mut Outcome,
    label: &str,
    key: &str,
    small: &[Recorded],
    seen: &HashMap<String, Seen>,
    (from, to): (i64, i64),
) {
    let in_window = small
        .iter()
        .filter(|r| sent_us(&r.body).is_some_and(|t| t >= from && t <= to));
    let [produced, readable, started, received] =
        hop_samples(in_window, seen).map(|s| Summary::of(s).p99_ms);
    out.figure(
        label,
        format!(
            "fanout produced {}, readable {}, POST started {}, received {}",
            ms(produced),
            ms(readable),
            ms(started),
            ms(received)
        ),
        key,
        serde_json::json!({
            "fanout_produced_ms": produced,
            "readable_ms": readable,
            "post_started_ms": started,
            "received_ms": received,
        }),
    );
}

/// Where the slowest waits of the drain fall: seconds after fanout had
/// committed the import (early ones waited for the whale's records ahead of
/// them to be moved to its lane), and how long after its event was produced
/// each hop had it.
pub(super) fn slowest(
    out: &mut Outcome,
    small: &[Recorded],
    seen: &HashMap<String, Seen>,
    (split_us, done_us): (i64, i64),
) {
    let mut slow = waits(small, |_, sent| sent > split_us && sent <= done_us);
    slow.sort_unstable_by_key(|(wait, ..)| std::cmp::Reverse(*wait));
    slow.truncate(SLOWEST_SHOWN);
    let started = |r: &Recorded, sent: i64| {
        r.header(ATTEMPT_STARTED_HEADER)
            .parse::<i64>()
            .ok()
            .map(|s| s - sent)
    };
    let slowest: Vec<String> = slow
        .iter()
        .map(|(wait, sent, r)| {
            let at = format!(
                "{:.0} ms at t={:.2}s",
                *wait as f64 / 1000.0,
                (sent - split_us) as f64 / 1e6
            );
            match HopWaits::of(r, seen) {
                Some(h) => format!(
                    "{at} (fanout produced +{:.0}, readable +{:.0}, POST started +{})",
                    h.produced_ms,
                    h.readable_ms,
                    h.started_ms
                        .map_or("?".to_owned(), |s| format!("{s:.0} ms")),
                ),
                None => format!(
                    "{at} (POST started +{})",
                    started(r, *sent)
                        .map_or("?".to_owned(), |s| format!("{:.0} ms", s as f64 / 1000.0)),
                ),
            }
        })
        .collect();
    out.figure(
        "  slowest during drain",
        if slowest.is_empty() {
            "none".to_owned()
        } else {
            slowest.join(", ")
        },
        "small_during_whale_slowest",
        serde_json::json!(slow
            .iter()
            .map(|(wait, sent, r)| serde_json::json!({
                "wait_us": wait,
                "sent_after_fan_out_us": sent - split_us,
                "post_started_after_us": started(r, *sent),
                "hops_ms": HopWaits::of(r, seen).map(|h| serde_json::json!({
                    "fanout_produced": h.produced_ms,
                    "readable": h.readable_ms,
                    "post_started": h.started_ms,
                })),
            }))
            .collect::<Vec<_>>()),
    );
}

/// The goal rows: figures to read, not checks that fail the scenario.
pub(super) fn goals(out: &mut Outcome, shared: &Shared, control: Option<&Summary>) {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let verdict = |value: f64, goal: f64| match value {
        v if v.is_nan() => "n/a",
        v if v <= goal => "met",
        _ => "not met",
    };
    let (p50, p99) = control.map_or((f64::NAN, f64::NAN), |c| {
        (
            ratio(shared.fan_out.p50_ms, c.p50_ms),
            ratio(shared.fan_out.p99_ms, c.p99_ms),
        )
    });
    out.figure(
        "small during fan-out / control",
        format!(
            "p50 {p50:.2} ×, p99 {p99:.2} × (goal: p99 ≤ {GOAL_RATIO} ×, {})",
            verdict(p99, GOAL_RATIO)
        ),
        "small_fan_out_over_control",
        serde_json::json!({ "p50": p50, "p99": p99, "goal_p99": GOAL_RATIO }),
    );
    let (p50, p99) = (
        ratio(shared.drain.p50_ms, shared.alone.p50_ms),
        ratio(shared.drain.p99_ms, shared.alone.p99_ms),
    );
    out.figure(
        "small during drain / alone",
        format!(
            "p50 {p50:.2} ×, p99 {p99:.2} × (goal: p99 ≤ {GOAL_RATIO} ×, {})",
            verdict(p99, GOAL_RATIO)
        ),
        "small_during_over_alone",
        serde_json::json!({ "p50": p50, "p99": p99, "goal_p99": GOAL_RATIO }),
    );
    let max = shared.fan_out.max_ms;
    out.figure(
        "small's longest during fan-out",
        format!(
            "{} (goal: ≤ {}, {})",
            ms(max),
            ms(GOAL_MAX_MS),
            verdict(max, GOAL_MAX_MS)
        ),
        "small_during_whale_fan_out_max",
        serde_json::json!({ "max_ms": max, "goal_ms": GOAL_MAX_MS }),
    );
}
