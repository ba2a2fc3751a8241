//! PNG plots of a bench run (plotters, bitmap backend; text drawn with a system TrueType
//! font through ab_glyph, so no fontconfig is needed).

use std::path::Path;

use plotters::prelude::*;

use memliner_contracts::stats::PrefetchClassDoc;

use super::cells::{cell, med, paged_workloads, pairs};
use super::report::{accuracy, app_demand, class_remote, coverage, prefetch};
use super::{BenchConfig, Mode, Record};

const FONT_FILES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn register_font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let file = FONT_FILES
            .iter()
            .find(|f| Path::new(f).is_file())
            .ok_or("no DejaVuSans.ttf found (apt-get install fonts-dejavu-core)")?;
        let bytes = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
        plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into()))
            .map_err(|_| format!("{file} is not a usable font"))
    })
    .clone()
}

fn e<E: std::fmt::Debug>(err: E) -> String {
    format!("{err:?}")
}

/// Draws one mode's points joined by a line, with its legend entry (nothing without points).
fn mode_line<'a, CT: plotters::coord::CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, CT>,
    m: Mode,
    color: RGBColor,
    pts: Vec<(f64, f64)>,
) -> Result<(), String> {
    if pts.is_empty() {
        return Ok(());
    }
    chart
        .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
        .map_err(e)?
        .label(m.name())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    chart
        .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
        .map_err(e)?;
    Ok(())
}

/// Draws the series labels of `chart` in a framed box.
fn legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, CT>,
    position: SeriesLabelPosition,
    size: u32,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font(("sans-serif", size))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)
}

const MODES: [(Mode, RGBColor); 5] = [
    (Mode::Baseline, RGBColor(214, 39, 40)),
    (Mode::Memliner, RGBColor(31, 119, 180)),
    (Mode::MemlinerInProcess, RGBColor(148, 103, 189)),
    (Mode::MemlinerKernelHeap, RGBColor(23, 190, 207)),
    (Mode::Kernel, RGBColor(44, 160, 44)),
];

/// Draws every plot into `dir`; returns the file names.
pub fn draw(cfg: &BenchConfig, rs: &[Record], dir: &Path) -> Result<Vec<String>, String> {
    register_font()?;
    let mut files = Vec::new();
    slowdown(cfg, rs, &dir.join("slowdown.png"))?;
    files.push("slowdown.png".to_string());
    // The agent's plots need paged runs with the agent's stats (a --kernel-only bench has
    // none, and a cluster run's are its executors').
    if rs
        .iter()
        .any(|r| r.mode == Mode::Memliner && r.local < 100 && r.stats.is_some())
    {
        faults_by_class(cfg, rs, &dir.join("faults-by-class.png"))?;
        files.push("faults-by-class.png".to_string());
        if rs.iter().any(|r| r.mode == Mode::Kernel && r.ok()) {
            page_ins(cfg, rs, &dir.join("page-ins.png"))?;
            files.push("page-ins.png".to_string());
        }
        lists(cfg, rs, &dir.join("lists.png"))?;
        files.push("lists.png".to_string());
        prefetch_effect(cfg, rs, &dir.join("prefetch.png"))?;
        files.push("prefetch.png".to_string());
    }
    Ok(files)
}

