//! `memliner stats PID`: a running JVM's figures, without stopping it.
//!
//! The agent writes its stats document when the JVM is sent SIGQUIT (JVMTI's DataDumpRequest;
//! HotSpot prints its thread dump on the JVM's stdout as well, as for `kill -3`): to its
//! `stats=` file, else to its temporary directory (`options::dump_path`, the one definition
//! both sides use). This side finds that path from the process's own command line and
//! environment, signals, and reads the document once it has been replaced.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memliner_contracts::options;
use memliner_contracts::stats::StatsDoc;
use memliner_contracts::targets::TargetGroup;

use crate::locate::AGENT_FILE;

/// Why a running process could not be asked for its figures. The Display is the one line
/// `memliner stats` prints; [`LiveError::exit_code`] tells scripts (and tests) which case it
/// was without reading the text.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("no process {0}")]
    NoProcess(u32),
    /// A /proc file or the pidfd could not be had (permissions, a process gone meanwhile).
    #[error("{0}")]
    Unreadable(String),
    /// The process runs no agent; `jvms` are its children that do (`memliner run`'s own pid,
    /// or a launcher's, is an easy mistake).
    #[error(
        "process {pid} ({name}) does not run the memliner agent{}",
        children_that_do(jvms)
    )]
    NoAgent {
        pid: u32,
        name: String,
        jvms: Vec<u32>,
    },
    /// The agent is loaded but pages nothing yet (or never will): ask again.
    #[error(
        "JVM {0} does not page its heap (still starting, or running without far memory: \
         policy=off, or fallback=local after an error): ask again once it pages"
    )]
    NotPaging(u32),
    #[error(
        "JVM {0} was started with -Xrs (it does not handle SIGQUIT): it cannot be asked for \
         its stats; they are written at exit with stats=PATH"
    )]
    IgnoresSigquit(u32),
    #[error("process {pid}'s agent options: {error}")]
    BadOptions {
        pid: u32,
        error: memliner_contracts::options::OptionError,
    },
    #[error("cannot signal JVM {pid}: {error}")]
    Signal { pid: u32, error: std::io::Error },
    #[error(
        "JVM {pid} wrote no stats to {} within {} s of SIGQUIT (a safepoint it cannot reach, \
         or a directory it cannot write)",
        path.display(),
        timeout.as_secs()
    )]
    NoAnswer {
        pid: u32,
        path: PathBuf,
        timeout: Duration,
    },
    #[error("{}: {message}", path.display())]
    BadDocument { path: PathBuf, message: String },
    /// The agent serves no `/metrics` (no `metrics=`), or has not written its target file.
    #[error(
        "JVM {pid} serves no /metrics{}: start it with metrics=0 (any free port; or \
         `memliner run --metrics 0`)",
        match path { Some(p) => format!(" (no target file {})", p.display()), None => String::new() }
    )]
    NoMetrics { pid: u32, path: Option<PathBuf> },
}

impl LiveError {
    /// `memliner stats PID`'s exit status for this error: [`EXIT_NOT_PAGING`] for a JVM that
    /// may page later, [`EXIT_NO_AGENT`] for a process without the agent, else 2.
    pub fn exit_code(&self) -> u8 {
        match self {
            LiveError::NotPaging(_) => EXIT_NOT_PAGING,
            LiveError::NoAgent { .. } => EXIT_NO_AGENT,
            _ => 2,
        }
    }
}

/// Exit status of `memliner stats PID` when the JVM does not page (yet): try again
/// (sysexits' EX_TEMPFAIL).
pub const EXIT_NOT_PAGING: u8 = 75;
/// Exit status of `memliner stats PID` when the process does not run the agent (perhaps not
/// yet: a JVM just started loads it within its first milliseconds).
pub const EXIT_NO_AGENT: u8 = 3;

fn children_that_do(jvms: &[u32]) -> String {
    let list: Vec<String> = jvms.iter().map(u32::to_string).collect();
    match list.len() {
        0 => String::new(),
        1 => format!("; its child {} does", list[0]),
        _ => format!("; its children {} do", list.join(", ")),
    }
}

