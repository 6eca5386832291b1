//! Steps 2 and 3 of a session ([`super::session`]): the coordinator's plan, and the
//! streams of rows and range tombstones each replica sends and receives.
//!
//! - **Rows.** For each leaf where not all replicas agree, replicas with equal leaf
//!   digests form a class; the first replica of each class sends that leaf's rows to
//!   every replica outside its class.
//! - **Range tombstones.** Replicas with equal range tombstone digests
//!   ([`super::merkle::range_digest`]) form a class the same way; the first replica of
//!   each class sends its whole set to every replica outside its class, in the first
//!   batch of its stream to it (a stream may carry range tombstones and no rows). The
//!   receiver applies the union of what it received ([`Replica::apply_range_tombstones`]),
//!   each fragment with its own timestamp: a union at the newest timestamp per key is
//!   what every replica ends with, whatever the order, so one exchange converges.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Result};
use crate::format::ranges::RangeTombstones;

use super::merkle::{coalesce, diff_leaves, ranges_contain, MerkleTree, TokenRange};
use super::message::{Message, RowBatch, StreamPlan};
use super::report::StreamStats;
use super::session::{Ctx, Replica};
use super::transport::send_message;
use super::{token, ReplicaId, Row};

/// What the coordinator found: every replica's plan, the differing leaves (ascending),
/// and whether the range tombstone digests differ.
pub(super) struct Planned {
    pub(super) plans: Vec<StreamPlan>,
    pub(super) differing: Vec<usize>,
    pub(super) ranges_differ: bool,
}

/// The plan of every replica (see the module docs).
pub(super) fn plan(
    ctx: &Ctx<'_>,
    replicas: &[&dyn Replica],
    trees: &[MerkleTree],
) -> Result<Planned> {
    let n = trees.len();
    let mut differing = Vec::new();
    for t in &trees[1..] {
        differing.extend(diff_leaves(&trees[0], t)?);
    }
    differing.sort_unstable();
    differing.dedup();
    // pair[i][j]: leaves whose rows i sends to j.
    let mut pair: Vec<Vec<Vec<usize>>> = vec![vec![Vec::new(); n]; n];
    let mut digests = Vec::with_capacity(n);
    for &leaf in &differing {
        digests.clear();
        digests.extend(trees.iter().map(|t| t.leaves()[leaf]));
        for (i, j) in class_sends(&digests) {
            pair[i][j].push(leaf);
        }
    }
    // ranges[i][j]: i sends its range tombstones to j.
    let mut ranges = vec![vec![false; n]; n];
    let range_digests: Vec<_> = trees.iter().map(|t| t.range_digest()).collect();
    for (i, j) in class_sends(&range_digests) {
        ranges[i][j] = true;
    }
    let ranges_differ = range_digests.iter().any(|d| *d != range_digests[0]);
    let plans = (0..n)
        .map(|i| StreamPlan {
            session: ctx.session,
            targets: (0..n)
                .filter(|&j| !pair[i][j].is_empty())
                .map(|j| {
                    (
                        replicas[j].id(),
                        ctx.shape.ranges_of_leaves(pair[i][j].iter().copied()),
                    )
                })
                .collect(),
            expect_from: (0..n)
                .filter(|&k| !pair[k][i].is_empty() || ranges[k][i])
                .map(|k| replicas[k].id())
                .collect(),
            range_targets: (0..n)
                .filter(|&j| ranges[i][j])
                .map(|j| replicas[j].id())
                .collect(),
        })
        .collect();
    Ok(Planned {
        plans,
        differing,
        ranges_differ,
    })
}

/// `(i, j)` for every replica `i` first of its class of equal digests and every `j`
/// outside that class: who sends to whom.
fn class_sends<D: PartialEq>(digests: &[D]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for i in 0..digests.len() {
        if digests[..i].contains(&digests[i]) {
            continue; // an earlier replica of the same class sends
        }
        for (j, d) in digests.iter().enumerate() {
            if *d != digests[i] {
                out.push((i, j));
            }
        }
    }
    out
}

