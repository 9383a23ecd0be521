//! Hostile webhook endpoints for tests: one raw-TCP server on 127.0.0.1:0 per
//! [`Behaviour`] — silent, dripping, resetting, an endless body, a redirect to a
//! private address, a malformed status line, a TLS certificate the client must
//! refuse. Unlike [`receiver`](crate::receiver) it speaks HTTP/1.1 by hand, so it
//! can break the protocol in ways a real server library never would.
//!
//! Every accepted connection is recorded — when it was accepted, the request
//! bytes read, the response bytes written, whether and when the client closed —
//! so a test can assert that the client bounded its time and memory, not just
//! what it returned. The server never closes a connection unless the behaviour
//! says so; after a complete response (a redirect, a drip that finished) it
//! reads the next request on it, as a keep-alive server would. Stops (every
//! connection with it) when dropped.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf},
    net::{TcpListener, TcpStream},
    task::{JoinHandle, JoinSet},
};

/// A request head longer than this is not read further (the client is ours).
const MAX_HEAD: usize = 64 * 1024;
/// Body chunk written by [`Behaviour::HugeBody`].
const CHUNK: usize = 64 * 1024;

/// Where a [`Behaviour::Redirect`] points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectTo {
    /// `http://169.254.169.254/latest/meta-data/`, the cloud metadata service.
    Metadata,
    /// `http://127.0.0.1:<port>/canary` of a second listener that counts every
    /// connection ([`HostileServer::canary_hits`]): a client that follows the
    /// redirect is caught even where the egress policy allows loopback.
    Canary,
}

/// How a response body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length: n`, then up to n bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`, chunks forever.
    Chunked,
}

/// A broken status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// `HTTP/1.1 2OO OK` (letters O for zeros).
    LetterDigits,
    /// `HTTP/1.1 99999 X`: five digits.
    LongCode,
    /// Binary garbage instead of a response.
    Garbage,
    /// `HTTP/1.1 200 OK` without CRLF, then the server closes.
    Truncated,
    /// A valid status line, then header lines forever.
    EndlessHeaders,
}

/// A certificate the client must refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertFault {
    /// Signed by a test CA ([`HostileServer::ca_pem`]) for `wrong.example`
    /// only, not for `localhost` or 127.0.0.1: trust the CA and only the name is wrong.
    OtherHost,
    /// Self-signed for `localhost` and 127.0.0.1 but never handed to the client.
    UntrustedCa,
}

/// What the server does with each connection, after reading the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Never answers; keeps the socket open until the client closes it.
    Silent,
    /// A valid `200` response with an empty body, one byte per `interval`
    /// starting with the status line.
    DripStatus {
        interval: Duration,
    },
    /// The head of a valid `200` response at once (`Content-Length: 1024`),
    /// then the body one byte per `interval`.
    DripBody {
        interval: Duration,
    },
    /// Closes with `SO_LINGER` 0, so the client gets a TCP RST.
    Reset,
    /// `status`, then a body written as fast as the client reads it.
    HugeBody {
        status: u16,
        framing: Framing,
    },
    /// `status` (302, 307…) with an empty body and a `Location` header.
    Redirect {
        status: u16,
        to: RedirectTo,
    },
    Malformed(Malformed),
    /// HTTPS with a certificate the client must refuse; a client that accepts
    /// it anyway gets `200`.
    WrongCert(CertFault),
}

/// One accepted connection.
#[derive(Debug, Clone)]
pub struct Connection {
    pub accepted_at: Instant,
    /// Wall-clock accept time, to compare with record timestamps.
    pub accepted_wall: SystemTime,
    /// The target of the first request, once its head was read.
    pub path: Option<String>,
    /// The `webhook-id` header of each request read, in order (a connection
    /// the client keeps alive carries several).
    pub webhook_ids: Vec<String>,
    /// Requests read in full.
    pub requests: u32,
    /// Request bytes read (heads and bodies; after TLS).
    pub request_bytes: u64,
    /// When the first request had been read in full.
    pub request_read_at: Option<Instant>,
    /// Complete responses written; equal to `requests` on an idle keep-alive
    /// connection.
    pub responses: u32,
    /// Response bytes written (and accepted by the kernel).
    pub response_bytes: u64,
    /// When the server saw the client close (EOF, reset, or a failed write).
    pub client_closed_at: Option<Instant>,
    /// When the server stopped serving the connection.
    pub ended_at: Option<Instant>,
    /// A failed TLS handshake or a write error, as text.
    pub error: Option<String>,
}

