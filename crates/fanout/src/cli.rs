//! `hookline-fanout subscriptions put|get|enable|disable|delete|list`: manage the compacted
//! `subscriptions` topic. Every input is validated before anything is
//! written; one bad subscription in a file writes none of them.

use std::{
    io::Write,
    path::PathBuf,
    time::{Duration, SystemTime},
};

use clap::{Args, Subcommand, ValueEnum};
use hookline_core::{epoch, matching::EventTypeFilter, RateLimit};
use hookline_envelope::{encode, Subscription, Topics};
use hookline_runtime::{config::CommonArgs, kafka, subscriptions};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::{
    de::{
        value::{MapAccessDeserializer, SeqAccessDeserializer},
        MapAccess, SeqAccess, Visitor,
    },
    Deserialize, Deserializer, Serialize,
};

/// How long the CLI waits for the table to load or a write to be acknowledged.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_ID_LEN: usize = 128;
const MAX_IN_FLIGHT: i32 = 1000;

/// `subscriptions` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum SubscriptionsCmd {
    /// Create or update subscriptions (from flags or a JSON/YAML file); bumps `version`.
    /// An existing subscription keeps its enabled state unless --enabled (or the
    /// file's `enabled`) says otherwise.
    Put(PutArgs),
    /// Print one subscription's current record (JSON, which is also YAML).
    Get {
        /// The subscription id.
        #[arg(long = "id", env = "HOOKLINE_SUBSCRIPTION_ID")]
        id: String,
    },
    /// Enable a subscription: rewrites its latest record with `enabled: true`,
    /// `disabled_reason` and `disabled_at` cleared, and the next version. Its
    /// deliveries dead-lettered as `subscription_disabled` meanwhile come back
    /// with `hookline-dlq-sink replay --subscription ID`.
    Enable {
        /// The subscription id.
        #[arg(long = "id", env = "HOOKLINE_SUBSCRIPTION_ID")]
        id: String,
    },
    /// Disable (pause) a subscription: rewrites its latest record with
    /// `enabled: false`, `disabled_reason: operator`, `disabled_at` now and the
    /// next version; nothing else changes.
    Disable {
        /// The subscription id.
        #[arg(long = "id", env = "HOOKLINE_SUBSCRIPTION_ID")]
        id: String,
    },
    /// Delete a subscription (writes a tombstone).
    Delete {
        /// The subscription id.
        #[arg(long = "id", env = "HOOKLINE_SUBSCRIPTION_ID")]
        id: String,
    },
    /// List subscriptions.
    List {
        /// Only this tenant's subscriptions.
        #[arg(long, env = "HOOKLINE_SUBSCRIPTION_TENANT")]
        tenant: Option<String>,
        /// Output format.
        #[arg(long, env = "HOOKLINE_SUBSCRIPTIONS_OUTPUT", value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// Output format of `list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// One JSON object per line.
    Json,
}

