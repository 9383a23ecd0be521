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
use hookline_runtime::kafka::{Offsets, ReadCommitted, StartAt};
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

/// The replication factor of the topics [`create_topics`] makes:
/// `HOOKLINE_TEST_REPLICATION` when set (3 on the three-broker cluster of
/// `deploy/dev/kafka.sh cluster`, to measure what replication costs), else 1,
/// the one-broker development Kafka.
pub fn replication() -> anyhow::Result<i32> {
    match std::env::var("HOOKLINE_TEST_REPLICATION") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .with_context(|| format!("HOOKLINE_TEST_REPLICATION={v:?} is not a number")),
        _ => Ok(1),
    }
}

/// Creates topics (name, partitions) with [`replication`] (1 unless set) and
/// optional configs, waiting until they exist.
pub async fn create_topics(topics: &[(&str, i32)], configs: &[(&str, &str)]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        client_config().create().context("creating admin client")?;
    let replication = replication()?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(name, partitions)| {
            configs.iter().fold(
                NewTopic::new(name, *partitions, TopicReplication::Fixed(replication)),
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
        .read_committed(StartAt::Earliest, Offsets::Explicit)
        .create()
        .expect("creating test consumer")
}

/// Creates every hookline topic for `prefix` (3 partitions each, the
/// tables keyed by subscription compacted) and returns their names.
pub async fn create_hookline_topics(prefix: &str) -> anyhow::Result<hookline_envelope::Topics> {
    let topics = hookline_envelope::Topics::with_prefix(prefix)?;
    let plain: Vec<(&str, i32)> = topics
        .all()
        .into_iter()
        .filter(|t| !topics.tables().contains(t))
        .map(|t| (t, 3))
        .collect();
    create_topics(&plain, &[]).await?;
    create_topics(
        &topics.tables().map(|t| (t, 3)),
        &[("cleanup.policy", "compact")],
    )
    .await?;
    Ok(topics)
}

/// `call` (a metadata or watermark request), asked again while the broker
/// answers with an error, for up to 30 s: after a broker restart or a leader
/// change the first answers are `NotLeaderForPartition` or a timeout, and a
/// check that reads the topics must wait that out, not fail the run.
fn transient<T>(
    what: &str,
    mut call: impl FnMut() -> rdkafka::error::KafkaResult<T>,
) -> anyhow::Result<T> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match call() {
            Ok(v) => return Ok(v),
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "{what}: asking again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("{what} for 30 s"))),
        }
    }
}

/// Reads every committed record of `topic` from the beginning up to the end of
/// each partition as it is when the call starts, by assignment (no group).
///
/// The end is the high watermark, not the last stable offset: a transaction's
/// commit returns to its producer (and its offsets become visible to
/// `OffsetFetch`) before the coordinator has written the commit markers to
/// every partition, and a `read_committed` reader reaches "end of partition" at
/// the last stable offset. Reading right after a group committed to its end
/// could therefore stop before records committed in the same transaction
/// (seen in CI: the dead letters of one partition missing). So the read starts
/// only once every partition's last stable offset has reached the high
/// watermark seen at the start.
pub async fn read_to_end(topic: &str) -> anyhow::Result<Vec<rdkafka::message::OwnedMessage>> {
    use rdkafka::{
        consumer::{BaseConsumer, Consumer},
        message::Message,
        Offset, TopicPartitionList,
    };
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let consumer: BaseConsumer = client_config()
            .set("group.id", unique_name("reader"))
            .set("enable.partition.eof", "true")
            .read_committed(StartAt::Earliest, Offsets::Explicit)
            .create()?;
        let metadata = transient("reading metadata", || {
            consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))
        })?;
        let partitions: Vec<i32> = metadata
            .topics()
            .first()
            .map(|t| t.partitions().iter().map(|p| p.id()).collect())
            .unwrap_or_default();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let uncommitted: BaseConsumer = client_config()
            .set("group.id", unique_name("reader"))
            .set("isolation.level", "read_uncommitted")
            .create()?;
        for p in &partitions {
            let (_, high) = transient("reading watermarks", || {
                uncommitted.fetch_watermarks(&topic, *p, Duration::from_secs(10))
            })?;
            // On a `read_committed` client the "high" answered is the last stable offset.
            loop {
                let (_, stable) = transient("reading the last stable offset", || {
                    consumer.fetch_watermarks(&topic, *p, Duration::from_secs(10))
                })?;
                if stable >= high {
                    break;
                }
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "{topic} [{p}]: a transaction stayed open below offset {high} for 120 s (last stable offset {stable})"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let mut tpl = TopicPartitionList::new();
        for p in &partitions {
            tpl.add_partition_offset(&topic, *p, Offset::Beginning)?;
        }
        consumer.assign(&tpl)?;
        let mut open: std::collections::HashSet<i32> = partitions.into_iter().collect();
        let mut out = Vec::new();
        while !open.is_empty() {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "reading {topic} did not reach the end within 120 s"
            );
            match consumer.poll(Duration::from_millis(500)) {
                None => {}
                Some(Ok(m)) => out.push(m.detach()),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                    open.remove(&p);
                }
                Some(Err(e)) => return Err(e.into()),
            }
        }
        out.sort_by_key(|m| (m.partition(), m.offset()));
        Ok(out)
    })
    .await?
}