impl Connection {
    fn new() -> Self {
        Self {
            accepted_at: Instant::now(),
            accepted_wall: SystemTime::now(),
            path: None,
            webhook_ids: Vec::new(),
            requests: 0,
            request_bytes: 0,
            request_read_at: None,
            responses: 0,
            response_bytes: 0,
            client_closed_at: None,
            ended_at: None,
            error: None,
        }
    }

    /// From accept until the client closed, if it did.
    pub fn closed_after(&self) -> Option<Duration> {
        self.client_closed_at
            .map(|at| at.duration_since(self.accepted_at))
    }

    /// Closed by the client, or idle: every request answered in full and the
    /// connection kept alive for the next one.
    pub fn settled(&self) -> bool {
        self.client_closed_at.is_some() || (self.requests > 0 && self.responses == self.requests)
    }

    /// From accept until the server stopped serving, if it did.
    pub fn lasted(&self) -> Option<Duration> {
        self.ended_at.map(|at| at.duration_since(self.accepted_at))
    }
}

#[derive(Debug, Default)]
struct State {
    connections: Mutex<Vec<Connection>>,
    canary_hits: Mutex<usize>,
}

impl State {
    fn update(&self, idx: usize, f: impl FnOnce(&mut Connection)) {
        if let Some(conn) = lock(&self.connections).get_mut(idx) {
            f(conn);
        }
    }
}

/// A running hostile endpoint.
#[derive(Debug)]
pub struct HostileServer {
    behaviour: Behaviour,
    addr: SocketAddr,
    canary: Option<SocketAddr>,
    ca_pem: Option<String>,
    state: Arc<State>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection.
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl HostileServer {
    /// Starts a server that treats every connection with `behaviour`.
    pub async fn start(behaviour: Behaviour) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        let mut tasks = Vec::new();
        let mut canary = None;
        if let Behaviour::Redirect {
            to: RedirectTo::Canary,
            ..
        } = behaviour
        {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            canary = Some(listener.local_addr()?);
            tasks.push(tokio::spawn(canary_loop(listener, Arc::clone(&state))));
        }
        let (tls, ca_pem) = match behaviour {
            Behaviour::WrongCert(fault) => {
                let (acceptor, ca_pem) = wrong_cert(fault)?;
                (Some(acceptor), ca_pem)
            }
            _ => (None, None),
        };
        let ctx = Ctx {
            behaviour,
            canary,
            state: Arc::clone(&state),
        };
        tasks.push(tokio::spawn(accept_loop(listener, tls, ctx)));
        Ok(Self {
            behaviour,
            addr,
            canary,
            ca_pem,
            state,
            tasks,
        })
    }

