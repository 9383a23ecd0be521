//! The demo's cast: tenants, their subscriptions and how each endpoint
//! behaves, chosen so every path of the pipeline shows up in about half a minute.

use std::time::Duration;

use hookline_testkit::receiver::{Behaviour, Receiver};

/// One subscription of the demo and the endpoint behind it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub tenant: &'static str,
    pub subscription: &'static str,
    pub patterns: &'static [&'static str],
    pub max_in_flight: i32,
    /// What the endpoint does, for the legend.
    pub story: &'static str,
    /// Receiver path, or `None` for an endpoint that is down (nothing listens).
    pub path: Option<&'static str>,
    pub behaviour: Behaviour,
}

/// How long the demo's breakers may stay open before their subscription is
/// disabled (`--breaker-disable-after`; five days by default). A macro so the
/// legend quotes the same literal the dispatcher is given.
macro_rules! breaker_disable_after {
    () => {
        "20s"
    };
}

/// [`breaker_disable_after!`], as the dispatcher's flag value.
pub const BREAKER_DISABLE_AFTER: &str = breaker_disable_after!();

/// Event types published, round-robin.
pub const EVENT_TYPES: [&str; 3] = ["invoice.paid", "order.created", "invoice.voided"];

/// The endpoints, one or two per tenant. The flaky one fails its first
/// `flaky_failures` requests (so its breaker opens and it recovers).
pub fn endpoints(flaky_failures: u32) -> Vec<Endpoint> {
    vec![
        Endpoint {
            tenant: "acme",
            subscription: "acme-billing",
            patterns: &["invoice.*"],
            max_in_flight: 4,
            story: "healthy, fast (204)",
            path: Some("/acme/billing"),
            behaviour: Behaviour::status(204),
        },
        Endpoint {
            tenant: "acme",
            subscription: "acme-orders",
            patterns: &["order.created"],
            max_in_flight: 1,
            story: "healthy, ordered (max_in_flight 1)",
            path: Some("/acme/orders"),
            behaviour: Behaviour::status(200).delay(Duration::from_millis(20)),
        },
        Endpoint {
            tenant: "globex",
            subscription: "globex-all",
            patterns: &["*"],
            max_in_flight: 2,
            story: "slow (400 ms per response)",
            path: Some("/globex"),
            behaviour: Behaviour::status(200).delay(Duration::from_millis(400)),
        },
        Endpoint {
            tenant: "initech",
            subscription: "initech-all",
            patterns: &["*"],
            max_in_flight: 4,
            story: "503 for its first requests, then recovers: the run of 503s opens its \
                    circuit breaker, which parks its deliveries (no attempt spent) until a probe \
                    succeeds",
            path: Some("/initech"),
            behaviour: Behaviour::status(204).fail_first(flaky_failures, 503),
        },
        Endpoint {
            tenant: "umbrella",
            subscription: "umbrella-gone",
            patterns: &["invoice.*"],
            // One at a time: the 410 disables it before the next is started.
            max_in_flight: 1,
            story: "410 Gone: dead-lettered, the subscription disabled, the rest kept",
            path: Some("/umbrella"),
            behaviour: Behaviour::status(410).body("this endpoint was removed"),
        },
        Endpoint {
            tenant: "hooli",
            subscription: "hooli-down",
            patterns: &["order.*"],
            max_in_flight: 4,
            story: concat!(
                "down (connection refused): retried up the ladder; once its breaker opens, \
                 its deliveries are parked and one probe at a time climbs; open for ",
                breaker_disable_after!(),
                ", the subscription is disabled and what it parked is kept as dead letters"
            ),
            path: None,
            behaviour: Behaviour::status(204),
        },
    ]
}

/// The tenants in display order.
pub fn tenants() -> Vec<&'static str> {
    let mut t: Vec<&'static str> = Vec::new();
    for e in endpoints(0) {
        if !t.contains(&e.tenant) {
            t.push(e.tenant);
        }
    }
    t
}

/// Registers every behaviour with the receiver and returns each endpoint's URL.
pub fn configure(
    receiver: &Receiver,
    down_url: &str,
    flaky_failures: u32,
) -> Vec<(Endpoint, String)> {
    endpoints(flaky_failures)
        .into_iter()
        .map(|e| {
            let url = match e.path {
                Some(path) => {
                    receiver.set(path, e.behaviour.clone());
                    receiver.url(path)
                }
                None => down_url.to_owned(),
            };
            (e, url)
        })
        .collect()
}
