//! `memliner top`: every paged JVM on this host, and the memory servers they use, refreshed
//! live in the terminal: per JVM its budget, resident, faults/s by thread class, remote
//! traffic, fault latency and a short history; per server the JVMs on it, their traffic and,
//! given its metrics address, its capacity and what it holds.
//!
//! JVMs are found as `memliner stats PID` finds them (the agent in their mappings) and read
//! through their `/metrics` (`metrics=`, located by the target file the agent writes). The
//! terminal is restored on every way out: `q`, Ctrl-C, SIGTERM/SIGHUP, an error, a panic.

use memliner_contracts::metrics::{jvm, server};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Sparkline, Table, TableState};
use ratatui::Frame;

use crate::live;
use crate::scrape::{self, Page};

const MIB: f64 = (1 << 20) as f64;
/// Intervals of history kept per JVM.
const HISTORY: usize = 120;

/// What the JVM list is sorted by (`s` cycles).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    Pid,
    Faults,
    Resident,
    Traffic,
}

impl SortBy {
    fn next(self) -> SortBy {
        match self {
            SortBy::Pid => SortBy::Faults,
            SortBy::Faults => SortBy::Resident,
            SortBy::Resident => SortBy::Traffic,
            SortBy::Traffic => SortBy::Pid,
        }
    }

    fn name(self) -> &'static str {
        match self {
            SortBy::Pid => "pid",
            SortBy::Faults => "remote faults/s",
            SortBy::Resident => "resident",
            SortBy::Traffic => "remote MiB/s",
        }
    }
}

/// One JVM's figures over the last interval.
#[derive(Clone, Debug, Default)]
pub struct Rates {
    pub budget_mib: f64,
    pub resident_mib: f64,
    /// Remote faults/s by thread class: application, GC (both kinds), the rest.
    pub app: f64,
    pub gc: f64,
    pub other: f64,
    pub in_mib_s: f64,
    pub out_mib_s: f64,
    pub p99_us: Option<f64>,
    pub store: String,
    pub collector: String,
}

impl Rates {
    fn remote(&self) -> f64 {
        self.app + self.gc + self.other
    }
}

/// The figures between two pages of one JVM, `secs` apart.
pub fn rates(before: &Page, now: &Page, secs: f64) -> Rates {
    let per_s = |name: &str, with: &[(&str, &str)]| {
        (now.sum(name, with) - before.sum(name, with)).max(0.0) / secs.max(1e-9)
    };
    let faults = |class: &str| per_s(jvm::FAULTS_TOTAL, &[("kind", "remote"), ("class", class)]);
    let all = per_s(jvm::FAULTS_TOTAL, &[("kind", "remote")]);
    let app = faults("application");
    let gc = faults("gc") + faults("gc-concurrent");
    let lat = |p: &Page| p.buckets(jvm::FAULT_LATENCY_SECONDS, &[("source", "remote")]);
    let d = scrape::bucket_delta(&lat(now), &lat(before));
    let label = |name: &str, key: &str| {
        now.find(name, &[])
            .next()
            .and_then(|s| s.label(key))
            .unwrap_or("")
            .to_string()
    };
    Rates {
        budget_mib: now.sum(jvm::BUDGET_BYTES, &[]) / MIB,
        resident_mib: now.sum(jvm::RESIDENT_BYTES, &[]) / MIB,
        app,
        gc,
        other: (all - app - gc).max(0.0),
        in_mib_s: per_s(jvm::REMOTE_READ_BYTES_TOTAL, &[]) / MIB,
        out_mib_s: per_s(jvm::REMOTE_WRITTEN_BYTES_TOTAL, &[]) / MIB,
        p99_us: scrape::quantile(0.99, &d).map(|s| s * 1e6),
        store: label(jvm::INFO, "store"),
        collector: label(jvm::INFO, "collector"),
    }
}

