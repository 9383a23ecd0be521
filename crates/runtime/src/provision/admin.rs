//! The Kafka side of provisioning: reads what the cluster has (metadata and
//! `DescribeConfigs`) and carries out a plan (`CreateTopics`, `AlterConfigs`,
//! `CreatePartitions`). It decides nothing.
//!
//! rdkafka 0.39 wraps only the non-incremental `AlterConfigs`, which replaces a
//! topic's whole override set; the plan therefore carries the complete set.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use rdkafka::{
    admin::{
        AdminClient, AdminOptions, AlterConfig, ConfigSource, NewPartitions, NewTopic,
        ResourceSpecifier, TopicReplication,
    },
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    ClientConfig,
};

use super::{plan::Action, ObservedTopic, ProvisionError};

fn kafka(context: impl Into<String>, source: KafkaError) -> ProvisionError {
    ProvisionError::Kafka {
        context: context.into(),
        source,
    }
}

/// An admin connection to one cluster.
pub struct Admin {
    config: ClientConfig,
    client: AdminClient<DefaultClientContext>,
    timeout: Duration,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Admin {
    /// Connects with `config` (bootstrap and passthrough already applied);
    /// every request waits at most `timeout`.
    pub fn new(config: ClientConfig, timeout: Duration) -> Result<Self, ProvisionError> {
        let client = config
            .create()
            .map_err(|e| kafka("creating the admin client", e))?;
        Ok(Self {
            config,
            client,
            timeout,
        })
    }

    fn options(&self) -> AdminOptions {
        AdminOptions::new()
            .request_timeout(Some(self.timeout))
            .operation_timeout(Some(self.timeout))
    }

    /// Partition counts, replication and configs of those of `names` that exist.
    pub async fn observe(
        &self,
        names: &[&str],
    ) -> Result<BTreeMap<String, ObservedTopic>, ProvisionError> {
        let shape = self.partitions(names).await?;
        let specifiers: Vec<ResourceSpecifier<'_>> = shape
            .keys()
            .map(|name| ResourceSpecifier::Topic(name))
            .collect();
        let mut observed = BTreeMap::new();
        if specifiers.is_empty() {
            return Ok(observed);
        }
        let results = self
            .client
            .describe_configs(&specifiers, &self.options())
            .await
            .map_err(|e| kafka("describing topic configs", e))?;
        for (result, (name, (partitions, replication))) in results.into_iter().zip(&shape) {
            let resource = result.map_err(|code| ProvisionError::Topic {
                what: "DescribeConfigs",
                topic: name.clone(),
                code,
            })?;
            let mut topic = ObservedTopic {
                partitions: *partitions,
                replication: *replication,
                ..ObservedTopic::default()
            };
            for entry in resource.entries {
                let Some(value) = entry.value else { continue };
                if entry.source == ConfigSource::DynamicTopic {
                    topic.overrides.insert(entry.name.clone(), value.clone());
                }
                topic.effective.insert(entry.name, value);
            }
            observed.insert(name.clone(), topic);
        }
        Ok(observed)
    }

    /// The cluster's metadata (all topics).
    async fn metadata(&self) -> Result<rdkafka::metadata::Metadata, ProvisionError> {
        let consumer: BaseConsumer = self
            .config
            .create()
            .map_err(|e| kafka("creating the metadata client", e))?;
        let timeout = self.timeout;
        tokio::task::spawn_blocking(move || consumer.fetch_metadata(None, timeout))
            .await
            .map_err(|e| kafka(format!("metadata task failed: {e}"), KafkaError::Canceled))?
            .map_err(|e| kafka("reading cluster metadata", e))
    }

    /// How many brokers the cluster's metadata lists.
    pub async fn brokers(&self) -> Result<usize, ProvisionError> {
        Ok(self.metadata().await?.brokers().len())
    }

    /// `(partitions, replication)` of those of `names` that exist.
    async fn partitions(
        &self,
        names: &[&str],
    ) -> Result<BTreeMap<String, (i32, i32)>, ProvisionError> {
        let metadata = self.metadata().await?;
        Ok(metadata
            .topics()
            .iter()
            .filter(|t| names.contains(&t.name()) && t.error().is_none())
            .filter(|t| !t.partitions().is_empty())
            .map(|t| {
                let replication = t.partitions()[0].replicas().len() as i32;
                (
                    t.name().to_owned(),
                    (t.partitions().len() as i32, replication),
                )
            })
            .collect())
    }

    /// Carries out `actions` in order, then waits until created topics show
    /// in metadata so a following run sees them.
    pub async fn apply(&self, actions: &[Action]) -> Result<(), ProvisionError> {
        let opts = self.options();
        let mut created = Vec::new();
        for action in actions {
            match action {
                Action::Create(spec) => {
                    let topic = spec.configs.iter().fold(
                        NewTopic::new(
                            &spec.name,
                            spec.partitions,
                            TopicReplication::Fixed(spec.replication),
                        ),
                        |t, (k, v)| t.set(k, v),
                    );
                    let results = self
                        .client
                        .create_topics([&topic], &opts)
                        .await
                        .map_err(|e| kafka(format!("creating {}", spec.name), e))?;
                    check(results, "CreateTopics")?;
                    created.push(spec.name.as_str());
                }
                Action::AlterConfigs { topic, set, .. } => {
                    let alter = set.iter().fold(
                        AlterConfig::new(ResourceSpecifier::Topic(topic)),
                        |a, (k, v)| a.set(k, v),
                    );
                    let results = self
                        .client
                        .alter_configs([&alter], &opts)
                        .await
                        .map_err(|e| kafka(format!("altering configs of {topic}"), e))?;
                    for result in results {
                        result.map_err(|(_, code)| ProvisionError::Topic {
                            what: "AlterConfigs",
                            topic: topic.clone(),
                            code,
                        })?;
                    }
                }
                Action::AddPartitions { topic, to, .. } => {
                    let new = NewPartitions::new(topic, *to as usize);
                    let results = self
                        .client
                        .create_partitions([&new], &opts)
                        .await
                        .map_err(|e| kafka(format!("adding partitions to {topic}"), e))?;
                    check(results, "CreatePartitions")?;
                }
            }
        }
        self.wait_visible(&created).await
    }

    async fn wait_visible(&self, names: &[&str]) -> Result<(), ProvisionError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let seen = self.partitions(names).await?;
            if names.iter().all(|n| seen.contains_key(*n)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let missing: Vec<&str> = names
                    .iter()
                    .filter(|n| !seen.contains_key(**n))
                    .copied()
                    .collect();
                return Err(kafka(
                    format!(
                        "created topics not visible in metadata: {}",
                        missing.join(", ")
                    ),
                    KafkaError::Canceled,
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn check(
    results: Vec<rdkafka::admin::TopicResult>,
    what: &'static str,
) -> Result<(), ProvisionError> {
    for result in results {
        result.map_err(|(topic, code)| ProvisionError::Topic { what, topic, code })?;
    }
    Ok(())
}
