//! `memliner stats PATH|PID...`: the stats files of a job's JVMs (a Spark application's
//! executors, written with `stats=DIR/` or `stats=...%p...`), and running JVMs' figures asked
//! for on the spot, merged into one table: each JVM and the total.

use std::path::{Path, PathBuf};

use memliner_contracts::stats::StatsDoc;

use crate::live::{self, Source};
use swap_backend::units::format_size;
use swap_backend::PAGE_SIZE;

/// One JVM's document and where it came from.
#[derive(Debug)]
pub struct Jvm {
    pub name: String,
    pub doc: StatsDoc,
}

/// The documents named by `paths`: each file, and every `*.json` file in each directory. A file
/// named directly must be a stats document; one found in a directory that is not is skipped
/// with a warning in the second list.
pub fn load(paths: &[PathBuf]) -> Result<(Vec<Jvm>, Vec<String>), String> {
    let mut jvms = Vec::new();
    let mut skipped = Vec::new();
    let read = |p: &Path| -> Result<StatsDoc, String> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        StatsDoc::parse(&text).map_err(|e| format!("{}: {e}", p.display()))
    };
    let name = |p: &Path| {
        p.file_stem().map_or_else(
            || p.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        )
    };
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            for f in files {
                match read(&f) {
                    Ok(doc) => jvms.push(Jvm {
                        name: name(&f),
                        doc,
                    }),
                    Err(e) => skipped.push(e),
                }
            }
        } else {
            jvms.push(Jvm {
                name: name(p),
                doc: read(p)?,
            });
        }
    }
    if jvms.is_empty() {
        return Err(format!(
            "no memliner stats documents in {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok((jvms, skipped))
}

/// Why `memliner stats` found no figures to show.
#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    /// A file or directory argument: unreadable, or no stats documents in it.
    #[error("{0}")]
    Files(String),
    #[error(transparent)]
    Live(#[from] live::LiveError),
}

impl GatherError {
    /// The command's exit status (a running JVM's cases are told apart, see
    /// [`live::LiveError::exit_code`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            GatherError::Files(_) => 2,
            GatherError::Live(e) => e.exit_code(),
        }
    }
}

/// The documents of `memliner stats`'s arguments, in their order: files, directories of them
/// (as `load`), and running JVMs asked for theirs (`live::request`), named `pid N`. Also the
/// lines to print on the side: strangers skipped, where a JVM wrote its document.
pub fn gather(sources: &[Source]) -> Result<(Vec<Jvm>, Vec<String>), GatherError> {
    let mut jvms = Vec::new();
    let mut notes = Vec::new();
    for s in sources {
        match s {
            Source::Path(p) => {
                let (found, skipped) = load(std::slice::from_ref(p)).map_err(GatherError::Files)?;
                jvms.extend(found);
                notes.extend(skipped.into_iter().map(|s| format!("skipped {s}")));
            }
            Source::Pid(pid) => {
                let (path, doc) = live::request(*pid, live::TIMEOUT)?;
                notes.push(format!("JVM {pid} wrote its stats to {}", path.display()));
                jvms.push(Jvm {
                    name: format!("pid {pid}"),
                    doc,
                });
            }
        }
    }
    Ok((jvms, notes))
}

/// The sums a row shows: one JVM's figures, or a job's summed (`Totals::sum`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub wall_s: f64,
    pub faults: u64,
    pub remote: u64,
    /// Remote faults taken by GC threads (a share of each JVM's remote faults, summed).
    pub gc_remote: f64,
    pub read_pages: u64,
    pub written_pages: u64,
    marker_hits: u64,
    marker_misses: u64,
    hit_pages: u64,
    demand_faults: u64,
    /// One JVM's prefetch accuracy and coverage as its agent computed them (a total has none
    /// and divides its sums).
    own: Option<(Option<f64>, Option<f64>)>,
}

impl Totals {
    pub fn of(d: &StatsDoc) -> Totals {
        let (read_pages, written_pages) = d
            .pager
            .as_ref()
            .map_or((0, 0), |p| (p.remote.pages_read, p.remote.pages_written));
        let pf = d.prefetch.as_ref().map(|p| &p.all);
        Totals {
            wall_s: d.wall_ms / 1e3,
            faults: d.faults.total,
            remote: d.faults.remote,
            gc_remote: d.faults.gc_share_of_remote.unwrap_or(0.0) * d.faults.remote as f64,
            read_pages,
            written_pages,
            marker_hits: pf.map_or(0, |p| p.marker_hits),
            marker_misses: pf.map_or(0, |p| p.marker_misses),
            hit_pages: pf.map_or(0, |p| p.hit_pages),
            demand_faults: pf.map_or(0, |p| p.demand_faults),
            own: Some(pf.map_or((None, None), |p| (p.accuracy, p.coverage))),
        }
    }

