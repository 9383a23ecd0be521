//! Topic names: the one place every hookline topic name is spelled.
//!
//! Guarantees: a [`Topics`] exists only if every name it hands out is a legal Kafka topic
//! (`[a-zA-Z0-9._-]`, 1..=249 characters, not `.` or `..`) and the retry tiers are distinct,
//! so a bad prefix or ladder fails at start-up, not at the first produce.

use std::fmt;

use hookline_core::ladder::{illegal_topic_char, DEFAULT_TIERS};

/// The default retry ladder's tier names, shortest delay first: those of
/// [`hookline_core::ladder::DEFAULT_TIERS`].
pub const DEFAULT_RETRY_TIERS: [&str; DEFAULT_TIERS.len()] = {
    let mut names = [""; DEFAULT_TIERS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = DEFAULT_TIERS[i].0;
        i += 1;
    }
    names
};

/// Tier names that would spell another topic's name (and `lane-N`, see
/// [`OVERFLOW_LANES`]).
const RESERVED_TIERS: [&str; 3] = ["dlq", "strict", "attempts"];

/// How many overflow lane topics, `deliveries.lane-0` to `deliveries.lane-7`,
/// are provisioned: the ceiling of the dispatcher's `--overflow-lanes`. A
/// subscription whose buffered backlog on a partition of `deliveries` passes a
/// bound is moved to the lane its id hashes to ([`Topics::lane_of`]).
pub const OVERFLOW_LANES: usize = 8;

/// Kafka's maximum topic name length.
pub const MAX_TOPIC_LEN: usize = 249;

/// Why a prefix or tier name cannot make legal topic names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// A character outside `[a-zA-Z0-9._-]`.
    #[error(
        "{what} `{value}` has illegal character {ch:?}; topic names allow only [a-zA-Z0-9._-]"
    )]
    IllegalChar {
        /// `prefix` or `retry tier`.
        what: &'static str,
        /// The offending value.
        value: String,
        /// The first illegal character.
        ch: char,
    },
    /// A retry tier with an empty name.
    #[error("retry tier name is empty")]
    EmptyTier,
    /// The same tier twice.
    #[error("retry tier `{tier}` is listed twice")]
    DuplicateTier {
        /// The repeated tier.
        tier: String,
    },
    /// A tier name whose topic is another topic's (`dlq`, `strict`, `attempts`,
    /// `lane-N`).
    #[error("retry tier name `{tier}` is reserved: deliveries.{tier} is another topic")]
    ReservedTier {
        /// The reserved name.
        tier: String,
    },
    /// A resulting topic name longer than Kafka allows.
    #[error("topic name `{topic}` is {len} characters; Kafka allows at most 249")]
    TooLong {
        /// The name that would result.
        topic: String,
        /// Its length.
        len: usize,
    },
}

/// Every topic name, `{prefix}{name}`, for one prefix and retry ladder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    prefix: String,
    events: String,
    subscriptions: String,
    deliveries: String,
    strict: String,
    lanes: Vec<String>,
    retries: Vec<(String, String)>,
    dlq: String,
    quarantine: String,
    attempts: String,
    health: String,
}

impl Default for Topics {
    /// No prefix and [`DEFAULT_RETRY_TIERS`].
    fn default() -> Self {
        Self::build(String::new(), &DEFAULT_RETRY_TIERS)
    }
}

impl Topics {
    /// Topic names for `prefix` (may be empty) and the retry tiers, in ladder order.
    pub fn new<S: AsRef<str>>(prefix: &str, tiers: &[S]) -> Result<Self, TopicError> {
        check_chars("prefix", prefix)?;
        for (i, tier) in tiers.iter().enumerate() {
            let tier = tier.as_ref();
            if tier.is_empty() {
                return Err(TopicError::EmptyTier);
            }
            check_chars("retry tier", tier)?;
            if RESERVED_TIERS.contains(&tier) || is_lane_name(tier) {
                return Err(TopicError::ReservedTier {
                    tier: tier.to_owned(),
                });
            }
            if tiers[..i].iter().any(|t| t.as_ref() == tier) {
                return Err(TopicError::DuplicateTier {
                    tier: tier.to_owned(),
                });
            }
        }
        let topics = Self::build(prefix.to_owned(), tiers);
        for topic in topics.all() {
            if topic.len() > MAX_TOPIC_LEN {
                return Err(TopicError::TooLong {
                    topic: topic.to_owned(),
                    len: topic.len(),
                });
            }
        }
        Ok(topics)
    }