/// The offsets `group` has committed on `topic`, summed over partitions, and
/// the topic's summed high watermarks: equal when the group has consumed all.
pub async fn group_progress(group: &str, topic: &str) -> anyhow::Result<(i64, i64)> {
    use rdkafka::consumer::Consumer;
    let (group, topic) = (group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let (consumer, committed) = committed_on(&group, &topic)?;
        let mut high_sum = 0;
        for p in committed.keys() {
            let (_, high) = transient("reading watermarks", || {
                consumer.fetch_watermarks(&topic, *p, Duration::from_secs(10))
            })?;
            high_sum += high;
        }
        let committed_sum = committed.values().map(|o| o.unwrap_or(0)).sum();
        Ok((committed_sum, high_sum))
    })
    .await?
}

/// The offsets `group` has committed on each partition of `topic` (none for a
/// partition it never committed).
pub async fn committed_by_partition(
    group: &str,
    topic: &str,
) -> anyhow::Result<std::collections::BTreeMap<i32, i64>> {
    let (group, topic) = (group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let (_, committed) = committed_on(&group, &topic)?;
        Ok(committed
            .into_iter()
            .filter_map(|(p, o)| Some((p, o?)))
            .collect())
    })
    .await?
}

/// A consumer in `group` (never subscribing) and the group's committed offset
/// of every partition of `topic` (`None` where it never committed).
fn committed_on(
    group: &str,
    topic: &str,
) -> anyhow::Result<(
    rdkafka::consumer::BaseConsumer,
    std::collections::BTreeMap<i32, Option<i64>>,
)> {
    use rdkafka::{
        consumer::{BaseConsumer, Consumer},
        Offset, TopicPartitionList,
    };
    let consumer: BaseConsumer = client_config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let metadata = transient("reading metadata", || {
        consumer.fetch_metadata(Some(topic), Duration::from_secs(10))
    })?;
    let mut tpl = TopicPartitionList::new();
    for p in metadata
        .topics()
        .first()
        .map(|t| t.partitions())
        .unwrap_or_default()
    {
        tpl.add_partition(topic, p.id());
    }
    let committed = committed_offsets(&consumer, tpl)?
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => (e.partition(), Some(o)),
            _ => (e.partition(), None),
        })
        .collect();
    Ok((consumer, committed))
}

/// The group's committed offsets, asked again while the group coordinator is
/// not there yet: on a fresh broker `__consumer_offsets` is still loading
/// and the first OffsetFetch can be answered `NotCoordinator` (seen failing
/// a dispatcher test on its first run on a new broker).
fn committed_offsets(
    consumer: &rdkafka::consumer::BaseConsumer,
    tpl: rdkafka::TopicPartitionList,
) -> anyhow::Result<rdkafka::TopicPartitionList> {
    use rdkafka::{consumer::Consumer, types::RDKafkaErrorCode};
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
            Err(e)
                if std::time::Instant::now() < deadline
                    && matches!(
                        e.rdkafka_error_code(),
                        Some(
                            RDKafkaErrorCode::NotCoordinator
                                | RDKafkaErrorCode::CoordinatorLoadInProgress
                                | RDKafkaErrorCode::CoordinatorNotAvailable
                        )
                    ) =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return Ok(other?),
        }
    }
}

/// Waits until `group` has committed every record of `topic` (as far as its
/// end when asked), asking again on an error until the deadline; the panic
/// says what was last seen. The end of a partition is its last committed
/// record's offset + 1, not the high watermark: a topic written in
/// transactions ends with a commit marker, which no consumer is handed and so
/// none commits past.
pub async fn wait_committed_to_end(group: &str, topic: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let progress = match (group_progress(group, topic).await, records_end(topic).await) {
            (Ok((committed, _high)), Ok(end)) => Ok((committed, end)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        // At or past it: a consumer that commits its position is past the
        // trailing markers too.
        if let Ok((committed, end)) = progress {
            if committed >= end {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "group {group} did not commit {topic} to its end within {within:?}: last seen (committed, end) = {progress:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The sum over `topic`'s partitions of their last committed record's
/// offset + 1 (0 for an empty partition), read with `read_committed`.
pub async fn records_end(topic: &str) -> anyhow::Result<i64> {
    use rdkafka::message::Message;
    let mut ends = std::collections::BTreeMap::new();
    for m in read_to_end(topic).await? {
        let end = ends.entry(m.partition()).or_insert(0);
        *end = (m.offset() + 1).max(*end);
    }
    Ok(ends.values().sum())
}

/// Produces many records quickly (pipelined, idempotent), waiting for every
/// acknowledgement; keys and values are copied into the producer at once.
pub async fn produce_many(
    producer: &FutureProducer,
    topic: &str,
    records: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
) -> anyhow::Result<usize> {
    use rdkafka::{error::KafkaError, producer::FutureRecord, types::RDKafkaErrorCode};
    let mut pending = std::collections::VecDeque::new();
    let mut count = 0;
    for (key, value) in records {
        loop {
            match producer.send_result(FutureRecord::to(topic).key(&key).payload(&value)) {
                Ok(f) => {
                    pending.push_back(f);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    if let Some(f) = pending.pop_front() {
                        f.await?.map_err(|(e, _)| e)?;
                    } else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        count += 1;
    }
    for f in pending {
        f.await?.map_err(|(e, _)| e)?;
    }
    Ok(count)
}
