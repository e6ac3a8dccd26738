//! The byte-level JSON parser over one padded chunk: whitespace, strings, numbers, nesting, with the
//! strictness of msgspec's decode (what it rejects is `Fail::Syntax` or `Fail::Unsupported`).

use super::*;

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Int(i64),
    Float(f64),
}

#[derive(Clone, Copy)]
pub(crate) enum Val<'a> {
    Null,
    Num(Num),
    Str(&'a [u8], bool), // raw bytes between the quotes; true when they hold escapes
}

/// The parser over one chunk. `b` is the chunk followed by `PAD` zero bytes (`Scanner::pad`), so the hot loops
/// read without bounds checks: a zero byte stops every loop (not whitespace, not a digit, a control byte inside a
/// string, no structural character), so `i` never passes the chunk's end `n`, where the first zero sits, and a
/// 16- or 32-byte load at any `i <= n` stays inside `b`.
pub(crate) struct P<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) i: usize,
}

/// Zero bytes after each chunk: more than one 32-byte load (a predicted gap, `Gap`) past the chunk's last byte.
pub(crate) const PAD: usize = 64;

#[inline]
pub(crate) fn is_ws(c: u8) -> bool {
    c == b' ' || c == b'\n' || c == b'\r' || c == b'\t'
}

/// The end of the run of plain string bytes (none is '"', '\\', a control byte or non-ASCII: almost all string
/// bytes) starting at `i`: 16 bytes a step with SSE2 (every x86-64 has it), else 8 a step in a u64. Reads up to
/// 16 bytes past the run's end, which `PAD` keeps inside `b`.
#[inline]
pub(crate) fn plain_run(b: &[u8], mut i: usize) -> usize {
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
pub(crate) const POW10: [f64; 23] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
                          1e17, 1e18, 1e19, 1e20, 1e21, 1e22];

impl<'a> P<'a> {
    /// The byte at `i` (a zero at and past the chunk's end).
    #[inline(always)]
    pub(crate) fn c(&self) -> u8 {
        debug_assert!(self.i < self.b.len());
        // SAFETY: i <= n < b.len() (the struct's invariant: every step passes only non-zero bytes)
        unsafe { *self.b.get_unchecked(self.i) }
    }
    #[inline(always)]
    pub(crate) fn at(&self, j: usize) -> u8 {
        debug_assert!(j < self.b.len());
        // SAFETY: as `c`; callers step j over non-zero bytes only, starting at i
        unsafe { *self.b.get_unchecked(j) }
    }
    #[inline(always)]
    pub(crate) fn ws(&mut self) {
        while is_ws(self.c()) {
            self.i += 1;
        }
    }
    #[inline(always)]
    pub(crate) fn peek(&self) -> R<u8> {
        Ok(self.c())
    }
    #[inline(always)]
    pub(crate) fn expect(&mut self, c: u8) -> R<()> {
        if self.c() != c {
            return Err(Fail::Syntax);
        }
        self.i += 1;
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn run(&self, i: usize) -> usize {
        plain_run(self.b, i)
    }

    /// A string's raw bytes (the opening quote at self.i); validates escapes, control bytes and UTF-8.
    #[inline(always)]
    pub(crate) fn string(&mut self) -> R<(&'a [u8], bool)> {
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
    pub(crate) fn string_rest(&mut self, start: usize) -> R<(&'a [u8], bool)> {
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
    pub(crate) fn number(&mut self) -> R<Num> {
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
    pub(crate) fn exponent(&self, mut j: usize) -> R<(usize, bool)> {
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
    pub(crate) fn skip_number(&mut self) -> R<()> {
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

    pub(crate) fn literal(&mut self, word: &[u8]) -> R<()> {
        if self.b.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Fail::Syntax)
        }
    }

    /// Any JSON value, validated and dropped: numbers and strings here, the rest in `skip`.
    #[inline(always)]
    pub(crate) fn skip_value(&mut self, depth: usize) -> R<()> {
        match self.c() {
            b'-' | b'0'..=b'9' => self.skip_number(),
            b'"' => self.string().map(|_| ()),
            _ => self.skip(depth),
        }
    }

    /// A member or element of an object or array being skipped, at `depth`: numbers and strings without a call
    /// (a kernel's grid and block, a CPU op's input shapes), the depth limit checked first as `skip` does.
    #[inline(always)]
    pub(crate) fn skip_element(&mut self, depth: usize) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Fail::Unsupported);
        }
        self.skip_value(depth)
    }

    /// Any JSON value, validated and dropped.
    pub(crate) fn skip(&mut self, depth: usize) -> R<()> {
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
    pub(crate) fn scalar(&mut self, depth: usize) -> R<Val<'a>> {
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
    pub(crate) fn keyed_object<K: Copy, const N: usize, F: FnMut(&mut Self, Option<K>) -> R<()>>(
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
pub(crate) const POW10_INT: [u64; 20] = {
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
pub(crate) fn eight_digits(v: u64) -> u64 {
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    ((v & 0x0000_00FF_0000_00FF).wrapping_mul(100 + (1_000_000 << 32))
        .wrapping_add(((v >> 16) & 0x0000_00FF_0000_00FF).wrapping_mul(1 + (10_000 << 32)))) >> 32
}

/// The run of ASCII digits at `j`: (how many, their value; exact where there are at most 19). Up to 16 digits
/// are found with one 16-byte compare and converted 8 at a time; reads 16 bytes at `j <= n` (inside the padding).
#[inline(always)]
pub(crate) fn digits(b: &[u8], j: usize) -> (usize, u64) {
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
pub(crate) fn digits_slow(b: &[u8], mut j: usize) -> (usize, u64) {
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
pub(crate) fn plain_run16(b: &[u8], i: usize) -> usize {
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
