//! Columnar scanner for chunks of a Kineto trace's `traceEvents` array: `[event, event, ...]` bytes in, the
//! columns phaseprof's `TableBuilder` keeps out, with no Python object per event.
//!
//! It reproduces `phaseprof/trace/tables.py` (`TableBuilder.add` over msgspec's `list[Event]` decode) for the
//! input both accept; anything it does not model exactly is refused, never guessed:
//! - `SYNTAX` (1): not strict JSON (a chunk cut at a false separator ends inside a string or an object); the
//!   stream reader merges the next piece and retries, as it does for msgspec's DecodeError;
//! - `UNSUPPORTED` (2): JSON, but a type or value the strict msgspec decode rejects or that the Python builder
//!   handles in a way not modelled here (a non-string kernel name, an integer beyond int64, a lone surrogate,
//!   a duplicate field, ...); the caller reads the whole trace again with the pure-Python loader.
//! A chunk that fails leaves the scanner as it was before the chunk.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};

const OK: i32 = 0;
const SYNTAX: i32 = 1;
const UNSUPPORTED: i32 = 2;
const MAX_DEPTH: usize = 256;

#[derive(Debug)]
enum Fail {
    Syntax,
    Unsupported,
}
type R<T> = Result<T, Fail>;

/// Fx-style hash, 8 bytes a step: names are hashed once per kept event (kernel names run to 1 KB); SipHash's
/// DoS resistance buys nothing for one file's names.
#[derive(Default)]
struct Fnv(u64);
impl Fnv {
    #[inline]
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517cc1b727220a95);
    }
}
impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut it = bytes.chunks_exact(8);
        for c in &mut it {
            self.mix(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let mut last = [0u8; 8];
        let rest = it.remainder();
        last[..rest.len()].copy_from_slice(rest);
        self.mix(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
    }
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
}
type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

const NAME_CACHE_BITS: u32 = 10;
const NAME_CACHE: usize = 1 << NAME_CACHE_BITS;

/// An entry of the name cache (`Codes::code_cached`): a name's first and last 16 bytes (the first n, zero-padded,
/// when shorter), its length and its code (-1: none).
#[derive(Clone, Copy)]
struct CachedName {
    head: u128,
    tail: u128,
    len: u32,
    code: i32,
}
const NO_NAME: CachedName = CachedName { head: 0, tail: 0, len: 0, code: -1 };

/// Strings in order of first appearance -> code (TableBuilder's `_Codes`).
#[derive(Default)]
struct Codes {
    map: FastMap<Vec<u8>, i32>,
    order: Vec<Vec<u8>>,
}
impl Codes {
    /// `code` through a small cache in front of the map, indexed by a hash of the key's length and its first and
    /// last 16 bytes (a kernel name runs to 1 KB: hashing it all, as the map does, costs more than comparing it
    /// with the one name the cache offers). An entry keeps those bytes: a key of at most 32 bytes is matched by
    /// them alone, a longer one is then compared whole; so a collision only misses. `padded`: 16 bytes from the
    /// key's start can be read (it lies in the padded chunk), so a short key is loaded without a copy.
    #[inline(always)]
    fn code_cached(&mut self, key: &[u8], padded: bool, cache: &mut [CachedName; NAME_CACHE]) -> i32 {
        let n = key.len();
        let (head, tail) = if n >= 16 {
            (u128::from_le_bytes(key[..16].try_into().unwrap()), u128::from_le_bytes(key[n - 16..].try_into().unwrap()))
        } else if padded && n > 0 {
            // SAFETY: the caller says 16 bytes from the key's start are inside the padded chunk. Not for an empty
            // key: an event without a name has the static `b""` (Event::default), whose pointer may be dangling.
            (unsafe { std::ptr::read_unaligned(key.as_ptr() as *const u128) } & low_bytes(n), 0)
        } else {
            let mut b = [0u8; 16];
            b[..n].copy_from_slice(key);
            (u128::from_le_bytes(b), 0)
        };
        let h = ((head as u64) ^ ((head >> 64) as u64).rotate_left(17) ^ (tail as u64).rotate_left(31)
                 ^ ((tail >> 64) as u64).rotate_left(47) ^ n as u64).wrapping_mul(0x9E3779B97F4A7C15);
        let slot = (h >> (64 - NAME_CACHE_BITS)) as usize;
        let e = cache[slot];
        if e.code >= 0 && e.len as usize == n && e.head == head && e.tail == tail
            && (n <= 32 || self.order.get(e.code as usize).is_some_and(|k| k.as_slice() == key)) {
            return e.code;
        }
        let c = self.code(key);
        cache[slot] = CachedName { head, tail, len: n as u32, code: c };
        c
    }

    fn code(&mut self, key: &[u8]) -> i32 {
        if let Some(&c) = self.map.get(key) {
            return c;
        }
        let c = self.order.len() as i32;
        self.map.insert(key.to_vec(), c);
        self.order.push(key.to_vec());
        c
    }
    fn truncate(&mut self, n: usize) {
        while self.order.len() > n {
            let k = self.order.pop().unwrap();
            self.map.remove(&k);
        }
    }
}

/// An integer column kept as a constant run (`run` repeated `run_len` times, no storage) until a second value comes,
/// then as a Vec: tables.py's `_Growing` does the same. Why: most argument columns hold one value on most events
/// (`correlation`, `device`, `stream`, `bytes` of every CPU op): as Vecs they were half the scanner's columns
/// (15 of 29 MB on a 115 MB trace), grown by realloc, all held until the scan's end.
#[derive(Default)]
struct Col<T> {
    vec: Vec<T>,
    run: T,
    run_len: usize, // rows of the run while `vec` is empty
}
impl<T: Copy + PartialEq + Default> Col<T> {
    #[inline(always)]
    fn push(&mut self, x: T) {
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
    fn extend(&mut self, n: usize, at: impl Fn(usize) -> T) {
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
    fn len(&self) -> usize {
        if self.vec.is_empty() { self.run_len } else { self.vec.len() }
    }
    fn truncate(&mut self, n: usize) {
        if self.vec.is_empty() {
            self.run_len = self.run_len.min(n);
        } else {
            self.vec.truncate(n);
        }
    }
}

#[derive(Default)]
struct Family {
    kind: Col<i8>,
    name: Col<i32>,
    pid: Col<i32>,
    tid: Col<i32>,
    ts: Vec<f64>,
    dur: Vec<f64>,
    external_id: Col<i64>,
    launched_kernel: Col<i32>,
    correlation: Col<i64>,
    device: Col<i64>,
    stream: Col<i64>,
    bytes: Col<i64>,
    /// rows routed but not yet in the columns (at most `STAGED`; none between chunks: `flush`)
    staged: Vec<Row>,
}

/// One event's row of a family, staged. Why: a row written to the twelve columns one value at a time costs a
/// capacity or run check per value (~6 % of a scan); staged rows go to each column in one pass.
#[derive(Clone, Copy)]
struct Row {
    ts: f64,
    dur: f64,
    external_id: i64,
    correlation: i64,
    device: i64,
    stream: i64,
    bytes: i64,
    name: i32,
    pid: i32,
    tid: i32,
    launched_kernel: i32,
    kind: i8,
}
const STAGED: usize = 64;

impl Family {
    #[inline(always)]
    fn push(&mut self, row: Row) {
        if self.staged.len() == STAGED {
            self.flush();
        }
        self.staged.push(row);
    }

    /// The staged rows into the columns.
    #[inline(never)]
    fn flush(&mut self) {
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
    fn len(&self) -> usize {
        self.kind.len()
    }
    fn truncate(&mut self, n: usize) {
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
struct Memory {
    ts: Vec<f64>,
    pid: Col<i32>,
    tid: Col<i32>,
    bytes: Col<i64>,
    total_allocated: Col<i64>,
    device_type: Col<i64>,
    device_id: Col<i64>,
}
impl Memory {
    fn truncate(&mut self, n: usize) {
        self.ts.truncate(n);
        self.pid.truncate(n);
        self.tid.truncate(n);
        self.bytes.truncate(n);
        self.total_allocated.truncate(n);
        self.device_type.truncate(n);
        self.device_id.truncate(n);
    }
}

/// Families in the order of tables.py's FAMILIES, then "modules".
const N_FAMILIES: usize = 5;
const MODULES: usize = 4;
const MODULE_KIND: i8 = 8;

pub struct Scanner {
    fams: [Family; N_FAMILIES],
    mem: Memory,
    names: Codes,
    /// pid/tid values: key = tag byte (b'i' int, b's' string, b'n' null) + text
    ids: Codes,
    int_ids: FastMap<i64, i32>, // a cache over ``ids`` for integer pids/tids (cleared when a chunk fails)
    /// (str(pid), args.name) of process_name metadata events, in file order
    process_names: Vec<(Vec<u8>, Vec<u8>)>,
    blob: Vec<u8>,
    offsets: Vec<u64>,
    pad: Vec<u8>,
    /// caches over `ids` and `names` (cleared when a chunk fails): the last two integer pids and tids with their
    /// codes (code -1: none), and the code of "" (-1: not given yet)
    last_ids: [[(i64, i32); 2]; 2],
    empty_name: i32,
    /// the last category string routed (its bytes as a u128 and its length; length u8::MAX: none) and what
    /// `category` gave for it
    last_cat: (u128, u8, Option<(i32, i8, bool)>),
    /// recent names and their codes, see `Codes::code_cached`
    name_cache: Box<[CachedName; NAME_CACHE]>,
}

#[derive(Clone, Copy, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

#[derive(Clone, Copy)]
enum Val<'a> {
    Null,
    Num(Num),
    Str(&'a [u8], bool), // raw bytes between the quotes; true when they hold escapes
}

struct Args<'a> {
    correlation: Val<'a>,
    external_id: Option<i64>,
    external_id_legacy: Option<i64>,
    device: Val<'a>,
    stream: Val<'a>,
    bytes: Val<'a>,
    mem_bytes: Option<Num>,
    total_allocated: Option<Num>,
    device_type: Option<i64>,
    device_id: Option<i64>,
    name: Option<Val<'a>>,
    kernel: Option<Val<'a>>,
}
impl<'a> Default for Args<'a> {
    fn default() -> Self {
        Args {
            correlation: Val::Null,
            external_id: None,
            external_id_legacy: None,
            device: Val::Null,
            stream: Val::Null,
            bytes: Val::Null,
            mem_bytes: None,
            total_allocated: None,
            device_type: None,
            device_id: None,
            name: None,
            kernel: None,
        }
    }
}

struct Event<'a> {
    ph: Option<Val<'a>>, // absent: ""
    name: Val<'a>,       // absent: ""
    cat: Val<'a>,
    pid: Val<'a>, // absent: 0
    tid: Val<'a>,
    ts: Option<Num>,
    dur: Option<Num>,
    args: Args<'a>, // absent or null: all defaults
}
impl<'a> Default for Event<'a> {
    fn default() -> Self {
        Event {
            ph: None,
            name: Val::Str(b"", false),
            cat: Val::Null,
            pid: Val::Num(Num::Int(0)),
            tid: Val::Num(Num::Int(0)),
            ts: None,
            dur: None,
            args: Args::default(),
        }
    }
}

/// The parser over one chunk. `b` is the chunk followed by `PAD` zero bytes (`Scanner::pad`), so the hot loops
/// read without bounds checks: a zero byte stops every loop (not whitespace, not a digit, a control byte inside a
/// string, no structural character), so `i` never passes the chunk's end `n`, where the first zero sits, and a
/// 16- or 32-byte load at any `i <= n` stays inside `b`.
struct P<'a> {
    b: &'a [u8],
    i: usize,
}

/// Zero bytes after each chunk: more than one 32-byte load (a predicted gap, `Gap`) past the chunk's last byte.
const PAD: usize = 64;

#[inline]
fn is_ws(c: u8) -> bool {
    c == b' ' || c == b'\n' || c == b'\r' || c == b'\t'
}

/// The end of the run of plain string bytes (none is '"', '\\', a control byte or non-ASCII: almost all string
/// bytes) starting at `i`: 16 bytes a step with SSE2 (every x86-64 has it), else 8 a step in a u64. Reads up to
/// 16 bytes past the run's end, which `PAD` keeps inside `b`.
#[inline]
fn plain_run(b: &[u8], mut i: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86-64; the load at i <= n reads inside the padded `b` (checked below).
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let slash = _mm_set1_epi8(b'\\' as i8);
            let space = _mm_set1_epi8(0x20);
            while i + 16 <= b.len() {
                let v = _mm_loadu_si128(b.as_ptr().add(i) as *const __m128i);
                // signed: bytes >= 0x80 are negative, so "< 0x20" also finds non-ASCII
                let special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                                           _mm_cmplt_epi8(v, space));
                let mask = _mm_movemask_epi8(special) as u32;
                if mask != 0 {
                    return i + mask.trailing_zeros() as usize;
                }
                i += 16;
            }
        }
    }
    while let Some(c) = b.get(i..i + 8) {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        const LO: u64 = 0x0101010101010101;
        const HI: u64 = 0x8080808080808080;
        let quote = w ^ (LO * b'"' as u64);
        let slash = w ^ (LO * b'\\' as u64);
        let special = (quote.wrapping_sub(LO) & !quote) | (slash.wrapping_sub(LO) & !slash) | w.wrapping_sub(LO * 0x20) | w;
        if special & HI != 0 {
            break;
        }
        i += 8;
    }
    i
}

