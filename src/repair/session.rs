//! A repair session: build a Merkle tree on every replica, diff them at a coordinator,
//! stream the rows of differing ranges both ways, apply, and check the roots agree.
//!
//! Roles (all in this process; each step moves encoded frames over the [`Transport`], so
//! a networked database runs the same steps on its nodes):
//! 1. **Trees.** Every replica builds its tree and sends a [`TreeMessage`] to the
//!    coordinator (the first replica). [`Parallelism::Parallel`] builds all trees at once
//!    from live data. [`Parallelism::Sequential`] first takes an ephemeral snapshot on
//!    every replica (so all trees describe nearly the same moment), then builds the trees
//!    one replica at a time from the snapshots, clearing each snapshot right after its
//!    tree is built: while the snapshot's files are still mapped the deleter defers their
//!    deletion (the Windows rule), and [`SnapshotReport`] shows the state before and after
//!    the mappings close.
//! 2. **Plan.** The coordinator checks that every tree is of the same table, settings
//!    fingerprint and shape ([`Error::RepairMismatch`] otherwise), finds the leaves where
//!    not all replicas agree and whether the range tombstone digests differ, and sends
//!    every replica a [`StreamPlan`](super::StreamPlan) (who sends what to whom:
//!    `stream.rs`).
//! 3. **Stream.** Every replica reads its rows in its plan's ranges once, sends them in
//!    [`RowBatch`](super::RowBatch)es (with its range tombstones to the replicas whose
//!    set differs), then receives the batches its plan expects and applies them (the newest version wins,
//!    see [`super::cmp_versions`]; range tombstones are united). Every replica reads
//!    before it applies, so what is streamed is the data the trees describe (plus later
//!    writes).
//! 4. **Verify.** Trees are rebuilt from live data: after a repair with no concurrent
//!    writes, every root is equal.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

use super::merkle::{range_digest, MerkleBuilder, MerkleTree, Shape, TokenRange};
use super::message::{Message, TreeMessage};
use super::report::{RepairReport, SnapshotReport, SnapshotStatus, StreamStats, Timings};
use super::stream::{plan, stream_in, stream_out, Planned};
use super::transport::{send_message, try_recv_message, Transport};
use super::{ReplicaId, Row};
use crate::format::ranges::RangeTombstones;

/// Rows from a source, in any order.
pub type RowIter<'a> = Box<dyn Iterator<Item = Result<Row>> + 'a>;

/// Something that yields resolved rows: one row per key, the winning version,
/// tombstones included, and its range tombstones. A cell a range tombstone of the
/// source deletes is not a row (so two sources that agree on what is deleted agree on
/// their rows, however far each has compacted).
pub trait RowSource {
    /// The rows whose token lies in any of `ranges` (sorted, coalesced), in any order.
    fn rows(&self, ranges: &[TokenRange]) -> Result<RowIter<'_>>;

    /// Every range tombstone of the source (whatever the token ranges: a range
    /// tombstone spans every token). The default is none, right for sources that hold
    /// none.
    fn range_tombstones(&self) -> Result<RangeTombstones> {
        Ok(RangeTombstones::new())
    }
}

/// One replica of a table, as repair sees it. [`RowSource::rows`] reads live data.
pub trait Replica: RowSource + Sync {
    /// Identity of this replica within the session (distinct across replicas).
    fn id(&self) -> ReplicaId;

    /// Name of the table; all replicas of a session must hold the same table.
    fn table(&self) -> &str;

    /// Fingerprint of the table settings that must agree for rows to mean the same on
    /// every replica (schema, conflict rule, token function).
    fn table_config_fingerprint(&self) -> u64;

    /// Merge `rows` (any order, possibly several versions of a key) into the table:
    /// for each key the winning version by [`super::cmp_versions`] is kept, timestamps
    /// unchanged.
    fn apply(&self, rows: Vec<Row>) -> Result<()>;

    /// Merge range tombstones into the table, each with its own timestamp (as
    /// [`crate::Table::delete_range_at`]): afterwards [`RowSource::range_tombstones`]
    /// is the union of what it was and `set` (the newest timestamp per key), and the
    /// cells they delete are no longer rows.
    fn apply_range_tombstones(&self, set: &RangeTombstones) -> Result<()>;

