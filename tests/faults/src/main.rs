//! `hookline-faults`: end-to-end fault scenarios of the real binaries
//! (`hookline-fanout`, `hookline-dispatcher`, `hookline-dlq-sink`, started as
//! processes from the harness's own target directory) on real Kafka. Each
//! scenario injects faults under load and proves the promise from the
//! evidence — the receiver's log, the dead-letter topic and the archive: every
//! (event, matching subscription) is delivered or dead-lettered with a reason,
//! nothing is lost, and duplicates carry the same `webhook-id`. It prints what
//! it injected and what it counted, and exits non-zero if any scenario fails.
//!
//! `make faults` (also run by `make test`) or `make faults SCENARIOS=kill_stages`.
//! Scenarios that stop the broker get a private one (`deploy/dev/kafka.sh`
//! with its own state directory), those that kill brokers a three-broker
//! cluster of their own (`kafka.sh cluster`, [`cluster`]); the rest use the
//! shared test broker (`HOOKLINE_TEST_BROKERS`). Random choices come from
//! `--seed` (printed, so a failing run can be repeated).

mod chains;
mod cluster;
mod dispatcher;
mod ledger;
mod load;
mod scenarios;

use std::{path::PathBuf, process::Stdio, time::Instant};

use anyhow::{bail, Context};
use clap::Parser;
use rand::{rngs::StdRng, SeedableRng};

use crate::scenarios::Report;

/// Fault scenarios of the hookline pipeline on real Kafka.
#[derive(Debug, Parser)]
#[command(name = "hookline-faults")]
struct Cli {
    /// Scenarios to run, in order (default: all but the opt-in measurements).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(scenarios::ALL))]
    scenarios: Vec<String>,

    /// Seed of every random choice (kill moments, down times); random if unset.
    #[arg(long, env = "HOOKLINE_FAULTS_SEED")]
    seed: Option<u64>,

    /// Internal: run the scenarios in this process against the broker in
    /// HOOKLINE_TEST_BROKERS, which the parent started for them alone.
    #[arg(long, hide = true)]
    private_broker_child: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let seed = cli.seed.unwrap_or_else(rand::random);
    let names: Vec<String> = if cli.scenarios.is_empty() {
        scenarios::ALL
            .iter()
            .filter(|s| !scenarios::OPT_IN.contains(s))
            .map(|s| (*s).to_owned())
            .collect()
    } else {
        cli.scenarios
    };
    if cli.private_broker_child {
        return run_here(&names, seed, true).await;
    }
    eprintln!(
        "hookline-faults: scenarios {} with seed {seed} (repeat with --seed {seed})",
        names.join(", ")
    );
    let mut failed = Vec::new();
    let mut i = 0;
    while i < names.len() {
        // Consecutive cluster scenarios share one cluster.
        let batch = names[i..]
            .iter()
            .take_while(|n| scenarios::CLUSTER.contains(&n.as_str()))
            .count();
        if batch > 0 {
            let names = &names[i..i + batch];
            if !cluster::run_with_cluster(names, seed).await? {
                failed.push(names.join(" or "));
            }
            i += batch;
            continue;
        }
        let name = &names[i];
        i += 1;
        let ok = if scenarios::PRIVATE_BROKER.contains(&name.as_str()) {
            run_with_private_broker(name, seed).await?
        } else {
            run_here(std::slice::from_ref(name), seed, false)
                .await
                .is_ok()
        };
        if !ok {
            failed.push(name.clone());
        }
    }
    if !failed.is_empty() {
        bail!("fault scenarios failed: {}", failed.join(", "));
    }
    eprintln!("hookline-faults: all {} scenarios passed", names.len());
    Ok(())
}

/// Runs scenarios in this process, printing each report; an error if any failed.
async fn run_here(names: &[String], seed: u64, private_broker: bool) -> anyhow::Result<()> {
    let mut failed = 0;
    for name in names {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut report = Report::new(
            scenarios::ALL
                .iter()
                .find(|s| **s == name)
                .copied()
                .context("unknown scenario")?,
        );
        eprintln!(
            "hookline-faults: {name} on Kafka at {} ...",
            hookline_testkit::brokers()
        );
        let started = Instant::now();
        let result = tokio::select! {
            result = run_one(name, &mut report, &mut rng, private_broker) => result,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; its stages were killed")),
        };
        print_report(
            &report,
            started.elapsed().as_secs_f64(),
            result.as_ref().err(),
        );
        if result.is_err() {
            failed += 1;
        }
    }
    if failed > 0 {
        bail!("{failed} scenario(s) failed");
    }
    Ok(())
}