/// 10^0 ..= 10^22: every one exactly a double.
const POW10: [f64; 23] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
                          1e17, 1e18, 1e19, 1e20, 1e21, 1e22];

impl<'a> P<'a> {
    /// The byte at `i` (a zero at and past the chunk's end).
    #[inline(always)]
    fn c(&self) -> u8 {
        debug_assert!(self.i < self.b.len());
        // SAFETY: i <= n < b.len() (the struct's invariant: every step passes only non-zero bytes)
        unsafe { *self.b.get_unchecked(self.i) }
    }
    #[inline(always)]
    fn at(&self, j: usize) -> u8 {
        debug_assert!(j < self.b.len());
        // SAFETY: as `c`; callers step j over non-zero bytes only, starting at i
        unsafe { *self.b.get_unchecked(j) }
    }
    #[inline(always)]
    fn ws(&mut self) {
        while is_ws(self.c()) {
            self.i += 1;
        }
    }
    #[inline(always)]
    fn peek(&self) -> R<u8> {
        Ok(self.c())
    }
    #[inline(always)]
    fn expect(&mut self, c: u8) -> R<()> {
        if self.c() != c {
            return Err(Fail::Syntax);
        }
        self.i += 1;
        Ok(())
    }

    #[inline(always)]
    fn run(&self, i: usize) -> usize {
        plain_run(self.b, i)
    }