    /// Take an ephemeral snapshot of this table under `tag` (cleared at close anyway).
    fn snapshot_ephemeral(&self, tag: &str) -> Result<()>;

    /// Open snapshot `tag` for reading. Its files stay open (mapped, per the access
    /// mode) until the returned source is dropped.
    fn open_snapshot(&self, tag: &str) -> Result<Box<dyn RowSource + '_>>;

    /// Clear snapshot `tag`. Files still mapped are deleted when their last mapping
    /// closes.
    fn clear_snapshot(&self, tag: &str) -> Result<()>;

    /// Mappings and pending deletions of snapshot `tag`'s files, for reports.
    fn snapshot_status(&self, tag: &str) -> SnapshotStatus;
}

/// How trees are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Parallelism {
    /// Snapshot every replica, then build trees from the snapshots one at a time.
    Sequential,
    /// Build every tree at once, from live data.
    #[default]
    Parallel,
}

impl fmt::Display for Parallelism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Parallelism::Sequential => "sequential",
            Parallelism::Parallel => "parallel",
        })
    }
}

/// Settings of one session.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RepairOptions {
    /// Tree depth (`2^depth` leaves, at most [`super::MAX_DEPTH`]). Deeper trees stream
    /// fewer needless rows and cost more memory (16 bytes a leaf on the wire).
    pub depth: u8,
    /// How trees are built.
    pub parallelism: Parallelism,
    /// The token range to repair.
    pub range: TokenRange,
    /// Most rows in one batch.
    pub batch_rows: usize,
    /// A batch is sent once its keys and values pass this many bytes.
    pub batch_bytes: usize,
    /// How long to wait for any one message.
    pub timeout: Duration,
    /// Rebuild trees after streaming and report the roots.
    pub verify: bool,
}

impl Default for RepairOptions {
    fn default() -> Self {
        RepairOptions {
            depth: 15,
            parallelism: Parallelism::default(),
            range: TokenRange::FULL,
            batch_rows: 4096,
            batch_bytes: 1 << 20,
            timeout: Duration::from_secs(60),
            verify: true,
        }
    }
}

/// Runs repair sessions.
///
/// ```
/// use segstore::repair::{
///     LocalTransport, Parallelism, RepairOptions, RepairSession, ReplicaId, Row, SegmentReplica,
/// };
/// use segstore::{Config, Store};
///
/// # fn main() -> segstore::Result<()> {
/// let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
/// let sa = Store::open(da.path(), Config::default())?;
/// let sb = Store::open(db.path(), Config::default())?;
/// let a = SegmentReplica::new(ReplicaId(1), &sa, "users")?;
/// let b = SegmentReplica::new(ReplicaId(2), &sb, "users")?;
/// let row = |k: &str, v: &str, ts| Row { key: k.into(), value: v.into(), ts, tombstone: false, expires: 0 };
/// a.write(vec![row("ada", "v1", 1), row("bob", "v1", 1)])?;
/// b.write(vec![row("bob", "v2", 2)])?;
///
/// let mut opts = RepairOptions::default();
/// opts.parallelism = Parallelism::Sequential;
/// let report = RepairSession::run(&[&a, &b], &LocalTransport::new(), &opts)?;
/// println!("{report}"); // ranges, rows each way, roots, snapshot deletions
/// assert!(report.converged());
/// assert_eq!(report.rows_streamed(ReplicaId(2), ReplicaId(1)), 1);
/// assert_eq!(a.get(b"bob")?.unwrap().value, b"v2");
///
/// drop((a, b));
/// assert!(sa.close()?.is_clean() && sb.close()?.is_clean());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RepairSession;

/// Context shared by the steps of one session.
pub(super) struct Ctx<'a> {
    pub(super) session: u64,
    pub(super) transport: &'a dyn Transport,
    pub(super) opts: &'a RepairOptions,
    pub(super) shape: Shape,
    coordinator: ReplicaId,
    /// Index of the replica whose step failed first (`usize::MAX`: none). Replicas
    /// waiting for messages give up as soon as it is set.
    failed: AtomicUsize,
}

