//! The broker's stop-the-world GC pauses, read from the JVM's GC log
//! (`kafka.sh gc-log`; `with-kafka.sh`, so `make bench`, exports it as
//! `HOOKLINE_KAFKA_GC_LOG`). While the broker is paused nothing is fetched,
//! produced or committed, so a wait that spans a pause waited for the broker
//! whatever hookline did: each scenario prints the pauses of its window, and
//! the latency figures say how many of their waits spanned one.
//!
//! Lines as `-Xlog:gc:file=...:utctime` writes them, stamped when the pause
//! ended:
//! `[2026-12-06T19:35:29.748+0000] GC(82) Pause Young (Normal) (G1 Evacuation Pause) 112M->101M(256M) 3.291ms`

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;

use crate::stats::ms;

/// The variable that names the GC log.
pub const ENV: &str = "HOOKLINE_KAFKA_GC_LOG";

/// One pause, µs since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    pub start_us: i64,
    pub end_us: i64,
}

impl Pause {
    fn ms(&self) -> f64 {
        (self.end_us - self.start_us) as f64 / 1000.0
    }
}

/// A pause from one line of the log; `None` for any other line.
pub fn parse_line(line: &str) -> Option<Pause> {
    let (stamp, rest) = line.strip_prefix('[')?.split_once(']')?;
    if !rest.contains(" Pause ") {
        return None;
    }
    let took_ms: f64 = rest
        .trim_end()
        .strip_suffix("ms")?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()?;
    let end_us = chrono::DateTime::parse_from_str(stamp, "%Y-%m-%dT%H:%M:%S%.3f%z")
        .ok()?
        .timestamp_micros();
    Some(Pause {
        start_us: end_us - (took_ms * 1000.0).round() as i64,
        end_us,
    })
}

/// The broker's GC log, when known.
#[derive(Debug, Clone)]
pub struct Log {
    path: PathBuf,
}

impl Log {
    pub fn from_env() -> Option<Self> {
        std::env::var_os(ENV)
            .filter(|p| !p.is_empty())
            .map(|p| Self { path: p.into() })
    }

    /// The pauses that overlap `[from_us, to_us]`, in order; the rotated
    /// files (`gc.log.0`, ...) are read too.
    pub fn pauses(&self, from_us: i64, to_us: i64) -> anyhow::Result<Vec<Pause>> {
        let mut pauses = Vec::new();
        for file in self.files()? {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading the broker's GC log {}", file.display()))?;
            pauses.extend(
                text.lines()
                    .filter_map(parse_line)
                    .filter(|p| p.end_us >= from_us && p.start_us <= to_us),
            );
        }
        pauses.sort_by_key(|p| p.start_us);
        pauses.dedup();
        Ok(pauses)
    }

    fn files(&self) -> anyhow::Result<Vec<PathBuf>> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let name = self
            .path
            .file_name()
            .with_context(|| format!("{ENV}={} names no file", self.path.display()))?
            .to_string_lossy()
            .into_owned();
        let rotated = format!("{name}.");
        let mut files = vec![self.path.clone()];
        for entry in std::fs::read_dir(dir)
            .with_context(|| format!("listing {} for the broker's GC log", dir.display()))?
        {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(&rotated) {
                files.push(entry.path());
            }
        }
        Ok(files)
    }
}

/// The pauses of a scenario's window, as its table and JSON show them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Pauses {
    pub n: usize,
    pub total_ms: f64,
    pub max_ms: f64,
    pub window_s: f64,
}

impl Pauses {
    pub fn of(pauses: &[Pause], window_s: f64) -> Self {
        Self {
            n: pauses.len(),
            total_ms: pauses.iter().map(Pause::ms).sum(),
            max_ms: pauses.iter().map(Pause::ms).fold(0.0, f64::max),
            window_s,
        }
    }

    pub fn text(&self) -> String {
        format!(
            "{} in {:.0} s, {} in all ({:.1}% of the time), longest {}",
            self.n,
            self.window_s,
            ms(self.total_ms),
            self.total_ms / (self.window_s * 10.0),
            ms(self.max_ms)
        )
    }
}

/// The pauses of a window, to ask which waits spanned one.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// In order of their start.
    pauses: Vec<Pause>,
    /// The longest pause, which bounds how far back a pause overlapping a
    /// wait can start.
    longest_us: i64,
}

