use super::*;
use proptest::prelude::*;

fn key(k: u16) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

fn seg(id: u64, level: u32, lo: u16, hi: u16, data_bytes: u64) -> LevelSummary {
    LevelSummary {
        id,
        level,
        data_bytes,
        span: Span::of_keys(&key(lo), &key(hi)),
        runs: 1,
    }
}

const PARAMS: LeveledParams = LeveledParams {
    l0_trigger: 4,
    l0_merge_bytes: 0,
    base_level_size: 1000,
    level_multiplier: 10,
};

/// [`PARAMS`] with room in level 1 for any view here.
const PARAMS_ROOMY: LeveledParams = LeveledParams {
    base_level_size: 1 << 20,
    ..PARAMS
};

/// The key range `[lo, hi]` of a span made by [`seg`] or by [`apply`].
fn bounds(s: &Span) -> (u16, u16) {
    let lo = u16::from_be_bytes([s.start[0], s.start[1]]);
    let end = s.end.as_ref().expect("bounded");
    (lo, u16::from_be_bytes([end[0], end[1]]))
}

/// Carry out `c` as a merge would: the inputs' bytes, split into pieces of at most
/// `target` bytes, over disjoint spans covering the union of the inputs' spans.
fn apply(view: &mut Vec<LevelSummary>, c: &LeveledChoice, next_id: &mut u64, target: u64) {
    let inputs: Vec<LevelSummary> = view
        .iter()
        .filter(|s| c.ids.contains(&s.id))
        .cloned()
        .collect();
    view.retain(|s| !c.ids.contains(&s.id));
    if c.to_level == 0 {
        // A level 0 merge: one segment over the union, holding the inputs' flushes.
        let union = inputs[1..]
            .iter()
            .fold(inputs[0].span.clone(), |u, s| u.union(&s.span));
        let (lo, hi) = bounds(&union);
        let mut out = seg(*next_id, 0, lo, hi - 1, inputs.iter().map(|s| s.data_bytes).sum());
        out.runs = inputs.iter().map(|s| s.runs.max(1)).sum();
        view.push(out);
        *next_id += 1;
        return;
    }
    let union = inputs[1..]
        .iter()
        .fold(inputs[0].span.clone(), |u, s| u.union(&s.span));
    let (lo, hi) = bounds(&union);
    let total: u64 = inputs.iter().map(|s| s.data_bytes).sum();
    let keys = u64::from(hi - lo) + 1;
    let pieces = total.div_ceil(target).clamp(1, keys);
    for i in 0..pieces {
        let a = lo as u64 + keys * i / pieces;
        let b = lo as u64 + keys * (i + 1) / pieces - 1;
        view.push(seg(*next_id, c.to_level, a as u16, b as u16, total / pieces));
        *next_id += 1;
    }
}

fn check_layout(view: &[LevelSummary]) -> Result<(), TestCaseError> {
    for a in view.iter().filter(|s| s.level > 0) {
        for b in view.iter().filter(|s| s.level == a.level && s.id != a.id) {
            prop_assert!(!a.span.overlaps(&b.span), "invariant 2: {a:?} {b:?}");
        }
    }
    Ok(())
}

fn check_choice(
    view: &[LevelSummary],
    c: &LeveledChoice,
    seed: u64,
    chooser: &dyn Fn(&[LevelSummary]) -> Option<LeveledChoice>,
) -> Result<(), TestCaseError> {
    let mut uniq = c.ids.clone();
    uniq.dedup();
    prop_assert_eq!(&uniq, &c.ids, "invariant 1: distinct, ascending");
    let chosen: Vec<&LevelSummary> = view.iter().filter(|s| c.ids.contains(&s.id)).collect();
    prop_assert_eq!(chosen.len(), c.ids.len(), "invariant 1: ids of the input");
    if c.to_level == 0 {
        let l0: Vec<u64> = view.iter().filter(|s| s.level == 0).map(|s| s.id).collect();
        prop_assert_eq!(l0.len(), c.ids.len(), "invariant 1: every level 0 segment");
        prop_assert!(chosen.iter().all(|s| s.level == 0), "invariant 1: level 0 only");
        return check_shuffled(view, c, seed, chooser);
    }
    prop_assert!(chosen
        .iter()
        .all(|s| s.level == c.to_level || s.level + 1 == c.to_level));
    let upper: Vec<&&LevelSummary> = chosen.iter().filter(|s| s.level + 1 == c.to_level).collect();
    prop_assert!(!upper.is_empty());
    let union = upper[1..]
        .iter()
        .fold(upper[0].span.clone(), |u, s| u.union(&s.span));
    for below in view.iter().filter(|s| s.level == c.to_level) {
        if below.span.overlaps(&union) {
            prop_assert!(c.ids.contains(&below.id), "invariant 1: overlaps all taken");
        }
    }
    check_shuffled(view, c, seed, chooser)
}

