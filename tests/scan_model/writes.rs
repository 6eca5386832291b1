//! The write operations: each through its API call to the table, and to the model.

use std::collections::BTreeMap;
use std::time::Duration;

use segstore::WriteBatch;

use crate::model::Cell;
use crate::ops::Op;
use crate::run::Run;

impl Run {
    pub(crate) fn write(&mut self, op: &Op) {
        match op {
            &Op::Put(k, v) => self.cell(k, Some(v), None, None),
            &Op::PutAt(k, v, ts) => self.cell(k, Some(v), Some(ts), None),
            &Op::Delete(k) => self.cell(k, None, None, None),
            &Op::DeleteAt(k, ts) => self.cell(k, None, Some(ts), None),
            &Op::PutTtl(k, v, ttl) => self.cell(k, Some(v), None, Some(ttl)),
            &Op::PutTtlAt(k, v, ts, ttl) => self.cell(k, Some(v), Some(ts), Some(ttl)),
            Op::Batch(cells) => self.batch(cells),
            &Op::Bulk(i, n, v) => {
                let cells: Vec<_> = (0..n)
                    .map(|j| (i + j, Some(v.wrapping_add(j as u8))))
                    .collect();
                self.batch(&cells);
            }
            &Op::DeleteRange(a, b) => self.delete_range(a, b),
            _ => unreachable!("{op:?} is not a write"),
        }
    }

    /// Pool key `k`: a put of the value `v` stands for, or a delete (`None`); at the
    /// clock or at timestamp `at`; with a TTL of `ttl` microseconds or none.
    fn cell(&mut self, k: usize, v: Option<u8>, at: Option<u64>, ttl: Option<u64>) {
        let key = self.pool.key(k);
        let value = v.map(|v| self.pool.value(v));
        let t = &self.t;
        let micros = Duration::from_micros;
        let written = match (&value, at, ttl) {
            (None, None, _) => t.delete(&key),
            (None, Some(ts), _) => t.write(WriteBatch::new().delete_at(&key, ts)).map(drop),
            (Some(v), None, None) => t.put(&key, v),
            (Some(v), Some(ts), None) => t.write(WriteBatch::new().put_at(&key, v, ts)).map(drop),
            (Some(v), None, Some(ttl)) => t.put_ttl(&key, v, micros(ttl)),
            (Some(v), Some(ts), Some(ttl)) => t
                .write(WriteBatch::new().put_ttl_at(&key, v, ts, micros(ttl)))
                .map(drop),
        };
        written.unwrap();
        let cell = Cell {
            ts: at.unwrap_or_else(|| self.model.next_ts()),
            tombstone: value.is_none(),
            expires: ttl.map_or(0, |ttl| self.model.now + ttl),
            value: value.unwrap_or_default(),
        };
        self.model.apply(key, cell);
    }

    /// Puts (`Some`) and deletes of pool keys in one batch, at one timestamp: of a key
    /// twice, the last operation wins.
    fn batch(&mut self, cells: &[(usize, Option<u8>)]) {
        let mut b = WriteBatch::new();
        let mut last = BTreeMap::new();
        for &(k, v) in cells {
            let (key, value) = (self.pool.key(k), v.map(|v| self.pool.value(v)));
            match &value {
                Some(value) => b.put(&key, value),
                None => b.delete(&key),
            };
            last.insert(key, value);
        }
        self.t.write(&b).unwrap();
        let ts = self.model.next_ts();
        for (key, value) in last {
            let cell = Cell {
                ts,
                tombstone: value.is_none(),
                expires: 0,
                value: value.unwrap_or_default(),
            };
            self.model.apply(key, cell);
        }
    }

    /// From pool key `a` to pool key `b`, if `a` is below `b`.
    fn delete_range(&mut self, a: usize, b: usize) {
        let (a, b) = (self.pool.key(a), self.pool.key(b));
        if a < b {
            self.t.delete_range(a.clone()..b.clone()).unwrap();
            let ts = self.model.next_ts();
            self.model.delete_range(a, b, ts);
        }
    }
}