    /// A string's raw bytes (the opening quote at self.i); validates escapes, control bytes and UTF-8.
    #[inline(always)]
    fn string(&mut self) -> R<(&'a [u8], bool)> {
        self.expect(b'"')?;
        let start = self.i;
        // Most strings are short and plain: one 16-byte step finds the closing quote.
        let end = plain_run16(self.b, start);
        if self.at(end) == b'"' {
            self.i = end + 1;
            return Ok((&self.b[start..end], false));
        }
        self.i = end;
        self.string_rest(start)
    }

    /// `string` past its first 16 bytes, escapes or non-ASCII bytes.
    #[inline(never)]
    fn string_rest(&mut self, start: usize) -> R<(&'a [u8], bool)> {
        let mut esc = false;
        let mut high = false;
        loop {
            self.i = self.run(self.i);
            let c = self.c();
            match c {
                b'"' => break,
                b'\\' => {
                    esc = true;
                    self.i += 1;
                    match self.c() {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let h = self.b.get(self.i + 1..self.i + 5).ok_or(Fail::Syntax)?;
                            let mut v: u32 = 0;
                            for &d in h {
                                v = v * 16 + (d as char).to_digit(16).ok_or(Fail::Syntax)?;
                            }
                            if (0xD800..0xE000).contains(&v) {
                                return Err(Fail::Unsupported); // surrogates: left to the reference decoder
                            }
                            self.i += 5;
                        }
                        _ => return Err(Fail::Syntax),
                    }
                }
                0..=0x1f => return Err(Fail::Syntax),
                0x80..=0xff => {
                    high = true;
                    self.i += 1;
                }
                _ => self.i += 1,
            }
        }
        let raw = &self.b[start..self.i];
        self.i += 1;
        if high && std::str::from_utf8(raw).is_err() {
            return Err(Fail::Unsupported);
        }
        Ok((raw, esc))
    }

    /// A number: its grammar checked and its value read in one pass. The common numbers skip the general parser:
    /// an integer of at most 18 digits, or `-?digits.digits` whose digits make an integer m <= 2^53 with at most
    /// 22 after the point: then m and 10^k are exact doubles and one division rounds correctly (Clinger's fast
    /// path), the same double as `str::parse` (and msgspec) give. The rest (exponents, more digits) goes to it.
    #[inline(always)]
    fn number(&mut self) -> R<Num> {
        let start = self.i;
        let mut j = self.i;
        let neg = self.at(j) == b'-';
        j += neg as usize;
        let (mut int_digits, mut m) = digits(self.b, j);
        match int_digits {
            0 => return Err(Fail::Syntax),
            _ if self.at(j) == b'0' => (int_digits, m) = (1, 0), // "01": the number is "0", the caller fails at "1"
            _ => {}
        }
        j += int_digits;
        let c = self.at(j);
        if c != b'.' && c != b'e' && c != b'E' {
            self.i = j;
            if int_digits <= 18 {
                let m = m as i64;
                return Ok(Num::Int(if neg { -m } else { m }));
            }
            // ASCII by construction
            let text = unsafe { std::str::from_utf8_unchecked(&self.b[start..j]) };
            return text.parse::<i64>().map(Num::Int).map_err(|_| Fail::Unsupported);
        }
        let mut frac_digits = 0;
        if c == b'.' {
            let f;
            (frac_digits, f) = digits(self.b, j + 1);
            if frac_digits == 0 {
                return Err(Fail::Syntax);
            }
            j += 1 + frac_digits;
            if int_digits + frac_digits <= 19 {
                m = m * POW10_INT[frac_digits] + f;
            }
        }
        let (j, exp) = self.exponent(j)?;
        self.i = j;
        // at most 19 digits: m is exact
        if !exp && int_digits + frac_digits <= 19 && m <= 1 << 53 && frac_digits <= 22 {
            let v = m as f64 / POW10[frac_digits];
            return Ok(Num::Float(if neg { -v } else { v }));
        }
        let text = unsafe { std::str::from_utf8_unchecked(&self.b[start..j]) };
        let v: f64 = text.parse().map_err(|_| Fail::Syntax)?;
        if !v.is_finite() {
            return Err(Fail::Unsupported);
        }
        Ok(Num::Float(v))
    }

    /// The end of a number's exponent part (`e`/`E`, a sign, digits) starting at `j`, and whether there is one.
    #[inline(always)]
    fn exponent(&self, mut j: usize) -> R<(usize, bool)> {
        if !matches!(self.at(j), b'e' | b'E') {
            return Ok((j, false));
        }
        j += 1;
        if matches!(self.at(j), b'+' | b'-') {
            j += 1;
        }
        if !self.at(j).is_ascii_digit() {
            return Err(Fail::Syntax);
        }
        while self.at(j).is_ascii_digit() {
            j += 1;
        }
        Ok((j, true))
    }

    /// A number's grammar checked, its value not read: a number under a key not read may be beyond what a double or
    /// an int64 holds (msgspec skips it too).
    #[inline(always)]
    fn skip_number(&mut self) -> R<()> {
        let mut j = self.i;
        j += (self.at(j) == b'-') as usize;
        let (d, _) = digits(self.b, j);
        match d {
            0 => return Err(Fail::Syntax),
            _ if self.at(j) == b'0' => j += 1, // "01": the number is "0", the caller fails at "1"
            _ => j += d,
        }
        if self.at(j) == b'.' {
            let (d, _) = digits(self.b, j + 1);
            if d == 0 {
                return Err(Fail::Syntax);
            }
            j += 1 + d;
        }
        let (j, _) = self.exponent(j)?;
        self.i = j;
        Ok(())
    }

    fn literal(&mut self, word: &[u8]) -> R<()> {
        if self.b.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Fail::Syntax)
        }
    }

    /// Any JSON value, validated and dropped: numbers and strings here, the rest in `skip`.
    #[inline(always)]
    fn skip_value(&mut self, depth: usize) -> R<()> {
        match self.c() {
            b'-' | b'0'..=b'9' => self.skip_number(),
            b'"' => self.string().map(|_| ()),
            _ => self.skip(depth),
        }
    }

    /// A member or element of an object or array being skipped, at `depth`: numbers and strings without a call
    /// (a kernel's grid and block, a CPU op's input shapes), the depth limit checked first as `skip` does.
    #[inline(always)]
    fn skip_element(&mut self, depth: usize) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Fail::Unsupported);
        }
        self.skip_value(depth)
    }

    /// Any JSON value, validated and dropped.
    fn skip(&mut self, depth: usize) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Fail::Unsupported);
        }
        match self.c() {
            b'"' => self.string().map(|_| ()),
            b'{' => {
                self.i += 1;
                self.ws();
                if self.c() == b'}' {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    self.ws();
                    self.string()?;
                    self.ws();
                    self.expect(b':')?;
                    self.ws();
                    self.skip_element(depth + 1)?;
                    self.ws();
                    match self.c() {
                        b',' => self.i += 1,
                        b'}' => {
                            self.i += 1;
                            return Ok(());
                        }
                        _ => return Err(Fail::Syntax),
                    }
                }
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.c() == b']' {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    self.ws();
                    self.skip_element(depth + 1)?;
                    self.ws();
                    match self.c() {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Ok(());
                        }
                        _ => return Err(Fail::Syntax),
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.skip_number(),
        }
    }

    /// A scalar value: null, a number or a string; true/false/objects/arrays are UNSUPPORTED (msgspec's strict
    /// decode rejects them for every field read here), after checking they are JSON.
    #[inline(always)]
    fn scalar(&mut self, depth: usize) -> R<Val<'a>> {
        match self.c() {
            b'"' => {
                let (s, e) = self.string()?;
                Ok(Val::Str(s, e))
            }
            b'-' | b'0'..=b'9' => Ok(Val::Num(self.number()?)),
            b'n' => {
                self.literal(b"null")?;
                Ok(Val::Null)
            }
            _ => {
                self.skip(depth)?;
                Err(Fail::Unsupported)
            }
        }
    }

    /// An event or args object: calls `field(parser, key)` with the parser at the value (it must consume it), the
    /// key as an index into `keys` (None: a key not read), after checking it is not one seen before in this object
    /// (which of two duplicates msgspec keeps is not modelled). `pred`: the gaps expected at each position.
    #[inline(always)]
    fn keyed_object<K: Copy, const N: usize, F: FnMut(&mut Self, Option<K>) -> R<()>>(
        &mut self, keys: &[(&[u8], K); N], table: &KeyTable, pred: &mut Predicted<K>, mut field: F) -> R<()> {
        self.expect(b'{')?;
        let mut seen = 0u32;
        let mut pos = 0;
        loop {
            let start = self.i;
            let g = &pred[pos % PREDICTED];
            let (bit, key) = if pos < PREDICTED && g.matches(self.b, start) {
                // the same bytes as a gap read and checked before: the same separator and key
                self.i = start + g.len as usize;
                self.ws();
                (g.bit, g.key)
            } else {
                self.ws();
                if pos == 0 {
                    if self.c() == b'}' {
                        self.i += 1;
                        return Ok(());
                    }
                } else {
                    match self.c() {
                        b',' => self.i += 1,
                        b'}' => {
                            self.i += 1;
                            return Ok(());
                        }
                        _ => return Err(Fail::Syntax),
                    }
                    self.ws();
                }
                let (k, esc) = self.string()?;
                let index = key_index(table, k, esc)?;
                let (bit, key) = match index {
                    Some(x) => (1u32 << x, Some(keys[x as usize].1)),
                    None => (0, None),
                };
                self.ws();
                self.expect(b':')?;
                self.ws();
                if pos < PREDICTED {
                    pred[pos].learn(self.b, start, self.i - start, bit, key);
                }
                (bit, key)
            };
            // a key read (bit != 0) seen before in this object
            if seen & bit != 0 {
                return Err(Fail::Unsupported);
            }
            seen |= bit;
            field(self, key)?;
            pos += 1;
        }
    }
}