/// Receive this replica's plan and send its rows and range tombstones.
pub(super) fn stream_out(ctx: &Ctx<'_>, r: &dyn Replica) -> Result<(StreamPlan, Vec<StreamStats>)> {
    let me = r.id();
    let (from, msg, _) = ctx.recv(me)?;
    let Message::Plan(plan) = msg else {
        return Err(Error::Transport(format!(
            "{me} expected its stream plan from {from}, got another message"
        )));
    };
    let mut targets: BTreeMap<ReplicaId, Vec<TokenRange>> = BTreeMap::new();
    for (to, ranges) in &plan.targets {
        targets.entry(*to).or_default().extend(ranges);
    }
    let range_targets: BTreeSet<ReplicaId> = plan.range_targets.iter().copied().collect();
    for to in &range_targets {
        targets.entry(*to).or_default();
    }
    if targets.is_empty() {
        return Ok((plan, Vec::new()));
    }
    let mine = if range_targets.is_empty() {
        RangeTombstones::new()
    } else {
        r.range_tombstones()?
    };
    let mut out: Vec<Outgoing> = targets
        .into_iter()
        .map(|(to, ranges)| {
            let ranges = coalesce(ranges);
            Outgoing {
                stats: StreamStats {
                    from: me,
                    to,
                    ranges: ranges.len(),
                    rows: 0,
                    batches: 0,
                    bytes: 0,
                    range_tombstones: 0,
                },
                range_tombstones: range_targets.contains(&to).then(|| mine.clone()),
                ranges,
                rows: Vec::new(),
                size: 0,
            }
        })
        .collect();
    let union = coalesce(out.iter().flat_map(|o| o.ranges.iter().copied()).collect());
    if !union.is_empty() {
        send_rows(ctx, r, &union, &mut out)?;
    }
    for o in &mut out {
        o.flush(ctx, true)?;
    }
    Ok((plan, out.into_iter().map(|o| o.stats).collect()))
}

/// Read `r`'s rows in `union` once, and queue each in the streams whose ranges hold it.
fn send_rows(
    ctx: &Ctx<'_>,
    r: &dyn Replica,
    union: &[TokenRange],
    out: &mut [Outgoing],
) -> Result<()> {
    let mut hits = Vec::with_capacity(out.len());
    for row in r.rows(union)? {
        let row = row?;
        let t = token(&row.key);
        hits.clear();
        hits.extend((0..out.len()).filter(|&i| ranges_contain(&out[i].ranges, t)));
        let Some((&last, rest)) = hits.split_last() else {
            continue;
        };
        for &i in rest {
            out[i].push(ctx, row.clone(), false)?;
        }
        out[last].push(ctx, row, false)?;
    }
    Ok(())
}

struct Outgoing {
    stats: StreamStats,
    ranges: Vec<TokenRange>,
    /// The range tombstones still to send (in the first batch).
    range_tombstones: Option<RangeTombstones>,
    rows: Vec<Row>,
    size: usize,
}

impl Outgoing {
    fn push(&mut self, ctx: &Ctx<'_>, row: Row, last: bool) -> Result<()> {
        self.size += row.key.len() + row.value.len() + 12;
        self.rows.push(row);
        if self.rows.len() >= ctx.opts.batch_rows || self.size >= ctx.opts.batch_bytes {
            self.flush(ctx, last)?;
        }
        Ok(())
    }

    fn flush(&mut self, ctx: &Ctx<'_>, last: bool) -> Result<()> {
        let batch = RowBatch {
            session: ctx.session,
            from: self.stats.from,
            seq: self.stats.batches,
            last,
            ranges: if self.stats.batches == 0 {
                self.ranges.clone()
            } else {
                Vec::new()
            },
            rows: std::mem::take(&mut self.rows),
            range_tombstones: self.range_tombstones.take().unwrap_or_default(),
        };
        self.stats.rows += batch.rows.len() as u64;
        self.stats.range_tombstones += batch.range_tombstones.len() as u64;
        self.size = 0;
        let n = send_message(
            ctx.transport,
            self.stats.from,
            self.stats.to,
            &Message::Rows(batch),
        )?;
        self.stats.batches += 1;
        self.stats.bytes += n as u64;
        Ok(())
    }
}

/// Receive every stream the plan expects, then apply the range tombstones and the rows.
pub(super) fn stream_in(ctx: &Ctx<'_>, r: &dyn Replica, plan: &StreamPlan) -> Result<()> {
    let me = r.id();
    let mut next_seq: BTreeMap<ReplicaId, u64> = plan.expect_from.iter().map(|&f| (f, 0)).collect();
    let mut rows = Vec::new();
    let mut range_tombstones = RangeTombstones::new();
    while !next_seq.is_empty() {
        let (from, msg, _) = ctx.recv(me)?;
        let Message::Rows(b) = msg else {
            return Err(Error::Transport(format!(
                "{me} expected rows from {from}, got another message"
            )));
        };
        let Some(seq) = next_seq.get_mut(&from).filter(|_| b.from == from) else {
            return Err(Error::Transport(format!(
                "{me} got an unexpected stream from {from}"
            )));
        };
        if b.seq != *seq {
            return Err(Error::Transport(format!(
                "{me}: batch {} from {from} arrived where batch {} was due",
                b.seq, seq
            )));
        }
        *seq += 1;
        rows.extend(b.rows);
        range_tombstones.extend(&b.range_tombstones);
        if b.last {
            next_seq.remove(&from);
        }
    }
    if !range_tombstones.is_empty() {
        r.apply_range_tombstones(&range_tombstones)?;
    }
    if !rows.is_empty() {
        r.apply(rows)?;
    }
    Ok(())
}
