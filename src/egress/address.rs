//! Which resolved addresses the proxy may connect to: ordinary public unicast only, IPv6
//! forms that carry an IPv4 address judged by that address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// True when `ip` is an ordinary public unicast address the proxy may connect to. Refused:
/// unspecified and "this network" (0/8), loopback, private (10/8, 172.16/12, 192.168/16),
/// CGNAT (100.64/10), link-local (169.254/16 with the cloud metadata address, fe80::/10),
/// IETF protocol assignments (192.0.0/24, 2001::/23), documentation (192.0.2/24, 198.51.100/24,
/// 203.0.113/24, 2001:db8::/32, 3fff::/20), benchmarking (198.18/15), reserved and broadcast
/// (240/4), multicast, unique-local (fc00::/7), site-local, discard-only (100::/64), and every
/// IPv6 address outside global unicast 2000::/3. IPv6 forms that carry an IPv4 address
/// (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:aabb:ccdd::`) are judged
/// by that address; IPv4-compatible `::a.b.c.d` is refused.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 192 && b == 168)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224;
    !refused
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded_v4 = || Ipv4Addr::from(((u32::from(s[6])) << 16) | u32::from(s[7]));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    // NAT64 well-known prefix 64:ff9b::/96.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(embedded_v4());
    }
    // 6to4 2002::/16 carries the IPv4 address in the next 32 bits.
    if s[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])));
    }
    let global_unicast = s[0] & 0xe000 == 0x2000;
    let protocol_assignments = s[0] == 0x2001 && s[1] < 0x0200;
    let documentation = (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x3fff && s[1] < 0x1000);
    global_unicast && !protocol_assignments && !documentation
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_non_public_ipv4_range_is_refused() {
        for refused in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.0.1",
            "100.64.0.1",
            "100.127.255.255",
            "192.0.0.8",
            "192.0.2.10",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "198.19.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!is_public(ip(refused)), "{refused} was judged public");
        }
    }

    #[test]
    fn public_ipv4_addresses_next_to_the_refused_ranges_pass() {
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.1",
            "169.253.255.255",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.1",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
        ] {
            assert!(is_public(ip(public)), "{public} was refused");
        }
    }

    #[test]
    fn every_non_public_ipv6_range_is_refused() {
        for refused in [
            "::",
            "::1",
            "fe80::1",
            "febf::1",
            "fc00::1",
            "fd12:3456::1",
            "fec0::1",
            "ff02::1",
            "ff0e::1",
            "2001:db8::1",
            "2001::1",
            "2001:2::1",
            "2001:1ff:ffff::1",
            "3fff::1",
            "3fff:fff::1",
            "100::1",
            "::7f00:1",
            "64:ff9b:1::1",
            "4000::1",
        ] {
            assert!(!is_public(ip(refused)), "{refused} was judged public");
        }
    }

    #[test]
    fn ipv6_forms_carrying_a_refused_ipv4_address_are_refused_and_public_ones_pass() {
        for refused in [
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::ffff:192.168.0.1",
            "::ffff:100.64.0.1",
            "::ffff:0.0.0.0",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::1",
            "2002:c0a8:101::1",
        ] {
            assert!(!is_public(ip(refused)), "{refused} was judged public");
        }
        for public in [
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::1",
            "2001:200::1",
            "3fff:1000::1",
        ] {
            assert!(is_public(ip(public)), "{public} was refused");
        }
    }
}
