//! Who holds a dispatcher's capacity. Every replica publishes a [`Report`] at
//! `GET /capacity` on its ops port, refreshed every second: the tenants
//! promoted to overflow lanes (partition, lane, since when), the lane ceiling and how many
//! wait for a lane, and the top subscriptions and tenants by worker-seconds
//! (then by records buffered). `hookline-dispatcher capacity` reads it from
//! one or more replicas, adds the replicas up and prints a table or JSON.
//!
//! Tenant and subscription ids appear here, never in metric labels. Each
//! replica reports its own top [`TOP`]: a tenant below that on some replica is
//! counted only where it is in the top, so the sums are lower bounds.

use std::{
    collections::BTreeMap,
    io::Write,
    time::{Duration, SystemTime},
};

use clap::{Args, ValueEnum};
use hookline_core::{epoch, Usage};
use hookline_runtime::config::parse_duration;
use serde::{Deserialize, Serialize};

/// How many subscriptions and tenants each replica reports.
pub const TOP: usize = 20;

/// One replica's report, as served at `/capacity`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// When it was made (ms since the epoch).
    pub at_ms: i64,
    pub overflow: OverflowReport,
    pub top_subscriptions: Vec<SubscriptionUse>,
    pub top_tenants: Vec<TenantUse>,
}

/// The overflow lanes of one replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverflowReport {
    /// Most tenants promoted at once, per partition each (`--overflow-lanes`).
    pub ceiling: usize,
    pub promoted: Vec<Promoted>,
    /// Tenants that qualified for a lane and found none free.
    pub waiting: usize,
}

/// A tenant promoted to an overflow lane on one `deliveries` partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Promoted {
    pub partition: i32,
    pub tenant_id: String,
    /// `lane-N`: the topic `deliveries.lane-N`.
    pub lane: String,
    pub since_ms: i64,
    pub for_s: u64,
}

/// What one subscription holds. Worker-seconds are slot-held seconds charged
/// by the fair share, decayed with a 60 s half-life (one slot busy without
/// pause reads about 87).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionUse {
    pub tenant_id: String,
    pub subscription_id: String,
    pub worker_seconds: f64,
    /// Records queued and in flight.
    pub buffered: usize,
    pub in_flight: u32,
}

/// What one tenant holds, with its fair-share weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantUse {
    pub tenant_id: String,
    pub weight: f64,
    pub worker_seconds: f64,
    pub buffered: usize,
    pub in_flight: u32,
}

/// The order of the top lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum By {
    /// Worker-seconds, then records buffered.
    #[default]
    WorkerSeconds,
    /// Records buffered (queued and in flight), then worker-seconds.
    Buffered,
}

trait Ranked {
    fn worker_seconds(&self) -> f64;
    fn buffered(&self) -> usize;
}

impl Ranked for SubscriptionUse {
    fn worker_seconds(&self) -> f64 {
        self.worker_seconds
    }
    fn buffered(&self) -> usize {
        self.buffered
    }
}

impl Ranked for TenantUse {
    fn worker_seconds(&self) -> f64 {
        self.worker_seconds
    }
    fn buffered(&self) -> usize {
        self.buffered
    }
}

/// Sorts the largest first, by `by` and then the other measure.
fn rank<T: Ranked>(items: &mut [T], by: By) {
    items.sort_by(|a, b| {
        let ws = b.worker_seconds().total_cmp(&a.worker_seconds());
        let buffered = b.buffered().cmp(&a.buffered());
        match by {
            By::WorkerSeconds => ws.then(buffered),
            By::Buffered => buffered.then(ws),
        }
    });
}

impl Report {
    /// The report of one replica at `now`: its promotions and the top [`TOP`]
    /// of its fair share's `usage`.
    pub(crate) fn new(
        now: SystemTime,
        promoted: Vec<Promoted>,
        ceiling: usize,
        waiting: usize,
        usage: Usage,
    ) -> Self {
        let mut subscriptions: Vec<SubscriptionUse> = usage
            .subscriptions
            .into_iter()
            .map(|u| SubscriptionUse {
                tenant_id: u.tenant_id,
                subscription_id: u.subscription_id,
                worker_seconds: u.worker_seconds,
                buffered: u.buffered_records,
                in_flight: u.in_flight,
            })
            .collect();
        let mut tenants: Vec<TenantUse> = usage
            .tenants
            .into_iter()
            .map(|u| TenantUse {
                tenant_id: u.tenant_id,
                weight: u.weight,
                worker_seconds: u.worker_seconds,
                buffered: u.buffered_records,
                in_flight: u.in_flight,
            })
            .collect();
        rank(&mut subscriptions, By::WorkerSeconds);
        rank(&mut tenants, By::WorkerSeconds);
        subscriptions.truncate(TOP);
        tenants.truncate(TOP);
        Self {
            at_ms: epoch::millis(now),
            overflow: OverflowReport {
                ceiling,
                promoted,
                waiting,
            },
            top_subscriptions: subscriptions,
            top_tenants: tenants,
        }
    }
}

