//! Egress policy: which IP addresses a webhook may be sent to. Every address that
//! is not globally routable unicast — loopback, private, link-local (including the
//! 169.254.169.254 metadata service), CGNAT, multicast, unspecified, broadcast,
//! documentation, benchmarking and reserved space, and the IPv6 forms that embed
//! such an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4) — is denied
//! unless an operator allowed it explicitly by CIDR.
//!
//! Pure: the resolver and connector in `hookline-runtime` call [`EgressPolicy::check`]
//! on every address they are about to connect to, including IP-literal hosts.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Why an address is not a public destination. Also the `reason` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockedRange {
    /// 0.0.0.0/8, `::`.
    Unspecified,
    /// 127.0.0.0/8, `::1`.
    Loopback,
    /// 10/8, 172.16/12, 192.168/16, fec0::/10 (deprecated site-local).
    Private,
    /// 100.64.0.0/10 (carrier-grade NAT, RFC 6598).
    Cgnat,
    /// 169.254.0.0/16 (incl. cloud metadata 169.254.169.254), fe80::/10.
    LinkLocal,
    /// fc00::/7 (unique local addresses).
    UniqueLocal,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18.0.0/15 (RFC 2544).
    Benchmarking,
    /// Everything else set aside: 192.0.0/24, 192.88.99/24, 240/4, 100::/64,
    /// 2001::/23, 64:ff9b:1::/48, and IPv6 outside 2000::/3.
    Reserved,
}

impl BlockedRange {
    /// Every range, for metric pre-registration and tests.
    pub const ALL: [BlockedRange; 11] = [
        Self::Unspecified,
        Self::Loopback,
        Self::Private,
        Self::Cgnat,
        Self::LinkLocal,
        Self::UniqueLocal,
        Self::Multicast,
        Self::Broadcast,
        Self::Documentation,
        Self::Benchmarking,
        Self::Reserved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unspecified => "unspecified",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::Cgnat => "cgnat",
            Self::LinkLocal => "link_local",
            Self::UniqueLocal => "unique_local",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::Documentation => "documentation",
            Self::Benchmarking => "benchmarking",
            Self::Reserved => "reserved",
        }
    }
}

/// The IPv4 ranges that are not public unicast. An address takes the range of the
/// longest prefix that contains it (255.255.255.255/32 within 240.0.0.0/4), so the
/// order here is for reading only. Every other IPv4 address is public.
const BLOCKED_V4: &[(Ipv4Net, BlockedRange)] = {
    use BlockedRange::*;
    &[
        (v4([0, 0, 0, 0], 8), Unspecified),
        (v4([10, 0, 0, 0], 8), Private),
        (v4([100, 64, 0, 0], 10), Cgnat),
        (v4([127, 0, 0, 0], 8), Loopback),
        (v4([169, 254, 0, 0], 16), LinkLocal),
        (v4([172, 16, 0, 0], 12), Private),
        (v4([192, 0, 0, 0], 24), Reserved),
        (v4([192, 0, 2, 0], 24), Documentation),
        (v4([192, 88, 99, 0], 24), Reserved),
        (v4([192, 168, 0, 0], 16), Private),
        (v4([198, 18, 0, 0], 15), Benchmarking),
        (v4([198, 51, 100, 0], 24), Documentation),
        (v4([203, 0, 113, 0], 24), Documentation),
        (v4([224, 0, 0, 0], 4), Multicast),
        (v4([240, 0, 0, 0], 4), Reserved),
        (v4([255, 255, 255, 255], 32), Broadcast),
    ]
};

/// The IPv6 ranges, `None` meaning public, for the addresses that embed no IPv4 one
/// (see [`EMBEDS_V4`]). Longest prefix wins, as for IPv4: only global unicast
/// (2000::/3) is public, and within it the special-purpose blocks are not.
const RANGES_V6: &[(Ipv6Net, Option<BlockedRange>)] = {
    use BlockedRange::*;
    &[
        // Not global unicast: unassigned or special, incl. the discard-only 100::/64
        // and the local-use NAT64 prefix 64:ff9b:1::/48.
        (v6([0, 0, 0, 0, 0, 0, 0, 0], 0), Some(Reserved)),
        (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), Some(Unspecified)),
        (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), Some(Loopback)),
        (v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3), None),
        (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), Some(Reserved)),
        (
            v6([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32),
            Some(Documentation),
        ),
        (v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), Some(Documentation)),
        (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), Some(UniqueLocal)),
        (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), Some(LinkLocal)),
        (v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), Some(Private)),
        (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), Some(Multicast)),
    ]
};