/// Arguments of `put`. The file format is documented in the README
/// ("Subscription files") with `deploy/dev/subscriptions.example.yaml`.
#[derive(Debug, Clone, Args)]
pub struct PutArgs {
    /// A JSON or YAML file with one subscription or a list of them.
    #[arg(long, env = "HOOKLINE_SUBSCRIPTIONS_FILE",
          conflicts_with_all = ["id", "tenant", "url", "event_types", "secret_ref", "enabled", "disabled"])]
    pub file: Option<PathBuf>,
    /// Subscription id.
    #[arg(
        long = "id",
        env = "HOOKLINE_SUBSCRIPTION_ID",
        required_unless_present = "file"
    )]
    pub id: Option<String>,
    /// Owning tenant.
    #[arg(
        long,
        env = "HOOKLINE_SUBSCRIPTION_TENANT",
        required_unless_present = "file"
    )]
    pub tenant: Option<String>,
    /// Endpoint URL (https).
    #[arg(
        long,
        env = "HOOKLINE_SUBSCRIPTION_URL",
        required_unless_present = "file"
    )]
    pub url: Option<String>,
    /// Event type or `prefix.*` pattern; repeatable (comma-separated in the
    /// environment).
    #[arg(
        long = "event-type",
        env = "HOOKLINE_SUBSCRIPTION_EVENT_TYPES",
        value_delimiter = ',',
        required_unless_present = "file"
    )]
    pub event_types: Vec<String>,
    /// Name of the signing secret (a file in the dispatcher's secrets directory).
    #[arg(
        long,
        env = "HOOKLINE_SUBSCRIPTION_SECRET_REF",
        required_unless_present = "file"
    )]
    pub secret_ref: Option<String>,
    /// Concurrent attempts to this endpoint; 1 keeps event order.
    #[arg(long, env = "HOOKLINE_SUBSCRIPTION_MAX_IN_FLIGHT", default_value_t = 4)]
    pub max_in_flight: i32,
    /// Attempts per second cap for this endpoint.
    #[arg(long, env = "HOOKLINE_SUBSCRIPTION_RATE_LIMIT_PER_S")]
    pub rate_limit_per_s: Option<f64>,
    /// `strict`: one delivery at a time in event order, and one in backoff holds
    /// the later ones behind it (up to the dispatcher's `--strict-head-wait`);
    /// `max_in_flight` is then 1 whatever it says.
    #[arg(
        long,
        env = "HOOKLINE_SUBSCRIPTION_ORDERING",
        value_enum,
        default_value_t = Ordering::Unordered
    )]
    pub ordering: Ordering,
    /// Set the enabled state. Without it a new subscription is enabled and an
    /// existing one keeps its state (`subscriptions enable|disable` flip it alone).
    #[arg(long, env = "HOOKLINE_SUBSCRIPTION_ENABLED", value_name = "true|false")]
    pub enabled: Option<bool>,
    /// Same as `--enabled false`.
    #[arg(long, conflicts_with = "enabled")]
    pub disabled: bool,
    /// Accept `http://` URLs (development only; the dispatcher's egress policy
    /// must allow them too).
    #[arg(long, env = "HOOKLINE_SUBSCRIPTION_ALLOW_HTTP")]
    pub allow_http: bool,
}

/// A subscription as written by an operator, before validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionSpec {
    /// Subscription id.
    #[serde(alias = "id")]
    pub subscription_id: String,
    /// Owning tenant.
    #[serde(alias = "tenant")]
    pub tenant_id: String,
    /// Endpoint URL.
    pub url: String,
    /// Event types and patterns.
    pub event_types: Vec<String>,
    /// Secret name.
    pub secret_ref: String,
    /// `false` pauses it. Absent: a new subscription is enabled, an existing
    /// one keeps its state.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Concurrency cap.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: i32,
    /// Rate cap.
    #[serde(default)]
    pub rate_limit_per_s: Option<f64>,
    /// `unordered` (the default) or `strict`.
    #[serde(default)]
    pub ordering: Ordering,
}

fn default_max_in_flight() -> i32 {
    4
}

/// A subscription's `ordering`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Ordering {
    /// Up to `max_in_flight` at once; a delivery in backoff lets later ones pass.
    #[default]
    Unordered,
    /// One at a time in event order; one in backoff holds the later ones.
    Strict,
}

impl Ordering {
    /// The record's `ordering` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unordered => hookline_envelope::ORDERING_UNORDERED,
            Self::Strict => hookline_envelope::ORDERING_STRICT,
        }
    }
}

