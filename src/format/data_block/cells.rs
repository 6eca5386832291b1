//! A block's entries in order from some ordinal on ([`DataBlock::cells_from`]).

use super::{BlockCell, DataBlock, Malformed};

impl<'a> DataBlock<'a> {
    /// The entries from ordinal `i` on, in order.
    pub fn cells_from(&self, i: usize) -> Cells<'a> {
        Cells {
            blk: *self,
            next: i,
            at: None,
            head: &[],
        }
    }
}

/// The entries of a block in order, from some ordinal on ([`DataBlock::cells_from`]).
#[derive(Debug, Clone)]
pub struct Cells<'a> {
    blk: DataBlock<'a>,
    next: usize,
    /// Where entry `next` starts, once known (within the current group).
    at: Option<usize>,
    /// The current group's first key.
    head: &'a [u8],
}

impl<'a> Iterator for Cells<'a> {
    type Item = Result<(usize, BlockCell<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        let i = self.next;
        if i >= self.blk.s.n {
            return None;
        }
        match self.step(i) {
            Ok(c) => {
                self.next = i + 1;
                self.at = Some(c.end);
                Some(Ok((i, c)))
            }
            Err(e) => {
                self.next = self.blk.s.n;
                Some(Err(e))
            }
        }
    }
}

impl<'a> Cells<'a> {
    fn step(&mut self, i: usize) -> Result<BlockCell<'a>, Malformed> {
        let within = i % self.blk.s.interval;
        match self.at {
            Some(at) if within != 0 => self.blk.cell_at(at, self.head),
            _ => {
                let head = self.blk.head(i / self.blk.s.interval)?;
                self.head = head.suffix;
                self.blk.skip(head, within)
            }
        }
    }
}
