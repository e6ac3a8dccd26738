//! The C ABI `phaseprof/trace/native.py` loads with ctypes: `pp_*` functions, each catching panics, with
//! its version (`pp_abi_version`). Any change a Python side built for the old one would misread raises
//! `ABI_VERSION` (and `native.ABI_VERSION` with it).

use super::*;

/// The version of this C ABI: the functions below, their arguments, and the family/column order of `pp_take`.
/// `phaseprof/trace/native.py` (`ABI_VERSION`) loads only a library that returns its own number; raise both
/// together on any change a Python side built for the old one would misread.
pub const ABI_VERSION: u32 = 1;

#[no_mangle]
pub extern "C" fn pp_abi_version() -> u32 {
    ABI_VERSION
}

#[no_mangle]
pub extern "C" fn pp_new() -> *mut Scanner {
    Box::into_raw(Box::new(Scanner::new()))
}

/// # Safety
/// `h` from pp_new, not freed before.
#[no_mangle]
pub unsafe extern "C" fn pp_free(h: *mut Scanner) {
    if !h.is_null() {
        drop(Box::from_raw(h));
    }
}

/// # Safety
/// `h` from pp_new; `data` valid for `len` bytes; `counts` for 2 u64.
#[no_mangle]
pub unsafe extern "C" fn pp_add(h: *mut Scanner, data: *const u8, len: usize, counts: *mut u64) -> i32 {
    let s = &mut *h;
    let bytes = if len == 0 { &[][..] } else { std::slice::from_raw_parts(data, len) };
    let mut c = [0u64; 2];
    let rc = catch_unwind(AssertUnwindSafe(|| s.add(bytes, false, &mut c))).unwrap_or(UNSUPPORTED);
    *counts = c[0];
    *counts.add(1) = c[1];
    rc
}

/// `pp_add` without copying the chunk: the `room` bytes after it (at least 64 used, else as pp_add) are
/// overwritten during the call and restored before it returns.
///
/// # Safety
/// `h` from pp_new; `data` valid and writable for `len + room` bytes, which nothing else reads or writes during
/// the call; `counts` for 2 u64.
#[no_mangle]
pub unsafe extern "C" fn pp_add_in_place(h: *mut Scanner, data: *mut u8, len: usize, room: usize,
                                         counts: *mut u64) -> i32 {
    if room < PAD || data.is_null() {
        return pp_add(h, data, len, counts);
    }
    let s = &mut *h;
    let buf = std::slice::from_raw_parts_mut(data, len + PAD);
    let mut saved = [0u8; PAD];
    saved.copy_from_slice(&buf[len..]);
    buf[len..].fill(0);
    let mut c = [0u64; 2];
    let rc = catch_unwind(AssertUnwindSafe(|| s.add(buf, true, &mut c))).unwrap_or(UNSUPPORTED);
    buf[len..].copy_from_slice(&saved);
    *counts = c[0];
    *counts.add(1) = c[1];
    rc
}

/// Column `col` of family `fam` (0-4: gpu, runtime, ops, gpu_annotations, modules, columns as tables.py's
/// `_FAMILY_COLUMNS`; 5: memory, as native.py's `_MEMORY_COLUMNS`) moved out of the scanner, which keeps an empty
/// one: its data pointer in `*ptr`, its capacity (elements) in `*cap`, its length (rows) returned. The caller owns
/// the allocation and frees it with `pp_release(ptr, cap, elem)`, `elem` its element's width code (`ELEM_*`),
/// once. A column held as a constant run gives no rows here: take it with `pp_take_run` first.
/// Why: handing the columns over without a copy (7.4 M rows: 0.47 s of copies, the scanner's columns and the
/// copies both held while a family was copied).
///
/// # Safety
/// `h` from pp_new; `ptr` and `cap` writable.
#[no_mangle]
pub unsafe extern "C" fn pp_take(h: *mut Scanner, fam: i32, col: i32, ptr: *mut *mut u8, cap: *mut usize) -> usize {
    let s = &mut *h;
    macro_rules! out {
        ($v:expr) => {{
            let mut v = std::mem::ManuallyDrop::new(std::mem::take(&mut $v));
            *ptr = v.as_mut_ptr() as *mut u8;
            *cap = v.capacity();
            v.len()
        }};
    }
    if fam == MEMORY {
        let m = &mut s.mem;
        return memory_column!(m, col, out);
    }
    let f = &mut s.fams[(fam as usize).min(N_FAMILIES - 1)];
    family_column!(f, col, out)
}

