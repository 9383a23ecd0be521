//! The dlq-sink stage (docs/design.md#dlq-sink): archives every record of `deliveries.dlq`,
//! `events.quarantine` and the attempt log `deliveries.attempts` durably (Avro object container files, partitioned by date and tenant,
//! each row with its Kafka coordinates) and commits only after the archive write is durable;
//! `inspect` and `replay` let operators list, count and re-send dead letters, and `trace`
//! shows a delivery's timeline from the attempt log or its archive, each
//! coordinate once even where a crash archived it twice, without touching the sink's
//! consumer group.

mod archive;
pub mod cli;
pub mod config;
mod dedup;
mod events;
pub mod filter;
pub mod inspect;
mod metrics;
pub mod replay;
pub mod row;
mod service;
pub mod source;
pub mod store;
pub mod trace;

use hookline_envelope::{TopicError, Topics};
use hookline_runtime::{ops::Ops, topic_check, RuntimeError};
use tokio_util::sync::CancellationToken;

pub use config::{Config, SinkArgs};
pub use store::{ArchiveArgs, ArchiveStore, StoreError};

/// The stage name used in metrics and logs.
pub const STAGE: &str = "dlq_sink";

/// Why the dlq-sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum DlqSinkError {
    /// A shared adapter failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The topic prefix makes illegal topic names.
    #[error("invalid --topic-prefix: {0}")]
    Topics(#[from] TopicError),
    /// A flag has an unusable value.
    #[error("invalid {flag}: {why}")]
    Config {
        /// The flag and its environment variable.
        flag: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The archive could not be opened or written.
    #[error("archive: {0}")]
    Store(#[from] StoreError),
    /// A row could not be encoded into an archive file.
    #[error(transparent)]
    Encode(#[from] archive::EncodeError),
    /// An archive file could not be finished.
    #[error("cannot finish an archive file")]
    Avro(#[source] apache_avro::Error),
}

/// Runs the sink until `shutdown` is cancelled: open files are written and offsets
/// committed before it returns.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), DlqSinkError> {
    let topics = Topics::with_prefix(&config.common.topic_prefix)?;
    let limits = config.sink.limits()?;
    let store = ArchiveStore::open(&config.archive, true)?;
    let cleaned = store.clean_temp_files();
    let ops = Ops::start(
        config
            .common
            .http_addr_or(hookline_runtime::config::default_port::DLQ_SINK),
        STAGE,
    )
    .await?;
    metrics::describe();
    // Counted once the recorder is in place.
    if cleaned > 0 {
        events::TempFilesRemoved { removed: cleaned }.emit();
    }
    ops.health
        .set_ready(STAGE, Err("waiting for topics".into()));
    let result = async {
        let mut needed = vec![topics.dlq(), topics.quarantine()];
        if config.sink.archive_attempts {
            needed.push(topics.attempts());
        }
        if !topic_check::wait_for_topics(
            &config.common,
            &needed,
            &topic_check::topics_hint(&config.common),
            &ops.health,
            STAGE,
            &shutdown,
        )
        .await?
        {
            return Ok(());
        }
        service::SinkLoop::new(
            &config,
            topics.clone(),
            store,
            limits,
            ops.health.clone(),
            shutdown.clone(),
        )?
        .run()
        .await
    }
    .await;
    ops.health.set_draining();
    ops.stop().await;
    result
}