/// One JVM as the view knows it.
#[derive(Debug)]
struct Jvm {
    pid: u32,
    name: String,
    /// Its metrics address, or why there is none.
    addr: Result<String, String>,
    last: Option<(Instant, Page)>,
    rates: Option<Rates>,
    /// Remote faults/s per interval, newest last.
    history: VecDeque<u64>,
}

/// The program a JVM runs: its main class or jar, from its command line.
fn program(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-cp" | "-classpath" | "--class-path" => {
                it.next();
            }
            "-jar" => return it.next().map_or(String::new(), |j| base_name(j)),
            a if a.starts_with('-') || a.is_empty() => {}
            a => return base_name(a),
        }
    }
    args.first().cloned().unwrap_or_default()
}

fn base_name(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// Everything on screen.
#[derive(Debug)]
pub struct View {
    jvms: BTreeMap<u32, Jvm>,
    sort: SortBy,
    table: TableState,
    detail: bool,
    server_metrics: Vec<String>,
    servers: Vec<(String, Result<Page, String>)>,
    every: Duration,
}

impl View {
    fn new(every: Duration, server_metrics: &[String]) -> View {
        View {
            jvms: BTreeMap::new(),
            sort: SortBy::Pid,
            table: TableState::default().with_selected(Some(0)),
            detail: false,
            server_metrics: server_metrics.to_vec(),
            servers: Vec::new(),
            every,
        }
    }

    /// Finds JVMs (new ones, gone ones) and reads each once.
    fn refresh(&mut self) {
        let pids = live::paged_jvms();
        self.jvms.retain(|pid, _| pids.contains(pid));
        for pid in pids {
            let jvm = self.jvms.entry(pid).or_insert_with(|| Jvm {
                pid,
                name: program(pid),
                addr: Err(String::new()),
                last: None,
                rates: None,
                history: VecDeque::new(),
            });
            if jvm.addr.is_err() {
                // The target file appears once the agent serves: look again each time.
                jvm.addr = live::metrics_target(pid).map_err(|e| match e {
                    live::LiveError::NoMetrics { .. } => {
                        "no /metrics: start it with metrics=0".into()
                    }
                    e => e.to_string(),
                });
            }
            let Ok(addr) = &jvm.addr else { continue };
            match scrape::get(addr, Duration::from_secs(2)) {
                Ok(page) => {
                    let now = Instant::now();
                    if let Some((at, before)) = &jvm.last {
                        let r = rates(before, &page, now.duration_since(*at).as_secs_f64());
                        jvm.history.push_back(r.remote().round() as u64);
                        if jvm.history.len() > HISTORY {
                            jvm.history.pop_front();
                        }
                        jvm.rates = Some(r);
                    }
                    jvm.last = Some((now, page));
                }
                Err(e) => jvm.addr = Err(e.to_string()),
            }
        }
        self.servers = self
            .server_metrics
            .iter()
            .map(|a| {
                (
                    a.clone(),
                    scrape::get(a, Duration::from_secs(2)).map_err(|e| e.to_string()),
                )
            })
            .collect();
    }

    /// The JVMs in display order.
    fn ordered(&self) -> Vec<&Jvm> {
        let mut v: Vec<&Jvm> = self.jvms.values().collect();
        let key = |j: &Jvm| -> f64 {
            let r = j.rates.as_ref();
            match self.sort {
                SortBy::Pid => 0.0,
                SortBy::Faults => r.map_or(0.0, Rates::remote),
                SortBy::Resident => r.map_or(0.0, |r| r.resident_mib),
                SortBy::Traffic => r.map_or(0.0, |r| r.in_mib_s + r.out_mib_s),
            }
        };
        // Largest first; ties (and `pid`) by pid.
        v.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.pid.cmp(&b.pid)));
        v
    }

    fn key(&mut self, code: KeyCode) -> bool {
        let n = self.jvms.len();
        match code {
            KeyCode::Char('q') | KeyCode::Esc if !self.detail => return false,
            KeyCode::Char('q') | KeyCode::Esc | KeyCode::Enter if self.detail => {
                self.detail = false
            }
            KeyCode::Enter if n > 0 => self.detail = true,
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Down | KeyCode::Char('j') if n > 0 => {
                let i = self.table.selected().unwrap_or(0);
                self.table.select(Some((i + 1).min(n - 1)));
            }
            KeyCode::Up | KeyCode::Char('k') => {
                let i = self.table.selected().unwrap_or(0);
                self.table.select(Some(i.saturating_sub(1)));
            }
            _ => {}
        }
        true
    }

    fn draw(&mut self, f: &mut Frame) {
        let area = f.area();
        let [title, jvms, servers] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(6),
            Constraint::Length((self.server_rows().len() as u16 + 3).min(12)),
        ])
        .areas(area);
        f.render_widget(
            Paragraph::new(format!(
                "memliner top: {} paged JVMs, every {:.1}s, sorted by {} | s: sort  up/down: pick  enter: detail  q: quit",
                self.jvms.len(),
                self.every.as_secs_f64(),
                self.sort.name()
            )),
            title,
        );
        if self.detail {
            self.draw_detail(f, jvms);
        } else {
            self.draw_jvms(f, jvms);
        }
        let header = Row::new([
            "server",
            "JVMs",
            "in MiB/s",
            "out MiB/s",
            "capacity MiB",
            "held MiB",
            "namespaces",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD));
        let rows: Vec<Row> = self.server_rows().into_iter().map(Row::new).collect();
        f.render_widget(
            Table::new(
                rows,
                [
                    Constraint::Min(24),
                    Constraint::Length(5),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(12),
                    Constraint::Length(9),
                    Constraint::Length(10),
                ],
            )
            .header(header)
            .block(Block::new().borders(Borders::TOP).title("memory servers")),
            servers,
        );
    }

    fn draw_jvms(&mut self, f: &mut Frame, area: ratatui::layout::Rect) {
        let header = Row::new([
            "pid",
            "program",
            "budget MiB",
            "resident MiB",
            "app f/s",
            "gc f/s",
            "other f/s",
            "in MiB/s",
            "out MiB/s",
            "p99 us",
            "gc%",
            "remote faults/s",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD));
        let rows: Vec<Row> = self
            .ordered()
            .into_iter()
            .map(|j| {
                let mut cells = vec![j.pid.to_string(), j.name.clone()];
                match (&j.rates, &j.addr) {
                    (Some(r), Ok(_)) => {
                        let total = r.remote();
                        cells.extend([
                            format!("{:.0}", r.budget_mib),
                            format!("{:.0}", r.resident_mib),
                            format!("{:.0}", r.app),
                            format!("{:.0}", r.gc),
                            format!("{:.0}", r.other),
                            format!("{:.2}", r.in_mib_s),
                            format!("{:.2}", r.out_mib_s),
                            r.p99_us.map_or("-".into(), |p| format!("{p:.0}")),
                            if total > 0.0 {
                                format!("{:.0}", 100.0 * r.gc / total)
                            } else {
                                "-".into()
                            },
                            spark(&j.history, 20),
                        ]);
                    }
                    (_, Err(why)) if !why.is_empty() => cells.push(why.clone()),
                    _ => cells.push("reading...".into()),
                }
                Row::new(cells)
            })
            .collect();
        let widths = [
            Constraint::Length(8),
            Constraint::Min(12),
            Constraint::Length(10),
            Constraint::Length(12),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(7),
            Constraint::Length(4),
            Constraint::Length(20),
        ];
        f.render_stateful_widget(
            Table::new(rows, widths)
                .header(header)
                .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
                .block(Block::new().borders(Borders::TOP).title("paged JVMs")),
            area,
            &mut self.table,
        );
    }

    fn draw_detail(&self, f: &mut Frame, area: ratatui::layout::Rect) {
        let ordered = self.ordered();
        let Some(j) = self
            .table
            .selected()
            .and_then(|i| ordered.get(i.min(ordered.len().saturating_sub(1))))
        else {
            return;
        };
        let [text, chart] =
            Layout::vertical([Constraint::Length(10), Constraint::Min(3)]).areas(area);
        let mut lines = vec![Line::from(format!("JVM {} ({})", j.pid, j.name))];
        match (&j.rates, &j.addr) {
            (Some(r), Ok(addr)) => {
                lines.push(Line::from(format!(
                    "metrics http://{addr}/metrics  collector {}  store {}",
                    r.collector, r.store
                )));
                lines.push(Line::from(format!(
                    "budget {:.0} MiB, resident {:.0} MiB",
                    r.budget_mib, r.resident_mib
                )));
                lines.push(Line::from(format!(
                    "remote faults/s: application {:.0}, GC {:.0}, other {:.0}",
                    r.app, r.gc, r.other
                )));
                lines.push(Line::from(format!(
                    "remote traffic: in {:.2} MiB/s, out {:.2} MiB/s; p99 remote fault {}",
                    r.in_mib_s,
                    r.out_mib_s,
                    r.p99_us.map_or("-".into(), |p| format!("{p:.0} us"))
                )));
                if let Some((_, page)) = &j.last {
                    let ev = |s| page.sum(jvm::EVICTIONS_TOTAL, &[("state", s)]);
                    lines.push(Line::from(format!(
                        "evictions: clean {:.0}, dirty {:.0}, zero {:.0}; prefetched {:.0} pages, wasted {:.0}",
                        ev("clean"),
                        ev("dirty"),
                        ev("zero"),
                        page.sum(jvm::PREFETCH_PAGES_TOTAL, &[]),
                        page.sum(jvm::PREFETCH_WASTED_PAGES_TOTAL, &[]),
                    )));
                }
            }
            (_, Err(why)) => lines.push(Line::from(why.clone())),
            _ => lines.push(Line::from("reading...")),
        }
        lines.push(Line::from("enter or q: back to the list"));
        f.render_widget(
            Paragraph::new(lines).block(Block::new().borders(Borders::TOP).title("JVM")),
            text,
        );
        let data: Vec<u64> = j.history.iter().copied().collect();
        f.render_widget(
            Sparkline::default()
                .block(Block::new().borders(Borders::TOP).title("remote faults/s"))
                .data(&data),
            chart,
        );
    }

    /// One row per memory server: those the JVMs use, and those given by metrics address.
    fn server_rows(&self) -> Vec<Vec<String>> {
        let mut by: BTreeMap<String, (usize, f64, f64)> = BTreeMap::new();
        for j in self.jvms.values() {
            let Some(r) = &j.rates else { continue };
            let servers: Vec<&str> = r.store.split('+').filter(|s| s.contains("://")).collect();
            for s in &servers {
                let e = by.entry(s.to_string()).or_default();
                e.0 += 1;
                // Replicated stores: each server's share as the JVM counts it is not kept
                // here; traffic is the JVM's, split evenly.
                e.1 += r.in_mib_s / servers.len() as f64;
                e.2 += r.out_mib_s / servers.len() as f64;
            }
        }
        let mut rows: Vec<Vec<String>> = by
            .into_iter()
            .map(|(s, (n, i, o))| {
                vec![
                    s,
                    n.to_string(),
                    format!("{i:.2}"),
                    format!("{o:.2}"),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]
            })
            .collect();
        for (addr, page) in &self.servers {
            rows.push(match page {
                Ok(p) => vec![
                    format!("metrics {addr}"),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    format!("{:.0}", p.sum(server::CAPACITY_BYTES, &[]) / MIB),
                    format!("{:.0}", p.sum(server::USED_BYTES, &[]) / MIB),
                    format!("{:.0}", p.sum(server::NAMESPACES, &[])),
                ],
                Err(e) => vec![format!("metrics {addr}: {e}")],
            });
        }
        rows
    }
}

