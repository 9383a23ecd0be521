//! fanout against a real Kafka broker: matching and tenant isolation, live
//! subscription changes, and quarantine of bad input around good events.

mod common;

use std::time::Duration;

use common::{header, pairs, Env};
use hookline_envelope::{delivery_id, encode, DomainEvent};
use hookline_testkit::records::{event, subscription};

const DRAIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_exact_and_prefix_types_and_never_another_tenants_events() {
    let env = Env::new("fanout-match").await;
    let url = "https://hooks.example/in";
    env.put(&subscription("acme-all", "acme", &["*"], url))
        .await;
    env.put(&subscription("acme-inv", "acme", &["invoice.*"], url))
        .await;
    env.put(&subscription("acme-exact", "acme", &["order.created"], url))
        .await;
    env.put(&subscription("globex-inv", "globex", &["invoice.*"], url))
        .await;
    let mut off = subscription("acme-off", "acme", &["*"], url);
    off.enabled = false;
    env.put(&off).await;

    let events = [
        ("e1", "acme", "invoice.paid"),
        ("e2", "acme", "order.created"),
        ("e3", "acme", "order.shipped"),
        ("e4", "globex", "invoice.paid"),
        ("e5", "globex", "order.created"),
        ("e6", "initech", "invoice.paid"),
        ("e7", "acme", "invoicex.paid"),
        ("e8", "acme", "invoice"),
    ];
    for (id, tenant, ty) in events {
        env.publish(&event(id, tenant, ty)).await;
    }
    let fanout = env.start(&[]);
    env.drained(DRAIN).await;
    let deliveries = env.deliveries().await;
    fanout.shutdown().await;

    // A disabled subscription still gets its deliveries: the dispatcher keeps them
    // (dead letters `subscription_disabled`) for replay once it is enabled again.
    let expected: Vec<(String, String)> = [
        ("e1", "acme-all"),
        ("e1", "acme-inv"),
        ("e1", "acme-off"),
        ("e2", "acme-all"),
        ("e2", "acme-exact"),
        ("e2", "acme-off"),
        ("e3", "acme-all"),
        ("e3", "acme-off"),
        ("e4", "globex-inv"),
        ("e7", "acme-all"),
        ("e7", "acme-off"),
        ("e8", "acme-all"),
        ("e8", "acme-off"),
    ]
    .iter()
    .map(|(e, s)| (e.to_string(), s.to_string()))
    .collect();
    assert_eq!(pairs(&deliveries), expected);
    for d in &deliveries {
        assert_eq!(d.delivery_id, delivery_id(&d.event_id, &d.subscription_id));
        assert_eq!(d.attempt, 0);
        assert_eq!(d.due_at, d.created_at);
        let source = events.iter().find(|(id, ..)| *id == d.event_id).unwrap();
        assert_eq!(d.tenant_id, source.1, "a delivery keeps its event's tenant");
        assert_eq!(d.event_type, source.2);
        assert_eq!(d.payload, event(&d.event_id, source.1, source.2).payload);
    }
}

/// Publishes probe events until `pred` holds for the deliveries of the last
/// probe (the table follows its topic asynchronously), then checks that it
/// keeps holding for `confirm` more events. Returns the probes used.
/// The W3C trace context on an event's Kafka headers (any case) is kept on every
/// delivery it fans out to; an invalid `traceparent` is dropped with its
/// `tracestate`, and an event without one gives deliveries without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_trace_context_is_kept_on_its_deliveries_when_valid() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let env = Env::new("fanout-trace").await;
    let url = "https://hooks.example/in";
    env.put(&subscription("a1", "acme", &["*"], url)).await;
    env.put(&subscription("a2", "acme", &["invoice.*"], url))
        .await;
    let topic = env.topics.events().to_owned();
    let traced = rdkafka::message::OwnedHeaders::new()
        .insert(rdkafka::message::Header {
            key: "TraceParent",
            value: Some(TP),
        })
        .insert(rdkafka::message::Header {
            key: "tracestate",
            value: Some("congo=t61rcWkgMzE"),
        });
    let invalid = rdkafka::message::OwnedHeaders::new()
        .insert(rdkafka::message::Header {
            key: "traceparent",
            value: Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        })
        .insert(rdkafka::message::Header {
            key: "tracestate",
            value: Some("congo=t61rcWkgMzE"),
        });
    for (id, headers) in [
        ("traced", Some(traced)),
        ("invalid", Some(invalid)),
        ("plain", None),
    ] {
        let bytes = encode(&event(id, "acme", "invoice.paid"));
        env.send(&topic, b"acme", Some(&bytes), headers).await;
    }
    let fanout = env.start(&[]);
    env.drained(DRAIN).await;
    let deliveries = env.deliveries().await;
    fanout.shutdown().await;

    assert_eq!(deliveries.len(), 6);
    for d in &deliveries {
        let expected = match d.event_id.as_str() {
            "traced" => (Some(TP), Some("congo=t61rcWkgMzE")),
            _ => (None, None),
        };
        assert_eq!(
            (d.traceparent.as_deref(), d.tracestate.as_deref()),
            expected,
            "{} to {}",
            d.event_id,
            d.subscription_id
        );
    }
}