/// Where an IPv6 address carries an IPv4 one: the prefix, and the bit offset of the
/// IPv4 address from the top. IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`, deprecated but still routed by some stacks; `::` and `::1` are not),
/// the NAT64 well-known prefix (`64:ff9b::a.b.c.d`) and 6to4 (`2002:AABB:CCDD::/48`).
const EMBEDS_V4: &[(Ipv6Net, u32)] = &[
    (v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96), 96),
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 96), 96),
    (v6([0x0064, 0xff9b, 0, 0, 0, 0, 0, 0], 96), 96),
    (v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), 16),
];

const fn v4(octets: [u8; 4], prefix: u8) -> Ipv4Net {
    let [a, b, c, d] = octets;
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), prefix)
}

const fn v6(segments: [u16; 8], prefix: u8) -> Ipv6Net {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Net::new_assert(Ipv6Addr::new(a, b, c, d, e, f, g, h), prefix)
}

/// The range `ip` falls in when it is not a public unicast address; `None` when it is.
/// IPv6 addresses embedding an IPv4 address are judged by the embedded address.
pub fn blocked_range(ip: IpAddr) -> Option<BlockedRange> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<BlockedRange> {
    BLOCKED_V4
        .iter()
        .filter(|(net, _)| net.contains(&ip))
        .max_by_key(|(net, _)| net.prefix_len())
        .map(|&(_, range)| range)
}

fn blocked_v6(ip: Ipv6Addr) -> Option<BlockedRange> {
    if let Some(v4) = embedded_v4(ip) {
        // A denied IPv4 address in IPv6 clothing is still that address. A public
        // one reached through a translator is as public as the original.
        return blocked_v4(v4);
    }
    RANGES_V6
        .iter()
        .filter(|(net, _)| net.contains(&ip))
        .max_by_key(|(net, _)| net.prefix_len())
        .and_then(|&(_, range)| range)
}

/// The IPv4 address an IPv6 address stands for: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`, deprecated but still routed by some stacks),
/// NAT64 well-known prefix (`64:ff9b::a.b.c.d`) and 6to4 (`2002:AABB:CCDD::/48`).
/// `::` and `::1` are themselves, not IPv4-compatible forms.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if ip.is_unspecified() || ip.is_loopback() {
        return None;
    }
    let (_, offset) = EMBEDS_V4.iter().find(|(net, _)| net.contains(&ip))?;
    // The 32 bits after the prefix; truncation to u32 drops what follows them.
    Some(Ipv4Addr::from((u128::from(ip) >> (96 - offset)) as u32))
}

/// The IPv4 address a host written in one of the legacy numeric spellings
/// stands for, as `inet_aton` (and so the system resolver) and the URL standard
/// read it: one to four dot-separated parts, each decimal, octal (a leading
/// `0`) or hexadecimal (`0x`), the last filling the remaining bytes, with at most
/// one trailing dot — `127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`,
/// `127.0.0.1.`. `None` for anything else, including a name that merely
/// starts with digits. The canonical dotted quad returns its address too; see
/// [`noncanonical_ipv4`] for the spellings a URL must not use.
pub fn numeric_ipv4(host: &str) -> Option<Ipv4Addr> {
    let host = host.strip_suffix('.').unwrap_or(host);
    let parts: Vec<&str> = host.split('.').collect();
    if host.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        numbers.push(ipv4_number(part)?);
    }
    let (last, first) = numbers.split_last()?;
    if first.iter().any(|&n| n > 255) {
        return None;
    }
    let room = 8 * (4 - first.len() as u32);
    if room < 32 && *last >= 1 << room {
        return None;
    }
    let high = first.iter().enumerate().fold(0u32, |acc, (i, &n)| {
        acc | ((n as u32) << (24 - 8 * i as u32))
    });
    Some(Ipv4Addr::from(high | *last as u32))
}

