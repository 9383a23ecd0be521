//! The chart's alert rules tested on what a service really exports: scrapes of
//! a stage's `/metrics` taken every second during a scenario become a promtool
//! `input_series` (times relative to the first scrape, a missing sample `_`,
//! with the `namespace` and `pod` labels the chart's PodMonitor adds), and
//! `promtool test rules` checks, against the rules the chart renders, which
//! alerts are firing at given times (the `ALERTS` series, so a case needs no
//! copy of an annotation's wording or value).
//!
//! The tools are never optional: without `helm` (`HELM`, else
//! `.cache/tools/helm`, which `make chart-tools` installs) or `promtool`
//! (`PROMTOOL`, else on the `PATH`) the test fails, saying how to get them.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, ensure, Context};

use crate::kafka::repo_root;

/// The namespace the rules are rendered for and the series are labelled with.
pub const NAMESPACE: &str = "hookline";

/// Samples of every series of one stage, one column per scrape.
#[derive(Debug, Default)]
pub struct Scrapes {
    /// Series (with the added labels) → value at each scrape (`None`: absent).
    series: BTreeMap<String, Vec<Option<f64>>>,
    scrapes: usize,
    pod: String,
}

impl Scrapes {
    /// Scrapes of pod `pod` (its `pod` label).
    pub fn new(pod: &str) -> Self {
        Self {
            pod: pod.to_owned(),
            ..Self::default()
        }
    }

    /// Adds the scrape taken in second `column` (from the first): a Prometheus
    /// text exposition. Seconds skipped are gaps; a second already taken is
    /// kept as it was.
    pub fn push(&mut self, column: usize, exposition: &str) {
        if column < self.scrapes {
            return;
        }
        self.scrapes = column + 1;
        for (series, value) in parse(exposition, &self.pod) {
            let values = self.series.entry(series).or_default();
            values.resize(column, None);
            values.push(Some(value));
        }
        for values in self.series.values_mut() {
            values.resize(self.scrapes, None);
        }
    }

    /// How many scrapes were added.
    pub fn len(&self) -> usize {
        self.scrapes
    }

    pub fn is_empty(&self) -> bool {
        self.scrapes == 0
    }

    /// The samples of the series whose text (name and labels, as exported,
    /// with the added labels) contains every one of `parts`.
    pub fn values(&self, parts: &[&str]) -> Vec<Option<f64>> {
        self.series
            .iter()
            .find(|(s, _)| parts.iter().all(|p| s.contains(p)))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// The promtool `input_series` of every series, indented for a test case.
    pub fn input_series(&self) -> String {
        let mut out = String::from("    input_series:\n");
        for (series, values) in &self.series {
            let values: Vec<String> = values
                .iter()
                .map(|v| v.map_or_else(|| "_".to_owned(), number))
                .collect();
            let _ = writeln!(
                out,
                "      - series: '{}'\n        values: '{}'",
                series.replace('\'', "''"),
                values.join(" ")
            );
        }
        out
    }
}

/// A float as promtool reads it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v == f64::INFINITY {
        "+Inf".to_owned()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        format!("{v}")
    }
}

/// `(series, value)` of each sample line, with `namespace` and `pod` added.
fn parse(exposition: &str, pod: &str) -> Vec<(String, f64)> {
    let extra = format!("namespace=\"{NAMESPACE}\",pod=\"{pod}\"");
    exposition
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().ok()?,
            };
            let series = match series.split_once('{') {
                Some((name, labels)) => {
                    let labels = labels.trim_end_matches('}');
                    if labels.is_empty() {
                        format!("{name}{{{extra}}}")
                    } else {
                        format!("{name}{{{extra},{labels}}}")
                    }
                }
                None => format!("{series}{{{extra}}}"),
            };
            Some((series, value))
        })
        .collect()
}

/// Which alerts must be firing (or not) at a time of a case.
#[derive(Debug, Clone)]
pub struct Expect {
    /// Seconds from the first scrape.
    pub at_s: usize,
    pub alert: &'static str,
    /// The alert's labels besides `alertname` and `alertstate`, as
    /// `name="value"` pairs joined by commas, when it must be firing; `None`
    /// when it must not be.
    pub firing: Option<&'static str>,
}

/// One promtool test case: the scrapes of a scenario and what must fire.
pub fn case(name: &str, scrapes: &Scrapes, expect: &[Expect]) -> String {
    let mut out = format!(
        "  - name: '{}'\n    interval: 1s\n",
        name.replace('\'', "''")
    );
    out.push_str(&scrapes.input_series());
    out.push_str("    promql_expr_test:\n");
    for e in expect {
        let _ = write!(
            out,
            "      - expr: 'ALERTS{{alertname=\"{}\",alertstate=\"firing\"}}'\n        eval_time: {}s\n",
            e.alert, e.at_s
        );
        match e.firing {
            Some(labels) => {
                let _ = write!(
                    out,
                    "        exp_samples:\n          - labels: 'ALERTS{{alertname=\"{}\",alertstate=\"firing\",{labels}}}'\n            value: 1\n",
                    e.alert
                );
            }
            None => out.push_str("        exp_samples: []\n"),
        }
    }
    out
}

