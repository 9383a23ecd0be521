//! `hookline-bench`: named scenarios run against the three release binaries on
//! a real Kafka broker (`HOOKLINE_TEST_BROKERS`, as the tests use) with a local
//! receiver; prints a table and writes JSON under `target/bench/`. It measures
//! and asserts nothing about speed, but exits non-zero when a scenario fails —
//! above all when it loses a delivery.
//!
//! `make bench` or `make bench SCENARIOS=latency`; parameters are `BENCH_*`
//! environment variables (see `params.rs` and docs/benchmarks.md).

mod bare;
mod broker_gc;
mod params;
mod report;
mod scenarios;
mod stats;

use hookline_testkit::{pipeline, stage};

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;

use crate::{params::Params, report::Run, scenarios::Context};

/// Benchmarks of the hookline pipeline on real Kafka.
#[derive(Debug, Parser)]
#[command(name = "hookline-bench")]
struct Cli {
    /// Scenarios to run, in order, `limit` first whenever named (default:
    /// all of limit, throughput, latency, isolation, retry_lateness, backlog).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(scenarios::ALL))]
    scenarios: Vec<String>,

    /// Directory of the JSON results (default: `target/bench` beside the binaries).
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let params = Params::from_env()?;
    let mut names: Vec<String> = if cli.scenarios.is_empty() {
        scenarios::ALL.iter().map(|s| (*s).to_owned()).collect()
    } else {
        cli.scenarios
    };
    // The limit first, so the others can print their ratio to it.
    names.sort_by_key(|n| n != "limit");
    let out_dir = match cli.out_dir {
        Some(d) => d,
        None => stage::bin_dir()?
            .parent()
            .context("the binaries' directory has no parent")?
            .join("bench"),
    };
    let now = chrono::Utc::now();
    let mut run = Run {
        started_at: now.format("%Y-%m-%d %H:%M UTC").to_string(),
        machine: report::machine(),
        params,
        scenarios: Vec::new(),
    };
    eprintln!(
        "hookline-bench: Kafka at {}, scenarios {}, BENCH_SECONDS={}",
        hookline_testkit::brokers(),
        names.join(", "),
        run.params.seconds
    );
    let gc_log = broker_gc::Log::from_env();
    if gc_log.is_none() {
        eprintln!(
            "hookline-bench: {} is not set, so the broker's GC pauses are not shown (make bench sets it)",
            broker_gc::ENV
        );
    }
    let mut ctx = Context::default();
    for name in &names {
        eprintln!("hookline-bench: running {name} ...");
        let started = std::time::Instant::now();
        let from_us = chrono::Utc::now().timestamp_micros();
        let scenario = async {
            match name.as_str() {
                "limit" => Ok(scenarios::limit::run(&run.params, &mut ctx).await),
                "throughput" => Ok(scenarios::throughput::run(&run.params, &mut ctx).await),
                "latency" => Ok(scenarios::latency::run(&run.params, &mut ctx).await),
                "isolation" => Ok(scenarios::isolation::run(&run.params, &mut ctx).await),
                "retry_lateness" => Ok(scenarios::retry_lateness::run(&run.params, &mut ctx).await),
                "backlog" => Ok(scenarios::backlog::run(&run.params, &mut ctx).await),
                other => Err(anyhow::anyhow!("unknown scenario {other}")),
            }
        };
        // On Ctrl-C the scenario is dropped, and with it its stages (killed on drop).
        let mut outcome = tokio::select! {
            outcome = scenario => outcome?,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted during {name}; its stages were killed"),
        };
        if let Some(log) = &gc_log {
            let to_us = chrono::Utc::now().timestamp_micros();
            let window_s = (to_us - from_us) as f64 / 1e6;
            match log.pauses(from_us, to_us) {
                Ok(pauses) => {
                    let pauses = broker_gc::Pauses::of(&pauses, window_s);
                    outcome.figure(
                        "broker GC pauses",
                        pauses.text(),
                        "broker_gc_pauses",
                        pauses,
                    );
                }
                Err(e) => outcome.figure(
                    "broker GC pauses",
                    format!("not read: {e:#}"),
                    "broker_gc_pauses",
                    serde_json::Value::Null,
                ),
            }
        }
        match &outcome.error {
            None => eprintln!(
                "hookline-bench: {name} done in {:.0} s",
                started.elapsed().as_secs_f64()
            ),
            Some(e) => eprintln!("hookline-bench: {name} FAILED: {e}"),
        }
        run.scenarios.push(outcome);
    }
    report::print(&run);
    let path = report::write(&run, &out_dir, &now.format("%Y%m%dT%H%M%SZ").to_string())?;
    println!("\nJSON: {} (and latest.json beside it)", path.display());
    let failed: Vec<&str> = run
        .scenarios
        .iter()
        .filter(|s| s.error.is_some())
        .map(|s| s.scenario)
        .collect();
    anyhow::ensure!(failed.is_empty(), "scenarios failed: {}", failed.join(", "));
    Ok(())
}
