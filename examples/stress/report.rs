//! Result rows as cassandra-stress prints them, the op/s standard error, the CSV form,
//! the fixed-rate figures (target, achieved, saturation, service time), and the thread
//! sweep's schedule and stopping rule.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::pace;

/// Column names of a result row, in order.
pub const COLUMNS: [&str; 11] = [
    "id", "ops", "op/s", "mean", "med", ".95", ".99", ".999", "max", "time", "stderr",
];

/// One finished step.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `"<threads> threadCount"`, as cassandra-stress names its steps.
    pub id: String,
    /// Client threads.
    pub threads: usize,
    /// Operations completed.
    pub ops: u64,
    /// Operations per second over the whole step.
    pub op_rate: f64,
    /// Latencies in milliseconds.
    pub mean: f64,
    /// Median latency, ms.
    pub med: f64,
    /// 95th percentile, ms.
    pub p95: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// 99.9th percentile, ms.
    pub p999: f64,
    /// Maximum, ms.
    pub max: f64,
    /// Step wall time, seconds.
    pub time: f64,
    /// Standard error of the mean op/s over the step's 1-second intervals, relative to
    /// that mean (cassandra-stress's convention); None with fewer than two intervals.
    pub stderr: Option<f64>,
    /// Fixed-rate mode only: the target and the service time.
    pub rate: Option<RateCols>,
}

/// What a fixed-rate step adds to its row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateCols {
    /// Target op/s, all threads together.
    pub target: f64,
    /// 99th percentile of the service time (from each operation's actual start), ms:
    /// what a closed loop would have reported.
    pub service_p99: f64,
}

/// The id of a fixed-rate step: its target, `20000/s`.
pub fn rate_id(target: f64) -> String {
    if target.fract() == 0.0 {
        format!("{target:.0}/s")
    } else {
        format!("{target}/s")
    }
}

/// The id of a step run with `threads` threads.
pub fn step_id(threads: usize) -> String {
    format!("{threads} threadCount")
}

impl Row {
    /// Build a row from a step's latency histogram (nanoseconds), op count, wall time
    /// and per-interval op rates.
    pub fn new(
        threads: usize,
        ops: u64,
        elapsed: Duration,
        hist: &Histogram<u64>,
        intervals: &[f64],
    ) -> Row {
        let ms = |ns: u64| ns as f64 / 1e6;
        let secs = elapsed.as_secs_f64();
        Row {
            id: step_id(threads),
            threads,
            ops,
            op_rate: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
            mean: hist.mean() / 1e6,
            med: ms(hist.value_at_quantile(0.5)),
            p95: ms(hist.value_at_quantile(0.95)),
            p99: ms(hist.value_at_quantile(0.99)),
            p999: ms(hist.value_at_quantile(0.999)),
            max: ms(hist.max()),
            time: secs,
            stderr: relative_stderr(intervals),
            rate: None,
        }
    }

    /// This row as a fixed-rate step at `target` op/s, with the service times.
    pub fn at_rate(self, target: f64, service: &Histogram<u64>) -> Row {
        Row {
            id: rate_id(target),
            rate: Some(RateCols {
                target,
                service_p99: service.value_at_quantile(0.99) as f64 / 1e6,
            }),
            ..self
        }
    }

    /// Fixed-rate mode: whether the achieved rate fell short of the target.
    pub fn saturated(&self) -> Option<bool> {
        self.rate
            .map(|r| pace::is_saturated(self.op_rate, r.target))
    }

    /// Fixed-rate mode: the line printed under the row.
    pub fn rate_line(&self) -> Option<String> {
        let r = self.rate?;
        Some(format!(
            "  fixed rate {:.0} op/s: achieved {:.0} op/s ({:.1}%){}; p99 {:.4} ms from the intended start, {:.4} ms service time",
            r.target,
            self.op_rate,
            100.0 * self.op_rate / r.target,
            if self.saturated() == Some(true) {
                ", SATURATED"
            } else {
                ""
            },
            self.p99,
            r.service_p99
        ))
    }