/// Slowdown vs local ratio, one panel per workload and collector, one line per mode.
fn slowdown(cfg: &BenchConfig, rs: &[Record], path: &Path) -> Result<(), String> {
    let pairs = pairs(cfg, rs);
    let cols = pairs.len().clamp(1, 3);
    let rows = pairs.len().div_ceil(cols).max(1);
    let root = BitMapBackend::new(path, (420 * cols as u32, 320 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let panels = root.split_evenly((rows, cols));
    let mut top = 1.0f64;
    for (w, c) in &pairs {
        let n = med(&cell(rs, w, c, Mode::NoAgent, 100), |r| Some(r.wall_ms));
        for (m, _) in MODES {
            for &l in &cfg.locals {
                let v = med(&cell(rs, w, c, m, l), |r| Some(r.wall_ms)) / n;
                if v.is_finite() {
                    top = top.max(v);
                }
            }
        }
    }
    for (i, (w, c)) in pairs.iter().enumerate() {
        let area = &panels[i];
        let n = med(&cell(rs, w, c, Mode::NoAgent, 100), |r| Some(r.wall_ms));
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{w}, {c}"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..105f64, (0.8f64..top * 1.5).log_scale())
            .map_err(e)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("local memory, % of heap")
            .y_desc("slowdown vs all-local")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(e)?;
        for (m, color) in MODES {
            let pts: Vec<(f64, f64)> = cfg
                .locals
                .iter()
                .map(|&l| {
                    let v = med(&cell(rs, w, c, m, l), |r| Some(r.wall_ms)) / n;
                    (
                        l as f64,
                        if m == Mode::Kernel && l == 100 {
                            1.0
                        } else {
                            v
                        },
                    )
                })
                .filter(|p| p.1.is_finite())
                .collect();
            mode_line(&mut chart, m, color, pts)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight, 12)?;
    }
    root.present().map_err(e)
}

/// One mode's line: its colour and points.
type ModeLine = (Mode, RGBColor, Vec<(f64, f64)>);

/// Pages read in by each mode (the agent's reads from its server, the kernel's swap-ins) vs
/// local ratio, log scale: one panel per workload and collector.
fn page_ins(cfg: &BenchConfig, rs: &[Record], path: &Path) -> Result<(), String> {
    let pairs = pairs(cfg, rs);
    let cols = pairs.len().clamp(1, 3);
    let rows = pairs.len().div_ceil(cols).max(1);
    let root = BitMapBackend::new(path, (420 * cols as u32, 320 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let panels = root.split_evenly((rows, cols));
    let reads = |r: &Record| -> Option<f64> {
        match r.mode {
            Mode::Kernel => r.kernel.as_ref()?.get(|k| k.pswpin),
            _ => r.stat(|d| Some(d.pager.as_ref()?.remote.pages_read as f64)),
        }
    };
    let locals: Vec<u32> = cfg.locals.iter().copied().filter(|l| *l < 100).collect();
    for (i, (w, c)) in pairs.iter().enumerate() {
        let series: Vec<ModeLine> = MODES
            .iter()
            .map(|&(m, color)| {
                let pts = locals
                    .iter()
                    .map(|&l| (l as f64, med(&cell(rs, w, c, m, l), reads)))
                    .filter(|p| p.1.is_finite() && p.1 > 0.0)
                    .collect();
                (m, color, pts)
            })
            .collect();
        let top = series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.1))
            .fold(10.0, f64::max);
        let bottom = series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.1))
            .fold(top, f64::min)
            .max(1.0);
        let mut chart = ChartBuilder::on(&panels[i])
            .caption(format!("{w}, {c}: pages read in"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(60)
            .build_cartesian_2d(
                (*locals.iter().min().unwrap_or(&0) as f64 - 3.0)
                    ..(*locals.iter().max().unwrap_or(&100) as f64 + 3.0),
                (bottom / 2.0..top * 2.0).log_scale(),
            )
            .map_err(e)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("local memory, % of heap")
            .y_desc("pages (reads; kernel: swap-ins)")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(e)?;
        for (m, color, pts) in series {
            mode_line(&mut chart, m, color, pts)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight, 12)?;
    }
    root.present().map_err(e)
}

const LISTS: [(&str, RGBColor); 5] = [
    ("active", RGBColor(31, 119, 180)),
    ("probation", RGBColor(174, 199, 232)),
    ("cold", RGBColor(255, 127, 14)),
    ("inactive (sampled)", RGBColor(214, 39, 40)),
    ("write-back, markers, in flight", RGBColor(127, 127, 127)),
];

/// Resident pages by list over one run (memliner at the smallest local ratio of the first
/// collector, first repetition), stacked: one panel per workload.
fn lists(cfg: &BenchConfig, rs: &[Record], path: &Path) -> Result<(), String> {
    let c = &cfg.collectors[0];
    let low = cfg
        .locals
        .iter()
        .copied()
        .filter(|l| *l < 100)
        .min()
        .unwrap_or(25);
    let runs: Vec<(&String, &Record)> = paged_workloads(rs)
        .iter()
        .filter_map(|w| {
            rs.iter()
                .find(|r| {
                    r.workload == *w
                        && r.collector == *c
                        && r.mode == Mode::Memliner
                        && r.local == low
                        && r.ok()
                        && r.stats.is_some()
                })
                .map(|r| (&r.workload, r))
        })
        .collect();
    let n = runs.len().max(1);
    let root = BitMapBackend::new(path, (520 * n as u32, 340)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let panels = root.split_evenly((1, n));
    for (i, (w, r)) in runs.iter().enumerate() {
        let Some(p) = r.stats.as_ref().and_then(|d| d.pager.as_ref()) else {
            continue;
        };
        let t = &p.reclaim.timeline;
        let layers = |s: &memliner_contracts::stats::ListSampleDoc| -> [f64; 5] {
            [
                s.active as f64,
                s.probation as f64,
                s.cold as f64,
                s.inactive as f64,
                (s.writeback + s.other) as f64,
            ]
        };
        let end_s = t.last().map_or(1.0, |s| s.ms / 1e3).max(0.1);
        let mut chart = ChartBuilder::on(&panels[i])
            .caption(
                format!("{w}, {c}, {low}% local: resident pages by list"),
                ("sans-serif", 15),
            )
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..end_s, 0f64..p.budget_pages as f64 * 1.05)
            .map_err(e)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("seconds since paging started")
            .y_desc("pages")
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(e)?;
        for (k, (name, color)) in LISTS.iter().enumerate() {
            let upper: Vec<(f64, f64)> = t
                .iter()
                .map(|s| (s.ms / 1e3, layers(s)[..=k].iter().sum()))
                .collect();
            let lower: Vec<(f64, f64)> = t
                .iter()
                .map(|s| (s.ms / 1e3, layers(s)[..k].iter().sum()))
                .collect();
            let mut poly = upper.clone();
            poly.extend(lower.into_iter().rev());
            let color = *color;
            chart
                .draw_series(std::iter::once(Polygon::new(poly, color.filled())))
                .map_err(e)?
                .label(*name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight, 11)?;
    }
    root.present().map_err(e)
}

const CLASSES: [(&str, RGBColor); 4] = [
    ("application", RGBColor(31, 119, 180)),
    ("gc", RGBColor(214, 39, 40)),
    ("gc-concurrent", RGBColor(255, 127, 14)),
    ("other", RGBColor(127, 127, 127)),
];

/// Remote demand faults by thread class, stacked, for each local ratio and policy (first
/// collector; one panel per workload).
fn faults_by_class(cfg: &BenchConfig, rs: &[Record], path: &Path) -> Result<(), String> {
    let ws = paged_workloads(rs);
    let c = &cfg.collectors[0];
    let locals: Vec<u32> = cfg.locals.iter().copied().filter(|l| *l < 100).collect();
    let root = BitMapBackend::new(path, (520 * ws.len() as u32, 380)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let panels = root.split_evenly((1, ws.len()));
    for (i, w) in ws.iter().enumerate() {
        let bars: Vec<(String, Vec<f64>)> = locals
            .iter()
            .filter(|&&l| !cell(rs, w, c, Mode::Memliner, l).is_empty())
            .flat_map(|&l| {
                [Mode::Baseline, Mode::Memliner].map(|m| {
                    let cl = cell(rs, w, c, m, l);
                    let short = if m == Mode::Baseline { "B" } else { "M" };
                    (
                        format!("{l}% {short}"),
                        CLASSES
                            .iter()
                            .map(|(k, _)| med(&cl, |r| class_remote(r, k)))
                            .map(|v| if v.is_finite() { v } else { 0.0 })
                            .collect(),
                    )
                })
            })
            .collect();
        let top = bars
            .iter()
            .map(|b| b.1.iter().sum::<f64>())
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(&panels[i])
            .caption(
                format!("{w}, {c}: remote faults by thread class (B baseline, M memliner)"),
                ("sans-serif", 15),
            )
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..bars.len() as f64, 0f64..top * 1.1)
            .map_err(e)?;
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .disable_x_mesh()
            .x_labels(bars.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let k = (*x - 0.5).round();
                if (x - 0.5 - k).abs() < 1e-6 && k >= 0.0 && (k as usize) < names.len() {
                    names[k as usize].clone()
                } else {
                    String::new()
                }
            })
            .y_desc("faults")
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(e)?;
        for (k, (class, color)) in CLASSES.iter().enumerate() {
            let rects: Vec<Rectangle<(f64, f64)>> = bars
                .iter()
                .enumerate()
                .map(|(x, (_, v))| {
                    let below: f64 = v[..k].iter().sum();
                    Rectangle::new(
                        [(x as f64 + 0.15, below), (x as f64 + 0.85, below + v[k])],
                        color.filled(),
                    )
                })
                .collect();
            let color = *color;
            chart
                .draw_series(rects)
                .map_err(e)?
                .label(*class)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft, 12)?;
    }
    root.present().map_err(e)
}

/// A line: label, colour, marker (0 circle, 1 triangle), points.
type Series = (String, RGBColor, u32, Vec<(f64, f64)>);

/// Application-stream prefetch accuracy and coverage vs local ratio, per policy and workload
/// (first collector), with the application's demand faults for scale.
fn prefetch_effect(cfg: &BenchConfig, rs: &[Record], path: &Path) -> Result<(), String> {
    let ws = paged_workloads(rs);
    let c = &cfg.collectors[0];
    let root = BitMapBackend::new(path, (1260, 360)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let panels = root.split_evenly((1, 3));
    let locals: Vec<u32> = cfg.locals.iter().copied().filter(|l| *l < 100).collect();
    let dashes = [0u32, 1];
    // The figure of each panel; `None`: application demand faults.
    type Figure = Option<fn(&PrefetchClassDoc) -> Option<f64>>;
    let panels_of: [(&str, Figure); 3] = [
        ("application prefetch accuracy", Some(accuracy)),
        ("application prefetch coverage", Some(coverage)),
        ("application demand faults (thousands)", None),
    ];
    for (p, (title, key)) in panels_of.iter().enumerate() {
        let series: Vec<Series> = ws
            .iter()
            .enumerate()
            .flat_map(|(wi, w)| {
                [Mode::Baseline, Mode::Memliner].map(|m| {
                    let color = MODES.iter().find(|x| x.0 == m).unwrap().1;
                    let pts = locals
                        .iter()
                        .map(|&l| {
                            let cl = cell(rs, w, c, m, l);
                            let v = match key {
                                None => med(&cl, app_demand) / 1000.0,
                                Some(f) => med(&cl, |r| prefetch(r, "application", f)) * 100.0,
                            };
                            (l as f64, v)
                        })
                        .filter(|p| p.1.is_finite())
                        .collect();
                    (format!("{w} {}", m.name()), color, dashes[wi % 2], pts)
                })
            })
            .collect();
        let top = if key.is_none() {
            series
                .iter()
                .flat_map(|s| s.3.iter().map(|p| p.1))
                .fold(1.0, f64::max)
                * 1.1
        } else {
            100.0
        };
        let mut chart = ChartBuilder::on(&panels[p])
            .caption(format!("{title}, {c}"), ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..55f64, 0f64..top)
            .map_err(e)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("local memory, % of heap")
            .y_desc(if key.is_none() { "thousands" } else { "%" })
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(e)?;
        for (label, color, dash, pts) in series {
            if pts.is_empty() {
                continue;
            }
            let style = color.stroke_width(2);
            let marker = dash;
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(e)?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            if marker == 0 {
                chart
                    .draw_series(pts.iter().map(|q| Circle::new(*q, 3, color.filled())))
                    .map_err(e)?;
            } else {
                chart
                    .draw_series(
                        pts.iter()
                            .map(|q| TriangleMarker::new(*q, 4, color.filled())),
                    )
                    .map_err(e)?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight, 11)?;
    }
    root.present().map_err(e)
}
