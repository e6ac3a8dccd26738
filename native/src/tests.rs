//! Unit tests of the scanner through its C ABI (`cargo test --manifest-path native/Cargo.toml`; pytest runs them:
//! `tests/trace/test_native_cargo.py`). The equality with the pure-Python reader on real traces is Python's to
//! check (`tests/trace/test_native_scan.py`); these pin the contract of each exported function on inputs small
//! enough to read: return codes, counts, a failed chunk leaving the scanner as it was, the in-place and copying
//! paths agreeing.

use super::*;

/// The gpu family (`pp_take`'s `fam` 0) and two of its columns, as tables.py's `_FAMILY_COLUMNS` orders them.
const GPU: i32 = 0;
const OPS: i32 = 2;
const COL_NAME: i32 = 1;
const COL_TS: i32 = 4;

const KERNEL: &[u8] = br#"{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25,
    "args": {"device": 0, "stream": 7, "correlation": 41, "External id": 3}}"#;
const CPU_OP: &[u8] = br#"{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 12, "tid": 12, "ts": 9.0,
    "dur": 4.0, "args": {"External id": 3}}"#;
const IGNORED: &[u8] = br#"{"ph": "i", "cat": "python_function", "name": "x", "pid": 12, "tid": 12, "ts": 1}"#;

fn chunk(events: &[&[u8]]) -> Vec<u8> {
    let mut out = b"[".to_vec();
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(e);
    }
    out.push(b']');
    out
}

/// `pp_add` of `data` on `h`: its return code and counts (events, kept).
fn add(h: *mut Scanner, data: &[u8]) -> (i32, [u64; 2]) {
    let mut counts = [0u64; 2];
    let rc = unsafe { pp_add(h, data.as_ptr(), data.len(), counts.as_mut_ptr()) };
    (rc, counts)
}

/// Column `col` of family `fam` as f64 values (taken out of the scanner and released).
fn take_f64(h: *mut Scanner, fam: i32, col: i32) -> Vec<f64> {
    let (mut ptr, mut cap) = (std::ptr::null_mut::<u8>(), 0usize);
    unsafe {
        let n = pp_take(h, fam, col, &mut ptr, &mut cap);
        let out = std::slice::from_raw_parts(ptr as *const f64, n).to_vec();
        assert_eq!(pp_release(ptr, cap, ELEM_F64), 0);
        out
    }
}

/// An integer column: a constant run (`pp_take_run`: one value, n rows) or the values (`pp_take`).
fn take_i32(h: *mut Scanner, fam: i32, col: i32) -> Vec<i32> {
    let mut value = 0i64;
    let run = unsafe { pp_take_run(h, fam, col, &mut value) };
    if run > 0 {
        return vec![value as i32; run];
    }
    let (mut ptr, mut cap) = (std::ptr::null_mut::<u8>(), 0usize);
    unsafe {
        let n = pp_take(h, fam, col, &mut ptr, &mut cap);
        let out = std::slice::from_raw_parts(ptr as *const i32, n).to_vec();
        assert_eq!(pp_release(ptr, cap, ELEM_I32), 0);
        out
    }
}

fn strings(h: *mut Scanner, which: i32) -> Vec<Vec<u8>> {
    let (mut blob, mut len, mut offsets) = (std::ptr::null::<u8>(), 0usize, std::ptr::null::<u64>());
    unsafe {
        let n = pp_strings(h, which, &mut blob, &mut len, &mut offsets);
        let offs = std::slice::from_raw_parts(offsets, n + 1);
        let data = if len == 0 { &[][..] } else { std::slice::from_raw_parts(blob, len) };
        (0..n).map(|i| data[offs[i] as usize..offs[i + 1] as usize].to_vec()).collect()
    }
}

#[test]
fn reports_its_abi_version() {
    assert_eq!(pp_abi_version(), ABI_VERSION);
}

