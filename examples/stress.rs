//! stress: a load generator for segstore in the spirit of cassandra-stress.
//!
//! ```sh
//! cargo run --release --example stress -- read n=200000 --access mmap,standard --threads 1,2 --duration 3s
//! cargo run --release --example stress -- write n=100000 --threads 1,4 --duration 3s --sync group:1ms
//! cargo run --release --example stress -- 'mixed ratio(read=3,write=1)' --dist zipf --csv s.csv --plot s.svg
//! cargo run --release --example stress -- --help
//! ```
//!
//! Workloads `write`, `read` (loads the keys first) and `mixed ratio(read=R,write=W)`, over
//! `n=` keys chosen uniformly or by a Zipf law. Each step runs N client threads for
//! `--duration` or `--ops` and prints one row, `id, ops, op/s, mean, med, .95, .99, .999,
//! max, time, stderr` (latencies in ms; stderr is the standard error of the mean op/s over
//! the step's 1-second intervals, relative to it, as cassandra-stress prints it). Without
//! `--threads` the steps sweep 4, 8, 16, 24, 36, 54, 81, ... threads until op/s stops
//! growing by more than 5% on average over three steps, or `--max-threads`. With several
//! `--access` modes the sweep runs once per mode on the same data. The store lives in a
//! temporary directory unless `--dir` names one. Bad arguments print the usage and exit 2.
//!
//! By default each thread runs a closed loop (its next operation starts when the last
//! ends; latency from the operation's start). `--rate 20k/s,50k/s` runs a fixed-rate
//! step per rate instead (cassandra-stress's `fixed=N/s`): operations start at intended
//! times and latency is measured from those ([`pace`]), so a stall counts against every
//! operation that should have started during it; each row says the achieved op/s next
//! to the target and whether the step saturated, and `--plot` draws p99 against the
//! achieved op/s.
//!
//! What is loaded is a [`target::Target`]: by default the LSM table (`--target table`,
//! `Store::table`), whose commit log runs in the `--sync` mode (`periodic[:PERIOD]`,
//! `batch`, `group[:WINDOW]`); or, with `--target segment`, the level below (`Store` +
//! `SegmentSet` with a write buffer, flushes and compactions written here), which has no
//! commit log and ignores `--sync`.
#![allow(clippy::disallowed_methods)] // creates its output directories, outside the store's I/O boundary

// The modules live in `examples/stress/` (a crate root's modules would otherwise be
// looked up beside it, in `examples/`, where cargo would take each for an example).
#[path = "stress/cli.rs"]
mod cli;
#[path = "stress/dist.rs"]
mod dist;
#[path = "stress/pace.rs"]
mod pace;
#[path = "stress/plot.rs"]
mod plot;
#[path = "stress/rate_plot.rs"]
mod rate_plot;
#[path = "stress/report.rs"]
mod report;
#[path = "stress/runner.rs"]
mod runner;
#[path = "stress/target.rs"]
mod target;

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use clap::{CommandFactory, Parser};
use segstore::DiskAccessMode;

use cli::{Cli, Settings, StepLimit, Threads};
use dist::{write_key, KeyChooser, Rng};
use report::{Row, Table};
use runner::{run_step, StepSpec};
use target::{Result, Target, TargetKind};

fn main() -> ExitCode {
    ExitCode::from(cli_main(std::env::args_os()))
}

/// The whole tool on `args` (program name first). Usage errors print the message and
/// the usage and exit the process with code 2 (clap's convention), `--help` exits with
/// 0; otherwise returns 0, or 1 after printing a run's error.
fn cli_main(args: impl IntoIterator<Item = std::ffi::OsString>) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help
        Err(e) => usage_error(e),
    };
    let settings = Settings::from_cli(cli).unwrap_or_else(|msg| {
        usage_error(Cli::command().error(clap::error::ErrorKind::ValueValidation, msg))
    });
    match run(&settings) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("stress: error: {e}");
            1
        }
    }
}

/// Print a usage error, with the usage line even where clap's message has none (as for
/// a bad `--sync` value), and exit with code 2.
fn usage_error(e: clap::Error) -> ! {
    let _ = e.print();
    if !e.render().to_string().contains("Usage:") {
        eprintln!("\n{}", Cli::command().render_usage());
    }
    std::process::exit(2)
}

/// The steps of one access mode.
struct ModeResult {
    mode: DiskAccessMode,
    rows: Vec<Row>,
    misses: u64,
}

