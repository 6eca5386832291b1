//! A hand-written SVG: op/s (top panel) and p99 latency (bottom panel) against client
//! threads, one line per access mode, with axes, ticks, labels and a legend. Every plot
//! the tool draws (this one and [`crate::rate_plot`]'s) colours an access mode by
//! [`mode_color`], so a mode looks the same in all of them.

use std::fmt::Write;

use segstore::DiskAccessMode;

/// One access mode's steps: (threads, op/s, p99 ms).
#[derive(Debug, Clone)]
pub struct Series {
    /// The access mode (legend label and colour).
    pub mode: DiskAccessMode,
    /// Points in step order.
    pub points: Vec<(usize, f64, f64)>,
}

/// The colour of an access mode in every plot (the one palette of the tool).
pub fn mode_color(mode: DiskAccessMode) -> &'static str {
    match mode {
        DiskAccessMode::Mmap => "#1f77b4",
        DiskAccessMode::Standard => "#d62728",
        DiskAccessMode::Auto => "#2ca02c",
        DiskAccessMode::MmapIndexOnly => "#ff7f0e",
    }
}

pub const W: f64 = 960.0;
const H: f64 = 720.0;
pub const LEFT: f64 = 90.0;
pub const RIGHT: f64 = 190.0;
pub const TOP: f64 = 78.0;
const BOTTOM: f64 = 58.0;
const GAP: f64 = 64.0;
pub const INSET: f64 = 18.0;

/// Escape text for SVG.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round step giving about five ticks up to `max`, and the axis top.
pub fn nice_axis(max: f64) -> (f64, f64) {
    if max.is_nan() || max <= 0.0 {
        return (0.2, 1.0);
    }
    let raw = max / 5.0;
    let e = 10f64.powf(raw.log10().floor());
    let f = raw / e;
    let step = e * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    (step, (max / step).ceil() * step)
}

/// Op/s tick label: 0, 250k, 1.5M.
pub fn si(v: f64) -> String {
    let trim = |s: String| s.trim_end_matches('0').trim_end_matches('.').to_string();
    if v >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if v >= 1e3 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else {
        trim(format!("{v:.1}"))
    }
}

/// Millisecond tick label with as many decimals as the step needs.
pub fn ms(v: f64, step: f64) -> String {
    let d = (-step.log10().floor()).clamp(0.0, 6.0) as usize;
    format!("{v:.d$}")
}

/// The x axis: log2 when the thread counts span a factor of 4 or more.
struct XAxis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl XAxis {
    fn new(ts: &[usize]) -> XAxis {
        let lo = ts.iter().copied().min().unwrap_or(1).max(1) as f64;
        let hi = ts.iter().copied().max().unwrap_or(1).max(1) as f64;
        XAxis {
            lo,
            hi,
            log: hi / lo >= 4.0,
        }
    }

    fn x(&self, t: usize) -> f64 {
        let (a, b) = (LEFT + INSET, W - RIGHT - INSET);
        if self.hi == self.lo {
            return (a + b) / 2.0;
        }
        let f = if self.log {
            ((t as f64).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (t as f64 - self.lo) / (self.hi - self.lo)
        };
        a + f * (b - a)
    }
}

/// A y axis: linear from 0, or log10 between powers of ten.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum YAxis {
    Linear { step: f64, top: f64 },
    Log { lo: f64, hi: f64 },
}

impl YAxis {
    /// Linear, unless `log_ok` and the values span a factor of 20 or more: latencies
    /// that grow by orders of magnitude would flatten every other line to zero.
    pub fn new(values: &[f64], log_ok: bool) -> YAxis {
        let max = values.iter().copied().fold(0.0, f64::max);
        let min = values
            .iter()
            .copied()
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        if log_ok && min.is_finite() && max / min >= 20.0 {
            return YAxis::log(values);
        }
        let (step, top) = nice_axis(max);
        YAxis::Linear { step, top }
    }

    /// Log10 from the decade below the smallest positive value to the decade above
    /// the largest (at least one decade; 0.001 to 1 when none is positive).
    pub fn log(values: &[f64]) -> YAxis {
        let max = values.iter().copied().fold(0.0, f64::max);
        let min = values
            .iter()
            .copied()
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        if !min.is_finite() {
            return YAxis::Log { lo: 0.001, hi: 1.0 };
        }
        let lo = 10f64.powf(min.log10().floor());
        let hi = 10f64.powf(max.log10().ceil()).max(lo * 10.0);
        YAxis::Log { lo, hi }
    }

    /// Position of `v` from 0 (bottom) to 1 (top).
    pub fn frac(&self, v: f64) -> f64 {
        match *self {
            YAxis::Linear { top, .. } => v / top,
            YAxis::Log { lo, hi } => (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()),
        }
    }