    pub fn behaviour(&self) -> Behaviour {
        self.behaviour
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>`, or `https://localhost:<port><path>` for
    /// [`Behaviour::WrongCert`] (the name the certificate must match).
    pub fn url(&self, path: &str) -> String {
        match self.behaviour {
            Behaviour::WrongCert(_) => format!("https://localhost:{}{path}", self.addr.port()),
            _ => format!("http://{}{path}", self.addr),
        }
    }

    /// The `Location` a redirect sends, if this server redirects.
    pub fn redirect_target(&self) -> Option<String> {
        match self.behaviour {
            Behaviour::Redirect { to, .. } => Some(location(to, self.canary)),
            _ => None,
        }
    }

    /// The CA that signed the certificate of [`CertFault::OtherHost`] (PEM):
    /// trust it and the certificate is refused for its name alone.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Connections made to the redirect target of [`RedirectTo::Canary`].
    pub fn canary_hits(&self) -> usize {
        *lock(&self.state.canary_hits)
    }

    /// Every connection so far, in accept order.
    pub fn connections(&self) -> Vec<Connection> {
        lock(&self.state.connections).clone()
    }

    /// Total response bytes written on every connection.
    pub fn response_bytes(&self) -> u64 {
        lock(&self.state.connections)
            .iter()
            .map(|c| c.response_bytes)
            .sum()
    }

    /// Waits until `done` holds for the connections so far or `timeout`
    /// passes; returns whether it held.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&[Connection]) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if done(&lock(&self.state.connections)) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl std::fmt::Display for Behaviour {
    /// What the server injects, in a few words, for scenario output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Silent => write!(f, "silent: reads the request, never answers"),
            Self::DripStatus { interval } => {
                write!(f, "drip-status: a 200 response one byte per {interval:?}")
            }
            Self::DripBody { interval } => write!(
                f,
                "drip-body: a 200 head at once, then its body one byte per {interval:?}"
            ),
            Self::Reset => write!(f, "reset: reads the request, then RST (SO_LINGER 0)"),
            Self::HugeBody {
                status,
                framing: Framing::Length(n),
            } => write!(
                f,
                "huge-body: {status}, Content-Length {n}, written as read"
            ),
            Self::HugeBody {
                status,
                framing: Framing::Chunked,
            } => write!(
                f,
                "huge-body: {status}, chunked without end, written as read"
            ),
            Self::Redirect { status, to } => write!(f, "redirect: {status} to {to:?}"),
            Self::Malformed(m) => write!(f, "malformed: {m:?}"),
            Self::WrongCert(c) => write!(f, "wrong-cert: {c:?}"),
        }
    }
}

fn location(to: RedirectTo, canary: Option<SocketAddr>) -> String {
    match (to, canary) {
        (RedirectTo::Canary, Some(addr)) => format!("http://{addr}/canary"),
        _ => "http://169.254.169.254/latest/meta-data/".to_owned(),
    }
}

/// A TLS acceptor with a certificate for `fault`, and the CA that signed it (if any).
fn wrong_cert(fault: CertFault) -> anyhow::Result<(tokio_rustls::TlsAcceptor, Option<String>)> {
    let (leaf_der, key_der, ca_pem) = match fault {
        CertFault::UntrustedCa => {
            let cert = rcgen::generate_simple_self_signed(vec![
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
            ])?;
            (cert.cert.der().clone(), cert.key_pair.serialize_der(), None)
        }
        CertFault::OtherHost => {
            let ca_key = rcgen::KeyPair::generate()?;
            let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
            ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            ca.distinguished_name
                .push(rcgen::DnType::CommonName, "hookline hostile test CA");
            let ca = ca.self_signed(&ca_key)?;
            let leaf_key = rcgen::KeyPair::generate()?;
            let leaf = rcgen::CertificateParams::new(vec!["wrong.example".to_owned()])?
                .signed_by(&leaf_key, &ca, &ca_key)?;
            (leaf.der().clone(), leaf_key.serialize_der(), Some(ca.pem()))
        }
    };
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
        key_der,
    ));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![leaf_der], key)
    .context("building the TLS server config")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca_pem))
}

#[derive(Debug, Clone)]
struct Ctx {
    behaviour: Behaviour,
    canary: Option<SocketAddr>,
    state: Arc<State>,
}

async fn canary_loop(listener: TcpListener, state: Arc<State>) {
    // Held so the sockets stay open; dropped with the task.
    let mut held = Vec::new();
    while let Ok((stream, _)) = listener.accept().await {
        *lock(&state.canary_hits) += 1;
        held.push(stream);
    }
}

