//! Retry chains as a `read_committed` reader sees them: every record on the
//! retry tiers and the DLQ, per delivery. Exactly-once hand-offs mean one tier
//! record per (delivery, attempt) — a second copy is a forked chain — attempts
//! 1..=k with no gap, and at most one dead letter per delivery.

use std::collections::{BTreeMap, HashMap};

use hookline_envelope::{DeadLetter, Delivery};
use hookline_testkit::{kafka, pipeline::Pipeline, records};
use rdkafka::Message;

/// The tiers and the DLQ of one pipeline, read to their (stable) end.
#[derive(Debug, Default)]
pub struct Chains {
    /// delivery id → attempt (attempts already made) → copies on the tiers.
    pub attempts: HashMap<String, BTreeMap<i32, usize>>,
    /// Records per tier name.
    pub per_tier: BTreeMap<String, usize>,
    /// delivery id → "tier/partition@offset" of each of its tier records, for
    /// the evidence of a fork.
    pub coordinates: HashMap<String, Vec<String>>,
    /// delivery id → (reason, attempt) of each of its dead letters.
    pub dead: HashMap<String, Vec<(String, i32)>>,
}

impl Chains {
    pub async fn read(p: &Pipeline) -> anyhow::Result<Self> {
        let mut chains = Self::default();
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

    /// (delivery id, attempt, copies) of every tier record written more than once.
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