/// How long a JVM may take to write its document after SIGQUIT (a safepoint first: a long GC
/// pause or a thread stuck in a fault delays it).
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A running process: the /proc files this module reads.
struct Process {
    pid: u32,
    proc: PathBuf,
}

impl Process {
    fn open(pid: u32) -> Result<Process, LiveError> {
        let proc = PathBuf::from(format!("/proc/{pid}"));
        if !proc.exists() {
            return Err(LiveError::NoProcess(pid));
        }
        Ok(Process { pid, proc })
    }

    fn read(&self, file: &str) -> Result<Vec<u8>, LiveError> {
        std::fs::read(self.proc.join(file)).map_err(|e| {
            LiveError::Unreadable(format!(
                "cannot read /proc/{}/{file}: {e}{}",
                self.pid,
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    " (run as the JVM's user, or root)"
                } else {
                    ""
                }
            ))
        })
    }

    fn name(&self) -> String {
        self.read("comm")
            .map(|c| String::from_utf8_lossy(&c).trim().to_string())
            .unwrap_or_default()
    }

    fn runs_agent(&self) -> Result<bool, LiveError> {
        Ok(String::from_utf8_lossy(&self.read("maps")?).contains(AGENT_FILE))
    }

    /// The pids of the process's children (any thread's).
    fn children(&self) -> Vec<u32> {
        let Ok(tasks) = std::fs::read_dir(self.proc.join("task")) else {
            return Vec::new();
        };
        tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| {
                c.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect()
    }

    /// NUL-separated strings of a /proc file (cmdline, environ).
    fn strings(&self, file: &str) -> Result<Vec<String>, LiveError> {
        Ok(self
            .read(file)?
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect())
    }

    /// Whether the process has a userfaultfd open: the agent opens one when it starts paging
    /// the heap, at VMInit, which is also when JVMTI begins to deliver DataDumpRequest (a
    /// SIGQUIT before then gets HotSpot's thread dump but no stats).
    fn has_userfaultfd(&self) -> Result<bool, LiveError> {
        let fds = std::fs::read_dir(self.proc.join("fd")).map_err(|e| {
            LiveError::Unreadable(format!("cannot read /proc/{}/fd: {e}", self.pid))
        })?;
        Ok(fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| target.as_os_str() == "anon_inode:[userfaultfd]")
        }))
    }

    /// Whether the process has a handler for `sig` (a JVM started with -Xrs has none for
    /// SIGQUIT, and one still starting may not have it yet: the signal would kill either).
    fn catches(&self, sig: libc::c_int) -> Result<bool, LiveError> {
        let status = String::from_utf8_lossy(&self.read("status")?).into_owned();
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .ok_or_else(|| {
                LiveError::Unreadable(format!("/proc/{}/status has no SigCgt line", self.pid))
            })?;
        Ok(mask & (1 << (sig - 1)) != 0)
    }
}

/// A file descriptor that refers to process `pid` for as long as it is open (Linux 5.3).
#[allow(unsafe_code)]
fn pidfd_open(pid: u32) -> Result<OwnedFd, LiveError> {
    // SAFETY: pidfd_open takes a pid and flags and touches no memory of ours; it returns a new
    // descriptor, which the OwnedFd then owns, or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ESRCH) => LiveError::NoProcess(pid),
            _ => LiveError::Unreadable(format!("cannot open process {pid}: {e}")),
        });
    }
    // SAFETY: fd was just returned by the kernel and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `sig` to the process `pidfd` refers to.