/// [`ingest_level`] for a segment of `data_bytes` spanning `span`, checked against its
/// definition: no segment of the level it names overlaps the span, and every deeper
/// level up to the deeper of the table's deepest and the first whose budget holds the
/// segment has one that does (all of them, for level 0).
fn check_ingest_level(
    view: &[LevelSummary],
    span: &Span,
    data_bytes: u64,
    params: &LeveledParams,
) -> Result<u32, TestCaseError> {
    let level = ingest_level(view, span, data_bytes, params);
    let overlaps = |n: u32| view.iter().any(|s| s.level == n && s.span.overlaps(span));
    let fits = (1..).find(|&n| params.budget(n) >= data_bytes).unwrap();
    let deepest = view.iter().map(|s| s.level).max().unwrap_or(0).max(fits);
    if level > 0 {
        prop_assert!(!overlaps(level), "level {level} overlaps {span:?}");
    }
    for n in (level + 1).max(1)..=deepest {
        prop_assert!(overlaps(n), "level {n} was free for {span:?}, chose {level}");
    }
    Ok(level)
}

/// Invariant 3: shuffled input, same choice.
fn check_shuffled(
    view: &[LevelSummary],
    c: &LeveledChoice,
    seed: u64,
    chooser: &dyn Fn(&[LevelSummary]) -> Option<LeveledChoice>,
) -> Result<(), TestCaseError> {
    let mut shuffled = view.to_vec();
    let mut s = seed | 1;
    for i in (1..shuffled.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        shuffled.swap(i, (s % (i as u64 + 1)) as usize);
    }
    prop_assert_eq!(chooser(&shuffled), Some(c.clone()));
    Ok(())
}

#[test]
fn level_0_waits_for_its_trigger_then_takes_overlapping_level_1() {
    let mut v = vec![
        seg(1, 1, 0, 99, 100),
        seg(2, 1, 100, 199, 100),
        seg(3, 1, 200, 299, 100),
        seg(10, 0, 150, 160, 10),
        seg(11, 0, 120, 170, 10),
        seg(12, 0, 110, 210, 10),
    ];
    assert_eq!(choose(&v, &PARAMS), None);
    v.push(seg(13, 0, 105, 106, 10));
    assert_eq!(
        choose(&v, &PARAMS),
        Some(LeveledChoice {
            ids: vec![2, 3, 10, 11, 12, 13],
            to_level: 1
        })
    );
}

#[test]
fn the_most_over_budget_level_pushes_its_cheapest_segment_down() {
    // Level 1 holds 1200 of 1000 bytes (ratio 1.2), level 2 holds 11000 of 10000 (1.1).
    let mut v = vec![
        seg(1, 1, 0, 99, 600),
        seg(2, 1, 100, 199, 600),
        seg(3, 2, 0, 49, 5000),
        seg(4, 2, 50, 99, 5000),
        seg(5, 2, 150, 159, 1000),
    ];
    // Segment 2 overlaps 1000 bytes below, segment 1 10000: 2 goes.
    assert_eq!(
        choose(&v, &PARAMS),
        Some(LeveledChoice {
            ids: vec![2, 5],
            to_level: 2
        })
    );
    // Level 2 the worse: its cheapest (no overlap in level 3) goes, ties to the lowest id.
    v[0].data_bytes = 400;
    v[4].data_bytes = 4000;
    assert_eq!(
        choose(&v, &PARAMS),
        Some(LeveledChoice {
            ids: vec![3],
            to_level: 3
        })
    );
    v.retain(|s| s.level == 1);
    assert_eq!(choose(&v, &PARAMS), None, "within budget");
}