fn run(s: &Settings) -> Result<()> {
    let tmp;
    let dir = match &s.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("segstore-stress")
                .tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    // Open the outputs now, so a bad path fails before the run rather than after it.
    let create =
        |flag: &str, p: &Path| File::create(p).map_err(|e| format!("{flag} {}: {e}", p.display()));
    let csv = s.csv.as_deref().map(|p| create("--csv", p)).transpose()?;
    let plot = s.plot.as_deref().map(|p| create("--plot", p)).transpose()?;
    print_settings(s, &dir);
    let keys = KeyChooser::new(s.keys, s.dist);
    let table = Table::for_threads(s.max_threads());
    let opts = target::Options {
        flush_every: s.flush_every,
        compact_every: s.compact_every,
        sync: s.sync,
    };
    let mut results = Vec::new();
    for (i, &mode) in s.modes.iter().enumerate() {
        let t = target::open(s.target, &dir, mode, opts)?;
        let res = run_mode(&*t, s, mode, i == 0, &keys, &table);
        // Close even after an error: the buffer is flushed and the store unlocked.
        let closed = t.close();
        results.push(res?);
        closed?;
    }
    print_summary(s, &results);
    if let (Some(mut f), Some(p)) = (csv, &s.csv) {
        writeln!(f, "{}", report::csv_header())?;
        for m in &results {
            for r in &m.rows {
                writeln!(f, "{}", report::csv_row(m.mode.as_str(), r))?;
            }
        }
        println!("CSV:  {}", p.display());
    }
    if let (Some(mut f), Some(p)) = (plot, &s.plot) {
        f.write_all(draw(s, &results).as_bytes())?;
        println!("Plot: {}", p.display());
    }
    Ok(())
}

/// The SVG of a run: op/s and p99 against threads (closed loop), or p99 against the
/// achieved op/s (fixed rate).
fn draw(s: &Settings, results: &[ModeResult]) -> String {
    let title = format!("segstore stress: {}", s.workload);
    let mode_text = if s.rates.is_empty() {
        String::new()
    } else {
        format!(", {} threads at fixed rates", s.max_threads())
    };
    let subtitle = format!(
        "{} keys of {} B, values of {} B, {} key choice, {}, {}{mode_text}",
        s.keys,
        s.key_size,
        s.value_size,
        s.dist,
        step_text(s.limit),
        target_text(s)
    );
    if !s.rates.is_empty() {
        let series: Vec<rate_plot::RateSeries> = results
            .iter()
            .map(|m| rate_plot::RateSeries {
                mode: m.mode,
                points: m
                    .rows
                    .iter()
                    .filter_map(|r| {
                        Some(rate_plot::RatePoint {
                            target: r.rate?.target,
                            achieved: r.op_rate,
                            p99: r.p99,
                            saturated: r.saturated()?,
                        })
                    })
                    .collect(),
            })
            .collect();
        return rate_plot::svg(&title, &subtitle, &series);
    }
    let series: Vec<plot::Series> = results
        .iter()
        .map(|m| plot::Series {
            mode: m.mode,
            points: m
                .rows
                .iter()
                .map(|r| (r.threads, r.op_rate, r.p99))
                .collect(),
        })
        .collect();
    plot::svg(&title, &subtitle, &series)
}

fn step_text(limit: StepLimit) -> String {
    match limit {
        StepLimit::Time(d) => format!("{:?} per step", d),
        StepLimit::Ops(n) => format!("{n} ops per step"),
    }
}

/// The target, with the sync mode of the table's commit log.
fn target_text(s: &Settings) -> String {
    match s.target {
        TargetKind::Table => format!(
            "{} target, commit log sync {}",
            s.target,
            s.sync.unwrap_or_default()
        ),
        TargetKind::Segment => format!("{} target", s.target),
    }
}

