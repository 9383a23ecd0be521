//! Shared set-up of the dlq-sink integration tests: unique topics on the real broker, a
//! sink in-process or as the real binary, dead-letter builders and an archive reader.

#![allow(dead_code, clippy::unwrap_used)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use apache_avro::{from_value, Reader};
use clap::Parser;
use hookline_dlq_sink::row::ArchiveRow;
use hookline_envelope::{fixtures::DeliveryBuilder, DeadLetter, Topics};
use hookline_testkit::{kafka, process::KillOnDrop};
use rdkafka::{
    message::OwnedHeaders,
    producer::{FutureProducer, FutureRecord},
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    config: hookline_dlq_sink::Config,
}

/// One test's topics, group, archive directory and producer.
pub struct Env {
    pub prefix: String,
    pub topics: Topics,
    pub group: String,
    pub archive: tempfile::TempDir,
    pub producer: FutureProducer,
}

/// Coordinates of a Kafka record.
pub type Coords = (String, i32, i64);

impl Env {
    pub async fn new(name: &str) -> Self {
        // The in-process stages' logs, shown when a test fails.
        hookline_testkit::logs::init();
        let prefix = format!("{}.", kafka::unique_name(name));
        let topics = kafka::create_hookline_topics(&prefix).await.unwrap();
        Self {
            group: format!("{prefix}dlq-sink"),
            prefix,
            topics,
            archive: tempfile::tempdir().unwrap(),
            producer: kafka::producer(),
        }
    }

    pub fn archive_dir(&self) -> &Path {
        self.archive.path()
    }

    /// Flags of a sink for this environment, plus `extra`.
    pub fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "hookline-dlq-sink",
            "--brokers",
            &kafka::brokers(),
            "--topic-prefix",
            &self.prefix,
            "--group-id",
            &self.group,
            "--max-file-age",
            "300ms",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !extra.contains(&"--http-addr") {
            args.extend(["--http-addr".into(), "127.0.0.1:0".into()]);
        }
        if !extra.contains(&"--archive-url") {
            args.extend([
                "--archive-url".into(),
                self.archive_dir().display().to_string(),
            ]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Starts the sink in this process.
    pub fn start(&self, extra: &[&str]) -> Running {
        let config = Args::try_parse_from(self.args(extra)).unwrap().config;
        let stop = CancellationToken::new();
        let task = tokio::spawn(hookline_dlq_sink::run(config, stop.clone()));
        Running { stop, task }
    }

    /// Starts the real binary.
    pub fn spawn(&self, extra: &[&str]) -> KillOnDrop {
        self.spawn_with_env(extra, &[])
    }

    /// Starts the real binary with extra environment variables.
    pub fn spawn_with_env(&self, extra: &[&str], envs: &[(&str, &str)]) -> KillOnDrop {
        let args = self.args(extra);
        Command::new(env!("CARGO_BIN_EXE_hookline-dlq-sink"))
            .args(&args[1..])
            .env("HOOKLINE_LOG", "warn")
            .envs(envs.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start hookline-dlq-sink")
            .into()
    }

    /// Runs a subcommand of the real binary to completion: (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let mut all = args.to_vec();
        if !args.contains(&"--archive-url") {
            all.extend(["--archive-url", self.archive_dir().to_str().unwrap()]);
        }
        self.cli_with_env(&all, &[])
    }

    /// Runs a subcommand with extra environment variables; `args` name the archive.
    pub fn cli_with_env(&self, args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_hookline-dlq-sink"))
            .args(args)
            .args([
                "--brokers",
                &kafka::brokers(),
                "--topic-prefix",
                &self.prefix,
            ])
            .env("HOOKLINE_LOG", "warn")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("run hookline-dlq-sink");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Produces one record and returns its coordinates.
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
        headers: Option<OwnedHeaders>,
    ) -> Coords {
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).payload(value);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(h) = headers {
            record = record.headers(h);
        }
        let d = self
            .producer
            .send(record, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        (topic.to_owned(), d.partition, d.offset)
    }
}

/// A sink running in this process.
pub struct Running {
    pub stop: CancellationToken,
    pub task: JoinHandle<Result<(), hookline_dlq_sink::DlqSinkError>>,
}

impl Running {
    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("the sink stops within 60 s")
            .unwrap()
            .unwrap();
    }
}

/// A dead letter of `tenant`, numbered `n`, with every field set.
pub fn dead_letter(tenant: &str, n: usize, reason: &str) -> DeadLetter {
    let event_id = format!("evt-{tenant}-{n}");
    let subscription_id = format!("sub-{tenant}-{}", n % 2);
    let event_type = if n % 3 == 0 {
        "invoice.paid"
    } else {
        "order.created"
    };
    DeadLetter {
        delivery: DeliveryBuilder::for_event(&event_id, tenant, &subscription_id)
            .event_type(event_type)
            .at(1_795_990_000_100)
            .occurred_at(1_795_990_000_000)
            .due_at(1_795_995_000_000)
            .payload(format!(r#"{{"n":{n}}}"#).as_bytes())
            .attribute("traceparent", &format!("00-{n}-01"))
            .attempted(8, 1_795_990_000_200, 1_795_995_000_000, "http_503")
            .policy_version("ladder-v1")
            .build(),
        reason: reason.to_owned(),
        last_status: Some(503),
        dead_at: 1_795_995_000_500 + n as i64,
        policy_version: "ladder-v1".into(),
        detail: Some("503 from receiver".into()),
    }
}

/// Every `.avro` file under `dir`, relative path → rows.
pub fn read_archive(dir: &Path) -> BTreeMap<PathBuf, Vec<ArchiveRow>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "avro") {
                let bytes = std::fs::read(&path).unwrap();
                let rows: Vec<ArchiveRow> = Reader::new(&bytes[..])
                    .unwrap()
                    .map(|v| from_value(&v.unwrap()).unwrap())
                    .collect();
                out.insert(path.strip_prefix(dir).unwrap().to_owned(), rows);
            }
        }
    }
    out
}

/// Every archived coordinate.
pub fn archived_coords(dir: &Path) -> Vec<Coords> {
    read_archive(dir)
        .into_values()
        .flatten()
        .map(|r| (r.topic, r.partition, r.offset))
        .collect()
}

/// Waits until `done` holds on the archive, up to `limit`.
pub async fn wait_for_archive(dir: &Path, limit: Duration, done: impl Fn(&[Coords]) -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let coords = archived_coords(dir);
        if done(&coords) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "archive incomplete after {limit:?}: {} rows",
            coords.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