#[test]
fn an_ingested_segment_joins_the_deepest_level_it_overlaps_nothing_in() {
    // An empty table: level 1, or the first level whose budget holds a larger load.
    let span = |lo, hi| Span::of_keys(&key(lo), &key(hi));
    assert_eq!(ingest_level(&[], &span(0, 100), 500, &PARAMS), 1);
    assert_eq!(ingest_level(&[], &span(0, 100), 5_000, &PARAMS), 2);
    // Past every budget that does not saturate: the first that does (the search ends).
    let l = ingest_level(&[], &span(0, 100), u64::MAX, &PARAMS);
    assert!(PARAMS.budget(l) == u64::MAX && PARAMS.budget(l - 1) < u64::MAX, "{l}");
    let view = [
        seg(1, 0, 0, 1000, 50),
        seg(2, 1, 0, 99, 400),
        seg(3, 2, 200, 299, 4000),
        seg(4, 2, 500, 599, 4000),
    ];
    // Level 0 overlapping it does not matter; level 2 is the deepest.
    assert_eq!(ingest_level(&view, &span(100, 150), 10, &PARAMS), 2);
    // Level 2 overlaps: level 1 is free there.
    assert_eq!(ingest_level(&view, &span(250, 260), 10, &PARAMS), 1);
    // Both overlap: level 0.
    assert_eq!(ingest_level(&view, &span(50, 250), 10, &PARAMS), 0);
    // Larger than level 2's budget: level 3, empty, below them all.
    assert_eq!(ingest_level(&view, &span(50, 250), 20_000, &PARAMS), 3);
}

#[test]
fn budgets_grow_by_the_multiplier_without_overflow() {
    assert_eq!(PARAMS.budget(1), 1000);
    assert_eq!(PARAMS.budget(3), 100_000);
    assert_eq!(PARAMS.budget(40), u64::MAX);
}

#[test]
fn spans_are_half_open() {
    let a = Span::of_keys(b"a", b"c");
    let b = Span {
        start: successor(b"c"),
        end: None,
    };
    assert!(!a.overlaps(&b) && !b.overlaps(&a));
    assert!(a.overlaps(&Span::of_keys(b"c", b"c")));
    assert_eq!(a.union(&b), Span { start: b"a".to_vec(), end: None });
    assert!(a.within(&a.union(&b)) && !b.within(&a));
}

proptest! {
    /// Random flushes and ingests, each followed by compactions until the policy
    /// rests, then by the rule for reads with a random count of seeks: every choice
    /// keeps invariants 1 and 3, every layout invariant 2 (an ingested segment's level
    /// too), and the policy always comes to rest.
    #[test]
    fn simulated_compactions_keep_levels_disjoint(
        flushes in proptest::collection::vec(
            (
                (0u16..2000, 0u16..400, 1u64..400),
                prop_oneof![3 => Just(false), 1 => Just(true)],
                prop_oneof![2 => Just(0u64), 1 => 0u64..40],
            ),
            1..40,
        ),
        target in 50u64..800,
        l0_merge_bytes in prop_oneof![Just(0u64), 1u64..1500],
        seed: u64,
    ) {
        let params = LeveledParams { l0_merge_bytes, ..PARAMS };
        let mut view = Vec::new();
        let mut next_id = 1;
        for ((lo, width, bytes), ingested, seeks) in flushes {
            let s = seg(next_id, 0, lo, lo.saturating_add(width), bytes);
            let level = match ingested {
                // Some loads larger than level 1's budget (1000 bytes).
                true => check_ingest_level(&view, &s.span, bytes * 7, &params)?,
                false => 0,
            };
            view.push(LevelSummary { level, ..s });
            check_layout(&view)?;
            next_id += 1;
            let mut rounds = 0;
            while let Some(c) = choose(&view, &params) {
                check_choice(&view, &c, seed, &|v| choose(v, &params))?;
                if moves_alone(&view, &c) {
                    // The table moves them: their levels change, nothing else.
                    for s in view.iter_mut().filter(|s| c.ids.contains(&s.id)) {
                        s.level = c.to_level;
                    }
                } else {
                    apply(&mut view, &c, &mut next_id, target);
                }
                check_layout(&view)?;
                rounds += 1;
                prop_assert!(rounds < 1000, "the policy never rests");
            }
            let l0: Vec<&LevelSummary> = view.iter().filter(|s| s.level == 0).collect();
            let runs: u32 = l0.iter().map(|s| s.runs).sum();
            prop_assert!((runs as usize) < params.l0_trigger, "level 0 below its trigger at rest");
            let l0_bytes: u64 = l0.iter().map(|s| s.data_bytes).sum();
            let apart = disjoint(l0.iter().map(|s| &s.span));
            prop_assert!(l0.len() < 2 || l0_bytes >= l0_merge_bytes || apart, "level 0 merged at rest");
            for n in 1..=view.iter().map(|s| s.level).max().unwrap_or(0) {
                let bytes: u64 = view.iter().filter(|s| s.level == n).map(|s| s.data_bytes).sum();
                prop_assert!(bytes <= PARAMS.budget(n), "level {n} over budget at rest");
            }
            // Scans have sought into level 0 `seeks` times.
            if let Some(c) = choose_for_reads(&view, seeks) {
                check_choice(&view, &c, seed, &|v| choose_for_reads(v, seeks))?;
                apply(&mut view, &c, &mut next_id, target);
                check_layout(&view)?;
            }
        }
    }
}