fn print_settings(s: &Settings, dir: &Path) {
    println!("******************** Stress Settings ********************");
    println!("Workload     : {}", s.workload);
    println!(
        "Keys         : {} keys of {} bytes, values of {} bytes, {} key choice",
        s.keys, s.key_size, s.value_size, s.dist
    );
    match s.target {
        TargetKind::Table => {
            println!(
                "Target       : {} (table {:?} through Store::table, default table settings; a major compaction between steps)",
                s.target,
                target::TABLE
            );
            println!(
                "Sync         : {} (commit log{})",
                s.sync.unwrap_or_default(),
                if s.sync.is_none() {
                    ", the store's default"
                } else {
                    ""
                }
            );
        }
        TargetKind::Segment => println!(
            "Target       : {} (table {:?}; flush every {} writes, merge all at {} segments)",
            s.target,
            target::TABLE,
            s.flush_every,
            s.compact_every
        ),
    }
    let modes: Vec<&str> = s.modes.iter().map(|m| m.as_str()).collect();
    println!("Access modes : {}", modes.join(", "));
    match &s.threads {
        Threads::Fixed(v) => {
            let v: Vec<String> = v.iter().map(|t| t.to_string()).collect();
            println!("Threads      : {}", v.join(", "));
        }
        Threads::Sweep { min, max } => println!(
            "Threads      : sweep from {min} up to {max} ({}, ...), until op/s grows less than {:.0}% on average over {} steps",
            report::sweep_schedule(*min, *max)
                .iter()
                .take(6)
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            report::MIN_IMPROVEMENT * 100.0,
            report::SWEEP_WINDOW
        ),
    }
    if s.rates.is_empty() {
        println!("Mode         : closed loop (each thread starts its next operation when the last ends; latency from the operation's start)");
    } else {
        let rates: Vec<String> = s.rates.iter().map(|&r| report::rate_id(r)).collect();
        println!(
            "Mode         : fixed rate {} (operations start on a schedule; latency from the intended start, so stalls are not omitted; saturated below {:.0}% of the target)",
            rates.join(", "),
            pace::SATURATED_BELOW * 100.0
        );
    }
    println!("Step         : {}", step_text(s.limit));
    if let (Some(sync), TargetKind::Segment) = (s.sync, s.target) {
        println!(
            "Sync         : {sync}: ignored; applies only to the table target (commit log), the {} target has none",
            s.target
        );
    }
    println!(
        "Directory    : {}{}",
        dir.display(),
        if s.dir.is_none() { " (temporary)" } else { "" }
    );
}

/// Keys written together while loading (one commit log record for the table target).
const LOAD_BATCH: usize = 1000;

/// Write every key once, in order, through the target in batches of [`LOAD_BATCH`],
/// then settle it.
fn load(t: &dyn Target, s: &Settings) -> Result<()> {
    println!(
        "\nLoading {} keys first: the {} workload reads existing keys.",
        s.keys, s.workload
    );
    let start = Instant::now();
    let mut key = vec![0u8; s.key_size];
    let mut value = vec![0u8; s.value_size];
    Rng::new(s.seed).fill(&mut value);
    let mut shown = start;
    let mut batch = Vec::with_capacity(LOAD_BATCH);
    for i in 0..s.keys {
        write_key(i, &mut key);
        batch.push((key.clone(), value.clone()));
        if batch.len() == LOAD_BATCH || i + 1 == s.keys {
            t.write_all(&batch)?;
            batch.clear();
        }
        if i % 4096 == 0 && shown.elapsed().as_secs_f64() >= 1.0 {
            shown = Instant::now();
            runner::show_progress(&format!("  loading: {i}/{} keys", s.keys));
        }
    }
    t.flush()?;
    if shown != start {
        runner::clear_progress();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "Loaded {} keys in {secs:.1} s ({:.0} writes/s); {}",
        s.keys,
        s.keys as f64 / secs,
        t.describe()
    );
    Ok(())
}

/// Run the steps of one access mode, printing a row after each; the first mode of a
/// workload that reads loads the keys before.
fn run_mode(
    t: &dyn Target,
    s: &Settings,
    mode: DiskAccessMode,
    first: bool,
    keys: &KeyChooser,
    table: &Table,
) -> Result<ModeResult> {
    if first && s.workload.needs_load() {
        load(t, s)?;
    }
    let r = mode.resolve();
    println!(
        "\n===== disk_access_mode {mode}: data files {}, index files {} =====",
        r.data, r.index
    );
    println!("{}", table.header());
    let mut out = ModeResult {
        mode,
        rows: Vec::new(),
        misses: 0,
    };
    let mut step = |threads: usize, rate: Option<f64>| -> Result<f64> {
        // Start every step from a settled target (cassandra-stress pauses instead).
        t.flush()?;
        let spec = StepSpec {
            label: mode.as_str(),
            threads,
            limit: s.limit,
            weights: s.workload.weights(),
            keys,
            key_size: s.key_size,
            value_size: s.value_size,
            seed: s.seed,
            rate,
        };
        let r = run_step(t, &spec)?;
        let mut row = Row::new(threads, r.ops, r.elapsed, &r.hist, &r.intervals);
        if let (Some(target), Some(service)) = (rate, &r.service) {
            row = row.at_rate(target, service);
        }
        println!("{}", table.row(&row));
        if let Some(line) = row.rate_line() {
            println!("{line}");
        }
        let rate = row.op_rate;
        out.rows.push(row);
        out.misses += r.misses;
        Ok(rate)
    };
    match &s.threads {
        Threads::Fixed(list) if !s.rates.is_empty() => {
            for &rate in &s.rates {
                step(list[0], Some(rate))?;
            }
        }
        Threads::Fixed(list) => {
            for &n in list {
                step(n, None)?;
            }
        }
        Threads::Sweep { min, max } => {
            let (mut n, mut rates) = (*min, Vec::new());
            loop {
                rates.push(step(n, None)?);
                if !report::keep_sweeping(&rates) {
                    let avg = report::average_improvement(&rates, report::SWEEP_WINDOW)
                        .unwrap_or_default();
                    println!(
                        "Stopped: op/s grew {:.1}% on average over the last {} steps (less than {:.0}%).",
                        avg * 100.0,
                        report::SWEEP_WINDOW,
                        report::MIN_IMPROVEMENT * 100.0
                    );
                    break;
                }
                let next = report::next_threads(n);
                if next > *max {
                    println!(
                        "Stopped: the next step ({next} threads) is past --max-threads {max}."
                    );
                    break;
                }
                n = next;
            }
        }
    }
    println!("Target: {}", t.describe());
    Ok(out)
}