#[allow(unsafe_code)]
fn pidfd_send_signal(pidfd: &OwnedFd, sig: libc::c_int) -> std::io::Result<()> {
    // SAFETY: the descriptor is open for the call's duration; a null siginfo asks for the
    // kill(2)-like default, and flags must be 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A variable of an environment read from /proc/PID/environ.
fn env_var(environ: &[String], key: &str) -> Option<String> {
    environ
        .iter()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
}

/// The agent's option string of a running JVM: `MEMLINER_OPTIONS` from its environment, then
/// what follows `=` in the `-agentpath:` argument that loads the agent, on its command line or
/// in `JAVA_TOOL_OPTIONS` / `JDK_JAVA_OPTIONS`.
fn agent_options(cmdline: &[String], env: impl Fn(&str) -> Option<String>) -> (String, String) {
    let from_env = env("MEMLINER_OPTIONS").unwrap_or_default();
    let tool_options: Vec<String> = ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"]
        .iter()
        .filter_map(|k| env(k))
        .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    let agent = cmdline
        .iter()
        .chain(&tool_options)
        .filter_map(|a| a.strip_prefix("-agentpath:"))
        .find(|a| a.split('=').next().is_some_and(|p| p.ends_with(AGENT_FILE)))
        .and_then(|a| a.split_once('='))
        .map_or(String::new(), |(_, o)| o.to_string());
    (from_env, agent)
}

/// The agent's options of a running JVM, and its `TMPDIR`.
fn options_of(p: &Process) -> Result<(options::Options, Option<String>), LiveError> {
    let cmdline = p.strings("cmdline")?;
    let environ = p.strings("environ").unwrap_or_default();
    let (env_opts, agent_opts) = agent_options(&cmdline, |k| env_var(&environ, k));
    let o = options::parse(&env_opts, &agent_opts)
        .map_err(|error| LiveError::BadOptions { pid: p.pid, error })?;
    Ok((o, env_var(&environ, "TMPDIR")))
}

/// `path` as the JVM means it: relative to its working directory.
fn in_cwd(p: &Process, path: String) -> PathBuf {
    let path = PathBuf::from(path);
    if path.is_relative() {
        p.proc.join("cwd").join(path)
    } else {
        path
    }
}

/// Where JVM `pid` writes its stats document when asked for it.
fn dump_path(p: &Process) -> Result<PathBuf, LiveError> {
    let (o, tmpdir) = options_of(p)?;
    Ok(in_cwd(
        p,
        options::dump_path(
            o.stats.as_deref(),
            p.pid,
            &memliner_contracts::host_name(),
            tmpdir.as_deref(),
        ),
    ))
}

/// The `HOST:PORT` JVM `pid` serves `/metrics` at, from the target file its agent wrote
/// (`metrics_file=`, else its temporary directory).
pub fn metrics_target(pid: u32) -> Result<String, LiveError> {
    let p = Process::open(pid)?;
    if !p.runs_agent()? {
        return Err(no_agent(&p));
    }
    let (o, tmpdir) = options_of(&p)?;
    if o.metrics.is_none() {
        return Err(LiveError::NoMetrics { pid, path: None });
    }
    let path = in_cwd(
        &p,
        options::metrics_path(
            o.metrics_file.as_deref(),
            pid,
            &memliner_contracts::host_name(),
            tmpdir.as_deref(),
        ),
    );
    let missing = || LiveError::NoMetrics {
        pid,
        path: Some(path.clone()),
    };
    TargetGroup::read(&path)
        .and_then(|g| g.addr().map(str::to_string))
        .ok_or_else(missing)
}

/// The pids of the processes on this host that run the agent (those this user may read).
pub fn paged_jvms() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&pid| {
            Process::open(pid)
                .and_then(|p| p.runs_agent())
                .unwrap_or(false)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Whether process `pid` still exists.
pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// A file's identity: the agent replaces the document (rename), so a new one is a new inode.
fn identity(path: &Path) -> Option<(u64, i64, i64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.mtime(), m.mtime_nsec()))
}

/// The refusal for a process without the agent, naming its children that run it (`memliner
/// run`'s own pid, or a launcher's, is an easy mistake).
fn no_agent(p: &Process) -> LiveError {
    let jvms = p
        .children()
        .into_iter()
        .filter(|c| {
            Process::open(*c)
                .and_then(|c| c.runs_agent())
                .unwrap_or(false)
        })
        .collect();
    LiveError::NoAgent {
        pid: p.pid,
        name: p.name(),
        jvms,
    }
}