/// How often a waiting replica checks whether the session failed elsewhere.
const ABORT_POLL: Duration = Duration::from_millis(20);

impl Ctx<'_> {
    /// The next message of this session for `me`; fails on timeout, on bad bytes, or as
    /// soon as another replica's step has failed.
    pub(super) fn recv(&self, me: ReplicaId) -> Result<(ReplicaId, Message, usize)> {
        let deadline = Instant::now() + self.opts.timeout;
        loop {
            if self.failed.load(AtomicOrdering::Acquire) != usize::MAX {
                return Err(Error::Transport(format!(
                    "{me}: repair session {:016x} aborted: another replica failed",
                    self.session
                )));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Transport(format!(
                    "{me}: no repair message within {:?}",
                    self.opts.timeout
                )));
            }
            if let Some(m) =
                try_recv_message(self.transport, me, self.session, left.min(ABORT_POLL))?
            {
                return Ok(m);
            }
        }
    }
}

impl RepairSession {
    /// Repair `replicas` (at least two, with distinct ids) against each other. See the
    /// module docs for the steps.
    pub fn run(
        replicas: &[&dyn Replica],
        transport: &dyn Transport,
        opts: &RepairOptions,
    ) -> Result<RepairReport> {
        let start = Instant::now();
        let shape = Shape::new(opts.range, opts.depth)?;
        if opts.batch_rows == 0 {
            return Err(Error::InvalidArgument(
                "batch_rows must be at least 1".into(),
            ));
        }
        check_replicas(replicas)?;
        let ctx = Ctx {
            session: new_session_id(),
            transport,
            opts,
            shape,
            coordinator: replicas[0].id(),
            failed: AtomicUsize::new(usize::MAX),
        };
        let mut timings = Timings::default();

        // 1. Trees.
        let snapshots = match opts.parallelism {
            Parallelism::Parallel => {
                each_replica(&ctx, replicas, true, |r| build_and_send(&ctx, r, r))?;
                Vec::new()
            }
            Parallelism::Sequential => sequential_trees(&ctx, replicas)?,
        };
        timings.trees = start.elapsed();

        // 2. Collect, diff, plan.
        let t = Instant::now();
        let (trees, rows_hashed, tree_bytes) = collect_trees(&ctx, replicas)?;
        let Planned {
            plans,
            differing,
            ranges_differ,
        } = plan(&ctx, replicas, &trees)?;
        for (r, p) in replicas.iter().zip(&plans) {
            send_message(
                transport,
                ctx.coordinator,
                r.id(),
                &Message::Plan(p.clone()),
            )?;
        }
        timings.diff = t.elapsed();

        // 3. Stream.
        let t = Instant::now();
        let streams: Vec<Vec<StreamStats>> = match opts.parallelism {
            Parallelism::Parallel => each_replica(&ctx, replicas, true, |r| {
                let (plan, sent) = stream_out(&ctx, r)?;
                stream_in(&ctx, r, &plan)?;
                Ok(sent)
            })?,
            Parallelism::Sequential => {
                // Every replica sends before any receives: a replica waiting for a
                // stream must not block the sender of it.
                let outs = each_replica(&ctx, replicas, false, |r| stream_out(&ctx, r))?;
                let mut sent = Vec::new();
                for (r, (plan, s)) in replicas.iter().zip(outs) {
                    stream_in(&ctx, *r, &plan)?;
                    sent.push(s);
                }
                sent
            }
        };
        timings.streaming = t.elapsed();

        // 4. Verify.
        let t = Instant::now();
        let roots_after = if opts.verify {
            let par = opts.parallelism == Parallelism::Parallel;
            each_replica(&ctx, replicas, par, |r| {
                Ok((r.id(), build_tree(r, shape)?.root()))
            })?
        } else {
            Vec::new()
        };
        timings.verify = t.elapsed();
        timings.total = start.elapsed();
        let streams: Vec<StreamStats> = streams.into_iter().flatten().collect();
        tracing::info!(
            session = format_args!("{:016x}", ctx.session),
            table = replicas[0].table(),
            parallelism = %opts.parallelism,
            differing_leaves = differing.len(),
            range_tombstones_differ = ranges_differ,
            rows_streamed = streams.iter().map(|s| s.rows).sum::<u64>(),
            elapsed = ?timings.total,
            "repair session finished"
        );

        Ok(RepairReport {
            session: ctx.session,
            table: replicas[0].table().to_string(),
            parallelism: opts.parallelism,
            shape,
            rows_hashed,
            roots_before: replicas
                .iter()
                .map(|r| r.id())
                .zip(trees.iter().map(|t| t.root()))
                .collect(),
            differing_leaves: differing.len(),
            differing_ranges: shape.ranges_of_leaves(differing),
            range_tombstones_differ: ranges_differ,
            streams,
            roots_after,
            snapshots,
            tree_bytes,
            timings,
        })
    }
}

