//! Unit tests of the desired state and the pure planner.

use std::{collections::BTreeMap, time::Duration};

use hookline_envelope::Topics;

use super::{
    plan::{plan, Action, ObservedTopic, PlanOptions},
    spec::{default_tiers, desired, parse_override, parse_tier, wrong_topic_config, Settings},
    ProvisionError, TopicSpec,
};

fn settings() -> Settings {
    Settings {
        prefix: "p.".into(),
        tiers: default_tiers(),
        partitions: 12,
        replication: 3,
        retention: Duration::from_secs(7 * 24 * 3600),
        max_message_bytes: 1_048_576,
        overrides: vec![],
    }
}

fn with(overrides: &[&str]) -> Settings {
    Settings {
        overrides: overrides
            .iter()
            .map(|o| parse_override(o).unwrap())
            .collect(),
        ..settings()
    }
}

fn invalid(s: &Settings) -> Vec<String> {
    match desired(s) {
        Err(ProvisionError::Invalid(p)) => p,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// What a topic created exactly to `spec` looks like to the planner.
fn observed_as(spec: &TopicSpec) -> ObservedTopic {
    let mut effective: BTreeMap<String, String> = [
        ("segment.bytes", "1073741824"),
        ("cleanup.policy", "delete"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    effective.extend(spec.configs.clone());
    ObservedTopic {
        partitions: spec.partitions,
        replication: spec.replication,
        effective,
        overrides: spec.configs.clone(),
    }
}

fn observed_all(specs: &[TopicSpec]) -> BTreeMap<String, ObservedTopic> {
    specs
        .iter()
        .map(|s| (s.name.clone(), observed_as(s)))
        .collect()
}

#[test]
fn desired_covers_every_topic_with_safe_defaults() {
    let specs = desired(&settings()).unwrap();
    let topics = Topics::with_prefix("p.").unwrap();
    assert_eq!(
        specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        topics.all()
    );
    let get = |n: &str| specs.iter().find(|s| s.name == n).unwrap();
    let tables = ["p.subscriptions", "p.subscriptions.health"];
    for table in tables {
        assert_eq!(get(table).configs["cleanup.policy"], "compact", "{table}");
        assert!(!get(table).configs.contains_key("retention.ms"), "{table}");
    }
    for spec in specs.iter().filter(|s| !tables.contains(&s.name.as_str())) {
        assert_eq!(spec.configs["cleanup.policy"], "delete", "{}", spec.name);
        assert_eq!(spec.configs["retention.ms"], "604800000", "{}", spec.name);
        assert_eq!(spec.configs["min.insync.replicas"], "2");
        assert_eq!((spec.partitions, spec.replication), (12, 3));
    }
    let bytes = |n: &str| get(n).configs["max.message.bytes"].parse::<u64>().unwrap();
    assert!(bytes("p.events.quarantine") > bytes("p.events"));
    assert!(bytes("p.deliveries.dlq") > bytes("p.deliveries"));
    assert!(bytes("p.deliveries.retry-2h") > bytes("p.deliveries"));
}

#[test]
fn overrides_apply_to_one_topic() {
    let specs = desired(&with(&[
        "events:partitions=24",
        "deliveries.dlq:retention=30d",
        "deliveries:replication=1",
        "events:compression.type=zstd",
    ]))
    .unwrap();
    let get = |n: &str| specs.iter().find(|s| s.name == n).unwrap();
    assert_eq!(get("p.events").partitions, 24);
    assert_eq!(get("p.events").configs["compression.type"], "zstd");
    assert_eq!(get("p.deliveries").partitions, 12);
    assert_eq!(get("p.deliveries").replication, 1);
    assert_eq!(get("p.deliveries").configs["min.insync.replicas"], "1");
    assert_eq!(
        get("p.deliveries.dlq").configs["retention.ms"],
        "2592000000"
    );
}

#[test]
fn unsafe_settings_are_refused_with_every_reason() {
    let cases: [(&[&str], &str); 8] = [
        (
            &["events:retention=1d"],
            "p.events: retention 1day is below the minimum 7days",
        ),
        (
            &["subscriptions:cleanup.policy=delete"],
            "must be `compact`",
        ),
        (
            &["subscriptions:cleanup.policy=compact,delete"],
            "must be `compact`",
        ),
        (
            &["deliveries:cleanup.policy=compact"],
            "compaction keeps one record per tenant key",
        ),
        (
            &["events.quarantine:max.message.bytes=1000"],
            "below its source topic's",
        ),
        (
            &["deliveries.dlq:max.message.bytes=1000"],
            "below its source topic's",
        ),
        (&["nope:partitions=3"], "unknown topic `nope`"),
        (
            &["events:min.insync.replicas=4"],
            "exceeds the replication factor",
        ),
    ];
    for (overrides, want) in cases {
        let problems = invalid(&with(overrides));
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "{overrides:?}: {problems:?} lacks {want:?}"
        );
    }
    let both = invalid(&with(&["events:retention=1d", "deliveries:retention=2d"]));
    assert_eq!(both.len(), 2, "{both:?}");
}

#[test]
fn a_long_tier_needs_retention_far_above_its_delay() {
    let mut s = settings();
    s.tiers
        .push(("retry-1d".into(), Duration::from_secs(86_400)));
    let problems = invalid(&s);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("p.deliveries.retry-1d"),
        "{problems:?}"
    );
    assert!(problems[0].contains("24x the tier delay"), "{problems:?}");
    s.overrides = vec![parse_override("deliveries.retry-1d:retention=30d").unwrap()];
    assert!(desired(&s).is_ok());
}

#[test]
fn infinite_retention_is_allowed() {
    assert!(desired(&with(&["deliveries.dlq:retention=forever"])).is_ok());
}

#[test]
fn empty_cluster_plans_one_create_per_topic() {
    let specs = desired(&settings()).unwrap();
    let plan = plan(&specs, &BTreeMap::new(), PlanOptions::default()).unwrap();
    assert_eq!(plan.actions.len(), specs.len());
    assert!(plan
        .actions
        .iter()
        .zip(&specs)
        .all(|(a, s)| *a == Action::Create(s.clone())));
}

#[test]
fn matching_cluster_plans_nothing() {
    let specs = desired(&settings()).unwrap();
    let plan = plan(&specs, &observed_all(&specs), PlanOptions::default()).unwrap();
    assert!(plan.is_empty(), "{plan:?}");
    assert_eq!(plan.unchanged.len(), specs.len());
    assert!(plan.notes.is_empty());
}

#[test]
fn equal_values_written_differently_are_not_changes() {
    let specs = desired(&settings()).unwrap();
    let mut observed = observed_all(&specs);
    let subs = observed.get_mut("p.subscriptions").unwrap();
    subs.effective
        .insert("min.insync.replicas".into(), " 2".into());
    let events = observed.get_mut("p.events").unwrap();
    // Broker default equal to the wanted value: not an override, not a change.
    events.overrides.remove("retention.ms");
    let plan = plan(&specs, &observed, PlanOptions::default()).unwrap();
    assert!(plan.is_empty(), "{plan:?}");
}

#[test]
fn wrong_retention_is_altered_keeping_foreign_overrides() {
    let specs = desired(&settings()).unwrap();
    let mut observed = observed_all(&specs);
    let d = observed.get_mut("p.deliveries").unwrap();
    d.effective.insert("retention.ms".into(), "3600000".into());
    d.overrides.insert("retention.ms".into(), "3600000".into());
    d.overrides
        .insert("message.timestamp.type".into(), "LogAppendTime".into());
    let plan = plan(&specs, &observed, PlanOptions::default()).unwrap();
    assert_eq!(plan.actions.len(), 1, "{plan:?}");
    let Action::AlterConfigs {
        topic,
        changes,
        set,
    } = &plan.actions[0]
    else {
        panic!("expected an alter: {plan:?}");
    };
    assert_eq!(topic, "p.deliveries");
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].key, "retention.ms");
    assert_eq!(changes[0].from.as_deref(), Some("3600000"));
    assert_eq!(changes[0].to, "604800000");
    assert_eq!(set["retention.ms"], "604800000");
    assert_eq!(set["message.timestamp.type"], "LogAppendTime");
    assert_eq!(set["cleanup.policy"], "delete");
}