/// 10^0 ..= 10^19: every one a u64.
const POW10_INT: [u64; 20] = {
    let mut t = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

/// Eight ASCII digits (the first in the lowest byte, '0' already subtracted from each) as a number: three
/// multiplies instead of eight (Lemire's SWAR conversion).
#[inline(always)]
fn eight_digits(v: u64) -> u64 {
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    ((v & 0x0000_00FF_0000_00FF).wrapping_mul(100 + (1_000_000 << 32))
        .wrapping_add(((v >> 16) & 0x0000_00FF_0000_00FF).wrapping_mul(1 + (10_000 << 32)))) >> 32
}

/// The run of ASCII digits at `j`: (how many, their value; exact where there are at most 19). Up to 16 digits
/// are found with one 16-byte compare and converted 8 at a time; reads 16 bytes at `j <= n` (inside the padding).
#[inline(always)]
fn digits(b: &[u8], j: usize) -> (usize, u64) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        debug_assert!(j + 16 <= b.len());
        // SAFETY: SSE2 is part of x86-64; j <= n, so the 16 bytes are inside the padded `b`
        let (d, lo, hi) = unsafe {
            let v = _mm_loadu_si128(b.as_ptr().add(j) as *const __m128i);
            let is_digit = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8(b'0' as i8 - 1)),
                                         _mm_cmplt_epi8(v, _mm_set1_epi8(b'9' as i8 + 1)));
            let mask = _mm_movemask_epi8(is_digit) as u32;
            let p = b.as_ptr().add(j) as *const u64;
            ((!mask).trailing_zeros() as usize, std::ptr::read_unaligned(p), std::ptr::read_unaligned(p.add(1)))
        };
        // '0' off every byte: a byte below '0' borrows from the bytes after it only, which the shifts drop
        const ZEROS: u64 = 0x3030_3030_3030_3030;
        match d {
            0 => (0, 0),
            1..=8 => (d, eight_digits(lo.wrapping_sub(ZEROS) << (8 * (8 - d)))),
            9..=15 => {
                let r = d - 8;
                (d, eight_digits(lo.wrapping_sub(ZEROS)) * POW10_INT[r]
                    + eight_digits(hi.wrapping_sub(ZEROS) << (8 * (8 - r))))
            }
            _ => digits_slow(b, j),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        digits_slow(b, j)
    }
}

/// `digits` a byte at a time (runs of 16 digits or more).
#[inline(never)]
fn digits_slow(b: &[u8], mut j: usize) -> (usize, u64) {
    let start = j;
    let mut m: u64 = 0;
    while let Some(&d @ b'0'..=b'9') = b.get(j) {
        m = m.wrapping_mul(10).wrapping_add((d - b'0') as u64);
        j += 1;
    }
    (j - start, m)
}

/// The first 16 bytes of `plain_run` (most strings end within them): where the run ends, or `i + 16`.
#[inline(always)]
fn plain_run16(b: &[u8], i: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        debug_assert!(i + 16 <= b.len());
        // SAFETY: SSE2 is part of x86-64; i <= n, so the 16 bytes are inside the padded `b`
        unsafe {
            let v = _mm_loadu_si128(b.as_ptr().add(i) as *const __m128i);
            let special = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)), _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8))),
                _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
            let mask = _mm_movemask_epi8(special) as u32 | 1 << 16;
            i + mask.trailing_zeros() as usize
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        plain_run(b, i)
    }
}


/// The event keys read, with the type msgspec's strict decode of `schema.Event` gives each; any other key's value
/// is validated and dropped. `Args`: the object under `args` (`schema.Args`).
#[derive(Clone, Copy)]
enum EventKey {
    Ph,
    Name,
    Cat,
    Pid,
    Tid,
    Ts,
    Dur,
    Id,
    Args,
}
const EVENT_KEYS: [(&[u8], EventKey); 9] = [
    (b"ph", EventKey::Ph),
    (b"name", EventKey::Name),
    (b"cat", EventKey::Cat),
    (b"pid", EventKey::Pid),
    (b"tid", EventKey::Tid),
    (b"ts", EventKey::Ts),
    (b"dur", EventKey::Dur),
    (b"id", EventKey::Id),
    (b"args", EventKey::Args),
];