/// One part of a numeric IPv4 host: decimal, `0`-prefixed octal or `0x` hex.
fn ipv4_number(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() {
        // `0x` alone is zero; an empty part (`1..2`) is not a number.
        return (radix == 16).then_some(0);
    }
    if !digits.chars().all(|c| c.is_digit(radix)) || digits.len() > 12 {
        return None;
    }
    u64::from_str_radix(digits, radix)
        .ok()
        .filter(|&n| n <= u64::from(u32::MAX))
}

/// The address, when `host` is a numeric IPv4 spelling other than the
/// canonical dotted quad (`127.1` → 127.0.0.1). Such a host is resolved by the
/// system to that address, but a TLS client cannot name it, and a check that
/// parses only dotted quads would miss it: hookline refuses it and names the
/// canonical form instead.
pub fn noncanonical_ipv4(host: &str) -> Option<Ipv4Addr> {
    let ip = numeric_ipv4(host)?;
    (ip.to_string() != host).then_some(ip)
}

/// An IPv4 or IPv6 network in CIDR notation, e.g. `127.0.0.0/8` or `fd00::/8`:
/// an [`IpNet`] whose host bits are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr(IpNet);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("`{0}` is not a CIDR like 127.0.0.0/8 or fd00::/8")]
    Syntax(String),
    #[error("`{input}` has prefix length {prefix}; the most is {max}")]
    PrefixTooLong { input: String, prefix: u8, max: u8 },
    #[error("`{input}` has host bits set; did you mean {suggestion}?")]
    HostBits { input: String, suggestion: String },
}

impl Cidr {
    pub fn new(network: IpAddr, prefix: u8) -> Result<Self, CidrError> {
        let input = format!("{network}/{prefix}");
        let net = IpNet::new(network, prefix).map_err(|_| CidrError::PrefixTooLong {
            input: input.clone(),
            prefix,
            max: max_prefix(network),
        })?;
        if net.trunc() != net {
            return Err(CidrError::HostBits {
                input,
                suggestion: net.trunc().to_string(),
            });
        }
        Ok(Self(net))
    }

    /// Whether `ip` is in this network. An IPv4 network never contains an IPv6
    /// address, not even the IPv4-mapped form of one of its own (and the reverse):
    /// [`EgressPolicy::check`] unwraps embedded addresses itself.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }

    /// The network as an [`IpNet`].
    pub fn net(&self) -> IpNet {
        self.0
    }
}

impl From<Cidr> for IpNet {
    fn from(c: Cidr) -> Self {
        c.0
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// `a.b.c.d/n` or `v6/n`; a bare address means a single host (/32 or /128).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let syntax = || CidrError::Syntax(s.to_owned());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => {
                let ip: IpAddr = a.parse().map_err(|_| syntax())?;
                let p: u8 = p.parse().map_err(|_| syntax())?;
                (ip, p)
            }
            None => {
                let ip: IpAddr = s.parse().map_err(|_| syntax())?;
                (ip, max_prefix(ip))
            }
        };
        Self::new(addr, prefix)
    }
}

fn max_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// Why [`EgressPolicy::check`] refused an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("egress to {ip} denied: {} address", range.as_str())]
pub struct EgressDenied {
    pub ip: IpAddr,
    pub range: BlockedRange,
}

/// Public addresses are allowed; blocked ranges are denied unless an allowed CIDR
/// contains the address (or, for IPv6 forms of IPv4, the embedded address).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allow: Vec<Cidr>,
}

impl EgressPolicy {
    pub fn new(allow: Vec<Cidr>) -> Self {
        Self { allow }
    }

    pub fn allowed_cidrs(&self) -> &[Cidr] {
        &self.allow
    }

    pub fn check(&self, ip: IpAddr) -> Result<(), EgressDenied> {
        let Some(range) = blocked_range(ip) else {
            return Ok(());
        };
        let embedded = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        let allowed = self
            .allow
            .iter()
            .any(|c| c.contains(ip) || embedded.is_some_and(|e| c.contains(e)));
        if allowed {
            Ok(())
        } else {
            Err(EgressDenied { ip, range })
        }
    }
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