/// Why a command failed; every variant says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// One or more subscriptions are invalid; nothing was written.
    #[error("nothing written; invalid input:\n{}", .0.join("\n"))]
    Invalid(Vec<String>),
    /// The input file could not be read or parsed.
    #[error("cannot read {path}: {why}")]
    File { path: PathBuf, why: String },
    /// The subscription to delete does not exist.
    #[error("no subscription with id `{0}`; nothing written")]
    NotFound(String),
    /// Kafka failed.
    #[error(transparent)]
    Runtime(#[from] hookline_runtime::RuntimeError),
    /// The topic prefix is invalid.
    #[error("invalid --topic-prefix: {0}")]
    Topics(#[from] hookline_envelope::TopicError),
    /// A write was not acknowledged.
    #[error("writing {id} to {topic} failed: {why}")]
    Write {
        id: String,
        topic: String,
        why: String,
    },
    /// Output could not be written.
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
}

impl PutArgs {
    fn specs(&self) -> Result<Vec<SubscriptionSpec>, CliError> {
        if let Some(path) = &self.file {
            return read_specs(path);
        }
        Ok(vec![SubscriptionSpec {
            subscription_id: self.id.clone().unwrap_or_default(),
            tenant_id: self.tenant.clone().unwrap_or_default(),
            url: self.url.clone().unwrap_or_default(),
            event_types: self.event_types.clone(),
            secret_ref: self.secret_ref.clone().unwrap_or_default(),
            enabled: if self.disabled {
                Some(false)
            } else {
                self.enabled
            },
            max_in_flight: self.max_in_flight,
            rate_limit_per_s: self.rate_limit_per_s,
            ordering: self.ordering,
        }])
    }
}

/// Reads one spec or a list from JSON or YAML (YAML is a superset of JSON). A
/// parse error names the line and column and shows the lines around them.
pub fn read_specs(path: &PathBuf) -> Result<Vec<SubscriptionSpec>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError::File {
        path: path.clone(),
        why: e.to_string(),
    })?;
    let parsed: OneOrMany = serde_saphyr::from_str(&text).map_err(|e| CliError::File {
        path: path.clone(),
        why: format!(
            "not a subscription or a list of subscriptions: {}{}",
            e.location()
                .and_then(|at| item_at(&text, at.line()))
                .map(|(i, n)| format!("in item {i} of {n}: "))
                .unwrap_or_default(),
            yaml_error(&e, &path.display().to_string())
        ),
    })?;
    Ok(match parsed {
        OneOrMany::Many(v) => v,
        OneOrMany::One(s) => vec![*s],
    })
}

/// The file's content: a mapping is one subscription, a sequence a list of them.
/// Decided on the first event rather than by `#[serde(untagged)]`, which would try
/// both and report only that neither matched: this way the error of the one that
/// applies, with its line and column, reaches the operator.
enum OneOrMany {
    Many(Vec<SubscriptionSpec>),
    One(Box<SubscriptionSpec>),
}

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct OneOrManyVisitor;
        impl<'de> Visitor<'de> for OneOrManyVisitor {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a subscription (a mapping) or a list of subscriptions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<OneOrMany, A::Error> {
                Vec::deserialize(SeqAccessDeserializer::new(seq)).map(OneOrMany::Many)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<OneOrMany, A::Error> {
                SubscriptionSpec::deserialize(MapAccessDeserializer::new(map))
                    .map(|s| OneOrMany::One(Box::new(s)))
            }
        }
        d.deserialize_any(OneOrManyVisitor)
    }
}

/// Which item of a block-style YAML list (`- ` at column 1) holds 1-based
/// `line`, and how many items there are: `(item, of)`, both 1-based. `None`
/// for a single mapping or a flow-style (`[...]`, JSON) list.
fn item_at(text: &str, line: u64) -> Option<(usize, usize)> {
    let starts: Vec<u64> = text
        .lines()
        .zip(1..)
        .filter(|(l, _)| *l == "-" || l.starts_with("- "))
        .map(|(_, n)| n)
        .collect();
    let item = starts.iter().filter(|&&n| n <= line).count();
    (item > 0).then_some((item, starts.len()))
}

