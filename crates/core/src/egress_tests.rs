use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use BlockedRange::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// (address, expected range or None for public). Both edges of every range, and
/// the first address outside it where that is a public one.
const TABLE: &[(&str, Option<BlockedRange>)] = &[
    // IPv4 unspecified / "this network" 0.0.0.0/8
    ("0.0.0.0", Some(Unspecified)),
    ("0.255.255.255", Some(Unspecified)),
    ("1.0.0.0", None),
    // private 10/8
    ("9.255.255.255", None),
    ("10.0.0.0", Some(Private)),
    ("10.255.255.255", Some(Private)),
    ("11.0.0.0", None),
    // CGNAT 100.64/10
    ("100.63.255.255", None),
    ("100.64.0.0", Some(Cgnat)),
    ("100.127.255.255", Some(Cgnat)),
    ("100.128.0.0", None),
    // loopback 127/8
    ("126.255.255.255", None),
    ("127.0.0.1", Some(Loopback)),
    ("127.255.255.254", Some(Loopback)),
    ("128.0.0.0", None),
    // link-local 169.254/16 and the metadata service
    ("169.253.255.255", None),
    ("169.254.0.0", Some(LinkLocal)),
    ("169.254.169.254", Some(LinkLocal)),
    ("169.254.255.255", Some(LinkLocal)),
    ("169.255.0.0", None),
    // private 172.16/12
    ("172.15.255.255", None),
    ("172.16.0.0", Some(Private)),
    ("172.31.255.255", Some(Private)),
    ("172.32.0.0", None),
    // IETF protocol assignments 192.0.0/24, TEST-NET-1 192.0.2/24
    ("192.0.0.0", Some(Reserved)),
    ("192.0.0.255", Some(Reserved)),
    ("192.0.1.1", None),
    ("192.0.2.0", Some(Documentation)),
    ("192.0.2.255", Some(Documentation)),
    ("192.0.3.0", None),
    // 6to4 relay anycast 192.88.99/24
    ("192.88.99.1", Some(Reserved)),
    ("192.88.98.255", None),
    // private 192.168/16
    ("192.167.255.255", None),
    ("192.168.0.0", Some(Private)),
    ("192.168.255.255", Some(Private)),
    ("192.169.0.0", None),
    // benchmarking 198.18/15
    ("198.17.255.255", None),
    ("198.18.0.0", Some(Benchmarking)),
    ("198.19.255.255", Some(Benchmarking)),
    ("198.20.0.0", None),
    // TEST-NET-2, TEST-NET-3
    ("198.51.100.7", Some(Documentation)),
    ("198.51.101.0", None),
    ("203.0.113.9", Some(Documentation)),
    ("203.0.114.0", None),
    // multicast 224/4, reserved 240/4, broadcast
    ("223.255.255.255", None),
    ("224.0.0.1", Some(Multicast)),
    ("239.255.255.255", Some(Multicast)),
    ("240.0.0.0", Some(Reserved)),
    ("255.255.255.254", Some(Reserved)),
    ("255.255.255.255", Some(Broadcast)),
    // ordinary public addresses
    ("8.8.8.8", None),
    ("93.184.216.34", None),
    // IPv6 unspecified, loopback
    ("::", Some(Unspecified)),
    ("::1", Some(Loopback)),
    // IPv4-mapped: judged by the embedded address
    ("::ffff:127.0.0.1", Some(Loopback)),
    ("::ffff:10.1.2.3", Some(Private)),
    ("::ffff:169.254.169.254", Some(LinkLocal)),
    ("::ffff:100.64.0.1", Some(Cgnat)),
    ("::ffff:0.0.0.0", Some(Unspecified)),
    ("::ffff:224.0.0.1", Some(Multicast)),
    ("::ffff:255.255.255.255", Some(Broadcast)),
    ("::ffff:8.8.8.8", None),
    // IPv4-compatible (deprecated)
    ("::127.0.0.1", Some(Loopback)),
    ("::192.168.1.1", Some(Private)),
    ("::0.0.0.2", Some(Unspecified)),
    ("::8.8.8.8", None),
    // NAT64 well-known prefix 64:ff9b::/96
    ("64:ff9b::127.0.0.1", Some(Loopback)),
    ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
    ("64:ff9b::8.8.8.8", None),
    // local-use NAT64 64:ff9b:1::/48 and discard-only 100::/64
    ("64:ff9b:1::1", Some(Reserved)),
    ("100::1", Some(Reserved)),
    // 6to4 2002::/16 embeds an IPv4 address in bits 16..48
    ("2002:7f00:1::1", Some(Loopback)),
    ("2002:a00:1::", Some(Private)),
    ("2002:808:808::1", None),
    // ULA fc00::/7
    ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some(Reserved)),
    ("fc00::", Some(UniqueLocal)),
    ("fd12:3456::1", Some(UniqueLocal)),
    ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some(UniqueLocal)),
    // link-local fe80::/10, deprecated site-local fec0::/10
    ("fe80::1", Some(LinkLocal)),
    ("febf:ffff::1", Some(LinkLocal)),
    ("fec0::1", Some(Private)),
    // multicast ff00::/8
    ("ff02::1", Some(Multicast)),
    ("ff0e::1", Some(Multicast)),
    // documentation 2001:db8::/32 and 3fff::/20
    ("2001:db8::1", Some(Documentation)),
    ("2001:db9::1", None),
    ("3fff::1", Some(Documentation)),
    ("3fff:1000::1", None),
    // IETF protocol assignments 2001::/23 (incl. Teredo 2001::/32)
    ("2001::1", Some(Reserved)),
    ("2001:1ff:ffff::1", Some(Reserved)),
    ("2001:200::1", None),
    // outside 2000::/3
    ("1fff:ffff::1", Some(Reserved)),
    ("4000::1", Some(Reserved)),
    // ordinary public IPv6
    ("2606:4700:4700::1111", None),
    ("2a00:1450:4001:81b::200e", None),
];

