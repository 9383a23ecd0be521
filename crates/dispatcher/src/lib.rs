//! The dispatcher stage (docs/design.md#dispatcher): consumes `deliveries`, looks each
//! subscription up at attempt time, signs (Standard Webhooks) and POSTs behind
//! the egress policy, and writes failures to the retry tier the ladder picks or
//! to the DLQ. Those records and the source offsets commit together in Kafka
//! transactions, so a crash re-attempts (same `webhook-id`) and never loses a
//! delivery, and never writes a retry or a dead letter twice. A record that is
//! not a `Delivery` goes to `events.quarantine` with its reason, in the same
//! transactions. Every attempt, parking and dead-lettering is written to the
//! attempt log `deliveries.attempts` in those transactions too, unless
//! `--attempt-log=false`.
//!
//! What to do is decided in `hookline-dispatch-core` (the state machine, the
//! follow-up of an attempt, the offsets, the hand-offs); this crate carries
//! it out against Kafka and HTTP: the engine's loop, its consumers and
//! transactions, the attempt tasks, metrics and events.

mod attempt;
pub mod capacity;
pub mod config;
mod consumer;
mod engine;
mod events;
mod metrics;
mod shared_breakers;

// The decisions, under the names the adapter's modules know them by.
use hookline_dispatch_core::build::HandoffBuilder;
use hookline_dispatch_core::{attempt_log, backlog, handoff, machine, outcome, part};

use std::{path::PathBuf, sync::Arc};

use hookline_envelope::{TopicError, Topics};
use hookline_runtime::{
    group_watch,
    http::{HttpSetupError, WebhookClient},
    kafka::{
        self,
        txn::{Transactor, TxnSpec},
    },
    ops::Ops,
    provision,
    signing::SecretStore,
    subscriptions, topic_check, RuntimeError,
};
use rdkafka::{
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};
use tokio_util::sync::CancellationToken;

pub use attempt::{HEADER_EVENT_TYPE, USER_AGENT_VALUE};
use config::librdkafka;
pub use config::{Config, DispatcherArgs};

/// The stage name used in metrics and logs.
pub const STAGE: &str = "dispatcher";

