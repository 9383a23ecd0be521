//! `secured`: the pipeline end to end on the broker's secured listeners
//! (`kafka.sh`: `StandardAuthorizer`, `allow.everyone.if.no.acl.found=false`),
//! each stage its own principal holding exactly the ACLs `hookline-fanout
//! acls` prints for it, created with Kafka's kafka-acls tool from those very
//! lines: fanout and dispatcher over SASL_SSL (SCRAM-SHA-512, the password
//! read from a file with `-X sasl.password=@file`), the DLQ sink over mTLS
//! (its client certificate is its principal). Nothing may be lost, and no
//! password may appear in a stage's log, its metrics, a binary's `--help`
//! (with the password in HOOKLINE_KAFKA_CONFIG) or a stage's command line.
//!
//! The secured environment comes from `kafka.sh secure-env` through
//! `with-kafka.sh`; without it the scenario fails, it never skips.

use std::{path::PathBuf, process::Stdio};

use anyhow::{bail, Context};
use hookline_testkit::{kafka, pipeline::Pipeline, stage::bin_dir};
use rand::rngs::StdRng;

use super::{finish, spec, Report, Workload, MAX_ATTEMPTS};
use crate::load;

const EVENTS: u64 = 600;
const RATE: f64 = 150.0;
/// kafka-acls runs (a JVM each) at once: the machine has few cores.
const ACL_PARALLEL: usize = 3;

/// The secured listeners of the test broker (`kafka.sh secure-env`).
#[derive(Debug)]
pub(super) struct SecureEnv {
    pub(super) sasl_brokers: String,
    pub(super) mtls_brokers: String,
    password_dir: PathBuf,
    ca: String,
    pub(super) mtls_user: String,
    mtls_cert: String,
    mtls_key: String,
    pub(super) kafka_sh: String,
}

impl SecureEnv {
    pub(super) fn from_env() -> anyhow::Result<Self> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .with_context(|| {
                    format!(
                        "{name} is not set: run the fault suite under deploy/dev/with-kafka.sh \
                     (make faults), which exports the secured listeners of `kafka.sh secure-env`"
                    )
                })
        };
        Ok(Self {
            sasl_brokers: var("HOOKLINE_TEST_SASL_BROKERS")?,
            mtls_brokers: var("HOOKLINE_TEST_MTLS_BROKERS")?,
            password_dir: PathBuf::from(var("HOOKLINE_TEST_SASL_PASSWORD_DIR")?),
            ca: var("HOOKLINE_TEST_TLS_CA")?,
            mtls_user: var("HOOKLINE_TEST_MTLS_USER")?,
            mtls_cert: var("HOOKLINE_TEST_MTLS_CERT")?,
            mtls_key: var("HOOKLINE_TEST_MTLS_KEY")?,
            kafka_sh: var("HOOKLINE_TEST_KAFKA_SH")?,
        })
    }

    fn password_file(&self, user: &str) -> PathBuf {
        self.password_dir.join(format!("{user}.password"))
    }

    fn password(&self, user: &str) -> anyhow::Result<String> {
        let path = self.password_file(user);
        Ok(std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim_end()
            .to_owned())
    }

    /// `-X` flags of a SCRAM user: the password only as `@file`.
    pub(super) fn sasl_args(&self, user: &str) -> Vec<String> {
        [
            "security.protocol=SASL_SSL".to_owned(),
            "sasl.mechanism=SCRAM-SHA-512".to_owned(),
            format!("sasl.username={user}"),
            format!("sasl.password=@{}", self.password_file(user).display()),
            format!("ssl.ca.location={}", self.ca),
        ]
        .into_iter()
        .flat_map(|kv| ["-X".to_owned(), kv])
        .collect()
    }

    /// `-X` flags of the mTLS client certificate.
    pub(super) fn mtls_args(&self) -> Vec<String> {
        [
            "security.protocol=SSL".to_owned(),
            format!("ssl.ca.location={}", self.ca),
            format!("ssl.certificate.location={}", self.mtls_cert),
            format!("ssl.key.location={}", self.mtls_key),
        ]
        .into_iter()
        .flat_map(|kv| ["-X".to_owned(), kv])
        .collect()
    }
}