async fn until_effective(
    env: &Env,
    label: &str,
    event_type: &str,
    pred: impl Fn(&[String]) -> bool,
    confirm: usize,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut n = 0;
    loop {
        n += 1;
        let id = format!("{label}-probe-{n}");
        env.publish(&event(&id, "acme", event_type)).await;
        env.drained(DRAIN).await;
        let subs: Vec<String> = env
            .deliveries()
            .await
            .into_iter()
            .filter(|d| d.event_id == id)
            .map(|d| d.subscription_id)
            .collect();
        if pred(&subs) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{label}: the change did not take effect within 60 s (last probe went to {subs:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for i in 0..confirm {
        env.publish(&event(&format!("{label}-after-{i}"), "acme", event_type))
            .await;
    }
    env.drained(DRAIN).await;
    let all = env.deliveries().await;
    for i in 0..confirm {
        let id = format!("{label}-after-{i}");
        let subs: Vec<String> = all
            .iter()
            .filter(|d| d.event_id == id)
            .map(|d| d.subscription_id.clone())
            .collect();
        assert!(
            pred(&subs),
            "{label}: event {id} went to {subs:?} after the change took effect"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_created_changed_disabled_and_deleted_while_events_flow() {
    let env = Env::new("fanout-live").await;
    let url = "https://hooks.example/in";
    env.put(&subscription("base", "acme", &["*"], url)).await;
    let fanout = env.start(&[]);

    // Before the subscription exists, only `base` receives.
    until_effective(&env, "before", "invoice.paid", |s| s == ["base"], 5).await;

    let mut live = subscription("live", "acme", &["invoice.*"], url);
    env.put(&live).await;
    until_effective(
        &env,
        "created",
        "invoice.paid",
        |s| s == ["base", "live"],
        10,
    )
    .await;

    live.event_types = vec!["order.*".into()];
    live.version = 2;
    env.put(&live).await;
    until_effective(&env, "changed", "invoice.paid", |s| s == ["base"], 10).await;
    until_effective(
        &env,
        "changed-order",
        "order.created",
        |s| s == ["base", "live"],
        5,
    )
    .await;

    // Disabled, it still gets its deliveries (the dispatcher keeps them), and a
    // changed filter still takes effect.
    live.enabled = false;
    live.event_types = vec!["order.shipped".into()];
    live.version = 3;
    env.put(&live).await;
    until_effective(&env, "disabled", "order.created", |s| s == ["base"], 10).await;
    until_effective(
        &env,
        "disabled-kept",
        "order.shipped",
        |s| s == ["base", "live"],
        3,
    )
    .await;

    live.enabled = true;
    live.event_types = vec!["order.*".into()];
    live.version = 4;
    env.put(&live).await;
    until_effective(
        &env,
        "enabled",
        "order.created",
        |s| s == ["base", "live"],
        5,
    )
    .await;

    env.delete("live").await;
    until_effective(&env, "deleted", "order.created", |s| s == ["base"], 10).await;

    fanout.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_quarantined_while_good_events_around_it_fan_out() {
    let env = Env::new("fanout-quarantine").await;
    env.put(&subscription(
        "acme-all",
        "acme",
        &["*"],
        "https://hooks.example/in",
    ))
    .await;
    let topic = env.topics.events().to_owned();
    let good = |n: u32| event(&format!("good-{n}"), "acme", "invoice.paid");

    let mut unknown = encode(&good(99));
    unknown[2..10].copy_from_slice(&0x0123_4567_89ab_cdef_u64.to_le_bytes());
    let mut truncated = encode(&good(98));
    truncated.truncate(truncated.len() - 4);
    let mut oversize: DomainEvent = good(97);
    oversize.payload = vec![b'x'; 4096];
    let oversize = encode(&oversize);
    let wrong_record = encode(&subscription("s", "acme", &["*"], "https://x.example"));

    env.publish(&good(1)).await;
    env.send(
        &topic,
        b"acme",
        Some(b"{\"json\":\"not avro\"}"),
        Some(header("source", "legacy")),
    )
    .await;
    env.publish(&good(2)).await;
    env.send(&topic, b"acme", Some(&unknown), None).await;
    env.publish(&good(3)).await;
    env.send(&topic, b"acme", Some(&truncated), None).await;
    env.publish(&good(4)).await;
    env.send(&topic, b"acme", Some(&oversize), None).await;
    env.publish(&good(5)).await;
    env.send(&topic, b"acme", Some(&wrong_record), None).await;
    env.publish(&good(6)).await;
    env.send(&topic, b"acme", None, None).await;
    env.publish(&good(7)).await;

    let fanout = env.start(&["--max-payload-bytes", "1024"]);
    env.drained(DRAIN).await;
    let deliveries = env.deliveries().await;
    let quarantined = env.quarantined().await;
    fanout.shutdown().await;

    let delivered: Vec<String> = pairs(&deliveries).into_iter().map(|(e, _)| e).collect();
    assert_eq!(
        delivered,
        (1..=7).map(|n| format!("good-{n}")).collect::<Vec<_>>()
    );
    let reasons: Vec<&str> = quarantined.iter().map(|q| q.reason.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "not_avro",
            "unknown_fingerprint",
            "bad_datum",
            "payload_too_large",
            "wrong_record",
            "not_avro"
        ]
    );
    let first = &quarantined[0];
    assert_eq!(first.key.as_deref(), Some(&b"acme"[..]));
    assert_eq!(first.value, b"{\"json\":\"not avro\"}");
    assert_eq!(first.headers.len(), 1);
    assert_eq!(first.headers[0].name, "source");
    assert_eq!(first.headers[0].value.as_deref(), Some(&b"legacy"[..]));
    assert_eq!(first.source_topic, topic);
    assert_eq!(quarantined[1].value, unknown);
    assert!(
        quarantined[1].detail.contains("0123456789abcdef"),
        "{}",
        quarantined[1].detail
    );
    assert_eq!(quarantined[3].value, oversize);
    // Coordinates are the originals: strictly increasing on one partition.
    let partition = first.source_partition;
    assert!(quarantined.iter().all(|q| q.source_partition == partition));
    assert!(quarantined
        .windows(2)
        .all(|w| w[0].source_offset < w[1].source_offset));
}

/// A tenant whose deliveries in one window reach `--overflow-route-records`
/// has its further *unordered* deliveries written straight to its overflow
/// lane, to the partition its deliveries go to, in the same transactions:
/// every delivery exactly once across `deliveries` and the lane; its ordered
/// subscription's and every other tenant's stay in `deliveries`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_goes_straight_to_its_lane_exactly_once_and_ordered_ones_stay() {
    use hookline_envelope::{decode, Delivery, Topics};
    use rdkafka::message::Message;

    let env = Env::new("fanout-burst").await;
    let url = "https://hooks.example/in";
    env.put(&subscription("whale-a", "whale", &["*"], url))
        .await;
    let mut ordered = subscription("whale-o", "whale", &["*"], url);
    ordered.max_in_flight = 1;
    env.put(&ordered).await;
    env.put(&subscription("small-s", "small", &["*"], url))
        .await;
    const WHALE: usize = 300;
    for i in 0..WHALE {
        env.publish(&event(&format!("w{i}"), "whale", "order.created"))
            .await;
        if i % 30 == 0 {
            env.publish(&event(&format!("s{i}"), "small", "order.created"))
                .await;
        }
    }
    // A window longer than the test: the count is the whole burst's.
    let fanout = env.start(&[
        "--overflow-route-records",
        "40",
        "--overflow-route-window",
        "5m",
    ]);
    env.drained(DRAIN).await;
    let deliveries = env.deliveries().await;
    let raw = hookline_testkit::kafka::read_to_end(env.topics.deliveries())
        .await
        .unwrap();
    let lane_topic = env
        .topics
        .lanes()
        .nth(Topics::lane_of("whale", 8))
        .unwrap()
        .to_owned();
    let mut lanes = Vec::new();
    for lane in env.topics.lanes() {
        let records = hookline_testkit::kafka::read_to_end(lane).await.unwrap();
        if lane != lane_topic {
            assert!(records.is_empty(), "{lane} holds {} records", records.len());
        }
        lanes.extend(records);
    }
    fanout.shutdown().await;

    let whale_partition = raw
        .iter()
        .find(|m| m.key() == Some(b"whale".as_slice()))
        .unwrap()
        .partition();
    let in_lane: Vec<Delivery> = lanes
        .iter()
        .map(|m| {
            assert_eq!(m.key(), Some(b"whale".as_slice()), "keyed by tenant");
            assert_eq!(
                m.partition(),
                whale_partition,
                "the partition of its deliveries"
            );
            decode(m.payload().unwrap()).unwrap()
        })
        .collect();
    let count = |ds: &[Delivery], sub: &str| ds.iter().filter(|d| d.subscription_id == sub).count();
    assert_eq!(count(&deliveries, "whale-o"), WHALE, "ordered ones stay");
    assert_eq!(count(&deliveries, "small-s"), WHALE / 30);
    assert_eq!(count(&in_lane, "whale-o") + count(&in_lane, "small-s"), 0);
    let routed = count(&in_lane, "whale-a");
    assert!(
        routed >= WHALE - 40,
        "only the burst's first deliveries stay in deliveries: {routed} of {WHALE} routed"
    );
    let mut ids: Vec<String> = deliveries
        .iter()
        .chain(&in_lane)
        .filter(|d| d.subscription_id == "whale-a")
        .map(|d| d.event_id.clone())
        .collect();
    ids.sort();
    let mut expected: Vec<String> = (0..WHALE).map(|i| format!("w{i}")).collect();
    expected.sort();
    assert_eq!(ids, expected, "each of the burst's deliveries exactly once");
}
