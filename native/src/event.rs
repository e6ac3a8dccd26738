//! A Kineto event's fields as the scanner reads them (`schema.Event` / `schema.Args`): the keys read and
//! the order they are predicted in, the values' types and conversions, and each category's family.

use super::*;

pub(crate) struct Args<'a> {
    pub(crate) correlation: Val<'a>,
    pub(crate) external_id: Option<i64>,
    pub(crate) external_id_legacy: Option<i64>,
    pub(crate) device: Val<'a>,
    pub(crate) stream: Val<'a>,
    pub(crate) bytes: Val<'a>,
    pub(crate) mem_bytes: Option<Num>,
    pub(crate) total_allocated: Option<Num>,
    pub(crate) device_type: Option<i64>,
    pub(crate) device_id: Option<i64>,
    pub(crate) name: Option<Val<'a>>,
    pub(crate) kernel: Option<Val<'a>>,
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

pub(crate) struct Event<'a> {
    pub(crate) ph: Option<Val<'a>>, // absent: ""
    pub(crate) name: Val<'a>,       // absent: ""
    pub(crate) cat: Val<'a>,
    pub(crate) pid: Val<'a>, // absent: 0
    pub(crate) tid: Val<'a>,
    pub(crate) ts: Option<Num>,
    pub(crate) dur: Option<Num>,
    pub(crate) args: Args<'a>, // absent or null: all defaults
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

// The keys read (`EventKey`, `EVENT_KEYS`, `ArgKey`, `ARG_KEYS`) are generated from `schema.Event` and
// `schema.Args` into `layout.rs`; each is parsed below with the type msgspec's strict decode of that field gives,
// and any other key's value is validated and dropped.