/// Below `l0_merge_bytes`, a second level 0 segment merges level 0 into one segment;
/// the merged segment's flushes count toward `l0_trigger`.
#[test]
fn level_0_merges_into_one_segment_until_it_holds_its_trigger_in_flushes() {
    let merging = LeveledParams {
        l0_merge_bytes: 100,
        ..PARAMS
    };
    let mut v = vec![seg(1, 1, 0, 299, 300), seg(10, 0, 150, 160, 10)];
    assert_eq!(choose(&v, &merging), None, "one level 0 segment");
    v.push(seg(11, 0, 100, 155, 10));
    let both = LeveledChoice {
        ids: vec![10, 11],
        to_level: 0,
    };
    assert_eq!(choose(&v, &merging), Some(both));
    assert_eq!(choose(&v, &PARAMS), None, "0: level 0 never merges");
    // Merged: segment 12 holds three flushes, the next makes four, the trigger.
    v.truncate(1);
    v.push(seg(12, 0, 100, 160, 30));
    v[1].runs = 3;
    v.push(seg(13, 0, 0, 110, 10));
    let into_1 = LeveledChoice {
        ids: vec![1, 12, 13],
        to_level: 1,
    };
    assert_eq!(choose(&v, &merging), Some(into_1));
    // At `l0_merge_bytes` together, level 0 waits for its trigger as before.
    v[1].runs = 1;
    v[1].data_bytes = 90;
    assert_eq!(choose(&v, &merging), None, "100 bytes: not below the bound");
}

/// The rule for reads: nothing without level 0 or below the merge's bytes in seeks;
/// at them, level 0 with the level 1 segments it overlaps (and not the others).
#[test]
fn scans_seeks_merge_level_0_once_they_cost_what_the_merge_does() {
    let view = vec![
        seg(1, 1, 0, 99, 4_000),
        seg(2, 1, 100, 199, 4_000),
        seg(3, 1, 200, 299, 4_000),
        seg(4, 0, 50, 150, 1_000),
    ];
    // Level 0 and the two level 1 segments it overlaps: 9,000 bytes.
    let seeks = 9_000u64.div_ceil(SCAN_SEEK_BYTES);
    assert_eq!(choose(&view, &PARAMS_ROOMY), None, "one level 0 segment, below the trigger");
    assert_eq!(choose_for_reads(&view, 0), None);
    assert_eq!(choose_for_reads(&view, seeks - 1), None);
    let want = LeveledChoice {
        ids: vec![1, 2, 4],
        to_level: 1,
    };
    assert_eq!(choose_for_reads(&view, seeks), Some(want));
    assert_eq!(choose_for_reads(&view[..3], u64::MAX), None, "no level 0");
}

