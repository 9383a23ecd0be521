//! The invariant every scenario proves, counted from the evidence: the
//! receiver's log of requests and the dead-letter topic (and the dlq-sink's
//! archive of it). Under faults every (event, matching subscription) is
//! delivered (a 2xx arrived) or dead-lettered with a reason; nothing is lost;
//! every duplicate carries the same `webhook-id`, and that id is the one
//! derived from the event in the body and the subscription.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::Duration,
};

use anyhow::{bail, Context};
use hookline_envelope::DeadLetter;
use hookline_testkit::{
    kafka,
    pipeline::{seq_of, Pipeline},
};
use tokio::time::Instant;

/// What the evidence says, for one scenario.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// Expected (event, subscription) deliveries.
    pub expected: usize,
    /// Expected ids with at least one 2xx at the receiver.
    pub delivered: usize,
    /// Expected ids on the DLQ and never delivered.
    pub dead_lettered: usize,
    /// Dead letters (distinct ids) by reason.
    pub dead_by_reason: BTreeMap<String, usize>,
    /// Expected ids that were neither delivered nor dead-lettered.
    pub lost: Vec<String>,
    /// 2xx or dead-lettered ids nobody expected.
    pub unexpected: usize,
    /// Requests whose `webhook-id` is not the id of the event in their body.
    pub mismatched: usize,
    /// 2xx responses beyond the first for an id (same `webhook-id`: a
    /// duplicate with any other id would be counted as `unexpected`).
    pub duplicates: usize,
    /// Ids delivered and also dead-lettered.
    pub delivered_and_dead: usize,
    /// Every request the receiver got, and those it answered with non-2xx.
    pub attempts: usize,
    pub failed_attempts: usize,
    /// DLQ records (with duplicates) and distinct ids among them.
    pub dlq_records: usize,
    /// Reason of each dead-lettered id.
    pub reasons: HashMap<String, String>,
    /// Ids with at least one 2xx.
    pub delivered_ids: HashSet<String>,
}

impl Ledger {
    /// Counts what the receiver and the DLQ topic hold now.
    pub async fn collect(p: &Pipeline) -> anyhow::Result<Self> {
        Self::collect_skipping(p, &HashSet::new()).await
    }

    /// Like [`collect`](Self::collect), but skips the DLQ records at `skip`
    /// (partition, offset): records a scenario wrote there itself on purpose
    /// (bad input), which are not dead letters. Any other record on the DLQ
    /// that is not a `DeadLetter` is still an error.
    pub async fn collect_skipping(
        p: &Pipeline,
        skip: &HashSet<(i32, i64)>,
    ) -> anyhow::Result<Self> {
        let mut dlq = kafka::read_to_end(p.topics.dlq()).await?;
        {
            use rdkafka::Message;
            dlq.retain(|m| !skip.contains(&(m.partition(), m.offset())));
        }
        let mut reasons = HashMap::new();
        for m in &dlq {
            let letter: DeadLetter = hookline_testkit::records::decoded(m)?;
            reasons.insert(letter.delivery.delivery_id, letter.reason);
        }
        Ok(Self::count(p, &reasons, dlq.len()))
    }

    fn count(p: &Pipeline, reasons: &HashMap<String, String>, dlq_records: usize) -> Self {
        let expected = p.expected_ids();
        let requests = p.receiver.requests();
        let mut ok: HashMap<&str, usize> = HashMap::new();
        let mut mismatched = 0;
        let mut unexpected: HashSet<&str> = HashSet::new();
        for r in &requests {
            let id = r.header("webhook-id");
            let event_in_body = seq_of(&r.body).map(|seq| p.event_id(seq));
            match expected.get(id) {
                Some(event) if event_in_body.as_deref() == Some(event.as_str()) => {}
                Some(_) => mismatched += 1,
                None => {
                    unexpected.insert(id);
                }
            }
            if (200..300).contains(&r.status) {
                *ok.entry(id).or_default() += 1;
            }
        }
        for id in reasons.keys() {
            if !expected.contains_key(id) {
                unexpected.insert(id);
            }
        }
        let mut ledger = Self {
            expected: expected.len(),
            attempts: requests.len(),
            failed_attempts: requests
                .iter()
                .filter(|r| !(200..300).contains(&r.status))
                .count(),
            mismatched,
            unexpected: unexpected.len(),
            duplicates: ok.values().map(|n| n - 1).sum(),
            dlq_records,
            reasons: reasons.clone(),
            delivered_ids: ok.keys().map(|id| (*id).to_owned()).collect(),
            ..Self::default()
        };
        for id in expected.keys() {
            let delivered = ok.contains_key(id.as_str());
            let dead = reasons.get(id);
            match (delivered, dead) {
                (true, Some(_)) => {
                    ledger.delivered += 1;
                    ledger.delivered_and_dead += 1;
                }
                (true, None) => ledger.delivered += 1,
                (false, Some(reason)) => {
                    ledger.dead_lettered += 1;
                    *ledger.dead_by_reason.entry(reason.clone()).or_default() += 1;
                }
                (false, None) => ledger.lost.push(id.clone()),
            }
        }
        ledger.lost.sort();
        ledger
    }

