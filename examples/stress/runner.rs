//! One step: N client threads issue operations against a [`Target`] until the time or
//! the operation budget runs out, while the main thread samples the op count every
//! second (for the op/s standard error) and redraws a progress line on stderr.
//!
//! Each worker times every operation into its own histogram and hands it over every
//! 100 ms (one lock per thread per 100 ms), and publishes its op count in its own cache
//! line, so measuring costs no shared writes per operation.
//!
//! In a closed loop (the default) a worker starts its next operation when the last
//! ends and times it from its start. At a fixed rate (`--rate`, [`crate::pace`]) it
//! starts each operation at its intended time and times it from then, and also keeps
//! the service time (from the actual start) for comparison.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;

use crate::cli::StepLimit;
use crate::dist::{write_key, KeyChooser, Rng};
use crate::pace;
use crate::target::{Result, Target};

/// What one step runs.
pub struct StepSpec<'a> {
    /// Shown on the progress line (the access mode).
    pub label: &'a str,
    /// Client threads.
    pub threads: usize,
    /// When the step ends.
    pub limit: StepLimit,
    /// (read, write) weights.
    pub weights: (u64, u64),
    /// Key choice.
    pub keys: &'a KeyChooser,
    /// Key size, bytes.
    pub key_size: usize,
    /// Value size, bytes.
    pub value_size: usize,
    /// Generator seed.
    pub seed: u64,
    /// Fixed-rate mode: total op/s over all threads (None: a closed loop).
    pub rate: Option<f64>,
}

/// What one step measured.
pub struct StepResult {
    /// Operations completed.
    pub ops: u64,
    /// From the start until the last worker stopped.
    pub elapsed: Duration,
    /// Latency of every operation, nanoseconds.
    pub hist: Histogram<u64>,
    /// Op/s of each whole 1-second interval.
    pub intervals: Vec<f64>,
    /// Reads that found no value.
    pub misses: u64,
    /// Fixed-rate mode: each operation's service time (from its actual start), ns.
    pub service: Option<Histogram<u64>>,
}

/// An op counter alone in its cache line.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

/// A latency histogram from 1 ns to one hour at 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("constant, valid bounds")
}

const TICK: Duration = Duration::from_secs(1);
const HANDOVER: Duration = Duration::from_millis(100);

struct Shared<'a> {
    spec: &'a StepSpec<'a>,
    target: &'a dyn Target,
    stop: AtomicBool,
    /// Operations not yet claimed (`--ops`); may go negative.
    tickets: AtomicI64,
    batch: i64,
    counters: Vec<Counter>,
    running: AtomicUsize,
    recent: Mutex<Histogram<u64>>,
    /// Service times, fixed-rate mode only.
    service: Mutex<Histogram<u64>>,
    misses: AtomicU64,
    error: Mutex<Option<String>>,
    /// When the last worker stopped.
    finished: Mutex<Option<Instant>>,
}

/// Run one step.
pub fn run_step(target: &dyn Target, spec: &StepSpec<'_>) -> Result<StepResult> {
    let (tickets, batch) = match spec.limit {
        StepLimit::Ops(n) => {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            (n, (n / (spec.threads as i64 * 64)).clamp(1, 1024))
        }
        StepLimit::Time(_) => (i64::MAX, 0),
    };
    let sh = Shared {
        spec,
        target,
        stop: AtomicBool::new(false),
        tickets: AtomicI64::new(tickets),
        batch,
        counters: (0..spec.threads).map(|_| Counter::default()).collect(),
        running: AtomicUsize::new(spec.threads),
        recent: Mutex::new(new_histogram()),
        service: Mutex::new(new_histogram()),
        misses: AtomicU64::new(0),
        error: Mutex::new(None),
        finished: Mutex::new(None),
    };
    let mut total = new_histogram();
    let mut intervals = Vec::new();
    let start = Instant::now();
    let mut shown = false;
    std::thread::scope(|s| -> Result<()> {
        for tid in 0..spec.threads {
            let sh = &sh;
            let spawned = std::thread::Builder::new()
                .name(format!("stress-{tid}"))
                .spawn_scoped(s, move || sh.worker(tid, start));
            if let Err(e) = spawned {
                // Stop the threads already started; the scope waits for them.
                sh.stop.store(true, Ordering::Relaxed);
                return Err(format!("cannot start client thread {tid}: {e}").into());
            }
        }
        let deadline = match spec.limit {
            StepLimit::Time(d) => Some(start + d),
            StepLimit::Ops(_) => None,
        };
        // Samples on a fixed one-second grid from the start, so a step of whole seconds
        // has that many whole intervals; each rate divides by the time really elapsed.
        let mut next_tick = start + TICK;
        let (mut last_at, mut last_ops) = (start, 0u64);
        let mut p99 = 0.0;
        loop {
            let now = Instant::now();
            if now >= next_tick {
                let ops = sh.ops();
                intervals.push((ops - last_ops) as f64 / (now - last_at).as_secs_f64());
                (last_at, last_ops) = (now, ops);
                while next_tick <= now {
                    next_tick += TICK;
                }
                let mut recent = sh.recent.lock();
                if !recent.is_empty() {
                    p99 = recent.value_at_quantile(0.99) as f64 / 1e6;
                }
                total.add(&*recent).expect("same bounds");
                recent.reset();
                drop(recent);
                sh.progress(now - start, ops, intervals.last().copied(), p99);
                shown = true;
            }
            if deadline.is_some_and(|d| now >= d) {
                sh.stop.store(true, Ordering::Relaxed);
            }
            if sh.running.load(Ordering::Acquire) == 0 {
                break;
            }
            let wake = deadline.map_or(next_tick, |d| d.min(next_tick));
            std::thread::sleep(
                wake.saturating_duration_since(now)
                    .min(Duration::from_millis(20)),
            );
        }
        Ok(())
    })?;
    if shown {
        clear_progress();
    }
    if let Some(e) = sh.error.lock().take() {
        return Err(e.into());
    }
    total.add(&*sh.recent.lock()).expect("same bounds");
    let end = sh.finished.lock().unwrap_or(start);
    Ok(StepResult {
        ops: sh.ops(),
        elapsed: end - start,
        hist: total,
        intervals,
        misses: sh.misses.load(Ordering::Relaxed),
        service: spec.rate.map(|_| sh.service.into_inner()),
    })
}

