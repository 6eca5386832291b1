//! The wire format's tests: round trips, typed errors, and bytes that never panic.

use super::*;
use proptest::prelude::*;

fn arb_range() -> impl Strategy<Value = TokenRange> {
    (any::<u64>(), any::<u64>()).prop_map(|(a, b)| TokenRange {
        start: a.min(b),
        end: a.max(b),
    })
}

fn arb_row() -> impl Strategy<Value = Row> {
    (
        proptest::collection::vec(any::<u8>(), 1..20),
        proptest::collection::vec(any::<u8>(), 0..20),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(key, value, ts, tombstone)| Row {
            key,
            value: if tombstone { Vec::new() } else { value },
            ts,
            tombstone,
            expires: 0,
        })
}

fn arb_range_tombstones() -> impl Strategy<Value = RangeTombstones> {
    use crate::format::ranges::RangeTombstone;
    let key = || proptest::collection::vec(0u8..4, 1..3);
    let one = (key(), proptest::option::weighted(0.8, key()), 0u64..5)
        .prop_map(|(start, end, ts)| RangeTombstone { start, end, ts });
    proptest::collection::vec(one, 0..5).prop_map(|l| RangeTombstones::from_list(&l))
}

fn arb_message() -> impl Strategy<Value = Message> {
    let tree = (
        any::<u64>(),
        any::<u64>(),
        "[a-z_]{1,10}",
        any::<u64>(),
        0u8..=5,
        any::<u64>(),
        proptest::collection::vec(any::<u128>(), 32),
        any::<u128>(),
    )
        .prop_map(
            |(session, from, table, fingerprint, depth, rows, leaves, digest)| {
                Message::Tree(TreeMessage {
                    session,
                    from: ReplicaId(from),
                    table,
                    fingerprint,
                    range: TokenRange::FULL,
                    depth,
                    rows,
                    leaves: leaves[..1 << depth].iter().map(|&d| Digest(d)).collect(),
                    range_digest: Digest(digest),
                })
            },
        );
    let plan = (
        any::<u64>(),
        proptest::collection::vec(
            (any::<u64>(), proptest::collection::vec(arb_range(), 0..4)),
            0..4,
        ),
        proptest::collection::vec(any::<u64>(), 0..4),
        proptest::collection::vec(any::<u64>(), 0..3),
    )
        .prop_map(|(session, targets, expect, range_targets)| {
            Message::Plan(StreamPlan {
                session,
                targets: targets
                    .into_iter()
                    .map(|(t, r)| (ReplicaId(t), r))
                    .collect(),
                expect_from: expect.into_iter().map(ReplicaId).collect(),
                range_targets: range_targets.into_iter().map(ReplicaId).collect(),
            })
        });
    let rows = (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<bool>(),
        proptest::collection::vec(arb_range(), 0..4),
        proptest::collection::vec(arb_row(), 0..10),
        arb_range_tombstones(),
    )
        .prop_map(
            |(session, from, seq, last, ranges, rows, range_tombstones)| {
                Message::Rows(RowBatch {
                    session,
                    from: ReplicaId(from),
                    seq,
                    last,
                    ranges,
                    rows,
                    range_tombstones,
                })
            },
        );
    prop_oneof![tree, plan, rows]
}

/// Wrap `body` in a valid header and checksum, so the body parser sees it.
fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    frame_v(VERSION, kind, body)
}