fn check_replicas(replicas: &[&dyn Replica]) -> Result<()> {
    if replicas.len() < 2 {
        return Err(Error::InvalidArgument(format!(
            "repair needs at least two replicas, got {}",
            replicas.len()
        )));
    }
    let ids: BTreeSet<ReplicaId> = replicas.iter().map(|r| r.id()).collect();
    if ids.len() != replicas.len() {
        return Err(Error::InvalidArgument(
            "replica ids must be distinct".into(),
        ));
    }
    let first = replicas[0];
    for r in &replicas[1..] {
        if r.table() != first.table() {
            return Err(Error::RepairMismatch(format!(
                "{} holds table {:?} but {} holds table {:?}",
                first.id(),
                first.table(),
                r.id(),
                r.table()
            )));
        }
        if r.table_config_fingerprint() != first.table_config_fingerprint() {
            return Err(Error::RepairMismatch(format!(
                "table {:?} has incompatible settings on {} and {} (fingerprints {:#x} and {:#x})",
                first.table(),
                first.id(),
                r.id(),
                first.table_config_fingerprint(),
                r.table_config_fingerprint()
            )));
        }
    }
    Ok(())
}

fn new_session_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut b = [0u8; 20];
    b[..8].copy_from_slice(&nanos.to_le_bytes());
    b[8..16].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    b[16..].copy_from_slice(&std::process::id().to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&b)
}