impl Shared<'_> {
    fn ops(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .sum()
    }

    /// Claim up to `batch` operations; 0 when the budget is spent.
    fn claim(&self) -> u64 {
        let prev = self.tickets.fetch_sub(self.batch, Ordering::Relaxed);
        prev.clamp(0, self.batch) as u64
    }

    fn worker(&self, tid: usize, start: Instant) {
        let spec = self.spec;
        let mut rng = Rng::new(
            spec.seed
                .wrapping_add((spec.threads as u64) << 32)
                .wrapping_add(tid as u64),
        );
        let mut op = Op::new(spec, &mut rng);
        let mut hist = new_histogram();
        let mut service = new_histogram();
        let schedule = spec
            .rate
            .map(|r| pace::Schedule::for_thread(r, tid, spec.threads));
        let mut clock = pace::RealClock::new(start);
        let mut last_handover = Instant::now();
        let mut done = 0u64;
        let mut budget = if self.batch == 0 { u64::MAX } else { 0 };
        let time_limited = self.batch == 0;
        while !self.stop.load(Ordering::Relaxed) {
            if budget == 0 {
                budget = self.claim();
                if budget == 0 {
                    break;
                }
            }
            let res = match &schedule {
                Some(sched) => {
                    let (res, t) = pace::paced(&mut clock, sched, done, |_| {
                        op.run(self.target, &mut rng, done)
                    });
                    pace::record(&mut hist, &mut service, t);
                    res
                }
                None => {
                    let t0 = Instant::now();
                    let res = op.run(self.target, &mut rng, done);
                    hist.saturating_record((t0.elapsed()).as_nanos() as u64);
                    res
                }
            };
            if let Err(e) = res {
                self.error.lock().get_or_insert_with(|| e.to_string());
                self.stop.store(true, Ordering::Relaxed);
                break;
            }
            done += 1;
            if !time_limited {
                budget -= 1;
            }
            self.counters[tid].0.store(done, Ordering::Relaxed);
            let now = Instant::now();
            if now - last_handover >= HANDOVER {
                self.recent.lock().add(&hist).expect("same bounds");
                hist.reset();
                last_handover = now;
            }
        }
        self.recent.lock().add(&hist).expect("same bounds");
        self.service.lock().add(&service).expect("same bounds");
        self.misses.fetch_add(op.misses, Ordering::Relaxed);
        let now = Instant::now();
        let mut finished = self.finished.lock();
        *finished = Some(finished.map_or(now, |f| f.max(now)));
        drop(finished);
        self.running.fetch_sub(1, Ordering::Release);
    }

    fn progress(&self, elapsed: Duration, ops: u64, rate: Option<f64>, p99: f64) {
        let spec = self.spec;
        let budget = match spec.limit {
            StepLimit::Time(d) => format!("{:.0}/{:.0}s", elapsed.as_secs_f64(), d.as_secs_f64()),
            StepLimit::Ops(n) => format!("{ops}/{n} ops"),
        };
        let target = spec.rate.map_or(String::new(), |r| format!(" of {r:.0}"));
        show_progress(&format!(
            "  {} {} threads: {budget}, {ops} ops, {:.0}{target} op/s, p99 {p99:.4} ms (last 1s)",
            spec.label,
            spec.threads,
            rate.unwrap_or(0.0),
        ));
    }
}

/// One worker's operation generator: key choice, read/write mix, value buffer.
struct Op<'a> {
    spec: &'a StepSpec<'a>,
    key: Vec<u8>,
    value: Vec<u8>,
    misses: u64,
}

impl<'a> Op<'a> {
    fn new(spec: &'a StepSpec<'a>, rng: &mut Rng) -> Op<'a> {
        let mut value = vec![0u8; spec.value_size];
        rng.fill(&mut value);
        Op {
            spec,
            key: vec![0u8; spec.key_size],
            value,
            misses: 0,
        }
    }

    /// Choose and run the next operation (the `n`th of this worker).
    fn run(&mut self, target: &dyn Target, rng: &mut Rng, n: u64) -> Result<()> {
        let (reads, writes) = self.spec.weights;
        write_key(self.spec.keys.next(rng), &mut self.key);
        let is_read = writes == 0 || (reads > 0 && rng.below(reads + writes) < reads);
        if is_read {
            let found = target.read(&self.key)?;
            self.misses += u64::from(!found);
            Ok(())
        } else {
            let stamp = n.to_le_bytes();
            let k = self.value.len().min(8);
            self.value[..k].copy_from_slice(&stamp[..k]);
            target.write(&self.key, &self.value)
        }
    }
}

const PROGRESS_WIDTH: usize = 90;

/// Draw `line` over the previous progress line on stderr.
pub fn show_progress(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r{line:<PROGRESS_WIDTH$}");
    let _ = err.flush();
}

/// Erase the progress line.
pub fn clear_progress() {
    show_progress("");
    eprint!("\r");
}
