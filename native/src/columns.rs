//! The growing columns a family and the allocator events are kept in (tables.py's `_Growing` and families).

/// An integer column kept as a constant run (`run` repeated `run_len` times, no storage) until a second value comes,
/// then as a Vec: tables.py's `_Growing` does the same. Why: most argument columns hold one value on most events
/// (`correlation`, `device`, `stream`, `bytes` of every CPU op): as Vecs they were half the scanner's columns
/// (15 of 29 MB on a 115 MB trace), grown by realloc, all held until the scan's end.
#[derive(Default)]
pub(crate) struct Col<T> {
    pub(crate) vec: Vec<T>,
    pub(crate) run: T,
    pub(crate) run_len: usize, // rows of the run while `vec` is empty
}
impl<T: Copy + PartialEq + Default> Col<T> {
    #[inline(always)]
    pub(crate) fn push(&mut self, x: T) {
        if self.vec.is_empty() {
            if self.run_len == 0 {
                self.run = x;
            }
            if x == self.run {
                self.run_len += 1;
                return;
            }
            self.vec.reserve(2 * self.run_len + 1);
            self.vec.resize(self.run_len, self.run); // the run ends: written out
            self.run_len = 0;
        }
        self.vec.push(x);
    }
    /// `push` of each of `n` values, in order (`at(k)` the k-th): the same column, in one pass per column.
    #[inline(always)]
    pub(crate) fn extend(&mut self, n: usize, at: impl Fn(usize) -> T) {
        if n == 0 {
            return;
        }
        if self.vec.is_empty() {
            let run = if self.run_len == 0 { at(0) } else { self.run };
            if (0..n).all(|k| at(k) == run) {
                self.run = run;
                self.run_len += n;
                return;
            }
            self.vec.reserve(2 * self.run_len + n);
            self.vec.resize(self.run_len, run); // the run ends: written out, then the values after it
            self.run_len = 0;
        }
        self.vec.extend((0..n).map(at));
    }
    pub(crate) fn len(&self) -> usize {
        if self.vec.is_empty() { self.run_len } else { self.vec.len() }
    }
    pub(crate) fn truncate(&mut self, n: usize) {
        if self.vec.is_empty() {
            self.run_len = self.run_len.min(n);
        } else {
            self.vec.truncate(n);
        }
    }
}

#[derive(Default)]
pub(crate) struct Family {
    pub(crate) kind: Col<i8>,
    pub(crate) name: Col<i32>,
    pub(crate) pid: Col<i32>,
    pub(crate) tid: Col<i32>,
    pub(crate) ts: Vec<f64>,
    pub(crate) dur: Vec<f64>,
    pub(crate) external_id: Col<i64>,
    pub(crate) launched_kernel: Col<i32>,
    pub(crate) correlation: Col<i64>,
    pub(crate) device: Col<i64>,
    pub(crate) stream: Col<i64>,
    pub(crate) bytes: Col<i64>,
    /// rows routed but not yet in the columns (at most `STAGED`; none between chunks: `flush`)
    pub(crate) staged: Vec<Row>,
}

/// One event's row of a family, staged. Why: a row written to the twelve columns one value at a time costs a
/// capacity or run check per value (~6 % of a scan); staged rows go to each column in one pass.
#[derive(Clone, Copy)]
pub(crate) struct Row {
    pub(crate) ts: f64,
    pub(crate) dur: f64,
    pub(crate) external_id: i64,
    pub(crate) correlation: i64,
    pub(crate) device: i64,
    pub(crate) stream: i64,
    pub(crate) bytes: i64,
    pub(crate) name: i32,
    pub(crate) pid: i32,
    pub(crate) tid: i32,
    pub(crate) launched_kernel: i32,
    pub(crate) kind: i8,
}
pub(crate) const STAGED: usize = 64;

impl Family {
    #[inline(always)]
    pub(crate) fn push(&mut self, row: Row) {
        if self.staged.len() == STAGED {
            self.flush();
        }
        self.staged.push(row);
    }

    /// The staged rows into the columns.
    #[inline(never)]
    pub(crate) fn flush(&mut self) {
        let rows = std::mem::take(&mut self.staged);
        let n = rows.len();
        self.kind.extend(n, |k| rows[k].kind);
        self.name.extend(n, |k| rows[k].name);
        self.pid.extend(n, |k| rows[k].pid);
        self.tid.extend(n, |k| rows[k].tid);
        self.ts.extend(rows.iter().map(|r| r.ts));
        self.dur.extend(rows.iter().map(|r| r.dur));
        self.external_id.extend(n, |k| rows[k].external_id);
        self.launched_kernel.extend(n, |k| rows[k].launched_kernel);
        self.correlation.extend(n, |k| rows[k].correlation);
        self.device.extend(n, |k| rows[k].device);
        self.stream.extend(n, |k| rows[k].stream);
        self.bytes.extend(n, |k| rows[k].bytes);
        self.staged = rows;
        self.staged.clear();
    }

    /// Rows in the columns (staged rows not counted: none between chunks).
    pub(crate) fn len(&self) -> usize {
        self.kind.len()
    }
    pub(crate) fn truncate(&mut self, n: usize) {
        self.staged.clear();
        self.kind.truncate(n);
        self.name.truncate(n);
        self.pid.truncate(n);
        self.tid.truncate(n);
        self.ts.truncate(n);
        self.dur.truncate(n);
        self.external_id.truncate(n);
        self.launched_kernel.truncate(n);
        self.correlation.truncate(n);
        self.device.truncate(n);
        self.stream.truncate(n);
        self.bytes.truncate(n);
    }
}

#[derive(Default)]
pub(crate) struct Memory {
    pub(crate) ts: Vec<f64>,
    pub(crate) pid: Col<i32>,
    pub(crate) tid: Col<i32>,
    pub(crate) bytes: Col<i64>,
    pub(crate) total_allocated: Col<i64>,
    pub(crate) device_type: Col<i64>,
    pub(crate) device_id: Col<i64>,
}
impl Memory {
    pub(crate) fn truncate(&mut self, n: usize) {
        self.ts.truncate(n);
        self.pid.truncate(n);
        self.tid.truncate(n);
        self.bytes.truncate(n);
        self.total_allocated.truncate(n);
        self.device_type.truncate(n);
        self.device_id.truncate(n);
    }
}