/// Column `col` of family `fam` (as `pp_take`) when the scanner holds it as a constant run: its value in `*value`
/// and its rows returned, the run removed from the scanner; 0 (nothing changed) for any other column.
///
/// # Safety
/// `h` from pp_new; `value` writable.
#[no_mangle]
pub unsafe extern "C" fn pp_take_run(h: *mut Scanner, fam: i32, col: i32, value: *mut i64) -> usize {
    let s = &mut *h;
    macro_rules! run {
        ($c:expr) => {{
            let c = &mut $c;
            if !c.vec.is_empty() {
                return 0;
            }
            *value = c.run as i64;
            std::mem::take(&mut c.run_len)
        }};
    }
    if fam == MEMORY {
        let m = &mut s.mem;
        return memory_run!(m, col, run);
    }
    let f = &mut s.fams[(fam as usize).min(N_FAMILIES - 1)];
    family_run!(f, col, run)
}

/// Element width codes of `pp_release`: the column's Rust element type, so that the allocation is freed with the
/// layout it was made with.
pub(crate) const ELEM_I8: i32 = 1;
pub(crate) const ELEM_I32: i32 = 4;
pub(crate) const ELEM_I64: i32 = 8;
pub(crate) const ELEM_F64: i32 = 9;

/// Free a column `pp_take` handed out (`ptr`, `cap` as it gave them; `elem`: ELEM_I8, ELEM_I32, ELEM_I64 or
/// ELEM_F64 as the column's type). 0: freed; -1: an unknown `elem` (nothing freed).
///
/// # Safety
/// `ptr`, `cap` from one pp_take, of a column of type `elem`, not released before and no longer read.
#[no_mangle]
pub unsafe extern "C" fn pp_release(ptr: *mut u8, cap: usize, elem: i32) -> i32 {
    if cap == 0 {
        return 0; // an empty Vec allocates nothing (its pointer is dangling)
    }
    match elem {
        ELEM_I8 => drop(Vec::from_raw_parts(ptr as *mut i8, 0, cap)),
        ELEM_I32 => drop(Vec::from_raw_parts(ptr as *mut i32, 0, cap)),
        ELEM_I64 => drop(Vec::from_raw_parts(ptr as *mut i64, 0, cap)),
        ELEM_F64 => drop(Vec::from_raw_parts(ptr as *mut f64, 0, cap)),
        _ => return -1,
    }
    0
}

/// Read `n` integer codes of `width` bytes (1: i8, 4: i32) at `codes` as i64, calling `f` with each; false for
/// another width.
#[inline(always)]
pub(crate) unsafe fn each_code(codes: *const u8, n: usize, width: i32, mut f: impl FnMut(usize, i64) -> bool) -> bool {
    match width {
        1 => std::slice::from_raw_parts(codes as *const i8, n).iter().enumerate().all(|(i, &c)| f(i, c as i64)),
        4 => std::slice::from_raw_parts(codes as *const i32, n).iter().enumerate().all(|(i, &c)| f(i, c as i64)),
        _ => false,
    }
}

/// tables.py's `_categorical`, its first pass: `used[c] = 1` for each of the `n` codes (width 1: i8, 4: i32).
/// 0: done; -1: a code outside `0..n_used` or another width (the caller's numpy path then raises).
///
/// # Safety
/// `codes` valid for `n` codes of `width` bytes; `used` writable for `n_used` bytes.
#[no_mangle]
pub unsafe extern "C" fn pp_used(codes: *const u8, n: usize, width: i32, used: *mut u8, n_used: usize) -> i32 {
    if n == 0 {
        return 0;
    }
    let used = std::slice::from_raw_parts_mut(used, n_used);
    let ok = each_code(codes, n, width, |_, c| match used.get_mut(c as usize) {
        Some(u) if c >= 0 => {
            *u = 1;
            true
        }
        _ => false,
    });
    if ok { 0 } else { -1 }
}