    /// The figures of a job's JVMs together.
    pub fn sum<'a>(docs: impl IntoIterator<Item = &'a StatsDoc>) -> Totals {
        docs.into_iter()
            .map(Totals::of)
            .fold(Totals::default(), Totals::add)
    }

    /// The GC threads' share of the remote faults.
    pub fn gc_share(&self) -> Option<f64> {
        (self.remote > 0).then(|| self.gc_remote / self.remote as f64)
    }

    fn add(self, o: Totals) -> Totals {
        Totals {
            // The job's JVMs run side by side: the longest is the job's.
            wall_s: self.wall_s.max(o.wall_s),
            faults: self.faults + o.faults,
            remote: self.remote + o.remote,
            gc_remote: self.gc_remote + o.gc_remote,
            read_pages: self.read_pages + o.read_pages,
            written_pages: self.written_pages + o.written_pages,
            marker_hits: self.marker_hits + o.marker_hits,
            marker_misses: self.marker_misses + o.marker_misses,
            hit_pages: self.hit_pages + o.hit_pages,
            demand_faults: self.demand_faults + o.demand_faults,
            own: None,
        }
    }

    fn cells(&self, name: &str) -> String {
        let share = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{:.0}%", 100.0 * x));
        let pct = |n: f64, d: f64| share((d > 0.0).then(|| n / d));
        let (accuracy, coverage) = match self.own {
            Some((a, c)) => (share(a), share(c)),
            None => (
                pct(
                    self.marker_hits as f64,
                    (self.marker_hits + self.marker_misses) as f64,
                ),
                pct(
                    self.hit_pages as f64,
                    (self.hit_pages + self.demand_faults) as f64,
                ),
            ),
        };
        format!(
            "| {name} | {:.1} | {} | {} | {} | {} | {} | {} | {} |",
            self.wall_s,
            self.faults,
            self.remote,
            pct(self.gc_remote, self.remote as f64),
            format_size(self.read_pages * PAGE_SIZE as u64),
            format_size(self.written_pages * PAGE_SIZE as u64),
            accuracy,
            coverage,
        )
    }
}

/// The table: one row per JVM, then the total (faults and traffic summed, shares and prefetch
/// figures over the sums, wall the longest), and the faults of all JVMs by thread class.
pub fn table(jvms: &[Jvm]) -> String {
    let mut out = String::from(
        "| JVM | wall s | faults | remote | GC share of remote | remote read | remote written | prefetch accuracy | prefetch coverage |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut total = Totals::default();
    for j in jvms {
        let r = Totals::of(&j.doc);
        total = total.add(r);
        out += &r.cells(&j.name);
        out.push('\n');
    }
    out += &total.cells(&format!("**all {}**", jvms.len()));
    out.push('\n');
    let mut by_class: Vec<(String, u64)> = Vec::new();
    for j in jvms {
        for (class, c) in j.doc.faults.by_class.iter() {
            match by_class.iter_mut().find(|(n, _)| n == class.name()) {
                Some((_, t)) => *t += c.total,
                None => by_class.push((class.name().to_string(), c.total)),
            }
        }
    }
    let all: u64 = by_class.iter().map(|(_, t)| t).sum();
    let classes: Vec<String> = by_class
        .iter()
        .filter(|(_, t)| *t > 0)
        .map(|(n, t)| format!("{n} {:.1}%", 100.0 * *t as f64 / all.max(1) as f64))
        .collect();
    out += &format!(
        "\nfaults by thread class, all JVMs: {}\n",
        classes.join(", ")
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_executors_merge_into_one_total() {
        let mut a = StatsDoc::sample();
        let pf = &mut a.prefetch.as_mut().unwrap().all;
        (
            pf.marker_hits,
            pf.marker_misses,
            pf.hit_pages,
            pf.demand_faults,
        ) = (9, 1, 5, 5);
        let mut b = a.clone();
        b.wall_ms *= 2.0;
        let t = table(&[
            Jvm {
                name: "memliner-h-1".into(),
                doc: a.clone(),
            },
            Jvm {
                name: "memliner-h-2".into(),
                doc: b,
            },
        ]);
        let one = Totals::of(&a);
        let row = |name: &str| {
            t.lines()
                .find(|l| l.starts_with(&format!("| {name} |")))
                .unwrap()
        };
        assert!(
            row("memliner-h-1").contains(&format!("| {} | {} |", one.faults, one.remote)),
            "{t}"
        );
        assert!(row("memliner-h-1").ends_with("| 90% | 50% |"), "{t}");
        let all = row("**all 2**");
        assert!(
            all.contains(&format!(
                "| {:.1} | {} | {} | 75% |",
                2.0 * a.wall_ms / 1e3,
                2 * one.faults,
                2 * one.remote
            )),
            "{t}"
        );
        assert!(all.ends_with("| 90% | 50% |"), "{t}");
        assert!(
            t.contains("faults by thread class, all JVMs: application 25.0%, gc 75.0%"),
            "{t}"
        );
    }

    #[test]
    fn a_directory_is_read_and_strangers_in_it_are_skipped() {
        let dir = std::env::temp_dir().join(format!("memliner-aggregate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let doc = serde_json::to_string(&StatsDoc::sample()).unwrap();
        std::fs::write(dir.join("memliner-h-1.json"), &doc).unwrap();
        std::fs::write(dir.join("memliner-h-2.json"), &doc).unwrap();
        std::fs::write(dir.join("other.json"), "{}").unwrap();
        std::fs::write(dir.join("notes.txt"), "x").unwrap();
        let (jvms, skipped) = load(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(jvms.len(), 2);
        assert_eq!(skipped.len(), 1);
        assert!(
            skipped[0].contains("other.json")
                && skipped[0].contains("not a memliner stats document"),
            "{skipped:?}"
        );
        let e = load(&[dir.join("other.json")]).unwrap_err();
        assert!(e.contains("other.json"), "{e}");
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert!(load(&[empty])
            .unwrap_err()
            .contains("no memliner stats documents"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
