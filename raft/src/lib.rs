//! segstore as an [openraft](https://docs.rs/openraft/0.9) node's storage: [`LogStore`]
//! (openraft's `RaftLogStorage` and `RaftLogReader`) and [`StateMachine`]
//! (`RaftStateMachine` and `RaftSnapshotBuilder`), generic over the application's
//! request and response types through [`Application`].
//!
//! ```text
//! node/log/          LogStore: a segstore store (tables raft_log, raft_meta)
//! node/sm/CURRENT    which state machine store and snapshot are current
//! node/sm/gen-N/     StateMachine: a segstore store (raft_sm_meta + the application's)
//! node/sm/snap-N/    the current snapshot: a checkpoint (hard links) + meta.json
//! ```
//!
//! # Use
//! Declare the type config with `SnapshotData = segstore_raft::SnapshotData` and
//! `Entry = openraft::Entry<Self>`, implement [`Application`] (apply a request to the
//! store's tables through a transaction), open both halves with [`open`] and hand them
//! to `openraft::Raft::new`. `examples/raft_kv.rs` is a whole key-value server.
//!
//! # Why the log and the state machine are separate stores
//! - **Installing a snapshot replaces the state machine whole**, atomically, by
//!   pointing `CURRENT` at a new store directory made of the snapshot's files. The log
//!   must survive that untouched, so it cannot live in the store being replaced; and a
//!   store cannot swap some of its tables for another store's segments in one step.
//! - **A snapshot is a checkpoint of the whole store**: with the log beside the state,
//!   every snapshot would hard-link (and send) the log's segments too.
//! - **Different durability**: every append must be fsynced before openraft hears it
//!   is flushed, while applies need no fsync at all (openraft applies again from the
//!   log after a crash). Separate commit logs keep the state machine's writes out of
//!   the log's fsyncs, and the log's tombstones (truncate, purge; `gc_grace` 0) out of
//!   the state machine's compactions.
//!
//! The cost: the two stores do not commit together, which Raft does not need (the log
//! is the source of truth, and `last_applied` is committed atomically with the applied
//! changes in the state machine's own store).
//!
//! # Guarantees, and how they are tested
//! 1. A vote returned by `save_vote` and entries reported by `LogFlushed` survive a
//!    crash of the process and a power loss (`tests/raft_crash_kill.rs` SIGKILLs a
//!    child at random moments; `tests/raft_power_loss.rs` loses power at every I/O
//!    operation of append, truncate, purge, apply, snapshot build and install).
//! 2. `apply` commits the application's writes, `last_applied` and the membership as
//!    one record: after any crash the state machine is at some `last_applied` with
//!    exactly the writes of the entries up to it.
//! 3. A snapshot install is whole or absent after a crash at any I/O operation, has no
//!    size limit, and leaves exactly the snapshot's contents ([`snapshot`] module,
//!    `tests/raft_snapshot.rs`).
//! 4. `openraft::testing::Suite::test_all` passes (`tests/raft_suite.rs`).

#![deny(missing_docs)]

mod dirs;
mod error;
mod fs;
pub mod kv;
mod log_store;
pub mod snapshot;
mod state_machine;
mod stream;

use std::path::Path;

use openraft::{Entry, RaftTypeConfig};

pub use dirs::SM_META_TABLE;
pub use error::{Error, Result};
pub use log_store::{LogStore, LOG_META_TABLE, LOG_TABLE};
pub use state_machine::{Application, StateMachine, StateMachineReader};
pub use stream::SnapshotData;

/// Open a node's log store in `dir/log` and state machine in `dir/sm`, both with
/// `config` (its `file_rules` reach this crate's own file operations too, with the
/// `testing` feature).
pub fn open<C, A>(
    dir: impl AsRef<Path>,
    config: segstore::Config,
    app: A,
) -> Result<(LogStore<C>, StateMachine<C, A>)>
where
    C: RaftTypeConfig<Entry = Entry<C>, SnapshotData = SnapshotData>,
    C::R: Default,
    A: Application<C>,
{
    let dir = dir.as_ref();
    let log = LogStore::open(dir.join("log"), config.clone())?;
    let sm = StateMachine::open(dir.join("sm"), config, app)?;
    Ok((log, sm))
}