#[test]
fn every_range_table() {
    for (addr, want) in TABLE {
        assert_eq!(blocked_range(ip(addr)), *want, "{addr}");
    }
}

#[test]
fn the_table_covers_every_blocked_range() {
    let covered: BTreeSet<&str> = TABLE
        .iter()
        .filter_map(|(_, r)| r.map(BlockedRange::as_str))
        .collect();
    let all: BTreeSet<&str> = BlockedRange::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(covered, all);
}

#[test]
fn default_policy_denies_blocked_and_allows_public() {
    let policy = EgressPolicy::default();
    for (addr, want) in TABLE {
        let got = policy.check(ip(addr));
        match want {
            None => assert_eq!(got, Ok(()), "{addr}"),
            Some(range) => assert_eq!(
                got,
                Err(EgressDenied {
                    ip: ip(addr),
                    range: *range
                }),
                "{addr}"
            ),
        }
    }
}

#[test]
fn allow_list_opens_only_what_it_names() {
    let policy = EgressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
    let cases = [
        ("127.0.0.1", true),
        ("127.9.9.9", true),
        // The IPv4-mapped and NAT64 forms of an allowed address are that address.
        ("::ffff:127.0.0.1", true),
        ("64:ff9b::127.0.0.1", true),
        // Other loopback and private space stays closed.
        ("::1", false),
        ("10.0.0.1", false),
        ("169.254.169.254", false),
        ("::ffff:10.0.0.1", false),
        ("8.8.8.8", true),
    ];
    for (addr, allowed) in cases {
        assert_eq!(policy.check(ip(addr)).is_ok(), allowed, "{addr}");
    }
    let v6 = EgressPolicy::new(vec!["fd00::/8".parse().unwrap()]);
    assert!(v6.check(ip("fd00::5")).is_ok());
    assert!(v6.check(ip("fc00::5")).is_err());
    assert!(v6.check(ip("10.0.0.1")).is_err());
}

