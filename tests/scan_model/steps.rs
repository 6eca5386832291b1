//! A scan step, taken on a real scan and on what the model expects of that scan.

use segstore::Scan;

use crate::keys::{Key, Row};

#[derive(Clone, Debug)]
pub(crate) enum Step {
    Next,
    /// `next_with`, the row lent to a closure.
    NextWith,
    Back,
    BackWith,
    Seek(Key),
    SeekBack(Key),
}

impl Step {
    /// Take the step on `scan`: the row a move yields (`None` at the end, and for a
    /// seek).
    pub(crate) fn on_scan(&self, scan: &mut Scan) -> Option<Row> {
        let owned = |k: &[u8], v: &[u8]| (k.to_vec(), v.to_vec());
        let row = match self {
            Step::Next => scan.next(),
            Step::NextWith => scan.next_with(owned),
            Step::Back => scan.next_back(),
            Step::BackWith => scan.next_back_with(owned),
            Step::Seek(k) => {
                scan.seek(k);
                None
            }
            Step::SeekBack(k) => {
                scan.seek_back(k);
                None
            }
        };
        row.map(|r| r.unwrap())
    }

    /// Take the step on the model's scan: what `on_scan` should have answered.
    pub(crate) fn on_model(&self, e: &mut Expected) -> Option<Row> {
        match self {
            Step::Next | Step::NextWith => e.next(),
            Step::Back | Step::BackWith => e.next_back(),
            Step::Seek(k) => {
                e.front = e.rows.partition_point(|(x, _)| x < k);
                None
            }
            Step::SeekBack(k) => {
                e.back = e.rows.partition_point(|(x, _)| x <= k);
                None
            }
        }
    }
}

/// What a scan should yield: the model's rows in its range as it was when the scan was
/// created, and the two ends. The rows in `front..back` are those neither end has
/// yielded; a seek moves one end anywhere in the range (`Scan::seek`), and the ends
/// meet when they cross.
pub(crate) struct Expected {
    rows: Vec<Row>,
    front: usize,
    back: usize,
}

impl Expected {
    pub(crate) fn new(rows: Vec<Row>) -> Expected {
        let back = rows.len();
        Expected {
            rows,
            front: 0,
            back,
        }
    }

    fn next(&mut self) -> Option<Row> {
        let row = self.rows.get(self.front..self.back)?.first()?.clone();
        self.front += 1;
        Some(row)
    }

    fn next_back(&mut self) -> Option<Row> {
        let row = self.rows.get(self.front..self.back)?.last()?.clone();
        self.back -= 1;
        Some(row)
    }

    /// The rows still to come, front to back.
    pub(crate) fn rest(&self) -> Vec<Row> {
        self.rows
            .get(self.front..self.back)
            .map_or_else(Vec::new, <[Row]>::to_vec)
    }
}
