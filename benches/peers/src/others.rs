//! The other engines under test: LMDB (heed), fjall and redb (RocksDB is in `main.rs`,
//! behind its feature).

use super::*;

// ---------------------------------------------------------------- LMDB (heed)

pub(crate) struct Lmdb {
    env: heed::Env,
    db: heed::Database<heed::types::Bytes, heed::types::Bytes>,
}

pub(crate) fn open_lmdb(dir: &Path, create: bool) -> Lmdb {
    std::fs::create_dir_all(dir).unwrap();
    // SAFETY: heed requires that the same environment is not opened twice in one process
    // and that the files are not modified by others; each phase opens it once.
    let env = unsafe {
        heed::EnvOpenOptions::new()
            .map_size(64 << 30)
            .max_dbs(1)
            .open(dir)
            .unwrap()
    };
    let db = if create {
        let mut w = env.write_txn().unwrap();
        let db = env.create_database(&mut w, None).unwrap();
        w.commit().unwrap();
        db
    } else {
        let r = env.read_txn().unwrap();
        let db = env.open_database(&r, None).unwrap().unwrap();
        r.commit().unwrap();
        db
    };
    Lmdb { env, db }
}

pub(crate) fn load_lmdb(dir: &Path, n: u64) {
    let l = open_lmdb(dir, true);
    let mut w = l.env.write_txn().unwrap();
    for i in 0..n {
        l.db.put_with_flags(&mut w, heed::PutFlags::APPEND, &key(2 * i), &value(i))
            .unwrap();
    }
    w.commit().unwrap();
    l.env.force_sync().unwrap();
}

impl System for Lmdb {
    fn name(&self) -> String {
        "lmdb (heed)".into()
    }
    fn run(&self, op: Op, keys: &[[u8; 16]]) -> u64 {
        let txn = self.env.read_txn().unwrap();
        let mut sum = 0u64;
        match op {
            Op::Hit | Op::Miss => {
                for k in keys {
                    if let Some(v) = self.db.get(&txn, &k[..]).unwrap() {
                        sum += v.len() as u64;
                    }
                }
            }
            Op::Scan => {
                for k in keys {
                    let range = (Bound::Included(&k[..]), Bound::Unbounded);
                    for e in self.db.range(&txn, &range).unwrap().take(SCAN_LEN) {
                        sum += e.unwrap().1.len() as u64;
                    }
                }
            }
        }
        sum
    }
}

// ---------------------------------------------------------------- fjall

pub(crate) struct Fjall {
    db: fjall::Database,
    p: fjall::Keyspace,
}

pub(crate) fn open_fjall(dir: &Path) -> Fjall {
    let db = fjall::Database::builder(dir)
        .cache_size(1 << 30)
        .open()
        .unwrap();
    let p = db
        .keyspace("peers", fjall::KeyspaceCreateOptions::default)
        .unwrap();
    Fjall { db, p }
}

pub(crate) fn load_fjall(dir: &Path, n: u64) {
    let f = open_fjall(dir);
    let mut ing = f.p.start_ingestion().unwrap();
    for i in 0..n {
        ing.write(key(2 * i).to_vec(), value(i).to_vec()).unwrap();
    }
    ing.finish().unwrap();
    f.p.major_compact().unwrap();
    f.db.persist(fjall::PersistMode::SyncAll).unwrap();
}

impl System for Fjall {
    fn name(&self) -> String {
        "fjall".into()
    }
    fn run(&self, op: Op, keys: &[[u8; 16]]) -> u64 {
        let mut sum = 0u64;
        match op {
            Op::Hit | Op::Miss => {
                for k in keys {
                    if let Some(v) = self.p.get(k).unwrap() {
                        sum += v.len() as u64;
                    }
                }
            }
            Op::Scan => {
                for k in keys {
                    for e in self.p.range(&k[..]..).take(SCAN_LEN) {
                        sum += e.value().unwrap().len() as u64;
                    }
                }
            }
        }
        sum
    }
}

// ---------------------------------------------------------------- redb

const REDB_TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("peers");

pub(crate) struct Redb {
    db: redb::Database,
}

fn redb_path(dir: &Path) -> PathBuf {
    dir.join("peers.redb")
}

pub(crate) fn load_redb(dir: &Path, n: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let db = redb::Database::create(redb_path(dir)).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(REDB_TABLE).unwrap();
        for i in 0..n {
            t.insert(&key(2 * i)[..], &value(i)[..]).unwrap();
        }
    }
    w.commit().unwrap();
}

pub(crate) fn open_redb(dir: &Path) -> Redb {
    Redb {
        db: redb::Database::builder()
            .set_cache_size(1 << 30)
            .create(redb_path(dir))
            .unwrap(),
    }
}

impl System for Redb {
    fn name(&self) -> String {
        "redb".into()
    }
    fn run(&self, op: Op, keys: &[[u8; 16]]) -> u64 {
        use redb::ReadableDatabase;
        let txn = self.db.begin_read().unwrap();
        let t = txn.open_table(REDB_TABLE).unwrap();
        let mut sum = 0u64;
        match op {
            Op::Hit | Op::Miss => {
                for k in keys {
                    if let Some(v) = t.get(&k[..]).unwrap() {
                        sum += v.value().len() as u64;
                    }
                }
            }
            Op::Scan => {
                for k in keys {
                    for e in t.range(&k[..]..).unwrap().take(SCAN_LEN) {
                        sum += e.unwrap().1.value().len() as u64;
                    }
                }
            }
        }
        sum
    }
}