#[test]
fn cidr_parse_table() {
    let ok = [
        ("127.0.0.0/8", "127.0.0.0/8"),
        (" 10.0.0.0/8 ", "10.0.0.0/8"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("192.168.1.7", "192.168.1.7/32"),
        ("fd00::/8", "fd00::/8"),
        ("::1", "::1/128"),
        ("::/0", "::/0"),
    ];
    for (input, shown) in ok {
        let c: Cidr = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(c.to_string(), shown);
    }
    let bad = [
        "",
        "10.0.0.0/",
        "10.0.0/8",
        "localhost",
        "10.0.0.0/-1",
        "10.0.0.0/33",
        "::/129",
        "10.0.0.1/8",
        "fd00::1/8",
    ];
    for input in bad {
        assert!(input.parse::<Cidr>().is_err(), "{input:?} parsed");
    }
    assert_eq!(
        "10.0.0.1/8".parse::<Cidr>(),
        Err(CidrError::HostBits {
            input: "10.0.0.1/8".into(),
            suggestion: "10.0.0.0/8".into()
        })
    );
}

#[test]
fn cidr_contains_edges() {
    let c: Cidr = "172.16.0.0/12".parse().unwrap();
    assert!(c.contains(ip("172.16.0.0")));
    assert!(c.contains(ip("172.31.255.255")));
    assert!(!c.contains(ip("172.32.0.0")));
    assert!(!c.contains(ip("::ffff:172.16.0.1")), "families never mix");
    let all: Cidr = "0.0.0.0/0".parse().unwrap();
    assert!(all.contains(ip("255.255.255.255")));
    let host: Cidr = "2001:db8::1".parse().unwrap();
    assert!(host.contains(ip("2001:db8::1")));
    assert!(!host.contains(ip("2001:db8::2")));
}

#[test]
fn cidr_contains_at_the_prefix_extremes() {
    let contains = |cidr: &str, addr: &str| -> bool {
        let c: Cidr = cidr.parse().unwrap_or_else(|e| panic!("{cidr}: {e}"));
        c.contains(ip(addr))
    };
    // (cidr, address, contained)
    let cases = [
        // /0 holds its whole family and nothing of the other.
        ("0.0.0.0/0", "0.0.0.0", true),
        ("0.0.0.0/0", "255.255.255.255", true),
        ("0.0.0.0/0", "::", false),
        ("0.0.0.0/0", "::ffff:8.8.8.8", false),
        ("::/0", "::", true),
        ("::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("::/0", "::ffff:8.8.8.8", true),
        ("::/0", "8.8.8.8", false),
        // /1: the top bit alone.
        ("128.0.0.0/1", "128.0.0.0", true),
        ("128.0.0.0/1", "255.255.255.255", true),
        ("128.0.0.0/1", "127.255.255.255", false),
        ("8000::/1", "8000::", true),
        ("8000::/1", "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false),
        // /31 and /127: two addresses.
        ("10.0.0.0/31", "10.0.0.1", true),
        ("10.0.0.0/31", "10.0.0.2", false),
        ("fd00::/127", "fd00::1", true),
        ("fd00::/127", "fd00::2", false),
        // /32 and /128: the one host, written with or without the prefix.
        ("169.254.169.254/32", "169.254.169.254", true),
        ("169.254.169.254/32", "169.254.169.253", false),
        ("169.254.169.254/32", "169.254.169.255", false),
        ("169.254.169.254", "169.254.169.254", true),
        ("::1/128", "::1", true),
        ("::1/128", "::", false),
        ("::1/128", "::2", false),
        ("::1", "0.0.0.1", false),
        // IPv4-mapped networks are IPv6 networks: they hold the mapped form only.
        ("::ffff:10.0.0.0/104", "::ffff:10.1.2.3", true),
        ("::ffff:10.0.0.0/104", "::ffff:11.0.0.0", false),
        ("::ffff:10.0.0.0/104", "10.1.2.3", false),
        ("::ffff:0.0.0.0/96", "::ffff:255.255.255.255", true),
        ("::ffff:0.0.0.0/96", "::1:0:0", false),
        ("10.0.0.0/8", "::ffff:10.1.2.3", false),
    ];
    for (cidr, addr, want) in cases {
        assert_eq!(contains(cidr, addr), want, "{cidr} contains {addr}");
    }
}

#[test]
fn allow_list_edges() {
    let policy =
        |cidrs: &[&str]| EgressPolicy::new(cidrs.iter().map(|c| c.parse().unwrap()).collect());
    // (allowed CIDRs, address, allowed)
    let cases: &[(&[&str], &str, bool)] = &[
        // 0.0.0.0/0 opens all of IPv4 and the IPv6 forms that embed it...
        (&["0.0.0.0/0"], "10.0.0.1", true),
        (&["0.0.0.0/0"], "::ffff:127.0.0.1", true),
        (&["0.0.0.0/0"], "::10.0.0.1", true),
        (&["0.0.0.0/0"], "64:ff9b::a9fe:a9fe", true),
        (&["0.0.0.0/0"], "2002:a9fe:a9fe::1", true),
        // ...but no IPv6 space of its own: `::` and `::1` embed no IPv4 address.
        (&["0.0.0.0/0"], "::", false),
        (&["0.0.0.0/0"], "::1", false),
        (&["0.0.0.0/8"], "::1", false),
        (&["0.0.0.0/0"], "fe80::1", false),
        (&["0.0.0.0/0"], "fc00::1", false),
        (&["0.0.0.0/0"], "64:ff9b:1::1", false),
        // ::/0 opens all of IPv6, embedded forms included, and no IPv4 address.
        (&["::/0"], "::1", true),
        (&["::/0"], "::ffff:10.0.0.1", true),
        (&["::/0"], "fe80::1", true),
        (&["::/0"], "10.0.0.1", false),
        (&["::/0"], "127.0.0.1", false),
        // A /32 opens one address, in each of its forms.
        (&["169.254.169.254/32"], "169.254.169.254", true),
        (&["169.254.169.254/32"], "::ffff:169.254.169.254", true),
        (&["169.254.169.254/32"], "64:ff9b::169.254.169.254", true),
        (&["169.254.169.254/32"], "2002:a9fe:a9fe::", true),
        (&["169.254.169.254/32"], "169.254.169.253", false),
        (&["169.254.169.254/32"], "::ffff:169.254.169.255", false),
        // A /128 opens one address, and not the IPv4 address it may embed.
        (&["::1/128"], "::1", true),
        (&["::1/128"], "127.0.0.1", false),
        (&["::ffff:10.0.0.1/128"], "::ffff:10.0.0.1", true),
        (&["::ffff:10.0.0.1/128"], "::ffff:10.0.0.2", false),
        // Several CIDRs: any one suffices.
        (&["10.0.0.0/8", "fd00::/8"], "10.1.1.1", true),
        (&["10.0.0.0/8", "fd00::/8"], "fd00::1", true),
        (&["10.0.0.0/8", "fd00::/8"], "192.168.0.1", false),
    ];
    for (cidrs, addr, allowed) in cases {
        assert_eq!(
            policy(cidrs).check(ip(addr)).is_ok(),
            *allowed,
            "{cidrs:?} {addr}"
        );
    }
}

#[test]
fn range_tables_are_networks_without_host_bits_and_without_duplicates() {
    let v4: Vec<IpNet> = BLOCKED_V4.iter().map(|(n, _)| IpNet::V4(*n)).collect();
    let v6: Vec<IpNet> = RANGES_V6
        .iter()
        .map(|(n, _)| *n)
        .chain(EMBEDS_V4.iter().map(|(n, _)| *n))
        .map(IpNet::V6)
        .collect();
    for table in [&v4, &v6] {
        for net in table {
            assert_eq!(net.trunc(), *net, "{net} has host bits set");
        }
        let distinct: BTreeSet<_> = table.iter().collect();
        assert_eq!(
            distinct.len(),
            table.len(),
            "duplicate network in {table:?}"
        );
    }
    for (net, offset) in EMBEDS_V4 {
        assert!(
            offset + 32 <= 128 && *offset >= u32::from(net.prefix_len()),
            "{net}"
        );
    }
}

proptest! {
    /// The IPv4-mapped form of any address is judged exactly like the address.
    #[test]
    fn mapped_form_matches_ipv4(bits in any::<u32>()) {
        let v4 = Ipv4Addr::from(bits);
        prop_assert_eq!(blocked_range(IpAddr::V6(v4.to_ipv6_mapped())), blocked_range(IpAddr::V4(v4)));
        let nat64 = Ipv6Addr::from((0x0064_ff9b_u128 << 96) | u128::from(bits));
        prop_assert_eq!(blocked_range(IpAddr::V6(nat64)), blocked_range(IpAddr::V4(v4)));
    }

    /// Nothing the default policy allows is loopback, private or link-local by std's own tests.
    #[test]
    fn allowed_v4_is_never_special_by_std(bits in any::<u32>()) {
        let v4 = Ipv4Addr::from(bits);
        if EgressPolicy::default().check(IpAddr::V4(v4)).is_ok() {
            prop_assert!(!v4.is_loopback() && !v4.is_private() && !v4.is_link_local());
            prop_assert!(!v4.is_multicast() && !v4.is_broadcast() && !v4.is_unspecified());
            prop_assert!(!v4.is_documentation());
        }
    }

    #[test]
    fn allowed_v6_is_global_unicast(bits in any::<u128>()) {
        let v6 = Ipv6Addr::from(bits);
        if EgressPolicy::default().check(IpAddr::V6(v6)).is_ok() {
            prop_assert!(!v6.is_loopback() && !v6.is_unspecified() && !v6.is_multicast());
            prop_assert!(!v6.is_unique_local() && !v6.is_unicast_link_local());
            prop_assert!(v6.segments()[0] & 0xe000 == 0x2000);
        }
    }
}

#[test]
fn numeric_ipv4_reads_every_legacy_spelling() {
    let loopback = Ipv4Addr::new(127, 0, 0, 1);
    for host in [
        "127.1",
        "127.0.1",
        "2130706433",
        "0x7f000001",
        "0X7F000001",
        "0177.0.0.1",
        "0177.0.0.01",
        "0x7f.1",
        "127.0.0.1.",
        "017700000001",
    ] {
        assert_eq!(numeric_ipv4(host), Some(loopback), "{host}");
        assert_eq!(noncanonical_ipv4(host), Some(loopback), "{host}");
    }
    assert_eq!(numeric_ipv4("127.0.0.1"), Some(loopback));
    assert_eq!(noncanonical_ipv4("127.0.0.1"), None, "canonical");
    assert_eq!(numeric_ipv4("10.1"), Some(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(numeric_ipv4("0"), Some(Ipv4Addr::UNSPECIFIED));
    assert_eq!(numeric_ipv4("0x"), Some(Ipv4Addr::UNSPECIFIED));
    assert_eq!(
        numeric_ipv4("169.254.43518"),
        Some(Ipv4Addr::new(169, 254, 169, 254))
    );
}

#[test]
fn numeric_ipv4_is_none_for_names_and_out_of_range_numbers() {
    for host in [
        "",
        ".",
        "example.com",
        "1.2.3.4.5",
        "256.1",
        "1.2.3.256",
        "1.16777216",
        "4294967296",
        "08.1",
        "0x1g",
        "1..2",
        "123abc",
        "1.2.3.4.example",
        "::1",
    ] {
        assert_eq!(numeric_ipv4(host), None, "{host}");
    }
}