/// Reads `/capacity` of dispatcher replicas and prints who holds their capacity.
#[derive(Debug, Clone, Args)]
pub struct CapacityArgs {
    /// A replica's ops address (`host:port`, or an `http://` URL); repeat, or
    /// separate with commas, to add several replicas up.
    #[arg(
        long = "from",
        env = "HOOKLINE_CAPACITY_FROM",
        value_delimiter = ',',
        default_value = "127.0.0.1:9465"
    )]
    pub from: Vec<String>,

    /// How many tenants and subscriptions to list (each replica reports its top 20).
    #[arg(long, env = "HOOKLINE_CAPACITY_TOP", default_value_t = 10)]
    pub top: usize,

    /// Order of the lists.
    #[arg(long, env = "HOOKLINE_CAPACITY_BY", value_enum, default_value_t = By::WorkerSeconds)]
    pub by: By,

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
    #[error("{from}: {reason}")]
    Fetch { from: String, reason: String },
    #[error("{from}: not a capacity report (is it a hookline-dispatcher's ops port?)")]
    Decode {
        from: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{failed} of {total} replicas could not be read (listed above)")]
    Unreachable { failed: usize, total: usize },
    #[error("writing the output")]
    Io(#[from] std::io::Error),
}

/// The `/capacity` URL of `--from`: `host:port` gains `http://`, an empty path
/// becomes `/capacity`. The ops port serves plain HTTP only.
pub fn capacity_url(from: &str) -> Result<hyper::Uri, CapacityError> {
    hookline_runtime::ops_report::report_url(from, "/capacity").map_err(|reason| {
        CapacityError::Address {
            from: from.to_owned(),
            reason,
        }
    })
}

/// Every replica read, added up: the JSON form of the command's output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fleet {
    pub replicas: Vec<Replica>,
    pub unreachable: Vec<Unreachable>,
    pub top_tenants: Vec<TenantUse>,
    pub top_subscriptions: Vec<SubscriptionUse>,
}

/// One replica's report, named by where it was read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replica {
    pub from: String,
    pub at_ms: i64,
    pub overflow: OverflowReport,
}

/// A replica that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unreachable {
    pub from: String,
    pub error: String,
}

impl Fleet {
    /// Adds the reports up: a tenant's or subscription's figures are summed
    /// over the replicas that list it; the lists are ranked by `by` and cut to
    /// `top`.
    pub fn add_up(read: Vec<(String, Result<Report, CapacityError>)>, by: By, top: usize) -> Self {
        let mut replicas = Vec::new();
        let mut unreachable = Vec::new();
        let mut tenants: BTreeMap<String, TenantUse> = BTreeMap::new();
        let mut subscriptions: BTreeMap<(String, String), SubscriptionUse> = BTreeMap::new();
        for (from, result) in read {
            let report = match result {
                Ok(report) => report,
                Err(e) => {
                    unreachable.push(Unreachable {
                        from,
                        error: hookline_envelope::error_chain(&e),
                    });
                    continue;
                }
            };
            for t in report.top_tenants {
                tenants
                    .entry(t.tenant_id.clone())
                    .and_modify(|sum| {
                        sum.worker_seconds += t.worker_seconds;
                        sum.buffered += t.buffered;
                        sum.in_flight += t.in_flight;
                    })
                    .or_insert(t);
            }
            for s in report.top_subscriptions {
                subscriptions
                    .entry((s.tenant_id.clone(), s.subscription_id.clone()))
                    .and_modify(|sum| {
                        sum.worker_seconds += s.worker_seconds;
                        sum.buffered += s.buffered;
                        sum.in_flight += s.in_flight;
                    })
                    .or_insert(s);
            }
            replicas.push(Replica {
                from,
                at_ms: report.at_ms,
                overflow: report.overflow,
            });
        }
        let mut top_tenants: Vec<TenantUse> = tenants.into_values().collect();
        let mut top_subscriptions: Vec<SubscriptionUse> = subscriptions.into_values().collect();
        rank(&mut top_tenants, by);
        rank(&mut top_subscriptions, by);
        top_tenants.truncate(top);
        top_subscriptions.truncate(top);
        Self {
            replicas,
            unreachable,
            top_tenants,
            top_subscriptions,
        }
    }