/// `message at line L, column C`, then, when the parser kept them, the lines around
/// that place with a caret under it (headed `--> file:L:C`). Messages are the
/// parser's wording for people rather than for the program's developers.
fn yaml_error(e: &serde_saphyr::Error, source: &str) -> String {
    let formatter = &serde_saphyr::UserMessageFormatter;
    let plain = e.render_with_options(serde_saphyr::render_options! {
        formatter: formatter,
        snippets: serde_saphyr::SnippetMode::Off,
    });
    let snippet = e.render_with_options(serde_saphyr::render_options! {
        formatter: formatter,
        source_name: Some(source),
    });
    // A snippet's first line repeats the message; the picture is what follows it.
    match snippet.split_once('\n') {
        Some((_, picture)) if !picture.trim().is_empty() => format!("{plain}\n{picture}"),
        _ => plain,
    }
}

/// Validates one spec; every problem is reported, prefixed by the id.
pub fn validate(spec: &SubscriptionSpec, allow_http: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let who = if spec.subscription_id.is_empty() {
        "<no id>".to_owned()
    } else {
        spec.subscription_id.clone()
    };
    let mut bad = |field: &str, why: String| problems.push(format!("  {who}: {field}: {why}"));
    check_name(&spec.subscription_id, "[A-Za-z0-9._:-]", |c| {
        c.is_ascii_alphanumeric() || "._:-".contains(c)
    })
    .unwrap_or_else(|why| bad("subscription_id", why));
    check_name(&spec.tenant_id, "[A-Za-z0-9._:-]", |c| {
        c.is_ascii_alphanumeric() || "._:-".contains(c)
    })
    .unwrap_or_else(|why| bad("tenant_id", why));
    check_name(&spec.secret_ref, "[A-Za-z0-9._-] (a Secret key)", |c| {
        c.is_ascii_alphanumeric() || "._-".contains(c)
    })
    .unwrap_or_else(|why| bad("secret_ref", why));
    match url::Url::parse(&spec.url) {
        Err(e) => bad("url", format!("`{}` is not a URL: {e}", spec.url)),
        Ok(u) => {
            match u.scheme() {
                "https" => {}
                "http" if allow_http => {}
                "http" => bad(
                    "url",
                    "http is refused; use https (or --allow-http for development)".into(),
                ),
                other => bad("url", format!("scheme `{other}` is refused; use https")),
            }
            if u.host_str().is_none_or(str::is_empty) {
                bad("url", "has no host".into());
            }
            if !u.username().is_empty() || u.password().is_some() {
                bad(
                    "url",
                    "must not carry credentials; use secret_ref for signing".into(),
                );
            }
            if u.fragment().is_some() {
                bad("url", "must not have a #fragment".into());
            }
            // The URL parser canonicalises `127.1` to 127.0.0.1, but the URL is
            // stored as written, and the dispatcher refuses such spellings.
            if let Some(ip) = raw_host(&spec.url).and_then(hookline_core::noncanonical_ipv4) {
                bad(
                    "url",
                    format!(
                        "host `{}` is a non-canonical spelling of {ip}; write it as {ip}",
                        raw_host(&spec.url).unwrap_or_default()
                    ),
                );
            }
        }
    }
    if let Err(e) = EventTypeFilter::parse(&spec.event_types) {
        bad("event_types", e.to_string());
    }
    if !(1..=MAX_IN_FLIGHT).contains(&spec.max_in_flight) {
        bad(
            "max_in_flight",
            format!("{} is outside 1..={MAX_IN_FLIGHT}", spec.max_in_flight),
        );
    }
    if let Err(e) = spec
        .rate_limit_per_s
        .map(RateLimit::try_per_second)
        .transpose()
    {
        bad("rate_limit_per_s", e.to_string());
    }
    problems
}

fn check_name(value: &str, allowed: &str, ok: impl Fn(char) -> bool) -> Result<(), String> {
    if value.is_empty() {
        return Err("is empty".into());
    }
    if value.len() > MAX_ID_LEN {
        return Err(format!("is longer than {MAX_ID_LEN} bytes"));
    }
    if let Some(c) = value.chars().find(|c| !ok(*c)) {
        return Err(format!("character {c:?} is not allowed; use {allowed}"));
    }
    Ok(())
}

