//! Who fanout is reading past, and why. Every replica publishes a [`Report`]
//! at `GET /capacity` on its ops port, refreshed after a commit at most once a
//! second: the tenants the burst router routes (their unordered deliveries go
//! to their overflow lane, and on their `events` partition they are read
//! past), since when, the ceiling and how many wait for a lane, and per
//! partition with a tenant read past, how far the front reader is ahead of the
//! committed watermark and from which offset each tenant's records are left to
//! the back reader. `hookline-fanout capacity` reads it from one or more
//! replicas and prints a table or JSON.
//!
//! Tenant ids appear here, never in metric labels.

use std::{io::Write, time::Duration};

use clap::Args;
use hookline_runtime::config::parse_duration;
use serde::{Deserialize, Serialize};

/// One replica's report, as served at `/capacity`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// When it was made (ms since the epoch).
    pub at_ms: i64,
    /// Most tenants routed at once (`--overflow-lanes`).
    pub ceiling: usize,
    pub routed: Vec<Routed>,
    /// Tenants that qualify for routing and find every lane taken: they are
    /// not read past, and wait in order with the others.
    pub waiting: usize,
    pub read_past: Vec<PartitionPast>,
}

/// A tenant the burst router routes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Routed {
    pub tenant_id: String,
    /// `lane-N`: the topic `deliveries.lane-N` its unordered deliveries go to.
    pub lane: String,
    pub since_ms: i64,
}

/// An `events` partition with a tenant read past.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionPast {
    pub partition: i32,
    /// The lowest record not yet fanned out: the offset committed.
    pub watermark: i64,
    /// How far the front reader has read.
    pub front: i64,
    /// Read-past tenants and the offset from which their records are left.
    pub tenants: Vec<TenantPast>,
}

/// A tenant read past on one partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantPast {
    pub tenant_id: String,
    pub from_offset: i64,
}

/// `hookline-fanout capacity`.
#[derive(Debug, Clone, Args)]
pub struct CapacityArgs {
    /// A replica's ops address (`host:port`, or an `http://` URL); repeat, or
    /// separate with commas, to read several replicas.
    #[arg(
        long = "from",
        env = "HOOKLINE_CAPACITY_FROM",
        value_delimiter = ',',
        default_value = "127.0.0.1:9464"
    )]
    pub from: Vec<String>,

    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,

    /// Longest wait for each replica's answer (e.g. `5s`).
    #[arg(long, env = "HOOKLINE_CAPACITY_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// Why `capacity` failed.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    #[error("--from {from}: {reason}")]
    Address { from: String, reason: String },
    #[error("{failed} of {total} replicas could not be read (listed above)")]
    Unreachable { failed: usize, total: usize },
    #[error("writing the output")]
    Io(#[from] std::io::Error),
}

/// Every replica read: the JSON form of the command's output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fleet {
    pub replicas: Vec<Replica>,
    pub unreachable: Vec<Unreachable>,
}

/// One replica's report, named by where it was read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replica {
    pub from: String,
    #[serde(flatten)]
    pub report: Report,
}

/// A replica that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unreachable {
    pub from: String,
    pub error: String,
}

impl Fleet {
    pub fn new(read: Vec<(String, Result<Report, String>)>) -> Self {
        let mut fleet = Self {
            replicas: Vec::new(),
            unreachable: Vec::new(),
        };
        for (from, result) in read {
            match result {
                Ok(report) => fleet.replicas.push(Replica { from, report }),
                Err(error) => fleet.unreachable.push(Unreachable { from, error }),
            }
        }
        fleet
    }

