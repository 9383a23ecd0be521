use super::*;

fn tenant(id: &str, ws: f64, buffered: usize, in_flight: u32) -> TenantUse {
    TenantUse {
        tenant_id: id.into(),
        weight: 1.0,
        worker_seconds: ws,
        buffered,
        in_flight,
    }
}

fn sub(tenant: &str, id: &str, ws: f64, buffered: usize) -> SubscriptionUse {
    SubscriptionUse {
        tenant_id: tenant.into(),
        subscription_id: id.into(),
        worker_seconds: ws,
        buffered,
        in_flight: 1,
    }
}

fn report(promoted: Vec<Promoted>, tenants: Vec<TenantUse>, subs: Vec<SubscriptionUse>) -> Report {
    Report {
        at_ms: 1_780_000_000_000,
        overflow: OverflowReport {
            ceiling: 8,
            promoted,
            waiting: 0,
        },
        top_subscriptions: subs,
        top_tenants: tenants,
    }
}

#[test]
fn addresses_become_capacity_urls_and_bad_ones_are_named() {
    for (from, url) in [
        ("127.0.0.1:9465", "http://127.0.0.1:9465/capacity"),
        (" dispatcher-0:9465 ", "http://dispatcher-0:9465/capacity"),
        ("http://10.0.0.7:9465/", "http://10.0.0.7:9465/capacity"),
        ("http://10.0.0.7:9465", "http://10.0.0.7:9465/capacity"),
        (
            "http://proxy:8080/ns/pod/capacity",
            "http://proxy:8080/ns/pod/capacity",
        ),
    ] {
        assert_eq!(capacity_url(from).unwrap().to_string(), url, "{from}");
    }
    for (from, why) in [
        ("", "empty"),
        ("https://d:9465", "only http://"),
        ("ftp://d:9465", "only http://"),
        ("not an address", "not an address or URL"),
    ] {
        let e = capacity_url(from).unwrap_err().to_string();
        assert!(e.contains(why) && e.starts_with("--from"), "{from}: {e}");
    }
}

#[test]
fn a_report_ranks_by_worker_seconds_then_buffered_and_keeps_the_top() {
    let usage = Usage {
        tenants: (0..30)
            .map(|n| hookline_core::fair::TenantUsage {
                tenant_id: format!("t{n}"),
                weight: 1.0,
                worker_seconds: f64::from(n % 10),
                in_flight: 0,
                buffered_records: n as usize,
            })
            .collect(),
        subscriptions: vec![hookline_core::fair::SubscriptionUsage {
            subscription_id: "s".into(),
            tenant_id: "t1".into(),
            worker_seconds: 2.5,
            in_flight: 2,
            buffered_records: 7,
        }],
    };
    let r = Report::new(SystemTime::UNIX_EPOCH, Vec::new(), 8, 1, usage);
    assert_eq!(r.top_tenants.len(), TOP);
    let order: Vec<&str> = r
        .top_tenants
        .iter()
        .take(4)
        .map(|t| t.tenant_id.as_str())
        .collect();
    // Worker-seconds 9 for t9, t19, t29; the most buffered first among equals.
    assert_eq!(order, ["t29", "t19", "t9", "t28"]);
    assert_eq!(r.top_subscriptions[0].buffered, 7);
    assert_eq!(r.overflow.waiting, 1);
    // What a replica serves, the command reads back unchanged.
    let json = serde_json::to_string(&r).unwrap();
    assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), r);
}

#[test]
fn replicas_add_up_and_an_unreachable_one_is_listed_not_dropped() {
    let whale = Promoted {
        partition: 0,
        tenant_id: "whale-co".into(),
        lane: "lane-3".into(),
        since_ms: 1_780_000_000_000,
        for_s: 75,
    };
    let a = report(
        vec![whale],
        vec![
            tenant("whale-co", 80.0, 900, 4),
            tenant("small-co", 1.0, 2, 1),
        ],
        vec![sub("whale-co", "whale-1", 80.0, 900)],
    );
    let b = report(
        Vec::new(),
        vec![
            tenant("small-co", 2.0, 1, 0),
            tenant("mid-co", 50.0, 5000, 2),
        ],
        vec![
            sub("whale-co", "whale-1", 10.0, 10),
            sub("mid-co", "m", 50.0, 5000),
        ],
    );
    let down = CapacityError::Fetch {
        from: "d-2:9465".into(),
        reason: "connection refused".into(),
    };
    let fleet = Fleet::add_up(
        vec![
            ("d-0:9465".into(), Ok(a)),
            ("d-1:9465".into(), Ok(b)),
            ("d-2:9465".into(), Err(down)),
        ],
        By::WorkerSeconds,
        10,
    );
    let tenants: Vec<(&str, f64, usize, u32)> = fleet
        .top_tenants
        .iter()
        .map(|t| {
            (
                t.tenant_id.as_str(),
                t.worker_seconds,
                t.buffered,
                t.in_flight,
            )
        })
        .collect();
    assert_eq!(
        tenants,
        [
            ("whale-co", 80.0, 900, 4),
            ("mid-co", 50.0, 5000, 2),
            ("small-co", 3.0, 3, 1)
        ]
    );
    assert_eq!(fleet.top_subscriptions[0].worker_seconds, 90.0);
    assert_eq!(fleet.top_subscriptions[0].buffered, 910);
    assert_eq!(fleet.unreachable.len(), 1);
    assert!(fleet.unreachable[0].error.contains("connection refused"));

    let by_backlog = Fleet::add_up(
        vec![(
            "d-0:9465".into(),
            Ok(report(
                Vec::new(),
                vec![
                    tenant("whale-co", 80.0, 900, 4),
                    tenant("mid-co", 50.0, 5000, 2),
                ],
                Vec::new(),
            )),
        )],
        By::Buffered,
        1,
    );
    assert_eq!(by_backlog.top_tenants.len(), 1);
    assert_eq!(by_backlog.top_tenants[0].tenant_id, "mid-co");

    let text = fleet.render();
    assert!(text.contains("d-0:9465  2026-05-28T"), "{text}");
    assert!(text.contains("1/8"), "{text}");
    assert!(
        text.contains("d-2:9465  UNREACHABLE: d-2:9465: connection refused"),
        "{text}"
    );
    let promoted_row = text
        .lines()
        .find(|l| l.contains("whale-co") && l.contains("lane-3"))
        .expect("a promoted row");
    assert!(promoted_row.ends_with("1m 15s"), "{promoted_row}");
    assert!(text.contains("\nwhale-co  1       80.0"), "{text}");
}

#[test]
fn no_promotions_read_as_none() {
    let fleet = Fleet::add_up(
        vec![("d:1".into(), Ok(report(Vec::new(), Vec::new(), Vec::new())))],
        By::WorkerSeconds,
        10,
    );
    assert!(fleet
        .render()
        .contains("PROMOTED TO OVERFLOW LANES\n(none)\n"));
}