/// `history`'s last `width` values as block characters, scaled to their maximum.
pub fn spark(history: &VecDeque<u64>, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let tail: Vec<u64> = history.iter().rev().take(width).rev().copied().collect();
    let max = tail.iter().copied().max().unwrap_or(0).max(1);
    tail.iter().map(|&v| BARS[(v * 7 / max) as usize]).collect()
}

static STOP: AtomicBool = AtomicBool::new(false);

#[allow(unsafe_code)]
extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Restores the terminal when dropped: whatever way `run` leaves.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Runs the view until `q`, Ctrl-C, SIGTERM or SIGHUP.
#[allow(unsafe_code)]
pub fn run(every: Duration, server_metrics: &[String]) -> Result<(), String> {
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let mut view = View::new(every, server_metrics);
    view.refresh();
    // `init` enters the alternate screen and raw mode, and restores both before a panic's
    // message is printed; `Restore` covers every other way out.
    let mut terminal = ratatui::init();
    let _restore = Restore;
    // Keys are read on a thread of their own: crossterm's reader never returns once the
    // terminal is gone (a read of 0 bytes is retried forever), and this loop must still see
    // that, and SIGTERM, within 200 ms. The process ends with this function.
    let (keys, pressed) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("memliner-top-keys".into())
        .spawn(move || {
            while let Ok(e) = event::read() {
                if keys.send(e).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| format!("cannot start the key reader: {e}"))?;
    let mut next = Instant::now() + every;
    loop {
        use std::io::IsTerminal;
        if STOP.load(Ordering::SeqCst) || !std::io::stdout().is_terminal() {
            return Ok(()); // SIGTERM, SIGHUP, or the terminal hung up
        }
        terminal
            .draw(|f| view.draw(f))
            .map_err(|e| format!("cannot draw: {e}"))?;
        let wait = next
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(200));
        match pressed.recv_timeout(wait) {
            Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => {
                let ctrl_c =
                    k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                if ctrl_c || !view.key(k.code) {
                    return Ok(());
                }
            }
            Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err("cannot read the terminal".into());
            }
        }
        if Instant::now() >= next {
            view.refresh();
            next = Instant::now() + every;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_split_remote_faults_by_class_and_sparklines_scale() {
        let page = |app: f64, gc: f64, read: f64| {
            scrape::parse(&format!(
                "memliner_jvm_info{{store=\"tcp://h:1\",collector=\"G1\"}} 1\n\
                 memliner_jvm_faults_total{{class=\"application\",kind=\"remote\"}} {app}\n\
                 memliner_jvm_faults_total{{class=\"gc-concurrent\",kind=\"remote\"}} {gc}\n\
                 memliner_jvm_faults_total{{class=\"jit\",kind=\"remote\"}} 4\n\
                 memliner_jvm_faults_total{{class=\"application\",kind=\"zero\"}} 1000\n\
                 memliner_jvm_remote_read_bytes_total {read}\n\
                 memliner_jvm_budget_bytes 268435456\nmemliner_jvm_resident_bytes 134217728\n"
            ))
            .unwrap()
        };
        let r = rates(&page(10.0, 0.0, 0.0), &page(30.0, 10.0, 4.0 * MIB), 2.0);
        assert_eq!((r.app, r.gc, r.other), (10.0, 5.0, 0.0));
        assert_eq!(
            (r.budget_mib, r.resident_mib, r.in_mib_s),
            (256.0, 128.0, 2.0)
        );
        assert_eq!(
            (r.store.as_str(), r.collector.as_str()),
            ("tcp://h:1", "G1")
        );
        assert_eq!(r.p99_us, None);
        let h: VecDeque<u64> = [0, 7, 14, 3].into();
        assert_eq!(spark(&h, 3), "▄█▂");
        assert_eq!(spark(&VecDeque::new(), 3), "");
    }

    #[test]
    fn sort_cycles_through_every_key() {
        let mut s = SortBy::Pid;
        for _ in 0..4 {
            s = s.next();
        }
        assert_eq!(s, SortBy::Pid);
    }
}
