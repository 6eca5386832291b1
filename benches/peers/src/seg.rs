//! segstore under test: a bare segment read with `SegmentReader`, and the `Table`.

use super::*;

pub(crate) struct Seg {
    label: &'static str,
    r: SegmentReader,
}

impl System for Seg {
    fn name(&self) -> String {
        format!("segment {}", self.label)
    }
    fn run(&self, op: Op, keys: &[[u8; 16]]) -> u64 {
        let mut sum = 0u64;
        match op {
            Op::Hit | Op::Miss => {
                for k in keys {
                    if let Some(n) = self.r.get_with(k, |c| c.value.len()).unwrap() {
                        sum += n as u64;
                    }
                }
            }
            Op::Scan => {
                for k in keys {
                    for e in self
                        .r
                        .scan::<&[u8]>((Bound::Included(&k[..]), Bound::Unbounded))
                        .unwrap()
                        .take(SCAN_LEN)
                    {
                        sum += e.unwrap().value.len() as u64;
                    }
                }
            }
        }
        sum
    }
}

pub(crate) fn load_segstore(dir: &Path, n: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let name = SegmentName::new("peers", 1).unwrap();
    let mut w =
        SegmentWriter::create(dir, name, &SegmentOptions::default(), &FileRules::posix()).unwrap();
    for i in 0..n {
        w.add(&key(2 * i), &value(i), 1, false).unwrap();
    }
    w.finish().unwrap();
}

/// Non-default segstore settings shown by `--variants`.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Variant {
    Default,
    /// `huge_pages: anonymous_index`: the index copied into memory advised for huge pages.
    AnonIndex,
    /// `crc_check_chance: 0`: point reads do not check record checksums (like LMDB).
    NoCrc,
}

pub(crate) fn open_segstore(dir: &Path, mode: DiskAccessMode, v: Variant) -> Seg {
    let name = SegmentName::new("peers", 1).unwrap();
    Seg {
        label: match v {
            Variant::Default => mode.as_str(),
            Variant::AnonIndex => "mmap anon_index",
            Variant::NoCrc => "mmap crc_chance=0",
        },
        // The store's defaults, except that the index cache and the block cache get
        // the same 1 GiB that RocksDB, fjall and redb get for their caches (they only
        // act where the index, or the data, is read with positional reads: `standard`,
        // and the data of `auto`).
        r: SegmentReader::open_with(dir, &name, mode.resolve(), &{
            let mut c = segstore::segment::ReaderOptions::default();
            c.index_cache = Some(Arc::new(segstore::segment::IndexCache::new(1 << 30)));
            c.block_cache = segstore::segment::BlockCache::new(1 << 30).map(Arc::new);
            c.huge_pages = if v == Variant::AnonIndex {
                segstore::HugePages::AnonymousIndex
            } else {
                segstore::HugePages::Off
            };
            c.crc_check_chance = if v == Variant::NoCrc { 0.0 } else { 1.0 };
            c
        })
        .unwrap(),
    }
}

pub(crate) struct SegTable {
    store: &'static segstore::Store,
    t: Arc<segstore::Table>,
    how: TableRead,
}

/// How a Table row reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum TableRead {
    /// `Table::get_with` per get.
    GetWith,
    /// `Table::get`: a `Value` holding the view.
    Value,
    /// One `ReadView` per batch (as LMDB and redb take one read transaction per batch),
    /// then `TableView::get_with` and `TableView::scan`.
    View,
}

impl System for SegTable {
    fn name(&self) -> String {
        match self.how {
            TableRead::GetWith => "segstore Table".into(),
            TableRead::Value => "segstore Table, Value".into(),
            TableRead::View => "segstore Table, view".into(),
        }
    }
    fn run(&self, op: Op, keys: &[[u8; 16]]) -> u64 {
        let mut sum = 0u64;
        if self.how == TableRead::View {
            let view = self.store.read_view().unwrap();
            let tv = view.table(&self.t).unwrap();
            for k in keys {
                if op == Op::Scan {
                    let mut s = tv.scan(&k[..]..).unwrap();
                    for _ in 0..SCAN_LEN {
                        match s.next_with(|_, v| v.len() as u64) {
                            Some(n) => sum += n.unwrap(),
                            None => break,
                        }
                    }
                } else {
                    sum += tv.get_with(k, |v| v.map_or(0, |v| v.len() as u64)).unwrap();
                }
            }
            return sum;
        }
        match op {
            Op::Hit | Op::Miss if self.how == TableRead::Value => {
                for k in keys {
                    if let Some(v) = self.t.get(k).unwrap() {
                        sum += v.len() as u64;
                    }
                }
            }
            Op::Hit | Op::Miss => {
                for k in keys {
                    sum += self
                        .t
                        .get_with(k, |v| v.map_or(0, |v| v.len() as u64))
                        .unwrap();
                }
            }
            Op::Scan => {
                // Rows lent by `next_with` (from the map: the table is one segment).
                for k in keys {
                    let mut s = self.t.scan(&k[..]..).unwrap();
                    for _ in 0..SCAN_LEN {
                        match s.next_with(|_, v| v.len() as u64) {
                            Some(n) => sum += n.unwrap(),
                            None => break,
                        }
                    }
                }
            }
        }
        sum
    }
}

fn table_config() -> segstore::Config {
    let mut c = segstore::Config::default();
    c.disk_access_mode = DiskAccessMode::Mmap;
    c.track_leaks = false;
    c
}

pub(crate) fn load_table(dir: &Path, n: u64) {
    let store = segstore::Store::open(dir, table_config()).unwrap();
    let t = store.table("peers").unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut b = segstore::WriteBatch::default();
        for &i in chunk {
            b.put(key(2 * i), value(i));
        }
        t.write(&b).unwrap();
    }
    t.flush().unwrap();
    t.compact().unwrap();
    drop(t);
    store.close().unwrap();
}

/// The one store both Table rows read (a store directory is opened once per process).
static TABLE_STORE: std::sync::OnceLock<segstore::Store> = std::sync::OnceLock::new();

pub(crate) fn open_table(dir: &Path, how: TableRead) -> SegTable {
    let store = TABLE_STORE.get_or_init(|| segstore::Store::open(dir, table_config()).unwrap());
    SegTable {
        store,
        t: store.table("peers").unwrap(),
        how,
    }
}