#[test]
fn kept_events_go_to_their_family_and_the_rest_is_counted() {
    let h = pp_new();
    let (rc, counts) = add(h, &chunk(&[KERNEL, CPU_OP, IGNORED]));
    assert_eq!(rc, OK);
    assert_eq!(counts, [3, 2]); // three events read, the kernel and the CPU op kept
    assert_eq!(take_f64(h, GPU, COL_TS), vec![10.5]);
    assert_eq!(take_f64(h, OPS, COL_TS), vec![9.0]);
    let names = strings(h, 0);
    let gpu_name = take_i32(h, GPU, COL_NAME);
    assert_eq!(names[gpu_name[0] as usize], b"gemm".to_vec());
    unsafe { pp_free(h) };
}

#[test]
fn an_empty_array_is_no_events() {
    let h = pp_new();
    assert_eq!(add(h, b"[]"), (OK, [0, 0]));
    assert_eq!(add(h, b" [ ] "), (OK, [0, 0]));
    unsafe { pp_free(h) };
}

#[test]
fn a_cut_chunk_is_a_syntax_error_and_leaves_the_scanner_as_it_was() {
    let whole = chunk(&[KERNEL, CPU_OP]);
    let h = pp_new();
    for cut in [1, 10, KERNEL.len() / 2, whole.len() - 1] {
        let (rc, counts) = add(h, &whole[..cut]);
        assert_eq!(rc, SYNTAX, "cut at {cut}");
        assert_eq!(counts, [0, 0]);
    }
    assert_eq!(add(h, &whole), (OK, [2, 2])); // as on a fresh scanner: the failed chunks left nothing behind
    assert_eq!(take_f64(h, GPU, COL_TS), vec![10.5]);
    unsafe { pp_free(h) };
}

#[test]
fn what_it_does_not_model_is_refused() {
    let cases: [&[u8]; 4] = [
        br#"[{"ph": "X", "ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}]"#, // a duplicate field
        br#"[{"ph": "X", "cat": "kernel", "name": 7, "ts": 1, "dur": 1}]"#,              // a name that is a number
        br#"[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 99999999999999999999}]"#, // > i64
        br#"[{"ph": "X", "cat": "kernel", "name": "\ud800", "ts": 1, "dur": 1}]"#,       // a lone surrogate
    ];
    for case in cases {
        let h = pp_new();
        assert_eq!(add(h, case).0, UNSUPPORTED, "{}", String::from_utf8_lossy(case));
        unsafe { pp_free(h) };
    }
}

#[test]
fn in_place_reads_as_the_copy_and_restores_the_room_after_it() {
    let data = chunk(&[KERNEL, CPU_OP, IGNORED]);
    let mut buf = data.clone();
    let room: Vec<u8> = (0..PAD as u8 + 8).collect();
    buf.extend_from_slice(&room);
    let (a, b) = (pp_new(), pp_new());
    let mut counts = [0u64; 2];
    let rc = unsafe { pp_add_in_place(a, buf.as_mut_ptr(), data.len(), room.len(), counts.as_mut_ptr()) };
    assert_eq!((rc, counts), add(b, &data));
    assert_eq!(&buf[data.len()..], &room[..]);
    assert_eq!(take_f64(a, GPU, COL_TS), take_f64(b, GPU, COL_TS));
    unsafe {
        pp_free(a);
        pp_free(b);
    }
}