    /// The tables: one row per replica, then every routed tenant, then every
    /// read-past tenant with its partition's progress.
    pub fn render(&self, now_ms: i64) -> String {
        let ago = |ms: i64| {
            let secs = u64::try_from(now_ms.saturating_sub(ms) / 1_000).unwrap_or(0);
            humantime::format_duration(Duration::from_secs(secs)).to_string()
        };
        let mut out = String::new();
        let replicas: Vec<[String; 4]> = self
            .replicas
            .iter()
            .map(|r| {
                [
                    r.from.clone(),
                    format!("{} ago", ago(r.report.at_ms)),
                    format!("{}/{}", r.report.routed.len(), r.report.ceiling),
                    r.report.waiting.to_string(),
                ]
            })
            .collect();
        out.push_str(&hookline_runtime::table::aligned(
            &["REPLICA", "REPORTED", "LANES USED", "WAITING FOR A LANE"],
            &replicas,
        ));
        for u in &self.unreachable {
            out.push_str(&format!("{}  UNREACHABLE: {}\n", u.from, u.error));
        }
        out.push_str("\nROUTED (unordered deliveries to the lane; read past on its partition)\n");
        let routed: Vec<[String; 4]> = self
            .replicas
            .iter()
            .flat_map(|r| {
                r.report.routed.iter().map(|t| {
                    [
                        r.from.clone(),
                        t.tenant_id.clone(),
                        t.lane.clone(),
                        ago(t.since_ms),
                    ]
                })
            })
            .collect();
        if routed.is_empty() {
            out.push_str("(none)\n");
        } else {
            out.push_str(&hookline_runtime::table::aligned(
                &["REPLICA", "TENANT", "LANE", "FOR"],
                &routed,
            ));
        }
        out.push_str("\nREAD PAST (records the back reader has still to fan out)\n");
        let past: Vec<[String; 6]> = self
            .replicas
            .iter()
            .flat_map(|r| {
                r.report.read_past.iter().flat_map(move |p| {
                    p.tenants.iter().map(move |t| {
                        [
                            r.from.clone(),
                            p.partition.to_string(),
                            t.tenant_id.clone(),
                            t.from_offset.to_string(),
                            p.front.to_string(),
                            (p.front - p.watermark).to_string(),
                        ]
                    })
                })
            })
            .collect();
        if past.is_empty() {
            out.push_str("(none)\n");
        } else {
            out.push_str(&hookline_runtime::table::aligned(
                &[
                    "REPLICA",
                    "PARTITION",
                    "TENANT",
                    "FROM OFFSET",
                    "FRONT",
                    "AHEAD",
                ],
                &past,
            ));
        }
        out
    }
}

/// Reads every replica's report and prints them; fails, after printing what
/// it could read, if any replica could not be read.
pub async fn run(args: &CapacityArgs, out: &mut dyn Write) -> Result<(), CapacityError> {
    use hookline_runtime::ops_report::{fetch, report_url};
    let urls = args
        .from
        .iter()
        .map(|from| {
            report_url(from, "/capacity")
                .map(|url| (from.trim().to_owned(), url))
                .map_err(|reason| CapacityError::Address {
                    from: from.to_owned(),
                    reason,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let total = urls.len();
    let reads = futures::future::join_all(urls.iter().map(|(from, url)| async move {
        let report = match fetch(url, args.timeout).await {
            Ok(body) => serde_json::from_slice::<Report>(&body).map_err(|e| {
                format!("not a fanout capacity report (is it a hookline-fanout's ops port?): {e}")
            }),
            Err(e) => Err(e),
        };
        (from.clone(), report)
    }))
    .await;
    let fleet = Fleet::new(reads);
    if args.json {
        let json = serde_json::to_string_pretty(&fleet).map_err(std::io::Error::other)?;
        writeln!(out, "{json}")?;
    } else {
        let now_ms = hookline_core::epoch::millis(std::time::SystemTime::now());
        write!(out, "{}", fleet.render(now_ms))?;
    }
    match fleet.unreachable.len() {
        0 => Ok(()),
        failed => Err(CapacityError::Unreachable { failed, total }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            at_ms: 10_000,
            ceiling: 8,
            routed: vec![Routed {
                tenant_id: "whale".into(),
                lane: "lane-3".into(),
                since_ms: 4_000,
            }],
            waiting: 1,
            read_past: vec![PartitionPast {
                partition: 2,
                watermark: 100,
                front: 5_100,
                tenants: vec![TenantPast {
                    tenant_id: "whale".into(),
                    from_offset: 100,
                }],
            }],
        }
    }

    #[test]
    fn a_report_round_trips_through_its_json() {
        let r = report();
        let json = serde_json::to_string(&r).expect("json");
        assert_eq!(serde_json::from_str::<Report>(&json).expect("parse"), r);
    }

    #[test]
    fn the_tables_name_who_is_routed_and_read_past_and_who_was_unreachable() {
        let fleet = Fleet::new(vec![
            ("f-0:9464".into(), Ok(report())),
            (
                "f-1:9464".into(),
                Err("GET http://f-1:9464/capacity: refused".into()),
            ),
        ]);
        let text = fleet.render(16_000);
        assert!(text.contains("f-0:9464") && text.contains("1/8"), "{text}");
        assert!(text.contains("f-1:9464  UNREACHABLE: GET"), "{text}");
        assert!(text.contains("lane-3") && text.contains("12s"), "{text}");
        // partition 2, from offset 100, the front at 5,100: 5,000 ahead.
        let row = text
            .lines()
            .find(|l| l.contains("5100"))
            .expect("a read-past row");
        for cell in ["f-0:9464", "2", "whale", "100", "5100", "5000"] {
            assert!(row.split_whitespace().any(|c| c == cell), "{cell}: {row}");
        }
        let json = serde_json::to_value(&fleet).expect("json");
        assert_eq!(json["replicas"][0]["from"], "f-0:9464");
        assert_eq!(json["replicas"][0]["read_past"][0]["front"], 5_100);
        assert_eq!(json["unreachable"][0]["from"], "f-1:9464");
    }
}