/// [`frame`] of wire format `version`.
fn frame_v(version: u8, kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(version);
    out.push(kind);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    let crc = checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn typed_errors_for_each_header_fault() {
    let m = Message::Plan(StreamPlan::default()).encode();
    assert_eq!(m.len(), OVERHEAD + 11);
    assert!(matches!(
        Message::decode(&m[..5]),
        Err(DecodeError::Truncated { .. })
    ));
    let mut b = m.clone();
    b[0] = b'X';
    assert_eq!(Message::decode(&b), Err(DecodeError::BadMagic));
    let mut b = m.clone();
    b[4] = 3;
    let e = Message::decode(&b).unwrap_err();
    assert_eq!(e, DecodeError::Version(3));
    assert!(e.to_string().contains("version 3"), "{e}");
    b[4] = 0;
    assert_eq!(Message::decode(&b), Err(DecodeError::Version(0)));
    let b = frame(9, &[]);
    assert_eq!(Message::decode(&b), Err(DecodeError::UnknownKind(9)));
    let mut b = m.clone();
    b.push(0);
    assert!(matches!(
        Message::decode(&b),
        Err(DecodeError::Length { .. })
    ));
    let mut b = m.clone();
    b[HEADER_LEN] ^= 1;
    assert!(matches!(
        Message::decode(&b),
        Err(DecodeError::Checksum { .. })
    ));
    // A huge count in a well-framed body is refused before allocating.
    let mut body = vec![0u8; 8];
    varint::put(&mut body, u64::MAX >> 1);
    assert!(matches!(
        Message::decode(&frame(KIND_PLAN, &body)),
        Err(DecodeError::Malformed { .. })
    ));
    // A tombstone with a value.
    let mut body = vec![0u8; 8];
    body.extend_from_slice(&[1, 0, 1, 0, 1]); // from, seq, last, no ranges, 1 row
    body.extend_from_slice(&[1, b'k', 1, b'v']);
    body.extend_from_slice(&[0; 8]);
    body.push(1);
    let e = Message::decode(&frame(KIND_ROWS, &body)).unwrap_err();
    assert!(e.to_string().contains("tombstone"), "{e}");
    let as_error: Error = e.into();
    assert!(matches!(as_error, Error::BadMessage(_)));
}

#[test]
fn tree_message_round_trips_a_tree() {
    let rows = (0..50u32).map(|i| Row {
        key: i.to_le_bytes().to_vec(),
        value: vec![1],
        ts: 1,
        tombstone: false,
        expires: 0,
    });
    let t = MerkleTree::build(TokenRange::FULL, 6, rows).unwrap();
    let m = Message::Tree(TreeMessage::new(7, ReplicaId(2), "t", 99, &t));
    let Message::Tree(back) = Message::decode(&m.encode()).unwrap() else {
        panic!("kind")
    };
    assert_eq!(back.tree().unwrap().root(), t.root());
    assert_eq!(back.rows, 50);
}

proptest! {
    #[test]
    fn round_trip(m in arb_message()) {
        let b = m.encode();
        prop_assert_eq!(Message::decode(&b).unwrap(), m);
        for cut in [0, 1, b.len() / 2, b.len() - 1] {
            prop_assert!(Message::decode(&b[..cut]).is_err());
        }
    }

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Message::decode(&b);
    }

    #[test]
    fn random_bodies_never_panic(kind in 0u8..5, body in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Message::decode(&frame(kind, &body));
    }

    #[test]
    fn any_bit_flip_is_detected(m in arb_message(), bit: prop::sample::Index) {
        let mut b = m.encode();
        let bit = bit.index(b.len() * 8);
        b[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(Message::decode(&b).is_err());
    }

    #[test]
    fn mutated_bodies_never_panic(m in arb_message(), at: prop::sample::Index, byte: u8) {
        // Corrupt the body but re-frame it with a valid checksum.
        let b = m.encode();
        let mut body = b[HEADER_LEN..b.len() - 4].to_vec();
        if !body.is_empty() {
            let i = at.index(body.len());
            body[i] = byte;
        }
        let _ = Message::decode(&frame(b[5], &body));
    }
}

/// Version 1 frames (no range tombstone fields) still decode, as messages carrying no
/// range tombstone; bad range tombstone blocks are typed errors.
#[test]
fn version_1_frames_decode_without_range_tombstones() {
    let tree = MerkleTree::build(TokenRange::FULL, 2, std::iter::empty()).unwrap();
    let tree = Message::Tree(TreeMessage::new(1, ReplicaId(2), "t", 3, &tree));
    let plan = Message::Plan(StreamPlan {
        session: 1,
        targets: vec![(ReplicaId(2), vec![TokenRange::FULL])],
        expect_from: vec![ReplicaId(2)],
        range_targets: Vec::new(),
    });
    let rows = Message::Rows(RowBatch {
        session: 1,
        from: ReplicaId(2),
        seq: 0,
        last: true,
        ranges: vec![TokenRange::FULL],
        rows: vec![Row {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            ts: 4,
            tombstone: false,
            expires: 0,
        }],
        range_tombstones: RangeTombstones::new(),
    });
    // The v2 fields these messages end with: 16 bytes of digest, an empty list, an
    // empty block.
    for (m, v2_bytes) in [(tree, 16), (plan, 1), (rows, 1)] {
        let b = m.encode();
        let body = &b[HEADER_LEN..b.len() - 4 - v2_bytes];
        assert_eq!(Message::decode(&frame_v(1, b[5], body)).unwrap(), m);
        // A v1 body read as v2 lacks its fields.
        assert!(Message::decode(&frame_v(2, b[5], body)).is_err());
    }
    // A range tombstone block out of order is malformed, with its reason.
    let mut body = vec![0u8; 8];
    body.extend_from_slice(&[1, 0, 1, 0, 0]); // from, seq, last, no ranges, no rows
    body.extend_from_slice(&[2, 1, b'm', 0]); // 2 fragments: "m".. unbounded
    body.extend_from_slice(&[0; 8]);
    body.extend_from_slice(&[1, b'a', 0]); // "a".. after it
    body.extend_from_slice(&[0; 8]);
    let e = Message::decode(&frame(KIND_ROWS, &body)).unwrap_err();
    assert!(e.to_string().contains("range tombstones"), "{e}");
}
