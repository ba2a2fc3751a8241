//! `memliner doctor`: whether this machine can run the agent, and with what. Each check says
//! what it found and, when it fails, what to do about it; `--json` prints the same for
//! scripts. Failing checks make the command exit 1; warnings do not.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::rdma_stack::{self, Device, Library};
use serde::Serialize;
use swap_backend::{ClientOptions, PageStore, Scheme, ServerUrl, PAGE_SIZE};

use memliner_contracts::stats::StatsDoc;
use memliner_uffd as uffd;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, with less than it could (no RDMA, no patched JDK).
    Warn,
    /// The agent cannot run as asked until this is fixed.
    Fail,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The RDMA stack as found: libraries and devices (`None`: no RDMA support in the kernel).
#[derive(Clone, Debug, Serialize)]
pub struct Rdma {
    pub libraries: Vec<Library>,
    pub devices: Option<Vec<Device>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
    pub rdma: Rdma,
}

impl Report {
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }

    /// One line per check, its fix indented under it.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let tag = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            out.push_str(&format!("{tag}  {}: {}\n", c.name, c.detail));
            if let Some(f) = &c.fix {
                out.push_str(&format!("      fix: {f}\n"));
            }
        }
        out
    }
}

fn check(name: &str, status: Status, detail: impl Into<String>, fix: Option<&str>) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        fix: fix.map(Into::into),
    }
}

/// Runs every check: the kernel and userfaultfd, the agent, `java` (version, collectors,
/// GC hooks, heap discovery with the agent), the RDMA stack and each of `servers`.
pub fn run(java: &Path, servers: &[ServerUrl]) -> Report {
    let mut checks = vec![kernel(), userfaultfd()];
    let agent = crate::locate::agent();
    checks.push(match &agent {
        Ok(p) => check("agent library", Status::Ok, p.display().to_string(), None),
        Err(e) => check(
            "agent library",
            Status::Fail,
            e.clone(),
            Some("cargo build --release (or set MEMLINER_AGENT to libmemliner_agent.so)"),
        ),
    });
    java_checks(java, agent.as_ref().ok(), &mut checks);
    let rdma = Rdma {
        libraries: rdma_stack::libraries(),
        devices: rdma_stack::devices(Path::new("/sys/class/infiniband")),
    };
    checks.push(memfile_check());
    checks.extend(rdma_checks(&rdma));
    for s in servers {
        checks.push(server(s));
    }
    Report { checks, rdma }
}

fn kernel() -> Check {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let arch = std::env::consts::ARCH;
    check(
        "kernel",
        Status::Ok,
        format!("Linux {} ({arch})", release.trim()),
        None,
    )
}

fn userfaultfd() -> Check {
    let name = "userfaultfd";
    let base =
        uffd::FEATURE_PAGEFAULT_FLAG_WP | uffd::FEATURE_THREAD_ID | uffd::FEATURE_EVENT_UNMAP;
    match uffd::Uffd::open(base) {
        Err(e) => check(
            name,
            Status::Fail,
            format!("cannot open one with write-protect, thread ids and unmap events: {e}"),
            Some("Linux 5.7 or later; as root: sysctl vm.unprivileged_userfaultfd=1, or give the user access to /dev/userfaultfd"),
        ),
        Ok(u) if u.user_mode_only() => check(
            name,
            Status::Warn,
            "user-mode faults only (vm.unprivileged_userfaultfd=0 and no access to /dev/userfaultfd): a JVM whose system calls read paged-out heap memory gets EFAULT",
            Some("as root: sysctl vm.unprivileged_userfaultfd=1, or give the user access to /dev/userfaultfd"),
        ),
        Ok(_) => match uffd::Uffd::open(base | uffd::FEATURE_SIGBUS) {
            Ok(u) => check(
                name,
                Status::Ok,
                format!(
                    "write-protect, thread ids, unmap events and SIGBUS delivery (faults=signal; features {:#x})",
                    u.features()
                ),
                None,
            ),
            Err(_) => check(
                name,
                Status::Warn,
                "no SIGBUS delivery: faults go to handler threads (faults=thread), slower",
                Some("a kernel with UFFD_FEATURE_SIGBUS (4.14 or later)"),
            ),
        },
    }
}

