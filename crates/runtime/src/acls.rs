//! The least-privilege Kafka ACLs of every hookline stage and one-shot
//! command, derived from the names the stages use — the topics of
//! [`Topics`], the consumer groups' defaults ([`FANOUT_GROUP`] and its
//! siblings, which are the stages' flag defaults) and the transactional id
//! prefix of [`txn::default_transactional_id`] — so the table cannot drift
//! from the code. `hookline-fanout acls` prints it as a table or as
//! `kafka-acls.sh` command lines: rdkafka has no CreateAcls binding, so the
//! ACLs are created by Kafka's own tool.
//!
//! Kafka implies Describe from Read, Write and Alter, and DescribeConfigs
//! from AlterConfigs, so those are not listed twice. DescribeConfigs on a
//! stage's topics lets its start-up check see a topic whose settings would
//! lose data (without it the check is skipped with a warning).

use clap::{Args, ValueEnum};
use hookline_envelope::{Topics, DEFAULT_RETRY_TIERS};

use crate::{config::CommonArgs, kafka::txn};

/// The fanout's consumer group (`--group-id` of `hookline-fanout`).
pub const FANOUT_GROUP: &str = "hookline-fanout";
/// The dispatcher's consumer group (`--group-id` of `hookline-dispatcher`).
pub const DISPATCHER_GROUP: &str = "hookline-dispatcher";
/// The DLQ sink's consumer group (`--group-id` of `hookline-dlq-sink`).
pub const DLQ_SINK_GROUP: &str = "hookline-dlq-sink";

/// Who needs the ACLs: a long-running stage or a one-shot command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Who {
    /// `hookline-fanout`.
    Fanout,
    /// `hookline-dispatcher`.
    Dispatcher,
    /// `hookline-dlq-sink`.
    DlqSink,
    /// `hookline-fanout topics --execute`.
    Topics,
    /// `hookline-fanout subscriptions put|enable|disable|delete` (and `get`, `list`,
    /// which only read).
    SubscriptionsPut,
    /// `hookline-dlq-sink replay --execute`.
    Replay,
}

impl Who {
    /// Every stage and command, in the table's order.
    pub const ALL: [Who; 6] = [
        Who::Fanout,
        Who::Dispatcher,
        Who::DlqSink,
        Who::Topics,
        Who::SubscriptionsPut,
        Who::Replay,
    ];

    /// The name in the table and in `--principal NAME=...`.
    pub fn name(self) -> &'static str {
        match self {
            Who::Fanout => "fanout",
            Who::Dispatcher => "dispatcher",
            Who::DlqSink => "dlq-sink",
            Who::Topics => "topics",
            Who::SubscriptionsPut => "subscriptions-put",
            Who::Replay => "replay",
        }
    }
}

/// A Kafka resource an ACL is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A topic, by its literal name.
    Topic(String),
    /// A consumer group, by its literal name.
    Group(String),
    /// Every transactional id starting with this prefix.
    TransactionalIdPrefix(String),
    /// The cluster.
    Cluster,
}

impl Resource {
    fn kind(&self) -> &'static str {
        match self {
            Resource::Topic(_) => "topic",
            Resource::Group(_) => "group",
            Resource::TransactionalIdPrefix(_) => "transactional-id",
            Resource::Cluster => "cluster",
        }
    }

    fn pattern(&self) -> &'static str {
        match self {
            Resource::TransactionalIdPrefix(_) => "prefixed",
            _ => "literal",
        }
    }

    fn name(&self) -> &str {
        match self {
            Resource::Topic(n) | Resource::Group(n) | Resource::TransactionalIdPrefix(n) => n,
            Resource::Cluster => "kafka-cluster",
        }
    }
}

/// An ACL operation, spelt as kafka-acls.sh spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Read,
    Write,
    Create,
    Alter,
    AlterConfigs,
    Describe,
    DescribeConfigs,
    IdempotentWrite,
}

impl Operation {
    /// kafka-acls.sh's `--operation` value.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Read => "Read",
            Operation::Write => "Write",
            Operation::Create => "Create",
            Operation::Alter => "Alter",
            Operation::AlterConfigs => "AlterConfigs",
            Operation::Describe => "Describe",
            Operation::DescribeConfigs => "DescribeConfigs",
            Operation::IdempotentWrite => "IdempotentWrite",
        }
    }
}

