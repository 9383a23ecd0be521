//! Retry chains as a `read_committed` reader sees them: every record on the
//! retry tiers and the DLQ, per delivery. Exactly-once hand-offs mean one
//! retry record per (delivery, attempt) — a second one is a forked chain —
//! attempts 1..=k with no gap, and at most one dead letter per delivery.
//!
//! A tier also holds parked records, which are no link of a chain: a delivery
//! its open circuit breaker held back (written unattempted, `attempt` and
//! `last_attempt_at` as read, only `due_at` moved to the probe time) and a
//! record its tier released early (written back as read). A delivery may be
//! parked many times. A retry record is written by an attempt, and every
//! attempt stamps its own start in `last_attempt_at`, so records of one
//! (delivery, attempt) that share `last_attempt_at` are one retry record and
//! its parked copies, while two retry records of one attempt — a fork, that
//! attempt made twice and both follow-ups committed — differ in it. A record
//! with `attempt` 0 is a first attempt parked before it was ever made.

use std::collections::{BTreeMap, HashMap, HashSet};

use hookline_envelope::{DeadLetter, Delivery};
use hookline_testkit::{kafka, pipeline::Pipeline, records};
use rdkafka::Message;

/// The tiers and the DLQ of one pipeline, read to their (stable) end.
#[derive(Debug, Default)]
pub struct Chains {
    /// delivery id → attempt (attempts already made) → retry records of it on
    /// the tiers (distinct attempt starts; parked copies not counted).
    pub attempts: HashMap<String, BTreeMap<i32, usize>>,
    /// Records per tier name (retry and parked).
    pub per_tier: BTreeMap<String, usize>,
    /// Parked records (see the module doc), and the deliveries they belong to.
    pub parked: usize,
    pub parked_deliveries: HashSet<String>,
    /// delivery id → "tier/partition@offset" of each of its tier records, for
    /// the evidence of a fork.
    pub coordinates: HashMap<String, Vec<String>>,
    /// delivery id → (reason, attempt) of each of its dead letters.
    pub dead: HashMap<String, Vec<(String, i32)>>,
}

impl Chains {
    pub async fn read(p: &Pipeline) -> anyhow::Result<Self> {
        let mut chains = Self::default();
        // (delivery, attempt, last_attempt_at) of every retry record seen.
        let mut seen: HashSet<(String, i32, Option<i64>)> = HashSet::new();
        for (tier, topic) in p.topics.retries() {
            let records = kafka::read_to_end(topic).await?;
            chains.per_tier.insert(tier.to_owned(), records.len());
            for m in &records {
                let d: Delivery = records::decoded(m)?;
                chains
                    .coordinates
                    .entry(d.delivery_id.clone())
                    .or_default()
                    .push(format!(
                        "{tier}/{}@{} attempt {}",
                        m.partition(),
                        m.offset(),
                        d.attempt
                    ));
                if d.attempt == 0
                    || !seen.insert((d.delivery_id.clone(), d.attempt, d.last_attempt_at))
                {
                    chains.parked += 1;
                    chains.parked_deliveries.insert(d.delivery_id);
                    continue;
                }
                *chains
                    .attempts
                    .entry(d.delivery_id)
                    .or_default()
                    .entry(d.attempt)
                    .or_default() += 1;
            }
        }
        for m in &kafka::read_to_end(p.topics.dlq()).await? {
            let letter: DeadLetter = records::decoded(m)?;
            chains
                .dead
                .entry(letter.delivery.delivery_id)
                .or_default()
                .push((letter.reason, letter.delivery.attempt));
        }
        Ok(chains)
    }

    pub fn tier_records(&self) -> usize {
        self.per_tier.values().sum()
    }

    pub fn dead_letters(&self) -> usize {
        self.dead.values().map(Vec::len).sum()
    }

    /// Retry records (tier records that are not parked).
    pub fn retry_records(&self) -> usize {
        self.tier_records() - self.parked
    }

    /// (delivery id, attempt, copies) of every retry record written more than once.
    pub fn forks(&self) -> Vec<(String, i32, usize)> {
        let mut out: Vec<_> = self
            .attempts
            .iter()
            .flat_map(|(id, by)| {
                by.iter()
                    .filter(|(_, n)| **n > 1)
                    .map(|(a, n)| (id.clone(), *a, *n))
            })
            .collect();
        out.sort();
        out
    }

    /// Delivery ids with more than one dead letter, with their count.
    pub fn double_dead(&self) -> Vec<(String, usize)> {
        let mut out: Vec<_> = self
            .dead
            .iter()
            .filter(|(_, v)| v.len() > 1)
            .map(|(id, v)| (id.clone(), v.len()))
            .collect();
        out.sort();
        out
    }

    /// Delivery ids whose tier attempts are not exactly 1..=k, with them: a
    /// retry record of attempt k is written only by attempt k, which read
    /// the record of attempt k−1, so a gap is a lost link of the chain.
    pub fn gaps(&self) -> Vec<(String, Vec<i32>)> {
        let mut out: Vec<_> = self
            .attempts
            .iter()
            .filter(|(_, by)| !by.keys().copied().eq(1..=by.len() as i32))
            .map(|(id, by)| (id.clone(), by.keys().copied().collect()))
            .collect();
        out.sort();
        out
    }

    /// Highest tier attempt of a delivery (0: it never reached a tier).
    pub fn last_attempt(&self, id: &str) -> i32 {
        self.attempts
            .get(id)
            .and_then(|by| by.keys().next_back().copied())
            .unwrap_or(0)
    }
}