/// Runs a `subscriptions` subcommand, writing results to `out`.
pub async fn run(
    common: &CommonArgs,
    cmd: SubscriptionsCmd,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let topics = Topics::with_prefix(&common.topic_prefix)?;
    let topic = topics.subscriptions();
    match cmd {
        SubscriptionsCmd::Put(args) => {
            let specs = args.specs()?;
            let from_file = args.file.is_some() && specs.len() > 1;
            let mut problems: Vec<String> = specs
                .iter()
                .enumerate()
                .flat_map(|(i, s)| {
                    let item = from_file.then(|| format!("item {} of {}, ", i + 1, specs.len()));
                    validate(s, args.allow_http)
                        .into_iter()
                        .map(move |p| match &item {
                            Some(item) => format!("  {item}{}", p.trim_start()),
                            None => p,
                        })
                })
                .collect();
            let mut seen = std::collections::HashSet::new();
            for s in &specs {
                if !seen.insert(&s.subscription_id) {
                    problems.push(format!("  {}: listed twice", s.subscription_id));
                }
            }
            if specs.is_empty() {
                problems.push("  the file holds no subscriptions".into());
            }
            if !problems.is_empty() {
                return Err(CliError::Invalid(problems));
            }
            let table = subscriptions::load_snapshot(common, topic, CLI_TIMEOUT).await?;
            let producer = producer(common)?;
            let now = epoch::millis(SystemTime::now());
            for spec in specs {
                let held = table.get(&spec.subscription_id);
                let version = held.as_ref().map_or(1, |held| held.record.version + 1);
                // Never flipped unless asked: absent means "as it is" (new: enabled).
                let was = held.as_ref().map(|h| h.record.enabled);
                let enabled = spec.enabled.or(was).unwrap_or(true);
                let kept = match (spec.enabled, was) {
                    (None, Some(false)) => " (kept disabled; --enabled true enables it)",
                    _ => "",
                };
                let record = Subscription {
                    subscription_id: spec.subscription_id,
                    tenant_id: spec.tenant_id,
                    url: spec.url,
                    event_types: spec.event_types,
                    secret_ref: spec.secret_ref,
                    enabled,
                    max_in_flight: spec.max_in_flight,
                    rate_limit_per_s: spec.rate_limit_per_s,
                    ordering: spec.ordering.as_str().to_owned(),
                    // Kept with the state it explains; set or cleared with it.
                    disabled_reason: None,
                    disabled_at: None,
                    version,
                    updated_at: now,
                };
                let record = match (&held, spec.enabled) {
                    // Still disabled: why and since when stay as they were.
                    (Some(h), None | Some(false)) if !h.record.enabled => Subscription {
                        disabled_reason: h.record.disabled_reason.clone(),
                        disabled_at: h.record.disabled_at,
                        ..record
                    },
                    (_, Some(false)) => Subscription {
                        disabled_reason: Some(
                            subscriptions::DisabledReason::Operator.as_str().to_owned(),
                        ),
                        disabled_at: Some(now),
                        ..record
                    },
                    _ => record,
                };
                write(
                    &producer,
                    topic,
                    &record.subscription_id,
                    Some(&encode(&record)),
                )
                .await?;
                writeln!(
                    out,
                    "put {} version {version}{kept}",
                    record.subscription_id
                )?;
            }
        }
        SubscriptionsCmd::Get { id } => {
            let table = subscriptions::load_snapshot(common, topic, CLI_TIMEOUT).await?;
            let held = table.get(&id).ok_or(CliError::NotFound(id))?;
            let text = serde_json::to_string_pretty(&held.record)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            writeln!(out, "{text}")?;
        }
        SubscriptionsCmd::Enable { id } => set_enabled(common, topic, &id, true, out).await?,
        SubscriptionsCmd::Disable { id } => set_enabled(common, topic, &id, false, out).await?,
        SubscriptionsCmd::Delete { id } => {
            let table = subscriptions::load_snapshot(common, topic, CLI_TIMEOUT).await?;
            if table.get(&id).is_none() {
                return Err(CliError::NotFound(id));
            }
            write(&producer(common)?, topic, &id, None).await?;
            writeln!(out, "deleted {id}")?;
        }
        SubscriptionsCmd::List { tenant, output } => {
            let table = subscriptions::load_snapshot(common, topic, CLI_TIMEOUT).await?;
            let subs: Vec<_> = table
                .all()
                .into_iter()
                .filter(|s| tenant.as_deref().is_none_or(|t| s.record.tenant_id == t))
                .collect();
            match output {
                Output::Json => {
                    for s in &subs {
                        let line = serde_json::to_string(&s.record)
                            .map_err(|e| std::io::Error::other(e.to_string()))?;
                        writeln!(out, "{line}")?;
                    }
                }
                Output::Table => print_table(out, &subs)?,
            }
        }
    }
    Ok(())
}

