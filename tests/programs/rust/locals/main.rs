//! locals keeps values of each kind a line probe reads — string slices, a slice, a
//! struct with a string field, integers — live across calls, so that a release build
//! keeps them in registers, stack slots and pieces. Each call prints what it computed,
//! so the optimizer keeps every value.
//!
//! `locals CALLS`: handle is called CALLS times.

use std::hint::black_box;
use std::io::Write;

pub struct Point<'a> {
    pub x: i64,
    pub y: u32,
    pub tag: &'a str,
}

#[inline(never)]
pub fn handle(name: &str, n: i64, weights: &[i64]) -> i64 {
    let label = black_box(if n % 2 == 0 { "even" } else { "odd" });
    let p = Point { x: n * 3, y: weights.len() as u32, tag: label };
    let mut total = 0;
    for w in weights {
        total += black_box(w * p.x);
    }
    let kept = black_box(&weights[..(n as usize % weights.len()) + 1]);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{{\"name\":\"{}\",\"n\":{},\"x\":{},\"y\":{},\"tag\":\"{}\",\
                           \"total\":{},\"kept\":{}}}",
                     name, n, p.x, p.y, p.tag, total, kept.len());
    total + kept.len() as i64 + p.tag.len() as i64
}

fn main() {
    let calls: i64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(6);
    let weights = vec![2i64, 3, 5, 7];
    let mut sum = 0;
    for c in 0..calls {
        sum += handle(black_box("svc"), c, &weights[..(c as usize % 4) + 1]);
    }
    std::process::exit(if sum == 0 { 1 } else { 0 });
}
