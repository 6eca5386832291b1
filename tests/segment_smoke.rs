//! Smoke test: write a segment with tiny blocks and read it back in every access mode.

use segstore::io::FileRules;
use segstore::segment::{SegmentName, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, SegmentOptions};

#[test]
fn write_then_read_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SegmentOptions {
        index_block_size: 64,
        filter_bits_per_key: 10,
    };
    let name = SegmentName::new("t", 1).unwrap();
    let mut w =
        SegmentWriter::create(dir.path(), name.clone(), &opts, &FileRules::posix()).unwrap();
    for i in 0..500u32 {
        let k = format!("key{:05}", i * 2);
        w.add(k.as_bytes(), format!("v{i}").as_bytes(), i as u64, false)
            .unwrap();
    }
    let stats = w.finish().unwrap();
    assert_eq!(stats.entry_count, 500);
    for mode in DiskAccessMode::all() {
        let r = SegmentReader::open(dir.path(), &name, mode.resolve()).unwrap();
        for i in 0..500u32 {
            let k = format!("key{:05}", i * 2);
            let e = r.get(k.as_bytes()).unwrap().unwrap();
            assert_eq!(e.value, format!("v{i}").into_bytes());
            assert_eq!(
                r.get(format!("key{:05}", i * 2 + 1).as_bytes()).unwrap(),
                None
            );
        }
        let all: Vec<_> = r.iter().unwrap().map(|e| e.unwrap().key).collect();
        assert_eq!(all.len(), 500);
        let some: Vec<_> = r
            .scan(b"key00100".as_slice()..b"key00120".as_slice())
            .unwrap()
            .map(|e| String::from_utf8(e.unwrap().key).unwrap())
            .collect();
        assert_eq!(some.len(), 10, "{some:?}");
        assert_eq!(r.verify().unwrap(), 500);
    }
}