/// Why the dispatcher stopped (or would not start).
#[derive(Debug, thiserror::Error)]
pub enum DispatcherError {
    /// A shared adapter failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The topic prefix makes illegal topic names.
    #[error("invalid --topic-prefix: {0}")]
    Topics(#[from] TopicError),
    /// A flag has a value that cannot work.
    #[error("invalid {flag}: {why}")]
    Config { flag: &'static str, why: String },
    /// The secrets directory cannot be read.
    #[error("cannot read the secrets directory {} (flag --secrets-dir / HOOKLINE_SECRETS_DIR): {source}", path.display())]
    Secrets {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error(transparent)]
    Http(#[from] HttpSetupError),
    /// The lane limits are invalid.
    #[error(transparent)]
    Lanes(#[from] hookline_core::LaneError),
    /// A Kafka client could not be created or subscribed.
    #[error("kafka {context}: {source}")]
    Kafka {
        context: &'static str,
        #[source]
        source: KafkaError,
    },
    /// The polling thread could not start.
    #[error("cannot start the consumer thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Runs the dispatcher until `shutdown` is cancelled, then drains: in-flight
/// attempts finish within the request timeout, offsets are committed.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), DispatcherError> {
    let settings = config.settings()?;
    let tier_names: Vec<&str> = settings
        .ladder
        .tiers()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let topics = Topics::new(&config.common.topic_prefix, &tier_names)?;
    let secrets =
        SecretStore::load(&settings.secrets_dir).map_err(|source| DispatcherError::Secrets {
            path: settings.secrets_dir.clone(),
            source,
        })?;
    let client = WebhookClient::new(settings.http.clone())?;
    let ops = Ops::start(
        config
            .common
            .http_addr_or(hookline_runtime::config::default_port::DISPATCHER),
        STAGE,
    )
    .await?;
    metrics::describe();
    ops.health.set_ready(
        STAGE,
        Err("waiting for topics and the subscription table".into()),
    );
    let stop_secrets = CancellationToken::new();
    let secrets_task = secrets.watch(settings.secrets_poll_interval, stop_secrets.clone());
    let result = run_stage(&config, settings, topics, secrets, client, &ops, &shutdown).await;
    stop_secrets.cancel();
    let _ = secrets_task.await;
    ops.health.set_draining();
    ops.stop().await;
    result
}

async fn run_stage(
    config: &Config,
    settings: config::Settings,
    topics: Topics,
    secrets: SecretStore,
    client: WebhookClient,
    ops: &Ops,
    shutdown: &CancellationToken,
) -> Result<(), DispatcherError> {
    let mut needed = vec![
        topics.subscriptions(),
        topics.health(),
        topics.deliveries(),
        topics.strict(),
    ];
    needed.extend(topics.retries().map(|(_, topic)| topic));
    needed.push(topics.dlq());
    needed.push(topics.quarantine());
    if settings.attempt_log {
        needed.push(topics.attempts());
    }
    let lanes: Vec<&str> = topics.lanes().take(settings.overflow.lanes).collect();
    needed.extend(&lanes);
    // The command quoted names this dispatcher's ladder, so running it creates
    // exactly the tiers this dispatcher consumes.
    let fix = provision::spec::topics_command(&config.common, &config.dispatcher.ladder.tiers());
    if !topic_check::wait_for_topics(&config.common, &needed, &fix, &ops.health, STAGE, shutdown)
        .await?
    {
        return Ok(());
    }
    check_lane_partitions(&config.common, &topics, &lanes).await?;
    let table = topics.subscriptions().to_owned();
    subscriptions::run_with_table(
        &config.common,
        &table,
        STAGE,
        &ops.health,
        shutdown,
        |subs| {
            dispatch(
                config, settings, topics, secrets, client, subs, ops, shutdown,
            )
        },
    )
    .await
    .map(|_| ())
}

/// A record moved from partition p of `deliveries` goes to partition p of its
/// lane: refuses to start when a lane in use has fewer partitions.
async fn check_lane_partitions(
    common: &hookline_runtime::config::CommonArgs,
    topics: &Topics,
    lanes: &[&str],
) -> Result<(), DispatcherError> {
    match topic_check::lanes_short_of(common, topics.deliveries(), lanes).await? {
        None => Ok(()),
        Some(why) => Err(DispatcherError::Config {
            flag: "--overflow-lanes / HOOKLINE_OVERFLOW_LANES",
            why,
        }),
    }
}

#[allow(clippy::too_many_arguments)]
async fn dispatch(
    config: &Config,
    settings: config::Settings,
    topics: Topics,
    secrets: SecretStore,
    client: WebhookClient,
    subs: subscriptions::Subscriptions,
    ops: &Ops,
    shutdown: &CancellationToken,
) -> Result<(), DispatcherError> {
    // One engine serves the ready queue and every tier; tier records draw on the
    // retry share and wait for their due time. Metric labels are tier names: a
    // few, fixed at start, so leaking them for `&'static str` costs nothing.
    let mut inputs = vec![
        engine::Input {
            topic: topics.deliveries().to_owned(),
            label: "deliveries",
            tier: None,
            strict: false,
            lane: None,
        },
        engine::Input {
            topic: topics.strict().to_owned(),
            label: "strict",
            tier: None,
            strict: true,
            lane: None,
        },
    ];
    inputs.extend(
        topics
            .retries()
            .enumerate()
            .map(|(i, (tier, topic))| engine::Input {
                topic: topic.to_owned(),
                label: Box::leak(tier.to_owned().into_boxed_str()),
                tier: Some(i),
                strict: false,
                lane: None,
            }),
    );
    // The overflow lanes in use: read by assignment, partition by partition
    // with `deliveries` (`engine/lanes.rs`).
    inputs.extend(
        topics
            .lanes()
            .take(settings.overflow.lanes)
            .enumerate()
            .map(|(lane, topic)| engine::Input {
                topic: topic.to_owned(),
                label: metrics::lane_label(lane),
                tier: None,
                strict: false,
                lane: Some(lane),
            }),
    );
    // The breakers the replicas share, caught up before anything is fetched:
    // a restarted replica must not send to an endpoint another one (or it,
    // before) found down.
    let breakers_stop = CancellationToken::new();
    let (breakers, mut breakers_ready, breakers_task) = shared_breakers::follow(
        &config.common,
        topics.health(),
        &ops.health,
        breakers_stop.clone(),
    )?;
    let caught_up = tokio::select! {
        _ = shutdown.cancelled() => false,
        r = breakers_ready.wait_for(|c| *c) => r.is_ok(),
    };
    if !caught_up {
        breakers_stop.cancel();
        let _ = breakers_task.await;
        return Ok(());
    }
    let result = dispatch_inputs(
        config, settings, topics, secrets, client, subs, ops, shutdown, inputs, breakers,
    )
    .await;
    breakers_stop.cancel();
    let _ = breakers_task.await;
    result
}

#[allow(clippy::too_many_arguments)]
async fn dispatch_inputs(
    config: &Config,
    settings: config::Settings,
    topics: Topics,
    secrets: SecretStore,
    client: WebhookClient,
    subs: subscriptions::Subscriptions,
    ops: &Ops,
    shutdown: &CancellationToken,
    inputs: Vec<engine::Input>,
    breakers: shared_breakers::SharedBreakers,
) -> Result<(), DispatcherError> {
    metrics::describe_lanes(settings.overflow.lanes);
    let tier_labels: Vec<&'static str> = inputs
        .iter()
        .filter(|i| i.retry())
        .map(|i| i.label)
        .collect();
    metrics::describe_tiers(&tier_labels);
    // First-attempt inputs report to one inbox, tiers and lanes to another,
    // which the engine takes from second (`engine/inbox.rs`).
    let (events_tx, events_rx) = engine::inbox::inbox();
    let revoke_wait = settings.revoke_wait();
    let kafka_err = |context, source| DispatcherError::Kafka { context, source };
    // One consumer per input topic, all in one group: see `consumer` for why.
    let mut consumers = Vec::with_capacity(inputs.len());
    for (index, input) in inputs.iter().enumerate() {
        let index = u16::try_from(index).map_err(|_| DispatcherError::Config {
            flag: "--retry-tiers",
            why: "too many tiers".into(),
        })?;
        // The ready queue gets the larger prefetch; a tier is mostly paused.
        let prefetch_kb = if input.retry() {
            settings.kafka.tier_prefetch_kbytes
        } else {
            settings.kafka.ready_prefetch_kbytes
        };
        // Offsets are committed only in transactions, with the follow-ups
        // (`engine/commit.rs`).
        let consumer: BaseConsumer<consumer::DispatchContext> = kafka::group_reader_config(
            &config.common,
            "hookline-dispatcher",
            &settings.group_id,
            Some(input.label),
        )?
        .set("queued.max.messages.kbytes", prefetch_kb.to_string())
        // Bounds how late a resumed tier's due retry is fetched: see the flag.
        .set(
            "fetch.wait.max.ms",
            librdkafka::ms(settings.kafka.fetch_wait_max),
        )
        // A lane's consumer never joins the group: it is assigned by hand and
        // says when it has read a partition to its end.
        .set(
            "enable.partition.eof",
            if input.lane.is_some() {
                "true"
            } else {
                "false"
            },
        )
        .create_with_context(consumer::DispatchContext::new(
            index,
            events_tx.for_input(input),
            revoke_wait,
        ))
        .map_err(|e| kafka_err("creating a deliveries consumer", e))?;
        if input.lane.is_none() {
            consumer
                .subscribe(&[input.topic.as_str()])
                .map_err(|e| kafka_err("subscribing to a deliveries topic", e))?;
        }
        consumers.push(Arc::new(consumer));
    }
    let transactor = Transactor::new(
        &config.common,
        TxnSpec {
            client_id: "hookline-dispatcher",
            transactional_id: settings.commits.transactional_id.clone(),
            transaction_timeout: librdkafka::TRANSACTION_TIMEOUT,
            call_timeout: settings.commits.call_timeout,
            linger: librdkafka::PRODUCER_LINGER,
        },
    )
    .await?
    .report_writes_to(ops.health.clone(), STAGE);
    let retry_policy = outcome::RetryPolicy::new(settings.ladder.clone());
    let attempt_log = settings
        .attempt_log
        .then(|| attempt_log::AttemptLog::new(topics.attempts(), retry_policy.version()));
    let input_tiers = inputs
        .iter()
        .map(|i| i.retry().then_some(i.label))
        .collect();
    let ctx = Arc::new(attempt::AttemptContext {
        client,
        secrets,
        retry_policy,
        strict_head_wait: settings.strict_head_wait,
        handoffs: HandoffBuilder::new(topics, attempt_log, input_tiers),
    });
    let ctx_version = ctx.retry_policy.version().to_owned();
    let mut pollers = Vec::with_capacity(consumers.len());
    let mut commands = Vec::with_capacity(consumers.len());
    let mut on_purpose = Vec::with_capacity(consumers.len());
    let stop_watches = CancellationToken::new();
    let mut watches = Vec::with_capacity(consumers.len());
    for (consumer, input) in consumers.iter().zip(&inputs) {
        let h = group_watch::HeldPartitions::default();
        // A lane's consumer is not a group member; the `deliveries` one it
        // follows is watched.
        if input.lane.is_some() {
            on_purpose.push(h);
            let (commands_tx, commands_rx) = std::sync::mpsc::channel();
            commands.push(commands_tx);
            pollers.push(
                consumer::Poller::spawn(
                    Arc::clone(consumer),
                    events_tx.for_input(input),
                    commands_rx,
                )
                .map_err(DispatcherError::Thread)?,
            );
            continue;
        }
        watches.push(group_watch::spawn(
            Arc::clone(consumer),
            group_watch::WatchSpec {
                stage: STAGE,
                consumer: input.label,
                stall_timeout: config.common.consumer_stall_timeout,
            },
            h.clone(),
            ops.health.clone(),
            stop_watches.clone(),
        ));
        on_purpose.push(h);
        let (commands_tx, commands_rx) = std::sync::mpsc::channel();
        commands.push(commands_tx);
        pollers.push(
            consumer::Poller::spawn(
                Arc::clone(consumer),
                events_tx.for_input(input),
                commands_rx,
            )
            .map_err(DispatcherError::Thread)?,
        );
    }
    let (peeker, peek_thread) = engine::Peeker::spawn(&config.common, events_tx.bulk.downgrade())?;
    drop(events_tx);
    let engine = engine::Engine::new(
        engine::Parts {
            inputs,
            consumers,
            events: events_rx,
            subs,
            ctx,
            health: ops.health.clone(),
            request_timeout: settings.http.request_timeout,
            shutdown_grace: settings.shutdown_grace,
            max_payload_bytes: settings.max_payload_bytes,
            breaker: settings.breaker,
            overflow: settings.overflow,
            commands,
            on_purpose,
            transactor,
            commits: settings.commits.clone(),
            peeker,
            breakers,
        },
        settings.lanes.clone(),
    )?;
    ops.health.set_ready(STAGE, Ok(()));
    tracing::info!(group = %settings.group_id, policy_version = ctx_version, "dispatching");
    let result = engine.run(shutdown.clone()).await;
    stop_watches.cancel();
    futures::future::join_all(watches).await;
    // The engine is gone: its channel is closed and the peeker dropped, so
    // every thread holding a client of this stage ends; wait for all of them.
    tokio::join!(consumer::Poller::stop_all(pollers), peek_thread.join());
    result?;
    Ok(())
}
