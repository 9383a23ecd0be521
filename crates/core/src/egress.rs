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

/// The range `ip` falls in when it is not a public unicast address; `None` when it is.
/// IPv6 addresses embedding an IPv4 address are judged by the embedded address.
pub fn blocked_range(ip: IpAddr) -> Option<BlockedRange> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<BlockedRange> {
    use BlockedRange::*;
    let o = ip.octets();
    let range = match o {
        [0, ..] => Unspecified,
        [127, ..] => Loopback,
        [10, ..] => Private,
        [172, b, ..] if (16..=31).contains(&b) => Private,
        [192, 168, ..] => Private,
        [100, b, ..] if (64..=127).contains(&b) => Cgnat,
        [169, 254, ..] => LinkLocal,
        [255, 255, 255, 255] => Broadcast,
        [224..=239, ..] => Multicast,
        [240..=255, ..] => Reserved,
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => Documentation,
        [198, 18 | 19, ..] => Benchmarking,
        [192, 0, 0, _] | [192, 88, 99, _] => Reserved,
        _ => return None,
    };
    Some(range)
}

fn blocked_v6(ip: Ipv6Addr) -> Option<BlockedRange> {
    use BlockedRange::*;
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some(Unspecified);
    }
    if ip.is_loopback() {
        return Some(Loopback);
    }
    if let Some(v4) = embedded_v4(ip) {
        // A denied IPv4 address in IPv6 clothing is still that address. A public
        // one reached through a translator is as public as the original.
        return blocked_v4(v4);
    }
    let range = match s[0] {
        0xff00..=0xffff => Multicast,
        0xfe80..=0xfebf => LinkLocal,
        0xfec0..=0xfeff => Private,
        0xfc00..=0xfdff => UniqueLocal,
        0x2001 if s[1] == 0x0db8 => Documentation,
        0x3fff if s[1] < 0x1000 => Documentation,
        0x2001 if s[1] < 0x0200 => Reserved,
        0x2000..=0x3fff => return None,
        // Not global unicast (2000::/3): unassigned or special, incl. 100::/64
        // and the local-use NAT64 prefix 64:ff9b:1::/48.
        _ => Reserved,
    };
    Some(range)
}

/// The IPv4 address an IPv6 address stands for: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`, deprecated but still routed by some stacks),
/// NAT64 well-known prefix (`64:ff9b::a.b.c.d`) and 6to4 (`2002:AABB:CCDD::/48`).
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(low(hi, lo)),
        // `::` and `::1` are handled before; any other `::/96` is IPv4-compatible.
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x0064, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// An IPv4 or IPv6 network in CIDR notation, e.g. `127.0.0.0/8` or `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

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
        let max = max_prefix(network);
        if prefix > max {
            return Err(CidrError::PrefixTooLong { input, prefix, max });
        }
        let masked = mask(network, prefix);
        if masked != network {
            return Err(CidrError::HostBits {
                input,
                suggestion: format!("{masked}/{prefix}"),
            });
        }
        Ok(Self { network, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(ip, self.prefix) == self.network
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
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

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits & m))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
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
