//! Snapshots: built by checkpoint, streamed in chunks (with resent chunks), installed
//! over a state machine that held other data, which then holds exactly the snapshot's.

mod common;

use std::io::SeekFrom;

use common::*;
use openraft::storage::RaftStateMachine;
use openraft::RaftSnapshotBuilder;
use segstore_raft::kv::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

#[test]
fn installing_over_a_non_empty_state_machine_leaves_exactly_the_snapshot() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (_, mut a) = open(leader_dir.path(), segstore::Config::default()).unwrap();
        let (_, mut b) = open(follower_dir.path(), segstore::Config::default()).unwrap();
        a.apply(entries(1, 1..=40)).await.unwrap();
        // The follower holds keys the leader never had, and a later last_applied.
        let mut own = entries(2, 1..=60);
        for (i, e) in own.iter_mut().enumerate().skip(1) {
            e.payload = openraft::EntryPayload::Normal(Request::Set {
                key: format!("only-b-{i}"),
                value: "x".into(),
            });
        }
        let replies = b.apply(own).await.unwrap();
        assert_eq!(replies[5], Response { previous: None });
        let old_snap = b
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();

        let snap = a
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snap.meta.last_log_id, Some(log_id(1, 40)));
        let len = snap.snapshot.len().unwrap();

        // Stream it in 4 KiB chunks, resending every third chunk as a lost answer would.
        let mut src = snap.snapshot;
        let mut dst = b.begin_receiving_snapshot().await.unwrap();
        let mut offset = 0u64;
        let mut n = 0;
        while offset < len {
            src.seek(SeekFrom::Start(offset)).await.unwrap();
            let mut buf = vec![0; 4096];
            let got = src.read(&mut buf).await.unwrap();
            buf.truncate(got);
            dst.seek(SeekFrom::Start(offset)).await.unwrap();
            dst.write_all(&buf).await.unwrap();
            n += 1;
            if n % 3 == 0 {
                dst.seek(SeekFrom::Start(offset)).await.unwrap();
                dst.write_all(&buf).await.unwrap();
            }
            offset += got as u64;
        }
        dst.shutdown().await.unwrap();
        b.install_snapshot(&snap.meta, dst).await.unwrap();
        drop(old_snap);

        assert_eq!(sm_state(&mut b).await, (Some(40), model(40)));
        let cur = b.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(cur.meta, snap.meta);
        // One store and one snapshot left: the old ones were removed once let go.
        let left = names(&follower_dir.path().join("sm"));
        assert_eq!(left.len(), 3, "{left:?}");
        b.close().unwrap();
        drop(b);

        let (_, mut b) = open(follower_dir.path(), segstore::Config::default()).unwrap();
        assert_eq!(sm_state(&mut b).await, (Some(40), model(40)));
        assert_eq!(
            b.get_current_snapshot().await.unwrap().unwrap().meta,
            snap.meta
        );
        // It goes on from there.
        b.apply(entries(1, 41..=45)).await.unwrap();
        assert_eq!(sm_state(&mut b).await, (Some(45), model(45)));
    });
}

#[test]
fn a_stream_with_a_gap_or_a_bad_file_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (_, mut sm) = open(dir.path(), segstore::Config::default()).unwrap();
        let mut dst = sm.begin_receiving_snapshot().await.unwrap();
        let err = dst.seek(SeekFrom::Start(10)).await.unwrap_err();
        assert!(
            err.to_string().contains("past the 0 bytes received"),
            "{err}"
        );

        let mut dst = sm.begin_receiving_snapshot().await.unwrap();
        let header = br#"{"files":[["../escape",3]]}"#;
        let mut bytes = b"SEGRAFT1".to_vec();
        bytes.extend_from_slice(&(header.len() as u64).to_le_bytes());
        bytes.extend_from_slice(header);
        let err = dst.write_all(&bytes).await.unwrap_err();
        assert!(err.to_string().contains("is not a store file's"), "{err}");

        let mut dst = sm.begin_receiving_snapshot().await.unwrap();
        let err = dst.write_all(b"NOTASNAPSHOT0000").await.unwrap_err();
        assert!(err.to_string().contains("bad magic"), "{err}");
    });
    // Nothing was left of the refused streams.
    let left = names(&dir.path().join("sm"));
    assert!(left.iter().all(|n| !n.ends_with(".tmp")), "{left:?}");
}
