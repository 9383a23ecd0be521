//! One scenario's pipeline, for `make bench` and `make faults`: its own topics
//! (unique prefix), subscriptions, a local receiver, and the three stages as
//! processes of the real binaries with their own groups. Events carry their production time in the payload, so the receiver's
//! arrival time gives the end-to-end wait. Every expected delivery id is kept,
//! so a lost delivery is counted, never assumed away.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, SystemTime},
};

use crate::{
    kafka,
    receiver::{Receiver, Recorded},
};
use anyhow::{bail, Context};
use hookline_core::epoch;
use hookline_envelope::{delivery_id, encode, DomainEvent, Subscription, Topics};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::{Deserialize, Serialize};
use tempfile::TempDir;

use crate::stage::{usage_of, Stage};

/// The signing secret every pipeline subscription names.
const SECRET_REF: &str = "pipeline";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n";

/// How a scenario's pipeline is set up.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Who runs it (`bench`, `faults`): names topics, groups and the temp dir.
    pub harness: &'static str,
    pub scenario: &'static str,
    /// Partitions of every topic.
    pub partitions: i32,
    /// The retry ladder (name, delay); empty for the default ladder.
    pub tiers: Vec<(String, Duration)>,
    /// Extra dispatcher flags.
    pub dispatcher_args: Vec<String>,
    /// Extra fanout flags.
    pub fanout_args: Vec<String>,
    /// Extra dlq-sink flags.
    pub sink_args: Vec<String>,
    /// `--log` filter of every stage (the harness reads the ops address from
    /// `hookline_runtime::ops`' info line, so keep that). Extended by
    /// `HOOKLINE_STAGE_LOG` when set, to look into a run (with
    /// `HOOKLINE_KEEP_DIRS=1` to keep the logs): `librdkafka=debug` with
    /// `HOOKLINE_KAFKA_CONFIG=debug=eos,protocol` shows the client's requests.
    pub log_filter: String,
    /// A stage's `--brokers` when not the test broker's plain listener (a
    /// secured listener): stage name -> bootstrap.
    pub brokers: HashMap<&'static str, String>,
}

impl Spec {
    /// A bench scenario.
    pub fn new(scenario: &'static str) -> Self {
        Self::for_harness("bench", scenario)
    }

    pub fn for_harness(harness: &'static str, scenario: &'static str) -> Self {
        Self {
            harness,
            scenario,
            partitions: 3,
            tiers: Vec::new(),
            dispatcher_args: Vec::new(),
            fanout_args: Vec::new(),
            sink_args: Vec::new(),
            log_filter: stage_log_filter(),
            brokers: HashMap::new(),
        }
    }
}

/// The default `--log` of every stage, plus `HOOKLINE_STAGE_LOG`'s directives.
fn stage_log_filter() -> String {
    with_stage_log("warn,hookline_runtime::ops=info")
}

/// `base` (a stage's `--log`/`HOOKLINE_LOG` filter), extended by
/// `HOOKLINE_STAGE_LOG`'s directives when set: how a test that starts a stage
/// itself lets a run be looked into.
pub fn with_stage_log(base: &str) -> String {
    match std::env::var("HOOKLINE_STAGE_LOG") {
        Ok(extra) if !extra.trim().is_empty() => format!("{base},{}", extra.trim()),
        _ => base.to_owned(),
    }
}

/// Resource use of each stage (and of the harness process) over one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct StageUsage {
    pub stage: &'static str,
    pub cpu_s: f64,
    /// None for the harness process: its allocator keeps what earlier scenarios
    /// freed, so its peak is not this scenario's.
    pub peak_rss_mib: Option<f64>,
}

/// The running pipeline of one scenario.
pub struct Pipeline {
    pub topics: Topics,
    pub receiver: Receiver,
    pub producer: FutureProducer,
    pub groups: Groups,
    stages: Vec<Stage>,
    harness_cpu_at_start: f64,
    dir: TempDir,
    /// Expected delivery id → its event id.
    expected: HashMap<String, String>,
    subs_by_tenant: HashMap<String, Vec<String>>,
    spec: Spec,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("topics", &self.topics)
            .field("receiver", &self.receiver.addr())
            .field("stages", &self.stages)
            .field("dir", &self.dir.path())
            .field("expected", &self.expected.len())
            .finish_non_exhaustive()
    }
}

/// Consumer groups of the stages.
#[derive(Debug, Clone)]
pub struct Groups {
    pub fanout: String,
}

/// What the receiver got, checked against what was expected.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Tally {
    pub expected: usize,
    pub delivered: usize,
    pub duplicates: usize,
    pub failed_attempts: usize,
    pub dead_letters: i64,
}

/// The time stamp every pipeline payload starts with.
#[derive(Debug, Deserialize)]
struct Stamp {
    sent_us: i64,
    #[serde(default)]
    seq: Option<u64>,
}