#[test]
fn times_in_place_equal_the_copying_pass_bit_for_bit() {
    let ts = [100.0, 100.5, 101.25, 1e6 + 0.001];
    let dur = [0.0, 1.5, 2.0009, 3.0];
    let (origin, max_span) = (100.0, 1e9);
    let n = ts.len();
    let (mut ts_ns, mut dur_ns, mut end_ns) = (vec![0i64; n], vec![0i64; n], vec![0i64; n]);
    let ok = unsafe {
        pp_times(ts.as_ptr(), dur.as_ptr(), n, origin, origin, max_span, ts_ns.as_mut_ptr(), dur_ns.as_mut_ptr(),
                 end_ns.as_mut_ptr())
    };
    assert_eq!(ok, 1);
    assert_eq!(&ts_ns[..3], &[0, 500, 1250]);
    assert_eq!(&dur_ns[..3], &[0, 1500, 2001]);
    for i in 0..n {
        assert_eq!(end_ns[i], ts_ns[i] + dur_ns[i]);
    }
    let (mut t, mut d, mut end2) = (ts.to_vec(), dur.to_vec(), vec![0i64; n]);
    let ok =
        unsafe { pp_times_in_place(t.as_mut_ptr(), d.as_mut_ptr(), n, origin, origin, max_span, end2.as_mut_ptr()) };
    assert_eq!(ok, 1);
    let as_i64 = |v: &[f64]| v.iter().map(|x| x.to_bits() as i64).collect::<Vec<_>>();
    assert_eq!((as_i64(&t), as_i64(&d), end2), (ts_ns, dur_ns, end_ns));
}

#[test]
fn times_refuse_a_row_before_the_origin_and_write_nothing() {
    let (mut t, mut d, mut end) = (vec![5.0, 99.0], vec![1.0, 1.0], vec![0i64; 2]);
    let ok = unsafe { pp_times_in_place(t.as_mut_ptr(), d.as_mut_ptr(), 2, 100.0, 100.0, 1e9, end.as_mut_ptr()) };
    assert_eq!(ok, 0);
    assert_eq!((t, d), (vec![5.0, 99.0], vec![1.0, 1.0]));
}

#[test]
fn used_codes_and_recode() {
    let codes: [i32; 5] = [3, 0, 3, 1, 0];
    let mut used = [0u8; 5];
    assert_eq!(unsafe { pp_used(codes.as_ptr() as *const u8, 5, 4, used.as_mut_ptr(), 5) }, 0);
    assert_eq!(used, [1, 1, 0, 1, 0]);
    assert_eq!(unsafe { pp_used(codes.as_ptr() as *const u8, 5, 4, used.as_mut_ptr(), 3) }, -1); // code 3 >= 3
    let remap: [i16; 4] = [0, 1, -1, 2];
    let mut out = [0i16; 5];
    let rc = unsafe {
        pp_recode(codes.as_ptr() as *const u8, 5, 4, remap.as_ptr() as *const u8, 4, 2, out.as_mut_ptr() as *mut u8)
    };
    assert_eq!(rc, 0);
    assert_eq!(out, [2, 0, 2, 1, 0]);
}

#[test]
fn op_parents_by_the_stack_sweep() {
    // one thread: 0 [0, 10) holds 1 [1, 5), which holds 2 [2, 3); 3 [6, 9) is 0's; 4 [8, 12) starts inside 3
    // and ends after it (clock jitter): the sweep makes it 3's sibling, so 0's child too
    let ts: [i64; 5] = [0, 1, 2, 6, 8];
    let end: [i64; 5] = [10, 5, 3, 9, 12];
    let mut out = [0i64; 5];
    let none = std::ptr::null();
    unsafe { pp_op_parents(ts.as_ptr(), end.as_ptr(), none, std::ptr::null(), 5, out.as_mut_ptr() as *mut u8, 8) };
    assert_eq!(out, [-1, 0, 1, 0, 0]);
    // two threads (key), rows given out of order: each thread's stack starts empty
    let ts: [i64; 3] = [0, 1, 1];
    let end: [i64; 3] = [10, 2, 2];
    let key: [i32; 3] = [0, 0, 1];
    let order: [i64; 3] = [0, 1, 2];
    let mut out = [0i32; 3];
    let out_ptr = out.as_mut_ptr() as *mut u8;
    unsafe { pp_op_parents(ts.as_ptr(), end.as_ptr(), key.as_ptr(), order.as_ptr(), 3, out_ptr, 4) };
    assert_eq!(out, [-1, 0, -1]);
}