    /// The values in [`COLUMNS`] order; `num(value, d)` formats a number the table shows
    /// with `d` decimals, `unknown` stands for a missing stderr.
    fn cells(&self, num: impl Fn(f64, usize) -> String, unknown: &str) -> [String; 11] {
        [
            self.id.clone(),
            self.ops.to_string(),
            num(self.op_rate, 0),
            num(self.mean, 4),
            num(self.med, 4),
            num(self.p95, 4),
            num(self.p99, 4),
            num(self.p999, 4),
            num(self.max, 4),
            num(self.time, 1),
            self.stderr.map_or(unknown.to_string(), |e| num(e, 5)),
        ]
    }
}

/// Standard error of the mean of `rates` divided by that mean: `s / sqrt(k) / mean`, with
/// `s` the sample standard deviation (k - 1 denominator) of the `k` interval rates. None
/// with fewer than two intervals or a zero mean.
pub fn relative_stderr(rates: &[f64]) -> Option<f64> {
    let k = rates.len();
    if k < 2 {
        return None;
    }
    let mean = rates.iter().sum::<f64>() / k as f64;
    if mean <= 0.0 {
        return None;
    }
    let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
    Some((var / k as f64).sqrt() / mean)
}

/// Fixed-width table: a header line and one line per row, right-aligned under it.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    id_width: usize,
}

const WIDTHS: [usize; 10] = [10, 9, 8, 8, 8, 8, 8, 8, 7, 8];

impl Table {
    /// A table whose id column fits every id up to `max_threads` threads.
    pub fn for_threads(max_threads: usize) -> Table {
        Table {
            id_width: step_id(max_threads).len().max(2),
        }
    }

    /// The header line.
    pub fn header(&self) -> String {
        self.line(&COLUMNS.map(String::from))
    }

    /// One row. Latencies have four decimals (0.1 µs): an in-process store answers in
    /// microseconds, where cassandra-stress's one decimal would print zeros.
    pub fn row(&self, r: &Row) -> String {
        self.line(&r.cells(|v, d| format!("{v:.d$}"), "-"))
    }

    fn line(&self, cells: &[String; 11]) -> String {
        let mut s = format!("{:>w$}", cells[0], w = self.id_width);
        for (c, w) in cells[1..].iter().zip(WIDTHS) {
            s.push_str(&format!(", {c:>w$}"));
        }
        s
    }
}

/// CSV header: the access mode and thread count, the table's columns, then the
/// fixed-rate ones (empty in a closed loop).
pub fn csv_header() -> String {
    format!(
        "mode,threads,{},target op/s,saturated,service .99",
        COLUMNS.join(",")
    )
}

/// One CSV line (no trailing newline): the table's values with two more decimals; an
/// unknown stderr and, in a closed loop, the fixed-rate fields are empty.
pub fn csv_row(mode: &str, r: &Row) -> String {
    let cells = r.cells(|v, d| format!("{v:.p$}", p = d + 2), "");
    let rate = match (r.rate, r.saturated()) {
        (Some(rc), Some(sat)) => format!("{:.2},{sat},{:.6}", rc.target, rc.service_p99),
        _ => ",,".to_string(),
    };
    format!("{mode},{},{},{rate}", r.threads, cells.join(","))
}

/// Header of the fixed-rate summary.
pub fn rate_summary_header() -> String {
    format!(
        "{:<16}  {:>12}  {:>12}  {:>8}  {:>9}  {:>9}  {:>9}",
        "disk_access_mode", "target op/s", "op rate", "% target", "mean ms", "p99 ms", "svc p99"
    )
}