#[test]
fn uncompacted_subscriptions_is_corrected() {
    let specs = desired(&settings()).unwrap();
    let mut observed = observed_all(&specs);
    let s = observed.get_mut("p.subscriptions").unwrap();
    s.effective.insert("cleanup.policy".into(), "delete".into());
    s.overrides.remove("cleanup.policy");
    let plan = plan(&specs, &observed, PlanOptions::default()).unwrap();
    assert!(matches!(&plan.actions[..],
        [Action::AlterConfigs { topic, set, .. }] if topic == "p.subscriptions" && set["cleanup.policy"] == "compact"));
}

#[test]
fn shrinking_is_refused_even_with_the_grow_flag() {
    let specs = desired(&settings()).unwrap();
    let mut observed = observed_all(&specs);
    observed.get_mut("p.events").unwrap().partitions = 24;
    for allow in [false, true] {
        let err = plan(
            &specs,
            &observed,
            PlanOptions {
                allow_partition_increase: allow,
            },
        )
        .unwrap_err();
        let ProvisionError::Refused(reasons) = err else {
            panic!("expected Refused")
        };
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].contains("p.events has 24 partitions, the settings ask for 12"));
        assert!(reasons[0].contains("cannot remove partitions"));
    }
}

#[test]
fn growing_needs_the_flag() {
    let specs = desired(&settings()).unwrap();
    let mut observed = observed_all(&specs);
    observed.get_mut("p.deliveries").unwrap().partitions = 6;
    let err = plan(&specs, &observed, PlanOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("--allow-partition-increase"),
        "{err}"
    );
    let plan = plan(
        &specs,
        &observed,
        PlanOptions {
            allow_partition_increase: true,
        },
    )
    .unwrap();
    assert_eq!(
        plan.actions,
        [Action::AddPartitions {
            topic: "p.deliveries".into(),
            from: 6,
            to: 12
        }]
    );
}