/// One allow rule: `who` may do `operations` on `resource`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    pub who: Who,
    pub resource: Resource,
    pub operations: Vec<Operation>,
    /// Why the stage needs it, for the table.
    pub why: &'static str,
}

/// The names the ACLs are on.
#[derive(Debug, Clone)]
pub struct Names {
    pub topics: Topics,
    pub fanout_group: String,
    pub dispatcher_group: String,
    pub dlq_sink_group: String,
    pub fanout_transactional_prefix: String,
    pub dispatcher_transactional_prefix: String,
}

impl Names {
    /// The stages' defaults for `topics`.
    pub fn defaults(topics: Topics) -> Self {
        Names {
            topics,
            fanout_group: FANOUT_GROUP.to_owned(),
            dispatcher_group: DISPATCHER_GROUP.to_owned(),
            dlq_sink_group: DLQ_SINK_GROUP.to_owned(),
            fanout_transactional_prefix: txn::transactional_id_prefix(FANOUT_GROUP),
            dispatcher_transactional_prefix: txn::transactional_id_prefix(DISPATCHER_GROUP),
        }
    }
}

/// The ACLs `who` needs, and no more.
pub fn acls(names: &Names, who: Who) -> Vec<Acl> {
    use Operation::*;
    let t = &names.topics;
    let topic = |name: &str, operations: Vec<Operation>, why| Acl {
        who,
        resource: Resource::Topic(name.to_owned()),
        operations,
        why,
    };
    let other = |resource, operations, why| Acl {
        who,
        resource,
        operations,
        why,
    };
    match who {
        Who::Fanout => {
            let mut v = vec![
                topic(
                    t.events(),
                    vec![Read, DescribeConfigs],
                    "consumes events; rebuilds the dedup window",
                ),
                topic(
                    t.subscriptions(),
                    vec![Read, DescribeConfigs],
                    "follows the subscription table",
                ),
                topic(
                    t.deliveries(),
                    vec![Write, DescribeConfigs],
                    "writes deliveries in transactions",
                ),
                topic(
                    t.strict(),
                    vec![Write, DescribeConfigs],
                    "writes strictly ordered subscriptions' deliveries in transactions",
                ),
                topic(
                    t.quarantine(),
                    vec![Write, DescribeConfigs],
                    "quarantines undecodable events",
                ),
                other(
                    Resource::Group(names.fanout_group.clone()),
                    vec![Read],
                    "its consumer group; offsets in transactions",
                ),
                other(
                    Resource::TransactionalIdPrefix(names.fanout_transactional_prefix.clone()),
                    vec![Write],
                    "one transactional id per replica",
                ),
            ];
            v.extend(t.lanes().map(|lane| {
                topic(
                    lane,
                    vec![Write, DescribeConfigs],
                    "writes a bursting tenant's deliveries straight to its overflow lane",
                )
            }));
            v
        }
        Who::Dispatcher => {
            let mut v = vec![
                topic(
                    t.deliveries(),
                    vec![Read, DescribeConfigs],
                    "consumes first attempts",
                ),
                topic(
                    t.strict(),
                    vec![Read, DescribeConfigs],
                    "consumes strictly ordered first attempts; retries them in place",
                ),
            ];
            v.extend(t.retries().map(|(_, tier)| {
                topic(
                    tier,
                    vec![Read, Write, DescribeConfigs],
                    "consumes and writes a retry tier",
                )
            }));
            v.extend(t.lanes().map(|lane| {
                topic(
                    lane,
                    vec![Read, Write, DescribeConfigs],
                    "moves a hot subscription's records to an overflow lane and consumes it",
                )
            }));
            v.extend([
                topic(t.dlq(), vec![Write, DescribeConfigs], "writes dead letters"),
                topic(
                    t.quarantine(),
                    vec![Write, DescribeConfigs],
                    "quarantines undecodable deliveries",
                ),
                topic(
                    t.attempts(),
                    vec![Write, DescribeConfigs],
                    "writes the attempt log in its transactions",
                ),
                topic(
                    t.subscriptions(),
                    vec![Read, Write, DescribeConfigs],
                    "follows the table; writes a subscription disabled (410, breaker) in its transactions",
                ),
                topic(
                    t.health(),
                    vec![Read, Write, DescribeConfigs],
                    "shares its circuit breakers with the other replicas: follows them, writes a change in its transactions",
                ),
                other(
                    Resource::Group(names.dispatcher_group.clone()),
                    vec![Read],
                    "its consumer group; offsets in transactions",
                ),
                other(
                    Resource::TransactionalIdPrefix(names.dispatcher_transactional_prefix.clone()),
                    vec![Write],
                    "one transactional id per replica",
                ),
            ]);
            v
        }
        Who::DlqSink => vec![
            topic(
                t.dlq(),
                vec![Read, DescribeConfigs],
                "archives dead letters",
            ),
            topic(
                t.quarantine(),
                vec![Read, DescribeConfigs],
                "archives quarantined records",
            ),
            topic(
                t.attempts(),
                vec![Read, DescribeConfigs],
                "archives the attempt log",
            ),
            other(
                Resource::Group(names.dlq_sink_group.clone()),
                vec![Read],
                "its consumer group; commits offsets",
            ),
        ],
        Who::Topics => t
            .all()
            .into_iter()
            .map(|name| {
                topic(
                    name,
                    vec![Create, Alter, AlterConfigs],
                    "creates it, adds partitions, corrects its settings",
                )
            })
            .collect(),
        Who::SubscriptionsPut => vec![
            topic(
                t.subscriptions(),
                vec![Read, Write],
                "reads the table, writes a version",
            ),
            other(
                Resource::Cluster,
                vec![IdempotentWrite],
                "an idempotent producer",
            ),
        ],
        Who::Replay => {
            let mut v = vec![
                topic(t.dlq(), vec![Read], "reads dead letters by assignment"),
                topic(
                    t.quarantine(),
                    vec![Read],
                    "reads quarantined records by assignment",
                ),
                topic(
                    t.attempts(),
                    vec![Read],
                    "reads the attempt log by assignment (trace)",
                ),
                topic(t.events(), vec![Write], "returns quarantined events"),
                topic(
                    t.deliveries(),
                    vec![Write],
                    "returns dead letters and quarantined deliveries",
                ),
                topic(
                    t.strict(),
                    vec![Write],
                    "returns a strict subscription's dead letters (--to-strict)",
                ),
            ];
            v.extend(
                t.retries()
                    .map(|(_, tier)| topic(tier, vec![Write], "returns to a retry tier (--tier)")),
            );
            v.push(other(
                Resource::Cluster,
                vec![IdempotentWrite],
                "an idempotent producer",
            ));
            v
        }
    }
}

