#![allow(clippy::unwrap_used)]

use super::*;
use crate::row::{Kind, RawRecord};

const NOW: i64 = 1_795_996_000_000; // 2026-11-29T23:46:40Z

fn args() -> FilterArgs {
    FilterArgs::default()
}

#[test]
fn times_read_as_rfc3339_dates_and_ages() {
    let cases = [
        ("2026-11-29T10:00:00Z", 1_795_946_400_000),
        ("2026-11-29T11:00:00+01:00", 1_795_946_400_000),
        ("2026-11-29", 1_795_910_400_000),
        ("2h", NOW - 7_200_000),
        ("30m", NOW - 1_800_000),
        ("7d", NOW - 7 * 86_400_000),
    ];
    for (text, want) in cases {
        assert_eq!(parse_time("--since", text, NOW), Ok(want), "{text}");
    }
}

#[test]
fn bad_filters_name_the_flag_and_the_fix() {
    let cases: Vec<(FilterArgs, &str, &str)> = vec![
        (
            FilterArgs {
                since: Some("yesterday-ish".into()),
                ..args()
            },
            "--since",
            "RFC 3339",
        ),
        (
            FilterArgs {
                until: Some("2026-13-01".into()),
                ..args()
            },
            "--until",
            "RFC 3339",
        ),
        (
            FilterArgs {
                since: Some("1h".into()),
                until: Some("2h".into()),
                ..args()
            },
            "--until",
            "not after --since",
        ),
        (
            FilterArgs {
                tenants: vec!["".into()],
                ..args()
            },
            "--tenant",
            "empty",
        ),
        (
            FilterArgs {
                event_types: vec!["a.*.b".into()],
                ..args()
            },
            "--event-type",
            "",
        ),
    ];
    for (a, flag, why) in cases {
        let err = a.build(NOW).unwrap_err();
        assert_eq!(err.flag, flag, "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
}

fn dead_row(tenant: &str, sub: &str, ty: &str, reason: &str, dead_at: i64) -> ArchiveRow {
    let mut row = ArchiveRow::from_record(
        Kind::Dlq,
        RawRecord {
            topic: "deliveries.dlq",
            partition: 0,
            offset: 0,
            timestamp: Some(dead_at),
            key: None,
            value: None,
        },
        vec![],
        NOW,
    );
    row.tenant_id = Some(tenant.into());
    row.subscription_id = Some(sub.into());
    row.event_type = Some(ty.into());
    row.reason = reason.into();
    row.dead_at = Some(dead_at);
    row
}

#[test]
fn every_filter_must_match_and_repeats_mean_any() {
    let row = dead_row("acme", "s1", "invoice.paid", "exhausted", NOW - 1000);
    let ok = |a: FilterArgs| a.build(NOW).unwrap().matches(&row);
    assert!(ok(args()));
    assert!(ok(FilterArgs {
        tenants: vec!["globex".into(), "acme".into()],
        ..args()
    }));
    assert!(!ok(FilterArgs {
        tenants: vec!["globex".into()],
        ..args()
    }));
    assert!(ok(FilterArgs {
        event_types: vec!["invoice.*".into()],
        reasons: vec!["exhausted".into()],
        subscriptions: vec!["s1".into()],
        ..args()
    }));
    assert!(!ok(FilterArgs {
        event_types: vec!["order.*".into()],
        ..args()
    }));
    assert!(!ok(FilterArgs {
        reasons: vec!["rejected_4xx".into()],
        ..args()
    }));
    assert!(ok(FilterArgs {
        since: Some("1m".into()),
        ..args()
    }));
    assert!(!ok(FilterArgs {
        until: Some("1m".into()),
        ..args()
    }));
}

#[test]
fn undecodable_rows_match_only_filters_they_can_satisfy() {
    let mut row = dead_row("x", "s", "t", "undecodable", NOW);
    row.tenant_id = None;
    row.subscription_id = None;
    row.event_type = None;
    let f = |a: FilterArgs| a.build(NOW).unwrap().matches(&row);
    assert!(f(FilterArgs {
        reasons: vec!["undecodable".into()],
        ..args()
    }));
    assert!(!f(FilterArgs {
        tenants: vec!["x".into()],
        ..args()
    }));
    assert!(!f(FilterArgs {
        event_types: vec!["*".into()],
        ..args()
    }));
}

#[test]
fn archive_directories_are_pruned_by_date_and_tenant() {
    let f = FilterArgs {
        since: Some("2026-11-28T12:00:00Z".into()),
        until: Some("2026-11-29T00:00:00Z".into()),
        tenants: vec!["acme:eu".into()],
        ..args()
    }
    .build(NOW)
    .unwrap();
    assert!(!f.may_match_date("2026-11-27"));
    assert!(f.may_match_date("2026-11-28"));
    assert!(!f.may_match_date("2026-11-29"));
    assert!(f.may_match_tenant_dir("acme_3Aeu"));
    assert!(!f.may_match_tenant_dir("acme"));
    assert!(args().build(NOW).unwrap().may_match_tenant_dir("_unknown"));
}
