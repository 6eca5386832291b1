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

        assert_eq!(sm_state(&mut b).await, (Some(40), model(40)));
        let cur = b.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(cur.meta, snap.meta);
        drop((cur, old_snap));
        // The old store is gone; the old snapshot was still being read (`old_snap`), so
        // it waits for the next build or install.
        let left = names(&follower_dir.path().join("sm"));
        assert_eq!(left.len(), 4, "{left:?}");
        let old_name = left
            .iter()
            .find(|n| n.starts_with("snap-"))
            .unwrap()
            .clone();
        b.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let sm_dir = follower_dir.path().join("sm");
        let left = names(&sm_dir);
        assert!(!left.contains(&old_name), "{left:?}");
        // The installed snapshot, superseded, keeps only the files the store made from
        // it still has (hard links: no space of their own).
        let gen = sm_dir.join(left.iter().find(|n| n.starts_with("gen-")).unwrap());
        let snaps: Vec<&String> = left.iter().filter(|n| n.starts_with("snap-")).collect();
        for s in &snaps[..snaps.len() - 1] {
            for f in names(&sm_dir.join(s).join("store")) {
                let id = |p: std::path::PathBuf| segstore::memory::FileId::of_path(&p).ok();
                let kept = id(sm_dir.join(s).join("store").join(&f));
                assert!(
                    kept.is_some() && kept == id(gen.join(&f)),
                    "{s}/store/{f} is not shared"
                );
            }
        }
        b.close().unwrap();
        drop(b);

        let (_, mut b) = open(follower_dir.path(), segstore::Config::default()).unwrap();
        assert_eq!(sm_state(&mut b).await, (Some(40), model(40)));
        assert_eq!(
            names(&follower_dir.path().join("sm")).len(),
            3,
            "the open removed the rest"
        );
        assert_eq!(
            b.get_current_snapshot()
                .await
                .unwrap()
                .unwrap()
                .meta
                .last_log_id,
            snap.meta.last_log_id
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

/// Superseded snapshots share files with the live store, which maps them: under the
/// Windows emulation (a mapped file's links cannot be deleted) nothing is refused, and
/// what had to stay is gone after a reopen.
#[test]
fn retired_snapshots_never_delete_a_mapped_file() {
    use segstore::{DeletePolicy, DiskAccessMode, FileRules};
    let rules = FileRules::windows_emulation();
    // The policy Windows forces: without it the deleter unlinks a mapped file at once
    // (POSIX allows it), which the emulation refuses whenever a compaction's deletion
    // meets the checkpoint's read-only open of the same file.
    let cfg = || {
        segstore::Config::builder()
            .disk_access_mode(DiskAccessMode::Mmap)
            .delete_policy(DeletePolicy::DeferWhileMapped)
            .file_rules(rules.clone())
            .build()
            .unwrap()
    };
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    rt().block_on(async {
        let (_, mut a) = open(da.path(), cfg()).unwrap();
        let (_, mut b) = open(db.path(), cfg()).unwrap();
        b.apply(entries(1, 1..=30)).await.unwrap();
        b.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let mut last = None;
        for round in 0..4u64 {
            a.apply(entries(1, round * 25 + 1..=round * 25 + 25))
                .await
                .unwrap();
            // Reads map the segments the previous snapshot's checkpoint flushed.
            assert_eq!(sm_state(&mut a).await.1, model(round * 25 + 25));
            last = Some(
                a.get_snapshot_builder()
                    .await
                    .build_snapshot()
                    .await
                    .unwrap(),
            );
        }
        let snap = last.unwrap();
        assert_eq!(sm_state(&mut b).await.1, model(30)); // b's segments mapped too
        b.install_snapshot(&snap.meta, snap.snapshot).await.unwrap();
        assert_eq!(sm_state(&mut b).await, (Some(100), model(100)));
        a.close().unwrap();
        b.close().unwrap();
    });
    assert_eq!(rules.counts().refused_mapped, 0, "{:?}", rules.counts());
    for d in [da.path(), db.path()] {
        let (_, _sm) = open(d, segstore::Config::default()).unwrap();
        let left = names(&d.join("sm"));
        assert_eq!(left.len(), 3, "{left:?}");
    }
}

/// One state machine per directory: a second open is refused before it cleans up, so
/// it cannot remove what the first is receiving.
#[test]
fn a_second_open_is_refused_and_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (_, mut sm) = open(dir.path(), segstore::Config::default()).unwrap();
        let mut dst = sm.begin_receiving_snapshot().await.unwrap();
        let header = br#"{"files":[["kv.manifest",10]]}"#;
        let mut bytes = b"SEGRAFT1".to_vec();
        bytes.extend_from_slice(&(header.len() as u64).to_le_bytes());
        bytes.extend_from_slice(header);
        dst.write_all(&bytes).await.unwrap();
        let receiving = names(&dir.path().join("sm"));
        assert!(
            receiving.iter().any(|n| n.ends_with(".tmp")),
            "{receiving:?}"
        );
        let second = segstore_raft::StateMachine::<segstore_raft::kv::TypeConfig, _>::open(
            dir.path().join("sm"),
            segstore::Config::default(),
            segstore_raft::kv::Kv,
        );
        assert!(
            matches!(second, Err(segstore_raft::Error::Locked(_))),
            "{:?}",
            second.err()
        );
        assert_eq!(names(&dir.path().join("sm")), receiving);
    });
}