/// Output of `acls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AclFormat {
    /// Aligned columns for people.
    Table,
    /// One `kafka-acls.sh --add` command line per resource and principal.
    KafkaAcls,
}

/// Arguments of `hookline-fanout acls`.
#[derive(Debug, Clone, Args)]
pub struct AclsArgs {
    /// Only these stages or commands (repeatable; default: all).
    #[arg(
        long = "stage",
        env = "HOOKLINE_ACLS_STAGES",
        value_delimiter = ',',
        value_enum
    )]
    pub stages: Vec<Who>,
    /// Output format.
    #[arg(long, env = "HOOKLINE_ACLS_FORMAT", value_enum, default_value_t = AclFormat::Table)]
    pub format: AclFormat,
    /// The principal of a stage or command, e.g. `fanout=User:fanout`
    /// (repeatable, `;`-separated in the environment; default
    /// `User:hookline-<name>`).
    #[arg(long = "principal", env = "HOOKLINE_ACLS_PRINCIPALS", value_delimiter = ';',
          value_name = "NAME=PRINCIPAL", value_parser = parse_principal)]
    pub principals: Vec<(Who, String)>,
    /// The fanout's consumer group, if not the default (the fanout's own variable).
    #[arg(long, env = "HOOKLINE_FANOUT_GROUP", default_value = FANOUT_GROUP)]
    pub fanout_group: String,
    /// The dispatcher's consumer group, if not the default (its own variable).
    #[arg(long, env = "HOOKLINE_DISPATCHER_GROUP", default_value = DISPATCHER_GROUP)]
    pub dispatcher_group: String,
    /// The DLQ sink's consumer group, if not the default (its own variable).
    #[arg(long, env = "HOOKLINE_DLQ_SINK_GROUP", default_value = DLQ_SINK_GROUP)]
    pub dlq_sink_group: String,
    /// The fanout's transactional id prefix (default: `<fanout group>-`, the
    /// prefix of its default transactional ids).
    #[arg(long, env = "HOOKLINE_ACLS_FANOUT_TRANSACTIONAL_PREFIX")]
    pub fanout_transactional_prefix: Option<String>,
    /// The dispatcher's transactional id prefix (default: `<dispatcher group>-`).
    #[arg(long, env = "HOOKLINE_ACLS_DISPATCHER_TRANSACTIONAL_PREFIX")]
    pub dispatcher_transactional_prefix: Option<String>,
    /// The retry tiers' names, as the dispatcher's `--retry-tiers` (NAME or
    /// NAME=DELAY, comma-separated; default: the standard ladder).
    #[arg(
        long = "retry-tiers",
        env = "HOOKLINE_RETRY_TIERS",
        value_delimiter = ',',
        value_name = "NAME[=DELAY]"
    )]
    pub retry_tiers: Vec<String>,
    /// `--command-config` of the printed kafka-acls.sh lines (the admin's
    /// client properties); left out when unset.
    #[arg(long, env = "HOOKLINE_ACLS_COMMAND_CONFIG")]
    pub command_config: Option<String>,
}