    /// (value, resolution for its label) of each tick: 1-2-5 steps of each decade on a
    /// log axis of up to three decades, else the decades alone.
    pub fn ticks(&self) -> Vec<(f64, f64)> {
        match *self {
            YAxis::Linear { step, top } => (0..)
                .map(|i| i as f64 * step)
                .take_while(|v| *v <= top * 1.000_001)
                .map(|v| (v, step))
                .collect(),
            YAxis::Log { lo, hi } => {
                let (e0, e1) = (lo.log10().round() as i32, hi.log10().round() as i32);
                let mults: &[f64] = if e1 - e0 <= 3 {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                (e0..=e1)
                    .flat_map(|e| {
                        mults
                            .iter()
                            .map(move |m| (m * 10f64.powi(e), 10f64.powi(e)))
                    })
                    .filter(|(v, _)| *v <= hi * 1.000_001)
                    .collect()
            }
        }
    }
}

struct Panel<'a> {
    top: f64,
    height: f64,
    title: &'a str,
    class: &'a str,
    label: fn(f64, f64) -> String,
    value: fn(&(usize, f64, f64)) -> f64,
    unit: &'a str,
    log_ok: bool,
}

/// Draw `series` under `title` and `subtitle`.
pub fn svg(title: &str, subtitle: &str, series: &[Series]) -> String {
    let mut ts: Vec<usize> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    ts.sort_unstable();
    ts.dedup();
    let xa = XAxis::new(&ts);
    let ph = (H - TOP - BOTTOM - GAP) / 2.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="30" font-size="19" font-weight="bold" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="52" font-size="12" fill="#555" text-anchor="middle">{}</text>"##,
        W / 2.0,
        esc(subtitle)
    );
    let panels = [
        Panel {
            top: TOP,
            height: ph,
            title: "Throughput",
            class: "ops",
            label: |v, _| si(v),
            value: |p| p.1,
            unit: "op/s",
            log_ok: false,
        },
        Panel {
            top: TOP + ph + GAP,
            height: ph,
            title: "p99 latency",
            class: "p99",
            label: ms,
            value: |p| p.2,
            unit: "ms",
            log_ok: true,
        },
    ];
    for p in &panels {
        draw_panel(&mut out, p, &xa, &ts, series);
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="13" text-anchor="middle">client threads{}</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 16.0,
        if xa.log { " (log scale)" } else { "" }
    );
    draw_legend(&mut out, series);
    out.push_str("</svg>\n");
    out
}

fn draw_panel(out: &mut String, p: &Panel<'_>, xa: &XAxis, ts: &[usize], series: &[Series]) {
    let (x0, x1) = (LEFT, W - RIGHT);
    let (y0, y1) = (p.top + p.height, p.top);
    let values: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(p.value))
        .collect();
    let ya = YAxis::new(&values, p.log_ok);
    let y = |v: f64| y0 - ya.frac(v) * (y0 - y1);
    let _ = writeln!(out, r#"<g class="panel-{}">"#, p.class);
    let _ = writeln!(
        out,
        r#"<text x="{x0}" y="{}" font-size="14" font-weight="bold">{} ({}{})</text>"#,
        y1 - 8.0,
        p.title,
        p.unit,
        if matches!(ya, YAxis::Log { .. }) {
            ", log scale"
        } else {
            ""
        }
    );
    // Horizontal grid and y ticks.
    for (v, res) in ya.ticks() {
        let yy = y(v);
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" y1="{yy:.1}" x2="{x1}" y2="{yy:.1}" stroke="#e3e3e3"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            x0 - 7.0,
            yy + 4.0,
            (p.label)(v, res)
        );
    }
    // X ticks at the thread counts used (thinned when crowded).
    let every = ts.len().div_ceil(14).max(1);
    for (i, &t) in ts.iter().enumerate() {
        if i % every != 0 && i != ts.len() - 1 {
            continue;
        }
        let xx = xa.x(t);
        let _ = writeln!(
            out,
            r##"<line x1="{xx:.1}" y1="{y0}" x2="{xx:.1}" y2="{}" stroke="#333"/><line x1="{xx:.1}" y1="{y0}" x2="{xx:.1}" y2="{y1}" stroke="#f0f0f0"/><text x="{xx:.1}" y="{}" font-size="11" text-anchor="middle">{t}</text>"##,
            y0 + 5.0,
            y0 + 18.0
        );
    }
    // Axes.
    let _ = writeln!(
        out,
        r##"<path d="M{x0},{y1} V{y0} H{x1}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate({},{}) rotate(-90)" font-size="13" text-anchor="middle">{}</text>"#,
        x0 - 62.0,
        (y0 + y1) / 2.0,
        p.unit
    );
    for s in series {
        let color = mode_color(s.mode);
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|pt| format!("{:.1},{:.1}", xa.x(pt.0), y((p.value)(pt))))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline class="{}" data-mode="{}" fill="none" stroke="{color}" stroke-width="2.2" stroke-linejoin="round" points="{}"/>"#,
            p.class,
            s.mode.as_str(),
            pts.join(" ")
        );
        for pt in &s.points {
            let v = (p.value)(pt);
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"><title>{}, {} threads: {} {}</title></circle>"#,
                xa.x(pt.0),
                y(v),
                s.mode.as_str(),
                pt.0,
                if p.class == "ops" {
                    format!("{v:.0}")
                } else {
                    format!("{v:.4}")
                },
                p.unit
            );
        }
    }
    out.push_str("</g>\n");
}

