//! Shared set-up of the fanout integration tests: unique topics on the real
//! broker, an in-process fanout, and helpers to produce and read records.

#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use clap::Parser;
use hookline_envelope::{
    decode, encode, Delivery, DomainEvent, QuarantinedEvent, Subscription, Topics,
};
use hookline_testkit::{kafka, stage::Stage};
use rdkafka::{
    message::{Header, Message, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    config: hookline_fanout::Config,
}

/// One test's topics, group and producer.
pub struct Env {
    pub prefix: String,
    pub topics: Topics,
    pub group: String,
    pub producer: FutureProducer,
}

impl Env {
    pub async fn new(name: &str) -> Self {
        Self::on(format!("{}.", kafka::unique_name(name))).await
    }

    /// Like [`new`](Self::new), but `events` has `partitions` partitions (the
    /// other topics keep 3): created first, so creating the rest skips it.
    pub async fn with_events_partitions(name: &str, partitions: i32) -> Self {
        let prefix = format!("{}.", kafka::unique_name(name));
        let topics = Topics::with_prefix(&prefix).unwrap();
        kafka::create_topics(&[(topics.events(), partitions)], &[])
            .await
            .unwrap();
        Self::on(prefix).await
    }

    async fn on(prefix: String) -> Self {
        let topics = kafka::create_hookline_topics(&prefix).await.unwrap();
        Self {
            group: format!("{prefix}fanout"),
            prefix,
            topics,
            producer: kafka::producer(),
        }
    }

    /// Flags of a fanout for this environment, plus `extra`.
    pub fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "hookline-fanout",
            "--brokers",
            &kafka::brokers(),
            "--topic-prefix",
            &self.prefix,
            "--http-addr",
            "127.0.0.1:0",
            "--group-id",
            &self.group,
            "--transactional-id",
            &format!("{}txn", self.prefix),
            "--txn-max-interval",
            "50ms",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Starts fanout in this process.
    pub fn start(&self, extra: &[&str]) -> Running {
        let config = Args::try_parse_from(self.args(extra)).unwrap().config;
        let stop = CancellationToken::new();
        let task = tokio::spawn(hookline_fanout::run(config, stop.clone()));
        Running { stop, task }
    }

    pub async fn put(&self, sub: &Subscription) {
        self.send(
            self.topics.subscriptions(),
            sub.subscription_id.as_bytes(),
            Some(&encode(sub)),
            None,
        )
        .await;
    }

    pub async fn delete(&self, id: &str) {
        self.send(self.topics.subscriptions(), id.as_bytes(), None, None)
            .await;
    }

    pub async fn publish(&self, event: &DomainEvent) {
        self.send(
            self.topics.events(),
            event.tenant_id.as_bytes(),
            Some(&encode(event)),
            None,
        )
        .await;
    }

    /// Publishes `event` with an explicit Kafka record timestamp (ms), the
    /// clock of the duplicate-admission window.
    pub async fn publish_at(&self, event: &DomainEvent, timestamp_ms: i64) {
        let bytes = encode(event);
        let record = FutureRecord::<[u8], [u8]>::to(self.topics.events())
            .key(event.tenant_id.as_bytes())
            .payload(&bytes)
            .timestamp(timestamp_ms);
        self.producer
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }

    /// Starts the real `hookline-fanout` binary (JSON logs in `log`), ready.
    pub async fn start_binary(&self, extra: &[&str], log: &std::path::Path) -> Stage {
        let mut args = self.args(extra);
        args.extend(["--log-format".to_owned(), "json".to_owned()]);
        Stage::start_exe(
            "fanout",
            env!("CARGO_BIN_EXE_hookline-fanout").into(),
            &args[1..],
            log,
        )
        .await
        .unwrap()
    }

    pub async fn send(
        &self,
        topic: &str,
        key: &[u8],
        value: Option<&[u8]>,
        headers: Option<OwnedHeaders>,
    ) {
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).key(key);
        if let Some(v) = value {
            record = record.payload(v);
        }
        if let Some(h) = headers {
            record = record.headers(h);
        }
        self.producer
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }

    /// Waits until the fanout group has committed every event produced so far.
    pub async fn drained(&self, within: Duration) {
        kafka::wait_committed_to_end(&self.group, self.topics.events(), within).await;
    }

    pub async fn deliveries(&self) -> Vec<Delivery> {
        kafka::read_to_end(self.topics.deliveries())
            .await
            .unwrap()
            .iter()
            .map(|m| {
                let d: Delivery = decode(m.payload().unwrap()).unwrap();
                assert_eq!(
                    m.key(),
                    Some(d.tenant_id.as_bytes()),
                    "deliveries are keyed by tenant"
                );
                d
            })
            .collect()
    }

    pub async fn quarantined(&self) -> Vec<QuarantinedEvent> {
        kafka::read_to_end(self.topics.quarantine())
            .await
            .unwrap()
            .iter()
            .map(|m| decode(m.payload().unwrap()).unwrap())
            .collect()
    }
}

/// An in-process fanout.
pub struct Running {
    pub stop: CancellationToken,
    pub task: JoinHandle<Result<(), hookline_fanout::FanoutError>>,
}

impl Running {
    /// SIGTERM-equivalent: cancels and waits for a clean exit.
    pub async fn shutdown(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("fanout exits within 30 s of shutdown")
            .unwrap()
            .unwrap();
    }
}

pub fn header(name: &str, value: &str) -> OwnedHeaders {
    OwnedHeaders::new().insert(Header {
        key: name,
        value: Some(value),
    })
}

/// (event_id, subscription_id) pairs of deliveries, sorted.
pub fn pairs(ds: &[Delivery]) -> Vec<(String, String)> {
    let mut v: Vec<_> = ds
        .iter()
        .map(|d| (d.event_id.clone(), d.subscription_id.clone()))
        .collect();
    v.sort();
    v
}

/// The sum of a counter's samples whose labels contain `labels` (e.g.
/// `payload="same"`, or "" for an unlabelled counter), from a Prometheus text
/// exposition; 0 if it has none.
pub fn counter(exposition: &str, name: &str, labels: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (series, value) = rest.rsplit_once(' ')?;
            (series.is_empty() || series.starts_with('{')).then_some(())?;
            series.contains(labels).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}
