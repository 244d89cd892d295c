//! The packet rules a transparent PEP needs in its namespace, as argument
//! lists (`--print-rules`). The PEP never runs them: the testbed does, in
//! the PEP's namespace, before starting it, and the teardown after.
//!
//! What they do (IPv4; with IPv6, the same again for it):
//! 1. Packets of a connection the PEP already holds (the accepted leg, whose
//!    local address is the server's, and the outgoing leg, whose local
//!    address is the client's) are found by the socket match (transparent
//!    sockets only), marked and delivered locally by the policy route;
//!    without this the replies to the outgoing leg would be forwarded on to
//!    the client.
//! 2. TCP to this namespace's own addresses is left alone.
//! 3. Any other TCP is diverted to the PEP's port by TPROXY (the packet's
//!    destination unchanged) and marked.
//! 4. `ip rule fwmark MARK lookup TABLE` with `local 0.0.0.0/0 dev lo` in
//!    TABLE delivers marked packets to the local stack.
//!
//! The namespace also needs `net.ipv4.ip_forward=1` (with IPv6,
//! `net.ipv6.conf.all.forwarding=1` too) (for what is not intercepted)
//! and, for Fast Open on the accepting leg,
//! `net.ipv4.tcp_fastopen` with bit 2 set (3: client and server).

use serde::Serialize;

/// One command, as an argument list.
pub type Argv = Vec<String>;

/// The nftables table the rules live in.
pub const NFT_TABLE: &str = "satbench_pep";
/// The iptables chain (table `mangle`) the rules live in.
pub const IPT_CHAIN: &str = "SATBENCH_PEP";

/// The commands to install and remove the rules, in both forms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleSet {
    pub port: u16,
    pub mark: u32,
    pub table: u32,
    /// Policy routing (both forms).
    pub routing: Vec<Argv>,
    /// Packet rules, iptables form (run after `routing`).
    pub iptables: Vec<Argv>,
    /// Packet rules, nft form (instead of `iptables`).
    pub nft: Vec<Argv>,
    /// Removal, each in order.
    pub teardown: Teardown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Teardown {
    pub routing: Vec<Argv>,
    pub iptables: Vec<Argv>,
    pub nft: Vec<Argv>,
}

fn argv(s: &str) -> Argv {
    s.split_whitespace().map(str::to_string).collect()
}

impl RuleSet {
    /// The rules for IPv4.
    pub fn new(port: u16, mark: u32, table: u32) -> RuleSet {
        RuleSet::of(port, mark, table, false)
    }

    /// The rules for IPv4 and IPv6: the same again with `ip -6`, `ip6tables`
    /// and an `ip6` table (the namespace needs IPv6 on).
    pub fn with_ipv6(port: u16, mark: u32, table: u32) -> RuleSet {
        RuleSet::of(port, mark, table, true)
    }

    fn of(port: u16, mark: u32, table: u32, ipv6: bool) -> RuleSet {
        // (ip command, any address, iptables command, nft family) per family.
        let mut families = vec![("ip", "0.0.0.0/0", "iptables", "ip")];
        if ipv6 {
            families.push(("ip -6", "::/0", "ip6tables", "ip6"));
        }
        let mut r = RuleSet {
            port,
            mark,
            table,
            routing: Vec::new(),
            iptables: Vec::new(),
            nft: Vec::new(),
            teardown: Teardown {
                routing: Vec::new(),
                iptables: Vec::new(),
                nft: Vec::new(),
            },
        };
        for (ip, any, ipt_cmd, fam) in families {
            let ipt = |rule: &str| argv(&format!("{ipt_cmd} -w -t mangle {rule}"));
            let nft_rule =
                |rule: &str| argv(&format!("nft add rule {fam} {NFT_TABLE} prerouting {rule}"));
            r.routing.extend([
                argv(&format!("{ip} rule add fwmark {mark} lookup {table}")),
                argv(&format!("{ip} route add local {any} dev lo table {table}")),
            ]);
            r.iptables.extend([
                ipt(&format!("-N {IPT_CHAIN}")),
                ipt(&format!(
                    "-A {IPT_CHAIN} -p tcp -m socket --transparent -j MARK --set-mark {mark}"
                )),
                ipt(&format!(
                    "-A {IPT_CHAIN} -p tcp -m socket --transparent -j ACCEPT"
                )),
                ipt(&format!(
                    "-A {IPT_CHAIN} -p tcp -m addrtype --dst-type LOCAL -j RETURN"
                )),
                ipt(&format!(
                    "-A {IPT_CHAIN} -p tcp -j TPROXY --on-port {port} --tproxy-mark {mark}"
                )),
                ipt(&format!("-A PREROUTING -p tcp -j {IPT_CHAIN}")),
            ]);
            r.nft.extend([
                argv(&format!("nft add table {fam} {NFT_TABLE}")),
                argv(&format!(
                    "nft add chain {fam} {NFT_TABLE} prerouting {{ type filter hook prerouting priority mangle ; policy accept ; }}"
                )),
                nft_rule(&format!(
                    "meta l4proto tcp socket transparent 1 meta mark set {mark} accept"
                )),
                nft_rule("meta l4proto tcp fib daddr type local accept"),
                nft_rule(&format!(
                    "meta l4proto tcp tproxy to :{port} meta mark set {mark} accept"
                )),
            ]);
            r.teardown.routing.extend([
                argv(&format!("{ip} rule del fwmark {mark} lookup {table}")),
                argv(&format!("{ip} route flush table {table}")),
            ]);
            r.teardown.iptables.extend([
                ipt(&format!("-D PREROUTING -p tcp -j {IPT_CHAIN}")),
                ipt(&format!("-F {IPT_CHAIN}")),
                ipt(&format!("-X {IPT_CHAIN}")),
            ]);
            r.teardown
                .nft
                .push(argv(&format!("nft delete table {fam} {NFT_TABLE}")));
        }
        r
    }