/// Run `f` on every replica, on one thread each when `parallel`, and collect the
/// results in replica order. On failure the error of the replica that failed first is
/// returned (the others were told to give up); a panic is re-raised.
fn each_replica<'r, T: Send>(
    ctx: &Ctx<'_>,
    replicas: &[&'r dyn Replica],
    parallel: bool,
    f: impl Fn(&'r dyn Replica) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    if !parallel {
        return replicas.iter().map(|r| f(*r)).collect();
    }
    let f = &f;
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = replicas
            .iter()
            .enumerate()
            .map(|(i, r)| {
                s.spawn(move || {
                    let res = f(*r);
                    if res.is_err() {
                        let _ = ctx.failed.compare_exchange(
                            usize::MAX,
                            i,
                            AtomicOrdering::AcqRel,
                            AtomicOrdering::Acquire,
                        );
                    }
                    res
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let first = ctx.failed.load(AtomicOrdering::Acquire);
    if first != usize::MAX {
        let mut results = results;
        return Err(results
            .swap_remove(first)
            .err()
            .expect("the failed replica's result is an error"));
    }
    results.into_iter().collect()
}

/// Build a tree of `shape` from `source`: its rows, and the digest of its range
/// tombstones ([`range_digest`]).
pub fn build_tree<S: RowSource + ?Sized>(source: &S, shape: Shape) -> Result<MerkleTree> {
    let mut b = MerkleBuilder::new(shape.range, shape.depth)?;
    for row in source.rows(&[shape.range])? {
        b.add(&row?);
    }
    let ranges = range_digest(&source.range_tombstones()?);
    Ok(b.finish().with_range_digest(ranges))
}

fn build_and_send<S: RowSource + ?Sized>(ctx: &Ctx<'_>, r: &dyn Replica, source: &S) -> Result<()> {
    let tree = build_tree(source, ctx.shape)?;
    let msg = TreeMessage::new(
        ctx.session,
        r.id(),
        r.table(),
        r.table_config_fingerprint(),
        &tree,
    );
    send_message(ctx.transport, r.id(), ctx.coordinator, &Message::Tree(msg))?;
    Ok(())
}

/// Clears the session's snapshot on every replica that still has it, also on error.
struct SnapshotGuard<'a, 'r> {
    replicas: &'a [&'r dyn Replica],
    tag: &'a str,
    taken: Vec<bool>,
}

impl SnapshotGuard<'_, '_> {
    fn clear(&mut self, i: usize) -> Result<()> {
        self.taken[i] = false;
        self.replicas[i].clear_snapshot(self.tag)
    }
}

impl Drop for SnapshotGuard<'_, '_> {
    fn drop(&mut self) {
        for (i, taken) in self.taken.iter().enumerate() {
            if *taken {
                if let Err(e) = self.replicas[i].clear_snapshot(self.tag) {
                    tracing::warn!(replica = %self.replicas[i].id(), tag = self.tag, error = %e, "could not clear a repair snapshot; it is ephemeral and goes at close");
                }
            }
        }
    }
}

fn sequential_trees(ctx: &Ctx<'_>, replicas: &[&dyn Replica]) -> Result<Vec<SnapshotReport>> {
    let tag = format!("repair_{:016x}", ctx.session);
    let mut guard = SnapshotGuard {
        replicas,
        tag: &tag,
        taken: vec![false; replicas.len()],
    };
    for (i, r) in replicas.iter().enumerate() {
        r.snapshot_ephemeral(&tag)?;
        guard.taken[i] = true;
    }
    let mut reports = Vec::with_capacity(replicas.len());
    for (i, r) in replicas.iter().enumerate() {
        let snap = r.open_snapshot(&tag)?;
        build_and_send(ctx, *r, &*snap)?;
        guard.clear(i)?;
        let while_open = r.snapshot_status(&tag);
        drop(snap);
        let after_close = r.snapshot_status(&tag);
        tracing::info!(replica = %r.id(), tag = %tag, ?while_open, ?after_close, "repair snapshot cleared");
        reports.push(SnapshotReport {
            replica: r.id(),
            tag: tag.clone(),
            while_open,
            after_close,
        });
    }
    Ok(reports)
}

type Collected = (Vec<MerkleTree>, Vec<(ReplicaId, u64)>, u64);

fn collect_trees(ctx: &Ctx<'_>, replicas: &[&dyn Replica]) -> Result<Collected> {
    let table = replicas[0].table();
    let fingerprint = replicas[0].table_config_fingerprint();
    let mut trees: Vec<Option<(MerkleTree, u64)>> = vec![None; replicas.len()];
    let mut bytes = 0u64;
    for _ in 0..replicas.len() {
        let (from, msg, len) = ctx.recv(ctx.coordinator)?;
        bytes += len as u64;
        let Message::Tree(m) = msg else {
            return Err(Error::Transport(format!(
                "expected a tree from {from}, got another message"
            )));
        };
        let i = replicas
            .iter()
            .position(|r| r.id() == m.from && m.from == from)
            .ok_or_else(|| Error::Transport(format!("tree from unexpected {from}")))?;
        if m.table != table || m.fingerprint != fingerprint {
            return Err(Error::RepairMismatch(format!(
                "{from} sent a tree of table {:?} (settings {:#x}), expected {table:?} ({fingerprint:#x})",
                m.table, m.fingerprint
            )));
        }
        if m.range != ctx.shape.range || m.depth != ctx.shape.depth {
            return Err(Error::RepairMismatch(format!(
                "{from} sent a tree of depth {} over {}, expected depth {} over {}",
                m.depth, m.range, ctx.shape.depth, ctx.shape.range
            )));
        }
        if trees[i].is_some() {
            return Err(Error::Transport(format!("two trees from {from}")));
        }
        let rows = m.rows;
        trees[i] = Some((m.into_tree()?, rows));
    }
    let mut out = Vec::with_capacity(trees.len());
    let mut rows = Vec::with_capacity(trees.len());
    for (r, t) in replicas.iter().zip(trees) {
        let (t, n) = t.expect("one tree per replica was received");
        out.push(t);
        rows.push((r.id(), n));
    }
    Ok((out, rows, bytes))
}