/// Rewrites `id`'s latest record with `enabled` and the next version, leaving
/// every other field as it is; says so and writes nothing when it already is.
async fn set_enabled(
    common: &CommonArgs,
    topic: &str,
    id: &str,
    enabled: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let table = subscriptions::load_snapshot(common, topic, CLI_TIMEOUT).await?;
    let held = table
        .get(id)
        .ok_or_else(|| CliError::NotFound(id.to_owned()))?;
    let state = if enabled { "enabled" } else { "disabled" };
    if held.record.enabled == enabled {
        writeln!(
            out,
            "{id} is already {state} (version {}); nothing written",
            held.record.version
        )?;
        return Ok(());
    }
    // disable records who and when (`operator`, now); enable clears both.
    let now = epoch::millis(SystemTime::now());
    let record = if enabled {
        subscriptions::enabled(&held.record, now)
    } else {
        subscriptions::disabled(&held.record, subscriptions::DisabledReason::Operator, now)
    };
    write(&producer(common)?, topic, id, Some(&encode(&record))).await?;
    writeln!(out, "{state} {id} version {}", record.version)?;
    Ok(())
}

fn print_table(
    out: &mut dyn Write,
    subs: &[std::sync::Arc<subscriptions::LiveSubscription>],
) -> std::io::Result<()> {
    let header = [
        "ID",
        "TENANT",
        "ENABLED",
        "INFLIGHT",
        "ORDERING",
        "VERSION",
        "EVENT TYPES",
        "URL",
    ];
    let rows: Vec<[String; 8]> = subs
        .iter()
        .map(|s| {
            let r = &s.record;
            [
                r.subscription_id.clone(),
                r.tenant_id.clone(),
                r.enabled.to_string(),
                r.max_in_flight.to_string(),
                r.ordering.clone(),
                r.version.to_string(),
                r.event_types.join(","),
                r.url.clone(),
            ]
        })
        .collect();
    write!(out, "{}", hookline_runtime::table::aligned(&header, &rows))?;
    Ok(())
}

fn producer(common: &CommonArgs) -> Result<FutureProducer, CliError> {
    Ok(
        kafka::producer_config(common, "hookline-subscriptions-cli")?
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .create()
            .map_err(|e| hookline_runtime::RuntimeError::kafka("creating the producer", e))?,
    )
}

async fn write(
    producer: &FutureProducer,
    topic: &str,
    id: &str,
    value: Option<&[u8]>,
) -> Result<(), CliError> {
    let mut record = FutureRecord::<str, [u8]>::to(topic).key(id);
    if let Some(v) = value {
        record = record.payload(v);
    }
    producer
        .send(record, CLI_TIMEOUT)
        .await
        .map(|_| ())
        .map_err(|(e, _)| CliError::Write {
            id: id.to_owned(),
            topic: topic.to_owned(),
            why: e.to_string(),
        })
}

