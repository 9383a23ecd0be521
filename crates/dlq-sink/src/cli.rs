//! What `inspect` and `replay` share: where to read, the error type and the exit codes.

use clap::Args;
use hookline_envelope::{TopicError, Topics};
use hookline_runtime::{config::CommonArgs, RuntimeError};

use crate::{
    filter::{Filter, FilterError},
    row::Kind,
    source::{ArchiveSource, Source, SourceError, TopicSource},
    store::{ArchiveArgs, ArchiveStore, StoreError},
    DlqSinkError,
};

/// Success: the sink stopped cleanly, `inspect` ran, `replay` previewed or wrote every
/// matching record.
pub const EXIT_OK: i32 = 0;
/// A bad flag, filter or configuration; nothing was read or written.
pub const EXIT_USAGE: i32 = 1;
/// `replay`: some matching records could not be replayed or were refused (see the summary).
pub const EXIT_PARTIAL: i32 = 2;
/// `replay`: no record matched the filters; nothing was written.
pub const EXIT_NOTHING_MATCHED: i32 = 3;
/// Kafka or the archive could not be read or written.
pub const EXIT_FAILED: i32 = 4;

/// The exit codes, for `--help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success: the sink stopped cleanly; inspect ran; replay previewed or wrote
     every matching record
  1  usage: a bad flag, filter or configuration (nothing read or written)
  2  replay: some matching records could not be replayed, or were refused
     (a quarantined record whose source topic is not events, deliveries or a
     retry tier of this prefix); see the summary
  3  replay: no record matched the filters (nothing written)
  4  failure: Kafka or the archive could not be read or written";

/// Where `inspect` and `replay` read.
#[derive(Debug, Clone, Default, Args)]
pub struct SourceArgs {
    /// Read the archive (--archive-url) instead of the topic.
    #[arg(long, env = "HOOKLINE_FROM_ARCHIVE")]
    pub from_archive: bool,

    /// Read `events.quarantine` instead of `deliveries.dlq`. `replay` writes each
    /// quarantined record back to its source topic (`events`, `deliveries` or a retry tier).
    #[arg(long, env = "HOOKLINE_QUARANTINE")]
    pub quarantine: bool,
}

impl SourceArgs {
    /// Which kind of record is read.
    pub fn kind(&self) -> Kind {
        if self.quarantine {
            Kind::Quarantine
        } else {
            Kind::Dlq
        }
    }
}

/// Why a subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag combination or value that cannot be used.
    #[error("{0}")]
    Usage(String),
    /// A bad filter.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// The topic prefix is invalid.
    #[error("invalid --topic-prefix or tier: {0}")]
    Topics(#[from] TopicError),
    /// Reading failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Kafka failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Output could not be written.
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        Self::Source(SourceError::Store(e))
    }
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Usage(_) | Self::Filter(_) | Self::Topics(_) => EXIT_USAGE,
            Self::Source(SourceError::Store(StoreError::Url { .. })) => EXIT_USAGE,
            Self::Runtime(e) => runtime_exit_code(e),
            Self::Source(SourceError::Runtime(e)) => runtime_exit_code(e),
            Self::Source(_) | Self::Io(_) => EXIT_FAILED,
        }
    }
}

impl DlqSinkError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Config { .. } | Self::Topics(_) | Self::Store(StoreError::Url { .. }) => {
                EXIT_USAGE
            }
            Self::Runtime(e) => runtime_exit_code(e),
            _ => EXIT_FAILED,
        }
    }
}

fn runtime_exit_code(e: &RuntimeError) -> i32 {
    match e {
        RuntimeError::Passthrough { .. }
        | RuntimeError::PassthroughFile { .. }
        | RuntimeError::Bind { .. }
        | RuntimeError::Logging(_) => EXIT_USAGE,
        _ => EXIT_FAILED,
    }
}

/// Opens the topic or archive named by `args`.
pub(crate) async fn open_source(
    common: &CommonArgs,
    archive: &ArchiveArgs,
    args: &SourceArgs,
    filter: &Filter,
) -> Result<Source, CliError> {
    open_kind(common, archive, args.kind(), args.from_archive, filter).await
}

/// Opens the topic or the archive files of `kind`.
pub(crate) async fn open_kind(
    common: &CommonArgs,
    archive: &ArchiveArgs,
    kind: Kind,
    from_archive: bool,
    filter: &Filter,
) -> Result<Source, CliError> {
    if kind == Kind::Quarantine && filter.uses_delivery_fields() {
        return Err(CliError::Usage(
            "--subscription and --event-type do not apply with --quarantine: quarantined \
             events could not be decoded, so they have neither"
                .into(),
        ));
    }
    if from_archive {
        let store = ArchiveStore::open(archive, false)?;
        tracing::info!(archive = %store, kind = kind.as_str(), "reading the archive");
        return Ok(Source::Archive(
            ArchiveSource::open(store, kind, filter).await?,
        ));
    }
    let topics = Topics::with_prefix(&common.topic_prefix)?;
    let topic = match kind {
        Kind::Dlq => topics.dlq(),
        Kind::Quarantine => topics.quarantine(),
        Kind::Attempts => topics.attempts(),
    };
    tracing::info!(%topic, "reading the topic by assignment, up to its end at start");
    Ok(Source::Topic(TopicSource::open(common, topic, kind).await?))
}
