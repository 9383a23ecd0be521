//! What a scenario measured, printed as a table and written as JSON
//! (`target/bench/results-<timestamp>.json` and `target/bench/latest.json`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use serde_json::{json, Value};

use crate::{
    params::Params,
    pipeline::{Pipeline, StageUsage, Tally},
};

/// The result of one scenario.
#[derive(Debug, Serialize)]
pub struct Outcome {
    pub scenario: &'static str,
    /// Scenario-specific settings (rates, durations, ladder...).
    pub settings: Value,
    /// Figures for the table: (label, value as printed).
    #[serde(skip)]
    pub rows: Vec<(String, String)>,
    /// The same figures, machine-readable.
    pub figures: serde_json::Map<String, Value>,
    pub deliveries: Option<Tally>,
    pub stages: Vec<Usage>,
    pub error: Option<String>,
}

/// One stage's resources, and which of the scenario's pipelines it ran in
/// when the scenario has more than one.
#[derive(Debug, Serialize)]
pub struct Usage {
    #[serde(flatten)]
    pub usage: StageUsage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<&'static str>,
}

impl Usage {
    /// The stage's name, and its pipeline's in brackets when it has one.
    fn label(&self) -> String {
        match self.pipeline {
            Some(pipeline) => format!("{} ({pipeline})", self.usage.stage),
            None => self.usage.stage.to_owned(),
        }
    }
}

impl Outcome {
    pub fn new(scenario: &'static str) -> Self {
        Self {
            scenario,
            settings: json!({}),
            rows: Vec::new(),
            figures: serde_json::Map::new(),
            deliveries: None,
            stages: Vec::new(),
            error: None,
        }
    }

    /// Adds a figure: a table row and a JSON value under `key`.
    pub fn figure(
        &mut self,
        label: impl Into<String>,
        text: impl Into<String>,
        key: &str,
        value: impl Serialize,
    ) {
        self.rows.push((label.into(), text.into()));
        self.figures.insert(
            key.to_owned(),
            serde_json::to_value(value).unwrap_or(Value::Null),
        );
    }

    /// A rate with, when the `limit` scenario ran, the limit's beside it and
    /// hookline's share of it: `value` under `key`, the limit under
    /// `limit_<key>`, the ratio under `ratio_<key>`.
    pub fn versus(&mut self, label: &str, value: f64, limit: Option<f64>, key: &str) {
        let text = match limit {
            Some(l) => format!("{value:.0} (limit {l:.0}, ratio {:.2})", value / l),
            None => format!("{value:.0}"),
        };
        self.figure(label, text, key, value);
        if let Some(l) = limit {
            self.figures.insert(format!("limit_{key}"), l.into());
            self.figures
                .insert(format!("ratio_{key}"), (value / l).into());
        }
    }

    /// Stops the pipeline (always) and records the stages' usage and the
    /// first error of the scenario or of stopping.
    pub async fn finish(mut self, pipeline: Pipeline, result: anyhow::Result<()>) -> Self {
        self.stop(pipeline, None, result).await;
        self
    }

    /// [`finish`](Self::finish) for one of a scenario's pipelines: its
    /// stages' rows are marked with `label` when given, and the first error
    /// of any pipeline is the scenario's.
    pub async fn stop(
        &mut self,
        pipeline: Pipeline,
        label: Option<&'static str>,
        result: anyhow::Result<()>,
    ) {
        let stopped = pipeline.stop().await;
        if let Err(e) = result {
            self.error.get_or_insert(format!("{e:#}"));
        }
        match stopped {
            Ok(stages) => self.stages.extend(stages.into_iter().map(|usage| Usage {
                usage,
                pipeline: label,
            })),
            Err(e) => {
                self.error
                    .get_or_insert(format!("stopping the stages: {e:#}"));
            }
        }
    }

    pub fn failed(mut self, e: anyhow::Error) -> Self {
        self.error = Some(format!("{e:#}"));
        self
    }
}

/// The whole run.
#[derive(Debug, Serialize)]
pub struct Run {
    pub started_at: String,
    pub machine: Value,
    pub params: Params,
    pub scenarios: Vec<Outcome>,
}

pub fn machine() -> Value {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kib| (kib / 1024.0 / 1024.0).round() as u64)
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    json!({ "cores": cores, "mem_gib": mem_gib, "cpu": cpu, "loadavg_at_start": load.trim() })
}

/// Prints the figures and the per-stage resources of every scenario.
pub fn print(run: &Run) {
    println!();
    println!(
        "hookline bench — {} — {} cores, {} GiB, load average at start {} — BENCH_SECONDS={} fan-out={} (latency {}) payload={} B",
        run.started_at,
        run.machine["cores"],
        run.machine["mem_gib"],
        run.machine["loadavg_at_start"]
            .as_str()
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or("?"),
        run.params.seconds,
        run.params.fanout,
        run.params.latency_fanout,
        run.params.payload
    );
    let width = run
        .scenarios
        .iter()
        .flat_map(|s| s.rows.iter().map(|(l, _)| l.chars().count()))
        .max()
        .unwrap_or(10)
        .max(24);
    println!();
    println!("{:<16} {:<width$}  value", "scenario", "figure");
    println!("{}", "-".repeat(16 + width + 30));
    for s in &run.scenarios {
        let mut name = s.scenario;
        for (label, text) in &s.rows {
            println!("{name:<16} {label:<width$}  {text}");
            name = "";
        }
        if let Some(t) = &s.deliveries {
            println!(
                "{name:<16} {:<width$}  {}/{} delivered, {} duplicates, {} failed attempts, {} dead letters",
                "deliveries", t.delivered, t.expected, t.duplicates, t.failed_attempts, t.dead_letters
            );
            name = "";
        }
        if let Some(e) = &s.error {
            let first = e.lines().next().unwrap_or_default();
            println!("{name:<16} {:<width$}  {first}", "FAILED");
        }
    }
    let width = run
        .scenarios
        .iter()
        .flat_map(|s| s.stages.iter().map(|u| u.label().chars().count()))
        .max()
        .unwrap_or(0)
        .max(28);
    println!();
    println!(
        "{:<16} {:<width$} {:>8} {:>14}",
        "scenario", "process", "CPU s", "peak RSS MiB"
    );
    println!("{}", "-".repeat(16 + width + 8 + 14 + 3));
    for s in &run.scenarios {
        let mut name = s.scenario;
        for u in &s.stages {
            let rss = u
                .usage
                .peak_rss_mib
                .map_or_else(|| "-".to_owned(), |m| format!("{m:.0}"));
            println!(
                "{name:<16} {:<width$} {:>8.1} {rss:>14}",
                u.label(),
                u.usage.cpu_s
            );
            name = "";
        }
    }
}

/// Writes `results-<timestamp>.json` and `latest.json` under `dir`.
pub fn write(run: &Run, dir: &Path, stamp: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let text = serde_json::to_string_pretty(run)?;
    let path = dir.join(format!("results-{stamp}.json"));
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    std::fs::write(dir.join("latest.json"), &text)?;
    Ok(path)
}