/// Asks JVM `pid` for its stats document and returns it with where it was written.
pub fn request(pid: u32, timeout: Duration) -> Result<(PathBuf, StatsDoc), LiveError> {
    let p = Process::open(pid)?;
    // The process is held by a pidfd before it is checked: if it exits and its pid is reused
    // meanwhile, the checks may read the newcomer, but the signal goes to the process held,
    // which no longer exists (ESRCH), never to the newcomer.
    let pidfd = pidfd_open(pid)?;
    if !p.runs_agent()? {
        return Err(no_agent(&p));
    }
    if !p.has_userfaultfd()? {
        return Err(LiveError::NotPaging(pid));
    }
    if !p.catches(libc::SIGQUIT)? {
        return Err(LiveError::IgnoresSigquit(pid));
    }
    let path = dump_path(&p)?;
    let before = identity(&path);
    pidfd_send_signal(&pidfd, libc::SIGQUIT).map_err(|error| LiveError::Signal { pid, error })?;
    let deadline = Instant::now() + timeout;
    loop {
        let now = identity(&path);
        if now.is_some() && now != before {
            let bad = |message: String| LiveError::BadDocument {
                path: path.clone(),
                message,
            };
            let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
            let doc = StatsDoc::parse(&text).map_err(bad)?;
            return Ok((path, doc));
        }
        if Instant::now() > deadline {
            return Err(LiveError::NoAnswer { pid, path, timeout });
        }
        // The JVM writes at its next safepoint: check again shortly, without spinning.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An argument of `memliner stats`: a path (file or directory), or a running JVM's pid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Path(PathBuf),
    Pid(u32),
}

impl Source {
    /// A number that names no file is a pid.
    pub fn parse(arg: &str) -> Source {
        match arg.parse::<u32>() {
            Ok(pid) if !Path::new(arg).exists() => Source::Pid(pid),
            _ => Source::Path(PathBuf::from(arg)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_string_is_found_on_the_command_line_or_in_java_tool_options() {
        let cmd = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let none = |_: &str| None;
        let line = cmd(&[
            "java",
            "-agentpath:/opt/other.so=stats=/no",
            "-agentpath:/opt/m/libmemliner_agent.so=local=25%,stats=/s/%p.json",
            "-jar",
            "app.jar",
        ]);
        assert_eq!(
            agent_options(&line, none),
            (String::new(), "local=25%,stats=/s/%p.json".to_string())
        );
        let env = |k: &str| match k {
            "JAVA_TOOL_OPTIONS" => {
                Some("-Xss1m -agentpath:./libmemliner_agent.so=stats=/j/ -Dx=y".to_string())
            }
            "MEMLINER_OPTIONS" => Some("log=debug".to_string()),
            _ => None,
        };
        assert_eq!(
            agent_options(&cmd(&["java", "Main"]), env),
            ("log=debug".to_string(), "stats=/j/".to_string())
        );
        // Loaded without options.
        let bare = cmd(&["java", "-agentpath:/a/libmemliner_agent.so", "Main"]);
        assert_eq!(agent_options(&bare, none), (String::new(), String::new()));
    }

    #[test]
    fn a_number_is_a_pid_unless_such_a_file_exists() {
        assert_eq!(Source::parse("12345"), Source::Pid(12345));
        assert_eq!(Source::parse("/tmp"), Source::Path("/tmp".into()));
        assert_eq!(Source::parse("x.json"), Source::Path("x.json".into()));
    }

    #[test]
    fn processes_without_the_agent_or_at_all_are_refused_by_name() {
        let me = std::process::id();
        let e = request(me, TIMEOUT).unwrap_err();
        assert!(
            matches!(&e, LiveError::NoAgent { pid, .. } if *pid == me),
            "{e}"
        );
        assert_eq!(e.exit_code(), EXIT_NO_AGENT);
        assert!(e.to_string().starts_with(&format!("process {me} (")), "{e}");
        let e = request(u32::MAX / 2, TIMEOUT).unwrap_err();
        assert!(
            matches!(e, LiveError::NoProcess(p) if p == u32::MAX / 2),
            "{e}"
        );
        assert_eq!(e.to_string(), format!("no process {}", u32::MAX / 2));
        assert_eq!(e.exit_code(), 2);
    }
}