    /// Topic names for `prefix` with [`DEFAULT_RETRY_TIERS`].
    pub fn with_prefix(prefix: &str) -> Result<Self, TopicError> {
        Self::new(prefix, &DEFAULT_RETRY_TIERS)
    }

    fn build<S: AsRef<str>>(prefix: String, tiers: &[S]) -> Self {
        let name = |n: &str| format!("{prefix}{n}");
        Self {
            events: name("events"),
            subscriptions: name("subscriptions"),
            deliveries: name("deliveries"),
            strict: name("deliveries.strict"),
            lanes: (0..OVERFLOW_LANES)
                .map(|k| name(&format!("deliveries.lane-{k}")))
                .collect(),
            retries: tiers
                .iter()
                .map(|t| {
                    (
                        t.as_ref().to_owned(),
                        name(&format!("deliveries.{}", t.as_ref())),
                    )
                })
                .collect(),
            dlq: name("deliveries.dlq"),
            quarantine: name("events.quarantine"),
            attempts: name("deliveries.attempts"),
            health: name("subscriptions.health"),
            prefix,
        }
    }

    /// The prefix every name starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `{prefix}events`: domain events from upstream.
    pub fn events(&self) -> &str {
        &self.events
    }

    /// `{prefix}subscriptions`: the compacted subscription table.
    pub fn subscriptions(&self) -> &str {
        &self.subscriptions
    }

    /// `{prefix}deliveries`: the ready queue of first attempts.
    pub fn deliveries(&self) -> &str {
        &self.deliveries
    }

    /// `{prefix}deliveries.strict`: the ready queue of strictly ordered
    /// subscriptions' deliveries, where one in backoff holds the later ones.
    pub fn strict(&self) -> &str {
        &self.strict
    }

    /// `{prefix}deliveries.lane-0` to `-7`: the overflow lanes, where the
    /// dispatcher moves a hot subscription's further records so the partition
    /// behind them keeps flowing. Each has `deliveries`' partition count: a
    /// record moved from partition `p` goes to partition `p` of its lane.
    pub fn lanes(&self) -> impl ExactSizeIterator<Item = &str> {
        self.lanes.iter().map(String::as_str)
    }

    /// The lane (an index into [`lanes`](Self::lanes), below `count`) that
    /// `subscription_id` moves to: a stable hash (FNV-1a), the same in every
    /// replica and every release, so a partition's new owner knows where a
    /// subscription's older records may be. `count` is clamped to 1..=8.
    pub fn lane_of(subscription_id: &str, count: usize) -> usize {
        let count = count.clamp(1, OVERFLOW_LANES) as u64;
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in subscription_id.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        usize::try_from(hash % count).unwrap_or(0)
    }

    /// `{prefix}deliveries.{tier}` for a tier of the ladder, or `None` if it is not one.
    pub fn retry(&self, tier: &str) -> Option<&str> {
        self.retries
            .iter()
            .find(|(t, _)| t == tier)
            .map(|(_, topic)| topic.as_str())
    }