#[derive(Clone, Copy)]
enum ArgKey {
    Correlation,
    ExternalId,
    ExternalIdLegacy,
    Device,
    Stream,
    Bytes,
    MemBytes,
    TotalAllocated,
    TotalReserved,
    DeviceType,
    DeviceId,
    Name,
    Labels,
    Kernel,
}
const ARG_KEYS: [(&[u8], ArgKey); 14] = [
    (b"correlation", ArgKey::Correlation),
    (b"External id", ArgKey::ExternalId),
    (b"external id", ArgKey::ExternalIdLegacy),
    (b"device", ArgKey::Device),
    (b"stream", ArgKey::Stream),
    (b"bytes", ArgKey::Bytes),
    (b"Bytes", ArgKey::MemBytes),
    (b"Total Allocated", ArgKey::TotalAllocated),
    (b"Total Reserved", ArgKey::TotalReserved),
    (b"Device Type", ArgKey::DeviceType),
    (b"Device Id", ArgKey::DeviceId),
    (b"name", ArgKey::Name),
    (b"labels", ArgKey::Labels),
    (b"kernel", ArgKey::Kernel),
];

/// A key's bytes as a little-endian u128 (keys read are at most 15 bytes): one compare per table entry.
const fn word(s: &[u8]) -> u128 {
    let mut w = 0u128;
    let mut i = 0;
    while i < s.len() {
        w |= (s[i] as u128) << (8 * i);
        i += 1;
    }
    w
}

/// A perfect hash of a table's keys: slot = (first 8 bytes ^ length) * mul >> 58; a slot holds (word, index in
/// the table), index u8::MAX when empty. One multiply and one compare per object key.
struct KeyTable {
    mul: u64,
    slots: [(u128, u8); 64],
}

#[inline(always)]
const fn slot(w: u128, len: usize, mul: u64) -> usize {
    (((w as u64) ^ len as u64).wrapping_mul(mul) >> 58) as usize
}

const fn key_table<K: Copy, const N: usize>(keys: &[(&[u8], K); N]) -> KeyTable {
    let mut mul: u64 = 0x9E3779B97F4A7C15;
    loop {
        let mut slots = [(0u128, u8::MAX); 64];
        let mut i = 0;
        let mut ok = true;
        while i < N {
            let k = keys[i].0;
            let h = slot(word(k), k.len(), mul);
            if slots[h].1 != u8::MAX {
                ok = false;
                break;
            }
            slots[h] = (word(k), i as u8);
            i += 1;
        }
        if ok {
            return KeyTable { mul, slots };
        }
        mul = mul.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1;
    }
}
const EVENT_TABLE: KeyTable = key_table(&EVENT_KEYS);
const ARG_TABLE: KeyTable = key_table(&ARG_KEYS);

/// Which of `table`'s keys the object key `k` is (None: a key not read). An escaped key is not modelled (msgspec
/// matches the decoded key). `k` must come from `P::string`: the 16 bytes at its start are inside the padded chunk.
#[inline(always)]
fn key_index(table: &KeyTable, k: &[u8], esc: bool) -> R<Option<u8>> {
    if esc {
        return Err(Fail::Unsupported);
    }
    if k.len() > 15 {
        return Ok(None);
    }
    // SAFETY: k starts at an index <= n of the padded chunk, which has PAD >= 16 bytes after n
    let w = unsafe { std::ptr::read_unaligned(k.as_ptr() as *const u128) } & low_bytes(k.len());
    let (x, bit) = table.slots[slot(w, k.len(), table.mul)];
    Ok(if x == w && bit != u8::MAX { Some(bit) } else { None })
}

/// A mask of the low `n` bytes of a u128 (n <= 16).
#[inline(always)]
fn low_bytes(n: usize) -> u128 {
    u128::MAX.checked_shr(128 - 8 * n as u32).unwrap_or(0)
}

/// The gap before each key of the last objects of one kind, as its bytes: from the end of the value before (or the
/// object's `{`) through the key, its colon and the whitespace after it (`, "name": `), when 32 bytes or fewer.
/// Kineto writes the keys of its events and args in a fixed order with the same separators, so the gap at a
/// position is most often the one seen there before, and one 32-byte compare replaces the whitespace, the comma,
/// reading the key and looking it up. A gap is learnt only from bytes the general path read and checked (it holds
/// no zero byte, so a match never runs past the chunk's end, where the padding's zeros start).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Gap<K> {
    bytes: [u8; 32], // the gap's bytes, then whatever followed it (not compared)
    mask: u32,       // the low `len` bits set (0: no gap learnt)
    bit: u32,        // 1 << the key's index in its table, or 0 for a key not read
    len: u8,
    key: Option<K>,
}
impl<K: Copy> Gap<K> {
    const NONE: Gap<K> = Gap { bytes: [0; 32], mask: 0, bit: 0, len: 0, key: None };

    /// The gap of `len` bytes at `start` (<= n: the 32 bytes there are inside the padded chunk).
    #[inline(always)]
    fn learn(&mut self, b: &[u8], start: usize, len: usize, bit: u32, key: Option<K>) {
        if len > 32 {
            self.mask = 0;
            return;
        }
        debug_assert!(start + 32 <= b.len());
        // SAFETY: start <= n and PAD >= 32, so the 32 bytes are inside `b`
        self.bytes = unsafe { std::ptr::read_unaligned(b.as_ptr().add(start) as *const [u8; 32]) };
        self.mask = ((1u64 << len) - 1) as u32;
        self.len = len as u8;
        self.bit = bit;
        self.key = key;
    }

    /// Whether the bytes at `i` start with this gap (false when none is learnt). Reads 32 bytes at `i <= n`,
    /// inside the padded chunk.
    #[inline(always)]
    fn matches(&self, b: &[u8], i: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            debug_assert!(i + 32 <= b.len());
            // SAFETY: SSE2 is part of x86-64; i <= n and PAD >= 32, so the 32 bytes are inside `b`; `bytes` is
            // 16-byte aligned (repr align(16), first field)
            unsafe {
                let p = b.as_ptr().add(i);
                let g = self.bytes.as_ptr() as *const __m128i;
                let e0 = _mm_cmpeq_epi8(_mm_loadu_si128(p as *const __m128i), _mm_load_si128(g));
                let e1 = _mm_cmpeq_epi8(_mm_loadu_si128(p.add(16) as *const __m128i), _mm_load_si128(g.add(1)));
                let eq = _mm_movemask_epi8(e0) as u32 | (_mm_movemask_epi8(e1) as u32) << 16;
                self.mask != 0 && eq & self.mask == self.mask
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.mask != 0 && b[i..i + self.len as usize] == self.bytes[..self.len as usize]
        }
    }
}

/// Positions predicted per object (a kernel's args hold 16 keys); a power of two, so `pos % PREDICTED` is a mask.
const PREDICTED: usize = 32;
type Predicted<K> = [Gap<K>; PREDICTED];

fn int_only(v: Val) -> R<Option<i64>> {
    match v {
        Val::Null => Ok(None),
        Val::Num(Num::Int(i)) => Ok(Some(i)),
        _ => Err(Fail::Unsupported),
    }
}
fn num_only(v: Val) -> R<Option<Num>> {
    match v {
        Val::Null => Ok(None),
        Val::Num(n) => Ok(Some(n)),
        _ => Err(Fail::Unsupported),
    }
}
fn int_or_str(v: Val) -> R<Val> {
    match v {
        Val::Num(Num::Float(_)) => Err(Fail::Unsupported),
        _ => Ok(v),
    }
}
fn str_only(v: Val) -> R<Option<Val>> {
    match v {
        Val::Null => Ok(None),
        Val::Str(..) => Ok(Some(v)),
        _ => Err(Fail::Unsupported),
    }
}

