//! The three-broker cluster the `cluster_*` scenarios run on
//! (`deploy/dev/kafka.sh cluster`, deploy/dev/README.md#cluster-three-brokers-and-a-controller):
//! one KRaft controller and brokers 1..3, replication factor 3 and
//! `min.insync.replicas` 2 for every topic. `hookline-faults` starts one for
//! the consecutive cluster scenarios of a run, in a state directory of its
//! own, runs them in a child process pointed at it (`HOOKLINE_TEST_BROKERS`,
//! `HOOKLINE_TEST_REPLICATION=3`, `HOOKLINE_KAFKA_CLUSTER_STATE`), and removes
//! it again. Its ports are `kafka.sh`'s (`HOOKLINE_KAFKA_CLUSTER_PORT`, inherited):
//! one cluster per machine and port base.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Instant,
};

use anyhow::{bail, Context};

/// What every state directory of a harness cluster is named after: a
/// scenario refuses to kill brokers of any other cluster.
const STATE_MARK: &str = "kafka-cluster-faults-";

/// Runs `deploy/dev/kafka.sh cluster ARGS` on the harness's cluster (the
/// state directory comes from `HOOKLINE_KAFKA_CLUSTER_STATE`, set by the
/// parent); its stdout, trimmed. The script's log goes to stderr.
pub async fn kafka_sh(args: &[&str]) -> anyhow::Result<String> {
    kafka_sh_in(None, args).await
}

/// [`kafka_sh`] on the cluster in `state`, or the inherited one.
async fn kafka_sh_in(state: Option<&Path>, args: &[&str]) -> anyhow::Result<String> {
    let script = hookline_testkit::kafka::repo_root().join("deploy/dev/kafka.sh");
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg(&script).arg("cluster").args(args);
    if let Some(state) = state {
        cmd.env("HOOKLINE_KAFKA_CLUSTER_STATE", state);
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .await
        .with_context(|| format!("running {} cluster", script.display()))?;
    if !out.status.success() {
        bail!(
            "kafka.sh cluster {} failed ({})",
            args.join(" "),
            out.status
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The node id (= broker number) `kafka.sh cluster leader|coordinator ...` prints.
pub async fn node(args: &[&str]) -> anyhow::Result<u32> {
    let out = kafka_sh(args).await?;
    out.parse()
        .with_context(|| format!("kafka.sh cluster {} printed {out:?}", args.join(" ")))
}

/// Fails unless this process runs on a cluster `hookline-faults` started
/// for it (never on someone's own cluster, whose brokers it would kill).
pub fn ensure_harness_cluster(scenario: &str) -> anyhow::Result<()> {
    let state = std::env::var("HOOKLINE_KAFKA_CLUSTER_STATE").unwrap_or_default();
    let replication = std::env::var("HOOKLINE_TEST_REPLICATION").unwrap_or_default();
    if !state.contains(STATE_MARK) || replication.trim() != "3" {
        bail!("{scenario} kills brokers: it runs only on the three-broker cluster hookline-faults starts for it");
    }
    Ok(())
}

/// Starts a cluster of its own (`kafka.sh cluster up` with a private state
/// directory), runs `names` in a child process pointed at it, and removes
/// the cluster again (keeping each node's `server.log` beside the state
/// directory with `HOOKLINE_KEEP_DIRS`). Whether every scenario passed.
pub async fn run_with_cluster(names: &[String], seed: u64) -> anyhow::Result<bool> {
    let state = hookline_testkit::kafka::repo_root()
        .join(".cache")
        .join(format!("{STATE_MARK}{}", std::process::id()));
    eprintln!(
        "hookline-faults: starting a three-broker cluster for {} in {}",
        names.join(", "),
        state.display()
    );
    let started = Instant::now();
    let bootstrap = match kafka_sh_in(Some(&state), &["up"]).await {
        Ok(b) => b,
        Err(e) => {
            // `up` keeps what failed in <state>.failed; nothing is left running.
            eprintln!("hookline-faults: {e:#}");
            return Ok(false);
        }
    };
    eprintln!(
        "hookline-faults: cluster {bootstrap} up in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let exe: PathBuf = std::env::current_exe().context("locating hookline-faults")?;
    let status = tokio::process::Command::new(exe)
        .arg("--private-broker-child")
        .args(["--seed", &seed.to_string()])
        .args(names)
        .env("HOOKLINE_TEST_BROKERS", &bootstrap)
        .env("HOOKLINE_TEST_REPLICATION", "3")
        .env("HOOKLINE_KAFKA_CLUSTER_STATE", &state)
        .kill_on_drop(true)
        .status()
        .await;
    if std::env::var_os("HOOKLINE_KEEP_DIRS").is_some() {
        keep_logs(&state);
    }
    let stopping = Instant::now();
    kafka_sh_in(Some(&state), &["down"]).await?;
    // `down` removes the state directory but leaves kafka.sh's lock file.
    let _ = std::fs::remove_file(state.with_extension("lock"));
    eprintln!(
        "hookline-faults: cluster down in {:.1} s",
        stopping.elapsed().as_secs_f64()
    );
    Ok(status.context("running the scenario process")?.success())
}

/// Copies each node's `server.log` to `<state>.logs/` (`down` deletes the state).
fn keep_logs(state: &Path) {
    let keep = state.with_extension("logs");
    for node in ["controller", "broker-1", "broker-2", "broker-3"] {
        let from = state.join(node).join("server.log");
        let to = keep.join(format!("{node}.log"));
        let copied = std::fs::create_dir_all(&keep).and_then(|()| std::fs::copy(&from, &to));
        if let Err(e) = copied {
            eprintln!("hookline-faults: keeping {}: {e}", from.display());
        }
    }
    eprintln!(
        "hookline-faults: the cluster's server logs are kept in {}",
        keep.display()
    );
}