async fn accept_loop(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>, ctx: Ctx) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let idx = {
                    let mut all = lock(&ctx.state.connections);
                    all.push(Connection::new());
                    all.len() - 1
                };
                conns.spawn(serve(stream, tls.clone(), ctx.clone(), idx));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve(stream: TcpStream, tls: Option<tokio_rustls::TlsAcceptor>, ctx: Ctx, idx: usize) {
    let _ = stream.set_nodelay(true);
    match tls {
        Some(acceptor) => match acceptor.accept(stream).await {
            Ok(stream) => serve_stream(stream, &ctx, idx).await,
            Err(e) => {
                let now = Instant::now();
                ctx.state.update(idx, |c| {
                    c.error = Some(format!("TLS handshake failed: {e}"));
                    c.client_closed_at = Some(now);
                    c.ended_at = Some(now);
                });
            }
        },
        None if ctx.behaviour == Behaviour::Reset => {
            let mut stream = stream;
            let _ = read_request(&mut stream, &ctx.state, idx).await;
            // SO_LINGER 0: close() discards unsent data and sends RST instead of FIN.
            let _ = stream.set_zero_linger();
            drop(stream);
            ctx.state.update(idx, |c| c.ended_at = Some(Instant::now()));
        }
        None => serve_stream(stream, &ctx, idx).await,
    }
}

async fn serve_stream<S>(stream: S, ctx: &Ctx, idx: usize)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let state = &ctx.state;
    let (mut rd, mut wr) = tokio::io::split(stream);
    let client_closed = loop {
        if read_request(&mut rd, state, idx).await.is_err() {
            break Some(Instant::now());
        }
        let responded = tokio::select! {
            () = watch_close(&mut rd) => None,
            end = respond(&mut wr, ctx, idx) => Some(end),
        };
        match responded {
            None => break Some(Instant::now()),
            Some(Ok(After::KeepAlive)) => {
                state.update(idx, |c| c.responses += 1);
            }
            // Keep the socket open until the client closes it.
            Some(Ok(After::Hold)) => {
                watch_close(&mut rd).await;
                break Some(Instant::now());
            }
            Some(Ok(After::Close)) => {
                let _ = wr.shutdown().await;
                break None;
            }
            Some(Err(e)) => {
                state.update(idx, |c| c.error = Some(format!("write failed: {e}")));
                break Some(Instant::now());
            }
        }
    };
    let now = Instant::now();
    state.update(idx, |c| {
        c.client_closed_at = c.client_closed_at.or(client_closed);
        c.ended_at = Some(now);
    });
}

/// Reads the request head and a `Content-Length` body; records its size,
/// path and `webhook-id`. An error means the client closed first.
async fn read_request<S: AsyncRead + Unpin>(
    stream: &mut S,
    state: &State,
    idx: usize,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = find(&buf, b"\r\n\r\n") {
            break pos + 4;
        }
        if buf.len() > MAX_HEAD {
            break buf.len();
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        state.update(idx, |c| c.request_bytes += n as u64);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .map(str::to_owned);
    let mut length = 0usize;
    let mut webhook_id = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().unwrap_or(0);
        } else if name.eq_ignore_ascii_case("webhook-id") {
            webhook_id = Some(value.to_owned());
        }
    }
    let mut remaining = length.saturating_sub(buf.len() - head_end);
    while remaining > 0 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        remaining = remaining.saturating_sub(n);
        state.update(idx, |c| c.request_bytes += n as u64);
    }
    let now = Instant::now();
    state.update(idx, |c| {
        c.path = c.path.take().or(path);
        c.webhook_ids.extend(webhook_id);
        c.requests += 1;
        c.request_read_at = c.request_read_at.or(Some(now));
    });
    Ok(())
}

/// Resolves when the client closes its side (EOF or an error); anything else
/// it sends is read and ignored.
async fn watch_close<S: AsyncRead>(rd: &mut ReadHalf<S>) {
    let mut sink = [0u8; 4096];
    while let Ok(n) = rd.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }
}

