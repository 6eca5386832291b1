//! openraft's own storage test suite over the segstore log store and state machine.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use segstore_raft::kv::{Kv, TypeConfig};
use segstore_raft::{LogStore, StateMachine};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, StateMachine<TypeConfig, Kv>, tempfile::TempDir>
    for Builder
{
    async fn build(
        &self,
    ) -> Result<
        (
            tempfile::TempDir,
            LogStore<TypeConfig>,
            StateMachine<TypeConfig, Kv>,
        ),
        StorageError<u64>,
    > {
        let dir = tempfile::tempdir().expect("temp dir");
        let (log, sm) =
            segstore_raft::open(dir.path(), segstore::Config::default(), Kv).map_err(|e| {
                e.into_storage(openraft::ErrorSubject::Store, openraft::ErrorVerb::Write)
            })?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_suite_passes() {
    if let Err(e) = Suite::test_all(Builder) {
        panic!("openraft's storage suite failed: {e}");
    }
}