/// A key's bytes as a little-endian u128 (keys read are at most 15 bytes): one compare per table entry.
pub(crate) const fn word(s: &[u8]) -> u128 {
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
pub(crate) struct KeyTable {
    pub(crate) mul: u64,
    pub(crate) slots: [(u128, u8); 64],
}

#[inline(always)]
pub(crate) const fn slot(w: u128, len: usize, mul: u64) -> usize {
    (((w as u64) ^ len as u64).wrapping_mul(mul) >> 58) as usize
}

pub(crate) const fn key_table<K: Copy, const N: usize>(keys: &[(&[u8], K); N]) -> KeyTable {
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
pub(crate) const EVENT_TABLE: KeyTable = key_table(&EVENT_KEYS);
pub(crate) const ARG_TABLE: KeyTable = key_table(&ARG_KEYS);

/// Which of `table`'s keys the object key `k` is (None: a key not read). An escaped key is not modelled (msgspec
/// matches the decoded key). `k` must come from `P::string`: the 16 bytes at its start are inside the padded chunk.
#[inline(always)]
pub(crate) fn key_index(table: &KeyTable, k: &[u8], esc: bool) -> R<Option<u8>> {
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
pub(crate) fn low_bytes(n: usize) -> u128 {
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
pub(crate) struct Gap<K> {
    pub(crate) bytes: [u8; 32], // the gap's bytes, then whatever followed it (not compared)
    pub(crate) mask: u32,       // the low `len` bits set (0: no gap learnt)
    pub(crate) bit: u32,        // 1 << the key's index in its table, or 0 for a key not read
    pub(crate) len: u8,
    pub(crate) key: Option<K>,
}
impl<K: Copy> Gap<K> {
    pub(crate) const NONE: Gap<K> = Gap { bytes: [0; 32], mask: 0, bit: 0, len: 0, key: None };

    /// The gap of `len` bytes at `start` (<= n: the 32 bytes there are inside the padded chunk).
    #[inline(always)]
    pub(crate) fn learn(&mut self, b: &[u8], start: usize, len: usize, bit: u32, key: Option<K>) {
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
    pub(crate) fn matches(&self, b: &[u8], i: usize) -> bool {
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
pub(crate) const PREDICTED: usize = 32;
pub(crate) type Predicted<K> = [Gap<K>; PREDICTED];

pub(crate) fn int_only(v: Val) -> R<Option<i64>> {
    match v {
        Val::Null => Ok(None),
        Val::Num(Num::Int(i)) => Ok(Some(i)),
        _ => Err(Fail::Unsupported),
    }
}
pub(crate) fn num_only(v: Val) -> R<Option<Num>> {
    match v {
        Val::Null => Ok(None),
        Val::Num(n) => Ok(Some(n)),
        _ => Err(Fail::Unsupported),
    }
}
pub(crate) fn int_or_str(v: Val) -> R<Val> {
    match v {
        Val::Num(Num::Float(_)) => Err(Fail::Unsupported),
        _ => Ok(v),
    }
}
pub(crate) fn str_only(v: Val) -> R<Option<Val>> {
    match v {
        Val::Null => Ok(None),
        Val::Str(..) => Ok(Some(v)),
        _ => Err(Fail::Unsupported),
    }
}

/// `args` into `a` (left as it is for `null`).
#[inline(always)]
pub(crate) fn parse_args<'a>(p: &mut P<'a>, a: &mut Args<'a>, pred: &mut Predicted<ArgKey>) -> R<()> {
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
pub(crate) fn parse_event<'a>(p: &mut P<'a>, e: &mut Event<'a>, pred: &mut Predictions) -> R<()> {
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
pub(crate) struct Predictions {
    pub(crate) event: Predicted<EventKey>,
    pub(crate) args: [Predicted<ArgKey>; ARGS_KINDS],
}
pub(crate) const ARGS_KINDS: usize = 4;

/// Which of the args predictions an event's category uses: its length and second byte, mixed and cut to
/// `ARGS_KINDS` values. Why: each category's args have keys of their own (a CPU op's 3, a kernel's 16, a runtime
/// call's 3), and Kineto interleaves them, so one prediction for all missed at every change of category. It only
/// picks a prediction: categories alike here just share one (cpu_op 2, kernel 3, cuda_runtime 1, cuda_driver 0).
#[inline(always)]
pub(crate) fn args_kind(cat: Val) -> usize {
    match cat {
        Val::Str(raw, _) if raw.len() >= 2 => (raw.len() + raw[1] as usize) % ARGS_KINDS,
        _ => 0,
    }
}

/// A string value's decoded UTF-8 bytes (escapes resolved): the raw bytes themselves when there are none (almost
/// always), without a call.
#[inline(always)]
pub(crate) fn unescape<'a>(raw: &'a [u8], esc: bool, buf: &'a mut Vec<u8>) -> &'a [u8] {
    if !esc {
        return raw;
    }
    unescape_into(raw, buf)
}

#[inline(never)]
pub(crate) fn unescape_into<'a>(raw: &[u8], buf: &'a mut Vec<u8>) -> &'a [u8] {
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
pub(crate) fn category(cat: &[u8]) -> Option<(i32, i8, bool)> {
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

pub(crate) fn num_f64(n: Num) -> f64 {
    match n {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    }
}

/// `tables._to_int` on a float: int64 range checked exactly, then truncated toward zero.
pub(crate) fn float_to_int(f: f64) -> R<i64> {
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
pub(crate) fn str_to_int(raw: &[u8], esc: bool, default: i64) -> R<i64> {
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
pub(crate) fn to_int(v: Val, default: i64) -> R<i64> {
    match v {
        Val::Null => Ok(default),
        Val::Num(Num::Int(i)) => Ok(i),
        Val::Num(Num::Float(f)) => float_to_int(f),
        Val::Str(raw, esc) => str_to_int(raw, esc, default),
    }
}
pub(crate) fn num_to_int(v: Option<Num>, default: i64) -> R<i64> {
    match v {
        None => Ok(default),
        Some(n) => to_int(Val::Num(n), default),
    }
}