/// java's version line, `None` if it does not run.
fn java_version(java: &Path, flags: &[&str]) -> Result<String, String> {
    let out = Command::new(java)
        .args(flags)
        .arg("-version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", java.display()))?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(text.lines().next().unwrap_or("failed").to_string());
    }
    Ok(text)
}

/// Adds the JDK's checks (only the first when java does not run).
fn java_checks(java: &Path, agent: Option<&PathBuf>, checks: &mut Vec<Check>) {
    let version = match java_version(java, &[]) {
        Ok(v) => v,
        Err(e) => {
            checks.push(check(
                "java",
                Status::Fail,
                e,
                Some("install a JDK 17 or later (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME"),
            ));
            return;
        }
    };
    let first = version.lines().next().unwrap_or("?").to_string();
    let major = first
        .split('"')
        .nth(1)
        .and_then(|v| v.split(['.', '-', '+']).next())
        .and_then(|m| m.parse::<u32>().ok());
    checks.push(match major {
        Some(m) if m >= 11 => check(
            "java",
            Status::Ok,
            format!("{} ({first})", java.display()),
            None,
        ),
        _ => check(
            "java",
            Status::Warn,
            format!("{} ({first}): tested with JDK 17 and 25", java.display()),
            Some("use JDK 17 or later"),
        ),
    });
    let shenandoah = java_version(java, &["-XX:+UseShenandoahGC"]).is_ok();
    checks.push(check(
        "collectors",
        if shenandoah { Status::Ok } else { Status::Warn },
        if shenandoah {
            "G1, Parallel, Serial and Shenandoah"
        } else {
            "G1, Parallel and Serial; this build has no Shenandoah"
        },
        (!shenandoah)
            .then_some("a JDK build with Shenandoah (Debian's, Temurin) for -XX:+UseShenandoahGC"),
    ));
    let patched = crate::run::is_patched_jdk(&java.to_string_lossy());
    checks.push(if patched {
        check(
            "gc hooks",
            Status::Ok,
            "a GC-hook patched JDK: memliner run adds -XX:+MemLinerLineUp under policy memliner",
            None,
        )
    } else {
        check(
            "gc hooks",
            Status::Warn,
            "a stock JDK: the agent reacts to GC faults but MemLiner's GC hooks are off",
            Some("scripts/build-jdk.sh builds target/jdk-memliner (JDK 17 with the hooks)"),
        )
    });
    if let Some(agent) = agent {
        checks.push(heap_discovery(java, agent));
    }
}