/// One fixed-rate step in the summary (None for a closed-loop row).
pub fn rate_summary_row(mode: &str, r: &Row) -> Option<String> {
    let rc = r.rate?;
    let line = format!(
        "{mode:<16}  {:>12.0}  {:>12.0}  {:>7.1}%  {:>9.4}  {:>9.4}  {:>9.4}  {}",
        rc.target,
        r.op_rate,
        100.0 * r.op_rate / rc.target,
        r.mean,
        r.p99,
        rc.service_p99,
        if r.saturated() == Some(true) {
            "saturated"
        } else {
            ""
        }
    );
    Some(line.trim_end().to_string())
}

/// Minimum average improvement of op/s over the last [`SWEEP_WINDOW`] steps for the
/// sweep to go on.
pub const MIN_IMPROVEMENT: f64 = 0.05;
/// Number of step-to-step improvements averaged.
pub const SWEEP_WINDOW: usize = 3;

/// The thread count after `t` in cassandra-stress's sweep: double below 16, then x1.5
/// (4, 8, 16, 24, 36, 54, 81, 121, ...).
pub fn next_threads(t: usize) -> usize {
    if t < 16 {
        t * 2
    } else {
        t * 3 / 2
    }
}

/// Every thread count the sweep may visit from `min` up to `max`.
pub fn sweep_schedule(min: usize, max: usize) -> Vec<usize> {
    let mut v = vec![min];
    loop {
        let t = next_threads(*v.last().expect("not empty"));
        if t > max {
            return v;
        }
        v.push(t);
    }
}

/// Average relative op/s improvement over the last `window` steps (None until there are
/// `window + 1` steps).
pub fn average_improvement(rates: &[f64], window: usize) -> Option<f64> {
    if rates.len() < window + 1 {
        return None;
    }
    let tail = &rates[rates.len() - window - 1..];
    let sum: f64 = tail.windows(2).map(|p| (p[1] - p[0]) / p[0]).sum();
    Some(sum / window as f64)
}

