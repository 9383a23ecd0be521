//! `hookline-demo` (`make demo`): the whole pipeline in one process on
//! librdkafka's mock cluster — nothing to install, nothing left running.
//! Tenants with healthy, slow, flaky, gone and down endpoints receive a
//! stream of events; the terminal shows each delivery's fate live, and the
//! demo ends with a summary whose numbers add up. The retry ladder runs in
//! seconds instead of hours so the story plays out in about half a minute.
//!
//! The mock cluster has no real transactions or compaction: this demo shows
//! behaviour, it proves nothing about exactly-once (the real-Kafka tests do).

mod progress;
mod scenario;

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context;
use base64::Engine;
use clap::Parser;
use hookline_core::EventTypeFilter;
use hookline_envelope::{delivery_id, encode, Subscription, Topics};
use hookline_testkit::{receiver::Receiver, records};
use rand::RngCore;
use rdkafka::{
    mocking::MockCluster,
    producer::{FutureProducer, FutureRecord},
    ClientConfig,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Partitions of every demo topic.
pub const PARTITIONS: i32 = 3;

/// The retry ladder of the demo: the default tier names, in seconds.
const LADDER: &[(&str, &str)] = &[
    ("retry-10s", "1s"),
    ("retry-1m", "2s"),
    ("retry-15m", "4s"),
    ("retry-2h", "8s"),
];

/// hookline demo: every stage in-process on an embedded broker.
#[derive(Debug, Parser)]
#[command(name = "hookline-demo", version, about)]
struct Cli {
    /// Events published per tenant.
    #[arg(long, default_value_t = 30)]
    events_per_tenant: usize,
    /// How long events are published over.
    #[arg(long, default_value = "10s", value_parser = hookline_runtime::config::parse_duration)]
    publish_over: Duration,
    /// Give up waiting for the last deliveries after this long.
    #[arg(long, default_value = "120s", value_parser = hookline_runtime::config::parse_duration)]
    deadline: Duration,
    /// Log filter for the stages (they log to stderr).
    #[arg(long, default_value = "error")]
    log: String,
}

#[derive(Parser)]
struct FanoutCli {
    #[command(flatten)]
    c: hookline_fanout::Config,
}
#[derive(Parser)]
struct DispatcherCli {
    #[command(flatten)]
    c: hookline_dispatcher::Config,
}
#[derive(Parser)]
struct SinkCli {
    #[command(flatten)]
    c: hookline_dlq_sink::Config,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // One `Error: ` line of the Display chain, never a backtrace.
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => hookline_runtime::report_error(e.as_ref()),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    hookline_runtime::telemetry::init_logging(&cli.log, hookline_runtime::config::LogFormat::Text)?;
    let started = Instant::now();
    let out = &mut std::io::stdout();

    writeln!(out, "hookline demo: fanout, dispatcher and dlq-sink in one process on librdkafka's mock cluster.")?;
    writeln!(
        out,
        "The retry ladder runs in seconds here ({}), so the story takes about half a minute.",
        LADDER
            .iter()
            .map(|(t, d)| format!("{t}={d}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;

    let cluster = MockCluster::new(1).context("starting the mock cluster")?;
    let brokers = cluster.bootstrap_servers();
    let topics = Topics::default();
    for topic in topics.all() {
        cluster.create_topic(topic, PARTITIONS, 1)?;
    }

    let receiver = Receiver::start().await?;
    let down_url = {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")?;
        format!("http://{}/hook", closed.local_addr()?)
    };
    // The flaky endpoint fails ten requests in a row (which opens its
    // breaker, `--breaker-failures` 10) and then two probes, at most: its
    // breaker is open for about 6 s, far from `scenario::BREAKER_DISABLE_AFTER`, and
    // its deliveries recover instead of exhausting the ladder.
    let flaky_failures = (2 * cli.events_per_tenant).min(12) as u32;
    let endpoints = scenario::configure(&receiver, &down_url, flaky_failures);
    let secrets = tempfile::tempdir()?;
    let archive = tempfile::tempdir()?;

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()?;
    writeln!(out, "\nSubscriptions:")?;
    let mut subs = Vec::new();
    for (e, url) in &endpoints {
        let secret_ref = format!("{}-signing", e.tenant);
        let mut key = [0u8; 24];
        rand::rng().fill_bytes(&mut key);
        std::fs::write(
            secrets.path().join(&secret_ref),
            format!(
                "whsec_{}\n",
                base64::engine::general_purpose::STANDARD.encode(key)
            ),
        )?;
        let sub = Subscription {
            subscription_id: e.subscription.to_owned(),
            tenant_id: e.tenant.to_owned(),
            url: url.clone(),
            event_types: e.patterns.iter().map(|p| (*p).to_owned()).collect(),
            secret_ref,
            enabled: true,
            max_in_flight: e.max_in_flight,
            rate_limit_per_s: None,
            disabled_reason: None,
            disabled_at: None,
            ordering: "unordered".into(),
            version: 1,
            updated_at: hookline_core::epoch::millis(std::time::SystemTime::now()),
        };
        send(
            &producer,
            topics.subscriptions(),
            &sub.subscription_id,
            &encode(&sub),
        )
        .await?;
        writeln!(
            out,
            "  {:<9} {:<14} {:<22} {}",
            e.tenant,
            e.subscription,
            e.patterns.join(","),
            e.story
        )?;
        subs.push(sub);
    }

    let stop = CancellationToken::new();
    let stages = start_stages(&brokers, secrets.path(), archive.path(), &stop)?;
    // Events go out once every stage consumes: a new consumer group's first
    // join is held for 3 s (on the mock cluster as on a broker's
    // `group.initial.rebalance.delay.ms`), and the story should not start with
    // that wait.
    let starting = Instant::now();
    wait_until_consuming(
        &[topics.events(), topics.deliveries(), topics.dlq()],
        Duration::from_secs(60),
    )
    .await?;
    writeln!(
        out,
        "\nStages consuming after {:.1}s (a new consumer group's first join waits 3 s).",
        starting.elapsed().as_secs_f64()
    )?;
    let labels = LADDER
        .iter()
        .map(|(tier, delay)| ((*tier).to_owned(), format!("retry {delay}")))
        .collect();
    let tracker = progress::Tracker::start(&brokers, &topics, labels, stop.child_token())?;
    let tenants = scenario::tenants();

    // Publish: events round-robin over tenants and types, plus two undecodable
    // records that fanout must quarantine without stopping.
    let total_events = cli.events_per_tenant * tenants.len();
    let gap = cli.publish_over / total_events.max(1) as u32;
    let filters: Vec<(Subscription, EventTypeFilter)> = subs
        .iter()
        .map(|s| Ok((s.clone(), EventTypeFilter::parse(&s.event_types)?)))
        .collect::<anyhow::Result<_>>()?;
    let first_event_at = SystemTime::now();
    let publisher = {
        let producer = producer.clone();
        let tracker = tracker.clone();
        let events_topic = topics.events().to_owned();
        let tenants = tenants.clone();
        tokio::spawn(async move {
            for i in 0..total_events {
                let tenant = tenants[i % tenants.len()];
                let ty = scenario::EVENT_TYPES[(i / tenants.len()) % scenario::EVENT_TYPES.len()];
                let event = records::event(&format!("evt-{i:04}"), tenant, ty);
                for (s, f) in &filters {
                    if s.tenant_id == tenant && f.matches(ty) {
                        tracker.expect(delivery_id(&event.event_id, &s.subscription_id), tenant);
                    }
                }
                send(&producer, &events_topic, tenant, &encode(&event)).await?;
                if i == total_events / 3 || i == 2 * total_events / 3 {
                    send(
                        &producer,
                        &events_topic,
                        tenant,
                        b"{\"legacy\":\"json, not avro\"}",
                    )
                    .await?;
                }
                tokio::time::sleep(gap).await;
            }
            anyhow::Ok(())
        })
    };

    let tty = std::io::stdout().is_terminal();
    writeln!(
        out,
        "\nLive (delivered / pending first attempt / retrying by tier / dead-lettered):"
    )?;
    let mut last_lines = 0;
    let deadline = Instant::now() + cli.publish_over + cli.deadline;
    let mut last_print = Instant::now() - Duration::from_secs(60);
    let total = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (table, total) = tracker.render(&tenants, &receiver);
        let published = publisher.is_finished();
        let settled = published && total.delivered + total.dead_total() == total.expected;
        if tty {
            if last_lines > 0 {
                write!(out, "\x1b[{last_lines}A")?;
            }
            write!(out, "{table}")?;
            writeln!(
                out,
                "elapsed {:>5.1}s   quarantined {}",
                started.elapsed().as_secs_f64(),
                tracker.quarantined()
            )?;
            last_lines = table.lines().count() + 1;
        } else if last_print.elapsed() >= Duration::from_secs(5) || settled {
            writeln!(out, "-- {:.0}s", started.elapsed().as_secs_f64())?;
            write!(out, "{table}")?;
            last_print = Instant::now();
        }
        out.flush()?;
        if settled || Instant::now() > deadline {
            break total;
        }
    };
    publisher.await??;

    // Give the sink a moment to archive the last dead letters, then stop all.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    for (name, stage) in stages {
        match tokio::time::timeout(Duration::from_secs(30), stage).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => writeln!(out, "{name} stopped with an error: {e:#}")?,
            Ok(Err(e)) => writeln!(out, "{name} panicked: {e}")?,
            Err(_) => writeln!(out, "{name} did not stop within 30 s")?,
        }
    }

    let archived = count_files(archive.path());
    writeln!(
        out,
        "\nSummary after {:.0}s",
        started.elapsed().as_secs_f64()
    )?;
    writeln!(
        out,
        "  events published            {total_events} (+2 undecodable, quarantined: {})",
        tracker.quarantined()
    )?;
    writeln!(
        out,
        "  deliveries expected         {} (events x matching subscriptions)",
        total.expected
    )?;
    writeln!(out, "  delivered                   {}", total.delivered)?;
    writeln!(out, "  dead-lettered               {}", total.dead_total())?;
    for (reason, n) in &total.dead {
        writeln!(out, "    {reason:<25} {n}")?;
    }
    writeln!(
        out,
        "  still retrying              {}",
        total.retrying_total()
    )?;
    writeln!(out, "  not yet attempted           {}", total.pending)?;
    let accounted = total.delivered + total.dead_total() + total.retrying_total() + total.pending;
    writeln!(
        out,
        "  accounted for               {accounted} of {} {}",
        total.expected,
        if accounted == total.expected {
            "(adds up)"
        } else {
            "(DOES NOT ADD UP)"
        }
    )?;
    writeln!(
        out,
        "  archive files written       {archived} (dead letters, quarantined events and the attempt log, Avro)"
    )?;
    writeln!(out, "  webhook requests received   {}", receiver.count())?;
    if let Some(first) = receiver
        .requests()
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .map(|r| r.received_at)
        .min()
    {
        let after = first.duration_since(first_event_at).unwrap_or_default();
        writeln!(
            out,
            "  first delivery              {} ms after the first event was published",
            after.as_millis()
        )?;
    }
    anyhow::ensure!(accounted == total.expected, "the summary does not add up");
    Ok(())
}

type Stage = JoinHandle<anyhow::Result<()>>;

/// Waits until a consumer of this process has been assigned a partition of
/// every topic in `topics`.
async fn wait_until_consuming(topics: &[&str], within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let assigned = hookline_runtime::kafka::assigned_topics();
        let waiting: Vec<&str> = topics
            .iter()
            .copied()
            .filter(|t| !assigned.contains(*t))
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no stage consumed {} within {within:?} (run with --log info to see why)",
            waiting.join(", ")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn start_stages(
    brokers: &str,
    secrets: &std::path::Path,
    archive: &std::path::Path,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<(&'static str, Stage)>> {
    let common = [
        "--brokers",
        brokers,
        "--http-addr",
        "127.0.0.1:0",
        "--shutdown-grace",
        "20s",
        // The mock cluster cannot describe topic settings; the demo created
        // its topics itself.
        "--skip-topic-settings-check",
    ];
    let fanout = FanoutCli::try_parse_from(
        ["fanout"]
            .iter()
            .chain(&common)
            .chain(&["--txn-max-interval", "20ms"])
            .copied(),
    )?
    .c;
    let ladder = LADDER
        .iter()
        .map(|(t, d)| format!("{t}={d}"))
        .collect::<Vec<_>>()
        .join(",");
    let secrets = secrets.display().to_string();
    let dispatcher =
        DispatcherCli::try_parse_from(["dispatcher"].iter().chain(&common).copied().chain([
            "--secrets-dir",
            &secrets,
            "--egress-allow-http",
            "--egress-allow-cidr",
            "127.0.0.0/8",
            "--request-timeout",
            "5s",
            "--connect-timeout",
            "1s",
            "--retry-tiers",
            &ladder,
            "--max-attempts",
            "5",
            "--retry-jitter",
            "200ms",
            // The breaker at the demo's pace: the flaky endpoint's run of 503s opens
            // it, its deliveries are parked, a probe closes it once it recovers.
            "--breaker-open",
            "2s",
            "--breaker-open-max",
            "4s",
            // The down endpoint's breaker stays open: its subscription is
            // disabled and what it parked is kept as dead letters.
            "--breaker-disable-after",
            scenario::BREAKER_DISABLE_AFTER,
        ]))?
        .c;
    let archive = archive.display().to_string();
    let sink = SinkCli::try_parse_from(["dlq-sink"].iter().chain(&common).copied().chain([
        "--archive-url",
        &archive,
        "--max-file-age",
        "2s",
    ]))?
    .c;
    let s = stop.clone();
    let f: Stage = tokio::spawn(async move { Ok(hookline_fanout::run(fanout, s).await?) });
    let s = stop.clone();
    let d: Stage = tokio::spawn(async move { Ok(hookline_dispatcher::run(dispatcher, s).await?) });
    let s = stop.clone();
    let k: Stage = tokio::spawn(async move { Ok(hookline_dlq_sink::run(sink, s).await?) });
    Ok(vec![("fanout", f), ("dispatcher", d), ("dlq-sink", k)])
}

async fn send(
    producer: &FutureProducer,
    topic: &str,
    key: &str,
    value: &[u8],
) -> anyhow::Result<()> {
    producer
        .send(
            FutureRecord::to(topic).key(key).payload(value),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)?;
    Ok(())
}

fn count_files(dir: &std::path::Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "avro") {
                    n += 1;
                }
            }
        }
    }
    n
}
