//! A network namespace joined to this one by a veth pair, for a memory server whose link the
//! test can pull: with the link down, packets to and from the server are dropped without a
//! reset or a close, as with a pulled cable or a hung host. Needs root (CAP_NET_ADMIN) and
//! `ip`; `Netns::create` says why not where either is missing.

use std::process::Command;

pub struct Netns {
    /// The namespace's name (`ip netns exec NAME ...`).
    pub name: String,
    /// This side of the veth pair.
    link: String,
    /// The server's side.
    peer: String,
    /// The server side's address.
    pub addr: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// A namespace of this process's own, with a /30 from 10.231.0.0/16 chosen by pid.
    pub fn create() -> Result<Netns, String> {
        let id = std::process::id() % 16_000;
        let (a, b) = (id / 64, (id % 64) * 4);
        let n = Netns {
            name: format!("memliner-{}", std::process::id()),
            link: format!("mlv{id}a"),
            peer: format!("mlv{id}b"),
            addr: format!("10.231.{a}.{}", b + 2),
        };
        let peer = n.peer.clone();
        ip(&["netns", "add", &n.name])?;
        // From here the drop cleans up whatever was made.
        ip(&[
            "link", "add", &n.link, "type", "veth", "peer", "name", &peer, "netns", &n.name,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("10.231.{a}.{}/30", b + 1),
            "dev",
            &n.link,
        ])?;
        ip(&["link", "set", &n.link, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["-n", n.name.as_str()];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &format!("{}/30", n.addr), "dev", &peer])?;
        inside(&["link", "set", &peer, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(n)
    }

    /// Pulls the cable at the server's end: every packet either way is dropped from now on,
    /// connections and connects time out. (Downing this end instead would take its route
    /// away: packets would leave by the default route and be refused, not lost.)
    pub fn link_down(&self) {
        ip(&["-n", &self.name, "link", "set", &self.peer, "down"]).unwrap();
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting one end of a veth pair deletes both.
        let _ = ip(&["link", "del", &self.link]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