/// Microseconds since the epoch, now.
pub fn now_us() -> i64 {
    epoch::micros(SystemTime::now())
}

/// Microseconds since the epoch of a wall-clock time.
pub fn epoch_us(t: SystemTime) -> i64 {
    epoch::micros(t)
}

/// The dispatcher's header carrying the attempt's start, µs since the epoch:
/// with [`sent_us`] and the receiver's arrival time it splits a delivery's
/// wait into before and after the POST began.
pub const ATTEMPT_STARTED_HEADER: &str = "webhook-attempt-started";

/// The production time written into a pipeline payload, if it is one.
pub fn sent_us(body: &[u8]) -> Option<i64> {
    serde_json::from_slice::<Stamp>(body)
        .ok()
        .map(|s| s.sent_us)
}

/// The sequence number written into a pipeline payload, if it is one.
pub fn seq_of(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Stamp>(body).ok()?.seq
}

/// A JSON payload of about `size` bytes stamped with the time of this call.
pub fn payload(seq: u64, size: usize) -> Vec<u8> {
    let mut s = format!(r#"{{"sent_us":{},"seq":{seq},"pad":""#, now_us());
    let pad = size.saturating_sub(s.len() + 2);
    s.extend(std::iter::repeat_n('x', pad));
    s.push_str("\"}");
    s.into_bytes()
}

impl Pipeline {
    /// Topics and receiver; stages start with [`start`](Self::start) once the
    /// subscriptions are in.
    pub async fn create(spec: Spec) -> anyhow::Result<Self> {
        let prefix = format!(
            "{}.",
            kafka::unique_name(&format!("{}-{}", spec.harness, spec.scenario))
        );
        let tier_names: Vec<&str> = spec.tiers.iter().map(|(n, _)| n.as_str()).collect();
        let topics = if tier_names.is_empty() {
            Topics::with_prefix(&prefix)?
        } else {
            Topics::new(&prefix, &tier_names)?
        };
        let plain: Vec<(&str, i32)> = topics
            .all()
            .into_iter()
            .filter(|t| !topics.tables().contains(t))
            .map(|t| (t, spec.partitions))
            .collect();
        kafka::create_topics(&plain, &[]).await?;
        kafka::create_topics(
            &topics.tables().map(|t| (t, spec.partitions)),
            &[("cleanup.policy", "compact")],
        )
        .await?;
        let mut dir = tempfile::Builder::new()
            .prefix(&format!("hookline-{}-", spec.harness))
            .tempdir()?;
        // Stage logs and the archive outlive the run when asked, for post-mortems.
        dir.disable_cleanup(std::env::var_os("HOOKLINE_KEEP_DIRS").is_some());
        std::fs::create_dir(dir.path().join("secrets"))?;
        std::fs::write(dir.path().join("secrets").join(SECRET_REF), SECRET)?;
        Ok(Self {
            groups: Groups {
                fanout: format!("{prefix}fanout"),
            },
            topics,
            receiver: Receiver::start().await?,
            producer: kafka::producer(),
            stages: Vec::new(),
            harness_cpu_at_start: usage_of("self")?.cpu_s,
            dir,
            expected: HashMap::new(),
            subs_by_tenant: HashMap::new(),
            spec,
        })
    }

    /// An enabled subscription of `tenant` to every event type, POSTing to `path`.
    pub fn subscription(
        &self,
        id: &str,
        tenant: &str,
        path: &str,
        max_in_flight: i32,
    ) -> Subscription {
        Subscription {
            subscription_id: id.to_owned(),
            tenant_id: tenant.to_owned(),
            url: self.receiver.url(path),
            event_types: vec!["*".to_owned()],
            secret_ref: SECRET_REF.to_owned(),
            enabled: true,
            max_in_flight,
            rate_limit_per_s: None,
            disabled_reason: None,
            disabled_at: None,
            ordering: "unordered".into(),
            version: 1,
            updated_at: now_us() / 1000,
        }
    }

    /// Writes subscriptions to the compacted topic (before `start`, so both
    /// fanout and dispatcher load them while catching up).
    pub async fn put_subscriptions(&mut self, subs: &[Subscription]) -> anyhow::Result<()> {
        kafka::produce_many(
            &self.producer,
            self.topics.subscriptions(),
            subs.iter()
                .map(|s| (s.subscription_id.clone().into_bytes(), encode(s))),
        )
        .await?;
        for s in subs {
            self.subs_by_tenant
                .entry(s.tenant_id.clone())
                .or_default()
                .push(s.subscription_id.clone());
        }
        Ok(())
    }

    /// Starts dlq-sink, dispatcher and fanout, each waited for until ready.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        self.start_sink().await?;
        self.start_dispatcher("dispatcher").await?;
        self.start_fanout().await
    }

    /// Flags every stage gets: brokers, prefix, ops port, JSON logs, group.
    fn common_args(&self, stage: &str, group: &str) -> Vec<String> {
        let brokers = self
            .spec
            .brokers
            .get(stage)
            .cloned()
            .unwrap_or_else(kafka::brokers);
        [
            "--brokers",
            &brokers,
            "--topic-prefix",
            self.topics.prefix(),
            "--http-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--log",
            &self.spec.log_filter,
            "--group-id",
            group,
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// Starts the dlq-sink, archiving into `archive_dir()`.
    pub async fn start_sink(&mut self) -> anyhow::Result<()> {
        let mut sink = self.common_args("dlq-sink", &format!("{}dlq-sink", self.topics.prefix()));
        sink.extend([
            "--archive-url".to_owned(),
            self.archive_dir().display().to_string(),
        ]);
        sink.extend(self.spec.sink_args.iter().cloned());
        let log = self.dir.path().join("dlq-sink.log");
        self.stages
            .push(Stage::start("dlq-sink", "hookline-dlq-sink", &sink, &log).await?);
        Ok(())
    }

    /// Starts one dispatcher named `name` (`dispatcher`, or e.g. `dispatcher-b`
    /// for a second member of the same group).
    pub async fn start_dispatcher(&mut self, name: &'static str) -> anyhow::Result<()> {
        let mut dispatcher = self.common_args(name, &format!("{}dispatcher", self.topics.prefix()));
        dispatcher.extend(
            [
                "--secrets-dir",
                &self.dir.path().join("secrets").display().to_string(),
                "--egress-allow-http",
                "--egress-allow-cidr",
                "127.0.0.0/8",
            ]
            .map(str::to_owned),
        );
        if !self.spec.tiers.is_empty() {
            let ladder: Vec<String> = self
                .spec
                .tiers
                .iter()
                .map(|(n, d)| format!("{n}={}ms", d.as_millis()))
                .collect();
            dispatcher.extend(["--retry-tiers".to_owned(), ladder.join(",")]);
        }
        dispatcher.extend(self.spec.dispatcher_args.iter().cloned());
        let log = self.dir.path().join(format!("{name}.log"));
        self.stages
            .push(Stage::start(name, "hookline-dispatcher", &dispatcher, &log).await?);
        Ok(())
    }

    /// Starts fanout with a transactional id of its own (kept across restarts,
    /// so a restarted fanout fences its predecessor).
    pub async fn start_fanout(&mut self) -> anyhow::Result<()> {
        self.start_fanout_as("fanout").await
    }

    /// Starts one fanout named `name` (`fanout`, or e.g. `fanout-b` for a
    /// replacement in the same group): every one has the same transactional
    /// id, so the one started last fences the others.
    pub async fn start_fanout_as(&mut self, name: &'static str) -> anyhow::Result<()> {
        let mut fanout = self.common_args(name, &self.groups.fanout);
        fanout.extend([
            "--transactional-id".to_owned(),
            format!("{}fanout-txn", self.topics.prefix()),
        ]);
        fanout.extend(self.spec.fanout_args.iter().cloned());
        let log = self.dir.path().join(format!("{name}.log"));
        self.stages
            .push(Stage::start(name, "hookline-fanout", &fanout, &log).await?);
        Ok(())
    }

    /// The dlq-sink's archive directory.
    pub fn archive_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("archive")
    }

    /// The scenario's temporary directory (stage logs, secrets, archive).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn stage_mut(&mut self, name: &str) -> anyhow::Result<&mut Stage> {
        self.stages
            .iter_mut()
            .find(|s| s.name == name)
            .with_context(|| format!("no stage {name}"))
    }

    /// Every stage, in start order.
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// Every stage, in start order.
    pub fn stages_mut(&mut self) -> &mut [Stage] {
        &mut self.stages
    }

    pub fn stage(&self, name: &str) -> anyhow::Result<&Stage> {
        self.stages
            .iter()
            .find(|s| s.name == name)
            .with_context(|| format!("no stage {name}"))
    }

    /// An event of `tenant` with a stamped payload; its deliveries (one per
    /// subscription of the tenant) are added to the expected set.
    pub fn event(&mut self, seq: u64, tenant: &str, payload_size: usize) -> (Vec<u8>, Vec<u8>) {
        let event_id = self.event_id(seq);
        for sub in self.subs_by_tenant.get(tenant).into_iter().flatten() {
            self.expected
                .insert(delivery_id(&event_id, sub), event_id.clone());
        }
        let event = DomainEvent {
            event_id,
            tenant_id: tenant.to_owned(),
            event_type: format!("{}.created", self.spec.harness),
            occurred_at: now_us() / 1000,
            content_type: "application/json".to_owned(),
            payload: payload(seq, payload_size),
            attributes: Default::default(),
        };
        (tenant.as_bytes().to_vec(), encode(&event))
    }

    /// Produces events and waits for their acknowledgements.
    pub async fn produce(&self, events: Vec<(Vec<u8>, Vec<u8>)>) -> anyhow::Result<usize> {
        kafka::produce_many(&self.producer, self.topics.events(), events).await
    }

    /// Sends one event without waiting for its acknowledgement (for pacing).
    pub fn send(
        &self,
        (key, value): &(Vec<u8>, Vec<u8>),
    ) -> anyhow::Result<rdkafka::producer::DeliveryFuture> {
        self.producer
            .send_result(
                FutureRecord::to(self.topics.events())
                    .key(key)
                    .payload(value),
            )
            .map_err(|(e, _)| anyhow::anyhow!("producing an event: {e}"))
    }

    pub fn expected(&self) -> usize {
        self.expected.len()
    }

    /// Every expected delivery id with the id of its event.
    pub fn expected_ids(&self) -> &HashMap<String, String> {
        &self.expected
    }

    /// The event id [`event`](Self::event) gives sequence number `seq`.
    pub fn event_id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.spec.scenario)
    }

    /// Waits until the receiver has had `requests` requests, giving up when
    /// none arrives for `stall`; returns whether the count was reached.
    pub async fn wait_for_requests(&self, requests: usize, stall: Duration) -> bool {
        let mut last = self.receiver.count();
        let mut changed = tokio::time::Instant::now();
        loop {
            let n = self.receiver.count();
            if n >= requests {
                return true;
            }
            if n != last {
                (last, changed) = (n, tokio::time::Instant::now());
            } else if changed.elapsed() >= stall {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for every expected delivery (giving up when no request arrives
    /// for `stall`) and counts them; an error if any is missing or unexpected.
    pub async fn settle(&self, stall: Duration) -> anyhow::Result<Tally> {
        self.wait_for_requests(self.expected.len(), stall).await;
        // With retries the request count is reached before the last success:
        // wait on the delivered set itself.
        while self.tally_local().delivered < self.expected.len() {
            if !self
                .wait_for_requests(self.receiver.count() + 1, stall)
                .await
            {
                break;
            }
        }
        let requests = self.receiver.requests();
        let mut tally = self.tally_of(&requests);
        tally.dead_letters = kafka::group_progress(
            &format!("{}dlq-sink", self.topics.prefix()),
            self.topics.dlq(),
        )
        .await?
        .1;
        let unexpected = requests
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .map(|r| r.header("webhook-id"))
            .filter(|id| !self.expected.contains_key(*id))
            .collect::<HashSet<&str>>()
            .len();
        drop(requests);
        if tally.delivered < tally.expected || unexpected > 0 {
            bail!(
                "LOST DELIVERIES in {}: {} of {} expected deliveries arrived ({} missing, {unexpected} unexpected ids, {} dead letters); logs in {}",
                self.spec.scenario,
                tally.delivered,
                tally.expected,
                tally.expected - tally.delivered.min(tally.expected),
                tally.dead_letters,
                self.dir.path().display()
            );
        }
        Ok(tally)
    }

    fn tally_local(&self) -> Tally {
        self.tally_of(&self.receiver.requests())
    }

    fn tally_of(&self, requests: &[Recorded]) -> Tally {
        let ok: Vec<&str> = requests
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .map(|r| r.header("webhook-id"))
            .collect();
        let distinct: HashSet<&str> = ok.iter().copied().collect();
        Tally {
            expected: self.expected.len(),
            delivered: distinct
                .iter()
                .filter(|id| self.expected.contains_key(**id))
                .count(),
            duplicates: ok.len() - distinct.len(),
            failed_attempts: requests.len() - ok.len(),
            dead_letters: 0,
        }
    }

    /// Stops every stage (fanout first, so nothing new flows) and returns the
    /// CPU and peak RSS of each, plus the harness process's own CPU over the scenario.
    pub async fn stop(mut self) -> anyhow::Result<Vec<StageUsage>> {
        let mut out = Vec::new();
        let mut first_error = None;
        while let Some(stage) = self.stages.pop() {
            let name = stage.name;
            match stage.stop().await {
                Ok(usage) => out.push(StageUsage {
                    stage: name,
                    cpu_s: usage.cpu_s,
                    peak_rss_mib: Some(usage.peak_rss_mib),
                }),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let me = usage_of("self")?;
        out.push(StageUsage {
            stage: if self.spec.harness == "bench" {
                "bench (producer + receiver)"
            } else {
                "harness (producer + receiver)"
            },
            cpu_s: me.cpu_s - self.harness_cpu_at_start,
            peak_rss_mib: None,
        });
        match first_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}