fn parse_principal(s: &str) -> Result<(Who, String), String> {
    let (who, principal) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=PRINCIPAL (e.g. fanout=User:fanout)"))?;
    let who = Who::from_str(who, true).map_err(|_| {
        let names: Vec<_> = Who::ALL.iter().map(|w| w.name()).collect();
        format!("`{who}` is not one of {}", names.join(", "))
    })?;
    if !principal.contains(':') {
        return Err(format!("`{principal}` is not TYPE:NAME (e.g. User:fanout)"));
    }
    Ok((who, principal.to_owned()))
}

impl AclsArgs {
    /// The names these flags select, under `common`'s topic prefix.
    pub fn names(&self, common: &CommonArgs) -> Result<Names, hookline_envelope::TopicError> {
        let tiers: Vec<&str> = if self.retry_tiers.is_empty() {
            DEFAULT_RETRY_TIERS.to_vec()
        } else {
            self.retry_tiers
                .iter()
                .map(|t| t.split_once('=').map_or(t.as_str(), |(name, _)| name))
                .collect()
        };
        let topics = Topics::new(&common.topic_prefix, &tiers)?;
        Ok(Names {
            topics,
            fanout_transactional_prefix: self
                .fanout_transactional_prefix
                .clone()
                .unwrap_or_else(|| txn::transactional_id_prefix(&self.fanout_group)),
            dispatcher_transactional_prefix: self
                .dispatcher_transactional_prefix
                .clone()
                .unwrap_or_else(|| txn::transactional_id_prefix(&self.dispatcher_group)),
            fanout_group: self.fanout_group.clone(),
            dispatcher_group: self.dispatcher_group.clone(),
            dlq_sink_group: self.dlq_sink_group.clone(),
        })
    }

    fn principal(&self, who: Who) -> String {
        self.principals
            .iter()
            .rev()
            .find(|(w, _)| *w == who)
            .map_or_else(
                || format!("User:hookline-{}", who.name()),
                |(_, p)| p.clone(),
            )
    }
}

/// The ACLs `args` select, as `args.format` asks.
pub fn render(common: &CommonArgs, args: &AclsArgs) -> Result<String, crate::RuntimeError> {
    let names = args.names(common).map_err(|e| crate::RuntimeError::Flag {
        flag: "--topic-prefix / --retry-tiers",
        why: e.to_string(),
    })?;
    let stages: Vec<Who> = if args.stages.is_empty() {
        Who::ALL.to_vec()
    } else {
        args.stages.clone()
    };
    let rows: Vec<(String, Acl)> = stages
        .iter()
        .flat_map(|&who| acls(&names, who).into_iter().map(move |a| (who, a)))
        .map(|(who, a)| (args.principal(who), a))
        .collect();
    Ok(match args.format {
        AclFormat::Table => table(&rows),
        AclFormat::KafkaAcls => kafka_acls(&rows, &common.brokers, args.command_config.as_deref()),
    })
}

