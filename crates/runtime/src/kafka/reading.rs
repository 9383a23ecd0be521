//! How hookline's consumers read: only what committed transactions wrote
//! (`isolation.level=read_committed`: a record of an aborted or still open
//! transaction is never handed out), and with the offset settings that must
//! go with it. A consumer of records written exactly once that let librdkafka
//! store or commit its offsets would commit past records it has not finished,
//! so the settings are applied together, from this one place.

use std::time::Duration;

use rdkafka::ClientConfig;

use crate::{config::CommonArgs, RuntimeError};

/// Where a consumer begins a partition it has no committed offset for
/// (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The partition's first record: nothing written is skipped.
    Earliest,
    /// The partition's end: only what is written from now on.
    Latest,
}

impl StartAt {
    fn as_str(self) -> &'static str {
        match self {
            Self::Earliest => "earliest",
            Self::Latest => "latest",
        }
    }
}

/// Who commits a consumer's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offsets {
    /// hookline, explicitly (with a transaction, or once the records are
    /// durable), or nobody: librdkafka neither stores nor commits an offset
    /// (`enable.auto.commit` and `enable.auto.offset.store` off).
    Explicit,
    /// librdkafka, every `every`, up to what the application was handed: for
    /// observers and baselines that promise no exactly-once.
    AutoCommit { every: Duration },
}

/// Whether a group-less reader hears that it reached a partition's end
/// (`enable.partition.eof`), to know it has caught up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtEnd {
    /// An end-of-partition event each time it reaches the end.
    Report,
    /// Nothing: the reader knows where to stop by offset.
    Quiet,
}

/// The `read_committed` settings and the ones that travel with them, on a
/// [`ClientConfig`]; chains like [`ClientConfig::set`].
pub trait ReadCommitted {
    /// Sets `isolation.level=read_committed`, `auto.offset.reset` from
    /// `start` and the offset settings of `offsets`.
    fn read_committed(&mut self, start: StartAt, offsets: Offsets) -> &mut Self;
}

impl ReadCommitted for ClientConfig {
    fn read_committed(&mut self, start: StartAt, offsets: Offsets) -> &mut Self {
        self.set("isolation.level", "read_committed")
            .set("auto.offset.reset", start.as_str());
        match offsets {
            Offsets::Explicit => self
                .set("enable.auto.commit", "false")
                .set("enable.auto.offset.store", "false"),
            Offsets::AutoCommit { every } => self
                .set("enable.auto.commit", "true")
                .set("enable.auto.offset.store", "true")
                .set(
                    "auto.commit.interval.ms",
                    every.as_millis().max(1).to_string(),
                ),
        }
    }
}

/// A reader outside any group, assigned its partitions by hand, from the
/// beginning: [`consumer_config`](super::consumer_config), `group.id` set to
/// `client_id` (librdkafka wants one even for `assign`; nothing joins or
/// commits to it, so replicas never share or disturb one another), committed
/// records only, no offset stored or committed, and end-of-partition events
/// as `at_end` says.
pub fn reader_config(
    common: &CommonArgs,
    client_id: &str,
    at_end: AtEnd,
) -> Result<ClientConfig, RuntimeError> {
    let mut config = super::consumer_config(common, client_id)?;
    config
        .set("group.id", client_id)
        .read_committed(StartAt::Earliest, Offsets::Explicit)
        .set(
            "enable.partition.eof",
            match at_end {
                AtEnd::Report => "true",
                AtEnd::Quiet => "false",
            },
        );
    Ok(config)
}

/// A group consumer whose offsets hookline commits itself (in a transaction,
/// or once its output is durable): [`group_config`](super::group_config),
/// committed records only, from the earliest offset when the group has none,
/// no offset stored or committed by librdkafka.
pub fn group_reader_config(
    common: &CommonArgs,
    client_id: &str,
    group_id: &str,
    member: Option<&str>,
) -> Result<ClientConfig, RuntimeError> {
    let mut config = super::group_config(common, client_id, group_id, member)?;
    config.read_committed(StartAt::Earliest, Offsets::Explicit);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn common(args: &[&str]) -> CommonArgs {
        Cli::try_parse_from(std::iter::once("hookline").chain(args.iter().copied()))
            .unwrap()
            .common
    }

    /// `keys`' values on `config`, `-` for one not set.
    fn settings<'a>(config: &'a ClientConfig, keys: &[&str]) -> Vec<&'a str> {
        keys.iter().map(|k| config.get(k).unwrap_or("-")).collect()
    }

    const KEYS: [&str; 5] = [
        "isolation.level",
        "auto.offset.reset",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.commit.interval.ms",
    ];

    #[test]
    fn each_choice_sets_the_settings_that_go_with_read_committed() {
        let every = Duration::from_millis(100);
        let cases = [
            (
                StartAt::Earliest,
                Offsets::Explicit,
                ["read_committed", "earliest", "false", "false", "-"],
            ),
            (
                StartAt::Latest,
                Offsets::Explicit,
                ["read_committed", "latest", "false", "false", "-"],
            ),
            (
                StartAt::Earliest,
                Offsets::AutoCommit { every },
                ["read_committed", "earliest", "true", "true", "100"],
            ),
        ];
        for (start, offsets, want) in cases {
            let mut config = ClientConfig::new();
            config.read_committed(start, offsets);
            assert_eq!(settings(&config, &KEYS), want, "{start:?} {offsets:?}");
        }
    }

    #[test]
    fn a_reader_is_its_own_group_from_the_beginning_and_reports_ends_if_asked() {
        let reader = reader_config(&common(&[]), "r", AtEnd::Report).unwrap();
        assert_eq!(reader.get("group.id"), Some("r"));
        assert_eq!(reader.get("client.id"), Some("r"));
        assert_eq!(reader.get("enable.partition.eof"), Some("true"));
        assert_eq!(reader.get("isolation.level"), Some("read_committed"));
        assert_eq!(reader.get("auto.offset.reset"), Some("earliest"));
        assert_eq!(reader.get("enable.auto.commit"), Some("false"));
        assert_eq!(reader.get("enable.auto.offset.store"), Some("false"));
        // A consumer's defaults and passthrough apply.
        assert_eq!(reader.get("fetch.queue.backoff.ms"), Some("10"));
        let quiet = reader_config(&common(&[]), "r", AtEnd::Quiet).unwrap();
        assert_eq!(quiet.get("enable.partition.eof"), Some("false"));
    }

    #[test]
    fn a_group_reader_commits_nothing_by_itself() {
        let c = group_reader_config(&common(&[]), "c", "g", Some("m")).unwrap();
        assert_eq!(c.get("group.id"), Some("g"));
        assert_eq!(c.get("client.id"), Some("c-m"));
        assert_eq!(
            c.get("partition.assignment.strategy"),
            Some("cooperative-sticky")
        );
        assert_eq!(
            settings(&c, &KEYS),
            ["read_committed", "earliest", "false", "false", "-"]
        );
    }

    #[test]
    fn the_passthrough_cannot_loosen_the_isolation_level() {
        let set = common(&["-X", "isolation.level=read_uncommitted"]);
        let reader = reader_config(&set, "r", AtEnd::Quiet).unwrap();
        assert_eq!(reader.get("isolation.level"), Some("read_committed"));
        let group = group_reader_config(&set, "c", "g", None).unwrap();
        assert_eq!(group.get("isolation.level"), Some("read_committed"));
    }
}
