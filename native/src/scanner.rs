//! The scanner: one chunk of events at a time into its families' columns (`TableBuilder.add`), and the
//! strings handed out at the end.

use super::*;

/// Families in the order of tables.py's FAMILIES, then "modules".
pub(crate) const MODULE_KIND: i8 = 8;

pub struct Scanner {
    pub(crate) fams: [Family; N_FAMILIES],
    pub(crate) mem: Memory,
    pub(crate) names: Codes,
    /// pid/tid values: key = tag byte (b'i' int, b's' string, b'n' null) + text
    pub(crate) ids: Codes,
    pub(crate) int_ids: FastMap<i64, i32>, // a cache over ``ids`` for integer pids/tids (cleared when a chunk fails)
    /// (str(pid), args.name) of process_name metadata events, in file order
    pub(crate) process_names: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) blob: Vec<u8>,
    pub(crate) offsets: Vec<u64>,
    pub(crate) pad: Vec<u8>,
    /// caches over `ids` and `names` (cleared when a chunk fails): the last two integer pids and tids with their
    /// codes (code -1: none), and the code of "" (-1: not given yet)
    pub(crate) last_ids: [[(i64, i32); 2]; 2],
    pub(crate) empty_name: i32,
    /// the last category string routed (its bytes as a u128 and its length; length u8::MAX: none) and what
    /// `category` gave for it
    pub(crate) last_cat: (u128, u8, Option<(i32, i8, bool)>),
    /// recent names and their codes, see `Codes::code_cached`
    pub(crate) name_cache: Box<[CachedName; NAME_CACHE]>,
}

impl Scanner {
    pub(crate) fn new() -> Self {
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
    pub(crate) fn id_code(&mut self, v: Val, key: &mut Vec<u8>, slot: usize) -> i32 {
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

    pub(crate) fn id_code_slow(&mut self, v: Val, key: &mut Vec<u8>) -> i32 {
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
    pub(crate) fn add(&mut self, data: &[u8], padded: bool, counts: &mut [u64; 2]) -> i32 {
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

    pub(crate) fn add_inner(&mut self, data: &[u8], counts: &mut [u64; 2]) -> R<()> {
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

    pub(crate) fn scan(&mut self, padded: &[u8], n: usize, counts: &mut [u64; 2]) -> R<()> {
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
    pub(crate) fn category_cached(&mut self, cat: &[u8]) -> Option<(i32, i8, bool)> {
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
    pub(crate) fn route(&mut self, e: &Event, key: &mut Vec<u8>, nbuf: &mut Vec<u8>) -> R<bool> {
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

    pub(crate) fn strings(&mut self, which: i32) -> usize {
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
