//! `hookline-fanout events publish`: writes one domain event to `events`, keyed
//! by its tenant, for a first try or a smoke test without kcat or an Avro
//! encoder of one's own. Services publish their events themselves; this is for
//! people.

use std::{io::Write, path::PathBuf, time::SystemTime};

use clap::{Args, Subcommand};
use hookline_core::epoch;
use hookline_envelope::{encode, DomainEvent, Topics};
use hookline_runtime::{config::CommonArgs, kafka};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::cli::CliError;

/// `events` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum EventsCmd {
    /// Publish one domain event to `events` (Avro, keyed by tenant).
    Publish(PublishArgs),
}

/// Arguments of `events publish`.
#[derive(Debug, Clone, Args)]
pub struct PublishArgs {
    /// The owning tenant (the Kafka key).
    #[arg(long, env = "HOOKLINE_EVENT_TENANT")]
    pub tenant: String,
    /// The dotted event type, e.g. `order.created`.
    #[arg(long = "event-type", env = "HOOKLINE_EVENT_TYPE")]
    pub event_type: String,
    /// The event id (default: `evt_` and the time in ns); a second publish with
    /// the same id is a duplicate, fanned out once.
    #[arg(long = "id", env = "HOOKLINE_EVENT_ID")]
    pub id: Option<String>,
    /// The payload, the exact webhook body.
    #[arg(
        long,
        env = "HOOKLINE_EVENT_DATA",
        conflicts_with = "data_file",
        required_unless_present = "data_file"
    )]
    pub data: Option<String>,
    /// A file holding the payload.
    #[arg(long, env = "HOOKLINE_EVENT_DATA_FILE")]
    pub data_file: Option<PathBuf>,
    /// Media type of the payload.
    #[arg(
        long,
        env = "HOOKLINE_EVENT_CONTENT_TYPE",
        default_value = "application/json"
    )]
    pub content_type: String,
}

/// Runs an `events` subcommand, writing what it did to `out`.
pub async fn run(common: &CommonArgs, cmd: EventsCmd, out: &mut dyn Write) -> Result<(), CliError> {
    let EventsCmd::Publish(args) = cmd;
    let topics = Topics::with_prefix(&common.topic_prefix)?;
    let payload = match (&args.data, &args.data_file) {
        (Some(data), _) => data.clone().into_bytes(),
        (None, Some(path)) => std::fs::read(path).map_err(|e| CliError::File {
            path: path.clone(),
            why: e.to_string(),
        })?,
        (None, None) => Vec::new(),
    };
    let now = SystemTime::now();
    let event_id = args.id.clone().unwrap_or_else(|| {
        let ns = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        format!("evt_{ns}")
    });
    let event = DomainEvent {
        event_id: event_id.clone(),
        tenant_id: args.tenant.clone(),
        event_type: args.event_type.clone(),
        occurred_at: epoch::millis(now),
        content_type: args.content_type.clone(),
        payload,
        attributes: Default::default(),
    };
    let producer: FutureProducer = kafka::producer_config(common, "hookline-events-cli")?
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .map_err(|e| hookline_runtime::RuntimeError::kafka("creating the producer", e))?;
    let topic = topics.events();
    let value = encode(&event);
    producer
        .send(
            FutureRecord::to(topic).key(&args.tenant).payload(&value),
            std::time::Duration::from_secs(30),
        )
        .await
        .map_err(|(e, _)| CliError::Write {
            id: event_id.clone(),
            topic: topic.to_owned(),
            why: e.to_string(),
        })?;
    writeln!(out, "published {event_id} ({}) to {topic}", args.event_type)?;
    Ok(())
}