/// Whether the sweep goes on after steps with these op/s: until throughput has stopped
/// growing, on average, by more than 5% over the last three steps.
pub fn keep_sweeping(rates: &[f64]) -> bool {
    average_improvement(rates, SWEEP_WINDOW).is_none_or(|i| i >= MIN_IMPROVEMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row {
        Row {
            id: step_id(8),
            threads: 8,
            ops: 1_234_567,
            op_rate: 123_456.78,
            mean: 0.0645,
            med: 0.05,
            p95: 0.12,
            p99: 0.25,
            p999: 1.5,
            max: 12.25,
            time: 10.0004,
            stderr: Some(0.012_345_6),
            rate: None,
        }
    }

    #[test]
    fn stderr_is_the_relative_standard_error_of_the_interval_rates() {
        assert_eq!(relative_stderr(&[]), None);
        assert_eq!(relative_stderr(&[100.0]), None);
        assert_eq!(relative_stderr(&[0.0, 0.0]), None);
        assert_eq!(relative_stderr(&[50.0; 5]), Some(0.0));
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample variance 32/7.
        let r = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        let want = (32.0f64 / 7.0 / 8.0).sqrt() / 5.0;
        assert!((relative_stderr(&r).unwrap() - want).abs() < 1e-12);
        // Scale-free: the same spread relative to the mean gives the same answer.
        let big: Vec<f64> = r.iter().map(|x| x * 1000.0).collect();
        assert!((relative_stderr(&big).unwrap() - want).abs() < 1e-12);
    }

    #[test]
    fn csv_rows_have_the_header_columns() {
        assert_eq!(
            csv_header(),
            "mode,threads,id,ops,op/s,mean,med,.95,.99,.999,max,time,stderr,target op/s,saturated,service .99"
        );
        assert_eq!(
            csv_row("mmap", &row()),
            "mmap,8,8 threadCount,1234567,123456.78,0.064500,0.050000,0.120000,0.250000,1.500000,12.250000,10.000,0.0123456,,,"
        );
        let none = Row {
            stderr: None,
            ..row()
        };
        assert!(csv_row("standard", &none).ends_with(",10.000,,,,"));
        let fixed = Row {
            id: rate_id(200_000.0),
            rate: Some(RateCols {
                target: 200_000.0,
                service_p99: 0.002,
            }),
            ..row()
        };
        assert!(
            csv_row("mmap", &fixed).starts_with("mmap,8,200000/s,1234567,"),
            "{}",
            csv_row("mmap", &fixed)
        );
        assert!(csv_row("mmap", &fixed).ends_with(",200000.00,true,0.002000"));
        assert_eq!(
            csv_row("mmap", &fixed).split(',').count(),
            csv_header().split(',').count()
        );
        assert_eq!(
            csv_row("mmap", &row()).split(',').count(),
            csv_header().split(',').count()
        );
    }

    #[test]
    fn table_rows_line_up_under_the_header() {
        let t = Table::for_threads(1000);
        let h = t.header();
        assert_eq!(h.split(',').map(str::trim).collect::<Vec<_>>(), COLUMNS);
        assert!(h.ends_with("time,   stderr"));
        let r = t.row(&row());
        assert_eq!(r.len(), h.len(), "\n{h}\n{r}");
        // Each comma sits under the header's comma.
        let commas = |s: &str| s.match_indices(',').map(|(i, _)| i).collect::<Vec<_>>();
        assert_eq!(commas(&r), commas(&h));
        assert!(r.contains("8 threadCount,    1234567,    123457,"), "{r}");
        assert!(r.ends_with(",  0.01235"), "{r}");
        assert!(t
            .row(&Row {
                stderr: None,
                ..row()
            })
            .ends_with(",        -"));
    }

    #[test]
    fn fixed_rate_rows_say_target_achieved_and_saturation() {
        assert_eq!(rate_id(20_000.0), "20000/s");
        assert_eq!(rate_id(0.5), "0.5/s");
        let mut h = crate::runner::new_histogram();
        h.record(2_000).unwrap();
        // 123,457 op/s achieved of 125,000 (98.8%): kept up.
        let kept = row().at_rate(125_000.0, &h);
        assert_eq!(kept.id, "125000/s");
        assert_eq!(kept.saturated(), Some(false));
        let line = kept.rate_line().unwrap();
        assert!(line.contains("achieved 123457 op/s (98.8%);"), "{line}");
        assert!(line.contains("0.0020 ms service time"), "{line}");
        // Of 200,000 (61.7%): saturated.
        let short = row().at_rate(200_000.0, &h);
        assert_eq!(short.saturated(), Some(true));
        assert!(short.rate_line().unwrap().contains(", SATURATED;"));
        let summary = rate_summary_row("mmap", &short).unwrap();
        assert!(summary.ends_with("saturated"), "{summary}");
        assert!(summary.contains("61.7%"), "{summary}");
        assert_eq!(row().saturated(), None);
        assert_eq!(row().rate_line(), None);
        assert_eq!(rate_summary_row("mmap", &row()), None);
        // The fixed-rate id fits the id column.
        let t = Table::for_threads(1);
        assert_eq!(t.row(&short).len(), t.header().len());
    }

    #[test]
    fn sweep_follows_cassandra_stress() {
        assert_eq!(
            sweep_schedule(4, 1000),
            [4, 8, 16, 24, 36, 54, 81, 121, 181, 271, 406, 609, 913]
        );
        assert_eq!(sweep_schedule(1, 5), [1, 2, 4]);
        assert_eq!(sweep_schedule(4, 4), [4]);
        // Needs four steps before it can stop.
        assert!(keep_sweeping(&[100.0, 100.0, 100.0]));
        // +10%, +10%, -2.5%: average 5.8% -> go on; +10%, +10%, -9%: 3.6% -> stop.
        assert!(keep_sweeping(&[100.0, 110.0, 121.0, 118.0]));
        assert!(!keep_sweeping(&[100.0, 110.0, 121.0, 110.0]));
        assert!(!keep_sweeping(&[100.0, 200.0, 202.0, 204.0, 206.0]));
        assert!(keep_sweeping(&[100.0, 100.0, 200.0, 210.0]));
    }
}