/// tables.py's `_categorical`, its second pass: `out[i] = remap[codes[i]]`, codes of width 1 (i8) or 4 (i32),
/// `remap` (`n_remap` entries) and `out` of `out_width` bytes (1, 2, 4 or 8: the signed integer pandas keeps).
/// 0: done; -1: a code outside `0..n_remap` or another width (the caller's numpy path then gathers or raises).
///
/// # Safety
/// `codes` valid for `n` codes; `remap` for `n_remap` entries and `out` writable for `n` entries of `out_width`.
#[no_mangle]
pub unsafe extern "C" fn pp_recode(codes: *const u8, n: usize, width: i32, remap: *const u8, n_remap: usize,
                                   out_width: i32, out: *mut u8) -> i32 {
    macro_rules! gather {
        ($t:ty) => {{
            let remap = std::slice::from_raw_parts(remap as *const $t, n_remap);
            let out = std::slice::from_raw_parts_mut(out as *mut $t, n);
            each_code(codes, n, width, |i, c| match remap.get(c as usize) {
                Some(&r) if c >= 0 => {
                    out[i] = r;
                    true
                }
                _ => false,
            })
        }};
    }
    if n == 0 {
        return 0;
    }
    let ok = match out_width {
        1 => gather!(i8),
        2 => gather!(i16),
        4 => gather!(i32),
        8 => gather!(i64),
        _ => false,
    };
    if ok { 0 } else { -1 }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn times_body(ts: &[f64], dur: &[f64], origin: f64, check_origin: f64, max_span: f64, ts_ns: &mut [i64],
              dur_ns: &mut [i64], end_ns: &mut [i64]) -> bool {
    let mut ok = true;
    let outs = ts_ns.iter_mut().zip(dur_ns.iter_mut()).zip(end_ns.iter_mut());
    for ((&t, &d), ((tn, dn), en)) in ts.iter().zip(dur).zip(outs) {
        let rel = t - check_origin;
        // As check_times: finite, in 0..=max_span (NaN compares false, infinities fall outside: not ok).
        ok &= (rel >= 0.0) & (rel <= max_span) & (d >= 0.0) & (d <= max_span);
        let a = ((t - origin) * 1000.0).round_ties_even() as i64;
        let b = (d * 1000.0).round_ties_even() as i64;
        *tn = a;
        *dn = b;
        *en = a.wrapping_add(b);
    }
    ok
}

/// `times_body` compiled with SSE4.1: `round_ties_even` becomes one `roundsd` (a call to libm's `roundeven`
/// without it), and the loop vectorises.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn times_sse41(ts: &[f64], dur: &[f64], origin: f64, check_origin: f64, max_span: f64, ts_ns: &mut [i64],
                      dur_ns: &mut [i64], end_ns: &mut [i64]) -> bool {
    times_body(ts, dur, origin, check_origin, max_span, ts_ns, dur_ns, end_ns)
}

/// `times_body` through `times_sse41` where the CPU has SSE4.1 (std caches the check), else as it is: the one
/// dispatch `pp_times` and `pp_times_in_place` share.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn times(ts: &[f64], dur: &[f64], origin: f64, check_origin: f64, max_span: f64, ts_ns: &mut [i64],
         dur_ns: &mut [i64], end_ns: &mut [i64]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.1") {
        // SAFETY: the CPU has SSE4.1 (checked just above)
        return unsafe { times_sse41(ts, dur, origin, check_origin, max_span, ts_ns, dur_ns, end_ns) };
    }
    times_body(ts, dur, origin, check_origin, max_span, ts_ns, dur_ns, end_ns)
}

/// tables.py's `_family_frame` times in one pass: `ts_ns = rint((ts - origin) * 1000)`, `dur_ns = rint(dur *
/// 1000)` as int64 and `end_ns = ts_ns + dur_ns` (the same f64 operations, rounded half to even as `np.rint`: the
/// same bits), written to the three `n`-row outputs. Returns 1 when every row passes the loader's checks (ts and
/// dur finite, `0 <= ts - check_origin <= max_span`, `0 <= dur <= max_span`), else 0: the caller then takes its
/// numpy path, which raises the error naming the row (the outputs are then garbage).
///
/// # Safety
/// `ts`, `dur` valid for `n` f64; `ts_ns`, `dur_ns`, `end_ns` writable for `n` i64; no overlap.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn pp_times(ts: *const f64, dur: *const f64, n: usize, origin: f64, check_origin: f64,
                                  max_span: f64, ts_ns: *mut i64, dur_ns: *mut i64, end_ns: *mut i64) -> i32 {
    if n == 0 {
        return 1;
    }
    let (ts, dur) = (std::slice::from_raw_parts(ts, n), std::slice::from_raw_parts(dur, n));
    let ts_ns = std::slice::from_raw_parts_mut(ts_ns, n);
    let dur_ns = std::slice::from_raw_parts_mut(dur_ns, n);
    let end_ns = std::slice::from_raw_parts_mut(end_ns, n);
    times(ts, dur, origin, check_origin, max_span, ts_ns, dur_ns, end_ns) as i32
}

