//! Shared set-up of the dispatcher integration tests: unique topics on the real
//! broker, a secrets directory, a local receiver, an in-process dispatcher, and
//! helpers to publish subscriptions and deliveries.

#![allow(dead_code, clippy::unwrap_used)]

use std::time::{Duration, SystemTime};

use clap::Parser;
use hookline_envelope::{decode, encode, DeadLetter, Delivery, Subscription, Topics};
use hookline_testkit::{kafka, process::KillOnDrop, receiver::Receiver, records, stage::Stage};
use rdkafka::{
    message::Message,
    producer::{FutureProducer, FutureRecord},
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    config: hookline_dispatcher::Config,
}

/// Secrets every test environment provides: `two` holds two keys (a rotation).
pub const SECRETS: &[(&str, &str)] = &[
    ("one", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"),
    (
        "two",
        "# rotating: new key first, old key until receivers moved\nwhsec_bmV3LWtleS1uZXcta2V5LW5ldy1rZXk=\nwhsec_b2xkLWtleS1vbGQta2V5LW9sZC1rZXk=\n",
    ),
];

/// One test's topics, group, secrets and receiver.
pub struct Env {
    pub prefix: String,
    pub topics: Topics,
    pub group: String,
    pub producer: FutureProducer,
    pub secrets: tempfile::TempDir,
    pub receiver: Receiver,
    /// `--retry-tiers` for a ladder of this test's own, if any.
    pub retry_tiers: Option<String>,
}

impl Env {
    /// Every hookline topic with `partitions` partitions (subscriptions compacted).
    pub async fn new(name: &str, partitions: i32) -> Self {
        Self::with_ladder(name, partitions, &[]).await
    }

    /// Like [`new`](Self::new), with retry tiers `(name, delay)` (the default
    /// ladder when empty), passed to every dispatcher as `--retry-tiers`.
    pub async fn with_ladder(name: &str, partitions: i32, tiers: &[(&str, &str)]) -> Self {
        // The in-process dispatcher's logs, so a failure in CI shows what the
        // engine was doing.
        hookline_testkit::logs::init();
        let prefix = format!("{}.", kafka::unique_name(name));
        let topics = if tiers.is_empty() {
            Topics::with_prefix(&prefix).unwrap()
        } else {
            let names: Vec<&str> = tiers.iter().map(|(n, _)| *n).collect();
            Topics::new(&prefix, &names).unwrap()
        };
        let retry_tiers = (!tiers.is_empty()).then(|| {
            tiers
                .iter()
                .map(|(n, d)| format!("{n}={d}"))
                .collect::<Vec<_>>()
                .join(",")
        });
        let plain: Vec<(&str, i32)> = topics
            .all()
            .into_iter()
            .filter(|t| !topics.tables().contains(t))
            .map(|t| (t, partitions))
            .collect();
        kafka::create_topics(&plain, &[]).await.unwrap();
        kafka::create_topics(
            &topics.tables().map(|t| (t, 1)),
            &[("cleanup.policy", "compact")],
        )
        .await
        .unwrap();
        let secrets = tempfile::tempdir().unwrap();
        for (name, content) in SECRETS {
            std::fs::write(secrets.path().join(name), content).unwrap();
        }
        Self {
            group: format!("{prefix}dispatcher"),
            prefix,
            topics,
            producer: kafka::producer(),
            secrets,
            receiver: Receiver::start().await.unwrap(),
            retry_tiers,
        }
    }

    /// Flags of a dispatcher for this environment, plus `extra`.
    pub fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "hookline-dispatcher",
            "--brokers",
            &kafka::brokers(),
            "--topic-prefix",
            &self.prefix,
            "--http-addr",
            "127.0.0.1:0",
            "--group-id",
            &self.group,
            "--secrets-dir",
            self.secrets.path().to_str().unwrap(),
            "--secrets-poll-interval",
            "1s",
            "--egress-allow-http",
            "--egress-allow-cidr",
            "127.0.0.0/8",
            "--request-timeout",
            "10s",
            "--shutdown-grace",
            "20s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(tiers) = &self.retry_tiers {
            args.extend(["--retry-tiers".to_owned(), tiers.clone()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Starts the real binary as a [`Stage`] (ready when this returns), with
    /// JSON logs in `log` so the harness finds its ops address.
    pub async fn spawn_stage(&self, extra: &[&str], log: &std::path::Path) -> Stage {
        self.spawn_stage_with(extra, log, true).await
    }

    /// [`spawn_stage`](Self::spawn_stage), waiting for `/readyz` only if `ready`.
    pub async fn spawn_stage_with(
        &self,
        extra: &[&str],
        log: &std::path::Path,
        ready: bool,
    ) -> Stage {
        let mut flags = vec![
            "--log-format",
            "json",
            "--log",
            "warn,hookline_runtime::ops=info",
        ];
        flags.extend_from_slice(extra);
        let args = self.args(&flags);
        let bin = env!("CARGO_BIN_EXE_hookline-dispatcher").into();
        if ready {
            Stage::start_exe("dispatcher", bin, &args[1..], log).await
        } else {
            Stage::launch_exe("dispatcher", bin, &args[1..], log).await
        }
        .unwrap()
    }

    /// Starts the real binary with this environment's flags and `extra`, its
    /// logs at `warn` on stderr, killed with SIGKILL (a crash) when dropped or
    /// by [`KillOnDrop::kill`]: for the tests that kill -9 a replica.
    pub fn spawn_killable(&self, extra: &[&str]) -> KillOnDrop {
        let args = self.args(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_hookline-dispatcher"))
            .args(&args[1..])
            .env("HOOKLINE_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start hookline-dispatcher")
            .into()
    }

    /// Starts a dispatcher in this process.
    pub fn start(&self, extra: &[&str]) -> Running {
        let config = Args::try_parse_from(self.args(extra)).unwrap().config;
        let stop = CancellationToken::new();
        let task = tokio::spawn(hookline_dispatcher::run(config, stop.clone()));
        Running { stop, task }
    }

    /// An enabled subscription of `tenant` posting to `path` on the receiver.
    pub fn subscription(
        &self,
        id: &str,
        tenant: &str,
        path: &str,
        secret_ref: &str,
    ) -> Subscription {
        Subscription {
            secret_ref: secret_ref.to_owned(),
            updated_at: now_ms(),
            ..hookline_testkit::records::subscription(id, tenant, &["*"], &self.receiver.url(path))
        }
    }

    pub async fn put(&self, sub: &Subscription) {
        self.producer
            .send(
                FutureRecord::to(self.topics.subscriptions())
                    .key(sub.subscription_id.as_bytes())
                    .payload(&encode(sub)),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }

    pub async fn delete(&self, id: &str) {
        self.producer
            .send(
                FutureRecord::<[u8], [u8]>::to(self.topics.subscriptions()).key(id.as_bytes()),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }

    /// Produces deliveries to `deliveries`, keyed by tenant, in order.
    pub async fn publish(&self, deliveries: &[Delivery]) {
        kafka::produce_many(
            &self.producer,
            self.topics.deliveries(),
            deliveries
                .iter()
                .map(|d| (d.tenant_id.as_bytes().to_vec(), encode(d))),
        )
        .await
        .unwrap();
    }

    /// Produces deliveries to `deliveries.strict`, keyed by tenant, in order.
    pub async fn publish_strict(&self, deliveries: &[Delivery]) {
        kafka::produce_many(
            &self.producer,
            self.topics.strict(),
            deliveries
                .iter()
                .map(|d| (d.tenant_id.as_bytes().to_vec(), encode(d))),
        )
        .await
        .unwrap();
    }

    /// Produces records to retry tier `tier` (an index into the ladder), keyed by tenant.
    pub async fn publish_to_tier(&self, tier: usize, deliveries: &[Delivery]) {
        let (_, topic) = self.topics.retries().nth(tier).unwrap();
        kafka::produce_many(
            &self.producer,
            topic,
            deliveries
                .iter()
                .map(|d| (d.tenant_id.as_bytes().to_vec(), encode(d))),
        )
        .await
        .unwrap();
    }

    /// Every record of retry tier `tier`, decoded.
    pub async fn tier_records(&self, tier: usize) -> Vec<Delivery> {
        let (_, topic) = self.topics.retries().nth(tier).unwrap();
        kafka::read_to_end(topic)
            .await
            .unwrap()
            .iter()
            .map(|m| decode(m.payload().unwrap()).unwrap())
            .collect()
    }

    /// Every dead letter, decoded.
    pub async fn dead_letters(&self) -> Vec<DeadLetter> {
        kafka::read_to_end(self.topics.dlq())
            .await
            .unwrap()
            .iter()
            .map(|m| decode(m.payload().unwrap()).unwrap())
            .collect()
    }

    /// Waits until the group has committed every record of `deliveries`.
    pub async fn committed_to_end(&self, within: Duration) {
        self.topic_committed_to_end(self.topics.deliveries(), within)
            .await;
    }

    /// Waits until the group has committed every record of `topic`.
    pub async fn topic_committed_to_end(&self, topic: &str, within: Duration) {
        kafka::wait_committed_to_end(&self.group, topic, within).await;
    }
}

/// A first-attempt delivery of event `n` for `sub`, with a JSON payload naming it.
pub fn delivery(sub: &Subscription, n: usize) -> Delivery {
    let event_id = format!("evt-{}-{n}", sub.subscription_id);
    records::delivery(sub, &event_id, now_ms())
        .payload(format!(r#"{{"event":"{event_id}","n":{n}}}"#).as_bytes())
        .build()
}

pub fn now_ms() -> i64 {
    hookline_core::epoch::millis(SystemTime::now())
}

/// An in-process dispatcher.
pub struct Running {
    pub stop: CancellationToken,
    pub task: JoinHandle<Result<(), hookline_dispatcher::DispatcherError>>,
}

impl Running {
    /// For failure messages: whether the dispatcher is still running, and if
    /// it is not, how it ended (an early error would explain a silent test).
    pub async fn state(self) -> String {
        if !self.task.is_finished() {
            self.stop.cancel();
            return match tokio::time::timeout(Duration::from_secs(40), self.task).await {
                Ok(Ok(Ok(()))) => "was running (then shut down cleanly)".to_owned(),
                Ok(Ok(Err(e))) => format!("was running; shutting down failed: {e}"),
                Ok(Err(e)) => format!("was running; its task failed: {e}"),
                Err(_) => "was running and did not shut down within 40 s".to_owned(),
            };
        }
        match self.task.await {
            Ok(Ok(())) => "had already returned Ok".to_owned(),
            Ok(Err(e)) => format!("had already failed: {e}"),
            Err(e) => format!("its task had already failed: {e}"),
        }
    }

    /// SIGTERM-equivalent: cancels and waits for a clean exit.
    pub async fn shutdown(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(40), self.task)
            .await
            .expect("dispatcher exits within 40 s of shutdown")
            .unwrap()
            .unwrap();
    }
}
