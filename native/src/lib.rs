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

mod layout; // generated from the Python column tables (python -m phaseprof.trace.native_layout)

mod abi;
mod codes;
mod columns;
mod event;
mod json;
mod scanner;

pub use abi::*;
use codes::*;
use columns::*;
use event::*;
use json::*;
use layout::*;
use scanner::*;

#[cfg(test)]
mod tests;