/// The rule for reads with several level 0 segments: once the seeks a merge of level 0
/// into one segment would have saved (all but one of each scan's) come to level 0's
/// bytes, level 0 merges into one level 0 segment; at the bytes of the merge into level
/// 1, that merge, its seeks counted per flush. Disjoint level 0 segments, which a scan
/// does not all meet, never merge into one for reads.
#[test]
fn scans_seeks_merge_overlapping_level_0_into_one_before_into_level_1() {
    let view = vec![
        seg(1, 1, 0, 99, 40_000),
        seg(2, 1, 100, 199, 40_000),
        seg(3, 0, 10, 150, 1_000),
        seg(4, 0, 20, 160, 1_000),
        seg(5, 0, 30, 170, 1_000),
    ];
    // Three level 0 segments: 3,000 bytes, paid for by 4,500 bytes of seeks (each
    // scan's seeks into two of three are saved).
    let seeks = 4_500u64.div_ceil(SCAN_SEEK_BYTES);
    assert_eq!(choose(&view, &PARAMS_ROOMY), None, "below the trigger");
    assert_eq!(choose_for_reads(&view, seeks - 1), None);
    let into_one = LeveledChoice {
        ids: vec![3, 4, 5],
        to_level: 0,
    };
    assert_eq!(choose_for_reads(&view, seeks), Some(into_one.clone()));
    // At the bytes of level 0 and level 1 (83,000), the merge into level 1.
    let all = 83_000u64.div_ceil(SCAN_SEEK_BYTES);
    assert_eq!(choose_for_reads(&view, all - 1), Some(into_one));
    let into_1 = LeveledChoice {
        ids: vec![1, 2, 3, 4, 5],
        to_level: 1,
    };
    assert_eq!(choose_for_reads(&view, all), Some(into_1.clone()));
    // Merged into one segment holding their three flushes, each seek into it counts
    // three toward the merge into level 1 (83,000 bytes).
    let merged = vec![
        view[0].clone(),
        view[1].clone(),
        LevelSummary {
            runs: 3,
            ..seg(6, 0, 10, 170, 3_000)
        },
    ];
    let by_flush = 83_000u64.div_ceil(3 * SCAN_SEEK_BYTES);
    assert_eq!(choose_for_reads(&merged, by_flush - 1), None);
    let into_1 = LeveledChoice {
        ids: vec![1, 2, 6],
        ..into_1
    };
    assert_eq!(choose_for_reads(&merged, by_flush), Some(into_1));
    // Level 0 segments of disjoint spans: a scan meets one of them. Seeks worth
    // 10,000 bytes: five times level 0's, a quarter of the merge into level 1.
    let mut disjoint = vec![
        seg(1, 1, 0, 299, 40_000),
        seg(3, 0, 0, 9, 1_000),
        seg(4, 0, 100, 109, 1_000),
    ];
    let seeks = 10_000 / SCAN_SEEK_BYTES;
    assert_eq!(choose_for_reads(&disjoint, seeks), None);
    disjoint[2].span = Span::of_keys(&key(5), &key(109));
    assert_eq!(
        choose_for_reads(&disjoint, seeks),
        Some(LeveledChoice {
            ids: vec![3, 4],
            to_level: 0
        }),
        "overlapping, they merge"
    );
}

/// A choice whose segments overlap nothing in the level below and nothing among
/// themselves moves without a rewrite; any overlap, or a level 0 merge, rewrites.
#[test]
fn disjoint_segments_over_nothing_below_move_without_a_rewrite() {
    let params = LeveledParams {
        l0_trigger: 2,
        ..PARAMS
    };
    let moves = |view: &[LevelSummary]| {
        let c = choose(view, &params).expect("a choice");
        (moves_alone(view, &c), c)
    };
    // Keys written in order: two flushes side by side, level 1 below them.
    let (alone, c) = moves(&[
        seg(1, 1, 0, 99, 100),
        seg(2, 0, 100, 199, 100),
        seg(3, 0, 200, 299, 100),
    ]);
    assert!(alone, "{c:?}");
    assert_eq!(c.ids, [2, 3]);
    // Two flushes of the same keys: a merge.
    assert!(!moves(&[seg(2, 0, 100, 199, 100), seg(3, 0, 150, 299, 100)]).0);
    // A flush over a level 1 segment: that segment is in the choice, a merge.
    let (alone, c) = moves(&[seg(1, 1, 0, 120, 100), seg(2, 0, 100, 199, 100), seg(3, 0, 200, 299, 100)]);
    assert!(!alone);
    assert_eq!(c.ids, [1, 2, 3]);
    // A level over budget pushes a segment down into a gap of the level below.
    let (alone, c) = moves(&[
        seg(1, 1, 0, 99, 700),
        seg(2, 1, 100, 199, 700),
        seg(3, 2, 300, 399, 100),
    ]);
    assert!(alone, "{c:?}");
    assert_eq!((c.ids.len(), c.to_level), (1, 2));
    // Rule 2 leaves level 0 segments that overlap nothing among themselves to rule 1.
    let merging = LeveledParams {
        l0_trigger: 4,
        l0_merge_bytes: 1000,
        ..PARAMS
    };
    let l0 = [seg(2, 0, 100, 199, 10), seg(3, 0, 200, 299, 10)];
    assert_eq!(choose(&l0, &merging), None);
    let l0 = [seg(2, 0, 100, 199, 10), seg(3, 0, 150, 299, 10)];
    assert_eq!(choose(&l0, &merging).map(|c| c.to_level), Some(0));
    // A level 0 merge (rule 2) always rewrites.
    let merge = LeveledChoice {
        ids: vec![2, 3],
        to_level: 0,
    };
    assert!(!moves_alone(&[seg(2, 0, 100, 199, 10), seg(3, 0, 200, 299, 10)], &merge));
}