#[test]
fn replication_difference_is_a_note_not_an_action() {
    let specs = desired(&settings()).unwrap();
    let mut observed = observed_all(&specs);
    observed.get_mut("p.events").unwrap().replication = 1;
    let plan = plan(&specs, &observed, PlanOptions::default()).unwrap();
    assert!(plan.is_empty());
    assert_eq!(plan.notes.len(), 1);
    assert!(plan.notes[0].contains("kafka-reassign-partitions"));
}

#[test]
fn actions_are_ordered_create_alter_grow() {
    let specs = desired(&settings()).unwrap();
    let mut observed = observed_all(&specs);
    observed.remove("p.events.quarantine");
    observed.get_mut("p.events").unwrap().partitions = 3;
    observed
        .get_mut("p.deliveries.dlq")
        .unwrap()
        .effective
        .insert("retention.ms".into(), "1".into());
    let plan = plan(
        &specs,
        &observed,
        PlanOptions {
            allow_partition_increase: true,
        },
    )
    .unwrap();
    let kinds: Vec<&str> = plan
        .actions
        .iter()
        .map(|a| match a {
            Action::Create(_) => "create",
            Action::AlterConfigs { .. } => "alter",
            Action::AddPartitions { .. } => "grow",
        })
        .collect();
    assert_eq!(kinds, ["create", "alter", "grow"]);
}

#[test]
fn wrong_topic_config_flags_compaction_mismatches() {
    let t = Topics::with_prefix("x.").unwrap();
    let cases = [
        ("x.subscriptions", Some("compact"), false),
        ("x.subscriptions", Some("delete"), true),
        ("x.subscriptions", None, true),
        ("x.subscriptions.health", Some("compact"), false),
        ("x.subscriptions.health", Some("delete"), true),
        ("x.deliveries", Some("delete"), false),
        ("x.deliveries", Some("compact"), true),
        ("x.events", Some("compact,delete"), true),
        ("x.events", None, false),
    ];
    for (topic, policy, wrong) in cases {
        let got = wrong_topic_config(&t, topic, policy);
        assert_eq!(got.is_some(), wrong, "{topic} {policy:?}: {got:?}");
        if let Some(why) = got {
            assert!(why.starts_with(topic), "{why}");
        }
    }
}

#[test]
fn flag_values_parse() {
    assert_eq!(
        parse_tier("retry-5s=5s").unwrap(),
        ("retry-5s".into(), Duration::from_secs(5))
    );
    assert!(parse_tier("retry-5s").is_err());
    assert_eq!(
        parse_override("deliveries.retry-2h:retention=14d").unwrap(),
        (
            "deliveries.retry-2h".into(),
            "retention".into(),
            "14d".into()
        )
    );
    for bad in ["events", "events:partitions", ":a=b", "events:=3"] {
        assert!(parse_override(bad).is_err(), "{bad}");
    }
    assert_eq!(
        default_tiers()
            .iter()
            .map(|(_, d)| d.as_secs())
            .collect::<Vec<_>>(),
        [10, 60, 900, 7200]
    );
}