fn print_summary(s: &Settings, results: &[ModeResult]) {
    let reads = s.workload.weights().0 > 0;
    println!("\n===== Results =====");
    if !s.rates.is_empty() {
        // No "best step" at fixed rates: the most op/s is often a saturated step.
        println!("{}", report::rate_summary_header());
        for m in results {
            for r in &m.rows {
                if let Some(line) = report::rate_summary_row(m.mode.as_str(), r) {
                    println!("{line}");
                }
            }
        }
        print_total(results);
        return;
    }
    println!(
        "{:<16}  {:>16}  {:>10}  {:>9}  {:>5}  {:>12}{}",
        "disk_access_mode",
        "best step",
        "op/s",
        "p99 ms",
        "steps",
        "total ops",
        if reads { "  misses" } else { "" }
    );
    let best_of = |m: &ModeResult| {
        m.rows
            .iter()
            .max_by(|a, b| a.op_rate.total_cmp(&b.op_rate))
            .cloned()
    };
    for m in results {
        let Some(b) = best_of(m) else { continue };
        println!(
            "{:<16}  {:>16}  {:>10.0}  {:>9.4}  {:>5}  {:>12}{}",
            m.mode.as_str(),
            b.id,
            b.op_rate,
            b.p99,
            m.rows.len(),
            m.rows.iter().map(|r| r.ops).sum::<u64>(),
            if reads {
                format!("  {:>6}", m.misses)
            } else {
                String::new()
            }
        );
    }
    let best = results
        .iter()
        .filter_map(|m| best_of(m).map(|b| (m.mode, b)))
        .max_by(|a, b| a.1.op_rate.total_cmp(&b.1.op_rate));
    if let Some((mode, b)) = best {
        println!(
            "Best: disk_access_mode {mode} at {}: {:.0} op/s, p99 {:.4} ms.",
            b.id, b.op_rate, b.p99
        );
    }
    print_total(results);
}

fn print_total(results: &[ModeResult]) {
    let rows = || results.iter().flat_map(|m| &m.rows);
    let total: u64 = rows().map(|r| r.ops).sum();
    let secs: f64 = rows().map(|r| r.time).sum();
    println!(
        "Total: {total} ops in {} steps ({secs:.1} s).",
        rows().count()
    );
}

/// The tool as a process: the test binary runs itself as the CLI (as
/// `tests/crash_kill_lifecycle.rs` runs its child), since an example's binary cannot be
/// located from a test.
#[cfg(test)]
mod process_tests {
    use std::process::{Command, Output};

    const ARGS: &str = "STRESS_CLI_ARGS";

    /// The child: runs the CLI on the arguments in `STRESS_CLI_ARGS` and exits with its code.
    #[test]
    #[ignore = "spawned by the tests below"]
    fn cli_child() {
        let Ok(args) = std::env::var(ARGS) else {
            return;
        };
        let args = std::iter::once("stress").chain(args.split('\x1f'));
        let code = super::cli_main(args.map(Into::into));
        std::process::exit(code.into());
    }