/// `args` into `a` (left as it is for `null`).
#[inline(always)]
fn parse_args<'a>(p: &mut P<'a>, a: &mut Args<'a>, pred: &mut Predicted<ArgKey>) -> R<()> {
    if p.peek()? == b'n' {
        return p.literal(b"null");
    }
    if p.peek()? != b'{' {
        p.skip(1)?;
        return Err(Fail::Unsupported);
    }
    p.keyed_object(&ARG_KEYS, &ARG_TABLE, pred, |p, key| {
        let Some(key) = key else {
            return p.skip_value(2);
        };
        let v = p.scalar(2)?;
        match key {
            ArgKey::Correlation => a.correlation = int_or_str(v)?,
            ArgKey::ExternalId => a.external_id = int_only(v)?,
            ArgKey::ExternalIdLegacy => a.external_id_legacy = int_only(v)?,
            ArgKey::Device => a.device = int_or_str(v)?,
            ArgKey::Stream => a.stream = int_or_str(v)?,
            ArgKey::Bytes => a.bytes = v,
            ArgKey::MemBytes => a.mem_bytes = num_only(v)?,
            ArgKey::TotalAllocated => a.total_allocated = num_only(v)?,
            ArgKey::TotalReserved => drop(num_only(v)?),
            ArgKey::DeviceType => a.device_type = int_only(v)?,
            ArgKey::DeviceId => a.device_id = int_only(v)?,
            ArgKey::Name => a.name = str_only(v)?,
            ArgKey::Labels => drop(str_only(v)?),
            ArgKey::Kernel => a.kernel = str_only(v)?,
        }
        Ok(())
    })
}

/// One event into `e` (reset first).
#[inline(always)]
fn parse_event<'a>(p: &mut P<'a>, e: &mut Event<'a>, pred: &mut Predictions) -> R<()> {
    if p.peek()? != b'{' {
        p.skip(1)?;
        return Err(Fail::Unsupported); // not an object: msgspec's ValidationError
    }
    *e = Event::default();
    let (event_pred, args_preds) = (&mut pred.event, &mut pred.args);
    p.keyed_object(&EVENT_KEYS, &EVENT_TABLE, event_pred, |p, key| {
        let Some(key) = key else {
            return p.skip_value(1);
        };
        if let EventKey::Args = key {
            return parse_args(p, &mut e.args, &mut args_preds[args_kind(e.cat)]);
        }
        let v = p.scalar(1)?;
        match key {
            EventKey::Ph => match v {
                Val::Str(..) => e.ph = Some(v),
                _ => return Err(Fail::Unsupported),
            },
            EventKey::Name => e.name = v,
            EventKey::Cat => e.cat = str_only(v)?.unwrap_or(Val::Null),
            EventKey::Pid => e.pid = int_or_str(v)?,
            EventKey::Tid => e.tid = int_or_str(v)?,
            EventKey::Ts => e.ts = num_only(v)?,
            EventKey::Dur => e.dur = num_only(v)?,
            EventKey::Id => drop(int_or_str(v)?),
            EventKey::Args => unreachable!(),
        }
        Ok(())
    })
}

/// The gaps expected in events and in their args, the latter by category (`args_kind`).
struct Predictions {
    event: Predicted<EventKey>,
    args: [Predicted<ArgKey>; ARGS_KINDS],
}
const ARGS_KINDS: usize = 4;

/// Which of the args predictions an event's category uses: its length and second byte, mixed and cut to
/// `ARGS_KINDS` values. Why: each category's args have keys of their own (a CPU op's 3, a kernel's 16, a runtime
/// call's 3), and Kineto interleaves them, so one prediction for all missed at every change of category. It only
/// picks a prediction: categories alike here just share one (cpu_op 2, kernel 3, cuda_runtime 1, cuda_driver 0).
#[inline(always)]
fn args_kind(cat: Val) -> usize {
    match cat {
        Val::Str(raw, _) if raw.len() >= 2 => (raw.len() + raw[1] as usize) % ARGS_KINDS,
        _ => 0,
    }
}

/// A string value's decoded UTF-8 bytes (escapes resolved): the raw bytes themselves when there are none (almost
/// always), without a call.
#[inline(always)]
fn unescape<'a>(raw: &'a [u8], esc: bool, buf: &'a mut Vec<u8>) -> &'a [u8] {
    if !esc {
        return raw;
    }
    unescape_into(raw, buf)
}

#[inline(never)]
fn unescape_into<'a>(raw: &[u8], buf: &'a mut Vec<u8>) -> &'a [u8] {
    buf.clear();
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        if c != b'\\' {
            buf.push(c);
            i += 1;
            continue;
        }
        let d = raw[i + 1];
        i += 2;
        match d {
            b'b' => buf.push(8),
            b'f' => buf.push(12),
            b'n' => buf.push(b'\n'),
            b'r' => buf.push(b'\r'),
            b't' => buf.push(b'\t'),
            b'u' => {
                let v = u32::from_str_radix(std::str::from_utf8(&raw[i..i + 4]).unwrap(), 16).unwrap();
                i += 4;
                let ch = char::from_u32(v).unwrap(); // surrogates were refused by string()
                let mut tmp = [0u8; 4];
                buf.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
            }
            other => buf.push(other), // " \ /
        }
    }
    buf
}

/// Category -> (family index or -1 dropped, kind code, module-scope category); None: not routed (REST).
fn category(cat: &[u8]) -> Option<(i32, i8, bool)> {
    Some(match cat {
        b"kernel" | b"Kernel" => (0, 0, false),
        b"gpu_memcpy" | b"Memcpy" => (0, 1, false),
        b"gpu_memset" | b"Memset" => (0, 2, false),
        b"cuda_runtime" | b"Runtime" => (1, 3, false),
        b"cuda_driver" => (1, 4, false),
        b"cpu_op" => (2, 5, true),
        b"Operator" => (2, 5, false),
        b"user_annotation" => (2, 6, true),
        b"gpu_user_annotation" => (3, 7, false),
        b"python_function" => (-1, MODULE_KIND, true),
        _ => return None,
    })
}

fn num_f64(n: Num) -> f64 {
    match n {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    }
}

/// `tables._to_int` on a float: int64 range checked exactly, then truncated toward zero.
fn float_to_int(f: f64) -> R<i64> {
    // -2^63 <= f <= 2^63 - 1, compared exactly as Python compares float and int
    if f >= -9223372036854775808.0 && f < 9223372036854775808.0 {
        Ok(f.trunc() as i64)
    } else {
        Err(Fail::Unsupported)
    }
}

/// `tables._to_int` on a string: ASCII `-?[0-9]+` parsed (over 20 characters or beyond int64: the Python loader
/// raises; left to it), anything else -> default.
#[inline(never)]
fn str_to_int(raw: &[u8], esc: bool, default: i64) -> R<i64> {
    if esc {
        return Err(Fail::Unsupported);
    }
    let digits = if raw.first() == Some(&b'-') { &raw[1..] } else { raw };
    if digits.is_empty() || !digits.iter().all(|c| c.is_ascii_digit()) {
        return Ok(default);
    }
    if raw.len() > 20 {
        return Err(Fail::Unsupported);
    }
    std::str::from_utf8(raw).unwrap().parse::<i64>().map_err(|_| Fail::Unsupported)
}