    /// `(tier, topic)` for every tier, in ladder order.
    pub fn retries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.retries
            .iter()
            .map(|(t, topic)| (t.as_str(), topic.as_str()))
    }

    /// `{prefix}deliveries.dlq`: dead letters.
    pub fn dlq(&self) -> &str {
        &self.dlq
    }

    /// `{prefix}events.quarantine`: undecodable events.
    pub fn quarantine(&self) -> &str {
        &self.quarantine
    }

    /// `{prefix}deliveries.attempts`: the attempt log, one `AttemptRecord` per attempt,
    /// parking and dead-lettering.
    pub fn attempts(&self) -> &str {
        &self.attempts
    }

    /// `{prefix}subscriptions.health`: the dispatchers' shared circuit breakers,
    /// one `EndpointHealth` per subscription (compacted).
    pub fn health(&self) -> &str {
        &self.health
    }

    /// The compacted tables, keyed by subscription: `subscriptions` and
    /// `subscriptions.health`. Every other topic deletes old records.
    pub fn tables(&self) -> [&str; 2] {
        [self.subscriptions(), self.health()]
    }

    /// Every topic: events, subscriptions, deliveries, deliveries.strict, each
    /// retry tier, dlq, quarantine, attempts, health, each overflow lane.
    pub fn all(&self) -> Vec<&str> {
        let mut all = vec![
            self.events(),
            self.subscriptions(),
            self.deliveries(),
            self.strict(),
        ];
        all.extend(self.retries().map(|(_, topic)| topic));
        all.extend([
            self.dlq(),
            self.quarantine(),
            self.attempts(),
            self.health(),
        ]);
        all.extend(self.lanes());
        all
    }

    /// Whether `topic` is one of the overflow lanes.
    pub fn is_lane(&self, topic: &str) -> bool {
        self.lanes.iter().any(|l| l == topic)
    }

    /// Every topic the dispatcher consumes: deliveries, deliveries.strict,
    /// each retry tier and each overflow lane.
    pub fn dispatcher_inputs(&self) -> Vec<&str> {
        let mut inputs = vec![self.deliveries(), self.strict()];
        inputs.extend(self.retries().map(|(_, topic)| topic));
        inputs.extend(self.lanes());
        inputs
    }

    /// Whether `topic` is where a stage of this prefix reads records it may
    /// quarantine, and so where a quarantined record may be returned: `events`,
    /// `deliveries`, `deliveries.strict`, or `deliveries.<tier>` for any legal tier name — not only this
    /// ladder's, since the ladder is the dispatcher's configuration — but never the
    /// DLQ, the quarantine topic, the subscription table, or another prefix's topic.
    pub fn is_pipeline_input(&self, topic: &str) -> bool {
        if topic == self.events || topic == self.deliveries {
            return true;
        }
        topic
            .strip_prefix(self.deliveries.as_str())
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|tier| {
                !tier.is_empty()
                    && check_chars("retry tier", tier).is_ok()
                    && topic != self.dlq
                    && topic != self.attempts
                    && topic.len() <= MAX_TOPIC_LEN
            })
    }
}

impl fmt::Display for Topics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.all().join(","))
    }
}

