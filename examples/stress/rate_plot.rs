//! The fixed-rate sweep's SVG: p99 latency (log scale, measured from each operation's
//! intended start) against the achieved throughput, one line per access mode in the
//! tool's palette ([`plot::mode_color`]). While a target keeps up, the line runs right
//! at a flat p99; once it saturates, achieved op/s stop growing and p99 climbs: the
//! knee is the mode's capacity. Saturated steps are drawn as open circles.

use std::fmt::Write;

use segstore::DiskAccessMode;

use crate::plot::{self, esc, mode_color, ms, nice_axis, si, YAxis, INSET, LEFT, RIGHT, TOP, W};

/// One fixed-rate step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatePoint {
    /// Target op/s.
    pub target: f64,
    /// Achieved op/s.
    pub achieved: f64,
    /// p99 from the intended start, ms.
    pub p99: f64,
    /// Whether the achieved rate fell short of the target.
    pub saturated: bool,
}

/// One access mode's steps, in step order.
#[derive(Debug, Clone)]
pub struct RateSeries {
    /// The access mode (legend label and colour).
    pub mode: DiskAccessMode,
    /// Its steps.
    pub points: Vec<RatePoint>,
}

const H: f64 = 560.0;
const BOTTOM: f64 = 64.0;

/// Draw `series` under `title` and `subtitle`.
pub fn svg(title: &str, subtitle: &str, series: &[RateSeries]) -> String {
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (xstep, xtop) = nice_axis(pts().map(|p| p.achieved).fold(0.0, f64::max));
    let p99s: Vec<f64> = pts().map(|p| p.p99).collect();
    let ya = YAxis::log(&p99s);
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP + 10.0);
    let x = |v: f64| x0 + INSET + v / xtop * (x1 - x0 - 2.0 * INSET);
    let y = |v: f64| y0 - ya.frac(v) * (y0 - y1);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    for (yy, size, text) in [(30.0, 19, esc(title)), (52.0, 12, esc(subtitle))] {
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{yy}" font-size="{size}" fill="#222" text-anchor="middle">{text}</text>"##,
            W / 2.0
        );
    }
    let _ = writeln!(out, r#"<g class="panel-rate">"#);
    for (v, res) in ya.ticks() {
        let yy = y(v);
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" y1="{yy:.1}" x2="{x1}" y2="{yy:.1}" stroke="#e3e3e3"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            x0 - 7.0,
            yy + 4.0,
            ms(v, res)
        );
    }
    let mut v = 0.0;
    while v <= xtop * 1.000_001 {
        let xx = x(v);
        let _ = writeln!(
            out,
            r##"<line x1="{xx:.1}" y1="{y0}" x2="{xx:.1}" y2="{}" stroke="#333"/><text x="{xx:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"##,
            y0 + 5.0,
            y0 + 18.0,
            si(v)
        );
        v += xstep;
    }
    let _ = writeln!(
        out,
        r##"<path d="M{x0},{y1} V{y0} H{x1}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate({},{}) rotate(-90)" font-size="13" text-anchor="middle">p99 latency from the intended start (ms, log scale)</text>"#,
        x0 - 62.0,
        (y0 + y1) / 2.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="13" text-anchor="middle">achieved throughput (op/s); open circles: saturated (below {:.0}% of the target)</text>"#,
        (x0 + x1) / 2.0,
        H - 16.0,
        crate::pace::SATURATED_BELOW * 100.0
    );
    for s in series {
        let color = mode_color(s.mode);
        let line: Vec<String> = s
            .points
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.achieved), y(p.p99)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline class="rate" data-mode="{}" fill="none" stroke="{color}" stroke-width="2.2" stroke-linejoin="round" points="{}"/>"#,
            s.mode.as_str(),
            line.join(" ")
        );
        for p in &s.points {
            let fill = if p.saturated { "white" } else { color };
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{fill}" stroke="{color}" stroke-width="1.8"><title>{}: target {:.0} op/s, achieved {:.0} op/s, p99 {:.4} ms{}</title></circle>"#,
                x(p.achieved),
                y(p.p99),
                s.mode.as_str(),
                p.target,
                p.achieved,
                p.p99,
                if p.saturated { ", saturated" } else { "" }
            );
        }
    }
    out.push_str("</g>\n");
    let modes: Vec<DiskAccessMode> = series.iter().map(|s| s.mode).collect();
    plot::legend(&mut out, &modes);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::Series;

    fn rate_series(mode: DiskAccessMode) -> RateSeries {
        let point = |target: f64, achieved: f64, p99: f64| RatePoint {
            target,
            achieved,
            p99,
            saturated: achieved < 0.95 * target,
        };
        RateSeries {
            mode,
            points: vec![
                point(1e5, 1e5, 0.004),
                point(3e5, 2.99e5, 0.02),
                point(1e6, 4.1e5, 180.0),
            ],
        }
    }

    /// Each `(mode, stroke)` of the polylines and circles in `svg`.
    fn strokes(svg: &str) -> Vec<(String, String)> {
        svg.lines()
            .filter(|l| l.starts_with("<polyline"))
            .map(|l| {
                let attr = |name: &str| {
                    let rest = l.split(&format!("{name}=\"")).nth(1).unwrap();
                    rest[..rest.find('"').unwrap()].to_string()
                };
                (attr("data-mode"), attr("stroke"))
            })
            .collect()
    }

    #[test]
    fn p99_against_achieved_rate_one_line_per_mode() {
        let modes = [DiskAccessMode::Mmap, DiskAccessMode::Standard];
        let s: Vec<RateSeries> = modes.iter().map(|&m| rate_series(m)).collect();
        let svg = svg("read <fixed>", "2 & 4", &s);
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches(r#"<polyline class="rate""#).count(), 2);
        assert!(svg.contains("log scale") && svg.contains("achieved throughput"));
        assert!(svg.contains("read &lt;fixed&gt;") && svg.contains("2 &amp; 4"));
        // One open circle per mode: the saturated step.
        assert_eq!(svg.matches(r#"fill="white" stroke="#).count(), 2);
        assert_eq!(svg.matches(", saturated</title>").count(), 2);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        // The y axis spans the decades of the p99s: 0.001 ms to 1000 ms.
        assert!(svg.contains(">0.001</text>") && svg.contains(">1000</text>"));
        assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
        let empty = super::svg("t", "s", &[]);
        assert!(!empty.contains("NaN") && !empty.contains("<polyline"));
    }

    #[test]
    fn every_plot_colours_a_mode_by_the_one_palette() {
        let all = DiskAccessMode::all();
        // Distinct colours, one per mode.
        let mut colours: Vec<&str> = all.iter().map(|&m| mode_color(m)).collect();
        colours.sort_unstable();
        colours.dedup();
        assert_eq!(colours.len(), all.len());
        // Whatever the order of the modes and whichever plot: the mode's colour.
        let orders = [
            all.to_vec(),
            all.iter().rev().copied().collect(),
            vec![all[3]],
        ];
        for modes in orders {
            let by_threads: Vec<Series> = modes
                .iter()
                .map(|&mode| Series {
                    mode,
                    points: vec![(1, 1e5, 0.01), (4, 2e5, 0.02)],
                })
                .collect();
            let by_rate: Vec<RateSeries> = modes.iter().map(|&m| rate_series(m)).collect();
            for svg in [
                plot::svg("t", "s", &by_threads),
                super::svg("t", "s", &by_rate),
            ] {
                let seen = strokes(&svg);
                assert!(seen.len() >= modes.len());
                for (mode, stroke) in seen {
                    let m: DiskAccessMode = mode.parse().unwrap();
                    assert_eq!(stroke, mode_color(m), "{mode}");
                }
                for m in &modes {
                    // The legend's swatch too.
                    let swatch =
                        format!(r#"stroke="{}" stroke-width="2.2"/><circle"#, mode_color(*m));
                    assert!(svg.contains(&swatch), "{m}");
                }
            }
        }
    }
}