/// What to do once the response is written.
enum After {
    /// It was complete: read the next request on this connection.
    KeepAlive,
    /// Hold the socket open until the client closes it.
    Hold,
    /// Close our side.
    Close,
}

async fn respond<S: AsyncWrite>(
    wr: &mut WriteHalf<S>,
    ctx: &Ctx,
    idx: usize,
) -> std::io::Result<After> {
    let mut out = Out {
        wr,
        state: &ctx.state,
        idx,
    };
    match ctx.behaviour {
        Behaviour::Silent | Behaviour::Reset => Ok(After::Hold),
        Behaviour::DripStatus { interval } => {
            let response = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
            for byte in response.chunks(1) {
                out.write(byte).await?;
                tokio::time::sleep(interval).await;
            }
            Ok(After::KeepAlive)
        }
        Behaviour::DripBody { interval } => {
            out.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1024\r\n\r\n")
                .await?;
            for _ in 0..1024 {
                tokio::time::sleep(interval).await;
                out.write(b"x").await?;
            }
            Ok(After::KeepAlive)
        }
        Behaviour::HugeBody { status, framing } => {
            let chunk = vec![b'x'; CHUNK];
            match framing {
                Framing::Length(n) => {
                    out.write(
                        format!("HTTP/1.1 {status} Huge\r\ncontent-length: {n}\r\n\r\n").as_bytes(),
                    )
                    .await?;
                    let mut left = n;
                    while left > 0 {
                        let take = left.min(CHUNK as u64) as usize;
                        out.write(&chunk[..take]).await?;
                        left -= take as u64;
                    }
                    Ok(After::KeepAlive)
                }
                Framing::Chunked => {
                    out.write(
                        format!("HTTP/1.1 {status} Huge\r\ntransfer-encoding: chunked\r\n\r\n")
                            .as_bytes(),
                    )
                    .await?;
                    let size = format!("{CHUNK:x}\r\n");
                    loop {
                        out.write(size.as_bytes()).await?;
                        out.write(&chunk).await?;
                        out.write(b"\r\n").await?;
                    }
                }
            }
        }
        Behaviour::Redirect { status, to } => {
            let head = format!(
                "HTTP/1.1 {status} Redirect\r\nlocation: {}\r\ncontent-length: 0\r\n\r\n",
                location(to, ctx.canary)
            );
            out.write(head.as_bytes()).await?;
            Ok(After::KeepAlive)
        }
        Behaviour::Malformed(m) => {
            match m {
                Malformed::LetterDigits => {
                    out.write(b"HTTP/1.1 2OO OK\r\ncontent-length: 0\r\n\r\n")
                        .await?
                }
                Malformed::LongCode => {
                    out.write(b"HTTP/1.1 99999 X\r\ncontent-length: 0\r\n\r\n")
                        .await?
                }
                Malformed::Garbage => {
                    out.write(b"\x00\xff\x13\x37 garbage \xde\xad\xbe\xef\r\n\r\n")
                        .await?
                }
                Malformed::Truncated => {
                    out.write(b"HTTP/1.1 200 OK").await?;
                    return Ok(After::Close);
                }
                Malformed::EndlessHeaders => {
                    out.write(b"HTTP/1.1 200 OK\r\n").await?;
                    let line = format!("x-endless: {}\r\n", "y".repeat(1000));
                    loop {
                        out.write(line.as_bytes()).await?;
                    }
                }
            }
            Ok(After::Hold)
        }
        Behaviour::WrongCert(_) => {
            out.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await?;
            Ok(After::KeepAlive)
        }
    }
}

/// The write half, counting what the kernel accepted.
struct Out<'a, S> {
    wr: &'a mut WriteHalf<S>,
    state: &'a State,
    idx: usize,
}

impl<S: AsyncWrite> Out<'_, S> {
    async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = self.wr.write(rest).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.state
                .update(self.idx, |c| c.response_bytes += n as u64);
            rest = &rest[n..];
        }
        self.wr.flush().await
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