/// `lane-N` for a number N: the overflow lanes' names, reserved for them.
fn is_lane_name(tier: &str) -> bool {
    tier.strip_prefix("lane-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Kafka's rule for the characters of a name, which the ladder applies to tier names.
fn check_chars(what: &'static str, value: &str) -> Result<(), TopicError> {
    match illegal_topic_char(value) {
        Some(ch) => Err(TopicError::IllegalChar {
            what,
            value: value.to_owned(),
            ch,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_topics_have_no_prefix_and_the_default_ladder() {
        let t = Topics::default();
        assert_eq!(
            t.all(),
            [
                "events",
                "subscriptions",
                "deliveries",
                "deliveries.strict",
                "deliveries.retry-10s",
                "deliveries.retry-1m",
                "deliveries.retry-15m",
                "deliveries.retry-2h",
                "deliveries.dlq",
                "events.quarantine",
                "deliveries.attempts",
                "subscriptions.health",
                "deliveries.lane-0",
                "deliveries.lane-1",
                "deliveries.lane-2",
                "deliveries.lane-3",
                "deliveries.lane-4",
                "deliveries.lane-5",
                "deliveries.lane-6",
                "deliveries.lane-7",
            ]
        );
        assert_eq!(t, Topics::with_prefix("").unwrap());
        assert_eq!(t.retry("retry-1m"), Some("deliveries.retry-1m"));
        assert_eq!(t.retry("retry-3d"), None);
        assert_eq!(t.dispatcher_inputs().len(), 6 + OVERFLOW_LANES);
        assert!(t.is_lane("deliveries.lane-7") && !t.is_lane("deliveries"));
        assert_eq!(t.strict(), "deliveries.strict");
        for reserved in ["dlq", "strict", "attempts", "lane-0", "lane-12"] {
            assert_eq!(
                Topics::new("", &[reserved]),
                Err(TopicError::ReservedTier {
                    tier: reserved.to_owned()
                })
            );
        }
    }

    #[test]
    fn a_subscription_always_hashes_to_the_same_lane_below_the_count() {
        // Pinned: a partition's next owner must find a subscription's lane again.
        assert_eq!(Topics::lane_of("sub-a", 8), Topics::lane_of("sub-a", 8));
        assert_eq!(
            Topics::lane_of("", 8),
            0xcbf2_9ce4_8422_2325_u64 as usize % 8
        );
        let mut used = [false; OVERFLOW_LANES];
        for i in 0..200 {
            let lane = Topics::lane_of(&format!("sub-{i}"), 8);
            used[lane] = true;
            assert!(Topics::lane_of(&format!("sub-{i}"), 3) < 3);
            assert_eq!(
                Topics::lane_of(&format!("sub-{i}"), 0),
                0,
                "clamped to one lane"
            );
        }
        assert!(used.iter().all(|u| *u), "200 ids spread over every lane");
        assert!(
            Topics::new("", &["lane-x"]).is_ok(),
            "only lane-<digits> is reserved"
        );
    }

    #[test]
    fn prefix_and_custom_ladder_apply_to_every_topic() {
        let t = Topics::new("test-42.", &["fast", "slow"]).unwrap();
        assert_eq!(t.events(), "test-42.events");
        assert_eq!(t.subscriptions(), "test-42.subscriptions");
        assert_eq!(t.deliveries(), "test-42.deliveries");
        assert_eq!(
            t.retries().collect::<Vec<_>>(),
            [
                ("fast", "test-42.deliveries.fast"),
                ("slow", "test-42.deliveries.slow")
            ]
        );
        assert_eq!(t.dlq(), "test-42.deliveries.dlq");
        assert_eq!(t.quarantine(), "test-42.events.quarantine");
        assert_eq!(t.attempts(), "test-42.deliveries.attempts");
        assert!(t.all().iter().all(|n| n.starts_with("test-42.")));
    }

    #[test]
    fn illegal_names_are_typed_errors() {
        let cases: [(&str, &[&str], TopicError); 6] = [
            (
                "a/b",
                &["r"],
                TopicError::IllegalChar {
                    what: "prefix",
                    value: "a/b".into(),
                    ch: '/',
                },
            ),
            (
                "",
                &["retry 1m"],
                TopicError::IllegalChar {
                    what: "retry tier",
                    value: "retry 1m".into(),
                    ch: ' ',
                },
            ),
            (
                "é",
                &[],
                TopicError::IllegalChar {
                    what: "prefix",
                    value: "é".into(),
                    ch: 'é',
                },
            ),
            ("", &[""], TopicError::EmptyTier),
            (
                "",
                &["r", "attempts"],
                TopicError::ReservedTier {
                    tier: "attempts".into(),
                },
            ),
            (
                "",
                &["a", "b", "a"],
                TopicError::DuplicateTier { tier: "a".into() },
            ),
        ];
        for (prefix, tiers, want) in cases {
            assert_eq!(
                Topics::new(prefix, tiers),
                Err(want),
                "{prefix:?} {tiers:?}"
            );
        }
    }

    #[test]
    fn names_longer_than_249_are_refused() {
        // The longest name is `{prefix}subscriptions.health` (20) with short tiers.
        let ok = "p".repeat(MAX_TOPIC_LEN - "subscriptions.health".len());
        assert!(Topics::new(&ok, &["r"]).is_ok());
        let long = format!("{ok}p");
        match Topics::new(&long, &["r"]) {
            Err(TopicError::TooLong { len, topic }) => {
                assert_eq!(len, 250);
                assert_eq!(topic, format!("{long}subscriptions.health"));
            }
            other => panic!("expected TooLong, got {other:?}"),
        }
        let tier = "t".repeat(MAX_TOPIC_LEN);
        assert!(matches!(
            Topics::new("", &[tier.as_str()]),
            Err(TopicError::TooLong { .. })
        ));
    }

    #[test]
    fn pipeline_inputs_are_events_deliveries_and_any_tier_of_the_prefix() {
        let t = Topics::new("p.", &["fast"]).unwrap();
        for topic in [
            "p.events",
            "p.deliveries",
            "p.deliveries.strict",
            "p.deliveries.fast",
            "p.deliveries.retry-10s",
        ] {
            assert!(t.is_pipeline_input(topic), "{topic}");
        }
        for topic in [
            "p.deliveries.dlq",
            "p.deliveries.attempts",
            "p.events.quarantine",
            "p.subscriptions",
            "p.deliveries.",
            "p.deliveries.a b",
            "p.deliveriesx",
            "events",
            "q.events",
            "q.deliveries.fast",
            "",
        ] {
            assert!(!t.is_pipeline_input(topic), "{topic}");
        }
        assert!(Topics::default().is_pipeline_input("deliveries.retry-2h"));
        assert!(!Topics::default().is_pipeline_input("p.events"));
    }

    #[test]
    fn empty_ladder_is_allowed() {
        let t = Topics::new::<&str>("x.", &[]).unwrap();
        assert_eq!(t.retries().len(), 0);
        assert_eq!(
            t.dispatcher_inputs()[..3],
            ["x.deliveries", "x.deliveries.strict", "x.deliveries.lane-0"]
        );
    }
}