    fn stress(args: &[&str]) -> Output {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "process_tests::cli_child",
                "--ignored",
                "--nocapture",
            ])
            .env(ARGS, args.join("\x1f"))
            .output()
            .unwrap()
    }

    #[test]
    fn bad_arguments_print_the_usage_and_exit_2() {
        for args in [
            &["scan"][..],
            &["mixed", "ratio(read=3,write=x)"],
            &["read", "--access", "mmap,fast"],
            &["read", "--threads", "0"],
            &["read", "--sync", "always"],
            &["write", "--sync", "group:soon"],
            &["write", "--duration", "soon"],
            &["read", "--no-such-flag"],
            &["read", "--rate", "fast"],
            &["read", "--rate", "0/s"],
        ] {
            let out = stress(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains("error:") && err.contains("Usage: stress"),
                "{args:?}: {err}"
            );
            assert!(!err.contains("panicked"), "{args:?}: {err}");
        }
        let out = stress(&["--help"]);
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).contains("ratio(read=R,write=W)"));
    }

    #[test]
    fn a_short_run_prints_rows_and_writes_csv_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
        let (csv, svg, data) = (p("s.csv"), p("s.svg"), p("data"));
        let out = stress(&[
            "mixed ratio(read=3,write=1)",
            "n=3000",
            "--threads",
            "1,2",
            "--ops",
            "4000",
            "--access",
            "mmap,standard",
            "--sync",
            "group:100us",
            "--csv",
            &csv,
            "--plot",
            &svg,
            "--dir",
            &data,
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("Loading 3000 keys first"), "{stdout}");
        assert!(stdout.contains("Target       : table"), "{stdout}");
        assert!(stdout.contains("Sync         : group:100us"), "{stdout}");
        assert!(stdout.contains("commit log group:100us:"), "{stdout}");
        assert!(stdout.contains("id,        ops,      op/s,"), "{stdout}");
        assert_eq!(
            stdout.matches("2 threadCount,       4000,").count(),
            2,
            "{stdout}"
        );
        assert!(stdout.contains("Best: disk_access_mode "), "{stdout}");
        let csv = std::fs::read_to_string(&csv).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5, "{csv}");
        assert!(lines[1].starts_with("mmap,1,1 threadCount,4000,"), "{csv}");
        assert!(
            lines[4].starts_with("standard,2,2 threadCount,4000,"),
            "{csv}"
        );
        let svg = std::fs::read_to_string(&svg).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 4);
    }

    #[test]
    fn a_fixed_rate_run_reports_target_achieved_and_plots_p99_against_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
        let (csv, svg) = (p("r.csv"), p("r.svg"));
        // 1e9 op/s is out of any machine's reach: that step saturates.
        let out = stress(&[
            "read",
            "n=2000",
            "--rate",
            "500/s,1000m/s",
            "--threads",
            "2",
            "--ops",
            "200",
            "--access",
            "standard,mmap",
            "--csv",
            &csv,
            "--plot",
            &svg,
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("Mode         : fixed rate 500/s, 1000000000/s"),
            "{stdout}"
        );
        assert!(stdout.contains("Threads      : 2"), "{stdout}");
        let row = format!("500/s, {:>10},", 200);
        assert_eq!(stdout.matches(&row).count(), 2, "{stdout}");
        assert_eq!(
            stdout
                .matches("fixed rate 1000000000 op/s: achieved")
                .count(),
            2
        );
        assert!(stdout.contains("SATURATED; p99"), "{stdout}");
        assert!(stdout.contains("target op/s"), "{stdout}");
        assert!(!stdout.contains("Best:"), "{stdout}");
        let csv = std::fs::read_to_string(&csv).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5, "{csv}");
        assert!(lines[1].starts_with("standard,2,500/s,200,"), "{csv}");
        assert!(lines[2].contains(",1000000000.00,true,"), "{csv}");
        let svg = std::fs::read_to_string(&svg).unwrap();
        assert_eq!(svg.matches(r#"<polyline class="rate""#).count(), 2);
        assert!(svg.contains("achieved throughput"));
    }

    #[test]
    fn the_segment_target_runs_and_ignores_sync() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data").to_string_lossy().into_owned();
        let out = stress(&[
            "mixed ratio(read=1,write=1)",
            "n=2000",
            "--threads",
            "2",
            "--ops",
            "2000",
            "--target",
            "segments",
            "--flush-every",
            "300",
            "--sync",
            "batch",
            "--dir",
            &data,
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("Target       : segment"), "{stdout}");
        assert!(stdout.contains("batch: ignored"), "{stdout}");
        assert!(stdout.contains("2 threadCount,       2000,"), "{stdout}");
    }
}