async fn run_one(
    name: &str,
    report: &mut Report,
    rng: &mut StdRng,
    private_broker: bool,
) -> anyhow::Result<()> {
    match name {
        "kill_stages" => scenarios::kill_stages::run(report, rng).await,
        "kill_dispatcher_retrying" => scenarios::kill_dispatcher_retrying::run(report, rng).await,
        "kill_dispatcher_steady" => scenarios::kill_dispatcher_steady::run(report, rng).await,
        "rolling_restart" => scenarios::rolling_restart::run(report, rng).await,
        "hostile_endpoints" => scenarios::hostile_endpoints::run(report, rng).await,
        "bad_input" => scenarios::bad_input::run(report, rng).await,
        "secured" => scenarios::secured::run(report, rng).await,
        "acl_missing" => scenarios::acl_missing::run(report, rng).await,
        "broker_restart" if private_broker => scenarios::broker_restart::run(report, rng).await,
        "broker_restart" => bail!("broker_restart stops its broker: it runs only on a private one"),
        "breaker_open_crash" if private_broker => {
            scenarios::breaker_open_crash::run(report, rng).await
        }
        "breaker_open_crash" => {
            bail!("breaker_open_crash stops its broker: it runs only on a private one")
        }
        "cluster_leader_kill" => scenarios::cluster_leader_kill::run(report, rng).await,
        "cluster_coordinator_kill" => scenarios::cluster_coordinator_kill::run(report, rng).await,
        "cluster_zombie" => scenarios::cluster_zombie::run(report, rng).await,
        "cluster_rolling" => scenarios::cluster_rolling::run(report, rng).await,
        "cluster_isr" => scenarios::cluster_isr::run(report, rng).await,
        other => bail!("unknown scenario {other}"),
    }
}

fn print_report(report: &Report, secs: f64, error: Option<&anyhow::Error>) {
    println!(
        "\n== {} — {:.0} s — {}",
        report.scenario,
        secs,
        if error.is_some() { "FAILED" } else { "passed" }
    );
    for line in &report.injected {
        println!("   injected: {line}");
    }
    for line in &report.counted {
        println!("   counted:  {line}");
    }
    if let Some(e) = error {
        println!("   error:    {e:#}");
    }
}

/// Starts a broker of its own (kafka.sh with a private state directory), runs
/// `name` in a child process pointed at it, and removes the broker again.
async fn run_with_private_broker(name: &str, seed: u64) -> anyhow::Result<bool> {
    let state = hookline_testkit::kafka::repo_root()
        .join(".cache")
        .join(format!("kafka-faults-{}", std::process::id()));
    let script = hookline_testkit::kafka::repo_root().join("deploy/dev/kafka.sh");
    let kafka_sh = |cmd: &'static str| {
        let script = script.clone();
        let state = state.clone();
        async move {
            let out = tokio::process::Command::new("bash")
                .arg(&script)
                .arg(cmd)
                .env("HOOKLINE_KAFKA_STATE", &state)
                .stderr(Stdio::inherit())
                .output()
                .await
                .with_context(|| format!("running {} {cmd}", script.display()))?;
            if !out.status.success() {
                bail!("{} {cmd} failed ({})", script.display(), out.status);
            }
            anyhow::Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }
    };
    eprintln!(
        "hookline-faults: starting a private broker for {name} in {}",
        state.display()
    );
    let bootstrap = kafka_sh("up").await?;
    let exe: PathBuf = std::env::current_exe().context("locating hookline-faults")?;
    let status = tokio::process::Command::new(exe)
        .args(["--private-broker-child", "--seed", &seed.to_string(), name])
        .env("HOOKLINE_TEST_BROKERS", &bootstrap)
        .env("HOOKLINE_KAFKA_STATE", &state)
        .kill_on_drop(true)
        .status()
        .await;
    kafka_sh("down").await?;
    Ok(status.context("running the scenario process")?.success())
}