/// The host of `url` as written (between `://` and the port, path, query or
/// fragment), before any parser canonicalises it; `None` for an IPv6 literal.
fn raw_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.starts_with('[') {
        return None;
    }
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    };
    Some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SubscriptionSpec {
        SubscriptionSpec {
            subscription_id: "sub_1".into(),
            tenant_id: "acme".into(),
            url: "https://hooks.acme.example/in".into(),
            event_types: vec!["invoice.*".into()],
            secret_ref: "acme-hooks".into(),
            enabled: None,
            max_in_flight: 1,
            rate_limit_per_s: None,
            ordering: Ordering::Unordered,
        }
    }

    #[test]
    fn a_good_spec_passes() {
        assert!(validate(&spec(), false).is_empty());
        for url in [
            "https://203.0.113.7:8443/in",
            "https://[2001:db8::1]/in",
            "https://1password.example/in",
            "https://hooks.example:443?x=1",
        ] {
            let mut s = spec();
            s.url = url.into();
            assert!(validate(&s, false).is_empty(), "{url}");
        }
    }

    #[test]
    fn the_raw_host_is_what_was_written() {
        assert_eq!(raw_host("https://127.1:80/a"), Some("127.1"));
        assert_eq!(raw_host("https://0x7f000001?q"), Some("0x7f000001"));
        assert_eq!(raw_host("https://h.example#f"), Some("h.example"));
        assert_eq!(raw_host("https://[::1]:8443/"), None);
        assert_eq!(raw_host("no scheme"), None);
    }

    #[test]
    fn each_bad_field_is_named() {
        type Mutation = fn(&mut SubscriptionSpec);
        let cases: Vec<(Mutation, &str)> = vec![
            (|s| s.url = "http://plain.example".into(), "http is refused"),
            (|s| s.url = "ftp://x.example".into(), "scheme `ftp`"),
            (|s| s.url = "not a url".into(), "is not a URL"),
            (|s| s.url = "https://u:p@x.example".into(), "credentials"),
            (
                |s| s.url = "https://127.1/in".into(),
                "host `127.1` is a non-canonical spelling of 127.0.0.1; write it as 127.0.0.1",
            ),
            (
                |s| s.url = "https://2130706433:8443/in".into(),
                "host `2130706433` is a non-canonical spelling",
            ),
            (
                |s| s.url = "https://0x7f000001".into(),
                "write it as 127.0.0.1",
            ),
            (
                |s| s.url = "https://0177.0.0.1/".into(),
                "write it as 127.0.0.1",
            ),
            (|s| s.event_types = vec![], "event_types"),
            (|s| s.event_types = vec!["a.*.b".into()], "event_types"),
            (|s| s.secret_ref = "has/slash".into(), "secret_ref"),
            (
                |s| s.subscription_id = String::new(),
                "subscription_id: is empty",
            ),
            (|s| s.tenant_id = "a b".into(), "tenant_id"),
            (|s| s.max_in_flight = 0, "max_in_flight"),
            (|s| s.rate_limit_per_s = Some(-1.0), "rate_limit_per_s"),
        ];
        for (mutate, expected) in cases {
            let mut s = spec();
            mutate(&mut s);
            let problems = validate(&s, false);
            assert!(
                problems.iter().any(|p| p.contains(expected)),
                "expected {expected:?} in {problems:?}"
            );
        }
    }

    #[test]
    fn http_is_accepted_only_when_allowed() {
        let mut s = spec();
        s.url = "http://127.0.0.1:8080/hook".into();
        assert!(!validate(&s, false).is_empty());
        assert!(validate(&s, true).is_empty());
    }

    #[test]
    fn files_hold_one_or_many_in_json_or_yaml() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one.json");
        std::fs::write(
            &one,
            r#"{"id":"s1","tenant":"acme","url":"https://a.example","event_types":["a.b"],"secret_ref":"k"}"#,
        )
        .unwrap();
        let specs = read_specs(&one).unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].enabled, None);
        let many = dir.path().join("many.yaml");
        std::fs::write(
            &many,
            "- subscription_id: s1\n  tenant_id: acme\n  url: https://a.example\n  event_types: [a.b]\n  secret_ref: k\n  max_in_flight: 2\n- subscription_id: s2\n  tenant_id: acme\n  url: https://b.example\n  event_types: ['*']\n  secret_ref: k\n  enabled: false\n",
        )
        .unwrap();
        let specs = read_specs(&many).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].max_in_flight, 2);
        assert_eq!(specs[1].enabled, Some(false));
        let typo = dir.path().join("typo.yaml");
        std::fs::write(&typo, "subscription_id: s1\ntennant_id: acme\n").unwrap();
        assert!(matches!(read_specs(&typo), Err(CliError::File { .. })));
    }

    /// The README's example file parses and validates, so the documented
    /// format cannot drift from the parser.
    #[test]
    fn the_example_file_is_valid() {
        let path = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/dev/subscriptions.example.yaml"
        ));
        let specs = read_specs(&path).unwrap();
        assert!(specs.len() >= 2, "{specs:?}");
        for spec in &specs {
            assert_eq!(validate(spec, true), Vec::<String>::new(), "{spec:?}");
        }
        assert!(specs.iter().any(|s| s.enabled == Some(false)));
        assert!(specs.iter().any(|s| s.rate_limit_per_s.is_some()));
        assert!(specs.iter().any(|s| s.ordering == Ordering::Strict));
    }

    #[test]
    fn items_of_a_block_list_are_counted() {
        let text = "# c\n- a: 1\n  b: 2\n- a: 3\n";
        assert_eq!(item_at(text, 3), Some((1, 2)));
        assert_eq!(item_at(text, 4), Some((2, 2)));
        assert_eq!(item_at("a: 1\n", 1), None);
    }

    /// Every parse error says where: line and column, the file, and the line itself.
    #[test]
    fn file_errors_name_the_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let good =
            "  tenant_id: acme\n  url: https://a.example\n  event_types: [a.b]\n  secret_ref: k\n";
        let cases = [
            (
                "typo.yaml",
                "subscription_id: s1\ntennant_id: acme\n".to_owned(),
                &["unknown field `tennant_id`", "line 2, column 1", "typo.yaml:2:1", "2 | tennant_id: acme"][..],
            ),
            (
                "type.yaml",
                format!("- subscription_id: s1\n{good}  max_in_flight: lots\n"),
                &["in item 1 of 1: ", "line 6, column 18", "type.yaml:6:18", "max_in_flight: lots"],
            ),
            (
                "ordering.yaml",
                format!("- subscription_id: s1\n{good}  ordering: fifo\n"),
                &["in item 1 of 1: ", "ordering", "fifo", "ordering.yaml:6"],
            ),
            (
                "missing.yaml",
                format!("- subscription_id: s1\n{good}- subscription_id: s2\n  tenant_id: acme\n"),
                &["in item 2 of 2: ", "missing field `url`", "line 7, column 3", "missing.yaml:7:3"],
            ),
            (
                "twice.yaml",
                "subscription_id: s1\nsubscription_id: s2\n".to_owned(),
                &["duplicate", "`subscription_id`", "line 2, column 1"],
            ),
            (
                "syntax.yaml",
                "subscription_id: s1\ntenant_id: [acme\n".to_owned(),
                &["line 2, column 12", "syntax.yaml:2:12"],
            ),
            (
                "json.json",
                r#"{"id":"s1","tenant":"acme","url":"https://a.example","event_types":"a.b","secret_ref":"k"}"#.to_owned(),
                &["line 1, column 68"],
            ),
            (
                "scalar.yaml",
                "42\n".to_owned(),
                &["expected a subscription (a mapping) or a list of subscriptions"],
            ),
        ];
        for (name, text, wanted) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let err = read_specs(&path).unwrap_err().to_string();
            assert!(err.contains(&path.display().to_string()), "{name}: {err}");
            for want in wanted {
                assert!(err.contains(want), "{name}: expected {want:?} in:\n{err}");
            }
        }
    }
}
