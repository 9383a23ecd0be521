//! The dispatcher of a scenario that kills it on purpose, started by the
//! scenario rather than by the pipeline, for two reasons: its binary can be
//! another build (`HOOKLINE_FAULTS_DISPATCHER_BIN`, e.g. one saved from before
//! a change, so a measurement can be taken of both), and each incarnation's
//! `--transactional-id` is chosen by the scenario (the same id fences the
//! predecessor at once; another id leaves its open transaction to time out).
//! Its flags are the pipeline's own dispatcher flags (`Pipeline::start_dispatcher`).

use std::path::PathBuf;

use anyhow::{bail, Context};
use hookline_testkit::{
    kafka,
    pipeline::{Pipeline, Spec},
    stage::Stage,
};

/// Environment variable naming the dispatcher binary to run instead of the
/// harness's own `hookline-dispatcher`.
pub const BIN_ENV: &str = "HOOKLINE_FAULTS_DISPATCHER_BIN";

/// A scenario-owned dispatcher process.
#[derive(Debug)]
pub struct Dispatcher {
    stage: Stage,
    bin: PathBuf,
    /// Every flag but `--transactional-id`.
    base: Vec<String>,
    /// Whether the binary knows `--transactional-id` (a pre-transaction
    /// build does not: it is then started without it).
    transactional: bool,
    /// The log of the current incarnation.
    log: PathBuf,
    pub kills: u32,
}

/// The binary to run: `HOOKLINE_FAULTS_DISPATCHER_BIN`, else the harness's own.
pub fn binary() -> anyhow::Result<PathBuf> {
    let bin = match std::env::var_os(BIN_ENV) {
        Some(path) => PathBuf::from(path),
        None => hookline_testkit::stage::bin_dir()?.join("hookline-dispatcher"),
    };
    if !bin.is_file() {
        bail!(
            "{} is missing (set by {BIN_ENV}, or build hookline-dispatcher in the harness's profile)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Whether `bin --help` lists `flag`.
async fn knows_flag(bin: &PathBuf, flag: &str) -> anyhow::Result<bool> {
    let out = tokio::process::Command::new(bin)
        .arg("--help")
        .output()
        .await
        .with_context(|| format!("running {} --help", bin.display()))?;
    Ok(String::from_utf8_lossy(&out.stdout).contains(flag))
}

impl Dispatcher {
    /// Starts the dispatcher of `p` (built from `spec`, the one `p` was
    /// created with) under `txn_id`, logging to `<name>.log` in the scenario
    /// directory, and waits until it is ready.
    pub async fn start(
        p: &Pipeline,
        spec: &Spec,
        name: &str,
        txn_id: &str,
    ) -> anyhow::Result<Self> {
        let bin = binary()?;
        let transactional = knows_flag(&bin, "--transactional-id").await?;
        let mut base: Vec<String> = [
            "--brokers",
            &kafka::brokers(),
            "--topic-prefix",
            p.topics.prefix(),
            "--http-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--log",
            &spec.log_filter,
            "--group-id",
            &format!("{}dispatcher", p.topics.prefix()),
            "--secrets-dir",
            &p.dir().join("secrets").display().to_string(),
            "--egress-allow-http",
            "--egress-allow-cidr",
            "127.0.0.0/8",
        ]
        .map(str::to_owned)
        .to_vec();
        if !spec.tiers.is_empty() {
            let ladder: Vec<String> = spec
                .tiers
                .iter()
                .map(|(n, d)| format!("{n}={}ms", d.as_millis()))
                .collect();
            base.extend(["--retry-tiers".to_owned(), ladder.join(",")]);
        }
        base.extend(spec.dispatcher_args.iter().cloned());
        let log = p.dir().join(format!("{name}.log"));
        let args = args_with(&base, transactional, txn_id);
        let stage = Stage::start_exe("dispatcher", bin.clone(), &args, &log).await?;
        Ok(Self {
            stage,
            bin,
            base,
            transactional,
            log,
            kills: 0,
        })
    }

    /// Whether this binary runs transactionally (knows `--transactional-id`).
    pub fn transactional(&self) -> bool {
        self.transactional
    }

    pub fn bin(&self) -> &PathBuf {
        &self.bin
    }

    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    /// SIGKILL, waited for.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        self.stage.kill().await?;
        self.kills += 1;
        Ok(())
    }

    /// Starts the killed dispatcher again with the same flags (and id).
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stage.restart().await
    }

    /// Starts the killed dispatcher again under another transactional id, as
    /// a replacement replica would be, logging to `<name>.log`.
    pub async fn restart_as(&mut self, name: &str, txn_id: &str) -> anyhow::Result<()> {
        if self.stage.is_running() {
            bail!("the dispatcher is still running (pid {})", self.stage.pid());
        }
        self.log = self.log.with_file_name(format!("{name}.log"));
        let args = args_with(&self.base, self.transactional, txn_id);
        self.stage = Stage::start_exe("dispatcher", self.bin.clone(), &args, &self.log).await?;
        Ok(())
    }

    /// Fails if the current incarnation exited on its own.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if !self.stage.is_running() {
            bail!(
                "the dispatcher exited on its own\n{}",
                self.stage.log_tail()
            );
        }
        Ok(())
    }

    /// SIGTERM and a clean exit.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stage.stop().await.map(drop)
    }
}

fn args_with(base: &[String], transactional: bool, txn_id: &str) -> Vec<String> {
    let mut args = base.to_vec();
    if transactional {
        args.extend(["--transactional-id".to_owned(), txn_id.to_owned()]);
    }
    args
}