#[inline(always)]
fn to_int(v: Val, default: i64) -> R<i64> {
    match v {
        Val::Null => Ok(default),
        Val::Num(Num::Int(i)) => Ok(i),
        Val::Num(Num::Float(f)) => float_to_int(f),
        Val::Str(raw, esc) => str_to_int(raw, esc, default),
    }
}
fn num_to_int(v: Option<Num>, default: i64) -> R<i64> {
    match v {
        None => Ok(default),
        Some(n) => to_int(Val::Num(n), default),
    }
}

impl Scanner {
    fn new() -> Self {
        Scanner {
            fams: Default::default(),
            mem: Memory::default(),
            names: Codes::default(),
            ids: Codes::default(),
            int_ids: FastMap::default(),
            process_names: Vec::new(),
            blob: Vec::new(),
            offsets: Vec::new(),
            pad: Vec::new(),
            last_ids: [[(0, -1); 2]; 2],
            empty_name: -1,
            last_cat: (0, u8::MAX, None),
            name_cache: Box::new([NO_NAME; NAME_CACHE]),
        }
    }

    #[inline(always)]
    fn id_code(&mut self, v: Val, key: &mut Vec<u8>, slot: usize) -> i32 {
        // Events of one thread come in runs, and a trace's CPU and GPU events interleave: the last two integer
        // pids and tids and their codes, checked first.
        if let Val::Num(Num::Int(i)) = v {
            let [(a, ca), (b, cb)] = self.last_ids[slot];
            if a == i && ca >= 0 {
                return ca;
            }
            if b == i && cb >= 0 {
                return cb;
            }
            let c = self.id_code_slow(v, key);
            self.last_ids[slot] = [(i, c), (a, ca)];
            return c;
        }
        self.id_code_slow(v, key)
    }

    fn id_code_slow(&mut self, v: Val, key: &mut Vec<u8>) -> i32 {
        key.clear();
        match v {
            Val::Null => key.push(b'n'),
            Val::Num(Num::Int(i)) => {
                if let Some(&c) = self.int_ids.get(&i) {
                    return c;
                }
                key.push(b'i');
                key.extend_from_slice(i.to_string().as_bytes());
                let c = self.ids.code(key);
                self.int_ids.insert(i, c);
                return c;
            }
            Val::Num(Num::Float(_)) => unreachable!(), // refused when parsed
            Val::Str(raw, esc) => {
                key.push(b's');
                let mut buf = Vec::new();
                key.extend_from_slice(unescape(raw, esc, &mut buf));
            }
        }
        self.ids.code(key)
    }

    /// Scan one chunk `[e, e, ...]` (whitespace around allowed); (events, kept events) or a failure, after
    /// which the scanner is as it was.
    /// `data`: the chunk alone (copied here with its padding) or, `padded`, the chunk followed by PAD zero bytes.
    fn add(&mut self, data: &[u8], padded: bool, counts: &mut [u64; 2]) -> i32 {
        let lens: Vec<usize> = self.fams.iter().map(|f| f.len()).collect();
        let (mem_len, names_len, ids_len, pn_len) =
            (self.mem.ts.len(), self.names.order.len(), self.ids.order.len(), self.process_names.len());
        let r = if padded { self.scan(data, data.len() - PAD, counts) } else { self.add_inner(data, counts) };
        match r {
            Ok(()) => OK,
            Err(f) => {
                for (fam, n) in self.fams.iter_mut().zip(lens) {
                    fam.truncate(n);
                }
                self.mem.truncate(mem_len);
                self.names.truncate(names_len);
                self.ids.truncate(ids_len);
                self.int_ids.clear();
                self.last_ids = [[(0, -1); 2]; 2];
                self.empty_name = -1;
                self.name_cache.fill(NO_NAME);
                self.process_names.truncate(pn_len);
                match f {
                    Fail::Syntax => SYNTAX,
                    Fail::Unsupported => UNSUPPORTED,
                }
            }
        }
    }

    fn add_inner(&mut self, data: &[u8], counts: &mut [u64; 2]) -> R<()> {
        // The chunk copied with PAD zero bytes after it (see `P`): ~5 % of a scan, which pp_add_in_place saves.
        let mut pad = std::mem::take(&mut self.pad);
        pad.clear();
        pad.reserve(data.len() + PAD);
        pad.extend_from_slice(data);
        pad.resize(data.len() + PAD, 0);
        let r = self.scan(&pad, data.len(), counts);
        self.pad = pad;
        r
    }

    fn scan(&mut self, padded: &[u8], n: usize, counts: &mut [u64; 2]) -> R<()> {
        let data = &padded[..n];
        let mut p = P { b: padded, i: 0 };
        let (mut events, mut kept) = (0u64, 0u64);
        let mut key = Vec::new();
        let mut nbuf = Vec::new();
        let mut e = Event::default();
        let mut pred = Predictions { event: [Gap::NONE; PREDICTED], args: [[Gap::NONE; PREDICTED]; ARGS_KINDS] };
        p.ws();
        p.expect(b'[')?;
        p.ws();
        if p.peek()? == b']' {
            p.i += 1;
        } else {
            loop {
                p.ws();
                parse_event(&mut p, &mut e, &mut pred)?;
                events += 1;
                kept += self.route(&e, &mut key, &mut nbuf)? as u64;
                p.ws();
                match p.peek()? {
                    b',' => p.i += 1,
                    b']' => {
                        p.i += 1;
                        break;
                    }
                    _ => return Err(Fail::Syntax),
                }
            }
        }
        p.ws();
        if p.i != data.len() {
            return Err(Fail::Syntax);
        }
        for f in &mut self.fams {
            f.flush(); // the chunk scanned: its rows in the columns (a chunk that fails drops them: truncate)
        }
        counts[0] = events;
        counts[1] = kept;
        Ok(())
    }

    /// `category(cat)` through the last category routed: categories come in runs, and one 16-byte compare costs
    /// less than matching the string against every category. `cat` must come from `P::string` (16 bytes at its
    /// start are inside the padded chunk).
    #[inline(always)]
    fn category_cached(&mut self, cat: &[u8]) -> Option<(i32, i8, bool)> {
        if cat.len() > 16 {
            return category(cat);
        }
        // SAFETY: cat starts at an index <= n of the padded chunk, which has PAD >= 16 bytes after n
        let w = unsafe { std::ptr::read_unaligned(cat.as_ptr() as *const u128) } & low_bytes(cat.len());
        let (lw, len, r) = self.last_cat;
        if lw == w && len as usize == cat.len() {
            return r;
        }
        let r = category(cat);
        self.last_cat = (w, cat.len() as u8, r);
        r
    }