/// The pipeline spec of a secured scenario: each stage on its listener with
/// its credentials.
pub(super) fn secured_spec(
    scenario: &'static str,
    env: &SecureEnv,
) -> hookline_testkit::pipeline::Spec {
    let mut spec = spec(scenario);
    spec.dispatcher_args
        .extend(["--max-attempts", MAX_ATTEMPTS].map(str::to_owned));
    spec.fanout_args.extend(env.sasl_args("fanout"));
    spec.dispatcher_args.extend(env.sasl_args("dispatcher"));
    spec.sink_args.extend(env.mtls_args());
    spec.brokers.insert("fanout", env.sasl_brokers.clone());
    spec.brokers.insert("dispatcher", env.sasl_brokers.clone());
    spec.brokers.insert("dlq-sink", env.mtls_brokers.clone());
    spec
}

/// Each stage's principal: SCRAM users for fanout and dispatcher, the client
/// certificate's for the DLQ sink.
pub(super) fn principals(env: &SecureEnv) -> [(&'static str, String); 3] {
    [
        ("fanout", "User:fanout".to_owned()),
        ("dispatcher", "User:dispatcher".to_owned()),
        ("dlq-sink", format!("User:{}", env.mtls_user)),
    ]
}

pub async fn run(r: &mut Report, _rng: &mut StdRng) -> anyhow::Result<()> {
    let env = SecureEnv::from_env()?;
    let mut p = Pipeline::create(secured_spec("secured", &env)).await?;
    let principals = principals(&env);
    let granted = grant(&env, &p, &principals).await?.len();
    r.inject(format!(
        "{granted} ACLs from `hookline-fanout acls --format kafka-acls` for {}",
        principals
            .iter()
            .map(|(s, who)| format!("{s} as {who}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let work = Workload::install(&mut p).await?;
    p.start().await?;
    r.inject(format!(
        "fanout and dispatcher over SASL_SSL ({}), dlq-sink over mTLS ({})",
        env.sasl_brokers, env.mtls_brokers
    ));
    let load = load::start(&mut p, &work.tenants, EVENTS, RATE)?;
    r.inject(format!(
        "load: {EVENTS} events at {RATE}/s over 4 tenants, {} expected deliveries",
        p.expected()
    ));
    load.finish().await?;
    finish(&mut p, r, &work, EVENTS).await?;
    let searched = no_password_leaks(&env, &mut p).await?;
    r.count(format!("no password in {searched}"));
    p.stop().await?;
    Ok(())
}

/// Creates, with kafka-acls over the super user's plain listener, exactly the
/// ACLs `hookline-fanout acls` prints for these stages and principals under
/// the pipeline's names. Returns the lines it ran (kafka-acls arguments).
pub(super) async fn grant(
    env: &SecureEnv,
    p: &Pipeline,
    principals: &[(&str, String)],
) -> anyhow::Result<Vec<Vec<String>>> {
    let prefix = p.topics.prefix();
    let tiers: Vec<&str> = p.topics.retries().map(|(tier, _)| tier).collect();
    let mut args: Vec<String> = [
        "--brokers",
        &kafka::brokers(),
        "--topic-prefix",
        prefix,
        "acls",
        "--format",
        "kafka-acls",
        "--fanout-group",
        &p.groups.fanout,
        // The pipeline's fanout runs under one fixed transactional id.
        "--fanout-transactional-prefix",
        &format!("{prefix}fanout-txn"),
        "--dispatcher-group",
        &format!("{prefix}dispatcher"),
        "--dlq-sink-group",
        &format!("{prefix}dlq-sink"),
        "--retry-tiers",
        &tiers.join(","),
    ]
    .map(str::to_owned)
    .to_vec();
    for (stage, principal) in principals {
        args.extend([
            "--stage".to_owned(),
            (*stage).to_owned(),
            "--principal".to_owned(),
            format!("{stage}={principal}"),
        ]);
    }
    let out = tokio::process::Command::new(bin_dir()?.join("hookline-fanout"))
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .await
        .context("running hookline-fanout acls")?;
    if !out.status.success() {
        bail!("hookline-fanout acls failed ({})", out.status);
    }
    let text = String::from_utf8(out.stdout)?;
    let lines: Vec<Vec<String>> = text
        .lines()
        .map(|line| {
            let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
            if words.first().map(String::as_str) != Some("kafka-acls.sh")
                || line.contains(['\'', '"'])
            {
                bail!("not a plain kafka-acls.sh line: {line}");
            }
            Ok(words[1..].to_vec())
        })
        .collect::<anyhow::Result<_>>()?;
    if lines.is_empty() {
        bail!("hookline-fanout acls printed nothing");
    }
    run_acls(env, &lines).await?;
    Ok(lines)
}

/// Runs kafka-acls once per argument list, a few at a time.
pub(super) async fn run_acls(env: &SecureEnv, lines: &[Vec<String>]) -> anyhow::Result<()> {
    for chunk in lines.chunks(ACL_PARALLEL) {
        // Spawned together, so they run at once; then awaited in turn.
        let children: Vec<_> = chunk
            .iter()
            .map(|words| {
                tokio::process::Command::new("bash")
                    .arg(&env.kafka_sh)
                    .arg("acls")
                    .args(words)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("running kafka.sh acls")
            })
            .collect::<anyhow::Result<_>>()?;
        for (words, child) in chunk.iter().zip(children) {
            let out = child.wait_with_output().await?;
            if !out.status.success() {
                bail!(
                    "kafka-acls {} failed: {}",
                    words.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    Ok(())
}

/// Fails if a SCRAM password appears in a stage's log, its metrics, its
/// command line, or a binary's `--help` run with the password in
/// HOOKLINE_KAFKA_CONFIG. Returns what it searched.
async fn no_password_leaks(env: &SecureEnv, p: &mut Pipeline) -> anyhow::Result<String> {
    let secrets: Vec<(String, String)> = ["fanout", "dispatcher"]
        .into_iter()
        .map(|user| Ok((user.to_owned(), env.password(user)?)))
        .collect::<anyhow::Result<_>>()?;
    let mut haystacks: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(p.dir())? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") {
            haystacks.push((path.display().to_string(), std::fs::read_to_string(&path)?));
        }
    }
    let logs = haystacks.len();
    for stage in p.stages_mut() {
        haystacks.push((format!("{} /metrics", stage.name), stage.metrics().await?));
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", stage.pid()))
            .with_context(|| format!("reading the command line of {}", stage.name))?;
        haystacks.push((
            format!("{} /proc/{}/cmdline", stage.name, stage.pid()),
            String::from_utf8_lossy(&cmdline).replace('\0', " "),
        ));
    }
    let (user, password) = &secrets[0];
    for bin in [
        "hookline-fanout",
        "hookline-dispatcher",
        "hookline-dlq-sink",
    ] {
        let out = tokio::process::Command::new(bin_dir()?.join(bin))
            .arg("--help")
            .env(
                "HOOKLINE_KAFKA_CONFIG",
                format!("sasl.username={user};sasl.password={password}"),
            )
            .output()
            .await
            .with_context(|| format!("running {bin} --help"))?;
        haystacks.push((
            format!("{bin} --help"),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ));
    }
    if logs < 3 {
        bail!("found {logs} stage logs in {}, wanted 3", p.dir().display());
    }
    let mut leaks = Vec::new();
    for (what, text) in &haystacks {
        for (user, password) in &secrets {
            if text.contains(password.as_str()) {
                leaks.push(format!("{user}'s password in {what}"));
            }
        }
    }
    if !leaks.is_empty() {
        bail!("passwords leaked: {}", leaks.join("; "));
    }
    Ok(format!(
        "{} places: {logs} stage logs, each stage's /metrics and command line, 3 --help outputs",
        haystacks.len()
    ))
}