    /// The tables an operator reads.
    pub fn render(&self) -> String {
        let rfc3339 = |ms: i64| {
            let since_epoch = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
            humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + since_epoch).to_string()
        };
        let mut out = String::new();
        let replicas: Vec<[String; 4]> = self
            .replicas
            .iter()
            .map(|r| {
                [
                    r.from.clone(),
                    rfc3339(r.at_ms),
                    format!("{}/{}", r.overflow.promoted.len(), r.overflow.ceiling),
                    r.overflow.waiting.to_string(),
                ]
            })
            .collect();
        out.push_str(&hookline_runtime::table::aligned(
            &["REPLICA", "REPORTED AT", "LANES USED", "WAITING FOR A LANE"],
            &replicas,
        ));
        for u in &self.unreachable {
            out.push_str(&format!("{}  UNREACHABLE: {}\n", u.from, u.error));
        }

        out.push_str("\nPROMOTED TO OVERFLOW LANES\n");
        let promoted: Vec<[String; 6]> = self
            .replicas
            .iter()
            .flat_map(|r| {
                r.overflow.promoted.iter().map(|p| {
                    [
                        r.from.clone(),
                        p.partition.to_string(),
                        p.tenant_id.clone(),
                        p.lane.clone(),
                        rfc3339(p.since_ms),
                        humantime::format_duration(Duration::from_secs(p.for_s)).to_string(),
                    ]
                })
            })
            .collect();
        if promoted.is_empty() {
            out.push_str("(none)\n");
        } else {
            out.push_str(&hookline_runtime::table::aligned(
                &["REPLICA", "PARTITION", "TENANT", "LANE", "SINCE", "FOR"],
                &promoted,
            ));
        }

        out.push_str(
            "\nTOP TENANTS (worker-seconds: slot-held seconds, decayed with a 60 s half-life)\n",
        );
        let tenants: Vec<[String; 5]> = self
            .top_tenants
            .iter()
            .map(|t| {
                [
                    t.tenant_id.clone(),
                    format!("{}", t.weight),
                    format!("{:.1}", t.worker_seconds),
                    t.buffered.to_string(),
                    t.in_flight.to_string(),
                ]
            })
            .collect();
        out.push_str(&hookline_runtime::table::aligned(
            &[
                "TENANT",
                "WEIGHT",
                "WORKER-SECONDS",
                "BUFFERED",
                "IN FLIGHT",
            ],
            &tenants,
        ));

        out.push_str("\nTOP SUBSCRIPTIONS\n");
        let subscriptions: Vec<[String; 5]> = self
            .top_subscriptions
            .iter()
            .map(|s| {
                [
                    s.tenant_id.clone(),
                    s.subscription_id.clone(),
                    format!("{:.1}", s.worker_seconds),
                    s.buffered.to_string(),
                    s.in_flight.to_string(),
                ]
            })
            .collect();
        out.push_str(&hookline_runtime::table::aligned(
            &[
                "TENANT",
                "SUBSCRIPTION",
                "WORKER-SECONDS",
                "BUFFERED",
                "IN FLIGHT",
            ],
            &subscriptions,
        ));
        out
    }
}

/// GETs one replica's report.
async fn read(url: &hyper::Uri, from: &str, timeout: Duration) -> Result<Report, CapacityError> {
    let body = hookline_runtime::ops_report::fetch(url, timeout)
        .await
        .map_err(|reason| CapacityError::Fetch {
            from: from.to_owned(),
            reason,
        })?;
    serde_json::from_slice(&body).map_err(|source| CapacityError::Decode {
        from: from.to_owned(),
        source,
    })
}

pub async fn run(args: &CapacityArgs, out: &mut dyn Write) -> Result<(), CapacityError> {
    let urls = args
        .from
        .iter()
        .map(|from| capacity_url(from).map(|url| (from.trim().to_owned(), url)))
        .collect::<Result<Vec<_>, _>>()?;
    let total = urls.len();
    let reads = futures::future::join_all(
        urls.iter()
            .map(|(from, url)| async move { (from.clone(), read(url, from, args.timeout).await) }),
    )
    .await;
    let fleet = Fleet::add_up(reads, args.by, args.top);
    if args.json {
        let json = serde_json::to_string_pretty(&fleet).map_err(std::io::Error::other)?;
        writeln!(out, "{json}")?;
    } else {
        write!(out, "{}", fleet.render())?;
    }
    match fleet.unreachable.len() {
        0 => Ok(()),
        failed => Err(CapacityError::Unreachable { failed, total }),
    }
}

#[cfg(test)]
#[path = "capacity_tests.rs"]
mod tests;