/// The chart's alert rules, rendered with `sets` (`helm --set` pairs) into
/// a Prometheus rules file.
pub fn render_rules(sets: &[(&str, &str)]) -> anyhow::Result<String> {
    let root = repo_root();
    let helm = tool("HELM", Some(root.join(".cache/tools/helm")), "helm")?;
    let mut cmd = Command::new(&helm);
    cmd.args(["template", "hookline"])
        .arg(root.join("deploy/helm/hookline"))
        .args([
            "-n",
            NAMESPACE,
            // One the chart supports; the rules do not depend on it.
            "--kube-version",
            "1.30.0",
            "--show-only",
            "templates/prometheusrule.yaml",
        ])
        .args(["--set", "metrics.prometheusRule.enabled=true"]);
    for (k, v) in sets {
        cmd.arg("--set")
            .arg(format!("metrics.prometheusRule.{k}={v}"));
    }
    let out = cmd
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    ensure!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    // The PrometheusRule's `spec` is a rules file, indented by two.
    let spec = text
        .split_once("\nspec:\n")
        .map(|(_, s)| s)
        .context("no spec in the rendered PrometheusRule")?;
    let mut rules = String::new();
    for line in spec.lines() {
        ensure!(
            line.is_empty() || line.starts_with("  "),
            "unexpected line after the spec: {line}"
        );
        rules.push_str(line.get(2..).unwrap_or_default());
        rules.push('\n');
    }
    Ok(rules)
}

/// Runs `promtool test rules` on `cases` (from [`case`]) against `rules` in
/// `dir`; fails with promtool's report.
pub fn promtool_test(dir: &Path, rules: &str, cases: &[String]) -> anyhow::Result<()> {
    let promtool = tool("PROMTOOL", None, "promtool")?;
    std::fs::write(dir.join("rules.yaml"), rules)?;
    let mut test = String::from("rule_files:\n  - rules.yaml\nevaluation_interval: 1s\ntests:\n");
    for c in cases {
        test.push_str(c);
    }
    std::fs::write(dir.join("scraped.test.yaml"), &test)?;
    let out = Command::new(&promtool)
        .args(["test", "rules", "scraped.test.yaml"])
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {}", promtool.display()))?;
    if !out.status.success() {
        bail!(
            "promtool test rules failed (files kept in {}):\n{}{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A tool from `$var`, else `fallback`, else `name` on the `PATH`.
fn tool(var: &str, fallback: Option<PathBuf>, name: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = fallback.filter(|p| p.is_file()) {
        return Ok(p);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    found.with_context(|| {
        format!(
            "{name} not found (set {var}, or run `make chart-tools`, which installs helm \
             into .cache/tools and promtool from Debian's prometheus package): the alert \
             rules are tested on scraped series and this test never skips"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrapes_become_input_series_with_gaps_and_the_pod_labels() {
        let mut s = Scrapes::new("d-0");
        s.push(
            0,
            "# HELP x\nhookline_a{topic=\"deliveries\"} 1\nhookline_b 2.5\n",
        );
        s.push(1, "hookline_a{topic=\"deliveries\"} 3\n");
        s.push(1, "hookline_a{topic=\"deliveries\"} 99\n");
        s.push(
            3,
            "hookline_a{topic=\"deliveries\"} 4\nhookline_b 5\nhookline_c{le=\"+Inf\"} +Inf\n",
        );
        assert_eq!(s.len(), 4);
        assert_eq!(
            s.values(&["hookline_b"]),
            vec![Some(2.5), None, None, Some(5.0)]
        );
        let yaml = s.input_series();
        assert!(yaml.contains(
            "- series: 'hookline_a{namespace=\"hookline\",pod=\"d-0\",topic=\"deliveries\"}'\n        values: '1 3 _ 4'"
        ), "{yaml}");
        assert!(yaml.contains(
            "- series: 'hookline_b{namespace=\"hookline\",pod=\"d-0\"}'\n        values: '2.5 _ _ 5'"
        ), "{yaml}");
        assert!(yaml.contains("values: '_ _ _ +Inf'"), "{yaml}");
    }

    #[test]
    fn a_case_expects_firing_and_silent_alerts() {
        let s = Scrapes::new("d-0");
        let c = case(
            "it's a case",
            &s,
            &[
                Expect {
                    at_s: 3,
                    alert: "A",
                    firing: None,
                },
                Expect {
                    at_s: 9,
                    alert: "A",
                    firing: Some("severity=\"page\""),
                },
            ],
        );
        assert!(c.starts_with("  - name: 'it''s a case'\n"), "{c}");
        assert!(c.contains("eval_time: 3s\n        exp_samples: []"), "{c}");
        assert!(
            c.contains("labels: 'ALERTS{alertname=\"A\",alertstate=\"firing\",severity=\"page\"}'"),
            "{c}"
        );
    }
}