fn operations(a: &Acl) -> String {
    a.operations
        .iter()
        .map(|o| o.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// Aligned columns: stage, principal, resource, pattern, name, operations, why.
pub fn table(rows: &[(String, Acl)]) -> String {
    let header = [
        "STAGE",
        "PRINCIPAL",
        "RESOURCE",
        "PATTERN",
        "NAME",
        "OPERATIONS",
        "WHY",
    ];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|(principal, a)| {
            [
                a.who.name().to_owned(),
                principal.clone(),
                a.resource.kind().to_owned(),
                a.resource.pattern().to_owned(),
                a.resource.name().to_owned(),
                operations(a),
                a.why.to_owned(),
            ]
        })
        .collect();
    crate::table::aligned(&header, &cells)
}

/// One `kafka-acls.sh --add` line per row.
pub fn kafka_acls(rows: &[(String, Acl)], bootstrap: &str, command_config: Option<&str>) -> String {
    let mut out = String::new();
    for (principal, a) in rows {
        let mut args = vec![
            "kafka-acls.sh".to_owned(),
            "--bootstrap-server".to_owned(),
            quote(bootstrap),
        ];
        if let Some(path) = command_config {
            args.extend(["--command-config".to_owned(), quote(path)]);
        }
        args.extend([
            "--add".to_owned(),
            "--allow-principal".to_owned(),
            quote(principal),
        ]);
        for o in &a.operations {
            args.extend(["--operation".to_owned(), o.name().to_owned()]);
        }
        match &a.resource {
            Resource::Topic(n) => args.extend(["--topic".to_owned(), quote(n)]),
            Resource::Group(n) => args.extend(["--group".to_owned(), quote(n)]),
            Resource::TransactionalIdPrefix(n) => args.extend([
                "--transactional-id".to_owned(),
                quote(n),
                "--resource-pattern-type".to_owned(),
                "prefixed".to_owned(),
            ]),
            Resource::Cluster => args.push("--cluster".to_owned()),
        }
        out.push_str(&args.join(" "));
        out.push('\n');
    }
    out
}

/// A shell word: as is when it holds only safe characters, else single-quoted.
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:/,=@+".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names::defaults(Topics::with_prefix("p.").unwrap())
    }

    #[test]
    fn every_stage_reads_or_writes_only_prefixed_topics() {
        for who in Who::ALL {
            for acl in acls(&names(), who) {
                if let Resource::Topic(t) = &acl.resource {
                    assert!(t.starts_with("p."), "{who:?}: {t}");
                }
            }
        }
    }

    #[test]
    fn the_dispatcher_writes_subscriptions_and_every_tier() {
        let n = names();
        let d = acls(&n, Who::Dispatcher);
        let ops_on = |name: &str| {
            d.iter()
                .find(|a| a.resource == Resource::Topic(name.to_owned()))
                .map(|a| a.operations.clone())
                .unwrap_or_default()
        };
        assert!(ops_on(n.topics.subscriptions()).contains(&Operation::Write));
        assert!(ops_on(n.topics.attempts()).contains(&Operation::Write));
        for (_, tier) in n.topics.retries() {
            assert_eq!(
                ops_on(tier),
                [
                    Operation::Read,
                    Operation::Write,
                    Operation::DescribeConfigs
                ]
            );
        }
        // Its writes, the disabled subscriptions too, are all transactional.
        assert!(!d.iter().any(|a| a.resource == Resource::Cluster));
        assert!(d
            .iter()
            .any(|a| a.resource == Resource::TransactionalIdPrefix("hookline-dispatcher-".into())));
    }

    #[test]
    fn transactional_prefix_is_the_prefix_of_the_default_ids() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            common: CommonArgs,
        }
        let common = <Cli as clap::Parser>::parse_from(["x"]).common;
        let id = txn::default_transactional_id(FANOUT_GROUP, &common);
        assert!(id.starts_with(&names().fanout_transactional_prefix), "{id}");
    }

    #[test]
    fn kafka_acls_lines_name_resource_and_pattern() {
        let rows: Vec<_> = acls(&names(), Who::Fanout)
            .into_iter()
            .map(|a| ("User:f".to_owned(), a))
            .collect();
        let text = kafka_acls(&rows, "b:9093", Some("/etc/admin.properties"));
        assert!(
            text.contains(
                "kafka-acls.sh --bootstrap-server b:9093 --command-config /etc/admin.properties \
             --add --allow-principal User:f --operation Write --transactional-id hookline-fanout- \
             --resource-pattern-type prefixed\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("--operation Read --group hookline-fanout\n"),
            "{text}"
        );
        assert_eq!(quote("a b'c"), r"'a b'\''c'");
    }

    #[test]
    fn principals_parse_and_refuse_unknown_names() {
        assert_eq!(
            parse_principal("dlq-sink=User:sink").unwrap(),
            (Who::DlqSink, "User:sink".into())
        );
        assert!(parse_principal("sink=User:x")
            .unwrap_err()
            .contains("dlq-sink"));
        assert!(parse_principal("fanout=bob").is_err());
    }
}