/// Starts java with the agent (in-process store, half the heap local) and reads how it found
/// the heap from the stats.
fn heap_discovery(java: &Path, agent: &Path) -> Check {
    let name = "heap discovery";
    let stats = std::env::temp_dir().join(format!("memliner-doctor-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&stats);
    let out = Command::new(java)
        .arg(format!(
            "-agentpath:{}=server=local,local=50%,stats={}",
            agent.display(),
            stats.display()
        ))
        .args(["-Xms64m", "-Xmx64m", "-version"])
        .output();
    let doc = std::fs::read_to_string(&stats)
        .ok()
        .and_then(|t| StatsDoc::parse(&t).ok());
    let _ = std::fs::remove_file(&stats);
    let heap = doc.as_ref().and_then(|d| d.heap.clone());
    match (out, heap) {
        (Ok(o), Some(h)) if o.status.success() => check(
            name,
            Status::Ok,
            format!(
                "{} heap of {} MiB at {} found by {}",
                h.collector,
                h.bytes >> 20,
                h.base,
                h.discovery
            ),
            None,
        ),
        (Ok(o), _) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let ours = err
                .lines()
                .find(|l| l.starts_with("memliner:"))
                .unwrap_or("the agent wrote no heap figures")
                .to_string();
            check(
                name,
                Status::Fail,
                ours,
                Some("run with -agentpath:...=log=debug to see what the agent tried"),
            )
        }
        (Err(e), _) => check(name, Status::Fail, format!("cannot run java: {e}"), None),
    }
}

/// Whether this host can hand out memory files (`unix://`, the embedded server's default).
fn memfile_check() -> Check {
    match swap_backend::memfile::available() {
        Ok(()) => check(
            "memory files",
            Status::Ok,
            "sealed memfd available: unix:// serves JVMs on this host one-sidedly (memliner run's embedded server uses it)",
            None,
        ),
        Err(why) => check(
            "memory files",
            Status::Warn,
            format!("{why}: memliner run's embedded server falls back to loopback TCP"),
            Some("allow memfd_create and F_ADD_SEALS (a seccomp profile or sandbox refuses them)"),
        ),
    }
}

fn rdma_checks(rdma: &Rdma) -> Vec<Check> {
    let libs: Vec<String> = rdma
        .libraries
        .iter()
        .map(|l| match (&l.found, &l.version) {
            (true, Some(v)) => format!("{} {v}", l.name),
            (true, None) => l.name.clone(),
            (false, _) => format!("{} missing", l.name),
        })
        .collect();
    let fabric = rdma
        .libraries
        .iter()
        .any(|l| l.found && l.name.starts_with("libfabric"));
    let mut out = vec![check(
        "rdma libraries",
        if fabric { Status::Ok } else { Status::Warn },
        libs.join(", "),
        (!fabric).then_some(
            "apt-get install libfabric1 (and rdma-core's libibverbs1 on hosts with an RDMA NIC)",
        ),
    )];
    if fabric {
        let mut rdm: Vec<String> = memliner_fabric_sys::load()
            .and_then(|l| {
                l.providers(
                    memliner_fabric_sys::FI_RMA,
                    memliner_fabric_sys::EpType::Rdm,
                )
            })
            .map(|p| p.into_iter().map(|p| p.provider).collect())
            .unwrap_or_default();
        rdm.sort();
        rdm.dedup();
        out.push(match memliner_fabric_sys::load().and_then(|l| {
            l.providers(
                memliner_fabric_sys::FI_RMA | memliner_fabric_sys::FI_MSG,
                memliner_fabric_sys::EpType::Msg,
            )
        }) {
            Ok(p) if !p.is_empty() => {
                let mut names: Vec<String> = p
                    .iter()
                    .map(|p| format!("{} ({})", p.provider, p.domain))
                    .collect();
                names.dedup();
                let chosen = swap_backend::fabric::provider_choice().unwrap_or_else(|| {
                    format!("FI_PROVIDER={}", std::env::var("FI_PROVIDER").unwrap_or_default())
                });
                check(
                    "libfabric providers",
                    Status::Ok,
                    format!(
                        "one-sided (FI_RMA, FI_EP_MSG): {}; fabric:// uses {chosen}",
                        names.join(", ")
                    ),
                    None,
                )
            }
            Ok(_) if std::env::var_os("FI_PROVIDER").is_some() && !rdm.is_empty() => check(
                "libfabric providers",
                Status::Ok,
                format!(
                    "none on connected endpoints (FI_EP_MSG) under FI_PROVIDER={}: fabric:// uses reliable-datagram endpoints ({})",
                    std::env::var("FI_PROVIDER").unwrap_or_default(),
                    rdm.join(", ")
                ),
                None,
            ),
            Ok(_) => check(
                "libfabric providers",
                Status::Warn,
                "none offers one-sided reads and writes on connected endpoints (FI_RMA, FI_EP_MSG)",
                Some("unset FI_PROVIDER, or install the provider's package"),
            ),
            Err(e) => check(
                "libfabric providers",
                Status::Warn,
                e,
                Some("libfabric 1.17 or later"),
            ),
        });
        // Reliable-datagram endpoints: shm on one host, efa on AWS, verbs through ofi_rxm.
        out.push(check(
            "libfabric RDM providers",
            Status::Ok,
            format!(
                "one-sided on reliable-datagram endpoints (FI_RMA, FI_EP_RDM): {}; fabric:// uses one where FI_PROVIDER names it ('verbs;ofi_rxm', shm) or the host's device is AWS's (efa); on one host unix:// needs no server CPU per read, shm a polling server thread",
                if rdm.is_empty() { "none".into() } else { rdm.join(", ") }
            ),
            None,
        ));
    }
    out.push(match &rdma.devices {
        None => check(
            "rdma devices",
            Status::Warn,
            "none: /sys/class/infiniband is absent (the kernel has no RDMA support loaded); use tcp://, or fabric:// over libfabric's tcp provider (for testing the one-sided path)",
            Some("on a host with an RDMA NIC: load its driver (mlx5_ib, efa, ...) and rdma-core"),
        ),
        Some(d) if d.is_empty() => check(
            "rdma devices",
            Status::Warn,
            "none: the kernel has RDMA support but no device",
            Some("load the NIC's RDMA driver, or soft-RoCE: rdma link add rxe0 type rxe netdev IFACE"),
        ),
        Some(d) => {
            let desc: Vec<String> = d
                .iter()
                .flat_map(|dev| {
                    dev.ports.iter().map(move |p| {
                        format!(
                            "{} port {}: {}, {}, {}, {}{}",
                            dev.name,
                            p.port,
                            p.state,
                            p.phys_state,
                            p.rate,
                            p.link_layer,
                            p.gids
                                .first()
                                .map(|g| format!(", gid {g}"))
                                .unwrap_or_default()
                        )
                    })
                })
                .collect();
            let active = d
                .iter()
                .flat_map(|dev| &dev.ports)
                .any(|p| p.state.contains("ACTIVE"));
            check(
                "rdma devices",
                if active { Status::Ok } else { Status::Warn },
                desc.join("; "),
                (!active).then_some("no port is ACTIVE: check the cable, the switch and the subnet manager (opensm) or the RoCE interface"),
            )
        }
    });
    out
}

fn server(url: &ServerUrl) -> Check {
    let name = format!("server {url}");
    let options = ClientOptions {
        token: std::env::var("MEMLINER_TOKEN").unwrap_or_default(),
        // One namespace per check: two checks of one server must not meet in one namespace
        // (the second would be refused as another client).
        namespace: {
            static CHECKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = CHECKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            format!("memliner-doctor/{}/{n}", std::process::id())
        },
        connections: 1,
        // A server that accepts and never answers must not hang the check.
        deadline: Some(std::time::Duration::from_secs(5)),
    };
    // One page written and read back where the client reads and writes one-sidedly: the data
    // path, not just the control port. The server's figures first: what the other clients
    // hold, not this check's slots.
    let reached = swap_backend::connect(url, options).and_then(|c| {
        let stats = c.server_stats()?;
        let data_path = match c.one_sided() {
            Some(how) => format!(
                ", one-sided write and read of a page {how}: {}",
                round_trip(c.store())?
            ),
            None => String::new(),
        };
        Ok((stats, data_path))
    });
    match reached {
        Ok((st, data_path)) => check(
            &name,
            if data_path.contains("OTHER") { Status::Fail } else { Status::Ok },
            format!(
                "reachable, protocol version {}, {} MiB capacity, {} MiB stored for {} clients{data_path}",
                swap_backend::protocol::VERSION,
                (st.capacity_pages * PAGE_SIZE as u64) >> 20,
                (st.pages_stored * PAGE_SIZE as u64) >> 20,
                st.namespaces.saturating_sub(1),
            ),
            None,
        ),
        Err(e) => check(
            &name,
            Status::Fail,
            e.to_string(),
            Some(match url.scheme {
                Scheme::Tcp => "start `memliner server --listen URL` on that host (a listener other than loopback: --listen tcp://0.0.0.0:PORT), check the port and the firewall, and MEMLINER_TOKEN if the server wants a token",
                Scheme::Unix => "start `memliner server --listen unix:///PATH` on this host as this user (only the socket's owner may connect), and set MEMLINER_TOKEN if the server wants a token",
                Scheme::Fabric => "start `memliner server --listen fabric://HOST:PORT` on that host (HOST: the address of its RDMA interface), check that both hosts' libfabric offer the same provider (`memliner doctor` on each; FI_PROVIDER picks one), and the firewall for the control port and the data port the server announces",
            }),
        ),
    }
}

/// One page written, read back and freed: "ok", or what went wrong with the bytes.
fn round_trip(s: &dyn PageStore) -> Result<&'static str, swap_backend::StoreError> {
    let page: Vec<u8> = (0..PAGE_SIZE).map(|i| (i % 253) as u8).collect();
    s.write_pages(&[0], &page)?;
    let mut back = vec![0u8; PAGE_SIZE];
    s.read_pages(&[0], &mut back)?;
    s.free_pages(&[0])?;
    Ok(if back == page {
        "ok"
    } else {
        "READ BACK OTHER BYTES"
    })
}