    /// TableBuilder.add for one event: whether it was kept.
    fn route(&mut self, e: &Event, key: &mut Vec<u8>, nbuf: &mut Vec<u8>) -> R<bool> {
        let ph: &[u8] = match e.ph {
            Some(Val::Str(raw, esc)) => {
                if esc {
                    return Err(Fail::Unsupported);
                }
                raw
            }
            _ => b"",
        };
        let cat = match e.cat {
            Val::Str(raw, esc) => {
                if esc {
                    return Err(Fail::Unsupported);
                }
                self.category_cached(raw)
            }
            _ => None,
        };
        // name must be str|int|float|None for msgspec; true/false/objects were refused by scalar()
        let name_str: Option<(&[u8], bool)> = match e.name {
            Val::Str(raw, esc) => Some((raw, esc)),
            _ => None,
        };
        let args = &e.args;
        match cat {
            Some((fam, kind, scope)) => {
                let ts = match e.ts {
                    Some(n) => num_f64(n),
                    None => return Ok(false),
                };
                if ph != b"X" {
                    return Ok(false);
                }
                let (name_raw, name_esc) = match name_str {
                    Some(x) => x,
                    None => {
                        if fam >= 0 {
                            return Err(Fail::Unsupported); // str(name) of a number: not modelled
                        }
                        return Ok(false);
                    }
                };
                let name = unescape(name_raw, name_esc, nbuf);
                let (f, kind) = if scope && name.starts_with(b"nn.Module: ") {
                    (MODULES, MODULE_KIND)
                } else if fam >= 0 {
                    (fam as usize, kind)
                } else {
                    return Ok(false);
                };
                let name_code = self.names.code_cached(name, !name_esc, &mut self.name_cache);
                let pid = self.id_code(e.pid, key, 0);
                let tid = self.id_code(e.tid, key, 1);
                let launched = match args.kernel {
                    Some(Val::Str(raw, esc)) => {
                        let k = unescape(raw, esc, nbuf);
                        self.names.code_cached(k, !esc, &mut self.name_cache)
                    }
                    _ => {
                        if self.empty_name < 0 {
                            self.empty_name = self.names.code(b"");
                        }
                        self.empty_name
                    }
                };
                let external = args.external_id.or(args.external_id_legacy).unwrap_or(-1);
                let correlation = to_int(args.correlation, -1)?;
                let device = to_int(args.device, -1)?;
                let stream = to_int(args.stream, -1)?;
                let bytes = to_int(args.bytes, 0)?;
                self.fams[f].push(Row {
                    ts,
                    dur: e.dur.map(num_f64).unwrap_or(0.0),
                    external_id: external,
                    correlation,
                    device,
                    stream,
                    bytes,
                    name: name_code,
                    pid,
                    tid,
                    launched_kernel: launched,
                    kind,
                });
                Ok(true)
            }
            None => {
                let name: &[u8] = match name_str {
                    Some((raw, false)) => raw,
                    Some((_, true)) if ph == b"i" || ph == b"M" => return Err(Fail::Unsupported),
                    Some((_, true)) => return Ok(false),
                    None => return Ok(false),
                };
                if ph == b"i" && name == b"[memory]" {
                    let ts = e.ts.map(num_f64).unwrap_or(0.0);
                    let pid = self.id_code(e.pid, key, 0);
                    let tid = self.id_code(e.tid, key, 1);
                    let m = &mut self.mem;
                    m.ts.push(ts);
                    m.pid.push(pid);
                    m.tid.push(tid);
                    m.bytes.push(num_to_int(args.mem_bytes, 0)?);
                    m.total_allocated.push(num_to_int(args.total_allocated, -1)?);
                    m.device_type.push(args.device_type.unwrap_or(-1));
                    m.device_id.push(args.device_id.unwrap_or(-1));
                    return Ok(true);
                }
                if ph == b"M" && name == b"process_name" {
                    if let Some(Val::Str(raw, esc)) = args.name {
                        if !raw.is_empty() {
                            let value = unescape(raw, esc, nbuf).to_vec();
                            let k = match e.pid {
                                Val::Null => b"None".to_vec(),
                                Val::Num(Num::Int(i)) => i.to_string().into_bytes(),
                                Val::Str(r, es) => {
                                    let mut b2 = Vec::new();
                                    unescape(r, es, &mut b2).to_vec()
                                }
                                Val::Num(Num::Float(_)) => return Err(Fail::Unsupported),
                            };
                            self.process_names.push((k, value));
                        }
                    }
                }
                Ok(false)
            }
        }
    }

    fn strings(&mut self, which: i32) -> usize {
        self.blob.clear();
        self.offsets.clear();
        self.offsets.push(0);
        let items: Vec<&[u8]> = match which {
            0 => self.names.order.iter().map(|v| v.as_slice()).collect(),
            1 => self.ids.order.iter().map(|v| v.as_slice()).collect(),
            _ => self.process_names.iter().flat_map(|(k, v)| [k.as_slice(), v.as_slice()]).collect(),
        };
        for s in items {
            self.blob.extend_from_slice(s);
            self.offsets.push(self.blob.len() as u64);
        }
        self.offsets.len() - 1
    }
}

// --- C ABI -------------------------------------------------------------------------------------------------------

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
    if fam == 5 {
        let m = &mut s.mem;
        return match col {
            0 => out!(m.ts),
            1 => out!(m.pid.vec),
            2 => out!(m.tid.vec),
            3 => out!(m.bytes.vec),
            4 => out!(m.total_allocated.vec),
            5 => out!(m.device_type.vec),
            _ => out!(m.device_id.vec),
        };
    }
    let f = &mut s.fams[(fam as usize).min(N_FAMILIES - 1)];
    match col {
        0 => out!(f.kind.vec),
        1 => out!(f.name.vec),
        2 => out!(f.pid.vec),
        3 => out!(f.tid.vec),
        4 => out!(f.ts),
        5 => out!(f.dur),
        6 => out!(f.external_id.vec),
        7 => out!(f.launched_kernel.vec),
        8 => out!(f.correlation.vec),
        9 => out!(f.device.vec),
        10 => out!(f.stream.vec),
        _ => out!(f.bytes.vec),
    }
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
    if fam == 5 {
        let m = &mut s.mem;
        return match col {
            1 => run!(m.pid),
            2 => run!(m.tid),
            3 => run!(m.bytes),
            4 => run!(m.total_allocated),
            5 => run!(m.device_type),
            6 => run!(m.device_id),
            _ => 0,
        };
    }
    let f = &mut s.fams[(fam as usize).min(N_FAMILIES - 1)];
    match col {
        0 => run!(f.kind),
        1 => run!(f.name),
        2 => run!(f.pid),
        3 => run!(f.tid),
        6 => run!(f.external_id),
        7 => run!(f.launched_kernel),
        8 => run!(f.correlation),
        9 => run!(f.device),
        10 => run!(f.stream),
        11 => run!(f.bytes),
        _ => 0,
    }
}

/// Element width codes of `pp_release`: the column's Rust element type, so that the allocation is freed with the
/// layout it was made with.
const ELEM_I8: i32 = 1;
const ELEM_I32: i32 = 4;
const ELEM_I64: i32 = 8;
const ELEM_F64: i32 = 9;

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
unsafe fn each_code(codes: *const u8, n: usize, width: i32, mut f: impl FnMut(usize, i64) -> bool) -> bool {
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
fn times_body(ts: &[f64], dur: &[f64], origin: f64, check_origin: f64, max_span: f64, ts_ns: &mut [i64],
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
unsafe fn times_sse41(ts: &[f64], dur: &[f64], origin: f64, check_origin: f64, max_span: f64, ts_ns: &mut [i64],
                      dur_ns: &mut [i64], end_ns: &mut [i64]) -> bool {
    times_body(ts, dur, origin, check_origin, max_span, ts_ns, dur_ns, end_ns)
}

/// `times_body` through `times_sse41` where the CPU has SSE4.1 (std caches the check), else as it is: the one
/// dispatch `pp_times` and `pp_times_in_place` share.
#[inline]
#[allow(clippy::too_many_arguments)]
fn times(ts: &[f64], dur: &[f64], origin: f64, check_origin: f64, max_span: f64, ts_ns: &mut [i64],
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
/// page-fault (2.1 GB: 7.6M rows, 122 MB; issue 28).
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
/// op against ~130 of the array path (issue 28).
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

#[cfg(test)]
mod tests;