fn draw_legend(out: &mut String, series: &[Series]) {
    let modes: Vec<DiskAccessMode> = series.iter().map(|s| s.mode).collect();
    legend(out, &modes);
}

/// The legend of `modes`, right of the plot, in [`mode_color`].
pub fn legend(out: &mut String, modes: &[DiskAccessMode]) {
    let x = W - RIGHT + 24.0;
    let _ = writeln!(
        out,
        r#"<g class="legend"><text x="{x}" y="{}" font-size="13" font-weight="bold">disk_access_mode</text>"#,
        TOP + 10.0
    );
    for (i, m) in modes.iter().enumerate() {
        let color = mode_color(*m);
        let y = TOP + 34.0 + i as f64 * 22.0;
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="2.2"/><circle cx="{}" cy="{y}" r="3.5" fill="{color}"/><text x="{}" y="{}" font-size="13">{}</text>"#,
            x + 28.0,
            x + 14.0,
            x + 36.0,
            y + 4.5,
            m.as_str()
        );
    }
    out.push_str("</g>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(mode: DiskAccessMode, k: f64) -> Series {
        Series {
            mode,
            points: [4, 8, 16, 24]
                .iter()
                .enumerate()
                .map(|(i, &t)| (t, k * (i + 1) as f64 * 1e5, 0.01 * k * (i + 1) as f64))
                .collect(),
        }
    }

    #[test]
    fn one_polyline_per_mode_in_each_panel() {
        let modes = ["mmap", "standard", "mmap_index_only"];
        let s: Vec<Series> = modes
            .iter()
            .enumerate()
            .map(|(i, m)| series(m.parse().unwrap(), 1.0 + i as f64))
            .collect();
        let svg = svg("read <n=10>", "uniform & more", &s);
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2 * modes.len());
        for class in ["ops", "p99"] {
            assert_eq!(
                svg.matches(&format!(r#"<polyline class="{class}""#))
                    .count(),
                modes.len()
            );
            for m in modes {
                let tag = format!(r#"<polyline class="{class}" data-mode="{m}""#);
                assert_eq!(svg.matches(&tag).count(), 1, "{tag}");
            }
        }
        for m in modes {
            assert!(svg.contains(&format!(">{m}</text>")), "legend lacks {m}");
        }
        // Every polyline has one point per step; ticks name the thread counts.
        for line in svg.lines().filter(|l| l.starts_with("<polyline")) {
            let pts = line.split("points=\"").nth(1).unwrap();
            assert_eq!(pts.trim_end_matches("\"/>").split(' ').count(), 4);
        }
        for t in [4, 8, 16, 24] {
            assert!(svg.contains(&format!(">{t}</text>")));
        }
        assert!(svg.contains("read &lt;n=10&gt;") && svg.contains("uniform &amp; more"));
        assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
        assert!(svg.contains("(log scale)"));
    }

    #[test]
    fn single_step_and_axis_labels() {
        let one = Series {
            mode: DiskAccessMode::Auto,
            points: vec![(2, 0.0, 0.0)],
        };
        let svg = svg("t", "s", &[one]);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        assert_eq!(nice_axis(0.0), (0.2, 1.0));
        assert_eq!(nice_axis(950_000.0), (200_000.0, 1_000_000.0));
        let (step, top) = nice_axis(0.013);
        assert!((step - 0.005).abs() < 1e-12 && (top - 0.015).abs() < 1e-12);
        assert_eq!(si(1_500_000.0), "1.5M");
        assert_eq!(si(250_000.0), "250k");
        assert_eq!(si(0.0), "0");
        assert_eq!(ms(0.015, 0.005), "0.015");
        assert_eq!(ms(2.0, 0.5), "2.0");
    }

    #[test]
    fn latencies_spanning_decades_get_a_log_axis() {
        assert!(matches!(
            YAxis::new(&[0.01, 0.12], true),
            YAxis::Linear { .. }
        ));
        assert!(matches!(
            YAxis::new(&[0.003, 1.28], false),
            YAxis::Linear { .. }
        ));
        let ya = YAxis::new(&[0.003, 0.004, 1.28], true);
        assert_eq!(
            ya,
            YAxis::Log {
                lo: 0.001,
                hi: 10.0
            }
        );
        assert_eq!(ya.frac(0.001), 0.0);
        assert!((ya.frac(0.1) - 0.5).abs() < 1e-9 && (ya.frac(10.0) - 1.0).abs() < 1e-9);
        let labels: Vec<String> = ya.ticks().iter().map(|&(v, r)| ms(v, r)).collect();
        assert_eq!(labels, ["0.001", "0.01", "0.1", "1", "10"]);
        let narrow = YAxis::new(&[0.002, 0.09], true);
        let labels: Vec<String> = narrow.ticks().iter().map(|&(v, r)| ms(v, r)).collect();
        assert_eq!(
            labels,
            ["0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1"]
        );
        let s = Series {
            mode: DiskAccessMode::Standard,
            points: vec![(4, 5e5, 0.003), (121, 5.4e5, 1.28)],
        };
        assert!(svg("t", "s", &[s]).contains("p99 latency (ms, log scale)"));
    }
}
