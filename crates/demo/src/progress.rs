//! Watches the pipeline from the outside — the receiver's log and the retry,
//! dead-letter and quarantine topics — and classifies every expected
//! delivery as delivered, dead-lettered, retrying (by tier) or pending.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt::Write as _,
    sync::{Arc, Mutex},
};

use hookline_envelope::{decode, DeadLetter, Delivery, Topics};
use hookline_testkit::receiver::Receiver;
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    message::Message,
    ClientConfig, Offset, TopicPartitionList,
};
use tokio_util::sync::CancellationToken;

/// One delivery the demo expects, by its delivery id.
#[derive(Debug, Clone)]
pub struct Expected {
    pub tenant: &'static str,
}

#[derive(Debug, Default)]
struct Seen {
    dead: HashMap<String, String>,
    tier: HashMap<String, String>,
    quarantined: usize,
}

/// What the topics and the receiver show.
#[derive(Debug, Clone)]
pub struct Tracker {
    expected: Arc<Mutex<HashMap<String, Expected>>>,
    seen: Arc<Mutex<Seen>>,
    tiers: Vec<String>,
    /// Column header per tier (its delay in this demo).
    labels: HashMap<String, String>,
}

/// Counts of one tenant (or all).
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub expected: usize,
    pub delivered: usize,
    pub dead: BTreeMap<String, usize>,
    pub retrying: BTreeMap<String, usize>,
    pub pending: usize,
}

impl Counts {
    pub fn dead_total(&self) -> usize {
        self.dead.values().sum()
    }
    pub fn retrying_total(&self) -> usize {
        self.retrying.values().sum()
    }
    fn add(&mut self, other: &Counts) {
        self.expected += other.expected;
        self.delivered += other.delivered;
        self.pending += other.pending;
        for (k, v) in &other.dead {
            *self.dead.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.retrying {
            *self.retrying.entry(k.clone()).or_default() += v;
        }
    }
}

impl Tracker {
    /// Starts reading the retry tiers, the DLQ and the quarantine topic.
    pub fn start(
        brokers: &str,
        topics: &Topics,
        labels: HashMap<String, String>,
        stop: CancellationToken,
    ) -> anyhow::Result<Self> {
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", "hookline-demo-watch")
            .set("enable.auto.commit", "false")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        let mut watched: Vec<&str> = topics.retries().map(|(_, t)| t).collect();
        watched.extend([topics.dlq(), topics.quarantine()]);
        for topic in &watched {
            for p in 0..crate::PARTITIONS {
                tpl.add_partition_offset(topic, p, Offset::Beginning)?;
            }
        }
        consumer.assign(&tpl)?;
        let tracker = Self {
            expected: Arc::default(),
            seen: Arc::default(),
            tiers: topics.retries().map(|(t, _)| t.to_owned()).collect(),
            labels,
        };
        let seen = Arc::clone(&tracker.seen);
        let tier_topics: HashMap<String, String> = topics
            .retries()
            .map(|(tier, topic)| (topic.to_owned(), tier.to_owned()))
            .collect();
        let (dlq, quarantine) = (topics.dlq().to_owned(), topics.quarantine().to_owned());
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    _ = stop.cancelled() => return,
                    m = consumer.recv() => m,
                };
                let Ok(msg) = msg else { continue };
                let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                let payload = msg.payload().unwrap_or_default();
                if msg.topic() == dlq {
                    if let Ok(dl) = decode::<DeadLetter>(payload) {
                        seen.dead.insert(dl.delivery.delivery_id, dl.reason);
                    }
                } else if msg.topic() == quarantine {
                    seen.quarantined += 1;
                } else if let Some(tier) = tier_topics.get(msg.topic()) {
                    if let Ok(d) = decode::<Delivery>(payload) {
                        seen.tier.insert(d.delivery_id, tier.clone());
                    }
                }
            }
        });
        Ok(tracker)
    }

    /// Records that `delivery_id` should reach its endpoint.
    pub fn expect(&self, delivery_id: String, tenant: &'static str) {
        self.expected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(delivery_id, Expected { tenant });
    }

    /// Quarantined records seen.
    pub fn quarantined(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .quarantined
    }

    /// Counts per tenant, plus the total, from the receiver's log and the topics.
    pub fn counts(&self, receiver: &Receiver) -> (BTreeMap<&'static str, Counts>, Counts) {
        let delivered: HashSet<String> = receiver
            .requests()
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .map(|r| r.header("webhook-id").to_owned())
            .collect();
        let expected = self.expected.lock().unwrap_or_else(|p| p.into_inner());
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut per: BTreeMap<&'static str, Counts> = BTreeMap::new();
        for (id, e) in expected.iter() {
            let c = per.entry(e.tenant).or_default();
            c.expected += 1;
            if delivered.contains(id) {
                c.delivered += 1;
            } else if let Some(reason) = seen.dead.get(id) {
                *c.dead.entry(reason.clone()).or_default() += 1;
            } else if let Some(tier) = seen.tier.get(id) {
                *c.retrying.entry(tier.clone()).or_default() += 1;
            } else {
                c.pending += 1;
            }
        }
        let mut total = Counts::default();
        for c in per.values() {
            total.add(c);
        }
        (per, total)
    }

    /// A table of the counts, one line per tenant and a total line.
    pub fn render(&self, tenants: &[&'static str], receiver: &Receiver) -> (String, Counts) {
        let (per, total) = self.counts(receiver);
        let mut out = String::new();
        let tiers = self
            .tiers
            .iter()
            .map(|t| {
                format!(
                    "{:>9}",
                    self.labels.get(t).map_or(t.as_str(), String::as_str)
                )
            })
            .collect::<String>();
        let _ = writeln!(
            out,
            "{:<10} {:>8} {:>9} {:>7} {tiers} {:>6}",
            "tenant", "expected", "delivered", "pending", "dead"
        );
        let line = |name: &str, c: &Counts| {
            let tiers = self
                .tiers
                .iter()
                .map(|t| format!("{:>9}", c.retrying.get(t).copied().unwrap_or(0)))
                .collect::<String>();
            format!(
                "{name:<10} {:>8} {:>9} {:>7} {tiers} {:>6}",
                c.expected,
                c.delivered,
                c.pending,
                c.dead_total()
            )
        };
        for t in tenants {
            let c = per.get(t).cloned().unwrap_or_default();
            let _ = writeln!(out, "{}", line(t, &c));
        }
        let _ = writeln!(out, "{}", line("total", &total));
        (out, total)
    }
}
