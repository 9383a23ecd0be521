//! The topic check every stage runs at start: it waits, unready, until each topic it
//! needs exists with settings that cannot lose data, and says which are missing or wrong.
//! Beside `kafka` rather than in it, so the Kafka clients never depend on provisioning.

use std::time::Duration;

use rdkafka::{
    admin::{AdminClient, AdminOptions, ResourceSpecifier},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};
use tokio_util::sync::CancellationToken;

use crate::{config::CommonArgs, health::Health, kafka::client_config, provision, RuntimeError};

/// How often missing topics are looked for again.
const TOPIC_RECHECK: Duration = Duration::from_secs(2);

/// The topics of `wanted` the cluster does not have (or cannot show).
pub async fn missing_topics(
    common: &CommonArgs,
    wanted: &[&str],
) -> Result<Vec<String>, RuntimeError> {
    let present = partition_counts(common).await?;
    Ok(wanted
        .iter()
        .filter(|t| !present.contains_key(**t))
        .map(|t| (*t).to_owned())
        .collect())
}

/// Every topic the cluster shows, with its partition count.
pub async fn partition_counts(
    common: &CommonArgs,
) -> Result<std::collections::HashMap<String, usize>, RuntimeError> {
    let client: BaseConsumer = client_config(common, "hookline-topic-check")?
        .create()
        .map_err(|e| RuntimeError::kafka("creating the metadata client", e))?;
    let metadata =
        tokio::task::spawn_blocking(move || client.fetch_metadata(None, Duration::from_secs(10)))
            .await
            .map_err(|e| {
                RuntimeError::kafka(format!("metadata task failed: {e}"), KafkaError::Canceled)
            })?
            .map_err(|e| RuntimeError::kafka("reading cluster metadata", e))?;
    Ok(metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| (t.name().to_owned(), t.partitions().len()))
        .collect())
}

/// A record of partition `p` of `deliveries` goes to partition `p` of its
/// overflow lane (moved there by the dispatcher, or routed there by fanout),
/// and is read by whoever owns `p`: why the lanes of `lanes` cannot serve,
/// when one has fewer partitions than `deliveries`.
pub async fn lanes_short_of(
    common: &CommonArgs,
    deliveries: &str,
    lanes: &[&str],
) -> Result<Option<String>, RuntimeError> {
    if lanes.is_empty() {
        return Ok(None);
    }
    let counts = partition_counts(common).await?;
    let have = counts.get(deliveries).copied().unwrap_or(0);
    let short: Vec<String> = lanes
        .iter()
        .filter_map(|lane| {
            let n = counts.get(*lane).copied().unwrap_or(0);
            (n < have).then(|| format!("{lane} has {n}"))
        })
        .collect();
    Ok((!short.is_empty()).then(|| {
        format!(
            "{deliveries} has {have} partitions but {}: an overflow lane needs at least as many \
             (hookline-fanout topics --execute gives them the same), or set --overflow-lanes 0",
            short.join(", ")
        )
    }))
}

/// The topics of `wanted` whose settings would lose data, each with the
/// reason: a compacted tenant-keyed queue keeps one record per tenant, an
/// uncompacted `subscriptions` forgets subscriptions. The rule lives in
/// [`provision::wrong_topic_config`], beside the provisioning command.
pub async fn wrong_topics(
    common: &CommonArgs,
    wanted: &[&str],
) -> Result<Vec<String>, RuntimeError> {
    if common.skip_topic_settings_check {
        return Ok(Vec::new());
    }
    let Ok(topics) = hookline_envelope::Topics::with_prefix(&common.topic_prefix) else {
        return Ok(Vec::new()); // the service reports a bad prefix itself
    };
    let admin: AdminClient<DefaultClientContext> = client_config(common, "hookline-topic-check")?
        .create()
        .map_err(|e| RuntimeError::kafka("creating the admin client", e))?;
    let specifiers: Vec<ResourceSpecifier<'_>> =
        wanted.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .describe_configs(&specifiers, &opts)
        .await
        .map_err(|e| RuntimeError::kafka("describing topic configs", e))?;
    let mut wrong = Vec::new();
    for (topic, result) in wanted.iter().zip(results) {
        let resource = result.map_err(|code| {
            RuntimeError::kafka(format!("describing {topic}"), KafkaError::AdminOp(code))
        })?;
        let policy = resource
            .get("cleanup.policy")
            .and_then(|e| e.value.as_deref());
        wrong.extend(provision::wrong_topic_config(&topics, topic, policy));
    }
    Ok(wrong)
}

/// The command that creates a stage's topics when that stage does not consume
/// the retry tiers (fanout, dlq-sink) and so does not know the ladder.
pub fn topics_hint(common: &CommonArgs) -> String {
    format!(
        "{} (with the dispatcher's --retry-tiers if it is not the default ladder)",
        provision::spec::topics_command(common, &provision::spec::default_tiers())
    )
}

/// Waits until every topic in `wanted` exists with settings that cannot lose
/// data, keeping the service unready with a message naming the missing or
/// wrong ones. Returns `false` if `stop` fired first. When the settings cannot
/// be read (no DescribeConfigs permission), that is logged and not fatal.
/// `fix` is the command that creates or corrects them (see
/// [`provision::spec::topics_command`]), quoted in the message.
pub async fn wait_for_topics(
    common: &CommonArgs,
    wanted: &[&str],
    fix: &str,
    health: &Health,
    stage: &'static str,
    stop: &CancellationToken,
) -> Result<bool, RuntimeError> {
    let mut warned: Option<String> = None;
    loop {
        let why = match missing_topics(common, wanted).await {
            Ok(missing) if missing.is_empty() => match wrong_topics(common, wanted).await {
                Ok(wrong) if wrong.is_empty() => {
                    health.set_ready("topics", Ok(()));
                    return Ok(true);
                }
                Ok(wrong) => format!(
                    "wrong topic settings: {} (fix them with `{fix}`)",
                    wrong.join("; ")
                ),
                Err(e) => {
                    tracing::warn!(stage, error = %e, "cannot check topic settings; going on");
                    health.set_ready("topics", Ok(()));
                    return Ok(true);
                }
            },
            Ok(missing) => format!(
                "missing topics: {} (create them with `{fix}`)",
                missing.join(", ")
            ),
            Err(e) => format!("cannot check topics: {e}"),
        };
        if warned.as_deref() != Some(why.as_str()) {
            tracing::warn!(stage, %why, "waiting for topics");
            warned = Some(why.clone());
        }
        health.set_ready("topics", Err(why));
        tokio::select! {
            _ = stop.cancelled() => return Ok(false),
            _ = tokio::time::sleep(TOPIC_RECHECK) => {}
        }
    }
}