#[test]
fn one_ladder_value_reads_back_and_names_the_command() {
    use super::spec::{tiers_value, topics_command, LadderArgs};
    use clap::Parser;
    let tiers = vec![
        ("fast".to_owned(), Duration::from_secs(5)),
        ("slow".to_owned(), Duration::from_secs(90)),
    ];
    let value = tiers_value(&tiers);
    assert_eq!(value, "fast=5s,slow=1m30s");
    let back: Vec<_> = value.split(',').map(|t| parse_tier(t).unwrap()).collect();
    assert_eq!(back, tiers);

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        common: crate::config::CommonArgs,
        #[command(flatten)]
        ladder: LadderArgs,
    }
    let cli =
        Cli::try_parse_from(["x", "--topic-prefix", "dev.", "--retry-tiers", &value]).unwrap();
    assert_eq!(cli.ladder.tiers(), tiers);
    assert_eq!(
        topics_command(&cli.common, &cli.ladder.tiers()),
        "hookline-fanout --topic-prefix dev. topics --execute --retry-tiers fast=5s,slow=1m30s"
    );
    let cli = Cli::try_parse_from(["x", "--brokers", "k:9093"]).unwrap();
    assert_eq!(cli.ladder.tiers(), default_tiers());
    assert_eq!(
        topics_command(&cli.common, &cli.ladder.tiers()),
        "hookline-fanout --brokers k:9093 topics --execute"
    );
}

#[test]
fn replication_fits_the_cluster_or_is_refused_naming_the_flag() {
    use super::cli::{replication, too_few_brokers, TopicsArgs};
    use clap::Parser;
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        topics: TopicsArgs,
    }
    let args = |extra: &[&str]| {
        Cli::try_parse_from(std::iter::once("topics").chain(extra.iter().copied()))
            .unwrap()
            .topics
    };
    // Default: 3 on three brokers, 1 (said) on one, refused on two.
    assert_eq!(replication(&args(&[]), 3).unwrap(), (3, None));
    let (r, said) = replication(&args(&[]), 1).unwrap();
    assert_eq!(r, 1);
    assert!(said.unwrap().contains("one broker"));
    let err = replication(&args(&[]), 2).unwrap_err().to_string();
    assert!(err.contains("--replication-factor 2"), "{err}");
    // --dev: 1 whatever the cluster, said.
    let (r, said) = replication(&args(&["--dev"]), 3).unwrap();
    assert_eq!(r, 1);
    assert!(said.unwrap().contains("--dev"));
    assert!(Cli::try_parse_from(["topics", "--dev", "--replication-factor", "3"]).is_err());
    // An explicit factor is kept, and refused by the spec check if too large.
    assert_eq!(
        replication(&args(&["--replication-factor", "3"]), 1).unwrap(),
        (3, None)
    );
    let specs = desired(&settings()).unwrap();
    let err = too_few_brokers(&specs, 1).unwrap_err().to_string();
    assert!(
        err.contains("--replication-factor 1") && err.contains("--dev"),
        "{err}"
    );
    too_few_brokers(&specs, 3).unwrap();
    // min.insync.replicas follows the factor: 1 with 1.
    let one = desired(&Settings {
        replication: 1,
        ..settings()
    })
    .unwrap();
    assert!(one
        .iter()
        .all(|s| s.configs.get("min.insync.replicas").map(String::as_str) == Some("1")));
}

#[test]
fn overflow_lanes_follow_the_partitions_of_deliveries_and_never_have_fewer() {
    let specs = desired(&with(&["deliveries:partitions=24"])).unwrap();
    let lanes: Vec<&TopicSpec> = specs
        .iter()
        .filter(|s| s.name.starts_with("p.deliveries.lane-"))
        .collect();
    assert_eq!(lanes.len(), hookline_envelope::OVERFLOW_LANES);
    assert!(lanes.iter().all(|s| s.partitions == 24), "{lanes:?}");
    let more = desired(&with(&["deliveries.lane-3:partitions=48"])).unwrap();
    let lane3 = more
        .iter()
        .find(|s| s.name == "p.deliveries.lane-3")
        .unwrap();
    assert_eq!(lane3.partitions, 48, "more is allowed");
    let problems = invalid(&with(&["deliveries.lane-3:partitions=6"]));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("deliveries.lane-3: 6 partitions, fewer than deliveries' 12")),
        "{problems:?}"
    );
}
