//! One pipeline stage as a child process of a real binary (`hookline-fanout`,
//! `hookline-dispatcher`, `hookline-dlq-sink`): started with its log in a file,
//! its ops address read from that log, measured from `/proc` (CPU seconds, peak
//! RSS). The bench stops stages with SIGTERM; the fault suite also kills them
//! with SIGKILL, freezes them with SIGSTOP, times their SIGTERM drain and
//! restarts them with the same arguments. A stage that is dropped without `stop` is killed, so no process
//! outlives the harness.

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
    bin: PathBuf,
    args: Vec<String>,
    child: Child,
    pid: u32,
    addr: SocketAddr,
    log: PathBuf,
    /// Times this stage was started (1 + restarts).
    starts: u32,
}

/// How a stage ended after SIGTERM.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    /// Whether it exited with status 0.
    pub clean: bool,
    /// The exit code, or None if a signal ended it.
    pub code: Option<i32>,
    /// From SIGTERM to exit.
    pub took: Duration,
}

/// The directory of the service binaries: the harness's own (cargo builds
/// every binary of a profile into one directory), or `HOOKLINE_BIN_DIR`.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("HOOKLINE_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("locating the harness binary")?;
    Ok(exe
        .parent()
        .context("the harness binary has no directory")?
        .to_path_buf())
}

fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .with_context(|| format!("running kill -{sig}"))?;
    if !sent.success() {
        bail!("kill -{sig} {pid} failed: {sent}");
    }
    Ok(())
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
                "{} is missing: build the service binaries first, in the harness's profile \
                 (cargo build [--release] -p hookline-fanout -p hookline-dispatcher -p hookline-dlq-sink)",
                path.display()
            );
        }
        Self::start_exe(name, path, args, log).await
    }

    /// Like [`start`](Self::start), with the binary's path (an integration
    /// test's `env!("CARGO_BIN_EXE_…")`).
    pub async fn start_exe(
        name: &'static str,
        path: PathBuf,
        args: &[String],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let mut stage = Self::launch_exe(name, path, args, log).await?;
        stage.wait_ready().await?;
        Ok(stage)
    }

    /// Like [`start_exe`](Self::start_exe), but waits only for the ops
    /// address, not for `/readyz`: for a test of what an unready stage says.
    pub async fn launch_exe(
        name: &'static str,
        path: PathBuf,
        args: &[String],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let child = spawn(&path, args, log, false)?;
        let pid = child.id().context("the stage exited at once")?;
        let mut stage = Self {
            name,
            bin: path,
            args: args.to_vec(),
            child,
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log: log.to_path_buf(),
            starts: 1,
        };
        stage.addr = stage.wait_for_addr(0).await?;
        Ok(stage)
    }

    /// Waits for the ops address (the `nth` one logged, counting from 0: a
    /// restarted stage appends to the same log) and then for `/readyz`.
    async fn wait_started(&mut self, nth: usize) -> anyhow::Result<()> {
        self.addr = self.wait_for_addr(nth).await?;
        self.wait_ready().await
    }

    /// Process id of the current incarnation.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The ops address (`/metrics`, `/healthz`, `/readyz`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Times this stage was started (1 + restarts).
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// Whether the process is still running (it may have crashed on its own).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL: no drain, no commit, no flush. Waits until the process is gone.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            signal(self.pid, "KILL")?;
        }
        self.child.wait().await?;
        Ok(())
    }

    /// SIGSTOP: the process freezes as it is (a zombie in the making: its
    /// sessions and transactions time out while it holds its state).
    pub fn pause(&self) -> anyhow::Result<()> {
        signal(self.pid, "STOP")
    }

    /// SIGCONT after [`pause`](Self::pause): it carries on from where it froze.
    pub fn resume(&self) -> anyhow::Result<()> {
        signal(self.pid, "CONT")
    }

    /// The whole log of the stage (every incarnation).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits up to `limit` for the exit (SIGKILL after that,
    /// reported as not clean).
    pub async fn terminate(&mut self, limit: Duration) -> anyhow::Result<Exit> {
        let sent = Instant::now();
        signal(self.pid, "TERM")?;
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                Ok(Exit {
                    clean: status.success(),
                    code: status.code(),
                    took: sent.elapsed(),
                })
            }
            Err(_) => {
                self.child.kill().await?;
                Ok(Exit {
                    clean: false,
                    code: None,
                    took: sent.elapsed(),
                })
            }
        }
    }

    /// Starts the stage again with the same binary and arguments (after
    /// [`kill`](Self::kill) or [`terminate`](Self::terminate)), appending to the
    /// same log, and waits until it is ready.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            bail!("{} is still running (pid {})", self.name, self.pid);
        }
        let nth = self.starts as usize;
        self.child = spawn(&self.bin, &self.args, &self.log, true)?;
        self.pid = self.child.id().context("the stage exited at once")?;
        self.starts += 1;
        self.wait_started(nth).await
    }

    async fn wait_for_addr(&mut self, nth: usize) -> anyhow::Result<SocketAddr> {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(addr) =
                ops_addrs_in(&std::fs::read_to_string(&self.log).unwrap_or_default()).nth(nth)
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
        self.log_tail_lines(15)
    }

    /// The last `n` lines of the stage's log.
    pub fn log_tail_lines(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(n)..].join("\n");
        format!("--- last lines of {} ---\n{tail}", self.log.display())
    }

    /// The stage's Prometheus exposition.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        match http_get(self.addr, "/metrics").await? {
            (200, body) => Ok(body),
            (status, _) => bail!("{} /metrics answered {status}", self.name),
        }
    }

    /// CPU seconds and peak RSS of the current incarnation.
    pub fn usage(&self) -> anyhow::Result<Usage> {
        usage_of(&self.pid.to_string())
    }

    /// Reads CPU and peak RSS, then SIGTERM and waits for a clean exit.
    pub async fn stop(mut self) -> anyhow::Result<Usage> {
        let usage = usage_of(&self.pid.to_string())?;
        signal(self.pid, "TERM")?;
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

fn spawn(bin: &Path, args: &[String], log: &Path, append: bool) -> anyhow::Result<Child> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

/// The ops addresses from the "serving /metrics" JSON log lines, in order.
fn ops_addrs_in(log: &str) -> impl Iterator<Item = SocketAddr> + '_ {
    log.lines()
        .filter(|l| l.contains("serving /metrics"))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
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

/// CPU seconds (utime + stime) and VmHWM of `/proc/<pid>` (`self` for the harness).
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
            ops_addrs_in(log).next(),
            Some("127.0.0.1:41234".parse().expect("an address"))
        );
        let flat = r#"{"level":"INFO","message":"serving /metrics, /healthz and /readyz","addr":"127.0.0.1:44489","stage":"dlq_sink"}"#;
        assert_eq!(
            ops_addrs_in(flat).next(),
            Some("127.0.0.1:44489".parse().expect("an address"))
        );
        assert_eq!(ops_addrs_in("nothing here").next(), None);
        let restarted = format!("{log}\n{flat}\n");
        assert_eq!(
            ops_addrs_in(&restarted).nth(1),
            Some("127.0.0.1:44489".parse().expect("an address"))
        );
    }

    #[test]
    fn reads_its_own_usage() {
        let u = usage_of("self").expect("/proc/self");
        assert!(u.peak_rss_mib > 0.0);
    }
}
