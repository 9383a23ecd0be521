//! The shared real Kafka broker. `HOOKLINE_TEST_BROKERS` wins when set (the
//! Makefile and CI start one broker for the whole run); otherwise the first
//! test in a process starts it through `deploy/dev/kafka.sh up`, which is
//! idempotent and locked, so every test binary of a run reuses one broker.
//! A broker that cannot be started fails the test: it never skips.

use std::{
    path::PathBuf,
    process::Command,
    sync::{
        atomic::{AtomicU64, Ordering},
        OnceLock,
    },
    time::Duration,
};

use anyhow::{bail, Context};
use rdkafka::{
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::StreamConsumer,
    producer::FutureProducer,
    ClientConfig,
};

static BROKERS: OnceLock<String> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The bootstrap address of the shared test broker, starting it if needed.
///
/// Panics with the script's output when no broker can be had: a Kafka test
/// must fail, not skip, when the broker is missing.
pub fn brokers() -> String {
    BROKERS
        .get_or_init(|| match start_or_find_broker() {
            Ok(b) => b,
            Err(e) => panic!("no Kafka broker for the tests: {e:#}"),
        })
        .clone()
}

fn start_or_find_broker() -> anyhow::Result<String> {
    if let Ok(b) = std::env::var("HOOKLINE_TEST_BROKERS") {
        if !b.trim().is_empty() {
            return Ok(b.trim().to_owned());
        }
    }
    let script = repo_root().join("deploy/dev/kafka.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("up")
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} up failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8(out.stdout).context("script printed non-UTF-8")?;
    let bootstrap = stdout.lines().last().unwrap_or_default().trim().to_owned();
    if bootstrap.is_empty() {
        bail!("{} up printed no bootstrap address", script.display());
    }
    Ok(bootstrap)
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// A name unique to this test run, process and call: `t-<base>-<pid>-<n>-<rand>`.
pub fn unique_name(base: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let rand = uuid::Uuid::new_v4().simple().to_string();
    format!("t-{base}-{}-{n}-{}", std::process::id(), &rand[..8])
}

/// A client config pointing at the test broker.
pub fn client_config() -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers());
    c
}

/// Creates topics (name, partitions) with replication 1 and optional configs,
/// waiting until they exist.
pub async fn create_topics(topics: &[(&str, i32)], configs: &[(&str, &str)]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        client_config().create().context("creating admin client")?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(name, partitions)| {
            configs.iter().fold(
                NewTopic::new(name, *partitions, TopicReplication::Fixed(1)),
                |t, (k, v)| t.set(k, v),
            )
        })
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin
        .create_topics(&new, &opts)
        .await
        .context("create_topics")?
    {
        match result {
            Ok(_) => {}
            Err((name, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {
                tracing::debug!(%name, "topic already exists");
            }
            Err((name, code)) => bail!("creating topic {name}: {code}"),
        }
    }
    Ok(())
}

/// An idempotent producer on the test broker.
pub fn producer() -> FutureProducer {
    client_config()
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("creating test producer")
}

/// A `read_committed` consumer in a fresh group, reading from the beginning.
pub fn consumer(group: &str) -> StreamConsumer {
    client_config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .expect("creating test consumer")
}