/// `pp_times` written over its inputs: `ts_ns` into `ts`'s memory and `dur_ns` into `dur`'s (each an f64 read
/// before its i64 is written), `end_ns` into `end_ns`. The checks run first, over every row: returns 0, nothing
/// written, when a row fails one (the caller's numpy path then reads the same inputs and raises). Why: the float
/// columns are dropped once converted, so their memory serves; two of the three fresh int64 columns no longer
/// page-fault (2.1 GB: 7.6M rows, 122 MB).
///
/// # Safety
/// `ts`, `dur` valid and writable for `n` f64 (8-byte aligned), nothing else reading or writing them during the
/// call; `end_ns` writable for `n` i64, overlapping neither.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn pp_times_in_place(ts: *mut f64, dur: *mut f64, n: usize, origin: f64, check_origin: f64,
                                           max_span: f64, end_ns: *mut i64) -> i32 {
    if n == 0 {
        return 1;
    }
    {
        let (t, d) = (std::slice::from_raw_parts(ts as *const f64, n), std::slice::from_raw_parts(dur as *const f64, n));
        let ok = t.iter().zip(d).fold(true, |ok, (&t, &d)| {
            let rel = t - check_origin;
            ok & (rel >= 0.0) & (rel <= max_span) & (d >= 0.0) & (d <= max_span)
        });
        if !ok {
            return 0;
        }
    }
    // A block at a time through copies on the stack: the outputs then alias nothing that is read.
    const BLOCK: usize = 512;
    let (mut bt, mut bd) = ([0f64; BLOCK], [0f64; BLOCK]);
    let mut at = 0;
    while at < n {
        let k = BLOCK.min(n - at);
        std::ptr::copy_nonoverlapping(ts.add(at), bt.as_mut_ptr(), k);
        std::ptr::copy_nonoverlapping(dur.add(at), bd.as_mut_ptr(), k);
        let ts_ns = std::slice::from_raw_parts_mut(ts.add(at) as *mut i64, k);
        let dur_ns = std::slice::from_raw_parts_mut(dur.add(at) as *mut i64, k);
        let en = std::slice::from_raw_parts_mut(end_ns.add(at), k);
        at += k;
        times(&bt[..k], &bd[..k], origin, check_origin, max_span, ts_ns, dur_ns, en);
    }
    1
}

/// Strings (0: names, 1: pid/tid keys, 2: process names as key, value, ...) as one blob and n + 1 offsets;
/// returns n. Valid until the next call.
///
/// # Safety
/// `h` from pp_new; out pointers writable.
#[no_mangle]
pub unsafe extern "C" fn pp_strings(h: *mut Scanner, which: i32, blob: *mut *const u8, blob_len: *mut usize,
                                    offsets: *mut *const u64) -> usize {
    let s = &mut *h;
    let n = s.strings(which);
    *blob = s.blob.as_ptr();
    *blob_len = s.blob.len();
    *offsets = s.offsets.as_ptr();
    n
}

/// The innermost op enclosing each op on its thread, by the stack sweep ``trace.correlate._sweep`` defines: ops
/// in sweep order (thread, then start, then longest first); ops that ended by an op's start are popped; an op
/// ending within the top is its child; one that starts inside the top but ends after it (a partial overlap: clock
/// jitter) is the top's sibling and replaces it. Position `p` is row `order[p]` (`order` null: row `p`); `key`
/// null: one thread. Writes, per row, its parent's row or -1 into `out` (`out_width` 4: i32, else i64). ~5 ns an
/// op against ~130 of the array path.
///
/// # Safety
/// `ts`, `end` (and `key` unless null) valid for the rows `order` names (every row below `n` when null); `order`
/// null or valid for `n` i64 rows, each below the rows' count; `out` writable for those rows.
#[no_mangle]
pub unsafe extern "C" fn pp_op_parents(ts: *const i64, end: *const i64, key: *const i32, order: *const i64,
                                       n: usize, out: *mut u8, out_width: i32) {
    let mut stack: Vec<(usize, i64, i64)> = Vec::with_capacity(64); // (row, end, parent row)
    let mut thread = 0i32;
    for p in 0..n {
        let r = if order.is_null() { p } else { *order.add(p) as usize };
        if !key.is_null() {
            let k = *key.add(r);
            if p == 0 || k != thread {
                stack.clear();
                thread = k;
            }
        }
        let (t, e) = (*ts.add(r), *end.add(r));
        while let Some(&(_, top_end, _)) = stack.last() {
            if top_end <= t {
                stack.pop();
            } else {
                break;
            }
        }
        let parent = match stack.last() {
            Some(&(top, top_end, _)) if e <= top_end => top as i64,
            Some(&(_, _, top_parent)) => {
                stack.pop();
                top_parent
            }
            None => -1,
        };
        if out_width == 4 {
            *(out as *mut i32).add(r) = parent as i32;
        } else {
            *(out as *mut i64).add(r) = parent;
        }
        stack.push((r, e, parent));
    }
}
