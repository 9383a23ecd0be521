//! One pipeline stage as a child process of a release binary: started with its
//! log in a file, its ops address read from that log, measured from `/proc`
//! (CPU seconds, peak RSS) just before it is stopped with SIGTERM. A stage that
//! is dropped without `stop` is killed, so no process outlives the bench.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::OnceLock,
    time::Duration,
};

use anyhow::{bail, Context};
use serde::Serialize;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::{Child, Command},
    time::Instant,
};

/// How long a stage may take to bind its ops port and to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stage may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(45);

/// CPU and memory of one process, read from `/proc`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Usage {
    /// User + system CPU seconds since the process started.
    pub cpu_s: f64,
    /// Peak resident set size (VmHWM) in MiB.
    pub peak_rss_mib: f64,
}

/// A running stage.
#[derive(Debug)]
pub struct Stage {
    pub name: &'static str,
    child: Child,
    pid: u32,
    addr: SocketAddr,
    log: PathBuf,
}

/// The directory of the release binaries: the bench's own (it is built into
/// the same `target/release`), or `BENCH_BIN_DIR`.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("BENCH_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("locating the bench binary")?;
    Ok(exe
        .parent()
        .context("the bench binary has no directory")?
        .to_path_buf())
}

impl Stage {
    /// Starts `bin` with `args` (which must include `--http-addr 127.0.0.1:0`
    /// and `--log-format json`) and waits until its `/readyz` answers 200.
    pub async fn start(
        name: &'static str,
        bin: &str,
        args: &[String],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let path = bin_dir()?.join(bin);
        if !path.is_file() {
            bail!(
                "{} is missing: build the release binaries first \
                 (cargo build --release -p hookline-fanout -p hookline-dispatcher -p hookline-dlq-sink)",
                path.display()
            );
        }
        let file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(&path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", path.display()))?;
        let pid = child.id().context("the stage exited at once")?;
        let mut stage = Self {
            name,
            child,
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log: log.to_path_buf(),
        };
        stage.addr = stage.wait_for_addr().await?;
        stage.wait_ready().await?;
        Ok(stage)
    }

    async fn wait_for_addr(&mut self) -> anyhow::Result<SocketAddr> {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(addr) = ops_addr_in(&std::fs::read_to_string(&self.log).unwrap_or_default())
            {
                return Ok(addr);
            }
            self.fail_if_exited()?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!(
            "{} logged no ops address within {START_TIMEOUT:?}\n{}",
            self.name,
            self.log_tail()
        )
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok((200, _)) = http_get(self.addr, "/readyz").await {
                return Ok(());
            }
            self.fail_if_exited()?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "{} not ready within {START_TIMEOUT:?}\n{}",
            self.name,
            self.log_tail()
        )
    }

    fn fail_if_exited(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{} exited early ({status})\n{}", self.name, self.log_tail());
        }
        Ok(())
    }

    /// The last lines of the stage's log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        format!("--- last lines of {} ---\n{tail}", self.log.display())
    }

    /// The stage's Prometheus exposition.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        match http_get(self.addr, "/metrics").await? {
            (200, body) => Ok(body),
            (status, _) => bail!("{} /metrics answered {status}", self.name),
        }
    }

    /// Reads CPU and peak RSS, then SIGTERM and waits for a clean exit.
    pub async fn stop(mut self) -> anyhow::Result<Usage> {
        let usage = usage_of(&self.pid.to_string())?;
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .context("running kill -TERM")?;
        if !sent.success() {
            bail!("kill -TERM {} failed: {sent}", self.pid);
        }
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if !status.success() {
                    bail!(
                        "{} exited with {status} after SIGTERM\n{}",
                        self.name,
                        self.log_tail()
                    );
                }
            }
            Err(_) => {
                self.child.kill().await?;
                bail!(
                    "{} did not exit within {STOP_TIMEOUT:?} of SIGTERM; killed",
                    self.name
                );
            }
        }
        Ok(usage)
    }
}

/// The ops address from the "serving /metrics" JSON log line.
fn ops_addr_in(log: &str) -> Option<SocketAddr> {
    log.lines()
        .filter(|l| l.contains("serving /metrics"))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| {
            // Flattened by the services' JSON format; nested by tracing's default.
            let addr = v.get("addr").or_else(|| v.pointer("/fields/addr"))?;
            addr.as_str()?.parse().ok()
        })
}

fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU seconds (utime + stime) and VmHWM of `/proc/<pid>` (`self` for the bench).
pub fn usage_of(pid: &str) -> anyhow::Result<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the parenthesised command name start with field 3 (state);
    // utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let cpu_s = (ticks(11) + ticks(12)) / clock_ticks();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let hwm_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    Ok(Usage {
        cpu_s,
        peak_rss_mib: hwm_kib / 1024.0,
    })
}

/// A minimal HTTP/1.0 GET on 127.0.0.1 (1.0, so the body is never chunked): (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let io = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await?;
        anyhow::Ok(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .context("HTTP GET timed out")??;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no HTTP status line")?;
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_ops_address_in_a_json_log() {
        let log = r#"{"timestamp":"x","level":"INFO","fields":{"message":"serving /metrics, /healthz and /readyz","addr":"127.0.0.1:41234","stage":"fanout"}}"#;
        assert_eq!(
            ops_addr_in(log),
            Some("127.0.0.1:41234".parse().expect("an address"))
        );
        let flat = r#"{"level":"INFO","message":"serving /metrics, /healthz and /readyz","addr":"127.0.0.1:44489","stage":"dlq_sink"}"#;
        assert_eq!(
            ops_addr_in(flat),
            Some("127.0.0.1:44489".parse().expect("an address"))
        );
        assert_eq!(ops_addr_in("nothing here"), None);
    }

    #[test]
    fn reads_its_own_usage() {
        let u = usage_of("self").expect("/proc/self");
        assert!(u.peak_rss_mib > 0.0);
    }
}