    /// The commands as shell lines (for the documentation and people).
    pub fn lines(cmds: &[Argv]) -> Vec<String> {
        cmds.iter().map(|c| c.join(" ")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_set_for_a_port_and_mark() {
        let r = RuleSet::new(5000, 1, 100);
        assert_eq!(
            RuleSet::lines(&r.routing),
            [
                "ip rule add fwmark 1 lookup 100",
                "ip route add local 0.0.0.0/0 dev lo table 100"
            ]
        );
        assert_eq!(
            RuleSet::lines(&r.iptables),
            [
                "iptables -w -t mangle -N SATBENCH_PEP",
                "iptables -w -t mangle -A SATBENCH_PEP -p tcp -m socket --transparent -j MARK --set-mark 1",
                "iptables -w -t mangle -A SATBENCH_PEP -p tcp -m socket --transparent -j ACCEPT",
                "iptables -w -t mangle -A SATBENCH_PEP -p tcp -m addrtype --dst-type LOCAL -j RETURN",
                "iptables -w -t mangle -A SATBENCH_PEP -p tcp -j TPROXY --on-port 5000 --tproxy-mark 1",
                "iptables -w -t mangle -A PREROUTING -p tcp -j SATBENCH_PEP",
            ]
        );
        assert_eq!(
            RuleSet::lines(&r.nft),
            [
                "nft add table ip satbench_pep",
                "nft add chain ip satbench_pep prerouting { type filter hook prerouting priority mangle ; policy accept ; }",
                "nft add rule ip satbench_pep prerouting meta l4proto tcp socket transparent 1 meta mark set 1 accept",
                "nft add rule ip satbench_pep prerouting meta l4proto tcp fib daddr type local accept",
                "nft add rule ip satbench_pep prerouting meta l4proto tcp tproxy to :5000 meta mark set 1 accept",
            ]
        );
        assert_eq!(
            RuleSet::lines(&r.teardown.routing),
            [
                "ip rule del fwmark 1 lookup 100",
                "ip route flush table 100"
            ]
        );
        assert_eq!(r.teardown.iptables.len(), 3);
        assert_eq!(
            RuleSet::lines(&r.teardown.nft),
            ["nft delete table ip satbench_pep"]
        );
    }

    #[test]
    fn with_ipv6_the_same_rules_again_for_it() {
        let (v4, both) = (RuleSet::new(5000, 1, 100), RuleSet::with_ipv6(5000, 1, 100));
        assert_eq!(both.routing[..2], v4.routing[..]);
        assert_eq!(
            RuleSet::lines(&both.routing[2..]),
            [
                "ip -6 rule add fwmark 1 lookup 100",
                "ip -6 route add local ::/0 dev lo table 100"
            ]
        );
        assert_eq!(both.nft[..5], v4.nft[..]);
        assert_eq!(
            RuleSet::lines(&both.nft[5..]),
            [
                "nft add table ip6 satbench_pep",
                "nft add chain ip6 satbench_pep prerouting { type filter hook prerouting priority mangle ; policy accept ; }",
                "nft add rule ip6 satbench_pep prerouting meta l4proto tcp socket transparent 1 meta mark set 1 accept",
                "nft add rule ip6 satbench_pep prerouting meta l4proto tcp fib daddr type local accept",
                "nft add rule ip6 satbench_pep prerouting meta l4proto tcp tproxy to :5000 meta mark set 1 accept",
            ]
        );
        assert_eq!(both.iptables.len(), 12);
        assert_eq!(both.iptables[6][0], "ip6tables");
        assert_eq!(
            RuleSet::lines(&both.teardown.nft),
            [
                "nft delete table ip satbench_pep",
                "nft delete table ip6 satbench_pep"
            ]
        );
    }

    #[test]
    fn json_form() {
        let j = serde_json::to_value(RuleSet::new(7000, 3, 200)).unwrap();
        assert_eq!(j["port"], 7000);
        assert_eq!(j["mark"], 3);
        assert_eq!(
            j["routing"][0],
            serde_json::json!(["ip", "rule", "add", "fwmark", "3", "lookup", "200"])
        );
        assert_eq!(j["nft"][4][9], "tproxy");
    }
}