    /// Expected ids accounted for (delivered or dead-lettered).
    pub fn accounted(&self) -> usize {
        self.delivered + self.dead_lettered
    }

    /// Fails unless nothing is lost, nothing unexpected arrived and every
    /// request carried the id of its own event.
    pub fn check(&self) -> anyhow::Result<()> {
        if !self.lost.is_empty() || self.unexpected > 0 || self.mismatched > 0 {
            bail!(
                "INVARIANT BROKEN: {} lost (e.g. {:?}), {} unexpected ids, {} requests whose webhook-id is not their event's",
                self.lost.len(),
                &self.lost[..self.lost.len().min(5)],
                self.unexpected,
                self.mismatched
            );
        }
        Ok(())
    }

    /// One line of counts for the report.
    pub fn summary(&self) -> String {
        let reasons: Vec<String> = self
            .dead_by_reason
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        format!(
            "expected {} = delivered {} + dead-lettered {} ({}) + lost {}; duplicates {} (same webhook-id), \
             unexpected ids {}, id/body mismatches {}, attempts {} ({} failed), DLQ records {}",
            self.expected,
            self.delivered,
            self.dead_lettered,
            if reasons.is_empty() {
                "none".to_owned()
            } else {
                reasons.join(", ")
            },
            self.lost.len(),
            self.duplicates,
            self.unexpected,
            self.mismatched,
            self.attempts,
            self.failed_attempts,
            self.dlq_records
        )
    }
}

/// Waits until every expected delivery is accounted for, or until nothing has
/// changed (no request arrived, no dead letter appeared) for `stall`; returns
/// the ledger either way (the caller checks it).
pub async fn settle(p: &Pipeline, stall: Duration) -> anyhow::Result<Ledger> {
    settle_skipping(p, stall, &HashSet::new()).await
}

/// [`settle`], skipping the DLQ records at `skip` (see [`Ledger::collect_skipping`]).
pub async fn settle_skipping(
    p: &Pipeline,
    stall: Duration,
    skip: &HashSet<(i32, i64)>,
) -> anyhow::Result<Ledger> {
    let mut last = (usize::MAX, usize::MAX);
    let mut changed = Instant::now();
    loop {
        let ledger = Ledger::collect_skipping(p, skip).await?;
        if ledger.accounted() >= ledger.expected {
            // Let in-flight retries and duplicates land before counting them.
            tokio::time::sleep(Duration::from_secs(2)).await;
            return Ledger::collect_skipping(p, skip).await;
        }
        let now = (ledger.attempts, ledger.dlq_records);
        if now != last {
            (last, changed) = (now, Instant::now());
        } else if changed.elapsed() >= stall {
            return Ok(ledger);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Rows of the dlq-sink's archive, read by the real binary
/// (`hookline-dlq-sink inspect --from-archive --output json`).
pub async fn archived(p: &Pipeline, quarantine: bool) -> anyhow::Result<Vec<serde_json::Value>> {
    let bin = hookline_testkit::stage::bin_dir()?.join("hookline-dlq-sink");
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.args(["inspect", "--from-archive", "--archive-url"])
        .arg(p.archive_dir())
        .args(["--output", "json", "--topic-prefix", p.topics.prefix()]);
    if quarantine {
        cmd.arg("--quarantine");
    }
    let out = cmd
        .output()
        .await
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "hookline-dlq-sink inspect failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("inspect printed {l:?}")))
        .collect()
}

/// Waits until the archive holds every dead-lettered id of `ledger` (the sink
/// may have been restarted and re-reads what it had not committed); returns
/// the number of archived rows and of distinct delivery ids in them.
pub async fn wait_archived(
    p: &Pipeline,
    ledger: &Ledger,
    limit: Duration,
) -> anyhow::Result<(usize, usize)> {
    let deadline = Instant::now() + limit;
    loop {
        let rows = if p.archive_dir().exists() {
            archived(p, false).await?
        } else {
            Vec::new()
        };
        let ids: HashSet<&str> = rows
            .iter()
            .filter_map(|r| r.get("delivery_id")?.as_str())
            .collect();
        let missing = ledger
            .reasons
            .keys()
            .filter(|id| !ids.contains(id.as_str()))
            .count();
        if missing == 0 {
            return Ok((rows.len(), ids.len()));
        }
        if Instant::now() >= deadline {
            bail!(
                "{missing} of {} dead letters are not in the archive after {limit:?}",
                ledger.reasons.len()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