impl Timeline {
    pub fn new(mut pauses: Vec<Pause>) -> Self {
        pauses.sort_by_key(|p| p.start_us);
        let longest_us = pauses
            .iter()
            .map(|p| p.end_us - p.start_us)
            .max()
            .unwrap_or(0);
        Self { pauses, longest_us }
    }

    pub fn pauses(&self) -> &[Pause] {
        &self.pauses
    }

    /// Whether the wait from `start_us` to `end_us` overlapped some part of a
    /// pause.
    pub fn spans(&self, start_us: i64, end_us: i64) -> bool {
        let from = self
            .pauses
            .partition_point(|p| p.start_us < start_us - self.longest_us);
        self.pauses[from..]
            .iter()
            .take_while(|p| p.start_us <= end_us)
            .any(|p| p.end_us >= start_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
[2026-12-06T19:35:29.748+0000] Using G1
[2026-12-06T19:35:29.748+0000] GC(82) Pause Young (Normal) (G1 Evacuation Pause) 112M->101M(256M) 3.291ms
[2026-12-06T19:35:30.100+0000] GC(83) Concurrent Mark Cycle 41.002ms
[2026-12-06T19:35:30.430+0000] GC(84) Pause Remark 148M->101M(256M) 140.008ms
[2026-12-06T19:35:31.000+0000] GC(85) Pause Young (Normal) (G1 Evacuation Pause) 148M->101M(256M)
";

    fn at(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_micros()
    }

    #[test]
    fn reads_only_pauses_ending_at_their_stamp() {
        let pauses: Vec<_> = LOG.lines().filter_map(parse_line).collect();
        let end = at("2026-12-06T19:35:29.748Z");
        let remark = at("2026-12-06T19:35:30.430Z");
        assert_eq!(
            pauses,
            [
                Pause {
                    start_us: end - 3_291,
                    end_us: end
                },
                Pause {
                    start_us: remark - 140_008,
                    end_us: remark
                },
            ]
        );
        let s = Pauses::of(&pauses, 10.0);
        assert_eq!((s.n, s.max_ms), (2, 140.008));
        assert!((s.total_ms - 143.299).abs() < 1e-9, "{}", s.total_ms);
        assert_eq!(
            s.text(),
            "2 in 10 s, 143 ms in all (1.4% of the time), longest 140 ms"
        );
    }

    #[test]
    fn tells_the_waits_that_span_a_pause() {
        // Out of order: the timeline sorts them.
        let pauses = [
            Pause {
                start_us: 30_000,
                end_us: 30_100,
            },
            Pause {
                start_us: 1_000,
                end_us: 1_500,
            },
            Pause {
                start_us: 10_000,
                end_us: 20_000,
            },
        ];
        let waits = [
            (0, 999),           // ends before the first
            (0, 1_000),         // touches it
            (1_200, 1_300),     // inside it
            (1_501, 9_999),     // between
            (19_999, 25_000),   // starts inside the long one
            (25_000, 29_000),   // between
            (20_001, 40_000),   // spans the short one after the long one
            (100_000, 200_000), // after all
        ];
        let timeline = Timeline::new(pauses.to_vec());
        let spanned: Vec<_> = waits
            .iter()
            .map(|&(start, end)| timeline.spans(start, end))
            .collect();
        assert_eq!(
            spanned,
            [false, true, true, false, true, false, true, false]
        );
        let none = Timeline::new(Vec::new());
        assert!(waits.iter().all(|&(start, end)| !none.spans(start, end)));
    }

    #[test]
    fn reads_the_window_from_every_file_of_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gc.log");
        std::fs::write(&path, LOG.lines().nth(3).unwrap()).unwrap();
        std::fs::write(dir.path().join("gc.log.0"), LOG).unwrap();
        std::fs::write(dir.path().join("other.log"), LOG).unwrap();
        let log = Log { path };
        let all = log.pauses(0, i64::MAX).unwrap();
        assert_eq!(
            all.len(),
            2,
            "the remark is in two files, read once: {all:?}"
        );
        let after = log
            .pauses(at("2026-12-06T19:35:30.000Z"), i64::MAX)
            .unwrap();
        assert_eq!(after.len(), 1);
        let missing = Log {
            path: dir.path().join("nope").join("gc.log"),
        };
        assert!(missing.pauses(0, 1).is_err());
    }
}
